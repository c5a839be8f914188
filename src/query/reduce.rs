//! Reductions: `fold`, `sum`, `min`, `count`, `any`, `argmax`, ... Each group folds its chunk
//! into one partial (four blocked accumulators, so the chains run in parallel while the order
//! of `op` is kept), then one work item folds the partials; the grouped plan folds them with
//! one group of work items, a few partials each.

use super::*;

impl<'a, T> Query<'a, T> {
    /// The chunked plan's partials kernel: each work item folds the rows it takes into one
    /// partial per accumulator with `fold`, stored at its global id. With [`Order::Kept`]
    /// each group has one work item folding its chunk; with [`Order::Any`] each group has
    /// [`QUAD`] work items, and of every row of `QUAD * LANES` elements of the chunk, work
    /// item `j` folds elements `j`, `j + QUAD`, ... into its `LANES` accumulators. Each
    /// accumulator takes its rows in increasing position (`fold`'s row op relies on it).
    pub(super) fn chunked_fold_kernel(&self, name: &str, fold: &Fold<'_>) -> Result<Kernel> {
        let (identity, op, project, order) = (fold.identity, fold.op, fold.project, fold.order);
        let step = fold.row_op();
        let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
        let predicated = self.predicated();
        Ok(Kernel::build_unvalidated(name, |k| {
            let Inputs {
                all: cols,
                bounding,
            } = self.declare_inputs(k);
            let outs: Vec<Memory> = declare_columns(k, "partial", &types, Access::Write);
            let n = bounded(k.value::<u32>("n"), &bounding);
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
                                self.fold_element(&cols, i, acc, step, project, predicated)
                            });
                        }
                    });
                    for_range(start + quarter * LANES, end, |i| {
                        self.fold_element(&cols, i, last, step, project, predicated)
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
                            self.fold_element(&cols, i, acc, step, project, predicated);
                        }
                    });
                    let tail = start + rows * row;
                    for_range(0u32, (end - tail + (QUAD - 1)) / QUAD, |t| {
                        let i = tail + t * QUAD + j;
                        if_then(i.lt(end), || {
                            self.fold_element(&cols, i, last, step, project, predicated)
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

    /// The partials kernel of the grouped plan over this query's rows: see
    /// [`grouped_fold_kernel`]. `fold`'s projection turns each kept element into the values
    /// folded (the element itself for reductions, a 1 for counting).
    pub(super) fn grouped_reduce_kernel(
        &self,
        name: &str,
        fold: &Fold<'_>,
        g: u32,
    ) -> Result<Kernel> {
        grouped_fold_kernel(
            name,
            fold,
            g,
            &|k| self.declare_inputs(k),
            &|cols, i, sink| self.element(cols, i, sink),
        )
    }

    /// Runs a reduction of the current rows; returns the result's column constants.
    pub(super) fn reduce_values(
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
    pub(super) fn reduce_projected(
        &self,
        identity: &[ScalarValue],
        op: CombineFn<'_>,
        project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>,
        order: Order,
    ) -> Result<Vec<ScalarValue>> {
        self.reduce_fold(&Fold::new(identity, op, project, order))
    }

    /// Runs the reduction `fold` of the current rows; returns the result's column constants.
    /// The query stays usable.
    pub(super) fn reduce_fold(&self, fold: &Fold<'_>) -> Result<Vec<ScalarValue>> {
        let types: Vec<ScalarType> = fold.identity.iter().map(|v| v.ty()).collect();
        let plan = reduce_plan(
            &self.ctx.profile(),
            self.columns.len(),
            self.len,
            &types,
            fold.order,
        );
        let kernels = self.compiled(&plan, Some(fold), || self.reduce_kernels(&plan, fold))?;
        let inputs = self.sources();
        Run::start(&self.ctx, plan, kernels, &inputs)?.finish(&inputs, Vec::new())
    }

    /// Of rows (position, value), the least position of one whose value is `sought`, a
    /// constant of the kernel; else 0 when there are rows, `None` when there are none.
    fn first_position_of(&self, sought: ScalarValue) -> Result<Option<usize>> {
        let none = ScalarValue::U32(u32::MAX);
        let at = move |v: Vec<AnyVal>| {
            let sought = lit_value(sought);
            let hit = bin(BinaryOp::Eq, &v[1], &sought);
            vec![select_dyn(&hit, &v[0], &lit_value(none))]
        };
        let first = |a: Vec<AnyVal>, b: Vec<AnyVal>| vec![math2(MathFn::Min, &a[0], &b[0])];
        let v = self.reduce_projected(&[none], &first, &at, Order::Any)?;
        if v[0] != none {
            return Ok(Some(v[0].to_bits() as usize));
        }
        let rows =
            self.reduce_projected(&[ScalarValue::U32(0)], &add_columns, &one_u32, Order::Any)?;
        Ok((rows[0].to_bits() != 0).then_some(0))
    }

    /// The least position among the kept rows of one whose value (the last column) is
    /// `sought`, from an in-order fold of (rows, that position among them); else 0.
    fn first_counted_position_of(&self, sought: ScalarValue) -> Result<usize> {
        let none = ScalarValue::U32(u32::MAX);
        let hit = move |v: Vec<AnyVal>| {
            let at = bin(BinaryOp::Eq, &v[2], &lit_value(sought));
            vec![v[0].clone(), select_dyn(&at, &v[1], &lit_value(none))]
        };
        let first = |a: Vec<AnyVal>, b: Vec<AnyVal>| {
            let ((an, ap), (bn, bp)) = (counted_position(&a), counted_position(&b));
            let take_b = ap.eq(u32::MAX).and(bp.ne(u32::MAX));
            vec![(an + bn).erase(), select(take_b, an + bp, ap).erase()]
        };
        let v = self.reduce_projected(&[ScalarValue::U32(0), none], &first, &hit, Order::Kept)?;
        Ok(match v[1] == none {
            true => 0,
            false => v[1].to_bits() as usize,
        })
    }

    /// The kernels of a reduction's `plan` (see [`reduce_plan`]) folding with `fold`.
    pub(super) fn reduce_kernels(&self, plan: &Plan, fold: &Fold<'_>) -> Result<Vec<Kernel>> {
        let (identity, op) = (fold.identity, fold.op);
        let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
        if plan.profile.grouped() {
            let g = plan.profile.group_size;
            let partials = self.grouped_reduce_kernel("query_reduce_grouped", fold, g)?;
            let combine = grouped_fold_kernel(
                "query_reduce_combine",
                &Fold::new(identity, op, &|v| v, fold.order),
                g,
                &|k| Inputs::values(declare_columns(k, "folded", &types, Access::Read)),
                &|cols, i, sink| sink(load_row(cols, &types, i)),
            )?;
            return Ok(vec![partials, combine]);
        }
        let partials = self.chunked_fold_kernel("query_reduce_partials", fold)?;
        let finish = Kernel::build_unvalidated("query_reduce_final", |k| {
            let ins: Vec<Memory> = declare_columns(k, "partial", &types, Access::Read);
            let outs: Vec<Memory> = declare_columns(k, "result", &types, Access::Write);
            let m = k.value::<u32>("m");
            let acc = identity_vars("acc", identity);
            for_range(0u32, m, |g| fold_into(&acc, load_row(&ins, &types, g), op));
            for (o, v) in outs.iter().zip(&acc) {
                store_dyn(*o, lit(0u32), &v.get());
            }
        })?;
        Ok(vec![partials, finish])
    }
}

/// The plan of a reduction of `n` elements read from `inputs` columns into one value of
/// each of `types`, in `order`, on `profile`. Chunked: each work item folds a chunk into a
/// partial, then one work item folds the partials. Grouped: each group folds
/// [`ITEM_CHUNK`] elements per work item into a partial, then one group folds the partials
/// (a few per work item: there are n / 4096 of them with 256 work items per group), so the
/// reduction is two launches whatever `n` is, and one when a single group covers `n`.
pub(super) fn reduce_plan(
    profile: &DeviceProfile,
    inputs: usize,
    n: usize,
    types: &[ScalarType],
    order: Order,
) -> Plan {
    let input = (0..inputs).map(Binding::Input);
    let place = profile.small_temp_place();
    if profile.grouped() {
        let g = profile.group_size;
        let key = ("query_reduce_grouped", [order as u32, g, 0]);
        let mut plan = Plan::new("reduce", *profile, key, Rows::None);
        let (fold, combine) = (
            plan.kernel("query_reduce_grouped"),
            plan.kernel("query_reduce_combine"),
        );
        let groups = profile.item_groups(n);
        let partials = plan.temps("partials", types, groups as usize, place);
        let scalars = [
            Binding::Scalar("n", n as u32),
            Binding::Scalar("chunk", ITEM_CHUNK),
        ];
        let b = input.chain(temp_bindings(partials.clone())).chain(scalars);
        plan.launch(fold, Grid::linear(groups, g), b);
        if groups == 1 {
            plan.result = partials;
            return plan;
        }
        let result = plan.temps("result", types, 1, place);
        let scalars = [
            Binding::Scalar("n", groups),
            Binding::Scalar("chunk", groups.div_ceil(g)),
        ];
        let b = temp_bindings(partials)
            .chain(temp_bindings(result.clone()))
            .chain(scalars);
        plan.launch(combine, Grid::linear(1, g), b);
        plan.result = result;
        return plan;
    }
    let key = ("query_reduce", [order as u32, 0, 0]);
    let mut plan = Plan::new("reduce", *profile, key, Rows::None);
    let (fold, finish) = (
        plan.kernel("query_reduce_partials"),
        plan.kernel("query_reduce_final"),
    );
    let groups = profile.chunks(n);
    let per_group = items_per_chunk(order);
    let partials = plan.temps("partials", types, (groups * per_group) as usize, place);
    let scalars = [
        Binding::Scalar("n", n as u32),
        Binding::Scalar("chunk", profile.chunk),
    ];
    let b = input.chain(temp_bindings(partials.clone())).chain(scalars);
    plan.launch(fold, Grid::linear(groups, per_group), b);
    let result = plan.temps("result", types, 1, place);
    let b = temp_bindings(partials)
        .chain(temp_bindings(result.clone()))
        .chain([Binding::Scalar("m", groups * per_group)]);
    plan.launch(finish, Grid::linear(1, 1), b);
    plan.result = result;
    plan
}

impl<'a, T: Row> Query<'a, T> {
    /// Folds all elements with the associative `op`, starting from `identity` (which must be
    /// an identity of `op`). Groups of elements are folded in parallel and the partial results
    /// folded in input order, so `op` need not be commutative; the result is the same on
    /// every run.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// // The largest element, as a fold whose identity is the smallest i32.
    /// let xs = [3i32, -8, 5, 1];
    /// let most = ctx.from(&xs).fold(i32::MIN, |a, b| select(a.gt(b), a, b))?;
    /// assert_eq!(most, 5);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [3i32, -4, 8, -1, 6];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.gt(4)).last()?, Some(6));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn last(self) -> Result<Option<T>> {
        self.end_element(true)
    }

    /// The first (or `last`) element: a fold of (found, element) pairs that keeps the earlier
    /// (later) found one, in input order.
    pub(super) fn end_element(self, last: bool) -> Result<Option<T>> {
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

    /// Number of elements (after filters).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2u32, 7, 4, 9];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.gt(3)).count()?, 3);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn count(self) -> Result<usize> {
        let q = self.map_erased(one_u32);
        let v = q.reduce_values(vec![ScalarValue::U32(0)], &add_columns, Order::Any)?;
        Ok(v[0].to_bits() as usize)
    }

    /// True if `pred` holds for some element (false when empty).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2u32, 7, 4, 9];
    /// assert!(ctx.from(&xs).any(|x| x.gt(8))?);
    /// assert!(!ctx.from(&xs).any(|x| x.gt(9))?);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2u32, 7, 4, 9];
    /// assert!(ctx.from(&xs).all(|x| x.ge(2))?);
    /// assert!(!ctx.from(&xs).all(|x| x.lt(9))?);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn all<F: Fn(T::Vals) -> Val<bool> + 'a>(self, pred: F) -> Result<bool> {
        let q = self.map_erased(move |c| vec![pred(T::vals(&mut c.into_iter())).erase()]);
        let v = q.reduce_values(
            vec![ScalarValue::Bool(true)],
            &|a, b| vec![bin(BinaryOp::And, &a[0], &b[0])],
            Order::Any,
        )?;
        Ok(v[0] == ScalarValue::Bool(true))
    }
}

impl<'a, T: Scalar + Numeric> Query<'a, T> {
    /// True if some element equals `value` (`==`, as `slice::contains`: NaN equals nothing,
    /// -0.0 equals 0.0; false when empty).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2.5f32, -0.0, 9.0, f32::NAN];
    /// assert!(ctx.from(&xs).contains(9.0)?);
    /// assert!(ctx.from(&xs).contains(0.0)?);
    /// assert!(!ctx.from(&xs).contains(f32::NAN)?);
    /// assert!(!ctx.from(&xs).filter(|x| x.lt(5.0)).contains(9.0)?);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn contains(self, value: T) -> Result<bool>
    where
        T: Row<Vals = Val<T>>,
    {
        self.any(move |x| x.eq(value))
    }

    /// Sum of the elements (wrapping for integers; 0 when empty).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[1.5f32, 2.5]).sum()?, 4.0);
    /// // Integers wrap: 1 + 255 + 2 in u8.
    /// assert_eq!(ctx.from(&[1u8, 255, 2]).sum()?, 2);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn sum(self) -> Result<T> {
        let v = self.reduce_values(
            vec![ScalarValue::zero(T::TYPE)],
            &|a, b| vec![bin(BinaryOp::Add, &a[0], &b[0])],
            Order::Any,
        )?;
        Ok(T::from_bits(v[0].to_bits()))
    }

    /// Product of the elements (wrapping for integers; 1 when empty).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[2i64, 3, 7]).product()?, 42);
    /// assert_eq!(ctx.from::<f32>(&[]).product()?, 1.0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn product(self) -> Result<T> {
        let one = ScalarValue::from_bits(
            T::TYPE,
            match T::TYPE {
                ScalarType::F16 => kiln_ir::f16::ONE.to_bits() as u64,
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

    pub(super) fn min_max(self, max: bool) -> Result<Option<T>> {
        match T::TYPE {
            ScalarType::F32 | ScalarType::F64 => return self.float_min_max(max),
            _ => {}
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

    /// `min`/`max` of f32 or f64 elements with one compare and one select per element
    /// ([`Self::best_value`]): the fold keeps its accumulator unless the element is greater
    /// (`max`) or smaller (`min`), so a NaN is never taken, and starts from minus (`max`) or
    /// plus (`min`) infinity. The IR's `min`/`max`, whose rules for NaN and signed zeros they
    /// follow, take several vector operations per element (seven per pair of f64s). Two
    /// results are ambiguous and cost a second pass: the start (was there an element that is
    /// not NaN, or any element?) and a zero whose sign the order of a tie chose (`-0.0` for
    /// `max`: was there a `+0.0`?).
    fn float_min_max(mut self, max: bool) -> Result<Option<T>> {
        let _span = self.plan_span("reduce");
        self.check()?;
        let ty = T::TYPE;
        let float = |x: f64| match ty {
            ScalarType::F32 => ScalarValue::F32(x as f32),
            _ => ScalarValue::F64(x),
        };
        let (start, zero) = (best_start(ty, max), float(if max { -0.0 } else { 0.0 }));
        let v = [self.best_value(max)?];
        let count = |project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>| {
            let counts = self.reduce_projected(
                &[ScalarValue::U32(0), ScalarValue::U32(0)],
                &add_columns,
                project,
                Order::Any,
            )?;
            Ok::<_, Error>([counts[0].to_bits(), counts[1].to_bits()])
        };
        let value = |x: ScalarValue| Some(T::from_bits(x.to_bits()));
        let (one, none) = (ScalarValue::U32(1), ScalarValue::U32(0));
        if v[0].to_bits() == zero.to_bits() {
            // The elements that are the other zero (equal to zero, with its sign), counted
            // in both columns.
            let other = ScalarValue::from_bits(ty, zero.to_bits() ^ (1 << (ty.bits() - 1)));
            let sign = float(if max { 1.0 } else { -1.0 });
            let [others, _] = count(&move |v| {
                let signed = math2(MathFn::Copysign, &lit_value(float(1.0)), &v[0]);
                let is_zero = bin(BinaryOp::Eq, &v[0], &lit_value(other));
                let hit = bin(
                    BinaryOp::And,
                    &is_zero,
                    &bin(BinaryOp::Eq, &signed, &lit_value(sign)),
                );
                let counted = select_dyn(&hit, &lit_value(one), &lit_value(none));
                vec![counted.clone(), counted]
            })?;
            return Ok(value(if others > 0 { other } else { zero }));
        }
        if v[0].to_bits() != start.to_bits() {
            return Ok(value(v[0]));
        }
        let [numbers, rows] = count(&move |v| {
            let nan = bin(BinaryOp::Ne, &v[0], &v[0]);
            let number = select_dyn(&nan, &lit_value(none), &lit_value(one));
            vec![number, lit_value(one)]
        })?;
        Ok(match (numbers, rows) {
            (0, 0) => None,
            (0, _) => value(float(f64::NAN)),
            _ => value(start),
        })
    }

    /// Smallest element (`None` when empty). NaN is skipped unless every element is NaN.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2.5f32, f32::NAN, -1.0];
    /// assert_eq!(ctx.from(&xs).min()?, Some(-1.0));
    /// assert_eq!(ctx.from::<i32>(&[]).min()?, None);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn min(self) -> Result<Option<T>> {
        self.min_max(false)
    }

    /// Largest element (`None` when empty). NaN is skipped unless every element is NaN.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2.5f32, f32::NAN, -1.0];
    /// assert_eq!(ctx.from(&xs).max()?, Some(2.5));
    /// assert_eq!(ctx.from(&[7u16, 3]).max()?, Some(7));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn max(self) -> Result<Option<T>> {
        self.min_max(true)
    }

    /// Arithmetic mean (`None` when empty), summed in `f64`, or in `f32` on a device without
    /// f64 arithmetic (`DeviceInfo::features`), such as wgpu on GL.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[1u32, 2, 4, 5]).average()?, Some(3.0));
    /// assert_eq!(ctx.from::<f32>(&[]).average()?, None);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn average(self) -> Result<Option<f64>> {
        let (sum_ty, zero) = if self.ctx.device().features.f64 {
            (ScalarType::F64, ScalarValue::F64(0.0))
        } else {
            (ScalarType::F32, ScalarValue::F32(0.0))
        };
        let q =
            self.map_erased(move |c| vec![cast_dyn(&c[0], sum_ty), lit_value(ScalarValue::U32(1))]);
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

    /// The position of the first largest (`max`) or smallest element, NaN counting as the
    /// worst, in one pass of one compare and two selects per element: each accumulator holds
    /// a best value and its position, starts at minus (`max`) or plus infinity for floats (the
    /// type's smallest or largest value for integers) at no position, and takes an element
    /// only when it beats the value, so a NaN is never taken and, since each accumulator takes
    /// its elements in increasing position, a tie keeps the first. Combining two accumulators
    /// also takes equal values at a smaller position. Narrow types fold widened to 32 bits.
    /// When no element beats the start, a second pass looks for the start value itself.
    pub(super) fn arg_best(mut self, max: bool) -> Result<Option<usize>> {
        if self.has_filter() {
            return self.arg_best_counted(max);
        }
        let _span = self.plan_span("reduce");
        self.check()?;
        let wide = match T::TYPE {
            ScalarType::I8 | ScalarType::I16 => ScalarType::I32,
            ScalarType::U8 | ScalarType::U16 => ScalarType::U32,
            ScalarType::F16 => ScalarType::F32,
            t => t,
        };
        let start = best_start(wide, max);
        let mut q = self.map_erased(move |c| match wide == T::TYPE {
            true => c,
            false => vec![cast_dyn(&c[0], wide)],
        });
        q.stages.push(Stage::Enumerate);
        let none = ScalarValue::U32(u32::MAX);
        let better = better_than(max);
        let take = |take: AnyVal, a: &[AnyVal], b: &[AnyVal]| {
            vec![
                select_dyn(&take, &b[0], &a[0]),
                select_dyn(&take, &b[1], &a[1]),
            ]
        };
        // `a` holds only earlier positions: `b` takes it by a better value alone.
        let step = |a: Vec<AnyVal>, b: Vec<AnyVal>| take(bin(better, &b[1], &a[1]), &a, &b);
        // No accumulator holds a NaN, so equal values are equal numbers (or both the start).
        let op = |a: Vec<AnyVal>, b: Vec<AnyVal>| {
            let tie = bin(BinaryOp::Eq, &b[1], &a[1]);
            let earlier = bin(BinaryOp::And, &tie, &bin(BinaryOp::Lt, &b[0], &a[0]));
            take(
                bin(BinaryOp::Or, &bin(better, &b[1], &a[1]), &earlier),
                &a,
                &b,
            )
        };
        let identity = [none, start];
        let fold = Fold {
            step: Some(&step),
            ..Fold::new(&identity, &op, &|v| v, Order::Any)
        };
        let v = q.reduce_fold(&fold)?;
        if v[0] != none {
            return Ok(Some(v[0].to_bits() as usize));
        }
        // No element beats the start: the first equal to it (minus infinity, the smallest
        // integer, ...) is the answer; when there is none, every element is NaN (the first one
        // is the answer), or there is no element.
        q.first_position_of(start)
    }

    /// The largest (`max`) or smallest element that is not NaN, by one compare and one
    /// select per element from minus or plus infinity for floats (no element is NaN's
    /// better), from the type's smallest or largest value for integers; that start when no
    /// element beats it.
    fn best_value(&self, max: bool) -> Result<ScalarValue> {
        let start = best_start(T::TYPE, max);
        let better = better_than(max);
        // `a` is the accumulator, which only ever takes a number; `b` an element (a NaN
        // compares false and `a` stays) or another accumulator.
        let pick = move |a: Vec<AnyVal>, b: Vec<AnyVal>| {
            vec![select_dyn(&bin(better, &b[0], &a[0]), &b[0], &a[0])]
        };
        Ok(self.reduce_projected(&[start], &pick, &|v| v, Order::Any)?[0])
    }

    /// [`Self::arg_best`] after a stage that drops rows: the position among the kept rows,
    /// from an in-order fold of (rows, position of the best among them, the best) that
    /// counts the rows as it goes, so no row is written out. The best starts as
    /// [`Self::arg_best`]'s does, at no position, and only a better value replaces it (the
    /// later rows are the right-hand side, so a tie keeps the earlier): a compare, two
    /// selects and two adds per row. When no kept row beats the start, a second such fold
    /// looks for the start value itself.
    fn arg_best_counted(self, max: bool) -> Result<Option<usize>> {
        let start = best_start(T::TYPE, max);
        let none = ScalarValue::U32(u32::MAX);
        let q = self.map_erased(|c| {
            let (one, zero) = (
                lit_value(ScalarValue::U32(1)),
                lit_value(ScalarValue::U32(0)),
            );
            vec![one, zero, c[0].clone()]
        });
        let better = better_than(max);
        let later_beats = |a: Vec<AnyVal>, b: Vec<AnyVal>| {
            let ((an, ap), (bn, bp)) = (counted_position(&a), counted_position(&b));
            let take_b = bin(better, &b[2], &a[2]);
            vec![
                (an + bn).erase(),
                select_dyn(&take_b, &(an + bp).erase(), &ap.erase()),
                select_dyn(&take_b, &b[2], &a[2]),
            ]
        };
        let v = q.reduce_projected(
            &[ScalarValue::U32(0), none, start],
            &later_beats,
            &|v| v,
            Order::Kept,
        )?;
        match (v[0].to_bits(), v[1]) {
            (0, _) => Ok(None),
            (_, at) if at != none => Ok(Some(at.to_bits() as usize)),
            _ => q.first_counted_position_of(start).map(Some),
        }
    }

    /// Position of the first smallest element (`None` when empty; NaN counts as largest):
    /// its index in the source, or, after a filter, `take` or `skip`, among the rows kept
    /// (one fold in input order counts them).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [4.0f32, 1.0, 9.0, 1.0];
    /// assert_eq!(ctx.from(&xs).argmin()?, Some(1));
    /// assert_eq!(ctx.from(&xs).filter(|x| x.gt(1.0)).argmin()?, Some(0));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn argmin(self) -> Result<Option<usize>> {
        self.arg_best(false)
    }

    /// Position of the first largest element (`None` when empty; NaN counts as smallest),
    /// counted as [`Query::argmin`] counts.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [4.0f32, 9.0, 1.0, 9.0];
    /// assert_eq!(ctx.from(&xs).argmax()?, Some(1));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn argmax(self) -> Result<Option<usize>> {
        self.arg_best(true)
    }
}

/// The comparison by which a value beats another: greater for `max`, else less.
fn better_than(max: bool) -> BinaryOp {
    if max {
        BinaryOp::Gt
    } else {
        BinaryOp::Lt
    }
}

/// The first two columns of a counted fold's row: the rows counted and a position among
/// them.
fn counted_position(row: &[AnyVal]) -> (Val<u32>, Val<u32>) {
    (row[0].typed::<u32>(), row[1].typed::<u32>())
}

/// Where [`Query::best_value`] starts on `ty`: minus (`max`) or plus infinity for floats,
/// which every number but that infinity beats and NaN does not, the type's smallest or largest
/// value for integers.
fn best_start(ty: ScalarType, max: bool) -> ScalarValue {
    let infinity = if max {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    };
    match ty {
        ScalarType::F16 => ScalarValue::F16(kiln_ir::f16::from_f64(infinity)),
        ScalarType::F32 => ScalarValue::F32(infinity as f32),
        ScalarType::F64 => ScalarValue::F64(infinity),
        t => min_max_identity(t, max),
    }
}

/// The identity of `max` (when `max`) or `min` on `ty`: NaN for floats (which the IR's min and
/// max skip), the type's smallest or largest value for integers.
pub(super) fn min_max_identity(ty: ScalarType, max: bool) -> ScalarValue {
    match ty {
        ScalarType::F16 => ScalarValue::F16(kiln_ir::f16::NAN),
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

/// A fold kernel of the grouped plan: each group folds `g * chunk` consecutive elements of the
/// `n` with `fold`. Each of its `g` work items folds `chunk` of them, in increasing position:
/// with [`Order::Kept`] a contiguous run, so the order of `op` is kept; with [`Order::Any`]
/// every `g`-th element from its own position in the group's range, so neighbouring work
/// items read neighbouring elements, the access a GPU coalesces into whole memory
/// transactions. The group then combines its items' results through shared memory,
/// neighbours first (strides 1, 2, 4, ...), and work item 0 stores the group's result at the
/// group's index of each `partial` buffer. `inputs` declares the input buffers and `element`
/// hands the values of element `i` to its sink (or nothing, for an element filtered out).
pub(super) fn grouped_fold_kernel(
    name: &str,
    fold: &Fold<'_>,
    g: u32,
    inputs: &dyn Fn(&KernelScope) -> Inputs,
    element: ElementFn<'_>,
) -> Result<Kernel> {
    let (identity, op, order) = (fold.identity, fold.op, fold.order);
    let (step, project) = (fold.row_op(), fold.project);
    let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
    Ok(Kernel::build_unvalidated(name, |k| {
        let Inputs {
            all: cols,
            bounding,
        } = inputs(k);
        let outs: Vec<Memory> = declare_columns(k, "partial", &types, Access::Write);
        let tiles: Vec<Memory> = types
            .iter()
            .enumerate()
            .map(|(j, t)| k.shared_dyn(&format!("tile{j}"), Type::Scalar(*t), SharedLen::Static(g)))
            .collect();
        let n = bounded(k.value::<u32>("n"), &bounding);
        let chunk = k.value::<u32>("chunk");
        let acc = identity_vars("acc", identity);
        let l = local_id(Axis::X);
        let fold_row = |i| element(&cols, i, &mut |vals| fold_into(&acc, project(vals), step));
        match order {
            Order::Kept => {
                let (start, end) = chunk_range(n, chunk);
                for_range(start, end, fold_row);
            }
            Order::Any => {
                let base = group_id(Axis::X) * (chunk * g);
                let end = (base + chunk * g).min(n);
                for_range_step(base + l, end, lit(g), fold_row);
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

/// `a + b`, column by column: counting (one `u32` column), or several counts side by side.
pub(super) fn add_columns(a: Vec<AnyVal>, b: Vec<AnyVal>) -> Vec<AnyVal> {
    a.iter()
        .zip(&b)
        .map(|(x, y)| bin(BinaryOp::Add, x, y))
        .collect()
}

/// A `u32` 1 for any row: what counting adds up.
pub(super) fn one_u32(_: Vec<AnyVal>) -> Vec<AnyVal> {
    vec![lit_value(ScalarValue::U32(1))]
}

/// [`column_vars`] holding the values of `identity`.
pub(super) fn identity_vars(name: &str, identity: &[ScalarValue]) -> Vec<AnyVar> {
    let vals: Vec<AnyVal> = identity.iter().map(|v| lit_value(*v)).collect();
    column_vars(name, &vals)
}

pub(super) fn fold_into(acc: &[AnyVar], vals: Vec<AnyVal>, op: CombineFn<'_>) {
    let cur = acc.iter().map(|v| v.get()).collect();
    for (a, v) in acc.iter().zip(op(cur, vals)) {
        a.set(&v);
    }
}
