//! Queries over columns whose types are known only at run time: [`Context::from_columns`].
//! Closures take and give [`AnyVal`]s, the untyped IR values, so a caller that builds a
//! query from a description (a SQL plan, a schema) needs no Rust type per column. The same
//! planner and kernels run them as the typed [`Query`].

use super::group::{dense_fold_values, FoldOp};
use super::*;

/// One input column of [`Context::from_columns`].
#[derive(Clone, Copy)]
pub struct Column<'a> {
    input: Input<'a>,
    /// Elements it holds (bits, for a column of bits).
    held: usize,
}

impl<'a> Column<'a> {
    /// A column of `xs`, one element each.
    pub fn of<T: Scalar>(xs: &'a [T]) -> Column<'a> {
        Column {
            input: Input::values(Source::Host(bytes_of(xs)), T::TYPE),
            held: xs.len(),
        }
    }

    /// A column of bits (Arrow's validity bitmaps): element `i` is bit `offset + i` of
    /// `bits`, least significant bit first, read as a `u8` 0 or 1.
    pub fn bits(bits: &'a [u8], offset: usize) -> Column<'a> {
        let bytes = bits.get(offset / 8..).unwrap_or(&[]);
        let shift = (offset % 8) as u32;
        Column {
            input: Input {
                source: Source::Host(bytes),
                ty: ScalarType::U8,
                layout: Layout::Bits { shift },
            },
            held: (bytes.len() * 8).saturating_sub(shift as usize),
        }
    }

    /// The type of the values closures see for this column.
    pub fn ty(&self) -> ScalarType {
        self.input.ty
    }
}

/// How a fold may combine the rows of a [`DynQuery`] or of a key of a [`DynGroupBy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// `op` is associative: rows are combined in input order.
    InOrder,
    /// `op` is associative and commutative (additions, `min`, `max`): rows may be combined
    /// in any order; the result is still the same on every run of the same query.
    AnyOrder,
}

/// A lazy query whose rows are columns of run-time types, from [`Context::from_columns`].
/// Closures receive a row as a slice of [`AnyVal`] (one per column) and return values the
/// same way. Nothing runs until a terminal (`fold`, `count`, a grouping's fold).
pub struct DynQuery<'a> {
    query: Query<'a, ErasedRow>,
}

impl Context {
    /// A query over the first `len` elements of `columns`, each row holding one value of
    /// every column. A column of values must hold exactly `len` elements and a column of bits
    /// at least `len` bits; otherwise the terminal fails with [`Error::LengthMismatch`].
    /// More than [`MAX_LEN`] rows make it fail with [`Error::TooLarge`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{AnyVal, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (price, qty) = ([2.5f32, 4.0, 1.0], [3i32, 0, 2]);
    /// let revenue = ctx
    ///     .from_columns(3, &[Column::of(&price), Column::of(&qty)])
    ///     .filter(|row| row[1].typed::<i32>().gt(0))
    ///     .map(|row| vec![(row[0].typed::<f32>() * row[1].typed::<i32>().cast::<f32>()).erase()])
    ///     .fold(&[ScalarValue::F32(0.0)], |a, b| vec![(a[0].typed::<f32>() + b[0].typed::<f32>()).erase()], Combine::AnyOrder)?;
    /// assert_eq!(revenue, [ScalarValue::F32(9.5)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn from_columns<'a>(&self, len: usize, columns: &[Column<'a>]) -> DynQuery<'a> {
        let short = columns.iter().find(|c| match c.input.layout {
            Layout::Values => c.held != len,
            Layout::Bits { .. } => c.held < len,
        });
        let error = too_large(len).or(short.map(|c| Error::LengthMismatch {
            left: len,
            right: c.held,
        }));
        DynQuery {
            query: Query {
                ctx: self.clone(),
                len,
                columns: columns.iter().map(|c| c.input).collect(),
                base_columns: columns.len(),
                stages: Vec::new(),
                error,
                _t: PhantomData,
            },
        }
    }
}

/// `op` on two rows' columns, run as the user's combining function.
fn combining(
    op: impl Fn(&[AnyVal], &[AnyVal]) -> Vec<AnyVal>,
) -> impl Fn(Vec<AnyVal>, Vec<AnyVal>) -> Vec<AnyVal> {
    move |a, b| constants::user_code(OP_CLOSURE, || op(&a, &b))
}

