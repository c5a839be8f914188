//! Operators, comparisons, casts and math on values; vectors and structs.

use super::*;

pub(super) fn binary<U>(op: BinaryOp, a: Raw, b: Raw) -> Val<U> {
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
lhs_scalar_ops!(i8, u8, i16, u16, i32, u32, i64, u64, half::f16, f32, f64);

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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[1i32, 5, 3, -2]).filter(|x| x.gt(2)).to_vec()?, [5, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn gt(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Gt, rhs)
    }
    /// `self >= rhs`
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[1i32, 5, 3, -2]).filter(|x| x.ge(3)).to_vec()?, [5, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn ge(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Ge, rhs)
    }
    /// `self < rhs`
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// // NaN is neither less nor greater than anything, as in Rust.
    /// assert_eq!(ctx.from(&[0.5f32, f32::NAN, -1.0]).filter(|x| x.lt(1.0)).to_vec()?, [0.5, -1.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn lt(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Lt, rhs)
    }
    /// `self <= rhs`
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[7u8, 8, 9]).filter(|x| x.le(8u8)).count()?, 2);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn le(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Le, rhs)
    }
    /// `self == rhs`
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[4u64, 2, 4, 0]).filter(|x| x.eq(4u64)).count()?, 2);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn eq(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Eq, rhs)
    }
    /// `self != rhs`
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// // NaN differs from everything, itself included.
    /// assert_eq!(ctx.from(&[f64::NAN, 1.0]).filter(|x| x.ne(x)).count()?, 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn ne(self, rhs: impl IntoVal<T>) -> Val<bool> {
        self.cmp(BinaryOp::Ne, rhs)
    }

    /// Numeric conversion with the IR cast rules (saturating float-to-int, NaN to 0).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.9f32, -2.5, 3e9, f32::NAN];
    /// let got = ctx.from(&xs).map(|x| x.cast::<i32>()).to_vec()?;
    /// assert_eq!(got, xs.iter().map(|x| *x as i32).collect::<Vec<_>>()); // Rust's `as`
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.0f32, -0.0, f32::INFINITY];
    /// let bits = ctx.from(&xs).map(|x| x.bitcast::<u32>()).to_vec()?;
    /// assert_eq!(bits, xs.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1u32, 6, 12, 20];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.gt(5u32).and(x.lt(15u32))).to_vec()?, [6, 12]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn and(self, rhs: impl IntoVal<bool>) -> Val<bool> {
        self & rhs.into_val()
    }
    /// Logical or (both sides are computed).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1u32, 6, 12, 20];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.lt(5u32).or(x.gt(15u32))).to_vec()?, [1, 20]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn or(self, rhs: impl IntoVal<bool>) -> Val<bool> {
        self | rhs.into_val()
    }
    /// Logical not (the same as `!self`, spelled as a method for query chains).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1u32, 6, 12, 20];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.gt(10u32).not()).to_vec()?, [1, 6]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Val<bool> {
        !self
    }
}

/// `if cond { a } else { b }` on values (both are computed).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs = [-3i32, 4, -1];
/// let abs = ctx.from(&xs).map(|x| kiln::select(x.lt(0), -x, x)).to_vec()?;
/// assert_eq!(abs, [3, 4, 1]);
/// # Ok::<(), kiln::Error>(())
/// ```
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

pub(super) fn math<T>(fun: MathFn, args: &[Raw]) -> Val<T> {
    typed(
        Expr::Math {
            fun,
            args: args.iter().map(|r| r.h).collect(),
        },
        args,
    )
}

macro_rules! unary_math {
    ($($m:ident => $f:ident, $doc:literal, $rust:literal;)*) => {$(
        #[doc = $doc]
        #[doc = ""]
        #[doc = " ```"]
        #[doc = " # use kiln::prelude::*;"]
        #[doc = " let ctx = Context::with_backend(BackendKind::Cpu)?;"]
        #[doc = " let xs = [0.125f64, 0.5, 0.875, -0.25, -0.75];"]
        #[doc = concat!(" let got = ctx.from(&xs).map(|x| x.", stringify!($m), "()).to_vec()?;")]
        #[doc = " for (g, x) in got.iter().zip(xs) {"]
        #[doc = concat!("     let rust: f64 = ", $rust, ";")]
        #[doc = "     assert!(g == &rust || (g - rust).abs() <= 1e-12 * rust.abs().max(1.0) || (g.is_nan() && rust.is_nan()), \"{x}: {g} vs {rust}\");"]
        #[doc = " }"]
        #[doc = " # Ok::<(), kiln::Error>(())"]
        #[doc = " ```"]
        pub fn $m(self) -> Val<T> { math(MathFn::$f, &[self.raw]) }
    )*};
}

