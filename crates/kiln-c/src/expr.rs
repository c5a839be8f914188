//! Expressions: operators with kiln's rules spelled out (wrapping, division by zero, shift
//! amounts, saturating casts, NaN in min/max), math functions, builtins and atomics.

use crate::*;
use kiln_ir::*;

impl Writer {
    pub(crate) fn expr(&mut self, cx: &Cx, h: Handle) -> W<Vals> {
        let e = &cx.body.exprs[h.index()];
        let ty = cx.ty(h)?;
        let one = |s: String| {
            Ok(Vals {
                comps: vec![s],
                call_struct: None,
                fn_name: String::new(),
            })
        };
        let u32t = Type::Scalar(ScalarType::U32);
        let arg = |x: Handle, c: usize| -> W<String> { Ok(temp_name(x, c, &cx.ty(x)?)) };
        match e {
            Expr::Literal(v) => one(self.lit(*v)),
            Expr::Param(i) => {
                let p = &cx.params[*i as usize];
                let flat = ty.flatten();
                let comps = flat
                    .iter()
                    .enumerate()
                    .map(|(c, (s, _))| {
                        let name = if !cx.is_kernel() {
                            component_name(&p.name, c, ty.flatten().len())
                        } else if flat.len() == 1 {
                            p.name.clone()
                        } else {
                            format!("{}_{c}", p.name)
                        };
                        if *s == ScalarType::Bool && cx.is_kernel() {
                            format!("({name} != 0)")
                        } else {
                            name
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::LocalGet(l) => {
                let name = cx.local_name(l.0 as usize);
                Ok(Vals {
                    comps: (0..ty.flatten().len())
                        .map(|c| component_name(&name, c, ty.flatten().len()))
                        .collect(),
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::LocalIndex { local, index } => {
                let Type::Array(e, n) = &cx.body.locals[local.0 as usize].ty else {
                    return err("not an array local");
                };
                let name = cx.local_name(local.0 as usize);
                let comps = e.flatten().len();
                let i = temp_name(*index, 0, &u32t);
                let checked = !cx.in_bounds.load(h);
                let vals = e
                    .flatten()
                    .iter()
                    .enumerate()
                    .map(|(c, (s, _))| {
                        let arr = if comps == 1 {
                            name.clone()
                        } else {
                            format!("{name}_{c}")
                        };
                        if checked {
                            format!(
                                "(({i} < {n}u) ? {arr}[{i}] : {})",
                                self.lit(ScalarValue::zero(*s))
                            )
                        } else {
                            format!("{arr}[{i}]")
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps: vals,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Load { memory, index } => {
                let (name, elem) = mem_info(cx.kernel, *memory)?;
                let i = temp_name(*index, 0, &u32t);
                let checked = !cx.in_bounds.load(h);
                let vals = elem
                    .flatten()
                    .into_iter()
                    .map(|(s, off)| {
                        let r = self.elem_ref(&name, &elem, s, off, &i, *memory);
                        let r = if s == ScalarType::Bool {
                            format!("({r} != 0)")
                        } else {
                            r
                        };
                        if checked {
                            format!(
                                "(({i} < {name}_len) ? {r} : {})",
                                self.lit(ScalarValue::zero(s))
                            )
                        } else {
                            r
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps: vals,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Len(m) => one(format!("{}_len", mem_info(cx.kernel, *m)?.0)),
            Expr::Binary { op, lhs, rhs } => {
                let lt = cx.ty(*lhs)?;
                let s = lt
                    .component()
                    .ok_or_else(|| WriteError("binary on a non-scalar".into()))?;
                let comps = (0..lt.flatten().len())
                    .map(|c| {
                        self.binary(*op, s, &temp_name(*lhs, c, &lt), &temp_name(*rhs, c, &lt))
                    })
                    .collect::<W<Vec<_>>>()?;
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Unary { op, arg: a } => {
                let s = ty
                    .component()
                    .ok_or_else(|| WriteError("unary on a non-scalar".into()))?;
                let comps = (0..ty.flatten().len())
                    .map(|c| {
                        let x = temp_name(*a, c, &ty);
                        match (op, s) {
                            (UnaryOp::Neg, s) if s.is_float() => format!("(-{x})"),
                            // Narrow signed negation sign-extends by shifts: NVRTC 13 for
                            // sm_90 on an H100 widened `(short)(0u - (unsigned)x)` of -32768
                            // to +32768 (it emits neg.s16, whose widening ptxas gets wrong).
                            (UnaryOp::Neg, s) if s.is_signed() && s.bits() < 32 => format!(
                                "(({})(((int)((0u - (unsigned int){x}) << {w})) >> {w}))",
                                self.t(s),
                                w = 32 - s.bits()
                            ),
                            (UnaryOp::Neg, s) => format!(
                                "(({})((({})0) - ({}){x}))",
                                self.t(s),
                                self.t(wide_unsigned(s)),
                                self.t(wide_unsigned(s))
                            ),
                            (UnaryOp::Not, ScalarType::Bool) => format!("(!{x})"),
                            (UnaryOp::Not, s) => format!("(({})(~{x}))", self.t(s)),
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let c = arg(*cond, 0)?;
                let comps = (0..ty.flatten().len())
                    .map(|i| {
                        format!(
                            "({c} ? {} : {})",
                            temp_name(*accept, i, &ty),
                            temp_name(*reject, i, &ty)
                        )
                    })
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Cast { arg: a, to } => {
                let at = cx.ty(*a)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("cast of a non-scalar".into()))?;
                self.note_type(*to);
                let comps = (0..at.flatten().len())
                    .map(|c| self.cast(&temp_name(*a, c, &at), from, *to))
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Bitcast { arg: a, to } => {
                let at = cx.ty(*a)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("bitcast of a non-scalar".into()))?;
                let comps = (0..at.flatten().len())
                    .map(|c| self.bitcast(&temp_name(*a, c, &at), from, *to))
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
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
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Builtin(b) => one(self.builtin(*b)),
            Expr::Compose { parts, .. } => {
                let mut comps = Vec::new();
                for p in parts {
                    let pt = cx.ty(*p)?;
                    for c in 0..pt.flatten().len() {
                        comps.push(temp_name(*p, c, &pt));
                    }
                }
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Extract { base, index } => {
                let bt = cx.ty(*base)?;
                let range = bt
                    .component_range(*index)
                    .ok_or_else(|| WriteError(format!("{bt} has no component {index}")))?;
                Ok(Vals {
                    comps: range.map(|c| temp_name(*base, c, &bt)).collect(),
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Atomic {
                memory,
                index,
                op,
                value,
                compare,
            } => {
                let (name, elem) = mem_info(cx.kernel, *memory)?;
                let s = elem
                    .as_scalar()
                    .ok_or_else(|| WriteError("atomic on a non-scalar".into()))?;
                let i = temp_name(*index, 0, &u32t);
                let v = arg(*value, 0)?;
                let cmp = compare.map(|c| temp_name(c, 0, &Type::Scalar(s)));
                let a = self.atomic(&name, *memory, s, *op, &i, &v, cmp.as_deref())?;
                one(format!(
                    "(({i} < {name}_len) ? {a} : {})",
                    self.lit(ScalarValue::zero(s))
                ))
            }
            Expr::Subgroup { op, arg: a, lane } => {
                let s = cx
                    .ty(*a)?
                    .as_scalar()
                    .ok_or_else(|| WriteError("subgroup op on a non-scalar".into()))?;
                let x = arg(*a, 0)?;
                let l = lane.map(|l| temp_name(l, 0, &u32t));
                one(self.subgroup(*op, s, &x, l.as_deref())?)
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
                if let Some(l) = &self.lanes {
                    if l.functions.get(function.0 as usize) == Some(&true) {
                        flat_args.insert(0, l.current.clone());
                    }
                }
                let call = format!("{}({})", f.name, flat_args.join(", "));
                if ty.flatten().len() == 1 {
                    one(call)
                } else {
                    Ok(Vals {
                        comps: Vec::new(),
                        call_struct: Some(call),
                        fn_name: f.name.clone(),
                    })
                }
            }
        }
    }

    pub(crate) fn binary(&mut self, op: BinaryOp, s: ScalarType, a: &str, b: &str) -> W<String> {
        if op.is_compare() {
            return Ok(format!("({a} {} {b})", op.symbol()));
        }
        if s.is_float() {
            return Ok(match op {
                BinaryOp::Rem => format!("{}({a}, {b})", self.fname("fmod", s)),
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
        let t = self.t(s);
        let w = self.t(wide_unsigned(s));
        Ok(match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                format!("(({t})(({w}){a} {} ({w}){b}))", op.symbol())
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                format!("(({t})({a} {} {b}))", op.symbol())
            }
            BinaryOp::Shl => format!(
                "(({t})(({}){a} << (({w}){b} & {}u)))",
                self.t(unsigned_of(s)),
                s.bits() - 1
            ),
            BinaryOp::Shr => format!("(({t})({a} >> (({w}){b} & {}u)))", s.bits() - 1),
            BinaryOp::Div | BinaryOp::Rem => {
                let name = format!(
                    "kiln_{}_{}",
                    if op == BinaryOp::Div { "div" } else { "rem" },
                    s.name()
                );
                let min_check = if s.is_signed() {
                    format!(
                        " || (a == {} && b == ({t})-1)",
                        self.lit(ScalarValue::from_bits(s, 1u64 << (s.bits() - 1)))
                    )
                } else {
                    String::new()
                };
                let body = if op == BinaryOp::Div {
                    format!("(b == ({t})0{min_check}) ? a : ({t})(a / b)")
                } else {
                    format!("(b == ({t})0{min_check}) ? ({t})0 : ({t})(a % b)")
                };
                self.helper(format!(
                    "{} {t} {name}({t} a, {t} b) {{ return {body}; }}",
                    self.fn_prefix()
                ));
                format!("{name}({a}, {b})")
            }
            _ => return err(format!("`{}` on {s}", op.symbol())),
        })
    }

    pub(crate) fn cast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
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
        let (lo, hi) = if to.is_signed() {
            (
                -(2f64.powi(to.bits() as i32 - 1)),
                2f64.powi(to.bits() as i32 - 1),
            )
        } else {
            (-1.0, 2f64.powi(to.bits() as i32))
        };
        let max = self.lit(ScalarValue::from_bits(
            to,
            if to.is_signed() {
                (1u64 << (to.bits() - 1)) - 1
            } else {
                u64::MAX
            },
        ));
        let min = self.lit(ScalarValue::from_bits(
            to,
            if to.is_signed() {
                1u64 << (to.bits() - 1)
            } else {
                0
            },
        ));
        let lo_test = format!("v <= {}", float_lit(lo, from));
        self.helper(format!(
            "{} {tt} {name}({ft} v) {{ return (v != v) ? ({tt})0 : (v >= {}) ? {max} : ({lo_test}) ? {min} : ({tt})v; }}",
            self.fn_prefix(),
            float_lit(hi, from)
        ));
        format!("{name}({x})")
    }

    pub(crate) fn bitcast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
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

    pub(crate) fn fname(&self, base: &str, s: ScalarType) -> String {
        if self.d == Dialect::Cuda && s == ScalarType::F32 {
            format!("{base}f")
        } else {
            base.to_string()
        }
    }

    pub(crate) fn math(&mut self, fun: MathFn, s: ScalarType, x: &[String]) -> W<String> {
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
        Ok(match fun {
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
            | MathFn::Log10
            | MathFn::Sqrt => format!("{}({})", f(fun.name()), x[0]),
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
        })
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

    pub(crate) fn builtin(&self, b: Builtin) -> String {
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

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn atomic(
        &mut self,
        name: &str,
        memory: Memory,
        s: ScalarType,
        op: AtomicOp,
        i: &str,
        v: &str,
        cmp: Option<&str>,
    ) -> W<String> {
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
