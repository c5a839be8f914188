//! Gallery kernels (`examples/gallery`): each optimized kernel against its naive form on the
//! same device, and on the CPU backend against the same loops in rayon.

use super::{Baseline, Case, Measure, Needs};
use crate::data::Bench;
use crate::kernels;
use kiln::lang::Slice2D;
use rayon::prelude::*;

/// The side of the transposed matrix.
fn side(b: &Bench) -> usize {
    if b.quick {
        1024
    } else {
        4096
    }
}

/// The low byte of each of `xs`'s bit patterns.
fn bytes(b: &Bench) -> Vec<u8> {
    b.xs.iter().map(|x| x.to_bits() as u8).collect()
}

/// The side of the multiplied matrices.
fn matmul_side(b: &Bench) -> usize {
    if b.quick {
        128
    } else {
        512
    }
}

/// A matrix of `side * side` values cycling through `0..period`.
fn matrix(side: usize, period: usize) -> Vec<f32> {
    (0..side * side).map(|i| (i % period) as f32).collect()
}

/// The n-body problem: positions, masses and the softening, as `nbody_step` takes them.
struct Bodies {
    p: [Vec<f32>; 3],
    mass: Vec<f32>,
}

impl Bodies {
    fn new(b: &Bench) -> Bodies {
        let count = if b.quick { 1024usize } else { 4096 };
        let coord = |k: usize| (0..count).map(|i| ((i * k) % 101) as f32 * 0.1).collect();
        Bodies {
            p: [coord(7), coord(13), coord(29)],
            mass: (0..count).map(|i| 1.0 + (i % 3) as f32).collect(),
        }
    }
}

/// The Mandelbrot image's width, height and iteration limit.
const MANDELBROT: (usize, usize, u32) = (1024, 768, 256);

static NAIVE_TRANSPOSE: Baseline = Baseline {
    label: "naive kernel",
    measure: Measure::Device(|b, ctx| {
        let side = side(b);
        let m = matrix(side, usize::MAX);
        let mut t = vec![0f32; side * side];
        Ok(b.best(|| {
            let args = (Slice2D::new(&m[..], side), Slice2D::new(&mut t[..], side));
            ctx.launch(kernels::transpose_naive, (side, side), args)
                .unwrap()
        }))
    }),
    bytes_per_element: None,
};
static GLOBAL_ATOMICS: Baseline = Baseline {
    label: "global atomics",
    measure: Measure::Device(|b, ctx| {
        let (bytes, mut bins) = (bytes(b), vec![0u32; 256]);
        Ok(b.best(|| {
            ctx.launch(kernels::histogram_global, bytes.len(), (&bytes, &mut bins))
                .unwrap()
        }))
    }),
    bytes_per_element: None,
};
static RAYON_MATMUL: Baseline = Baseline {
    label: "rayon",
    measure: Measure::Host(|b| {
        let mn = matmul_side(b);
        let (a, m) = (matrix(mn, 7), matrix(mn, 5));
        let mut c = vec![0f32; mn * mn];
        b.best(|| {
            c.par_chunks_mut(mn).enumerate().for_each(|(r, out)| {
                out.iter_mut().for_each(|v| *v = 0.0);
                for k in 0..mn {
                    let av = a[r * mn + k];
                    for (o, bv) in out.iter_mut().zip(&m[k * mn..(k + 1) * mn]) {
                        *o += av * bv;
                    }
                }
            })
        })
    }),
    bytes_per_element: None,
};
static RAYON_NBODY: Baseline = Baseline {
    label: "rayon",
    measure: Measure::Host(|b| {
        let Bodies {
            p: [px, py, pz],
            mass,
        } = Bodies::new(b);
        let mut v = vec![[0f32; 3]; mass.len()];
        b.best(|| {
            v.par_iter_mut().enumerate().for_each(|(i, v)| {
                let mut a = [0f32; 3];
                for j in 0..mass.len() {
                    let d = [px[j] - px[i], py[j] - py[i], pz[j] - pz[i]];
                    let inv = 1.0 / (d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01).sqrt();
                    let s = mass[j] * inv * inv * inv;
                    a.iter_mut().zip(d).for_each(|(a, d)| *a += d * s);
                }
                v.iter_mut().zip(a).for_each(|(v, a)| *v += a * 0.01);
            })
        })
    }),
    bytes_per_element: None,
};
static RAYON_SMOOTH: Baseline = Baseline {
    label: "rayon",
    measure: Measure::Host(|b| {
        let mut smooth = vec![0f32; b.n];
        b.best(|| {
            smooth.par_iter_mut().zip(&b.xs).for_each(|(y, x)| {
                let t = ((x - 0.0) / (10.0 - 0.0)).clamp(0.0, 1.0);
                *y = t * t * (3.0 - 2.0 * t);
            })
        })
    }),
    bytes_per_element: None,
};
static RAYON_MANDELBROT: Baseline = Baseline {
    label: "rayon",
    measure: Measure::Host(|b| {
        let (w, h, iters) = MANDELBROT;
        let mut escape = vec![0u32; w * h];
        b.best(|| {
            escape.par_chunks_mut(w).enumerate().for_each(|(y, row)| {
                let cy = -1.25 + 2.5 * y as f32 / h as f32;
                for (x, out) in row.iter_mut().enumerate() {
                    let cx = -2.0 + 3.0 * x as f32 / w as f32;
                    let (mut zx, mut zy, mut k) = (0f32, 0f32, 0u32);
                    while k < iters && zx * zx + zy * zy <= 4.0 {
                        let t = zx * zx - zy * zy + cx;
                        zy = 2.0 * zx * zy + cy;
                        zx = t;
                        k += 1;
                    }
                    *out = k;
                }
            })
        })
    }),
    bytes_per_element: None,
};

