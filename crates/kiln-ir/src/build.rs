//! The typed builder. Inside [`Kernel::build`], values are [`Val<T>`] handles: Rust operators,
//! comparison methods, casts and math methods on them append IR to the kernel being built, so
//! Rust's type checker types the kernel. Misuse (a value from another kernel, `break` outside a
//! loop) is recorded and returned as an [`IrError`] by `build`; it never panics.

use crate::ir::*;
use crate::types::{ScalarType, ScalarValue, StructType, Type};
use crate::validate::{validate, IrError};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

/// A Rust type that has an IR type.
pub trait IrType: Copy + 'static {
    /// The IR type.
    fn ir_type() -> Type;
}

/// A Rust scalar type usable in kernels: `bool`, the integers, `f32`, `f64`.
pub trait Scalar: IrType + Send + Sync + PartialEq + std::fmt::Debug {
    /// The IR scalar type.
    const TYPE: ScalarType;
    /// The value as an IR constant.
    fn to_value(self) -> ScalarValue;
    /// The value from an IR constant's bits (see [`ScalarValue::to_bits`]).
    fn from_bits(bits: u64) -> Self;
}

/// Scalars with arithmetic: the integers and floats.
pub trait Numeric: Scalar + Arith {}
/// `f32` and `f64`.
pub trait Float: Numeric {}
/// The eight integer types.
pub trait Int: Numeric + Bits {
    /// The unsigned integer of the same width (itself for unsigned types).
    type Unsigned: Int;
}
/// Integers and `bool`: the types with bitwise operators.
pub trait Bits: Scalar {}
/// Types with element-wise arithmetic: numeric scalars and vectors of them.
pub trait Arith: IrType {}

macro_rules! scalar_impl {
    ($t:ty, $st:ident, $($marker:ident),*) => {
        impl IrType for $t {
            fn ir_type() -> Type { Type::Scalar(ScalarType::$st) }
        }
        impl Scalar for $t {
            const TYPE: ScalarType = ScalarType::$st;
            fn to_value(self) -> ScalarValue { ScalarValue::$st(self) }
            fn from_bits(bits: u64) -> Self {
                match ScalarValue::from_bits(ScalarType::$st, bits) { ScalarValue::$st(v) => v, _ => unreachable!() }
            }
        }
        $(impl $marker for $t {})*
    };
}
scalar_impl!(bool, Bool, Bits);
scalar_impl!(i8, I8, Numeric, Bits, Arith);
impl Int for i8 {
    type Unsigned = u8;
}
scalar_impl!(u8, U8, Numeric, Bits, Arith);
impl Int for u8 {
    type Unsigned = u8;
}
scalar_impl!(i16, I16, Numeric, Bits, Arith);
impl Int for i16 {
    type Unsigned = u16;
}
scalar_impl!(u16, U16, Numeric, Bits, Arith);
impl Int for u16 {
    type Unsigned = u16;
}
scalar_impl!(i32, I32, Numeric, Bits, Arith);
impl Int for i32 {
    type Unsigned = u32;
}
scalar_impl!(u32, U32, Numeric, Bits, Arith);
impl Int for u32 {
    type Unsigned = u32;
}
scalar_impl!(i64, I64, Numeric, Bits, Arith);
impl Int for i64 {
    type Unsigned = u64;
}
scalar_impl!(u64, U64, Numeric, Bits, Arith);
impl Int for u64 {
    type Unsigned = u64;
}
scalar_impl!(f32, F32, Numeric, Float, Arith);
scalar_impl!(f64, F64, Numeric, Float, Arith);

/// A vector of `N` scalars (2, 3 or 4), laid out as `[T; N]`.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Vector<T, const N: usize>(pub [T; N]);

impl<T: Scalar, const N: usize> IrType for Vector<T, N> {
    fn ir_type() -> Type {
        Type::Vector(T::TYPE, N as u8)
    }
}
impl<T: Numeric, const N: usize> Arith for Vector<T, N> {}

/// Implemented by plain `#[repr(C)]` structs usable as kernel values and buffer elements.
///
/// # Safety
/// `struct_type` must describe the Rust struct's exact layout (`#[repr(C)]`, same field types
/// in the same order) and the struct must have no padding bytes.
pub unsafe trait IrStruct: Copy + 'static {
    /// The struct type.
    fn struct_type() -> StructType;
}

/// A typed handle to an IR value of the kernel being built.
pub struct Val<T> {
    raw: Raw,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Val<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Val<T> {}

impl<T> std::fmt::Debug for Val<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Val(%{})", self.raw.h.0)
    }
}

/// An untyped IR value handle with its type, for generic code (device function arguments).
#[derive(Clone, Debug)]
pub struct AnyVal {
    raw: Raw,
    /// The value's IR type.
    pub ty: Type,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Raw {
    h: Handle,
    owner: u32,
}

const POISON: Raw = Raw {
    h: Handle(u32::MAX),
    owner: u32::MAX,
};

impl<T> Val<T> {
    fn from_raw(raw: Raw) -> Self {
        Val {
            raw,
            _t: PhantomData,
        }
    }

    /// The expression handle.
    pub fn handle(self) -> Handle {
        self.raw.h
    }
}

impl<T: IrType> Val<T> {
    /// Forgets the Rust type.
    pub fn erase(self) -> AnyVal {
        AnyVal {
            raw: self.raw,
            ty: T::ir_type(),
        }
    }
}

impl AnyVal {
    /// Gives the value a Rust type; records a build error if the IR type differs.
    pub fn typed<T: IrType>(&self) -> Val<T> {
        if self.ty != T::ir_type() {
            record(format!(
                "value of type {} used as {}",
                self.ty,
                T::ir_type()
            ));
            return Val::from_raw(POISON);
        }
        Val::from_raw(self.raw)
    }

