//! Quad expressions: each expression's four lanes (vector, halves or scalar for uniform
//! values), contiguous indices, masks and blends.

use super::*;

impl Lowerer<'_, '_> {
    /// The vector form of an operand (uniform values are splatted; `bool` becomes a mask).
    pub(super) fn lanes_of(&mut self, fx: &mut FnCtx, qs: &QuadState, h: Handle) -> R<Value> {
        if let Some(l) = qs.lanes[h.index()] {
            return match l.hi {
                Some(_) => Err(format!("64-bit lanes of %{} read as one vector", h.0)),
                None => Ok(l.v),
            };
        }
        let s = fx.types[h.index()]
            .as_scalar()
            .ok_or("non-scalar in a vectorized body")?;
        let v = self.get(fx, h)?[0];
        Ok(if s == ScalarType::Bool {
            let ones = self.b.ins().iconst(types::I32, -1);
            let zero = self.iconst32(0);
            let m = self.b.ins().select(v, ones, zero);
            self.b.ins().splat(types::I32X4, m)
        } else {
            self.b.ins().splat(vty(s), v)
        })
    }

    /// Applies a scalar lowering to each lane of `args` (varying values of the given types);
    /// returns the lanes of its results, of type `out`.
    pub(super) fn per_lane(
        &mut self,
        args: &[(Lanes, ScalarType)],
        out: ScalarType,
        mut f: impl FnMut(&mut Self, &[Value]) -> R<Value>,
    ) -> R<Lanes> {
        let zero = self.iconst32(0);
        let mut accs = if in_halves(out) {
            let z = self.zero(out);
            let half = self.b.ins().splat(vty(out), z);
            vec![half, half]
        } else {
            let acc = self.b.ins().splat(types::I32X4, zero);
            match out {
                ScalarType::F32 => {
                    vec![self.b.ins().bitcast(types::F32X4, mem_flags_little(), acc)]
                }
                _ => vec![acc],
            }
        };
        for k in 0..4u8 {
            let xs: Vec<Value> = args
                .iter()
                .map(|(l, s)| {
                    let x = self.lane(*l, k);
                    if *s == ScalarType::Bool {
                        self.b.ins().icmp_imm_s(IntCC::NotEqual, x, 0)
                    } else {
                        x
                    }
                })
                .collect();
            let mut r = f(self, &xs)?;
            if out == ScalarType::Bool {
                let ones = self.b.ins().iconst(types::I32, -1);
                r = self.b.ins().select(r, ones, zero);
            }
            // Two lanes per half of a 64-bit value.
            let (acc, at) = match accs.len() {
                2 => (&mut accs[k as usize / 2], k % 2),
                _ => (&mut accs[0], k),
            };
            *acc = self.b.ins().insertlane(*acc, r, at);
        }
        Ok(match accs[..] {
            [lo, hi] => Lanes::halves(lo, hi),
            _ => Lanes::varying(accs[0]),
        })
    }

    /// Lane `k` (0 to 3) of a varying value.
    pub(super) fn lane(&mut self, l: Lanes, k: u8) -> Value {
        match l.hi {
            Some(hi) if k >= 2 => self.b.ins().extractlane(hi, k - 2),
            _ => self.b.ins().extractlane(l.v, k),
        }
    }

    /// For a built-in that varies per lane: the first lane's value (the lanes are that plus
    /// 0..3).
    pub(in crate::lower) fn varying_builtin_first(
        &mut self,
        qs: &QuadState,
        b: Builtin,
    ) -> Option<Value> {
        self.varying_builtin(qs, b).and_then(|l| l.first)
    }

    pub(super) fn varying_builtin(&mut self, qs: &QuadState, b: Builtin) -> Option<Lanes> {
        let first = match b {
            Builtin::GlobalId(Axis::X) => self.b.ins().iadd(self.gbase[0], self.lid[0]),
            Builtin::LocalId(Axis::X) => self.lid[0],
            Builtin::LocalIndex | Builtin::SubgroupId => qs.first_item,
            _ => return None,
        };
        let splat = self.b.ins().splat(types::I32X4, first);
        Some(Lanes {
            hi: None,
            v: self.b.ins().iadd(splat, qs.iota),
            first: Some(first),
            first_if: None,
        })
    }

