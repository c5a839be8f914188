//! kiln's benchmark engine, which `kiln bench` (crates/kiln-cli) runs: each case runs kiln on
//! every backend present and a baseline doing the same work in the same process, and
//! [`Report`] holds their times and the ratio (baseline time / kiln time, so 1.0 means as
//! fast as the baseline and higher is better).

#![deny(missing_docs)]
#[allow(dead_code)]
#[path = "../../../examples/gallery/mod.rs"]
mod kernels;

mod cases;
mod data;
mod overheads;
mod peers;

use cases::{Baseline, Measure, Needs};
use data::Bench;
use kiln::prelude::*;
pub use peers::Peer;
use std::collections::{HashMap, HashSet};

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Inputs of 2^`log2` elements.
    pub log2: u32,
    /// Fewer repetitions (best of 3 instead of 7) and smaller gallery inputs.
    pub quick: bool,
    /// Only the device with this label (`cpu`, `opencl`, `cuda`, `wgpu`, `wgpu:1`, ...); the
    /// baselines run either way.
    pub backend: Option<String>,
    /// Only the cases whose names hold one of these (all when empty), and then without the
    /// compile and call overheads.
    pub cases: Vec<String>,
    /// Also time numpy, Polars and DuckDB on the cases they have, on the same inputs
    /// (`peers.py` beside this crate, run with `python3`; each engine where it is installed).
    pub peers: bool,
}

/// What the engine tells its caller while it runs.
pub enum Event {
    /// How many steps the run takes (host baselines, then each case on each device and each
    /// device's overheads), said once before the first.
    Start {
        /// The number of steps.
        steps: usize,
    },
    /// A step is done (measured or skipped); `what` names it.
    Step {
        /// The case or baseline, and the device.
        what: String,
    },
    /// A line for the reader: a device skipped, and why; the data moved per second; the
    /// overheads.
    Note(String),
}

/// One case on one device.
#[derive(Clone, Debug)]
pub struct Row {
    /// The case.
    pub case: &'static str,
    /// The device's label (`cpu`, `wgpu:1`, ...).
    pub backend: String,
    /// Elements.
    pub n: usize,
    /// kiln's best time.
    pub kiln_ms: f64,
    /// What it is compared with.
    pub baseline: &'static str,
    /// The baseline's best time.
    pub baseline_ms: f64,
    /// The plain iterator chain beside a hand-tuned baseline, and its best time.
    pub naive: Option<(&'static str, f64)>,
    /// Bytes kiln's side moves, for cases that measure bandwidth.
    pub bytes: Option<usize>,
}

impl Row {
    /// Baseline time over kiln's; 0 where kiln's time rounds to nothing (so the JSON stays
    /// valid, which has no infinity).
    pub fn ratio(&self) -> f64 {
        finite(self.baseline_ms / self.kiln_ms)
    }

