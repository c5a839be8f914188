//! Compile options: fast math per context and per kernel, launch bounds and a register
//! limit, on every backend, against plain Rust; typed errors where a backend has no such
//! option; the options as part of every cache key; and what CUDA makes of them (the source,
//! the NVRTC options, the PTX).

use crate::common::{ctx, every_backend, nvrtc_present};
use kiln::lang::*;
use kiln::{BackendError, CompileOptions, Error};

#[kiln::kernel]
fn ratio(i: Index1D, x: View<f32>, out: ViewMut<f32>) {
    out[i] = (x[i] * 1.7 + 0.3).sqrt() / (x[i] + 2.0);
}

/// Cancels the large constant exactly with reassociation, and to zero without: `x + 1e8`
/// rounds to 1e8 for small `x`.
#[kiln::kernel]
fn cancel(i: Index1D, x: View<f32>, out: ViewMut<f32>) {
    out[i] = (x[i] + 100000000.0) - 100000000.0;
}

#[kiln::kernel]
fn triple(i: Index1D, x: ViewMut<i32>) {
    x[i] = x[i] * 3i32 - 1i32;
}

/// `ratio` in plain Rust, in f32 and in f64.
fn ratio_f32(x: f32) -> f32 {
    (x * 1.7 + 0.3).sqrt() / (x + 2.0)
}
fn ratio_f64(x: f32) -> f64 {
    let x = x as f64;
    (x * 1.7f32 as f64 + 0.3f32 as f64).sqrt() / (x + 2.0)
}

fn inputs(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.37 + 0.001).collect()
}

/// Within the accuracy relaxed math keeps on these operands (a few ulps of f32).
fn close(got: &[f32], xs: &[f32], at: &str) {
    for (i, (&g, &x)) in got.iter().zip(xs).enumerate() {
        let want = ratio_f64(x);
        let err = (g as f64 - want).abs() / want.abs();
        assert!(err < 1e-5, "{at}: element {i} (x = {x}): {g} vs {want}");
    }
}

fn is_unsupported(r: &kiln::Result<()>, what: &str) -> bool {
    matches!(r, Err(Error::Backend(BackendError::Unsupported { feature, .. })) if feature.contains(what))
}

#[test]
fn fast_math_per_kernel_runs_within_accuracy_or_is_refused_by_name() {
    every_backend(|| {
        let c = ctx();
        let xs = inputs(3001);
        let fast = ratio().with_options(CompileOptions::new().fast_math(true));
        let mut out = vec![-1.0f32; xs.len()];
        let r = c.launch(fast, xs.len(), (&xs, &mut out));
        if c.device().features.fast_math {
            r.unwrap();
            close(&out, &xs, "fast kernel");
        } else {
            assert!(is_unsupported(&r, "fast math"), "{r:?}");
            assert!(out.iter().all(|&v| v == -1.0), "nothing ran");
        }
        // The same kernel without the option keeps IEEE results.
        c.launch(ratio, xs.len(), (&xs, &mut out)).unwrap();
        close(&out, &xs, "plain kernel");
        // Off for one kernel where the context turns it on.
        if c.device().features.fast_math {
            c.set_compile_options(CompileOptions::new().fast_math(true))
                .unwrap();
            let exact = ratio().with_options(CompileOptions::new().fast_math(false));
            let built = |s: kiln::Stats| s.compilations + s.disk_hits;
            let before = built(c.stats());
            c.launch(exact, xs.len(), (&xs, &mut out)).unwrap();
            assert_eq!(built(c.stats()), before + 1, "a kernel of its own");
            let want: Vec<f32> = xs.iter().map(|&x| ratio_f32(x)).collect();
            assert_eq!(out, want, "fast math off for this kernel: plain Rust's f32");
            c.set_compile_options(CompileOptions::new()).unwrap();
        }
    });
}

