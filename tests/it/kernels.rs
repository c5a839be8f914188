//! Kernels written in Rust with `#[kiln::kernel]` (the gallery of examples/gallery and the
//! Rust subset), run on every backend and checked against plain Rust loops.

use crate::common;
use crate::common::{ctx, every_backend, has_f64, has_i64};
use crate::gallery::*;
use kiln::lang::*;
use kiln::{BackendKind, Error};

#[test]
fn saxpy_matches_a_loop() {
    every_backend(|| {
        let n = 10_001;
        let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25).collect();
        let y0: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
        let mut y = y0.clone();
        ctx().launch(saxpy, n, (1.5f32, &x, &mut y)).unwrap();
        for i in 0..n {
            assert_eq!(y[i], 1.5 * x[i] + y0[i], "element {i}");
        }
        // The same kernel over device buffers: the result stays on the device.
        let xb = ctx().upload(&x).unwrap();
        let yb = ctx().upload(&y0).unwrap();
        ctx().launch(saxpy, n, (1.5f32, &xb, &yb)).unwrap();
        assert_eq!(yb.download().unwrap(), y);
    });
}

#[test]
fn five_point_stencil_matches_a_loop() {
    every_backend(|| {
        let (w, h) = (67usize, 45usize);
        let src: Vec<f32> = (0..w * h).map(|i| ((i * 7) % 31) as f32).collect();
        let mut dst = vec![0.0f32; w * h];
        ctx()
            .launch(
                stencil,
                (w, h),
                (Slice2D::new(&src[..], w), Slice2D::new(&mut dst[..], w)),
            )
            .unwrap();
        for y in 0..h {
            for x in 0..w {
                let at = |yy: usize, xx: usize| src[yy * w + xx];
                let want = if x > 0 && y > 0 && x + 1 < w && y + 1 < h {
                    0.25 * (at(y, x - 1) + at(y, x + 1) + at(y - 1, x) + at(y + 1, x)) - at(y, x)
                } else {
                    at(y, x)
                };
                assert_eq!(dst[y * w + x], want, "({x}, {y})");
            }
        }
    });
}

#[test]
fn transposes_naive_and_tiled_match_a_loop() {
    every_backend(|| {
        let (rows, cols) = (50usize, 37usize);
        let a: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
        let mut want = vec![0.0f32; rows * cols];
        for r in 0..rows {
            for c in 0..cols {
                want[c * rows + r] = a[r * cols + c];
            }
        }
        let mut t = vec![-1.0f32; rows * cols];
        ctx()
            .launch(
                transpose_naive,
                (cols, rows),
                (Slice2D::new(&a[..], cols), Slice2D::new(&mut t[..], rows)),
            )
            .unwrap();
        assert_eq!(t, want, "naive");
        let mut t = vec![-1.0f32; rows * cols];
        let groups = (cols.div_ceil(16), rows.div_ceil(16));
        ctx()
            .launch_grouped(
                transpose_tiled,
                groups,
                (16usize, 16usize),
                (Slice2D::new(&a[..], cols), Slice2D::new(&mut t[..], rows)),
            )
            .unwrap();
        assert_eq!(t, want, "tiled");
    });
}

#[test]
fn two_d_views_of_buffers_stay_on_the_device() {
    every_backend(|| {
        let c = ctx();
        for (rows, cols) in [(50usize, 37usize), (1, 1), (3, 129)] {
            let a: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5 - 3.0).collect();
            let mut want = vec![0.0f32; rows * cols];
            for r in 0..rows {
                for col in 0..cols {
                    want[col * rows + r] = a[r * cols + col];
                }
            }
            let on_device = c.upload(&a).unwrap();
            let t = c.zeroed::<f32>(rows * cols).unwrap();
            c.launch(
                transpose_naive,
                (cols, rows),
                (Slice2D::new(&on_device, cols), Slice2D::new(&t, rows)),
            )
            .unwrap();
            assert_eq!(t.download().unwrap(), want, "{rows} x {cols}");
        }
        // The left 3 columns of a 4 x 5 matrix, rows 5 apart, transposed into 3 x 4.
        let m: Vec<f32> = (0..20).map(|i| i as f32).collect();
        let on_device = c.upload(&m).unwrap();
        let left = Slice2D::with_stride(&on_device, 4, 3, 5).unwrap();
        let t = c.zeroed::<f32>(12).unwrap();
        c.launch(transpose_naive, (3, 4), (left, Slice2D::new(&t, 4)))
            .unwrap();
        let want: Vec<f32> = (0..3)
            .flat_map(|col| (0..4).map(move |r| (r * 5 + col) as f32))
            .collect();
        assert_eq!(t.download().unwrap(), want, "strided view of a buffer");
        match Slice2D::with_stride(&on_device, 5, 3, 5) {
            Err(Error::ViewOutOfBounds {
                need: 23, len: 20, ..
            }) => {}
            other => panic!("a fifth row of a 20-element buffer: {:?}", other.err()),
        }
    });
}

/// Each work item of a 3D launch writes its coordinates at its place in an x-fastest volume.
#[kiln::kernel]
fn volume_coordinates(p: Index3D, width: u32, height: u32, out: ViewMut<u32>) {
    let at = (p.z * height + p.y) * width + p.x;
    out[at] = p.x + p.y * 1000u32 + p.z * 1_000_000u32;
}

#[test]
fn three_d_launches_cover_each_point_of_the_extent_once() {
    every_backend(|| {
        let c = ctx();
        for (w, h, d) in [
            (1u32, 1u32, 1u32),
            (5, 3, 2),
            (17, 9, 3),
            (300, 1, 2),
            (1, 70, 4),
            (64, 2, 33),
        ] {
            let len = (w * h * d) as usize;
            let mut want = vec![0u32; len];
            for z in 0..d {
                for y in 0..h {
                    for x in 0..w {
                        want[((z * h + y) * w + x) as usize] = x + y * 1000 + z * 1_000_000;
                    }
                }
            }
            let mut out = vec![u32::MAX; len];
            c.launch(volume_coordinates, (w, h, d), (w, h, &mut out))
                .unwrap();
            assert_eq!(out, want, "{w} x {h} x {d}, host slice");
            let on_device = c.zeroed::<u32>(len).unwrap();
            c.launch(volume_coordinates, (w, h, d), (w, h, &on_device))
                .unwrap();
            assert_eq!(
                on_device.download().unwrap(),
                want,
                "{w} x {h} x {d}, buffer"
            );
        }
    });
}

#[test]
fn byte_histograms_global_and_privatized_match_a_loop() {
    every_backend(|| {
        let data: Vec<u8> = (0..50_003u32)
            .map(|i| (i * 31 % 251) as u8 ^ (i >> 9) as u8)
            .collect();
        let mut want = vec![0u32; 256];
        for &b in &data {
            want[b as usize] += 1;
        }
        let mut bins = vec![0u32; 256];
        ctx()
            .launch(histogram_global, data.len(), (&data, &mut bins))
            .unwrap();
        assert_eq!(bins, want, "global atomics");
        let mut bins = vec![0u32; 256];
        ctx()
            .launch_grouped(histogram_shared, 24u32, 128u32, (&data, &mut bins))
            .unwrap();
        assert_eq!(bins, want, "privatized");
        // Into a zeroed buffer, reading the data where it was uploaded.
        let c = ctx();
        let bins = c.zeroed::<u32>(256).unwrap();
        let on_device = c.upload(&data).unwrap();
        c.launch(histogram_global, data.len(), (&on_device, &bins))
            .unwrap();
        let mut got = vec![7u32; 256];
        bins.download_into(&mut got).unwrap();
        assert_eq!(got, want, "global atomics into zeroed buffer bins");
    });
}

#[test]
fn block_reduction_with_subgroup_shuffles_matches_a_loop() {
    every_backend(|| {
        let groups = 40usize;
        // Whole numbers: every order of additions gives the same f32.
        let data: Vec<f32> = (0..groups * 256).map(|i| ((i * 13) % 101) as f32).collect();
        let mut partial = vec![0.0f32; groups];
        ctx()
            .launch_grouped(block_sum, groups as u32, 256u32, (&data, &mut partial))
            .unwrap();
        for g in 0..groups {
            let want: f32 = data[g * 256..(g + 1) * 256].iter().sum();
            assert_eq!(partial[g], want, "group {g}");
        }
    });
}