    /// The expression handle.
    pub fn handle(&self) -> Handle {
        self.raw.h
    }
}

struct FnState {
    id: u32,
    /// The device function's name (empty for the kernel body).
    name: String,
    body: Body,
    blocks: Vec<Vec<Stmt>>,
    loops: u32,
    params: Vec<Param>,
    result: Option<Type>,
}

struct KernelState {
    id: u32,
    params: Vec<Param>,
    shared: Vec<SharedDecl>,
    functions: Vec<Function>,
    fns: Vec<FnState>,
    errors: Vec<String>,
    /// The user closure running ([`crate::constants::user_code`]) and how many literals it
    /// has emitted in the body so far.
    region: Option<(u32, u32)>,
    user_literals: Vec<(Handle, crate::constants::ConstantSlot)>,
}

thread_local! {
    static BUILDING: RefCell<Vec<KernelState>> = const { RefCell::new(Vec::new()) };
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

fn with_kernel<R>(f: impl FnOnce(&mut KernelState) -> R) -> Option<R> {
    BUILDING.with(|b| b.borrow_mut().last_mut().map(f))
}

fn record(msg: String) {
    with_kernel(|k| k.errors.push(msg));
}

fn new_fn(name: &str, params: Vec<Param>, result: Option<Type>) -> FnState {
    FnState {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        name: name.to_string(),
        body: Body::default(),
        blocks: vec![Vec::new()],
        loops: 0,
        params,
        result,
    }
}

/// Checks that every operand belongs to the function being built; records an error otherwise.
fn owned(k: &mut KernelState, deps: &[Raw]) -> bool {
    let id = k.fns.last().map(|f| f.id);
    if deps.contains(&POISON) {
        return false;
    }
    if deps.iter().any(|d| Some(d.owner) != id) {
        k.errors.push("a value built for another kernel or function (or outside any) was used here; pass it as a parameter instead".into());
        return false;
    }
    true
}

/// Appends an expression and its `Eval`; returns the handle, or poison when an operand is foreign.
fn push(expr: Expr, deps: &[Raw]) -> Raw {
    with_kernel(|k| {
        if !owned(k, deps) {
            return POISON;
        }
        let f = k
            .fns
            .last_mut()
            .expect("a kernel being built always has a function");
        let h = Handle(f.body.exprs.len() as u32);
        f.body.exprs.push(expr);
        f.blocks.last_mut().expect("open block").push(Stmt::Eval(h));
        Raw { h, owner: f.id }
    })
    .unwrap_or(POISON)
}

fn push_stmt(stmt: Stmt, deps: &[Raw]) {
    with_kernel(|k| {
        if owned(k, deps) {
            let f = k.fns.last_mut().expect("function");
            f.blocks.last_mut().expect("open block").push(stmt);
        }
    });
}

/// Runs `f` with a fresh open block and returns the statements it appended.
fn nested(f: impl FnOnce()) -> Block {
    with_kernel(|k| k.fns.last_mut().expect("function").blocks.push(Vec::new()));
    f();
    with_kernel(|k| {
        Block(
            k.fns
                .last_mut()
                .expect("function")
                .blocks
                .pop()
                .unwrap_or_default(),
        )
    })
    .unwrap_or_default()
}

fn typed<T>(expr: Expr, deps: &[Raw]) -> Val<T> {
    Val::from_raw(push(expr, deps))
}

/// Records `message` as the error of the kernel being built (for generated code that finds a
/// mistake only while building); [`Kernel::build`] then returns it.
pub fn record_error(message: String) {
    record(message);
}

/// Records `message` like [`record_error`] and returns a placeholder value.
pub fn build_error<T>(message: String) -> Val<T> {
    record(message);
    Val::from_raw(POISON)
}

/// A constant.
pub fn lit<T: Scalar>(v: T) -> Val<T> {
    Val::from_raw(literal(v.to_value()))
}

/// Appends the constant `v`; in the body, inside user code, its slot is recorded
/// ([`Kernel::user_literals`]).
fn literal(v: ScalarValue) -> Raw {
    let raw = push(Expr::Literal(v), &[]);
    if raw != POISON {
        with_kernel(|k| {
            if let (1, Some((closure, index))) = (k.fns.len(), &mut k.region) {
                let slot = crate::constants::ConstantSlot {
                    closure: *closure,
                    index: *index,
                };
                *index += 1;
                k.user_literals.push((raw.h, slot));
            }
        });
    }
    raw
}

/// Makes `region` the user-code region of the kernel being built and returns the one it
/// replaces; `None` when no kernel is being built.
pub(crate) fn swap_region(region: Option<(u32, u32)>) -> Option<Option<(u32, u32)>> {
    with_kernel(|k| std::mem::replace(&mut k.region, region))
}

/// Values convertible to `Val<T>`: a `Val<T>` or a plain `T` (which becomes a constant).
pub trait IntoVal<T> {
    /// The value as a handle.
    fn into_val(self) -> Val<T>;
}
impl<T> IntoVal<T> for Val<T> {
    fn into_val(self) -> Val<T> {
        self
    }
}
impl<T: Scalar> IntoVal<T> for T {
    fn into_val(self) -> Val<T> {
        lit(self)
    }
}

fn binary<U>(op: BinaryOp, a: Raw, b: Raw) -> Val<U> {
    typed(
        Expr::Binary {
            op,
            lhs: a.h,
            rhs: b.h,
        },
        &[a, b],
    )
}

macro_rules! arith_op {
    ($tr:ident, $m:ident, $op:ident, $bound:ident) => {
        impl<T: $bound> std::ops::$tr<Val<T>> for Val<T> {
            type Output = Val<T>;
            fn $m(self, rhs: Val<T>) -> Val<T> {
                binary::<T>(BinaryOp::$op, self.raw, rhs.raw)
            }
        }
        impl<T: $bound + Scalar> std::ops::$tr<T> for Val<T> {
            type Output = Val<T>;
            fn $m(self, rhs: T) -> Val<T> {
                binary::<T>(BinaryOp::$op, self.raw, lit(rhs).raw)
            }
        }
    };
}
arith_op!(Add, add, Add, Arith);
arith_op!(Sub, sub, Sub, Arith);
arith_op!(Mul, mul, Mul, Arith);
arith_op!(Div, div, Div, Arith);
arith_op!(Rem, rem, Rem, Arith);
arith_op!(BitAnd, bitand, And, Bits);
arith_op!(BitOr, bitor, Or, Bits);
arith_op!(BitXor, bitxor, Xor, Bits);
arith_op!(Shl, shl, Shl, Int);
arith_op!(Shr, shr, Shr, Int);

macro_rules! lhs_scalar_ops {
    ($($t:ty),*) => {$(
        impl std::ops::Add<Val<$t>> for $t { type Output = Val<$t>; fn add(self, r: Val<$t>) -> Val<$t> { lit(self) + r } }
        impl std::ops::Sub<Val<$t>> for $t { type Output = Val<$t>; fn sub(self, r: Val<$t>) -> Val<$t> { lit(self) - r } }
        impl std::ops::Mul<Val<$t>> for $t { type Output = Val<$t>; fn mul(self, r: Val<$t>) -> Val<$t> { lit(self) * r } }
        impl std::ops::Div<Val<$t>> for $t { type Output = Val<$t>; fn div(self, r: Val<$t>) -> Val<$t> { lit(self) / r } }
        impl std::ops::Rem<Val<$t>> for $t { type Output = Val<$t>; fn rem(self, r: Val<$t>) -> Val<$t> { lit(self) % r } }
    )*};
}
lhs_scalar_ops!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

macro_rules! lhs_bit_ops {
    ($($t:ty),*) => {$(
        impl std::ops::BitAnd<Val<$t>> for $t { type Output = Val<$t>; fn bitand(self, r: Val<$t>) -> Val<$t> { lit(self) & r } }
        impl std::ops::BitOr<Val<$t>> for $t { type Output = Val<$t>; fn bitor(self, r: Val<$t>) -> Val<$t> { lit(self) | r } }
        impl std::ops::BitXor<Val<$t>> for $t { type Output = Val<$t>; fn bitxor(self, r: Val<$t>) -> Val<$t> { lit(self) ^ r } }
        impl std::ops::Shl<Val<$t>> for $t { type Output = Val<$t>; fn shl(self, r: Val<$t>) -> Val<$t> { lit(self) << r } }
        impl std::ops::Shr<Val<$t>> for $t { type Output = Val<$t>; fn shr(self, r: Val<$t>) -> Val<$t> { lit(self) >> r } }
    )*};
}
lhs_bit_ops!(i8, u8, i16, u16, i32, u32, i64, u64);

impl<T: Arith> std::ops::Neg for Val<T> {
    type Output = Val<T>;
    fn neg(self) -> Val<T> {
        typed(
            Expr::Unary {
                op: UnaryOp::Neg,
                arg: self.raw.h,
            },
            &[self.raw],
        )
    }
}

impl<T: Bits> std::ops::Not for Val<T> {
    type Output = Val<T>;
    fn not(self) -> Val<T> {
        typed(
            Expr::Unary {
                op: UnaryOp::Not,
                arg: self.raw.h,
            },
            &[self.raw],
        )
    }
}

impl<T: Scalar> Val<T> {
    fn cmp(self, op: BinaryOp, rhs: impl IntoVal<T>) -> Val<bool> {
        let r = rhs.into_val();
        binary::<bool>(op, self.raw, r.raw)
    }
    /// `self > rhs`
    pub fn gt(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Gt, rhs)
    }
    /// `self >= rhs`
    pub fn ge(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Ge, rhs)
    }
    /// `self < rhs`
    pub fn lt(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Lt, rhs)
    }
    /// `self <= rhs`
    pub fn le(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Le, rhs)
    }
    /// `self == rhs`
    pub fn eq(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Eq, rhs)
    }
    /// `self != rhs`
    pub fn ne(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Ne, rhs)
    }

    /// Numeric conversion with the IR cast rules (saturating float-to-int, NaN to 0).
    pub fn cast<U: Scalar>(self) -> Val<U> {
        typed(
            Expr::Cast {
                arg: self.raw.h,
                to: U::TYPE,
            },
            &[self.raw],
        )
    }

    /// Reinterprets the bits as `U` (same size, no `bool`).
    pub fn bitcast<U: Scalar>(self) -> Val<U> {
        typed(
            Expr::Bitcast {
                arg: self.raw.h,
                to: U::TYPE,
            },
            &[self.raw],
        )
    }
}

