//! Math functions: WGSL's built-ins where they meet kiln's bounds, kiln's own where the
//! drivers' are loose (exp, sinh, cosh, logarithms), and float remainders.

use crate::*;

/// The helper computing `x % y` on floats of type `s` exactly (C's `fmod`), on the bits: both
/// mantissas get their implicit bit (subnormals are normalized first), then a shift-and-subtract
/// long division over the exponent difference leaves the remainder, which is always
/// representable. Integer operations only, so it holds on drivers that flush subnormals or whose
/// `frexp`/`ldexp` are loose (lavapipe gave 0.5 for `2.5 % 2^-126` next to a second `%` in the
/// same kernel with the float-based version this replaces).
/// `trip` is written at its start and at the top of each of its loops' bodies (see
/// [`Writer::trip`]).
pub(crate) fn fmod_helper(s: ScalarType, trip: &str) -> String {
    let (u, abs_mask, inf, sign) = float_bits(s);
    let t = rt(s);
    let (mb, mant, imp, zero) = if s == ScalarType::F32 {
        (23, "0x7fffffu", "0x800000u", "0u")
    } else {
        (52, "0xffffffffffffflu", "0x10000000000000lu", "0lu")
    };
    // Without an `else`. llvmpipe runs each loop of the untaken branch of an `if` in a kernel
    // once, but not these: uncounted, f32 `%` in a loop gave no wrong value before the fault
    // at any trip count (measured).
    let normalize = |f: &str, e: &str| {
        format!(
            "  if ({e} != 0) {{ {f} = {f} | {imp}; }}\n\
             \x20 if ({e} == 0) {{ {e} = 1; loop {{ {trip}if (({f} & {imp}) != {zero}) {{ break; }} {f} = {f} << 1u; {e} = {e} - 1; }} }}\n"
        )
    };
    format!(
        "// x % y exactly (C fmod) on the bits: long division of the mantissas.\n\
         fn kiln_fmod_{t}(x: {t}, y: {t}) -> {t} {{\n\
         \x20 {trip}let mx = bitcast<{u}>(x) & {abs_mask}; let my = bitcast<{u}>(y) & {abs_mask};\n\
         \x20 if (mx >= {inf} || my > {inf} || my == {zero}) {{ return (x - x) / (y - y); }}\n\
         \x20 if (mx < my) {{ return x; }}\n\
         \x20 var ex = i32(mx >> {mb}u); var fx = mx & {mant};\n\
         {}\
         \x20 var ey = i32(my >> {mb}u); var fy = my & {mant};\n\
         {}\
         \x20 var k = ex - ey;\n\
         \x20 loop {{\n\
         \x20   {trip}if (fx >= fy) {{ fx = fx - fy; }}\n\
         \x20   if (k == 0) {{ break; }}\n\
         \x20   fx = fx << 1u; k = k - 1;\n\
         \x20 }}\n\
         \x20 let sign = bitcast<{u}>(x) & {sign};\n\
         \x20 if (fx == {zero}) {{ return bitcast<{t}>(sign); }}\n\
         \x20 var e = ey;\n\
         \x20 loop {{ {trip}if ((fx & {imp}) != {zero}) {{ break; }} fx = fx << 1u; e = e - 1; }}\n\
         \x20 if (e >= 1) {{ return bitcast<{t}>(sign | ({u}(e) << {mb}u) | (fx & {mant})); }}\n\
         \x20 return bitcast<{t}>(sign | (fx >> u32(1 - e)));\n\
         }}",
        normalize("fx", "ex"),
        normalize("fy", "ey"),
    )
}

