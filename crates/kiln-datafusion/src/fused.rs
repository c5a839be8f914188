//! What a [`KilnExec`](crate::KilnExec) runs: a filter and a partial aggregate over its
//! input's columns, and how one input batch runs as one kiln query.

use crate::aggregate::{Aggregate, Groups};
use crate::expr::{Expr, Node, Sql};
use crate::keys::{encode_keys, windows, Codes};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::datatypes::{self as adt, ArrowPrimitiveType, DataType, Schema};
use datafusion::error::{DataFusionError, Result};
use datafusion::physical_expr::PhysicalExpr;
use kiln::ir::{expr_dyn, lit_value, AnyVal, BinaryOp, ScalarType, ScalarValue, Type};
use kiln::{Column, Combine, Context};
use std::sync::Arc;

/// Where a column kiln reads comes from.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// The input batch's column.
    Column(usize),
    /// A predicate DataFusion computes on the host from the input batch (a comparison of
    /// strings), read as booleans.
    Host(Arc<dyn PhysicalExpr>),
    /// Where a column or a predicate is not NULL, read as booleans: its validity bitmap where
    /// it is.
    Valid(Box<Source>),
}

impl Source {
    /// The column of `batch` it names or computes.
    fn array(&self, batch: &RecordBatch) -> Result<ArrayRef> {
        match self {
            Source::Column(c) => Ok(batch.column(*c).clone()),
            Source::Host(e) => e.evaluate(batch)?.into_array(batch.num_rows()),
            Source::Valid(of) => Ok(validity_of(&of.array(batch)?)),
        }
    }