#[test]
fn tiled_matrix_multiply_matches_a_loop() {
    every_backend(|| {
        let n = 45usize;
        // Small integers: every product and sum is exact in f32.
        let a: Vec<f32> = (0..n * n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let b: Vec<f32> = (0..n * n).map(|i| ((i * 5) % 9) as f32 - 4.0).collect();
        let mut c = vec![0.0f32; n * n];
        let g = n.div_ceil(16);
        ctx()
            .launch_grouped(
                matmul_tiled,
                (g, g),
                (16usize, 16usize),
                (&a, &b, &mut c, n as u32),
            )
            .unwrap();
        for r in 0..n {
            for col in 0..n {
                let want: f32 = (0..n).map(|k| a[r * n + k] * b[k * n + col]).sum();
                assert_eq!(c[r * n + col], want, "({r}, {col})");
            }
        }
    });
}

#[test]
fn nbody_step_over_soa_arrays_matches_an_f64_loop() {
    every_backend(|| {
        let n = 300usize;
        let f = |i: usize, k: usize| (((i * k + 3) % 97) as f32 / 97.0) * 2.0 - 1.0;
        let px: Vec<f32> = (0..n).map(|i| f(i, 7)).collect();
        let py: Vec<f32> = (0..n).map(|i| f(i, 11)).collect();
        let pz: Vec<f32> = (0..n).map(|i| f(i, 13)).collect();
        let mass: Vec<f32> = (0..n).map(|i| 0.5 + (i % 5) as f32 * 0.1).collect();
        let (mut vx, mut vy, mut vz) = (vec![0.1f32; n], vec![0.0f32; n], vec![-0.1f32; n]);
        let dt = 0.001f32;
        ctx()
            .launch(
                nbody_step,
                n,
                (&px, &py, &pz, &mass, &mut vx, &mut vy, &mut vz, dt),
            )
            .unwrap();
        for i in 0..n {
            let mut a = [0.0f64; 3];
            for j in 0..n {
                let d = [
                    (px[j] - px[i]) as f64,
                    (py[j] - py[i]) as f64,
                    (pz[j] - pz[i]) as f64,
                ];
                let d2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01;
                let s = mass[j] as f64 / (d2 * d2.sqrt());
                for k in 0..3 {
                    a[k] += d[k] * s;
                }
            }
            let want = [0.1 + a[0] * 0.001, a[1] * 0.001, -0.1 + a[2] * 0.001];
            let got = [vx[i], vy[i], vz[i]];
            for k in 0..3 {
                let err = (got[k] as f64 - want[k]).abs();
                assert!(
                    err <= 1e-5 * (1.0 + want[k].abs()),
                    "body {i} axis {k}: {} vs {}",
                    got[k],
                    want[k]
                );
            }
        }
    });
}

fn mandelbrot_reference(w: usize, h: usize, max_iter: u32) -> Vec<u32> {
    let mut out = vec![0u32; w * h];
    for y in 0..h {
        for x in 0..w {
            let cx = -2.0f32 + 3.0f32 * (x as f32) / (w as f32);
            let cy = -1.25f32 + 2.5f32 * (y as f32) / (h as f32);
            let (mut zx, mut zy, mut n) = (0.0f32, 0.0f32, 0u32);
            while n < max_iter && zx * zx + zy * zy <= 4.0 {
                let t = zx * zx - zy * zy + cx;
                zy = 2.0 * zx * zy + cy;
                zx = t;
                n += 1;
            }
            out[y * w + x] = n;
        }
    }
    out
}

#[test]
fn mandelbrot_on_a_2d_grid_matches_a_loop() {
    every_backend(|| {
        let (w, h, iters) = (120usize, 80usize, 200u32);
        let mut out = vec![0u32; w * h];
        ctx()
            .launch(mandelbrot, (w, h), (w as u32, h as u32, iters, &mut out))
            .unwrap();
        let want = mandelbrot_reference(w, h, iters);
        let differ = out.iter().zip(&want).filter(|(a, b)| a != b).count();
        // Vulkan drivers may contract or reorder float arithmetic (see README, float
        // accuracy), which moves a few points on the set's boundary; elsewhere it is exact.
        let allowed = if ctx().device().backend == BackendKind::Wgpu {
            w * h / 100
        } else {
            0
        };
        assert!(differ <= allowed, "{differ} of {} pixels differ", w * h);
    });
}

fn smoothstep_ref(e0: f32, e1: f32, x: f32) -> f32 {
    let t = ((x - e0) / (e1 - e0)).clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

#[test]
fn generic_kernels_are_specialized_per_type_and_operation() {
    every_backend(|| {
        let c = ctx();
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.0125 - 1.0).collect();
        let mut y = vec![0.0f32; x.len()];
        // Kernels obtained from the backend: compiled, or loaded from the disk cache that an
        // earlier run on this machine filled.
        let built = |s: kiln::Stats| s.compilations + s.disk_hits;
        let before = built(c.stats());
        c.launch(map_op::<Square>, x.len(), (&x, &mut y)).unwrap();
        assert!(x.iter().zip(&y).all(|(a, b)| *b == a * a));
        c.launch(map_op::<Smooth>, x.len(), (&x, &mut y)).unwrap();
        assert!(x
            .iter()
            .zip(&y)
            .all(|(a, b)| *b == smoothstep_ref(0.0, 10.0, *a)));
        c.launch(map_op::<Square>, x.len(), (&x, &mut y)).unwrap();
        assert_eq!(built(c.stats()) - before, 2, "one kernel per operation");
        let xi: Vec<i32> = (-500..500).collect();
        let mut yi = vec![0i32; xi.len()];
        c.launch(scale::<i32>, xi.len(), (&xi, -3i32, &mut yi))
            .unwrap();
        assert!(xi.iter().zip(&yi).all(|(a, b)| *b == a * -3));
        let xd: Vec<f64> = (0..100).map(|i| i as f64 / 3.0).collect();
        let mut yd = vec![0.0f64; xd.len()];
        match c.launch(scale::<f64>, xd.len(), (&xd, 0.5f64, &mut yd)) {
            Ok(()) => assert!(xd.iter().zip(&yd).all(|(a, b)| *b == a * 0.5)),
            Err(e) => {
                assert!(!c.device().features.f64, "{e}");
                assert!(e.to_string().contains("f64"), "the error names f64: {e}");
            }
        }
    });
}

#[test]
fn device_functions_work_in_queries_too() {
    every_backend(|| {
        let x: Vec<f32> = (0..500).map(|i| i as f32 * 0.03).collect();
        let got = ctx()
            .from(&x)
            .map(|v| smoothstep(1.0, 9.0, v))
            .to_vec()
            .unwrap();
        let want: Vec<f32> = x.iter().map(|&v| smoothstep_ref(1.0, 9.0, v)).collect();
        assert_eq!(got, want);
    });
}

/// Steps of the Collatz sequence from `n` to 1, at most `limit`; kept a real function.
#[kiln::device(noinline)]
fn collatz_steps(n: u32, limit: u32) -> u32 {
    let mut x = n;
    let mut steps = 0u32;
    while x != 1 {
        x = if x % 2 == 0 { x / 2 } else { 3 * x + 1 };
        steps += 1;
        if steps >= limit {
            return steps;
        }
    }
    steps
}

#[kiln::kernel]
fn collatz(i: Index1D, out: ViewMut<u32>) {
    out[i] = collatz_steps(i + 1, 100);
}

fn collatz_ref(n: u32, limit: u32) -> u32 {
    let (mut x, mut steps) = (n, 0);
    while x != 1 {
        x = if x % 2 == 0 { x / 2 } else { 3 * x + 1 };
        steps += 1;
        if steps >= limit {
            return steps;
        }
    }
    steps
}

#[test]
fn noinline_device_functions_stay_functions_and_return_early() {
    every_backend(|| {
        let mut out = vec![0u32; 3000];
        ctx().launch(collatz, out.len(), (&mut out,)).unwrap();
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, collatz_ref(i as u32 + 1, 100), "n = {}", i + 1);
        }
    });
    let ir = collatz().ir().unwrap();
    let cuda = kiln::emit(&ir, kiln::Target::CudaC).unwrap();
    assert!(
        cuda.contains("__noinline__") && cuda.contains("collatz_steps("),
        "{cuda}"
    );
}

