#![allow(dead_code)]
//! The conformance harness: runs a test body once per backend present. Backends named in
//! `KILN_REQUIRE` (comma-separated) must open, or the test fails saying why; others are used
//! when they open and skipped when they do not. Afterwards every kernel the body compiled is
//! written as CUDA C, compiled by NVRTC and assembled by `ptxas -arch=sm_90` when NVRTC is
//! present (required when `KILN_REQUIRE` contains `nvrtc`), and translated from its WGSL to
//! SPIR-V and GLSL, checked by `spirv-val` and `glslangValidator` when they are installed
//! (required when `KILN_REQUIRE` contains `validators`); with `KILN_TEST_CHECKED`, a kernel
//! another test of the run checked is not checked again. `KILN_TEST_ONLY` (comma-separated
//! backend names) restricts the backends tried to those it names, so a run on a machine with
//! extra drivers (an NVIDIA OpenCL ICD, say) tests only what it means to.

use kiln::{BackendKind, Context};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::cell::RefCell;

thread_local! {
    static CURRENT: RefCell<Option<Context>> = const { RefCell::new(None) };
}

const ALL: [BackendKind; 4] = [
    BackendKind::Cpu,
    BackendKind::OpenCl,
    BackendKind::Cuda,
    BackendKind::Wgpu,
];

fn required() -> Vec<String> {
    std::env::var("KILN_REQUIRE")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The backends `KILN_TEST_ONLY` names, or all four when it is unset or empty. The CPU is
/// always among them: it is the harness's reference context.
fn tried() -> Vec<BackendKind> {
    let only: Vec<String> = std::env::var("KILN_TEST_ONLY")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    for name in &only {
        assert!(
            ALL.iter().any(|k| k.name() == name),
            "KILN_TEST_ONLY names {name:?}, which is no backend (cpu, opencl, cuda, wgpu)"
        );
    }
    ALL.into_iter()
        .filter(|k| only.is_empty() || *k == BackendKind::Cpu || only.iter().any(|o| o == k.name()))
        .collect()
}

/// Contexts for every backend to test on: the CPU always, the others when present and not
/// excluded by `KILN_TEST_ONLY`; every wgpu adapter (one per graphics API, so llvmpipe on
/// Vulkan and on GL), `gl` in `KILN_REQUIRE` requiring one on GL.
pub fn contexts() -> Vec<Context> {
    let required = required();
    let tried = tried();
    let mut out = Vec::new();
    for kind in tried.iter().copied() {
        match Context::with_backend(kind) {
            Ok(c) => out.push(c),
            Err(e) if required.iter().any(|r| r == kind.name()) => {
                panic!("KILN_REQUIRE names {kind}, but it cannot be opened: {e}")
            }
            Err(_) => {}
        }
    }
    if tried.contains(&BackendKind::Wgpu) {
        let more_adapters = (1..).map_while(|i| Context::with_device(BackendKind::Wgpu, i).ok());
        out.extend(more_adapters);
    }
    let on_gl = |c: &Context| c.device().backend == BackendKind::Wgpu && on_gl(c);
    if required.iter().any(|r| r == "gl") && !out.iter().any(on_gl) {
        panic!("KILN_REQUIRE names gl, but wgpu finds no adapter on GL (see backends.rs)");
    }
    out
}

/// Whether `c` is a wgpu adapter on GL (its name ends with the API).
pub fn on_gl(c: &Context) -> bool {
    c.device().name.ends_with("(GL)")
}

/// Whether the current backend has f64 arithmetic; where it does not, `f64` queries and
/// kernels are typed errors (tested in kiln-wgpu's features tests).
pub fn has_f64() -> bool {
    ctx().device().features.f64
}

/// Whether the current backend has 64-bit integers (see [`has_f64`]).
pub fn has_i64() -> bool {
    ctx().device().features.int64
}

/// Float values whose order and equality tests get wrong most often: NaN of both signs,
/// the infinities, zeros of both signs, the smallest normal and a negative.
pub const SPECIAL_F32: [f32; 8] = [
    f32::NAN,
    -f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    0.0,
    -0.0,
    f32::MIN_POSITIVE,
    -1.5,
];

/// A spread of `i` over `0..m`: neighbouring `i` land far apart, and every value recurs.
pub fn spread(i: u32, m: u32) -> u32 {
    i.wrapping_mul(2_654_435_761).rotate_right(11) % m
}

/// Runs `body(c, n, at)` on every backend, in both plan shapes, for each size `n` of `sizes`;
/// `at` names the size and shape for failure messages.
pub fn every_backend_plan_and_size(sizes: &[usize], body: impl Fn(&Context, usize, &str)) {
    every_backend(|| {
        let c = ctx();
        for shape in [kiln::PlanShape::Chunked, kiln::PlanShape::Grouped] {
            c.set_plan_shape(shape);
            for &n in sizes {
                body(&c, n, &format!("n={n}, {shape:?}"));
            }
        }
    });
}

/// The context of the backend the current test body runs on.
pub fn ctx() -> Context {
    CURRENT
        .with(|c| c.borrow().clone())
        .expect("ctx() is called inside every_backend")
}

/// Runs `body` once per backend; a failure names the backend it happened on.
pub fn every_backend(body: impl Fn()) {
    let all = contexts();
    let cpu = all[0].clone();
    for c in all {
        let backend = format!("{} ({})", c.device().backend, c.device().name);
        CURRENT.with(|cur| *cur.borrow_mut() = Some(c));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&body));
        CURRENT.with(|cur| *cur.borrow_mut() = None);
        if let Err(e) = r {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("on backend {backend}: {msg}");
        }
    }
    cuda_compile_check(&cpu);
}

