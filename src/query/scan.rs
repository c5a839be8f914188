//! Scans: `ctx.from(&xs).scan(0, |a, b| a + b).to_vec()`, the running fold of a query's
//! elements with an associative `op`. Reduce, then scan, in three launches:
//!
//! 1. each group folds its range of the fused element function into one partial (the
//!    reduction's partials kernel, in input order);
//! 2. one group scans the partials into each group's carry: the fold of every group before it;
//! 3. each group folds its range again from its carry and writes every running value.
//!
//! After a filter, a count of kept elements travels with the values as one more column, so
//! the running count is each kept element's place in the output. In the chunked plan (the
//! CPU's), a group is one work item and one range of `chunk` elements; the writing launch
//! gives each work item four consecutive ranges and scans them side by side in one loop, each
//! from its own carry, so that four independent running values keep a core's adders busy
//! where one would wait on its own previous step. The grouped plan's work items
//! scan short ranges and find their place in the group by a scan of their totals in shared
//! memory. The grouping is fixed for a given plan and input length, so a float scan gives the
//! same result on every run.

use super::*;

/// A scan of a query's elements, from [`Query::scan`] or [`Query::scan_exclusive`]. Nothing
/// runs until [`Scan::to_vec`] or [`Scan::to_buffer`].
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let deposits = [100i64, -30, 45, -80];
/// let balance = ctx.from(&deposits).scan(0, |a, b| a + b).to_vec()?;
/// let rust: Vec<i64> = deposits.iter().scan(0, |s, d| { *s += d; Some(*s) }).collect();
/// assert_eq!(balance, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Scan<'a, T> {
    query: Query<'a, T>,
    identity: Vec<ScalarValue>,
    op: OwnedCombineFn<'a>,
    exclusive: bool,
}

/// Where a scan kernel writes the running value of element `i`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// At `i`: nothing is filtered out.
    Index,
    /// At the running count of kept elements, which is the first column of the values (and is
    /// not written).
    Count,
}

/// What one scan kernel does; see [`scan_kernel`].
struct ScanKernel<'b> {
    name: &'b str,
    identity: &'b [ScalarValue],
    op: CombineFn<'b>,
    /// Work items per group: 1 runs one loop per group.
    g: u32,
    exclusive: bool,
    /// Whether each group starts from its carry (one buffer per column, indexed by group).
    carry_in: bool,
    place: Place,
    /// Ranges each work item scans side by side (more than 1 only with `g == 1` and
    /// `carry_in`): independent running values keep a CPU core's adders busy where one
    /// running value waits on its previous step.
    chains: u32,
}

/// Side-by-side ranges of one work item in the chunked plan's writing launch.
const CHAINS: u32 = 4;

/// The plan of a scan of `n` elements of `inputs` columns, folding `types` (the kept count
/// first when `filter`), writing `outputs` columns: the partials, the carries, and the
/// writing launch (see the module). In the grouped plan groups of the profile's group size
/// take [`ITEM_CHUNK`] elements per work item; in the chunked plan each work item takes a
/// range of a quarter chunk, and the writing launch gives each work item [`CHAINS`] ranges.
/// With a filter the host sums the partials' counts to size the output.
fn scan_plan(
    profile: &DeviceProfile,
    inputs: usize,
    outputs: usize,
    n: usize,
    types: &[ScalarType],
    exclusive: bool,
    filter: bool,
) -> Plan {
    let (g, groups, chunk, chains) = match profile.grouped() {
        true => {
            let g = profile.group_size;
            (g, grouped_groups(n, g), ITEM_CHUNK, 1)
        }
        false => {
            let chunk = (profile.chunk / CHAINS).max(1);
            (1, chunks_of(n, chunk), chunk, CHAINS)
        }
    };
    let key = ("query_scan", [g, chains, exclusive as u32]);
    let rows = match filter {
        true => Rows::Counted,
        false => Rows::Known(n),
    };
    let mut plan = Plan::new("scan", *profile, key, rows);
    let fold = plan.kernel(match g {
        1 => "query_scan_partials",
        _ => "query_scan_partials_grouped",
    });
    let carry = plan.kernel("query_scan_carries");
    let write = plan.kernel("query_scan");
    let input = (0..inputs).map(Binding::Input);
    let scalars = [
        Binding::Scalar("n", n as u32),
        Binding::Scalar("chunk", chunk),
    ];
    let partials = plan.temps(
        "partials",
        types,
        groups as usize,
        crate::plan::Place::Device,
    );
    let b = input
        .clone()
        .chain(temp_bindings(partials.clone()))
        .chain(scalars.clone());
    plan.launch(fold, Grid::linear(groups, g), b);
    let carries = plan.temps(
        "carries",
        types,
        groups as usize,
        crate::plan::Place::Device,
    );
    let b = temp_bindings(partials.clone())
        .chain(temp_bindings(carries.clone()))
        .chain([
            Binding::Scalar("n", groups),
            Binding::Scalar("chunk", groups.div_ceil(g)),
        ]);
    plan.launch(carry, Grid::linear(1, g), b);
    if filter {
        plan.steps.push(Step::SumCounts {
            counts: partials.start,
        });
    }
    let b = input
        .chain(temp_bindings(carries))
        .chain((0..outputs).map(Binding::Output))
        .chain(scalars);
    plan.launch(write, Grid::linear(groups.div_ceil(chains), g), b);
    plan
}

