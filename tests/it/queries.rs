//! The query API end to end, against plain Rust iterator references: every terminal, fusion
//! (kernel counts), order, determinism, edge sizes, NaN/inf, integer extremes and errors.

use crate::common;
use crate::common::{
    ctx, every_backend, every_backend_plan_and_size, has_f64, has_i64, SPECIAL_F32,
};

use kiln::prelude::*;
use kiln::Error;

/// Sizes around the planner's chunk (16384) and lane split, plus tiny ones.
const SIZES: [usize; 9] = [0, 1, 2, 7, 16383, 16384, 16385, 3 * 16384 + 5, 100_003];

fn floats(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 10007) as f32 * 0.37 - 1500.0)
        .collect()
}

fn ints(n: usize) -> Vec<i32> {
    (0..n)
        .map(|i| ((i as i64 * 2_654_435_761) % 2_000_003 - 1_000_000) as i32)
        .collect()
}

fn close(got: f64, want: f64, scale: f64) -> bool {
    (got - want).abs() <= 1e-5 * scale.max(1.0)
}

#[test]
fn the_headline_query_matches_a_plain_loop() {
    every_backend(|| {
        let c = ctx();
        for n in SIZES {
            let xs = floats(n);
            let got = c
                .from(&xs)
                .map(|x| x * 2.0)
                .filter(|x| x.gt(1000.0))
                .map(|x| x + 100.0)
                .sum()
                .unwrap();
            let kept: Vec<f64> = xs
                .iter()
                .map(|x| x * 2.0)
                .filter(|x| *x > 1000.0)
                .map(|x| (x + 100.0) as f64)
                .collect();
            let want: f64 = kept.iter().sum();
            let scale: f64 = kept.iter().map(|v| v.abs()).sum();
            assert!(close(got as f64, want, scale), "n={n}: {got} vs {want}");
        }
    });
}

#[test]
fn map_to_vec_and_filter_to_vec_keep_order() {
    every_backend(|| {
        let c = ctx();
        for n in SIZES {
            let xs = ints(n);
            let mapped = c.from(&xs).map(|x| x * 3 - 1).to_vec().unwrap();
            assert_eq!(
                mapped,
                xs.iter()
                    .map(|x| x.wrapping_mul(3).wrapping_sub(1))
                    .collect::<Vec<_>>(),
                "n={n}"
            );
            let kept = c
                .from(&xs)
                .filter(|x| (x & 7).eq(3).or(x.lt(-900_000)))
                .to_vec()
                .unwrap();
            assert_eq!(
                kept,
                xs.iter()
                    .copied()
                    .filter(|x| (x & 7) == 3 || *x < -900_000)
                    .collect::<Vec<_>>(),
                "n={n}"
            );
            let none = c.from(&xs).filter(|x| x.gt(i32::MAX)).to_vec().unwrap();
            assert!(none.is_empty());
            if has_i64() {
                let all = c
                    .from(&xs)
                    .filter(|x| x.le(i32::MAX))
                    .map(|x| x.cast::<i64>() * 2)
                    .to_vec()
                    .unwrap();
                assert_eq!(all, xs.iter().map(|&x| x as i64 * 2).collect::<Vec<_>>());
            }
            if has_f64() {
                // Two filters around a map that divides by dropped elements too (8-byte values).
                let ds: Vec<f64> = xs.iter().map(|&x| (x % 1000) as f64).collect();
                let chained = c
                    .from(&ds)
                    .filter(|x| x.gt(0.0))
                    .map(|x| 100.0 / x)
                    .filter(|x| x.lt(0.5))
                    .to_vec()
                    .unwrap();
                let want: Vec<f64> = ds
                    .iter()
                    .filter(|&&x| x > 0.0)
                    .map(|&x| 100.0 / x)
                    .filter(|&x| x < 0.5)
                    .collect();
                assert_eq!(chained, want, "n={n}");
            }
        }
    });
}

/// Filters whose later stages run loops take a branch per element in the chunked plan
/// (running the stages on dropped elements would cost more); cheap ones run without branches.
/// Both keep and fold what plain iterators do.
#[test]
fn filters_before_loops_and_before_cheap_maps_agree_with_iterators() {
    use kiln::ir::{for_range, Var};
    let steps = |x: u32| {
        let mut acc = x;
        for _ in 0..x % 5 {
            acc = acc.wrapping_mul(3).wrapping_add(1);
        }
        acc
    };
    every_backend_plan_and_size(&[0, 1, 16385, 100_003], |c, n, at| {
        let xs: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
            .collect();
        let keep = |x: &u32| !x.is_multiple_of(3);
        let looped = || {
            c.from(&xs).filter(|x| (x % 3u32).ne(0u32)).map(|x| {
                let acc = Var::new("acc", x);
                for_range(0u32, x % 5u32, |_| acc.set(acc.get() * 3u32 + 1u32));
                acc.get()
            })
        };
        let want: Vec<u32> = xs.iter().copied().filter(keep).map(steps).collect();
        let got = looped().to_vec().unwrap();
        let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
        assert!(
            got == want,
            "{at} on {}: {} vs {} kept, first difference at {first_diff:?}",
            c.device().name,
            got.len(),
            want.len()
        );
        assert_eq!(looped().count().unwrap(), want.len(), "{at}");
        let total = looped().map(|x| x.cast::<u32>()).sum().unwrap();
        let want_total = want.iter().fold(0u32, |a, &x| a.wrapping_add(x));
        assert_eq!(total, want_total, "{at}");
        let cheap = || {
            c.from(&xs)
                .filter(|x| (x % 3u32).ne(0u32))
                .map(|x| x * 3u32 + 1u32)
        };
        let want: Vec<u32> = xs
            .iter()
            .copied()
            .filter(keep)
            .map(|x| x.wrapping_mul(3).wrapping_add(1))
            .collect();
        assert!(
            cheap().to_vec().unwrap() == want,
            "{at} on {}",
            c.device().name
        );
        assert_eq!(cheap().count().unwrap(), want.len(), "{at}");
        let max = cheap().max().unwrap();
        assert_eq!(max, want.iter().copied().max(), "{at}");
    });
}

/// A filter that keeps every element (which a compiler may see) keeps them in every plan.
#[test]
fn filters_that_keep_everything_keep_everything() {
    every_backend_plan_and_size(&[1, 3, 5000, 70_000], |c, n, at| {
        let xs = ints(n);
        let all = c.from(&xs).filter(|x| x.le(i32::MAX)).to_vec().unwrap();
        assert!(all == xs, "{at} on {}", c.device().name);
        let k = -1_073_741_825i32;
        let shifted = c
            .from(&xs)
            .map(move |x| (x.abs().min(k) >> 3i32) ^ -1i32)
            .filter(|x| x.gt(0i32))
            .to_vec()
            .unwrap();
        let want: Vec<i32> = xs
            .iter()
            .map(|x| (x.wrapping_abs().min(k) >> 3) ^ -1)
            .collect();
        assert!(shifted == want, "{at} on {}", c.device().name);
    });
}

#[test]
fn sum_product_min_max_count_average() {
    every_backend(|| {
        let c = ctx();
        for n in SIZES {
            let xs = ints(n);
            assert_eq!(
                c.from(&xs).sum().unwrap(),
                xs.iter().fold(0i32, |a, b| a.wrapping_add(*b)),
                "n={n}"
            );
            if has_i64() {
                let wide = c.from(&xs).map(|x| x.cast::<i64>()).sum().unwrap();
                assert_eq!(wide, xs.iter().map(|&x| x as i64).sum::<i64>());
                let small: Vec<u64> = xs
                    .iter()
                    .map(|&x| (x.unsigned_abs() % 3 + 1) as u64)
                    .collect();
                assert_eq!(
                    c.from(&small).product().unwrap(),
                    small.iter().fold(1u64, |a, b| a.wrapping_mul(*b))
                );
            }
            let small: Vec<u32> = xs.iter().map(|&x| x.unsigned_abs() % 3 + 1).collect();
            assert_eq!(
                c.from(&small).product().unwrap(),
                small.iter().fold(1u32, |a, b| a.wrapping_mul(*b))
            );
            assert_eq!(c.from(&xs).min().unwrap(), xs.iter().copied().min());
            assert_eq!(c.from(&xs).max().unwrap(), xs.iter().copied().max());
            let evens = c.from(&xs).filter(|x| (x % 2).eq(0)).count().unwrap();
            assert_eq!(evens, xs.iter().filter(|x| *x % 2 == 0).count());
            assert_eq!(c.from(&xs).count().unwrap(), n);
            let avg = c.from(&xs).average().unwrap();
            let want = (n > 0).then(|| xs.iter().map(|&x| x as f64).sum::<f64>() / n as f64);
            // Summed in f32 without f64: within 1e-3 of the mean magnitude.
            let scale = xs.iter().map(|&x| (x as f64).abs()).sum::<f64>() / n.max(1) as f64;
            let bound = if has_f64() {
                1e-6 * want.unwrap_or(0.0).abs().max(1.0)
            } else {
                1e-3 * scale.max(1.0)
            };
            match (avg, want) {
                (Some(a), Some(w)) => assert!((a - w).abs() < bound, "{a} vs {w}"),
                (a, w) => assert_eq!(a, w),
            }
            let fs = floats(n);
            let s = c.from(&fs).sum().unwrap() as f64;
            let want: f64 = fs.iter().map(|&x| x as f64).sum();
            assert!(
                close(s, want, fs.iter().map(|x| x.abs() as f64).sum()),
                "n={n}: {s} vs {want}"
            );
        }
    });
}

#[test]
fn integer_extremes() {
    every_backend(|| {
        let c = ctx();
        if has_i64() {
            let xs = vec![i64::MIN, i64::MAX, 0, -1, 1, i64::MIN + 1];
            assert_eq!(c.from(&xs).min().unwrap(), Some(i64::MIN));
            assert_eq!(c.from(&xs).max().unwrap(), Some(i64::MAX));
            assert_eq!(
                c.from(&xs).sum().unwrap(),
                xs.iter().fold(0i64, |a, b| a.wrapping_add(*b))
            );
        }
        let xs = vec![i32::MIN, i32::MAX, 0, -1, 1, i32::MIN + 1];
        assert_eq!(c.from(&xs).min().unwrap(), Some(i32::MIN));
        assert_eq!(c.from(&xs).max().unwrap(), Some(i32::MAX));
        assert_eq!(
            c.from(&xs).sum().unwrap(),
            xs.iter().fold(0i32, |a, b| a.wrapping_add(*b))
        );
        let us = vec![u8::MAX, 0, 7, u8::MAX];
        assert_eq!(c.from(&us).max().unwrap(), Some(255));
        assert_eq!(
            c.from(&us).sum().unwrap(),
            us.iter().fold(0u8, |a, b| a.wrapping_add(*b))
        );
        assert_eq!(c.from(&us).map(|x| x.cast::<u32>()).sum().unwrap(), 517);
        assert_eq!(c.from(&us).argmax().unwrap(), Some(0));
        let only_max = vec![i32::MAX; 3];
        assert_eq!(c.from(&only_max).min().unwrap(), Some(i32::MAX));
    });
}

#[test]
fn nan_and_infinities() {
    every_backend(|| {
        let c = ctx();
        let xs = vec![1.0f32, f32::NAN, -3.0, f32::INFINITY, 2.0];
        assert_eq!(c.from(&xs).min().unwrap(), Some(-3.0));
        assert_eq!(c.from(&xs).max().unwrap(), Some(f32::INFINITY));
        assert!(c.from(&xs).sum().unwrap().is_nan());
        assert_eq!(c.from(&xs).argmin().unwrap(), Some(2));
        assert_eq!(c.from(&xs).argmax().unwrap(), Some(3));
        assert!(c.from(&xs).any(|x| x.is_nan()).unwrap());
        assert!(!c.from(&xs).all(|x| x.is_nan().not()).unwrap());
        assert_eq!(c.from(&xs).filter(|x| x.is_nan()).count().unwrap(), 1);
        if has_f64() {
            let nans = vec![f64::NAN; 4];
            assert!(c.from(&nans).min().unwrap().unwrap().is_nan());
            assert_eq!(c.from(&nans).argmax().unwrap(), Some(0));
        }
        let nans = vec![f32::NAN; 4];
        assert!(c.from(&nans).min().unwrap().unwrap().is_nan());
        assert_eq!(c.from(&nans).argmax().unwrap(), Some(0));
        let infs = vec![f32::INFINITY, f32::NEG_INFINITY];
        assert!(c.from(&infs).sum().unwrap().is_nan());
        assert_eq!(c.from(&infs).min().unwrap(), Some(f32::NEG_INFINITY));
    });
}

