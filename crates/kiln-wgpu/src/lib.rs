//! # kiln-wgpu: the wgpu backend
//!
//! Writes WGSL with [`kiln_wgsl`] and runs it as a wgpu compute pipeline on the best adapter
//! present (a discrete GPU, else an integrated one, else any, including CPU adapters such as
//! Mesa's lavapipe), GL adapters last among those of a kind; each device's name ends with its
//! API, `"(Vulkan)"` or `"(GL)"`. Drivers are loaded at run time: on a machine without Vulkan,
//! Metal, DX12 or GL (EGL), [`WgpuBackend::new`] returns `BackendError::Unavailable`.
//! SHADER_F64 and SHADER_INT64 are requested when the adapter has them (wgpu's GL has
//! neither); a kernel needing one the adapter lacks is `BackendError::Unsupported` before
//! anything is compiled. When the adapter has
//! SUBGROUP and SUBGROUP_BARRIER both are requested and kernels use real subgroups (the
//! adapter's size, e.g. 32 on NVIDIA, 8 on lavapipe); otherwise subgroups have one lane.
//!
//! Pipelines are created per group size and dynamic shared sizes (they are override
//! constants) and kept with the compiled kernel. wgpu validation errors are caught in error
//! scopes and returned as typed errors; the device's uncaptured-error handler only records
//! them, so nothing panics.
//!
//! Mesa's llvmpipe (lavapipe) runs a subgroup of work items as one SIMD batch and stops all
//! the batch's loops once they have run 65535 passes together (work items on different loops
//! add up); the work items go on with wrong values. On GL, which has no subgroups in wgpu,
//! each work item counts its own passes against 65535 over the batch's lanes (8191). On such an adapter
//! ([`DeviceInfo::max_loop_iterations`]) every shader counts its subgroups' loop passes
//! ([`kiln_wgsl::LoopBudget`], with subgroup operations whether or not kernels' own subgroup
//! operations use them) and the next wait for the device (reading results back,
//! `synchronize`) fails with `BackendError::Unsupported`, naming the kernel, instead of
//! handing wrong results on. Loops with a few constant passes that llvmpipe unrolls are
//! counted too, so a kernel near the limit can fail although llvmpipe would have run it.

#![deny(missing_docs)]
use kiln_backend::*;
use kiln_ir::{Access, Kernel, KernelInfo, ParamKind, SharedLen};
use kiln_wgsl::{ParamSlot, Shader, FAULT_TAG_OVERRIDE, GROUP_SIZE_OVERRIDES};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
/// The wgpu this backend runs on, whose `Buffer`, `Device` and `Queue` its native handles
/// ([`NativeMemory::Wgpu`], [`NativeDevice::Wgpu`]) hold.
pub use wgpu;
use wgpu::util::DeviceExt;

mod kernel;
use kernel::{copy_err, ends_at, place, wgpu_memory, WgpuAllocation, WgpuKernel, WgpuMemory};

/// What the backend looks for, named in `BackendError::Unavailable`.
pub const LIBRARY: &str =
    "a Vulkan, Metal, DX12 or GL driver (libvulkan.so.1 or libEGL.so.1 on Linux)";

struct Shared {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: DeviceInfo,
    limits: wgpu::Limits,
    features: wgpu::Features,
    /// Where work items report reaching the adapter's loop limit, on adapters that have one.
    loop_faults: Option<LoopFaults>,
    /// The subgroup size that loop passes are counted per, on adapters with a loop limit,
    /// subgroup operations and one subgroup size.
    loop_subgroup_size: Option<u32>,
}

/// The `kiln_fault` word that shaders on an adapter with a loop limit share, and the kernels
/// whose tags it holds.
struct LoopFaults {
    /// The count of loop passes that is reported.
    budget: u32,
    /// One `u32`: 0, or the tag of a kernel one of whose work items reached the budget.
    buf: wgpu::Buffer,
    /// The names of the kernels compiled here; tag `i + 1` is kernel `i`.
    kernels: Mutex<Vec<String>>,
}

