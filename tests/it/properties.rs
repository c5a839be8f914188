//! Property tests.
//!
//! Random expression trees over f32, f64, i32, i64, u32, i16 and u8 (the last two packed in
//! 32-bit words on WGSL), on inputs that include NaN, infinities, -0.0, subnormals and integer
//! extremes, give the same results on every backend present (integers bit for bit; floats equal
//! or both NaN, see [`same`] for wgpu). Every generated kernel is also compiled by NVRTC and
//! ptxas when present. Random queries (map and filter stages, then a terminal) give a plain
//! loop's answer on every backend with both plans.
//!
//! `KILN_PROPTEST_CASES` sets the number of cases per test (default 24 for trees, six per case
//! sharing one kernel, and 12 for queries); the cases are the same on every run unless
//! `KILN_PROPTEST_RANDOM` is set (the run prints its seed; `KILN_PROPTEST_SEED` repeats one).

use crate::common;

use kiln::ir::*;
use kiln::{Grid, LaunchArg};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum E {
    A,
    B,
    Lit(u64),
    Bin(BinaryOp, Box<E>, Box<E>),
    Un(UnaryOp, Box<E>),
    Math(MathFn, Vec<E>),
    Select(BinaryOp, Box<E>, Box<E>, Box<E>, Box<E>),
    CastVia(ScalarType, Box<E>),
}

const F32_SPECIALS: [f32; 14] = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    0.5,
    2.5,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::MAX,
    f32::MIN_POSITIVE,
    1e-40,
    3e9,
    -7.25e-3,
];
const I32_SPECIALS: [i32; 9] = [0, 1, -1, 2, 31, 33, i32::MIN, i32::MAX, -7];
const F64_SPECIALS: [f64; 15] = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    0.5,
    2.5,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::MAX,
    f64::MIN_POSITIVE,
    1e-310,
    3e9,
    -7.25e-3,
    1e300,
];
const I64_SPECIALS: [i64; 10] = [0, 1, -1, 2, 63, 65, i64::MIN, i64::MAX, -7, 1 << 40];

/// The special values of type `t`, as bits.
fn specials(t: ScalarType) -> Vec<u64> {
    match t {
        ScalarType::F32 => F32_SPECIALS.iter().map(|f| f.to_bits() as u64).collect(),
        ScalarType::F64 => F64_SPECIALS.iter().map(|f| f.to_bits()).collect(),
        ScalarType::I64 => I64_SPECIALS.iter().map(|i| *i as u64).collect(),
        ScalarType::I16 => [0i16, 1, -1, 2, 15, 17, i16::MIN, i16::MAX, -7]
            .iter()
            .map(|i| *i as u16 as u64)
            .collect(),
        ScalarType::U8 => [0u8, 1, 2, 7, 9, 127, 128, 200, 255]
            .iter()
            .map(|i| *i as u64)
            .collect(),
        _ => I32_SPECIALS.iter().map(|i| *i as u32 as u64).collect(),
    }
}

/// Whether the bits `x` of a value of float type `t` are a finite number.
fn finite(t: ScalarType, x: u64) -> bool {
    match t {
        ScalarType::F64 => f64::from_bits(x).is_finite(),
        _ => f32::from_bits(x as u32).is_finite(),
    }
}

fn lit_bits(t: ScalarType) -> BoxedStrategy<u64> {
    let mask = u64::MAX >> (64 - t.bits());
    let any_bits = any::<u64>().prop_map(move |b| b & mask).boxed();
    prop_oneof![proptest::sample::select(specials(t)), any_bits].boxed()
}

fn tree(t: ScalarType) -> BoxedStrategy<E> {
    let leaf = prop_oneof![Just(E::A), Just(E::B), lit_bits(t).prop_map(E::Lit)];
    let float = t.is_float();
    leaf.prop_recursive(4, 24, 3, move |inner| {
        let bin_ops: Vec<BinaryOp> = if float {
            vec![
                BinaryOp::Add,
                BinaryOp::Sub,
                BinaryOp::Mul,
                BinaryOp::Div,
                BinaryOp::Rem,
            ]
        } else {
            vec![
                BinaryOp::Add,
                BinaryOp::Sub,
                BinaryOp::Mul,
                BinaryOp::Div,
                BinaryOp::Rem,
                BinaryOp::And,
                BinaryOp::Or,
                BinaryOp::Xor,
                BinaryOp::Shl,
                BinaryOp::Shr,
            ]
        };
        let un: Vec<UnaryOp> = if float {
            vec![UnaryOp::Neg]
        } else {
            vec![UnaryOp::Neg, UnaryOp::Not]
        };
        let math1: Vec<MathFn> = if float {
            vec![
                MathFn::Sqrt,
                MathFn::Abs,
                MathFn::Floor,
                MathFn::Ceil,
                MathFn::Trunc,
                MathFn::Round,
                MathFn::Fract,
                MathFn::Sign,
            ]
        } else {
            vec![MathFn::Abs, MathFn::Sign]
        };
        let math2: Vec<MathFn> = if float {
            vec![MathFn::Min, MathFn::Max, MathFn::Copysign]
        } else {
            vec![MathFn::Min, MathFn::Max]
        };
        // Casts through every other width and kind.
        let other_float = if t == ScalarType::F64 {
            ScalarType::F32
        } else {
            ScalarType::F64
        };
        let other_int = if t == ScalarType::I64 {
            ScalarType::I32
        } else {
            ScalarType::I64
        };
        let via: Vec<ScalarType> = if float {
            vec![
                ScalarType::I32,
                ScalarType::U32,
                ScalarType::I8,
                ScalarType::U16,
                ScalarType::I64,
                other_float,
            ]
        } else {
            vec![
                ScalarType::F32,
                ScalarType::I8,
                ScalarType::U8,
                ScalarType::I16,
                other_int,
                ScalarType::U64,
                ScalarType::F64,
            ]
        };
        let cmps = vec![
            BinaryOp::Lt,
            BinaryOp::Le,
            BinaryOp::Gt,
            BinaryOp::Ge,
            BinaryOp::Eq,
            BinaryOp::Ne,
        ];
        let ternary = if float {
            vec![MathFn::Fma, MathFn::Clamp]
        } else {
            vec![MathFn::Clamp]
        };
        prop_oneof![
            (
                proptest::sample::select(bin_ops),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(o, a, b)| E::Bin(o, Box::new(a), Box::new(b))),
            (proptest::sample::select(un), inner.clone()).prop_map(|(o, a)| E::Un(o, Box::new(a))),
            (proptest::sample::select(math1), inner.clone()).prop_map(|(f, a)| E::Math(f, vec![a])),
            (
                proptest::sample::select(math2),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(f, a, b)| E::Math(f, vec![a, b])),
            (
                proptest::sample::select(ternary),
                inner.clone(),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(f, a, b, c)| E::Math(f, vec![a, b, c])),
            (
                proptest::sample::select(cmps),
                inner.clone(),
                inner.clone(),
                inner.clone(),
                inner.clone()
            )
                .prop_map(|(o, a, b, c, d)| E::Select(
                    o,
                    Box::new(a),
                    Box::new(b),
                    Box::new(c),
                    Box::new(d)
                )),
            (proptest::sample::select(via), inner).prop_map(|(t, a)| E::CastVia(t, Box::new(a))),
        ]
    })
    .boxed()
}

