//! Arrow arrays as kiln reads them: values in place, validity as the array's own bitmap.

use crate::Error;
use arrow_array::types::ArrowDictionaryKeyType;
use arrow_array::{
    Array, ArrowPrimitiveType, Decimal128Array, DictionaryArray, PrimitiveArray, RecordBatch,
};
use arrow_buffer::NullBuffer;
use kiln::ir::Scalar;

/// Values kiln reads that no Arrow array holds as kiln scalars: a Decimal128 array's scaled
/// values as `i64` ([`Column::decimal128`]), with the array's validity.
pub struct Column {
    values: Vec<i64>,
    nulls: Option<NullBuffer>,
}

/// An Arrow array whose values kiln reads as scalars of type `Native`, where they are.
pub trait ArrowValues {
    /// The kiln scalar each value is.
    type Native: Scalar;
    /// The values, in place.
    fn native_values(&self) -> &[Self::Native];
    /// The array's validity bitmap, if it has one.
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

impl Column {
    /// A Decimal128 array's scaled values as `i64` (the scale is the array's, `array.scale()`;
    /// sums of them are exact while they fit). Copies the values. Fails with
    /// [`Error::DecimalOutOfRange`] at the first valid value outside `i64`.
    pub fn decimal128(array: &Decimal128Array) -> Result<Column, Error> {
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
            values,
            nulls: array.nulls().cloned(),
        })
    }
}

impl ArrowValues for Column {
    type Native = i64;
    fn native_values(&self) -> &[i64] {
        &self.values
    }
    fn validity(&self) -> Option<&NullBuffer> {
        self.nulls.as_ref()
    }
}

/// The column of `batch` named `name`, as a primitive array of `P`. Fails with
/// [`Error::NoColumn`] when the batch has no such column and [`Error::WrongType`] when it
/// holds another type.
pub fn column<'b, P: ArrowPrimitiveType>(
    batch: &'b RecordBatch,
    name: &str,
) -> Result<&'b PrimitiveArray<P>, Error> {
    let schema = batch.schema_ref();
    let index = schema.index_of(name).map_err(|_| Error::NoColumn {
        name: name.to_string(),
        available: schema.fields().iter().map(|f| f.name().clone()).collect(),
    })?;
    let array = batch.column(index);
    array
        .as_any()
        .downcast_ref::<PrimitiveArray<P>>()
        .ok_or_else(|| Error::WrongType {
            name: name.to_string(),
            expected: P::DATA_TYPE.to_string(),
            found: array.data_type().to_string(),
        })
}
