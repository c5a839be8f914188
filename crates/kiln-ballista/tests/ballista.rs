//! kiln's operators on Ballista, on every backend present. A plan with `KilnExec`s goes
//! through `kiln_ballista::physical_codec` and back and runs to DataFusion's answers; bytes
//! that are not a kiln operator's fail to decode with an error. A Ballista cluster on the
//! loopback address (a scheduler and two executors, started as the `kiln-ballista` binary
//! starts them) runs TPC-H Q1 and Q6 over partitioned Parquet with kiln: the executors must
//! decode and run `KilnExec` operators, and the answers must equal DataFusion's alone.

#[path = "../../../tests/it/common/mod.rs"]
mod common;

#[path = "../../kiln-datafusion/tests/support/parquet.rs"]
mod parquet_files;

use ballista::prelude::SessionContextExt;
use ballista_executor::executor_process::start_executor_process;
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::scheduler_process::start_server;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::error::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::{collect, displayable, ExecutionPlan};
use datafusion::prelude::SessionContext;
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};
use datafusion_proto::physical_plan::{
    DefaultPhysicalProtoConverter, PhysicalExtensionCodec, PhysicalProtoConverterExtension,
};
use kiln_ballista::KilnCodec;
use kiln_datafusion::{KilnExec, KilnRule};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const Q1: &str = include_str!("../../kiln-datafusion/tpch/q1.sql");
const Q6: &str = include_str!("../../kiln-datafusion/tpch/q6.sql");

/// An executor's codec that counts the [`KilnExec`] operators it decodes.
#[derive(Debug)]
struct Counted {
    inner: Arc<dyn PhysicalExtensionCodec>,
    kiln_execs: Arc<AtomicUsize>,
}

impl PhysicalExtensionCodec for Counted {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        task: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let plan = self.inner.try_decode(buf, inputs, task, converter)?;
        if plan.downcast_ref::<KilnExec>().is_some() {
            self.kiln_execs.fetch_add(1, Ordering::SeqCst);
        }
        Ok(plan)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.inner.try_encode(node, buf, converter)
    }
}

/// A loopback address with a port free now.
fn free_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// The lineitem table of TPC-H at scale factor 0.1, as four Parquet files in `dir`.
fn write_lineitem(dir: &Path) {
    use tpchgen::generators::LineItemGenerator;
    use tpchgen_arrow::{LineItemArrow, RecordBatchIterator};
    let batches = LineItemArrow::new(LineItemGenerator::new(0.1, 1, 1));
    let schema = batches.schema().clone();
    let batches: Vec<_> = batches.collect();
    parquet_files::write_parquet(dir, &schema, &batches, 4).expect("write lineitem as Parquet");
}

/// The printed answer to `query` on `sql`, over lineitem in `dir`, or the error.
async fn answer(sql: &SessionContext, dir: &Path, query: &str) -> Result<String, String> {
    if !sql.table_exist("lineitem").map_err(|e| e.to_string())? {
        parquet_files::register_parquet(sql, "lineitem", dir)
            .await
            .map_err(|e| e.to_string())?;
    }
    let df = sql.sql(query).await.map_err(|e| e.to_string())?;
    let batches = df.collect().await.map_err(|e| e.to_string())?;
    Ok(pretty_format_batches(&batches)
        .map_err(|e| e.to_string())?
        .to_string())
}

/// Checks kiln's answer `got` on `kiln`'s device against DataFusion's `want`: Q1 and Q6 sum
/// decimals, so on a device without 64-bit integers (wgpu on GL) it must be kiln's error
/// naming them.
fn check(kiln: &kiln::Context, want: &str, got: Result<String, String>) {
    let device = format!("{} ({})", kiln.device().backend, kiln.device().name);
    match (kiln.device().features.int64, got) {
        (true, got) => assert_eq!(got.as_deref(), Ok(want), "{device}"),
        (false, Err(e)) => assert!(e.contains("kiln") && e.contains("64-bit"), "{device}: {e}"),
        (false, Ok(_)) => panic!("{device}: decimal sums without 64-bit integers"),
    }
}

/// Starts a scheduler and two executors running kiln on `kiln`'s device; returns the
/// scheduler's address and each executor's count of decoded [`KilnExec`]s.
async fn start_cluster(kiln: &kiln::Context) -> (SocketAddr, [Arc<AtomicUsize>; 2]) {
    let scheduler = free_address();
    let config = kiln_ballista::scheduler_config(kiln.clone(), scheduler);
    let cluster = BallistaCluster::new_from_config(&config)
        .await
        .expect("a scheduler's cluster state");
    tokio::spawn(start_server(cluster, scheduler, Arc::new(config)));
    let counts = [(); 2].map(|_| Arc::new(AtomicUsize::new(0)));
    for count in &counts {
        let (flight, grpc) = (free_address(), free_address());
        let work = folder("work").join(flight.port().to_string());
        std::fs::create_dir_all(&work).expect("an executor's work folder");
        let mut config =
            kiln_ballista::executor_config(kiln.clone(), flight, "127.0.0.1", scheduler.port());
        config.grpc_port = grpc.port();
        config.vcores = 1;
        config.work_dir = Some(work.to_str().expect("a UTF-8 folder").to_string());
        config.override_physical_codec = Some(Arc::new(Counted {
            inner: kiln_ballista::physical_codec(kiln.clone()),
            kiln_execs: count.clone(),
        }));
        tokio::spawn(start_executor_process(Arc::new(config)));
    }
    (scheduler, counts)
}

