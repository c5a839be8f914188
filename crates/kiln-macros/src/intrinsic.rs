//! `#[kiln::intrinsic]`: a function bound to a function of some target languages (a built-in,
//! or one whose source the attribute gives), with its Rust body as the fallback everywhere
//! else.

use crate::body::{Body, FnKind};
use crate::{device_signature, is_c_identifier, type_name};
use proc_macro2::TokenStream as Tokens;
use quote::quote;
use syn::spanned::Spanned;
use syn::{ItemFn, Type};

const TARGETS: [&str; 3] = ["cuda", "opencl", "wgsl"];

/// What the attribute says of one target: the function's name and the source defining it.
#[derive(Default)]
pub(crate) struct Binding {
    name: Option<syn::LitStr>,
    source: Option<syn::Expr>,
}

/// Parses `cuda = "name", cuda_source = EXPR, opencl = .., wgsl = ..` into one binding per
/// target of [`TARGETS`].
pub(crate) fn parse_bindings(attr: proc_macro::TokenStream) -> syn::Result<[Binding; 3]> {
    let mut out: [Binding; 3] = Default::default();
    let parser = syn::meta::parser(|meta| {
        let key = meta
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let (target, is_source) = match key.strip_suffix("_source") {
            Some(t) => (t, true),
            None => (key.as_str(), false),
        };
        let Some(t) = TARGETS.iter().position(|n| *n == target) else {
            return Err(meta.error(
                "#[kiln::intrinsic] takes `cuda`, `opencl` and `wgsl` (function names) and \
                 `cuda_source`, `opencl_source` and `wgsl_source` (the source defining them)",
            ));
        };
        let b = &mut out[t];
        let given_twice = match is_source {
            true => b.source.is_some(),
            false => b.name.is_some(),
        };
        if given_twice {
            return Err(meta.error(format!("`{key}` is given twice")));
        }
        if is_source {
            b.source = Some(meta.value()?.parse()?);
            return Ok(());
        }
        let name: syn::LitStr = meta.value()?.parse()?;
        if !is_c_identifier(&name.value()) {
            return Err(syn::Error::new(
                name.span(),
                "a backend function name is an identifier: a letter or `_`, then letters, \
                 digits and `_` (at most 64, not starting with `__`)",
            ));
        }
        b.name = Some(name);
        Ok(())
    });
    syn::parse::Parser::parse(parser, attr)?;
    Ok(out)
}

