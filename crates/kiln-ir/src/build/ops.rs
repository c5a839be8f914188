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
