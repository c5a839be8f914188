//! Joins against a host hash join: inner, semi and anti, keys dense (a direct table) and
//! sparse (binary search), signed, narrow and wide, duplicates on both sides, filters and
//! maps on either side, rows of several columns, and queries that go on after the join.

use crate::common::{every_backend_plan_and_size, spread};
use kiln::prelude::*;
use kiln::Error;
use std::collections::HashMap;
use std::hash::Hash;

/// The host's inner join: each left row in order, with each right row of an equal key in
/// the right side's order (LINQ's `Join`).
fn hash_join<A: Copy, B: Copy, K: Hash + Eq>(
    left: &[A],
    right: &[B],
    left_key: impl Fn(&A) -> K,
    right_key: impl Fn(&B) -> K,
) -> Vec<(A, B)> {
    let mut by_key: HashMap<K, Vec<B>> = HashMap::new();
    for b in right {
        by_key.entry(right_key(b)).or_default().push(*b);
    }
    let mut out = Vec::new();
    for a in left {
        for b in by_key.get(&left_key(a)).into_iter().flatten() {
            out.push((*a, *b));
        }
    }
    out
}

/// The host's left join: [`hash_join`], and each left row without a match once, with `None`.
fn hash_left_join<A: Copy, B: Copy, K: Hash + Eq>(
    left: &[A],
    right: &[B],
    left_key: impl Fn(&A) -> K,
    right_key: impl Fn(&B) -> K,
) -> Vec<(A, Option<B>)> {
    let mut by_key: HashMap<K, Vec<B>> = HashMap::new();
    for b in right {
        by_key.entry(right_key(b)).or_default().push(*b);
    }
    let mut out = Vec::new();
    for a in left {
        match by_key.get(&left_key(a)) {
            Some(bs) => out.extend(bs.iter().map(|b| (*a, Some(*b)))),
            None => out.push((*a, None)),
        }
    }
    out
}

/// The host's semi (`matched`) or anti join.
fn hash_filter<A: Copy, K: Hash + Eq>(
    left: &[A],
    right_keys: impl Iterator<Item = K>,
    left_key: impl Fn(&A) -> K,
    matched: bool,
) -> Vec<A> {
    let keys: std::collections::HashSet<K> = right_keys.collect();
    left.iter()
        .filter(|a| keys.contains(&left_key(a)) == matched)
        .copied()
        .collect()
}

