//! Stages that number rows, against the same chains of iterator adapters: `enumerate`,
//! `zip`, `take`, `skip`, `argmin` and `argmax` after a filter (or a `take`/`skip`) count
//! the rows kept, as Rust's iterators do, and `reverse` turns positions around.

use crate::common::{every_backend_plan_and_size, has_f64, spread, SPECIAL_F32};
use kiln::Error;

/// Whether `b` replaces `a` as the best so far in a left-to-right search for the first
/// smallest (`max`: largest) element, NaN counting as largest (smallest).
fn beats(a: f32, b: f32, max: bool) -> bool {
    let strictly = if max { b > a } else { b < a };
    strictly || (a.is_nan() && !b.is_nan())
}

/// The position of the first smallest (`max`: largest) of `xs`, NaN as in [`beats`].
fn arg_best(xs: impl Iterator<Item = f32>, max: bool) -> Option<usize> {
    let mut best: Option<(usize, f32)> = None;
    for (i, x) in xs.enumerate() {
        if best.is_none_or(|(_, b)| beats(b, x, max)) {
            best = Some((i, x));
        }
    }
    best.map(|(i, _)| i)
}

/// `argmax` of `q` when `max`, else `argmin`.
fn best<T: kiln::ir::Scalar + kiln::ir::Numeric>(
    q: kiln::Query<'_, T>,
    max: bool,
) -> kiln::Result<Option<usize>> {
    if max {
        q.argmax()
    } else {
        q.argmin()
    }
}

/// The position of the first smallest (`max`: largest) integer of `xs`.
fn arg_best_ord<T: Ord>(xs: impl Iterator<Item = T> + Clone, max: bool) -> Option<usize> {
    let best = if max {
        xs.clone().max()
    } else {
        xs.clone().min()
    };
    xs.clone().position(|x| Some(x) == best)
}

