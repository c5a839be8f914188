//! Launching kernels: `#[kiln::kernel]` functions and lambdas, extents, host arguments and
//! `Context::launch`.

use super::*;

/// A kernel written with `#[kiln::kernel]`: its name, the dimensions of its index (0 without
/// one) and the function that builds its IR. `P` is the tuple of its parameter types. The
/// function item a `#[kiln::kernel]` defines returns it; launches take either.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn negate(i: Index1D, x: ViewMut<i32>) {
///     x[i] = -x[i];
/// }
/// let k: KernelFn<(ViewMut<i32>,)> = negate();
/// assert_eq!(k.dims(), 1);
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![1, -2, 3];
/// ctx.launch(k, 3, (&mut x,))?; // the same as ctx.launch(negate, ..)
/// assert_eq!(x, [-1, 2, -3]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct KernelFn<P> {
    name: &'static str,
    dims: usize,
    build: fn(&KernelScope),
    options: CompileOptions,
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
    #[doc(hidden)]
    pub fn new(name: &'static str, dims: usize, build: fn(&KernelScope)) -> KernelFn<P> {
        KernelFn {
            name,
            dims,
            build,
            options: CompileOptions::new(),
            _p: PhantomData,
        }
    }

    /// This kernel compiled with `options` (fast math, launch bounds, a register limit),
    /// wherever it is launched; the options it leaves unset come from the context's
    /// ([`Context::set_compile_options`]). The options are part of the kernel's cache key:
    /// the kernel with and without them are two compiled kernels. Its launches fail with
    /// `Unsupported` where the device has no such option, and with `InvalidLaunch` for groups
    /// larger than its launch bounds ([`Context::launch`] picks groups within them).
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn twice(i: Index1D, x: ViewMut<u32>) {
    ///     x[i] = x[i] * 2u32;
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let bounded = twice().with_options(kiln::CompileOptions::new().launch_bounds(64));
    /// let mut x: Vec<u32> = (0..1000).collect();
    /// ctx.launch(bounded, x.len(), (&mut x,))?; // groups of at most 64
    /// assert!(x.iter().enumerate().all(|(i, &v)| v == 2 * i as u32));
    /// let too_large = ctx.launch_grouped(bounded, 1u32, 128u32, (&mut x,));
    /// assert!(matches!(too_large, Err(kiln::Error::Backend(kiln::BackendError::InvalidLaunch { .. }))));
    /// // The CPU backend has no fast math: a typed error, nothing runs.
    /// let fast = twice().with_options(kiln::CompileOptions::new().fast_math(true));
    /// assert!(ctx.launch(fast, x.len(), (&mut x,)).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_options(mut self, options: CompileOptions) -> KernelFn<P> {
        self.options = options;
        self
    }

    /// The kernel's IR, built once per process (and per generic instantiation). Returns the
    /// build or validation error, naming the kernel.
    ///
    /// ```
    /// use kiln::lang::*;
    /// #[kiln::kernel]
    /// fn scale(i: Index1D, x: ViewMut<f32>, k: f32) {
    ///     x[i] = x[i] * k;
    /// }
    /// let ir = scale().ir()?;
    /// assert_eq!(ir.name, "scale");
    /// println!("{}", kiln::emit(&ir, kiln::Target::Wgsl)?);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn ir(&self) -> Result<Arc<Kernel>> {
        let build = self.build;
        cached_ir(build as usize, self.options, self.name, build)
    }

    /// Dimensions of the kernel's index (0 when it takes none).
    ///
    /// ```
    /// use kiln::lang::*;
    /// #[kiln::kernel]
    /// fn fill(p: Index2D, out: View2DMut<u32>) {
    ///     out[p] = p.x + p.y;
    /// }
    /// assert_eq!(fill().dims(), 2);
    /// ```
    pub fn dims(&self) -> usize {
        self.dims
    }
}

