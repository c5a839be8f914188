//! Memory a kernel reads and writes: views (1D and 2D), indexing, shared and private
//! arrays, subgroup builtins and atomics.

use super::*;

/// A read-only view of `T` elements (a buffer parameter).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn gather(i: Index1D, table: View<f32>, at: View<u32>, out: ViewMut<f32>) {
///     // A load past the end reads 0.
///     out[i] = table[at[i]] + table.len() as f32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (table, at) = ([10.0f32, 20.0, 30.0], [2u32, 0, 7]);
/// let mut out = vec![0.0f32; 3];
/// ctx.launch(gather, 3, (&table[..], &at[..], &mut out))?;
/// assert_eq!(out, [33.0, 13.0, 3.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct View<T>(Mem<T>);
/// A read-write view of `T` elements (a buffer parameter; stores and atomics allowed).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn clamp_in_place(i: Index1D, x: ViewMut<i32>, hi: i32) {
///     if x[i] > hi {
///         x[i] = hi;
///     }
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![5, -3, 12, 9];
/// ctx.launch(clamp_in_place, x.len(), (&mut x, 8))?;
/// assert_eq!(x, [5, -3, 8, 8]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct ViewMut<T>(Mem<T>);
/// Shared memory of a work group: what `shared::<T, N>()` and `shared_dynamic::<T>()` give;
/// `tile[i]` reads and writes it, and the `atomic_*` functions take it.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// Counts each group's odd elements in shared memory, then adds the count to the total.
/// #[kiln::kernel]
/// fn count_odd(x: View<u32>, total: ViewMut<u32>) {
///     let count: Shared<u32> = shared::<u32, 1>();
///     if local_id(Dim::X) == 0 {
///         count[0] = 0u32;
///     }
///     barrier();
///     if x[global_id(Dim::X)] % 2 == 1 {
///         atomic_add(&count, 0u32, 1u32);
///     }
///     barrier();
///     if local_id(Dim::X) == 0 {
///         atomic_add(&total, 0u32, count[0]);
///     }
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<u32> = (0..64).map(|i| i * 7 + 3).collect();
/// let mut total = vec![0u32];
/// ctx.launch_grouped(count_odd, 4u32, 16u32, (&x, &mut total))?;
/// assert_eq!(total[0] as usize, x.iter().filter(|v| *v % 2 == 1).count());
/// # Ok::<(), kiln::Error>(())
/// ```
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
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn lengths(i: Index1D, a: View<f32>, b: View<u8>, out: ViewMut<u32>) {
    ///     out[0] = a.len();
    ///     out[1] = b.len();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 2];
    /// ctx.launch(lengths, 1, (&[1.0f32, 2.0, 3.0][..], &[7u8; 1000][..], &mut out))?;
    /// assert_eq!(out, [3, 1000]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn len(self) -> Val<u32> {
        self.0.len()
    }
    /// Element `i` (zero out of bounds); what `x[i]` reads.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn shift_left(i: Index1D, x: View<i32>, out: ViewMut<i32>) {
    ///     out[i] = x.load(i + 1); // the last one reads past the end: 0
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x = [4, 5, 6];
    /// let mut out = vec![9i32; 3];
    /// ctx.launch(shift_left, 3, (&x[..], &mut out))?;
    /// assert_eq!(out, [5, 6, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn load(self, i: impl IntoVal<u32>) -> Val<T> {
        self.0.load(i)
    }
}

