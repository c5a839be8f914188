//! The body translator: Rust statements and expressions to kiln IR builder calls.

use crate::error;
use proc_macro2::TokenStream as Tokens;
use quote::{quote, quote_spanned, ToTokens};
use std::collections::HashMap;
use syn::spanned::Spanned;
use syn::{BinOp, Block, Expr, Lit, Pat, Stmt, Type, UnOp};

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

    /// An expression in value position.
    pub fn expr(&mut self, e: &Expr) -> R<Tokens> {
        let sp = e.span();
        Ok(match e {
            Expr::Lit(l) => lit(&l.lit)?,
            Expr::Path(p) => {
                if let Some(id) = p.path.get_ident() {
                    if self.is_var(&id.to_string()) {
                        return Ok(quote_spanned!(sp=> #id.get()));
                    }
                    self.note_capture(id);
                }
                if p.qself.is_none() && p.path.segments.len() == 1 {
                    let seg = &p.path.segments[0];
                    if seg.ident == "usize" || seg.ident == "isize" {
                        return Err(error(sp, "use u32 or i32 in kernels"));
                    }
                }
                p.to_token_stream()
            }
            Expr::Paren(p) => {
                let inner = self.expr(&p.expr)?;
                quote!((#inner))
            }
            Expr::Group(g) => self.expr(&g.expr)?,
            Expr::Binary(b) => {
                if compound(&b.op).is_some() {
                    return Err(error(
                        sp,
                        "compound assignment is a statement; it has no value",
                    ));
                }
                let l = self.expr(&b.left)?;
                let r = self.expr(&b.right)?;
                // Rust evaluates the right side of `&&` and `||` only when the left does not
                // settle the answer. A right side that may have an effect (a call, an atomic,
                // a subgroup operation) runs under an `if`; a pure one is computed anyway and
                // combined, which gives the same answer without a branch.
                if matches!(b.op, BinOp::And(_) | BinOp::Or(_)) && may_have_effects(&b.right) {
                    let (then, other) = match b.op {
                        BinOp::And(_) => (r, quote!(false)),
                        _ => (quote!(true), r),
                    };
                    return Ok(quote_spanned! {sp=> {
                        let __kiln_slot = ::kiln::lang::Slot::<bool>::new("v");
                        ::kiln::ir::if_else(
                            #l,
                            || __kiln_slot.put(#then),
                            || __kiln_slot.put(#other),
                        );
                        __kiln_slot.take()
                    }});
                }
                let cmp = |m: &str| {
                    let m = syn::Ident::new(m, sp);
                    quote_spanned!(sp=> ::kiln::lang::Compare::#m(#l, #r))
                };
                match &b.op {
                    BinOp::Lt(_) => cmp("lt_"),
                    BinOp::Le(_) => cmp("le_"),
                    BinOp::Gt(_) => cmp("gt_"),
                    BinOp::Ge(_) => cmp("ge_"),
                    BinOp::Eq(_) => cmp("eq_"),
                    BinOp::Ne(_) => cmp("ne_"),
                    BinOp::And(_) => quote_spanned!(sp=> ::kiln::lang::and(#l, #r)),
                    BinOp::Or(_) => quote_spanned!(sp=> ::kiln::lang::or(#l, #r)),
                    op => quote_spanned!(sp=> (#l #op #r)),
                }
            }
            Expr::Unary(u) => {
                let v = self.expr(&u.expr)?;
                match u.op {
                    UnOp::Neg(_) => quote_spanned!(sp=> (-#v)),
                    UnOp::Not(_) => quote_spanned!(sp=> (!#v)),
                    _ => {
                        return Err(error(
                            sp,
                            "references do not exist in kernels; use the value itself",
                        ))
                    }
                }
            }
            Expr::Cast(c) => {
                let t = scalar_type(&c.ty);
                if let Expr::Lit(l) = &*c.expr {
                    let v = lit(&l.lit)?;
                    quote_spanned!(sp=> (#v as #t))
                } else {
                    let v = self.expr(&c.expr)?;
                    quote_spanned!(sp=> ::kiln::lang::CastTo::cast_to::<#t>(#v))
                }
            }
            Expr::Index(ix) => {
                let a = self.expr(&ix.expr)?;
                let i = self.expr(&ix.index)?;
                quote_spanned!(sp=> ::kiln::lang::Indexable::load_at(#a, #i))
            }
            Expr::MethodCall(m) => {
                let recv = self.expr(&m.receiver)?;
                let args = m.args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                let method = &m.method;
                let turbofish = &m.turbofish;
                quote_spanned!(sp=> #recv.#method #turbofish (#(#args),*))
            }
            Expr::Call(c) => {
                if let Expr::Path(p) = &*c.func {
                    if let Some(last) = p.path.segments.last() {
                        if last.ident == "shared" || last.ident == "shared_dynamic" {
                            return Err(error(
                                sp,
                                "declare shared memory with `let name = shared::<T, N>();` at \
                                 the top of the kernel",
                            ));
                        }
                    }
                }
                if let (Expr::Path(p), Some(me)) = (&*c.func, &self.name) {
                    if p.path.is_ident(me) {
                        return Err(error(
                            sp,
                            "a device function cannot call itself: kernels have no call stack \
                             for recursion; rewrite it as a loop",
                        ));
                    }
                }
                let func =
                    match &*c.func {
                        Expr::Path(p) => p.to_token_stream(),
                        other => return Err(error(
                            other.span(),
                            "kernels call named device functions; closures and function values \
                             are not supported",
                        )),
                    };
                let args = c.args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>()?;
                quote_spanned!(sp=> #func(#(#args),*))
            }
            Expr::Reference(r) => {
                if r.mutability.is_some() {
                    return Err(error(sp, "`&mut` is not supported in kernels"));
                }
                let v = self.expr(&r.expr)?;
                quote_spanned!(sp=> &#v)
            }
            Expr::Tuple(t) => {
                let items = t
                    .elems
                    .iter()
                    .map(|x| self.expr(x))
                    .collect::<R<Vec<_>>>()?;
                quote_spanned!(sp=> (#(#items,)*))
            }
            Expr::Field(f) => {
                let base = self.expr(&f.base)?;
                let member = &f.member;
                match member {
                    syn::Member::Named(_) => {
                        quote_spanned!(sp=> ::kiln::lang::field(&#base, |__kiln_n| __kiln_n.#member))
                    }
                    syn::Member::Unnamed(_) => quote_spanned!(sp=> #base.#member),
                }
            }
            Expr::If(i) => {
                let Some((_, other)) = &i.else_branch else {
                    return Err(error(sp, "an `if` used as a value needs an `else`"));
                };
                let c = self.expr(&i.cond)?;
                let then = self.value_block(&i.then_branch)?;
                let other = self.expr(other)?;
                quote_spanned! {sp=> {
                    let __kiln_slot = ::kiln::lang::Slot::new("v");
                    ::kiln::ir::if_else(
                        #c,
                        || __kiln_slot.put(#then),
                        || __kiln_slot.put(#other),
                    );
                    __kiln_slot.take()
                }}
            }
            Expr::Block(b) if b.label.is_none() => self.value_block(&b.block)?,
            Expr::Break(b) => {
                if b.label.is_some() || b.expr.is_some() {
                    return Err(error(
                        sp,
                        "`break` takes no label or value in kernels; set a `let mut` local \
                         before breaking",
                    ));
                }
                quote_spanned!(sp=> { ::kiln::ir::break_(); return; })
            }
            Expr::Continue(c) => {
                if c.label.is_some() {
                    return Err(error(sp, "loop labels are not supported in kernels"));
                }
                quote_spanned!(sp=> { ::kiln::ir::continue_(); return; })
            }
            Expr::Return(r) => match (&self.kind, &r.expr) {
                (FnKind::Kernel, None) => quote_spanned!(sp=> { ::kiln::ir::return_(); return; }),
                (FnKind::Kernel, Some(_)) => {
                    return Err(error(
                        sp,
                        "kernels return nothing; write results into a view",
                    ))
                }
                (FnKind::Device(t), Some(v)) => {
                    let t = (**t).clone();
                    let v = self.expr(v)?;
                    quote_spanned!(sp=> {
                        ::kiln::ir::return_value(::kiln::ir::IntoVal::<#t>::into_val(#v));
                        return;
                    })
                }
                (FnKind::Device(_), None) => {
                    return Err(error(sp, "a device function returns a value"))
                }
                (FnKind::Inline(_), _) => {
                    return Err(error(
                        sp,
                        "a device function that takes views or returns nothing is built into \
                         each caller, so `return` can only be its last statement; use if/else",
                    ))
                }
            },
            Expr::Repeat(_) | Expr::Array(_) => {
                return Err(error(
                    sp,
                    "bind local arrays with `let` (`let mut a = [0.0f32; 8];`)",
                ))
            }
            Expr::Match(m) => {
                let chain = self.match_arms(m, true)?;
                quote_spanned! {sp=> {
                    let __kiln_slot = ::kiln::lang::Slot::new("v");
                    #chain
                    __kiln_slot.take()
                }}
            }
            Expr::Closure(_) => {
                return Err(error(
                    sp,
                    "closures inside kernels are not supported; write a #[kiln::device] function",
                ))
            }
            Expr::Macro(m) => return Err(macro_error(&m.mac)),
            Expr::Struct(st) => self.struct_literal(st)?,
            Expr::Range(_) => return Err(error(sp, "ranges appear only in `for` loops")),
            Expr::Assign(_) => return Err(error(sp, "assignment is a statement; it has no value")),
            Expr::Try(_) => {
                return Err(error(
                    sp,
                    "`?` is not supported: kernels have no Result; check values with `if`",
                ))
            }
            Expr::Async(_) | Expr::Await(_) => {
                return Err(error(sp, "async code is not supported in kernels"))
            }
            Expr::Unsafe(_) => return Err(error(sp, "unsafe blocks are not supported in kernels")),
            _ => return Err(error(sp, "this expression is not supported in kernels")),
        })
    }

    /// A `match` as a chain of `if`/`else` on the scrutinee's value; arms put their value in
    /// `__kiln_slot` when `value`. The last arm must match everything (`_` or a name).
    fn match_arms(&mut self, m: &syn::ExprMatch, value: bool) -> R<Tokens> {
        let Some(last) = m.arms.last() else {
            return Err(error(m.span(), "a `match` in a kernel needs arms"));
        };
        let catch_all = match &last.pat {
            Pat::Wild(_) => true,
            Pat::Ident(p) => !is_const_name(&p.ident),
            _ => false,
        };
        if last.guard.is_some() || !catch_all {
            return Err(error(
                last.pat.span(),
                "end a kernel `match` with a `_ =>` arm: its patterns are checked at run time, \
                 so the last arm must match everything",
            ));
        }
        let scrut = self.expr(&m.expr)?;
        let chain = self.arm_chain(&m.arms, value)?;
        Ok(quote_spanned! {m.span()=> {
            let __kiln_m = #scrut;
            #chain
        }})
    }

    fn arm_chain(&mut self, arms: &[syn::Arm], value: bool) -> R<Tokens> {
        let Some((arm, rest)) = arms.split_first() else {
            return Ok(quote!());
        };
        self.scoped(|cx| {
            let (cond, bind) = cx.pattern(&arm.pat)?;
            let body = if value {
                let v = cx.expr(&arm.body)?;
                quote!(__kiln_slot.put(#v);)
            } else {
                cx.stmt_expr(&arm.body)?
            };
            let cond = match &arm.guard {
                Some((_, g)) => {
                    let g = cx.expr(g)?;
                    match cond {
                        Some(c) => Some(quote!(::kiln::lang::and(#c, #g))),
                        None => Some(g),
                    }
                }
                None => cond,
            };
            let Some(cond) = cond else {
                return Ok(quote!({ #bind #body }));
            };
            let other = cx.arm_chain(rest, value)?;
            Ok(quote_spanned! {arm.span()=> {
                #bind
                ::kiln::ir::if_else(#cond, || { #body }, || { #other });
            }})
        })
    }

    /// The condition under which `pat` matches `__kiln_m` (`None`: always) and the binding it
    /// makes.
    fn pattern(&mut self, pat: &Pat) -> R<(Option<Tokens>, Tokens)> {
        let sp = pat.span();
        Ok(match pat {
            Pat::Wild(_) => (None, quote!()),
            Pat::Ident(p) if is_const_name(&p.ident) => {
                let id = &p.ident;
                (
                    Some(quote_spanned!(sp=> ::kiln::lang::Compare::eq_(__kiln_m, #id))),
                    quote!(),
                )
            }
            Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() && p.mutability.is_none() => {
                let id = &p.ident;
                self.bind(id, false);
                (None, quote!(let #id = __kiln_m;))
            }
            Pat::Lit(_) | Pat::Path(_) | Pat::Const(_) => {
                let v = match pat {
                    Pat::Lit(l) => lit(&l.lit)?,
                    Pat::Path(p) => p.to_token_stream(),
                    _ => return Err(error(sp, "use a named `const` instead of a const block")),
                };
                (
                    Some(quote_spanned!(sp=> ::kiln::lang::Compare::eq_(__kiln_m, #v))),
                    quote!(),
                )
            }
            Pat::Range(r) => {
                let mut parts = Vec::new();
                if let Some(lo) = &r.start {
                    let lo = self.expr(lo)?;
                    parts.push(quote!(::kiln::lang::Compare::ge_(__kiln_m, #lo)));
                }
                if let Some(hi) = &r.end {
                    let hi = self.expr(hi)?;
                    parts.push(match r.limits {
                        syn::RangeLimits::Closed(_) => {
                            quote!(::kiln::lang::Compare::le_(__kiln_m, #hi))
                        }
                        syn::RangeLimits::HalfOpen(_) => {
                            quote!(::kiln::lang::Compare::lt_(__kiln_m, #hi))
                        }
                    });
                }
                let cond = parts
                    .into_iter()
                    .reduce(|a, b| quote!(::kiln::lang::and(#a, #b)));
                (cond, quote!())
            }
            Pat::Or(o) => {
                let mut cond: Option<Tokens> = None;
                for case in &o.cases {
                    let (c, bind) = self.pattern(case)?;
                    if !bind.is_empty() {
                        return Err(error(case.span(), "`|` patterns cannot bind names"));
                    }
                    let Some(c) = c else {
                        return Ok((None, quote!()));
                    };
                    cond = Some(match cond {
                        Some(prev) => quote!(::kiln::lang::or(#prev, #c)),
                        None => c,
                    });
                }
                (cond, quote!())
            }
            Pat::Paren(p) => self.pattern(&p.pat)?,
            other => {
                return Err(error(
                    other.span(),
                    "kernel `match` arms take literals, ranges (`1..=4`), consts, `|`, `_` and a \
                     final name; destructure structs and tuples with field access instead",
                ))
            }
        })
    }

    /// `S { x: a, y: b }` or `S { x: a, ..base }`: a kiln value (or index) built from its
    /// fields, each converted to the field's type.
    fn struct_literal(&mut self, st: &syn::ExprStruct) -> R<Tokens> {
        let sp = st.span();
        if st.qself.is_some() {
            return Err(error(sp, "write the struct's name in a struct literal"));
        }
        let path = &st.path;
        let mut fields = Vec::new();
        for f in &st.fields {
            let member = &f.member;
            let v = self.expr(&f.expr)?;
            fields.push(quote_spanned!(f.span()=> #member: ::kiln::ir::IntoVal::into_val(#v)));
        }
        let rest = match &st.rest {
            Some(r) => {
                let base = self.expr(r)?;
                quote!(..::kiln::lang::Fields::fields(&#base))
            }
            None => quote!(),
        };
        Ok(quote_spanned! {sp=> {
            type __KilnParts = <#path as ::kiln::lang::Record>::Parts;
            <#path as ::kiln::lang::Record>::build(__KilnParts { #(#fields,)* #rest })
        }})
    }

    /// A block whose value is used: statements, then its tail expression.
    fn value_block(&mut self, b: &Block) -> R<Tokens> {
        self.scoped(|cx| {
            let mut out = Tokens::new();
            let n = b.stmts.len();
            for (i, s) in b.stmts.iter().enumerate() {
                match s {
                    Stmt::Expr(e, None) if i + 1 == n => {
                        let v = cx.expr(e)?;
                        return Ok(quote!({ #out #v }));
                    }
                    _ => out.extend(cx.stmt(s)?),
                }
            }
            Err(error(
                b.span(),
                "this block is used as a value but ends without one",
            ))
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
