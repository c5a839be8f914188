//! Expressions: operators with kiln's rules spelled out, casts, builtins, atomics and
//! subgroup operations.

use crate::math::fmod_helper;
use crate::*;

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

impl Syntax for Writer {
    /// A literal in its register type (8/16-bit integers held in 32 bits).
    fn literal(&mut self, v: ScalarValue) -> String {
        if let ScalarValue::F16(h) = v {
            return lit(ScalarValue::F32(h.to_f32()));
        }
        if let ScalarValue::F64(x) = v {
            // Infinities, NaN and subnormals are spelled as the bits of a `u64`.
            self.needs.int64 |= !(x == 0.0 || x.is_normal());
        }
        let bits = if v.ty().is_signed() {
            let shift = 64 - v.ty().bits();
            (((v.to_bits() << shift) as i64) >> shift) as u64
        } else {
            v.to_bits()
        };
        lit(ScalarValue::from_bits(reg(v.ty()), bits))
    }

    fn checked_local_index(&mut self, array: &str, i: &str, len: u32, s: ScalarType) -> String {
        format!(
            "select({}, {array}[min({i}, {}u)], {i} < {len}u)",
            zero(s),
            len.saturating_sub(1)
        )
    }

    fn load(&mut self, _: &Cx, memory: Memory, i: &str, h: Handle, checked: bool) -> W<Written> {
        Writer::load(self, memory, i, h, checked)
    }

    fn len(&mut self, _: &Cx, memory: Memory) -> W<String> {
        Ok(self.mem(memory)?.len.clone())
    }

