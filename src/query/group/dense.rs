//! The dense path of a grouping: integer keys that span few values (at most [`DENSE_KEYS`],
//! or [`WIDE_DENSE_KEYS`] for one key on devices whose plans are chunked, [`dense_key_limit`])
//! are folded without a sort. Each work item folds its chunk of rows into one slot per key
//! (in device memory, shared memory or private arrays, [`DensePartials`]), then one work item
//! per key folds the chunks' slots in chunk order.

use super::*;
use std::ops::Range;

/// Integer keys spanning at most this many values (largest minus smallest plus one) are folded
/// without a sort: see [`DenseFold`].
pub(super) const DENSE_KEYS: u32 = 1024;
/// The most values one integer key may span for its folds to take the dense plan on devices
/// whose plans are chunked (CPUs): each of a few work items folds its chunk of rows into
/// slots of its own in device memory ([`DensePartials::Slots`]); 2^20 slots of 4 bytes stay
/// in a core's cache hierarchy, and a chunk is at least four times as long as its slots.
pub(super) const WIDE_DENSE_KEYS: u32 = 1 << 20;
/// The most key columns whose ranges one reduction finds: its last kernel binds a partial and
/// a result buffer for each smallest and each largest value, and GL adapters of wgpu bind 15
/// storage buffers per kernel.
pub(super) const RANGES_PER_REDUCTION: usize = 2;
/// The most partial folds (chunks times keys) the dense plan keeps per value column.
const DENSE_PARTIALS: u64 = 1 << 22;
/// How many chunks' slots one work item of the dense plan's combine folds per level on GPUs.
const DENSE_FAN: u32 = 32;

/// Where the dense plan's partials launch folds each chunk's rows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum DensePartials {
    /// A work item per chunk, into its slots in device memory (GPUs, in input order; CPUs
    /// when the keys span more than [`DENSE_KEYS`] values).
    Slots,
    /// A work item per chunk, in groups of `items`, into slots of its own in shared memory
    /// (each row's read-modify-write stays on the chip), copied to its slots in device memory
    /// at the end (GPUs, in input order, when `items` work items' slots fit in shared memory),
    /// each work item's `stride` slots after the last's (one more than the keys, so the work
    /// items of a warp folding the same key touch different banks).
    SharedSlots { items: u32, stride: u32 },
    /// A work item per chunk, into private arrays of [`DENSE_KEYS`] slots copied to its slots
    /// at the end (CPUs, when the keys span at most that many values).
    Private,
    /// A group per chunk, adding into shared memory with atomics, then copied to the chunk's
    /// slots (GPUs, for [`FoldOp::Adds`] of integers up to 32 bits).
    SharedAdds,
}

impl DensePartials {
    /// The kind and the sizes its kernel is built for, as the plan's key tells plans apart.
    fn key(self) -> [u32; 3] {
        match self {
            DensePartials::Slots => [0, 0, 0],
            DensePartials::Private => [1, 0, 0],
            DensePartials::SharedAdds => [2, 0, 0],
            DensePartials::SharedSlots { items, stride } => [3, items, stride],
        }
    }

    /// [`DensePartials::SharedSlots`] when at least 8 work items' slots (`keys` of each of
    /// `types` and a seen flag) fit in `max_shared_bytes` and every type is 4 or 8 bytes wide
    /// (narrower ones are packed into words on some backends), with the most work items that
    /// fit, a power of two up to `group`; [`DensePartials::Slots`] otherwise.
    fn shared_slots(keys: u32, types: &[ScalarType], group: u32, max_shared_bytes: u64) -> Self {
        let stride = keys + 1;
        let item_bytes = stride as u64 * (4 + types.iter().map(|t| t.size() as u64).sum::<u64>());
        let fit = (max_shared_bytes / item_bytes).min(group as u64);
        let wide = types.iter().all(|t| t.size() >= 4);
        match fit >= 8 && wide {
            true => DensePartials::SharedSlots {
                items: 1 << fit.ilog2(),
                stride,
            },
            false => DensePartials::Slots,
        }
    }
}

/// The most values one integer key may span for its folds to take the dense plan on `profile`:
/// [`WIDE_DENSE_KEYS`] where the plan is chunked, [`DENSE_KEYS`] where it is grouped (GPUs,
/// whose thousands of work items each keep a chunk's slots: wider spans leave too few chunks
/// to keep the device busy, and the sort path is fast there).
pub(in crate::query) fn dense_key_limit(profile: &DeviceProfile) -> u32 {
    match profile.grouped() {
        true => DENSE_KEYS,
        false => WIDE_DENSE_KEYS,
    }
}

