//! Arrow arrays as kiln columns: values in place, validity as a byte per row.

use crate::Error;
use arrow_array::types::ArrowDictionaryKeyType;
use arrow_array::{
    Array, ArrowPrimitiveType, Decimal128Array, DictionaryArray, PrimitiveArray, RecordBatch,
};
use arrow_buffer::NullBuffer;
use kiln::ir::Scalar;
use std::borrow::Cow;

/// An Arrow array as kiln reads it: its values (borrowed from the array where they are kiln
/// scalars) and, when it has nulls, its validity, one byte per row (1 valid, 0 null).
pub struct Column<'a, T: Clone> {
    pub(crate) values: Cow<'a, [T]>,
    pub(crate) valid: Option<Vec<u8>>,
}

/// An Arrow array whose values kiln reads as scalars of type `Native`.
pub trait ArrowValues {
    /// The kiln scalar each value is.
    type Native: Scalar + Clone;
    /// The values, in place.
    fn native_values(&self) -> &[Self::Native];
    /// The array's validity, if it has nulls.
    fn validity(&self) -> Option<&NullBuffer>;
}

impl<P: ArrowPrimitiveType> ArrowValues for PrimitiveArray<P>
where
    P::Native: Scalar,
{
    type Native = P::Native;
    fn native_values(&self) -> &[P::Native] {
        self.values()
    }
    fn validity(&self) -> Option<&NullBuffer> {
        self.nulls()
    }
}

/// A dictionary-encoded array is its keys: a query groups, filters or joins on them, and the
/// dictionary turns them back into values.
impl<K: ArrowDictionaryKeyType> ArrowValues for DictionaryArray<K>
where
    K::Native: Scalar,
{
    type Native = K::Native;
    fn native_values(&self) -> &[K::Native] {
        self.keys().values()
    }
    fn validity(&self) -> Option<&NullBuffer> {
        self.keys().nulls()
    }
}

/// One byte per row of `nulls`: 1 where the row is valid.
fn unpack(nulls: &NullBuffer) -> Vec<u8> {
    nulls.iter().map(u8::from).collect()
}

impl<'a, T: Scalar + Clone> Column<'a, T> {
    /// The column of `array`: its values in place, its validity unpacked when it has nulls.
    /// Fails only as the other constructors do (it does not fail today; the `Result` keeps
    /// the signature of [`Column::decimal128`]).
    pub fn new<A: ArrowValues<Native = T>>(array: &'a A) -> Result<Column<'a, T>, Error> {
        Ok(Column {
            values: Cow::Borrowed(array.native_values()),
            valid: array.validity().filter(|n| n.null_count() > 0).map(unpack),
        })
    }

    /// How many rows the column has.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether it has no rows.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// How many of its rows are null.
    pub fn null_count(&self) -> usize {
        self.valid
            .as_ref()
            .map_or(0, |v| v.iter().filter(|b| **b == 0).count())
    }
}

impl Column<'static, i64> {
    /// A Decimal128 array's scaled values as `i64` (the scale is the array's, `array.scale()`;
    /// sums of them are exact while they fit). Copies the values. Fails with
    /// [`Error::DecimalOutOfRange`] at the first valid value outside `i64`.
    pub fn decimal128(array: &Decimal128Array) -> Result<Column<'static, i64>, Error> {
        let valid = array.nulls().filter(|n| n.null_count() > 0).map(unpack);
        let values = array
            .values()
            .iter()
            .enumerate()
            .map(|(row, &value)| match i64::try_from(value) {
                Ok(v) => Ok(v),
                Err(_) if array.is_null(row) => Ok(0),
                Err(_) => Err(Error::DecimalOutOfRange { row, value }),
            })
            .collect::<Result<Vec<i64>, Error>>()?;
        Ok(Column {
            values: Cow::Owned(values),
            valid,
        })
    }
}

/// The column of `batch` named `name`, as a primitive array of `P`. Fails with
/// [`Error::NoColumn`] when the batch has no such column and [`Error::WrongType`] when it
/// holds another type.
pub fn column<'b, P: ArrowPrimitiveType>(
    batch: &'b RecordBatch,
    name: &str,
) -> Result<Column<'b, P::Native>, Error>
where
    P::Native: Scalar,
{
    let schema = batch.schema_ref();
    let index = schema.index_of(name).map_err(|_| Error::NoColumn {
        name: name.to_string(),
        available: schema.fields().iter().map(|f| f.name().clone()).collect(),
    })?;
    let array = batch.column(index);
    let typed = array
        .as_any()
        .downcast_ref::<PrimitiveArray<P>>()
        .ok_or_else(|| Error::WrongType {
            name: name.to_string(),
            expected: P::DATA_TYPE.to_string(),
            found: array.data_type().to_string(),
        })?;
    Column::new(typed)
}
