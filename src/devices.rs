//! Finding and opening devices: which backends kiln was built with, how many devices each
//! finds, and the choice `Context::new` makes. The only place outside the backends that names
//! backend kinds.

use crate::context::Context;
use crate::error::{Error, Result};
use kiln_backend::{Backend, BackendError, BackendKind, DeviceInfo};
use std::sync::Arc;

/// Opens device `index` of backend `kind`; `Unavailable` when kiln was built without it.
fn open_backend(kind: BackendKind, index: u32) -> Result<Arc<dyn Backend>> {
    match kind {
        BackendKind::Cpu if index > 0 => Err(Error::Backend(BackendError::NoSuchDevice {
            backend: kind,
            index,
            count: 1,
        })),
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => Ok(Arc::new(kiln_cpu::CpuBackend::new()?)),
        #[cfg(feature = "opencl")]
        BackendKind::OpenCl => Ok(Arc::new(kiln_opencl::OpenClBackend::open(index)?)),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => Ok(Arc::new(kiln_wgpu::WgpuBackend::open(
            index,
            kiln_wgpu::WgpuOptions::default(),
        )?)),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => Ok(Arc::new(kiln_cuda::CudaBackend::open(index)?)),
        #[allow(unreachable_patterns)]
        _ => Err(not_built(kind)),
    }
}

/// The error for a backend whose cargo feature was off when kiln was built.
fn not_built(kind: BackendKind) -> Error {
    Error::Backend(BackendError::Unavailable {
        backend: kind,
        library: format!("kiln's `{}` cargo feature", kind.name()),
        reason: "kiln was built without it (enable the feature in Cargo.toml)".into(),
    })
}

/// How many devices backend `kind` finds; 0 when its driver or library is absent, or kiln was
/// built without it.
fn device_count(kind: BackendKind) -> u32 {
    match kind {
        #[cfg(feature = "cpu")]
        BackendKind::Cpu => 1,
        #[cfg(feature = "opencl")]
        BackendKind::OpenCl => kiln_opencl::OpenClBackend::device_count().unwrap_or(0),
        #[cfg(feature = "wgpu")]
        BackendKind::Wgpu => kiln_wgpu::WgpuBackend::device_count(),
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => kiln_cuda::CudaBackend::device_count().unwrap_or(0),
        #[allow(unreachable_patterns)]
        _ => 0,
    }
}

/// The name the driver gives device `index` of `kind` when it does not open, if it says one.
#[cfg_attr(not(feature = "cuda"), allow(unused_variables))]
fn unusable_device_name(kind: BackendKind, index: u32) -> Option<String> {
    match kind {
        #[cfg(feature = "cuda")]
        BackendKind::Cuda => kiln_cuda::CudaBackend::device_name(index),
        _ => None,
    }
}

/// Parses `KILN_BACKEND`: a backend name, optionally followed by `:index`.
fn parse_backend_choice(text: &str) -> Option<(BackendKind, u32)> {
    match text.split_once(':') {
        Some((name, index)) => Some((BackendKind::parse(name)?, index.trim().parse().ok()?)),
        None => Some((BackendKind::parse(text)?, 0)),
    }
}

