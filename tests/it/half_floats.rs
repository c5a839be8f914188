//! `f16` (`half::f16`, re-exported as `kiln::f16`) as a kernel and query element type on every
//! backend: every conversion against the `half` crate's (all 65536 bit patterns one way,
//! exact ties, their neighbours and the overflow edge the other), arithmetic and math rounded
//! after each operation as `half::f16`'s operators round, queries (map, filter, sort, min,
//! max, sum, group_by) against the same code on the host, and structs with `f16` fields.

use crate::common::{ctx, cuda_check_kernel, every_backend, has_f64, spread, translation_check};
use kiln::f16;
use kiln::lang::*;

#[kiln::kernel]
fn widen(i: Index1D, h: View<f16>, out: ViewMut<f32>) {
    out[i] = h[i] as f32;
}

#[kiln::kernel]
fn narrow(i: Index1D, x: View<f32>, out: ViewMut<f16>) {
    out[i] = x[i] as f16;
}

#[kiln::kernel]
fn narrow_f64(i: Index1D, x: View<f64>, out: ViewMut<f16>) {
    out[i] = x[i] as f16;
}

#[kiln::kernel]
fn from_ints(i: Index1D, x: View<i32>, h: ViewMut<f16>, back: ViewMut<i32>) {
    let v = x[i] as f16;
    h[i] = v;
    back[i] = v as i32;
}

#[kiln::kernel]
fn bits(i: Index1D, h: View<f16>, out: ViewMut<u16>, again: ViewMut<f16>) {
    let b = h[i].bitcast::<u16>();
    out[i] = b;
    again[i] = b.bitcast::<f16>();
}

/// Several operations, each rounded: the host computes the same expression with
/// `half::f16`'s operators.
#[kiln::kernel]
fn arithmetic(i: Index1D, a: View<f16>, b: View<f16>, out: ViewMut<f16>, k: f16) {
    let (x, y) = (a[i], b[i]);
    let n = i * 6u32;
    out[n] = x + y;
    out[n + 1u32] = x * y - x;
    out[n + 2u32] = x / y;
    out[n + 3u32] = x * k + (0.1 as f16);
    out[n + 4u32] = -x % y;
    out[n + 5u32] = if x < y { x } else { y * f16::from_f32(3.0) };
}

/// Math functions: the `f32` function of the widened arguments, rounded once.
#[kiln::kernel]
fn math(i: Index1D, a: View<f16>, b: View<f16>, out: ViewMut<f16>, flags: ViewMut<u32>) {
    let (x, y) = (a[i], b[i]);
    let n = i * 7u32;
    out[n] = x.abs().sqrt();
    out[n + 1u32] = x.floor();
    out[n + 2u32] = x.max(y);
    out[n + 3u32] = x.min(y);
    out[n + 4u32] = x.mul_add(y, x);
    out[n + 5u32] = x.copysign(y);
    out[n + 6u32] = x.exp2();
    flags[i] = (x.is_nan() as u32) | ((x.is_infinite() as u32) << 1u32);
}

#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Sample {
    level: f16,
    tag: u16,
    weight: f32,
}

#[kiln::kernel]
fn louder(i: Index1D, s: ViewMut<Sample>) {
    let v = s[i];
    s[i] = Sample {
        level: v.level * f16::from_f32(1.5),
        tag: v.tag + 1u16,
        weight: v.weight + (v.level as f32),
    };
}

/// `d` rounded once to the nearest f16, ties to even. (`f16::from_f64` rounds on the top 32
/// bits of `d`, so just past a tie it can give the other neighbour.)
fn f16_of_f64(d: f64) -> f16 {
    if d.is_nan() || d.abs() >= 65520.0 {
        return f16::from_f64(d);
    }
    let (m, sign) = (d.abs(), if d.is_sign_negative() { 0x8000 } else { 0 });
    let value = |b: u16| f16::from_bits(b).to_f64();
    // The largest f16 at most `m`, then the nearer of it and the next.
    let mut lo = f16::from_f64(m).to_bits();
    while value(lo) > m {
        lo -= 1;
    }
    while value(lo + 1) <= m {
        lo += 1;
    }
    let (below, above) = (m - value(lo), value(lo + 1) - m);
    let bits = if below < above || (below == above && lo.is_multiple_of(2)) {
        lo
    } else {
        lo + 1
    };
    f16::from_bits(bits | sign)
}