/// A float type's NaN test and total order, for the min/max references.
trait Float:
    kiln::ir::Scalar + kiln::ir::Numeric + kiln::Row<Vals = Val<Self>> + std::fmt::Debug
{
    const NAN: Self;
    fn nan(self) -> bool;
    fn order(&self, other: &Self) -> std::cmp::Ordering;
    fn bits(self) -> u64;
}

impl Float for f32 {
    const NAN: f32 = f32::NAN;
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn order(&self, other: &f32) -> std::cmp::Ordering {
        self.total_cmp(other)
    }
    fn bits(self) -> u64 {
        self.to_bits() as u64
    }
}

impl Float for f64 {
    const NAN: f64 = f64::NAN;
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn order(&self, other: &f64) -> std::cmp::Ordering {
        self.total_cmp(other)
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
}

/// The IR's rule for float min/max, computed independently: NaN is skipped unless every
/// element is NaN, and `-0.0 < +0.0` (total order over the numbers).
fn min_max_reference<F: Float>(xs: &[F], max: bool) -> Option<F> {
    let numbers = xs.iter().copied().filter(|x| !x.nan());
    let best = if max {
        numbers.max_by(F::order)
    } else {
        numbers.min_by(F::order)
    };
    best.or_else(|| xs.first().map(|_| F::NAN))
}

fn same_float<F: Float>(got: Option<F>, want: Option<F>) -> bool {
    match (got, want) {
        (Some(g), Some(w)) if w.nan() => g.nan(),
        (Some(g), Some(w)) => g.bits() == w.bits(),
        (g, w) => g.is_none() && w.is_none(),
    }
}

/// Checks `min`, `max` and a filtered `max` (of the elements `keep` keeps, as plain Rust
/// does with `kept`) of `n` elements drawn from each of `pools` against the reference.
fn check_min_max_of_pools<F: Float>(
    c: &Context,
    n: usize,
    at: &str,
    pools: &[Vec<F>],
    keep: fn(Val<F>) -> Val<bool>,
    kept: fn(&F) -> bool,
) {
    for (p, pool) in pools.iter().enumerate() {
        if n > 5 && p % 8 != 0 {
            continue;
        }
        let xs: Vec<F> = (0..n).map(|i| pool[(i * 7 + p) % pool.len()]).collect();
        for max in [false, true] {
            let got = if max {
                c.from(&xs).max()
            } else {
                c.from(&xs).min()
            }
            .unwrap();
            let want = min_max_reference(&xs, max);
            assert!(
                same_float(got, want),
                "{at}, pool {pool:?}, max {max}: {got:?}, want {want:?}"
            );
        }
        let chosen: Vec<F> = xs.iter().copied().filter(kept).collect();
        let got = c.from(&xs).filter(keep).max().unwrap();
        let want = min_max_reference(&chosen, true);
        assert!(
            same_float(got, want),
            "{at}, filtered, pool {pool:?}: {got:?}, want {want:?}"
        );
    }
}

#[test]
fn float_min_and_max_skip_nan_and_order_signed_zeros() {
    let specials = [
        0.0f32,
        -0.0,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffff_ffff),
        f32::from_bits(0x7fff_ffff),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        1.5,
        -1.5,
    ];
    // Short pools, so that an array often holds only NaNs, only zeros or one number.
    let pools: Vec<Vec<f32>> = (0..64u64)
        .map(|seed| {
            let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let len = 1 + (seed % 3) as usize;
            (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    specials[(state % specials.len() as u64) as usize]
                })
                .collect()
        })
        .collect();
    // The same pools in f64 (every f32 value, NaNs, zeros and infinities keeping their kind),
    // with f64's own extremes in place of f32's.
    let wide = |x: f32| match x {
        f32::MAX => f64::MAX,
        f32::MIN => f64::MIN,
        x if x.to_bits() == 1 => f64::from_bits(1),
        x if x.to_bits() == 0x8000_0001 => -f64::from_bits(1),
        x => x as f64,
    };
    let pools64: Vec<Vec<f64>> = pools
        .iter()
        .map(|p| p.iter().map(|x| wide(*x)).collect())
        .collect();
    every_backend_plan_and_size(&[0, 1, 5, 16385, 100_003], |c, n, at| {
        check_min_max_of_pools(c, n, at, &pools, |x| x.ge(0.0), |x| *x >= 0.0);
        if has_f64() {
            check_min_max_of_pools(c, n, at, &pools64, |x| x.ge(0.0), |x| *x >= 0.0);
        }
        let xs = floats(n);
        let got = c.from(&xs).map(|x| -x).min().unwrap();
        let want = min_max_reference(&xs.iter().map(|x| -x).collect::<Vec<_>>(), false);
        assert!(same_float(got, want), "{at}: {got:?}, want {want:?}");
    });
}

#[test]
fn empty_and_single_element_inputs() {
    every_backend(|| {
        let c = ctx();
        let empty: Vec<f32> = vec![];
        assert_eq!(c.from(&empty).sum().unwrap(), 0.0);
        assert_eq!(c.from(&empty).product().unwrap(), 1.0);
        assert_eq!(c.from(&empty).min().unwrap(), None);
        assert_eq!(c.from(&empty).average().unwrap(), None);
        assert_eq!(c.from(&empty).argmin().unwrap(), None);
        assert_eq!(c.from(&empty).count().unwrap(), 0);
        assert!(!c.from(&empty).any(|x| x.gt(0.0)).unwrap());
        assert!(c.from(&empty).all(|x| x.gt(0.0)).unwrap());
        assert!(c.from(&empty).map(|x| x + 1.0).to_vec().unwrap().is_empty());
        let one = vec![-2.5f32];
        assert_eq!(c.from(&one).sum().unwrap(), -2.5);
        assert_eq!(c.from(&one).max().unwrap(), Some(-2.5));
        assert_eq!(c.from(&one).argmax().unwrap(), Some(0));
        assert_eq!(c.from(&one).average().unwrap(), Some(-2.5));
        assert_eq!(
            c.from(&one).filter(|x| x.lt(0.0)).to_vec().unwrap(),
            vec![-2.5]
        );
    });
}

#[test]
fn argmin_argmax_pick_the_first_of_ties() {
    every_backend(|| {
        let c = ctx();
        for n in SIZES {
            let xs: Vec<i32> = ints(n).iter().map(|x| x % 1000).collect();
            let want_min = xs
                .iter()
                .enumerate()
                .min_by_key(|(i, v)| (**v, *i))
                .map(|(i, _)| i);
            let want_max = xs
                .iter()
                .enumerate()
                .max_by_key(|(i, v)| (**v, std::cmp::Reverse(*i)))
                .map(|(i, _)| i);
            assert_eq!(c.from(&xs).argmin().unwrap(), want_min, "n={n}");
            assert_eq!(c.from(&xs).argmax().unwrap(), want_max, "n={n}");
        }
    });
}

#[test]
fn fold_with_a_non_commutative_associative_op() {
    every_backend(|| {
        let c = ctx();
        for n in SIZES {
            let xs: Vec<u32> = (0..n as u32).map(|i| i % 13).collect();
            let got =
                c.from(&xs)
                    .map(|x| (x, x))
                    .fold((u32::MAX, u32::MAX), |(af, al), (bf, bl)| {
                        let first = select(af.eq(u32::MAX), bf, af);
                        let last = select(bl.eq(u32::MAX), al, bl);
                        (first, last)
                    });
            let want = (
                xs.first().copied().unwrap_or(u32::MAX),
                xs.last().copied().unwrap_or(u32::MAX),
            );
            assert_eq!(got.unwrap(), want, "n={n}");
            let hash = c
                .from(&xs)
                .map(|x| (x, kiln::ir::lit(31u32)))
                .fold((0u32, 1u32), |(ah, ap), (bh, bp)| (ah * bp + bh, ap * bp));
            let want = xs.iter().fold((0u32, 1u32), |(h, p), &x| {
                (h.wrapping_mul(31).wrapping_add(x), p.wrapping_mul(31))
            });
            assert_eq!(hash.unwrap(), want, "rolling hash, n={n}");
        }
    });
}

#[test]
fn zip_and_enumerate() {
    every_backend(|| {
        let c = ctx();
        for n in SIZES {
            let a = floats(n);
            let b: Vec<i32> = ints(n);
            if has_f64() {
                let dot = c
                    .from(&a)
                    .zip(&b)
                    .map(|(x, y)| x.cast::<f64>() * y.cast::<f64>())
                    .sum()
                    .unwrap();
                let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
                let scale: f64 = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (*x as f64 * *y as f64).abs())
                    .sum();
                assert!(close(dot, want, scale), "n={n}");
                // zip_with on an enumerated query: the closure gets the tuple and the other value.
                let got = c
                    .from(&b)
                    .enumerate()
                    .zip_with(&a, |(i, y), x| {
                        (x * 2.0).cast::<f64>() + (y - i.cast::<i32>()).cast()
                    })
                    .to_vec()
                    .unwrap();
                let want: Vec<f64> = b
                    .iter()
                    .enumerate()
                    .zip(&a)
                    .map(|((i, y), x)| (x * 2.0) as f64 + y.wrapping_sub(i as i32) as f64)
                    .collect();
                assert_eq!(got, want, "zip_with, n={n}");
            }
            let pairs = c
                .from(&b)
                .zip(&a)
                .filter(|(y, _)| y.gt(0))
                .to_vec()
                .unwrap();
            assert_eq!(
                pairs,
                b.iter()
                    .copied()
                    .zip(a.iter().copied())
                    .filter(|(y, _)| *y > 0)
                    .collect::<Vec<_>>()
            );
            let idx = c
                .from(&a)
                .enumerate()
                .filter(|(_, x)| x.lt(-1400.0))
                .map(|(i, _)| i)
                .to_vec()
                .unwrap();
            let want: Vec<u32> = a
                .iter()
                .enumerate()
                .filter(|(_, x)| **x < -1400.0)
                .map(|(i, _)| i as u32)
                .collect();
            assert_eq!(idx, want);
            let c3: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
            if has_f64() {
                let triple = c
                    .from(&a)
                    .zip(&b)
                    .zip(&c3)
                    .map(|((x, y), z)| x.cast::<f64>() + y.cast::<f64>() * z.cast::<f64>())
                    .to_vec()
                    .unwrap();
                let want: Vec<f64> = (0..n)
                    .map(|i| a[i] as f64 + b[i] as f64 * c3[i] as f64)
                    .collect();
                assert_eq!(triple, want);
            }
        }
    });
}

#[test]
fn fusion_launches_one_kernel_per_phase_and_caches_compiles() {
    every_backend(|| {
        let c = ctx();
        let xs = floats(100_000);
        let before = c.stats();
        c.from(&xs)
            .map(|x| x * 2.0)
            .filter(|x| x.gt(1000.0))
            .map(|x| x + 100.0)
            .sum()
            .unwrap();
        let after = c.stats();
        assert_eq!(
            after.launches - before.launches,
            2,
            "map-filter-map-sum is partials + final"
        );
        assert_eq!(
            obtained(after) - obtained(before),
            2,
            "each kernel is compiled or loaded from disk once"
        );
        c.from(&xs)
            .map(|x| x * 2.0)
            .filter(|x| x.gt(1000.0))
            .map(|x| x + 100.0)
            .sum()
            .unwrap();
        let again = c.stats();
        assert_eq!(
            obtained(again),
            obtained(after),
            "a cached query compiles nothing"
        );
        c.from(&xs)
            .map(|x| x * 2.0)
            .map(|x| x + 1.0)
            .map(|x| x.sqrt())
            .to_vec()
            .unwrap();
        assert_eq!(
            c.stats().launches - again.launches,
            1,
            "a map chain is one kernel"
        );
        let before = c.stats();
        c.from(&xs)
            .map(|x| x * 2.0)
            .filter(|x| x.gt(0.0))
            .to_vec()
            .unwrap();
        assert_eq!(
            c.stats().launches - before.launches,
            2,
            "ordered filter: count, scatter"
        );
        let plan = c
            .from(&xs)
            .map(|x| x * 2.0)
            .filter(|x| x.gt(1000.0))
            .map(|x| x + 100.0)
            .explain();
        assert!(
            plan.contains("fused stages: map -> filter -> map"),
            "{plan}"
        );
        assert!(plan.contains("kernel query_filter_scatter"), "{plan}");
        assert!(plan.contains("load in0"), "{plan}");
    });
}

