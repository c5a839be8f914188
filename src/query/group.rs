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

use super::*;

/// Flag bit of a row that starts a run of equal keys.
const RUN_START: u32 = 1;
/// Flag bit of a row that ends one.
const RUN_END: u32 = 2;

/// The rows of a query grouped by a key, from [`Query::group_by`]. Nothing runs until one of
/// its folds (`count`, `sum`, `min`, `max`, `average`, `fold`).
pub struct GroupBy<'a, K, T: Row> {
    query: Query<'a, T>,
    key: Box<dyn Fn(T::Vals) -> Val<K> + 'a>,
}

/// The distinct elements of a query, from [`Query::distinct`]. Nothing runs until
/// [`Distinct::to_vec`] or [`Distinct::to_buffer`].
pub struct Distinct<'a, T> {
    query: Query<'a, T>,
}

impl<'a, T: Row> Query<'a, T> {
    /// Groups the rows (those a filter keeps) by `key`; a fold of the returned [`GroupBy`]
    /// gives one `(key, folded value)` pair per distinct key, in ascending key order (floats
    /// in `f32::total_cmp` order, each NaN bit pattern its own key). The rows of a key are
    /// folded in input order, so `op` need not be commutative and float results are the same
    /// on every run.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (shop, sold) = ([3u32, 1, 3, 2, 1], [5.0f32, 1.0, 2.0, 4.0, 0.5]);
    /// let sales = ctx.from(&shop).zip(&sold).group_by(|(s, _)| s).sum(|(_, x)| x)?;
    /// assert_eq!(sales, [(1, 1.5), (2, 4.0), (3, 7.0)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn group_by<K: Numeric + Row, F: Fn(T::Vals) -> Val<K> + 'a>(
        self,
        key: F,
    ) -> GroupBy<'a, K, T> {
        GroupBy {
            query: self,
            key: Box::new(key),
        }
    }
}

impl<'a, T: Numeric + Row> Query<'a, T> {
    /// The distinct elements (of those a filter keeps), in ascending order; floats are equal
    /// when their bits are (so -0 and +0 both stay, as do NaNs of different bits), in
    /// `f32::total_cmp` order. Nothing runs until the returned [`Distinct`]'s `to_vec` or
    /// `to_buffer`.
    pub fn distinct(self) -> Distinct<'a, T> {
        Distinct { query: self }
    }
}

/// Marks the start and end of every run of equal keys in `keys` (sorted, `n` of them, of
/// type `ty`): flag `i` gets [`RUN_START`] when key `i` differs from key `i - 1` or `i` is 0,
/// plus [`RUN_END`] when it differs from key `i + 1` or `i` is the last. Returns the flags, one
/// `u32` each.
fn mark_runs(
    ctx: &Context,
    keys: &dyn DeviceMemory,
    ty: ScalarType,
    n: usize,
) -> Result<Arc<dyn DeviceMemory>> {
    let kernel = Kernel::build_unvalidated("query_group_runs", |k| {
        let keys = declare_columns(k, "keys", &[ty], Access::Read)[0];
        let flags = k.buffer::<u32>("flags", Access::Write);
        let n = k.value::<u32>("n");
        let i = global_id(Axis::X);
        if_then(i.lt(bounded(n, &[keys, flags.memory()])), || {
            let bits = |j: Val<u32>| {
                super::sort::ordered_bits(&load_dyn(keys, j, Type::Scalar(ty)), ty, false)
            };
            let here = bits(i);
            let differs = |j: Val<u32>| bin(BinaryOp::Ne, &bits(j), &here).typed::<bool>();
            let start = i.eq(0u32).or(differs(i.max(1u32) - 1u32));
            let end = (i + 1u32).eq(n).or(differs((i + 1u32).min(n - 1u32)));
            flags.store(
                i,
                select(start, RUN_START, 0u32) | select(end, RUN_END, 0u32),
            );
        });
    })?;
    let flags = ctx.backend().alloc(n * 4)?;
    let group = CHUNK.min(ctx.device().max_group_size);
    let mut args = vec![
        LaunchArg::Device(keys),
        LaunchArg::Device(&*flags),
        value_bytes(n as u32),
    ];
    ctx.launch_ir(
        &kernel,
        &Grid::linear((n as u64).div_ceil(group as u64) as u32, group),
        &mut args,
    )?;
    drop(args);
    Ok(flags)
}

/// A query over the `n` rows of `columns`, the flags of [`mark_runs`] and then the columns of
/// `R`, keeping the rows whose flags have [`RUN_END`], without the flags.
fn run_ends<'c, R: Row>(ctx: &Context, columns: &[&'c dyn DeviceMemory], n: usize) -> Query<'c, R> {
    let mut flagged = Query::<(u32, R)>::over_device(ctx, columns, n);
    flagged.stages.push(Stage::Filter(Box::new(|c| {
        (c[0].typed::<u32>() & RUN_END).ne(0u32)
    })));
    flagged.map_erased(|c| c[1..].to_vec()).retype()
}

impl<'a, T: Numeric + Row> Distinct<'a, T> {
    /// Sorts the elements and marks the runs of equal ones; returns the context, the flags and
    /// the sorted elements (one device column each; none when there are no elements) and how
    /// many elements there are.
    fn runs(mut self) -> Result<(Context, Columns, usize)> {
        self.query.check()?;
        let ctx = self.query.ctx.clone();
        let (sorted, n) = self.query.sort().into_columns()?;
        if n == 0 {
            return Ok((ctx, Vec::new(), 0));
        }
        let flags = mark_runs(&ctx, &*sorted[0], T::TYPE, n)?;
        Ok((ctx, std::iter::once(flags).chain(sorted).collect(), n))
    }

