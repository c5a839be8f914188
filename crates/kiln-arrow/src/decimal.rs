//! Decimals: Decimal128 columns as scaled `i64` values, summed exactly and brought back as
//! Decimal128.

use crate::query::{is_valid, primitive_array};
use crate::{Error, NullableQuery};
use arrow_array::types::Decimal128Type;
use arrow_array::Decimal128Array;
use kiln::ir::lit;
use kiln::{select, Val};

/// The largest precision of a Decimal128.
const MAX_PRECISION: u8 = 38;

/// Whether `value` has at most `precision` decimal digits.
fn fits(value: i128, precision: u8) -> bool {
    value.unsigned_abs() < 10u128.pow(u32::from(precision.min(MAX_PRECISION)))
}

impl NullableQuery<'_, i64> {
    /// The exact sum of the rows that are not NULL, or `None` when there is none. Each value is
    /// split into its low 32 bits and the rest, summed apart in `i64` (neither sum can
    /// overflow below kiln's `MAX_LEN` rows) and joined in `i128` on the host, so no sum of
    /// `i64` values wraps.
    pub fn sum_exact(self) -> Result<Option<i128>, Error> {
        let (low, high, n) = self
            .inner()
            .map(|(x, v): (Val<i64>, Val<u8>)| {
                let valid = is_valid(v);
                (
                    select(valid, x & 0xFFFF_FFFFi64, lit(0i64)),
                    select(valid, x >> 32i64, lit(0i64)),
                    v.cast::<u32>(),
                )
            })
            .fold(
                (0i64, 0i64, 0u32),
                |a: (Val<i64>, Val<i64>, Val<u32>), b: (Val<i64>, Val<i64>, Val<u32>)| {
                    (a.0 + b.0, a.1 + b.1, a.2 + b.2)
                },
            )?;
        Ok((n > 0).then(|| (i128::from(high) << 32) + i128::from(low)))
    }

    /// SQL's `SUM` of a Decimal128 column read as its scaled values ([`crate::Column::decimal128`]):
    /// the exact sum, in the same scale, or `None` when every row is NULL. Fails with
    /// [`Error::DecimalOverflow`] when the sum has more than `precision` digits (SQL engines
    /// give the sum of a `DECIMAL(p, s)` column the precision `min(38, p + 10)`); never wraps.
    pub fn sum_decimal128(self, precision: u8) -> Result<Option<i128>, Error> {
        match self.sum_exact()? {
            Some(sum) if !fits(sum, precision) => Err(Error::DecimalOverflow {
                value: sum,
                precision,
            }),
            sum => Ok(sum),
        }
    }

    /// The rows as a Decimal128 array of `precision` and `scale` (the values are the scaled
    /// integers), NULL where they are. Fails with [`Error::DecimalOverflow`] at the first
    /// valid value with more than `precision` digits.
    pub fn to_decimal128(self, precision: u8, scale: i8) -> Result<Decimal128Array, Error> {
        let rows = self.to_vec()?;
        if let Some(value) = rows
            .iter()
            .flatten()
            .find(|v| !fits(i128::from(**v), precision))
        {
            return Err(Error::DecimalOverflow {
                value: i128::from(*value),
                precision,
            });
        }
        let values = rows.into_iter().map(|v| v.map(i128::from));
        primitive_array::<Decimal128Type>(values)
            .with_precision_and_scale(precision, scale)
            .map_err(|e| Error::DecimalType(e.to_string()))
    }
}
