//! [`HostBuffer<T>`]: host memory that a [`crate::Stream`] copies from and into while the
//! caller goes on, page-locked on CUDA so the device reaches it directly.

use crate::context::Context;
use crate::error::{host_vec, Error, Result};
use kiln_backend::PinnedMemory;
use kiln_ir::IrType;
use std::ops::{Deref, DerefMut};

/// `len` elements of `T` in host memory, for [`crate::Stream::upload`] and
/// [`crate::Stream::download`], which take the buffer while their copy is queued and give it
/// back when the copy has finished (so nothing reads or writes it in between). On CUDA it is
/// page-locked memory, which the device reads and writes without a staging copy; elsewhere,
/// where copies gain nothing from that, it is ordinary memory. It reads and writes as a
/// slice (`Deref<Target = [T]>`).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut host = ctx.host_buffer::<f32>(4)?; // zeros
/// host[1] = 2.5;
/// assert_eq!(&host[..], &[0.0, 2.5, 0.0, 0.0]);
/// assert!(!host.is_page_locked()); // only CUDA's are
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct HostBuffer<T> {
    storage: Storage<T>,
    len: usize,
}

enum Storage<T> {
    Heap(Vec<T>),
    /// Memory of the backend's [`kiln_backend::Backend::alloc_pinned`], holding `len`
    /// initialized elements.
    Pinned(Box<dyn PinnedMemory>),
}

// SAFETY: kiln element types are plain data (scalars, `Vector`s, `#[derive(kiln::Value)]`
// structs of them), and pinned memory is `Send + Sync`; the buffer owns its elements.
unsafe impl<T: IrType> Send for HostBuffer<T> {}
// SAFETY: as above; shared references only read.
unsafe impl<T: IrType> Sync for HostBuffer<T> {}

impl<T: IrType> HostBuffer<T> {
    /// Whether the memory is page-locked (CUDA), so that copies reach it directly.
    pub fn is_page_locked(&self) -> bool {
        matches!(self.storage, Storage::Pinned(_))
    }

    /// The elements as bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        crate::query::bytes_of(self)
    }

    /// The elements as bytes, for a download to fill.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let len = std::mem::size_of_val(&**self);
        // SAFETY: the elements' own bytes; a download writes only bytes of `T` values (from
        // kiln kernels or uploads of `T`), so every element stays valid.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr() as *mut u8, len) }
    }
}

impl<T: IrType> Deref for HostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.storage {
            Storage::Heap(v) => v,
            // SAFETY: the pinned memory holds `len` initialized elements, aligned to 64
            // bytes (more than any kiln element needs), and lives as long as `self`.
            Storage::Pinned(p) => unsafe {
                std::slice::from_raw_parts(p.as_ptr() as *const T, self.len)
            },
        }
    }
}

impl<T: IrType> DerefMut for HostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.storage {
            Storage::Heap(v) => v,
            // SAFETY: as in `deref`, and `&mut self` makes this the only reference.
            Storage::Pinned(p) => unsafe {
                std::slice::from_raw_parts_mut(p.as_ptr() as *mut T, self.len)
            },
        }
    }
}

impl<T: IrType + std::fmt::Debug> std::fmt::Debug for HostBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("page_locked", &self.is_page_locked())
            .field("elements", &&**self)
            .finish()
    }
}

impl Context {
    /// A host buffer of `n` zeros for this context's streams: page-locked where the backend
    /// copies faster from such memory (CUDA), ordinary memory elsewhere. Fails with
    /// `HostOutOfMemory` when the host has no room, or `OutOfMemory` when the driver refuses
    /// page-locked memory.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let host = ctx.host_buffer::<u32>(3)?;
    /// assert_eq!(&host[..], &[0, 0, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn host_buffer<T: IrType>(&self, n: usize) -> Result<HostBuffer<T>> {
        let bytes = n
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(Error::HostOutOfMemory {
                bytes: u64::MAX,
                what: "a host buffer".into(),
            })?;
        let storage = match self.backend().alloc_pinned(bytes)? {
            Some(p) => {
                // SAFETY: `p` holds `bytes` bytes; all-zero bytes are a valid value of every
                // kiln element type (zero numbers, `false`).
                unsafe { std::ptr::write_bytes(p.as_ptr(), 0, bytes) };
                Storage::Pinned(p)
            }
            None => {
                let mut v = host_vec::<T>(n, "a host buffer")?;
                // SAFETY: room for `n` elements, all set to zero bytes first, which are a
                // valid value of every kiln element type.
                unsafe {
                    std::ptr::write_bytes(v.as_mut_ptr(), 0, n);
                    v.set_len(n);
                }
                Storage::Heap(v)
            }
        };
        Ok(HostBuffer { storage, len: n })
    }

    /// A host buffer holding a copy of `xs`, as [`Context::host_buffer`] makes it; fails as
    /// that does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let host = ctx.host_buffer_from(&[1.5f64, -2.0])?;
    /// assert_eq!(host.to_vec(), [1.5, -2.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn host_buffer_from<T: IrType>(&self, xs: &[T]) -> Result<HostBuffer<T>> {
        let mut host = self.host_buffer(xs.len())?;
        host.copy_from_slice(xs);
        Ok(host)
    }
}