/// The smallest and largest integer key of the (key, value) rows of `pairs`: for 8-bit keys
/// the type's range, otherwise found by a reduction (the largest is below the smallest when no
/// row is kept).
fn key_range<P>(pairs: &Query<'_, P>, ty: ScalarType) -> Result<(i128, i128)> {
    if ty.bits() == 8 {
        let (lo, hi) = (min_max_identity(ty, true), min_max_identity(ty, false));
        return Ok((widened(lo), widened(hi)));
    }
    Ok(key_ranges(pairs, &[ty])?[0])
}

/// The smallest and largest value of each of the first columns of the rows of `pairs`, one
/// integer column of each of `types` (in each, the largest is below the smallest when no row
/// is kept). One reduction finds those of up to [`RANGES_PER_REDUCTION`] columns.
pub(in crate::query) fn key_ranges<P>(
    pairs: &Query<'_, P>,
    types: &[ScalarType],
) -> Result<Vec<(i128, i128)>> {
    let mut ranges = Vec::new();
    for (group, group_types) in types.chunks(RANGES_PER_REDUCTION).enumerate() {
        let first = group * RANGES_PER_REDUCTION;
        let identity: Vec<ScalarValue> = group_types
            .iter()
            .flat_map(|t| [min_max_identity(*t, false), min_max_identity(*t, true)])
            .collect();
        let columns = first..first + group_types.len();
        let v = pairs.reduce_projected(
            &identity,
            &|a, b| {
                (0..a.len())
                    .map(|j| {
                        let f = if j % 2 == 0 { MathFn::Min } else { MathFn::Max };
                        math2(f, &a[j], &b[j])
                    })
                    .collect()
            },
            &|row| {
                row[columns.clone()]
                    .iter()
                    .flat_map(|k| [k.clone(), k.clone()])
                    .collect()
            },
            Order::Any,
        )?;
        ranges.extend(v.chunks(2).map(|r| (widened(r[0]), widened(r[1]))));
    }
    Ok(ranges)
}

/// What a dense fold gives: each key that has rows with its folds, in ascending key order, as
/// rows of column constants (the key's parts first, then the folded values) one after another
/// in one vector, so a fold over many keys allocates once, not once per key.
pub(in crate::query) struct KeyRows {
    /// Column constants per row: at least one.
    width: usize,
    values: Vec<ScalarValue>,
}

impl KeyRows {
    /// Rows of `width` column constants (at least one), none yet, with room for `rows`.
    pub(super) fn with_capacity(width: usize, rows: usize) -> Self {
        KeyRows {
            width: width.max(1),
            values: Vec::with_capacity(width.max(1) * rows),
        }
    }

    /// Appends a row; `row` holds [`Self::width`] values.
    pub(super) fn push(&mut self, row: impl IntoIterator<Item = ScalarValue>) {
        self.values.extend(row);
    }

    /// The rows, in order.
    pub(in crate::query) fn rows(&self) -> std::slice::ChunksExact<'_, ScalarValue> {
        self.values.chunks_exact(self.width)
    }

    /// The rows, each in a vector of its own.
    pub(in crate::query) fn into_vecs(self) -> Vec<Vec<ScalarValue>> {
        self.rows().map(<[ScalarValue]>::to_vec).collect()
    }
}

/// An integer value as an `i128`.
pub(super) fn widened(v: ScalarValue) -> i128 {
    let unused = 64 - v.ty().bits();
    if v.ty().is_signed() {
        ((v.to_bits() << unused) as i64 >> unused) as i128
    } else {
        v.to_bits() as i128
    }
}

/// The dense plan's folds of rows whose first column is a key of type `key_type` and whose other
/// columns are the values folded: each key's row of column constants, the key first, in
/// ascending key order; `None` when the keys are not integers spanning at most
/// [`dense_key_limit`] values, or no chunk length fits the device.
pub(in crate::query) fn dense_fold_values<P>(
    pairs: &Query<'_, P>,
    key_type: ScalarType,
    identity: &[ScalarValue],
    op: CombineFn<'_>,
    how: FoldOp,
) -> Result<Option<KeyRows>> {
    let none = || KeyRows::with_capacity(1 + identity.len(), 0);
    if pairs.len == 0 {
        return Ok(Some(none()));
    }
    if !key_type.is_int() {
        return Ok(None);
    }
    match key_span(pairs, key_type)? {
        KeySpan::Empty => Ok(Some(none())),
        KeySpan::Values { lo, keys } if keys <= dense_key_limit(&pairs.ctx.profile()) as u128 => {
            fold_key_span(pairs, lo, keys as u32, identity, op, how)
        }
        KeySpan::Values { .. } => Ok(None),
    }
}

