//! 2D and 3D views through the kernel macro: `Index3D` kernels over `View3D`/`View3DMut` of
//! host slices and of `Buffer`s, strided sub-volumes, and an `Index2D` kernel over 2D
//! buffers, against the same loops in plain Rust, with extents that are not multiples of any
//! work-group size.

use crate::common::{ctx, every_backend, spread};
use kiln::lang::*;
use kiln::Error;

/// The 7-point average of a volume (the missing neighbours of a border cell read as zero),
/// written into another.
#[kiln::kernel]
fn smooth(p: Index3D, v: View3D<f32>, out: View3DMut<f32>) {
    let (z, y, x) = (p.z as i32, p.y as i32, p.x as i32);
    let sum = v[p]
        + v[(z - 1, y, x)]
        + v[(z + 1, y, x)]
        + v[(z, y - 1, x)]
        + v[(z, y + 1, x)]
        + v[(z, y, x - 1)]
        + v[(z, y, x + 1)];
    out[p] = sum / 7.0;
}

/// Each cell's coordinates, packed; the first cell the view's shape instead.
#[kiln::kernel]
fn stamp(p: Index3D, v: View3DMut<u32>) {
    let shape = v.planes() * 1000000 + v.rows() * 1000 + v.cols();
    v.store(p.z, p.y, p.x, (p.z * 100 + p.y) * 100 + p.x);
    if p.x == 0 && p.y == 0 && p.z == 0 {
        v[(0u32, 0u32, 0u32)] = shape;
    }
}

/// `out = a + b` on matrices (2D buffers).
#[kiln::kernel]
fn add2(p: Index2D, a: View2D<i32>, b: View2D<i32>, out: View2DMut<i32>) {
    out[p] = a[p] + b[p];
}

fn host_smooth(v: &[f32], planes: usize, rows: usize, cols: usize) -> Vec<f32> {
    let at = |z: i64, y: i64, x: i64| -> f32 {
        let inside = (0..planes as i64).contains(&z)
            && (0..rows as i64).contains(&y)
            && (0..cols as i64).contains(&x);
        match inside {
            true => v[(z as usize * rows + y as usize) * cols + x as usize],
            false => 0.0,
        }
    };
    let mut out = vec![0.0f32; planes * rows * cols];
    for z in 0..planes as i64 {
        for y in 0..rows as i64 {
            for x in 0..cols as i64 {
                let sum = at(z, y, x)
                    + at(z - 1, y, x)
                    + at(z + 1, y, x)
                    + at(z, y - 1, x)
                    + at(z, y + 1, x)
                    + at(z, y, x - 1)
                    + at(z, y, x + 1);
                out[(z as usize * rows + y as usize) * cols + x as usize] = sum / 7.0;
            }
        }
    }
    out
}

#[test]
fn three_d_views_match_plain_loops() {
    every_backend(|| {
        let c = ctx();
        for (planes, rows, cols) in [(1, 1, 1), (3, 5, 7), (9, 17, 33), (2, 1, 65), (0, 4, 4)] {
            let at = format!("{planes} x {rows} x {cols}");
            let n = planes * rows * cols;
            let v: Vec<f32> = (0..n as u32).map(|i| spread(i, 1000) as f32).collect();
            let want = host_smooth(&v, planes, rows, cols);
            let extent = (cols, rows, planes);

            let mut out = vec![-1.0f32; n];
            let (vin, vout) = (
                Slice3D::new(&v[..], rows, cols),
                Slice3D::new(&mut out[..], rows, cols),
            );
            c.launch(smooth, extent, (vin, vout)).unwrap();
            assert_eq!(out, want, "host slices, {at}");

            let (vb, ob) = (c.upload(&v).unwrap(), c.zeroed::<f32>(n).unwrap());
            c.launch(
                smooth,
                extent,
                (Slice3D::new(&vb, rows, cols), Slice3D::new(&ob, rows, cols)),
            )
            .unwrap();
            assert_eq!(ob.download().unwrap(), want, "buffers, {at}");
        }
    });
}

/// A sub-volume of a larger buffer (every other plane, rows of 6 within rows of 10): the
/// kernel writes only its cells and sees its shape.
#[test]
fn strided_sub_volumes_touch_only_their_cells() {
    every_backend(|| {
        let c = ctx();
        let (planes, rows, cols) = (3, 4, 6);
        let (row_stride, plane_stride) = (10, 2 * 4 * 10);
        let len = (planes - 1) * plane_stride + (rows - 1) * row_stride + cols;
        let b = c.upload(&vec![7u32; len]).unwrap();
        let sub = Slice3D::with_strides(&b, planes, rows, cols, row_stride, plane_stride).unwrap();
        c.launch(stamp, (cols, rows, planes), (sub,)).unwrap();
        let mut want = vec![7u32; len];
        for z in 0..planes {
            for y in 0..rows {
                for x in 0..cols {
                    let cell = (z * 100 + y) * 100 + x;
                    want[z * plane_stride + y * row_stride + x] = cell as u32;
                }
            }
        }
        want[0] = (planes * 1_000_000 + rows * 1000 + cols) as u32;
        assert_eq!(b.download().unwrap(), want);

        let short = Slice3D::with_strides(&b, planes + 1, rows, cols, row_stride, plane_stride);
        match short {
            Err(Error::VolumeOutOfBounds { need, len: l, .. }) => {
                assert_eq!(
                    (need, l),
                    (
                        planes * plane_stride + len - (planes - 1) * plane_stride,
                        len
                    )
                );
            }
            other => panic!("{:?}", other.err()),
        }
    });
}

#[test]
fn two_d_buffers_match_plain_loops() {
    every_backend(|| {
        let c = ctx();
        for (rows, cols) in [(1, 1), (5, 7), (33, 65), (0, 3)] {
            let a: Vec<i32> = (0..(rows * cols) as u32)
                .map(|i| spread(i, 500) as i32 - 250)
                .collect();
            let b: Vec<i32> = (0..(rows * cols) as u32)
                .map(|i| spread(i + 3, 90) as i32)
                .collect();
            let (ab, bb, ob) = (
                c.upload(&a).unwrap(),
                c.upload(&b).unwrap(),
                c.zeroed::<i32>(rows * cols).unwrap(),
            );
            let m = |x| Slice2D::new(x, cols);
            c.launch(add2, (cols, rows), (m(&ab), m(&bb), m(&ob)))
                .unwrap();
            let want: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
            assert_eq!(ob.download().unwrap(), want, "{rows} x {cols}");
        }
    });
}
