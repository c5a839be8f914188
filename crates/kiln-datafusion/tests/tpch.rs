//! TPC-H through DataFusion with and without kiln, on every backend: the answers must be
//! the same, EXPLAIN must show which partial aggregates run in kiln, and those it declines
//! must say why and still give DataFusion's answer.

#[path = "../../../tests/it/common/mod.rs"]
mod common;

use common::{ctx, every_backend, has_i64};
use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionContext;
use kiln_datafusion::KilnRule;
use std::sync::{Arc, Mutex, OnceLock};
use tpchgen_arrow::RecordBatchIterator;

#[path = "support/parquet.rs"]
mod parquet_files;
use parquet_files::{register_parquet, write_parquet};

const Q1: &str = include_str!("../tpch/q1.sql");
const Q6: &str = include_str!("../tpch/q6.sql");

/// TPC-H's 22 queries, with the validation run's parameters (Q11's fraction scaled to SF 0.1;
/// Q15's view as a `WITH`).
const QUERIES: [&str; 22] = [
    Q1,
    include_str!("../tpch/q2.sql"),
    include_str!("../tpch/q3.sql"),
    include_str!("../tpch/q4.sql"),
    include_str!("../tpch/q5.sql"),
    Q6,
    include_str!("../tpch/q7.sql"),
    include_str!("../tpch/q8.sql"),
    include_str!("../tpch/q9.sql"),
    include_str!("../tpch/q10.sql"),
    include_str!("../tpch/q11.sql"),
    include_str!("../tpch/q12.sql"),
    include_str!("../tpch/q13.sql"),
    include_str!("../tpch/q14.sql"),
    include_str!("../tpch/q15.sql"),
    include_str!("../tpch/q16.sql"),
    include_str!("../tpch/q17.sql"),
    include_str!("../tpch/q18.sql"),
    include_str!("../tpch/q19.sql"),
    include_str!("../tpch/q20.sql"),
    include_str!("../tpch/q21.sql"),
    include_str!("../tpch/q22.sql"),
];

/// Other shapes kiln takes: IN lists, CASE, casts, integer arithmetic, MIN/MAX of dates and
/// decimals, a grouping by an integer, by a string and by a year or a prefix the host
/// computes, comparisons of strings (computed on the host), an empty result, thousands of
/// groups.
const MORE: [&str; 9] = [
    "select l_linenumber, count(*), sum(case when l_quantity > 30 then 1 else 0 end) as big, \
     min(l_shipdate), max(l_extendedprice), sum(l_partkey * 2 - l_suppkey) \
     from lineitem where l_linenumber in (1, 3, 5) or not l_tax <= 0.04 \
     group by l_linenumber order by l_linenumber",
    "select l_shipmode, avg(l_discount), min(l_quantity), count(l_orderkey) from lineitem \
     where cast(l_quantity as bigint) between 10 and 20 group by l_shipmode order by l_shipmode",
    "select sum(l_quantity), count(*) from lineitem where l_quantity > 1000",
    "select l_returnflag, sum(l_tax - l_discount * 2) from lineitem \
     where l_commitdate < l_receiptdate group by l_returnflag order by l_returnflag",
    // About 5,000 groups per batch: folded 1024 groups at a time.
    "select l_suppkey, l_shipmode, count(*), max(l_shipdate), sum(l_extendedprice) \
     from lineitem group by l_suppkey, l_shipmode order by l_suppkey, l_shipmode",
    // Keys DataFusion computes on the host (before the filter), in a grouping kiln folds.
    "select extract(year from l_shipdate) as y, date_part('month', l_receiptdate) as m, \
     l_linestatus, count(*), sum(l_quantity) from lineitem where l_discount < 0.03 \
     group by extract(year from l_shipdate), date_part('month', l_receiptdate), l_linestatus \
     order by y, m, l_linestatus",
    // String comparisons, LIKE and IN on strings, in the filter and in a CASE.
    "select l_shipmode, count(*), \
     sum(case when l_shipinstruct like 'DELIVER%' then l_quantity else 0 end) \
     from lineitem where l_shipmode in ('MAIL', 'SHIP', 'AIR') and l_returnflag <> 'N' \
     and l_comment > 'm' group by l_shipmode order by l_shipmode",
    "select substr(l_shipmode, 1, 2) as p, count(*), max(l_extendedprice) from lineitem \
     where substr(l_comment, 2, 3) < 'f' and l_linestatus = 'O' \
     group by substr(l_shipmode, 1, 2) order by p",
    // Long strings, nearly one group per row.
    "select l_comment, count(*), min(l_quantity) from lineitem where l_quantity < 3 \
     group by l_comment order by count(*) desc, l_comment limit 20",
];

