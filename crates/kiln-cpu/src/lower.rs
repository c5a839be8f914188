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

use crate::mathlib::MathImports;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
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

mod loop_bounds;
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
        ScalarType::F32 => types::F32,
        ScalarType::F64 => types::F64,
    }
}

fn mem_flags() -> MemFlagsData {
    MemFlagsData::trusted()
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
    /// Lowers `k` into `b` (whose function takes one pointer argument). Returns the private
    /// memory layout the launcher must provide, or a message naming what could not be lowered.
    pub fn lower(
        mut b: FunctionBuilder<'f>,
        k: &'a Kernel,
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
        let types = expr_types(k, &k.params, &k.body)?;
        let mut fx = FnCtx {
            body: &k.body,
            vals: vec![None; k.body.exprs.len()],
            in_bounds: InBounds::of(&k.body, &types),
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

    /// Barrier mode: lays out the per-item private frame (dead flag, then the locals and
    /// computed values that more than one run uses; see [`runs`]). The other locals are
    /// registers, zeroed at the start of each run's pass over a work item.
    fn plan_private(&mut self, fx: &mut FnCtx) -> R<()> {
        let plan = runs::plan(fx.body);
        let mut off = 8u32;
        for ((l, private), group) in fx
            .body
            .locals
            .iter()
            .zip(&plan.private)
            .zip(&plan.group_local)
        {
            if matches!(l.ty, Type::Array(..)) {
                array_bytes(l)?;
            }
            if *group {
                // Zero at entry, like every local; only group-level code assigns it.
                let vars = self.declare_vars(&l.ty);
                self.zero_vars(&l.ty, &vars);
                fx.locals.push(LocalStore::Group(vars));
                continue;
            }
            if !private {
                let vars = self.declare_vars(&l.ty);
                fx.locals.push(LocalStore::Vars(vars));
                continue;
            }
            let a = l.ty.align().max(1);
            off = off.div_ceil(a) * a;
            fx.locals.push(LocalStore::Private(off));
            off = off
                .checked_add(l.ty.size())
                .ok_or("private memory overflow")?;
        }
        for (t, spill) in fx.types.iter().zip(&plan.spill) {
            if !spill {
                self.spill_off.push(None);
                continue;
            }
            off = off.div_ceil(8) * 8;
            self.spill_off.push(Some(off));
            off = off.checked_add(t.size()).ok_or("private memory overflow")?;
        }
        self.frame_bytes = off.div_ceil(16) * 16;
        self.hoisted = vec![false; fx.body.exprs.len()];
        self.runs = plan;
        Ok(())
    }

    /// The work item being lowered: inside a work-item loop its index, at group level 0 (the
    /// item that decides group-uniform control flow).
    fn cur_item(&mut self) -> Value {
        match self.item {
            Some(v) => v,
            None => self.iconst32(0),
        }
    }

    /// The current work item's copy of the private value at frame offset `off`, `size` bytes
    /// long. Private memory is laid out value by value: the value at offset `off` of the
    /// per-item frame occupies bytes `off * total .. (off + size) * total`, one `size`-byte
    /// copy per work item in work-item order, so a quad's four copies are adjacent.
    fn private_addr(&mut self, off: u32, size: u32) -> Value {
        let item = self.cur_item();
        let item64 = self.b.ins().uextend(types::I64, item);
        let at = self.b.ins().imul_imm_u(item64, size as i64);
        let region = self.b.ins().imul_imm_u(self.total64, off as i64);
        let base = self.b.ins().iadd(self.private, region);
        self.b.ins().iadd(base, at)
    }

    /// Loads a value of type `ty` from `addr + base_off`, one Cranelift value per component.
    /// Integers narrower than 64 bits are loaded extended (unsigned ones to 64 bits, signed
    /// 8- and 16-bit ones to 32) and reduced, so that a cast widening them, or an address
    /// computed from them, finds the extended value (see [`Self::loaded_wide`]).
    fn load_flat(&mut self, ty: &Type, addr: Value, base_off: u32) -> Vec<Value> {
        ty.flatten()
            .into_iter()
            .map(|(s, off)| {
                let (f, off) = (mem_flags(), (base_off + off) as i32);
                let ins = self.b.ins();
                let wide = match s {
                    ScalarType::U8 => ins.uload8(types::I64, f, addr, off),
                    ScalarType::I8 => ins.sload8(types::I32, f, addr, off),
                    ScalarType::U16 => ins.uload16(types::I64, f, addr, off),
                    ScalarType::I16 => ins.sload16(types::I32, f, addr, off),
                    ScalarType::U32 => ins.uload32(f, addr, off),
                    _ => return ins.load(clty(s), f, addr, off),
                };
                self.b.ins().ireduce(clty(s), wide)
            })
            .collect()
    }

    /// When `x` is an integer [`Self::load_flat`] loaded extended (or such a value reduced to
    /// 32 bits), the extended value: zero-extended to 64 bits when `signed` is false,
    /// sign-extended to 32 bits when true.
    fn loaded_wide(&self, x: Value, signed: bool) -> Option<Value> {
        let dfg = &self.b.func.dfg;
        let ir::ValueDef::Result(reduce, 0) = dfg.value_def(x) else {
            return None;
        };
        let ir::InstructionData::Unary {
            opcode: ir::Opcode::Ireduce,
            arg,
        } = dfg.insts[reduce]
        else {
            return None;
        };
        let ir::ValueDef::Result(load, 0) = dfg.value_def(arg) else {
            return None;
        };
        let opcode = dfg.insts[load].opcode();
        let extends = if signed {
            matches!(opcode, ir::Opcode::Sload8 | ir::Opcode::Sload16)
        } else {
            matches!(
                opcode,
                ir::Opcode::Uload8 | ir::Opcode::Uload16 | ir::Opcode::Uload32
            )
        };
        extends.then_some(arg)
    }

    fn store_flat(&mut self, ty: &Type, addr: Value, base_off: u32, vals: &[Value]) {
        for ((_, off), v) in ty.flatten().into_iter().zip(vals) {
            self.b
                .ins()
                .store(mem_flags(), *v, addr, (base_off + off) as i32);
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

    /// For a counted loop (`for i in START..END` with a constant start and step, as the IR
    /// builder writes it: `i = START; loop { if i >= END { break } .. } continuing { i = i +
    /// STEP }`): the counter, and the number of trips when END is a constant too and the loop
    /// runs at most `MAX_COUNTED_TRIPS` times and is small enough to copy four times. With an
    /// END computed before the loop, only an unsigned counter stepping by one counts (its last
    /// value is END - 1). The counter's value on entry must be a constant in the current
    /// block.
    fn counted_loop(&mut self, fx: &FnCtx, body: &Block, continuing: &Block) -> Option<Counted> {
        let ex = |h: &Handle| &fx.body.exprs[h.index()];
        let (
            [Stmt::Eval(get), Stmt::Eval(test), Stmt::If {
                cond,
                accept,
                reject,
            }, rest @ ..],
            [Stmt::Eval(get2), Stmt::Eval(next), Stmt::LocalSet { local: set, value }],
        ) = (&body.0[..], &continuing.0[..])
        else {
            return None;
        };
        let (Expr::LocalGet(l), Expr::LocalGet(l2)) = (ex(get), ex(get2)) else {
            return None;
        };
        let Expr::Binary {
            op: op @ (BinaryOp::Ge | BinaryOp::Gt),
            lhs,
            rhs,
        } = ex(test)
        else {
            return None;
        };
        let Expr::Binary {
            op: BinaryOp::Add,
            lhs: step_lhs,
            rhs: step,
        } = ex(next)
        else {
            return None;
        };
        let Expr::Literal(step) = ex(step) else {
            return None;
        };
        let counted = l == l2
            && set == l
            && lhs == get
            && step_lhs == get2
            && value == next
            && cond == test
            && matches!(&accept.0[..], [Stmt::Break])
            && reject.0.is_empty()
            && !assigns(rest, *l);
        let signed = match step.ty() {
            ScalarType::I32 => true,
            ScalarType::U32 => false,
            _ => return None,
        };
        let LocalStore::Vars(vars) = &fx.locals[l.0 as usize] else {
            return None;
        };
        if !counted || vars.len() != 1 || fx.types[rhs.index()] != Type::Scalar(step.ty()) {
            return None;
        }
        let start = self.b.use_var(vars[0]);
        let start = self.constant_u32(start)?;
        let step = step.to_bits() as u32;
        let Expr::Literal(end) = ex(rhs) else {
            let stepped = !signed && step == 1 && *op == BinaryOp::Ge;
            return stepped.then_some(Counted {
                counter: *l,
                trips: None,
                last: Some(LastTrip::BeforeEnd(*rhs)),
            });
        };
        let end = end.to_bits() as u32;
        let done = |v: u32| match (op, signed) {
            (BinaryOp::Ge, true) => v as i32 >= end as i32,
            (BinaryOp::Gt, true) => v as i32 > end as i32,
            (BinaryOp::Ge, false) => v >= end,
            _ => v > end,
        };
        let (mut v, mut trips) = (start, 0u32);
        while !done(v) {
            trips += 1;
            if trips > MAX_COUNTED_TRIPS {
                return None;
            }
            v = v.wrapping_add(step);
        }
        let size = count_stmts(&body.0) + count_stmts(&continuing.0);
        // An unsigned counter that steps up without wrapping is largest on the last trip.
        let last = start as u64 + step as u64 * (trips.max(1) - 1) as u64;
        let last = (!signed && step > 0 && last <= u32::MAX as u64).then_some(last as u32);
        (size * trips.min(4) as usize <= MAX_UNROLLED_STMTS).then_some(Counted {
            counter: *l,
            trips: Some(trips),
            last: last.map(LastTrip::Constant),
        })
    }

    /// `loop { body } continuing { continuing }`, each part lowered by `part` with the loop's
    /// `continue` and `break` targets on `fx.loops`; with `enter`, the loop runs at all only
    /// when that flag is true. With `trips` (from [`Self::counted_loop`]) the loop is
    /// unrolled: up to 4 trips become straight-line copies of the body (less its exit test,
    /// which none of them takes) and of `continuing`; more trips, when 4 or 2 divides their
    /// number, become a loop whose every pass runs 4 or 2 copies and tests for the exit only
    /// before the first. (Unrolling further makes Cranelift keep every copy's loads live at
    /// once, placing the arithmetic that uses them at the end, and spill.) Other loops whose
    /// body opens with its exit test go to [`Self::lower_rotated_loop`] when `rotate` allows.
    fn lower_loop(
        &mut self,
        fx: &mut FnCtx,
        parts: &LoopParts,
        part: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let LoopParts {
            body,
            continuing,
            enter,
            trips,
            rotate,
        } = *parts;
        let copies = match trips {
            Some(t) if t > 4 && t % 4 == 0 => 4,
            Some(t) if t > 4 && t % 2 == 0 => 2,
            _ => 1,
        };
        if let Some(trips) = trips.filter(|t| *t <= 4) {
            let exit = self.b.create_block();
            self.enter_if(enter, exit);
            self.loop_copies(fx, body, continuing, trips, exit, part)?;
            self.b.ins().jump(exit, &[]);
            self.b.switch_to_block(exit);
            return Ok(());
        }
        if rotate {
            if let Some(head) = loop_head(fx, body) {
                return self.lower_rotated_loop(fx, parts, copies, head, part);
            }
        }
        let (header, cont, exit) = self.loop_blocks();
        match enter {
            Some(flag) => self.b.ins().brif(flag, header, &[], exit, &[]),
            None => self.b.ins().jump(header, &[]),
        };
        self.b.switch_to_block(header);
        fx.loops.push((cont, exit));
        part(self, fx, body)?;
        self.enter_continuing(body, cont);
        part(self, fx, continuing)?;
        fx.loops.pop();
        self.loop_copies(fx, body, continuing, copies - 1, exit, part)?;
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// A loop whose body opens with its exit test (see [`loop_head`]) lowered with the test
    /// at the bottom: the test runs once before the loop and then after each pass, so that a
    /// pass ends in one conditional branch back to its top instead of a jump to a test. A
    /// counter that steps by one (see [`Self::wide_counter`]) is kept zero-extended to 64 bits
    /// in the loop, so that addresses use it as it is and the step and the test take one
    /// instruction each.
    fn lower_rotated_loop(
        &mut self,
        fx: &mut FnCtx,
        parts: &LoopParts,
        copies: u32,
        head: Handle,
        part: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let LoopParts {
            body,
            continuing,
            enter,
            ..
        } = *parts;
        let (header, cont, exit) = self.loop_blocks();
        self.enter_if(enter, exit);
        let test = Block(body.0[..2].to_vec());
        part(self, fx, &test)?;
        let done = self.get(fx, head)?[0];
        let counter = (copies == 1)
            .then(|| self.wide_counter(fx, body, continuing))
            .flatten();
        let mut args = Vec::new();
        if let Some(var) = counter {
            let first = self.b.use_var(var);
            args.push(BlockArg::Value(self.index64(first)));
            self.b.append_block_param(header, types::I64);
        }
        self.b.ins().brif(done, exit, &[], header, &args);
        self.b.switch_to_block(header);
        let wide = counter.map(|var| {
            let c = self.b.block_params(header)[0];
            self.def_zero_extended(var, c);
            c
        });
        let rest = without_exit_test(body);
        fx.loops.push((cont, exit));
        part(self, fx, &rest)?;
        self.b.ins().jump(cont, &[]);
        self.b.switch_to_block(cont);
        let mut args = Vec::new();
        let done = match counter.zip(wide) {
            Some((var, c)) => {
                // The test `next >= END` in 64 bits, on the counter as it is kept.
                let next = self.b.ins().iadd_imm_u(c, 1);
                self.def_zero_extended(var, next);
                args.push(BlockArg::Value(next));
                let Expr::Binary { rhs: end, .. } = fx.body.exprs[head.index()] else {
                    return Err("a loop's exit test is not a comparison".into());
                };
                let end = self.get(fx, end)?[0];
                let end = self.index64(end);
                fx.loops.pop();
                self.b
                    .ins()
                    .icmp(IntCC::UnsignedGreaterThanOrEqual, next, end)
            }
            None => {
                part(self, fx, continuing)?;
                fx.loops.pop();
                self.loop_copies(fx, body, continuing, copies - 1, exit, part)?;
                part(self, fx, &test)?;
                self.get(fx, head)?[0]
            }
        };
        self.b.ins().brif(done, exit, &[], header, &args);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// `if c { accept } else { reject }` on a scalar `c`, each arm lowered by `arm`. Its
    /// blocks are sealed as soon as they have all their predecessors (arms jump nowhere but
    /// to the end and to enclosing loops), so the values after it are the arms' values.
    fn branch(
        &mut self,
        fx: &mut FnCtx,
        c: Value,
        accept: &Block,
        reject: &Block,
        arm: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let (then_b, else_b, merge) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().brif(c, then_b, &[], else_b, &[]);
        for (block, part) in [(then_b, accept), (else_b, reject)] {
            self.b.switch_to_block(block);
            self.b.seal_block(block);
            arm(self, fx, part)?;
            // An arm that ends in a jump leaves an empty block nothing reaches: joining it to
            // `merge` would give the values after the `if` a second, undefined source.
            let dead = self.unreached.is_some_and(|blk| {
                self.b.current_block() == Some(blk) && self.b.func.layout.first_inst(blk).is_none()
            });
            if !dead {
                self.b.ins().jump(merge, &[]);
            }
        }
        self.b.switch_to_block(merge);
        self.b.seal_block(merge);
        Ok(())
    }

    /// After a pass's `body` is lowered: goes on in `cont`, its `continue` target, when the
    /// body can `continue`, sealing it (no `continuing` jumps, an IR rule, so it has all its
    /// predecessors, and the counter's steps read the values they step from, as
    /// [`Self::proven_index`] needs). Otherwise `continuing` stays in the body's block, so
    /// that the copies of an unrolled pass share one block and Cranelift folds their loads
    /// into the instructions that use them.
    fn enter_continuing(&mut self, body: &Block, cont: ir::Block) {
        if has_continue(&body.0) {
            self.b.ins().jump(cont, &[]);
            self.b.switch_to_block(cont);
            self.b.seal_block(cont);
        }
    }

    /// The value of `v` when an `iconst` defines it, as a `u32`.
    fn constant_u32(&self, v: Value) -> Option<u32> {
        let dfg = &self.b.func.dfg;
        match dfg.value_def(dfg.resolve_aliases(v)) {
            ir::ValueDef::Result(inst, 0) => match dfg.insts[inst] {
                ir::InstructionData::UnaryImm {
                    opcode: ir::Opcode::Iconst,
                    imm,
                } => Some(imm.bits() as u32),
                _ => None,
            },
            _ => None,
        }
    }

    /// New blocks for a loop's top, its `continue` target and its exit.
    fn loop_blocks(&mut self) -> (ir::Block, ir::Block, ir::Block) {
        (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        )
    }

    /// With a flag `enter`, goes on in a new block when it is true and to `exit` when false.
    fn enter_if(&mut self, enter: Option<Value>, exit: ir::Block) {
        if let Some(flag) = enter {
            let first = self.b.create_block();
            self.b.ins().brif(flag, first, &[], exit, &[]);
            self.b.switch_to_block(first);
        }
    }

    /// Assigns the 32-bit variable `var` the low half of `wide`, whose high half is zero, and
    /// records that for [`Self::index64`].
    fn def_zero_extended(&mut self, var: Variable, wide: Value) {
        let low = self.b.ins().ireduce(types::I32, wide);
        self.zero_extended.insert(low, wide);
        self.b.def_var(var, low);
    }

    /// For a loop whose body opens with `%a = i; %b = %a >= END; if %b { break }` on a `u32`
    /// local `i` kept in one variable, that the body does not assign, and whose `continuing`
    /// is `i = i + 1`: that variable. Such a counter never passes `u32::MAX` (it is below
    /// `END` before each step), so it can be kept zero-extended to 64 bits, the form
    /// addresses use.
    fn wide_counter(&self, fx: &FnCtx, body: &Block, continuing: &Block) -> Option<Variable> {
        let ex = |h: &Handle| &fx.body.exprs[h.index()];
        let [Stmt::Eval(get), Stmt::Eval(test), _, rest @ ..] = &body.0[..] else {
            return None;
        };
        let [reads @ .., Stmt::LocalSet { local, value }] = &continuing.0[..] else {
            return None;
        };
        let Expr::LocalGet(l) = ex(get) else {
            return None;
        };
        let ge = matches!(ex(test), Expr::Binary { op: BinaryOp::Ge, lhs, .. } if lhs == get);
        let step = matches!(ex(value), Expr::Binary { op: BinaryOp::Add, lhs, rhs }
            if ex(lhs) == &Expr::LocalGet(*l)
                && ex(rhs) == &Expr::Literal(ScalarValue::U32(1)));
        // `continuing` computes nothing but the step, which this loop replaces.
        let pure = reads.iter().all(|s| {
            matches!(s, Stmt::Eval(h) if h == value
                || matches!(ex(h), Expr::LocalGet(_) | Expr::Literal(_)))
        });
        let LocalStore::Vars(vars) = &fx.locals[l.0 as usize] else {
            return None;
        };
        let fits = ge
            && step
            && pure
            && local == l
            && fx.types[get.index()] == Type::Scalar(ScalarType::U32)
            && vars.len() == 1
            && !assigns(rest, *l)
            && !self.in_quads;
        fits.then_some(vars[0])
    }

    /// `n` passes of a counted loop in straight line: the body without its exit test (the
    /// statement [`Self::counted_loop`] matched third), then `continuing`, each pass with
    /// its own `continue` target and `exit` as its `break` target.
    fn loop_copies(
        &mut self,
        fx: &mut FnCtx,
        body: &Block,
        continuing: &Block,
        n: u32,
        exit: ir::Block,
        part: &mut dyn FnMut(&mut Self, &mut FnCtx, &Block) -> R<()>,
    ) -> R<()> {
        let copy = without_exit_test(body);
        for _ in 0..n {
            let cont = self.b.create_block();
            fx.loops.push((cont, exit));
            part(self, fx, &copy)?;
            self.enter_continuing(&copy, cont);
            part(self, fx, continuing)?;
            fx.loops.pop();
        }
        Ok(())
    }

    /// Runs `stmts` once per work item of the group: four work items at a time where the
    /// statements allow it (see `simd`), then the work items left one at a time.
    fn run_items(&mut self, fx: &mut FnCtx, stmts: &[Stmt]) -> R<()> {
        let start = match self.quad.clone() {
            Some(plan) if self.quad_fits(fx, &plan, stmts) => {
                self.in_quads = true;
                let end = self.quad_loop(fx, &plan, stmts);
                self.in_quads = false;
                Some(end?)
            }
            _ => None,
        };
        self.item_loop(fx, stmts, start)
    }

    /// Runs `stmts` once per work item of the group, from work item `start` (0 if `None`).
    /// A start other than 0 comes from the quad loop: the first work item of a
    /// one-dimensional group's last partial quad, or the group's end when quads covered it.
    fn item_loop(&mut self, fx: &mut FnCtx, stmts: &[Stmt], start: Option<Value>) -> R<()> {
        let item_var = self.b.declare_var(types::I32);
        // Only the axes of the local id the kernel reads are kept (a dead counter would still
        // hold a register through the whole pass).
        let lvars: Vec<Variable> = (0..self.local_axes)
            .map(|_| self.b.declare_var(types::I32))
            .collect();
        let z = self.iconst32(0);
        let first = start.unwrap_or(z);
        self.b.def_var(item_var, first);
        for (a, var) in lvars.iter().enumerate() {
            self.b.def_var(*var, if a == 0 { first } else { z });
        }
        let (header, body, next, exit) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(header);
        let item = self.b.use_var(item_var);
        let more = self.b.ins().icmp(IntCC::UnsignedLessThan, item, self.total);
        self.b.ins().brif(more, body, &[], exit, &[]);
        self.b.switch_to_block(body);
        self.item = Some(item);
        self.lid = [z; 3];
        for (lid, var) in self.lid.iter_mut().zip(&lvars) {
            *lid = self.b.use_var(*var);
        }
        self.zero_locals(fx);
        // Barrier mode: the private scalar locals this run uses live in registers for a work
        // item's pass, loaded at its start and stored back at its end (`done`).
        let mut promoted = Vec::new();
        let done = if self.barrier_mode {
            let flag = self.private_addr(0, 4);
            let dead = self.b.ins().load(types::I32, mem_flags(), flag, 0);
            let live = self.b.create_block();
            self.b.ins().brif(dead, next, &[], live, &[]);
            self.b.switch_to_block(live);
            for l in runs::locals_used(stmts, fx.body) {
                let i = l.0 as usize;
                let (LocalStore::Private(off), ty) = (&fx.locals[i], &fx.body.locals[i].ty) else {
                    continue;
                };
                if matches!(ty, Type::Array(..)) {
                    continue;
                }
                let (off, ty) = (*off, ty.clone());
                let base = self.private_addr(off, ty.size());
                let vals = self.load_flat(&ty, base, 0);
                let vars = self.declare_vars(&ty);
                for (var, v) in vars.iter().zip(vals) {
                    self.b.def_var(*var, v);
                }
                fx.locals[i] = LocalStore::Vars(vars.clone());
                promoted.push((i, off, ty, vars));
            }
            for h in runs::outside_inputs(stmts, fx.body) {
                if self.runs.remat[h.index()] {
                    self.remat(fx, h)?;
                }
            }
            self.b.create_block()
        } else {
            next
        };
        let saved = self.item_next.replace(done);
        self.block(fx, stmts)?;
        self.item_next = saved;
        self.b.ins().jump(done, &[]);
        if done != next {
            self.b.switch_to_block(done);
            for (i, off, ty, vars) in promoted {
                let vals: Vec<Value> = vars.iter().map(|v| self.b.use_var(*v)).collect();
                let base = self.private_addr(off, ty.size());
                self.store_flat(&ty, base, 0, &vals);
                fx.locals[i] = LocalStore::Private(off);
            }
            self.b.ins().jump(next, &[]);
        }
        self.b.switch_to_block(next);
        let item = self.b.use_var(item_var);
        let item1 = self.b.ins().iadd_imm_s(item, 1);
        self.b.def_var(item_var, item1);
        // The next local id: one along x, wrapping into the next row and layer.
        let mut carry = self.iconst32(1);
        for (a, var) in lvars.iter().enumerate() {
            let l = self.b.use_var(*var);
            let l = self.b.ins().iadd(l, carry);
            let next = if a < 2 {
                let wraps = self.b.ins().icmp(IntCC::Equal, l, self.gsize[a]);
                carry = self.b.ins().uextend(types::I32, wraps);
                self.b.ins().select(wraps, z, l)
            } else {
                l
            };
            self.b.def_var(*var, next);
        }
        self.b.ins().jump(header, &[]);
        self.b.switch_to_block(exit);
        self.item = None;
        if fx.is_kernel && self.barrier_mode {
            self.forget_run_values(fx);
        }
        Ok(())
    }

    /// Forgets the values computed so far except those hoisted to group level: the others
    /// were computed where later code may not reach them (inside a work-item loop, or in an
    /// arm of a group-level `if`).
    fn forget_run_values(&self, fx: &mut FnCtx) {
        for (i, v) in fx.vals.iter_mut().enumerate() {
            if !self.hoisted.get(i).copied().unwrap_or(false) {
                *v = None;
            }
        }
    }

    /// Barrier mode, at group level: the value of `h`, recomputing it when it is a
    /// group-uniform value that runs recompute (see `runs`).
    fn group_value(&mut self, fx: &mut FnCtx, h: Handle) -> R<Vec<Value>> {
        if fx.vals[h.index()].is_none() && self.runs.uniform[h.index()] {
            self.remat(fx, h)?;
        }
        self.get(fx, h)
    }

    /// Barrier mode: lowers statement `s` once for the whole group (an evaluation hoisted out
    /// of its run, or an assignment to a group local).
    fn group_stmt(&mut self, fx: &mut FnCtx, s: &Stmt) -> R<()> {
        let inputs = match s {
            Stmt::Eval(h) => operands(&fx.body.exprs[h.index()]),
            Stmt::LocalSet { value, .. } => vec![*value],
            other => return Err(format!("unexpected group-level statement {other:?}")),
        };
        for h in inputs {
            self.group_value(fx, h)?;
        }
        self.stmt(fx, s)?;
        if let Stmt::Eval(h) = s {
            self.hoisted[h.index()] = true;
        }
        self.forget_run_values(fx);
        Ok(())
    }

    /// Barrier mode: lowers a block whose statements may contain barriers.
    fn uniform_block(&mut self, fx: &mut FnCtx, block: &Block, in_uniform_loop: bool) -> R<()> {
        let mut run: Vec<Stmt> = Vec::new();
        for s in &block.0 {
            match self.runs.placement(s, in_uniform_loop) {
                runs::Placement::Run => {
                    run.push(s.clone());
                    continue;
                }
                runs::Placement::Hoisted => {
                    self.group_stmt(fx, s)?;
                    continue;
                }
                runs::Placement::Group => {}
            }
            if !run.is_empty() {
                self.run_items(fx, &std::mem::take(&mut run))?;
            }
            match s {
                Stmt::Barrier(_) => {}
                Stmt::LocalSet { .. } => self.group_stmt(fx, s)?,
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    let c = self.group_value(fx, *cond)?[0];
                    self.forget_run_values(fx);
                    self.branch(fx, c, accept, reject, &mut |l, fx, arm| {
                        l.uniform_block(fx, arm, in_uniform_loop)
                    })?;
                }
                Stmt::Loop { body, continuing } => {
                    let parts = LoopParts {
                        body,
                        continuing,
                        enter: None,
                        trips: None,
                        rotate: false,
                    };
                    self.lower_loop(fx, &parts, &mut |l, fx, part| {
                        l.uniform_block(fx, part, true)
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
                other => return Err(format!("unexpected group-level statement {other:?}")),
            }
        }
        if !run.is_empty() {
            self.run_items(fx, &run)?;
        }
        Ok(())
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

    /// The base pointer, element count (64-bit) and element type of a buffer parameter or
    /// shared array.
    fn memory(&self, m: Memory) -> R<(Value, Value, Type)> {
        Ok(match m {
            Memory::Buffer(p) => {
                let (base, len) = self
                    .bufs
                    .get(p as usize)
                    .copied()
                    .flatten()
                    .ok_or("not a buffer")?;
                let ParamKind::Buffer { elem, .. } = &self.k.params[p as usize].kind else {
                    return Err("not a buffer".into());
                };
                (base, len, elem.clone())
            }
            Memory::Shared(s) => {
                let (base, len) = *self.shared.get(s as usize).ok_or("no such shared array")?;
                (base, len, self.k.shared[s as usize].elem.clone())
            }
        })
    }

    /// The address `base + (index + step) * size` of an element, `index` 64-bit: the step
    /// becomes the access's displacement.
    fn element_addr(&mut self, base: Value, index: Value, step: i64, size: u32) -> Value {
        let off = self.b.ins().imul_imm_u(index, size as i64);
        let addr = self.b.ins().iadd(base, off);
        match step {
            0 => addr,
            s => self.b.ins().iadd_imm_s(addr, s * size as i64),
        }
    }

    /// The address of element `index` of memory `m` and the element's type, for an access
    /// that the loop being lowered keeps in bounds: `(index, step)` from
    /// [`Self::proven_index`].
    fn proven_elem(&mut self, m: Memory, (index, step): (Value, i64)) -> R<(Value, Type)> {
        let (base, _, elem) = self.memory(m)?;
        let addr = self.element_addr(base, index, step, elem.size());
        Ok((addr, elem))
    }

    /// The address of element `i` of memory `m`, whether `i` is in bounds, and the element
    /// type. Out of bounds, the address is the zero page (`write` false) or the sink, tested
    /// as `check` says.
    fn mem_elem(
        &mut self,
        m: Memory,
        i: Value,
        write: bool,
        check: BoundsCheck,
    ) -> R<(Value, Value, Type)> {
        let (base, len, elem) = self.memory(m)?;
        let i64v = self.index64(i);
        let addr = self.element_addr(base, i64v, 0, elem.size());
        if check == BoundsCheck::Proven {
            let yes = self.b.ins().iconst(types::I8, 1);
            return Ok((addr, yes, elem));
        }
        let inb = self.b.ins().icmp(IntCC::UnsignedLessThan, i64v, len);
        let addr = self.pick_address(inb, addr, write, check);
        Ok((addr, inb, elem))
    }

    /// The address of element `i` of array local `local` and the element's type. Out of
    /// bounds gives the address of zeros to read or of a sink to write, tested as `check`
    /// says.
    fn array_elem(
        &mut self,
        fx: &FnCtx,
        local: LocalId,
        i: Value,
        write: bool,
        check: BoundsCheck,
    ) -> R<(Value, Type)> {
        let Type::Array(elem, n) = &fx.body.locals[local.0 as usize].ty else {
            return Err("not an array local".into());
        };
        let (elem, n) = ((**elem).clone(), *n);
        let base = match &fx.locals[local.0 as usize] {
            LocalStore::Stack(slot) => self.b.ins().stack_addr(types::I64, *slot, 0),
            LocalStore::Private(off) => self.private_addr(*off, elem.size() * n),
            LocalStore::Vars(_) | LocalStore::Group(_) => return Err("not an array local".into()),
        };
        let i64v = self.index64(i);
        let addr = self.element_addr(base, i64v, 0, elem.size());
        if check == BoundsCheck::Proven {
            return Ok((addr, elem));
        }
        let inb = self
            .b
            .ins()
            .icmp_imm_u(IntCC::UnsignedLessThan, i, n as i64);
        Ok((self.pick_address(inb, addr, write, check), elem))
    }

    /// How the access at `index` tests it against the bounds: not at all when `proven` (see
    /// [`InBounds`]); by a select in quads, whose bodies are mostly vector code (branches made
    /// the tiled matmul 3% slower), and for an index that is itself a select, the way
    /// predicated code sends an access it drops out of bounds (a filter scatter storing at
    /// `select(keep, pos, u32::MAX)` ran 5x slower with a branch on elements kept at random);
    /// by a branch otherwise.
    fn bounds_check(&self, fx: &FnCtx, index: Handle, proven: bool) -> BoundsCheck {
        if proven {
            BoundsCheck::Proven
        } else if self.in_quads || matches!(fx.body.exprs[index.index()], Expr::Select { .. }) {
            BoundsCheck::Select
        } else {
            BoundsCheck::Branch
        }
    }

    /// `addr` where `inb` holds, else the sink (`write`) or the zeros, picked as `check` says.
    /// A branch goes to an out-of-line block: accesses are nearly always in bounds, so it is
    /// predicted and the access's address is known at once, where with a select the access
    /// (and the loads after a store) wait for the comparison. A work item's loop counting into
    /// a row of a device array ran 1.2x faster so. The out-of-line block reads the fallback
    /// from the frame, so it takes no register in the loop.
    fn pick_address(&mut self, inb: Value, addr: Value, write: bool, check: BoundsCheck) -> Value {
        let slot = if write { SLOT_SINK } else { SLOT_ZEROS };
        if check != BoundsCheck::Branch {
            let fallback = if write { self.sink } else { self.zeros };
            return self.b.ins().select(inb, addr, fallback);
        }
        let (join, outside) = (self.b.create_block(), self.b.create_block());
        let picked = self.b.append_block_param(join, types::I64);
        self.b.set_cold_block(outside);
        self.b
            .ins()
            .brif(inb, join, &[BlockArg::Value(addr)], outside, &[]);
        self.b.switch_to_block(outside);
        // A plain load, which Cranelift does not merge with the one at entry.
        let fallback = self
            .b
            .ins()
            .load(types::I64, mem_flags(), self.frame, (slot * 8) as i32);
        self.b.ins().jump(join, &[BlockArg::Value(fallback)]);
        self.b.switch_to_block(join);
        picked
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
                    .map(|x| {
                        if clty(from) == clty(to) {
                            x
                        } else {
                            self.b.ins().bitcast(clty(to), MemFlagsData::new(), x)
                        }
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

    fn builtin(&mut self, b: Builtin) -> Value {
        match b {
            Builtin::GlobalId(a) => self
                .b
                .ins()
                .iadd(self.gbase[a.index()], self.lid[a.index()]),
            Builtin::LocalId(a) => self.lid[a.index()],
            Builtin::GroupId(a) => self.gid[a.index()],
            Builtin::GroupSize(a) => self.gsize[a.index()],
            Builtin::NumGroups(a) => self.ngroups[a.index()],
            Builtin::GlobalSize(a) => self
                .b
                .ins()
                .imul(self.ngroups[a.index()], self.gsize[a.index()]),
            Builtin::LocalIndex | Builtin::SubgroupId => self.cur_item(),
            Builtin::SubgroupSize => self.iconst32(1),
            Builtin::SubgroupLane => self.iconst32(0),
        }
    }

    fn binary(&mut self, op: BinaryOp, s: ScalarType, a: Value, b: Value) -> R<Value> {
        if s.is_float() {
            let cc = |c| Some(c);
            let fcc = match op {
                BinaryOp::Eq => cc(FloatCC::Equal),
                BinaryOp::Ne => cc(FloatCC::NotEqual),
                BinaryOp::Lt => cc(FloatCC::LessThan),
                BinaryOp::Le => cc(FloatCC::LessThanOrEqual),
                BinaryOp::Gt => cc(FloatCC::GreaterThan),
                BinaryOp::Ge => cc(FloatCC::GreaterThanOrEqual),
                _ => None,
            };
            if let Some(c) = fcc {
                return Ok(self.b.ins().fcmp(c, a, b));
            }
            return Ok(match op {
                BinaryOp::Add => self.b.ins().fadd(a, b),
                BinaryOp::Sub => self.b.ins().fsub(a, b),
                BinaryOp::Mul => self.b.ins().fmul(a, b),
                BinaryOp::Div => self.b.ins().fdiv(a, b),
                BinaryOp::Rem => self.call_import(
                    if s == ScalarType::F32 {
                        "kiln_fmod_f32"
                    } else {
                        "kiln_fmod_f64"
                    },
                    &[a, b],
                ),
                _ => return Err(format!("`{}` on {s}", op.symbol())),
            });
        }
        let signed = s.is_signed();
        let icc = |sc: IntCC, uc: IntCC| if signed { sc } else { uc };
        Ok(match op {
            BinaryOp::Add => self.b.ins().iadd(a, b),
            BinaryOp::Sub => self.b.ins().isub(a, b),
            BinaryOp::Mul => self.b.ins().imul(a, b),
            BinaryOp::Div | BinaryOp::Rem => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                let bad = if signed {
                    let min = self.int_const(s, 1u64 << (s.bits() - 1));
                    let m1 = self.int_const(s, u64::MAX);
                    let is_min = self.b.ins().icmp(IntCC::Equal, a, min);
                    let is_m1 = self.b.ins().icmp(IntCC::Equal, b, m1);
                    let both = self.b.ins().band(is_min, is_m1);
                    self.b.ins().bor(zero, both)
                } else {
                    zero
                };
                let one = self.int_const(s, 1);
                let d = self.b.ins().select(bad, one, b);
                match (op, signed) {
                    (BinaryOp::Div, true) => self.b.ins().sdiv(a, d),
                    (BinaryOp::Div, false) => self.b.ins().udiv(a, d),
                    (_, true) => self.b.ins().srem(a, d),
                    (_, false) => self.b.ins().urem(a, d),
                }
            }
            BinaryOp::And => self.b.ins().band(a, b),
            BinaryOp::Or => self.b.ins().bor(a, b),
            BinaryOp::Xor => self.b.ins().bxor(a, b),
            BinaryOp::Shl => self.b.ins().ishl(a, b),
            BinaryOp::Shr if signed => self.b.ins().sshr(a, b),
            BinaryOp::Shr => self.b.ins().ushr(a, b),
            BinaryOp::Eq => self.b.ins().icmp(IntCC::Equal, a, b),
            BinaryOp::Ne => self.b.ins().icmp(IntCC::NotEqual, a, b),
            BinaryOp::Lt => {
                self.b
                    .ins()
                    .icmp(icc(IntCC::SignedLessThan, IntCC::UnsignedLessThan), a, b)
            }
            BinaryOp::Le => self.b.ins().icmp(
                icc(IntCC::SignedLessThanOrEqual, IntCC::UnsignedLessThanOrEqual),
                a,
                b,
            ),
            BinaryOp::Gt => self.b.ins().icmp(
                icc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan),
                a,
                b,
            ),
            BinaryOp::Ge => self.b.ins().icmp(
                icc(
                    IntCC::SignedGreaterThanOrEqual,
                    IntCC::UnsignedGreaterThanOrEqual,
                ),
                a,
                b,
            ),
        })
    }

    fn cast(&mut self, x: Value, from: ScalarType, to: ScalarType) -> Value {
        use ScalarType::*;
        if from == to {
            return x;
        }
        let (ft, tt) = (clty(from), clty(to));
        if to == Bool {
            return if from.is_float() {
                let z = self.zero(from);
                self.b.ins().fcmp(FloatCC::NotEqual, x, z)
            } else {
                self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0)
            };
        }
        if from.is_float() && to.is_float() {
            return if to == F64 {
                self.b.ins().fpromote(tt, x)
            } else {
                self.b.ins().fdemote(tt, x)
            };
        }
        if !from.is_float() && !to.is_float() {
            return match ft.bits().cmp(&tt.bits()) {
                std::cmp::Ordering::Equal => x,
                std::cmp::Ordering::Greater => self.b.ins().ireduce(tt, x),
                std::cmp::Ordering::Less => match self.loaded_wide(x, from.is_signed()) {
                    Some(w) => self.resize(w, tt, from.is_signed()),
                    None if from.is_signed() => self.b.ins().sextend(tt, x),
                    None => self.b.ins().uextend(tt, x),
                },
            };
        }
        if !from.is_float() {
            let wide = if ft.bits() < 32 {
                if let Some(w) = self.loaded_wide(x, from.is_signed()) {
                    self.resize(w, types::I32, from.is_signed())
                } else if from.is_signed() {
                    self.b.ins().sextend(types::I32, x)
                } else {
                    self.b.ins().uextend(types::I32, x)
                }
            } else {
                x
            };
            return if from.is_signed() {
                self.b.ins().fcvt_from_sint(tt, wide)
            } else {
                self.b.ins().fcvt_from_uint(tt, wide)
            };
        }
        if tt.bits() >= 32 {
            return if to.is_signed() {
                self.b.ins().fcvt_to_sint_sat(tt, x)
            } else {
                self.b.ins().fcvt_to_uint_sat(tt, x)
            };
        }
        let max = (1i64 << (to.bits() - if to.is_signed() { 1 } else { 0 })) - 1;
        let w = if to.is_signed() {
            self.b.ins().fcvt_to_sint_sat(types::I32, x)
        } else {
            self.b.ins().fcvt_to_uint_sat(types::I32, x)
        };
        let hi = self.iconst32(max);
        let w = if to.is_signed() {
            let lo = self.iconst32(-max - 1);
            let too_low = self.b.ins().icmp(IntCC::SignedLessThan, w, lo);
            let w = self.b.ins().select(too_low, lo, w);
            let too_high = self.b.ins().icmp(IntCC::SignedGreaterThan, w, hi);
            self.b.ins().select(too_high, hi, w)
        } else {
            let too_high = self.b.ins().icmp(IntCC::UnsignedGreaterThan, w, hi);
            self.b.ins().select(too_high, hi, w)
        };
        self.b.ins().ireduce(tt, w)
    }

    /// The integer `w` as type `to`: itself, reduced, or extended as `signed` says.
    fn resize(&mut self, w: Value, to: ir::Type, signed: bool) -> Value {
        let from = self.b.func.dfg.value_type(w);
        match from.bits().cmp(&to.bits()) {
            std::cmp::Ordering::Equal => w,
            std::cmp::Ordering::Greater => self.b.ins().ireduce(to, w),
            std::cmp::Ordering::Less if signed => self.b.ins().sextend(to, w),
            std::cmp::Ordering::Less => self.b.ins().uextend(to, w),
        }
    }

    /// The 32-bit index `i` zero-extended to 64 bits; no instruction when `i` is a counter
    /// kept in 64 bits or an unsigned narrow load's extended value reduced (see
    /// [`Self::loaded_wide`]).
    fn index64(&mut self, i: Value) -> Value {
        if let Some(w) = self.zero_extended.get(&i) {
            return *w;
        }
        match self.loaded_wide(i, false) {
            Some(w) => w,
            None => self.b.ins().uextend(types::I64, i),
        }
    }

    fn imin_max(&mut self, s: ScalarType, max: bool, a: Value, b: Value) -> Value {
        let cc = match (s.is_signed(), max) {
            (true, false) => IntCC::SignedLessThan,
            (false, false) => IntCC::UnsignedLessThan,
            (true, true) => IntCC::SignedGreaterThan,
            (false, true) => IntCC::UnsignedGreaterThan,
        };
        let c = self.b.ins().icmp(cc, a, b);
        self.b.ins().select(c, a, b)
    }

    /// min/max with the IR's NaN rule: one NaN operand gives the other operand.
    fn fmin_max(&mut self, max: bool, a: Value, b: Value) -> Value {
        if let Some((pick_x, x, c)) = self.literal_pick(max, a, b) {
            return self.b.ins().select(pick_x, x, c);
        }
        let r = if max {
            self.b.ins().fmax(a, b)
        } else {
            self.b.ins().fmin(a, b)
        };
        let a_nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
        let b_nan = self.b.ins().fcmp(FloatCC::Unordered, b, b);
        let r = self.b.ins().select(a_nan, b, r);
        self.b.ins().select(b_nan, a, r)
    }

    /// The float that every lane of `v` holds when a constant defines it: an `f32const`, an
    /// `f64const`, or a `splat` or `vconst` of one f32. `None` for any other value.
    fn float_literal(&self, v: Value) -> Option<f64> {
        let dfg = &self.b.func.dfg;
        let ir::ValueDef::Result(inst, 0) = dfg.value_def(v) else {
            return None;
        };
        match dfg.insts[inst] {
            ir::InstructionData::UnaryIeee32 { imm, .. } => Some(f32::from_bits(imm.bits()).into()),
            ir::InstructionData::UnaryIeee64 { imm, .. } => Some(f64::from_bits(imm.bits())),
            ir::InstructionData::Unary {
                opcode: ir::Opcode::Splat,
                arg,
            } => self.float_literal(arg),
            ir::InstructionData::UnaryConst {
                opcode: ir::Opcode::Vconst,
                constant_handle,
            } if dfg.value_type(v) == types::F32X4 => {
                let bytes = dfg.constants.get(constant_handle).as_slice();
                let mut lanes = bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                let first = lanes.next()?;
                lanes
                    .all(|l| l == first)
                    .then(|| f32::from_bits(first).into())
            }
            _ => None,
        }
    }

    /// For a float `min` (or `max`, when `max`) of `a` and `b` where one is a literal `c` for
    /// which the plain pick `x < c ? x : c` (`c < x ? x : c` for `max`) follows the IR's rules:
    /// the pick's condition (scalar or per lane), `x` and `c`. That holds when `c` is not NaN
    /// (a NaN `x` then gives `c`), and is not +0 for `min` nor -0 for `max` (the pick gives `c`
    /// when `x` is the opposite zero). On x86 the pick is one instruction (`minps`, `maxss`,
    /// ..) instead of a NaN-propagating min and two NaN tests. `None` when neither operand is
    /// such a literal.
    fn literal_pick(&mut self, max: bool, a: Value, b: Value) -> Option<(Value, Value, Value)> {
        let exact = |v| match self.float_literal(v) {
            Some(c) if c.is_nan() => false,
            Some(c) if c == 0.0 => c.is_sign_negative() != max,
            Some(_) => true,
            None => false,
        };
        let (x, c) = match (exact(b), exact(a)) {
            (true, _) => (a, b),
            (false, true) => (b, a),
            _ => return None,
        };
        let pick_x = match max {
            true => self.b.ins().fcmp(FloatCC::LessThan, c, x),
            false => self.b.ins().fcmp(FloatCC::LessThan, x, c),
        };
        Some((pick_x, x, c))
    }

    fn math(&mut self, fun: MathFn, s: ScalarType, x: &[Value]) -> R<Value> {
        if !s.is_float() {
            return Ok(match fun {
                MathFn::Abs if s.is_signed() => {
                    let n = self.b.ins().ineg(x[0]);
                    let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x[0], 0);
                    self.b.ins().select(neg, n, x[0])
                }
                MathFn::Abs => x[0],
                MathFn::Min => self.imin_max(s, false, x[0], x[1]),
                MathFn::Max => self.imin_max(s, true, x[0], x[1]),
                MathFn::Clamp => {
                    let lo = self.imin_max(s, true, x[0], x[1]);
                    self.imin_max(s, false, lo, x[2])
                }
                MathFn::Sign => {
                    let (one, zero) = (self.int_const(s, 1), self.int_const(s, 0));
                    let pos = self.b.ins().icmp_imm_s(
                        if s.is_signed() {
                            IntCC::SignedGreaterThan
                        } else {
                            IntCC::UnsignedGreaterThan
                        },
                        x[0],
                        0,
                    );
                    let r = self.b.ins().select(pos, one, zero);
                    if s.is_signed() {
                        let m1 = self.int_const(s, u64::MAX);
                        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x[0], 0);
                        self.b.ins().select(neg, m1, r)
                    } else {
                        r
                    }
                }
                f => return Err(format!("{} on integers", f.name())),
            });
        }
        let f64_ = s == ScalarType::F64;
        let fconst = |l: &mut Self, v: f64| {
            if f64_ {
                l.b.ins().f64const(v)
            } else {
                l.b.ins().f32const(v as f32)
            }
        };
        Ok(match fun {
            MathFn::Sqrt => self.b.ins().sqrt(x[0]),
            MathFn::Rsqrt => {
                let r = self.b.ins().sqrt(x[0]);
                let one = fconst(self, 1.0);
                self.b.ins().fdiv(one, r)
            }
            MathFn::Abs => self.b.ins().fabs(x[0]),
            MathFn::Floor => self.b.ins().floor(x[0]),
            MathFn::Ceil => self.b.ins().ceil(x[0]),
            MathFn::Trunc => self.b.ins().trunc(x[0]),
            MathFn::Fract => {
                let t = self.b.ins().trunc(x[0]);
                self.b.ins().fsub(x[0], t)
            }
            MathFn::Min => self.fmin_max(false, x[0], x[1]),
            MathFn::Max => self.fmin_max(true, x[0], x[1]),
            MathFn::Clamp => {
                let lo = self.fmin_max(true, x[0], x[1]);
                self.fmin_max(false, lo, x[2])
            }
            MathFn::Fma => self.b.ins().fma(x[0], x[1], x[2]),
            MathFn::Copysign => {
                let c = self.b.ins().fcopysign(x[0], x[1]);
                let a = self.b.ins().fabs(x[0]);
                let nan = self.b.ins().fcmp(FloatCC::Unordered, x[1], x[1]);
                self.b.ins().select(nan, a, c)
            }
            MathFn::IsNan => self.b.ins().fcmp(FloatCC::Unordered, x[0], x[0]),
            MathFn::IsInf => {
                let a = self.b.ins().fabs(x[0]);
                let inf = fconst(self, f64::INFINITY);
                self.b.ins().fcmp(FloatCC::Equal, a, inf)
            }
            MathFn::Sign => {
                let (one, m1, zero) = (fconst(self, 1.0), fconst(self, -1.0), fconst(self, 0.0));
                let pos = self.b.ins().fcmp(FloatCC::GreaterThan, x[0], zero);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x[0], zero);
                let r = self.b.ins().select(pos, one, x[0]);
                self.b.ins().select(neg, m1, r)
            }
            f => {
                let name = crate::mathlib::import_name(f, f64_)
                    .ok_or_else(|| format!("math function {}", f.name()))?;
                self.call_import(name, x)
            }
        })
    }

    fn atomic(
        &mut self,
        op: AtomicOp,
        s: ScalarType,
        addr: Value,
        v: Value,
        compare: Option<Value>,
    ) -> R<Value> {
        let ty = clty(s);
        if s == ScalarType::F32 {
            let vi = self.b.ins().bitcast(types::I32, MemFlagsData::new(), v);
            let old = match op {
                AtomicOp::Exchange => {
                    self.b
                        .ins()
                        .atomic_rmw(types::I32, mem_flags(), AtomicRmwOp::Xchg, addr, vi)
                }
                AtomicOp::Add => {
                    let start = self.b.ins().atomic_load(types::I32, mem_flags(), addr);
                    let (lp, done) = (self.b.create_block(), self.b.create_block());
                    let cur = self.b.append_block_param(lp, types::I32);
                    let res = self.b.append_block_param(done, types::I32);
                    self.b.ins().jump(lp, &[BlockArg::Value(start)]);
                    self.b.switch_to_block(lp);
                    let f = self.b.ins().bitcast(types::F32, MemFlagsData::new(), cur);
                    let sum = self.b.ins().fadd(f, v);
                    let bits = self.b.ins().bitcast(types::I32, MemFlagsData::new(), sum);
                    let prev = self.b.ins().atomic_cas(mem_flags(), addr, cur, bits);
                    let ok = self.b.ins().icmp(IntCC::Equal, prev, cur);
                    self.b.ins().brif(
                        ok,
                        done,
                        &[BlockArg::Value(prev)],
                        lp,
                        &[BlockArg::Value(prev)],
                    );
                    self.b.switch_to_block(done);
                    res
                }
                _ => return Err(format!("atomic {op:?} on f32")),
            };
            return Ok(self.b.ins().bitcast(types::F32, MemFlagsData::new(), old));
        }
        let signed = s.is_signed();
        let rmw = match op {
            AtomicOp::Add => AtomicRmwOp::Add,
            AtomicOp::Sub => AtomicRmwOp::Sub,
            AtomicOp::Min if signed => AtomicRmwOp::Smin,
            AtomicOp::Min => AtomicRmwOp::Umin,
            AtomicOp::Max if signed => AtomicRmwOp::Smax,
            AtomicOp::Max => AtomicRmwOp::Umax,
            AtomicOp::And => AtomicRmwOp::And,
            AtomicOp::Or => AtomicRmwOp::Or,
            AtomicOp::Xor => AtomicRmwOp::Xor,
            AtomicOp::Exchange => AtomicRmwOp::Xchg,
            AtomicOp::CompareExchange => {
                let c = compare.ok_or("compare-exchange without a compare value")?;
                return Ok(self.b.ins().atomic_cas(mem_flags(), addr, c, v));
            }
        };
        Ok(self.b.ins().atomic_rmw(ty, mem_flags(), rmw, addr, v))
    }
}

/// Size of an array local, or why the CPU backend cannot hold it.
fn array_bytes(l: &LocalDecl) -> R<u32> {
    let Type::Array(e, n) = &l.ty else {
        return Err(format!("local `{}` is not an array", l.name));
    };
    if e.size() > MAX_ELEM_BYTES {
        return Err(format!("array local `{}` has {}-byte elements; the CPU backend allows at most {MAX_ELEM_BYTES}", l.name, e.size()));
    }
    match e.size().checked_mul(*n) {
        Some(b) if b <= MAX_ARRAY_BYTES => Ok(b),
        _ => Err(format!(
            "array local `{}` ([{e}; {n}]) is larger than the {MAX_ARRAY_BYTES} bytes the CPU backend allows per work item; use shared memory or a buffer",
            l.name
        )),
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

/// A counted loop's body without its exit test (its third statement, `if %b { break }`, as
/// [`loop_head`] and [`Lowerer::counted_loop`] match it).
fn without_exit_test(body: &Block) -> Block {
    let mut rest = body.clone();
    rest.0.remove(2);
    rest
}

/// For a loop body that opens as the IR builder's counted loops do (`%a = i; %b = %a >= END;
/// if %b { break }`), the exit test `%b`.
fn loop_head(fx: &FnCtx, body: &Block) -> Option<Handle> {
    let [Stmt::Eval(get), Stmt::Eval(test), Stmt::If {
        cond,
        accept,
        reject,
    }, ..] = &body.0[..]
    else {
        return None;
    };
    let ex = |h: &Handle| &fx.body.exprs[h.index()];
    let opens = matches!(ex(get), Expr::LocalGet(_))
        && matches!(ex(test), Expr::Binary { op: BinaryOp::Ge | BinaryOp::Gt, lhs, .. } if lhs == get)
        && cond == test
        && matches!(&accept.0[..], [Stmt::Break])
        && reject.0.is_empty();
    opens.then_some(*test)
}

/// True if `stmts` assign local `l` anywhere.
fn assigns(stmts: &[Stmt], l: LocalId) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::LocalSet { local, .. } | Stmt::LocalIndexSet { local, .. } => *local == l,
        Stmt::If { accept, reject, .. } => assigns(&accept.0, l) || assigns(&reject.0, l),
        Stmt::Loop { body, continuing } => assigns(&body.0, l) || assigns(&continuing.0, l),
        _ => false,
    })
}

/// The number of statements in `stmts`, nested ones included.
fn count_stmts(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .map(|s| {
            1 + match s {
                Stmt::If { accept, reject, .. } => count_stmts(&accept.0) + count_stmts(&reject.0),
                Stmt::Loop { body, continuing } => {
                    count_stmts(&body.0) + count_stmts(&continuing.0)
                }
                _ => 0,
            }
        })
        .sum()
}

/// True if the statement contains a `break` or `continue` that leaves it (not one that
/// belongs to a loop inside it).
fn escapes_loop(s: &Stmt) -> bool {
    match s {
        Stmt::Break | Stmt::Continue => true,
        Stmt::If { accept, reject, .. } => {
            accept.0.iter().any(escapes_loop) || reject.0.iter().any(escapes_loop)
        }
        _ => false,
    }
}

/// True when `stmts` hold a `continue` of their own loop (not one of a loop inside them).
fn has_continue(stmts: &[Stmt]) -> bool {
    stmts.iter().any(|s| match s {
        Stmt::Continue => true,
        Stmt::If { accept, reject, .. } => has_continue(&accept.0) || has_continue(&reject.0),
        _ => false,
    })
}
