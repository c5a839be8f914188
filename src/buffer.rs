//! [`Buffer<T>`]: data in a device's memory. Queries over buffers run where the data is and
//! can return buffers, so a chain of queries never copies through the host until
//! [`Buffer::download`].

use crate::context::Context;
use crate::error::{Error, Result};
use crate::query::bytes_of;
use kiln_backend::{Backend, DeviceMemory, LaunchArg};
use kiln_ir::IrType;
use std::marker::PhantomData;
use std::sync::Arc;

mod slice;
pub use slice::BufferSlice;

/// Device memory that a launch binds in place: a whole [`Buffer`] or a [`BufferSlice`].
pub(crate) trait OnDevice<'a> {
    /// The memory, valid for `'a`.
    fn device_memory(self) -> &'a dyn DeviceMemory;
    /// The backend it belongs to.
    fn device_backend(&self) -> &Arc<dyn Backend>;
}

impl<'a, T: IrType> OnDevice<'a> for &'a Buffer<T> {
    fn device_memory(self) -> &'a dyn DeviceMemory {
        &*self.memory
    }
    fn device_backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }
}

impl<'a, T: IrType> OnDevice<'a> for &'a BufferSlice<'_, T> {
    fn device_memory(self) -> &'a dyn DeviceMemory {
        &**self.memory()
    }
    fn device_backend(&self) -> &Arc<dyn Backend> {
        self.backend()
    }
}

impl Context {
    /// `data` as a launch argument, after checking it lives on this context's device.
    pub(crate) fn device_arg<'a>(&self, data: impl OnDevice<'a>) -> Result<LaunchArg<'a>> {
        self.check_device(data.device_backend())?;
        Ok(LaunchArg::Device(data.device_memory()))
    }
}

/// `len` elements of `T` (a scalar, a `Vector` or a `#[derive(kiln::Value)]` struct) in the
/// memory of one context's device, side by side as in a slice. Made by [`Context::upload`],
/// [`Context::zeroed`] or a query's `to_buffer`; queries (`ctx.from_buffer`) and launches
/// take it where it is, so chained work copies nothing through the host until
/// [`Buffer::download`]. The memory is freed when the buffer is dropped.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs = ctx.upload(&[3.0f32, -1.0, 4.0, -1.5])?;
/// let positive = ctx.from_buffer(&xs).filter(|x| x.gt(0.0)).to_buffer()?;
/// assert_eq!(positive.len(), 2);
/// assert_eq!(ctx.from_buffer(&positive).sum()?, 7.0);
/// assert_eq!(positive.download()?, [3.0, 4.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Buffer<T> {
    memory: Arc<dyn DeviceMemory>,
    backend: Arc<dyn Backend>,
    len: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T: IrType> Buffer<T> {
    pub(crate) fn new(
        memory: Arc<dyn DeviceMemory>,
        backend: Arc<dyn Backend>,
        len: usize,
    ) -> Buffer<T> {
        Buffer {
            memory,
            backend,
            len,
            _t: PhantomData,
        }
    }

    /// Number of elements.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.upload(&[1.0f32, 2.0, 3.0])?.len(), 3);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer has no elements.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert!(ctx.upload::<u32>(&[])?.is_empty());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the elements to the host, after every launch that writes them has finished.
    /// Fails with the backend's error, or `HostOutOfMemory` when the host has no room.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let squares = ctx.from(&[1u32, 2, 3]).map(|x| x * x).to_buffer()?;
    /// assert_eq!(squares.download()?, vec![1, 4, 9]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn download(&self) -> Result<Vec<T>> {
        BufferSlice::from(self).download()
    }

    /// The backend's own handle to the buffer's memory, for a native library: what
    /// [`BufferSlice::native`] gives for the whole buffer.
    ///
    /// # Safety
    ///
    /// As for [`BufferSlice::native`]: order native work with kiln's, stay within the
    /// handle's bytes, write valid elements, and use the handle while the buffer lives.
    pub unsafe fn native(&self) -> Result<kiln_backend::NativeMemory> {
        // SAFETY: the caller keeps the contract, which is the slice's.
        unsafe { BufferSlice::from(self).native() }
    }

    /// Copies the elements into `out`, which must have the buffer's length, after every
    /// launch that writes them has finished: [`Buffer::download`] without a new vector, so a
    /// loop that downloads again and again reuses one. Fails with `LengthMismatch` (the
    /// buffer's length, then `out`'s) when the lengths differ, or the backend's error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.from(&[1u32, 2, 3]).map(|x| x * 10).to_buffer()?;
    /// let mut out = [0u32; 3];
    /// b.download_into(&mut out)?;
    /// assert_eq!(out, [10, 20, 30]);
    /// assert!(b.download_into(&mut [0u32; 2]).is_err()); // lengths differ
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn download_into(&self, out: &mut [T]) -> Result<()> {
        if out.len() != self.len {
            return Err(Error::LengthMismatch {
                left: self.len,
                right: out.len(),
            });
        }
        // SAFETY: kiln scalars are plain numbers without padding, and every bit pattern the
        // download writes is a value of T (written by kiln kernels or uploaded from T).
        let view = unsafe {
            std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, std::mem::size_of_val(out))
        };
        Ok(self.backend.download(&*self.memory, view)?)
    }

    /// Overwrites the buffer with `xs`, which must have its length, copied from the host
    /// after earlier launches: [`Context::upload`] into memory the buffer already has. Fails
    /// with `LengthMismatch` (the buffer's length, then `xs`'s) when the lengths differ, or
    /// the backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut b = ctx.zeroed::<f32>(3)?;
    /// b.write_from(&[1.5, 2.5, 3.5])?;
    /// assert_eq!(ctx.from_buffer(&b).sum()?, 7.5);
    /// assert!(b.write_from(&[1.0]).is_err()); // lengths differ
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn write_from(&mut self, xs: &[T]) -> Result<()> {
        BufferSlice::from(&*self).write_from(xs)
    }

    /// Overwrites this buffer with the elements of `src`, copied on the device (after earlier
    /// launches; the data never goes through the host). Fails with `LengthMismatch` when the
    /// lengths differ, `Unsupported` when `src` lives on another context's device, or the
    /// backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let src = ctx.upload(&[5i32, 6, 7])?;
    /// let mut dst = ctx.upload(&[0i32; 3])?;
    /// dst.copy_from(&src)?;
    /// assert_eq!(dst.download()?, vec![5, 6, 7]);
    /// assert!(dst.copy_from(&ctx.upload(&[1i32])?).is_err()); // lengths differ
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn copy_from(&mut self, src: &Buffer<T>) -> Result<()> {
        BufferSlice::from(&*self).copy_from(src)
    }

    /// A new buffer on the same device with the same elements, copied on the device. Fails
    /// with `OutOfMemory` or the backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let a = ctx.upload(&[1.5f64, 2.5])?;
    /// let b = a.try_clone()?; // its own device memory
    /// assert_eq!(b.download()?, a.download()?);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn try_clone(&self) -> Result<Buffer<T>> {
        BufferSlice::from(self).to_buffer()
    }
}

