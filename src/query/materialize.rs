//! Writing rows out: `to_vec`, `to_buffer`, `write_to`. Without a filter one kernel writes
//! every element; with one, a count per group, an exclusive scan of the counts on the host,
//! then an ordered scatter (the output keeps the input order).

use super::*;

/// The plan writing out the rows of a query over `n` elements of `inputs` columns into its
/// `outputs` columns. Without a filter one kernel writes every element: in the chunked plan
/// one per work item, in the grouped plan [`MAP_ITEMS`] per work item. With a filter a
/// count per group (per work item of a group in the chunked plan, summed per group on the
/// host), the host's exclusive scan of the counts into each group's offset, then an
/// ordered scatter, so the output keeps the input order.
pub(super) fn materialize_plan(
    profile: &DeviceProfile,
    inputs: usize,
    outputs: usize,
    n: usize,
    filter: bool,
) -> Plan {
    let input = (0..inputs).map(Binding::Input);
    let output = (0..outputs).map(Binding::Output);
    let g = profile.group_size;
    if !filter {
        let (items, grid) = match profile.grouped() {
            true => (MAP_ITEMS, Grid::linear(chunks_of(n, g * MAP_ITEMS), g)),
            false => (1, profile.per_element_grid(n)),
        };
        let mut plan = Plan::new(
            "to_vec",
            *profile,
            ("query_map", [items, 0, 0]),
            Rows::Known(n),
        );
        let map = plan.kernel("query_map");
        plan.launch(
            map,
            grid,
            input.chain(output).chain([Binding::Scalar("n", n as u32)]),
        );
        return plan;
    }
    let grouped = profile.grouped();
    let key = ("query_filter", [if grouped { g } else { 0 }, 0, 0]);
    let mut plan = Plan::new("to_vec", *profile, key, Rows::Counted);
    let (count, scatter, groups, per_group, per_item) = if grouped {
        let count = plan.kernel("query_filter_count_grouped");
        let scatter = plan.kernel("query_filter_scatter_grouped");
        (count, scatter, profile.item_groups(n), g, ITEM_CHUNK)
    } else {
        let count = plan.kernel("query_filter_count");
        let scatter = plan.kernel("query_filter_scatter");
        let per_group = items_per_chunk(Order::Any);
        (count, scatter, profile.chunks(n), per_group, profile.chunk)
    };
    // The grouped count folds each group's counts into one.
    let counts_per_group = if grouped { 1 } else { per_group };
    let counts = plan.temps(
        "counts",
        &[ScalarType::U32],
        (groups * counts_per_group) as usize,
        Place::Host,
    );
    let offsets = plan.temps(
        "offsets",
        &[ScalarType::U32],
        groups as usize + 1,
        Place::Host,
    );
    let scalars = [
        Binding::Scalar("n", n as u32),
        Binding::Scalar("chunk", per_item),
    ];
    let b = input
        .clone()
        .chain(temp_bindings(counts.clone()))
        .chain(scalars.clone());
    plan.launch(count, Grid::linear(groups, per_group), b);
    plan.steps.push(Step::ScanCounts {
        counts: counts.start,
        per_group: counts_per_group,
        offsets: offsets.start,
    });
    // One count and one offset per group; the host sizes the output from the total anyway,
    // so the exclusive scan is a host loop, not a kernel one work item would run serially.
    let scatter_group = if grouped { g } else { 1 };
    let b = input
        .chain(temp_bindings(offsets))
        .chain(output)
        .chain(scalars);
    plan.launch(scatter, Grid::linear(groups, scatter_group), b);
    plan
}

