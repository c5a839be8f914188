//! Queries over columns of run-time types (`Context::from_columns`), against plain Rust loops
//! over the same columns: filters, maps, folds in and out of order, groupings, bit columns,
//! edge sizes, both plan shapes, and the errors.

use crate::common::{ctx, every_backend};

use kiln::ir::{lit, AnyVal, ScalarType, ScalarValue};
use kiln::prelude::*;
use kiln::{Column, Combine, Error};
use std::collections::BTreeMap;

const SIZES: [usize; 7] = [0, 1, 7, 16383, 16385, 3 * 16384 + 5, 100_003];

/// Deterministic columns: `i32`s of both signs, `f32`s, keys below `keys` and validity bits.
fn columns(n: usize, keys: u32, seed: u64) -> (Vec<i32>, Vec<f32>, Vec<u16>, Vec<u8>) {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let ints = (0..n).map(|_| next() as i32 >> (next() % 24)).collect();
    let floats = (0..n)
        .map(|_| (next() % 20_001) as f32 * 0.25 - 2500.0)
        .collect();
    let key_col = (0..n).map(|_| (next() % keys as u64) as u16).collect();
    let bits = (0..n.div_ceil(8) + 1).map(|_| next() as u8).collect();
    (ints, floats, key_col, bits)
}

fn bit(bits: &[u8], offset: usize, i: usize) -> bool {
    bits[(offset + i) / 8] >> ((offset + i) % 8) & 1 == 1
}

fn i32s(v: &AnyVal) -> Val<i32> {
    v.typed::<i32>()
}

#[test]
fn filter_map_fold_and_count_match_a_loop() {
    every_backend(|| {
        let c = ctx();
        for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
            c.set_plan_shape(shape);
            for (k, &n) in SIZES.iter().enumerate() {
                let (xs, fs, _, bits) = columns(n, 1, k as u64 + 1);
                let offset = 3;
                let at = format!("n={n}, {shape:?}");
                let cols = [
                    Column::of(&xs),
                    Column::of(&fs),
                    Column::bits(&bits, offset),
                ];
                // Keeps valid rows with a positive float; folds (wrapping sum of x * 3 - 1,
                // min of the floats, max of x, number of rows).
                let got = c
                    .from_columns(n, &cols)
                    .filter(|r| r[2].typed::<u8>().ne(0u8) & r[1].typed::<f32>().gt(0.0f32))
                    .map(|r| {
                        vec![
                            (i32s(&r[0]) * 3 - 1).erase(),
                            r[1].clone(),
                            r[0].clone(),
                            lit(1u32).erase(),
                        ]
                    })
                    .fold(
                        &[
                            ScalarValue::I32(0),
                            ScalarValue::F32(f32::INFINITY),
                            ScalarValue::I32(i32::MIN),
                            ScalarValue::U32(0),
                        ],
                        |a, b| {
                            vec![
                                (i32s(&a[0]) + i32s(&b[0])).erase(),
                                a[1].typed::<f32>().min(b[1].typed::<f32>()).erase(),
                                i32s(&a[2]).max(i32s(&b[2])).erase(),
                                (a[3].typed::<u32>() + b[3].typed::<u32>()).erase(),
                            ]
                        },
                        Combine::AnyOrder,
                    )
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
                let kept: Vec<usize> = (0..n)
                    .filter(|&i| bit(&bits, offset, i) && fs[i] > 0.0)
                    .collect();
                let want = [
                    ScalarValue::I32(
                        kept.iter()
                            .fold(0i32, |s, &i| s.wrapping_add(xs[i].wrapping_mul(3) - 1)),
                    ),
                    ScalarValue::F32(kept.iter().map(|&i| fs[i]).fold(f32::INFINITY, f32::min)),
                    ScalarValue::I32(kept.iter().map(|&i| xs[i]).max().unwrap_or(i32::MIN)),
                    ScalarValue::U32(kept.len() as u32),
                ];
                assert_eq!(got, want, "{at}");
                let count = c
                    .from_columns(n, &cols)
                    .filter(|r| r[2].typed::<u8>().ne(0u8))
                    .count()
                    .unwrap();
                let valid = (0..n).filter(|&i| bit(&bits, offset, i)).count();
                assert_eq!(count, valid, "{at}");
            }
        }
    });
}

#[test]
fn an_in_order_fold_keeps_input_order() {
    every_backend(|| {
        let c = ctx();
        let n = 40_000;
        let xs: Vec<u32> = (0..n as u32).collect();
        // (first, last) of the kept rows: associative, not commutative.
        let got = c
            .from_columns(n, &[Column::of(&xs)])
            .filter(|r| (r[0].typed::<u32>() % 7u32).eq(3u32))
            .map(|r| vec![r[0].clone(), r[0].clone(), lit(1u32).erase()])
            .fold(
                &[
                    ScalarValue::U32(0),
                    ScalarValue::U32(0),
                    ScalarValue::U32(0),
                ],
                |a, b| {
                    let a_some = a[2].typed::<u32>().ne(0u32);
                    let b_some = b[2].typed::<u32>().ne(0u32);
                    vec![
                        select(a_some, a[0].typed::<u32>(), b[0].typed::<u32>()).erase(),
                        select(b_some, b[1].typed::<u32>(), a[1].typed::<u32>()).erase(),
                        (a[2].typed::<u32>() | b[2].typed::<u32>()).erase(),
                    ]
                },
                Combine::InOrder,
            )
            .unwrap();
        let kept: Vec<u32> = xs.iter().copied().filter(|x| x % 7 == 3).collect();
        assert_eq!(
            got,
            [
                ScalarValue::U32(kept[0]),
                ScalarValue::U32(*kept.last().unwrap()),
                ScalarValue::U32(1)
            ]
        );
    });
}

