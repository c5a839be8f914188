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

mod wide;

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

/// How a kernel runs in quads: which of its expressions and locals vary per work item.
pub(super) struct QuadPlan {
    varying_exprs: Vec<bool>,
    varying_locals: Vec<bool>,
    /// Per expression: a load of 8- or 16-bit integers whose only uses are casts to 32-bit
    /// types, which quads widen as they load.
    widened: Vec<bool>,
    prefix: Rc<PrefixFacts>,
}

/// Facts about the global id along x that hold for every work item of a group's quads up to
/// a count worked out once per call, so that in those quads the accesses and conditions
/// below need no test. A group of a launch over `n` items has all its quads there except the
/// group that holds item `n`.
pub(super) struct PrefixFacts {
    /// Per expression: `global_id(x)`.
    gid: Vec<bool>,
    /// Per expression: a condition true for every item of the prefix: `gid < b` (or `b >
    /// gid`) for a `b` in `bounds`, the literal `true`, or `&&` of those.
    holds: Vec<bool>,
    /// The bounds of the `gid < b` comparisons: `u32` literals, parameters, lengths, and
    /// `min` of those.
    bounds: Vec<Handle>,
    /// The memories loaded or stored at index `gid`: in the prefix, those accesses are in
    /// bounds.
    memories: Vec<Memory>,
}

impl PrefixFacts {
    /// The facts of `body`, a kernel of parameters `params`.
    fn of(body: &Body, params: &[Param]) -> PrefixFacts {
        let n = body.exprs.len();
        let (mut gid, mut holds, mut fixed) = (vec![false; n], vec![false; n], vec![false; n]);
        let (mut bounds, mut memories) = (Vec::new(), Vec::new());
        let u32_param = |i: u32| {
            params
                .get(i as usize)
                .is_some_and(|p| matches!(p.kind, ParamKind::Value(Type::Scalar(ScalarType::U32))))
        };
        for (h, e) in body.exprs.iter().enumerate() {
            match e {
                Expr::Builtin(Builtin::GlobalId(Axis::X)) => gid[h] = true,
                Expr::Literal(ScalarValue::U32(_)) | Expr::Len(_) => fixed[h] = true,
                Expr::Param(i) => fixed[h] = u32_param(*i),
                Expr::Math {
                    fun: MathFn::Min,
                    args,
                } => fixed[h] = args.iter().all(|a| fixed[a.index()]),
                Expr::Literal(ScalarValue::Bool(true)) => holds[h] = true,
                Expr::Binary {
                    op: op @ (BinaryOp::Lt | BinaryOp::Gt),
                    lhs,
                    rhs,
                } => {
                    // `gid < b` or `b > gid`.
                    let (id, bound) = match op {
                        BinaryOp::Lt => (lhs, rhs),
                        _ => (rhs, lhs),
                    };
                    if gid[id.index()] && fixed[bound.index()] {
                        holds[h] = true;
                        bounds.push(*bound);
                    }
                }
                Expr::Binary {
                    op: BinaryOp::And,
                    lhs,
                    rhs,
                } => holds[h] = holds[lhs.index()] && holds[rhs.index()],
                Expr::Load { memory, index } if gid[index.index()] => memories.push(*memory),
                _ => {}
            }
        }
        each_stmt(&body.block.0, &mut |s| {
            if let Stmt::Store { memory, index, .. } = s {
                if gid[index.index()] {
                    memories.push(*memory);
                }
            }
        });
        PrefixFacts {
            gid,
            holds,
            bounds,
            memories,
        }
    }

    /// True when a call is worth running in two versions: some fact exists, and `stmts` have
    /// no loop (whose trips would make the tests saved per quad a small part of its time and
    /// double a larger body).
    fn worth_it(&self, stmts: &[Stmt]) -> bool {
        let mut looped = false;
        each_stmt(stmts, &mut |s| looped |= matches!(s, Stmt::Loop { .. }));
        let any_fact = !self.bounds.is_empty() || !self.memories.is_empty();
        any_fact && !looped
    }
}

/// The vector type that holds a quad's lanes of a value of type `s`: for the 64-bit types,
/// one half.
fn vty(s: ScalarType) -> types::Type {
    match s {
        ScalarType::F32 => types::F32X4,
        ScalarType::F64 => types::F64X2,
        ScalarType::I64 | ScalarType::U64 => types::I64X2,
        _ => types::I32X4,
    }
}

/// True for the 64-bit types, whose four lanes a quad keeps in two vectors (see `wide`).
fn in_halves(s: ScalarType) -> bool {
    matches!(s, ScalarType::F64 | ScalarType::I64 | ScalarType::U64)
}

fn allowed(t: &Type) -> bool {
    matches!(
        t,
        Type::Scalar(
            ScalarType::F32
                | ScalarType::F64
                | ScalarType::I32
                | ScalarType::U32
                | ScalarType::I64
                | ScalarType::U64
                | ScalarType::Bool
        )
    )
}

/// True for the built-ins that differ between the work items of a quad.
fn varying_builtin(b: Builtin) -> bool {
    matches!(
        b,
        Builtin::GlobalId(Axis::X)
            | Builtin::LocalId(Axis::X)
            | Builtin::LocalIndex
            | Builtin::SubgroupId
    )
}

fn expr_ok(e: &Expr) -> bool {
    !matches!(
        e,
        Expr::LocalIndex { .. }
            | Expr::Atomic { .. }
            | Expr::Call { .. }
            | Expr::Compose { .. }
            | Expr::Extract { .. }
    )
}

/// True if `b` stores to a buffer.
fn stores(b: &Block) -> bool {
    b.0.iter().any(|s| match s {
        Stmt::Store { .. } => true,
        Stmt::If { accept, reject, .. } => stores(accept) || stores(reject),
        Stmt::Loop { body, continuing } => stores(body) || stores(continuing),
        _ => false,
    })
}

/// Finds which expressions and locals vary per work item over the whole kernel body, so a
/// value one run of a barrier kernel computes is known in the runs that read it. Marking too
/// much is always safe (the value is then kept per lane); marking too little is not.
struct Variance<'a> {
    body: &'a Body,
    exprs: Vec<bool>,
    locals: Vec<bool>,
    /// Per local, [`local_scopes`].
    scopes: Vec<Option<usize>>,
    changed: bool,
}

/// Numbers the blocks of a body in the order [`Variance::mark_locals`] visits them (the body
/// itself is 0) and records, per local, where it is accessed.
struct ScopeWalk<'a> {
    body: &'a Body,
    parents: Vec<usize>,
    /// Per local, the blocks it is accessed in directly.
    blocks: Vec<Vec<usize>>,
    /// Per (block, local): whether the first statement of the block that accesses the local
    /// (directly or in a nested block) assigns it directly.
    first_is_set: std::collections::HashMap<(usize, usize), bool>,
}

