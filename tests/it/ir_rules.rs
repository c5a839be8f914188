//! IR-level kernels on the CPU backend: every semantics rule of kiln-ir, barriers with shared
//! memory, 1D/2D/3D grids, atomics, math, subgroups, device functions, locals, structs and
//! vectors, each checked against a plain-Rust or f64 reference.

use crate::common;
use crate::common::{ctx, every_backend, has_f64, has_i64, ulp_bound};

use kiln::ir::*;
use kiln::{Grid, LaunchArg};
use std::cell::Cell;

/// Runs `out[i] = f(a[i], b[i])` over n elements with groups of 64 (so n need not be a
/// multiple of the group size).
fn binary<A: Scalar, R: Scalar + Default + Clone>(
    a: &[A],
    b: &[A],
    f: impl Fn(Val<A>, Val<A>) -> Val<R>,
) -> Vec<R> {
    let k = Kernel::build("binary", |k| {
        let (ba, bb) = (
            k.buffer::<A>("a", Access::Read),
            k.buffer::<A>("b", Access::Read),
        );
        let out = k.buffer::<R>("out", Access::ReadWrite);
        let i = global_id(Axis::X);
        if_then(i.lt(out.len()), || out.store(i, f(ba.load(i), bb.load(i))));
    })
    .unwrap();
    let mut out = vec![R::default(); a.len()];
    let groups = (a.len() as u32).div_ceil(64).max(1);
    ctx()
        .launch_ir(
            &k,
            &Grid::linear(groups, 64),
            &mut [
                LaunchArg::read(a),
                LaunchArg::read(b),
                LaunchArg::read_write(&mut out),
            ],
        )
        .unwrap();
    out
}

fn unary<A: Scalar, R: Scalar + Default + Clone>(a: &[A], f: impl Fn(Val<A>) -> Val<R>) -> Vec<R> {
    binary(a, a, |x, _| f(x))
}

const I32S: [i32; 9] = [0, 1, -1, 7, -7, 100, i32::MIN, i32::MAX, 3];

fn pairs<T: Copy>(vals: &[T]) -> (Vec<T>, Vec<T>) {
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &x in vals {
        for &y in vals {
            a.push(x);
            b.push(y);
        }
    }
    (a, b)
}

#[test]
fn integer_division_and_remainder_by_zero_and_min_over_minus_one() {
    every_backend(|| {
        let (a, b) = pairs(&I32S);
        let div = binary(&a, &b, |x, y| x / y);
        let rem = binary(&a, &b, |x, y| x % y);
        for i in 0..a.len() {
            let (x, y) = (a[i], b[i]);
            let want_div = if y == 0 { x } else { x.wrapping_div(y) };
            let want_rem = if y == 0 { 0 } else { x.wrapping_rem(y) };
            assert_eq!(div[i], want_div, "{x} / {y}");
            assert_eq!(rem[i], want_rem, "{x} % {y}");
        }
        let ua: Vec<u32> = vec![0, 1, 9, u32::MAX];
        let (a, b) = pairs(&ua);
        let div = binary(&a, &b, |x, y| x / y);
        let rem = binary(&a, &b, |x, y| x % y);
        for i in 0..a.len() {
            assert_eq!(div[i], a[i].checked_div(b[i]).unwrap_or(a[i]));
            assert_eq!(rem[i], if b[i] == 0 { 0 } else { a[i] % b[i] });
        }
    });
}

#[test]
fn shifts_take_the_amount_modulo_the_bit_width() {
    every_backend(|| {
        let a: Vec<i32> = vec![1, -8, 0x1234_5678, i32::MIN, 5, -1, 77];
        let s: Vec<i32> = vec![0, 1, 31, 32, 33, 64, -1];
        let (a, b) = {
            let mut x = Vec::new();
            let mut y = Vec::new();
            for &v in &a {
                for &t in &s {
                    x.push(v);
                    y.push(t);
                }
            }
            (x, y)
        };
        let shl = binary(&a, &b, |x, y| x << y);
        let shr = binary(&a, &b, |x, y| x >> y);
        for i in 0..a.len() {
            assert_eq!(
                shl[i],
                a[i].wrapping_shl(b[i] as u32),
                "{} << {}",
                a[i],
                b[i]
            );
            assert_eq!(
                shr[i],
                a[i].wrapping_shr(b[i] as u32),
                "{} >> {}",
                a[i],
                b[i]
            );
        }
        // One amount for every element (a shift of whole vectors on the CPU).
        let values: Vec<i32> = (0..37).map(|i| (i - 18) * 0x0765_4321 + i).collect();
        let unsigned: Vec<u32> = values.iter().map(|v| *v as u32).collect();
        for amount in [0i32, 1, 7, 31, 32, 33, -1] {
            let (k, w) = (amount as u32, amount as u32);
            let want = |f: &dyn Fn(i32) -> i32| values.iter().map(|v| f(*v)).collect::<Vec<_>>();
            let want_u =
                |f: &dyn Fn(u32) -> u32| unsigned.iter().map(|v| f(*v)).collect::<Vec<_>>();
            assert_eq!(
                unary(&values, move |x| x >> amount),
                want(&|v| v.wrapping_shr(k)),
                "i32 >> {amount}"
            );
            assert_eq!(
                unary(&values, move |x| x << amount),
                want(&|v| v.wrapping_shl(k)),
                "i32 << {amount}"
            );
            assert_eq!(
                unary(&unsigned, move |x| x >> w),
                want_u(&|v| v.wrapping_shr(k)),
                "u32 >> {amount}"
            );
            assert_eq!(
                unary(&unsigned, move |x| x << w),
                want_u(&|v| v.wrapping_shl(k)),
                "u32 << {amount}"
            );
        }
        let u: Vec<u8> = vec![0x81, 0xff, 1];
        let t: Vec<u8> = vec![7, 8, 9];
        let shr = binary(&u, &t, |x, y| x >> y);
        for i in 0..3 {
            assert_eq!(shr[i], u[i].wrapping_shr(t[i] as u32));
        }
    });
}

#[test]
fn float_to_int_casts_saturate_and_nan_gives_zero() {
    every_backend(|| {
        let xs: Vec<f32> = vec![
            0.0,
            -0.0,
            1.5,
            -1.5,
            1e10,
            -1e10,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            255.9,
            256.0,
            -129.0,
            65535.5,
            3e9,
        ];
        assert_eq!(
            unary(&xs, |x| x.cast::<i32>()),
            xs.iter().map(|&x| x as i32).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&xs, |x| x.cast::<u32>()),
            xs.iter().map(|&x| x as u32).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&xs, |x| x.cast::<i8>()),
            xs.iter().map(|&x| x as i8).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&xs, |x| x.cast::<u8>()),
            xs.iter().map(|&x| x as u8).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&xs, |x| x.cast::<u16>()),
            xs.iter().map(|&x| x as u16).collect::<Vec<_>>()
        );
        let bs: Vec<i16> = vec![-128, 0, 2, -1];
        assert_eq!(
            unary(&bs, |x| x.cast::<bool>()),
            vec![true, false, true, true]
        );
        if !has_i64() {
            return;
        }
        assert_eq!(
            unary(&xs, |x| x.cast::<i64>()),
            xs.iter().map(|&x| x as i64).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&xs, |x| x.cast::<u64>()),
            xs.iter().map(|&x| x as u64).collect::<Vec<_>>()
        );
        let is: Vec<i64> = vec![i64::MIN, -1, 0, 1 << 40, i64::MAX];
        assert_eq!(
            unary(&is, |x| x.cast::<i16>()),
            is.iter().map(|&x| x as i16).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&is, |x| x.cast::<u32>()),
            is.iter().map(|&x| x as u32).collect::<Vec<_>>()
        );
        if has_f64() {
            let got: Vec<f64> = unary(&is, |x| x.cast::<f64>());
            assert_eq!(got, is.iter().map(|&x| x as f64).collect::<Vec<_>>());
            let ds: Vec<f64> = vec![1e300, -1e300, f64::NAN, 9.3e18, -9.3e18, 0.5];
            assert_eq!(
                unary(&ds, |x| x.cast::<i64>()),
                ds.iter().map(|&x| x as i64).collect::<Vec<_>>()
            );
            assert_eq!(
                unary(&ds, |x| x.cast::<u64>()),
                ds.iter().map(|&x| x as u64).collect::<Vec<_>>()
            );
        }
    });
}

/// 32-bit integers to f32 round to nearest, ties to even, and stay rounded when cast back:
/// Mesa's GL folded `i32(f32(x))` into `x` (16777217 stayed 16777217).
#[test]
fn integer_to_float_casts_round_once_and_stay_rounded() {
    every_backend(|| {
        let is: Vec<i32> = vec![
            0,
            -1,
            16_777_217,
            -16_777_217,
            16_777_219,
            0x510c_4619,
            i32::MAX,
            i32::MIN,
            i32::MIN + 1,
            -(1 << 24) - 3,
        ];
        let got: Vec<f32> = unary(&is, |x| x.cast::<f32>());
        let want: Vec<f32> = is.iter().map(|&x| x as f32).collect();
        assert_eq!(got, want, "i32 to f32");
        let back = unary(&is, |x| x.cast::<f32>().cast::<i32>());
        let want: Vec<i32> = is.iter().map(|&x| x as f32 as i32).collect();
        assert_eq!(back, want, "i32 to f32 and back");
        let us: Vec<u32> = vec![
            0,
            1,
            16_777_217,
            0x8000_0081,
            0xffff_ff7f,
            u32::MAX,
            0x510c_4619,
        ];
        let got: Vec<f32> = unary(&us, |x| x.cast::<f32>());
        let want: Vec<f32> = us.iter().map(|&x| x as f32).collect();
        assert_eq!(got, want, "u32 to f32");
        let back = unary(&us, |x| x.cast::<f32>().cast::<u32>());
        let want: Vec<u32> = us.iter().map(|&x| x as f32 as u32).collect();
        assert_eq!(back, want, "u32 to f32 and back");
    });
}

#[test]
fn min_max_with_nan_return_the_other_operand() {
    every_backend(|| {
        let v = [1.0f32, -2.0, f32::NAN, f32::INFINITY, -0.5];
        let (a, b) = pairs(&v);
        let mn = binary(&a, &b, |x, y| x.min(y));
        let mx = binary(&a, &b, |x, y| x.max(y));
        for i in 0..a.len() {
            let (want_min, want_max) = (a[i].min(b[i]), a[i].max(b[i]));
            assert!(
                mn[i] == want_min || (mn[i].is_nan() && want_min.is_nan()),
                "min({}, {}) = {}",
                a[i],
                b[i],
                mn[i]
            );
            assert!(
                mx[i] == want_max || (mx[i].is_nan() && want_max.is_nan()),
                "max({}, {}) = {}",
                a[i],
                b[i],
                mx[i]
            );
        }
        let c = unary(&[f32::NAN, 5.0, -5.0], |x| x.clamp(-1.0, 1.0));
        assert_eq!(c, vec![-1.0, 1.0, -1.0]);
        let (z1, z2) = (vec![0.0f32, -0.0], vec![-0.0f32, 0.0]);
        for z in binary(&z1, &z2, |x, y| x.min(y)) {
            assert!(z == 0.0 && z.is_sign_negative(), "min of -0 and +0 is -0");
        }
        for z in binary(&z1, &z2, |x, y| x.max(y)) {
            assert!(z == 0.0 && z.is_sign_positive(), "max of -0 and +0 is +0");
        }
    });
}

/// `min`, `max` and `clamp` against a literal keep the NaN and signed-zero rules, with the
/// literal on either side. On the CPU the kernel runs both four work items at a time and, with
/// a private array in it, one at a time; the inputs are longer than a quad and not a multiple of
/// four, so partial quads run too.
#[test]
fn min_max_and_clamp_against_literals_keep_the_nan_and_zero_rules() {
    let specials = [
        0.0f32,
        -0.0,
        1.5,
        -1.5,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.25,
        -7.0,
    ];
    let xs: Vec<f32> = specials
        .iter()
        .cycle()
        .take(4 * specials.len() + 3)
        .copied()
        .collect();
    let literals = [0.0f32, -0.0, 1.5, f32::NEG_INFINITY, f32::NAN];
    // Per element: max(x, c), max(c, x), min(x, c), min(c, x), clamp(x, c, 1), clamp(x, -1, c).
    const OUTS: u32 = 6;
    every_backend(|| {
        for c in literals {
            for private_array in [false, true] {
                let k = Kernel::build("against_literal", |k| {
                    let a = k.buffer::<f32>("a", Access::Read);
                    let out = k.buffer::<f32>("out", Access::ReadWrite);
                    let i = global_id(Axis::X);
                    if_then(i.lt(a.len()), || {
                        let mut x = a.load(i);
                        if private_array {
                            let pin = LocalArray::<f32>::new("pin", 1);
                            pin.set(lit(0u32), x);
                            x = pin.get(lit(0u32));
                        }
                        let results = [
                            x.max(c),
                            lit(c).max(x),
                            x.min(c),
                            lit(c).min(x),
                            x.clamp(c, 1.0f32),
                            x.clamp(-1.0f32, c),
                        ];
                        for (j, r) in results.into_iter().enumerate() {
                            out.store(i * OUTS + j as u32, r);
                        }
                    });
                })
                .unwrap();
                let mut out = vec![0f32; xs.len() * OUTS as usize];
                let groups = (xs.len() as u32).div_ceil(8);
                ctx()
                    .launch_ir(
                        &k,
                        &Grid::linear(groups, 8),
                        &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
                    )
                    .unwrap();
                for (e, &x) in xs.iter().enumerate() {
                    let want = [
                        nan_min(x, c, true),
                        nan_min(c, x, true),
                        nan_min(x, c, false),
                        nan_min(c, x, false),
                        nan_min(nan_min(x, c, true), 1.0, false),
                        nan_min(nan_min(x, -1.0, true), c, false),
                    ];
                    for (j, w) in want.into_iter().enumerate() {
                        let got = out[e * OUTS as usize + j];
                        assert!(
                            got.to_bits() == w.to_bits() || (got.is_nan() && w.is_nan()),
                            "result {j} of x = {x:?}, c = {c:?} (private array: \
                             {private_array}): {got:?}, want {w:?}"
                        );
                    }
                }
            }
        }
    });
}

#[test]
fn out_of_bounds_loads_read_zero_and_stores_are_skipped() {
    every_backend(|| {
        let k = Kernel::build("oob", |k| {
            let a = k.buffer::<i32>("a", Access::Read);
            let out = k.buffer::<i32>("out", Access::ReadWrite);
            let i = global_id(Axis::X);
            out.store(i, a.load(i + 3u32) + 1i32);
            out.store(i + 1000u32, 99i32);
            out.store(u32::MAX, 7i32);
        })
        .unwrap();
        let a: Vec<i32> = (10..18).collect();
        let mut out = vec![-5i32; 8];
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(1, 8),
                &mut [LaunchArg::read(&a), LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        let want: Vec<i32> = (0..8)
            .map(|i| a.get(i + 3).copied().unwrap_or(0) + 1)
            .collect();
        assert_eq!(out, want);
    });
}

#[test]
fn guards_bounding_an_index_by_a_length_keep_every_access_rule() {
    // A guard `i < len(m)` lets backends drop the check of `m[i]` (kiln_ir::InBounds); these
    // kernels mix such guards with ones that prove nothing, so dropping one check too many
    // shows: `a` and `c` are prefixes of longer vectors whose tails are not zero, and a read or
    // write past their ends would see or change a tail.
    every_backend(|| {
        let k = Kernel::build("guarded", |k| {
            let a = k.buffer::<i32>("a", Access::Read);
            let [b, c, d, e, f, g] =
                ["b", "c", "d", "e", "f", "g"].map(|name| k.buffer::<i32>(name, Access::ReadWrite));
            let n = k.value::<u32>("n");
            let i = global_id(Axis::X);
            if_then(i.lt(n.min(a.len()).min(b.len())), || {
                b.store(i, a.load(i) * 2i32)
            });
            // The guard bounds `i` by a's length, not c's: the store stays checked.
            if_then(i.lt(a.len()), || {
                let x = a.load(i);
                if_then(x.gt(1010i32), || c.store(i, x));
            });
            // `<=` proves nothing: `a[len]` reads zero.
            if_then(i.le(a.len()), || d.store(i, a.load(i) + 1i32));
            // A loop whose exit compares its counter with min(i, len(a)).
            let acc = Var::new("acc", 0i32);
            for_range(0u32, i.min(a.len()), |j| acc.set(acc.get() + a.load(j)));
            f.store(i, acc.get());
            // Unguarded after all the guards above: checked again.
            g.store(i, a.load(i));
            if_then(i.ge(a.len()), return_);
            e.store(i, a.load(i) - 1i32);
        })
        .unwrap();
        let big: Vec<i32> = (0..64).map(|x| 1000 + x).collect();
        let a = &big[..37];
        for group in [1u32, 16, 64] {
            let mut b = vec![-1i32; 41];
            let mut c_big = vec![-2i32; 64];
            let [mut d, mut e, mut f, mut g] = [0; 4].map(|_| vec![-1i32; 64]);
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(64 / group, group),
                    &mut [
                        LaunchArg::read(a),
                        LaunchArg::read_write(&mut b),
                        LaunchArg::read_write(&mut c_big[..30]),
                        LaunchArg::read_write(&mut d),
                        LaunchArg::read_write(&mut e),
                        LaunchArg::read_write(&mut f),
                        LaunchArg::read_write(&mut g),
                        LaunchArg::value(1000u32),
                    ],
                )
                .unwrap();
            let at = |i: usize| a.get(i).copied().unwrap_or(0);
            let want_b: Vec<i32> = (0..41)
                .map(|i| if i < 37 { 2 * at(i) } else { -1 })
                .collect();
            let want_c: Vec<i32> = (0..64)
                .map(|i| if i < 30 && at(i) > 1010 { at(i) } else { -2 })
                .collect();
            let want_d: Vec<i32> = (0..64)
                .map(|i| if i <= 37 { at(i) + 1 } else { -1 })
                .collect();
            let want_e: Vec<i32> = (0..64)
                .map(|i| if i < 37 { at(i) - 1 } else { -1 })
                .collect();
            let want_f: Vec<i32> = (0..64).map(|i| a[..i.min(37)].iter().sum()).collect();
            let want_g: Vec<i32> = (0..64).map(at).collect();
            assert_eq!(b, want_b, "guarded by both lengths, group {group}");
            assert_eq!(c_big, want_c, "guarded by another length, group {group}");
            assert_eq!(d, want_d, "guarded by <=, group {group}");
            assert_eq!(e, want_e, "after an early return, group {group}");
            assert_eq!(f, want_f, "loop bounded by a length, group {group}");
            assert_eq!(g, want_g, "unguarded, group {group}");
        }
    });
}