impl<T: IrType> ViewMut<T> {
    /// Number of elements.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn fill_tail(i: Index1D, x: ViewMut<u32>) {
    ///     // Each work item writes the element `i` places from the end.
    ///     x[x.len() - 1 - i] = i;
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut x = vec![0u32; 5];
    /// ctx.launch(fill_tail, 3, (&mut x,))?;
    /// assert_eq!(x, [0, 0, 2, 1, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn len(self) -> Val<u32> {
        self.0.len()
    }
    /// Element `i` (zero out of bounds); what `x[i]` reads.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn running(i: Index1D, x: ViewMut<u64>) {
    ///     // One work item (the launch's extent is 1) adds up the whole view.
    ///     for j in 1u32..x.len() {
    ///         x.store(j, x.load(j - 1) + x.load(j));
    ///     }
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut x = vec![1u64, 2, 3, 4];
    /// ctx.launch(running, 1, (&mut x,))?;
    /// assert_eq!(x, [1, 3, 6, 10]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn load(self, i: impl IntoVal<u32>) -> Val<T> {
        self.0.load(i)
    }
    /// Writes element `i` (skipped out of bounds); what `x[i] = v` writes.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn spread(i: Index1D, x: ViewMut<i16>) {
    ///     x.store(i * 2, -1i16); // the stores past the end are skipped
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut x = vec![0i16; 5];
    /// ctx.launch(spread, 5, (&mut x,))?;
    /// assert_eq!(x, [-1, 0, -1, 0, -1]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn store(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) {
        self.0.store(i, v)
    }
    /// The underlying memory, what the `atomic_*` functions work on.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn count_odd(i: Index1D, x: View<u32>, count: ViewMut<u32>) {
    ///     if x[i] % 2 == 1 {
    ///         count.memory().atomic_add(0u32, 1u32);
    ///     }
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (0..101).collect();
    /// let mut count = vec![0u32];
    /// ctx.launch(count_odd, x.len(), (&x, &mut count))?;
    /// assert_eq!(count[0], 50);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn row_sums(r: Index1D, a: View2D<u32>, sums: ViewMut<u32>) {
