//! Where values live: locals (`Var`), private arrays, buffers and shared arrays (`Mem`),
//! kernel parameters (`KernelScope`).

use super::*;

/// A mutable local variable (zero-initialized, then set to its initial value).
pub struct Var<T> {
    pub(super) local: LocalId,
    pub(super) owner: u32,
    pub(super) _t: PhantomData<fn() -> T>,
}
impl<T> Clone for Var<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Var<T> {}

pub(super) fn new_local(name: &str, ty: Type) -> (LocalId, u32) {
    with_kernel(|k| {
        let f = k.fns.last_mut().expect("function");
        let id = LocalId(f.body.locals.len() as u32);
        let name = if crate::validate::is_identifier(name) {
            name.to_string()
        } else {
            format!("v{}", id.0)
        };
        f.body.locals.push(LocalDecl { name, ty });
        (id, f.id)
    })
    .unwrap_or((LocalId(u32::MAX), u32::MAX))
}

impl<T: IrType> Var<T> {
    /// A new local named `name` holding `init`.
    ///
    /// ```
    /// use kiln::ir::*;
    /// use kiln::{Grid, LaunchArg};
    /// # use kiln::prelude::*;
    /// // What `let mut total = 1u32;` builds in a kernel: a local, then a loop that updates it.
    /// let k = Kernel::build("powers", |k| {
    ///     let out = k.buffer::<u32>("out", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     let total = Var::new("total", 1u32);
    ///     for_range(0u32, i, |_| total.set(total.get() * 3u32));
    ///     out.store(i, total.get());
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 4];
    /// ctx.launch_ir(&k, &Grid::linear(1, 4), &mut [LaunchArg::read_write(&mut out)])?;
    /// assert_eq!(out, [1, 3, 9, 27]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn new(name: &str, init: impl IntoVal<T>) -> Var<T> {
        let init = init.into_val();
        let (local, owner) = new_local(name, T::ir_type());
        let v = Var {
            local,
            owner,
            _t: PhantomData,
        };
        v.set(init);
        v
    }
    /// The current value.
    ///
    /// ```
    /// use kiln::ir::*;
    /// use kiln::{Grid, LaunchArg};
    /// # use kiln::prelude::*;
    /// let k = Kernel::build("twice", |k| {
    ///     let out = k.buffer::<u32>("out", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     let v = Var::new("v", i);
    ///     out.store(i, v.get() + v.get());
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 4];
    /// ctx.launch_ir(&k, &Grid::linear(1, 4), &mut [LaunchArg::read_write(&mut out)])?;
    /// assert_eq!(out, [0, 2, 4, 6]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn get(self) -> Val<T> {
        typed(
            Expr::LocalGet(self.local),
            &[Raw {
                h: Handle(0),
                owner: self.owner,
            }],
        )
    }
    /// Assigns a new value.
    ///
    /// ```
    /// use kiln::ir::*;
    /// use kiln::{Grid, LaunchArg};
    /// # use kiln::prelude::*;
    /// let k = Kernel::build("last_set", |k| {
    ///     let out = k.buffer::<u32>("out", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     let v = Var::new("v", 0u32);
    ///     if_then(i.gt(1u32), || v.set(i * 10u32));
    ///     out.store(i, v.get());
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 4];
    /// ctx.launch_ir(&k, &Grid::linear(1, 4), &mut [LaunchArg::read_write(&mut out)])?;
    /// assert_eq!(out, [0, 0, 20, 30]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn set(self, v: impl IntoVal<T>) {
        let v = v.into_val();
        push_stmt(
            Stmt::LocalSet {
                local: self.local,
                value: v.raw.h,
            },
            &[
                v.raw,
                Raw {
                    h: Handle(0),
                    owner: self.owner,
                },
            ],
        );
    }
}

/// A mutable local whose type is known only at run time (for generated code).
#[derive(Clone, Debug)]
pub struct AnyVar {
    pub(super) local: LocalId,
    pub(super) owner: u32,
    pub(super) ty: Type,
}

impl AnyVar {
    /// A new local named `name` holding `init`.
    pub fn new(name: &str, init: &AnyVal) -> AnyVar {
        let (local, owner) = new_local(name, init.ty.clone());
        let v = AnyVar {
            local,
            owner,
            ty: init.ty.clone(),
        };
        v.set(init);
        v
    }
    /// The current value.
    pub fn get(&self) -> AnyVal {
        AnyVal {
            raw: push(
                Expr::LocalGet(self.local),
                &[Raw {
                    h: Handle(0),
                    owner: self.owner,
                }],
            ),
            ty: self.ty.clone(),
        }
    }
    /// Assigns a new value.
    pub fn set(&self, v: &AnyVal) {
        push_stmt(
            Stmt::LocalSet {
                local: self.local,
                value: v.raw.h,
            },
            &[
                v.raw,
                Raw {
                    h: Handle(0),
                    owner: self.owner,
                },
            ],
        );
    }
}

