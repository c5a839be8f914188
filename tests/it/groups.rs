//! Groupings by tuple keys against `BTreeMap`s keyed by the same tuples, and counts and other
//! folds by one integer key over wide spans of values; other groupings by one value are in `queries`.

use crate::common::{every_backend_plan_and_size, has_i64, spread, SPECIAL_F32};
use kiln::Context;
use std::collections::BTreeMap;

/// What the host gives per key, in the order of `ord(key)` (which must tell keys apart as
/// their bits do): the rows' count, the wrapping sum of their `xs`, and the affine maps
/// `t -> (2x + 1) t + (x >> 3)` of their `xs` composed in row order (which only a fold in
/// input order gets right).
struct Host<K> {
    counts: Vec<(K, usize)>,
    sums: Vec<(K, u32)>,
    maps: Vec<(K, (u32, u32))>,
}

fn host<K: Copy, O: Ord>(keys: &[K], xs: &[u32], ord: impl Fn(K) -> O) -> Host<K> {
    let mut groups = BTreeMap::<O, (K, usize, u32, (u32, u32))>::new();
    for (k, x) in keys.iter().zip(xs) {
        let g = groups.entry(ord(*k)).or_insert((*k, 0, 0, (1, 0)));
        let (a2, b2) = (2 * x + 1, x >> 3);
        g.1 += 1;
        g.2 = g.2.wrapping_add(*x);
        g.3 = (
            g.3 .0.wrapping_mul(a2),
            g.3 .1.wrapping_mul(a2).wrapping_add(b2),
        );
    }
    let groups: Vec<_> = groups.into_values().collect();
    Host {
        counts: groups.iter().map(|g| (g.0, g.1)).collect(),
        sums: groups.iter().map(|g| (g.0, g.2)).collect(),
        maps: groups.iter().map(|g| (g.0, g.3)).collect(),
    }
}

/// An `f32`'s bits as an integer of the same order as `f32::total_cmp`.
fn total_order(x: f32) -> u32 {
    let b = x.to_bits();
    if b >> 31 == 1 {
        !b
    } else {
        b | 1 << 31
    }
}

/// The launches `run` makes on `c`.
fn launches<R>(c: &Context, run: impl FnOnce() -> R) -> (R, u64) {
    let before = c.stats().launches;
    let r = run();
    (r, c.stats().launches - before)
}

