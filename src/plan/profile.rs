//! What the query planner knows about a device, and the grid arithmetic every plan shares.

use super::Place;
use kiln_backend::{DeviceClass, DeviceInfo, Grid};

/// Elements per work item in the chunked plan (fewer on a device with a loop limit: see
/// [`DeviceProfile::chunk`]).
pub(crate) const CHUNK: u32 = 16384;
/// Elements per work item in the grouped plan.
pub(crate) const ITEM_CHUNK: u32 = 16;

/// How the query planner spreads work over work items ([`Context::set_plan_shape`](crate::Context::set_plan_shape)).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// assert_eq!(ctx.effective_plan_shape(), kiln::PlanShape::Chunked); // Auto, on a CPU
/// ctx.set_plan_shape(kiln::PlanShape::Grouped); // run the GPU plans here, e.g. to test them
/// let xs: Vec<u32> = (0..100_000).collect();
/// assert_eq!(ctx.from(&xs).map(|x| x % 7).sum()?, xs.iter().map(|x| x % 7).sum::<u32>());
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanShape {
    /// Chunked on CPU devices, grouped on GPUs and on devices with a loop limit
    /// ([`DeviceInfo::max_loop_iterations`]).
    Auto,
    /// One work item per group, each folding a long contiguous chunk: one tight loop per
    /// chunk on the CPU.
    Chunked,
    /// Groups of up to 256 work items that each fold a short contiguous range and combine
    /// through shared memory: the shape GPUs need.
    Grouped,
}

/// The device properties a query plan depends on: everything the planner reads, so a plan
/// can be made (and printed with [`Query::explain_on`](crate::Query::explain_on)) for a
/// device that is not present.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let gpu = kiln::DeviceProfile { shape: kiln::PlanShape::Grouped, ..ctx.profile() };
/// let xs: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
/// // The plans a GPU would run, printed on a machine without one.
/// let plan = ctx.from(&xs).map(|x| x * 2.0).explain_on(&gpu);
/// assert!(plan.contains("grouped"), "{plan}");
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceProfile {
    /// [`PlanShape::Chunked`] or [`PlanShape::Grouped`] (never `Auto`).
    pub shape: PlanShape,
    /// Work items per group in the grouped plan: a power of two, at most 256.
    pub group_size: u32,
    /// Elements per work item in the chunked plan.
    pub chunk: u32,
    /// The device's largest work-group size.
    pub max_group_size: u32,
    /// See [`DeviceInfo::fits_groups_to_work`].
    pub fits_groups_to_work: bool,
    /// See [`DeviceInfo::host_memory`].
    pub host_memory: bool,
    /// See [`DeviceInfo::max_loop_iterations`].
    pub max_loop_iterations: Option<u32>,
    /// See [`DeviceInfo::compute_units`].
    pub compute_units: u32,
    /// See [`DeviceInfo::indexed_private_arrays`].
    pub indexed_private_arrays: bool,
    /// See [`DeviceInfo::max_shared_bytes`].
    pub max_shared_bytes: u64,
}