fn build(e: &E, t: ScalarType, a: &AnyVal, b: &AnyVal) -> AnyVal {
    let ty = Type::Scalar(t);
    match e {
        E::A => a.clone(),
        E::B => b.clone(),
        E::Lit(bits) => lit_value(ScalarValue::from_bits(t, *bits)),
        E::Bin(op, x, y) => {
            let (x, y) = (build(x, t, a, b), build(y, t, a, b));
            expr_dyn(
                Expr::Binary {
                    op: *op,
                    lhs: x.handle(),
                    rhs: y.handle(),
                },
                &[&x, &y],
                ty,
            )
        }
        E::Un(op, x) => {
            let x = build(x, t, a, b);
            expr_dyn(
                Expr::Unary {
                    op: *op,
                    arg: x.handle(),
                },
                &[&x],
                ty,
            )
        }
        E::Math(f, xs) => {
            let vals: Vec<AnyVal> = xs.iter().map(|x| build(x, t, a, b)).collect();
            let refs: Vec<&AnyVal> = vals.iter().collect();
            expr_dyn(
                Expr::Math {
                    fun: *f,
                    args: vals.iter().map(|v| v.handle()).collect(),
                },
                &refs,
                ty,
            )
        }
        E::Select(op, p, q, x, y) => {
            let (p, q) = (build(p, t, a, b), build(q, t, a, b));
            let c = expr_dyn(
                Expr::Binary {
                    op: *op,
                    lhs: p.handle(),
                    rhs: q.handle(),
                },
                &[&p, &q],
                Type::Scalar(ScalarType::Bool),
            );
            let (x, y) = (build(x, t, a, b), build(y, t, a, b));
            expr_dyn(
                Expr::Select {
                    cond: c.handle(),
                    accept: x.handle(),
                    reject: y.handle(),
                },
                &[&c, &x, &y],
                ty,
            )
        }
        E::CastVia(via, x) => {
            let x = build(x, t, a, b);
            let m = expr_dyn(
                Expr::Cast {
                    arg: x.handle(),
                    to: *via,
                },
                &[&x],
                Type::Scalar(*via),
            );
            expr_dyn(
                Expr::Cast {
                    arg: m.handle(),
                    to: t,
                },
                &[&m],
                ty,
            )
        }
    }
}

/// Whether a float tree has a NaN or infinite literal. Vulkan lets a driver assume float
/// arithmetic sees neither (lavapipe simplifies `(x - trunc(x)) - x` to `-trunc(x)`, which is
/// wrong for infinite x), so on wgpu float trees are compared on finite values only.
fn has_non_finite_literal(e: &E, t: ScalarType) -> bool {
    any_node(e, &|n| matches!(n, E::Lit(bits) if !finite(t, *bits)))
}

/// Whether a tree reads the sign of a value that may be zero (`copysign`'s second operand,
/// `atan2`'s first): Vulkan does not require a driver to keep the sign of a zero (lavapipe gave
/// `copysign(-1.5, round(0.0))` as -1.5 and `copysign(-1.5, -1.5 * 0.0)` as 1.5), so on wgpu
/// its float results are not compared.
fn reads_zero_sign(e: &E) -> bool {
    any_node(e, &|n| {
        matches!(n, E::Math(MathFn::Copysign | MathFn::Atan2, _))
    })
}

/// What a kernel over `trees` of type `t` needs that `c` lacks, as the typed error names it:
/// f64 or 64-bit integers, in `t` or in a cast through them.
fn lacks(c: &kiln::Context, t: ScalarType, trees: &[E]) -> Option<&'static str> {
    let uses = |ty: ScalarType| {
        t == ty
            || trees
                .iter()
                .any(|e| any_node(e, &|n| matches!(n, E::CastVia(v, _) if *v == ty)))
    };
    let features = &c.device().features;
    if !features.f64 && uses(ScalarType::F64) {
        Some("f64")
    } else if !features.int64 && (uses(ScalarType::I64) || uses(ScalarType::U64)) {
        Some("64-bit integers")
    } else {
        None
    }
}