/// Every construct of the Rust subset, mirrored by `subset_ref` in plain Rust.
#[kiln::kernel]
fn subset(i: Index1D, x: View<f32>, ints: View<i32>, out_f: ViewMut<f32>, out_i: ViewMut<i32>) {
    let v = x[i];
    let k = ints[i];
    // if/else as a value, comparisons, logical operators
    let sign = if v < 0.0 && !(k == 0) {
        -1.0f32
    } else if v > 1.5 || k < -3 {
        2.0f32
    } else {
        0.5f32
    };
    // for over a stepped range, a local array, compound assignment
    let mut acc = [0i32; 4];
    for j in (0..12).step_by(3) {
        acc[j / 3] = k * j + (j ^ 5);
    }
    let mut sum = 0i32;
    for j in 0..=3 {
        sum += acc[j];
    }
    // while with break and continue, bit operators, shifts
    let mut bits = (k as u32) & 0xffu32;
    let mut count = 0i32;
    loop {
        if bits == 0u32 {
            break;
        }
        bits = bits >> 1u32;
        if (bits & 1u32) == 0u32 {
            continue;
        }
        count += 1;
    }
    // tuples, casts, float and int methods
    let (lo, hi) = (k.min(7), k.max(-7));
    let wave = v.sin().mul_add(2.0, v.abs().sqrt()).max(-1.0);
    out_f[i] = sign * wave + (lo as f32) * 0.5;
    out_i[i] = sum + count * 100 + hi * 1000 + ((v * 3.0) as i32 % 4);
    if k > 40 {
        return;
    }
    out_i[i] = out_i[i] - 1;
}

fn subset_ref(v: f32, k: i32) -> (f32, i32) {
    let sign = if v < 0.0 && k != 0 {
        -1.0f32
    } else if v > 1.5 || k < -3 {
        2.0
    } else {
        0.5
    };
    let mut acc = [0i32; 4];
    for j in (0..12).step_by(3) {
        acc[j / 3] = k.wrapping_mul(j as i32).wrapping_add(j as i32 ^ 5);
    }
    let sum: i32 = acc.iter().fold(0i32, |a, b| a.wrapping_add(*b));
    let mut bits = (k as u32) & 0xff;
    let mut count = 0;
    loop {
        if bits == 0 {
            break;
        }
        bits >>= 1;
        if bits & 1 == 0 {
            continue;
        }
        count += 1;
    }
    let (lo, hi) = (k.min(7), k.max(-7));
    let wave = v.sin().mul_add(2.0, v.abs().sqrt()).max(-1.0);
    let f = sign * wave + (lo as f32) * 0.5;
    let mut n = sum + count * 100 + hi * 1000 + ((v * 3.0) as i32 % 4);
    if k <= 40 {
        n -= 1;
    }
    (f, n)
}

#[test]
fn the_rust_subset_matches_plain_rust() {
    every_backend(|| {
        let n = 400;
        let x: Vec<f32> = (0..n).map(|i| (i as f32 - 200.0) * 0.0173).collect();
        let ints: Vec<i32> = (0..n).map(|i| (i as i32 * 37 % 101) - 50).collect();
        let mut out_f = vec![0.0f32; n];
        let mut out_i = vec![0i32; n];
        ctx()
            .launch(subset, n, (&x, &ints, &mut out_f, &mut out_i))
            .unwrap();
        // sin is accurate to a few ulps (README, float accuracy); the rest is exact.
        let tolerance = common::ulp_bound("sin") as f32 * 4.0 * f32::EPSILON;
        for j in 0..n {
            let (f, k) = subset_ref(x[j], ints[j]);
            assert_eq!(out_i[j], k, "ints at {j} (x = {}, k = {})", x[j], ints[j]);
            let d = (out_f[j] - f).abs();
            assert!(
                d <= tolerance * (1.0 + f.abs()),
                "floats at {j}: {} vs {f}",
                out_f[j]
            );
        }
    });
}

/// f64 arithmetic under control flow that differs per work item, with gathered loads and
/// scattered stores: on the CPU backend, four work items at a time in two f64x2 halves.
#[kiln::kernel]
fn doubles(
    i: Index1D,
    x: View<f64>,
    k: View<i32>,
    f: View<f32>,
    out: ViewMut<f64>,
    spread: ViewMut<f64>,
    ints: ViewMut<i32>,
) {
    let n = x.len();
    let v = x[i];
    let mut acc = 0.0f64;
    if v > 0.5 {
        acc = v.sqrt();
    } else {
        acc = -v * 0.25;
    }
    let mut j = 0u32;
    while j < (k[i] as u32) % 6 {
        acc = acc * 0.5 + j as f64;
        if acc > 3.0 {
            break;
        }
        j += 1;
    }
    let g = x[(i * 7) % n];
    let m = g.max(f[i] as f64).min(1.0e6);
    let c = if m.is_nan() {
        -1.0f64
    } else {
        m.floor() + k[i] as f64
    };
    out[i] = acc + c + v % 3.5 + i as f64;
    spread[(i * 3) % n] = (v as f32) as f64 - v.abs();
    let bits = v.bitcast::<u64>() >> 52;
    ints[i] = (v * 1.0e3) as i32 + (acc as u32) as i32 + if v < g { 1 } else { 0 } + bits as i32;
}

/// `doubles` in plain Rust: `out`, `spread` and `ints` for element `i` of `n`.
fn doubles_ref(i: usize, x: &[f64], k: &[i32], f: &[f32]) -> (f64, f64, i32) {
    let (n, v) = (x.len(), x[i]);
    let mut acc = if v > 0.5 { v.sqrt() } else { -v * 0.25 };
    for j in 0..(k[i] as u32) % 6 {
        acc = acc * 0.5 + j as f64;
        if acc > 3.0 {
            break;
        }
    }
    let g = x[(i * 7) % n];
    let m = g.max(f[i] as f64).min(1.0e6);
    let c = if m.is_nan() {
        -1.0
    } else {
        m.floor() + k[i] as f64
    };
    let out = acc + c + v % 3.5 + i as f64;
    let spread = (v as f32) as f64 - v.abs();
    let int = ((v * 1.0e3) as i32)
        .wrapping_add((acc as u32) as i32)
        .wrapping_add((v < g) as i32)
        .wrapping_add((v.to_bits() >> 52) as i32);
    (out, spread, int)
}

#[test]
fn f64_kernels_with_divergent_control_flow_match_plain_rust() {
    every_backend(|| {
        // Not a multiple of 4 (the CPU backend's last partial quad), nor of 3 or 7.
        let n = 1001usize;
        let x: Vec<f64> = (0..n)
            .map(|i| match i % 50 {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => -1.0e300,
                3 => 3.0e9,
                _ => ((i * 37) % 211) as f64 * 0.037 - 2.5 + (i as f64) * 1e-9,
            })
            .collect();
        let k: Vec<i32> = (0..n).map(|i| (i as i32 * 13) % 29 - 9).collect();
        let f: Vec<f32> = (0..n)
            .map(|i| match i % 61 {
                5 => f32::NAN,
                _ => (i % 17) as f32 * 0.75 - 4.0,
            })
            .collect();
        let (mut out, mut spread, mut ints) = (vec![0.0; n], vec![0.0; n], vec![0; n]);
        let launched = ctx().launch(doubles, n, (&x, &k, &f, &mut out, &mut spread, &mut ints));
        if !has_f64() {
            let e = launched.expect_err("f64 without the feature is an error");
            assert!(e.to_string().contains("f64"), "the error names f64: {e}");
            return;
        }
        launched.unwrap();
        let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
        for i in 0..n {
            let (o, s, int) = doubles_ref(i, &x, &k, &f);
            assert!(
                same(out[i], o),
                "out[{i}] = {} vs {o} (x = {})",
                out[i],
                x[i]
            );
            assert!(
                same(spread[(i * 3) % n], s),
                "spread of {i}: {}",
                spread[(i * 3) % n]
            );
            assert_eq!(ints[i], int, "ints[{i}] (x = {})", x[i]);
        }
    });
}

