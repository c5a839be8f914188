//! Loads and stores whose bounds check cannot fail.
//!
//! Every load and store of the IR is checked: out of bounds reads zero and skips the write.
//! Where a condition that guards an access already compares the very index it uses with the
//! length of the memory it accesses (`if i < len(m) { m[i] }`, or `i < min(n, len(m))`, or a
//! loop's `if i >= end { break }` with `end = min(.., len(m))`), the check cannot fail, and a
//! writer may emit the plain access. The result is the same; only the work is less.

use crate::ir::*;
use std::collections::HashMap;

/// The loads and stores of one body that are proven in bounds by the conditions guarding
/// them. A proof needs the same index handle in the guard and the access: expressions are
/// values, so the handle names the same number at both places.
#[derive(Clone, Debug, Default)]
pub struct InBounds {
    /// Per expression: whether it is a load proven in bounds at every place it is evaluated.
    loads: Vec<bool>,
    /// Per (memory, index, value) of a store: whether every such store is proven.
    stores: HashMap<(Memory, Handle, Handle), bool>,
}

/// What is known at a statement: index handle `.0` is below the length of memory `.1`.
type Facts = Vec<(Handle, Memory)>;

impl InBounds {
    /// Finds the proven loads and stores of `body`.
    pub fn of(body: &Body) -> InBounds {
        let mut walk = Walk {
            exprs: &body.exprs,
            loads: vec![None; body.exprs.len()],
            stores: HashMap::new(),
        };
        walk.block(&body.block, &mut Vec::new());
        InBounds {
            loads: walk.loads.into_iter().map(|s| s == Some(true)).collect(),
            stores: walk.stores,
        }
    }

    /// Whether the load `h` (an `Expr::Load`) is in bounds wherever it is evaluated.
    pub fn load(&self, h: Handle) -> bool {
        self.loads.get(h.index()).copied().unwrap_or(false)
    }

    /// Whether every store of `value` at `index` of `memory` is in bounds.
    pub fn store(&self, memory: Memory, index: Handle, value: Handle) -> bool {
        self.stores
            .get(&(memory, index, value))
            .copied()
            .unwrap_or(false)
    }
}

struct Walk<'a> {
    exprs: &'a [Expr],
    /// Per expression: `None` until evaluated, then whether every evaluation was proven.
    loads: Vec<Option<bool>>,
    stores: HashMap<(Memory, Handle, Handle), bool>,
}

impl Walk<'_> {
    fn block(&mut self, b: &Block, facts: &mut Facts) {
        let outer = facts.len();
        for s in &b.0 {
            match s {
                Stmt::Eval(h) => {
                    if let Some(Expr::Load { memory, index }) = self.exprs.get(h.index()) {
                        let proven = facts.contains(&(*index, *memory));
                        let seen = &mut self.loads[h.index()];
                        *seen = Some(seen.unwrap_or(true) && proven);
                    }
                }
                Stmt::Store {
                    memory,
                    index,
                    value,
                } => {
                    let proven = facts.contains(&(*index, *memory));
                    let seen = self.stores.entry((*memory, *index, *value)).or_insert(true);
                    *seen = *seen && proven;
                }
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    let before = facts.len();
                    for (arm, holds) in [(accept, true), (reject, false)] {
                        self.implied(*cond, holds, facts);
                        self.block(arm, facts);
                        facts.truncate(before);
                    }
                    // Past an `if` whose arm always leaves, the other arm's condition holds.
                    if leaves(accept) {
                        self.implied(*cond, false, facts);
                    } else if leaves(reject) {
                        self.implied(*cond, true, facts);
                    }
                }
                Stmt::Loop { body, continuing } => {
                    self.block(body, facts);
                    self.block(continuing, facts);
                }
                _ => {}
            }
        }
        facts.truncate(outer);
    }

    /// Adds what `cond` being `holds` implies about indices and lengths.
    fn implied(&self, cond: Handle, holds: bool, facts: &mut Facts) {
        let Some(e) = self.exprs.get(cond.index()) else {
            return;
        };
        match (e, holds) {
            (
                Expr::Unary {
                    op: UnaryOp::Not,
                    arg,
                },
                _,
            ) => self.implied(*arg, !holds, facts),
            (
                Expr::Binary {
                    op: BinaryOp::And,
                    lhs,
                    rhs,
                },
                true,
            )
            | (
                Expr::Binary {
                    op: BinaryOp::Or,
                    lhs,
                    rhs,
                },
                false,
            ) => {
                self.implied(*lhs, holds, facts);
                self.implied(*rhs, holds, facts);
            }
            (
                Expr::Binary {
                    op: BinaryOp::Lt,
                    lhs,
                    rhs,
                },
                true,
            )
            | (
                Expr::Binary {
                    op: BinaryOp::Ge,
                    lhs,
                    rhs,
                },
                false,
            ) => self.below(*lhs, *rhs, facts),
            (
                Expr::Binary {
                    op: BinaryOp::Gt,
                    lhs,
                    rhs,
                },
                true,
            )
            | (
                Expr::Binary {
                    op: BinaryOp::Le,
                    lhs,
                    rhs,
                },
                false,
            ) => self.below(*rhs, *lhs, facts),
            _ => {}
        }
    }

    /// `index < bound`: below every length `bound` is at most. A bound made of lengths is a
    /// `u32`, so the comparison is unsigned.
    fn below(&self, index: Handle, bound: Handle, facts: &mut Facts) {
        match self.exprs.get(bound.index()) {
            Some(Expr::Len(m)) => facts.push((index, *m)),
            Some(Expr::Math {
                fun: MathFn::Min,
                args,
            }) => {
                for a in args {
                    self.below(index, *a, facts);
                }
            }
            _ => {}
        }
    }
}

