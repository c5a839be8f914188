//! 3D views: `View3D<T>` / `View3DMut<T>` in kernels, [`Slice3D`] on the host.

use super::*;

/// A 3D region of a buffer: `planes` planes of `rows` rows of `cols` elements, element
/// `(plane, row, col)` at `plane * plane_stride + row * row_stride + col`.
struct Planes<T> {
    mem: Mem<T>,
    planes: Val<u32>,
    rows: Val<u32>,
    cols: Val<u32>,
    row_stride: Val<u32>,
    plane_stride: Val<u32>,
}
impl<T> Clone for Planes<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Planes<T> {}
impl<T: IrType> Planes<T> {
    /// The buffer index of `(plane, row, col)`, or `u32::MAX` (out of bounds: loads give zero,
    /// stores are skipped) outside the region.
    fn cell(self, (p, r, c): (Val<u32>, Val<u32>, Val<u32>)) -> Val<u32> {
        let inside = p.lt(self.planes).and(r.lt(self.rows)).and(c.lt(self.cols));
        let at = p * self.plane_stride + r * self.row_stride + c;
        kiln_ir::select(inside, at, u32::MAX)
    }
}

/// A read-only 3D view: `planes` planes of `rows` rows of `cols` elements (see
/// [`Slice3D`] for the layout). Indexed as `v[(plane, row, col)]` or with an [`Index3D`]
/// (plane `z`, row `y`, column `x`); zero outside the view.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn plane_sums(p: Index2D, v: View3D<u32>, sums: View2DMut<u32>) {
///     let mut s = 0u32;
///     for z in 0..v.planes() {
///         s = s + v[(z, p.y, p.x)];
///     }
///     sums[p] = s;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let data: Vec<u32> = (0..12).collect(); // 2 planes of 2 rows of 3
/// let mut sums = vec![0u32; 6];
/// ctx.launch(plane_sums, (3, 2), (Slice3D::new(&data[..], 2, 3), Slice2D::new(&mut sums[..], 3)))?;
/// assert_eq!(sums, [6, 8, 10, 12, 14, 16]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct View3D<T>(Planes<T>);
/// A read-write 3D view (see [`View3D`]); `v[(plane, row, col)] = x` or `v[p] = x` writes
/// (skipped outside the view).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn coordinates(p: Index3D, v: View3DMut<u32>) {
///     v[p] = p.z * 100 + p.y * 10 + p.x;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut data = vec![0u32; 8];
/// ctx.launch(coordinates, (2, 2, 2), (Slice3D::new(&mut data[..], 2, 2),))?;
/// assert_eq!(data, [0, 1, 10, 11, 100, 101, 110, 111]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct View3DMut<T>(Planes<T>);

macro_rules! view3d {
    ($($v:ident),*) => {$(
        impl<T> Clone for $v<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $v<T> {}
        impl<T: IrType> $v<T> {
            /// Number of planes.
            pub fn planes(self) -> Val<u32> {
                self.0.planes
            }
            /// Number of rows per plane.
            pub fn rows(self) -> Val<u32> {
                self.0.rows
            }
            /// Number of columns per row.
            pub fn cols(self) -> Val<u32> {
                self.0.cols
            }
            /// Elements from one row to the next.
            pub fn row_stride(self) -> Val<u32> {
                self.0.row_stride
            }
            /// Elements from one plane to the next.
            pub fn plane_stride(self) -> Val<u32> {
                self.0.plane_stride
            }
            /// Element `(plane, row, col)`; zero outside the view. What `v[(p, r, c)]` reads.
            pub fn load(
                self,
                plane: impl IntoVal<u32>,
                row: impl IntoVal<u32>,
                col: impl IntoVal<u32>,
            ) -> Val<T> {
                let at = (plane.into_val(), row.into_val(), col.into_val());
                self.0.mem.load(self.0.cell(at))
            }
        }
        impl<T: IrType> KernelParam for $v<T> {
            type Handle = $v<T>;
            fn declare(scope: &KernelScope, name: &str) -> $v<T> {
                let access = match stringify!($v) {
                    "View3D" => Access::Read,
                    _ => Access::ReadWrite,
                };
                let value = |what: &str| scope.value::<u32>(&format!("{name}_{what}"));
                $v(Planes {
                    mem: scope.buffer::<T>(name, access),
                    planes: value("planes"),
                    rows: value("rows"),
                    cols: value("cols"),
                    row_stride: value("row_stride"),
                    plane_stride: value("plane_stride"),
                })
            }
        }
    )*};
}
view3d!(View3D, View3DMut);

impl<T: IrType> View3DMut<T> {
    /// Writes element `(plane, row, col)`; skipped outside the view. What
    /// `v[(plane, row, col)] = x` writes.
    pub fn store(
        self,
        plane: impl IntoVal<u32>,
        row: impl IntoVal<u32>,
        col: impl IntoVal<u32>,
        v: impl IntoVal<T>,
    ) {
        let at = (plane.into_val(), row.into_val(), col.into_val());
        self.0.mem.store(self.0.cell(at), v)
    }
}

