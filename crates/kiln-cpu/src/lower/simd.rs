//! Four work items at a time: f32x4/i32x4 (and for 64-bit types, two f64x2 or i64x2: see
//! `wide`) lowering of kernel bodies and of the runs between group barriers.
//!
//! Statements over 32- and 64-bit values and `bool`s (and loads of 8- and 16-bit integers that are
//! only cast to 32 bits, which widen as they load), with any structured control flow (no
//! atomics or array locals, and no calls: the backend inlines device functions first, see
//! `kiln_ir::inline_calls`; subgroups have one lane on the CPU), run their work items in
//! quads: the whole body of a
//! kernel without group barriers, or one run of a kernel with them (see `super`). In a run,
//! the private locals and values other runs share are loaded at the quad's start and stored
//! at its end, one 16-byte access each for those that vary (the private layout keeps a quad's
//! four copies adjacent); a kernel with barriers that returns early never uses quads. Values
//! the same for the whole group stay scalar and reuse the scalar lowering; values that vary per
//! item live in 128-bit vectors, and so do locals that are assigned a varying value or assigned
//! under a varying condition. An index equal to the work item's global id plus a uniform value
//! is tracked as contiguous, so its loads and stores become vector loads and stores when all
//! four lanes are in bounds. `if` on a varying condition becomes lane masks; stores write, and
//! local assignments change, only active lanes. A loop that all four lanes leave together
//! (its exits depend on uniform values only) keeps scalar jumps, even when only some lanes
//! entered it; a loop whose lanes may leave at different times runs until every lane has
//! left, and a lane that breaks, continues or returns is masked off until it comes back (see
//! [`MaskedLoop`]). A local declared inside a block and assigned there before it is read stays
//! uniform when only control flow outside that block varies, so a `for` counter inside
//! `if i < n` keeps scalar jumps and loads. Operations without a vector instruction run
//! lane by lane with the scalar lowering, so every IR rule holds unchanged. A quad is four
//! neighbours along x: one-dimensional groups stop before their last partial quad, which the
//! scalar loop finishes; groups of two or three dimensions run in quads when their rows are a
//! multiple of four work items long (then along y and z a quad's four items agree), and in the
//! scalar loop otherwise.

use super::{clty, mem_flags, runs, BoundsCheck, FnCtx, LocalStore, LoopParts, Lowerer, R};
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{types, BlockArg, InstBuilder, Value};
use cranelift_frontend::Variable;
use kiln_ir::*;
use std::rc::Rc;

mod analysis;
mod exprs;
mod memory;
mod ops;
use memory::{mem_flags_little, vec_flags};
mod wide;

use analysis::*;
pub(super) use analysis::{quad_plan, QuadPlan};

/// A varying value: the vector, and for contiguous integer indices the scalar first lane.
#[derive(Clone, Copy)]
struct Lanes {
    /// All four lanes; for a 64-bit value lanes 0 and 1 (see `wide`).
    v: Value,
    /// For a 64-bit value, lanes 2 and 3.
    hi: Option<Value>,
    first: Option<Value>,
    /// For an index that is contiguous when a condition holds in all four lanes (a 2D view's
    /// `select(in_bounds, row * stride + col, u32::MAX)`): that condition as a scalar, and the
    /// first lane's index when it holds.
    first_if: Option<(Value, Value)>,
}

impl Lanes {
    fn varying(v: Value) -> Lanes {
        Lanes {
            v,
            hi: None,
            first: None,
            first_if: None,
        }
    }

    /// A 64-bit value from its two halves.
    fn halves(lo: Value, hi: Value) -> Lanes {
        Lanes {
            hi: Some(hi),
            ..Lanes::varying(lo)
        }
    }
}

/// The vector variables of a local that varies per work item: one, or two for a 64-bit local
/// (lanes 0 and 1, lanes 2 and 3).
#[derive(Clone, Copy)]
struct LaneVars {
    v: Variable,
    hi: Option<Variable>,
}