    /// `a op b` with kiln's rules: 8/16-bit results wrapped, shift amounts masked, integer
    /// division made total by a helper, float `%` exact.
    fn binary(&mut self, op: BinaryOp, s: ScalarType, a: &str, b: &str) -> W<String> {
        if s == ScalarType::F16 {
            let x = Syntax::binary(self, op, ScalarType::F32, a, b)?;
            return Ok(match op.is_compare() {
                true => x,
                false => self.round_half(&x),
            });
        }
        if op == BinaryOp::Ne && s.is_float() {
            // Written as not-equal-ordered by naga, which is false for NaN on some drivers.
            return Ok(format!("(!({a} == {b}))"));
        }
        if let Some(text) = rules::infix(op, s, a, b)? {
            return Ok(text);
        }
        if s.is_float() {
            self.helper(fmod_helper(s, self.trip()));
            return Ok(format!("kiln_fmod_{}({a}, {b})", rt(s)));
        }
        let mask = rules::shift_mask(s);
        if let Some(rule) = rules::IntDivision::of(op, reg(s)) {
            let t = rt(rule.ty);
            let name = rule.helper_name(t);
            let guard = rule.guard(lit);
            // GLSL leaves `%` of negative operands undefined (llvmpipe's GL gave 1 for
            // `1 % -1`), and naga writes WGSL's `%` as GLSL's: a signed remainder is
            // written with the division, which GLSL truncates as WGSL does.
            let (guarded, good) = match op {
                _ if rule.guarded_is_dividend() => ("a".to_string(), "a / b"),
                _ if rule.ty.is_signed() => (zero(rule.ty), "a - b * (a / b)"),
                _ => (zero(rule.ty), "a % b"),
            };
            self.helper(format!(
                "fn {name}(a: {t}, b: {t}) -> {t} {{ if ({guard}) {{ return {guarded}; }} return {good}; }}"
            ));
            return Ok(wrap(s, format!("{name}({a}, {b})")));
        }
        Ok(match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                wrap(s, format!("({a} {} {b})", op.symbol()))
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => format!("({a} {} {b})", op.symbol()),
            BinaryOp::Shl => wrap(s, format!("({a} << (u32({b}) & {mask}u))")),
            BinaryOp::Shr => format!("({a} >> (u32({b}) & {mask}u))"),
            _ => return err(format!("`{}` on {s}", op.symbol())),
        })
    }

    fn unary(&mut self, op: UnaryOp, s: ScalarType, x: &str) -> String {
        match (op, s) {
            (UnaryOp::Neg, s) if s.is_float() => format!("(-{x})"),
            (UnaryOp::Neg, s) if s.is_signed() => wrap(s, format!("(-{x})")),
            (UnaryOp::Neg, s) => wrap(s, format!("({} - {x})", zero(s))),
            (UnaryOp::Not, ScalarType::Bool) => format!("(!{x})"),
            (UnaryOp::Not, s) => wrap(s, format!("(~{x})")),
        }
    }

    fn select(&mut self, cond: &str, accept: &str, reject: &str) -> String {
        format!("select({reject}, {accept}, {cond})")
    }

    fn cast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        if from == to {
            return x.to_string();
        }
        if from == ScalarType::F16 {
            return self.cast(x, ScalarType::F32, to);
        }
        if to == ScalarType::F16 {
            // Integers reach binary16 through `f32` exactly or past its range (where both give
            // infinity); an `f64` rounds once.
            return match from {
                ScalarType::F64 => self.f16_of_f64(x),
                ScalarType::Bool => format!("select(0.0f, 1.0f, {x})"),
                _ => {
                    let f = self.cast(x, from, ScalarType::F32);
                    self.round_half(&f)
                }
            };
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
        let rule = rules::Saturation::of(to);
        let max = lit(rules::Saturation::value(rule.max, reg(to)));
        let hi = float_lit(rule.hi, from);
        let body = if to.is_signed() {
            format!(
                "if (!(v == v)) {{ return {z}; }} if (v >= {hi}) {{ return {max}; }} if (v <= {lo}) {{ return {min}; }} return {tt}(v);",
                z = zero(to),
                lo = float_lit(rule.lo, from),
                min = lit(rules::Saturation::value(rule.min, reg(to))),
            )
        } else {
            // Below 1 (NaN and the floats down to the bound -1 included) the result is 0:
            // one test.
            format!(
                "if (!(v >= {one})) {{ return {z}; }} if (v >= {hi}) {{ return {max}; }} return {tt}(v);",
                one = one(from),
                z = zero(to),
            )
        };
        self.helper(format!("fn {name}(v: {ft}) -> {tt} {{ {body} }}"));
        format!("{name}({x})")
    }

    fn bitcast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        match (from, to) {
            (f, t) if f == t => x.to_string(),
            (ScalarType::F16, t) => {
                let bits = self.f2h(x);
                match t {
                    ScalarType::U16 => bits,
                    _ => wrap(t, format!("bitcast<i32>({bits})")),
                }
            }
            (_, ScalarType::F16) => self.h2f(&format!("(bitcast<u32>({x}) & 0xffffu)")),
            (ScalarType::U8 | ScalarType::U16, t) => wrap(t, format!("bitcast<i32>({x})")),
            (ScalarType::I8 | ScalarType::I16, t) => wrap(t, format!("bitcast<u32>({x})")),
            (_, t) => format!("bitcast<{}>({x})", rt(t)),
        }
    }

    fn math(&mut self, fun: MathFn, s: ScalarType, args: &[String]) -> W<String> {
        if s == ScalarType::F16 {
            let r = Writer::math(self, fun, ScalarType::F32, args)?;
            return Ok(match fun.returns_bool() {
                true => r,
                false => self.round_half(&r),
            });
        }
        Writer::math(self, fun, s, args)
    }

    /// A builtin value; with subgroups, the subgroup's id, size and lane come from the
    /// entry point's parameters.
    fn builtin(&mut self, b: Builtin) -> String {
        match b {
            Builtin::SubgroupId | Builtin::SubgroupSize | Builtin::SubgroupLane
                if self.options.subgroups =>
            {
                self.needs.subgroups = true;
                match b {
                    Builtin::SubgroupId => "kiln_sg_id",
                    Builtin::SubgroupSize => "kiln_sg_size",
                    _ => "kiln_sg_lane",
                }
                .into()
            }
            b => builtin(b),
        }
    }

    fn atomic(&mut self, _: &Cx, a: AtomicCall) -> W<Written> {
        Writer::atomic(self, a)
    }

    /// A subgroup operation; without subgroups, the result on a subgroup of one lane.
    fn subgroup(&mut self, call: SubgroupCall) -> W<String> {
        if call.ty == ScalarType::F16 {
            let op = call.op;
            let r = self.subgroup(SubgroupCall {
                ty: ScalarType::F32,
                ..call
            })?;
            return Ok(match op {
                SubgroupOp::ReduceAdd | SubgroupOp::InclusiveAdd | SubgroupOp::ExclusiveAdd => {
                    self.round_half(&r)
                }
                _ => r,
            });
        }
        if self.options.subgroups {
            return Writer::subgroup(self, call);
        }
        let x = call.value;
        Ok(match call.op {
            SubgroupOp::Ballot => format!("select(0u, 1u, {x})"),
            SubgroupOp::ExclusiveAdd => zero(call.ty),
            _ => x.to_string(),
        })
    }
}

impl Writer {
    /// A subgroup operation with WGSL's subgroup built-ins, which cover the active lanes.
    /// Every lane-taking operation is a `subgroupShuffle` whose result is the caller's own
    /// value when the asked-for lane is outside the subgroup or not active (a ballot of the
    /// active lanes tells); float minimum and maximum take NaN as the identity and settle
    /// the sign of a zero result with `subgroupAny`, so every backend gives the same answer.
    pub(crate) fn subgroup(&mut self, call: SubgroupCall) -> W<String> {
        let SubgroupCall {
            op,
            ty: s,
            value: x,
            lane,
        } = call;
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

    /// The atomic operation `a`, skipped on an out-of-bounds index (which reads zero): its
    /// result is a `var` declared before the expression's temporary.
    pub(crate) fn atomic(&mut self, a: AtomicCall) -> W<Written> {
        let AtomicCall {
            memory: m,
            handle: h,
            ty: s,
            op,
            index: i,
            value: v,
            compare: cmp,
        } = a;
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
        Ok(Written {
            pre: vec![format!(
                "var {r}: {} = {}; if ({i} < {len}) {{ {call} }}",
                rt(s),
                zero(s)
            )],
            comps: vec![r],
            call: None,
        })
    }
}
