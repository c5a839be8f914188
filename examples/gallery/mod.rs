//! The kernel gallery: kernels written as Rust functions with `#[kiln::kernel]`. The
//! `kernels` example runs some of them, tests/it/kernels.rs checks every one against a plain Rust
//! loop on every backend, and the benchmark times the transposes and histograms.
//!
//! Each kernel is an ordinary function; `ctx.launch(saxpy, n, (a, &x, &mut y))` runs it.

use kiln::lang::*;

/// `y = a * x + y`, one element per work item.
#[kiln::kernel]
pub fn saxpy(i: Index1D, a: f32, x: View<f32>, y: ViewMut<f32>) {
    y[i] = a * x[i] + y[i];
}

/// A 2D 5-point stencil: inner points become the mean of their neighbours minus themselves;
/// the border is copied.
#[kiln::kernel]
pub fn stencil(p: Index2D, src: View2D<f32>, dst: View2DMut<f32>) {
    let (x, y) = (p.x, p.y);
    if x > 0 && y > 0 && x + 1 < src.cols() && y + 1 < src.rows() {
        let around = src[(y, x - 1)] + src[(y, x + 1)] + src[(y - 1, x)] + src[(y + 1, x)];
        dst[p] = 0.25 * around - src[p];
    } else {
        dst[p] = src[p];
    }
}

/// Matrix transpose, one element per work item (strided writes).
#[kiln::kernel]
pub fn transpose_naive(p: Index2D, a: View2D<f32>, t: View2DMut<f32>) {
    t[(p.x, p.y)] = a[(p.y, p.x)];
}

/// The tile side of the tiled kernels.
pub const TILE: u32 = 16;

/// Matrix transpose through a padded shared tile: coalesced reads and writes. Launch with
/// 16 x 16 groups covering the matrix.
#[kiln::kernel]
pub fn transpose_tiled(a: View2D<f32>, t: View2DMut<f32>) {
    // One padded column per row keeps the column reads free of bank conflicts.
    let tile = shared::<f32, { TILE * (TILE + 1) }>();
    let (lx, ly) = (local_id(Dim::X), local_id(Dim::Y));
    let (bx, by) = (group_id(Dim::X) * TILE, group_id(Dim::Y) * TILE);
    tile[ly * (TILE + 1) + lx] = a[(by + ly, bx + lx)];
    barrier();
    t[(bx + ly, by + lx)] = tile[lx * (TILE + 1) + ly];
}

/// Byte histogram with one global atomic per byte.
#[kiln::kernel]
pub fn histogram_global(i: Index1D, data: View<u8>, bins: ViewMut<u32>) {
    atomic_add(&bins, data[i] as u32, 1u32);
}

/// Byte histogram with per-group shared bins, merged into the global bins once per group.
#[kiln::kernel]
pub fn histogram_shared(data: View<u8>, bins: ViewMut<u32>) {
    let local = shared::<u32, 256>();
    let (lid, size) = (local_index(), group_size(Dim::X));
    for b in (lid..256u32).step_by(size) {
        local[b] = 0u32;
    }
    barrier();
    for j in (global_id(Dim::X)..data.len()).step_by(global_size(Dim::X)) {
        atomic_add(&local, data[j] as u32, 1u32);
    }
    barrier();
    for b in (lid..256u32).step_by(size) {
        atomic_add(&bins, b, local[b]);
    }
}

/// One partial sum per group of 256: subgroup shuffles, then shared memory.
#[kiln::kernel]
pub fn block_sum(data: View<f32>, partial: ViewMut<f32>) {
    let per_subgroup = shared::<f32, 256>();
    let mut v = data[global_id(Dim::X)];
    // Tree reduction inside the subgroup through shuffles.
    let mut offset = subgroup_size() / 2u32;
    while offset > 0u32 {
        v += v.shuffle_down(offset);
        offset = offset / 2u32;
    }
    let sg = builtin(kiln::ir::Builtin::SubgroupId);
    if subgroup_lane() == 0u32 {
        per_subgroup[sg] = v;
    }
    barrier();
    if local_index() == 0u32 {
        let subgroups = (group_size(Dim::X) + subgroup_size() - 1u32) / subgroup_size();
        let mut total = 0.0f32;
        for s in 0u32..subgroups {
            total += per_subgroup[s];
        }
        partial[group_id(Dim::X)] = total;
    }
}