#[test]
fn fast_math_lets_the_compiler_reassociate() {
    every_backend(|| {
        let c = ctx();
        let xs = vec![1.5f32, 0.25, 3.0, -2.0];
        let ieee: Vec<f32> = xs
            .iter()
            .map(|&x| (x + 100000000.0) - 100000000.0)
            .collect();
        assert_eq!(ieee, [0.0; 4], "plain Rust rounds x + 1e8 to 1e8");
        let mut out = vec![f32::NAN; xs.len()];
        c.launch(cancel, xs.len(), (&xs, &mut out)).unwrap();
        // Vulkan lets wgpu's drivers reassociate always (README, float accuracy on wgpu).
        if c.device().backend != kiln::BackendKind::Wgpu {
            assert_eq!(
                out, ieee,
                "without fast math, IEEE rounding as in plain Rust"
            );
        }
        if !c.device().features.fast_math {
            return;
        }
        let fast = cancel().with_options(CompileOptions::new().fast_math(true));
        c.launch(fast, xs.len(), (&xs, &mut out)).unwrap();
        for (&o, &x) in out.iter().zip(&xs) {
            assert!(
                o == 0.0 || o == x,
                "either rounding or reassociation: {o} for {x}"
            );
        }
        // PoCL's compiler folds `(x + c) - c` to `x` under -cl-fast-relaxed-math: the option
        // reached it.
        if c.device().name.starts_with("pthread") {
            assert_eq!(out, xs, "PoCL reassociates under fast math");
        }
    });
}

#[test]
fn fast_math_per_context_reaches_queries_and_keys_the_caches() {
    every_backend(|| {
        let c = ctx();
        let xs = inputs(2049);
        let query = || {
            c.from(&xs)
                .map(|x| (x * 1.7 + 0.3).sqrt() / (x + 2.0))
                .to_vec()
        };
        let exact = query().unwrap();
        close(&exact, &xs, "before");
        let fast = CompileOptions::new().fast_math(true);
        if !c.device().features.fast_math {
            let r = c.set_compile_options(fast);
            assert!(is_unsupported(&r, "fast math"), "{r:?}");
            assert_eq!(c.compile_options(), CompileOptions::new(), "unchanged");
            return;
        }
        c.set_compile_options(fast).unwrap();
        assert_eq!(c.compile_options(), fast);
        let plan = c.from(&xs).map(|x| x + 1.0).explain();
        assert!(
            plan.contains("\ncompile options: fast_math = true\n"),
            "{plan}"
        );
        let built = |s: kiln::Stats| s.compilations + s.disk_hits;
        let before = built(c.stats());
        let relaxed = query().unwrap();
        assert!(
            built(c.stats()) > before,
            "the same query under other options compiles again (or loads from the disk cache)"
        );
        close(&relaxed, &xs, "fast math");
        // Back to the default: the first plan, from the plan cache, with its IEEE results.
        c.set_compile_options(CompileOptions::new()).unwrap();
        let (compiled, hits) = (built(c.stats()), c.stats().plan_hits);
        assert_eq!(query().unwrap(), exact);
        assert_eq!(built(c.stats()), compiled);
        assert_eq!(c.stats().plan_hits, hits + 1);
    });
}

#[test]
fn launch_bounds_bound_every_launch_and_key_the_cache() {
    every_backend(|| {
        let c = ctx();
        let bounded = triple().with_options(CompileOptions::new().launch_bounds(64));
        let start: Vec<i32> = (0..1000).map(|i| i * 7 - 3000).collect();
        let want: Vec<i32> = start.iter().map(|&x| x * 3 - 1).collect();
        let built = |s: kiln::Stats| s.compilations + s.disk_hits;
        let before = built(c.stats());
        let mut x = start.clone();
        c.launch(bounded, x.len(), (&mut x,)).unwrap();
        assert_eq!(x, want, "launch picks groups within the bounds");
        let mut x = start.clone();
        c.launch(triple, x.len(), (&mut x,)).unwrap();
        assert_eq!(x, want);
        assert_eq!(
            built(c.stats()),
            before + 2,
            "bounded and unbounded are two kernels"
        );
        let mut x = start.clone();
        let r = c.launch_grouped(bounded, 8u32, 128u32, (&mut x,));
        assert!(
            matches!(&r, Err(Error::Backend(BackendError::InvalidLaunch { reason, .. })) if reason.contains("launch bounds (64)")),
            "{r:?}"
        );
        assert_eq!(x, start, "nothing ran");
        c.launch_grouped(bounded, 16u32, 64u32, (&mut x,)).unwrap();
        assert_eq!(x, want);
        // Launch bounds belong to a kernel, not to a context; zero bounds nothing.
        let r = c.set_compile_options(CompileOptions::new().launch_bounds(64));
        assert!(matches!(r, Err(Error::Unsupported { .. })), "{r:?}");
        let zero = triple().with_options(CompileOptions::new().launch_bounds(0));
        let r = c.launch(zero, x.len(), (&mut x,));
        assert!(matches!(r, Err(Error::Ir(_))), "{r:?}");
    });
}

