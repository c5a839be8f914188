//! [`BufferSlice`]: a range of a [`Buffer`]'s elements, used where a whole buffer is (launch
//! arguments, query sources, copies) without copying it out.

use super::Buffer;
use crate::error::{Error, Result};
use crate::query::bytes_of;
use kiln_backend::{Backend, DeviceMemory, NativeMemory};
use kiln_ir::IrType;
use std::marker::PhantomData;
use std::ops::{Bound, Range, RangeBounds};
use std::sync::Arc;

/// `len` consecutive elements of a [`Buffer`], from element `start`: made by
/// [`Buffer::slice`] (or from a whole `&Buffer` with `.into()`). Kernels take `&slice` for a
/// `View<T>` or `ViewMut<T>` parameter, and their writes land in the buffer; queries take it
/// in `ctx.from_buffer(slice)` and `zip_buffer(slice)`; it downloads, uploads and copies its
/// range alone. Nothing is copied when it is made: on CUDA and the CPU a kernel gets the
/// address of its first element; on OpenCL a sub-buffer when `start * size_of::<T>()` is a
/// multiple of the device's base address alignment (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`, 128
/// bytes on PoCL), and on wgpu a binding at that offset when it is a multiple of the adapter's
/// `min_storage_buffer_offset_alignment` (256 bytes on most); elsewhere those two copy the
/// range to aligned device memory before each launch that uses it, and back after it when
/// the kernel may write it. It borrows the buffer, so the buffer outlives it.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn double(i: Index1D, x: ViewMut<f32>) {
///     x[i] = x[i] * 2.0;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let b = ctx.upload(&[1.0f32, 2.0, 3.0, 4.0, 5.0])?;
/// let middle = b.slice(1..4)?;
/// ctx.launch(double, middle.len(), (&middle,))?; // only elements 1, 2 and 3
/// assert_eq!(b.download()?, [1.0, 4.0, 6.0, 8.0, 5.0]);
/// assert_eq!(ctx.from_buffer(b.slice(3..)?).sum()?, 13.0);
/// assert!(b.slice(4..9).is_err()); // past the end
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct BufferSlice<'a, T> {
    memory: Arc<dyn DeviceMemory>,
    backend: Arc<dyn Backend>,
    /// The address of the whole buffer's memory object, which tells slices of one buffer
    /// apart from others.
    root: usize,
    /// Elements of the whole buffer before this slice's first.
    start: usize,
    len: usize,
    _buffer: PhantomData<&'a Buffer<T>>,
}

impl<T> Clone for BufferSlice<'_, T> {
    fn clone(&self) -> Self {
        BufferSlice {
            memory: self.memory.clone(),
            backend: self.backend.clone(),
            root: self.root,
            start: self.start,
            len: self.len,
            _buffer: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for BufferSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BufferSlice({}..{} on {})",
            self.start,
            self.start + self.len,
            self.backend.info().backend
        )
    }
}

/// The element range `range` names within `len` elements, or `SliceOutOfBounds`.
fn element_range(range: impl RangeBounds<usize>, len: usize) -> Result<Range<usize>> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok(s..e),
        _ => Err(Error::SliceOutOfBounds {
            start: start.unwrap_or(usize::MAX),
            end: end.unwrap_or(usize::MAX),
            len,
        }),
    }
}

impl<T: IrType> Buffer<T> {
    /// The elements of `range` (any range of element indices: `2..7`, `..n`, `3..`, `..`) as a
    /// [`BufferSlice`] that kernels and queries use in place. Fails with `SliceOutOfBounds`
    /// when the range ends past the buffer or starts after it ends, or the backend's error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.upload(&[10u32, 20, 30, 40])?;
    /// assert_eq!(b.slice(1..3)?.download()?, [20, 30]);
    /// assert_eq!(b.slice(..)?.len(), 4);
    /// assert!(matches!(b.slice(3..5), Err(Error::SliceOutOfBounds { start: 3, end: 5, len: 4 })));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<BufferSlice<'_, T>> {
        BufferSlice::from(self).slice(range)
    }
}

