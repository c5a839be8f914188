//! kiln's benchmark binary: each case runs kiln on every backend present and a baseline doing
//! the same work in the same process, and prints their times and the ratio (baseline time /
//! kiln time, so 1.0 means as fast as the baseline and higher is better).
//!
//! ```text
//! cargo run --release -p kiln-bench -- [--quick] [--log2 N] [--json PATH] [--backend LABEL]
//! ```
//!
//! `--backend` runs only the device with that label (`cpu`, `opencl`, `cuda`, `wgpu`, or
//! `wgpu:1` for the second wgpu adapter); the baselines run either way.

#[allow(dead_code)]
#[path = "../../../examples/gallery/mod.rs"]
mod kernels;

use kiln::lang::Slice2D;
use kiln::prelude::*;
use rayon::prelude::*;
use std::time::Instant;

struct Row {
    case: &'static str,
    backend: String,
    n: usize,
    kiln_ms: f64,
    baseline: &'static str,
    baseline_ms: f64,
}

impl Row {
    /// Baseline time over kiln's; 0 where kiln's time rounds to nothing (so the JSON stays
    /// valid, which has no infinity).
    fn ratio(&self) -> f64 {
        finite(self.baseline_ms / self.kiln_ms)
    }
}

/// `r`, or 0 when it is not finite (JSON has no infinity).
fn finite(r: f64) -> f64 {
    if r.is_finite() {
        r
    } else {
        0.0
    }
}

/// Best wall time in milliseconds of up to `reps` runs after one warm-up; stops repeating
/// once three seconds have been spent, so slow backends finish.
fn best<T>(reps: usize, mut f: impl FnMut() -> T) -> f64 {
    std::hint::black_box(f());
    let start = Instant::now();
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        std::hint::black_box(f());
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        if start.elapsed().as_secs_f64() > 3.0 {
            break;
        }
    }
    best
}

/// The flags the binary knows; the ones in the second list take a value.
const SWITCHES: [&str; 1] = ["--quick"];
const VALUED: [&str; 3] = ["--log2", "--json", "--backend"];

