//! `kiln doctor`: runs a fused query and a `#[kiln::kernel]` on every device, compares their
//! answers with the same Rust on the host, checks that the disk cache is writable, and says
//! what to install or set for each backend that fails.

use crate::devices::{Survey, BACKENDS};
use crate::{say, Failure};
use kiln::lang::*;
use kiln::{BackendKind, Context, DeviceInfo, DiskCache};

/// `y = a * x + y` over `i32`, one element per work item.
#[kiln::kernel]
fn axpy(i: Index1D, a: i32, x: View<i32>, y: ViewMut<i32>) {
    y[i] = a * x[i] + y[i];
}

/// Runs the query and the kernel on `ctx` and compares each with Rust on the host; the first
/// difference or error otherwise.
fn check(ctx: &Context) -> Result<(), String> {
    // An odd size, so that the last group is partial.
    let xs: Vec<i32> = (0..100_003).map(|i| (i * 37) % 1001 - 500).collect();
    let got = ctx
        .from(&xs)
        .map(|x| x * 3 + 1)
        .filter(|x| x.gt(0))
        .sum()
        .map_err(|e| format!("the query failed: {e}"))?;
    let want: i32 = xs.iter().map(|x| x * 3 + 1).filter(|x| *x > 0).sum();
    if got != want {
        return Err(format!("the query summed {got}, Rust on the host {want}"));
    }
    let mut ys: Vec<i32> = (0..xs.len() as i32).collect();
    let want: Vec<i32> = xs.iter().zip(&ys).map(|(x, y)| 7 * x + y).collect();
    ctx.launch(axpy, xs.len(), (7, &xs, &mut ys))
        .map_err(|e| format!("the kernel failed: {e}"))?;
    match ys.iter().zip(&want).position(|(g, w)| g != w) {
        Some(i) => Err(format!(
            "the kernel wrote {} at {i}, Rust on the host {}",
            ys[i], want[i]
        )),
        None => Ok(()),
    }
}

/// What to install or set when `kind` has no working device.
fn remedy(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Cpu => {
            "the CPU backend needs nothing installed: a failure here is a kiln bug, please report it with this output"
        }
        BackendKind::Cuda => {
            "install the NVIDIA driver (libcuda.so), NVRTC (`pip install nvidia-cuda-nvrtc-cu12`, then put its lib folder on LD_LIBRARY_PATH or set KILN_NVRTC to the library) and ptxas (`pip install nvidia-cuda-nvcc-cu12`, or set KILN_PTXAS)"
        }
        BackendKind::OpenCl => {
            "install an OpenCL driver: your GPU vendor's, or PoCL for the CPU (Debian: `apt install ocl-icd-libopencl1 pocl-opencl-icd`)"
        }
        BackendKind::Wgpu => {
            "install a Vulkan driver (Debian: `apt install mesa-vulkan-drivers libvulkan1`, llvmpipe on the CPU; or your GPU vendor's) or EGL for GL (`apt install libegl1`); macOS and Windows need nothing (Metal, DX12)"
        }
    }
}

/// One device's line: `ok` or why not.
fn device_line(d: &DeviceInfo) -> (bool, String) {
    let name = format!("{} {} ({})", d.backend, d.index, d.name);
    let checked = match &d.unusable {
        Some(why) => Err(format!("does not open: {why}")),
        None => Context::with_device(d.backend, d.index)
            .map_err(|e| format!("does not open: {e}"))
            .and_then(|ctx| check(&ctx)),
    };
    match checked {
        Ok(()) => (
            true,
            format!("ok    {name}: a query and a kernel equal Rust on the host"),
        ),
        Err(why) => (false, format!("FAIL  {name}: {why}")),
    }
}

/// Whether the disk cache takes, keeps and gives back an entry, and its line.
fn cache_line() -> (bool, String) {
    let Some(cache) = DiskCache::from_env() else {
        return (
            true,
            "off   disk cache: off (KILN_CACHE_DIR=off, or no HOME to put it under)".into(),
        );
    };
    let dir = cache.dir().display().to_string();
    let key = ["kiln doctor", &std::process::id().to_string()];
    let payload = b"kiln doctor's probe";
    let stored = cache.store(&key, payload);
    let loaded = cache.load(&key);
    cache.remove(&key);
    match (stored, loaded) {
        (Ok(()), Some(p)) if p == payload => (true, format!("ok    disk cache {dir}: writable")),
        (Err(e), _) => (
            false,
            format!("FAIL  disk cache {dir}: cannot write ({e}); set KILN_CACHE_DIR to a writable folder, or to `off`"),
        ),
        (Ok(()), _) => (
            false,
            format!("FAIL  disk cache {dir}: an entry written was not read back; set KILN_CACHE_DIR to another folder"),
        ),
    }
}

/// The backends `names` (given to `flag`) names; an empty name is none.
fn backends(flag: &str, names: &[String]) -> Result<Vec<BackendKind>, Failure> {
    names
        .iter()
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            BackendKind::parse(r).ok_or_else(|| {
                Failure::new(format!(
                    "{flag} names `{r}`, which is no backend (cpu, cuda, opencl, wgpu)"
                ))
            })
        })
        .collect()
}

/// Checks every device (of the backends `only` names, or all) and the disk cache, printing a line for each and a remedy for each
/// backend that fails; fails when the disk cache does not work or a backend in `require` has
/// no working device.
pub(crate) fn run(require: &[String], only: &[String]) -> Result<(), Failure> {
    let required = backends("--require", require)?;
    let checked = match only.is_empty() {
        true => BACKENDS.to_vec(),
        false => backends("--only", only)?,
    };
    if let Some(k) = required.iter().find(|k| !checked.contains(k)) {
        return Err(Failure::new(format!(
            "--require names {k}, which --only leaves out"
        )));
    }
    let survey = Survey::take();
    let mut failed = Vec::new();
    for kind in BACKENDS.into_iter().filter(|k| checked.contains(k)) {
        let devices: Vec<&DeviceInfo> = survey
            .devices
            .iter()
            .filter(|d| d.backend == kind)
            .collect();
        let mut works = false;
        for d in &devices {
            let (ok, line) = device_line(d);
            say(&line);
            works |= ok;
        }
        if let Some((_, why)) = survey.absent.iter().find(|(k, _)| *k == kind) {
            say(format!("none  {kind}: {why}"));
        }
        if !works {
            say(format!("      to use {kind}: {}", remedy(kind)));
            failed.push(kind);
        }
    }
    let (cache_ok, line) = cache_line();
    say(&line);
    if !cache_ok {
        return Err(Failure::new("the disk cache does not work (see above)"));
    }
    let missing: Vec<&str> = required
        .iter()
        .filter(|k| failed.contains(k))
        .map(|k| k.name())
        .collect();
    match missing.is_empty() {
        true => Ok(()),
        false => Err(Failure::new(format!(
            "required backends without a working device: {}",
            missing.join(", ")
        ))),
    }
}
