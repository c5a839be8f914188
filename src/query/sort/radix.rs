//! The radix passes of a sort by one packed key (see the `sort` module): the plan, the count
//! and move kernels of both plan shapes, and the reduction that skips the digits every row
//! shares.

use super::super::scan::group_inclusive_scan;
use super::super::*;
use super::keys::Packed;

/// Digits of 8 bits: 256 counts per chunk.
const RADIX: u32 = 256;
/// The most rows per work item in a tile.
const TILE_ITEMS: u32 = 16;
/// A tile row's place and digit share one `u32` in shared memory: the place in the low 16
/// bits, the digit above.
const PLACE_BITS: u32 = 16;

/// How a sort's passes spread the rows over work items (see the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PassShape {
    /// Each work item alone takes a chunk of `chunk` rows.
    Chunked { chunk: u32 },
    /// Each group of `group` work items takes a tile of `group * items` rows.
    Tiled { group: u32, items: u32 },
}

impl PassShape {
    /// The shape for `profile`: tiled in the grouped plan, with as many rows per work item
    /// (up to [`TILE_ITEMS`], a power of two) as the device's shared memory holds; chunked
    /// otherwise, and where not even one row per work item fits.
    fn of(profile: &DeviceProfile) -> PassShape {
        let group = profile.group_size;
        let fits = |items: u32| tile_shared_bytes(group, items) <= profile.max_shared_bytes;
        match (0..=TILE_ITEMS.ilog2())
            .rev()
            .map(|b| 1 << b)
            .find(|&i| fits(i))
        {
            Some(items) if profile.grouped() && group * items <= 1 << PLACE_BITS => {
                PassShape::Tiled { group, items }
            }
            _ => PassShape::Chunked {
                chunk: profile.chunk,
            },
        }
    }

    /// Rows per chunk (a tile is a chunk).
    fn rows(self) -> u32 {
        match self {
            PassShape::Chunked { chunk } => chunk,
            PassShape::Tiled { group, items } => group * items,
        }
    }

    /// Rows per work item of a tile; 0 when chunked.
    fn items(self) -> u32 {
        match self {
            PassShape::Chunked { .. } => 0,
            PassShape::Tiled { items, .. } => items,
        }
    }
}

/// The length of a tile's array of `rows` places with one spare word after every 32, so that
/// work items reading `items` neighbouring places each hit different shared-memory banks.
fn padded(rows: Val<u32>) -> Val<u32> {
    rows + (rows >> 5u32)
}

/// The length of a tile's array of `rows` places, [`padded`] (the index one past its last).
fn padded_len(rows: u32) -> u32 {
    rows + rows / 32
}

/// The shared memory a tile of `group * items` rows takes in the move: two arrays of its
/// padded places, two words per work item for the group's scans, and a start per digit.
fn tile_shared_bytes(group: u32, items: u32) -> u64 {
    4 * (2 * padded_len(group * items) as u64 + 2 * group as u64 + RADIX as u64)
}