/// Replaces each of the `g` rows of `tiles` (shared arrays, one per column of `types`) with
/// the fold by `op` of the rows up to and including it, in `log2(g)` steps: at each stride
/// every work item combines the row `stride` places before its own with its own. Every work
/// item of the group must call it; it ends with a barrier.
pub(super) fn group_inclusive_scan(
    tiles: &[Memory],
    types: &[ScalarType],
    op: CombineFn<'_>,
    g: u32,
) {
    let l = local_id(Axis::X);
    let stride = Var::new("stride", 1u32);
    loop_(|| {
        if_then(stride.get().ge(g), break_);
        let s = stride.get();
        let own = column_vars("own", &load_row(tiles, types, l));
        if_then(l.ge(s), || {
            let before = load_row(tiles, types, l - s);
            let now = own.iter().map(|v| v.get()).collect();
            for (v, c) in own.iter().zip(op(before, now)) {
                v.set(&c);
            }
        });
        barrier();
        for (t, v) in tiles.iter().zip(&own) {
            store_dyn(*t, l, &v.get());
        }
        barrier();
        stride.set(s * 2u32);
    });
}

/// A scan kernel over `n` elements (a value) in ranges of `chunk` (a value) per work item:
/// each work item starts from what comes before its range (its group's carry, when
/// `carry_in`, then the work items before it in the group) and writes the running fold of
/// the values `element` hands over, inclusive or exclusive. With `chains` above 1, work item
/// `w` scans the ranges `w * chains ..` side by side instead, each from its own carry.
/// Parameters, in order: `inputs`, the carries, one output per written column, `n`, `chunk`.
fn scan_kernel(
    spec: &ScanKernel<'_>,
    inputs: &dyn Fn(&KernelScope) -> Inputs,
    element: ElementFn<'_>,
) -> Result<Kernel> {
    let types: Vec<ScalarType> = spec.identity.iter().map(|v| v.ty()).collect();
    let op = spec.op;
    let skip = usize::from(spec.place == Place::Count);
    Ok(Kernel::build_unvalidated(spec.name, |k| {
        let Inputs {
            all: cols,
            bounding,
        } = inputs(k);
        let carries: Vec<Memory> = if spec.carry_in {
            declare_columns(k, "carry", &types, Access::Read)
        } else {
            Vec::new()
        };
        let outs: Vec<Memory> = declare_columns(k, "out", &types[skip..], Access::Write);
        let n = bounded(k.value::<u32>("n"), &bounding);
        // Without a filter, element `i` is written at `i`, so the outputs bound `n` too.
        let n = if skip == 0 { bounded(n, &outs) } else { n };
        let chunk = k.value::<u32>("chunk");
        // Each element moves the running value past it; the inclusive or the exclusive value
        // is written.
        let step = |acc: &[AnyVar], i: Val<u32>| {
            element(&cols, i, &mut |vals| {
                let at = match spec.place {
                    Place::Index => i,
                    Place::Count => acc[0].get().typed::<u32>(),
                };
                let write = || {
                    for (o, a) in outs.iter().zip(&acc[skip..]) {
                        store_dyn(*o, at, &a.get());
                    }
                };
                if spec.exclusive {
                    write();
                    fold_into(acc, vals, op);
                } else {
                    fold_into(acc, vals, op);
                    write();
                }
            })
        };
        if spec.chains > 1 {
            // Range `first + c` of `chains`, each from its own carry: their common length
            // side by side, then what is left of each.
            let first = group_id(Axis::X) * spec.chains;
            let ranges: Vec<(Val<u32>, Val<u32>, Vec<AnyVar>)> = (0..spec.chains)
                .map(|c| {
                    let range = first + c;
                    // Starts past the last range are `n` (the product could wrap there).
                    let start = select(range.le(n / chunk), range * chunk, n);
                    let len = chunk.min(n - start);
                    let carry = load_row(&carries, &types, range);
                    (start, len, column_vars(&format!("acc{c}_"), &carry))
                })
                .collect();
            let common = ranges
                .iter()
                .map(|r| r.1)
                .reduce(|a, b| a.min(b))
                .unwrap_or(chunk);
            // `i < n` always holds; the tests show the backends that the accesses at `i` are
            // in bounds.
            for_range(0u32, common, |j| {
                for (start, _, acc) in &ranges {
                    let i = *start + j;
                    if_then(i.lt(n), || step(acc, i));
                }
            });
            for (start, len, acc) in &ranges {
                for_range(*start + common, (*start + *len).min(n), |i| step(acc, i));
            }
            return;
        }
        let (start, end) = chunk_range(n, chunk);
        let identity = || -> Vec<AnyVal> { spec.identity.iter().map(|v| lit_value(*v)).collect() };
        let set = |acc: &[AnyVar], vals: Vec<AnyVal>| {
            for (a, v) in acc.iter().zip(&vals) {
                a.set(v);
            }
        };
        // The running value before this work item's range: its group's carry, then (in
        // groups of several work items) the totals of the work items before it in the group.
        let acc = identity_vars("acc", spec.identity);
        if spec.g > 1 {
            let tiles: Vec<Memory> = types
                .iter()
                .enumerate()
                .map(|(j, t)| {
                    k.shared_dyn(
                        &format!("tile{j}"),
                        Type::Scalar(*t),
                        SharedLen::Static(spec.g),
                    )
                })
                .collect();
            let l = local_id(Axis::X);
            for_range(start, end, |i| {
                element(&cols, i, &mut |vals| fold_into(&acc, vals, op))
            });
            for (t, a) in tiles.iter().zip(&acc) {
                store_dyn(*t, l, &a.get());
            }
            barrier();
            group_inclusive_scan(&tiles, &types, op, spec.g);
            set(&acc, identity());
            if_then(l.gt(0u32), || set(&acc, load_row(&tiles, &types, l - 1u32)));
        }
        if spec.carry_in {
            let carry = load_row(&carries, &types, group_id(Axis::X));
            set(&acc, op(carry, acc.iter().map(|a| a.get()).collect()));
        }
        for_range(start, end, |i| step(&acc, i));
    })?)
}

