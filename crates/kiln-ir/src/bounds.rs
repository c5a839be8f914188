//! Loads and stores whose bounds check cannot fail.
//!
//! Every load and store of the IR is checked: out of bounds reads zero and skips the write.
//! Where a condition that guards an access already compares the very index it uses with the
//! length of the memory it accesses (`if i < len(m) { m[i] }`, or `i < min(n, len(m))`, or a
//! loop's `if i >= end { break }` with `end = min(.., len(m))`), the check cannot fail, and a
//! writer may emit the plain access. The same holds for an element of an array local of `n`
//! elements whose index is below `n` by a guard against a literal (`if i < 256`), or by what
//! the index is made of: a literal, a `u8` or `u16` widened to `u32`, `x & mask`, `x % c`,
//! `x >> s`, or a `min` with such a value. The result is the same; only the work is less.

use crate::ir::*;
use crate::types::{ScalarType, ScalarValue, Type};
use std::collections::HashMap;

/// The loads and stores of one body that are proven in bounds by the conditions guarding
/// them. A proof needs the same index handle in the guard and the access: expressions are
/// values, so the handle names the same number at both places.
#[derive(Clone, Debug, Default)]
pub struct InBounds {
    /// Per expression: whether it is a load (of memory or of an array local) proven in
    /// bounds at every place it is evaluated.
    loads: Vec<bool>,
    /// Per (memory, index, value) of a store: whether every such store is proven.
    stores: HashMap<(Memory, Handle, Handle), bool>,
    /// Per (array local, index, value) of an element assignment: whether every one is proven.
    local_stores: HashMap<(LocalId, Handle, Handle), bool>,
}

/// What an index is known to be below.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bound {
    /// The length of a memory.
    Len(Memory),
    /// A number.
    Below(u64),
}

/// What is known at a statement: index handle `.0` is below `.1`.
type Facts = Vec<(Handle, Bound)>;

impl InBounds {
    /// Finds the proven loads and stores of `body`, whose expressions have the types `types`
    /// (one per expression, as [`crate::expr_types`] gives them).
    pub fn of(body: &Body, types: &[Type]) -> InBounds {
        let mut walk = Walk {
            body,
            types,
            loads: vec![None; body.exprs.len()],
            stores: HashMap::new(),
            local_stores: HashMap::new(),
        };
        walk.block(&body.block, &mut Vec::new());
        InBounds {
            loads: walk.loads.into_iter().map(|s| s == Some(true)).collect(),
            stores: walk.stores,
            local_stores: walk.local_stores,
        }
    }

    /// Whether the load `h` (an `Expr::Load` or an `Expr::LocalIndex`) is in bounds wherever
    /// it is evaluated.
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

    /// Whether every assignment of `value` to element `index` of array local `local` is in
    /// bounds.
    pub fn local_store(&self, local: LocalId, index: Handle, value: Handle) -> bool {
        self.local_stores
            .get(&(local, index, value))
            .copied()
            .unwrap_or(false)
    }
}

struct Walk<'a> {
    body: &'a Body,
    types: &'a [Type],
    /// Per expression: `None` until evaluated, then whether every evaluation was proven.
    loads: Vec<Option<bool>>,
    stores: HashMap<(Memory, Handle, Handle), bool>,
    local_stores: HashMap<(LocalId, Handle, Handle), bool>,
}

