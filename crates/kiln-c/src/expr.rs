//! Expressions: operators with kiln's rules spelled out (wrapping, division by zero, shift
//! amounts, saturating casts, NaN in min/max), math functions, builtins and atomics.

use crate::*;

impl Syntax for Writer {
    fn literal(&mut self, v: ScalarValue) -> String {
        self.lit(v)
    }

    /// A `bool` kernel parameter arrives as a `uchar`.
    fn param(&mut self, cx: &Cx, name: String, s: ScalarType) -> String {
        match s == ScalarType::Bool && cx.is_kernel() {
            true => format!("({name} != 0)"),
            false => name,
        }
    }

    fn checked_local_index(&mut self, array: &str, i: &str, len: u32, s: ScalarType) -> String {
        format!(
            "(({i} < {len}u) ? {array}[{i}] : {})",
            self.lit(ScalarValue::zero(s))
        )
    }

    fn load(&mut self, cx: &Cx, memory: Memory, i: &str, _: Handle, checked: bool) -> W<Written> {
        let (name, elem) = mem_info(cx.kernel, memory)?;
        let comps = elem
            .flatten()
            .into_iter()
            .map(|(s, off)| {
                let r = self.elem_ref(&name, &elem, s, off, i, memory);
                let r = match s == ScalarType::Bool {
                    true => format!("({r} != 0)"),
                    false => r,
                };
                match checked {
                    true => format!(
                        "(({i} < {name}_len) ? {r} : {})",
                        self.lit(ScalarValue::zero(s))
                    ),
                    false => r,
                }
            })
            .collect();
        Ok(Written::new(comps))
    }

    fn len(&mut self, cx: &Cx, memory: Memory) -> W<String> {
        Ok(format!("{}_len", mem_info(cx.kernel, memory)?.0))
    }

