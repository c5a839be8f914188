//! Groups: `ctx.from(&ids).zip(&xs).group_by(|(id, _)| id).sum(|(_, x)| x)`, one fold of the
//! rows of each distinct key, and `distinct()`, the distinct elements. Both run on the device,
//! built from the sort and the scan:
//!
//! 1. the rows become (key, value) pairs, sorted by key with the stable radix sort, so each
//!    key's rows are one run, in input order;
//! 2. one kernel marks where each run starts and ends (keys compared by their ordered bits,
//!    so float keys group as `f32::total_cmp` orders them: -0 apart from +0, each NaN bit
//!    pattern apart);
//! 3. a segmented scan folds the values with the user's `op`, starting again at every run's
//!    start: the pairs (starts here, value) combine as `(a.start | b.start, if b.start { b.value }
//!    else { op(a.value, b.value) })`, which is associative when `op` is;
//! 4. a filter keeps each run's last row, which holds the run's key and its whole fold.
//!
//! `distinct` skips the scan. Results come in ascending key order.
//!
//! A key may be a tuple of values: its parts are columns of their own, sorted together (as
//! `sort_by_key` sorts by a tuple) and compared part by part when marking runs.
//!
//! Integer keys that span few values (at most [`DENSE_KEYS`], found by a min/max reduction
//! first; 8-bit keys always do and need no reduction; one key spanning up to 2^20 values
//! where plans are chunked, [`dense_key_limit`]) take a shorter path without a sort
//! (`group/dense.rs`); so do tuples of integers whose parts' spans multiply to at most
//! [`DENSE_KEYS`] (`group/tuple.rs`), and `count()` by one key spanning up to 2^20 values,
//! a histogram (`group/counts.rs`).
//!
//! `explain` (`group/explain.rs`) prints the plans of both paths without running either.

use super::*;

mod counts;
mod dense;
mod explain;
mod tuple;

use counts::{count_single_key, Counted, HISTOGRAM_KEYS};
use dense::{dense_chunk_on, dense_plan, DENSE_KEYS, RANGES_PER_REDUCTION};
pub(super) use dense::{dense_fold_values, dense_key_limit, key_ranges};
use tuple::dense_fold_tuple;

/// How a grouping's fold combines values, which decides whether its dense plan may add them
/// in any order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum FoldOp {
    /// An associative operation, folded in input order.
    InOrder,
    /// Wrapping integer addition: every order gives the same result.
    Adds,
}

/// Flag bit of a row that starts a run of equal keys.
const RUN_START: u32 = 1;
/// Flag bit of a row that ends one.
const RUN_END: u32 = 2;

/// The rows of a query grouped by a key (of type `K`: a number, or a tuple of numbers), from
/// [`Query::group_by`]. Nothing runs until one of its folds (`count`, `sum`, `min`, `max`,
/// `average`, `fold`).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (region, sales) = ([2u32, 0, 2, 1, 0], [10.0f32, 3.0, 5.0, 7.0, 1.0]);
/// let rows = ctx.from(&region).zip(&sales);
/// let per_region = rows.group_by(|(r, _)| r).sum(|(_, s)| s)?;
/// assert_eq!(per_region, [(0, 4.0), (1, 7.0), (2, 15.0)]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct GroupBy<'a, K, T: Row> {
    query: Query<'a, T>,
    /// The key of a row, from its column values: the value of each part of the key.
    key: MapFn<'a>,
    _key: PhantomData<K>,
}

/// The distinct elements of a query, from [`Query::distinct`]. Nothing runs until
/// [`Distinct::to_vec`] or [`Distinct::to_buffer`].
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let tags = [7u16, 3, 7, 7, 1, 3];
/// let mut rust = tags.to_vec();
/// rust.sort();
/// rust.dedup();
/// assert_eq!(ctx.from(&tags).distinct().to_vec()?, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Distinct<'a, T> {
    query: Query<'a, T>,
}