/// Indices of 3D views: `(plane, row, col)` of any integer types, or an [`Index3D`] (plane
/// `z`, row `y`, column `x`) (generated code).
#[doc(hidden)]
pub trait VoxelIndex {
    /// Plane, row and column.
    fn plane_row_col(self) -> (Val<u32>, Val<u32>, Val<u32>);
}
impl<P: IndexValue, R: IndexValue, C: IndexValue> VoxelIndex for (P, R, C) {
    fn plane_row_col(self) -> (Val<u32>, Val<u32>, Val<u32>) {
        (self.0.to_index(), self.1.to_index(), self.2.to_index())
    }
}
impl VoxelIndex for Index3D {
    fn plane_row_col(self) -> (Val<u32>, Val<u32>, Val<u32>) {
        (self.z, self.y, self.x)
    }
}
impl<T: IrType, I: VoxelIndex> Indexable<I> for View3D<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        self.0.mem.load(self.0.cell(i.plane_row_col()))
    }
    fn store_at(self, _i: I, _v: impl IntoVal<T>) {
        read_only("View3D")
    }
}
impl<T: IrType, I: VoxelIndex> Indexable<I> for View3DMut<T> {
    type Elem = T;
    fn load_at(self, i: I) -> Val<T> {
        self.0.mem.load(self.0.cell(i.plane_row_col()))
    }
    fn store_at(self, i: I, v: impl IntoVal<T>) {
        self.0.mem.store(self.0.cell(i.plane_row_col()), v)
    }
}

/// Host data for a `View3D`/`View3DMut` parameter: `planes` planes of `rows` rows of `cols`
/// elements, element `(plane, row, col)` at `plane * plane_stride + row * row_stride + col`
/// of a slice, a vector or a `&Buffer` (whose elements then stay in device memory).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn scale(p: Index3D, v: View3DMut<f32>, k: f32) {
///     v[p] = v[p] * k;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let b = ctx.upload(&[1.0f32; 24])?; // 2 planes of 3 rows of 4
/// ctx.launch(scale, (4, 3, 2), (Slice3D::new(&b, 3, 4), 2.0f32))?;
/// assert_eq!(b.download()?, [2.0; 24]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Slice3D<S> {
    data: S,
    shape: [u32; 5],
}
impl<S> Slice3D<S> {
    /// `data` as planes of `rows` rows of `cols` elements, back to back (row stride `cols`,
    /// plane stride `rows * cols`); a last partial plane is left out.
    pub fn new<T>(data: S, rows: usize, cols: usize) -> Slice3D<S>
    where
        S: Elements<T>,
    {
        let max = u32::MAX as usize;
        let plane = rows.saturating_mul(cols);
        let planes = data.elements().checked_div(plane).unwrap_or(0);
        let shape = [planes, rows, cols, cols, plane].map(|n| n.min(max) as u32);
        Slice3D { data, shape }
    }

    /// `planes` planes of `rows` rows of `cols` elements, with `row_stride` elements from one
    /// row to the next and `plane_stride` from one plane to the next. Fails with
    /// `VolumeOutOfBounds` when the data is shorter than that or a count exceeds `u32::MAX`.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn corner(i: Index1D, v: View3D<u32>, out: ViewMut<u32>) {
    ///     out[i] = v[(i, 1u32, 1u32)];
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// // The 2 x 2 corner of each of 3 planes of 4 x 4.
    /// let data: Vec<u32> = (0..48).collect();
    /// let v = Slice3D::with_strides(&data[..], 3, 2, 2, 4, 16)?;
    /// let mut out = vec![0u32; 3];
    /// ctx.launch(corner, 3, (v, &mut out))?;
    /// assert_eq!(out, [5, 21, 37]);
    /// assert!(Slice3D::with_strides(&data[..], 4, 2, 2, 4, 16).is_err()); // no fourth plane
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_strides<T>(
        data: S,
        planes: usize,
        rows: usize,
        cols: usize,
        row_stride: usize,
        plane_stride: usize,
    ) -> Result<Slice3D<S>>
    where
        S: Elements<T>,
    {
        let dims = [planes, rows, cols, row_stride, plane_stride];
        let need = if planes == 0 || rows == 0 || cols == 0 {
            0
        } else {
            (planes - 1)
                .saturating_mul(plane_stride)
                .saturating_add((rows - 1).saturating_mul(row_stride))
                .saturating_add(cols)
        };
        let max = u32::MAX as usize;
        let len = data.elements();
        if len < need || need > max || dims.iter().any(|&n| n > max) {
            return Err(Error::VolumeOutOfBounds {
                planes,
                rows,
                cols,
                row_stride,
                plane_stride,
                need,
                len,
                max,
            });
        }
        Ok(Slice3D {
            data,
            shape: dims.map(|n| n as u32),
        })
    }
}
impl<'a, T: IrType> HostArg<'a, View3D<T>> for Slice3D<&'a [T]> {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read(self.data));
        out.extend(self.shape.map(LaunchArg::value));
        Ok(())
    }
}
impl<'a, T: IrType> HostArg<'a, View3DMut<T>> for Slice3D<&'a mut [T]> {
    fn push_args(self, _: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
        out.push(LaunchArg::read_write(self.data));
        out.extend(self.shape.map(LaunchArg::value));
        Ok(())
    }
}
macro_rules! buffer_arg_3d {
    ($($data:ty),*) => {$(
        impl<'a, T: IrType> HostArg<'a, View3D<T>> for Slice3D<$data> {
            fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
                out.push(ctx.device_arg(self.data)?);
                out.extend(self.shape.map(LaunchArg::value));
                Ok(())
            }
        }
        impl<'a, T: IrType> HostArg<'a, View3DMut<T>> for Slice3D<$data> {
            fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
                HostArg::<'a, View3D<T>>::push_args(self, ctx, out)
            }
        }
    )*};
}
buffer_arg_3d!(&'a Buffer<T>, &'a BufferSlice<'_, T>);