/// `explain()` prints the plan the device runs: as many launches as the terminal makes, in
/// either plan shape, for inputs that fit one group and inputs that need many.
#[test]
fn explain_shows_the_launches_the_device_makes() {
    every_backend(|| {
        let c = ctx();
        for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
            c.set_plan_shape(shape);
            for n in [5usize, 1000, 300_000] {
                let xs: Vec<i32> = (0..n as i32).map(|i| i % 17 - 3).collect();
                let q = || c.from(&xs).map(|x| x * 2).filter(|x| x.gt(0));
                let text = q().explain();
                let section = |title: &str| {
                    let start = text
                        .find(title)
                        .unwrap_or_else(|| panic!("{title}: {text}"));
                    let rest = &text[start..];
                    let end = rest.find("  result:").unwrap_or(rest.len());
                    rest[..end].matches(". launch ").count() as u64
                };
                let before = c.stats().launches;
                let kept = q().to_vec().unwrap();
                let want: Vec<i32> = xs.iter().map(|x| x * 2).filter(|x| *x > 0).collect();
                assert_eq!(kept, want);
                let after_to_vec = c.stats().launches;
                assert_eq!(
                    after_to_vec - before,
                    section("to_vec plan"),
                    "{shape:?} n={n}: {text}"
                );
                let sum = q().sum().unwrap();
                assert_eq!(sum, want.iter().sum::<i32>());
                assert_eq!(
                    c.stats().launches - after_to_vec,
                    section("reduce plan"),
                    "{shape:?} n={n}: {text}"
                );
                // Scans, plain and after the filter: the launches their plan lists.
                let mut running = 0i32;
                let plain: Vec<i32> = xs
                    .iter()
                    .map(|x| {
                        running = running.wrapping_add(*x);
                        running
                    })
                    .collect();
                running = 0;
                let kept: Vec<i32> = want
                    .iter()
                    .map(|x| {
                        running = running.wrapping_add(*x);
                        running
                    })
                    .collect();
                for (filtered, want) in [(false, plain), (true, kept)] {
                    let scan = || match filtered {
                        true => q().scan(0, |a, b| a + b),
                        false => c.from(&xs).scan(0, |a, b| a + b),
                    };
                    let text = scan().explain();
                    let before = c.stats().launches;
                    assert_eq!(scan().to_vec().unwrap(), want, "{shape:?} n={n}");
                    assert_eq!(
                        c.stats().launches - before,
                        text.matches(". launch ").count() as u64,
                        "{shape:?} n={n} filtered={filtered}: {text}"
                    );
                }
            }
        }
    });
}

/// A query that runs again takes its kernels from the plan cache, and queries that differ in
/// a captured constant, in which value a stage hands on, in the terminal or in the plan shape
/// each get their own kernels: every answer is checked against a plain loop on one context
/// that has run all of them, in both plan shapes.
#[test]
fn the_plan_cache_reuses_a_querys_kernels_and_tells_apart_queries_that_differ() {
    every_backend(|| {
        let c = ctx();
        let xs = floats(40_000);
        for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
            c.set_plan_shape(shape);
            for k in [1.0f32, 2.0, -3.0] {
                let want: f64 = xs.iter().map(|x| (x * k) as f64).sum();
                let got = c.from(&xs).map(move |x| x * k).sum().unwrap() as f64;
                assert!(
                    close(got, want, want.abs()),
                    "{shape:?}, k={k}: {got} vs {want}"
                );
                let got = c.from(&xs).map(move |x| x * k).to_vec().unwrap();
                let want: Vec<f32> = xs.iter().map(|x| x * k).collect();
                assert_eq!(got, want, "{shape:?}, k={k}");
            }
            // The same IR in the same order: the map hands on x + 1, the filter keeps x.
            let shifted = c
                .from(&xs)
                .map(|x| x + 1.0)
                .filter(|y| y.gt(0.0))
                .to_vec()
                .unwrap();
            let kept = c.from(&xs).filter(|x| (x + 1.0).gt(0.0)).to_vec().unwrap();
            let want_kept: Vec<f32> = xs.iter().copied().filter(|x| x + 1.0 > 0.0).collect();
            let want_shifted: Vec<f32> = want_kept.iter().map(|x| x + 1.0).collect();
            assert_eq!(shifted, want_shifted, "{shape:?}");
            assert_eq!(kept, want_kept, "{shape:?}");
            let ys = ints(40_000);
            let small: Vec<i32> = ys.iter().map(|y| y % 3 + 2).collect();
            let q = || c.from(&small).filter(|y| y.ne(3));
            let kept: Vec<i32> = small.iter().copied().filter(|y| *y != 3).collect();
            assert_eq!(q().sum().unwrap(), kept.iter().sum::<i32>(), "{shape:?}");
            assert_eq!(
                q().product().unwrap(),
                kept.iter().fold(1i32, |a, b| a.wrapping_mul(*b)),
                "{shape:?}"
            );
            assert_eq!(q().min().unwrap(), kept.iter().copied().min(), "{shape:?}");
            assert_eq!(q().max().unwrap(), kept.iter().copied().max(), "{shape:?}");
            assert_eq!(q().count().unwrap(), kept.len(), "{shape:?}");
            assert_eq!(q().first().unwrap(), kept.first().copied(), "{shape:?}");
            assert_eq!(q().last().unwrap(), kept.last().copied(), "{shape:?}");
            assert!(q().any(|y| y.eq(4)).unwrap(), "{shape:?}");
            assert!(!q().all(|y| y.eq(4)).unwrap(), "{shape:?}");
        }
        let run = || {
            c.from(&xs)
                .map(|x| x * 0.5)
                .filter(|x| x.gt(10.0))
                .sum()
                .unwrap()
        };
        let first = run();
        let before = c.stats();
        assert_eq!(run().to_bits(), first.to_bits());
        let after = c.stats();
        assert_eq!(
            after.plan_hits - before.plan_hits,
            1,
            "the rerun finds its plan"
        );
        assert_eq!(after.compilations, before.compilations);
        assert_eq!(after.launches - before.launches, 2, "partials, then final");
    });
}

/// Queries that take turns on one context, more of them than the plan cache finds without
/// hashing (its recent shapes) and some that differ in one operator only, each find their
/// own plan on every round after the first and give plain Rust's answer every time.
#[test]
fn queries_taking_turns_each_find_their_own_plan() {
    every_backend(|| {
        let c = ctx();
        let xs = ints(3000);
        type Case = (fn(i32) -> i32, fn(Val<i32>) -> Val<i32>);
        let cases: [Case; 7] = [
            (|x| x.wrapping_add(1), |x| x + 1),
            (|x| x.wrapping_sub(1), |x| x - 1),
            (|x| x.wrapping_mul(3), |x| x * 3),
            (|x| x & 0xff, |x| x & 0xff),
            (|x| x | 1, |x| x | 1),
            (|x| x ^ 0x55, |x| x ^ 0x55),
            (|x| x.wrapping_shr(2), |x| x >> 2),
        ];
        for round in 0..3 {
            let before = c.stats();
            for (plain, traced) in cases {
                let want = xs.iter().fold(0i32, |a, x| a.wrapping_add(plain(*x)));
                assert_eq!(
                    c.from(&xs).map(traced).sum().unwrap(),
                    want,
                    "round {round}"
                );
            }
            let after = c.stats();
            if round > 0 {
                assert_eq!(after.plan_hits - before.plan_hits, cases.len() as u64);
                assert_eq!(after.compilations, before.compilations, "round {round}");
            }
        }
    });
}

/// The plan cache keeps apart scans, sorts, groupings and histograms of one query that differ
/// only in the terminal's own settings or closures, on one context in both plan shapes;
/// every answer is checked against plain Rust.
#[test]
fn the_plan_cache_tells_apart_scans_sorts_groupings_and_histograms() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<u32> = (0..5000u32).map(|i| (i * 7919) % 1009).collect();
        for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
            c.set_plan_shape(shape);
            let running: Vec<u32> = xs
                .iter()
                .scan(0u32, |a, x| {
                    *a += x;
                    Some(*a)
                })
                .collect();
            let inclusive = c.from(&xs).scan(0, |a, b| a + b).to_vec().unwrap();
            let exclusive = c
                .from(&xs)
                .scan_exclusive(0, |a, b| a + b)
                .to_vec()
                .unwrap();
            let maxima = c.from(&xs).scan(0, |a, b| a.max(b)).to_vec().unwrap();
            assert_eq!(inclusive, running, "{shape:?}");
            let mut before = vec![0u32];
            before.extend(&running[..xs.len() - 1]);
            assert_eq!(exclusive, before, "{shape:?}");
            let want: Vec<u32> = xs
                .iter()
                .scan(0u32, |a, x| {
                    *a = (*a).max(*x);
                    Some(*a)
                })
                .collect();
            assert_eq!(maxima, want, "{shape:?}");

            let mut up = xs.clone();
            up.sort();
            let mut down = up.clone();
            down.reverse();
            assert_eq!(c.from(&xs).sort().to_vec().unwrap(), up, "{shape:?}");
            assert_eq!(c.from(&xs).sort_desc().to_vec().unwrap(), down, "{shape:?}");
            let mut by_low = xs.clone();
            by_low.sort_by_key(|x| x % 10);
            let got = c.from(&xs).sort_by_key(|x| x % 10u32).to_vec().unwrap();
            assert_eq!(got, by_low, "{shape:?}");

            let groups = |key: u32, max: bool| {
                let mut m = std::collections::BTreeMap::new();
                for x in &xs {
                    let e = m.entry(x % key).or_insert(0u32);
                    *e = if max { (*e).max(*x) } else { *e + x };
                }
                m.into_iter().collect::<Vec<_>>()
            };
            let q = || c.from(&xs).group_by(|x| x % 7u32);
            assert_eq!(q().sum(|x| x).unwrap(), groups(7, false), "{shape:?}");
            assert_eq!(q().max(|x| x).unwrap(), groups(7, true), "{shape:?}");
            let got = c.from(&xs).group_by(|x| x % 5u32).sum(|x| x).unwrap();
            assert_eq!(got, groups(5, false), "{shape:?}");
            // Keys over a range too wide for the dense plan: the sorting one.
            let wide: Vec<u32> = xs.iter().map(|x| x * 100_000).collect();
            let got = c
                .from(&wide)
                .group_by(|x| x)
                .sum(|_| kiln::ir::lit(1u32))
                .unwrap();
            let mut want = std::collections::BTreeMap::new();
            for x in &wide {
                *want.entry(*x).or_insert(0u32) += 1;
            }
            assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "{shape:?}");

            for bins in [8u32, 600] {
                let mut want = vec![0u32; bins as usize];
                for x in &xs {
                    if let Some(b) = want.get_mut(*x as usize) {
                        *b += 1;
                    }
                }
                assert_eq!(c.from(&xs).histogram(bins).unwrap(), want, "{shape:?}");
                let mut want = vec![0u32; bins as usize];
                for x in &xs {
                    if let Some(b) = want.get_mut(*x as usize / 2) {
                        *b += 1;
                    }
                }
                let got = c.from(&xs).map(|x| x / 2u32).histogram(bins).unwrap();
                assert_eq!(got, want, "{shape:?}");
            }
        }
    });
}

/// Compilations plus kernels loaded from the disk cache: the kernels a context had to get.
fn obtained(s: kiln::Stats) -> u64 {
    s.compilations + s.disk_hits
}