    /// `a op b` with kiln's rules: wrapping integer arithmetic in a wide unsigned type, shift
    /// amounts masked, integer division made total by a helper, float `%` as `fmod`.
    fn binary(&mut self, op: BinaryOp, s: ScalarType, a: &str, b: &str) -> W<String> {
        if let Some(text) = rules::infix(op, s, a, b)? {
            return Ok(text);
        }
        if s.is_float() {
            return Ok(format!("{}({a}, {b})", self.fname("fmod", s)));
        }
        let t = self.t(s);
        let w = self.t(wide_unsigned(s));
        let mask = rules::shift_mask(s);
        if let Some(rule) = rules::IntDivision::of(op, s) {
            let name = rule.helper_name(s.name());
            let guard = rule.guard(|v| self.lit(v));
            let guarded = match rule.guarded_is_dividend() {
                true => "a".to_string(),
                false => format!("({t})0"),
            };
            let sym = op.symbol();
            self.helper(format!(
                "{} {t} {name}({t} a, {t} b) {{ return ({guard}) ? {guarded} : ({t})(a {sym} b); }}",
                self.fn_prefix()
            ));
            return Ok(format!("{name}({a}, {b})"));
        }
        Ok(match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                format!("(({t})(({w}){a} {} ({w}){b}))", op.symbol())
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                format!("(({t})({a} {} {b}))", op.symbol())
            }
            BinaryOp::Shl => format!(
                "(({t})(({}){a} << (({w}){b} & {mask}u)))",
                self.t(unsigned_of(s))
            ),
            BinaryOp::Shr => format!("(({t})({a} >> (({w}){b} & {mask}u)))"),
            _ => return err(format!("`{}` on {s}", op.symbol())),
        })
    }

    fn unary(&mut self, op: UnaryOp, s: ScalarType, x: &str) -> String {
        let t = self.t(s);
        match (op, s) {
            (UnaryOp::Neg, s) if s.is_float() => format!("(-{x})"),
            // Narrow signed negation sign-extends by shifts: NVRTC 13 for sm_90 on an H100
            // widened `(short)(0u - (unsigned)x)` of -32768 to +32768 (it emits neg.s16,
            // whose widening ptxas gets wrong).
            (UnaryOp::Neg, s) if s.is_signed() && s.bits() < 32 => format!(
                "(({t})(((int)((0u - (unsigned int){x}) << {w})) >> {w}))",
                w = 32 - s.bits()
            ),
            (UnaryOp::Neg, s) => {
                let w = self.t(wide_unsigned(s));
                format!("(({t})((({w})0) - ({w}){x}))")
            }
            (UnaryOp::Not, ScalarType::Bool) => format!("(!{x})"),
            (UnaryOp::Not, _) => format!("(({t})(~{x}))"),
        }
    }

    fn select(&mut self, cond: &str, accept: &str, reject: &str) -> String {
        format!("({cond} ? {accept} : {reject})")
    }

    fn cast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        self.note_type(to);
        let tt = self.t(to);
        if from == to {
            return x.to_string();
        }
        if to == ScalarType::Bool {
            return format!("({x} != 0)");
        }
        if from == ScalarType::Bool {
            return format!("(({tt})({x} ? 1 : 0))");
        }
        if !(from.is_float() && to.is_int()) {
            return format!("(({tt}){x})");
        }
        let ft = self.t(from);
        let name = format!("kiln_cvt_{}_{}", from.name(), to.name());
        let rule = rules::Saturation::of(to);
        let max = self.lit(rules::Saturation::value(rule.max, to));
        let min = self.lit(rules::Saturation::value(rule.min, to));
        let (lo, hi) = (rule.lo, rule.hi);
        let lo_test = format!("v <= {}", float_lit(lo, from));
        self.helper(format!(
            "{} {tt} {name}({ft} v) {{ return (v != v) ? ({tt})0 : (v >= {}) ? {max} : ({lo_test}) ? {min} : ({tt})v; }}",
            self.fn_prefix(),
            float_lit(hi, from)
        ));
        format!("{name}({x})")
    }

    fn bitcast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        let tt = self.t(to);
        if from.is_float() == to.is_float() {
            return format!("(({tt}){x})");
        }
        match self.d {
            Dialect::OpenCl => format!("as_{}({x})", tt.replace("unsigned ", "u")),
            Dialect::Cuda => {
                let f = match (from, to) {
                    (ScalarType::F32, ScalarType::I32) => "__float_as_int",
                    (ScalarType::F32, _) => "__float_as_uint",
                    (ScalarType::I32, ScalarType::F32) => "__int_as_float",
                    (_, ScalarType::F32) => "__uint_as_float",
                    (ScalarType::F64, _) => "__double_as_longlong",
                    _ => "__longlong_as_double",
                };
                if from.is_float() {
                    format!("(({tt}){f}({x}))")
                } else if from == ScalarType::U64 {
                    format!("{f}((long long){x})")
                } else {
                    format!("{f}({x})")
                }
            }
        }
    }

    fn math(&mut self, fun: MathFn, s: ScalarType, x: &[String]) -> W<String> {
        if !s.is_float() {
            let t = self.t(s);
            let w = self.t(wide_unsigned(s));
            return Ok(match fun {
                MathFn::Abs if s.is_signed() => format!(
                    "(({t})(({}) < 0 ? ({w})0 - ({w}){} : ({w}){}))",
                    x[0], x[0], x[0]
                ),
                MathFn::Abs => x[0].clone(),
                MathFn::Min => format!("(({1} < {0}) ? {1} : {0})", x[0], x[1]),
                MathFn::Max => format!("(({1} > {0}) ? {1} : {0})", x[0], x[1]),
                MathFn::Clamp => {
                    let name = format!("kiln_clamp_{}", s.name());
                    self.helper(format!("{} {t} {name}({t} x, {t} lo, {t} hi) {{ {t} m = (lo > x) ? lo : x; return (hi < m) ? hi : m; }}", self.fn_prefix()));
                    format!("{name}({}, {}, {})", x[0], x[1], x[2])
                }
                MathFn::Sign if s.is_signed() => {
                    format!("(({t})(({0}) > 0 ? 1 : (({0}) < 0 ? -1 : 0)))", x[0])
                }
                MathFn::Sign => format!("(({t})(({0}) > 0 ? 1 : 0))", x[0]),
                f => return err(format!("{} on integers", f.name())),
            });
        }
        let f = |name: &str| self.fname(name, s);
        let one = if s == ScalarType::F32 { "1.0f" } else { "1.0" };
        if rules::library_math(fun) || fun == MathFn::Log10 {
            return Ok(format!("{}({})", f(fun.name()), x[0]));
        }
        Ok(match fun {
            // NaN passes through explicitly: PoCL drops stores of floor/ceil/trunc/round of a
            // constant NaN, and the guard costs one compare elsewhere.
            MathFn::Floor | MathFn::Ceil | MathFn::Round | MathFn::Trunc => {
                format!("(({0}) != ({0}) ? ({0}) : {1}({0}))", x[0], f(fun.name()))
            }
            MathFn::Abs => format!("{}({})", f("fabs"), x[0]),
            MathFn::Atan2 => format!("{}({}, {})", f("atan2"), x[0], x[1]),
            MathFn::Pow => format!("{}({}, {})", f("pow"), x[0], x[1]),
            MathFn::Copysign => format!(
                "(({1}) != ({1}) ? {2}({0}) : {3}({0}, {1}))",
                x[0],
                x[1],
                f("fabs"),
                f("copysign")
            ),
            MathFn::Rsqrt => format!("({one} / {}({}))", f("sqrt"), x[0]),
            MathFn::Fract => format!(
                "(({0}) != ({0}) ? ({0}) : ({0} - {1}({0})))",
                x[0],
                f("trunc")
            ),
            MathFn::Min => format!("{}({}, {})", self.min_max(false, s), x[0], x[1]),
            MathFn::Max => format!("{}({}, {})", self.min_max(true, s), x[0], x[1]),
            MathFn::Clamp => {
                let (mn, mx) = (self.min_max(false, s), self.min_max(true, s));
                format!("{mn}({mx}({}, {}), {})", x[0], x[1], x[2])
            }
            MathFn::Fma => format!("{}({}, {}, {})", f("fma"), x[0], x[1], x[2]),
            MathFn::Sign => format!("(({0}) > 0 ? {1} : (({0}) < 0 ? -{1} : ({0})))", x[0], one),
            MathFn::IsNan => format!("({0} != {0})", x[0]),
            MathFn::IsInf => format!(
                "({}({}) == {})",
                f("fabs"),
                x[0],
                self.lit(if s == ScalarType::F32 {
                    ScalarValue::F32(f32::INFINITY)
                } else {
                    ScalarValue::F64(f64::INFINITY)
                })
            ),
            library => return err(format!("{} has no C spelling", library.name())),
        })
    }

    fn builtin(&mut self, b: Builtin) -> String {
        let ax = |a: Axis| a.index();
        let xyz = |a: Axis| ["x", "y", "z"][a.index()];
        match self.d {
            Dialect::OpenCl => match b {
                Builtin::GlobalId(a) => format!("((uint)get_global_id({}))", ax(a)),
                Builtin::LocalId(a) => format!("((uint)get_local_id({}))", ax(a)),
                Builtin::GroupId(a) => format!("((uint)get_group_id({}))", ax(a)),
                Builtin::GroupSize(a) => format!("((uint)get_local_size({}))", ax(a)),
                Builtin::NumGroups(a) => format!("((uint)get_num_groups({}))", ax(a)),
                Builtin::GlobalSize(a) => format!("((uint)get_global_size({}))", ax(a)),
                Builtin::LocalIndex | Builtin::SubgroupId => "((uint)(get_local_id(0) + get_local_size(0) * (get_local_id(1) + get_local_size(1) * get_local_id(2))))".into(),
                Builtin::SubgroupSize => "1u".into(),
                Builtin::SubgroupLane => "0u".into(),
            },
            Dialect::Cuda => match b {
                Builtin::GlobalId(a) => format!("(blockIdx.{0} * blockDim.{0} + threadIdx.{0})", xyz(a)),
                Builtin::LocalId(a) => format!("threadIdx.{}", xyz(a)),
                Builtin::GroupId(a) => format!("blockIdx.{}", xyz(a)),
                Builtin::GroupSize(a) => format!("blockDim.{}", xyz(a)),
                Builtin::NumGroups(a) => format!("gridDim.{}", xyz(a)),
                Builtin::GlobalSize(a) => format!("(gridDim.{0} * blockDim.{0})", xyz(a)),
                Builtin::LocalIndex => "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))".into(),
                Builtin::SubgroupSize => "32u".into(),
                Builtin::SubgroupId => "((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) >> 5)".into(),
                Builtin::SubgroupLane => "((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u)".into(),
            },
        }
    }

    /// The atomic operation, which on an out-of-bounds index is skipped and reads zero.
    fn atomic(&mut self, cx: &Cx, a: AtomicCall) -> W<Written> {
        let (name, _) = mem_info(cx.kernel, a.memory)?;
        let zero = self.lit(ScalarValue::zero(a.ty));
        let i = a.index;
        let op = Writer::atomic(self, &name, a)?;
        Ok(Written::one(format!(
            "(({i} < {name}_len) ? {op} : {zero})"
        )))
    }

    fn subgroup(&mut self, call: SubgroupCall) -> W<String> {
        Writer::subgroup(self, call)
    }

    /// A device function that uses subgroup operations takes the caller's lane mask.
    fn call_prefix(&mut self, function: usize) -> Option<String> {
        let l = self.lanes.as_ref()?;
        (l.functions.get(function) == Some(&true)).then(|| l.current.clone())
    }
}