impl Context {
    /// Opens the device `KILN_BACKEND` names (`cpu|cuda|opencl|wgpu`, optionally with a device
    /// index as in `opencl:1`), or else the best device present: a GPU (CUDA, then wgpu, then
    /// OpenCL), otherwise the CPU backend. Fails with `UnknownBackend` if the variable names no
    /// backend, and with the backend's error if the named device cannot be opened; a named
    /// device never falls back to another.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::new()?; // a GPU if there is one, else the CPU
    /// let xs: Vec<u32> = (0..1000).collect();
    /// assert_eq!(ctx.from(&xs).sum()?, 499_500);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn new() -> Result<Context> {
        match std::env::var("KILN_BACKEND") {
            Ok(text) if !text.trim().is_empty() => {
                let (kind, index) =
                    parse_backend_choice(&text).ok_or(Error::UnknownBackend(text))?;
                Context::with_device(kind, index)
            }
            _ => {
                // A backend whose driver reports devices but that does not open is said, at
                // warn level, before the next one is tried: no silent fallback.
                let gpu = [BackendKind::Cuda, BackendKind::Wgpu, BackendKind::OpenCl]
                    .into_iter()
                    .filter_map(|k| {
                        open_backend(k, 0)
                            .inspect_err(|e| {
                                if device_count(k) > 0 {
                                    tracing::warn!("{k} device 0 is present but does not open, so Context::new() looks further: {e}");
                                }
                            })
                            .ok()
                    })
                    .find(|b| b.info().class == kiln_backend::DeviceClass::Gpu);
                match gpu {
                    Some(backend) => Ok(Context::from_backend(backend)),
                    None => Context::with_backend(BackendKind::Cpu),
                }
            }
        }
    }

    /// Opens the given backend's default device; `Backend(Unavailable)` naming the library
    /// when it is absent.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let cpu = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(cpu.device().backend, BackendKind::Cpu);
    /// if let Err(e) = Context::with_backend(BackendKind::Cuda) {
    ///     println!("no CUDA here: {e}"); // the error names the library it could not load
    /// }
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_backend(kind: BackendKind) -> Result<Context> {
        Context::with_device(kind, 0)
    }

    /// Opens device `index` of backend `kind`, as numbered by [`DeviceInfo::index`] in
    /// [`Context::devices`]. Each context is independent: run queries on several devices at
    /// once by opening one context per device. Fails with `Backend(Unavailable)` naming the
    /// library when the backend is absent, and `Backend(NoSuchDevice)` when it has fewer
    /// devices.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// for d in Context::devices().iter().filter(|d| d.unusable.is_none()) {
    ///     let ctx = Context::with_device(d.backend, d.index)?;
    ///     assert_eq!(ctx.device().name, d.name);
    /// }
    /// assert!(matches!(
    ///     Context::with_device(BackendKind::Cpu, 1),
    ///     Err(kiln::Error::Backend(kiln::BackendError::NoSuchDevice { .. }))
    /// ));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_device(kind: BackendKind, index: u32) -> Result<Context> {
        Ok(Context::from_backend(open_backend(kind, index)?))
    }

    /// Every device on this machine: the CPU, then each CUDA, OpenCL and wgpu device in its
    /// backend's order. A device that its backend counts but that fails to open is listed too,
    /// with [`DeviceInfo::unusable`] giving the reason (a CUDA GPU without a usable NVRTC,
    /// say), and a `tracing` warning.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let devices = Context::devices();
    /// assert_eq!(devices[0].backend, BackendKind::Cpu); // the CPU first, always present
    /// for d in &devices {
    ///     println!("{} {}: {} {}", d.backend, d.index, d.name, d.unusable.as_deref().unwrap_or("ok"));
    /// }
    /// ```
    pub fn devices() -> Vec<DeviceInfo> {
        [
            BackendKind::Cpu,
            BackendKind::Cuda,
            BackendKind::OpenCl,
            BackendKind::Wgpu,
        ]
        .into_iter()
        .flat_map(|k| {
            (0..device_count(k)).map(move |i| match open_backend(k, i) {
                Ok(b) => b.info().clone(),
                Err(e) => {
                    tracing::warn!("{k} device {i} does not open: {e}");
                    let name =
                        unusable_device_name(k, i).unwrap_or_else(|| format!("{k} device {i}"));
                    DeviceInfo::unusable(k, i, name, e.to_string())
                }
            })
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// scripts/test.sh runs this with the CPU backend alone too
    /// (`--no-default-features --features cpu`).
    #[test]
    fn backends_left_out_of_the_build_are_typed_unavailable() {
        let built = [
            (BackendKind::Cpu, cfg!(feature = "cpu")),
            (BackendKind::OpenCl, cfg!(feature = "opencl")),
            (BackendKind::Wgpu, cfg!(feature = "wgpu")),
            (BackendKind::Cuda, cfg!(feature = "cuda")),
        ];
        let devices = Context::devices();
        for (kind, built) in built {
            if built {
                // A built backend's devices are listed as it counts them (the CPU: one).
                let listed = devices.iter().filter(|d| d.backend == kind).count() as u32;
                assert_eq!(listed, device_count(kind), "{kind}");
                assert!(kind != BackendKind::Cpu || listed == 1);
                continue;
            }
            assert_eq!(device_count(kind), 0);
            assert!(devices.iter().all(|d| d.backend != kind));
            match Context::with_backend(kind) {
                Err(Error::Backend(e @ BackendError::Unavailable { .. })) => {
                    assert!(e.to_string().contains("cargo feature"), "{e}")
                }
                Err(e) => panic!("{kind}: {e}"),
                Ok(_) => panic!("{kind} opened without its feature"),
            }
        }
    }
}
