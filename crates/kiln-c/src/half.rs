//! `f16` in C: a `float` in registers, its 16 bits in memory and in kernel parameters, and
//! every operation's result rounded to binary16 (to nearest, ties to even) by a trip through
//! the bits, so each operation gives what `half::f16`'s does on the host.

use crate::*;

impl Writer {
    /// The `float` value of the binary16 bits `bits`.
    pub(crate) fn h2f(&mut self, bits: &str) -> String {
        self.helper(self.d.half_helper(ScalarType::U16));
        format!("kiln_h2f({bits})")
    }

    /// The binary16 bits nearest `x`, a `float` (or, with `from` = `f64`, a `double`).
    pub(crate) fn f2h(&mut self, x: &str, from: ScalarType) -> String {
        self.helper(self.d.half_helper(from));
        match from {
            ScalarType::F64 => format!("kiln_d2h({x})"),
            _ => format!("kiln_f2h({x})"),
        }
    }

    /// `x`, a `float`, rounded to the nearest binary16 value.
    pub(crate) fn round_half(&mut self, x: &str) -> String {
        let bits = self.f2h(x, ScalarType::F32);
        self.h2f(&bits)
    }
}