/// `x % y` on floats is C's `fmod`, exact, for every pair of special values (zeros, subnormals,
/// the extremes, infinities, NaN) in f32 and f64. Two remainders share the kernel: with its
/// first float-based `fmod`, lavapipe got `2.5 % 2^-126` wrong next to another `%`.
/// Loop-free kernels whose accesses are at the global id, under guards `gid < bound` (a
/// parameter, a length, `min` of those, `&&` of two and of a comparison that varies), over
/// grids that reach past the guards, past the buffers and past both, with groups of several
/// sizes: the CPU backend runs the
/// quads where the guards and bounds hold without testing them, and every read past a
/// buffer's end still gives zero and every write there is still skipped. The buffers are
/// prefixes of longer vectors with sentinel tails, so an access one element too far shows.
#[test]
fn accesses_at_the_global_id_keep_the_bounds_rules_past_guards_and_buffers() {
    every_backend(|| {
        let k = Kernel::build("at_gid", |k| {
            let a = k.buffer::<i32>("a", Access::Read);
            let [b, c, d, e] = ["b", "c", "d", "e"].map(|n| k.buffer::<i32>(n, Access::ReadWrite));
            let n = k.value::<u32>("n");
            let m = k.value::<u32>("m");
            let i = global_id(Axis::X);
            if_then(i.lt(n), || b.store(i, a.load(i) + 1i32));
            c.store(i, a.load(i) * 2i32);
            let big_a = a.load(i).gt(1050i32);
            if_then(i.lt(n).and(m.gt(i)).and(big_a), || {
                d.store(i, a.load(i) - 3i32)
            });
            if_then(i.lt(n.min(c.len())), || e.store(i, a.load(i) ^ 5i32));
        })
        .unwrap();
        let big: Vec<i32> = (0..300).map(|x| 1000 + x).collect();
        // (n, m, length of a, length of the outputs (c's is 40 more), groups, group size)
        let cases = [
            (200, 300, 100, 150, 5, 64),
            (260, 280, 290, 60, 5, 64),
            (90u32, 200u32, 150usize, 120usize, 4u32, 64u32),
            (200, 90, 100, 150, 5, 64),
            (140, 300, 120, 100, 3, 64),
            (60, 60, 80, 70, 40, 5),
            (10, 300, 8, 9, 9, 8),
            (250, 250, 250, 250, 63, 4),
        ];
        for (n, m, la, lo, groups, size) in cases {
            let a = &big[..la];
            let [mut b, mut c, mut d, mut e] = [0; 4].map(|_| vec![-7i32; 300]);
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, size),
                    &mut [
                        LaunchArg::read(a),
                        LaunchArg::read_write(&mut b[..lo]),
                        LaunchArg::read_write(&mut c[..lo + 40]),
                        LaunchArg::read_write(&mut d[..lo]),
                        LaunchArg::read_write(&mut e[..lo]),
                        LaunchArg::value(n),
                        LaunchArg::value(m),
                    ],
                )
                .unwrap();
            let items = (groups * size) as usize;
            let at = |i: usize| a.get(i).copied().unwrap_or(0);
            let want = |keep: &dyn Fn(usize) -> bool, f: &dyn Fn(i32) -> i32| -> Vec<i32> {
                (0..300)
                    .map(|i| match i < items && keep(i) {
                        true => f(at(i)),
                        false => -7,
                    })
                    .collect()
            };
            let case = format!("n {n}, m {m}, a {la}, outputs {lo}, {groups} x {size}");
            let n = n as usize;
            let d_keeps = |i| i < lo && i < n && i < m as usize && at(i) > 1050;
            assert_eq!(b, want(&|i| i < lo && i < n, &|x| x + 1), "b: {case}");
            assert_eq!(c, want(&|i| i < lo + 40, &|x| x * 2), "c: {case}");
            assert_eq!(d, want(&d_keeps, &|x| x - 3), "d: {case}");
            assert_eq!(e, want(&|i| i < lo && i < n, &|x| x ^ 5), "e: {case}");
        }
    });
}

/// Loads and stores inside loops with constant bounds, indexed by sums, products and shifts
/// of the counter, the global id and a parameter, over grids that reach past the buffers: the
/// CPU backend tests once before such a loop whether every trip stays in bounds and then runs
/// a copy without the tests, so the work items whose last trips pass a buffer's end (and an
/// index whose product wraps past `u32::MAX`) must still read zeros and skip their writes. The
/// buffers are prefixes of longer vectors with sentinel tails.
#[test]
fn counted_loops_keep_the_bounds_rules_on_every_trip() {
    every_backend(|| {
        let k = Kernel::build("counted", |k| {
            let a = k.buffer::<i32>("a", Access::Read);
            let [b, c, d] = ["b", "c", "d"].map(|n| k.buffer::<i32>(n, Access::ReadWrite));
            let n = k.value::<u32>("n");
            let i = global_id(Axis::X);
            let acc = Var::new("acc", 0i32);
            for_range(0u32, 8u32, |j| {
                acc.set(acc.get() + a.load(i * 4u32 + j) * (j.cast::<i32>() + 1i32))
            });
            b.store(i, acc.get());
            for_range(0u32, 3u32, |j| {
                c.store(i * 3u32 + j, a.load((i << 1u32) + n + j) - j.cast::<i32>())
            });
            for_range(0u32, 2u32, |j| {
                d.store(i, d.load(i) + a.load(i * 0x4000_0000u32 + j))
            });
        })
        .unwrap();
        let big: Vec<i32> = (0..2000).map(|x| 1000 + x).collect();
        // (n, length of a, lengths of b, c and d, groups, group size)
        let cases = [
            (5u32, 100usize, [40usize, 90, 30], 5u32, 64u32),
            (0, 300, [300, 300, 300], 5, 64),
            // The last trip of the quad of items 4..7 reads a[35] and writes c[23]: just past.
            (17, 35, [10, 23, 20], 9, 8),
            (1, 35, [8, 23, 8], 12, 1),
            (3, 1200, [250, 700, 250], 63, 4),
            (1, 64, [60, 120, 60], 40, 5),
            (2, 20, [3, 9, 3], 3, 1),
        ];
        for (n, la, [lb, lc, ld], groups, size) in cases {
            let a = &big[..la];
            let [mut b, mut c, mut d] = [0; 3].map(|_| vec![-7i32; 1000]);
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, size),
                    &mut [
                        LaunchArg::read(a),
                        LaunchArg::read_write(&mut b[..lb]),
                        LaunchArg::read_write(&mut c[..lc]),
                        LaunchArg::read_write(&mut d[..ld]),
                        LaunchArg::value(n),
                    ],
                )
                .unwrap();
            let at = |j: u32| a.get(j as usize).copied().unwrap_or(0);
            let [mut want_b, mut want_c, mut want_d] = [0; 3].map(|_| vec![-7i32; 1000]);
            for i in 0..groups * size {
                let sum = (0..8u32).fold(0i32, |s, j| {
                    s.wrapping_add(at(i.wrapping_mul(4).wrapping_add(j)) * (j as i32 + 1))
                });
                if (i as usize) < lb {
                    want_b[i as usize] = sum;
                }
                for j in 0..3u32 {
                    let at_c = i.wrapping_mul(3).wrapping_add(j) as usize;
                    if at_c < lc {
                        want_c[at_c] = at((i << 1).wrapping_add(n).wrapping_add(j)) - j as i32;
                    }
                }
                if (i as usize) < ld {
                    for j in 0..2u32 {
                        want_d[i as usize] += at(i.wrapping_mul(0x4000_0000).wrapping_add(j));
                    }
                }
            }
            let case = format!("n {n}, a {la}, outputs {lb}/{lc}/{ld}, {groups} x {size}");
            assert_eq!(b, want_b, "b: {case}");
            assert_eq!(c, want_c, "c: {case}");
            assert_eq!(d, want_d, "d: {case}");
        }

        // Unrolled passes whose copies share one index and differ in the displacement: the
        // index's parts computed before the loop keep their wrapped 32-bit values.
        let k = Kernel::build("counted_steps", |k| {
            let a = k.buffer::<i32>("a", Access::Read);
            let out = k.buffer::<i32>("out", Access::Write);
            let off = k.value::<u32>("off");
            let i = global_id(Axis::X);
            let base = i + off;
            let acc = Var::new("acc", 0i32);
            for_range(0u32, 8u32, |j| {
                acc.set(acc.get() + a.load(base + (j << 1u32)) * (j.cast::<i32>() + 1i32))
            });
            for_range(0u32, 12u32, |j| {
                acc.set(acc.get() - a.load(i + j * 3u32 + 5u32))
            });
            out.store(i, acc.get());
        })
        .unwrap();
        for (off, la, groups, size) in [
            (0u32, 100usize, 3u32, 32u32),
            (u32::MAX - 40, 100, 2, 64),
            (u32::MAX, 50, 4, 5),
            (7, 60, 20, 1),
        ] {
            let a = &big[..la];
            let mut out = vec![-7i32; 1000];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, size),
                    &mut [
                        LaunchArg::read(a),
                        LaunchArg::read_write(&mut out[..]),
                        LaunchArg::value(off),
                    ],
                )
                .unwrap();
            let at = |j: u32| a.get(j as usize).copied().unwrap_or(0);
            let mut want = vec![-7i32; 1000];
            for i in 0..groups * size {
                let base = i.wrapping_add(off);
                let up = (0..8u32).fold(0i32, |s, j| {
                    s.wrapping_add(at(base.wrapping_add(j << 1)) * (j as i32 + 1))
                });
                want[i as usize] = (0..12u32).fold(up, |s, j| s.wrapping_sub(at(i + j * 3 + 5)));
            }
            assert_eq!(out, want, "off {off}, a {la}, {groups} x {size}");
        }

        // Loops whose end is a value known only when the kernel runs: the test uses it, less
        // one, as the counter's last value (no trip when it is 0), and an index whose product
        // wraps on later trips (j * 2^29 at j = 8) keeps the checked loop.
        let k = Kernel::build("counted_runtime", |k| {
            let a = k.buffer::<i32>("a", Access::Read);
            let out = k.buffer::<i32>("out", Access::Write);
            let spread = k.buffer::<i32>("spread", Access::ReadWrite);
            let m = k.value::<u32>("m");
            let i = global_id(Axis::X);
            let acc = Var::new("acc", 0i32);
            for_range(0u32, m, |j| {
                acc.set(acc.get() + a.load(i * 5u32 + j) * (j.cast::<i32>() + 1i32))
            });
            for_range(0u32, m + 1u32, |j| {
                acc.set(acc.get() ^ a.load(j * 0x2000_0000u32 + i))
            });
            for_range(0u32, m, |j| {
                spread.store(i * m + j, acc.get() + j.cast::<i32>())
            });
            out.store(i, acc.get());
        })
        .unwrap();
        // Each of the first loop's quads of 64 items and items of groups of 1, and the third
        // loop's item 44 (the fifth of its group of 5), has its last trip's index at exactly
        // its memory's length: the checked loop must run, though every trip before is inside.
        for (m, la, ls, groups, size) in [
            (0u32, 50usize, 100usize, 3u32, 32u32),
            (3, 97, 200, 2, 64),
            (7, 2000, 1000, 4, 32),
            (9, 43, 30, 5, 1),
            (12, 2000, 1000, 8, 8),
            (2, 300, 89, 9, 5),
        ] {
            let a = &big[..la];
            let (mut out, mut spread) = (vec![-7i32; 1000], vec![-7i32; 1000]);
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, size),
                    &mut [
                        LaunchArg::read(a),
                        LaunchArg::read_write(&mut out[..]),
                        LaunchArg::read_write(&mut spread[..ls]),
                        LaunchArg::value(m),
                    ],
                )
                .unwrap();
            let at = |j: u32| a.get(j as usize).copied().unwrap_or(0);
            let (mut want, mut want_spread) = (vec![-7i32; 1000], vec![-7i32; 1000]);
            for i in 0..groups * size {
                let mut acc =
                    (0..m).fold(0i32, |s, j| s.wrapping_add(at(i * 5 + j) * (j as i32 + 1)));
                for j in 0..=m {
                    acc ^= at(j.wrapping_mul(0x2000_0000).wrapping_add(i));
                }
                for j in 0..m {
                    if ((i * m + j) as usize) < ls {
                        want_spread[(i * m + j) as usize] = acc + j as i32;
                    }
                }
                want[i as usize] = acc;
            }
            let case = format!("m {m}, a {la}, spread {ls}, {groups} x {size}");
            assert_eq!(out, want, "out: {case}");
            assert_eq!(spread, want_spread, "spread: {case}");
        }

        // The same in shared memory, between barriers: the later work items of a group of 32
        // read past the 32-element tile on their last trip and write past it on both.
        let k = Kernel::build("counted_shared", |k| {
            let x = k.buffer::<i32>("x", Access::Read);
            let [out, out2] = ["out", "out2"].map(|n| k.buffer::<i32>(n, Access::Write));
            let tile = k.shared::<i32>("tile", SharedLen::Static(32));
            let (lid, gid) = (local_id(Axis::X), global_id(Axis::X));
            if_then(lid.lt(16u32), || {
                tile.store(lid, x.load(gid));
                tile.store(lid + 16u32, x.load(gid) + 100i32);
            });
            barrier();
            let acc = Var::new("acc", 0i32);
            for_range(0u32, 4u32, |j| {
                acc.set(acc.get() + tile.load(lid + j * 8u32))
            });
            out.store(gid, acc.get());
            barrier();
            for_range(0u32, 2u32, |j| {
                tile.store(lid * 2u32 + j, acc.get() + j.cast::<i32>())
            });
            barrier();
            out2.store(gid, tile.load(lid));
        })
        .unwrap();
        let xs: Vec<i32> = (0..256).map(|v| (v * 37) % 101 - 50).collect();
        for group in [16u32, 32] {
            let groups = 256 / group;
            let (mut out, mut out2) = (vec![0i32; 256], vec![0i32; 256]);
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, group),
                    &mut [
                        LaunchArg::read(&xs),
                        LaunchArg::read_write(&mut out),
                        LaunchArg::read_write(&mut out2),
                    ],
                )
                .unwrap();
            let g = group as usize;
            let (mut want, mut want2) = (vec![0i32; 256], vec![0i32; 256]);
            for (base, xs) in (0..256).step_by(g).zip(xs.chunks(g)) {
                let tile: Vec<i32> = (0..32)
                    .map(|j| if j < 16 { xs[j] } else { xs[j - 16] + 100 })
                    .collect();
                let acc: Vec<i32> = (0..g)
                    .map(|l| {
                        (0..4)
                            .map(|j| tile.get(l + 8 * j).copied().unwrap_or(0))
                            .sum()
                    })
                    .collect();
                for l in 0..g {
                    want[base + l] = acc[l];
                    want2[base + l] = acc[l / 2] + (l % 2) as i32;
                }
            }
            assert_eq!(out, want, "sums, groups of {group}");
            assert_eq!(out2, want2, "tile after the stores, groups of {group}");
        }
    });
}

