//! Rows: the element types a query carries. A scalar is a row of one column; a tuple of rows is
//! a row of their columns side by side (struct-of-arrays on the device).

use kiln_ir::{f16, AnyVal, Scalar, ScalarType, ScalarValue, Val};
use std::mem::MaybeUninit;

/// Writes the output columns (one byte buffer each) and returns how many elements it wrote
/// (the terminals hand one to `Row::collect`).
#[doc(hidden)]
pub type FillColumns<'f> = dyn FnMut(&mut [&mut [MaybeUninit<u8>]]) -> crate::Result<usize> + 'f;

/// A query element type: a kiln scalar or a tuple of rows (up to four columns side by side).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (ids, scores) = ([3u32, 1, 2], [0.5f32, 0.9, 0.1]);
/// // The rows are (u32, f32) tuples: two columns on the device, tuples on the host.
/// let rows: Vec<(u32, f32)> = ctx.from(&ids).zip(&scores).filter(|(_, s)| s.gt(0.2)).to_vec()?;
/// assert_eq!(rows, [(3, 0.5), (1, 0.9)]);
/// // Rows nest: a tuple of rows is a row.
/// let q = ctx.from(&[1u8, 2]).zip(&[10i64, 20]).zip(&[0.5f64, 1.5]);
/// let nested: Vec<(u8, (i64, f64))> = q.map(|((a, b), c)| (a, (b, c))).to_vec()?;
/// assert_eq!(nested, [(1, (10, 0.5)), (2, (20, 1.5))]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait Row: Copy + Send + Sync + 'static {
    /// The element as IR values inside closures: `Val<T>` or a tuple of them.
    type Vals: Copy;
    /// Number of scalar columns.
    #[doc(hidden)]
    fn width() -> usize;
    /// Appends the column types.
    #[doc(hidden)]
    fn column_types(out: &mut Vec<ScalarType>);
    /// Builds the IR view of the element from its column values.
    #[doc(hidden)]
    fn vals(cols: &mut dyn Iterator<Item = AnyVal>) -> Self::Vals;
    /// Appends the column values of an IR view.
    #[doc(hidden)]
    fn handles(v: Self::Vals, out: &mut Vec<AnyVal>);
    /// Appends the element's column constants.
    #[doc(hidden)]
    fn to_values(self, out: &mut Vec<ScalarValue>);
    /// Rebuilds an element from column constants.
    #[doc(hidden)]
    fn from_values(vals: &mut dyn Iterator<Item = ScalarValue>) -> Self;
    /// Element `i` of column buffers holding this row's columns.
    #[doc(hidden)]
    fn read(cols: &[&[u8]], i: usize) -> Self;
    /// Writes the element as element `i` of column buffers for this row's columns (the
    /// inverse of [`Row::read`]).
    #[doc(hidden)]
    fn write(&self, cols: &mut [&mut [u8]], i: usize);
    /// Writes `xs` into column buffers for this row's columns, `xs.len()` values each.
    #[doc(hidden)]
    fn write_columns(xs: &[Self], cols: &mut [&mut [u8]]) {
        for (i, x) in xs.iter().enumerate() {
            x.write(cols, i);
        }
    }
    /// The bytes of `xs` when the row is one column laid out as the slice is (a scalar).
    #[doc(hidden)]
    fn as_column(xs: &[Self]) -> Option<&[u8]> {
        let _ = xs;
        None
    }
    /// Allocates room for `n` elements, lets `fill` write the columns (one byte buffer per
    /// column) and return how many elements it wrote, and returns them.
    #[doc(hidden)]
    fn collect(n: usize, fill: &mut FillColumns<'_>) -> crate::Result<Vec<Self>> {
        let types = {
            let mut t = Vec::new();
            Self::column_types(&mut t);
            t
        };
        let mut bufs: Vec<Vec<MaybeUninit<u64>>> = types
            .iter()
            .map(|t| {
                let words = (n * t.size() as usize).div_ceil(8);
                let mut b = crate::error::host_vec(words, "the columns of a result")?;
                b.resize(words, MaybeUninit::uninit());
                Ok(b)
            })
            .collect::<crate::Result<_>>()?;
        let mut views: Vec<&mut [MaybeUninit<u8>]> = bufs
            .iter_mut()
            .zip(&types)
            .map(|(b, t)| {
                let len = n * t.size() as usize;
                // SAFETY: a u64 buffer viewed as bytes, within its length.
                unsafe {
                    std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut MaybeUninit<u8>, len)
                }
            })
            .collect();
        let count = fill(&mut views)?.min(n);
        let cols: Vec<&[u8]> = bufs
            .iter()
            .zip(&types)
            .map(|(b, t)| {
                // SAFETY: the kernel wrote the first `count` elements of every column.
                unsafe {
                    std::slice::from_raw_parts(b.as_ptr() as *const u8, count * t.size() as usize)
                }
            })
            .collect();
        let mut rows = crate::error::host_vec(count, "the rows of a result")?;
        rows.extend((0..count).map(|i| Self::read(&cols, i)));
        Ok(rows)
    }
}

