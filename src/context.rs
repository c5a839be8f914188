//! The runtime: [`Context`] owns a device and the kernel cache, and launches kernels.

use crate::disk_cache::DiskCache;
use crate::error::Result;
use crate::plan::{DeviceProfile, PlanShape};
use crate::plan_cache::{CompiledPlan, Fingerprint, PlanCache};
use kiln_backend::{
    Backend, BackendError, CompiledKernel, DeviceInfo, Grid, LaunchArg, NativeDevice,
};
use kiln_ir::{kernel_hash, CompileOptions, Kernel, KernelHash};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

type CompileResult = std::result::Result<Arc<dyn CompiledKernel>, BackendError>;
/// One cache entry: the kernel (to rule out hash collisions) and its compile result.
type CacheEntry = Arc<(Kernel, OnceLock<CompileResult>)>;

/// How many kernels, and how many plan shapes, a context keeps in memory unless
/// [`Context::set_cache_capacity`] says otherwise.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// ctx.set_cache_capacity(1); // keep one kernel at a time for a while
/// ctx.from(&[1u8, 2]).map(|x| x ^ 1).to_vec()?;
/// ctx.from(&[1u8, 2]).map(|x| x ^ 2).to_vec()?;
/// assert_eq!(ctx.cache().len(), 1);
/// ctx.set_cache_capacity(kiln::DEFAULT_CACHE_CAPACITY); // back to the default
/// ctx.from(&[1u8, 2]).map(|x| x ^ 3).to_vec()?;
/// assert_eq!(ctx.cache().len(), 2);
/// # Ok::<(), kiln::Error>(())
/// ```
pub const DEFAULT_CACHE_CAPACITY: usize = 1024;

/// The in-memory kernel cache: one entry per kernel structure, compiled once even when many
/// threads ask for it at the same moment (the others wait for the first compile). It holds at
/// most its capacity of kernels: past that the least recently used one is dropped (and, once
/// no plan or caller holds it either, its compiled code is freed). [`Context::cache`] gives
/// a context's.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// ctx.set_cache_capacity(2);
/// for k in 0..5u8 {
///     // A `u8` constant is part of the kernel, so each `k` is another kernel.
///     ctx.from(&[1u8, 2]).map(move |x| x ^ k).to_vec()?;
/// }
/// assert!(ctx.cache().len() <= 2);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct KernelCache {
    entries: Mutex<CacheMap>,
}

struct CacheMap {
    /// Each kernel's entry and when it was last used (a tick of `clock`).
    map: HashMap<KernelHash, (CacheEntry, u64)>,
    clock: u64,
    capacity: usize,
}

impl Default for KernelCache {
    fn default() -> Self {
        KernelCache {
            entries: Mutex::new(CacheMap {
                map: HashMap::new(),
                clock: 0,
                capacity: DEFAULT_CACHE_CAPACITY,
            }),
        }
    }
}

impl CacheMap {
    fn touch(&mut self, hash: KernelHash) -> Option<CacheEntry> {
        self.clock += 1;
        let clock = self.clock;
        self.map.get_mut(&hash).map(|(e, used)| {
            *used = clock;
            e.clone()
        })
    }

    /// Drops least recently used entries until at most `keep` remain.
    fn shrink_to(&mut self, keep: usize) {
        while self.map.len() > keep {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(h, _)| *h);
            match oldest {
                Some(h) => self.map.remove(&h),
                None => break,
            };
        }
    }
}

impl KernelCache {
    fn map(&self) -> std::sync::MutexGuard<'_, CacheMap> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached result for `kernel` (whose structural hash is `hash`), if it was compiled
    /// (or failed to compile) before.
    fn lookup(&self, kernel: &Kernel, hash: KernelHash) -> Option<CompileResult> {
        let entry = self.map().touch(hash)?;
        if entry.0 == *kernel {
            entry.1.get().cloned()
        } else {
            None
        }
    }

