//! IR types: scalars, small vectors, plain structs and fixed-size arrays, with their C layout.

use std::fmt;
use std::sync::Arc;

/// A scalar type of the IR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScalarType {
    /// `bool`; one byte in memory (0 or 1).
    Bool,
    /// `i8`
    I8,
    /// `u8`
    U8,
    /// `i16`
    I16,
    /// `u16`
    U16,
    /// `i32`
    I32,
    /// `u32`
    U32,
    /// `i64`
    I64,
    /// `u64`
    U64,
    /// `half::f16`, IEEE binary16: two bytes in memory; every operation's result is rounded
    /// to binary16, as `half::f16`'s operators round (backends may compute in `f32`).
    F16,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl ScalarType {
    /// Every scalar type, in declaration order.
    pub const ALL: [ScalarType; 12] = [
        ScalarType::Bool,
        ScalarType::I8,
        ScalarType::U8,
        ScalarType::I16,
        ScalarType::U16,
        ScalarType::I32,
        ScalarType::U32,
        ScalarType::I64,
        ScalarType::U64,
        ScalarType::F16,
        ScalarType::F32,
        ScalarType::F64,
    ];

    /// Size in bytes.
    pub fn size(self) -> u32 {
        match self {
            ScalarType::Bool | ScalarType::I8 | ScalarType::U8 => 1,
            ScalarType::I16 | ScalarType::U16 | ScalarType::F16 => 2,
            ScalarType::I32 | ScalarType::U32 | ScalarType::F32 => 4,
            ScalarType::I64 | ScalarType::U64 | ScalarType::F64 => 8,
        }
    }

    /// Size in bits.
    pub fn bits(self) -> u32 {
        self.size() * 8
    }

    /// True for `f16`, `f32` and `f64`.
    pub fn is_float(self) -> bool {
        matches!(self, ScalarType::F16 | ScalarType::F32 | ScalarType::F64)
    }

    /// True for the eight integer types.
    pub fn is_int(self) -> bool {
        !self.is_float() && self != ScalarType::Bool
    }

    /// True for signed integers and floats.
    pub fn is_signed(self) -> bool {
        matches!(
            self,
            ScalarType::I8
                | ScalarType::I16
                | ScalarType::I32
                | ScalarType::I64
                | ScalarType::F16
                | ScalarType::F32
                | ScalarType::F64
        )
    }

    /// True for integers and floats (every type but `bool`).
    pub fn is_numeric(self) -> bool {
        self != ScalarType::Bool
    }

    /// The Rust spelling of the type (`"f32"`).
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::Bool => "bool",
            ScalarType::I8 => "i8",
            ScalarType::U8 => "u8",
            ScalarType::I16 => "i16",
            ScalarType::U16 => "u16",
            ScalarType::I32 => "i32",
            ScalarType::U32 => "u32",
            ScalarType::I64 => "i64",
            ScalarType::U64 => "u64",
            ScalarType::F16 => "f16",
            ScalarType::F32 => "f32",
            ScalarType::F64 => "f64",
        }
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A field of a [`StructType`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Field name, a Rust identifier.
    pub name: String,
    /// Field type.
    pub ty: Type,
}

/// A plain struct: named fields laid out as `#[repr(C)]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StructType {
    /// Struct name, a Rust identifier.
    pub name: String,
    /// Fields in declaration order.
    pub fields: Vec<Field>,
}

/// A type of the IR.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// A scalar.
    Scalar(ScalarType),
    /// A vector of 2, 3 or 4 numeric scalars; laid out like `[T; N]`.
    Vector(ScalarType, u8),
    /// A plain struct.
    Struct(Arc<StructType>),
    /// A fixed-size array; allowed for locals, shared memory elements and struct fields.
    Array(Box<Type>, u32),
}

impl Type {
    /// `Type::Scalar(s)`.
    pub const fn scalar(s: ScalarType) -> Type {
        Type::Scalar(s)
    }

    /// The scalar type when this is a scalar.
    pub fn as_scalar(&self) -> Option<ScalarType> {
        match self {
            Type::Scalar(s) => Some(*s),
            _ => None,
        }
    }

    /// The scalar type of a scalar or the component type of a vector.
    pub fn component(&self) -> Option<ScalarType> {
        match self {
            Type::Scalar(s) | Type::Vector(s, _) => Some(*s),
            _ => None,
        }
    }

    /// Size in bytes with C layout (struct tail padding included); saturates at `u32::MAX`
    /// for types too large to exist.
    pub fn size(&self) -> u32 {
        match self {
            Type::Scalar(s) => s.size(),
            Type::Vector(s, n) => s.size() * *n as u32,
            Type::Array(e, n) => e.size().saturating_mul(*n),
            Type::Struct(st) => {
                let mut off = 0u32;
                for f in &st.fields {
                    off = align_up(off, f.ty.align()).saturating_add(f.ty.size());
                }
                align_up(off, self.align())
            }
        }
    }