/// The values a closure receives for a row of `T` ([`Row::Vals`]): `Val<T>` for a scalar,
/// a tuple of them for a tuple, and for a `#[derive(kiln::Value)]` struct a struct with the
/// same field names (a `Val` for a scalar or vector field, the nested struct's own values for
/// a kiln value field), which closures read as `p.x` and build as
/// `kiln::Vals::<P> { x: .., ..p }`. A struct row is stored as one column per scalar
/// (struct-of-arrays): its scalar fields, its vectors' components and its nested values'
/// scalars.
///
/// ```
/// # use kiln::prelude::*;
/// #[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
/// #[repr(C)]
/// struct Trade {
///     price: f64,
///     qty: u32,
///     venue: u32,
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let trades = [
///     Trade { price: 10.0, qty: 3, venue: 1 },
///     Trade { price: 12.5, qty: 0, venue: 2 },
///     Trade { price: 9.0, qty: 5, venue: 1 },
/// ];
/// // Fields in closures, structs out.
/// let doubled: Vec<Trade> = ctx
///     .from(&trades)
///     .filter(|t| t.qty.gt(0))
///     .map(|t| kiln::Vals::<Trade> { qty: t.qty * 2, ..t })
///     .sort_by_key(|t| t.price)
///     .to_vec()?;
/// assert_eq!(doubled, [Trade { price: 9.0, qty: 10, venue: 1 }, Trade { price: 10.0, qty: 6, venue: 1 }]);
/// // Grouped by a field.
/// let per_venue = ctx.from(&trades).group_by(|t| t.venue).sum(|t| t.price * t.qty.cast::<f64>())?;
/// assert_eq!(per_venue, [(1, 75.0), (2, 0.0)]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub type Vals<T> = <T as Row>::Vals;

macro_rules! scalar_row {
    ($($t:ty),*) => {$(
impl Row for $t {
    type Vals = Val<$t>;
    fn width() -> usize {
        1
    }
    fn column_types(out: &mut Vec<ScalarType>) {
        out.push(<$t as Scalar>::TYPE);
    }
    fn vals(cols: &mut dyn Iterator<Item = AnyVal>) -> Val<$t> {
        match cols.next() {
            Some(v) => v.typed::<$t>(),
            None => kiln_ir::lit_value(ScalarValue::zero(<$t as Scalar>::TYPE)).typed::<$t>(),
        }
    }
    fn handles(v: Val<$t>, out: &mut Vec<AnyVal>) {
        out.push(v.erase());
    }
    fn to_values(self, out: &mut Vec<ScalarValue>) {
        out.push(self.to_value());
    }
    fn from_values(vals: &mut dyn Iterator<Item = ScalarValue>) -> $t {
        <$t as Scalar>::from_bits(vals.next().map(|v| v.to_bits()).unwrap_or(0))
    }
    fn read(cols: &[&[u8]], i: usize) -> $t {
        let size = <$t as Scalar>::TYPE.size() as usize;
        let mut bits = [0u8; 8];
        bits[..size].copy_from_slice(&cols[0][i * size..(i + 1) * size]);
        <$t as Scalar>::from_bits(u64::from_le_bytes(bits))
    }
    fn write(&self, cols: &mut [&mut [u8]], i: usize) {
        let size = <$t as Scalar>::TYPE.size() as usize;
        let bits = self.to_value().to_bits().to_le_bytes();
        cols[0][i * size..(i + 1) * size].copy_from_slice(&bits[..size]);
    }
    fn as_column(xs: &[$t]) -> Option<&[u8]> {
        Some(crate::query::bytes_of(xs))
    }
    fn collect(n: usize, fill: &mut FillColumns<'_>) -> crate::Result<Vec<$t>> {
        let mut out: Vec<$t> = crate::error::host_vec(n, "the rows of a result")?;
        kiln_backend::advise_huge_pages(out.as_mut_ptr() as *mut u8, n * std::mem::size_of::<$t>());
        let spare = out.spare_capacity_mut();
        // SAFETY: the spare capacity of a Vec<$t> viewed as bytes, within its length.
        let bytes = unsafe { std::slice::from_raw_parts_mut(spare.as_mut_ptr() as *mut MaybeUninit<u8>, n * std::mem::size_of::<$t>()) };
        let count = fill(&mut [bytes])?.min(n);
        // SAFETY: the kernel wrote the first `count` elements with valid values.
        unsafe { out.set_len(count) };
        Ok(out)
    }
}
    )*};
}
scalar_row!(bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, f32, f64);

macro_rules! tuple_row {
    ($($name:ident),+) => {
        impl<$($name: Row),+> Row for ($($name,)+) {
            type Vals = ($($name::Vals,)+);
            fn width() -> usize {
                0 $(+ $name::width())+
            }
            fn column_types(out: &mut Vec<ScalarType>) {
                $($name::column_types(out);)+
            }
            fn vals(cols: &mut dyn Iterator<Item = AnyVal>) -> Self::Vals {
                ($($name::vals(cols),)+)
            }
            #[allow(non_snake_case)]
            fn handles(v: Self::Vals, out: &mut Vec<AnyVal>) {
                let ($($name,)+) = v;
                $(<$name as Row>::handles($name, out);)+
            }
            #[allow(non_snake_case)]
            fn to_values(self, out: &mut Vec<ScalarValue>) {
                let ($($name,)+) = self;
                $($name.to_values(out);)+
            }
            fn from_values(vals: &mut dyn Iterator<Item = ScalarValue>) -> Self {
                ($($name::from_values(vals),)+)
            }
            #[allow(unused_assignments)]
            fn read(cols: &[&[u8]], i: usize) -> Self {
                let mut at = 0;
                ($({
                    let w = $name::width();
                    let v = $name::read(&cols[at..at + w], i);
                    at += w;
                    v
                },)+)
            }
            #[allow(non_snake_case, unused_assignments)]
            fn write(&self, cols: &mut [&mut [u8]], i: usize) {
                let ($($name,)+) = self;
                let mut at = 0;
                $({
                    let w = <$name as Row>::width();
                    $name.write(&mut cols[at..at + w], i);
                    at += w;
                })+
            }
        }
    };
}
tuple_row!(A, B);
tuple_row!(A, B, C);
tuple_row!(A, B, C, D);

/// A row that may be absent, as the right side of a [`Query::left_join`](crate::Query::left_join)
/// row: `Option<T>` on the host, and inside closures whether it is there and its values
/// (zeros when it is not).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (ids, known) = ([1u32, 2, 3], [3u32, 1]);
/// let rows = ctx.from(&ids).left_join(ctx.from(&known), |x| x, |y| y);
/// assert_eq!(rows.to_vec()?, [(1, Some(1)), (2, None), (3, Some(3))]);
/// // Absent rows read as the default `unwrap_or` gives.
/// let ids_or_99 = ctx.from(&ids).left_join(ctx.from(&known), |x| x, |y| y);
/// assert_eq!(ids_or_99.map(|(_, k)| k.unwrap_or(99)).to_vec()?, [1, 99, 3]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Maybe<T: Row> {
    /// True when the row is there.
    pub is_some: Val<bool>,
    /// Its values: zeros when it is not there.
    pub value: T::Vals,
}

