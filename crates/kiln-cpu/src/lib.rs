//! # kiln-cpu: the embedded CPU backend
//!
//! Cranelift JIT-compiles each kiln kernel into a native function that runs all work items of
//! one group (see the `lower` module for how barriers and shared memory work); the launcher runs the
//! grid's groups in parallel on rayon's thread pool, several groups along x per call when the
//! kernel cannot tell its groups apart. Buffers are host memory, passed without
//! copies. Subgroups have one lane.

#![deny(missing_docs)]
mod lower;
mod mathlib;
#[cfg(test)]
mod tests;

use cranelift_codegen::ir::{types, AbiParam};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, FuncId, Linkage, Module};
use kiln_backend::*;
use kiln_ir::{print_kernel, Kernel, KernelInfo};
use lower::*;
use mathlib::MathImports;
use rayon::prelude::*;
use std::cell::{RefCell, UnsafeCell};
use std::sync::Arc;

/// Largest number of work items per group the CPU backend launches.
pub const MAX_GROUP_SIZE: u32 = 1 << 16;

/// The machine code of one compiled kernel: its own JIT module, whose memory is unmapped when
/// the last `CpuKernel` holding it is dropped (so a context's bounded kernel cache bounds the
/// code it keeps mapped, too).
struct Code {
    module: Option<JITModule>,
}

// SAFETY: the module is never used after compiling, only freed, once, in `drop`.
unsafe impl Send for Code {}
// SAFETY: as above; `&Code` gives no access to the module.
unsafe impl Sync for Code {}

impl Drop for Code {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: the only pointer into this module's code is the owning CpuKernel's
            // `func`, and that kernel is being dropped (it holds the last Arc to this Code).
            unsafe { module.free_memory() };
            LIVE_CODE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// JIT modules of compiled kernels currently mapped, in this process.
static LIVE_CODE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many compiled CPU kernels' machine code is mapped in this process right now: the
/// kernels that some cache, plan or caller still holds.
pub fn live_compiled_kernels() -> usize {
    LIVE_CODE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Shared memory one group may use: each group's arrays live in its thread's scratch space.
const MAX_SHARED_BYTES: u64 = 64 << 20;

/// The CPU device: a Cranelift JIT module and rayon's global thread pool.
pub struct CpuBackend {
    info: DeviceInfo,
    pool: Arc<MemoryPool<Words>>,
    /// The host's instruction set, which every kernel's JIT module is built for.
    isa: cranelift_codegen::isa::OwnedTargetIsa,
}

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: BackendKind::Cpu,
        library: "cranelift (host ISA)".into(),
        reason,
    }
}

impl CpuBackend {
    /// Creates the CPU device for the host. Fails with `Unavailable` if Cranelift does not
    /// support the host architecture.
    pub fn new() -> Result<CpuBackend, BackendError> {
        let mut flags = settings::builder();
        let set = |f: &mut settings::Builder, k: &str, v: &str| {
            f.set(k, v).map_err(|e| unavailable(e.to_string()))
        };
        set(&mut flags, "opt_level", "speed")?;
        set(&mut flags, "use_colocated_libcalls", "false")?;
        set(&mut flags, "is_pic", "false")?;
        set(
            &mut flags,
            "enable_verifier",
            if cfg!(debug_assertions) {
                "true"
            } else {
                "false"
            },
        )?;
        let isa = cranelift_native::builder()
            .map_err(|e| unavailable(e.to_string()))?
            .finish(settings::Flags::new(flags))
            .map_err(|e| unavailable(e.to_string()))?;
        let threads = rayon::current_num_threads() as u32;
        let info = DeviceInfo {
            backend: BackendKind::Cpu,
            name: format!("{} CPU ({threads} threads)", std::env::consts::ARCH),
            index: 0,
            class: DeviceClass::Cpu,
            memory_bytes: host_memory_bytes(),
            compute_units: threads,
            max_group_size: MAX_GROUP_SIZE,
            subgroup_size: 1,
            max_shared_bytes: MAX_SHARED_BYTES,
            max_buffer_bytes: host_memory_bytes(),
            indexed_private_arrays: true,
            fits_groups_to_work: true,
            host_memory: true,
            max_loop_iterations: None,
            features: Features {
                f64: true,
                int64: true,
                subgroups: true,
                atomics64: true,
                fast_math: false,
                register_limit: false,
            },
            unusable: None,
        };
        Ok(CpuBackend {
            pool: Arc::new(MemoryPool::new(pool_capacity(info.memory_bytes))),
            info,
            isa,
        })
    }
}

