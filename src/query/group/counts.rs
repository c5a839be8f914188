//! `count()` of a grouping by one integer key: the dense plan when the keys span at most
//! [`DENSE_KEYS`] values; a histogram of each key's offset from the smallest key when they
//! span at most [`HISTOGRAM_KEYS`], one pass over the rows (counting is the one fold a
//! histogram does, and its plans keep up to 2^20 bins in rows of counts or global atomics);
//! otherwise the sort path.

use super::dense::{fold_key_span, key_offset, key_span, widened, KeySpan, DENSE_KEYS};
use super::*;

/// The most values one integer key may span for `count()` to count it in a histogram.
pub(super) const HISTOGRAM_KEYS: u32 = 1 << 20;

/// What [`count_single_key`] did with a grouping's rows.
pub(super) enum Counted<'a, P> {
    /// Each key with rows and its count, in ascending key order.
    Counts(Vec<(ScalarValue, u32)>),
    /// The keys span too many values: the rows, handed back for the sort path.
    Declined(Query<'a, P>),
}

/// Counts the rows of `pairs` (the key, of integer type `ty`, in the first column) per key,
/// as the module says. Fails as the query's terminals do.
pub(super) fn count_single_key<P>(pairs: Query<'_, P>, ty: ScalarType) -> Result<Counted<'_, P>> {
    if pairs.len == 0 {
        return Ok(Counted::Counts(Vec::new()));
    }
    let (lo, keys) = match key_span(&pairs, ty)? {
        KeySpan::Empty => return Ok(Counted::Counts(Vec::new())),
        KeySpan::Values { lo, keys } => (lo, keys),
    };
    if keys <= DENSE_KEYS as u128 {
        let zero = [ScalarValue::U32(0)];
        let dense = fold_key_span(&pairs, lo, keys as u32, &zero, &add_columns, FoldOp::Adds)?;
        if let Some(rows) = dense {
            let counts = rows.rows().map(|row| (row[0], row[1].to_bits() as u32));
            return Ok(Counted::Counts(counts.collect()));
        }
    }
    if keys > HISTOGRAM_KEYS as u128 {
        return Ok(Counted::Declined(pairs));
    }
    let offsets: Query<'_, u32> = pairs
        .map_erased(move |c| vec![key_offset(&c[0], &lit_value(lo), ty).erase()])
        .retype();
    let first = widened(lo);
    let counts = offsets.histogram(keys as u32)?;
    Ok(Counted::Counts(
        counts
            .into_iter()
            .enumerate()
            .filter(|(_, c)| *c > 0)
            .map(|(b, c)| (ScalarValue::from_bits(ty, (first + b as i128) as u64), c))
            .collect(),
    ))
}
