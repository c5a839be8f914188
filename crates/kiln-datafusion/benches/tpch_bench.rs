//! TPC-H Q1 and Q6 over lineitem, from batches held in memory and from Parquet files (one
//! per partition, written by this run into the temporary folder and removed after): DataFusion
//! alone against DataFusion with kiln's rule on the best device present (`KILN_BACKEND` picks
//! another), in one process, and, when `python3` has `duckdb`, `polars` and `tpchgen-cli`,
//! DuckDB and Polars on the same data in memory (`benches/tpch_engines.py`) in the same run.
//!
//! ```text
//! cargo bench -p kiln-datafusion --bench tpch_bench -- [--sf 1] [--runs 5] [--no-python]
//! ```
//!
//! Each query runs once cold (kiln compiles its kernels then, unless its disk cache holds
//! them), then `--runs` times; the median of those is reported, with the ratio of
//! DataFusion alone to each engine (above 1: faster than DataFusion). The answers with and
//! without kiln must be equal, or the run fails.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion::prelude::SessionContext;
use std::error::Error;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;
use tpchgen_arrow::RecordBatchIterator;

#[path = "../tests/support/parquet.rs"]
mod parquet_files;
use parquet_files::{register_parquet, write_parquet};

const QUERIES: [(&str, &str); 2] = [
    ("Q1", include_str!("../tpch/q1.sql")),
    ("Q6", include_str!("../tpch/q6.sql")),
];

/// The columns of lineitem that Q1 and Q6 read: the only ones held, so that SF 10 (60
/// million rows) fits in memory. Every engine scans just these either way.
const COLUMNS: [&str; 7] = [
    "l_quantity",
    "l_extendedprice",
    "l_discount",
    "l_tax",
    "l_returnflag",
    "l_linestatus",
    "l_shipdate",
];

/// The command line: scale factor, timed runs, whether to run the Python engines.
struct Args {
    sf: f64,
    runs: usize,
    python: bool,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        sf: 1.0,
        runs: 5,
        python: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--sf" => a.sf = value("--sf")?.parse().map_err(|e| format!("--sf: {e}"))?,
            "--runs" => {
                a.runs = value("--runs")?
                    .parse()
                    .map_err(|e| format!("--runs: {e}"))?
            }
            "--no-python" => a.python = false,
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    Ok(a)
}

/// DataFusion's default session state, with kiln's rule when `kiln` is.
fn state(kiln: Option<&kiln::Context>) -> SessionState {
    match kiln {
        Some(k) => kiln_datafusion::session_state(k.clone()),
        None => SessionStateBuilder::new().with_default_features().build(),
    }
}

/// A session over lineitem split into `parts` partitions, with kiln's rule when `kiln` is.
fn session(
    schema: &SchemaRef,
    batches: &[RecordBatch],
    parts: usize,
    kiln: Option<&kiln::Context>,
) -> datafusion::error::Result<SessionContext> {
    let sql = SessionContext::new_with_state(state(kiln));
    let per = batches.len().div_ceil(parts).max(1);
    let partitions = batches.chunks(per).map(|c| c.to_vec()).collect();
    sql.register_table(
        "lineitem",
        Arc::new(MemTable::try_new(schema.clone(), partitions)?),
    )?;
    Ok(sql)
}

/// A session over lineitem read from the Parquet files in `dir` (from [`write_parquet`]), with
/// kiln's rule when `kiln` is.
async fn parquet_session(
    dir: &Path,
    kiln: Option<&kiln::Context>,
) -> datafusion::error::Result<SessionContext> {
    let sql = SessionContext::new_with_state(state(kiln));
    register_parquet(&sql, "lineitem", dir).await?;
    Ok(sql)
}

/// One engine's times for one query, in milliseconds.
struct Timing {
    cold: f64,
    median: f64,
}

/// Runs `query` on `sql` once cold and `runs` times more; returns the times and the answer.
async fn time(
    sql: &SessionContext,
    query: &str,
    runs: usize,
) -> datafusion::error::Result<(Timing, String)> {
    let once = || async {
        let start = Instant::now();
        let batches = sql.sql(query).await?.collect().await?;
        Ok::<_, datafusion::error::DataFusionError>((start.elapsed().as_secs_f64() * 1e3, batches))
    };
    let (cold, batches) = once().await?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        times.push(once().await?.0);
    }
    times.sort_by(f64::total_cmp);
    let answer = pretty_format_batches(&batches)?.to_string();
    Ok((
        Timing {
            cold,
            median: times[times.len() / 2],
        },
        answer,
    ))
}

/// DuckDB's and Polars' lines from `tpch_engines.py`, or why there are none.
fn python_engines(args: &Args) -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/tpch_engines.py");
    let out = Command::new("python3")
        .args([script, &args.sf.to_string(), &args.runs.to_string()])
        .output()
        .map_err(|e| format!("python3 did not start: {e}"))?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = args()?;
    let kiln = kiln::Context::new()?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let start = Instant::now();
    let generator = tpchgen::generators::LineItemGenerator::new(args.sf, 1, 1);
    let batches = tpchgen_arrow::LineItemArrow::new(generator);
    let columns = COLUMNS
        .iter()
        .map(|c| batches.schema().index_of(c))
        .collect::<Result<Vec<_>, _>>()?;
    let schema = Arc::new(batches.schema().project(&columns)?);
    let batches = batches
        .map(|b| b.project(&columns))
        .collect::<Result<Vec<RecordBatch>, _>>()?;
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    println!(
        "lineitem at SF {}: {rows} rows of {} columns in memory, {} partitions (generated in {:.1} s)",
        args.sf,
        COLUMNS.len(),
        cores,
        start.elapsed().as_secs_f64()
    );
    println!(
        "kiln device: {} ({}); {} timed runs after a cold one, medians in ms",
        kiln.device().name,
        kiln.device().backend,
        args.runs
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .build()?;
    let dir = std::env::temp_dir().join(format!("kiln-tpch-bench-sf{}", args.sf));
    write_parquet(&dir, &schema, &batches, cores)?;
    let sources = [
        (
            "memory",
            session(&schema, &batches, cores, None)?,
            session(&schema, &batches, cores, Some(&kiln))?,
        ),
        (
            "parquet",
            runtime.block_on(parquet_session(&dir, None))?,
            runtime.block_on(parquet_session(&dir, Some(&kiln)))?,
        ),
    ];
    println!(
        "{:<11} {:>22} {:>22} {:>10}",
        "", "DataFusion (cold/med)", "+kiln (cold/med)", "ratio"
    );
    for (name, query) in QUERIES {
        for (source, alone, with) in &sources {
            let (theirs, want) = runtime.block_on(time(alone, query, args.runs))?;
            let (ours, got) = runtime.block_on(time(with, query, args.runs))?;
            if got != want {
                return Err(format!(
                    "{name} from {source}: kiln's answer\n{got}\ndiffers from DataFusion's\n{want}"
                )
                .into());
            }
            println!(
                "{:<11} {:>10.1} {:>11.1} {:>10.1} {:>11.1} {:>9.2}x",
                format!("{name} {source}"),
                theirs.cold,
                theirs.median,
                ours.cold,
                ours.median,
                theirs.median / ours.median
            );
        }
    }
    std::fs::remove_dir_all(&dir)?;
    if args.python {
        match python_engines(&args) {
            Ok(lines) => print!("{lines}"),
            Err(why) => println!("DuckDB and Polars not run: {why}"),
        }
    }
    Ok(())
}