impl Context {
    /// Copies `xs` into a new buffer in this context's device memory. Fails with
    /// `OutOfMemory` or the backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    /// let on_device = ctx.upload(&xs)?;
    /// // Both queries read the buffer where it is; nothing is copied again.
    /// assert_eq!(ctx.from_buffer(&on_device).max()?, Some(999.0));
    /// assert_eq!(ctx.from_buffer(&on_device).count()?, 1000);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn upload<T: IrType>(&self, xs: &[T]) -> Result<Buffer<T>> {
        let backend = self.backend().clone();
        let memory = backend.alloc(std::mem::size_of_val(xs))?;
        backend.upload(&*memory, bytes_of(xs))?;
        Ok(Buffer::new(memory, backend, xs.len()))
    }

    /// A new buffer of `n` zeros in this context's device memory, for kernels and queries to
    /// write into. The zeros are uploaded from the host, so this costs what uploading `n`
    /// elements does. Fails with `HostOutOfMemory` or `OutOfMemory` when the host or the
    /// device has no room, or the backend's copy error.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let counts = ctx.zeroed::<u32>(4)?;
    /// assert_eq!(counts.len(), 4);
    /// assert_eq!(counts.download()?, [0, 0, 0, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn zeroed<T: IrType>(&self, n: usize) -> Result<Buffer<T>> {
        let bytes = n.saturating_mul(std::mem::size_of::<T>());
        let zeros: Vec<u64> =
            crate::error::zeroed_host_vec(bytes.div_ceil(8), "the zeros of a new buffer")?;
        let backend = self.backend().clone();
        let memory = backend.alloc(bytes)?;
        backend.upload(&*memory, &bytes_of(&zeros)[..bytes])?;
        Ok(Buffer::new(memory, backend, n))
    }

    /// Waits until every launch of this context has finished.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x = ctx.upload(&[1.0f32; 256])?;
    /// let doubled = ctx.from_buffer(&x).map(|v| v * 2.0).to_buffer()?; // may still run
    /// ctx.synchronize()?; // now it has finished
    /// assert_eq!(doubled.download()?[0], 2.0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.backend().synchronize()?)
    }

    /// Ok if memory of `backend` lives on this context's device.
    pub(crate) fn check_device(&self, backend: &Arc<dyn Backend>) -> Result<()> {
        if Arc::ptr_eq(backend, self.backend()) {
            Ok(())
        } else {
            Err(Error::Unsupported {
                backend: self.device().backend,
                what: "a buffer of another context; download it, or upload it to this one".into(),
            })
        }
    }
}
