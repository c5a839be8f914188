//! `Buffer::slice`: ranges of device buffers as kernel arguments (their writes land in the
//! buffer, nowhere else), as query sources, and in copies, at offsets on and off every
//! backend's binding alignment (128 bytes for OpenCL sub-buffers on PoCL, 256 for wgpu
//! bindings), for 1-, 2-, 4- and 8-byte elements and structs, against the same operations on
//! plain Rust slices.

use crate::common::{ctx, every_backend, has_i64, spread};
use kiln::lang::*;
use kiln::prelude::*;

#[kiln::kernel]
fn bump_u8(i: Index1D, src: View<u8>, dst: ViewMut<u8>) {
    dst[i] = src[i] + 3u8;
}

#[kiln::kernel]
fn bump_i16(i: Index1D, src: View<i16>, dst: ViewMut<i16>) {
    dst[i] = src[i] - 700i16;
}

#[kiln::kernel]
fn bump_f32(i: Index1D, src: View<f32>, dst: ViewMut<f32>) {
    dst[i] = src[i] * 0.5f32 + 1.0f32;
}

#[kiln::kernel]
fn bump_i64(i: Index1D, src: View<i64>, dst: ViewMut<i64>) {
    dst[i] = src[i] * 3i64 - 5i64;
}

/// Each element plus its left neighbour, read and written in place.
#[kiln::kernel]
fn prefix_pair(i: Index1D, x: ViewMut<u32>) {
    if i > 0u32 {
        x[i] = x[i] + i;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Cell {
    mass: f32,
    tag: u16,
    layer: u16,
}

#[kiln::kernel]
fn weigh(i: Index1D, cells: ViewMut<Cell>) {
    let c = cells[i];
    cells[i] = Cell {
        mass: c.mass * 2.0f32,
        tag: c.tag + 1u16,
        layer: c.layer,
    };
}

/// The element ranges the tests slice: empty, one element, odd starts and lengths, starts
/// on 128 and 256 bytes for every element size, a range to the end and the whole buffer.
fn ranges(n: usize, size: usize) -> Vec<std::ops::Range<usize>> {
    let mut r = vec![0..0, 0..1, 1..4, 3..100, 5..n, 0..n, n..n, n - 1..n];
    for bytes in [128, 256, 512] {
        let at = bytes / size;
        r.extend([at..at + 37, at..n, at + 1..at + 300]);
    }
    r
}

/// Launches `kernel` over `src.slice(r)` into `dst.slice(s)` (the same length) and checks
/// the whole destination buffer against `f` applied on the host to that range alone.
fn check_launch<T>(
    xs: &[T],
    kernel: impl IntoKernel<(View<T>, ViewMut<T>)> + Copy,
    f: impl Fn(T) -> T,
) where
    T: kiln::ir::IrType + PartialEq + std::fmt::Debug,
{
    let c = ctx();
    let n = xs.len();
    let src = c.upload(xs).unwrap();
    let before: Vec<T> = xs.iter().rev().copied().collect();
    let mut dst = c.upload(&before).unwrap();
    for r in ranges(n, std::mem::size_of::<T>()) {
        let shift = (r.start * 7 + 3) % (n - r.len() + 1);
        let s = shift..shift + r.len();
        dst.write_from(&before).unwrap();
        let (from, to) = (src.slice(r.clone()).unwrap(), dst.slice(s.clone()).unwrap());
        c.launch(kernel, r.len(), (&from, &to)).unwrap();
        let mut want = before.clone();
        for (w, x) in want[s.clone()].iter_mut().zip(&xs[r.clone()]) {
            *w = f(*x);
        }
        assert_eq!(dst.download().unwrap(), want, "{r:?} into {s:?}");
        assert_eq!(
            src.download().unwrap(),
            xs,
            "the source of {r:?} is unchanged"
        );
    }
}

#[test]
fn slices_as_kernel_arguments_change_only_their_range() {
    every_backend(|| {
        let n = 1500;
        let bytes: Vec<u8> = (0..n as u32).map(|i| spread(i, 200) as u8).collect();
        check_launch(&bytes, bump_u8, |x| x + 3);
        let shorts: Vec<i16> = (0..n as u32).map(|i| spread(i, 20000) as i16).collect();
        check_launch(&shorts, bump_i16, |x| x - 700);
        let floats: Vec<f32> = (0..n as u32).map(|i| spread(i, 999) as f32 - 7.5).collect();
        check_launch(&floats, bump_f32, |x| x * 0.5 + 1.0);
        if has_i64() {
            let longs: Vec<i64> = (0..n as u32)
                .map(|i| spread(i, 1 << 30) as i64 - (1 << 40))
                .collect();
            check_launch(&longs, bump_i64, |x| x * 3 - 5);
        }
    });
}

#[test]
fn two_slices_of_one_buffer_in_one_launch() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<f32> = (0..2000u32).map(|i| spread(i, 500) as f32).collect();
        let mut b = c.upload(&xs).unwrap();
        // Reads one half and writes the other, at offsets on and off the alignments.
        for (r, s) in [
            (0..1000, 1000..2000),
            (1..700, 1001..1700),
            (64..128, 0..64),
        ] {
            b.write_from(&xs).unwrap();
            let (from, to) = (b.slice(r.clone()).unwrap(), b.slice(s.clone()).unwrap());
            c.launch(bump_f32, r.len(), (&from, &to)).unwrap();
            let mut want = xs.clone();
            for (k, i) in s.clone().enumerate() {
                want[i] = xs[r.start + k] * 0.5 + 1.0;
            }
            assert_eq!(b.download().unwrap(), want, "{r:?} into {s:?}");
        }
        // One slice read and written in place, and structs.
        let ys: Vec<u32> = (0..300).map(|i| i * 10).collect();
        let yb = c.upload(&ys).unwrap();
        let part = yb.slice(33..251).unwrap();
        c.launch(prefix_pair, part.len(), (&part,)).unwrap();
        let mut want = ys.clone();
        for (k, w) in want[33..251].iter_mut().enumerate().skip(1) {
            *w += k as u32;
        }
        assert_eq!(yb.download().unwrap(), want);
        let cells: Vec<Cell> = (0..100u16)
            .map(|i| Cell {
                mass: i as f32 * 0.25,
                tag: i,
                layer: 99 - i,
            })
            .collect();
        let cb = c.upload(&cells).unwrap();
        c.launch(weigh, 90, (&cb.slice(7..97).unwrap(),)).unwrap();
        let mut want = cells.clone();
        for w in &mut want[7..97] {
            w.mass *= 2.0;
            w.tag += 1;
        }
        assert_eq!(cb.download().unwrap(), want);
    });
}

