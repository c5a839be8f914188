//! The backends' own handles to their memory and queues, for native libraries that work on
//! kiln's memory in place ([`crate::Backend::native_memory`], [`crate::Backend::native_device`]).

use std::any::Any;
use std::ffi::c_void;

/// One backend's own handle to a range of its device memory. The bytes there are those a
/// download gives (the element type's host layout), and the handle is valid while the memory
/// it came from is alive; using it is the caller's responsibility (see kiln's
/// `BufferSlice::native`).
#[non_exhaustive]
pub enum NativeMemory {
    /// The CPU backend's memory is host memory: the address of the first byte.
    Host {
        /// The first byte.
        ptr: *mut u8,
        /// How many bytes the range holds.
        bytes: usize,
    },
    /// A CUDA device address (`CUdeviceptr`) of the first byte, in the backend's context.
    Cuda {
        /// The first byte's device address.
        ptr: u64,
        /// How many bytes the range holds.
        bytes: usize,
    },
    /// An OpenCL buffer (`cl_mem`) and where the range starts in it.
    OpenCl {
        /// The buffer, of the backend's context.
        mem: *mut c_void,
        /// The range's first byte in the buffer.
        offset: usize,
        /// How many bytes the range holds.
        bytes: usize,
    },
    /// A wgpu buffer (a `wgpu::Buffer`, to take back with `downcast_ref`) and where the
    /// range starts in it.
    Wgpu {
        /// The buffer, of the backend's device.
        buffer: Box<dyn Any + Send + Sync>,
        /// The range's first byte in the buffer.
        offset: u64,
        /// How many bytes the range holds (the buffer may hold more).
        bytes: u64,
    },
}

/// One backend's own handles to its device and to the queue it puts all its work on, in
/// order: native work queued there runs after kiln's work queued before it, and before
/// kiln's work queued after it.
#[non_exhaustive]
pub enum NativeDevice {
    /// The CPU backend: a launch, copy or upload has finished when its call returns.
    Host,
    /// The CUDA context (`CUcontext`) and the stream (`CUstream`) of every launch and copy.
    Cuda {
        /// The context, the device's primary context.
        context: *mut c_void,
        /// The stream.
        stream: *mut c_void,
    },
    /// The OpenCL context (`cl_context`), device (`cl_device_id`) and in-order command queue
    /// (`cl_command_queue`).
    OpenCl {
        /// The context.
        context: *mut c_void,
        /// The device.
        device: *mut c_void,
        /// The command queue.
        queue: *mut c_void,
    },
    /// The wgpu device and queue (a `wgpu::Device` and a `wgpu::Queue`, to take back with
    /// `downcast_ref`).
    Wgpu {
        /// The device.
        device: Box<dyn Any + Send + Sync>,
        /// The queue every submission goes to.
        queue: Box<dyn Any + Send + Sync>,
    },
}

impl std::fmt::Debug for NativeMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NativeMemory::Host { ptr, bytes } => write!(f, "Host({ptr:?}, {bytes} bytes)"),
            NativeMemory::Cuda { ptr, bytes } => write!(f, "Cuda({ptr:#x}, {bytes} bytes)"),
            NativeMemory::OpenCl { mem, offset, bytes } => {
                write!(f, "OpenCl({mem:?} + {offset}, {bytes} bytes)")
            }
            NativeMemory::Wgpu { offset, bytes, .. } => {
                write!(f, "Wgpu(buffer + {offset}, {bytes} bytes)")
            }
        }
    }
}

impl std::fmt::Debug for NativeDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NativeDevice::Host => f.write_str("Host"),
            NativeDevice::Cuda { context, stream } => {
                write!(f, "Cuda(context {context:?}, stream {stream:?})")
            }
            NativeDevice::OpenCl {
                context,
                device,
                queue,
            } => write!(
                f,
                "OpenCl(context {context:?}, device {device:?}, queue {queue:?})"
            ),
            NativeDevice::Wgpu { .. } => f.write_str("Wgpu(device, queue)"),
        }
    }
}
