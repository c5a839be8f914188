//! Kernels written as Rust functions (examples/gallery): saxpy, a byte histogram with
//! per-group shared bins, and Mandelbrot on a 2D grid, the first two checked against plain
//! Rust loops.
//!
//! Run with `cargo run --release --example kernels` (KILN_BACKEND=cpu|opencl|wgpu|cuda picks
//! the backend; otherwise the best device present).

#[allow(dead_code)]
mod gallery;
use gallery::{histogram_shared, mandelbrot, saxpy};

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
    ctx.launch_grouped(histogram_shared, 64u32, 256u32, (&data, &mut bins))?;
    let mut want = vec![0u32; 256];
    data.iter().for_each(|&b| want[b as usize] += 1);
    println!(
        "histogram of {} bytes: {}",
        data.len(),
        if bins == want { "ok" } else { "WRONG" }
    );

    let (w, h) = (72usize, 24usize);
    let mut out = vec![0u32; w * h];
    ctx.launch(mandelbrot, (w, h), (w as u32, h as u32, 64u32, &mut out))?;
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