    /// The compiled kernel for `kernel` (whose structural hash is `hash`), compiling it with
    /// `compile` on first use. Returns the compile error (which is cached like a success: the
    /// same kernel fails the same way).
    fn get_or_compile(
        &self,
        kernel: &Kernel,
        hash: KernelHash,
        compile: impl FnOnce() -> CompileResult,
    ) -> CompileResult {
        let entry = {
            let mut map = self.map();
            match map.touch(hash) {
                Some(e) if e.0 == *kernel => e,
                Some(_) => return compile(),
                None => {
                    let keep = map.capacity.saturating_sub(1);
                    map.shrink_to(keep);
                    let e = Arc::new((kernel.clone(), OnceLock::new()));
                    let clock = map.clock;
                    map.map.insert(hash, (e.clone(), clock));
                    e
                }
            }
        };
        let result = entry.1.get_or_init(compile).clone();
        if let Err(e) = &result {
            if !remembered(e) {
                // A transient failure: forget it, so the next use compiles again.
                let mut map = self.map();
                if map
                    .map
                    .get(&hash)
                    .is_some_and(|(e, _)| Arc::ptr_eq(e, &entry))
                {
                    map.map.remove(&hash);
                }
            }
        }
        result
    }

    /// Every kernel in the cache (compiled or failed), in no particular order.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert!(ctx.cache().is_empty());
    /// ctx.from(&[1.0f32, 2.0]).map(|x| x * 3.0).to_vec()?;
    /// let names: Vec<String> = ctx.cache().kernels().iter().map(|k| k.name.clone()).collect();
    /// assert_eq!(ctx.cache().len(), names.len());
    /// assert!(names.iter().any(|n| n.starts_with("query")), "{names:?}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn kernels(&self) -> Vec<Kernel> {
        self.map().map.values().map(|(e, _)| e.0.clone()).collect()
    }

    /// Number of kernels in the cache.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// ctx.from(&[1u32, 2, 3]).sum()?;
    /// assert!(ctx.cache().len() >= 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.map().map.len()
    }

    /// True when nothing has been cached.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert!(ctx.cache().is_empty());
    /// ctx.from(&[1u32, 2, 3]).sum()?;
    /// assert!(!ctx.cache().is_empty());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps at most `capacity` kernels (at least one), dropping the least recently used.
    fn set_capacity(&self, capacity: usize) {
        let mut map = self.map();
        map.capacity = capacity.max(1);
        let keep = map.capacity;
        map.shrink_to(keep);
    }

    fn clear(&self) {
        self.map().map.clear();
    }
}

/// Whether a failed compile is kept in the cache: the compiler's verdict on a kernel (and
/// what the device cannot do) stays the same, while a driver failing to load a binary, or an
/// allocation failing, may not happen next time.
fn remembered(e: &BackendError) -> bool {
    matches!(
        e,
        BackendError::Compile { .. } | BackendError::Unsupported { .. }
    )
}

/// Counters of a context's work, for tests and tuning ([`Context::stats`]).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs = [1.0f32, 2.0, 3.0];
/// ctx.from(&xs).map(|x| x * 2.0).sum()?;
/// let first = ctx.stats();
/// ctx.from(&xs).map(|x| x * 2.0).sum()?; // the same query again: nothing new to compile
/// let second = ctx.stats();
/// assert_eq!(second.compilations, first.compilations);
/// assert!(second.launches > first.launches);
/// assert_eq!(second.plan_hits, first.plan_hits + 1);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Kernels compiled by the backend (cache misses).
    pub compilations: u64,
    /// Kernel launches.
    pub launches: u64,
    /// Time spent in backend compiles, in nanoseconds.
    pub compile_nanos: u64,
    /// Kernels loaded from the disk cache instead of compiled.
    pub disk_hits: u64,
    /// Query plans (the kernels of one terminal) taken from the plan cache: the query ran
    /// again with the same closures, types and plan, so no kernel IR was built or hashed.
    pub plan_hits: u64,
}