/// The integer keys of a grouping's rows, as [`key_span`] finds them.
pub(super) enum KeySpan {
    /// No row is kept.
    Empty,
    /// The keys lie among the `keys` values from `lo` (of the keys' type).
    Values { lo: ScalarValue, keys: u128 },
}

/// The span of the integer keys of type `ty` in the first column of the rows of `pairs`
/// (see [`key_range`]).
pub(super) fn key_span<P>(pairs: &Query<'_, P>, ty: ScalarType) -> Result<KeySpan> {
    let (lo, hi) = key_range(pairs, ty)?;
    Ok(match hi < lo {
        true => KeySpan::Empty,
        false => KeySpan::Values {
            lo: ScalarValue::from_bits(ty, lo as u64),
            keys: (hi - lo + 1) as u128,
        },
    })
}

/// [`DenseFold`] of the rows of `pairs` (a key, then the values folded) whose keys are
/// among the `keys` values from `lo` (of the keys' type): each key's row of column constants,
/// the key first, in ascending key order; `None` when no chunk length fits the device.
pub(super) fn fold_key_span<P>(
    pairs: &Query<'_, P>,
    lo: ScalarValue,
    keys: u32,
    identity: &[ScalarValue],
    op: CombineFn<'_>,
    how: FoldOp,
) -> Result<Option<KeyRows>> {
    let dense = DenseFold {
        query: pairs,
        key_type: lo.ty(),
        lo,
        keys,
        identity,
        op,
        how,
    };
    let profile = pairs.ctx.profile();
    match dense_chunk_on(&profile, pairs.len, keys) {
        Some(chunk) => dense.run(&profile, chunk).map(Some),
        None => Ok(None),
    }
}

/// `key - lo` (both of type `ty`) as a `u32`, exact when the difference is below 2^32: keys
/// of up to 32 bits subtract as `u32` (their wrapping difference is exact and needs no
/// 64-bit integers), wider ones in their own type.
pub(super) fn key_offset(key: &AnyVal, lo: &AnyVal, ty: ScalarType) -> Val<u32> {
    let wide = offset_type(ty);
    let offset = bin(BinaryOp::Sub, &cast_dyn(key, wide), &cast_dyn(lo, wide));
    cast_dyn(&offset, ScalarType::U32).typed::<u32>()
}

/// The type [`key_offset`] subtracts keys of type `ty` in.
pub(super) fn offset_type(ty: ScalarType) -> ScalarType {
    match ty.bits() {
        64 => ty,
        _ => ScalarType::U32,
    }
}

/// The rows per chunk of the dense plan over `n` rows and `keys` slots on `profile`:
/// [`dense_chunk`], with chunks in the chunked plan long enough that there are about eight per
/// compute unit (each chunk's slots are cleared, copied out and combined once). `None` when
/// no length fits.
pub(super) fn dense_chunk_on(profile: &DeviceProfile, n: usize, keys: u32) -> Option<u32> {
    let n = n as u64;
    let units = profile.compute_units.max(1) as u64;
    // Slots in device memory (more keys than private arrays hold) cost a cleared and a
    // combined slot per key per chunk: one chunk per compute unit.
    let per_unit = match keys > DENSE_KEYS {
        true => 1,
        false => 8,
    };
    let min_rows = match profile.grouped() {
        true => (ITEM_CHUNK * 16) as u64,
        false => (profile.chunk as u64).max(n.div_ceil(per_unit * units)),
    };
    dense_chunk(n, keys as u64, min_rows, profile.loop_budget())
}

/// The rows per chunk of the dense plan over `n` rows and `keys` slots: at least `min_rows`
/// and `4 * keys` (enough to pay for the chunk's slots), and few enough chunks that the slots
/// stay within [`DENSE_PARTIALS`] per column. With a loop `budget` (half the device's limit,
/// [`crate::DeviceInfo::max_loop_iterations`]) the work items' loops, over a chunk and its
/// slots or over the chunks, stay within it: chunks are long enough that there are at most
/// `budget` of them, and short enough to be passed in it. `None` when no length does both.
fn dense_chunk(n: u64, keys: u64, min_rows: u64, budget: Option<u64>) -> Option<u32> {
    let fewest = (n * keys).div_ceil(DENSE_PARTIALS).max(1);
    let mut chunk = min_rows.max(4 * keys).max(fewest);
    if let Some(budget) = budget {
        chunk = chunk
            .max(n.div_ceil(budget.max(1)))
            .min(budget.saturating_sub(2 * keys));
        if chunk < fewest || n.div_ceil(chunk.max(1)) > budget {
            return None;
        }
    }
    u32::try_from(chunk).ok()
}