/// The lanes of llvmpipe's SIMD batches, from the vector width in its adapter name
/// ("llvmpipe (LLVM 15.0.6, 256 bits)": 8); 16 when the name does not say.
fn simd_lanes(name: &str) -> u32 {
    name.split([',', '(', ')'])
        .find_map(|part| part.trim().strip_suffix(" bits")?.parse::<u32>().ok())
        .map_or(16, |bits| (bits / 32).max(1))
}

/// The features that give shaders subgroup operations.
const SUBGROUP_FEATURES: wgpu::Features =
    wgpu::Features::SUBGROUP.union(wgpu::Features::SUBGROUP_BARRIER);

/// The loop limit of Mesa's llvmpipe: its work items' loops stop once they have run this many
/// iterations in total (measured on Mesa 22.3 with LLVM 15).
const LLVMPIPE_LOOP_LIMIT: u32 = 65535;

/// Kernels as wgpu compute pipelines on one adapter.
pub struct WgpuBackend {
    shared: Arc<Shared>,
    version: String,
}

fn unavailable(reason: impl std::fmt::Display) -> BackendError {
    BackendError::Unavailable {
        backend: BackendKind::Wgpu,
        library: LIBRARY.into(),
        reason: reason.to_string(),
    }
}

fn rank(t: wgpu::DeviceType) -> u32 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

/// Which optional adapter features the backend may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WgpuOptions {
    /// Request SHADER_F64 when the adapter has it.
    pub f64: bool,
    /// Request SHADER_INT64 when the adapter has it.
    pub int64: bool,
    /// Request SUBGROUP and SUBGROUP_BARRIER when the adapter has both, and write subgroup
    /// operations with them; otherwise subgroups have one lane.
    pub subgroups: bool,
}

impl Default for WgpuOptions {
    /// Everything the adapter offers.
    fn default() -> Self {
        WgpuOptions {
            f64: true,
            int64: true,
            subgroups: true,
        }
    }
}

impl WgpuOptions {
    /// Only what every WebGPU implementation has: kernels that need more are refused with a
    /// typed error, as they would be on the web.
    pub fn portable() -> WgpuOptions {
        WgpuOptions {
            f64: false,
            int64: false,
            subgroups: false,
        }
    }
}

/// The graphics API an adapter runs on, as its users call it: the end of the backend's device
/// name, `"llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)"`.
pub fn api_name(api: wgpu::Backend) -> String {
    match api {
        wgpu::Backend::Vulkan => "Vulkan".to_string(),
        wgpu::Backend::Metal => "Metal".to_string(),
        wgpu::Backend::Dx12 => "DX12".to_string(),
        wgpu::Backend::Gl => "GL".to_string(),
        other => format!("{other:?}"),
    }
}

/// While alive, stderr goes to /dev/null: created by [`WaylandComplaintMuted::when_due`] only
/// when `XDG_RUNTIME_DIR` is set to something that is not an absolute path. Creating a Vulkan
/// instance with the Wayland surface extension then makes libwayland print "error:
/// XDG_RUNTIME_DIR is invalid or not set in the environment." twice (seen with Mesa's
/// lavapipe), and a library must not write to stderr unasked. Other threads' writes to stderr
/// in that moment are lost too, which is why it is only done then.
struct WaylandComplaintMuted {
    #[cfg(unix)]
    saved: libc::c_int,
}

impl WaylandComplaintMuted {
    fn when_due() -> Option<WaylandComplaintMuted> {
        let dir = std::env::var_os("XDG_RUNTIME_DIR")?;
        if std::path::Path::new(&dir).is_absolute() {
            return None;
        }
        Self::mute()
    }

