//! Operations: builtins, binary operators, casts, min/max, math functions and atomics, each
//! with kiln's rules.

use super::*;

impl<'a, 'f> Lowerer<'a, 'f> {
    pub(super) fn builtin(&mut self, b: Builtin) -> Value {
        match b {
            Builtin::GlobalId(a) => self
                .b
                .ins()
                .iadd(self.gbase[a.index()], self.lid[a.index()]),
            Builtin::LocalId(a) => self.lid[a.index()],
            Builtin::GroupId(a) => self.gid[a.index()],
            Builtin::GroupSize(a) => self.gsize[a.index()],
            Builtin::NumGroups(a) => self.ngroups[a.index()],
            Builtin::GlobalSize(a) => self
                .b
                .ins()
                .imul(self.ngroups[a.index()], self.gsize[a.index()]),
            Builtin::LocalIndex | Builtin::SubgroupId => self.cur_item(),
            Builtin::SubgroupSize => self.iconst32(1),
            Builtin::SubgroupLane => self.iconst32(0),
        }
    }

    pub(super) fn binary(&mut self, op: BinaryOp, s: ScalarType, a: Value, b: Value) -> R<Value> {
        if s == ScalarType::F16 {
            let x = self.binary(op, ScalarType::F32, a, b)?;
            return Ok(match op.is_compare() {
                true => x,
                false => self.round_half(x),
            });
        }
        if s.is_float() {
            let cc = |c| Some(c);
            let fcc = match op {
                BinaryOp::Eq => cc(FloatCC::Equal),
                BinaryOp::Ne => cc(FloatCC::NotEqual),
                BinaryOp::Lt => cc(FloatCC::LessThan),
                BinaryOp::Le => cc(FloatCC::LessThanOrEqual),
                BinaryOp::Gt => cc(FloatCC::GreaterThan),
                BinaryOp::Ge => cc(FloatCC::GreaterThanOrEqual),
                _ => None,
            };
            if let Some(c) = fcc {
                return Ok(self.b.ins().fcmp(c, a, b));
            }
            return Ok(match op {
                BinaryOp::Add => self.b.ins().fadd(a, b),
                BinaryOp::Sub => self.b.ins().fsub(a, b),
                BinaryOp::Mul => self.b.ins().fmul(a, b),
                BinaryOp::Div => self.b.ins().fdiv(a, b),
                BinaryOp::Rem => self.call_import(
                    if s == ScalarType::F32 {
                        "kiln_fmod_f32"
                    } else {
                        "kiln_fmod_f64"
                    },
                    &[a, b],
                ),
                _ => return Err(format!("`{}` on {s}", op.symbol())),
            });
        }
        let signed = s.is_signed();
        let icc = |sc: IntCC, uc: IntCC| if signed { sc } else { uc };
        Ok(match op {
            BinaryOp::Add => self.b.ins().iadd(a, b),
            BinaryOp::Sub => self.b.ins().isub(a, b),
            BinaryOp::Mul => self.b.ins().imul(a, b),
            BinaryOp::Div | BinaryOp::Rem => {
                let zero = self.b.ins().icmp_imm_s(IntCC::Equal, b, 0);
                let bad = if signed {
                    let min = self.int_const(s, 1u64 << (s.bits() - 1));
                    let m1 = self.int_const(s, u64::MAX);
                    let is_min = self.b.ins().icmp(IntCC::Equal, a, min);
                    let is_m1 = self.b.ins().icmp(IntCC::Equal, b, m1);
                    let both = self.b.ins().band(is_min, is_m1);
                    self.b.ins().bor(zero, both)
                } else {
                    zero
                };
                let one = self.int_const(s, 1);
                let d = self.b.ins().select(bad, one, b);
                match (op, signed) {
                    (BinaryOp::Div, true) => self.b.ins().sdiv(a, d),
                    (BinaryOp::Div, false) => self.b.ins().udiv(a, d),
                    (_, true) => self.b.ins().srem(a, d),
                    (_, false) => self.b.ins().urem(a, d),
                }
            }
            BinaryOp::And => self.b.ins().band(a, b),
            BinaryOp::Or => self.b.ins().bor(a, b),
            BinaryOp::Xor => self.b.ins().bxor(a, b),
            BinaryOp::Shl => self.b.ins().ishl(a, b),
            BinaryOp::Shr if signed => self.b.ins().sshr(a, b),
            BinaryOp::Shr => self.b.ins().ushr(a, b),
            BinaryOp::Eq => self.b.ins().icmp(IntCC::Equal, a, b),
            BinaryOp::Ne => self.b.ins().icmp(IntCC::NotEqual, a, b),
            BinaryOp::Lt => {
                self.b
                    .ins()
                    .icmp(icc(IntCC::SignedLessThan, IntCC::UnsignedLessThan), a, b)
            }
            BinaryOp::Le => self.b.ins().icmp(
                icc(IntCC::SignedLessThanOrEqual, IntCC::UnsignedLessThanOrEqual),
                a,
                b,
            ),
            BinaryOp::Gt => self.b.ins().icmp(
                icc(IntCC::SignedGreaterThan, IntCC::UnsignedGreaterThan),
                a,
                b,
            ),
            BinaryOp::Ge => self.b.ins().icmp(
                icc(
                    IntCC::SignedGreaterThanOrEqual,
                    IntCC::UnsignedGreaterThanOrEqual,
                ),
                a,
                b,
            ),
        })
    }

