//! # kiln-opencl: the OpenCL backend
//!
//! Writes OpenCL C 1.2 with [`kiln_c`], builds it with the driver of the first OpenCL device
//! (a GPU if there is one), and launches it. `libOpenCL.so.1` is loaded at run time (opencl3's
//! `dynamic` feature): on a machine without it, [`OpenClBackend::new`] returns
//! `BackendError::Unavailable` naming the library. Host arguments are copied to device buffers
//! for each launch and copied back where the kernel may write; on a device that shares the
//! host's memory (`CL_DEVICE_HOST_UNIFIED_MEMORY`: CPUs, integrated GPUs) the kernel uses them
//! in place instead (`CL_MEM_USE_HOST_PTR`), and the launch waits for it.

#![deny(missing_docs)]
use kiln_backend::*;
use kiln_c::{write_validated, Dialect, ScalarArg, Slot};
use kiln_ir::{Access, CompileOptions, Kernel, KernelInfo, ParamKind};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{get_all_devices, Device, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU};
use opencl3::kernel::Kernel as ClKernel;
use opencl3::memory::{
    Buffer, ClMem, CL_MAP_READ, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR,
};
use opencl3::program::Program;
use opencl3::types::{cl_mem, CL_BLOCKING, CL_NON_BLOCKING};
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

/// Build options: correctly rounded single-precision divide and square root, so results match
/// the other backends bit for bit.
pub const BUILD_OPTIONS: &str = "-cl-fp32-correctly-rounded-divide-sqrt";

/// Build options with relaxed math ([`CompileOptions::fast_math`]): the compiler may
/// reassociate, contract, flush denormals and approximate divide and square root.
pub const FAST_MATH_OPTIONS: &str = "-cl-fast-relaxed-math";

/// The build options of a kernel compiled with `options`.
pub fn build_options(options: &CompileOptions) -> &'static str {
    match options.relaxed_math() {
        true => FAST_MATH_OPTIONS,
        false => BUILD_OPTIONS,
    }
}

/// The library opencl3 loads.
pub const LIBRARY: &str = "libOpenCL.so.1";

struct Shared {
    context: Context,
    queue: CommandQueue,
    info: DeviceInfo,
    /// Freed buffers, for reuse by later allocations and launches.
    pool: MemoryPool<Buffer<u8>>,
    /// Whether the device shares the host's memory, so that kernels use host arguments in
    /// place rather than copies.
    host_unified: bool,
    /// The most work items of a group along x, y and z (`CL_DEVICE_MAX_WORK_ITEM_SIZES`).
    item_sizes: [u64; 3],
    /// The byte alignment of a sub-buffer's origin (`CL_DEVICE_MEM_BASE_ADDR_ALIGN`), when
    /// the driver says.
    sub_buffer_align: Option<usize>,
}

/// What a launch binds for an argument in device memory.
enum DeviceSide {
    /// The memory's own buffer (a whole allocation, or an empty view).
    Whole(cl_mem),
    /// A sub-buffer for a view at an aligned origin.
    Sub(Buffer<u8>),
    /// A pooled copy of a view's `bytes` bytes at an origin off the alignment, copied back to
    /// `back` (buffer, origin) after the kernel when it may write them.
    Staged {
        buf: Buffer<u8>,
        bytes: usize,
        back: Option<(cl_mem, usize)>,
    },
}

impl DeviceSide {
    fn mem(&self) -> cl_mem {
        match self {
            DeviceSide::Whole(m) => *m,
            DeviceSide::Sub(b) | DeviceSide::Staged { buf: b, .. } => b.get(),
        }
    }
}

/// A host argument's device side during a launch.
enum HostBuffer {
    /// A copy in a pooled buffer of this many bytes.
    Copied(usize, Buffer<u8>),
    /// The host bytes themselves (`CL_MEM_USE_HOST_PTR`); `output` when the kernel may write
    /// them, so they are mapped afterwards to make its writes visible to the host.
    InPlace {
        buf: Buffer<u8>,
        len: usize,
        output: bool,
    },
}