fn host_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb * 1024)
        })
        .unwrap_or(0)
}

impl Backend for CpuBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn compiler_version(&self) -> String {
        "cranelift-0.135".into()
    }

    /// Cranelift compiles the IR itself: nothing is written; what validation found goes to
    /// the lowering.
    fn prepare(&self, kernel: &Kernel, info: &KernelInfo) -> Result<Prepared, BackendError> {
        check_options(&self.info, &kernel.options)?;
        Ok(Prepared {
            text: None,
            written: Box::new(info.clone()),
        })
    }

    fn compile_prepared(
        &self,
        kernel: &Kernel,
        prepared: Prepared,
    ) -> Result<(Arc<dyn CompiledKernel>, Option<Vec<u8>>), BackendError> {
        let info: KernelInfo = prepared.into_written(BackendKind::Cpu)?;
        Ok((self.compile_ir(kernel, info)?, None))
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        let words = bytes.div_ceil(8);
        let words = match self.pool.take(words * 8) {
            Some(kept) => kept,
            None => new_words(words).ok_or_else(|| BackendError::OutOfMemory {
                backend: BackendKind::Cpu,
                bytes: bytes as u64,
                reason: "the allocator refused".into(),
            })?,
        };
        let allocation = HostAllocation {
            words,
            pool: self.pool.clone(),
        };
        Ok(Arc::new(HostMemory::whole(allocation, bytes)))
    }

    fn view(
        &self,
        mem: &dyn DeviceMemory,
        offset: usize,
        bytes: usize,
    ) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        view_region::<HostAllocation>(BackendKind::Cpu, mem, offset, bytes)
    }

    fn native_memory(&self, mem: &dyn DeviceMemory) -> Result<NativeMemory, BackendError> {
        Ok(NativeMemory::Host {
            ptr: host_memory(mem)? as *mut u8,
            bytes: mem.byte_len(),
        })
    }

    fn native_device(&self) -> NativeDevice {
        NativeDevice::Host
    }

    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError> {
        let ptr = host_memory(mem)?;
        if data.len() > mem.byte_len() {
            return Err(copy_error(data.len(), mem.byte_len()));
        }
        // SAFETY: the memory holds at least `data.len()` bytes; no launch runs concurrently
        // (CPU launches finish before they return).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr as *mut u8, data.len()) };
        Ok(())
    }

    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError> {
        let ptr = host_memory(mem)?;
        if out.len() > mem.byte_len() {
            return Err(copy_error(out.len(), mem.byte_len()));
        }
        // SAFETY: as in `upload`.
        unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        check_copy(BackendKind::Cpu, src, dst, bytes)?;
        let (from, to) = (host_memory(src)?, host_memory(dst)?);
        if from == to {
            return Ok(());
        }
        if from.abs_diff(to) < bytes as u64 {
            // SAFETY: overlapping views of one allocation, each holding `bytes` (checked
            // above); `copy` moves as if through a temporary.
            unsafe { std::ptr::copy(from as *const u8, to as *mut u8, bytes) };
            return Ok(());
        }
        // SAFETY: two disjoint memories holding at least `bytes` each (checked above); no
        // launch runs concurrently (CPU launches finish before they return).
        let (from, to) = unsafe {
            (
                std::slice::from_raw_parts(from as *const u8, bytes),
                std::slice::from_raw_parts_mut(to as *mut u8, bytes),
            )
        };
        use rayon::prelude::*;
        to.par_chunks_mut(1 << 20)
            .zip(from.par_chunks(1 << 20))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(())
    }
}

