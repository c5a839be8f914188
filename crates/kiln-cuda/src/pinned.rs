//! Page-locked host memory for [`kiln_backend::Backend::alloc_pinned`], and the test that
//! tells a copy its host side is page-locked, so it goes straight to the device.

use cudarc::driver::result::{free_host, malloc_host};
use cudarc::driver::{CudaContext, DriverError};
use kiln_backend::PinnedMemory;
use std::sync::Arc;

/// `bytes` of page-locked host memory of one context (`cuMemHostAlloc`).
pub(crate) struct PinnedHost {
    ptr: *mut u8,
    bytes: usize,
    /// Made current to free the memory.
    context: Arc<CudaContext>,
}

// SAFETY: plain host memory; the driver allows it to be used and freed from any thread.
unsafe impl Send for PinnedHost {}
// SAFETY: as above; `PinnedHost` itself never reads or writes the bytes.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    /// Allocates at least one byte, with `context` current on this thread. Returns the
    /// driver's error.
    pub(crate) fn new(context: Arc<CudaContext>, bytes: usize) -> Result<PinnedHost, DriverError> {
        context.bind_to_thread()?;
        // SAFETY: a fresh allocation, freed in `drop`.
        let ptr = unsafe { malloc_host(bytes.max(1), 0) }? as *mut u8;
        Ok(PinnedHost {
            ptr,
            bytes,
            context,
        })
    }
}

impl PinnedHost {
    /// The context the memory belongs to.
    pub(crate) fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }
}

impl PinnedMemory for PinnedHost {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn byte_len(&self) -> usize {
        self.bytes
    }
}

impl Drop for PinnedHost {
    /// Frees the memory with its context current; a failure is recorded in the context,
    /// whose next call reports it.
    fn drop(&mut self) {
        let context = &self.context;
        context.record_err(context.bind_to_thread());
        // SAFETY: allocated by `PinnedHost::new`; nothing uses it after the drop (copies
        // that read or write it have finished: kiln's copies wait for their stream).
        context.record_err(unsafe { free_host(self.ptr as *mut _) });
    }
}

/// Whether the host bytes at `ptr` are page-locked memory the driver knows
/// (`cuMemHostGetFlags` succeeds only for those).
pub(crate) fn page_locked(ptr: *const u8) -> bool {
    let mut flags = 0;
    // SAFETY: the driver only looks the address up; it reads and writes no host bytes but
    // `flags`.
    let found = unsafe { cudarc::driver::sys::cuMemHostGetFlags(&mut flags, ptr as *mut _) };
    found == cudarc::driver::sys::CUresult::CUDA_SUCCESS
}