/// i64 and u64 arithmetic under control flow that differs per work item, with gathered loads
/// and scattered stores: on the CPU backend, four work items at a time in two i64x2 halves.
#[kiln::kernel]
fn longs(
    i: Index1D,
    x: View<i64>,
    u: View<u64>,
    k: View<i32>,
    w: View<u32>,
    out: ViewMut<i64>,
    spread: ViewMut<u64>,
    ints: ViewMut<u32>,
) {
    let n = x.len();
    let v = x[i];
    let mut acc = 0i64;
    if v > 1000 {
        acc = v >> 3;
    } else {
        acc = -v * 3 + k[i] as i64;
    }
    let mut j = 0u32;
    while j < w[i] % 7 {
        acc = acc * 5 - j as i64;
        if acc > 1i64 << 40 {
            break;
        }
        j += 1;
    }
    let g = u[(i * 7) % n];
    let m = g.max(u[i]).min(1u64 << 62);
    let q = v / k[i] as i64 + v % (w[i] as i64 - 3);
    out[i] = acc.abs()
        + q
        + (m as i64 ^ v << 5)
        + v.clamp(-100, 100)
        + (v >> w[i] as i64)
        + (v >> 7)
        + (g as u32) as i64;
    spread[(i * 3) % n] =
        g * 3 + (g >> 61) + (v as u64 >> 60) + (v > 0) as u64 + !g + (g > u[i]) as u64;
    ints[i] = v as u32 + (g as u32 >> 1) + if v < g as i64 { 1 } else { 0 } + (v != 0) as u32;
}

/// `longs` in plain Rust: `out`, `spread` and `ints` for element `i` of `n`, with the IR's
/// rules (wrapping arithmetic, `x / 0 = x`, `x % 0 = 0`, shifts modulo 64).
fn longs_ref(i: usize, x: &[i64], u: &[u64], k: &[i32], w: &[u32]) -> (i64, u64, u32) {
    let (n, v) = (x.len(), x[i]);
    let mut acc = if v > 1000 {
        v >> 3
    } else {
        v.wrapping_neg().wrapping_mul(3).wrapping_add(k[i] as i64)
    };
    for j in 0..w[i] % 7 {
        acc = acc.wrapping_mul(5).wrapping_sub(j as i64);
        if acc > 1i64 << 40 {
            break;
        }
    }
    let g = u[(i * 7) % n];
    let m = g.max(u[i]).min(1u64 << 62);
    let div = |a: i64, b: i64| if b == 0 { a } else { a.wrapping_div(b) };
    let rem = |a: i64, b: i64| if b == 0 { 0 } else { a.wrapping_rem(b) };
    let q = div(v, k[i] as i64).wrapping_add(rem(v, w[i] as i64 - 3));
    let out = acc
        .wrapping_abs()
        .wrapping_add(q)
        .wrapping_add(m as i64 ^ v.wrapping_shl(5))
        .wrapping_add(v.clamp(-100, 100))
        .wrapping_add(v.wrapping_shr(w[i]))
        .wrapping_add(v >> 7)
        .wrapping_add((g as u32) as i64);
    let spread = g
        .wrapping_mul(3)
        .wrapping_add(g >> 61)
        .wrapping_add(v as u64 >> 60)
        .wrapping_add((v > 0) as u64)
        .wrapping_add(!g)
        .wrapping_add((g > u[i]) as u64);
    let int = (v as u32)
        .wrapping_add(g as u32 >> 1)
        .wrapping_add((v < g as i64) as u32)
        .wrapping_add((v != 0) as u32);
    (out, spread, int)
}

#[test]
fn i64_and_u64_kernels_with_divergent_control_flow_match_plain_rust() {
    every_backend(|| {
        // Not a multiple of 4 (the CPU backend's last partial quad), nor of 3 or 7.
        let n = 1001usize;
        let x: Vec<i64> = (0..n)
            .map(|i| match i % 40 {
                0 => i64::MIN,
                1 => i64::MAX,
                2 => -1,
                3 => 0,
                4 => 3 << 40,
                _ => ((i as i64 * 7919) % 20011 - 10000) * (1 + (i as i64 % 3) * 100_000),
            })
            .collect();
        let u: Vec<u64> = (0..n)
            .map(|i| match i % 23 {
                0 => u64::MAX,
                1 => 1 << 63,
                _ => (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            })
            .collect();
        // -1 with i64::MIN (MIN / -1), and 0 (division by zero).
        let k: Vec<i32> = (0..n).map(|i| (i as i32 * 13) % 29 - 9).collect();
        // 3 gives % 0; shifts up to 70 wrap modulo 64.
        let w: Vec<u32> = (0..n).map(|i| (i as u32 * 11) % 71).collect();
        let (mut out, mut spread, mut ints) = (vec![0; n], vec![0; n], vec![0; n]);
        let launched = ctx().launch(longs, n, (&x, &u, &k, &w, &mut out, &mut spread, &mut ints));
        if !has_i64() {
            let e = launched.expect_err("64-bit integers without the feature are an error");
            assert!(e.to_string().contains("64"), "the error names i64: {e}");
            return;
        }
        launched.unwrap();
        for i in 0..n {
            let (o, s, int) = longs_ref(i, &x, &u, &k, &w);
            assert_eq!(
                out[i], o,
                "out[{i}] (x = {}, k = {}, w = {})",
                x[i], k[i], w[i]
            );
            assert_eq!(spread[(i * 3) % n], s, "spread of {i} (x = {})", x[i]);
            assert_eq!(ints[i], int, "ints[{i}] (x = {})", x[i]);
        }
    });
}

/// A particle as a kiln value: a buffer element, a parameter and a local.
#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Particle {
    pos: Vector<f32, 2>,
    vel: Vector<f32, 2>,
    mass: f32,
    hits: u32,
}

/// A struct nested in another, both kiln values.
#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Bounds {
    lo: f32,
    hi: f32,
}

#[kiln::device]
fn clamp_to(b: Bounds, x: f32) -> f32 {
    x.max(b.lo).min(b.hi)
}

#[kiln::kernel]
fn step_particles(i: Index1D, ps: ViewMut<Particle>, dt: f32, walls: Bounds) {
    let mut p = ps[i];
    let x = p.pos.at(0) + p.vel.at(0) * dt;
    let y = p.pos.at(1) + p.vel.at(1) * dt;
    let cx = clamp_to(walls, x);
    let cy = clamp_to(walls, y);
    if cx != x || cy != y {
        p.hits += 1;
        p.vel = vec2(-p.vel.at(0), -p.vel.at(1));
    }
    p.pos = vec2(cx, cy);
    let heavier = Particle {
        mass: p.mass * 1.5,
        ..p
    };
    ps[i] = heavier;
    ps[i].mass -= 0.25;
}

fn step_particle_ref(p: Particle, dt: f32, walls: Bounds) -> Particle {
    let mut p = p;
    let x = p.pos.0[0] + p.vel.0[0] * dt;
    let y = p.pos.0[1] + p.vel.0[1] * dt;
    let cx = x.max(walls.lo).min(walls.hi);
    let cy = y.max(walls.lo).min(walls.hi);
    if cx != x || cy != y {
        p.hits += 1;
        p.vel = Vector([-p.vel.0[0], -p.vel.0[1]]);
    }
    p.pos = Vector([cx, cy]);
    p.mass = p.mass * 1.5 - 0.25;
    p
}

#[test]
fn derived_value_structs_are_parameters_locals_and_buffer_elements() {
    every_backend(|| {
        let n = 300usize;
        let ps0: Vec<Particle> = (0..n)
            .map(|i| Particle {
                pos: Vector([(i % 17) as f32 - 8.0, (i % 5) as f32]),
                vel: Vector([((i * 7) % 11) as f32 - 5.0, 1.5 - (i % 3) as f32]),
                mass: 1.0 + i as f32 * 0.125,
                hits: i as u32 % 4,
            })
            .collect();
        let walls = Bounds { lo: -6.0, hi: 6.0 };
        let mut ps = ps0.clone();
        ctx()
            .launch(step_particles, n, (&mut ps, 0.5f32, walls))
            .unwrap();
        for (j, (got, p0)) in ps.iter().zip(&ps0).enumerate() {
            assert_eq!(*got, step_particle_ref(*p0, 0.5, walls), "particle {j}");
        }
    });
}

const LIMIT: i32 = 30;

#[kiln::kernel]
fn classify(i: Index1D, xs: View<i32>, out: ViewMut<i32>) {
    let x = xs[i];
    let class = match x {
        0 => 100,
        1 | 2 | 3 => 200 + x,
        -5..=-1 => 300,
        LIMIT => 400,
        v if v > 50 => v * 2,
        40..45 => 500,
        _ => -1,
    };
    match (class + 3) % 3 {
        0 => out[i] = class,
        1 => {
            out[i] = class + 1000;
        }
        _ => out[i] = class - 1000,
    }
}