impl<'a, T: Row> Query<'a, T> {
    /// Groups the rows (those a filter keeps) by `key`; a fold of the returned [`GroupBy`]
    /// gives one `(key, folded value)` pair per distinct key, in ascending key order (floats
    /// in `f32::total_cmp` order, each NaN bit pattern its own key). The key is a value or a
    /// tuple of two to four ([`SortKey`]); tuple keys are equal when every part is, and come in
    /// the order Rust compares tuples. The rows of a key are folded in input order, so `op`
    /// need not be commutative and float results are the same on every run.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (shop, sold) = ([3u32, 1, 3, 2, 1], [5.0f32, 1.0, 2.0, 4.0, 0.5]);
    /// let sales = ctx.from(&shop).zip(&sold).group_by(|(s, _)| s).sum(|(_, x)| x)?;
    /// assert_eq!(sales, [(1, 1.5), (2, 4.0), (3, 7.0)]);
    ///
    /// let (day, hour) = ([2u16, 1, 2, 2], [9i8, 9, 9, 17]);
    /// let visits = ctx.from(&day).zip(&hour).group_by(|(d, h)| (d, h)).count()?;
    /// assert_eq!(visits, [((1, 9), 1), ((2, 9), 2), ((2, 17), 1)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn group_by<K: SortKey + IntoRow, F: Fn(T::Vals) -> K + 'a>(
        self,
        key: F,
    ) -> GroupBy<'a, K::Row, T> {
        GroupBy {
            query: self,
            key: Box::new(move |cols| {
                let v = T::vals(&mut cols.into_iter());
                let mut parts = Vec::new();
                constants::user_code(KEY_CLOSURE, || key(v)).parts(&mut parts);
                parts
            }),
            _key: PhantomData,
        }
    }
}

impl<'a, T: Numeric + Row> Query<'a, T> {
    /// The distinct elements (of those a filter keeps), in ascending order; floats are equal
    /// when their bits are (so -0 and +0 both stay, as do NaNs of different bits), in
    /// `f32::total_cmp` order. Nothing runs until the returned [`Distinct`]'s `to_vec` or
    /// `to_buffer`. `to_vec` of integers spanning at most 2^20 values (largest minus
    /// smallest plus one) counts them as `group_by(|x| x).count()` does, without a sort.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[3u32, 1, 3, 2, 1]).distinct().to_vec()?, [1, 2, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn distinct(self) -> Distinct<'a, T> {
        Distinct { query: self }
    }
}

/// Marks the start and end of every run of equal keys in `keys` (sorted, `n` of them, a
/// column of each of `types` per part of the key): flag `i` gets [`RUN_START`] when key `i`
/// differs from key `i - 1` or `i` is 0, plus [`RUN_END`] when it differs from key `i + 1` or
/// `i` is the last. Returns the flags, one `u32` each.
fn mark_runs(
    ctx: &Context,
    keys: &[Arc<dyn DeviceMemory>],
    types: &[ScalarType],
    n: usize,
) -> Result<Arc<dyn DeviceMemory>> {
    let plan = runs_plan(&ctx.profile(), types.len(), n);
    let fingerprint = fingerprint_of(plan.key.0, &plan.key.1, |k| {
        let zeros: Vec<AnyVal> = types
            .iter()
            .map(|t| lit_value(ScalarValue::zero(*t)))
            .collect();
        store_outputs(k, &zeros)
    });
    let kernels = ctx.plan(fingerprint, || Ok(vec![runs_kernel(types)?]))?;
    let flags = ctx.backend().alloc(n * 4)?;
    let keys: Vec<Source> = keys.iter().map(|k| Source::Device(&**k)).collect();
    Run::start(ctx, plan, kernels, &keys)?.finish(&keys, vec![LaunchArg::Device(&*flags)])?;
    Ok(flags)
}

