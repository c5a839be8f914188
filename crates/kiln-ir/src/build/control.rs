//! Building kernels and device functions, and control flow: branches, loops, jumps,
//! barriers, builtins and subgroup operations.

use super::*;

impl Kernel {
    /// Builds a kernel: `body` declares parameters through the [`KernelScope`] and appends
    /// statements through `Val` operations and the control-flow functions of this module.
    /// Returns the validated kernel, or the first build or validation error.
    pub fn build(name: &str, body: impl FnOnce(&KernelScope)) -> Result<Kernel, IrError> {
        let kernel = Kernel::build_unvalidated(name, body)?;
        validate(&kernel)?;
        Ok(kernel)
    }

    /// [`Kernel::build`] without [`validate`]: for code that builds the same kernel again on
    /// every call and validates it only when it is new (kiln's `Context::compile` validates a
    /// kernel its cache does not hold; validation was a quarter of a cached query's time).
    /// Returns the kernel, or the first error recorded while building it.
    pub fn build_unvalidated(
        name: &str,
        body: impl FnOnce(&KernelScope),
    ) -> Result<Kernel, IrError> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        building().push(KernelState {
            id,
            // Room for a fingerprint's columns, outputs and constants.
            params: Vec::with_capacity(8),
            shared: Vec::new(),
            functions: Vec::new(),
            natives: Vec::new(),
            fns: vec![new_fn("", Vec::new(), None)],
            errors: Vec::new(),
            region: None,
            user_literals: Vec::new(),
        });
        body(&KernelScope { id });
        let state = building().pop().expect("pushed above");
        let mut f = state.fns.into_iter().next().expect("kernel function");
        f.body.block = Block(f.blocks.pop().unwrap_or_default());
        let kernel = Kernel {
            name: name.to_string(),
            params: state.params,
            shared: state.shared,
            functions: state.functions,
            natives: state.natives,
            body: f.body,
            user_literals: state.user_literals,
            options: Default::default(),
        };
        if let Some(e) = state.errors.into_iter().next() {
            return Err(IrError {
                kernel: kernel.name,
                function: None,
                location: String::new(),
                message: e,
            });
        }
        Ok(kernel)
    }
}

/// `if cond { then() }`.
pub fn if_then(cond: impl IntoVal<bool>, then: impl FnOnce()) {
    if_else(cond, then, || {});
}

/// `if cond { then() } else { otherwise() }`.
pub fn if_else(cond: impl IntoVal<bool>, then: impl FnOnce(), otherwise: impl FnOnce()) {
    let c = cond.into_val();
    let accept = nested(then);
    let reject = nested(otherwise);
    push_stmt(
        Stmt::If {
            cond: c.raw.h,
            accept,
            reject,
        },
        &[c.raw],
    );
}

/// `loop { body() } continuing { continuing() }`, the IR's loop: `continue_` in `body` goes
/// to `continuing`, which ends each pass; leave it with [`break_`]. [`for_range`] builds its
/// loops this way, with the step in `continuing`.
pub fn loop_with(body: impl FnOnce(), continuing: impl FnOnce()) {
    with_kernel(|k| k.fns.last_mut().expect("function").loops += 1);
    let body = nested(body);
    let continuing = nested(continuing);
    with_kernel(|k| k.fns.last_mut().expect("function").loops -= 1);
    push_stmt(Stmt::Loop { body, continuing }, &[]);
}

/// `loop { body() }`; leave it with [`break_`].
pub fn loop_(body: impl FnOnce()) {
    loop_with(body, || {});
}

/// `while cond() { body() }`.
pub fn while_(cond: impl FnOnce() -> Val<bool>, body: impl FnOnce()) {
    loop_(|| {
        let c = cond();
        if_then(!c, break_);
        body();
    });
}