impl Walk<'_> {
    fn block(&mut self, b: &Block, facts: &mut Facts) {
        let outer = facts.len();
        for s in &b.0 {
            match s {
                Stmt::Eval(h) => {
                    let proven = match self.body.exprs.get(h.index()) {
                        Some(Expr::Load { memory, index }) => {
                            facts.contains(&(*index, Bound::Len(*memory)))
                        }
                        Some(Expr::LocalIndex { local, index }) => {
                            self.in_array(*local, *index, facts)
                        }
                        _ => continue,
                    };
                    let seen = &mut self.loads[h.index()];
                    *seen = Some(seen.unwrap_or(true) && proven);
                }
                Stmt::Store {
                    memory,
                    index,
                    value,
                } => {
                    let proven = facts.contains(&(*index, Bound::Len(*memory)));
                    let seen = self.stores.entry((*memory, *index, *value)).or_insert(true);
                    *seen = *seen && proven;
                }
                Stmt::LocalIndexSet {
                    local,
                    index,
                    value,
                } => {
                    let proven = self.in_array(*local, *index, facts);
                    let seen = self
                        .local_stores
                        .entry((*local, *index, *value))
                        .or_insert(true);
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
                Stmt::Native(call) => self.block(&call.fallback, facts),
                _ => {}
            }
        }
        facts.truncate(outer);
    }

    /// Whether `index` is below the element count of array local `local`, by `facts` or by
    /// what `index` is made of.
    fn in_array(&self, local: LocalId, index: Handle, facts: &Facts) -> bool {
        let Some(Type::Array(_, n)) = self.body.locals.get(local.0 as usize).map(|l| &l.ty) else {
            return false;
        };
        let n = u64::from(*n);
        self.limit(index).is_some_and(|l| l <= n)
            || facts
                .iter()
                .any(|f| matches!(f, (i, Bound::Below(b)) if *i == index && *b <= n))
    }

    /// A number that the `u32` (or narrower unsigned) value `h` is always below, from what it
    /// is made of; `None` when nothing smaller than its type's range is known.
    fn limit(&self, h: Handle) -> Option<u64> {
        let literal = |h: Handle| match self.body.exprs.get(h.index()) {
            Some(Expr::Literal(v)) => unsigned_literal(*v),
            _ => None,
        };
        let ty = |h: Handle| self.types.get(h.index()).and_then(Type::as_scalar);
        if !ty(h).is_some_and(is_unsigned) {
            return None;
        }
        match self.body.exprs.get(h.index())? {
            Expr::Literal(v) => unsigned_literal(*v).map(|v| v.saturating_add(1)),
            Expr::Cast { arg, .. } => match ty(*arg)? {
                ScalarType::U8 => Some(1 << 8),
                ScalarType::U16 => Some(1 << 16),
                ScalarType::Bool => Some(2),
                _ => None,
            },
            Expr::Binary {
                op: BinaryOp::And,
                lhs,
                rhs,
            } => [*lhs, *rhs]
                .into_iter()
                .filter_map(|x| {
                    literal(x)
                        .map(|m| m.saturating_add(1))
                        .or_else(|| self.limit(x))
                })
                .min(),
            Expr::Binary {
                op: BinaryOp::Rem,
                lhs: _,
                rhs,
            } => literal(*rhs).filter(|&c| c > 0),
            Expr::Binary {
                op: BinaryOp::Shr,
                lhs,
                rhs,
            } if ty(*lhs) == Some(ScalarType::U32) => {
                literal(*rhs).filter(|&s| s < 32).map(|s| 1u64 << (32 - s))
            }
            Expr::Math {
                fun: MathFn::Min,
                args,
            } => args.iter().filter_map(|&a| self.limit(a)).min(),
            _ => None,
        }
    }

    /// Adds what `cond` being `holds` implies about indices and lengths.
    fn implied(&self, cond: Handle, holds: bool, facts: &mut Facts) {
        let Some(e) = self.body.exprs.get(cond.index()) else {
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

    /// `index < bound`: below every length `bound` is at most, and below `bound`'s value when
    /// it is an unsigned literal. A bound made of lengths is a `u32`, so the comparison is
    /// unsigned; a literal bound counts only when it is unsigned.
    fn below(&self, index: Handle, bound: Handle, facts: &mut Facts) {
        match self.body.exprs.get(bound.index()) {
            Some(Expr::Len(m)) => facts.push((index, Bound::Len(*m))),
            Some(Expr::Literal(v)) => {
                if let Some(v) = unsigned_literal(*v) {
                    facts.push((index, Bound::Below(v)))
                }
            }
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

/// The value of an unsigned integer constant; `None` for other types.
fn unsigned_literal(v: ScalarValue) -> Option<u64> {
    is_unsigned(v.ty()).then(|| v.to_bits())
}

/// Whether `s` is an unsigned integer type.
fn is_unsigned(s: ScalarType) -> bool {
    matches!(
        s,
        ScalarType::U8 | ScalarType::U16 | ScalarType::U32 | ScalarType::U64
    )
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

    fn in_bounds(k: &Kernel) -> InBounds {
        let types = crate::expr_types(k, &k.params, &k.body).unwrap();
        InBounds::of(&k.body, &types)
    }

    /// Per load (of memory or of an array local, in the order built): whether it is proven.
    fn proven_loads(k: &Kernel) -> Vec<bool> {
        let ib = in_bounds(k);
        k.body
            .exprs
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Expr::Load { .. } | Expr::LocalIndex { .. }))
            .map(|(i, _)| ib.load(Handle(i as u32)))
            .collect()
    }

    /// Per store (to memory or to an array local, in statement order): whether it is proven.
    fn proven_stores(k: &Kernel) -> Vec<bool> {
        let ib = in_bounds(k);
        let mut out = Vec::new();
        fn walk(b: &Block, ib: &InBounds, out: &mut Vec<bool>) {
            for s in &b.0 {
                match s {
                    Stmt::Store {
                        memory,
                        index,
                        value,
                    } => out.push(ib.store(*memory, *index, *value)),
                    Stmt::LocalIndexSet {
                        local,
                        index,
                        value,
                    } => out.push(ib.local_store(*local, *index, *value)),
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

    #[test]
    fn array_local_indices_below_the_length_are_proven() {
        let k = Kernel::build("arrays", |k| {
            let a = k.buffer::<u8>("a", Access::Read);
            let w = k.buffer::<u32>("w", Access::Read);
            let out = k.buffer::<u32>("out", Access::Write);
            let i = global_id(Axis::X);
            let arr = LocalArray::<u32>::new("arr", 256);
            let byte = a.load(i).cast::<u32>();
            let x = w.load(i);
            // Proven by what the index is made of.
            arr.set(byte, 1u32);
            arr.set(x & 255u32, 2u32);
            arr.set(x % 200u32, 3u32);
            arr.set(x >> 24u32, 4u32);
            arr.set(x.min(255u32), 5u32);
            arr.set(255u32, 6u32);
            // Not proven: too wide, or nothing known.
            arr.set(x, 7u32);
            arr.set(x & 256u32, 8u32);
            arr.set(x >> 23u32, 9u32);
            arr.set(x.min(256u32), 10u32);
            arr.set(256u32, 11u32);
            // Proven by a guard against a literal, and only inside it and when it is small
            // enough; a loop's exit proves the rest of its body.
            if_then(x.lt(256u32), || arr.set(x, 12u32));
            if_then(x.lt(257u32), || arr.set(x, 13u32));
            for_range(0u32, 256u32, |j| arr.set(j, arr.get(j) + 1u32));
            for_range(0u32, 257u32, |j| arr.set(j, 14u32));
            out.store(i, arr.get(x) + arr.get(byte));
        })
        .unwrap();
        assert_eq!(
            proven_stores(&k),
            [
                true, true, true, true, true, true, false, false, false, false, false, true, false,
                true, false, false
            ]
        );
        // The two buffer loads are unguarded; then `arr[j]` in the loop, `arr[x]`, `arr[byte]`.
        assert_eq!(proven_loads(&k), [false, false, true, false, true]);
    }
}