impl CpuBackend {
    /// Compiles `kernel`, which validated with `info`, with Cranelift. Fails with `Compile`
    /// (the IR listing as source) or `Unsupported`.
    fn compile_ir(
        &self,
        kernel: &Kernel,
        info: KernelInfo,
    ) -> Result<Arc<dyn CompiledKernel>, BackendError> {
        let compile_err = |log: String| BackendError::Compile {
            backend: BackendKind::Cpu,
            kernel: kernel.name.clone(),
            log,
            source_text: print_kernel(kernel),
        };
        // Intrinsics run their Rust bodies here (same handles, so `info` still holds). Calls
        // become the functions' statements, so the quad lowering sees all of them; the
        // inlined kernel is typed anew.
        let fallbacks = (!kernel.natives.is_empty()).then(|| kiln_ir::native_fallbacks(kernel));
        let kernel = fallbacks.as_ref().unwrap_or(kernel);
        let inlined = (!kernel.functions.is_empty()).then(|| kiln_ir::inline_calls(kernel));
        let (lowered, info) = match &inlined {
            Some(k) => (k, KernelInfo::typed(k).map_err(&compile_err)?),
            None => (kernel, info),
        };
        let mut builder = JITBuilder::with_isa(self.isa.clone(), default_libcall_names());
        MathImports::register(&mut builder);
        let module = JITModule::new(builder);
        LIVE_CODE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Freed with the kernel, or here when compiling fails.
        let mut code = Code {
            module: Some(module),
        };
        let module = code.module.as_mut().expect("just set");
        let math = MathImports::declare(module).map_err(&compile_err)?;
        let (mut ctx, id, layout) =
            lower_function(module, &math, lowered, info).map_err(&compile_err)?;
        let log =
            std::env::var("KILN_LOG").is_ok_and(|v| v.split(',').any(|w| w.trim() == "kernels"));
        ctx.set_disasm(log);
        module
            .define_function(id, &mut ctx)
            .map_err(|e| compile_err(format!("{e:?}")))?;
        if log {
            let machine = ctx.compiled_code().and_then(|c| c.vcode.clone());
            eprintln!(
                "kiln cpu: kernel `{}`\n{}\n--- cranelift ---\n{}\n--- machine code ---\n{}",
                kernel.name,
                print_kernel(lowered),
                ctx.func.display(),
                machine.unwrap_or_default()
            );
        }
        module.clear_context(&mut ctx);
        module
            .finalize_definitions()
            .map_err(|e| compile_err(e.to_string()))?;
        let ptr = module.get_finalized_function(id);
        // SAFETY: the function was just defined with signature `fn(i64)`; its code stays mapped
        // as long as `code`, which the returned kernel owns.
        let func: KernelFn = unsafe { std::mem::transmute::<*const u8, KernelFn>(ptr) };
        Ok(Arc::new(CpuKernel {
            info: self.info.clone(),
            func,
            _code: code,
            kernel: Arc::new(kernel.clone()),
            private_per_item: layout.bytes_per_item,
            merges_groups: layout.bytes_per_item == 0 && grouping_unobservable(kernel),
        }))
    }
}

/// `kernel` (validated with `info`) lowered into a new function of `module` declared as the
/// kernel's name, not yet compiled: the context holding it, its id and the private memory
/// its launches provide. Fails with a message naming what could not be lowered or declared.
fn lower_function(
    module: &mut JITModule,
    math: &MathImports,
    kernel: &Kernel,
    info: KernelInfo,
) -> Result<(cranelift_codegen::Context, FuncId, PrivateLayout), String> {
    let mut ctx = module.make_context();
    ctx.func.signature.params.push(AbiParam::new(types::I64));
    let id = module
        .declare_function(&kernel.name, Linkage::Local, &ctx.func.signature)
        .map_err(|e| e.to_string())?;
    let mut fctx = FunctionBuilderContext::new();
    let b = FunctionBuilder::new(&mut ctx.func, &mut fctx);
    let layout = Lowerer::lower(b, kernel, info, module, math)?;
    Ok((ctx, id, layout))
}

type KernelFn = unsafe extern "C" fn(*const u64);

/// The storage of CPU device memory: whole 8-byte words, so every element is aligned.
type Words = Box<[UnsafeCell<u64>]>;

/// `words` zeroed words, or `None` when the allocator refuses. The zeroed pages come from the
/// allocator (fresh ones are mapped lazily, as huge pages where the system allows), so there is
/// no single-threaded zeroing pass: the first kernel touching them faults pages in on every
/// thread.
fn new_words(words: usize) -> Option<Words> {
    if words == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<u64>(words).ok()?;
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut UnsafeCell<u64>;
    if ptr.is_null() {
        return None;
    }
    advise_huge_pages(ptr as *mut u8, words * 8);
    // SAFETY: `ptr` holds `words` zeroed u64s (UnsafeCell<u64> has u64's layout) from the
    // global allocator with this layout, which is what Box frees with.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, words)) })
}

/// A host allocation that kernels read and write in place. New memory is zeroed; reused memory
/// holds what was last written to it. Dropped, its words go back to the backend's pool.
struct HostAllocation {
    words: Words,
    pool: Arc<MemoryPool<Words>>,
}

impl Drop for HostAllocation {
    fn drop(&mut self) {
        let words = std::mem::take(&mut self.words);
        if !words.is_empty() {
            self.pool.keep(words.len() * 8, words);
        }
    }
}

// SAFETY: the memory is only written by kernels (whose work items write disjoint elements or
// use atomics, as on every backend) and by upload/download between launches.
unsafe impl Sync for HostAllocation {}