/// The plan of [`mark_runs`] over `n` keys of `parts` columns: one work item per key.
fn runs_plan(profile: &DeviceProfile, parts: usize, n: usize) -> Plan {
    let mut plan = Plan::new(
        "runs",
        *profile,
        ("query_group_runs", [0; 3]),
        Rows::Known(n),
    );
    let runs = plan.kernel("query_group_runs");
    let b = (0..parts)
        .map(Binding::Input)
        .chain([Binding::Output(0), Binding::Scalar("n", n as u32)]);
    plan.launch(runs, profile.per_element_grid(n), b);
    plan
}

/// The kernel of [`mark_runs`] for keys of a part of each of `types`.
fn runs_kernel(types: &[ScalarType]) -> Result<Kernel> {
    Ok(Kernel::build_unvalidated("query_group_runs", |k| {
        let keys = declare_columns(k, "keys", types, Access::Read);
        let flags = k.buffer::<u32>("flags", Access::Write);
        let n = k.value::<u32>("n");
        let i = global_id(Axis::X);
        let memories: Vec<Memory> = keys.iter().copied().chain([flags.memory()]).collect();
        if_then(i.lt(bounded(n, &memories)), || {
            // Each part's ordered bits, so float parts compare by their bits.
            let bits = |j: Val<u32>| -> Vec<AnyVal> {
                keys.iter()
                    .zip(types)
                    .map(|(m, t)| {
                        let part = load_dyn(*m, j, Type::Scalar(*t));
                        super::sort::ordered_bits(&part, *t, false)
                    })
                    .collect()
            };
            let here = bits(i);
            let differs = |j: Val<u32>| {
                bits(j)
                    .iter()
                    .zip(&here)
                    .map(|(b, h)| bin(BinaryOp::Ne, b, h).typed::<bool>())
                    .reduce(|a, b| a.or(b))
                    .expect("a key has a part")
            };
            let start = i.eq(0u32).or(differs(i.max(1u32) - 1u32));
            let end = (i + 1u32).eq(n).or(differs((i + 1u32).min(n - 1u32)));
            flags.store(
                i,
                select(start, RUN_START, 0u32) | select(end, RUN_END, 0u32),
            );
        });
    })?)
}