/// `for i in (start..end).step_by(step) { body(i) }` over integers, for a positive `step`;
/// `continue_` goes to the next `i`. It runs exactly Rust's iterations for every start, end
/// and step, the type's extremes included: the counter never wraps past `end` (a step of 0,
/// which Rust rejects, runs a bounded number of passes).
pub fn for_range_step<T: Int>(
    start: impl IntoVal<T>,
    end: impl IntoVal<T>,
    step: impl IntoVal<T>,
    body: impl FnOnce(Val<T>),
) {
    range_loop(
        start.into_val(),
        end.into_val(),
        step.into_val(),
        false,
        body,
    );
}

/// `for i in (start..=end).step_by(step) { body(i) }` over integers (see [`for_range_step`]);
/// `end` may be the type's maximum.
pub fn for_range_inclusive_step<T: Int>(
    start: impl IntoVal<T>,
    end: impl IntoVal<T>,
    step: impl IntoVal<T>,
    body: impl FnOnce(Val<T>),
) {
    range_loop(
        start.into_val(),
        end.into_val(),
        step.into_val(),
        true,
        body,
    );
}

/// `for i in start..end { body(i) }` over integers.
pub fn for_range<T: Int>(start: impl IntoVal<T>, end: impl IntoVal<T>, body: impl FnOnce(Val<T>)) {
    for_range_step(start, end, lit(T::from_bits(1)), body);
}

/// The loop of [`for_range_step`] and [`for_range_inclusive_step`].
///
/// Where adding `step` to any value below the (exclusive) end cannot wrap, which constants
/// show for the common `a..b` and `a..=15`, the loop has the plain shape backends recognize
/// as counted: `if i >= end { break }` first, `i += step` last. Other half-open ranges count
/// their trips first, `(end - start - 1) / step + 1` in the unsigned type of the same width
/// (exact for every start below the end), and run a second counter up to it. Inclusive
/// ranges whose end may be the type's maximum, where the trip count itself may not fit,
/// decide in the continuing block whether another pass follows before the value can wrap.
pub(super) fn range_loop<T: Int>(
    start: Val<T>,
    end: Val<T>,
    step: Val<T>,
    inclusive: bool,
    body: impl FnOnce(Val<T>),
) {
    let max = int_max(T::TYPE);
    let (end_c, step_c) = (constant_int(&end), constant_int(&step));
    let plain_end = match (inclusive, end_c, step_c) {
        (false, _, Some(1)) => Some(end),
        (false, Some(e), Some(s)) if s > 0 && e + s - 1 <= max => Some(end),
        (true, Some(e), Some(s)) if s > 0 && e + s <= max => {
            Some(lit(T::from_bits((e + 1) as u64)))
        }
        _ => None,
    };
    let i = Var::new("i", start);
    if let Some(end) = plain_end {
        loop_with(
            || {
                let v = i.get();
                if_then(v.ge(end), break_);
                body(v);
            },
            || i.set(i.get() + step),
        );
        return;
    }
    if !inclusive {
        let unsigned = |v: Val<T>| v.bitcast::<T::Unsigned>();
        let (zero, one) = (
            lit(<T::Unsigned as Scalar>::from_bits(0)),
            lit(<T::Unsigned as Scalar>::from_bits(1)),
        );
        let span = unsigned(end) - unsigned(start) - one;
        let trips = select(start.lt(end), span / unsigned(step) + one, zero);
        let k = Var::new("k", zero);
        loop_with(
            || {
                if_then(k.get().ge(trips), break_);
                body(i.get());
            },
            || {
                i.set(i.get() + step);
                k.set(k.get() + one);
            },
        );
        return;
    }
    let go = Var::new("go", start.le(end));
    loop_with(
        || {
            if_then(!go.get(), break_);
            body(i.get());
        },
        || {
            let v = i.get();
            let next = v + step;
            go.set(next.gt(v) & next.le(end));
            i.set(next);
        },
    );
}

