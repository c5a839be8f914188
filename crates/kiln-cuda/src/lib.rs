//! # kiln-cuda: the CUDA compile stage
//!
//! Writes CUDA C with [`kiln_c`] and compiles it with NVRTC, which [`Nvrtc`] loads at run
//! time: CUDA 13's `libnvrtc.so.13` or CUDA 12's `libnvrtc.so.12`, found on the loader path,
//! in the CUDA toolkit folders, or where `KILN_NVRTC` says. On a machine without it,
//! [`nvrtc_available`] returns `BackendError::Unavailable` listing where it looked; nothing
//! panics. [`assemble`] runs `ptxas` on the PTX for a given architecture, so every generated
//! kernel can be checked down to machine code without a GPU.
//!
//! [`CudaBackend`] is the runtime: on a machine with an NVIDIA driver (`libcuda.so.1`) it
//! compiles each kernel with NVRTC to a cubin for the device's compute capability (or to PTX
//! the driver finishes, when that NVRTC predates the device), cached on disk by the kiln
//! runtime, loads it as a module and launches on one stream. Copies of 1 MiB and more between
//! host slices and the device go through two page-locked buffers of 16 MiB, made at the
//! first such copy and kept while the backend lives: the host's threads fill one while the
//! device reads the other, about 5x the driver's own copy from pageable memory on an H100;
//! copies from page-locked memory of its own (`Backend::alloc_pinned`) go straight to the
//! device. Without the driver,
//! [`CudaBackend::new`] returns `BackendError::Unavailable` naming `libcuda.so.1`.

#![deny(missing_docs)]
mod nvrtc;
mod pinned;
mod queue;
mod runtime;
mod staging;
pub use nvrtc::{Nvrtc, Output, NVRTC_LIBRARY};
pub use runtime::{CudaBackend, DRIVER_LIBRARY};

use kiln_backend::{BackendError, BackendKind};
use kiln_c::{write_kernel, write_validated, Dialect, Source};
use kiln_ir::{CompileOptions, Kernel, KernelInfo};
use std::path::PathBuf;
use std::process::Command;

/// NVRTC options of every compile besides the architecture: no fused multiply-add, so results
/// match the other backends, and line information, so that the `#line` directives of the
/// generated source map the code to Rust lines in debuggers and profilers (no effect on the
/// code itself).
pub const NVRTC_OPTIONS: [&str; 2] = ["--fmad=false", "--generate-line-info"];

/// The NVRTC options of a kernel compiled with `options`, besides the architecture:
/// [`NVRTC_OPTIONS`], or with fast math `--use_fast_math` (which turns contraction back on)
/// and line information. Launch bounds and a register limit are in the source (so they reach
/// PTX too), except a register limit beside launch bounds, which CUDA C cannot state on one
/// kernel: that one is `--maxrregcount=N`, which binds the cubin NVRTC makes, not its PTX.
pub fn nvrtc_options(options: &CompileOptions) -> Vec<String> {
    let mut all: Vec<String> = match options.relaxed_math() {
        true => vec!["--use_fast_math".into(), "--generate-line-info".into()],
        false => NVRTC_OPTIONS.iter().map(|o| o.to_string()).collect(),
    };
    if let (Some(_), Some(n)) = (options.launch_bounds, options.max_registers) {
        all.push(format!("--maxrregcount={n}"));
    }
    all
}

/// Ok if NVRTC can be loaded; `Unavailable` listing where kiln looked otherwise.
pub fn nvrtc_available() -> Result<(), BackendError> {
    Nvrtc::shared().map(|_| ())
}

/// The CUDA C for `kernel`; `Unsupported` naming what is invalid or what the writer cannot
/// express.
pub fn write_cuda(kernel: &Kernel) -> Result<Source, BackendError> {
    write_kernel(kernel, Dialect::Cuda).map_err(unsupported)
}

/// The CUDA C for `kernel`, which validated with `info`; fails as [`write_cuda`] does.
fn write_validated_cuda(kernel: &Kernel, info: &KernelInfo) -> Result<Source, BackendError> {
    write_validated(kernel, info, Dialect::Cuda).map_err(unsupported)
}

/// What the writer could not express, as `Unsupported`.
fn unsupported(e: kiln_c::WriteError) -> BackendError {
    BackendError::Unsupported {
        backend: BackendKind::Cuda,
        feature: e.to_string(),
    }
}