    pub(super) fn quad_eval(&mut self, fx: &mut FnCtx, qs: &mut QuadState, h: Handle) -> R<()> {
        let e = fx.body.exprs[h.index()].clone();
        if let Expr::LocalGet(l) = e {
            if let Some(var) = qs.locals[l.0 as usize] {
                qs.lanes[h.index()] = Some(self.read_vars(var));
                return Ok(());
            }
        }
        if let Expr::Builtin(b) = e {
            if let Some(l) = self.varying_builtin(qs, b) {
                qs.lanes[h.index()] = Some(l);
                return Ok(());
            }
        }
        let varying = operands(&e).iter().any(|o| qs.lanes[o.index()].is_some());
        if !varying {
            let v = self.expr(fx, h)?;
            fx.vals[h.index()] = Some(v);
            return Ok(());
        }
        let ty = fx.types[h.index()]
            .as_scalar()
            .ok_or("non-scalar in a vectorized body")?;
        let lanes = match e {
            Expr::Load { memory, index } => {
                // A guard proves the index of every lane only when every lane is active; in
                // the prefix, an index `global_id(x)` is in bounds in every lane.
                let proven = (fx.in_bounds.load(h) && qs.all_active())
                    || qs.prefix.as_ref().is_some_and(|p| p.gid[index.index()])
                    || fx.loop_proven.contains(&(memory, index));
                let wide = self.proven_index(fx, Some(qs), memory, index)?;
                self.quad_load(qs, memory, index, proven, wide)?
            }
            _ if Self::involves_wide(fx, &e, ty) => self.quad_eval_wide(fx, qs, &e, ty)?,
            Expr::Binary { op, lhs, rhs } => {
                let s = fx.types[lhs.index()]
                    .as_scalar()
                    .ok_or("non-scalar operand")?;
                let first = match (op, qs.lanes[lhs.index()], qs.lanes[rhs.index()]) {
                    (BinaryOp::Add, Some(Lanes { first: Some(f), .. }), None) => {
                        let r = self.get(fx, rhs)?[0];
                        Some(self.b.ins().iadd(f, r))
                    }
                    (BinaryOp::Add, None, Some(Lanes { first: Some(f), .. })) => {
                        let l = self.get(fx, lhs)?[0];
                        Some(self.b.ins().iadd(l, f))
                    }
                    (BinaryOp::Sub, Some(Lanes { first: Some(f), .. }), None) => {
                        let r = self.get(fx, rhs)?[0];
                        Some(self.b.ins().isub(f, r))
                    }
                    _ => None,
                };
                qs.all_true[h.index()] = if op == BinaryOp::And && s == ScalarType::Bool {
                    match (
                        self.all_true_of(fx, qs, lhs)?,
                        self.all_true_of(fx, qs, rhs)?,
                    ) {
                        (Some(l), Some(r)) => Some(self.b.ins().band(l, r)),
                        _ => None,
                    }
                } else {
                    self.all_below(fx, qs, op, s, lhs, rhs)?
                };
                let v = match (op, s, qs.lanes[rhs.index()]) {
                    (BinaryOp::Shl | BinaryOp::Shr, ScalarType::I32 | ScalarType::U32, None) => {
                        let a = self.lanes_of(fx, qs, lhs)?;
                        let amount = self.get(fx, rhs)?[0];
                        self.shift(op, s, a, amount)
                    }
                    _ => {
                        let (a, b) = (self.lanes_of(fx, qs, lhs)?, self.lanes_of(fx, qs, rhs)?);
                        self.vbinary(op, s, a, b)?
                    }
                };
                Lanes {
                    hi: None,
                    v,
                    first: if s.is_int() { first } else { None },
                    first_if: None,
                }
            }
            Expr::Unary { op, arg } => {
                let a = self.lanes_of(fx, qs, arg)?;
                let v = match op {
                    UnaryOp::Neg if ty == ScalarType::F32 => self.b.ins().fneg(a),
                    UnaryOp::Neg => self.b.ins().ineg(a),
                    UnaryOp::Not => self.b.ins().bnot(a),
                };
                Lanes::varying(v)
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let (a, b) = (
                    self.lanes_of(fx, qs, accept)?,
                    self.lanes_of(fx, qs, reject)?,
                );
                let literal = |h: Handle| match fx.body.exprs[h.index()] {
                    Expr::Literal(ScalarValue::U32(v)) => Some(v),
                    Expr::Literal(ScalarValue::I32(v)) => Some(v as u32),
                    _ => None,
                };
                let v = match qs.lanes[cond.index()] {
                    // `select(c, all ones, 0)` is the lane mask itself.
                    Some(m) if literal(accept) == Some(u32::MAX) && literal(reject) == Some(0) => {
                        m.v
                    }
                    Some(m) => {
                        let mask = self.mask_for(m.v, vty(ty));
                        self.b.ins().bitselect(mask, a, b)
                    }
                    None => {
                        let c = self.get(fx, cond)?[0];
                        self.b.ins().select(c, a, b)
                    }
                };
                let first_if = match (qs.lanes[accept.index()].and_then(|l| l.first), ty.is_int()) {
                    (Some(f), true) => self.all_true_of(fx, qs, cond)?.map(|c| (c, f)),
                    _ => None,
                };
                Lanes {
                    hi: None,
                    v,
                    first: None,
                    first_if,
                }
            }
            Expr::Cast { arg, to } => {
                let from = fx.types[arg.index()].as_scalar().ok_or("non-scalar cast")?;
                let a = self.lanes_of(fx, qs, arg)?;
                let same_bits = matches!(
                    (from, to),
                    (ScalarType::I32, ScalarType::U32) | (ScalarType::U32, ScalarType::I32)
                );
                Lanes {
                    hi: None,
                    v: self.vcast(a, from, to)?,
                    first: qs.lanes[arg.index()].and_then(|l| l.first.filter(|_| same_bits)),
                    first_if: None,
                }
            }
            Expr::Bitcast { arg, .. } => {
                let a = self.lanes_of(fx, qs, arg)?;
                let v = match self.b.func.dfg.value_type(a) == vty(ty) {
                    true => a,
                    false => self.b.ins().bitcast(vty(ty), mem_flags_little(), a),
                };
                Lanes::varying(v)
            }
            Expr::Math { fun, args } => {
                let s = fx.types[args[0].index()]
                    .as_scalar()
                    .ok_or("non-scalar math")?;
                let vs: Vec<(Value, ScalarType)> = args
                    .iter()
                    .map(|a| Ok((self.lanes_of(fx, qs, *a)?, s)))
                    .collect::<R<_>>()?;
                Lanes {
                    hi: None,
                    v: self.vmath(fun, s, ty, &vs)?,
                    first: None,
                    first_if: None,
                }
            }
            // Subgroups have one lane on the CPU: each work item is its own subgroup.
            Expr::Subgroup { op, arg, .. } => {
                let from = fx.types[arg.index()]
                    .as_scalar()
                    .ok_or("non-scalar subgroup operand")?;
                let a = self.lanes_of(fx, qs, arg)?;
                Lanes::varying(match op {
                    SubgroupOp::Ballot => self.vcast(a, from, ty)?,
                    SubgroupOp::ExclusiveAdd => {
                        let z = self.zero(ty);
                        self.b.ins().splat(vty(ty), z)
                    }
                    _ => a,
                })
            }
            other => return Err(format!("expression {other:?} in a vectorized body")),
        };
        qs.lanes[h.index()] = Some(lanes);
        Ok(())
    }