impl<T: Float> Val<T> {
    unary_math! {
        sin => Sin, "sine", "x.sin()";
        cos => Cos, "cosine", "x.cos()";
        tan => Tan, "tangent", "x.tan()";
        asin => Asin, "arcsine", "x.asin()";
        acos => Acos, "arccosine", "x.acos()";
        atan => Atan, "arctangent", "x.atan()";
        sinh => Sinh, "hyperbolic sine", "x.sinh()";
        cosh => Cosh, "hyperbolic cosine", "x.cosh()";
        tanh => Tanh, "hyperbolic tangent", "x.tanh()";
        exp => Exp, "e^self", "x.exp()";
        exp2 => Exp2, "2^self", "x.exp2()";
        ln => Log, "natural logarithm", "x.ln()";
        log2 => Log2, "base-2 logarithm", "x.log2()";
        log10 => Log10, "base-10 logarithm", "x.log10()";
        sqrt => Sqrt, "square root", "x.sqrt()";
        rsqrt => Rsqrt, "1 / sqrt(self)", "1.0 / x.sqrt()";
        floor => Floor, "round toward -inf", "x.floor()";
        ceil => Ceil, "round toward +inf", "x.ceil()";
        round => Round, "round half away from zero", "x.round()";
        trunc => Trunc, "round toward zero", "x.trunc()";
        fract => Fract, "self - trunc(self)", "x.fract()";
    }
    /// `atan2(self, x)`
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (y, x) = ([1.0f64, -1.0, 0.0], [1.0f64, -1.0, -2.0]);
    /// let got = ctx.from(&y).zip(&x).map(|(y, x)| y.atan2(x)).to_vec()?;
    /// for (g, (y, x)) in got.iter().zip(y.iter().zip(&x)) {
    ///     assert!((g - y.atan2(*x)).abs() < 1e-12, "{g}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atan2(self, x: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Atan2, &[self.raw, x.into_val().raw])
    }
    /// `self ^ e`
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let got = ctx.from(&[2.0f32, 9.0, 0.5]).map(|x| x.powf(1.5)).to_vec()?;
    /// for (g, x) in got.iter().zip([2.0f32, 9.0, 0.5]) {
    ///     assert!((g - x.powf(1.5)).abs() <= 1e-5 * x.powf(1.5), "{g}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn powf(self, e: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Pow, &[self.raw, e.into_val().raw])
    }
    /// `self * a + b` with one rounding.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.0f64 + f64::EPSILON, 3.0];
    /// let got = ctx.from(&xs).map(|x| x.mul_add(x, -1.0)).to_vec()?;
    /// assert_eq!(got, xs.iter().map(|x| x.mul_add(*x, -1.0)).collect::<Vec<_>>());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn mul_add(self, a: impl IntoVal<T>, b: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Fma, &[self.raw, a.into_val().raw, b.into_val().raw])
    }
    /// Magnitude of `self` with the sign of `sign`.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let got = ctx.from(&[2.5f32, -1.0, 0.0]).map(|x| x.copysign(-1.0)).to_vec()?;
    /// assert_eq!(got, [-2.5, -1.0, -0.0]);
    /// assert!(got[2].is_sign_negative());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn copysign(self, sign: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Copysign, &[self.raw, sign.into_val().raw])
    }
    /// True if NaN.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.0f32, f32::NAN, f32::INFINITY];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.is_nan()).count()?, 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn is_nan(self) -> Val<bool> {
        math(MathFn::IsNan, &[self.raw])
    }
    /// True if +inf or -inf.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.0f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX];
    /// assert_eq!(ctx.from(&xs).filter(|x| x.is_infinite()).count()?, 2);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn is_infinite(self) -> Val<bool> {
        math(MathFn::IsInf, &[self.raw])
    }
}

impl<T: Int> Val<T> {
    /// `self + rhs`, which wraps on overflow as every kernel `+` does; named for Rust code
    /// that says so.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[250u8, 3]).map(|x| x.wrapping_add(10u8)).to_vec()?, [4, 13]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn wrapping_add(self, rhs: impl IntoVal<T>) -> Val<T> {
        self + rhs.into_val()
    }
    /// `self - rhs`, wrapping (see [`Val::wrapping_add`]).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[i32::MIN, 5]).map(|x| x.wrapping_sub(1)).to_vec()?, [i32::MAX, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn wrapping_sub(self, rhs: impl IntoVal<T>) -> Val<T> {
        self - rhs.into_val()
    }
    /// `self * rhs`, wrapping (see [`Val::wrapping_add`]).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [0x1_0000u32, 7];
    /// let got = ctx.from(&xs).map(|x| x.wrapping_mul(0x1_0001u32)).to_vec()?;
    /// assert_eq!(got, xs.iter().map(|x| x.wrapping_mul(0x1_0001)).collect::<Vec<_>>());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn wrapping_mul(self, rhs: impl IntoVal<T>) -> Val<T> {
        self * rhs.into_val()
    }
}