impl<'a, T: Row> Query<'a, T> {
    /// The running fold of the elements (of those a filter keeps, in input order) with the
    /// associative `op`, starting from `identity` (which must be an identity of `op`): element
    /// `i` of the result is `identity op x0 op x1 ... op xi`. `op` need not be commutative.
    /// Nothing runs until the returned [`Scan`]'s `to_vec` or `to_buffer`.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let sums = ctx.from(&[1u32, 2, 3, 4]).scan(0, |a, b| a + b).to_vec()?;
    /// assert_eq!(sums, [1, 3, 6, 10]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn scan<O, F>(self, identity: T, op: F) -> Scan<'a, T>
    where
        O: IntoRow<Row = T> + 'a,
        F: Fn(T::Vals, T::Vals) -> O + 'a,
    {
        self.scan_with(identity, op, false)
    }

    /// Like [`Query::scan`], but element `i` of the result folds only the elements before
    /// element `i`: the first is `identity`, and the last element's own value is left out.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let offsets = ctx.from(&[3u32, 1, 4]).scan_exclusive(0, |a, b| a + b).to_vec()?;
    /// assert_eq!(offsets, [0, 3, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn scan_exclusive<O, F>(self, identity: T, op: F) -> Scan<'a, T>
    where
        O: IntoRow<Row = T> + 'a,
        F: Fn(T::Vals, T::Vals) -> O + 'a,
    {
        self.scan_with(identity, op, true)
    }

    fn scan_with<O, F>(self, identity: T, op: F, exclusive: bool) -> Scan<'a, T>
    where
        O: IntoRow<Row = T> + 'a,
        F: Fn(T::Vals, T::Vals) -> O + 'a,
    {
        let mut id = Vec::new();
        identity.to_values(&mut id);
        Scan {
            query: self,
            identity: id,
            op: Box::new(on_columns::<T, O>(op)),
            exclusive,
        }
    }

    /// An inclusive scan with `op` on column values, from `identity` (the planner's own
    /// scans).
    pub(super) fn scan_erased(
        self,
        identity: Vec<ScalarValue>,
        op: OwnedCombineFn<'a>,
    ) -> Scan<'a, T> {
        Scan {
            query: self,
            identity,
            op,
            exclusive: false,
        }
    }
}