/// `c = a * b` for `n x n` row-major matrices, through 16 x 16 shared tiles. Launch with
/// 16 x 16 groups covering `c`.
#[kiln::kernel]
pub fn matmul_tiled(a: View<f32>, b: View<f32>, c: ViewMut<f32>, n: u32) {
    let ta = shared::<f32, { TILE * TILE }>();
    let tb = shared::<f32, { TILE * TILE }>();
    let (lx, ly) = (local_id(Dim::X), local_id(Dim::Y));
    let col = group_id(Dim::X) * TILE + lx;
    let row = group_id(Dim::Y) * TILE + ly;
    let mut acc = 0.0f32;
    for t in (0u32..n).step_by(TILE) {
        ta[ly * TILE + lx] = if row < n && t + lx < n {
            a[row * n + t + lx]
        } else {
            0.0f32
        };
        tb[ly * TILE + lx] = if col < n && t + ly < n {
            b[(t + ly) * n + col]
        } else {
            0.0f32
        };
        barrier();
        for k in 0u32..TILE {
            acc += ta[ly * TILE + k] * tb[k * TILE + lx];
        }
        barrier();
    }
    if row < n && col < n {
        c[row * n + col] = acc;
    }
}

#[kiln::kernel]
#[allow(clippy::too_many_arguments)]
pub fn nbody_step(
    i: Index1D,
    px: View<f32>,
    py: View<f32>,
    pz: View<f32>,
    mass: View<f32>,
    vx: ViewMut<f32>,
    vy: ViewMut<f32>,
    vz: ViewMut<f32>,
    dt: f32,
) {
    let (xi, yi, zi) = (px[i], py[i], pz[i]);
    let mut ax = 0.0f32;
    let mut ay = 0.0f32;
    let mut az = 0.0f32;
    for j in 0u32..px.len() {
        let (dx, dy, dz) = (px[j] - xi, py[j] - yi, pz[j] - zi);
        let d2 = dx * dx + dy * dy + dz * dz + 0.01f32;
        let inv = d2.rsqrt();
        let s = mass[j] * inv * inv * inv;
        ax += dx * s;
        ay += dy * s;
        az += dz * s;
    }
    vx[i] = vx[i] + ax * dt;
    vy[i] = vy[i] + ay * dt;
    vz[i] = vz[i] + az * dt;
}

/// Escape iterations of the Mandelbrot set over [-2, 1] x [-1.25, 1.25].
#[kiln::kernel]
pub fn mandelbrot(p: Index2D, width: u32, height: u32, max_iter: u32, out: ViewMut<u32>) {
    let cx = -2.0f32 + 3.0f32 * (p.x as f32) / (width as f32);
    let cy = -1.25f32 + 2.5f32 * (p.y as f32) / (height as f32);
    let mut zx = 0.0f32;
    let mut zy = 0.0f32;
    let mut n = 0u32;
    while n < max_iter && zx * zx + zy * zy <= 4.0f32 {
        let t = zx * zx - zy * zy + cx;
        zy = 2.0f32 * zx * zy + cy;
        zx = t;
        n += 1u32;
    }
    out[p.y * width + p.x] = n;
}

/// Element-wise operations a generic kernel is specialized for (one compiled kernel each).
pub trait UnaryOp {
    /// The operation on one element.
    fn apply(x: Val<f32>) -> Val<f32>;
}
/// `x * x`
pub struct Square;
impl UnaryOp for Square {
    fn apply(x: Val<f32>) -> Val<f32> {
        x * x
    }
}
/// `smoothstep(0, 10, x)`
pub struct Smooth;
impl UnaryOp for Smooth {
    fn apply(x: Val<f32>) -> Val<f32> {
        smoothstep(0.0, 10.0, x)
    }
}

/// `y = Op(x)`: one compiled kernel per operation.
#[kiln::kernel]
pub fn map_op<Op: UnaryOp>(i: Index1D, x: View<f32>, y: ViewMut<f32>) {
    y[i] = Op::apply(x[i]);
}

/// `y = x * k` for any numeric type: one compiled kernel per type.
#[kiln::kernel]
pub fn scale<T: Numeric>(i: Index1D, x: View<T>, k: T, y: ViewMut<T>) {
    y[i] = x[i] * k;
}

/// Hermite interpolation between `e0` and `e1`, clamped to [0, 1].
#[kiln::device]
pub fn smoothstep(e0: f32, e1: f32, x: f32) -> f32 {
    let t = ((x - e0) / (e1 - e0)).clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}