struct Inner {
    backend: Arc<dyn Backend>,
    cache: KernelCache,
    plans: PlanCache,
    compilations: AtomicU64,
    launches: AtomicU64,
    compile_nanos: AtomicU64,
    disk_hits: AtomicU64,
    disk: Option<DiskCache>,
    plan_shape: Mutex<PlanShape>,
    options: Mutex<CompileOptions>,
}

/// A device plus its kernel and plan caches: where queries start (`ctx.from`) and kernels
/// are launched (`ctx.launch`). Cheap to clone (the clones share the device and caches) and
/// shareable between threads.
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let xs: Vec<u32> = (1..=100).collect();
/// let handles: Vec<_> = (0..2u32)
///     .map(|t| {
///         let (ctx, xs) = (ctx.clone(), xs.clone());
///         std::thread::spawn(move || ctx.from(&xs).map(move |x| x * (t + 1)).sum())
///     })
///     .collect();
/// let sums: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect::<Result<_, _>>()?;
/// assert_eq!(sums, [5050, 10100]);
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Context({} on {})",
            self.device().backend,
            self.device().name
        )
    }
}

/// True when `KILN_LOG` lists `kernels`: every generated source is printed once, when the
/// kernel is first compiled or loaded from the disk cache.
fn log_kernels() -> bool {
    std::env::var("KILN_LOG").is_ok_and(|v| v.split(',').any(|w| w.trim() == "kernels"))
}

impl Context {
    /// A context driving `backend`, with empty caches.
    pub(crate) fn from_backend(backend: Arc<dyn Backend>) -> Context {
        Context {
            inner: Arc::new(Inner {
                backend,
                cache: KernelCache::default(),
                plans: PlanCache::default(),
                compilations: AtomicU64::new(0),
                launches: AtomicU64::new(0),
                compile_nanos: AtomicU64::new(0),
                disk_hits: AtomicU64::new(0),
                disk: DiskCache::from_env(),
                plan_shape: Mutex::new(PlanShape::Auto),
                options: Mutex::new(CompileOptions::default()),
            }),
        }
    }