/// A temporary folder of this test's own.
fn folder(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kiln-ballista-{name}-{}", std::process::id()))
}

#[test]
fn kiln_operators_travel_through_the_codec_and_run_to_datafusion_answers() {
    let dir = folder("codec");
    write_lineitem(&dir);
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let alone = SessionContext::new();
    for kiln in common::contexts() {
        let device = format!("{} ({})", kiln.device().backend, kiln.device().name);
        // The device's default rows per query, and a setting that must travel with the plan.
        let rules = [
            (KilnRule::new(kiln.clone()), None),
            (
                KilnRule::new(kiln.clone()).rows_per_query(50_000),
                Some(50_000),
            ),
        ];
        for (rule, rows) in rules {
            runtime.block_on(async {
                let planner =
                    SessionContext::new_with_state(kiln_datafusion::session_state_with(rule));
                for sql in [&planner, &alone] {
                    if !sql.table_exist("lineitem").expect("a catalog") {
                        parquet_files::register_parquet(sql, "lineitem", &dir)
                            .await
                            .expect("register the Parquet files");
                    }
                }
                let codec = kiln_ballista::physical_codec(kiln.clone());
                for query in [Q1, Q6] {
                    let plan = planner
                        .sql(query)
                        .await
                        .expect("plan the query")
                        .create_physical_plan()
                        .await
                        .expect("a physical plan");
                    let bytes = physical_plan_to_bytes_with_extension_codec(plan, codec.as_ref())
                        .unwrap_or_else(|e| panic!("{device}: encode: {e}"));
                    let task = alone.task_ctx();
                    let decoded = physical_plan_from_bytes_with_extension_codec(
                        &bytes,
                        &task,
                        codec.as_ref(),
                    )
                    .unwrap_or_else(|e| panic!("{device}: decode: {e}"));
                    let shown = displayable(decoded.as_ref()).indent(true).to_string();
                    assert!(shown.contains("KilnExec: device="), "{device}: {shown}");
                    if let Some(rows) = rows {
                        let line = format!("{rows} rows per query");
                        assert!(shown.contains(&line), "{device}: {line} not in {shown}");
                    }
                    let got = collect(decoded, task).await.map_err(|e| e.to_string());
                    let got = got.map(|b| pretty_format_batches(&b).expect("print").to_string());
                    let want = answer(&alone, &dir, query).await.expect("DataFusion alone");
                    check(&kiln, &want, got);
                }
            });
        }
    }
    std::fs::remove_dir_all(&dir).expect("remove the Parquet files");
}

#[test]
fn bytes_that_are_not_a_kiln_operator_fail_to_decode() {
    let codec = KilnCodec::new(common::contexts().remove(0));
    let task = SessionContext::new().task_ctx();
    let input: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::new(Schema::empty())));
    let converter = DefaultPhysicalProtoConverter {};
    for (bytes, says) in [
        (&[][..], "not a message of kiln's codec"),
        (&[7, 1, 2][..], "not a message of kiln's codec"),
        (&[0, 0xff, 0xff, 0xff][..], "cut short"),
        (
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff][..],
            "protobuf",
        ),
        (&[1, 0xff][..], "reason"),
    ] {
        let e = codec
            .try_decode(bytes, std::slice::from_ref(&input), &task, &converter)
            .expect_err("a decoding error");
        assert!(e.to_string().contains(says), "{bytes:?}: {e}");
    }
    let e = codec
        .try_decode(&[1], &[], &task, &converter)
        .expect_err("no input");
    assert!(e.to_string().contains("one input"), "{e}");
    let e = codec
        .try_encode(input, &mut Vec::new(), &converter)
        .expect_err("not kiln's");
    assert!(e.to_string().contains("EmptyExec"), "{e}");
}

#[test]
fn q1_and_q6_on_a_ballista_cluster_equal_datafusion() {
    let dir = folder("cluster");
    write_lineitem(&dir);
    let alone = SessionContext::new();
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let want: Vec<String> = [Q1, Q6]
        .iter()
        .map(|q| {
            runtime
                .block_on(answer(&alone, &dir, q))
                .expect("DataFusion alone")
        })
        .collect();
    for kiln in common::contexts() {
        let device = format!("{} ({})", kiln.device().backend, kiln.device().name);
        // The scheduler, both executors and the client share this runtime, and kiln's
        // kernels (and their first compiles) run on its workers: with one worker per core of
        // a 2-core machine, both can be busy long enough for the scheduler's task launches to
        // fail and the executors to be dropped. More workers than cores keep it answering.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(8)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let (scheduler, counts) = start_cluster(&kiln).await;
            let url = format!("df://{scheduler}");
            let client = SessionContext::remote(&url)
                .await
                .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
            for (query, want) in [Q1, Q6].iter().zip(&want) {
                let before: usize = counts.iter().map(|c| c.load(Ordering::SeqCst)).sum();
                let got =
                    tokio::time::timeout(Duration::from_secs(300), answer(&client, &dir, query))
                        .await
                        .unwrap_or_else(|_| panic!("{device}: no answer in 300 s"));
                check(&kiln, want, got);
                let after: usize = counts.iter().map(|c| c.load(Ordering::SeqCst)).sum();
                assert!(after > before, "{device}: no executor ran a KilnExec");
            }
        });
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
    std::fs::remove_dir_all(&dir).expect("remove the Parquet files");
    std::fs::remove_dir_all(folder("work")).expect("remove the executors' work folders");
}
