//! [`Stream`]: launches and copies queued in order and run apart from the caller, with
//! [`Event`]s to order streams and to wait on, blocking or `async`.
//!
//! Each stream has a thread of its own that takes its work in order and runs it on a device
//! queue of the stream's own where the backend has them (OpenCL, CUDA), on the backend's one
//! queue otherwise; a piece of work counts as finished when the device has finished it. Whatever a
//! piece of work uses (device memory, a [`HostBuffer`], the compiled kernel) is held until
//! then, so dropping a `Buffer` with work still queued on it is safe.

use crate::buffer::BufferSlice;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::host_buffer::HostBuffer;
use crate::lang::{Extent, IntoKernel, KernelArgs};
use kiln_backend::{
    Backend, BackendError, CompiledKernel, DeviceMemory, DeviceQueue, Grid, LaunchArg,
};
use kiln_ir::IrType;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Waker};

/// A queue of launches and copies on one context's device, run in the order they were
/// queued, on a thread of the stream's own, while the caller goes on. Made by
/// [`Context::stream`].
///
/// Work on one stream runs in order; work on different streams is not ordered unless a
/// stream waits for another's [`Event`] ([`Stream::wait_for`]), and neither is work queued
/// directly on the context (`ctx.launch`, `buffer.download()`, queries). Launches on a
/// stream take device buffers and values, not host slices, and its copies move data
/// between buffers and [`HostBuffer`]s, which the copy holds until it has finished.
///
/// When a piece of work fails, the stream skips everything queued after it, and every wait
/// on it or on later work returns [`Error::StreamFailed`] naming it. Dropping a stream lets
/// its queued work run to the end.
///
/// On OpenCL each stream has a command queue of its own, on CUDA a CUDA stream of its own,
/// so the device runs different streams' copies and launches at once where it can. The CPU
/// backend runs a stream's launches on its thread pool and its copies on the stream's
/// thread, so a copy on one stream runs beside a launch on another. wgpu has one queue per
/// device: every stream's work goes to it, so the caller's thread is free while it runs but
/// the device runs it in order. Each piece of work on a stream's own queue starts after the
/// work queued on the context before it (not the other way round), so memory the context
/// frees and hands out again is never used from two queues at once.
///
/// ```
/// use kiln::lang::*;
/// # use kiln::prelude::*;
/// #[kiln::kernel]
/// fn square(i: Index1D, x: ViewMut<f32>) {
///     x[i] = x[i] * x[i];
/// }
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let stream = ctx.stream()?;
/// let on_device = ctx.zeroed::<f32>(3)?;
/// let host = ctx.host_buffer_from(&[1.0f32, 2.0, 3.0])?;
/// let host = stream.upload(host, &on_device)?; // queued: the caller goes on
/// stream.launch(square, 3, (&on_device,))?;
/// let host = stream.download(&on_device, host.wait()?)?;
/// assert_eq!(&host.wait()?[..], &[1.0, 4.0, 9.0]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Stream {
    ctx: Context,
    device: Arc<dyn DeviceQueue>,
    queue: Arc<Queue>,
}

/// The backend's one queue as a stream's device queue, where the backend has none per stream
/// (CPU, wgpu): every call is the backend's own, in order with all its other work.
struct BackendQueue(Arc<dyn Backend>);

