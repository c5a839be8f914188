//! TPC-H Q1 and Q6 at scale factor 0.1, generated in memory, through DataFusion with kiln's
//! rule on the best device present: each query's physical plan (the `KilnExec` nodes are
//! kiln's), its answer, and whether that answer equals DataFusion's own.
//!
//! ```text
//! cargo run --release -p kiln-datafusion --example tpch
//! ```

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use std::sync::Arc;
use std::time::Instant;
use tpchgen_arrow::RecordBatchIterator;

const Q1: &str = include_str!("../tpch/q1.sql");
const Q6: &str = include_str!("../tpch/q6.sql");

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kiln = kiln::Context::new()?;
    println!("device: {} ({})", kiln.device().name, kiln.device().backend);
    let generator = tpchgen::generators::LineItemGenerator::new(0.1, 1, 1);
    let batches = tpchgen_arrow::LineItemArrow::new(generator);
    let schema = batches.schema().clone();
    let batches: Vec<_> = batches.collect();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    println!("lineitem: {rows} rows (TPC-H scale factor 0.1)");
    let session = |with_kiln: bool| -> datafusion::error::Result<SessionContext> {
        let state = match with_kiln {
            true => kiln_datafusion::session_state(kiln.clone()),
            false => SessionStateBuilder::new().with_default_features().build(),
        };
        let sql = SessionContext::new_with_state(state);
        let table = MemTable::try_new(schema.clone(), vec![batches.clone()])?;
        sql.register_table("lineitem", Arc::new(table))?;
        Ok(sql)
    };
    let (with, without) = (session(true)?, session(false)?);
    for (name, query) in [("Q1", Q1), ("Q6", Q6)] {
        let df = with.sql(query).await?;
        let plan = df.clone().create_physical_plan().await?;
        println!("\n{name} physical plan:");
        print!(
            "{}",
            datafusion::physical_plan::displayable(plan.as_ref()).indent(true)
        );
        let start = Instant::now();
        let ours = pretty_format_batches(&df.collect().await?)?.to_string();
        let took = start.elapsed();
        let theirs =
            pretty_format_batches(&without.sql(query).await?.collect().await?)?.to_string();
        println!(
            "{name} answer ({:.1} ms with kiln):\n{ours}",
            took.as_secs_f64() * 1e3
        );
        println!("{name} equals DataFusion's own answer: {}", ours == theirs);
    }
    Ok(())
}