    /// Runs it and collects the distinct elements into a `Vec`. Fails as the query's other
    /// terminals do (`TooLarge`, `LengthMismatch`, an allocation or launch error of the
    /// backend).
    pub fn to_vec(self) -> Result<Vec<T>> {
        let _span = self.query.plan_span("distinct to_vec");
        let (ctx, cols, n) = self.runs()?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let refs: Vec<&dyn DeviceMemory> = cols.iter().map(|c| &**c).collect();
        run_ends::<T>(&ctx, &refs, n).to_vec()
    }
}

impl<'a, T: Scalar + Numeric + Row> Distinct<'a, T> {
    /// Runs it and collects the distinct elements into a new buffer on the device, without
    /// copying them to the host. Fails as [`Distinct::to_vec`] does.
    pub fn to_buffer(self) -> Result<Buffer<T>> {
        let _span = self.query.plan_span("distinct to_buffer");
        let (ctx, cols, n) = self.runs()?;
        if n == 0 {
            return ctx.upload::<T>(&[]);
        }
        let refs: Vec<&dyn DeviceMemory> = cols.iter().map(|c| &**c).collect();
        run_ends::<T>(&ctx, &refs, n).to_buffer()
    }
}

impl<'a, K: Numeric + Row, T: Row> GroupBy<'a, K, T> {
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
            value(T::vals(&mut cols.into_iter())).into_handles(&mut out);
            out
        };
        self.fold_erased(ids, Box::new(value), &on_columns::<V, O>(op))
    }

    /// [`GroupBy::fold`] on column values: `value` gives a row's value columns (of the types
    /// of `identity`, the columns of `V`), `op` combines two of them.
    fn fold_erased<V: Row>(
        mut self,
        identity: Vec<ScalarValue>,
        value: Box<dyn Fn(Vec<AnyVal>) -> Vec<AnyVal> + 'a>,
        op: CombineFn<'_>,
    ) -> Result<Vec<(K, V)>> {
        let _span = self.query.plan_span("group_by fold");
        self.query.check()?;
        let ctx = self.query.ctx.clone();
        let key = self.key;
        let pairs: Query<(K, V)> = self
            .query
            .map_erased(move |cols| {
                let mut out = vec![key(T::vals(&mut cols.clone().into_iter())).erase()];
                out.extend(value(cols));
                out
            })
            .retype();
        let (sorted, n) = pairs
            .sorted_by_first_column(K::TYPE, false)
            .into_columns()?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let flags = mark_runs(&ctx, &*sorted[0], K::TYPE, n)?;

        // The segmented scan of (flags, value columns).
        let scan_cols: Vec<&dyn DeviceMemory> = std::iter::once(&*flags)
            .chain(sorted[1..].iter().map(|c| &**c))
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
        let (scanned, _) = Query::<(u32, V)>::over_device(&ctx, &scan_cols, n)
            .scan_erased(scan_identity, Box::new(segmented))
            .into_columns()?;

        let end_cols: Vec<&dyn DeviceMemory> = [&*flags, &*sorted[0]]
            .into_iter()
            .chain(scanned[1..].iter().map(|c| &**c))
            .collect();
        run_ends::<(K, V)>(&ctx, &end_cols, n).to_vec()
    }

    /// The number of rows of each key.
    pub fn count(self) -> Result<Vec<(K, usize)>> {
        let counts: Vec<(K, u32)> =
            self.fold_erased(vec![ScalarValue::U32(0)], Box::new(one_u32), &add_u32)?;
        Ok(counts.into_iter().map(|(k, c)| (k, c as usize)).collect())
    }

    /// The sum of `value` over the rows of each key (wrapping for integers).
    pub fn sum<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, V)>> {
        self.fold_value(value, ScalarValue::zero(V::TYPE), &|a, b| {
            bin(BinaryOp::Add, a, b)
        })
    }

    /// The smallest `value` of each key; NaN is skipped unless every value of the key is NaN.
    pub fn min<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, V)>> {
        self.fold_value(value, min_max_identity(V::TYPE, false), &|a, b| {
            math2(MathFn::Min, a, b)
        })
    }

    /// The largest `value` of each key; NaN is skipped unless every value of the key is NaN.
    pub fn max<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, V)>> {
        self.fold_value(value, min_max_identity(V::TYPE, true), &|a, b| {
            math2(MathFn::Max, a, b)
        })
    }

    /// Folds one value per row with a built-in `op` on one column.
    fn fold_value<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
        identity: ScalarValue,
        op: &dyn Fn(&AnyVal, &AnyVal) -> AnyVal,
    ) -> Result<Vec<(K, V)>> {
        self.fold_erased(
            vec![identity],
            Box::new(move |cols| vec![value(T::vals(&mut cols.into_iter())).erase()]),
            &|a, b| vec![op(&a[0], &b[0])],
        )
    }

    /// The arithmetic mean of `value` (as `f64`) over the rows of each key.
    pub fn average<V: Scalar + Numeric + Row, F: Fn(T::Vals) -> Val<V> + 'a>(
        self,
        value: F,
    ) -> Result<Vec<(K, f64)>> {
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