    /// Alignment in bytes with C layout.
    pub fn align(&self) -> u32 {
        match self {
            Type::Scalar(s) | Type::Vector(s, _) => s.size(),
            Type::Array(e, _) => e.align(),
            Type::Struct(st) => st.fields.iter().map(|f| f.ty.align()).max().unwrap_or(1),
        }
    }

    /// Byte offsets of the fields of a struct; empty for other types.
    pub fn field_offsets(&self) -> Vec<u32> {
        let Type::Struct(st) = self else {
            return Vec::new();
        };
        let mut off = 0u32;
        st.fields
            .iter()
            .map(|f| {
                off = align_up(off, f.ty.align());
                let here = off;
                off += f.ty.size();
                here
            })
            .collect()
    }

    /// The scalars this type is made of, in memory order, with their byte offsets.
    /// A value of the type is passed between IR nodes as these components.
    pub fn flatten(&self) -> Vec<(ScalarType, u32)> {
        let mut out = Vec::new();
        self.flatten_into(0, &mut out);
        out
    }

    fn flatten_into(&self, base: u32, out: &mut Vec<(ScalarType, u32)>) {
        match self {
            Type::Scalar(s) => out.push((*s, base)),
            Type::Vector(s, n) => {
                for i in 0..*n as u32 {
                    out.push((*s, base + i * s.size()));
                }
            }
            Type::Array(e, n) => {
                for i in 0..*n {
                    e.flatten_into(base + i * e.size(), out);
                }
            }
            Type::Struct(_) => {
                let Type::Struct(st) = self else {
                    unreachable!()
                };
                for (f, off) in st.fields.iter().zip(self.field_offsets()) {
                    f.ty.flatten_into(base + off, out);
                }
            }
        }
    }

    /// The flattened components (see [`Type::flatten`]) that make up component `index` of a
    /// vector or field `index` of a struct; `None` for other types or an index out of range.
    pub fn component_range(&self, index: u32) -> Option<std::ops::Range<usize>> {
        match self {
            Type::Vector(_, n) if index < *n as u32 => Some(index as usize..index as usize + 1),
            Type::Struct(st) if (index as usize) < st.fields.len() => {
                let start: usize = st.fields[..index as usize]
                    .iter()
                    .map(|f| f.ty.flatten().len())
                    .sum();
                Some(start..start + st.fields[index as usize].ty.flatten().len())
            }
            _ => None,
        }
    }

    /// True when the type contains an array anywhere.
    pub fn contains_array(&self) -> bool {
        match self {
            Type::Array(..) => true,
            Type::Struct(st) => st.fields.iter().any(|f| f.ty.contains_array()),
            _ => false,
        }
    }
}

impl From<ScalarType> for Type {
    fn from(s: ScalarType) -> Type {
        Type::Scalar(s)
    }
}

fn align_up(x: u32, a: u32) -> u32 {
    x.div_ceil(a).saturating_mul(a)
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Scalar(s) => write!(f, "{s}"),
            Type::Vector(s, n) => write!(f, "vec{n}<{s}>"),
            Type::Struct(st) => write!(f, "{}", st.name),
            Type::Array(e, n) => write!(f, "[{e}; {n}]"),
        }
    }
}

/// A constant scalar value. Floats compare and hash by their bits, so `-0.0` and each NaN
/// payload are distinct constants.
#[derive(Clone, Copy, Debug)]
pub enum ScalarValue {
    /// A `bool` constant.
    Bool(bool),
    /// An `i8` constant.
    I8(i8),
    /// A `u8` constant.
    U8(u8),
    /// An `i16` constant.
    I16(i16),
    /// A `u16` constant.
    U16(u16),
    /// An `i32` constant.
    I32(i32),
    /// A `u32` constant.
    U32(u32),
    /// An `i64` constant.
    I64(i64),
    /// A `u64` constant.
    U64(u64),
    /// An `f16` constant.
    F16(half::f16),
    /// An `f32` constant.
    F32(f32),
    /// An `f64` constant.
    F64(f64),
}

impl ScalarValue {
    /// The type of the constant.
    pub fn ty(self) -> ScalarType {
        match self {
            ScalarValue::Bool(_) => ScalarType::Bool,
            ScalarValue::I8(_) => ScalarType::I8,
            ScalarValue::U8(_) => ScalarType::U8,
            ScalarValue::I16(_) => ScalarType::I16,
            ScalarValue::U16(_) => ScalarType::U16,
            ScalarValue::I32(_) => ScalarType::I32,
            ScalarValue::U32(_) => ScalarType::U32,
            ScalarValue::I64(_) => ScalarType::I64,
            ScalarValue::U64(_) => ScalarType::U64,
            ScalarValue::F16(_) => ScalarType::F16,
            ScalarValue::F32(_) => ScalarType::F32,
            ScalarValue::F64(_) => ScalarType::F64,
        }
    }