fn h(x: f32) -> f16 {
    f16::from_f32(x)
}

/// The same value, NaN matching any NaN.
fn same16(a: f16, b: f16) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn same32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn check16(got: &[f16], want: &[f16], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            same16(*g, *w),
            "{what}[{k}]: got {g} ({:#06x}), want {w} ({:#06x})",
            g.to_bits(),
            w.to_bits()
        );
    }
}

/// Every f16, both signs: zeros, subnormals, normals, the largest, infinities and NaNs.
fn all_halves() -> Vec<f16> {
    (0..=u16::MAX).map(f16::from_bits).collect()
}

/// f32 values that test rounding to f16: every f16 value, the exact midpoints between
/// neighbouring f16 values (ties) and the f32s on either side of each, the overflow edge
/// (65504, 65520 and around), values below the smallest subnormal, and spread bit patterns.
fn rounding_cases() -> Vec<f32> {
    let mut xs = Vec::new();
    for b in 0..0x7c00u16 {
        let lo = f16::from_bits(b).to_f32();
        let hi = f16::from_bits(b + 1).to_f32();
        let mid = (lo + hi) / 2.0;
        for v in [
            lo,
            mid,
            f32::from_bits(mid.to_bits() - 1),
            f32::from_bits(mid.to_bits() + 1),
        ] {
            xs.extend([v, -v]);
        }
    }
    xs.extend([
        65504.0f32,
        65519.996,
        65520.0,
        65536.0,
        1e9,
        f32::MAX,
        f32::INFINITY,
    ]);
    xs.extend([
        2.98e-8f32,
        2.9802322e-8,
        2.9802326e-8,
        1e-30,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    xs.extend([f32::NAN, -f32::NAN, f32::NEG_INFINITY, -65520.0]);
    xs.extend((0..100_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761))));
    xs
}

#[test]
fn conversions_match_the_half_crate() {
    every_backend(|| {
        let c = ctx();
        let hs = all_halves();
        let mut wide = vec![0f32; hs.len()];
        c.launch(widen, hs.len(), (&hs[..], &mut wide)).unwrap();
        for (x, w) in hs.iter().zip(&wide) {
            assert!(same32(*w, x.to_f32()), "{:#06x} as f32: {w}", x.to_bits());
        }
        let xs = rounding_cases();
        let mut out = vec![f16::ZERO; xs.len()];
        c.launch(narrow, xs.len(), (&xs[..], &mut out)).unwrap();
        let want: Vec<f16> = xs.iter().map(|x| f16::from_f32(*x)).collect();
        check16(&out, &want, "f32 as f16");

        let ints: Vec<i32> = [
            0,
            1,
            -1,
            2047,
            2049,
            4097,
            65504,
            65519,
            65520,
            -70000,
            i32::MAX,
            i32::MIN,
        ]
        .into_iter()
        .chain((0..3000).map(|i| spread(i, 140_000) as i32 - 70_000))
        .collect();
        let mut hs = vec![f16::ZERO; ints.len()];
        let mut back = vec![0i32; ints.len()];
        c.launch(from_ints, ints.len(), (&ints[..], &mut hs, &mut back))
            .unwrap();
        let want: Vec<f16> = ints.iter().map(|i| f16_of_f64(*i as f64)).collect();
        check16(&hs, &want, "i32 as f16");
        let want_back: Vec<i32> = want.iter().map(|h| h.to_f32() as i32).collect();
        assert_eq!(back, want_back, "f16 as i32 (saturating)");

        let all = all_halves();
        let mut b = vec![0u16; all.len()];
        let mut again = vec![f16::ZERO; all.len()];
        c.launch(bits, all.len(), (&all[..], &mut b, &mut again))
            .unwrap();
        for (k, x) in all.iter().enumerate() {
            if !x.is_nan() {
                assert_eq!(b[k], x.to_bits(), "to_bits of {x}");
                assert_eq!(again[k].to_bits(), x.to_bits(), "from_bits of {x}");
            } else {
                assert!(
                    f16::from_bits(b[k]).is_nan() && again[k].is_nan(),
                    "NaN {:#06x}",
                    x.to_bits()
                );
            }
        }

        if has_f64() {
            // f64 values just past an f16 tie that an f32 step would round onto the tie.
            let mut ds = Vec::new();
            for b in (0..0x7bffu16).step_by(7) {
                let (lo, hi) = (f16::from_bits(b).to_f64(), f16::from_bits(b + 1).to_f64());
                let mid = (lo + hi) / 2.0;
                ds.extend([
                    mid,
                    mid + mid * 1e-12,
                    mid - mid * 1e-12,
                    -(mid + mid * 1e-12),
                ]);
            }
            ds.extend([
                65519.99999,
                65520.0,
                1e300,
                f64::NAN,
                f64::INFINITY,
                5.960464477539063e-8 / 2.0 + 1e-20,
            ]);
            let mut out = vec![f16::ZERO; ds.len()];
            c.launch(narrow_f64, ds.len(), (&ds[..], &mut out)).unwrap();
            let want: Vec<f16> = ds.iter().map(|d| f16_of_f64(*d)).collect();
            check16(&out, &want, "f64 as f16");
        }
    });
}