/// The rows of `flagged` (the flags of [`mark_runs`], then the columns of `R`) whose flags
/// have [`RUN_END`], without the flags.
fn run_ends<R: Row>(mut flagged: Query<'_, (u32, R)>) -> Query<'_, R> {
    flagged.stages.push(Stage::Filter(Box::new(|c| {
        (c[0].typed::<u32>() & RUN_END).ne(0u32)
    })));
    flagged.map_erased(|c| c[1..].to_vec()).retype()
}

/// The position and key of each row of `flagged` (the flags of [`mark_runs`] and the sorted
/// keys, a column per part) that ends a run.
fn run_end_positions<K: Row>(flagged: Query<'_, (u32, K)>) -> Query<'_, (u32, K)> {
    let mut ends = flagged.enumerate();
    ends.stages.push(Stage::Filter(Box::new(|c| {
        (c[1].typed::<u32>() & RUN_END).ne(0u32)
    })));
    ends.map_erased(|c| {
        std::iter::once(c[0].clone())
            .chain(c[2..].iter().cloned())
            .collect()
    })
    .retype()
}

impl<'a, T: Numeric + Row> Distinct<'a, T> {
    /// Sorts the elements and marks the runs of equal ones; returns the context, the flags and
    /// the sorted elements (one device column each; none when there are no elements) and how
    /// many elements there are.
    fn runs(self) -> Result<(Context, Columns, usize)> {
        let ctx = self.query.ctx.clone();
        let (sorted, n) = self.query.sort().into_columns()?;
        if n == 0 {
            return Ok((ctx, Vec::new(), 0));
        }
        let flags = mark_runs(&ctx, &sorted[..1], &[T::TYPE], n)?;
        Ok((ctx, std::iter::once(flags).chain(sorted).collect(), n))
    }

    /// Runs it and collects the distinct elements into a `Vec`. Fails as the query's other
    /// terminals do (`TooLarge`, `LengthMismatch`, an allocation or launch error of the
    /// backend).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2.5f64, -1.0, 2.5, f64::INFINITY, -1.0];
    /// let finite = ctx.from(&xs).filter(|x| x.lt(10.0)).distinct().to_vec()?;
    /// assert_eq!(finite, [-1.0, 2.5]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_vec(self) -> Result<Vec<T>> {
        let _span = self.query.plan_span("distinct to_vec");
        let query = match T::TYPE.is_int() {
            true => match distinct_by_counts(self.query)? {
                Ok(distinct) => return Ok(distinct),
                Err(query) => query,
            },
            false => self.query,
        };
        let (ctx, cols, n) = Distinct { query }.runs()?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let refs: Vec<&dyn DeviceMemory> = cols.iter().map(|c| &**c).collect();
        run_ends::<T>(Query::over_device(&ctx, &refs, n)).to_vec()
    }
}

impl<'a, T: Scalar + Numeric + Row> Distinct<'a, T> {
    /// Runs it and collects the distinct elements into a new buffer on the device, without
    /// copying them to the host. Fails as [`Distinct::to_vec`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let ids = ctx.upload(&[40u32, 10, 40, 30, 10])?;
    /// let unique = ctx.from_buffer(&ids).distinct().to_buffer()?;
    /// assert_eq!(ctx.from_buffer(&unique).count()?, 3);
    /// assert_eq!(unique.download()?, [10, 30, 40]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_buffer(self) -> Result<Buffer<T>> {
        let _span = self.query.plan_span("distinct to_buffer");
        let (ctx, cols, n) = self.runs()?;
        if n == 0 {
            return ctx.upload::<T>(&[]);
        }
        let refs: Vec<&dyn DeviceMemory> = cols.iter().map(|c| &**c).collect();
        run_ends::<T>(Query::over_device(&ctx, &refs, n)).to_buffer()
    }
}

/// The distinct elements of `query`, integers of type `T`, as the keys `count()` finds
/// without a sort (the dense plan up to [`DENSE_KEYS`] values, a histogram up to
/// [`HISTOGRAM_KEYS`]); `query` back, unchanged in what it yields, when they span more.
fn distinct_by_counts<T: Numeric + Row>(
    mut query: Query<'_, T>,
) -> Result<std::result::Result<Vec<T>, Query<'_, T>>> {
    query.check()?;
    let pairs = query.map_erased(|c| vec![c[0].clone(), lit_value(ScalarValue::U32(1))]);
    Ok(match count_single_key(pairs, T::TYPE)? {
        Counted::Counts(counts) => Ok(counts
            .into_iter()
            .map(|(k, _)| T::from_values(&mut std::iter::once(k)))
            .collect()),
        Counted::Declined(pairs) => Err(pairs.map_erased(|c| vec![c[0].clone()]).retype()),
    })
}

/// The types of the parts of a key of type `K`.
fn key_types<K: Row>() -> Vec<ScalarType> {
    let mut types = Vec::new();
    K::column_types(&mut types);
    types
}

/// The folds of `pairs` (the key's parts, then the values folded) by the dense plan, when
/// its keys suit it (see [`dense_fold_values`] and [`dense_fold_tuple`]); `None` when they
/// do not.
fn dense_fold<K: Row, V: Row>(
    pairs: &mut Query<'_, (K, V)>,
    identity: &[ScalarValue],
    op: CombineFn<'_>,
    how: FoldOp,
) -> Result<Option<Vec<(K, V)>>> {
    let rows = match key_types::<K>()[..] {
        [ty] => dense_fold_values(pairs, ty, identity, op, how)?,
        ref parts => dense_fold_tuple(pairs, parts, identity, op, how)?,
    };
    Ok(rows.map(|rows| {
        rows.rows()
            .map(|row| <(K, V)>::from_values(&mut row.iter().copied()))
            .collect()
    }))
}

