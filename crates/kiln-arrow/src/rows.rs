//! Rows whose every column may be NULL: each column travels through the fused kernel beside a
//! validity column of its own (a `u8`, 1 where valid).

use crate::Nullable;
use kiln::ir::{lit, AnyVal};
use kiln::{select, IntoRow, Row, Val};

/// A row type of a [`crate::NullableQuery`]: a kiln scalar or a tuple of them, each column
/// with its own validity.
pub trait NullableRow: Row {
    /// The validity columns, one `u8` per column (1 valid, 0 NULL).
    type Valid: Row;
    /// The row as closures see it: a [`Nullable`] per column.
    type Nulls: Copy;
    /// The row on the host: an `Option` per column.
    type Host;
    /// The closures' view of a row's values and validity.
    fn join(values: Self::Vals, valid: <Self::Valid as Row>::Vals) -> Self::Nulls;
    /// The host's view of a row's values and validity.
    fn host(values: Self, valid: Self::Valid) -> Self::Host;
}

/// What a [`crate::NullableQuery`]'s `map` may return: a [`Nullable`] or a tuple of them.
pub trait IntoNullableRow {
    /// The row type it makes.
    type Row: NullableRow;
    /// The values and the validity bytes of the row.
    fn split(self) -> Parts<Self::Row>;
}

/// A row's values beside its validity bytes, as the kernel stores them (the inner query's
/// row `(R, R::Valid)`).
pub struct Parts<R: NullableRow>(pub(crate) R::Vals, pub(crate) <R::Valid as Row>::Vals);

impl<R: NullableRow> IntoRow for Parts<R> {
    type Row = (R, R::Valid);
    fn into_handles(self, out: &mut Vec<AnyVal>) {
        R::handles(self.0, out);
        R::Valid::handles(self.1, out);
    }
}

/// A validity as the byte the kernel stores.
fn valid_byte(valid: Val<bool>) -> Val<u8> {
    select(valid, lit(1u8), lit(0u8))
}

macro_rules! scalar_nullable_row {
    ($($t:ty),*) => {$(
        impl NullableRow for $t {
            type Valid = u8;
            type Nulls = Nullable<$t>;
            type Host = Option<$t>;
            fn join(values: Val<$t>, valid: Val<u8>) -> Nullable<$t> {
                Nullable::new(values, valid.ne(0u8))
            }
            fn host(values: $t, valid: u8) -> Option<$t> {
                (valid != 0).then_some(values)
            }
        }
        impl IntoNullableRow for Nullable<$t> {
            type Row = $t;
            fn split(self) -> Parts<$t> {
                Parts(self.value(), valid_byte(self.is_valid()))
            }
        }
    )*};
}
scalar_nullable_row!(bool, i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

macro_rules! tuple_nullable_row {
    ($($name:ident),+) => {
        impl<$($name: NullableRow),+> NullableRow for ($($name,)+) {
            type Valid = ($($name::Valid,)+);
            type Nulls = ($($name::Nulls,)+);
            type Host = ($($name::Host,)+);
            #[allow(non_snake_case)]
            fn join(values: Self::Vals, valid: <Self::Valid as Row>::Vals) -> Self::Nulls {
                let ($($name,)+) = values;
                let valid_of = valid;
                tuple_nullable_row!(@join valid_of; $($name),+)
            }
            #[allow(non_snake_case)]
            fn host(values: Self, valid: Self::Valid) -> Self::Host {
                let ($($name,)+) = values;
                let valid_of = valid;
                tuple_nullable_row!(@host valid_of; $($name),+)
            }
        }
        impl<$($name: IntoNullableRow),+> IntoNullableRow for ($($name,)+) {
            type Row = ($($name::Row,)+);
            #[allow(non_snake_case)]
            fn split(self) -> Parts<Self::Row> {
                let ($($name,)+) = self;
                let ($($name,)+) = ($($name.split(),)+);
                Parts(($($name.0,)+), ($($name.1,)+))
            }
        }
    };
    (@join $v:ident; $a:ident, $b:ident) => {
        ($a::join($a, $v.0), $b::join($b, $v.1))
    };
    (@join $v:ident; $a:ident, $b:ident, $c:ident) => {
        ($a::join($a, $v.0), $b::join($b, $v.1), $c::join($c, $v.2))
    };
    (@join $v:ident; $a:ident, $b:ident, $c:ident, $d:ident) => {
        ($a::join($a, $v.0), $b::join($b, $v.1), $c::join($c, $v.2), $d::join($d, $v.3))
    };
    (@host $v:ident; $a:ident, $b:ident) => {
        ($a::host($a, $v.0), $b::host($b, $v.1))
    };
    (@host $v:ident; $a:ident, $b:ident, $c:ident) => {
        ($a::host($a, $v.0), $b::host($b, $v.1), $c::host($c, $v.2))
    };
    (@host $v:ident; $a:ident, $b:ident, $c:ident, $d:ident) => {
        ($a::host($a, $v.0), $b::host($b, $v.1), $c::host($c, $v.2), $d::host($d, $v.3))
    };
}
tuple_nullable_row!(A, B);
tuple_nullable_row!(A, B, C);
tuple_nullable_row!(A, B, C, D);
