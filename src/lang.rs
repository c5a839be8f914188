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
#[derive(Clone, Copy, Debug)]
pub struct Index2D {
    /// column
    pub x: Val<u32>,
    /// row
    pub y: Val<u32>,
}

/// The index of a work item in a 3D launch.
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

/// A plain `#[repr(C)]` struct usable as a kernel parameter, local and buffer element;
/// implemented by `#[derive(kiln::Value)]`. In kernel code a value of the struct is a
/// `Val<S>`: `p.x` reads a field, `S { x: .., y: .. }` builds one, `p.x = v` on a `let mut`
/// local or a view element replaces a field.
pub trait Value: kiln_ir::IrStruct {
    /// A struct with the same field names holding one `Val` per field.
    type Parts: Copy;
    /// A struct with the same field names holding each field's [`FieldName`].
    type Names;
    /// The fields of `v`.
    fn parts(v: Val<Self>) -> Self::Parts;
    /// The struct value made of `parts`.
    fn compose(parts: Self::Parts) -> Val<Self>;
    /// The names of the fields.
    fn names() -> Self::Names;
}

/// Field `index` of a [`Value`] struct, of type `F` (generated code).
pub struct FieldName<F> {
    index: u32,
    _f: PhantomData<fn() -> F>,
}
impl<F> FieldName<F> {
    /// The field at position `index` in declaration order.
    pub const fn new(index: u32) -> FieldName<F> {
        FieldName {
            index,
            _f: PhantomData,
        }
    }
}

/// What picking a field out of a `T`'s [`Fields::Names`] gives: a [`FieldName`] to read from
/// a struct value, or the field itself for the index types (generated code).
pub trait Picked<T> {
    /// The field's value.
    type Out;
    /// The field of `from`.
    fn get(self, from: &T) -> Self::Out;
}
impl<S: Value, F: IrType> Picked<Val<S>> for FieldName<F> {
    type Out = Val<F>;
    fn get(self, from: &Val<S>) -> Val<F> {
        from.field::<F>(self.index)
    }
}
impl<T, X> Picked<T> for Val<X> {
    type Out = Val<X>;
    fn get(self, _: &T) -> Val<X> {
        self
    }
}

/// Kernel-side things with named fields: `Val`s of [`Value`] structs and the index types. The
/// macro turns `p.x` into [`field`]`(&p, |n| n.x)`, and field assignments and `..p` in struct
/// literals into uses of [`Fields::fields`] (generated code).
pub trait Fields: Sized {
    /// The struct of fields.
    type Parts;
    /// The struct that names each field for [`field`].
    type Names;
    /// The fields.
    fn fields(&self) -> Self::Parts;
    /// The value made of `parts`.
    fn from_fields(parts: Self::Parts) -> Self;
    /// The field names.
    fn names(&self) -> Self::Names;
}
impl<S: Value> Fields for Val<S> {
    type Parts = S::Parts;
    type Names = S::Names;
    fn fields(&self) -> S::Parts {
        S::parts(*self)
    }
    fn from_fields(parts: S::Parts) -> Val<S> {
        S::compose(parts)
    }
    fn names(&self) -> S::Names {
        S::names()
    }
}

/// The one field of `v` that `pick` names, read alone (generated code for `p.x`).
pub fn field<T: Fields, P: Picked<T>>(v: &T, pick: impl FnOnce(T::Names) -> P) -> P::Out {
    pick(v.names()).get(v)
}

macro_rules! plain_fields {
    ($($t:ty),*) => {$(
        impl Fields for $t {
            type Parts = $t;
            type Names = $t;
            fn fields(&self) -> $t {
                *self
            }
            fn from_fields(parts: $t) -> $t {
                parts
            }
            fn names(&self) -> $t {
                *self
            }
        }
        impl Record for $t {
            type Parts = $t;
            type Built = $t;
            fn build(parts: $t) -> $t {
                parts
            }
        }
    )*};
}
plain_fields!(Index2D, Index3D);

/// `v` with the fields `set` changes (generated code for `p.x = e`).
pub fn with_field<T: Fields>(v: &T, set: impl FnOnce(&mut T::Parts)) -> T {
    let mut parts = v.fields();
    set(&mut parts);
    T::from_fields(parts)
}

/// Types a kernel builds with a struct literal (`S { x: a, y: b }`): the macro fills
/// `Record::Parts` and calls [`Record::build`] (generated code).
pub trait Record {
    /// The struct of fields the literal fills.
    type Parts;
    /// What the literal evaluates to.
    type Built;
    /// The value of the literal.
    fn build(parts: Self::Parts) -> Self::Built;
}
impl<S: Value> Record for S {
    type Parts = S::Parts;
    type Built = Val<S>;
    fn build(parts: S::Parts) -> Val<S> {
        S::compose(parts)
    }
}

/// A read-only view of `T` elements (a buffer parameter).
pub struct View<T>(Mem<T>);
/// A read-write view of `T` elements (a buffer parameter; stores and atomics allowed).
pub struct ViewMut<T>(Mem<T>);
/// Shared memory of a work group: `shared::<T, N>()` or `shared_dynamic::<T>()`.
pub type Shared<T> = Mem<T>;