/// `enumerate`, `zip` (host slice and device buffer) and `take`/`skip` after filters, in
/// chains that number rows twice, with terminals of every family (rows, a reduction, a
/// sort, a grouping, a scan); `argmin`/`argmax` after a filter and after `skip`/`take`,
/// over integers with many ties and floats with NaNs and zeros of both signs; a filter that
/// keeps nothing; a zip whose length differs from the kept rows' (`LengthMismatch` naming
/// both); `reverse` over sources, around `enumerate` and `zip`, twice, before and after
/// filters, before a scan and over a range. Sizes straddle the planners' chunks, in both
/// plan shapes.
#[test]
fn positions_after_a_filter_count_the_rows_kept() {
    every_backend_plan_and_size(&[0, 1, 2, 1000, 16385, 100_003], |c, n, at| {
        let xs: Vec<u32> = (0..n as u32).map(|i| spread(i, 1000)).collect();
        let kept = |x: &u32| !x.is_multiple_of(3);
        let odd: Vec<u32> = xs.iter().copied().filter(kept).collect();
        let filtered = || c.from(&xs).filter(|x| (x % 3u32).ne(0u32));

        let want: Vec<(u32, u32)> = (0u32..).zip(odd.iter().copied()).collect();
        let got = filtered().enumerate().to_vec().unwrap();
        assert_eq!(got, want, "filter enumerate, {at}");

        // Positions numbered twice: among the kept rows, then among those above 500.
        let want: Vec<(u32, (u32, u32))> = (0u32..)
            .zip(odd.iter().copied())
            .filter(|(_, x)| *x > 500)
            .enumerate()
            .map(|(j, (i, x))| (j as u32, (i, x)))
            .collect();
        let got = filtered()
            .enumerate()
            .filter(|(_, x)| x.gt(500u32))
            .enumerate()
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "filter enumerate filter enumerate, {at}");

        let want = (0u32..)
            .zip(odd.iter().copied())
            .map(|(i, x)| i.wrapping_mul(x))
            .fold(0u32, u32::wrapping_add);
        let got = filtered().enumerate().map(|(i, x)| i * x).sum().unwrap();
        assert_eq!(got, want, "filter enumerate sum, {at}");

        // The largest positions first: a sort whose keys are the positions.
        let mut want: Vec<(u32, u32)> = (0u32..).zip(odd.iter().copied()).collect();
        want.sort_by_key(|(i, x)| (std::cmp::Reverse(*x), *i));
        let got = filtered()
            .enumerate()
            .sort_by_key_desc(|(_, x)| x)
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "filter enumerate sort, {at}");

        let ws: Vec<u32> = (0..odd.len() as u32).map(|i| i * 7 + 1).collect();
        let want: Vec<u32> = odd.iter().zip(&ws).map(|(x, w)| x * w).collect();
        let got = filtered().zip(&ws).map(|(x, w)| x * w).to_vec().unwrap();
        assert_eq!(got, want, "filter zip, {at}");
        let on_device = c.upload(&ws).unwrap();
        let mut want = std::collections::BTreeMap::<u32, u32>::new();
        for (x, w) in odd.iter().zip(&ws) {
            let sum = want.entry(x % 5).or_default();
            *sum = sum.wrapping_add(*w);
        }
        let got = filtered()
            .zip_buffer(&on_device)
            .group_by(|(x, _)| x % 5u32)
            .sum(|(_, w)| w)
            .unwrap();
        assert_eq!(
            got,
            want.into_iter().collect::<Vec<_>>(),
            "filter zip group_by, {at}"
        );
        let longer: Vec<u32> = (0..odd.len() as u32 + 1).collect();
        match filtered().zip(&longer).to_vec() {
            Err(Error::LengthMismatch { left, right }) => {
                assert_eq!((left, right), (odd.len(), odd.len() + 1), "{at}")
            }
            other => panic!("zip of another length after a filter, {at}: {other:?}"),
        }

        let want: Vec<u32> = odd.iter().copied().skip(n / 3).take(50).collect();
        let got = filtered().skip(n / 3).take(50).to_vec().unwrap();
        assert_eq!(got, want, "filter skip take, {at}");
        let want: Vec<u32> = xs
            .iter()
            .copied()
            .take(n / 2)
            .filter(kept)
            .skip(3)
            .scan(0u32, |a, x| {
                *a = a.wrapping_add(x);
                Some(*a)
            })
            .collect();
        let got = c
            .from(&xs)
            .take(n / 2)
            .filter(|x| (x % 3u32).ne(0u32))
            .skip(3)
            .scan(0, |a, b| a + b)
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "take filter skip scan, {at}");

        // reverse: over the source (each row read where it lies), with positions and zips
        // before and after it, twice, and after a filter (the rows kept, run first).
        let ws: Vec<u32> = (0..n as u32).map(|i| i * 3).collect();
        let want: Vec<(u32, (u32, u32))> = (0u32..)
            .zip(xs.iter().copied().zip(ws.iter().copied()).rev())
            .skip(1)
            .collect();
        let got = c.from(&xs).zip(&ws).reverse().enumerate().skip(1).to_vec();
        assert_eq!(got.unwrap(), want, "zip reverse enumerate skip, {at}");
        let want: Vec<((u32, u32), u32)> = (0..n as u32)
            .zip(xs.iter().copied())
            .rev()
            .zip(ws.iter().copied())
            .take(n / 2 + 1)
            .collect();
        let got = c.from(&xs).enumerate().reverse().zip(&ws).take(n / 2 + 1);
        assert_eq!(
            got.to_vec().unwrap(),
            want,
            "enumerate reverse zip take, {at}"
        );
        let want: Vec<u32> = xs.iter().map(|x| x + 1).rev().rev().collect();
        let got = c.from(&xs).map(|x| x + 1u32).reverse().reverse().to_vec();
        assert_eq!(got.unwrap(), want, "reverse twice, {at}");
        let want: Vec<u32> = odd.iter().copied().rev().take(20).collect();
        let got = filtered().reverse().take(20).to_vec().unwrap();
        assert_eq!(got, want, "filter reverse take, {at}");
        let want = xs.iter().copied().rev().filter(kept).scan(0u32, |a, x| {
            *a = a.wrapping_add(x);
            Some(*a)
        });
        let got = c
            .from(&xs)
            .reverse()
            .filter(|x| (x % 3u32).ne(0u32))
            .scan(0u32, |a, b| a + b)
            .to_vec();
        assert_eq!(
            got.unwrap(),
            want.collect::<Vec<_>>(),
            "reverse filter scan, {at}"
        );
        let want = xs
            .iter()
            .position(|x| *x == 999)
            .map(|p| ((n - 1 - p) as u32, 999u32));
        let got = c
            .range(n)
            .reverse()
            .zip(&xs)
            .filter(|(_, x)| x.eq(999u32))
            .first();
        assert_eq!(got.unwrap(), want, "range reverse zip filter first, {at}");

        for max in [false, true] {
            let name = if max { "argmax" } else { "argmin" };
            let want = arg_best_ord(odd.iter().copied(), max);
            assert_eq!(best(filtered(), max).unwrap(), want, "filter {name}, {at}");
            let want = arg_best_ord(xs.iter().copied().skip(n / 4).take(n / 2), max);
            let got = best(c.from(&xs).skip(n / 4).take(n / 2), max).unwrap();
            assert_eq!(got, want, "skip take {name}, {at}");
            let none = c.from(&xs).filter(|x| x.gt(5000u32));
            assert_eq!(
                best(none, max).unwrap(),
                None,
                "{name} of nothing kept, {at}"
            );

            // NaNs of both signs first (row 0 is dropped), where a fold that let a NaN win
            // would keep it.
            let fs: Vec<f32> = (0..n as u32)
                .map(|i| match (i, spread(i, 3)) {
                    (1, _) => f32::NAN,
                    (2, _) => -f32::NAN,
                    (_, 0) => SPECIAL_F32[spread(i, 8) as usize],
                    _ => spread(i, 97) as f32 - 40.0,
                })
                .collect();
            let want = arg_best(
                fs.iter()
                    .enumerate()
                    .filter(|(i, _)| !i.is_multiple_of(5))
                    .map(|(_, x)| *x),
                max,
            );
            let q = c
                .from(&fs)
                .enumerate()
                .filter(|(i, _)| (i % 5u32).ne(0u32))
                .map(|(_, x)| x);
            let got = best(q, max);
            assert_eq!(got.unwrap(), want, "f32 {name} after a filter, {at}");
        }
    });
}