/// CPU "device" memory: a region of a host allocation.
type HostMemory = Region<HostAllocation>;

/// The address of CPU device memory, or `InvalidLaunch` for another backend's memory.
fn host_memory(mem: &dyn DeviceMemory) -> Result<u64, BackendError> {
    downcast_memory::<HostMemory>(mem)
        .map(|m| m.allocation.words.as_ptr() as u64 + m.origin as u64)
        .map_err(|reason| BackendError::InvalidLaunch {
            backend: BackendKind::Cpu,
            kernel: String::new(),
            reason: reason.into(),
        })
}

fn copy_error(want: usize, have: usize) -> BackendError {
    BackendError::InvalidLaunch {
        backend: BackendKind::Cpu,
        kernel: String::new(),
        reason: format!("copy of {want} bytes into device memory of {have} bytes"),
    }
}

/// A kernel compiled to native code.
struct CpuKernel {
    info: DeviceInfo,
    /// Points into `_code`'s module.
    func: KernelFn,
    _code: Code,
    kernel: Arc<Kernel>,
    private_per_item: u32,
    /// Whether a launch may run several of the grid's groups along x as one call of `func`
    /// ([`grouping_unobservable`], and no per-item private memory).
    merges_groups: bool,
}

/// True when nothing in `k` can tell how its work items are grouped: the only built-ins it
/// reads are global ids and the subgroup size (1 here), and it has no shared memory, group
/// barriers or subgroup operations.
fn grouping_unobservable(k: &Kernel) -> bool {
    use kiln_ir::{Builtin, Expr};
    let exprs = k
        .body
        .exprs
        .iter()
        .chain(k.functions.iter().flat_map(|f| f.body.exprs.iter()));
    k.shared.is_empty()
        && !k.has_group_barrier()
        && exprs.into_iter().all(|e| match e {
            Expr::Builtin(b) => matches!(b, Builtin::GlobalId(_) | Builtin::SubgroupSize),
            Expr::Subgroup { .. } => false,
            _ => true,
        })
}

/// How many of a launch's groups along x one call of a kernel runs when its grouping cannot
/// be observed: enough that a call's fixed cost (the frame, the scratch space, the compiled
/// function's prologue) is small beside its work items, while leaving rayon eight calls per
/// thread to balance. One-dimensional grids only: there the merged groups run their items in
/// the same order, while a 2D group is a tile whose locality a wider strip would lose (a naive
/// transpose ran twice as long with merged 16 x 16 groups). Groups of one work item are not
/// merged either: such a work item is a sequential task over its own range (the query
/// planner's chunks), and merged ones would run four ranges as one quad, gathering each load
/// from four places instead of running one tight loop each.
fn groups_per_call(grid: &Grid) -> u32 {
    let one_dim = grid.groups[1..] == [1, 1] && grid.group_size[1..] == [1, 1];
    let items = grid.group_size.iter().product::<u32>().max(1);
    if !one_dim || items == 1 {
        return 1;
    }
    let threads = rayon::current_num_threads().max(1) as u32;
    let by_balance = grid.groups[0] / threads.saturating_mul(8);
    let by_size = (1u32 << 14) / items;
    by_balance.min(by_size).max(1)
}

static ZEROS: [u64; MAX_ELEM_BYTES as usize / 8] = [0; MAX_ELEM_BYTES as usize / 8];

/// Frame words a launch keeps on its own stack (kernels of up to 10 parameters and shared
/// arrays together); longer frames are allocated.
const INLINE_FRAME: usize = SLOT_PARAMS + 2 * 10;