    /// For `index < bound` or `index <= bound` (either way round) with a contiguous 32-bit
    /// `index` and a uniform `bound`: a scalar true when the comparison holds in all four
    /// lanes, worked out on the first lane in 64 bits so a wrapping index never passes.
    pub(super) fn all_below(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        op: BinaryOp,
        s: ScalarType,
        lhs: Handle,
        rhs: Handle,
    ) -> R<Option<Value>> {
        let (l, r) = (qs.lanes[lhs.index()], qs.lanes[rhs.index()]);
        let (first, bound, cc) = match (op, l, r) {
            (BinaryOp::Lt, Some(Lanes { first: Some(f), .. }), None) => {
                (f, rhs, IntCC::SignedLessThan)
            }
            (BinaryOp::Le, Some(Lanes { first: Some(f), .. }), None) => {
                (f, rhs, IntCC::SignedLessThanOrEqual)
            }
            (BinaryOp::Gt, None, Some(Lanes { first: Some(f), .. })) => {
                (f, lhs, IntCC::SignedLessThan)
            }
            (BinaryOp::Ge, None, Some(Lanes { first: Some(f), .. })) => {
                (f, lhs, IntCC::SignedLessThanOrEqual)
            }
            _ => return Ok(None),
        };
        if !matches!(s, ScalarType::I32 | ScalarType::U32) {
            return Ok(None);
        }
        let b = self.get(fx, bound)?[0];
        let (last, b) = if s == ScalarType::I32 {
            (
                self.b.ins().sextend(types::I64, first),
                self.b.ins().sextend(types::I64, b),
            )
        } else {
            (
                self.b.ins().uextend(types::I64, first),
                self.b.ins().uextend(types::I64, b),
            )
        };
        let last = self.b.ins().iadd_imm_s(last, 3);
        Ok(Some(self.b.ins().icmp(cc, last, b)))
    }