///     let mut s = 0u32;
///     for c in 0..a.cols() {
///         s = s + a[(r, c)];
///     }
///     sums[r] = s;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let a: Vec<u32> = (1..=6).collect(); // 2 rows of 3
/// let mut sums = vec![0u32; 2];
/// ctx.launch(row_sums, 2, (Slice2D::new(&a[..], 3), &mut sums))?;
/// assert_eq!(sums, [6, 15]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct View2D<T>(Rows<T>);
/// A read-write row-major 2D view (see [`View2D`]); `v[(row, col)] = x` or `v[p] = x` writes
/// (skipped outside the view).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn identity(p: Index2D, m: View2DMut<f32>) {
///     m[p] = (p.x == p.y) as u32 as f32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut m = vec![5.0f32; 9];
/// ctx.launch(identity, (3, 3), (Slice2D::new(&mut m[..], 3),))?;
/// assert_eq!(m, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct View2DMut<T>(Rows<T>);
macro_rules! view2d {
    ($($v:ident $host:literal),*) => {$(
        impl<T> Clone for $v<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $v<T> {}
        impl<T: IrType> $v<T> {
            /// Number of rows.
            ///
            /// ```
            /// use kiln::lang::*;
            /// # use kiln::prelude::*;
            /// #[kiln::kernel]
            #[doc = concat!(" fn shape(i: Index1D, m: ", stringify!($v), "<u16>, out: ViewMut<u32>) {")]
            ///     out[0] = m.rows();
            ///     out[1] = m.cols();
            ///     out[2] = m.stride();
            /// }
            /// let ctx = Context::with_backend(BackendKind::Cpu)?;
            /// let mut data = vec![0u16; 20];
            #[doc = concat!(" let m = Slice2D::with_stride(", $host, ", 4, 3, 5)?; // 4 rows of 3, 5 apart")]
            /// let mut out = vec![0u32; 3];
            /// ctx.launch(shape, 1, (m, &mut out))?;
            /// assert_eq!(out, [4, 3, 5]);
            /// # Ok::<(), kiln::Error>(())
            /// ```
            pub fn rows(self) -> Val<u32> {
                self.0.rows
            }
            /// Number of columns (see [`rows`](Self::rows) for an example).
            ///
            /// ```
            /// use kiln::lang::*;
            /// # use kiln::prelude::*;
            /// #[kiln::kernel]
            #[doc = concat!(" fn last_col(r: Index1D, m: ", stringify!($v), "<u16>, out: ViewMut<u16>) {")]
            ///     out[r] = m[(r, m.cols() - 1)];
            /// }
            /// let ctx = Context::with_backend(BackendKind::Cpu)?;
            /// let mut data: Vec<u16> = (0..6).collect();
            #[doc = concat!(" let m = Slice2D::new(", $host, ", 3); // 2 rows of 3")]
            /// let mut out = vec![0u16; 2];
            /// ctx.launch(last_col, 2, (m, &mut out))?;
            /// assert_eq!(out, [2, 5]);
            /// # Ok::<(), kiln::Error>(())
            /// ```
            pub fn cols(self) -> Val<u32> {
                self.0.cols
            }
            /// Elements from one row to the next (see [`rows`](Self::rows) for an example).
            ///
            /// ```
            /// use kiln::lang::*;
            /// # use kiln::prelude::*;
            /// #[kiln::kernel]
            #[doc = concat!(" fn stride_of(i: Index1D, m: ", stringify!($v), "<u16>, out: ViewMut<u32>) {")]
            ///     out[0] = m.stride();
            /// }
            /// let ctx = Context::with_backend(BackendKind::Cpu)?;
            /// let mut data = vec![0u16; 64];
            #[doc = concat!(" let m = Slice2D::with_stride(", $host, ", 2, 8, 32)?;")]
            /// let mut out = vec![0u32];
            /// ctx.launch(stride_of, 1, (m, &mut out))?;
            /// assert_eq!(out, [32]);
            /// # Ok::<(), kiln::Error>(())
            /// ```
            pub fn stride(self) -> Val<u32> {
                self.0.stride
            }
            /// Element `(row, col)`; zero outside the view. What `m[(row, col)]` reads.
            ///
            /// ```
            /// use kiln::lang::*;
            /// # use kiln::prelude::*;
            /// #[kiln::kernel]
            #[doc = concat!(" fn diagonal(i: Index1D, m: ", stringify!($v), "<u16>, out: ViewMut<u16>) {")]
            ///     out[i] = m.load(i, i); // (2, 2) is outside a 3 x 2 view: 0
            /// }
            /// let ctx = Context::with_backend(BackendKind::Cpu)?;
            /// let mut data: Vec<u16> = (1..=6).collect();
            #[doc = concat!(" let m = Slice2D::new(", $host, ", 2); // 3 rows of 2")]
            /// let mut out = vec![9u16; 3];
            /// ctx.launch(diagonal, 3, (m, &mut out))?;
            /// assert_eq!(out, [1, 4, 0]);
            /// # Ok::<(), kiln::Error>(())
            /// ```
            pub fn load(self, row: impl IntoVal<u32>, col: impl IntoVal<u32>) -> Val<T> {
                self.0.mem.load(self.0.cell(row, col))
            }
        }
    )*};
}
view2d!(View2D "&data[..]", View2DMut "&mut data[..]");

impl<T: IrType> View2DMut<T> {
    /// Writes element `(row, col)`; skipped outside the view. What `m[(row, col)] = v` writes.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn border(i: Index1D, m: View2DMut<u8>) {
    ///     // Row i's first and last columns; rows past the view are skipped.
    ///     m.store(i, 0u32, 1u8);
    ///     m.store(i, m.cols() - 1, 1u8);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut m = vec![0u8; 8];
    /// ctx.launch(border, 3, (Slice2D::new(&mut m[..], 4),))?; // 2 rows of 4
    /// assert_eq!(m, [1, 0, 0, 1, 1, 0, 0, 1]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn store(self, row: impl IntoVal<u32>, col: impl IntoVal<u32>, v: impl IntoVal<T>) {
        self.0.mem.store(self.0.cell(row, col), v)
    }
}

