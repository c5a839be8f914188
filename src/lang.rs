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
//! row-major with a stride, `View3D<T>`/`View3DMut<T>` planes of rows with two strides) and
//! values (`f32`, `u32`, ... ). Inside the body, values are
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

use crate::buffer::{Buffer, BufferSlice};
use crate::context::Context;
use crate::error::{Error, Result};
use kiln_backend::{Grid, LaunchArg};
use kiln_ir::{
    Access, Axis, Builtin, CompileOptions, IrType, Kernel, KernelScope, Mem, Scalar, SharedLen,
};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock};

/// Waits until every work item of the group gets here; shared memory written before it is
/// visible to the whole group after it. Call it where every work item of the group reaches
/// it (not inside a branch that only some take).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// Each work item reads its right neighbour's value within the group of 8.
/// #[kiln::kernel]
/// fn rotate_left(x: View<i32>, out: ViewMut<i32>) {
///     let tile = shared::<i32, 8>();
///     let (l, g) = (local_id(Dim::X), group_id(Dim::X));
///     tile[l] = x[g * 8 + l];
///     barrier();
///     out[g * 8 + l] = tile[(l + 1) % 8];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<i32> = (0..16).map(|i| i * i - 20).collect();
/// let mut out = vec![0i32; 16];
/// ctx.launch_grouped(rotate_left, 2u32, 8u32, (&x, &mut out))?;
/// let want: Vec<i32> = x.chunks(8).flat_map(|c| (0..8).map(|j| c[(j + 1) % 8])).collect();
/// assert_eq!(out, want);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::barrier;

/// Waits until every lane of the subgroup gets here; like [`barrier`] for the lanes of one
/// subgroup (a no-op on devices with one lane per subgroup).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn copy_then_sync(i: Index1D, x: View<u32>, out: ViewMut<u32>) {
///     out[i] = x[i] + 1;
///     subgroup_barrier();
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<u32> = (0..40).collect();
/// let mut out = vec![0u32; 40];
/// ctx.launch(copy_then_sync, 40, (&x, &mut out))?;
/// assert!(out.iter().zip(&x).all(|(o, v)| *o == v + 1));
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::subgroup_barrier;

/// Reads any launch builtin by name ([`kiln::ir::Builtin`](crate::ir::Builtin)); the named
/// functions below are shorthands for it.
///
/// ```
/// use kiln::lang::*;
/// use kiln::ir::Builtin;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn positions(out: ViewMut<u32>) {
///     let g = builtin(Builtin::GlobalId(Dim::X));
///     out[g] = builtin(Builtin::GroupId(Dim::X)) * 100 + builtin(Builtin::LocalId(Dim::X));
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0u32; 12];
/// ctx.launch_grouped(positions, 3u32, 4u32, (&mut out,))?;
/// assert_eq!(out, [0, 1, 2, 3, 100, 101, 102, 103, 200, 201, 202, 203]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::builtin;

/// This work item's position in the whole grid along an axis: `group_id * group_size +
/// local_id`. A kernel whose first parameter is an index gets this as its index.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn squares(out: ViewMut<u64>) {
///     let i = global_id(Dim::X);
///     out[i] = (i as u64) * (i as u64);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0u64; 64];
/// ctx.launch_grouped(squares, 4u32, 16u32, (&mut out,))?;
/// assert_eq!(out, (0..64u64).map(|i| i * i).collect::<Vec<_>>());
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::global_id;

/// Work items in the whole grid along an axis: `num_groups * group_size`. A grid-stride loop
/// steps by it.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// 8 work items double all 100 elements, each taking every 8th.
/// #[kiln::kernel]
/// fn double_all(x: ViewMut<f32>) {
///     let mut i = global_id(Dim::X);
///     while i < x.len() {
///         x[i] = x[i] * 2.0;
///         i += global_size(Dim::X);
///     }
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x: Vec<f32> = (0..100).map(|i| i as f32).collect();
/// ctx.launch_grouped(double_all, 2u32, 4u32, (&mut x,))?;
/// assert_eq!(x, (0..100).map(|i| 2.0 * i as f32).collect::<Vec<_>>());
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::global_size;