impl<T: Row> Clone for Maybe<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Row> Copy for Maybe<T> {}

impl<T: Row> Maybe<T> {
    /// The row's values when it is there, `default`'s when it is not (as
    /// `Option::unwrap_or`).
    pub fn unwrap_or(self, default: T) -> T::Vals {
        let mut values = Vec::new();
        T::handles(self.value, &mut values);
        let mut defaults = Vec::new();
        default.to_values(&mut defaults);
        let chosen: Vec<AnyVal> = values
            .iter()
            .zip(defaults)
            .map(|(v, d)| {
                let d = kiln_ir::lit_value(d);
                crate::query::select_dyn(&self.is_some.erase(), v, &d)
            })
            .collect();
        T::vals(&mut chosen.into_iter())
    }
}

impl<T: Row> Row for Option<T> {
    type Vals = Maybe<T>;
    fn width() -> usize {
        1 + T::width()
    }
    fn column_types(out: &mut Vec<ScalarType>) {
        out.push(ScalarType::Bool);
        T::column_types(out);
    }
    fn vals(cols: &mut dyn Iterator<Item = AnyVal>) -> Maybe<T> {
        let is_some = <bool as Row>::vals(cols);
        Maybe {
            is_some,
            value: T::vals(cols),
        }
    }
    fn handles(v: Maybe<T>, out: &mut Vec<AnyVal>) {
        out.push(v.is_some.erase());
        T::handles(v.value, out);
    }
    fn to_values(self, out: &mut Vec<ScalarValue>) {
        out.push(ScalarValue::Bool(self.is_some()));
        match self {
            Some(v) => v.to_values(out),
            None => {
                let mut types = Vec::new();
                T::column_types(&mut types);
                out.extend(types.into_iter().map(ScalarValue::zero));
            }
        }
    }
    fn from_values(vals: &mut dyn Iterator<Item = ScalarValue>) -> Self {
        let there = <bool as Row>::from_values(vals);
        let v = T::from_values(vals);
        there.then_some(v)
    }
    fn read(cols: &[&[u8]], i: usize) -> Self {
        <bool as Row>::read(&cols[..1], i).then(|| T::read(&cols[1..], i))
    }
    fn write(&self, cols: &mut [&mut [u8]], i: usize) {
        self.is_some().write(&mut cols[..1], i);
        match self {
            Some(v) => v.write(&mut cols[1..], i),
            None => {
                let mut types = Vec::new();
                T::column_types(&mut types);
                for (col, t) in cols[1..].iter_mut().zip(types) {
                    let size = t.size() as usize;
                    col[i * size..(i + 1) * size].fill(0);
                }
            }
        }
    }
}