/// Whether `pred` holds for `e` or any node below it.
fn any_node(e: &E, pred: &dyn Fn(&E) -> bool) -> bool {
    pred(e)
        || match e {
            E::A | E::B | E::Lit(_) => false,
            E::Math(_, xs) => xs.iter().any(|x| any_node(x, pred)),
            E::Bin(_, x, y) => any_node(x, pred) || any_node(y, pred),
            E::Un(_, x) | E::CastVia(_, x) => any_node(x, pred),
            E::Select(_, p, q, x, y) => [p, q, x, y].iter().any(|x| any_node(x, pred)),
        }
}

/// The documented float bound on wgpu, in ulps from the CPU's result.
const WGPU_ULPS: u64 = 4;

/// The value of float bits `x` of type `t`.
fn float_value(t: ScalarType, x: u64) -> f64 {
    match t {
        ScalarType::F64 => f64::from_bits(x),
        _ => f32::from_bits(x as u32) as f64,
    }
}

/// The largest magnitude among a float tree's leaves (`a`, `b` and its literals). A driver
/// that reassociates sums (Vulkan allows it; lavapipe does) can move a result by a few ulps of
/// that magnitude: it gave `(f32::MAX - f32::MAX) + 2.5` as 0 and `1.0 + (MIN_POSITIVE - 1.0)`
/// as `MIN_POSITIVE`.
fn leaf_scale(e: &E, t: ScalarType, a: u64, b: u64) -> f64 {
    let scale = std::cell::Cell::new(0.0f64);
    any_node(e, &|n| {
        let bits = match n {
            E::A => a,
            E::B => b,
            E::Lit(bits) => *bits,
            _ => return false,
        };
        scale.set(scale.get().max(float_value(t, bits).abs()));
        false
    });
    scale.get()
}

/// Whether wgpu's `y` is within [`WGPU_ULPS`] ulps of `scale` of the CPU's `x` (both finite).
fn within_scale(t: ScalarType, x: u64, y: u64, scale: f64) -> bool {
    let (f, g) = (float_value(t, x), float_value(t, y));
    let eps = if t == ScalarType::F64 {
        f64::EPSILON
    } else {
        f32::EPSILON as f64
    };
    f.is_finite() && g.is_finite() && (f - g).abs() <= WGPU_ULPS as f64 * eps * scale
}

fn ulps(t: ScalarType, a: u64, b: u64) -> u64 {
    // Floats ordered as sign-magnitude integers, so neighbours differ by one.
    let key = |bits: u64| -> i128 {
        let (v, min) = if t == ScalarType::F64 {
            (bits as i64 as i128, i64::MIN as i128)
        } else {
            (bits as u32 as i32 as i128, i32::MIN as i128)
        };
        if v < 0 {
            min - v
        } else {
            v
        }
    };
    (key(a) - key(b)).unsigned_abs() as u64
}

/// Whether a tree uses `fma`, which wgpu leaves to the driver (Vulkan allows it to round
/// twice, and lavapipe does), so its float results are not compared there.
fn has_fma(e: &E) -> bool {
    any_node(e, &|n| matches!(n, E::Math(MathFn::Fma, _)))
}

/// Whether a tree multiplies or divides by a literal: a driver that reassociates products
/// with constants (lavapipe) can overflow an intermediate there that the tree's own order
/// keeps finite (it gave NaN for `2.5 * (f32::MAX * 0.0)`), so on wgpu a NaN or infinity
/// from such a tree is not compared.
fn has_literal_product(e: &E) -> bool {
    any_node(e, &|n| {
        matches!(n, E::Bin(BinaryOp::Mul | BinaryOp::Div, l, r)
            if matches!(**l, E::Lit(_)) || matches!(**r, E::Lit(_)))
    })
}

fn inputs(t: ScalarType) -> (Vec<u64>, Vec<u64>) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    let specials = specials(t);
    for (i, x) in specials.iter().enumerate() {
        for (j, y) in specials.iter().enumerate() {
            if (i + j) % 3 == 0 {
                a.push(*x);
                b.push(*y);
            }
        }
    }
    let mut s = 0x9E37_79B9u32;
    for _ in 0..24 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        let wide = ((s as u64) << 32) | s.rotate_left(7) as u64;
        a.push(match t {
            ScalarType::F32 => (f32::from_bits(s) % 1e6).to_bits() as u64,
            ScalarType::F64 => (f64::from_bits(wide) % 1e6).to_bits(),
            ScalarType::I64 => wide,
            _ => s as u64 & (u64::MAX >> (64 - t.bits())),
        });
        s = s.wrapping_mul(0x0100_0193);
        b.push(match t {
            ScalarType::F32 => ((s % 2000) as f32 * 0.25 - 250.0).to_bits() as u64,
            ScalarType::F64 => ((s % 2000) as f64 * 0.25 - 250.0).to_bits(),
            _ => (s % 97) as u64,
        });
    }
    (a, b)
}

/// Runs `k` over the inputs (bits of type `t`) on `c`; returns the output's bits.
fn run(
    c: &kiln::Context,
    k: &Kernel,
    t: ScalarType,
    a: &[u64],
    b: &[u64],
    outputs: usize,
) -> Result<Vec<u64>, kiln::Error> {
    match t.size() {
        8 => launch(c, k, a, b, outputs, |x| x),
        4 => launch(c, k, a, b, outputs, |x| x as u32),
        2 => launch(c, k, a, b, outputs, |x| x as u16),
        _ => launch(c, k, a, b, outputs, |x| x as u8),
    }
}

/// [`run`] with the values held as `W` on the host.
fn launch<W: kiln::ir::IrType + Default + Copy + Into<u64>>(
    c: &kiln::Context,
    k: &Kernel,
    a: &[u64],
    b: &[u64],
    outputs: usize,
    narrow: fn(u64) -> W,
) -> Result<Vec<u64>, kiln::Error> {
    let (a, b): (Vec<W>, Vec<W>) = (
        a.iter().map(|x| narrow(*x)).collect(),
        b.iter().map(|x| narrow(*x)).collect(),
    );
    let mut out = vec![W::default(); outputs];
    c.launch_ir(
        k,
        &Grid::linear((a.len() as u32).div_ceil(16), 16),
        &mut [
            LaunchArg::read(&a),
            LaunchArg::read(&b),
            LaunchArg::read_write(&mut out),
        ],
    )?;
    Ok(out.into_iter().map(Into::into).collect())
}

