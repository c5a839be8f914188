//! Quad operations: vector arithmetic, shifts, casts, min/max and math, with kiln's rules;
//! what has no vector instruction runs lane by lane.

use super::*;

impl Lowerer<'_, '_> {
    pub(super) fn vbinary(&mut self, op: BinaryOp, s: ScalarType, a: Value, b: Value) -> R<Value> {
        if s == ScalarType::F32 {
            if let Some(v) = self.float_binary(op, a, b) {
                return Ok(v);
            }
            let args = [(Lanes::varying(a), s), (Lanes::varying(b), s)];
            return Ok(self
                .per_lane(&args, s, |l, x| l.binary(op, s, x[0], x[1]))?
                .v);
        }
        if let Some(v) = self.int_binary(op, s, a, b) {
            return Ok(v);
        }
        let out = if op.is_compare() { ScalarType::Bool } else { s };
        let args = [(Lanes::varying(a), s), (Lanes::varying(b), s)];
        Ok(self
            .per_lane(&args, out, |l, x| l.binary(op, s, x[0], x[1]))?
            .v)
    }

    /// A shift of integer vector `a` (of type `s`) by the one amount `amount`: one vector
    /// shift, which takes the amount modulo the lane width, as the IR does.
    pub(super) fn shift(&mut self, op: BinaryOp, s: ScalarType, a: Value, amount: Value) -> Value {
        match op {
            BinaryOp::Shl => self.b.ins().ishl(a, amount),
            _ if s.is_signed() => self.b.ins().sshr(a, amount),
            _ => self.b.ins().ushr(a, amount),
        }
    }