    pub(super) fn cast(&mut self, x: Value, from: ScalarType, to: ScalarType) -> Value {
        use ScalarType::*;
        if from == to {
            return x;
        }
        if from == F16 {
            return self.cast(x, F32, to);
        }
        if to == F16 {
            // Integers reach binary16 through `f32` exactly or past its range (where both
            // give infinity); an `f64` rounds once.
            return match from {
                F64 => self.f16_of_f64(x),
                _ => {
                    let f = self.cast(x, from, F32);
                    self.round_half(f)
                }
            };
        }
        let (ft, tt) = (clty(from), clty(to));
        if to == Bool {
            return if from.is_float() {
                let z = self.zero(from);
                self.b.ins().fcmp(FloatCC::NotEqual, x, z)
            } else {
                self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0)
            };
        }
        if from.is_float() && to.is_float() {
            return if to == F64 {
                self.b.ins().fpromote(tt, x)
            } else {
                self.b.ins().fdemote(tt, x)
            };
        }
        if !from.is_float() && !to.is_float() {
            return match ft.bits().cmp(&tt.bits()) {
                std::cmp::Ordering::Equal => x,
                std::cmp::Ordering::Greater => self.b.ins().ireduce(tt, x),
                std::cmp::Ordering::Less => match self.loaded_wide(x, from.is_signed()) {
                    Some(w) => self.resize(w, tt, from.is_signed()),
                    None if from.is_signed() => self.b.ins().sextend(tt, x),
                    None => self.b.ins().uextend(tt, x),
                },
            };
        }
        if !from.is_float() {
            let wide = if ft.bits() < 32 {
                if let Some(w) = self.loaded_wide(x, from.is_signed()) {
                    self.resize(w, types::I32, from.is_signed())
                } else if from.is_signed() {
                    self.b.ins().sextend(types::I32, x)
                } else {
                    self.b.ins().uextend(types::I32, x)
                }
            } else {
                x
            };
            return if from.is_signed() {
                self.b.ins().fcvt_from_sint(tt, wide)
            } else {
                self.b.ins().fcvt_from_uint(tt, wide)
            };
        }
        if tt.bits() >= 32 {
            return if to.is_signed() {
                self.b.ins().fcvt_to_sint_sat(tt, x)
            } else {
                self.b.ins().fcvt_to_uint_sat(tt, x)
            };
        }
        let max = (1i64 << (to.bits() - if to.is_signed() { 1 } else { 0 })) - 1;
        let w = if to.is_signed() {
            self.b.ins().fcvt_to_sint_sat(types::I32, x)
        } else {
            self.b.ins().fcvt_to_uint_sat(types::I32, x)
        };
        let hi = self.iconst32(max);
        let w = if to.is_signed() {
            let lo = self.iconst32(-max - 1);
            let too_low = self.b.ins().icmp(IntCC::SignedLessThan, w, lo);
            let w = self.b.ins().select(too_low, lo, w);
            let too_high = self.b.ins().icmp(IntCC::SignedGreaterThan, w, hi);
            self.b.ins().select(too_high, hi, w)
        } else {
            let too_high = self.b.ins().icmp(IntCC::UnsignedGreaterThan, w, hi);
            self.b.ins().select(too_high, hi, w)
        };
        self.b.ins().ireduce(tt, w)
    }

    /// The integer `w` as type `to`: itself, reduced, or extended as `signed` says.
    pub(super) fn resize(&mut self, w: Value, to: ir::Type, signed: bool) -> Value {
        let from = self.b.func.dfg.value_type(w);
        match from.bits().cmp(&to.bits()) {
            std::cmp::Ordering::Equal => w,
            std::cmp::Ordering::Greater => self.b.ins().ireduce(to, w),
            std::cmp::Ordering::Less if signed => self.b.ins().sextend(to, w),
            std::cmp::Ordering::Less => self.b.ins().uextend(to, w),
        }
    }

    /// The 32-bit index `i` zero-extended to 64 bits; no instruction when `i` is a counter
    /// kept in 64 bits or an unsigned narrow load's extended value reduced (see
    /// [`Self::loaded_wide`]).
    pub(super) fn index64(&mut self, i: Value) -> Value {
        if let Some(w) = self.zero_extended.get(&i) {
            return *w;
        }
        match self.loaded_wide(i, false) {
            Some(w) => w,
            None => self.b.ins().uextend(types::I64, i),
        }
    }

    pub(super) fn imin_max(&mut self, s: ScalarType, max: bool, a: Value, b: Value) -> Value {
        let cc = match (s.is_signed(), max) {
            (true, false) => IntCC::SignedLessThan,
            (false, false) => IntCC::UnsignedLessThan,
            (true, true) => IntCC::SignedGreaterThan,
            (false, true) => IntCC::UnsignedGreaterThan,
        };
        let c = self.b.ins().icmp(cc, a, b);
        self.b.ins().select(c, a, b)
    }

    /// min/max with the IR's NaN rule: one NaN operand gives the other operand.
    pub(super) fn fmin_max(&mut self, max: bool, a: Value, b: Value) -> Value {
        if let Some((pick_x, x, c)) = self.literal_pick(max, a, b) {
            return self.b.ins().select(pick_x, x, c);
        }
        let r = if max {
            self.b.ins().fmax(a, b)
        } else {
            self.b.ins().fmin(a, b)
        };
        let a_nan = self.b.ins().fcmp(FloatCC::Unordered, a, a);
        let b_nan = self.b.ins().fcmp(FloatCC::Unordered, b, b);
        let r = self.b.ins().select(a_nan, b, r);
        self.b.ins().select(b_nan, a, r)
    }

    /// The float that every lane of `v` holds when a constant defines it: an `f32const`, an
    /// `f64const`, or a `splat` or `vconst` of one f32. `None` for any other value.
    pub(super) fn float_literal(&self, v: Value) -> Option<f64> {
        let dfg = &self.b.func.dfg;
        let ir::ValueDef::Result(inst, 0) = dfg.value_def(v) else {
            return None;
        };
        match dfg.insts[inst] {
            ir::InstructionData::UnaryIeee32 { imm, .. } => Some(f32::from_bits(imm.bits()).into()),
            ir::InstructionData::UnaryIeee64 { imm, .. } => Some(f64::from_bits(imm.bits())),
            ir::InstructionData::Unary {
                opcode: ir::Opcode::Splat,
                arg,
            } => self.float_literal(arg),
            ir::InstructionData::UnaryConst {
                opcode: ir::Opcode::Vconst,
                constant_handle,
            } if dfg.value_type(v) == types::F32X4 => {
                let bytes = dfg.constants.get(constant_handle).as_slice();
                let mut lanes = bytes
                    .chunks_exact(4)
                    .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                let first = lanes.next()?;
                lanes
                    .all(|l| l == first)
                    .then(|| f32::from_bits(first).into())
            }
            _ => None,
        }
    }

    /// For a float `min` (or `max`, when `max`) of `a` and `b` where one is a literal `c` for
    /// which the plain pick `x < c ? x : c` (`c < x ? x : c` for `max`) follows the IR's rules:
    /// the pick's condition (scalar or per lane), `x` and `c`. That holds when `c` is not NaN
    /// (a NaN `x` then gives `c`), and is not +0 for `min` nor -0 for `max` (the pick gives `c`
    /// when `x` is the opposite zero). On x86 the pick is one instruction (`minps`, `maxss`,
    /// ..) instead of a NaN-propagating min and two NaN tests. `None` when neither operand is
    /// such a literal.
    pub(super) fn literal_pick(
        &mut self,
        max: bool,
        a: Value,
        b: Value,
    ) -> Option<(Value, Value, Value)> {
        let exact = |v| match self.float_literal(v) {
            Some(c) if c.is_nan() => false,
            Some(c) if c == 0.0 => c.is_sign_negative() != max,
            Some(_) => true,
            None => false,
        };
        let (x, c) = match (exact(b), exact(a)) {
            (true, _) => (a, b),
            (false, true) => (b, a),
            _ => return None,
        };
        let pick_x = match max {
            true => self.b.ins().fcmp(FloatCC::LessThan, c, x),
            false => self.b.ins().fcmp(FloatCC::LessThan, x, c),
        };
        Some((pick_x, x, c))
    }

    pub(super) fn math(&mut self, fun: MathFn, s: ScalarType, x: &[Value]) -> R<Value> {
        if s == ScalarType::F16 {
            let r = self.math(fun, ScalarType::F32, x)?;
            return Ok(match fun.returns_bool() {
                true => r,
                false => self.round_half(r),
            });
        }
        if !s.is_float() {
            return Ok(match fun {
                MathFn::Abs if s.is_signed() => {
                    let n = self.b.ins().ineg(x[0]);
                    let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x[0], 0);
                    self.b.ins().select(neg, n, x[0])
                }
                MathFn::Abs => x[0],
                MathFn::Min => self.imin_max(s, false, x[0], x[1]),
                MathFn::Max => self.imin_max(s, true, x[0], x[1]),
                MathFn::Clamp => {
                    let lo = self.imin_max(s, true, x[0], x[1]);
                    self.imin_max(s, false, lo, x[2])
                }
                MathFn::Sign => {
                    let (one, zero) = (self.int_const(s, 1), self.int_const(s, 0));
                    let pos = self.b.ins().icmp_imm_s(
                        if s.is_signed() {
                            IntCC::SignedGreaterThan
                        } else {
                            IntCC::UnsignedGreaterThan
                        },
                        x[0],
                        0,
                    );
                    let r = self.b.ins().select(pos, one, zero);
                    if s.is_signed() {
                        let m1 = self.int_const(s, u64::MAX);
                        let neg = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, x[0], 0);
                        self.b.ins().select(neg, m1, r)
                    } else {
                        r
                    }
                }
                f => return Err(format!("{} on integers", f.name())),
            });
        }
        let f64_ = s == ScalarType::F64;
        let fconst = |l: &mut Self, v: f64| {
            if f64_ {
                l.b.ins().f64const(v)
            } else {
                l.b.ins().f32const(v as f32)
            }
        };
        Ok(match fun {
            MathFn::Sqrt => self.b.ins().sqrt(x[0]),
            MathFn::Rsqrt => {
                let r = self.b.ins().sqrt(x[0]);
                let one = fconst(self, 1.0);
                self.b.ins().fdiv(one, r)
            }
            MathFn::Abs => self.b.ins().fabs(x[0]),
            MathFn::Floor => self.b.ins().floor(x[0]),
            MathFn::Ceil => self.b.ins().ceil(x[0]),
            MathFn::Trunc => self.b.ins().trunc(x[0]),
            MathFn::Fract => {
                let t = self.b.ins().trunc(x[0]);
                self.b.ins().fsub(x[0], t)
            }
            MathFn::Min => self.fmin_max(false, x[0], x[1]),
            MathFn::Max => self.fmin_max(true, x[0], x[1]),
            MathFn::Clamp => {
                let lo = self.fmin_max(true, x[0], x[1]);
                self.fmin_max(false, lo, x[2])
            }
            MathFn::Fma => self.b.ins().fma(x[0], x[1], x[2]),
            MathFn::Copysign => {
                let c = self.b.ins().fcopysign(x[0], x[1]);
                let a = self.b.ins().fabs(x[0]);
                let nan = self.b.ins().fcmp(FloatCC::Unordered, x[1], x[1]);
                self.b.ins().select(nan, a, c)
            }
            MathFn::IsNan => self.b.ins().fcmp(FloatCC::Unordered, x[0], x[0]),
            MathFn::IsInf => {
                let a = self.b.ins().fabs(x[0]);
                let inf = fconst(self, f64::INFINITY);
                self.b.ins().fcmp(FloatCC::Equal, a, inf)
            }
            MathFn::Sign => {
                let (one, m1, zero) = (fconst(self, 1.0), fconst(self, -1.0), fconst(self, 0.0));
                let pos = self.b.ins().fcmp(FloatCC::GreaterThan, x[0], zero);
                let neg = self.b.ins().fcmp(FloatCC::LessThan, x[0], zero);
                let r = self.b.ins().select(pos, one, x[0]);
                self.b.ins().select(neg, m1, r)
            }
            f => {
                let name = crate::mathlib::import_name(f, f64_)
                    .ok_or_else(|| format!("math function {}", f.name()))?;
                self.call_import(name, x)
            }
        })
    }

    pub(super) fn atomic(
        &mut self,
        op: AtomicOp,
        s: ScalarType,
        addr: Value,
        v: Value,
        compare: Option<Value>,
    ) -> R<Value> {
        let ty = clty(s);
        if s == ScalarType::F32 {
            let vi = self.b.ins().bitcast(types::I32, MemFlagsData::new(), v);
            let old = match op {
                AtomicOp::Exchange => {
                    self.b
                        .ins()
                        .atomic_rmw(types::I32, mem_flags(), AtomicRmwOp::Xchg, addr, vi)
                }
                AtomicOp::Add => {
                    let start = self.b.ins().atomic_load(types::I32, mem_flags(), addr);
                    let (lp, done) = (self.b.create_block(), self.b.create_block());
                    let cur = self.b.append_block_param(lp, types::I32);
                    let res = self.b.append_block_param(done, types::I32);
                    self.b.ins().jump(lp, &[BlockArg::Value(start)]);
                    self.b.switch_to_block(lp);
                    let f = self.b.ins().bitcast(types::F32, MemFlagsData::new(), cur);
                    let sum = self.b.ins().fadd(f, v);
                    let bits = self.b.ins().bitcast(types::I32, MemFlagsData::new(), sum);
                    let prev = self.b.ins().atomic_cas(mem_flags(), addr, cur, bits);
                    let ok = self.b.ins().icmp(IntCC::Equal, prev, cur);
                    self.b.ins().brif(
                        ok,
                        done,
                        &[BlockArg::Value(prev)],
                        lp,
                        &[BlockArg::Value(prev)],
                    );
                    self.b.switch_to_block(done);
                    res
                }
                _ => return Err(format!("atomic {op:?} on f32")),
            };
            return Ok(self.b.ins().bitcast(types::F32, MemFlagsData::new(), old));
        }
        let signed = s.is_signed();
        let rmw = match op {
            AtomicOp::Add => AtomicRmwOp::Add,
            AtomicOp::Sub => AtomicRmwOp::Sub,
            AtomicOp::Min if signed => AtomicRmwOp::Smin,
            AtomicOp::Min => AtomicRmwOp::Umin,
            AtomicOp::Max if signed => AtomicRmwOp::Smax,
            AtomicOp::Max => AtomicRmwOp::Umax,
            AtomicOp::And => AtomicRmwOp::And,
            AtomicOp::Or => AtomicRmwOp::Or,
            AtomicOp::Xor => AtomicRmwOp::Xor,
            AtomicOp::Exchange => AtomicRmwOp::Xchg,
            AtomicOp::CompareExchange => {
                let c = compare.ok_or("compare-exchange without a compare value")?;
                return Ok(self.b.ins().atomic_cas(mem_flags(), addr, c, v));
            }
        };
        Ok(self.b.ins().atomic_rmw(ty, mem_flags(), rmw, addr, v))
    }
}