fn classify_ref(x: i32) -> i32 {
    let class = match x {
        0 => 100,
        1..=3 => 200 + x,
        -5..=-1 => 300,
        LIMIT => 400,
        v if v > 50 => v * 2,
        40..45 => 500,
        _ => -1,
    };
    match (class + 3) % 3 {
        0 => class,
        1 => class + 1000,
        _ => class - 1000,
    }
}

#[test]
fn match_on_integers_matches_plain_rust() {
    every_backend(|| {
        let xs: Vec<i32> = (-10..70).collect();
        let mut out = vec![0i32; xs.len()];
        ctx().launch(classify, xs.len(), (&xs, &mut out)).unwrap();
        for (x, o) in xs.iter().zip(&out) {
            assert_eq!(*o, classify_ref(*x), "x = {x}");
        }
    });
}

/// Γ(x) for x > 0: shifted up to 8 or more, then Stirling's series for ln Γ. CUDA and OpenCL
/// call their own `tgamma` instead.
#[kiln::intrinsic(cuda = "tgammaf", opencl = "tgamma")]
fn gamma(x: f32) -> f32 {
    let mut z = x;
    let mut shift = 1.0f32;
    while z < 8.0 {
        shift *= z;
        z += 1.0;
    }
    let inv = 1.0 / z;
    let inv2 = inv * inv;
    let series = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 / 1260.0));
    let ln = (z - 0.5) * z.ln() - z + 0.918_938_5 + series;
    ln.exp() / shift
}

#[kiln::kernel]
fn gammas(i: Index1D, x: View<f32>, out: ViewMut<f32>) {
    out[i] = gamma(x[i]);
}

/// Γ(x) in f64 from Gauss's limit Γ(x) = lim n! n^x / (x (x+1) ... (x+n)), evaluated in
/// logs for n = 10^6; the finite product is Γ(x) (1 - x (x+1) / 2n + O(1/n²)), so it is
/// divided by that leading factor.
fn gamma_ref(x: f64) -> f64 {
    let n = 1_000_000u32;
    let mut ln = x * (n as f64).ln();
    for k in 1..=n {
        ln += (k as f64).ln() - (x + k as f64 - 1.0).ln();
    }
    ln -= (x + n as f64).ln();
    ln.exp() / (1.0 - x * (x + 1.0) / (2.0 * n as f64))
}

#[test]
fn intrinsics_call_the_backend_function_or_run_their_rust_body() {
    every_backend(|| {
        let x: Vec<f32> = (1..=24).map(|i| i as f32 * 0.25).collect();
        let mut out = vec![0.0f32; x.len()];
        ctx().launch(gammas, x.len(), (&x, &mut out)).unwrap();
        for (v, g) in x.iter().zip(&out) {
            let want = gamma_ref(*v as f64);
            let rel = ((*g as f64 - want) / want).abs();
            assert!(
                rel < 2e-5,
                "gamma({v}) = {g}, want {want} (relative error {rel:e})"
            );
        }
    });
    let k = gammas().ir().unwrap();
    let cuda = kiln::emit(&k, kiln::Target::CudaC).unwrap();
    let opencl = kiln::emit(&k, kiln::Target::OpenClC).unwrap();
    let wgsl = kiln::emit(&k, kiln::Target::Wgsl).unwrap();
    assert!(cuda.contains(" = tgammaf(t"), "{cuda}");
    assert!(opencl.contains(" = tgamma(t"), "{opencl}");
    assert!(
        !wgsl.contains("tgamma") && wgsl.contains("kiln_exp_scaled_f32("),
        "{wgsl}"
    );
}

/// Binds to a function no backend has, so the OpenCL C, CUDA C and WGSL compilers reject it.
#[kiln::intrinsic(
    cuda = "no_such_builtin",
    opencl = "no_such_builtin",
    wgsl = "no_such_builtin"
)]
fn missing_builtin(x: f32) -> f32 {
    x + 1.0
}

#[kiln::kernel]
fn calls_missing_builtin(i: Index1D, x: View<f32>, y: ViewMut<f32>) {
    y[i] = missing_builtin(x[i]);
}

#[test]
fn rejected_source_is_a_compile_error_with_the_compiler_log_and_the_source() {
    let x = vec![1.0f32, 2.0, 3.0];
    for ctx in common::contexts() {
        let backend = ctx.device().backend;
        let mut y = vec![0.0f32; 3];
        let result = ctx.launch(calls_missing_builtin, x.len(), (&x, &mut y));
        if backend == BackendKind::Cpu {
            // The CPU has no binding: it runs the Rust body.
            result.unwrap();
            assert_eq!(y, [2.0, 3.0, 4.0]);
            continue;
        }
        match result {
            Err(kiln::Error::Backend(kiln::BackendError::Compile {
                backend: b,
                kernel,
                log,
                source_text,
            })) => {
                assert_eq!(b, backend);
                assert_eq!(kernel, "calls_missing_builtin");
                assert!(
                    log.contains("no_such_builtin"),
                    "{backend}: the log names the unknown function:\n{log}"
                );
                assert!(
                    source_text.contains(" = no_such_builtin(t"),
                    "{backend}: the error carries the generated source:\n{source_text}"
                );
            }
            other => panic!("{backend}: expected a compile error, got {other:?}"),
        }
    }
    // CUDA without a GPU: NVRTC rejects the same kernel's CUDA C with its log.
    if kiln_cuda::nvrtc_available().is_ok() {
        let k = calls_missing_builtin().ir().unwrap();
        let source = kiln::emit(&k, kiln::Target::CudaC).unwrap();
        match kiln_cuda::compile_cubin("calls_missing_builtin", &source, "sm_90") {
            Err(kiln::BackendError::Compile { log, .. }) => {
                assert!(log.contains("no_such_builtin"), "{log}")
            }
            other => panic!(
                "NVRTC accepted a call to an unknown function: {:?}",
                other.map(|c| c.len())
            ),
        }
    }
}

/// A closure kernel over a 1D index, capturing a scale, an offset and a struct.
fn ramp(k: f32, offset: u32, walls: Bounds) -> Lambda<(ViewMut<f32>,), (f32, u32, Bounds)> {
    kiln::lambda!(move |i: Index1D, out: ViewMut<f32>| {
        let v = i as f32 * k + offset as f32;
        out[i] = clamp_to(walls, v);
    })
}

#[test]
fn closure_kernels_capture_values_as_parameters() {
    every_backend(|| {
        let c = ctx();
        let n = 1000usize;
        let built = |s: kiln::Stats| s.compilations + s.disk_hits;
        let before = built(c.stats());
        for (k, offset) in [(0.5f32, 7u32), (-3.0, 100)] {
            let walls = Bounds {
                lo: -500.0,
                hi: 400.0 + k,
            };
            let mut out = vec![0.0f32; n];
            c.launch(ramp(k, offset, walls), n, (&mut out,)).unwrap();
            for (i, o) in out.iter().enumerate() {
                let v = i as f32 * k + offset as f32;
                assert_eq!(*o, v.max(walls.lo).min(walls.hi), "k = {k}, element {i}");
            }
        }
        assert_eq!(
            built(c.stats()) - before,
            1,
            "captured values are parameters: one kernel for both"
        );
        // An expression-bodied closure over a 2D index, used in place.
        let (w, h) = (37usize, 23usize);
        let pitch = w as u32;
        let mut grid = vec![0u32; w * h];
        c.launch(
            kiln::lambda!(|p: Index2D, out: ViewMut<u32>| out[p.y * pitch + p.x] = p.x * 1000 + p.y),
            (w, h),
            (&mut grid,),
        )
        .unwrap();
        for y in 0..h {
            for x in 0..w {
                assert_eq!(grid[y * w + x], (x * 1000 + y) as u32, "({x}, {y})");
            }
        }
    });
}