    /// The value's bits, zero-extended to 64 bits (the memory image of the constant).
    pub fn to_bits(self) -> u64 {
        match self {
            ScalarValue::Bool(b) => b as u64,
            ScalarValue::I8(v) => v as u8 as u64,
            ScalarValue::U8(v) => v as u64,
            ScalarValue::I16(v) => v as u16 as u64,
            ScalarValue::U16(v) => v as u64,
            ScalarValue::I32(v) => v as u32 as u64,
            ScalarValue::U32(v) => v as u64,
            ScalarValue::I64(v) => v as u64,
            ScalarValue::U64(v) => v,
            ScalarValue::F16(v) => v.to_bits() as u64,
            ScalarValue::F32(v) => v.to_bits() as u64,
            ScalarValue::F64(v) => v.to_bits(),
        }
    }

    /// The value's bytes in memory: its type's size, little-endian (as a buffer element or a
    /// value parameter holds it).
    pub fn to_le_bytes(self) -> Vec<u8> {
        self.to_bits().to_le_bytes()[..self.ty().size() as usize].to_vec()
    }

    /// Rebuilds a constant of type `ty` from the low bits of `bits`.
    pub fn from_bits(ty: ScalarType, bits: u64) -> ScalarValue {
        match ty {
            ScalarType::Bool => ScalarValue::Bool(bits & 1 != 0),
            ScalarType::I8 => ScalarValue::I8(bits as u8 as i8),
            ScalarType::U8 => ScalarValue::U8(bits as u8),
            ScalarType::I16 => ScalarValue::I16(bits as u16 as i16),
            ScalarType::U16 => ScalarValue::U16(bits as u16),
            ScalarType::I32 => ScalarValue::I32(bits as u32 as i32),
            ScalarType::U32 => ScalarValue::U32(bits as u32),
            ScalarType::I64 => ScalarValue::I64(bits as i64),
            ScalarType::U64 => ScalarValue::U64(bits),
            ScalarType::F16 => ScalarValue::F16(half::f16::from_bits(bits as u16)),
            ScalarType::F32 => ScalarValue::F32(f32::from_bits(bits as u32)),
            ScalarType::F64 => ScalarValue::F64(f64::from_bits(bits)),
        }
    }

    /// The value as an `f16`, rounded once to the nearest (ties to even), as the IR's cast
    /// rounds: infinity past the range, `bool` as 0 or 1. (`half::f16::from_f64` rounds on the
    /// top 32 bits of an `f64`, which just past a tie can give the other neighbour.)
    pub fn to_f16(self) -> half::f16 {
        let d = match self {
            ScalarValue::F16(h) => return h,
            ScalarValue::F32(f) => return half::f16::from_f32(f),
            ScalarValue::Bool(b) => b as u8 as f64,
            ScalarValue::I8(v) => v as f64,
            ScalarValue::U8(v) => v as f64,
            ScalarValue::I16(v) => v as f64,
            ScalarValue::U16(v) => v as f64,
            ScalarValue::I32(v) => v as f64,
            ScalarValue::U32(v) => v as f64,
            ScalarValue::I64(v) => v as f64,
            ScalarValue::U64(v) => v as f64,
            ScalarValue::F64(d) => d,
        };
        // To f32 rounding to odd (truncated, lowest bit set when inexact), which keeps the
        // rounding to f16 that follows exact.
        let f = d as f32;
        let mut bits = f.to_bits();
        if f as f64 != d && !d.is_nan() {
            if (f as f64).abs() > d.abs() {
                bits -= 1;
            }
            bits |= 1;
        }
        half::f16::from_f32(f32::from_bits(bits))
    }

    /// The zero of `ty` (`false` for `bool`).
    pub fn zero(ty: ScalarType) -> ScalarValue {
        ScalarValue::from_bits(ty, 0)
    }
}

impl PartialEq for ScalarValue {
    fn eq(&self, other: &Self) -> bool {
        self.ty() == other.ty() && self.to_bits() == other.to_bits()
    }
}

impl Eq for ScalarValue {}

impl std::hash::Hash for ScalarValue {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.ty().hash(state);
        self.to_bits().hash(state);
    }
}

impl fmt::Display for ScalarValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarValue::Bool(v) => write!(f, "{v}"),
            ScalarValue::I8(v) => write!(f, "{v}i8"),
            ScalarValue::U8(v) => write!(f, "{v}u8"),
            ScalarValue::I16(v) => write!(f, "{v}i16"),
            ScalarValue::U16(v) => write!(f, "{v}u16"),
            ScalarValue::I32(v) => write!(f, "{v}i32"),
            ScalarValue::U32(v) => write!(f, "{v}u32"),
            ScalarValue::I64(v) => write!(f, "{v}i64"),
            ScalarValue::U64(v) => write!(f, "{v}u64"),
            ScalarValue::F16(v) => write!(f, "{:?}f16", v.to_f32()),
            ScalarValue::F32(v) => write!(f, "{v:?}f32"),
            ScalarValue::F64(v) => write!(f, "{v:?}f64"),
        }
    }
}