impl DeviceProfile {
    /// The profile of `device` with plans of `shape`: `Auto` is grouped on GPUs and on
    /// devices with a loop limit, chunked elsewhere.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let auto = kiln::DeviceProfile::of(ctx.device(), kiln::PlanShape::Auto);
    /// assert_eq!(auto.shape, kiln::PlanShape::Chunked);
    /// assert_eq!(auto, ctx.profile());
    /// let grouped = kiln::DeviceProfile::of(ctx.device(), kiln::PlanShape::Grouped);
    /// assert!(grouped.group_size.is_power_of_two() && grouped.group_size <= 256);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn of(device: &DeviceInfo, shape: PlanShape) -> DeviceProfile {
        let shape = match shape {
            // Grouped plans give each work item a few elements, which also keeps it within a
            // device's loop limit.
            PlanShape::Auto
                if device.class == DeviceClass::Gpu || device.max_loop_iterations.is_some() =>
            {
                PlanShape::Grouped
            }
            PlanShape::Auto => PlanShape::Chunked,
            other => other,
        };
        let mut profile = DeviceProfile {
            shape,
            group_size: grouped_size(device.max_group_size),
            chunk: CHUNK,
            max_group_size: device.max_group_size,
            fits_groups_to_work: device.fits_groups_to_work,
            host_memory: device.host_memory,
            max_loop_iterations: device.max_loop_iterations,
            compute_units: device.compute_units,
            indexed_private_arrays: device.indexed_private_arrays,
            max_shared_bytes: device.max_shared_bytes,
        };
        profile.chunk = chunk_len(profile.loop_budget());
        profile
    }

    /// The most loop passes a plan gives one work item on a device with a loop limit: half
    /// of it, leaving room for the passes of loops inside the query's own functions; `None`
    /// where loops run as long as they need.
    pub(crate) fn loop_budget(&self) -> Option<u64> {
        self.max_loop_iterations.map(|limit| limit as u64 / 2)
    }

    /// Where a plan keeps a small temporary (a few values per chunk or group): in host
    /// memory where that is the device's ([`Self::host_memory`]), else on the device.
    pub(crate) fn small_temp_place(&self) -> Place {
        match self.host_memory {
            true => Place::Host,
            false => Place::Device,
        }
    }

    /// True for the grouped plan.
    pub(crate) fn grouped(&self) -> bool {
        self.shape == PlanShape::Grouped
    }

    /// Chunks of [`Self::chunk`] elements covering `n` (at least one).
    pub(crate) fn chunks(&self, n: usize) -> u32 {
        chunks_of(n, self.chunk)
    }

    /// Groups of [`Self::group_size`] work items, [`ITEM_CHUNK`] elements each, that cover
    /// `n` elements in the grouped plan.
    pub(crate) fn item_groups(&self, n: usize) -> u32 {
        grouped_groups(n, self.group_size)
    }

    /// One work item per element of `n`, in groups of up to [`CHUNK`] work items. Where the
    /// device fits groups to the work (the CPU backend) the groups are as few as cover `n`
    /// and all of one size, `n` spread evenly and rounded up to a multiple of 64: a whole
    /// group of 16384 for 1000 elements took eight times as long as the elements' own work
    /// there. Elsewhere groups stay whole.
    pub(crate) fn per_element_grid(&self, n: usize) -> Grid {
        let largest = CHUNK.min(self.max_group_size).max(1);
        let groups = chunks_of(n, largest);
        if !self.fits_groups_to_work {
            return Grid::linear(groups, largest);
        }
        let group = (n.div_ceil(groups as usize).max(1) as u32)
            .next_multiple_of(64)
            .min(largest);
        Grid::linear(groups, group)
    }
}

/// Work items per group in the grouped plan: a power of two, at most 256.
fn grouped_size(max_group_size: u32) -> u32 {
    let cap = max_group_size.clamp(1, 256);
    1 << (31 - cap.leading_zeros())
}

/// The elements per work item of the chunked plan: [`CHUNK`], or on a device with a loop
/// limit the largest power of two within its loop budget when that is less (2048 for
/// llvmpipe on GL, which counts each work item's own passes).
fn chunk_len(loop_budget: Option<u64>) -> u32 {
    match loop_budget {
        Some(budget) if budget < CHUNK as u64 => {
            let fits = 1u64 << (63 - budget.max(1).leading_zeros());
            (fits as u32).max(ITEM_CHUNK)
        }
        _ => CHUNK,
    }
}

/// Chunks of `chunk` elements covering `n` (at least one).
pub(crate) fn chunks_of(n: usize, chunk: u32) -> u32 {
    (n as u64).div_ceil(chunk as u64).max(1) as u32
}

/// Groups of `g` work items, [`ITEM_CHUNK`] elements each, that cover `n` elements.
pub(crate) fn grouped_groups(n: usize, g: u32) -> u32 {
    chunks_of(n, g * ITEM_CHUNK)
}