/// The IR built by the build function at address `key`, with `options`, built on first use.
fn cached_ir(
    key: usize,
    options: CompileOptions,
    name: &str,
    build: impl FnOnce(&KernelScope),
) -> Result<Arc<Kernel>> {
    type Built = std::result::Result<Arc<Kernel>, kiln_ir::IrError>;
    static BUILT: OnceLock<Mutex<HashMap<(usize, CompileOptions), Built>>> = OnceLock::new();
    let map = BUILT.get_or_init(Default::default);
    let key = (key, options);
    if let Some(hit) = map.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(hit.clone()?);
    }
    let built = Kernel::build(name, build).map(|mut k| {
        k.options = options;
        Arc::new(k)
    });
    map.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, built.clone());
    Ok(built?)
}

/// A kernel written as a closure with `kiln::lambda!`: the values it captured become
/// parameters after the closure's own, passed by every launch. `P` is the tuple of the
/// closure's parameter types (after the index), `C` the tuple of captured values.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (lo, hi) = (10i32, 20i32);
/// // Captures `lo` and `hi`: each launch passes their values, the IR is built once.
/// let clamp = kiln::lambda!(move |i: Index1D, x: ViewMut<i32>| x[i] = x[i].clamp(lo, hi));
/// let mut x = vec![5, 15, 25];
/// ctx.launch(clamp, x.len(), (&mut x,))?;
/// assert_eq!(x, [10, 15, 20]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Lambda<P, C> {
    name: &'static str,
    dims: usize,
    options: CompileOptions,
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
    #[doc(hidden)]
    pub fn new(
        name: &'static str,
        dims: usize,
        captured: C,
        build: fn(&KernelScope, PhantomData<C>),
    ) -> Lambda<P, C> {
        Lambda {
            name,
            dims,
            options: CompileOptions::new(),
            captured,
            build,
            _p: PhantomData,
        }
    }

    /// The kernel's IR, built once per process (per closure and instantiation); the captured
    /// values are parameters, so it does not depend on them. Errors as [`KernelFn::ir`].
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0.0f32; 4];
    /// for k in [2.0f32, 5.0] {
    ///     let ramp = kiln::lambda!(move |i: Index1D, out: ViewMut<f32>| out[i] = i as f32 * k);
    ///     // `k` is a parameter of the IR, not a constant in it.
    ///     assert!(ramp.ir()?.params.len() >= 2);
    ///     ctx.launch(ramp, out.len(), (&mut out,))?;
    ///     assert_eq!(out, vec![0.0, k, 2.0 * k, 3.0 * k]);
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn ir(&self) -> Result<Arc<Kernel>> {
        let build = self.build;
        cached_ir(build as usize, self.options, self.name, |scope| {
            build(scope, PhantomData)
        })
    }

    /// This closure kernel compiled with `options`, as [`KernelFn::with_options`].
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let k = 3i32;
    /// let add = kiln::lambda!(move |i: Index1D, x: ViewMut<i32>| x[i] = x[i] + k)
    ///     .with_options(kiln::CompileOptions::new().launch_bounds(32));
    /// assert_eq!(add.ir()?.options.launch_bounds, Some(32));
    /// let mut x = vec![1, 2, 3];
    /// ctx.launch(add, x.len(), (&mut x,))?;
    /// assert_eq!(x, [4, 5, 6]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_options(mut self, options: CompileOptions) -> Lambda<P, C> {
        self.options = options;
        self
    }
}

/// Declares the parameter `name` for a captured value; `select` is never called, it only
/// names which element of the capture tuple `C` (and so which type) the value is (generated
/// code for `kiln::lambda!`).
#[doc(hidden)]
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
/// structs), passed after a closure kernel's own arguments (generated code).
#[doc(hidden)]
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
/// captured (generated code).
#[doc(hidden)]
pub struct LaunchKernel {
    ir: Arc<Kernel>,
    dims: usize,
    captured: Vec<LaunchArg<'static>>,
}