impl Val<bool> {
    /// Logical and (both sides are computed).
    pub fn and(self, rhs: impl IntoVal<bool>) -> Val<bool> {
        self & rhs.into_val()
    }
    /// Logical or (both sides are computed).
    pub fn or(self, rhs: impl IntoVal<bool>) -> Val<bool> {
        self | rhs.into_val()
    }
    /// Logical not (the same as `!self`, spelled as a method for query chains).
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Val<bool> {
        !self
    }
}

/// `if cond { a } else { b }` on values (both are computed).
pub fn select<T: IrType>(
    cond: impl IntoVal<bool>,
    a: impl IntoVal<T>,
    b: impl IntoVal<T>,
) -> Val<T> {
    let (c, a, b) = (cond.into_val(), a.into_val(), b.into_val());
    typed(
        Expr::Select {
            cond: c.raw.h,
            accept: a.raw.h,
            reject: b.raw.h,
        },
        &[c.raw, a.raw, b.raw],
    )
}

fn math<T>(fun: MathFn, args: &[Raw]) -> Val<T> {
    typed(
        Expr::Math {
            fun,
            args: args.iter().map(|r| r.h).collect(),
        },
        args,
    )
}

macro_rules! unary_math {
    ($($m:ident => $f:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        pub fn $m(self) -> Val<T> { math(MathFn::$f, &[self.raw]) }
    )*};
}

impl<T: Float> Val<T> {
    unary_math! {
        sin => Sin, "sine";
        cos => Cos, "cosine";
        tan => Tan, "tangent";
        asin => Asin, "arcsine";
        acos => Acos, "arccosine";
        atan => Atan, "arctangent";
        sinh => Sinh, "hyperbolic sine";
        cosh => Cosh, "hyperbolic cosine";
        tanh => Tanh, "hyperbolic tangent";
        exp => Exp, "e^self";
        exp2 => Exp2, "2^self";
        ln => Log, "natural logarithm";
        log2 => Log2, "base-2 logarithm";
        log10 => Log10, "base-10 logarithm";
        sqrt => Sqrt, "square root";
        rsqrt => Rsqrt, "1 / sqrt(self)";
        floor => Floor, "round toward -inf";
        ceil => Ceil, "round toward +inf";
        round => Round, "round half away from zero";
        trunc => Trunc, "round toward zero";
        fract => Fract, "self - trunc(self)";
    }
    /// `atan2(self, x)`
    pub fn atan2(self, x: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Atan2, &[self.raw, x.into_val().raw])
    }
    /// `self ^ e`
    pub fn powf(self, e: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Pow, &[self.raw, e.into_val().raw])
    }
    /// `self * a + b` with one rounding.
    pub fn mul_add(self, a: impl IntoVal<T>, b: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Fma, &[self.raw, a.into_val().raw, b.into_val().raw])
    }
    /// Magnitude of `self` with the sign of `sign`.
    pub fn copysign(self, sign: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Copysign, &[self.raw, sign.into_val().raw])
    }
    /// True if NaN.
    pub fn is_nan(self) -> Val<bool> {
        math(MathFn::IsNan, &[self.raw])
    }
    /// True if +inf or -inf.
    pub fn is_infinite(self) -> Val<bool> {
        math(MathFn::IsInf, &[self.raw])
    }
}

impl<T: Int> Val<T> {
    /// `self + rhs`, which wraps on overflow as every kernel `+` does; named for Rust code
    /// that says so.
    pub fn wrapping_add(self, rhs: impl IntoVal<T>) -> Val<T> {
        self + rhs.into_val()
    }
    /// `self - rhs`, wrapping (see [`Val::wrapping_add`]).
    pub fn wrapping_sub(self, rhs: impl IntoVal<T>) -> Val<T> {
        self - rhs.into_val()
    }
    /// `self * rhs`, wrapping (see [`Val::wrapping_add`]).
    pub fn wrapping_mul(self, rhs: impl IntoVal<T>) -> Val<T> {
        self * rhs.into_val()
    }
}