/// The fold of every key's values when the integer keys span few values (`keys` of them, from
/// `lo`): no sort, two launches (one when the rows are one chunk), the first over the query's
/// fused (key, value) rows.
///
/// 1. Each work item takes a chunk of rows and folds each row into its own slot for the row's
///    key (`partial[chunk * keys + key - lo]`, in global memory, which only it touches), and
///    marks the slot seen; rows are folded in input order. In the chunked plan, on devices
///    with [`crate::DeviceInfo::indexed_private_arrays`], the work item folds into private arrays
///    and copies them to its slots once at the end; on GPUs, likewise into arrays in shared
///    memory when 8 or more work items' slots fit there ([`DensePartials::SharedSlots`]: a
///    dependent read-modify-write per row in device memory made f32 sums over 256 keys take
///    1.1 ms from 2^18 rows on an H100, 0.26 ms in shared memory). On GPUs, when the fold
///    adds integers of up to 32 bits (`count`, integer `sum`), a group takes each chunk and
///    adds its rows into shared counters with atomics, which any order gives the same result,
///    then stores them to the chunk's slots ([`DensePartials::SharedAdds`]).
/// 2. One work item per key folds that key's seen slots of every chunk, in chunk order, and
///    marks the key seen when any was. On GPUs, where thousands of chunks keep a few hundred
///    work items looping, the combine is a tree instead: each level folds runs of
///    [`DENSE_FAN`] consecutive chunks per key, in order, until one chunk is left. Rows that
///    are one chunk need no combine: its slots are the folds.
///
/// The host then keeps the keys that were seen, in key order.
struct DenseFold<'b, 'q, P> {
    /// The (key, value) rows.
    query: &'b Query<'q, P>,
    key_type: ScalarType,
    /// The smallest key.
    lo: ScalarValue,
    /// How many key values the slots cover.
    keys: u32,
    identity: &'b [ScalarValue],
    op: CombineFn<'b>,
    how: FoldOp,
}

impl<P> DenseFold<'_, '_, P> {
    fn value_types(&self) -> Vec<ScalarType> {
        self.identity.iter().map(|v| v.ty()).collect()
    }

    /// The row's key as an offset from `lo`, the least key ([`key_offset`]), and the row's
    /// values.
    fn key_offset(&self, lo: &AnyVal, mut vals: Vec<AnyVal>) -> (Val<u32>, Vec<AnyVal>) {
        let values = vals.split_off(1);
        (key_offset(&vals[0], lo, self.key_type), values)
    }

    /// [`DensePartials::SharedAdds`]: group `c` (of `group` work items) adds the values of
    /// rows `c * chunk` up to the next `chunk` into shared counters per key (as `u32`, which
    /// wrap as the values' narrower types do), then stores them to chunk `c`'s slots, cast to
    /// the values' types, and marks the keys it saw.
    fn shared_adds_kernel(&self, group: u32) -> Result<Kernel> {
        let types = self.value_types();
        Ok(Kernel::build_unvalidated("query_group_dense_adds", |k| {
            let Inputs {
                all: cols,
                bounding,
            } = self.query.declare_inputs(k);
            let slots = declare_columns(k, "slot", &types, Access::Write);
            let seen = k.buffer::<u32>("seen", Access::Write);
            let lo = k.buffer_dyn("lo", Type::Scalar(self.key_type), Access::Read);
            let n = bounded(k.value::<u32>("n"), &bounding);
            let chunk = k.value::<u32>("chunk");
            let keys = k.value::<u32>("keys");
            let sums: Vec<Mem<u32>> = (0..types.len())
                .map(|j| k.shared::<u32>(&format!("group_sum{j}"), SharedLen::Static(DENSE_KEYS)))
                .collect();
            let seen_here = k.shared::<u32>("group_seen", SharedLen::Static(DENSE_KEYS));
            let (l, g) = (local_id(Axis::X), lit(group));
            for_range_step(l, keys, g, |s| {
                for m in &sums {
                    m.store(s, 0u32);
                }
                seen_here.store(s, 0u32);
            });
            barrier();
            let c = group_id(Axis::X);
            let lo = load_dyn(lo, lit(0u32), Type::Scalar(self.key_type));
            let base = c * chunk;
            let end = (base + chunk).min(n);
            for_range_step(base + l, end, g, |i| {
                self.query.element(&cols, i, &mut |vals| {
                    // Every offset is below `keys`; the mask shows the arrays' bound to
                    // the backends.
                    let (offset, values) = self.key_offset(&lo, vals);
                    let s = offset & (DENSE_KEYS - 1);
                    for (m, v) in sums.iter().zip(&values) {
                        m.atomic_add(s, cast_dyn(v, ScalarType::U32).typed::<u32>());
                    }
                    seen_here.atomic_or(s, 1u32);
                })
            });
            barrier();
            let row = c * keys;
            for_range_step(l, keys, g, |s| {
                for ((m, sum), t) in slots.iter().zip(&sums).zip(&types) {
                    store_dyn(*m, row + s, &cast_dyn(&sum.load(s).erase(), *t));
                }
                seen.store(row + s, seen_here.load(s));
            });
        })?)
    }