macro_rules! copy_view {
    ($($v:ident),*) => {$(
        impl<T> Clone for $v<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $v<T> {}
    )*};
}
copy_view!(View, ViewMut);

impl<T: IrType> View<T> {
    /// Number of elements.
    pub fn len(self) -> Val<u32> {
        self.0.len()
    }
    /// Element `i` (zero out of bounds).
    pub fn load(self, i: impl IntoVal<u32>) -> Val<T> {
        self.0.load(i)
    }
}

impl<T: IrType> ViewMut<T> {
    /// Number of elements.
    pub fn len(self) -> Val<u32> {
        self.0.len()
    }
    /// Element `i` (zero out of bounds).
    pub fn load(self, i: impl IntoVal<u32>) -> Val<T> {
        self.0.load(i)
    }
    /// Writes element `i` (skipped out of bounds).
    pub fn store(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) {
        self.0.store(i, v)
    }
    /// The underlying memory, for atomics.
    pub fn memory(self) -> Mem<T> {
        self.0
    }
}

/// A row-major 2D region of a buffer: `rows` rows of `cols` elements, row `r` starting at
/// `r * stride`.
struct Rows<T> {
    mem: Mem<T>,
    rows: Val<u32>,
    cols: Val<u32>,
    stride: Val<u32>,
}
impl<T> Clone for Rows<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Rows<T> {}
impl<T: IrType> Rows<T> {
    /// The buffer index of `(row, col)`, or `u32::MAX` (out of bounds: loads give zero,
    /// stores are skipped) outside the region.
    fn cell(self, row: impl IntoVal<u32>, col: impl IntoVal<u32>) -> Val<u32> {
        let (r, c) = (row.into_val(), col.into_val());
        let inside = r.lt(self.rows).and(c.lt(self.cols));
        kiln_ir::select(inside, r * self.stride + c, u32::MAX)
    }
}

/// A read-only row-major 2D view: `rows` rows of `cols` elements, row `r` starting at
/// `r * stride`. Indexed as `v[(row, col)]` or with an [`Index2D`].
pub struct View2D<T>(Rows<T>);
/// A read-write row-major 2D view (see [`View2D`]).
pub struct View2DMut<T>(Rows<T>);
macro_rules! view2d {
    ($($v:ident),*) => {$(
        impl<T> Clone for $v<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $v<T> {}
        impl<T: IrType> $v<T> {
            /// Number of rows.
            pub fn rows(self) -> Val<u32> {
                self.0.rows
            }
            /// Number of columns.
            pub fn cols(self) -> Val<u32> {
                self.0.cols
            }
            /// Elements from one row to the next.
            pub fn stride(self) -> Val<u32> {
                self.0.stride
            }
            /// Element `(row, col)`; zero outside the view.
            pub fn load(self, row: impl IntoVal<u32>, col: impl IntoVal<u32>) -> Val<T> {
                self.0.mem.load(self.0.cell(row, col))
            }
        }
    )*};
}
view2d!(View2D, View2DMut);

impl<T: IrType> View2DMut<T> {
    /// Writes element `(row, col)`; skipped outside the view.
    pub fn store(self, row: impl IntoVal<u32>, col: impl IntoVal<u32>, v: impl IntoVal<T>) {
        self.0.mem.store(self.0.cell(row, col), v)
    }
}

/// Kernel parameter types: how each is declared in the IR (generated code).
pub trait KernelParam {
    /// What the kernel body sees.
    type Handle;
    /// Declares the parameter `name` in the kernel being built.
    fn declare(scope: &KernelScope, name: &str) -> Self::Handle;
}
impl<T: IrType> KernelParam for T {
    type Handle = Val<T>;
    fn declare(scope: &KernelScope, name: &str) -> Val<T> {
        scope.value::<T>(name)
    }
}
impl<T: IrType> KernelParam for View<T> {
    type Handle = View<T>;
    fn declare(scope: &KernelScope, name: &str) -> View<T> {
        View(scope.buffer::<T>(name, Access::Read))
    }
}
impl<T: IrType> KernelParam for ViewMut<T> {
    type Handle = ViewMut<T>;
    fn declare(scope: &KernelScope, name: &str) -> ViewMut<T> {
        ViewMut(scope.buffer::<T>(name, Access::ReadWrite))
    }
}
fn declare_2d<T: IrType>(scope: &KernelScope, name: &str, access: Access) -> Rows<T> {
    Rows {
        mem: scope.buffer::<T>(name, access),
        rows: scope.value::<u32>(&format!("{name}_rows")),
        cols: scope.value::<u32>(&format!("{name}_cols")),
        stride: scope.value::<u32>(&format!("{name}_stride")),
    }
}
impl<T: IrType> KernelParam for View2D<T> {
    type Handle = View2D<T>;
    fn declare(scope: &KernelScope, name: &str) -> View2D<T> {
        View2D(declare_2d(scope, name, Access::Read))
    }
}
impl<T: IrType> KernelParam for View2DMut<T> {
    type Handle = View2DMut<T>;
    fn declare(scope: &KernelScope, name: &str) -> View2DMut<T> {
        View2DMut(declare_2d(scope, name, Access::ReadWrite))
    }
}

