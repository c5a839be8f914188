//! Queries: `ctx.from(&xs).map(..).filter(..).sum()`. A chain of element-wise stages is fused
//! into one element function; the terminal decides the kernels around it:
//!
//! * `to_vec` without a filter: one kernel writes every element.
//! * `to_vec` with a filter: a count per group, an exclusive scan of the counts on the host,
//!   then an ordered scatter (the output keeps the input order).
//! * reductions (`sum`, `fold`, `min`, ...): each group folds its chunk into one partial (four
//!   blocked accumulators, so the chains run in parallel while the order of `op` is kept), then
//!   one work item folds the partials; the grouped plan instead folds the partials with one
//!   group of work items, a few partials each. Extra memory is one value per group.
//! * `scan`, `sort`, `histogram`, `group_by` and `distinct`: see the `scan`, `sort`, `histogram`
//!   and `group` modules.
//!
//! Work distribution: a `map` to `to_vec` runs one element per work item in groups of `CHUNK`;
//! filters and reductions give each work item a contiguous chunk of `CHUNK` elements (fewer
//! on a device with a loop limit: `chunk_len`), which
//! fits the CPU backend (one tight loop per chunk) and fixes the reduction order for a given
//! input, so results are the same on every run.

use crate::buffer::Buffer;
use crate::context::Context;
use crate::error::{zeroed_host_vec, Error, Result};
use crate::plan_cache::{Fingerprint, Plan, PlanStep};
use crate::row::{IntoRow, Row};
use kiln_backend::{DeviceMemory, Grid, LaunchArg};
use kiln_ir::*;
use std::marker::PhantomData;
use std::sync::Arc;

mod group;
mod histogram;
mod scan;
mod sort;
pub use group::{Distinct, GroupBy};
pub use scan::Scan;
pub use sort::Sorted;

/// Elements per work item in the chunked plan (see [`chunk_len`]).
const CHUNK: u32 = 16384;
/// Elements per work item in the grouped plan.
const ITEM_CHUNK: u32 = 16;
/// Elements per work item of a map in the grouped plan (see [`Query::map_kernel`]).
const MAP_ITEMS: u32 = 4;
/// Independent accumulators per work item in reductions.
const LANES: u32 = 4;
/// Expressions of a filtering query's element function up to which the chunked plan runs it
/// on every element without branches ([`Query::predicated`]).
const PREDICATED_EXPRS: usize = 96;
/// Work items per group in the chunked plan's reductions whose `op` is commutative: they take
/// neighbouring elements, so the four of them load one or two 16-byte vectors (the CPU backend
/// runs them as vector lanes; PoCL and lavapipe vectorize across them too).
const QUAD: u32 = 4;
/// The number [`constants::user_code`] gives a user's combining function (a fold's or a
/// scan's `op`); a stage's closure takes its position among the query's stages.
const OP_CLOSURE: u32 = u32::MAX;
/// The number of a user's key function (`group_by`, `sort_by_key`).
const KEY_CLOSURE: u32 = u32::MAX - 1;
/// The number of a user's value function (`group_by(..).sum(..)`, `fold`, ...).
const VALUE_CLOSURE: u32 = u32::MAX - 2;
/// Largest input a query accepts.
pub const MAX_LEN: usize = i32::MAX as usize;

type MapFn<'a> = Box<dyn Fn(Vec<AnyVal>) -> Vec<AnyVal> + 'a>;
type FilterFn<'a> = Box<dyn Fn(Vec<AnyVal>) -> Val<bool> + 'a>;
type CombineFn<'b> = &'b dyn Fn(Vec<AnyVal>, Vec<AnyVal>) -> Vec<AnyVal>;
/// Turns each kept row into the values a reduction folds.
type ProjectFn<'b> = &'b dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>;
/// What a reduction folds: the identity, the combining function and the projection.
type FoldFns<'b> = (&'b [ScalarValue], CombineFn<'b>, ProjectFn<'b>);
/// A user's combining function, owned (a fold's or a scan's `op` on the row's columns).
type OwnedCombineFn<'a> = Box<dyn Fn(Vec<AnyVal>, Vec<AnyVal>) -> Vec<AnyVal> + 'a>;
/// One device allocation per column of a reduction's values.
type Columns = Vec<Arc<dyn DeviceMemory>>;
/// Whether a reduction must combine its elements in input order.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum Order {
    /// `op` may not be commutative (a user's `fold`): every partial covers a contiguous run.
    Kept,
    /// `op` is commutative (every built-in reduction), so work items may take interleaved
    /// elements; the result is still the same on every run of the same plan.
    Any,
}

/// Hands the values of element `i` of the input buffers to the sink (nothing when filtered out).
type ElementFn<'b> = &'b dyn Fn(&[Memory], Val<u32>, &mut dyn FnMut(Vec<AnyVal>));

enum Stage<'a> {
    Map(MapFn<'a>),
    Filter(FilterFn<'a>),
    Enumerate,
    Zip(usize),
}

impl Stage<'_> {
    fn name(&self) -> &'static str {
        match self {
            Stage::Map(_) => "map",
            Stage::Filter(_) => "filter",
            Stage::Enumerate => "enumerate",
            Stage::Zip(_) => "zip",
        }
    }
}

/// A lazy query over host slices; nothing runs until a terminal (`to_vec`, `sum`, ...).
pub struct Query<'a, T> {
    ctx: Context,
    len: usize,
    columns: Vec<(Column<'a>, ScalarType)>,
    base_columns: usize,
    stages: Vec<Stage<'a>>,
    error: Option<Error>,
    _t: PhantomData<fn() -> T>,
}

fn bytes_of<T: Scalar>(xs: &[T]) -> &[u8] {
    // SAFETY: kiln scalars are plain numbers (bool is one byte 0/1) without padding.
    unsafe { std::slice::from_raw_parts(xs.as_ptr() as *const u8, std::mem::size_of_val(xs)) }
}

fn bin(op: BinaryOp, a: &AnyVal, b: &AnyVal) -> AnyVal {
    let ty = if op.is_compare() {
        Type::Scalar(ScalarType::Bool)
    } else {
        a.ty.clone()
    };
    expr_dyn(
        Expr::Binary {
            op,
            lhs: a.handle(),
            rhs: b.handle(),
        },
        &[a, b],
        ty,
    )
}

fn math2(fun: MathFn, a: &AnyVal, b: &AnyVal) -> AnyVal {
    expr_dyn(
        Expr::Math {
            fun,
            args: vec![a.handle(), b.handle()],
        },
        &[a, b],
        a.ty.clone(),
    )
}

fn select_dyn(c: &AnyVal, a: &AnyVal, b: &AnyVal) -> AnyVal {
    expr_dyn(
        Expr::Select {
            cond: c.handle(),
            accept: a.handle(),
            reject: b.handle(),
        },
        &[c, a, b],
        a.ty.clone(),
    )
}

fn value_bytes(v: u32) -> LaunchArg<'static> {
    LaunchArg::Value(v.to_le_bytes().to_vec())
}

/// Work items per group in the grouped plan: a power of two, at most 256.
fn grouped_size(max_group_size: u32) -> u32 {
    let cap = max_group_size.clamp(1, 256);
    1 << (31 - cap.leading_zeros())
}

/// Groups of `g` work items that cover `n` elements in the grouped plan.
fn grouped_groups(n: usize, g: u32) -> u32 {
    chunks_of(n, g * ITEM_CHUNK)
}

/// How the query planner spreads work over work items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanShape {
    /// Chunked on CPU devices, grouped on GPUs and on devices with a loop limit
    /// ([`DeviceInfo::max_loop_iterations`](crate::DeviceInfo::max_loop_iterations)).
    Auto,
    /// One work item per group, each folding a long contiguous chunk: one tight loop per
    /// chunk on the CPU.
    Chunked,
    /// Groups of up to 256 work items that each fold a short contiguous range and combine
    /// through shared memory: the shape GPUs need.
    Grouped,
}

/// Work items per group of the chunked plan's folds in `order`.
fn items_per_chunk(order: Order) -> u32 {
    match order {
        Order::Kept => 1,
        Order::Any => QUAD,
    }
}

/// The elements per work item of the chunked plan: [`CHUNK`], or on a device with a loop
/// limit the largest power of two within [`loop_budget`] when that is less (2048 for
/// llvmpipe on GL, which counts each work item's own passes).
fn chunk_len(ctx: &Context) -> u32 {
    match loop_budget(ctx) {
        Some(budget) if budget < CHUNK as u64 => {
            let fits = 1u64 << (63 - budget.max(1).leading_zeros());
            (fits as u32).max(ITEM_CHUNK)
        }
        _ => CHUNK,
    }
}

/// Chunks of [`chunk_len`] elements covering `n` (at least one).
fn groups_for(ctx: &Context, n: usize) -> u32 {
    chunks_of(n, chunk_len(ctx))
}

/// Chunks of `chunk` elements covering `n` (at least one).
fn chunks_of(n: usize, chunk: u32) -> u32 {
    (n as u64).div_ceil(chunk as u64).max(1) as u32
}

/// `n`, bounded also by the length of each of `memories` (which the host makes at least `n`
/// long), so that each backend sees from the guard `i < bounded(..)` that accesses at `i` are
/// in bounds and drops their checks ([`InBounds`](kiln_ir::InBounds)).
fn bounded(n: Val<u32>, memories: &[Memory]) -> Val<u32> {
    memories.iter().fold(n, |b, m| b.min(len_dyn(*m)))
}

