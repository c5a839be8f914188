//! SQL values inside a query's closures: a value beside whether it is valid (not NULL).

use kiln::ir::{lit, Arith, IntoVal, Scalar};
use kiln::{select, Val};

/// A value of a nullable column inside a [`crate::NullableQuery`]'s closures: the value and
/// whether it is valid (SQL's NOT NULL). Operators follow SQL: arithmetic, comparisons and
/// casts are NULL where an operand is; `and`, `or` and `not` use SQL's three-valued logic
/// (`NULL AND false` is false, `NULL OR true` is true). A NULL's value is a placeholder that
/// kiln's total operations compute with and the result drops, so no row branches.
///
/// Integer division by zero gives kiln's defined result (see the README's semantics), where
/// SQL engines stop with an error.
pub struct Nullable<T> {
    value: Val<T>,
    valid: Val<bool>,
}

impl<T> Clone for Nullable<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Nullable<T> {}

/// What a [`Nullable`]'s operators take on their right: another `Nullable`, a `Val` or a
/// constant (both never NULL).
pub trait IntoNullable<T> {
    /// The operand as a `Nullable`.
    fn into_nullable(self) -> Nullable<T>;
}
impl<T> IntoNullable<T> for Nullable<T> {
    fn into_nullable(self) -> Nullable<T> {
        self
    }
}
impl<T: Scalar> IntoNullable<T> for Val<T> {
    fn into_nullable(self) -> Nullable<T> {
        Nullable::valid(self)
    }
}
impl<T: Scalar> IntoNullable<T> for T {
    fn into_nullable(self) -> Nullable<T> {
        Nullable::valid(self)
    }
}

impl<T: Scalar> Nullable<T> {
    /// `value`, valid where `valid` is true.
    pub fn new(value: Val<T>, valid: Val<bool>) -> Nullable<T> {
        Nullable { value, valid }
    }

    /// `value`, never NULL.
    pub fn valid(value: impl IntoVal<T>) -> Nullable<T> {
        Nullable::new(value.into_val(), lit(true))
    }

    /// The value; a placeholder where NULL.
    pub fn value(self) -> Val<T> {
        self.value
    }

    /// SQL's `IS NOT NULL`.
    pub fn is_valid(self) -> Val<bool> {
        self.valid
    }

    /// SQL's `IS NULL`.
    pub fn is_null(self) -> Val<bool> {
        !self.valid
    }

    /// SQL's `COALESCE(self, fallback)` with a value that is never NULL.
    pub fn unwrap_or(self, fallback: impl IntoVal<T>) -> Val<T> {
        select(self.valid, self.value, fallback.into_val())
    }

    /// SQL's `COALESCE(self, other)`: `self` where valid, else `other`.
    pub fn coalesce(self, other: Nullable<T>) -> Nullable<T> {
        Nullable::new(
            select(self.valid, self.value, other.value),
            self.valid | other.valid,
        )
    }

    /// `f` of the value, NULL where `self` is.
    pub fn map<U: Scalar>(self, f: impl FnOnce(Val<T>) -> Val<U>) -> Nullable<U> {
        Nullable::new(f(self.value), self.valid)
    }

    /// `f` of both values, NULL where either is.
    pub fn zip_with<U: Scalar, R: Scalar>(
        self,
        other: impl IntoNullable<U>,
        f: impl FnOnce(Val<T>, Val<U>) -> Val<R>,
    ) -> Nullable<R> {
        let other = other.into_nullable();
        Nullable::new(f(self.value, other.value), self.valid & other.valid)
    }

    /// SQL's `CAST(self AS U)` under kiln's cast rules, NULL where `self` is.
    pub fn cast<U: Scalar>(self) -> Nullable<U> {
        self.map(|v| v.cast::<U>())
    }