#[test]
fn loops_with_run_time_ends_keep_their_counters_and_narrow_loads_their_values() {
    every_backend(|| {
        let k = Kernel::build("loop_counters", |k| {
            let bytes = k.buffer::<u8>("bytes", Access::Read);
            let sbytes = k.buffer::<i8>("sbytes", Access::Read);
            let shorts = k.buffer::<i16>("shorts", Access::Read);
            let ushorts = k.buffer::<u16>("ushorts", Access::Read);
            let table = k.buffer::<u32>("table", Access::Read);
            let [lo, hi] = ["lo", "hi"].map(|n| k.buffer::<u32>(n, Access::Read));
            let out = k.buffer::<u32>("out", Access::Write);
            let outf = k.buffer::<f32>("outf", Access::Write);
            let g = global_id(Axis::X);
            let (a, b) = (lo.load(g), hi.load(g));
            // The counter after the loop: left at the end, by a break, or never entered.
            let i = Var::new("i", a);
            let sum = Var::new("sum", 0u32);
            loop_with(
                || {
                    let v = i.get();
                    if_then(v.ge(b), break_);
                    if_then((v & 7u32).eq(5u32), continue_);
                    if_then((v - a).eq(20u32), break_);
                    sum.set(sum.get() * 3u32 + bytes.load(v - a + g).cast::<u32>() + v);
                },
                || i.set(i.get() + 1u32),
            );
            // A counter the body steps too (up to an end that leaves it room).
            let b2 = b.min(0xFFFF_FFF0u32);
            let j = Var::new("j", a);
            let sum2 = Var::new("sum2", 0u32);
            loop_with(
                || {
                    let v = j.get();
                    if_then(v.ge(b2), break_);
                    if_then((v & 3u32).eq(1u32), || j.set(v + 2u32));
                    sum2.set(sum2.get() * 5u32 + v);
                },
                || j.set(j.get() + 1u32),
            );
            let o = g * 10u32;
            out.store(o, i.get());
            out.store(o + 1u32, sum.get());
            out.store(o + 2u32, j.get());
            out.store(o + 3u32, sum2.get());
            // 8- and 16-bit loads widened: as indices, to 32 bits and to f32.
            out.store(o + 4u32, table.load(bytes.load(g * 7u32).cast::<u32>()));
            out.store(o + 5u32, sbytes.load(g).cast::<u32>());
            out.store(o + 6u32, shorts.load(g).cast::<i32>().bitcast::<u32>());
            out.store(o + 7u32, ushorts.load(g).cast::<i32>().bitcast::<u32>());
            out.store(o + 8u32, table.load(ushorts.load(g).cast::<u32>() & 255u32));
            out.store(o + 9u32, shorts.load(g).cast::<u32>() >> 16u32);
            outf.store(g * 2u32, shorts.load(g).cast::<f32>());
            outf.store(g * 2u32 + 1u32, bytes.load(g).cast::<f32>());
        })
        .unwrap();
        let top = u32::MAX;
        let ranges: [(u32, u32); 12] = [
            (0, 0),
            (3, 2),
            (0, 13),
            (5, 40),
            (top - 9, top),
            (top - 30, top),
            (100, 101),
            (7, 12),
            (top - 1, top),
            (top, top),
            (0xFFFF_FFE0, 0xFFFF_FFF8),
            (1, 22),
        ];
        let (lo, hi): (Vec<u32>, Vec<u32>) = ranges.iter().copied().unzip();
        let bytes: Vec<u8> = (0..100u32).map(|k| (k * 37 + 200) as u8).collect();
        let sbytes: Vec<i8> = [-128i8, -1, 127, 0, 5, -77, 64, -2, 1, -100, 99, -3].to_vec();
        let shorts: Vec<i16> = [
            i16::MIN,
            -1,
            i16::MAX,
            0,
            300,
            -12345,
            7,
            -2,
            1,
            -300,
            999,
            -9,
        ]
        .to_vec();
        let ushorts: Vec<u16> = [
            65535u16, 40000, 0, 1, 255, 256, 32768, 12, 65280, 7, 511, 300,
        ]
        .to_vec();
        let table: Vec<u32> = (0..256u32).map(|k| k * k + 1).collect();
        let items = ranges.len();
        let mut want = vec![0u32; items * 10];
        let mut want_f = vec![0f32; items * 2];
        for g in 0..items {
            let (a, b) = ranges[g];
            let (mut i, mut sum) = (a, 0u32);
            loop {
                let v = i;
                if v >= b || (v & 7 != 5 && v.wrapping_sub(a) == 20) {
                    break;
                }
                if v & 7 != 5 {
                    let byte = bytes[(v.wrapping_sub(a) as usize) + g] as u32;
                    sum = sum.wrapping_mul(3).wrapping_add(byte).wrapping_add(v);
                }
                i = i.wrapping_add(1);
            }
            let (mut j, mut sum2) = (a, 0u32);
            while j < b.min(0xFFFF_FFF0) {
                let v = j;
                if v & 3 == 1 {
                    j = v + 2;
                }
                sum2 = sum2.wrapping_mul(5).wrapping_add(v);
                j += 1;
            }
            want[g * 10..g * 10 + 10].copy_from_slice(&[
                i,
                sum,
                j,
                sum2,
                table[bytes[g * 7] as usize],
                sbytes[g] as u32,
                shorts[g] as i32 as u32,
                ushorts[g] as i32 as u32,
                table[(ushorts[g] & 255) as usize],
                (shorts[g] as u32) >> 16,
            ]);
            want_f[g * 2] = shorts[g] as f32;
            want_f[g * 2 + 1] = bytes[g] as f32;
        }
        // Groups of 1 and 3 run every work item alone on the CPU; 12 runs them in quads.
        for size in [1u32, 3, 12] {
            let mut out = vec![0u32; items * 10];
            let mut outf = vec![0f32; items * 2];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(items as u32 / size, size),
                    &mut [
                        LaunchArg::read(&bytes),
                        LaunchArg::read(&sbytes),
                        LaunchArg::read(&shorts),
                        LaunchArg::read(&ushorts),
                        LaunchArg::read(&table),
                        LaunchArg::read(&lo),
                        LaunchArg::read(&hi),
                        LaunchArg::read_write(&mut out),
                        LaunchArg::read_write(&mut outf),
                    ],
                )
                .unwrap();
            for g in 0..items {
                assert_eq!(
                    out[g * 10..g * 10 + 10],
                    want[g * 10..g * 10 + 10],
                    "work item {g} (range {:?}), groups of {size}",
                    ranges[g]
                );
            }
            assert_eq!(outf, want_f, "narrow values as f32, groups of {size}");
        }
    });
}

#[test]
fn float_remainders_are_exact_for_every_pair_of_specials() {
    /// `y % (x + x)` and `y % x` for every pair, against `host` computing both.
    fn check<T>(specials: &[T], host: impl Fn(T, T) -> [T; 2], same: impl Fn(T, T) -> bool)
    where
        T: Scalar + Default + Copy + std::fmt::Debug,
        Val<T>: std::ops::Rem<Output = Val<T>> + std::ops::Add<Output = Val<T>>,
    {
        let k = Kernel::build("remainders", |k| {
            let (a, b) = (
                k.buffer::<T>("a", Access::Read),
                k.buffer::<T>("b", Access::Read),
            );
            let [out0, out1] = ["out0", "out1"].map(|name| k.buffer::<T>(name, Access::ReadWrite));
            let i = global_id(Axis::X);
            if_then(i.lt(out0.len()), || {
                let (x, y) = (a.load(i), b.load(i));
                out0.store(i, y % (x + x));
                out1.store(i, y % x);
            });
        })
        .unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for x in specials {
            for y in specials {
                a.push(*x);
                b.push(*y);
            }
        }
        let [mut out0, mut out1] = [0; 2].map(|_| vec![T::default(); a.len()]);
        let c = ctx();
        let launched = c.launch_ir(
            &k,
            &Grid::linear((a.len() as u32).div_ceil(16), 16),
            &mut [
                LaunchArg::read(&a),
                LaunchArg::read(&b),
                LaunchArg::read_write(&mut out0),
                LaunchArg::read_write(&mut out1),
            ],
        );
        if let Err(e) = launched {
            assert!(
                T::TYPE == ScalarType::F64 && !c.device().features.f64,
                "only f64 may be missing: {e}"
            );
            return;
        }
        for i in 0..a.len() {
            let want = host(a[i], b[i]);
            for (got, want) in [(out0[i], want[0]), (out1[i], want[1])] {
                assert!(
                    same(got, want),
                    "a = {:?}, b = {:?}: got {got:?}, want {want:?}",
                    a[i],
                    b[i]
                );
            }
        }
    }
    every_backend(|| {
        let f32s = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.5,
            2.5,
            3e9,
            -7.25e-3,
            1e-40,
            -1e-45,
            f32::MAX,
            f32::MIN_POSITIVE,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
        ];
        check(
            &f32s,
            |x, y| [y % (x + x), y % x],
            |g, w| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
        );
        let f64s = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.5,
            2.5,
            3e9,
            -7.25e-3,
            1e300,
            1e-310,
            -5e-324,
            f64::MAX,
            f64::MIN_POSITIVE,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        check(
            &f64s,
            |x, y| [y % (x + x), y % x],
            |g, w| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
        );
    });
}

/// Bit casts keep every bit, NaN payloads and signs included, in kernels that run in quads
/// on the CPU.
#[test]
fn bitcasts_keep_every_bit_between_floats_and_integers() {
    every_backend(|| {
        let fs = [
            0.0f32,
            -0.0,
            1.5,
            -2.25,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7FA0_0001),
            f32::MIN_POSITIVE / 8.0,
            f32::MAX,
            -7e-39,
        ];
        let fs: Vec<f32> = fs.iter().cycle().take(100).copied().collect();
        let got = unary(&fs, |x: Val<f32>| x.bitcast::<u32>());
        let want: Vec<u32> = fs.iter().map(|x| x.to_bits()).collect();
        assert_eq!(got, want, "f32 as bits");
        let ints: Vec<i32> = want.iter().map(|b| *b as i32 ^ 0x0F0F).collect();
        let got = unary(&ints, |x: Val<i32>| {
            (x ^ 0x0F0Fi32).bitcast::<f32>().bitcast::<u32>()
        });
        assert_eq!(got, want, "i32 to f32 and back");
        let got = unary(&want, |x: Val<u32>| {
            (x.bitcast::<f32>() * 1.0f32).bitcast::<i32>() >> 31i32
        });
        let signs: Vec<i32> = fs
            .iter()
            .map(|x| {
                if x.is_nan() || x.is_sign_positive() {
                    0
                } else {
                    -1
                }
            })
            .collect();
        let nan_signs: Vec<bool> = fs.iter().map(|x| x.is_nan()).collect();
        for ((g, w), nan) in got.iter().zip(&signs).zip(&nan_signs) {
            if !nan {
                assert_eq!(g, w, "the sign of a float times one, as an i32 shifted");
            }
        }
    });
}

/// Integers widened to 64 bits compare as their values. lavapipe compared `i64(x)` of a
/// negative i32 as positive and found `i64(0u) > 0` true until the WGSL writer spelled the
/// extensions out.
#[test]
fn integers_widened_to_64_bits_compare_as_their_values() {
    fn check<A: Scalar + Copy + Default>(xs: &[A], wide: impl Fn(A) -> i64)
    where
        Val<A>: Copy,
    {
        // Bit 0: > 0, bit 1: < 0, bit 2: == 0, then the sign in the high bits.
        let got = unary(xs, |x| {
            let v = x.cast::<i64>();
            select(v.gt(0i64), 1i64, 0i64)
                + select(v.lt(0i64), 2i64, 0i64)
                + select(v.eq(0i64), 4i64, 0i64)
                + v.sign() * 16i64
        });
        let got_u = unary(xs, |x| {
            let v = x.cast::<u64>();
            select(v.gt(0u64), 1u64, 0u64) + select(v.eq(0u64), 4u64, 0u64)
        });
        for (i, x) in xs.iter().enumerate() {
            let v = wide(*x);
            let want = (v > 0) as i64 + 2 * (v < 0) as i64 + 4 * (v == 0) as i64 + 16 * v.signum();
            assert_eq!(got[i], want, "{}: element {i}", A::TYPE.name());
            let want_u = (v as u64 > 0) as u64 + 4 * (v == 0) as u64;
            assert_eq!(got_u[i], want_u, "{} as u64: element {i}", A::TYPE.name());
        }
    }
    every_backend(|| {
        if !has_i64() {
            return;
        }
        check(&[0u32, 1, 255, 0x8000_0000, u32::MAX], |x| x as i64);
        check(&[0i32, 1, -1, i32::MIN, i32::MAX, -29871], |x| x as i64);
        check(&[0u8, 1, 128, 255], |x| x as i64);
        check(&[0i16, -1, i16::MIN, 300], |x| x as i64);
    });
}

#[test]
fn integer_arithmetic_wraps() {
    every_backend(|| {
        let a = vec![i8::MAX, i8::MIN, 100, -100];
        let b = vec![1i8, -1, 100, 100];
        assert_eq!(
            binary(&a, &b, |x, y| x + y),
            a.iter()
                .zip(&b)
                .map(|(x, y)| x.wrapping_add(*y))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            binary(&a, &b, |x, y| x * y),
            a.iter()
                .zip(&b)
                .map(|(x, y)| x.wrapping_mul(*y))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&a, |x| -x),
            a.iter().map(|x| x.wrapping_neg()).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&a, |x| x.abs()),
            a.iter().map(|x| x.wrapping_abs()).collect::<Vec<_>>()
        );
        // The negation of the least value is itself, also after it is widened (the sign, a
        // shift, a division): NVRTC on an H100 widened -i16::MIN to +32768.
        let s = vec![i16::MIN, i16::MAX, -1, 0, 1, i16::MIN + 1];
        assert_eq!(
            unary(&s, |x| (-x).sign()),
            s.iter()
                .map(|x| x.wrapping_neg().signum())
                .collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&s, |x| (-x) >> 3i16),
            s.iter().map(|x| x.wrapping_neg() >> 3).collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&s, |x| (-x).cast::<i32>()),
            s.iter()
                .map(|x| x.wrapping_neg() as i32)
                .collect::<Vec<_>>()
        );
        assert_eq!(
            unary(&a, |x| (-x).cast::<i32>()),
            a.iter()
                .map(|x| x.wrapping_neg() as i32)
                .collect::<Vec<_>>()
        );
        let u = vec![0u16, 1, u16::MAX];
        assert_eq!(
            binary(&u, &u, |x, y| x - y - 1u16),
            u.iter()
                .map(|x| x.wrapping_sub(*x).wrapping_sub(1))
                .collect::<Vec<_>>()
        );
    });
}

/// The f32 values between `a` and `b` (0 for equal values and for two NaNs), counted across
/// zero: -0.0 and +0.0 are one value, the least subnormals either side two apart.
fn ulps(a: f32, b: f32) -> u32 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    let ordered = |x: f32| {
        let b = x.to_bits() as i64;
        if b < 0x8000_0000 {
            b
        } else {
            0x8000_0000 - b
        }
    };
    (ordered(a) - ordered(b))
        .unsigned_abs()
        .min(u32::MAX as u64) as u32
}