impl ScopeWalk<'_> {
    fn access(&mut self, path: &[usize], local: usize, set: bool) {
        let here = *path.last().expect("a block");
        self.blocks[local].push(here);
        for &b in path {
            self.first_is_set
                .entry((b, local))
                .or_insert(set && b == here);
        }
    }

    fn walk(&mut self, b: &Block, path: &mut Vec<usize>) {
        for s in &b.0 {
            match s {
                Stmt::LocalSet { local, .. } => self.access(path, local.0 as usize, true),
                Stmt::LocalIndexSet { local, .. } => self.access(path, local.0 as usize, false),
                Stmt::Eval(h) => match &self.body.exprs[h.index()] {
                    Expr::LocalGet(l) | Expr::LocalIndex { local: l, .. } => {
                        self.access(path, l.0 as usize, false)
                    }
                    _ => {}
                },
                Stmt::If { accept, reject, .. } => {
                    self.nested(accept, path);
                    self.nested(reject, path);
                }
                Stmt::Loop { body, continuing } => {
                    self.nested(body, path);
                    self.nested(continuing, path);
                }
                _ => {}
            }
        }
    }

    fn nested(&mut self, b: &Block, path: &mut Vec<usize>) {
        let id = self.parents.len();
        self.parents.push(*path.last().expect("a block"));
        path.push(id);
        self.walk(b, path);
        path.pop();
    }
}

/// Per local: the innermost block that holds every access to it, when the first statement
/// of that block to access it assigns it directly, so each time the block runs the local is
/// assigned before it is read; `None` otherwise. Control flow that varies outside that block
/// does not make the local vary: only work items running the block see it (a `for` counter
/// inside an `if i < n` stays the same for all four lanes).
fn local_scopes(body: &Body) -> Vec<Option<usize>> {
    let mut w = ScopeWalk {
        body,
        parents: vec![usize::MAX],
        blocks: vec![Vec::new(); body.locals.len()],
        first_is_set: Default::default(),
    };
    w.walk(&body.block, &mut vec![0]);
    let ancestors = |mut b: usize| {
        let mut chain = vec![b];
        while b != 0 {
            b = w.parents[b];
            chain.push(b);
        }
        chain.reverse();
        chain
    };
    w.blocks
        .iter()
        .enumerate()
        .map(|(local, blocks)| {
            let mut common = ancestors(*blocks.first()?);
            for b in &blocks[1..] {
                let chain = ancestors(*b);
                let same = common
                    .iter()
                    .zip(&chain)
                    .take_while(|(x, y)| x == y)
                    .count();
                common.truncate(same);
            }
            let scope = *common.last()?;
            (w.first_is_set.get(&(scope, local)) == Some(&true)).then_some(scope)
        })
        .collect()
}

impl Variance<'_> {
    fn mark_exprs(&mut self) {
        for (i, e) in self.body.exprs.iter().enumerate() {
            let v = match e {
                Expr::Builtin(b) => varying_builtin(*b),
                Expr::LocalGet(l) => self.locals[l.0 as usize],
                // Atomics return a different value to each work item; array elements and calls
                // are not followed.
                Expr::Atomic { .. }
                | Expr::Subgroup { .. }
                | Expr::LocalIndex { .. }
                | Expr::Call { .. } => true,
                e => operands(e).iter().any(|o| self.exprs[o.index()]),
            };
            if v && !self.exprs[i] {
                self.exprs[i] = true;
                self.changed = true;
            }
        }
    }

    fn set_local(&mut self, l: LocalId) {
        if !self.locals[l.0 as usize] {
            self.locals[l.0 as usize] = true;
            self.changed = true;
        }
    }

    /// Marks the locals `b` assigns a varying value, or assigns under control flow that
    /// differs between work items inside the local's scope ([`local_scopes`]). `path` holds
    /// the blocks from the body down to `b`, each with whether entering it makes control
    /// flow vary (an arm of an `if` on a varying condition, a loop that work items may leave
    /// at different times); `next` numbers the blocks as [`ScopeWalk`] does.
    fn mark_locals(&mut self, b: &Block, path: &mut Vec<(usize, bool)>, next: &mut usize) {
        for s in &b.0 {
            match s {
                Stmt::LocalSet { local, value } => {
                    let after = match self.scopes[local.0 as usize] {
                        Some(scope) => path.iter().position(|(b, _)| *b == scope).unwrap_or(0),
                        None => 0,
                    };
                    let ctl = path[after + 1..].iter().any(|(_, varies)| *varies);
                    if ctl || self.exprs[value.index()] {
                        self.set_local(*local)
                    }
                }
                Stmt::LocalIndexSet { local, .. } => self.set_local(*local),
                Stmt::If {
                    cond,
                    accept,
                    reject,
                } => {
                    let c = self.exprs[cond.index()];
                    self.mark_nested(accept, c, path, next);
                    self.mark_nested(reject, c, path, next);
                }
                Stmt::Loop { body, continuing } => {
                    let c = varying_exit(&self.exprs, body, false)
                        || varying_exit(&self.exprs, continuing, false);
                    self.mark_nested(body, c, path, next);
                    self.mark_nested(continuing, c, path, next);
                }
                _ => {}
            }
        }
    }

    fn mark_nested(
        &mut self,
        b: &Block,
        varies: bool,
        path: &mut Vec<(usize, bool)>,
        next: &mut usize,
    ) {
        *next += 1;
        path.push((*next, varies));
        self.mark_locals(b, path, next);
        path.pop();
    }
}

/// True if `b`, part of a loop, may make some work items leave an iteration (or the loop)
/// that others go on with: a `break`, `continue` or `return` under a condition that varies
/// (`varying_exprs`) per work item (`under`: `b` itself runs under one).
fn varying_exit(varying_exprs: &[bool], b: &Block, under: bool) -> bool {
    b.0.iter().any(|s| match s {
        Stmt::Break | Stmt::Continue | Stmt::Return(_) => under,
        Stmt::If {
            cond,
            accept,
            reject,
        } => {
            let u = under || varying_exprs[cond.index()];
            varying_exit(varying_exprs, accept, u) || varying_exit(varying_exprs, reject, u)
        }
        Stmt::Loop { body, continuing } => {
            varying_exit(varying_exprs, body, under)
                || varying_exit(varying_exprs, continuing, under)
        }
        _ => false,
    })
}

