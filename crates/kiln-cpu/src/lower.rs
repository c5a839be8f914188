//! Lowering of kiln IR to Cranelift IR.
//!
//! A compiled kernel is `extern "C" fn(frame: *const u64)` that runs every work item of one
//! group. The frame holds the group's position, buffer pointers and lengths, and scratch
//! pointers (see the `SLOT_*` constants). Without group barriers the work items run one after
//! another in a loop, locals in SSA variables. With barriers the body is split at each barrier
//! into runs of statements; each run loops over the work items. Locals and computed values that
//! another run uses (or that a repeating run could read before assigning) live in per-item
//! private memory so they survive from one run to the next (see `runs`); a run keeps the
//! private locals it uses in registers for each work item's pass, loading them at its start and
//! storing them at its end, and everything else stays in registers. A local every work item
//! holds the same value of (a group local: a loop counter stepping from tile to tile) is kept
//! once for the group in registers and assigned between runs. Control flow that encloses a
//! barrier is group-uniform (an IR rule), so it is decided once: by the group-level code when
//! its condition is computed from parameters, group built-ins and group locals, otherwise by
//! work item 0. Wherever the statements allow it, a run (or the whole body) first goes through
//! the group four work items at a time (see `simd`), then the work items left one at a time.
//! Statements run one work item at a time lower a loop whose body opens with its exit test
//! (`for_range`, `while_`) with the test at the bottom, and keep a `u32` counter that steps by
//! one zero-extended in 64 bits, the form addresses take; the work-item loops carry only the
//! axes of the local id the kernel reads.
//!
//! Analysis and emission live apart. Analysis: `runs` (where a body splits at barriers and
//! what crosses a split), `loop_bounds` (loops whose accesses need no bounds check),
//! `simd/analysis` (which kernels and statements run in quads, and what varies per work
//! item). Emission: this file (the lowerer, its prologue, statements and expressions),
//! `items` (work-item loops, group-uniform control), `loops` (counted, unrolled and rotated
//! loops), `memory` (private memory, element addresses, bounds redirection), `ops`
//! (operators, casts, math, atomics), and `simd` with its `exprs`, `ops` and `memory` for
//! quads.

use crate::mathlib::MathImports;
use cranelift_codegen::ir::condcodes::{CondCode, FloatCC, IntCC};
use cranelift_codegen::ir::{
    self, types, AtomicRmwOp, BlockArg, InstBuilder, MemFlagsData, StackSlotData, StackSlotKind,
    Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};
use cranelift_jit::JITModule;
use cranelift_module::Module;
use kiln_ir::*;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

mod half;
mod items;
use memory::array_bytes;
mod loop_bounds;
mod loops;
mod memory;
mod ops;
mod runs;
mod simd;

/// Frame slot of `group_id.x` (then y, z).
pub const SLOT_GROUP_ID: usize = 0;
/// Frame slot of `group_size.x` (then y, z).
pub const SLOT_GROUP_SIZE: usize = 3;
/// Frame slot of `num_groups.x` (then y, z).
pub const SLOT_NUM_GROUPS: usize = 6;
/// Frame slot of a pointer to `MAX_ELEM_BYTES` zero bytes (target of out-of-bounds loads).
pub const SLOT_ZEROS: usize = 9;
/// Frame slot of a pointer to `MAX_ELEM_BYTES` scratch bytes (target of out-of-bounds stores).
pub const SLOT_SINK: usize = 10;
/// Frame slot of the per-item private memory (barrier kernels).
pub const SLOT_PRIVATE: usize = 11;
/// First parameter slot: two per parameter (pointer, element count; value parameters: pointer,
/// 0), then two per shared array (pointer, element count).
pub const SLOT_PARAMS: usize = 12;
/// Largest local array the CPU backend accepts per work item, in bytes.
pub const MAX_ARRAY_BYTES: u32 = 64 << 10;
/// Most trips of a loop that the lowering counts to unroll it.
const MAX_COUNTED_TRIPS: u32 = 1 << 12;
/// Most statements (all copies together) an unrolled loop may take.
const MAX_UNROLLED_STMTS: usize = 512;
/// Largest element (buffer, shared or array) the CPU backend accepts, in bytes.
pub const MAX_ELEM_BYTES: u32 = 4096;

