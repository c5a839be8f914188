//! Arrow columns through kiln queries on every backend, against plain Rust over
//! `Option`s: SQL's null rules, sliced arrays, record batches, decimals, dictionaries.

#[path = "../../../tests/it/common/mod.rs"]
mod common;

use arrow_array::types::{Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type};
use arrow_array::{
    Array, ArrayRef, Date32Array, Decimal128Array, DictionaryArray, Float32Array, Float64Array,
    Int32Array, Int64Array, PrimitiveArray, RecordBatch, UInt32Array, UInt8Array,
};
use common::{ctx, every_backend, has_f64, has_i64};
use kiln_arrow::{column, ArrowQueries, Column, Error, Nullable};
use std::sync::Arc;

/// `n` pseudo-random numbers from `seed`.
fn numbers(seed: u64, n: usize) -> Vec<u64> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        })
        .collect()
}

/// `n` optional values from `make`, about one in `every` null (none when `every` is 0).
fn optional<T>(seed: u64, n: usize, every: u64, make: impl Fn(u64) -> T) -> Vec<Option<T>> {
    numbers(seed, n)
        .into_iter()
        .map(|r| (every == 0 || r % every != 0).then(|| make(r >> 8)))
        .collect()
}

/// The lengths each test runs: empty, one, odd, a few groups' worth.
const LENGTHS: [usize; 5] = [0, 1, 7, 1000, 4099];

/// The non-null values of `rows`.
fn present<T: Copy>(rows: &[Option<T>]) -> Vec<T> {
    rows.iter().flatten().copied().collect()
}

#[test]
fn nullable_i32_columns_follow_sql() {
    every_backend(|| {
        let ctx = ctx();
        for (n, every) in LENGTHS.into_iter().flat_map(|n| [(n, 0), (n, 3), (n, 1)]) {
            let rows = optional(n as u64 + 11, n, every, |r| (r % 2001) as i32 - 1000);
            let array = Int32Array::from(rows.clone());
            let col = &array;
            assert_eq!(
                col.null_count(),
                rows.iter().filter(|r| r.is_none()).count()
            );
            let mapped = ctx.from_arrow(col).map(|x| x * 3 - 7).to_vec().unwrap();
            let want: Vec<Option<i32>> = rows.iter().map(|r| r.map(|x| x * 3 - 7)).collect();
            assert_eq!(mapped, want, "map, n = {n}, null every {every}");
            let kept = ctx.from_arrow(col).filter(|x| x.gt(100)).to_vec().unwrap();
            let want: Vec<Option<i32>> = present(&rows)
                .into_iter()
                .filter(|x| *x > 100)
                .map(Some)
                .collect();
            assert_eq!(kept, want, "filter, n = {n}");
            let values = present(&rows);
            let sum = values.iter().fold(0i32, |a, b| a.wrapping_add(*b));
            let sum = (!values.is_empty()).then_some(sum);
            assert_eq!(ctx.from_arrow(col).sum().unwrap(), sum, "sum, n = {n}");
            assert_eq!(ctx.from_arrow(col).count().unwrap(), values.len());
            assert_eq!(ctx.from_arrow(col).count_rows().unwrap(), n);
            let min = ctx.from_arrow(col).min().unwrap();
            assert_eq!(min, values.iter().copied().min(), "min, n = {n}");
            let max = ctx.from_arrow(col).max().unwrap();
            assert_eq!(max, values.iter().copied().max(), "max, n = {n}");
            let average = ctx.from_arrow(col).average().unwrap();
            let want = (!values.is_empty())
                .then(|| values.iter().map(|v| *v as f64).sum::<f64>() / values.len() as f64);
            match (average, want) {
                (Some(a), Some(w)) => assert!((a - w).abs() <= 1e-9 * w.abs().max(1.0)),
                (a, w) => assert_eq!(a, w),
            }
            let back = ctx.from_arrow(col).to_arrow::<Int32Type>().unwrap();
            assert_eq!(back, array, "to_arrow, n = {n}");
        }
    });
}