/// Whether `y` (from `backend`) agrees with the CPU's `x`. On wgpu, Vulkan lets the driver
/// rewrite float arithmetic as if it were exact and assume it makes no NaN or infinity
/// (lavapipe reassociates products with constants, folds `0 * x` to 0, dropping a NaN, and gave
/// 0 for `1.0 / (-0.0 * 1.0)`), so there a float result may be within [`WGPU_ULPS`] of the
/// CPU's, and where the CPU's is NaN or infinite wgpu's may be anything.
fn same(t: ScalarType, backend: kiln::BackendKind, x: u64, y: u64) -> bool {
    if t.is_float() {
        let (f, g) = if t == ScalarType::F64 {
            (f64::from_bits(x), f64::from_bits(y))
        } else {
            (
                f32::from_bits(x as u32) as f64,
                f32::from_bits(y as u32) as f64,
            )
        };
        if f == g || (f.is_nan() && g.is_nan()) {
            return true;
        }
        backend == kiln::BackendKind::Wgpu
            && (!f.is_finite() || (g.is_finite() && ulps(t, x, y) <= WGPU_ULPS))
    } else {
        x == y
    }
}

fn check(t: ScalarType) {
    let contexts = common::contexts();
    let mut runner = common::proptest_runner(24);
    let (a, b) = inputs(t);
    let n = a.len();
    runner
        .run(&proptest::collection::vec(tree(t), 6), |trees| {
            let k = Kernel::build("prop", |k| {
                let ma = k.buffer_dyn("a", Type::Scalar(t), Access::Read);
                let mb = k.buffer_dyn("b", Type::Scalar(t), Access::Read);
                let out = k.buffer_dyn("out", Type::Scalar(t), Access::ReadWrite);
                let i = global_id(Axis::X);
                if_then(i.lt(n as u32), || {
                    let (va, vb) = (load_dyn(ma, i, Type::Scalar(t)), load_dyn(mb, i, Type::Scalar(t)));
                    for (j, e) in trees.iter().enumerate() {
                        let v = build(e, t, &va, &vb);
                        store_dyn(out, i + (j * n) as u32, &v);
                    }
                });
            })
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut results = Vec::new();
            for c in &contexts {
                let out = run(c, &k, t, &a, &b, n * trees.len());
                if let Some(feature) = lacks(c, t, &trees) {
                    // A device without f64 or 64-bit integers refuses the kernel, typed.
                    match out {
                        Err(kiln::Error::Backend(kiln::BackendError::Unsupported {
                            feature: f,
                            ..
                        })) if f.contains(feature) => continue,
                        other => {
                            let other = other.map(|_| "values");
                            return Err(TestCaseError::fail(format!(
                                "{}: a kernel with {feature} gave {other:?}",
                                c.device().name
                            )));
                        }
                    }
                }
                let out =
                    out.map_err(|e| TestCaseError::fail(format!("{}: {e}", c.device().backend)))?;
                results.push((c.device().backend, out));
            }
            let (_, reference) = &results[0];
            for (backend, out) in &results[1..] {
                for (idx, (x, y)) in reference.iter().zip(out).enumerate() {
                    let (j, i) = (idx / n, idx % n);
                    if *backend == kiln::BackendKind::Wgpu
                        && t.is_float()
                        && (has_fma(&trees[j])
                            || !finite(t, a[i])
                            || !finite(t, b[i])
                            || has_non_finite_literal(&trees[j], t)
                            || reads_zero_sign(&trees[j]))
                    {
                        continue;
                    }
                    let overflowed = *backend == kiln::BackendKind::Wgpu
                        && t.is_float()
                        && !finite(t, *y)
                        && has_literal_product(&trees[j]);
                    let reassociated = *backend == kiln::BackendKind::Wgpu
                        && t.is_float()
                        && within_scale(t, *x, *y, leaf_scale(&trees[j], t, a[i], b[i]));
                    prop_assert!(overflowed || reassociated || same(t, *backend, *x, *y), "tree {j} = {:?} on a = {:#x}, b = {:#x}: cpu gives {x:#x}, {backend} gives {y:#x}", trees[j], a[i], b[i]);
                }
            }
            common::cuda_check_kernel(&k);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn random_f32_expressions_agree_on_every_backend() {
    check(ScalarType::F32);
}

#[test]
fn random_i32_expressions_agree_on_every_backend() {
    check(ScalarType::I32);
}

#[test]
fn random_u32_expressions_agree_on_every_backend() {
    check(ScalarType::U32);
}

#[test]
fn random_f64_expressions_agree_on_every_backend() {
    check(ScalarType::F64);
}

#[test]
fn random_i64_expressions_agree_on_every_backend() {
    check(ScalarType::I64);
}

#[test]
fn random_i16_expressions_agree_on_every_backend() {
    check(ScalarType::I16);
}

#[test]
fn random_u8_expressions_agree_on_every_backend() {
    check(ScalarType::U8);
}

/// One stage of a random query over `i32`.
#[derive(Clone, Copy, Debug)]
enum Stage {
    /// `x * 3 + c` (wrapping).
    MulAdd(i32),
    /// `(x >> 3) ^ c`.
    ShiftXor(i32),
    /// `abs(x).min(c)` (`abs(MIN) = MIN`).
    AbsMin(i32),
    /// `x = x * 5 + c` (wrapping), `x & 3` times: a loop whose length varies per element.
    Steps(i32),
    /// keep `x > c`.
    Above(i32),
    /// keep `x % 7 == c % 7` (Rust's `%`: the sign of `x`).
    Residue(i32),
    /// `skip(c)`, which after a filter counts the rows kept.
    Skip(usize),
    /// `take(c)`, likewise.
    Take(usize),
    /// `enumerate()` then `i * c ^ x` (wrapping): the position, counted among the rows kept.
    Numbered(i32),
    /// `zip` with the column of `w(j) = j * 31 - c` for the row's position `j`, then `x - w`
    /// (wrapping).
    ZipMinus(i32),
    /// `reverse()`.
    Reverse,
    /// `flat_map(3, x & 3, x ^ (j * c))`: up to three rows per element (`x & 3` cut to 3).
    FlatMap(i32),
    /// `concat` with the first `rows` input elements (fewer when there are fewer), as they
    /// are or each `x ^ 5` (`mapped`: a side with a stage), after the rows so far or before
    /// them (`front`).
    Concat {
        rows: usize,
        mapped: bool,
        front: bool,
    },
    /// A join with the first `rows` input elements, each `y ^ 9`, on `x % m == y % m`: an
    /// inner join gives `x ^ (y * 3)` per pair (wrapping), a left join also `x ^ 33` for an
    /// `x` without match (`y.unwrap_or(11)`), a semi or anti join keeps `x`.
    Join { rows: usize, m: i32, kind: JoinKind },
    /// `take_while(x != c)`, also after a filter.
    TakeWhileNot(i32),
    /// `skip_while(x != c)`, also after a filter.
    SkipWhileNot(i32),
}

/// Which join a [`Stage::Join`] is.
#[derive(Clone, Copy, Debug)]
enum JoinKind {
    Inner,
    Left,
    Semi,
    Anti,
}

/// The column [`Stage::ZipMinus`] zips for `rows` rows.
fn zip_column(rows: usize, c: i32) -> Vec<i32> {
    (0..rows as i32)
        .map(|j| j.wrapping_mul(31).wrapping_sub(c))
        .collect()
}

/// What a random query ends with.
#[derive(Clone, Copy, Debug)]
enum Terminal {
    ToVec,
    Sum,
    Count,
    Min,
    Max,
    /// Running wrapping sum.
    Scan,
    /// Running maximum of the elements before each, from `i32::MIN`.
    ExclusiveMax,
    Sort,
    SortDesc,
    /// The first and the last kept element.
    First,
    Last,
    /// The distinct elements, ascending.
    Distinct,
    /// The position of the first smallest and of the first largest element.
    ArgMin,
    ArgMax,
    /// Wrapping sums of the elements grouped by `x % 13`.
    GroupSum,
    /// Counts of the elements' low bytes below 200.
    ByteHistogram,
    /// Rows of several narrow columns: `(x as u8, x as i16, x > 0, x as u16 & 1 == 1)`, as
    /// `to_vec` (wgpu packs each into 32-bit words).
    NarrowRows,
    /// Struct rows: each kept `x` as its [`Cell`], `to_vec`; then those cells as a source,
    /// the non-negative ones' `x ^ byte`.
    StructRows,
}

/// A row of [`Terminal::NarrowRows`].
type Narrow = (u8, i16, bool, bool);

/// A row of [`Terminal::StructRows`]: a struct with a nested one.
#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Cell {
    x: i32,
    low: Low,
}

/// The narrow part of a [`Cell`].
#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Low {
    half: i16,
    byte: u8,
    neg: bool,
}

/// The [`Cell`] of `x`.
fn cell(x: i32) -> Cell {
    Cell {
        x,
        low: Low {
            half: x as i16,
            byte: x as u8,
            neg: x < 0,
        },
    }
}

/// A query's result on the host: the kept elements for `to_vec`, one value otherwise.
#[derive(Debug, PartialEq)]
enum Answer {
    Elements(Vec<i32>),
    Value(Option<i64>),
    Pairs(Vec<(i32, i32)>),
    Rows(Vec<Narrow>),
    Cells(Vec<Cell>, Vec<i32>),
}

/// The host's answer, and for each stage the column it zips (empty for other stages).
fn answer_on_host(xs: &[i32], stages: &[Stage], end: Terminal) -> (Answer, Vec<Vec<i32>>) {
    let mut kept: Vec<i32> = xs.to_vec();
    let mut zipped = Vec::new();
    for s in stages {
        zipped.push(match *s {
            Stage::ZipMinus(c) => zip_column(kept.len(), c),
            _ => Vec::new(),
        });
        kept = match *s {
            Stage::MulAdd(c) => kept
                .iter()
                .map(|x| x.wrapping_mul(3).wrapping_add(c))
                .collect(),
            Stage::ShiftXor(c) => kept.iter().map(|x| (x >> 3) ^ c).collect(),
            Stage::AbsMin(c) => kept.iter().map(|x| x.wrapping_abs().min(c)).collect(),
            Stage::Steps(c) => kept
                .iter()
                .map(|&x| {
                    let mut x = x;
                    for _ in 0..x & 3 {
                        x = x.wrapping_mul(5).wrapping_add(c);
                    }
                    x
                })
                .collect(),
            Stage::Above(c) => kept.into_iter().filter(|x| *x > c).collect(),
            Stage::Residue(c) => kept.into_iter().filter(|x| x % 7 == c % 7).collect(),
            Stage::Skip(c) => kept.into_iter().skip(c).collect(),
            Stage::Take(c) => kept.into_iter().take(c).collect(),
            Stage::TakeWhileNot(c) => kept.into_iter().take_while(|x| *x != c).collect(),
            Stage::SkipWhileNot(c) => kept.into_iter().skip_while(|x| *x != c).collect(),
            Stage::Numbered(c) => (0i32..)
                .zip(kept)
                .map(|(i, x)| i.wrapping_mul(c) ^ x)
                .collect(),
            Stage::ZipMinus(_) => kept
                .iter()
                .zip(zipped.last().unwrap())
                .map(|(x, w)| x.wrapping_sub(*w))
                .collect(),
            Stage::Reverse => kept.into_iter().rev().collect(),
            Stage::FlatMap(c) => kept
                .into_iter()
                .flat_map(|x| (0..(x & 3).min(3)).map(move |j| x ^ j.wrapping_mul(c)))
                .collect(),
            Stage::Join { rows, m, kind } => {
                let right: Vec<i32> = xs[..rows.min(xs.len())].iter().map(|y| y ^ 9).collect();
                let pairs = |x: i32| -> Vec<i32> {
                    right
                        .iter()
                        .filter(|y| *y % m == x % m)
                        .map(|y| x ^ y.wrapping_mul(3))
                        .collect()
                };
                match kind {
                    JoinKind::Inner => kept.into_iter().flat_map(pairs).collect(),
                    JoinKind::Left => kept
                        .into_iter()
                        .flat_map(|x| match pairs(x) {
                            p if p.is_empty() => vec![x ^ 33],
                            p => p,
                        })
                        .collect(),
                    JoinKind::Semi => kept.into_iter().filter(|x| !pairs(*x).is_empty()).collect(),
                    JoinKind::Anti => kept.into_iter().filter(|x| pairs(*x).is_empty()).collect(),
                }
            }
            Stage::Concat {
                rows,
                mapped,
                front,
            } => {
                let piece = xs[..rows.min(xs.len())]
                    .iter()
                    .map(|x| if mapped { x ^ 5 } else { *x });
                match front {
                    true => piece.chain(kept).collect(),
                    false => kept.into_iter().chain(piece).collect(),
                }
            }
        };
    }
    let answer = match end {
        Terminal::ToVec => Answer::Elements(kept),
        Terminal::Sum => Answer::Value(Some(
            kept.iter().fold(0i32, |a, b| a.wrapping_add(*b)) as i64
        )),
        Terminal::Count => Answer::Value(Some(kept.len() as i64)),
        Terminal::Min => Answer::Value(kept.iter().min().map(|v| *v as i64)),
        Terminal::Max => Answer::Value(kept.iter().max().map(|v| *v as i64)),
        Terminal::Scan => Answer::Elements(
            kept.iter()
                .scan(0i32, |a, x| {
                    *a = a.wrapping_add(*x);
                    Some(*a)
                })
                .collect(),
        ),
        Terminal::ExclusiveMax => Answer::Elements(
            kept.iter()
                .scan(i32::MIN, |a, x| {
                    let before = *a;
                    *a = (*a).max(*x);
                    Some(before)
                })
                .collect(),
        ),
        Terminal::Sort => {
            let mut v = kept;
            v.sort();
            Answer::Elements(v)
        }
        Terminal::SortDesc => {
            let mut v = kept;
            v.sort_by(|a, b| b.cmp(a));
            Answer::Elements(v)
        }
        Terminal::ArgMin => {
            let best = kept.iter().min();
            Answer::Value(kept.iter().position(|x| Some(x) == best).map(|p| p as i64))
        }
        Terminal::ArgMax => {
            let best = kept.iter().max();
            Answer::Value(kept.iter().position(|x| Some(x) == best).map(|p| p as i64))
        }
        Terminal::First => Answer::Value(kept.first().map(|v| *v as i64)),
        Terminal::Last => Answer::Value(kept.last().map(|v| *v as i64)),
        Terminal::Distinct => {
            let set: std::collections::BTreeSet<i32> = kept.into_iter().collect();
            Answer::Elements(set.into_iter().collect())
        }
        Terminal::GroupSum => {
            let mut sums = std::collections::BTreeMap::<i32, i32>::new();
            for x in kept {
                let s = sums.entry(x % 13).or_default();
                *s = s.wrapping_add(x);
            }
            Answer::Pairs(sums.into_iter().collect())
        }
        Terminal::NarrowRows => Answer::Rows(
            kept.iter()
                .map(|&x| (x as u8, x as i16, x > 0, x as u16 & 1 == 1))
                .collect(),
        ),
        Terminal::StructRows => {
            let cells: Vec<Cell> = kept.iter().map(|&x| cell(x)).collect();
            let back = cells
                .iter()
                .filter(|c| !c.low.neg)
                .map(|c| c.x ^ i32::from(c.low.byte))
                .collect();
            Answer::Cells(cells, back)
        }
        Terminal::ByteHistogram => {
            let mut counts = vec![0i32; 200];
            for x in kept {
                if let Some(c) = counts.get_mut(x as u8 as usize) {
                    *c += 1;
                }
            }
            Answer::Elements(counts)
        }
    };
    (answer, zipped)
}

/// The query's answer on `c`, over `xs` uploaded to a device `Buffer` when `on_device` (a
/// `to_vec` then goes through `to_buffer` and a download, and the zipped columns are
/// buffers too); `zipped` holds each stage's zipped column.
fn answer_on(
    c: &kiln::Context,
    xs: &[i32],
    stages: &[Stage],
    zipped: &[Vec<i32>],
    end: Terminal,
    on_device: bool,
) -> Result<Answer, kiln::Error> {
    let uploaded = if on_device { Some(c.upload(xs)?) } else { None };
    let zipped_buffers = match on_device {
        true => zipped
            .iter()
            .map(|z| c.upload(z))
            .collect::<Result<Vec<_>, _>>()?,
        false => Vec::new(),
    };
    let mut q = match &uploaded {
        Some(b) => c.from_buffer(b),
        None => c.from(xs),
    };
    for (j, s) in stages.iter().copied().enumerate() {
        q = match s {
            Stage::MulAdd(k) => q.map(move |x| x * 3i32 + k),
            Stage::ShiftXor(k) => q.map(move |x| (x >> 3i32) ^ k),
            Stage::AbsMin(k) => q.map(move |x| x.abs().min(k)),
            Stage::Steps(k) => q.map(move |x| {
                let acc = Var::new("acc", x);
                for_range(0u32, (x & 3i32).cast::<u32>(), |_| {
                    acc.set(acc.get() * 5i32 + k)
                });
                acc.get()
            }),
            Stage::Above(k) => q.filter(move |x| x.gt(k)),
            Stage::Residue(k) => q.filter(move |x| (x % 7i32).eq(k % 7)),
            Stage::Skip(k) => q.skip(k),
            Stage::Take(k) => q.take(k),
            Stage::TakeWhileNot(k) => q.take_while(move |x| x.ne(k)),
            Stage::SkipWhileNot(k) => q.skip_while(move |x| x.ne(k)),
            Stage::Numbered(k) => q.enumerate().map(move |(i, x)| (i.cast::<i32>() * k) ^ x),
            Stage::ZipMinus(_) => match zipped_buffers.get(j) {
                Some(w) => q.zip_buffer(w).map(|(x, w)| x - w),
                None => q.zip(&zipped[j]).map(|(x, w)| x - w),
            },
            Stage::Reverse => q.reverse(),
            Stage::FlatMap(k) => q.flat_map(
                3,
                |x| (x & 3i32).cast::<u32>(),
                move |x, j| x ^ (j.cast::<i32>() * k),
            ),
            Stage::Join { rows, m, kind } => {
                let right = c.from(&xs[..rows.min(xs.len())]).map(|y| y ^ 9i32);
                let (left_key, right_key) = (move |x: Val<i32>| x % m, move |y: Val<i32>| y % m);
                match kind {
                    JoinKind::Inner => q
                        .join(right, left_key, right_key)
                        .map(|(x, y)| x ^ (y * 3i32)),
                    JoinKind::Left => q
                        .left_join(right, left_key, right_key)
                        .map(|(x, y)| x ^ (y.unwrap_or(11) * 3i32)),
                    JoinKind::Semi => q.semi_join(right, left_key, right_key),
                    JoinKind::Anti => q.anti_join(right, left_key, right_key),
                }
            }
            Stage::Concat {
                rows,
                mapped,
                front,
            } => {
                let piece = c.from(&xs[..rows.min(xs.len())]);
                let piece = match mapped {
                    true => piece.map(|x| x ^ 5i32),
                    false => piece,
                };
                match front {
                    true => piece.concat(q),
                    false => q.concat(piece),
                }
            }
        };
    }
    Ok(match end {
        Terminal::ToVec if on_device => Answer::Elements(q.to_buffer()?.download()?),
        Terminal::ToVec => Answer::Elements(q.to_vec()?),
        Terminal::Sum => Answer::Value(Some(q.sum()? as i64)),
        Terminal::Count => Answer::Value(Some(q.count()? as i64)),
        Terminal::Min => Answer::Value(q.min()?.map(|v| v as i64)),
        Terminal::Max => Answer::Value(q.max()?.map(|v| v as i64)),
        Terminal::Scan => Answer::Elements(q.scan(0, |a, b| a + b).to_vec()?),
        Terminal::ExclusiveMax => {
            Answer::Elements(q.scan_exclusive(i32::MIN, |a, b| a.max(b)).to_vec()?)
        }
        Terminal::Sort => Answer::Elements(q.sort().to_vec()?),
        Terminal::SortDesc => Answer::Elements(q.sort_desc().to_vec()?),
        Terminal::ArgMin => Answer::Value(q.argmin()?.map(|p| p as i64)),
        Terminal::ArgMax => Answer::Value(q.argmax()?.map(|p| p as i64)),
        Terminal::First => Answer::Value(q.first()?.map(|v| v as i64)),
        Terminal::Last => Answer::Value(q.last()?.map(|v| v as i64)),
        Terminal::Distinct => Answer::Elements(q.distinct().to_vec()?),
        Terminal::GroupSum => Answer::Pairs(q.group_by(|x| x % 13i32).sum(|x| x)?),
        Terminal::NarrowRows => Answer::Rows(
            q.map(|x| {
                let half = x.cast::<u16>();
                (
                    x.cast::<u8>(),
                    x.cast::<i16>(),
                    x.gt(0),
                    (half & 1u16).eq(1u16),
                )
            })
            .to_vec()?,
        ),
        Terminal::StructRows => {
            let cells = q
                .map(|x| kiln::Vals::<Cell> {
                    x,
                    low: kiln::Vals::<Low> {
                        half: x.cast::<i16>(),
                        byte: x.cast::<u8>(),
                        neg: x.lt(0),
                    },
                })
                .to_vec()?;
            let back = c
                .from(&cells)
                .filter(|c| c.low.neg.not())
                .map(|c| c.x ^ c.low.byte.cast::<i32>())
                .to_vec()?;
            Answer::Cells(cells, back)
        }
        Terminal::ByteHistogram => Answer::Elements(
            q.map(|x| x.cast::<u8>())
                .histogram(200)?
                .into_iter()
                .map(|c| c as i32)
                .collect(),
        ),
    })
}

/// Random queries (one to four stages: maps, maps with loops, filters, `skip` and `take`,
/// `take_while` and `skip_while`, `enumerate`, `zip`, `reverse`, `flat_map`, `concat`
/// (with a source or a mapped one, before or after) and joins (inner, left, semi, anti,
/// with a few mapped input rows on dense or sparse keys), which with `skip` and
/// `take` count positions among the rows kept where they follow a filter; then a terminal: a reduction, a scan, a
/// sort, the first or last element, argmin or argmax, the distinct elements, sums by key,
/// a histogram of the low bytes, rows of narrow columns or struct rows, then those structs as
/// a source) over inputs whose sizes straddle the planner's
/// chunks give the plain loop's answer on every backend, with both the chunked and the grouped
/// plan, over host slices and device `Buffer`s. On an adapter with a loop limit, a chunked
/// plan may fail with `Unsupported` instead.
#[test]
fn random_queries_match_a_plain_loop_on_every_backend_and_plan() {
    let contexts = common::contexts();
    let mut runner = common::proptest_runner(16);
    // Half the constants come from a handful, so cases often repeat a stage's closure and
    // its IR: the plan cache must still tell apart queries that differ elsewhere.
    let k = || prop_oneof![any::<i32>().prop_map(|v| v % 1000), 0..3i32];
    // Filters and the stages that number rows weigh double, so that many cases number
    // rows after a filter; concat weighs triple, so that a side with a stage shows up in
    // the default 16 cases (with 2, a side whose stage was dropped passed them).
    let stage = prop_oneof![
        1 => k().prop_map(Stage::MulAdd),
        1 => k().prop_map(Stage::ShiftXor),
        1 => any::<i32>().prop_map(Stage::AbsMin),
        1 => k().prop_map(Stage::Steps),
        2 => k().prop_map(Stage::Above),
        2 => k().prop_map(Stage::Residue),
        2 => prop_oneof![0..40usize, 0..70_000usize].prop_map(Stage::Skip),
        2 => prop_oneof![0..40usize, 0..70_000usize].prop_map(Stage::Take),
        1 => k().prop_map(Stage::TakeWhileNot),
        1 => k().prop_map(Stage::SkipWhileNot),
        2 => k().prop_map(Stage::Numbered),
        2 => k().prop_map(Stage::ZipMinus),
        2 => Just(Stage::Reverse),
        2 => k().prop_map(Stage::FlatMap),
        3 => (prop_oneof![0..40usize, 0..70_000usize], any::<bool>(), any::<bool>())
            .prop_map(|(rows, mapped, front)| Stage::Concat { rows, mapped, front }),
        2 => (
            0..8usize,
            prop_oneof![Just(2), Just(7), Just(1000), Just(1 << 20), Just(i32::MAX)],
            prop_oneof![
                Just(JoinKind::Inner),
                Just(JoinKind::Left),
                Just(JoinKind::Semi),
                Just(JoinKind::Anti)
            ],
        )
            .prop_map(|(rows, m, kind)| Stage::Join { rows, m, kind }),
    ];
    // Terminals that see the rows' order weigh more, so that reordering stages show.
    let end = prop_oneof![
        4 => Just(Terminal::ToVec),
        1 => Just(Terminal::Sum),
        1 => Just(Terminal::Count),
        1 => Just(Terminal::Min),
        1 => Just(Terminal::Max),
        2 => Just(Terminal::Scan),
        1 => Just(Terminal::ExclusiveMax),
        1 => Just(Terminal::Sort),
        1 => Just(Terminal::SortDesc),
        2 => Just(Terminal::First),
        2 => Just(Terminal::Last),
        1 => Just(Terminal::Distinct),
        1 => Just(Terminal::ArgMin),
        1 => Just(Terminal::ArgMax),
        1 => Just(Terminal::GroupSum),
        1 => Just(Terminal::ByteHistogram),
        1 => Just(Terminal::NarrowRows),
        1 => Just(Terminal::StructRows),
    ];
    let len = prop_oneof![
        Just(0usize),
        Just(1),
        Just(16383),
        Just(16385),
        Just(4 * 16384 + 3),
        0usize..70_000
    ];
    let strategy = (
        len,
        proptest::collection::vec(stage, 1..5),
        end,
        any::<u32>(),
        any::<bool>(),
        any::<bool>(),
    );
    runner
        .run(&strategy, |(n, stages, end, seed, wide, on_device)| {
            let mut s = seed | 1;
            let xs: Vec<i32> = (0..n)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 17;
                    s ^= s << 5;
                    if wide {
                        s as i32
                    } else {
                        (s % 2001) as i32 - 1000
                    }
                })
                .collect();
            let (want, zipped) = answer_on_host(&xs, &stages, end);
            for c in &contexts {
                for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
                    c.set_plan_shape(shape);
                    let got = match answer_on(c, &xs, &stages, &zipped, end, on_device) {
                        Ok(got) => got,
                        // Long chunks of loops on an adapter with a loop limit fail, typed.
                        Err(kiln::Error::Backend(kiln::BackendError::Unsupported {
                            feature,
                            ..
                        })) if c.device().max_loop_iterations.is_some()
                            && shape == kiln::PlanShape::Chunked
                            && feature.contains("loop iterations") =>
                        {
                            continue
                        }
                        Err(e) => {
                            return Err(TestCaseError::fail(format!(
                                "{} {shape:?}: {e}",
                                c.device().backend
                            )))
                        }
                    };
                    prop_assert!(
                        got == want,
                        "{} {shape:?}, n = {n}, {stages:?} then {end:?}{}: got {:?}, want {:?}",
                        c.device().backend,
                        if on_device { " over a Buffer" } else { "" },
                        short(&got),
                        short(&want)
                    );
                }
                c.set_plan_shape(kiln::PlanShape::Auto);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// An answer cut to its first elements, for failure messages.
fn short(a: &Answer) -> String {
    match a {
        Answer::Elements(v) => format!("{} elements, first {:?}", v.len(), &v[..v.len().min(8)]),
        Answer::Value(v) => format!("{v:?}"),
        Answer::Pairs(v) => format!("{} pairs, first {:?}", v.len(), &v[..v.len().min(8)]),
        Answer::Rows(v) => format!("{} rows, first {:?}", v.len(), &v[..v.len().min(8)]),
        Answer::Cells(v, back) => format!(
            "{} cells, first {:?}; back {:?}",
            v.len(),
            &v[..v.len().min(4)],
            &back[..back.len().min(8)]
        ),
    }
}
