//! The kernel cache and the structural hash that keys it.

use crate::common;
use kiln::ir::*;
use kiln::prelude::*;
use std::sync::Barrier;

fn sample_kernel(scale: f32) -> Kernel {
    Kernel::build("scale", |k| {
        let x = k.buffer::<f32>("x", Access::Read);
        let y = k.buffer::<f32>("y", Access::Write);
        let i = global_id(Axis::X);
        if_then(i.lt(x.len()), || y.store(i, x.load(i) * scale));
    })
    .unwrap()
}

#[test]
fn sixteen_threads_running_a_new_query_at_once_compile_it_once() {
    let ctx = Context::new().unwrap();
    let xs: Vec<f32> = (0..50_000).map(|i| i as f32).collect();
    let start = Barrier::new(16);
    let results: Vec<f32> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    ctx.from(&xs)
                        .map(|x| x * 0.5)
                        .filter(|x| x.gt(100.0))
                        .sum()
                        .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let want: f64 = xs
        .iter()
        .map(|x| x * 0.5)
        .filter(|x| *x > 100.0)
        .map(|x| x as f64)
        .sum();
    for r in &results {
        assert_eq!(
            r.to_bits(),
            results[0].to_bits(),
            "same answer on every thread"
        );
        let rel = ((*r as f64) - want).abs() / want;
        assert!(
            rel < 1e-4,
            "{r} vs {want}: relative error {rel} (f32 accumulation bound)"
        );
    }
    let stats = ctx.stats();
    // Compiled, or loaded from a disk cache a run before filled (CUDA, OpenCL).
    assert_eq!(
        stats.compilations + stats.disk_hits,
        2,
        "partials and final kernels, each compiled (or loaded) once"
    );
    assert_eq!(stats.launches, 32);
    assert_eq!(ctx.cache().len(), 2);
}

#[test]
fn identical_kernels_hash_equal_and_any_change_changes_the_hash() {
    let a = kernel_hash(&sample_kernel(2.0));
    assert_eq!(a, kernel_hash(&sample_kernel(2.0)));
    assert_ne!(a, kernel_hash(&sample_kernel(3.0)));
    assert_ne!(
        kernel_hash(&sample_kernel(0.0)),
        kernel_hash(&sample_kernel(-0.0))
    );
    let renamed = Kernel {
        name: "scale2".into(),
        ..sample_kernel(2.0)
    };
    assert_ne!(a, kernel_hash(&renamed));
}

/// The hash is the same in another process: the test re-runs itself as a child that prints
/// the hash of the same kernel.
#[test]
fn the_hash_is_stable_across_processes() {
    let here = kernel_hash(&sample_kernel(1.25)).to_string();
    if std::env::var("KILN_HASH_CHILD").is_ok() {
        println!("HASH={here}");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(module_path!(), "the_hash_is_stable_across_processes").as_str(),
            "--nocapture",
        ])
        .env("KILN_HASH_CHILD", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let child = text
        .lines()
        .find_map(|l| l.strip_prefix("HASH="))
        .unwrap_or_else(|| panic!("child printed no hash: {text}"));
    assert_eq!(child, here);
    assert_eq!(here.len(), 32);
}