impl<'a, K: Row, T: Row> GroupBy<'a, K, T> {
    /// Folds the `value` of every row of each key with the associative `op`, starting from
    /// `identity` (which must be an identity of `op`), in input order; returns one `(key,
    /// fold)` pair per key, in ascending key order. Fails as the query's other terminals do
    /// (`TooLarge`, `LengthMismatch`, an allocation or launch error of the backend).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (day, temp) = ([2u32, 1, 2, 1], [15.0f32, 9.0, 21.0, 7.0]);
    /// let spans = ctx
    ///     .from(&day)
    ///     .zip(&temp)
    ///     .group_by(|(d, _)| d)
    ///     .fold((f32::INFINITY, f32::NEG_INFINITY), |(_, t)| (t, t), |a, b| {
    ///         (a.0.min(b.0), a.1.max(b.1))
    ///     })?;
    /// assert_eq!(spans, [(1, (7.0, 9.0)), (2, (15.0, 21.0))]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn fold<V, W, FV, O, F>(self, identity: V, value: FV, op: F) -> Result<Vec<(K, V)>>
    where
        V: Row,
        W: IntoRow<Row = V>,
        FV: Fn(T::Vals) -> W + 'a,
        O: IntoRow<Row = V>,
        F: Fn(V::Vals, V::Vals) -> O + 'a,
    {
        let mut ids = Vec::new();
        identity.to_values(&mut ids);
        let value = move |cols: Vec<AnyVal>| {
            let mut out = Vec::new();
            let v = T::vals(&mut cols.into_iter());
            constants::user_code(VALUE_CLOSURE, || value(v)).into_handles(&mut out);
            out
        };
        self.fold_erased(
            ids,
            Box::new(value),
            &on_columns::<V, O>(op),
            FoldOp::InOrder,
        )
    }

    /// [`GroupBy::fold`] on column values: `value` gives a row's value columns (of the types
    /// of `identity`, the columns of `V`), `op` combines two of them.
    fn fold_erased<V: Row>(
        self,
        identity: Vec<ScalarValue>,
        value: Box<dyn Fn(Vec<AnyVal>) -> Vec<AnyVal> + 'a>,
        op: CombineFn<'_>,
        how: FoldOp,
    ) -> Result<Vec<(K, V)>> {
        let _span = self.query.plan_span("group_by fold");
        let mut pairs = self.pairs::<V>(value)?;
        if let Some(folds) = dense_fold(&mut pairs, &identity, op, how)? {
            return Ok(folds);
        }
        let ctx = pairs.ctx.clone();
        let (sorted, n) = pairs
            .sorted_by_first_columns(&key_types::<K>(), false)
            .into_columns()?;
        if n == 0 {
            return Ok(Vec::new());
        }
        fold_runs(&ctx, &sorted, n, identity, op)
    }

