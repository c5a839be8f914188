//! Sorts by keys of several parts (tuple keys, `then_by`, `then_by_desc`) against Rust's
//! stable sorts comparing the same tuples; single-key sorts are in `queries`.

use crate::common::{every_backend_plan_and_size, has_i64};
use std::cmp::Ordering;

/// A spread of `i` over `0..m`.
fn spread(i: u32, m: u32) -> u32 {
    i.wrapping_mul(2_654_435_761).rotate_right(11) % m
}

/// Float keys with many ties among NaN of both signs, infinities and zeros of both signs.
fn float_key(i: u32) -> f32 {
    let specials = [
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.5,
        -1.5,
    ];
    specials[spread(i ^ 0x99, 8) as usize]
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
