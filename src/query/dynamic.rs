//! Queries over columns whose types are known only at run time: [`Context::from_columns`].
//! Closures take and give [`AnyVal`]s, the untyped IR values, so a caller that builds a
//! query from a description (a SQL plan, a schema) needs no Rust type per column. The same
//! planner and kernels run them as the typed [`Query`].

use super::group::{dense_fold_values, dense_key_limit, FoldOp};
use super::*;

/// One input column of [`Context::from_columns`]: a host slice of values, or a bitmap.
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::ir::{ScalarType, ScalarValue};
/// use kiln::{Column, Combine};
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (ids, valid) = ([7u16, 8, 9, 10], [0b1011u8]); // row 2 is not valid
/// let columns = [Column::of(&ids), Column::bits(&valid, 0)];
/// let n = ctx.from_columns(4, &columns).filter(|row| row[1].typed::<u8>().eq(1u8)).count()?;
/// assert_eq!(n, 3);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Column<'a> {
    /// The slice's (or bitmap's) bytes.
    bytes: &'a [u8],
    ty: ScalarType,
    layout: Layout,
    /// Elements it holds (bits, for a column of bits).
    held: usize,
}

impl<'a> Column<'a> {
    /// A column of `xs`, one element each.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.5f64, -2.0, 4.0];
    /// let sum = ctx
    ///     .from_columns(3, &[Column::of(&xs)])
    ///     .fold(&[ScalarValue::F64(0.0)], |a, b| vec![(a[0].typed::<f64>() + b[0].typed::<f64>()).erase()], Combine::AnyOrder)?;
    /// assert_eq!(sum, [ScalarValue::F64(3.5)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn of<T: Scalar>(xs: &'a [T]) -> Column<'a> {
        Column {
            bytes: bytes_of(xs),
            ty: T::TYPE,
            layout: Layout::Values,
            held: xs.len(),
        }
    }

    /// A column of bits (Arrow's validity bitmaps): element `i` is bit `offset + i` of
    /// `bits`, least significant bit first, read as a `u8` 0 or 1.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let bits = [0b1111_0000u8, 0b0000_0001];
    /// // Rows 0..6 are bits 3..9: 0, 1, 1, 1, 1, 1.
    /// let ones = ctx
    ///     .from_columns(6, &[Column::bits(&bits, 3)])
    ///     .map(|row| vec![row[0].typed::<u8>().cast::<u32>().erase()])
    ///     .fold(&[ScalarValue::U32(0)], |a, b| vec![(a[0].typed::<u32>() + b[0].typed::<u32>()).erase()], Combine::AnyOrder)?;
    /// assert_eq!(ones, [ScalarValue::U32(5)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn bits(bits: &'a [u8], offset: usize) -> Column<'a> {
        let bytes = bits.get(offset / 8..).unwrap_or(&[]);
        let shift = (offset % 8) as u32;
        Column {
            bytes,
            ty: ScalarType::U8,
            layout: Layout::Bits { shift },
            held: (bytes.len() * 8).saturating_sub(shift as usize),
        }
    }

    /// The type of the values closures see for this column.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(Column::of(&[1i64, 2]).ty(), ScalarType::I64);
    /// assert_eq!(Column::bits(&[0xffu8], 0).ty(), ScalarType::U8);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn ty(&self) -> ScalarType {
        self.ty
    }

    /// The query input that reads it.
    fn input(&self) -> Input<'a> {
        Input {
            source: Source::Host(self.bytes),
            ty: self.ty,
            layout: self.layout,
            piece: Piece::Whole,
        }
    }
}

