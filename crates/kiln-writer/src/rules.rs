//! kiln's semantic rules where target languages differ, stated once for every writer: which
//! operators every C-like language writes as plain infix, integer division by zero and
//! overflow, shift amounts, saturating float-to-int casts, and which math functions a target's
//! own library computes within kiln's bounds. The writers spell these out; what the result is
//! comes from here.

use crate::WriteError;
use kiln_ir::{BinaryOp, MathFn, ScalarType, ScalarValue};

/// `a op b` as every C-like target writes it, where the rule is the plain infix operator:
/// comparisons, float `+ - * /`, and `bool` `&&`, `||` and `!=` (for `^`). `None` for the
/// operators whose rule needs more (integer arithmetic, float `%`); an error for operators a
/// type does not have.
pub fn infix(op: BinaryOp, s: ScalarType, a: &str, b: &str) -> Result<Option<String>, WriteError> {
    if op.is_compare() {
        return Ok(Some(format!("({a} {} {b})", op.symbol())));
    }
    if s.is_float() {
        return match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                Ok(Some(format!("({a} {} {b})", op.symbol())))
            }
            BinaryOp::Rem => Ok(None),
            _ => Err(WriteError(format!("`{}` on floats", op.symbol()))),
        };
    }
    if s == ScalarType::Bool {
        return match op {
            BinaryOp::And => Ok(Some(format!("({a} && {b})"))),
            BinaryOp::Or => Ok(Some(format!("({a} || {b})"))),
            BinaryOp::Xor => Ok(Some(format!("({a} != {b})"))),
            _ => Err(WriteError(format!("`{}` on bool", op.symbol()))),
        };
    }
    Ok(None)
}

/// How much of a shift amount counts: the amount is taken modulo the bit width of `s`
/// (Rust's `wrapping_shl`/`wrapping_shr`), so a writer masks it with this.
pub fn shift_mask(s: ScalarType) -> u32 {
    s.bits() - 1
}

/// Integer division or remainder made total: `x / 0 = x`, `x % 0 = 0`, `MIN / -1 = MIN` and
/// `MIN % -1 = 0`. Writers emit a helper `a, b -> guard ? guarded : a op b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntDivision {
    /// [`BinaryOp::Div`] or [`BinaryOp::Rem`].
    pub op: BinaryOp,
    /// The operands' type, as the target holds them.
    pub ty: ScalarType,
}

impl IntDivision {
    /// The rule for `op` on `ty`; `None` unless `op` is `/` or `%` on an integer type.
    pub fn of(op: BinaryOp, ty: ScalarType) -> Option<IntDivision> {
        let division = matches!(op, BinaryOp::Div | BinaryOp::Rem);
        (division && ty.is_int()).then_some(IntDivision { op, ty })
    }

    /// The helper's name, `kiln_div_<type>` or `kiln_rem_<type>`, with the target's name for
    /// the type.
    pub fn helper_name(&self, type_name: &str) -> String {
        let op = if self.op == BinaryOp::Div {
            "div"
        } else {
            "rem"
        };
        format!("kiln_{op}_{type_name}")
    }

    /// The condition on the helper's parameters `a` and `b` under which the result is not
    /// the target's own `a op b`: `b == 0`, and for signed types `a == MIN && b == -1`.
    /// `lit` writes a literal of [`IntDivision::ty`].
    pub fn guard(&self, lit: impl Fn(ScalarValue) -> String) -> String {
        let zero = lit(ScalarValue::zero(self.ty));
        if !self.ty.is_signed() {
            return format!("b == {zero}");
        }
        let min = lit(ScalarValue::from_bits(
            self.ty,
            1u64 << (self.ty.bits() - 1),
        ));
        let minus_one = lit(ScalarValue::from_bits(self.ty, u64::MAX));
        format!("b == {zero} || (a == {min} && b == {minus_one})")
    }

    /// Whether the result where [`IntDivision::guard`] holds is the dividend `a` (division)
    /// rather than zero (remainder).
    pub fn guarded_is_dividend(&self) -> bool {
        self.op == BinaryOp::Div
    }
}

/// A float-to-integer cast as Rust's `as` does it: NaN gives 0, values at or past a bound
/// give that bound, the rest are truncated toward zero.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Saturation {
    /// The target type's largest value, which every float `>= hi` gives.
    pub max: i128,
    /// The target type's smallest value, which every float `<= lo` gives.
    pub min: i128,
    /// The smallest float past the target's range: `2^(bits-1)` signed, `2^bits` unsigned.
    pub hi: f64,
    /// The largest float at or below the target's minimum: `-2^(bits-1)` signed, `-1`
    /// unsigned (floats between -1 and 0 truncate to 0).
    pub lo: f64,
}

impl Saturation {
    /// The rule for casts to the integer type `to`.
    pub fn of(to: ScalarType) -> Saturation {
        let bits = to.bits() as i32;
        if to.is_signed() {
            let lim = 2f64.powi(bits - 1);
            Saturation {
                max: (1i128 << (bits - 1)) - 1,
                min: -(1i128 << (bits - 1)),
                hi: lim,
                lo: -lim,
            }
        } else {
            Saturation {
                max: (1i128 << bits) - 1,
                min: 0,
                hi: 2f64.powi(bits),
                lo: -1.0,
            }
        }
    }

