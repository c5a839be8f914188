//! Operators the kernel macro writes: comparisons in either order, `&&`/`||`, casts and
//! `if` used as a value.

use super::*;
use kiln_ir::f16;

/// Comparisons the macro writes for `<`, `<=`, `>`, `>=`, `==`, `!=` between values and
/// constants in either order (generated code).
#[doc(hidden)]
pub trait Compare<Rhs> {
    /// `self < rhs`
    fn lt_(self, rhs: Rhs) -> Val<bool>;
    /// `self <= rhs`
    fn le_(self, rhs: Rhs) -> Val<bool>;
    /// `self > rhs`
    fn gt_(self, rhs: Rhs) -> Val<bool>;
    /// `self >= rhs`
    fn ge_(self, rhs: Rhs) -> Val<bool>;
    /// `self == rhs`
    fn eq_(self, rhs: Rhs) -> Val<bool>;
    /// `self != rhs`
    fn ne_(self, rhs: Rhs) -> Val<bool>;
}
impl<T: Scalar, B: IntoVal<T>> Compare<B> for Val<T> {
    fn lt_(self, rhs: B) -> Val<bool> {
        self.lt(rhs)
    }
    fn le_(self, rhs: B) -> Val<bool> {
        self.le(rhs)
    }
    fn gt_(self, rhs: B) -> Val<bool> {
        self.gt(rhs)
    }
    fn ge_(self, rhs: B) -> Val<bool> {
        self.ge(rhs)
    }
    fn eq_(self, rhs: B) -> Val<bool> {
        self.eq(rhs)
    }
    fn ne_(self, rhs: B) -> Val<bool> {
        self.ne(rhs)
    }
}
macro_rules! lhs_compare {
    ($($t:ty),*) => {$(
        impl Compare<Val<$t>> for $t {
            fn lt_(self, rhs: Val<$t>) -> Val<bool> { rhs.gt(self) }
            fn le_(self, rhs: Val<$t>) -> Val<bool> { rhs.ge(self) }
            fn gt_(self, rhs: Val<$t>) -> Val<bool> { rhs.lt(self) }
            fn ge_(self, rhs: Val<$t>) -> Val<bool> { rhs.le(self) }
            fn eq_(self, rhs: Val<$t>) -> Val<bool> { rhs.eq(self) }
            fn ne_(self, rhs: Val<$t>) -> Val<bool> { rhs.ne(self) }
        }
    )*};
}
lhs_compare!(bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, f32, f64);

/// `a && b` with both sides evaluated. `#[kiln::kernel]` writes `&&` with this where the right
/// side is pure, and as an `if` where it may have an effect, so the right side runs only when
/// Rust would run it.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn in_range(i: Index1D, x: View<i32>, out: ViewMut<u32>) {
///     out[i] = (x[i] > 0 && x[i] < 10) as u32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x = [-1i32, 3, 10, 9];
/// let mut out = vec![0u32; 4];
/// ctx.launch(in_range, 4, (&x[..], &mut out))?;
/// assert_eq!(out, [0, 1, 0, 1]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn and(a: impl IntoVal<bool>, b: impl IntoVal<bool>) -> Val<bool> {
    a.into_val().and(b)
}

/// `a || b` with both sides evaluated (see [`and`] for how kernels use it).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn outside(i: Index1D, x: View<f32>, out: ViewMut<u32>) {
///     out[i] = (x[i] < -1.0 || x[i] > 1.0) as u32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x = [-2.0f32, 0.5, 1.0, 3.0, f32::NAN];
/// let mut out = vec![9u32; 5];
/// ctx.launch(outside, 5, (&x[..], &mut out))?;
/// let rust: Vec<u32> = x.iter().map(|v| (*v < -1.0 || *v > 1.0) as u32).collect();
/// assert_eq!(out, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn or(a: impl IntoVal<bool>, b: impl IntoVal<bool>) -> Val<bool> {
    a.into_val().or(b)
}

/// `x as U` for values and constants.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// // `as` in a kernel converts as Rust does: floats to integers saturate, NaN gives 0.
/// #[kiln::kernel]
/// fn to_i32(i: Index1D, x: View<f32>, out: ViewMut<i32>) {
///     out[i] = x[i] as i32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x = [1.9f32, -2.5, 3e9, f32::NAN, f32::NEG_INFINITY];
/// let mut out = vec![0i32; x.len()];
/// ctx.launch(to_i32, x.len(), (&x[..], &mut out))?;
/// let rust: Vec<i32> = x.iter().map(|v| *v as i32).collect();
/// assert_eq!(out, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait CastTo {
    /// The conversion under the IR's cast rules (saturating float-to-int, NaN to 0).
    fn cast_to<U: Scalar>(self) -> Val<U>;
}
impl<T: Scalar> CastTo for Val<T> {
    fn cast_to<U: Scalar>(self) -> Val<U> {
        self.cast::<U>()
    }
}
macro_rules! cast_lit {
    ($($t:ty),*) => {$(
        impl CastTo for $t {
            /// A constant cast to `f16` is rounded here, so no device needs the source
            /// type for it (`0.1 as f16` needs no f64 arithmetic).
            fn cast_to<U: Scalar>(self) -> Val<U> {
                match U::TYPE {
                    kiln_ir::ScalarType::F16 => {
                        kiln_ir::lit(U::from_bits(self.to_value().to_f16().to_bits() as u64))
                    }
                    _ => kiln_ir::lit(self).cast::<U>(),
                }
            }
        }
    )*};
}
cast_lit!(bool, i8, u8, i16, u16, i32, u32, i64, u64, f16, f32, f64);

/// `value` as a `Val<T>` (generated code for `let x: T = value;`).
#[doc(hidden)]
pub fn typed<T: Scalar>(value: impl IntoVal<T>) -> Val<T> {
    value.into_val()
}

/// The result of an `if`/`else` used as a value: each branch puts its value, the code after
/// takes it (generated code).
#[doc(hidden)]
pub struct Slot<T> {
    var: std::cell::Cell<Option<Var<T>>>,
    name: &'static str,
}
impl<T: IrType> Slot<T> {
    /// An empty slot; the local is declared by the first branch that puts a value.
    pub fn new(name: &'static str) -> Slot<T> {
        Slot {
            var: std::cell::Cell::new(None),
            name,
        }
    }
    /// Stores a branch's value.
    pub fn put(&self, v: impl IntoVal<T>) {
        match self.var.get() {
            Some(var) => var.set(v),
            None => self.var.set(Some(Var::new(self.name, v))),
        }
    }
    /// The value after the branches.
    pub fn take(&self) -> Val<T> {
        match self.var.get() {
            Some(var) => var.get(),
            None => {
                kiln_ir::build_error("an `if` used as a value has no branch with a value".into())
            }
        }
    }
}