/// How a fold may combine the rows of a [`DynQuery`] or of a key of a [`DynGroupBy`].
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::ir::{ScalarType, ScalarValue};
/// use kiln::{Column, Combine};
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs = [1u32, 2, 3, 4];
/// // "a * 10 + b" is associative but not commutative: it needs the input order.
/// let digits = ctx.from_columns(4, &[Column::of(&xs)]).fold(
///     &[ScalarValue::U32(0)],
///     |a, b| vec![(a[0].typed::<u32>() * 10u32 + b[0].typed::<u32>()).erase()],
///     Combine::InOrder,
/// )?;
/// assert_eq!(digits, [ScalarValue::U32(1234)]);
/// # Ok::<(), kiln::Error>(())
/// ```
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
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::ir::{ScalarType, ScalarValue};
/// use kiln::{Column, Combine};
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (a, b) = ([1i32, -2, 3], [10i32, 20, 30]);
/// let q = ctx.from_columns(3, &[Column::of(&a), Column::of(&b)]);
/// let positive = q.filter(|row| row[0].typed::<i32>().gt(0)).count()?;
/// assert_eq!(positive, 2);
/// # Ok::<(), kiln::Error>(())
/// ```
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
        let short = columns.iter().find(|c| match c.layout {
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
                columns: columns.iter().map(Column::input).collect(),
                base_columns: columns.len(),
                stages: Vec::new(),
                error,
                ran: Vec::new(),
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (w, h) = ([2u32, 3, 4], [5u32, 6, 7]);
    /// let area = ctx
    ///     .from_columns(3, &[Column::of(&w), Column::of(&h)])
    ///     .map(|row| vec![(row[0].typed::<u32>() * row[1].typed::<u32>()).erase()])
    ///     .fold(&[ScalarValue::U32(0)], |a, b| vec![(a[0].typed::<u32>() + b[0].typed::<u32>()).erase()], Combine::AnyOrder)?;
    /// assert_eq!(area, [ScalarValue::U32(10 + 18 + 28)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn map(self, f: impl Fn(&[AnyVal]) -> Vec<AnyVal> + 'a) -> DynQuery<'a> {
        DynQuery {
            query: self.query.map_erased(move |cols| f(&cols)),
        }
    }

    /// Keeps the rows for which `pred` is true, in their input order.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x = [5u8, 200, 17, 255];
    /// let small = ctx.from_columns(4, &[Column::of(&x)]).filter(|row| row[0].typed::<u8>().lt(100u8));
    /// assert_eq!(small.count()?, 2);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x = [3.0f32, -1.0, 8.0, 2.0];
    /// // The minimum and the maximum in one pass: two columns folded together.
    /// let range = ctx.from_columns(4, &[Column::of(&x)]).map(|row| vec![row[0].clone(), row[0].clone()]).fold(
    ///     &[ScalarValue::F32(f32::INFINITY), ScalarValue::F32(f32::NEG_INFINITY)],
    ///     |a, b| vec![
    ///         a[0].typed::<f32>().min(b[0].typed::<f32>()).erase(),
    ///         a[1].typed::<f32>().max(b[1].typed::<f32>()).erase(),
    ///     ],
    ///     Combine::AnyOrder,
    /// )?;
    /// assert_eq!(range, [ScalarValue::F32(-1.0), ScalarValue::F32(8.0)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<i16> = (-50..50).collect();
    /// let q = ctx.from_columns(x.len(), &[Column::of(&x)]);
    /// assert_eq!(q.filter(|row| row[0].typed::<i16>().ge(10i16)).count()?, 40);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (key, qty) = ([2u8, 1, 2, 2], [10u32, 5, 1, 7]);
    /// let per_key = ctx
    ///     .from_columns(4, &[Column::of(&key), Column::of(&qty)])
    ///     .group_by(ScalarType::U8, |row| row[0].clone())
    ///     .sums(&[ScalarValue::U32(0)], |row| vec![row[1].clone()])?;
    /// assert_eq!(per_key, [
    ///     vec![ScalarValue::U8(1), ScalarValue::U32(5)],
    ///     vec![ScalarValue::U8(2), ScalarValue::U32(18)],
    /// ]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::ir::{ScalarType, ScalarValue};
/// use kiln::{Column, Combine};
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (day, temp) = ([0u16, 1, 0, 1, 1], [12.5f32, 9.0, 14.0, 8.5, 10.0]);
/// let warmest = ctx
///     .from_columns(5, &[Column::of(&day), Column::of(&temp)])
///     .group_by(ScalarType::U16, |row| row[0].clone())
///     .fold(&[ScalarValue::F32(f32::NEG_INFINITY)], |row| vec![row[1].clone()], |a, b| {
///         vec![a[0].typed::<f32>().max(b[0].typed::<f32>()).erase()]
///     })?;
/// assert_eq!(warmest, [
///     vec![ScalarValue::U16(0), ScalarValue::F32(14.0)],
///     vec![ScalarValue::U16(1), ScalarValue::F32(10.0)],
/// ]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct DynGroupBy<'a> {
    query: DynQuery<'a>,
    key_type: ScalarType,
    key: KeyFn<'a>,
}

impl<'a> DynGroupBy<'a> {
    /// Folds the `value` columns (of the types of `identity`) of each key's rows with `op`
    /// from `identity`, in input order; returns one row per key present, the key first and
    /// then its folded columns, in ascending key order. The keys must span at most 1024
    /// values (largest minus smallest plus one; 8-bit keys always do), or 2^20 where plans
    /// are chunked (CPUs): the grouping is the typed `group_by`'s dense plan, and wider keys
    /// fail with [`Error::Unsupported`]. Fails
    /// otherwise as [`DynQuery::fold`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (key, x) = ([5i32, 6, 5, 5], [1u32, 2, 3, 4]);
    /// // Per key, the values as decimal digits in input order: 1, 3, 4 -> 134.
    /// let digits = ctx
    ///     .from_columns(4, &[Column::of(&key), Column::of(&x)])
    ///     .group_by(ScalarType::I32, |row| row[0].clone())
    ///     .fold(&[ScalarValue::U32(0)], |row| vec![row[1].clone()], |a, b| {
    ///         vec![(a[0].typed::<u32>() * 10u32 + b[0].typed::<u32>()).erase()]
    ///     })?;
    /// assert_eq!(digits, [
    ///     vec![ScalarValue::I32(5), ScalarValue::U32(134)],
    ///     vec![ScalarValue::I32(6), ScalarValue::U32(2)],
    /// ]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::ir::{ScalarType, ScalarValue};
    /// use kiln::{Column, Combine};
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (store, units, cents) = ([3u8, 1, 3], [2i64, 5, 1], [250u32, 99, 1000]);
    /// let totals = ctx
    ///     .from_columns(3, &[Column::of(&store), Column::of(&units), Column::of(&cents)])
    ///     .group_by(ScalarType::U8, |row| row[0].clone())
    ///     .sums(&[ScalarValue::I64(0), ScalarValue::U32(0)], |row| vec![row[1].clone(), row[2].clone()])?;
    /// assert_eq!(totals, [
    ///     vec![ScalarValue::U8(1), ScalarValue::I64(5), ScalarValue::U32(99)],
    ///     vec![ScalarValue::U8(3), ScalarValue::I64(3), ScalarValue::U32(1250)],
    /// ]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
            Some(rows) => Ok(rows.into_vecs()),
            None => Err(pairs.unsupported(&format!(
                "group_by over columns of run-time types with keys of {} spanning more than {} values",
                self.key_type,
                dense_key_limit(&pairs.ctx.profile())
            ))),
        }
    }
}