    /// The naive baseline's time over kiln's, where the row has one (0 as in
    /// [`Row::ratio`]).
    pub fn naive_ratio(&self) -> Option<f64> {
        self.naive.map(|(_, ms)| finite(ms / self.kiln_ms))
    }
}

/// What kiln costs beyond the work on one device.
#[derive(Clone, Debug)]
pub struct Overhead {
    /// The device's label.
    pub backend: String,
    /// A cold compile of the fused query, every cache off, in milliseconds.
    pub compile_ms: f64,
    /// One cached call of the fused query on 1000 elements, in microseconds.
    pub per_call_us: f64,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// Elements per input.
    pub n: usize,
    /// Each case on each device, in table order.
    pub rows: Vec<Row>,
    /// Each device's overheads (none when cases were selected).
    pub overheads: Vec<Overhead>,
    /// Each device's copy bandwidth in GB/s, where a bandwidth case ran there: bytes read and
    /// written by its own copy of one buffer of `n` f32 to another, the memory bandwidth
    /// those cases are measured against.
    pub copy_gbs: Vec<(String, f64)>,
    /// numpy's, Polars' and DuckDB's times on the cases they have ([`Options::peers`]).
    pub peers: Vec<Peer>,
}

/// What stops a run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// `Options::cases` matches no case.
    #[error("no case's name holds {0:?}")]
    NoCase(Vec<String>),
    /// `Options::backend` labels no device.
    #[error("no device labelled {label:?}; the labels here: {labels:?}")]
    NoDevice {
        /// The label asked for.
        label: String,
        /// The labels there are.
        labels: Vec<String>,
    },
    /// `Options::log2` is outside 1..=30.
    #[error("log2 takes a whole number from 1 to 30, not {0}")]
    Size(u32),
    /// kiln failed (a case's query or kernel, or opening a device for the overheads).
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
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

/// `b`'s best time: measured once on the host (`host`), or once per device, kept in
/// `on_device` (its bytes per element, where it has them, go to `rates`).
fn baseline_ms(
    b: &'static Baseline,
    bench: &Bench,
    ctx: &Context,
    host: &HashMap<*const Baseline, f64>,
    on_device: &mut HashMap<*const Baseline, f64>,
    rates: &mut Vec<(&'static str, usize, f64)>,
) -> Result<f64, Error> {
    match b.measure {
        Measure::Host(_) => Ok(host[&key(b)]),
        Measure::Device(measure) => match on_device.get(&key(b)) {
            Some(ms) => Ok(*ms),
            None => {
                let ms = measure(bench, ctx)?;
                if let Some(per) = b.bytes_per_element {
                    rates.push((b.label, per * bench.n, ms));
                }
                Ok(*on_device.entry(key(b)).or_insert(ms))
            }
        },
    }
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

/// Turns off kiln's disk cache and PoCL's, so that cold compiles are measured with every
/// cache off (the warm rows run after a warm-up, so no cache changes them). Call it before
/// any thread starts: it sets environment variables.
pub fn caches_off() {
    std::env::set_var("KILN_CACHE_DIR", "off");
    std::env::set_var("POCL_KERNEL_CACHE", "0");
}

/// Every case's name, in table order.
pub fn case_names() -> Vec<&'static str> {
    cases::all().iter().map(|c| c.name).collect()
}

/// The devices, labelled as `KILN_BACKEND` names them: the first of each backend, and every
/// further wgpu adapter (one per graphics API: llvmpipe on Vulkan and on GL) as `wgpu:1`, ...
fn devices() -> Vec<(BackendKind, String, Result<Context, Error>)> {
    let more_adapters = (1..).map_while(|i| {
        Context::with_device(BackendKind::Wgpu, i)
            .ok()
            .map(|c| (BackendKind::Wgpu, format!("wgpu:{i}"), Ok(c)))
    });
    [
        BackendKind::Cpu,
        BackendKind::OpenCl,
        BackendKind::Cuda,
        BackendKind::Wgpu,
    ]
    .into_iter()
    .map(|kind| (kind, kind.to_string(), Context::with_backend(kind)))
    .chain(more_adapters)
    .collect()
}

/// Runs the cases `options` selects on its devices, telling `on` of each step. Fails when
/// the options select nothing or a case fails.
pub fn run(options: &Options, on: &mut dyn FnMut(Event)) -> Result<Report, BenchError> {
    if !(1..=30).contains(&options.log2) {
        return Err(BenchError::Size(options.log2));
    }
    let selected = &options.cases;
    let cases: Vec<_> = cases::all()
        .into_iter()
        .filter(|c| selected.is_empty() || selected.iter().any(|s| c.name.contains(s.as_str())))
        .collect();
    if cases.is_empty() {
        return Err(BenchError::NoCase(selected.clone()));
    }
    let devices: Vec<_> = devices()
        .into_iter()
        .filter(|(_, label, _)| options.backend.as_ref().is_none_or(|o| o == label))
        .collect();
    if let (Some(label), true) = (&options.backend, devices.is_empty()) {
        return Err(BenchError::NoDevice {
            label: label.clone(),
            labels: self::devices().into_iter().map(|(_, l, _)| l).collect(),
        });
    }
    let reps = if options.quick { 3 } else { 7 };
    let bench = Bench::new(options.log2, reps, options.quick);
    let n = bench.n;
    let mut host_baselines: Vec<&'static Baseline> = Vec::new();
    for b in cases
        .iter()
        .flat_map(|c| std::iter::once(c.baseline).chain(c.naive))
    {
        if matches!(b.measure, Measure::Host(_)) && !host_baselines.iter().any(|h| key(h) == key(b))
        {
            host_baselines.push(b);
        }
    }
    let per_device = cases.len() + selected.is_empty() as usize;
    let peer_cases: Vec<&'static str> = cases
        .iter()
        .map(|c| c.name)
        .filter(|name| options.peers && peers::has(name))
        .collect();
    on(Event::Start {
        steps: host_baselines.len() + !peer_cases.is_empty() as usize + devices.len() * per_device,
    });
    on(Event::Note(format!(
        "n = 2^{} = {n}; best of up to {reps}",
        options.log2
    )));
    // Host baselines first, once each, before any device is opened.
    let mut host = HashMap::new();
    for b in host_baselines {
        if let Measure::Host(measure) = b.measure {
            host.insert(key(b), measure(&bench));
        }
        on(Event::Step {
            what: format!("{} on the host", b.label),
        });
    }
    let mut report = Report {
        n,
        rows: Vec::new(),
        overheads: Vec::new(),
        copy_gbs: Vec::new(),
        peers: Vec::new(),
    };
    if !peer_cases.is_empty() {
        report.peers = peers::measure(&bench, &peer_cases, &mut |line| on(Event::Note(line)));
        on(Event::Step {
            what: "numpy, Polars and DuckDB".into(),
        });
    }
    let skip_device = |on: &mut dyn FnMut(Event), label: &str, why: String| {
        on(Event::Note(why));
        for _ in 0..per_device {
            on(Event::Step {
                what: format!("skipped on {label}"),
            });
        }
    };
    for (kind, backend, ctx) in devices {
        let ctx = match ctx {
            Ok(c) => c,
            Err(e) => {
                skip_device(on, &backend, format!("skipping {backend}: {e}"));
                continue;
            }
        };
        on(Event::Note(format!(
            "device: {} ({backend})",
            ctx.device().name
        )));
        let bytes = (n * std::mem::size_of::<f32>()) as u64;
        if bytes > ctx.device().max_buffer_bytes {
            let why = format!(
                "skipping {kind} at n = {n}: one buffer of {bytes} bytes exceeds its limit of {} (try --log2 {})",
                ctx.device().max_buffer_bytes,
                (ctx.device().max_buffer_bytes / 4).max(1).ilog2()
            );
            skip_device(on, &backend, why);
            continue;
        }
        let mut on_device = HashMap::new();
        let mut skipped = HashSet::new();
        let mut rates = Vec::new();
        for case in &cases {
            let step = format!("{} on {backend}", case.name);
            if let Some(why) = missing(case.needs, kind, &ctx, bytes) {
                if skipped.insert(case.needs) {
                    on(Event::Note(format!("skipping the {why} rows on {backend}")));
                }
                on(Event::Step { what: step });
                continue;
            }
            let mut time = |b| baseline_ms(b, &bench, &ctx, &host, &mut on_device, &mut rates);
            let baseline_ms = time(case.baseline)?;
            let naive = match case.naive {
                None => None,
                Some(b) => Some((b.label, time(b)?)),
            };
            let kiln_ms = (case.kiln)(&bench, &ctx)?;
            let moved = case.bytes_per_element.map(|per| per * n);
            if let Some(moved) = moved {
                rates.push((case.name, moved, kiln_ms));
            }
            report.rows.push(Row {
                case: case.name,
                backend: backend.clone(),
                n,
                kiln_ms,
                baseline: case.baseline.label,
                baseline_ms,
                naive,
                bytes: moved,
            });
            on(Event::Step { what: step });
        }
        if cases.iter().any(|c| c.bytes_per_element.is_some()) {
            let copy = cases::copy_gbs(&bench, &ctx)?;
            report.copy_gbs.push((backend.clone(), copy));
        }
        let rates: Vec<String> = rates
            .iter()
            .map(|(what, bytes, ms)| format!("{what} {:.1}", *bytes as f64 / ms / 1e6))
            .collect();
        on(Event::Note(format!(
            "{backend}: GB/s moved: {}",
            rates.join("; ")
        )));
        if !selected.is_empty() {
            continue;
        }
        let o = overheads::measure(&bench, kind, ctx.device().index, &backend, &mut |line| {
            on(Event::Note(line))
        })?;
        report.overheads.push(Overhead {
            backend: backend.clone(),
            compile_ms: o.compile_ms,
            per_call_us: o.per_call_us,
        });
        on(Event::Step {
            what: format!("overheads on {backend}"),
        });
    }
    Ok(report)
}

impl Report {
    /// The rows as a Markdown table.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| case | backend | n | kiln ms | baseline | baseline ms | ratio (baseline/kiln) | naive ms | ratio (naive/kiln) |\n|---|---|---|---|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            let naive = match (r.naive, r.naive_ratio()) {
                (Some((_, ms)), Some(ratio)) => format!("{ms:.3} | {ratio:.2}"),
                _ => " | ".into(),
            };
            out += &format!(
                "| {} | {} | {} | {:.3} | {} | {:.3} | {:.2} | {naive} |\n",
                r.case,
                r.backend,
                r.n,
                r.kiln_ms,
                r.baseline,
                r.baseline_ms,
                r.ratio()
            );
        }
        let peers = self.peer_rows();
        if !peers.is_empty() {
            out += "\n| case | backend | n | kiln ms | engine | engine ms | ratio (engine/kiln) |\n|---|---|---|---|---|---|---|\n";
            for (r, p) in peers {
                out += &format!(
                    "| {} | {} | {} | {:.3} | {} | {:.3} | {:.2} |\n",
                    r.case,
                    r.backend,
                    r.n,
                    r.kiln_ms,
                    p.engine,
                    p.ms,
                    finite(p.ms / r.kiln_ms)
                );
            }
        }
        out
    }

    /// Each peer time beside each device's row of its case, in table order.
    fn peer_rows(&self) -> Vec<(&Row, &Peer)> {
        self.rows
            .iter()
            .flat_map(|r| {
                self.peers
                    .iter()
                    .filter(|p| p.case == r.case)
                    .map(move |p| (r, p))
            })
            .collect()
    }

    /// The rows, then each device's overheads as two rows against their targets (10 ms for
    /// a cold compile, 50 us for a cached call), as JSON objects of `case`, `backend`, `n`,
    /// `kiln_ms`, `baseline`, `baseline_ms` and `ratio`, and where a row has a naive baseline
    /// beside the tuned one, `naive`, `naive_ms` and `naive_ratio`; last, each peer engine's
    /// time against each device's row of its case, the engine as `baseline` and `"peer":
    /// true`.
    pub fn json_items(&self) -> Vec<String> {
        let mut items: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let naive = match (r.naive, r.naive_ratio()) {
                    (Some((label, ms)), Some(ratio)) => format!(", \"naive\": \"{label}\", \"naive_ms\": {ms:.6}, \"naive_ratio\": {ratio:.4}"),
                    _ => String::new(),
                };
                format!("  {{\"case\": \"{}\", \"backend\": \"{}\", \"n\": {}, \"kiln_ms\": {:.6}, \"baseline\": \"{}\", \"baseline_ms\": {:.6}, \"ratio\": {:.4}{naive}}}", r.case, r.backend, r.n, r.kiln_ms, r.baseline, r.baseline_ms, r.ratio())
            })
            .collect();
        for o in &self.overheads {
            let (backend, compile_ms, per_call_us) = (&o.backend, o.compile_ms, o.per_call_us);
            items.push(format!("  {{\"case\": \"cold compile (fused query)\", \"backend\": \"{backend}\", \"n\": 1000, \"kiln_ms\": {compile_ms:.4}, \"baseline\": \"target 10 ms\", \"baseline_ms\": 10.0, \"ratio\": {:.4}}}", finite(10.0 / compile_ms)));
            items.push(format!("  {{\"case\": \"per-call overhead (cached, 1000 elements)\", \"backend\": \"{backend}\", \"n\": 1000, \"kiln_ms\": {:.6}, \"baseline\": \"target 0.05 ms\", \"baseline_ms\": 0.05, \"ratio\": {:.4}}}", per_call_us / 1e3, finite(50.0 / per_call_us)));
        }
        for (r, p) in self.peer_rows() {
            items.push(format!("  {{\"case\": \"{}\", \"backend\": \"{}\", \"n\": {}, \"kiln_ms\": {:.6}, \"baseline\": \"{}\", \"baseline_ms\": {:.6}, \"ratio\": {:.4}, \"peer\": true}}", r.case, r.backend, r.n, r.kiln_ms, p.engine, p.ms, finite(p.ms / r.kiln_ms)));
        }
        items
    }
}

/// Reports' JSON items as one JSON array.
pub fn json(reports: &[Report]) -> String {
    let items: Vec<String> = reports.iter().flat_map(Report::json_items).collect();
    format!("[\n{}\n]\n", items.join(",\n"))
}
