//! The baselines a performance engineer writes for the query cases: rayon over chunks of
//! 16384 elements, each chunk folded in 16 independent lanes (so the compiler can keep them
//! in vector registers and no lane waits on another), filters in two passes into one
//! allocation, and every loop compiled for the widest vectors the host has (AVX-512 where
//! present, as `-C target-cpu=native` would give a whole build; the rest of the bench keeps
//! the portable build so it runs on any x86-64).
//!
//! Each loop runs inside the closure rayon calls once per chunk: a closure compiled for
//! AVX-512 cannot be inlined into code compiled without it, so a per-element closure handed
//! to rayon's or std's generic iterator code would be called once per element. Maps have no
//! tuned row: rayon's `par_iter().map().collect()` already writes in place, vectorized, and
//! the chunked copies of it tried here measured 1.5-2.5x slower than it, not faster.

use rayon::prelude::*;

/// Elements per rayon task.
const CHUNK: usize = 1 << 14;
/// Independent accumulators per chunk.
const LANES: usize = 16;

/// Defines `$name`, which runs `$body` compiled for AVX-512 (F, BW, DQ, VL) with FMA and
/// BMI2 when the host has them, and as built otherwise. Closures in the body inherit the
/// features, so rayon's per-chunk closures are compiled for them too.
macro_rules! native {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) -> $r:ty $body:block) => {
        $(#[$m])*
        pub(super) fn $name($($a: $t),*) -> $r {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi2")]
                fn wide($($a: $t),*) -> $r $body
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("bmi2")
                {
                    // SAFETY: the host has every feature `wide` is compiled for.
                    return unsafe { wide($($a),*) };
                }
            }
            $body
        }
    };
}

/// Folds `xs` with `add` in [`LANES`] accumulators from `zero`, then the lanes and the
/// remainder into one value.
#[inline(always)]
fn lanes<T: Copy, A: Copy>(
    xs: &[T],
    zero: A,
    step: impl Fn(A, T) -> A,
    join: impl Fn(A, A) -> A,
) -> A {
    let mut acc = [zero; LANES];
    let mut blocks = xs.chunks_exact(LANES);
    for block in &mut blocks {
        for j in 0..LANES {
            acc[j] = step(acc[j], block[j]);
        }
    }
    let tail = blocks.remainder().iter().fold(zero, |a, x| step(a, *x));
    acc.into_iter().fold(tail, join)
}

native! {
    /// The sum of `xs`.
    fn sum_f32(xs: &[f32]) -> f32 {
        xs.par_chunks(CHUNK)
            .map(|c| lanes(c, 0.0f32, |a, x| a + x, |a, b| a + b))
            .sum()
    }
}

native! {
    /// The largest of `xs`, NaN skipped (NaN when all are).
    fn max_f32(xs: &[f32]) -> f32 {
        xs.par_chunks(CHUNK)
            .map(|c| lanes(c, f32::NAN, f32::max, f32::max))
            .reduce(|| f32::NAN, f32::max)
    }
}

native! {
    /// The first position of the largest of `xs` (of the first element when all are NaN):
    /// the largest as [`max_f32`] finds it, then the first chunk holding it, searched in order.
    fn argmax_f32(xs: &[f32]) -> Option<usize> {
        if xs.is_empty() {
            return None;
        }
        let m = max_f32(xs);
        let found = xs
            .par_chunks(CHUNK)
            .enumerate()
            .find_first(|(_, c)| c.contains(&m));
        Some(found.map_or(0, |(k, c)| {
            k * CHUNK + c.iter().position(|x| *x == m).unwrap_or(0)
        }))
    }
}

native! {
    /// The map-filter-map-sum case: `x * 2.0`, kept above 1000, plus 100, summed; branch-free.
    fn fused_f32(xs: &[f32]) -> f32 {
        xs.par_chunks(CHUNK)
            .map(|c| {
                lanes(
                    c,
                    0.0f32,
                    |a, x| {
                        let y = x * 2.0;
                        a + if y > 1000.0 { y + 100.0 } else { 0.0 }
                    },
                    |a, b| a + b,
                )
            })
            .sum()
    }
}

native! {
    /// The sum of the squares of `xs`.
    fn squares_f64(xs: &[f64]) -> f64 {
        xs.par_chunks(CHUNK)
            .map(|c| lanes(c, 0.0f64, |a, x| a + x * x, |a, b| a + b))
            .sum()
    }
}

