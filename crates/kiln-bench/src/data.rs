//! The inputs every case reads, made once per run, and the timing loop.

use rayon::prelude::*;
use std::time::Instant;

/// A run's settings and inputs.
pub struct Bench {
    /// Elements per input.
    pub n: usize,
    /// The most timed repetitions of a case.
    pub reps: usize,
    /// `--quick`: smaller gallery problems and fewer cached calls.
    pub quick: bool,
    /// `n` f32 values in [0, 1000), in a hashed order.
    pub xs: Vec<f32>,
    /// The same range of values from a xorshift generator: which elements a filter keeps is
    /// random, so code that branches on it mispredicts half the time (`xs`'s hashed order is
    /// regular enough for a branch predictor to learn).
    pub noisy: Vec<f32>,
    /// `xs` in f64, centred on zero.
    pub xd: Vec<f64>,
    /// `xs` as i64, scaled past 32 bits and centred on zero.
    pub xl: Vec<i64>,
    /// `n` bytes spread over all 256 values.
    pub levels: Vec<u8>,
    /// `n` 16-bit samples spread over all 65536 values.
    pub samples: Vec<u16>,
    /// Their histogram, from [`wide_histogram`].
    pub samples_histogram: Vec<u32>,
    /// `n` ids among 65521 values.
    pub ids: Vec<u32>,
    /// Distinct 32-bit keys in a scrambled order (multiplying by an odd constant permutes
    /// u32).
    pub keys32: Vec<u32>,
    /// `keys32` sorted.
    pub sorted_keys32: Vec<u32>,
}

impl Bench {
    /// The inputs for `2^log2` elements.
    pub fn new(log2: u32, reps: usize, quick: bool) -> Bench {
        let n = 1usize << log2;
        let xs: Vec<f32> = (0..n)
            .map(|i| ((i.wrapping_mul(2_654_435_761)) % 1_000_000) as f32 * 1e-3)
            .collect();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let noisy = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state % 1_000_000) as f32 * 1e-3
            })
            .collect();
        let hashed = |i: u32| i.wrapping_mul(2_654_435_761);
        let samples: Vec<u16> = (0..n as u32).map(|i| (hashed(i) >> 16) as u16).collect();
        let keys32: Vec<u32> = (0..n as u32).map(hashed).collect();
        let mut sorted_keys32 = keys32.clone();
        sorted_keys32.par_sort_unstable();
        Bench {
            n,
            reps,
            quick,
            xd: xs.iter().map(|&x| x as f64 - 500.0).collect(),
            xl: xs
                .iter()
                .map(|&x| (x as i64 - 500) * 1_000_000_007)
                .collect(),
            levels: (0..n as u32).map(|i| (hashed(i) >> 24) as u8).collect(),
            samples_histogram: wide_histogram(&samples),
            samples,
            ids: xs.iter().map(|x| x.to_bits() % 65_521).collect(),
            keys32,
            sorted_keys32,
            noisy,
            xs,
        }
    }

    /// Best wall time in milliseconds of up to `reps` runs of `f` after one warm-up; stops
    /// repeating once three seconds have been spent, so slow backends finish.
    pub fn best<T>(&self, mut f: impl FnMut() -> T) -> f64 {
        std::hint::black_box(f());
        let start = Instant::now();
        let mut best = f64::INFINITY;
        for _ in 0..self.reps {
            let t = Instant::now();
            std::hint::black_box(f());
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
            if start.elapsed().as_secs_f64() > 3.0 {
                break;
            }
        }
        best
    }
}

/// The histogram of 16-bit `samples` in rayon: one count array per 2^20-element chunk, added
/// up.
pub fn wide_histogram(samples: &[u16]) -> Vec<u32> {
    per_chunk_sums(samples, 1 << 20, 1 << 16, |h, s| h[*s as usize] += 1)
}

/// One array of `slots` values per `chunk` elements of `items`, each filled by `add`, added
/// up: rayon's privatized histograms and dense per-key sums.
pub fn per_chunk_sums<I: Sync, V>(
    items: &[I],
    chunk: usize,
    slots: usize,
    add: impl Fn(&mut [V], &I) + Sync,
) -> Vec<V>
where
    V: Default + Clone + Send + std::ops::AddAssign,
{
    items
        .par_chunks(chunk)
        .map(|c| {
            let mut h = vec![V::default(); slots];
            c.iter().for_each(|b| add(&mut h, b));
            h
        })
        .reduce(
            || vec![V::default(); slots],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                a
            },
        )
}