/// The index of this work item's group along an axis.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn group_of(x: ViewMut<u32>) {
///     x[global_id(Dim::X)] = group_id(Dim::X);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![0u32; 6];
/// ctx.launch_grouped(group_of, 3u32, 2u32, (&mut x,))?;
/// assert_eq!(x, [0, 0, 1, 1, 2, 2]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::group_id;

/// Work items per group along an axis (as launched).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn sizes(x: ViewMut<u32>) {
///     x[global_id(Dim::X)] = group_size(Dim::X) * 10 + num_groups(Dim::X);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![0u32; 8];
/// ctx.launch_grouped(sizes, 2u32, 4u32, (&mut x,))?;
/// assert_eq!(x, [42; 8]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::group_size;

/// This work item's position inside its group along an axis.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn lanes(x: ViewMut<u32>) {
///     x[global_id(Dim::X)] = local_id(Dim::X);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![9u32; 9];
/// ctx.launch_grouped(lanes, 3u32, 3u32, (&mut x,))?;
/// assert_eq!(x, [0, 1, 2, 0, 1, 2, 0, 1, 2]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::local_id;

/// This work item's position inside its group counted over all axes: `x + y * size_x + z *
/// size_x * size_y`.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn flat(out: ViewMut<u32>) {
///     let g = global_id(Dim::Y) * global_size(Dim::X) + global_id(Dim::X);
///     out[g] = local_index();
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0u32; 6];
/// ctx.launch_grouped(flat, (1u32, 1u32), (3u32, 2u32), (&mut out,))?;
/// assert_eq!(out, [0, 1, 2, 3, 4, 5]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::local_index;

/// Groups in the grid along an axis.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn last_group(x: ViewMut<u32>) {
///     x[global_id(Dim::X)] = (group_id(Dim::X) == num_groups(Dim::X) - 1) as u32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![0u32; 6];
/// ctx.launch_grouped(last_group, 3u32, 2u32, (&mut x,))?;
/// assert_eq!(x, [0, 0, 0, 0, 1, 1]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::num_groups;

/// A grid axis for the launch builtins: `Dim::X` (fastest), `Dim::Y`, `Dim::Z`.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn coords(out: ViewMut<u32>) {
///     let (x, y) = (global_id(Dim::X), global_id(Dim::Y));
///     out[y * 4 + x] = y * 10 + x;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0u32; 8];
/// ctx.launch_grouped(coords, (2u32, 1u32), (2u32, 2u32), (&mut out,))?;
/// assert_eq!(out, [0, 1, 2, 3, 10, 11, 12, 13]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::Axis as Dim;

/// A value inside a kernel. Kernel code works on `Val`s with Rust's operators and methods
/// (`+`, `<`, `as`, `x.min(y)`, `x.sqrt()`, ...); the kernel macro makes them from the
/// parameters, literals and locals, so a kernel body reads as plain Rust.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::device]
/// fn hypot(a: f32, b: f32) -> f32 {
///     (a * a + b * b).sqrt()
/// }
/// #[kiln::kernel]
/// fn lengths(i: Index1D, x: View<f32>, y: View<f32>, out: ViewMut<f32>) {
///     out[i] = hypot(x[i], y[i]).min(10.0);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (x, y) = ([3.0f32, 5.0, 30.0], [4.0f32, 12.0, 40.0]);
/// let mut out = vec![0.0f32; 3];
/// ctx.launch(lengths, 3, (&x[..], &y[..], &mut out))?;
/// let rust: Vec<f32> = x.iter().zip(&y).map(|(a, b)| (a * a + b * b).sqrt().min(10.0)).collect();
/// assert_eq!(out, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::Val;

