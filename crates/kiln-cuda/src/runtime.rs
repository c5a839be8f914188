//! The CUDA runtime: [`CudaBackend`] opens an NVIDIA GPU through the driver API
//! (`libcuda.so.1`, loaded at run time), compiles kernels with NVRTC straight to a cubin for
//! the device's compute capability (PTX for the driver to finish when that NVRTC does not know
//! the device), loads the module and launches on one stream, or on a kiln stream's own
//! ([`crate::queue`]).

use crate::staging::HostCopies;
use crate::{nvrtc_options, write_validated_cuda, Nvrtc, Output, NVRTC_OPTIONS};
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::sys::CUfunction_attribute as FnAttr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use kiln_backend::*;
use kiln_c::{ScalarArg, Slot};
use kiln_ir::{Kernel, KernelInfo, ParamKind};
use std::sync::Arc;

/// The driver library cudarc loads.
pub const DRIVER_LIBRARY: &str = "libcuda.so.1";

fn unavailable(library: &str, reason: impl std::fmt::Display) -> BackendError {
    BackendError::Unavailable {
        backend: BackendKind::Cuda,
        library: library.into(),
        reason: reason.to_string(),
    }
}

/// Why `cuInit` failed, in words: the toolkit's stub `libcuda.so` (found before the driver's)
/// says so itself.
fn cuinit_failure(code: cudarc::driver::sys::CUresult) -> String {
    match code {
        cudarc::driver::sys::CUresult::CUDA_ERROR_STUB_LIBRARY => format!(
            "the libcuda.so.1 found is the CUDA toolkit's stub (lib64/stubs), which only links \
             programs: remove its folder from LD_LIBRARY_PATH so the NVIDIA driver's library is \
             found ({code:?})"
        ),
        other => format!("cuInit failed: {other:?}"),
    }
}

/// One NVIDIA GPU with its context and the stream every command goes to, in order.
pub struct CudaBackend {
    stream: Arc<CudaStream>,
    /// Copies between host slices and device memory on `stream`.
    copies: Arc<HostCopies>,
    info: DeviceInfo,
    /// The most work items of a group along x, y and z (the device's block dimensions).
    block_dims: [u32; 3],
    nvrtc: Nvrtc,
    /// What NVRTC compiles for: `sm_XX` with a cubin, or `compute_XX` with PTX.
    arch: String,
    output: Output,
    version: String,
}

impl CudaBackend {
    /// Opens CUDA device 0 (see [`CudaBackend::open`]). Fails like `open`.
    pub fn new() -> Result<CudaBackend, BackendError> {
        CudaBackend::open(0)
    }

