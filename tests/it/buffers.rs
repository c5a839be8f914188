//! Device-resident buffers: chains of queries over `Buffer`s stay on the device and give the
//! same answers as the same chains over host slices, on every backend.

use crate::common::{ctx, every_backend, has_f64};
use kiln::prelude::*;

#[test]
fn chains_of_queries_over_buffers_stay_on_the_device() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<f32> = (0..100_003)
            .map(|i| ((i * 37) % 1001) as f32 - 500.0)
            .collect();
        let ys: Vec<i32> = (0..100_003).map(|i| (i % 7) - 3).collect();
        let bx = c.upload(&xs).unwrap();
        let by = c.upload(&ys).unwrap();
        assert_eq!(bx.len(), xs.len());
        assert_eq!(bx.download().unwrap(), xs, "upload then download");
        let before = c.stats();
        let scaled = c
            .from_buffer(&bx)
            .zip_buffer(&by)
            .map(|(x, y)| x * y.cast::<f32>())
            .to_buffer()
            .unwrap();
        let kept = c
            .from_buffer(&scaled)
            .filter(|v| v.gt(100.0))
            .to_buffer()
            .unwrap();
        // In f64 where the device has it; in f32 (the same launches) where not.
        let wide = |q: kiln::Query<'_, f32>| -> f64 {
            if has_f64() {
                q.map(|v| v.cast::<f64>()).sum().unwrap()
            } else {
                q.sum().unwrap() as f64
            }
        };
        let total = wide(c.from_buffer(&kept));
        c.synchronize().unwrap();
        assert_eq!(
            c.stats().launches - before.launches,
            1 + 2 + 2,
            "map, filter (count, scatter), sum"
        );
        let want_scaled: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| x * *y as f32).collect();
        let want_kept: Vec<f32> = want_scaled.iter().copied().filter(|v| *v > 100.0).collect();
        assert_eq!(scaled.download().unwrap(), want_scaled);
        assert_eq!(kept.download().unwrap(), want_kept);
        let want_total: f64 = want_kept.iter().map(|v| *v as f64).sum();
        let bound = if has_f64() { 1e-9 } else { 1e-5 };
        assert!(
            (total - want_total).abs() <= bound * want_total.abs().max(1.0),
            "{total} vs {want_total}"
        );
        let host_total = wide(
            c.from(&xs)
                .zip(&ys)
                .map(|(x, y)| x * y.cast::<f32>())
                .filter(|v| v.gt(100.0)),
        );
        assert_eq!(
            total.to_bits(),
            host_total.to_bits(),
            "buffers and slices give the same bits"
        );
    });
}

#[test]
fn empty_buffers_and_buffers_of_other_contexts() {
    every_backend(|| {
        let c = ctx();
        let empty = c.upload::<u32>(&[]).unwrap();
        assert!(empty.is_empty());
        assert_eq!(c.from_buffer(&empty).sum().unwrap(), 0);
        assert!(c
            .from_buffer(&empty)
            .map(|x| x + 1)
            .to_buffer()
            .unwrap()
            .download()
            .unwrap()
            .is_empty());
        let other = Context::with_backend(c.device().backend).unwrap();
        let theirs = other.upload(&[1u32, 2, 3]).unwrap();
        match c.from_buffer(&theirs).sum() {
            Err(Error::Unsupported { what, .. }) => {
                assert!(what.contains("another context"), "{what}")
            }
            r => panic!("expected Unsupported, got {r:?}"),
        }
        let mine = c.upload(&[1u32, 2, 3]).unwrap();
        assert!(matches!(
            c.from_buffer(&mine)
                .zip_buffer(&theirs)
                .map(|(a, b)| a + b)
                .to_vec(),
            Err(Error::Unsupported { .. })
        ));
        assert_eq!(
            c.from_buffer(&mine).sum().unwrap(),
            6,
            "the context keeps working"
        );
    });
}