pub(super) struct QuadState {
    lanes: Vec<Option<Lanes>>,
    /// For a varying `bool` computed by comparing a contiguous index with a uniform bound: a
    /// scalar that is true when all four lanes are true.
    all_true: Vec<Option<Value>>,
    /// The vector variables of each local that varies per work item.
    locals: Vec<Option<LaneVars>>,
    active: Value,
    /// True where every lane is known to be active (outside varying `if`s).
    full: bool,
    /// True once a `return`, or a loop whose lanes may leave it at different times, has been
    /// lowered, so some lanes may have left.
    may_have_exited: bool,
    /// The lanes that have left: returned, or broken out of or continued past the rest of an
    /// iteration of a loop they are still inside (see [`MaskedLoop`]). Their stores are
    /// skipped, and inside such a loop their locals are kept.
    exited: Variable,
    /// The loops around the statement being lowered, innermost last: `None` for a loop that
    /// every lane leaves together (its `break` and `continue` are jumps).
    loops: Vec<Option<MaskedLoop>>,
    /// [`QuadPlan::varying_exprs`].
    varying_exprs: Vec<bool>,
    first_item: Value,
    iota: Value,
    /// The kernel's [`PrefixFacts`] while lowering the version of the body for the quads where
    /// they hold.
    prefix: Option<Rc<PrefixFacts>>,
}

impl QuadState {
    /// For a value that varies per lane: `Some(first)` when its lanes are `first + 0..3`,
    /// `Some(None)` when they are not; `None` for a value the same in all four lanes.
    pub(super) fn lane_first(&self, h: Handle) -> Option<Option<Value>> {
        self.lanes[h.index()].map(|l| l.first)
    }

    /// True when the quad keeps local `l` per lane.
    pub(super) fn local_varies(&self, l: LocalId) -> bool {
        self.locals[l.0 as usize].is_some()
    }

    /// True where all four lanes are known to run: outside varying `if`s, before any `return`.
    fn all_active(&self) -> bool {
        self.full && !self.may_have_exited
    }

    /// True inside a loop whose lanes may leave it at different times: lanes that left come
    /// back (after the iteration or the loop), so their locals must be kept.
    fn in_masked_loop(&self) -> bool {
        self.loops.iter().any(Option::is_some)
    }
}

/// A loop some of whose lanes may leave before the others: a `break`, `continue` or `return`
/// under a condition that varies per lane. Its `break` and `continue` add the active lanes to
/// [`QuadState::exited`] and to `broken` or `skipped`; the lanes in `skipped` come back for
/// the next iteration, those in `broken` after the loop, which runs while any lane it started
/// with has not left.
#[derive(Clone, Copy)]
struct MaskedLoop {
    broken: Variable,
    skipped: Variable,
}

impl Lowerer<'_, '_> {
    /// The element type of a memory when quads can load and store it one 32-bit lane per
    /// element.
    fn quad_elem(&self, m: Memory) -> bool {
        self.memory_elem(m)
            .is_some_and(|e| allowed(e) && *e != Type::Scalar(ScalarType::Bool))
    }

    /// True when quads can load the elements of `m`: those [`Self::quad_elem`] allows, and
    /// 8- and 16-bit integers, which they widen to 32 bits.
    fn quad_load_elem(&self, m: Memory) -> bool {
        self.quad_elem(m) || self.memory_elem(m).is_some_and(narrow)
    }

    fn memory_elem(&self, m: Memory) -> Option<&Type> {
        match m {
            Memory::Buffer(p) => match &self.k.params.get(p as usize)?.kind {
                ParamKind::Buffer { elem, .. } => Some(elem),
                ParamKind::Value(_) => None,
            },
            Memory::Shared(s) => Some(&self.k.shared.get(s as usize)?.elem),
        }
    }

    /// True when `stmts` (the whole body, or one run of a barrier kernel) can run in quads
    /// and something in them differs between work items.
    pub(super) fn quad_fits(&self, fx: &FnCtx, plan: &QuadPlan, stmts: &[Stmt]) -> bool {
        let body = fx.body;
        if !control_fits(body, stmts) {
            return false;
        }
        let (mut ok, mut varies) = (true, false);
        walk_stmts(stmts, &mut |s| match s {
            Stmt::Eval(h) => {
                let (i, ty) = (h.index(), &fx.types[h.index()]);
                let spilled_lanes = plan.varying_exprs[i] && self.spill_slot(fx, *h).is_some();
                let widened = narrow(ty) && plan.widened[i] && self.spill_slot(fx, *h).is_none();
                ok &= (allowed(ty) || widened) && (!spilled_lanes || four_bytes(ty));
                if let Expr::Load { memory, .. } = &body.exprs[i] {
                    ok &= self.quad_load_elem(*memory);
                }
                varies |= plan.varying_exprs[i];
            }
            Stmt::Store { memory, .. } => ok &= self.quad_elem(*memory),
            _ => {}
        });
        if self.barrier_mode {
            for h in runs::outside_inputs(stmts, body) {
                let i = h.index();
                varies |= plan.varying_exprs[i];
                ok &= if self.runs.remat[i] {
                    self.remat_fits(fx, h)
                } else {
                    let ty = &fx.types[i];
                    allowed(ty) && (!plan.varying_exprs[i] || four_bytes(ty))
                };
            }
        }
        for l in runs::locals_used(stmts, body) {
            let i = l.0 as usize;
            let ty = &body.locals[i].ty;
            let private = matches!(fx.locals[i], LocalStore::Private(_));
            ok &= allowed(ty) && !(private && plan.varying_locals[i] && !four_bytes(ty));
            varies |= plan.varying_locals[i];
        }
        ok && varies
    }