#[test]
fn values_captured_by_closures_become_parameters_when_they_change() {
    every_backend(|| {
        let c = ctx();
        let xs = ints(20_000);
        let fs = floats(20_000);
        let us: Vec<u32> = (0..20_000u32).map(|i| (i * 7919) % 1009).collect();
        let mut made = Vec::new();
        let rounds = [3i32, -7, 0, 1 << 20, i32::MIN, -1];
        for (round, k) in rounds.into_iter().enumerate() {
            // Wrapping arithmetic, a comparison, and / and % by the captured value: the
            // rules for 0 (x / 0 = x, x % 0 = 0) and MIN / -1 hold for a parameter too.
            let got = c
                .from(&xs)
                .map(move |x| x * k + x / k - x % k)
                .filter(move |y| y.gt(k))
                .sum()
                .unwrap();
            let div = |x: i32| if k == 0 { x } else { x.wrapping_div(k) };
            let rem = |x: i32| if k == 0 { 0 } else { x.wrapping_rem(k) };
            let want = xs
                .iter()
                .map(|&x| x.wrapping_mul(k).wrapping_add(div(x)).wrapping_sub(rem(x)))
                .filter(|y| *y > k)
                .fold(0i32, i32::wrapping_add);
            assert!(got == want, "k={k}");

            let (scale, shift) = (k as f32 * 0.25, round as f32 - 2.5);
            let got = c
                .from(&fs)
                .map(move |x| x * scale + shift)
                .to_vec()
                .unwrap();
            let want: Vec<f32> = fs.iter().map(|x| x * scale + shift).collect();
            assert!(got == want, "k={k}");

            let m = (k.unsigned_abs() % 13) + 1;
            let got = c
                .from(&us)
                .map(move |x| x % m)
                .scan(0u32, |a, b| a + b)
                .to_vec()
                .unwrap();
            let want: Vec<u32> = us
                .iter()
                .scan(0u32, |a, b| {
                    *a += b % m;
                    Some(*a)
                })
                .collect();
            assert!(got == want, "k={k}");

            let got = c.from(&us).sort_by_key(move |x| x % m).to_vec().unwrap();
            let mut want = us.clone();
            want.sort_by_key(|x| x % m);
            assert!(got == want, "k={k}");

            // The keys keep their range (the dense plan's slots follow it).
            let got = c
                .from(&us)
                .group_by(|x| x % 7u32)
                .sum(move |x| x * m)
                .unwrap();
            let mut groups = std::collections::BTreeMap::new();
            for x in &us {
                *groups.entry(x % 7).or_insert(0u32) += x * m;
            }
            assert_eq!(got, groups.into_iter().collect::<Vec<_>>(), "k={k}");

            // A bool stays a literal: one plan for each of its values.
            let odd = round % 2 == 1;
            let got = c
                .from(&us)
                .filter(move |x| (x % 2u32).eq(1u32).eq(odd))
                .count();
            let want = us.iter().filter(|x| (*x % 2 == 1) == odd).count();
            assert_eq!(got.unwrap(), want, "k={k}");
            made.push(obtained(c.stats()));
        }
        // The first value compiles each plan with its constants in place, the second with
        // the ones that changed as parameters; later values reuse those plans.
        assert!(made[1] > made[0], "{made:?}");
        assert!(made[2..].iter().all(|m| *m == made[1]), "{made:?}");
    });
}

#[test]
fn reductions_are_deterministic() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<f32> = (0..1_000_003)
            .map(|i| ((i * 31) % 1009) as f32 * 1e-3 + 1e4 * ((i % 7) as f32))
            .collect();
        let first = c.from(&xs).map(|x| x * 1.0001).sum().unwrap();
        for _ in 0..5 {
            assert_eq!(
                c.from(&xs).map(|x| x * 1.0001).sum().unwrap().to_bits(),
                first.to_bits()
            );
        }
    });
}

#[test]
fn errors_are_typed() {
    every_backend(|| {
        let c = ctx();
        let a = vec![1f32; 10];
        let b = vec![1f32; 11];
        match c.from(&a).zip(&b).map(|(x, y)| x + y).sum() {
            Err(Error::LengthMismatch {
                left: 10,
                right: 11,
            }) => {}
            other => panic!("expected LengthMismatch, got {other:?}"),
        }
        match c.from(&a).zip_with(&b, |x, y| x * y).to_vec() {
            Err(Error::LengthMismatch {
                left: 10,
                right: 11,
            }) => {}
            other => panic!("zip_with: expected LengthMismatch, got {other:?}"),
        }
        // After a filter, a zip pairs the kept rows: their number is the left length.
        let steps: Vec<f32> = (0..10).map(|i| i as f32).collect();
        match c.from(&steps).filter(|x| x.lt(4.0)).zip(&b).to_vec() {
            Err(Error::LengthMismatch { left: 4, right: 11 }) => {}
            other => panic!("zip after a filter: expected LengthMismatch, got {other:?}"),
        }
        // A backend that is missing is a typed error naming it; one that is there opens.
        for kind in [BackendKind::OpenCl, BackendKind::Cuda, BackendKind::Wgpu] {
            match Context::with_backend(kind) {
                Ok(other) => assert_eq!(other.device().backend, kind),
                Err(Error::Backend(e)) => assert!(e.to_string().contains(kind.name()), "{e}"),
                Err(e) => panic!("{kind}: expected a BackendError, got {e:?}"),
            }
        }
        assert_eq!(
            c.from(&a).sum().unwrap(),
            10.0,
            "the context keeps working after errors"
        );
    });
}

/// The grouped (GPU-shaped) reduction plan, forced on every backend: work items of a group
/// fold short contiguous ranges and combine through shared memory with barriers.
#[test]
fn grouped_plan_reductions_match_plain_loops() {
    every_backend(|| {
        let c = ctx();
        c.set_plan_shape(kiln::PlanShape::Grouped);
        assert_eq!(c.effective_plan_shape(), kiln::PlanShape::Grouped);
        for n in SIZES {
            let xs = ints(n);
            assert_eq!(
                c.from(&xs).sum().unwrap(),
                xs.iter().fold(0i32, |a, b| a.wrapping_add(*b)),
                "n={n}"
            );
            assert_eq!(
                c.from(&xs).min().unwrap(),
                xs.iter().copied().min(),
                "n={n}"
            );
            assert_eq!(
                c.from(&xs).max().unwrap(),
                xs.iter().copied().max(),
                "n={n}"
            );
            assert_eq!(
                c.from(&xs).filter(|x| (x % 3).eq(0)).count().unwrap(),
                xs.iter().filter(|x| *x % 3 == 0).count()
            );
            let small: Vec<i32> = xs.iter().map(|x| x % 1000).collect();
            let want_min = small
                .iter()
                .enumerate()
                .min_by_key(|(i, v)| (**v, *i))
                .map(|(i, _)| i);
            assert_eq!(c.from(&small).argmin().unwrap(), want_min, "n={n}");
            let us: Vec<u32> = (0..n as u32).map(|i| i % 13).collect();
            let hash = c
                .from(&us)
                .map(|x| (x, kiln::ir::lit(31u32)))
                .fold((0u32, 1u32), |(ah, ap), (bh, bp)| (ah * bp + bh, ap * bp));
            let want = us.iter().fold((0u32, 1u32), |(h, p), &x| {
                (h.wrapping_mul(31).wrapping_add(x), p.wrapping_mul(31))
            });
            assert_eq!(
                hash.unwrap(),
                want,
                "non-commutative fold keeps its order, n={n}"
            );
            let kept = c
                .from(&xs)
                .filter(|x| (x & 7).eq(3).or(x.lt(-900_000)))
                .map(|x| x / 3)
                .to_vec()
                .unwrap();
            let want_kept: Vec<i32> = xs
                .iter()
                .copied()
                .filter(|x| (x & 7) == 3 || *x < -900_000)
                .map(|x| x / 3)
                .collect();
            assert_eq!(kept, want_kept, "grouped filter keeps input order, n={n}");
            let b = c.upload(&xs).unwrap();
            let on_device = c
                .from_buffer(&b)
                .filter(|x| x.gt(0))
                .to_buffer()
                .unwrap()
                .download()
                .unwrap();
            assert_eq!(
                on_device,
                xs.iter().copied().filter(|x| *x > 0).collect::<Vec<_>>(),
                "n={n}"
            );
        }
        let launches = c.stats().launches;
        let xs = floats(100_000);
        let kept = || c.from(&xs).map(|x| x * 2.0).filter(|x| x.gt(1000.0));
        // In f64 where the device has it, else in f32.
        let (got, bound) = if has_f64() {
            let got = kept().map(|x| x.cast::<f64>() + 100.0).sum().unwrap();
            (got, 1e-9)
        } else {
            (kept().map(|x| x + 100.0).sum().unwrap() as f64, 1e-5)
        };
        let want: f64 = xs
            .iter()
            .map(|x| x * 2.0)
            .filter(|x| *x > 1000.0)
            .map(|x| x as f64 + 100.0)
            .sum();
        assert!((got - want).abs() <= bound * want.abs(), "{got} vs {want}");
        assert_eq!(
            c.stats().launches - launches,
            2,
            "partials and final, as in the chunked plan"
        );
    });
}

/// A grouped reduction over more elements than two levels of groups of 16 elements per work
/// item cover: one group folds all the partials, many per work item, in input order, so the
/// reduction is two launches.
#[test]
fn grouped_reductions_fold_all_partials_in_one_more_launch_in_order() {
    every_backend(|| {
        let c = ctx();
        c.set_plan_shape(kiln::PlanShape::Grouped);
        let most = c.device().max_group_size.clamp(1, 256);
        let per_group = 16usize << (31 - most.leading_zeros());
        let n = per_group * per_group + 3 * per_group + 5;
        let us: Vec<u32> = (0..n as u32).map(|i| i % 251).collect();
        let launches = c.stats().launches;
        let hash = c
            .from(&us)
            .map(|x| (x, kiln::ir::lit(1_000_003u32)))
            .fold((0u32, 1u32), |(ah, ap), (bh, bp)| (ah * bp + bh, ap * bp))
            .unwrap();
        let want = us.iter().fold((0u32, 1u32), |(h, p), &x| {
            (
                h.wrapping_mul(1_000_003).wrapping_add(x),
                p.wrapping_mul(1_000_003),
            )
        });
        assert_eq!(hash, want, "n={n}");
        assert_eq!(
            c.stats().launches - launches,
            2,
            "the elements, then their {} partials",
            n.div_ceil(per_group)
        );
        let b = c.upload(&us).unwrap();
        let sum = c.from_buffer(&b).sum().unwrap();
        assert_eq!(sum, us.iter().sum::<u32>());
    });
}

#[test]
fn eight_and_sixteen_bit_inputs_widen_to_32_bits() {
    // On the CPU, loads of 8- and 16-bit elements that are cast to 32 bits run four at a
    // time; sign extension must follow the element type.
    every_backend(|| {
        let c = ctx();
        for n in [7usize, 16385, 100_003] {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
            let signed: Vec<i8> = bytes.iter().map(|b| *b as i8).collect();
            let shorts: Vec<u16> = (0..n).map(|i| (i * 40503 % 65536) as u16).collect();
            let sshorts: Vec<i16> = shorts.iter().map(|s| *s as i16).collect();
            let got = c
                .from(&bytes)
                .map(|b| b.cast::<u32>() * 3)
                .to_vec()
                .unwrap();
            let want: Vec<u32> = bytes.iter().map(|b| *b as u32 * 3).collect();
            assert_eq!(got, want, "u8 map, n = {n}");
            let got = c.from(&signed).map(|b| b.cast::<i32>()).sum().unwrap();
            let want = signed.iter().map(|b| *b as i32).sum::<i32>();
            assert_eq!(got, want, "i8 sum, n = {n}");
            let got = c
                .from(&shorts)
                .map(|s| s.cast::<f32>() * 0.5)
                .to_vec()
                .unwrap();
            let want: Vec<f32> = shorts.iter().map(|s| *s as f32 * 0.5).collect();
            assert_eq!(got, want, "u16 map, n = {n}");
            let got = c
                .from(&sshorts)
                .map(|s| s.cast::<u32>())
                .filter(|s| s.gt(60000u32))
                .count()
                .unwrap();
            let want = sshorts.iter().filter(|s| **s as u32 > 60000).count();
            assert_eq!(got, want, "i16 filter, n = {n}");
        }
    });
}