impl<T: Numeric> Val<T> {
    /// Absolute value (`abs(MIN) = MIN` on integers).
    pub fn abs(self) -> Val<T> {
        math(MathFn::Abs, &[self.raw])
    }
    /// -1, 0 or 1; zeros and NaN are returned unchanged.
    pub fn sign(self) -> Val<T> {
        math(MathFn::Sign, &[self.raw])
    }
    /// Minimum; with one NaN operand the other is returned.
    pub fn min(self, rhs: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Min, &[self.raw, rhs.into_val().raw])
    }
    /// Maximum; with one NaN operand the other is returned.
    pub fn max(self, rhs: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Max, &[self.raw, rhs.into_val().raw])
    }
    /// `min(max(self, lo), hi)`.
    pub fn clamp(self, lo: impl IntoVal<T>, hi: impl IntoVal<T>) -> Val<T> {
        math(
            MathFn::Clamp,
            &[self.raw, lo.into_val().raw, hi.into_val().raw],
        )
    }
}

impl<T: Scalar, const N: usize> Val<Vector<T, N>> {
    /// Component `i` (0-based); a build error if `i >= N`.
    pub fn at(self, i: u32) -> Val<T> {
        typed(
            Expr::Extract {
                base: self.raw.h,
                index: i,
            },
            &[self.raw],
        )
    }
}

/// Builds a vector from its components.
pub fn vector<T: Scalar, const N: usize>(parts: [Val<T>; N]) -> Val<Vector<T, N>> {
    let raws: Vec<Raw> = parts.iter().map(|p| p.raw).collect();
    typed(
        Expr::Compose {
            ty: Type::Vector(T::TYPE, N as u8),
            parts: raws.iter().map(|r| r.h).collect(),
        },
        &raws,
    )
}

impl<S: IrStruct> IrType for S {
    fn ir_type() -> Type {
        Type::Struct(std::sync::Arc::new(S::struct_type()))
    }
}

impl<S: IrStruct> Val<S> {
    /// Field `index` of the struct, as type `F` (a build error if the field's type differs).
    pub fn field<F: IrType>(self, index: u32) -> Val<F> {
        let v: Val<F> = typed(
            Expr::Extract {
                base: self.raw.h,
                index,
            },
            &[self.raw],
        );
        let st = S::struct_type();
        match st.fields.get(index as usize) {
            Some(f) if f.ty == F::ir_type() => {}
            Some(f) => record(format!(
                "field `{}` of `{}` is {}, read as {}",
                f.name,
                st.name,
                f.ty,
                F::ir_type()
            )),
            None => record(format!("`{}` has no field {index}", st.name)),
        }
        v
    }
}

/// Builds a struct value from its fields.
pub fn compose<S: IrStruct>(fields: &[AnyVal]) -> Val<S> {
    let raws: Vec<Raw> = fields.iter().map(|f| f.raw).collect();
    typed(
        Expr::Compose {
            ty: S::ir_type(),
            parts: raws.iter().map(|r| r.h).collect(),
        },
        &raws,
    )
}

/// A mutable local variable (zero-initialized, then set to its initial value).
pub struct Var<T> {
    local: LocalId,
    owner: u32,
    _t: PhantomData<fn() -> T>,
}
impl<T> Clone for Var<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Var<T> {}

fn new_local(name: &str, ty: Type) -> (LocalId, u32) {
    with_kernel(|k| {
        let f = k.fns.last_mut().expect("function");
        let id = LocalId(f.body.locals.len() as u32);
        let name = if crate::validate::is_identifier(name) {
            name.to_string()
        } else {
            format!("v{}", id.0)
        };
        f.body.locals.push(LocalDecl { name, ty });
        (id, f.id)
    })
    .unwrap_or((LocalId(u32::MAX), u32::MAX))
}

impl<T: IrType> Var<T> {
    /// A new local named `name` holding `init`.
    pub fn new(name: &str, init: impl IntoVal<T>) -> Var<T> {
        let init = init.into_val();
        let (local, owner) = new_local(name, T::ir_type());
        let v = Var {
            local,
            owner,
            _t: PhantomData,
        };
        v.set(init);
        v
    }
    /// The current value.
    pub fn get(self) -> Val<T> {
        typed(
            Expr::LocalGet(self.local),
            &[Raw {
                h: Handle(0),
                owner: self.owner,
            }],
        )
    }
    /// Assigns a new value.
    pub fn set(self, v: impl IntoVal<T>) {
        let v = v.into_val();
        push_stmt(
            Stmt::LocalSet {
                local: self.local,
                value: v.raw.h,
            },
            &[
                v.raw,
                Raw {
                    h: Handle(0),
                    owner: self.owner,
                },
            ],
        );
    }
}

/// A mutable local whose type is known only at run time (for generated code).
#[derive(Clone, Debug)]
pub struct AnyVar {
    local: LocalId,
    owner: u32,
    ty: Type,
}

impl AnyVar {
    /// A new local named `name` holding `init`.
    pub fn new(name: &str, init: &AnyVal) -> AnyVar {
        let (local, owner) = new_local(name, init.ty.clone());
        let v = AnyVar {
            local,
            owner,
            ty: init.ty.clone(),
        };
        v.set(init);
        v
    }
    /// The current value.
    pub fn get(&self) -> AnyVal {
        AnyVal {
            raw: push(
                Expr::LocalGet(self.local),
                &[Raw {
                    h: Handle(0),
                    owner: self.owner,
                }],
            ),
            ty: self.ty.clone(),
        }
    }
    /// Assigns a new value.
    pub fn set(&self, v: &AnyVal) {
        push_stmt(
            Stmt::LocalSet {
                local: self.local,
                value: v.raw.h,
            },
            &[
                v.raw,
                Raw {
                    h: Handle(0),
                    owner: self.owner,
                },
            ],
        );
    }
}

/// A constant of a type known only at run time.
pub fn lit_value(v: ScalarValue) -> AnyVal {
    AnyVal {
        raw: literal(v),
        ty: Type::Scalar(v.ty()),
    }
}

/// A fixed-size local array of `T` (zero-initialized).
pub struct LocalArray<T> {
    local: LocalId,
    owner: u32,
    _t: PhantomData<fn() -> T>,
}
impl<T> Clone for LocalArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for LocalArray<T> {}

impl<T: IrType> LocalArray<T> {
    /// A new zeroed array of `len` elements.
    pub fn new(name: &str, len: u32) -> LocalArray<T> {
        let (local, owner) = new_local(name, Type::Array(Box::new(T::ir_type()), len));
        LocalArray {
            local,
            owner,
            _t: PhantomData,
        }
    }
    /// Element `i`; out of bounds reads zero.
    pub fn get(self, i: impl IntoVal<u32>) -> Val<T> {
        Val::from_raw(array_get(self.local, self.owner, i.into_val()))
    }
    /// Sets element `i`; out of bounds is skipped.
    pub fn set(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) {
        array_set(self.local, self.owner, i.into_val(), v.into_val().raw);
    }
}