#[test]
fn device_copies_follow_earlier_launches_and_keep_every_byte() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<f32> = (0..70_001).map(|i| (i % 977) as f32 * 0.25).collect();
        let bx = c.upload(&xs).unwrap();
        let doubled = c.from_buffer(&bx).map(|x| x * 2.0).to_buffer().unwrap();
        let mut dst = c.upload(&vec![-1.0f32; xs.len()]).unwrap();
        dst.copy_from(&doubled).unwrap();
        let want: Vec<f32> = xs.iter().map(|x| x * 2.0).collect();
        assert_eq!(dst.download().unwrap(), want, "copy after the map");
        assert_eq!(bx.try_clone().unwrap().download().unwrap(), xs);
        // Byte elements whose length is not a whole number of 32-bit words.
        let bytes: Vec<u8> = (0..13u8).map(|b| b * 19).collect();
        let bb = c.upload(&bytes).unwrap();
        let mut db = c.upload(&[7u8; 13]).unwrap();
        db.copy_from(&bb).unwrap();
        assert_eq!(db.download().unwrap(), bytes);
        assert_eq!(bb.try_clone().unwrap().download().unwrap(), bytes);
        let mut short = c.upload(&[0u8; 12]).unwrap();
        match short.copy_from(&bb) {
            Err(Error::LengthMismatch { left, right }) => assert_eq!((left, right), (12, 13)),
            r => panic!("expected LengthMismatch, got {r:?}"),
        }
        let other = Context::with_backend(c.device().backend).unwrap();
        let theirs = other.upload(&bytes).unwrap();
        match db.copy_from(&theirs) {
            Err(Error::Unsupported { what, .. }) => {
                assert!(what.contains("another context"), "{what}")
            }
            r => panic!("expected Unsupported, got {r:?}"),
        }
        let mut empty = c.upload::<u16>(&[]).unwrap();
        empty.copy_from(&c.upload::<u16>(&[]).unwrap()).unwrap();
        assert_eq!(db.download().unwrap(), bytes, "the context keeps working");
    });
}

/// Buffers dropped in a loop give their device memory back for the next ones of the same
/// size (which then hold the old contents until written): every result is still exact.
#[test]
fn reused_device_memory_never_shows_old_contents() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<i32> = (0..50_000).map(|i| (i * 7919) % 1000 - 500).collect();
        let b = c.upload(&xs).unwrap();
        for round in 0..6 {
            let doubled = c.from_buffer(&b).map(move |x| x * (round + 2)).to_buffer();
            let want: Vec<i32> = xs.iter().map(|x| x * (round + 2)).collect();
            assert_eq!(doubled.unwrap().download().unwrap(), want, "round {round}");
            let kept = c
                .from_buffer(&b)
                .filter(move |x| (x % 7).eq(round % 7))
                .to_buffer()
                .unwrap();
            let want: Vec<i32> = xs.iter().copied().filter(|x| x % 7 == round % 7).collect();
            assert_eq!(kept.download().unwrap(), want, "round {round}");
            let copy = kept.try_clone().unwrap();
            drop(kept);
            assert_eq!(copy.download().unwrap(), want, "round {round}");
            assert_eq!(
                c.from_buffer(&copy).sum().unwrap(),
                want.iter().sum::<i32>(),
                "round {round}"
            );
        }
    });
}

/// A context used from threads that did not open it: a download as a thread's first call,
/// device copies and queries all work there (CUDA must make its context current on each).
#[test]
fn a_context_works_from_threads_that_did_not_open_it() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<u32> = (0..10_000).map(|i| i * 3 + 1).collect();
        let b = c.upload(&xs).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (c, b, xs) = (&c, &b, &xs);
                s.spawn(move || {
                    assert_eq!(&b.download().unwrap(), xs, "thread {t}");
                    let mut copy = c.upload(&vec![0u32; xs.len()]).unwrap();
                    copy.copy_from(b).unwrap();
                    let sum = c.from_buffer(&copy).map(move |x| x + t).sum().unwrap();
                    assert_eq!(sum, xs.iter().map(|&x| x + t).sum::<u32>());
                    c.synchronize().unwrap();
                });
            }
        });
    });
}

/// Buffers dropped on threads that never used their context free their memory there (on
/// CUDA the context must be made current first) and leave the context working.
#[test]
fn buffers_dropped_on_other_threads_leave_the_context_working() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<u32> = (0..100_000).map(|i| i ^ 0x55).collect();
        for round in 0..3 {
            let buffers: Vec<_> = (0..8).map(|_| c.upload(&xs).unwrap()).collect();
            std::thread::spawn(move || drop(buffers)).join().unwrap();
            let b = c.upload(&xs).unwrap();
            assert_eq!(
                c.from_buffer(&b).map(|x| x & 0xffu32).sum().unwrap(),
                xs.iter().map(|x| x & 0xff).sum::<u32>(),
                "round {round}"
            );
            c.synchronize().unwrap();
        }
    });
}