#[test]
fn a_register_limit_is_taken_where_the_compiler_has_one() {
    every_backend(|| {
        let c = ctx();
        let limited = triple().with_options(CompileOptions::new().max_registers(32));
        let mut x: Vec<i32> = (0..77).collect();
        let r = c.launch(limited, x.len(), (&mut x,));
        let set = c.set_compile_options(CompileOptions::new().max_registers(32));
        if c.device().features.register_limit {
            r.unwrap();
            set.unwrap();
            assert!(x.iter().enumerate().all(|(i, &v)| v == i as i32 * 3 - 1));
            c.set_compile_options(CompileOptions::new()).unwrap();
        } else {
            assert!(is_unsupported(&r, "register limit"), "{r:?}");
            assert!(is_unsupported(&set, "register limit"), "{set:?}");
        }
    });
}

#[test]
fn options_are_part_of_the_kernel_hash_and_listing() {
    let plain = ratio().ir().unwrap();
    let fast = ratio()
        .with_options(CompileOptions::new().fast_math(true))
        .ir()
        .unwrap();
    assert_ne!(kiln::ir::kernel_hash(&plain), kiln::ir::kernel_hash(&fast));
    assert_eq!(plain.body, fast.body, "the same IR otherwise");
    let listing = kiln::ir::print_kernel(&fast);
    assert!(
        listing.contains("#[options(fast_math = true)]"),
        "{listing}"
    );
    assert!(!kiln::ir::print_kernel(&plain).contains("#[options"));
}

/// CUDA: launch bounds in the source, fast math and a register limit in NVRTC's options,
/// and each in the PTX (compiled with NVRTC and assembled with ptxas here, without a GPU).
#[test]
fn cuda_compiles_the_options_into_source_and_ptx() {
    if !nvrtc_present() {
        return;
    }
    let (nvrtc, assemble) = crate::common::check_compilers();
    let ptx = |o: CompileOptions| {
        let k = ratio().with_options(o).ir().unwrap();
        let c = kiln_cuda::compile_ptx_with(nvrtc, &k, "sm_90").unwrap();
        if assemble {
            kiln_cuda::assemble(&c, &k.name, "sm_90").unwrap();
        }
        c
    };
    let plain = ptx(CompileOptions::new());
    assert!(plain.ptx.contains("div.rn.f32"), "{}", plain.ptx);
    assert!(plain.ptx.contains("sqrt.rn.f32"), "{}", plain.ptx);
    assert!(!plain.source.text.contains("__launch_bounds__"));
    let fast = ptx(CompileOptions::new().fast_math(true));
    assert!(!fast.ptx.contains("div.rn.f32"), "{}", fast.ptx);
    assert!(fast.ptx.contains("sqrt.approx"), "{}", fast.ptx);
    let bounded = ptx(CompileOptions::new().launch_bounds(128));
    assert!(
        bounded
            .source
            .text
            .contains("__global__ void __launch_bounds__(128) ratio("),
        "{}",
        bounded.source.text
    );
    assert!(
        bounded.ptx.contains(".maxntid 128, 1, 1"),
        "{}",
        bounded.ptx
    );
    let limited = ptx(CompileOptions::new().max_registers(24));
    assert!(limited.ptx.contains(".maxnreg 24"), "{}", limited.ptx);
    // Both: CUDA C states one per kernel, so the limit goes to NVRTC for the cubin.
    let both = CompileOptions::new().max_registers(40).launch_bounds(256);
    assert!(kiln_cuda::nvrtc_options(&both).contains(&"--maxrregcount=40".to_string()));
    let both_ptx = ptx(both);
    assert!(
        both_ptx.ptx.contains(".maxntid 256, 1, 1"),
        "{}",
        both_ptx.ptx
    );
    let k = ratio().with_options(both).ir().unwrap();
    let source = kiln_cuda::write_cuda(&k).unwrap();
    let cubin = nvrtc.compile(
        &k.name,
        &source.text,
        "sm_90",
        &kiln_cuda::nvrtc_options(&both),
        kiln_cuda::Output::Cubin,
    );
    assert!(cubin.is_ok_and(|c| c.starts_with(b"\x7fELF")));
}