/// Operands: specials, subnormals, values near overflow, and a spread of ordinary ones.
fn operands(n: u32, salt: u32) -> Vec<f16> {
    let special = [
        f16::NAN,
        f16::INFINITY,
        f16::NEG_INFINITY,
        f16::ZERO,
        f16::NEG_ZERO,
        f16::from_bits(1),
        f16::from_bits(0x83ff),
        f16::MAX,
        f16::MIN,
        h(0.1),
    ];
    (0..n)
        .map(|i| match i as usize {
            k if k < special.len() && salt == 0 => special[k],
            _ => f16::from_bits(
                spread(i + salt * 7919, 0x7c00) as u16 | (((i ^ salt) & 1) << 15) as u16,
            ),
        })
        .collect()
}

#[test]
fn arithmetic_and_math_round_like_half() {
    every_backend(|| {
        let c = ctx();
        let n = 1001;
        let (a, b) = (operands(n, 0), operands(n, 3));
        let k = h(-2.75);
        let mut out = vec![f16::ZERO; n as usize * 6];
        c.launch(arithmetic, n as usize, (&a[..], &b[..], &mut out, k))
            .unwrap();
        let mut want = Vec::new();
        for (&x, &y) in a.iter().zip(&b) {
            want.extend([
                x + y,
                x * y - x,
                x / y,
                x * k + f16_of_f64(0.1),
                -x % y,
                if x < y { x } else { y * h(3.0) },
            ]);
        }
        check16(&out, &want, "arithmetic");

        let mut out = vec![f16::ZERO; n as usize * 7];
        let mut flags = vec![0u32; n as usize];
        c.launch(math, n as usize, (&a[..], &b[..], &mut out, &mut flags))
            .unwrap();
        let mut want = Vec::new();
        let mut want_flags = Vec::new();
        for (&x, &y) in a.iter().zip(&b) {
            let (xf, yf) = (x.to_f32(), y.to_f32());
            want.extend([
                h(xf.abs().sqrt()),
                h(xf.floor()),
                h(xf.max(yf)),
                h(xf.min(yf)),
                h(xf.mul_add(yf, xf)),
                h(xf.copysign(yf)),
                h(xf.exp2()),
            ]);
            want_flags.push(x.is_nan() as u32 | (x.is_infinite() as u32) << 1);
        }
        // exp2 is the backend's f32 exp2, within its own error bound before the rounding to
        // f16; every other result is exact.
        for (k, (g, w)) in out.iter().zip(&want).enumerate() {
            let close = k % 7 == 6 && (g.to_f32() - w.to_f32()).abs() <= w.to_f32().abs() * 1e-3;
            assert!(
                same16(*g, *w) || close,
                "math[{k}] ({}): got {g}, want {w}",
                k % 7
            );
        }
        assert_eq!(flags, want_flags, "is_nan, is_infinite");
    });
}

#[test]
fn generated_code_compiles_everywhere() {
    for k in [
        widen().ir().unwrap(),
        narrow().ir().unwrap(),
        narrow_f64().ir().unwrap(),
        arithmetic().ir().unwrap(),
        math().ir().unwrap(),
        louder().ir().unwrap(),
    ] {
        cuda_check_kernel(&k);
        translation_check(&k);
    }
}