#[test]
fn float_sums_skip_nulls_and_keep_the_sign_of_zero() {
    every_backend(|| {
        let ctx = ctx();
        for n in LENGTHS {
            let rows = optional(n as u64 + 5, n, 4, |r| (r % 10_000) as f32 * 0.01 - 50.0);
            let array = Float32Array::from(rows.clone());
            let col = &array;
            let values = present(&rows);
            let want: f64 = values.iter().map(|v| *v as f64).sum();
            match ctx.from_arrow(col).sum().unwrap() {
                Some(got) => assert!(
                    (got as f64 - want).abs() <= 1e-4 * values.len() as f64,
                    "sum {got} vs {want}, n = {n}"
                ),
                None => assert!(values.is_empty(), "no sum with {} values", values.len()),
            }
            let doubled = ctx
                .from_arrow(col)
                .map(|x| x * 2.0)
                .to_arrow::<Float32Type>();
            let want =
                Float32Array::from(rows.iter().map(|r| r.map(|x| x * 2.0)).collect::<Vec<_>>());
            assert_eq!(doubled.unwrap(), want);
        }
        // Plain Rust's float sum starts from -0.0: a column of -0.0 and a null sums to -0.0.
        let zeros = Float32Array::from(vec![Some(-0.0f32), None, Some(-0.0)]);
        let sum = ctx.from_arrow(&zeros).sum().unwrap();
        let want: f32 = [-0.0f32, -0.0].iter().sum();
        assert_eq!(sum.map(f32::to_bits), Some(want.to_bits()));
    });
}

#[test]
fn zipped_columns_are_null_where_either_side_is() {
    every_backend(|| {
        let ctx = ctx();
        for n in LENGTHS {
            let a = optional(n as u64 + 1, n, 3, |r| (r % 1000) as u32);
            let b = optional(n as u64 + 2, n, 5, |r| (r % 100) as u8);
            let (aa, ba) = (UInt32Array::from(a.clone()), UInt8Array::from(b.clone()));
            let (ac, bc) = (&aa, &ba);
            let got = ctx
                .from_arrow(ac)
                .zip(bc)
                .map(|(x, y)| x * y.cast::<u32>())
                .to_vec()
                .unwrap();
            let want: Vec<Option<u32>> = a
                .iter()
                .zip(&b)
                .map(|(x, y)| Some(x.as_ref()? * *y.as_ref()? as u32))
                .collect();
            assert_eq!(got, want, "n = {n}");
            // A column without nulls zips in as always valid.
            let dense = UInt8Array::from(b.iter().map(|v| v.unwrap_or(9)).collect::<Vec<_>>());
            let kept = ctx
                .from_arrow(ac)
                .zip(&dense)
                .filter(|(x, y)| x.gt(y.cast::<u32>()))
                .count_rows()
                .unwrap();
            let want = a
                .iter()
                .zip(&b)
                .filter(|(x, y)| x.is_some_and(|x| x > y.unwrap_or(9) as u32))
                .count();
            assert_eq!(kept, want, "n = {n}");
        }
    });
}

#[test]
fn sliced_arrays_read_from_their_offset() {
    every_backend(|| {
        let ctx = ctx();
        let rows = optional(99, 300, 3, |r| (r % 5000) as i32);
        let array = Int32Array::from(rows.clone());
        for (offset, len) in [(0, 300), (1, 17), (13, 200), (299, 1), (300, 0)] {
            let slice = array.slice(offset, len);
            let col = &slice;
            let got = ctx.from_arrow(col).map(|x| x + 1).to_vec().unwrap();
            let want: Vec<Option<i32>> = rows[offset..offset + len]
                .iter()
                .map(|r| r.map(|x| x + 1))
                .collect();
            assert_eq!(got, want, "slice {offset}..+{len}");
        }
    });
}