/// A query kiln declines (a grouping by a computed key), and the reason EXPLAIN gives.
const DECLINED: (&str, &str) = (
    "select l_orderkey % 7 as k, sum(l_quantity) from lineitem group by l_orderkey % 7 order by k",
    "GROUP BY on the expression",
);

/// One table's schema and batches.
type Table = (SchemaRef, Vec<RecordBatch>);

/// The batches of one generator's table.
fn table<I: RecordBatchIterator>(batches: I) -> Table {
    (batches.schema().clone(), batches.collect())
}

/// TPC-H's eight tables at scale factor 0.1 (lineitem holds about 600,000 rows), generated
/// once, by name.
fn tables() -> &'static [(&'static str, Table)] {
    use tpchgen::generators as g;
    use tpchgen_arrow as a;
    static DATA: OnceLock<Vec<(&'static str, Table)>> = OnceLock::new();
    const SF: f64 = 0.1;
    DATA.get_or_init(|| {
        vec![
            (
                "lineitem",
                table(a::LineItemArrow::new(g::LineItemGenerator::new(SF, 1, 1))),
            ),
            (
                "orders",
                table(a::OrderArrow::new(g::OrderGenerator::new(SF, 1, 1))),
            ),
            (
                "customer",
                table(a::CustomerArrow::new(g::CustomerGenerator::new(SF, 1, 1))),
            ),
            (
                "part",
                table(a::PartArrow::new(g::PartGenerator::new(SF, 1, 1))),
            ),
            (
                "partsupp",
                table(a::PartSuppArrow::new(g::PartSuppGenerator::new(SF, 1, 1))),
            ),
            (
                "supplier",
                table(a::SupplierArrow::new(g::SupplierGenerator::new(SF, 1, 1))),
            ),
            (
                "nation",
                table(a::NationArrow::new(g::NationGenerator::new(SF, 1, 1))),
            ),
            (
                "region",
                table(a::RegionArrow::new(g::RegionGenerator::new(SF, 1, 1))),
            ),
        ]
    })
}

/// A session over `tables` (name, schema, partitions), with the kiln rule on `kiln` when
/// there is one.
fn session_over(
    kiln: Option<kiln::Context>,
    tables: impl IntoIterator<Item = (&'static str, SchemaRef, Vec<Vec<RecordBatch>>)>,
) -> SessionContext {
    let state = match kiln {
        Some(k) => kiln_datafusion::session_state(k),
        None => SessionStateBuilder::new().with_default_features().build(),
    };
    session_with(state, tables)
}

/// A session over `tables` whose kiln rule gathers `rows` rows per kiln query, on the
/// current backend.
fn gathering_session(
    rows: usize,
    tables: impl IntoIterator<Item = (&'static str, SchemaRef, Vec<Vec<RecordBatch>>)>,
) -> SessionContext {
    let rule = KilnRule::new(ctx()).rows_per_query(rows);
    session_with(kiln_datafusion::session_state_with(rule), tables)
}

/// A session of `state` over `tables` (name, schema, partitions).
fn session_with(
    state: datafusion::execution::SessionState,
    tables: impl IntoIterator<Item = (&'static str, SchemaRef, Vec<Vec<RecordBatch>>)>,
) -> SessionContext {
    let sql = SessionContext::new_with_state(state);
    for (name, schema, parts) in tables {
        let table = MemTable::try_new(schema, parts).expect("a table");
        sql.register_table(name, Arc::new(table))
            .expect("register a table");
    }
    sql
}

/// TPC-H's tables in two partitions, as a 2-core machine's scan gives.
fn halves() -> impl Iterator<Item = (&'static str, SchemaRef, Vec<Vec<RecordBatch>>)> {
    tables().iter().map(|(name, (schema, batches))| {
        let half = batches.len().div_ceil(2);
        let parts = vec![batches[..half].to_vec(), batches[half..].to_vec()];
        (*name, schema.clone(), parts)
    })
}

/// A session over TPC-H's tables, with the kiln rule on `kiln` when there is one.
fn session(kiln: Option<kiln::Context>) -> SessionContext {
    session_over(kiln, halves())
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

/// DataFusion's own answer to `query`, computed once.
fn datafusion_answer(query: &str) -> String {
    static ANSWERS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
    let mut answers = ANSWERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, a)) = answers.iter().find(|(q, _)| q == query) {
        return a.clone();
    }
    let a = run(&session(None), query).expect("DataFusion alone");
    answers.push((query.to_string(), a.clone()));
    a
}

/// Checks that `query` gives DataFusion's own answer with kiln on the current backend. On a
/// backend without 64-bit integers it may instead fail with kiln's error naming them (sums
/// of decimals need them; counts do not); `needs_i64` says it must. Returns whether it gave
/// the answer.
fn same_answer_or_64(query: &str, needs_i64: bool) -> bool {
    let got = run(&session(Some(ctx())), query);
    answer_or_64(&datafusion_answer(query), got, query, needs_i64)
}

/// Checks kiln's answer `got` to `query` against DataFusion's `want` as
/// [`same_answer_or_64`] does.
fn answer_or_64(want: &str, got: Result<String, String>, query: &str, needs_i64: bool) -> bool {
    match (has_i64(), got) {
        (false, Err(e)) => {
            assert!(e.contains("kiln") && e.contains("64"), "{e}");
            false
        }
        (i64, got) => {
            assert!(
                i64 || !needs_i64,
                "64-bit sums on a backend without 64-bit integers"
            );
            assert_eq!(got.as_deref(), Ok(want), "{query}");
            true
        }
    }
}

/// [`same_answer_or_64`] of a query that sums decimals.
fn same_answer(query: &str) {
    same_answer_or_64(query, true);
}

#[test]
fn q1_and_q6_run_in_kiln_and_equal_datafusion() {
    every_backend(|| {
        for q in [Q1, Q6] {
            let plan = explain(&session(Some(ctx())), q);
            assert!(plan.contains("KilnExec"), "{plan}");
            assert!(!plan.contains("KilnDeclinedExec"), "{plan}");
            same_answer(q);
            // Batches gathered into runs of at least 50,000 rows (as on GPUs, by default).
            let gathering = gathering_session(50_000, halves());
            let plan = explain(&gathering, q);
            assert!(plan.contains("50000 rows per query"), "{plan}");
            answer_or_64(&datafusion_answer(q), run(&gathering, q), q, true);
        }
    });
}

/// A session over lineitem read from the Parquet files in `dir`, with the kiln rule on
/// `kiln` when there is one.
fn parquet_session(kiln: Option<kiln::Context>, dir: &std::path::Path) -> SessionContext {
    let sql = session_over(kiln, []);
    runtime()
        .block_on(register_parquet(&sql, "lineitem", dir))
        .expect("register the Parquet files");
    sql
}

#[test]
fn q1_and_q6_from_parquet_run_in_kiln_and_equal_datafusion() {
    let (_, (schema, batches)) = tables()
        .iter()
        .find(|(name, _)| *name == "lineitem")
        .expect("lineitem");
    let dir = std::env::temp_dir().join(format!("kiln-tpch-parquet-{}", std::process::id()));
    write_parquet(&dir, schema, batches, 2).expect("write lineitem as Parquet");
    every_backend(|| {
        for q in [Q1, Q6] {
            let plan = explain(&parquet_session(Some(ctx()), &dir), q);
            assert!(plan.contains("KilnExec:"), "{plan}");
            assert!(plan.contains("parquet"), "{plan}");
            let want = run(&parquet_session(None, &dir), q).expect("DataFusion alone");
            answer_or_64(&want, run(&parquet_session(Some(ctx()), &dir), q), q, true);
        }
    });
    std::fs::remove_dir_all(&dir).expect("remove the Parquet files");
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

#[test]
fn every_tpch_query_equals_datafusion() {
    every_backend(|| {
        let (mut taken, mut declined, mut answered) = (Vec::new(), Vec::new(), 0);
        for (i, q) in QUERIES.iter().enumerate() {
            let plan = explain(&session(Some(ctx())), q);
            if plan.contains("KilnExec:") {
                taken.push(i + 1);
            }
            for why in plan.lines().filter(|l| l.contains("KilnDeclinedExec")) {
                declined.push(format!(
                    "Q{}: {}",
                    i + 1,
                    why.trim_start_matches(['|', ' '])
                ));
            }
            answered += same_answer_or_64(q, false) as usize;
        }
        println!("queries with a kiln operator: {taken:?}; answered {answered} of 22");
        // Every query has one, and kiln takes every partial aggregate (Q15's MAX of sums
        // that may be NULL included).
        let want: Vec<usize> = (1..=22).collect();
        assert_eq!(taken, want, "the TPC-H queries with a kiln operator");
        assert!(declined.is_empty(), "{declined:#?}");
    });
}

#[test]
fn aggregates_filters_and_arithmetic_over_null_columns_equal_datafusion() {
    use datafusion::arrow::array::{Decimal128Array, Int32Array, StringViewArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int32, false),
        Field::new("x", DataType::Int32, true),
        Field::new("s", DataType::Utf8View, true),
        Field::new("d", DataType::Decimal128(12, 2), true),
    ]));
    let n = 5000;
    let k: Int32Array = (0..n).map(|i| i % 7).collect();
    // Arrow stores 0 and "" under NULLs; both are also values here.
    let x: Int32Array = (0..n).map(|i| (i % 3 != 0).then_some(i - 2500)).collect();
    let s: StringViewArray = (0..n)
        .map(|i| (i % 5 != 1).then(|| "v".repeat(i as usize % 11 * 2)))
        .collect();
    let d = (0..n)
        .map(|i| (i % 4 != 2).then_some((i as i128 * 7919) % 200_000 - 100_000))
        .collect::<Decimal128Array>()
        .with_precision_and_scale(12, 2)
        .expect("a decimal column");
    let columns: Vec<ArrayRef> = vec![Arc::new(k), Arc::new(x), Arc::new(s), Arc::new(d)];
    let batch = RecordBatch::try_new(schema.clone(), columns).expect("a batch");
    // Two partitions, so that DataFusion plans a partial aggregate: one batch, and slices
    // of 377 rows (their bitmaps at offsets that are not multiples of 8).
    let parts = || {
        let slices = (1234..n as usize)
            .step_by(377)
            .map(|at| batch.slice(at, 377.min(n as usize - at)))
            .collect();
        vec![vec![batch.slice(0, 1234)], slices]
    };
    let t = |kiln| session_over(kiln, [("t", schema.clone(), parts())]);
    // Slices gathered in threes and a last one alone; the batch of 1234 rows alone.
    let gathering = || gathering_session(1000, [("t", schema.clone(), parts())]);
    let queries = [
        "select k, count(x), count(s), count(d), count(*) from t group by k order by k",
        "select count(x), count(*) from t where s is null or x is not null",
        "select k, sum(k) from t where x is null and k > 2 group by k order by k",
        "select count(s) from t where x is null and k = 99",
        // SUM, AVG, MIN and MAX skip NULLs, and are NULL where every value is.
        "select k, sum(x), avg(x), min(x), max(x), sum(d), avg(d), min(d), max(d) \
         from t group by k order by k",
        "select k, sum(x), min(d), max(x), avg(d) from t where x is null group by k order by k",
        "select sum(x), max(d), avg(x) from t where k = 99",
        // NULL propagates through arithmetic, comparisons and CAST.
        "select k, sum(x * 2 + k), min(x - k), sum(d * 3 - 1), max(cast(x as bigint) * 1000) \
         from t group by k order by k",
        // A filter keeps only the rows whose predicate is TRUE (NULL is not).
        "select count(*), sum(k) from t where x > 2500",
        "select count(*), sum(k) from t where not (x < 2500)",
        "select count(*), sum(k) from t where x > 4000 or k = 3",
        "select count(*), sum(k) from t where x > 100 and d < 500",
        "select count(*) from t where x in (3, 5, 7, 4001) or s is null",
        "select count(*) from t where x not in (4, 5, 8)",
        "select count(*) from t where d between -20.00 and 300.00",
        // A WHEN that is NULL is not taken; branches that are NULL give NULL.
        "select k, sum(case when x > 2000 then x else k end), \
         sum(case when k > 3 then d else 1.00 end), count(case when k = 2 then x else 0 end) \
         from t group by k order by k",
        "select sum(case when x is null then 1 else 0 end), count(null), sum(cast(null as int)) \
         from t",
        // Comparisons of strings that may be NULL: the host computes them, NULL where the
        // string is, and SQL's logic combines them.
        "select count(*), sum(x) from t where s = 'vv'",
        "select k, count(*), sum(d) from t where s like 'vvvv%' or x > 2000 group by k order by k",
        "select count(*) from t where s in ('', 'vvvvvvvvvvvvvvvvvvvv') and k <> 4",
        "select count(*), count(s) from t where not (s < 'vvv') or x is null",
        "select count(*) from t where substr(s, 1, 3) = 'vvv' and not (s >= 'vvvvvv')",
        // NULL is one group key (apart from the 0 and "" Arrow stores under it), also among
        // more than a window of 1024 groups and of keys the host computes.
        "select s, count(*), sum(x), min(d) from t group by s order by s",
        "select k, s, count(x), sum(d) from t where k < 5 group by k, s order by k, s",
        "select x, count(*), sum(k) from t group by x order by x",
        "select d, count(*), max(x) from t where k < 3 group by d order by d",
        "select substr(s, 1, 2), count(*) from t group by substr(s, 1, 2) order by 1",
    ];
    every_backend(|| {
        for q in queries {
            let plan = explain(&t(Some(ctx())), q);
            assert!(plan.contains("KilnExec:"), "{q}\n{plan}");
            assert!(!plan.contains("KilnDeclinedExec"), "{q}\n{plan}");
            let want = run(&t(None), q).expect("DataFusion alone");
            answer_or_64(&want, run(&t(Some(ctx())), q), q, false);
            answer_or_64(&want, run(&gathering(), q), q, false);
        }
    });
}

/// A session with one table `t` of a NOT NULL Decimal128(18, 0) column `d` holding `values`
/// (Arrow does not check them against the precision: kiln must).
fn decimal_session(kiln: Option<kiln::Context>, values: &[i128]) -> SessionContext {
    use datafusion::arrow::array::Decimal128Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![Field::new(
        "d",
        DataType::Decimal128(18, 0),
        false,
    )]));
    let d = Decimal128Array::from(values.to_vec())
        .with_precision_and_scale(18, 0)
        .expect("a Decimal128(18, 0) array");
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(d)]).expect("a batch");
    // Two partitions, so that DataFusion plans a partial aggregate.
    let parts = vec![
        vec![batch.slice(0, 1)],
        vec![batch.slice(1, batch.num_rows() - 1)],
    ];
    session_over(kiln, [("t", schema, parts)])
}

