//! Counted loops whose accesses stay in bounds on every trip.
//!
//! A loop `for i in START..END` with constant bounds, or a constant START and an END computed
//! before the loop (see `Lowerer::counted_loop`), whose
//! loads and stores index memory by sums, products and constant shifts of its counter,
//! literals, parameters, built-ins and values computed before the loop (`tile[row * 16 + i]`,
//! `b[i * 16 + x]`) is lowered twice. Before the loop runs, one test evaluates each such index
//! at its largest (the counter's last value; in a quad, the last lane of a contiguous value)
//! in 64 bits and compares it with its memory's length; when every index fits, a copy of the
//! loop without those bounds tests runs, otherwise the ordinary one. Unsigned sums and
//! products only grow with their operands, so the largest operands give the largest index on
//! every trip and in every lane, as long as no step of the index passes `u32::MAX` (and wraps
//! to a small number), which the test checks too. The same fact lets the unchecked copy
//! compute an index that steps with the counter in 64 bits: the four copies of an unrolled
//! pass then share one index value, and their addresses differ only in a displacement
//! (`tile[row * 16 + i + 1]` is the address of `tile[row * 16 + i]` plus 4 bytes).

use super::simd::QuadState;
use super::{Counted, FnCtx, LastTrip, LocalStore, LoopParts, Lowerer, R};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{types, InstBuilder, InstructionData, Opcode, Value, ValueDef};
use kiln_ir::*;
use std::rc::Rc;

/// The most accesses one loop's test covers.
const MAX_PROVEN: usize = 16;

/// A split loop's test and the accesses (memory, index) its fast copy leaves unchecked.
pub(super) struct LoopProof {
    test: Value,
    accesses: Vec<(Memory, Handle)>,
    facts: Rc<ProvenLoop>,
}

/// An index as [`Lowerer::proven_index`] computes it: a 64-bit value (`None` for zero) plus
/// a constant.
struct WideIndex {
    value: Option<Value>,
    step: i64,
    /// True when the value steps with the loop's counter.
    counted: bool,
}

/// What the fast copy of a split loop knows about the indices of the accesses it leaves
/// unchecked (see [`Lowerer::proven_index`]).
pub(super) struct ProvenLoop {
    counter: LocalId,
    /// Per expression: computed inside the loop.
    inside: Vec<bool>,
}

