//! Histograms: `ctx.from(&bytes).histogram(256)`, how many elements equal each of
//! `0..bins`. Counts are first gathered close to the work items and added to the global counts
//! once per bin (the privatized histogram of `reference/002`):
//!
//! * the chunked plan: each work item counts its chunk in a private array, without atomics;
//! * the grouped plan: each group counts in shared memory with shared atomics;
//! * more than [`PRIVATE_BINS`] bins: one global atomic per element.
//!
//! Integer counts do not depend on the order of the additions, so the result is exact.

use super::*;

/// The most bins counted in private or shared memory (16 KiB of `u32`).
const PRIVATE_BINS: u32 = 4096;

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
        let mut counts = vec![0u32; bins as usize];
        if bins == 0 {
            return Ok(counts);
        }
        let n = self.len;
        let (kernel, grid, chunk) = if bins > PRIVATE_BINS {
            let g = CHUNK.min(self.ctx.device().max_group_size);
            let groups = (n as u64).div_ceil(g as u64).max(1) as u32;
            (
                self.histogram_kernel(bins, None)?,
                Grid::linear(groups, g),
                1,
            )
        } else {
            // Private counts need private arrays indexed at run time; without them, the
            // grouped plan's shared counts.
            let shared = self.ctx.effective_plan_shape() == PlanShape::Grouped
                || !self.ctx.device().indexed_private_arrays;
            if shared {
                let g = grouped_size(self.ctx.device().max_group_size);
                let groups = grouped_groups(n, g);
                let kernel = self.histogram_kernel(bins, Some(g))?;
                (kernel, Grid::linear(groups, g), ITEM_CHUNK)
            } else {
                // Each chunk clears its counts and adds each one to the result once: enough
                // elements per chunk that this stays small beside counting them.
                let chunk = CHUNK.max(16 * bins);
                (
                    self.histogram_kernel(bins, Some(1))?,
                    Grid::linear(chunks_of(n, chunk), 1),
                    chunk,
                )
            }
        };
        let mut args = self.input_args();
        args.push(LaunchArg::ReadWrite(u32_bytes_mut(&mut counts)));
        args.extend([value_bytes(n as u32), value_bytes(chunk)]);
        self.ctx.launch_ir(&kernel, &grid, &mut args)?;
        drop(args);
        Ok(counts)
    }

    /// The histogram kernel: with `group` of 1, a private count per work item; with a larger
    /// group, shared counts per group, each work item taking every `group`-th element of the
    /// group's range; with none, one global atomic per element (one element per work item).
    fn histogram_kernel(&self, bins: u32, group: Option<u32>) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated("query_histogram", |k| {
            let cols = self.declare_inputs(k);
            let counts = k.buffer::<u32>("counts", Access::ReadWrite);
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
            let count = |vals: Vec<AnyVal>, add: &dyn Fn(Val<u32>)| {
                let (has, b) = bin_of(&vals[0]);
                if_then(has, || add(b));
            };
            match group {
                None => {
                    let i = global_id(Axis::X);
                    if_then(i.lt(n), || {
                        self.element(&cols, i, &mut |vals| {
                            count(vals, &|b| {
                                counts.atomic_add(b, 1u32);
                            })
                        })
                    });
                }
                Some(1) => {
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
                Some(g) => {
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
