//! The body translator: Rust statements and expressions to kiln IR builder calls.

use crate::error;
use proc_macro2::TokenStream as Tokens;
use quote::{quote, quote_spanned, ToTokens};
use std::collections::HashMap;
use syn::spanned::Spanned;
use syn::{BinOp, Block, Expr, Lit, Pat, Stmt, Type, UnOp};

mod expr;

/// What is being translated.
pub enum FnKind {
    /// A kernel body: `return` leaves the kernel.
    Kernel,
    /// A device function returning this type.
    Device(Box<Type>),
    /// A device function built into each caller (it takes views or returns nothing), returning
    /// this type if any: `return` only as its last statement.
    Inline(Option<Box<Type>>),
}

/// The translator's state: which names are IR locals (`let mut`) in each scope, and for a
/// closure kernel the free names it captures.
pub struct Body {
    kind: FnKind,
    scopes: Vec<HashMap<String, bool>>,
    captures: Option<Vec<syn::Ident>>,
    /// The device function being translated, whose calls to itself are errors.
    name: Option<String>,
}

type R<T> = syn::Result<T>;

impl Body {
    pub fn new(kind: FnKind) -> Body {
        Body {
            kind,
            scopes: vec![HashMap::new()],
            captures: None,
            name: None,
        }
    }

    /// A translator for the device function `name` of kind `kind`.
    pub fn device(name: &syn::Ident, kind: FnKind) -> Body {
        Body {
            name: Some(name.to_string()),
            ..Body::new(kind)
        }
    }

    /// A translator for a closure kernel: names used as values that nothing in the closure
    /// binds (and that are not constants, which start with a capital) are captures.
    pub fn closure() -> Body {
        Body {
            captures: Some(Vec::new()),
            ..Body::new(FnKind::Kernel)
        }
    }

    /// The captured names in order of first use (closure kernels).
    pub fn captures(&self) -> &[syn::Ident] {
        self.captures.as_deref().unwrap_or_default()
    }

    fn note_capture(&mut self, id: &syn::Ident) {
        let name = id.to_string();
        let bound = self.scopes.iter().any(|s| s.contains_key(&name));
        if let Some(caps) = &mut self.captures {
            if !bound && !caps.contains(id) && name.starts_with(|c: char| c.is_lowercase()) {
                caps.push(id.clone());
            }
        }
    }