#[test]
fn wide_types_dates_and_dictionaries() {
    every_backend(|| {
        let ctx = ctx();
        let days = Date32Array::from(vec![Some(19_000), None, Some(-5)]);
        let later = ctx
            .from_arrow(&days)
            .map(|d| d + 30)
            .to_arrow::<Date32Type>()
            .unwrap();
        assert_eq!(later, Date32Array::from(vec![Some(19_030), None, Some(25)]));
        let keys = Int32Array::from(vec![Some(2), None, Some(0), Some(2)]);
        let values = Arc::new(arrow_array::StringArray::from(vec!["a", "b", "c"]));
        let dict = DictionaryArray::<Int32Type>::try_new(keys, values).unwrap();
        let codes = ctx.from_arrow(&dict).to_vec().unwrap();
        assert_eq!(codes, [Some(2), None, Some(0), Some(2)]);
        if has_f64() {
            let xs = Float64Array::from(vec![Some(1.5), None, Some(-2.25)]);
            let col = &xs;
            assert_eq!(ctx.from_arrow(col).sum().unwrap(), Some(-0.75));
            let back = ctx.from_arrow(col).to_arrow::<Float64Type>().unwrap();
            assert_eq!(back, xs);
        }
        if has_i64() {
            let big = Int64Array::from(vec![Some(i64::MAX), Some(1), None]);
            let col = &big;
            assert_eq!(ctx.from_arrow(col).sum().unwrap(), Some(i64::MIN));
            assert_eq!(ctx.from_arrow(col).max().unwrap(), Some(i64::MAX));
            // Decimal128(10, 2): 12.34 + -0.05 = 12.29 as scaled integers.
            let money = Decimal128Array::from(vec![Some(1234i128), None, Some(-5)])
                .with_precision_and_scale(10, 2)
                .unwrap();
            let cents = Column::decimal128(&money).unwrap();
            assert_eq!(ctx.from_arrow(&cents).sum().unwrap(), Some(1229));
            let back = ctx.from_arrow(&cents).to_arrow::<Int64Type>().unwrap();
            assert_eq!(back, Int64Array::from(vec![Some(1234), None, Some(-5)]));
        }
    });
}

#[test]
fn decimals_outside_i64_and_missing_columns_are_typed_errors() {
    let huge = Decimal128Array::from(vec![Some(1i128), Some(i64::MAX as i128 + 1)]);
    match Column::decimal128(&huge) {
        Err(Error::DecimalOutOfRange { row: 1, value }) => assert_eq!(value, i64::MAX as i128 + 1),
        other => panic!("expected DecimalOutOfRange, got {:?}", other.err()),
    }
    // A null row's placeholder does not count, whatever it holds.
    let nulled = Decimal128Array::new(
        vec![5i128, i128::MAX].into(),
        Some(vec![true, false].into()),
    );
    let cents = Column::decimal128(&nulled).unwrap();
    let cpu = kiln::Context::with_backend(kiln::BackendKind::Cpu).unwrap();
    assert_eq!(cpu.from_arrow(&cents).sum().unwrap(), Some(5));
    let price: ArrayRef = Arc::new(Float32Array::from(vec![1.0, 2.0]));
    let qty: ArrayRef = Arc::new(UInt32Array::from(vec![3, 4]));
    let batch = RecordBatch::try_from_iter([("price", price), ("qty", qty)]).unwrap();
    match column::<Float32Type>(&batch, "cost") {
        Err(Error::NoColumn { name, available }) => {
            assert_eq!(
                (name.as_str(), available),
                ("cost", vec!["price".to_string(), "qty".into()])
            )
        }
        other => panic!("expected NoColumn, got {:?}", other.err()),
    }
    match column::<Float32Type>(&batch, "qty") {
        Err(Error::WrongType {
            expected, found, ..
        }) => {
            assert_eq!((expected.as_str(), found.as_str()), ("Float32", "UInt32"))
        }
        other => panic!("expected WrongType, got {:?}", other.err()),
    }
}