/// A constant of a type known only at run time.
pub fn lit_value(v: ScalarValue) -> AnyVal {
    AnyVal {
        raw: literal(v),
        ty: Type::Scalar(v.ty()),
    }
}

/// A fixed-size local array of `T` (zero-initialized).
pub struct LocalArray<T> {
    pub(super) local: LocalId,
    pub(super) owner: u32,
    pub(super) _t: PhantomData<fn() -> T>,
}
impl<T> Clone for LocalArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for LocalArray<T> {}

impl<T: IrType> LocalArray<T> {
    /// A new zeroed array of `len` elements.
    ///
    /// ```
    /// use kiln::ir::*;
    /// use kiln::{Grid, LaunchArg};
    /// # use kiln::prelude::*;
    /// let k = Kernel::build("zeroed", |k| {
    ///     let out = k.buffer::<u32>("out", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     let a = LocalArray::<u32>::new("a", 4);
    ///     a.set(0u32, 7u32);
    ///     out.store(i, a.get(i)); // a[0] = 7, the rest are zero
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 4];
    /// ctx.launch_ir(&k, &Grid::linear(1, 4), &mut [LaunchArg::read_write(&mut out)])?;
    /// assert_eq!(out, [7, 0, 0, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn new(name: &str, len: u32) -> LocalArray<T> {
        let (local, owner) = new_local(name, Type::Array(Box::new(T::ir_type()), len));
        LocalArray {
            local,
            owner,
            _t: PhantomData,
        }
    }
    /// Element `i`; out of bounds reads zero.
    ///
    /// ```
    /// use kiln::ir::*;
    /// use kiln::{Grid, LaunchArg};
    /// # use kiln::prelude::*;
    /// let k = Kernel::build("reversed", |k| {
    ///     let out = k.buffer::<u32>("out", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     let a = LocalArray::<u32>::new("a", 3);
    ///     for_range(0u32, 3u32, |j| a.set(j, j + 1u32));
    ///     out.store(i, a.get(lit(2u32) - i)); // 2 - 3 wraps past the end: out of bounds, 0
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 4];
    /// ctx.launch_ir(&k, &Grid::linear(1, 4), &mut [LaunchArg::read_write(&mut out)])?;
    /// assert_eq!(out, [3, 2, 1, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn get(self, i: impl IntoVal<u32>) -> Val<T> {
        Val::from_raw(array_get(self.local, self.owner, i.into_val()))
    }
    /// Sets element `i`; out of bounds is skipped.
    ///
    /// ```
    /// use kiln::ir::*;
    /// use kiln::{Grid, LaunchArg};
    /// # use kiln::prelude::*;
    /// let k = Kernel::build("squares", |k| {
    ///     let out = k.buffer::<u32>("out", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     let a = LocalArray::<u32>::new("a", 4);
    ///     for_range(0u32, 5u32, |j| a.set(j, j * j)); // the fifth set is skipped
    ///     out.store(i, a.get(i));
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 4];
    /// ctx.launch_ir(&k, &Grid::linear(1, 4), &mut [LaunchArg::read_write(&mut out)])?;
    /// assert_eq!(out, [0, 1, 4, 9]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn set(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) {
        array_set(self.local, self.owner, i.into_val(), v.into_val().raw);
    }
}

/// A fixed-size local array (zero-initialized) whose element type is known only at run time
/// (for generated code).
#[derive(Clone, Debug)]
pub struct AnyArray {
    pub(super) local: LocalId,
    pub(super) owner: u32,
    pub(super) elem: Type,
}

impl AnyArray {
    /// A new zeroed array of `len` elements of type `elem`.
    pub fn new(name: &str, elem: Type, len: u32) -> AnyArray {
        let (local, owner) = new_local(name, Type::Array(Box::new(elem.clone()), len));
        AnyArray { local, owner, elem }
    }
    /// Element `i`; out of bounds reads zero.
    pub fn get(&self, i: Val<u32>) -> AnyVal {
        AnyVal {
            raw: array_get(self.local, self.owner, i),
            ty: self.elem.clone(),
        }
    }
    /// Sets element `i` to `v` (of the element type); out of bounds is skipped.
    pub fn set(&self, i: Val<u32>, v: &AnyVal) {
        array_set(self.local, self.owner, i, v.raw);
    }
}