    /// `op` on integer or lane-mask vectors of type `s` (i32x4, i64x2) where it has a vector
    /// instruction: arithmetic gives the operands' type, a comparison a lane mask of the same
    /// lane width. `None` for the other operations.
    pub(super) fn int_binary(
        &mut self,
        op: BinaryOp,
        s: ScalarType,
        a: Value,
        b: Value,
    ) -> Option<Value> {
        let signed = s.is_signed();
        let cc = |sc: IntCC, uc: IntCC| if signed { sc } else { uc };
        Some(match op {
            BinaryOp::Add => self.b.ins().iadd(a, b),
            BinaryOp::Sub => self.b.ins().isub(a, b),
            BinaryOp::Mul => self.b.ins().imul(a, b),
            BinaryOp::And => self.b.ins().band(a, b),
            BinaryOp::Or => self.b.ins().bor(a, b),
            BinaryOp::Xor => self.b.ins().bxor(a, b),
            BinaryOp::Eq => self.b.ins().icmp(IntCC::Equal, a, b),
            BinaryOp::Ne => self.b.ins().icmp(IntCC::NotEqual, a, b),
            BinaryOp::Lt if s != ScalarType::Bool => {
                self.b
                    .ins()
                    .icmp(cc(IntCC::SignedLessThan, IntCC::UnsignedLessThan), a, b)
            }
            BinaryOp::Le if s != ScalarType::Bool => self.b.ins().icmp(
                cc(IntCC::SignedLessThanOrEqual, IntCC::UnsignedLessThanOrEqual),
                a,
                b,
            ),
            BinaryOp::Gt if s != ScalarType::Bool => self.b.ins().icmp(
                cc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan),
                a,
                b,
            ),
            BinaryOp::Ge if s != ScalarType::Bool => self.b.ins().icmp(
                cc(
                    IntCC::SignedGreaterThanOrEqual,
                    IntCC::UnsignedGreaterThanOrEqual,
                ),
                a,
                b,
            ),
            _ => return None,
        })
    }

    /// `op` on float vectors (f32x4, f64x2) where it has a vector instruction: arithmetic
    /// gives the operands' type, a comparison a lane mask of the same lane width. `None` for
    /// the other operations.
    pub(super) fn float_binary(&mut self, op: BinaryOp, a: Value, b: Value) -> Option<Value> {
        let cc = match op {
            BinaryOp::Eq => FloatCC::Equal,
            BinaryOp::Ne => FloatCC::NotEqual,
            BinaryOp::Lt => FloatCC::LessThan,
            BinaryOp::Le => FloatCC::LessThanOrEqual,
            BinaryOp::Gt => FloatCC::GreaterThan,
            BinaryOp::Ge => FloatCC::GreaterThanOrEqual,
            BinaryOp::Add => return Some(self.b.ins().fadd(a, b)),
            BinaryOp::Sub => return Some(self.b.ins().fsub(a, b)),
            BinaryOp::Mul => return Some(self.b.ins().fmul(a, b)),
            BinaryOp::Div => return Some(self.b.ins().fdiv(a, b)),
            _ => return None,
        };
        Some(self.b.ins().fcmp(cc, a, b))
    }

    pub(super) fn vcast(&mut self, a: Value, from: ScalarType, to: ScalarType) -> R<Value> {
        use ScalarType::*;
        Ok(match (from, to) {
            _ if from == to => a,
            (I32, U32) | (U32, I32) => a,
            // Narrow loads arrive widened (zero- or sign-extended as their type says).
            (I8 | U8 | I16 | U16, I32 | U32) => a,
            (I8 | U8 | I16 | U16, F32) => self.b.ins().fcvt_from_sint(types::F32X4, a),
            (F32, I32) => self.b.ins().fcvt_to_sint_sat(types::I32X4, a),
            (I32, F32) => self.b.ins().fcvt_from_sint(types::F32X4, a),
            (Bool, I32 | U32) => {
                let one = self.iconst32(1);
                let ones = self.b.ins().splat(types::I32X4, one);
                self.b.ins().band(a, ones)
            }
            (I32 | U32, Bool) => {
                let zero = self.iconst32(0);
                let z = self.b.ins().splat(types::I32X4, zero);
                self.b.ins().icmp(IntCC::NotEqual, a, z)
            }
            _ => {
                self.per_lane(&[(Lanes::varying(a), from)], to, |l, x| {
                    Ok(l.cast(x[0], from, to))
                })?
                .v
            }
        })
    }

    pub(super) fn vmath(
        &mut self,
        fun: MathFn,
        s: ScalarType,
        out: ScalarType,
        args: &[(Value, ScalarType)],
    ) -> R<Value> {
        if s == ScalarType::F32 {
            let xs: Vec<Value> = args.iter().map(|a| a.0).collect();
            if let Some(v) = self.float_math(fun, &xs) {
                return Ok(v);
            }
            if fun == MathFn::IsNan {
                return Ok(self.b.ins().fcmp(FloatCC::Unordered, xs[0], xs[0]));
            }
        }
        if matches!(s, ScalarType::I32 | ScalarType::U32) {
            let xs: Vec<Value> = args.iter().map(|a| a.0).collect();
            if let Some(v) = self.int_math(fun, s, &xs) {
                return Ok(v);
            }
        }
        let lanes: Vec<(Lanes, ScalarType)> =
            args.iter().map(|(v, s)| (Lanes::varying(*v), *s)).collect();
        Ok(self.per_lane(&lanes, out, |l, x| l.math(fun, s, x))?.v)
    }

    /// The math functions that have vector instructions for integer vectors of type `s`
    /// (i32x4, i64x2) and give a vector of the same type: `None` for the others.
    pub(super) fn int_math(&mut self, fun: MathFn, s: ScalarType, xs: &[Value]) -> Option<Value> {
        let signed = s.is_signed();
        let mut min_max = |max: bool, x: Value, y: Value| match (max, signed) {
            (true, true) => self.b.ins().smax(x, y),
            (true, false) => self.b.ins().umax(x, y),
            (false, true) => self.b.ins().smin(x, y),
            (false, false) => self.b.ins().umin(x, y),
        };
        Some(match fun {
            MathFn::Min | MathFn::Max => min_max(fun == MathFn::Max, xs[0], xs[1]),
            MathFn::Clamp => {
                let low = min_max(true, xs[0], xs[1]);
                min_max(false, low, xs[2])
            }
            // Wraps: `abs(MIN) = MIN`, as the IR says.
            MathFn::Abs if signed => self.b.ins().iabs(xs[0]),
            MathFn::Abs => xs[0],
            _ => return None,
        })
    }

    /// The math functions that have vector instructions for float vectors (f32x4, f64x2) and
    /// give a vector of the same type: `None` for the others.
    pub(super) fn float_math(&mut self, fun: MathFn, xs: &[Value]) -> Option<Value> {
        let x = xs[0];
        Some(match fun {
            MathFn::Sqrt => self.b.ins().sqrt(x),
            MathFn::Abs => self.b.ins().fabs(x),
            MathFn::Floor => self.b.ins().floor(x),
            MathFn::Ceil => self.b.ins().ceil(x),
            MathFn::Trunc => self.b.ins().trunc(x),
            MathFn::Min | MathFn::Max => self.min_max(fun == MathFn::Max, x, xs[1]),
            // `min(max(x, lo), hi)`, as the IR defines it.
            MathFn::Clamp => {
                let low = self.min_max(true, x, xs[1]);
                self.min_max(false, low, xs[2])
            }
            _ => return None,
        })
    }

    /// The maximum (`max`) or minimum of float vectors `x` and `y` per lane with the IR's NaN
    /// rule: when one is NaN, the other.
    pub(super) fn min_max(&mut self, max: bool, x: Value, y: Value) -> Value {
        let fty = self.b.func.dfg.value_type(x);
        if let Some((pick_x, x, c)) = self.literal_pick(max, x, y) {
            let pick_x = self.b.ins().bitcast(fty, mem_flags_little(), pick_x);
            return self.b.ins().bitselect(pick_x, x, c);
        }
        // A NaN operand takes the other's value (both NaN: y's), so that what follows sees
        // NaN only where both are.
        let lane_mask = |l: &mut Self, cc: FloatCC, a: Value, b: Value| {
            let m = l.b.ins().fcmp(cc, a, b);
            l.b.ins().bitcast(fty, mem_flags_little(), m)
        };
        let x_nan = lane_mask(self, FloatCC::Unordered, x, x);
        let x = self.b.ins().bitselect(x_nan, y, x);
        let y_nan = lane_mask(self, FloatCC::Unordered, y, y);
        let y = self.b.ins().bitselect(y_nan, x, y);
        // `a < b ? b : a` both ways round (one maxps/maxpd or minps/minpd each, which give
        // their second operand for equal ones): the two differ only for zeros of opposite
        // signs, where the `and` of the maxima is +0.0 and the `or` of the minima -0.0.
        let pick = |l: &mut Self, a: Value, b: Value| {
            let (lo, hi) = if max { (a, b) } else { (b, a) };
            let take_b = lane_mask(l, FloatCC::LessThan, lo, hi);
            l.b.ins().bitselect(take_b, b, a)
        };
        let (r1, r2) = (pick(self, x, y), pick(self, y, x));
        if max {
            self.b.ins().band(r1, r2)
        } else {
            self.b.ins().bor(r1, r2)
        }
    }
}
