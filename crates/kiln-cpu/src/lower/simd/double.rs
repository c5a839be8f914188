//! f64 values in quads. A 128-bit vector holds two f64 lanes, so a quad keeps a varying f64
//! value in two f64x2 halves: lanes 0 and 1 in [`Lanes::v`], lanes 2 and 3 in [`Lanes::hi`].
//! Lane masks stay one i32x4 whatever the type (see `super`): a comparison of f64 halves
//! narrows their two i64x2 masks into one, and a select or a masked assignment widens a mask
//! into two. Conversions from and to 32-bit lanes take each half's two lanes from, or put
//! them into, the low or high 64 bits of the 32-bit vector. Operations without a vector
//! instruction run lane by lane with the scalar lowering, as for 32-bit lanes. In a kernel
//! with group barriers, an f64 that varies per work item and lives from one run to the next
//! keeps that run one work item at a time (private memory holds a quad's copies as 4-byte
//! lanes).

use super::{mem_flags_little, vty, Lanes, QuadState};
use crate::lower::{FnCtx, Lowerer, R};
use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{types, ConstantData, InstBuilder, Value};
use kiln_ir::*;

impl Lowerer<'_, '_> {
    /// True when expression `e` of type `ty` computes f64 lanes or reads them: its quad form
    /// is [`Self::quad_eval_f64`]'s.
    pub(super) fn involves_f64(fx: &FnCtx, e: &Expr, ty: ScalarType) -> bool {
        ty == ScalarType::F64
            || operands(e)
                .iter()
                .any(|o| fx.types[o.index()] == Type::Scalar(ScalarType::F64))
    }

    /// The two f64x2 halves of f64 operand `h`; a value the same in all four lanes is
    /// splatted into both.
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
                .ok_or_else(|| format!("%{} has no f64 lanes", h.0));
        }
        let v = self.get(fx, h)?[0];
        let both = self.b.ins().splat(types::F64X2, v);
        Ok((both, both))
    }

    /// The lanes of operand `h` of any type: f64 in two halves, others in one vector (see
    /// `lanes_of`).
    pub(super) fn quad_value(&mut self, fx: &mut FnCtx, qs: &QuadState, h: Handle) -> R<Lanes> {
        if fx.types[h.index()] == Type::Scalar(ScalarType::F64) {
            let (lo, hi) = self.halves_of(fx, qs, h)?;
            return Ok(Lanes::halves(lo, hi));
        }
        Ok(Lanes::varying(self.lanes_of(fx, qs, h)?))
    }

    /// The quad form of expression `e` (not a load), of type `ty`, where it or an operand is
    /// f64.
    pub(super) fn quad_eval_f64(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        e: &Expr,
        ty: ScalarType,
    ) -> R<Lanes> {
        use ScalarType::*;
        Ok(match *e {
            Expr::Binary { op, lhs, rhs } => {
                let (a, b) = (self.halves_of(fx, qs, lhs)?, self.halves_of(fx, qs, rhs)?);
                match self.float_binary(op, a.0, b.0) {
                    Some(lo) => {
                        let hi = self
                            .float_binary(op, a.1, b.1)
                            .ok_or("f64 halves differ in their operation")?;
                        match op.is_compare() {
                            true => Lanes::varying(self.join_masks(lo, hi)),
                            false => Lanes::halves(lo, hi),
                        }
                    }
                    None => {
                        let out = if op.is_compare() { Bool } else { F64 };
                        let args = [
                            (Lanes::halves(a.0, a.1), F64),
                            (Lanes::halves(b.0, b.1), F64),
                        ];
                        self.per_lane(&args, out, |l, x| l.binary(op, F64, x[0], x[1]))?
                    }
                }
            }
            Expr::Unary {
                op: UnaryOp::Neg,
                arg,
            } => {
                let (lo, hi) = self.halves_of(fx, qs, arg)?;
                let lo = self.b.ins().fneg(lo);
                Lanes::halves(lo, self.b.ins().fneg(hi))
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
                self.cast_f64(fx, qs, arg, from, to)?
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
                    return Ok(Lanes::varying(self.join_masks(m_lo, m_hi)));
                }
                let vector = match s {
                    F64 => self.float_math(fun, &lo),
                    _ => None,
                };
                match vector {
                    Some(lo) => {
                        let hi = self.float_math(fun, &hi).ok_or("f64 math without halves")?;
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
            ref other => return Err(format!("expression {other:?} in a vectorized f64 body")),
        })
    }

    /// A cast of `arg` from `from` to `to`, one of them f64.
    fn cast_f64(
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
        Ok(match (from, to) {
            (F64, F64) => a,
            (F32 | I32 | U32, F64) => {
                let lo = convert(self, a.v);
                let high = self.high_half(a.v);
                Lanes::halves(lo, convert(self, high))
            }
            (F64, F32) => {
                let hi = a.hi.ok_or("f64 cast without f64 lanes")?;
                let (lo, hi) = (self.b.ins().fvdemote(a.v), self.b.ins().fvdemote(hi));
                Lanes::varying(self.low_halves(lo, hi))
            }
            _ => self.per_lane(&[(a, from)], to, |l, x| Ok(l.cast(x[0], from, to)))?,
        })
    }

    /// The i32x4 lane mask of two i64x2 masks (lanes 0 and 1, lanes 2 and 3).
    fn join_masks(&mut self, lo: Value, hi: Value) -> Value {
        // The low 32 bits of each 64-bit lane: dwords 0 and 2 of each.
        let dwords: [u8; 4] = [0, 2, 4, 6];
        let picked = dwords.iter().flat_map(|d| (d * 4)..(d * 4 + 4));
        let v = self.shuffle_bytes(lo, hi, picked.collect());
        self.b.ins().bitcast(types::I32X4, mem_flags_little(), v)
    }

    /// Lane mask `m` (i32x4) as two f64x2 masks for `bitselect` on f64 halves.
    pub(super) fn wide_masks(&mut self, m: Value) -> (Value, Value) {
        let lo = self.b.ins().swiden_low(m);
        let hi = self.b.ins().swiden_high(m);
        (
            self.b.ins().bitcast(types::F64X2, mem_flags_little(), lo),
            self.b.ins().bitcast(types::F64X2, mem_flags_little(), hi),
        )
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