/// A fixed-size local array (zero-initialized) whose element type is known only at run time
/// (for generated code).
#[derive(Clone, Debug)]
pub struct AnyArray {
    local: LocalId,
    owner: u32,
    elem: Type,
}

impl AnyArray {
    /// A new zeroed array of `len` elements of type `elem`.
    pub fn new(name: &str, elem: Type, len: u32) -> AnyArray {
        let (local, owner) = new_local(name, Type::Array(Box::new(elem.clone()), len));
        AnyArray { local, owner, elem }
    }
    /// Element `i`; out of bounds reads zero.
    pub fn get(&self, i: Val<u32>) -> AnyVal {
        AnyVal {
            raw: array_get(self.local, self.owner, i),
            ty: self.elem.clone(),
        }
    }
    /// Sets element `i` to `v` (of the element type); out of bounds is skipped.
    pub fn set(&self, i: Val<u32>, v: &AnyVal) {
        array_set(self.local, self.owner, i, v.raw);
    }
}

/// Element `i` of array local `local` (declared by scope `owner`).
fn array_get(local: LocalId, owner: u32, i: Val<u32>) -> Raw {
    push(
        Expr::LocalIndex {
            local,
            index: i.raw.h,
        },
        &[
            i.raw,
            Raw {
                h: Handle(0),
                owner,
            },
        ],
    )
}

/// Sets element `i` of array local `local` (declared by scope `owner`) to `v`.
fn array_set(local: LocalId, owner: u32, i: Val<u32>, v: Raw) {
    push_stmt(
        Stmt::LocalIndexSet {
            local,
            index: i.raw.h,
            value: v.h,
        },
        &[
            i.raw,
            v,
            Raw {
                h: Handle(0),
                owner,
            },
        ],
    );
}

/// A buffer parameter or a shared array of `T` elements.
pub struct Mem<T> {
    memory: Memory,
    kernel: u32,
    _t: PhantomData<fn() -> T>,
}
impl<T> Clone for Mem<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Mem<T> {}

fn in_kernel(kernel: u32) -> Raw {
    let ok = with_kernel(|k| k.id == kernel && k.fns.len() == 1).unwrap_or(false);
    if ok {
        Raw {
            h: Handle(0),
            owner: with_kernel(|k| k.fns[0].id).unwrap_or(u32::MAX),
        }
    } else {
        record("a buffer or shared array was used outside the kernel body that declared it".into());
        POISON
    }
}

impl<T: IrType> Mem<T> {
    /// Which memory this is.
    pub fn memory(self) -> Memory {
        self.memory
    }
    /// Element `i`; out of bounds reads zero.
    pub fn load(self, i: impl IntoVal<u32>) -> Val<T> {
        let i = i.into_val();
        typed(
            Expr::Load {
                memory: self.memory,
                index: i.raw.h,
            },
            &[i.raw, in_kernel(self.kernel)],
        )
    }
    /// Writes element `i`; out of bounds is skipped.
    pub fn store(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) {
        let (i, v) = (i.into_val(), v.into_val());
        push_stmt(
            Stmt::Store {
                memory: self.memory,
                index: i.raw.h,
                value: v.raw.h,
            },
            &[i.raw, v.raw, in_kernel(self.kernel)],
        );
    }
    /// Number of elements.
    pub fn len(self) -> Val<u32> {
        typed(Expr::Len(self.memory), &[in_kernel(self.kernel)])
    }
    fn atomic(self, op: AtomicOp, i: Val<u32>, v: Val<T>, compare: Option<Val<T>>) -> Val<T> {
        let mut deps = vec![i.raw, v.raw, in_kernel(self.kernel)];
        deps.extend(compare.map(|c| c.raw));
        typed(
            Expr::Atomic {
                memory: self.memory,
                index: i.raw.h,
                op,
                value: v.raw.h,
                compare: compare.map(|c| c.raw.h),
            },
            &deps,
        )
    }
    /// Atomic add; returns the old value.
    pub fn atomic_add(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Add, i.into_val(), v.into_val(), None)
    }
    /// Atomic subtract; returns the old value.
    pub fn atomic_sub(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Sub, i.into_val(), v.into_val(), None)
    }
    /// Atomic minimum; returns the old value.
    pub fn atomic_min(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Min, i.into_val(), v.into_val(), None)
    }
    /// Atomic maximum; returns the old value.
    pub fn atomic_max(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Max, i.into_val(), v.into_val(), None)
    }
    /// Atomic bitwise and; returns the old value.
    pub fn atomic_and(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::And, i.into_val(), v.into_val(), None)
    }
    /// Atomic bitwise or; returns the old value.
    pub fn atomic_or(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Or, i.into_val(), v.into_val(), None)
    }
    /// Atomic bitwise xor; returns the old value.
    pub fn atomic_xor(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Xor, i.into_val(), v.into_val(), None)
    }
    /// Atomic exchange; returns the old value.
    pub fn atomic_exchange(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Exchange, i.into_val(), v.into_val(), None)
    }
    /// Stores `v` if the element equals `compare`; returns the old value.
    pub fn atomic_compare_exchange(
        self,
        i: impl IntoVal<u32>,
        compare: impl IntoVal<T>,
        v: impl IntoVal<T>,
    ) -> Val<T> {
        let c = compare.into_val();
        self.atomic(
            AtomicOp::CompareExchange,
            i.into_val(),
            v.into_val(),
            Some(c),
        )
    }
}

/// Declarations of the kernel being built; handed to the closure of [`Kernel::build`].
pub struct KernelScope {
    id: u32,
}

/// Declares a parameter of the kernel being built and returns its index.
fn add_param(name: &str, kind: ParamKind) -> u32 {
    with_kernel(|k| {
        k.params.push(Param {
            name: name.to_string(),
            kind,
        });
        k.params.len() as u32 - 1
    })
    .unwrap_or(u32::MAX)
}

impl KernelScope {
    /// Declares a buffer parameter of `T` elements.
    pub fn buffer<T: IrType>(&self, name: &str, access: Access) -> Mem<T> {
        let i = add_param(
            name,
            ParamKind::Buffer {
                elem: T::ir_type(),
                access,
            },
        );
        Mem {
            memory: Memory::Buffer(i),
            kernel: self.id,
            _t: PhantomData,
        }
    }

    /// Declares a buffer parameter with an element type known only at run time.
    pub fn buffer_dyn(&self, name: &str, elem: Type, access: Access) -> Memory {
        Memory::Buffer(add_param(name, ParamKind::Buffer { elem, access }))
    }

    /// Declares a shared array with an element type known only at run time.
    pub fn shared_dyn(&self, name: &str, elem: Type, len: SharedLen) -> Memory {
        let i = with_kernel(|k| {
            k.shared.push(SharedDecl {
                name: name.to_string(),
                elem,
                len,
            });
            k.shared.len() as u32 - 1
        })
        .unwrap_or(u32::MAX);
        Memory::Shared(i)
    }