/// A mutable local of a kernel: what `let mut` declares in kernel code (the macro writes
/// [`Var::new`], [`Var::get`] and [`Var::set`] for it; IR built by hand calls them).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn prefix(i: Index1D, x: View<u32>, out: ViewMut<u32>) {
///     let mut total = 0u32; // a `Var<u32>`
///     for j in 0..(i + 1) {
///         total += x[j];
///     }
///     out[i] = total;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x = [3u32, 1, 4, 1, 5];
/// let mut out = vec![0u32; 5];
/// ctx.launch(prefix, 5, (&x[..], &mut out))?;
/// assert_eq!(out, [3, 4, 8, 9, 14]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::Var;

/// A fixed-size array private to one work item: what `[v; N]` and `[a, b, c]` declare in
/// kernel code (through [`local_array`] and [`local_array_of`]).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn reverse3(i: Index1D, x: View<u32>, out: ViewMut<u32>) {
///     let tmp = [0u32; 3]; // a `LocalArray<u32>`
///     for j in 0u32..3 {
///         tmp[j] = x[i * 3 + j];
///     }
///     for j in 0u32..3 {
///         out[i * 3 + j] = tmp[2 - j];
///     }
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<u32> = (0..6).collect();
/// let mut out = vec![0u32; 6];
/// ctx.launch(reverse3, 2, (&x, &mut out))?;
/// assert_eq!(out, [2, 1, 0, 5, 4, 3]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::LocalArray;

/// A vector of 2, 3 or 4 scalars as a kernel value and buffer element, laid out as `[T; N]`
/// ([`vec2`], [`vec3`], [`vec4`] make one in a kernel; `.at(k)` reads component `k`).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn norms(i: Index1D, v: View<Vector<f32, 2>>, out: ViewMut<f32>) {
///     let p = v[i];
///     out[i] = (p.at(0) * p.at(0) + p.at(1) * p.at(1)).sqrt();
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let v = [Vector([3.0f32, 4.0]), Vector([6.0, 8.0])];
/// let mut out = vec![0.0f32; 2];
/// ctx.launch(norms, 2, (&v[..], &mut out))?;
/// assert_eq!(out, [5.0, 10.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::Vector;

/// Values a kernel operation accepts where it takes a `T`: a `Val<T>` or a plain `T` constant.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// A device function generic over what it is given.
/// #[kiln::kernel]
/// fn clamp_to(i: Index1D, x: ViewMut<i32>, hi: i32) {
///     x[i] = x[i].clamp(0i32, hi); // a constant and a parameter, both `IntoVal<i32>`
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![-5, 3, 12];
/// ctx.launch(clamp_to, 3, (&mut x, 10))?;
/// assert_eq!(x, [0, 3, 10]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::IntoVal;

/// The scalars with arithmetic (the eight integer types, `f32`, `f64`): a bound for kernels
/// generic over their element type.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn add_one<T: Numeric>(i: Index1D, x: ViewMut<T>, one: T) {
///     x[i] = x[i] + one;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (mut a, mut b) = (vec![1u8, 255], vec![0.5f64, -1.0]);
/// ctx.launch(add_one::<u8>, 2, (&mut a, 1u8))?;
/// ctx.launch(add_one::<f64>, 2, (&mut b, 1.0))?;
/// assert_eq!((a, b), (vec![2, 0], vec![1.5, 0.0])); // u8 wraps, as in release Rust
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::Numeric;

/// `f32` and `f64`: a bound for kernels that use float methods (`sqrt`, `exp`, ...).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn roots<T: Float>(i: Index1D, x: ViewMut<T>) {
///     x[i] = x[i].sqrt();
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![4.0f32, 2.25];
/// ctx.launch(roots::<f32>, 2, (&mut x,))?;
/// assert_eq!(x, [2.0, 1.5]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::Float;