/// Which expressions and locals of kernel `k` vary per work item, or `None` when the kernel
/// never runs in quads: a kernel with group barriers that returns early (its work items that
/// returned are skipped one by one in every later run).
pub(super) fn quad_plan(k: &Kernel) -> Option<QuadPlan> {
    if k.has_group_barrier() && block_has_return(&k.body.block) {
        return None;
    }
    let mut v = Variance {
        body: &k.body,
        exprs: vec![false; k.body.exprs.len()],
        locals: vec![false; k.body.locals.len()],
        scopes: local_scopes(&k.body),
        changed: true,
    };
    while v.changed {
        v.changed = false;
        v.mark_exprs();
        v.mark_locals(&k.body.block, &mut vec![(0, false)], &mut 0);
    }
    Some(QuadPlan {
        varying_exprs: v.exprs,
        varying_locals: v.locals,
        widened: widened_loads(&k.body),
        prefix: Rc::new(PrefixFacts::of(&k.body, &k.params)),
    })
}

fn narrow(t: &Type) -> bool {
    matches!(
        t,
        Type::Scalar(ScalarType::I8 | ScalarType::U8 | ScalarType::I16 | ScalarType::U16)
    )
}

/// Per expression: a load (of any type) that no statement uses directly and that every other
/// expression uses only through a cast to a 32-bit type.
fn widened_loads(body: &Body) -> Vec<bool> {
    let mut ok: Vec<bool> = body
        .exprs
        .iter()
        .map(|e| matches!(e, Expr::Load { .. }))
        .collect();
    for e in &body.exprs {
        let cast32 = matches!(
            e,
            Expr::Cast {
                to: ScalarType::I32 | ScalarType::U32 | ScalarType::F32,
                ..
            }
        );
        if !cast32 {
            for o in operands(e) {
                ok[o.index()] = false;
            }
        }
    }
    each_stmt(&body.block.0, &mut |s| {
        let direct: Vec<Handle> = match s {
            Stmt::LocalSet { value, .. } => vec![*value],
            Stmt::LocalIndexSet { index, value, .. } | Stmt::Store { index, value, .. } => {
                vec![*index, *value]
            }
            Stmt::If { cond, .. } => vec![*cond],
            Stmt::Return(Some(h)) => vec![*h],
            _ => Vec::new(),
        };
        for h in direct {
            ok[h.index()] = false;
        }
    });
    ok
}

/// False when `stmts` hold a statement or expression without a quad form.
fn control_fits(body: &Body, stmts: &[Stmt]) -> bool {
    stmts.iter().all(|s| match s {
        Stmt::Eval(h) => expr_ok(&body.exprs[h.index()]),
        Stmt::Store { .. }
        | Stmt::LocalSet { .. }
        | Stmt::Source(_)
        | Stmt::Return(None)
        | Stmt::Break
        | Stmt::Continue => true,
        Stmt::If { accept, reject, .. } => {
            control_fits(body, &accept.0) && control_fits(body, &reject.0)
        }
        Stmt::Loop {
            body: b,
            continuing,
        } => control_fits(body, &b.0) && control_fits(body, &continuing.0),
        _ => false,
    })
}

/// Quads the prefix copy of a short body runs per trip of the quad loop.
const UNROLL: u32 = 4;

/// Whether a body is short enough (in statements) that [`UNROLL`] more copies of it pay.
fn unrolls(stmts: &[Stmt]) -> bool {
    let mut count = 0;
    each_stmt(stmts, &mut |_| count += 1);
    count <= 48
}

/// Calls `f` on every statement of `stmts`, nested ones included.
pub(super) fn each_stmt(stmts: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    for s in stmts {
        f(s);
        match s {
            Stmt::If { accept, reject, .. } => {
                each_stmt(&accept.0, f);
                each_stmt(&reject.0, f);
            }
            Stmt::Loop { body, continuing } => {
                each_stmt(&body.0, f);
                each_stmt(&continuing.0, f);
            }
            _ => {}
        }
    }
}