/// CUDA C for `kernel` and the PTX NVRTC made of it.
pub struct Compiled {
    /// The generated CUDA C.
    pub source: Source,
    /// PTX text.
    pub ptx: String,
}

/// Writes `kernel` as CUDA C and compiles it to PTX for `arch` (e.g. `"sm_90"`) with the
/// shared NVRTC, with
/// floating-point contraction off so results match the other backends. Fails with
/// `Unavailable` (no NVRTC), `Unsupported` (IR the writer cannot express) or `Compile` (the
/// NVRTC log and the source).
pub fn compile_ptx(kernel: &Kernel, arch: &str) -> Result<Compiled, BackendError> {
    compile_ptx_with(Nvrtc::shared()?, kernel, arch)
}

/// [`compile_ptx`] with a given NVRTC (one whose PTX a given ptxas accepts, say).
pub fn compile_ptx_with(
    nvrtc: &Nvrtc,
    kernel: &Kernel,
    arch: &str,
) -> Result<Compiled, BackendError> {
    let source = write_cuda(kernel)?;
    let ptx = nvrtc.compile(
        &kernel.name,
        &source.text,
        arch,
        &nvrtc_options(&kernel.options),
        Output::Ptx,
    )?;
    Ok(Compiled {
        ptx: String::from_utf8_lossy(&ptx).into_owned(),
        source,
    })
}

/// Compiles CUDA C `source` (of kernel `kernel`) to a cubin for `arch` (`sm_90`) with the
/// shared NVRTC. Fails with `Unavailable` (no NVRTC) or `Compile` (NVRTC's log and the source).
pub fn compile_cubin(kernel: &str, source: &str, arch: &str) -> Result<Vec<u8>, BackendError> {
    Nvrtc::shared()?.compile(kernel, source, arch, &NVRTC_OPTIONS, Output::Cubin)
}

/// `ptxas` from `KILN_PTXAS`, else the first on `PATH`.
pub fn find_ptxas() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KILN_PTXAS") {
        return Some(PathBuf::from(p));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("ptxas"))
        .find(|p| p.is_file())
}

/// The (major, minor) release of the `ptxas` at `path` (`ptxas --version` says "release
/// 12.9"); `None` when it cannot be run or says no release. A ptxas assembles the PTX of an
/// NVRTC of its major version, not of a newer one.
pub fn ptxas_version(path: &std::path::Path) -> Option<(u32, u32)> {
    let out = Command::new(path).arg("--version").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let release = text.split("release ").nth(1)?;
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Assembles PTX for `arch` with `ptxas` (into a temporary file that is removed). Fails with
/// `Unavailable` when ptxas cannot be run and `Compile` (ptxas's log) when it rejects the PTX.
pub fn assemble(compiled: &Compiled, kernel_name: &str, arch: &str) -> Result<(), BackendError> {
    let ptxas = find_ptxas().ok_or_else(|| BackendError::Unavailable {
        backend: BackendKind::Cuda,
        library: "ptxas".into(),
        reason:
            "not on PATH and KILN_PTXAS is unset (pip install nvidia-cuda-nvcc-cu12 provides it)"
                .into(),
    })?;
    let dir = std::env::temp_dir();
    let stem = format!("kiln-{}-{}-{kernel_name}", std::process::id(), unique());
    let (ptx_path, out_path) = (
        dir.join(format!("{stem}.ptx")),
        dir.join(format!("{stem}.cubin")),
    );
    let io = |e: std::io::Error| BackendError::Unavailable {
        backend: BackendKind::Cuda,
        library: ptxas.display().to_string(),
        reason: e.to_string(),
    };
    std::fs::write(&ptx_path, &compiled.ptx).map_err(io)?;
    let out = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .arg(&ptx_path)
        .arg("-o")
        .arg(&out_path)
        .output();
    let _ = std::fs::remove_file(&ptx_path);
    let _ = std::fs::remove_file(&out_path);
    let out = out.map_err(io)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(BackendError::Compile {
            backend: BackendKind::Cuda,
            kernel: kernel_name.to_string(),
            log: format!(
                "ptxas -arch={arch}: {}{}",
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ),
            source_text: compiled.source.text.clone(),
        })
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