/// The plan of the radix passes over `n` rows of `types` (the rows are the plan's inputs,
/// one per column) in chunks of `shape`, one pass per digit at each of `shifts`, writing the
/// sorted rows to the outputs: per pass a count launch, the exclusive scan of the counts into
/// offsets (the plan of `offsets_scan`, inlined), and a move launch. The passes alternate
/// between the input columns and a spare set; the last writes the outputs.
fn sort_plan(
    profile: &DeviceProfile,
    shape: PassShape,
    types: &[ScalarType],
    n: usize,
    shifts: &[u32],
    offsets_scan: &Plan,
) -> Plan {
    let chunks = chunks_of(n, shape.rows());
    let scan = &offsets_scan.key.1;
    // The tile's rows per work item (0 when chunked); the scan's shape gives the group. The
    // key's order is in the fingerprint's IR.
    let key = ("query_sort", [shape.items(), scan[0], scan[1]]);
    let mut plan = Plan::new("sort", *profile, key, Rows::Known(n));
    let (count, scatter) = (
        plan.kernel("query_sort_count"),
        plan.kernel("query_sort_scatter"),
    );
    let digits = chunks as usize * RADIX as usize;
    let counts = plan.temps("digit counts", &[ScalarType::U32], digits, Place::Device);
    let offsets = plan.temps("digit offsets", &[ScalarType::U32], digits, Place::Device);
    let spare: Vec<Binding> = temp_bindings(plan.temps("rows", types, n, Place::Device)).collect();
    let rows: Vec<Binding> = (0..types.len()).map(Binding::Input).collect();
    let outputs: Vec<Binding> = (0..types.len()).map(Binding::Output).collect();
    let grid = match shape {
        PassShape::Chunked { .. } => Grid::linear(chunks, 1),
        PassShape::Tiled { group, .. } => Grid::linear(chunks, group),
    };
    for (pass, &shift) in shifts.iter().enumerate() {
        let (from, to) = match pass % 2 {
            0 => (&rows, &spare),
            _ => (&spare, &rows),
        };
        let to = if pass + 1 == shifts.len() {
            &outputs
        } else {
            to
        };
        let scalars = [
            Binding::Scalar("n", n as u32),
            Binding::Scalar("chunk", shape.rows()),
            Binding::Scalar("chunks", chunks),
            Binding::Scalar("shift", shift),
        ];
        let b = from
            .iter()
            .cloned()
            .chain(scalars.clone())
            .chain(temp_bindings(counts.clone()));
        plan.launch(count, grid.clone(), b);
        plan.inline(
            offsets_scan,
            &[Binding::Temp(counts.start)],
            &[Binding::Temp(offsets.start)],
        );
        let b = from
            .iter()
            .cloned()
            .chain(scalars)
            .chain(temp_bindings(offsets.clone()))
            .chain(to.iter().cloned());
        plan.launch(scatter, grid.clone(), b);
    }
    plan
}

/// The exclusive running sum of `n` digit counts, the sort's offsets: a scan whose column
/// is given by the sort plan it is inlined in.
fn offsets_scan(ctx: &Context, n: usize) -> Scan<'static, u32> {
    Query::<u32>::shape_only(ctx, n).scan_exclusive(0, |a, b| a + b)
}

/// One stable radix sort of a query's rows (`T`) by a [`Packed`] key, on `ctx`'s device.
pub(super) struct KeySort<'s, 'a, T> {
    pub ctx: &'s Context,
    pub key: Packed<'s, 'a>,
    pub _rows: PhantomData<T>,
}

impl<T: Row> KeySort<'_, '_, T> {
    /// The shifts of the digits the passes sort by, lowest first: of the ordered key's 8-bit
    /// digits, those that differ between some of the `n` rows (one AND and OR reduction of
    /// the ordered keys finds them); a pass over a digit every row shares would leave the
    /// rows in place. One pass when no digit differs (it copies the rows), and every digit of
    /// 8-bit keys without the reduction. Fails as a reduction does.
    fn digit_shifts(&self, rows: &Columns, n: usize) -> Result<Vec<u32>> {
        let bits = self.key.bits();
        let all: Vec<u32> = (0..if bits > 32 { 8 } else { 4 }).map(|d| d * 8).collect();
        if bits == 8 {
            return Ok(vec![0]);
        }
        let wide = bits > 32;
        let ones = match wide {
            true => ScalarValue::U64(u64::MAX),
            false => ScalarValue::U32(u32::MAX),
        };
        let zero = ScalarValue::zero(ones.ty());
        let refs: Vec<&dyn DeviceMemory> = rows.iter().map(|c| &**c).collect();
        let both = Query::<T>::over_device(self.ctx, &refs, n).reduce_projected(
            &[ones, zero],
            &|a, b| {
                vec![
                    bin(BinaryOp::And, &a[0], &b[0]),
                    bin(BinaryOp::Or, &a[1], &b[1]),
                ]
            },
            &|row| {
                let key = self.key.ordered(&row);
                vec![key.clone(), key]
            },
            Order::Any,
        )?;
        let varying = both[0].to_bits() ^ both[1].to_bits();
        let shifts: Vec<u32> = all
            .into_iter()
            .filter(|s| (varying >> s) & 255 != 0)
            .collect();
        Ok(if shifts.is_empty() { vec![0] } else { shifts })
    }