/// The integer `v` holds when it is a constant of the function being built.
pub(super) fn constant_int<T: Scalar>(v: &Val<T>) -> Option<i128> {
    let c = with_kernel(|k| {
        let f = k.fns.last()?;
        match (v.raw.owner == f.id, f.body.exprs.get(v.raw.h.index())) {
            (true, Some(Expr::Literal(c))) => Some(*c),
            _ => None,
        }
    })
    .flatten()?;
    Some(match c {
        ScalarValue::I8(x) => x.into(),
        ScalarValue::U8(x) => x.into(),
        ScalarValue::I16(x) => x.into(),
        ScalarValue::U16(x) => x.into(),
        ScalarValue::I32(x) => x.into(),
        ScalarValue::U32(x) => x.into(),
        ScalarValue::I64(x) => x.into(),
        ScalarValue::U64(x) => x.into(),
        _ => return None,
    })
}

/// The greatest value of an integer type (0 for the others).
pub(super) fn int_max(t: ScalarType) -> i128 {
    match t {
        ScalarType::I8 => i8::MAX.into(),
        ScalarType::U8 => u8::MAX.into(),
        ScalarType::I16 => i16::MAX.into(),
        ScalarType::U16 => u16::MAX.into(),
        ScalarType::I32 => i32::MAX.into(),
        ScalarType::U32 => u32::MAX.into(),
        ScalarType::I64 => i64::MAX.into(),
        ScalarType::U64 => u64::MAX.into(),
        _ => 0,
    }
}

pub(super) fn jump(s: Stmt) {
    let ok = with_kernel(|k| k.fns.last().expect("function").loops > 0).unwrap_or(false);
    if ok {
        push_stmt(s, &[]);
    } else {
        record(format!("{s:?} outside a loop"));
    }
}

/// `break` out of the innermost loop.
pub fn break_() {
    jump(Stmt::Break);
}

/// `continue` with the innermost loop's next iteration.
pub fn continue_() {
    jump(Stmt::Continue);
}

/// `return` from a kernel or from a device function without a result.
pub fn return_() {
    push_stmt(Stmt::Return(None), &[]);
}

/// `return v` from a device function.
pub fn return_value<T>(v: Val<T>) {
    push_stmt(Stmt::Return(Some(v.raw.h)), &[v.raw]);
}

/// Group barrier: every work item of the group waits here; shared memory written before is
/// visible after.
pub fn barrier() {
    push_stmt(Stmt::Barrier(BarrierScope::Group), &[]);
}

/// Subgroup barrier.
pub fn subgroup_barrier() {
    push_stmt(Stmt::Barrier(BarrierScope::Subgroup), &[]);
}

/// The value of a launch builtin.
pub fn builtin(b: Builtin) -> Val<u32> {
    typed(Expr::Builtin(b), &[])
}

/// Work item index in the grid along `axis`.
pub fn global_id(axis: Axis) -> Val<u32> {
    builtin(Builtin::GlobalId(axis))
}
/// Work item index in its group along `axis`.
pub fn local_id(axis: Axis) -> Val<u32> {
    builtin(Builtin::LocalId(axis))
}
/// Group index along `axis`.
pub fn group_id(axis: Axis) -> Val<u32> {
    builtin(Builtin::GroupId(axis))
}
/// Work items per group along `axis`.
pub fn group_size(axis: Axis) -> Val<u32> {
    builtin(Builtin::GroupSize(axis))
}
/// Groups in the grid along `axis`.
pub fn num_groups(axis: Axis) -> Val<u32> {
    builtin(Builtin::NumGroups(axis))
}
/// Work items in the grid along `axis`.
pub fn global_size(axis: Axis) -> Val<u32> {
    builtin(Builtin::GlobalSize(axis))
}

pub(super) fn subgroup<T>(op: SubgroupOp, arg: Raw, lane: Option<Raw>) -> Val<T> {
    let mut deps = vec![arg];
    deps.extend(lane);
    typed(
        Expr::Subgroup {
            op,
            arg: arg.h,
            lane: lane.map(|l| l.h),
        },
        &deps,
    )
}

