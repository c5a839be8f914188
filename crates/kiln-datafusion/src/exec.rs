//! [`KilnExec`], the operator that runs a filter and a partial aggregate in kiln, and
//! [`KilnDeclinedExec`], which marks in EXPLAIN a partial aggregate kiln did not take.

use crate::aggregate::Groups;
use crate::fused::Fused;
#[cfg(doc)]
use crate::KilnRule;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::ScalarValue as Sv;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    replace_children_if_necessary, DisplayAs, DisplayFormatType, ExecutionPlan,
    ExecutionPlanProperties, PlanProperties, SendableRecordBatchStream,
};
use futures::StreamExt;
use std::fmt;
use std::sync::Arc;

/// Runs a filter, the projection under a partial aggregate and the partial aggregate of
/// DataFusion's plan as kiln queries over its input batches (one per batch on CPUs, per
/// gathered run of batches on GPUs: [`KilnRule::rows_per_query`]), on a kiln
/// [`kiln::Context`]'s device, and gives the partial aggregate's output (one row per group, its states), which
/// DataFusion's final aggregate reads as it would the partial aggregate's own.
pub struct KilnExec {
    input: Arc<dyn ExecutionPlan>,
    /// DataFusion's operators it replaced, from the partial aggregate down to the one over
    /// `input`: the plan it stands for, which travels to a cluster's executors in its place.
    operators: Arc<[Arc<dyn ExecutionPlan>]>,
    fused: Arc<Fused>,
    /// What it replaced, for EXPLAIN.
    text: String,
    properties: Arc<PlanProperties>,
    ctx: kiln::Context,
    /// How many input rows one kiln query takes, at least 1 ([`KilnRule::rows_per_query`]).
    rows_per_query: usize,
    /// That number as the rule was given it, or `None` for the device's default.
    rows_per_query_set: Option<usize>,
}

impl fmt::Debug for KilnExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KilnExec({})", self.text)
    }
}

impl KilnExec {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        operators: Vec<Arc<dyn ExecutionPlan>>,
        fused: Fused,
        text: String,
        schema: SchemaRef,
        ctx: kiln::Context,
        rows_per_query_set: Option<usize>,
    ) -> KilnExec {
        let rows_per_query =
            rows_per_query_set.unwrap_or_else(|| default_rows_per_query(ctx.device()));
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            input.output_partitioning().clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        KilnExec {
            input,
            operators: operators.into(),
            fused: Arc::new(fused),
            text,
            properties: Arc::new(properties),
            ctx,
            rows_per_query,
            rows_per_query_set,
        }
    }

    /// The rows per kiln query its rule was given ([`KilnRule::rows_per_query`]), or `None`
    /// when it takes its device's default: what a codec carries to another machine, whose
    /// device may want another default.
    ///
    /// ```
    /// use datafusion::arrow::array::{Int64Array, RecordBatch};
    /// use datafusion::arrow::datatypes::{DataType, Field, Schema};
    /// use datafusion::datasource::MemTable;
    /// use datafusion::physical_plan::{displayable, ExecutionPlan};
    /// use datafusion::prelude::SessionContext;
    /// use kiln_datafusion::{session_state_with, KilnExec, KilnRule};
    /// use std::sync::Arc;
    /// fn kiln_execs(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<Option<usize>>) {
    ///     if let Some(k) = plan.downcast_ref::<KilnExec>() {
    ///         out.push(k.rows_per_query_set());
    ///     }
    ///     plan.children().into_iter().for_each(|c| kiln_execs(c, out));
    /// }
    /// let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
    /// let part = |v: Vec<i64>| RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(v))]);
    /// // Two partitions, so DataFusion plans a partial aggregate per partition for kiln.
    /// let parts = vec![vec![part(vec![1, 2])?], vec![part(vec![39])?]];
    /// let kiln = kiln::Context::with_backend(kiln::BackendKind::Cpu)?;
    /// let rt = tokio::runtime::Builder::new_current_thread().build()?;
    /// for (rule, want) in [
    ///     (KilnRule::new(kiln.clone()), None),
    ///     (KilnRule::new(kiln.clone()).rows_per_query(50_000), Some(50_000)),
    /// ] {
    ///     let sql = SessionContext::new_with_state(session_state_with(rule));
    ///     sql.register_table("t", Arc::new(MemTable::try_new(schema.clone(), parts.clone())?))?;
    ///     let plan = rt.block_on(async {
    ///         sql.sql("SELECT sum(x) FROM t").await?.create_physical_plan().await
    ///     })?;
    ///     let mut found = Vec::new();
    ///     kiln_execs(&plan, &mut found);
    ///     assert_eq!(found, [want], "{}", displayable(plan.as_ref()).indent(true));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rows_per_query_set(&self) -> Option<usize> {
        self.rows_per_query_set
    }

    /// The DataFusion plan this operator runs: the partial aggregate it replaced, with the
    /// projection and filter under it, over `input` in place of its own input (the same
    /// schema). [`KilnRule`](crate::KilnRule) turns that plan back into a `KilnExec`; a
    /// physical extension codec sends it to another machine this way.
    ///
    /// Returns DataFusion's error when an operator refuses the new input.
    pub fn datafusion_over(&self, input: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        self.operators.iter().rev().try_fold(input, |under, op| {
            replace_children_if_necessary(op.clone(), vec![under])
        })
    }
}

