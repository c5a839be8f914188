//! `flat_map` with a bounded count against `Iterator::flat_map`: counts of zero, below and
//! above the bound, then stages and terminals of every family over the rows it yields.

use crate::common::{every_backend_plan_and_size, spread};
use kiln::prelude::*;
use kiln::Error;

/// Each `x` yields `x % 5` rows (cut to `max`), `x * 8 + j` and pairs `(x, j)`; over them:
/// `to_vec`, a sum, a count, a filter, `enumerate` (which counts the rows yielded), a
/// reverse, `take`, a scan, a sort and `argmax`; `flat_map` after a filter, after a
/// `reverse` and twice in a row; a `max` of 0 and of 1. Sizes straddle the planners'
/// chunks, in both plan shapes.
#[test]
fn flat_map_yields_each_elements_rows_in_order() {
    every_backend_plan_and_size(&[0, 1, 2, 1000, 16385, 30_001], |c, n, at| {
        let xs: Vec<u32> = (0..n as u32).map(|i| spread(i, 1000)).collect();
        let host = |max: u32| -> Vec<u32> {
            xs.iter()
                .flat_map(|x| (0..(x % 5).min(max)).map(move |j| x * 8 + j))
                .collect()
        };
        let q = |max: u32| c.from(&xs).flat_map(max, |x| x % 5u32, |x, j| x * 8u32 + j);
        for max in [0, 1, 3, 4, 9] {
            assert_eq!(q(max).to_vec().unwrap(), host(max), "max {max}, {at}");
        }
        let want = host(3);
        let sum = want.iter().fold(0u32, |a, x| a.wrapping_add(*x));
        assert_eq!(q(3).sum().unwrap(), sum, "sum, {at}");
        assert_eq!(q(3).count().unwrap(), want.len(), "count, {at}");
        let odd: Vec<u32> = want.iter().copied().filter(|y| y % 2 == 1).collect();
        assert_eq!(
            q(3).filter(|y| (y % 2u32).eq(1u32)).to_vec().unwrap(),
            odd,
            "{at}"
        );
        let numbered: Vec<(u32, u32)> = (0u32..).zip(want.iter().copied()).collect();
        assert_eq!(
            q(3).enumerate().to_vec().unwrap(),
            numbered,
            "enumerate, {at}"
        );
        let reversed: Vec<u32> = want.iter().rev().copied().collect();
        assert_eq!(q(3).reverse().to_vec().unwrap(), reversed, "reverse, {at}");
        let taken: Vec<u32> = want.iter().skip(5).take(n / 2).copied().collect();
        assert_eq!(q(3).skip(5).take(n / 2).to_vec().unwrap(), taken, "{at}");
        let running: Vec<u32> = want
            .iter()
            .scan(0u32, |a, x| {
                *a = a.wrapping_add(*x);
                Some(*a)
            })
            .collect();
        assert_eq!(
            q(3).scan(0, |a, b| a + b).to_vec().unwrap(),
            running,
            "{at}"
        );
        let mut sorted = want.clone();
        sorted.sort_by_key(|y| std::cmp::Reverse(*y));
        assert_eq!(q(3).sort_desc().to_vec().unwrap(), sorted, "sort, {at}");
        let best = want.iter().max();
        let first_best = best.and_then(|b| want.iter().position(|y| y == b));
        assert_eq!(q(3).argmax().unwrap(), first_best, "argmax, {at}");

        // Pairs, after a filter and after a reverse.
        let want: Vec<(u32, u32)> = xs
            .iter()
            .filter(|x| *x % 3 != 0)
            .rev()
            .flat_map(|x| (0..x % 4).map(move |j| (*x, j)))
            .collect();
        let got = c
            .from(&xs)
            .filter(|x| (x % 3u32).ne(0u32))
            .reverse()
            .flat_map(4, |x| x % 4u32, |x, j| (x, j))
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "filter reverse flat_map, {at}");
        // Twice in a row: positions are the outer rows' times the inner bound.
        let want: Vec<u32> = xs
            .iter()
            .flat_map(|x| (0..x % 3).map(move |j| x + j * 1000))
            .flat_map(|y| (0..y % 2 + 1).map(move |k| y * 2 + k))
            .collect();
        let got = c
            .from(&xs)
            .flat_map(2, |x| x % 3u32, |x, j| x + j * 1000u32)
            .flat_map(2, |y| y % 2u32 + 1u32, |y, k| y * 2u32 + k)
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "flat_map twice, {at}");
    });
}

/// A `flat_map` whose positions would pass `MAX_LEN` fails at the terminal with `TooLarge`
/// naming their number.
#[test]
fn flat_map_past_max_len_is_too_large() {
    let c = Context::with_backend(BackendKind::Cpu).unwrap();
    let xs = vec![1u8; 1 << 16];
    match c.from(&xs).flat_map(1 << 16, |_| 1u32, |x, _| x).count() {
        Err(Error::TooLarge { len, max }) => {
            assert_eq!((len, max), (1 << 32, kiln::MAX_LEN));
        }
        other => panic!("a flat_map of 2^32 positions: {other:?}"),
    }
}
