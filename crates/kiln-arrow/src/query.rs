//! Queries over Arrow columns with SQL's null rules: each row carries its validity (a `u8`
//! column, 1 valid) beside its values through the fused kernel.

use crate::{ArrowValues, Error};
use arrow_array::{ArrowPrimitiveType, PrimitiveArray};
use arrow_buffer::{ArrowNativeType, NullBuffer, ScalarBuffer};
use kiln::ir::{lit, Numeric, Scalar};
use kiln::{select, Context, IntoRow, Query, Row, Val};

/// A query over Arrow columns whose rows may be null, from [`ArrowQueries::from_arrow`].
/// Nothing runs until a terminal (`to_arrow`, `to_vec`, `sum`, `min`, `max`, `average`,
/// `count`, `count_rows`).
pub struct NullableQuery<'a, T: Row> {
    inner: Query<'a, (T, u8)>,
}

/// Queries over Arrow columns on a kiln [`Context`].
// `from_arrow` takes the context as `Context::from` does.
#[allow(clippy::wrong_self_convention)]
pub trait ArrowQueries {
    /// A query over `array`'s rows, null where the array is. Its values and its validity
    /// bitmap are read where they are (on the CPU backend, the Arrow buffers themselves).
    fn from_arrow<'a, A: ArrowValues>(&self, array: &'a A) -> NullableQuery<'a, A::Native>
    where
        A::Native: Row<Vals = Val<A::Native>>;
}

impl ArrowQueries for Context {
    fn from_arrow<'a, A: ArrowValues>(&self, array: &'a A) -> NullableQuery<'a, A::Native>
    where
        A::Native: Row<Vals = Val<A::Native>>,
    {
        let values = self.from(array.native_values());
        let inner = match bitmap(array) {
            Some((bits, offset)) => values.zip_bits(bits, offset),
            None => values.map(|x: Val<A::Native>| (x, lit(1u8))),
        };
        NullableQuery { inner }
    }
}

/// The bytes and first bit of `array`'s validity bitmap, when some row is null.
fn bitmap<A: ArrowValues>(array: &A) -> Option<(&[u8], usize)> {
    let nulls: &NullBuffer = array.validity().filter(|n| n.null_count() > 0)?;
    Some((nulls.validity(), nulls.offset()))
}

/// Whether a row's validity byte says it is valid.
fn is_valid(v: Val<u8>) -> Val<bool> {
    v.ne(0u8)
}

