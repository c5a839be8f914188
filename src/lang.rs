//! The kernel language: what `#[kiln::kernel]` and `#[kiln::device]` functions are written
//! with, and how they are launched.
//!
//! A kernel is an ordinary Rust function whose body the `#[kiln::kernel]` macro re-expresses
//! as IR builder calls, so Rust's type checker types it and every backend runs it:
//!
//! ```
//! use kiln::lang::*;
//!
//! #[kiln::kernel]
//! fn saxpy(i: Index1D, a: f32, x: View<f32>, y: ViewMut<f32>) {
//!     y[i] = a * x[i] + y[i];
//! }
//!
//! let ctx = kiln::Context::new()?;
//! let x: Vec<f32> = (0..1000).map(|i| i as f32).collect();
//! let mut y = vec![1.0f32; 1000];
//! ctx.launch(saxpy, x.len(), (2.0f32, &x, &mut y))?;
//! assert!(y.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32 + 1.0));
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! Parameters are an optional first index (`Index1D`, `Index2D`, `Index3D`: the work item's
//! position; launches with an extent run the body only inside it), then views of device or
//! host memory (`View<T>` read-only, `ViewMut<T>` read-write, `View2D<T>`/`View2DMut<T>`
//! row-major with a stride) and values (`f32`, `u32`, ... ). Inside the body, values are
//! [`Val`]s; see the README's kernel guide for the Rust subset.
//!
//! Structs derive [`Value`] to be kernel values, and `kiln::lambda!` writes a kernel as a
//! closure whose captured values become parameters:
//!
//! ```
//! use kiln::lang::*;
//!
//! #[derive(Clone, Copy, kiln::Value)]
//! #[repr(C)]
//! struct Body {
//!     pos: f32,
//!     vel: f32,
//! }
//!
//! let ctx = kiln::Context::new()?;
//! let mut bodies = vec![Body { pos: 0.0, vel: 1.0 }; 100];
//! let dt = 0.5f32;
//! let step = kiln::lambda!(move |i: Index1D, b: ViewMut<Body>| {
//!     let mut p = b[i];
//!     p.pos += p.vel * dt;
//!     b[i] = p;
//! });
//! ctx.launch(step, bodies.len(), (&mut bodies,))?;
//! assert!(bodies.iter().all(|b| b.pos == 0.5));
//! # Ok::<(), kiln::Error>(())
//! ```
//!
//! A value struct must have the same layout on every backend, so padding bytes are a compile
//! error that says to order the fields from the largest type to the smallest:
//!
//! ```compile_fail,E0080
//! #[derive(Clone, Copy, kiln::Value)]
//! #[repr(C)]
//! struct Particle {
//!     mass: f32, // 4 bytes of padding follow, to align `pos`
//!     pos: f64,
//! }
//! ```
//!
//! ```
//! #[derive(Clone, Copy, kiln::Value)]
//! #[repr(C)]
//! struct Particle {
//!     pos: f64, // the same types, largest first: no padding
//!     mass: f32,
//!     charge: f32,
//! }
//! ```

use crate::buffer::Buffer;
use crate::context::Context;
use crate::error::{Error, Result};
use kiln_backend::{Grid, LaunchArg};
use kiln_ir::{Access, Axis, Builtin, IrType, Kernel, KernelScope, Mem, Scalar, SharedLen};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};

pub use kiln_ir::{
    barrier, builtin, global_id, global_size, group_id, group_size, local_id, local_index,
    num_groups, subgroup_barrier, Axis as Dim, Float, Int, IntoVal, LocalArray, Numeric, Val, Var,
    Vector,
};
pub use kiln_macros::{device, intrinsic, kernel, lambda, Value};

/// The index of a work item in a 1D launch: its global position.
pub type Index1D = Val<u32>;

/// The index of a work item in a 2D launch: `x` is the column (fastest axis), `y` the row.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn times_table(p: Index2D, out: View2DMut<u32>) {
///     out[p] = (p.x + 1) * (p.y + 1);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut t = vec![0u32; 3 * 2]; // 2 rows of 3 columns
/// ctx.launch(times_table, (3, 2), (Slice2D::new(&mut t[..], 3),))?;
/// assert_eq!(t, [1, 2, 3, 2, 4, 6]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Index2D {
    /// column
    pub x: Val<u32>,
    /// row
    pub y: Val<u32>,
}