/// The `[start, end)` chunk of the current work item.
fn chunk_range(n: Val<u32>, chunk: Val<u32>) -> (Val<u32>, Val<u32>) {
    let start = global_id(Axis::X) * chunk;
    (start, (start + chunk).min(n))
}

/// The most loop passes a plan gives one work item on a device with a loop limit
/// ([`DeviceInfo::max_loop_iterations`](crate::DeviceInfo::max_loop_iterations)): half of
/// it, leaving room for the passes of loops inside the query's own functions; `None` where
/// loops run as long as they need.
fn loop_budget(ctx: &Context) -> Option<u64> {
    ctx.device()
        .max_loop_iterations
        .map(|limit| limit as u64 / 2)
}

/// A fingerprint (see the `plan_cache` module): a kernel named `plan` holding `settings` as
/// literals and the IR `emit` appends, which applies each closure the plan's kernels apply
/// once and hands what each gives on to [`store_outputs`]. `None` when a closure records a
/// build error (the plan's own build then reports it).
fn fingerprint_of(
    plan: &str,
    settings: &[u32],
    emit: impl FnOnce(&KernelScope),
) -> Option<Fingerprint> {
    let built = Kernel::build_unvalidated(plan, |k| {
        for s in settings {
            lit(*s);
        }
        emit(k);
    });
    let (shape, constants) = constants::record_constants(built.ok()?);
    Some(Fingerprint { shape, constants })
}

/// Stores each of `vals` to an output of its own, so a fingerprint records which values
/// are handed on as well as the IR that computes them.
fn store_outputs(k: &KernelScope, vals: &[AnyVal]) {
    for (j, v) in vals.iter().enumerate() {
        let out = k.buffer_dyn(&format!("out{j}"), v.ty.clone(), Access::Write);
        store_dyn(out, lit(0u32), v);
    }
}

/// One work item per element of `n`, in groups of up to [`CHUNK`] work items. Where the device
/// fits groups to the work ([`DeviceInfo::fits_groups_to_work`](crate::DeviceInfo::fits_groups_to_work), the CPU
/// backend) the groups are as few as cover `n` and all of one size, `n` spread evenly and
/// rounded up to a multiple of 64: a whole group of 16384 for 1000 elements took eight times as
/// long as the elements' own work there. Elsewhere groups stay whole.
fn per_element_grid(ctx: &Context, n: usize) -> Grid {
    let largest = CHUNK.min(ctx.device().max_group_size).max(1);
    let groups = chunks_of(n, largest);
    if !ctx.device().fits_groups_to_work {
        return Grid::linear(groups, largest);
    }
    let group = (n.div_ceil(groups as usize).max(1) as u32)
        .next_multiple_of(64)
        .min(largest);
    Grid::linear(groups, group)
}

/// The first `n` values of type `ty` in `memory`, as the words [`read_value`] reads.
fn download_words(
    ctx: &Context,
    memory: &dyn DeviceMemory,
    n: usize,
    ty: ScalarType,
) -> Result<Vec<u64>> {
    let mut w = words(n, ty);
    ctx.backend()
        .download(memory, &mut as_bytes_mut(&mut w)[..n * ty.size() as usize])?;
    Ok(w)
}

fn words(n: usize, ty: ScalarType) -> Vec<u64> {
    vec![0u64; (n * ty.size() as usize).div_ceil(8).max(1)]
}

fn as_bytes_mut(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 storage viewed as bytes.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr() as *mut u8, w.len() * 8) }
}

fn as_bytes(w: &[u64]) -> &[u8] {
    // SAFETY: u64 storage viewed as bytes.
    unsafe { std::slice::from_raw_parts(w.as_ptr() as *const u8, w.len() * 8) }
}

fn read_value(w: &[u64], i: usize, ty: ScalarType) -> ScalarValue {
    let size = ty.size() as usize;
    let bytes = &as_bytes(w)[i * size..(i + 1) * size];
    let mut b = [0u8; 8];
    b[..size].copy_from_slice(bytes);
    ScalarValue::from_bits(ty, u64::from_le_bytes(b))
}

/// Where a query column lives.
enum Column<'a> {
    /// A host slice's bytes.
    Host(&'a [u8]),
    /// Device memory of the query's backend.
    Device(&'a dyn DeviceMemory),
}

impl Context {
    /// Starts a query over a buffer in device memory; the query runs where the data is. A
    /// buffer of another context makes the terminal fail with `Unsupported`.
    pub fn from_buffer<'a, T: Scalar>(&self, b: &'a Buffer<T>) -> Query<'a, T> {
        Query {
            ctx: self.clone(),
            len: b.len(),
            columns: vec![(Column::Device(b.memory()), T::TYPE)],
            base_columns: 1,
            stages: Vec::new(),
            error: self.check_buffer(b).err(),
            _t: PhantomData,
        }
    }

    /// Starts a query over a host slice. Inputs longer than [`MAX_LEN`] make the terminal fail
    /// with [`Error::TooLarge`].
    pub fn from<'a, T: Scalar>(&self, xs: &'a [T]) -> Query<'a, T> {
        Query {
            ctx: self.clone(),
            len: xs.len(),
            columns: vec![(Column::Host(bytes_of(xs)), T::TYPE)],
            base_columns: 1,
            stages: Vec::new(),
            error: too_large(xs.len()),
            _t: PhantomData,
        }
    }

    /// Starts a query over the numbers `0..n` as `u32`, made on the device: no input is copied
    /// there. `n` larger than [`MAX_LEN`] makes the terminal fail with [`Error::TooLarge`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let squares = ctx.range(4).map(|i| i * i).to_vec()?;
    /// assert_eq!(squares, [0, 1, 4, 9]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn range(&self, n: usize) -> Query<'static, u32> {
        Query {
            ctx: self.clone(),
            len: n,
            columns: Vec::new(),
            base_columns: 0,
            stages: vec![Stage::Enumerate],
            error: too_large(n),
            _t: PhantomData,
        }
    }
}

/// `TooLarge` for a source of `len` elements past [`MAX_LEN`].
fn too_large(len: usize) -> Option<Error> {
    (len > MAX_LEN).then_some(Error::TooLarge { len, max: MAX_LEN })
}