/// Anything that names a kernel: a `#[kiln::kernel]` function item (`saxpy`,
/// `apply::<f32, Square>`), the [`KernelFn`] it returns, or a [`Lambda`].
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn add<T: Numeric>(i: Index1D, x: ViewMut<T>, k: T) {
///     x[i] = x[i] + k;
/// }
/// fn run<P>(ctx: &Context, k: impl IntoKernel<P>, extent: usize) -> kiln::Result<()>
/// where
///     for<'a> (&'a mut Vec<f64>, f64): KernelArgs<'a, P>,
/// {
///     let mut x = vec![1.0f64; extent];
///     ctx.launch(k, extent, (&mut x, 0.5))?;
///     assert!(x.iter().all(|v| *v == 1.5));
///     Ok(())
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// run(&ctx, add::<f64>, 10)?; // a function item
/// run(&ctx, add::<f64>(), 10)?; // the KernelFn it returns
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait IntoKernel<P> {
    /// The kernel's IR and captures; fails with its build error (generated code).
    #[doc(hidden)]
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
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// assert_eq!(Extent::from(100usize), Extent([100, 1, 1]));
/// assert_eq!(Extent::from((640u32, 480u32)), Extent([640, 480, 1]));
/// assert_eq!(Extent::from((4, 3, 2)), Extent([4, 3, 2]));
///
/// #[kiln::kernel]
/// fn one(i: Index1D, x: ViewMut<u8>) {
///     x[i] = 1u8;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![0u8; 4];
/// assert!(ctx.launch(one, -1, (&mut x,)).is_err()); // a negative extent
/// ctx.launch(one, Extent([3, 1, 1]), (&mut x,))?;
/// assert_eq!(x, [1, 1, 1, 0]);
/// # Ok::<(), kiln::Error>(())
/// ```
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

/// A host argument for a kernel parameter of type `P`: a value for a value parameter; a
/// slice, `&Vec` or `&Buffer` for a `View<T>`; a mutable slice, `&mut Vec` or `&Buffer` for
/// a `ViewMut<T>`; a [`Slice2D`] of a slice or a `&Buffer` for `View2D<T>`/`View2DMut<T>`.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn axpy(i: Index1D, a: f32, x: View<f32>, y: ViewMut<f32>) {
///     y[i] = a * x[i] + y[i];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let x = vec![1.0f32, 2.0, 3.0];
/// let mut y = vec![10.0f32; 3];
/// ctx.launch(axpy, 3, (2.0f32, &x, &mut y))?; // &Vec and &mut Vec
/// ctx.launch(axpy, 3, (1.0f32, &x[..], &mut y[..]))?; // slices
/// assert_eq!(y, [13.0, 16.0, 19.0]);
/// let (xb, yb) = (ctx.upload(&x)?, ctx.upload(&y)?);
/// ctx.launch(axpy, 3, (-3.0f32, &xb, &yb))?; // buffers, where they are
/// assert_eq!(yb.download()?, [10.0, 10.0, 10.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait HostArg<'a, P> {
    /// Appends the launch arguments for the parameter; fails for a buffer of another context
    /// (generated code).
    #[doc(hidden)]
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
        impl<'a, T: IrType> HostArg<'a, $p<T>> for &'a Buffer<T> {
            fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
                out.push(ctx.device_arg(self)?);
                Ok(())
            }
        }
        impl<'a, T: IrType> HostArg<'a, $p<T>> for &'a BufferSlice<'_, T> {
            fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
                out.push(ctx.device_arg(self)?);
                Ok(())
            }
        }
    )*};
}
buffer_arg!(View, ViewMut);

