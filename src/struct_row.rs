//! Struct rows: what the [`Row`](crate::Row) impl that `#[derive(kiln::Value)]` writes calls.
//! A kiln value's scalar leaves (its scalar fields, its vectors' components and its nested
//! values' leaves, in declaration order) are its query columns. A kiln value has no padding
//! bytes, so its leaves also lie back to back in its memory and the host side moves bytes.

use crate::query::bytes_of;
use crate::Row;
use kiln_ir::{
    compose_any, f16, AnyVal, IrStruct, IrType, Scalar, ScalarType, ScalarValue, Type, Val, Vector,
};
use std::marker::PhantomData;
use std::mem::MaybeUninit;

/// The scalar leaves of the kiln value `S` in layout order; made only from `S`'s own
/// description ([`IrStruct::struct_type`]), so the byte moves below may trust it.
pub struct Leaves<S> {
    types: Vec<ScalarType>,
    _s: PhantomData<fn() -> S>,
}

impl<S: IrStruct> Leaves<S> {
    /// The leaves of `S`.
    ///
    /// # Panics
    /// When they do not cover `S`'s bytes exactly: an `IrStruct` impl that breaks its safety
    /// contract (the derive checks it at compile time).
    pub fn of() -> Leaves<S> {
        let mut types = Vec::new();
        push_leaves(&S::ir_type(), &mut types);
        let bytes: usize = types.iter().map(|t| t.size() as usize).sum();
        assert_eq!(
            bytes,
            std::mem::size_of::<S>(),
            "the IrStruct description of a kiln value does not cover its bytes"
        );
        Leaves {
            types,
            _s: PhantomData,
        }
    }

    /// The column types.
    pub fn types(&self) -> &[ScalarType] {
        &self.types
    }

    /// Element `i` of `cols`, one column per leaf.
    pub fn read(&self, cols: &[&[u8]], i: usize) -> S {
        assert_eq!(cols.len(), self.types.len(), "one column per leaf");
        let mut out = MaybeUninit::<S>::uninit();
        let base = out.as_mut_ptr() as *mut u8;
        let mut at = 0;
        for (col, t) in cols.iter().zip(&self.types) {
            let size = t.size() as usize;
            let src = &col[i * size..(i + 1) * size];
            // SAFETY: the leaves cover `S`'s bytes in order (checked in `of`), so `at + size`
            // stays within `out`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), base.add(at), size) };
            at += size;
        }
        // SAFETY: every byte is written with a value of the leaf's type (a column of that
        // type holds valid values of it, a bool column 0 or 1).
        unsafe { out.assume_init() }
    }

    /// Writes `v` as element `i` of `cols`, one column per leaf.
    pub fn write(&self, v: &S, cols: &mut [&mut [u8]], i: usize) {
        let bytes = bytes_of(std::slice::from_ref(v));
        let mut at = 0;
        for (col, t) in cols.iter_mut().zip(&self.types) {
            let size = t.size() as usize;
            col[i * size..(i + 1) * size].copy_from_slice(&bytes[at..at + size]);
            at += size;
        }
    }

    /// Writes `xs` into `cols`, one column of `xs.len()` values per leaf.
    pub fn write_columns(&self, xs: &[S], cols: &mut [&mut [u8]]) {
        let stride = std::mem::size_of::<S>();
        let bytes = bytes_of(xs);
        let mut at = 0;
        for (col, t) in cols.iter_mut().zip(&self.types) {
            match t.size() {
                1 => gather::<1>(bytes, stride, at, col),
                2 => gather::<2>(bytes, stride, at, col),
                4 => gather::<4>(bytes, stride, at, col),
                _ => gather::<8>(bytes, stride, at, col),
            }
            at += t.size() as usize;
        }
    }

    /// Appends `v`'s leaves as constants.
    pub fn values(&self, v: &S, out: &mut Vec<ScalarValue>) {
        let bytes = bytes_of(std::slice::from_ref(v));
        let mut at = 0;
        for t in &self.types {
            let size = t.size() as usize;
            let mut bits = [0u8; 8];
            bits[..size].copy_from_slice(&bytes[at..at + size]);
            out.push(ScalarValue::from_bits(*t, u64::from_le_bytes(bits)));
            at += size;
        }
    }