#[test]
fn generated_source_points_back_to_the_rust_lines() {
    // The line of the `gammas` kernel's statement, found in this file's text.
    let text = include_str!("kernels.rs");
    let line = text
        .lines()
        .position(|l| l.trim() == "out[i] = gamma(x[i]);")
        .expect("the statement is in this file")
        + 1;
    let gamma_line = text
        .lines()
        .position(|l| l.trim() == "let mut shift = 1.0f32;")
        .expect("the statement is in this file")
        + 1;
    let k = gammas().ir().unwrap();
    let comment = format!("// tests/it/kernels.rs:{line}\n");
    let directive = format!("#line {line} \"tests/it/kernels.rs\"\n");
    for (target, at) in [
        (kiln::Target::Ir, &comment),
        (kiln::Target::CudaC, &directive),
        (kiln::Target::OpenClC, &directive),
        (kiln::Target::Wgsl, &comment),
    ] {
        let src = kiln::emit(&k, target).unwrap();
        assert!(src.contains(at), "{target:?} has no `{at}`:\n{src}");
    }
    // After the kernel's Rust lines, the numbering goes back to the generated file's own.
    let cuda = kiln::emit(&k, kiln::Target::CudaC).unwrap();
    let resets: Vec<(usize, &str)> = cuda
        .lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("#line") && l.ends_with(".cu\""))
        .collect();
    assert!(
        !resets.is_empty(),
        "no directive back to gammas.cu:\n{cuda}"
    );
    for (i, l) in resets {
        assert_eq!(l, format!("#line {} \"gammas.cu\"", i + 2), "in:\n{cuda}");
    }
    // NVRTC keeps the directives as line information in the PTX, which is what debuggers
    // and profilers show: the file, and every instruction located in it on the statement's
    // line (CUDA's `gamma` is `tgammaf`, so the kernel's statement is the only Rust line).
    if common::nvrtc_present() {
        let ptx = kiln_cuda::compile_ptx(&k, "sm_90").unwrap().ptx;
        let file = ptx
            .lines()
            .find(|l| l.trim_start().starts_with(".file") && l.contains("tests/it/kernels.rs"))
            .unwrap_or_else(|| panic!("no .file naming tests/it/kernels.rs in the PTX:\n{ptx}"));
        let index = file.split_whitespace().nth(1).unwrap();
        let rust_lines: Vec<&str> = ptx
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some(".loc") && words.next() == Some(index))
                    .then(|| words.next())
                    .flatten()
            })
            .collect();
        let want = line.to_string();
        assert!(
            !rust_lines.is_empty() && rust_lines.iter().all(|l| *l == want),
            "PTX locations in tests/it/kernels.rs are on lines {rust_lines:?}, not all {line}:\n{ptx}"
        );
    }
    // Device function bodies keep theirs too (WGSL writes the Rust body of the intrinsic).
    let wgsl = kiln::emit(&k, kiln::Target::Wgsl).unwrap();
    let at = format!("// tests/it/kernels.rs:{gamma_line}\n");
    assert!(wgsl.contains(&at), "no `{at}`:\n{wgsl}");
}

#[kiln::device]
fn ping(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        pong(n - 1) + 1
    }
}

#[kiln::device]
fn pong(n: u32) -> u32 {
    if n == 0 {
        0
    } else {
        ping(n - 1) + 2
    }
}

#[kiln::kernel]
fn bounce(i: Index1D, out: ViewMut<u32>) {
    out[i] = ping(i);
}

#[test]
fn recursion_is_a_build_error_naming_the_function() {
    every_backend(|| {
        let mut out = vec![0u32; 8];
        let err = ctx().launch(bounce, out.len(), (&mut out,)).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("`ping` calls itself") && msg.contains("rewrite it as a loop"),
            "{msg}"
        );
    });
}

/// Averages the three neighbours of `i` in `src` (clamped at the ends): a device function
/// taking a view.
#[kiln::device]
fn blur3(src: View<f32>, i: u32) -> f32 {
    let last = src.len() - 1;
    let l = if i == 0 { 0 } else { i - 1 };
    let r = i.min(last - 1) + 1;
    (src[l] + src[i] + src[r]) / 3.0
}

/// Writes `v` and its square at `i` of two outputs: a device function returning nothing.
#[kiln::device]
fn store_pair(a: ViewMut<f32>, b: ViewMut<f32>, i: u32, v: f32) {
    a[i] = v;
    if v > 1.0 {
        b[i] = v * v;
    } else {
        b[i] = -1.0;
    }
}

#[kiln::kernel]
fn blur_and_store(i: Index1D, src: View<f32>, a: ViewMut<f32>, b: ViewMut<f32>) {
    store_pair(a, b, i, blur3(src, i));
}

#[test]
fn device_functions_take_views_and_may_return_nothing() {
    every_backend(|| {
        let src: Vec<f32> = (0..301).map(|i| ((i * 37) % 23) as f32 * 0.25).collect();
        let (mut a, mut b) = (vec![0.0f32; 301], vec![0.0f32; 301]);
        ctx()
            .launch(blur_and_store, src.len(), (&src, &mut a, &mut b))
            .unwrap();
        let n = src.len();
        for i in 0..n {
            let (l, r) = (i.saturating_sub(1), (i + 1).min(n - 1));
            let v = (src[l] + src[i] + src[r]) / 3.0;
            assert_eq!(a[i], v, "a[{i}]");
            assert_eq!(b[i], if v > 1.0 { v * v } else { -1.0 }, "b[{i}]");
        }
    });
}

/// Views with a row stride wider than the row: the stencil reads a window of a wider image
/// and writes into rows of another stride, leaving the padding between rows alone. A view
/// its data cannot hold is `ViewOutOfBounds`.
#[test]
fn strided_2d_views_address_rows_by_their_stride() {
    every_backend(|| {
        let (w, h, src_stride, dst_stride) = (37usize, 23usize, 50usize, 41usize);
        let src: Vec<f32> = (0..src_stride * h)
            .map(|i| ((i * 13) % 29) as f32)
            .collect();
        let mut dst = vec![-7.0f32; dst_stride * h];
        ctx()
            .launch(
                stencil,
                (w, h),
                (
                    Slice2D::with_stride(&src[..], h, w, src_stride).unwrap(),
                    Slice2D::with_stride(&mut dst[..], h, w, dst_stride).unwrap(),
                ),
            )
            .unwrap();
        let at = |y: usize, x: usize| src[y * src_stride + x];
        for y in 0..h {
            for x in 0..dst_stride {
                let got = dst[y * dst_stride + x];
                let want = if x >= w {
                    -7.0
                } else if x > 0 && y > 0 && x + 1 < w && y + 1 < h {
                    0.25 * (at(y, x - 1) + at(y, x + 1) + at(y - 1, x) + at(y + 1, x)) - at(y, x)
                } else {
                    at(y, x)
                };
                assert_eq!(got, want, "({x}, {y})");
            }
        }
        match Slice2D::with_stride(&src[..], h + 1, w, src_stride) {
            Err(kiln::Error::ViewOutOfBounds { need, len, .. }) => {
                assert_eq!((need, len), (h * src_stride + w, src.len()))
            }
            Err(e) => panic!("expected ViewOutOfBounds, got {e}"),
            Ok(_) => panic!("expected ViewOutOfBounds for a view past the data"),
        }
    });
}

/// The right, lower and left neighbours of each element, weighted 1, 10 and 100; a
/// neighbour past the matrix's edge reads zero.
#[kiln::kernel]
fn neighbours(p: Index2D, a: View2D<f32>, out: View2DMut<f32>) {
    out[p] = a[(p.y, p.x + 1)] + a[(p.y + 1, p.x)] * 10.0 + a[(p.y, p.x - 1)] * 100.0;
}

#[test]
fn two_dimensional_views_read_zero_past_each_edge() {
    // On the CPU, rows of a group run four work items at a time; a quad whose four loads
    // stay inside the row is one vector load, and one that reaches past the row's end must
    // read zero there, not the next row's first elements.
    every_backend(|| {
        for (w, h) in [(40usize, 9usize), (37, 6)] {
            let a: Vec<f32> = (0..w * h).map(|i| (i % 13) as f32).collect();
            let at = |y: usize, x: usize| if y < h && x < w { a[y * w + x] } else { 0.0 };
            for group in [(8usize, 4usize), (4, 1), (16, 16)] {
                let mut out = vec![-1.0f32; w * h];
                let groups = (w.div_ceil(group.0), h.div_ceil(group.1));
                ctx()
                    .launch_grouped(
                        neighbours,
                        groups,
                        group,
                        (Slice2D::new(&a[..], w), Slice2D::new(&mut out[..], w)),
                    )
                    .unwrap();
                for y in 0..h {
                    for x in 0..w {
                        let left = if x > 0 { at(y, x - 1) } else { 0.0 };
                        let want = at(y, x + 1) + at(y + 1, x) * 10.0 + left * 100.0;
                        assert_eq!(out[y * w + x], want, "{w}x{h}, group {group:?}, ({x}, {y})");
                    }
                }
            }
        }
    });
}