    /// How many CUDA devices the driver reports. Fails with `Unavailable` naming
    /// `libcuda.so.1` when the driver is missing or cannot start.
    pub fn device_count() -> Result<u32, BackendError> {
        // SAFETY: only probes whether the shared library can be opened.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(unavailable(
                DRIVER_LIBRARY,
                "no NVIDIA driver on this machine (the CUDA backend needs one to launch; \
                 kiln::emit(Target::CudaC) still writes CUDA C)",
            ));
        }
        let count = CudaContext::device_count()
            .map_err(|e| unavailable(DRIVER_LIBRARY, cuinit_failure(e.0)))?;
        Ok(count.max(0) as u32)
    }

    /// The name the driver gives CUDA device `index`, read without creating a context (for
    /// listing a device that does not open); `None` when the driver cannot say.
    pub fn device_name(index: u32) -> Option<String> {
        CudaBackend::device_count().ok()?;
        let device = cudarc::driver::result::device::get(index as i32).ok()?;
        cudarc::driver::result::device::get_name(device).ok()
    }

    /// Opens CUDA device `index` (the driver's ordinal) with the newest NVRTC that is not newer
    /// than the driver. Fails with `Unavailable` naming `libcuda.so.1` when the driver is
    /// missing or has no device, or naming NVRTC when no usable compiler library is found or
    /// it cannot compile for the device, and with `NoSuchDevice` when the driver has devices
    /// but not that many.
    pub fn open(index: u32) -> Result<CudaBackend, BackendError> {
        let count = CudaBackend::device_count()?;
        if count < 1 {
            return Err(unavailable(
                DRIVER_LIBRARY,
                "the driver reports no CUDA device",
            ));
        }
        if index >= count {
            return Err(BackendError::NoSuchDevice {
                backend: BackendKind::Cuda,
                index,
                count,
            });
        }
        // NVRTC first: a machine with a driver but no usable compiler fails here, before a
        // context takes device memory.
        let mut driver = 0i32;
        // SAFETY: writes one int; needs only cuInit, which device_count ran.
        let _ = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver) };
        let nvrtc = Nvrtc::load((driver > 0).then_some(driver as u32 / 1000))?;
        let ctx = CudaContext::new(index as usize)
            .map_err(|e| unavailable(DRIVER_LIBRARY, format!("opening device {index}: {e}")))?;
        // One in-order stream carries every command but kiln streams', and each of those
        // waits for it by an event before each piece of work (crate::queue), so cudarc's
        // per-buffer events are not needed.
        // SAFETY: kiln orders every stream of this context itself, as above.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| unavailable(DRIVER_LIBRARY, format!("creating a stream: {e}")))?;
        let memory = ctx.total_mem().unwrap_or(0) as u64;
        keep_freed_memory(&ctx, pool_capacity(memory))
            .map_err(|e| unavailable(DRIVER_LIBRARY, format!("setting up the memory pool: {e}")))?;
        let attr = |a: Attr| ctx.attribute(a).unwrap_or(0).max(0) as u32;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| unavailable(DRIVER_LIBRARY, format!("compute capability: {e}")))?;
        let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        let (arch, output) = nvrtc.target_for((major * 10 + minor).max(0) as u32)?;
        let version = format!(
            "driver {driver} / nvrtc {}.{} / {arch} / {} / {name}",
            nvrtc.version().0,
            nvrtc.version().1,
            NVRTC_OPTIONS.join(" ")
        );
        let default_shared_bytes =
            attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) as u64;
        let block_dims = [
            Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
            Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
            Attr::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
        ]
        .map(|a| attr(a).max(1));
        let info = DeviceInfo {
            backend: BackendKind::Cuda,
            name,
            index,
            class: DeviceClass::Gpu,
            memory_bytes: memory,
            compute_units: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            max_group_size: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK).max(1),
            subgroup_size: attr(Attr::CU_DEVICE_ATTRIBUTE_WARP_SIZE).max(1),
            max_shared_bytes: default_shared_bytes
                .max(attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) as u64),
            max_buffer_bytes: memory,
            indexed_private_arrays: true,
            fits_groups_to_work: false,
            host_memory: false,
            max_loop_iterations: None,
            features: Features {
                f64: true,
                int64: true,
                subgroups: true,
                atomics64: true,
                fast_math: true,
                register_limit: true,
            },
            unusable: None,
        };
        Ok(CudaBackend {
            copies: Arc::new(HostCopies::new(stream.clone())),
            stream,
            info,
            block_dims,
            nvrtc,
            arch,
            output,
            version,
        })
    }

    /// A failed copy or wait, which belongs to no kernel.
    fn copy_err(&self, what: &str, e: impl std::fmt::Display) -> BackendError {
        BackendError::InvalidLaunch {
            backend: BackendKind::Cuda,
            kernel: String::new(),
            reason: format!("{what}: {e}"),
        }
    }

    /// Loads a cubin or PTX (as `self.output` says) as a module and returns the kernel's
    /// function.
    fn load(
        &self,
        kernel: &Kernel,
        source: &kiln_c::Source,
        binary: Vec<u8>,
    ) -> Result<Arc<dyn CompiledKernel>, BackendError> {
        let fail = |e: String| BackendError::Load {
            backend: BackendKind::Cuda,
            kernel: kernel.name.clone(),
            reason: e,
        };
        let module = self
            .stream
            .context()
            .load_module(match self.output {
                Output::Cubin => Ptx::from_binary(binary),
                Output::Ptx => Ptx::from_src(String::from_utf8_lossy(&binary).into_owned()),
            })
            .map_err(|e| {
                fail(format!(
                    "loading the {:?} for {}: {e}",
                    self.output, self.arch
                ))
            })?;
        let function = module
            .load_function(&source.entry)
            .map_err(|e| fail(format!("finding `{}` in the module: {e}", source.entry)))?;
        let attribute = |a: FnAttr| {
            function
                .get_attribute(a)
                .map(|v| v.max(0) as u64)
                .map_err(|e| fail(format!("reading the function's {a:?}: {e}")))
        };
        // Register-heavy kernels allow fewer work items per group than the device does.
        let max_threads = attribute(FnAttr::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)? as u32;
        let static_shared = attribute(FnAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?;
        // Opted in once, here, for every byte the device offers beside the function's static
        // arrays: a launch that set it would race another thread's launch of the same function.
        let dynamic_limit = self.info.max_shared_bytes.saturating_sub(static_shared);
        if kiln_c::cuda_uses_dynamic_region(kernel) {
            bind(&self.stream)
                .and_then(|_| {
                    function.set_attribute(
                        FnAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        dynamic_limit.min(i32::MAX as u64) as i32,
                    )
                })
                .map_err(|e| {
                    fail(format!(
                        "allowing {dynamic_limit} bytes of dynamic shared memory: {e}"
                    ))
                })?;
        }
        Ok(Arc::new(CudaKernel {
            kernel: kernel.clone(),
            slots: source.slots.clone(),
            function,
            stream: self.stream.clone(),
            copies: self.copies.clone(),
            info: self.info.clone(),
            block_dims: self.block_dims,
            max_threads,
            static_shared,
            dynamic_limit,
        }))
    }
}

