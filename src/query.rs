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
//! on a device with a loop limit: [`DeviceProfile::chunk`]), which
//! fits the CPU backend (one tight loop per chunk) and fixes the reduction order for a given
//! input, so results are the same on every run.

use crate::buffer::{Buffer, BufferSlice};
use crate::context::Context;
use crate::error::{zeroed_host_vec, Error, Result};
use crate::plan::{
    chunks_of, grouped_groups, read_value, temp_bindings, Binding, DeviceProfile, HostColumn,
    Place, Plan, Rows, Run, Source, Step, CHUNK, ITEM_CHUNK,
};
use crate::plan_cache::{CompiledPlan, Fingerprint};
use crate::row::{IntoRow, Row};
use kiln_backend::{DeviceMemory, Grid, LaunchArg};
use kiln_ir::*;
use std::marker::PhantomData;
use std::sync::Arc;

mod concat;
mod dynamic;
mod expand;
mod explain;
mod fuse;
mod group;
mod histogram;
mod join;
mod materialize;
mod reduce;
mod scan;
mod sort;
mod split;
mod top;
mod window;
use concat::Piece;
pub use dynamic::{Column, Combine, DynGroupBy, DynQuery};
use explain::device_line;
use fuse::Inputs;
pub use group::{Distinct, GroupBy};
use materialize::{collect_rows, new_buffer};
use reduce::{add_columns, fold_into, identity_vars, min_max_identity, one_u32};
pub use scan::Scan;
pub use sort::{SortKey, Sorted};

/// Elements per work item of a map in the grouped plan (see [`Query::map_kernel`]).
const MAP_ITEMS: u32 = 4;
/// Independent accumulators per work item in reductions.
const LANES: u32 = 4;
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
/// Largest input a query accepts: `i32::MAX` elements.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// assert_eq!(ctx.range(5).count()?, 5);
/// let past = ctx.range(kiln::MAX_LEN + 1).count();
/// assert!(matches!(past, Err(kiln::Error::TooLarge { .. })), "{past:?}");
/// # Ok::<(), kiln::Error>(())
/// ```
pub const MAX_LEN: usize = i32::MAX as usize;

type MapFn<'a> = Box<dyn Fn(Vec<AnyVal>) -> Vec<AnyVal> + 'a>;
type FilterFn<'a> = Box<dyn Fn(Vec<AnyVal>) -> Val<bool> + 'a>;
type CombineFn<'b> = &'b dyn Fn(Vec<AnyVal>, Vec<AnyVal>) -> Vec<AnyVal>;
/// Turns each kept row into the values a reduction folds.
type ProjectFn<'b> = &'b dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>;
/// What a reduction folds and how.
struct Fold<'b> {
    /// The identity of `op`, one value per folded column.
    identity: &'b [ScalarValue],
    /// The associative combining function.
    op: CombineFn<'b>,
    /// A cheaper `op` for folding one row into an accumulator that holds only rows before it
    /// (every partials kernel folds each accumulator's rows in increasing position), or `None`
    /// to fold rows with `op`.
    step: Option<CombineFn<'b>>,
    /// Turns each kept row into the values folded.
    project: ProjectFn<'b>,
    /// Whether the elements must be combined in input order.
    order: Order,
}

impl<'b> Fold<'b> {
    /// The fold of `project` of each row into `identity` with `op`, rows too.
    fn new(
        identity: &'b [ScalarValue],
        op: CombineFn<'b>,
        project: ProjectFn<'b>,
        order: Order,
    ) -> Self {
        Fold {
            identity,
            op,
            step: None,
            project,
            order,
        }
    }

    /// What folds one row into an accumulator of earlier rows: `step`, else `op`.
    fn row_op(&self) -> CombineFn<'b> {
        self.step.unwrap_or(self.op)
    }
}
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
    /// `take`/`skip`: keeps the rows whose source index is in `start..end` (a filter on the
    /// index; only filters change positions, and none comes before it).
    Window {
        start: u32,
        end: u32,
    },
    /// `reverse`: the stages before it (maps, `enumerate` and `zip`: a stage that drops rows
    /// runs first, see [`Query::kept_rows`]) see row `len - 1 - i` at position `i`.
    Reverse,
    /// `flat_map`: each row stands for `max` positions; the stages before it see row
    /// `i / max` at position `i`, and it appends `i % max` to the row's values (a filter
    /// after it keeps those below the row's count).
    Expand {
        max: u32,
    },
}

