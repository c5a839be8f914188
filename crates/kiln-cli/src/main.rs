//! `kiln`: what kiln sees on this machine and whether it works there.
//!
//! `kiln devices` lists every device of every backend (and why a backend has none),
//! `kiln doctor` runs a query and a kernel on each and checks the disk cache, `kiln emit`
//! prints the source kiln writes for a gallery kernel, `kiln bench` runs the benchmark with a
//! progress bar and writes JSON and an SVG chart, and `kiln cache` shows or clears the disk
//! cache. Errors are one line on stderr and exit status 1 (2 for a command line clap
//! rejects).

mod bench;
mod cache;
mod devices;
mod doctor;
mod emit;
mod queries;
mod svg;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "kiln's devices, health, generated code and cache"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lists every device on every backend, and for a backend without one, why.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Runs a query and a kernel on every device, compares them with Rust on the host, and
    /// checks that the disk cache is writable; says what to install where one fails.
    Doctor {
        /// Backends that must work (comma-separated: cpu, cuda, opencl, wgpu): the exit status
        /// is 1 when one of them fails or has no device.
        #[arg(long, value_delimiter = ',')]
        require: Vec<String>,
        /// Check only these backends (comma-separated), leaving the others' drivers alone.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// Prints the source kiln writes for a gallery kernel or an example query, or a query's
    /// plan.
    Emit(emit::Request),
    /// Runs the benchmark: kiln against hand-written baselines, each case on every device.
    Bench(bench::Request),
    /// Shows where the disk cache of compiled binaries is and what it holds.
    Cache {
        #[command(subcommand)]
        action: Option<CacheAction>,
    },
}

#[derive(Subcommand)]
enum CacheAction {
    /// Deletes every compiled binary in the cache.
    Clear,
}

/// A failure the command reports: its one line, and the exit status.
struct Failure {
    line: String,
    status: u8,
}

impl Failure {
    /// A failure with exit status 1.
    fn new(line: impl Into<String>) -> Failure {
        Failure {
            line: line.into(),
            status: 1,
        }
    }
}

/// Writes `text` and a newline to stdout. A closed stdout (`kiln devices | head -1`) ends the
/// process quietly, as other command-line tools do; another write error ends it with status 1.
pub(crate) fn say(text: impl std::fmt::Display) {
    use std::io::Write;
    if let Err(e) = writeln!(std::io::stdout().lock(), "{text}") {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("kiln: cannot write the output: {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Bench { .. }) {
        // Cold compiles are measured with every cache off; before any thread starts.
        kiln_bench::caches_off();
    }
    let done = match cli.command {
        Command::Devices { json } => devices::run(json),
        Command::Doctor { require, only } => doctor::run(&require, &only),
        Command::Emit(request) => emit::run(request),
        Command::Bench(request) => bench::run(request),
        Command::Cache { action } => cache::run(action.is_some()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("kiln: {}", f.line);
            ExitCode::from(f.status)
        }
    }
}