/// Inclusive and exclusive scans, in both plan shapes, against sequential folds: a wrapping
/// sum, a non-commutative linear recurrence over zipped columns, a scan after a map and a
/// filter (its running count places each kept element), exact float sums, and a buffer
/// output. The grouped plan's larger size gives its carry scan several partials per item.
#[test]
fn scans_match_sequential_folds() {
    let sizes: Vec<usize> = SIZES.iter().copied().chain([1_100_003]).collect();
    every_backend_plan_and_size(&sizes, |c, n, at| {
        let xs = ints(n);
        let mut acc = 0i32;
        let inclusive: Vec<i32> = xs
            .iter()
            .map(|x| {
                acc = acc.wrapping_add(*x);
                acc
            })
            .collect();
        let got = c.from(&xs).scan(0, |a, b| a + b).to_vec().unwrap();
        assert_eq!(got, inclusive, "inclusive sum, {at}");
        if n > 100_003 {
            return;
        }
        let exclusive: Vec<i32> = std::iter::once(0)
            .chain(inclusive.iter().copied())
            .take(n)
            .collect();
        let got = c.from(&xs).scan_exclusive(0, |a, b| a + b).to_vec();
        assert_eq!(got.unwrap(), exclusive, "exclusive sum, {at}");

        // x' = a * x + b, composed in order: (a1, b1) then (a2, b2) is
        // (a1 * a2, b1 * a2 + b2), which is associative but not commutative.
        let a: Vec<u32> = (0..n as u32).map(|i| i % 7 + 1).collect();
        let b: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let got = c
            .from(&a)
            .zip(&b)
            .scan((1u32, 0u32), |(a1, b1), (a2, b2)| (a1 * a2, b1 * a2 + b2))
            .to_vec()
            .unwrap();
        let mut run = (1u32, 0u32);
        let want: Vec<(u32, u32)> = a
            .iter()
            .zip(&b)
            .map(|(&a2, &b2)| {
                run = (
                    run.0.wrapping_mul(a2),
                    run.1.wrapping_mul(a2).wrapping_add(b2),
                );
                run
            })
            .collect();
        assert_eq!(got, want, "linear recurrence, {at}");

        let kept: Vec<i32> = xs.iter().map(|x| x / 8).filter(|x| x % 3 == 0).collect();
        let mut acc = i32::MAX;
        let want: Vec<i32> = kept
            .iter()
            .map(|x| {
                let before = acc;
                acc = acc.min(*x);
                before
            })
            .collect();
        let got = c
            .from(&xs)
            .map(|x| x / 8)
            .filter(|x| (x % 3).eq(0))
            .scan_exclusive(i32::MAX, |a, b| a.min(b))
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "exclusive min after a filter, {at}");

        let fs: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut acc = 0f32;
        let want: Vec<f32> = fs
            .iter()
            .map(|x| {
                acc += x;
                acc
            })
            .collect();
        let buf = c.upload(&fs).unwrap();
        let got = c
            .from_buffer(&buf)
            .filter(|x| x.ne(0.0))
            .scan(0.0, |a, b| a + b)
            .to_buffer()
            .unwrap();
        let want_kept: Vec<f32> = want
            .iter()
            .zip(&fs)
            .filter(|(_, x)| **x != 0.0)
            .map(|(w, _)| *w)
            .collect();
        assert_eq!(
            got.download().unwrap(),
            want_kept,
            "float sum to a buffer, {at}"
        );
    });
}

/// Radix sorts in both plan shapes against Rust's stable sorts: every key width (1, 2, 4
/// and 8 bytes), signed, unsigned and float keys (NaN of both signs, infinities and zeros of
/// both signs sort as `total_cmp` does), ascending and descending, rows ordered by a key with
/// many ties (which must keep their input order), a sort after a filter, and a buffer output.
#[test]
fn sorts_match_rust_stable_sorts() {
    every_backend_plan_and_size(
        &[0usize, 1, 2, 7, 300, 16385, 3 * 16384 + 5, 100_003],
        |c, n, at| {
            let xs = ints(n);
            let mut want = xs.clone();
            want.sort();
            assert_eq!(c.from(&xs).sort().to_vec().unwrap(), want, "i32, {at}");
            want.reverse();
            assert_eq!(
                c.from(&xs).sort_desc().to_vec().unwrap(),
                want,
                "i32 descending, {at}"
            );

            let fs: Vec<f32> = floats(n)
                .iter()
                .enumerate()
                .map(|(i, x)| if i % 7 == 3 { SPECIAL_F32[i % 8] } else { *x })
                .collect();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let mut want = fs.clone();
            want.sort_by(f32::total_cmp);
            let got = c.from(&fs).sort().to_vec().unwrap();
            assert_eq!(bits(&got), bits(&want), "f32, {at}");
            want.sort_by(|a, b| b.total_cmp(a));
            let got = c.from(&fs).sort_desc().to_vec().unwrap();
            assert_eq!(bits(&got), bits(&want), "f32 descending, {at}");

            // Keys with many ties, and the row's index as payload: a stable sort keeps
            // the indices of equal keys increasing.
            let keys: Vec<u8> = (0..n).map(|i| (i * 37 % 11) as u8).collect();
            let idx: Vec<u32> = (0..n as u32).collect();
            let mut want: Vec<(u8, u32)> = keys.iter().copied().zip(idx.iter().copied()).collect();
            want.sort_by_key(|r| r.0);
            let got = c.from(&keys).zip(&idx).sort_by_key(|(k, _)| k).to_vec();
            assert_eq!(got.unwrap(), want, "u8 key with ties, {at}");
            want.sort_by_key(|r| std::cmp::Reverse(r.0));
            let got = c
                .from(&keys)
                .zip(&idx)
                .sort_by_key_desc(|(k, _)| k)
                .to_vec();
            assert_eq!(got.unwrap(), want, "u8 key with ties, descending, {at}");
            // Signed 16-bit keys (negative ones, many ties) carrying 32-bit rows, which every
            // device runs: the rows of equal keys keep their input order.
            let shorts: Vec<i16> = xs.iter().map(|x| (*x >> 12) as i16).collect();
            let mut want: Vec<(i16, u32)> =
                shorts.iter().copied().zip(idx.iter().copied()).collect();
            want.sort_by_key(|r| r.0);
            let got = c.from(&shorts).zip(&idx).sort_by_key(|(k, _)| k).to_vec();
            assert_eq!(got.unwrap(), want, "i16 key with u32 rows, {at}");
            want.sort_by_key(|r| std::cmp::Reverse(r.0));
            let got = c
                .from(&shorts)
                .zip(&idx)
                .sort_by_key_desc(|(k, _)| k)
                .to_vec();
            assert_eq!(
                got.unwrap(),
                want,
                "i16 key with u32 rows, descending, {at}"
            );
            // Keys whose digits differ only in some places (the sort skips the others) and
            // keys that are all equal: still sorted, still stable.
            let spread = |i: u32| i.wrapping_mul(2_654_435_761) >> 7;
            for (what, mask, base) in [
                ("digits 0 and 2 differ", 0x00FF_00F0u32, 0x1200_0000u32),
                ("only digit 3 differs", 0x3000_0000, 0x0000_0505),
                ("all equal", 0, 7),
            ] {
                let keys: Vec<u32> = (0..n as u32).map(|i| spread(i) & mask | base).collect();
                let mut want: Vec<(u32, u32)> = keys.iter().copied().zip(idx.clone()).collect();
                want.sort_by_key(|r| r.0);
                let got = c.from(&keys).zip(&idx).sort_by_key(|(k, _)| k).to_vec();
                assert_eq!(got.unwrap(), want, "u32 keys, {what}, {at}");
                want.sort_by_key(|r| std::cmp::Reverse(r.0));
                let got = c.from(&keys).zip(&idx).sort_by_key_desc(|(k, _)| k);
                assert_eq!(got.to_vec().unwrap(), want, "u32 keys desc., {what}, {at}");
            }
            if has_i64() {
                let keys: Vec<u64> = (0..n as u32)
                    .map(|i| ((spread(i) as u64 & 0xF0) << 56) | 0x0000_1234_0000_0000)
                    .collect();
                let mut want: Vec<(u64, u32)> = keys.iter().copied().zip(idx.clone()).collect();
                want.sort_by_key(|r| r.0);
                let got = c.from(&keys).zip(&idx).sort_by_key(|(k, _)| k).to_vec();
                assert_eq!(got.unwrap(), want, "u64 keys differing in digit 7, {at}");
            }

            if has_i64() {
                let wide: Vec<i64> = xs.iter().map(|x| (*x as i64) * 1_000_003 - 7).collect();
                let short: Vec<i16> = xs.iter().map(|x| *x as i16).collect();
                let mut want = short.clone();
                want.sort();
                let got = c
                    .from(&short)
                    .zip(&wide)
                    .sort_by_key(|(s, _)| s)
                    .to_vec()
                    .unwrap();
                assert_eq!(
                    got.iter().map(|r| r.0).collect::<Vec<_>>(),
                    want,
                    "i16 key, {at}"
                );
            }
            if n > 16385 {
                return;
            }
            if has_i64() {
                let wide: Vec<i64> = xs.iter().map(|x| (*x as i64) * 1_000_003 - 7).collect();
                let mut want = wide.clone();
                want.sort();
                assert_eq!(c.from(&wide).sort().to_vec().unwrap(), want, "i64, {at}");
                want.reverse();
                let got = c.from(&wide).sort_desc().to_vec().unwrap();
                assert_eq!(got, want, "i64 descending, {at}");
            }
            if has_f64() {
                let ds: Vec<f64> = fs.iter().map(|x| *x as f64 * 1e300).collect();
                let mut want = ds.clone();
                want.sort_by(f64::total_cmp);
                let got = c.from(&ds).sort().to_vec().unwrap();
                let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits64(&got), bits64(&want), "f64, {at}");
            }

            let us: Vec<u32> = xs.iter().map(|x| *x as u32).collect();
            let mut want: Vec<u32> = us.iter().copied().filter(|u| u % 3 == 0).collect();
            want.sort();
            let buf = c.upload(&us).unwrap();
            let got = c
                .from_buffer(&buf)
                .filter(|u| (u % 3).eq(0))
                .sort()
                .to_buffer()
                .unwrap();
            assert_eq!(got.download().unwrap(), want, "u32 after a filter, {at}");
        },
    );
}

/// Histograms in both plan shapes against plain counting loops: byte values, signed values
/// after a map and a filter (negative ones and those past the last bin are not counted),
/// 64-bit values whose low 32 bits name a bin (they must not count), more bins than the
/// private and shared counts hold (rows of counts per chunk in device memory, or global
/// atomics), and zero or one bin.
#[test]
fn histograms_match_plain_counts() {
    let count = |vals: &mut dyn Iterator<Item = i64>, bins: usize| {
        let mut h = vec![0u32; bins];
        for v in vals {
            if v >= 0 && (v as u64) < bins as u64 {
                h[v as usize] += 1;
            }
        }
        h
    };
    every_backend_plan_and_size(&SIZES, |c, n, at| {
        let xs = ints(n);
        let bytes: Vec<u8> = xs.iter().map(|x| *x as u8).collect();
        let want = count(&mut bytes.iter().map(|b| *b as i64), 256);
        assert_eq!(c.from(&bytes).histogram(256).unwrap(), want, "u8, {at}");
        // Bytes past the last bin are not counted; 16-bit values into all 65536 bins (every
        // value has one) and into fewer.
        let want = count(&mut bytes.iter().map(|b| *b as i64), 100);
        assert_eq!(
            c.from(&bytes).histogram(100).unwrap(),
            want,
            "u8, 100 bins, {at}"
        );
        let halves: Vec<u16> = xs.iter().map(|x| *x as u16).collect();
        let want = count(&mut halves.iter().map(|h| *h as i64), 1 << 16);
        assert!(
            c.from(&halves).histogram(1 << 16).unwrap() == want,
            "u16, {at}"
        );
        let want = count(&mut halves.iter().map(|h| *h as i64), 1000);
        let got = c.from(&halves).histogram(1000).unwrap();
        assert_eq!(got, want, "u16, 1000 bins, {at}");

        let want = count(
            &mut xs
                .iter()
                .map(|x| x / 1000)
                .filter(|x| x % 5 != 0)
                .map(|x| x as i64),
            700,
        );
        let got = c
            .from(&xs)
            .map(|x| x / 1000)
            .filter(|x| (x % 5).ne(0))
            .histogram(700)
            .unwrap();
        assert_eq!(got, want, "i32 after a map and a filter, {at}");

        if has_i64() {
            let wide: Vec<i64> = xs
                .iter()
                .map(|x| (*x as i64 % 50) + if x % 3 == 0 { 1 << 32 } else { 0 })
                .collect();
            let want = count(&mut wide.iter().copied(), 64);
            assert_eq!(c.from(&wide).histogram(64).unwrap(), want, "i64, {at}");
        }

        let us: Vec<u32> = xs.iter().map(|x| x.unsigned_abs() % 10_007).collect();
        let want = count(&mut us.iter().map(|u| *u as i64), 10_000);
        assert_eq!(c.from(&us).histogram(10_000).unwrap(), want, "u32, {at}");
        // Bins enough that the chunked plan's chunks grow past their usual length.
        let want = count(&mut us.iter().map(|u| *u as i64), 3_000);
        assert_eq!(
            c.from(&us).histogram(3_000).unwrap(),
            want,
            "3000 bins, {at}"
        );
        if n == 100_003 {
            // Bins too many for rows of counts per chunk: one global atomic per element.
            let big: Vec<u32> = xs.iter().map(|x| x.unsigned_abs() * 17 + 3).collect();
            let want = count(&mut big.iter().map(|u| *u as i64), 17_000_000);
            let got = c.from(&big).histogram(17_000_000).unwrap();
            assert!(got == want, "17e6 bins, {at}");
        }
        assert_eq!(c.from(&us).histogram(0).unwrap(), Vec::<u32>::new());
        let want = vec![us.iter().filter(|u| **u == 0).count() as u32];
        assert_eq!(c.from(&us).histogram(1).unwrap(), want, "one bin, {at}");
    });
}