/// Inner, left, semi and anti joins on dense `u32` keys (a direct table; some left keys below and
/// above every right key), sparse `i32` and `i64` keys spanning most of the type (binary
/// search up to 1024 right rows, a hash table past it),
/// negative `i8` keys (a table across zero) and `u16` keys; with filters and maps on both
/// sides, right rows of two columns, and a sum, a filter, a count and a sort after the join.
/// `explain` names the way the matches were found.
#[test]
fn joins_match_a_host_hash_join() {
    every_backend_plan_and_size(&[0, 1, 2, 77, 1000, 16385, 40_001], |c, n, at| {
        let m = n / 3 + 1;
        let left: Vec<u32> = (0..n as u32).map(|i| spread(i, n as u32 / 4 + 3)).collect();
        let right: Vec<u32> = (0..m as u32)
            .map(|i| spread(i + 5, n as u32 / 4 + 1) + 1)
            .collect();
        let weight: Vec<f32> = (0..m).map(|i| i as f32 * 0.25 - 2.0).collect();

        let want = hash_join(&left, &right, |a| *a, |b| *b);
        let q = c.from(&left).join(c.from(&right), |a| a, |b| b);
        let plan = q.explain();
        assert!(plan.contains("join: direct table"), "{at}: {plan}");
        assert_eq!(q.to_vec().unwrap(), want, "dense u32 keys, {at}");
        let want = hash_left_join(&left, &right, |a| *a, |b| *b);
        let got = c.from(&left).left_join(c.from(&right), |a| a, |b| b);
        assert_eq!(got.to_vec().unwrap(), want, "left, {at}");
        let none: [u32; 0] = [];
        let got = c
            .from(&left)
            .left_join(c.from(&none), |a| a, |b| b)
            .to_vec();
        let want: Vec<(u32, Option<u32>)> = left.iter().map(|a| (*a, None)).collect();
        assert_eq!(got.unwrap(), want, "left join with nothing, {at}");
        let got = c.from(&left).join(c.from(&none), |a| a, |b| b).count();
        assert_eq!(got.unwrap(), 0, "inner join with nothing, {at}");
        let want: Vec<u32> = hash_filter(&left, right.iter().copied(), |a| *a, true);
        let got = c.from(&left).semi_join(c.from(&right), |a| a, |b| b);
        assert_eq!(got.to_vec().unwrap(), want, "semi, {at}");
        let want: Vec<u32> = hash_filter(&left, right.iter().copied(), |a| *a, false);
        let got = c.from(&left).anti_join(c.from(&right), |a| a, |b| b);
        assert_eq!(got.to_vec().unwrap(), want, "anti, {at}");

        let rows: Vec<(u32, f32)> = right.iter().copied().zip(weight.iter().copied()).collect();
        let kept: Vec<(u32, f32)> = rows.iter().copied().filter(|(_, w)| *w >= 0.0).collect();
        let doubled: Vec<u32> = left.iter().map(|a| a * 2).filter(|a| a % 3 != 0).collect();
        let want = hash_join(&doubled, &kept, |a| *a / 2, |b| b.0);
        let staged = || {
            c.from(&left)
                .map(|a| a * 2u32)
                .filter(|a| (a % 3u32).ne(0u32))
                .join(
                    c.from(&right).zip(&weight).filter(|(_, w)| w.ge(0.0f32)),
                    |a| a / 2u32,
                    |(k, _)| k,
                )
        };
        assert_eq!(staged().to_vec().unwrap(), want, "filters and maps, {at}");
        let want_sum = want.iter().fold(0i32, |s, (a, (_, w))| {
            s.wrapping_add((*a as i32).wrapping_mul(*w as i32))
        });
        let got = staged()
            .map(|(a, (_, w))| a.cast::<i32>() * w.cast::<i32>())
            .sum();
        assert_eq!(got.unwrap(), want_sum, "sum after the join, {at}");

        let want: Vec<(u32, f32)> = hash_left_join(&left, &rows, |a| *a, |b| b.0)
            .into_iter()
            .map(|(a, b)| (a, b.map_or(-1.5, |b| b.1)))
            .collect();
        let got = c
            .from(&left)
            .left_join(c.from(&right).zip(&weight), |a| a, |(k, _)| k)
            .map(|(a, b)| (a, b.unwrap_or((0, -1.5)).1))
            .to_vec();
        assert_eq!(got.unwrap(), want, "left join, unwrap_or, {at}");
        let want = hash_left_join(&left, &right, |a| *a, |b| *b)
            .iter()
            .filter(|(_, b)| b.is_none())
            .count();
        let got = c
            .from(&left)
            .left_join(c.from(&right), |a| a, |b| b)
            .filter(|(_, b)| b.is_some.not())
            .count();
        assert_eq!(got.unwrap(), want, "left join, unmatched, {at}");
        let want: Vec<u32> = hash_left_join(&left, &right, |a| *a, |b| *b)
            .iter()
            .map(|(_, b)| b.unwrap_or(0))
            .collect();
        let got = c
            .from(&left)
            .left_join(c.from(&right), |a| a, |b| b)
            .map(|(_, b)| b.value)
            .to_vec();
        assert_eq!(
            got.unwrap(),
            want,
            "left join, absent values read zero, {at}"
        );

        // Many matches per key: pairs written one work item per pair.
        let crowd: Vec<u32> = (0..400u32).map(|i| spread(i, 4) * 2).collect();
        let few: Vec<u32> = left.iter().map(|a| a % 9).take(300).collect();
        let want = hash_left_join(&few, &crowd, |a| *a, |b| *b);
        let got = c
            .from(&few)
            .left_join(c.from(&crowd), |a| a, |b| b)
            .to_vec();
        assert_eq!(got.unwrap(), want, "many matches per key, {at}");
        let want = hash_join(
            &few,
            &(0u32..).zip(crowd.iter().copied()).collect::<Vec<_>>(),
            |a| *a,
            |b| b.1,
        );
        let got = c
            .from(&few)
            .join(c.from(&crowd).enumerate(), |a| a, |(_, b)| b);
        assert_eq!(
            got.to_vec().unwrap(),
            want,
            "many matches, right order, {at}"
        );

        // Sparse keys over most of i32: the right keys span far more values than rows.
        let sparse = |i: u32| (spread(i, 1 << 20) as i32 - (1 << 19)) * 2039;
        let lk: Vec<i32> = (0..n as u32).map(|i| sparse(i % (m as u32 + 9))).collect();
        let rk: Vec<i32> = (0..m as u32)
            .map(|i| sparse((i * 7) % (m as u32 + 3)))
            .collect();
        let want = hash_join(&lk, &rk, |a| *a, |b| *b);
        let q = c.from(&lk).join(c.from(&rk), |a| a, |b| b);
        if n >= 1000 {
            let plan = q.explain();
            let way = match m > 1024 {
                true => "join: hash table",
                false => "join: binary search",
            };
            assert!(plan.contains(way), "{at}: {plan}");
        }
        assert_eq!(q.to_vec().unwrap(), want, "sparse i32 keys, {at}");
        let count = c.from(&lk).join(c.from(&rk), |a| a, |b| b).count().unwrap();
        assert_eq!(count, want.len(), "count, {at}");
        let want = hash_left_join(&lk, &rk, |a| *a, |b| *b);
        let got = c.from(&lk).left_join(c.from(&rk), |a| a, |b| b);
        assert_eq!(got.to_vec().unwrap(), want, "sparse left, {at}");
        let want: Vec<i32> = hash_filter(&lk, rk.iter().copied(), |a| *a, false);
        let got = c.from(&lk).anti_join(c.from(&rk), |a| a, |b| b);
        assert_eq!(got.to_vec().unwrap(), want, "sparse anti, {at}");

        if c.device().features.int64 {
            let wide = |i: u32| (spread(i, 1 << 20) as i64 - (1 << 19)) * 0x1_0000_0001;
            let lk: Vec<i64> = (0..n as u32).map(|i| wide(i % (m as u32 + 9))).collect();
            let rk: Vec<i64> = (0..m as u32)
                .map(|i| wide((i * 7) % (m as u32 + 3)))
                .collect();
            let want = hash_join(&lk, &rk, |a| *a, |b| *b);
            let got = c.from(&lk).join(c.from(&rk), |a| a, |b| b).to_vec();
            assert_eq!(got.unwrap(), want, "sparse i64 keys, {at}");
        }

        // Narrow signed keys across zero, from a wider row: a table over -128..=127.
        let small: Vec<i16> = (0..n as u32).map(|i| spread(i, 300) as i16 - 150).collect();
        let tiny: Vec<i8> = (0..m as u32)
            .map(|i| (spread(i, 256) as i32 - 128) as i8)
            .collect();
        let want = hash_join(&small, &tiny, |a| *a as i8, |b| *b);
        let got = c
            .from(&small)
            .join(c.from(&tiny), |a| a.cast::<i8>(), |b| b);
        assert_eq!(got.to_vec().unwrap(), want, "i8 keys, {at}");
        let want: Vec<(i16, i8)> = want.into_iter().filter(|(a, _)| *a > 0).collect();
        let got = c
            .from(&small)
            .join(c.from(&tiny), |a| a.cast::<i8>(), |b| b)
            .filter(|(a, _)| a.gt(0i16))
            .sort_by_key(|(a, _)| a)
            .to_vec()
            .unwrap();
        let mut sorted = want.clone();
        sorted.sort_by_key(|(a, _)| *a);
        assert_eq!(got, sorted, "i8 keys, filtered and sorted, {at}");

        let wide: Vec<u16> = (0..m as u32).map(|i| spread(i, 65536) as u16).collect();
        let want: Vec<u32> =
            hash_filter(&left, wide.iter().map(|w| *w as u32), |a| *a & 0xffff, true);
        let got = c
            .from(&left)
            .semi_join(c.from(&wide), |a| (a & 0xffffu32).cast::<u16>(), |b| b);
        assert_eq!(got.to_vec().unwrap(), want, "u16 keys, {at}");
    });
}

/// A join with a query of another context fails at the terminal, naming the backend; an
/// error of either side is the terminal's.
#[test]
fn join_errors_reach_the_terminal() {
    let (a, b) = (
        Context::with_backend(BackendKind::Cpu).unwrap(),
        Context::with_backend(BackendKind::Cpu).unwrap(),
    );
    let xs = [1u32, 2, 3];
    match a.from(&xs).join(b.from(&xs), |x| x, |y| y).to_vec() {
        Err(Error::Unsupported { backend, what }) => {
            assert_eq!(backend, BackendKind::Cpu);
            assert!(what.contains("another context"), "{what}");
        }
        other => panic!("join across contexts: {other:?}"),
    }
    let other = a.upload(&[1u32]).unwrap();
    let got = b
        .from(&xs)
        .semi_join(b.from_buffer(&other), |x| x, |y| y)
        .count();
    assert!(matches!(got, Err(Error::Unsupported { .. })), "{got:?}");
}