/// The documented accuracy of `name` on the backend running the test, in ulps from the
/// correctly rounded result: 2 everywhere, except on wgpu, where the exponential and logarithm
/// families are the driver's (Vulkan allows large errors; lavapipe measures up to 16 ulps) and
/// kiln's own inverse trigonometric and hyperbolic functions stay within 4.
#[test]
fn math_functions_match_f64_references_within_their_ulp_bound() {
    every_backend(|| {
        let xs: Vec<f32> = (0..200).map(|i| (i as f32 - 100.0) * 0.037).collect();
        let pos: Vec<f32> = (1..200).map(|i| i as f32 * 0.11).collect();
        let unit: Vec<f32> = (0..200).map(|i| (i as f32 - 100.0) / 101.0).collect();
        type Case = (&'static str, fn(Val<f32>) -> Val<f32>, fn(f64) -> f64);
        let cases: [(&[f32], Case); 21] = [
            (&xs, ("sin", |x| x.sin(), f64::sin)),
            (&xs, ("cos", |x| x.cos(), f64::cos)),
            (&xs, ("tan", |x| x.tan(), f64::tan)),
            (&unit, ("asin", |x| x.asin(), f64::asin)),
            (&unit, ("acos", |x| x.acos(), f64::acos)),
            (&xs, ("atan", |x| x.atan(), f64::atan)),
            (&xs, ("sinh", |x| x.sinh(), f64::sinh)),
            (&xs, ("cosh", |x| x.cosh(), f64::cosh)),
            (&xs, ("tanh", |x| x.tanh(), f64::tanh)),
            (&xs, ("exp", |x| x.exp(), f64::exp)),
            (&xs, ("exp2", |x| x.exp2(), f64::exp2)),
            (&pos, ("ln", |x| x.ln(), f64::ln)),
            (&pos, ("log2", |x| x.log2(), f64::log2)),
            (&pos, ("log10", |x| x.log10(), f64::log10)),
            (&pos, ("sqrt", |x| x.sqrt(), f64::sqrt)),
            (&pos, ("rsqrt", |x| x.rsqrt(), |x| 1.0 / x.sqrt())),
            (&xs, ("floor", |x| x.floor(), f64::floor)),
            (&xs, ("ceil", |x| x.ceil(), f64::ceil)),
            (&xs, ("trunc", |x| x.trunc(), f64::trunc)),
            (&xs, ("abs", |x| x.abs(), f64::abs)),
            (&xs, ("fract", |x| x.fract(), |x| x - x.trunc())),
        ];
        for (input, (name, f, reference)) in cases {
            let got = unary(input, f);
            for (x, g) in input.iter().zip(&got) {
                let want = reference(*x as f64) as f32;
                assert!(
                    ulps(*g, want) <= ulp_bound(name),
                    "{name}({x}) = {g}, reference {want}"
                );
            }
        }
        let halves: Vec<f32> = vec![0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997];
        assert_eq!(
            unary(&halves, |x| x.round()),
            vec![1.0, -1.0, 2.0, 3.0, -3.0, 0.0]
        );
        let signs: Vec<f32> = vec![3.0, -2.0, 0.0, -0.0];
        let s = unary(&signs, |x| x.sign());
        assert_eq!(s[..2], [1.0, -1.0]);
        assert!(s[2] == 0.0 && s[2].is_sign_positive() && s[3] == 0.0 && s[3].is_sign_negative());
        let (a, b) = pairs(&[0.5f32, -3.25, 7.0, 1e-3]);
        let p = binary(&a, &b, |x, y| x.abs().powf(y));
        let t = binary(&a, &b, |x, y| x.atan2(y));
        let m = binary(&a, &b, |x, y| x % y);
        let f = binary(&a, &b, |x, y| x.mul_add(y, 1.0));
        let c = binary(&a, &b, |x, y| x.copysign(y));
        for i in 0..a.len() {
            let (x, y) = (a[i] as f64, b[i] as f64);
            assert!(
                ulps(p[i], x.abs().powf(y) as f32) <= ulp_bound("pow"),
                "pow"
            );
            assert!(ulps(t[i], x.atan2(y) as f32) <= ulp_bound("atan2"), "atan2");
            assert_eq!(m[i], a[i] % b[i], "fmod");
            if ctx().device().backend != kiln::BackendKind::Wgpu {
                // wgpu's fma is the driver's, which Vulkan allows to round twice.
                assert_eq!(f[i], (x * y + 1.0) as f32, "fma rounds once");
            }
            assert_eq!(c[i], a[i].copysign(b[i]));
        }
        let nan_sign = binary(&[-2.0f32, 3.0], &[f32::NAN, -f32::NAN], |x, y| {
            x.copysign(y)
        });
        assert_eq!(
            nan_sign,
            vec![2.0, 3.0],
            "copysign with a NaN sign gives |x|"
        );
        let special = vec![f32::NAN, f32::INFINITY, -f32::INFINITY, 1.0];
        assert_eq!(
            unary(&special, |x| x.is_nan()),
            vec![true, false, false, false]
        );
        assert_eq!(
            unary(&special, |x| x.is_infinite()),
            vec![false, true, true, false]
        );
        assert_eq!(
            unary(&[-5i32, 0, 9, i32::MIN], |x| x.sign()),
            vec![-1, 0, 1, -1]
        );
        assert_eq!(
            unary(&[-5i32, 0, 9, 100], |x| x.clamp(-2, 50)),
            vec![-2, 0, 9, 50]
        );
    });
}

/// Every unary f32 math function over its whole domain: one in every 4093 f32 bit patterns
/// inside it (subnormals included), against the f64 function rounded to f32, within the
/// backend's bound for that function. Results that are infinite in f32 are skipped, and on
/// wgpu (where Vulkan lets drivers flush them) subnormal results too.
#[test]
fn math_functions_hold_their_ulp_bounds_over_their_whole_domains() {
    let all: Vec<f32> = (0..u32::MAX as u64)
        .step_by(4093)
        .map(|b| f32::from_bits(b as u32))
        .filter(|x| x.is_finite())
        .collect();
    type Case = (
        &'static str,
        fn(Val<f32>) -> Val<f32>,
        fn(f64) -> f64,
        f32,
        f32,
    );
    every_backend(|| {
        let trig = common::trig_range();
        let cases: [Case; 17] = [
            ("sin", |x| x.sin(), f64::sin, -trig, trig),
            ("cos", |x| x.cos(), f64::cos, -trig, trig),
            ("tan", |x| x.tan(), f64::tan, -trig, trig),
            ("asin", |x| x.asin(), f64::asin, -1.0, 1.0),
            ("acos", |x| x.acos(), f64::acos, -1.0, 1.0),
            ("atan", |x| x.atan(), f64::atan, f32::MIN, f32::MAX),
            ("sinh", |x| x.sinh(), f64::sinh, -90.0, 90.0),
            ("cosh", |x| x.cosh(), f64::cosh, -90.0, 90.0),
            ("tanh", |x| x.tanh(), f64::tanh, f32::MIN, f32::MAX),
            ("exp", |x| x.exp(), f64::exp, -104.0, 89.0),
            ("exp2", |x| x.exp2(), f64::exp2, -150.0, 128.0),
            ("ln", |x| x.ln(), f64::ln, 0.0, f32::MAX),
            ("log2", |x| x.log2(), f64::log2, 0.0, f32::MAX),
            ("log10", |x| x.log10(), f64::log10, 0.0, f32::MAX),
            ("sqrt", |x| x.sqrt(), f64::sqrt, 0.0, f32::MAX),
            (
                "rsqrt",
                |x| x.rsqrt(),
                |x| 1.0 / x.sqrt(),
                f32::MIN_POSITIVE,
                f32::MAX,
            ),
            (
                "rsqrt of subnormals",
                |x| x.rsqrt(),
                |x| 1.0 / x.sqrt(),
                1e-45,
                f32::MIN_POSITIVE,
            ),
        ];
        let wgpu = ctx().device().backend == kiln::BackendKind::Wgpu;
        for (name, f, reference, lo, hi) in cases {
            if wgpu && name == "rsqrt of subnormals" {
                continue;
            }
            let xs: Vec<f32> = all
                .iter()
                .copied()
                .filter(|x| (lo..=hi).contains(x))
                .collect();
            let got = unary(&xs, f);
            let bound = ulp_bound(name.split(' ').next().unwrap_or(name));
            let mut worst = (0, 0.0f32);
            for (x, g) in xs.iter().zip(&got) {
                let want = reference(*x as f64) as f32;
                let subnormal = want != 0.0 && want.abs() < f32::MIN_POSITIVE;
                if want.is_infinite() || (wgpu && subnormal) {
                    continue;
                }
                let u = ulps(*g, want);
                if u > worst.0 {
                    worst = (u, *x);
                }
            }
            assert!(
                worst.0 <= bound,
                "{name}: {} ulps at x = {:e} (bound {bound}, {} inputs in [{lo:e}, {hi:e}])",
                worst.0,
                worst.1,
                xs.len()
            );
        }
        // The two-argument functions over 200,000 pairs drawn across their domains: atan2 of
        // any two finite values, pow of a positive x and a y in [-20, 20].
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut ys, mut xs, mut bases, mut powers) = (vec![], vec![], vec![], vec![]);
        while ys.len() < 200_000 {
            let (a, b) = (f32::from_bits(next() as u32), f32::from_bits(next() as u32));
            if a.is_finite() && b.is_finite() {
                ys.push(a);
                xs.push(b);
            }
            let base = f32::from_bits(next() as u32 & 0x7fff_ffff);
            if base.is_finite() && base > 0.0 {
                bases.push(base);
                powers.push((next() % 40_001) as f32 * 1e-3 - 20.0);
            }
        }
        type Pair = (
            &'static str,
            fn(Val<f32>, Val<f32>) -> Val<f32>,
            fn(f64, f64) -> f64,
        );
        let pairs: [(&[f32], &[f32], Pair); 2] = [
            (&ys, &xs, ("atan2", |y, x| y.atan2(x), f64::atan2)),
            (&bases, &powers, ("pow", |x, y| x.powf(y), f64::powf)),
        ];
        for (a, b, (name, f, reference)) in pairs {
            let n = a.len().min(b.len());
            let got = binary(&a[..n], &b[..n], f);
            let bound = ulp_bound(name);
            let mut worst = (0, 0.0f32, 0.0f32);
            for i in 0..n {
                let want = reference(a[i] as f64, b[i] as f64) as f32;
                let subnormal = |v: f32| v != 0.0 && v.abs() < f32::MIN_POSITIVE;
                // wgpu's pow is the driver's, which may flush subnormal operands.
                let flushed = wgpu && (subnormal(want) || subnormal(a[i]) || subnormal(b[i]));
                if want.is_infinite() || flushed {
                    continue;
                }
                // The driver's pow on wgpu is exp2(y * log2 x): the product's rounding grows
                // with it, up to two ulps per unit of y * log2 x, and its log2, bounded only
                // absolutely near 1, adds up to three ulps per unit of y.
                let (x, y) = (a[i] as f64, b[i] as f64);
                let scaled = (16.0 + 2.0 * (y * x.log2()).abs() + 3.0 * y.abs()) as u32;
                let over = ulps(got[i], want).saturating_sub(match (wgpu, name) {
                    (true, "pow") => bound.max(scaled),
                    _ => bound,
                });
                if over > worst.0 {
                    worst = (over, a[i], b[i]);
                }
            }
            assert!(
                worst.0 == 0,
                "{name}: {} ulps past the bound at ({:e}, {:e}) (bound {bound})",
                worst.0,
                worst.1,
                worst.2
            );
        }
    });
}

#[test]
fn comparisons_with_nan_are_false_except_ne() {
    fn check<T: Scalar + Copy + Default + PartialOrd + std::fmt::Debug>(vals: &[T])
    where
        Val<T>: Copy,
    {
        let (a, b) = pairs(vals);
        let lt = binary(&a, &b, |x, y| x.lt(y));
        let eq = binary(&a, &b, |x, y| x.eq(y));
        let ne = binary(&a, &b, |x, y| x.ne(y));
        let ge = binary(&a, &b, |x, y| x.ge(y));
        for i in 0..a.len() {
            let at = format!("{:?} and {:?}", a[i], b[i]);
            assert_eq!(lt[i], a[i] < b[i], "{at}");
            assert_eq!(eq[i], a[i] == b[i], "{at}");
            assert_eq!(ne[i], a[i] != b[i], "{at}");
            assert_eq!(ge[i], a[i] >= b[i], "{at}");
        }
    }
    every_backend(|| {
        check(&[1.0f32, f32::NAN, -0.0, 0.0]);
        if has_f64() {
            check(&[1.0f64, f64::NAN, -0.0, 0.0]);
        }
    });
}

/// Shared-memory tree reduction with barriers inside a loop: the group-uniform loop and the
/// per-item `if` must both work.
/// A kernel with 100 KiB of fixed-size shared memory (more than CUDA's 48 KiB of `__shared__`
/// arrays, which the CUDA writer then places in the dynamic region) and a byte array before
/// it: each group stores its items' squares across the whole tile, then each item reads the
/// tile back mirrored. Devices with less shared memory refuse it, typed.
#[test]
fn shared_memory_past_48_kib_holds_its_values() {
    const TILE: u32 = 25_600;
    let k = Kernel::build("big_tile", |k| {
        let x = k.buffer::<u32>("x", Access::Read);
        let out = k.buffer::<u32>("out", Access::Write);
        let odd = k.shared::<u8>("odd", SharedLen::Static(3));
        let tile = k.shared::<u32>("tile", SharedLen::Static(TILE));
        let lid = local_id(Axis::X);
        let size = group_size(Axis::X);
        if_then(lid.eq(0u32), || odd.store(2u32, 7u8));
        for_range_step(lid, TILE, size, |j| {
            let v = x.load(group_id(Axis::X) * size + j % size);
            tile.store(j, v * v + j);
        });
        barrier();
        let j = lit(TILE - 1) - lid;
        let v = tile.load(j) + odd.load(2u32).cast::<u32>();
        out.store(global_id(Axis::X), v);
    })
    .unwrap();
    every_backend(|| {
        let group = 128u32;
        let groups = 3u32;
        let xs: Vec<u32> = (0..group * groups).map(|i| i * 7 + 1).collect();
        let mut out = vec![0u32; xs.len()];
        let r = ctx().launch_ir(
            &k,
            &Grid::linear(groups, group),
            &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
        );
        if ctx().device().max_shared_bytes < 3 + 4 * TILE as u64 {
            match r {
                Err(kiln::Error::Backend(kiln::BackendError::OutOfMemory { .. })) => return,
                other => panic!("expected OutOfMemory, got {other:?}"),
            }
        }
        r.unwrap();
        for (i, got) in out.iter().enumerate() {
            let (g, l) = (i as u32 / group, i as u32 % group);
            let j = TILE - 1 - l;
            let v = xs[(g * group + j % group) as usize];
            assert_eq!(*got, v.wrapping_mul(v).wrapping_add(j) + 7, "item {i}");
        }
    });
}

fn tree_reduce(dynamic: bool, group: u32) {
    let n = 10_000u32;
    let k = Kernel::build("tree_reduce", |k| {
        let x = k.buffer::<i64>("x", Access::Read);
        let out = k.buffer::<i64>("out", Access::Write);
        let tile = k.shared::<i64>(
            "tile",
            if dynamic {
                SharedLen::Dynamic
            } else {
                SharedLen::Static(group)
            },
        );
        let lid = local_id(Axis::X);
        tile.store(lid, x.load(global_id(Axis::X)));
        barrier();
        let s = Var::new("s", group_size(Axis::X) >> 1u32);
        loop_(|| {
            if_then(s.get().eq(0u32), break_);
            if_then(lid.lt(s.get()), || {
                tile.store(lid, tile.load(lid) + tile.load(lid + s.get()))
            });
            barrier();
            s.set(s.get() >> 1u32);
        });
        if_then(lid.eq(0u32), || {
            out.store(group_id(Axis::X), tile.load(0u32))
        });
    })
    .unwrap();
    let xs: Vec<i64> = (0..n as i64).map(|i| (i * 37) % 1001 - 500).collect();
    let groups = n.div_ceil(group);
    let mut out = vec![0i64; groups as usize];
    let mut grid = Grid::linear(groups, group);
    if dynamic {
        grid.dynamic_shared = vec![group];
    }
    ctx()
        .launch_ir(
            &k,
            &grid,
            &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
        )
        .unwrap();
    let want: Vec<i64> = xs.chunks(group as usize).map(|c| c.iter().sum()).collect();
    assert_eq!(out, want);
}

#[test]
fn shared_memory_tree_reduction_with_barriers() {
    every_backend(|| {
        if !has_i64() {
            return;
        }
        tree_reduce(false, 256);
        tree_reduce(true, 128);
        tree_reduce(false, 1);
    });
}

#[test]
fn barrier_kernel_with_early_return_and_locals_across_barriers() {
    every_backend(|| {
        let k = Kernel::build("rotate", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let out = k.buffer::<u32>("out", Access::ReadWrite);
            let tile = k.shared::<u32>("tile", SharedLen::Static(64));
            let lid = local_id(Axis::X);
            let mine = Var::new("mine", x.load(global_id(Axis::X)) * 3u32);
            tile.store(lid, mine.get());
            barrier();
            let next = tile.load((lid + 1u32) % group_size(Axis::X));
            barrier();
            tile.store(lid, next);
            barrier();
            let again = tile.load((lid + 1u32) % group_size(Axis::X));
            if_then(lid.eq(5u32), return_);
            out.store(global_id(Axis::X), again + mine.get());
        })
        .unwrap();
        let xs: Vec<u32> = (0..128).map(|i| i * i).collect();
        let mut out = vec![1u32; 128];
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(2, 64),
                &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        for g in 0..2 {
            for l in 0..64usize {
                let i = g * 64 + l;
                let want = if l == 5 {
                    1
                } else {
                    xs[g * 64 + (l + 2) % 64] * 3 + xs[i] * 3
                };
                assert_eq!(out[i], want, "item {i}");
            }
        }
    });
}