impl<'a, T: Row> Query<'a, T> {
    /// A query over the first `len` rows of `columns` (one per column of `T`), device memory
    /// of `ctx`'s backend (the planner's own intermediates, which are no `Buffer`).
    fn over_device(ctx: &Context, columns: &[&'a dyn DeviceMemory], len: usize) -> Query<'a, T> {
        Query {
            ctx: ctx.clone(),
            len,
            columns: columns
                .iter()
                .zip(Self::out_types())
                .map(|(m, t)| (Column::Device(*m), t))
                .collect(),
            base_columns: columns.len(),
            stages: Vec::new(),
            error: None,
            _t: PhantomData,
        }
    }
}

impl<'a, T> Query<'a, T> {
    fn retype<U>(self) -> Query<'a, U> {
        Query {
            ctx: self.ctx,
            len: self.len,
            columns: self.columns,
            base_columns: self.base_columns,
            stages: self.stages,
            error: self.error,
            _t: PhantomData,
        }
    }

    /// The `plan` tracing span of a terminal, entered until the returned guard drops.
    fn plan_span(&self, terminal: &'static str) -> tracing::span::EnteredSpan {
        tracing::debug_span!("plan", terminal, n = self.len, stages = self.stages.len()).entered()
    }

    fn has_filter(&self) -> bool {
        self.stages.iter().any(|s| matches!(s, Stage::Filter(_)))
    }

    fn unsupported(&self, what: &str) -> Error {
        Error::Unsupported {
            backend: self.ctx.device().backend,
            what: what.to_string(),
        }
    }

    fn check(&mut self) -> Result<()> {
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The fingerprint of plan `plan` over this query (see the `plan_cache` module): a kernel
    /// named `plan` that declares the input columns, holds `settings` as literals and runs the
    /// element function on element `global_id`, storing each kept element's values (and for
    /// a reduction `project` of them folded into the identity with `op`) to one output each,
    /// so it records which values the stages hand on as well as the IR they emit. `None` when
    /// a closure records a build error (the plan's own build then reports it).
    fn fingerprint(
        &self,
        plan: &str,
        settings: &[u32],
        fold: Option<FoldFns<'_>>,
    ) -> Option<Fingerprint> {
        fingerprint_of(plan, settings, |k| {
            let cols = self.declare_inputs(k);
            self.element(&cols, global_id(Axis::X), &mut |vals| {
                let mut outs = vals.clone();
                if let Some((identity, op, project)) = fold {
                    let start = identity.iter().map(|v| lit_value(*v)).collect();
                    outs.extend(op(start, project(vals)));
                }
                store_outputs(k, &outs);
            });
        })
    }

    /// The compiled kernels of `plan` (the kernels `build` returns): from the context's plan
    /// cache under this query's fingerprint (see [`Self::fingerprint`]; `settings` and `fold`
    /// must hold everything besides the query that `build` depends on). Returns the first
    /// build, validation or compile error.
    fn planned(
        &self,
        plan: &str,
        settings: &[u32],
        fold: Option<FoldFns<'_>>,
        build: impl FnOnce() -> Result<Vec<Kernel>>,
    ) -> Result<Plan> {
        self.ctx.plan(self.fingerprint(plan, settings, fold), build)
    }

    /// Emits the fused element function for source index `i` and hands each surviving
    /// element's column values to `sink`.
    fn element(&self, cols: &[Memory], i: Val<u32>, sink: &mut dyn FnMut(Vec<AnyVal>)) {
        self.element_from(&|c| self.column(cols, c, i), i, sink);
    }

    /// [`Self::element`] with input column `c`'s value at `i` given by `column(c)`, so a
    /// kernel can load its elements' columns before it runs their stages.
    fn element_from(
        &self,
        column: &dyn Fn(usize) -> AnyVal,
        i: Val<u32>,
        sink: &mut dyn FnMut(Vec<AnyVal>),
    ) {
        let vals = (0..self.base_columns).map(column).collect();
        self.apply(0, vals, column, i, sink);
    }

    /// Element `i` of input column `c`.
    fn column(&self, cols: &[Memory], c: usize, i: Val<u32>) -> AnyVal {
        load_dyn(cols[c], i, Type::Scalar(self.columns[c].1))
    }

    /// The fused element function for source index `i` without branches: every stage runs on
    /// every element (IR operations are total, so this is safe) and `keep` is true when every
    /// filter keeps it. Returns `keep` and the element's column values.
    fn element_predicated(&self, cols: &[Memory], i: Val<u32>) -> (Val<bool>, Vec<AnyVal>) {
        let mut vals: Vec<AnyVal> = (0..self.base_columns)
            .map(|c| self.column(cols, c, i))
            .collect();
        let mut keep: Option<Val<bool>> = None;
        for stage in &self.stages {
            match stage {
                Stage::Map(f) => vals = f(vals),
                Stage::Filter(p) => {
                    let kept = p(vals.clone());
                    keep = Some(keep.map_or(kept, |k| k.and(kept)));
                }
                Stage::Enumerate => vals.insert(0, i.erase()),
                Stage::Zip(c) => vals.push(self.column(cols, *c, i)),
            }
        }
        (keep.unwrap_or_else(|| lit(true)), vals)
    }

    /// True when the query filters and its whole element function is cheap enough to run on
    /// every element, dropped or not ([`Self::element_predicated`]), so that a predicate
    /// keeping elements at random costs no mispredicted branches: no loops, in the element
    /// function or in a device function it calls, and at most [`PREDICATED_EXPRS`]
    /// expressions. Where a filter drops most elements before costly stages, the branch
    /// skips them instead.
    fn predicated(&self) -> bool {
        if !self.has_filter() {
            return false;
        }
        let probe = Kernel::build_unvalidated("query_element", |k| {
            let cols = self.declare_inputs(k);
            self.element_predicated(&cols, global_id(Axis::X));
        });
        probe.is_ok_and(|k| {
            k.body.exprs.len() <= PREDICATED_EXPRS
                && !block_has_loop(&k.body.block)
                && !k.functions.iter().any(|f| block_has_loop(&f.body.block))
        })
    }

    /// Folds `project` of element `i`, if the filters keep it, into the accumulators `acc`
    /// with `op`. When `predicated` ([`Self::predicated`]) without a branch: the element
    /// function runs on every element and a select keeps the accumulators of a dropped one.
    fn fold_element(
        &self,
        cols: &[Memory],
        i: Val<u32>,
        acc: &[AnyVar],
        op: CombineFn<'_>,
        project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>,
        predicated: bool,
    ) {
        if !predicated {
            return self.element(cols, i, &mut |vals| fold_into(acc, project(vals), op));
        }
        let (keep, vals) = self.element_predicated(cols, i);
        let keep = keep.erase();
        let cur: Vec<AnyVal> = acc.iter().map(|v| v.get()).collect();
        for ((a, next), old) in acc.iter().zip(op(cur.clone(), project(vals))).zip(&cur) {
            a.set(&select_dyn(&keep, &next, old));
        }
    }

    fn apply(
        &self,
        s: usize,
        mut vals: Vec<AnyVal>,
        column: &dyn Fn(usize) -> AnyVal,
        i: Val<u32>,
        sink: &mut dyn FnMut(Vec<AnyVal>),
    ) {
        match self.stages.get(s) {
            None => sink(vals),
            Some(Stage::Map(f)) => self.apply(s + 1, f(vals), column, i, sink),
            Some(Stage::Filter(p)) => {
                let keep = p(vals.clone());
                if_then(keep, || self.apply(s + 1, vals, column, i, sink));
            }
            Some(Stage::Enumerate) => {
                vals.insert(0, i.erase());
                self.apply(s + 1, vals, column, i, sink)
            }
            Some(Stage::Zip(c)) => {
                vals.push(column(*c));
                self.apply(s + 1, vals, column, i, sink)
            }
        }
    }

    fn declare_inputs(&self, k: &KernelScope) -> Vec<Memory> {
        self.columns
            .iter()
            .enumerate()
            .map(|(c, (_, t))| k.buffer_dyn(&format!("in{c}"), Type::Scalar(*t), Access::Read))
            .collect()
    }

    fn input_args(&self) -> Vec<LaunchArg<'a>> {
        self.columns
            .iter()
            .map(|(c, _)| match c {
                Column::Host(b) => LaunchArg::Read(b),
                Column::Device(m) => LaunchArg::Device(*m),
            })
            .collect()
    }

    /// The chunked plan's partials kernel: each work item folds `project` of the rows it
    /// takes into one partial per accumulator, stored at its global id. With [`Order::Kept`]
    /// each group has one work item folding its chunk; with [`Order::Any`] each group has
    /// [`QUAD`] work items, and of every row of `QUAD * LANES` elements of the chunk, work
    /// item `j` folds elements `j`, `j + QUAD`, ... into its `LANES` accumulators.
    fn chunked_fold_kernel(
        &self,
        name: &str,
        identity: &[ScalarValue],
        op: CombineFn<'_>,
        project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>,
        order: Order,
    ) -> Result<Kernel> {
        let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
        let predicated = self.predicated();
        Ok(Kernel::build_unvalidated(name, |k| {
            let cols = self.declare_inputs(k);
            let outs: Vec<Memory> = declare_columns(k, "partial", &types, Access::Write);
            let n = bounded(k.value::<u32>("n"), &cols);
            let chunk = k.value::<u32>("chunk");
            let lanes: Vec<Vec<AnyVar>> = (0..LANES)
                .map(|l| identity_vars(&format!("acc{l}_"), identity))
                .collect();
            let last = &lanes[LANES as usize - 1];
            match order {
                Order::Kept => {
                    let (start, end) = chunk_range(n, chunk);
                    let quarter = (end - start) / LANES;
                    for_range(0u32, quarter, |t| {
                        for (l, acc) in lanes.iter().enumerate() {
                            let i = start + quarter * (l as u32) + t;
                            // Always true; it shows the backends that `i` is inside every
                            // column, so the loads need no bounds tests.
                            if_then(i.lt(end), || {
                                self.fold_element(&cols, i, acc, op, project, predicated)
                            });
                        }
                    });
                    for_range(start + quarter * LANES, end, |i| {
                        self.fold_element(&cols, i, last, op, project, predicated)
                    });
                }
                Order::Any => {
                    let start = group_id(Axis::X) * chunk;
                    let end = (start + chunk).min(n);
                    let j = local_id(Axis::X);
                    let row = QUAD * LANES;
                    let rows = (end - start) / row;
                    for_range(0u32, rows, |t| {
                        for (l, acc) in lanes.iter().enumerate() {
                            let i = start + t * row + (l as u32) * QUAD + j;
                            self.fold_element(&cols, i, acc, op, project, predicated);
                        }
                    });
                    let tail = start + rows * row;
                    for_range(0u32, (end - tail + (QUAD - 1)) / QUAD, |t| {
                        let i = tail + t * QUAD + j;
                        if_then(i.lt(end), || {
                            self.fold_element(&cols, i, last, op, project, predicated)
                        });
                    });
                }
            }
            let mut total: Vec<AnyVal> = lanes[0].iter().map(|v| v.get()).collect();
            for lane in &lanes[1..] {
                total = op(total, lane.iter().map(|v| v.get()).collect());
            }
            let g = global_id(Axis::X);
            for (o, v) in outs.iter().zip(&total) {
                store_dyn(*o, g, v);
            }
        })?)
    }

    /// The two kernels of the chunked plan's reduction with `identity` and the associative
    /// `op`: the partials kernel ([`Self::chunked_fold_kernel`]), then one work item folding
    /// the partials in order.
    fn reduce_kernels(
        &self,
        identity: &[ScalarValue],
        op: CombineFn<'_>,
        project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>,
        order: Order,
    ) -> Result<[Kernel; 2]> {
        let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
        let partials =
            self.chunked_fold_kernel("query_reduce_partials", identity, op, project, order)?;
        let finish = Kernel::build_unvalidated("query_reduce_final", |k| {
            let ins: Vec<Memory> = declare_columns(k, "partial", &types, Access::Read);
            let outs: Vec<Memory> = declare_columns(k, "result", &types, Access::Write);
            let m = k.value::<u32>("m");
            let acc = identity_vars("acc", identity);
            for_range(0u32, m, |g| {
                let vals = ins
                    .iter()
                    .zip(&types)
                    .map(|(mem, t)| load_dyn(*mem, g, Type::Scalar(*t)))
                    .collect();
                fold_into(&acc, vals, op);
            });
            for (o, v) in outs.iter().zip(&acc) {
                store_dyn(*o, lit(0u32), &v.get());
            }
        })?;
        Ok([partials, finish])
    }

    /// The partials kernel of the grouped plan over this query's rows: see
    /// [`grouped_fold_kernel`]. `project` turns each kept element into the values folded (the
    /// element itself for reductions, a 1 for counting).
    fn grouped_reduce_kernel(
        &self,
        name: &str,
        identity: &[ScalarValue],
        op: CombineFn<'_>,
        project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>,
        order: Order,
        g: u32,
    ) -> Result<Kernel> {
        grouped_fold_kernel(
            name,
            identity,
            op,
            order,
            g,
            &|k| self.declare_inputs(k),
            &|cols, i, sink| self.element(cols, i, &mut |vals| sink(project(vals))),
        )
    }

    /// Runs a reduction of the current rows; returns the result's column constants.
    fn reduce_values(
        mut self,
        identity: Vec<ScalarValue>,
        op: CombineFn<'_>,
        order: Order,
    ) -> Result<Vec<ScalarValue>> {
        let _span = self.plan_span("reduce");
        self.check()?;
        self.reduce_projected(&identity, op, &|v| v, order)
    }

    /// Runs a reduction of `project` of each of the current rows (the columns of `identity`);
    /// returns the result's column constants. The query stays usable.
    fn reduce_projected(
        &self,
        identity: &[ScalarValue],
        op: CombineFn<'_>,
        project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>,
        order: Order,
    ) -> Result<Vec<ScalarValue>> {
        let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
        let result = match self.ctx.effective_plan_shape() {
            PlanShape::Grouped => self.grouped_reduce(identity, op, project, order)?,
            _ => self.chunked_reduce(identity, op, project, order)?,
        };
        result
            .iter()
            .zip(&types)
            .map(|(m, t)| Ok(read_value(&download_words(&self.ctx, &**m, 1, *t)?, 0, *t)))
            .collect()
    }

    /// The chunked plan's reduction: one partial per work item (see [`Self::reduce_kernels`]),
    /// then one work item folds them. Returns the device memory
    /// holding the result (one value per column).
    fn chunked_reduce(
        &self,
        identity: &[ScalarValue],
        op: CombineFn<'_>,
        project: ProjectFn<'_>,
        order: Order,
    ) -> Result<Columns> {
        let plan = self.planned(
            "query_reduce",
            &[order as u32],
            Some((identity, op, project)),
            || Ok(self.reduce_kernels(identity, op, project, order)?.to_vec()),
        )?;
        let groups = groups_for(&self.ctx, self.len);
        let per_group = items_per_chunk(order);
        let partials = self.alloc_columns(identity, groups * per_group)?;
        let mut args = self.input_args();
        args.extend(partials.iter().map(|m| LaunchArg::Device(&**m)));
        args.extend([
            value_bytes(self.len as u32),
            value_bytes(chunk_len(&self.ctx)),
        ]);
        self.ctx
            .launch_planned(plan.kernel(0), &Grid::linear(groups, per_group), &mut args)?;
        drop(args);
        self.fold_partials(
            identity,
            plan.kernel(1),
            &partials,
            &[groups * per_group],
            Grid::linear(1, 1),
        )
    }

    /// The grouped plan's reduction: groups fold the elements into one partial each, then one
    /// group folds the partials. Returns the device memory holding the result (one value per
    /// column).
    fn grouped_reduce(
        &self,
        identity: &[ScalarValue],
        op: CombineFn<'_>,
        project: ProjectFn<'_>,
        order: Order,
    ) -> Result<Columns> {
        let g = grouped_size(self.ctx.device().max_group_size);
        let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
        let plan = self.planned(
            "query_reduce_grouped",
            &[order as u32, g],
            Some((identity, op, project)),
            || {
                let partials = self.grouped_reduce_kernel(
                    "query_reduce_grouped",
                    identity,
                    op,
                    project,
                    order,
                    g,
                )?;
                let combine = grouped_fold_kernel(
                    "query_reduce_combine",
                    identity,
                    op,
                    order,
                    g,
                    &|k| declare_columns(k, "folded", &types, Access::Read),
                    &|cols, i, sink| sink(load_row(cols, &types, i)),
                )?;
                Ok(vec![partials, combine])
            },
        )?;
        let groups = grouped_groups(self.len, g);
        let partials = self.alloc_columns(identity, groups)?;
        let mut args = self.input_args();
        args.extend(partials.iter().map(|m| LaunchArg::Device(&**m)));
        args.extend([value_bytes(self.len as u32), value_bytes(ITEM_CHUNK)]);
        self.ctx
            .launch_planned(plan.kernel(0), &Grid::linear(groups, g), &mut args)?;
        drop(args);
        if groups == 1 {
            return Ok(partials);
        }
        // One group folds all the partials (a few per work item: there are n / 4096 of them
        // with g = 256), so the reduction is two launches whatever n is.
        self.fold_partials(
            identity,
            plan.kernel(1),
            &partials,
            &[groups, groups.div_ceil(g)],
            Grid::linear(1, g),
        )
    }

    /// Launches `kernel` on `grid` to fold `partials` into one value per column of
    /// `identity`, passing `values` after the buffers. Returns the device memory holding the
    /// result.
    fn fold_partials(
        &self,
        identity: &[ScalarValue],
        kernel: PlanStep<'_>,
        partials: &Columns,
        values: &[u32],
        grid: Grid,
    ) -> Result<Columns> {
        let result = self.alloc_columns(identity, 1)?;
        let mut args: Vec<LaunchArg> = partials
            .iter()
            .chain(&result)
            .map(|m| LaunchArg::Device(&**m))
            .collect();
        args.extend(values.iter().map(|v| value_bytes(*v)));
        self.ctx.launch_planned(kernel, &grid, &mut args)?;
        drop(args);
        Ok(result)
    }

    /// Device memory for `n` values of each of `identity`'s columns.
    fn alloc_columns(&self, identity: &[ScalarValue], n: u32) -> Result<Columns> {
        identity
            .iter()
            .map(|v| {
                Ok(self
                    .ctx
                    .backend()
                    .alloc(n as usize * v.ty().size() as usize)?)
            })
            .collect()
    }

    /// Appends a map stage of column values; `f` runs as user code (see
    /// [`constants::user_code`]) numbered by the stage's position.
    fn map_erased<F: Fn(Vec<AnyVal>) -> Vec<AnyVal> + 'a>(mut self, f: F) -> Query<'a, ErasedRow> {
        let id = self.stages.len() as u32;
        self.stages.push(Stage::Map(Box::new(move |cols| {
            constants::user_code(id, || f(cols))
        })));
        self.retype()
    }
}

impl<'a, T: Row> Query<'a, T> {
    /// Runs the query into new device columns, one per column of its rows; returns them and
    /// how many rows there are (those the filters keep).
    fn materialize(&self) -> Result<(Columns, usize)> {
        let plan = self.prepare()?;
        let rows = alloc_rows(&self.ctx, &Self::out_types(), plan.selected)?;
        self.write(
            &plan,
            rows.iter().map(|m| LaunchArg::Device(&**m)).collect(),
        )?;
        Ok((rows, plan.selected))
    }