impl Stage<'_> {
    /// True for a stage that may drop rows: a filter, `take`, `skip` or `flat_map`.
    fn drops_rows(&self) -> bool {
        matches!(
            self,
            Stage::Filter(_) | Stage::Window { .. } | Stage::Expand { .. }
        )
    }

    /// True for a filter or a `flat_map` (which keeps positions like a filter).
    fn is_filter(&self) -> bool {
        matches!(self, Stage::Filter(_) | Stage::Expand { .. })
    }

    fn name(&self) -> &'static str {
        match self {
            Stage::Map(_) => "map",
            Stage::Filter(_) => "filter",
            Stage::Enumerate => "enumerate",
            Stage::Zip(_) => "zip",
            Stage::Window { .. } => "take/skip",
            Stage::Reverse => "reverse",
            Stage::Expand { .. } => "flat_map",
        }
    }
}

/// A lazy query over host slices or [`Buffer`]s of one context: stages (`map`, `filter`,
/// `enumerate`, `zip`, `take`, `skip`; their closures build kernel code from [`Val`]s, so comparisons are
/// methods such as `x.gt(0.0)` and casts are `x.cast::<f32>()`) build up a description and nothing runs until a terminal (`to_vec`,
/// `sum`, `sort`, `group_by`, ...), which fuses the stages into the kernels of one plan,
/// compiles them (or takes them from the caches) and runs them on the context's device.
/// A query's first error (a closure that does not build, an input past [`MAX_LEN`]) is
/// returned by its terminal.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let prices = [12.5f32, 80.0, 3.25, 49.5, 101.0];
/// let qty = [3u32, 1, 10, 2, 1];
/// // Revenue of the orders of at most 50.0 a piece, computed in one fused pass.
/// let revenue = ctx
///     .from(&prices)
///     .zip(&qty)
///     .filter(|(p, _)| p.le(50.0))
///     .map(|(p, q)| p * q.cast::<f32>())
///     .sum()?;
/// let rust: f32 = prices
///     .iter()
///     .zip(&qty)
///     .filter(|(p, _)| **p <= 50.0)
///     .map(|(p, q)| p * *q as f32)
///     .sum();
/// assert_eq!(revenue, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Query<'a, T> {
    ctx: Context,
    len: usize,
    columns: Vec<Input<'a>>,
    base_columns: usize,
    stages: Vec<Stage<'a>>,
    error: Option<Error>,
    /// What ran when the query was built (a join), one line each, for `explain`.
    ran: Vec<String>,
    _t: PhantomData<fn() -> T>,
}

/// One input column of a query: where it is, the type of its values and how they are laid
/// out.
#[derive(Clone)]
struct Input<'a> {
    source: Source<'a>,
    ty: ScalarType,
    layout: Layout,
    piece: Piece,
}

/// How an input column holds its values.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// One value of its type per element.
    Values,
    /// One bit per element, least significant bit first, from bit `shift` (below 8) of its
    /// first byte (Arrow's validity bitmaps); element `i` reads as a `u8` 0 or 1.
    Bits { shift: u32 },
}