impl Shared {
    /// Queues a copy of `bytes` bytes from `(buffer, byte offset)` `from` to `to`, after
    /// earlier commands (the queue is in order). The regions must lie inside their buffers and
    /// not overlap. Fails with the driver's error.
    fn copy_region(
        &self,
        from: (cl_mem, usize),
        to: (cl_mem, usize),
        bytes: usize,
    ) -> Result<(), String> {
        // SAFETY: both regions lie inside live buffers and do not overlap (the caller's
        // promise); the event is released at once.
        let event = unsafe {
            opencl3::command_queue::enqueue_copy_buffer(
                self.queue.get(),
                from.0,
                to.0,
                from.1,
                to.1,
                bytes,
                0,
                std::ptr::null(),
            )
        }
        .map_err(|e| format!("copying device memory: OpenCL error {e}"))?;
        drop(opencl3::event::Event::new(event));
        Ok(())
    }

    /// How a launch binds `mem`: its buffer when it starts there or is empty, a sub-buffer
    /// when its origin is on the device's alignment, otherwise a copy in a pooled buffer
    /// (queued now), which is copied back after the kernel when `written`. Fails with the
    /// driver's error.
    fn device_side(&self, mem: &ClMemory, written: bool) -> Result<DeviceSide, String> {
        if mem.origin == 0 || mem.bytes == 0 {
            return Ok(DeviceSide::Whole(buffer(mem)));
        }
        if self
            .sub_buffer_align
            .is_some_and(|a| mem.origin.is_multiple_of(a))
        {
            // SAFETY: the region lies inside the live buffer (checked when the view was made).
            let sub = unsafe {
                mem.allocation
                    .buf
                    .create_sub_buffer(CL_MEM_READ_WRITE, mem.origin, mem.bytes)
            };
            return sub
                .map(DeviceSide::Sub)
                .map_err(|e| format!("making a sub-buffer: {e}"));
        }
        let buf = self.create_buffer(mem.bytes).map_err(|e| e.to_string())?;
        self.copy_region((buffer(mem), mem.origin), (buf.get(), 0), mem.bytes)?;
        Ok(DeviceSide::Staged {
            buf,
            bytes: mem.bytes,
            back: written.then_some((buffer(mem), mem.origin)),
        })
    }

    /// Keeps `buf`, made by [`Shared::create_buffer`] for `bytes`, for a later allocation of
    /// that size. The queue is in order: a command reusing it runs after every earlier one.
    fn release(&self, bytes: usize, buf: Buffer<u8>) {
        self.pool.keep(bytes.max(1), buf);
    }

    /// A device buffer of `bytes` (at least one byte; contents undefined): a pooled one of that
    /// size, or a new one. Fails with `OutOfMemory` above the device's largest buffer or when
    /// the driver refuses.
    fn create_buffer(&self, bytes: usize) -> Result<Buffer<u8>, BackendError> {
        let oom = |reason: String| BackendError::OutOfMemory {
            backend: BackendKind::OpenCl,
            bytes: bytes as u64,
            reason,
        };
        check_buffer_bytes(&self.info, bytes as u64, "per buffer")?;
        if let Some(kept) = self.pool.take(bytes.max(1)) {
            return Ok(kept);
        }
        // SAFETY: a fresh device buffer of at least one byte, no host pointer.
        unsafe {
            Buffer::<u8>::create(
                &self.context,
                CL_MEM_READ_WRITE,
                bytes.max(1),
                std::ptr::null_mut(),
            )
        }
        .map_err(|e| oom(e.to_string()))
    }

    /// A buffer over the `len` host bytes at `ptr`, which the kernel uses in place (read-only
    /// unless `output`). Fails like [`Shared::create_buffer`].
    ///
    /// # Safety
    /// The bytes must stay valid, and untouched by the host, until the queue has finished
    /// every command using the buffer.
    unsafe fn host_buffer(
        &self,
        ptr: *mut u8,
        len: usize,
        output: bool,
    ) -> Result<Buffer<u8>, BackendError> {
        check_buffer_bytes(&self.info, len as u64, "per buffer")?;
        let access = if output {
            CL_MEM_READ_WRITE
        } else {
            CL_MEM_READ_ONLY
        };
        // SAFETY: the caller keeps the `len` bytes at `ptr` alive while the buffer is used.
        unsafe {
            Buffer::<u8>::create(&self.context, access | CL_MEM_USE_HOST_PTR, len, ptr.cast())
        }
        .map_err(|e| BackendError::OutOfMemory {
            backend: BackendKind::OpenCl,
            bytes: len as u64,
            reason: format!("using host memory in place: {e}"),
        })
    }
}