/// How the compiled function uses per-item private memory.
pub struct PrivateLayout {
    /// Bytes of private memory per work item (0 without group barriers).
    pub bytes_per_item: u32,
}

type R<T> = Result<T, String>;

fn clty(s: ScalarType) -> ir::Type {
    match s {
        ScalarType::Bool | ScalarType::I8 | ScalarType::U8 => types::I8,
        ScalarType::I16 | ScalarType::U16 => types::I16,
        ScalarType::I32 | ScalarType::U32 => types::I32,
        ScalarType::I64 | ScalarType::U64 => types::I64,
        ScalarType::F16 | ScalarType::F32 => types::F32,
        ScalarType::F64 => types::F64,
    }
}

fn mem_flags() -> MemFlagsData {
    MemFlagsData::trusted()
}

/// Ends the header of a work-item or quad loop over `stmts`: into `body` while `x cc y`, else
/// to `exit`. Cranelift 0.135's egraph moves loop-invariant values out of a loop only from
/// the blocks it visits before the loop's exit (there it leaves the loop for good), and it
/// visits the exit first when the exit is the branch's second target. So when `stmts` have
/// no loop inside, the exit comes first (the complement is tested) and everything the same
/// on every trip (the group's base, buffer lengths, bounds) is computed once before the loop;
/// with a loop inside, where those values would stay live across the inner loop and spill,
/// the body comes first and they stay where they are used.
fn enter_items_loop(
    b: &mut FunctionBuilder,
    stmts: &[Stmt],
    (cc, x, y): (IntCC, Value, Value),
    body: ir::Block,
    exit: ir::Block,
) {
    let has_loop = stmts
        .iter()
        .any(|s| s.any(&|s| matches!(s, Stmt::Loop { .. })));
    if has_loop {
        let more = b.ins().icmp(cc, x, y);
        b.ins().brif(more, body, &[], exit, &[]);
    } else {
        let done = b.ins().icmp(cc.complement(), x, y);
        b.ins().brif(done, exit, &[], body, &[]);
    }
}

/// One loop for [`Lowerer::lower_loop`]: `loop { body } continuing { continuing }`.
#[derive(Clone, Copy)]
struct LoopParts<'b> {
    body: &'b Block,
    continuing: &'b Block,
    /// A flag the loop runs at all only when true.
    enter: Option<Value>,
    /// Its number of trips when [`Lowerer::counted_loop`] knows it.
    trips: Option<u32>,
    /// Whether it may be lowered with its exit test at the bottom
    /// ([`Lowerer::lower_rotated_loop`]); only where `part` lowers statements one work item
    /// at a time.
    rotate: bool,
}

/// A counted loop that [`Lowerer::counted_loop`] recognised.
#[derive(Clone, Copy)]
struct Counted {
    counter: LocalId,
    /// Its number of trips, when its bounds are constants.
    trips: Option<u32>,
    /// The counter's value on the last trip when it is unsigned and only grows from trip to
    /// trip: then no trip sees a larger one.
    last: Option<LastTrip>,
}

/// The counter's value on the last trip of a counted loop.
#[derive(Clone, Copy)]
enum LastTrip {
    Constant(u32),
    /// One less than this `u32` value, computed before the loop: its end, which a counter
    /// stepping by one from a constant start reaches (no trip runs when the end is not above
    /// the start).
    BeforeEnd(Handle),
}

enum LocalStore {
    Vars(Vec<Variable>),
    /// Barrier mode: a group local (see `runs`), one set of variables for the whole group.
    Group(Vec<Variable>),
    Stack(ir::StackSlot),
    Private(u32),
}

struct FnCtx<'a> {
    body: &'a Body,
    types: Vec<Type>,
    /// The loads and stores whose bounds check cannot fail.
    in_bounds: InBounds,
    /// The accesses (memory, index) that the counted loop being lowered keeps in bounds on
    /// every trip (see `loop_bounds`).
    loop_proven: HashSet<(Memory, Handle)>,
    /// While lowering the copy of a split loop that leaves `loop_proven` unchecked: its
    /// counter and the expressions it computes, for [`Lowerer::proven_index`].
    proven_loop: Option<Rc<loop_bounds::ProvenLoop>>,
    /// True while lowering one version of a loop that `loop_bounds` split: loops inside it
    /// are not split again.
    in_loop_version: bool,
    vals: Vec<Option<Vec<Value>>>,
    params: Vec<Vec<Value>>,
    is_kernel: bool,
    locals: Vec<LocalStore>,
    loops: Vec<(ir::Block, ir::Block)>,
    ret: Option<ir::Block>,
}