    #[cfg(unix)]
    fn mute() -> Option<WaylandComplaintMuted> {
        // SAFETY: plain file-descriptor calls; `saved` is restored and closed in `drop`.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if null < 0 {
                return None;
            }
            let saved = libc::dup(2);
            if saved < 0 || libc::dup2(null, 2) < 0 {
                libc::close(null);
                if saved >= 0 {
                    libc::close(saved);
                }
                return None;
            }
            libc::close(null);
            Some(WaylandComplaintMuted { saved })
        }
    }

    #[cfg(not(unix))]
    fn mute() -> Option<WaylandComplaintMuted> {
        None
    }
}

#[cfg(unix)]
impl Drop for WaylandComplaintMuted {
    fn drop(&mut self) {
        // SAFETY: `saved` is the duplicate of the original stderr made in `mute`.
        unsafe {
            libc::dup2(self.saved, 2);
            libc::close(self.saved);
        }
    }
}

/// Every adapter wgpu finds, best first: discrete GPUs, then integrated, virtual and CPU
/// adapters, each kind in wgpu's order with GL adapters last.
fn adapters() -> Vec<wgpu::Adapter> {
    let mut adapters = {
        let _quiet = WaylandComplaintMuted::when_due();
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
    };
    // GL (no f64, no 64-bit integers, no subgroups in wgpu) after the other APIs of a kind.
    adapters.sort_by_key(|a| {
        let info = a.get_info();
        (rank(info.device_type), info.backend == wgpu::Backend::Gl)
    });
    adapters
}

impl WgpuBackend {
    /// Opens the best adapter wgpu finds (`WGPU_BACKEND` restricts which APIs it tries) with
    /// every optional feature it offers: adapter 0 of [`WgpuBackend::open`]. Fails like `open`.
    pub fn new() -> Result<WgpuBackend, BackendError> {
        WgpuBackend::open(0, WgpuOptions::default())
    }

    /// Opens the best adapter, requesting only the optional features `options` allows.
    /// Fails like [`WgpuBackend::open`].
    pub fn with_options(options: WgpuOptions) -> Result<WgpuBackend, BackendError> {
        WgpuBackend::open(0, options)
    }

    /// How many adapters wgpu finds (`WGPU_BACKEND` restricts which APIs it tries).
    pub fn device_count() -> u32 {
        adapters().len() as u32
    }