/// `ctx.range(n)` against the same iterator chains over `0..n`: a sum of squares, a filter,
/// a zip with a slice, a count, a scan and a descending sort; too long a range is an error.
#[test]
fn ranges_match_plain_index_loops() {
    every_backend(|| {
        let c = ctx();
        for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
            c.set_plan_shape(shape);
            for n in SIZES {
                let at = format!("n={n}, {shape:?}");
                if has_i64() {
                    let want = (0..n as u64).fold(0u64, |a, i| a.wrapping_add(i * i));
                    let got = c.range(n).map(|i| i.cast::<u64>() * i.cast::<u64>()).sum();
                    assert_eq!(got.unwrap(), want, "sum of squares, {at}");
                }
                let want = (0..n as u32).fold(0u32, |a, i| a.wrapping_add(i.wrapping_mul(i)));
                let got = c.range(n).map(|i| i * i).sum();
                assert_eq!(got.unwrap(), want, "sum of squares in u32, {at}");
                let want: Vec<u32> = (0..n as u32).filter(|i| i % 7 == 3).collect();
                let got = c.range(n).filter(|i| (i % 7).eq(3)).to_vec().unwrap();
                assert_eq!(got, want, "filter, {at}");
                let xs = ints(n);
                let want: Vec<i32> = xs
                    .iter()
                    .enumerate()
                    .map(|(i, x)| x.wrapping_mul(i as i32))
                    .collect();
                let got = c
                    .range(n)
                    .zip(&xs)
                    .map(|(i, x)| x * i.cast::<i32>())
                    .to_vec()
                    .unwrap();
                assert_eq!(got, want, "zip, {at}");
                assert_eq!(c.range(n).count().unwrap(), n, "count, {at}");
                let want: Vec<u32> = (0..n as u32)
                    .scan(0u32, |a, i| {
                        *a = a.wrapping_add(i);
                        Some(*a)
                    })
                    .collect();
                let got = c.range(n).scan(0, |a, b| a + b).to_vec().unwrap();
                assert_eq!(got, want, "scan, {at}");
                let want: Vec<u32> = (0..n as u32).rev().collect();
                assert_eq!(c.range(n).sort_desc().to_vec().unwrap(), want, "sort, {at}");
            }
        }
        let too_long = c.range(kiln::MAX_LEN + 1).count();
        assert!(
            matches!(too_long, Err(Error::TooLarge { .. })),
            "{too_long:?}"
        );
    });
}

/// `group_by` folds and `distinct` against `BTreeMap`s and sorted, deduplicated `Vec`s:
/// counts, wrapping integer sums, a fold that is not commutative (composing affine maps, which
/// shows each key's rows are folded in input order), float min/max with NaNs, averages, float
/// keys with -0/+0 and NaNs, 64-bit keys, and all of it after maps and filters.
#[test]
fn groups_match_btreemap_folds() {
    use std::collections::BTreeMap;
    every_backend_plan_and_size(&[0usize, 1, 2, 7, 300, 16385, 100_003], |c, n, at| {
        let xs = ints(n);
        // Keys 1 apart fold in per-key slots (dense); keys 100_003 apart are sorted.
        for spread in [1, 100_003] {
            let keys: Vec<i32> = xs
                .iter()
                .map(|x| (x.rem_euclid(37) - 18) * spread)
                .collect();

            let mut counts = BTreeMap::<i32, usize>::new();
            for k in &keys {
                *counts.entry(*k).or_default() += 1;
            }
            let before = c.stats().launches;
            let got = c.from(&keys).group_by(|k| k).count().unwrap();
            // Keys spanning less than 1024 values: a min/max reduction (at most two
            // launches), then the dense plan's partials and, at these sizes, at most two
            // levels of its combine; up to 2^20 values the reduction and a histogram (at
            // most two launches); keys further apart are sorted, which takes more.
            let launches = c.stats().launches - before;
            if let (Some(lo), Some(hi)) = (keys.iter().min(), keys.iter().max()) {
                let unsorted = (*hi as i64 - *lo as i64) < 1 << 20;
                assert_eq!(launches <= 5, unsorted, "{launches} launches, {at}");
            }
            assert_eq!(
                got,
                counts.into_iter().collect::<Vec<_>>(),
                "count, spread {spread}, {at}"
            );

            let mut sums = BTreeMap::<i32, i32>::new();
            for (k, x) in keys.iter().zip(&xs) {
                let s = sums.entry(*k).or_default();
                *s = s.wrapping_add(x.wrapping_mul(40_000));
            }
            let got = c
                .from(&keys)
                .zip(&xs)
                .group_by(|(k, _)| k)
                .sum(|(_, x)| x * 40_000)
                .unwrap();
            assert_eq!(
                got,
                sums.into_iter().collect::<Vec<_>>(),
                "i32 sum, spread {spread}, {at}"
            );
            // Narrow values wrap at their own width (GPUs add them in 32-bit counters).
            let mut narrow = BTreeMap::<i32, i8>::new();
            for (k, x) in keys.iter().zip(&xs) {
                let s = narrow.entry(*k).or_default();
                *s = s.wrapping_add(*x as i8);
            }
            let got = c
                .from(&keys)
                .zip(&xs)
                .group_by(|(k, _)| k)
                .sum(|(_, x)| x.cast::<i8>())
                .unwrap();
            assert_eq!(
                got,
                narrow.into_iter().collect::<Vec<_>>(),
                "i8 sum, spread {spread}, {at}"
            );

            // Affine maps t -> a*t + b, composed in row order: (a1, b1) then (a2, b2) is
            // (a1*a2, b1*a2 + b2), wrapping.
            let mut maps = BTreeMap::<i32, (u32, u32)>::new();
            for (k, x) in keys.iter().zip(&xs) {
                let (a2, b2) = (2 * (*x as u32) + 1, *x as u32 >> 3);
                let m = maps.entry(*k).or_insert((1, 0));
                *m = (m.0.wrapping_mul(a2), m.1.wrapping_mul(a2).wrapping_add(b2));
            }
            let got = c
                .from(&keys)
                .zip(&xs)
                .group_by(|(k, _)| k)
                .fold(
                    (1u32, 0u32),
                    |(_, x)| (x.bitcast::<u32>() * 2u32 + 1u32, x.bitcast::<u32>() >> 3u32),
                    |(a1, b1), (a2, b2)| (a1 * a2, b1 * a2 + b2),
                )
                .unwrap();
            assert_eq!(
                got,
                maps.into_iter().collect::<Vec<_>>(),
                "affine fold, spread {spread}, {at}"
            );
        }
        let bytes: Vec<i8> = xs.iter().map(|x| *x as i8).collect();
        let mut counts = BTreeMap::<i8, usize>::new();
        for b in &bytes {
            *counts.entry(*b).or_default() += 1;
        }
        let before = c.stats().launches;
        let got = c.from(&bytes).group_by(|b| b).count().unwrap();
        assert_eq!(got, counts.into_iter().collect::<Vec<_>>(), "i8 keys, {at}");
        // 8-bit keys need no range pass: the dense plan's partials and up to two levels of
        // its combine (none for one chunk of rows; no launch when empty).
        let launches = c.stats().launches - before;
        let expected = if n == 0 { 0..=0 } else { 1..=3 };
        assert!(
            expected.contains(&launches),
            "{launches} launches, i8 keys, {at}"
        );

        // Float values with NaNs: min and max skip them unless a key has only NaNs.
        let fs: Vec<f32> = floats(n)
            .iter()
            .enumerate()
            .map(|(i, x)| if i % 5 == 2 { f32::NAN } else { *x })
            .collect();
        let nan_keys: Vec<u32> = (0..n as u32)
            .map(|i| if i % 5 == 2 { 1000 } else { i % 11 })
            .collect();
        let mut lows = BTreeMap::<u32, f32>::new();
        let mut highs = BTreeMap::<u32, f32>::new();
        let mut totals = BTreeMap::<u32, (f64, usize)>::new();
        for (k, x) in nan_keys.iter().zip(&fs) {
            let lo = lows.entry(*k).or_insert(f32::NAN);
            *lo = lo.min(*x);
            let hi = highs.entry(*k).or_insert(f32::NAN);
            *hi = hi.max(*x);
            let t = totals.entry(*k).or_default();
            *t = (t.0 + *x as f64, t.1 + 1);
        }
        // Bits, so -0.0 and 0.0 differ, but every NaN alike: which NaN an operation on NaNs
        // gives is not Rust's to promise (CUDA's fminf gives 0x7fffffff, Rust 0x7fc00000).
        let bits = |v: Vec<(u32, f32)>| {
            v.into_iter()
                .map(|(k, x)| (k, if x.is_nan() { u32::MAX } else { x.to_bits() }))
                .collect::<Vec<_>>()
        };
        let grouped = || c.from(&nan_keys).zip(&fs).group_by(|(k, _)| k);
        assert_eq!(
            bits(grouped().min(|(_, x)| x).unwrap()),
            bits(lows.into_iter().collect()),
            "f32 min, {at}"
        );
        assert_eq!(
            bits(grouped().max(|(_, x)| x).unwrap()),
            bits(highs.into_iter().collect()),
            "f32 max, {at}"
        );
        let got = c
            .from(&nan_keys)
            .zip(&xs)
            .group_by(|(k, _)| k)
            .average(|(_, x)| x)
            .unwrap();
        let mut want = BTreeMap::<u32, (f64, usize)>::new();
        for (k, x) in nan_keys.iter().zip(&xs) {
            let t = want.entry(*k).or_default();
            *t = (t.0 + *x as f64, t.1 + 1);
        }
        assert_eq!(got.len(), want.len(), "average, {at}");
        for ((k, avg), (wk, (sum, count))) in got.iter().zip(&want) {
            assert_eq!(k, wk, "average, {at}");
            assert!(
                close(*avg, sum / *count as f64, 1e6),
                "average of {k}, {at}"
            );
        }
        let got = grouped().sum(|(_, x)| x).unwrap();
        assert_eq!(got.len(), totals.len(), "f32 sum, {at}");
        for ((k, sum), (wk, (want, count))) in got.iter().zip(&totals) {
            assert_eq!(k, wk, "f32 sum, {at}");
            let ok = if want.is_nan() {
                sum.is_nan()
            } else {
                (*sum as f64 - want).abs() <= 1e-6 * 2000.0 * *count as f64
            };
            assert!(ok, "f32 sum of {k}: {sum} vs {want}, {at}");
        }

        // Float keys, -0/+0 and NaNs of both signs included, after a filter and a map.
        let specials = [f32::NAN, -f32::NAN, 0.0, -0.0, f32::INFINITY, -1.5];
        let fkeys: Vec<f32> = xs
            .iter()
            .enumerate()
            .map(|(i, x)| {
                if i % 3 == 0 {
                    specials[i % 6]
                } else {
                    (x % 9) as f32 * 0.5
                }
            })
            .collect();
        let kept: Vec<f32> = fkeys
            .iter()
            .zip(&xs)
            .filter(|(_, x)| *x % 4 != 1)
            .map(|(k, _)| *k)
            .collect();
        let mut sorted = kept.clone();
        sorted.sort_by(f32::total_cmp);
        let mut want: Vec<(u32, usize)> = Vec::new();
        for k in &sorted {
            match want.last_mut() {
                Some((b, count)) if *b == k.to_bits() => *count += 1,
                _ => want.push((k.to_bits(), 1)),
            }
        }
        let got: Vec<(u32, usize)> = c
            .from(&fkeys)
            .zip(&xs)
            .filter(|(_, x)| (x % 4).ne(1))
            .map(|(k, x)| (k, x))
            .group_by(|(k, _)| k)
            .count()
            .unwrap()
            .into_iter()
            .map(|(k, count)| (k.to_bits(), count))
            .collect();
        assert_eq!(got, want, "f32 keys, {at}");
        let distinct: Vec<u32> = want.iter().map(|(b, _)| *b).collect();
        let got = c
            .from(&fkeys)
            .zip(&xs)
            .filter(|(_, x)| (x % 4).ne(1))
            .map(|(k, _)| k)
            .distinct()
            .to_vec()
            .unwrap();
        assert_eq!(
            got.iter().map(|k| k.to_bits()).collect::<Vec<_>>(),
            distinct,
            "distinct f32, {at}"
        );

        // 64-bit keys differing only above bit 32, and distinct integers to a buffer.
        if has_i64() {
            let wide: Vec<u64> = xs
                .iter()
                .map(|x| (x.rem_euclid(5) as u64) << 33 | 7)
                .collect();
            let mut want = BTreeMap::<u64, i64>::new();
            for (k, x) in wide.iter().zip(&xs) {
                *want.entry(*k).or_default() += *x as i64;
            }
            let got = c
                .from(&wide)
                .zip(&xs)
                .group_by(|(k, _)| k)
                .sum(|(_, x)| x.cast::<i64>())
                .unwrap();
            assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "u64 keys, {at}");
        }
        let mut want: Vec<i32> = xs.iter().map(|x| x / 1000).collect();
        want.sort();
        want.dedup();
        let got = c
            .from(&xs)
            .map(|x| x / 1000)
            .distinct()
            .to_buffer()
            .unwrap();
        assert_eq!(
            got.download().unwrap(),
            want,
            "distinct i32 to a buffer, {at}"
        );
    });
}

