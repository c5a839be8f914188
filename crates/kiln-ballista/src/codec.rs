//! [`KilnCodec`]: kiln's operators as bytes, between a scheduler and its executors.

use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::empty::EmptyExec;
use datafusion::physical_plan::{ExecutionPlan, ExecutionPlanProperties};
use datafusion_proto::bytes::{physical_plan_from_bytes, physical_plan_to_bytes};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use kiln_datafusion::{KilnDeclinedExec, KilnExec, KilnRule};
use std::sync::Arc;

/// What a message holds: its first byte.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Tag {
    /// A [`KilnExec`]: then its rows per query as set on the scheduler's rule (8 bytes,
    /// little-endian; 0 for the executor's device default), then the DataFusion plan it
    /// stands for, over a placeholder input, as DataFusion's protobuf bytes.
    Kiln = 0,
    /// A [`KilnDeclinedExec`]: then its reason, in UTF-8.
    Declined = 1,
}

/// A physical extension codec for [`KilnExec`] and [`KilnDeclinedExec`].
///
/// A `KilnExec` travels as the DataFusion operators it replaced (a partial aggregate, the
/// projection and filter under it; [`KilnExec::datafusion_over`]), and the receiving side
/// plans them again with [`KilnRule`] on its own [`kiln::Context`], so an executor compiles
/// its kernels for its own device. The rows per kiln query travel too when the sender's rule
/// set them ([`KilnExec::rows_per_query_set`]); otherwise the receiver takes its own device's
/// default. If the receiver's kiln does not take what the sender's took, decoding fails
/// with the reason; it never runs the operators another way.
///
/// Other operators it refuses to encode and decode; [`physical_codec`](crate::physical_codec)
/// composes it with Ballista's codec.
#[derive(Debug)]
pub struct KilnCodec {
    ctx: kiln::Context,
}

impl KilnCodec {
    /// The codec, decoding kiln's operators to run on `ctx`'s device.
    pub fn new(ctx: kiln::Context) -> KilnCodec {
        KilnCodec { ctx }
    }

    /// The [`KilnExec`] over `input` that this side's kiln makes of `plan`, the bytes of the
    /// DataFusion operators one stands for.
    fn kiln_exec(
        &self,
        message: &[u8],
        input: &Arc<dyn ExecutionPlan>,
        task: &TaskContext,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (rows, plan) = message.split_first_chunk::<8>().ok_or_else(|| {
            DataFusionError::Execution("a kiln operator's message is cut short".into())
        })?;
        let rows = usize::try_from(u64::from_le_bytes(*rows)).map_err(|_| {
            DataFusionError::Execution("a kiln operator's rows per query exceed usize".into())
        })?;
        let operators = physical_plan_from_bytes(plan, task)?
            .transform_up(|node| {
                Ok(match node.children().is_empty() {
                    true => Transformed::yes(input.clone()),
                    false => Transformed::no(node),
                })
            })
            .data()?;
        let rule = match rows {
            0 => KilnRule::new(self.ctx.clone()),
            n => KilnRule::new(self.ctx.clone()).rows_per_query(n),
        };
        let planned = rule.optimize(operators, task.session_config().options())?;
        if planned.downcast_ref::<KilnExec>().is_some() {
            return Ok(planned);
        }
        let why = planned
            .downcast_ref::<KilnDeclinedExec>()
            .map_or("it is not a partial aggregate", |d| d.reason());
        Err(DataFusionError::Plan(format!(
            "kiln on {} does not take the operators the scheduler's kiln took: {why}",
            self.ctx.device().name
        )))
    }
}

impl PhysicalExtensionCodec for KilnCodec {
    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(exec) = node.downcast_ref::<KilnExec>() {
            let input = exec.children()[0];
            let partitions = input.output_partitioning().partition_count();
            let placeholder = EmptyExec::new(input.schema()).with_partitions(partitions);
            let plan = exec.datafusion_over(Arc::new(placeholder))?;
            buf.push(Tag::Kiln as u8);
            let rows = exec.rows_per_query_set().unwrap_or(0) as u64;
            buf.extend_from_slice(&rows.to_le_bytes());
            buf.extend_from_slice(&physical_plan_to_bytes(plan)?);
            return Ok(());
        }
        if let Some(declined) = node.downcast_ref::<KilnDeclinedExec>() {
            buf.push(Tag::Declined as u8);
            buf.extend_from_slice(declined.reason().as_bytes());
            return Ok(());
        }
        Err(DataFusionError::NotImplemented(format!(
            "kiln's codec carries kiln's operators, not {}",
            node.name()
        )))
    }

    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        task: &TaskContext,
        _: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = inputs else {
            return Err(DataFusionError::Internal(format!(
                "a kiln operator has one input, not {}",
                inputs.len()
            )));
        };
        match buf.split_first() {
            Some((&t, plan)) if t == Tag::Kiln as u8 => self.kiln_exec(plan, input, task),
            Some((&t, reason)) if t == Tag::Declined as u8 => {
                let reason = String::from_utf8(reason.to_vec()).map_err(|e| {
                    DataFusionError::Internal(format!("a kiln operator's reason: {e}"))
                })?;
                Ok(Arc::new(KilnDeclinedExec::new(input.clone(), reason)))
            }
            _ => Err(DataFusionError::Internal(
                "not a message of kiln's codec".into(),
            )),
        }
    }
}