#[test]
fn validation_errors_say_what_where_and_why() {
    let e = Kernel::build("bad_store", |k| {
        let x = k.buffer::<f32>("x", Access::Read);
        x.store(0u32, 1.0f32);
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("kernel `bad_store`")
            && e.to_string()
                .contains("declared Read and may not be written"),
        "{e}"
    );
    let e = Kernel::build("bad_break", |_| break_()).unwrap_err();
    assert!(e.to_string().contains("outside a loop"), "{e}");
    let mut smuggled = None;
    Kernel::build("first", |_| smuggled = Some(global_id(Axis::X))).unwrap();
    let e = Kernel::build("second", |k| {
        let y = k.buffer::<u32>("y", Access::Write);
        y.store(0u32, smuggled.unwrap());
    })
    .unwrap_err();
    assert!(e.to_string().contains("another kernel"), "{e}");
    let outside = lit(2u32);
    let e = Kernel::build("third", |k| {
        let y = k.buffer::<u32>("y", Access::Write);
        y.store(0u32, outside + 1u32);
    })
    .unwrap_err();
    assert!(e.to_string().contains("outside any"), "{e}");
    let e = Kernel::build("mixed", |_| {
        let a = lit(1.0f32).erase();
        let b = lit(1u32).erase();
        expr_dyn(
            Expr::Binary {
                op: BinaryOp::Add,
                lhs: a.handle(),
                rhs: b.handle(),
            },
            &[&a, &b],
            Type::Scalar(ScalarType::F32),
        );
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("operands of `+` differ: f32 and u32"),
        "{e}"
    );
    assert!(e.location.contains("expression %2"), "{e:?}");
    // A statement deep in the body is named by its path from the body.
    let mut nested = Kernel::build("nested", |k| {
        let out = k.buffer::<u32>("out", Access::Write);
        let i = global_id(Axis::X);
        loop_(|| {
            if_then(i.gt(3u32), || out.store(i, 1u32));
            break_();
        });
    })
    .unwrap();
    let Stmt::Loop { body, .. } = &mut nested.body.block.0[1] else {
        panic!("{:?}", nested.body.block)
    };
    let Stmt::If { accept, .. } = &mut body.0[2] else {
        panic!("{body:?}")
    };
    accept.0.insert(0, Stmt::Break);
    accept.0.insert(0, Stmt::Continue);
    accept.0.push(Stmt::Eval(Handle(0)));
    let e = kiln::ir::validate(&nested).unwrap_err();
    assert_eq!(
        e.location, "stmt 1 > loop body > stmt 2 > if > stmt 4",
        "{e}"
    );
    assert!(e.message.contains("computed twice"), "{e}");
    let e = Kernel::build("bad name", |_| {}).unwrap_err();
    assert!(e.to_string().contains("not an identifier"), "{e}");
    let e = Kernel::build("uses_barrier_in_fn", |_| {
        device_fn::<u32>("helper", &[], false, |_| {
            barrier();
            lit(1u32)
        });
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("barriers are allowed in kernels only"),
        "{e}"
    );
}

#[test]
fn invalid_hand_built_ir_is_an_error_from_the_context() {
    let mut k = sample_kernel(1.0);
    k.body.block.0.push(Stmt::Eval(Handle(999)));
    let ctx = Context::new().unwrap();
    let e = ctx.compile(&k).err().expect("invalid IR must not compile");
    assert!(matches!(e, Error::Ir(_)), "{e}");
    assert!(e.to_string().contains("%999 does not exist"), "{e}");
}

#[test]
fn printer_lists_one_line_per_statement() {
    let text = print_kernel(&sample_kernel(2.0));
    assert!(
        text.starts_with("kernel scale(x: buffer<f32, read>, y: buffer<f32, write>) {"),
        "{text}"
    );
    assert!(text.contains("global_id.x"), "{text}");
    assert!(text.contains("store y[%0] = "), "{text}");
    assert_eq!(text.lines().filter(|l| l.contains("store")).count(), 1);
}

/// A loop of histograms with a new bin count per call builds a new kernel each time: with a
/// capacity of 16 the context keeps at most 16 kernels, frees the compiled code of those it
/// drops (the CPU backend's count of mapped kernels grows by far less than the 300 compiled),
/// and `clear_caches` empties both caches, after which the same query compiles again.
#[test]
fn caches_stay_within_their_capacity_and_free_what_they_drop() {
    let ctx = Context::with_backend(kiln::BackendKind::Cpu).unwrap();
    ctx.set_cache_capacity(16);
    let xs: Vec<u32> = (0..2000u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 20)
        .collect();
    let mapped_before = kiln_cpu::live_compiled_kernels();
    for bins in 1..=300u32 {
        let mut want = vec![0u32; bins as usize];
        xs.iter()
            .filter(|&&x| x < bins)
            .for_each(|&x| want[x as usize] += 1);
        assert_eq!(ctx.from(&xs).histogram(bins).unwrap(), want, "{bins} bins");
        assert!(
            ctx.cache().len() <= 16,
            "{} kernels cached",
            ctx.cache().len()
        );
    }
    let grown = kiln_cpu::live_compiled_kernels().saturating_sub(mapped_before);
    // Other tests of this binary may compile kernels meanwhile; without freeing, all 300
    // would stay mapped.
    assert!(
        grown < 150,
        "{grown} more compiled kernels mapped after 300 compiles"
    );
    let q = || ctx.from(&xs).histogram(7).unwrap();
    let first = q();
    let compiled = ctx.stats().compilations;
    assert_eq!(q(), first);
    assert_eq!(ctx.stats().compilations, compiled, "cached");
    ctx.clear_caches();
    assert_eq!(ctx.cache().len(), 0);
    assert_eq!(q(), first);
    assert!(
        ctx.stats().compilations + ctx.stats().disk_hits > compiled,
        "compiled (or loaded) again after clear_caches"
    );
}