/// The expansion of `#[kiln::intrinsic(..)]` on `f`: a function that builds a call of the
/// intrinsic (`kiln::ir::native_call`, or `native_effect` when it returns nothing). Its Rust
/// body is the fallback, built as a device function when the intrinsic takes and returns
/// values, and into the caller (like a device function that takes views) otherwise.
pub(crate) fn expand_intrinsic(f: ItemFn, bindings: [Binding; 3]) -> syn::Result<Tokens> {
    let (ret, params) = device_signature(&f)?;
    if bindings.iter().all(|b| b.name.is_none()) {
        return Err(syn::Error::new(
            f.sig.ident.span(),
            "#[kiln::intrinsic] names at least one backend function (`cuda = \"tgammaf\"`)",
        ));
    }
    for (t, b) in TARGETS.iter().zip(&bindings) {
        if let (None, Some(src)) = (&b.name, &b.source) {
            return Err(syn::Error::new(
                src.span(),
                format!(
                    "`{t}_source` needs `{t} = \"name\"`: the function it defines that kiln calls"
                ),
            ));
        }
        if let Some(n) = b.name.as_ref().filter(|n| f.sig.ident == n.value()) {
            return Err(syn::Error::new(
                n.span(),
                "the Rust function has the backend function's name, so the binding would call \
                 itself; rename the Rust function",
            ));
        }
    }
    let mut views = false;
    for (_, ty) in &params {
        match type_name(ty).as_deref() {
            Some("View" | "ViewMut") => views = true,
            Some(n) if n.starts_with("View") || matches!(n, "Shared" | "Index2D" | "Index3D") => {
                return Err(syn::Error::new(
                    ty.span(),
                    "an intrinsic takes values (scalars, `#[derive(kiln::Value)]` structs), \
                     `View<T>` and `ViewMut<T>`",
                ))
            }
            _ => {}
        }
    }
    if let (true, Some(w)) = (views, &bindings[2].name) {
        return Err(syn::Error::new(
            w.span(),
            "WGSL functions cannot take views (storage pointers as arguments need WGSL's \
             unrestricted_pointer_parameters, which naga does not implement); leave out `wgsl` \
             and wgpu runs the Rust body",
        ));
    }
    let name = &f.sig.ident;
    let name_str = name.to_string();
    let vis = &f.vis;
    let attrs = &f.attrs;
    let generics = &f.sig.generics;
    let (impl_g, _, where_clause) = generics.split_for_impl();
    let is_view = |ty: &Type| matches!(type_name(ty).as_deref(), Some("View" | "ViewMut"));
    let mut args = Vec::new();
    let mut unpack = Vec::new();
    let mut decls = Vec::new();
    let mut inputs = Vec::new();
    for (id, ty) in &params {
        let lit = syn::LitStr::new(&id.to_string(), id.span());
        decls.push(quote!(::kiln::ir::Param {
            name: ::std::string::String::from(#lit),
            kind: <#ty as ::kiln::ir::NativeParamType>::native_param(),
        }));
        inputs.push(quote!(::kiln::ir::NativeInput::from(#id)));
        if is_view(ty) {
            args.push(quote!(#id: #ty));
        } else {
            args.push(quote!(#id: impl ::kiln::ir::IntoVal<#ty>));
            unpack.push(
                quote!(let #id: ::kiln::ir::Val<#ty> = ::kiln::ir::IntoVal::<#ty>::into_val(#id);),
            );
        }
    }
    let code = |b: &Binding| match (&b.name, &b.source) {
        (None, _) => quote!(::std::option::Option::None),
        (Some(n), s) => {
            let source = match s {
                Some(s) => quote!(::std::option::Option::Some(::std::string::String::from(#s))),
                None => quote!(::std::option::Option::None),
            };
            quote!(::std::option::Option::Some(::kiln::ir::NativeCode {
                name: ::std::string::String::from(#n),
                source: #source,
            }))
        }
    };
    let [cuda, opencl, wgsl] = [code(&bindings[0]), code(&bindings[1]), code(&bindings[2])];
    let result = match &ret {
        Some(r) => quote!(::std::option::Option::Some(<#r as ::kiln::ir::IrType>::ir_type())),
        None => quote!(::std::option::Option::None),
    };
    let fallback = match (&ret, views) {
        (Some(r), false) => value_fallback(&f, &params, r)?,
        (ret, _) => {
            let mut cx = Body::device(name, FnKind::Inline(ret.clone().map(Box::new)));
            for (id, _) in &params {
                cx.bind(id, false);
            }
            match ret {
                Some(_) => cx.device_body(&f.block)?,
                None => cx.block_stmts(&f.block)?,
            }
        }
    };
    let (out, call) = match &ret {
        Some(r) => (
            quote!(::kiln::ir::Val<#r>),
            quote!(::kiln::ir::native_call::<#r>),
        ),
        None => (quote!(()), quote!(::kiln::ir::native_effect)),
    };
    Ok(quote! {
        #(#attrs)*
        #[allow(non_snake_case, unused_variables, unused_mut, unused_braces, unused_parens, unreachable_code, clippy::all)]
        #vis fn #name #impl_g (#(#args),*) -> #out #where_clause {
            #(#unpack)*
            let __kiln_native = ::kiln::ir::Native {
                name: ::std::string::String::from(#name_str),
                params: ::std::vec![#(#decls),*],
                result: #result,
                cuda: #cuda,
                opencl: #opencl,
                wgsl: #wgsl,
            };
            #call(__kiln_native, &[#(#inputs),*], || { #fallback })
        }
    })
}

/// The Rust body of an intrinsic of values as a device function of the same name, called
/// with the parameters (so `return` works anywhere in it, as in any device function).
fn value_fallback(f: &ItemFn, params: &[(syn::Ident, Type)], ret: &Type) -> syn::Result<Tokens> {
    let name = &f.sig.ident;
    let name_str = name.to_string();
    let mut cx = Body::device(name, FnKind::Device(Box::new(ret.clone())));
    let mut decls = Vec::new();
    let mut converts = Vec::new();
    let mut unpack = Vec::new();
    for (i, (id, ty)) in params.iter().enumerate() {
        let lit = syn::LitStr::new(&id.to_string(), id.span());
        decls.push(quote!((#lit, <#ty as ::kiln::ir::IrType>::ir_type())));
        converts.push(quote!(#id.erase()));
        let idx = syn::Index::from(i);
        unpack.push(quote!(let #id: ::kiln::ir::Val<#ty> = __kiln_params[#idx].typed::<#ty>();));
        cx.bind(id, false);
    }
    let body = cx.device_body(&f.block)?;
    Ok(quote! {
        let __kiln_args = [#(#converts),*];
        ::kiln::ir::device_fn::<#ret>(
            #name_str,
            &[#(#decls),*],
            false,
            |__kiln_params| {
                #(#unpack)*
                #body
            },
        )
        .call(&__kiln_args)
    })
}
