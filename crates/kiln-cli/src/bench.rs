//! `kiln bench`: runs the benchmark engine (crates/kiln-bench) with a progress bar, prints its
//! table, and writes JSON and an SVG chart.

use crate::{say, svg, Failure};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_bench::{Event, Options, Report};
use std::path::PathBuf;

/// What `kiln bench` was asked for.
#[derive(clap::Args)]
pub(crate) struct Request {
    /// Only the cases whose names hold one of these words (`kiln bench --list` names them).
    cases: Vec<String>,
    /// Best of 3 instead of 7, at 2^20 elements unless --log2 says.
    #[arg(long)]
    quick: bool,
    /// Inputs of 2^N elements (26 by default).
    #[arg(long, value_name = "N")]
    log2: Option<u32>,
    /// Every size from 2^A to 2^B, both included; the SVG then charts GB/s against size.
    #[arg(long, value_name = "A..B")]
    sweep: Option<String>,
    /// Only the device labelled so (cpu, opencl, cuda, wgpu, wgpu:1, ...).
    #[arg(long)]
    backend: Option<String>,
    /// Write the rows as JSON here.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Draw the ratios (or, with --sweep, the throughput) as SVG here.
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
    /// List the cases instead.
    #[arg(long)]
    list: bool,
    /// Leave out numpy, Polars and DuckDB (by default timed on the cases they have, where
    /// python3 has them).
    #[arg(long)]
    no_peers: bool,
}

/// The sizes `a..b` names, as powers of two from `a` to `b`.
fn sweep(text: &str) -> Result<Vec<u32>, Failure> {
    let bad = || {
        Failure::new(format!(
            "--sweep takes two powers of two as `a..b` with 1 <= a <= b <= 30, not `{text}`"
        ))
    };
    let (a, b) = text.split_once("..").ok_or_else(bad)?;
    let (a, b): (u32, u32) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    match 1 <= a && a <= b && b <= 30 {
        true => Ok((a..=b).collect()),
        false => Err(bad()),
    }
}

/// Writes `text` to `path`.
fn write(path: &PathBuf, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure::new(format!("cannot write {}: {e}", path.display())))?;
    say(format!("wrote {}", path.display()));
    Ok(())
}

/// Runs the benchmark as `r` asks, with a progress bar on stderr (when it is a terminal),
/// the engine's notes and the table on stdout.
pub(crate) fn run(r: Request) -> Result<(), Failure> {
    if r.list {
        for name in kiln_bench::case_names() {
            say(name);
        }
        return Ok(());
    }
    let sizes = match (&r.sweep, r.log2) {
        (Some(_), Some(_)) => return Err(Failure::new("give --sweep or --log2, not both")),
        (Some(s), None) => sweep(s)?,
        (None, Some(l)) => vec![l],
        (None, None) => vec![if r.quick { 20 } else { 26 }],
    };
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps, ETA {eta}: {msg}")
            .expect("a valid progress template"),
    );
    let mut reports: Vec<Report> = Vec::new();
    for log2 in sizes {
        let options = Options {
            log2,
            quick: r.quick,
            backend: r.backend.clone(),
            cases: r.cases.clone(),
            peers: !r.no_peers,
        };
        let report = kiln_bench::run(&options, &mut |event| match event {
            Event::Start { steps } => bar.inc_length(steps as u64),
            Event::Step { what } => {
                bar.inc(1);
                bar.set_message(what);
            }
            Event::Note(line) => bar.suspend(|| say(line)),
        })
        .map_err(|e| {
            bar.finish_and_clear();
            Failure::new(e.to_string())
        })?;
        reports.push(report);
    }
    bar.finish_and_clear();
    for report in &reports {
        say(format!("\n{}", report.table().trim_end()));
    }
    if let Some(path) = &r.json {
        write(path, &kiln_bench::json(&reports))?;
    }
    if let Some(path) = &r.svg {
        let chart = match reports.len() {
            1 => svg::ratio_bars(&reports),
            _ => svg::throughput_lines(&reports),
        };
        write(path, &chart)?;
    }
    Ok(())
}
