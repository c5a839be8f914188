//! kiln under DataFusion: a physical optimizer rule, [`KilnRule`], that runs each partial
//! aggregate of a plan, with the filter and projection under it, as fused kiln queries
//! ([`KilnExec`]: one per batch on CPUs, per run of batches on GPUs) on any device kiln has
//! (the CPU's JIT, CUDA, OpenCL, wgpu). The final aggregate, joins, sorts and everything else stay DataFusion's; a partial aggregate
//! kiln cannot take stays too, under a [`KilnDeclinedExec`] whose EXPLAIN line says why.
//!
//! ```
//! use datafusion::execution::SessionStateBuilder;
//! use datafusion::prelude::SessionContext;
//! use kiln_datafusion::KilnRule;
//! use std::sync::Arc;
//!
//! let kiln = kiln::Context::new()?;
//! let state = SessionStateBuilder::new()
//!     .with_default_features()
//!     .with_physical_optimizer_rule(Arc::new(KilnRule::new(kiln.clone())))
//!     .build();
//! let sql = SessionContext::new_with_state(state);
//! // The same, in one call:
//! let sql = SessionContext::new_with_state(kiln_datafusion::session_state(kiln));
//! # let _ = sql;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
mod aggregate;
mod exec;
mod expr;
mod fused;
mod keys;
mod rule;

pub use exec::{KilnDeclinedExec, KilnExec};
pub use rule::KilnRule;

use datafusion::execution::{SessionState, SessionStateBuilder};
use std::sync::Arc;

/// DataFusion's default session state (`SessionStateBuilder::new().with_default_features()`)
/// with [`KilnRule`] on `ctx` after its own physical optimizer rules.
pub fn session_state(ctx: kiln::Context) -> SessionState {
    session_state_with(KilnRule::new(ctx))
}

/// DataFusion's default session state with `rule` after its own physical optimizer rules:
/// [`session_state`] for a rule set up beyond its defaults.
///
/// ```
/// use datafusion::prelude::SessionContext;
/// use kiln_datafusion::{session_state_with, KilnRule};
/// let kiln = kiln::Context::with_backend(kiln::BackendKind::Cpu)?;
/// // One kiln query per 100,000 rows, gathering DataFusion's batches of 8192.
/// let state = session_state_with(KilnRule::new(kiln).rows_per_query(100_000));
/// let sql = SessionContext::new_with_state(state);
/// let rt = tokio::runtime::Builder::new_current_thread().build()?;
/// let batches = rt.block_on(async {
///     sql.sql("SELECT sum(x) FROM (VALUES (1), (2), (39)) AS t(x)").await?.collect().await
/// })?;
/// let total = datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string();
/// assert!(total.contains("| 42 "), "{total}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn session_state_with(rule: KilnRule) -> SessionState {
    SessionStateBuilder::new()
        .with_default_features()
        .with_physical_optimizer_rule(Arc::new(rule))
        .build()
}
