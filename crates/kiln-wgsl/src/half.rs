//! `f16` in WGSL without the `f16` extension (which GL and many adapters lack): an `f32` in
//! registers, its 16 bits in memory and in parameters, and every operation's result rounded
//! to binary16 by a trip through the bits. The conversions are integer arithmetic, not
//! `pack2x16float`, whose rounding and out-of-range results WGSL leaves to the driver; so
//! every adapter rounds to nearest, ties to even, as `half::f16` does on the host.

use crate::*;

/// binary16 bits (the low 16 of a `u32`) to the `f32` they stand for (exact).
const H2F: &str = "// binary16 bits to f32, exactly (NaN payloads kept, quieted)
fn kiln_h2f(h: u32) -> f32 { let s = (h & 0x8000u) << 16u; let em = h & 0x7fffu; if (em >= 0x7c00u) { return bitcast<f32>(s | select(0x7f800000u, 0x7fc00000u, em > 0x7c00u) | ((em & 0x3ffu) << 13u)); } if (em >= 0x0400u) { return bitcast<f32>(s | ((em << 13u) + 0x38000000u)); } let v = f32(em) * 5.9604644775390625e-8f; return select(v, -v, s != 0u); }";

/// An `f32` to the nearest binary16's bits, ties to even; past the range, infinity.
const F2H: &str = "// f32 to the nearest binary16's bits, ties to even (integer arithmetic: pack2x16float's rounding is the driver's)
fn kiln_f2h(x: f32) -> u32 { let b = bitcast<u32>(x); let s = (b >> 16u) & 0x8000u; let a = b & 0x7fffffffu; if (a > 0x7f800000u) { return s | 0x7e00u | ((a >> 13u) & 0x3ffu); } if (a >= 0x477ff000u) { return s | 0x7c00u; } if (a < 0x33000000u) { return s; } if (a < 0x38800000u) { let m = (a & 0x7fffffu) | 0x800000u; let sh = 126u - (a >> 23u); let r = m >> sh; let rest = m & ((1u << sh) - 1u); let half = 1u << (sh - 1u); return s | (r + select(0u, 1u, rest > half || (rest == half && (r & 1u) == 1u))); } let r = a - 0x38000000u; let h = r >> 13u; let rest = r & 0x1fffu; return s | (h + select(0u, 1u, rest > 0x1000u || (rest == 0x1000u && (h & 1u) == 1u))); }";

/// An `f64` to the nearest binary16 value as an `f32`, rounded once: the `f32` step rounds to
/// odd (truncated, lowest bit set when inexact), which keeps the second rounding exact.
const D2H: &str = "// f64 to the nearest binary16 value (as f32), rounded once: to odd at f32, then to even at f16
fn kiln_f16_of_f64(d: f64) -> f32 { let f = f32(d); var b = bitcast<u32>(f); if (!(f64(f) == d) && d == d) { if (abs(f64(f)) > abs(d)) { b = b - 1u; } b = b | 1u; } return kiln_h2f(kiln_f2h(bitcast<f32>(b))); }";

impl Writer {
    /// The `f32` value of the binary16 bits `bits` (a `u32`).
    pub(crate) fn h2f(&mut self, bits: &str) -> String {
        self.helper(H2F.into());
        format!("kiln_h2f({bits})")
    }

    /// The binary16 bits (a `u32`) nearest `x`, an `f32`.
    pub(crate) fn f2h(&mut self, x: &str) -> String {
        self.helper(F2H.into());
        format!("kiln_f2h({x})")
    }

    /// `x`, an `f32`, rounded to the nearest binary16 value.
    pub(crate) fn round_half(&mut self, x: &str) -> String {
        let bits = self.f2h(x);
        self.h2f(&bits)
    }

    /// `x`, an `f64`, rounded once to the nearest binary16 value (an `f32`).
    pub(crate) fn f16_of_f64(&mut self, x: &str) -> String {
        for helper in [H2F, F2H, D2H] {
            self.helper(helper.into());
        }
        format!("kiln_f16_of_f64({x})")
    }
}