    /// `v` (`max` or `min`) as a value of `ty` (the target type or the wider register type a
    /// target holds it in).
    pub fn value(v: i128, ty: ScalarType) -> ScalarValue {
        ScalarValue::from_bits(ty, v as u64)
    }
}

/// Whether `fun` on floats may be the target library's function of the same name: these meet
/// kiln's accuracy bound on every target (a writer may still use its own, as WGSL does for
/// f32 exponentials and logarithms where drivers are loose). The rest (rounding that keeps
/// NaN, `fract`, `copysign`, min/max with kiln's NaN and zero rule, ...) each writer spells
/// out.
pub fn library_math(fun: MathFn) -> bool {
    matches!(
        fun,
        MathFn::Sin
            | MathFn::Cos
            | MathFn::Tan
            | MathFn::Asin
            | MathFn::Acos
            | MathFn::Atan
            | MathFn::Sinh
            | MathFn::Cosh
            | MathFn::Tanh
            | MathFn::Exp
            | MathFn::Exp2
            | MathFn::Log
            | MathFn::Log2
            | MathFn::Sqrt
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The saturation bounds, applied as a writer applies them, give what Rust's `as` gives,
    /// for every integer type and floats around each bound, NaN and infinities.
    #[test]
    fn saturation_matches_rust_as() {
        let cast = |v: f64, to: ScalarType| -> i128 {
            match to {
                ScalarType::I8 => v as i8 as i128,
                ScalarType::U8 => v as u8 as i128,
                ScalarType::I16 => v as i16 as i128,
                ScalarType::U16 => v as u16 as i128,
                ScalarType::I32 => v as i32 as i128,
                ScalarType::U32 => v as u32 as i128,
                ScalarType::I64 => v as i64 as i128,
                _ => v as u64 as i128,
            }
        };
        let ints = ScalarType::ALL.into_iter().filter(|s| s.is_int());
        for to in ints {
            let rule = Saturation::of(to);
            let mut probes = vec![
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                0.0,
                -0.0,
                0.5,
                -0.5,
            ];
            for b in [
                rule.hi,
                rule.lo,
                rule.max as f64,
                rule.min as f64,
                -1.0,
                1.0,
            ] {
                probes.extend([b, b.next_up(), b.next_down(), b + 0.5, b - 0.5]);
            }
            for v in probes {
                let model = if v.is_nan() {
                    0
                } else if v >= rule.hi {
                    rule.max
                } else if v <= rule.lo {
                    rule.min
                } else {
                    v.trunc() as i128
                };
                assert_eq!(model, cast(v, to), "{v} as {to}");
            }
        }
    }

    /// The division rule, applied as the helpers apply it, gives Rust's wrapping division and
    /// remainder wherever Rust defines them, and kiln's values for a zero divisor.
    #[test]
    fn division_guard_matches_wrapping_division() {
        for op in [BinaryOp::Div, BinaryOp::Rem] {
            for ty in [ScalarType::I8, ScalarType::U8] {
                let rule = IntDivision::of(op, ty).unwrap();
                let lit = |v: ScalarValue| {
                    let bits = v.to_bits() as u8;
                    if ty.is_signed() {
                        (bits as i8).to_string()
                    } else {
                        bits.to_string()
                    }
                };
                let guard = rule.guard(lit);
                for a in 0..=255u8 {
                    for b in 0..=255u8 {
                        let (sa, sb) = if ty.is_signed() {
                            ((a as i8).to_string(), (b as i8).to_string())
                        } else {
                            (a.to_string(), b.to_string())
                        };
                        let holds = guard.split(" || ").any(|part| {
                            let part = part.trim_start_matches('(').trim_end_matches(')');
                            part.split(" && ").all(|eq| match eq.split_once(" == ") {
                                Some(("a", v)) => v == sa,
                                Some(("b", v)) => v == sb,
                                _ => panic!("unexpected guard {guard}"),
                            })
                        });
                        let (got, want) = match (ty.is_signed(), holds) {
                            (true, true) => {
                                let r = if rule.guarded_is_dividend() {
                                    a as i8
                                } else {
                                    0
                                };
                                let want = match (b, op) {
                                    (0, BinaryOp::Div) => a as i8,
                                    (0, _) => 0,
                                    (_, BinaryOp::Div) => (a as i8).wrapping_div(b as i8),
                                    _ => (a as i8).wrapping_rem(b as i8),
                                };
                                (r as i32, want as i32)
                            }
                            (true, false) => {
                                let (x, y) = (a as i8, b as i8);
                                let r = if op == BinaryOp::Div { x / y } else { x % y };
                                (r as i32, r as i32)
                            }
                            (false, true) => {
                                assert_eq!(b, 0, "{guard} holds for {a} {b}");
                                let r = if rule.guarded_is_dividend() { a } else { 0 };
                                let want = if op == BinaryOp::Div { a } else { 0 };
                                (r as i32, want as i32)
                            }
                            (false, false) => (0, 0),
                        };
                        assert_eq!(got, want, "{a} {} {b} on {ty}", op.symbol());
                    }
                }
            }
        }
    }
}