impl<'a, T: Row> NullableQuery<'a, T> {
    /// `f` applied to every row; a null row stays null (`f` runs on its placeholder values,
    /// which kiln's total operations allow, and the result is dropped).
    pub fn map<U: Scalar + Row>(self, f: impl Fn(T::Vals) -> Val<U> + 'a) -> NullableQuery<'a, U> {
        NullableQuery {
            inner: self.inner.map(move |(x, v): (T::Vals, Val<u8>)| (f(x), v)),
        }
    }

    /// The rows whose `pred` is true; a null row's predicate is null, and SQL drops it.
    pub fn filter(self, pred: impl Fn(T::Vals) -> Val<bool> + 'a) -> NullableQuery<'a, T> {
        NullableQuery {
            inner: self
                .inner
                .filter(move |(x, v): (T::Vals, Val<u8>)| is_valid(v).and(pred(x))),
        }
    }

    /// Each row paired with the row of `other` at the same index; null where either is. The
    /// lengths must match (the terminal fails with kiln's `LengthMismatch` otherwise).
    pub fn zip<B: ArrowValues>(self, other: &'a B) -> NullableQuery<'a, (T, B::Native)>
    where
        T::Vals: IntoRow<Row = T>,
        B::Native: Row<Vals = Val<B::Native>>,
    {
        // The row so far (values and validity) beside the other column's value.
        type Paired<V, U> = ((V, Val<u8>), Val<U>);
        let paired = self.inner.zip(other.native_values());
        let inner = match bitmap(other) {
            Some((bits, offset)) => paired
                .zip_bits(bits, offset)
                .map(|(((x, v), y), w): (Paired<T::Vals, B::Native>, Val<u8>)| ((x, y), v & w)),
            None => paired.map(|((x, v), y): Paired<T::Vals, B::Native>| ((x, y), v)),
        };
        NullableQuery { inner }
    }

    /// SQL's `COUNT(column)`: how many rows are not null.
    pub fn count(self) -> Result<usize, Error> {
        let valid = self.inner.filter(|(_, v): (T::Vals, Val<u8>)| is_valid(v));
        Ok(valid.count()?)
    }

    /// SQL's `COUNT(*)`: how many rows there are, null or not.
    pub fn count_rows(self) -> Result<usize, Error> {
        Ok(self.inner.count()?)
    }

    /// The rows, `None` where null.
    pub fn to_vec(self) -> Result<Vec<Option<T>>, Error> {
        let rows = self.inner.to_vec()?;
        Ok(rows
            .into_iter()
            .map(|(x, v)| (v != 0).then_some(x))
            .collect())
    }
}

impl<'a, T: Scalar + Numeric + Row<Vals = Val<T>>> NullableQuery<'a, T> {
    /// The values of the rows that are not null.
    fn valid_values(self) -> Query<'a, T> {
        self.inner
            .filter(|(_, v): (Val<T>, Val<u8>)| is_valid(v))
            .map(|(x, _): (Val<T>, Val<u8>)| x)
    }

    /// SQL's `SUM`: the sum of the rows that are not null (wrapping for integers, in kiln's
    /// fixed order for floats), or `None` when every row is null or there are none. The
    /// fused kernel adds a null row as the additive identity (a select, no branch).
    pub fn sum(self) -> Result<Option<T>, Error> {
        // -0.0 is the floats' additive identity (x + -0.0 is x for every x, -0.0 included).
        let zero = T::from_bits(match T::TYPE.is_float() {
            true => 1 << (T::TYPE.bits() - 1),
            false => 0,
        });
        let (sum, count) = self
            .inner
            .map(move |(x, v): (Val<T>, Val<u8>)| {
                (select(is_valid(v), x, lit(zero)), v.cast::<u32>())
            })
            .fold(
                (zero, 0u32),
                |a: (Val<T>, Val<u32>), b: (Val<T>, Val<u32>)| (a.0 + b.0, a.1 + b.1),
            )?;
        Ok((count > 0).then_some(sum))
    }

    /// SQL's `MIN`: the smallest value of the rows that are not null (NaN skipped unless
    /// every one is NaN, as kiln's `min`), or `None` when there is none.
    pub fn min(self) -> Result<Option<T>, Error> {
        Ok(self.valid_values().min()?)
    }

    /// SQL's `MAX`, as [`NullableQuery::min`].
    pub fn max(self) -> Result<Option<T>, Error> {
        Ok(self.valid_values().max()?)
    }

    /// SQL's `AVG`: the mean of the rows that are not null (as kiln's `average`), or `None`
    /// when there is none.
    pub fn average(self) -> Result<Option<f64>, Error> {
        Ok(self.valid_values().average()?)
    }

    /// The rows as an Arrow array of `P`, null where they are.
    pub fn to_arrow<P: ArrowPrimitiveType<Native = T>>(self) -> Result<PrimitiveArray<P>, Error>
    where
        T: ArrowNativeType,
    {
        let rows = self.inner.to_vec()?;
        let nulls = rows
            .iter()
            .any(|(_, v)| *v == 0)
            .then(|| NullBuffer::from_iter(rows.iter().map(|(_, v)| *v != 0)));
        let values: Vec<P::Native> = rows.into_iter().map(|(x, _)| x).collect();
        Ok(PrimitiveArray::new(ScalarBuffer::from(values), nulls))
    }
}