/// Subgroup operations on a value.
impl<T: Scalar> Val<T> {
    /// Value of lane `lane`.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = (i * 3).shuffle(0u32);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, base * 3, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn shuffle(self, lane: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::Shuffle, self.raw, Some(lane.into_val().raw))
    }
    /// Value of lane `self_lane - delta` (own value when out of range).
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = i.shuffle_up(1u32);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, if lane == 0 { i } else { i - 1 }, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn shuffle_up(self, delta: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::ShuffleUp, self.raw, Some(delta.into_val().raw))
    }
    /// Value of lane `self_lane + delta` (own value when out of range).
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = i.shuffle_down(1u32);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, if lane + 1 == s { i } else { i + 1 }, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn shuffle_down(self, delta: impl IntoVal<u32>) -> Val<T> {
        subgroup(
            SubgroupOp::ShuffleDown,
            self.raw,
            Some(delta.into_val().raw),
        )
    }
    /// Value of lane `self_lane ^ mask` (own value when out of range).
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = i.shuffle_xor(1u32);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, if (lane ^ 1) < s { base + (lane ^ 1) } else { i }, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn shuffle_xor(self, mask: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::ShuffleXor, self.raw, Some(mask.into_val().raw))
    }
    /// Value of lane `lane` for the whole subgroup.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = (i + 100).broadcast(0u32);
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, base + 100, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn broadcast(self, lane: impl IntoVal<u32>) -> Val<T> {
        subgroup(SubgroupOp::Broadcast, self.raw, Some(lane.into_val().raw))
    }
    /// Sum over the subgroup.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     let c: u32 = 1;
    ///     out[i] = c.subgroup_add();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, s, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn subgroup_add(self) -> Val<T> {
        subgroup(SubgroupOp::ReduceAdd, self.raw, None)
    }
    /// Minimum over the subgroup.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = i.subgroup_min();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, base, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn subgroup_min(self) -> Val<T> {
        subgroup(SubgroupOp::ReduceMin, self.raw, None)
    }
    /// Maximum over the subgroup.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = i.subgroup_max();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, base + s - 1, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn subgroup_max(self) -> Val<T> {
        subgroup(SubgroupOp::ReduceMax, self.raw, None)
    }
    /// Sum over lanes `0..=self_lane`.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     let c: u32 = 2;
    ///     out[i] = c.subgroup_inclusive_add();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, 2 * (lane + 1), "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn subgroup_inclusive_add(self) -> Val<T> {
        subgroup(SubgroupOp::InclusiveAdd, self.raw, None)
    }
    /// Sum over lanes `0..self_lane`.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     let c: u32 = 2;
    ///     out[i] = c.subgroup_exclusive_add();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, 2 * lane, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn subgroup_exclusive_add(self) -> Val<T> {
        subgroup(SubgroupOp::ExclusiveAdd, self.raw, None)
    }
}

impl Val<bool> {
    /// Mask of the lanes (0..32) where this is true.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = (i % 2 == 0).ballot();
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, (0..s.min(32)).filter(|l| (base + l) % 2 == 0).fold(0, |m, l| m | 1 << l), "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn ballot(self) -> Val<u32> {
        subgroup(SubgroupOp::Ballot, self.raw, None)
    }
    /// True if true on every lane of the subgroup.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = (i % 2 == 0).subgroup_all() as u32;
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, (0..s).all(|l| (base + l) % 2 == 0) as u32, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn subgroup_all(self) -> Val<bool> {
        subgroup(SubgroupOp::All, self.raw, None)
    }
    /// True if true on some lane of the subgroup.
    ///
    /// ```
    /// use kiln::lang::*;
    /// # use kiln::prelude::*;
    /// #[kiln::kernel]
    /// fn each(i: Index1D, out: ViewMut<u32>) {
    ///     out[i] = (i % 4 == 0).subgroup_any() as u32;
    /// }
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let s = ctx.device().subgroup_size; // 1 on the CPU backend
    /// let mut out = vec![0u32; 64];
    /// ctx.launch(each, 64, (&mut out,))?;
    /// for (i, got) in (0u32..).zip(&out) {
    ///     let (lane, base) = (i % s, i - i % s);
    ///     assert_eq!(*got, (0..s).any(|l| (base + l) % 4 == 0) as u32, "work item {i}");
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn subgroup_any(self) -> Val<bool> {
        subgroup(SubgroupOp::Any, self.raw, None)
    }
}