    /// Opens adapter `index`, counting discrete GPUs first, then integrated, virtual and CPU
    /// adapters, and requests only the optional features `options` allows. Fails with
    /// `Unavailable` when there is no adapter or its device cannot be created, and with
    /// `NoSuchDevice` when there are adapters but not that many.
    pub fn open(index: u32, options: WgpuOptions) -> Result<WgpuBackend, BackendError> {
        let adapters = adapters();
        if adapters.is_empty() {
            return Err(unavailable("no adapter found"));
        }
        let count = adapters.len() as u32;
        let adapter =
            adapters
                .into_iter()
                .nth(index as usize)
                .ok_or(BackendError::NoSuchDevice {
                    backend: BackendKind::Wgpu,
                    index,
                    count,
                })?;
        let a = adapter.get_info();
        let mut wanted = wgpu::Features::empty();
        if options.f64 {
            wanted |= wgpu::Features::SHADER_F64;
        }
        if options.int64 {
            wanted |= wgpu::Features::SHADER_INT64;
        }
        // An adapter with a loop limit counts its loop passes per subgroup, with subgroup
        // operations, whether or not kernels' own subgroup operations use them.
        let llvmpipe = a.name.contains("llvmpipe");
        if (options.subgroups || llvmpipe) && adapter.features().contains(SUBGROUP_FEATURES) {
            wanted |= SUBGROUP_FEATURES;
        }
        let features = adapter.features() & wanted;
        let subgroups = options.subgroups && features.contains(SUBGROUP_FEATURES);
        let loop_subgroup_size = (llvmpipe
            && features.contains(SUBGROUP_FEATURES)
            && a.subgroup_min_size == a.subgroup_max_size)
            .then_some(a.subgroup_max_size);
        // Counting each work item's own passes instead, a work item gets the limit over the
        // lanes of its SIMD batch, whose other work items may be on other loops.
        let loop_limit = llvmpipe.then(|| match loop_subgroup_size {
            Some(_) => LLVMPIPE_LOOP_LIMIT,
            None => LLVMPIPE_LOOP_LIMIT / simd_lanes(&a.name),
        });
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("kiln"),
            required_features: features,
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| unavailable(format!("creating a device on {}: {e}", a.name)))?;
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| {
            tracing::warn!("uncaptured wgpu error: {e}");
        }));
        let info = DeviceInfo {
            backend: BackendKind::Wgpu,
            // The same device may be listed once per graphics API (llvmpipe on Vulkan and GL).
            name: format!("{} ({})", a.name, api_name(a.backend)),
            index,
            class: if a.device_type == wgpu::DeviceType::Cpu {
                DeviceClass::Cpu
            } else {
                DeviceClass::Gpu
            },
            memory_bytes: 0,
            compute_units: 0,
            max_group_size: limits.max_compute_invocations_per_workgroup,
            subgroup_size: if subgroups {
                a.subgroup_max_size.max(1)
            } else {
                1
            },
            // Less the loop counts of an adapter with a loop limit.
            max_shared_bytes: (limits.max_compute_workgroup_storage_size as u64).saturating_sub(
                if loop_subgroup_size.is_some() {
                    4 * kiln_wgsl::LOOP_COUNT_SUBGROUPS as u64
                } else {
                    0
                },
            ),
            max_buffer_bytes: limits
                .max_storage_buffer_binding_size
                .min(limits.max_buffer_size),
            indexed_private_arrays: a.device_type != wgpu::DeviceType::Cpu,
            fits_groups_to_work: false,
            host_memory: false,
            max_loop_iterations: loop_limit,
            features: Features {
                f64: features.contains(wgpu::Features::SHADER_F64),
                int64: features.contains(wgpu::Features::SHADER_INT64),
                subgroups,
                atomics64: false,
                fast_math: false,
                register_limit: false,
            },
            unusable: None,
        };
        let version = format!(
            "wgpu 30 / {:?} / {} {} / {} / subgroups {}",
            a.backend,
            a.driver,
            a.driver_info,
            a.name,
            if subgroups { "on" } else { "off" }
        );
        let loop_faults = info.max_loop_iterations.map(|budget| {
            let buf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("kiln_fault"),
                contents: &[0u8; 16],
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
            });
            LoopFaults {
                budget,
                buf,
                kernels: Mutex::new(Vec::new()),
            }
        });
        Ok(WgpuBackend {
            shared: Arc::new(Shared {
                device,
                queue,
                info,
                limits,
                features,
                loop_faults,
                loop_subgroup_size,
            }),
            version,
        })
    }

    /// The WGSL for `kernel` on this adapter (with its subgroups when it has them). Fails with
    /// `Unsupported` when the writer cannot express the kernel.
    fn write(&self, kernel: &Kernel, info: &KernelInfo) -> Result<kiln_wgsl::Shader, BackendError> {
        let options =
            kiln_wgsl::WgslOptions {
                subgroups: self.shared.info.features.subgroups,
                loop_budget: self.shared.info.max_loop_iterations.map(|limit| {
                    kiln_wgsl::LoopBudget {
                        limit,
                        subgroup_size: self.shared.loop_subgroup_size,
                    }
                }),
            };
        kiln_wgsl::write_validated(kernel, info, options).map_err(|e| BackendError::Unsupported {
            backend: BackendKind::Wgpu,
            feature: e.to_string(),
        })
    }
}

/// The size of a device buffer holding `bytes`: whole 8-byte units, at least 16 bytes, so any
/// binding holds at least one element of every type kiln binds.
fn alloc_size(bytes: usize) -> u64 {
    (bytes.max(16) as u64).div_ceil(8) * 8
}

