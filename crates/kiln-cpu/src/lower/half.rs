//! `f16`: an `f32` in registers, its 16 bits in memory, and every operation's result rounded
//! to binary16 (to nearest, ties to even) by a trip through the bits, so each operation gives
//! what `half::f16`'s does. The conversions are branch-free integer arithmetic.

use super::*;

impl<'a, 'f> Lowerer<'a, 'f> {
    /// The `f32` value of binary16 bits `h` (an `i16`), exactly; a NaN keeps its payload and
    /// is quieted.
    pub(super) fn h2f(&mut self, h: Value) -> Value {
        let h = self.b.ins().uextend(types::I32, h);
        let sign = self.b.ins().band_imm_u(h, 0x8000);
        let sign = self.b.ins().ishl_imm_u(sign, 16);
        let em = self.b.ins().band_imm_u(h, 0x7fff);
        // Infinity or NaN: the f32 exponent, the payload moved up, NaN quieted.
        let man = self.b.ins().band_imm_u(em, 0x3ff);
        let man = self.b.ins().ishl_imm_u(man, 13);
        let nan = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThan, em, 0x7c00);
        let quiet = self.b.ins().iconst(types::I32, 0x7fc0_0000);
        let inf = self.b.ins().iconst(types::I32, 0x7f80_0000);
        let top = self.b.ins().select(nan, quiet, inf);
        let special = self.b.ins().bor(top, man);
        // Normal: the exponent rebiased by 127 - 15.
        let normal = self.b.ins().ishl_imm_u(em, 13);
        let normal = self.b.ins().iadd_imm_s(normal, 0x3800_0000);
        // Subnormal (and zero): em * 2^-24, exact in f32.
        let f = self.b.ins().fcvt_from_uint(types::F32, em);
        let unit = self.b.ins().f32const(f32::from_bits(0x3380_0000));
        let f = self.b.ins().fmul(f, unit);
        let subnormal = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
        let is_special = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, em, 0x7c00);
        let is_normal = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, em, 0x400);
        let finite = self.b.ins().select(is_normal, normal, subnormal);
        let mag = self.b.ins().select(is_special, special, finite);
        let bits = self.b.ins().bor(mag, sign);
        self.b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
    }

    /// The bits (an `i16`) of the binary16 value nearest `x`, an `f32`; ties to even, past
    /// the range infinity, a NaN's payload kept.
    pub(super) fn f2h(&mut self, x: Value) -> Value {
        let b = self.b.ins().bitcast(types::I32, MemFlagsData::new(), x);
        let sign = self.b.ins().ushr_imm_u(b, 16);
        let sign = self.b.ins().band_imm_u(sign, 0x8000);
        let a = self.b.ins().band_imm_u(b, 0x7fff_ffff);
        // NaN: quiet, payload's top bits.
        let nan = self.b.ins().ushr_imm_u(a, 13);
        let nan = self.b.ins().band_imm_u(nan, 0x3ff);
        let nan = self.b.ins().bor_imm_u(nan, 0x7e00);
        // Subnormal results: the significand with its leading one, shifted right by
        // 126 - exponent and rounded on the bits shifted out.
        let e = self.b.ins().ushr_imm_u(a, 23);
        let m = self.b.ins().band_imm_u(a, 0x7f_ffff);
        let m = self.b.ins().bor_imm_u(m, 0x80_0000);
        let c126 = self.b.ins().iconst(types::I32, 126);
        let sh = self.b.ins().isub(c126, e);
        let r = self.b.ins().ushr(m, sh);
        let one = self.b.ins().iconst(types::I32, 1);
        let unit = self.b.ins().ishl(one, sh);
        let mask = self.b.ins().iadd_imm_s(unit, -1);
        let rest = self.b.ins().band(m, mask);
        let sh1 = self.b.ins().iadd_imm_s(sh, -1);
        let half = self.b.ins().ishl(one, sh1);
        let subnormal = self.round_even(r, rest, half);
        // Normal results: the exponent rebiased, rounded on the 13 bits dropped.
        let rn = self.b.ins().iadd_imm_s(a, -0x3800_0000);
        let hn = self.b.ins().ushr_imm_u(rn, 13);
        let rest = self.b.ins().band_imm_u(rn, 0x1fff);
        let half = self.b.ins().iconst(types::I32, 0x1000);
        let normal = self.round_even(hn, rest, half);
        let zero = self.b.ins().iconst(types::I32, 0);
        let inf = self.b.ins().iconst(types::I32, 0x7c00);
        let is_sub = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedLessThan, a, 0x3880_0000);
        let v = self.b.ins().select(is_sub, subnormal, normal);
        let tiny = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedLessThan, a, 0x3300_0000);
        let v = self.b.ins().select(tiny, zero, v);
        let big = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThanOrEqual, a, 0x477f_f000);
        let v = self.b.ins().select(big, inf, v);
        let is_nan = self
            .b
            .ins()
            .icmp_imm_s(IntCC::UnsignedGreaterThan, a, 0x7f80_0000);
        let v = self.b.ins().select(is_nan, nan, v);
        let v = self.b.ins().bor(v, sign);
        self.b.ins().ireduce(types::I16, v)
    }

    /// `kept + 1` when the dropped bits `rest` are more than `half`, or exactly `half` and
    /// `kept` is odd; else `kept`.
    fn round_even(&mut self, kept: Value, rest: Value, half: Value) -> Value {
        let above = self.b.ins().icmp(IntCC::UnsignedGreaterThan, rest, half);
        let tie = self.b.ins().icmp(IntCC::Equal, rest, half);
        let odd = self.b.ins().band_imm_u(kept, 1);
        let odd = self.b.ins().icmp_imm_s(IntCC::NotEqual, odd, 0);
        let tie_odd = self.b.ins().band(tie, odd);
        let up = self.b.ins().bor(above, tie_odd);
        let up = self.b.ins().uextend(types::I32, up);
        self.b.ins().iadd(kept, up)
    }

    /// `x`, an `f32`, rounded to the nearest binary16 value.
    pub(super) fn round_half(&mut self, x: Value) -> Value {
        let bits = self.f2h(x);
        self.h2f(bits)
    }

    /// `x`, an `f64`, rounded once to the nearest binary16 value (an `f32`): the step to
    /// `f32` rounds to odd (truncated, lowest bit set when inexact), which keeps the second
    /// rounding exact.
    pub(super) fn f16_of_f64(&mut self, x: Value) -> Value {
        let f = self.b.ins().fdemote(types::F32, x);
        let back = self.b.ins().fpromote(types::F64, f);
        let inexact = self.b.ins().fcmp(FloatCC::NotEqual, back, x);
        let ab = self.b.ins().fabs(back);
        let ax = self.b.ins().fabs(x);
        let above = self.b.ins().fcmp(FloatCC::GreaterThan, ab, ax);
        let bits = self.b.ins().bitcast(types::I32, MemFlagsData::new(), f);
        let down = self.b.ins().iadd_imm_s(bits, -1);
        let bits = self.b.ins().select(above, down, bits);
        let odd = self.b.ins().bor_imm_u(bits, 1);
        let bits = self.b.ins().select(inexact, odd, bits);
        let f = self.b.ins().bitcast(types::F32, MemFlagsData::new(), bits);
        self.round_half(f)
    }
}
