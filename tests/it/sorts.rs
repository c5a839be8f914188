//! Sorts by keys of several parts (tuple keys, `then_by`, `then_by_desc`) against Rust's
//! stable sorts comparing the same tuples, and `top_k` / `bottom_k` against the first `k` of
//! Rust's sorts; single-key sorts are in `queries`.

use crate::common::{every_backend_plan_and_size, has_i64, spread, SPECIAL_F32};
use std::cmp::Ordering;

/// Float keys with many ties, among `SPECIAL_F32` (NaN of both signs, infinities, zeros).
fn float_key(i: u32) -> f32 {
    SPECIAL_F32[spread(i ^ 0x99, 8) as usize]
}

/// Rows `(small, signed, index)`: a `u8` of 5 values, an `i16` of 7 values around zero and
/// the row's index, so ties on both keys are common and the index shows the order kept.
fn rows(n: usize) -> (Vec<u8>, Vec<i16>, Vec<u32>) {
    let idx: Vec<u32> = (0..n as u32).collect();
    let small = idx.iter().map(|&i| spread(i, 5) as u8).collect();
    let signed = idx
        .iter()
        .map(|&i| spread(i ^ 0x55, 7) as i16 - 3)
        .collect();
    (small, signed, idx)
}

/// Tuple keys and `then_by` on integer and float parts, ascending and descending, packed
/// into one 32-bit key, one 64-bit key, or (past 64 bits, or past 32 where the device has no
/// 64-bit integers) several sorts; a filter before the sort; two key closures with captured
/// constants that change between runs (each closure's constants stay its own); rows equal in
/// every part keep their input order.
#[test]
fn composite_keys_match_rust_sorts_by_tuples() {
    every_backend_plan_and_size(&[0, 1, 2, 7, 300, 16385, 100_003], |c, n, at| {
        let (small, signed, idx) = rows(n);
        let host: Vec<(u8, i16, u32)> = (0..n).map(|i| (small[i], signed[i], idx[i])).collect();
        let q = || {
            c.from(&small)
                .zip(&signed)
                .zip(&idx)
                .map(|((a, b), i)| (a, b, i))
        };

        let mut want = host.clone();
        want.sort_by_key(|r| (r.0, r.1));
        let got = q().sort_by_key(|(a, b, _)| (a, b)).to_vec().unwrap();
        assert_eq!(got, want, "(u8, i16) tuple key, {at}");

        let mut want = host.clone();
        want.sort_by(|x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
        let got = q().sort_by_key(|(a, _, _)| a).then_by_desc(|(_, b, _)| b);
        assert_eq!(got.to_vec().unwrap(), want, "u8 then i16 descending, {at}");

        let mut want = host.clone();
        want.sort_by(|x, y| y.1.cmp(&x.1).then(y.0.cmp(&x.0)));
        let got = q().sort_by_key_desc(|(a, b, _)| (b, a)).to_vec().unwrap();
        assert_eq!(got, want, "(i16, u8) descending, {at}");

        let mut want: Vec<_> = host.iter().copied().filter(|r| r.1 != 0).collect();
        want.sort_by_key(|r| (r.1, std::cmp::Reverse(r.2)));
        let got = q()
            .filter(|(_, b, _)| b.ne(0i16))
            .sort_by_key(|(_, b, _)| b)
            .then_by_desc(|(_, _, i)| i)
            .to_vec()
            .unwrap();
        assert_eq!(got, want, "filtered, i16 then index descending, {at}");

        // Float parts in total order: 40 bits (one 64-bit key, or two sorts).
        let fs: Vec<f32> = idx.iter().map(|&i| float_key(i)).collect();
        let bits = |v: &[(f32, u8, u32)]| {
            v.iter()
                .map(|r| (r.0.to_bits(), r.1, r.2))
                .collect::<Vec<_>>()
        };
        let host: Vec<(f32, u8, u32)> = (0..n).map(|i| (fs[i], small[i], idx[i])).collect();
        let fq = || {
            c.from(&fs)
                .zip(&small)
                .zip(&idx)
                .map(|((f, a), i)| (f, a, i))
        };
        let mut want = host.clone();
        want.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
        let got = fq().sort_by_key(|(f, a, _)| (f, a)).to_vec().unwrap();
        assert_eq!(bits(&got), bits(&want), "(f32, u8), {at}");
        let mut want = host.clone();
        want.sort_by(|x, y| y.1.cmp(&x.1).then(y.0.total_cmp(&x.0)));
        let got = fq()
            .sort_by_key_desc(|(_, a, _)| a)
            .then_by_desc(|(f, _, _)| f);
        assert_eq!(
            bits(&got.to_vec().unwrap()),
            bits(&want),
            "u8 then f32, {at}"
        );

        // 32 + 32 + 16 + 8 bits: more than one sort everywhere.
        let h: Vec<u32> = idx
            .iter()
            .map(|&i| spread(i, 3) << 30 | spread(i, 2))
            .collect();
        let host: Vec<(u32, f32, i16, u8)> =
            (0..n).map(|i| (h[i], fs[i], signed[i], small[i])).collect();
        let mut want = host.clone();
        want.sort_by(|x, y| {
            (x.0.cmp(&y.0))
                .then(y.1.total_cmp(&x.1))
                .then(x.2.cmp(&y.2))
                .then(x.3.cmp(&y.3))
        });
        let got = c
            .from(&h)
            .zip(&fs)
            .zip(&signed)
            .zip(&small)
            .map(|(((h, f), s), a)| (h, f, s, a))
            .sort_by_key(|(h, _, _, _)| h)
            .then_by_desc(|(_, f, _, _)| f)
            .then_by(|(_, _, s, a)| (s, a))
            .to_vec()
            .unwrap();
        let key = |v: &[(u32, f32, i16, u8)]| {
            v.iter()
                .map(|r| (r.0, r.1.to_bits(), r.2, r.3))
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&got), key(&want), "u32, f32 desc., (i16, u8), {at}");

        // Captured constants in two key closures, run again with other values.
        for (m1, m2) in [(3u32, 5u32), (4, 3), (5, 4), (2, 2)] {
            let mut want = idx.clone();
            want.sort_by(|x, y| (x % m1).cmp(&(y % m1)).then((y % m2).cmp(&(x % m2))));
            let got = c
                .from(&idx)
                .sort_by_key(move |x| x % m1)
                .then_by_desc(move |x| x % m2)
                .to_vec()
                .unwrap();
            assert_eq!(got, want, "x % {m1} then x % {m2} descending, {at}");
        }

        let mut want = h.clone();
        want.sort_by_key(|x| (x % 7, std::cmp::Reverse(*x)));
        let buf = c.upload(&h).unwrap();
        let got = c
            .from_buffer(&buf)
            .sort_by_key(|x| x % 7u32)
            .then_by_desc(|x| x)
            .to_buffer()
            .unwrap();
        assert_eq!(got.download().unwrap(), want, "into a buffer, {at}");

        if has_i64() && n <= 16385 {
            let wide: Vec<i64> = idx
                .iter()
                .map(|&i| (spread(i, 4) as i64 - 2) << 40)
                .collect();
            let mut want: Vec<(i64, u8, u32)> =
                (0..n).map(|i| (wide[i], small[i], idx[i])).collect();
            want.sort_by(|x, y| match x.0.cmp(&y.0) {
                Ordering::Equal => y.1.cmp(&x.1),
                o => o,
            });
            let got = c
                .from(&wide)
                .zip(&small)
                .zip(&idx)
                .map(|((w, a), i)| (w, a, i))
                .sort_by_key(|(w, _, _)| w)
                .then_by_desc(|(_, a, _)| a)
                .to_vec()
                .unwrap();
            assert_eq!(got, want, "i64 then u8 descending, {at}");
        }
    });
}