/// A gallery case on devices with `needs`.
const fn case(
    name: &'static str,
    needs: Needs,
    kiln: super::KilnSide,
    baseline: &'static Baseline,
) -> Case {
    Case {
        name,
        needs,
        kiln,
        baseline,
        naive: None,
        bytes_per_element: None,
    }
}

pub(super) static CASES: &[Case] = &[
    case(
        "transpose tiled (2D side)",
        Needs::Any,
        |b, ctx| {
            let side = side(b);
            let m = matrix(side, usize::MAX);
            let mut t = vec![0f32; side * side];
            Ok(b.best(|| {
                let args = (Slice2D::new(&m[..], side), Slice2D::new(&mut t[..], side));
                let g = side.div_ceil(16);
                ctx.launch_grouped(kernels::transpose_tiled, (g, g), (16usize, 16usize), args)
                    .unwrap()
            }))
        },
        &NAIVE_TRANSPOSE,
    ),
    case(
        "histogram privatized",
        Needs::Any,
        |b, ctx| {
            let (bytes, mut bins) = (bytes(b), vec![0u32; 256]);
            let groups = ctx.device().compute_units.max(1) * 4;
            Ok(b.best(|| {
                let args = (&bytes, &mut bins);
                ctx.launch_grouped(kernels::histogram_shared, groups, 256u32, args)
                    .unwrap()
            }))
        },
        &GLOBAL_ATOMICS,
    ),
    case(
        "tiled matmul (side 128/512)",
        Needs::Cpu,
        |b, ctx| {
            let mn = matmul_side(b);
            let (a, m) = (matrix(mn, 7), matrix(mn, 5));
            let mut c = vec![0f32; mn * mn];
            let g = mn.div_ceil(16);
            Ok(b.best(|| {
                let args = (&a, &m, &mut c, mn as u32);
                ctx.launch_grouped(kernels::matmul_tiled, (g, g), (16usize, 16usize), args)
                    .unwrap()
            }))
        },
        &RAYON_MATMUL,
    ),
    case(
        "n-body step (1024/4096 bodies)",
        Needs::Cpu,
        |b, ctx| {
            let Bodies {
                p: [px, py, pz],
                mass,
            } = Bodies::new(b);
            let count = mass.len();
            let (mut vx, mut vy, mut vz) =
                (vec![0f32; count], vec![0f32; count], vec![0f32; count]);
            Ok(b.best(|| {
                let args = (&px, &py, &pz, &mass, &mut vx, &mut vy, &mut vz, 0.01f32);
                ctx.launch(kernels::nbody_step, count, args).unwrap()
            }))
        },
        &RAYON_NBODY,
    ),
    case(
        "map calling a device function (smoothstep)",
        Needs::Cpu,
        |b, ctx| {
            let mut smooth = vec![0f32; b.n];
            Ok(b.best(|| {
                let args = (&b.xs, &mut smooth);
                ctx.launch(kernels::map_op::<kernels::Smooth>, b.n, args)
                    .unwrap()
            }))
        },
        &RAYON_SMOOTH,
    ),
    case(
        "mandelbrot (1024 x 768, 256 iterations)",
        Needs::Cpu,
        |b, ctx| {
            let (w, h, iters) = MANDELBROT;
            let mut escape = vec![0u32; w * h];
            Ok(b.best(|| {
                let args = (w as u32, h as u32, iters, &mut escape);
                ctx.launch(kernels::mandelbrot, (w, h), args).unwrap()
            }))
        },
        &RAYON_MANDELBROT,
    ),
];