/// Host data for a `View2D`/`View2DMut` parameter: `rows` rows of `cols` elements with
/// `stride` elements from one row to the next.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn scale_rows(p: Index2D, m: View2DMut<f32>, k: View<f32>) {
///     m[p] = m[p] * k[p.y];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut m = vec![1.0f32; 6];
/// let k = [2.0f32, 3.0];
/// ctx.launch(scale_rows, (3, 2), (Slice2D::new(&mut m[..], 3), &k[..]))?;
/// assert_eq!(m, [2.0, 2.0, 2.0, 3.0, 3.0, 3.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Slice2D<S> {
    data: S,
    rows: u32,
    cols: u32,
    stride: u32,
}
impl<S> Slice2D<S> {
    /// `data` as rows of `cols` elements (stride = `cols`); the last partial row is left out.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn transpose(p: Index2D, a: View2D<f32>, t: View2DMut<f32>) {
    ///     t[(p.x, p.y)] = a[(p.y, p.x)];
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let a: Vec<f32> = (0..6).map(|i| i as f32).collect(); // 2 rows of 3
    /// let mut t = vec![0.0f32; 6]; // 3 rows of 2
    /// ctx.launch(transpose, (3, 2), (Slice2D::new(&a[..], 3), Slice2D::new(&mut t[..], 2)))?;
    /// assert_eq!(t, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn new<T>(data: S, cols: usize) -> Slice2D<S>
    where
        S: Elements<T>,
    {
        let len = data.elements();
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
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn row_sums(r: Index1D, m: View2D<u32>, sums: ViewMut<u32>) {
    ///     let mut s = 0u32;
    ///     for c in 0u32..m.cols() {
    ///         s += m[(r, c)];
    ///     }
    ///     sums[r] = s;
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// // The left 3 columns of a 4 x 5 matrix stored row-major.
    /// let data: Vec<u32> = (0..20).collect();
    /// let left = Slice2D::with_stride(&data[..], 4, 3, 5)?;
    /// let mut sums = vec![0u32; 4];
    /// ctx.launch(row_sums, 4, (left, &mut sums))?;
    /// assert_eq!(sums, vec![0 + 1 + 2, 5 + 6 + 7, 10 + 11 + 12, 15 + 16 + 17]);
    /// assert!(Slice2D::with_stride(&data[..], 5, 3, 5).is_err()); // a fifth row is not there
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_stride<T>(data: S, rows: usize, cols: usize, stride: usize) -> Result<Slice2D<S>>
    where
        S: Elements<T>,
    {
        let need = if rows == 0 {
            0
        } else {
            (rows - 1).saturating_mul(stride).saturating_add(cols)
        };
        let max = u32::MAX as usize;
        let len = data.elements();
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

macro_rules! buffer_arg_2d {
    ($($data:ty),*) => {$(
        impl<'a, T: IrType> HostArg<'a, View2D<T>> for Slice2D<$data> {
            fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
                out.push(ctx.device_arg(self.data)?);
                out.extend([self.rows, self.cols, self.stride].map(LaunchArg::value));
                Ok(())
            }
        }
        impl<'a, T: IrType> HostArg<'a, View2DMut<T>> for Slice2D<$data> {
            fn push_args(self, ctx: &Context, out: &mut Vec<LaunchArg<'a>>) -> Result<()> {
                HostArg::<'a, View2D<T>>::push_args(self, ctx, out)
            }
        }
    )*};
}
buffer_arg_2d!(&'a Buffer<T>, &'a BufferSlice<'_, T>);

/// What a [`Slice2D`] can view: slices and vectors of `T` (anything `AsRef<[T]>`, mutable or
/// not) and `&Buffer<T>`, whose rows then stay in device memory (a buffer serves both
/// `View2D` and `View2DMut`).
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn transpose(p: Index2D, a: View2D<u32>, t: View2DMut<u32>) {
///     t[(p.x, p.y)] = a[(p.y, p.x)];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let a = ctx.upload(&[1u32, 2, 3, 4, 5, 6])?; // 2 rows of 3
/// let t = ctx.zeroed::<u32>(6)?; // 3 rows of 2
/// ctx.launch(transpose, (3, 2), (Slice2D::new(&a, 3), Slice2D::new(&t, 2)))?;
/// assert_eq!(t.download()?, [1, 4, 2, 5, 3, 6]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait Elements<T> {
    /// How many elements of `T` it holds.
    fn elements(&self) -> usize;
}
impl<T, S: AsRef<[T]>> Elements<T> for S {
    fn elements(&self) -> usize {
        self.as_ref().len()
    }
}
impl<T: IrType> Elements<T> for &Buffer<T> {
    fn elements(&self) -> usize {
        self.len()
    }
}
impl<T: IrType> Elements<T> for &BufferSlice<'_, T> {
    fn elements(&self) -> usize {
        self.len()
    }
}

/// The tuple of host arguments for a kernel whose parameter types are the tuple `P` (after
/// the index): one [`HostArg`] per parameter, up to 12. A one-argument tuple needs its comma.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn zero(i: Index1D, x: ViewMut<u32>) {
///     x[i] = 0u32;
/// }
/// #[kiln::kernel]
/// fn blend(i: Index1D, a: View<f32>, b: View<f32>, t: f32, out: ViewMut<f32>) {
///     out[i] = a[i] + (b[i] - a[i]) * t;
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let mut x = vec![7u32; 3];
/// ctx.launch(zero, 3, (&mut x,))?;
/// assert_eq!(x, [0, 0, 0]);
/// let (a, b) = ([0.0f32, 10.0], [10.0f32, 20.0]);
/// let mut out = vec![0.0f32; 2];
/// ctx.launch(blend, 2, (&a[..], &b[..], 0.25f32, &mut out))?;
/// assert_eq!(out, [2.5, 12.5]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait KernelArgs<'a, P> {
    /// The launch arguments in parameter order (generated code).
    #[doc(hidden)]
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
    /// below 0 along any axis (an integer literal extent such as `3001` is an `i32`), and for
    /// a kernel without an index parameter: the index is what keeps the body inside the
    /// extent, so such a kernel runs whole groups through [`Context::launch_grouped`] or
    /// [`Context::launch_grid`].
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn brighten(p: Index2D, img: View2D<u8>, out: View2DMut<u8>) {
    ///     out[p] = img[p].min(215u8) + 40u8; // brighter, without wrapping past 255
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (w, h) = (37usize, 11usize); // any extent: the body runs for each index inside it
    /// let img: Vec<u8> = (0..w * h).map(|i| (i % 256) as u8).collect();
    /// let mut out = vec![0u8; w * h];
    /// ctx.launch(brighten, (w, h), (Slice2D::new(&img[..], w), Slice2D::new(&mut out[..], w)))?;
    /// assert_eq!(out, img.iter().map(|v| v.min(&215) + 40).collect::<Vec<u8>>());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn launch<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        extent: impl Into<Extent>,
        args: A,
    ) -> Result<()> {
        match self.ready_launch(kernel, extent, args)? {
            Some(mut r) => self.launch_ir(&r.ir, &r.grid, &mut r.args),
            None => Ok(()),
        }
    }

    /// What [`Context::launch`] runs: the kernel, the grid it picks for `extent` and the
    /// arguments; `None` for an empty extent, which runs nothing. Fails as `launch` does
    /// before it compiles.
    pub(crate) fn ready_launch<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        extent: impl Into<Extent>,
        args: A,
    ) -> Result<Option<ReadyLaunch<'a>>> {
        let k = kernel.into_launch()?;
        if k.dims == 0 {
            return Err(Error::Unsupported {
                backend: self.device().backend,
                what: format!(
                    "`launch` keeps a kernel inside its extent through its index, and kernel `{}` \
                     takes none: give it an Index1D (Index2D, Index3D) first parameter, or run \
                     whole groups with launch_grouped or launch_grid",
                    k.ir.name
                ),
            });
        }
        let extent = extent.into().0;
        let largest =
            k.ir.options
                .launch_bounds
                .map_or(self.device().max_group_size, |b| {
                    b.min(self.device().max_group_size)
                });
        let size = auto_group_size(k.dims, largest);
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
            return Ok(None);
        }
        let grid = Grid {
            groups,
            group_size: size,
            dynamic_shared: Vec::new(),
        };
        self.ready_with_extent(k, grid, extent, args).map(Some)
    }

    /// Runs `kernel` over `groups` groups of `group_size` work items (each a `u32`, `(x, y)`
    /// or `(x, y, z)`); an index parameter then covers the whole grid. Errors as
    /// [`Context::launch`].
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// /// The maximum of each group's 32 elements, through shared memory.
    /// #[kiln::kernel]
    /// fn group_max(x: View<i32>, out: ViewMut<i32>) {
    ///     let tile = shared::<i32, 32>();
    ///     let (l, g) = (local_id(Dim::X), group_id(Dim::X));
    ///     tile[l] = x[g * 32 + l];
    ///     barrier();
    ///     if l == 0 {
    ///         let mut m = tile[0];
    ///         for j in 1u32..32 {
    ///             m = m.max(tile[j]);
    ///         }
    ///         out[g] = m;
    ///     }
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<i32> = (0..32 * 4).map(|i| (i * 37) % 101 - 50).collect();
    /// let mut out = vec![0i32; 4];
    /// ctx.launch_grouped(group_max, 4u32, 32u32, (&x, &mut out))?;
    /// let want: Vec<i32> = x.chunks(32).map(|c| *c.iter().max().unwrap()).collect();
    /// assert_eq!(out, want);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn launch_grouped<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        groups: impl Into<Extent>,
        group_size: impl Into<Extent>,
        args: A,
    ) -> Result<()> {
        let grid = self.grouped_grid(groups.into(), group_size.into())?;
        self.launch_grid(kernel, &grid, args)
    }

    /// The grid of `groups` groups of `group_size` work items; `Unsupported` for a count
    /// below 0 or above `u32::MAX` along an axis.
    pub(crate) fn grouped_grid(&self, groups: Extent, group_size: Extent) -> Result<Grid> {
        let (g, s) = (groups.0, group_size.0);
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
        Ok(Grid {
            groups: to32(g)?,
            group_size: to32(s)?,
            dynamic_shared: Vec::new(),
        })
    }

    /// Runs `kernel` over `grid`, which also gives the element counts of the kernel's
    /// `shared_dynamic` arrays. Errors as [`Context::launch`].
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// /// Reverses each group's block of the input through a shared array sized at launch.
    /// #[kiln::kernel]
    /// fn reverse_blocks(x: View<u32>, out: ViewMut<u32>) {
    ///     let tile = shared_dynamic::<u32>();
    ///     let (l, g, size) = (local_id(Dim::X), group_id(Dim::X), group_size(Dim::X));
    ///     tile[l] = x[g * size + l];
    ///     barrier();
    ///     out[g * size + l] = tile[size - 1u32 - l];
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (0..48).collect();
    /// let mut out = vec![0u32; 48];
    /// let mut grid = kiln::Grid::linear(3, 16);
    /// grid.dynamic_shared = vec![16]; // the shared array's elements
    /// ctx.launch_grid(reverse_blocks, &grid, (&x, &mut out))?;
    /// let want: Vec<u32> = x.chunks(16).flat_map(|c| c.iter().rev().copied()).collect();
    /// assert_eq!(out, want);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn launch_grid<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        grid: &Grid,
        args: A,
    ) -> Result<()> {
        let mut r = self.ready_grid(kernel, grid, args)?;
        self.launch_ir(&r.ir, &r.grid, &mut r.args)
    }

    /// What [`Context::launch_grid`] runs; fails as it does before it compiles.
    pub(crate) fn ready_grid<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        grid: &Grid,
        args: A,
    ) -> Result<ReadyLaunch<'a>> {
        let k = kernel.into_launch()?;
        let extent: [u64; 3] =
            std::array::from_fn(|d| grid.groups[d] as u64 * grid.group_size[d] as u64);
        self.ready_with_extent(k, grid.clone(), extent, args)
    }

    fn ready_with_extent<'a, P, A: KernelArgs<'a, P>>(
        &self,
        k: LaunchKernel,
        grid: Grid,
        extent: [u64; 3],
        args: A,
    ) -> Result<ReadyLaunch<'a>> {
        let mut args = args.launch_args(self)?;
        args.extend(k.captured);
        for &e in extent.iter().take(k.dims) {
            args.push(LaunchArg::value(e.min(u32::MAX as u64) as u32));
        }
        Ok(ReadyLaunch {
            ir: k.ir,
            grid,
            args,
        })
    }
}

/// A launch ready to run: the kernel, its grid, and its arguments in parameter order (the
/// index extents and captured values last).
pub(crate) struct ReadyLaunch<'a> {
    pub(crate) ir: Arc<Kernel>,
    pub(crate) grid: Grid,
    pub(crate) args: Vec<LaunchArg<'a>>,
}