/// `first` and `last` against `Iterator::next` and `last` over the same chains: after filters
/// that keep none, some or all elements, on zipped rows, and on floats whose bits must come
/// back unchanged (NaN, -0).
#[test]
fn first_and_last_match_iterator_ends() {
    every_backend_plan_and_size(&SIZES, |c, n, at| {
        let xs = ints(n);
        for bound in [i32::MIN, -999_000, 0, 999_000, i32::MAX] {
            let kept = || xs.iter().copied().filter(|x| *x > bound);
            let q = || c.from(&xs).filter(move |x| x.gt(bound));
            assert_eq!(
                q().first().unwrap(),
                kept().next(),
                "first, > {bound}, {at}"
            );
            assert_eq!(
                q().last().unwrap(),
                kept().next_back(),
                "last, > {bound}, {at}"
            );
        }
        let fs: Vec<f32> = floats(n)
            .iter()
            .enumerate()
            .map(|(i, x)| match i % 4 {
                0 => f32::NAN,
                1 => -0.0,
                _ => *x,
            })
            .collect();
        let pairs = || xs.iter().copied().zip(fs.iter().copied());
        let bits = |r: Option<(i32, f32)>| r.map(|(a, b)| (a, b.to_bits()));
        let got = c.from(&xs).zip(&fs).filter(|(x, _)| (x & 3).eq(1)).first();
        let want = pairs().find(|(x, _)| x & 3 == 1);
        assert_eq!(bits(got.unwrap()), bits(want), "first pair, {at}");
        let got = c.from(&xs).zip(&fs).last();
        assert_eq!(
            bits(got.unwrap()),
            bits(pairs().next_back()),
            "last pair, {at}"
        );
    });
}

/// Queries whose work items loop long: a sum of float remainders (whose exact `%` loops on
/// WGSL), a histogram with more bins than private counts hold, and a dense group_by over 1000
/// keys, 300000 elements each, in every plan shape. The automatic plan and the plans of
/// histograms and groups stay within a device's loop limit and give the values of plain
/// loops; a chunked fold over a device's loop limit may fail with `Unsupported`, never give
/// wrong values.
#[test]
fn long_running_work_items_give_right_values_or_a_typed_error() {
    let n = 300_000;
    let xs: Vec<f32> = (0..n).map(|i| (i % 1013) as f32 * 1.37).collect();
    let keys: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) % 1000)
        .collect();
    let want_sum: f64 = xs.iter().map(|x| (x % 0.37) as f64).sum();
    let mut want_hist = vec![0u32; 10_000];
    let mut want_groups = std::collections::BTreeMap::new();
    for (k, x) in keys.iter().zip(&xs) {
        want_hist[(*k * 7 + (*x as u32 % 7)) as usize] += 1;
        *want_groups.entry(*k).or_insert(0u32) += *x as u32;
    }
    every_backend(|| {
        let c = ctx();
        let limited = c.device().max_loop_iterations.is_some();
        for shape in [
            kiln::PlanShape::Auto,
            kiln::PlanShape::Chunked,
            kiln::PlanShape::Grouped,
        ] {
            c.set_plan_shape(shape);
            let at = format!("{shape:?} on {}", c.device().name);
            match c.from(&xs).map(|x| x % 0.37f32).sum() {
                Ok(s) => assert!(
                    close(s as f64, want_sum, want_sum),
                    "{s} vs {want_sum}, {at}"
                ),
                Err(kiln::Error::Backend(kiln::BackendError::Unsupported { feature, .. }))
                    if limited && shape == kiln::PlanShape::Chunked =>
                {
                    assert!(feature.contains("loop iterations"), "{feature}")
                }
                Err(e) => panic!("{at}: {e}"),
            }
            let hist = c
                .from(&keys)
                .zip(&xs)
                .map(|(k, x)| k * 7u32 + x.cast::<u32>() % 7u32)
                .histogram(10_000)
                .unwrap();
            assert!(hist == want_hist, "histogram of 10000 bins, {at}");
            let groups = c
                .from(&keys)
                .zip(&xs)
                .group_by(|(k, _)| k)
                .sum(|(_, x)| x.cast::<u32>())
                .unwrap();
            let want: Vec<(u32, u32)> = want_groups.iter().map(|(k, v)| (*k, *v)).collect();
            assert!(groups == want, "group_by of 1000 keys, {at}");
        }
        c.set_plan_shape(kiln::PlanShape::Auto);
    });
}

/// Queries over host slices that start at odd byte offsets, read and written: a backend that
/// uses host memory in place (OpenCL on a device sharing the host's memory) sees pointers
/// without the alignment of a buffer it allocated, and must still give the plain loop's
/// results, and write only the slice it was given.
#[test]
fn queries_over_subslices_at_any_offset_match_plain_loops() {
    every_backend_plan_and_size(&[1, 7, 16385, 100_003], |c, n, at| {
        let bytes: Vec<u8> = (0..n + 3).map(|i| (i * 37 % 251) as u8).collect();
        for start in 1..4 {
            let part = &bytes[start..start + n.min(bytes.len() - start)];
            let want: u64 = part.iter().map(|b| *b as u64 * 3).sum();
            let got = c.from(part).map(|b| b.cast::<u32>() * 3).sum().unwrap();
            assert_eq!(got as u64, want, "u8 sum from byte {start}, {at}");
            let want: Vec<u8> = part.iter().filter(|b| **b % 3 == 0).copied().collect();
            let got = c.from(part).filter(|b| (b % 3u8).eq(0u8)).to_vec().unwrap();
            assert_eq!(got, want, "u8 filter from byte {start}, {at}");
        }
        let xs = floats(n + 1);
        let mut out = vec![-1.0f32; n + 2];
        let written = c
            .from(&xs[1..])
            .map(|x| x * 2.0 + 1.0)
            .write_to(&mut out[1..n + 1])
            .unwrap();
        assert_eq!(written, n, "{at}");
        assert_eq!(out[0], -1.0, "nothing before the output slice, {at}");
        assert_eq!(out[n + 1], -1.0, "nothing after the output slice, {at}");
        for i in 0..n {
            assert_eq!(out[i + 1], xs[i + 1] * 2.0 + 1.0, "element {i}, {at}");
        }
    });
}

/// Rows of two or more 8-bit, 16-bit or bool columns (each packed into 32-bit words on wgpu,
/// where the writer once declared one temporary per column under the same name).
#[test]
fn rows_of_several_narrow_columns_come_back_whole() {
    every_backend_plan_and_size(&[0, 1, 5, 16385], |c, n, at| {
        let a: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
        let want: Vec<(u8, u8)> = a.iter().map(|&x| (x, x)).collect();
        assert_eq!(
            c.from(&a).zip(&a).to_vec().unwrap(),
            want,
            "zip of u8, {at}"
        );
        let want: Vec<(u8, u8)> = a.iter().map(|&x| (x, x.wrapping_add(1))).collect();
        let got = c.from(&a).map(|x| (x, x + 1u8)).to_vec().unwrap();
        assert_eq!(got, want, "(x, x + 1) of u8, {at}");
        let f: Vec<f32> = (0..n).map(|i| (i % 10) as f32 * 0.1 - 0.25).collect();
        let want: Vec<(bool, bool)> = f.iter().map(|&x| (x > 0.0, x < 0.5)).collect();
        let got = c.from(&f).map(|x| (x.gt(0.0), x.lt(0.5))).to_vec().unwrap();
        assert_eq!(got, want, "two bools, {at}");
        let h: Vec<i16> = (0..n).map(|i| (i as i16).wrapping_mul(-977)).collect();
        let want: Vec<(i16, u8, bool)> = h.iter().map(|&x| (x, x as u8, x < 0)).collect();
        let got = c
            .from(&h)
            .map(|x| (x, x.cast::<u8>(), x.lt(0i16)))
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "i16, u8 and bool, {at}");
    });
}

/// A histogram of u32::MAX bins needs 16 GiB of counts: where the host cannot provide them
/// the query is a typed `HostOutOfMemory`, not an aborted process. The test runs itself again
/// as a child whose address space `ulimit -v` caps at 3 GiB (Linux and macOS shells).
#[test]
fn host_allocations_a_query_sizes_fail_typed_when_memory_is_short() {
    if std::env::var_os("KILN_HOST_OOM_CHILD").is_some() {
        let c = Context::with_backend(BackendKind::Cpu).unwrap();
        match c.from(&[1u32, 2, 3]).histogram(u32::MAX) {
            Err(Error::HostOutOfMemory { bytes, what }) => {
                assert_eq!(bytes, u32::MAX as u64 * 4);
                assert!(what.contains("histogram"), "{what}");
            }
            other => panic!("expected HostOutOfMemory, got {other:?}"),
        }
        assert_eq!(c.from(&[1u32, 2, 3]).histogram(4).unwrap(), [0, 1, 1, 1]);
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 3000000 && exec \"$0\" --exact \"$1\" --nocapture")
        .arg(&exe)
        .arg(common::test_path(
            module_path!(),
            "host_allocations_a_query_sizes_fail_typed_when_memory_is_short",
        ))
        .env("KILN_HOST_OOM_CHILD", "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed: {text}");
    assert!(text.contains("1 passed"), "{text}");
}

/// The README tour's inline snippets, as written there, on every backend.
#[test]
fn the_readme_tours_snippets_run_as_written() {
    every_backend(|| {
        let ctx = ctx();
        let xs: Vec<f32> = (0..1000).map(|i| (i % 7) as f32).collect();
        let run: Vec<f32> = ctx.from(&xs).scan(0.0, |a, b| a + b).to_vec().unwrap();
        let want: Vec<f32> = xs
            .iter()
            .scan(0.0, |a, x| {
                *a += x;
                Some(*a)
            })
            .collect();
        assert_eq!(run, want, "scan(0.0, |a, b| a + b)");
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 37) as u8).collect();
        let mut counts = vec![0u32; 256];
        bytes.iter().for_each(|b| counts[*b as usize] += 1);
        assert_eq!(
            ctx.from(&bytes).histogram(256).unwrap(),
            counts,
            "histogram(256)"
        );
        let (b, c) = (xs.clone(), xs.clone());
        let rows = ctx.from(&xs).zip(&b).zip(&c).to_vec().unwrap();
        assert_eq!(
            rows[3],
            ((3.0, 3.0), 3.0),
            ".zip(&b).zip(&c) gives ((a, b), c)"
        );
        assert_eq!(
            ctx.range(5).to_vec().unwrap(),
            [0, 1, 2, 3, 4],
            "ctx.range(n)"
        );
        let b = ctx.upload(&xs).unwrap();
        assert_eq!(ctx.from_buffer(&b).sum().unwrap(), xs.iter().sum::<f32>());
        assert_eq!(b.download().unwrap(), xs);
        ctx.synchronize().unwrap();
    });
}