impl<T: Numeric> Val<T> {
    /// Absolute value (`abs(MIN) = MIN` on integers).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let got = ctx.from(&[-7i16, 3, i16::MIN]).map(|x| x.abs()).to_vec()?;
    /// assert_eq!(got, [7, 3, i16::MIN.wrapping_abs()]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn abs(self) -> Val<T> {
        math(MathFn::Abs, &[self.raw])
    }
    /// -1, 0 or 1; zeros and NaN are returned unchanged.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[-9i32, 0, 4]).map(|x| x.sign()).to_vec()?, [-1, 0, 1]);
    /// let f = ctx.from(&[-0.5f32, 0.0, -0.0, 2.0]).map(|x| x.sign()).to_vec()?;
    /// assert_eq!(f, [-1.0, 0.0, -0.0, 1.0]);
    /// assert!(f[2].is_sign_negative());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn sign(self) -> Val<T> {
        math(MathFn::Sign, &[self.raw])
    }
    /// Minimum; with one NaN operand the other is returned.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let got = ctx.from(&[3.0f32, f32::NAN, -1.0]).map(|x| x.min(0.0)).to_vec()?;
    /// assert_eq!(got, [3.0f32.min(0.0), f32::NAN.min(0.0), -1.0]); // as Rust's f32::min
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn min(self, rhs: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Min, &[self.raw, rhs.into_val().raw])
    }
    /// Maximum; with one NaN operand the other is returned.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let got = ctx.from(&[3u16, 9, 0]).map(|x| x.max(5u16)).to_vec()?;
    /// assert_eq!(got, [5, 9, 5]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn max(self, rhs: impl IntoVal<T>) -> Val<T> {
        math(MathFn::Max, &[self.raw, rhs.into_val().raw])
    }
    /// `min(max(self, lo), hi)`.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let got = ctx.from(&[-4i64, 50, 120]).map(|x| x.clamp(0i64, 100i64)).to_vec()?;
    /// assert_eq!(got, [0, 50, 100]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn clamp(self, lo: impl IntoVal<T>, hi: impl IntoVal<T>) -> Val<T> {
        math(
            MathFn::Clamp,
            &[self.raw, lo.into_val().raw, hi.into_val().raw],
        )
    }
}

impl<T: Scalar, const N: usize> Val<Vector<T, N>> {
    /// Component `i` (0-based); a build error if `i >= N`.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// use kiln::lang::*;
    /// #[kiln::kernel]
    /// fn swap(i: Index1D, v: ViewMut<Vector<u32, 2>>) {
    ///     let p = v[i];
    ///     v[i] = vec2(p.at(1), p.at(0));
    /// }
    /// let mut v = vec![Vector([1u32, 2]), Vector([3, 4])];
    /// ctx.launch(swap, 2, (&mut v,))?;
    /// assert_eq!(v, [Vector([2, 1]), Vector([4, 3])]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// // (`vec2`, `vec3` and `vec4` are this in kernel code.)
/// let last = ctx
///     .range(4)
///     .map(|i| {
///         let k = i.cast::<i32>();
///         kiln::ir::vector([k, -k, k * k]).at(2)
///     })
///     .to_vec()?;
/// assert_eq!(last, [0, 1, 4, 9]);
/// # Ok::<(), kiln::Error>(())
/// ```
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
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// use kiln::lang::*;
    /// #[derive(Clone, Copy, kiln::Value)]
    /// #[repr(C)]
    /// struct Pair {
    ///     a: u32,
    ///     b: u32,
    /// }
    /// // `p.b` in kernel code reads field 1.
    /// #[kiln::kernel]
    /// fn seconds(i: Index1D, ps: View<Pair>, out: ViewMut<u32>) {
    ///     out[i] = ps[i].b;
    /// }
    /// let ps = [Pair { a: 1, b: 10 }, Pair { a: 2, b: 20 }];
    /// let mut out = vec![0u32; 2];
    /// ctx.launch(seconds, 2, (&ps[..], &mut out))?;
    /// assert_eq!(out, [10, 20]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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

/// Builds a vector or struct value of type `ty` from its parts (the untyped [`compose`]: a
/// vector's components, a struct's fields in declaration order). Parts of the wrong number or
/// types, or a `ty` that has no parts, make the kernel fail validation.
pub fn compose_any(ty: Type, parts: &[AnyVal]) -> AnyVal {
    let raws: Vec<Raw> = parts.iter().map(|p| p.raw).collect();
    let raw = push(
        Expr::Compose {
            ty: ty.clone(),
            parts: raws.iter().map(|r| r.h).collect(),
        },
        &raws,
    );
    AnyVal { raw, ty }
}

impl AnyVal {
    /// Part `index` of a vector or struct value (a component or a field); records a build
    /// error and returns a placeholder of the value's own type when it has no such part.
    pub fn part(&self, index: u32) -> AnyVal {
        let ty = match &self.ty {
            Type::Vector(s, n) if index < *n as u32 => Type::Scalar(*s),
            Type::Struct(st) if (index as usize) < st.fields.len() => {
                st.fields[index as usize].ty.clone()
            }
            t => {
                record(format!("{t} has no component {index}"));
                return AnyVal {
                    raw: POISON,
                    ty: self.ty.clone(),
                };
            }
        };
        let raw = push(
            Expr::Extract {
                base: self.raw.h,
                index,
            },
            &[self.raw],
        );
        AnyVal { raw, ty }
    }
}