/// A read of device memory: the buffer, a byte offset that is a multiple of 4, and the host
/// bytes it fills.
type Readback<'b> = (&'b wgpu::Buffer, u64, &'b mut [u8]);

/// Bytes rounded up to whole 32-bit words, at least one (wgpu copies whole words).
fn word_len(bytes: usize) -> u64 {
    (bytes.max(4) as u64).div_ceil(4) * 4
}

impl Shared {
    fn create_buffer(&self, bytes: usize) -> Result<wgpu::Buffer, BackendError> {
        check_buffer_bytes(&self.info, bytes as u64, "per storage buffer binding")?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: alloc_size(bytes),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(BackendError::OutOfMemory {
                backend: BackendKind::Wgpu,
                bytes: bytes as u64,
                reason: e.to_string(),
            });
        }
        Ok(buf)
    }

    /// Queues a write of `data` at byte `offset` (a multiple of 4) of `buf`, zero-padded to
    /// whole words.
    fn write(&self, buf: &wgpu::Buffer, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if data.len().is_multiple_of(4) {
            self.queue.write_buffer(buf, offset, data);
        } else {
            let mut words = data.to_vec();
            words.resize(word_len(data.len()) as usize, 0);
            self.queue.write_buffer(buf, offset, &words);
        }
    }

    /// Writes `data` at byte `offset` of `buf`, keeping the other bytes of the words it
    /// touches unless `tail_free` (nothing after `data` is in use), reading them back first
    /// when it must. Fails like [`Shared::read_back`].
    fn write_at(
        &self,
        buf: &wgpu::Buffer,
        offset: u64,
        data: &[u8],
        tail_free: bool,
    ) -> Result<(), BackendError> {
        if data.is_empty() {
            return Ok(());
        }
        if offset.is_multiple_of(4) && (data.len().is_multiple_of(4) || tail_free) {
            self.write(buf, offset, data);
            return Ok(());
        }
        let (start, skip, mut words) = self.words_around(buf, offset, data.len())?;
        words[skip..skip + data.len()].copy_from_slice(data);
        self.queue.write_buffer(buf, start, &words);
        Ok(())
    }

    /// The whole words of `buf` that hold the `len` bytes at byte `offset`, read back (waiting
    /// for the device): the first word's byte offset, where the bytes start in the words, and
    /// the words. Fails like [`Shared::read_back`].
    fn words_around(
        &self,
        buf: &wgpu::Buffer,
        offset: u64,
        len: usize,
    ) -> Result<(u64, usize, Vec<u8>), BackendError> {
        let start = offset & !3;
        let skip = (offset - start) as usize;
        let mut words = vec![0u8; word_len(skip + len) as usize];
        self.read_back(vec![(buf, start, &mut words[..])])?;
        Ok((start, skip, words))
    }

    /// Reads `out.len()` bytes of `buf` from byte `offset`, waiting for the device. Fails
    /// like [`Shared::read_back`].
    fn read_at(&self, buf: &wgpu::Buffer, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        if offset.is_multiple_of(4) {
            return self.read_back(vec![(buf, offset, out)]);
        }
        let (_, skip, words) = self.words_around(buf, offset, out.len())?;
        let n = out.len();
        out.copy_from_slice(&words[skip..skip + n]);
        Ok(())
    }

    /// Copies `bytes` bytes from `(buffer, byte offset)` `from` to `to` (regions that do not
    /// overlap) after earlier commands: on the device when both offsets are whole words and
    /// the copy ends on a word or `tail_free` (nothing after it in `to` is in use), otherwise
    /// through the host. Fails like [`Shared::read_back`].
    fn copy_region(
        &self,
        from: (&wgpu::Buffer, u64),
        to: (&wgpu::Buffer, u64),
        bytes: usize,
        tail_free: bool,
    ) -> Result<(), BackendError> {
        if bytes == 0 {
            return Ok(());
        }
        let words = from.1.is_multiple_of(4) && to.1.is_multiple_of(4);
        if from.0 == to.0 || !words || !(bytes.is_multiple_of(4) || tail_free) {
            let mut data = vec![0u8; bytes];
            self.read_at(from.0, from.1, &mut data)?;
            return self.write_at(to.0, to.1, &data, tail_free);
        }
        // Buffers are allocated in whole 8-byte units, so the copy rounded up to whole words
        // stays inside both.
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        encoder.copy_buffer_to_buffer(from.0, from.1, to.0, to.1, word_len(bytes));
        self.queue.submit([encoder.finish()]);
        Ok(())
    }

    fn wait(&self) -> Result<(), BackendError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| BackendError::InvalidLaunch {
                backend: BackendKind::Wgpu,
                kernel: String::new(),
                reason: format!("waiting for the device: {e}"),
            })
    }

    /// Copies `copies[i].2.len()` bytes of each buffer from its byte offset (a multiple of 4)
    /// to its host slice; on an adapter with a loop limit, fails like [`Shared::loop_fault`]
    /// when a work item reached it, even when every slice is empty (a launch with host
    /// outputs is waited for).
    fn read_back(&self, copies: Vec<Readback<'_>>) -> Result<(), BackendError> {
        if copies.is_empty() {
            return Ok(());
        }
        let mut copies: Vec<_> = copies
            .into_iter()
            .filter(|(_, _, h)| !h.is_empty())
            .collect();
        let mut fault = [0u8; 4];
        if let Some(f) = &self.loop_faults {
            copies.push((&f.buf, 0, &mut fault[..]));
        }
        if copies.is_empty() {
            return Ok(());
        }
        self.copy_back(copies)?;
        self.loop_fault(u32::from_le_bytes(fault))
    }

    /// Copies `copies[i].2.len()` bytes (at least one) of each buffer from its byte offset (a
    /// multiple of 4) to its host slice, waiting for the device.
    fn copy_back(&self, copies: Vec<Readback<'_>>) -> Result<(), BackendError> {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
        let mut staging = Vec::new();
        for (buf, offset, host) in &copies {
            let size = word_len(host.len());
            let s = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln readback"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            encoder.copy_buffer_to_buffer(buf, *offset, &s, 0, size);
            staging.push(s);
        }
        self.queue.submit([encoder.finish()]);
        let results: Arc<Mutex<Vec<Result<(), wgpu::BufferAsyncError>>>> = Arc::default();
        for s in &staging {
            let r = results.clone();
            s.slice(..).map_async(wgpu::MapMode::Read, move |res| {
                r.lock().unwrap_or_else(|p| p.into_inner()).push(res)
            });
        }
        self.wait()?;
        let copy_err = |reason: String| BackendError::InvalidLaunch {
            backend: BackendKind::Wgpu,
            kernel: String::new(),
            reason,
        };
        for r in results.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            r.clone()
                .map_err(|e| copy_err(format!("mapping a read-back buffer: {e}")))?;
        }
        for (s, (_, _, host)) in staging.iter().zip(copies) {
            let view = s
                .get_mapped_range(..)
                .map_err(|e| copy_err(format!("reading a mapped buffer: {e}")))?;
            let n = host.len();
            host.copy_from_slice(&view[..n]);
            drop(view);
            s.unmap();
        }
        Ok(())
    }

    /// `Ok` for a fault word of 0; otherwise clears the word and fails with `Unsupported`,
    /// naming the kernel whose tag it held.
    fn loop_fault(&self, tag: u32) -> Result<(), BackendError> {
        let Some(f) = self.loop_faults.as_ref().filter(|_| tag != 0) else {
            return Ok(());
        };
        self.queue.write_buffer(&f.buf, 0, &[0u8; 4]);
        let kernels = f.kernels.lock().unwrap_or_else(|p| p.into_inner());
        let name = kernels.get(tag as usize - 1).map_or("?", |n| n.as_str());
        Err(BackendError::Unsupported {
            backend: BackendKind::Wgpu,
            feature: format!(
                "more than {} loop iterations in one SIMD batch of work items (kernel \
                 `{name}`) on {}: it stops the loops of a batch once they have run that many \
                 passes together, so the results would be wrong; give each work item fewer \
                 iterations (more work items), keep neighbouring work items on the same \
                 loops, or use another backend",
                f.budget, self.info.name
            ),
        })
    }
}