impl Writer {
    pub(crate) fn fname(&self, base: &str, s: ScalarType) -> String {
        if self.d == Dialect::Cuda && s == ScalarType::F32 {
            format!("{base}f")
        } else {
            base.to_string()
        }
    }

    /// The helper computing float min (or max): NaN gives the other operand, and of -0 and +0
    /// min gives -0 and max +0 (equal operands combine their bits: OR keeps a sign, AND
    /// clears it).
    pub(crate) fn min_max(&mut self, max: bool, s: ScalarType) -> String {
        let t = self.t(s);
        let name = format!("kiln_{}_{}", if max { "max" } else { "min" }, s.name());
        let combine = if max { "&" } else { "|" };
        let libm = self.fname(if max { "fmax" } else { "fmin" }, s);
        let (to_bits, from_bits) = match (self.d, s) {
            (Dialect::OpenCl, ScalarType::F32) => ("as_uint", "as_float"),
            (Dialect::OpenCl, _) => ("as_ulong", "as_double"),
            (Dialect::Cuda, ScalarType::F32) => ("__float_as_uint", "__uint_as_float"),
            (Dialect::Cuda, _) => ("__double_as_longlong", "__longlong_as_double"),
        };
        self.helper(format!(
            "{} {t} {name}({t} a, {t} b) {{ return (a == b) ? {from_bits}({to_bits}(a) {combine} {to_bits}(b)) : {libm}(a, b); }}",
            self.fn_prefix()
        ));
        name
    }