/// `argmin`/`argmax` without a filter fold (best value, position) in one pass from minus
/// (`argmax`) or plus infinity, or the type's extreme, at no position: inputs where no
/// element beats that start (all of it, it among NaNs, all NaN, the smallest or largest
/// integer everywhere, narrow types too), one value everywhere, and the best value at
/// positions in every lane and at the end, also after `skip` and a filter (the counted
/// fold, which starts the same way), against a left-to-right search in plain Rust, in
/// both plan shapes at sizes across the planners' chunks.
#[test]
fn arg_best_when_no_element_beats_the_start_or_the_best_ties_everywhere() {
    every_backend_plan_and_size(&[1, 2, 17, 1000, 16385, 100_003], |c, n, at| {
        for max in [false, true] {
            let worst = if max {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            };
            let top = if max { 9.0 } else { -9.0 };
            let cases: [(&str, Vec<f32>); 6] = [
                ("all the start", vec![worst; n]),
                (
                    "the start among NaNs",
                    (0..n)
                        .map(|i| if i == n * 2 / 3 { worst } else { f32::NAN })
                        .collect(),
                ),
                ("all NaN", vec![f32::NAN; n]),
                ("one value everywhere", vec![2.5; n]),
                (
                    "the best in every lane and at the end",
                    (0..n)
                        .map(|i| match i % 7 == 5 || i == n - 1 {
                            true => top,
                            false => spread(i as u32, 1000) as f32 - 500.0,
                        })
                        .collect(),
                ),
                (
                    "the start, NaNs and the best at the end",
                    (0..n)
                        .map(|i| match (i == n - 1, i % 2) {
                            (true, _) => top,
                            (false, 0) => worst,
                            _ => f32::NAN,
                        })
                        .collect(),
                ),
            ];
            let name = if max { "argmax" } else { "argmin" };
            for (what, xs) in &cases {
                let got = best(c.from(xs), max);
                let want = arg_best(xs.iter().copied(), max);
                assert_eq!(got.unwrap(), want, "f32 {name}, {what}, {at}");
                // After `skip` the position counts the rows kept, in the counted fold.
                let q = c.from(xs).skip(1);
                let got = best(q, max);
                let want = arg_best(xs.iter().copied().skip(1), max);
                assert_eq!(got.unwrap(), want, "f32 {name} after skip(1), {what}, {at}");
            }
            if has_f64() {
                let xs: Vec<f64> = cases[5].1.iter().map(|x| *x as f64).collect();
                let got = best(c.from(&xs), max);
                let want = arg_best(cases[5].1.iter().copied(), max);
                assert_eq!(got.unwrap(), want, "f64 {name}, start and NaNs, {at}");
            }
            let (low, high) = if max {
                (i32::MIN, i32::MIN + 1)
            } else {
                (i32::MAX, i32::MAX - 1)
            };
            let only: Vec<i32> = vec![low; n];
            let late: Vec<i32> = (0..n)
                .map(|i| if i + 1 == n { high } else { low })
                .collect();
            for (what, xs) in [
                ("the extreme everywhere", &only),
                ("its neighbour last", &late),
            ] {
                let got = best(c.from(xs), max);
                let want = arg_best_ord(xs.iter().copied(), max);
                assert_eq!(got.unwrap(), want, "i32 {name}, {what}, {at}");
                let q = c.from(xs).filter(|x| x.ne(0));
                let got = best(q, max);
                let want = arg_best_ord(xs.iter().copied().filter(|x| *x != 0), max);
                assert_eq!(
                    got.unwrap(),
                    want,
                    "i32 {name} after a filter, {what}, {at}"
                );
            }
            let bytes: Vec<u8> = vec![if max { 0 } else { u8::MAX }; n];
            let got = best(c.from(&bytes), max);
            assert_eq!(
                got.unwrap(),
                Some(0),
                "u8 {name}, the extreme everywhere, {at}"
            );
            let shorts: Vec<i16> = (0..n)
                .map(|i| match (i == n / 2, max) {
                    (true, true) => i16::MAX,
                    (true, false) => i16::MIN,
                    (false, _) => spread(i as u32, 7) as i16 - 3,
                })
                .collect();
            let got = best(c.from(&shorts), max);
            let want = arg_best_ord(shorts.iter().copied(), max);
            assert_eq!(
                got.unwrap(),
                want,
                "i16 {name}, the extreme in the middle, {at}"
            );
        }
    });
}

/// `argmin` and `argmax` fold no value of the data into their kernels: inputs with other
/// best values reuse the kernels from the second input on, narrow types too (they fold
/// widened to 32 bits).
#[test]
fn arg_best_of_other_data_compiles_nothing_from_the_second_input_on() {
    crate::common::every_backend(|| {
        let c = crate::common::ctx();
        for round in 0..4u16 {
            let xs: Vec<u16> = (0..1000u16)
                .map(|i| (i * 7 + round * 13) % (500 + round * 100))
                .collect();
            let ys: Vec<f32> = xs.iter().map(|x| *x as f32 * -0.5).collect();
            let before = c.stats().compilations;
            let wide = xs.iter().map(|x| *x as u32);
            assert_eq!(
                c.from(&xs).argmax().unwrap(),
                arg_best_ord(wide, true),
                "u16, round {round}"
            );
            assert_eq!(
                c.from(&ys).argmin().unwrap(),
                arg_best(ys.iter().copied(), false),
                "f32, round {round}"
            );
            if round >= 1 {
                assert_eq!(c.stats().compilations, before, "round {round} compiled");
            }
        }
    });
}