/// `write_to` and `write_to_buffer` fill the start of an output the caller already has, in
/// input order, return how many they wrote and leave the rest alone; a short output is
/// `OutputTooShort` and a buffer of another context `Unsupported`.
#[test]
fn queries_write_into_outputs_the_caller_owns() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<f32> = (0..20_011)
            .map(|i| ((i * 53) % 997) as f32 - 400.0)
            .collect();
        let mapped: Vec<f32> = xs.iter().map(|x| x * 0.5 + 1.0).collect();
        let kept: Vec<f32> = xs.iter().copied().filter(|x| *x > 100.0).collect();
        let mut out = vec![-9.0f32; xs.len() + 5];
        for round in 0..3 {
            let wrote = c
                .from(&xs)
                .map(|x| x * 0.5 + 1.0)
                .write_to(&mut out)
                .unwrap();
            assert_eq!(wrote, xs.len());
            assert_eq!(out[..wrote], mapped[..], "round {round}");
            assert_eq!(out[wrote..], [-9.0; 5]);
        }
        let mut out = vec![-9.0f32; xs.len()];
        let wrote = c
            .from(&xs)
            .filter(|x| x.gt(100.0))
            .write_to(&mut out)
            .unwrap();
        assert_eq!(out[..wrote], kept[..]);
        assert!(out[wrote..].iter().all(|v| *v == -9.0));
        let mut short = vec![0f32; kept.len() - 1];
        match c.from(&xs).filter(|x| x.gt(100.0)).write_to(&mut short) {
            Err(Error::OutputTooShort { len, need }) => {
                assert_eq!((len, need), (kept.len() - 1, kept.len()))
            }
            other => panic!("expected OutputTooShort, got {other:?}"),
        }

        let b = c.upload(&xs).unwrap();
        let mut dst = c.upload(&vec![-9.0f32; xs.len() + 3]).unwrap();
        for _ in 0..3 {
            let wrote = c
                .from_buffer(&b)
                .map(|x| x * 0.5 + 1.0)
                .write_to_buffer(&mut dst)
                .unwrap();
            assert_eq!(wrote, xs.len());
        }
        let got = dst.download().unwrap();
        assert_eq!(got[..xs.len()], mapped[..]);
        assert_eq!(got[xs.len()..], [-9.0; 3]);
        let wrote = c
            .from_buffer(&b)
            .filter(|x| x.gt(100.0))
            .write_to_buffer(&mut dst)
            .unwrap();
        let got = dst.download().unwrap();
        assert_eq!(got[..wrote], kept[..]);
        assert_eq!(
            got[wrote..xs.len()],
            mapped[wrote..],
            "the rest keeps the map"
        );
        let mut small = c.upload(&[0f32; 4]).unwrap();
        assert!(matches!(
            c.from_buffer(&b).write_to_buffer(&mut small),
            Err(Error::OutputTooShort { len: 4, .. })
        ));
        let other = Context::with_backend(BackendKind::Cpu).unwrap();
        let mut foreign = other.upload(&vec![0f32; xs.len()]).unwrap();
        assert!(matches!(
            c.from(&xs).write_to_buffer(&mut foreign),
            Err(Error::Unsupported { .. })
        ));
    });
}

/// Copies of tens of megabytes (which CUDA moves through page-locked buffers, a piece at a
/// time) arrive whole: uploads, downloads, a query's host input and output, and several
/// threads copying at once, at sizes that end part-way through a piece.
#[test]
fn large_copies_arrive_whole_and_in_order() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<u32> = (0..10_000_019u32)
            .map(|i| i.wrapping_mul(2_654_435_761).rotate_left(7))
            .collect();
        let b = c.upload(&xs).unwrap();
        assert!(b.download().unwrap() == xs, "upload then download");
        let mapped = c.from(&xs).map(|x| x ^ 0x9e37_79b9u32).to_vec().unwrap();
        assert_eq!(mapped.len(), xs.len());
        let wrong = mapped
            .iter()
            .zip(&xs)
            .position(|(m, x)| *m != x ^ 0x9e37_79b9);
        assert_eq!(wrong, None, "first wrong element of the mapped copy");
        std::thread::scope(|s| {
            for t in 0..3u32 {
                let c = &c;
                s.spawn(move || {
                    let ys: Vec<u32> = (0..(1 << 20) + 77 * t).map(|i| i * 3 + t).collect();
                    for round in 0..2 {
                        let b = c.upload(&ys).unwrap();
                        assert!(b.download().unwrap() == ys, "thread {t} round {round}");
                    }
                });
            }
        });
        // Copies from rayon's workers, more at once than CUDA's page-locked buffers take:
        // each waits its turn and none waits on a copy queued behind it.
        use rayon::prelude::*;
        let wrong: Vec<u32> = (0..12u32)
            .into_par_iter()
            .filter(|t| {
                let ys: Vec<u32> = (0..(1 << 19) + 1000 * t).map(|i| i ^ (t << 24)).collect();
                let b = c.upload(&ys).unwrap();
                let halves = c.from(&ys).map(|y| y >> 1).to_vec().unwrap();
                b.download().unwrap() != ys || halves.iter().zip(&ys).any(|(h, y)| *h != y >> 1)
            })
            .collect();
        assert_eq!(
            wrong, [0u32; 0],
            "copies made from rayon's workers that came back wrong"
        );
    });
}