    /// The rows as (key, `value`) rows. Fails with the query's own error (`LengthMismatch`,
    /// `Unsupported`).
    fn pairs<V: Row>(
        mut self,
        value: Box<dyn Fn(Vec<AnyVal>) -> Vec<AnyVal> + 'a>,
    ) -> Result<Query<'a, (K, V)>> {
        self.query.check()?;
        let key = self.key;
        Ok(self
            .query
            .map_erased(move |cols| {
                let mut out = key(cols.clone());
                out.extend(value(cols));
                out
            })
            .retype())
    }

    /// The number of rows of each key. Without the dense plan, only the keys are sorted, and
    /// each key's count is the distance between the ends of consecutive runs. Fails as
    /// [`GroupBy::fold`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let shop = [3u32, 1, 3, 2, 1];
    /// assert_eq!(ctx.from(&shop).group_by(|s| s).count()?, [(1, 2), (2, 1), (3, 2)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn count(self) -> Result<Vec<(K, usize)>> {
        let _span = self.query.plan_span("group_by count");
        let mut pairs = self.pairs::<u32>(Box::new(one_u32))?;
        let types = key_types::<K>();
        match types[..] {
            [ty] if ty.is_int() => match count_single_key(pairs, ty)? {
                Counted::Counts(counts) => {
                    let key = |k| K::from_values(&mut std::iter::once(k));
                    return Ok(counts
                        .into_iter()
                        .map(|(k, c)| (key(k), c as usize))
                        .collect());
                }
                Counted::Declined(rows) => pairs = rows,
            },
            _ => {
                let zero = [ScalarValue::U32(0)];
                if let Some(counts) = dense_fold(&mut pairs, &zero, &add_columns, FoldOp::Adds)? {
                    return Ok(counts.into_iter().map(|(k, c)| (k, c as usize)).collect());
                }
            }
        }
        let ctx = pairs.ctx.clone();
        let parts = types.len();
        let keys: Query<K> = pairs.map_erased(move |c| c[..parts].to_vec()).retype();
        let (sorted, n) = keys.sorted_by_first_columns(&types, false).into_columns()?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let flags = mark_runs(&ctx, &sorted, &types, n)?;
        let flagged_cols: Vec<&dyn DeviceMemory> = std::iter::once(&*flags)
            .chain(sorted.iter().map(|c| &**c))
            .collect();
        let flagged = Query::over_device(&ctx, &flagged_cols, n);
        let ends = run_end_positions::<K>(flagged).to_vec()?;
        let mut before = 0;
        Ok(ends
            .into_iter()
            .map(|(end, key)| {
                let count = end as usize + 1 - before;
                before = end as usize + 1;
                (key, count)
            })
            .collect())
    }

    /// The sum of `value` over the rows of each key (wrapping for integers). Fails as
    /// [`GroupBy::fold`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (shop, sold) = ([3u32, 1, 3, 2, 1], [5u32, 1, 2, 4, 6]);
    /// let sales = ctx.from(&shop).zip(&sold).group_by(|(s, _)| s).sum(|(_, x)| x)?;
    /// assert_eq!(sales, [(1, 7), (2, 4), (3, 7)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn sum<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, V)>> {
        let how = match V::TYPE.is_int() {
            true => FoldOp::Adds,
            false => FoldOp::InOrder,
        };
        self.fold_value(value, ScalarValue::zero(V::TYPE), how, &|a, b| {
            bin(BinaryOp::Add, a, b)
        })
    }

    /// The smallest `value` of each key; NaN is skipped unless every value of the key is NaN.
    /// Fails as [`GroupBy::fold`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (shop, sold) = ([3u32, 1, 3, 2, 1], [5.0f32, 1.0, 2.0, 4.0, 0.5]);
    /// let least = ctx.from(&shop).zip(&sold).group_by(|(s, _)| s).min(|(_, x)| x)?;
    /// assert_eq!(least, [(1, 0.5), (2, 4.0), (3, 2.0)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn min<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, V)>> {
        self.fold_value(
            value,
            min_max_identity(V::TYPE, false),
            FoldOp::InOrder,
            &|a, b| math2(MathFn::Min, a, b),
        )
    }

    /// The largest `value` of each key; NaN is skipped unless every value of the key is NaN.
    /// Fails as [`GroupBy::fold`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (shop, sold) = ([3u32, 1, 3, 2, 1], [5.0f32, 1.0, 2.0, 4.0, 0.5]);
    /// let most = ctx.from(&shop).zip(&sold).group_by(|(s, _)| s).max(|(_, x)| x)?;
    /// assert_eq!(most, [(1, 1.0), (2, 4.0), (3, 5.0)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn max<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, V)>> {
        self.fold_value(
            value,
            min_max_identity(V::TYPE, true),
            FoldOp::InOrder,
            &|a, b| math2(MathFn::Max, a, b),
        )
    }

    /// Folds one value per row with a built-in `op` on one column.
    fn fold_value<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
        identity: ScalarValue,
        how: FoldOp,
        op: &dyn Fn(&AnyVal, &AnyVal) -> AnyVal,
    ) -> Result<Vec<(K, V)>> {
        self.fold_erased(
            vec![identity],
            Box::new(move |cols| {
                let v = T::vals(&mut cols.into_iter());
                vec![constants::user_code(VALUE_CLOSURE, || value(v)).erase()]
            }),
            &|a, b| vec![op(&a[0], &b[0])],
            how,
        )
    }

    /// The arithmetic mean of `value` over the rows of each key, summed in `f64`, or in `f32`
    /// on a device without f64 arithmetic (as [`Query::average`]). Fails as
    /// [`GroupBy::fold`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (shop, sold) = ([3u32, 1, 3, 2, 1], [5u32, 1, 2, 4, 6]);
    /// let mean = ctx.from(&shop).zip(&sold).group_by(|(s, _)| s).average(|(_, x)| x)?;
    /// assert_eq!(mean, [(1, 3.5), (2, 4.0), (3, 3.5)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn average<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, f64)>> {
        if !self.query.ctx.device().features.f64 {
            let sums: Vec<(K, (f32, u32))> = self.fold(
                (0.0f32, 0u32),
                move |row| (value(row).cast::<f32>(), lit(1u32)),
                |a, b| (a.0 + b.0, a.1 + b.1),
            )?;
            return Ok(sums
                .into_iter()
                .map(|(k, (sum, count))| (k, sum as f64 / count as f64))
                .collect());
        }
        let sums: Vec<(K, (f64, u32))> = self.fold(
            (0.0f64, 0u32),
            move |row| (value(row).cast::<f64>(), lit(1u32)),
            |a, b| (a.0 + b.0, a.1 + b.1),
        )?;
        Ok(sums
            .into_iter()
            .map(|(k, (sum, count))| (k, sum / count as f64))
            .collect())
    }
}