#[test]
fn slices_as_query_sources() {
    every_backend(|| {
        let c = ctx();
        let n = 5000;
        let xs: Vec<i32> = (0..n as u32)
            .map(|i| spread(i, 2001) as i32 - 1000)
            .collect();
        let ys: Vec<u16> = (0..n as u32).map(|i| spread(i, 60000) as u16).collect();
        let (bx, by) = (c.upload(&xs).unwrap(), c.upload(&ys).unwrap());
        for r in ranges(n, 4) {
            let at = format!("{r:?}");
            let host = &xs[r.clone()];
            let q = || c.from_buffer(bx.slice(r.clone()).unwrap());
            assert_eq!(q().to_vec().unwrap(), host, "{at}");
            let want: i64 = host.iter().filter(|&&x| x > 0).map(|&x| x as i64).sum();
            let got = q()
                .filter(|x| x.gt(0))
                .map(|x| x.cast::<u32>())
                .sum()
                .unwrap();
            assert_eq!(got as i64, want, "{at}");
            assert_eq!(q().max().unwrap(), host.iter().max().copied(), "{at}");
            let zipped = q()
                .zip_buffer(by.slice(r.clone()).unwrap())
                .map(|(x, y)| x + y.cast::<i32>())
                .to_vec()
                .unwrap();
            let want: Vec<i32> = host
                .iter()
                .zip(&ys[r.clone()])
                .map(|(&x, &y)| x + y as i32)
                .collect();
            assert_eq!(zipped, want, "{at}");
            let mut sorted = host.to_vec();
            sorted.sort();
            assert_eq!(q().sort().to_vec().unwrap(), sorted, "{at}");
        }
        // Results written into a slice of another buffer, the rest of it kept.
        let before = vec![-1i32; n];
        let mut out = c.upload(&before).unwrap();
        for r in [0..0, 3..40, 64..n, 1..n, 128..4000] {
            out.write_from(&before).unwrap();
            let target = out.slice(n - r.len()..).unwrap();
            let written = c
                .from_buffer(bx.slice(r.clone()).unwrap())
                .map(|x| x * 2)
                .write_to_buffer(target)
                .unwrap();
            assert_eq!(written, r.len());
            let mut want = before.clone();
            for (w, x) in want[n - r.len()..].iter_mut().zip(&xs[r.clone()]) {
                *w = x * 2;
            }
            assert_eq!(out.download().unwrap(), want, "write_to_buffer {r:?}");
        }
        // A slice of a slice, and a slice of structs (split into columns on the device).
        let inner = bx.slice(100..4000).unwrap().slice(250..260).unwrap();
        assert_eq!(inner.range(), 350..360);
        assert_eq!(c.from_buffer(&inner).to_vec().unwrap(), &xs[350..360]);
        let cells: Vec<Cell> = (0..777u16)
            .map(|i| Cell {
                mass: spread(i as u32, 100) as f32,
                tag: i,
                layer: i % 5,
            })
            .collect();
        let cb = c.upload(&cells).unwrap();
        let got = c
            .from_buffer(cb.slice(3..700).unwrap())
            .filter(|cell| cell.layer.eq(2))
            .map(|cell| cell.mass)
            .to_vec()
            .unwrap();
        let want: Vec<f32> = cells[3..700]
            .iter()
            .filter(|cell| cell.layer == 2)
            .map(|cell| cell.mass)
            .collect();
        assert_eq!(got, want);
    });
}

