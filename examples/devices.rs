//! Lists every device kiln finds and splits one query over all of them at once.
//!
//! Each device gets its own `Context` and an equal slice of the data; the slices run on
//! separate threads, and their partial answers are added up on the host. The total is checked
//! against a plain Rust loop. A device without f64 arithmetic (wgpu on GL) sums its slice in
//! f32, and the check allows for that. `cargo run --release --example devices` runs it; pass `gpu` to
//! use only the GPUs (it then fails when there is none).

use kiln::prelude::*;
fn main() -> Result<(), Error> {
    let gpus_only = std::env::args().nth(1).as_deref() == Some("gpu");
    let (devices, unusable): (Vec<DeviceInfo>, Vec<DeviceInfo>) = Context::devices()
        .into_iter()
        .filter(|d| !gpus_only || d.class == DeviceClass::Gpu)
        .partition(|d| d.unusable.is_none());
    for d in &unusable {
        println!(
            "  {}:{}  {}: does not open: {}",
            d.backend,
            d.index,
            d.name,
            d.unusable.as_deref().unwrap_or_default()
        );
    }
    println!("{} device(s):", devices.len());
    for d in &devices {
        println!(
            "  {}:{}  {} ({:?}), memory {}, {} compute units, f64 {}, 64-bit integers {}, \
             subgroups of {}",
            d.backend,
            d.index,
            d.name,
            d.class,
            match d.memory_bytes {
                0 => "not reported".to_string(),
                bytes => format!("{} MiB", bytes >> 20),
            },
            d.compute_units,
            d.features.f64,
            d.features.int64,
            d.subgroup_size
        );
    }
    if devices.is_empty() {
        eprintln!("no device to run on");
        std::process::exit(1);
    }

    let n: usize = 1 << 22;
    let xs: Vec<f64> = (0..n).map(|i| ((i * 37) % 1000) as f64 * 0.001).collect();
    let contexts = devices
        .iter()
        .map(|d| Context::with_device(d.backend, d.index))
        .collect::<Result<Vec<_>, _>>()?;
    let slice = n.div_ceil(contexts.len());
    let partials: Vec<Result<f64, Error>> = std::thread::scope(|s| {
        let runs: Vec<_> = contexts
            .iter()
            .zip(xs.chunks(slice))
            .map(|(ctx, part)| {
                s.spawn(move || {
                    if ctx.device().features.f64 {
                        ctx.from(part).map(|x| x * x + 1.0).sum()
                    } else {
                        let narrow: Vec<f32> = part.iter().map(|&x| x as f32).collect();
                        let sum = ctx.from(&narrow).map(|x| x * x + 1.0).sum()?;
                        Ok(sum as f64)
                    }
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a device thread panicked"))
            .collect()
    });
    let mut total = 0.0;
    for ((d, part), sum) in devices.iter().zip(xs.chunks(slice)).zip(partials) {
        let sum = sum?;
        println!(
            "  {}:{} summed {} elements: {sum:.3}",
            d.backend,
            d.index,
            part.len()
        );
        total += sum;
    }
    let want: f64 = xs.iter().map(|x| x * x + 1.0).sum();
    let all_f64 = devices.iter().all(|d| d.features.f64);
    let ok = (total - want).abs() <= if all_f64 { 1e-9 } else { 1e-5 } * want.abs();
    println!(
        "sum of x*x+1 over {n} elements on {} device(s): {total:.3} (plain loop: {want:.3}): {}",
        contexts.len(),
        if ok { "ok" } else { "WRONG" }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
