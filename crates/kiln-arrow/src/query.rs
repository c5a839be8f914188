//! Queries over Arrow columns with SQL's null rules: each column carries its validity (a `u8`
//! column, 1 valid) beside its values through the fused kernel.

use crate::rows::Parts;
use crate::{ArrowValues, Error, IntoNullableRow, Nullable, NullableRow};
use arrow_array::{ArrowPrimitiveType, PrimitiveArray};
use arrow_buffer::{ArrowNativeType, NullBuffer, ScalarBuffer};
use kiln::ir::{lit, Int, Numeric, Scalar};
use kiln::{select, Context, Query, Row, Val};
use std::rc::Rc;

/// The inner query of a [`NullableQuery`] over rows of `T`: values, then validity bytes.
pub(crate) type Inner<'a, T> = Query<'a, (T, <T as NullableRow>::Valid)>;
/// Builds a fresh inner query (a terminal that needs two passes builds it twice).
pub(crate) type Build<'a, T> = Rc<dyn Fn() -> Inner<'a, T> + 'a>;

/// A query over Arrow columns whose values may be NULL, from [`ArrowQueries::from_arrow`].
/// Closures see each column as a [`Nullable`]. Nothing runs until a terminal.
pub struct NullableQuery<'a, T: NullableRow> {
    pub(crate) build: Build<'a, T>,
}

/// Queries over Arrow columns on a kiln [`Context`].
// `from_arrow` takes the context as `Context::from` does.
#[allow(clippy::wrong_self_convention)]
pub trait ArrowQueries {
    /// A query over `array`'s rows, NULL where the array is. Its values and its validity
    /// bitmap are read where they are (on the CPU backend, the Arrow buffers themselves).
    fn from_arrow<'a, A: ArrowValues>(&self, array: &'a A) -> NullableQuery<'a, A::Native>
    where
        A::Native: NullableRow<Vals = Val<A::Native>, Valid = u8>;
}

impl ArrowQueries for Context {
    fn from_arrow<'a, A: ArrowValues>(&self, array: &'a A) -> NullableQuery<'a, A::Native>
    where
        A::Native: NullableRow<Vals = Val<A::Native>, Valid = u8>,
    {
        let ctx = self.clone();
        NullableQuery {
            build: Rc::new(move || {
                let values = ctx.from(array.native_values());
                match bitmap(array) {
                    Some((bits, offset)) => values.zip_bits(bits, offset),
                    None => values.map(|x: Val<A::Native>| (x, lit(1u8))),
                }
            }),
        }
    }
}

/// The bytes and first bit of `array`'s validity bitmap, when some row is NULL.
fn bitmap<A: ArrowValues>(array: &A) -> Option<(&[u8], usize)> {
    let nulls: &NullBuffer = array.validity().filter(|n| n.null_count() > 0)?;
    Some((nulls.validity(), nulls.offset()))
}

/// Whether a validity byte says the value is valid.
pub(crate) fn is_valid(v: Val<u8>) -> Val<bool> {
    v.ne(0u8)
}

/// The additive identity of `T`: -0.0 for floats (x + -0.0 is x for every x, -0.0 included),
/// 0 otherwise.
pub(crate) fn additive_identity<T: Scalar>() -> T {
    T::from_bits(match T::TYPE.is_float() {
        true => 1 << (T::TYPE.bits() - 1),
        false => 0,
    })
}