/// Locals that every work item of a group holds the same value of (the CPU backend keeps one
/// copy per group and assigns it between its runs of work items) next to locals that only
/// look alike: a counter stepped in the middle of a phase and read before and after the step,
/// a local assigned a uniform value but also stepped under a per-item condition, and one
/// assigned inside a group-uniform `if` that holds a barrier, from a value computed before
/// the `if` and read again after it.
#[test]
fn group_uniform_locals_in_barrier_loops_keep_their_per_item_meaning() {
    every_backend(|| {
        let k = Kernel::build("uniform_locals", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let out = k.buffer::<u32>("out", Access::ReadWrite);
            let n = k.value::<u32>("n");
            let tile = k.shared::<u32>("tile", SharedLen::Static(64));
            let (lid, gid) = (local_id(Axis::X), global_id(Axis::X));
            // A division, which the CPU backend cannot move to where it is used.
            let base = (n * 7u32 + 5u32) / (n | 1u32);
            let acc = Var::new("acc", 0u32);
            let t = Var::new("t", 0u32);
            let late = Var::new("late", 7u32);
            let scale = Var::new("scale", n);
            loop_(|| {
                if_then(t.get().ge(n), break_);
                let before = t.get();
                tile.store(lid, x.load(gid) + before);
                t.set(t.get() + 3u32);
                acc.set(acc.get() + before * 2u32 + t.get());
                if_then(lid.lt(t.get()), || late.set(late.get() + lid));
                barrier();
                acc.set(acc.get() + tile.load((lid + t.get()) % group_size(Axis::X)));
                barrier();
                if_then(group_id(Axis::X).eq(1u32), || {
                    scale.set(scale.get() + base);
                    barrier();
                });
            });
            let o = gid * 4u32;
            out.store(o, acc.get());
            out.store(o + 1u32, late.get());
            out.store(o + 2u32, scale.get() + base);
            out.store(o + 3u32, t.get());
        })
        .unwrap();
        for (group, groups, n) in [(64u32, 3u32, 10u32), (7, 4, 7), (64, 2, 0)] {
            let items = (group * groups) as usize;
            let xs: Vec<u32> = (0..items as u32)
                .map(|i| i.wrapping_mul(2654435761) >> 7)
                .collect();
            let mut out = vec![0u32; 4 * items];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, group),
                    &mut [
                        LaunchArg::read(&xs),
                        LaunchArg::read_write(&mut out),
                        LaunchArg::value(n),
                    ],
                )
                .unwrap();
            let g = group as usize;
            let base = (n * 7 + 5) / (n | 1);
            for (gi, chunk) in xs.chunks(g).enumerate() {
                let (mut acc, mut late) = (vec![0u32; g], vec![7u32; g]);
                let (mut t, mut scale) = (0u32, n);
                while t < n {
                    let before = t;
                    let tile: Vec<u32> = chunk.iter().map(|v| v.wrapping_add(before)).collect();
                    t += 3;
                    for l in 0..g {
                        acc[l] = acc[l].wrapping_add(before * 2 + t);
                        if (l as u32) < t {
                            late[l] += l as u32;
                        }
                        acc[l] = acc[l].wrapping_add(tile[(l + t as usize) % g]);
                    }
                    if gi == 1 {
                        scale += base;
                    }
                }
                for l in 0..g {
                    let i = gi * g + l;
                    let got = &out[4 * i..4 * i + 4];
                    let want = [acc[l], late[l], scale + base, t];
                    assert_eq!(got, want, "group size {group}, n {n}, item {i}");
                }
            }
        }
    });
}

/// A loop that holds barriers runs the statements between them again on each trip, and a
/// local read there before this trip assigns it must see what the previous trip left: locals
/// assigned in one arm of an `if` only, or in a loop that may run no trips, next to one that
/// both arms assign before it is read.
#[test]
fn locals_of_a_repeating_phase_keep_the_previous_trips_value_unless_every_path_assigns_them() {
    every_backend(|| {
        let k = Kernel::build("repeating_phase", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let out = k.buffer::<u32>("out", Access::ReadWrite);
            let gid = global_id(Axis::X);
            let xi = x.load(gid);
            let t = Var::new("t", 0u32);
            let acc = Var::new("acc", 0u32);
            // Locals declared where they are first assigned (inside an `if` arm or a loop), as
            // the kernel macro declares the value of an `if` expression: they start at 0 and
            // no statement outside the loop's phase touches them.
            let declared = |slot: &Cell<Option<Var<u32>>>, name: &str, v: Val<u32>| match slot.get()
            {
                Some(var) => var.set(v),
                None => slot.set(Some(Var::new(name, v))),
            };
            let (both, one, looped) = (Cell::new(None), Cell::new(None), Cell::new(None));
            loop_(|| {
                if_then(t.get().ge(3u32), break_);
                barrier();
                if_else(
                    ((xi + t.get()) & 1u32).eq(0u32),
                    || declared(&both, "both", xi + t.get()),
                    || declared(&both, "both", t.get() * 2u32 + local_id(Axis::X)),
                );
                if_then(((xi >> t.get()) & 1u32).eq(1u32), || {
                    declared(&one, "one", xi + t.get())
                });
                for_range(0u32, (xi + t.get()) & 3u32, |j| {
                    declared(&looped, "looped", j + xi)
                });
                let [both, one, looped] =
                    [both.get(), one.get(), looped.get()].map(|v| v.unwrap().get());
                acc.set(acc.get() + both + one * 3u32 + looped * 7u32);
                t.set(t.get() + 1u32);
            });
            // Only `acc` is read after the loop: the others live in the loop's phase alone.
            out.store(gid, acc.get());
        })
        .unwrap();
        for (group, groups) in [(64u32, 2u32), (5, 5)] {
            let items = (group * groups) as usize;
            let xs: Vec<u32> = (0..items as u32)
                .map(|i| i.wrapping_mul(0x9E37_79B9) ^ (i >> 3))
                .collect();
            let mut out = vec![0u32; items];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, group),
                    &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
                )
                .unwrap();
            for (i, &xi) in xs.iter().enumerate() {
                let lid = i as u32 % group;
                let (mut one, mut looped, mut acc) = (0u32, 0u32, 0u32);
                for t in 0..3u32 {
                    let both = if xi.wrapping_add(t) & 1 == 0 {
                        xi.wrapping_add(t)
                    } else {
                        t * 2 + lid
                    };
                    if (xi >> t) & 1 == 1 {
                        one = xi.wrapping_add(t);
                    }
                    for j in 0..(xi.wrapping_add(t) & 3) {
                        looped = j.wrapping_add(xi);
                    }
                    acc = acc
                        .wrapping_add(both)
                        .wrapping_add(one.wrapping_mul(3))
                        .wrapping_add(looped.wrapping_mul(7));
                }
                assert_eq!(out[i], acc, "group size {group}, item {i}");
            }
        }
    });
}

#[test]
fn two_and_three_dimensional_grids() {
    every_backend(|| {
        let (w, h) = (37u32, 21u32);
        let k2 = Kernel::build("grid2", |k| {
            let out = k.buffer::<u32>("out", Access::Write);
            let width = k.value::<u32>("width");
            let height = k.value::<u32>("height");
            let (x, y) = (global_id(Axis::X), global_id(Axis::Y));
            if_then(x.lt(width).and(y.lt(height)), || {
                out.store(y * width + x, x * 1000u32 + y)
            });
        })
        .unwrap();
        let mut out = vec![0u32; (w * h) as usize];
        let grid = Grid {
            groups: [w.div_ceil(8), h.div_ceil(4), 1],
            group_size: [8, 4, 1],
            dynamic_shared: vec![],
        };
        ctx()
            .launch_ir(
                &k2,
                &grid,
                &mut [
                    LaunchArg::read_write(&mut out),
                    LaunchArg::value(w),
                    LaunchArg::value(h),
                ],
            )
            .unwrap();
        for y in 0..h {
            for x in 0..w {
                assert_eq!(out[(y * w + x) as usize], x * 1000 + y);
            }
        }
        let k3 = Kernel::build("grid3", |k| {
            let out = k.buffer::<u32>("out", Access::Write);
            let (x, y, z) = (global_id(Axis::X), global_id(Axis::Y), global_id(Axis::Z));
            let (sx, sy) = (global_size(Axis::X), global_size(Axis::Y));
            let idx = (z * sy + y) * sx + x;
            out.store(
                idx,
                local_index() + group_id(Axis::Z) * 10_000u32 + num_groups(Axis::Y) * 1_000_000u32,
            );
        })
        .unwrap();
        let grid = Grid {
            groups: [2, 3, 4],
            group_size: [4, 2, 2],
            dynamic_shared: vec![],
        };
        let (sx, sy, sz) = (8usize, 6usize, 8usize);
        let mut out = vec![0u32; sx * sy * sz];
        ctx()
            .launch_ir(&k3, &grid, &mut [LaunchArg::read_write(&mut out)])
            .unwrap();
        for z in 0..sz {
            for y in 0..sy {
                for x in 0..sx {
                    let local = (x % 4) + (y % 2) * 4 + (z % 2) * 8;
                    let want = local as u32 + (z / 2) as u32 * 10_000 + 3_000_000;
                    assert_eq!(out[(z * sy + y) * sx + x], want, "({x},{y},{z})");
                }
            }
        }
    });
}

/// Grids of many small groups, for kernels that read only their global ids (the CPU backend
/// runs several such groups as one call): every work item runs exactly once, with its own
/// ids, in a 1D grid whose group count (a prime) leaves groups over after any merging, and in
/// a 3D grid. A kernel that reads its group and local ids still sees the grid's groups.
#[test]
fn kernels_reading_only_global_ids_run_each_work_item_once_in_many_groups() {
    every_backend(|| {
        let k = Kernel::build("each_once", |k| {
            let runs = k.buffer::<u32>("runs", Access::ReadWrite);
            let ids = k.buffer::<u32>("ids", Access::ReadWrite);
            let (x, y, z) = (global_id(Axis::X), global_id(Axis::Y), global_id(Axis::Z));
            let w = k.value::<u32>("width");
            let h = k.value::<u32>("height");
            let at = (z * h + y) * w + x;
            runs.atomic_add(at, 1u32);
            ids.store(at, x + y * 1000u32 + z * 1_000_000u32);
        })
        .unwrap();
        for (groups, size) in [([20_011u32, 1, 1], [3u32, 1, 1]), ([101, 6, 3], [4, 2, 1])] {
            let (w, h, d) = (
                groups[0] * size[0],
                groups[1] * size[1],
                groups[2] * size[2],
            );
            let n = (w * h * d) as usize;
            let (mut runs, mut ids) = (vec![0u32; n], vec![u32::MAX; n]);
            let grid = Grid {
                groups,
                group_size: size,
                dynamic_shared: vec![],
            };
            ctx()
                .launch_ir(
                    &k,
                    &grid,
                    &mut [
                        LaunchArg::read_write(&mut runs),
                        LaunchArg::read_write(&mut ids),
                        LaunchArg::value(w),
                        LaunchArg::value(h),
                    ],
                )
                .unwrap();
            for z in 0..d {
                for y in 0..h {
                    for x in 0..w {
                        let at = ((z * h + y) * w + x) as usize;
                        assert_eq!(runs[at], 1, "work item ({x}, {y}, {z}) of {groups:?}");
                        assert_eq!(ids[at], x + y * 1000 + z * 1_000_000, "({x}, {y}, {z})");
                    }
                }
            }
        }
        // A kernel that reads its group and local ids sees the grid's own groups.
        let k = Kernel::build("group_ids", |k| {
            let out = k.buffer::<u32>("out", Access::Write);
            let at = global_id(Axis::X);
            out.store(at, group_id(Axis::X) * 4u32 + local_id(Axis::X));
        })
        .unwrap();
        let mut out = vec![u32::MAX; 20_011 * 3];
        let grid = Grid::linear(20_011, 3);
        ctx()
            .launch_ir(&k, &grid, &mut [LaunchArg::read_write(&mut out)])
            .unwrap();
        for (i, o) in out.iter().enumerate() {
            assert_eq!(*o, (i / 3 * 4 + i % 3) as u32, "work item {i}");
        }
    });
}

#[test]
fn atomics_on_buffers_and_shared_memory() {
    every_backend(|| {
        let n = 5000u32;
        let k = Kernel::build("atomics", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let hist = k.buffer::<u32>("hist", Access::ReadWrite);
            let cells = k.buffer::<i32>("cells", Access::ReadWrite);
            let fsum = k.buffer::<f32>("fsum", Access::ReadWrite);
            let winner = k.buffer::<u32>("winner", Access::ReadWrite);
            let local = k.shared::<u32>("local", SharedLen::Static(8));
            let i = global_id(Axis::X);
            if_then(i.lt(x.len()), || {
                let v = x.load(i);
                hist.atomic_add(v % 16u32, 1u32);
                let s = v.cast::<i32>() - 2500i32;
                cells.atomic_min(0u32, s);
                cells.atomic_max(1u32, s);
                cells.atomic_and(2u32, s | 0x0F0);
                cells.atomic_or(3u32, s & 0x30F);
                cells.atomic_xor(4u32, s);
                cells.atomic_sub(5u32, 1i32);
                fsum.atomic_add(0u32, (v % 4u32).cast::<f32>());
                let old = winner.atomic_compare_exchange(0u32, 0u32, i + 1u32);
                winner.store(i + 1u32, old);
                local.atomic_add(v % 8u32, 1u32);
                let ignored = hist.atomic_add(1_000_000u32, 1u32);
                winner.atomic_max(n + 1u32, ignored);
            });
        })
        .unwrap();
        let xs: Vec<u32> = (0..n).map(|i| (i * 7 + 3) % 5003).collect();
        let mut hist = vec![0u32; 16];
        let mut cells = vec![i32::MAX, i32::MIN, -1, 0, 0, 0];
        let mut fsum = vec![0f32; 1];
        let mut winner = vec![0u32; n as usize + 2];
        let groups = n.div_ceil(128);
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(groups, 128),
                &mut [
                    LaunchArg::read(&xs),
                    LaunchArg::read_write(&mut hist),
                    LaunchArg::read_write(&mut cells),
                    LaunchArg::read_write(&mut fsum),
                    LaunchArg::read_write(&mut winner),
                ],
            )
            .unwrap();
        let mut want_hist = vec![0u32; 16];
        for v in &xs {
            want_hist[(v % 16) as usize] += 1;
        }
        assert_eq!(hist, want_hist);
        let s: Vec<i32> = xs.iter().map(|&v| v as i32 - 2500).collect();
        assert_eq!(cells[0], *s.iter().min().unwrap());
        assert_eq!(cells[1], *s.iter().max().unwrap());
        assert_eq!(cells[2], s.iter().fold(-1, |a, v| a & (v | 0x0F0)));
        assert_eq!(cells[3], s.iter().fold(0, |a, v| a | (v & 0x30F)));
        assert_eq!(cells[4], s.iter().fold(0, |a, v| a ^ v));
        assert_eq!(cells[5], -(n as i32));
        assert_eq!(fsum[0], xs.iter().map(|v| (v % 4) as f32).sum::<f32>());
        let zeros = winner[1..=n as usize].iter().filter(|&&o| o == 0).count();
        assert_eq!(zeros, 1, "exactly one compare-exchange succeeds");
        let first = winner[1..=n as usize].iter().position(|&o| o == 0).unwrap() as u32;
        assert_eq!(winner[0], first + 1);
        assert_eq!(
            winner[n as usize + 1],
            0,
            "out-of-bounds atomics return zero"
        );
    });
}

/// kiln's float `min` (or `max`) rule: NaN gives the other operand; of -0 and +0, `min`
/// gives -0 and `max` +0.
fn nan_min(a: f32, b: f32, max: bool) -> f32 {
    if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else if a == b {
        let bits = if max {
            a.to_bits() & b.to_bits()
        } else {
            a.to_bits() | b.to_bits()
        };
        f32::from_bits(bits)
    } else if max == (a > b) {
        a
    } else {
        b
    }
}