/// `group_by` with keys of two to four parts: integer tuples whose parts' spans multiply to
/// at most 1024 (folded without a sort, which takes few launches) and to more (sorted),
/// keys of 64 and 128 bits, float parts with NaNs of both signs and both zeros (grouped by
/// their bits, in total order), after a filter and a filter that keeps nothing, and a key
/// closure whose captured constant changes between runs (which moves the parts' ranges).
#[test]
fn tuple_keys_group_as_btreemaps_of_tuples() {
    every_backend_plan_and_size(&[0, 1, 2, 7, 300, 16385, 100_003], |c, n, at| {
        let idx: Vec<u32> = (0..n as u32).collect();
        let xs: Vec<u32> = idx.iter().map(|&i| spread(i ^ 0x1234, 1 << 20)).collect();

        // (u16, i8) spanning 7 x 9 values: the dense plan after a min/max reduction.
        let a: Vec<u16> = idx.iter().map(|&i| spread(i, 7) as u16 + 1000).collect();
        let b: Vec<i8> = idx.iter().map(|&i| spread(i ^ 0x55, 9) as i8 - 4).collect();
        let keys: Vec<(u16, i8)> = a.iter().copied().zip(b.iter().copied()).collect();
        let want = host(&keys, &xs, |k| k);
        let q = || c.from(&a).zip(&b).zip(&xs).group_by(|((a, b), _)| (a, b));
        let (got, used) = launches(c, || q().count().unwrap());
        assert_eq!(got, want.counts, "(u16, i8) count, {at}");
        // A reduction (one or two launches), the partials and one or two combine levels.
        assert!(used <= 5, "(u16, i8) count took {used} launches, {at}");
        assert_eq!(
            q().sum(|(_, x)| x).unwrap(),
            want.sums,
            "(u16, i8) sum, {at}"
        );
        let got = q()
            .fold(
                (1u32, 0u32),
                |(_, x)| (x * 2u32 + 1u32, x >> 3u32),
                |(a1, b1), (a2, b2)| (a1 * a2, b1 * a2 + b2),
            )
            .unwrap();
        assert_eq!(got, want.maps, "(u16, i8) affine fold, {at}");

        // After filters: every third row dropped, then every row.
        let kept: Vec<usize> = (0..n).filter(|i| !xs[*i].is_multiple_of(3)).collect();
        let kept_keys: Vec<(u16, i8)> = kept.iter().map(|i| keys[*i]).collect();
        let kept_xs: Vec<u32> = kept.iter().map(|i| xs[*i]).collect();
        let want = host(&kept_keys, &kept_xs, |k| k);
        let filtered = || q_filtered(c, &a, &b, &xs, 3);
        assert_eq!(
            filtered().count().unwrap(),
            want.counts,
            "filtered count, {at}"
        );
        assert_eq!(
            filtered().sum(|(_, x)| x).unwrap(),
            want.sums,
            "filtered sum, {at}"
        );
        assert_eq!(q_filtered(c, &a, &b, &xs, 1).count().unwrap(), [], "{at}");

        // A captured constant in the key: each run's parts span other values, which the
        // plans take as parameters once they have seen two (the third run compiles nothing).
        for shift in [0u32, 500, 3] {
            let moved: Vec<(u32, i8)> = keys.iter().map(|(a, b)| (*a as u32 + shift, *b)).collect();
            let before = c.stats().compilations;
            let got = c
                .from(&a)
                .zip(&b)
                .group_by(move |(a, b)| (a.cast::<u32>() + shift, b))
                .count()
                .unwrap();
            assert_eq!(got, host(&moved, &xs, |k| k).counts, "shift {shift}, {at}");
            let compiled = c.stats().compilations - before;
            assert!(shift != 3 || compiled == 0, "{compiled} compilations, {at}");
        }

        // (i32, u32) far apart: sorted (one 64-bit key, or two sorts without 64-bit
        // integers), which takes more launches.
        let wide_a: Vec<i32> = idx
            .iter()
            .map(|&i| (spread(i, 5) as i32 - 2) * 100_003)
            .collect();
        let wide_b: Vec<u32> = idx.iter().map(|&i| spread(i ^ 0x33, 3) << 30).collect();
        let keys: Vec<(i32, u32)> = wide_a.iter().copied().zip(wide_b.iter().copied()).collect();
        let want = host(&keys, &xs, |k| k);
        let q = || {
            c.from(&wide_a)
                .zip(&wide_b)
                .zip(&xs)
                .group_by(|((a, b), _)| (a, b))
        };
        let (got, used) = launches(c, || q().count().unwrap());
        assert_eq!(got, want.counts, "(i32, u32) count, {at}");
        assert!(n < 2 || used > 5, "(i32, u32) took {used} launches, {at}");
        assert_eq!(
            q().sum(|(_, x)| x).unwrap(),
            want.sums,
            "(i32, u32) sum, {at}"
        );

        // (f32, u8) with special floats: grouped by bits, in total order.
        let fa: Vec<f32> = idx
            .iter()
            .map(|&i| SPECIAL_F32[spread(i ^ 0x99, 8) as usize])
            .collect();
        let fb: Vec<u8> = idx.iter().map(|&i| spread(i ^ 0x77, 3) as u8).collect();
        let keys: Vec<(f32, u8)> = fa.iter().copied().zip(fb.iter().copied()).collect();
        let want = host(&keys, &xs, |(f, u)| (total_order(f), u));
        let bits = |v: Vec<((f32, u8), usize)>| -> Vec<(u32, u8, usize)> {
            v.into_iter()
                .map(|((f, u), c)| (f.to_bits(), u, c))
                .collect()
        };
        let got = c.from(&fa).zip(&fb).group_by(|(f, u)| (f, u)).count();
        assert_eq!(bits(got.unwrap()), bits(want.counts), "(f32, u8), {at}");

        // Three parts spanning 2 x 3 x 5 (dense), four parts spanning 2 x 3 x 5 x 2000
        // (sorted).
        let p: Vec<u8> = idx.iter().map(|&i| spread(i, 2) as u8).collect();
        let q3: Vec<u8> = idx.iter().map(|&i| spread(i ^ 7, 3) as u8).collect();
        let r: Vec<u8> = idx
            .iter()
            .map(|&i| spread(i ^ 0x71, 5) as u8 + 250)
            .collect();
        let s: Vec<u16> = idx.iter().map(|&i| spread(i ^ 0x3, 2000) as u16).collect();
        let keys: Vec<(u8, u8, u8)> = (0..n).map(|i| (p[i], q3[i], r[i])).collect();
        let got = c
            .from(&p)
            .zip(&q3)
            .zip(&r)
            .zip(&xs)
            .group_by(|(((p, q), r), _)| (p, q, r))
            .sum(|(_, x)| x);
        assert_eq!(got.unwrap(), host(&keys, &xs, |k| k).sums, "3 parts, {at}");
        let keys: Vec<(u8, u8, u8, u16)> = (0..n).map(|i| (p[i], q3[i], r[i], s[i])).collect();
        let got = c
            .from(&p)
            .zip(&q3)
            .zip(&r)
            .zip(&s)
            .group_by(|(((p, q), r), s)| (p, q, r, s))
            .count();
        assert_eq!(
            got.unwrap(),
            host(&keys, &xs, |k| k).counts,
            "4 parts, {at}"
        );

        // (u64, i64): 128 bits, two sorts.
        if has_i64() {
            let la: Vec<u64> = idx.iter().map(|&i| (spread(i, 4) as u64) << 40).collect();
            let lb: Vec<i64> = idx
                .iter()
                .map(|&i| (spread(i ^ 0x5a, 3) as i64 - 1) * (1 << 50))
                .collect();
            let keys: Vec<(u64, i64)> = la.iter().copied().zip(lb.iter().copied()).collect();
            let got = c
                .from(&la)
                .zip(&lb)
                .zip(&xs)
                .group_by(|((a, b), _)| (a, b))
                .sum(|(_, x)| x);
            assert_eq!(
                got.unwrap(),
                host(&keys, &xs, |k| k).sums,
                "(u64, i64), {at}"
            );
        }
    });
}