impl Backend for CudaBackend {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn compiler_version(&self) -> String {
        self.version.clone()
    }

    fn prepare(&self, kernel: &Kernel, info: &KernelInfo) -> Result<Prepared, BackendError> {
        check_options(&self.info, &kernel.options)?;
        let o = &kernel.options;
        if self.output == Output::Ptx && o.launch_bounds.is_some() && o.max_registers.is_some() {
            return Err(BackendError::Unsupported {
                backend: BackendKind::Cuda,
                feature: format!(
                    "a register limit beside launch bounds on {}, for which NVRTC makes PTX \
                     only (CUDA C states one of them per kernel; the other is an option of \
                     NVRTC's own cubin): give one of the two",
                    self.arch
                ),
            });
        }
        let source = write_validated_cuda(kernel, info)?;
        Ok(Prepared {
            text: Some(source.text.clone()),
            written: Box::new(source),
        })
    }

    fn compile_prepared(
        &self,
        kernel: &Kernel,
        prepared: Prepared,
    ) -> Result<(Arc<dyn CompiledKernel>, Option<Vec<u8>>), BackendError> {
        let source: &kiln_c::Source = prepared.written(BackendKind::Cuda)?;
        let binary = self.nvrtc.compile(
            &kernel.name,
            &source.text,
            &self.arch,
            &nvrtc_options(&kernel.options),
            self.output,
        )?;
        Ok((self.load(kernel, source, binary.clone())?, Some(binary)))
    }

    fn load_binary(
        &self,
        kernel: &Kernel,
        prepared: &Prepared,
        binary: &[u8],
    ) -> Result<Arc<dyn CompiledKernel>, BackendError> {
        let source: &kiln_c::Source = prepared.written(BackendKind::Cuda)?;
        self.load(kernel, source, binary.to_vec())
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        check_buffer_bytes(&self.info, bytes as u64, "(its whole memory)")?;
        // SAFETY: u8 has no invalid bit patterns, and the memory is read only through driver
        // copies and kernels, after kiln has filled it.
        let slice = unsafe { self.stream.alloc::<u8>(bytes.max(1)) }.map_err(|e| {
            BackendError::OutOfMemory {
                backend: BackendKind::Cuda,
                bytes: bytes as u64,
                reason: e.to_string(),
            }
        })?;
        Ok(Arc::new(CudaMemory::whole(CudaAllocation { slice }, bytes)))
    }