    /// `self < rhs`, NULL where either is.
    pub fn lt(self, rhs: impl IntoNullable<T>) -> Nullable<bool> {
        self.zip_with(rhs, |a, b| a.lt(b))
    }
    /// `self <= rhs`, NULL where either is.
    pub fn le(self, rhs: impl IntoNullable<T>) -> Nullable<bool> {
        self.zip_with(rhs, |a, b| a.le(b))
    }
    /// `self > rhs`, NULL where either is.
    pub fn gt(self, rhs: impl IntoNullable<T>) -> Nullable<bool> {
        self.zip_with(rhs, |a, b| a.gt(b))
    }
    /// `self >= rhs`, NULL where either is.
    pub fn ge(self, rhs: impl IntoNullable<T>) -> Nullable<bool> {
        self.zip_with(rhs, |a, b| a.ge(b))
    }
    /// `self = rhs`, NULL where either is.
    pub fn eq(self, rhs: impl IntoNullable<T>) -> Nullable<bool> {
        self.zip_with(rhs, |a, b| a.eq(b))
    }
    /// `self <> rhs`, NULL where either is.
    pub fn ne(self, rhs: impl IntoNullable<T>) -> Nullable<bool> {
        self.zip_with(rhs, |a, b| a.ne(b))
    }
    /// SQL's `self BETWEEN lo AND hi` (`lo <= self AND self <= hi`, three-valued).
    pub fn between(self, lo: impl IntoNullable<T>, hi: impl IntoNullable<T>) -> Nullable<bool> {
        self.ge(lo).and(self.le(hi))
    }
}

impl Nullable<bool> {
    /// SQL's `AND`: false where either side is false, NULL where neither is and one is NULL.
    pub fn and(self, rhs: impl IntoNullable<bool>) -> Nullable<bool> {
        let rhs = rhs.into_nullable();
        let false_here = |n: Nullable<bool>| n.valid & !n.value;
        Nullable::new(
            self.value & rhs.value,
            (self.valid & rhs.valid) | false_here(self) | false_here(rhs),
        )
    }

    /// SQL's `OR`: true where either side is true, NULL where neither is and one is NULL.
    pub fn or(self, rhs: impl IntoNullable<bool>) -> Nullable<bool> {
        let rhs = rhs.into_nullable();
        let true_here = |n: Nullable<bool>| n.valid & n.value;
        Nullable::new(
            true_here(self) | true_here(rhs),
            (self.valid & rhs.valid) | true_here(self) | true_here(rhs),
        )
    }

    /// SQL's `NOT`, NULL where `self` is.
    #[allow(clippy::should_implement_trait)]
    pub fn not(self) -> Nullable<bool> {
        Nullable::new(!self.value, self.valid)
    }

    /// Whether a filter keeps the row: true and not NULL.
    pub fn is_true(self) -> Val<bool> {
        self.valid & self.value
    }
}

macro_rules! nullable_arith {
    ($tr:ident, $m:ident) => {
        impl<T: Scalar + Arith, R: IntoNullable<T>> std::ops::$tr<R> for Nullable<T>
        where
            Val<T>: std::ops::$tr<Val<T>, Output = Val<T>>,
        {
            type Output = Nullable<T>;
            fn $m(self, rhs: R) -> Nullable<T> {
                self.zip_with(rhs, |a, b| std::ops::$tr::$m(a, b))
            }
        }
    };
}
nullable_arith!(Add, add);
nullable_arith!(Sub, sub);
nullable_arith!(Mul, mul);
nullable_arith!(Div, div);
nullable_arith!(Rem, rem);

impl<T: Scalar + Arith> std::ops::Neg for Nullable<T> {
    type Output = Nullable<T>;
    fn neg(self) -> Nullable<T> {
        self.map(|v| -v)
    }
}

macro_rules! lhs_nullable_arith {
    ($($t:ty),*) => {$(
        impl std::ops::Add<Nullable<$t>> for $t {
            type Output = Nullable<$t>;
            fn add(self, r: Nullable<$t>) -> Nullable<$t> { Nullable::valid(self) + r }
        }
        impl std::ops::Sub<Nullable<$t>> for $t {
            type Output = Nullable<$t>;
            fn sub(self, r: Nullable<$t>) -> Nullable<$t> { Nullable::valid(self) - r }
        }
        impl std::ops::Mul<Nullable<$t>> for $t {
            type Output = Nullable<$t>;
            fn mul(self, r: Nullable<$t>) -> Nullable<$t> { Nullable::valid(self) * r }
        }
        impl std::ops::Div<Nullable<$t>> for $t {
            type Output = Nullable<$t>;
            fn div(self, r: Nullable<$t>) -> Nullable<$t> { Nullable::valid(self) / r }
        }
    )*};
}
lhs_nullable_arith!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);