/// The rows `((a, b), x)` whose `x % m` is not 0, grouped by `(a, b)`.
fn q_filtered<'a>(
    c: &'a Context,
    a: &'a [u16],
    b: &'a [i8],
    xs: &'a [u32],
    m: u32,
) -> kiln::GroupBy<'a, (u16, i8), ((u16, i8), u32)> {
    c.from(a)
        .zip(b)
        .zip(xs)
        .filter(move |(_, x)| (x % m).ne(0u32))
        .group_by(|((a, b), _)| (a, b))
}

/// `n` offsets below `span`: 0 and `span - 1` first, so that from two rows on the keys they
/// make span exactly `span` values, then spread over it.
fn span_offsets(n: usize, span: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| match i {
            0 => 0,
            1 => span - 1,
            _ => spread(i, span),
        })
        .collect()
}

/// The count of each key of `keys`, in ascending key order, as a `BTreeMap` gives it.
fn counted<K: Copy + Ord>(keys: impl Iterator<Item = K>) -> Vec<(K, usize)> {
    let mut counts = BTreeMap::new();
    for k in keys {
        *counts.entry(k).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

/// `count()` by one integer key spanning up to the dense plan's 1024 values and more: up to
/// 2^20 a histogram of offsets from the smallest key counts them, past that the sort path
/// does; `distinct().to_vec()` of the same integers, which takes the same paths. Each
/// span's both ends are present; keys start at 7 (u32), at the type's smallest value (i32,
/// so offsets cross zero), and past 2^32 below zero (i64).
#[test]
fn counts_by_one_key_over_wide_spans_match_btreemaps() {
    every_backend_plan_and_size(&[0, 1, 2, 1000, 40_001], |c, n, at| {
        for span in [1000u32, 1025, 65_536, 1 << 20, (1 << 20) + 1] {
            let offsets = span_offsets(n, span);
            let u: Vec<u32> = offsets.iter().map(|o| 7 + o).collect();
            let got = c.from(&u).group_by(|k| k).count().unwrap();
            assert_eq!(got, counted(u.iter().copied()), "u32, span {span}, {at}");
            let kept = c.from(&u).filter(|k| (k % 3u32).ne(0u32));
            let want = counted(u.iter().copied().filter(|k| k % 3 != 0));
            assert_eq!(
                kept.group_by(|k| k).count().unwrap(),
                want,
                "u32 filtered, span {span}, {at}"
            );
            let none = c.from(&u).filter(|k| k.lt(7u32)).group_by(|k| k).count();
            assert_eq!(none.unwrap(), [], "u32, no row kept, span {span}, {at}");
            // distinct().to_vec() keeps the keys the count finds.
            let keys = |counts: Vec<(u32, usize)>| counts.into_iter().map(|(k, _)| k).collect();
            let want: Vec<u32> = keys(want);
            let got = c
                .from(&u)
                .filter(|k| (k % 3u32).ne(0u32))
                .distinct()
                .to_vec();
            assert_eq!(got.unwrap(), want, "u32 distinct, span {span}, {at}");
            let none = c.from(&u).filter(|k| k.lt(7u32)).distinct().to_vec();
            assert_eq!(
                none.unwrap(),
                [],
                "u32 distinct, no row kept, span {span}, {at}"
            );
            let s: Vec<i32> = offsets
                .iter()
                .map(|o| i32::MIN.wrapping_add(*o as i32))
                .collect();
            let got = c.from(&s).group_by(|k| k).count().unwrap();
            assert_eq!(got, counted(s.iter().copied()), "i32, span {span}, {at}");
            let want: Vec<i32> = counted(s.iter().copied())
                .into_iter()
                .map(|(k, _)| k)
                .collect();
            let (got, used) = launches(c, || c.from(&s).distinct().to_vec().unwrap());
            assert_eq!(got, want, "i32 distinct, span {span}, {at}");
            // A range reduction and the dense plan or a histogram; the sort path takes more.
            if n >= 2 {
                let unsorted = span <= 1 << 20;
                assert_eq!(used <= 5, unsorted, "{used} launches, span {span}, {at}");
            }
            if has_i64() {
                let l: Vec<i64> = offsets.iter().map(|o| *o as i64 - (1 << 33)).collect();
                let got = c.from(&l).group_by(|k| k).count().unwrap();
                assert_eq!(got, counted(l.iter().copied()), "i64, span {span}, {at}");
            }
        }
        let every_u16: Vec<u16> = (0..n as u32).map(|i| spread(i, 1 << 16) as u16).collect();
        let got = c.from(&every_u16).group_by(|k| k).count().unwrap();
        assert_eq!(got, counted(every_u16.iter().copied()), "u16, {at}");
        let want: Vec<u16> = counted(every_u16.iter().copied())
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let got = c.from(&every_u16).distinct().to_vec().unwrap();
        assert_eq!(got, want, "u16 distinct, {at}");
    });
}

/// Folds other than `count()` by one integer key over the same wide spans: where plans are
/// chunked (CPUs) and loops unlimited, keys spanning up to 2^20 values take the dense plan
/// (a range reduction, the partials, one combine: at most 5 launches), past that and on
/// grouped plans the sort path (more). Wrapping sums, the order-sensitive affine fold, and
/// min/max of floats, plain, filtered and with no row kept.
#[test]
fn folds_by_one_key_over_wide_spans_match_btreemaps() {
    every_backend_plan_and_size(&[0, 1, 2, 1000, 40_001], |c, n, at| {
        let chunked = c.effective_plan_shape() == kiln::PlanShape::Chunked;
        // With a loop limit, chunked plans take the dense plan only while a chunk's loops fit.
        let limited = c.device().max_loop_iterations.is_some();
        let xs: Vec<u32> = (0..n as u32).map(|i| spread(i ^ 0x5a5a, 1 << 24)).collect();
        let fs: Vec<f32> = xs.iter().map(|x| *x as f32 * 0.5 - 4e6).collect();
        for span in [1025u32, 65_536, 1 << 20, (1 << 20) + 1] {
            let offsets = span_offsets(n, span);
            let u: Vec<u32> = offsets.iter().map(|o| 7 + o).collect();
            let want = host(&u, &xs, |k| k);
            let q = || c.from(&u).zip(&xs).group_by(|(k, _)| k);
            let (got, used) = launches(c, || q().sum(|(_, x)| x).unwrap());
            assert_eq!(got, want.sums, "u32 sum, span {span}, {at}");
            if n >= 2 && !(chunked && limited) {
                let dense = chunked && span <= 1 << 20;
                assert_eq!(used <= 5, dense, "{used} launches, span {span}, {at}");
            }
            let got = q()
                .fold(
                    (1u32, 0u32),
                    |(_, x)| (x * 2u32 + 1u32, x >> 3u32),
                    |(a1, b1), (a2, b2)| (a1 * a2, b1 * a2 + b2),
                )
                .unwrap();
            assert_eq!(got, want.maps, "affine fold, span {span}, {at}");

            let s: Vec<i32> = offsets
                .iter()
                .map(|o| i32::MIN.wrapping_add(*o as i32))
                .collect();
            let mut lows = BTreeMap::<i32, f32>::new();
            let mut highs = BTreeMap::<i32, f32>::new();
            for (k, f) in s.iter().zip(&fs) {
                let lo = lows.entry(*k).or_insert(f32::INFINITY);
                *lo = lo.min(*f);
                let hi = highs.entry(*k).or_insert(f32::NEG_INFINITY);
                *hi = hi.max(*f);
            }
            let q = || c.from(&s).zip(&fs).group_by(|(k, _)| k);
            let got = q().min(|(_, f)| f).unwrap();
            assert_eq!(
                got,
                lows.into_iter().collect::<Vec<_>>(),
                "f32 min, span {span}, {at}"
            );
            let got = q().max(|(_, f)| f).unwrap();
            assert_eq!(
                got,
                highs.into_iter().collect::<Vec<_>>(),
                "f32 max, span {span}, {at}"
            );

            let kept: Vec<usize> = (0..n).filter(|i| !u[*i].is_multiple_of(3)).collect();
            let kept_u: Vec<u32> = kept.iter().map(|i| u[*i]).collect();
            let kept_xs: Vec<u32> = kept.iter().map(|i| xs[*i]).collect();
            let got = c
                .from(&u)
                .zip(&xs)
                .filter(|(k, _)| (k % 3u32).ne(0u32))
                .group_by(|(k, _)| k)
                .sum(|(_, x)| x)
                .unwrap();
            assert_eq!(
                got,
                host(&kept_u, &kept_xs, |k| k).sums,
                "filtered, span {span}, {at}"
            );
            let none = c
                .from(&u)
                .zip(&xs)
                .filter(|(k, _)| k.lt(7u32))
                .group_by(|(k, _)| k)
                .sum(|(_, x)| x);
            assert_eq!(none.unwrap(), [], "no row kept, span {span}, {at}");
        }
    });
}