/// One OpenCL device with its context and in-order queue.
pub struct OpenClBackend {
    shared: Arc<Shared>,
    version: String,
}

fn cl_error(backend_reason: impl std::fmt::Display) -> BackendError {
    BackendError::Unavailable {
        backend: BackendKind::OpenCl,
        library: LIBRARY.into(),
        reason: backend_reason.to_string(),
    }
}

/// Every OpenCL device of every platform: the GPUs first, then the other devices, each group in
/// platform order. Fails with `Unavailable` when the OpenCL library or a platform is missing.
fn device_ids() -> Result<Vec<opencl3::types::cl_device_id>, BackendError> {
    // The ICD loader reads its platform list on first use; threads asking while another does
    // so were seen to get no platforms. One discovery at a time.
    static DISCOVERY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = DISCOVERY.lock().unwrap_or_else(|p| p.into_inner());
    let mut ids = get_all_devices(CL_DEVICE_TYPE_GPU).unwrap_or_default();
    let all = get_all_devices(CL_DEVICE_TYPE_ALL)
        .map_err(|e| cl_error(format!("no OpenCL platform or device ({e})")))?;
    let others: Vec<_> = all.into_iter().filter(|id| !ids.contains(id)).collect();
    ids.extend(others);
    Ok(ids)
}

impl OpenClBackend {
    /// Opens the first OpenCL GPU, or else the first OpenCL device of any type (device 0 of
    /// [`OpenClBackend::open`]). Fails like `open`.
    pub fn new() -> Result<OpenClBackend, BackendError> {
        OpenClBackend::open(0)
    }

    /// How many OpenCL devices this machine has, over all platforms. Fails with `Unavailable`
    /// when the OpenCL library or a platform is missing.
    pub fn device_count() -> Result<u32, BackendError> {
        Ok(device_ids()?.len() as u32)
    }

    /// Opens OpenCL device `index`, counting the GPUs of every platform first and then the
    /// other devices. Fails with `Unavailable` when the OpenCL library, a platform or a device
    /// is missing or its context or queue cannot be made, and with `NoSuchDevice` when there
    /// are devices but not that many.
    pub fn open(index: u32) -> Result<OpenClBackend, BackendError> {
        let ids = device_ids()?;
        if ids.is_empty() {
            return Err(cl_error("no OpenCL device found"));
        }
        let id = *ids.get(index as usize).ok_or(BackendError::NoSuchDevice {
            backend: BackendKind::OpenCl,
            index,
            count: ids.len() as u32,
        })?;
        let device = Device::new(id);
        let q = |r: Result<String, opencl3::error_codes::ClError>| r.unwrap_or_default();
        let name = q(device.name());
        let extensions = q(device.extensions());
        let version = format!(
            "{} / {} / {}",
            q(device.version()),
            q(device.driver_version()),
            name
        );
        let is_gpu = device
            .dev_type()
            .map(|t| t & CL_DEVICE_TYPE_GPU != 0)
            .unwrap_or(false);
        let info = DeviceInfo {
            backend: BackendKind::OpenCl,
            name: name.trim().to_string(),
            index,
            class: if is_gpu {
                DeviceClass::Gpu
            } else {
                DeviceClass::Cpu
            },
            memory_bytes: device.global_mem_size().unwrap_or(0),
            compute_units: device.max_compute_units().unwrap_or(1),
            max_group_size: device
                .max_work_group_size()
                .unwrap_or(1)
                .min(u32::MAX as usize) as u32,
            subgroup_size: 1,
            max_shared_bytes: device.local_mem_size().unwrap_or(0),
            max_buffer_bytes: device.max_mem_alloc_size().unwrap_or(u64::MAX),
            indexed_private_arrays: true,
            fits_groups_to_work: false,
            max_loop_iterations: None,
            features: Features {
                f64: device.double_fp_config().map(|c| c != 0).unwrap_or(false)
                    || extensions.contains("cl_khr_fp64"),
                // The full profile has `long`; the embedded one only with this extension.
                int64: !q(device.profile()).contains("EMBEDDED")
                    || extensions.contains("cles_khr_int64"),
                subgroups: false,
                atomics64: extensions.contains("cl_khr_int64_base_atomics")
                    && extensions.contains("cl_khr_int64_extended_atomics"),
                fast_math: true,
                register_limit: false,
            },
            unusable: None,
        };
        let context = Context::from_device(&device)
            .map_err(|e| cl_error(format!("creating a context: {e}")))?;
        // clCreateCommandQueue is the OpenCL 1.2 call (deprecated only from 2.0 on).
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, 0)
            .map_err(|e| cl_error(format!("creating a queue: {e}")))?;
        Ok(OpenClBackend {
            shared: Arc::new(Shared {
                context,
                queue,
                pool: MemoryPool::new(pool_capacity(info.memory_bytes)),
                host_unified: device.host_unified_memory().unwrap_or(false),
                item_sizes: {
                    let sizes = device.max_work_item_sizes().unwrap_or_default();
                    std::array::from_fn(|d| sizes.get(d).map_or(1, |&n| n as u64))
                },
                sub_buffer_align: device
                    .mem_base_addr_align()
                    .ok()
                    .filter(|&bits| bits >= 8)
                    .map(|bits| bits as usize / 8),
                info,
            }),
            version,
        })
    }
}