/// Things a kernel indexes with `x[i]` (views, shared memory, local arrays); the macro turns
/// reads into [`Indexable::load_at`] and writes into [`Indexable::store_at`].
pub trait Indexable<I> {
    /// The element type.
    type Elem;
    /// Element `i`.
    fn load_at(self, i: I) -> Val<Self::Elem>;
    /// Writes element `i`; `ViewMut`, shared memory and local arrays only.
    fn store_at(self, i: I, v: impl IntoVal<Self::Elem>);
}

/// Integer index values (any integer type; negative ones are out of bounds).
pub trait IndexValue {
    /// The index as `u32`.
    fn to_index(self) -> Val<u32>;
}
macro_rules! index_value {
    ($($t:ty),*) => {$(
        impl IndexValue for $t {
            fn to_index(self) -> Val<u32> {
                kiln_ir::lit(self).cast::<u32>()
            }
        }
        impl IndexValue for Val<$t> {
            fn to_index(self) -> Val<u32> {
                self.cast::<u32>()
            }
        }
    )*};
}
index_value!(i8, i16, i32, i64, u8, u16, u64);
impl IndexValue for u32 {
    fn to_index(self) -> Val<u32> {
        kiln_ir::lit(self)
    }
}
impl IndexValue for Val<u32> {
    fn to_index(self) -> Val<u32> {
        self
    }
}

/// Rejects a store into a read-only view while the kernel is built (the kernel fails to build
/// with this message).
fn read_only(what: &str) {
    kiln_ir::record_error(format!(
        "`{what}` is read-only: declare the parameter as ViewMut<T> (or View2DMut<T>) to write it"
    ));
}

impl<T: IrType, I: IndexValue> Indexable<I> for View<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        self.0.load(i.to_index())
    }
    fn store_at(self, _i: I, _v: impl IntoVal<T>) {
        read_only("View")
    }
}
impl<T: IrType, I: IndexValue> Indexable<I> for ViewMut<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        self.0.load(i.to_index())
    }
    fn store_at(self, i: I, v: impl IntoVal<T>) {
        self.0.store(i.to_index(), v)
    }
}
impl<T: IrType, I: IndexValue> Indexable<I> for Mem<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        self.load(i.to_index())
    }
    fn store_at(self, i: I, v: impl IntoVal<T>) {
        self.store(i.to_index(), v)
    }
}
impl<T: IrType, I: IndexValue> Indexable<I> for LocalArray<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        self.get(i.to_index())
    }
    fn store_at(self, i: I, v: impl IntoVal<T>) {
        self.set(i.to_index(), v)
    }
}
/// Indices of 2D views: `(row, col)` of any integer types, or an [`Index2D`] (row `y`,
/// column `x`).
pub trait CellIndex {
    /// Row and column.
    fn row_col(self) -> (Val<u32>, Val<u32>);
}
impl<R: IndexValue, C: IndexValue> CellIndex for (R, C) {
    fn row_col(self) -> (Val<u32>, Val<u32>) {
        (self.0.to_index(), self.1.to_index())
    }
}
impl CellIndex for Index2D {
    fn row_col(self) -> (Val<u32>, Val<u32>) {
        (self.y, self.x)
    }
}
impl<T: IrType, I: CellIndex> Indexable<I> for View2D<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        let (r, c) = i.row_col();
        self.load(r, c)
    }
    fn store_at(self, _i: I, _v: impl IntoVal<T>) {
        read_only("View2D")
    }
}
impl<T: IrType, I: CellIndex> Indexable<I> for View2DMut<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        let (r, c) = i.row_col();
        self.load(r, c)
    }
    fn store_at(self, i: I, v: impl IntoVal<T>) {
        let (r, c) = i.row_col();
        self.store(r, c, v)
    }
}

/// A static shared array of `N` elements of `T`, one per work group (declare it in the kernel
/// body, not in a branch or loop). Its contents when the group starts are unspecified on GPU
/// backends: write an element (and pass a `barrier()`) before reading it.
pub fn shared<T: IrType, const N: u32>(scope: &KernelScope, name: &str) -> Mem<T> {
    scope.shared::<T>(name, SharedLen::Static(N))
}

/// A shared array of `T` whose length is given at launch (`Grid::dynamic_shared`); like
/// [`shared`], it starts unspecified on GPU backends.
pub fn shared_dynamic<T: IrType>(scope: &KernelScope, name: &str) -> Mem<T> {
    scope.shared::<T>(name, SharedLen::Dynamic)
}