    /// Whether `self` and `other` read the same column or compute the same host expression.
    fn same(&self, other: &Source) -> bool {
        match (self, other) {
            (Source::Column(a), Source::Column(b)) => a == b,
            (Source::Host(a), Source::Host(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether its column may hold NULLs, going by `schema` (the input batch's).
    fn nullable(&self, schema: &Schema) -> bool {
        match self {
            Source::Column(c) => schema.field(*c).is_nullable(),
            Source::Host(e) => e.nullable(schema).unwrap_or(true),
            Source::Valid(_) => false,
        }
    }
}

/// Where `a` is not NULL, as a column of booleans without NULLs.
fn validity_of(a: &ArrayRef) -> ArrayRef {
    let valid = match a.logical_nulls() {
        Some(nulls) => nulls.into_inner(),
        None => BooleanBuffer::new_set(a.len()),
    };
    Arc::new(BooleanArray::new(valid, None))
}

/// The columns of `batch` that `inputs` read, each host expression computed once: the
/// validity of a source that another input reads is taken from that input's array.
fn input_arrays(inputs: &[(Source, Sql)], batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
    let plain = inputs
        .iter()
        .map(|(source, _)| match source {
            Source::Valid(_) => Ok(None),
            source => source.array(batch).map(Some),
        })
        .collect::<Result<Vec<Option<ArrayRef>>>>()?;
    let computed = |of: &Source| {
        inputs
            .iter()
            .zip(&plain)
            .find_map(|((source, _), a)| a.as_ref().filter(|_| source.same(of)))
    };
    inputs
        .iter()
        .zip(&plain)
        .map(|((source, _), a)| {
            let reused = a.clone().or_else(|| match source {
                Source::Valid(of) => computed(of).map(validity_of),
                _ => None,
            });
            reused.map_or_else(|| source.array(batch), Ok)
        })
        .collect()
}

/// A filter and a partial aggregate, over the input columns `inputs`.
#[derive(Debug)]
pub(crate) struct Fused {
    /// The columns kiln reads, in the order the expressions number them.
    pub(crate) inputs: Vec<(Source, Sql)>,
    pub(crate) filter: Option<Expr>,
    /// The group keys, computed by DataFusion on the host from the input batch (its
    /// columns, or `date_part` or `substr` of them).
    pub(crate) keys: Vec<Arc<dyn PhysicalExpr>>,
    pub(crate) aggregates: Vec<Aggregate>,
}

fn exec_error(e: impl std::fmt::Display) -> DataFusionError {
    DataFusionError::Execution(format!("kiln: {e}"))
}

/// An input column as kiln reads it: borrowed values, owned values (decimals narrowed to
/// `i64`), or bits (booleans).
enum Held<'b> {
    Borrowed(Column<'b>),
    Owned(Vec<i64>),
}

/// Integers whose magnitudes can be bounded in one branch-free pass that the compiler
/// vectorizes.
trait Rough: Copy {
    /// The bits of every value's magnitude (less one, for negative values) or'ed together.
    fn magnitude_bits(xs: &[Self]) -> u64;
}

macro_rules! rough {
    (signed: $($t:ty => $u:ty),*) => {$(
        impl Rough for $t {
            fn magnitude_bits(xs: &[$t]) -> u64 {
                xs.iter().fold(0, |acc: $u, x| acc | (x ^ (x >> (<$t>::BITS - 1))) as $u) as u64
            }
        }
    )*};
    (unsigned: $($t:ty),*) => {$(
        impl Rough for $t {
            fn magnitude_bits(xs: &[$t]) -> u64 {
                xs.iter().fold(0, |acc: $t, x| acc | x) as u64
            }
        }
    )*};
}
rough!(signed: i8 => u8, i16 => u16, i32 => u32, i64 => u64);
rough!(unsigned: u8, u16, u32, u64);

/// The power of two above the bits from [`Rough::magnitude_bits`]: a bound on every
/// magnitude, at most twice the largest.
fn power_above(bits: u64) -> i128 {
    match bits {
        0 => 0,
        b => 1i128 << (64 - b.leading_zeros()),
    }
}

/// `Some(f::<T>(args))` for the Arrow type `T` of the data type `t` when kiln reads `t` as
/// exact integers in place (the integer types and Date32), `None` for any other type.
macro_rules! by_exact_type {
    ($t:expr, $f:ident($($arg:expr),*)) => {
        match $t {
            DataType::Int8 => Some($f::<adt::Int8Type>($($arg),*)),
            DataType::Int16 => Some($f::<adt::Int16Type>($($arg),*)),
            DataType::Int32 => Some($f::<adt::Int32Type>($($arg),*)),
            DataType::Int64 => Some($f::<adt::Int64Type>($($arg),*)),
            DataType::UInt8 => Some($f::<adt::UInt8Type>($($arg),*)),
            DataType::UInt16 => Some($f::<adt::UInt16Type>($($arg),*)),
            DataType::UInt32 => Some($f::<adt::UInt32Type>($($arg),*)),
            DataType::UInt64 => Some($f::<adt::UInt64Type>($($arg),*)),
            DataType::Date32 => Some($f::<adt::Date32Type>($($arg),*)),
            _ => None,
        }
    };
}

/// `array`'s values and a bound on their magnitudes (for exact types), at most twice the
/// largest: one pass each, since a batch's columns are read again by the kernel at once.
fn hold<'b>(array: &'b ArrayRef, sql: Sql) -> Result<(Held<'b>, Option<i128>)> {
    fn prim<T: ArrowPrimitiveType>(a: &ArrayRef) -> &[T::Native] {
        a.as_primitive::<T>().values()
    }
    /// An integer column, read in place, and its bound.
    fn exact<'b, T: ArrowPrimitiveType>(a: &'b ArrayRef) -> (Held<'b>, Option<i128>)
    where
        T::Native: kiln::ir::Scalar + Rough,
    {
        let v = prim::<T>(a);
        let bound = power_above(T::Native::magnitude_bits(v));
        (Held::Borrowed(Column::of(v)), Some(bound))
    }
    Ok(match (sql, array.data_type()) {
        (Sql::Bool, _) => {
            let b = array.as_boolean().values();
            (Held::Borrowed(Column::bits(b.values(), b.offset())), None)
        }
        (Sql::Decimal(..), _) => {
            // Without a branch per value, in 64-bit lanes: a value fits in `i64` when its
            // high half is its low half's sign (adding the sign bit gives 0), and then the
            // low half xor the high one is its magnitude, less one when negative.
            let decimals = array.as_primitive::<adt::Decimal128Type>();
            let d = decimals.values();
            let mut out = vec![0i64; d.len()];
            // The values under NULLs are not the column's: read as 0.
            let zeroed;
            let d = match decimals.nulls().filter(|n| n.null_count() > 0) {
                None => d,
                Some(nulls) => {
                    zeroed = d
                        .iter()
                        .zip(nulls.iter())
                        .map(|(v, valid)| if valid { *v } else { 0 })
                        .collect::<Vec<i128>>();
                    &zeroed[..]
                }
            };
            let (mut misfit, mut bits) = (0u64, 0u64);
            for (o, v) in out.iter_mut().zip(d.iter()) {
                let (lo, hi) = (*v as u64, (*v >> 64) as u64);
                *o = lo as i64;
                misfit |= hi.wrapping_add(lo >> 63);
                bits |= lo ^ hi;
            }
            if misfit != 0 {
                let v = d.iter().find(|v| i64::try_from(**v).is_err()).copied();
                return Err(exec_error(format!(
                    "a batch holds the decimal {} (scaled), past i64",
                    v.unwrap_or_default()
                )));
            }
            (Held::Owned(out), Some(power_above(bits)))
        }
        (_, DataType::Float32) => (
            Held::Borrowed(Column::of(prim::<adt::Float32Type>(array))),
            None,
        ),
        (_, DataType::Float64) => (
            Held::Borrowed(Column::of(prim::<adt::Float64Type>(array))),
            None,
        ),
        (_, t) => by_exact_type!(t, exact(array))
            .ok_or_else(|| exec_error(format!("an input column of type {t}")))?,
    })
}

/// The largest magnitude of `array`'s values, exactly (for exact types), when the bounds of
/// [`hold`] are too rough to prove the expressions stay in range.
fn largest_magnitude(array: &ArrayRef, held: &Held<'_>) -> Option<i128> {
    fn most<T: ArrowPrimitiveType>(a: &ArrayRef) -> i128
    where
        T::Native: Into<i128>,
    {
        let v = a.as_primitive::<T>().values();
        v.iter().map(|x| (*x).into().abs()).max().unwrap_or(0)
    }
    match (held, array.data_type()) {
        (Held::Owned(v), _) => Some(
            v.iter()
                .map(|x| x.unsigned_abs() as i128)
                .max()
                .unwrap_or(0),
        ),
        (_, t) => by_exact_type!(t, most(array)),
    }
}

/// The row's input values as the expressions see them (booleans, read as bits, compared
/// with 0), after the key column when there is one.
fn row_values(r: &[AnyVal], inputs: &[(Source, Sql)], skip: usize) -> Vec<AnyVal> {
    r[skip..]
        .iter()
        .zip(inputs)
        .map(|(v, (_, sql))| match sql {
            Sql::Bool => expr_dyn(
                kiln::ir::Expr::Binary {
                    op: BinaryOp::Ne,
                    lhs: v.handle(),
                    rhs: lit_value(ScalarValue::U8(0)).handle(),
                },
                &[v, &lit_value(ScalarValue::U8(0))],
                Type::Scalar(ScalarType::Bool),
            ),
            _ => v.clone(),
        })
        .collect()
}

impl Fused {
    /// Every expression of the operator.
    fn exprs(&self) -> impl Iterator<Item = &Expr> {
        self.filter
            .iter()
            .chain(self.aggregates.iter().filter_map(|a| a.fun.arg()))
    }

    /// Runs `batch` through kiln on `ctx` and adds its groups' folds to `groups`.
    pub(crate) fn run(
        &self,
        ctx: &Context,
        batch: &RecordBatch,
        groups: &mut Groups<'_>,
    ) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let arrays = input_arrays(&self.inputs, batch)?;
        // NULLs are read through the validity the rule put beside what may hold them.
        let schema = batch.schema();
        for ((source, _), a) in self.inputs.iter().zip(&arrays) {
            if !source.nullable(&schema) && a.null_count() > 0 {
                return Err(exec_error(format!(
                    "a column declared NOT NULL holds {} NULLs",
                    a.null_count()
                )));
            }
        }
        if self.keys.is_empty() {
            for (_, row) in self.fold(ctx, batch.num_rows(), &arrays, None, groups)? {
                groups.add(Vec::new(), row)?;
            }
            return Ok(());
        }
        let keys = self
            .keys
            .iter()
            .map(|k| k.evaluate(batch)?.into_array(batch.num_rows()))
            .collect::<Result<Vec<_>>>()?;
        let (codes, decode) = encode_keys(&keys, batch.num_rows()).map_err(exec_error)?;
        for window in windows(&arrays, &codes, decode.len()).map_err(exec_error)? {
            let (n, codes) = (window.codes.len(), Some(&window.codes));
            for (code, row) in self.fold(ctx, n, &window.arrays, codes, groups)? {
                let key = decode
                    .get(window.base + code)
                    .cloned()
                    .ok_or_else(|| exec_error("a group key code out of range"))?;
                groups.add(key, row)?;
            }
        }
        Ok(())
    }

    /// Folds the `n` rows of `arrays` (the columns of [`Fused::inputs`]) as one kiln query:
    /// as one row of folds without `codes`, else grouped by them, one (code, folds) per code.
    fn fold(
        &self,
        ctx: &Context,
        n: usize,
        arrays: &[ArrayRef],
        codes: Option<&Codes>,
        groups: &Groups<'_>,
    ) -> Result<Vec<(usize, Vec<ScalarValue>)>> {
        let mut held = Vec::with_capacity(arrays.len());
        let mut bounds = Vec::with_capacity(arrays.len());
        for (a, (_, sql)) in arrays.iter().zip(&self.inputs) {
            let (h, b) = hold(a, *sql)?;
            held.push(h);
            bounds.push(b);
        }
        let in_range =
            |bounds: &[Option<i128>]| self.exprs().try_for_each(|e| e.bound(bounds).map(drop));
        if in_range(&bounds).is_err() {
            bounds = arrays
                .iter()
                .zip(&held)
                .map(|(a, h)| largest_magnitude(a, h))
                .collect();
            in_range(&bounds).map_err(exec_error)?;
        }
        // A sum of `n` values that each stay within `bound` stays within `n * bound`.
        let batch_folds = groups.folds().for_batch(|e| {
            e.bound(&bounds)
                .is_ok_and(|b| b.saturating_mul(n as i128) <= i64::MAX as i128)
        });
        let mut columns: Vec<Column<'_>> = Vec::new();
        if let Some(codes) = codes {
            columns.push(codes.column());
        }
        columns.extend(held.iter().map(|h| match h {
            Held::Borrowed(c) => *c,
            Held::Owned(v) => Column::of(v),
        }));
        let skip = codes.is_some() as usize;
        let inputs = &self.inputs;
        let mut q = ctx.from_columns(n, &columns);
        if let Some(f) = &self.filter {
            q = q.filter(move |r| f.emit(&row_values(r, inputs, skip)).typed::<bool>());
        }
        let folds = &batch_folds;
        let identity = folds.identity();
        let values = move |r: &[AnyVal]| folds.values(&row_values(r, inputs, skip));
        let Some(codes) = codes else {
            let row = q
                .map(values)
                .fold(&identity, |a, b| folds.combine(a, b), Combine::AnyOrder)
                .map_err(exec_error)?;
            return Ok(vec![(0, folds.widen(&row))]);
        };
        let grouped = q.group_by(codes.ty(), |r| r[0].clone());
        let rows = match folds.all_adds() {
            true => grouped.sums(&identity, values),
            false => grouped.fold(&identity, values, |a, b| folds.combine(a, b)),
        }
        .map_err(exec_error)?;
        Ok(rows
            .into_iter()
            .map(|row| (row[0].to_bits() as usize, folds.widen(&row[1..])))
            .collect())
    }
}

/// Renumbers the inputs an expression reads.
pub(crate) fn renumber(e: &mut Expr, to: &dyn Fn(usize) -> usize) {
    match &mut e.node {
        Node::Input(i) => *i = to(*i),
        Node::Literal(_) => {}
        Node::Binary(_, a, b) | Node::Compare(_, a, b) => {
            renumber(a, to);
            renumber(b, to);
        }
        Node::Not(a) | Node::Neg(a) | Node::Cast(a) | Node::Scale(a, _) | Node::Unscale(a, _) => {
            renumber(a, to)
        }
        Node::Select(c, a, b) => {
            renumber(c, to);
            renumber(a, to);
            renumber(b, to);
        }
    }
}