fn main() -> Result<(), Error> {
    // Cold compiles are measured with every cache off: kiln's disk cache and PoCL's own (the
    // warm rows run after a warm-up, so no cache changes them). Set before any thread starts.
    std::env::set_var("KILN_CACHE_DIR", "off");
    std::env::set_var("POCL_KERNEL_CACHE", "0");
    let args: Vec<String> = std::env::args().collect();
    let mut rest = args.iter().skip(1);
    while let Some(a) = rest.next() {
        if VALUED.contains(&a.as_str()) {
            if rest.next().is_none() {
                eprintln!("kiln-bench: {a} needs a value");
                std::process::exit(2);
            }
        } else if !SWITCHES.contains(&a.as_str()) {
            eprintln!(
                "kiln-bench: unknown argument {a:?}; usage: kiln-bench [--quick] [--log2 N] [--json PATH] [--backend LABEL]"
            );
            std::process::exit(2);
        }
    }
    let quick = args.iter().any(|a| a == "--quick");
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let log2: u32 = match flag("--log2").map(|v| v.parse::<u32>()) {
        None => {
            if quick {
                20
            } else {
                26
            }
        }
        Some(Ok(v)) if (1..=30).contains(&v) => v,
        Some(_) => {
            eprintln!("kiln-bench: --log2 takes a whole number from 1 to 30");
            std::process::exit(2);
        }
    };
    let json = flag("--json");
    let only = flag("--backend");
    let reps = if quick { 3 } else { 7 };
    let n = 1usize << log2;
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i.wrapping_mul(2_654_435_761)) % 1_000_000) as f32 * 1e-3)
        .collect();
    // The same range of values from a xorshift generator: which elements a filter keeps is
    // random, so code that branches on it mispredicts half the time (`xs`'s hashed order is
    // regular enough for a branch predictor to learn).
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let noisy: Vec<f32> = (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 1_000_000) as f32 * 1e-3
        })
        .collect();

    println!("n = 2^{log2} = {n}; best of up to {reps}");
    let rayon_map = best(reps, || {
        xs.par_iter().map(|x| x * 2.0 + 1.0).collect::<Vec<f32>>()
    });
    let rayon_fused = best(reps, || {
        xs.par_iter()
            .map(|x| x * 2.0)
            .filter(|x| *x > 1000.0)
            .map(|x| x + 100.0)
            .sum::<f32>()
    });
    let rayon_sum = best(reps, || xs.par_iter().sum::<f32>());
    // `f32::max` skips NaN, as kiln's `max()` does.
    let rayon_max = best(reps, || {
        xs.par_iter().copied().reduce(|| f32::NAN, f32::max)
    });
    // The same values in f64, centred on zero.
    let xd: Vec<f64> = xs.iter().map(|&x| x as f64 - 500.0).collect();
    let rayon_map_f64 = best(reps, || {
        xd.par_iter().map(|x| x * 2.0 + 1.0).collect::<Vec<f64>>()
    });
    let rayon_squares_f64 = best(reps, || xd.par_iter().map(|x| x * x).sum::<f64>());
    let rayon_max_f64 = best(reps, || {
        xd.par_iter().copied().reduce(|| f64::NAN, f64::max)
    });
    // The same values as i64, scaled past 32 bits and centred on zero.
    let xl: Vec<i64> = xs
        .iter()
        .map(|&x| (x as i64 - 500) * 1_000_000_007)
        .collect();
    let rayon_map_i64 = best(reps, || {
        xl.par_iter().map(|x| x * 3 + 1).collect::<Vec<i64>>()
    });
    let rayon_sum_i64 = best(reps, || xl.par_iter().sum::<i64>());
    let rayon_max_i64 = best(reps, || xl.par_iter().copied().max());
    let rayon_filter_of = |xs: &[f32]| {
        best(reps, || {
            xs.par_iter()
                .copied()
                .filter(|x| *x < 500.0)
                .collect::<Vec<f32>>()
        })
    };
    let rayon_filter = rayon_filter_of(&xs);
    let rayon_filter_noisy = rayon_filter_of(&noisy);
    // Two passes over chunks, as kiln's chunked plan does: the chunks' sums, their running
    // sum on one thread, then each chunk's running values from its carry.
    let rayon_scan = best(reps, || {
        let chunk = 1 << 16;
        let sums: Vec<f32> = xs.par_chunks(chunk).map(|c| c.iter().sum()).collect();
        let mut carry = 0f32;
        let carries: Vec<f32> = sums
            .iter()
            .map(|s| {
                let before = carry;
                carry += s;
                before
            })
            .collect();
        let mut out = vec![0f32; n];
        out.par_chunks_mut(chunk)
            .zip(xs.par_chunks(chunk))
            .zip(&carries)
            .for_each(|((o, x), c)| {
                let mut acc = *c;
                for (o, x) in o.iter_mut().zip(x) {
                    acc += x;
                    *o = acc;
                }
            });
        out
    });
    let levels: Vec<u8> = (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    // 16-bit samples spread over all 65536 values, and their histogram in rayon: one count
    // array per 2^20-element chunk, added up.
    let samples: Vec<u16> = (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 16) as u16)
        .collect();
    let wide_hist = |samples: &[u16]| {
        samples
            .par_chunks(1 << 20)
            .map(|c| {
                let mut h = vec![0u32; 1 << 16];
                c.iter().for_each(|b| h[*b as usize] += 1);
                h
            })
            .reduce(
                || vec![0u32; 1 << 16],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                    a
                },
            )
    };
    let want_wide = wide_hist(&samples);
    let rayon_wide_hist = best(reps, || wide_hist(&samples));
    let rayon_hist = best(reps, || {
        levels
            .par_chunks(1 << 16)
            .map(|c| {
                let mut h = vec![0u32; 256];
                c.iter().for_each(|b| h[*b as usize] += 1);
                h
            })
            .reduce(
                || vec![0u32; 256],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                    a
                },
            )
    });
    let rayon_group_sum = best(reps, || {
        levels
            .par_chunks(1 << 16)
            .zip(xs.par_chunks(1 << 16))
            .map(|(k, x)| {
                let mut sums = vec![0f32; 256];
                k.iter().zip(x).for_each(|(k, x)| sums[*k as usize] += x);
                sums
            })
            .reduce(
                || vec![0f32; 256],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                    a
                },
            )
    });
    let ids: Vec<u32> = xs.iter().map(|x| x.to_bits() % 65_521).collect();
    let rayon_distinct = best(reps, || {
        let mut v = ids.clone();
        v.par_sort_unstable();
        v.dedup();
        v
    });
    let rayon_group_count = best(reps, || {
        let mut v = ids.clone();
        v.par_sort_unstable();
        let mut runs: Vec<(u32, usize)> = Vec::new();
        for id in v {
            match runs.last_mut() {
                Some((last, count)) if *last == id => *count += 1,
                _ => runs.push((id, 1)),
            }
        }
        runs
    });
    let rayon_sort = best(reps, || {
        let mut v = xs.clone();
        v.par_sort_unstable_by(f32::total_cmp);
        v
    });
    // Distinct 32-bit keys in a scrambled order (multiplying by an odd constant permutes u32).
    let keys32: Vec<u32> = (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let mut sorted_keys32 = keys32.clone();
    sorted_keys32.par_sort_unstable();
    let mut dst = vec![0f32; n];
    let copy = best(reps, || {
        dst.par_chunks_mut(1 << 16)
            .zip(xs.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s))
    });
    let read = best(reps, || {
        xs.par_chunks(1 << 16)
            .map(|c| c.iter().fold(0u32, |a, x| a ^ x.to_bits()))
            .reduce(|| 0, |a, b| a ^ b)
    });

    let mut rows = Vec::new();
    let mut overheads = Vec::new();
    // The first device of each backend, and every further wgpu adapter (one per graphics
    // API: llvmpipe on Vulkan and on GL), named as KILN_BACKEND names them (`wgpu:1`).
    let more_adapters = (1..).map_while(|i| {
        Context::with_device(BackendKind::Wgpu, i)
            .ok()
            .map(|c| (BackendKind::Wgpu, format!("wgpu:{i}"), Ok(c)))
    });
    let devices: Vec<_> = [
        BackendKind::Cpu,
        BackendKind::OpenCl,
        BackendKind::Cuda,
        BackendKind::Wgpu,
    ]
    .into_iter()
    .map(|kind| (kind, kind.to_string(), Context::with_backend(kind)))
    .chain(more_adapters)
    .collect();
    if let Some(o) = &only {
        if !devices.iter().any(|(_, label, _)| label == o) {
            let labels: Vec<&str> = devices.iter().map(|(_, l, _)| l.as_str()).collect();
            eprintln!("kiln-bench: no device labelled {o:?}; the labels here: {labels:?}");
            std::process::exit(2);
        }
    }
    for (kind, backend, ctx) in devices {
        if only.as_ref().is_some_and(|o| *o != backend) {
            continue;
        }
        let ctx = match ctx {
            Ok(c) => c,
            Err(e) => {
                println!("skipping {backend}: {e}");
                continue;
            }
        };
        println!("device: {} ({backend})", ctx.device().name);
        let bytes = (n * std::mem::size_of::<f32>()) as u64;
        if bytes > ctx.device().max_buffer_bytes {
            println!(
                "skipping {kind} at n = {n}: one buffer of {bytes} bytes exceeds its limit of {} (try --log2 {})",
                ctx.device().max_buffer_bytes,
                (ctx.device().max_buffer_bytes / 4).max(1).ilog2()
            );
            continue;
        }
        let row = |case, kiln_ms, baseline, baseline_ms| Row {
            case,
            backend: backend.clone(),
            n,
            kiln_ms,
            baseline,
            baseline_ms,
        };
        let map = best(reps, || {
            ctx.from(&xs).map(|x| x * 2.0 + 1.0).to_vec().unwrap()
        });
        rows.push(row("map to_vec", map, "rayon", rayon_map));
        let fused = best(reps, || {
            ctx.from(&xs)
                .map(|x| x * 2.0)
                .filter(|x| x.gt(1000.0))
                .map(|x| x + 100.0)
                .sum()
                .unwrap()
        });
        rows.push(row("map-filter-map-sum", fused, "rayon", rayon_fused));
        let sum = best(reps, || ctx.from(&xs).sum().unwrap());
        rows.push(row("sum", sum, "rayon", rayon_sum));
        let max = best(reps, || ctx.from(&xs).max().unwrap());
        rows.push(row("max", max, "rayon", rayon_max));
        if ctx.device().features.f64 && 2 * bytes <= ctx.device().max_buffer_bytes {
            let map = best(reps, || {
                ctx.from(&xd).map(|x| x * 2.0 + 1.0).to_vec().unwrap()
            });
            rows.push(row("map to_vec (f64)", map, "rayon", rayon_map_f64));
            let squares = best(reps, || ctx.from(&xd).map(|x| x * x).sum().unwrap());
            rows.push(row(
                "sum of squares (f64)",
                squares,
                "rayon",
                rayon_squares_f64,
            ));
            let max = best(reps, || ctx.from(&xd).max().unwrap());
            rows.push(row("max (f64)", max, "rayon", rayon_max_f64));
        } else {
            println!("skipping the f64 rows on {backend}: no f64, or buffers too large");
        }
        if ctx.device().features.int64 && 2 * bytes <= ctx.device().max_buffer_bytes {
            let map = best(reps, || ctx.from(&xl).map(|x| x * 3 + 1).to_vec().unwrap());
            rows.push(row("map to_vec (i64)", map, "rayon", rayon_map_i64));
            let sum = best(reps, || ctx.from(&xl).sum().unwrap());
            rows.push(row("sum (i64)", sum, "rayon", rayon_sum_i64));
            let max = best(reps, || ctx.from(&xl).max().unwrap());
            rows.push(row("max (i64)", max, "rayon", rayon_max_i64));
        } else {
            println!("skipping the i64 rows on {backend}: no i64, or buffers too large");
        }
        let filter_of = |xs: &[f32]| {
            best(reps, || {
                ctx.from(xs).filter(|x| x.lt(500.0)).to_vec().unwrap()
            })
        };
        let filter = filter_of(&xs);
        rows.push(row("filter to_vec (50%)", filter, "rayon", rayon_filter));
        let filter_noisy = filter_of(&noisy);
        rows.push(row(
            "filter to_vec (50%, kept at random)",
            filter_noisy,
            "rayon",
            rayon_filter_noisy,
        ));
        let scan = best(reps, || {
            ctx.from(&xs).scan(0.0, |a, b| a + b).to_vec().unwrap()
        });
        rows.push(row("scan (running sum) to_vec", scan, "rayon", rayon_scan));
        let hist = best(reps, || ctx.from(&levels).histogram(256).unwrap());
        rows.push(row("histogram (256 bins of u8)", hist, "rayon", rayon_hist));
        assert!(
            ctx.from(&samples).histogram(1 << 16)? == want_wide,
            "histogram of 65536 bins on {backend}"
        );
        let wide = best(reps, || ctx.from(&samples).histogram(1 << 16).unwrap());
        rows.push(row(
            "histogram (65536 bins of u16)",
            wide,
            "rayon",
            rayon_wide_hist,
        ));
        let sort = best(reps, || ctx.from(&xs).sort().to_vec().unwrap());
        rows.push(row(
            "sort to_vec (radix, stable)",
            sort,
            "rayon par_sort_unstable",
            rayon_sort,
        ));
        let group_sum = best(reps, || {
            ctx.from(&levels)
                .zip(&xs)
                .group_by(|(k, _)| k)
                .sum(|(_, x)| x)
                .unwrap()
        });
        rows.push(row(
            "group_by sum (256 u8 keys, dense)",
            group_sum,
            "rayon dense per-key sums",
            rayon_group_sum,
        ));
        let group_count = best(reps, || ctx.from(&ids).group_by(|k| k).count().unwrap());
        rows.push(row(
            "group_by count (65521 u32 keys, sorted)",
            group_count,
            "rayon par_sort_unstable + run counts",
            rayon_group_count,
        ));
        let distinct = best(reps, || ctx.from(&ids).distinct().to_vec().unwrap());
        rows.push(row(
            "distinct to_vec (65521 u32 values)",
            distinct,
            "rayon par_sort_unstable + dedup",
            rayon_distinct,
        ));
        rows.push(row("map to_vec vs parallel memcpy", map, "memcpy", copy));
        let mut reused = vec![0f32; n];
        let map_into = best(reps, || {
            ctx.from(&xs)
                .map(|x| x * 2.0 + 1.0)
                .write_to(&mut reused)
                .unwrap()
        });
        rows.push(row(
            "map write_to vs parallel memcpy",
            map_into,
            "memcpy",
            copy,
        ));
        rows.push(row("sum vs parallel read", sum, "read", read));

        // Device-resident: the input is already in device memory and results stay there;
        // the baseline is the backend's own device-to-device copy of the same bytes.
        let bx = ctx.upload(&xs)?;
        let half = ctx.upload(&xs[..n / 2])?;
        let mut copy_dst = ctx.upload(&vec![0f32; n])?;
        let mut half_dst = ctx.upload(&vec![0f32; n / 2])?;
        let device_copy = best(reps, || {
            copy_dst.copy_from(&bx).unwrap();
            ctx.synchronize().unwrap()
        });
        let device_half = best(reps, || {
            half_dst.copy_from(&half).unwrap();
            ctx.synchronize().unwrap()
        });
        let buffer_map = best(reps, || {
            let out = ctx
                .from_buffer(&bx)
                .map(|x| x * 2.0 + 1.0)
                .to_buffer()
                .unwrap();
            ctx.synchronize().unwrap();
            out
        });
        let mut map_dst = ctx.upload(&vec![0f32; n])?;
        let buffer_map_into = best(reps, || {
            ctx.from_buffer(&bx)
                .map(|x| x * 2.0 + 1.0)
                .write_to_buffer(&mut map_dst)
                .unwrap();
            ctx.synchronize().unwrap()
        });
        let buffer_sum = best(reps, || ctx.from_buffer(&bx).sum().unwrap());
        let buffer_scan = best(reps, || {
            let out = ctx
                .from_buffer(&bx)
                .scan(0.0, |a, b| a + b)
                .to_buffer()
                .unwrap();
            ctx.synchronize().unwrap();
            out
        });
        let buffer_filter = best(reps, || {
            let out = ctx
                .from_buffer(&bx)
                .filter(|x| x.lt(500.0))
                .to_buffer()
                .unwrap();
            ctx.synchronize().unwrap();
            out
        });
        let buffer_fused = best(reps, || {
            ctx.from_buffer(&bx)
                .map(|x| x * 2.0)
                .filter(|x| x.gt(1000.0))
                .map(|x| x + 100.0)
                .sum()
                .unwrap()
        });
        let bkeys = ctx.upload(&keys32)?;
        assert!(
            ctx.from_buffer(&bkeys).sort().to_buffer()?.download()? == sorted_keys32,
            "sort of u32 keys on {backend}"
        );
        let buffer_sort = best(reps, || {
            let out = ctx.from_buffer(&bkeys).sort().to_buffer().unwrap();
            ctx.synchronize().unwrap();
            out
        });
        let blevels = ctx.upload(&levels)?;
        let buffer_hist = best(reps, || ctx.from_buffer(&blevels).histogram(256).unwrap());
        println!(
            "{backend}: device-resident ms: filter (50%) {buffer_filter:.3}, map-filter-map-sum {buffer_fused:.3}, sort u32 {buffer_sort:.3}, histogram of u8 (256 bins) {buffer_hist:.3}, scan {buffer_scan:.3}, device copy {device_copy:.3}"
        );
        let gbps = |bytes: usize, ms: f64| bytes as f64 / ms / 1e6;
        println!(
            "{backend}: device copy {:.1} GB/s (read + write); map Buffer→Buffer {:.1} GB/s (into an existing Buffer {:.1} GB/s); sum Buffer {:.1} GB/s (read); scan Buffer→Buffer {:.1} GB/s (read + write)",
            gbps(8 * n, device_copy),
            gbps(8 * n, buffer_map),
            gbps(8 * n, buffer_map_into),
            gbps(4 * n, buffer_sum),
            gbps(8 * n, buffer_scan)
        );
        rows.push(row(
            "map Buffer→Buffer vs device copy",
            buffer_map,
            "device copy",
            device_copy,
        ));
        rows.push(row(
            "map write_to_buffer vs device copy",
            buffer_map_into,
            "device copy",
            device_copy,
        ));
        rows.push(row(
            "scan Buffer→Buffer vs device copy",
            buffer_scan,
            "device copy",
            device_copy,
        ));
        rows.push(row(
            "filter Buffer→Buffer (50%) vs device copy",
            buffer_filter,
            "device copy",
            device_copy,
        ));
        rows.push(row(
            "map-filter-map-sum Buffer vs device copy of n/2",
            buffer_fused,
            "device copy of n/2",
            device_half,
        ));
        rows.push(row(
            "sort u32 Buffer→Buffer vs device copy",
            buffer_sort,
            "device copy",
            device_copy,
        ));
        rows.push(row(
            "sum Buffer vs device copy (same bytes)",
            buffer_sum,
            "device copy of n/2",
            device_half,
        ));

        // Gallery kernels: each optimized kernel against its naive form on the same device.
        let side = if quick { 1024usize } else { 4096 };
        let m: Vec<f32> = (0..side * side).map(|i| i as f32).collect();
        let mut t = vec![0f32; side * side];
        let naive = best(reps, || {
            let args = (Slice2D::new(&m[..], side), Slice2D::new(&mut t[..], side));
            ctx.launch(kernels::transpose_naive, (side, side), args)
                .unwrap()
        });
        let tiled = best(reps, || {
            let args = (Slice2D::new(&m[..], side), Slice2D::new(&mut t[..], side));
            let g = side.div_ceil(16);
            ctx.launch_grouped(kernels::transpose_tiled, (g, g), (16usize, 16usize), args)
                .unwrap()
        });
        rows.push(row(
            "transpose tiled (2D side)",
            tiled,
            "naive kernel",
            naive,
        ));
        let bytes: Vec<u8> = xs.iter().map(|x| x.to_bits() as u8).collect();
        let mut bins = vec![0u32; 256];
        let global = best(reps, || {
            ctx.launch(kernels::histogram_global, bytes.len(), (&bytes, &mut bins))
                .unwrap()
        });
        let groups = ctx.device().compute_units.max(1) * 4;
        let privatized = best(reps, || {
            ctx.launch_grouped(
                kernels::histogram_shared,
                groups,
                256u32,
                (&bytes, &mut bins),
            )
            .unwrap()
        });
        rows.push(row(
            "histogram privatized",
            privatized,
            "global atomics",
            global,
        ));
        if kind == BackendKind::Cpu {
            let mn = if quick { 128usize } else { 512 };
            let a: Vec<f32> = (0..mn * mn).map(|i| (i % 7) as f32).collect();
            let b: Vec<f32> = (0..mn * mn).map(|i| (i % 5) as f32).collect();
            let mut c = vec![0f32; mn * mn];
            let g = mn.div_ceil(16);
            let kiln_mm = best(reps, || {
                ctx.launch_grouped(
                    kernels::matmul_tiled,
                    (g, g),
                    (16usize, 16usize),
                    (&a, &b, &mut c, mn as u32),
                )
                .unwrap()
            });
            let mut c2 = vec![0f32; mn * mn];
            let rayon_mm = best(reps, || {
                c2.par_chunks_mut(mn).enumerate().for_each(|(r, out)| {
                    out.iter_mut().for_each(|v| *v = 0.0);
                    for k in 0..mn {
                        let av = a[r * mn + k];
                        for (o, bv) in out.iter_mut().zip(&b[k * mn..(k + 1) * mn]) {
                            *o += av * bv;
                        }
                    }
                })
            });
            rows.push(row(
                "tiled matmul (side 128/512)",
                kiln_mm,
                "rayon",
                rayon_mm,
            ));
            let bodies = if quick { 1024usize } else { 4096 };
            let coord = |k: usize| (0..bodies).map(move |i| ((i * k) % 101) as f32 * 0.1);
            let (px, py, pz): (Vec<f32>, Vec<f32>, Vec<f32>) =
                (coord(7).collect(), coord(13).collect(), coord(29).collect());
            let mass: Vec<f32> = (0..bodies).map(|i| 1.0 + (i % 3) as f32).collect();
            let (mut vx, mut vy, mut vz) =
                (vec![0f32; bodies], vec![0f32; bodies], vec![0f32; bodies]);
            let kiln_nbody = best(reps, || {
                let args = (&px, &py, &pz, &mass, &mut vx, &mut vy, &mut vz, 0.01f32);
                ctx.launch(kernels::nbody_step, bodies, args).unwrap()
            });
            let mut v = vec![[0f32; 3]; bodies];
            let rayon_nbody = best(reps, || {
                v.par_iter_mut().enumerate().for_each(|(i, v)| {
                    let mut a = [0f32; 3];
                    for j in 0..bodies {
                        let d = [px[j] - px[i], py[j] - py[i], pz[j] - pz[i]];
                        let inv = 1.0 / (d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01).sqrt();
                        let s = mass[j] * inv * inv * inv;
                        a.iter_mut().zip(d).for_each(|(a, d)| *a += d * s);
                    }
                    v.iter_mut().zip(a).for_each(|(v, a)| *v += a * 0.01);
                })
            });
            rows.push(row(
                "n-body step (1024/4096 bodies)",
                kiln_nbody,
                "rayon",
                rayon_nbody,
            ));
            let (w, h, iters) = (1024usize, 768usize, 256u32);
            let mut escape = vec![0u32; w * h];
            let kiln_mandel = best(reps, || {
                let args = (w as u32, h as u32, iters, &mut escape);
                ctx.launch(kernels::mandelbrot, (w, h), args).unwrap()
            });
            let mut escape2 = vec![0u32; w * h];
            let rayon_mandel = best(reps, || {
                escape2.par_chunks_mut(w).enumerate().for_each(|(y, row)| {
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
            });
            let mut smooth = vec![0f32; n];
            let kiln_smooth = best(reps, || {
                let args = (&xs, &mut smooth);
                ctx.launch(kernels::map_op::<kernels::Smooth>, n, args)
                    .unwrap()
            });
            let mut smooth2 = vec![0f32; n];
            let rayon_smooth = best(reps, || {
                smooth2.par_iter_mut().zip(&xs).for_each(|(y, x)| {
                    let t = ((x - 0.0) / (10.0 - 0.0)).clamp(0.0, 1.0);
                    *y = t * t * (3.0 - 2.0 * t);
                })
            });
            rows.push(row(
                "map calling a device function (smoothstep)",
                kiln_smooth,
                "rayon",
                rayon_smooth,
            ));
            rows.push(row(
                "mandelbrot (1024 x 768, 256 iterations)",
                kiln_mandel,
                "rayon",
                rayon_mandel,
            ));
        }

        let cold = Context::with_device(kind, ctx.device().index)?;
        let small: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let query = |c: &Context| {
            c.from(&small)
                .map(|x| x * 2.0)
                .filter(|x| x.gt(1000.0))
                .map(|x| x + 100.0)
                .sum()
                .unwrap()
        };
        let t = Instant::now();
        query(&cold);
        let first_ms = t.elapsed().as_secs_f64() * 1e3;
        let compile_ms = cold.stats().compile_nanos as f64 / 1e6;
        let calls = if quick { 200 } else { 2_000 };
        let t = Instant::now();
        for _ in 0..calls {
            std::hint::black_box(query(&cold));
        }
        let per_call_us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
        println!("{backend}: cold compile of the fused query ({} kernels): {compile_ms:.2} ms (first call {first_ms:.2} ms); cached call on 1000 elements: {per_call_us:.1} us", cold.stats().compilations);
        overheads.push((backend.clone(), compile_ms, per_call_us));

        // What one cached call of each terminal costs when the work itself is small: the
        // plan cache lookup, allocations, launches and copies.
        let keys: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 16).collect();
        // Two calls first: the first compiles, and with a new captured value the second
        // compiles the plan with that value as a parameter.
        let per_call = |f: &mut dyn FnMut()| {
            f();
            f();
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / calls as f64
        };
        let mut k = 0.0f32;
        let terminals: [(&str, &mut dyn FnMut()); 8] = [
            ("sum", &mut || {
                std::hint::black_box(cold.from(&small).sum().unwrap());
            }),
            ("map to_vec", &mut || {
                std::hint::black_box(cold.from(&small).map(|x| x * 2.0).to_vec().unwrap());
            }),
            ("filter to_vec", &mut || {
                let q = cold.from(&small).filter(|x| x.gt(500.0));
                std::hint::black_box(q.to_vec().unwrap());
            }),
            ("scan", &mut || {
                let q = cold.from(&small).scan(0.0, |a, b| a + b);
                std::hint::black_box(q.to_vec().unwrap());
            }),
            ("sort", &mut || {
                std::hint::black_box(cold.from(&small).sort().to_vec().unwrap());
            }),
            ("histogram", &mut || {
                std::hint::black_box(cold.from(&keys).histogram(16).unwrap());
            }),
            ("group_by sum", &mut || {
                let q = cold.from(&keys).zip(&small).group_by(|(k, _)| k);
                std::hint::black_box(q.sum(|(_, x)| x).unwrap());
            }),
            ("sum of x * k with a new k each call", &mut || {
                k += 1.0;
                let scale = k;
                let q = cold.from(&small).map(move |x| x * scale);
                std::hint::black_box(q.sum().unwrap());
            }),
        ];
        let costs: Vec<String> = terminals
            .into_iter()
            .map(|(name, f)| format!("{name} {:.1}", per_call(f)))
            .collect();
        println!(
            "{backend}: cached calls on 1000 elements, us: {}",
            costs.join(", ")
        );
    }

    println!("\n| case | backend | n | kiln ms | baseline | baseline ms | ratio (baseline/kiln) |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.3} | {} | {:.3} | {:.2} |",
            r.case,
            r.backend,
            r.n,
            r.kiln_ms,
            r.baseline,
            r.baseline_ms,
            r.ratio()
        );
    }

    if let Some(path) = json {
        let mut items: Vec<String> = rows
            .iter()
            .map(|r| format!("  {{\"case\": \"{}\", \"backend\": \"{}\", \"n\": {}, \"kiln_ms\": {:.4}, \"baseline\": \"{}\", \"baseline_ms\": {:.4}, \"ratio\": {:.4}}}", r.case, r.backend, r.n, r.kiln_ms, r.baseline, r.baseline_ms, r.ratio()))
            .collect();
        for (backend, compile_ms, per_call_us) in &overheads {
            items.push(format!("  {{\"case\": \"cold compile (fused query)\", \"backend\": \"{backend}\", \"n\": 1000, \"kiln_ms\": {compile_ms:.4}, \"baseline\": \"target 10 ms\", \"baseline_ms\": 10.0, \"ratio\": {:.4}}}", finite(10.0 / compile_ms)));
            items.push(format!("  {{\"case\": \"per-call overhead (cached, 1000 elements)\", \"backend\": \"{backend}\", \"n\": 1000, \"kiln_ms\": {:.6}, \"baseline\": \"target 0.05 ms\", \"baseline_ms\": 0.05, \"ratio\": {:.4}}}", per_call_us / 1e3, finite(50.0 / per_call_us)));
        }
        let out = format!("[\n{}\n]\n", items.join(",\n"));
        std::fs::write(&path, out).map_err(|e| Error::Unsupported {
            backend: BackendKind::Cpu,
            what: format!("writing {path}: {e}"),
        })?;
        println!("wrote {path}");
    }
    Ok(())
}
