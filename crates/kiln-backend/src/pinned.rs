//! Host memory that a backend's copies reach directly: page-locked memory on CUDA, which the
//! device reads and writes by DMA without a staging copy through the driver.

/// Host memory allocated by [`crate::Backend::alloc_pinned`]. Freed when dropped.
pub trait PinnedMemory: Send + Sync {
    /// The first byte: valid for [`PinnedMemory::byte_len`] bytes, aligned to at least 64,
    /// until the memory is dropped.
    fn as_ptr(&self) -> *mut u8;
    /// Size in bytes.
    fn byte_len(&self) -> usize;
}