impl<'a, T: Row> Query<'a, T> {
    /// For a stage that numbers rows (`enumerate`, `zip`, `take`, `skip`) after one that
    /// drops some (`drop_stage`): a query over the rows kept so far, run now into device
    /// columns that it holds (a count, a scan and an ordered scatter), so that positions
    /// count kept rows, as they do in Rust's iterators. Otherwise, or when the query already
    /// failed, the query as it is; an error of the run becomes the query's, for its terminal.
    pub(super) fn kept_rows(mut self, drop_stage: fn(&Stage<'a>) -> bool) -> Query<'a, T> {
        if self.error.is_some() || !self.stages.iter().any(drop_stage) {
            return self;
        }
        match self.materialize() {
            Ok((rows, len)) => {
                let mut q = Self::over_sources(&self.ctx, rows.into_iter().map(Source::Owned), len);
                q.ran = self.ran;
                q
            }
            Err(e) => {
                self.error = Some(e);
                self
            }
        }
    }

    /// The kernel writing every element (no filter in the chain). In the chunked plan one
    /// element per work item, so backends can spread (and the CPU backend vectorize) across
    /// work items. In the grouped plan each work item takes [`MAP_ITEMS`] elements a group's
    /// width apart and loads all their columns before it computes and stores any: a GPU then
    /// has that many loads in flight per work item (one 4-byte load each reached 66% of an
    /// H100's copy bandwidth).
    pub(super) fn map_kernel(&self, items: u32) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated("query_map", |k| {
            let Inputs {
                all: cols,
                bounding,
            } = self.declare_inputs(k);
            let outs: Vec<Memory> = declare_columns(k, "out", &Self::out_types(), Access::Write);
            let n = k.value::<u32>("n");
            let mems: Vec<Memory> = bounding.iter().chain(&outs).copied().collect();
            let bound = bounded(n, &mems);
            let first = group_id(Axis::X) * (group_size(Axis::X) * items) + local_id(Axis::X);
            let at: Vec<Val<u32>> = (0..items)
                .map(|j| first + group_size(Axis::X) * j)
                .collect();
            // Out of bounds a load reads zero, so every load may run before the bounds test.
            // A later piece of a concat is read through its first piece.
            let loaded: Vec<Vec<Option<AnyVal>>> = at
                .iter()
                .map(|&i| {
                    (0..cols.len())
                        .map(|c| (!self.is_later_piece(c)).then(|| self.column(&cols, c, i)))
                        .collect()
                })
                .collect();
            for (&i, row) in at.iter().zip(&loaded) {
                if_then(i.lt(bound), || {
                    let column =
                        |c: usize| row[c].clone().unwrap_or_else(|| self.column(&cols, c, i));
                    self.element_from(&column, i, &mut |vals| {
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
    pub(super) fn filter_kernels(&self) -> Result<[Kernel; 2]> {
        Ok([self.chunked_count_kernel()?, self.chunked_scatter_kernel()?])
    }

    /// The chunked plan's count of kept elements, in the [`QUAD`] layout (counting is
    /// commutative): see [`Self::chunked_fold_kernel`].
    pub(super) fn chunked_count_kernel(&self) -> Result<Kernel> {
        let fold = Fold::new(&[ScalarValue::U32(0)], &add_columns, &one_u32, Order::Any);
        self.chunked_fold_kernel("query_filter_count", &fold)
    }

    /// The parameters both ordered scatters declare, in order: the input columns, the output
    /// offsets, one output per column, `n` and the chunk length; with the range of elements the
    /// work item scans (its chunk, cut at `n` and at the inputs' lengths).
    pub(super) fn declare_scatter(&self, k: &KernelScope) -> ScatterParams {
        let Inputs {
            all: cols,
            bounding,
        } = self.declare_inputs(k);
        let offsets = k.buffer::<u32>("offsets", Access::Read);
        let outs = declare_columns(k, "out", &Self::out_types(), Access::Write);
        let n = k.value::<u32>("n");
        let chunk = k.value::<u32>("chunk");
        let (start, end) = chunk_range(bounded(n, &bounding), chunk);
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
    pub(super) fn chunked_scatter_kernel(&self) -> Result<Kernel> {
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

    /// Collects the elements into a `Vec`, in input order.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let v = ctx.from(&[3u8, 1, 2]).map(|x| x + 1).to_vec()?;
    /// assert_eq!(v, [4, 2, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_vec(mut self) -> Result<Vec<T>> {
        let _span = self.plan_span("to_vec");
        self.check()?;
        let mut run = self.prepare()?;
        let inputs = self.sources();
        collect_rows(run.rows(), &mut |outs| run.finish(&inputs, outs).map(drop))
    }

    /// The plan writing this query's rows out on `profile` (see [`materialize_plan`]).
    pub(super) fn materialize_plan(&self, profile: &DeviceProfile) -> Plan {
        materialize_plan(
            profile,
            self.columns.len(),
            Self::out_types().len(),
            self.len,
            self.has_filter(),
        )
    }

    /// The kernels of `plan`, a [`materialize_plan`] of this query.
    pub(super) fn materialize_kernels(&self, plan: &Plan) -> Result<Vec<Kernel>> {
        let grouped = plan.profile.grouped();
        Ok(match (self.has_filter(), grouped) {
            (false, true) => vec![self.map_kernel(MAP_ITEMS)?],
            (false, false) => vec![self.map_kernel(1)?],
            (true, true) => vec![
                self.grouped_reduce_kernel(
                    "query_filter_count_grouped",
                    &Fold::new(&[ScalarValue::U32(0)], &add_columns, &one_u32, Order::Any),
                    plan.profile.group_size,
                )?,
                self.grouped_scatter_kernel(plan.profile.group_size)?,
            ],
            (true, false) => self.filter_kernels()?.to_vec(),
        })
    }

    /// Compiles the plan writing this query's rows out and runs it up to the writes: with a
    /// filter, the count kernel and the scan of its counts into each group's offset; without
    /// one, nothing. The returned run knows how many rows it writes.
    pub(super) fn prepare(&self) -> Result<Run<'_>> {
        let plan = self.materialize_plan(&self.ctx.profile());
        let kernels = self.compiled(&plan, None, || self.materialize_kernels(&plan))?;
        Run::start(&self.ctx, plan, kernels, &self.sources())
    }

    /// The grouped plan's ordered scatter: each work item counts what it keeps of its range,
    /// the group scans the counts into offsets in shared memory (log2(g) steps), and each item
    /// writes its kept elements from its offset on.
    pub(super) fn grouped_scatter_kernel(&self, g: u32) -> Result<Kernel> {
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
                    &add_columns,
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
}

impl<'a, T: Scalar + Row> Query<'a, T> {
    /// Collects the elements into a new buffer on the device, in input order, without copying
    /// them to the host.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.from(&[1.0f32, 4.0, 9.0]).map(|x| x * 0.5).to_buffer()?;
    /// assert_eq!(b.download()?, [0.5, 2.0, 4.5]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_buffer(mut self) -> Result<Buffer<T>> {
        let _span = self.plan_span("to_buffer");
        self.check()?;
        let mut run = self.prepare()?;
        let inputs = self.sources();
        new_buffer(&self.ctx, run.rows(), |out| {
            run.finish(&inputs, vec![out]).map(drop)
        })
    }

    /// Writes the elements, in input order, into the start of `out` instead of a new `Vec`,
    /// so a loop that reuses `out` allocates nothing; returns how many were written (the rest
    /// of `out` is left as it was). Fails with `OutputTooShort` when `out` has fewer elements.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = [0i32; 5];
    /// let n = ctx.from(&[4i32, -2, 9]).filter(|x| x.gt(0)).write_to(&mut out)?;
    /// assert_eq!((n, out), (2, [4, 9, 0, 0, 0]));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn write_to(mut self, out: &mut [T]) -> Result<usize> {
        let _span = self.plan_span("write_to");
        self.check()?;
        let mut run = self.prepare()?;
        let kept = check_output(out.len(), run.rows())?;
        // SAFETY: initialized kiln scalars viewed as bytes the kernel may overwrite with other
        // valid values of the same type (kernels store only values of the element type).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                out[..kept].as_mut_ptr() as *mut std::mem::MaybeUninit<u8>,
                kept * std::mem::size_of::<T>(),
            )
        };
        run.finish(&self.sources(), vec![LaunchArg::Write(bytes)])?;
        Ok(kept)
    }

    /// Writes the elements, in input order, into the start of the device buffer `out` (`&mut
    /// buffer`, or a [`BufferSlice`](crate::BufferSlice) of one: `b.slice(100..)?`) without
    /// leaving the device; returns how many were written (the rest of `out` keeps its
    /// contents). Fails with `OutputTooShort` when `out` has fewer elements, or `Unsupported`
    /// when `out` belongs to another context.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = ctx.upload(&[1u32, 2, 3])?;
    /// let mut out = ctx.upload(&[7u32; 4])?;
    /// let n = ctx.from_buffer(&xs).map(|x| x * 3).write_to_buffer(&mut out)?;
    /// assert_eq!((n, out.download()?), (3, vec![3, 6, 9, 7]));
    /// let n = ctx.from(&[5u32, 6]).write_to_buffer(out.slice(2..)?)?;
    /// assert_eq!((n, out.download()?), (2, vec![3, 6, 5, 6]));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn write_to_buffer<'b>(mut self, out: impl Into<BufferSlice<'b, T>>) -> Result<usize> {
        let _span = self.plan_span("write_to_buffer");
        let out = out.into();
        self.check()?;
        self.ctx.check_device(out.backend())?;
        let mut run = self.prepare()?;
        let kept = check_output(out.len(), run.rows())?;
        run.finish(&self.sources(), vec![LaunchArg::Device(&**out.memory())])?;
        Ok(kept)
    }
}

/// What [`Query::declare_scatter`] declares for a scatter kernel.
pub(super) struct ScatterParams {
    pub(super) cols: Vec<Memory>,
    pub(super) offsets: Mem<u32>,
    pub(super) outs: Vec<Memory>,
    /// The first element the work item scans.
    pub(super) start: Val<u32>,
    /// One past the last element it scans.
    pub(super) end: Val<u32>,
}

/// Allocates `n` rows of `T` on the host, lets `write` fill them (one output argument per
/// column) and returns them.
pub(super) fn collect_rows<T: Row>(
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
pub(super) fn new_buffer<T: Scalar>(
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
pub(super) fn check_output(len: usize, need: usize) -> Result<usize> {
    if len < need {
        return Err(Error::OutputTooShort { len, need });
    }
    Ok(need)
}