/// Lowers one kernel into the function being built by `b`.
pub struct Lowerer<'a, 'f> {
    b: FunctionBuilder<'f>,
    k: &'a Kernel,
    module: &'a mut JITModule,
    math: &'a MathImports,
    frefs: HashMap<&'static str, ir::FuncRef>,
    frame: Value,
    gid: [Value; 3],
    gsize: [Value; 3],
    /// The global id of the group's first work item per axis (`gid * gsize`), built once at
    /// entry.
    gbase: [Value; 3],
    ngroups: [Value; 3],
    total: Value,
    /// `total` as a 64-bit value.
    total64: Value,
    zeros: Value,
    sink: Value,
    private: Value,
    bufs: Vec<Option<(Value, Value)>>,
    /// Components of each value parameter, loaded once at entry (empty for buffers).
    value_params: Vec<Vec<Value>>,
    shared: Vec<(Value, Value)>,
    barrier_mode: bool,
    item: Option<Value>,
    lid: [Value; 3],
    item_next: Option<ir::Block>,
    /// Barrier mode: each expression's offset in the private frame, for those another run
    /// reads.
    spill_off: Vec<Option<u32>>,
    /// Barrier mode: which values runs recompute, which are the same for the whole group and
    /// which locals are group locals (see `runs`; empty otherwise).
    runs: runs::RunPlan,
    /// Barrier mode: per expression, computed once for the group at group level (see
    /// [`runs::Placement::Hoisted`]); such values stay known across runs.
    hoisted: Vec<bool>,
    /// Which values vary between work items, for running statements in quads (`None`: the
    /// kernel never runs in quads).
    quad: Option<Rc<simd::QuadPlan>>,
    /// Whether the statements being lowered run in quads (see [`Self::bounds_check`]).
    in_quads: bool,
    /// The block that code after a jump (`break`, `continue`, `return`) goes into, which
    /// nothing reaches, while it is empty (see [`Self::branch`]).
    unreached: Option<ir::Block>,
    /// How many axes of the local id the kernel reads (see [`local_axes_read`]).
    local_axes: usize,
    /// 32-bit values known to be the low half of a 64-bit value whose high half is zero (a
    /// counter that [`Self::lower_rotated_loop`] keeps in 64 bits), with that value.
    zero_extended: HashMap<Value, Value>,
    frame_bytes: u32,
}

/// How an access tests its index against the bounds (see [`Lowerer::bounds_check`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum BoundsCheck {
    /// Not at all: the index is proven in bounds.
    Proven,
    /// By a branch predicted to stay in bounds.
    Branch,
    /// By a select, which costs the same whichever way the data go.
    Select,
}

impl<'a, 'f> Lowerer<'a, 'f> {
    /// Lowers `k`, whose validation found `info`, into `b` (whose function takes one pointer
    /// argument). Returns the private
    /// memory layout the launcher must provide, or a message naming what could not be lowered.
    pub fn lower(
        mut b: FunctionBuilder<'f>,
        k: &'a Kernel,
        info: KernelInfo,
        module: &'a mut JITModule,
        math: &'a MathImports,
    ) -> R<PrivateLayout> {
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let frame = b.block_params(entry)[0];
        let fn_exit = b.create_block();
        let zero32 = b.ins().iconst(types::I32, 0);
        let mut lw = Lowerer {
            b,
            k,
            module,
            math,
            frefs: HashMap::new(),
            frame,
            gid: [zero32; 3],
            gsize: [zero32; 3],
            gbase: [zero32; 3],
            ngroups: [zero32; 3],
            total: zero32,
            total64: frame,
            zeros: frame,
            sink: frame,
            private: frame,
            bufs: Vec::new(),
            value_params: vec![Vec::new(); k.params.len()],
            shared: Vec::new(),
            barrier_mode: k.has_group_barrier(),
            item: None,
            lid: [zero32; 3],
            item_next: None,
            spill_off: Vec::new(),
            runs: runs::RunPlan::default(),
            hoisted: Vec::new(),
            quad: simd::quad_plan(k).map(Rc::new),
            in_quads: false,
            unreached: None,
            local_axes: local_axes_read(k),
            zero_extended: HashMap::new(),
            frame_bytes: 0,
        };
        lw.prologue()?;
        let BodyInfo { types, in_bounds } = info.body;
        let mut fx = FnCtx {
            body: &k.body,
            vals: vec![None; k.body.exprs.len()],
            in_bounds,
            loop_proven: HashSet::new(),
            proven_loop: None,
            in_loop_version: false,
            types,
            params: std::mem::take(&mut lw.value_params),
            is_kernel: true,
            locals: Vec::new(),
            loops: Vec::new(),
            ret: None,
        };
        if lw.barrier_mode {
            lw.plan_private(&mut fx)?;
            lw.uniform_block(&mut fx, &k.body.block, false)?;
        } else {
            lw.declare_locals(&mut fx)?;
            let stmts = k.body.block.0.clone();
            lw.run_items(&mut fx, &stmts)?;
        }
        lw.b.ins().jump(fn_exit, &[]);
        lw.b.switch_to_block(fn_exit);
        lw.b.ins().return_(&[]);
        lw.b.seal_all_blocks();
        let config = lw.module.target_config();
        let bytes = lw.frame_bytes;
        lw.b.finalize(config);
        Ok(PrivateLayout {
            bytes_per_item: bytes,
        })
    }

