//! 64-bit values (f64, i64, u64) in quads. A 128-bit vector holds two 64-bit lanes, so a quad
//! keeps a varying 64-bit value in two halves (f64x2 or i64x2): lanes 0 and 1 in
//! [`Lanes::v`], lanes 2 and 3 in [`Lanes::hi`]. Lane masks stay one i32x4 whatever the type
//! (see `super`): a comparison of halves narrows their two i64x2 masks into one, and a select
//! or a masked assignment widens a mask into two. Conversions from and to 32-bit lanes take
//! each half's two lanes from, or put them into, the low or high 64 bits of the 32-bit
//! vector. Operations without a vector instruction (division, f64 <-> integer casts, ...) run
//! lane by lane with the scalar lowering, as for 32-bit lanes. In a kernel with group
//! barriers, a 64-bit value that varies per work item and lives from one run to the next
//! keeps that run one work item at a time (private memory holds a quad's copies as 4-byte
//! lanes).

use super::{in_halves, mem_flags_little, vty, Lanes, QuadState};
use crate::lower::{FnCtx, Lowerer, R};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, ConstantData, InstBuilder, Value};
use kiln_ir::*;

impl Lowerer<'_, '_> {
    /// True when expression `e` of type `ty` computes 64-bit lanes or reads them: its quad
    /// form is [`Self::quad_eval_wide`]'s.
    pub(super) fn involves_wide(fx: &FnCtx, e: &Expr, ty: ScalarType) -> bool {
        in_halves(ty)
            || operands(e)
                .iter()
                .any(|o| fx.types[o.index()].as_scalar().is_some_and(in_halves))
    }

    /// The two halves of 64-bit operand `h`; a value the same in all four lanes is splatted
    /// into both.
    pub(super) fn halves_of(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        h: Handle,
    ) -> R<(Value, Value)> {
        if let Some(l) = qs.lanes[h.index()] {
            return l
                .hi
                .map(|hi| (l.v, hi))
                .ok_or_else(|| format!("%{} has no 64-bit lanes", h.0));
        }
        let s = fx.types[h.index()]
            .as_scalar()
            .ok_or("non-scalar operand")?;
        let v = self.get(fx, h)?[0];
        let both = self.b.ins().splat(vty(s), v);
        Ok((both, both))
    }

    /// The lanes of operand `h` of any type: 64-bit types in two halves, others in one vector
    /// (see `lanes_of`).
    pub(super) fn quad_value(&mut self, fx: &mut FnCtx, qs: &QuadState, h: Handle) -> R<Lanes> {
        if fx.types[h.index()].as_scalar().is_some_and(in_halves) {
            let (lo, hi) = self.halves_of(fx, qs, h)?;
            return Ok(Lanes::halves(lo, hi));
        }
        Ok(Lanes::varying(self.lanes_of(fx, qs, h)?))
    }

