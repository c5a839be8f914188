//! # kiln-backend: what every kiln backend implements
//!
//! A backend turns a validated [`kiln_ir::Kernel`] into a [`CompiledKernel`] and launches it
//! over a [`Grid`] with [`LaunchArg`]s. The query layer and the runtime talk to backends only
//! through [`Backend`], so adding a backend touches nothing else.

#![deny(missing_docs)]
mod native;
mod pinned;
mod pool;
mod queue;

pub use native::{NativeDevice, NativeMemory};
pub use pinned::PinnedMemory;
pub use pool::{pool_capacity, MemoryPool};
pub use queue::DeviceQueue;

use kiln_ir::{CompileOptions, IrType, Kernel, KernelInfo};
use std::mem::MaybeUninit;
use std::sync::Arc;

/// The backends kiln knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Cranelift JIT + rayon on the host CPU.
    Cpu,
    /// NVIDIA CUDA through NVRTC.
    Cuda,
    /// Any OpenCL 1.2+ device.
    OpenCl,
    /// Vulkan, Metal, DX12 or GL through wgpu.
    Wgpu,
}

impl BackendKind {
    /// Lower-case name as accepted by `KILN_BACKEND` (`"cpu"`).
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
            BackendKind::OpenCl => "opencl",
            BackendKind::Wgpu => "wgpu",
        }
    }

    /// Parses a name as accepted by `KILN_BACKEND`; `None` if unknown.
    pub fn parse(s: &str) -> Option<BackendKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Some(BackendKind::Cpu),
            "cuda" => Some(BackendKind::Cuda),
            "opencl" => Some(BackendKind::OpenCl),
            "wgpu" => Some(BackendKind::Wgpu),
            _ => None,
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a device is the host CPU or a GPU-like accelerator; the query planner picks its
/// work distribution from this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceClass {
    /// Few fast cores; contiguous chunks per work item.
    Cpu,
    /// Many lanes; one element per work item, coalesced accesses.
    Gpu,
}

/// Optional capabilities of a device.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Features {
    /// `f64` arithmetic.
    pub f64: bool,
    /// 64-bit integer arithmetic (`i64`/`u64` values, and 64-bit query results such as a sum
    /// of `i64`).
    pub int64: bool,
    /// Subgroup operations.
    pub subgroups: bool,
    /// 64-bit integer atomics.
    pub atomics64: bool,
    /// Relaxed floating-point math ([`CompileOptions::fast_math`]): CUDA and OpenCL have it;
    /// WGSL and the CPU backend's Cranelift have no such mode.
    pub fast_math: bool,
    /// A limit on registers per work item ([`CompileOptions::max_registers`]): CUDA only.
    pub register_limit: bool,
}

/// What a device is and can do.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The backend that drives it.
    pub backend: BackendKind,
    /// Human-readable device name.
    pub name: String,
    /// The device's position among its backend's devices, 0 being the one the backend opens
    /// by default (what `Context::with_device` and `KILN_BACKEND=name:index` take).
    pub index: u32,
    /// CPU or GPU.
    pub class: DeviceClass,
    /// Device memory in bytes (host memory for the CPU); 0 where the API does not say (wgpu).
    pub memory_bytes: u64,
    /// Parallel units (cores, SMs, compute units).
    pub compute_units: u32,
    /// Largest work-group size.
    pub max_group_size: u32,
    /// Lanes per subgroup: the warp size on CUDA, the adapter's largest on wgpu, 1 where
    /// subgroups have one lane (CPU, OpenCL, adapters without subgroups).
    pub subgroup_size: u32,
    /// Largest shared memory per group in bytes.
    pub max_shared_bytes: u64,
    /// Largest single buffer in bytes.
    pub max_buffer_bytes: u64,
    /// Whether a private (per work item) array indexed by a run-time value is plain memory
    /// that query plans may count or fold into: true for the CPU backend, OpenCL and CUDA;
    /// false for CPU adapters of wgpu (llvmpipe), whose compiler expands every such access
    /// into code for each element, so large arrays are slow to compile and to run.
    pub indexed_private_arrays: bool,
    /// Whether query plans size a launch's groups to its work: true for the CPU backend,
    /// which runs every work item of a grid (an idle one costs as much as a busy one) and
    /// compiles once for any group size; false where idle work items exit at once (GPUs) or
    /// a new group size compiles the kernel again (PoCL, wgpu), so groups stay whole.
    pub fits_groups_to_work: bool,
    /// Whether the device's memory is the host's own (true for the CPU backend only): query
    /// plans keep their small temporaries (a reduction's partials and result) in host memory
    /// there, which a launch binds without the device memory's bookkeeping and the host reads
    /// without a download.
    pub host_memory: bool,
    /// The most loop iterations a work item may run in total, all its loops together, where
    /// the device stops them silently past that; `None` where loops run as long as they
    /// need. Mesa's llvmpipe stops a SIMD batch of work items after 65535 passes of all their
    /// loops: this is 65535 where kiln counts each subgroup's passes, and 65535 over the
    /// batch's lanes where it can only count each work item's. The wgpu backend reports a
    /// work item that reaches it as an error, and query plans keep each work item's loops
    /// below it.
    pub max_loop_iterations: Option<u32>,
    /// Optional capabilities.
    pub features: Features,
    /// Why kiln cannot run kernels on this device, for a device that its driver reports but
    /// that does not open (`Context::devices` lists it with the reason); `None` for a device
    /// that opens.
    pub unusable: Option<String>,
}