/// Compiles every kernel in `ctx`'s cache to PTX with NVRTC and assembles it for sm_90, and
/// validates its SPIR-V and GLSL translations, except kernels another test of the same run
/// has checked already (see [`checked_mark`]).
fn cuda_compile_check(ctx: &Context) {
    for k in ctx.cache().kernels() {
        let mark = checked_mark(&k);
        if mark.as_ref().is_some_and(|m| m.exists()) {
            continue;
        }
        cuda_check_kernel(&k);
        translation_check(&k);
        if let Some(mark) = mark {
            std::fs::write(&mark, b"").expect("writing a checked kernel's mark");
        }
    }
}

/// Where the suite marks `k` as checked, when `KILN_TEST_CHECKED` names a folder (scripts/test.sh
/// makes a fresh one per run, shared by every test process): a file named by the kernel's
/// structural hash (the kernel caches' key, the same in every process), written once its checks
/// pass. Without the variable, `None`: every test checks every kernel it compiled.
fn checked_mark(k: &kiln::ir::Kernel) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("KILN_TEST_CHECKED").filter(|d| !d.is_empty())?;
    let hash = kiln::ir::kernel_hash(k);
    Some(std::path::Path::new(&dir).join(format!("{}-{hash}", k.name)))
}

/// Whether `tool` runs here (required when `KILN_REQUIRE` names `validators`).
fn tool_present(tool: &str) -> bool {
    let present = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok();
    if !present && required().iter().any(|r| r == "validators") {
        panic!("KILN_REQUIRE names validators, but `{tool}` cannot be run");
    }
    present
}

