//! [`CudaQueue`]: a CUDA stream of a kiln stream's own.

use crate::runtime::{address, bind, cuda_memory, CudaKernel, Lane, DRIVER_LIBRARY};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaStream;
use kiln_backend::*;
use std::sync::Arc;

/// A CUDA stream on the backend's context, for one kiln stream; its work runs beside that of
/// the backend's stream and of other kiln streams'.
pub(crate) struct CudaQueue {
    stream: Arc<CudaStream>,
    /// The backend's own stream, which this one follows before each piece of work.
    backend: Arc<CudaStream>,
}

fn err(what: &str, e: impl std::fmt::Display) -> BackendError {
    BackendError::InvalidLaunch {
        backend: BackendKind::Cuda,
        kernel: String::new(),
        reason: format!("{what} on a stream: {e}"),
    }
}

impl CudaQueue {
    /// A new stream beside `backend`. Fails with `Unavailable` when the driver cannot make
    /// one.
    pub(crate) fn new(backend: Arc<CudaStream>) -> Result<CudaQueue, BackendError> {
        let stream = backend
            .context()
            .new_stream()
            .map_err(|e| BackendError::Unavailable {
                backend: BackendKind::Cuda,
                library: DRIVER_LIBRARY.into(),
                reason: format!("creating a stream: {e}"),
            })?;
        Ok(CudaQueue { stream, backend })
    }

    /// Makes this stream's later work wait for the work queued on the backend's stream so
    /// far: an event recorded there, waited for here (on the device).
    fn follow_backend(&self) -> Result<(), BackendError> {
        let follow = || {
            let event = self
                .backend
                .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))?;
            self.stream.wait(&event)
        };
        follow().map_err(|e| err("ordering after the device's stream", e))
    }
}

impl DeviceQueue for CudaQueue {
    fn launch(
        &self,
        kernel: &dyn CompiledKernel,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> Result<(), BackendError> {
        let kernel = kernel
            .as_any()
            .downcast_ref::<CudaKernel>()
            .ok_or_else(|| err("launch", "a kernel another backend compiled"))?;
        self.follow_backend()?;
        kernel.launch_on(Lane::Stream(&self.stream), grid, args)
    }

    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError> {
        let m = cuda_memory(mem).map_err(|e| err("upload", e))?;
        if data.len() > m.bytes {
            let e = format!("{} bytes into device memory of {}", data.len(), m.bytes);
            return Err(err("upload", e));
        }
        if data.is_empty() {
            return Ok(());
        }
        self.follow_backend()?;
        let dst = address(m, &self.stream);
        bind(&self.stream)
            // SAFETY: `dst` holds at least `data.len()` bytes; the stream is synchronized
            // before `data` can go away. Page-locked `data` is copied by DMA; the driver
            // stages pageable memory itself.
            .and_then(|_| unsafe {
                cudarc::driver::result::memcpy_htod_async(dst, data, self.stream.cu_stream())
            })
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| err("upload", e))
    }

    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError> {
        let m = cuda_memory(mem).map_err(|e| err("download", e))?;
        if out.len() > m.bytes {
            let e = format!("{} bytes out of device memory of {}", out.len(), m.bytes);
            return Err(err("download", e));
        }
        if out.is_empty() {
            return Ok(());
        }
        self.follow_backend()?;
        let src = address(m, &self.stream);
        bind(&self.stream)
            // SAFETY: `src` holds at least `out.len()` bytes; the stream is synchronized
            // before `out` is used again.
            .and_then(|_| unsafe {
                cudarc::driver::result::memcpy_dtoh_async(out, src, self.stream.cu_stream())
            })
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| err("download", e))
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        check_copy(BackendKind::Cuda, src, dst, bytes)?;
        let s = cuda_memory(src).map_err(|e| err("device copy", e))?;
        let d = cuda_memory(dst).map_err(|e| err("device copy", e))?;
        let (from, to) = (address(s, &self.stream), address(d, &self.stream));
        if bytes == 0 || from == to {
            return Ok(());
        }
        self.follow_backend()?;
        bind(&self.stream)
            // SAFETY: both memories hold at least `bytes` (checked above) and do not overlap
            // (`Backend::copy`'s contract); the copy is ordered on this stream.
            .and_then(|_| unsafe {
                cudarc::driver::result::memcpy_dtod_async(to, from, bytes, self.stream.cu_stream())
            })
            .map_err(|e| err("device copy", e))
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.stream.synchronize().map_err(|e| err("waiting", e))
    }
}