/// Whether control never falls out of the end of `b`: it leaves the loop or the function.
fn leaves(b: &Block) -> bool {
    b.0.iter()
        .any(|s| matches!(s, Stmt::Break | Stmt::Continue | Stmt::Return(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::*;

    fn proven_loads(k: &Kernel) -> Vec<bool> {
        let ib = InBounds::of(&k.body);
        k.body
            .exprs
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Expr::Load { .. }))
            .map(|(i, _)| ib.load(Handle(i as u32)))
            .collect()
    }

    fn proven_stores(k: &Kernel) -> Vec<bool> {
        let ib = InBounds::of(&k.body);
        let mut out = Vec::new();
        fn walk(b: &Block, ib: &InBounds, out: &mut Vec<bool>) {
            for s in &b.0 {
                match s {
                    Stmt::Store {
                        memory,
                        index,
                        value,
                    } => out.push(ib.store(*memory, *index, *value)),
                    Stmt::If { accept, reject, .. } => {
                        walk(accept, ib, out);
                        walk(reject, ib, out);
                    }
                    Stmt::Loop { body, continuing } => {
                        walk(body, ib, out);
                        walk(continuing, ib, out);
                    }
                    _ => {}
                }
            }
        }
        walk(&k.body.block, &ib, &mut out);
        out
    }

    #[test]
    fn guards_on_the_same_index_and_length_prove_accesses() {
        let k = Kernel::build("guarded", |k| {
            let a = k.buffer::<f32>("a", Access::Read);
            let b = k.buffer::<f32>("b", Access::Write);
            let n = k.value::<u32>("n");
            let i = global_id(Axis::X);
            // Proven: the guard bounds `i` by both lengths.
            if_then(i.lt(n.min(a.len()).min(b.len())), || {
                b.store(i, a.load(i) + 1.0)
            });
            // Not proven: `n` says nothing about the lengths; `i + 1` is another index.
            if_then(i.lt(n), || b.store(i, a.load(i + 1u32)));
            // Proven by the negated guard and the `&&`, and only in the arm it guards.
            if_else(
                i.ge(a.len()).not(),
                || b.store(i, a.load(i)),
                || b.store(i, 0.0),
            );
            if_then(i.lt(b.len()) & i.lt(n), || b.store(i, 2.0));
        })
        .unwrap();
        assert_eq!(proven_loads(&k), [true, false, true]);
        assert_eq!(proven_stores(&k), [true, false, false, false, true]);
    }

    #[test]
    fn a_loop_exit_on_the_bound_proves_the_rest_of_its_body() {
        let k = Kernel::build("looped", |k| {
            let a = k.buffer::<u32>("a", Access::Read);
            let out = k.buffer::<u32>("out", Access::Write);
            let n = k.value::<u32>("n");
            let acc = Var::new("acc", 0u32);
            for_range(0u32, n.min(a.len()), |i| acc.set(acc.get() + a.load(i)));
            for_range(0u32, n, |i| acc.set(acc.get() + a.load(i)));
            out.store(0u32, acc.get());
        })
        .unwrap();
        assert_eq!(proven_loads(&k), [true, false]);
        assert_eq!(proven_stores(&k), [false]);
    }
}
