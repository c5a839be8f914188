//! [`Buffer<T>`]: data in a device's memory. Queries over buffers run where the data is and
//! can return buffers, so a chain of queries never copies through the host until
//! [`Buffer::download`].

use crate::context::Context;
use crate::error::{Error, Result};
use kiln_backend::{Backend, DeviceMemory};
use kiln_ir::Scalar;
use std::marker::PhantomData;
use std::sync::Arc;

/// `len` elements of `T` in the memory of one context's device. Made by [`Context::upload`]
/// or a query's `to_buffer`; queries (`ctx.from_buffer`) and launches take it where it is, so
/// chained work copies nothing through the host until [`Buffer::download`]. The memory is
/// freed when the buffer is dropped.
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

impl<T: Scalar> Buffer<T> {
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
        let mut out: Vec<T> = crate::error::host_vec(self.len, "a downloaded buffer")?;
        let bytes = self.len * std::mem::size_of::<T>();
        // SAFETY: the spare capacity of a Vec<T> viewed as bytes; the download initializes
        // all of them with valid values of T (written by kiln kernels or uploaded from T).
        let view = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, bytes) };
        self.backend.download(&*self.memory, view)?;
        // SAFETY: every element was just written.
        unsafe { out.set_len(self.len) };
        Ok(out)
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
        Ok(self.backend.copy(&*src.memory, &*self.memory, bytes)?)
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
        let memory = self.backend.alloc(self.len * std::mem::size_of::<T>())?;
        let mut out = Buffer::new(memory, self.backend.clone(), self.len);
        out.copy_from(self)?;
        Ok(out)
    }

    pub(crate) fn memory(&self) -> &dyn DeviceMemory {
        &*self.memory
    }

    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
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
    pub fn upload<T: Scalar>(&self, xs: &[T]) -> Result<Buffer<T>> {
        let backend = self.backend().clone();
        let memory = backend.alloc(std::mem::size_of_val(xs))?;
        // SAFETY: kiln scalars are plain numbers without padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(xs.as_ptr() as *const u8, std::mem::size_of_val(xs))
        };
        backend.upload(&*memory, bytes)?;
        Ok(Buffer::new(memory, backend, xs.len()))
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

    /// Ok if `b` lives on this context's device.
    pub(crate) fn check_buffer<T: Scalar>(&self, b: &Buffer<T>) -> Result<()> {
        if Arc::ptr_eq(b.backend(), self.backend()) {
            Ok(())
        } else {
            Err(Error::Unsupported {
                backend: self.device().backend,
                what: "a buffer of another context; download it, or upload it to this one".into(),
            })
        }
    }
}
