//! # kiln-macros: kernels and device functions written in Rust
//!
//! `#[kiln::kernel]` and `#[kiln::device]` re-express a function body as kiln IR builder
//! calls (`kiln::ir`, `kiln::lang`): operators stay operators on `Val`s, comparisons and
//! `as` become calls, `let mut` becomes an IR local, `if`/`for`/`while`/`loop` become the
//! builder's control flow, `x[i]` becomes a load or a store. Rust's type checker then types
//! the kernel. Anything outside the supported subset is a compile error at the construct,
//! saying what to write instead.

#![deny(missing_docs)]
mod body;
mod intrinsic;
mod value;

use body::{Body, FnKind};
use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{parse_macro_input, FnArg, ItemFn, Pat, ReturnType, Type};

/// Turns a function into a kiln kernel. Its parameters are an optional index first
/// (`Index1D`, `Index2D`, `Index3D`), then views (`View<T>`, `ViewMut<T>`, `View2D<T>`,
/// `View2DMut<T>`, `View3D<T>`, `View3DMut<T>`) and values. The function becomes one that returns the kernel's
/// `kiln::lang::KernelFn`, which `Context::launch`, `launch_grouped` and `launch_grid` take
/// (as `saxpy` or `saxpy::<f32>` for a generic one).
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(
            Tokens::from(attr).span(),
            "#[kiln::kernel] takes no arguments",
        )
        .to_compile_error()
        .into();
    }
    let f = parse_macro_input!(item as ItemFn);
    match expand_kernel(f) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// A kernel written as a closure: `kiln::lambda!(move |i: Index1D, out: ViewMut<f32>| out[i]