    /// Folds each chunk of rows (`keys` column, then the value columns) into its slots, as
    /// `kind` says: with [`DensePartials::Private`], each work item folds into arrays of its
    /// own ([`DENSE_KEYS`] slots, whose accesses need no bounds tests) and copies them to its
    /// slots at the end; with [`DensePartials::SharedSlots`], likewise into its stretch of
    /// arrays in shared memory; otherwise it folds into its slots in global memory directly,
    /// which keeps private memory small where many work items run at once (GPUs).
    fn partials_kernel(&self, kind: DensePartials) -> Result<Kernel> {
        let types = self.value_types();
        Ok(Kernel::build_unvalidated(
            "query_group_dense_partials",
            |k| {
                let Inputs {
                    all: cols,
                    bounding,
                } = self.query.declare_inputs(k);
                let slots = declare_columns(k, "slot", &types, Access::ReadWrite);
                let seen = k.buffer::<u32>("seen", Access::Write);
                let lo = k.buffer_dyn("lo", Type::Scalar(self.key_type), Access::Read);
                let n = bounded(k.value::<u32>("n"), &bounding);
                let chunk = k.value::<u32>("chunk");
                let chunks = k.value::<u32>("chunks");
                let keys = k.value::<u32>("keys");
                let shared = match kind {
                    DensePartials::SharedSlots { items, stride } => {
                        let len = SharedLen::Static(items * stride);
                        let here: Vec<Memory> = types
                            .iter()
                            .enumerate()
                            .map(|(j, t)| {
                                k.shared_dyn(&format!("slot{j}_here"), Type::Scalar(*t), len)
                            })
                            .collect();
                        Some((here, k.shared::<u32>("seen_here", len), stride))
                    }
                    _ => None,
                };
                let c = global_id(Axis::X);
                if_then(c.lt(chunks), || {
                    let base = c * keys;
                    let lo = load_dyn(lo, lit(0u32), Type::Scalar(self.key_type));
                    let key_offset = |vals| self.key_offset(&lo, vals);
                    let (start, end) = chunk_range(n, chunk);
                    // Clears the slots from `origin` in `mems` and `flags`, then folds the
                    // chunk's rows into them and marks the keys seen.
                    let fold_chunk = |mems: &[Memory], flags: Mem<u32>, origin: Val<u32>| {
                        for_range(0u32, keys, |s| {
                            for (m, v) in mems.iter().zip(self.identity) {
                                store_dyn(*m, origin + s, &lit_value(*v));
                            }
                            flags.store(origin + s, 0u32);
                        });
                        for_range(start, end, |i| {
                            self.query.element(&cols, i, &mut |vals| {
                                let (offset, values) = key_offset(vals);
                                let slot = origin + offset;
                                let folded = (self.op)(load_row(mems, &types, slot), values);
                                for (m, v) in mems.iter().zip(&folded) {
                                    store_dyn(*m, slot, v);
                                }
                                flags.store(slot, 1u32);
                            })
                        });
                    };
                    if let Some((here, seen_here, stride)) = &shared {
                        let own = local_id(Axis::X) * *stride;
                        fold_chunk(here, *seen_here, own);
                        for_range(0u32, keys, |s| {
                            for (m, v) in slots.iter().zip(load_row(here, &types, own + s)) {
                                store_dyn(*m, base + s, &v);
                            }
                            seen.store(base + s, seen_here.load(own + s));
                        });
                    } else if kind == DensePartials::Private {
                        let here: Vec<AnyArray> = types
                            .iter()
                            .enumerate()
                            .map(|(j, t)| {
                                AnyArray::new(
                                    &format!("slot{j}_here"),
                                    Type::Scalar(*t),
                                    DENSE_KEYS,
                                )
                            })
                            .collect();
                        let seen_here = LocalArray::<u32>::new("seen_here", DENSE_KEYS);
                        for_range(0u32, keys, |s| {
                            for (a, v) in here.iter().zip(self.identity) {
                                a.set(s, &lit_value(*v));
                            }
                        });
                        for_range(start, end, |i| {
                            self.query.element(&cols, i, &mut |vals| {
                                // Every offset is below `keys`; the mask shows the arrays'
                                // bound to the backends.
                                let (offset, values) = key_offset(vals);
                                let s = offset & (DENSE_KEYS - 1);
                                let row = here.iter().map(|a| a.get(s)).collect();
                                for (a, v) in here.iter().zip(&(self.op)(row, values)) {
                                    a.set(s, v);
                                }
                                seen_here.set(s, 1u32);
                            })
                        });
                        for_range(0u32, keys, |s| {
                            for (m, a) in slots.iter().zip(&here) {
                                store_dyn(*m, base + s, &a.get(s));
                            }
                            seen.store(base + s, seen_here.get(s));
                        });
                    } else {
                        fold_chunk(&slots, seen, base);
                    }
                });
            },
        )?)
    }