    /// True when rematerializable expression `h` and every operand it is computed from have a
    /// quad form.
    fn remat_fits(&self, fx: &FnCtx, h: Handle) -> bool {
        let mut seen = vec![false; fx.body.exprs.len()];
        let mut todo = vec![h];
        while let Some(h) = todo.pop() {
            if std::mem::replace(&mut seen[h.index()], true) {
                continue;
            }
            let e = &fx.body.exprs[h.index()];
            if !allowed(&fx.types[h.index()]) || !expr_ok(e) {
                return false;
            }
            todo.extend(operands(e));
        }
        true
    }

    /// Barrier mode, at the start of a quad's pass over a run: loads the private locals the
    /// run uses into variables (vectors for those that vary), recomputes the rematerializable
    /// values it reads and loads the others from private memory. Returns the locals it loaded
    /// with their frame offsets, for `quad_leave_run`.
    fn quad_enter_run(
        &mut self,
        fx: &mut FnCtx,
        qs: &mut QuadState,
        plan: &QuadPlan,
        stmts: &[Stmt],
    ) -> R<Vec<(usize, u32)>> {
        let mut promoted = Vec::new();
        for l in runs::locals_used(stmts, fx.body) {
            let i = l.0 as usize;
            let LocalStore::Private(off) = fx.locals[i] else {
                continue;
            };
            let ty = fx.body.locals[i].ty.clone();
            match qs.locals[i] {
                Some(var) => {
                    let s = ty.as_scalar().ok_or("non-scalar private local in a quad")?;
                    let addr = self.private_addr(off, 4);
                    let v = self.b.ins().load(vty(s), vec_flags(), addr, 0);
                    self.b.def_var(var.v, v);
                }
                None => {
                    let addr = self.private_addr(off, ty.size());
                    let vals = self.load_flat(&ty, addr, 0);
                    let vars = self.declare_vars(&ty);
                    for (var, v) in vars.iter().zip(vals) {
                        self.b.def_var(*var, v);
                    }
                    fx.locals[i] = LocalStore::Vars(vars);
                }
            }
            promoted.push((i, off));
        }
        for h in runs::outside_inputs(stmts, fx.body) {
            if fx.vals[h.index()].is_some() {
                continue;
            }
            if self.runs.remat[h.index()] {
                self.quad_remat(fx, qs, h)?;
                continue;
            }
            let off = self
                .spill_slot(fx, h)
                .ok_or_else(|| format!("expression %{} used before it is computed", h.0))?;
            let ty = fx.types[h.index()].clone();
            if plan.varying_exprs[h.index()] {
                let s = ty.as_scalar().ok_or("non-scalar private value in a quad")?;
                let addr = self.private_addr(off, 4);
                let v = self.b.ins().load(vty(s), vec_flags(), addr, 0);
                qs.lanes[h.index()] = Some(Lanes::varying(v));
            } else {
                let addr = self.private_addr(off, ty.size());
                fx.vals[h.index()] = Some(self.load_flat(&ty, addr, 0));
            }
        }
        Ok(promoted)
    }

    /// Barrier mode, at the end of a quad's pass over a run: stores the locals
    /// `quad_enter_run` loaded back into the four work items' private memory.
    fn quad_leave_run(&mut self, fx: &mut FnCtx, qs: &QuadState, promoted: Vec<(usize, u32)>) {
        for (i, off) in promoted {
            match qs.locals[i] {
                Some(var) => {
                    let v = self.b.use_var(var.v);
                    let addr = self.private_addr(off, 4);
                    self.b.ins().store(vec_flags(), v, addr, 0);
                }
                None => {
                    if let LocalStore::Vars(vars) = &fx.locals[i] {
                        let vals: Vec<Value> =
                            vars.clone().iter().map(|v| self.b.use_var(*v)).collect();
                        let ty = fx.body.locals[i].ty.clone();
                        self.store_uniform(&ty, off, &vals);
                    }
                    fx.locals[i] = LocalStore::Private(off);
                }
            }
        }
    }