/// Items whose value is a multiple of three leave at once; the others write.
#[kiln::kernel]
fn skip_multiples_of_three(i: Index1D, x: View<u32>, out: ViewMut<u32>) {
    if x[i] % 3 == 0 {
        return;
    }
    out[i] = x[i] + 1;
}

#[test]
fn early_returns_leave_only_their_own_work_item() {
    // On the CPU, quads run in unrolled runs; a lane that returned in one quad must not stay
    // masked off in the quads after it.
    every_backend(|| {
        for n in [1000usize, 4099, 64, 3] {
            let x: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
                .collect();
            let mut out = vec![u32::MAX; n];
            ctx()
                .launch(skip_multiples_of_three, n, (&x, &mut out))
                .unwrap();
            for i in 0..n {
                let want = if x[i].is_multiple_of(3) {
                    u32::MAX
                } else {
                    x[i] + 1
                };
                assert_eq!(out[i], want, "n = {n}, item {i}");
            }
        }
    });
}

/// Sets `flags[i]` and says so: a right side of `&&` with an effect.
#[kiln::device]
fn flag(flags: ViewMut<u32>, i: u32) -> bool {
    flags[i] = 1;
    true
}

#[kiln::kernel]
fn short_circuits(
    i: Index1D,
    x: View<u32>,
    hits: ViewMut<u32>,
    flags: ViewMut<u32>,
    out: ViewMut<u32>,
) {
    let even = x[i] % 2 == 0 && atomic_add(&hits, 0u32, 1u32) < 1_000_000u32;
    let third = x[i] % 3 == 0 || atomic_add(&hits, 1u32, 1u32) < 1_000_000u32;
    let big = x[i] > 500 && flag(flags, i);
    let mut code = 0u32;
    if even {
        code += 1;
    }
    if third {
        code += 2;
    }
    if big {
        code += 4;
    }
    out[i] = code;
}

/// Writes 1 at its global position; it has no index to keep it inside an extent.
#[kiln::kernel]
fn mark_global(marks: ViewMut<u32>) {
    marks[global_id(Dim::X)] = 1u32;
}