    /// Chooses how the query planner spreads work (all clones of this context share it).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs: Vec<u32> = (0..10_000).collect();
    /// ctx.set_plan_shape(kiln::PlanShape::Grouped); // as GPUs run it, here on the CPU
    /// assert_eq!(ctx.from(&xs).sum()?, xs.iter().sum::<u32>());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn set_plan_shape(&self, shape: PlanShape) {
        *self
            .inner
            .plan_shape
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = shape;
    }

    /// Sets how this context compiles every kernel from now on, queries' and launched ones
    /// alike (all clones of this context share it): fast math and a register limit. A kernel
    /// launched with options of its own ([`KernelFn::with_options`](crate::lang::KernelFn::with_options))
    /// keeps the ones it sets. The options are part of every cache key, so kernels compiled
    /// before stay cached under theirs. Fails with `Unsupported`, changing nothing, when the
    /// device has no such option ([`kiln::Features`](crate::Features)`::fast_math` and
    /// `register_limit` say which it has: WGSL and the CPU backend have no fast math, only
    /// CUDA takes a register limit) and for launch bounds, which bound one kernel's launches
    /// and so are given with that kernel.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// use kiln::CompileOptions;
    /// let ctx = Context::new()?; // the best device present
    /// if ctx.device().features.fast_math {
    ///     ctx.set_compile_options(CompileOptions::new().fast_math(true))?;
    ///     let xs: Vec<f32> = (1..=1000).map(|i| i as f32).collect();
    ///     let s = ctx.from(&xs).map(|x| x.sqrt() / 3.0).sum()?;
    ///     let want: f64 = xs.iter().map(|&x| (x as f64).sqrt() / 3.0).sum();
    ///     assert!((s as f64 - want).abs() < 1e-3 * want, "{s} {want}");
    /// } else {
    ///     let e = ctx.set_compile_options(CompileOptions::new().fast_math(true));
    ///     assert!(matches!(e, Err(kiln::Error::Backend(kiln::BackendError::Unsupported { .. }))));
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn set_compile_options(&self, options: CompileOptions) -> Result<()> {
        if let Some(n) = options.launch_bounds {
            return Err(crate::Error::Unsupported {
                backend: self.device().backend,
                what: format!(
                    "launch bounds ({n}) for a whole context: they bound one kernel's launches, \
                     so give them with that kernel (KernelFn::with_options)"
                ),
            });
        }
        kiln_backend::check_options(self.device(), &options)?;
        *self.inner.options.lock().unwrap_or_else(|p| p.into_inner()) = options;
        Ok(())
    }

    /// The compile options set by [`Context::set_compile_options`] (nothing set at first).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.compile_options(), kiln::CompileOptions::new());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn compile_options(&self) -> CompileOptions {
        *self.inner.options.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plan shape queries use now: `Auto` resolved for this device.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.effective_plan_shape(), kiln::PlanShape::Chunked); // Auto, on a CPU
    /// ctx.set_plan_shape(kiln::PlanShape::Grouped);
    /// assert_eq!(ctx.effective_plan_shape(), kiln::PlanShape::Grouped);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn effective_plan_shape(&self) -> PlanShape {
        self.profile().shape
    }

    /// What the query planner knows about this context's device, with the plan shape set by
    /// [`Context::set_plan_shape`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let profile = ctx.profile();
    /// assert_eq!(profile.shape, kiln::PlanShape::Chunked);
    /// assert_eq!(profile.max_group_size, ctx.device().max_group_size);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn profile(&self) -> DeviceProfile {
        let shape = *self
            .inner
            .plan_shape
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        DeviceProfile::of(self.device(), shape)
    }

    /// The backend this context drives.
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The device this context runs on.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let d = ctx.device();
    /// assert_eq!((d.backend, d.index), (BackendKind::Cpu, 0));
    /// assert!(d.features.f64 && d.features.int64);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn device(&self) -> &DeviceInfo {
        self.inner.backend.info()
    }

    /// The backend's own handles to its device and to the stream or queue every launch and
    /// copy of this context goes to, in order (a [`Stream`](crate::Stream)'s work goes to a
    /// queue of its own on OpenCL and CUDA) ([`NativeDevice`]): the CUDA context and stream,
    /// the OpenCL context, device and in-order command queue, the wgpu device and queue
    /// (`kiln::wgpu::Device` and `kiln::wgpu::Queue` behind `Any`), or `Host` for the CPU
    /// backend, whose calls have finished when they return. With
    /// [`BufferSlice::native`](crate::BufferSlice::native), what a native library needs to
    /// work on kiln's memory in place.
    ///
    /// # Safety
    ///
    /// Work queued there runs in order with kiln's, so it must keep what kiln's work relies
    /// on: it leaves the memory of other buffers alone and does not change the stream's or
    /// queue's settings, and the handles are used while the context lives.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// // SAFETY: only looked at.
    /// assert!(matches!(unsafe { ctx.native_device() }, kiln::NativeDevice::Host));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub unsafe fn native_device(&self) -> NativeDevice {
        self.inner.backend.native_device()
    }

    /// Counters of compilations, launches and compile time so far.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.0f32, 2.0, 3.0];
    /// ctx.from(&xs).sum()?;
    /// let first = ctx.stats();
    /// assert!(first.compilations >= 1 && first.launches >= 1);
    /// ctx.from(&xs).sum()?; // the same query again: no compile, a plan-cache hit
    /// assert_eq!(ctx.stats().compilations, first.compilations);
    /// assert_eq!(ctx.stats().plan_hits, first.plan_hits + 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        Stats {
            compilations: self.inner.compilations.load(Ordering::Relaxed),
            launches: self.inner.launches.load(Ordering::Relaxed),
            compile_nanos: self.inner.compile_nanos.load(Ordering::Relaxed),
            disk_hits: self.inner.disk_hits.load(Ordering::Relaxed),
            plan_hits: self.inner.plans.hits(),
        }
    }

    /// Drops every kernel and plan this context keeps in memory (the disk cache stays);
    /// later queries and launches compile again, or load from the disk cache.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// ctx.from(&[1u32, 2]).sum()?;
    /// ctx.clear_caches();
    /// assert!(ctx.cache().is_empty());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn clear_caches(&self) {
        self.inner.cache.clear();
        self.inner.plans.clear();
    }

    /// Keeps at most `capacity` compiled kernels, and plans of at most `capacity` query
    /// shapes, in memory (default [`DEFAULT_CACHE_CAPACITY`]; at least one): past that the
    /// least recently used are dropped, and their compiled code freed once nothing holds it.
    /// A program that builds endless distinct kernels (a histogram with a new bin count per
    /// call) then runs in bounded memory.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// ctx.set_cache_capacity(2);
    /// let xs = [1u32, 2, 3];
    /// // Four queries of four shapes: four kernels compiled, at most two kept.
    /// ctx.from(&xs).map(|x| x + 1u32).to_vec()?;
    /// ctx.from(&xs).map(|x| x * 3u32).to_vec()?;
    /// ctx.from(&xs).map(|x| x ^ 5u32).to_vec()?;
    /// ctx.from(&xs).map(|x| x >> 1u32).to_vec()?;
    /// assert!(ctx.stats().compilations >= 4);
    /// assert!(ctx.cache().len() <= 2, "{}", ctx.cache().len());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn set_cache_capacity(&self, capacity: usize) {
        self.inner.cache.set_capacity(capacity);
        self.inner.plans.set_capacity(capacity);
    }

    /// The in-memory kernel cache.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// ctx.from(&[1i64, -2]).map(|x| x * x).to_vec()?;
    /// assert!(!ctx.cache().is_empty());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn cache(&self) -> &KernelCache {
        &self.inner.cache
    }

    /// Validates and compiles `kernel` (or takes it from the cache). Returns IR validation or
    /// backend compile errors.
    ///
    /// ```
    /// use kiln::ir::*;
    /// # use kiln::prelude::*;
    /// let k = Kernel::build("double", |k| {
    ///     let x = k.buffer::<f32>("x", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     x.store(i, x.load(i) * 2.0f32);
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// ctx.compile(&k)?;
    /// ctx.compile(&k)?; // the second time from the cache
    /// assert_eq!(ctx.stats().compilations, 1);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn compile(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>> {
        self.compile_under(kernel, &self.compile_options())
    }

    /// [`Context::compile`] with the options the kernel leaves unset taken from `context`.
    fn compile_under(
        &self,
        kernel: &Kernel,
        context: &CompileOptions,
    ) -> Result<Arc<dyn CompiledKernel>> {
        let options = kernel.options.or(context);
        if options != kernel.options {
            let mut with = kernel.clone();
            with.options = options;
            return self.compile_as_given(&with);
        }
        self.compile_as_given(kernel)
    }

    /// [`Context::compile`] with the kernel's own options, whatever the context's.
    fn compile_as_given(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>> {
        // The kernel is hashed once per call, whether it is found or compiled.
        let hash = kernel_hash(kernel);
        if let Some(hit) = self.inner.cache.lookup(kernel, hash) {
            return Ok(hit?);
        }
        // Validated once: what validation finds goes to the backend.
        let info = kiln_ir::validate(kernel)?;
        let r = self
            .inner
            .cache
            .get_or_compile(kernel, hash, || self.compile_uncached(kernel, hash, &info));
        Ok(r?)
    }

    /// Loads `kernel` from the disk cache or compiles it (and stores its binary there), with
    /// `facts`, what its validation found.
    fn compile_uncached(
        &self,
        kernel: &Kernel,
        hash: KernelHash,
        facts: &kiln_ir::KernelInfo,
    ) -> std::result::Result<Arc<dyn CompiledKernel>, BackendError> {
        let backend = &self.inner.backend;
        let info = backend.info();
        let kind = info.backend;
        let _span =
            tracing::debug_span!("compile", kernel = %kernel.name, backend = %kind).entered();
        let hash = hash.to_string();
        let version = backend.compiler_version();
        // The source is written once: logged, part of the disk cache's key (so a change to a
        // writer is a new entry), and compiled. A backend without a source (the CPU) has
        // neither a log nor a disk cache.
        let mut prepared = backend.prepare(kernel, facts)?;
        let source = prepared.text.take();
        let key = source.as_deref().map(|source| {
            [
                hash.as_str(),
                source,
                kind.name(),
                info.name.as_str(),
                version.as_str(),
            ]
        });
        if let (Some(source), true) = (&source, log_kernels()) {
            eprintln!("kiln {kind}: kernel `{}`\n{source}", kernel.name);
        }
        let disk = self.inner.disk.as_ref().zip(key.as_ref());
        if let Some((d, key)) = disk {
            if let Some(binary) = d.load(key) {
                match backend.load_binary(kernel, &prepared, &binary) {
                    Ok(k) => {
                        self.inner.disk_hits.fetch_add(1, Ordering::Relaxed);
                        return Ok(k);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cached binary rejected; compiling again");
                        d.remove(key);
                    }
                }
            }
        }
        self.inner.compilations.fetch_add(1, Ordering::Relaxed);
        let start = std::time::Instant::now();
        let r = backend.compile_prepared(kernel, prepared);
        let nanos = start.elapsed().as_nanos() as u64;
        self.inner.compile_nanos.fetch_add(nanos, Ordering::Relaxed);
        tracing::debug!(ms = nanos as f64 / 1e6, ok = r.is_ok(), "compiled");
        let (compiled, binary) = r?;
        if let (Some((d, key)), Some(b)) = (disk, binary) {
            if let Err(e) = d.store(key, &b) {
                tracing::warn!(error = %e, "could not write the kernel cache");
            }
        }
        Ok(compiled)
    }

    /// Compiles (cached) and runs an IR `kernel` over `grid` with `args`, one per parameter.
    /// Host arguments are up to date when it returns; launches on device buffers alone may
    /// still run (see [`Context::synchronize`]). Returns validation, compile or launch errors.
    ///
    /// ```
    /// use kiln::ir::*;
    /// use kiln::{Grid, LaunchArg};
    /// # use kiln::prelude::*;
    /// let k = Kernel::build("add_one", |k| {
    ///     let a = k.buffer::<i32>("a", Access::Read);
    ///     let out = k.buffer::<i32>("out", Access::ReadWrite);
    ///     let i = global_id(Axis::X);
    ///     out.store(i, a.load(i) + 1i32);
    /// })?;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let a: Vec<i32> = (0..64).collect();
    /// let mut out = vec![0i32; 64];
    /// ctx.launch_ir(&k, &Grid::linear(2, 32), &mut [LaunchArg::read(&a), LaunchArg::read_write(&mut out)])?;
    /// assert_eq!(out, (1..65).collect::<Vec<i32>>());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn launch_ir(
        &self,
        kernel: &Kernel,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> Result<()> {
        let compiled = self.compile(kernel)?;
        self.launch_compiled(&kernel.name, &*compiled, grid, args)
    }

    /// The compiled kernels of a query plan: from the plan cache when it holds `fingerprint`
    /// (see the `plan_cache` module), otherwise the kernels of `build`, compiled as
    /// [`Context::compile`] does (and cached when there is a fingerprint). Returns the first
    /// build, validation or compile error.
    pub(crate) fn plan(
        &self,
        fingerprint: Option<Fingerprint>,
        build: impl FnOnce() -> Result<Vec<Kernel>>,
    ) -> Result<CompiledPlan> {
        // The context's options are part of the plan's key, as of each kernel's.
        let options = self.compile_options();
        let fingerprint = fingerprint.map(|mut f| {
            f.shape.options = options;
            f
        });
        self.inner
            .plans
            .get_or_build(fingerprint, build, |k| self.compile_under(k, &options))
    }

    /// Launches `compiled` (kernel `name`) on `grid` with `args`, counted in
    /// [`Context::stats`] and traced in a `launch` span. Returns the backend's launch error.
    pub(crate) fn launch_compiled(
        &self,
        name: &str,
        compiled: &dyn CompiledKernel,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> Result<()> {
        self.count_launch(name, grid, || compiled.launch(grid, args))
    }

    /// Runs `launch`, a launch of kernel `name` over `grid`, inside its trace span and
    /// counted in [`Context::stats`].
    pub(crate) fn count_launch(
        &self,
        name: &str,
        grid: &Grid,
        launch: impl FnOnce() -> std::result::Result<(), BackendError>,
    ) -> Result<()> {
        let _span = tracing::debug_span!("launch", kernel = %name, groups = ?grid.groups, group_size = ?grid.group_size).entered();
        self.inner.launches.fetch_add(1, Ordering::Relaxed);
        launch()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_backend::BackendKind;

    struct Nothing;
    impl CompiledKernel for Nothing {
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }

        fn launch(
            &self,
            _: &Grid,
            _: &mut [LaunchArg<'_>],
        ) -> std::result::Result<(), BackendError> {
            Ok(())
        }
    }

    fn kernel() -> Kernel {
        Kernel::build("k", |k| {
            let _ = k.value::<u32>("n");
        })
        .unwrap()
    }

    #[test]
    fn compile_errors_are_remembered_and_load_failures_tried_again() {
        let cache = KernelCache::default();
        let k = kernel();
        let load_failure = || -> CompileResult {
            Err(BackendError::Load {
                backend: BackendKind::Cuda,
                kernel: "k".into(),
                reason: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            })
        };
        assert!(cache
            .get_or_compile(&k, kernel_hash(&k), load_failure)
            .is_err());
        assert_eq!(cache.len(), 0, "a load failure is not kept");
        let mut compiles = 0;
        let ok = cache.get_or_compile(&k, kernel_hash(&k), || {
            compiles += 1;
            Ok(Arc::new(Nothing) as Arc<dyn CompiledKernel>)
        });
        assert!(ok.is_ok() && compiles == 1, "the next use compiles again");
        let other = Kernel::build("other", |k| {
            let _ = k.value::<u32>("m");
        })
        .unwrap();
        let rejected = || -> CompileResult {
            Err(BackendError::Compile {
                backend: BackendKind::Cuda,
                kernel: "other".into(),
                log: "error".into(),
                source_text: String::new(),
            })
        };
        assert!(cache
            .get_or_compile(&other, kernel_hash(&other), rejected)
            .is_err());
        assert!(
            cache
                .lookup(&other, kernel_hash(&other))
                .is_some_and(|r| r.is_err()),
            "a compile error is kept"
        );
    }

    #[test]
    fn the_kernel_cache_drops_the_least_recently_used_past_its_capacity() {
        let cache = KernelCache::default();
        cache.set_capacity(2);
        let ks: Vec<Kernel> = (0..3)
            .map(|i| {
                Kernel::build(&format!("k{i}"), |k| {
                    let _ = k.value::<u32>("n");
                })
                .unwrap()
            })
            .collect();
        let compile = || Ok(Arc::new(Nothing) as Arc<dyn CompiledKernel>);
        let _ = cache.get_or_compile(&ks[0], kernel_hash(&ks[0]), compile);
        let _ = cache.get_or_compile(&ks[1], kernel_hash(&ks[1]), compile);
        assert!(
            cache.lookup(&ks[0], kernel_hash(&ks[0])).is_some(),
            "k0 used again, after k1"
        );
        let _ = cache.get_or_compile(&ks[2], kernel_hash(&ks[2]), compile);
        assert_eq!(cache.len(), 2);
        assert!(
            cache.lookup(&ks[1], kernel_hash(&ks[1])).is_none(),
            "k1, least recently used, is dropped"
        );
        assert!(
            cache.lookup(&ks[0], kernel_hash(&ks[0])).is_some()
                && cache.lookup(&ks[2], kernel_hash(&ks[2])).is_some()
        );
    }
}
