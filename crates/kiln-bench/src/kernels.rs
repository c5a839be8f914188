//! Gallery kernels for the benchmark: transpose (naive vs tiled through shared memory), byte
//! histogram (global atomics vs per-group shared bins) and a tiled matrix multiply.

use kiln::lang::*;

const TILE: u32 = 16;

#[kiln::kernel]
pub fn transpose_naive(p: Index2D, a: View2D<f32>, t: View2DMut<f32>) {
    t[(p.x, p.y)] = a[(p.y, p.x)];
}

#[kiln::kernel]
pub fn transpose_tiled(a: View2D<f32>, t: View2DMut<f32>) {
    let tile = shared::<f32, { TILE * (TILE + 1) }>();
    let (lx, ly) = (local_id(Dim::X), local_id(Dim::Y));
    let (bx, by) = (group_id(Dim::X) * TILE, group_id(Dim::Y) * TILE);
    tile[ly * (TILE + 1) + lx] = a[(by + ly, bx + lx)];
    barrier();
    t[(bx + ly, by + lx)] = tile[lx * (TILE + 1) + ly];
}

#[kiln::kernel]
pub fn histogram_global(i: Index1D, data: View<u8>, bins: ViewMut<u32>) {
    atomic_add(&bins, data[i] as u32, 1u32);
}

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
