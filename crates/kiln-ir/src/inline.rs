//! Device function calls replaced by the functions' statements ([`inline_calls`]).

use crate::ir::*;
use crate::native::{NativeArg, NativeCall};
use crate::types::{ScalarType, ScalarValue, Type};

/// `kernel` with each call of a device function in its body replaced by the function's
/// statements, calls inside those included, so a backend that compiles the body as one piece
/// sees every statement (the CPU backend runs four work items at a time only through code it
/// can see). Arguments become the values passed, the function's locals become new locals of
/// the kernel (zeroed at each call, as at function entry), and its `return`s assign a result
/// local and leave a one-trip loop around the inlined statements (through every loop of the
/// function they are in). The call expression keeps its handle and reads the result local,
/// so the rest of the body is unchanged. Functions with locals that are not scalars stay
/// calls. The kernel is otherwise the same; its `functions` are kept for the calls left.
pub fn inline_calls(kernel: &Kernel) -> Kernel {
    let mut out = kernel.clone();
    let mut inliner = Inliner {
        functions: &kernel.functions,
        body: std::mem::take(&mut out.body),
        calls: 0,
    };
    let block = std::mem::take(&mut inliner.body.block);
    inliner.body.block = inliner.block(&block);
    out.body = inliner.body;
    out
}

struct Inliner<'a> {
    functions: &'a [Function],
    body: Body,
    /// Calls inlined so far, to name each one's locals apart.
    calls: usize,
}

/// One call being inlined: how the function's handles, locals and `return`s become the
/// kernel's.
struct Callee<'b> {
    /// The function's expressions.
    exprs: &'b [Expr],
    /// The kernel handle of each of them (arguments for its parameters).
    map: Vec<Handle>,
    /// The kernel local of the function's first local.
    base: u32,
    result: Option<LocalId>,
    /// Set by a `return` inside one of the function's loops; each of those loops is followed
    /// by a `break` when it is set.
    returned: Option<LocalId>,
    /// Whether a `return` leaves a one-trip loop around the inlined statements (without it,
    /// the only `return` is the last statement).
    wrapped: bool,
}