/// A fixed-size local array of `N` elements, every one `init`.
pub fn local_array<T: IrType, const N: u32>(name: &str, init: impl IntoVal<T>) -> LocalArray<T> {
    let a = LocalArray::<T>::new(name, N);
    let init = init.into_val();
    kiln_ir::for_range(0u32, N, |i| a.set(i, init));
    a
}

/// A local array holding `items`.
pub fn local_array_of<T: IrType, const N: usize>(name: &str, items: [Val<T>; N]) -> LocalArray<T> {
    let a = LocalArray::<T>::new(name, N as u32);
    for (i, v) in items.into_iter().enumerate() {
        a.set(i as u32, v);
    }
    a
}

/// Subgroup (warp) lanes; 1 where the device runs one lane per subgroup.
pub fn subgroup_size() -> Val<u32> {
    builtin(Builtin::SubgroupSize)
}

/// This work item's lane in its subgroup.
pub fn subgroup_lane() -> Val<u32> {
    builtin(Builtin::SubgroupLane)
}

macro_rules! atomics {
    ($bound:ident: $($name:ident, $doc:literal;)*) => {$(
        #[doc = $doc]
        #[doc = " Returns the old value."]
        pub fn $name<T: $bound, V: AtomicTarget<T>>(
            view: &V,
            i: impl IndexValue,
            v: impl IntoVal<T>,
        ) -> Val<T> {
            view.memory().$name(i.to_index(), v)
        }
    )*};
}
atomics! {
    Numeric:
    atomic_add, "Atomically adds `v` to element `i`.";
    atomic_sub, "Atomically subtracts `v` from element `i`.";
    atomic_min, "Atomically keeps the smaller of element `i` and `v`.";
    atomic_max, "Atomically keeps the larger of element `i` and `v`.";
    atomic_exchange, "Atomically replaces element `i` with `v`.";
}
atomics! {
    Int:
    atomic_and, "Atomically ands `v` into element `i`.";
    atomic_or, "Atomically ors `v` into element `i`.";
    atomic_xor, "Atomically xors `v` into element `i`.";
}

/// Atomically sets element `i` to `v` if it equals `compare`; returns the old value.
pub fn atomic_compare_exchange<T: Numeric, V: AtomicTarget<T>>(
    view: &V,
    i: impl IndexValue,
    compare: impl IntoVal<T>,
    v: impl IntoVal<T>,
) -> Val<T> {
    view.memory()
        .atomic_compare_exchange(i.to_index(), compare, v)
}

/// Memory atomics work on: `ViewMut<T>` and shared arrays.
pub trait AtomicTarget<T> {
    /// The memory.
    fn memory(&self) -> Mem<T>;
}
impl<T: IrType> AtomicTarget<T> for ViewMut<T> {
    fn memory(&self) -> Mem<T> {
        self.0
    }
}
impl<T: IrType> AtomicTarget<T> for Mem<T> {
    fn memory(&self) -> Mem<T> {
        *self
    }
}