native! {
    /// The largest of `xs`, NaN skipped.
    fn max_f64(xs: &[f64]) -> f64 {
        xs.par_chunks(CHUNK)
            .map(|c| lanes(c, f64::NAN, f64::max, f64::max))
            .reduce(|| f64::NAN, f64::max)
    }
}

native! {
    /// The wrapping sum of `xs`.
    fn sum_i64(xs: &[i64]) -> i64 {
        xs.par_chunks(CHUNK)
            .map(|c| lanes(c, 0i64, i64::wrapping_add, i64::wrapping_add))
            .reduce(|| 0, i64::wrapping_add)
    }
}

native! {
    /// The largest of `xs` (`i64::MIN` for none).
    fn max_i64(xs: &[i64]) -> i64 {
        xs.par_chunks(CHUNK)
            .map(|c| lanes(c, i64::MIN, i64::max, i64::max))
            .reduce(|| i64::MIN, i64::max)
    }
}

native! {
    /// The elements below 500, in order: each chunk counts its kept elements, a prefix sum
    /// over the counts places each chunk, and each chunk writes its elements into one
    /// allocation.
    fn filter_below_500(xs: &[f32]) -> Vec<f32> {
        let counts: Vec<usize> = xs
            .par_chunks(CHUNK)
            .map(|c| lanes(c, 0usize, |a, x| a + (x < 500.0) as usize, |a, b| a + b))
            .collect();
        let total = counts.iter().sum();
        let mut out = Vec::with_capacity(total);
        let mut rest = &mut out.spare_capacity_mut()[..total];
        let mut pieces = Vec::with_capacity(counts.len());
        for &n in &counts {
            let (piece, tail) = rest.split_at_mut(n);
            pieces.push(piece);
            rest = tail;
        }
        pieces
            .into_par_iter()
            .zip(xs.par_chunks(CHUNK))
            .for_each(|(piece, c)| {
                let mut at = 0;
                for &x in c {
                    // Written unconditionally, advanced only when kept: no branch to mispredict.
                    if at < piece.len() {
                        piece[at].write(x);
                    }
                    at += (x < 500.0) as usize;
                }
            });
        // SAFETY: each chunk wrote its kept elements, its count of them, into its piece, and
        // the pieces cover the `total` elements.
        unsafe { out.set_len(total) };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each tuned baseline computes what the plain iterator code does.
    #[test]
    fn tuned_baselines_equal_plain_rust() {
        let xs: Vec<f32> = (0..100_003u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) % 1000) as f32 + 0.25)
            .collect();
        let xd: Vec<f64> = xs.iter().map(|x| *x as f64 - 500.0).collect();
        let xl: Vec<i64> = xs.iter().map(|x| (*x as i64) << 33).collect();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-4 * b.abs().max(1.0);
        assert!(close(
            sum_f32(&xs) as f64,
            xs.iter().map(|x| *x as f64).sum()
        ));
        assert_eq!(max_f32(&xs), xs.iter().copied().fold(f32::NAN, f32::max));
        // The first of several largest, past the first chunk; none of none; 0 of all NaN.
        let mut ys = xs.clone();
        ys[70_001] = 5000.0;
        ys[90_000] = 5000.0;
        assert_eq!(argmax_f32(&ys), Some(70_001));
        let largest = xs.iter().copied().fold(f32::NAN, f32::max);
        assert_eq!(argmax_f32(&xs), xs.iter().position(|x| *x == largest));
        assert_eq!(argmax_f32(&[]), None);
        assert_eq!(argmax_f32(&[f32::NAN; 3]), Some(0));
        let fused: f64 = xs
            .iter()
            .map(|x| x * 2.0)
            .filter(|x| *x > 1000.0)
            .map(|x| (x + 100.0) as f64)
            .sum();
        assert!(close(fused_f32(&xs) as f64, fused));
        assert!(close(squares_f64(&xd), xd.iter().map(|x| x * x).sum()));
        assert_eq!(max_f64(&xd), xd.iter().copied().fold(f64::NAN, f64::max));
        assert_eq!(
            sum_i64(&xl),
            xl.iter().fold(0i64, |a, b| a.wrapping_add(*b))
        );
        assert_eq!(max_i64(&xl), *xl.iter().max().unwrap());
        let kept: Vec<f32> = xs.iter().copied().filter(|x| *x < 500.0).collect();
        assert_eq!(filter_below_500(&xs), kept);
        assert!(filter_below_500(&[]).is_empty());
    }
}