/// Element `i` of array local `local` (declared by scope `owner`).
pub(super) fn array_get(local: LocalId, owner: u32, i: Val<u32>) -> Raw {
    push(
        Expr::LocalIndex {
            local,
            index: i.raw.h,
        },
        &[
            i.raw,
            Raw {
                h: Handle(0),
                owner,
            },
        ],
    )
}

/// Sets element `i` of array local `local` (declared by scope `owner`) to `v`.
pub(super) fn array_set(local: LocalId, owner: u32, i: Val<u32>, v: Raw) {
    push_stmt(
        Stmt::LocalIndexSet {
            local,
            index: i.raw.h,
            value: v.h,
        },
        &[
            i.raw,
            v,
            Raw {
                h: Handle(0),
                owner,
            },
        ],
    );
}

/// A buffer parameter or a shared array of `T` elements.
pub struct Mem<T> {
    pub(super) memory: Memory,
    pub(super) kernel: u32,
    pub(super) _t: PhantomData<fn() -> T>,
}
impl<T> Clone for Mem<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Mem<T> {}

pub(super) fn in_kernel(kernel: u32) -> Raw {
    let ok = with_kernel(|k| k.id == kernel && k.fns.len() == 1).unwrap_or(false);
    if ok {
        Raw {
            h: Handle(0),
            owner: with_kernel(|k| k.fns[0].id).unwrap_or(u32::MAX),
        }
    } else {
        record("a buffer or shared array was used outside the kernel body that declared it".into());
        POISON
    }
}