/// Comparisons the macro writes for `<`, `<=`, `>`, `>=`, `==`, `!=` between values and
/// constants in either order.
pub trait Compare<Rhs> {
    /// `self < rhs`
    fn lt_(self, rhs: Rhs) -> Val<bool>;
    /// `self <= rhs`
    fn le_(self, rhs: Rhs) -> Val<bool>;
    /// `self > rhs`
    fn gt_(self, rhs: Rhs) -> Val<bool>;
    /// `self >= rhs`
    fn ge_(self, rhs: Rhs) -> Val<bool>;
    /// `self == rhs`
    fn eq_(self, rhs: Rhs) -> Val<bool>;
    /// `self != rhs`
    fn ne_(self, rhs: Rhs) -> Val<bool>;
}
impl<T: Scalar, B: IntoVal<T>> Compare<B> for Val<T> {
    fn lt_(self, rhs: B) -> Val<bool> {
        self.lt(rhs)
    }
    fn le_(self, rhs: B) -> Val<bool> {
        self.le(rhs)
    }
    fn gt_(self, rhs: B) -> Val<bool> {
        self.gt(rhs)
    }
    fn ge_(self, rhs: B) -> Val<bool> {
        self.ge(rhs)
    }
    fn eq_(self, rhs: B) -> Val<bool> {
        self.eq(rhs)
    }
    fn ne_(self, rhs: B) -> Val<bool> {
        self.ne(rhs)
    }
}
macro_rules! lhs_compare {
    ($($t:ty),*) => {$(
        impl Compare<Val<$t>> for $t {
            fn lt_(self, rhs: Val<$t>) -> Val<bool> { rhs.gt(self) }
            fn le_(self, rhs: Val<$t>) -> Val<bool> { rhs.ge(self) }
            fn gt_(self, rhs: Val<$t>) -> Val<bool> { rhs.lt(self) }
            fn ge_(self, rhs: Val<$t>) -> Val<bool> { rhs.le(self) }
            fn eq_(self, rhs: Val<$t>) -> Val<bool> { rhs.eq(self) }
            fn ne_(self, rhs: Val<$t>) -> Val<bool> { rhs.ne(self) }
        }
    )*};
}
lhs_compare!(bool, i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

/// `a && b` with both sides evaluated. `#[kiln::kernel]` writes `&&` with this where the right
/// side is pure, and as an `if` where it may have an effect, so the right side runs only when
/// Rust would run it.
pub fn and(a: impl IntoVal<bool>, b: impl IntoVal<bool>) -> Val<bool> {
    a.into_val().and(b)
}

/// `a || b` with both sides evaluated (see [`and`] for how kernels use it).
pub fn or(a: impl IntoVal<bool>, b: impl IntoVal<bool>) -> Val<bool> {
    a.into_val().or(b)
}

/// `x as U` for values and constants.
pub trait CastTo {
    /// The conversion under the IR's cast rules (saturating float-to-int, NaN to 0).
    fn cast_to<U: Scalar>(self) -> Val<U>;
}
impl<T: Scalar> CastTo for Val<T> {
    fn cast_to<U: Scalar>(self) -> Val<U> {
        self.cast::<U>()
    }
}
macro_rules! cast_lit {
    ($($t:ty),*) => {$(
        impl CastTo for $t {
            fn cast_to<U: Scalar>(self) -> Val<U> {
                kiln_ir::lit(self).cast::<U>()
            }
        }
    )*};
}
cast_lit!(bool, i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

/// `value` as a `Val<T>` (for `let x: T = value;`).
pub fn typed<T: Scalar>(value: impl IntoVal<T>) -> Val<T> {
    value.into_val()
}

/// The result of an `if`/`else` used as a value: each branch puts its value, the code after
/// takes it (generated code).
pub struct Slot<T> {
    var: std::cell::Cell<Option<Var<T>>>,
    name: &'static str,
}
impl<T: IrType> Slot<T> {
    /// An empty slot; the local is declared by the first branch that puts a value.
    pub fn new(name: &'static str) -> Slot<T> {
        Slot {
            var: std::cell::Cell::new(None),
            name,
        }
    }
    /// Stores a branch's value.
    pub fn put(&self, v: impl IntoVal<T>) {
        match self.var.get() {
            Some(var) => var.set(v),
            None => self.var.set(Some(Var::new(self.name, v))),
        }
    }
    /// The value after the branches.
    pub fn take(&self) -> Val<T> {
        match self.var.get() {
            Some(var) => var.get(),
            None => {
                kiln_ir::build_error("an `if` used as a value has no branch with a value".into())
            }
        }
    }
}

/// A kernel written with `#[kiln::kernel]`: its name, the dimensions of its index (0 without
/// one) and the function that builds its IR. `P` is the tuple of its parameter types.
pub struct KernelFn<P> {
    name: &'static str,
    dims: usize,
    build: fn(&KernelScope),
    _p: PhantomData<fn(P)>,
}

impl<P> Clone for KernelFn<P> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P> Copy for KernelFn<P> {}

impl<P> KernelFn<P> {
    /// A kernel definition (generated code).
    pub fn new(name: &'static str, dims: usize, build: fn(&KernelScope)) -> KernelFn<P> {
        KernelFn {
            name,
            dims,
            build,
            _p: PhantomData,
        }
    }

    /// The kernel's IR, built once per process (and per generic instantiation). Returns the
    /// build or validation error, naming the kernel.
    pub fn ir(&self) -> Result<Arc<Kernel>> {
        let build = self.build;
        cached_ir(build as usize, self.name, build)
    }

    /// Dimensions of the kernel's index (0 when it takes none).
    pub fn dims(&self) -> usize {
        self.dims
    }
}

/// The IR built by the build function at address `key`, built on first use.
fn cached_ir(key: usize, name: &str, build: impl FnOnce(&KernelScope)) -> Result<Arc<Kernel>> {
    type Built = std::result::Result<Arc<Kernel>, kiln_ir::IrError>;
    static BUILT: OnceLock<Mutex<HashMap<usize, Built>>> = OnceLock::new();
    let map = BUILT.get_or_init(Default::default);
    if let Some(hit) = map.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(hit.clone()?);
    }
    let built = Kernel::build(name, build).map(Arc::new);
    map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, built.clone());
    Ok(built?)
}

/// A kernel written as a closure with `kiln::lambda!`: the values it captured become
/// parameters after the closure's own, passed by every launch. `P` is the tuple of the
/// closure's parameter types (after the index), `C` the tuple of captured values.
pub struct Lambda<P, C> {
    name: &'static str,
    dims: usize,
    captured: C,
    build: fn(&KernelScope, PhantomData<C>),
    _p: PhantomData<fn(P)>,
}

impl<P, C: Copy> Clone for Lambda<P, C> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<P, C: Copy> Copy for Lambda<P, C> {}

impl<P, C: Captures> Lambda<P, C> {
    /// A closure kernel (generated code): `build` declares the parameters, then the captures
    /// in order with [`capture`], then the body.
    pub fn new(
        name: &'static str,
        dims: usize,
        captured: C,
        build: fn(&KernelScope, PhantomData<C>),
    ) -> Lambda<P, C> {
        Lambda {
            name,
            dims,
            captured,
            build,
            _p: PhantomData,
        }
    }