impl DisplayAs for KilnExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KilnExec: device={}, ", self.ctx.device().name)?;
        if self.rows_per_query > 1 {
            write!(f, "{} rows per query, ", self.rows_per_query)?;
        }
        write!(f, "{}", self.text)
    }
}

impl ExecutionPlan for KilnExec {
    fn name(&self) -> &str {
        "KilnExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[_; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("KilnExec has one child".into()))?;
        Ok(Arc::new(KilnExec {
            input,
            operators: self.operators.clone(),
            fused: self.fused.clone(),
            text: self.text.clone(),
            properties: self.properties.clone(),
            ctx: self.ctx.clone(),
            rows_per_query: self.rows_per_query,
            rows_per_query_set: self.rows_per_query_set,
        }))
    }

    fn execute(
        &self,
        partition: usize,
        task: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let mut input = self.input.execute(partition, task)?;
        let (fused, ctx, schema) = (self.fused.clone(), self.ctx.clone(), self.schema());
        let out = schema.clone();
        let gather = self.rows_per_query;
        let partial = async move {
            let mut groups = Groups::new(&fused.aggregates);
            let mut pending: Vec<RecordBatch> = Vec::new();
            let mut rows = 0;
            while let Some(batch) = input.next().await {
                let batch = batch?;
                rows += batch.num_rows();
                pending.push(batch);
                if rows >= gather {
                    fused.run(&ctx, &gathered(&mut pending)?, &mut groups)?;
                    rows = 0;
                }
            }
            if !pending.is_empty() {
                fused.run(&ctx, &gathered(&mut pending)?, &mut groups)?;
            }
            if fused.keys.is_empty() {
                groups.ensure(Vec::new());
            }
            partial_batch(&out, &groups)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            futures::stream::once(partial),
        )))
    }
}

/// How many input rows one kiln query takes on `device` unless the rule says otherwise. On a
/// CPU, one batch: its columns stay in cache from the host's narrowing and key coding to the
/// kernel that reads them (gathering 2^20 rows first made TPC-H Q1 at SF 1 twice as slow on 2
/// cores). A GPU pays a fixed cost per query
/// (copies to and from the device, launches, a wait for the results): 0.7 ms per batch of
/// 8192 rows of TPC-H Q1 on an H200, ten times DataFusion's own time on 16 cores, so
/// batches are gathered into runs of about 2^21 rows, a few milliseconds of copying each.
pub(crate) fn default_rows_per_query(device: &kiln::DeviceInfo) -> usize {
    match device.class {
        kiln::DeviceClass::Cpu => 1,
        kiln::DeviceClass::Gpu => 1 << 21,
    }
}

/// The batches of `pending` as one batch, leaving `pending` empty.
fn gathered(pending: &mut Vec<RecordBatch>) -> Result<RecordBatch> {
    let batch = match pending.as_slice() {
        [one] => one.clone(),
        many => concat_batches(&many[0].schema(), many)?,
    };
    pending.clear();
    Ok(batch)
}

/// The groups' rows as a batch of `schema`.
fn partial_batch(schema: &SchemaRef, groups: &Groups<'_>) -> Result<RecordBatch> {
    let rows = groups.rows()?;
    if rows.is_empty() {
        return Ok(RecordBatch::new_empty(schema.clone()));
    }
    let columns = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(j, field)| {
            let array = Sv::iter_to_array(rows.iter().map(|r| r[j].clone()))?;
            match array.data_type() == field.data_type() {
                true => Ok(array),
                false => Ok(datafusion::arrow::compute::cast(&array, field.data_type())?),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// A partial aggregate kiln did not take, unchanged, with the reason, so that EXPLAIN shows
/// it. It runs its child as it is.
pub struct KilnDeclinedExec {
    input: Arc<dyn ExecutionPlan>,
    reason: String,
}

impl fmt::Debug for KilnDeclinedExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KilnDeclinedExec({})", self.reason)
    }
}

impl KilnDeclinedExec {
    /// Marks `input`, a partial aggregate kiln did not take, with the `reason`.
    pub fn new(input: Arc<dyn ExecutionPlan>, reason: String) -> KilnDeclinedExec {
        KilnDeclinedExec { input, reason }
    }

    /// Why kiln did not take its child.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl DisplayAs for KilnDeclinedExec {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KilnDeclinedExec: not in kiln: {}", self.reason)
    }
}

impl ExecutionPlan for KilnDeclinedExec {
    fn name(&self) -> &str {
        "KilnDeclinedExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn apply_expressions(
        &self,
        _: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = <[_; 1]>::try_from(children)
            .map_err(|_| DataFusionError::Internal("KilnDeclinedExec has one child".into()))?;
        Ok(Arc::new(KilnDeclinedExec {
            input,
            reason: self.reason.clone(),
        }))
    }

    fn execute(
        &self,
        partition: usize,
        task: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input.execute(partition, task)
    }
}