    /// Number of elements in the source (before any filter).
    pub fn source_len(&self) -> usize {
        self.len
    }

    /// Applies `f` to every element. `f` receives the element as IR values (`Val<T>`, or a
    /// tuple for zipped/enumerated queries) and returns a `Val` or a tuple of them.
    pub fn map<O: IntoRow, F: Fn(T::Vals) -> O + 'a>(self, f: F) -> Query<'a, O::Row> {
        self.map_erased(move |cols| {
            let mut out = Vec::new();
            f(T::vals(&mut cols.into_iter())).into_handles(&mut out);
            out
        })
        .retype()
    }

    /// Keeps the elements for which `pred` is true, in their input order.
    pub fn filter<F: Fn(T::Vals) -> Val<bool> + 'a>(mut self, pred: F) -> Query<'a, T> {
        let id = self.stages.len() as u32;
        self.stages.push(Stage::Filter(Box::new(move |cols| {
            let v = T::vals(&mut cols.into_iter());
            constants::user_code(id, || pred(v))
        })));
        self
    }

    /// Pairs every element with its index in the source (`u32`). Must come before any filter.
    pub fn enumerate(mut self) -> Query<'a, (u32, T)> {
        if self.has_filter() && self.error.is_none() {
            self.error = Some(self.unsupported("enumerate after filter (positions in a filtered sequence need a scan); call enumerate before filter to number the source elements"));
        }
        self.stages.push(Stage::Enumerate);
        self.retype()
    }

    /// Pairs every element with the element of `other` at the same index. Both must have the
    /// same length ([`Error::LengthMismatch`] otherwise) and the zip must come before any
    /// filter.
    pub fn zip<U: Scalar>(self, other: &'a [U]) -> Query<'a, (T, U)> {
        self.zip_column(Column::Host(bytes_of(other)), other.len(), U::TYPE)
    }

    /// Like [`Query::zip`], with a column in device memory.
    pub fn zip_buffer<U: Scalar>(self, other: &'a Buffer<U>) -> Query<'a, (T, U)> {
        let len = other.len();
        let foreign = self.ctx.check_buffer(other).err();
        let mut q = self.zip_column(Column::Device(other.memory()), len, U::TYPE);
        if q.error.is_none() {
            q.error = foreign;
        }
        q
    }

    /// Combines each element with the element of `other` at the same index: `zip(other)`
    /// followed by `map(|(x, y)| f(x, y))`, one fused element function. Fails like
    /// [`Query::zip`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (xs, ys) = ([1.0f32, 2.0, 3.0], [10.0f32, 20.0, 30.0]);
    /// let dot = ctx.from(&xs).zip_with(&ys, |x, y| x * y).sum()?;
    /// assert_eq!(dot, 140.0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn zip_with<U: Scalar, O: IntoRow, F: Fn(T::Vals, Val<U>) -> O + 'a>(
        self,
        other: &'a [U],
        f: F,
    ) -> Query<'a, O::Row> {
        self.zip(other)
            .map_erased(move |mut cols| {
                let y = cols.split_off(cols.len() - 1)[0].typed::<U>();
                let mut out = Vec::new();
                f(T::vals(&mut cols.into_iter()), y).into_handles(&mut out);
                out
            })
            .retype()
    }

