//! `kiln emit`: the source kiln writes for a kernel of the gallery (examples/gallery) or an
//! example query, in any language it targets (PTX through NVRTC where it is present), and a
//! query's plan.

#[path = "../../../examples/gallery/mod.rs"]
mod gallery;

use crate::queries::{Printer, Show, QUERIES};
use crate::{say, Failure};
use kiln::ir::Kernel;
use kiln::{BackendKind, Context, PlanShape, Target};
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

/// What `kiln emit` was asked for.
#[derive(clap::Args)]
pub(crate) struct Request {
    /// A gallery kernel or an example query (`kiln emit --list` names them).
    name: Option<String>,
    /// The language: ir, cuda, opencl, wgsl, msl, glsl, hlsl, spirv, or ptx (a kernel's, by
    /// NVRTC).
    #[arg(long, default_value = "ir")]
    target: String,
    /// The GPU architecture PTX is for.
    #[arg(long, default_value = "sm_90")]
    arch: String,
    /// A query's plan (launches, grids, bindings, host steps) and its kernels' IR, instead of
    /// its source.
    #[arg(long)]
    plan: bool,
    /// The device a query is planned for: cpu, opencl, wgpu or cuda, with `:index`.
    #[arg(long, default_value = "cpu")]
    backend: String,
    /// Plan a query as GPUs run it (groups combining through shared memory) on that device.
    #[arg(long)]
    grouped: bool,
    /// List the kernels, queries and targets instead.
    #[arg(long)]
    list: bool,
}

/// Names joined by commas.
fn names<T>(table: &[(&str, T)]) -> String {
    table.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Prints what `r` asks for. Fails for an unknown name or target, a device that does not
/// open, or when kiln cannot write the kernel in the target (its error).
pub(crate) fn run(r: Request) -> Result<(), Failure> {
    if r.list {
        say(format!("kernels: {}", names(KERNELS)));
        let queries: Vec<&str> = QUERIES.iter().map(|(n, _, _)| *n).collect();
        say(format!("queries: {}", queries.join(", ")));
        say(format!("targets: {}, ptx", names(TARGETS)));
        return Ok(());
    }
    let Some(name) = r.name.as_deref() else {
        return Err(Failure::new(
            "name a kernel or a query (kiln emit --list names them)",
        ));
    };
    if let Some((_, _, print)) = QUERIES.iter().find(|(n, _, _)| *n == name) {
        return query(name, *print, &r);
    }
    let build = KERNELS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b)
        .ok_or_else(|| {
            Failure::new(format!(
                "no gallery kernel or example query `{name}` (kiln emit --list names them)"
            ))
        })?;
    if r.plan {
        return Err(Failure::new(format!(
            "{name} is a kernel: only queries have plans"
        )));
    }
    let ir = build().map_err(|e| Failure::new(format!("{name}: {e}")))?;
    let source = match r.target.eq_ignore_ascii_case("ptx") {
        true => ptx(&ir, &r.arch),
        false => kiln::emit(&ir, target(&r.target)?).map_err(|e| e.to_string()),
    };
    say(source
        .map_err(|e| Failure::new(format!("{name}: {e}")))?
        .trim_end());
    Ok(())
}

/// `ir`'s PTX for `arch`, by NVRTC.
#[cfg(feature = "cuda")]
fn ptx(ir: &Kernel, arch: &str) -> Result<String, String> {
    kiln_cuda::compile_ptx(ir, arch)
        .map(|c| c.ptx)
        .map_err(|e| e.to_string())
}

/// PTX needs the cuda feature.
#[cfg(not(feature = "cuda"))]
fn ptx(_: &Kernel, _: &str) -> Result<String, String> {
    Err("PTX needs kiln's `cuda` cargo feature, which this build left out".into())
}

/// The target `name` names.
fn target(name: &str) -> Result<Target, Failure> {
    TARGETS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            Failure::new(format!(
                "no target `{name}`; there are {}, ptx",
                names(TARGETS)
            ))
        })
}

/// Prints query `name`'s source or plan (by `print`) on the device `r` names.
fn query(name: &str, print: Printer, r: &Request) -> Result<(), Failure> {
    let (kind, index) = match r.backend.split_once(':') {
        Some((k, i)) => (BackendKind::parse(k), i.trim().parse().ok()),
        None => (BackendKind::parse(&r.backend), Some(0)),
    };
    let (Some(kind), Some(index)) = (kind, index) else {
        return Err(Failure::new(format!(
            "--backend takes cpu, opencl, wgpu or cuda, optionally with :index, not `{}`",
            r.backend
        )));
    };
    let ctx =
        Context::with_device(kind, index).map_err(|e| Failure::new(format!("{name}: {e}")))?;
    if r.grouped {
        ctx.set_plan_shape(PlanShape::Grouped);
    }
    let profile = ctx.profile();
    let show = match r.plan {
        true => {
            say(format!(
                "{name} on {} ({:?} plans)\n",
                ctx.device().name,
                profile.shape
            ));
            Show::Plan(&profile)
        }
        false if r.target.eq_ignore_ascii_case("ptx") => {
            return Err(Failure::new(format!(
                "{name}: PTX is written for gallery kernels; a query's CUDA C is --target cuda"
            )))
        }
        false => Show::Source(target(&r.target)?),
    };
    let text = print(&ctx, show).ok_or_else(|| {
        Failure::new(format!(
            "{name}: its kernels are printed with its plan (--plan)"
        ))
    })?;
    say(text
        .map_err(|e| Failure::new(format!("{name}: {e}")))?
        .trim_end());
    Ok(())
}
