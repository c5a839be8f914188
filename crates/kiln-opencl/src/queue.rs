//! [`ClQueue`]: a command queue of a stream's own.

use crate::copies::{copy_err, finish};
use crate::launch::OpenClKernel;
use crate::{cl_error, Lane, Shared};
use kiln_backend::*;
use opencl3::command_queue::CommandQueue;
use std::sync::Arc;

/// An in-order command queue on the backend's context and device, for one stream; its
/// commands run beside those of the backend's queue and of other streams' queues.
pub(crate) struct ClQueue {
    queue: CommandQueue,
    shared: Arc<Shared>,
}

impl ClQueue {
    /// A new queue beside `shared`'s. Fails with `Unavailable` when the driver cannot make
    /// one.
    pub(crate) fn new(shared: Arc<Shared>) -> Result<ClQueue, BackendError> {
        // clCreateCommandQueue is the OpenCL 1.2 call (deprecated only from 2.0 on).
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&shared.context, 0)
            .map_err(|e| cl_error(format!("creating a stream's queue: {e}")))?;
        Ok(ClQueue { queue, shared })
    }

    /// Makes this queue's later commands wait for those queued on the backend's queue so far:
    /// a marker there, flushed so that the device sees it, and a barrier here on it.
    fn follow_backend(&self) -> Result<(), BackendError> {
        let err = |e| copy_err(format!("ordering a stream after the device's queue: {e}"));
        // SAFETY: a marker with no wait list; its event is released when dropped, which the
        // driver defers until the barrier below no longer needs it.
        let marker =
            unsafe { self.shared.queue.enqueue_marker_with_wait_list(&[]) }.map_err(err)?;
        self.shared.queue.flush().map_err(err)?;
        // SAFETY: the wait list holds one live event, of this context.
        unsafe { self.queue.enqueue_barrier_with_wait_list(&[marker.get()]) }.map_err(err)?;
        Ok(())
    }
}

impl DeviceQueue for ClQueue {
    fn launch(
        &self,
        kernel: &dyn CompiledKernel,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> Result<(), BackendError> {
        let kernel = kernel
            .as_any()
            .downcast_ref::<OpenClKernel>()
            .ok_or_else(|| BackendError::InvalidLaunch {
                backend: BackendKind::OpenCl,
                kernel: String::new(),
                reason: "a kernel another backend compiled, launched on an OpenCL stream".into(),
            })?;
        self.follow_backend()?;
        kernel.launch_on(Lane::Stream(&self.queue), grid, args)
    }

    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError> {
        self.follow_backend()?;
        self.shared.write(&self.queue, mem, data)
    }

    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError> {
        self.follow_backend()?;
        self.shared.read(&self.queue, mem, out)
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        self.follow_backend()?;
        self.shared.copy(&self.queue, src, dst, bytes)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        finish(&self.queue)
    }
}