    fn view(
        &self,
        mem: &dyn DeviceMemory,
        offset: usize,
        bytes: usize,
    ) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        view_region::<CudaAllocation>(BackendKind::Cuda, mem, offset, bytes)
    }

    fn native_memory(&self, mem: &dyn DeviceMemory) -> Result<NativeMemory, BackendError> {
        let m = region_of::<CudaAllocation>(BackendKind::Cuda, mem)?;
        Ok(NativeMemory::Cuda {
            ptr: address(m, &self.stream),
            bytes: m.bytes,
        })
    }

    fn native_device(&self) -> NativeDevice {
        NativeDevice::Cuda {
            context: self.stream.context().cu_ctx() as *mut std::ffi::c_void,
            stream: self.stream.cu_stream() as *mut std::ffi::c_void,
        }
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<Option<Box<dyn PinnedMemory>>, BackendError> {
        crate::pinned::PinnedHost::new(self.stream.context().clone(), bytes)
            .map(|p| Some(Box::new(p) as Box<dyn PinnedMemory>))
            .map_err(|e| BackendError::OutOfMemory {
                backend: BackendKind::Cuda,
                bytes: bytes as u64,
                reason: format!("page-locked host memory: {e}"),
            })
    }

    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError> {
        let m = cuda_memory(mem).map_err(|e| self.copy_err("upload", e))?;
        if data.len() > m.bytes {
            return Err(self.copy_err(
                "upload",
                format!(
                    "{} bytes into device memory of {} bytes",
                    data.len(),
                    m.bytes
                ),
            ));
        }
        if data.is_empty() {
            return Ok(());
        }
        let dst = address(m, &self.stream);
        bind(&self.stream)
            // SAFETY: `dst` holds at least `data.len()` bytes; the stream is synchronized
            // before `data` can go away.
            .and_then(|_| unsafe { self.copies.upload(dst, data) })
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| self.copy_err("upload", e))
    }

    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError> {
        let m = cuda_memory(mem).map_err(|e| self.copy_err("download", e))?;
        if out.len() > m.bytes {
            return Err(self.copy_err(
                "download",
                format!(
                    "{} bytes out of device memory of {} bytes",
                    out.len(),
                    m.bytes
                ),
            ));
        }
        if out.is_empty() {
            return Ok(());
        }
        let src = address(m, &self.stream);
        bind(&self.stream)
            // SAFETY: `src` holds at least `out.len()` bytes; the stream is synchronized before
            // `out` is used again.
            .and_then(|_| unsafe { self.copies.download(out, src) })
            .and_then(|_| self.stream.synchronize())
            .map_err(|e| self.copy_err("download", e))
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        check_copy(BackendKind::Cuda, src, dst, bytes)?;
        let s = cuda_memory(src).map_err(|e| self.copy_err("device copy", e))?;
        let d = cuda_memory(dst).map_err(|e| self.copy_err("device copy", e))?;
        let (from, to) = (address(s, &self.stream), address(d, &self.stream));
        if bytes == 0 || from == to {
            return Ok(());
        }
        bind(&self.stream)
            // SAFETY: both memories hold at least `bytes` (checked above) and do not overlap
            // (`Backend::copy`'s contract); the copy is ordered on the one stream every
            // command uses.
            .and_then(|_| unsafe {
                cudarc::driver::result::memcpy_dtod_async(to, from, bytes, self.stream.cu_stream())
            })
            .map_err(|e| self.copy_err("device copy", e))
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.stream
            .synchronize()
            .map_err(|e| self.copy_err("synchronize", e))
    }

    fn queue(&self) -> Result<Option<Box<dyn DeviceQueue>>, BackendError> {
        Ok(Some(Box::new(crate::queue::CudaQueue::new(
            self.stream.clone(),
        )?)))
    }
}

/// The most groups a CUDA grid holds along x, y and z, the same on every compute capability
/// NVRTC 12 and 13 compile for.
const MAX_GRID: [u32; 3] = [i32::MAX as u32, 65535, 65535];

/// Ok when a grid of `groups` fits [`MAX_GRID`]; otherwise the reason, naming the axis, so a
/// launch fails before it copies anything rather than with the driver's bare error code.
fn check_grid(groups: [u32; 3]) -> Result<(), String> {
    for ((axis, &n), &max) in ["x", "y", "z"].iter().zip(&groups).zip(&MAX_GRID) {
        if n > max {
            return Err(format!(
                "{n} groups along {axis}; a CUDA grid holds at most {max} along {axis}"
            ));
        }
    }
    Ok(())
}

/// Ok when a group of `size` work items fits the device's per-axis `dims` and the compiled
/// function's `max_threads`; otherwise the reason, so the launch fails typed before it copies
/// anything (the driver would say only `CUDA_ERROR_INVALID_VALUE`).
fn check_group(size: [u32; 3], dims: [u32; 3], max_threads: u32) -> Result<(), String> {
    for ((axis, &n), &max) in ["x", "y", "z"].iter().zip(&size).zip(&dims) {
        if n > max {
            return Err(format!(
                "{n} work items along {axis}; this device's groups hold at most {max} along {axis}"
            ));
        }
    }
    let total: u64 = size.iter().map(|&n| n as u64).product();
    if total > max_threads as u64 {
        return Err(format!(
            "{total} work items per group; this compiled kernel allows at most {max_threads} \
             (it needs many registers per work item): launch it with smaller groups"
        ));
    }
    Ok(())
}