    /// The value made of the next leaf constants of `vals` (zero for missing ones).
    pub fn from_values(&self, vals: &mut dyn Iterator<Item = ScalarValue>) -> S {
        let mut cols: Vec<[u8; 8]> = self
            .types
            .iter()
            .map(|t| {
                let v = vals.next().unwrap_or_else(|| ScalarValue::zero(*t));
                // As a value of the leaf's type, whatever the constant's (a bool stays 0 or 1).
                ScalarValue::from_bits(*t, v.to_bits())
                    .to_bits()
                    .to_le_bytes()
            })
            .collect();
        let views: Vec<&[u8]> = cols.iter_mut().map(|c| &c[..]).collect();
        self.read(&views, 0)
    }
}

/// Copies the `N`-byte leaf at offset `at` of every `stride`-byte element into `col`.
fn gather<const N: usize>(bytes: &[u8], stride: usize, at: usize, col: &mut [u8]) {
    for (element, out) in bytes.chunks_exact(stride).zip(col.chunks_exact_mut(N)) {
        out.copy_from_slice(&element[at..at + N]);
    }
}

fn push_leaves(ty: &Type, out: &mut Vec<ScalarType>) {
    match ty {
        Type::Scalar(s) => out.push(*s),
        Type::Vector(s, n) => out.extend(std::iter::repeat_n(*s, *n as usize)),
        Type::Struct(st) => st.fields.iter().for_each(|f| push_leaves(&f.ty, out)),
        Type::Array(e, n) => (0..*n).for_each(|_| push_leaves(e, out)),
    }
}

/// A field type of a struct row: what closures receive for it and how it maps to columns.
/// A scalar is a `Val` of one column, a vector a `Val` of one column per component, a
/// nested kiln value its own row's values (the derive implements it for the struct too).
pub trait RowField: IrType {
    /// What closures receive for the field.
    type Vals: Copy;
    /// The field made of the next of `cols`.
    fn from_columns(cols: &mut dyn Iterator<Item = AnyVal>) -> Self::Vals;
    /// Appends the field's columns.
    fn to_columns(v: Self::Vals, out: &mut Vec<AnyVal>);
}

macro_rules! scalar_field {
    ($($t:ty),*) => {$(
        impl RowField for $t {
            type Vals = Val<$t>;
            fn from_columns(cols: &mut dyn Iterator<Item = AnyVal>) -> Val<$t> {
                <$t as Row>::vals(cols)
            }
            fn to_columns(v: Val<$t>, out: &mut Vec<AnyVal>) {
                <$t as Row>::handles(v, out);
            }
        }
    )*};
}
scalar_field!(bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, f32, f64);

impl<T: Scalar + Row<Vals = Val<T>>, const N: usize> RowField for Vector<T, N> {
    type Vals = Val<Vector<T, N>>;
    fn from_columns(cols: &mut dyn Iterator<Item = AnyVal>) -> Val<Vector<T, N>> {
        let parts: Vec<AnyVal> = (0..N).map(|_| T::vals(cols).erase()).collect();
        compose_any(Self::ir_type(), &parts).typed()
    }
    fn to_columns(v: Val<Vector<T, N>>, out: &mut Vec<AnyVal>) {
        leaf_values(v.erase(), out);
    }
}

/// Appends the scalar leaves of `v` (itself when it is a scalar; a vector's components and a
/// struct's fields' leaves in order).
pub(crate) fn leaf_values(v: AnyVal, out: &mut Vec<AnyVal>) {
    let parts = match &v.ty {
        Type::Scalar(_) => return out.push(v),
        Type::Vector(_, n) => u32::from(*n),
        Type::Array(_, n) => *n,
        Type::Struct(st) => st.fields.len() as u32,
    };
    for i in 0..parts {
        leaf_values(v.part(i), out);
    }
}