    /// Stores a value that is the same for the whole quad into each of its four work items'
    /// private copies at frame offset `off`.
    fn store_uniform(&mut self, ty: &Type, off: u32, vals: &[Value]) {
        let addr = self.private_addr(off, ty.size());
        for k in 0..4 {
            self.store_flat(ty, addr, k * ty.size(), vals);
        }
    }

    /// Computes rematerializable expression `h` for the quad, operands first.
    fn quad_remat(&mut self, fx: &mut FnCtx, qs: &mut QuadState, h: Handle) -> R<()> {
        if fx.vals[h.index()].is_some() || qs.lanes[h.index()].is_some() {
            return Ok(());
        }
        for op in operands(&fx.body.exprs[h.index()]) {
            self.quad_remat(fx, qs, op)?;
        }
        self.quad_eval(fx, qs, h)
    }

    /// The number of items from the group's first for which every fact of `facts` holds: the
    /// least of each bound and each memory's length, less the global id of the group's first
    /// item (0 where that is more), and the group's size. 64-bit throughout, so a bound is
    /// never passed by wrapping.
    fn prefix_end(&mut self, fx: &mut FnCtx, facts: &PrefixFacts) -> R<Value> {
        let gid = self.b.ins().uextend(types::I64, self.gid[0]);
        let size = self.b.ins().uextend(types::I64, self.gsize[0]);
        let first = self.b.ins().imul(gid, size);
        let mut end = self.total64;
        let mut limit = |l: &mut Self, bound: Value| {
            let room = l.b.ins().isub(bound, first);
            let past = l.b.ins().icmp(IntCC::UnsignedLessThan, bound, first);
            let zero = l.b.ins().iconst(types::I64, 0);
            let room = l.b.ins().select(past, zero, room);
            end = l.b.ins().umin(end, room);
        };
        for &b in &facts.bounds {
            let v = self.fixed_bound(fx, b)?;
            limit(self, v);
        }
        for &m in &facts.memories {
            let (_, len, _) = self.memory(m)?;
            limit(self, len);
        }
        Ok(end)
    }

    /// The value of a bound of [`PrefixFacts`] (a `u32` literal, parameter, length, or `min`
    /// of those), computed at the call's entry as a 64-bit value.
    fn fixed_bound(&mut self, fx: &mut FnCtx, h: Handle) -> R<Value> {
        Ok(match &fx.body.exprs[h.index()] {
            Expr::Literal(ScalarValue::U32(c)) => self.b.ins().iconst(types::I64, *c as i64),
            Expr::Param(i) => {
                let v = *fx
                    .params
                    .get(*i as usize)
                    .and_then(|p| p.first())
                    .ok_or("no such parameter")?;
                self.b.ins().uextend(types::I64, v)
            }
            Expr::Len(m) => self.memory(*m)?.1,
            Expr::Math {
                fun: MathFn::Min,
                args,
            } => {
                let args = args.clone();
                let (first, rest) = args.split_first().ok_or("min of no values")?;
                let mut least = self.fixed_bound(fx, *first)?;
                for a in rest {
                    let v = self.fixed_bound(fx, *a)?;
                    least = self.b.ins().umin(least, v);
                }
                least
            }
            other => return Err(format!("{other:?} is not a fixed bound")),
        })
    }

