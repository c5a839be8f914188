//! Kernels written as Rust functions: saxpy, a byte histogram with per-group shared bins, and
//! Mandelbrot on a 2D grid, each checked against a plain Rust loop.
//!
//! Run with `cargo run --release --example kernels` (KILN_BACKEND=cpu|opencl|wgpu|cuda picks
//! the backend; otherwise the best device present).

use kiln::lang::*;

#[kiln::kernel]
fn saxpy(i: Index1D, a: f32, x: View<f32>, y: ViewMut<f32>) {
    y[i] = a * x[i] + y[i];
}

#[kiln::kernel]
fn histogram(data: View<u8>, bins: ViewMut<u32>) {
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
fn mandelbrot(p: Index2D, width: u32, height: u32, out: ViewMut<u32>) {
    let cx = -2.0f32 + 2.6f32 * (p.x as f32) / (width as f32);
    let cy = -1.2f32 + 2.4f32 * (p.y as f32) / (height as f32);
    let (mut zx, mut zy) = (0.0f32, 0.0f32);
    let mut n = 0u32;
    while n < 64 && zx * zx + zy * zy <= 4.0 {
        let t = zx * zx - zy * zy + cx;
        zy = 2.0 * zx * zy + cy;
        zx = t;
        n += 1;
    }
    out[p.y * width + p.x] = n;
}

fn main() -> Result<(), kiln::Error> {
    let ctx = kiln::Context::new()?;
    println!("device: {} ({})", ctx.device().name, ctx.device().backend);

    let x: Vec<f32> = (0..1_000_000).map(|i| (i % 1000) as f32).collect();
    let mut y = vec![1.0f32; x.len()];
    ctx.launch(saxpy, x.len(), (2.0f32, &x, &mut y))?;
    let ok = x.iter().zip(&y).all(|(a, b)| *b == 2.0 * a + 1.0);
    println!(
        "saxpy over {} elements: {}",
        x.len(),
        if ok { "ok" } else { "WRONG" }
    );

    let data: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut bins = vec![0u32; 256];
    ctx.launch_grouped(histogram, 64u32, 256u32, (&data, &mut bins))?;
    let mut want = vec![0u32; 256];
    data.iter().for_each(|&b| want[b as usize] += 1);
    println!(
        "histogram of {} bytes: {}",
        data.len(),
        if bins == want { "ok" } else { "WRONG" }
    );

    let (w, h) = (72usize, 24usize);
    let mut out = vec![0u32; w * h];
    ctx.launch(mandelbrot, (w, h), (w as u32, h as u32, &mut out))?;
    for row in out.chunks(w) {
        let line: String = row
            .iter()
            .map(|&n| {
                if n >= 64 {
                    '#'
                } else if n > 8 {
                    '+'
                } else {
                    '.'
                }
            })
            .collect();
        println!("{line}");
    }
    Ok(())
}