    /// The atomic operation `a` on element `a.index` of the memory `name`.
    pub(crate) fn atomic(&mut self, name: &str, a: AtomicCall) -> W<String> {
        let (memory, s, op) = (a.memory, a.ty, a.op);
        let (i, v, cmp) = (a.index, a.value, a.compare);
        if s.bits() == 64 {
            self.needs.atomics64 = true;
        }
        let t = self.t(s);
        match self.d {
            Dialect::OpenCl => {
                let space = if matches!(memory, Memory::Shared(_)) {
                    "__local"
                } else {
                    "__global"
                };
                let prefix = if s.bits() == 64 { "atom" } else { "atomic" };
                let p = format!("(volatile {space} {t}*)&{name}[{i}]");
                Ok(match (op, s) {
                    (AtomicOp::Add, ScalarType::F32) => {
                        let h = format!("kiln_atomic_add_f32_{}", &space[2..]);
                        self.helper(format!("static inline float {h}(volatile {space} float* p, float v) {{ volatile {space} uint* q = (volatile {space} uint*)p; uint old = *q; for (;;) {{ uint seen = atomic_cmpxchg(q, old, as_uint(as_float(old) + v)); if (seen == old) return as_float(old); old = seen; }} }}"));
                        format!("{h}({p}, {v})")
                    }
                    (AtomicOp::Exchange, ScalarType::F32) => format!("atomic_xchg({p}, {v})"),
                    (AtomicOp::CompareExchange, _) => {
                        format!("{prefix}_cmpxchg({p}, {}, {v})", cmp.unwrap_or("0"))
                    }
                    _ => {
                        let n = match op {
                            AtomicOp::Add => "add",
                            AtomicOp::Sub => "sub",
                            AtomicOp::Min => "min",
                            AtomicOp::Max => "max",
                            AtomicOp::And => "and",
                            AtomicOp::Or => "or",
                            AtomicOp::Xor => "xor",
                            AtomicOp::Exchange => "xchg",
                            AtomicOp::CompareExchange => unreachable!(),
                        };
                        format!("{prefix}_{n}({p}, {v})")
                    }
                })
            }
            Dialect::Cuda => {
                let p = format!("&{name}[{i}]");
                let ull = "unsigned long long";
                let as_ull = |x: &str| format!("({ull})({x})");
                let p64 = format!("({ull}*){p}");
                Ok(match (op, s) {
                    (AtomicOp::Add, ScalarType::F32)
                    | (AtomicOp::Add, ScalarType::I32 | ScalarType::U32) => {
                        format!("atomicAdd({p}, {v})")
                    }
                    (AtomicOp::Add, _) => format!("(({t})atomicAdd({p64}, {}))", as_ull(v)),
                    (AtomicOp::Sub, ScalarType::I32 | ScalarType::U32) => {
                        format!("atomicSub({p}, {v})")
                    }
                    (AtomicOp::Sub, _) => format!("(({t})atomicAdd({p64}, 0ULL - {}))", as_ull(v)),
                    (AtomicOp::Min, ScalarType::I64) => {
                        format!("(({t})atomicMin((long long*){p}, (long long)({v})))")
                    }
                    (AtomicOp::Max, ScalarType::I64) => {
                        format!("(({t})atomicMax((long long*){p}, (long long)({v})))")
                    }
                    (AtomicOp::Min, _) => format!("atomicMin({p}, {v})"),
                    (AtomicOp::Max, _) => format!("atomicMax({p}, {v})"),
                    (AtomicOp::And | AtomicOp::Or | AtomicOp::Xor, _) => {
                        let f = match op {
                            AtomicOp::And => "atomicAnd",
                            AtomicOp::Or => "atomicOr",
                            _ => "atomicXor",
                        };
                        if s.bits() == 64 {
                            format!("(({t}){f}({p64}, {}))", as_ull(v))
                        } else {
                            format!("{f}({p}, {v})")
                        }
                    }
                    (AtomicOp::Exchange, ScalarType::I64 | ScalarType::U64) => {
                        format!("(({t})atomicExch({p64}, {}))", as_ull(v))
                    }
                    (AtomicOp::Exchange, _) => format!("atomicExch({p}, {v})"),
                    (AtomicOp::CompareExchange, ScalarType::I64 | ScalarType::U64) => format!(
                        "(({t})atomicCAS({p64}, {}, {}))",
                        as_ull(cmp.unwrap_or("0")),
                        as_ull(v)
                    ),
                    (AtomicOp::CompareExchange, _) => {
                        format!("atomicCAS({p}, {}, {v})", cmp.unwrap_or("0"))
                    }
                })
            }
        }
    }
}