/// A 32-bit value that a quad keeps in a vector whose lanes match its memory layout.
fn four_bytes(t: &Type) -> bool {
    matches!(
        t,
        Type::Scalar(ScalarType::F32 | ScalarType::I32 | ScalarType::U32)
    )
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
        each_stmt(stmts, &mut |s| match s {
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
        let more = self.b.ins().icmp(IntCC::UnsignedLessThanOrEqual, q4, limit);
        self.b.ins().brif(more, body, &[], exit, &[]);
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

    /// The vector form of an operand (uniform values are splatted; `bool` becomes a mask).
    fn lanes_of(&mut self, fx: &mut FnCtx, qs: &QuadState, h: Handle) -> R<Value> {
        if let Some(l) = qs.lanes[h.index()] {
            return match l.hi {
                Some(_) => Err(format!("64-bit lanes of %{} read as one vector", h.0)),
                None => Ok(l.v),
            };
        }
        let s = fx.types[h.index()]
            .as_scalar()
            .ok_or("non-scalar in a vectorized body")?;
        let v = self.get(fx, h)?[0];
        Ok(if s == ScalarType::Bool {
            let ones = self.b.ins().iconst(types::I32, -1);
            let zero = self.iconst32(0);
            let m = self.b.ins().select(v, ones, zero);
            self.b.ins().splat(types::I32X4, m)
        } else {
            self.b.ins().splat(vty(s), v)
        })
    }

    /// Applies a scalar lowering to each lane of `args` (varying values of the given types);
    /// returns the lanes of its results, of type `out`.
    fn per_lane(
        &mut self,
        args: &[(Lanes, ScalarType)],
        out: ScalarType,
        mut f: impl FnMut(&mut Self, &[Value]) -> R<Value>,
    ) -> R<Lanes> {
        let zero = self.iconst32(0);
        let mut accs = if in_halves(out) {
            let z = self.zero(out);
            let half = self.b.ins().splat(vty(out), z);
            vec![half, half]
        } else {
            let acc = self.b.ins().splat(types::I32X4, zero);
            match out {
                ScalarType::F32 => {
                    vec![self.b.ins().bitcast(types::F32X4, mem_flags_little(), acc)]
                }
                _ => vec![acc],
            }
        };
        for k in 0..4u8 {
            let xs: Vec<Value> = args
                .iter()
                .map(|(l, s)| {
                    let x = self.lane(*l, k);
                    if *s == ScalarType::Bool {
                        self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0)
                    } else {
                        x
                    }
                })
                .collect();
            let mut r = f(self, &xs)?;
            if out == ScalarType::Bool {
                let ones = self.b.ins().iconst(types::I32, -1);
                r = self.b.ins().select(r, ones, zero);
            }
            // Two lanes per half of a 64-bit value.
            let (acc, at) = match accs.len() {
                2 => (&mut accs[k as usize / 2], k % 2),
                _ => (&mut accs[0], k),
            };
            *acc = self.b.ins().insertlane(*acc, r, at);
        }
        Ok(match accs[..] {
            [lo, hi] => Lanes::halves(lo, hi),
            _ => Lanes::varying(accs[0]),
        })
    }

    /// Lane `k` (0 to 3) of a varying value.
    fn lane(&mut self, l: Lanes, k: u8) -> Value {
        match l.hi {
            Some(hi) if k >= 2 => self.b.ins().extractlane(hi, k - 2),
            _ => self.b.ins().extractlane(l.v, k),
        }
    }

    /// For a built-in that varies per lane: the first lane's value (the lanes are that plus
    /// 0..3).
    pub(super) fn varying_builtin_first(&mut self, qs: &QuadState, b: Builtin) -> Option<Value> {
        self.varying_builtin(qs, b).and_then(|l| l.first)
    }

    fn varying_builtin(&mut self, qs: &QuadState, b: Builtin) -> Option<Lanes> {
        let first = match b {
            Builtin::GlobalId(Axis::X) => self.b.ins().iadd(self.gbase[0], self.lid[0]),
            Builtin::LocalId(Axis::X) => self.lid[0],
            Builtin::LocalIndex | Builtin::SubgroupId => qs.first_item,
            _ => return None,
        };
        let splat = self.b.ins().splat(types::I32X4, first);
        Some(Lanes {
            hi: None,
            v: self.b.ins().iadd(splat, qs.iota),
            first: Some(first),
            first_if: None,
        })
    }

    fn quad_eval(&mut self, fx: &mut FnCtx, qs: &mut QuadState, h: Handle) -> R<()> {
        let e = fx.body.exprs[h.index()].clone();
        if let Expr::LocalGet(l) = e {
            if let Some(var) = qs.locals[l.0 as usize] {
                qs.lanes[h.index()] = Some(self.read_vars(var));
                return Ok(());
            }
        }
        if let Expr::Builtin(b) = e {
            if let Some(l) = self.varying_builtin(qs, b) {
                qs.lanes[h.index()] = Some(l);
                return Ok(());
            }
        }
        let varying = operands(&e).iter().any(|o| qs.lanes[o.index()].is_some());
        if !varying {
            let v = self.expr(fx, h)?;
            fx.vals[h.index()] = Some(v);
            return Ok(());
        }
        let ty = fx.types[h.index()]
            .as_scalar()
            .ok_or("non-scalar in a vectorized body")?;
        let lanes = match e {
            Expr::Load { memory, index } => {
                // A guard proves the index of every lane only when every lane is active; in
                // the prefix, an index `global_id(x)` is in bounds in every lane.
                let proven = (fx.in_bounds.load(h) && qs.all_active())
                    || qs.prefix.as_ref().is_some_and(|p| p.gid[index.index()])
                    || fx.loop_proven.contains(&(memory, index));
                let wide = self.proven_index(fx, Some(qs), memory, index)?;
                self.quad_load(qs, memory, index, proven, wide)?
            }
            _ if Self::involves_wide(fx, &e, ty) => self.quad_eval_wide(fx, qs, &e, ty)?,
            Expr::Binary { op, lhs, rhs } => {
                let s = fx.types[lhs.index()]
                    .as_scalar()
                    .ok_or("non-scalar operand")?;
                let first = match (op, qs.lanes[lhs.index()], qs.lanes[rhs.index()]) {
                    (BinaryOp::Add, Some(Lanes { first: Some(f), .. }), None) => {
                        let r = self.get(fx, rhs)?[0];
                        Some(self.b.ins().iadd(f, r))
                    }
                    (BinaryOp::Add, None, Some(Lanes { first: Some(f), .. })) => {
                        let l = self.get(fx, lhs)?[0];
                        Some(self.b.ins().iadd(l, f))
                    }
                    (BinaryOp::Sub, Some(Lanes { first: Some(f), .. }), None) => {
                        let r = self.get(fx, rhs)?[0];
                        Some(self.b.ins().isub(f, r))
                    }
                    _ => None,
                };
                qs.all_true[h.index()] = if op == BinaryOp::And && s == ScalarType::Bool {
                    match (
                        self.all_true_of(fx, qs, lhs)?,
                        self.all_true_of(fx, qs, rhs)?,
                    ) {
                        (Some(l), Some(r)) => Some(self.b.ins().band(l, r)),
                        _ => None,
                    }
                } else {
                    self.all_below(fx, qs, op, s, lhs, rhs)?
                };
                let v = match (op, s, qs.lanes[rhs.index()]) {
                    (BinaryOp::Shl | BinaryOp::Shr, ScalarType::I32 | ScalarType::U32, None) => {
                        let a = self.lanes_of(fx, qs, lhs)?;
                        let amount = self.get(fx, rhs)?[0];
                        self.shift(op, s, a, amount)
                    }
                    _ => {
                        let (a, b) = (self.lanes_of(fx, qs, lhs)?, self.lanes_of(fx, qs, rhs)?);
                        self.vbinary(op, s, a, b)?
                    }
                };
                Lanes {
                    hi: None,
                    v,
                    first: if s.is_int() { first } else { None },
                    first_if: None,
                }
            }
            Expr::Unary { op, arg } => {
                let a = self.lanes_of(fx, qs, arg)?;
                let v = match op {
                    UnaryOp::Neg if ty == ScalarType::F32 => self.b.ins().fneg(a),
                    UnaryOp::Neg => self.b.ins().ineg(a),
                    UnaryOp::Not => self.b.ins().bnot(a),
                };
                Lanes::varying(v)
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let (a, b) = (
                    self.lanes_of(fx, qs, accept)?,
                    self.lanes_of(fx, qs, reject)?,
                );
                let literal = |h: Handle| match fx.body.exprs[h.index()] {
                    Expr::Literal(ScalarValue::U32(v)) => Some(v),
                    Expr::Literal(ScalarValue::I32(v)) => Some(v as u32),
                    _ => None,
                };
                let v = match qs.lanes[cond.index()] {
                    // `select(c, all ones, 0)` is the lane mask itself.
                    Some(m) if literal(accept) == Some(u32::MAX) && literal(reject) == Some(0) => {
                        m.v
                    }
                    Some(m) => {
                        let mask = self.mask_for(m.v, vty(ty));
                        self.b.ins().bitselect(mask, a, b)
                    }
                    None => {
                        let c = self.get(fx, cond)?[0];
                        self.b.ins().select(c, a, b)
                    }
                };
                let first_if = match (qs.lanes[accept.index()].and_then(|l| l.first), ty.is_int()) {
                    (Some(f), true) => self.all_true_of(fx, qs, cond)?.map(|c| (c, f)),
                    _ => None,
                };
                Lanes {
                    hi: None,
                    v,
                    first: None,
                    first_if,
                }
            }
            Expr::Cast { arg, to } => {
                let from = fx.types[arg.index()].as_scalar().ok_or("non-scalar cast")?;
                let a = self.lanes_of(fx, qs, arg)?;
                let same_bits = matches!(
                    (from, to),
                    (ScalarType::I32, ScalarType::U32) | (ScalarType::U32, ScalarType::I32)
                );
                Lanes {
                    hi: None,
                    v: self.vcast(a, from, to)?,
                    first: qs.lanes[arg.index()].and_then(|l| l.first.filter(|_| same_bits)),
                    first_if: None,
                }
            }
            Expr::Bitcast { arg, .. } => {
                let a = self.lanes_of(fx, qs, arg)?;
                let v = match self.b.func.dfg.value_type(a) == vty(ty) {
                    true => a,
                    false => self.b.ins().bitcast(vty(ty), mem_flags_little(), a),
                };
                Lanes::varying(v)
            }
            Expr::Math { fun, args } => {
                let s = fx.types[args[0].index()]
                    .as_scalar()
                    .ok_or("non-scalar math")?;
                let vs: Vec<(Value, ScalarType)> = args
                    .iter()
                    .map(|a| Ok((self.lanes_of(fx, qs, *a)?, s)))
                    .collect::<R<_>>()?;
                Lanes {
                    hi: None,
                    v: self.vmath(fun, s, ty, &vs)?,
                    first: None,
                    first_if: None,
                }
            }
            // Subgroups have one lane on the CPU: each work item is its own subgroup.
            Expr::Subgroup { op, arg, .. } => {
                let from = fx.types[arg.index()]
                    .as_scalar()
                    .ok_or("non-scalar subgroup operand")?;
                let a = self.lanes_of(fx, qs, arg)?;
                Lanes::varying(match op {
                    SubgroupOp::Ballot => self.vcast(a, from, ty)?,
                    SubgroupOp::ExclusiveAdd => {
                        let z = self.zero(ty);
                        self.b.ins().splat(vty(ty), z)
                    }
                    _ => a,
                })
            }
            other => return Err(format!("expression {other:?} in a vectorized body")),
        };
        qs.lanes[h.index()] = Some(lanes);
        Ok(())
    }

    /// For `index < bound` or `index <= bound` (either way round) with a contiguous 32-bit
    /// `index` and a uniform `bound`: a scalar true when the comparison holds in all four
    /// lanes, worked out on the first lane in 64 bits so a wrapping index never passes.
    fn all_below(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        op: BinaryOp,
        s: ScalarType,
        lhs: Handle,
        rhs: Handle,
    ) -> R<Option<Value>> {
        let (l, r) = (qs.lanes[lhs.index()], qs.lanes[rhs.index()]);
        let (first, bound, cc) = match (op, l, r) {
            (BinaryOp::Lt, Some(Lanes { first: Some(f), .. }), None) => {
                (f, rhs, IntCC::SignedLessThan)
            }
            (BinaryOp::Le, Some(Lanes { first: Some(f), .. }), None) => {
                (f, rhs, IntCC::SignedLessThanOrEqual)
            }
            (BinaryOp::Gt, None, Some(Lanes { first: Some(f), .. })) => {
                (f, lhs, IntCC::SignedLessThan)
            }
            (BinaryOp::Ge, None, Some(Lanes { first: Some(f), .. })) => {
                (f, lhs, IntCC::SignedLessThanOrEqual)
            }
            _ => return Ok(None),
        };
        if !matches!(s, ScalarType::I32 | ScalarType::U32) {
            return Ok(None);
        }
        let b = self.get(fx, bound)?[0];
        let (last, b) = if s == ScalarType::I32 {
            (
                self.b.ins().sextend(types::I64, first),
                self.b.ins().sextend(types::I64, b),
            )
        } else {
            (
                self.b.ins().uextend(types::I64, first),
                self.b.ins().uextend(types::I64, b),
            )
        };
        let last = self.b.ins().iadd_imm_s(last, 3);
        Ok(Some(self.b.ins().icmp(cc, last, b)))
    }

    /// For a `bool` operand: a scalar true when it holds in all four lanes (the value itself
    /// when it is uniform), if one is known.
    fn all_true_of(&mut self, fx: &mut FnCtx, qs: &QuadState, h: Handle) -> R<Option<Value>> {
        Ok(match qs.lanes[h.index()] {
            None => Some(self.get(fx, h)?[0]),
            Some(_) => qs.all_true[h.index()],
        })
    }

    /// The first lane of a varying index when its four lanes are contiguous, with the scalar
    /// condition under which they are (`None`: always); `None` when not known to be.
    fn contiguous(idx: Option<Lanes>) -> Option<(Value, Option<Value>)> {
        let idx = idx?;
        match (idx.first, idx.first_if) {
            (Some(f), _) => Some((f, None)),
            (None, Some((c, f))) => Some((f, Some(c))),
            (None, None) => None,
        }
    }

    /// The lane mask `m` (i32x4) in the vector type `to`, for `bitselect`.
    fn mask_for(&mut self, m: Value, to: types::Type) -> Value {
        if to == types::F32X4 {
            self.b.ins().bitcast(types::F32X4, mem_flags_little(), m)
        } else {
            m
        }
    }

    /// Per lane, `a` where lane mask `m` (i32x4) is set and `b` elsewhere (`a` and `b` of one
    /// type).
    fn blend(&mut self, m: Value, a: Lanes, b: Lanes) -> Lanes {
        match (a.hi, b.hi) {
            (Some(a_hi), Some(b_hi)) => {
                let (m_lo, m_hi) = self.wide_masks(m, self.b.func.dfg.value_type(a.v));
                let lo = self.b.ins().bitselect(m_lo, a.v, b.v);
                Lanes::halves(lo, self.b.ins().bitselect(m_hi, a_hi, b_hi))
            }
            _ => {
                let mask = self.mask_for(m, self.b.func.dfg.value_type(a.v));
                Lanes::varying(self.b.ins().bitselect(mask, a.v, b.v))
            }
        }
    }

    /// The lanes a varying local's variables hold.
    fn read_vars(&mut self, var: LaneVars) -> Lanes {
        let v = self.b.use_var(var.v);
        match var.hi {
            Some(hi) => Lanes::halves(v, self.b.use_var(hi)),
            None => Lanes::varying(v),
        }
    }

    fn vbinary(&mut self, op: BinaryOp, s: ScalarType, a: Value, b: Value) -> R<Value> {
        if s == ScalarType::F32 {
            if let Some(v) = self.float_binary(op, a, b) {
                return Ok(v);
            }
            let args = [(Lanes::varying(a), s), (Lanes::varying(b), s)];
            return Ok(self
                .per_lane(&args, s, |l, x| l.binary(op, s, x[0], x[1]))?
                .v);
        }
        if let Some(v) = self.int_binary(op, s, a, b) {
            return Ok(v);
        }
        let out = if op.is_compare() { ScalarType::Bool } else { s };
        let args = [(Lanes::varying(a), s), (Lanes::varying(b), s)];
        Ok(self
            .per_lane(&args, out, |l, x| l.binary(op, s, x[0], x[1]))?
            .v)
    }

    /// A shift of integer vector `a` (of type `s`) by the one amount `amount`: one vector
    /// shift, which takes the amount modulo the lane width, as the IR does.
    fn shift(&mut self, op: BinaryOp, s: ScalarType, a: Value, amount: Value) -> Value {
        match op {
            BinaryOp::Shl => self.b.ins().ishl(a, amount),
            _ if s.is_signed() => self.b.ins().sshr(a, amount),
            _ => self.b.ins().ushr(a, amount),
        }
    }

    /// `op` on integer or lane-mask vectors of type `s` (i32x4, i64x2) where it has a vector
    /// instruction: arithmetic gives the operands' type, a comparison a lane mask of the same
    /// lane width. `None` for the other operations.
    fn int_binary(&mut self, op: BinaryOp, s: ScalarType, a: Value, b: Value) -> Option<Value> {
        let signed = s.is_signed();
        let cc = |sc: IntCC, uc: IntCC| if signed { sc } else { uc };
        Some(match op {
            BinaryOp::Add => self.b.ins().iadd(a, b),
            BinaryOp::Sub => self.b.ins().isub(a, b),
            BinaryOp::Mul => self.b.ins().imul(a, b),
            BinaryOp::And => self.b.ins().band(a, b),
            BinaryOp::Or => self.b.ins().bor(a, b),
            BinaryOp::Xor => self.b.ins().bxor(a, b),
            BinaryOp::Eq => self.b.ins().icmp(IntCC::Equal, a, b),
            BinaryOp::Ne => self.b.ins().icmp(IntCC::NotEqual, a, b),
            BinaryOp::Lt if s != ScalarType::Bool => {
                self.b
                    .ins()
                    .icmp(cc(IntCC::SignedLessThan, IntCC::UnsignedLessThan), a, b)
            }
            BinaryOp::Le if s != ScalarType::Bool => self.b.ins().icmp(
                cc(IntCC::SignedLessThanOrEqual, IntCC::UnsignedLessThanOrEqual),
                a,
                b,
            ),
            BinaryOp::Gt if s != ScalarType::Bool => self.b.ins().icmp(
                cc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan),
                a,
                b,
            ),
            BinaryOp::Ge if s != ScalarType::Bool => self.b.ins().icmp(
                cc(
                    IntCC::SignedGreaterThanOrEqual,
                    IntCC::UnsignedGreaterThanOrEqual,
                ),
                a,
                b,
            ),
            _ => return None,
        })
    }

    /// `op` on float vectors (f32x4, f64x2) where it has a vector instruction: arithmetic
    /// gives the operands' type, a comparison a lane mask of the same lane width. `None` for
    /// the other operations.
    fn float_binary(&mut self, op: BinaryOp, a: Value, b: Value) -> Option<Value> {
        let cc = match op {
            BinaryOp::Eq => FloatCC::Equal,
            BinaryOp::Ne => FloatCC::NotEqual,
            BinaryOp::Lt => FloatCC::LessThan,
            BinaryOp::Le => FloatCC::LessThanOrEqual,
            BinaryOp::Gt => FloatCC::GreaterThan,
            BinaryOp::Ge => FloatCC::GreaterThanOrEqual,
            BinaryOp::Add => return Some(self.b.ins().fadd(a, b)),
            BinaryOp::Sub => return Some(self.b.ins().fsub(a, b)),
            BinaryOp::Mul => return Some(self.b.ins().fmul(a, b)),
            BinaryOp::Div => return Some(self.b.ins().fdiv(a, b)),
            _ => return None,
        };
        Some(self.b.ins().fcmp(cc, a, b))
    }

    fn vcast(&mut self, a: Value, from: ScalarType, to: ScalarType) -> R<Value> {
        use ScalarType::*;
        Ok(match (from, to) {
            _ if from == to => a,
            (I32, U32) | (U32, I32) => a,
            // Narrow loads arrive widened (zero- or sign-extended as their type says).
            (I8 | U8 | I16 | U16, I32 | U32) => a,
            (I8 | U8 | I16 | U16, F32) => self.b.ins().fcvt_from_sint(types::F32X4, a),
            (F32, I32) => self.b.ins().fcvt_to_sint_sat(types::I32X4, a),
            (I32, F32) => self.b.ins().fcvt_from_sint(types::F32X4, a),
            (Bool, I32 | U32) => {
                let one = self.iconst32(1);
                let ones = self.b.ins().splat(types::I32X4, one);
                self.b.ins().band(a, ones)
            }
            (I32 | U32, Bool) => {
                let zero = self.iconst32(0);
                let z = self.b.ins().splat(types::I32X4, zero);
                self.b.ins().icmp(IntCC::NotEqual, a, z)
            }
            _ => {
                self.per_lane(&[(Lanes::varying(a), from)], to, |l, x| {
                    Ok(l.cast(x[0], from, to))
                })?
                .v
            }
        })
    }

    fn vmath(
        &mut self,
        fun: MathFn,
        s: ScalarType,
        out: ScalarType,
        args: &[(Value, ScalarType)],
    ) -> R<Value> {
        if s == ScalarType::F32 {
            let xs: Vec<Value> = args.iter().map(|a| a.0).collect();
            if let Some(v) = self.float_math(fun, &xs) {
                return Ok(v);
            }
            if fun == MathFn::IsNan {
                return Ok(self.b.ins().fcmp(FloatCC::Unordered, xs[0], xs[0]));
            }
        }
        if matches!(s, ScalarType::I32 | ScalarType::U32) {
            let xs: Vec<Value> = args.iter().map(|a| a.0).collect();
            if let Some(v) = self.int_math(fun, s, &xs) {
                return Ok(v);
            }
        }
        let lanes: Vec<(Lanes, ScalarType)> =
            args.iter().map(|(v, s)| (Lanes::varying(*v), *s)).collect();
        Ok(self.per_lane(&lanes, out, |l, x| l.math(fun, s, x))?.v)
    }

    /// The math functions that have vector instructions for integer vectors of type `s`
    /// (i32x4, i64x2) and give a vector of the same type: `None` for the others.
    fn int_math(&mut self, fun: MathFn, s: ScalarType, xs: &[Value]) -> Option<Value> {
        let signed = s.is_signed();
        let mut min_max = |max: bool, x: Value, y: Value| match (max, signed) {
            (true, true) => self.b.ins().smax(x, y),
            (true, false) => self.b.ins().umax(x, y),
            (false, true) => self.b.ins().smin(x, y),
            (false, false) => self.b.ins().umin(x, y),
        };
        Some(match fun {
            MathFn::Min | MathFn::Max => min_max(fun == MathFn::Max, xs[0], xs[1]),
            MathFn::Clamp => {
                let low = min_max(true, xs[0], xs[1]);
                min_max(false, low, xs[2])
            }
            // Wraps: `abs(MIN) = MIN`, as the IR says.
            MathFn::Abs if signed => self.b.ins().iabs(xs[0]),
            MathFn::Abs => xs[0],
            _ => return None,
        })
    }

    /// The math functions that have vector instructions for float vectors (f32x4, f64x2) and
    /// give a vector of the same type: `None` for the others.
    fn float_math(&mut self, fun: MathFn, xs: &[Value]) -> Option<Value> {
        let x = xs[0];
        Some(match fun {
            MathFn::Sqrt => self.b.ins().sqrt(x),
            MathFn::Abs => self.b.ins().fabs(x),
            MathFn::Floor => self.b.ins().floor(x),
            MathFn::Ceil => self.b.ins().ceil(x),
            MathFn::Trunc => self.b.ins().trunc(x),
            MathFn::Min | MathFn::Max => self.min_max(fun == MathFn::Max, x, xs[1]),
            // `min(max(x, lo), hi)`, as the IR defines it.
            MathFn::Clamp => {
                let low = self.min_max(true, x, xs[1]);
                self.min_max(false, low, xs[2])
            }
            _ => return None,
        })
    }

    /// The maximum (`max`) or minimum of float vectors `x` and `y` per lane with the IR's NaN
    /// rule: when one is NaN, the other.
    fn min_max(&mut self, max: bool, x: Value, y: Value) -> Value {
        let fty = self.b.func.dfg.value_type(x);
        if let Some((pick_x, x, c)) = self.literal_pick(max, x, y) {
            let pick_x = self.b.ins().bitcast(fty, mem_flags_little(), pick_x);
            return self.b.ins().bitselect(pick_x, x, c);
        }
        // A NaN operand takes the other's value (both NaN: y's), so that what follows sees
        // NaN only where both are.
        let lane_mask = |l: &mut Self, cc: FloatCC, a: Value, b: Value| {
            let m = l.b.ins().fcmp(cc, a, b);
            l.b.ins().bitcast(fty, mem_flags_little(), m)
        };
        let x_nan = lane_mask(self, FloatCC::Unordered, x, x);
        let x = self.b.ins().bitselect(x_nan, y, x);
        let y_nan = lane_mask(self, FloatCC::Unordered, y, y);
        let y = self.b.ins().bitselect(y_nan, x, y);
        // `a < b ? b : a` both ways round (one maxps/maxpd or minps/minpd each, which give
        // their second operand for equal ones): the two differ only for zeros of opposite
        // signs, where the `and` of the maxima is +0.0 and the `or` of the minima -0.0.
        let pick = |l: &mut Self, a: Value, b: Value| {
            let (lo, hi) = if max { (a, b) } else { (b, a) };
            let take_b = lane_mask(l, FloatCC::LessThan, lo, hi);
            l.b.ins().bitselect(take_b, b, a)
        };
        let (r1, r2) = (pick(self, x, y), pick(self, y, x));
        if max {
            self.b.ins().band(r1, r2)
        } else {
            self.b.ins().bor(r1, r2)
        }
    }

    /// A load of `m[index]` for each lane; `proven` when every lane's index is in bounds, and
    /// `wide` the contiguous index as [`Self::proven_index`] gives it.
    fn quad_load(
        &mut self,
        qs: &QuadState,
        m: Memory,
        index: Handle,
        proven: bool,
        wide: Option<(Value, i64)>,
    ) -> R<Lanes> {
        let idx = qs.lanes[index.index()].ok_or("varying load with a uniform index")?;
        let (base, len, elem) = self.memory(m)?;
        let elem = elem
            .as_scalar()
            .ok_or("vector load of non-scalar elements")?;
        // 8- and 16-bit integers arrive in 32-bit lanes, extended as their type says.
        let widen = narrow(&Type::Scalar(elem));
        let lane_ty = if widen { ScalarType::U32 } else { elem };
        let gather = |l: &mut Self| {
            l.per_lane(&[(idx, ScalarType::U32)], lane_ty, |l, x| {
                let check = if proven {
                    BoundsCheck::Proven
                } else {
                    BoundsCheck::Select
                };
                let (addr, _, _) = l.mem_elem(m, x[0], false, check)?;
                let v = l.b.ins().load(clty(elem), mem_flags(), addr, 0);
                Ok(match (widen, elem.is_signed()) {
                    (false, _) => v,
                    (true, true) => l.b.ins().sextend(types::I32, v),
                    (true, false) => l.b.ins().uextend(types::I32, v),
                })
            })
        };
        let Some((first, guard)) = Self::contiguous(Some(idx)) else {
            return gather(self);
        };
        if let Some((first, step)) = wide {
            return Ok(self.load_contiguous(elem, base, first, step));
        }
        let first64 = self.b.ins().uextend(types::I64, first);
        if proven && guard.is_none() {
            return Ok(self.load_contiguous(elem, base, first64, 0));
        }
        let last = self.b.ins().iadd_imm_s(first64, 3);
        let mut inb = self.b.ins().icmp(IntCC::UnsignedLessThan, last, len);
        if let Some(c) = guard {
            inb = self.b.ins().band(inb, c);
        }
        let (fast, slow, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        let out = self.b.append_block_param(done, vty(elem));
        let out_hi = in_halves(elem).then(|| self.b.append_block_param(done, vty(elem)));
        // Only quads that straddle the end of the memory (or whose guard fails) gather: the
        // gather goes out of the way of the fast path's straight line.
        self.b.set_cold_block(slow);
        self.b.ins().brif(inb, fast, &[], slow, &[]);
        self.b.switch_to_block(fast);
        let v = self.load_contiguous(elem, base, first64, 0);
        self.b.ins().jump(done, &block_args(v));
        self.b.switch_to_block(slow);
        let v = gather(self)?;
        self.b.ins().jump(done, &block_args(v));
        self.b.switch_to_block(done);
        Ok(Lanes {
            hi: out_hi,
            ..Lanes::varying(out)
        })
    }

    /// The four elements of type `elem` from index `first + step` (`first` 64-bit) of the
    /// memory at `base` on: one vector (8- and 16-bit integers widened to 32-bit lanes), or
    /// two halves of a 64-bit type.
    fn load_contiguous(&mut self, elem: ScalarType, base: Value, first: Value, step: i64) -> Lanes {
        let addr = self.element_addr(base, first, step, elem.size());
        if narrow(&Type::Scalar(elem)) {
            return Lanes::varying(self.load_widened(elem, addr));
        }
        let v = self.b.ins().load(vty(elem), vec_flags(), addr, 0);
        match in_halves(elem) {
            true => {
                let hi = self.b.ins().load(vty(elem), vec_flags(), addr, 16);
                Lanes::halves(v, hi)
            }
            false => Lanes::varying(v),
        }
    }

    /// Stores the four lanes of `v` (32-bit, or 64-bit in two halves) at index `first + step`
    /// (`first` 64-bit) of the memory at `base` on.
    fn store_contiguous(&mut self, base: Value, first: Value, step: i64, v: Lanes) {
        let size = if v.hi.is_some() { 8 } else { 4 };
        let addr = self.element_addr(base, first, step, size);
        self.b.ins().store(vec_flags(), v.v, addr, 0);
        if let Some(hi) = v.hi {
            self.b.ins().store(vec_flags(), hi, addr, 16);
        }
    }

    /// Four adjacent 8- or 16-bit integers at `addr`, extended to an i32x4.
    fn load_widened(&mut self, elem: ScalarType, addr: Value) -> Value {
        let (word, vector, lanes) = if elem.size() == 1 {
            (types::I32, types::I32X4, types::I8X16)
        } else {
            (types::I64, types::I64X2, types::I16X8)
        };
        let w = self.b.ins().load(word, vec_flags(), addr, 0);
        let v = self.b.ins().scalar_to_vector(vector, w);
        let mut v = self.b.ins().bitcast(lanes, mem_flags_little(), v);
        for _ in 0..(if elem.size() == 1 { 2 } else { 1 }) {
            v = if elem.is_signed() {
                self.b.ins().swiden_low(v)
            } else {
                self.b.ins().uwiden_low(v)
            };
        }
        v
    }

    fn quad_store(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        m: Memory,
        index: Handle,
        value: Handle,
    ) -> R<()> {
        let v = self.quad_value(fx, qs, value)?;
        let idx = self.lanes_of(fx, qs, index)?;
        // A guard (or, in the prefix, an index `global_id(x)`) proves the index of every lane;
        // the store needs no lane mask only when every lane is active.
        let in_prefix = qs.prefix.as_ref().is_some_and(|p| p.gid[index.index()]);
        let proven = (fx.in_bounds.store(m, index, value)
            || in_prefix
            || fx.loop_proven.contains(&(m, index)))
            && qs.all_active();
        if let (true, Some((first, None))) = (proven, Self::contiguous(qs.lanes[index.index()])) {
            let (base, _, _) = self.memory(m)?;
            let (first, step) = match self.proven_index(fx, Some(qs), m, index)? {
                Some(wide) => wide,
                None => (self.b.ins().uextend(types::I64, first), 0),
            };
            self.store_contiguous(base, first, step, v);
            return Ok(());
        }
        let live = self.live(qs);
        let (fast, slow, done) = (
            self.b.create_block(),
            self.b.create_block(),
            self.b.create_block(),
        );
        match Self::contiguous(qs.lanes[index.index()]) {
            Some((first, guard)) => {
                let (base, len, _) = self.memory(m)?;
                let first64 = self.b.ins().uextend(types::I64, first);
                let last = self.b.ins().iadd_imm_s(first64, 3);
                let mut inb = self.b.ins().icmp(IntCC::UnsignedLessThan, last, len);
                if let Some(c) = guard {
                    inb = self.b.ins().band(inb, c);
                }
                let ok = if qs.all_active() {
                    // With every lane active only a quad at the end of the memory stores
                    // lane by lane.
                    self.b.set_cold_block(slow);
                    inb
                } else {
                    let all = self.b.ins().vall_true(live);
                    self.b.ins().band(inb, all)
                };
                self.b.ins().brif(ok, fast, &[], slow, &[]);
                self.b.switch_to_block(fast);
                self.store_contiguous(base, first64, 0, v);
                self.b.ins().jump(done, &[]);
            }
            None => {
                self.b.ins().jump(slow, &[]);
                self.b.switch_to_block(fast);
                self.b.ins().jump(done, &[]);
            }
        }
        self.b.switch_to_block(slow);
        for k in 0..4u8 {
            let on = self.b.ins().extractlane(live, k);
            let on = self.b.ins().icmp_imm_s(IntCC::NotEqual, on, 0);
            let i = self.b.ins().extractlane(idx, k);
            let x = self.lane(v, k);
            let (addr, _, _) = self.mem_elem(m, i, true, BoundsCheck::Select)?;
            let addr = self.b.ins().select(on, addr, self.sink);
            self.b.ins().store(mem_flags(), x, addr, 0);
        }
        self.b.ins().jump(done, &[]);
        self.b.switch_to_block(done);
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

/// Flags of the 16-byte loads and stores of a quad: they cannot trap, but need not be aligned
/// (the `aligned` flag would let Cranelift fold them into SSE instructions that fault on
/// addresses that are not 16-byte aligned).
fn vec_flags() -> cranelift_codegen::ir::MemFlagsData {
    let mut f = cranelift_codegen::ir::MemFlagsData::new();
    f.set_notrap();
    f
}

fn mem_flags_little() -> cranelift_codegen::ir::MemFlagsData {
    let mut f = cranelift_codegen::ir::MemFlagsData::new();
    f.set_endianness(cranelift_codegen::ir::Endianness::Little);
    f
}