#[test]
fn groupings_fold_and_sum_each_key_like_a_map() {
    every_backend(|| {
        let c = ctx();
        for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
            c.set_plan_shape(shape);
            for (k, &n) in SIZES.iter().enumerate() {
                for keys in [1u32, 5, 300, 1024, 40_000] {
                    let (xs, fs, ks, bits) = columns(n, keys, 100 + k as u64);
                    let at = format!("n={n}, {keys} keys, {shape:?}");
                    let cols = [
                        Column::of(&ks),
                        Column::of(&xs),
                        Column::of(&fs),
                        Column::bits(&bits, 0),
                    ];
                    let query = || {
                        c.from_columns(n, &cols)
                            .filter(|r| r[3].typed::<u8>().ne(0u8))
                            .group_by(ScalarType::U16, |r| r[0].clone())
                    };
                    let mut want: BTreeMap<u16, (i32, f32, u32)> = BTreeMap::new();
                    for i in (0..n).filter(|&i| bit(&bits, 0, i)) {
                        let e = want.entry(ks[i]).or_insert((0, f32::NEG_INFINITY, 0));
                        *e = (e.0.wrapping_add(xs[i]), e.1.max(fs[i]), e.2 + 1);
                    }
                    // The kept keys' span: past 1024 only chunked plans (CPUs) fold them, and
                    // on a device with a loop limit only while a chunk's loops fit in it.
                    let span = match (want.keys().next(), want.keys().next_back()) {
                        (Some(lo), Some(hi)) => (hi - lo) as u32 + 1,
                        _ => 0,
                    };
                    let limited = c.device().max_loop_iterations.is_some();
                    let unsupported = |r: &kiln::Result<Vec<Vec<ScalarValue>>>| {
                        matches!(r, Err(Error::Unsupported { .. }))
                    };
                    if span > 1024 && (shape == kiln::PlanShape::Grouped || limited) {
                        let r = query().sums(&[ScalarValue::U32(0)], |_| vec![lit(1u32).erase()]);
                        if shape == kiln::PlanShape::Grouped || unsupported(&r) {
                            assert!(unsupported(&r), "{at}: {r:?}");
                            continue;
                        }
                    }
                    let folded = query()
                        .fold(
                            &[
                                ScalarValue::I32(0),
                                ScalarValue::F32(f32::NEG_INFINITY),
                                ScalarValue::U32(0),
                            ],
                            |r| vec![r[1].clone(), r[2].clone(), lit(1u32).erase()],
                            |a, b| {
                                vec![
                                    (i32s(&a[0]) + i32s(&b[0])).erase(),
                                    a[1].typed::<f32>().max(b[1].typed::<f32>()).erase(),
                                    (a[2].typed::<u32>() + b[2].typed::<u32>()).erase(),
                                ]
                            },
                        )
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                    let want_rows: Vec<Vec<ScalarValue>> = want
                        .iter()
                        .map(|(k, v)| {
                            vec![
                                ScalarValue::U16(*k),
                                ScalarValue::I32(v.0),
                                ScalarValue::F32(v.1),
                                ScalarValue::U32(v.2),
                            ]
                        })
                        .collect();
                    assert_eq!(folded, want_rows, "{at}");
                    let sums = query()
                        .sums(&[ScalarValue::I32(0), ScalarValue::U32(0)], |r| {
                            vec![r[1].clone(), lit(1u32).erase()]
                        })
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                    let want_sums: Vec<Vec<ScalarValue>> = want
                        .iter()
                        .map(|(k, v)| {
                            vec![
                                ScalarValue::U16(*k),
                                ScalarValue::I32(v.0),
                                ScalarValue::U32(v.2),
                            ]
                        })
                        .collect();
                    assert_eq!(sums, want_sums, "{at}");
                }
            }
        }
    });
}

#[test]
fn errors_are_typed() {
    every_backend(|| {
        let c = ctx();
        let xs = [1i32, 2, 3];
        let short = [1.0f32, 2.0];
        let bits = [0xffu8];
        let r = c
            .from_columns(3, &[Column::of(&xs), Column::of(&short)])
            .count();
        assert!(
            matches!(r, Err(Error::LengthMismatch { left: 3, right: 2 })),
            "{r:?}"
        );
        let r = c.from_columns(9, &[Column::bits(&bits, 0)]).count();
        assert!(
            matches!(r, Err(Error::LengthMismatch { left: 9, right: 8 })),
            "{r:?}"
        );
        // Keys spanning about 3 * 10^6 values: past the dense plan's 2^20 on any device.
        let wide: Vec<i32> = (0..3000).map(|i| i * 1000).collect();
        let r = c
            .from_columns(wide.len(), &[Column::of(&wide)])
            .group_by(ScalarType::I32, |r| r[0].clone())
            .sums(&[ScalarValue::U32(0)], |_| vec![lit(1u32).erase()]);
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        // A value of another type than the identity's is an IR error, not a panic.
        let r = c.from_columns(3, &[Column::of(&xs)]).fold(
            &[ScalarValue::F32(0.0)],
            |a, b| vec![(a[0].typed::<f32>() + b[0].typed::<f32>()).erase()],
            Combine::AnyOrder,
        );
        assert!(r.is_err(), "{r:?}");
    });
}