impl Inliner<'_> {
    fn push(&mut self, e: Expr) -> Handle {
        self.body.exprs.push(e);
        Handle(self.body.exprs.len() as u32 - 1)
    }

    fn local(&mut self, name: String, ty: Type) -> LocalId {
        self.body.locals.push(LocalDecl { name, ty });
        LocalId(self.body.locals.len() as u32 - 1)
    }

    /// `b` with its inlinable calls replaced.
    fn block(&mut self, b: &Block) -> Block {
        let mut out = Vec::new();
        for s in &b.0 {
            match s {
                Stmt::Eval(h) => match &self.body.exprs[h.index()] {
                    Expr::Call { function, args } if self.inlinable(*function) => {
                        let (function, args) = (*function, args.clone());
                        out.extend(self.call(*h, function, &args));
                    }
                    _ => out.push(s.clone()),
                },
                _ => out.push(s.map_nested(&mut |b| self.block(b))),
            }
        }
        Block(out)
    }

    fn inlinable(&self, f: FunctionId) -> bool {
        self.functions
            .get(f.0 as usize)
            .is_some_and(|f| f.body.locals.iter().all(|l| l.ty.as_scalar().is_some()))
    }

    /// The statements that replace `Eval(at)` of a call of `f` with `args`.
    fn call(&mut self, at: Handle, f: FunctionId, args: &[Handle]) -> Vec<Stmt> {
        let functions = self.functions;
        let f = &functions[f.0 as usize];
        self.calls += 1;
        let prefix = format!("{}{}", f.name, self.calls);
        let base = self.body.locals.len() as u32;
        let mut stmts = Vec::new();
        for l in &f.body.locals {
            let local = self.local(format!("{prefix}_{}", l.name), l.ty.clone());
            if let Some(s) = l.ty.as_scalar() {
                let zero = self.push(Expr::Literal(ScalarValue::zero(s)));
                stmts.push(Stmt::Eval(zero));
                stmts.push(Stmt::LocalSet { local, value: zero });
            }
        }
        let mut map = Vec::with_capacity(f.body.exprs.len());
        for e in &f.body.exprs {
            let h = match e {
                Expr::Param(p) => args[*p as usize],
                e => {
                    let e = remap(e, &map, base);
                    self.push(e)
                }
            };
            map.push(h);
        }
        let result = f
            .result
            .clone()
            .map(|ty| self.local(format!("{prefix}_result"), ty));
        let ends_alone = match f.body.block.0.split_last() {
            Some((Stmt::Return(_), rest)) => !rest.iter().any(stmt_has_return),
            _ => !block_has_return(&f.body.block),
        };
        let returned = (!ends_alone && returns_in_loop(&f.body.block, false)).then(|| {
            let flag = self.local(format!("{prefix}_returned"), Type::Scalar(ScalarType::Bool));
            let no = self.push(Expr::Literal(ScalarValue::Bool(false)));
            stmts.push(Stmt::Eval(no));
            stmts.push(Stmt::LocalSet {
                local: flag,
                value: no,
            });
            flag
        });
        let callee = Callee {
            exprs: &f.body.exprs,
            map,
            base,
            result,
            returned,
            wrapped: !ends_alone,
        };
        let body = self.copy(&f.body.block, &callee, 0);
        let body = self.block(&body);
        if ends_alone {
            stmts.extend(body.0);
        } else {
            let mut once = body.0;
            once.push(Stmt::Break);
            stmts.push(Stmt::Loop {
                body: Block(once),
                continuing: Block::default(),
            });
        }
        if let Some(r) = result {
            self.body.exprs[at.index()] = Expr::LocalGet(r);
            stmts.push(Stmt::Eval(at));
        }
        stmts
    }

    /// The function's block `b` in the kernel's handles and locals; `depth` counts the
    /// function's loops around it.
    fn copy(&mut self, b: &Block, c: &Callee<'_>, depth: usize) -> Block {
        let (map, base) = (&c.map, c.base);
        let local = |l: &LocalId| LocalId(l.0 + base);
        let mut out = Vec::new();
        for s in &b.0 {
            match s {
                // A parameter is the argument, computed before the call.
                Stmt::Eval(h) if matches!(c.exprs[h.index()], Expr::Param(_)) => {}
                Stmt::Eval(h) => out.push(Stmt::Eval(map[h.index()])),
                Stmt::LocalSet { local: l, value } => out.push(Stmt::LocalSet {
                    local: local(l),
                    value: map[value.index()],
                }),
                Stmt::LocalIndexSet {
                    local: l,
                    index,
                    value,
                } => out.push(Stmt::LocalIndexSet {
                    local: local(l),
                    index: map[index.index()],
                    value: map[value.index()],
                }),
                Stmt::Store {
                    memory,
                    index,
                    value,
                } => out.push(Stmt::Store {
                    memory: *memory,
                    index: map[index.index()],
                    value: map[value.index()],
                }),
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => out.push(Stmt::If {
                    cond: map[cond.index()],
                    accept: self.copy(accept, c, depth),
                    reject: self.copy(reject, c, depth),
                }),
                Stmt::Loop { body, continuing } => {
                    out.push(Stmt::Loop {
                        body: self.copy(body, c, depth + 1),
                        continuing: self.copy(continuing, c, depth + 1),
                    });
                    if let Some(flag) = c.returned {
                        let get = self.push(Expr::LocalGet(flag));
                        out.push(Stmt::Eval(get));
                        out.push(Stmt::If {
                            cond: get,
                            accept: Block(vec![Stmt::Break]),
                            reject: Block::default(),
                        });
                    }
                }
                Stmt::Return(value) => {
                    if let (Some(r), Some(v)) = (c.result, value) {
                        out.push(Stmt::LocalSet {
                            local: r,
                            value: map[v.index()],
                        });
                    }
                    if c.wrapped {
                        if let (Some(flag), true) = (c.returned, depth > 0) {
                            let yes = self.push(Expr::Literal(ScalarValue::Bool(true)));
                            out.push(Stmt::Eval(yes));
                            out.push(Stmt::LocalSet {
                                local: flag,
                                value: yes,
                            });
                        }
                        out.push(Stmt::Break);
                    }
                }
                Stmt::Native(call) => out.push(Stmt::Native(NativeCall {
                    native: call.native,
                    args: call
                        .args
                        .iter()
                        .map(|a| match a {
                            NativeArg::Value(v) => NativeArg::Value(map[v.index()]),
                            memory => *memory,
                        })
                        .collect(),
                    result: call.result.as_ref().map(local),
                    fallback: self.copy(&call.fallback, c, depth),
                })),
                other => out.push(other.clone()),
            }
        }
        Block(out)
    }
}

