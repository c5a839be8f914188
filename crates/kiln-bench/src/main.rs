//! kiln's benchmark binary: each case runs kiln on every backend present and a baseline doing
//! the same work in the same process, and prints their times and the ratio (baseline time /
//! kiln time, so 1.0 means as fast as the baseline and higher is better).
//!
//! ```text
//! cargo run --release -p kiln-bench -- [--quick] [--log2 N] [--json PATH] [--backend LABEL]
//!     [--case TEXT]
//! ```
//!
//! `--backend` runs only the device with that label (`cpu`, `opencl`, `cuda`, `wgpu`, or
//! `wgpu:1` for the second wgpu adapter); the baselines run either way. `--case` runs only the
//! cases whose names hold `TEXT` (and their baselines), without the compile and call overheads.

#[allow(dead_code)]
#[path = "../../../examples/gallery/mod.rs"]
mod kernels;

mod cases;
mod data;
mod overheads;

use cases::{Baseline, Measure, Needs};
use data::Bench;
use kiln::prelude::*;
use std::collections::{HashMap, HashSet};

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

/// A baseline's identity: cases that name the same static share its measurement.
fn key(b: &'static Baseline) -> *const Baseline {
    b
}

/// Why a case that `needs` it cannot run on `ctx` (of `kind`, with inputs of `bytes` bytes in
/// f32), or `None` when it can.
fn missing(needs: Needs, kind: BackendKind, ctx: &Context, bytes: u64) -> Option<&'static str> {
    let features = &ctx.device().features;
    let wide_fits = 2 * bytes <= ctx.device().max_buffer_bytes;
    match needs {
        Needs::Any => None,
        Needs::F64 => {
            (!(features.f64 && wide_fits)).then_some("f64 (no f64, or buffers too large)")
        }
        Needs::I64 => {
            (!(features.int64 && wide_fits)).then_some("i64 (no i64, or buffers too large)")
        }
        Needs::Cpu => (kind != BackendKind::Cpu).then_some("CPU-only gallery"),
    }
}

/// The flags the binary knows; the ones in the second list take a value.
const SWITCHES: [&str; 1] = ["--quick"];
const VALUED: [&str; 4] = ["--log2", "--json", "--backend", "--case"];

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
                "kiln-bench: unknown argument {a:?}; usage: kiln-bench [--quick] [--log2 N] [--json PATH] [--backend LABEL] [--case TEXT]"
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
    let bench = Bench::new(log2, reps, quick);
    let n = bench.n;
    println!("n = 2^{log2} = {n}; best of up to {reps}");
    // `--case TEXT` keeps the cases whose names hold TEXT, and skips the compile and call
    // overheads.
    let selected = flag("--case");
    let cases: Vec<_> = cases::all()
        .into_iter()
        .filter(|c| {
            selected
                .as_ref()
                .is_none_or(|s| c.name.contains(s.as_str()))
        })
        .collect();
    if cases.is_empty() {
        eprintln!("kiln-bench: no case's name holds {selected:?}");
        std::process::exit(2);
    }
    // Host baselines first, once each, before any device is opened.
    let mut host = HashMap::new();
    for case in &cases {
        if let Measure::Host(measure) = case.baseline.measure {
            host.entry(key(case.baseline))
                .or_insert_with(|| measure(&bench));
        }
    }

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
        let mut on_device = HashMap::new();
        let mut skipped = HashSet::new();
        let mut bandwidth = Vec::new();
        for case in &cases {
            if let Some(why) = missing(case.needs, kind, &ctx, bytes) {
                if skipped.insert(case.needs) {
                    println!("skipping the {why} rows on {backend}");
                }
                continue;
            }
            let baseline_ms = match case.baseline.measure {
                Measure::Host(_) => host[&key(case.baseline)],
                Measure::Device(measure) => match on_device.get(&key(case.baseline)) {
                    Some(ms) => *ms,
                    None => {
                        let ms = measure(&bench, &ctx)?;
                        if let Some(per) = case.baseline.bytes_per_element {
                            bandwidth.push((case.baseline.label, per * n, ms));
                        }
                        *on_device.entry(key(case.baseline)).or_insert(ms)
                    }
                },
            };
            let kiln_ms = (case.kiln)(&bench, &ctx)?;
            if let Some(per) = case.bytes_per_element {
                bandwidth.push((case.name, per * n, kiln_ms));
            }
            rows.push(Row {
                case: case.name,
                backend: backend.clone(),
                n,
                kiln_ms,
                baseline: case.baseline.label,
                baseline_ms,
            });
        }
        let rates: Vec<String> = bandwidth
            .iter()
            .map(|(what, bytes, ms)| format!("{what} {:.1}", *bytes as f64 / ms / 1e6))
            .collect();
        println!("{backend}: GB/s moved: {}", rates.join("; "));
        if selected.is_some() {
            continue;
        }
        let o = overheads::measure(&bench, kind, ctx.device().index, &backend)?;
        overheads.push((backend, o));
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
        for (backend, o) in &overheads {
            let (compile_ms, per_call_us) = (o.compile_ms, o.per_call_us);
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