impl DeviceInfo {
    /// A device the driver reports (as `name`, where it could say) that does not open, for
    /// `reason`: its capabilities are all zero or absent.
    pub fn unusable(backend: BackendKind, index: u32, name: String, reason: String) -> DeviceInfo {
        DeviceInfo {
            backend,
            name,
            index,
            class: if backend == BackendKind::Cpu {
                DeviceClass::Cpu
            } else {
                DeviceClass::Gpu
            },
            memory_bytes: 0,
            compute_units: 0,
            max_group_size: 0,
            subgroup_size: 0,
            max_shared_bytes: 0,
            max_buffer_bytes: 0,
            indexed_private_arrays: false,
            fits_groups_to_work: false,
            host_memory: false,
            max_loop_iterations: None,
            features: Features::default(),
            unusable: Some(reason),
        }
    }
}

/// The launch shape: groups per axis, work items per group per axis, and the element count
/// of each dynamic shared array (in declaration order of the kernel's dynamic arrays).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grid {
    /// Groups along x, y, z.
    pub groups: [u32; 3],
    /// Work items per group along x, y, z.
    pub group_size: [u32; 3],
    /// Element counts of the kernel's dynamic shared arrays.
    pub dynamic_shared: Vec<u32>,
}

impl Grid {
    /// A 1D grid of `groups` groups of `group_size` work items.
    pub fn linear(groups: u32, group_size: u32) -> Grid {
        Grid {
            groups: [groups, 1, 1],
            group_size: [group_size, 1, 1],
            dynamic_shared: Vec::new(),
        }
    }
}

/// Memory that lives on a device, made by [`Backend::alloc`]. A backend accepts only its own.
pub trait DeviceMemory: Send + Sync {
    /// Size in bytes.
    fn byte_len(&self) -> usize;
    /// The backend's concrete type, for its launcher.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// Device memory as backends hold it: the `bytes` bytes of an allocation `A` (a backend's
/// buffer handle, freed or pooled when the last region of it is dropped) that start `origin`
/// bytes in; 0 for memory made by [`Backend::alloc`], more for a [`Backend::view`].
pub struct Region<A> {
    /// The allocation, shared by every view of it.
    pub allocation: Arc<A>,
    /// Where the region starts in the allocation, in bytes.
    pub origin: usize,
    /// The region's size in bytes.
    pub bytes: usize,
}

impl<A> Region<A> {
    /// All `bytes` bytes of a new allocation.
    pub fn whole(allocation: A, bytes: usize) -> Region<A> {
        Region {
            allocation: Arc::new(allocation),
            origin: 0,
            bytes,
        }
    }
}

impl<A: Send + Sync + 'static> DeviceMemory for Region<A> {
    fn byte_len(&self) -> usize {
        self.bytes
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// [`Backend::view`] for a backend whose memory is a [`Region<A>`]: the `bytes` bytes of
/// `mem` from `offset`, a region of the same allocation. Fails with `InvalidLaunch` naming
/// `backend` when the range is outside `mem` ([`check_view`]) or `mem` is not a `Region<A>`.
pub fn view_region<A: Send + Sync + 'static>(
    backend: BackendKind,
    mem: &dyn DeviceMemory,
    offset: usize,
    bytes: usize,
) -> Result<Arc<dyn DeviceMemory>, BackendError> {
    check_view(backend, mem, offset, bytes)?;
    let region = region_of::<A>(backend, mem)?;
    Ok(Arc::new(Region {
        allocation: region.allocation.clone(),
        origin: region.origin + offset,
        bytes,
    }))
}

/// `mem` as a [`Region<A>`] of `backend`, whose memory that is; `InvalidLaunch` naming
/// `backend` for another backend's memory.
pub fn region_of<A: Send + Sync + 'static>(
    backend: BackendKind,
    mem: &dyn DeviceMemory,
) -> Result<&Region<A>, BackendError> {
    downcast_memory::<Region<A>>(mem).map_err(|reason| BackendError::InvalidLaunch {
        backend,
        kernel: String::new(),
        reason: reason.into(),
    })
}