    fn zip_column<U>(
        mut self,
        column: Column<'a>,
        len: usize,
        ty: ScalarType,
    ) -> Query<'a, (T, U)> {
        if self.error.is_none() {
            if len != self.len {
                self.error = Some(Error::LengthMismatch {
                    left: self.len,
                    right: len,
                });
            } else if self.has_filter() {
                self.error =
                    Some(self.unsupported("zip after filter; zip the columns first, then filter"));
            }
        }
        self.columns.push((column, ty));
        self.stages.push(Stage::Zip(self.columns.len() - 1));
        self.retype()
    }

    fn out_types() -> Vec<ScalarType> {
        let mut t = Vec::new();
        T::column_types(&mut t);
        t
    }

    /// The elements per work item of [`Self::map_kernel`] in the context's plan shape, and
    /// its grid over this query's elements.
    fn map_shape(&self) -> (u32, Grid) {
        match self.ctx.effective_plan_shape() {
            PlanShape::Grouped => {
                let g = grouped_size(self.ctx.device().max_group_size);
                (
                    MAP_ITEMS,
                    Grid::linear(chunks_of(self.len, g * MAP_ITEMS), g),
                )
            }
            _ => (1, per_element_grid(&self.ctx, self.len)),
        }
    }

    /// The kernel writing every element (no filter in the chain). In the chunked plan one
    /// element per work item, so backends can spread (and the CPU backend vectorize) across
    /// work items. In the grouped plan each work item takes [`MAP_ITEMS`] elements a group's
    /// width apart and loads all their columns before it computes and stores any: a GPU then
    /// has that many loads in flight per work item (one 4-byte load each reached 66% of an
    /// H100's copy bandwidth).
    fn map_kernel(&self, items: u32) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated("query_map", |k| {
            let cols = self.declare_inputs(k);
            let outs: Vec<Memory> = declare_columns(k, "out", &Self::out_types(), Access::Write);
            let n = k.value::<u32>("n");
            let mems: Vec<Memory> = cols.iter().chain(&outs).copied().collect();
            let bound = bounded(n, &mems);
            let first = group_id(Axis::X) * (group_size(Axis::X) * items) + local_id(Axis::X);
            let at: Vec<Val<u32>> = (0..items)
                .map(|j| first + group_size(Axis::X) * j)
                .collect();
            // Out of bounds a load reads zero, so every load may run before the bounds test.
            let loaded: Vec<Vec<AnyVal>> = at
                .iter()
                .map(|&i| (0..cols.len()).map(|c| self.column(&cols, c, i)).collect())
                .collect();
            for (&i, row) in at.iter().zip(&loaded) {
                if_then(i.lt(bound), || {
                    self.element_from(&|c| row[c].clone(), i, &mut |vals| {
                        for (o, v) in outs.iter().zip(&vals) {
                            store_dyn(*o, i, v);
                        }
                    })
                });
            }
        })?)
    }

    /// The two kernels of the chunked plan's ordered filter: count per chunk, then (after the
    /// host scans the counts into offsets) scatter.
    fn filter_kernels(&self) -> Result<[Kernel; 2]> {
        Ok([self.chunked_count_kernel()?, self.chunked_scatter_kernel()?])
    }

    /// The chunked plan's count of kept elements, in the [`QUAD`] layout (counting is
    /// commutative): see [`Self::chunked_fold_kernel`].
    fn chunked_count_kernel(&self) -> Result<Kernel> {
        self.chunked_fold_kernel(
            "query_filter_count",
            &[ScalarValue::U32(0)],
            &add_u32,
            &one_u32,
            Order::Any,
        )
    }

    /// The parameters both ordered scatters declare, in order: the input columns, the output
    /// offsets, one output per column, `n` and the chunk length; with the range of elements the
    /// work item scans (its chunk, cut at `n` and at the inputs' lengths).
    fn declare_scatter(&self, k: &KernelScope) -> ScatterParams {
        let cols = self.declare_inputs(k);
        let offsets = k.buffer::<u32>("offsets", Access::Read);
        let outs = declare_columns(k, "out", &Self::out_types(), Access::Write);
        let n = k.value::<u32>("n");
        let chunk = k.value::<u32>("chunk");
        let (start, end) = chunk_range(bounded(n, &cols), chunk);
        ScatterParams {
            cols,
            offsets,
            outs,
            start,
            end,
        }
    }

    /// The chunked plan's ordered scatter: each work item writes what it keeps of its chunk
    /// from the chunk's offset on; without branches when [`Self::predicated`].
    fn chunked_scatter_kernel(&self) -> Result<Kernel> {
        let predicated = self.predicated();
        Ok(Kernel::build_unvalidated("query_filter_scatter", |k| {
            let s = self.declare_scatter(k);
            let (cols, offsets, outs, start, end) = (s.cols, s.offsets, s.outs, s.start, s.end);
            let pos = Var::new("pos", offsets.load(global_id(Axis::X)));
            if !predicated {
                return for_range(start, end, |i| {
                    self.element(&cols, i, &mut |vals| {
                        let p = pos.get();
                        for (o, v) in outs.iter().zip(&vals) {
                            store_dyn(*o, p, v);
                        }
                        pos.set(p + 1u32);
                    })
                });
            }
            // Without a branch on the predicate, so one that keeps elements at random costs
            // no mispredictions: every element is written at the next output position and a
            // dropped one is overwritten by the next kept one. Only the positions from the
            // last kept element to the chunk's end are tested, against the next chunk's
            // offset, which the chunk must not write: a branch taken the same way until then.
            let limit = offsets.load(global_id(Axis::X) + 1u32);
            for_range(start, end, |i| {
                let (keep, vals) = self.element_predicated(&cols, i);
                let p = pos.get();
                if_then(p.lt(limit), || {
                    for (o, v) in outs.iter().zip(&vals) {
                        store_dyn(*o, p, v);
                    }
                });
                pos.set(p + keep.cast::<u32>());
            });
        })?)
    }

    /// Folds all elements with the associative `op`, starting from `identity` (which must be
    /// an identity of `op`). Groups of elements are folded in parallel and the partial results
    /// folded in input order, so `op` need not be commutative; the result is the same on
    /// every run.
    pub fn fold<O, F>(self, identity: T, op: F) -> Result<T>
    where
        O: IntoRow<Row = T>,
        F: Fn(T::Vals, T::Vals) -> O,
    {
        let mut id = Vec::new();
        identity.to_values(&mut id);
        let combine = on_columns::<T, O>(op);
        let vals = self.reduce_values(id, &combine, Order::Kept)?;
        Ok(T::from_values(&mut vals.into_iter()))
    }

    /// The first element (of those a filter keeps), in input order; `None` when there is
    /// none. Fails as [`Query::fold`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [3i32, -4, 8, -1, 6];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.lt(0)).first()?, Some(-4));
    /// assert_eq!(ctx.from(&xs).filter(|x| x.lt(0)).last()?, Some(-1));
    /// assert_eq!(ctx.from(&xs).filter(|x| x.gt(10)).first()?, None);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn first(self) -> Result<Option<T>> {
        self.end_element(false)
    }

    /// The last element (of those a filter keeps), in input order; `None` when there is none.
    /// Fails as [`Query::fold`] does.
    pub fn last(self) -> Result<Option<T>> {
        self.end_element(true)
    }

    /// The first (or `last`) element: a fold of (found, element) pairs that keeps the earlier
    /// (later) found one, in input order.
    fn end_element(self, last: bool) -> Result<Option<T>> {
        let identity: Vec<ScalarValue> = std::iter::once(ScalarValue::U32(0))
            .chain(Self::out_types().into_iter().map(ScalarValue::zero))
            .collect();
        let q = self.map_erased(|c| {
            std::iter::once(lit_value(ScalarValue::U32(1)))
                .chain(c)
                .collect()
        });
        let vals = q.reduce_values(
            identity,
            &|a, b| {
                // Keep `a` when it was found (first), or when `b` was not (last).
                let zero = lit_value(ScalarValue::U32(0));
                let keep_a = if last {
                    bin(BinaryOp::Eq, &b[0], &zero)
                } else {
                    bin(BinaryOp::Ne, &a[0], &zero)
                };
                a.iter()
                    .zip(&b)
                    .map(|(x, y)| select_dyn(&keep_a, x, y))
                    .collect()
            },
            Order::Kept,
        )?;
        let mut vals = vals.into_iter();
        let found = vals.next().is_some_and(|f| f.to_bits() != 0);
        Ok(found.then(|| T::from_values(&mut vals)))
    }

    /// Collects the elements into a `Vec`, in input order.
    pub fn to_vec(mut self) -> Result<Vec<T>> {
        let _span = self.plan_span("to_vec");
        self.check()?;
        let plan = self.prepare()?;
        collect_rows(plan.selected, &mut |outs| self.write(&plan, outs))
    }

    /// Runs the element function and counts what it keeps: with a filter, the count kernel and
    /// the scan of its counts into each group's offset; without one, nothing.
    fn prepare(&self) -> Result<Materialize> {
        let n = self.len;
        if !self.has_filter() {
            return Ok(Materialize {
                selected: n,
                filter: None,
            });
        }
        let group = (self.ctx.effective_plan_shape() == PlanShape::Grouped)
            .then(|| grouped_size(self.ctx.device().max_group_size));
        // The count kernel, then the scatter kernel `write` runs.
        let plan = self.planned("query_filter", &[group.unwrap_or(0)], None, || {
            Ok(match group {
                Some(g) => vec![
                    self.grouped_reduce_kernel(
                        "query_filter_count_grouped",
                        &[ScalarValue::U32(0)],
                        &add_u32,
                        &one_u32,
                        Order::Any,
                        g,
                    )?,
                    self.grouped_scatter_kernel(g)?,
                ],
                None => self.filter_kernels()?.to_vec(),
            })
        })?;
        let (groups, grid, per_item, per_group) = match group {
            Some(g) => {
                let groups = grouped_groups(n, g);
                (groups, Grid::linear(groups, g), ITEM_CHUNK, 1)
            }
            None => {
                let per_group = items_per_chunk(Order::Any);
                (
                    groups_for(&self.ctx, n),
                    Grid::linear(groups_for(&self.ctx, n), per_group),
                    chunk_len(&self.ctx),
                    per_group,
                )
            }
        };
        let mut counts = vec![0u32; (groups * per_group) as usize];
        let mut args = self.input_args();
        args.push(LaunchArg::ReadWrite(u32_bytes_mut(&mut counts)));
        args.push(value_bytes(n as u32));
        args.push(value_bytes(per_item));
        self.ctx.launch_planned(plan.kernel(0), &grid, &mut args)?;
        drop(args);
        // One count per group (or per work item, summed here per group), and the total sizes
        // the output on the host anyway: the exclusive scan is a host loop, not a kernel one
        // work item would run serially.
        // The total follows the groups' offsets, as the offset where a last group stops.
        let mut total = 0u32;
        let mut offsets: Vec<u32> = counts
            .chunks(per_group as usize)
            .map(|c| {
                let offset = total;
                total += c.iter().sum::<u32>();
                offset
            })
            .collect();
        offsets.push(total);
        Ok(Materialize {
            selected: total as usize,
            filter: Some(FilterScatter {
                offsets,
                group,
                kernels: plan,
            }),
        })
    }

    /// The grouped plan's ordered scatter: each work item counts what it keeps of its range,
    /// the group scans the counts into offsets in shared memory (log2(g) steps), and each item
    /// writes its kept elements from its offset on.
    fn grouped_scatter_kernel(&self, g: u32) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated(
            "query_filter_scatter_grouped",
            |k| {
                let s = self.declare_scatter(k);
                let (cols, offsets, outs, start, end) = (s.cols, s.offsets, s.outs, s.start, s.end);
                let item_counts = k.shared::<u32>("item_counts", SharedLen::Static(g));
                let l = local_id(Axis::X);
                let kept = Var::new("kept", 0u32);
                for_range(start, end, |i| {
                    self.element(&cols, i, &mut |_| kept.set(kept.get() + 1u32))
                });
                item_counts.store(l, kept.get());
                barrier();
                scan::group_inclusive_scan(
                    &[item_counts.memory()],
                    &[ScalarType::U32],
                    &add_u32,
                    g,
                );
                // The counts before this work item's, read from shared memory rather than
                // as the inclusive count less `kept`: PoCL 3.1 wrote nothing for whole groups
                // when a filter that always keeps left `kept` live across the barriers.
                let before = select(l.gt(0u32), item_counts.load(l - 1u32), 0u32);
                let pos = Var::new("pos", offsets.load(group_id(Axis::X)) + before);
                for_range(start, end, |i| {
                    self.element(&cols, i, &mut |vals| {
                        let p = pos.get();
                        for (o, v) in outs.iter().zip(&vals) {
                            store_dyn(*o, p, v);
                        }
                        pos.set(p + 1u32);
                    })
                });
            },
        )?)
    }

    /// Writes the kept elements into `outs` (one argument per column, room for
    /// `plan.selected` elements): the map kernel, or the ordered scatter after a filter;
    /// nothing when nothing is kept.
    fn write(&self, plan: &Materialize, outs: Vec<LaunchArg<'_>>) -> Result<()> {
        if plan.selected == 0 {
            return Ok(());
        }
        let n = self.len;
        let mut args = self.input_args();
        match &plan.filter {
            Some(filter) => {
                let (grid, per_item) = match filter.group {
                    Some(g) => (Grid::linear(grouped_groups(n, g), g), ITEM_CHUNK),
                    None => (
                        Grid::linear(groups_for(&self.ctx, n), 1),
                        chunk_len(&self.ctx),
                    ),
                };
                args.push(LaunchArg::Read(u32_bytes(&filter.offsets)));
                args.extend(outs);
                args.push(value_bytes(n as u32));
                args.push(value_bytes(per_item));
                self.ctx
                    .launch_planned(filter.kernels.kernel(1), &grid, &mut args)
            }
            None => {
                let (items, grid) = self.map_shape();
                let map = self.planned("query_map", &[items], None, || {
                    Ok(vec![self.map_kernel(items)?])
                })?;
                args.extend(outs);
                args.push(value_bytes(n as u32));
                self.ctx.launch_planned(map.kernel(0), &grid, &mut args)
            }
        }
    }

    /// Number of elements (after filters).
    pub fn count(self) -> Result<usize> {
        let q = self.map_erased(one_u32);
        let v = q.reduce_values(vec![ScalarValue::U32(0)], &add_u32, Order::Any)?;
        Ok(v[0].to_bits() as usize)
    }

    /// True if `pred` holds for some element (false when empty).
    pub fn any<F: Fn(T::Vals) -> Val<bool> + 'a>(self, pred: F) -> Result<bool> {
        let q = self.map_erased(move |c| vec![pred(T::vals(&mut c.into_iter())).erase()]);
        let v = q.reduce_values(
            vec![ScalarValue::Bool(false)],
            &|a, b| vec![bin(BinaryOp::Or, &a[0], &b[0])],
            Order::Any,
        )?;
        Ok(v[0] == ScalarValue::Bool(true))
    }

    /// True if `pred` holds for every element (true when empty).
    pub fn all<F: Fn(T::Vals) -> Val<bool> + 'a>(self, pred: F) -> Result<bool> {
        let q = self.map_erased(move |c| vec![pred(T::vals(&mut c.into_iter())).erase()]);
        let v = q.reduce_values(
            vec![ScalarValue::Bool(true)],
            &|a, b| vec![bin(BinaryOp::And, &a[0], &b[0])],
            Order::Any,
        )?;
        Ok(v[0] == ScalarValue::Bool(true))
    }

    /// The kernels `to_vec` would run, in `target`'s language, one after another.
    pub fn emit(&self, target: crate::Target) -> Result<String> {
        let kernels = if self.has_filter() {
            self.filter_kernels()?.to_vec()
        } else {
            vec![self.map_kernel(self.map_shape().0)?]
        };
        let mut out = String::new();
        for k in &kernels {
            out += &crate::emit(k, target)?;
            out.push('\n');
        }
        Ok(out)
    }

    /// The fused plan and the IR of its kernels, as `to_vec` would run them, followed by the
    /// source the context's backend compiles when that is not the IR.
    pub fn explain(&self) -> String {
        let mut s = format!(
            "plan on {} ({}):\n  source: {} element(s), column types [",
            self.ctx.device().backend,
            self.ctx.device().name,
            self.len
        );
        s += &self.columns[..self.base_columns]
            .iter()
            .map(|c| c.1.name())
            .collect::<Vec<_>>()
            .join(", ");
        s += "]\n  fused stages: ";
        s += &self
            .stages
            .iter()
            .map(|st| st.name())
            .collect::<Vec<_>>()
            .join(" -> ");
        let kernels = if self.has_filter() {
            self.filter_kernels().map(|k| k.to_vec())
        } else {
            self.map_kernel(self.map_shape().0).map(|k| vec![k])
        };
        match kernels {
            Ok(ks) => {
                s += &format!(
                    "\n  to_vec runs {} kernel(s): {}\n",
                    ks.len(),
                    ks.iter()
                        .map(|k| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                s += "  a terminal reduction runs 2 kernels (query_reduce_partials, query_reduce_final) around the same element function\n";
                for k in ks {
                    s += &format!("\n{}", print_kernel(&k));
                }
            }
            Err(e) => s += &format!("\n  cannot build kernels: {e}\n"),
        }
        let target = crate::Target::of(self.ctx.device().backend);
        if target != crate::Target::Ir {
            match self.emit(target) {
                Ok(src) => s += &format!("\n--- {target:?} source ---\n{src}"),
                Err(e) => s += &format!("\n--- {target:?} source unavailable: {e}\n"),
            }
        }
        s
    }
}

/// `op` on two rows of `T`, taking and giving the rows' column values.
fn on_columns<T: Row, O: IntoRow<Row = T>>(
    op: impl Fn(T::Vals, T::Vals) -> O,
) -> impl Fn(Vec<AnyVal>, Vec<AnyVal>) -> Vec<AnyVal> {
    move |a, b| {
        let (a, b) = (T::vals(&mut a.into_iter()), T::vals(&mut b.into_iter()));
        let mut out = Vec::new();
        constants::user_code(OP_CLOSURE, || op(a, b)).into_handles(&mut out);
        out
    }
}

/// One buffer parameter of `k` per column of `types`, with `access`, named `name0`, `name1`, ...
fn declare_columns(
    k: &KernelScope,
    name: &str,
    types: &[ScalarType],
    access: Access,
) -> Vec<Memory> {
    types
        .iter()
        .enumerate()
        .map(|(j, t)| k.buffer_dyn(&format!("{name}{j}"), Type::Scalar(*t), access))
        .collect()
}

/// The values of element `i` of `cols`, one column of `types` each.
fn load_row(cols: &[Memory], types: &[ScalarType], i: Val<u32>) -> Vec<AnyVal> {
    cols.iter()
        .zip(types)
        .map(|(m, t)| load_dyn(*m, i, Type::Scalar(*t)))
        .collect()
}

/// The identity of `max` (when `max`) or `min` on `ty`: NaN for floats (which the IR's min and
/// max skip), the type's smallest or largest value for integers.
fn min_max_identity(ty: ScalarType, max: bool) -> ScalarValue {
    match ty {
        ScalarType::F32 => ScalarValue::F32(f32::NAN),
        ScalarType::F64 => ScalarValue::F64(f64::NAN),
        t if max => ScalarValue::from_bits(
            t,
            if t.is_signed() {
                1u64 << (t.bits() - 1)
            } else {
                0
            },
        ),
        t => ScalarValue::from_bits(
            t,
            if t.is_signed() {
                (1u64 << (t.bits() - 1)) - 1
            } else {
                u64::MAX
            },
        ),
    }
}

/// `x` as a `u32` whose unsigned order is the order of the IR's f32 `max` (when `max`) or
/// `min`: the largest key is the maximum, the smallest the minimum. The bits of a number are
/// flipped as in IEEE 754 total order (the sign bit of a positive float, every bit of a
/// negative one), so `-0.0 < +0.0`. A NaN loses to every number and wins only over the
/// reduction's identity, the key of no element (0 for `max`, `u32::MAX` for `min`): it first
/// becomes the all-ones NaN, whose flipped bits are 0, and then the key 1 (`max`) or
/// `u32::MAX - 1` (`min`, whose keys are the flipped bits less one).
fn f32_extreme_key(x: Val<f32>, max: bool) -> Val<u32> {
    let nan = select(x.is_nan(), u32::MAX, 0u32);
    let bits = x.bitcast::<u32>() | nan;
    let negative = (bits.bitcast::<i32>() >> 31i32).bitcast::<u32>();
    let flipped = bits ^ (negative | 0x8000_0000u32);
    if max {
        flipped - nan
    } else {
        flipped + nan - 1u32
    }
}

/// The f32 whose [`f32_extreme_key`] is `key` (a NaN for NaN's key); `None` for the identity.
fn f32_from_extreme_key(key: u32, max: bool) -> Option<f32> {
    let (empty, nan, flipped) = if max {
        (0, 1, key)
    } else {
        (u32::MAX, u32::MAX - 1, key.wrapping_add(1))
    };
    if key == empty {
        return None;
    }
    if key == nan {
        return Some(f32::NAN);
    }
    let bits = if flipped & 0x8000_0000 != 0 {
        flipped ^ 0x8000_0000
    } else {
        !flipped
    };
    Some(f32::from_bits(bits))
}

/// Device columns for `n` rows of `types`, one allocation per column.
fn alloc_rows(ctx: &Context, types: &[ScalarType], n: usize) -> Result<Columns> {
    types
        .iter()
        .map(|t| Ok(ctx.backend().alloc(n * t.size() as usize)?))
        .collect()
}

/// `a + b` on one `u32` column: counting.
fn add_u32(a: Vec<AnyVal>, b: Vec<AnyVal>) -> Vec<AnyVal> {
    vec![bin(BinaryOp::Add, &a[0], &b[0])]
}

/// A `u32` 1 for any row: what counting adds up.
fn one_u32(_: Vec<AnyVal>) -> Vec<AnyVal> {
    vec![lit_value(ScalarValue::U32(1))]
}

/// One variable per column, named `name` and the column's number, holding `vals`.
fn column_vars(name: &str, vals: &[AnyVal]) -> Vec<AnyVar> {
    vals.iter()
        .enumerate()
        .map(|(j, v)| AnyVar::new(&format!("{name}{j}"), v))
        .collect()
}

/// [`column_vars`] holding the values of `identity`.
fn identity_vars(name: &str, identity: &[ScalarValue]) -> Vec<AnyVar> {
    let vals: Vec<AnyVal> = identity.iter().map(|v| lit_value(*v)).collect();
    column_vars(name, &vals)
}

fn fold_into(acc: &[AnyVar], vals: Vec<AnyVal>, op: CombineFn<'_>) {
    let cur = acc.iter().map(|v| v.get()).collect();
    for (a, v) in acc.iter().zip(op(cur, vals)) {
        a.set(&v);
    }
}

fn u32_bytes(v: &[u32]) -> &[u8] {
    bytes_of(v)
}

fn u32_bytes_mut(v: &mut [u32]) -> &mut [u8] {
    // SAFETY: u32 storage viewed as bytes.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

/// A fold kernel of the grouped plan: each group folds `g * chunk` consecutive elements of the
/// `n`. Each of its `g` work items folds `chunk` of them: with [`Order::Kept`] a contiguous
/// run, so the order of `op` is kept; with [`Order::Any`] every `g`-th element from its own
/// position in the group's range, so neighbouring work items read neighbouring elements, the
/// access a GPU coalesces into whole memory transactions. The group then combines its items'
/// results through shared memory, neighbours first (strides 1, 2, 4, ...), and work item 0
/// stores the group's result at the group's index of each `partial` buffer. `inputs` declares
/// the input buffers and `element` hands the values of element `i` to its sink (or nothing,
/// for an element filtered out).
fn grouped_fold_kernel(
    name: &str,
    identity: &[ScalarValue],
    op: CombineFn<'_>,
    order: Order,
    g: u32,
    inputs: &dyn Fn(&KernelScope) -> Vec<Memory>,
    element: ElementFn<'_>,
) -> Result<Kernel> {
    let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
    Ok(Kernel::build_unvalidated(name, |k| {
        let cols = inputs(k);
        let outs: Vec<Memory> = declare_columns(k, "partial", &types, Access::Write);
        let tiles: Vec<Memory> = types
            .iter()
            .enumerate()
            .map(|(j, t)| k.shared_dyn(&format!("tile{j}"), Type::Scalar(*t), SharedLen::Static(g)))
            .collect();
        let n = bounded(k.value::<u32>("n"), &cols);
        let chunk = k.value::<u32>("chunk");
        let acc = identity_vars("acc", identity);
        let l = local_id(Axis::X);
        let fold = |i| element(&cols, i, &mut |vals| fold_into(&acc, vals, op));
        match order {
            Order::Kept => {
                let (start, end) = chunk_range(n, chunk);
                for_range(start, end, fold);
            }
            Order::Any => {
                let base = group_id(Axis::X) * (chunk * g);
                let end = (base + chunk * g).min(n);
                for_range_step(base + l, end, lit(g), fold);
            }
        }
        for (t, a) in tiles.iter().zip(&acc) {
            store_dyn(*t, l, &a.get());
        }
        barrier();
        // The values of every column at position `at` of the tiles.
        let row = |at: Val<u32>| -> Vec<AnyVal> {
            tiles
                .iter()
                .zip(&types)
                .map(|(t, ty)| load_dyn(*t, at, Type::Scalar(*ty)))
                .collect()
        };
        let stride = Var::new("stride", 1u32);
        loop_(|| {
            if_then(stride.get().ge(g), break_);
            let s = stride.get();
            if_then((l & (s * 2u32 - 1u32)).eq(0u32), || {
                for (t, v) in tiles.iter().zip(op(row(l), row(l + s))) {
                    store_dyn(*t, l, &v);
                }
            });
            barrier();
            stride.set(s * 2u32);
        });
        if_then(l.eq(0u32), || {
            for (o, v) in outs.iter().zip(row(lit(0u32))) {
                store_dyn(*o, group_id(Axis::X), &v);
            }
        });
    })?)
}

/// What [`Query::declare_scatter`] declares for a scatter kernel.
struct ScatterParams {
    cols: Vec<Memory>,
    offsets: Mem<u32>,
    outs: Vec<Memory>,
    /// The first element the work item scans.
    start: Val<u32>,
    /// One past the last element it scans.
    end: Val<u32>,
}

/// What [`Query::prepare`] found: how many elements a materialization writes, and what the
/// scatter needs when a filter decides that.
struct Materialize {
    selected: usize,
    /// `None` without a filter: the map kernel writes every element.
    filter: Option<FilterScatter>,
}

/// What a filter's ordered scatter needs from [`Query::prepare`].
struct FilterScatter {
    /// The per-group output offsets, then the total.
    offsets: Vec<u32>,
    /// Work items per group when the grouped plan counted.
    group: Option<u32>,
    /// The filter's plan: its count kernel, then its scatter kernel.
    kernels: Plan,
}

impl<'a, T: Scalar + Row> Query<'a, T> {
    /// Collects the elements into a new buffer on the device, in input order, without copying
    /// them to the host.
    pub fn to_buffer(mut self) -> Result<Buffer<T>> {
        let _span = self.plan_span("to_buffer");
        self.check()?;
        let plan = self.prepare()?;
        new_buffer(&self.ctx, plan.selected, |out| self.write(&plan, vec![out]))
    }

    /// Writes the elements, in input order, into the start of `out` instead of a new `Vec`,
    /// so a loop that reuses `out` allocates nothing; returns how many were written (the rest
    /// of `out` is left as it was). Fails with `OutputTooShort` when `out` has fewer elements.
    pub fn write_to(mut self, out: &mut [T]) -> Result<usize> {
        let _span = self.plan_span("write_to");
        self.check()?;
        let plan = self.prepare()?;
        let kept = check_output(out.len(), plan.selected)?;
        // SAFETY: initialized kiln scalars viewed as bytes the kernel may overwrite with other
        // valid values of the same type (kernels store only values of the element type).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                out[..kept].as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
                kept * std::mem::size_of::<T>(),
            )
        };
        self.write(&plan, vec![LaunchArg::Write(bytes)])?;
        Ok(kept)
    }

    /// Writes the elements, in input order, into the start of the device buffer `out`
    /// without leaving the device; returns how many were written (the rest of `out` keeps its
    /// contents). Fails with `OutputTooShort` when `out` has fewer elements, or `Unsupported`
    /// when `out` belongs to another context.
    pub fn write_to_buffer(mut self, out: &mut Buffer<T>) -> Result<usize> {
        let _span = self.plan_span("write_to_buffer");
        self.check()?;
        self.ctx.check_buffer(out)?;
        let plan = self.prepare()?;
        let kept = check_output(out.len(), plan.selected)?;
        self.write(&plan, vec![LaunchArg::Device(out.memory())])?;
        Ok(kept)
    }
}

