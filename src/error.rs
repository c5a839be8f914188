//! kiln's error type.

use kiln_backend::{BackendError, BackendKind};
use kiln_ir::IrError;

/// Everything that can go wrong in kiln. Nothing a user passes makes kiln panic; it returns one
/// of these.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (a, b) = ([1.0f32, 2.0], [1.0f32, 2.0, 3.0]);
/// match ctx.from(&a).zip(&b).map(|(x, y)| x + y).to_vec() {
///     Err(Error::LengthMismatch { left, right }) => assert_eq!((left, right), (2, 3)),
///     other => panic!("expected LengthMismatch, got {other:?}"),
/// }
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// Columns zipped together, or the two buffers of a device copy, have different lengths.
    #[error("different lengths: {left} and {right} elements (zipped columns, and the two buffers of a copy, must match)")]
    LengthMismatch {
        /// length of the query so far, or of the destination buffer
        left: usize,
        /// length of the zipped column, or of the source buffer
        right: usize,
    },
    /// The output given to `write_to` or `write_to_buffer` holds fewer elements than the
    /// query writes.
    #[error("the output holds {len} elements, but the query writes {need}")]
    OutputTooShort {
        /// elements the output holds
        len: usize,
        /// elements the query writes
        need: usize,
    },
    /// An input longer than kiln's 32-bit indexing allows.
    #[error("input of {len} elements is larger than kiln's limit of {max} elements per query")]
    TooLarge {
        /// elements given
        len: usize,
        /// largest allowed
        max: usize,
    },
    /// A query or kernel uses something kiln does not support (yet), with what to do instead.
    #[error("unsupported on backend {backend}: {what}")]
    Unsupported {
        /// backend the query was planned for
        backend: BackendKind,
        /// what is unsupported and what to do instead
        what: String,
    },
    /// A 2D view whose rows do not fit its data, or that 32-bit indexing cannot address.
    #[error("a 2D view of {rows} rows x {cols} columns with stride {stride} needs {need} elements (at most {max}); the data has {len}")]
    ViewOutOfBounds {
        /// rows asked for
        rows: usize,
        /// columns asked for
        cols: usize,
        /// elements from one row to the next
        stride: usize,
        /// elements the view spans
        need: usize,
        /// elements in the data
        len: usize,
        /// largest row, column or stride count kiln's indexing allows
        max: usize,
    },
    /// A 3D view whose planes and rows do not fit its data, or that 32-bit indexing cannot
    /// address.
    #[error("a 3D view of {planes} planes x {rows} rows x {cols} columns with strides {row_stride} (rows) and {plane_stride} (planes) needs {need} elements (at most {max}); the data has {len}")]
    VolumeOutOfBounds {
        /// planes asked for
        planes: usize,
        /// rows per plane asked for
        rows: usize,
        /// columns asked for
        cols: usize,
        /// elements from one row to the next
        row_stride: usize,
        /// elements from one plane to the next
        plane_stride: usize,
        /// elements the view spans
        need: usize,
        /// elements in the data
        len: usize,
        /// largest count or span kiln's indexing allows
        max: usize,
    },
    /// A range of a buffer's elements that does not lie inside it (`Buffer::slice`).
    #[error("the slice {start}..{end} does not lie inside a buffer of {len} elements")]
    SliceOutOfBounds {
        /// first element asked for
        start: usize,
        /// element after the last asked for
        end: usize,
        /// elements in the buffer or slice it was taken from
        len: usize,
    },
    /// Host memory for a result or a table the query sizes (a histogram's bins, a
    /// `to_vec`'s elements) could not be allocated; nothing was aborted.
    #[error("the host could not allocate {bytes} bytes for {what}")]
    HostOutOfMemory {
        /// bytes asked for
        bytes: u64,
        /// what they were for
        what: String,
    },
    /// A bug in kiln: parts of it that must agree did not (a query plan and its kernels).
    /// Please report it with the query that caused it.
    #[error("internal error in kiln (please report it): {what}")]
    Internal {
        /// what disagreed
        what: String,
    },
    /// Work queued on a [`crate::Stream`] failed when it ran. The stream skipped the work
    /// queued after it; every wait on it or on later work of that stream returns this.
    #[error("{op} on a stream failed (the stream skipped the work queued after it): {source}")]
    StreamFailed {
        /// the work that failed (`launch of `name``, `upload of N elements`, ...)
        op: String,
        /// why it failed
        source: Box<Error>,
    },
    /// `KILN_BACKEND` names no backend.
    #[error("KILN_BACKEND=`{0}` names no backend; use cpu, cuda, opencl or wgpu, optionally with a device index (opencl:1)")]
    UnknownBackend(String),
    /// The kernel built from a query or by hand is not valid IR.
    #[error(transparent)]
    Ir(#[from] IrError),
    /// The backend failed: unavailable, compile error (with log and source), unsupported
    /// feature, bad launch or allocation.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// `Result<T, kiln::Error>`.
///
/// ```
/// # use kiln::prelude::*;
/// fn mean(ctx: &Context, xs: &[f64]) -> kiln::Result<f64> {
///     Ok(ctx.from(xs).sum()? / xs.len() as f64)
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// assert_eq!(mean(&ctx, &[1.0, 2.0, 6.0])?, 3.0);
/// # Ok::<(), kiln::Error>(())
/// ```
pub type Result<T> = std::result::Result<T, Error>;

/// An empty vector with room for `n` elements of `T`; `HostOutOfMemory` naming `what` when the
/// allocator refuses (instead of aborting the process, as `Vec::with_capacity` would).
pub(crate) fn host_vec<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::HostOutOfMemory {
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        what: what.into(),
    })?;
    Ok(v)
}

/// `n` zeros of `T`, or `HostOutOfMemory` (see [`host_vec`]).
pub(crate) fn zeroed_host_vec<T: Clone + Default>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = host_vec(n, what)?;
    v.resize(n, T::default());
    Ok(v)
}