/// `zip_bits` against plain Rust bit extraction: every bit offset within and past the first
/// byte, at every size and plan shape, through a filter and a sum; too few bits is
/// `LengthMismatch`.
#[test]
fn zipped_bitmaps_read_each_elements_bit() {
    every_backend_plan_and_size(&SIZES, |c, n, at| {
        let xs = ints(n);
        // Enough bytes for the largest offset below: 31 + n bits.
        let bits: Vec<u8> = (0..n / 8 + 5)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8)
            .collect();
        let bit = |k: usize| (bits[k / 8] >> (k % 8)) & 1;
        for offset in [0, 1, 7, 8, 13, 31] {
            let got = c.from(&xs).zip_bits(&bits, offset).to_vec().unwrap();
            let want: Vec<(i32, u8)> = xs
                .iter()
                .enumerate()
                .map(|(i, x)| (*x, bit(offset + i)))
                .collect();
            assert_eq!(got, want, "offset {offset}, {at}");
            let kept = c
                .from(&xs)
                .zip_bits(&bits, offset)
                .filter(|(_, b)| b.eq(1u8))
                .map(|(x, _)| x)
                .sum()
                .unwrap();
            let want = (0..n)
                .filter(|i| bit(offset + i) == 1)
                .fold(0i32, |a, i| a.wrapping_add(xs[i]));
            assert_eq!(kept, want, "sum of set rows, offset {offset}, {at}");
        }
        let short = c.from(&xs).zip_bits(&bits[..n / 8], 1).to_vec();
        match short {
            Err(Error::LengthMismatch { left, right }) if n > 0 => {
                assert_eq!((left, right), (n, (n / 8 * 8).saturating_sub(1)), "{at}")
            }
            Ok(rows) => assert!(n == 0 && rows.is_empty(), "{at}: {} rows", rows.len()),
            other => panic!("{at}: expected LengthMismatch, got {other:?}"),
        }
    });
}

#[test]
fn contains_finds_what_slice_contains_finds() {
    every_backend(|| {
        let c = ctx();
        let fs = [
            1.5f32,
            -0.0,
            f32::INFINITY,
            f32::NAN,
            -3.25,
            f32::MIN_POSITIVE,
            7.0,
        ];
        for v in [
            1.5f32,
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            2.0,
            -3.25,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
        ] {
            assert_eq!(c.from(&fs).contains(v).unwrap(), fs.contains(&v), "f32 {v}");
        }
        // One match, at each chunk's edge in turn, in a long input of even numbers.
        let n = 100_003i32;
        let xs: Vec<i32> = (0..n).map(|i| i * 2 - 70_000).collect();
        for at in [0, 1, 16_383, 16_384, 65_536, n - 1] {
            let v = xs[at as usize];
            assert!(c.from(&xs).contains(v).unwrap(), "{v} at {at}");
            assert!(!c.from(&xs).contains(v + 1).unwrap(), "{} (odd)", v + 1);
        }
        for v in [i32::MIN, i32::MAX, -70_000, 130_004] {
            assert_eq!(c.from(&xs).contains(v).unwrap(), xs.contains(&v), "i32 {v}");
        }
        // After a filter, the values it drops are not found.
        for v in [-70_000, -69_998, 0, 6, 8, 129_998, 130_002] {
            let want = xs.iter().any(|x| x % 3 == 0 && *x == v);
            let got = c.from(&xs).filter(|x| (x % 3).eq(0)).contains(v);
            assert_eq!(got.unwrap(), want, "filtered, {v}");
        }
        // After a map, over a buffer.
        let b = c.upload(&xs).unwrap();
        assert!(c.from_buffer(&b).map(|x| x + 1).contains(-69_999).unwrap());
        assert!(!c.from_buffer(&b).map(|x| x + 1).contains(-70_000).unwrap());
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i % 200) as u8 + 50).collect();
        for v in [0u8, 49, 50, 249, 250, 255] {
            assert_eq!(
                c.from(&bytes).contains(v).unwrap(),
                bytes.contains(&v),
                "u8 {v}"
            );
        }
        assert!(!c.from::<u8>(&[]).contains(0).unwrap());
    });
}

/// `take` and `skip` against `Iterator::take` and `skip` over the same chains, at the
/// planner's edge sizes.
#[test]
fn take_and_skip_match_iterator_take_and_skip() {
    every_backend(|| {
        let c = ctx();
        for n in SIZES {
            let xs: Vec<i32> = (0..n as i32).map(|i| (i * 7919) % 1013 - 500).collect();
            let cuts = [0, 1, 3, n / 2, n.saturating_sub(1), n, n + 5, usize::MAX];
            for &a in &cuts {
                let want: Vec<i32> = xs.iter().copied().skip(a).collect();
                assert_eq!(
                    c.from(&xs).skip(a).to_vec().unwrap(),
                    want,
                    "n {n}: skip {a}"
                );
                let want: Vec<i32> = xs.iter().copied().take(a).collect();
                assert_eq!(
                    c.from(&xs).take(a).to_vec().unwrap(),
                    want,
                    "n {n}: take {a}"
                );
            }
            let (a, b) = (n / 3, n / 2 + 1);
            let want: i32 = xs
                .iter()
                .skip(a)
                .take(b)
                .fold(0, |s, x| s.wrapping_add(x * 3));
            let got = c.from(&xs).skip(a).take(b).map(|x| x * 3).sum();
            assert_eq!(got.unwrap(), want, "n {n}: skip {a} take {b} map sum");
            let want: Vec<i32> = xs
                .iter()
                .copied()
                .take(b)
                .skip(a)
                .filter(|x| *x > 0)
                .collect();
            let got = c.from(&xs).take(b).skip(a).filter(|x| x.gt(0)).to_vec();
            assert_eq!(got.unwrap(), want, "n {n}: take {b} skip {a} filter");
            let want = xs.iter().skip(2).take(n / 4).count();
            assert_eq!(
                c.from(&xs).skip(2).take(n / 4).count().unwrap(),
                want,
                "n {n}: count"
            );
            let want: Vec<(u32, i32)> = xs
                .iter()
                .copied()
                .enumerate()
                .skip(a)
                .map(|(i, x)| (i as u32, x))
                .collect();
            let got = c.from(&xs).enumerate().skip(a).to_vec();
            assert_eq!(
                got.unwrap(),
                want,
                "n {n}: enumerate then skip keeps source positions"
            );
            let mut want: Vec<i32> = xs.iter().copied().skip(a).take(b).collect();
            want.sort();
            assert_eq!(
                c.from(&xs).skip(a).take(b).sort().to_vec().unwrap(),
                want,
                "n {n}: sort"
            );
            let want = xs.iter().copied().skip(a).take(b).next();
            assert_eq!(
                c.from(&xs).skip(a).take(b).first().unwrap(),
                want,
                "n {n}: first"
            );
            let want = xs.iter().copied().skip(a).take(b).next_back();
            assert_eq!(
                c.from(&xs).skip(a).take(b).last().unwrap(),
                want,
                "n {n}: last"
            );
        }
        // Over a buffer, zipped, grouped.
        let keys: Vec<u32> = (0..50_003u32).map(|i| i % 13).collect();
        let vals: Vec<f32> = (0..50_003u32).map(|i| (i % 101) as f32).collect();
        let kb = c.upload(&keys).unwrap();
        let got = c
            .from_buffer(&kb)
            .zip(&vals)
            .skip(20_000)
            .take(17_000)
            .group_by(|(k, _)| k)
            .sum(|(_, v)| v)
            .unwrap();
        let mut want = std::collections::BTreeMap::<u32, f32>::new();
        for (k, v) in keys.iter().zip(&vals).skip(20_000).take(17_000) {
            *want.entry(*k).or_default() += v;
        }
        assert_eq!(
            got,
            want.into_iter().collect::<Vec<_>>(),
            "group_by after skip/take"
        );
    });
}

/// `take_while` and `skip_while` against `Iterator::take_while` and `skip_while`: the first
/// failing row at the start, inside, at the end of the rows or nowhere; after filters (a
/// failing row the filter drops does not stop them), maps, `skip`/`take` on either side, a
/// float NaN (which fails every comparison); several terminals.
#[test]
fn take_while_and_skip_while_match_the_iterator_methods() {
    every_backend(|| {
        let c = ctx();
        for n in [0usize, 1, 2, 7, 16383, 16385, 100_003] {
            for fail_at in [0, 1, n / 2, n.saturating_sub(1), n] {
                // Values below 1000 hold; a 1_000_001 (kept by the filter below) fails at
                // `fail_at`, and a 999_999_999 (dropped by it) fails at `fail_at / 2`.
                let mut xs: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % 1000).collect();
                if fail_at < n {
                    xs[fail_at] = 1_000_001;
                    if fail_at / 2 < fail_at {
                        xs[fail_at / 2] = 999_999_999;
                    }
                }
                let at = format!("n {n}, fails at {fail_at}");
                let holds = |x: &u32| *x < 1000;
                let want: Vec<u32> = xs.iter().copied().take_while(holds).collect();
                let got = c.from(&xs).take_while(|x| x.lt(1000u32)).to_vec();
                assert_eq!(got.unwrap(), want, "take_while, {at}");
                let want: Vec<u32> = xs.iter().copied().skip_while(holds).collect();
                let got = c.from(&xs).skip_while(|x| x.lt(1000u32)).to_vec();
                assert_eq!(got.unwrap(), want, "skip_while, {at}");

                let kept = |x: &u32| !x.is_multiple_of(3);
                let want: Vec<u32> = xs.iter().copied().filter(kept).take_while(holds).collect();
                let got = c
                    .from(&xs)
                    .filter(|x| (x % 3u32).ne(0u32))
                    .take_while(|x| x.lt(1000u32))
                    .to_vec();
                assert_eq!(got.unwrap(), want, "filter take_while, {at}");
                let want = xs
                    .iter()
                    .copied()
                    .filter(kept)
                    .skip_while(holds)
                    .fold(0u32, u32::wrapping_add);
                let got = c
                    .from(&xs)
                    .filter(|x| (x % 3u32).ne(0u32))
                    .skip_while(|x| x.lt(1000u32))
                    .sum();
                assert_eq!(got.unwrap(), want, "filter skip_while sum, {at}");

                let want = xs
                    .iter()
                    .map(|x| x * 2)
                    .skip(1)
                    .take_while(|x| *x < 2000)
                    .filter(|x| x % 4 == 0)
                    .count();
                let got = c
                    .from(&xs)
                    .map(|x| x * 2u32)
                    .skip(1)
                    .take_while(|x| x.lt(2000u32))
                    .filter(|x| (x % 4u32).eq(0u32))
                    .count();
                assert_eq!(got.unwrap(), want, "map skip take_while filter count, {at}");
                let want: Vec<u32> = xs
                    .iter()
                    .copied()
                    .skip_while(holds)
                    .skip(1)
                    .take(3)
                    .collect();
                let got = c
                    .from(&xs)
                    .skip_while(|x| x.lt(1000u32))
                    .skip(1)
                    .take(3)
                    .to_vec();
                assert_eq!(got.unwrap(), want, "skip_while skip take, {at}");
                let want = xs.iter().copied().take(n / 2 + 1).take_while(holds).last();
                let got = c
                    .from(&xs)
                    .take(n / 2 + 1)
                    .take_while(|x| x.lt(1000u32))
                    .last();
                assert_eq!(got.unwrap(), want, "take take_while last, {at}");
            }
            let fs: Vec<f32> = (0..n)
                .map(|i| if i == n / 3 { f32::NAN } else { i as f32 })
                .collect();
            let want: Vec<f32> = fs.iter().copied().take_while(|x| *x >= 0.0).collect();
            let got = c.from(&fs).take_while(|x| x.ge(0.0)).to_vec().unwrap();
            assert_eq!(got, want, "take_while stops at NaN, n {n}");
        }
    });
}

/// `take` and `skip` bounds are constants that become parameters: after two runs, other
/// bounds compile nothing.
#[test]
fn new_take_and_skip_bounds_reuse_the_kernels() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<u32> = (0..10_000).collect();
        let run = |a: usize, b: usize| c.from(&xs).skip(a).take(b).map(|x| x * 2).sum().unwrap();
        let want = |a: usize, b: usize| xs.iter().skip(a).take(b).map(|x| x * 2).sum::<u32>();
        assert_eq!(run(1, 2), want(1, 2));
        assert_eq!(run(3, 40), want(3, 40));
        let compiled = c.stats().compilations;
        for (a, b) in [(0, 0), (17, 1000), (9_999, 5), (5_000, 5_000), (10_000, 1)] {
            assert_eq!(run(a, b), want(a, b), "skip {a} take {b}");
        }
        assert_eq!(
            c.stats().compilations,
            compiled,
            "new bounds compiled kernels"
        );
    });
}