/// Allocates `n` rows of `T` on the host, lets `write` fill them (one output argument per
/// column) and returns them.
fn collect_rows<T: Row>(
    n: usize,
    write: &mut dyn FnMut(Vec<LaunchArg<'_>>) -> Result<()>,
) -> Result<Vec<T>> {
    let mut types = Vec::new();
    T::column_types(&mut types);
    T::collect(n, &mut |outs| {
        let args = outs
            .iter_mut()
            .zip(&types)
            .map(|(o, t)| LaunchArg::Write(&mut o[..n * t.size() as usize]))
            .collect();
        write(args)?;
        Ok(n)
    })
}

/// A new buffer of `n` elements on `ctx`'s device that `write` fills (its output argument).
fn new_buffer<T: Scalar>(
    ctx: &Context,
    n: usize,
    write: impl FnOnce(LaunchArg<'_>) -> Result<()>,
) -> Result<Buffer<T>> {
    let backend = ctx.backend().clone();
    let memory = backend.alloc(n * T::TYPE.size() as usize)?;
    write(LaunchArg::Device(&*memory))?;
    Ok(Buffer::new(memory, backend, n))
}

/// `need` when an output of `len` elements holds that many; `OutputTooShort` otherwise.
fn check_output(len: usize, need: usize) -> Result<usize> {
    if len < need {
        return Err(Error::OutputTooShort { len, need });
    }
    Ok(need)
}

/// A row whose columns are known only at run time (internal terminals).
#[derive(Clone, Copy)]
struct ErasedRow;

impl<'a, T: Scalar + Numeric> Query<'a, T> {
    /// Sum of the elements (wrapping for integers; 0 when empty).
    pub fn sum(self) -> Result<T> {
        let v = self.reduce_values(
            vec![ScalarValue::zero(T::TYPE)],
            &|a, b| vec![bin(BinaryOp::Add, &a[0], &b[0])],
            Order::Any,
        )?;
        Ok(T::from_bits(v[0].to_bits()))
    }

    /// Product of the elements (wrapping for integers; 1 when empty).
    pub fn product(self) -> Result<T> {
        let one = ScalarValue::from_bits(
            T::TYPE,
            match T::TYPE {
                ScalarType::F32 => 1f32.to_bits() as u64,
                ScalarType::F64 => 1f64.to_bits(),
                _ => 1,
            },
        );
        let v = self.reduce_values(
            vec![one],
            &|a, b| vec![bin(BinaryOp::Mul, &a[0], &b[0])],
            Order::Any,
        )?;
        Ok(T::from_bits(v[0].to_bits()))
    }

    fn min_max(self, max: bool) -> Result<Option<T>> {
        if T::TYPE == ScalarType::F32 {
            return self.f32_min_max(max);
        }
        let identity = min_max_identity(T::TYPE, max);
        let fun = if max { MathFn::Max } else { MathFn::Min };
        let q = self.map_erased(|c| vec![c[0].clone(), lit_value(ScalarValue::U32(1))]);
        let v = q.reduce_values(
            vec![identity, ScalarValue::U32(0)],
            &|a, b| vec![math2(fun, &a[0], &b[0]), bin(BinaryOp::Add, &a[1], &b[1])],
            Order::Any,
        )?;
        Ok((v[1].to_bits() != 0).then(|| T::from_bits(v[0].to_bits())))
    }

    /// `min`/`max` of f32 elements as an integer reduction of [`f32_extreme_key`]s: one
    /// unsigned min or max per element, where the float rules for NaN and signed zeros take
    /// several operations. The key is decoded on the host.
    fn f32_min_max(self, max: bool) -> Result<Option<T>> {
        let q = self.map_erased(move |c| vec![f32_extreme_key(c[0].typed::<f32>(), max).erase()]);
        let (fun, empty) = if max {
            (MathFn::Max, 0)
        } else {
            (MathFn::Min, u32::MAX)
        };
        let v = q.reduce_values(
            vec![ScalarValue::U32(empty)],
            &|a, b| vec![math2(fun, &a[0], &b[0])],
            Order::Any,
        )?;
        let x = f32_from_extreme_key(v[0].to_bits() as u32, max);
        Ok(x.map(|x| T::from_bits(x.to_bits() as u64)))
    }

    /// Smallest element (`None` when empty). NaN is skipped unless every element is NaN.
    pub fn min(self) -> Result<Option<T>> {
        self.min_max(false)
    }

    /// Largest element (`None` when empty). NaN is skipped unless every element is NaN.
    pub fn max(self) -> Result<Option<T>> {
        self.min_max(true)
    }

    /// Arithmetic mean (`None` when empty), summed in `f64`, or in `f32` on a device without
    /// f64 arithmetic (`DeviceInfo::features`), such as wgpu on GL.
    pub fn average(self) -> Result<Option<f64>> {
        let (sum_ty, zero) = if self.ctx.device().features.f64 {
            (ScalarType::F64, ScalarValue::F64(0.0))
        } else {
            (ScalarType::F32, ScalarValue::F32(0.0))
        };
        let q = self.map_erased(move |c| {
            let x = expr_dyn(
                Expr::Cast {
                    arg: c[0].handle(),
                    to: sum_ty,
                },
                &[&c[0]],
                Type::Scalar(sum_ty),
            );
            vec![x, lit_value(ScalarValue::U32(1))]
        });
        let v = q.reduce_values(
            vec![zero, ScalarValue::U32(0)],
            &|a, b| {
                vec![
                    bin(BinaryOp::Add, &a[0], &b[0]),
                    bin(BinaryOp::Add, &a[1], &b[1]),
                ]
            },
            Order::Any,
        )?;
        let n = v[1].to_bits();
        let sum = match v[0] {
            ScalarValue::F32(s) => s as f64,
            ref s => f64::from_bits(s.to_bits()),
        };
        Ok((n != 0).then(|| sum / n as f64))
    }

    fn arg_best(self, max: bool) -> Result<Option<usize>> {
        if self.has_filter() {
            return Err(self.unsupported("argmin/argmax after filter (positions in a filtered sequence need a scan); use enumerate() before filter and fold"));
        }
        let mut q = self.map_erased(|c| c);
        q.stages.push(Stage::Enumerate);
        let none = ScalarValue::U32(u32::MAX);
        let better = |a: Vec<AnyVal>, b: Vec<AnyVal>| {
            let (ai, av, bi, bv) = (
                a[0].typed::<u32>(),
                a[1].typed::<T>(),
                b[0].typed::<u32>(),
                b[1].typed::<T>(),
            );
            let a_none = ai.eq(u32::MAX);
            let b_some = bi.ne(u32::MAX);
            let strictly = if max { bv.gt(av) } else { bv.lt(av) };
            let earlier = bi.lt(ai);
            let tie = bv.eq(av).and(earlier);
            // Only floats have NaNs: comparing an integer with itself would be a compiler
            // warning on every OpenCL build (and PoCL prints those).
            let better = match T::TYPE.is_float() {
                true => {
                    let (a_nan, b_nan) = (av.ne(av), bv.ne(bv));
                    let nan_rule = a_nan.and(b_nan.not()).or(a_nan.and(b_nan).and(earlier));
                    strictly.or(tie).or(nan_rule)
                }
                false => strictly.or(tie),
            };
            let take_b = a_none.or(b_some.and(better));
            let c = take_b.erase();
            vec![select_dyn(&c, &b[0], &a[0]), select_dyn(&c, &b[1], &a[1])]
        };
        let v = q.reduce_values(vec![none, ScalarValue::zero(T::TYPE)], &better, Order::Any)?;
        let i = v[0].to_bits() as u32;
        Ok((i != u32::MAX).then_some(i as usize))
    }

    /// Index of the first smallest element (`None` when empty; NaN counts as largest).
    pub fn argmin(self) -> Result<Option<usize>> {
        self.arg_best(false)
    }

    /// Index of the first largest element (`None` when empty; NaN counts as smallest).
    pub fn argmax(self) -> Result<Option<usize>> {
        self.arg_best(true)
    }
}