impl Writer {
    pub(crate) fn math(&mut self, fun: MathFn, s: ScalarType, x: &[String]) -> W<String> {
        if !s.is_float() {
            return Ok(match fun {
                MathFn::Abs if s.is_signed() => wrap(s, format!("abs({})", x[0])),
                MathFn::Abs => x[0].clone(),
                MathFn::Min => format!("min({}, {})", x[0], x[1]),
                MathFn::Max => format!("max({}, {})", x[0], x[1]),
                MathFn::Clamp => format!("min(max({}, {}), {})", x[0], x[1], x[2]),
                MathFn::Sign if s.is_signed() => format!(
                    "select(select({z}, {m}, {v} < {z}), {o}, {v} > {z})",
                    v = x[0],
                    z = zero(s),
                    o = one(s),
                    m = lit(ScalarValue::from_bits(reg(s), u64::MAX))
                ),
                MathFn::Sign => format!("select({}, {}, {} > {})", zero(s), one(s), x[0], zero(s)),
                f => return err(format!("{} on integers", f.name())),
            });
        }
        let t = rt(s);
        let (u, abs_mask, inf, sign_bit) = float_bits(s);
        let z = zero(s);
        let o = one(s);
        if s == ScalarType::F32 {
            if let Some(call) = self.f32_math(fun, x) {
                return Ok(call);
            }
        }
        if rules::library_math(fun) {
            return Ok(format!("{}({})", fun.name(), x[0]));
        }
        Ok(match fun {
            MathFn::Floor | MathFn::Ceil | MathFn::Trunc | MathFn::Abs => {
                format!("{}({})", fun.name(), x[0])
            }
            MathFn::Log10 => format!("(log({}) * {})", x[0], float_lit(std::f64::consts::LOG10_E, s)),
            MathFn::Round => {
                let name = format!("kiln_round_{t}");
                self.helper(format!("// rounds half away from zero\nfn {name}(x: {t}) -> {t} {{ let t = trunc(x); if (abs(x - t) >= {half}) {{ return t + select({m}, {o}, x > {z}); }} return t; }}", half = float_lit(0.5, s), m = float_lit(-1.0, s)));
                format!("{name}({})", x[0])
            }
            MathFn::Atan2 => format!("atan2({}, {})", x[0], x[1]),
            MathFn::Pow => format!("pow({}, {})", x[0], x[1]),
            MathFn::Copysign => format!(
                "select(bitcast<{t}>((bitcast<{u}>({a}) & {abs_mask}) | (bitcast<{u}>({b}) & {sign_bit})), abs({a}), (bitcast<{u}>({b}) & {abs_mask}) > {inf})",
                a = x[0],
                b = x[1]
            ),
            MathFn::Rsqrt => format!("({o} / sqrt({}))", x[0]),
            MathFn::Fract => format!("({0} - trunc({0}))", x[0]),
            MathFn::Min | MathFn::Max | MathFn::Clamp => {
                if s == ScalarType::F64 {
                    self.needs.int64 = true;
                }
                let helper = |max: bool| {
                    let name = format!("kiln_{}_{t}", if max { "max" } else { "min" });
                    let (inner, combine) = if max { ("max", "&") } else { ("min", "|") };
                    (name.clone(), format!("// NaN gives the other operand; of -0 and +0, min gives -0 and max +0\nfn {name}(a: {t}, b: {t}) -> {t} {{ if (!(a == a)) {{ return b; }} if (!(b == b)) {{ return a; }} if (a == b) {{ return bitcast<{t}>(bitcast<{u}>(a) {combine} bitcast<{u}>(b)); }} return {inner}(a, b); }}"))
                };
                let (mn, mn_text) = helper(false);
                let (mx, mx_text) = helper(true);
                match fun {
                    MathFn::Min => {
                        self.helper(mn_text);
                        format!("{mn}({}, {})", x[0], x[1])
                    }
                    MathFn::Max => {
                        self.helper(mx_text);
                        format!("{mx}({}, {})", x[0], x[1])
                    }
                    _ => {
                        self.helper(mn_text);
                        self.helper(mx_text);
                        format!("{mn}({mx}({}, {}), {})", x[0], x[1], x[2])
                    }
                }
            }
            MathFn::Fma => format!("fma({}, {}, {})", x[0], x[1], x[2]),
            MathFn::Sign => format!(
                "select(select({v}, {m}, {v} < {z}), {o}, {v} > {z})",
                v = x[0],
                m = float_lit(-1.0, s)
            ),
            MathFn::IsNan => format!("((bitcast<{u}>({}) & {abs_mask}) > {inf})", x[0]),
            MathFn::IsInf => format!("((bitcast<{u}>({}) & {abs_mask}) == {inf})", x[0]),
            library => return err(format!("{} has no WGSL spelling", library.name())),
        })
    }

