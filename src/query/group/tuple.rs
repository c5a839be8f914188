//! The dense path of a grouping by a tuple of integers. When the parts' spans (largest minus
//! smallest plus one, found by a reduction) multiply to at most [`DENSE_KEYS`], each row's
//! parts become one index in mixed radix, the first part most significant: with offsets `o`
//! from the smallest values and spans `s`, the index of three parts is
//! `(o0 * s1 + o1) * s2 + o2`, so ascending indices are ascending tuples. The dense plan folds
//! by that index and the host turns each index back into the parts.

use super::dense::{fold_key_span, key_offset, key_ranges, offset_type, widened, KeyRows};
use super::*;

/// The smallest value and the span of each part of a tuple key.
#[derive(Clone)]
struct Radix {
    lows: Vec<ScalarValue>,
    spans: Vec<u32>,
}

impl Radix {
    /// The index of the key whose parts are `parts`, each within its span from its smallest
    /// value. The smallest values (in the type [`key_offset`] subtracts in)
    /// and the spans are user literals of the stage computing it, so a query run again on keys
    /// of other ranges keeps its kernels (see [`constants`]).
    fn index(&self, parts: &[AnyVal]) -> Val<u32> {
        let mut index: Option<Val<u32>> = None;
        for ((part, lo), span) in parts.iter().zip(&self.lows).zip(&self.spans) {
            let wide = ScalarValue::from_bits(offset_type(lo.ty()), widened(*lo) as u64);
            let offset = key_offset(part, &lit_value(wide), lo.ty());
            index = Some(match index {
                Some(high) => high * lit(*span) + offset,
                None => offset,
            });
        }
        index.expect("a tuple key has parts")
    }

    /// The parts of the key of index `index`.
    fn parts(&self, mut index: u64) -> Vec<ScalarValue> {
        let mut parts: Vec<ScalarValue> = self
            .lows
            .iter()
            .zip(&self.spans)
            .rev()
            .map(|(lo, span)| {
                let digit = index % *span as u64;
                index /= *span as u64;
                ScalarValue::from_bits(lo.ty(), lo.to_bits().wrapping_add(digit))
            })
            .collect();
        parts.reverse();
        parts
    }
}

/// The folds of the rows of `pairs` (the parts of a tuple key, one column of each of
/// `key_types`, then the values folded) by the dense plan, when every part is an integer and
/// their spans multiply to at most [`DENSE_KEYS`]: each key's row of column constants, the
/// parts first, in ascending key order. `None` when the keys do not fit, or no chunk length
/// fits the device. `pairs` gets a stage for the run and loses it again.
pub(super) fn dense_fold_tuple<P>(
    pairs: &mut Query<'_, P>,
    key_types: &[ScalarType],
    identity: &[ScalarValue],
    op: CombineFn<'_>,
    how: FoldOp,
) -> Result<Option<KeyRows>> {
    let none = || KeyRows::with_capacity(key_types.len() + identity.len(), 0);
    if pairs.len == 0 {
        return Ok(Some(none()));
    }
    if !key_types.iter().all(|t| t.is_int()) {
        return Ok(None);
    }
    let ranges = key_ranges(pairs, key_types)?;
    if ranges.iter().any(|(lo, hi)| hi < lo) {
        // Every row was filtered out.
        return Ok(Some(none()));
    }
    let mut keys = 1i128;
    for (lo, hi) in &ranges {
        keys = keys.saturating_mul(hi - lo + 1);
    }
    if keys > DENSE_KEYS as i128 {
        return Ok(None);
    }
    let radix = Radix {
        lows: ranges
            .iter()
            .zip(key_types)
            .map(|((lo, _), t)| ScalarValue::from_bits(*t, *lo as u64))
            .collect(),
        spans: ranges.iter().map(|(lo, hi)| (hi - lo + 1) as u32).collect(),
    };
    let parts = key_types.len();
    let stage = pairs.stages.len() as u32;
    let index = radix.clone();
    pairs.stages.push(Stage::Map(Box::new(move |cols| {
        let at = constants::user_code(stage, || index.index(&cols[..parts]));
        std::iter::once(at.erase())
            .chain(cols[parts..].iter().cloned())
            .collect()
    })));
    let folds = fold_key_span(pairs, ScalarValue::U32(0), keys as u32, identity, op, how);
    pairs.stages.pop();
    Ok(folds?.map(|folds| {
        let mut rows = KeyRows::with_capacity(key_types.len() + identity.len(), folds.rows().len());
        for row in folds.rows() {
            rows.push(
                radix
                    .parts(row[0].to_bits())
                    .into_iter()
                    .chain(row[1..].iter().copied()),
            );
        }
        rows
    }))
}
