//! Copies between host and device memory and within the device, on the backend's queue or a
//! stream's.

use crate::{buffer, cl_memory, Shared};
use kiln_backend::*;
use opencl3::command_queue::CommandQueue;
use opencl3::types::CL_BLOCKING;

/// A failed copy, naming OpenCL.
pub(crate) fn copy_err(reason: String) -> BackendError {
    BackendError::InvalidLaunch {
        backend: BackendKind::OpenCl,
        kernel: String::new(),
        reason,
    }
}

/// Waits until everything queued on `queue` has finished; the driver's error otherwise.
pub(crate) fn finish(queue: &CommandQueue) -> Result<(), BackendError> {
    queue
        .finish()
        .map_err(|e| copy_err(format!("waiting for the queue: {e}")))
}

impl Shared {
    /// Copies `data` into the start of `mem` on `queue`, after its earlier commands, and
    /// returns when the copy is done. Fails when `mem` is not OpenCL memory or is too small.
    pub(crate) fn write(
        &self,
        queue: &CommandQueue,
        mem: &dyn DeviceMemory,
        data: &[u8],
    ) -> Result<(), BackendError> {
        let m = cl_memory(mem).map_err(|e| copy_err(e.to_string()))?;
        if data.len() > m.bytes {
            return Err(copy_err(format!(
                "copy of {} bytes into device memory of {} bytes",
                data.len(),
                m.bytes
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the in-order queue runs this blocking write after earlier launches; the
        // buffer holds at least `data.len()` bytes; the returned event is released at once.
        let event = unsafe {
            opencl3::command_queue::enqueue_write_buffer(
                queue.get(),
                buffer(m),
                CL_BLOCKING,
                m.origin,
                data.len(),
                data.as_ptr() as *const std::ffi::c_void,
                0,
                std::ptr::null(),
            )
        }
        .map_err(|e| copy_err(format!("writing device memory: OpenCL error {e}")))?;
        drop(opencl3::event::Event::new(event));
        Ok(())
    }

    /// Copies the start of `mem` into `out` on `queue`, after its earlier commands, and
    /// returns when the copy is done. Fails when `mem` is not OpenCL memory or is too small.
    pub(crate) fn read(
        &self,
        queue: &CommandQueue,
        mem: &dyn DeviceMemory,
        out: &mut [u8],
    ) -> Result<(), BackendError> {
        let m = cl_memory(mem).map_err(|e| copy_err(e.to_string()))?;
        if out.len() > m.bytes {
            return Err(copy_err(format!(
                "copy of {} bytes out of device memory of {} bytes",
                out.len(),
                m.bytes
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: blocking read after earlier launches (in-order queue) into a live slice;
        // the buffer holds `out.len()` bytes from `origin`; the event is released at once.
        let event = unsafe {
            opencl3::command_queue::enqueue_read_buffer(
                queue.get(),
                buffer(m),
                CL_BLOCKING,
                m.origin,
                out.len(),
                out.as_mut_ptr() as *mut std::ffi::c_void,
                0,
                std::ptr::null(),
            )
        }
        .map_err(|e| copy_err(format!("reading device memory: OpenCL error {e}")))?;
        drop(opencl3::event::Event::new(event));
        Ok(())
    }

    /// Queues on `queue` a copy of the first `bytes` of `src` into `dst`; fails as
    /// [`Backend::copy`] says.
    pub(crate) fn copy(
        &self,
        queue: &CommandQueue,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        check_copy(BackendKind::OpenCl, src, dst, bytes)?;
        let (s, d) = (
            cl_memory(src).map_err(|e| copy_err(e.to_string()))?,
            cl_memory(dst).map_err(|e| copy_err(e.to_string()))?,
        );
        if bytes == 0 || (buffer(s) == buffer(d) && s.origin == d.origin) {
            return Ok(());
        }
        self.copy_region(queue, (buffer(s), s.origin), (buffer(d), d.origin), bytes)
            .map_err(copy_err)
    }
}