/// Kernel parameter types: how each is declared in the IR (generated code).
#[doc(hidden)]
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
/// A `View` reaches an intrinsic's native code as a read-only buffer of its elements.
impl<T: IrType> kiln_ir::NativeParamType for View<T> {
    fn native_param() -> kiln_ir::ParamKind {
        kiln_ir::ParamKind::Buffer {
            elem: T::ir_type(),
            access: Access::Read,
        }
    }
}
/// A `ViewMut` reaches an intrinsic's native code as a read-write buffer of its elements.
impl<T: IrType> kiln_ir::NativeParamType for ViewMut<T> {
    fn native_param() -> kiln_ir::ParamKind {
        kiln_ir::ParamKind::Buffer {
            elem: T::ir_type(),
            access: Access::ReadWrite,
        }
    }
}
impl<T: IrType> From<View<T>> for kiln_ir::NativeInput {
    fn from(v: View<T>) -> kiln_ir::NativeInput {
        kiln_ir::NativeInput::View(v.0.memory())
    }
}
impl<T: IrType> From<ViewMut<T>> for kiln_ir::NativeInput {
    fn from(v: ViewMut<T>) -> kiln_ir::NativeInput {
        kiln_ir::NativeInput::View(v.0.memory())
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
/// reads into [`Indexable::load_at`] and writes into [`Indexable::store_at`] (generated code).
#[doc(hidden)]
pub trait Indexable<I> {
    /// The element type.
    type Elem;
    /// Element `i`.
    fn load_at(self, i: I) -> Val<Self::Elem>;
    /// Writes element `i`; `ViewMut`, shared memory and local arrays only.
    fn store_at(self, i: I, v: impl IntoVal<Self::Elem>);
}

/// Integer index values: any integer type, as a kernel value or a constant. A negative index is
/// out of bounds (loads give zero, stores are skipped).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn back(i: Index1D, x: View<u8>, out: ViewMut<u8>) {
///     let j = i as i64 - 2; // negative for the first two
///     out[i] = x[j];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x = [10u8, 20, 30, 40];
/// let mut out = vec![9u8; 4];
/// ctx.launch(back, 4, (&x[..], &mut out))?;
/// assert_eq!(out, [0, 0, 10, 20]);
/// # Ok::<(), kiln::Error>(())
/// ```
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
pub(super) fn read_only(what: &str) {
    kiln_ir::record_error(format!(
        "`{what}` is read-only: declare the parameter as ViewMut<T> (View2DMut<T>, View3DMut<T>) to write it"
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
/// column `x`) (generated code).
#[doc(hidden)]
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
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// Each group of 4 reverses its 4 elements through shared memory.
/// #[kiln::kernel]
/// fn reverse_fours(x: View<u32>, out: ViewMut<u32>) {
///     let tile = shared::<u32, 4>();
///     let (l, g) = (local_id(Dim::X), group_id(Dim::X));
///     tile[l] = x[g * 4 + l];
///     barrier();
///     out[g * 4 + l] = tile[3 - l];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<u32> = (0..8).collect();
/// let mut out = vec![0u32; 8];
/// ctx.launch_grouped(reverse_fours, 2u32, 4u32, (&x, &mut out))?;
/// assert_eq!(out, [3, 2, 1, 0, 7, 6, 5, 4]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn shared<T: IrType, const N: u32>(scope: &KernelScope, name: &str) -> Mem<T> {
    scope.shared::<T>(name, SharedLen::Static(N))
}

/// A shared array of `T` whose length is given at launch (`Grid::dynamic_shared`); like
/// [`shared`], it starts unspecified on GPU backends.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// Each group sums its elements through a shared array as long as the group.
/// #[kiln::kernel]
/// fn group_sums(x: View<u32>, sums: ViewMut<u32>) {
///     let tile = shared_dynamic::<u32>();
///     let (l, g, n) = (local_id(Dim::X), group_id(Dim::X), group_size(Dim::X));
///     tile[l] = x[g * n + l];
///     barrier();
///     if l == 0 {
///         let mut s = 0u32;
///         for j in 0..n {
///             s += tile[j];
///         }
///         sums[g] = s;
///     }
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<u32> = (0..60).collect();
/// let mut sums = vec![0u32; 3];
/// let mut grid = kiln::Grid::linear(3, 20);
/// grid.dynamic_shared = vec![20];
/// ctx.launch_grid(group_sums, &grid, (&x, &mut sums))?;
/// let rust: Vec<u32> = x.chunks(20).map(|c| c.iter().sum()).collect();
/// assert_eq!(sums, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn shared_dynamic<T: IrType>(scope: &KernelScope, name: &str) -> Mem<T> {
    scope.shared::<T>(name, SharedLen::Dynamic)
}

/// A fixed-size local array of `N` elements, every one `init`.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// // In a kernel, `[init; N]` is such an array.
/// #[kiln::kernel]
/// fn digit_counts(i: Index1D, x: View<u32>, counts: ViewMut<u32>) {
///     let mut seen = [0u32; 10];
///     let mut v = x[i];
///     while v > 0 {
///         seen[v % 10] = seen[v % 10] + 1;
///         v = v / 10;
///     }
///     counts[i] = seen[7];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x = [7u32, 1777, 12];
/// let mut counts = vec![0u32; 3];
/// ctx.launch(digit_counts, 3, (&x[..], &mut counts))?;
/// assert_eq!(counts, [1, 3, 0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn local_array<T: IrType, const N: u32>(name: &str, init: impl IntoVal<T>) -> LocalArray<T> {
    let a = LocalArray::<T>::new(name, N);
    let init = init.into_val();
    kiln_ir::for_range(0u32, N, |i| a.set(i, init));
    a
}

/// A local array holding `items`.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// // In a kernel, `[a, b, c]` is such an array.
/// #[kiln::kernel]
/// fn pick(i: Index1D, x: View<i32>, which: View<u32>, out: ViewMut<i32>) {
///     let options = [x[i], x[i] * 2, -7];
///     out[i] = options[which[i]];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (x, which) = ([5i32, 6, 7], [0u32, 1, 2]);
/// let mut out = vec![0i32; 3];
/// ctx.launch(pick, 3, (&x[..], &which[..], &mut out))?;
/// assert_eq!(out, [5, 12, -7]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn local_array_of<T: IrType, const N: usize>(name: &str, items: [Val<T>; N]) -> LocalArray<T> {
    let a = LocalArray::<T>::new(name, N as u32);
    for (i, v) in items.into_iter().enumerate() {
        a.set(i as u32, v);
    }
    a
}

/// Subgroup (warp) lanes; 1 where the device runs one lane per subgroup.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn lanes(i: Index1D, size: ViewMut<u32>, lane: ViewMut<u32>) {
///     size[i] = subgroup_size();
///     lane[i] = subgroup_lane();
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (mut size, mut lane) = (vec![0u32; 8], vec![0u32; 8]);
/// ctx.launch(lanes, 8, (&mut size, &mut lane))?;
/// assert!(size.iter().all(|s| *s == ctx.device().subgroup_size));
/// assert!(lane.iter().zip(&size).all(|(l, s)| l < s));
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn subgroup_size() -> Val<u32> {
    builtin(Builtin::SubgroupSize)
}

/// This work item's lane in its subgroup: from 0 to `subgroup_size() - 1`.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn first_lanes(i: Index1D, out: ViewMut<u32>) {
///     out[i] = (subgroup_lane() == 0) as u32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut out = vec![0u32; 64];
/// ctx.launch(first_lanes, 64, (&mut out,))?;
/// // One lane 0 per subgroup; the launch's groups of 64 or more hold whole subgroups.
/// let subgroups = 64 / ctx.device().subgroup_size.max(1);
/// assert_eq!(out.iter().sum::<u32>(), subgroups);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn subgroup_lane() -> Val<u32> {
    builtin(Builtin::SubgroupLane)
}