impl<'a, T: NullableRow> NullableQuery<'a, T> {
    /// The inner query, built afresh.
    pub(crate) fn inner(&self) -> Inner<'a, T> {
        (self.build)()
    }

    /// `f` applied to every row; each column `f` returns is NULL where its [`Nullable`] is
    /// (arithmetic on a NULL is NULL).
    pub fn map<O: IntoNullableRow>(
        self,
        f: impl Fn(T::Nulls) -> O + 'a,
    ) -> NullableQuery<'a, O::Row> {
        let (build, f) = (self.build, Rc::new(f));
        NullableQuery {
            build: Rc::new(move || {
                let f = f.clone();
                build().map(
                    move |(x, v): (T::Vals, <T::Valid as Row>::Vals)| -> Parts<O::Row> {
                        f(T::join(x, v)).split()
                    },
                )
            }),
        }
    }

    /// The rows whose `pred` is true; SQL drops the rows where it is false or NULL.
    pub fn filter(self, pred: impl Fn(T::Nulls) -> Nullable<bool> + 'a) -> NullableQuery<'a, T> {
        let (build, pred) = (self.build, Rc::new(pred));
        NullableQuery {
            build: Rc::new(move || {
                let pred = pred.clone();
                build().filter(move |(x, v): (T::Vals, <T::Valid as Row>::Vals)| {
                    pred(T::join(x, v)).is_true()
                })
            }),
        }
    }

    /// Each row paired with the row of `other` at the same index, each column keeping its
    /// own validity. The lengths must match (the terminal fails with kiln's `LengthMismatch`
    /// otherwise).
    pub fn zip<B: ArrowValues>(self, other: &'a B) -> NullableQuery<'a, (T, B::Native)>
    where
        B::Native: NullableRow<Vals = Val<B::Native>, Valid = u8>,
    {
        type Vals<R> = (<R as Row>::Vals, <<R as NullableRow>::Valid as Row>::Vals);
        type WithBits<R, U> = ((Vals<R>, Val<U>), Val<u8>);
        let build = self.build;
        NullableQuery {
            build: Rc::new(move || {
                let paired = build().zip(other.native_values());
                match bitmap(other) {
                    Some((bits, offset)) => paired.zip_bits(bits, offset).map(
                        |(((x, v), y), w): WithBits<T, B::Native>| {
                            Parts::<(T, B::Native)>((x, y), (v, w))
                        },
                    ),
                    None => paired.map(|((x, v), y): (Vals<T>, Val<B::Native>)| {
                        Parts::<(T, B::Native)>((x, y), (v, lit(1u8)))
                    }),
                }
            }),
        }
    }

    /// SQL's `COUNT(*)`: how many rows there are, NULL or not.
    pub fn count_rows(self) -> Result<usize, Error> {
        Ok(self.inner().count()?)
    }

    /// The rows, each column `None` where NULL.
    pub fn to_vec(self) -> Result<Vec<T::Host>, Error> {
        let rows = self.inner().to_vec()?;
        Ok(rows.into_iter().map(|(x, v)| T::host(x, v)).collect())
    }
}

/// The operations on one column (`T` a scalar).
impl<'a, T> NullableQuery<'a, T>
where
    T: Scalar + NullableRow<Vals = Val<T>, Valid = u8, Nulls = Nullable<T>>,
{
    /// The values of the rows that are not NULL.
    pub(crate) fn valid_values(&self) -> Query<'a, T> {
        self.inner()
            .filter(|(_, v): (Val<T>, Val<u8>)| is_valid(v))
            .map(|(x, _): (Val<T>, Val<u8>)| x)
    }

    /// How many rows are NULL.
    pub(crate) fn null_rows(&self) -> Result<usize, Error> {
        let nulls = self
            .inner()
            .filter(|(_, v): (Val<T>, Val<u8>)| !is_valid(v));
        Ok(nulls.count()?)
    }

    /// SQL's `COUNT(column)`: how many rows are not NULL.
    pub fn count(self) -> Result<usize, Error> {
        Ok(self.valid_values().count()?)
    }

    /// The rows as an Arrow array of `P`, NULL where they are.
    pub fn to_arrow<P: ArrowPrimitiveType<Native = T>>(self) -> Result<PrimitiveArray<P>, Error>
    where
        T: ArrowNativeType,
    {
        let rows = self.inner().to_vec()?;
        Ok(primitive_array(
            rows.into_iter().map(|(x, v)| (v != 0).then_some(x)),
        ))
    }

    /// The rows sorted ascending with NULLs last (SQL's `ORDER BY x ASC NULLS LAST`, the
    /// default): the valid values by kiln's stable radix sort (floats in `f32::total_cmp`
    /// order), then a `None` for each NULL. Two passes over the rows: the valid values, sorted,
    /// and a count of the NULLs.
    pub fn sort(self) -> Result<Vec<Option<T>>, Error>
    where
        T: Numeric,
    {
        let nulls = self.null_rows()?;
        let sorted = self.valid_values().sort().to_vec()?;
        Ok(sorted
            .into_iter()
            .map(Some)
            .chain(std::iter::repeat_n(None, nulls))
            .collect())
    }

    /// The rows sorted descending with NULLs first (SQL's `ORDER BY x DESC`, whose default is
    /// `NULLS FIRST`), as [`NullableQuery::sort`].
    pub fn sort_desc(self) -> Result<Vec<Option<T>>, Error>
    where
        T: Numeric,
    {
        let nulls = self.null_rows()?;
        let sorted = self.valid_values().sort_desc().to_vec()?;
        Ok(std::iter::repeat_n(None, nulls)
            .chain(sorted.into_iter().map(Some))
            .collect())
    }

    /// SQL's running aggregate (`op(...) OVER (ROWS UNBOUNDED PRECEDING)`): at each row, the
    /// fold with `op` (associative, `identity` its identity) of the valid values up to it, or
    /// `None` while no valid value has come; NULL rows add nothing.
    pub fn running(
        self,
        identity: T,
        op: impl Fn(Val<T>, Val<T>) -> Val<T> + 'a,
    ) -> Result<Vec<Option<T>>, Error> {
        let counted = self
            .inner()
            .map(move |(x, v): (Val<T>, Val<u8>)| {
                (select(is_valid(v), x, lit(identity)), v.cast::<u32>())
            })
            .scan((identity, 0u32), move |a: (Val<T>, Val<u32>), b| {
                (op(a.0, b.0), a.1 + b.1)
            });
        let rows = counted.to_vec()?;
        Ok(rows
            .into_iter()
            .map(|(x, seen)| (seen > 0).then_some(x))
            .collect())
    }
}