/// Folds the values of each run of equal keys of `sorted` (`n` rows of (key, values), sorted
/// by key, a column per part of the key) with a segmented scan, and returns each run's key
/// and fold.
fn fold_runs<K: Row, V: Row>(
    ctx: &Context,
    sorted: &Columns,
    n: usize,
    identity: Vec<ScalarValue>,
    op: CombineFn<'_>,
) -> Result<Vec<(K, V)>> {
    let types = key_types::<K>();
    let parts = types.len();
    let flags = mark_runs(ctx, &sorted[..parts], &types, n)?;
    let scan_cols: Vec<&dyn DeviceMemory> = std::iter::once(&*flags)
        .chain(sorted[parts..].iter().map(|c| &**c))
        .collect();
    let scan_identity = std::iter::once(ScalarValue::U32(0))
        .chain(identity)
        .collect();
    let segmented = |a: Vec<AnyVal>, b: Vec<AnyVal>| {
        let b_starts = (b[0].typed::<u32>() & RUN_START).ne(0u32).erase();
        let folded = op(a[1..].to_vec(), b[1..].to_vec());
        std::iter::once(bin(BinaryOp::Or, &a[0], &b[0]))
            .chain(
                folded
                    .iter()
                    .zip(&b[1..])
                    .map(|(f, b)| select_dyn(&b_starts, b, f)),
            )
            .collect()
    };
    let (scanned, _) = Query::<(u32, V)>::over_device(ctx, &scan_cols, n)
        .scan_erased(scan_identity, Box::new(segmented))
        .into_columns()?;
    let end_cols: Vec<&dyn DeviceMemory> = std::iter::once(&*flags)
        .chain(sorted[..parts].iter().map(|c| &**c))
        .chain(scanned[1..].iter().map(|c| &**c))
        .collect();
    run_ends::<(K, V)>(Query::over_device(ctx, &end_cols, n)).to_vec()
}