impl<T: IrType> Mem<T> {
    /// Which memory this is.
    ///
    /// ```
    /// use kiln::ir::*;
    /// let k = Kernel::build("two", |k| {
    ///     let a = k.buffer::<f32>("a", Access::Read);
    ///     let b = k.buffer::<f32>("b", Access::ReadWrite);
    ///     let tile = k.shared::<f32>("tile", SharedLen::Static(8));
    ///     assert_eq!((a.memory(), b.memory(), tile.memory()), (Memory::Buffer(0), Memory::Buffer(1), Memory::Shared(0)));
    ///     b.store(0u32, a.load(0u32));
    /// })?;
    /// assert_eq!(k.params.len(), 2);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn memory(self) -> Memory {
        self.memory
    }
    /// Element `i`; out of bounds reads zero.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn neighbours(x: View<u32>, out: ViewMut<u32>) {
    ///     let tile: Shared<u32> = shared::<u32, 4>();
    ///     let l = local_id(Dim::X);
    ///     tile.store(l, x[l]);
    ///     barrier();
    ///     out[l] = tile.load(l + 1); // the last reads past the end: 0
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![9u32; 4];
    /// ctx.launch_grouped(neighbours, 1u32, 4u32, (&[5u32, 6, 7, 8][..], &mut out))?;
    /// assert_eq!(out, [6, 7, 8, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn load(self, i: impl IntoVal<u32>) -> Val<T> {
        let i = i.into_val();
        typed(
            Expr::Load {
                memory: self.memory,
                index: i.raw.h,
            },
            &[i.raw, in_kernel(self.kernel)],
        )
    }
    /// Writes element `i`; out of bounds is skipped.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn evens(i: Index1D, out: ViewMut<u32>) {
    ///     out.memory().store(i * 2, i); // the stores past the end are skipped
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![9u32; 5];
    /// ctx.launch(evens, 5, (&mut out,))?;
    /// assert_eq!(out, [0, 9, 1, 9, 2]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn store(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) {
        let (i, v) = (i.into_val(), v.into_val());
        push_stmt(
            Stmt::Store {
                memory: self.memory,
                index: i.raw.h,
                value: v.raw.h,
            },
            &[i.raw, v.raw, in_kernel(self.kernel)],
        );
    }
    /// Number of elements.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn sizes(i: Index1D, out: ViewMut<u32>) {
    ///     let tile = shared::<u32, 16>();
    ///     out[0] = tile.len();
    ///     out[1] = out.memory().len();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut out = vec![0u32; 3];
    /// ctx.launch(sizes, 1, (&mut out,))?;
    /// assert_eq!(out, [16, 3, 0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn len(self) -> Val<u32> {
        typed(Expr::Len(self.memory), &[in_kernel(self.kernel)])
    }
    fn atomic(self, op: AtomicOp, i: Val<u32>, v: Val<T>, compare: Option<Val<T>>) -> Val<T> {
        let mut deps = vec![i.raw, v.raw, in_kernel(self.kernel)];
        deps.extend(compare.map(|c| c.raw));
        typed(
            Expr::Atomic {
                memory: self.memory,
                index: i.raw.h,
                op,
                value: v.raw.h,
                compare: compare.map(|c| c.raw.h),
            },
            &deps,
        )
    }
    /// Atomic add; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {
    ///     acc.memory().atomic_add(0u32, x[i]);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (1..=500u32).map(|i| i.wrapping_mul(2654435761)).collect();
    /// let mut acc = vec![0u32];
    /// ctx.launch(apply, x.len(), (&x, &mut acc))?;
    /// assert_eq!(acc[0], x.iter().fold(0u32, |a, b| a.wrapping_add(*b)));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_add(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Add, i.into_val(), v.into_val(), None)
    }
    /// Atomic subtract; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {
    ///     acc.memory().atomic_sub(0u32, x[i]);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (1..=500u32).map(|i| i.wrapping_mul(2654435761)).collect();
    /// let mut acc = vec![0u32];
    /// ctx.launch(apply, x.len(), (&x, &mut acc))?;
    /// assert_eq!(acc[0], x.iter().fold(0u32, |a, b| a.wrapping_sub(*b)));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_sub(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Sub, i.into_val(), v.into_val(), None)
    }
    /// Atomic minimum; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {
    ///     acc.memory().atomic_min(0u32, x[i]);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (1..=500u32).map(|i| i.wrapping_mul(2654435761)).collect();
    /// let mut acc = vec![u32::MAX];
    /// ctx.launch(apply, x.len(), (&x, &mut acc))?;
    /// assert_eq!(acc[0], x.iter().fold(u32::MAX, |a, b| a.min(*b)));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_min(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Min, i.into_val(), v.into_val(), None)
    }
    /// Atomic maximum; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {
    ///     acc.memory().atomic_max(0u32, x[i]);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (1..=500u32).map(|i| i.wrapping_mul(2654435761)).collect();
    /// let mut acc = vec![0u32];
    /// ctx.launch(apply, x.len(), (&x, &mut acc))?;
    /// assert_eq!(acc[0], x.iter().fold(0u32, |a, b| a.max(*b)));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_max(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Max, i.into_val(), v.into_val(), None)
    }
    /// Atomic bitwise and; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {
    ///     acc.memory().atomic_and(0u32, x[i]);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (1..=500u32).map(|i| i.wrapping_mul(2654435761)).collect();
    /// let mut acc = vec![u32::MAX];
    /// ctx.launch(apply, x.len(), (&x, &mut acc))?;
    /// assert_eq!(acc[0], x.iter().fold(u32::MAX, |a, b| a & b));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_and(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::And, i.into_val(), v.into_val(), None)
    }
    /// Atomic bitwise or; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {
    ///     acc.memory().atomic_or(0u32, x[i]);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (1..=500u32).map(|i| i.wrapping_mul(2654435761)).collect();
    /// let mut acc = vec![0u32];
    /// ctx.launch(apply, x.len(), (&x, &mut acc))?;
    /// assert_eq!(acc[0], x.iter().fold(0u32, |a, b| a | b));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_or(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Or, i.into_val(), v.into_val(), None)
    }
    /// Atomic bitwise xor; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn apply(i: Index1D, x: View<u32>, acc: ViewMut<u32>) {
    ///     acc.memory().atomic_xor(0u32, x[i]);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let x: Vec<u32> = (1..=500u32).map(|i| i.wrapping_mul(2654435761)).collect();
    /// let mut acc = vec![0u32];
    /// ctx.launch(apply, x.len(), (&x, &mut acc))?;
    /// assert_eq!(acc[0], x.iter().fold(0u32, |a, b| a ^ b));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_xor(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Xor, i.into_val(), v.into_val(), None)
    }
    /// Atomic exchange; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// /// Every work item swaps its number into slot 0 and keeps what it took out.
    /// #[kiln::kernel]
    /// fn pass_along(i: Index1D, slot: ViewMut<u32>, took: ViewMut<u32>) {
    ///     took[i] = slot.memory().atomic_exchange(0u32, i + 1);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (mut slot, mut took) = (vec![0u32], vec![0u32; 100]);
    /// ctx.launch(pass_along, 100, (&mut slot, &mut took))?;
    /// // The values taken out and the one left are each of 0..=100 exactly once.
    /// let mut seen: Vec<u32> = took.iter().copied().chain(slot).collect();
    /// seen.sort();
    /// assert_eq!(seen, (0..=100).collect::<Vec<u32>>());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_exchange(self, i: impl IntoVal<u32>, v: impl IntoVal<T>) -> Val<T> {
        self.atomic(AtomicOp::Exchange, i.into_val(), v.into_val(), None)
    }
    /// Stores `v` if the element equals `compare`; returns the old value.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// /// Adds 1 to slot 0 for every work item, with a compare-exchange loop.
    /// #[kiln::kernel]
    /// fn increment(i: Index1D, slot: ViewMut<u32>) {
    ///     let mut old = slot[0];
    ///     loop {
    ///         let seen = slot.memory().atomic_compare_exchange(0u32, old, old + 1);
    ///         if seen == old {
    ///             break;
    ///         }
    ///         old = seen;
    ///     }
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let mut slot = vec![5u32];
    /// ctx.launch(increment, 300, (&mut slot,))?;
    /// assert_eq!(slot[0], 305);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn atomic_compare_exchange(
        self,
        i: impl IntoVal<u32>,
        compare: impl IntoVal<T>,
        v: impl IntoVal<T>,
    ) -> Val<T> {
        let c = compare.into_val();
        self.atomic(
            AtomicOp::CompareExchange,
            i.into_val(),
            v.into_val(),
            Some(c),
        )
    }
}

