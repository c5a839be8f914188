//! TPC-H through DataFusion with and without kiln, on every backend: the answers must be
//! the same, EXPLAIN must show which partial aggregates run in kiln, and those it declines
//! must say why and still give DataFusion's answer.

#[path = "../../../tests/it/common/mod.rs"]
mod common;

use common::{ctx, every_backend, has_i64};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use kiln_datafusion::KilnRule;
use std::sync::{Arc, OnceLock};
use tpchgen_arrow::RecordBatchIterator;

const Q1: &str = include_str!("../tpch/q1.sql");
const Q6: &str = include_str!("../tpch/q6.sql");

/// Other shapes kiln takes: IN lists, CASE, casts, integer arithmetic, MIN/MAX of dates and
/// decimals, a grouping by an integer and by a string, an empty result.
const MORE: [&str; 4] = [
    "select l_linenumber, count(*), sum(case when l_quantity > 30 then 1 else 0 end) as big, \
     min(l_shipdate), max(l_extendedprice), sum(l_partkey * 2 - l_suppkey) \
     from lineitem where l_linenumber in (1, 3, 5) or not l_tax <= 0.04 \
     group by l_linenumber order by l_linenumber",
    "select l_shipmode, avg(l_discount), min(l_quantity), count(l_orderkey) from lineitem \
     where cast(l_quantity as bigint) between 10 and 20 group by l_shipmode order by l_shipmode",
    "select sum(l_quantity), count(*) from lineitem where l_quantity > 1000",
    "select l_returnflag, sum(l_tax - l_discount * 2) from lineitem \
     where l_commitdate < l_receiptdate group by l_returnflag order by l_returnflag",
];

/// A query kiln declines (a grouping by a computed key), and the reason EXPLAIN gives.
const DECLINED: (&str, &str) = (
    "select l_orderkey % 7 as k, sum(l_quantity) from lineitem group by l_orderkey % 7 order by k",
    "GROUP BY on the expression",
);

/// TPC-H's lineitem at scale factor 0.1 (about 600,000 rows), generated once.
fn lineitem() -> &'static (datafusion::arrow::datatypes::SchemaRef, Vec<RecordBatch>) {
    static DATA: OnceLock<(datafusion::arrow::datatypes::SchemaRef, Vec<RecordBatch>)> =
        OnceLock::new();
    DATA.get_or_init(|| {
        let generator = tpchgen::generators::LineItemGenerator::new(0.1, 1, 1);
        let batches = tpchgen_arrow::LineItemArrow::new(generator);
        let schema = batches.schema().clone();
        (schema, batches.collect())
    })
}

/// A session over lineitem, with the kiln rule on `kiln` when there is one.
fn session(kiln: Option<kiln::Context>) -> SessionContext {
    let mut builder = SessionStateBuilder::new().with_default_features();
    if let Some(k) = kiln {
        builder = builder.with_physical_optimizer_rule(Arc::new(KilnRule::new(k)));
    }
    let sql = SessionContext::new_with_state(builder.build());
    let (schema, batches) = lineitem();
    // Two partitions, as a 2-core machine's scan gives.
    let half = batches.len() / 2;
    let parts = vec![batches[..half].to_vec(), batches[half..].to_vec()];
    let table = MemTable::try_new(schema.clone(), parts).expect("lineitem table");
    sql.register_table("lineitem", Arc::new(table))
        .expect("register lineitem");
    sql
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime")
}

/// The printed result of `query` on `sql`, or its error.
fn run(sql: &SessionContext, query: &str) -> Result<String, String> {
    runtime().block_on(async {
        let df = sql.sql(query).await.map_err(|e| e.to_string())?;
        let batches = df.collect().await.map_err(|e| e.to_string())?;
        Ok(pretty_format_batches(&batches)
            .map_err(|e| e.to_string())?
            .to_string())
    })
}

/// The printed physical plan of `query` on `sql`.
fn explain(sql: &SessionContext, query: &str) -> String {
    run(sql, &format!("explain {query}")).expect("explain")
}

/// Checks that `query` gives DataFusion's own answer with kiln on the current backend, or,
/// on a backend without 64-bit integers, fails with kiln's error naming them.
fn same_answer(query: &str) {
    let want = run(&session(None), query).expect("DataFusion alone");
    let got = run(&session(Some(ctx())), query);
    match has_i64() {
        true => assert_eq!(got.as_deref(), Ok(want.as_str()), "{query}"),
        false => {
            let e = got.expect_err("64-bit sums on a backend without 64-bit integers");
            assert!(e.contains("kiln") && e.contains("64"), "{e}");
        }
    }
}

#[test]
fn q1_and_q6_run_in_kiln_and_equal_datafusion() {
    every_backend(|| {
        for q in [Q1, Q6] {
            let plan = explain(&session(Some(ctx())), q);
            assert!(plan.contains("KilnExec"), "{plan}");
            assert!(!plan.contains("KilnDeclinedExec"), "{plan}");
            same_answer(q);
        }
    });
}

#[test]
fn other_shapes_equal_datafusion() {
    every_backend(|| {
        for q in MORE {
            let plan = explain(&session(Some(ctx())), q);
            assert!(plan.contains("KilnExec"), "{plan}");
            same_answer(q);
        }
    });
}

#[test]
fn a_declined_aggregate_says_why_and_equals_datafusion() {
    let (query, why) = DECLINED;
    let kiln = kiln::Context::with_backend(kiln::BackendKind::Cpu).expect("the CPU backend");
    let plan = explain(&session(Some(kiln.clone())), query);
    assert!(plan.contains("KilnDeclinedExec: not in kiln"), "{plan}");
    assert!(plan.contains(why), "{plan}");
    assert!(!plan.contains("KilnExec:"), "{plan}");
    assert_eq!(run(&session(Some(kiln)), query), run(&session(None), query));
}