impl<'a> Input<'a> {
    /// A column of one value of `ty` per element.
    fn values(source: Source<'a>, ty: ScalarType) -> Input<'a> {
        Input {
            source,
            ty,
            layout: Layout::Values,
            piece: Piece::Whole,
        }
    }
}

/// The bytes of `xs`, kiln values (scalars, `Vector`s, `IrStruct`s).
pub(crate) fn bytes_of<T: IrType>(xs: &[T]) -> &[u8] {
    // SAFETY: kiln values are plain data without padding (scalars, `Vector`, `IrStruct`s,
    // whose contract rules padding out), so every byte is initialized.
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

/// `v` converted to `to`.
fn cast_dyn(v: &AnyVal, to: ScalarType) -> AnyVal {
    expr_dyn(
        Expr::Cast {
            arg: v.handle(),
            to,
        },
        &[v],
        Type::Scalar(to),
    )
}

pub(crate) fn select_dyn(c: &AnyVal, a: &AnyVal, b: &AnyVal) -> AnyVal {
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

/// Work items per group of the chunked plan's folds in `order`.
fn items_per_chunk(order: Order) -> u32 {
    match order {
        Order::Kept => 1,
        Order::Any => QUAD,
    }
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
/// are handed on as well as the IR that computes them. The outputs share one name: a
/// fingerprint is compared, never compiled, and its parameters' order tells them apart.
fn store_outputs(k: &KernelScope, vals: &[AnyVal]) {
    let at = lit(0u32);
    for v in vals {
        let out = k.buffer_dyn("out", v.ty.clone(), Access::Write);
        store_dyn(out, at, v);
    }
}

impl Context {
    /// Starts a query over a host slice. A slice of scalars is read where it is; a slice of
    /// rows of several columns (tuples, `Option`s, `#[derive(kiln::Value)]` structs) is first
    /// split into one column per scalar (struct-of-arrays), a copy the query holds. Inputs
    /// longer than [`MAX_LEN`] make the terminal fail with [`Error::TooLarge`], and a copy
    /// that does not fit in host memory with [`Error::HostOutOfMemory`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.5f32, 2.0, 3.5];
    /// assert_eq!(ctx.from(&xs).sum()?, 7.0);
    /// let pairs = [(1u32, 0.5f32), (2, 1.5), (3, -1.0)];
    /// assert_eq!(ctx.from(&pairs).filter(|(_, w)| w.gt(0.0)).map(|(k, _)| k).sum()?, 3);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn from<'a, T: Row>(&self, xs: &'a [T]) -> Query<'a, T> {
        if let Some(e) = too_large(xs.len()) {
            return Query::failed(self, e);
        }
        let sources = match T::as_column(xs) {
            Some(bytes) => vec![Source::Host(bytes)],
            None => match split_columns(xs) {
                Ok(columns) => columns
                    .into_iter()
                    .map(|c| Source::Copied(Arc::new(c)))
                    .collect(),
                Err(e) => return Query::failed(self, e),
            },
        };
        Query::over_sources(self, sources, xs.len())
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
            ran: Vec::new(),
            _t: PhantomData,
        }
    }
}

/// The columns of `xs`, one per scalar of `T`.
fn split_columns<T: Row>(xs: &[T]) -> Result<Vec<HostColumn>> {
    let mut columns = Query::<T>::out_types()
        .iter()
        .map(|t| HostColumn::zeroed(xs.len() * t.size() as usize))
        .collect::<Result<Vec<_>>>()?;
    let mut views: Vec<&mut [u8]> = columns.iter_mut().map(HostColumn::bytes_mut).collect();
    T::write_columns(xs, &mut views);
    Ok(columns)
}

/// `TooLarge` for a source of `len` elements past [`MAX_LEN`].
fn too_large(len: usize) -> Option<Error> {
    (len > MAX_LEN).then_some(Error::TooLarge { len, max: MAX_LEN })
}

impl<'a, T: Row> Query<'a, T> {
    /// A query over the first `len` rows of `columns` (one per column of `T`), device memory
    /// of `ctx`'s backend (the planner's own intermediates, which are no `Buffer`).
    fn over_device(ctx: &Context, columns: &[&'a dyn DeviceMemory], len: usize) -> Query<'a, T> {
        Self::over_sources(ctx, columns.iter().map(|m| Source::Device(*m)), len)
    }

    /// A query over the first `len` rows of `sources`, one per column of `T`.
    fn over_sources(
        ctx: &Context,
        sources: impl IntoIterator<Item = Source<'a>>,
        len: usize,
    ) -> Query<'a, T> {
        let columns: Vec<Input<'a>> = sources
            .into_iter()
            .zip(Self::out_types())
            .map(|(s, t)| Input::values(s, t))
            .collect();
        Query {
            ctx: ctx.clone(),
            len,
            base_columns: columns.len(),
            columns,
            stages: Vec::new(),
            error: None,
            ran: Vec::new(),
            _t: PhantomData,
        }
    }
}

impl<'a, T: Row> Query<'a, T> {
    /// A query that failed with `error` before it had rows: its terminals return the error.
    fn failed(ctx: &Context, error: Error) -> Query<'a, T> {
        let mut q = Self::over_sources(ctx, [], 0);
        q.error = Some(error);
        q
    }
}

impl<T: Row> Query<'static, T> {
    /// A query of `len` rows of `T` whose columns are not given: for the plan and kernels of
    /// a terminal that another plan inlines, binding its inputs to memory of its own.
    fn shape_only(ctx: &Context, len: usize) -> Query<'static, T> {
        let columns: Vec<Input<'static>> = Self::out_types()
            .into_iter()
            .map(|t| Input::values(Source::Host(&[]), t))
            .collect();
        Query {
            ctx: ctx.clone(),
            len,
            base_columns: columns.len(),
            columns,
            stages: Vec::new(),
            error: None,
            ran: Vec::new(),
            _t: PhantomData,
        }
    }
}

