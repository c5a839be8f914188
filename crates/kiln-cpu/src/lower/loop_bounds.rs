//! Counted loops whose accesses stay in bounds on every trip.
//!
//! A loop `for i in START..END` with constant bounds (see `Lowerer::constant_trips`) whose
//! loads and stores index memory by sums, products and constant shifts of its counter,
//! literals, parameters, built-ins and values computed before the loop (`tile[row * 16 + i]`,
//! `b[i * 16 + x]`) is lowered twice. Before the loop runs, one test evaluates each such index
//! at its largest (the counter's last value; in a quad, the last lane of a contiguous value)
//! in 64 bits and compares it with its memory's length; when every index fits, a copy of the
//! loop without those bounds tests runs, otherwise the ordinary one. Unsigned sums and
//! products only grow with their operands, so the largest operands give the largest index on
//! every trip and in every lane, as long as no step of the index passes `u32::MAX` (and wraps
//! to a small number), which the test checks too.

use super::simd::{each_stmt, QuadState};
use super::{Counted, FnCtx, LocalStore, LoopParts, Lowerer, R};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, Value};
use kiln_ir::*;

/// The most accesses one loop's test covers.
const MAX_PROVEN: usize = 16;

/// A split loop's test and the accesses (memory, index) its fast copy leaves unchecked.
pub(super) type LoopProof = (Value, Vec<(Memory, Handle)>);

/// What the test of one loop knows: its counter and the counter's last value, the
/// expressions computed inside the loop and the locals assigned there.
struct LoopFacts {
    counter: LocalId,
    last: u32,
    inside: Vec<bool>,
    assigned: Vec<bool>,
}

impl Lowerer<'_, '_> {
    /// For the loop `body`/`continuing`, counted as `counted` says: the test that every load
    /// and store the bounds analysis left checked (outside nested loops) whose index this
    /// module can bound stays in bounds on every trip, with those accesses; `None` when there
    /// are none, when the counter may wrap or shrink, or inside a loop already split. In a
    /// quad, `qs` holds its values that vary per lane.
    pub(super) fn loop_bounds(
        &mut self,
        fx: &mut FnCtx,
        qs: Option<&QuadState>,
        body: &Block,
        continuing: &Block,
        counted: Option<&Counted>,
    ) -> R<Option<LoopProof>> {
        let Some((counter, Some(last))) = counted.map(|c| (c.counter, c.last)) else {
            return Ok(None);
        };
        if fx.in_loop_version {
            return Ok(None);
        }
        let mut facts = LoopFacts {
            counter,
            last,
            inside: vec![false; fx.body.exprs.len()],
            assigned: vec![false; fx.body.locals.len()],
        };
        let mut accesses = Vec::new();
        for part in [body, continuing] {
            mark_inside(&part.0, &mut facts);
            unproven_accesses(fx, &part.0, &mut accesses);
        }
        let mut test: Option<Value> = None;
        let mut proven = Vec::new();
        for (memory, index) in accesses {
            if proven.len() == MAX_PROVEN {
                break;
            }
            let mut steps = Vec::new();
            let Some(max) = self.index_max(fx, qs, &facts, index, &mut steps)? else {
                continue;
            };
            let (_, len, _) = self.memory(memory)?;
            let mut ok = self.b.ins().icmp(IntCC::UnsignedLessThan, max, len);
            for s in steps {
                ok = self.b.ins().band(ok, s);
            }
            test = Some(match test {
                Some(t) => self.b.ins().band(t, ok),
                None => ok,
            });
            proven.push((memory, index));
        }
        Ok(test.map(|t| (t, proven)))
    }