/// = i as f32 * k)`. Its parameters are typed like a `#[kiln::kernel]` function's; names the
/// body uses without binding them (`k`) are captured by value and passed as parameters by
/// every launch, so the kernel compiles once whatever their values. Captures are kiln values
/// (scalars, vectors, `#[derive(kiln::Value)]` structs). Evaluates to a `kiln::lang::Lambda`
/// that `Context::launch` takes. (`kiln::kernel` is the attribute; a macro cannot share its
/// name.)
#[proc_macro]
pub fn lambda(input: TokenStream) -> TokenStream {
    let c = parse_macro_input!(input as syn::ExprClosure);
    match expand_lambda(c) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// Turns a function of values into a kiln device function, callable from kernels and usable
/// in queries (`ctx.from(&xs).map(my_fn)`). Inlined by the backends' compilers unless marked
/// `#[kiln::device(noinline)]` (or with `#[noinline]` under it), which keeps a real function
/// in the generated source.
#[proc_macro_attribute]
pub fn device(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = Tokens::from(attr);
    let mut noinline = false;
    if !attr.is_empty() {
        if attr.to_string() == "noinline" {
            noinline = true;
        } else {
            return syn::Error::new(attr.span(), "#[kiln::device] takes nothing or `noinline`")
                .to_compile_error()
                .into();
        }
    }
    let mut f = parse_macro_input!(item as ItemFn);
    let before = f.attrs.len();
    f.attrs.retain(|a| !a.path().is_ident("noinline"));
    noinline |= f.attrs.len() != before;
    match expand_device(f, noinline) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// Makes a function an intrinsic: `#[kiln::intrinsic(cuda = "tgammaf", opencl = "tgamma")]`
/// calls that backend function in the CUDA C or OpenCL C kiln generates, and runs the
/// function's Rust body on every other backend (the CPU always); `wgsl = "..."` binds a WGSL
/// function the same way. `cuda_source = EXPR` (likewise `opencl_source`, `wgsl_source`; any
/// `&str` expression, such as `include_str!("clamp.cu")`) gives source text that the program
/// includes and that defines the named function. Names are identifiers. An intrinsic takes
/// scalars, `#[derive(kiln::Value)]` structs, `View<T>` and `ViewMut<T>` of scalars (not on
/// WGSL) and returns a scalar, a struct or nothing. Use it alone, without `#[kiln::device]`.
#[proc_macro_attribute]
pub fn intrinsic(attr: TokenStream, item: TokenStream) -> TokenStream {
    let bindings = match intrinsic::parse_bindings(attr) {
        Ok(b) => b,
        Err(e) => return e.to_compile_error().into(),
    };
    let f = parse_macro_input!(item as ItemFn);
    match intrinsic::expand_intrinsic(f, bindings) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The rule kiln's IR validator applies to names (`kiln::ir::is_identifier`).
fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 64
        && !s.starts_with("__")
}

/// Makes a plain `#[repr(C)]` struct with named fields a kiln value: usable as a kernel or
/// device function parameter, a local and a buffer element (`View<S>`, host `&[S]`).
/// Kernels read fields with `p.x`, build values with `S { x: a, y: b }` and
/// replace fields of `let mut` locals and view elements with `p.x = v`. The struct is also a
/// query row (`kiln::Row`): `ctx.from(&structs)`, closures that read `p.x` and build
/// `kiln::Vals::<S> { x: .., ..p }`, `to_vec()` back into structs. The struct must have
/// no padding bytes (a compile error otherwise) and fields of kiln value types (scalars,
/// `Vector`, other kiln values).
#[proc_macro_derive(Value)]
pub fn derive_value(item: TokenStream) -> TokenStream {
    let input = parse_macro_input!(item as syn::DeriveInput);
    match value::expand_value(input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The last path segment's name of a type, when it is a plain path.
fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

fn reject_type(ty: &Type) -> syn::Result<()> {
    let why = match ty {
        Type::Reference(_) => Some(
            "kernel and device function parameters cannot be references; take a View<T> or \
             ViewMut<T> for memory and plain values for scalars",
        ),
        Type::Slice(_) | Type::Array(_) => Some(
            "kernel parameters cannot be slices or arrays; take a View<T> (read) or ViewMut<T> \
             (read-write)",
        ),
        Type::TraitObject(_) | Type::ImplTrait(_) => Some(
            "trait objects and `impl Trait` are not supported in kernels; use a generic \
             parameter with a trait bound (one kernel is compiled per type)",
        ),
        Type::Ptr(_) => Some("raw pointers are not supported in kernels; take a View<T>"),
        _ => None,
    };
    if let Some(why) = why {
        return Err(syn::Error::new(ty.span(), why));
    }
    if let Some(n) = type_name(ty) {
        let why = match n.as_str() {
            "Vec" | "Box" | "String" | "Rc" | "Arc" | "HashMap" => Some(format!(
                "`{n}` needs heap allocation, which kernels do not have; take a View<T> of the \
                 data instead"
            )),
            "usize" | "isize" => Some(format!(
                "`{n}` has no fixed size on GPUs; use u32 or i32 (or u64/i64)"
            )),
            _ => None,
        };
        if let Some(why) = why {
            return Err(syn::Error::new(ty.span(), why));
        }
    }
    Ok(())
}

fn param_ident(arg: &FnArg) -> syn::Result<(syn::Ident, Type)> {
    match arg {
        FnArg::Receiver(r) => Err(syn::Error::new(
            r.span(),
            "kernels and device functions are free functions; `self` is not supported",
        )),
        FnArg::Typed(t) => match &*t.pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                if p.mutability.is_some() {
                    return Err(syn::Error::new(
                        p.span(),
                        "parameters cannot be `mut`; copy the value into a `let mut` local",
                    ));
                }
                Ok((p.ident.clone(), (*t.ty).clone()))
            }
            other => Err(syn::Error::new(
                other.span(),
                "parameters must be plain names (`x: f32`)",
            )),
        },
    }
}

fn check_signature(f: &ItemFn) -> syn::Result<()> {
    let s = &f.sig;
    if let Some(a) = &s.asyncness {
        return Err(syn::Error::new(
            a.span(),
            "kernels cannot be async; a launch already runs asynchronously on the device",
        ));
    }
    if let Some(u) = &s.unsafety {
        return Err(syn::Error::new(
            u.span(),
            "kernels and device functions cannot be unsafe",
        ));
    }
    if let Some(v) = &s.variadic {
        return Err(syn::Error::new(
            v.span(),
            "variadic functions are not supported",
        ));
    }
    if let Some(l) = s.generics.lifetimes().next() {
        return Err(syn::Error::new(
            l.span(),
            "lifetimes are not supported in kernels (there are no references to borrow)",
        ));
    }
    Ok(())
}

fn generic_args(g: &syn::Generics) -> Tokens {
    let args: Vec<Tokens> = g
        .params
        .iter()
        .filter_map(|p| match p {
            syn::GenericParam::Type(t) => Some(t.ident.to_token_stream()),
            syn::GenericParam::Const(c) => Some(c.ident.to_token_stream()),
            syn::GenericParam::Lifetime(_) => None,
        })
        .collect();
    if args.is_empty() {
        quote!()
    } else {
        quote!(::<#(#args),*>)
    }
}

/// A kernel's parameters as the build code sees them: the index (first, optional), the
/// declarations of the others in order, and their types.
struct KernelParams {
    index: Option<(syn::Ident, Type)>,
    declares: Vec<Tokens>,
    types: Vec<Type>,
}

fn kernel_params(params: Vec<(syn::Ident, Type)>, cx: &mut Body) -> syn::Result<KernelParams> {
    let mut out = KernelParams {
        index: None,
        declares: Vec::new(),
        types: Vec::new(),
    };
    for (i, (id, ty)) in params.into_iter().enumerate() {
        reject_type(&ty)?;
        let tn = type_name(&ty).unwrap_or_default();
        cx.bind(&id, false);
        if matches!(tn.as_str(), "Index1D" | "Index2D" | "Index3D") {
            if i != 0 {
                return Err(syn::Error::new(
                    ty.span(),
                    "the index (Index1D, Index2D or Index3D) must be the first parameter",
                ));
            }
            out.index = Some((id, ty));
            continue;
        }
        let lit = syn::LitStr::new(&id.to_string(), id.span());
        out.declares.push(quote_spanned! {ty.span()=>
            let #id = <#ty as ::kiln::lang::KernelParam>::declare(__kiln_scope, #lit);
        });
        out.types.push(ty);
    }
    Ok(out)
}

/// The index's dimensions and the body, run only inside the launch's extent when the kernel
/// takes an index.
fn index_and_body(index: &Option<(syn::Ident, Type)>, inner: Tokens) -> (Tokens, Tokens) {
    match index {
        Some((id, ty)) => (
            quote!(<#ty as ::kiln::lang::KernelIndex>::DIMS),
            quote! {
                let (__kiln_pos, __kiln_inside) = ::kiln::lang::declare_extent(
                    __kiln_scope,
                    <#ty as ::kiln::lang::KernelIndex>::DIMS,
                );
                let #id = <#ty as ::kiln::lang::KernelIndex>::from_position(__kiln_pos);
                ::kiln::ir::if_then(__kiln_inside, || { #inner });
            },
        ),
        None => (quote!(0), inner),
    }
}

fn expand_kernel(f: ItemFn) -> syn::Result<Tokens> {
    check_signature(&f)?;
    if let ReturnType::Type(_, ty) = &f.sig.output {
        return Err(syn::Error::new(
            ty.span(),
            "kernels return nothing; write results into a ViewMut<T> parameter",
        ));
    }
    let name = &f.sig.ident;
    let name_str = name.to_string();
    let vis = &f.vis;
    let attrs = &f.attrs;
    let generics = &f.sig.generics;
    let (impl_g, _, where_clause) = generics.split_for_impl();
    let turbofish = generic_args(generics);
    let params = f
        .sig
        .inputs
        .iter()
        .map(param_ident)
        .collect::<syn::Result<Vec<_>>>()?;
    let mut cx = Body::new(FnKind::Kernel);
    let KernelParams {
        index,
        declares,
        types: param_types,
    } = kernel_params(params, &mut cx)?;
    let inner = cx.block_stmts(&f.block)?;
    let (dims, body) = index_and_body(&index, inner);
    Ok(quote! {
        #(#attrs)*
        #[allow(non_snake_case, unused_variables, unused_mut, unused_parens, clippy::all)]
        #vis fn #name #impl_g () -> ::kiln::lang::KernelFn<(#(#param_types,)*)> #where_clause {
            #[allow(non_snake_case, unused_variables, unused_mut, unused_braces, unused_parens, unreachable_code, clippy::all)]
            fn __kiln_build #impl_g (__kiln_scope: &::kiln::ir::KernelScope) #where_clause {
                #(#declares)*
                #body
            }
            ::kiln::lang::KernelFn::new(#name_str, #dims, __kiln_build #turbofish)
        }
    })
}

/// `kiln::lambda!(|i: Index1D, out: ViewMut<f32>| out[i] = i as f32 * k)`: a closure kernel
/// whose free names (`k`) are captured by value and become parameters after its own.
fn expand_lambda(c: syn::ExprClosure) -> syn::Result<Tokens> {
    if let Some(a) = &c.asyncness {
        return Err(syn::Error::new(a.span(), "kernels cannot be async"));
    }
    if let ReturnType::Type(_, ty) = &c.output {
        return Err(syn::Error::new(
            ty.span(),
            "kernels return nothing; write results into a ViewMut<T> parameter",
        ));
    }
    let mut params = Vec::new();
    for p in &c.inputs {
        match p {
            Pat::Type(t) => match &*t.pat {
                Pat::Ident(i) if i.by_ref.is_none() && i.subpat.is_none() => {
                    if i.mutability.is_some() {
                        return Err(syn::Error::new(
                            i.span(),
                            "parameters cannot be `mut`; copy the value into a `let mut` local",
                        ));
                    }
                    params.push((i.ident.clone(), (*t.ty).clone()))
                }
                other => {
                    return Err(syn::Error::new(
                        other.span(),
                        "parameters must be plain names (`x: f32`)",
                    ))
                }
            },
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "give each closure parameter its type (`|i: Index1D, out: ViewMut<f32>|`): \
                     the kernel's parameter types come from them",
                ))
            }
        }
    }
    let mut cx = Body::closure();
    let KernelParams {
        index,
        declares,
        types,
    } = kernel_params(params, &mut cx)?;
    let inner = match &*c.body {
        syn::Expr::Block(b) if b.label.is_none() => cx.block_stmts(&b.block)?,
        other => {
            let at = body::source_note(other.span());
            let t = cx.stmt_expr(other)?;
            quote!(#at #t)
        }
    };
    let caps = cx.captures().to_vec();
    let fields = (0..caps.len()).map(syn::Index::from);
    let cap_names = caps
        .iter()
        .map(|c| syn::LitStr::new(&c.to_string(), c.span()));
    let (dims, body) = index_and_body(&index, inner);
    let name = quote_spanned!(c.span()=> ::core::concat!("lambda_", ::core::line!()));
    Ok(quote! {{
        let __kiln_captured = (#(#caps,)*);
        #[allow(non_snake_case, unused_variables, unused_mut, unused_braces, unused_parens, unreachable_code, clippy::all)]
        let __kiln_lambda = ::kiln::lang::Lambda::<(#(#types,)*), _>::new(
            #name,
            #dims,
            __kiln_captured,
            |__kiln_scope: &::kiln::ir::KernelScope, __kiln_c| {
                #(#declares)*
                #(let #caps = ::kiln::lang::capture(
                    __kiln_scope,
                    #cap_names,
                    __kiln_c,
                    |__kiln_t| &__kiln_t.#fields,
                );)*
                #body
            },
        );
        __kiln_lambda
    }})
}

/// Whether a device function parameter of type `ty` is memory or an index (which makes the
/// function one built into each caller).
fn is_view_or_index(ty: &Type) -> bool {
    type_name(ty).is_some_and(|n| {
        n.starts_with("View") || matches!(n.as_str(), "Shared" | "Index2D" | "Index3D")
    })
}

/// A device function's or intrinsic's signature, checked: its result type, if any, and its
/// parameters' names and types.
type Signature = (Option<Type>, Vec<(syn::Ident, Type)>);

fn device_signature(f: &ItemFn) -> syn::Result<Signature> {
    check_signature(f)?;
    let ret = match &f.sig.output {
        ReturnType::Type(_, ty) => {
            reject_type(ty)?;
            Some((**ty).clone())
        }
        ReturnType::Default => None,
    };
    let params = f
        .sig
        .inputs
        .iter()
        .map(param_ident)
        .collect::<syn::Result<Vec<_>>>()?;
    for (_, ty) in &params {
        reject_type(ty)?;
    }
    Ok((ret, params))
}

fn expand_device(f: ItemFn, noinline: bool) -> syn::Result<Tokens> {
    let (ret, params) = device_signature(&f)?;
    let views = params.iter().find(|(_, ty)| is_view_or_index(ty));
    let ret = match (views, ret) {
        (None, Some(ret)) => ret,
        (views, ret) => {
            let at = match views {
                Some((_, ty)) => ty.span(),
                None => f.sig.ident.span(),
            };
            if noinline {
                return Err(syn::Error::new(
                    at,
                    "a device function that takes views or returns nothing is built into each \
                     caller; `noinline` needs one that takes and returns values",
                ));
            }
            return expand_inline_device(&f, params, ret);
        }
    };
    let name = &f.sig.ident;
    let name_str = name.to_string();
    let vis = &f.vis;
    let attrs = &f.attrs;
    let generics = &f.sig.generics;
    let (impl_g, _, where_clause) = generics.split_for_impl();
    let mut cx = Body::device(name, FnKind::Device(Box::new(ret.clone())));
    let mut args = Vec::new();
    let mut converts = Vec::new();
    let mut decls = Vec::new();
    let mut unpack = Vec::new();
    for (i, (id, ty)) in params.iter().enumerate() {
        let lit = syn::LitStr::new(&id.to_string(), id.span());
        args.push(quote!(#id: impl ::kiln::ir::IntoVal<#ty>));
        converts.push(quote!(::kiln::ir::IntoVal::<#ty>::into_val(#id).erase()));
        decls.push(quote!((#lit, <#ty as ::kiln::ir::IrType>::ir_type())));
        let idx = syn::Index::from(i);
        unpack.push(quote!(let #id: ::kiln::ir::Val<#ty> = __kiln_params[#idx].typed::<#ty>();));
        cx.bind(id, false);
    }
    let body = cx.device_body(&f.block)?;
    Ok(quote! {
        #(#attrs)*
        #[allow(non_snake_case, unused_variables, unused_mut, unused_braces, unused_parens, unreachable_code, clippy::all)]
        #vis fn #name #impl_g (#(#args),*) -> ::kiln::ir::Val<#ret> #where_clause {
            let __kiln_args = [#(#converts),*];
            let __kiln_fn = ::kiln::ir::device_fn::<#ret>(
                #name_str,
                &[#(#decls),*],
                #noinline,
                |__kiln_params| {
                    #(#unpack)*
                    #body
                },
            );
            __kiln_fn.call(&__kiln_args)
        }
    })
}

/// A device function that takes views (or indices) or returns nothing: a Rust function whose
/// statements are built straight into the caller's body at each call.
fn expand_inline_device(
    f: &ItemFn,
    params: Vec<(syn::Ident, Type)>,
    ret: Option<Type>,
) -> syn::Result<Tokens> {
    let name = &f.sig.ident;
    let vis = &f.vis;
    let attrs = &f.attrs;
    let generics = &f.sig.generics;
    let (impl_g, _, where_clause) = generics.split_for_impl();
    let mut cx = Body::device(name, FnKind::Inline(ret.clone().map(Box::new)));
    let mut args = Vec::new();
    let mut unpack = Vec::new();
    for (id, ty) in &params {
        if is_view_or_index(ty) {
            args.push(quote!(#id: #ty));
        } else {
            args.push(quote!(#id: impl ::kiln::ir::IntoVal<#ty>));
            unpack.push(
                quote!(let #id: ::kiln::ir::Val<#ty> = ::kiln::ir::IntoVal::<#ty>::into_val(#id);),
            );
        }
        cx.bind(id, false);
    }
    let (out, body) = match &ret {
        Some(r) => (quote!(::kiln::ir::Val<#r>), cx.device_body(&f.block)?),
        None => (quote!(()), cx.block_stmts(&f.block)?),
    };
    Ok(quote! {
        #(#attrs)*
        #[allow(non_snake_case, unused_variables, unused_mut, unused_braces, unused_parens, unreachable_code, clippy::all)]
        #vis fn #name #impl_g (#(#args),*) -> #out #where_clause {
            #(#unpack)*
            #body
        }
    })
}

pub(crate) fn error(span: Span, msg: &str) -> syn::Error {
    syn::Error::new(span, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message of the error a kernel expands to; fails when it expands.
    fn kernel_error(src: &str) -> String {
        let f: ItemFn = syn::parse_str(src).expect("test source parses");
        match expand_kernel(f) {
            Ok(t) => panic!("expanded without an error:\n{t}"),
            Err(e) => e.to_string(),
        }
    }

    fn device_error(src: &str) -> String {
        let f: ItemFn = syn::parse_str(src).expect("test source parses");
        match expand_device(f, false) {
            Ok(t) => panic!("expanded without an error:\n{t}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn constructs_outside_the_subset_are_errors_that_say_what_to_do() {
        let cases = [
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { let v = vec![1.0]; }",
                "kernels have no heap",
            ),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { let s = String::new(); y[i] = \"x\"; }",
                "strings are not supported",
            ),
            ("fn k(x: &[f32]) {}", "take a View<T> or ViewMut<T>"),
            ("fn k(x: Vec<f32>) {}", "heap allocation"),
            ("fn k(x: Box<dyn Fn()>) {}", "heap allocation"),
            ("fn k(x: &dyn Op) {}", "cannot be references"),
            (
                "fn k(i: Index1D) { panic!(\"no\"); }",
                "kernels cannot panic",
            ),
            ("fn k(i: Index1D) { println!(\"{}\", 1); }", "cannot print"),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { y[i] = match i { 1 => 2.0, 2 => 3.0 }; }",
                "end a kernel `match` with a `_ =>` arm",
            ),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { match i { 1 => {}, LIMIT => {} } }",
                "end a kernel `match` with a `_ =>` arm",
            ),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { match (i, i) { (a, b) => {}, _ => {} } }",
                "destructure structs and tuples with field access",
            ),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { match i { 1 | x => {}, _ => {} } }",
                "`|` patterns cannot bind names",
            ),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { let f = |x| x; }",
                "write a #[kiln::device] function",
            ),
            ("fn k(i: Index1D) -> f32 { 1.0 }", "kernels return nothing"),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { let x = 1.0; x = 2.0; }",
                "declare it with `let mut x`",
            ),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { for v in y.iter() {} }",
                "integer ranges",
            ),
            ("fn k(i: Index1D) { 'a: loop { break 'a; } }", "labels"),
            (
                "fn k(y: ViewMut<f32>, i: Index1D) {}",
                "must be the first parameter",
            ),
            ("async fn k(i: Index1D) {}", "cannot be async"),
            ("fn k(i: Index1D, n: usize) {}", "use u32 or i32"),
            ("fn k(i: Index1D) { fn inner() {} }", "#[kiln::device]"),
            (
                "fn k(i: Index1D, y: ViewMut<f32>) { let r = &mut y; }",
                "`&mut` is not supported",
            ),
            (
                "fn k(i: Index1D) { let x = foo()?; }",
                "kernels have no Result",
            ),
        ];
        for (src, want) in cases {
            let msg = kernel_error(src);
            assert!(msg.contains(want), "{src}\n  gave: {msg}\n  want: {want}");
        }
    }

    #[test]
    fn device_function_bodies_keep_the_rules_of_their_kind() {
        let cases = [
            (
                "fn f(x: View<f32>, i: u32) -> f32 { if i > 3 { return 0.0; } x[i] }",
                "`return` can only be its last statement",
            ),
            (
                "fn f(x: f32) -> f32 { return x; x }",
                "code after this `return` never runs",
            ),
            (
                "fn f(x: f32) -> f32 { let y = shared::<f32, 4>(); x }",
                "kernel body",
            ),
            (
                "fn f(x: f32) -> f32 { let y = x; }",
                "ends with the value it returns",
            ),
        ];
        for (src, want) in cases {
            let msg = device_error(src);
            assert!(msg.contains(want), "{src}\n  gave: {msg}\n  want: {want}");
        }
    }

    #[test]
    fn errors_point_at_the_construct() {
        let src = "fn k(i: Index1D, y: ViewMut<f32>) {\n    let a = 1;\n    panic!(\"no\");\n}";
        let f: ItemFn = syn::parse_str(src).expect("parses");
        let err = expand_kernel(f).expect_err("panic! is rejected");
        let start = err.span().start();
        assert_eq!(
            (start.line, start.column),
            (3, 4),
            "the span starts at `panic!`"
        );
        let g: ItemFn =
            syn::parse_str("fn k(i: Index1D, n: f32,\n  v: &[f32]) {}").expect("parses");
        let err = expand_kernel(g).expect_err("a slice parameter is rejected");
        let start = err.span().start();
        assert_eq!(
            (start.line, start.column),
            (2, 5),
            "the span starts at the type"
        );
    }
}