/// Makes the context of `stream` current on the calling thread, which the driver calls kiln
/// makes directly (copies) need; cudarc's own calls do it themselves.
pub(crate) fn bind(stream: &CudaStream) -> Result<(), cudarc::driver::DriverError> {
    stream.context().bind_to_thread()
}

/// Lets the device's default stream-ordered memory pool (which kiln's allocations come from)
/// keep up to `bytes` of freed memory instead of handing it back to the driver at every
/// synchronization, so a loop of queries reuses its buffers. A device without such pools
/// (allocations then go straight to the driver) is not an error; the driver's other errors
/// are returned.
fn keep_freed_memory(ctx: &CudaContext, bytes: u64) -> Result<(), cudarc::driver::DriverError> {
    use cudarc::driver::sys;
    ctx.bind_to_thread()?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: writes one pool handle for a valid device.
    match unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) } {
        sys::CUresult::CUDA_ERROR_NOT_SUPPORTED => return Ok(()),
        r => r.result()?,
    }
    let mut threshold = bytes;
    // SAFETY: the release threshold attribute takes a pointer to a u64.
    unsafe {
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut threshold as *mut u64 as *mut std::ffi::c_void,
        )
    }
    .result()
}

/// A loaded kernel.
pub(crate) struct CudaKernel {
    kernel: Kernel,
    /// What each argument of the function takes.
    slots: Vec<Slot>,
    function: CudaFunction,
    stream: Arc<CudaStream>,
    copies: Arc<HostCopies>,
    info: DeviceInfo,
    /// The device's most work items along x, y and z.
    block_dims: [u32; 3],
    /// The most work items per group this compiled function allows (fewer than the device's
    /// when it needs many registers).
    max_threads: u32,
    /// Bytes of the function's `__shared__` arrays.
    static_shared: u64,
    /// The dynamic shared bytes a launch may ask for (opted in at load).
    dynamic_limit: u64,
}

impl CudaKernel {
    fn err(&self, what: &str, e: impl std::fmt::Display) -> BackendError {
        BackendError::InvalidLaunch {
            backend: BackendKind::Cuda,
            kernel: self.kernel.name.clone(),
            reason: format!("{what}: {e}"),
        }
    }
}