    /// The largest value index `h` takes in the loop, as a 64-bit value, or `None` when it is
    /// not made of what [`LoopFacts`] can bound. Pushes onto `steps` a flag per sum or product
    /// that is true when its largest value fits in 32 bits.
    fn index_max(
        &mut self,
        fx: &mut FnCtx,
        qs: Option<&QuadState>,
        facts: &LoopFacts,
        h: Handle,
        steps: &mut Vec<Value>,
    ) -> R<Option<Value>> {
        if fx.types[h.index()] != Type::Scalar(ScalarType::U32) {
            return Ok(None);
        }
        let wide = |l: &mut Self, v: Value| l.b.ins().uextend(types::I64, v);
        let e = fx.body.exprs[h.index()].clone();
        if let Expr::Literal(ScalarValue::U32(c)) = e {
            return Ok(Some(self.b.ins().iconst(types::I64, c as i64)));
        }
        if !facts.inside[h.index()] {
            // Computed before the loop: its value now is its value on every trip.
            if let Some(lanes) = qs.and_then(|q| q.lane_first(h)) {
                return Ok(lanes.map(|first| {
                    let first = wide(self, first);
                    self.b.ins().iadd_imm_s(first, 3)
                }));
            }
            return Ok(match self.get(fx, h) {
                Ok(v) => Some(wide(self, v[0])),
                Err(_) => None,
            });
        }
        Ok(match e {
            Expr::LocalGet(l) if l == facts.counter => {
                Some(self.b.ins().iconst(types::I64, facts.last as i64))
            }
            Expr::LocalGet(l)
                if !facts.assigned[l.0 as usize] && !qs.is_some_and(|q| q.local_varies(l)) =>
            {
                match &fx.locals[l.0 as usize] {
                    LocalStore::Vars(vars) | LocalStore::Group(vars) if vars.len() == 1 => {
                        let v = self.b.use_var(vars[0]);
                        Some(wide(self, v))
                    }
                    _ => None,
                }
            }
            Expr::Param(i) => {
                let v = fx.params.get(i as usize).and_then(|p| p.first()).copied();
                v.map(|v| wide(self, v))
            }
            Expr::Builtin(b) => {
                if let Some(first) = qs.and_then(|q| self.varying_builtin_first(q, b)) {
                    let first = wide(self, first);
                    Some(self.b.ins().iadd_imm_s(first, 3))
                } else {
                    let v = self.expr(fx, h)?[0];
                    Some(wide(self, v))
                }
            }
            Expr::Binary { op, lhs, rhs } => {
                let shift = match (op, &fx.body.exprs[rhs.index()]) {
                    (BinaryOp::Shl, Expr::Literal(ScalarValue::U32(s))) if *s < 32 => Some(*s),
                    _ => None,
                };
                if !matches!(op, BinaryOp::Add | BinaryOp::Mul) && shift.is_none() {
                    return Ok(None);
                }
                let Some(a) = self.index_max(fx, qs, facts, lhs, steps)? else {
                    return Ok(None);
                };
                let r = match shift {
                    Some(s) => self.b.ins().ishl_imm_u(a, s as i64),
                    None => {
                        let Some(b) = self.index_max(fx, qs, facts, rhs, steps)? else {
                            return Ok(None);
                        };
                        match op {
                            BinaryOp::Add => self.b.ins().iadd(a, b),
                            _ => self.b.ins().imul(a, b),
                        }
                    }
                };
                let fits =
                    self.b
                        .ins()
                        .icmp_imm_u(IntCC::UnsignedLessThanOrEqual, r, u32::MAX as i64);
                steps.push(fits);
                Some(r)
            }
            _ => None,
        })
    }

    /// The loop `parts` lowered by `part`, as [`Self::lower_loop`] does; with a
    /// `proof` from [`Self::loop_bounds`], twice: the copy that runs when its test holds
    /// leaves the accesses it covers unchecked.
    pub(super) fn lower_loop_versions(
        &mut self,
        fx: &mut FnCtx,
        parts: &LoopParts,
        proof: Option<LoopProof>,
        part: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let Some((test, proven)) = proof else {
            return self.lower_loop(fx, parts, part);
        };
        let (fast, general, merge) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(test, fast, &[], general, &[]);
        fx.in_loop_version = true;
        self.b.switch_to_block(fast);
        let added: Vec<_> = proven
            .into_iter()
            .filter(|a| fx.loop_proven.insert(*a))
            .collect();
        let lowered = self.lower_loop(fx, parts, part);
        for a in &added {
            fx.loop_proven.remove(a);
        }
        lowered?;
        self.b.ins().jump(merge, &[]);
        self.b.switch_to_block(general);
        let lowered = self.lower_loop(fx, parts, part);
        fx.in_loop_version = false;
        lowered?;
        self.b.ins().jump(merge, &[]);
        self.b.switch_to_block(merge);
        Ok(())
    }
}

/// Marks in `facts` the expressions `stmts` compute and the locals they assign, nested
/// statements included.
fn mark_inside(stmts: &[Stmt], facts: &mut LoopFacts) {
    each_stmt(stmts, &mut |s| match s {
        Stmt::Eval(h) => facts.inside[h.index()] = true,
        Stmt::LocalSet { local, .. } | Stmt::LocalIndexSet { local, .. } => {
            facts.assigned[local.0 as usize] = true
        }
        _ => {}
    });
}

/// Adds to `out` the loads and stores of memory in `stmts` (outside nested loops) whose
/// bounds the analysis did not prove, each (memory, index) once.
fn unproven_accesses(fx: &FnCtx, stmts: &[Stmt], out: &mut Vec<(Memory, Handle)>) {
    for s in stmts {
        let access = match s {
            Stmt::Eval(h) => match &fx.body.exprs[h.index()] {
                Expr::Load { memory, index } if !fx.in_bounds.load(*h) => Some((*memory, *index)),
                _ => None,
            },
            Stmt::Store {
                memory,
                index,
                value,
            } if !fx.in_bounds.store(*memory, *index, *value) => Some((*memory, *index)),
            Stmt::If { accept, reject, .. } => {
                unproven_accesses(fx, &accept.0, out);
                unproven_accesses(fx, &reject.0, out);
                None
            }
            _ => None,
        };
        if let Some(a) = access.filter(|a| !out.contains(a)) {
            out.push(a);
        }
    }
}