    /// Declares a value parameter and returns its value.
    pub fn value<T: IrType>(&self, name: &str) -> Val<T> {
        let i = add_param(name, ParamKind::Value(T::ir_type()));
        typed(Expr::Param(i), &[])
    }

    /// Declares a shared array of `len` elements of `T`.
    pub fn shared<T: IrType>(&self, name: &str, len: SharedLen) -> Mem<T> {
        let i = with_kernel(|k| {
            k.shared.push(SharedDecl {
                name: name.to_string(),
                elem: T::ir_type(),
                len,
            });
            k.shared.len() as u32 - 1
        })
        .unwrap_or(u32::MAX);
        Mem {
            memory: Memory::Shared(i),
            kernel: self.id,
            _t: PhantomData,
        }
    }
}

/// Loads element `index` of any memory as an untyped value of type `ty` (for generated code).
pub fn load_dyn(memory: Memory, index: Val<u32>, ty: Type) -> AnyVal {
    AnyVal {
        raw: push(
            Expr::Load {
                memory,
                index: index.raw.h,
            },
            &[index.raw],
        ),
        ty,
    }
}

/// The number of elements of any memory (for generated code).
pub fn len_dyn(memory: Memory) -> Val<u32> {
    typed(Expr::Len(memory), &[])
}

/// Stores an untyped value into element `index` of any memory (for generated code).
pub fn store_dyn(memory: Memory, index: Val<u32>, value: &AnyVal) {
    push_stmt(
        Stmt::Store {
            memory,
            index: index.raw.h,
            value: value.raw.h,
        },
        &[index.raw, value.raw],
    );
}

/// Builds an untyped expression from untyped operands (for generated code such as the query
/// planner). The result type is checked by the validator.
pub fn expr_dyn(expr: Expr, operands: &[&AnyVal], ty: Type) -> AnyVal {
    let raws: Vec<Raw> = operands.iter().map(|o| o.raw).collect();
    AnyVal {
        raw: push(expr, &raws),
        ty,
    }
}

impl Kernel {
    /// Builds a kernel: `body` declares parameters through the [`KernelScope`] and appends
    /// statements through `Val` operations and the control-flow functions of this module.
    /// Returns the validated kernel, or the first build or validation error.
    pub fn build(name: &str, body: impl FnOnce(&KernelScope)) -> Result<Kernel, IrError> {
        let kernel = Kernel::build_unvalidated(name, body)?;
        validate(&kernel)?;
        Ok(kernel)
    }

    /// [`Kernel::build`] without [`validate`]: for code that builds the same kernel again on
    /// every call and validates it only when it is new (kiln's `Context::compile` validates a
    /// kernel its cache does not hold; validation was a quarter of a cached query's time).
    /// Returns the kernel, or the first error recorded while building it.
    pub fn build_unvalidated(
        name: &str,
        body: impl FnOnce(&KernelScope),
    ) -> Result<Kernel, IrError> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        BUILDING.with(|b| {
            b.borrow_mut().push(KernelState {
                id,
                params: Vec::new(),
                shared: Vec::new(),
                functions: Vec::new(),
                fns: vec![new_fn("", Vec::new(), None)],
                errors: Vec::new(),
                region: None,
                user_literals: Vec::new(),
            })
        });
        body(&KernelScope { id });
        let state = BUILDING
            .with(|b| b.borrow_mut().pop())
            .expect("pushed above");
        let mut f = state.fns.into_iter().next().expect("kernel function");
        f.body.block = Block(f.blocks.pop().unwrap_or_default());
        let kernel = Kernel {
            name: name.to_string(),
            params: state.params,
            shared: state.shared,
            functions: state.functions,
            body: f.body,
            user_literals: state.user_literals,
        };
        if let Some(e) = state.errors.into_iter().next() {
            return Err(IrError {
                kernel: kernel.name,
                function: None,
                location: String::new(),
                message: e,
            });
        }
        Ok(kernel)
    }
}

/// `if cond { then() }`.
pub fn if_then(cond: impl IntoVal<bool>, then: impl FnOnce()) {
    if_else(cond, then, || {});
}

/// `if cond { then() } else { otherwise() }`.
pub fn if_else(cond: impl IntoVal<bool>, then: impl FnOnce(), otherwise: impl FnOnce()) {
    let c = cond.into_val();
    let accept = nested(then);
    let reject = nested(otherwise);
    push_stmt(
        Stmt::If {
            cond: c.raw.h,
            accept,
            reject,
        },
        &[c.raw],
    );
}

/// `loop { body() } continuing { continuing() }`, the IR's loop: `continue_` in `body` goes
/// to `continuing`, which ends each pass; leave it with [`break_`]. [`for_range`] builds its
/// loops this way, with the step in `continuing`.
pub fn loop_with(body: impl FnOnce(), continuing: impl FnOnce()) {
    with_kernel(|k| k.fns.last_mut().expect("function").loops += 1);
    let body = nested(body);
    let continuing = nested(continuing);
    with_kernel(|k| k.fns.last_mut().expect("function").loops -= 1);
    push_stmt(Stmt::Loop { body, continuing }, &[]);
}

/// `loop { body() }`; leave it with [`break_`].
pub fn loop_(body: impl FnOnce()) {
    loop_with(body, || {});
}

/// `while cond() { body() }`.
pub fn while_(cond: impl FnOnce() -> Val<bool>, body: impl FnOnce()) {
    loop_(|| {
        let c = cond();
        if_then(!c, break_);
        body();
    });
}

/// `for i in (start..end).step_by(step) { body(i) }` over integers, for a positive `step`;
/// `continue_` goes to the next `i`. It runs exactly Rust's iterations for every start, end
/// and step, the type's extremes included: the counter never wraps past `end` (a step of 0,
/// which Rust rejects, runs a bounded number of passes).
pub fn for_range_step<T: Int>(
    start: impl IntoVal<T>,
    end: impl IntoVal<T>,
    step: impl IntoVal<T>,
    body: impl FnOnce(Val<T>),
) {
    range_loop(
        start.into_val(),
        end.into_val(),
        step.into_val(),
        false,
        body,
    );
}

/// `for i in (start..=end).step_by(step) { body(i) }` over integers (see [`for_range_step`]);
/// `end` may be the type's maximum.
pub fn for_range_inclusive_step<T: Int>(
    start: impl IntoVal<T>,
    end: impl IntoVal<T>,
    step: impl IntoVal<T>,
    body: impl FnOnce(Val<T>),
) {
    range_loop(
        start.into_val(),
        end.into_val(),
        step.into_val(),
        true,
        body,
    );
}

/// `for i in start..end { body(i) }` over integers.
pub fn for_range<T: Int>(start: impl IntoVal<T>, end: impl IntoVal<T>, body: impl FnOnce(Val<T>)) {
    for_range_step(start, end, lit(T::from_bits(1)), body);
}

