//! Launching a compiled OpenCL kernel on the backend's queue or a stream's: binding each
//! argument (a buffer, a sub-buffer, a staged copy of a view, a host argument's copy or the
//! host bytes in place), setting the kernel's arguments, queueing it and what brings its
//! writes back.

use crate::{cl_memory, Lane, Shared};
use kiln_backend::*;
use kiln_c::{ScalarArg, Slot};
use kiln_ir::{Access, Kernel, ParamKind};
use opencl3::command_queue::CommandQueue;
use opencl3::kernel::Kernel as ClKernel;
use opencl3::memory::{Buffer, ClMem, CL_MAP_READ};
use opencl3::program::Program;
use opencl3::types::{cl_mem, CL_BLOCKING, CL_NON_BLOCKING};
use std::sync::{Arc, Mutex};

/// What a launch binds for an argument in device memory.
pub(crate) enum DeviceSide {
    /// The memory's own buffer (a whole allocation, or an empty view).
    Whole(cl_mem),
    /// A sub-buffer for a view at an aligned origin.
    Sub(Buffer<u8>),
    /// A copy (pooled on the backend's queue) of a view's `bytes` bytes at an origin off the alignment, copied back to
    /// `back` (buffer, origin) after the kernel when it may write them.
    Staged {
        buf: Buffer<u8>,
        bytes: usize,
        back: Option<(cl_mem, usize)>,
    },
}

impl DeviceSide {
    pub(crate) fn mem(&self) -> cl_mem {
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

/// A built OpenCL kernel, launched on the backend's queue or a stream's.
pub(crate) struct OpenClKernel {
    pub(crate) kernel: Arc<Kernel>,
    /// What each argument of the compiled kernel takes.
    pub(crate) slots: Vec<Slot>,
    /// Held while its arguments are set and it is queued (the queue takes their values then),
    /// not while it runs, so streams queue it at once.
    pub(crate) cl: Mutex<ClKernel>,
    pub(crate) _program: Program,
    pub(crate) shared: Arc<Shared>,
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
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn launch(&self, grid: &Grid, args: &mut [LaunchArg<'_>]) -> Result<(), BackendError> {
        self.launch_on(Lane::Own, grid, args)
    }
}

impl OpenClKernel {
    /// Launches the kernel on `lane`'s queue. On the backend's own queue a launch on device
    /// memory alone returns once it is queued; one with host arguments, and every launch on a
    /// stream's queue, returns when it has finished. Fails with `InvalidLaunch` for a host
    /// argument on a stream's queue, for arguments that do not match the parameters, or with
    /// the driver's error.
    pub(crate) fn launch_on(
        &self,
        lane: Lane<'_>,
        grid: &Grid,
        args: &mut [LaunchArg<'_>],
    ) -> Result<(), BackendError> {
        let k = &self.kernel;
        let info = &self.shared.info;
        let shape = check_launch(BackendKind::OpenCl, k, grid, args, info.max_group_size)?;
        check_grid(grid, &self.shared.item_sizes).map_err(|e| self.launch_err("grid", e))?;
        check_shared_bytes(info, shape.shared_bytes(k).0, "at C element sizes")?;
        let queue = lane.queue(&self.shared);
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
                        .device_side(lane, mem, *access != Access::Read)
                        .map_err(argument)?;
                    memory.push(Some(side.mem()));
                    sides.push(side);
                    buffers.push(None);
                }
                (ParamKind::Buffer { .. }, _) if matches!(lane, Lane::Stream(_)) => {
                    return Err(self.launch_err(
                        &format!("argument {i}"),
                        "host memory on a stream's queue (streams take device buffers)",
                    ));
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
        let cl = self.cl.lock().unwrap_or_else(|p| p.into_inner());
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
        drop(cl);
        // Once the kernel is queued, a launch with host arguments finishes the queue before it
        // returns, error or not, so that nothing writes or reads the host bytes after it; one
        // on a stream's queue does too, so that its temporaries go to the pool unused.
        let downloads = self
            .copy_back_views(queue, &sides)
            .and_then(|_| self.queue_host_results(queue, args, &buffers));
        let host_outputs = args
            .iter()
            .any(|a| matches!(a, LaunchArg::ReadWrite(_) | LaunchArg::Write(_)));
        let in_place = buffers
            .iter()
            .any(|b| matches!(b, Some(HostBuffer::InPlace { .. })));
        let on_stream = matches!(lane, Lane::Stream(_));
        if downloads.is_err() || host_outputs || in_place || on_stream {
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

    /// Queues the copies of staged views the kernel may have written back to their buffers.
    fn copy_back_views(
        &self,
        queue: &CommandQueue,
        sides: &[DeviceSide],
    ) -> Result<(), BackendError> {
        for side in sides {
            if let DeviceSide::Staged {
                buf,
                bytes,
                back: Some(to),
            } = side
            {
                self.shared
                    .copy_region(queue, (buf.get(), 0), *to, *bytes)
                    .map_err(|e| self.launch_err("copying a view back", e))?;
            }
        }
        Ok(())
    }

    /// Queues what brings the kernel's writes to host arguments back to the host: a read of
    /// each copied one, a map and unmap of each one used in place.
    fn queue_host_results(
        &self,
        queue: &CommandQueue,
        args: &mut [LaunchArg<'_>],
        buffers: &[Option<HostBuffer>],
    ) -> Result<(), BackendError> {
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