impl Backend for WgpuBackend {
    fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }

    fn compiler_version(&self) -> String {
        self.version.clone()
    }

    fn prepare(&self, kernel: &Kernel, info: &KernelInfo) -> Result<Prepared, BackendError> {
        check_options(self.info(), &kernel.options)?;
        let shader = self.write(kernel, info)?;
        Ok(Prepared {
            text: Some(shader.text.clone()),
            written: Box::new(shader),
        })
    }

    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        let buf = self.shared.create_buffer(bytes)?;
        Ok(Arc::new(WgpuMemory::whole(
            WgpuAllocation { buf, bytes },
            bytes,
        )))
    }

    fn view(
        &self,
        mem: &dyn DeviceMemory,
        offset: usize,
        bytes: usize,
    ) -> Result<Arc<dyn DeviceMemory>, BackendError> {
        view_region::<WgpuAllocation>(BackendKind::Wgpu, mem, offset, bytes)
    }

    fn native_memory(&self, mem: &dyn DeviceMemory) -> Result<NativeMemory, BackendError> {
        let (buffer, offset) = place(region_of::<WgpuAllocation>(BackendKind::Wgpu, mem)?);
        Ok(NativeMemory::Wgpu {
            buffer: Box::new(buffer.clone()),
            offset,
            bytes: mem.byte_len() as u64,
        })
    }

    fn native_device(&self) -> NativeDevice {
        NativeDevice::Wgpu {
            device: Box::new(self.shared.device.clone()),
            queue: Box::new(self.shared.queue.clone()),
        }
    }

    fn upload(&self, mem: &dyn DeviceMemory, data: &[u8]) -> Result<(), BackendError> {
        let m = wgpu_memory(mem).map_err(copy_err)?;
        if data.len() > m.bytes {
            return Err(copy_err(format!(
                "copy of {} bytes into device memory of {} bytes",
                data.len(),
                m.bytes
            )));
        }
        let (buf, origin) = place(m);
        self.shared
            .write_at(buf, origin, data, ends_at(m, data.len()))
    }

    fn download(&self, mem: &dyn DeviceMemory, out: &mut [u8]) -> Result<(), BackendError> {
        let m = wgpu_memory(mem).map_err(copy_err)?;
        if out.len() > m.bytes {
            return Err(copy_err(format!(
                "copy of {} bytes out of device memory of {} bytes",
                out.len(),
                m.bytes
            )));
        }
        let (buf, origin) = place(m);
        self.shared.read_at(buf, origin, out)
    }

    fn copy(
        &self,
        src: &dyn DeviceMemory,
        dst: &dyn DeviceMemory,
        bytes: usize,
    ) -> Result<(), BackendError> {
        check_copy(BackendKind::Wgpu, src, dst, bytes)?;
        let (s, d) = (
            wgpu_memory(src).map_err(copy_err)?,
            wgpu_memory(dst).map_err(copy_err)?,
        );
        if place(s) == place(d) {
            return Ok(());
        }
        self.shared
            .copy_region(place(s), place(d), bytes, ends_at(d, bytes))
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        match &self.shared.loop_faults {
            // Reading the fault word back waits too, and reports a work item that reached
            // the loop limit.
            Some(f) => {
                let mut fault = [0u8; 4];
                self.shared.copy_back(vec![(&f.buf, 0, &mut fault[..])])?;
                self.shared.loop_fault(u32::from_le_bytes(fault))
            }
            None => self.shared.wait(),
        }
    }

    /// wgpu keeps no binaries: the second value is always `None`.
    fn compile_prepared(
        &self,
        kernel: &Kernel,
        prepared: Prepared,
    ) -> Result<(Arc<dyn CompiledKernel>, Option<Vec<u8>>), BackendError> {
        let shader: Shader = prepared.into_written(BackendKind::Wgpu)?;
        let missing = [
            (
                shader.needs.f64,
                wgpu::Features::SHADER_F64,
                "f64 (SHADER_F64)",
            ),
            (
                shader.needs.int64,
                wgpu::Features::SHADER_INT64,
                "64-bit integers (SHADER_INT64)",
            ),
        ];
        if let Some((_, _, what)) = missing
            .iter()
            .find(|(need, f, _)| *need && !self.shared.features.contains(*f))
        {
            return Err(BackendError::Unsupported {
                backend: BackendKind::Wgpu,
                feature: format!(
                    "{what} on {} (kernel `{}`)",
                    self.shared.info.name, kernel.name
                ),
            });
        }
        let buffers = kernel
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Buffer { .. }))
            .count() as u32;
        // kiln's own: the argument buffer, and the loop fault word where loops are counted.
        let own = 1 + u32::from(shader.fault_binding.is_some());
        if buffers + own > self.shared.limits.max_storage_buffers_per_shader_stage {
            return Err(BackendError::Unsupported {
                backend: BackendKind::Wgpu,
                feature: format!(
                    "{} buffers in one kernel (`{}`): {} binds {} storage buffers per shader, {} of them kiln's own (arguments{})",
                    buffers,
                    kernel.name,
                    self.shared.info.name,
                    self.shared.limits.max_storage_buffers_per_shader_stage,
                    own,
                    if own > 1 { ", loop fault word" } else { "" }
                ),
            });
        }
        let device = &self.shared.device;
        let compile_err = |log: String| BackendError::Compile {
            backend: BackendKind::Wgpu,
            kernel: kernel.name.clone(),
            log,
            source_text: shader.text.clone(),
        };
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(&kernel.name),
            source: wgpu::ShaderSource::Wgsl(shader.text.as_str().into()),
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(compile_err(e.to_string()));
        }
        let storage = |read_only: bool| wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        };
        let mut entries = vec![wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: storage(true),
            count: None,
        }];
        for (p, slot) in kernel.params.iter().zip(&shader.params) {
            if let (ParamKind::Buffer { access, .. }, ParamSlot::Buffer { binding, .. }) =
                (&p.kind, slot)
            {
                entries.push(wgpu::BindGroupLayoutEntry {
                    binding: *binding,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: storage(*access == Access::Read),
                    count: None,
                });
            }
        }
        if let Some(binding) = shader.fault_binding {
            entries.push(wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: storage(false),
                count: None,
            });
        }
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: None,
            entries: &entries,
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: None,
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(compile_err(format!("creating the bind group layout: {e}")));
        }
        let fault_tag = self.shared.loop_faults.as_ref().map(|f| {
            let mut kernels = f.kernels.lock().unwrap_or_else(|p| p.into_inner());
            kernels.push(kernel.name.clone());
            kernels.len() as u32
        });
        let compiled = Arc::new(WgpuKernel {
            kernel: Arc::new(kernel.clone()),
            fault_tag,
            shader,
            module,
            layout,
            pipeline_layout,
            pipelines: Mutex::new(HashMap::new()),
            shared: self.shared.clone(),
        });
        Ok((compiled, None))
    }
}

#[cfg(test)]
mod tests {
    use super::simd_lanes;

    #[test]
    fn simd_lanes_come_from_the_vector_width_in_the_adapter_name() {
        assert_eq!(simd_lanes("llvmpipe (LLVM 15.0.6, 256 bits)"), 8);
        assert_eq!(simd_lanes("llvmpipe (LLVM 19.1.7, 128 bits)"), 4);
        assert_eq!(simd_lanes("llvmpipe (LLVM 20.1.0, 512 bits)"), 16);
        assert_eq!(simd_lanes("llvmpipe"), 16);
    }
}