/// The loop of [`for_range_step`] and [`for_range_inclusive_step`].
///
/// Where adding `step` to any value below the (exclusive) end cannot wrap, which constants
/// show for the common `a..b` and `a..=15`, the loop has the plain shape backends recognize
/// as counted: `if i >= end { break }` first, `i += step` last. Other half-open ranges count
/// their trips first, `(end - start - 1) / step + 1` in the unsigned type of the same width
/// (exact for every start below the end), and run a second counter up to it. Inclusive
/// ranges whose end may be the type's maximum, where the trip count itself may not fit,
/// decide in the continuing block whether another pass follows before the value can wrap.
fn range_loop<T: Int>(
    start: Val<T>,
    end: Val<T>,
    step: Val<T>,
    inclusive: bool,
    body: impl FnOnce(Val<T>),
) {
    let max = int_max(T::TYPE);
    let (end_c, step_c) = (constant_int(&end), constant_int(&step));
    let plain_end = match (inclusive, end_c, step_c) {
        (false, _, Some(1)) => Some(end),
        (false, Some(e), Some(s)) if s > 0 && e + s - 1 <= max => Some(end),
        (true, Some(e), Some(s)) if s > 0 && e + s <= max => {
            Some(lit(T::from_bits((e + 1) as u64)))
        }
        _ => None,
    };
    let i = Var::new("i", start);
    if let Some(end) = plain_end {
        loop_with(
            || {
                let v = i.get();
                if_then(v.ge(end), break_);
                body(v);
            },
            || i.set(i.get() + step),
        );
        return;
    }
    if !inclusive {
        let unsigned = |v: Val<T>| v.bitcast::<T::Unsigned>();
        let (zero, one) = (
            lit(<T::Unsigned as Scalar>::from_bits(0)),
            lit(<T::Unsigned as Scalar>::from_bits(1)),
        );
        let span = unsigned(end) - unsigned(start) - one;
        let trips = select(start.lt(end), span / unsigned(step) + one, zero);
        let k = Var::new("k", zero);
        loop_with(
            || {
                if_then(k.get().ge(trips), break_);
                body(i.get());
            },
            || {
                i.set(i.get() + step);
                k.set(k.get() + one);
            },
        );
        return;
    }
    let go = Var::new("go", start.le(end));
    loop_with(
        || {
            if_then(!go.get(), break_);
            body(i.get());
        },
        || {
            let v = i.get();
            let next = v + step;
            go.set(next.gt(v) & next.le(end));
            i.set(next);
        },
    );
}

/// The integer `v` holds when it is a constant of the function being built.
fn constant_int<T: Scalar>(v: &Val<T>) -> Option<i128> {
    let c = with_kernel(|k| {
        let f = k.fns.last()?;
        match (v.raw.owner == f.id, f.body.exprs.get(v.raw.h.index())) {
            (true, Some(Expr::Literal(c))) => Some(*c),
            _ => None,
        }
    })
    .flatten()?;
    Some(match c {
        ScalarValue::I8(x) => x.into(),
        ScalarValue::U8(x) => x.into(),
        ScalarValue::I16(x) => x.into(),
        ScalarValue::U16(x) => x.into(),
        ScalarValue::I32(x) => x.into(),
        ScalarValue::U32(x) => x.into(),
        ScalarValue::I64(x) => x.into(),
        ScalarValue::U64(x) => x.into(),
        _ => return None,
    })
}

/// The greatest value of an integer type (0 for the others).
fn int_max(t: ScalarType) -> i128 {
    match t {
        ScalarType::I8 => i8::MAX.into(),
        ScalarType::U8 => u8::MAX.into(),
        ScalarType::I16 => i16::MAX.into(),
        ScalarType::U16 => u16::MAX.into(),
        ScalarType::I32 => i32::MAX.into(),
        ScalarType::U32 => u32::MAX.into(),
        ScalarType::I64 => i64::MAX.into(),
        ScalarType::U64 => u64::MAX.into(),
        _ => 0,
    }
}

fn jump(s: Stmt) {
    let ok = with_kernel(|k| k.fns.last().expect("function").loops > 0).unwrap_or(false);
    if ok {
        push_stmt(s, &[]);
    } else {
        record(format!("{s:?} outside a loop"));
    }
}

/// `break` out of the innermost loop.
pub fn break_() {
    jump(Stmt::Break);
}

/// `continue` with the innermost loop's next iteration.
pub fn continue_() {
    jump(Stmt::Continue);
}

/// `return` from a kernel or from a device function without a result.
pub fn return_() {
    push_stmt(Stmt::Return(None), &[]);
}

/// `return v` from a device function.
pub fn return_value<T>(v: Val<T>) {
    push_stmt(Stmt::Return(Some(v.raw.h)), &[v.raw]);
}

/// Group barrier: every work item of the group waits here; shared memory written before is
/// visible after.
pub fn barrier() {
    push_stmt(Stmt::Barrier(BarrierScope::Group), &[]);
}

/// Subgroup barrier.
pub fn subgroup_barrier() {
    push_stmt(Stmt::Barrier(BarrierScope::Subgroup), &[]);
}

/// The value of a launch builtin.
pub fn builtin(b: Builtin) -> Val<u32> {
    typed(Expr::Builtin(b), &[])
}

/// Work item index in the grid along `axis`.
pub fn global_id(axis: Axis) -> Val<u32> {
    builtin(Builtin::GlobalId(axis))
}
/// Work item index in its group along `axis`.
pub fn local_id(axis: Axis) -> Val<u32> {
    builtin(Builtin::LocalId(axis))
}
/// Group index along `axis`.
pub fn group_id(axis: Axis) -> Val<u32> {
    builtin(Builtin::GroupId(axis))
}
/// Work items per group along `axis`.
pub fn group_size(axis: Axis) -> Val<u32> {
    builtin(Builtin::GroupSize(axis))
}
/// Groups in the grid along `axis`.
pub fn num_groups(axis: Axis) -> Val<u32> {
    builtin(Builtin::NumGroups(axis))
}
/// Work items in the grid along `axis`.
pub fn global_size(axis: Axis) -> Val<u32> {
    builtin(Builtin::GlobalSize(axis))
}

fn subgroup<T>(op: SubgroupOp, arg: Raw, lane: Option<Raw>) -> Val<T> {
    let mut deps = vec![arg];
    deps.extend(lane);
    typed(
        Expr::Subgroup {
            op,
            arg: arg.h,
            lane: lane.map(|l| l.h),
        },
        &deps,
    )
}

