//! Kernels written as Rust functions (examples/gallery): saxpy, a byte histogram with
//! per-group shared bins, a closure kernel stepping particles (a `#[derive(kiln::Value)]`
//! struct) and Mandelbrot on a 2D grid, the first three checked against plain Rust loops.
//!
//! Run with `cargo run --release --example kernels` (KILN_BACKEND=cpu|opencl|wgpu|cuda picks
//! the backend; otherwise the best device present).

#[allow(dead_code)]
mod gallery;
use gallery::{histogram_shared, mandelbrot, saxpy};
use kiln::lang::*;

/// A particle on a line, as kernels and the host both see it.
#[derive(Clone, Copy, PartialEq, Debug, kiln::Value)]
#[repr(C)]
struct Particle {
    pos: f32,
    vel: f32,
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
    let mut wrong = !ok;

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
    wrong |= bins != want;

    // A closure kernel: `dt` and `floor` are captured and passed as parameters.
    let (dt, floor) = (0.25f32, -4.0f32);
    let mut ps: Vec<Particle> = (0..10_000)
        .map(|i| Particle {
            pos: (i % 100) as f32 * 0.1,
            vel: (i % 7) as f32 - 3.0,
        })
        .collect();
    let start = ps.clone();
    let step = kiln::lambda!(move |i: Index1D, ps: ViewMut<Particle>| {
        let mut p = ps[i];
        p.pos += p.vel * dt;
        if p.pos < floor {
            p = Particle {
                pos: floor,
                vel: -p.vel,
            };
        }
        ps[i] = p;
    });
    ctx.launch(step, ps.len(), (&mut ps,))?;
    let ok = ps.iter().zip(&start).all(|(p, s)| {
        let pos = s.pos + s.vel * dt;
        let want = if pos < floor {
            Particle {
                pos: floor,
                vel: -s.vel,
            }
        } else {
            Particle { pos, vel: s.vel }
        };
        *p == want
    });
    println!(
        "particle step over {} particles: {}",
        ps.len(),
        if ok { "ok" } else { "WRONG" }
    );
    wrong |= !ok;

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
    if wrong {
        eprintln!("a kernel gave a wrong answer");
        std::process::exit(1);
    }
    Ok(())
}