impl CompiledKernel for CudaKernel {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn launch(&self, grid: &Grid, args: &mut [LaunchArg<'_>]) -> Result<(), BackendError> {
        self.launch_on(Lane::Own, grid, args)
    }
}

/// The stream a launch goes to.
#[derive(Clone, Copy)]
pub(crate) enum Lane<'s> {
    /// The backend's own stream, which all work outside kiln streams goes to.
    Own,
    /// A kiln stream's own CUDA stream ([`crate::queue::CudaQueue`]), which takes device
    /// memory only: host arguments would need temporaries allocated and freed in its order.
    Stream(&'s Arc<CudaStream>),
}

impl CudaKernel {
    /// Launches the kernel on `lane`'s stream. A launch on device memory alone returns once it
    /// is queued; one with host arguments (on the backend's stream only) when it has
    /// finished. Fails with `InvalidLaunch` for a host argument on a kiln stream, arguments
    /// that do not match the parameters, a grid or group past the device's limits, or the
    /// driver's error.
    pub(crate) fn launch_on(
        &self,
        lane: Lane<'_>,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> Result<(), BackendError> {
        let k = &self.kernel;
        let shape = check_launch(BackendKind::Cuda, k, grid, args, self.info.max_group_size)?;
        check_grid(grid.groups).map_err(|reason| self.err("grid", reason))?;
        check_group(grid.group_size, self.block_dims, self.max_threads)
            .map_err(|reason| self.err("group size", reason))?;
        let dynamic_bytes = kiln_c::dynamic_shared_bytes(k, &shape.shared_lengths);
        check_shared_bytes(
            &self.info,
            self.static_shared + dynamic_bytes,
            "at C element sizes, each array of the dynamic region at a 16-byte boundary",
        )?;
        if dynamic_bytes > self.dynamic_limit {
            return Err(self.err(
                "shared memory",
                format!(
                    "{dynamic_bytes} bytes of dynamic shared memory; beside its {} static bytes the function may have {}",
                    self.static_shared, self.dynamic_limit
                ),
            ));
        }
        // The copies below are direct driver calls.
        let stream: &Arc<CudaStream> = match lane {
            Lane::Own => &self.stream,
            Lane::Stream(s) => s,
        };
        bind(stream).map_err(|e| self.err("making the context current", e))?;
        // Host arguments get device copies for this launch.
        let mut temps: Vec<Option<CudaSlice<u8>>> = Vec::with_capacity(args.len());
        // Each buffer parameter's device address.
        let mut pointers: Vec<Option<u64>> = Vec::with_capacity(args.len());
        for (i, (p, a)) in k.params.iter().zip(args.iter()).enumerate() {
            match (&p.kind, a) {
                (ParamKind::Buffer { .. }, LaunchArg::Device(m)) => {
                    let mem = cuda_memory(*m).map_err(|e| self.err(&format!("argument {i}"), e))?;
                    pointers.push(Some(address(mem, stream)));
                    temps.push(None);
                }
                (ParamKind::Buffer { .. }, _) if matches!(lane, Lane::Stream(_)) => {
                    return Err(self.err(
                        &format!("argument {i}"),
                        "host memory on a stream (streams take device buffers)",
                    ));
                }
                (ParamKind::Buffer { .. }, _) => {
                    let bytes = a.byte_len();
                    // SAFETY: filled below or written by the kernel before being read back.
                    let slice = unsafe { stream.alloc::<u8>(bytes.max(1)) }.map_err(|e| {
                        BackendError::OutOfMemory {
                            backend: BackendKind::Cuda,
                            bytes: bytes as u64,
                            reason: e.to_string(),
                        }
                    })?;
                    let ptr = device_ptr(&slice, stream);
                    let host: Option<&[u8]> = match a {
                        LaunchArg::Read(b) => Some(b),
                        LaunchArg::ReadWrite(b) => Some(b),
                        _ => None,
                    };
                    match host.filter(|h| !h.is_empty()) {
                        // SAFETY: `ptr` holds `h.len()` bytes; the stream is synchronized
                        // before this function returns, while `h` is still borrowed.
                        Some(h) => unsafe { self.copies.upload(ptr, h) },
                        // SAFETY: `ptr` holds `bytes.max(1)` bytes.
                        None => unsafe {
                            cudarc::driver::result::memset_d8_async(
                                ptr,
                                0,
                                bytes.max(1),
                                stream.cu_stream(),
                            )
                        },
                    }
                    .map_err(|e| self.err("uploading", e))?;
                    pointers.push(Some(ptr));
                    temps.push(Some(slice));
                }
                (ParamKind::Value(_), LaunchArg::Value(_)) => {
                    pointers.push(None);
                    temps.push(None);
                }
                _ => return Err(self.err(&format!("argument {i}"), "does not match its parameter")),
            }
        }
        let mut words = Vec::with_capacity(self.slots.len());
        for slot in &self.slots {
            let missing = || self.err("argument", format!("{slot:?} has no argument"));
            words.push(match *slot {
                Slot::Pointer { param } => {
                    ScalarArg::B8(pointers.get(param).copied().flatten().ok_or_else(missing)?)
                }
                Slot::Length { param } => ScalarArg::B4(shape.buffer_lengths[param] as u32),
                Slot::Component {
                    param,
                    offset,
                    size,
                } => match args.get(param) {
                    Some(LaunchArg::Value(bytes)) => {
                        ScalarArg::component(bytes, offset, size).ok_or_else(missing)?
                    }
                    _ => return Err(missing()),
                },
                Slot::SharedLength { shared } => ScalarArg::B4(shape.shared_lengths[shared]),
                Slot::SharedMemory { .. } => {
                    return Err(self.err("argument", "CUDA passes no shared memory argument"))
                }
            });
        }
        if shape.groups > 0 {
            let mut builder = stream.launch_builder(&self.function);
            for w in &words {
                match w {
                    ScalarArg::B1(v) => builder.arg(v),
                    ScalarArg::B2(v) => builder.arg(v),
                    ScalarArg::B4(v) => builder.arg(v),
                    ScalarArg::B8(v) => builder.arg(v),
                };
            }
            let config = LaunchConfig {
                grid_dim: (grid.groups[0], grid.groups[1], grid.groups[2]),
                block_dim: (grid.group_size[0], grid.group_size[1], grid.group_size[2]),
                shared_mem_bytes: dynamic_bytes as u32,
            };
            // SAFETY: the arguments follow the slots kiln-c wrote the kernel's signature with
            // (a pointer and a u32 length per buffer, one scalar per value component, a u32
            // per dynamic shared array); every pointer is live until the stream is
            // synchronized.
            unsafe { builder.launch(config) }.map_err(|e| self.err("launching", e))?;
        }
        for (a, temp) in args.iter_mut().zip(&temps) {
            let Some(temp) = temp else { continue };
            let Some(host) = a.host_output() else {
                continue;
            };
            if host.is_empty() {
                continue;
            }
            let src = device_ptr(temp, stream);
            // SAFETY: `src` holds `host.len()` bytes; synchronized below while `host` lives.
            unsafe { self.copies.download(host, src) }.map_err(|e| self.err("downloading", e))?;
        }
        // Host buffers are borrowed only for this call, so a launch with any waits for them;
        // a launch on device memory alone returns at once.
        if temps.iter().any(Option::is_some) {
            stream.synchronize().map_err(|e| self.err("running", e))?;
        }
        Ok(())
    }
}

/// One allocation of CUDA device memory.
pub(crate) struct CudaAllocation {
    slice: CudaSlice<u8>,
}

impl Drop for CudaAllocation {
    /// Makes the context current before the slice frees its memory: a `Buffer` may be dropped
    /// on a thread that never made it current, where the free would fail (cudarc records the
    /// error in the context, and the next call there reports it).
    fn drop(&mut self) {
        let context = self.slice.stream().context();
        context.record_err(context.bind_to_thread());
    }
}

/// CUDA device memory: a region of an allocation.
pub(crate) type CudaMemory = Region<CudaAllocation>;

/// The device address of the first byte of `mem`.
pub(crate) fn address(mem: &CudaMemory, stream: &CudaStream) -> u64 {
    device_ptr(&mem.allocation.slice, stream) + mem.origin as u64
}

/// The device address of `slice` (event tracking is off, so nothing is recorded).
fn device_ptr(slice: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    slice.device_ptr(stream).0
}

pub(crate) fn cuda_memory(mem: &dyn DeviceMemory) -> Result<&CudaMemory, &'static str> {
    downcast_memory(mem)
}