#[test]
fn record_batch_columns_zip_by_name() {
    every_backend(|| {
        let ctx = ctx();
        let n = 1000;
        let prices: Vec<Option<f32>> = optional(3, n, 7, |r| (r % 1000) as f32 * 0.5);
        let qty: Vec<Option<u32>> = optional(4, n, 0, |r| (r % 10) as u32);
        let batch = RecordBatch::try_from_iter([
            ("qty", Arc::new(UInt32Array::from(qty.clone())) as ArrayRef),
            (
                "price",
                Arc::new(Float32Array::from(prices.clone())) as ArrayRef,
            ),
        ])
        .unwrap();
        let price = column::<Float32Type>(&batch, "price").unwrap();
        let count = column::<UInt32Type>(&batch, "qty").unwrap();
        let revenue = ctx
            .from_arrow(price)
            .zip(count)
            .map(|(p, q)| p * q.cast::<f32>())
            .to_arrow::<Float32Type>()
            .unwrap();
        let want: PrimitiveArray<Float32Type> = prices
            .iter()
            .zip(&qty)
            .map(|(p, q)| Some(p.as_ref()? * q.unwrap() as f32))
            .collect();
        assert_eq!(revenue, want);
        assert_eq!(
            revenue.null_count(),
            prices.iter().filter(|p| p.is_none()).count()
        );
        let small = ctx
            .from_arrow(count)
            .filter(|q| q.lt(3u32))
            .to_arrow::<UInt32Type>()
            .unwrap();
        let want: UInt32Array = qty
            .iter()
            .flatten()
            .filter(|q| **q < 3)
            .map(|q| Some(*q))
            .collect();
        assert_eq!(small, want);
        let bytes = UInt8Array::from(vec![Some(200u8), None, Some(100)]);
        let total = ctx.from_arrow(&bytes).sum().unwrap();
        assert_eq!(total, Some(200u8.wrapping_add(100)));
    });
}

