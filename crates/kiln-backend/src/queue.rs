//! A device queue of a stream's own: an OpenCL command queue or a CUDA stream beside the one
//! a backend puts its other work on, so that streams' copies and launches overlap.

use crate::{BackendError, CompiledKernel, DeviceMemory, Grid, LaunchArg};

/// A queue of device work apart from the backend's own, made by [`crate::Backend::queue`]
/// for one stream. Work on it runs in order; work on different queues may run at once.
///
/// Each call first orders the queue after the work queued on the backend's own queue so far
/// (the device waits; the host does not), so memory the backend has freed and handed out
/// again is never touched from two queues at once. Memory used by work on the queue must
/// stay alive until [`DeviceQueue::synchronize`] returns after it.
pub trait DeviceQueue: Send + Sync {
    /// Queues `kernel`, compiled by this queue's backend, over `grid`. Its arguments are
    /// device memory and values: a host argument fails with `InvalidLaunch`, as does a kernel
    /// of another backend or arguments that do not match the parameters.
    fn launch(
        &self,
        kernel: &dyn CompiledKernel,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> Result<(), BackendError>;

    /// Copies `data` into the start of `mem` on this queue, returning when it is done. Fails
    /// when `mem` is not this backend's or is too small.
    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError>;

    /// Copies the start of `mem` into `out` on this queue, returning when it is done. Fails
    /// when `mem` is not this backend's or is too small.
    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError>;

    /// Queues a copy of the first `bytes` of `src` into `dst`, as
    /// [`crate::Backend::copy`] does on the backend's queue; fails as it does.
    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError>;

    /// Waits until everything queued on this queue has finished; the first error the device
    /// reported for it.
    fn synchronize(&self) -> Result<(), BackendError>;
}