    /// The quad form of expression `e` (not a load), of type `ty`, where it or an operand is
    /// 64-bit.
    pub(super) fn quad_eval_wide(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        e: &Expr,
        ty: ScalarType,
    ) -> R<Lanes> {
        use ScalarType::*;
        Ok(match *e {
            Expr::Binary { op, lhs, rhs } => {
                let s = fx.types[lhs.index()]
                    .as_scalar()
                    .ok_or("non-scalar operand")?;
                let a = self.halves_of(fx, qs, lhs)?;
                if matches!(op, BinaryOp::Shl | BinaryOp::Shr) && qs.lanes[rhs.index()].is_none() {
                    let amount = self.get(fx, rhs)?[0];
                    let lo = self.shift(op, s, a.0, amount);
                    return Ok(Lanes::halves(lo, self.shift(op, s, a.1, amount)));
                }
                let b = self.halves_of(fx, qs, rhs)?;
                let vector = |l: &mut Self, x: Value, y: Value| match s {
                    F64 => l.float_binary(op, x, y),
                    _ => l.int_binary(op, s, x, y),
                };
                match vector(self, a.0, b.0) {
                    Some(lo) => {
                        let hi =
                            vector(self, a.1, b.1).ok_or("halves differ in their operation")?;
                        match op.is_compare() {
                            true => Lanes::varying(self.low_dwords(lo, hi)),
                            false => Lanes::halves(lo, hi),
                        }
                    }
                    None => {
                        let out = if op.is_compare() { Bool } else { s };
                        let args = [(Lanes::halves(a.0, a.1), s), (Lanes::halves(b.0, b.1), s)];
                        self.per_lane(&args, out, |l, x| l.binary(op, s, x[0], x[1]))?
                    }
                }
            }
            Expr::Unary { op, arg } => {
                let (lo, hi) = self.halves_of(fx, qs, arg)?;
                let unary = |l: &mut Self, v: Value| match op {
                    UnaryOp::Neg if ty == F64 => l.b.ins().fneg(v),
                    UnaryOp::Neg => l.b.ins().ineg(v),
                    UnaryOp::Not => l.b.ins().bnot(v),
                };
                let lo = unary(self, lo);
                Lanes::halves(lo, unary(self, hi))
            }
            Expr::Bitcast { arg, .. } => {
                let (lo, hi) = self.halves_of(fx, qs, arg)?;
                let bitcast = |l: &mut Self, v: Value| match l.b.func.dfg.value_type(v) {
                    t if t == vty(ty) => v,
                    _ => l.b.ins().bitcast(vty(ty), mem_flags_little(), v),
                };
                let lo = bitcast(self, lo);
                Lanes::halves(lo, bitcast(self, hi))
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let (a, b) = (
                    self.halves_of(fx, qs, accept)?,
                    self.halves_of(fx, qs, reject)?,
                );
                match qs.lanes[cond.index()] {
                    Some(m) => self.blend(m.v, Lanes::halves(a.0, a.1), Lanes::halves(b.0, b.1)),
                    None => {
                        let c = self.get(fx, cond)?[0];
                        let lo = self.b.ins().select(c, a.0, b.0);
                        Lanes::halves(lo, self.b.ins().select(c, a.1, b.1))
                    }
                }
            }
            Expr::Cast { arg, to } => {
                let from = fx.types[arg.index()].as_scalar().ok_or("non-scalar cast")?;
                self.cast_wide(fx, qs, arg, from, to)?
            }
            Expr::Math { fun, ref args } => {
                let s = fx.types[args[0].index()]
                    .as_scalar()
                    .ok_or("non-scalar math")?;
                let lanes: Vec<Lanes> = args
                    .iter()
                    .map(|a| self.quad_value(fx, qs, *a))
                    .collect::<R<_>>()?;
                let lo: Vec<Value> = lanes.iter().map(|l| l.v).collect();
                let hi: Vec<Value> = lanes.iter().filter_map(|l| l.hi).collect();
                if s == F64 && fun == MathFn::IsNan {
                    let m_lo = self.b.ins().fcmp(FloatCC::Unordered, lo[0], lo[0]);
                    let m_hi = self.b.ins().fcmp(FloatCC::Unordered, hi[0], hi[0]);
                    return Ok(Lanes::varying(self.low_dwords(m_lo, m_hi)));
                }
                let vector = |l: &mut Self, xs: &[Value]| match s {
                    F64 => l.float_math(fun, xs),
                    I64 | U64 => l.int_math(fun, s, xs),
                    _ => None,
                };
                match vector(self, &lo) {
                    Some(lo) => {
                        let hi = vector(self, &hi).ok_or("64-bit math without halves")?;
                        Lanes::halves(lo, hi)
                    }
                    None => {
                        let args: Vec<(Lanes, ScalarType)> =
                            lanes.into_iter().map(|l| (l, s)).collect();
                        self.per_lane(&args, ty, |l, x| l.math(fun, s, x))?
                    }
                }
            }
            // Subgroups have one lane on the CPU: each work item is its own subgroup.
            Expr::Subgroup { op, arg, .. } => {
                let a = self.quad_value(fx, qs, arg)?;
                match op {
                    SubgroupOp::ExclusiveAdd => {
                        let z = self.zero(ty);
                        let z = self.b.ins().splat(vty(ty), z);
                        Lanes::halves(z, z)
                    }
                    _ => a,
                }
            }
            ref other => return Err(format!("expression {other:?} in a vectorized 64-bit body")),
        })
    }