    /// The kernel's IR, built once per process (per closure and instantiation); the captured
    /// values are parameters, so it does not depend on them. Errors as [`KernelFn::ir`].
    pub fn ir(&self) -> Result<Arc<Kernel>> {
        let build = self.build;
        cached_ir(build as usize, self.name, |scope| build(scope, PhantomData))
    }
}

/// Declares the parameter `name` for a captured value; `select` is never called, it only
/// names which element of the capture tuple `C` (and so which type) the value is (generated
/// code for `kiln::lambda!`).
pub fn capture<C, T: IrType>(
    scope: &KernelScope,
    name: &str,
    _: PhantomData<C>,
    select: impl Fn(&C) -> &T,
) -> Val<T> {
    let _ = select;
    scope.value::<T>(name)
}

/// Tuples of captured values (kiln values: scalars, vectors, `#[derive(kiln::Value)]`
/// structs), passed after a closure kernel's own arguments.
pub trait Captures: Copy + 'static {
    /// The launch arguments, in capture order.
    fn captured_args(&self) -> Vec<LaunchArg<'static>>;
}
macro_rules! captures {
    ($(($($c:ident $v:ident),*))*) => {$(
        impl<$($c: IrType),*> Captures for ($($c,)*) {
            #[allow(unused_variables)]
            fn captured_args(&self) -> Vec<LaunchArg<'static>> {
                let ($($v,)*) = *self;
                vec![$(LaunchArg::value($v)),*]
            }
        }
    )*};
}
captures! {
    ()
    (C0 c0)
    (C0 c0, C1 c1)
    (C0 c0, C1 c1, C2 c2)
    (C0 c0, C1 c1, C2 c2, C3 c3)
    (C0 c0, C1 c1, C2 c2, C3 c3, C4 c4)
    (C0 c0, C1 c1, C2 c2, C3 c3, C4 c4, C5 c5)
    (C0 c0, C1 c1, C2 c2, C3 c3, C4 c4, C5 c5, C6 c6)
    (C0 c0, C1 c1, C2 c2, C3 c3, C4 c4, C5 c5, C6 c6, C7 c7)
}

/// What a launch takes from a kernel: its IR, the dimensions of its index and the values it
/// captured.
pub struct LaunchKernel {
    ir: Arc<Kernel>,
    dims: usize,
    captured: Vec<LaunchArg<'static>>,
}

/// Anything that names a kernel: a `#[kiln::kernel]` function item (`saxpy`,
/// `apply::<f32, Square>`), the [`KernelFn`] it returns, or a [`Lambda`].
pub trait IntoKernel<P> {
    /// The kernel's IR and captures; fails with its build error.
    fn into_launch(self) -> Result<LaunchKernel>;
}
impl<P> IntoKernel<P> for KernelFn<P> {
    fn into_launch(self) -> Result<LaunchKernel> {
        Ok(LaunchKernel {
            ir: self.ir()?,
            dims: self.dims,
            captured: Vec::new(),
        })
    }
}
impl<P, F: FnOnce() -> KernelFn<P>> IntoKernel<P> for F {
    fn into_launch(self) -> Result<LaunchKernel> {
        self().into_launch()
    }
}
impl<P, C: Captures> IntoKernel<P> for Lambda<P, C> {
    fn into_launch(self) -> Result<LaunchKernel> {
        Ok(LaunchKernel {
            ir: self.ir()?,
            dims: self.dims,
            captured: self.captured.captured_args(),
        })
    }
}

/// How far a launch reaches per axis: `n`, `(width, height)` or `(x, y, z)` work items, from
/// `usize`, `u32` or `i32` (what an integer literal is); a negative `i32` is kept as its
/// two's-complement bits, which [`Context::launch`] refuses as negative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent(pub [u64; 3]);
impl From<i32> for Extent {
    fn from(n: i32) -> Extent {
        Extent([n as i64 as u64, 1, 1])
    }
}
impl From<(i32, i32)> for Extent {
    fn from((x, y): (i32, i32)) -> Extent {
        Extent([x as i64 as u64, y as i64 as u64, 1])
    }
}
impl From<(i32, i32, i32)> for Extent {
    fn from((x, y, z): (i32, i32, i32)) -> Extent {
        Extent([x as i64 as u64, y as i64 as u64, z as i64 as u64])
    }
}
impl From<usize> for Extent {
    fn from(n: usize) -> Extent {
        Extent([n as u64, 1, 1])
    }
}
impl From<u32> for Extent {
    fn from(n: u32) -> Extent {
        Extent([n as u64, 1, 1])
    }
}
impl From<(usize, usize)> for Extent {
    fn from((x, y): (usize, usize)) -> Extent {
        Extent([x as u64, y as u64, 1])
    }
}
impl From<(u32, u32)> for Extent {
    fn from((x, y): (u32, u32)) -> Extent {
        Extent([x as u64, y as u64, 1])
    }
}
impl From<(usize, usize, usize)> for Extent {
    fn from((x, y, z): (usize, usize, usize)) -> Extent {
        Extent([x as u64, y as u64, z as u64])
    }
}
impl From<(u32, u32, u32)> for Extent {
    fn from((x, y, z): (u32, u32, u32)) -> Extent {
        Extent([x as u64, y as u64, z as u64])
    }
}

