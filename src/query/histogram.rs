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
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Counts {
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
        let (plan, place) = histogram_plan(&self.ctx.profile(), self.columns.len(), self.len, bins);
        let kernels = self.compiled(&plan, None, || {
            let mut ks = vec![self.histogram_kernel(bins, place)?];
            if let Counts::Rows = place {
                ks.push(add_rows_kernel(bins)?);
            }
            Ok(ks)
        })?;
        let inputs = self.sources();
        Run::start(&self.ctx, plan, kernels, &inputs)?.finish(
            &inputs,
            vec![LaunchArg::ReadWrite(u32_bytes_mut(&mut counts))],
        )?;
        Ok(counts)
    }

    /// What [`Query::histogram`] with `bins` bins would run on the context's device
    /// ([`Query::explain_histogram_on`] its profile).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let pixels: Vec<u8> = (0..=255).collect();
    /// let plan = ctx.from(&pixels).map(|p| p / 16u8).explain_histogram(16);
    /// assert!(plan.starts_with("device: cpu"), "{plan}");
    /// assert!(plan.contains("launch query_histogram"), "{plan}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain_histogram(&self, bins: u32) -> String {
        device_line(&self.ctx) + &self.explain_histogram_on(&self.ctx.profile(), bins)
    }

    /// What [`Query::histogram`] with `bins` bins would run on a device of `profile`, without
    /// running anything: the source and the fused stages, then the histogram's plan (where
    /// the counts are kept: private arrays, shared memory, rows of counts in device memory or
    /// one global atomic per element, as the profile and `bins` decide).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs: Vec<u32> = (0..10_000).collect();
    /// let q = ctx.from(&xs).map(|x| x % 16);
    /// let gpu = kiln::DeviceProfile { shape: kiln::PlanShape::Grouped, ..ctx.profile() };
    /// assert!(q.explain_histogram_on(&gpu, 16).contains("launch query_histogram on"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain_histogram_on(&self, profile: &DeviceProfile, bins: u32) -> String {
        let source = self.describe_source();
        if bins == 0 {
            return format!("{source}\n\nhistogram plan: none (no bins to count)\n");
        }
        let (plan, _) = histogram_plan(profile, self.columns.len(), self.len, bins);
        format!("{source}\n\n{plan}")
    }

    /// The histogram kernel, counting where `place` says; a shared-count group takes every
    /// `group`-th element of its range.
    fn histogram_kernel(&self, bins: u32, place: Counts) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated("query_histogram", |k| {
            let Inputs {
                all: cols,
                bounding,
            } = self.declare_inputs(k);
            let name = match place {
                Counts::Rows => "rows",
                _ => "counts",
            };
            let counts = k.buffer::<u32>(name, Access::ReadWrite);
            let n = bounded(k.value::<u32>("n"), &bounding);
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

/// The plan counting `bins` bins (at least one) of `n` elements of `inputs` columns into the
/// output, and where its kernel counts:
///
/// * chunked, on a device whose private arrays are plain memory, up to [`PRIVATE_BINS`]
///   bins: a private array per work item, whose chunk is long enough that clearing and adding
///   up its counts stays small beside counting them, and few chunks (two per compute unit),
///   since their atomic adds contend for the same counts;
/// * otherwise up to [`PRIVATE_BINS`] bins: shared counts per group;
/// * chunked, more bins: rows of counts in device memory, one per chunk (see [`row_chunk`]),
///   then one work item per bin adds up its column;
/// * otherwise one global atomic per element.
pub(super) fn histogram_plan(
    profile: &DeviceProfile,
    inputs: usize,
    n: usize,
    bins: u32,
) -> (Plan, Counts) {
    let chunked = !profile.grouped();
    let key = |place: u32, group: u32| ("query_histogram", [bins, place, group]);
    let counted = |key, place| {
        let mut plan = Plan::new("histogram", *profile, key, Rows::Known(bins as usize));
        let kernel = plan.kernel("query_histogram");
        (plan, kernel, place)
    };
    let scalars = |chunk: u32| {
        [
            Binding::Scalar("n", n as u32),
            Binding::Scalar("chunk", chunk),
        ]
    };
    let into_output = |chunk| {
        (0..inputs)
            .map(Binding::Input)
            .chain([Binding::Output(0)])
            .chain(scalars(chunk))
    };
    if chunked && profile.indexed_private_arrays && bins <= PRIVATE_BINS {
        let units = profile.compute_units.max(1) as u64;
        let per_unit = (n as u64).div_ceil(2 * units).min(u32::MAX as u64) as u32;
        let chunk = CHUNK.max(16 * bins).max(per_unit);
        let (mut plan, k, place) = counted(key(1, 0), Counts::Private);
        plan.launch(k, Grid::linear(chunks_of(n, chunk), 1), into_output(chunk));
        return (plan, place);
    }
    if bins <= PRIVATE_BINS {
        // Private arrays indexed at run time are slow here, or the plan is grouped.
        let g = profile.group_size;
        let (mut plan, k, place) = counted(key(3, g), Counts::Shared { group: g });
        plan.launch(
            k,
            Grid::linear(grouped_groups(n, g), g),
            into_output(ITEM_CHUNK),
        );
        return (plan, place);
    }
    if let Some(chunk) = chunked.then(|| row_chunk(profile, n, bins)).flatten() {
        let (mut plan, k, place) = counted(key(2, 0), Counts::Rows);
        let add = plan.kernel("query_histogram_add_rows");
        let chunks = chunks_of(n, chunk);
        let rows = plan.temps(
            "rows of counts",
            &[ScalarType::U32],
            chunks as usize * bins as usize,
            Place::Device,
        );
        let b = (0..inputs)
            .map(Binding::Input)
            .chain(temp_bindings(rows.clone()))
            .chain(scalars(chunk));
        plan.launch(k, Grid::linear(chunks, 1), b);
        let group = 64.min(profile.max_group_size);
        let b = temp_bindings(rows).chain([Binding::Output(0), Binding::Scalar("chunks", chunks)]);
        plan.launch(add, Grid::linear(bins.div_ceil(group), group), b);
        return (plan, place);
    }
    let (mut plan, k, place) = counted(key(0, 0), Counts::Global);
    plan.launch(k, profile.per_element_grid(n), into_output(1));
    (plan, place)
}

/// The chunk length for counting `bins` bins of `n` elements in rows of a device array, one
/// row per chunk: chunks of at least 16 elements per bin, so that clearing and adding up the
/// rows stays small beside counting, unless that leaves fewer than two chunks per compute
/// unit. `None` when the rows would take more than four bytes per element (and 64 MiB), or
/// when a work item's loops (over its chunk and its row, or over the chunks) would pass the
/// profile's loop budget.
fn row_chunk(profile: &DeviceProfile, n: usize, bins: u32) -> Option<u32> {
    let n = n as u64;
    let units = profile.compute_units.max(1) as u64;
    let per_bin = (16 * bins as u64).min(n.div_ceil(2 * units));
    let mut chunk = (CHUNK as u64).max(per_bin);
    let budget = profile.loop_budget();
    if let Some(budget) = budget {
        chunk = chunk.min(budget.saturating_sub(bins as u64));
    }
    let chunks = n.div_ceil(chunk.max(1));
    let bytes = chunks * bins as u64 * 4;
    let loops_fit = budget.is_none_or(|budget| chunk > 0 && chunks <= budget);
    (loops_fit && bytes <= (4 * n).max(1 << 26)).then_some(chunk.min(u32::MAX as u64) as u32)
}

/// The kernel adding up the rows of counts of [`Counts::Rows`]: one work item per bin sums
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PlanShape;

    fn profile(shape: PlanShape) -> DeviceProfile {
        DeviceProfile {
            shape,
            group_size: 256,
            chunk: CHUNK,
            max_group_size: 1024,
            fits_groups_to_work: false,
            host_memory: false,
            max_loop_iterations: None,
            compute_units: 4,
            indexed_private_arrays: true,
            max_shared_bytes: 48 << 10,
        }
    }

    /// The launches of a plan: kernel name, groups and group size.
    fn launches(plan: &Plan) -> Vec<(&'static str, u32, u32)> {
        plan.steps
            .iter()
            .map(|s| match s {
                Step::Launch(l) => (
                    plan.kernels[l.kernel],
                    l.grid.groups[0],
                    l.grid.group_size[0],
                ),
                _ => ("host step", 0, 0),
            })
            .collect()
    }

    #[test]
    fn histograms_count_where_the_profile_and_the_bins_say() {
        let n = 1 << 20;
        let chunked = profile(PlanShape::Chunked);
        let grouped = profile(PlanShape::Grouped);
        // Few bins, chunked: private counts, two chunks per compute unit (2^20 / 8 each).
        let (plan, place) = histogram_plan(&chunked, 1, n, 256);
        assert!(place == Counts::Private);
        assert_eq!(launches(&plan), [("query_histogram", 8, 1)]);
        // Without plain private arrays, or grouped: shared counts, 16 elements per work item.
        let no_private = DeviceProfile {
            indexed_private_arrays: false,
            ..chunked
        };
        for p in [no_private, grouped] {
            let (plan, place) = histogram_plan(&p, 1, n, 256);
            assert!(place == Counts::Shared { group: 256 });
            assert_eq!(launches(&plan), [("query_histogram", 256, 256)]);
        }
        // Many bins, chunked: a row of counts per chunk; 16 elements per bin would be longer
        // chunks than two per compute unit, so those (2^20 / 8 elements).
        let (plan, place) = histogram_plan(&chunked, 1, n, 10_000);
        assert!(place == Counts::Rows);
        assert_eq!(
            launches(&plan),
            [
                ("query_histogram", 8, 1),
                ("query_histogram_add_rows", 157, 64)
            ]
        );
        assert_eq!(plan.temps[0].len, 8 * 10_000);
        // Many bins, grouped: one global atomic per element.
        let (plan, place) = histogram_plan(&grouped, 1, n, 10_000);
        assert!(place == Counts::Global);
        assert_eq!(launches(&plan), [("query_histogram", 1024, 1024)]);
    }
}