/// `mem` as the device memory type `M` of one backend; an error saying so for another
/// backend's memory.
pub fn downcast_memory<M: DeviceMemory + 'static>(
    mem: &dyn DeviceMemory,
) -> Result<&M, &'static str> {
    mem.as_any()
        .downcast_ref::<M>()
        .ok_or("device memory of another backend")
}

/// One launch argument, matching the kernel's parameter of the same position.
pub enum LaunchArg<'a> {
    /// Device memory of the launching backend, used in place (any access).
    Device(&'a dyn DeviceMemory),
    /// A read-only host buffer (bytes of the elements).
    Read(&'a [u8]),
    /// A host buffer the kernel reads and writes.
    ReadWrite(&'a mut [u8]),
    /// A host buffer the kernel fills; the caller treats it as initialized only where the
    /// kernel stored.
    Write(&'a mut [MaybeUninit<u8>]),
    /// A value parameter: the bytes of the value in its C layout.
    Value(Vec<u8>),
}

impl<'a> LaunchArg<'a> {
    /// A read-only buffer argument over a slice of kiln values.
    pub fn read<T: IrType>(xs: &'a [T]) -> LaunchArg<'a> {
        // SAFETY: IrType values are plain data without padding (scalars, `Vector`, IrStruct).
        LaunchArg::Read(unsafe {
            std::slice::from_raw_parts(xs.as_ptr() as *const u8, std::mem::size_of_val(xs))
        })
    }

    /// A read-write buffer argument over a slice of kiln values.
    pub fn read_write<T: IrType>(xs: &'a mut [T]) -> LaunchArg<'a> {
        let len = std::mem::size_of_val(xs);
        // SAFETY: as in `read`; kernels store only valid values of the element type.
        LaunchArg::ReadWrite(unsafe {
            std::slice::from_raw_parts_mut(xs.as_mut_ptr() as *mut u8, len)
        })
    }

    /// A value argument.
    pub fn value<T: IrType>(v: T) -> LaunchArg<'a> {
        // SAFETY: as in `read`.
        let bytes = unsafe {
            std::slice::from_raw_parts(&v as *const T as *const u8, std::mem::size_of::<T>())
        };
        LaunchArg::Value(bytes.to_vec())
    }

    /// The host bytes a launch writes its results into: a `ReadWrite` slice as it is, a
    /// `Write` slice after filling it with zeros (so it is initialized); `None` for the others.
    pub fn host_output(&mut self) -> Option<&mut [u8]> {
        match self {
            LaunchArg::ReadWrite(b) => Some(b),
            LaunchArg::Write(b) => {
                for x in b.iter_mut() {
                    x.write(0);
                }
                // SAFETY: every byte was just initialized.
                Some(unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut u8, b.len()) })
            }
            _ => None,
        }
    }

    /// Length in bytes.
    pub fn byte_len(&self) -> usize {
        match self {
            LaunchArg::Device(m) => m.byte_len(),
            LaunchArg::Read(b) => b.len(),
            LaunchArg::ReadWrite(b) => b.len(),
            LaunchArg::Write(b) => b.len(),
            LaunchArg::Value(b) => b.len(),
        }
    }
}

/// Errors a backend reports. Each names the backend.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    /// The backend's driver or library is not on this machine.
    #[error("backend {backend} is unavailable: {library} could not be loaded ({reason})")]
    Unavailable {
        /// backend
        backend: BackendKind,
        /// the library looked for
        library: String,
        /// why loading failed
        reason: String,
    },
    /// The backend's compiler rejected the kernel.
    #[error("{}", compile_message(.backend, .kernel, .log, .source_text))]
    Compile {
        /// backend
        backend: BackendKind,
        /// kernel name
        kernel: String,
        /// the compiler's log
        log: String,
        /// the generated source (or IR listing) that was compiled
        source_text: String,
    },
    /// The driver could not load a compiled kernel (a module load failing for lack of memory,
    /// say). Unlike a compile error it is not remembered: the next use tries again.
    #[error("backend {backend} could not load kernel `{kernel}`: {reason}")]
    Load {
        /// backend
        backend: BackendKind,
        /// kernel name
        kernel: String,
        /// the driver's error
        reason: String,
    },
    /// The kernel uses something the device cannot do.
    #[error("backend {backend} does not support {feature}")]
    Unsupported {
        /// backend
        backend: BackendKind,
        /// the missing feature
        feature: String,
    },
    /// The launch does not fit the kernel or the device.
    #[error("backend {backend}: invalid launch of `{kernel}`: {reason}")]
    InvalidLaunch {
        /// backend
        backend: BackendKind,
        /// kernel name
        kernel: String,
        /// what is wrong
        reason: String,
    },
    /// The backend has no device at that index.
    #[error("backend {backend} has no device {index}: it found {count}")]
    NoSuchDevice {
        /// backend
        backend: BackendKind,
        /// the index asked for
        index: u32,
        /// how many devices the backend found
        count: u32,
    },
    /// An allocation larger than the device allows.
    #[error("backend {backend}: cannot allocate {bytes} bytes: {reason}")]
    OutOfMemory {
        /// backend
        backend: BackendKind,
        /// requested size
        bytes: u64,
        /// why
        reason: String,
    },
}

/// A kernel compiled for one device.
pub trait CompiledKernel: Send + Sync {
    /// Runs the kernel over `grid`. Host arguments are up to date when it returns; launches
    /// that only touch device memory may still be running (see [`Backend::synchronize`]).
    /// Fails with
    /// [`BackendError::InvalidLaunch`] when the arguments do not match the parameters.
    fn launch(&self, grid: &Grid, args: &mut [LaunchArg<'_>]) -> Result<(), BackendError>;

    /// The kernel as `Any`, so that its backend's [`DeviceQueue`] finds its own type in it.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A kernel made ready to compile by [`Backend::prepare`]: its source, written once and read
/// by the log, the disk cache and the compiler.
pub struct Prepared {
    /// The generated source as text: what `KILN_LOG=kernels` prints and what the disk cache's
    /// key holds. `None` where the backend compiles the IR itself (the CPU backend), which
    /// has no source to log and no binary to cache. Backends read only `written`, so a caller
    /// may take the text.
    pub text: Option<String>,
    /// The writer's whole output (source, entry point, what the kernel needs), which only the
    /// backend that prepared it reads back ([`Prepared::written`]).
    pub written: Box<dyn std::any::Any + Send + Sync>,
}

impl Prepared {
    /// The writer's output as the type `backend` wrote. Fails with `Unsupported` when the
    /// kernel was prepared by another backend.
    pub fn written<T: 'static>(&self, backend: BackendKind) -> Result<&T, BackendError> {
        self.written
            .downcast_ref()
            .ok_or_else(|| BackendError::Unsupported {
                backend,
                feature: "a kernel prepared by another backend".into(),
            })
    }

    /// The writer's output as the type `backend` wrote, by value; fails as
    /// [`Prepared::written`].
    pub fn into_written<T: 'static>(self, backend: BackendKind) -> Result<T, BackendError> {
        self.written
            .downcast()
            .map(|b| *b)
            .map_err(|_| BackendError::Unsupported {
                backend,
                feature: "a kernel prepared by another backend".into(),
            })
    }
}

/// Validates `kernel` for `backend`: what validation found, or `Compile` with the
/// validator's message as the log and the printed IR as the source.
fn validate_on(backend: BackendKind, kernel: &Kernel) -> Result<KernelInfo, BackendError> {
    kiln_ir::validate(kernel).map_err(|e| BackendError::Compile {
        backend,
        kernel: kernel.name.clone(),
        log: e.to_string(),
        source_text: kiln_ir::print_kernel(kernel),
    })
}

/// A device that compiles and runs kiln kernels.
pub trait Backend: Send + Sync {
    /// The device's description.
    fn info(&self) -> &DeviceInfo;

    /// Writes the source this backend compiles for `kernel` on this device, using what its
    /// validation found (`info`, from [`kiln_ir::validate`]) instead of working it out again.
    /// Fails with `Unsupported` when the writer cannot express the kernel or the device lacks
    /// a feature it needs.
    fn prepare(&self, kernel: &Kernel, info: &KernelInfo) -> Result<Prepared, BackendError>;

    /// Compiles a kernel [`Backend::prepare`] prepared, and returns with it a binary that
    /// [`Backend::load_binary`] turns back into the same kernel, when the backend has one.
    /// Fails with [`BackendError::Compile`] (log and source) or
    /// [`BackendError::Unsupported`] (a feature the device lacks).
    #[allow(clippy::type_complexity)]
    fn compile_prepared(
        &self,
        kernel: &Kernel,
        prepared: Prepared,
    ) -> Result<(Arc<dyn CompiledKernel>, Option<Vec<u8>>), BackendError>;

    /// Validates, prepares and compiles a kernel. Fails with `Compile` for invalid IR (the
    /// validator's message as the log, the printed IR as the source), and as
    /// [`Backend::prepare`] and [`Backend::compile_prepared`] do.
    fn compile(&self, kernel: &Kernel) -> Result<Arc<dyn CompiledKernel>, BackendError> {
        let info = validate_on(self.info().backend, kernel)?;
        Ok(self
            .compile_prepared(kernel, self.prepare(kernel, &info)?)?
            .0)
    }

    /// A string that changes when the compiler, driver or build options change (part of cache
    /// keys).
    fn compiler_version(&self) -> String;

    /// The source this backend compiles for `kernel` on this device (the IR listing for the
    /// CPU backend). Fails like [`Backend::compile`]'s validation and [`Backend::prepare`].
    fn generated_source(&self, kernel: &Kernel) -> Result<String, BackendError> {
        let info = validate_on(self.info().backend, kernel)?;
        Ok(self
            .prepare(kernel, &info)?
            .text
            .unwrap_or_else(|| kiln_ir::print_kernel(kernel)))
    }

    /// Allocates `bytes` of device memory. Its contents are unspecified until written (kiln
    /// fills every allocation whole, by an upload, a copy or a kernel, before anything reads
    /// it), so no backend spends a pass zeroing it. Fails with `OutOfMemory`.
    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceMemory>, BackendError>;

    /// `bytes` of host memory that this backend's uploads and downloads reach directly, so a
    /// copy from or into it skips a staging copy: page-locked memory on CUDA. Its contents
    /// are unspecified. `Ok(None)` where copies are no faster from such memory (every other
    /// backend), so the caller uses ordinary memory. Fails with `OutOfMemory` when the
    /// driver refuses.
    fn alloc_pinned(&self, bytes: usize) -> Result<Option<Box<dyn PinnedMemory>>, BackendError> {
        let _ = bytes;
        Ok(None)
    }

    /// Copies `data` into the start of `mem` (waiting for earlier launches). Fails when `mem`
    /// is not this backend's or is too small.
    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError>;

    /// Copies the start of `mem` into `out` after earlier launches finish. Fails when `mem`
    /// is not this backend's or is too small.
    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError>;

    /// Waits until every launch so far has finished.
    fn synchronize(&self) -> Result<(), BackendError>;

    /// A device queue of its own for a stream ([`DeviceQueue`]), whose work runs beside the
    /// backend's other work. `Ok(None)` where the backend has one queue (wgpu) or runs work
    /// on the host (the CPU backend), so streams put their work on the backend itself. Fails
    /// with `Unavailable` when the driver cannot make one.
    fn queue(&self) -> Result<Option<Box<dyn DeviceQueue>>, BackendError> {
        Ok(None)
    }

    /// Copies the first `bytes` of `src` into `dst` on the device, after earlier launches and
    /// before later ones (it may return before the copy is done). `src` and `dst` may be views
    /// ([`Backend::view`]) of one allocation when they are the same range or do not overlap.
    /// Fails when either memory is not this backend's or holds fewer than `bytes`
    /// ([`check_copy`]).
    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError>;

    /// A view of the `bytes` bytes of `mem` that start `offset` bytes in: memory of its own to
    /// launches, uploads, downloads, copies and further views, whose writes land in `mem`, and
    /// which keeps `mem`'s allocation alive. No bytes move when it is made; a backend that
    /// cannot bind memory at that offset (an OpenCL sub-buffer or a wgpu binding off the
    /// device's alignment) copies the range to aligned memory around each launch that uses
    /// it, and back when the kernel may write it. Fails with `InvalidLaunch` when the range
    /// does not lie inside `mem` ([`check_view`]) or `mem` is another backend's
    /// ([`view_region`] does both for backends whose memory is a [`Region`]).
    fn view(
        &self,
        mem: &dyn DeviceMemory,
        offset: usize,
        bytes: usize,
    ) -> Result<Arc<dyn DeviceMemory>, BackendError>;

    /// The backend's own handle to `mem` (a region of one of its allocations), for a native
    /// library to use in place. Fails with `InvalidLaunch` when `mem` is another backend's.
    fn native_memory(&self, mem: &dyn DeviceMemory) -> Result<NativeMemory, BackendError>;

    /// The backend's own handles to its device and to the queue all its work outside
    /// streams' own queues ([`Backend::queue`]) goes to.
    fn native_device(&self) -> NativeDevice;

    /// Rebuilds a kernel from a binary made by [`Backend::compile_prepared`] for the same
    /// prepared kernel, device and compiler. Fails with `Unsupported` when the backend has no
    /// binaries, or the driver's error when it rejects the binary.
    fn load_binary(
        &self,
        kernel: &Kernel,
        _prepared: &Prepared,
        _binary: &[u8],
    ) -> Result<Arc<dyn CompiledKernel>, BackendError> {
        Err(BackendError::Unsupported {
            backend: self.info().backend,
            feature: format!("loading compiled binaries (kernel `{}`)", kernel.name),
        })
    }
}

/// Ok when `info`'s device compiles kernels with `options`; `Unsupported` naming the first
/// option it has no way to honour otherwise (fast math without
/// [`Features::fast_math`], a register limit without [`Features::register_limit`]). Launch
/// bounds hold everywhere: [`check_launch`] enforces them. Every backend's
/// [`Backend::prepare`] checks this first.
pub fn check_options(info: &DeviceInfo, options: &CompileOptions) -> Result<(), BackendError> {
    let missing = if options.relaxed_math() && !info.features.fast_math {
        "fast math (`CompileOptions::fast_math`): its compiler has no relaxed floating-point \
         mode, so kernels keep IEEE results"
    } else if options.max_registers.is_some() && !info.features.register_limit {
        "a register limit (`CompileOptions::max_registers`): its compiler takes none"
    } else {
        return Ok(());
    };
    Err(BackendError::Unsupported {
        backend: info.backend,
        feature: missing.into(),
    })
}

/// Ok when `offset + bytes` lies inside `mem`; `InvalidLaunch` naming `backend` otherwise.
/// Every backend's [`Backend::view`] checks this first.
pub fn check_view(
    backend: BackendKind,
    mem: &dyn DeviceMemory,
    offset: usize,
    bytes: usize,
) -> Result<(), BackendError> {
    match offset.checked_add(bytes) {
        Some(end) if end <= mem.byte_len() => Ok(()),
        _ => Err(BackendError::InvalidLaunch {
            backend,
            kernel: String::new(),
            reason: format!(
                "a view of {bytes} bytes at byte {offset} of device memory of {} bytes",
                mem.byte_len()
            ),
        }),
    }
}

/// Ok when `src` and `dst` both hold at least `bytes`; `InvalidLaunch` naming `backend`
/// otherwise. Every backend's [`Backend::copy`] checks this first.
pub fn check_copy(
    backend: BackendKind,
    src: &dyn DeviceMemory,
    dst: &dyn DeviceMemory,
    bytes: usize,
) -> Result<(), BackendError> {
    let short = [("source", src), ("destination", dst)]
        .into_iter()
        .find(|(_, m)| m.byte_len() < bytes);
    match short {
        None => Ok(()),
        Some((which, m)) => Err(BackendError::InvalidLaunch {
            backend,
            kernel: String::new(),
            reason: format!(
                "device copy of {bytes} bytes: the {which} holds {} bytes",
                m.byte_len()
            ),
        }),
    }
}

/// Checks launch arguments against a kernel's parameters (count, kinds, access, element size,
/// alignment, 32-bit lengths) and the grid (non-empty groups within `max_group_size` and the
/// kernel's [`CompileOptions::launch_bounds`], sizes of dynamic shared arrays). Returns the element count of each buffer argument (0 for
/// values) and of each shared array, for backends to pass to the kernel.
pub fn check_launch(
    backend: BackendKind,
    kernel: &Kernel,
    grid: &Grid,
    args: &[LaunchArg<'_>],
    max_group_size: u32,
) -> Result<LaunchShape, BackendError> {
    use kiln_ir::{Access, ParamKind, SharedLen};
    let invalid = |reason: String| BackendError::InvalidLaunch {
        backend,
        kernel: kernel.name.clone(),
        reason,
    };
    if args.len() != kernel.params.len() {
        return Err(invalid(format!(
            "{} arguments for {} parameters",
            args.len(),
            kernel.params.len()
        )));
    }
    let mut lengths = Vec::with_capacity(args.len());
    for (i, (p, a)) in kernel.params.iter().zip(args).enumerate() {
        let count = match (&p.kind, a) {
            (ParamKind::Buffer { elem, access }, arg) => {
                let (ptr, bytes) = match (access, arg) {
                    (_, LaunchArg::Device(m)) => (0, m.byte_len()),
                    (Access::Read, LaunchArg::Read(b)) => (b.as_ptr() as usize, b.len()),
                    (_, LaunchArg::ReadWrite(b)) => (b.as_ptr() as usize, b.len()),
                    (Access::Write, LaunchArg::Write(b)) => (b.as_ptr() as usize, b.len()),
                    (acc, _) => {
                        return Err(invalid(format!(
                            "argument {i} (`{}`) must be a {acc:?} buffer",
                            p.name
                        )))
                    }
                };
                let size = elem.size() as usize;
                if bytes % size != 0 {
                    return Err(invalid(format!(
                        "buffer `{}`: {bytes} bytes is not a whole number of {size}-byte elements",
                        p.name
                    )));
                }
                if ptr % elem.align() as usize != 0 {
                    return Err(invalid(format!(
                        "buffer `{}` is not aligned to {} bytes",
                        p.name,
                        elem.align()
                    )));
                }
                let count = (bytes / size) as u64;
                if count > u32::MAX as u64 {
                    return Err(invalid(format!(
                        "buffer `{}` has more than u32::MAX elements",
                        p.name
                    )));
                }
                count
            }
            (ParamKind::Value(t), LaunchArg::Value(bytes)) => {
                if bytes.len() != t.size() as usize {
                    return Err(invalid(format!(
                        "value `{}` needs {} bytes, got {}",
                        p.name,
                        t.size(),
                        bytes.len()
                    )));
                }
                0
            }
            (ParamKind::Value(_), _) => {
                return Err(invalid(format!(
                    "argument {i} (`{}`) must be a value",
                    p.name
                )))
            }
        };
        lengths.push(count);
    }
    let items: u64 = grid.group_size.iter().map(|&g| g as u64).product();
    if items == 0 || items > max_group_size as u64 {
        return Err(invalid(format!(
            "group size {:?} must have between 1 and {max_group_size} work items",
            grid.group_size
        )));
    }
    if let Some(bound) = kernel.options.launch_bounds.filter(|&b| items > b as u64) {
        return Err(invalid(format!(
            "group size {:?} has {items} work items, more than the kernel's launch bounds \
             ({bound})",
            grid.group_size
        )));
    }
    if grid
        .groups
        .iter()
        .zip(&grid.group_size)
        .any(|(&g, &s)| g as u64 * s as u64 > u32::MAX as u64)
    {
        return Err(invalid(
            "grid has more than u32::MAX work items along an axis".into(),
        ));
    }
    let mut dynamic = grid.dynamic_shared.iter();
    let mut shared = Vec::new();
    for s in &kernel.shared {
        shared.push(match s.len {
            SharedLen::Static(n) => n,
            SharedLen::Dynamic => *dynamic.next().ok_or_else(|| {
                invalid(format!(
                    "no size given for dynamic shared array `{}`",
                    s.name
                ))
            })?,
        });
    }
    Ok(LaunchShape {
        buffer_lengths: lengths,
        shared_lengths: shared,
        groups: grid.groups.iter().map(|&g| g as u64).product(),
        items_per_group: items,
    })
}

/// What [`check_launch`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Element count of each buffer argument (0 for value arguments).
    pub buffer_lengths: Vec<u64>,
    /// Element count of each shared array, in declaration order.
    pub shared_lengths: Vec<u32>,
    /// Total number of groups.
    pub groups: u64,
    /// Work items per group.
    pub items_per_group: u64,
}

impl LaunchShape {
    /// Bytes of shared memory one group uses, at each element's C size: all shared arrays,
    /// and the dynamic ones alone (what a launch allocates for them).
    pub fn shared_bytes(&self, kernel: &Kernel) -> (u64, u64) {
        let (mut all, mut dynamic) = (0u64, 0u64);
        for (s, &n) in kernel.shared.iter().zip(&self.shared_lengths) {
            let bytes = n as u64 * s.elem.size() as u64;
            all += bytes;
            if s.len == kiln_ir::SharedLen::Dynamic {
                dynamic += bytes;
            }
        }
        (all, dynamic)
    }
}

/// Asks the operating system to back the not-yet-touched memory at `ptr` (`len` bytes) with
/// huge pages where it can, so filling a large new allocation faults once per 2 MiB instead of
/// once per 4 KiB page. Only whole 2 MiB pages inside the range are affected; on systems
/// without transparent huge pages, and outside Linux, it does nothing. A refusal is not an
/// error: the memory then stays on ordinary pages.
pub fn advise_huge_pages(ptr: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = (ptr as usize).div_ceil(HUGE) * HUGE;
        let end = (ptr as usize + len) / HUGE * HUGE;
        if end > start {
            // SAFETY: advice only, on whole pages inside an allocation the caller owns; it
            // never changes the memory's contents or validity.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// `OutOfMemory` when one buffer of `bytes` is more than `info`'s device allows; `limit` says
/// which limit that is, for the message ("per buffer", ...).
pub fn check_buffer_bytes(info: &DeviceInfo, bytes: u64, limit: &str) -> Result<(), BackendError> {
    if bytes > info.max_buffer_bytes {
        return Err(BackendError::OutOfMemory {
            backend: info.backend,
            bytes,
            reason: format!(
                "{} allows {} bytes {limit}",
                info.name, info.max_buffer_bytes
            ),
        });
    }
    Ok(())
}

/// `OutOfMemory` when a group needs `bytes` of shared memory and `info`'s device has fewer;
/// `counted` says how the backend counted them, for the message.
pub fn check_shared_bytes(
    info: &DeviceInfo,
    bytes: u64,
    counted: &str,
) -> Result<(), BackendError> {
    if bytes > info.max_shared_bytes {
        return Err(BackendError::OutOfMemory {
            backend: info.backend,
            bytes,
            reason: format!(
                "{} has {} bytes of shared memory per group ({counted})",
                info.name, info.max_shared_bytes
            ),
        });
    }
    Ok(())
}

/// What a [`BackendError::Compile`] displays: the compiler's log first, then the lines of the
/// generated source the log points at (by `wgsl:LINE:COL`, `<source>:LINE:COL` or
/// `KERNEL(LINE)`), then how long the whole source is; the source itself stays in the error's
/// `source_text`, so the message that matters is not buried under it.
fn compile_message(backend: &BackendKind, kernel: &str, log: &str, source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = format!(
        "backend {backend} failed to compile kernel `{kernel}`:\n{}\n",
        log.trim_end()
    );
    let mut shown = Vec::new();
    for at in lines_named(log, kernel) {
        if at == 0 || at > lines.len() || shown.contains(&at) || shown.len() == 4 {
            continue;
        }
        shown.push(at);
        out += &format!("--- generated source, line {at} ---\n");
        for l in at.saturating_sub(2).max(1)..=(at + 1).min(lines.len()) {
            let mark = if l == at { ">" } else { " " };
            out += &format!("{mark}{l:5} | {}\n", lines[l - 1]);
        }
    }
    out + &format!(
        "(the generated source, {} lines, is the error's `source_text`; KILN_LOG=kernels prints every source as it is compiled)",
        lines.len()
    )
}

/// The generated-source line numbers a compiler log names, in order: after `wgsl:` (naga),
/// `<source>:` (clang-based OpenCL compilers) or `KERNEL(` (NVRTC, which names the program
/// after the kernel). Lines of a Rust file (`#line` directives) are not the generated source's
/// and are skipped.
fn lines_named(log: &str, kernel: &str) -> Vec<usize> {
    let nvrtc = format!("{kernel}(");
    let mut found = Vec::new();
    for marker in ["wgsl:", "<source>:", nvrtc.as_str()] {
        for (i, _) in log.match_indices(marker) {
            let digits: String = log[i + marker.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse() {
                found.push(n);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_page_advice_keeps_the_memory_and_its_contents() {
        let mut v: Vec<u64> = (0..3 << 20).map(|i| i * 7 + 1).collect();
        let bytes = v.len() * 8;
        advise_huge_pages(v.as_mut_ptr() as *mut u8, bytes);
        advise_huge_pages(v.as_mut_ptr() as *mut u8, 100);
        // SAFETY: 3 bytes into the vector's own allocation.
        let unaligned = unsafe { (v.as_mut_ptr() as *mut u8).add(3) };
        advise_huge_pages(unaligned, bytes - 3);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 7 + 1));
        v.iter_mut().for_each(|x| *x += 1);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64 * 7 + 2));
    }

    #[test]
    fn a_compile_error_shows_the_log_and_the_lines_it_names_before_anything_else() {
        let source: String = (1..=200)
            .map(|l| format!("line {l} of the source\n"))
            .collect();
        let e = BackendError::Compile {
            backend: BackendKind::Wgpu,
            kernel: "k".into(),
            log: "parsing error: unknown identifier\n   ┌─ wgsl:120:10".into(),
            source_text: source.clone(),
        };
        let shown = e.to_string();
        assert!(
            shown.starts_with("backend wgpu failed to compile kernel `k`:\nparsing error"),
            "{shown}"
        );
        assert!(shown.contains(">  120 | line 120 of the source"), "{shown}");
        assert!(
            shown.contains("   119 | line 119") && shown.contains("   121 | line 121"),
            "{shown}"
        );
        assert!(
            !shown.contains("line 1 of") && !shown.contains("line 200 of"),
            "{shown}"
        );
        assert!(
            shown.contains("200 lines, is the error's `source_text`"),
            "{shown}"
        );
        // NVRTC names the program (the kernel) and the line; clang-based OpenCL `<source>`.
        let e = BackendError::Compile {
            backend: BackendKind::Cuda,
            kernel: "k".into(),
            log: "k(7): error: identifier \"x\" is undefined\n<source>:9:3: error: y".into(),
            source_text: source,
        };
        let shown = e.to_string();
        assert!(
            shown.contains(">    7 | line 7 of") && shown.contains(">    9 | line 9 of"),
            "{shown}"
        );
        // A line past the source's end (a Rust line of a `#line` directive) shows nothing.
        let e = BackendError::Compile {
            backend: BackendKind::OpenCl,
            kernel: "k".into(),
            log: "<source>:999:1: error".into(),
            source_text: "one line".into(),
        };
        assert!(!e.to_string().contains("--- generated source, line"), "{e}");
    }
}