/// Aggregates of one numeric column.
impl<'a, T> NullableQuery<'a, T>
where
    T: Numeric + NullableRow<Vals = Val<T>, Valid = u8, Nulls = Nullable<T>>,
{
    /// SQL's `SUM`: the sum of the rows that are not NULL (wrapping for integers, in kiln's
    /// fixed order for floats), or `None` when every row is NULL or there are none. The fused
    /// kernel adds a NULL row as the additive identity (a select, no branch). For exact sums
    /// of decimals, see `sum_exact` on `i64` columns.
    pub fn sum(self) -> Result<Option<T>, Error> {
        let zero = additive_identity::<T>();
        sum_counted(self.inner().map(move |(x, v): (Val<T>, Val<u8>)| {
            (select(is_valid(v), x, lit(zero)), v.cast::<u32>())
        }))
    }

    /// SQL's `MIN`: the smallest value of the rows that are not NULL (NaN skipped unless
    /// every one is NaN, as kiln's `min`), or `None` when there is none.
    pub fn min(self) -> Result<Option<T>, Error> {
        Ok(self.valid_values().min()?)
    }

    /// SQL's `MAX`, as [`NullableQuery::min`].
    pub fn max(self) -> Result<Option<T>, Error> {
        Ok(self.valid_values().max()?)
    }

    /// SQL's `AVG`: the mean of the rows that are not NULL (as kiln's `average`), or `None`
    /// when there is none.
    pub fn average(self) -> Result<Option<f64>, Error> {
        Ok(self.valid_values().average()?)
    }
}

impl<'a, T> NullableQuery<'a, T>
where
    T: Int + NullableRow<Vals = Val<T>, Valid = u8, Nulls = Nullable<T>>,
{
    /// Counts, for each `b` in `0..bins`, the rows that are not NULL and equal `b` (as kiln's
    /// `histogram`; NULLs are in no bin).
    pub fn histogram(self, bins: u32) -> Result<Vec<u32>, Error> {
        Ok(self.valid_values().histogram(bins)?)
    }
}

/// The sum of the values of `rows` (value, how many values it stands for), or `None` when
/// they stand for none.
pub(crate) fn sum_counted<'a, T: Numeric + Row<Vals = Val<T>>>(
    rows: Query<'a, (T, u32)>,
) -> Result<Option<T>, Error> {
    let zero = additive_identity::<T>();
    let (sum, count) = rows.fold(
        (zero, 0u32),
        |a: (Val<T>, Val<u32>), b: (Val<T>, Val<u32>)| (a.0 + b.0, a.1 + b.1),
    )?;
    Ok((count > 0).then_some(sum))
}

/// An Arrow array of `P` from optional values.
pub(crate) fn primitive_array<P: ArrowPrimitiveType>(
    rows: impl ExactSizeIterator<Item = Option<P::Native>>,
) -> PrimitiveArray<P> {
    let mut values = Vec::with_capacity(rows.len());
    let mut valid = Vec::with_capacity(rows.len());
    for row in rows {
        valid.push(row.is_some());
        values.push(row.unwrap_or_default());
    }
    let nulls = valid.contains(&false).then(|| NullBuffer::from_iter(valid));
    PrimitiveArray::new(ScalarBuffer::from(values), nulls)
}