#[test]
fn slices_copy_their_range_alone() {
    every_backend(|| {
        let c = ctx();
        let xs: Vec<u8> = (0..1031u32).map(|i| spread(i, 256) as u8).collect();
        let mut b = c.upload(&xs).unwrap();
        for r in ranges(xs.len(), 1) {
            assert_eq!(
                b.slice(r.clone()).unwrap().download().unwrap(),
                &xs[r.clone()]
            );
            // Writes at every byte offset keep their neighbours, in the same word too.
            let new: Vec<u8> = xs[r.clone()].iter().map(|x| x ^ 0x5a).collect();
            b.slice(r.clone()).unwrap().write_from(&new).unwrap();
            let mut want = xs.clone();
            want[r.clone()].copy_from_slice(&new);
            assert_eq!(b.download().unwrap(), want, "write_from {r:?}");
            b.write_from(&xs).unwrap();
            let copy = b.slice(r.clone()).unwrap().to_buffer().unwrap();
            assert_eq!(copy.download().unwrap(), &xs[r.clone()]);
        }
        // Copies between slices: another buffer, the same buffer apart, overlapping both ways.
        let other = c.zeroed::<u8>(xs.len()).unwrap();
        let moves = [
            (5..505, 513..1013),
            (0..600, 3..603),
            (300..900, 1..601),
            (7..8, 7..8),
        ];
        for (from, to) in moves {
            b.write_from(&xs).unwrap();
            let len = from.len();
            b.slice(to.clone())
                .unwrap()
                .copy_from(b.slice(from.clone()).unwrap())
                .unwrap();
            let mut want = xs.clone();
            want.copy_within(from.clone(), to.start);
            assert_eq!(b.download().unwrap(), want, "{from:?} to {to:?}");
            other
                .slice(..len)
                .unwrap()
                .copy_from(b.slice(to.clone()).unwrap())
                .unwrap();
            assert_eq!(other.download().unwrap()[..len], want[to.clone()]);
        }
        let whole = c.upload(&xs[..100]).unwrap();
        other.slice(900..1000).unwrap().copy_from(&whole).unwrap();
        assert_eq!(other.download().unwrap()[900..1000], xs[..100]);
    });
}

#[test]
fn slices_feed_2d_views() {
    every_backend(|| {
        let c = ctx();
        #[kiln::kernel]
        fn add2(p: Index2D, a: View2D<i32>, b: View2D<i32>, out: View2DMut<i32>) {
            out[p] = a[p] + b[p];
        }
        let xs: Vec<i32> = (0..1000).map(|i| i * 3 - 1000).collect();
        let b = c.upload(&xs).unwrap();
        let out = c.zeroed::<i32>(1000).unwrap();
        // Two 7 x 9 matrices inside one buffer, written to a third place of another.
        let (a, m, o) = (
            b.slice(3..66).unwrap(),
            b.slice(401..464).unwrap(),
            out.slice(67..130).unwrap(),
        );
        c.launch(
            add2,
            (9, 7),
            (
                Slice2D::new(&a, 9),
                Slice2D::new(&m, 9),
                Slice2D::new(&o, 9),
            ),
        )
        .unwrap();
        let mut want = vec![0i32; 1000];
        for k in 0..63 {
            want[67 + k] = xs[3 + k] + xs[401 + k];
        }
        assert_eq!(out.download().unwrap(), want);
    });
}

#[test]
fn slices_outside_their_buffer_are_typed_errors() {
    let c = Context::with_backend(BackendKind::Cpu).unwrap();
    let b = c.upload(&[1u32, 2, 3, 4]).unwrap();
    let bounds = |r: Result<kiln::BufferSlice<'_, u32>, Error>| match r {
        Err(Error::SliceOutOfBounds { start, end, len }) => (start, end, len),
        other => panic!("expected SliceOutOfBounds, got {other:?}"),
    };
    assert_eq!(bounds(b.slice(2..5)), (2, 5, 4));
    assert_eq!(bounds(b.slice(5..)), (5, 4, 4));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = b.slice(3..1);
    assert_eq!(bounds(reversed), (3, 1, 4));
    assert_eq!(bounds(b.slice(..=usize::MAX)), (0, usize::MAX, 4));
    assert_eq!(bounds(b.slice(1..3).unwrap().slice(1..3)), (1, 3, 2));
    let s = b.slice(1..3).unwrap();
    assert!(matches!(
        s.write_from(&[1]),
        Err(Error::LengthMismatch { left: 2, right: 1 })
    ));
    assert!(matches!(
        s.copy_from(&b),
        Err(Error::LengthMismatch { left: 2, right: 4 })
    ));
    let elsewhere = Context::with_backend(BackendKind::Cpu).unwrap();
    assert!(matches!(
        elsewhere.from_buffer(s.clone()).sum(),
        Err(Error::Unsupported { .. })
    ));
    let mut out = [0u32; 2];
    #[kiln::kernel]
    fn copy(i: Index1D, a: View<u32>, b: ViewMut<u32>) {
        b[i] = a[i];
    }
    assert!(matches!(
        elsewhere.launch(copy, 2, (&s, &mut out[..])),
        Err(Error::Unsupported { .. })
    ));
}