    /// Runs full quads of work items with the vector lowering; returns the first work item
    /// left for the scalar loop: the one after the last full quad (the group's size when
    /// quads covered it), or 0 when quads cannot run (a multi-dimensional group whose rows are
    /// not a multiple of 4 long).
    pub(super) fn quad_loop(
        &mut self,
        fx: &mut FnCtx,
        plan: &QuadPlan,
        stmts: &[Stmt],
    ) -> R<Value> {
        // A quad must lie in one row of the group: one-dimensional groups, or rows whose
        // length is a multiple of 4 (then the quads cover the whole group).
        let one_dim = {
            let y = self.b.ins().icmp_imm_s(IntCC::Equal, self.gsize[1], 1);
            let z = self.b.ins().icmp_imm_s(IntCC::Equal, self.gsize[2], 1);
            self.b.ins().band(y, z)
        };
        let in_rows = {
            let x_rem = self.b.ins().band_imm_u(self.gsize[0], 3);
            let x4 = self.b.ins().icmp_imm_s(IntCC::Equal, x_rem, 0);
            self.b.ins().bor(one_dim, x4)
        };
        let zero = self.iconst32(0);
        let limit = self.b.ins().select(in_rows, self.total, zero);
        let lanes: Vec<u8> = [0u32, 1, 2, 3]
            .iter()
            .flat_map(|i| i.to_le_bytes())
            .collect();
        let lanes = self.b.func.dfg.constants.insert(lanes.into());
        let iota = self.b.ins().vconst(types::I32X4, lanes);
        let locals: Vec<Option<LaneVars>> = plan
            .varying_locals
            .iter()
            .zip(&fx.body.locals)
            .zip(&fx.locals)
            .map(|((v, decl), store)| {
                let s = decl.ty.as_scalar()?;
                // A group local is one value for the whole group, whatever the plan says.
                let varies = *v && !matches!(store, LocalStore::Group(_));
                varies.then(|| LaneVars {
                    v: self.b.declare_var(vty(s)),
                    hi: in_halves(s).then(|| self.b.declare_var(vty(s))),
                })
            })
            .collect();
        let q_var = self.b.declare_var(types::I32);
        // x always (the quads step along it); y and z only when the kernel reads them.
        let lid_vars: Vec<Variable> = (0..self.local_axes.max(1))
            .map(|_| self.b.declare_var(types::I32))
            .collect();
        let exited = self.b.declare_var(types::I32X4);
        self.b.def_var(q_var, zero);
        for v in &lid_vars {
            self.b.def_var(*v, zero);
        }
        let (header, body, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        // Items from the group's first up to `prefix_end` satisfy the kernel's prefix facts.
        let versions = !self.barrier_mode && plan.prefix.worth_it(stmts);
        let prefix_end = match versions {
            true => {
                // Kept in a stack slot: as a pure value, Cranelift would compute it again at
                // its use in every quad.
                let end = self.prefix_end(fx, &plan.prefix)?;
                let slot =
                    self.b
                        .create_sized_stack_slot(cranelift_codegen::ir::StackSlotData::new(
                            cranelift_codegen::ir::StackSlotKind::ExplicitSlot,
                            8,
                            3,
                        ));
                self.b.ins().stack_store(types::I64, end, slot, 0);
                Some(slot)
            }
            false => None,
        };
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let q = self.b.use_var(q_var);
        let q4 = self.b.ins().iadd_imm_s(q, 4);
        let more = (IntCC::UnsignedLessThanOrEqual, q4, limit);
        super::enter_items_loop(&mut self.b, stmts, more, body, exit);
        self.b.switch_to_block(body);
        let none = self.b.ins().splat(types::I32X4, zero);
        self.b.def_var(exited, none);
        let all = self.b.ins().iconst(types::I32, -1);
        let active = self.b.ins().splat(types::I32X4, all);
        self.lid = [zero; 3];
        for (lid, var) in self.lid.iter_mut().zip(&lid_vars) {
            *lid = self.b.use_var(*var);
        }
        self.item = Some(q);
        self.zero_quad_locals(fx, &locals);
        let state = |prefix: Option<Rc<PrefixFacts>>, first_item: Value| QuadState {
            lanes: vec![None; fx.body.exprs.len()],
            all_true: vec![None; fx.body.exprs.len()],
            locals: locals.clone(),
            active,
            full: true,
            may_have_exited: false,
            exited,
            loops: Vec::new(),
            varying_exprs: plan.varying_exprs.clone(),
            first_item,
            iota,
            prefix,
        };
        if let Some(slot) = prefix_end {
            let end = self.b.ins().stack_load(types::I64, types::I64, slot, 0);
            // The quads inside the prefix run a copy of the body without the tests its facts
            // settle; the others (at most one per group) the general body.
            let (fast, general, latch) = (
                self.b.create_block(),
                self.b.create_block(),
                self.b.create_block(),
            );
            self.b.set_cold_block(general);
            if unrolls(stmts) {
                // In one-dimensional groups, where the local id is the item and does not wrap,
                // the next UNROLL quads inside the prefix run in one go: the loop's own tests
                // and advances are paid once for them.
                let (run, one) = (self.b.create_block(), self.b.create_block());
                let span = 4 * UNROLL as i64;
                let q_end = self.b.ins().iadd_imm_s(q, span);
                let q_end64 = self.b.ins().uextend(types::I64, q_end);
                let in_prefix = self
                    .b
                    .ins()
                    .icmp(IntCC::UnsignedLessThanOrEqual, q_end64, end);
                let in_group = self
                    .b
                    .ins()
                    .icmp(IntCC::UnsignedLessThanOrEqual, q_end, limit);
                let all = self.b.ins().band(in_prefix, in_group);
                let all = self.b.ins().band(all, one_dim);
                self.b.ins().brif(all, run, &[], one, &[]);
                self.b.switch_to_block(run);
                let [x, y, z] = self.lid;
                for u in 0..UNROLL as i64 {
                    let first = self.b.ins().iadd_imm_s(q, 4 * u);
                    if u > 0 {
                        self.lid = [self.b.ins().iadd_imm_s(x, 4 * u), y, z];
                        self.item = Some(first);
                        self.zero_quad_locals(fx, &locals);
                        // Each quad starts with all four lanes: those that returned in the
                        // quad before are not this quad's.
                        self.b.def_var(exited, none);
                    }
                    self.quad_block(fx, &mut state(Some(plan.prefix.clone()), first), stmts)?;
                }
                // The latch adds the last quad's 4.
                let last = self.b.ins().iadd_imm_s(q, span - 4);
                self.b.def_var(q_var, last);
                let last_x = self.b.ins().iadd_imm_s(x, span - 4);
                self.b.def_var(lid_vars[0], last_x);
                self.b.ins().jump(latch, &[]);
                self.b.switch_to_block(one);
                self.lid = [x, y, z];
                self.item = Some(q);
            }
            let q4 = self.b.ins().iadd_imm_s(q, 4);
            let q4 = self.b.ins().uextend(types::I64, q4);
            let inside = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, q4, end);
            self.b.ins().brif(inside, fast, &[], general, &[]);
            for (block, prefix) in [(fast, Some(plan.prefix.clone())), (general, None)] {
                self.b.switch_to_block(block);
                self.quad_block(fx, &mut state(prefix, q), stmts)?;
                self.b.ins().jump(latch, &[]);
            }
            self.b.switch_to_block(latch);
        } else {
            let mut qs = state(None, q);
            let promoted = if self.barrier_mode {
                self.quad_enter_run(fx, &mut qs, plan, stmts)?
            } else {
                Vec::new()
            };
            self.quad_block(fx, &mut qs, stmts)?;
            self.quad_leave_run(fx, &qs, promoted);
        }
        let q = self.b.use_var(q_var);
        let next = self.b.ins().iadd_imm_s(q, 4);
        self.b.def_var(q_var, next);
        // The next quad's local id: four along x; at the end of a row (for one-dimensional
        // groups only after the last quad) it wraps into the next row and layer.
        let x = self.b.use_var(lid_vars[0]);
        let x = self.b.ins().iadd_imm_s(x, 4);
        self.b.def_var(lid_vars[0], x);
        let x_wraps = self.b.ins().icmp(IntCC::Equal, x, self.gsize[0]);
        let wrap = self.b.create_block();
        self.b.ins().brif(x_wraps, wrap, &[], header, &[]);
        self.b.switch_to_block(wrap);
        self.b.def_var(lid_vars[0], zero);
        if let [_, y_var, rest @ ..] = &lid_vars[..] {
            let y = self.b.use_var(*y_var);
            let y = self.b.ins().iadd_imm_s(y, 1);
            let y_wraps = self.b.ins().icmp(IntCC::Equal, y, self.gsize[1]);
            let next_y = self.b.ins().select(y_wraps, zero, y);
            self.b.def_var(*y_var, next_y);
            if let [z_var] = rest {
                let z = self.b.use_var(*z_var);
                let carry = self.b.ins().uextend(types::I32, y_wraps);
                let next_z = self.b.ins().iadd(z, carry);
                self.b.def_var(*z_var, next_z);
            }
        }
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(exit);
        self.item = None;
        self.forget_run_values(fx);
        Ok(self.b.use_var(q_var))
    }