impl<'a, T> Query<'a, T> {
    /// Number of elements in the source (before any filter or `flat_map`); after a stage
    /// that numbers the rows a filter kept (see [`Query::enumerate`]), the number of those
    /// rows.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let q = ctx.from(&[1i32, -2, 3]).filter(|x| x.gt(0));
    /// assert_eq!(q.source_len(), 3);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn source_len(&self) -> usize {
        self.len / self.spread_from(0) as usize
    }

    fn retype<U>(self) -> Query<'a, U> {
        Query {
            ctx: self.ctx,
            len: self.len,
            columns: self.columns,
            base_columns: self.base_columns,
            stages: self.stages,
            error: self.error,
            ran: self.ran,
            _t: PhantomData,
        }
    }

    /// The `plan` tracing span of a terminal, entered until the returned guard drops.
    fn plan_span(&self, terminal: &'static str) -> tracing::span::EnteredSpan {
        tracing::debug_span!("plan", terminal, n = self.len, stages = self.stages.len()).entered()
    }

    /// True when a stage drops rows: a filter, `take` or `skip`.
    fn has_filter(&self) -> bool {
        self.stages.iter().any(Stage::drops_rows)
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
        fold: Option<&Fold<'_>>,
    ) -> Option<Fingerprint> {
        fingerprint_of(plan, settings, |k| {
            let cols = self.declare_inputs(k).all;
            self.element(&cols, global_id(Axis::X), &mut |vals| {
                let folds = fold.map_or(0, |f| f.identity.len());
                let mut outs = Vec::with_capacity(vals.len() + 2 * folds);
                outs.extend_from_slice(&vals);
                if let Some(f) = fold {
                    let start: Vec<AnyVal> = f.identity.iter().map(|v| lit_value(*v)).collect();
                    let folded = (f.project)(vals);
                    if let Some(step) = f.step {
                        outs.extend(step(start.clone(), folded.clone()));
                    }
                    outs.extend((f.op)(start, folded));
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
        fold: Option<&Fold<'_>>,
        build: impl FnOnce() -> Result<Vec<Kernel>>,
    ) -> Result<CompiledPlan> {
        self.ctx.plan(self.fingerprint(plan, settings, fold), build)
    }

    /// The compiled kernels of `plan`, made by `build` (see [`Self::planned`]); `fold` is the
    /// reduction's, if the plan folds.
    fn compiled(
        &self,
        plan: &Plan,
        fold: Option<&Fold<'_>>,
        build: impl FnOnce() -> Result<Vec<Kernel>>,
    ) -> Result<CompiledPlan> {
        self.planned(plan.key.0, &plan.key.1, fold, build)
    }

    /// The input columns, as a plan's executor reads them.
    fn sources(&self) -> Vec<Source<'a>> {
        self.columns.iter().map(|c| c.source.clone()).collect()
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
        let mut run = self.prepare()?;
        let rows = alloc_rows(&self.ctx, &Self::out_types(), run.rows())?;
        run.finish(
            &self.sources(),
            rows.iter().map(|m| LaunchArg::Device(&**m)).collect(),
        )?;
        Ok((rows, run.rows()))
    }

    /// Applies `f` to every element. `f` receives the element as IR values (`Val<T>`, or a
    /// tuple for zipped/enumerated queries) and returns a `Val` or a tuple of them.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let ys = ctx.from(&[1.0f32, 2.0, 3.0]).map(|x| x * 2.0 + 1.0).to_vec()?;
    /// assert_eq!(ys, [3.0, 5.0, 7.0]);
    /// // A tuple out gives rows of two columns.
    /// let pairs = ctx.from(&[1u32, 2]).map(|x| (x, x * x)).to_vec()?;
    /// assert_eq!(pairs, [(1, 1), (2, 4)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn map<O: IntoRow, F: Fn(T::Vals) -> O + 'a>(self, f: F) -> Query<'a, O::Row> {
        self.map_erased(move |cols| {
            let mut out = Vec::new();
            f(T::vals(&mut cols.into_iter())).into_handles(&mut out);
            out
        })
        .retype()
    }

    /// Keeps the elements for which `pred` is true, in their input order.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let kept = ctx.from(&[5i32, -1, 7, 0, -3]).filter(|x| x.ge(0)).to_vec()?;
    /// assert_eq!(kept, [5, 7, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn filter<F: Fn(T::Vals) -> Val<bool> + 'a>(mut self, pred: F) -> Query<'a, T> {
        let id = self.stages.len() as u32;
        self.stages.push(Stage::Filter(Box::new(move |cols| {
            let v = T::vals(&mut cols.into_iter());
            constants::user_code(id, || pred(v))
        })));
        self
    }

    /// Pairs every element with its position (`u32`), as `Iterator::enumerate`: its index in
    /// the source, or, after a filter, `take` or `skip`, among the rows kept. In that case the
    /// query so far runs when `enumerate` is called (a count, a scan and an ordered scatter,
    /// as `to_buffer` would) into device columns that the query holds, and the stages after
    /// read them; an error of that run is the terminal's.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [0.5f32, 3.0, 1.5, 7.0];
    /// let big = ctx.from(&xs).enumerate().filter(|(_, x)| x.gt(1.0)).map(|(i, _)| i).to_vec()?;
    /// assert_eq!(big, [1, 2, 3]);
    /// // Numbered after the filter: positions among the rows it keeps.
    /// let ranks = ctx.from(&xs).filter(|x| x.gt(1.0)).enumerate().to_vec()?;
    /// assert_eq!(ranks, [(0, 3.0), (1, 1.5), (2, 7.0)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn enumerate(self) -> Query<'a, (u32, T)> {
        let mut q = self.kept_rows(Stage::drops_rows);
        q.stages.push(Stage::Enumerate);
        q.retype()
    }

    /// Reverses the order of the rows, as `Iterator::rev` (LINQ's `Reverse`): the stages
    /// after it see the last row first. Over a source, and after maps, `enumerate` and `zip`,
    /// it costs nothing: each row is read where it lies. After a filter, `take` or `skip` the
    /// rows kept are run into device columns first, as for [`Query::enumerate`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1u32, 2, 3, 4, 5];
    /// assert_eq!(ctx.from(&xs).reverse().to_vec()?, [5, 4, 3, 2, 1]);
    /// // Positions after it count from the end; indices before it are the source's.
    /// let last_two = ctx.from(&xs).enumerate().reverse().take(2).to_vec()?;
    /// assert_eq!(last_two, [(4, 5), (3, 4)]);
    /// let odd = ctx.from(&xs).filter(|x| (x % 2u32).eq(1u32)).reverse().enumerate().to_vec()?;
    /// assert_eq!(odd, [(0, 5), (1, 3), (2, 1)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn reverse(self) -> Query<'a, T> {
        let mut q = self.kept_rows(Stage::drops_rows);
        q.stages.push(Stage::Reverse);
        q
    }

    /// Pairs every element with the element of `other` at the same position. Both must have
    /// the same length ([`Error::LengthMismatch`] otherwise, where Rust's `zip` would stop at
    /// the shorter). After a filter, `take` or `skip` the positions are among the rows kept,
    /// which the query runs into device columns when `zip` is called (see
    /// [`Query::enumerate`]), and the length compared is their number.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (a, b) = ([1.0f32, 2.0, 3.0], [4.0f32, 5.0, 6.0]);
    /// assert_eq!(ctx.from(&a).zip(&b).map(|(x, y)| x * y).sum()?, 32.0);
    /// // The two rows above 1.0, weighted by the two weights.
    /// let w = [10.0f32, 100.0];
    /// assert_eq!(ctx.from(&a).filter(|x| x.gt(1.0)).zip(&w).map(|(x, y)| x * y).sum()?, 320.0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn zip<U: Scalar>(self, other: &'a [U]) -> Query<'a, (T, U)> {
        let column = Input::values(Source::Host(bytes_of(other)), U::TYPE);
        self.zip_column(column, |_| other.len())
    }

    /// Pairs each element `i` with bit `offset + i` of the bitmap `bits` (least significant
    /// bit of each byte first, as Arrow lays out validity), as a `u8` 0 or 1. The kernel
    /// reads the bitmap where it is, a byte per eight elements. Fails at the terminal with
    /// `LengthMismatch` when `bits` holds fewer than `offset + len` bits (`len`: the rows
    /// kept, after a filter, as for [`Query::zip`]).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let set = ctx.from(&[10u32, 20, 30]).zip_bits(&[0b1011_0000], 4).to_vec()?;
    /// assert_eq!(set, [(10, 1), (20, 1), (30, 0)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn zip_bits(self, bits: &'a [u8], offset: usize) -> Query<'a, (T, u8)> {
        let bytes = bits.get(offset / 8..).unwrap_or(&[]);
        let shift = (offset % 8) as u32;
        let held = (bytes.len() * 8).saturating_sub(shift as usize);
        let column = Input {
            source: Source::Host(bytes),
            ty: ScalarType::U8,
            layout: Layout::Bits { shift },
            piece: Piece::Whole,
        };
        // Enough bits are as good as an equal length; fewer name how many there are.
        self.zip_column(column, |kept| held.min(kept))
    }

    /// Like [`Query::zip`], with a column in device memory: a `&Buffer` or a
    /// [`BufferSlice`] of one.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (a, b) = (ctx.upload(&[1u32, 2, 3])?, ctx.upload(&[10u32, 20, 30])?);
    /// let sums = ctx.from_buffer(&a).zip_buffer(&b).map(|(x, y)| x + y).to_vec()?;
    /// assert_eq!(sums, [11, 22, 33]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn zip_buffer<U: Scalar>(self, other: impl Into<BufferSlice<'a, U>>) -> Query<'a, (T, U)> {
        let other = other.into();
        let len = other.len();
        let foreign = self.ctx.check_device(other.backend()).err();
        let column = Input::values(Source::Owned(other.memory().clone()), U::TYPE);
        let mut q = self.zip_column(column, |_| len);
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

    /// Pairs each element with the element of `column` at the same index; `len` gives the
    /// column's length from the number of rows kept.
    fn zip_column<U>(
        self,
        column: Input<'a>,
        len: impl FnOnce(usize) -> usize,
    ) -> Query<'a, (T, U)> {
        let mut q = self.kept_rows(Stage::drops_rows);
        let len = len(q.len);
        if q.error.is_none() && len != q.len {
            q.error = Some(Error::LengthMismatch {
                left: q.len,
                right: len,
            });
        }
        q.columns.push(column);
        q.stages.push(Stage::Zip(q.columns.len() - 1));
        q.retype()
    }

    fn out_types() -> Vec<ScalarType> {
        let mut t = Vec::new();
        T::column_types(&mut t);
        t
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

/// Device columns for `n` rows of `types`, one allocation per column.
fn alloc_rows(ctx: &Context, types: &[ScalarType], n: usize) -> Result<Columns> {
    types
        .iter()
        .map(|t| Ok(ctx.backend().alloc(n * t.size() as usize)?))
        .collect()
}

/// One variable per column, named `name` and the column's number, holding `vals`.
fn column_vars(name: &str, vals: &[AnyVal]) -> Vec<AnyVar> {
    vals.iter()
        .enumerate()
        .map(|(j, v)| AnyVar::new(&format!("{name}{j}"), v))
        .collect()
}

fn u32_bytes_mut(v: &mut [u32]) -> &mut [u8] {
    // SAFETY: u32 storage viewed as bytes.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

/// A row whose columns are known only at run time (internal terminals).
#[derive(Clone, Copy)]
struct ErasedRow;