    /// The digit at `shift` of the ordered key of the row `vals`.
    fn digit(&self, vals: &[AnyVal], shift: Val<u32>) -> Val<u32> {
        let bits = self.key.ordered(vals);
        if self.key.bits() > 32 {
            ((bits.typed::<u64>() >> shift.cast::<u64>()) & 255u64).cast()
        } else {
            (bits.typed::<u32>() >> shift) & 255u32
        }
    }

    /// The parameters both pass kernels start with: the row columns, `n`, the rows per chunk,
    /// the number of chunks and the digit's shift.
    fn declare_pass(&self, k: &KernelScope) -> PassParams {
        let types = Query::<T>::out_types();
        let cols: Vec<Memory> = declare_columns(k, "rows", &types, Access::Read);
        let n = bounded(k.value::<u32>("n"), &cols);
        let chunk = k.value::<u32>("chunk");
        let chunks = k.value::<u32>("chunks");
        let shift = k.value::<u32>("shift");
        PassParams {
            types,
            cols,
            n,
            chunk,
            chunks,
            shift,
        }
    }

    /// Counts the digits of each chunk into `counts[digit * chunks + chunk]`: in a private
    /// histogram per work item (chunked), or in shared memory per group (tiled).
    fn count_kernel(&self, shape: PassShape) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated("query_sort_count", |k| {
            let p = self.declare_pass(k);
            let counts = k.buffer::<u32>("counts", Access::Write);
            let PassShape::Tiled { group, .. } = shape else {
                let c = global_id(Axis::X);
                let (start, end) = chunk_range(p.n, p.chunk);
                if_then(c.lt(p.chunks), || {
                    let hist = LocalArray::<u32>::new("hist", RADIX);
                    for_range(start, end, |i| {
                        let d = self.digit(&load_row(&p.cols, &p.types, i), p.shift);
                        hist.set(d, hist.get(d) + 1u32);
                    });
                    for_range(0u32, RADIX, |d| counts.store(d * p.chunks + c, hist.get(d)));
                });
                return;
            };
            let hist = k.shared::<u32>("digit_counts", SharedLen::Static(RADIX));
            let (l, tile) = (local_id(Axis::X), group_id(Axis::X));
            for_range_step(l, lit(RADIX), lit(group), |d| hist.store(d, 0u32));
            barrier();
            let base = tile * p.chunk;
            for_range_step(base + l, (base + p.chunk).min(p.n), lit(group), |i| {
                let d = self.digit(&load_row(&p.cols, &p.types, i), p.shift);
                hist.atomic_add(d, 1u32);
            });
            barrier();
            for_range_step(l, lit(RADIX), lit(group), |d| {
                counts.store(d * p.chunks + tile, hist.load(d))
            });
        })?)
    }

    /// Moves each chunk's rows, in order, from the places `offsets[digit * chunks + chunk]`
    /// on: row by row per work item (chunked), or ranked in shared memory first (tiled).
    fn scatter_kernel(&self, shape: PassShape) -> Result<Kernel> {
        Ok(Kernel::build_unvalidated("query_sort_scatter", |k| {
            let p = self.declare_pass(k);
            let offsets = k.buffer::<u32>("offsets", Access::Read);
            let outs: Vec<Memory> = declare_columns(k, "out", &p.types, Access::Write);
            let PassShape::Tiled { group, items } = shape else {
                let c = global_id(Axis::X);
                let (start, end) = chunk_range(p.n, p.chunk);
                if_then(c.lt(p.chunks), || {
                    let next = LocalArray::<u32>::new("next", RADIX);
                    for_range(0u32, RADIX, |d| next.set(d, offsets.load(d * p.chunks + c)));
                    for_range(start, end, |i| {
                        let vals = load_row(&p.cols, &p.types, i);
                        let d = self.digit(&vals, p.shift);
                        let at = next.get(d);
                        for (o, v) in outs.iter().zip(&vals) {
                            store_dyn(*o, at, v);
                        }
                        next.set(d, at + 1u32);
                    });
                });
                return;
            };
            self.move_tile(k, &p, group, items, offsets, &outs);
        })?)
    }

    /// The tiled move (see the module): the tile's places, each with its row's digit, are
    /// sorted by digit in shared memory, then each row goes to its digit's offset plus its
    /// rank among the tile's rows of that digit, so neighbouring work items write
    /// neighbouring places.
    fn move_tile(
        &self,
        k: &KernelScope,
        p: &PassParams,
        group: u32,
        items: u32,
        offsets: Mem<u32>,
        outs: &[Memory],
    ) {
        let half = padded_len(group * items);
        let places = k.shared::<u32>("tile_places", SharedLen::Static(2 * half));
        let sums = [
            k.shared::<u32>("split_sums_low", SharedLen::Static(group)),
            k.shared::<u32>("split_sums_high", SharedLen::Static(group)),
        ];
        let starts = k.shared::<u32>("digit_starts", SharedLen::Static(RADIX));
        let (l, tile) = (local_id(Axis::X), group_id(Axis::X));
        let base = tile * p.chunk;
        let valid = select(base.lt(p.n), p.n - base, 0u32).min(p.chunk);
        // Each place with its row's digit; places past the rows take the largest digit and,
        // coming last, stay behind every row.
        for_range(0u32, items, |j| {
            let at = j * group + l;
            let digit = Var::new("digit", RADIX - 1);
            if_then(at.lt(valid), || {
                digit.set(self.digit(&load_row(&p.cols, &p.types, base + at), p.shift))
            });
            places.store(padded(at), (digit.get() << PLACE_BITS) | at);
        });
        barrier();
        // Four stable splits on two bits of the digit each, lowest first. Each work item
        // takes `items` neighbouring places; the group's scan of how many of each value of
        // the two bits come before each work item (four counts of 16 bits in two words)
        // gives every place its new one.
        for_range(0u32, 4u32, |split| {
            let from = (split & 1u32) * half;
            let to = half - from;
            let bits_of = |v: Val<u32>| (v >> (split * 2u32 + PLACE_BITS)) & 3u32;
            // One more of `bits` in the two words of counts.
            let one = |bits: Val<u32>| {
                let one = 1u32 << ((bits & 1u32) * 16u32);
                (
                    select(bits.lt(2u32), one, 0u32),
                    select(bits.ge(2u32), one, 0u32),
                )
            };
            let own = [Var::new("own_low", 0u32), Var::new("own_high", 0u32)];
            let mine = |j: Val<u32>| from + padded(l * items + j);
            for_range(0u32, items, |j| {
                let (low, high) = one(bits_of(places.load(mine(j))));
                own[0].set(own[0].get() + low);
                own[1].set(own[1].get() + high);
            });
            for (s, o) in sums.iter().zip(&own) {
                s.store(l, o.get());
            }
            barrier();
            let memories = sums.map(|s| s.memory());
            group_inclusive_scan(&memories, &[ScalarType::U32; 2], &add_columns, group);
            let before: Vec<Var<u32>> = sums
                .iter()
                .zip(&own)
                .map(|(s, o)| Var::new("before", s.load(l) - o.get()))
                .collect();
            let (low, high) = (sums[0].load(group - 1), sums[1].load(group - 1));
            let totals = [low & 0xFFFFu32, low >> 16u32, high & 0xFFFFu32];
            for_range(0u32, items, |j| {
                let v = places.load(mine(j));
                let bits = bits_of(v);
                let first = (0..3).fold(lit(0u32), |acc, b| {
                    acc + select(bits.gt(b as u32), totals[b], 0u32)
                });
                let word = select(bits.lt(2u32), before[0].get(), before[1].get());
                let rank = (word >> ((bits & 1u32) * 16u32)) & 0xFFFFu32;
                places.store(to + padded(first + rank), v);
                let (low, high) = one(bits);
                before[0].set(before[0].get() + low);
                before[1].set(before[1].get() + high);
            });
            barrier();
        });
        // After an even number of splits the sorted places are in the first half. Each run of
        // one digit notes where it starts.
        let digit_at = |at: Val<u32>| places.load(padded(at)) >> PLACE_BITS;
        for_range(0u32, items, |j| {
            let at = j * group + l;
            let d = digit_at(at);
            let before = select(at.gt(0u32), digit_at(at.max(1u32) - 1u32), RADIX);
            if_then(before.ne(d), || starts.store(d, at));
        });
        barrier();
        for_range(0u32, items, |j| {
            let at = j * group + l;
            let v = places.load(padded(at));
            let row = v & ((1u32 << PLACE_BITS) - 1);
            if_then(row.lt(valid), || {
                let d = v >> PLACE_BITS;
                let to = offsets.load(d * p.chunks + tile) + at - starts.load(d);
                let vals = load_row(&p.cols, &p.types, base + row);
                for (o, v) in outs.iter().zip(&vals) {
                    store_dyn(*o, to, v);
                }
            });
        });
    }

    /// The sort of `n` rows on `profile` with a pass per byte of the key (the most a run
    /// takes), as `explain` prints it.
    pub(super) fn every_digit_plan(&self, profile: &DeviceProfile, n: usize) -> Plan {
        let shifts: Vec<u32> = (0..self.key.bits().div_ceil(8)).map(|d| d * 8).collect();
        self.plan(profile, n, &shifts).plan
    }

    /// The sort of `n` rows on a device of `profile` by the digits at `shifts`.
    fn plan(&self, profile: &DeviceProfile, n: usize, shifts: &[u32]) -> SortPlan {
        let shape = PassShape::of(profile);
        let digits = chunks_of(n, shape.rows()) as usize * RADIX as usize;
        let scan = offsets_scan(self.ctx, digits);
        let scan_plan = scan.plan(profile);
        let types = Query::<T>::out_types();
        let plan = sort_plan(profile, shape, &types, n, shifts, &scan_plan);
        SortPlan {
            shape,
            scan,
            scan_plan,
            plan,
        }
    }

    /// The fingerprint of `plan`'s kernels (see the `plan_cache` module): the row types, the
    /// order, the scan's shape and the ordered key of one row.
    fn fingerprint(&self, plan: &Plan) -> Option<Fingerprint> {
        fingerprint_of(plan.key.0, &plan.key.1, |k| {
            let types = Query::<T>::out_types();
            let cols = declare_columns(k, "rows", &types, Access::Read);
            let row = load_row(&cols, &types, global_id(Axis::X));
            store_outputs(k, &[self.key.ordered(&row)]);
        })
    }

    /// Sorts `rows` (`n` of them) pass by pass, through a second set of columns (and through
    /// `rows`), and writes the last pass into `outs` (one argument per column).
    pub(super) fn passes(&self, rows: &Columns, n: usize, outs: Vec<LaunchArg<'_>>) -> Result<()> {
        let ctx = self.ctx;
        let shifts = self.digit_shifts(rows, n)?;
        let planned = self.plan(&ctx.profile(), n, &shifts);
        let kernels = ctx.plan(self.fingerprint(&planned.plan), || {
            let shape = planned.shape;
            let mut ks = vec![self.count_kernel(shape)?, self.scatter_kernel(shape)?];
            ks.extend(planned.scan.kernels(&planned.scan_plan)?);
            Ok(ks)
        })?;
        let sources: Vec<Source> = rows.iter().map(|m| Source::Device(&**m)).collect();
        Run::start(ctx, planned.plan, kernels, &sources)?.finish(&sources, outs)?;
        Ok(())
    }
}

