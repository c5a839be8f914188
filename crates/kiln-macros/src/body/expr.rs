//! Expressions in value position: operators, calls, methods, `if`/`match` as values,
//! patterns and struct literals.

use super::*;

impl Body {
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
                // A literal cast to a primitive type stays Rust's; to `f16` (a struct) it is
                // the IR's cast of the constant.
                let primitive = matches!(&*c.ty, Type::Path(p) if p.path.get_ident().is_some_and(|i| {
                    ["bool", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64", "usize", "isize"]
                        .contains(&i.to_string().as_str())
                }));
                if let (Expr::Lit(l), true) = (&*c.expr, primitive) {
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
    pub(super) fn match_arms(&mut self, m: &syn::ExprMatch, value: bool) -> R<Tokens> {
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

    pub(super) fn arm_chain(&mut self, arms: &[syn::Arm], value: bool) -> R<Tokens> {
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
    pub(super) fn pattern(&mut self, pat: &Pat) -> R<(Option<Tokens>, Tokens)> {
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
    pub(super) fn struct_literal(&mut self, st: &syn::ExprStruct) -> R<Tokens> {
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
    pub(super) fn value_block(&mut self, b: &Block) -> R<Tokens> {
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