    fn iconst32(&mut self, v: i64) -> Value {
        self.b.ins().iconst(types::I32, v)
    }

    fn int_const(&mut self, s: ScalarType, bits: u64) -> Value {
        let ty = clty(s);
        let masked = if ty.bits() == 64 {
            bits
        } else {
            bits & ((1u64 << ty.bits()) - 1)
        };
        self.b.ins().iconst(ty, masked as i64)
    }

    fn scalar_const(&mut self, v: ScalarValue) -> Value {
        match v {
            ScalarValue::F16(h) => self.b.ins().f32const(h.to_f32()),
            ScalarValue::F32(f) => self.b.ins().f32const(f),
            ScalarValue::F64(f) => self.b.ins().f64const(f),
            other => self.int_const(other.ty(), other.to_bits()),
        }
    }

    fn zero(&mut self, s: ScalarType) -> Value {
        self.scalar_const(ScalarValue::zero(s))
    }

    /// Slot `i` of the frame. The frame does not change while the kernel runs, so the load
    /// may move to where its value is used, or go when it is not.
    fn slot(&mut self, i: usize) -> Value {
        let flags = mem_flags().with_readonly().with_can_move();
        self.b
            .ins()
            .load(types::I64, flags, self.frame, (i * 8) as i32)
    }

    fn slot32(&mut self, i: usize) -> Value {
        let v = self.slot(i);
        self.b.ins().ireduce(types::I32, v)
    }

    fn prologue(&mut self) -> R<()> {
        for a in 0..3 {
            self.gid[a] = self.slot32(SLOT_GROUP_ID + a);
            self.gsize[a] = self.slot32(SLOT_GROUP_SIZE + a);
            self.ngroups[a] = self.slot32(SLOT_NUM_GROUPS + a);
            self.gbase[a] = self.b.ins().imul(self.gid[a], self.gsize[a]);
        }
        let xy = self.b.ins().imul(self.gsize[0], self.gsize[1]);
        self.total = self.b.ins().imul(xy, self.gsize[2]);
        self.total64 = self.b.ins().uextend(types::I64, self.total);
        self.zeros = self.slot(SLOT_ZEROS);
        self.sink = self.slot(SLOT_SINK);
        self.private = self.slot(SLOT_PRIVATE);
        for (i, p) in self.k.params.iter().enumerate() {
            let v = match &p.kind {
                ParamKind::Buffer { elem, .. } => {
                    if elem.size() > MAX_ELEM_BYTES {
                        return Err(format!("buffer `{}` has {}-byte elements; the CPU backend allows at most {MAX_ELEM_BYTES}", p.name, elem.size()));
                    }
                    Some((
                        self.slot(SLOT_PARAMS + 2 * i),
                        self.slot(SLOT_PARAMS + 2 * i + 1),
                    ))
                }
                ParamKind::Value(t) => {
                    let ptr = self.slot(SLOT_PARAMS + 2 * i);
                    self.value_params[i] = self.load_flat(t, ptr, 0);
                    None
                }
            };
            self.bufs.push(v);
        }
        let base = SLOT_PARAMS + 2 * self.k.params.len();
        for (j, s) in self.k.shared.iter().enumerate() {
            if s.elem.size() > MAX_ELEM_BYTES {
                return Err(format!("shared array `{}` has {}-byte elements; the CPU backend allows at most {MAX_ELEM_BYTES}", s.name, s.elem.size()));
            }
            // A length fixed when the kernel was built is a constant, so bounds checks
            // compare with an immediate.
            let len = match s.len {
                SharedLen::Static(n) => self.b.ins().iconst(types::I64, n as i64),
                SharedLen::Dynamic => self.slot(base + 2 * j + 1),
            };
            let v = (self.slot(base + 2 * j), len);
            self.shared.push(v);
        }
        Ok(())
    }