/// What the test of one loop knows: its counter and the counter's last value (64-bit), the
/// expressions computed inside the loop and the locals assigned there.
struct LoopFacts {
    counter: LocalId,
    last: Value,
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
        let last = match last {
            LastTrip::Constant(c) => self.b.ins().iconst(types::I64, c as i64),
            // An end that varies per lane makes a masked loop, never a counted one.
            LastTrip::BeforeEnd(end) if qs.is_some_and(|q| q.lane_first(end).is_some()) => {
                return Ok(None)
            }
            // With the end at 0 this is u64::MAX, and the index sums may wrap to anything:
            // but then the loop runs no trip.
            LastTrip::BeforeEnd(end) => {
                let end = self.get(fx, end)?[0];
                let end = self.b.ins().uextend(types::I64, end);
                self.b.ins().iadd_imm_s(end, -1)
            }
        };
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
        Ok(test.map(|test| LoopProof {
            test,
            accesses: proven,
            facts: Rc::new(ProvenLoop {
                counter: facts.counter,
                inside: facts.inside,
            }),
        }))
    }

    /// For an access that the copy of a split loop being lowered leaves unchecked, when its
    /// index is the counter times constants plus other terms: the index as a 64-bit value plus
    /// a constant. The loop's test showed that no sum or product of the index passes
    /// `u32::MAX` on any trip, so the index computed in 64 bits is the same, and the constant
    /// parts (literals, and the trip's steps from the first trip of an unrolled pass) gather
    /// into one number: the copies of a pass share one index value and their addresses differ
    /// only in the displacement. `None` for other accesses, for an index that does not step
    /// with the counter (nothing to share), and for a quad's index that is not contiguous.
    pub(super) fn proven_index(
        &mut self,
        fx: &mut FnCtx,
        qs: Option<&QuadState>,
        memory: Memory,
        index: Handle,
    ) -> R<Option<(Value, i64)>> {
        let Some(facts) = fx.proven_loop.clone() else {
            return Ok(None);
        };
        if !fx.loop_proven.contains(&(memory, index)) {
            return Ok(None);
        }
        Ok(match self.wide_terms(fx, qs, &facts, index)? {
            Some(WideIndex {
                value: Some(v),
                step,
                counted: true,
            }) => Some((v, step)),
            _ => None,
        })
    }

    /// [`Self::proven_index`] of `h`.
    fn wide_terms(
        &mut self,
        fx: &mut FnCtx,
        qs: Option<&QuadState>,
        facts: &ProvenLoop,
        h: Handle,
    ) -> R<Option<WideIndex>> {
        let e = fx.body.exprs[h.index()].clone();
        let inside = facts.inside[h.index()];
        match e {
            Expr::Literal(ScalarValue::U32(c)) => {
                return Ok(Some(WideIndex {
                    value: None,
                    step: c as i64,
                    counted: false,
                }))
            }
            Expr::LocalGet(l) if inside && l == facts.counter => {
                let v = self.get(fx, h)?[0];
                let (root, step) = self.counter_steps(v);
                return Ok(Some(WideIndex {
                    value: Some(self.index64(root)),
                    step,
                    counted: true,
                }));
            }
            Expr::Binary { op, lhs, rhs } if inside => {
                let scale = match (op, &fx.body.exprs[rhs.index()]) {
                    (BinaryOp::Shl, Expr::Literal(ScalarValue::U32(s))) if *s < 32 => {
                        Some(1i64 << s)
                    }
                    (BinaryOp::Mul, Expr::Literal(ScalarValue::U32(m))) => Some(*m as i64),
                    _ => None,
                };
                if let Some(m) = scale {
                    return Ok(self.wide_terms(fx, qs, facts, lhs)?.map(|w| WideIndex {
                        value: w.value.map(|v| self.b.ins().imul_imm_u(v, m)),
                        step: w.step * m,
                        counted: w.counted,
                    }));
                }
                if op == BinaryOp::Add {
                    let a = self.wide_terms(fx, qs, facts, lhs)?;
                    let b = self.wide_terms(fx, qs, facts, rhs)?;
                    let (Some(a), Some(b)) = (a, b) else {
                        return Ok(None);
                    };
                    let value = match (a.value, b.value) {
                        (Some(x), Some(y)) => Some(self.b.ins().iadd(x, y)),
                        (x, y) => x.or(y),
                    };
                    return Ok(Some(WideIndex {
                        value,
                        step: a.step + b.step,
                        counted: a.counted || b.counted,
                    }));
                }
            }
            _ => {}
        }
        // Anything else is one term, its 32-bit value exact.
        if fx.types[h.index()] != Type::Scalar(ScalarType::U32) {
            return Ok(None);
        }
        let v = match qs.and_then(|q| q.lane_first(h)) {
            Some(Some(first)) => first,
            Some(None) => return Ok(None),
            None => self.get(fx, h)?[0],
        };
        Ok(Some(WideIndex {
            value: Some(self.index64(v)),
            step: 0,
            counted: false,
        }))
    }

    /// A value of a split loop's counter as the value it stepped from at the start of the
    /// unrolled pass (or at the loop's start) and the sum of the steps since: the counter
    /// only grows up to its last value, so none of those steps wraps.
    fn counter_steps(&self, v: Value) -> (Value, i64) {
        let dfg = &self.b.func.dfg;
        let (mut v, mut step) = (dfg.resolve_aliases(v), 0);
        // An unrolled pass has at most four trips: three steps lead back to its first.
        for _ in 0..3 {
            let ValueDef::Result(inst, 0) = dfg.value_def(v) else {
                break;
            };
            let InstructionData::Binary {
                opcode: Opcode::Iadd,
                args: [a, b],
            } = dfg.insts[inst]
            else {
                break;
            };
            let Some(c) = self.constant_u32(b) else {
                break;
            };
            step += c as i64;
            v = dfg.resolve_aliases(a);
        }
        (v, step)
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
            Expr::LocalGet(l) if l == facts.counter => Some(facts.last),
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
        let Some(LoopProof {
            test,
            accesses: proven,
            facts,
        }) = proof
        else {
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
        fx.proven_loop = Some(facts);
        let lowered = self.lower_loop(fx, parts, part);
        fx.proven_loop = None;
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
    walk_stmts(stmts, &mut |s| match s {
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
