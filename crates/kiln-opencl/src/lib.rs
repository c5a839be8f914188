//! # kiln-opencl: the OpenCL backend
//!
//! Writes OpenCL C 1.2 with [`kiln_c`], builds it with the driver of the first OpenCL device
//! (a GPU if there is one), and launches it. `libOpenCL.so.1` is loaded at run time (opencl3's
//! `dynamic` feature): on a machine without it, [`OpenClBackend::new`] returns
//! `BackendError::Unavailable` naming the library. Host arguments are copied to device buffers
//! for each launch and copied back where the kernel may write; on a device that shares the
//! host's memory (`CL_DEVICE_HOST_UNIFIED_MEMORY`: CPUs, integrated GPUs) the kernel uses them
//! in place instead (`CL_MEM_USE_HOST_PTR`), and the launch waits for it.
//! Each stream ([`Backend::queue`]) gets a command queue of its own on the same context.

#![deny(missing_docs)]
mod copies;
mod launch;
mod queue;

use kiln_backend::*;
use kiln_c::{write_validated, Dialect};
use kiln_ir::{CompileOptions, Kernel, KernelInfo};
use launch::{DeviceSide, OpenClKernel};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{get_all_devices, Device, CL_DEVICE_TYPE_ALL, CL_DEVICE_TYPE_GPU};
use opencl3::kernel::Kernel as ClKernel;
use opencl3::memory::{Buffer, ClMem, CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, CL_MEM_USE_HOST_PTR};
use opencl3::program::Program;
use opencl3::types::cl_mem;
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

/// The queue a launch or copy goes to.
#[derive(Clone, Copy)]
enum Lane<'q> {
    /// The backend's own in-order queue, which all work outside streams goes to: a
    /// temporary given back to the pool as soon as its commands are queued is reused only by
    /// commands queued after them.
    Own,
    /// A stream's queue ([`queue::ClQueue`]): its temporaries are new buffers (a pooled one may
    /// still be in use on the backend's queue), and a launch finishes the queue before it
    /// gives them to the pool.
    Stream(&'q CommandQueue),
}

impl<'q> Lane<'q> {
    fn queue(self, shared: &'q Shared) -> &'q CommandQueue {
        match self {
            Lane::Own => &shared.queue,
            Lane::Stream(q) => q,
        }
    }
}

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

impl Shared {
    /// Queues on `queue` a copy of `bytes` bytes from `(buffer, byte offset)` `from` to `to`,
    /// after earlier commands (queues are in order). The regions must lie inside their buffers
    /// and not overlap. Fails with the driver's error.
    fn copy_region(
        &self,
        queue: &CommandQueue,
        from: (cl_mem, usize),
        to: (cl_mem, usize),
        bytes: usize,
    ) -> Result<(), String> {
        // SAFETY: both regions lie inside live buffers and do not overlap (the caller's
        // promise); the event is released at once.
        let event = unsafe {
            opencl3::command_queue::enqueue_copy_buffer(
                queue.get(),
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

    /// How a launch on `lane` binds `mem`: its buffer when it starts there or is empty, a
    /// sub-buffer when its origin is on the device's alignment, otherwise a copy in a
    /// temporary buffer (queued now), which is copied back after the kernel when `written`.
    /// Fails with the driver's error.
    fn device_side(
        &self,
        lane: Lane<'_>,
        mem: &ClMemory,
        written: bool,
    ) -> Result<DeviceSide, String> {
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
        let buf = match lane {
            Lane::Own => self.create_buffer(mem.bytes),
            Lane::Stream(_) => self.new_buffer(mem.bytes),
        }
        .map_err(|e| e.to_string())?;
        self.copy_region(
            lane.queue(self),
            (buffer(mem), mem.origin),
            (buf.get(), 0),
            mem.bytes,
        )?;
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
        check_buffer_bytes(&self.info, bytes as u64, "per buffer")?;
        match self.pool.take(bytes.max(1)) {
            Some(kept) => Ok(kept),
            None => self.new_buffer(bytes),
        }
    }

    /// A new device buffer of `bytes` (at least one byte; contents undefined), not from the
    /// pool. Fails like [`Shared::create_buffer`].
    fn new_buffer(&self, bytes: usize) -> Result<Buffer<u8>, BackendError> {
        let oom = |reason: String| BackendError::OutOfMemory {
            backend: BackendKind::OpenCl,
            bytes: bytes as u64,
            reason,
        };
        check_buffer_bytes(&self.info, bytes as u64, "per buffer")?;
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
            host_memory: false,
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
        self.shared.write(&self.shared.queue, mem, data)
    }

    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError> {
        self.shared.read(&self.shared.queue, mem, out)
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        self.shared.copy(&self.shared.queue, src, dst, bytes)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        copies::finish(&self.shared.queue)
    }

    fn queue(&self) -> Result<Option<Box<dyn DeviceQueue>>, BackendError> {
        Ok(Some(Box::new(queue::ClQueue::new(self.shared.clone())?)))
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