    /// Barrier mode: the private-frame offset of kernel expression `h`'s value, when another
    /// run reads it; `None` otherwise (and always in device functions, whose handles index
    /// their own arena).
    fn spill_slot(&self, fx: &FnCtx, h: Handle) -> Option<u32> {
        if fx.is_kernel && self.barrier_mode {
            self.spill_off.get(h.index()).copied().flatten()
        } else {
            None
        }
    }

    /// One Cranelift variable per scalar component of `ty`.
    fn declare_vars(&mut self, ty: &Type) -> Vec<Variable> {
        ty.flatten()
            .iter()
            .map(|(s, _)| self.b.declare_var(clty(*s)))
            .collect()
    }

    fn declare_locals(&mut self, fx: &mut FnCtx) -> R<()> {
        for l in &fx.body.locals {
            let store = match &l.ty {
                Type::Array(..) => {
                    let size = array_bytes(l)?;
                    LocalStore::Stack(self.b.create_sized_stack_slot(StackSlotData::new(
                        StackSlotKind::ExplicitSlot,
                        size.max(1),
                        4,
                    )))
                }
                t => LocalStore::Vars(self.declare_vars(t)),
            };
            fx.locals.push(store);
        }
        Ok(())
    }

    /// Assigns zero to each variable of `vars`, the components of a local of type `ty`.
    fn zero_vars(&mut self, ty: &Type, vars: &[Variable]) {
        for ((s, _), v) in ty.flatten().into_iter().zip(vars) {
            let z = self.zero(s);
            self.b.def_var(*v, z);
        }
    }

    fn zero_locals(&mut self, fx: &FnCtx) {
        for (l, decl) in fx.locals.iter().zip(&fx.body.locals) {
            match l {
                LocalStore::Vars(vars) => self.zero_vars(&decl.ty, vars),
                LocalStore::Stack(slot) => {
                    let addr = self.b.ins().stack_addr(types::I64, *slot, 0);
                    let len = self.b.ins().iconst(types::I64, decl.ty.size() as i64);
                    self.call_import("kiln_memzero", &[addr, len]);
                }
                LocalStore::Group(_) | LocalStore::Private(_) => {}
            }
        }
    }

    fn fresh_block(&mut self) {
        let blk = self.b.create_block();
        self.b.switch_to_block(blk);
        self.unreached = Some(blk);
    }

    fn jump_to(&mut self, target: ir::Block, args: &[Value]) {
        let args: Vec<BlockArg> = args.iter().map(|v| BlockArg::Value(*v)).collect();
        self.b.ins().jump(target, &args);
        self.fresh_block();
    }