impl<T: Row> IntoRow for Maybe<T> {
    type Row = Option<T>;
    fn into_handles(self, out: &mut Vec<AnyVal>) {
        Option::<T>::handles(self, out);
    }
}

/// What a `map` closure may return: a `Val<T>` or a tuple of them.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs = [1.5f32, -2.0, 4.0];
/// // One value per row, then two: the map's result type is the query's new row.
/// let doubled: Vec<f32> = ctx.from(&xs).map(|x| x * 2.0).to_vec()?;
/// assert_eq!(doubled, [3.0, -4.0, 8.0]);
/// let split: Vec<(i32, f32)> = ctx.from(&xs).map(|x| (x.cast::<i32>(), x - x.trunc())).to_vec()?;
/// assert_eq!(split, [(1, 0.5), (-2, 0.0), (4, 0.0)]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait IntoRow {
    /// The row type of the result.
    type Row: Row;
    /// Appends the column values.
    #[doc(hidden)]
    fn into_handles(self, out: &mut Vec<AnyVal>);
}

impl<T: Scalar + Row> IntoRow for Val<T> {
    type Row = T;
    fn into_handles(self, out: &mut Vec<AnyVal>) {
        out.push(self.erase());
    }
}

macro_rules! tuple_into_row {
    ($($name:ident),+) => {
        impl<$($name: IntoRow),+> IntoRow for ($($name,)+) {
            type Row = ($($name::Row,)+);
            #[allow(non_snake_case)]
            fn into_handles(self, out: &mut Vec<AnyVal>) {
                let ($($name,)+) = self;
                $($name.into_handles(out);)+
            }
        }
    };
}
tuple_into_row!(A, B);
tuple_into_row!(A, B, C);
tuple_into_row!(A, B, C, D);
