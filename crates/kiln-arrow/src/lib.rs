//! Arrow arrays in and out of kiln queries, with SQL's null rules.
//!
//! kiln reads an Arrow array where it is ([`ArrowValues`]): the values of primitive arrays
//! (Int8 to UInt64, Float32/64, Date32/64, timestamps and the other primitive types whose
//! values are kiln scalars) and a dictionary array's keys, and the validity bitmap, which the
//! fused kernel reads bit by bit. A Decimal128 array becomes a [`Column`] of its scaled `i64`
//! values (a copy; a value outside `i64` is an error). [`column()`] finds a `RecordBatch`'s
//! column by name.
//!
//! [`ArrowQueries::from_arrow`] starts a [`NullableQuery`], which follows SQL column by
//! column: each column carries its own validity through the fused kernel, and closures see it
//! as a [`Nullable`] (arithmetic, comparisons and casts are NULL where an operand is; `and`,
//! `or` and `not` use three-valued logic). `filter` drops rows whose predicate is false or
//! NULL; `sum`, `min`, `max`, `average` and `count` skip NULLs (`sum` of no non-NULL value is
//! `None`, as SQL's `SUM` is NULL); [`NullableQuery::group_by`] puts NULL keys in a group of
//! their own; `sort` puts NULLs last; `running` and `histogram` skip them. Validity is a
//! column the kernel reads; filters and aggregates combine it with a logical AND or a select,
//! never a branch. `to_arrow` brings a result back as an Arrow array, nulls where they were;
//! `sum_exact` and `to_decimal128` keep decimals exact.
//!
//! ```
//! use arrow_array::{types::Float32Type, Float32Array};
//! use kiln::prelude::*;
//! use kiln_arrow::ArrowQueries;
//!
//! let ctx = Context::with_backend(BackendKind::Cpu)?;
//! let prices = Float32Array::from(vec![Some(2.5), None, Some(4.0)]);
//! let doubled = ctx.from_arrow(&prices).map(|p| p * 2.0).to_arrow::<Float32Type>()?;
//! assert_eq!(doubled, Float32Array::from(vec![Some(5.0), None, Some(8.0)]));
//! assert_eq!(ctx.from_arrow(&prices).sum()?, Some(6.5));
//! assert_eq!(ctx.from_arrow(&prices).count()?, 2);
//! # Ok::<(), kiln_arrow::Error>(())
//! ```

#![deny(missing_docs)]
mod column;
mod decimal;
mod group;
mod nullable;
mod query;
mod rows;

pub use column::{column, ArrowValues, Column};
pub use group::{Groups, NullableGroupBy};
pub use nullable::{IntoNullable, Nullable};
pub use query::{ArrowQueries, NullableQuery};
pub use rows::{IntoNullableRow, NullableRow, Parts};

/// What can go wrong between Arrow and kiln.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A query failed in kiln (its backend, feature and message are in the error).
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
    /// A record batch has no column of that name.
    #[error("the record batch has no column `{name}`; its columns: {available:?}")]
    NoColumn {
        /// The name asked for.
        name: String,
        /// The batch's column names.
        available: Vec<String>,
    },
    /// A record batch's column is not of the type asked for.
    #[error("column `{name}` holds {found}, not {expected}")]
    WrongType {
        /// The column's name.
        name: String,
        /// The Arrow type asked for.
        expected: String,
        /// The column's Arrow type.
        found: String,
    },
    /// A decimal result has more digits than its precision allows.
    #[error("the decimal {value} (scaled) has more than {precision} digits")]
    DecimalOverflow {
        /// The scaled value.
        value: i128,
        /// The precision it was to fit.
        precision: u8,
    },
    /// A precision and scale Arrow's Decimal128 does not accept.
    #[error("Decimal128: {0}")]
    DecimalType(String),
    /// A Decimal128 value does not fit kiln's widest integer.
    #[error("row {row} of the Decimal128 column holds {value} (scaled), outside i64")]
    DecimalOutOfRange {
        /// The row.
        row: usize,
        /// Its scaled value.
        value: i128,
    },
}
