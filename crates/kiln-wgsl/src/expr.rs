//! Expressions: operators with kiln's rules spelled out, casts, builtins, atomics and
//! subgroup operations.

use crate::math::fmod_helper;
use crate::*;

pub(crate) fn bitcast(x: &str, from: ScalarType, to: ScalarType) -> String {
    match (from, to) {
        (f, t) if f == t => x.to_string(),
        (ScalarType::U8 | ScalarType::U16, t) => wrap(t, format!("bitcast<i32>({x})")),
        (ScalarType::I8 | ScalarType::I16, t) => wrap(t, format!("bitcast<u32>({x})")),
        (_, t) => format!("bitcast<{}>({x})", rt(t)),
    }
}

pub(crate) fn builtin(b: Builtin) -> String {
    let xyz = |a: Axis| ["x", "y", "z"][a.index()];
    match b {
        Builtin::GlobalId(a) => format!(
            "(kiln_gid.{0} * {1} + kiln_lid.{0})",
            xyz(a),
            GROUP_SIZE_OVERRIDES[a.index()]
        ),
        Builtin::LocalId(a) => format!("kiln_lid.{}", xyz(a)),
        Builtin::GroupId(a) => format!("kiln_gid.{}", xyz(a)),
        Builtin::GroupSize(a) => GROUP_SIZE_OVERRIDES[a.index()].to_string(),
        Builtin::NumGroups(a) => format!("kiln_groups.{}", xyz(a)),
        Builtin::GlobalSize(a) => format!(
            "(kiln_groups.{} * {})",
            xyz(a),
            GROUP_SIZE_OVERRIDES[a.index()]
        ),
        Builtin::LocalIndex | Builtin::SubgroupId => "kiln_lindex".into(),
        Builtin::SubgroupSize => "1u".into(),
        Builtin::SubgroupLane => "0u".into(),
    }
}