#[cfg(test)]
mod tests {
    use super::{check_grid, check_group};

    #[test]
    fn the_toolkits_stub_driver_library_is_named_as_such() {
        use cudarc::driver::sys::CUresult;
        let stub = super::cuinit_failure(CUresult::CUDA_ERROR_STUB_LIBRARY);
        assert!(
            stub.contains("stub") && stub.contains("LD_LIBRARY_PATH"),
            "{stub}"
        );
        let other = super::cuinit_failure(CUresult::CUDA_ERROR_NO_DEVICE);
        assert!(other.contains("CUDA_ERROR_NO_DEVICE"), "{other}");
    }

    #[test]
    fn groups_past_the_devices_axes_or_the_functions_limit_are_refused() {
        let (dims, max) = ([1024, 1024, 64], 1024);
        assert!(check_group([1024, 1, 1], dims, max).is_ok());
        assert!(check_group([8, 8, 16], dims, max).is_ok());
        let z = check_group([1, 1, 65], dims, max).unwrap_err();
        assert!(
            z.contains("65 work items along z") && z.contains("at most 64"),
            "{z}"
        );
        let x = check_group([2048, 1, 1], dims, 2048).unwrap_err();
        assert!(x.contains("along x"), "{x}");
        let regs = check_group([256, 2, 1], dims, 384).unwrap_err();
        assert!(
            regs.contains("512 work items per group") && regs.contains("at most 384"),
            "{regs}"
        );
    }

    #[test]
    fn grids_past_cudas_limits_are_refused_naming_the_axis() {
        // The CUDA programming guide's limits: 2^31 - 1 groups along x, 65535 along y and z.
        assert!(check_grid([(1 << 31) - 1, 65535, 65535]).is_ok());
        assert!(check_grid([1, 1, 1]).is_ok());
        let x = check_grid([1 << 31, 1, 1]).unwrap_err();
        assert!(x.contains("2147483648 groups along x"), "{x}");
        let y = check_grid([1, 65536, 1]).unwrap_err();
        assert!(y.contains("along y") && y.contains("65535"), "{y}");
        let z = check_grid([7, 3, 70000]).unwrap_err();
        assert!(z.contains("70000 groups along z"), "{z}");
    }
}