impl DeviceQueue for BackendQueue {
    fn launch(
        &self,
        kernel: &dyn CompiledKernel,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> std::result::Result<(), BackendError> {
        kernel.launch(grid, args)
    }

    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> std::result::Result<(), BackendError> {
        self.0.upload(mem, data)
    }

    fn download(
        &self,
        mem: &dyn DeviceMemory,
        out: &mut [u8],
    ) -> std::result::Result<(), BackendError> {
        self.0.download(mem, out)
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> std::result::Result<(), BackendError> {
        self.0.copy(src, dst, bytes)
    }

    fn synchronize(&self) -> std::result::Result<(), BackendError> {
        self.0.synchronize()
    }
}

/// What a stream and its worker thread share.
struct Queue {
    state: Mutex<State>,
    /// Signalled when work is queued, work finishes or the stream is dropped.
    changed: Condvar,
}

struct State {
    jobs: VecDeque<Job>,
    /// Pieces of work queued so far; the `n`th is number `n`, counting from 1.
    queued: u64,
    /// Pieces of work finished (or skipped) so far, in order.
    done: u64,
    /// The first piece of work that failed, and its error.
    failure: Option<(u64, Error)>,
    /// Tasks waiting for the piece of work of each number.
    wakers: Vec<(u64, Waker)>,
    /// False once the stream is dropped: the worker ends when no work is left.
    open: bool,
}

/// One piece of work: what it is, for errors, and what runs it.
struct Job {
    what: String,
    run: Box<dyn FnOnce() -> Result<()> + Send>,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome of the work up to number `at` once it has finished, or `None` before.
    fn outcome(state: &State, at: u64) -> Option<Result<()>> {
        if state.done < at {
            return None;
        }
        Some(match &state.failure {
            Some((n, e)) if *n <= at => Err(e.clone()),
            _ => Ok(()),
        })
    }

    /// Blocks until the work up to number `at` has finished; its outcome.
    fn wait(&self, at: u64) -> Result<()> {
        let mut state = self.lock();
        loop {
            if let Some(outcome) = Queue::outcome(&state, at) {
                return outcome;
            }
            state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The outcome of the work up to `at`, or `Pending` with `waker` woken when it is known.
    fn poll(&self, at: u64, waker: &Waker) -> Poll<Result<()>> {
        let mut state = self.lock();
        match Queue::outcome(&state, at) {
            Some(outcome) => Poll::Ready(outcome),
            None => {
                if !state
                    .wakers
                    .iter()
                    .any(|(n, w)| *n == at && w.will_wake(waker))
                {
                    state.wakers.push((at, waker.clone()));
                }
                Poll::Pending
            }
        }
    }

    /// The worker: runs the jobs in order (skipping them after a failure) until the stream
    /// is dropped and none is left.
    fn work(&self) {
        loop {
            let (job, skip) = {
                let mut state = self.lock();
                loop {
                    if let Some(job) = state.jobs.pop_front() {
                        break (job, state.failure.is_some());
                    }
                    if !state.open {
                        return;
                    }
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                }
            };
            let Job { what, run } = job;
            // The job's closure, and everything it holds, is gone before the work counts as
            // finished.
            let result = if skip {
                drop(run);
                Ok(())
            } else {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|_| {
                    Err(Error::Internal {
                        what: format!("a panic in the {what} a stream ran"),
                    })
                })
            };
            let mut state = self.lock();
            state.done += 1;
            if let Err(e) = result {
                let n = state.done;
                state.failure.get_or_insert((
                    n,
                    Error::StreamFailed {
                        op: what,
                        source: Box::new(e),
                    },
                ));
            }
            let done = state.done;
            let failed = state.failure.is_some();
            let ready: Vec<Waker> = {
                let (ready, waiting) = std::mem::take(&mut state.wakers)
                    .into_iter()
                    .partition(|(n, _)| *n <= done || failed);
                state.wakers = waiting;
                ready.into_iter().map(|(_, w)| w).collect()
            };
            drop(state);
            self.changed.notify_all();
            ready.into_iter().for_each(Waker::wake);
        }
    }
}

/// A point in one stream's work: finished once everything queued on the stream before it
/// was recorded has finished. Made by [`Stream::record`]; other streams wait for it with
/// [`Stream::wait_for`], the host with [`Event::wait`] or `event.finished().await`.
#[derive(Clone)]
pub struct Event {
    queue: Arc<Queue>,
    at: u64,
}

impl Event {
    /// Blocks until the work before the event has finished. Fails with
    /// [`Error::StreamFailed`] when some of it failed.
    pub fn wait(&self) -> Result<()> {
        self.queue.wait(self.at)
    }

    /// Whether the work before the event has finished (failed or not).
    pub fn is_done(&self) -> bool {
        self.queue.lock().done >= self.at
    }

    /// A future that resolves when the work before the event has finished: `Ok`, or
    /// [`Error::StreamFailed`] when some of it failed. It needs no particular runtime (Tokio,
    /// async-std, a plain `block_on`); the stream's thread wakes it.
    pub fn finished(&self) -> Finished {
        Finished {
            queue: self.queue.clone(),
            at: self.at,
        }
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Event(after {} pieces of work)", self.at)
    }
}

/// The future of [`Event::finished`] and [`Stream::finished`].
pub struct Finished {
    queue: Arc<Queue>,
    at: u64,
}

impl Future for Finished {
    type Output = Result<()>;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<()>> {
        self.queue.poll(self.at, cx.waker())
    }
}

/// What a queued copy gives back once it has finished: its [`HostBuffer`] (holding the
/// downloaded elements, for a download). Take it with [`Pending::wait`] or `.await`.
pub struct Pending<R> {
    finished: Finished,
    slot: Arc<Mutex<Option<R>>>,
}

impl<R> Pending<R> {
    /// Blocks until the copy has finished; its result. Fails with [`Error::StreamFailed`]
    /// when it or earlier work on its stream failed (the host buffer is then dropped).
    pub fn wait(self) -> Result<R> {
        self.finished.queue.wait(self.finished.at)?;
        self.take()
    }

    /// Whether the copy has finished (failed or not).
    pub fn is_done(&self) -> bool {
        self.finished.queue.lock().done >= self.finished.at
    }

    fn take(&self) -> Result<R> {
        self.slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or_else(|| Error::Internal {
                what: "a finished stream copy left nothing to give back".into(),
            })
    }
}

impl<R> Future for Pending<R> {
    type Output = Result<R>;
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Result<R>> {
        let this = self.get_mut();
        match Pin::new(&mut this.finished).poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(this.take()),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A launch argument a queued launch owns: device memory, kept alive until the launch has
/// finished, or a value.
enum OwnedArg {
    Device(Arc<dyn DeviceMemory>),
    Value(Vec<u8>),
}

impl Context {
    /// A new [`Stream`] on this context's device, with a thread of its own (and a device
    /// queue of its own on OpenCL and CUDA). Fails with `Unsupported` when the host cannot
    /// start the thread, or as the driver does when it cannot make the queue.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (a, b) = (ctx.stream()?, ctx.stream()?);
    /// let x = ctx.upload(&[1u32, 2, 3])?;
    /// let y = ctx.zeroed::<u32>(3)?;
    /// a.copy(&x, &y)?;
    /// b.wait_for(&a.record())?; // b's later work runs after a's copy
    /// let out = b.download(&y, ctx.host_buffer(3)?)?;
    /// assert_eq!(&out.wait()?[..], &[1, 2, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn stream(&self) -> Result<Stream> {
        let device: Arc<dyn DeviceQueue> = match self.backend().queue()? {
            Some(q) => Arc::from(q),
            None => Arc::new(BackendQueue(self.backend().clone())),
        };
        let queue = Arc::new(Queue {
            state: Mutex::new(State {
                jobs: VecDeque::new(),
                queued: 0,
                done: 0,
                failure: None,
                wakers: Vec::new(),
                open: true,
            }),
            changed: Condvar::new(),
        });
        let worker = queue.clone();
        std::thread::Builder::new()
            .name("kiln-stream".into())
            .spawn(move || worker.work())
            .map_err(|e| Error::Unsupported {
                backend: self.device().backend,
                what: format!("a stream: the host could not start its thread ({e})"),
            })?;
        Ok(Stream {
            ctx: self.clone(),
            device,
            queue,
        })
    }
}

impl Stream {
    /// Queues `run` as the next piece of work.
    fn push(&self, what: String, run: impl FnOnce() -> Result<()> + Send + 'static) {
        let mut state = self.queue.lock();
        state.queued += 1;
        state.jobs.push_back(Job {
            what,
            run: Box::new(run),
        });
        drop(state);
        self.queue.changed.notify_all();
    }

    /// Queues `run` on `held` (what the device work it queues uses) and a wait for the
    /// device after it, so that the piece of work finishes when the device has finished it;
    /// `held` is dropped only then. The wait comes after a failed `run` too, which may have
    /// queued part of its commands.
    fn push_on_device<H: Send + 'static>(
        &self,
        what: String,
        held: H,
        run: impl FnOnce(&H) -> Result<()> + Send + 'static,
    ) {
        let device = self.device.clone();
        self.push(what, move || {
            let ran = run(&held);
            let finished = device.synchronize();
            drop(held);
            ran?;
            Ok(finished?)
        });
    }

    /// Queues a launch of `kernel` over `extent`, as [`Context::launch`] runs it. The kernel
    /// is compiled now, so its build and compile errors come back here; launch errors come
    /// back from the waits on this stream ([`Error::StreamFailed`]). `args` are the
    /// arguments after the index: `&Buffer`s and `&BufferSlice`s for views, values for
    /// values. Fails with `Unsupported` for a host slice: the launch runs after the slice's
    /// borrow ends, so upload it ([`Stream::upload`]) and pass the buffer.
    pub fn launch<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        extent: impl Into<Extent>,
        args: A,
    ) -> Result<()> {
        match self.ctx.ready_launch(kernel, extent, args)? {
            Some(r) => self.queue_launch(r),
            None => Ok(()),
        }
    }

    /// Queues a launch over `groups` groups of `group_size` work items, as
    /// [`Context::launch_grouped`] runs it; errors as [`Stream::launch`].
    pub fn launch_grouped<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        groups: impl Into<Extent>,
        group_size: impl Into<Extent>,
        args: A,
    ) -> Result<()> {
        let grid = self.ctx.grouped_grid(groups.into(), group_size.into())?;
        self.launch_grid(kernel, &grid, args)
    }

    /// Queues a launch over `grid`, as [`Context::launch_grid`] runs it; errors as
    /// [`Stream::launch`].
    pub fn launch_grid<'a, P, A: KernelArgs<'a, P>>(
        &self,
        kernel: impl IntoKernel<P>,
        grid: &Grid,
        args: A,
    ) -> Result<()> {
        let r = self.ctx.ready_grid(kernel, grid, args)?;
        self.queue_launch(r)
    }

    fn queue_launch(&self, r: crate::lang::ReadyLaunch<'_>) -> Result<()> {
        let compiled = self.ctx.compile(&r.ir)?;
        let backend = self.ctx.backend();
        let mut owned = Vec::with_capacity(r.args.len());
        for (i, a) in r.args.iter().enumerate() {
            owned.push(match a {
                LaunchArg::Device(m) => OwnedArg::Device(backend.view(*m, 0, m.byte_len())?),
                LaunchArg::Value(v) => OwnedArg::Value(v.clone()),
                _ => {
                    return Err(Error::Unsupported {
                        backend: self.ctx.device().backend,
                        what: format!(
                            "a host slice as argument {i} of `{}` launched on a stream: the \
                             launch runs after the slice's borrow ends; upload it \
                             (Stream::upload from a HostBuffer, or Context::upload) and pass \
                             the Buffer",
                            r.ir.name
                        ),
                    })
                }
            });
        }
        let (ctx, name, grid) = (self.ctx.clone(), r.ir.name.clone(), r.grid);
        let device = self.device.clone();
        let held = (owned, compiled);
        self.push_on_device(
            format!("launch of `{name}`"),
            held,
            move |(owned, compiled)| {
                let mut args: Vec<LaunchArg<'_>> = owned
                    .iter()
                    .map(|a| match a {
                        OwnedArg::Device(m) => LaunchArg::Device(&**m),
                        OwnedArg::Value(v) => LaunchArg::Value(v.clone()),
                    })
                    .collect();
                ctx.count_launch(&name, &grid, || {
                    device.launch(&**compiled, &grid, &mut args)
                })
            },
        );
        Ok(())
    }

    /// Queues a copy of `host` into `dst` (a `&Buffer` or a `&BufferSlice`), which must
    /// have its length; the copy holds `host` and gives it back when it has finished. Fails
    /// with `LengthMismatch` (`dst`'s length, then `host`'s) or `Unsupported` for a buffer
    /// of another context; the copy's own errors come back from the waits.
    pub fn upload<'b, T: IrType>(
        &self,
        host: HostBuffer<T>,
        dst: impl Into<BufferSlice<'b, T>>,
    ) -> Result<Pending<HostBuffer<T>>> {
        let dst = dst.into();
        self.check_lengths(&dst, host.len())?;
        let (memory, device) = (dst.memory().clone(), self.device.clone());
        self.push_pending(format!("upload of {} elements", host.len()), move || {
            device.upload(&*memory, host.bytes())?;
            Ok(host)
        })
    }