/// Declarations of the kernel being built; handed to the closure of [`Kernel::build`].
pub struct KernelScope {
    pub(super) id: u32,
}

/// Declares a parameter of the kernel being built and returns its index.
pub(super) fn add_param(name: &str, kind: ParamKind) -> u32 {
    with_kernel(|k| {
        k.params.push(Param {
            name: name.to_string(),
            kind,
        });
        k.params.len() as u32 - 1
    })
    .unwrap_or(u32::MAX)
}

impl KernelScope {
    /// Declares a buffer parameter of `T` elements.
    pub fn buffer<T: IrType>(&self, name: &str, access: Access) -> Mem<T> {
        let i = add_param(
            name,
            ParamKind::Buffer {
                elem: T::ir_type(),
                access,
            },
        );
        Mem {
            memory: Memory::Buffer(i),
            kernel: self.id,
            _t: PhantomData,
        }
    }

    /// Declares a buffer parameter with an element type known only at run time.
    pub fn buffer_dyn(&self, name: &str, elem: Type, access: Access) -> Memory {
        Memory::Buffer(add_param(name, ParamKind::Buffer { elem, access }))
    }

    /// Declares a shared array with an element type known only at run time.
    pub fn shared_dyn(&self, name: &str, elem: Type, len: SharedLen) -> Memory {
        let i = with_kernel(|k| {
            k.shared.push(SharedDecl {
                name: name.to_string(),
                elem,
                len,
            });
            k.shared.len() as u32 - 1
        })
        .unwrap_or(u32::MAX);
        Memory::Shared(i)
    }

    /// Declares a value parameter and returns its value.
    pub fn value<T: IrType>(&self, name: &str) -> Val<T> {
        let i = add_param(name, ParamKind::Value(T::ir_type()));
        typed(Expr::Param(i), &[])
    }

    /// Declares a shared array of `len` elements of `T`.
    pub fn shared<T: IrType>(&self, name: &str, len: SharedLen) -> Mem<T> {
        let i = with_kernel(|k| {
            k.shared.push(SharedDecl {
                name: name.to_string(),
                elem: T::ir_type(),
                len,
            });
            k.shared.len() as u32 - 1
        })
        .unwrap_or(u32::MAX);
        Mem {
            memory: Memory::Shared(i),
            kernel: self.id,
            _t: PhantomData,
        }
    }
}

/// Loads element `index` of any memory as an untyped value of type `ty` (for generated code).
pub fn load_dyn(memory: Memory, index: Val<u32>, ty: Type) -> AnyVal {
    AnyVal {
        raw: push(
            Expr::Load {
                memory,
                index: index.raw.h,
            },
            &[index.raw],
        ),
        ty,
    }
}

/// The number of elements of any memory (for generated code).
pub fn len_dyn(memory: Memory) -> Val<u32> {
    typed(Expr::Len(memory), &[])
}

/// Stores an untyped value into element `index` of any memory (for generated code).
pub fn store_dyn(memory: Memory, index: Val<u32>, value: &AnyVal) {
    push_stmt(
        Stmt::Store {
            memory,
            index: index.raw.h,
            value: value.raw.h,
        },
        &[index.raw, value.raw],
    );
}

/// Builds an untyped expression from untyped operands (for generated code such as the query
/// planner). The result type is checked by the validator.
pub fn expr_dyn(expr: Expr, operands: &[&AnyVal], ty: Type) -> AnyVal {
    let raws: Vec<Raw> = operands.iter().map(|o| o.raw).collect();
    AnyVal {
        raw: push(expr, &raws),
        ty,
    }
}