thread_local! {
    static SCRATCH: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

impl CpuKernel {
    fn invalid(&self, reason: String) -> BackendError {
        BackendError::InvalidLaunch {
            backend: BackendKind::Cpu,
            kernel: self.kernel.name.clone(),
            reason,
        }
    }
}

impl CompiledKernel for CpuKernel {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn launch(&self, grid: &Grid, args: &mut [LaunchArg<'_>]) -> Result<(), BackendError> {
        let k = &self.kernel;
        let shape = check_launch(BackendKind::Cpu, k, grid, args, MAX_GROUP_SIZE)?;
        check_shared_bytes(&self.info, shape.shared_bytes(k).0, "at element sizes")?;
        let frame_len = SLOT_PARAMS + 2 * (k.params.len() + k.shared.len());
        let (mut inline, mut spilled) = ([0u64; INLINE_FRAME], Vec::new());
        let frame: &mut [u64] = match frame_len <= INLINE_FRAME {
            true => &mut inline[..frame_len],
            false => {
                spilled.resize(frame_len, 0);
                &mut spilled
            }
        };
        for (i, a) in args.iter_mut().enumerate() {
            frame[SLOT_PARAMS + 2 * i] = match a {
                LaunchArg::Device(m) => host_memory(*m).map_err(|e| match e {
                    BackendError::InvalidLaunch { reason, .. } => {
                        self.invalid(format!("argument {i}: {reason}"))
                    }
                    other => other,
                })?,
                LaunchArg::Read(b) => b.as_ptr() as u64,
                LaunchArg::ReadWrite(b) => b.as_mut_ptr() as u64,
                LaunchArg::Write(b) => b.as_mut_ptr() as u64,
                LaunchArg::Value(b) => b.as_ptr() as u64,
            };
            frame[SLOT_PARAMS + 2 * i + 1] = shape.buffer_lengths[i];
        }
        let (items, groups) = (shape.items_per_group, shape.groups);
        let shared_words: Vec<(u32, u64)> = k
            .shared
            .iter()
            .zip(&shape.shared_lengths)
            .map(|(s, &len)| (len, (len as u64 * s.elem.size() as u64).div_ceil(8)))
            .collect();
        let shared_total: u64 = shared_words.iter().map(|(_, w)| w).sum();
        let sink_words = MAX_ELEM_BYTES as u64 / 8;
        let private_words = (self.private_per_item as u64 * items).div_ceil(8);
        let scratch_words = shared_total + sink_words + private_words;
        if scratch_words * 8 > 1 << 30 {
            return Err(self.invalid(format!(
                "group needs {} bytes of shared and private memory",
                scratch_words * 8
            )));
        }
        for a in 0..3 {
            frame[SLOT_GROUP_SIZE + a] = grid.group_size[a] as u64;
            frame[SLOT_NUM_GROUPS + a] = grid.groups[a] as u64;
        }
        frame[SLOT_ZEROS] = ZEROS.as_ptr() as u64;
        if groups == 0 {
            return Ok(());
        }
        // Each row of groups along x runs as `whole` calls of `merged` groups each, then one
        // call per group left over.
        let merged = match self.merges_groups {
            true => groups_per_call(grid),
            false => 1,
        };
        let whole = (grid.groups[0] / merged) as u64;
        let per_row = whole + (grid.groups[0] % merged) as u64;
        let rows = grid.groups[1] as u64 * grid.groups[2] as u64;
        let calls = per_row * rows;
        let shared_base = SLOT_PARAMS + 2 * k.params.len();
        let run_group = |f: &mut [u64], c: u64| {
            SCRATCH.with(|cell| {
                let mut scratch = cell.borrow_mut();
                if scratch.len() < scratch_words as usize {
                    scratch.resize(scratch_words as usize, 0);
                }
                scratch[..shared_total as usize].fill(0);
                scratch[(shared_total + sink_words) as usize..scratch_words as usize].fill(0);
                let (row, j) = match rows {
                    1 => (0, c),
                    _ => (c / per_row, c % per_row),
                };
                let (gx, size_x) = match j < whole {
                    true => (j, grid.group_size[0] as u64 * merged as u64),
                    false => (
                        whole * merged as u64 + (j - whole),
                        grid.group_size[0] as u64,
                    ),
                };
                f[SLOT_GROUP_ID] = gx;
                f[SLOT_GROUP_ID + 1] = row % grid.groups[1] as u64;
                f[SLOT_GROUP_ID + 2] = row / grid.groups[1] as u64;
                f[SLOT_GROUP_SIZE] = size_x;
                // Shared and private memory start zeroed in every group; the sink is never read.
                let base = scratch.as_mut_ptr() as u64;
                let mut off = 0u64;
                for (j, (len, words)) in shared_words.iter().enumerate() {
                    f[shared_base + 2 * j] = base + off * 8;
                    f[shared_base + 2 * j + 1] = *len as u64;
                    off += words;
                }
                f[SLOT_SINK] = base + off * 8;
                off += sink_words;
                f[SLOT_PRIVATE] = base + off * 8;
                // SAFETY: the frame describes live buffers whose lengths the compiled code
                // checks before every access, and scratch memory sized for this launch.
                unsafe { (self.func)(f.as_ptr()) };
            })
        };
        if calls == 1 {
            run_group(frame, 0);
        } else {
            // Each of rayon's pieces of the range gets its own copy of the frame.
            let frame = &*frame;
            (0..calls)
                .into_par_iter()
                .for_each_init(|| frame.to_vec(), |f, c| run_group(f, c));
        }
        Ok(())
    }
}