impl<'a> DynQuery<'a> {
    /// Replaces every row with the values `f` returns for it.
    pub fn map(self, f: impl Fn(&[AnyVal]) -> Vec<AnyVal> + 'a) -> DynQuery<'a> {
        DynQuery {
            query: self.query.map_erased(move |cols| f(&cols)),
        }
    }

    /// Keeps the rows for which `pred` is true, in their input order.
    pub fn filter(mut self, pred: impl Fn(&[AnyVal]) -> Val<bool> + 'a) -> DynQuery<'a> {
        let id = self.query.stages.len() as u32;
        self.query.stages.push(Stage::Filter(Box::new(move |cols| {
            constants::user_code(id, || pred(&cols))
        })));
        self
    }

    /// Folds the rows (whose columns have the types of `identity`) with `op`, starting from
    /// `identity` (an identity of `op`); returns the folded columns. Fails as the typed
    /// [`Query::fold`] does, and with [`Error::Ir`] when a row's values do not have the types
    /// of `identity`.
    pub fn fold(
        self,
        identity: &[ScalarValue],
        op: impl Fn(&[AnyVal], &[AnyVal]) -> Vec<AnyVal>,
        combine: Combine,
    ) -> Result<Vec<ScalarValue>> {
        let order = match combine {
            Combine::InOrder => Order::Kept,
            Combine::AnyOrder => Order::Any,
        };
        self.query
            .reduce_values(identity.to_vec(), &combining(op), order)
    }

    /// The number of rows (those the filters keep).
    pub fn count(self) -> Result<usize> {
        let v = self.query.map_erased(one_u32).reduce_values(
            vec![ScalarValue::U32(0)],
            &add_columns,
            Order::Any,
        )?;
        Ok(v[0].to_bits() as usize)
    }

    /// Groups the rows by `key`, an integer of type `key_type` (a key of another type makes
    /// the fold fail with [`Error::Ir`]). Nothing runs until one of the returned
    /// [`DynGroupBy`]'s folds.
    pub fn group_by(
        self,
        key_type: ScalarType,
        key: impl Fn(&[AnyVal]) -> AnyVal + 'a,
    ) -> DynGroupBy<'a> {
        DynGroupBy {
            query: self,
            key_type,
            key: Box::new(move |cols| constants::user_code(KEY_CLOSURE, || key(cols))),
        }
    }
}

/// A grouping's key function on a row's columns.
type KeyFn<'a> = Box<dyn Fn(&[AnyVal]) -> AnyVal + 'a>;

/// The rows of a [`DynQuery`] grouped by an integer key, from [`DynQuery::group_by`].
pub struct DynGroupBy<'a> {
    query: DynQuery<'a>,
    key_type: ScalarType,
    key: KeyFn<'a>,
}

impl<'a> DynGroupBy<'a> {
    /// Folds the `value` columns (of the types of `identity`) of each key's rows with `op`
    /// from `identity`, in input order; returns one row per key present, the key first and
    /// then its folded columns, in ascending key order. The keys must span at most 1024
    /// values (largest minus smallest plus one; 8-bit keys always do): the grouping is the
    /// typed `group_by`'s dense plan, and wider keys fail with [`Error::Unsupported`]. Fails
    /// otherwise as [`DynQuery::fold`] does.
    pub fn fold(
        self,
        identity: &[ScalarValue],
        value: impl Fn(&[AnyVal]) -> Vec<AnyVal> + 'a,
        op: impl Fn(&[AnyVal], &[AnyVal]) -> Vec<AnyVal>,
    ) -> Result<Vec<Vec<ScalarValue>>> {
        self.fold_as(identity, value, &combining(op), FoldOp::InOrder)
    }

    /// The wrapping sums of the `value` columns (integers of the types of `zeros`, each
    /// zero) of each key's rows; returns rows as [`DynGroupBy::fold`] does. Integers up to 32
    /// bits are added in shared memory on GPUs.
    pub fn sums(
        self,
        zeros: &[ScalarValue],
        value: impl Fn(&[AnyVal]) -> Vec<AnyVal> + 'a,
    ) -> Result<Vec<Vec<ScalarValue>>> {
        let how = match zeros.iter().all(|z| z.ty().is_int()) {
            true => FoldOp::Adds,
            false => FoldOp::InOrder,
        };
        self.fold_as(zeros, value, &add_columns, how)
    }

    fn fold_as(
        self,
        identity: &[ScalarValue],
        value: impl Fn(&[AnyVal]) -> Vec<AnyVal> + 'a,
        op: CombineFn<'_>,
        how: FoldOp,
    ) -> Result<Vec<Vec<ScalarValue>>> {
        let mut query = self.query.query;
        let _span = query.plan_span("group_by fold");
        query.check()?;
        let key = self.key;
        let pairs = query.map_erased(move |cols| {
            let mut out = vec![key(&cols)];
            out.extend(constants::user_code(VALUE_CLOSURE, || value(&cols)));
            out
        });
        match dense_fold_values(&pairs, self.key_type, identity, op, how)? {
            Some(rows) => Ok(rows),
            None => Err(pairs.unsupported(&format!(
                "group_by over columns of run-time types with keys of {} spanning more than 1024 values",
                self.key_type
            ))),
        }
    }
}