/// A host argument for a kernel parameter of type `P`.
pub trait HostArg<'a, P> {
    /// Appends the launch arguments for the parameter; fails for a buffer of another context.
    fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()>;
}
impl<'a, T: IrType> HostArg<'a, T> for T {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::value(self));
        Ok(())
    }
}
impl<'a, T: IrType> HostArg<'a, View<T>> for &'a [T] {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read(self));
        Ok(())
    }
}
impl<'a, T: IrType> HostArg<'a, View<T>> for &'a Vec<T> {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read(self));
        Ok(())
    }
}
impl<'a, T: IrType> HostArg<'a, ViewMut<T>> for &'a mut [T] {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read_write(self));
        Ok(())
    }
}
impl<'a, T: IrType> HostArg<'a, ViewMut<T>> for &'a mut Vec<T> {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read_write(self));
        Ok(())
    }
}
macro_rules! buffer_arg {
    ($($p:ident),*) => {$(
        impl<'a, T: Scalar> HostArg<'a, $p<T>> for &'a Buffer<T> {
            fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
                ctx.check_buffer(self)?;
                out.push(LaunchArg::Device(self.memory()));
                Ok(())
            }
        }
    )*};
}
buffer_arg!(View, ViewMut);

/// Host data for a `View2D`/`View2DMut` parameter: `rows` rows of `cols` elements with
/// `stride` elements from one row to the next.
pub struct Slice2D<S> {
    data: S,
    rows: u32,
    cols: u32,
    stride: u32,
}
impl<S> Slice2D<S> {
    /// `data` as rows of `cols` elements (stride = `cols`); the last partial row is left out.
    pub fn new<T>(data: S, cols: usize) -> Slice2D<S>
    where
        S: AsRef<[T]>,
    {
        let len = data.as_ref().len();
        let rows = len.checked_div(cols).unwrap_or(0);
        Slice2D {
            data,
            rows: rows.min(u32::MAX as usize) as u32,
            cols: cols.min(u32::MAX as usize) as u32,
            stride: cols.min(u32::MAX as usize) as u32,
        }
    }
    /// `rows` rows of `cols` elements, row `r` starting at `r * stride`. Fails with
    /// `ViewOutOfBounds` when the data is shorter than that or a count exceeds `u32::MAX`.
    pub fn with_stride<T>(data: S, rows: usize, cols: usize, stride: usize) -> Result<Slice2D<S>>
    where
        S: AsRef<[T]>,
    {
        let need = if rows == 0 {
            0
        } else {
            (rows - 1).saturating_mul(stride).saturating_add(cols)
        };
        let max = u32::MAX as usize;
        let len = data.as_ref().len();
        if len < need || [rows, cols, stride].iter().any(|&n| n > max) {
            return Err(Error::ViewOutOfBounds {
                rows,
                cols,
                stride,
                need,
                len,
                max,
            });
        }
        Ok(Slice2D {
            data,
            rows: rows as u32,
            cols: cols as u32,
            stride: stride as u32,
        })
    }
}
impl<'a, T: IrType> HostArg<'a, View2D<T>> for Slice2D<&'a [T]> {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read(self.data));
        out.extend([self.rows, self.cols, self.stride].map(LaunchArg::value));
        Ok(())
    }
}
impl<'a, T: IrType> HostArg<'a, View2DMut<T>> for Slice2D<&'a mut [T]> {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read_write(self.data));
        out.extend([self.rows, self.cols, self.stride].map(LaunchArg::value));
        Ok(())
    }
}

/// The tuple of host arguments for a kernel whose parameter types are the tuple `P`.
pub trait KernelArgs<'a, P> {
    /// The launch arguments in parameter order.
    fn launch_args(self, ctx: &Context) -> Result<Vec<LaunchArg<'a>>>;
}
macro_rules! kernel_args {
    ($(($($p:ident $a:ident $v:ident),*))*) => {$(
        impl<'a, $($p, $a: HostArg<'a, $p>),*> KernelArgs<'a, ($($p,)*)> for ($($a,)*) {
            #[allow(unused_variables, unused_mut)]
            fn launch_args(self, ctx: &Context) -> Result<Vec<LaunchArg<'a>>> {
                let ($($v,)*) = self;
                let mut out = Vec::new();
                $($v.push_args(ctx, &mut out)?;)*
                Ok(out)
            }
        }
    )*};
}
kernel_args! {
    ()
    (P0 A0 a0)
    (P0 A0 a0, P1 A1 a1)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4, P5 A5 a5)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4, P5 A5 a5, P6 A6 a6)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4, P5 A5 a5, P6 A6 a6, P7 A7 a7)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4, P5 A5 a5, P6 A6 a6, P7 A7 a7, P8 A8 a8)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4, P5 A5 a5, P6 A6 a6, P7 A7 a7, P8 A8 a8, P9 A9 a9)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4, P5 A5 a5, P6 A6 a6, P7 A7 a7, P8 A8 a8, P9 A9 a9, P10 A10 a10)
    (P0 A0 a0, P1 A1 a1, P2 A2 a2, P3 A3 a3, P4 A4 a4, P5 A5 a5, P6 A6 a6, P7 A7 a7, P8 A8 a8, P9 A9 a9, P10 A10 a10, P11 A11 a11)
}