macro_rules! atomics {
    ($bound:ident: $($name:ident, $doc:literal $(, from $start:literal as $rust:literal)?;)*) => {$(
        #[doc = $doc]
        #[doc = " Returns the old value."]
        $(
        #[doc = ""]
        #[doc = " ```"]
        #[doc = " use kiln::lang::*;"]
        #[doc = " # use kiln::prelude::*;"]
        #[doc = " #[kiln::kernel]"]
        #[doc = " fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {"]
        #[doc = concat!("     ", stringify!($name), "(&acc, 0u32, x[i]);")]
        #[doc = " }"]
        #[doc = " let ctx = Context::with_backend(BackendKind::Cpu)?;"]
        #[doc = " let x: Vec<u32> = (1..=1000u32).map(|i| i.wrapping_mul(2654435761)).collect();"]
        #[doc = concat!(" let mut acc = vec![", $start, "];")]
        #[doc = " ctx.launch(apply, x.len(), (&x[..], &mut acc))?;"]
        #[doc = concat!(" assert_eq!(acc[0], x.iter().fold(", $start, ", |a, b| ", $rust, "));")]
        #[doc = " # Ok::<(), kiln::Error>(())"]
        #[doc = " ```"]
        )?
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
    atomic_add, "Atomically adds `v` to element `i` (wrapping for integers).",
        from "0u32" as "a.wrapping_add(*b)";
    atomic_sub, "Atomically subtracts `v` from element `i` (wrapping for integers).",
        from "0u32" as "a.wrapping_sub(*b)";
    atomic_min, "Atomically keeps the smaller of element `i` and `v`.",
        from "u32::MAX" as "a.min(*b)";
    atomic_max, "Atomically keeps the larger of element `i` and `v`.", from "0u32" as "a.max(*b)";
    atomic_exchange, "Atomically replaces element `i` with `v`.";
}
atomics! {
    Int:
    atomic_and, "Atomically ands `v` into element `i`.", from "u32::MAX" as "a & b";
    atomic_or, "Atomically ors `v` into element `i`.", from "0u32" as "a | b";
    atomic_xor, "Atomically xors `v` into element `i`.", from "0u32" as "a ^ b";
}

/// Atomically sets element `i` to `v` if it equals `compare`; returns the old value.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// The first work item to get there claims slot 0; the others see its mark.
/// #[kiln::kernel]
/// fn claim(i: Index1D, slot: ViewMut<u32>, won: ViewMut<u32>) {
///     let old = atomic_compare_exchange(&slot, 0u32, 0u32, i + 1);
///     won[i] = (old == 0) as u32;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (mut slot, mut won) = (vec![0u32], vec![0u32; 100]);
/// ctx.launch(claim, 100, (&mut slot, &mut won))?;
/// assert_eq!(won.iter().sum::<u32>(), 1);
/// assert_eq!(won[slot[0] as usize - 1], 1);
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn atomic_compare_exchange<T: Numeric, V: AtomicTarget<T>>(
    view: &V,
    i: impl IndexValue,
    compare: impl IntoVal<T>,
    v: impl IntoVal<T>,
) -> Val<T> {
    view.memory()
        .atomic_compare_exchange(i.to_index(), compare, v)
}

/// Memory atomics work on: `ViewMut<T>` and shared arrays ([`Shared`]).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// /// A histogram of 4 bins, first per group in shared memory, then into the output.
/// #[kiln::kernel]
/// fn hist4(x: View<u32>, bins: ViewMut<u32>) {
///     let local = shared::<u32, 4>();
///     let l = local_id(Dim::X);
///     if l < 4 {
///         local[l] = 0u32;
///     }
///     barrier();
///     atomic_add(&local, x[global_id(Dim::X)] % 4, 1u32); // a shared array
///     barrier();
///     if l < 4 {
///         atomic_add(&bins, l, local[l]); // a ViewMut
///     }
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x: Vec<u32> = (0..128).map(|i| i * i).collect();
/// let mut bins = vec![0u32; 4];
/// ctx.launch_grouped(hist4, 4u32, 32u32, (&x, &mut bins))?;
/// let mut rust = [0u32; 4];
/// x.iter().for_each(|v| rust[(v % 4) as usize] += 1);
/// assert_eq!(bins, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
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
