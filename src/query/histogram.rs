//! Histograms: `ctx.from(&bytes).histogram(256)`, how many elements equal each of
//! `0..bins`. Counts are first gathered close to the work items and added to the global counts
//! once per bin (the privatized histogram of `reference/002`):
//!
//! * the chunked plan: each work item counts its chunk in a private array, without atomics;
//!   with more than [`PRIVATE_BINS`] bins, in its own row of a device array instead, and a
//!   second kernel adds the rows up;
//! * the grouped plan: each group counts in shared memory with shared atomics;
//! * more bins than these hold: one global atomic per element.
//!
//! Integer counts do not depend on the order of the additions, so the result is exact.

use super::*;

/// The most bins counted in private or shared memory (16 KiB of `u32`).
const PRIVATE_BINS: u32 = 4096;

/// Where a histogram kernel counts.
#[derive(Clone, Copy)]
enum Counts {
    /// One global atomic per element; one element per work item.
    Global,
    /// A private array per work item, which counts its chunk.
    Private,
    /// Row `i` of `counts` for work item `i`, which counts its chunk.
    Rows,
    /// Shared counts per group of `group` work items.
    Shared { group: u32 },
}

impl<'a, T: Int + Row> Query<'a, T> {
    /// Counts, for each `b` in `0..bins`, the elements equal to `b`; elements outside that
    /// range (negative ones included) are not counted. Map values to bin indices first, e.g.
    /// `.map(|x| ((x - lo) / width).cast::<u32>())`. Returns `bins` counts (none for 0 bins).
    /// Fails as the query's other terminals do.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let counts = ctx.from(&[3u8, 1, 3, 7, 0, 3]).histogram(4)?;
    /// assert_eq!(counts, [1, 1, 0, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn histogram(mut self, bins: u32) -> Result<Vec<u32>> {
        let _span = self.plan_span("histogram");
        self.check()?;
        let mut counts = zeroed_host_vec::<u32>(bins as usize, "a histogram's bins")?;
        if bins == 0 {
            return Ok(counts);
        }
        let n = self.len;
        let device = self.ctx.device();
        let chunked = self.ctx.effective_plan_shape() != PlanShape::Grouped;
        let private = chunked && device.indexed_private_arrays;
        let (kernel, grid, chunk) = if private && bins <= PRIVATE_BINS {
            // Each chunk clears its counts and adds each one to the result once: enough
            // elements per chunk that this stays small beside counting them, and few chunks
            // (two per compute unit), since their atomic adds contend for the same counts.
            let units = device.compute_units.max(1) as u64;
            let per_unit = (n as u64).div_ceil(2 * units).min(u32::MAX as u64) as u32;
            let chunk = CHUNK.max(16 * bins).max(per_unit);
            (
                self.histogram_plan(bins, Counts::Private)?,
                Grid::linear(chunks_of(n, chunk), 1),
                chunk,
            )
        } else if bins <= PRIVATE_BINS {
            // Private arrays indexed at run time are slow here, or the plan is grouped.
            let g = self.ctx.profile().group_size;
            let groups = grouped_groups(n, g);
            let kernel = self.histogram_plan(bins, Counts::Shared { group: g })?;
            (kernel, Grid::linear(groups, g), ITEM_CHUNK)
        } else if let Some(chunk) = chunked.then(|| self.row_chunk(bins)).flatten() {
            return self.histogram_in_rows(bins, chunk, counts);
        } else {
            let kernel = self.histogram_plan(bins, Counts::Global)?;
            (kernel, self.ctx.profile().per_element_grid(n), 1)
        };
        let mut args = self.input_args();
        args.push(LaunchArg::ReadWrite(u32_bytes_mut(&mut counts)));
        args.extend([value_bytes(n as u32), value_bytes(chunk)]);
        self.ctx
            .launch_planned(kernel.kernel(0), &grid, &mut args)?;
        drop(args);
        Ok(counts)
    }

    /// The compiled histogram kernel counting `bins` bins where `place` says, from the
    /// context's plan cache (see [`Query::planned`]).
    fn histogram_plan(&self, bins: u32, place: Counts) -> Result<CompiledPlan> {
        let settings = match place {
            Counts::Global => [bins, 0, 0],
            Counts::Private => [bins, 1, 0],
            Counts::Rows => [bins, 2, 0],
            Counts::Shared { group } => [bins, 3, group],
        };
        self.planned("query_histogram", &settings, None, || {
            Ok(vec![self.histogram_kernel(bins, place)?])
        })
    }

    /// The chunk length for counting `bins` bins in rows of a device array, one row per
    /// chunk: chunks of at least 16 elements per bin, so that clearing and adding up the rows
    /// stays small beside counting, unless that leaves fewer than two chunks per compute unit.
    /// `None` when the rows would take more than four bytes per element (and 64 MiB), or when
    /// a work item's loops (over its chunk and its row, or over the chunks) would pass half
    /// the device's loop limit ([`crate::DeviceInfo::max_loop_iterations`]).
    fn row_chunk(&self, bins: u32) -> Option<u32> {
        let n = self.len as u64;
        let device = self.ctx.device();
        let units = device.compute_units.max(1) as u64;
        let per_bin = (16 * bins as u64).min(n.div_ceil(2 * units));
        let mut chunk = (CHUNK as u64).max(per_bin);
        let budget = self.ctx.profile().loop_budget();
        if let Some(budget) = budget {
            chunk = chunk.min(budget.saturating_sub(bins as u64));
        }
        let chunks = n.div_ceil(chunk.max(1));
        let bytes = chunks * bins as u64 * 4;
        let loops_fit = budget.is_none_or(|budget| chunk > 0 && chunks <= budget);
        (loops_fit && bytes <= (4 * n).max(1 << 26)).then_some(chunk.min(u32::MAX as u64) as u32)
    }

    /// Counts `bins` bins into `counts` with one row of `bins` counts per `chunk` elements in
    /// device memory, then one work item per bin adding up its column.
    fn histogram_in_rows(&self, bins: u32, chunk: u32, mut counts: Vec<u32>) -> Result<Vec<u32>> {
        let n = self.len;
        let chunks = chunks_of(n, chunk);
        let rows = self
            .ctx
            .backend()
            .alloc(chunks as usize * bins as usize * 4)?;
        let mut args = self.input_args();
        args.push(LaunchArg::Device(&*rows));
        args.extend([value_bytes(n as u32), value_bytes(chunk)]);
        let kernel = self.histogram_plan(bins, Counts::Rows)?;
        self.ctx
            .launch_planned(kernel.kernel(0), &Grid::linear(chunks, 1), &mut args)?;
        drop(args);

        let fingerprint = fingerprint_of("query_histogram_add_rows", &[bins], |_| {});
        let add_rows = self
            .ctx
            .plan(fingerprint, || Ok(vec![add_rows_kernel(bins)?]))?;
        let mut args = vec![
            LaunchArg::Device(&*rows),
            LaunchArg::ReadWrite(u32_bytes_mut(&mut counts)),
            value_bytes(chunks),
        ];
        let group = 64.min(self.ctx.device().max_group_size);
        self.ctx.launch_planned(
            add_rows.kernel(0),
            &Grid::linear(bins.div_ceil(group), group),
            &mut args,
        )?;
        drop(args);
        Ok(counts)
    }

    /// The histogram kernel, counting where `place` says; a shared-count group takes every
    /// `group`-th element of its range.
    fn histogram_kernel(&self, bins: u32, place: Counts) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated("query_histogram", |k| {
            let cols = self.declare_inputs(k);
            let name = match place {
                Counts::Rows => "rows",
                _ => "counts",
            };
            let counts = k.buffer::<u32>(name, Access::ReadWrite);
            let n = bounded(k.value::<u32>("n"), &cols);
            let chunk = k.value::<u32>("chunk");
            // The element's bin, and whether it has one.
            let bin_of = |v: &AnyVal| -> (Val<bool>, Val<u32>) {
                if T::TYPE.size() == 8 {
                    let w = v.typed::<T>().cast::<u64>();
                    (w.lt(bins as u64), w.cast())
                } else {
                    let w = v.typed::<T>().cast::<u32>();
                    (w.lt(bins), w)
                }
            };
            // Hands the element's bin, if it has one, to `add`.
            // Unsigned values too narrow to pass the last bin always have one.
            let always = !T::TYPE.is_signed()
                && T::TYPE.size() < 4
                && (1u64 << (8 * T::TYPE.size())) <= bins as u64;
            let count = |vals: Vec<AnyVal>, add: &dyn Fn(Val<u32>)| {
                let (has, b) = bin_of(&vals[0]);
                if always {
                    add(b)
                } else {
                    if_then(has, || add(b));
                }
            };
            match place {
                Counts::Global => {
                    let i = global_id(Axis::X);
                    if_then(i.lt(n), || {
                        self.element(&cols, i, &mut |vals| {
                            count(vals, &|b| {
                                counts.atomic_add(b, 1u32);
                            })
                        })
                    });
                }
                Counts::Private => {
                    let local = LocalArray::<u32>::new("local_counts", bins);
                    let (start, end) = chunk_range(n, chunk);
                    for_range(start, end, |i| {
                        self.element(&cols, i, &mut |vals| {
                            count(vals, &|b| local.set(b, local.get(b) + 1u32))
                        })
                    });
                    for_range(0u32, bins, |b| {
                        let c = local.get(b);
                        if_then(c.ne(0u32), || {
                            counts.atomic_add(b, c);
                        });
                    });
                }
                Counts::Rows => {
                    let (start, end) = chunk_range(n, chunk);
                    let row = global_id(Axis::X) * bins;
                    for_range(0u32, bins, |b| counts.store(row + b, 0u32));
                    for_range(start, end, |i| {
                        self.element(&cols, i, &mut |vals| {
                            count(vals, &|b| {
                                // Always true (the rows hold `bins` counts per chunk); the
                                // test lets backends drop both accesses' bounds checks.
                                let at = row + b;
                                if_then(at.lt(counts.len()), || {
                                    counts.store(at, counts.load(at) + 1u32)
                                });
                            })
                        })
                    });
                }
                Counts::Shared { group: g } => {
                    let shared = k.shared::<u32>("group_counts", SharedLen::Static(bins));
                    let l = local_id(Axis::X);
                    for_range_step(l, lit(bins), lit(g), |b| shared.store(b, 0u32));
                    barrier();
                    let base = group_id(Axis::X) * (chunk * g);
                    let end = (base + chunk * g).min(n);
                    for_range_step(base + l, end, lit(g), |i| {
                        self.element(&cols, i, &mut |vals| {
                            count(vals, &|b| {
                                shared.atomic_add(b, 1u32);
                            })
                        })
                    });
                    barrier();
                    for_range_step(l, lit(bins), lit(g), |b| {
                        let c = shared.load(b);
                        if_then(c.ne(0u32), || {
                            counts.atomic_add(b, c);
                        });
                    });
                }
            }
        })?)
    }
}

/// The kernel adding up the rows of [`Query::histogram_in_rows`]: one work item per bin sums
/// its column of the `chunks` rows of `bins` counts.
fn add_rows_kernel(bins: u32) -> Result<Kernel> {
    Ok(Kernel::build_unvalidated(
        "query_histogram_add_rows",
        |k| {
            let rows = k.buffer::<u32>("rows", Access::Read);
            let counts = k.buffer::<u32>("counts", Access::Write);
            let chunks = k.value::<u32>("chunks");
            let b = global_id(Axis::X);
            if_then(b.lt(bins), || {
                let total = Var::new("total", 0u32);
                for_range(0u32, chunks, |c| {
                    total.set(total.get() + rows.load(c * bins + b))
                });
                counts.store(b, total.get());
            });
        },
    )?)
}