/// Translates `k`'s WGSL to SPIR-V and GLSL with naga and checks them with `spirv-val`
/// (Vulkan 1.1) and `glslangValidator` (compute stage), when those are installed.
pub fn translation_check(k: &kiln::ir::Kernel) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir().join(format!(
        "kiln-check-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let run = |tool: &str, args: &[&str], path: &std::path::Path, source: &str| {
        let out = std::process::Command::new(tool)
            .args(args)
            .arg(path)
            .output()
            .unwrap_or_else(|e| panic!("running {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} rejects the translation of `{}`:\n{}{}\n--- source ---\n{source}",
            k.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    if tool_present("spirv-val") {
        let path = base.with_extension("spv");
        let validate = |words: &[u32], source: &str| {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            std::fs::write(&path, bytes).expect("writing a temporary file");
            run("spirv-val", &["--target-env", "vulkan1.1"], &path, source);
        };
        let words = kiln::emit_spirv(k).unwrap_or_else(|e| panic!("SPIR-V of `{}`: {e}", k.name));
        validate(
            &words,
            &kiln::emit(k, kiln::Target::Wgsl).unwrap_or_default(),
        );
        // The variant for adapters with subgroups, when the kernel uses them.
        let options = kiln_wgsl::WgslOptions {
            subgroups: true,
            ..Default::default()
        };
        let shader = kiln_wgsl::write_kernel_with(k, options)
            .unwrap_or_else(|e| panic!("WGSL with subgroups of `{}`: {e}", k.name));
        if shader.needs.subgroups {
            let target = kiln_wgsl::TranslateTarget::SpirV;
            let size = kiln::TRANSLATION_GROUP_SIZE;
            match kiln_wgsl::translate(&shader.text, &shader.entry, size, target) {
                Ok(kiln_wgsl::Translated::SpirV(words)) => validate(&words, &shader.text),
                other => panic!("SPIR-V with subgroups of `{}`: {other:?}", k.name),
            }
        }
        let _ = std::fs::remove_file(&path);
    }
    if tool_present("glslangValidator") {
        let wgsl = kiln::emit(k, kiln::Target::Wgsl).unwrap_or_default();
        let glsl = kiln::emit(k, kiln::Target::Glsl);
        let int64 = kiln_wgsl::write_kernel_with(k, Default::default())
            .is_ok_and(|shader| shader.needs.int64);
        if int64 || wgsl.contains("i64") || wgsl.contains("u64") {
            // naga's GLSL writer has no 64-bit integers: a typed error is the right answer.
            assert!(
                matches!(
                    glsl,
                    Err(kiln::Error::Backend(kiln::BackendError::Unsupported { .. }))
                ),
                "GLSL of `{}` with 64-bit integers: {glsl:?}",
                k.name
            );
            return;
        }
        let glsl = glsl.unwrap_or_else(|e| panic!("GLSL of `{}`: {e}", k.name));
        let path = base.with_extension("comp");
        std::fs::write(&path, &glsl).expect("writing a temporary file");
        run("glslangValidator", &["-S", "comp"], &path, &glsl);
        let _ = std::fs::remove_file(&path);
    }
}

/// Whether NVRTC can be loaded; a panic saying why not when `KILN_REQUIRE` names `nvrtc`.
pub fn nvrtc_present() -> bool {
    match kiln_cuda::nvrtc_available() {
        Ok(()) => true,
        Err(e) if required().iter().any(|r| r == "nvrtc") => {
            panic!("KILN_REQUIRE names nvrtc, but {e}")
        }
        Err(_) => false,
    }
}

/// Compiles one kernel to PTX with NVRTC and assembles it for sm_90 with ptxas, when they are
/// present (both required when `KILN_REQUIRE` names `nvrtc`).
pub fn cuda_check_kernel(k: &kiln::ir::Kernel) {
    if !nvrtc_present() {
        return;
    }
    let (nvrtc, assemble) = check_compilers();
    let compiled = kiln_cuda::compile_ptx_with(nvrtc, k, "sm_90")
        .unwrap_or_else(|e| panic!("CUDA compile of `{}`: {e}", k.name));
    if assemble {
        kiln_cuda::assemble(&compiled, &k.name, "sm_90")
            .unwrap_or_else(|e| panic!("ptxas of `{}`: {e}", k.name));
    }
}

/// The NVRTC the compile checks use and whether they assemble its PTX: with a `ptxas`, the
/// newest NVRTC of at most ptxas's major version (a ptxas cannot read a newer NVRTC's PTX);
/// without one, or without an NVRTC that old, the newest NVRTC, unassembled (which
/// `KILN_REQUIRE=nvrtc` refuses). Call only
/// where [`nvrtc_present`] is true.
pub fn check_compilers() -> (&'static kiln_cuda::Nvrtc, bool) {
    static CHOICE: std::sync::OnceLock<(kiln_cuda::Nvrtc, bool)> = std::sync::OnceLock::new();
    let (nvrtc, assemble) = CHOICE.get_or_init(|| {
        let ptxas = kiln_cuda::find_ptxas();
        let major = ptxas
            .as_deref()
            .and_then(kiln_cuda::ptxas_version)
            .map(|v| v.0);
        if ptxas.is_none() && required().iter().any(|r| r == "nvrtc") {
            panic!("KILN_REQUIRE names nvrtc, but no ptxas is on PATH (or KILN_PTXAS)");
        }
        match kiln_cuda::Nvrtc::load(major) {
            Ok(nvrtc) => (nvrtc, ptxas.is_some()),
            Err(e) if required().iter().any(|r| r == "nvrtc") => {
                panic!("KILN_REQUIRE names nvrtc, but no NVRTC for ptxas of CUDA {major:?}: {e}")
            }
            Err(e) => {
                println!("PTX left unassembled: no NVRTC for ptxas of CUDA {major:?}: {e}");
                let nvrtc = kiln_cuda::Nvrtc::load(None).unwrap_or_else(|e| panic!("{e}"));
                (nvrtc, false)
            }
        }
    });
    (nvrtc, *assemble)
}

/// The documented accuracy of a math function on the current backend, in ulps of f32: 2
/// everywhere except Vulkan drivers through wgpu (README, float accuracy).
pub fn ulp_bound(name: &str) -> u32 {
    match ctx().device().backend {
        // kiln's own math library (crates/kiln-cpu/src/mathlib.rs).
        kiln::BackendKind::Cpu => 2,
        // The OpenCL C 1.2 full profile's bounds (PoCL stays within 3).
        kiln::BackendKind::OpenCl => match name {
            "sin" | "cos" | "asin" | "acos" | "sinh" | "cosh" => 4,
            "tan" | "atan" | "tanh" => 5,
            "atan2" => 6,
            "pow" => 16,
            "sqrt" => 0,
            _ => 3,
        },
        // NVIDIA's table of single-precision maximum ulp errors (CUDA programming guide).
        kiln::BackendKind::Cuda => match name {
            "ln" | "log2" => 1,
            "tan" | "pow" => 4,
            "sinh" | "atan2" => 3,
            "sqrt" => 0,
            _ => 2,
        },
        // kiln's own functions everywhere but exp2 and pow, which stay the driver's.
        kiln::BackendKind::Wgpu => match name {
            "exp2" | "pow" => 16,
            _ => 4,
        },
    }
}

/// The largest |x| at which the suite holds `sin`, `cos` and `tan` to [`ulp_bound`] on the
/// current backend: every finite f32, except on wgpu, where they are the driver's and Vulkan
/// bounds them only near zero (lavapipe: 3 ulps up to 1000, 9 up to 1e5, thousands past 1e6).
pub fn trig_range() -> f32 {
    match ctx().device().backend {
        kiln::BackendKind::Wgpu => 1000.0,
        _ => f32::MAX,
    }
}

/// A runner of `KILN_PROPTEST_CASES` cases (`default` without it), the same ones on every run
/// unless `KILN_PROPTEST_RANDOM` is set. A random run writes its seed to stderr (past the test
/// harness's capture, so a run that hangs shows it too); `KILN_PROPTEST_SEED` runs a seed's
/// cases again.
pub fn proptest_runner(default: u32) -> TestRunner {
    let cases = std::env::var("KILN_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let seed = match std::env::var("KILN_PROPTEST_SEED") {
        Ok(s) => Some(
            s.parse::<u64>()
                .expect("KILN_PROPTEST_SEED must be a whole number"),
        ),
        Err(_) if std::env::var_os("KILN_PROPTEST_RANDOM").is_some() => {
            use std::hash::{BuildHasher, Hasher};
            Some(
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish(),
            )
        }
        Err(_) => None,
    };
    let Some(seed) = seed else {
        return TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    };
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "proptest seed {seed} (KILN_PROPTEST_SEED={seed} runs these cases again)"
    );
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// The name libtest knows the test `name` of module `module` (its `module_path!()`) by, for a
/// test that runs itself again in a child process with `--exact`.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}