/// A device function of the kernel being built, returning `R`.
pub struct DeviceFn<R> {
    pub(super) id: FunctionId,
    pub(super) _r: PhantomData<fn() -> R>,
}

/// Defines a device function in the kernel being built. `params` name and type the arguments;
/// `body` receives them and returns the result. `noinline` keeps it a real function in
/// generated source. Reuses an identical earlier definition.
pub fn device_fn<R: IrType>(
    name: &str,
    params: &[(&str, Type)],
    noinline: bool,
    body: impl FnOnce(&[AnyVal]) -> Val<R>,
) -> DeviceFn<R> {
    let params: Vec<Param> = params
        .iter()
        .map(|(n, t)| Param {
            name: n.to_string(),
            kind: ParamKind::Value(t.clone()),
        })
        .collect();
    // A device function whose definition is under way (same name and signature) is being
    // called from its own body: building it again would never end.
    let result_ty = Some(R::ir_type());
    let recursive = with_kernel(|k| {
        k.fns
            .iter()
            .any(|f| f.name == name && f.params == params && f.result == result_ty)
    })
    .unwrap_or(false);
    if recursive {
        record(format!(
            "device function `{name}` calls itself; kernels have no call stack for recursion, \
             so rewrite it as a loop"
        ));
        return DeviceFn {
            id: FunctionId(u32::MAX),
            _r: PhantomData,
        };
    }
    with_kernel(|k| k.fns.push(new_fn(name, params.clone(), result_ty.clone())));
    let args: Vec<AnyVal> = params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let ParamKind::Value(ty) = &p.kind else {
                unreachable!("built as values above")
            };
            AnyVal {
                raw: push(Expr::Param(i as u32), &[]),
                ty: ty.clone(),
            }
        })
        .collect();
    let result = body(&args);
    push_stmt(Stmt::Return(Some(result.raw.h)), &[result.raw]);
    let id = with_kernel(|k| {
        let mut f = k.fns.pop().expect("pushed above");
        f.body.block = Block(f.blocks.pop().unwrap_or_default());
        // Another function of the same name (a generic one instantiated for another type)
        // keeps its name; this one gets a numbered one.
        let mut fname = name.to_string();
        let mut n = 1;
        while k.functions.iter().any(|g| {
            g.name == fname
                && (g.params != f.params
                    || g.body != f.body
                    || g.result != f.result
                    || g.noinline != noinline)
        }) {
            n += 1;
            fname = format!("{name}_{n}");
        }
        let func = Function {
            name: fname,
            params: f.params,
            result: f.result,
            body: f.body,
            noinline,
        };
        match k.functions.iter().position(|g| *g == func) {
            Some(i) => FunctionId(i as u32),
            None => {
                k.functions.push(func);
                FunctionId(k.functions.len() as u32 - 1)
            }
        }
    })
    .unwrap_or(FunctionId(u32::MAX));
    DeviceFn {
        id,
        _r: PhantomData,
    }
}

impl<R: IrType> DeviceFn<R> {
    /// Calls the function with untyped arguments (checked by the validator).
    pub fn call(&self, args: &[AnyVal]) -> Val<R> {
        let raws: Vec<Raw> = args.iter().map(|a| a.raw).collect();
        typed(
            Expr::Call {
                function: self.id,
                args: raws.iter().map(|r| r.h).collect(),
            },
            &raws,
        )
    }
}

/// Records that the statements built next come from `file` at `line` (generated code: the
/// kernel macros call it before each statement, so generated source points back to Rust).
pub fn source_line(file: &str, line: u32) {
    push_stmt(
        Stmt::Source(SourceLine {
            file: file.to_string(),
            line,
        }),
        &[],
    );
}

/// Flattened index of the work item inside its group.
pub fn local_index() -> Val<u32> {
    builtin(Builtin::LocalIndex)
}