impl<'a, T: Row> Scan<'a, T> {
    /// Runs the scan and collects the running values into a `Vec`, one per element (per kept
    /// element after a filter). Fails as the query's other terminals do (`TooLarge`,
    /// `LengthMismatch`, an allocation or launch error of the backend).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs: Vec<u32> = (1..=10).collect();
    /// // A running maximum of the odd elements.
    /// let peaks = ctx.from(&xs).map(|x| (x * 7) % 11).filter(|x| (x % 2u32).eq(1u32));
    /// let got = peaks.scan(0, |a, b| a.max(b)).to_vec()?;
    /// let odd: Vec<u32> = xs.iter().map(|x| (x * 7) % 11).filter(|x| x % 2 == 1).collect();
    /// let rust: Vec<u32> = odd.iter().scan(0, |m, x| { *m = (*m).max(*x); Some(*m) }).collect();
    /// assert_eq!(got, rust);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_vec(mut self) -> Result<Vec<T>> {
        let _span = self.query.plan_span("scan to_vec");
        self.query.check()?;
        let mut run = self.prepare()?;
        let inputs = self.query.sources();
        collect_rows(run.rows(), &mut |outs| run.finish(&inputs, outs).map(drop))
    }

    /// Runs the scan into new device columns, one per column of the rows; returns them and
    /// how many rows there are.
    pub(super) fn into_columns(mut self) -> Result<(Columns, usize)> {
        self.query.check()?;
        let mut run = self.prepare()?;
        let outs = alloc_rows(&self.query.ctx, &Query::<T>::out_types(), run.rows())?;
        run.finish(
            &self.query.sources(),
            outs.iter().map(|m| LaunchArg::Device(&**m)).collect(),
        )?;
        Ok((outs, run.rows()))
    }

    /// The values scanned, with the count of kept elements first after a filter.
    fn counted_identity(&self) -> Vec<ScalarValue> {
        let count = self.query.has_filter().then_some(ScalarValue::U32(0));
        count
            .into_iter()
            .chain(self.identity.iter().copied())
            .collect()
    }

    /// `op` on [`Self::counted_identity`]'s columns: the counts add up.
    fn counted_op(&self, a: Vec<AnyVal>, b: Vec<AnyVal>) -> Vec<AnyVal> {
        if !self.query.has_filter() {
            return (self.op)(a, b);
        }
        let count = bin(BinaryOp::Add, &a[0], &b[0]);
        let mut out = vec![count];
        out.extend((self.op)(a[1..].to_vec(), b[1..].to_vec()));
        out
    }

    /// The element's values as [`Self::counted_identity`] orders them.
    fn counted_element(&self, vals: Vec<AnyVal>) -> Vec<AnyVal> {
        if !self.query.has_filter() {
            return vals;
        }
        let mut out = vec![lit_value(ScalarValue::U32(1))];
        out.extend(vals);
        out
    }

    /// Compiles the scan's plan and runs it up to the writing launch: folds each group into
    /// a partial, scans the partials into the groups' carries, and counts the kept elements.
    fn prepare(&self) -> Result<Run<'_>> {
        let q = &self.query;
        let plan = self.plan(&q.ctx.profile());
        let kernels = self.compile(&plan)?;
        Run::start(&q.ctx, plan, kernels, &q.sources())
    }

    /// What the scan would run on the context's device ([`Scan::explain_on`] its profile).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let plan = ctx.from(&[1.0f32, 2.0, 3.0]).scan(0.0, |a, b| a + b).explain();
    /// assert!(plan.starts_with("device: cpu"), "{plan}");
    /// assert!(plan.contains("launch query_scan_partials on"), "{plan}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain(&self) -> String {
        device_line(&self.query.ctx) + &self.explain_on(&self.query.ctx.profile())
    }

    /// What the scan would run on a device of `profile`, without running anything: its plan
    /// (kernels, temporaries, each launch with its grid and bindings, host steps) over as
    /// many elements as the query's source has. Three launches: each chunk (on a CPU) or
    /// group (on a GPU) folds its elements into a partial, one group scans the partials into
    /// carries, and each chunk or group writes its running values from its carry. After a
    /// filter, a host step adds up the kept elements between the last two.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs: Vec<u32> = (0..100_000).collect();
    /// let gpu = kiln::DeviceProfile { shape: kiln::PlanShape::Grouped, ..ctx.profile() };
    /// let scan = ctx.from(&xs).scan(0, |a, b| a + b);
    /// let on_gpu = scan.explain_on(&gpu);
    /// assert_eq!(on_gpu.matches(". launch ").count(), 3, "{on_gpu}");
    /// assert!(on_gpu.contains("launch query_scan_partials_grouped"), "{on_gpu}");
    /// assert!(scan.explain_on(&ctx.profile()).contains("launch query_scan_partials on"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain_on(&self, profile: &DeviceProfile) -> String {
        format!("{}", self.plan(profile))
    }

    /// The scan's plan on `profile` (see [`scan_plan`]).
    pub(super) fn plan(&self, profile: &DeviceProfile) -> Plan {
        let q = &self.query;
        let types: Vec<ScalarType> = self.counted_identity().iter().map(|v| v.ty()).collect();
        scan_plan(
            profile,
            q.columns.len(),
            Query::<T>::out_types().len(),
            q.len,
            &types,
            self.exclusive,
            q.has_filter(),
        )
    }

    /// The compiled kernels of `plan`, the scan's plan, from the context's plan cache.
    fn compile(&self, plan: &Plan) -> Result<CompiledPlan> {
        let identity = self.counted_identity();
        let op = |a, b| self.counted_op(a, b);
        let project = |v| self.counted_element(v);
        let fold = Fold::new(&identity, &op, &project, Order::Kept);
        self.query
            .compiled(plan, Some(&fold), || self.kernels(plan))
    }

    /// The kernels of `plan`, the scan's plan: the partials, the carries and the writing
    /// kernel.
    pub(super) fn kernels(&self, plan: &Plan) -> Result<Vec<Kernel>> {
        let q = &self.query;
        let identity = self.counted_identity();
        let types: Vec<ScalarType> = identity.iter().map(|v| v.ty()).collect();
        let op = |a, b| self.counted_op(a, b);
        let project = |v| self.counted_element(v);
        let g = plan.profile.group_size;
        let fold = Fold::new(&identity, &op, &project, Order::Kept);
        let partials = match plan.profile.grouped() {
            false => q.chunked_fold_kernel("query_scan_partials", &fold)?,
            true => q.grouped_reduce_kernel("query_scan_partials_grouped", &fold, g)?,
        };
        let (g, chains) = match plan.profile.grouped() {
            true => (g, 1),
            false => (1, CHAINS),
        };
        let carries = scan_kernel(
            &ScanKernel {
                name: "query_scan_carries",
                identity: &identity,
                op: &op,
                g,
                exclusive: true,
                carry_in: false,
                place: Place::Index,
                chains: 1,
            },
            &|k| Inputs::values(declare_columns(k, "partial", &types, Access::Read)),
            &|cols, i, sink| sink(load_row(cols, &types, i)),
        )?;
        Ok(vec![partials, carries, self.write_kernel(g, chains)?])
    }

    /// The kernel that scans every group from its carry and writes the running values.
    /// `g` work items per group, each scanning `chains` ranges side by side.
    fn write_kernel(&self, g: u32, chains: u32) -> Result<Kernel> {
        let q = &self.query;
        let identity = self.counted_identity();
        let op = |a, b| self.counted_op(a, b);
        let place = if q.has_filter() {
            Place::Count
        } else {
            Place::Index
        };
        scan_kernel(
            &ScanKernel {
                name: "query_scan",
                identity: &identity,
                op: &op,
                g,
                exclusive: self.exclusive,
                carry_in: true,
                place,
                chains,
            },
            &|k| q.declare_inputs(k),
            &|cols, i, sink| q.element(cols, i, &mut |vals| sink(self.counted_element(vals))),
        )
    }
}

impl<'a, T: Scalar + Row> Scan<'a, T> {
    /// Runs the scan and collects the running values into a new buffer on the device, without
    /// copying them to the host. Fails as [`Scan::to_vec`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let counts = ctx.upload(&[3u32, 0, 2, 5])?;
    /// // Where each bucket starts: the exclusive running sum, left on the device.
    /// let starts = ctx.from_buffer(&counts).scan_exclusive(0, |a, b| a + b).to_buffer()?;
    /// assert_eq!(starts.download()?, [0, 3, 3, 5]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_buffer(mut self) -> Result<Buffer<T>> {
        let _span = self.query.plan_span("scan to_buffer");
        self.query.check()?;
        let mut run = self.prepare()?;
        let inputs = self.query.sources();
        new_buffer(&self.query.ctx, run.rows(), |out| {
            run.finish(&inputs, vec![out]).map(drop)
        })
    }
}
