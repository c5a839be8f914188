//! Generated source for any target, for reading and exporting.

use crate::error::{Error, Result};
use kiln_backend::{BackendError, BackendKind};
use kiln_ir::{print_kernel, Kernel};
use kiln_wgsl::{TranslateTarget, Translated};

/// A language kiln writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// kiln's IR listing (what the CPU backend compiles with Cranelift).
    Ir,
    /// OpenCL C 1.2 (the opencl backend).
    OpenClC,
    /// CUDA C++ for NVRTC (the cuda backend).
    CudaC,
    /// WGSL (the wgpu backend).
    Wgsl,
    /// Metal Shading Language, translated from the WGSL by naga.
    Msl,
    /// GLSL 4.30 compute shader, translated from the WGSL by naga.
    Glsl,
    /// HLSL (shader model 6.0), translated from the WGSL by naga.
    Hlsl,
    /// SPIR-V 1.3, translated from the WGSL by naga; as text, one line of hexadecimal words
    /// per eight words ([`emit_spirv`] gives the words).
    SpirV,
}

/// The group size naga's translations are written for (the WGSL keeps it overridable).
pub const TRANSLATION_GROUP_SIZE: [u32; 3] = [64, 1, 1];

impl Target {
    /// The target a backend compiles from.
    pub fn of(backend: BackendKind) -> Target {
        match backend {
            BackendKind::OpenCl => Target::OpenClC,
            BackendKind::Cuda => Target::CudaC,
            BackendKind::Wgpu => Target::Wgsl,
            BackendKind::Cpu => Target::Ir,
        }
    }
}

fn unsupported(backend: BackendKind, e: impl std::fmt::Display) -> Error {
    Error::Backend(BackendError::Unsupported {
        backend,
        feature: e.to_string(),
    })
}

fn translated(kernel: &Kernel, target: TranslateTarget) -> Result<Translated> {
    let shader = kiln_wgsl::write_kernel(kernel).map_err(|e| unsupported(BackendKind::Wgpu, e))?;
    kiln_wgsl::translate(&shader.text, &shader.entry, TRANSLATION_GROUP_SIZE, target)
        .map_err(|e| unsupported(BackendKind::Wgpu, format!("{target:?} translation: {e}")))
}

/// The SPIR-V module naga writes from the kernel's WGSL, for group size
/// [`TRANSLATION_GROUP_SIZE`]. Fails like [`emit`].
pub fn emit_spirv(kernel: &Kernel) -> Result<Vec<u32>> {
    kiln_ir::validate(kernel)?;
    match translated(kernel, TranslateTarget::SpirV)? {
        Translated::SpirV(words) => Ok(words),
        Translated::Text(_) => Err(unsupported(BackendKind::Wgpu, "SPIR-V came back as text")),
    }
}

/// The source of `kernel` in `target`. Fails with the validation error for invalid IR, or
/// `Unsupported` naming the target when the writer (or naga's translation) cannot express
/// the kernel.
pub fn emit(kernel: &Kernel, target: Target) -> Result<String> {
    kiln_ir::validate(kernel)?;
    let translate = match target {
        Target::Ir => return Ok(print_kernel(kernel)),
        Target::OpenClC | Target::CudaC => {
            let (dialect, backend) = if target == Target::OpenClC {
                (kiln_c::Dialect::OpenCl, BackendKind::OpenCl)
            } else {
                (kiln_c::Dialect::Cuda, BackendKind::Cuda)
            };
            return kiln_c::write_kernel(kernel, dialect)
                .map(|s| s.text)
                .map_err(|e| unsupported(backend, e));
        }
        Target::Wgsl => {
            return kiln_wgsl::write_kernel(kernel)
                .map(|s| s.text)
                .map_err(|e| unsupported(BackendKind::Wgpu, e))
        }
        Target::Msl => TranslateTarget::Msl,
        Target::Glsl => TranslateTarget::Glsl,
        Target::Hlsl => TranslateTarget::Hlsl,
        Target::SpirV => TranslateTarget::SpirV,
    };
    Ok(match translated(kernel, translate)? {
        Translated::Text(t) => t,
        Translated::SpirV(words) => {
            let mut text = format!("; SPIR-V, {} words\n", words.len());
            for line in words.chunks(8) {
                let hex: Vec<String> = line.iter().map(|w| format!("{w:08x}")).collect();
                text += &hex.join(" ");
                text.push('\n');
            }
            text
        }
    })
}
