//! `kiln emit`: the source kiln writes for a kernel of the gallery (examples/gallery), in any
//! language it targets.

#[path = "../../../examples/gallery/mod.rs"]
mod gallery;

use crate::{say, Failure};
use kiln::ir::Kernel;
use kiln::Target;
use std::sync::Arc;

/// Builds a kernel's IR.
type Build = fn() -> kiln::Result<Arc<Kernel>>;

/// The gallery's kernels by name (generic ones at the types and operations the gallery's
/// tests use).
const KERNELS: &[(&str, Build)] = &[
    ("saxpy", || gallery::saxpy().ir()),
    ("stencil", || gallery::stencil().ir()),
    ("transpose_naive", || gallery::transpose_naive().ir()),
    ("transpose_tiled", || gallery::transpose_tiled().ir()),
    ("histogram_global", || gallery::histogram_global().ir()),
    ("histogram_shared", || gallery::histogram_shared().ir()),
    ("block_sum", || gallery::block_sum().ir()),
    ("matmul_tiled", || gallery::matmul_tiled().ir()),
    ("nbody_step", || gallery::nbody_step().ir()),
    ("mandelbrot", || gallery::mandelbrot().ir()),
    ("map_op_square", || {
        gallery::map_op::<gallery::Square>().ir()
    }),
    ("map_op_smooth", || {
        gallery::map_op::<gallery::Smooth>().ir()
    }),
    ("scale_f32", || gallery::scale::<f32>().ir()),
    ("scale_i64", || gallery::scale::<i64>().ir()),
];

/// The targets by the names `--target` takes.
const TARGETS: &[(&str, Target)] = &[
    ("ir", Target::Ir),
    ("cuda", Target::CudaC),
    ("opencl", Target::OpenClC),
    ("wgsl", Target::Wgsl),
    ("msl", Target::Msl),
    ("glsl", Target::Glsl),
    ("hlsl", Target::Hlsl),
    ("spirv", Target::SpirV),
];

/// Names joined by commas.
fn names<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Prints `kernel`'s source in `target`, or with `list` the kernels and targets. Fails for an
/// unknown kernel or target, or when kiln cannot write the kernel in the target (its error).
pub(crate) fn run(kernel: Option<&str>, target: &str, list: bool) -> Result<(), Failure> {
    if list {
        say(format!("kernels: {}", names(KERNELS)));
        say(format!("targets: {}", names(TARGETS)));
        return Ok(());
    }
    let Some(kernel) = kernel else {
        return Err(Failure::new(format!(
            "name a kernel: {} (or --list)",
            names(KERNELS)
        )));
    };
    let build = KERNELS
        .iter()
        .find(|(n, _)| *n == kernel)
        .map(|(_, b)| b)
        .ok_or_else(|| {
            Failure::new(format!(
                "no gallery kernel `{kernel}`; there are {}",
                names(KERNELS)
            ))
        })?;
    let target = TARGETS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(target))
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            Failure::new(format!(
                "no target `{target}`; there are {}",
                names(TARGETS)
            ))
        })?;
    let ir = build().map_err(|e| Failure::new(format!("{kernel}: {e}")))?;
    let source = kiln::emit(&ir, target).map_err(|e| Failure::new(format!("{kernel}: {e}")))?;
    say(source.trim_end());
    Ok(())
}