#[test]
fn launch_refuses_a_kernel_without_an_index_and_grouped_launches_run_it() {
    every_backend(|| {
        let mut marks = vec![0u32; 64];
        let refused = ctx().launch(mark_global, 1, (&mut marks,));
        match refused {
            Err(Error::Unsupported { what, .. }) => {
                assert!(
                    what.contains("mark_global") && what.contains("Index1D"),
                    "{what}"
                );
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        assert!(marks.iter().all(|m| *m == 0), "nothing ran: {marks:?}");
        ctx()
            .launch_grouped(mark_global, 2u32, 16u32, (&mut marks,))
            .unwrap();
        let want: Vec<u32> = (0..64).map(|i| (i < 32) as u32).collect();
        assert_eq!(marks, want);
    });
}

#[test]
fn and_and_or_evaluate_their_right_side_only_when_rust_does() {
    every_backend(|| {
        let n = 1001usize;
        let x: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % 1000).collect();
        let (mut hits, mut flags, mut out) = (vec![0u32; 2], vec![0u32; n], vec![0u32; n]);
        ctx()
            .launch(short_circuits, n, (&x, &mut hits, &mut flags, &mut out))
            .unwrap();
        let mut want_hits = [0u32; 2];
        for (i, &v) in x.iter().enumerate() {
            let even = v % 2 == 0 && {
                want_hits[0] += 1;
                true
            };
            let third = v % 3 == 0 || {
                want_hits[1] += 1;
                true
            };
            let big = v > 500;
            assert_eq!(flags[i], u32::from(big), "flag of item {i}");
            let code = u32::from(even) + 2 * u32::from(third) + 4 * u32::from(big);
            assert_eq!(out[i], code, "item {i}");
        }
        assert_eq!(hits, want_hits, "right sides evaluated");
    });
}

/// Counts and sums (wrapping) the values of `(s..e).step_by(step)` and of
/// `(s..=e).step_by(step)`.
#[kiln::kernel]
fn u32_ranges(i: Index1D, s: View<u32>, e: View<u32>, step: View<u32>, out: ViewMut<u32>) {
    let (mut n, mut sum, mut n_incl, mut sum_incl) = (0u32, 0u32, 0u32, 0u32);
    for k in (s[i]..e[i]).step_by(step[i]) {
        n += 1;
        sum = sum.wrapping_add(k);
    }
    for k in (s[i]..=e[i]).step_by(step[i]) {
        n_incl += 1;
        sum_incl = sum_incl.wrapping_add(k);
    }
    out[i * 4] = n;
    out[i * 4 + 1] = sum;
    out[i * 4 + 2] = n_incl;
    out[i * 4 + 3] = sum_incl;
}

#[kiln::kernel]
fn i32_ranges(i: Index1D, s: View<i32>, e: View<i32>, step: View<i32>, out: ViewMut<i32>) {
    let (mut n, mut sum, mut n_incl, mut sum_incl) = (0i32, 0i32, 0i32, 0i32);
    for k in (s[i]..e[i]).step_by(step[i]) {
        n += 1;
        sum = sum.wrapping_add(k);
    }
    for k in (s[i]..=e[i]).step_by(step[i]) {
        n_incl += 1;
        sum_incl = sum_incl.wrapping_add(k);
    }
    out[i * 4] = n;
    out[i * 4 + 1] = sum;
    out[i * 4 + 2] = n_incl;
    out[i * 4 + 3] = sum_incl;
}

/// Loops whose ends are constants at the top of `u8` and `i16`, stepping and not.
#[kiln::kernel]
fn constant_ranges(i: Index1D, out: ViewMut<u32>) {
    let (mut a, mut b, mut c, mut d) = (0u32, 0u32, 0u32, 0u32);
    let first = i as u8;
    for k in first..=255u8 {
        a += k as u32;
    }
    for k in (first..=255u8).step_by(100u8) {
        b += k as u32 + 1;
    }
    for k in (first..250u8).step_by(7u8) {
        c += k as u32 + 1;
    }
    for k in (32700i16..=32767i16).step_by(30i16) {
        d += (k - 32700i16) as u32 + 1;
    }
    out[i * 4] = a;
    out[i * 4 + 1] = b;
    out[i * 4 + 2] = c;
    out[i * 4 + 3] = d;
}

#[test]
fn ranges_run_rusts_iterations_up_to_the_types_extremes() {
    let m = u32::MAX;
    let cases: Vec<(u32, u32, u32)> = vec![
        (m - 5, m, 1),
        (m - 10, m, 1 << 31),
        (m - 10, m, 4),
        (m - 1, m, m),
        (0, 10, 3),
        (5, 5, 1),
        (6, 5, 2),
        (0, 0, 1),
        (m, m, 1),
        (m - 3, m - 1, 2),
    ];
    let ints: Vec<(i32, i32, i32)> = vec![
        (i32::MAX - 3, i32::MAX, 1),
        (i32::MAX - 10, i32::MAX, 1 << 30),
        (i32::MIN, i32::MIN + 3, 1),
        (-5, 5, 5),
        (-5, 5, i32::MAX),
        (i32::MIN, i32::MAX, i32::MAX),
        (3, -3, 1),
    ];
    let count_sum = |it: &mut dyn Iterator<Item = u32>| {
        it.fold((0u32, 0u32), |(n, s), k| (n + 1, s.wrapping_add(k)))
    };
    let count_sum_i = |it: &mut dyn Iterator<Item = i32>| {
        it.fold((0i32, 0i32), |(n, s), k| (n + 1, s.wrapping_add(k)))
    };
    every_backend(|| {
        let (s, e, st): (Vec<u32>, Vec<u32>, Vec<u32>) = cases.iter().fold(
            (vec![], vec![], vec![]),
            |(mut a, mut b, mut c), &(x, y, z)| {
                a.push(x);
                b.push(y);
                c.push(z);
                (a, b, c)
            },
        );
        let mut out = vec![0u32; 4 * cases.len()];
        ctx()
            .launch(u32_ranges, cases.len(), (&s, &e, &st, &mut out))
            .unwrap();
        for (j, &(a, b, step)) in cases.iter().enumerate() {
            let (n, sum) = count_sum(&mut (a..b).step_by(step as usize));
            let (ni, sumi) = count_sum(&mut (a..=b).step_by(step as usize));
            assert_eq!(
                &out[j * 4..j * 4 + 4],
                &[n, sum, ni, sumi],
                "u32 ({a}, {b}, {step})"
            );
        }
        let (s, e, st): (Vec<i32>, Vec<i32>, Vec<i32>) = ints.iter().fold(
            (vec![], vec![], vec![]),
            |(mut a, mut b, mut c), &(x, y, z)| {
                a.push(x);
                b.push(y);
                c.push(z);
                (a, b, c)
            },
        );
        let mut out = vec![0i32; 4 * ints.len()];
        ctx()
            .launch(i32_ranges, ints.len(), (&s, &e, &st, &mut out))
            .unwrap();
        for (j, &(a, b, step)) in ints.iter().enumerate() {
            let (n, sum) = count_sum_i(&mut (a..b).step_by(step as usize));
            let (ni, sumi) = count_sum_i(&mut (a..=b).step_by(step as usize));
            assert_eq!(
                &out[j * 4..j * 4 + 4],
                &[n, sum, ni, sumi],
                "i32 ({a}, {b}, {step})"
            );
        }
        let n = 256usize;
        let mut out = vec![0u32; 4 * n];
        ctx().launch(constant_ranges, n, (&mut out,)).unwrap();
        for i in 0..n {
            let first = i as u8;
            let a: u32 = (first..=255u8).map(u32::from).sum();
            let b: u32 = (first..=255u8).step_by(100).map(|k| k as u32 + 1).sum();
            let c: u32 = (first..250u8).step_by(7).map(|k| k as u32 + 1).sum();
            let d: u32 = (32700i16..=32767)
                .step_by(30)
                .map(|k| (k - 32700) as u32 + 1)
                .sum();
            assert_eq!(&out[i * 4..i * 4 + 4], &[a, b, c, d], "first = {first}");
        }
    });
}

#[test]
fn launch_extents_take_integer_literals_and_refuse_what_u32_cannot_hold() {
    every_backend(|| {
        let x: Vec<f32> = (0..3001).map(|i| i as f32).collect();
        let mut y = vec![1.0f32; 3001];
        // An integer literal is an `i32`.
        ctx().launch(saxpy, 3001, (2.0f32, &x, &mut y)).unwrap();
        assert!(y.iter().zip(&x).all(|(y, x)| *y == 2.0 * x + 1.0));
        ctx()
            .launch_grouped(saxpy, 2, 64, (0.0f32, &x, &mut y))
            .unwrap();
        for (extent, says) in [
            (-5i64, "negative extent (-5)"),
            (1 << 33, "at most u32::MAX"),
        ] {
            let r = match extent {
                -5 => ctx().launch(saxpy, -5, (2.0f32, &x, &mut y)),
                e => ctx().launch(saxpy, e as usize, (2.0f32, &x, &mut y)),
            };
            match r {
                Err(kiln::Error::Unsupported { what, .. }) => {
                    assert!(what.contains(says), "{what}")
                }
                other => panic!("extent {extent}: expected Unsupported, got {other:?}"),
            }
        }
    });
}

/// The generated code of the gallery's kernels and of a few queries, in kiln's IR listing,
/// CUDA C, OpenCL C and WGSL, equals the files checked in under tests/snapshots/, so a change
/// to what any writer emits shows in review. After an intended change, `KILN_BLESS=1` rewrites
/// the files; review their diff before committing it.
#[test]
fn generated_code_matches_the_snapshots() {
    let ctx = kiln::Context::with_backend(BackendKind::Cpu).unwrap();
    let xs = vec![1f32, 2.0, 3.0];
    let narrow = vec![1u8, 2, 3];
    let chain = ctx
        .from(&xs)
        .map(|x| x * 2.0 + 1.0)
        .filter(|x| x.gt(3.0))
        .map(|x| x.sqrt());
    let zipped = ctx.from(&narrow).zip(&narrow).map(|(a, b)| (a, a + b));
    // Plans over a million elements: several groups in either shape.
    let counted = ctx
        .range(1_000_000)
        .map(|i| i * 3u32)
        .filter(|x| (x % 7u32).eq(0u32));
    let mapped = ctx.range(1_000_000).map(|i| (i, i.cast::<f32>() * 0.5));
    let grouped_rows = ctx
        .range(1_000_000)
        .filter(|i| (i % 3u32).ne(0u32))
        .group_by(|i| i % 100u32);
    let grouped_by_tuple = ctx.range(1_000_000).group_by(|i| {
        (
            (i % 3u32).cast::<u8>(),
            (i % 5u32).cast::<i16>(),
            i >> 12u32,
        )
    });
    let distinct = ctx
        .range(1_000_000)
        .map(|i| i.cast::<f32>() * 0.25)
        .distinct();
    let bins = ctx.range(1_000_000).map(|i| i % 65536u32);
    let running = ctx
        .range(1_000_000)
        .filter(|i| (i & 1u32).eq(0u32))
        .scan(0u32, |a, b| a + b);
    let sorted = ctx.range(1_000_000).map(|i| i ^ 0x5555u32).sort();
    // A CPU's plan and a GPU's (the profile of an H100 on CUDA), made without running them.
    let chunked = kiln::DeviceProfile {
        shape: kiln::PlanShape::Chunked,
        group_size: 256,
        chunk: 16384,
        max_group_size: 16384,
        fits_groups_to_work: true,
        host_memory: true,
        max_loop_iterations: None,
        compute_units: 2,
        indexed_private_arrays: true,
        max_shared_bytes: 64 << 20,
    };
    let grouped = kiln::DeviceProfile {
        shape: kiln::PlanShape::Grouped,
        max_group_size: 1024,
        fits_groups_to_work: false,
        host_memory: false,
        compute_units: 132,
        max_shared_bytes: 227 << 10,
        ..chunked
    };
    let kernels = [
        saxpy().ir(),
        stencil().ir(),
        transpose_naive().ir(),
        transpose_tiled().ir(),
        histogram_global().ir(),
        histogram_shared().ir(),
        block_sum().ir(),
        matmul_tiled().ir(),
        nbody_step().ir(),
        mandelbrot().ir(),
        map_op::<Smooth>().ir(),
        scale::<i32>().ir(),
    ];
    // Where the test was built, or the current folder (scripts/gpu.sh runs packed binaries
    // from a copy of the repository elsewhere).
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let dir = match built.is_dir() {
        true => built,
        false => std::path::PathBuf::from("tests/snapshots"),
    };
    let bless = std::env::var_os("KILN_BLESS").is_some();
    let mut stale = Vec::new();
    let mut check = |name: String, text: String| {
        let path = dir.join(&name);
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != text {
            let line = want
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(text.lines().count()));
            stale.push(format!("{name} (first difference at line {})", line + 1));
        }
    };
    let targets = [
        (kiln::Target::Ir, "ir"),
        (kiln::Target::CudaC, "cu"),
        (kiln::Target::OpenClC, "cl"),
        (kiln::Target::Wgsl, "wgsl"),
    ];
    for k in kernels {
        let k = k.unwrap();
        for (target, ext) in targets {
            check(format!("{}.{ext}", k.name), kiln::emit(&k, target).unwrap());
        }
    }
    for (target, ext) in targets {
        check(
            format!("query_map_filter_map.{ext}"),
            chain.emit(target).unwrap(),
        );
        check(
            format!("query_zip_narrow.{ext}"),
            zipped.emit(target).unwrap(),
        );
    }
    for (profile, shape) in [(chunked, "chunked"), (grouped, "grouped")] {
        let plans = [
            ("range_filter", counted.explain_on(&profile)),
            ("range_map", mapped.explain_on(&profile)),
            ("group_by", grouped_rows.explain_on(&profile)),
            ("group_by_tuple", grouped_by_tuple.explain_on(&profile)),
            ("distinct", distinct.explain_on(&profile)),
            ("scan", running.explain_on(&profile)),
            ("sort", sorted.explain_on(&profile)),
            ("histogram_16", bins.explain_histogram_on(&profile, 16)),
            (
                "histogram_65536",
                bins.explain_histogram_on(&profile, 1 << 16),
            ),
        ];
        for (name, text) in plans {
            check(format!("plan_{name}.{shape}.txt"), text);
        }
    }
    assert!(
        stale.is_empty(),
        "generated code differs from tests/snapshots/ in: {}. If the change is intended, run \
         the test with KILN_BLESS=1 and review the snapshots' diff.",
        stale.join(", ")
    );
}