    /// A cast of `arg` from `from` to `to`, one of them 64-bit.
    fn cast_wide(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        arg: Handle,
        from: ScalarType,
        to: ScalarType,
    ) -> R<Lanes> {
        use ScalarType::*;
        let a = self.quad_value(fx, qs, arg)?;
        let convert = |l: &mut Self, half: Value| match from {
            F32 => l.b.ins().fvpromote_low(half),
            I32 => {
                let wide = l.b.ins().swiden_low(half);
                l.b.ins().fcvt_from_sint(types::F64X2, wide)
            }
            _ => {
                let wide = l.b.ins().uwiden_low(half);
                l.b.ins().fcvt_from_uint(types::F64X2, wide)
            }
        };
        let hi = |a: Lanes| a.hi.ok_or("64-bit cast without halves");
        Ok(match (from, to) {
            _ if from == to => a,
            (I64, U64) | (U64, I64) => a,
            (F32 | I32 | U32, F64) => {
                let lo = convert(self, a.v);
                let high = self.high_half(a.v);
                Lanes::halves(lo, convert(self, high))
            }
            (I32, I64 | U64) => {
                let lo = self.b.ins().swiden_low(a.v);
                Lanes::halves(lo, self.b.ins().swiden_high(a.v))
            }
            (U32, I64 | U64) => {
                let lo = self.b.ins().uwiden_low(a.v);
                Lanes::halves(lo, self.b.ins().uwiden_high(a.v))
            }
            (I64 | U64, I32 | U32) => Lanes::varying(self.low_dwords(a.v, hi(a)?)),
            (Bool, I64 | U64) => {
                let (lo, hi) = self.wide_masks(a.v, types::I64X2);
                let one = self.b.ins().iconst(types::I64, 1);
                let one = self.b.ins().splat(types::I64X2, one);
                let lo = self.b.ins().band(lo, one);
                Lanes::halves(lo, self.b.ins().band(hi, one))
            }
            (F64, F32) => {
                let (lo, hi) = (self.b.ins().fvdemote(a.v), self.b.ins().fvdemote(hi(a)?));
                Lanes::varying(self.low_halves(lo, hi))
            }
            _ => self.per_lane(&[(a, from)], to, |l, x| Ok(l.cast(x[0], from, to)))?,
        })
    }

    /// The i32x4 of the low 32 bits of each 64-bit lane of `lo` then `hi` (lanes 0 and 1,
    /// lanes 2 and 3): the lane mask of two i64x2 masks, or 64-bit integers truncated.
    fn low_dwords(&mut self, lo: Value, hi: Value) -> Value {
        // The low 32 bits of each 64-bit lane: dwords 0 and 2 of each.
        let dwords: [u8; 4] = [0, 2, 4, 6];
        let picked = dwords.iter().flat_map(|d| (d * 4)..(d * 4 + 4));
        let v = self.shuffle_bytes(lo, hi, picked.collect());
        self.b.ins().bitcast(types::I32X4, mem_flags_little(), v)
    }

    /// Lane mask `m` (i32x4) as two masks of vector type `ty` (f64x2 or i64x2), for
    /// `bitselect` on the halves of a 64-bit value.
    pub(super) fn wide_masks(&mut self, m: Value, ty: types::Type) -> (Value, Value) {
        let lo = self.b.ins().swiden_low(m);
        let hi = self.b.ins().swiden_high(m);
        match ty {
            types::I64X2 => (lo, hi),
            _ => (
                self.b.ins().bitcast(ty, mem_flags_little(), lo),
                self.b.ins().bitcast(ty, mem_flags_little(), hi),
            ),
        }
    }

    /// The high 64 bits of `v` moved to the low ones (in `v`'s type), for the conversions
    /// that read two lanes from the low half.
    fn high_half(&mut self, v: Value) -> Value {
        let ty = self.b.func.dfg.value_type(v);
        let bytes = (8..16).chain(8..16).collect();
        let moved = self.shuffle_bytes(v, v, bytes);
        self.b.ins().bitcast(ty, mem_flags_little(), moved)
    }

    /// The low 64 bits of `lo` then the low 64 bits of `hi` (in `lo`'s type).
    fn low_halves(&mut self, lo: Value, hi: Value) -> Value {
        let ty = self.b.func.dfg.value_type(lo);
        let joined = self.shuffle_bytes(lo, hi, (0..8).chain(16..24).collect());
        self.b.ins().bitcast(ty, mem_flags_little(), joined)
    }

    /// The i8x16 whose byte `i` is byte `bytes[i]` of `a` then `b` (0 to 31).
    fn shuffle_bytes(&mut self, a: Value, b: Value, bytes: Vec<u8>) -> Value {
        let mut bytes_of = |v: Value| match self.b.func.dfg.value_type(v) {
            types::I8X16 => v,
            _ => self.b.ins().bitcast(types::I8X16, mem_flags_little(), v),
        };
        let (a, b) = (bytes_of(a), bytes_of(b));
        let mask = self.b.func.dfg.immediates.push(ConstantData::from(bytes));
        self.b.ins().shuffle(a, b, mask)
    }
}