#[test]
fn decimals_past_i64_fail_and_those_within_sum_exactly() {
    let kiln = || Some(kiln::Context::with_backend(kiln::BackendKind::Cpu).expect("the CPU"));
    let query = "select sum(d), min(d), count(*) from t";
    let past = [1, i64::MAX as i128 + 1, 2];
    let plan = explain(&decimal_session(kiln(), &past), query);
    assert!(plan.contains("KilnExec:"), "{plan}");
    let e = run(&decimal_session(kiln(), &past), query).expect_err("a decimal past i64");
    assert!(e.contains("kiln") && e.contains("past i64"), "{e}");
    let most = 10i128.pow(18) - 1;
    // A batch of a few such values sums as one i64 (it cannot leave it); sixteen of them
    // reach 1.6e19, past i64, and must sum as halves.
    let within = [-most, 3, most - 7, -most / 2, most];
    let past_in_sum = [most; 16];
    for values in [&within[..], &past_in_sum] {
        assert_eq!(
            run(&decimal_session(kiln(), values), query),
            run(&decimal_session(None, values), query)
        );
    }
    let sum = run(&decimal_session(kiln(), &past_in_sum), query).expect("the sum");
    assert!(sum.contains("15999999999999999984"), "{sum}");
    // 8 * 9e17 stays within i64; a bound twice the largest value would not.
    let eight = "select sum(d + d + d + d + d + d + d + d) from t";
    let near = [
        9 * 10i128.pow(17),
        9 * 10i128.pow(17) - 1,
        -9 * 10i128.pow(17),
        5,
    ];
    assert_eq!(
        run(&decimal_session(kiln(), &near), eight),
        run(&decimal_session(None, &near), eight)
    );
    assert!(explain(&decimal_session(kiln(), &near), eight).contains("KilnExec:"));
}
