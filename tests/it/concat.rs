//! `concat` against Rust's `chain`: sources read where they lie, sides with stages run
//! first, chains of three with empty pieces, rows of two columns, and every stage and
//! terminal family after the join.

use crate::common::{every_backend_plan_and_size, spread};
use kiln::prelude::*;
use kiln::Error;
use std::collections::BTreeMap;

/// `concat` of two slices, a buffer and a slice, three slices with an empty one first or in
/// the middle, a concat whose right side is itself a concat, a filtered side and a mapped
/// side; followed by `enumerate`, `reverse`, a filter, a zip the length of both, `argmin`,
/// a sum, a sort, a scan and a `group_by`; pairs of two columns on both sides. The split
/// becomes a parameter: a third split of the same rows compiles nothing. Sizes straddle the planners' chunks, in both
/// plan shapes.
#[test]
fn concat_reads_each_side_where_it_lies_and_chains_like_rust() {
    every_backend_plan_and_size(&[0, 1, 2, 1000, 16385, 100_003], |c, n, at| {
        let xs: Vec<u32> = (0..n as u32).map(|i| spread(i, 1000)).collect();
        let ys: Vec<u32> = (0..n as u32 / 2 + 1).map(|i| spread(i + 7, 500)).collect();
        let (head, tail) = xs.split_at(n / 3);
        let both: Vec<u32> = head.iter().chain(&ys).copied().collect();
        let joined = || c.from(head).concat(c.from(&ys));

        assert_eq!(joined().to_vec().unwrap(), both, "slices, {at}");
        let on_device = c.upload(&ys).unwrap();
        let got = c.from(head).concat(c.from_buffer(&on_device)).to_vec();
        assert_eq!(got.unwrap(), both, "slice and buffer, {at}");
        let got = c.from_buffer(&on_device).concat(c.from(head)).to_vec();
        let want: Vec<u32> = ys.iter().chain(head).copied().collect();
        assert_eq!(got.unwrap(), want, "buffer and slice, {at}");

        let empty: [u32; 0] = [];
        let want: Vec<u32> = head.iter().chain(tail).chain(&ys).copied().collect();
        let got = c.from(&empty).concat(c.from(head)).concat(c.from(&empty));
        let got = got.concat(c.from(tail)).concat(c.from(&ys)).to_vec();
        assert_eq!(got.unwrap(), want, "empty pieces first and inside, {at}");
        let got = c
            .from(head)
            .concat(c.from(tail).concat(c.from(&ys)))
            .to_vec();
        assert_eq!(got.unwrap(), want, "a concat on the right, {at}");

        let want: Vec<u32> = head
            .iter()
            .filter(|x| *x % 3 != 0)
            .copied()
            .chain(ys.iter().map(|y| y * 2 + 1))
            .collect();
        let got = c
            .from(head)
            .filter(|x| (x % 3u32).ne(0u32))
            .concat(c.from(&ys).map(|y| y * 2u32 + 1u32))
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "filtered and mapped sides, {at}");

        let want: Vec<(u32, u32)> = (0u32..).zip(both.iter().copied()).collect();
        assert_eq!(
            joined().enumerate().to_vec().unwrap(),
            want,
            "enumerate, {at}"
        );
        let want: Vec<u32> = both.iter().rev().copied().collect();
        assert_eq!(joined().reverse().to_vec().unwrap(), want, "reverse, {at}");
        let want: Vec<u32> = both.iter().copied().filter(|x| x % 4 == 1).collect();
        let got = joined().filter(|x| (x % 4u32).eq(1u32)).to_vec().unwrap();
        assert_eq!(got, want, "filter, {at}");
        let weights: Vec<i32> = (0..both.len() as i32).map(|i| i * 3 - 7).collect();
        let want = both.iter().zip(&weights).fold(0i32, |a, (x, w)| {
            a.wrapping_add((*x as i32).wrapping_mul(*w))
        });
        let got = joined()
            .zip(&weights)
            .map(|(x, w)| x.cast::<i32>() * w)
            .sum()
            .unwrap();
        assert_eq!(got, want, "zip sum, {at}");
        let best = both.iter().min();
        let want = best.and_then(|b| both.iter().position(|x| x == b));
        assert_eq!(joined().argmin().unwrap(), want, "argmin, {at}");
        let want = both.iter().fold(0u32, |a, x| a.wrapping_add(*x));
        assert_eq!(joined().sum().unwrap(), want, "sum, {at}");
        let mut want = both.clone();
        want.sort();
        assert_eq!(joined().sort().to_vec().unwrap(), want, "sort, {at}");
        let want: Vec<u32> = both
            .iter()
            .scan(0u32, |a, x| {
                *a = a.wrapping_add(*x);
                Some(*a)
            })
            .collect();
        let got = joined().scan(0, |a, b| a + b).to_vec().unwrap();
        assert_eq!(got, want, "scan, {at}");
        let mut want: BTreeMap<u32, u32> = BTreeMap::new();
        for x in &both {
            *want.entry(x % 7).or_default() += 1;
        }
        let got = joined().group_by(|x| x % 7u32).count().unwrap();
        let got: Vec<(u32, u32)> = got.into_iter().map(|(k, n)| (k, n as u32)).collect();
        assert_eq!(got, want.into_iter().collect::<Vec<_>>(), "group_by, {at}");

        let fs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
        let gs: Vec<f32> = (0..ys.len()).map(|i| 1.0 / (i as f32 + 1.0)).collect();
        let want: Vec<(u32, f32)> = xs
            .iter()
            .copied()
            .zip(fs.iter().copied())
            .chain(ys.iter().copied().zip(gs.iter().copied()))
            .filter(|(_, f)| *f > 0.25)
            .collect();
        let got = c
            .from(&xs)
            .zip(&fs)
            .concat(c.from(&ys).zip(&gs))
            .filter(|(_, f)| f.gt(0.25f32))
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "pairs, {at}");

        // Splits of the same rows at a half and one past it: the plan cache turns the split
        // into a parameter at its second value, so the third split compiles nothing.
        for (k, split) in [n / 2, (n / 2 + 1).min(n)].into_iter().enumerate() {
            let (head, tail) = xs.split_at(split);
            let before = c.stats().compilations;
            let got = c.from(head).concat(c.from(tail)).to_vec().unwrap();
            assert_eq!(got, xs, "split at {split}, {at}");
            let got = c.from(head).concat(c.from(tail)).sum().unwrap();
            assert_eq!(got, xs.iter().fold(0u32, |a, x| a.wrapping_add(*x)), "{at}");
            if k == 1 && n >= 2 {
                assert_eq!(
                    c.stats().compilations,
                    before,
                    "a third split compiles, {at}"
                );
            }
        }
    });
}

/// A concat with a query of another context fails at the terminal, naming the backend.
#[test]
fn concat_across_contexts_is_refused() {
    let (a, b) = (
        Context::with_backend(BackendKind::Cpu).unwrap(),
        Context::with_backend(BackendKind::Cpu).unwrap(),
    );
    let xs = [1u32, 2, 3];
    match a.from(&xs).concat(b.from(&xs)).to_vec() {
        Err(Error::Unsupported { backend, what }) => {
            assert_eq!(backend, BackendKind::Cpu);
            assert!(what.contains("another context"), "{what}");
        }
        other => panic!("concat across contexts: {other:?}"),
    }
}