    /// Queues a copy of `src` (a `&Buffer` or a `&BufferSlice`) into `host`, which must have
    /// its length; the copy holds `host` and gives it back, holding the elements, when it has
    /// finished. Fails as [`Stream::upload`] does.
    pub fn download<'b, T: IrType>(
        &self,
        src: impl Into<BufferSlice<'b, T>>,
        mut host: HostBuffer<T>,
    ) -> Result<Pending<HostBuffer<T>>> {
        let src = src.into();
        self.check_lengths(&src, host.len())?;
        let (memory, device) = (src.memory().clone(), self.device.clone());
        self.push_pending(format!("download of {} elements", host.len()), move || {
            device.download(&*memory, host.bytes_mut())?;
            Ok(host)
        })
    }

    /// Queues a copy of `src` into `dst` on the device (each a `&Buffer` or a
    /// `&BufferSlice` of this context; the lengths must match). Fails as
    /// [`Stream::upload`] does.
    pub fn copy<'b, 'c, T: IrType>(
        &self,
        src: impl Into<BufferSlice<'b, T>>,
        dst: impl Into<BufferSlice<'c, T>>,
    ) -> Result<()> {
        let (src, dst) = (src.into(), dst.into());
        self.check_lengths(&dst, src.len())?;
        self.ctx.check_device(src.backend())?;
        let bytes = std::mem::size_of::<T>() * src.len();
        let held = (src.memory().clone(), dst.memory().clone());
        let device = self.device.clone();
        self.push_on_device(
            format!("device copy of {} elements", src.len()),
            held,
            move |(from, to)| Ok(device.copy(&**from, &**to, bytes)?),
        );
        Ok(())
    }

    /// Ok when `buffer` is this context's and holds `len` elements.
    fn check_lengths<T: IrType>(&self, buffer: &BufferSlice<'_, T>, len: usize) -> Result<()> {
        self.ctx.check_device(buffer.backend())?;
        if buffer.len() != len {
            return Err(Error::LengthMismatch {
                left: buffer.len(),
                right: len,
            });
        }
        Ok(())
    }

    /// Queues `run`, whose result the returned [`Pending`] gives back.
    fn push_pending<R: Send + 'static>(
        &self,
        what: String,
        run: impl FnOnce() -> Result<R> + Send + 'static,
    ) -> Result<Pending<R>> {
        let slot = Arc::new(Mutex::new(None));
        let filled = slot.clone();
        // The copies return when they are done, so they hold nothing past `run`.
        self.push_on_device(what, (), move |_| {
            let r = run()?;
            *filled.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            Ok(())
        });
        Ok(Pending {
            finished: self.finished(),
            slot,
        })
    }

    /// An event after the work queued so far.
    pub fn record(&self) -> Event {
        Event {
            queue: self.queue.clone(),
            at: self.queue.lock().queued,
        }
    }

    /// Makes the work queued on this stream from now on wait until `event` (of any stream)
    /// has finished. When work before the event failed, this stream fails too
    /// ([`Error::StreamFailed`]). Returns `Ok` at once: the wait is queued.
    pub fn wait_for(&self, event: &Event) -> Result<()> {
        if Arc::ptr_eq(&event.queue, &self.queue) {
            return Ok(()); // the stream's own work is in order already
        }
        let event = event.clone();
        self.push("wait for an event of another stream".into(), move || {
            event.wait()
        });
        Ok(())
    }

    /// A future that resolves when everything queued so far has finished; see
    /// [`Event::finished`].
    pub fn finished(&self) -> Finished {
        self.record().finished()
    }

    /// Blocks until everything queued so far has finished. Fails with
    /// [`Error::StreamFailed`] when some of it failed.
    pub fn synchronize(&self) -> Result<()> {
        self.record().wait()
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.queue.lock();
        write!(
            f,
            "Stream({} of {} pieces of work finished)",
            state.done, state.queued
        )
    }
}

impl Drop for Stream {
    /// Lets the queued work run to the end; the stream's thread ends after it.
    fn drop(&mut self) {
        self.queue.lock().open = false;
        self.queue.changed.notify_all();
    }
}