#[test]
fn subgroup_operations_match_a_simulation_at_the_devices_subgroup_size() {
    every_backend(|| {
        let (n, group) = (256usize, 64usize);
        let xs: Vec<i32> = (0..n).map(|i| ((i * 37) % 23) as i32 - 11).collect();
        let fs: Vec<f32> = (0..n)
            .map(|i| match i % 13 {
                0 => f32::NAN,
                6 => -0.0,
                _ => xs[i] as f32 * 0.5,
            })
            .collect();
        let k = Kernel::build("subgroup_ops", |k| {
            let x = k.buffer::<i32>("x", Access::Read);
            let f = k.buffer::<f32>("f", Access::Read);
            let shuffles = k.buffer::<i32>("shuffles", Access::Write);
            let sums = k.buffer::<i32>("sums", Access::Write);
            let votes = k.buffer::<u32>("votes", Access::Write);
            let extremes = k.buffer::<f32>("extremes", Access::Write);
            let i = global_id(Axis::X);
            let v = x.load(i);
            let at = |row: u32, j: u32| i * row + j;
            for (j, s) in [
                v.shuffle(3u32),
                v.shuffle(1000u32),
                v.shuffle_up(1u32),
                v.shuffle_down(2u32),
                v.shuffle_xor(5u32),
                v.broadcast(0u32),
                // A lane that differs between lanes, past the subgroup for some of them.
                v.shuffle(builtin(Builtin::SubgroupLane) * 5u32 % 41u32),
            ]
            .into_iter()
            .enumerate()
            {
                shuffles.store(at(7, j as u32), s);
            }
            for (j, s) in [
                v.subgroup_add(),
                v.subgroup_min(),
                v.subgroup_max(),
                v.subgroup_inclusive_add(),
                v.subgroup_exclusive_add(),
            ]
            .into_iter()
            .enumerate()
            {
                sums.store(at(5, j as u32), s);
            }
            for (j, s) in [
                v.gt(0).ballot(),
                v.gt(-12).subgroup_all().cast::<u32>(),
                v.gt(0).subgroup_all().cast::<u32>(),
                v.eq(7).subgroup_any().cast::<u32>(),
                builtin(Builtin::SubgroupSize),
                builtin(Builtin::SubgroupLane),
                builtin(Builtin::SubgroupId),
            ]
            .into_iter()
            .enumerate()
            {
                votes.store(at(7, j as u32), s);
            }
            let fv = f.load(i);
            extremes.store(at(2, 0), fv.subgroup_min());
            extremes.store(at(2, 1), fv.subgroup_max());
        })
        .unwrap();
        let (mut shuffles, mut sums) = (vec![0i32; n * 7], vec![0i32; n * 5]);
        let (mut votes, mut extremes) = (vec![0u32; n * 7], vec![0f32; n * 2]);
        ctx()
            .launch_ir(
                &k,
                &Grid::linear((n / group) as u32, group as u32),
                &mut [
                    LaunchArg::read(&xs),
                    LaunchArg::read(&fs),
                    LaunchArg::read_write(&mut shuffles),
                    LaunchArg::read_write(&mut sums),
                    LaunchArg::read_write(&mut votes),
                    LaunchArg::read_write(&mut extremes),
                ],
            )
            .unwrap();
        let size = votes[4] as usize;
        assert_eq!(
            size as u32,
            ctx().device().subgroup_size,
            "the device's size"
        );
        assert!(size.is_power_of_two() && group % size == 0, "size {size}");
        for i in 0..n {
            let lane = (i % group) % size;
            let base = i - lane;
            let lanes = &xs[base..base + size];
            let from = |l: usize| if l < size { xs[base + l] } else { xs[i] };
            let want = [
                from(3),
                xs[i],
                if lane >= 1 { from(lane - 1) } else { xs[i] },
                from(lane + 2),
                from(lane ^ 5),
                xs[base],
                from(lane * 5 % 41),
            ];
            assert_eq!(&shuffles[i * 7..i * 7 + 7], &want, "shuffles of item {i}");
            let want = [
                lanes.iter().fold(0i32, |a, &b| a.wrapping_add(b)),
                *lanes.iter().min().unwrap(),
                *lanes.iter().max().unwrap(),
                lanes[..=lane].iter().sum(),
                lanes[..lane].iter().sum(),
            ];
            assert_eq!(&sums[i * 5..i * 5 + 5], &want, "sums of item {i}");
            let ballot = (0..size.min(32))
                .filter(|&l| lanes[l] > 0)
                .fold(0u32, |m, l| m | 1 << l);
            let want = [
                ballot,
                lanes.iter().all(|&x| x > -12) as u32,
                lanes.iter().all(|&x| x > 0) as u32,
                lanes.contains(&7) as u32,
                size as u32,
                lane as u32,
                ((i % group) / size) as u32,
            ];
            assert_eq!(&votes[i * 7..i * 7 + 7], &want, "votes of item {i}");
            let f_lanes = &fs[base..base + size];
            for (j, max) in [(0, false), (1, true)] {
                let want = f_lanes.iter().fold(f32::NAN, |a, &b| nan_min(a, b, max));
                let got = extremes[i * 2 + j];
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "item {i}: {} {got} != {want}",
                    if max { "max" } else { "min" }
                );
            }
        }
    });
}

/// kiln's min/max over a set of floats: NaN only when every value is NaN; of the zeros, min
/// gives -0.0 and max +0.0 when both are present.
fn nan_aware_extreme(vals: impl Iterator<Item = f32>, max: bool) -> f32 {
    let vals: Vec<f32> = vals.filter(|v| !v.is_nan()).collect();
    let Some(&first) = vals.first() else {
        return f32::NAN;
    };
    let best = vals
        .iter()
        .fold(first, |a, &b| if (b > a) == max { b } else { a });
    if best != 0.0 {
        return best;
    }
    let sign_wanted = !max;
    if vals
        .iter()
        .any(|v| *v == 0.0 && v.is_sign_negative() == sign_wanted)
    {
        if max {
            0.0
        } else {
            -0.0
        }
    } else {
        best
    }
}

#[test]
fn subgroup_operations_inside_device_functions() {
    every_backend(|| {
        // `twice` is `noinline` and `table` has an array local: on CUDA the first is inlined
        // and the second takes the caller's lane mask.
        let k = Kernel::build("subgroup_calls", |k| {
            let out = k.buffer::<u32>("out", Access::Write);
            let u32t = Type::Scalar(ScalarType::U32);
            let twice = device_fn::<u32>("twice", &[("x", u32t.clone())], true, |a| {
                a[0].typed::<u32>().subgroup_add() * 2u32
            });
            let table = device_fn::<u32>("table", &[("x", u32t)], false, |a| {
                let x = a[0].typed::<u32>();
                let t = LocalArray::<u32>::new("t", 4);
                t.set(x & 3u32, x);
                t.get(x & 3u32).shuffle_xor(1u32)
            });
            let i = global_id(Axis::X);
            out.store(i * 2u32, twice.call(&[i.erase()]));
            out.store(i * 2u32 + 1u32, table.call(&[i.erase()]));
        })
        .unwrap();
        let n = 128usize;
        let mut out = vec![0u32; 2 * n];
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(2, 64),
                &mut [LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        let size = ctx().device().subgroup_size as usize;
        for i in 0..n {
            let (lane, base) = (i % size, i - i % size);
            let sum: u32 = (base..base + size).map(|l| l as u32).sum();
            let src = lane ^ 1;
            let from = if src < size { base + src } else { i };
            assert_eq!(out[2 * i], sum * 2, "item {i}, subgroup sum");
            assert_eq!(out[2 * i + 1], from as u32, "item {i}, shuffle");
        }
    });
}

#[test]
fn subgroup_operations_cover_the_active_lanes_only() {
    every_backend(|| {
        // 44 work items per group: not a multiple of 8, 16 or 32, so the last subgroup of each
        // group has fewer lanes. The operations run inside an `if` that differs from lane to
        // lane, then again after some lanes returned, then in a loop some lanes `continue` or
        // leave with `break`.
        let (groups, group) = (3usize, 44usize);
        let n = groups * group;
        let xs: Vec<i32> = (0..n).map(|i| ((i * 37) % 23) as i32 - 11).collect();
        let fs: Vec<f32> = (0..n)
            .map(|i| match (i * 5) % 7 {
                0 => f32::NAN,
                1 => -0.0,
                2 => 0.0,
                3 => 1.5,
                _ => -2.0 - (i % 5) as f32,
            })
            .collect();
        const OPS: usize = 15;
        const PARTS: u32 = 3;
        let k = Kernel::build("subgroup_active", |k| {
            let x = k.buffer::<i32>("x", Access::Read);
            let f = k.buffer::<f32>("f", Access::Read);
            let ints = k.buffer::<i32>("ints", Access::Write);
            let floats = k.buffer::<f32>("floats", Access::Write);
            let i = global_id(Axis::X);
            let v = x.load(i);
            let fv = f.load(i);
            let record = |part: u32| {
                let at = |j: u32| (i * PARTS + part) * OPS as u32 + j;
                for (j, s) in [
                    v.shuffle(3u32),
                    v.shuffle_up(1u32),
                    v.shuffle_down(2u32),
                    v.shuffle_xor(5u32),
                    v.broadcast(0u32),
                    v.subgroup_add(),
                    v.subgroup_min(),
                    v.subgroup_max(),
                    v.subgroup_inclusive_add(),
                    v.subgroup_exclusive_add(),
                    v.gt(0).ballot().cast::<i32>(),
                    v.gt(-9).subgroup_all().cast::<i32>(),
                    v.eq(7).subgroup_any().cast::<i32>(),
                    builtin(Builtin::SubgroupSize).cast::<i32>(),
                    builtin(Builtin::SubgroupLane).cast::<i32>(),
                ]
                .into_iter()
                .enumerate()
                {
                    ints.store(at(j as u32), s);
                }
                floats.store((i * PARTS + part) * 2, fv.subgroup_min());
                floats.store((i * PARTS + part) * 2 + 1, (-fv).subgroup_max());
            };
            if_then((v % 3).ne(0), || record(0));
            if_then((local_index() % 5u32).eq(4u32), return_);
            record(1);
            for_range(0u32, 2u32, |j| {
                if_then(((v + j.cast::<i32>()) % 4).eq(0), continue_);
                if_then(j.eq(0u32), || if_then((v % 7).eq(1), break_));
                if_then(j.eq(1u32), || record(2));
            });
        })
        .unwrap();
        let (mut ints, mut floats) = (vec![i32::MIN; n * 3 * OPS], vec![99f32; n * 6]);
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(groups as u32, group as u32),
                &mut [
                    LaunchArg::read(&xs),
                    LaunchArg::read(&fs),
                    LaunchArg::read_write(&mut ints),
                    LaunchArg::read_write(&mut floats),
                ],
            )
            .unwrap();
        let size = ctx().device().subgroup_size as usize;
        let returned = |i: usize| (i % group) % 5 == 4;
        // In the loop: not left at trip 0 (`break` where the trip was not skipped), not
        // skipped at trip 1.
        let looped = |i: usize| {
            let v = xs[i];
            let left_at_trip_0 = v % 4 != 0 && v % 7 == 1;
            !returned(i) && !left_at_trip_0 && (v + 1) % 4 != 0
        };
        let parts: [&dyn Fn(usize) -> bool; 3] = [&|i| xs[i] % 3 != 0, &|i| !returned(i), &looped];
        for (part, active) in parts.into_iter().enumerate() {
            for i in (0..n).filter(|&i| active(i)) {
                let local = i % group;
                let lane = local % size;
                let base = i - lane;
                let end = (base + size).min(i - local + group);
                let on = |l: usize| base + l < end && active(base + l);
                let lanes: Vec<usize> = (0..size).filter(|&l| on(l)).collect();
                let from = |l: usize| {
                    if l < size && on(l) {
                        xs[base + l]
                    } else {
                        xs[i]
                    }
                };
                let vals = |ls: &[usize]| ls.iter().map(|&l| xs[base + l]).collect::<Vec<i32>>();
                let below: Vec<usize> = lanes.iter().copied().filter(|&l| l < lane).collect();
                let all = vals(&lanes);
                let want = [
                    from(3),
                    if lane >= 1 { from(lane - 1) } else { xs[i] },
                    from(lane + 2),
                    from(lane ^ 5),
                    from(0),
                    all.iter().fold(0i32, |a, &b| a.wrapping_add(b)),
                    *all.iter().min().unwrap(),
                    *all.iter().max().unwrap(),
                    vals(&below).iter().sum::<i32>() + xs[i],
                    vals(&below).iter().sum(),
                    lanes
                        .iter()
                        .filter(|&&l| l < 32 && xs[base + l] > 0)
                        .fold(0u32, |m, &l| m | 1 << l) as i32,
                    all.iter().all(|&x| x > -9) as i32,
                    all.contains(&7) as i32,
                    size as i32,
                    lane as i32,
                ];
                let at = (i * PARTS as usize + part) * OPS;
                assert_eq!(&ints[at..at + OPS], &want, "part {part}, item {i}");
                let fvals = || lanes.iter().map(|&l| fs[base + l]);
                for (j, want) in [
                    nan_aware_extreme(fvals(), false),
                    nan_aware_extreme(fvals().map(|v| -v), true),
                ]
                .into_iter()
                .enumerate()
                {
                    let got = floats[(i * PARTS as usize + part) * 2 + j];
                    assert!(
                        got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                        "part {part}, item {i}, {}: {got} != {want}",
                        ["min", "max"][j]
                    );
                }
            }
        }
    });
}

#[test]
fn device_functions_inline_and_noinline() {
    every_backend(|| {
        if !has_f64() {
            return;
        }
        let k = Kernel::build("poly", |k| {
            let x = k.buffer::<f64>("x", Access::Read);
            let out = k.buffer::<f64>("out", Access::Write);
            let sq = device_fn::<f64>("square", &[("v", f64::ir_type())], false, |a| {
                let v = a[0].typed::<f64>();
                v * v
            });
            let cube = device_fn::<f64>("cube", &[("v", f64::ir_type())], true, |a| {
                sq.call(a) * a[0].typed::<f64>()
            });
            let i = global_id(Axis::X);
            let v = x.load(i);
            out.store(i, cube.call(&[v.erase()]) + sq.call(&[v.erase()]));
        })
        .unwrap();
        assert_eq!(k.functions.len(), 2);
        assert!(k.functions[1].noinline);
        let xs: Vec<f64> = (0..33).map(|i| i as f64 * 0.5 - 4.0).collect();
        let mut out = vec![0f64; 33];
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(3, 11),
                &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        for (x, o) in xs.iter().zip(&out) {
            assert_eq!(*o, x * x * x + x * x);
        }
    });
}

#[test]
fn local_arrays_loops_break_continue_and_early_return() {
    every_backend(|| {
        let k = Kernel::build("locals", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let out = k.buffer::<u32>("out", Access::ReadWrite);
            let i = global_id(Axis::X);
            if_then(i.ge(x.len()), return_);
            let v = x.load(i);
            if_then((v % 5u32).eq(4u32), return_);
            let arr = LocalArray::<u32>::new("digits", 8);
            for_range(0u32, 8u32, |j| arr.set(j, v + j * j));
            let acc = Var::new("acc", 0u32);
            for_range_step(0u32, 10u32, 2u32, |j| acc.set(acc.get() + arr.get(j)));
            let count = Var::new("count", 0u32);
            let t = Var::new("t", v);
            while_(
                || t.get().gt(0u32),
                || {
                    t.set(t.get() / 2u32);
                    if_then((t.get() % 3u32).eq(0u32), continue_);
                    count.set(count.get() + 1u32);
                    if_then(count.get().ge(4u32), break_);
                },
            );
            out.store(i, acc.get() * 100u32 + count.get());
        })
        .unwrap();
        let xs: Vec<u32> = (0..50).map(|i| i * 13 + 1).collect();
        let mut out = vec![7u32; 50];
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(4, 16),
                &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        for (x, o) in xs.iter().zip(&out) {
            if x % 5 == 4 {
                assert_eq!(*o, 7);
                continue;
            }
            let arr: Vec<u32> = (0..8).map(|j| x + j * j).collect();
            let acc: u32 = (0..10)
                .step_by(2)
                .map(|j| arr.get(j).copied().unwrap_or(0))
                .sum();
            let mut count = 0;
            let mut t = *x;
            while t > 0 {
                t /= 2;
                if t % 3 == 0 {
                    continue;
                }
                count += 1;
                if count >= 4 {
                    break;
                }
            }
            assert_eq!(*o, acc * 100 + count, "x = {x}");
        }
    });
}

#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct Particle {
    pos: Vector<f32, 2>,
    mass: f32,
    id: u32,
}

// SAFETY: repr(C), fields described in order, no padding (4-byte fields only).
unsafe impl IrStruct for Particle {
    fn struct_type() -> StructType {
        StructType {
            name: "Particle".into(),
            fields: vec![
                Field {
                    name: "pos".into(),
                    ty: Vector::<f32, 2>::ir_type(),
                },
                Field {
                    name: "mass".into(),
                    ty: f32::ir_type(),
                },
                Field {
                    name: "id".into(),
                    ty: u32::ir_type(),
                },
            ],
        }
    }
}

#[test]
fn struct_buffers_vectors_and_struct_parameters() {
    every_backend(|| {
        let k = Kernel::build("particles", |k| {
            let ps = k.buffer::<Particle>("ps", Access::ReadWrite);
            let push = k.value::<Particle>("push");
            let i = global_id(Axis::X);
            let p = ps.load(i);
            let pos = p.field::<Vector<f32, 2>>(0);
            let d = push.field::<Vector<f32, 2>>(0);
            let moved = pos + d * vector([p.field::<f32>(1), p.field::<f32>(1)]);
            let swapped = vector([moved.at(1), moved.at(0)]);
            let id = p.field::<u32>(2) + push.field::<u32>(2);
            ps.store(
                i,
                compose::<Particle>(&[
                    swapped.erase(),
                    (p.field::<f32>(1) * 2.0).erase(),
                    id.erase(),
                ]),
            );
        })
        .unwrap();
        let mut ps: Vec<Particle> = (0..20)
            .map(|i| Particle {
                pos: Vector([i as f32, -(i as f32)]),
                mass: 0.5 + i as f32,
                id: i,
            })
            .collect();
        let orig = ps.clone();
        let push = Particle {
            pos: Vector([1.0, 2.0]),
            mass: 0.0,
            id: 100,
        };
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(4, 5),
                &mut [LaunchArg::read_write(&mut ps), LaunchArg::value(push)],
            )
            .unwrap();
        for (p, o) in ps.iter().zip(&orig) {
            let mx = o.pos.0[0] + 1.0 * o.mass;
            let my = o.pos.0[1] + 2.0 * o.mass;
            assert_eq!(
                *p,
                Particle {
                    pos: Vector([my, mx]),
                    mass: o.mass * 2.0,
                    id: o.id + 100
                }
            );
        }
    });
}