#[test]
fn queries_over_f16_match_plain_rust() {
    every_backend(|| {
        let c = ctx();
        for n in [0usize, 1, 7, 1000, 40_001] {
            let xs: Vec<f16> = (0..n as u32)
                .map(|i| h(spread(i, 2000) as f32 * 0.125 - 100.0))
                .collect();
            let at = format!("n={n}");
            let got = c
                .from(&xs)
                .map(|x| x * h(1.5) - h(0.3))
                .filter(|x| x.gt(f16::ZERO))
                .to_vec()
                .unwrap();
            let want: Vec<f16> = xs
                .iter()
                .map(|x| *x * h(1.5) - h(0.3))
                .filter(|x| *x > f16::ZERO)
                .collect();
            check16(&got, &want, &at);
            let mut sorted = xs.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            check16(&c.from(&xs).sort().to_vec().unwrap(), &sorted, &at);
            let desc = c.from(&xs).sort_by_key_desc(|x| x).to_vec().unwrap();
            sorted.reverse();
            check16(&desc, &sorted, &at);
            let top = c.from(&xs).top_k(5).unwrap();
            check16(&top, &sorted[..n.min(5)], &format!("top_k, {at}"));
            let bottom = c.from(&xs).bottom_k(5).unwrap();
            let ascending: Vec<f16> = sorted.iter().rev().copied().collect();
            check16(&bottom, &ascending[..n.min(5)], &format!("bottom_k, {at}"));
            let max = xs.iter().copied().reduce(f16::max);
            let min = xs.iter().copied().reduce(f16::min);
            assert_eq!(c.from(&xs).max().unwrap(), max, "{at}");
            assert_eq!(c.from(&xs).min().unwrap(), min, "{at}");
            // Multiples of 1/8 below 2048 in total: every partial sum is exact in f16, so any
            // order of addition gives the host's sequential sum.
            let small: Vec<f16> = (0..n as u32)
                .map(|i| h((spread(i, 3) as f32) * 0.125))
                .collect();
            let total = small.iter().take(2000).fold(f16::ZERO, |a, b| a + *b);
            assert_eq!(c.from(&small[..n.min(2000)]).sum().unwrap(), total, "{at}");
            let widened: f32 = xs.iter().map(|x| x.to_f32()).sum();
            let got: f32 = c.from(&xs).map(|x| x.cast::<f32>()).sum().unwrap();
            assert!(
                (got - widened).abs() <= 1e-3 * (1.0 + widened.abs()),
                "{at}: {got} vs {widened}"
            );
            let groups = c
                .from(&xs)
                .group_by(|x| (x.cast::<f32>() / 50.0).floor().cast::<i32>())
                .count()
                .unwrap();
            let mut want = std::collections::BTreeMap::new();
            for x in &xs {
                *want
                    .entry((x.to_f32() / 50.0).floor() as i32)
                    .or_insert(0usize) += 1;
            }
            let got: std::collections::BTreeMap<i32, usize> = groups.into_iter().collect();
            assert_eq!(got, want, "{at}");
        }
    });
}

#[test]
fn structs_with_f16_fields() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<Sample> = (0..777u32)
            .map(|i| Sample {
                level: h(spread(i, 4000) as f32 * 0.01 - 20.0),
                tag: i as u16,
                weight: i as f32 * 0.5,
            })
            .collect();
        let b = c.upload(&xs).unwrap();
        c.launch(louder, xs.len(), (&b,)).unwrap();
        let want: Vec<Sample> = xs
            .iter()
            .map(|s| Sample {
                level: s.level * h(1.5),
                tag: s.tag + 1,
                weight: s.weight + s.level.to_f32(),
            })
            .collect();
        assert_eq!(b.download().unwrap(), want);
        let loud = c
            .from(&xs)
            .filter(|s| s.level.gt(h(10.0)))
            .map(|s| s.tag)
            .to_vec()
            .unwrap();
        let want: Vec<u16> = xs
            .iter()
            .filter(|s| s.level > h(10.0))
            .map(|s| s.tag)
            .collect();
        assert_eq!(loud, want);
    });
}
