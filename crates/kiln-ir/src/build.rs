//! The typed builder. Inside [`Kernel::build`], values are [`Val<T>`] handles: Rust operators,
//! comparison methods, casts and math methods on them append IR to the kernel being built, so
//! Rust's type checker types the kernel. Misuse (a value from another kernel, `break` outside a
//! loop) is recorded and returned as an [`IrError`] by `build`; it never panics.

use crate::ir::*;
use crate::native::*;
use crate::types::{ScalarType, ScalarValue, StructType, Type};
use crate::validate::{validate, IrError};
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};

mod control;
mod memory;
mod native;
mod ops;
pub use control::*;
pub use memory::*;
pub use native::*;
pub use ops::*;

/// A Rust type that has an IR type.
pub trait IrType: Copy + 'static {
    /// The IR type.
    fn ir_type() -> Type;
}

/// A Rust scalar type usable in kernels: `bool`, the integers, `half::f16`, `f32`, `f64`.
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
/// `half::f16`, `f32` and `f64`.
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
scalar_impl!(half::f16, F16, Numeric, Float, Arith);
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
    natives: Vec<Native>,
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

/// How many expressions, and statements of its outermost block, a function has room for when
/// its building starts: a query's fingerprint, built on every cached call, holds about that
/// many, and growing both vectors from empty cost a reallocation per doubling.
const EXPRS_RESERVED: usize = 16;

/// How many blocks a function has room for open at once (the outermost and nested ones),
/// and how many statements a nested block has room for at its first statement: an `if` in a
/// fingerprint holds about that many, and growing from four cost a reallocation per call.
const BLOCKS_RESERVED: usize = 4;
const NESTED_RESERVED: usize = 8;

/// Appends `stmt` to the open block `block`.
#[inline(always)]
fn append(block: &mut Vec<Stmt>, stmt: Stmt) {
    if block.capacity() == 0 {
        block.reserve(NESTED_RESERVED);
    }
    block.push(stmt);
}

/// The kernels being built on this thread, the innermost last. Read through a pointer
/// rather than inside `LocalKey::with`'s closure: the builder runs it for every expression
/// of every cached query call, and expressions moved into that closure's environment and out
/// again cost about twice the time of the push itself.
#[inline(always)]
fn building() -> std::cell::RefMut<'static, Vec<KernelState>> {
    let state: *const RefCell<Vec<KernelState>> = BUILDING.with(|b| b as *const _);
    // SAFETY: the thread-local lives as long as this thread, and the guard returned here is
    // dropped within the builder call that takes it, on this thread.
    unsafe { &*state }.borrow_mut()
}

#[inline(always)]
fn with_kernel<R>(f: impl FnOnce(&mut KernelState) -> R) -> Option<R> {
    building().last_mut().map(f)
}

fn record(msg: String) {
    with_kernel(|k| k.errors.push(msg));
}

fn new_fn(name: &str, params: Vec<Param>, result: Option<Type>) -> FnState {
    FnState {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        name: name.to_string(),
        body: Body {
            exprs: Vec::with_capacity(EXPRS_RESERVED),
            ..Body::default()
        },
        blocks: {
            let mut blocks = Vec::with_capacity(BLOCKS_RESERVED);
            blocks.push(Vec::with_capacity(EXPRS_RESERVED));
            blocks
        },
        loops: 0,
        params,
        result,
    }
}

/// Checks that every operand belongs to the function being built; records an error otherwise.
/// A placeholder operand (what a failed operation returns) records one only when the kernel
/// has none yet: one built outside any kernel left no error where it was made.
#[inline(always)]
fn owned(k: &mut KernelState, deps: &[Raw]) -> bool {
    let id = k.fns.last().map(|f| f.id);
    let foreign = deps.iter().any(|d| *d != POISON && Some(d.owner) != id);
    if foreign || (deps.contains(&POISON) && k.errors.is_empty()) {
        k.errors.push("a value built for another kernel or function (or outside any) was used here; pass it as a parameter instead".into());
    }
    !foreign && !deps.contains(&POISON)
}

/// Appends an expression and its `Eval`; returns the handle, or poison when an operand is foreign.
#[inline(always)]
fn push(expr: Expr, deps: &[Raw]) -> Raw {
    match building().last_mut() {
        Some(k) => push_into(k, expr, deps),
        None => POISON,
    }
}

/// [`push`] into the kernel state `k`.
#[inline(always)]
fn push_into(k: &mut KernelState, expr: Expr, deps: &[Raw]) -> Raw {
    if !owned(k, deps) {
        return POISON;
    }
    let f = k
        .fns
        .last_mut()
        .expect("a kernel being built always has a function");
    let h = Handle(f.body.exprs.len() as u32);
    f.body.exprs.push(expr);
    append(f.blocks.last_mut().expect("open block"), Stmt::Eval(h));
    Raw { h, owner: f.id }
}

fn push_stmt(stmt: Stmt, deps: &[Raw]) {
    with_kernel(|k| {
        if owned(k, deps) {
            let f = k.fns.last_mut().expect("function");
            append(f.blocks.last_mut().expect("open block"), stmt);
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

#[inline(always)]
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
#[inline(always)]
fn literal(v: ScalarValue) -> Raw {
    let mut building = building();
    let Some(k) = building.last_mut() else {
        return POISON;
    };
    let raw = push_into(k, Expr::Literal(v), &[]);
    if let (true, 1, Some((closure, index))) = (raw != POISON, k.fns.len(), &mut k.region) {
        let slot = crate::constants::ConstantSlot {
            closure: *closure,
            index: *index,
        };
        *index += 1;
        k.user_literals.push((raw.h, slot));
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