/// The eight integer types: a bound for kernels that use bit operators and integer methods.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn low_bits<T: Int>(i: Index1D, x: ViewMut<T>, mask: T) {
///     x[i] = x[i] & mask;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![0x1234u16, 0xffff];
/// ctx.launch(low_bits::<u16>, 2, (&mut x, 0xffu16))?;
/// assert_eq!(x, [0x34, 0xff]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_ir::Int;
/// `#[kiln::kernel]`: a Rust function as a kernel (see [the module](self) for the Rust subset).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn saxpy(i: Index1D, a: f32, x: View<f32>, y: ViewMut<f32>) {
///     y[i] = a * x[i] + y[i];
/// }
/// #[kiln::kernel]
/// fn fill<T: Numeric>(i: Index1D, out: ViewMut<T>, v: T) {
///     out[i] = v;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<f32> = (0..100).map(|i| i as f32).collect();
/// let mut y = vec![1.0f32; 100];
/// ctx.launch(saxpy, 100, (3.0f32, &x, &mut y))?;
/// assert_eq!(y, x.iter().map(|x| 3.0 * x + 1.0).collect::<Vec<f32>>());
/// let mut z = vec![0i64; 3];
/// ctx.launch(fill::<i64>, 3, (&mut z, -7i64))?;
/// assert_eq!(z, [-7, -7, -7]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_macros::kernel;

/// `kiln::lambda!`: a closure as a kernel, its captured values passed as parameters.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0.0f32; 4];
/// for k in [0.5f32, 2.0] {
///     // `k` is captured: a parameter of one compiled kernel, not a constant in two.
///     let ramp = kiln::lambda!(move |i: Index1D, out: ViewMut<f32>| out[i] = i as f32 * k);
///     ctx.launch(ramp, 4, (&mut out,))?;
///     assert_eq!(out, [0.0, k, 2.0 * k, 3.0 * k]);
/// }
/// assert_eq!(ctx.stats().compilations, 1);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_macros::lambda;

/// `#[kiln::device]`: a function of values callable from kernels and usable as a query stage.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::device]
/// fn smoothstep(x: f32) -> f32 {
///     let t = x.clamp(0.0, 1.0);
///     t * t * (3.0 - 2.0 * t)
/// }
/// #[kiln::kernel]
/// fn smooth(i: Index1D, x: ViewMut<f32>) {
///     x[i] = smoothstep(x[i]);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs = [-1.0f32, 0.25, 0.5, 2.0];
/// let mut k = xs.to_vec();
/// ctx.launch(smooth, 4, (&mut k,))?;
/// let q = ctx.from(&xs).map(smoothstep).to_vec()?; // a device function is also a query stage
/// let rust: Vec<f32> = xs.iter().map(|x| { let t = x.clamp(0.0, 1.0); t * t * (3.0 - 2.0 * t) }).collect();
/// assert_eq!((k, q), (rust.clone(), rust));
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_macros::device;

/// `#[kiln::intrinsic(..)]`: a function that calls a backend's own function, or one whose
/// source it gives (`cuda_source`, `opencl_source`, `wgsl_source`), where the target binds
/// it, and runs its Rust body elsewhere (always on the CPU).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::intrinsic(cuda = "hypotf", opencl = "hypot")]
/// fn length2(x: f32, y: f32) -> f32 {
///     (x * x + y * y).sqrt() // what the CPU and wgpu run
/// }
/// #[kiln::kernel]
/// fn lengths(i: Index1D, x: View<f32>, y: View<f32>, out: ViewMut<f32>) {
///     out[i] = length2(x[i], y[i]);
/// }
/// let ir = lengths().ir()?;
/// assert!(kiln::emit(&ir, kiln::Target::CudaC)?.contains("hypotf("));
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0.0f32; 2];
/// ctx.launch(lengths, 2, (&[3.0f32, 5.0][..], &[4.0f32, 12.0][..], &mut out))?;
/// assert_eq!(out, [5.0, 13.0]);
///
/// /// Adds `v` to `out[i]`, in OpenCL C code of its own that takes the view as a pointer and
/// /// its length.
/// #[kiln::intrinsic(
///     opencl = "add_at",
///     opencl_source = "void add_at(__global uint* out, uint n, uint i, uint v) { if (i < n) out[i] += v; }"
/// )]
/// fn add_to(out: ViewMut<u32>, i: u32, v: u32) {
///     out[i] = out[i] + v; // out of bounds, a store is skipped
/// }
/// #[kiln::kernel]
/// fn add_index(i: Index1D, out: ViewMut<u32>) {
///     add_to(out, i, i);
/// }
/// let ir = add_index().ir()?;
/// assert!(kiln::emit(&ir, kiln::Target::OpenClC)?.contains("add_at(out, out_len, "));
/// let mut counts = vec![10u32; 4];
/// ctx.launch(add_index, 4, (&mut counts,))?;
/// assert_eq!(counts, [10, 11, 12, 13]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_macros::intrinsic;