/// What [`KeySort::plan`] makes.
struct SortPlan {
    /// How the passes spread the rows.
    shape: PassShape,
    /// The offsets scan, whose kernels the sort's plan runs.
    scan: Scan<'static, u32>,
    /// Its plan, inlined in `plan` once per pass.
    scan_plan: Plan,
    /// The sort's plan.
    plan: Plan,
}

/// What [`KeySort::declare_pass`] declares.
struct PassParams {
    types: Vec<ScalarType>,
    cols: Vec<Memory>,
    n: Val<u32>,
    /// Rows per chunk.
    chunk: Val<u32>,
    chunks: Val<u32>,
    shift: Val<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanShape, Step};

    fn profile(shape: PlanShape, max_shared_bytes: u64) -> DeviceProfile {
        DeviceProfile {
            shape,
            group_size: 256,
            chunk: 16384,
            max_group_size: 1024,
            fits_groups_to_work: false,
            host_memory: false,
            max_loop_iterations: None,
            compute_units: 4,
            indexed_private_arrays: true,
            max_shared_bytes,
        }
    }

    #[test]
    fn tiles_take_as_many_rows_as_shared_memory_holds() {
        let tiled = |items| PassShape::Tiled { group: 256, items };
        let grouped = |bytes| PassShape::of(&profile(PlanShape::Grouped, bytes));
        // 36 KiB for 16 rows per work item (two padded arrays of 4096 places, the scan's
        // two words per work item and 256 starts), 19.5 KiB for 8, 11.25 KiB for 4.
        assert_eq!(grouped(48 << 10), tiled(16));
        assert_eq!(grouped(36 << 10), tiled(16));
        assert_eq!(grouped((36 << 10) - 1), tiled(8));
        assert_eq!(grouped(16 << 10), tiled(4));
        assert_eq!(grouped(1 << 10), PassShape::Chunked { chunk: 16384 });
        let chunked = PassShape::of(&profile(PlanShape::Chunked, 48 << 10));
        assert_eq!(chunked, PassShape::Chunked { chunk: 16384 });
    }

    #[test]
    fn each_pass_counts_scans_and_moves_over_tiles() {
        let ctx = Context::with_backend(crate::BackendKind::Cpu).unwrap();
        let gpu = profile(PlanShape::Grouped, 48 << 10);
        let n = 100_000;
        let shape = PassShape::of(&gpu);
        let tiles = chunks_of(n, shape.rows());
        assert_eq!(tiles, 25);
        let scan = offsets_scan(&ctx, tiles as usize * RADIX as usize);
        let scan_plan = scan.plan(&gpu);
        let plan = sort_plan(&gpu, shape, &[ScalarType::U32], n, &[0, 8], &scan_plan);
        let launches: Vec<(&str, u32, u32)> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Launch(l) => Some((
                    plan.kernels[l.kernel],
                    l.grid.groups[0],
                    l.grid.group_size[0],
                )),
                _ => None,
            })
            .collect();
        let scan_launches = scan_plan.steps.len();
        assert_eq!(launches.len(), 2 * (2 + scan_launches));
        for pass in launches.chunks(2 + scan_launches) {
            assert_eq!(pass[0], ("query_sort_count", tiles, 256));
            assert_eq!(pass[scan_launches + 1], ("query_sort_scatter", tiles, 256));
        }
    }
}
