//! Writing rows out: `to_vec`, `to_buffer`, `write_to`. Without a filter one kernel writes
//! every element; with one, a count per group, an exclusive scan of the counts on the host,
//! then an ordered scatter (the output keeps the input order).

use super::*;

impl<'a, T: Row> Query<'a, T> {
    /// The elements per work item of [`Self::map_kernel`] in the context's plan shape, and
    /// its grid over this query's elements.
    pub(super) fn map_shape(&self) -> (u32, Grid) {
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
    pub(super) fn map_kernel(&self, items: u32) -> Result<Kernel> {
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
    pub(super) fn filter_kernels(&self) -> Result<[Kernel; 2]> {
        Ok([self.chunked_count_kernel()?, self.chunked_scatter_kernel()?])
    }

    /// The chunked plan's count of kept elements, in the [`QUAD`] layout (counting is
    /// commutative): see [`Self::chunked_fold_kernel`].
    pub(super) fn chunked_count_kernel(&self) -> Result<Kernel> {
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
    pub(super) fn declare_scatter(&self, k: &KernelScope) -> ScatterParams {
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
    pub fn to_vec(mut self) -> Result<Vec<T>> {
        let _span = self.plan_span("to_vec");
        self.check()?;
        let plan = self.prepare()?;
        collect_rows(plan.selected, &mut |outs| self.write(&plan, outs))
    }

    /// Runs the element function and counts what it keeps: with a filter, the count kernel and
    /// the scan of its counts into each group's offset; without one, nothing.
    pub(super) fn prepare(&self) -> Result<Materialize> {
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
    pub(super) fn write(&self, plan: &Materialize, outs: Vec<LaunchArg<'_>>) -> Result<()> {
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

/// What [`Query::prepare`] found: how many elements a materialization writes, and what the
/// scatter needs when a filter decides that.
pub(super) struct Materialize {
    pub(super) selected: usize,
    /// `None` without a filter: the map kernel writes every element.
    pub(super) filter: Option<FilterScatter>,
}

/// What a filter's ordered scatter needs from [`Query::prepare`].
pub(super) struct FilterScatter {
    /// The per-group output offsets, then the total.
    pub(super) offsets: Vec<u32>,
    /// Work items per group when the grouped plan counted.
    pub(super) group: Option<u32>,
    /// The filter's plan: its count kernel, then its scatter kernel.
    pub(super) kernels: Plan,
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