/// `ctx.zeroed` then `write_from`, `download_into` and a query over the buffer, for one
/// element type: every value compared with the host's copy of the same data.
fn zeroed_write_and_download_into<T>(c: &Context, n: usize, value: impl Fn(usize) -> T)
where
    T: kiln::ir::Scalar + kiln::Row + Default + PartialEq + std::fmt::Debug,
{
    let xs: Vec<T> = (0..n).map(&value).collect();
    // Memory freed just now, full of other bytes, is what a new buffer is likely given.
    drop(c.upload(&xs).unwrap());
    let mut b = c.zeroed::<T>(n).unwrap();
    assert_eq!(b.len(), n);
    assert_eq!(b.download().unwrap(), vec![T::default(); n], "n {n}: zeros");
    b.write_from(&xs).unwrap();
    assert_eq!(
        c.from_buffer(&b).to_vec().unwrap(),
        xs,
        "n {n}: a query reads the writes"
    );
    let mut out: Vec<T> = (0..n).map(|i| value(i + 1)).collect();
    b.download_into(&mut out).unwrap();
    assert_eq!(out, xs, "n {n}: download_into");
    match b.write_from(&xs[..n.saturating_sub(1)]) {
        Err(Error::LengthMismatch { left, right }) if n > 0 => {
            assert_eq!((left, right), (n, n - 1))
        }
        Ok(()) if n == 0 => {}
        other => panic!("n {n}: write_from of a shorter slice gave {other:?}"),
    }
    match b.download_into(&mut vec![T::default(); n + 1]) {
        Err(Error::LengthMismatch { left, right }) => assert_eq!((left, right), (n, n + 1)),
        other => panic!("n {n}: download_into a longer slice gave {other:?}"),
    }
    assert_eq!(
        b.download().unwrap(),
        xs,
        "n {n}: failed calls changed nothing"
    );
}

#[test]
fn zeroed_buffers_take_writes_and_download_into_slices() {
    every_backend(|| {
        let c = ctx();
        for n in [0usize, 1, 3, 1000, 100_003] {
            zeroed_write_and_download_into(&c, n, |i| (i as u32).wrapping_mul(2_654_435_761) | 1);
            zeroed_write_and_download_into(&c, n, |i| i as f32 * -0.75 - 1.0);
            zeroed_write_and_download_into(&c, n, |i| (i % 251) as u8 + 1);
        }
    });
}

#[test]
fn writes_and_downloads_into_slices_keep_their_order_with_launches() {
    every_backend(|| {
        let c = ctx();
        let n = 50_003;
        let first: Vec<u32> = (0..n).map(|i| i * 3 + 1).collect();
        let second: Vec<u32> = (0..n).map(|i| i ^ 0x5a5a).collect();
        let mut b = c.zeroed::<u32>(n as usize).unwrap();
        b.write_from(&first).unwrap();
        let halves = c.from_buffer(&b).map(|x| x >> 1).to_buffer().unwrap();
        // The launch above reads `first`; this write must wait for it.
        b.write_from(&second).unwrap();
        let mut out = vec![0u32; n as usize];
        halves.download_into(&mut out).unwrap();
        let want: Vec<u32> = first.iter().map(|x| x >> 1).collect();
        assert_eq!(out, want, "the launch read the first write");
        b.download_into(&mut out).unwrap();
        assert_eq!(out, second, "the second write");
    });
}