impl Backend for OpenClBackend {
    fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    fn compiler_version(&self) -> String {
        self.version.clone()
    }

    fn prepare(&self, kernel: &Kernel, info: &KernelInfo) -> Result<Prepared, BackendError> {
        check_options(&self.shared.info, &kernel.options)?;
        let src = write_validated(kernel, info, Dialect::OpenCl).map_err(|e| {
            BackendError::Unsupported {
                backend: BackendKind::OpenCl,
                feature: e.to_string(),
            }
        })?;
        Ok(Prepared {
            text: Some(src.text.clone()),
            written: Box::new(src),
        })
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        let buf = self.shared.create_buffer(bytes)?;
        let allocation = ClAllocation {
            buf: ManuallyDrop::new(buf),
            bytes,
            shared: self.shared.clone(),
        };
        Ok(Arc::new(ClMemory::whole(allocation, bytes)))
    }

    fn view(
        &self,
        mem: &dyn DeviceMemory,
        offset: usize,
        bytes: usize,
    ) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        view_region::<ClAllocation>(BackendKind::OpenCl, mem, offset, bytes)
    }

    fn native_memory(&self, mem: &dyn DeviceMemory) -> Result<NativeMemory, BackendError> {
        let m = region_of::<ClAllocation>(BackendKind::OpenCl, mem)?;
        Ok(NativeMemory::OpenCl {
            mem: buffer(m),
            offset: m.origin,
            bytes: m.bytes,
        })
    }

    fn native_device(&self) -> NativeDevice {
        let s = &self.shared;
        NativeDevice::OpenCl {
            context: s.context.get(),
            device: s.context.default_device(),
            queue: s.queue.get(),
        }
    }

    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError> {
        let m = cl_memory(mem).map_err(|e| self.copy_err(e.to_string()))?;
        if data.len() > m.bytes {
            return Err(self.copy_err(format!(
                "copy of {} bytes into device memory of {} bytes",
                data.len(),
                m.bytes
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the in-order queue runs this blocking write after earlier launches; the
        // buffer holds at least `data.len()` bytes; the returned event is released at once.
        let event = unsafe {
            opencl3::command_queue::enqueue_write_buffer(
                self.shared.queue.get(),
                buffer(m),
                CL_BLOCKING,
                m.origin,
                data.len(),
                data.as_ptr() as *const std::ffi::c_void,
                0,
                std::ptr::null(),
            )
        }
        .map_err(|e| self.copy_err(format!("writing device memory: OpenCL error {e}")))?;
        drop(opencl3::event::Event::new(event));
        Ok(())
    }

    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError> {
        let m = cl_memory(mem).map_err(|e| self.copy_err(e.to_string()))?;
        if out.len() > m.bytes {
            return Err(self.copy_err(format!(
                "copy of {} bytes out of device memory of {} bytes",
                out.len(),
                m.bytes
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: blocking read after earlier launches (in-order queue) into a live slice;
        // the buffer holds `out.len()` bytes from `origin`; the event is released at once.
        let event = unsafe {
            opencl3::command_queue::enqueue_read_buffer(
                self.shared.queue.get(),
                buffer(m),
                CL_BLOCKING,
                m.origin,
                out.len(),
                out.as_mut_ptr() as *mut std::ffi::c_void,
                0,
                std::ptr::null(),
            )
        }
        .map_err(|e| self.copy_err(format!("reading device memory: OpenCL error {e}")))?;
        drop(opencl3::event::Event::new(event));
        Ok(())
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        check_copy(BackendKind::OpenCl, src, dst, bytes)?;
        let (s, d) = (
            cl_memory(src).map_err(|e| self.copy_err(e.to_string()))?,
            cl_memory(dst).map_err(|e| self.copy_err(e.to_string()))?,
        );
        if bytes == 0 || (buffer(s) == buffer(d) && s.origin == d.origin) {
            return Ok(());
        }
        self.shared
            .copy_region((buffer(s), s.origin), (buffer(d), d.origin), bytes)
            .map_err(|e| self.copy_err(e))
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.shared
            .queue
            .finish()
            .map_err(|e| self.copy_err(format!("waiting for the queue: {e}")))
    }

    fn compile_prepared(
        &self,
        kernel: &Kernel,
        prepared: Prepared,
    ) -> Result<(Arc<dyn CompiledKernel>, Option<Vec<u8>>), BackendError> {
        let src = self.source(&prepared)?;
        let program = Program::create_and_build_from_source(
            &self.shared.context,
            &src.text,
            build_options(&kernel.options),
        )
        .map_err(|log| BackendError::Compile {
            backend: BackendKind::OpenCl,
            kernel: kernel.name.clone(),
            log,
            source_text: src.text.clone(),
        })?;
        let binary = program
            .get_binaries()
            .ok()
            .and_then(|b| b.into_iter().next())
            .filter(|b| !b.is_empty());
        Ok((self.finish(kernel, src, program)?, binary))
    }

    fn load_binary(
        &self,
        kernel: &Kernel,
        prepared: &Prepared,
        binary: &[u8],
    ) -> Result<Arc<dyn CompiledKernel>, BackendError> {
        let src = self.source(prepared)?;
        let program = Program::create_and_build_from_binary(
            &self.shared.context,
            &[binary],
            build_options(&kernel.options),
        )
        .map_err(|e| BackendError::Compile {
            backend: BackendKind::OpenCl,
            kernel: kernel.name.clone(),
            log: format!("loading a cached program binary: {e}"),
            source_text: src.text.clone(),
        })?;
        self.finish(kernel, src, program)
    }
}

impl OpenClBackend {
    fn copy_err(&self, reason: String) -> BackendError {
        BackendError::InvalidLaunch {
            backend: BackendKind::OpenCl,
            kernel: String::new(),
            reason,
        }
    }

    /// The OpenCL C of a prepared kernel, after checking the device has what it needs.
    fn source<'p>(&self, prepared: &'p Prepared) -> Result<&'p kiln_c::Source, BackendError> {
        let src: &kiln_c::Source = prepared.written(BackendKind::OpenCl)?;
        let features = &self.shared.info.features;
        let missing = [
            (src.needs.f64, features.f64, "f64 (cl_khr_fp64)"),
            (
                src.needs.atomics64,
                features.atomics64,
                "64-bit atomics (cl_khr_int64_base_atomics)",
            ),
        ];
        if let Some((_, _, what)) = missing.iter().find(|(need, have, _)| *need && !*have) {
            return Err(BackendError::Unsupported {
                backend: BackendKind::OpenCl,
                feature: format!("{what} on {}", self.shared.info.name),
            });
        }
        Ok(src)
    }

    /// The kernel object of a built program.
    fn finish(
        &self,
        kernel: &Kernel,
        src: &kiln_c::Source,
        program: Program,
    ) -> Result<Arc<dyn CompiledKernel>, BackendError> {
        let cl_kernel =
            ClKernel::create(&program, &src.entry).map_err(|e| BackendError::Compile {
                backend: BackendKind::OpenCl,
                kernel: kernel.name.clone(),
                log: format!("creating kernel `{}`: {e}", src.entry),
                source_text: src.text.clone(),
            })?;
        Ok(Arc::new(OpenClKernel {
            kernel: Arc::new(kernel.clone()),
            slots: src.slots.clone(),
            cl: Mutex::new(cl_kernel),
            _program: program,
            shared: self.shared.clone(),
        }))
    }
}

struct OpenClKernel {
    kernel: Arc<Kernel>,
    /// What each argument of the compiled kernel takes.
    slots: Vec<Slot>,
    cl: Mutex<ClKernel>,
    _program: Program,
    shared: Arc<Shared>,
}

// SAFETY: the OpenCL kernel object is only used while holding the mutex.
unsafe impl Sync for OpenClKernel {}

impl OpenClKernel {
    fn launch_err(&self, what: &str, e: impl std::fmt::Display) -> BackendError {
        BackendError::InvalidLaunch {
            backend: BackendKind::OpenCl,
            kernel: self.kernel.name.clone(),
            reason: format!("{what}: {e}"),
        }
    }
}

/// Ok when `grid` fits the device: each axis of a group within `item_sizes`, and at most
/// u32::MAX groups in all (PoCL 3.1 counts them in 32 bits: 65536 x 65536 groups crashed it
/// with SIGILL, 4096^3 with a failed assertion). Otherwise the reason, so the launch fails
/// typed before it copies anything.
fn check_grid(grid: &Grid, item_sizes: &[u64; 3]) -> Result<(), String> {
    for ((axis, &n), &max) in ["x", "y", "z"].iter().zip(&grid.group_size).zip(item_sizes) {
        if n as u64 > max {
            return Err(format!(
                "{n} work items along {axis}; this device's groups hold at most {max} along {axis}"
            ));
        }
    }
    let groups: u64 = grid.groups.iter().map(|&g| g as u64).product();
    if groups > u32::MAX as u64 {
        return Err(format!(
            "{groups} groups in all ({:?}); an OpenCL launch here takes at most u32::MAX",
            grid.groups
        ));
    }
    Ok(())
}

impl CompiledKernel for OpenClKernel {
    fn launch(&self, grid: &Grid, args: &mut [LaunchArg<'_>]) -> Result<(), BackendError> {
        let k = &self.kernel;
        let info = &self.shared.info;
        let shape = check_launch(BackendKind::OpenCl, k, grid, args, info.max_group_size)?;
        check_grid(grid, &self.shared.item_sizes).map_err(|e| self.launch_err("grid", e))?;
        check_shared_bytes(info, shape.shared_bytes(k).0, "at C element sizes")?;
        let cl = self.cl.lock().unwrap_or_else(|p| p.into_inner());
        let queue = &self.shared.queue;
        // Each host argument's bytes and whether the kernel may write them, taken before the
        // arguments are read so that written ones come from their `&mut`.
        let host: Vec<Option<(*mut u8, usize, bool)>> = args
            .iter_mut()
            .map(|a| match a {
                LaunchArg::Read(b) => Some((b.as_ptr().cast_mut(), b.len(), false)),
                LaunchArg::ReadWrite(b) => Some((b.as_mut_ptr(), b.len(), true)),
                LaunchArg::Write(b) => Some((b.as_mut_ptr().cast(), b.len(), true)),
                _ => None,
            })
            .collect();
        // Host arguments' device sides, released after the launch.
        let mut buffers: Vec<Option<HostBuffer>> = Vec::new();
        // Device arguments' sides, held until the kernel is queued.
        let mut sides: Vec<DeviceSide> = Vec::new();
        // Each buffer parameter's memory object.
        let mut memory: Vec<Option<cl_mem>> = Vec::new();
        for (i, (p, a)) in k.params.iter().zip(args.iter()).enumerate() {
            match (&p.kind, a) {
                (ParamKind::Buffer { access, .. }, LaunchArg::Device(m)) => {
                    let argument = |e| self.launch_err(&format!("argument {i}"), e);
                    let mem = cl_memory(*m).map_err(|e| argument(e.to_string()))?;
                    let side = self
                        .shared
                        .device_side(mem, *access != Access::Read)
                        .map_err(argument)?;
                    memory.push(Some(side.mem()));
                    sides.push(side);
                    buffers.push(None);
                }
                (ParamKind::Buffer { .. }, _) => {
                    let side = match host[i] {
                        Some((ptr, len, output)) if self.shared.host_unified && len > 0 => {
                            // SAFETY: the argument borrows the bytes for the whole launch,
                            // which finishes the queue before it returns.
                            let buf = unsafe { self.shared.host_buffer(ptr, len, output)? };
                            HostBuffer::InPlace { buf, len, output }
                        }
                        _ => {
                            let mut buf = self.shared.create_buffer(a.byte_len())?;
                            let input: Option<&[u8]> = match a {
                                LaunchArg::Read(b) => Some(b),
                                LaunchArg::ReadWrite(b) => Some(b),
                                _ => None,
                            };
                            if let Some(h) = input.filter(|h| !h.is_empty()) {
                                // SAFETY: blocking write of a live host slice into a buffer at
                                // least as large.
                                unsafe {
                                    queue.enqueue_write_buffer(&mut buf, CL_BLOCKING, 0, h, &[])
                                }
                                .map_err(|e| self.launch_err("uploading", e))?;
                            }
                            HostBuffer::Copied(a.byte_len(), buf)
                        }
                    };
                    let buf = match &side {
                        HostBuffer::Copied(_, b) | HostBuffer::InPlace { buf: b, .. } => b,
                    };
                    memory.push(Some(buf.get()));
                    buffers.push(Some(side));
                }
                (ParamKind::Value(_), LaunchArg::Value(_)) => {
                    memory.push(None);
                    buffers.push(None);
                }
                _ => return Err(self.launch_err("argument", "does not match its parameter")),
            }
        }
        for (arg, slot) in self.slots.iter().enumerate() {
            let arg = arg as u32;
            let missing = || self.launch_err("argument", format!("{slot:?} has no argument"));
            // SAFETY: each argument is set as the slot kiln-c wrote for it says: a memory
            // object, a `uint`, a scalar of the component's size, or local memory.
            let set = unsafe {
                match *slot {
                    Slot::Pointer { param } => {
                        let mem = memory.get(param).copied().flatten().ok_or_else(missing)?;
                        cl.set_arg(arg, &mem)
                    }
                    Slot::Length { param } => {
                        cl.set_arg(arg, &(shape.buffer_lengths[param] as u32))
                    }
                    Slot::Component {
                        param,
                        offset,
                        size,
                    } => match args.get(param) {
                        Some(LaunchArg::Value(bytes)) => {
                            match ScalarArg::component(bytes, offset, size).ok_or_else(missing)? {
                                ScalarArg::B1(v) => cl.set_arg(arg, &v),
                                ScalarArg::B2(v) => cl.set_arg(arg, &v),
                                ScalarArg::B4(v) => cl.set_arg(arg, &v),
                                ScalarArg::B8(v) => cl.set_arg(arg, &v),
                            }
                        }
                        _ => return Err(missing()),
                    },
                    Slot::SharedLength { shared } => cl.set_arg(arg, &shape.shared_lengths[shared]),
                    Slot::SharedMemory { shared } => {
                        let n = shape.shared_lengths[shared] as usize;
                        let bytes = n * k.shared[shared].elem.size() as usize;
                        cl.set_arg_local_buffer(arg, bytes.max(1))
                    }
                }
            };
            set.map_err(|e| self.launch_err(&format!("setting argument {arg} ({slot:?})"), e))?;
        }
        if shape.groups > 0 {
            let global: Vec<usize> = (0..3)
                .map(|a| grid.groups[a] as usize * grid.group_size[a] as usize)
                .collect();
            let local: Vec<usize> = grid.group_size.iter().map(|&g| g as usize).collect();
            // SAFETY: every argument is set; sizes are validated above.
            unsafe {
                queue.enqueue_nd_range_kernel(
                    cl.get(),
                    3,
                    std::ptr::null(),
                    global.as_ptr(),
                    local.as_ptr(),
                    &[],
                )
            }
            .map_err(|e| self.launch_err("enqueueing the kernel", e))?;
        }
        // Once the kernel is queued, the launch finishes the queue before it returns, error
        // or not, so that nothing writes or reads the host bytes after it.
        let downloads = self
            .copy_back_views(&sides)
            .and_then(|_| self.queue_host_results(args, &buffers));
        let host_outputs = args
            .iter()
            .any(|a| matches!(a, LaunchArg::ReadWrite(_) | LaunchArg::Write(_)));
        let in_place = buffers
            .iter()
            .any(|b| matches!(b, Some(HostBuffer::InPlace { .. })));
        if downloads.is_err() || host_outputs || in_place {
            let finished = queue.finish();
            downloads?;
            finished.map_err(|e| self.launch_err("running", e))?;
        }
        for side in buffers.into_iter().flatten() {
            if let HostBuffer::Copied(bytes, buf) = side {
                self.shared.release(bytes, buf);
            }
        }
        for side in sides {
            if let DeviceSide::Staged { buf, bytes, .. } = side {
                self.shared.release(bytes, buf);
            }
        }
        Ok(())
    }
}

impl OpenClKernel {
    /// Queues the copies of staged views the kernel may have written back to their buffers.
    fn copy_back_views(&self, sides: &[DeviceSide]) -> Result<(), BackendError> {
        for side in sides {
            if let DeviceSide::Staged {
                buf,
                bytes,
                back: Some(to),
            } = side
            {
                self.shared
                    .copy_region((buf.get(), 0), *to, *bytes)
                    .map_err(|e| self.launch_err("copying a view back", e))?;
            }
        }
        Ok(())
    }

    /// Queues what brings the kernel's writes to host arguments back to the host: a read of
    /// each copied one, a map and unmap of each one used in place.
    fn queue_host_results(
        &self,
        args: &mut [LaunchArg<'_>],
        buffers: &[Option<HostBuffer>],
    ) -> Result<(), BackendError> {
        let queue = &self.shared.queue;
        for (a, side) in args.iter_mut().zip(buffers) {
            match side {
                Some(HostBuffer::Copied(_, buf)) => {
                    let Some(host) = a.host_output() else {
                        continue;
                    };
                    if !host.is_empty() {
                        // SAFETY: non-blocking read into a live host slice; `finish` below
                        // waits for it.
                        unsafe { queue.enqueue_read_buffer(buf, CL_NON_BLOCKING, 0, host, &[]) }
                            .map_err(|e| self.launch_err("downloading", e))?;
                    }
                }
                Some(HostBuffer::InPlace {
                    buf,
                    len,
                    output: true,
                }) => {
                    // Mapping a host-pointer buffer makes the kernel's writes visible in the
                    // host bytes (the spec's only promise); unmapping hands them back.
                    let mut mapped: opencl3::types::cl_mem = std::ptr::null_mut();
                    // SAFETY: maps the whole live buffer for reading; unmapped right after.
                    unsafe {
                        queue.enqueue_map_buffer(
                            buf,
                            CL_NON_BLOCKING,
                            CL_MAP_READ,
                            0,
                            *len,
                            &mut mapped,
                            &[],
                        )
                    }
                    .map_err(|e| self.launch_err("mapping a host argument", e))?;
                    // SAFETY: `mapped` is the pointer the map above returned for `buf`.
                    unsafe { queue.enqueue_unmap_mem_object(buf.get(), mapped, &[]) }
                        .map_err(|e| self.launch_err("unmapping a host argument", e))?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// One OpenCL buffer; dropped, it goes back to the backend's pool.
struct ClAllocation {
    buf: ManuallyDrop<Buffer<u8>>,
    bytes: usize,
    shared: Arc<Shared>,
}

impl Drop for ClAllocation {
    fn drop(&mut self) {
        // SAFETY: `buf` is not used again after this.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        self.shared.release(self.bytes, buf);
    }
}

/// OpenCL device memory: a region of a buffer.
type ClMemory = Region<ClAllocation>;

/// The whole buffer a region lies in.
fn buffer(mem: &ClMemory) -> cl_mem {
    mem.allocation.buf.get()
}

fn cl_memory(mem: &dyn DeviceMemory) -> Result<&ClMemory, &'static str> {
    downcast_memory(mem)
}