/// Work items per group of an auto-grouped launch with `dims` axes.
fn auto_group_size(dims: usize, max: u32) -> [u32; 3] {
    let g = match dims {
        2 => [16, 16, 1],
        3 => [8, 8, 4],
        _ => [256, 1, 1],
    };
    let mut g = g;
    while g.iter().product::<u32>() > max.max(1) {
        let i = (0..3).max_by_key(|&i| g[i]).unwrap_or(0);
        g[i] = (g[i] / 2).max(1);
    }
    g
}

impl Context {
    /// Runs `kernel` over `extent` work items (`n`, `(width, height)` or `(x, y, z)`), grouped
    /// automatically; the body runs only for indices inside the extent. `args` is the tuple of
    /// arguments after the index: slices or `Buffer`s for views, values for values. Host
    /// slices are up to date when it returns. Fails with the kernel's build error, the
    /// backend's compile or launch error, or `Unsupported` for an extent beyond `u32::MAX` or
    /// below 0 along any axis (an integer literal extent such as `3001` is an `i32`).
    pub fn launch<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        extent: impl Into<Extent>,
        args: A,
    ) -> Result<()> {
        let k = kernel.into_launch()?;
        let extent = extent.into().0;
        let size = auto_group_size(k.dims, self.device().max_group_size);
        let mut groups = [1u32; 3];
        for d in 0..3 {
            let what = match i64::try_from(extent[d]) {
                Err(_) => format!("a negative extent ({}) along axis {d}", extent[d] as i64),
                Ok(_) if extent[d] > u32::MAX as u64 => format!(
                    "an extent of {} work items along axis {d} (at most u32::MAX)",
                    extent[d]
                ),
                Ok(_) => {
                    groups[d] = extent[d].div_ceil(size[d] as u64) as u32;
                    continue;
                }
            };
            return Err(Error::Unsupported {
                backend: self.device().backend,
                what,
            });
        }
        if extent.contains(&0) {
            return Ok(());
        }
        let grid = Grid {
            groups,
            group_size: size,
            dynamic_shared: Vec::new(),
        };
        self.launch_with_extent(k, &grid, extent, args)
    }

    /// Runs `kernel` over `groups` groups of `group_size` work items (each a `u32`, `(x, y)`
    /// or `(x, y, z)`); an index parameter then covers the whole grid. Errors as
    /// [`Context::launch`].
    pub fn launch_grouped<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        groups: impl Into<Extent>,
        group_size: impl Into<Extent>,
        args: A,
    ) -> Result<()> {
        let (g, s) = (groups.into().0, group_size.into().0);
        let to32 = |v: [u64; 3]| -> Result<[u32; 3]> {
            let mut out = [0u32; 3];
            for d in 0..3 {
                out[d] = u32::try_from(v[d]).map_err(|_| Error::Unsupported {
                    backend: self.device().backend,
                    what: match i64::try_from(v[d]) {
                        Ok(_) => format!("{} along axis {d} is more than u32::MAX", v[d]),
                        Err(_) => format!("{} along axis {d} is negative", v[d] as i64),
                    },
                })?;
            }
            Ok(out)
        };
        let grid = Grid {
            groups: to32(g)?,
            group_size: to32(s)?,
            dynamic_shared: Vec::new(),
        };
        self.launch_grid(kernel, &grid, args)
    }

    /// Runs `kernel` over `grid`, which also gives the element counts of the kernel's
    /// `shared_dynamic` arrays. Errors as [`Context::launch`].
    pub fn launch_grid<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        grid: &Grid,
        args: A,
    ) -> Result<()> {
        let k = kernel.into_launch()?;
        let extent: [u64; 3] =
            std::array::from_fn(|d| grid.groups[d] as u64 * grid.group_size[d] as u64);
        self.launch_with_extent(k, grid, extent, args)
    }

    fn launch_with_extent<'a, P, A: KernelArgs<'a, P>>(
        &self,
        k: LaunchKernel,
        grid: &Grid,
        extent: [u64; 3],
        args: A,
    ) -> Result<()> {
        let mut args = args.launch_args(self)?;
        args.extend(k.captured);
        for &e in extent.iter().take(k.dims) {
            args.push(LaunchArg::value(e.min(u32::MAX as u64) as u32));
        }
        self.launch_ir(&k.ir, grid, &mut args)
    }
}
