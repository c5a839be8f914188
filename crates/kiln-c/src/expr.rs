//! Expressions: operators with kiln's rules spelled out (wrapping, division by zero, shift
//! amounts, saturating casts, NaN in min/max), math functions, builtins and atomics.

use crate::*;

impl Syntax for Writer {
    fn literal(&mut self, v: ScalarValue) -> String {
        self.lit(v)
    }

    /// A `bool` kernel parameter arrives as a `uchar`, an `f16` one as its bits.
    fn param(&mut self, cx: &Cx, name: String, s: ScalarType) -> String {
        match (s, cx.is_kernel()) {
            (ScalarType::Bool, true) => format!("({name} != 0)"),
            (ScalarType::F16, true) => self.h2f(&name),
            _ => name,
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
                let r = match s {
                    ScalarType::Bool => format!("({r} != 0)"),
                    ScalarType::F16 => self.h2f(&r),
                    _ => r,
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
        if s == ScalarType::F16 {
            let x = self.binary(op, ScalarType::F32, a, b)?;
            return Ok(match op.is_compare() {
                true => x,
                false => self.round_half(&x),
            });
        }
        if let Some(text) = rules::infix(op, s, a, b)? {
            return Ok(text);
        }
        if s.is_float() {
            return Ok(format!("{}({a}, {b})", self.d.math_name("fmod", s)));
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
                self.d.helper_prefix()
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
        let tt = self.t(to);
        if from == to {
            return x.to_string();
        }
        if from == ScalarType::F16 {
            return self.cast(x, ScalarType::F32, to);
        }
        if to == ScalarType::F16 {
            // Integers reach binary16 through `float` exactly or past its range (where both
            // give infinity); a `double` rounds once.
            return match from {
                ScalarType::F64 => {
                    let bits = self.f2h(x, ScalarType::F64);
                    self.h2f(&bits)
                }
                ScalarType::Bool => format!("({x} ? 1.0f : 0.0f)"),
                _ => self.round_half(&format!("((float){x})")),
            };
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
            self.d.helper_prefix(),
            float_lit(hi, from)
        ));
        format!("{name}({x})")
    }

    fn bitcast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        let tt = self.t(to);
        if from == ScalarType::F16 {
            return format!("(({tt}){})", self.f2h(x, ScalarType::F32));
        }
        if to == ScalarType::F16 {
            return self.h2f(&format!("(({}){x})", self.t(ScalarType::U16)));
        }
        if from.is_float() == to.is_float() {
            return format!("(({tt}){x})");
        }
        self.d.float_int_bitcast(x, from, to, tt)
    }

    fn math(&mut self, fun: MathFn, s: ScalarType, x: &[String]) -> W<String> {
        if s == ScalarType::F16 {
            let r = self.math(fun, ScalarType::F32, x)?;
            return Ok(match fun.returns_bool() {
                true => r,
                false => self.round_half(&r),
            });
        }
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
                    self.helper(format!("{} {t} {name}({t} x, {t} lo, {t} hi) {{ {t} m = (lo > x) ? lo : x; return (hi < m) ? hi : m; }}", self.d.helper_prefix()));
                    format!("{name}({}, {}, {})", x[0], x[1], x[2])
                }
                MathFn::Sign if s.is_signed() => {
                    format!("(({t})(({0}) > 0 ? 1 : (({0}) < 0 ? -1 : 0)))", x[0])
                }
                MathFn::Sign => format!("(({t})(({0}) > 0 ? 1 : 0))", x[0]),
                f => return err(format!("{} on integers", f.name())),
            });
        }
        let f = |name: &str| self.d.math_name(name, s);
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
        self.d.builtin(b)
    }

    /// The atomic operation, which on an out-of-bounds index is skipped and reads zero.
    fn atomic(&mut self, cx: &Cx, a: AtomicCall) -> W<Written> {
        let (name, _) = mem_info(cx.kernel, a.memory)?;
        let zero = self.lit(ScalarValue::zero(a.ty));
        let i = a.index;
        let op = Writer::atomic(self, &name, &a);
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
    /// The helper computing float min (or max): NaN gives the other operand, and of -0 and +0
    /// min gives -0 and max +0 (equal operands combine their bits: OR keeps a sign, AND
    /// clears it).
    pub(crate) fn min_max(&mut self, max: bool, s: ScalarType) -> String {
        let t = self.t(s);
        let name = format!("kiln_{}_{}", if max { "max" } else { "min" }, s.name());
        let combine = if max { "&" } else { "|" };
        let libm = self.d.math_name(if max { "fmax" } else { "fmin" }, s);
        let (to_bits, from_bits) = self.d.float_bit_casts(s);
        self.helper(format!(
            "{} {t} {name}({t} a, {t} b) {{ return (a == b) ? {from_bits}({to_bits}(a) {combine} {to_bits}(b)) : {libm}(a, b); }}",
            self.d.helper_prefix()
        ));
        name
    }

    /// The atomic operation `a` on element `a.index` of the memory `name`.
    pub(crate) fn atomic(&mut self, name: &str, a: &AtomicCall) -> String {
        self.d.atomic(&mut self.helpers, name, a)
    }
}
