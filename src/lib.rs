//! # kiln: data-parallel Rust, compiled at run time
//!
//! Write a query and kiln fuses it into kernels, JIT-compiles them for the device and runs
//! them:
//!
//! ```
//! use kiln::prelude::*;
//! let ctx = Context::new()?;
//! // Whole numbers, so every f32 sum here is exact whatever the order of additions.
//! let xs: Vec<f32> = (0..10_000).map(|i| (i % 1000) as f32).collect();
//! let total = ctx
//!     .from(&xs)
//!     .map(|x| x * 2.0)
//!     .filter(|x| x.gt(1000.0))
//!     .map(|x| x + 100.0)
//!     .sum()?;
//! let expected: f32 = xs.iter().map(|x| x * 2.0).filter(|x| *x > 1000.0).map(|x| x + 100.0).sum();
//! assert_eq!(total, expected);
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! Closures receive [`Val`]s, typed handles to IR values: arithmetic operators, comparisons
//! (`gt ge lt le eq ne`), `and/or/not`, [`select`], `cast::<U>()` and math methods build the
//! kernel, and Rust's type checker types it. The same IR can be built by hand with
//! [`ir::Kernel::build`] and run with [`Context::launch_ir`]. Kernels can also be written as
//! Rust functions with `#[kiln::kernel]` and launched with [`Context::launch`]; see [`lang`].
//!
//! The embedded default backend is the CPU (Cranelift JIT + rayon); `KILN_BACKEND` selects
//! another. Semantics (division by zero, shifts, casts, NaN in min/max, out-of-bounds access)
//! are the rules written in [`ir`].

#![deny(missing_docs)]
/// The README's code blocks, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The guide's code blocks (docs/guide, an mdBook), compiled and run as doc tests.
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../docs/guide/src/introduction.md")]
    struct Introduction;
    #[doc = include_str!("../docs/guide/src/queries.md")]
    struct Queries;
    #[doc = include_str!("../docs/guide/src/kernels.md")]
    struct Kernels;
    #[doc = include_str!("../docs/guide/src/devices.md")]
    struct Devices;
    #[doc = include_str!("../docs/guide/src/semantics.md")]
    struct Semantics;
    #[doc = include_str!("../docs/guide/src/performance.md")]
    struct Performance;
    #[doc = include_str!("../docs/guide/src/troubleshooting.md")]
    struct Troubleshooting;
}

mod buffer;
mod context;
mod devices;
mod disk_cache;
mod emit;
mod error;
mod host_buffer;
pub mod lang;
mod plan;
mod plan_cache;
mod query;
mod row;
mod stream;
#[doc(hidden)]
pub mod struct_row;

pub use buffer::{Buffer, BufferSlice};
pub use context::{Context, KernelCache, Stats, DEFAULT_CACHE_CAPACITY};
pub use disk_cache::{CacheUsage, DiskCache, DEFAULT_CACHE_MAX_BYTES};
pub use emit::{emit, emit_spirv, Target, TRANSLATION_GROUP_SIZE};
pub use error::{Error, Result};
pub use host_buffer::HostBuffer;
pub use kiln_backend::{
    BackendError, BackendKind, DeviceClass, DeviceInfo, Features, Grid, LaunchArg, NativeDevice,
    NativeMemory,
};
pub use kiln_ir as ir;
/// IEEE binary16 (the `half` crate's `f16`): an element type of queries, kernels, buffers and
/// struct fields on every backend. Each operation rounds its result to `f16` (to nearest,
/// ties to even), as `half::f16`'s operators do, so results match plain Rust bit for bit.
///
/// ```
/// use kiln::{f16, prelude::*};
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs: Vec<f16> = [0.5f32, -2.0, 3.3].into_iter().map(f16::from_f32).collect();
/// let got = ctx.from(&xs).map(|x| x * f16::from_f32(1.5) - x).to_vec()?;
/// let want: Vec<f16> = xs.iter().map(|&x| x * f16::from_f32(1.5) - x).collect();
/// assert_eq!(got, want);
/// # Ok::<(), kiln::Error>(())
/// ```
pub use kiln_ir::f16;
pub use kiln_ir::{select, CompileOptions, Val};
/// The wgpu kiln's wgpu backend uses: [`NativeMemory::Wgpu`] and [`NativeDevice::Wgpu`] hold
/// its `Buffer`, `Device` and `Queue`.
#[cfg(feature = "wgpu")]
pub use kiln_wgpu::wgpu;
pub use lang::Value;
pub use lang::{device, intrinsic, kernel, lambda};
pub use plan::{DeviceProfile, PlanShape};
pub use query::{
    Column, Combine, Distinct, DynGroupBy, DynQuery, GroupBy, Query, Scan, SortKey, Sorted, MAX_LEN,
};
pub use row::{IntoRow, Maybe, Row, Vals};
pub use stream::{Event, Finished, Pending, Stream};

/// The names most programs need: `use kiln::prelude::*;`.
pub mod prelude {
    pub use crate::{
        select, BackendKind, Buffer, BufferSlice, Context, DeviceClass, DeviceInfo, Error,
        HostBuffer, Query, Stream, Target, Val,
    };
}
