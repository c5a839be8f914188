//! TPC-H Q1 and Q6 on a Ballista cluster that runs kiln, checked against DataFusion alone.
//!
//! ```text
//! cargo run --release -p kiln-ballista --example tpch_cluster -- df://HOST:50050 [DIR]
//! ```
//!
//! `DIR` holds lineitem as Parquet files that every executor can read at that path; without
//! it, the example writes TPC-H's lineitem at scale factor 0.1 as four files in a temporary
//! folder (for a cluster on this machine). It prints the kiln operators of each query's
//! distributed plan (from EXPLAIN), each answer, and says whether it equals
//! DataFusion's own, computed here without the cluster; it exits with status 1 when one
//! does not.

#[path = "../../kiln-datafusion/tests/support/parquet.rs"]
mod parquet_files;

use ballista::prelude::SessionContextExt;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;
use parquet_files::{register_parquet, write_parquet};
use std::error::Error;
use std::path::PathBuf;
use tpchgen_arrow::RecordBatchIterator;

const Q1: &str = include_str!("../../kiln-datafusion/tpch/q1.sql");
const Q6: &str = include_str!("../../kiln-datafusion/tpch/q6.sql");

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .ok_or("usage: tpch_cluster df://HOST:PORT [DIR]")?;
    let (dir, written) = match args.next() {
        Some(dir) => (PathBuf::from(dir), false),
        None => (write_lineitem()?, true),
    };
    let cluster = SessionContext::remote(&url).await?;
    let alone = SessionContext::new();
    for sql in [&cluster, &alone] {
        register_parquet(sql, "lineitem", &dir).await?;
    }
    let mut all_equal = true;
    for (name, query) in [("Q1", Q1), ("Q6", Q6)] {
        let plan = cluster
            .sql(&format!("explain {query}"))
            .await?
            .collect()
            .await?;
        let plan = pretty_format_batches(&plan)?.to_string();
        for line in plan.lines().filter(|l| l.contains("KilnExec")) {
            println!(
                "{name} stage operator: {}",
                line.trim_matches(|c| c == '|' || c == ' ')
            );
        }
        let got = pretty_format_batches(&cluster.sql(query).await?.collect().await?)?.to_string();
        let want = pretty_format_batches(&alone.sql(query).await?.collect().await?)?.to_string();
        println!("{name} on the cluster at {url}:\n{got}");
        let verdict = if got == want {
            "equals"
        } else {
            "DIFFERS FROM"
        };
        println!("{name}: the cluster's answer {verdict} DataFusion's own\n");
        all_equal &= got == want;
    }
    if written {
        std::fs::remove_dir_all(&dir)?;
    }
    if !all_equal {
        std::process::exit(1);
    }
    Ok(())
}

/// Writes lineitem at scale factor 0.1 as four Parquet files in a new temporary folder.
fn write_lineitem() -> Result<PathBuf, Box<dyn Error>> {
    let dir = std::env::temp_dir().join(format!("kiln-tpch-cluster-{}", std::process::id()));
    let generator = tpchgen::generators::LineItemGenerator::new(0.1, 1, 1);
    let batches = tpchgen_arrow::LineItemArrow::new(generator);
    let schema = batches.schema().clone();
    let batches: Vec<_> = batches.collect();
    write_parquet(&dir, &schema, &batches, 4)?;
    println!("lineitem (scale factor 0.1) written to {}", dir.display());
    Ok(dir)
}
