//! Generated source for any target, for reading and exporting.

use crate::error::{Error, Result};
use kiln_backend::{BackendError, BackendKind};
use kiln_ir::{print_kernel, Kernel};

/// A language kiln writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// kiln's IR listing (what the CPU backend compiles with Cranelift).
    Ir,
    /// OpenCL C 1.2 (the opencl backend).
    OpenClC,
    /// CUDA C++ for NVRTC (the cuda backend).
    CudaC,
}

impl Target {
    /// The target a backend compiles from.
    pub fn of(backend: BackendKind) -> Target {
        match backend {
            BackendKind::OpenCl => Target::OpenClC,
            BackendKind::Cuda => Target::CudaC,
            BackendKind::Cpu | BackendKind::Wgpu => Target::Ir,
        }
    }
}

/// The source of `kernel` in `target`. Fails with the validation error for invalid IR, or
/// `Unsupported` naming the target when the writer cannot express the kernel.
pub fn emit(kernel: &Kernel, target: Target) -> Result<String> {
    kiln_ir::validate(kernel)?;
    let (dialect, backend) = match target {
        Target::Ir => return Ok(print_kernel(kernel)),
        Target::OpenClC => (kiln_c::Dialect::OpenCl, BackendKind::OpenCl),
        Target::CudaC => (kiln_c::Dialect::Cuda, BackendKind::Cuda),
    };
    kiln_c::write_kernel(kernel, dialect)
        .map(|s| s.text)
        .map_err(|e| {
            Error::Backend(BackendError::Unsupported {
                backend,
                feature: e.to_string(),
            })
        })
}