impl<'a, T: IrType> From<&'a Buffer<T>> for BufferSlice<'a, T> {
    /// The whole buffer, as a slice (no copy).
    fn from(b: &'a Buffer<T>) -> BufferSlice<'a, T> {
        BufferSlice {
            memory: b.memory.clone(),
            backend: b.backend.clone(),
            root: Arc::as_ptr(&b.memory) as *const () as usize,
            start: 0,
            len: b.len(),
            _buffer: PhantomData,
        }
    }
}

impl<'a, T: IrType> From<&'a mut Buffer<T>> for BufferSlice<'a, T> {
    /// The whole buffer, as a slice (no copy).
    fn from(b: &'a mut Buffer<T>) -> BufferSlice<'a, T> {
        BufferSlice::from(&*b)
    }
}

impl<'a, T: IrType> From<&BufferSlice<'a, T>> for BufferSlice<'a, T> {
    fn from(s: &BufferSlice<'a, T>) -> BufferSlice<'a, T> {
        s.clone()
    }
}

impl<'a, T: IrType> BufferSlice<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the slice has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements of the whole buffer it covers, as indices into the buffer.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.zeroed::<i64>(10)?;
    /// assert_eq!(b.slice(2..8)?.slice(1..3)?.range(), 3..5);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn range(&self) -> Range<usize> {
        self.start..self.start + self.len
    }

    /// The elements of `range`, counted from this slice's first, as a slice of the same
    /// buffer. Fails like [`Buffer::slice`].
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<BufferSlice<'a, T>> {
        let r = element_range(range, self.len)?;
        let size = std::mem::size_of::<T>();
        let memory = if r.len() == self.len {
            self.memory.clone()
        } else {
            self.backend
                .view(&*self.memory, r.start * size, r.len() * size)?
        };
        Ok(BufferSlice {
            memory,
            backend: self.backend.clone(),
            root: self.root,
            start: self.start + r.start,
            len: r.len(),
            _buffer: PhantomData,
        })
    }

    /// Copies the elements to the host, after every launch that writes them has finished.
    /// Fails like [`Buffer::download`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.upload(&[1u8, 2, 3, 4, 5])?;
    /// assert_eq!(b.slice(1..4)?.download()?, [2, 3, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn download(&self) -> Result<Vec<T>> {
        let mut out: Vec<T> = crate::error::host_vec(self.len, "a downloaded slice")?;
        let bytes = self.len * std::mem::size_of::<T>();
        // SAFETY: the spare capacity of a Vec<T> viewed as bytes; the download initializes
        // all of them with valid values of T (written by kiln kernels or uploaded from T).
        let view = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, bytes) };
        self.backend.download(&*self.memory, view)?;
        // SAFETY: every element was just written.
        unsafe { out.set_len(self.len) };
        Ok(out)
    }

    /// The backend's own handle to the slice's memory, for a native library (cuBLAS, your own
    /// CUDA or OpenCL code, a wgpu pass) to read or write it in place: the address of its
    /// first element on the CPU ([`NativeMemory::Host`]) and on CUDA (a `CUdeviceptr`,
    /// [`NativeMemory::Cuda`]); the `cl_mem` of the whole buffer and the slice's byte offset
    /// in it on OpenCL; on wgpu the whole buffer as a [`kiln::wgpu::Buffer`](crate::wgpu)
    /// behind `Any` and the slice's byte offset. [`Context::native_device`](crate::Context::native_device)
    /// gives the stream or queue kiln's work goes to. Fails with the backend's error only for
    /// memory of another backend, which a slice never holds.
    ///
    /// # Safety
    ///
    /// kiln cannot check what native code does with the handle; the caller keeps these:
    /// - **Order.** kiln queues launches and copies on one stream or queue and may return
    ///   before they finish. Native work queued on that stream or queue runs in order with
    ///   kiln's. Anything else (another stream, the host through the CPU backend's pointer
    ///   while a launch may run, another thread) waits for `ctx.synchronize()` first, and
    ///   finishes before kiln's next call that uses the memory.
    /// - **Extent.** Only the handle's `bytes` from its start (or offset) belong to the slice.
    /// - **Contents.** The bytes are the elements as the host lays them out (what
    ///   [`BufferSlice::download`] gives: `#[repr(C)]` structs, `bool` as one byte 0 or 1,
    ///   `f16` as its 16 bits); what is written there must be valid elements of `T`.
    /// - **Lifetime.** The handle is valid while the buffer lives; when it is dropped, the
    ///   memory goes back to kiln's pool for the next allocation.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.upload(&[1u32, 2, 3, 4])?;
    /// // SAFETY: nothing of kiln's runs on `b` while the host writes its third element.
    /// match unsafe { b.slice(2..)?.native()? } {
    ///     kiln::NativeMemory::Host { ptr, bytes } => {
    ///         assert_eq!(bytes, 8);
    ///         unsafe { (ptr as *mut u32).write(30) };
    ///     }
    ///     other => unreachable!("the CPU backend's memory is host memory: {other:?}"),
    /// }
    /// assert_eq!(b.download()?, [1, 2, 30, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub unsafe fn native(&self) -> Result<NativeMemory> {
        Ok(self.backend.native_memory(&*self.memory)?)
    }

    /// Overwrites the slice's elements with `xs`, which must have its length, after earlier
    /// launches; the rest of the buffer keeps its values. Fails with `LengthMismatch` (the
    /// slice's length, then `xs`'s) or the backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.zeroed::<i16>(5)?;
    /// b.slice(1..3)?.write_from(&[-7, 9])?;
    /// assert_eq!(b.download()?, [0, -7, 9, 0, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn write_from(&self, xs: &[T]) -> Result<()> {
        if xs.len() != self.len {
            return Err(Error::LengthMismatch {
                left: self.len,
                right: xs.len(),
            });
        }
        Ok(self.backend.upload(&*self.memory, bytes_of(xs))?)
    }

    /// Overwrites the slice's elements with those of `src` (a slice or a whole `&Buffer` of
    /// the same length, on the same device), copied on the device after earlier launches.
    /// Overlapping slices of one buffer copy as if through a temporary. Fails with
    /// `LengthMismatch`, `Unsupported` for another context's buffer, `OutOfMemory` for the
    /// temporary, or the backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.upload(&[1u32, 2, 3, 4, 5, 6])?;
    /// b.slice(2..6)?.copy_from(b.slice(0..4)?)?; // overlapping: moves like memmove
    /// assert_eq!(b.download()?, [1, 2, 1, 2, 3, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn copy_from<'b>(&self, src: impl Into<BufferSlice<'b, T>>) -> Result<()> {
        let src = src.into();
        if !Arc::ptr_eq(&self.backend, &src.backend) {
            return Err(Error::Unsupported {
                backend: self.backend.info().backend,
                what: "a device copy from a buffer of another context; download it, or upload \
                       it to this one"
                    .into(),
            });
        }
        if self.len != src.len {
            return Err(Error::LengthMismatch {
                left: self.len,
                right: src.len,
            });
        }
        let bytes = self.len * std::mem::size_of::<T>();
        let (a, b) = (self.range(), src.range());
        let overlap = self.root == src.root && a != b && a.start < b.end && b.start < a.end;
        if !overlap {
            return Ok(self.backend.copy(&*src.memory, &*self.memory, bytes)?);
        }
        let temporary = self.backend.alloc(bytes)?;
        self.backend.copy(&*src.memory, &*temporary, bytes)?;
        Ok(self.backend.copy(&*temporary, &*self.memory, bytes)?)
    }

    /// A new buffer on the same device holding a copy of the slice's elements. Fails with
    /// `OutOfMemory` or the backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.upload(&[1.5f32, 2.5, 3.5])?;
    /// let tail = b.slice(1..)?.to_buffer()?; // its own memory
    /// assert_eq!(tail.download()?, [2.5, 3.5]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_buffer(&self) -> Result<Buffer<T>> {
        let bytes = self.len * std::mem::size_of::<T>();
        let memory = self.backend.alloc(bytes)?;
        self.backend.copy(&*self.memory, &*memory, bytes)?;
        Ok(Buffer::new(memory, self.backend.clone(), self.len))
    }

    pub(crate) fn memory(&self) -> &Arc<dyn DeviceMemory> {
        &self.memory
    }

    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }
}