    fn block(&mut self, fx: &mut FnCtx, stmts: &[Stmt]) -> R<()> {
        for s in stmts {
            self.stmt(fx, s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, fx: &mut FnCtx, s: &Stmt) -> R<()> {
        match s {
            Stmt::Eval(h) => {
                let v = self.expr(fx, *h)?;
                if let Some(off) = self.spill_slot(fx, *h) {
                    let ty = fx.types[h.index()].clone();
                    let base = self.private_addr(off, ty.size());
                    self.store_flat(&ty, base, 0, &v);
                }
                fx.vals[h.index()] = Some(v);
            }
            Stmt::LocalSet { local, value } => {
                let v = self.get(fx, *value)?;
                match &fx.locals[local.0 as usize] {
                    LocalStore::Vars(vars) | LocalStore::Group(vars) => {
                        for (var, val) in vars.clone().iter().zip(v) {
                            self.b.def_var(*var, val);
                        }
                    }
                    LocalStore::Private(off) => {
                        let off = *off;
                        let ty = fx.body.locals[local.0 as usize].ty.clone();
                        let base = self.private_addr(off, ty.size());
                        self.store_flat(&ty, base, 0, &v);
                    }
                    LocalStore::Stack(_) => return Err("array local assigned as a whole".into()),
                }
            }
            Stmt::LocalIndexSet {
                local,
                index,
                value,
            } => {
                let i = self.get(fx, *index)?[0];
                let v = self.get(fx, *value)?;
                let proven = fx.in_bounds.local_store(*local, *index, *value);
                let check = self.bounds_check(fx, *index, proven);
                let (addr, elem) = self.array_elem(fx, *local, i, true, check)?;
                self.store_flat(&elem, addr, 0, &v);
            }
            Stmt::Store {
                memory,
                index,
                value,
            } => {
                let v = self.get(fx, *value)?;
                if let Some(wide) = self.proven_index(fx, None, *memory, *index)? {
                    let (addr, elem) = self.proven_elem(*memory, wide)?;
                    self.store_flat(&elem, addr, 0, &v);
                    return Ok(());
                }
                let i = self.get(fx, *index)?[0];
                let proven = fx.in_bounds.store(*memory, *index, *value)
                    || fx.loop_proven.contains(&(*memory, *index));
                let check = self.bounds_check(fx, *index, proven);
                let (addr, _, elem) = self.mem_elem(*memory, i, true, check)?;
                self.store_flat(&elem, addr, 0, &v);
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } => {
                let c = self.get(fx, *cond)?[0];
                self.branch(fx, c, accept, reject, &mut |l, fx, arm| l.block(fx, &arm.0))?;
            }
            Stmt::Loop { body, continuing } => {
                let counted = self.counted_loop(fx, body, continuing);
                let proof = self.loop_bounds(fx, None, body, continuing, counted.as_ref())?;
                let parts = LoopParts {
                    body,
                    continuing,
                    enter: None,
                    trips: counted.and_then(|c| c.trips),
                    rotate: true,
                };
                self.lower_loop_versions(fx, &parts, proof, &mut |l, fx, part| {
                    l.block(fx, &part.0)
                })?;
            }
            Stmt::Break => {
                let (_, exit) = *fx.loops.last().ok_or("break outside a loop")?;
                self.jump_to(exit, &[]);
            }
            Stmt::Continue => {
                let (cont, _) = *fx.loops.last().ok_or("continue outside a loop")?;
                self.jump_to(cont, &[]);
            }
            Stmt::Return(v) => {
                if let Some(ret) = fx.ret {
                    let vals = match v {
                        Some(h) => self.get(fx, *h)?,
                        None => Vec::new(),
                    };
                    self.jump_to(ret, &vals);
                } else {
                    let next = self.item_next.ok_or("return outside the work-item loop")?;
                    if self.barrier_mode {
                        let flag = self.private_addr(0, 4);
                        let one = self.iconst32(1);
                        self.b.ins().store(mem_flags(), one, flag, 0);
                    }
                    self.jump_to(next, &[]);
                }
            }
            Stmt::Barrier(BarrierScope::Subgroup) | Stmt::Source(_) => {}
            Stmt::Barrier(BarrierScope::Group) => {
                return Err("group barrier inside divergent control flow".into())
            }
            Stmt::Native(call) => self.block(fx, &call.fallback.0)?,
        }
        Ok(())
    }

    /// Barrier mode: computes rematerializable expression `h` (and the operands it needs) in
    /// the current run.
    fn remat(&mut self, fx: &mut FnCtx, h: Handle) -> R<()> {
        if fx.vals[h.index()].is_some() {
            return Ok(());
        }
        for op in operands(&fx.body.exprs[h.index()]) {
            self.remat(fx, op)?;
        }
        let v = self.expr(fx, h)?;
        fx.vals[h.index()] = Some(v);
        Ok(())
    }

    fn get(&mut self, fx: &mut FnCtx, h: Handle) -> R<Vec<Value>> {
        if let Some(v) = fx.vals.get(h.index()).and_then(|v| v.clone()) {
            return Ok(v);
        }
        if let Some(off) = self.spill_slot(fx, h) {
            let ty = fx.types[h.index()].clone();
            let base = self.private_addr(off, ty.size());
            return Ok(self.load_flat(&ty, base, 0));
        }
        Err(format!("expression %{} used before it is computed", h.0))
    }

    fn call_import(&mut self, name: &'static str, args: &[Value]) -> Value {
        let fref = match self.frefs.get(name) {
            Some(f) => *f,
            None => {
                let id = self.math.get(name);
                let f = self.module.declare_func_in_func(id, self.b.func);
                self.frefs.insert(name, f);
                f
            }
        };
        let call = self.b.ins().call(fref, args);
        self.b
            .inst_results(call)
            .first()
            .copied()
            .unwrap_or(self.frame)
    }

    fn expr(&mut self, fx: &mut FnCtx, h: Handle) -> R<Vec<Value>> {
        let e = fx.body.exprs[h.index()].clone();
        let ty = fx.types[h.index()].clone();
        let comp = |t: &Type| {
            t.component()
                .ok_or_else(|| format!("{t} has no scalar component"))
        };
        Ok(match e {
            Expr::Literal(v) => vec![self.scalar_const(v)],
            Expr::Param(i) => fx
                .params
                .get(i as usize)
                .cloned()
                .ok_or("no such parameter")?,
            Expr::LocalGet(l) => match &fx.locals[l.0 as usize] {
                LocalStore::Vars(vars) | LocalStore::Group(vars) => vars
                    .clone()
                    .into_iter()
                    .map(|v| self.b.use_var(v))
                    .collect(),
                LocalStore::Private(off) => {
                    let base = self.private_addr(*off, ty.size());
                    self.load_flat(&ty, base, 0)
                }
                LocalStore::Stack(_) => return Err("array local read as a whole".into()),
            },
            Expr::LocalIndex { local, index } => {
                let i = self.get(fx, index)?[0];
                let check = self.bounds_check(fx, index, fx.in_bounds.load(h));
                let (addr, elem) = self.array_elem(fx, local, i, false, check)?;
                self.load_flat(&elem, addr, 0)
            }
            Expr::Load { memory, index } => {
                if let Some(wide) = self.proven_index(fx, None, memory, index)? {
                    let (addr, elem) = self.proven_elem(memory, wide)?;
                    return Ok(self.load_flat(&elem, addr, 0));
                }
                let i = self.get(fx, index)?[0];
                let proven = fx.in_bounds.load(h) || fx.loop_proven.contains(&(memory, index));
                let check = self.bounds_check(fx, index, proven);
                let (addr, _, elem) = self.mem_elem(memory, i, false, check)?;
                self.load_flat(&elem, addr, 0)
            }
            Expr::Len(m) => {
                let len = match m {
                    Memory::Buffer(p) => {
                        self.bufs
                            .get(p as usize)
                            .copied()
                            .flatten()
                            .ok_or("not a buffer")?
                            .1
                    }
                    Memory::Shared(s) => self.shared.get(s as usize).ok_or("no shared array")?.1,
                };
                vec![self.b.ins().ireduce(types::I32, len)]
            }
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.get(fx, lhs)?, self.get(fx, rhs)?);
                let s = comp(&fx.types[lhs.index()])?;
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| self.binary(op, s, x, y))
                    .collect::<R<_>>()?
            }
            Expr::Unary { op, arg } => {
                let a = self.get(fx, arg)?;
                let s = comp(&ty)?;
                a.into_iter()
                    .map(|x| match op {
                        UnaryOp::Neg if s.is_float() => self.b.ins().fneg(x),
                        UnaryOp::Neg => self.b.ins().ineg(x),
                        UnaryOp::Not if s == ScalarType::Bool => self.b.ins().bxor_imm_u(x, 1),
                        UnaryOp::Not => self.b.ins().bnot(x),
                    })
                    .collect()
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let c = self.get(fx, cond)?[0];
                let (a, b) = (self.get(fx, accept)?, self.get(fx, reject)?);
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| self.b.ins().select(c, x, y))
                    .collect()
            }
            Expr::Cast { arg, to } => {
                let from = comp(&fx.types[arg.index()])?;
                let a = self.get(fx, arg)?;
                a.into_iter().map(|x| self.cast(x, from, to)).collect()
            }
            Expr::Bitcast { arg, to } => {
                let from = comp(&fx.types[arg.index()])?;
                let a = self.get(fx, arg)?;
                a.into_iter()
                    .map(|x| match (from, to) {
                        (ScalarType::F16, _) => self.f2h(x),
                        (_, ScalarType::F16) => self.h2f(x),
                        _ if clty(from) == clty(to) => x,
                        _ => self.b.ins().bitcast(clty(to), MemFlagsData::new(), x),
                    })
                    .collect()
            }
            Expr::Math { fun, args } => {
                let s = comp(&fx.types[args[0].index()])?;
                let vals: Vec<Vec<Value>> =
                    args.iter().map(|a| self.get(fx, *a)).collect::<R<_>>()?;
                (0..vals[0].len())
                    .map(|c| {
                        let xs: Vec<Value> = vals.iter().map(|v| v[c]).collect();
                        self.math(fun, s, &xs)
                    })
                    .collect::<R<_>>()?
            }
            Expr::Builtin(b) => vec![self.builtin(b)],
            Expr::Compose { parts, .. } => {
                let mut out = Vec::new();
                for p in parts {
                    out.extend(self.get(fx, p)?);
                }
                out
            }
            Expr::Extract { base, index } => {
                let v = self.get(fx, base)?;
                let t = &fx.types[base.index()];
                let range = t
                    .component_range(index)
                    .ok_or_else(|| format!("{t} has no component {index}"))?;
                v[range].to_vec()
            }
            Expr::Atomic {
                memory,
                index,
                op,
                value,
                compare,
            } => {
                let i = self.get(fx, index)?[0];
                let v = self.get(fx, value)?[0];
                let c = match compare {
                    Some(c) => Some(self.get(fx, c)?[0]),
                    None => None,
                };
                let s = comp(&ty)?;
                let check = self.bounds_check(fx, index, false);
                let (addr, inb, _) = self.mem_elem(memory, i, true, check)?;
                let old = self.atomic(op, s, addr, v, c)?;
                let z = self.zero(s);
                vec![self.b.ins().select(inb, old, z)]
            }
            Expr::Subgroup { op, arg, .. } => {
                let a = self.get(fx, arg)?[0];
                vec![match op {
                    SubgroupOp::Ballot => self.b.ins().uextend(types::I32, a),
                    SubgroupOp::ExclusiveAdd => self.zero(comp(&ty)?),
                    _ => a,
                }]
            }
            Expr::Call { function, args } => {
                let vals: Vec<Vec<Value>> =
                    args.iter().map(|a| self.get(fx, *a)).collect::<R<_>>()?;
                self.inline_call(function, vals)?
            }
        })
    }

    fn inline_call(&mut self, id: FunctionId, args: Vec<Vec<Value>>) -> R<Vec<Value>> {
        let k = self.k;
        let f = k.functions.get(id.0 as usize).ok_or("no such function")?;
        let types = expr_types(k, &f.params, &f.body)?;
        let mut sub = FnCtx {
            body: &f.body,
            vals: vec![None; f.body.exprs.len()],
            in_bounds: InBounds::of(&f.body, &types),
            loop_proven: HashSet::new(),
            proven_loop: None,
            in_loop_version: false,
            types,
            params: args,
            is_kernel: false,
            locals: Vec::new(),
            loops: Vec::new(),
            ret: None,
        };
        self.declare_locals(&mut sub)?;
        self.zero_locals(&sub);
        let ret = self.b.create_block();
        let result_ty = f.result.clone();
        let flat = result_ty.as_ref().map(|t| t.flatten()).unwrap_or_default();
        for (s, _) in &flat {
            self.b.append_block_param(ret, clty(*s));
        }
        sub.ret = Some(ret);
        self.block(&mut sub, &f.body.block.0)?;
        let zeros: Vec<Value> = flat.iter().map(|(s, _)| self.zero(*s)).collect();
        let args: Vec<BlockArg> = zeros.iter().map(|v| BlockArg::Value(*v)).collect();
        self.b.ins().jump(ret, &args);
        self.b.switch_to_block(ret);
        Ok(self.b.block_params(ret).to_vec())
    }
}

/// How many axes of the local id `k` reads, through `global_id` or `local_id` in its body or
/// a device function: 0 for none, up to 3 when it reads z (whose counting needs x and y).
fn local_axes_read(k: &Kernel) -> usize {
    std::iter::once(&k.body)
        .chain(k.functions.iter().map(|f| &f.body))
        .flat_map(|b| &b.exprs)
        .filter_map(|e| match e {
            Expr::Builtin(Builtin::GlobalId(a) | Builtin::LocalId(a)) => Some(a.index() + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}
