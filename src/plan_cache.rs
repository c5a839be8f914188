//! The plan cache: the compiled kernels of a query plan, found again by the plan's
//! fingerprint, so a query that runs again neither builds its kernels' IR nor hashes it.
//!
//! A query's kernels follow from the plan (its name and settings), the column types and the
//! IR its closures emit. The fingerprint is a small kernel holding exactly those: the input
//! columns, the settings as literals, and one application of every closure in a row. It
//! costs a tenth of building the plan's kernels, which a cache hit skips together with their
//! structural hash and compare in the [`KernelCache`](crate::KernelCache).

use crate::error::Result;
use kiln_backend::CompiledKernel;
use kiln_ir::{kernel_hash, Kernel, KernelHash};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One compiled kernel of a plan, with the name its launch span gives.
pub(crate) struct PlannedKernel {
    /// The kernel's name.
    pub name: String,
    /// The backend's compiled kernel.
    pub compiled: Arc<dyn CompiledKernel>,
}

/// The compiled kernels of a plan, in the order its builder returned them.
pub(crate) type Plan = Arc<[PlannedKernel]>;

/// Compiled plans by fingerprint (the fingerprint kernel is kept to rule out hash
/// collisions).
#[derive(Default)]
pub(crate) struct PlanCache {
    entries: Mutex<HashMap<KernelHash, (Kernel, Plan)>>,
    hits: AtomicU64,
}

impl PlanCache {
    /// The plan cached for `fingerprint`, or else the kernels of `build`, each compiled with
    /// `compile`, cached under `fingerprint` (not cached when there is none). Returns the
    /// first error of `build` or `compile` (nothing is cached then).
    pub(crate) fn get_or_build(
        &self,
        fingerprint: Option<Kernel>,
        build: impl FnOnce() -> Result<Vec<Kernel>>,
        compile: impl Fn(&Kernel) -> Result<Arc<dyn CompiledKernel>>,
    ) -> Result<Plan> {
        let keyed = fingerprint.map(|fp| (kernel_hash(&fp), fp));
        if let Some((hash, fp)) = &keyed {
            let map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, plan)) = map.get(hash).filter(|(k, _)| k == fp) {
                self.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(plan.clone());
            }
        }
        let plan: Plan = build()?
            .iter()
            .map(|k| {
                Ok(PlannedKernel {
                    name: k.name.clone(),
                    compiled: compile(k)?,
                })
            })
            .collect::<Result<Vec<_>>>()?
            .into();
        if let Some((hash, fp)) = keyed {
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(hash)
                .or_insert((fp, plan.clone()));
        }
        Ok(plan)
    }

    /// How many plans were found in the cache so far.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}