#[test]
fn bad_launches_are_typed_errors_not_panics() {
    every_backend(|| {
        let k = Kernel::build("copy", |k| {
            let a = k.buffer::<f32>("a", Access::Read);
            let b = k.buffer::<f32>("b", Access::Write);
            let i = global_id(Axis::X);
            b.store(i, a.load(i));
        })
        .unwrap();
        let a = vec![1f32; 4];
        let mut b = vec![0f32; 4];
        let c = ctx();
        let e = c
            .launch_ir(&k, &Grid::linear(1, 4), &mut [LaunchArg::read(&a)])
            .unwrap_err();
        assert!(
            e.to_string().contains("1 arguments for 2 parameters"),
            "{e}"
        );
        let e = c
            .launch_ir(
                &k,
                &Grid::linear(1, 0),
                &mut [LaunchArg::read(&a), LaunchArg::read_write(&mut b)],
            )
            .unwrap_err();
        assert!(e.to_string().contains("group size"), "{e}");
        let e = c
            .launch_ir(
                &k,
                &Grid::linear(1, 4),
                &mut [LaunchArg::value(3u32), LaunchArg::read_write(&mut b)],
            )
            .unwrap_err();
        assert!(e.to_string().contains("must be a Read buffer"), "{e}");
        let bytes = [0u8; 6];
        let e = c
            .launch_ir(
                &k,
                &Grid::linear(1, 4),
                &mut [LaunchArg::Read(&bytes), LaunchArg::read_write(&mut b)],
            )
            .unwrap_err();
        assert!(e.to_string().contains("not a whole number"), "{e}");
        c.launch_ir(
            &k,
            &Grid::linear(1, 4),
            &mut [LaunchArg::read(&a), LaunchArg::read_write(&mut b)],
        )
        .unwrap();
        assert_eq!(b, a, "the context keeps working after errors");
    });
}

/// Bodies the CPU backend runs four work items at a time (32-bit values, straight-line code
/// with ifs): varying if/else with stores, return inside a varying if, gathers, contiguous
/// and uniform-index stores, partial quads at the end of each group. Checked against a plain
/// per-item loop.
#[test]
fn element_wise_bodies_give_per_item_results() {
    every_backend(|| {
        let n = 1003u32;
        let k = Kernel::build("lanes", |k| {
            let x = k.buffer::<f32>("x", Access::Read);
            let ids = k.buffer::<i32>("ids", Access::Read);
            let out = k.buffer::<f32>("out", Access::ReadWrite);
            let tags = k.buffer::<u32>("tags", Access::ReadWrite);
            let last = k.buffer::<u32>("last", Access::ReadWrite);
            let i = global_id(Axis::X);
            if_then(i.ge(x.len()), return_);
            let v = x.load(i);
            let gathered = x.load((i * 7u32) % x.len());
            let id = ids.load(i);
            if_else(
                v.gt(0.0).and((id % 3).ne(0)),
                || {
                    out.store(i, v.sqrt() + gathered.min(f32::NAN));
                    if_then(id.lt(-100), return_);
                    tags.store(i, (id / 3).cast::<u32>() + 1u32);
                },
                || out.store(i, select(v.is_nan(), -1.0f32, v.abs().floor() * 2.0)),
            );
            last.store(group_id(Axis::X), i);
            tags.store(i + 5000u32, 9u32);
        })
        .unwrap();
        let x: Vec<f32> = (0..n)
            .map(|i| {
                if i % 97 == 0 {
                    f32::NAN
                } else {
                    (i as f32 * 1.37).sin() * 50.0
                }
            })
            .collect();
        let ids: Vec<i32> = (0..n as i32).map(|i| (i * 37) % 401 - 200).collect();
        for group in [1u32, 3, 10, 64, 256] {
            let mut out = vec![7f32; n as usize];
            let mut tags = vec![0u32; n as usize];
            let groups = n.div_ceil(group);
            let mut last = vec![u32::MAX; groups as usize];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, group),
                    &mut [
                        LaunchArg::read(&x),
                        LaunchArg::read(&ids),
                        LaunchArg::read_write(&mut out),
                        LaunchArg::read_write(&mut tags),
                        LaunchArg::read_write(&mut last),
                    ],
                )
                .unwrap();
            for i in 0..n as usize {
                let (v, id) = (x[i], ids[i]);
                let g = x[(i * 7) % n as usize];
                let (want_out, want_tag) = if v > 0.0 && id % 3 != 0 {
                    let o = v.sqrt() + g.min(f32::NAN);
                    (o, if id < -100 { 0 } else { (id / 3) as u32 + 1 })
                } else {
                    (
                        if v.is_nan() {
                            -1.0
                        } else {
                            v.abs().floor() * 2.0
                        },
                        0,
                    )
                };
                assert!(
                    out[i] == want_out || (out[i].is_nan() && want_out.is_nan()),
                    "group {group}, item {i}: {} vs {want_out}",
                    out[i]
                );
                assert_eq!(tags[i], want_tag, "group {group}, item {i}");
            }
            let returned_early = |i: usize| x[i] > 0.0 && ids[i] % 3 != 0 && ids[i] < -100;
            for (g, l) in last.iter().enumerate() {
                let items = g as u32 * group..((g as u32 + 1) * group).min(n);
                let finishers: Vec<u32> = items.filter(|&i| !returned_early(i as usize)).collect();
                if finishers.is_empty() {
                    assert_eq!(
                        *l,
                        u32::MAX,
                        "group {g} of size {group}: every item returned early"
                    );
                } else {
                    assert!(
                        finishers.contains(l),
                        "group {g} of size {group}: last = {l}, expected one of {finishers:?}"
                    );
                }
            }
        }
    });
}

/// Loops, locals and bounds compared with a work item's index, in a kernel with no barriers:
/// the CPU backend runs such kernels four work items at a time, with loops taken together,
/// locals per lane and the comparisons settled for all four lanes at once when it can.
#[test]
fn loops_locals_and_index_bounds_give_per_item_results() {
    every_backend(|| {
        let n = 1003u32;
        let k = Kernel::build("lane_loops", |k| {
            let x = k.buffer::<f32>("x", Access::Read);
            let ids = k.buffer::<i32>("ids", Access::Read);
            let out = k.buffer::<f32>("out", Access::ReadWrite);
            let counts = k.buffer::<u32>("counts", Access::ReadWrite);
            let bound = k.value::<i32>("bound");
            let ubound = k.value::<u32>("ubound");
            let i = global_id(Axis::X);
            if_then(i.ge(x.len()), return_);
            if_then((ids.load(i) % 5).eq(0), return_);
            let acc = Var::new("acc", 0.0f32);
            let hits = Var::new("hits", 0u32);
            let missed = Var::new("missed", false);
            for_range(0u32, 40u32, |t| {
                if_then(t.eq(33u32), break_);
                if_then((t % 7u32).eq(3u32), continue_);
                let v = x.load(i + t);
                if_else(
                    v.gt(0.0),
                    || {
                        acc.set(acc.get() + v);
                        hits.set(hits.get() + 1u32);
                    },
                    || missed.set(true),
                );
                acc.set(acc.get() * 0.5);
            });
            let si = i.cast::<i32>() - 6;
            let wrapped = i + 0xFFFF_FFF0u32;
            let bits = Var::new("bits", 0u32);
            let tests = [
                si.lt(bound),
                si.le(bound),
                bound.gt(si),
                bound.ge(si),
                i.lt(ubound),
                ubound.ge(i),
                wrapped.lt(20u32),
                wrapped.le(ubound),
            ];
            for (b, t) in tests.into_iter().enumerate() {
                if_then(t, || bits.set(bits.get() | (1u32 << b as u32)));
            }
            out.store(i, acc.get());
            counts.store(
                i,
                hits.get() + select(missed.get(), 1000u32, 0u32) + (bits.get() << 16u32),
            );
        })
        .unwrap();
        let x: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.73).sin() * 10.0).collect();
        let ids: Vec<i32> = (0..n as i32).map(|i| (i * 13) % 23).collect();
        let (bound, ubound) = (37i32, 503u32);
        for group in [1u32, 3, 10, 64, 256] {
            let mut out = vec![7f32; n as usize];
            let mut counts = vec![5u32; n as usize];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(n.div_ceil(group), group),
                    &mut [
                        LaunchArg::read(&x),
                        LaunchArg::read(&ids),
                        LaunchArg::read_write(&mut out),
                        LaunchArg::read_write(&mut counts),
                        LaunchArg::value(bound),
                        LaunchArg::value(ubound),
                    ],
                )
                .unwrap();
            for i in 0..n {
                let iu = i as usize;
                if ids[iu] % 5 == 0 {
                    assert_eq!((out[iu], counts[iu]), (7.0, 5), "group {group}, item {i}");
                    continue;
                }
                let (mut acc, mut hits, mut missed) = (0f32, 0u32, false);
                for t in (0..33u32).filter(|t| t % 7 != 3) {
                    let v = x.get((i + t) as usize).copied().unwrap_or(0.0);
                    if v > 0.0 {
                        acc += v;
                        hits += 1;
                    } else {
                        missed = true;
                    }
                    acc *= 0.5;
                }
                let si = i as i32 - 6;
                let wrapped = i.wrapping_add(0xFFFF_FFF0);
                let tests = [
                    si < bound,
                    si <= bound,
                    bound > si,
                    bound >= si,
                    i < ubound,
                    ubound >= i,
                    wrapped < 20,
                    wrapped <= ubound,
                ];
                let bits = tests
                    .iter()
                    .enumerate()
                    .fold(0u32, |b, (k, &t)| b | ((t as u32) << k));
                let want = hits + if missed { 1000 } else { 0 } + (bits << 16);
                assert_eq!(out[iu], acc, "group {group}, item {i}");
                assert_eq!(counts[iu], want, "group {group}, item {i}");
            }
        }
    });
}

#[test]
/// A CPU backend limit: a local array lives on the work item's stack.
fn oversized_local_arrays_are_a_compile_error() {
    let ctx = || kiln::Context::with_backend(kiln::BackendKind::Cpu).unwrap();
    {
        let k = Kernel::build("huge", |k| {
            let out = k.buffer::<f32>("out", Access::Write);
            let big = LocalArray::<f32>::new("big", 100_000_000);
            big.set(3u32, 1.0f32);
            out.store(0u32, big.get(3u32));
        })
        .unwrap();
        let mut out = vec![0f32; 1];
        let e = ctx()
            .launch_ir(
                &k,
                &Grid::linear(1, 1),
                &mut [LaunchArg::read_write(&mut out)],
            )
            .unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("backend cpu failed to compile kernel `huge`")
                && text.contains("array local `big`"),
            "{text}"
        );
        match &e {
            kiln::Error::Backend(kiln::BackendError::Compile { source_text, .. }) => assert!(
                source_text.contains("var big: [f32; 100000000]"),
                "the error carries the IR listing: {source_text}"
            ),
            other => panic!("expected a compile error, got {other:?}"),
        }
        let with_barrier = Kernel::build("huge_barrier", |k| {
            let out = k.buffer::<f32>("out", Access::Write);
            let big = LocalArray::<f32>::new("big", 1 << 30);
            big.set(3u32, 1.0f32);
            barrier();
            out.store(0u32, big.get(3u32));
        })
        .unwrap();
        let e = ctx()
            .launch_ir(
                &with_barrier,
                &Grid::linear(1, 1),
                &mut [LaunchArg::read_write(&mut out)],
            )
            .unwrap_err();
        assert!(e.to_string().contains("array local `big`"), "{e}");
    }
}

/// Rounding functions of constant NaN and infinities (a compiler may fold these itself).
#[test]
fn rounding_functions_of_constant_non_finite_values() {
    every_backend(|| {
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0];
        let k = Kernel::build("const_round", |k| {
            let out = k.buffer::<f32>("out", Access::Write);
            let mut j = 0u32;
            for v in specials {
                for f in [
                    Val::<f32>::floor,
                    Val::<f32>::ceil,
                    Val::<f32>::trunc,
                    Val::<f32>::round,
                    Val::<f32>::fract,
                ] {
                    out.store(j, f(lit(v)));
                    j += 1;
                }
            }
        })
        .unwrap();
        let mut out = vec![7f32; 20];
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(1, 1),
                &mut [LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        let mut j = 0;
        for v in specials {
            for (name, f) in [
                ("floor", f32::floor as fn(f32) -> f32),
                ("ceil", f32::ceil),
                ("trunc", f32::trunc),
                ("round", f32::round),
                ("fract", |x: f32| x - x.trunc()),
            ] {
                let want = f(v);
                assert!(
                    out[j].to_bits() == want.to_bits() || (out[j].is_nan() && want.is_nan()),
                    "{name}({v}) = {}, want {want}",
                    out[j]
                );
                j += 1;
            }
        }
    });
}

#[test]
fn reading_a_struct_field_as_the_wrong_type_is_a_build_error() {
    let e = Kernel::build("wrong_field", |k| {
        let ps = k.buffer::<Particle>("ps", Access::Read);
        let out = k.buffer::<f32>("out", Access::Write);
        out.store(0u32, ps.load(0u32).field::<f32>(0));
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("field `pos` of `Particle` is vec2<f32>, read as f32"),
        "{e}"
    );
    let e = Kernel::build("no_field", |k| {
        let ps = k.buffer::<Particle>("ps", Access::Read);
        let out = k.buffer::<u32>("out", Access::Write);
        out.store(0u32, ps.load(0u32).field::<u32>(7));
    })
    .unwrap_err();
    assert!(e.to_string().contains("`Particle` has no field 7"), "{e}");
}

/// Two dynamic shared arrays of different element sizes (u8 then f64) around a static one:
/// each gets its own storage, aligned for its type, on every backend (CUDA places them in one
/// extern array at 16-byte boundaries).
#[test]
fn several_dynamic_shared_arrays_keep_their_own_storage() {
    every_backend(|| {
        if !has_f64() {
            return;
        }
        let k = Kernel::build("two_dynamic_tiles", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let out = k.buffer::<f64>("out", Access::Write);
            let bytes = k.shared::<u8>("bytes", SharedLen::Dynamic);
            let fixed = k.shared::<u32>("fixed", SharedLen::Static(64));
            let halves = k.shared::<f64>("halves", SharedLen::Dynamic);
            let lid = local_id(Axis::X);
            let v = x.load(global_id(Axis::X));
            bytes.store(lid, v.cast::<u8>());
            fixed.store(lid, v * 3u32);
            halves.store(lid, v.cast::<f64>() * 0.5);
            barrier();
            let j = (lid + 1u32) % group_size(Axis::X);
            out.store(
                global_id(Axis::X),
                bytes.load(j).cast::<f64>() + halves.load(j) + fixed.load(j).cast::<f64>() * 1000.0,
            );
        })
        .unwrap();
        let group = 61u32;
        let groups = 5u32;
        let xs: Vec<u32> = (0..group * groups).map(|i| i * 37 + 200).collect();
        let mut out = vec![0f64; xs.len()];
        let mut grid = Grid::linear(groups, group);
        grid.dynamic_shared = vec![group, group];
        ctx()
            .launch_ir(
                &k,
                &grid,
                &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        for (i, got) in out.iter().enumerate() {
            let g = i / group as usize;
            let j = g * group as usize + (i % group as usize + 1) % group as usize;
            let v = xs[j];
            let want = (v as u8) as f64 + v as f64 * 0.5 + (v * 3) as f64 * 1000.0;
            assert_eq!(*got, want, "item {i}");
        }
    });
}

/// A group asking for more shared memory than the device reports is an `OutOfMemory` error
/// naming the backend, on every backend, and the context keeps working.
#[test]
fn shared_memory_beyond_the_device_limit_is_a_typed_error() {
    every_backend(|| {
        let k = Kernel::build("shared_echo", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let out = k.buffer::<u32>("out", Access::Write);
            let tile = k.shared::<u32>("tile", SharedLen::Dynamic);
            let lid = local_id(Axis::X);
            tile.store(lid, x.load(global_id(Axis::X)) + 1u32);
            barrier();
            let j = (lid + 1u32) % group_size(Axis::X);
            out.store(global_id(Axis::X), tile.load(j));
        })
        .unwrap();
        let c = ctx();
        let device = c.device();
        let xs: Vec<u32> = (0..64).collect();
        let mut out = vec![0u32; 64];
        let mut grid = Grid::linear(2, 32);
        let too_many = (device.max_shared_bytes / 4 + 1) as u32;
        grid.dynamic_shared = vec![too_many];
        match c.launch_ir(
            &k,
            &grid,
            &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
        ) {
            Err(kiln::Error::Backend(kiln::BackendError::OutOfMemory {
                backend, bytes, ..
            })) => {
                assert_eq!(backend, device.backend);
                assert!(bytes > device.max_shared_bytes, "{bytes}");
            }
            other => panic!(
                "expected OutOfMemory for {} shared bytes, got {other:?}",
                too_many as u64 * 4
            ),
        }
        grid.dynamic_shared = vec![32];
        c.launch_ir(
            &k,
            &grid,
            &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
        )
        .unwrap();
        let want: Vec<u32> = (0..64u32)
            .map(|i| (i / 32) * 32 + (i + 1) % 32 + 1)
            .collect();
        assert_eq!(out, want);
    });
}