/// `e` with its operands (and locals, moved by `base`) in the kernel's handles.
fn remap(e: &Expr, map: &[Handle], base: u32) -> Expr {
    let h = |x: &Handle| map[x.index()];
    let local = |l: &LocalId| LocalId(l.0 + base);
    match e {
        Expr::Literal(_) | Expr::Param(_) | Expr::Len(_) | Expr::Builtin(_) => e.clone(),
        Expr::LocalGet(l) => Expr::LocalGet(local(l)),
        Expr::LocalIndex { local: l, index } => Expr::LocalIndex {
            local: local(l),
            index: h(index),
        },
        Expr::Load { memory, index } => Expr::Load {
            memory: *memory,
            index: h(index),
        },
        Expr::Binary { op, lhs, rhs } => Expr::Binary {
            op: *op,
            lhs: h(lhs),
            rhs: h(rhs),
        },
        Expr::Unary { op, arg } => Expr::Unary {
            op: *op,
            arg: h(arg),
        },
        Expr::Select {
            cond,
            accept,
            reject,
        } => Expr::Select {
            cond: h(cond),
            accept: h(accept),
            reject: h(reject),
        },
        Expr::Cast { arg, to } => Expr::Cast {
            arg: h(arg),
            to: *to,
        },
        Expr::Bitcast { arg, to } => Expr::Bitcast {
            arg: h(arg),
            to: *to,
        },
        Expr::Math { fun, args } => Expr::Math {
            fun: *fun,
            args: args.iter().map(h).collect(),
        },
        Expr::Compose { ty, parts } => Expr::Compose {
            ty: ty.clone(),
            parts: parts.iter().map(h).collect(),
        },
        Expr::Extract { base: b, index } => Expr::Extract {
            base: h(b),
            index: *index,
        },
        Expr::Atomic {
            memory,
            index,
            op,
            value,
            compare,
        } => Expr::Atomic {
            memory: *memory,
            index: h(index),
            op: *op,
            value: h(value),
            compare: compare.as_ref().map(h),
        },
        Expr::Subgroup { op, arg, lane } => Expr::Subgroup {
            op: *op,
            arg: h(arg),
            lane: lane.as_ref().map(h),
        },
        Expr::Call { function, args } => Expr::Call {
            function: *function,
            args: args.iter().map(h).collect(),
        },
    }
}

/// Whether `b` (inside a loop of the function when `in_loop`) returns from inside a loop.
fn returns_in_loop(b: &Block, in_loop: bool) -> bool {
    b.0.iter().any(|s| match s {
        Stmt::Return(_) => in_loop,
        Stmt::If { accept, reject, .. } => {
            returns_in_loop(accept, in_loop) || returns_in_loop(reject, in_loop)
        }
        Stmt::Loop { body, continuing } => {
            returns_in_loop(body, true) || returns_in_loop(continuing, true)
        }
        _ => false,
    })
}