    /// Declares `name` in the innermost scope; `var` when it is an IR local read with `.get()`.
    pub fn bind(&mut self, name: &syn::Ident, var: bool) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name.to_string(), var);
        }
    }

    fn is_var(&self, name: &str) -> bool {
        self.scopes
            .iter()
            .rev()
            .find_map(|s| s.get(name).copied())
            .unwrap_or(false)
    }

    fn scoped<T>(&mut self, f: impl FnOnce(&mut Body) -> R<T>) -> R<T> {
        self.scopes.push(HashMap::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    /// A block in statement position: every statement, no value.
    pub fn block_stmts(&mut self, b: &Block) -> R<Tokens> {
        self.scoped(|cx| {
            let mut out = Tokens::new();
            for s in &b.stmts {
                out.extend(cx.stmt(s)?);
            }
            Ok(out)
        })
    }

    /// A device function body: statements, then its value (the tail expression or a final
    /// `return`).
    pub fn device_body(&mut self, b: &Block) -> R<Tokens> {
        let (FnKind::Device(ret) | FnKind::Inline(Some(ret))) = &self.kind else {
            return Err(error(
                b.span(),
                "internal: not a device function with a result",
            ));
        };
        let ret = (**ret).clone();
        self.scoped(|cx| {
            let mut out = Tokens::new();
            let n = b.stmts.len();
            for (i, s) in b.stmts.iter().enumerate() {
                let last = i + 1 == n;
                match s {
                    Stmt::Expr(e, None) if last => {
                        let v = cx.expr(e)?;
                        let at = source_note(e.span());
                        out.extend(quote!(#at ::kiln::ir::IntoVal::<#ret>::into_val(#v)));
                        return Ok(out);
                    }
                    Stmt::Expr(Expr::Return(r), _) if last => {
                        let Some(e) = &r.expr else {
                            return Err(error(r.span(), "a device function returns a value"));
                        };
                        let v = cx.expr(e)?;
                        out.extend(quote!(::kiln::ir::IntoVal::<#ret>::into_val(#v)));
                        return Ok(out);
                    }
                    Stmt::Expr(Expr::Return(r), _) => {
                        return Err(error(
                            r.span(),
                            "code after this `return` never runs; remove it",
                        ))
                    }
                    _ => out.extend(cx.stmt(s)?),
                }
            }
            Err(error(
                b.span(),
                "a device function ends with the value it returns",
            ))
        })
    }

    fn stmt(&mut self, s: &Stmt) -> R<Tokens> {
        let at = source_note(s.span());
        let t = match s {
            Stmt::Local(l) => self.local(l)?,
            Stmt::Expr(e, _) => self.stmt_expr(e)?,
            Stmt::Item(i) => {
                return Err(error(
                    i.span(),
                    "items (fn, struct, use, const) inside a kernel are not supported; define \
                     them outside, marking helper functions #[kiln::device]",
                ))
            }
            Stmt::Macro(m) => return Err(macro_error(&m.mac)),
        };
        Ok(quote!(#at #t))
    }

    fn local(&mut self, l: &syn::Local) -> R<Tokens> {
        if let Some(e) = &l.init {
            if let Some((_, d)) = &e.diverge {
                return Err(error(
                    d.span(),
                    "`let ... else` is not supported in kernels",
                ));
            }
        }
        let init = l.init.as_ref().map(|i| &*i.expr);
        let (pat, ty) = match &l.pat {
            Pat::Type(t) => (&*t.pat, Some(&*t.ty)),
            p => (p, None),
        };
        if let Some(ty) = ty {
            crate::reject_type(ty).or_else(|e| match ty {
                Type::Array(_) => Ok(()),
                _ => Err(e),
            })?;
        }
        match pat {
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                let id = &p.ident;
                let name = syn::LitStr::new(&id.to_string(), id.span());
                let Some(init) = init else {
                    return Err(error(
                        l.span(),
                        "give every local a value where it is declared (`let x = 0.0;`)",
                    ));
                };
                if let Some(t) = self.shared_decl(init, &name)? {
                    if p.mutability.is_some() {
                        return Err(error(
                            p.span(),
                            "shared memory is written through indexing; declare it without `mut`",
                        ));
                    }
                    self.bind(id, false);
                    return Ok(quote!(let #id = #t;));
                }
                let elem_ty = match ty {
                    Some(Type::Array(a)) => Some(scalar_type(&a.elem)),
                    _ => None,
                };
                match init {
                    Expr::Repeat(r) => {
                        let v = self.expr(&r.expr)?;
                        let n = &r.len;
                        let t = elem_ty.unwrap_or_else(|| quote!(_));
                        self.bind(id, false);
                        return Ok(quote_spanned! {r.span()=>
                            let #id = ::kiln::lang::local_array::<#t, { (#n) as u32 }>(#name, #v);
                        });
                    }
                    Expr::Array(a) => {
                        let items = a
                            .elems
                            .iter()
                            .map(|e| {
                                let v = self.expr(e)?;
                                Ok(quote!(::kiln::ir::IntoVal::into_val(#v)))
                            })
                            .collect::<R<Vec<_>>>()?;
                        let t = elem_ty.unwrap_or_else(|| quote!(_));
                        self.bind(id, false);
                        return Ok(quote_spanned! {a.span()=>
                            let #id = ::kiln::lang::local_array_of::<#t, _>(#name, [#(#items),*]);
                        });
                    }
                    _ => {}
                }
                let v = self.expr(init)?;
                let ty = ty.map(scalar_type);
                if p.mutability.is_some() {
                    let t = ty.unwrap_or_else(|| quote!(_));
                    self.bind(id, true);
                    Ok(quote_spanned! {l.span()=> let #id = ::kiln::ir::Var::<#t>::new(#name, #v);})
                } else {
                    self.bind(id, false);
                    match ty {
                        Some(t) => Ok(quote!(let #id = ::kiln::lang::typed::<#t>(#v);)),
                        None => Ok(quote!(let #id = #v;)),
                    }
                }
            }
            Pat::Tuple(t) => {
                let mut names = Vec::new();
                for p in &t.elems {
                    match p {
                        Pat::Ident(i) if i.by_ref.is_none() && i.subpat.is_none() => {
                            names.push((i.ident.clone(), i.mutability.is_some()))
                        }
                        Pat::Wild(_) => names.push((syn::Ident::new("_", p.span()), false)),
                        other => {
                            return Err(error(
                                other.span(),
                                "tuple patterns bind plain names (`let (a, mut b) = ...`)",
                            ))
                        }
                    }
                }
                let Some(init) = init else {
                    return Err(error(
                        l.span(),
                        "give every local a value where it is declared",
                    ));
                };
                let v = self.expr(init)?;
                let temps: Vec<syn::Ident> = (0..names.len())
                    .map(|i| quote::format_ident!("__kiln_t{}", i))
                    .collect();
                let mut out = quote!(let (#(#temps),*) = #v;);
                for ((n, m), tmp) in names.iter().zip(&temps) {
                    if n == "_" {
                        continue;
                    }
                    self.bind(n, *m);
                    let lit = syn::LitStr::new(&n.to_string(), n.span());
                    out.extend(if *m {
                        quote!(let #n = ::kiln::ir::Var::new(#lit, #tmp);)
                    } else {
                        quote!(let #n = #tmp;)
                    });
                }
                Ok(out)
            }
            Pat::Wild(_) => match init {
                Some(e) => {
                    let v = self.expr(e)?;
                    Ok(quote!(let _ = #v;))
                }
                None => Ok(quote!()),
            },
            other => Err(error(
                other.span(),
                "only `let name`, `let mut name` and `let (a, b)` are supported in kernels",
            )),
        }
    }

    /// `shared::<T, N>()` or `shared_dynamic::<T>()` as a `let` initializer.
    fn shared_decl(&mut self, init: &Expr, name: &syn::LitStr) -> R<Option<Tokens>> {
        let Expr::Call(c) = init else {
            return Ok(None);
        };
        let Expr::Path(p) = &*c.func else {
            return Ok(None);
        };
        let Some(last) = p.path.segments.last() else {
            return Ok(None);
        };
        let which = last.ident.to_string();
        if which != "shared" && which != "shared_dynamic" {
            return Ok(None);
        }
        if !matches!(self.kind, FnKind::Kernel) {
            return Err(error(
                c.span(),
                "shared memory is declared in the kernel body; device functions take values",
            ));
        }
        if !c.args.is_empty() {
            return Err(error(c.args.span(), "shared memory takes no arguments"));
        }
        let args = &last.arguments;
        let f = syn::Ident::new(&which, last.ident.span());
        Ok(Some(
            quote_spanned! {c.span()=> ::kiln::lang::#f #args (__kiln_scope, #name)},
        ))
    }

    /// An expression in statement position (also a closure kernel's expression body).
    pub fn stmt_expr(&mut self, e: &Expr) -> R<Tokens> {
        match e {
            Expr::Assign(a) => {
                let rhs = self.expr(&a.right)?;
                self.assign(&a.left, rhs)
            }
            Expr::Binary(b) if compound(&b.op).is_some() => {
                let op = compound(&b.op).unwrap_or_default();
                let op: Tokens = op.parse().unwrap_or_default();
                let rhs = self.expr(&b.right)?;
                match &*b.left {
                    Expr::Index(ix) => {
                        let a = self.expr(&ix.expr)?;
                        let i = self.expr(&ix.index)?;
                        Ok(quote_spanned! {b.span()=> {
                            let __kiln_a = #a;
                            let __kiln_i = #i;
                            ::kiln::lang::Indexable::store_at(
                                __kiln_a,
                                __kiln_i,
                                ::kiln::lang::Indexable::load_at(__kiln_a, __kiln_i) #op (#rhs),
                            );
                        }})
                    }
                    left => {
                        let cur = self.expr(left)?;
                        self.assign(left, quote!((#cur) #op (#rhs)))
                    }
                }
            }
            Expr::If(i) => self.if_stmt(i),
            Expr::Match(m) => self.match_arms(m, false),
            Expr::ForLoop(f) => self.for_loop(f),
            Expr::While(w) => {
                if let Some(l) = &w.label {
                    return Err(error(l.span(), "loop labels are not supported in kernels"));
                }
                let c = self.expr(&w.cond)?;
                let body = self.block_stmts(&w.body)?;
                Ok(quote_spanned! {w.span()=>
                    ::kiln::ir::while_(|| ::kiln::ir::IntoVal::<bool>::into_val(#c), || { #body });
                })
            }
            Expr::Loop(l) => {
                if let Some(lb) = &l.label {
                    return Err(error(lb.span(), "loop labels are not supported in kernels"));
                }
                let body = self.block_stmts(&l.body)?;
                Ok(quote_spanned! {l.span()=> ::kiln::ir::loop_(|| { #body });})
            }
            Expr::Block(b) if b.label.is_none() && b.attrs.is_empty() => {
                let inner = self.block_stmts(&b.block)?;
                Ok(quote!({ #inner }))
            }
            Expr::Break(_) | Expr::Continue(_) | Expr::Return(_) => {
                let t = self.expr(e)?;
                Ok(quote!(#t;))
            }
            other => {
                let t = self.expr(other)?;
                Ok(quote!(let _ = #t;))
            }
        }
    }

    fn assign(&mut self, left: &Expr, rhs: Tokens) -> R<Tokens> {
        match left {
            Expr::Path(p) if p.path.get_ident().is_some() => {
                let id = p
                    .path
                    .get_ident()
                    .map(|i| i.to_string())
                    .unwrap_or_default();
                if self.is_var(&id) {
                    let ident = &p.path;
                    Ok(quote_spanned! {left.span()=> #ident.set(#rhs);})
                } else {
                    Err(error(
                        left.span(),
                        &format!("`{id}` is not a mutable local; declare it with `let mut {id}`"),
                    ))
                }
            }
            Expr::Index(ix) => {
                let a = self.expr(&ix.expr)?;
                let i = self.expr(&ix.index)?;
                Ok(quote_spanned! {left.span()=> ::kiln::lang::Indexable::store_at(#a, #i, #rhs);})
            }
            Expr::Paren(p) => self.assign(&p.expr, rhs),
            Expr::Field(f) if matches!(f.member, syn::Member::Named(_)) => {
                let cur = self.expr(&f.base)?;
                let member = &f.member;
                let updated = quote_spanned! {left.span()=>
                    ::kiln::lang::with_field(&#cur, |__kiln_parts| {
                        __kiln_parts.#member = ::kiln::ir::IntoVal::into_val(#rhs);
                    })
                };
                self.assign(&f.base, updated)
            }
            other => Err(error(
                other.span(),
                "kernels assign to `let mut` locals and to indexed views, shared memory and \
                 local arrays (`y[i] = v`)",
            )),
        }
    }

    fn if_stmt(&mut self, i: &syn::ExprIf) -> R<Tokens> {
        let c = self.expr(&i.cond)?;
        let then = self.block_stmts(&i.then_branch)?;
        let other = match &i.else_branch {
            Some((_, e)) => self.stmt_expr(e)?,
            None => quote!(),
        };
        Ok(quote_spanned! {i.span()=>
            ::kiln::ir::if_else(#c, || { #then }, || { #other });
        })
    }

    fn for_loop(&mut self, f: &syn::ExprForLoop) -> R<Tokens> {
        if let Some(l) = &f.label {
            return Err(error(l.span(), "loop labels are not supported in kernels"));
        }
        let var = match &*f.pat {
            Pat::Ident(p) if p.mutability.is_none() && p.by_ref.is_none() => p.ident.clone(),
            Pat::Wild(w) => syn::Ident::new("_", w.span()),
            other => {
                return Err(error(
                    other.span(),
                    "`for` binds one plain name (`for i in 0..n`)",
                ))
            }
        };
        let (range, step) = match &*f.expr {
            Expr::MethodCall(m) if m.method == "step_by" && m.args.len() == 1 => {
                (strip_paren(&m.receiver), Some(&m.args[0]))
            }
            other => (strip_paren(other), None),
        };
        let Expr::Range(r) = range else {
            return Err(error(
                f.expr.span(),
                "`for` runs over integer ranges (`a..b`, `a..=b`, `(a..b).step_by(s)`); \
                 iterators and collections do not exist in kernels",
            ));
        };
        let (Some(start), Some(end)) = (&r.start, &r.end) else {
            return Err(error(r.span(), "`for` ranges need both ends (`a..b`)"));
        };
        let start = self.expr(start)?;
        let end = self.expr(end)?;
        let looper = match r.limits {
            syn::RangeLimits::Closed(_) => quote!(for_range_inclusive_step),
            syn::RangeLimits::HalfOpen(_) => quote!(for_range_step),
        };
        let step = match step {
            Some(s) => self.expr(s)?,
            None => quote!(1),
        };
        let body = self.scoped(|cx| {
            if var != "_" {
                cx.bind(&var, false);
            }
            cx.block_stmts(&f.body)
        })?;
        Ok(quote_spanned! {f.span()=>
            ::kiln::ir::#looper(#start, #end, #step, |#var| { #body });
        })
    }
}

/// The builder call that records the Rust file and line of `span` for the statements after
/// it (kept as a comment in generated source).
pub fn source_note(span: proc_macro2::Span) -> Tokens {
    quote_spanned!(span=> ::kiln::ir::source_line(::core::file!(), ::core::line!());)
}

/// Whether a pattern name is a constant (`TILE`, `Max`) rather than a new binding: Rust's own
/// convention, constants and unit structs start with a capital.
/// Methods on kernel values that compute a result and nothing else.
const PURE_METHODS: &[&str] = &[
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "min",
    "max",
    "clamp",
    "abs",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "exp",
    "exp2",
    "ln",
    "log2",
    "log10",
    "powf",
    "powi",
    "floor",
    "ceil",
    "round",
    "trunc",
    "fract",
    "is_nan",
    "is_finite",
    "is_infinite",
    "signum",
    "copysign",
    "mul_add",
    "to_bits",
    "count_ones",
    "leading_zeros",
    "trailing_zeros",
    "rotate_left",
    "rotate_right",
    "wrapping_add",
    "wrapping_sub",
    "wrapping_mul",
    "at",
    "len",
    "get",
];

/// Whether evaluating `e` may do more than compute a value: a call (device functions may
/// store, atomics do), a method outside [`PURE_METHODS`] (subgroup operations), a macro, or
/// any statement-like expression. Loads are pure: out of bounds they read zero.
fn may_have_effects(e: &Expr) -> bool {
    match e {
        Expr::Lit(_) | Expr::Path(_) => false,
        Expr::Paren(p) => may_have_effects(&p.expr),
        Expr::Group(g) => may_have_effects(&g.expr),
        Expr::Unary(u) => may_have_effects(&u.expr),
        Expr::Binary(b) => may_have_effects(&b.left) || may_have_effects(&b.right),
        Expr::Cast(c) => may_have_effects(&c.expr),
        Expr::Field(f) => may_have_effects(&f.base),
        Expr::Index(i) => may_have_effects(&i.expr) || may_have_effects(&i.index),
        Expr::Tuple(t) => t.elems.iter().any(may_have_effects),
        Expr::MethodCall(m) => {
            !PURE_METHODS.contains(&m.method.to_string().as_str())
                || may_have_effects(&m.receiver)
                || m.args.iter().any(may_have_effects)
        }
        _ => true,
    }
}

fn is_const_name(id: &syn::Ident) -> bool {
    id.to_string().starts_with(|c: char| c.is_ascii_uppercase())
}

fn strip_paren(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip_paren(&p.expr),
        Expr::Group(g) => strip_paren(&g.expr),
        other => other,
    }
}

/// The operator of a compound assignment (`+=` gives `+`).
fn compound(op: &BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::AddAssign(_) => "+",
        BinOp::SubAssign(_) => "-",
        BinOp::MulAssign(_) => "*",
        BinOp::DivAssign(_) => "/",
        BinOp::RemAssign(_) => "%",
        BinOp::BitAndAssign(_) => "&",
        BinOp::BitOrAssign(_) => "|",
        BinOp::BitXorAssign(_) => "^",
        BinOp::ShlAssign(_) => "<<",
        BinOp::ShrAssign(_) => ">>",
        _ => return None,
    })
}

/// A type as kernels see it: `usize`/`isize` become `u32`/`i32`.
fn scalar_type(t: &Type) -> Tokens {
    match t {
        Type::Path(p) if p.path.is_ident("usize") => quote_spanned!(t.span()=> u32),
        Type::Path(p) if p.path.is_ident("isize") => quote_spanned!(t.span()=> i32),
        other => other.to_token_stream(),
    }
}

fn lit(l: &Lit) -> R<Tokens> {
    match l {
        Lit::Int(i) => match i.suffix() {
            "usize" => {
                let v = syn::LitInt::new(&format!("{}u32", i.base10_digits()), i.span());
                Ok(v.to_token_stream())
            }
            "isize" => {
                let v = syn::LitInt::new(&format!("{}i32", i.base10_digits()), i.span());
                Ok(v.to_token_stream())
            }
            _ => Ok(i.to_token_stream()),
        },
        Lit::Float(_) | Lit::Bool(_) => Ok(l.to_token_stream()),
        Lit::Str(_) | Lit::ByteStr(_) | Lit::CStr(_) => Err(error(
            l.span(),
            "strings are not supported in kernels (no heap, no text); pass numbers",
        )),
        Lit::Char(_) | Lit::Byte(_) => Err(error(
            l.span(),
            "character literals are not supported in kernels; use their integer code (`b'a' as u8` on the host)",
        )),
        _ => Err(error(l.span(), "this literal is not supported in kernels")),
    }
}

fn macro_error(m: &syn::Macro) -> syn::Error {
    let name = m
        .path
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    let hint = match name.as_str() {
        "panic" | "assert" | "assert_eq" | "unreachable" | "todo" | "unimplemented" => {
            "kernels cannot panic; check the condition with `if` and write a status into a view"
        }
        "println" | "print" | "eprintln" | "format" | "dbg" => {
            "kernels cannot print or format text; write values into a view and print them on \
             the host"
        }
        "vec" => "kernels have no heap; use a fixed-size local array (`[0.0f32; 8]`)",
        _ => "macros are not supported in kernel bodies",
    };
    error(m.span(), &format!("`{name}!` in a kernel: {hint}"))
}