impl Writer {
    pub(crate) fn expr(&mut self, cx: &Cx, h: Handle) -> W<Vals> {
        let e = &cx.body.exprs[h.index()];
        let ty = cx.ty(h)?;
        let u32t = Type::Scalar(ScalarType::U32);
        let n = ty.flatten().len();
        let each = |f: &mut dyn FnMut(usize) -> W<String>| -> W<Vals> {
            Ok(Vals::new((0..n).map(f).collect::<W<Vec<_>>>()?))
        };
        match e {
            Expr::Literal(v) => Ok(Vals::one(lit(ScalarValue::from_bits(
                reg(v.ty()),
                if v.ty().is_signed() {
                    let shift = 64 - v.ty().bits();
                    (((v.to_bits() << shift) as i64) >> shift) as u64
                } else {
                    v.to_bits()
                },
            )))),
            Expr::Param(i) => {
                let p = &cx.params[*i as usize];
                Ok(Vals::new(
                    (0..n).map(|c| component_name(&p.name, c, n)).collect(),
                ))
            }
            Expr::LocalGet(l) => {
                let name = cx.local_name(l.0 as usize);
                Ok(Vals::new(
                    (0..n).map(|c| component_name(&name, c, n)).collect(),
                ))
            }
            Expr::LocalIndex { local, index } => {
                let Type::Array(e, len) = &cx.body.locals[local.0 as usize].ty else {
                    return err("not an array local");
                };
                let name = cx.local_name(local.0 as usize);
                let i = temp_name(*index, 0, &u32t);
                let flat = e.flatten();
                let checked = !cx.in_bounds.load(h);
                Ok(Vals::new(
                    flat.iter()
                        .enumerate()
                        .map(|(c, (s, _))| {
                            let arr = component_name(&name, c, flat.len());
                            if checked {
                                format!(
                                    "select({}, {arr}[min({i}, {}u)], {i} < {len}u)",
                                    zero(*s),
                                    len.saturating_sub(1)
                                )
                            } else {
                                format!("{arr}[{i}]")
                            }
                        })
                        .collect(),
                ))
            }
            Expr::Load { memory, index } => self.load(
                *memory,
                &temp_name(*index, 0, &u32t),
                h,
                !cx.in_bounds.load(h),
            ),
            Expr::Len(m) => Ok(Vals::one(self.mem(*m)?.len.clone())),
            Expr::Binary { op, lhs, rhs } => {
                let lt = cx.ty(*lhs)?;
                let s = lt
                    .component()
                    .ok_or_else(|| WriteError("binary on a non-scalar".into()))?;
                let m = lt.flatten().len();
                let comps = (0..m)
                    .map(|c| {
                        self.binary(*op, s, &temp_name(*lhs, c, &lt), &temp_name(*rhs, c, &lt))
                    })
                    .collect::<W<Vec<_>>>()?;
                Ok(Vals::new(comps))
            }
            Expr::Unary { op, arg } => {
                let s = ty
                    .component()
                    .ok_or_else(|| WriteError("unary on a non-scalar".into()))?;
                each(&mut |c| {
                    let x = temp_name(*arg, c, &ty);
                    Ok(match (op, s) {
                        (UnaryOp::Neg, s) if s.is_float() => format!("(-{x})"),
                        (UnaryOp::Neg, s) if s.is_signed() => wrap(s, format!("(-{x})")),
                        (UnaryOp::Neg, s) => wrap(s, format!("({} - {x})", zero(s))),
                        (UnaryOp::Not, ScalarType::Bool) => format!("(!{x})"),
                        (UnaryOp::Not, s) => wrap(s, format!("(~{x})")),
                    })
                })
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let c = temp_name(*cond, 0, &Type::Scalar(ScalarType::Bool));
                each(&mut |i| {
                    Ok(format!(
                        "select({}, {}, {c})",
                        temp_name(*reject, i, &ty),
                        temp_name(*accept, i, &ty)
                    ))
                })
            }
            Expr::Cast { arg, to } => {
                let at = cx.ty(*arg)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("cast of a non-scalar".into()))?;
                self.note(*to);
                let comps = (0..at.flatten().len())
                    .map(|c| self.cast(&temp_name(*arg, c, &at), from, *to))
                    .collect();
                Ok(Vals::new(comps))
            }
            Expr::Bitcast { arg, to } => {
                let at = cx.ty(*arg)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("bitcast of a non-scalar".into()))?;
                let comps = (0..at.flatten().len())
                    .map(|c| bitcast(&temp_name(*arg, c, &at), from, *to))
                    .collect();
                Ok(Vals::new(comps))
            }
            Expr::Math { fun, args } => {
                let at = cx.ty(args[0])?;
                let s = at
                    .component()
                    .ok_or_else(|| WriteError("math on a non-scalar".into()))?;
                let comps = (0..at.flatten().len())
                    .map(|c| {
                        let xs: Vec<String> = args.iter().map(|a| temp_name(*a, c, &at)).collect();
                        self.math(*fun, s, &xs)
                    })
                    .collect::<W<Vec<_>>>()?;
                Ok(Vals::new(comps))
            }
            Expr::Builtin(
                b @ (Builtin::SubgroupId | Builtin::SubgroupSize | Builtin::SubgroupLane),
            ) if self.options.subgroups => {
                self.needs.subgroups = true;
                Ok(Vals::one(
                    match b {
                        Builtin::SubgroupId => "kiln_sg_id",
                        Builtin::SubgroupSize => "kiln_sg_size",
                        _ => "kiln_sg_lane",
                    }
                    .into(),
                ))
            }
            Expr::Builtin(b) => Ok(Vals::one(builtin(*b))),
            Expr::Compose { parts, .. } => {
                let mut comps = Vec::new();
                for p in parts {
                    let pt = cx.ty(*p)?;
                    for c in 0..pt.flatten().len() {
                        comps.push(temp_name(*p, c, &pt));
                    }
                }
                Ok(Vals::new(comps))
            }
            Expr::Extract { base, index } => {
                let bt = cx.ty(*base)?;
                let range = bt
                    .component_range(*index)
                    .ok_or_else(|| WriteError(format!("{bt} has no component {index}")))?;
                Ok(Vals::new(range.map(|c| temp_name(*base, c, &bt)).collect()))
            }
            Expr::Atomic {
                memory,
                index,
                op,
                value,
                compare,
            } => {
                let s = ty
                    .as_scalar()
                    .ok_or_else(|| WriteError("atomic on a non-scalar".into()))?;
                let i = temp_name(*index, 0, &u32t);
                let v = temp_name(*value, 0, &ty);
                let cmp = compare.map(|c| temp_name(c, 0, &ty));
                self.atomic(*memory, h, s, *op, &i, &v, cmp.as_deref())
            }
            Expr::Subgroup { op, arg, lane } => {
                let s = cx
                    .ty(*arg)?
                    .as_scalar()
                    .ok_or_else(|| WriteError("subgroup op on a non-scalar".into()))?;
                let x = temp_name(*arg, 0, &Type::Scalar(s));
                if self.options.subgroups {
                    let lane = lane.map(|l| temp_name(l, 0, &u32t));
                    return Ok(Vals::one(self.subgroup(*op, s, &x, lane.as_deref())?));
                }
                Ok(Vals::one(match op {
                    SubgroupOp::Ballot => format!("select(0u, 1u, {x})"),
                    SubgroupOp::ExclusiveAdd => zero(s),
                    _ => x,
                }))
            }
            Expr::Call { function, args } => {
                let f = &cx.kernel.functions[function.0 as usize];
                let mut flat_args = Vec::new();
                for a in args {
                    let at = cx.ty(*a)?;
                    for c in 0..at.flatten().len() {
                        flat_args.push(temp_name(*a, c, &at));
                    }
                }
                let call = format!("{}({})", f.name, flat_args.join(", "));
                if n == 1 {
                    Ok(Vals::one(call))
                } else {
                    Ok(Vals {
                        pre: Vec::new(),
                        comps: Vec::new(),
                        call_struct: Some(call),
                    })
                }
            }
        }
    }

    pub(crate) fn binary(&mut self, op: BinaryOp, s: ScalarType, a: &str, b: &str) -> W<String> {
        if op == BinaryOp::Ne && s.is_float() {
            // Written as not-equal-ordered by naga, which is false for NaN on some drivers.
            return Ok(format!("(!({a} == {b}))"));
        }
        if op.is_compare() {
            return Ok(format!("({a} {} {b})", op.symbol()));
        }
        if s.is_float() {
            return Ok(match op {
                BinaryOp::Rem => {
                    self.helper(fmod_helper(s, self.trip()));
                    format!("kiln_fmod_{}({a}, {b})", rt(s))
                }
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                    format!("({a} {} {b})", op.symbol())
                }
                _ => return err(format!("`{}` on floats", op.symbol())),
            });
        }
        if s == ScalarType::Bool {
            return Ok(match op {
                BinaryOp::And => format!("({a} && {b})"),
                BinaryOp::Or => format!("({a} || {b})"),
                BinaryOp::Xor => format!("({a} != {b})"),
                _ => return err(format!("`{}` on bool", op.symbol())),
            });
        }
        let mask = s.bits() - 1;
        Ok(match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                wrap(s, format!("({a} {} {b})", op.symbol()))
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => format!("({a} {} {b})", op.symbol()),
            BinaryOp::Shl => wrap(s, format!("({a} << (u32({b}) & {mask}u))")),
            BinaryOp::Shr => format!("({a} >> (u32({b}) & {mask}u))"),
            BinaryOp::Div | BinaryOp::Rem => {
                let r = reg(s);
                let t = rt(r);
                let name = format!(
                    "kiln_{}_{t}",
                    if op == BinaryOp::Div { "div" } else { "rem" }
                );
                let min_check = if r.is_signed() {
                    format!(
                        " || (a == {} && b == {})",
                        lit(ScalarValue::from_bits(r, 1u64 << (r.bits() - 1))),
                        lit(ScalarValue::from_bits(r, u64::MAX))
                    )
                } else {
                    String::new()
                };
                // GLSL leaves `%` of negative operands undefined (llvmpipe's GL gave 1 for
                // `1 % -1`), and naga writes WGSL's `%` as GLSL's: a signed remainder is
                // written with the division, which GLSL truncates as WGSL does.
                let (on_bad, good) = match op {
                    BinaryOp::Div => ("a".to_string(), "a / b"),
                    _ if r.is_signed() => (zero(r), "a - b * (a / b)"),
                    _ => (zero(r), "a % b"),
                };
                self.helper(format!(
                    "fn {name}(a: {t}, b: {t}) -> {t} {{ if (b == {}{min_check}) {{ return {on_bad}; }} return {good}; }}",
                    zero(r)
                ));
                wrap(s, format!("{name}({a}, {b})"))
            }
            _ => return err(format!("`{}` on {s}", op.symbol())),
        })
    }

    pub(crate) fn cast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        if from == to {
            return x.to_string();
        }
        if to == ScalarType::Bool {
            return format!("({x} != {})", zero(from));
        }
        if from == ScalarType::Bool {
            return format!("select({}, {}, {x})", zero(to), one(to));
        }
        if to == ScalarType::F32 && from.is_int() && from.bits() == 32 {
            // Mesa's GL folds a conversion back to an integer that follows `f32(x)` into `x`,
            // which is wrong past 2^24 (`i32(f32(16777217))` gave 16777217). The sum of two
            // exact parts, rounded once, is `f32(x)` and is not folded.
            let t = rt(from);
            let name = format!("kiln_f32_of_{t}");
            self.helper(format!(
                "// f32(x) from two exact parts, rounded once (GL drivers fold i32(f32(x)) into x)\n\
                 fn {name}(x: {t}) -> f32 {{ return f32(x >> 8u) * 256.0f + f32(x & 255{s}); }}",
                s = if from.is_signed() { "i" } else { "u" }
            ));
            return format!("{name}({x})");
        }
        if to.is_float() {
            return format!("{}({x})", rt(to));
        }
        if from.is_int() && from.is_signed() && from.bits() <= 32 && to.bits() == 64 {
            // Sign extension spelled out: lavapipe compares `i64(x)` of a negative i32 `x` as
            // if it were positive (`i64(x) > 0` is true), though it stores the right value.
            let ext =
                format!("(u64(bitcast<u32>({x})) | select(0lu, 0xffffffff00000000lu, ({x}) < 0i))");
            return match to {
                ScalarType::I64 => format!("bitcast<i64>{ext}"),
                _ => ext,
            };
        }
        if from.is_int() && from.bits() <= 32 && to == ScalarType::I64 {
            // Likewise `i64(x)` of a u32: lavapipe found `i64(0u) > 0` true. Through u64 it holds.
            return format!("bitcast<i64>(u64({x}))");
        }
        if from.is_int() {
            return wrap(to, format!("{}({x})", rt(reg(to))));
        }
        let (ft, tt) = (rt(from), rt(reg(to)));
        let name = format!("kiln_cvt_{}_{}", from.name(), to.name());
        let max = lit(ScalarValue::from_bits(
            reg(to),
            if to.is_signed() {
                (1u64 << (to.bits() - 1)) - 1
            } else if to.bits() == 64 {
                u64::MAX
            } else {
                (1u64 << to.bits()) - 1
            },
        ));
        let body = if to.is_signed() {
            let lim = 2f64.powi(to.bits() as i32 - 1);
            let min = lit(ScalarValue::from_bits(
                reg(to),
                (-(lim as i128) as i64) as u64,
            ));
            format!(
                "if (!(v == v)) {{ return {z}; }} if (v >= {hi}) {{ return {max}; }} if (v <= {lo}) {{ return {min}; }} return {tt}(v);",
                z = zero(to),
                hi = float_lit(lim, from),
                lo = float_lit(-lim, from),
            )
        } else {
            format!(
                "if (!(v >= {one})) {{ return {z}; }} if (v >= {hi}) {{ return {max}; }} return {tt}(v);",
                one = one(from),
                z = zero(to),
                hi = float_lit(2f64.powi(to.bits() as i32), from),
            )
        };
        self.helper(format!("fn {name}(v: {ft}) -> {tt} {{ {body} }}"));
        format!("{name}({x})")
    }

    /// A subgroup operation with WGSL's subgroup built-ins, which cover the active lanes.
    /// Every lane-taking operation is a `subgroupShuffle` whose result is the caller's own
    /// value when the asked-for lane is outside the subgroup or not active (a ballot of the
    /// active lanes tells); float minimum and maximum take NaN as the identity and settle
    /// the sign of a zero result with `subgroupAny`, so every backend gives the same answer.
    pub(crate) fn subgroup(
        &mut self,
        op: SubgroupOp,
        s: ScalarType,
        x: &str,
        lane: Option<&str>,
    ) -> W<String> {
        self.needs.subgroups = true;
        let lane = lane.unwrap_or("0u");
        let (me, size) = ("kiln_sg_lane", "kiln_sg_size");
        let source = match op {
            SubgroupOp::Shuffle | SubgroupOp::Broadcast => {
                Some(format!("select({me}, {lane}, {lane} < {size})"))
            }
            SubgroupOp::ShuffleUp => Some(format!("select({me}, {me} - {lane}, {lane} <= {me})")),
            SubgroupOp::ShuffleDown => Some(format!(
                "select({me}, {me} + {lane}, {lane} < {size} - {me})"
            )),
            SubgroupOp::ShuffleXor => Some(format!(
                "select({me}, {me} ^ {lane}, ({me} ^ {lane}) < {size})"
            )),
            _ => None,
        };
        if let Some(source) = source {
            let t = if s == ScalarType::Bool { "u32" } else { rt(s) };
            let h = format!("kiln_shuffle_{t}");
            self.helper(format!("// a source lane that is not active gives the caller's own value\nfn {h}(x: {t}, source: u32) -> {t} {{ let live = subgroupBallot(true); let o = subgroupShuffle(x, source); return select(x, o, ((live[source / 32u] >> (source % 32u)) & 1u) != 0u); }}"));
            return Ok(if s == ScalarType::Bool {
                format!("({h}(select(0u, 1u, {x}), {source}) != 0u)")
            } else {
                format!("{h}({x}, {source})")
            });
        }
        Ok(match op {
            SubgroupOp::Ballot => format!("subgroupBallot({x}).x"),
            SubgroupOp::All => format!("subgroupAll({x})"),
            SubgroupOp::Any => format!("subgroupAny({x})"),
            SubgroupOp::ReduceAdd => wrap(s, format!("subgroupAdd({x})")),
            SubgroupOp::InclusiveAdd => wrap(s, format!("subgroupInclusiveAdd({x})")),
            SubgroupOp::ExclusiveAdd => wrap(s, format!("subgroupExclusiveAdd({x})")),
            SubgroupOp::ReduceMin | SubgroupOp::ReduceMax if s.is_float() => {
                let max = op == SubgroupOp::ReduceMax;
                let name = if max { "max" } else { "min" };
                let (t, u, sign, none) = if s == ScalarType::F64 {
                    self.needs.int64 = true;
                    ("f64", "u64", "0x8000000000000000lu", "0lu")
                } else {
                    ("f32", "u32", "0x80000000u", "0u")
                };
                let (skip, zero, other_zero, nan) = (
                    float_lit(
                        if max {
                            f64::NEG_INFINITY
                        } else {
                            f64::INFINITY
                        },
                        s,
                    ),
                    float_lit(if max { 0.0 } else { -0.0 }, s),
                    float_lit(if max { -0.0 } else { 0.0 }, s),
                    float_lit(f64::NAN, s),
                );
                let wanted_sign = if max { "==" } else { "!=" };
                let h = format!("kiln_subgroup_{name}_{t}");
                self.helper(format!("// over the active lanes: NaN only when all are NaN; of -0 and +0, min gives -0 and max +0\nfn {h}(x: {t}) -> {t} {{ let nan = !(x == x); let y = select(x, {skip}, nan); let m = subgroup{}(y); let zero = subgroupAny(y == {zero} && (bitcast<{u}>(y) & {sign}) {wanted_sign} {none}); let r = select(m, select({other_zero}, {zero}, zero), m == {zero}); return select(r, {nan}, subgroupAll(nan)); }}", if max { "Max" } else { "Min" }));
                format!("{h}({x})")
            }
            SubgroupOp::ReduceMin => format!("subgroupMin({x})"),
            _ => format!("subgroupMax({x})"),
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn atomic(
        &mut self,
        m: Memory,
        h: Handle,
        s: ScalarType,
        op: AtomicOp,
        i: &str,
        v: &str,
        cmp: Option<&str>,
    ) -> W<Vals> {
        let info = self.mem(m)?;
        let ptr = format!("&{}[{i}]", info.name);
        let len = info.len.clone();
        let r = format!("t{}_a", h.0);
        let trip = self.trip();
        let call = match (op, s) {
            (AtomicOp::Add, ScalarType::F32) => {
                format!("var {r}_old = atomicLoad({ptr}); loop {{ {trip}let kiln_x = atomicCompareExchangeWeak({ptr}, {r}_old, bitcast<u32>(bitcast<f32>({r}_old) + {v})); if (kiln_x.exchanged) {{ break; }} {r}_old = kiln_x.old_value; }} {r} = bitcast<f32>({r}_old);")
            }
            (AtomicOp::Exchange, ScalarType::F32) => {
                format!("{r} = bitcast<f32>(atomicExchange({ptr}, bitcast<u32>({v})));")
            }
            (AtomicOp::CompareExchange, _) => {
                let c = cmp.unwrap_or("0");
                format!("loop {{ {trip}let kiln_x = atomicCompareExchangeWeak({ptr}, {c}, {v}); if (kiln_x.exchanged || kiln_x.old_value != {c}) {{ {r} = kiln_x.old_value; break; }} }}")
            }
            _ => {
                let f = match op {
                    AtomicOp::Add => "atomicAdd",
                    AtomicOp::Sub => "atomicSub",
                    AtomicOp::Min => "atomicMin",
                    AtomicOp::Max => "atomicMax",
                    AtomicOp::And => "atomicAnd",
                    AtomicOp::Or => "atomicOr",
                    AtomicOp::Xor => "atomicXor",
                    _ => "atomicExchange",
                };
                format!("{r} = {f}({ptr}, {v});")
            }
        };
        Ok(Vals {
            pre: vec![format!(
                "var {r}: {} = {}; if ({i} < {len}) {{ {call} }}",
                rt(s),
                zero(s)
            )],
            comps: vec![r],
            call_struct: None,
        })
    }
}