/// Subgroup operations on a value.
impl<T: Scalar> Val<T> {
    /// Value of lane `lane`.
    pub fn shuffle(self, lane: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::Shuffle, self.raw, Some(lane.into_val().raw))
    }
    /// Value of lane `self_lane - delta` (own value when out of range).
    pub fn shuffle_up(self, delta: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::ShuffleUp, self.raw, Some(delta.into_val().raw))
    }
    /// Value of lane `self_lane + delta` (own value when out of range).
    pub fn shuffle_down(self, delta: impl IntoVal<u32>) -> Val<T> {
        subgroup(
            SubgroupOp::ShuffleDown,
            self.raw,
            Some(delta.into_val().raw),
        )
    }
    /// Value of lane `self_lane ^ mask` (own value when out of range).
    pub fn shuffle_xor(self, mask: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::ShuffleXor, self.raw, Some(mask.into_val().raw))
    }
    /// Value of lane `lane` for the whole subgroup.
    pub fn broadcast(self, lane: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::Broadcast, self.raw, Some(lane.into_val().raw))
    }
    /// Sum over the subgroup.
    pub fn subgroup_add(self) -> Val<T> {
        subgroup(SubgroupOp::ReduceAdd, self.raw, None)
    }
    /// Minimum over the subgroup.
    pub fn subgroup_min(self) -> Val<T> {
        subgroup(SubgroupOp::ReduceMin, self.raw, None)
    }
    /// Maximum over the subgroup.
    pub fn subgroup_max(self) -> Val<T> {
        subgroup(SubgroupOp::ReduceMax, self.raw, None)
    }
    /// Sum over lanes `0..=self_lane`.
    pub fn subgroup_inclusive_add(self) -> Val<T> {
        subgroup(SubgroupOp::InclusiveAdd, self.raw, None)
    }
    /// Sum over lanes `0..self_lane`.
    pub fn subgroup_exclusive_add(self) -> Val<T> {
        subgroup(SubgroupOp::ExclusiveAdd, self.raw, None)
    }
}

impl Val<bool> {
    /// Mask of the lanes (0..32) where this is true.
    pub fn ballot(self) -> Val<u32> {
        subgroup(SubgroupOp::Ballot, self.raw, None)
    }
    /// True if true on every lane of the subgroup.
    pub fn subgroup_all(self) -> Val<bool> {
        subgroup(SubgroupOp::All, self.raw, None)
    }
    /// True if true on some lane of the subgroup.
    pub fn subgroup_any(self) -> Val<bool> {
        subgroup(SubgroupOp::Any, self.raw, None)
    }
}

/// A device function of the kernel being built, returning `R`.
pub struct DeviceFn<R> {
    id: FunctionId,
    _r: PhantomData<fn() -> R>,
}

/// Defines a device function in the kernel being built. `params` name and type the arguments;
/// `body` receives them and returns the result. `noinline` keeps it a real function in
/// generated source. Reuses an identical earlier definition.
pub fn device_fn<R: IrType>(
    name: &str,
    params: &[(&str, Type)],
    noinline: bool,
    body: impl FnOnce(&[AnyVal]) -> Val<R>,
) -> DeviceFn<R> {
    define_fn(name, params, noinline, NativeNames::default(), body)
}

/// Defines an intrinsic: a device function that calls the backend function `native` names
/// in those target languages and runs `body` elsewhere (the validator checks the names).
pub fn intrinsic_fn<R: IrType>(
    name: &str,
    params: &[(&str, Type)],
    native: NativeNames,
    body: impl FnOnce(&[AnyVal]) -> Val<R>,
) -> DeviceFn<R> {
    define_fn(name, params, false, native, body)
}

fn define_fn<R: IrType>(
    name: &str,
    params: &[(&str, Type)],
    noinline: bool,
    native: NativeNames,
    body: impl FnOnce(&[AnyVal]) -> Val<R>,
) -> DeviceFn<R> {
    let params: Vec<Param> = params
        .iter()
        .map(|(n, t)| Param {
            name: n.to_string(),
            kind: ParamKind::Value(t.clone()),
        })
        .collect();
    // A device function whose definition is under way (same name and signature) is being
    // called from its own body: building it again would never end.
    let result_ty = Some(R::ir_type());
    let recursive = with_kernel(|k| {
        k.fns
            .iter()
            .any(|f| f.name == name && f.params == params && f.result == result_ty)
    })
    .unwrap_or(false);
    if recursive {
        record(format!(
            "device function `{name}` calls itself; kernels have no call stack for recursion, \
             so rewrite it as a loop"
        ));
        return DeviceFn {
            id: FunctionId(u32::MAX),
            _r: PhantomData,
        };
    }
    with_kernel(|k| k.fns.push(new_fn(name, params.clone(), result_ty.clone())));
    let args: Vec<AnyVal> = params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let ParamKind::Value(ty) = &p.kind else {
                unreachable!("built as values above")
            };
            AnyVal {
                raw: push(Expr::Param(i as u32), &[]),
                ty: ty.clone(),
            }
        })
        .collect();
    let result = body(&args);
    push_stmt(Stmt::Return(Some(result.raw.h)), &[result.raw]);
    let id = with_kernel(|k| {
        let mut f = k.fns.pop().expect("pushed above");
        f.body.block = Block(f.blocks.pop().unwrap_or_default());
        // Another function of the same name (a generic one instantiated for another type)
        // keeps its name; this one gets a numbered one.
        let mut fname = name.to_string();
        let mut n = 1;
        while k.functions.iter().any(|g| {
            g.name == fname
                && (g.params != f.params
                    || g.body != f.body
                    || g.result != f.result
                    || g.noinline != noinline
                    || g.native != native)
        }) {
            n += 1;
            fname = format!("{name}_{n}");
        }
        let func = Function {
            name: fname,
            params: f.params,
            result: f.result,
            body: f.body,
            noinline,
            native,
        };
        match k.functions.iter().position(|g| *g == func) {
            Some(i) => FunctionId(i as u32),
            None => {
                k.functions.push(func);
                FunctionId(k.functions.len() as u32 - 1)
            }
        }
    })
    .unwrap_or(FunctionId(u32::MAX));
    DeviceFn {
        id,
        _r: PhantomData,
    }
}

impl<R: IrType> DeviceFn<R> {
    /// Calls the function with untyped arguments (checked by the validator).
    pub fn call(&self, args: &[AnyVal]) -> Val<R> {
        let raws: Vec<Raw> = args.iter().map(|a| a.raw).collect();
        typed(
            Expr::Call {
                function: self.id,
                args: raws.iter().map(|r| r.h).collect(),
            },
            &raws,
        )
    }
}

/// Records that the statements built next come from `file` at `line` (generated code: the
/// kernel macros call it before each statement, so generated source points back to Rust).
pub fn source_line(file: &str, line: u32) {
    push_stmt(
        Stmt::Source(SourceLine {
            file: file.to_string(),
            line,
        }),
        &[],
    );
}

/// Flattened index of the work item inside its group.
pub fn local_index() -> Val<u32> {
    builtin(Builtin::LocalIndex)
}