    /// kiln's own f32 versions of functions drivers are allowed to (and some do) compute
    /// with errors of thousands of ulps: the inverse trigonometric functions, and sinh/tanh
    /// near zero. Each stays within a few ulps of the correctly rounded result.
    pub(crate) fn f32_math(&mut self, fun: MathFn, x: &[String]) -> Option<String> {
        let atan = "// atan within about 2 ulps: reduce |x| to at most tan(pi/8), then an odd polynomial.\nfn kiln_atan_f32(x: f32) -> f32 {\n  let a = abs(x);\n  var base = 0.0f;\n  var r = a;\n  if (a > 2.4142137f) { base = 1.5707964f; r = -1.0f / a; } else if (a > 0.41421357f) { base = 0.7853982f; r = (a - 1.0f) / (a + 1.0f); }\n  let z = r * r;\n  let p = (((0.0805374449538f * z - 0.138776856032f) * z + 0.199777106478f) * z - 0.333329491539f) * z * r + r;\n  return bitcast<f32>(bitcast<u32>(base + p) | (bitcast<u32>(x) & 0x80000000u));\n}";
        // Drivers' exp lost up to 62 ulps (lavapipe, at -85): kiln reduces the argument with
        // ln 2 in two parts (k * hi is exact), takes e^r by a degree-7 polynomial on
        // |r| <= ln2 / 2 and applies 2^k in two normal factors, so results near either limit
        // keep their bits; `down` divides the result by 2^down first (cosh and sinh near the
        // overflow threshold, where e^x itself overflows but e^x / 2 does not).
        let exp = "// e^x / 2^down within 2 ulps: x = k ln2 + r, e^r by a polynomial, then 2^(k - down) in two normal factors.\nfn kiln_exp_scaled_f32(x: f32, down: i32) -> f32 {\n  if (x > 89.5f) { return bitcast<f32>(0x7f800000u); }\n  if (x < -104.0f) { return 0.0f; }\n  let k = round(x * 1.4426950f);\n  let r = (x - k * 0.69314575f) - k * 1.4286068e-6f;\n  let p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.041666668f + r * (0.008333334f + r * (0.0013888889f + r * 0.0001984127f))))));\n  let e = i32(k) - down;\n  let e1 = e / 2;\n  let e2 = e - e1;\n  return p * bitcast<f32>(u32(e1 + 127) << 23u) * bitcast<f32>(u32(e2 + 127) << 23u);\n}";
        let sinh = "// sinh: a Taylor polynomial below 1 in magnitude (no cancellation), exponentials above; above 9 e^-|x| is below half an ulp, so e^|x| / 2 alone.\nfn kiln_sinh_f32(x: f32) -> f32 {\n  let a = abs(x);\n  if (a < 1.0f) { let z = x * x; return x + x * z * (0.16666667f + z * (0.008333334f + z * (0.0001984127f + z * 2.7557319e-6f))); }\n  var s = kiln_exp_scaled_f32(a, 1);\n  if (a < 9.0f) { s = s - 0.25f / s; }\n  return select(s, -s, x < 0.0f);\n}";
        Some(match fun {
            MathFn::Atan => {
                self.helper(atan.into());
                format!("kiln_atan_f32({})", x[0])
            }
            MathFn::Asin => {
                self.helper(atan.into());
                self.helper("fn kiln_asin_f32(x: f32) -> f32 { return kiln_atan_f32(x / sqrt((1.0f - x) * (1.0f + x))); }".into());
                format!("kiln_asin_f32({})", x[0])
            }
            MathFn::Acos => {
                self.helper(atan.into());
                self.helper("fn kiln_acos_f32(x: f32) -> f32 { return 2.0f * kiln_atan_f32(sqrt((1.0f - x) / (1.0f + x))); }".into());
                format!("kiln_acos_f32({})", x[0])
            }
            MathFn::Atan2 => {
                self.helper(atan.into());
                self.helper("// atan2 from kiln_atan_f32 of |y|/|x|, with the quadrant and signed zeros of C's atan2.\nfn kiln_atan2_f32(y: f32, x: f32) -> f32 {\n  if (!(x == x) || !(y == y)) { return x + y; }\n  let ax = abs(x);\n  let ay = abs(y);\n  var t = ay / ax;\n  if (ay == 0.0f) { t = 0.0f; } else if (ax == ay) { t = 1.0f; }\n  var a = kiln_atan_f32(t);\n  if ((bitcast<u32>(x) & 0x80000000u) != 0u) { a = 3.1415927f - a; }\n  return bitcast<f32>(bitcast<u32>(a) | (bitcast<u32>(y) & 0x80000000u));\n}".into());
                format!("kiln_atan2_f32({}, {})", x[0], x[1])
            }
            MathFn::Exp => {
                self.helper(exp.into());
                format!("kiln_exp_scaled_f32({}, 0)", x[0])
            }
            MathFn::Sinh => {
                self.helper(exp.into());
                self.helper(sinh.into());
                format!("kiln_sinh_f32({})", x[0])
            }
            MathFn::Cosh => {
                self.helper(exp.into());
                self.helper("// cosh: e^|x| / 2 plus its reciprocal / 4, which is below half an ulp above 9.\nfn kiln_cosh_f32(x: f32) -> f32 { let a = abs(x); let h = kiln_exp_scaled_f32(a, 1); if (a < 9.0f) { return h + 0.25f / h; } return h; }".into());
                format!("kiln_cosh_f32({})", x[0])
            }
            MathFn::Log | MathFn::Log2 | MathFn::Log10 => {
                // Vulkan bounds the driver's log only absolutely near 1 (lavapipe: 2375 ulps
                // at 0.99984) and lets it flush subnormal inputs: kiln splits x into 2^e * m
                // from its bits, m in [sqrt(1/2), sqrt(2)), and takes ln m = 2 atanh(s),
                // s = (m - 1) / (m + 1), by an odd polynomial.
                self.helper("// (e, ln m) for x = 2^e * m, m in [sqrt(1/2), sqrt(2)), read from the bits (subnormals too); x > 0 and finite.\nfn kiln_log_parts_f32(x: f32) -> vec2<f32> {\n  var b = bitcast<u32>(x);\n  var e = i32(b >> 23u) - 127;\n  if (e == -127) { let sh = countLeadingZeros(b) - 8u; b = b << sh; e = -126 - i32(sh); }\n  var m = bitcast<f32>((b & 0x007fffffu) | 0x3f800000u);\n  if (m > 1.4142135f) { m = m * 0.5f; e = e + 1; }\n  let f = m - 1.0f;\n  let s = f / (2.0f + f);\n  let z = s * s;\n  return vec2<f32>(f32(e), 2.0f * s * (1.0f + z * (0.33333334f + z * (0.2f + z * (0.14285715f + z * 0.11111111f)))));\n}".into());
                let (name, combine) = match fun {
                    MathFn::Log => ("ln", "p.x * 0.69314575f + (p.y + p.x * 1.4286068e-6f)"),
                    MathFn::Log2 => ("log2", "p.x + p.y * 1.442695f"),
                    _ => (
                        "log10",
                        "p.x * 0.30102539f + (p.y * 0.4342945f + p.x * 4.6050898e-6f)",
                    ),
                };
                self.helper(format!("// {name} from kiln_log_parts_f32, with IEEE results for 0, negatives, infinity and NaN.\nfn kiln_{name}_f32(x: f32) -> f32 {{\n  let b = bitcast<u32>(x);\n  if ((b & 0x7fffffffu) == 0u) {{ return bitcast<f32>(0xff800000u); }}\n  if (b >= 0x7f800000u) {{ return bitcast<f32>(select(0x7fc00000u, b, b == 0x7f800000u)); }}\n  let p = kiln_log_parts_f32(x);\n  return {combine};\n}}"));
                format!("kiln_{name}_f32({})", x[0])
            }
            MathFn::Tanh => {
                self.helper(exp.into());
                self.helper(sinh.into());
                self.helper("fn kiln_tanh_f32(x: f32) -> f32 { if (abs(x) > 9.0f) { return select(1.0f, -1.0f, x < 0.0f); } let s = kiln_sinh_f32(x); return s / sqrt(1.0f + s * s); }".into());
                format!("kiln_tanh_f32({})", x[0])
            }
            _ => return None,
        })
    }
}