/// `explain` shows one radix sort per packed key: three `u32` parts take two sorts where
/// the device has 64-bit integers (a 64-bit key, then a 32-bit one), three elsewhere, with a
/// pass per byte of each.
#[test]
fn explain_shows_a_sort_per_packed_key() {
    every_backend_plan_and_size(&[1000], |c, _, at| {
        let xs: Vec<u32> = (0..1000).collect();
        let plan = c.from(&xs).sort_by_key(|x| x).then_by(|x| (x, x)).explain();
        assert_eq!(
            plan.matches("launch query_sort_scatter").count(),
            12,
            "{at}\n{plan}"
        );
        let sorts = if has_i64() { 2 } else { 3 };
        assert_eq!(plan.matches("sort plan (").count(), sorts, "{at}\n{plan}");
    });
}

/// The first `k` of `xs` sorted by `cmp`.
fn first_k<T: Copy>(xs: &[T], k: usize, cmp: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    let mut v = xs.to_vec();
    v.sort_by(cmp);
    v.truncate(k);
    v
}

/// `top_k` and `bottom_k` against the first `k` of Rust's sorts: `k` from 0 past the
/// length, ints with many ties and spread ones, floats with NaN of both signs, infinities
/// and zeros of both signs (total order), 8-, 16- and 64-bit elements, after a filter, from
/// a buffer; a third call with other data and `k` compiles nothing.
#[test]
fn top_k_and_bottom_k_match_the_first_k_of_rust_sorts() {
    every_backend_plan_and_size(&[0, 1, 2, 7, 300, 16385, 100_003], |c, n, at| {
        let idx: Vec<u32> = (0..n as u32).collect();
        let tied: Vec<i32> = idx.iter().map(|&i| spread(i, 97) as i32 - 48).collect();
        let wide: Vec<i32> = idx
            .iter()
            .map(|&i| i.wrapping_mul(2_654_435_761) as i32)
            .collect();
        let fs: Vec<f32> = idx
            .iter()
            .map(|&i| match i % 5 {
                0 => float_key(i),
                _ => spread(i, 10_007) as f32 * 0.25 - 1000.0,
            })
            .collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let ks = match n > 300 {
            true => vec![5, n / 2],
            false => vec![0, 1, 2, 5, n / 2, n.saturating_sub(1), n, n + 3],
        };
        for k in ks {
            let at = format!("k {k}, {at}");
            let want = first_k(&tied, k, |a, b| b.cmp(a));
            assert_eq!(c.from(&tied).top_k(k).unwrap(), want, "i32 top, {at}");
            let want = first_k(&wide, k, |a, b| a.cmp(b));
            assert_eq!(c.from(&wide).bottom_k(k).unwrap(), want, "i32 bottom, {at}");
            let want = first_k(&fs, k, |a, b| b.total_cmp(a));
            let got = c.from(&fs).top_k(k).unwrap();
            assert_eq!(bits(&got), bits(&want), "f32 top, {at}");
            let want = first_k(&fs, k, f32::total_cmp);
            let got = c.from(&fs).bottom_k(k).unwrap();
            assert_eq!(bits(&got), bits(&want), "f32 bottom, {at}");
        }
        let k = n / 3 + 1;
        let bytes: Vec<u8> = tied.iter().map(|x| *x as u8).collect();
        let want = first_k(&bytes, k, |a, b| b.cmp(a));
        assert_eq!(c.from(&bytes).top_k(k).unwrap(), want, "u8 top, {at}");
        let shorts: Vec<i16> = wide.iter().map(|x| (*x >> 16) as i16).collect();
        let want = first_k(&shorts, k, |a, b| a.cmp(b));
        assert_eq!(
            c.from(&shorts).bottom_k(k).unwrap(),
            want,
            "i16 bottom, {at}"
        );
        let kept: Vec<i32> = wide.iter().copied().filter(|x| x % 3 == 0).collect();
        let want = first_k(&kept, k, |a, b| b.cmp(a));
        let buf = c.upload(&wide).unwrap();
        let got = c.from_buffer(&buf).filter(|x| (x % 3i32).eq(0i32)).top_k(k);
        assert_eq!(got.unwrap(), want, "filtered buffer top, {at}");
        if has_i64() && n <= 16385 {
            let longs: Vec<i64> = wide.iter().map(|x| (*x as i64) << 20 | 7).collect();
            let want = first_k(&longs, k, |a, b| b.cmp(a));
            assert_eq!(c.from(&longs).top_k(k).unwrap(), want, "i64 top, {at}");
        }
        if n == 16385 {
            let _ = c.from(&wide[..100]).top_k(7).unwrap();
            let before = c.stats().compilations;
            let want = first_k(&tied[200..5000], 40, |a, b| b.cmp(a));
            assert_eq!(c.from(&tied[200..5000]).top_k(40).unwrap(), want, "{at}");
            let compiled = c.stats().compilations - before;
            assert_eq!(
                compiled, 0,
                "a third top_k compiled {compiled} kernels, {at}"
            );
        }
    });
}