    /// Starts a quad's locals from zero: the scalar ones (see `zero_locals`) and the vector
    /// ones of `locals`.
    fn zero_quad_locals(&mut self, fx: &FnCtx, locals: &[Option<LaneVars>]) {
        self.zero_locals(fx);
        for (var, decl) in locals.iter().zip(&fx.body.locals) {
            if let (Some(var), Some(s)) = (var, decl.ty.as_scalar()) {
                let z = self.zero(s);
                let z = self.b.ins().splat(vty(s), z);
                for v in [Some(var.v), var.hi].into_iter().flatten() {
                    self.b.def_var(v, z);
                }
            }
        }
    }

    fn quad_block(&mut self, fx: &mut FnCtx, qs: &mut QuadState, stmts: &[Stmt]) -> R<()> {
        for s in stmts {
            match s {
                Stmt::Eval(h) => {
                    self.quad_eval(fx, qs, *h)?;
                    if let Some(off) = self.spill_slot(fx, *h) {
                        match qs.lanes[h.index()] {
                            Some(l) => {
                                let addr = self.private_addr(off, 4);
                                self.b.ins().store(vec_flags(), l.v, addr, 0);
                            }
                            None => {
                                let v = self.get(fx, *h)?;
                                let ty = fx.types[h.index()].clone();
                                self.store_uniform(&ty, off, &v);
                            }
                        }
                    }
                }
                Stmt::Source(_) => {}
                Stmt::Store {
                    memory,
                    index,
                    value,
                } => self.quad_store(fx, qs, *memory, *index, *value)?,
                Stmt::Return(None) => {
                    self.leave(qs, None);
                    qs.may_have_exited = true;
                }
                Stmt::LocalSet { local, value } => match qs.locals[local.0 as usize] {
                    Some(var) => {
                        let mut v = self.quad_value(fx, qs, *value)?;
                        // Lanes that left a loop they are still inside keep their locals;
                        // lanes that returned no longer need theirs.
                        let keep = if qs.in_masked_loop() {
                            Some(self.live(qs))
                        } else {
                            (!qs.full).then_some(qs.active)
                        };
                        if let Some(keep) = keep {
                            let old = self.read_vars(var);
                            v = self.blend(keep, v, old);
                        }
                        self.b.def_var(var.v, v.v);
                        if let (Some(var_hi), Some(hi)) = (var.hi, v.hi) {
                            self.b.def_var(var_hi, hi);
                        }
                    }
                    None => self.stmt(fx, s)?,
                },
                Stmt::Loop { body, continuing } => {
                    let varying = &qs.varying_exprs;
                    if block_has_return(body)
                        || block_has_return(continuing)
                        || varying_exit(varying, body, false)
                        || varying_exit(varying, continuing, false)
                    {
                        self.quad_masked_loop(fx, qs, body, continuing)?;
                        continue;
                    }
                    // Lanes that left take the loop's uniform exits with the others, but a
                    // quad whose every lane left must not run it at all.
                    let enter = if qs.may_have_exited {
                        let live = self.live(qs);
                        Some(self.b.ins().vany_true(live))
                    } else {
                        None
                    };
                    // A counter that varies per lane has no one trip count.
                    let counted = self
                        .counted_loop(fx, body, continuing)
                        .filter(|c| qs.locals[c.counter.0 as usize].is_none());
                    let proof =
                        self.loop_bounds(fx, Some(qs), body, continuing, counted.as_ref())?;
                    let parts = LoopParts {
                        body,
                        continuing,
                        enter,
                        trips: counted.and_then(|c| c.trips),
                        rotate: false,
                    };
                    qs.loops.push(None);
                    self.lower_loop_versions(fx, &parts, proof, &mut |l, fx, part| {
                        l.quad_block(fx, qs, &part.0)
                    })?;
                    qs.loops.pop();
                }
                Stmt::Break | Stmt::Continue => match qs.loops.last() {
                    Some(Some(l)) => {
                        let l = *l;
                        let set = if matches!(s, Stmt::Break) {
                            l.broken
                        } else {
                            l.skipped
                        };
                        self.leave(qs, Some(set));
                    }
                    _ => self.stmt(fx, s)?,
                },
                Stmt::If {
                    cond,
                    accept,
                    reject: _,
                } if qs.prefix.as_ref().is_some_and(|p| p.holds[cond.index()]) => {
                    // True in every lane of the prefix: the active lanes take the accept arm.
                    self.quad_block(fx, qs, &accept.0)?;
                }
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    if let Some(mask) = qs.lanes[cond.index()] {
                        let merge = self.b.create_block();
                        let both_arms = !reject.0.is_empty() && qs.all_true[cond.index()].is_some();
                        if qs.full && (stores(accept) || both_arms) {
                            // When every lane takes the accept arm, run a copy of it that knows
                            // all lanes are active, so its stores need no lane masks and the
                            // reject arm is skipped. Masked local assignments cost one
                            // instruction: not worth a copy alone, except where a cheap scalar
                            // test spares the masks, tests and blends of both arms (a tile
                            // load `v = if inside { a[i] } else { 0 }`).
                            let (fast, general) = (self.b.create_block(), self.b.create_block());
                            let all = match qs.all_true[cond.index()] {
                                // A bound on a contiguous index fails in part of a quad only
                                // at the bound's edge.
                                Some(a) => {
                                    self.b.set_cold_block(general);
                                    a
                                }
                                None => self.b.ins().vall_true(mask.v),
                            };
                            self.b.ins().brif(all, fast, &[], general, &[]);
                            self.b.switch_to_block(fast);
                            self.quad_block(fx, qs, &accept.0)?;
                            self.b.ins().jump(merge, &[]);
                            self.b.switch_to_block(general);
                        }
                        let (outer, outer_full) = (qs.active, qs.full);
                        let on = self.b.ins().band(outer, mask.v);
                        let off = self.b.ins().band_not(outer, mask.v);
                        qs.full = false;
                        for (arm, act) in [(accept, on), (reject, off)] {
                            if arm.0.is_empty() {
                                continue;
                            }
                            let (run, done) = (self.b.create_block(), self.b.create_block());
                            let any = self.b.ins().vany_true(act);
                            self.b.ins().brif(any, run, &[], done, &[]);
                            self.b.switch_to_block(run);
                            qs.active = act;
                            self.quad_block(fx, qs, &arm.0)?;
                            self.b.ins().jump(done, &[]);
                            self.b.switch_to_block(done);
                        }
                        qs.active = outer;
                        qs.full = outer_full;
                        self.b.ins().jump(merge, &[]);
                        self.b.switch_to_block(merge);
                    } else {
                        let c = self.get(fx, *cond)?[0];
                        self.branch(fx, c, accept, reject, &mut |l, fx, arm| {
                            l.quad_block(fx, qs, &arm.0)
                        })?;
                    }
                }
                other => return Err(format!("statement {other:?} in a vectorized body")),
            }
        }
        Ok(())
    }

    /// The lanes that are active and have not left.
    fn live(&mut self, qs: &QuadState) -> Value {
        let exited = self.b.use_var(qs.exited);
        self.b.ins().band_not(qs.active, exited)
    }

    /// The active lanes that have not left leave (`return`, or `break` or `continue` of a
    /// masked loop, which also adds them to that loop's `set`).
    fn leave(&mut self, qs: &QuadState, set: Option<Variable>) {
        let live = self.live(qs);
        let exited = self.b.use_var(qs.exited);
        let exited = self.b.ins().bor(exited, live);
        self.b.def_var(qs.exited, exited);
        if let Some(set) = set {
            let old = self.b.use_var(set);
            let new = self.b.ins().bor(old, live);
            self.b.def_var(set, new);
        }
    }

    /// A loop whose lanes may leave it at different times (see [`MaskedLoop`]): it runs while
    /// any lane that entered it has not left; lanes that continued come back before
    /// `continuing`, lanes that broke out after the loop.
    fn quad_masked_loop(
        &mut self,
        fx: &mut FnCtx,
        qs: &mut QuadState,
        body: &Block,
        continuing: &Block,
    ) -> R<()> {
        let entered = qs.active;
        let zero = self.iconst32(0);
        let none = self.b.ins().splat(types::I32X4, zero);
        let l = MaskedLoop {
            broken: self.b.declare_var(types::I32X4),
            skipped: self.b.declare_var(types::I32X4),
        };
        self.b.def_var(l.broken, none);
        self.b.def_var(l.skipped, none);
        let (header, cont, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let live = self.live(qs);
        let enter = self.b.ins().vany_true(live);
        self.b.ins().brif(enter, header, &[], exit, &[]);
        self.b.switch_to_block(header);
        let exited_before = qs.may_have_exited;
        qs.may_have_exited = true;
        qs.loops.push(Some(l));
        self.quad_block(fx, qs, &body.0)?;
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
        let (exited, skipped) = (self.b.use_var(qs.exited), self.b.use_var(l.skipped));
        let back = self.b.ins().band_not(exited, skipped);
        self.b.def_var(qs.exited, back);
        self.b.def_var(l.skipped, none);
        self.quad_block(fx, qs, &continuing.0)?;
        qs.loops.pop();
        qs.active = entered;
        let live = self.live(qs);
        let again = self.b.ins().vany_true(live);
        self.b.ins().brif(again, header, &[], exit, &[]);
        self.b.switch_to_block(exit);
        let (exited, broken) = (self.b.use_var(qs.exited), self.b.use_var(l.broken));
        let back = self.b.ins().band_not(exited, broken);
        self.b.def_var(qs.exited, back);
        qs.may_have_exited =
            exited_before || block_has_return(body) || block_has_return(continuing);
        Ok(())
    }
}

/// The block arguments that pass the vectors of `l`.
fn block_args(l: Lanes) -> Vec<BlockArg> {
    [Some(l.v), l.hi]
        .into_iter()
        .flatten()
        .map(BlockArg::Value)
        .collect()
}