    /// For a `bool` operand: a scalar true when it holds in all four lanes (the value itself
    /// when it is uniform), if one is known.
    pub(super) fn all_true_of(
        &mut self,
        fx: &mut FnCtx,
        qs: &QuadState,
        h: Handle,
    ) -> R<Option<Value>> {
        Ok(match qs.lanes[h.index()] {
            None => Some(self.get(fx, h)?[0]),
            Some(_) => qs.all_true[h.index()],
        })
    }

    /// The first lane of a varying index when its four lanes are contiguous, with the scalar
    /// condition under which they are (`None`: always); `None` when not known to be.
    pub(super) fn contiguous(idx: Option<Lanes>) -> Option<(Value, Option<Value>)> {
        let idx = idx?;
        match (idx.first, idx.first_if) {
            (Some(f), _) => Some((f, None)),
            (None, Some((c, f))) => Some((f, Some(c))),
            (None, None) => None,
        }
    }

    /// The lane mask `m` (i32x4) in the vector type `to`, for `bitselect`.
    pub(super) fn mask_for(&mut self, m: Value, to: types::Type) -> Value {
        if to == types::F32X4 {
            self.b.ins().bitcast(types::F32X4, mem_flags_little(), m)
        } else {
            m
        }
    }

    /// Per lane, `a` where lane mask `m` (i32x4) is set and `b` elsewhere (`a` and `b` of one
    /// type).
    pub(super) fn blend(&mut self, m: Value, a: Lanes, b: Lanes) -> Lanes {
        match (a.hi, b.hi) {
            (Some(a_hi), Some(b_hi)) => {
                let (m_lo, m_hi) = self.wide_masks(m, self.b.func.dfg.value_type(a.v));
                let lo = self.b.ins().bitselect(m_lo, a.v, b.v);
                Lanes::halves(lo, self.b.ins().bitselect(m_hi, a_hi, b_hi))
            }
            _ => {
                let mask = self.mask_for(m, self.b.func.dfg.value_type(a.v));
                Lanes::varying(self.b.ins().bitselect(mask, a.v, b.v))
            }
        }
    }

    /// The lanes a varying local's variables hold.
    pub(super) fn read_vars(&mut self, var: LaneVars) -> Lanes {
        let v = self.b.use_var(var.v);
        match var.hi {
            Some(hi) => Lanes::halves(v, self.b.use_var(hi)),
            None => Lanes::varying(v),
        }
    }
}