/// SQL's `AND` of two optional booleans (three-valued logic).
fn sql_and(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

/// SQL's `OR` of two optional booleans.
fn sql_or(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

#[test]
fn columns_keep_their_own_nulls_and_logic_has_three_values() {
    every_backend(|| {
        let ctx = ctx();
        for n in LENGTHS {
            let a = optional(n as u64 + 31, n, 3, |r| (r % 41) as i32 - 20);
            let b = optional(n as u64 + 32, n, 4, |r| (r % 17) as i32 - 8);
            let (aa, ba) = (Int32Array::from(a.clone()), Int32Array::from(b.clone()));
            let (ac, bc) = (&aa, &ba);
            // Each column of a mapped tuple is NULL where its own operands are.
            let got = ctx
                .from_arrow(ac)
                .zip(bc)
                .map(|(x, y)| (x - y, x.coalesce(y), Nullable::valid(x.is_null())))
                .to_vec()
                .unwrap();
            let want: Vec<_> = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (x.zip(*y).map(|(x, y)| x - y), x.or(*y), Some(x.is_none())))
                .collect();
            assert_eq!(got, want, "map, n = {n}");
            // WHERE a > 5 OR b < 0 AND NOT a = b: rows whose predicate is NULL are dropped.
            let kept = ctx
                .from_arrow(ac)
                .zip(bc)
                .filter(|(x, y)| x.gt(5).or(y.lt(0).and(x.eq(y).not())))
                .to_vec()
                .unwrap();
            let want: Vec<_> = a
                .iter()
                .zip(&b)
                .filter(|(x, y)| {
                    let gt = x.map(|x| x > 5);
                    let lt = y.map(|y| y < 0);
                    let ne = x.zip(**y).map(|(x, y)| x != y);
                    sql_or(gt, sql_and(lt, ne)) == Some(true)
                })
                .map(|(x, y)| (*x, *y))
                .collect();
            assert_eq!(kept, want, "filter, n = {n}");
            let between = ctx
                .from_arrow(ac)
                .filter(|x| x.between(-3, 4))
                .count()
                .unwrap();
            let want = present(&a).iter().filter(|x| (-3..=4).contains(*x)).count();
            assert_eq!(between, want, "between, n = {n}");
        }
    });
}

/// The reference of a nullable grouping: groups in ascending key order, then the NULL key's,
/// each with `agg` of its non-null values (`None` when it has none).
fn sql_groups<K: Ord + Copy, V: Copy, R>(
    keys: &[Option<K>],
    values: &[Option<V>],
    agg: impl Fn(&[V]) -> R,
) -> Vec<(Option<K>, Option<R>)> {
    let mut groups = std::collections::BTreeMap::<K, Vec<V>>::new();
    let mut null_group: Option<Vec<V>> = None;
    for (k, v) in keys.iter().zip(values) {
        let slot = match k {
            Some(k) => groups.entry(*k).or_default(),
            None => null_group.get_or_insert_with(Vec::new),
        };
        slot.extend(*v);
    }
    let of = |vs: Vec<V>| (!vs.is_empty()).then(|| agg(&vs));
    let mut out: Vec<_> = groups
        .into_iter()
        .map(|(k, vs)| (Some(k), of(vs)))
        .collect();
    if let Some(vs) = null_group {
        out.push((None, of(vs)));
    }
    out
}

#[test]
fn group_by_puts_null_keys_in_one_group_and_skips_null_values() {
    every_backend(|| {
        let ctx = ctx();
        for n in LENGTHS {
            // Keys 1 apart take the dense plan, keys 70001 apart the sort.
            for spread in [1i32, 70_001] {
                let keys = optional(n as u64 + 41, n, 5, |r| ((r % 13) as i32 - 6) * spread);
                let values = optional(n as u64 + 42, n, 3, |r| (r % 1001) as i32 - 500);
                let (ka, va) = (
                    Int32Array::from(keys.clone()),
                    Int32Array::from(values.clone()),
                );
                let (kc, vc) = (&ka, &va);
                let at = format!("n = {n}, spread {spread}");
                let rows = || ctx.from_arrow(kc).zip(vc).group_by(|(k, _)| k);
                let sum = |vs: &[i32]| vs.iter().fold(0i32, |a, b| a.wrapping_add(*b));
                let want = sql_groups(&keys, &values, sum);
                assert_eq!(rows().sum(|(_, v)| v).unwrap(), want, "sum, {at}");
                let want = sql_groups(&keys, &values, |vs| *vs.iter().min().unwrap());
                assert_eq!(rows().min(|(_, v)| v).unwrap(), want, "min, {at}");
                let want = sql_groups(&keys, &values, |vs| *vs.iter().max().unwrap());
                assert_eq!(rows().max(|(_, v)| v).unwrap(), want, "max, {at}");
                let counts: Vec<_> = sql_groups(&keys, &keys, |_| ())
                    .into_iter()
                    .map(|(k, _)| {
                        let rows = keys.iter().filter(|x| **x == k).count();
                        (k, rows)
                    })
                    .collect();
                assert_eq!(rows().count().unwrap(), counts, "count(*), {at}");
                let want: Vec<_> = sql_groups(&keys, &values, |vs| vs.len())
                    .into_iter()
                    .map(|(k, c)| (k, c.unwrap_or(0)))
                    .collect();
                assert_eq!(
                    rows().count_values(|(_, v)| v).unwrap(),
                    want,
                    "count(v), {at}"
                );
                let averages = rows().average(|(_, v)| v).unwrap();
                let want = sql_groups(&keys, &values, |vs| {
                    vs.iter().map(|v| *v as f64).sum::<f64>() / vs.len() as f64
                });
                assert_eq!(averages.len(), want.len(), "avg, {at}");
                for ((k, got), (wk, w)) in averages.iter().zip(&want) {
                    assert_eq!(k, wk, "avg keys, {at}");
                    match (got, w) {
                        (Some(g), Some(w)) => assert!((g - w).abs() <= 1e-4, "{g} vs {w}, {at}"),
                        (g, w) => assert_eq!(g, w, "avg, {at}"),
                    }
                }
            }
        }
    });
}

#[test]
fn sorts_scans_and_histograms_place_nulls_as_sql_does() {
    every_backend(|| {
        let ctx = ctx();
        for n in LENGTHS {
            let xs = optional(n as u64 + 51, n, 4, |r| (r % 2001) as i32 - 1000);
            let array = Int32Array::from(xs.clone());
            let col = &array;
            let mut valid = present(&xs);
            valid.sort();
            let nulls = n - valid.len();
            let asc: Vec<Option<i32>> = valid
                .iter()
                .map(|v| Some(*v))
                .chain(std::iter::repeat_n(None, nulls))
                .collect();
            assert_eq!(ctx.from_arrow(col).sort().unwrap(), asc, "asc, n = {n}");
            let desc: Vec<Option<i32>> = std::iter::repeat_n(None, nulls)
                .chain(valid.iter().rev().map(|v| Some(*v)))
                .collect();
            assert_eq!(
                ctx.from_arrow(col).sort_desc().unwrap(),
                desc,
                "desc, n = {n}"
            );
            let mut total: Option<i32> = None;
            let running: Vec<Option<i32>> = xs
                .iter()
                .map(|x| {
                    if let Some(x) = x {
                        total = Some(total.unwrap_or(0).wrapping_add(*x));
                    }
                    total
                })
                .collect();
            let got = ctx.from_arrow(col).running(0, |a, b| a + b).unwrap();
            assert_eq!(got, running, "running sum, n = {n}");
            let bytes = optional(n as u64 + 52, n, 3, |r| (r % 256) as u8);
            let bytes_array = UInt8Array::from(bytes.clone());
            let mut want = vec![0u32; 200];
            for b in present(&bytes) {
                if (b as usize) < 200 {
                    want[b as usize] += 1;
                }
            }
            assert_eq!(
                ctx.from_arrow(&bytes_array).histogram(200).unwrap(),
                want,
                "histogram, n = {n}"
            );
        }
    });
}

#[test]
fn decimal_sums_are_exact_and_overflow_is_an_error() {
    every_backend(|| {
        if !has_i64() {
            return;
        }
        let ctx = ctx();
        for n in LENGTHS {
            // Scaled values near i64's ends: an i64 sum would wrap, the exact sum does not.
            let scaled = optional(n as u64 + 61, n, 3, |r| match r % 3 {
                0 => i64::MAX - (r % 1000) as i64,
                1 => i64::MIN + (r % 1000) as i64,
                _ => (r % 1_000_000) as i64,
            });
            let money =
                Decimal128Array::from(scaled.iter().map(|v| v.map(i128::from)).collect::<Vec<_>>())
                    .with_precision_and_scale(38, 2)
                    .unwrap();
            let cents = Column::decimal128(&money).unwrap();
            let values = present(&scaled);
            let exact =
                (!values.is_empty()).then(|| values.iter().map(|v| i128::from(*v)).sum::<i128>());
            assert_eq!(
                ctx.from_arrow(&cents).sum_exact().unwrap(),
                exact,
                "n = {n}"
            );
            assert_eq!(ctx.from_arrow(&cents).sum_decimal128(38).unwrap(), exact);
            let back = ctx.from_arrow(&cents).to_decimal128(38, 2).unwrap();
            assert_eq!(back, money, "to_decimal128, n = {n}");
            if let Some(sum) = exact.filter(|s| s.unsigned_abs() >= 10u128.pow(19)) {
                match ctx.from_arrow(&cents).sum_decimal128(19) {
                    Err(Error::DecimalOverflow {
                        value,
                        precision: 19,
                    }) => {
                        assert_eq!(value, sum)
                    }
                    other => panic!("expected DecimalOverflow, got {other:?}"),
                }
            }
        }
        let small = Column::decimal128(
            &Decimal128Array::from(vec![Some(99_999i128), None])
                .with_precision_and_scale(7, 2)
                .unwrap(),
        )
        .unwrap();
        match ctx.from_arrow(&small).to_decimal128(4, 2) {
            Err(Error::DecimalOverflow {
                value: 99_999,
                precision: 4,
            }) => {}
            other => panic!("expected DecimalOverflow, got {other:?}"),
        }
    });
}