    /// One level of the combine: work item `i` (below `parts * keys`) folds the seen slots of
    /// key `i % keys` in chunks `fan * (i / keys)` up to the next `fan` (or `chunks`), in chunk
    /// order, into `out[i]`, and marks `out_seen[i]` when any slot was seen. Its outputs are
    /// the slots of `parts` chunks for the next level, or, when `parts` is 1, every key's fold.
    fn combine_kernel(&self) -> Result<Kernel> {
        let types = self.value_types();
        Ok(Kernel::build_unvalidated(
            "query_group_dense_combine",
            |k| {
                let slots = declare_columns(k, "slot", &types, Access::Read);
                let seen = k.buffer::<u32>("seen", Access::Read);
                let outs = declare_columns(k, "out", &types, Access::Write);
                let out_seen = k.buffer::<u32>("out_seen", Access::Write);
                let chunks = k.value::<u32>("chunks");
                let keys = k.value::<u32>("keys");
                let fan = k.value::<u32>("fan");
                let parts = k.value::<u32>("parts");
                let i = global_id(Axis::X);
                if_then(i.lt(parts * keys), || {
                    let key = i % keys;
                    let first = (i / keys) * fan;
                    let end = (first + fan).min(chunks);
                    let acc = identity_vars("acc", self.identity);
                    let any = Var::new("any", 0u32);
                    for_range(first, end, |c| {
                        let slot = c * keys + key;
                        let was_seen = seen.load(slot);
                        if_then(was_seen.ne(0u32), || {
                            fold_into(&acc, load_row(&slots, &types, slot), self.op);
                            any.set(was_seen);
                        });
                    });
                    for (m, a) in outs.iter().zip(&acc) {
                        store_dyn(*m, i, &a.get());
                    }
                    out_seen.store(i, any.get());
                });
            },
        )?)
    }

    /// Runs both kernels over the query's rows (keys, then values) in chunks of `chunk` rows
    /// on `profile` (see [`dense_plan`]) and returns each key that has rows with its fold, in
    /// key order.
    fn run(&self, profile: &DeviceProfile, chunk: u32) -> Result<KeyRows> {
        let ctx = &self.query.ctx;
        let types = self.value_types();
        let inputs = self.query.columns.len();
        let (plan, partials, (outs, out_seen)) = dense_plan(
            profile,
            inputs,
            self.query.len,
            chunk,
            self.keys,
            &types,
            self.how,
        );
        let values = |row: Vec<AnyVal>| row[1..].to_vec();
        let fold = Fold::new(self.identity, self.op, &values, Order::Any);
        let kernels = self.query.compiled(&plan, Some(&fold), || {
            let first = match partials {
                DensePartials::SharedAdds => self.shared_adds_kernel(profile.group_size)?,
                kind => self.partials_kernel(kind)?,
            };
            Ok(vec![first, self.combine_kernel()?])
        })?;
        // The smallest key, read by the partials kernel as one more input.
        let lo = self.lo.to_le_bytes();
        let mut sources = self.query.sources();
        sources.push(Source::Host(&lo));
        let mut run = Run::start(ctx, plan, kernels, &sources)?;
        run.finish(&sources, Vec::new())?;
        let found = run.temp_words(out_seen)?;
        let values: Vec<Vec<u64>> = outs.map(|t| run.temp_words(t)).collect::<Result<_>>()?;
        let seen: Vec<usize> = (0..self.keys as usize)
            .filter(|s| read_value(&found, *s, ScalarType::U32) != ScalarValue::U32(0))
            .collect();
        let mut rows = KeyRows::with_capacity(1 + types.len(), seen.len());
        for s in seen {
            let key = self.lo.to_bits().wrapping_add(s as u64);
            rows.values.push(ScalarValue::from_bits(self.key_type, key));
            for (w, t) in values.iter().zip(&types) {
                rows.values.push(read_value(w, s, *t));
            }
        }
        Ok(rows)
    }
}

