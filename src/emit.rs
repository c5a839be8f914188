//! Generated source for any target, for reading and exporting.

use crate::error::{Error, Result};
use kiln_backend::{BackendError, BackendKind};
use kiln_ir::{print_kernel, Kernel};

/// A language kiln writes.
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::lang::*;
/// #[kiln::kernel]
/// fn double(i: Index1D, x: ViewMut<f32>) {
///     x[i] = x[i] * 2.0;
/// }
/// let ir = double().ir()?;
/// let cuda = kiln::emit(&ir, Target::CudaC)?;
/// assert!(cuda.contains("__global__"), "{cuda}");
/// assert!(kiln::emit(&ir, Target::Wgsl)?.contains("@compute"));
/// # Ok::<(), kiln::Error>(())
/// ```
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
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::lang::*;
/// #[kiln::kernel]
/// fn zero(i: Index1D, x: ViewMut<u32>) {
///     x[i] = 0u32;
/// }
/// let ir = zero().ir()?;
/// let glsl = kiln::emit(&ir, Target::Glsl)?;
/// let [x, _, _] = kiln::TRANSLATION_GROUP_SIZE;
/// assert!(glsl.contains(&format!("local_size_x = {x}")), "{glsl}");
/// # Ok::<(), kiln::Error>(())
/// ```
pub const TRANSLATION_GROUP_SIZE: [u32; 3] = [64, 1, 1];

impl Target {
    /// The target a backend compiles from.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(Target::of(ctx.device().backend), Target::Ir);
    /// assert_eq!(Target::of(BackendKind::Cuda), Target::CudaC);
    /// # Ok::<(), kiln::Error>(())
    /// ```
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

/// The SPIR-V module naga writes from the kernel's WGSL, for group size
/// [`TRANSLATION_GROUP_SIZE`]. Fails like [`emit`], and with `Unsupported` when kiln was
/// built without its `wgsl` feature.
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::lang::*;
/// #[kiln::kernel]
/// fn add(i: Index1D, a: View<i32>, b: ViewMut<i32>) {
///     b[i] = a[i] + b[i];
/// }
/// let ir = add().ir()?;
/// let words = kiln::emit_spirv(&ir)?;
/// assert_eq!(words[0], 0x0723_0203); // the SPIR-V magic number
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn emit_spirv(kernel: &Kernel) -> Result<Vec<u32>> {
    kiln_ir::validate(kernel)?;
    wgsl::spirv(kernel)
}

/// The source of `kernel` in `target`. Fails with the validation error for invalid IR, or
/// `Unsupported` naming the target when the writer (or naga's translation) cannot express
/// the kernel, or when kiln was built without its `wgsl` feature (WGSL and its translations).
///
/// ```
/// # use kiln::prelude::*;
/// use kiln::lang::*;
/// #[kiln::kernel]
/// fn saxpy(i: Index1D, a: f32, x: View<f32>, y: ViewMut<f32>) {
///     y[i] = a * x[i] + y[i];
/// }
/// let ir = saxpy().ir()?;
/// for target in [Target::Ir, Target::OpenClC, Target::CudaC, Target::Wgsl, Target::Msl, Target::Hlsl] {
///     let source = kiln::emit(&ir, target)?;
///     assert!(source.contains("saxpy"), "{target:?}: {source}");
/// }
/// # Ok::<(), kiln::Error>(())
/// ```
pub fn emit(kernel: &Kernel, target: Target) -> Result<String> {
    kiln_ir::validate(kernel)?;
    let c = |dialect, backend| {
        kiln_c::write_kernel(kernel, dialect)
            .map(|s| s.text)
            .map_err(|e| unsupported(backend, e))
    };
    match target {
        Target::Ir => Ok(print_kernel(kernel)),
        Target::OpenClC => c(kiln_c::Dialect::OpenCl, BackendKind::OpenCl),
        Target::CudaC => c(kiln_c::Dialect::Cuda, BackendKind::Cuda),
        Target::Wgsl | Target::Msl | Target::Glsl | Target::Hlsl | Target::SpirV => {
            wgsl::source(kernel, target)
        }
    }
}

/// WGSL and naga's translations of it.
#[cfg(feature = "wgsl")]
mod wgsl {
    use super::*;
    use kiln_wgsl::{TranslateTarget, Translated};

    fn translated(kernel: &Kernel, target: TranslateTarget) -> Result<Translated> {
        let shader =
            kiln_wgsl::write_kernel(kernel).map_err(|e| unsupported(BackendKind::Wgpu, e))?;
        kiln_wgsl::translate(&shader.text, &shader.entry, TRANSLATION_GROUP_SIZE, target)
            .map_err(|e| unsupported(BackendKind::Wgpu, format!("{target:?} translation: {e}")))
    }

    pub(super) fn spirv(kernel: &Kernel) -> Result<Vec<u32>> {
        match translated(kernel, TranslateTarget::SpirV)? {
            Translated::SpirV(words) => Ok(words),
            Translated::Text(_) => Err(unsupported(BackendKind::Wgpu, "SPIR-V came back as text")),
        }
    }

    /// `kernel` in WGSL or one of its translations (`target` is one of those).
    pub(super) fn source(kernel: &Kernel, target: Target) -> Result<String> {
        let translate = match target {
            Target::Msl => TranslateTarget::Msl,
            Target::Glsl => TranslateTarget::Glsl,
            Target::Hlsl => TranslateTarget::Hlsl,
            Target::SpirV => TranslateTarget::SpirV,
            _ => {
                return kiln_wgsl::write_kernel(kernel)
                    .map(|s| s.text)
                    .map_err(|e| unsupported(BackendKind::Wgpu, e))
            }
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
}

/// Without the `wgsl` feature: WGSL and its translations are `Unsupported`.
#[cfg(not(feature = "wgsl"))]
mod wgsl {
    use super::*;

    fn not_built() -> Error {
        unsupported(
            BackendKind::Wgpu,
            "WGSL and its translations: kiln was built without its `wgsl` (or `wgpu`) feature",
        )
    }

    pub(super) fn spirv(_: &Kernel) -> Result<Vec<u32>> {
        Err(not_built())
    }

    pub(super) fn source(_: &Kernel, _: Target) -> Result<String> {
        Err(not_built())
    }
}