/// The index of a work item in a 3D launch.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn flat_index(p: Index3D, out: ViewMut<u32>) {
///     let at = (p.z * 3 + p.y) * 4 + p.x;
///     out[at] = p.x * 100 + p.y * 10 + p.z;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0u32; 4 * 3 * 2];
/// ctx.launch(flat_index, (4, 3, 2), (&mut out,))?;
/// assert_eq!(&out[..5], [0, 100, 200, 300, 10]);
/// assert_eq!(out[23], 321);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Index3D {
    /// fastest axis
    pub x: Val<u32>,
    /// middle axis
    pub y: Val<u32>,
    /// slowest axis
    pub z: Val<u32>,
}

/// Declares the extent parameters of a kernel with a `dims`-dimensional index and returns
/// the global position per axis and whether it lies inside the extent (generated code).
pub fn declare_extent(scope: &KernelScope, dims: usize) -> ([Val<u32>; 3], Val<bool>) {
    let axes = [Axis::X, Axis::Y, Axis::Z];
    let names = ["kiln_extent_x", "kiln_extent_y", "kiln_extent_z"];
    let mut pos = [kiln_ir::lit(0u32); 3];
    let mut inside = kiln_ir::lit(true);
    for d in 0..dims {
        let extent = scope.value::<u32>(names[d]);
        pos[d] = global_id(axes[d]);
        inside = inside.and(pos[d].lt(extent));
    }
    (pos, inside)
}

/// Index types a kernel can take first: how many axes they have and how they are made from
/// positions (generated code).
pub trait KernelIndex: Copy {
    /// Number of axes.
    const DIMS: usize;
    /// The index of a work item at `pos`.
    fn from_position(pos: [Val<u32>; 3]) -> Self;
}
impl KernelIndex for Val<u32> {
    const DIMS: usize = 1;
    fn from_position(pos: [Val<u32>; 3]) -> Self {
        pos[0]
    }
}
impl KernelIndex for Index2D {
    const DIMS: usize = 2;
    fn from_position(pos: [Val<u32>; 3]) -> Self {
        Index2D {
            x: pos[0],
            y: pos[1],
        }
    }
}
impl KernelIndex for Index3D {
    const DIMS: usize = 3;
    fn from_position(pos: [Val<u32>; 3]) -> Self {
        Index3D {
            x: pos[0],
            y: pos[1],
            z: pos[2],
        }
    }
}

/// A 2-component vector value from its components (`.at(0)`, `.at(1)` read them back).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn areas(i: Index1D, w: View<f32>, h: View<f32>, out: ViewMut<f32>) {
///     let size = vec2(w[i], h[i]);
///     out[i] = size.at(0) * size.at(1);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (w, h) = ([2.0f32, 1.5], [3.0f32, 4.0]);
/// let mut out = vec![0.0f32; 2];
/// ctx.launch(areas, 2, (&w[..], &h[..], &mut out))?;
/// assert_eq!(out, [6.0, 6.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn vec2<T: Scalar>(x: impl IntoVal<T>, y: impl IntoVal<T>) -> Val<Vector<T, 2>> {
    kiln_ir::vector([x.into_val(), y.into_val()])
}
/// A 3-component vector value from its components.
pub fn vec3<T: Scalar>(
    x: impl IntoVal<T>,
    y: impl IntoVal<T>,
    z: impl IntoVal<T>,
) -> Val<Vector<T, 3>> {
    kiln_ir::vector([x.into_val(), y.into_val(), z.into_val()])
}
/// A 4-component vector value from its components.
pub fn vec4<T: Scalar>(
    x: impl IntoVal<T>,
    y: impl IntoVal<T>,
    z: impl IntoVal<T>,
    w: impl IntoVal<T>,
) -> Val<Vector<T, 4>> {
    kiln_ir::vector([x.into_val(), y.into_val(), z.into_val(), w.into_val()])
}

mod launch;
mod memory;
mod ops;
mod values;
pub use launch::*;
pub use memory::*;
pub use ops::*;
pub use values::*;