/// The dense plan of a grouping of `n` rows (`inputs` columns: the key, then the values)
/// into `keys` slots of `types` per chunk of `chunk` rows: the partials launch (one work item
/// per chunk in the chunked plan, groups of the profile's size in the grouped one, or as many
/// as fit their slots in shared memory; in the grouped plan, when `how` adds integers of up
/// to 32 bits whose counters fit in shared memory, one group per chunk adding with shared
/// atomics; the smallest key is input
/// `inputs`), then the combine's levels (none for one chunk, whose slots are the folds; one in
/// the chunked plan; on GPUs as many as folding [`DENSE_FAN`] chunks at a time takes to leave
/// one). Returns the plan, where its partials
/// fold, and the temporaries holding the folded values and the seen flags, one per key.
pub(super) fn dense_plan(
    profile: &DeviceProfile,
    inputs: usize,
    n: usize,
    chunk: u32,
    keys: u32,
    types: &[ScalarType],
    how: FoldOp,
) -> (Plan, DensePartials, (Range<usize>, usize)) {
    let g = match profile.grouped() {
        true => profile.group_size,
        false => 1,
    };
    let shared_bytes = (types.len() as u64 + 1) * DENSE_KEYS as u64 * 4;
    let small_ints = types.iter().all(|t| t.is_int() && t.size() <= 4);
    let narrow = keys <= DENSE_KEYS;
    let kind = if g == 1 && profile.indexed_private_arrays && narrow {
        DensePartials::Private
    } else if g > 1
        && narrow
        && how == FoldOp::Adds
        && small_ints
        && shared_bytes <= profile.max_shared_bytes
    {
        DensePartials::SharedAdds
    } else if g > 1 {
        DensePartials::shared_slots(keys, types, g, profile.max_shared_bytes)
    } else {
        DensePartials::Slots
    };
    let key = ("query_group_dense", kind.key());
    let mut plan = Plan::new("group_by", *profile, key, Rows::InTemps);
    let first = match kind {
        DensePartials::SharedAdds => "query_group_dense_adds",
        _ => "query_group_dense_partials",
    };
    let (partials, combine) = (plan.kernel(first), plan.kernel("query_group_dense_combine"));
    let chunks = chunks_of(n, chunk);
    let per_chunk = chunks as usize * keys as usize;
    let slots = plan.temps("slots", types, per_chunk, crate::plan::Place::Device);
    let seen = plan.temps(
        "seen",
        &[ScalarType::U32],
        per_chunk,
        crate::plan::Place::Device,
    );
    let b = (0..inputs)
        .map(Binding::Input)
        .chain(temp_bindings(slots.clone()))
        .chain(temp_bindings(seen.clone()))
        .chain([
            Binding::Input(inputs),
            Binding::Scalar("n", n as u32),
            Binding::Scalar("chunk", chunk),
        ]);
    // A group per chunk needs no count of them; a work item per chunk tests it.
    match kind {
        DensePartials::SharedAdds => {
            let b = b.chain([Binding::Scalar("keys", keys)]);
            plan.launch(partials, Grid::linear(chunks, g), b);
        }
        _ => {
            let items = match kind {
                DensePartials::SharedSlots { items, .. } => items,
                _ => g,
            };
            let b = b.chain([
                Binding::Scalar("chunks", chunks),
                Binding::Scalar("keys", keys),
            ]);
            plan.launch(partials, Grid::linear(chunks.div_ceil(items), items), b);
        }
    }
    // The combine folds `fan` chunks' slots of each key per work item, level after level,
    // until one chunk is left: one level in the chunked plan, a tree on GPUs; none when the
    // rows were one chunk, whose slots are the folds.
    let fan = match profile.grouped() {
        true => DENSE_FAN,
        false => chunks.max(1),
    };
    let group = 64.min(profile.max_group_size);
    let (mut slots, mut seen, mut chunks) = (slots, seen, chunks);
    while chunks > 1 {
        let parts = chunks.div_ceil(fan);
        let (folds, flags) = match parts {
            1 => ("folds", "seen keys"),
            _ => ("partial folds", "partial seen"),
        };
        let place = crate::plan::Place::Device;
        let per_part = parts as usize * keys as usize;
        let outs = plan.temps(folds, types, per_part, place);
        let out_seen = plan.temps(flags, &[ScalarType::U32], per_part, place);
        let b = temp_bindings(slots)
            .chain(temp_bindings(seen))
            .chain(temp_bindings(outs.clone()))
            .chain(temp_bindings(out_seen.clone()))
            .chain([
                Binding::Scalar("chunks", chunks),
                Binding::Scalar("keys", keys),
                Binding::Scalar("fan", fan),
                Binding::Scalar("parts", parts),
            ]);
        let items = parts * keys;
        plan.launch(combine, Grid::linear(items.div_ceil(group), group), b);
        (slots, seen, chunks) = (outs, out_seen, parts);
    }
    plan.result = slots.start..seen.end;
    (plan, kind, (slots, seen.start))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `chunk` satisfies every bound [`dense_chunk`] promises.
    fn keeps_bounds(n: u64, keys: u64, min_rows: u64, budget: Option<u64>, chunk: u64) -> bool {
        let chunks = n.div_ceil(chunk);
        chunk >= min_rows.min(n.max(1)).min(budget.unwrap_or(u64::MAX))
            && chunks * keys <= DENSE_PARTIALS.max(keys)
            && budget.is_none_or(|b| chunks <= b && chunk + 2 * keys <= b)
    }

    #[test]
    fn shared_slots_take_the_most_work_items_whose_slots_fit() {
        use ScalarType::{F32, F64, U8};
        for keys in [1u32, 37, 256, 1000, 1024] {
            for types in [&[F32][..], &[F64, F32], &[U8], &[F32, U8]] {
                for (group, bytes) in [(256u32, 49_152u64), (256, 32_768), (64, 1 << 20), (256, 0)]
                {
                    let item = (keys as u64 + 1)
                        * (4 + types.iter().map(|t| t.size() as u64).sum::<u64>());
                    let got = DensePartials::shared_slots(keys, types, group, bytes);
                    let at = format!("keys {keys}, {types:?}, group {group}, {bytes} bytes");
                    match got {
                        DensePartials::SharedSlots { items, stride } => {
                            assert_eq!(stride, keys + 1, "{at}");
                            assert!(
                                items.is_power_of_two() && (8..=group).contains(&items),
                                "{at}"
                            );
                            assert!(items as u64 * item <= bytes, "{at}");
                            let twice = (2 * items as u64 * item > bytes) || 2 * items > group;
                            assert!(twice, "{at}: {items} items, twice as many fit");
                            assert!(types.iter().all(|t| t.size() >= 4), "{at}");
                        }
                        _ => assert!(
                            types.iter().any(|t| t.size() < 4) || 8 * item > bytes || group < 8,
                            "{at}: 8 work items' slots fit"
                        ),
                    }
                }
            }
        }
    }

    #[test]
    fn dense_chunks_keep_loops_within_the_budget_wherever_some_length_does() {
        // llvmpipe on GL: a loop limit of 8191 passes, half of it for the plan.
        let budget = Some(4095u64);
        for keys in [1u64, 2, 16, 255, 256, 1000, 1024] {
            for log2 in 0..=24u32 {
                for n in [(1u64 << log2) - 1, 1 << log2, (1 << log2) + 1] {
                    let got = dense_chunk(n, keys, 256, budget);
                    // Some length works when a chunk of the longest length the budget allows
                    // leaves at most `budget` chunks and at most DENSE_PARTIALS slots.
                    let longest = 4095 - 2 * keys;
                    let chunks = n.div_ceil(longest);
                    let possible = chunks <= 4095 && chunks * keys <= DENSE_PARTIALS;
                    match got {
                        Some(c) => assert!(
                            keeps_bounds(n, keys, 256, budget, c as u64),
                            "n {n}, keys {keys}: chunk {c}"
                        ),
                        None => assert!(!possible, "n {n}, keys {keys}: no chunk, {longest} works"),
                    }
                }
            }
        }
        // 2^22 rows of 256 keys: a chunk of 1024 rows would make 4096 chunks, one too many.
        let c = dense_chunk(1 << 22, 256, 256, budget).unwrap() as u64;
        assert!((1u64 << 22).div_ceil(c) <= 4095 && c + 512 <= 4095);
    }

    #[test]
    fn dense_chunks_without_a_loop_limit_pay_for_their_slots() {
        for keys in [1u64, 256, 1024] {
            for n in [1u64, 1000, 1 << 20, 1 << 26] {
                let c = dense_chunk(n, keys, 16384, None).unwrap() as u64;
                assert!(c >= 16384 && c >= 4 * keys, "n {n}, keys {keys}: chunk {c}");
                assert!(n.div_ceil(c) * keys <= DENSE_PARTIALS.max(keys));
            }
        }
    }
}
