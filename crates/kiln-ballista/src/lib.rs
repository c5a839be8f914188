//! kiln on a Ballista cluster. The scheduler plans each query with
//! [`KilnRule`], so the stages it sends out hold
//! [`KilnExec`](kiln_datafusion::KilnExec) operators; [`KilnCodec`] carries them to the executors, each of which runs
//! them on its own kiln device.
//!
//! [`scheduler_config`] and [`executor_config`] set a Ballista scheduler and executor up for
//! that; the `kiln-ballista-scheduler` and `kiln-ballista-executor` binaries start them. A
//! client connects as to any Ballista cluster (`SessionContext::remote("df://host:50050")`
//! from the `ballista` crate).
//!
//! ```
//! let kiln = kiln::Context::new()?;
//! let scheduler = kiln_ballista::scheduler_config(kiln.clone(), "127.0.0.1:50050".parse()?);
//! let executor =
//!     kiln_ballista::executor_config(kiln, "127.0.0.1:50051".parse()?, "127.0.0.1", 50050);
//! assert_eq!(scheduler.bind_port, 50050);
//! assert_eq!(executor.scheduler_port, 50050);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
mod codec;

pub use codec::KilnCodec;

use ballista_core::extension::SessionConfigExt;
use ballista_core::serde::BallistaPhysicalExtensionCodec;
use ballista_executor::executor_process::ExecutorProcessConfig;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_server::SessionBuilder;
use datafusion::execution::SessionStateBuilder;
use datafusion::prelude::SessionConfig;
use datafusion_proto::physical_plan::{ComposedPhysicalExtensionCodec, PhysicalExtensionCodec};
use kiln_datafusion::KilnRule;
use std::net::SocketAddr;
use std::sync::Arc;

/// The physical extension codec of a scheduler and executors running kiln: [`KilnCodec`]
/// (decoding onto `ctx`'s device), then Ballista's own for its operators.
pub fn physical_codec(ctx: kiln::Context) -> Arc<dyn PhysicalExtensionCodec> {
    Arc::new(ComposedPhysicalExtensionCodec::new(vec![
        Arc::new(KilnCodec::new(ctx)),
        Arc::new(BallistaPhysicalExtensionCodec::default()),
    ]))
}

/// The scheduler's session for each client session: Ballista's default, with
/// [`KilnRule`] on `ctx` after its physical optimizer rules, planned by Ballista's static
/// planner (its adaptive planner, the default, runs a fixed list of rules of its own and
/// not the session's).
pub fn session_builder(ctx: kiln::Context) -> SessionBuilder {
    session_builder_with(KilnRule::new(ctx))
}

/// [`session_builder`] with `rule` (for instance one with
/// [`KilnRule::rows_per_query`] set, which the executors then use too).
pub fn session_builder_with(rule: KilnRule) -> SessionBuilder {
    Arc::new(move |config: SessionConfig| {
        let config = config.with_ballista_adaptive_query_planner(false);
        let state = ballista_core::utils::default_session_builder(config)?;
        Ok(SessionStateBuilder::new_from_existing(state)
            .with_physical_optimizer_rule(Arc::new(rule.clone()))
            .build())
    })
}

/// A scheduler listening on `bind` that plans with [`KilnRule`] on `ctx` and sends
/// [`KilnExec`](kiln_datafusion::KilnExec) to executors through [`physical_codec`].
/// Start it with `ballista_scheduler::scheduler_process::start_server`.
pub fn scheduler_config(ctx: kiln::Context, bind: SocketAddr) -> SchedulerConfig {
    scheduler_config_with(KilnRule::new(ctx.clone()), ctx, bind)
}

/// [`scheduler_config`] planning with `rule` (whose rows per query, when set, the executors
/// use too), decoding on `ctx`.
///
/// ```
/// let kiln = kiln::Context::with_backend(kiln::BackendKind::Cpu)?;
/// let rule = kiln_datafusion::KilnRule::new(kiln.clone()).rows_per_query(1 << 20);
/// let scheduler = kiln_ballista::scheduler_config_with(rule, kiln, "127.0.0.1:50050".parse()?);
/// assert_eq!(scheduler.bind_port, 50050);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn scheduler_config_with(
    rule: KilnRule,
    ctx: kiln::Context,
    bind: SocketAddr,
) -> SchedulerConfig {
    SchedulerConfig {
        bind_host: bind.ip().to_string(),
        external_host: bind.ip().to_string(),
        bind_port: bind.port(),
        override_session_builder: Some(session_builder_with(rule)),
        override_physical_codec: Some(physical_codec(ctx)),
        ..SchedulerConfig::default()
    }
}

/// An executor serving its results on `bind` (Arrow Flight) and its gRPC service on the
/// port after it, registered with the scheduler at `scheduler_host:scheduler_port`, running
/// kiln's operators on `ctx`'s device. Start it with
/// `ballista_executor::executor_process::start_executor_process`.
pub fn executor_config(
    ctx: kiln::Context,
    bind: SocketAddr,
    scheduler_host: &str,
    scheduler_port: u16,
) -> ExecutorProcessConfig {
    ExecutorProcessConfig {
        bind_host: bind.ip().to_string(),
        port: bind.port(),
        grpc_port: bind.port().wrapping_add(1),
        scheduler_host: scheduler_host.to_string(),
        scheduler_port,
        override_physical_codec: Some(physical_codec(ctx)),
        ..ExecutorProcessConfig::default()
    }
}