/// Locals around barriers in a loop: one accumulated over the passes, one assigned before a
/// barrier and read after it, one assigned and read between two barriers, and one assigned
/// inside an `if` between them; every work item keeps its own values.
#[test]
fn locals_in_a_loop_with_barriers_keep_their_values_per_work_item() {
    every_backend(|| {
        let group = 32u32;
        let k = Kernel::build("passes", |k| {
            let x = k.buffer::<u32>("x", Access::Read);
            let out = k.buffer::<u32>("out", Access::Write);
            let tile = k.shared::<u32>("tile", SharedLen::Static(group));
            let lid = local_id(Axis::X);
            let gid = global_id(Axis::X);
            let total = Var::new("total", 0u32);
            let round = Var::new("round", 0u32);
            loop_(|| {
                if_then(round.get().ge(4u32), break_);
                let fresh = Var::new("fresh", x.load(gid) * (round.get() + 1u32));
                tile.store(lid, fresh.get());
                barrier();
                let next = tile.load((lid + 1u32) % group);
                let tmp = Var::new("tmp", next + fresh.get());
                if_then((next % 2u32).eq(0u32), || {
                    let bonus = Var::new("bonus", round.get() * 100u32);
                    tmp.set(tmp.get() + bonus.get() + 1u32);
                });
                total.set(total.get() + tmp.get());
                out.store(gid * 4u32 + round.get(), total.get());
                barrier();
                round.set(round.get() + 1u32);
            });
        })
        .unwrap();
        let groups = 3u32;
        let xs: Vec<u32> = (0..group * groups).map(|i| (i * 7 + 3) % 19).collect();
        let mut out = vec![0u32; xs.len() * 4];
        ctx()
            .launch_ir(
                &k,
                &Grid::linear(groups, group),
                &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
            )
            .unwrap();
        let g = group as usize;
        for i in 0..xs.len() {
            let neighbour = (i / g) * g + (i % g + 1) % g;
            let mut total = 0u32;
            for r in 0..4u32 {
                let fresh = xs[i] * (r + 1);
                let next = xs[neighbour] * (r + 1);
                let mut tmp = next + fresh;
                if next.is_multiple_of(2) {
                    tmp += r * 100 + 1;
                }
                total += tmp;
                assert_eq!(out[i * 4 + r as usize], total, "item {i}, pass {r}");
            }
        }
    });
}

#[test]
fn barrier_runs_in_quads_and_one_item_at_a_time_share_private_values() {
    // On the CPU the runs between barriers that only do 32-bit arithmetic and contiguous
    // loads run four work items at a time; the run with an atomic runs one at a time, and so
    // do the work items of a group's last partial quad. Private values cross between them:
    // a varying local, a uniform local, a varying and a uniform value and the loop counter.
    every_backend(|| {
        for group in [5u32, 12, 30, 64] {
            let k = Kernel::build("quad_runs", |k| {
                let x = k.buffer::<u32>("x", Access::Read);
                let out = k.buffer::<u32>("out", Access::ReadWrite);
                let hits = k.buffer::<u32>("hits", Access::ReadWrite);
                let tile = k.shared::<u32>("tile", SharedLen::Static(group));
                let lid = local_id(Axis::X);
                let gid = global_id(Axis::X);
                let mine = Var::new("mine", x.load(gid) * 3u32);
                let scale = Var::new("scale", group_id(Axis::X) * 2u32 + 1u32);
                let plus = x.load(gid) + 1u32;
                let first = x.load(group_id(Axis::X) * group_size(Axis::X));
                let round = Var::new("round", 0u32);
                loop_(|| {
                    if_then(round.get().ge(3u32), break_);
                    tile.store(lid, mine.get() + round.get());
                    barrier();
                    // The last work item reads past the tile: zero.
                    let next = tile.load(lid + 1u32);
                    mine.set(mine.get() + next * scale.get() + plus - first);
                    barrier();
                    let seen = hits.atomic_add(gid, 1u32);
                    let odd = (x.load(gid) & 1u32).eq(1u32);
                    let bias = select(odd, 7u32, 0u32) + (scale.get() ^ first);
                    mine.set(mine.get() / 2u32 + seen + bias);
                    scale.set(scale.get() + 1u32);
                    barrier();
                    round.set(round.get() + 1u32);
                });
                out.store(gid, mine.get() ^ (scale.get() << 24u32));
            })
            .unwrap();
            let groups = 3u32;
            let n = (group * groups) as usize;
            let xs: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2654435761) >> 7)
                .collect();
            let mut out = vec![0u32; n];
            let mut hits = vec![0u32; n];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear(groups, group),
                    &mut [
                        LaunchArg::read(&xs),
                        LaunchArg::read_write(&mut out),
                        LaunchArg::read_write(&mut hits),
                    ],
                )
                .unwrap();
            let g = group as usize;
            for base in (0..n).step_by(g) {
                let x = &xs[base..base + g];
                let mut mine: Vec<u32> = x.iter().map(|v| v.wrapping_mul(3)).collect();
                let mut scale = (base / g) as u32 * 2 + 1;
                for round in 0..3u32 {
                    let tile: Vec<u32> = mine.iter().map(|m| m.wrapping_add(round)).collect();
                    for l in 0..g {
                        let next = tile.get(l + 1).copied().unwrap_or(0);
                        let plus = x[l].wrapping_add(1);
                        mine[l] = mine[l]
                            .wrapping_add(next.wrapping_mul(scale))
                            .wrapping_add(plus)
                            .wrapping_sub(x[0]);
                        let bias = if x[l] & 1 == 1 { 7u32 } else { 0 }.wrapping_add(scale ^ x[0]);
                        mine[l] = (mine[l] / 2).wrapping_add(round).wrapping_add(bias);
                    }
                    scale += 1;
                }
                for l in 0..g {
                    let want = mine[l] ^ (scale << 24);
                    assert_eq!(out[base + l], want, "group size {group}, item {}", base + l);
                    assert_eq!(hits[base + l], 3, "group size {group}, item {}", base + l);
                }
            }
        }
    });
}

#[test]
fn counted_loops_with_constant_bounds_give_per_item_results() {
    // The CPU backend unrolls loops with constant bounds: up to 4 trips completely, more in
    // passes of 4 or 2 copies when that divides their number, other counts not at all. With
    // `varying_break` some work items leave a loop early, so the kernel runs one work item
    // at a time there; without it, four at a time.
    every_backend(|| {
        for varying_break in [false, true] {
            let k = Kernel::build("counted", |k| {
                let x = k.buffer::<u32>("x", Access::Read);
                let out = k.buffer::<u32>("out", Access::ReadWrite);
                let i = global_id(Axis::X);
                if_then(i.ge(x.len()), return_);
                let xi = x.load(i);
                let acc = Var::new("acc", 0u32);
                for_range(0u32, 3u32, |t| acc.set(acc.get() * 3u32 + t + xi));
                for_range_step(-7i32, 9i32, 3i32, |t| {
                    if_then(t.eq(2i32), continue_);
                    acc.set(acc.get() + (t * t).cast::<u32>());
                });
                for_range(0u32, 12u32, |t| {
                    let stop = if varying_break { xi % 16u32 } else { lit(9u32) };
                    if_then(t.gt(stop), break_);
                    acc.set(acc.get() ^ (t << 2u32));
                });
                for_range(0u32, 5u32, |t| acc.set(acc.get() + t * xi));
                for_range(0u32, 4u32, |a| {
                    for_range(0u32, 8u32, |b| acc.set(acc.get() + a * b + (xi & b)));
                });
                // Starts at a value that differs per work item: not a counted loop.
                for_range(i % 3u32, 6u32, |t| acc.set(acc.get() + t));
                out.store(i, acc.get());
            })
            .unwrap();
            let n = 203u32;
            let xs: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2654435761) >> 9).collect();
            for group in [1u32, 7, 64] {
                let mut out = vec![0u32; n as usize];
                ctx()
                    .launch_ir(
                        &k,
                        &Grid::linear(n.div_ceil(group), group),
                        &mut [LaunchArg::read(&xs), LaunchArg::read_write(&mut out)],
                    )
                    .unwrap();
                for (i, &xi) in xs.iter().enumerate() {
                    let mut acc = 0u32;
                    for t in 0..3u32 {
                        acc = acc.wrapping_mul(3).wrapping_add(t).wrapping_add(xi);
                    }
                    for t in (-7i32..9).step_by(3).filter(|t| *t != 2) {
                        acc = acc.wrapping_add((t * t) as u32);
                    }
                    let stop = if varying_break { xi % 16 } else { 9 };
                    for t in (0..12u32).take_while(|t| *t <= stop) {
                        acc ^= t << 2;
                    }
                    for t in 0..5u32 {
                        acc = acc.wrapping_add(t.wrapping_mul(xi));
                    }
                    for a in 0..4u32 {
                        for b in 0..8u32 {
                            acc = acc.wrapping_add(a * b + (xi & b));
                        }
                    }
                    for t in (i as u32 % 3)..6 {
                        acc = acc.wrapping_add(t);
                    }
                    assert_eq!(
                        out[i], acc,
                        "varying break {varying_break}, group {group}, item {i}"
                    );
                }
            }
        }
    });
}

#[test]
fn locals_start_at_zero_in_every_work_item() {
    // The IR's locals are zero at function entry, in each work item. The builder's `Var::new`
    // always sets one first, so that set is taken out: work items whose condition fails read
    // the zero, never a value another work item (the one before it in a vector, or in the
    // previous quads of an unrolled loop) left behind. Loop-free and guarded by the output's
    // length, as the CPU backend's fastest path wants.
    every_backend(|| {
        let mut k = Kernel::build("fresh_locals", |k| {
            let out = k.buffer::<u32>("out", Access::ReadWrite);
            let i = global_id(Axis::X);
            let v = Var::new("v", 0u32);
            if_then(i.lt(out.len()), || {
                if_then((i % 3u32).eq(0u32), || v.set(i + 1u32));
                out.store(i, v.get());
            });
        })
        .unwrap();
        let first_set = k
            .body
            .block
            .0
            .iter()
            .position(|s| matches!(s, Stmt::LocalSet { .. }))
            .expect("the builder sets the local first");
        k.body.block.0.remove(first_set);
        for n in [1000usize, 4099] {
            let mut out = vec![7u32; n];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear((n as u32).div_ceil(256), 256),
                    &mut [LaunchArg::read_write(&mut out)],
                )
                .unwrap();
            let want: Vec<u32> = (0..n as u32)
                .map(|i| if i % 3 == 0 { i + 1 } else { 0 })
                .collect();
            assert_eq!(out, want, "n = {n}");
        }
    });
}

/// `for t in start..end` with ends known only at run time, from empty ranges to ones ending at
/// `u32::MAX` and `i32::MAX` or starting at `i32::MIN`, with a `continue` and a `break` inside:
/// every backend runs exactly the trips a plain loop runs (none wraps past the end).
#[test]
fn loops_with_run_time_ends_run_every_trip_up_to_the_integer_limits() {
    const M: u32 = u32::MAX;
    let unsigned: [(u32, u32, u32); 14] = [
        (0, 0, M),
        (0, 1, M),
        (0, 3, M),
        (0, 4, M),
        (0, 5, M),
        (0, 8, M),
        (0, 9, 6),
        (2, 100, M),
        (10, 3, M),
        (M - 6, M, M),
        (M - 4, M, M - 2),
        (M - 3, M, M),
        (M - 1, M, M),
        (M - 9, M - 2, M),
    ];
    let signed: [(i32, i32); 7] = [
        (-5, 3),
        (i32::MIN, i32::MIN + 6),
        (i32::MAX - 5, i32::MAX),
        (i32::MAX - 1, i32::MAX),
        (3, -3),
        (-1, 0),
        (-40, 40),
    ];
    let cases = unsigned.len() * signed.len();
    every_backend(|| {
        let k = Kernel::build("run_time_ends", |k| {
            let ranges = k.buffer::<u32>("ranges", Access::Read);
            let sranges = k.buffer::<i32>("sranges", Access::Read);
            let out = k.buffer::<u32>("out", Access::ReadWrite);
            let i = global_id(Axis::X);
            if_then(i.ge(out.len() / 4), return_);
            let (u, s) = (i % unsigned.len() as u32, i / unsigned.len() as u32);
            let (start, end, stop) = (
                ranges.load(u * 3),
                ranges.load(u * 3 + 1),
                ranges.load(u * 3 + 2),
            );
            let (acc, trips) = (Var::new("acc", 1u32), Var::new("trips", 0u32));
            for_range(start, end, |t| {
                if_then(t.eq(stop), break_);
                trips.set(trips.get() + 1u32);
                if_then((t % 3u32).eq(1u32), continue_);
                acc.set(acc.get() * 31u32 + t);
            });
            let (sacc, strips) = (Var::new("sacc", 7i32), Var::new("strips", 0u32));
            for_range(sranges.load(s * 2), sranges.load(s * 2 + 1), |t| {
                strips.set(strips.get() + 1u32);
                sacc.set(sacc.get() * 17i32 - t);
            });
            out.store(i * 4, acc.get());
            out.store(i * 4 + 1, trips.get());
            out.store(i * 4 + 2, sacc.get().cast::<u32>());
            out.store(i * 4 + 3, strips.get());
        })
        .unwrap();
        let ranges: Vec<u32> = unsigned.iter().flat_map(|&(a, b, c)| [a, b, c]).collect();
        let sranges: Vec<i32> = signed.iter().flat_map(|&(a, b)| [a, b]).collect();
        let mut want = Vec::new();
        for i in 0..cases {
            let (start, end, stop) = unsigned[i % unsigned.len()];
            let (mut acc, mut trips) = (1u32, 0u32);
            for t in start as u64..end as u64 {
                let t = t as u32;
                if t == stop {
                    break;
                }
                trips += 1;
                if t % 3 != 1 {
                    acc = acc.wrapping_mul(31).wrapping_add(t);
                }
            }
            let (a, b) = signed[i / unsigned.len()];
            let (mut sacc, mut strips) = (7i32, 0u32);
            for t in a as i64..b as i64 {
                strips += 1;
                sacc = sacc.wrapping_mul(17).wrapping_sub(t as i32);
            }
            want.extend([acc, trips, sacc as u32, strips]);
        }
        for group in [1u32, 3, 64] {
            let mut out = vec![0u32; cases * 4];
            ctx()
                .launch_ir(
                    &k,
                    &Grid::linear((cases as u32).div_ceil(group), group),
                    &mut [
                        LaunchArg::read(&ranges),
                        LaunchArg::read(&sranges),
                        LaunchArg::read_write(&mut out),
                    ],
                )
                .unwrap();
            for (i, (got, want)) in out.chunks(4).zip(want.chunks(4)).enumerate() {
                assert_eq!(
                    got,
                    want,
                    "group {group}, item {i}: {:?} and {:?}",
                    unsigned[i % unsigned.len()],
                    signed[i / unsigned.len()]
                );
            }
        }
    });
}

/// Names the target languages reserve or define, and names that renaming them would produce,
/// all in one kernel (named after an OpenCL vector type): every backend compiles and runs it.
/// Names given twice are a validation error.
#[test]
fn reserved_and_colliding_names_compile_on_every_backend() {
    let names = [
        "float",
        "float_",
        "int",
        "int_",
        "NAN",
        "INFINITY",
        "M_PI",
        "var",
        "var_",
        "loop",
        "kiln_const0",
        "x_len",
        "threadIdx",
        "kernel",
        "global",
        "fn",
    ];
    let k = Kernel::build("float4", |k| {
        let out = k.buffer::<u32>("out", Access::Write);
        let ins: Vec<Val<u32>> = names.iter().map(|n| k.value::<u32>(n)).collect();
        let i = global_id(Axis::X);
        let mut v = lit(0u32);
        for (j, x) in ins.into_iter().enumerate() {
            v = v + x * (j as u32 + 1);
        }
        if_then(i.lt(out.len()), || out.store(i, v));
    })
    .unwrap();
    every_backend(|| {
        let mut out = vec![0u32; 3];
        let mut args = vec![LaunchArg::read_write(&mut out)];
        args.extend((0..names.len() as u32).map(|j| LaunchArg::value(j * 10)));
        ctx().launch_ir(&k, &Grid::linear(1, 3), &mut args).unwrap();
        let want: u32 = (0..names.len() as u32).map(|j| j * 10 * (j + 1)).sum();
        assert_eq!(out, vec![want; 3]);
    });
    let twice = Kernel::build("twice", |k| {
        let _ = k.value::<u32>("a");
        let _ = k.buffer::<u32>("a", Access::Read);
    });
    match twice {
        Err(e) => assert!(
            e.to_string()
                .contains("the name `a` is given to a parameter and to a parameter"),
            "{e}"
        ),
        Ok(_) => panic!("two parameters named `a` were accepted"),
    }
    let shared = Kernel::build("shared_twice", |k| {
        let _ = k.value::<u32>("tile");
        let _ = k.shared::<u32>("tile", SharedLen::Static(4));
    });
    assert!(
        shared.is_err(),
        "a parameter and a shared array named `tile` were accepted"
    );
}