/// `#[derive(kiln::Value)]`: a `#[repr(C)]` struct as a kernel value and buffer element, and
/// as a query row (see [`Vals`](crate::Vals)).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
/// #[repr(C)]
/// struct Rgb {
///     r: f32,
///     g: f32,
///     b: f32,
/// }
/// #[kiln::kernel]
/// fn to_gray(i: Index1D, px: ViewMut<Rgb>) {
///     let p = px[i];
///     let y = 0.25 * p.r + 0.5 * p.g + 0.25 * p.b;
///     px[i] = Rgb { r: y, g: y, b: y };
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut px = vec![Rgb { r: 1.0, g: 0.5, b: 0.0 }, Rgb { r: 0.0, g: 0.0, b: 1.0 }];
/// ctx.launch(to_gray, 2, (&mut px,))?;
/// assert_eq!(px, [Rgb { r: 0.5, g: 0.5, b: 0.5 }, Rgb { r: 0.25, g: 0.25, b: 0.25 }]);
/// // The same struct as query rows.
/// let bright = ctx.from(&px).filter(|p| p.b.gt(0.3)).to_vec()?;
/// assert_eq!(bright, [Rgb { r: 0.5, g: 0.5, b: 0.5 }]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[doc(inline)]
pub use kiln_macros::Value;

/// The index of a work item in a 1D launch: its global position.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn iota(i: Index1D, out: ViewMut<u32>) {
///     out[i] = i;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0u32; 1000];
/// ctx.launch(iota, 999, (&mut out,))?; // the last element lies outside the extent
/// assert_eq!(&out[..999], (0..999).collect::<Vec<u32>>());
/// assert_eq!(out[999], 0);
/// # Ok::<(), kiln::Error>(())
/// ```
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

#[doc(hidden)]
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

#[doc(hidden)]
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
/// A 3-component vector value from its components (`.at(0)` to `.at(2)` read them back).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn cross_z(i: Index1D, a: View<f32>, b: View<f32>, out: ViewMut<Vector<f32, 3>>) {
///     // The cross product of (a, 0, 0) and (0, b, 0) is (0, 0, a * b).
///     out[i] = vec3(0.0f32, 0.0f32, a[i] * b[i]);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (a, b) = ([2.0f32, -1.0], [3.0f32, 4.0]);
/// let mut out = vec![Vector([9.0f32; 3]); 2];
/// ctx.launch(cross_z, 2, (&a[..], &b[..], &mut out))?;
/// assert_eq!(out, [Vector([0.0, 0.0, 6.0]), Vector([0.0, 0.0, -4.0])]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn vec3<T: Scalar>(
    x: impl IntoVal<T>,
    y: impl IntoVal<T>,
    z: impl IntoVal<T>,
) -> Val<Vector<T, 3>> {
    kiln_ir::vector([x.into_val(), y.into_val(), z.into_val()])
}
/// A 4-component vector value from its components (`.at(0)` to `.at(3)` read them back).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn rgba(i: Index1D, gray: View<u8>, out: ViewMut<Vector<u8, 4>>) {
///     let g = gray[i];
///     out[i] = vec4(g, g, g, 255u8);
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let gray = [0u8, 128, 255];
/// let mut out = vec![Vector([0u8; 4]); 3];
/// ctx.launch(rgba, 3, (&gray[..], &mut out))?;
/// let rust: Vec<Vector<u8, 4>> = gray.iter().map(|&g| Vector([g, g, g, 255])).collect();
/// assert_eq!(out, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
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
mod volume;
pub use launch::*;
pub use memory::*;
pub use ops::*;
pub use values::*;
pub use volume::*;
