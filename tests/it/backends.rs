//! Backend presence: every backend named in `KILN_REQUIRE` (comma-separated) must open, and
//! `nvrtc` there requires the CUDA compiler (and `validators` spirv-val and glslangValidator,
//! checked by the conformance harness), and `gl` a wgpu adapter on GL; a missing one fails
//! here with the reason.

use crate::common;

use kiln::{BackendKind, Context};

#[test]
fn required_backends_are_present() {
    let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
    for name in required.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if name == "nvrtc" {
            kiln_cuda::nvrtc_available()
                .unwrap_or_else(|e| panic!("KILN_REQUIRE names nvrtc: {e}"));
            continue;
        }
        if name == "validators" {
            continue;
        }
        if name == "gl" {
            let on_gl = (0..)
                .map_while(|i| Context::with_device(BackendKind::Wgpu, i).ok())
                .any(|c| c.device().name.ends_with("(GL)"));
            assert!(
                on_gl,
                "KILN_REQUIRE names gl, but wgpu finds no adapter on GL (it needs libEGL.so.1 \
                 and a GL driver: Mesa's libegl-mesa0 and libgl1-mesa-dri on Debian)"
            );
            continue;
        }
        let kind = BackendKind::parse(name)
            .unwrap_or_else(|| panic!("KILN_REQUIRE names unknown backend `{name}`"));
        match Context::with_backend(kind) {
            Ok(ctx) => assert_eq!(ctx.device().backend, kind),
            Err(e) => panic!("KILN_REQUIRE names {name}, but it cannot be opened: {e}"),
        }
    }
}

#[test]
fn the_cpu_backend_describes_itself() {
    let ctx = Context::with_backend(BackendKind::Cpu).unwrap();
    let d = ctx.device();
    assert_eq!(d.backend, BackendKind::Cpu);
    assert!(d.compute_units >= 1);
    assert!(d.features.f64 && d.features.atomics64);
    assert_eq!(d.subgroup_size, 1);
}

fn scale_kernel() -> kiln::ir::Kernel {
    use kiln::ir::*;
    Kernel::build("scale", |k| {
        let x = k.buffer::<f32>("x", Access::Read);
        let y = k.buffer::<f32>("y", Access::Write);
        let i = global_id(Axis::X);
        if_then(i.lt(x.len()), || y.store(i, x.load(i) * 2.0 + 1.0));
    })
    .unwrap()
}

#[test]
fn nvrtc_compiles_kernels_to_ptx_for_sm_90_when_present() {
    if !common::nvrtc_present() {
        return;
    }
    // The NVRTC whose PTX the ptxas found assembles (a CUDA 12 ptxas cannot read CUDA 13 PTX).
    let (nvrtc, assemble) = common::check_compilers();
    let c = kiln_cuda::compile_ptx_with(nvrtc, &scale_kernel(), "sm_90").unwrap();
    assert!(c.ptx.contains(".target sm_90"), "{}", c.ptx);
    assert!(c.ptx.contains(".entry scale("), "{}", c.ptx);
    assert!(
        c.source
            .text
            .contains("extern \"C\" __global__ void scale("),
        "{}",
        c.source.text
    );
    if assemble {
        kiln_cuda::assemble(&c, "scale", "sm_90").unwrap();
        let bad = kiln_cuda::assemble(&c, "scale", "sm_1");
        assert!(
            matches!(bad, Err(kiln::BackendError::Compile { .. })),
            "ptxas rejects an unknown architecture"
        );
    }
}

#[test]
fn emit_gives_the_source_of_every_target() {
    let ctx = Context::with_backend(BackendKind::Cpu).unwrap();
    let xs = vec![1f32, 2.0, 3.0];
    let q = ctx.from(&xs).map(|x| x.sqrt() * 2.0);
    let ir = q.emit(kiln::Target::Ir).unwrap();
    let cl = q.emit(kiln::Target::OpenClC).unwrap();
    let cu = q.emit(kiln::Target::CudaC).unwrap();
    assert!(
        ir.contains("kernel query_map(") && ir.contains("sqrt("),
        "{ir}"
    );
    assert!(
        cl.contains("__kernel void query_map(") && cl.contains("sqrt("),
        "{cl}"
    );
    assert!(
        cu.contains("extern \"C\" __global__ void query_map(") && cu.contains("sqrtf("),
        "{cu}"
    );
    let wgsl = q.emit(kiln::Target::Wgsl).unwrap();
    assert!(
        wgsl.contains("fn query_map(") && wgsl.contains("sqrt("),
        "{wgsl}"
    );
    let msl = q.emit(kiln::Target::Msl).unwrap();
    assert!(
        msl.contains("kernel void query_map(") && msl.contains("metal::sqrt("),
        "{msl}"
    );
    let hlsl = q.emit(kiln::Target::Hlsl).unwrap();
    assert!(
        hlsl.contains("[numthreads(64, 1, 1)]") && hlsl.contains("sqrt("),
        "{hlsl}"
    );
    let glsl = q.emit(kiln::Target::Glsl).unwrap();
    assert!(
        glsl.contains("#version 430") && glsl.contains("local_size_x = 64"),
        "{glsl}"
    );
    let spirv = q.emit(kiln::Target::SpirV).unwrap();
    assert!(spirv.starts_with("; SPIR-V, "), "{spirv}");
    let words = kiln::emit_spirv(&scale_kernel()).unwrap();
    assert_eq!(words[0], 0x0723_0203, "the SPIR-V magic number");
    let mut bad = scale_kernel();
    bad.body.block.0.push(kiln::ir::Stmt::Break);
    assert!(matches!(
        kiln::emit(&bad, kiln::Target::CudaC),
        Err(kiln::Error::Ir(_))
    ));
}

#[test]
fn devices_lists_every_device_and_each_opens_by_its_index() {
    let devices = Context::devices();
    assert_eq!(devices[0].backend, BackendKind::Cpu);
    for kind in [
        BackendKind::Cpu,
        BackendKind::Cuda,
        BackendKind::OpenCl,
        BackendKind::Wgpu,
    ] {
        let listed: Vec<_> = devices.iter().filter(|d| d.backend == kind).collect();
        let indices: Vec<u32> = listed.iter().map(|d| d.index).collect();
        assert_eq!(
            indices,
            (0..listed.len() as u32).collect::<Vec<_>>(),
            "{kind}"
        );
        for d in &listed {
            // A device its driver reports but that does not open says why, and opening it
            // gives that error.
            if let Some(reason) = &d.unusable {
                assert!(!reason.is_empty(), "{d:?}");
                assert!(Context::with_device(kind, d.index).is_err(), "{d:?}");
                continue;
            }
            assert!(!d.name.is_empty() && d.max_group_size >= 1, "{d:?}");
            let ctx = Context::with_device(kind, d.index).unwrap();
            assert_eq!(
                (ctx.device().backend, ctx.device().index, &ctx.device().name),
                (kind, d.index, &d.name)
            );
            // A query on this very device gives the plain loop's answer.
            let xs: Vec<i32> = (0..1000).map(|i| i * 7 % 101 - 50).collect();
            let want: i32 = xs.iter().filter(|&&x| x > 0).map(|&x| x * 3).sum();
            let got = ctx
                .from(&xs)
                .filter(|x| x.gt(0))
                .map(|x| x * 3)
                .sum()
                .unwrap();
            assert_eq!(got, want, "{d:?}");
        }
        if listed.is_empty() {
            continue;
        }
        // One past the last device is a typed error naming the backend and the count, and the
        // backend's other devices still open afterwards.
        let past = listed.len() as u32;
        match Context::with_device(kind, past) {
            Err(kiln::Error::Backend(kiln::BackendError::NoSuchDevice {
                backend,
                index,
                count,
            })) => assert_eq!((backend, index, count), (kind, past, past)),
            other => panic!("{kind} device {past}: {other:?}"),
        }
        assert!(Context::with_device(kind, 0).is_ok());
    }
    let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
    if required.contains("opencl") {
        let cl = devices
            .iter()
            .find(|d| d.backend == BackendKind::OpenCl)
            .expect("OpenCL is required");
        assert!(cl.memory_bytes > 0 && cl.compute_units >= 1, "{cl:?}");
    }
    if required.contains("wgpu") {
        assert!(devices.iter().any(|d| d.backend == BackendKind::Wgpu));
    }
}

/// `KILN_BACKEND=name:index` picks a device by index, and an index that is not a number is
/// refused by name: the test re-runs itself as a child with the variable set.
#[test]
fn kiln_backend_takes_a_device_index() {
    if let Ok(expect) = std::env::var("KILN_BACKEND_CHILD") {
        let result = Context::new();
        match expect.as_str() {
            "cpu0" => assert_eq!(result.unwrap().device().backend, BackendKind::Cpu),
            "cpu1" => assert!(matches!(
                result,
                Err(kiln::Error::Backend(kiln::BackendError::NoSuchDevice {
                    backend: BackendKind::Cpu,
                    index: 1,
                    count: 1
                }))
            )),
            _ => assert!(matches!(result, Err(kiln::Error::UnknownBackend(_)))),
        }
        return;
    }
    for (value, expect) in [
        ("cpu:0", "cpu0"),
        ("CPU", "cpu0"),
        ("cpu:1", "cpu1"),
        ("cpu:x", "unknown"),
        ("gpu:0", "unknown"),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                common::test_path(module_path!(), "kiln_backend_takes_a_device_index").as_str(),
                "--exact",
                "--nocapture",
            ])
            .env("KILN_BACKEND", value)
            .env("KILN_BACKEND_CHILD", expect)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "KILN_BACKEND={value}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `KILN_LOG=kernels` prints each generated source once, when it is compiled: the test re-runs
/// itself as a child with the variable set and reads the child's stderr.
#[test]
fn kiln_log_kernels_prints_each_source_once() {
    if std::env::var_os("KILN_LOG_CHILD").is_some() {
        let xs = vec![1f32, 2.0];
        for ctx in [
            Context::with_backend(BackendKind::Cpu).ok(),
            Context::with_backend(BackendKind::OpenCl).ok(),
            Context::with_backend(BackendKind::Wgpu).ok(),
        ]
        .into_iter()
        .flatten()
        {
            for _ in 0..3 {
                ctx.from(&xs).map(|x| x * 3.0).to_vec().unwrap();
            }
        }
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(module_path!(), "kiln_log_kernels_prints_each_source_once").as_str(),
            "--nocapture",
        ])
        .env("KILN_LOG_CHILD", "1")
        .env("KILN_LOG", "kernels")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(
        err.matches("kiln cpu: kernel `query_map`").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("--- cranelift ---") && err.contains("function "),
        "{err}"
    );
    if Context::with_backend(BackendKind::OpenCl).is_ok() {
        assert_eq!(err.matches("__kernel void query_map(").count(), 1, "{err}");
    }
    if Context::with_backend(BackendKind::Wgpu).is_ok() {
        assert_eq!(err.matches("\nfn query_map(").count(), 1, "{err}");
    }
}

#[test]
fn an_allocation_larger_than_the_device_allows_is_a_typed_error() {
    for kind in [BackendKind::OpenCl, BackendKind::Cuda, BackendKind::Wgpu] {
        match Context::with_backend(kind) {
            Ok(ctx) => allocation_too_large(&ctx, kind),
            Err(e) => assert!(
                !std::env::var("KILN_REQUIRE")
                    .unwrap_or_default()
                    .contains(kind.name()),
                "{kind} is required: {e}"
            ),
        }
    }
}

fn allocation_too_large(ctx: &Context, kind: BackendKind) {
    let max = ctx.device().max_buffer_bytes;
    let k = scale_kernel();
    let n = (max / 4) as usize + 1024;
    // calloc'd: the pages are never touched, because the launch is refused before any copy.
    let huge = vec![0f32; n];
    let mut out = vec![0f32; 4];
    let r = ctx.launch_ir(
        &k,
        &kiln::Grid::linear(1, 4),
        &mut [
            kiln::LaunchArg::read(&huge),
            kiln::LaunchArg::read_write(&mut out),
        ],
    );
    match r {
        Err(kiln::Error::Backend(kiln::BackendError::OutOfMemory {
            backend,
            bytes,
            reason,
        })) if backend == kind => {
            assert_eq!(bytes, (n * 4) as u64);
            assert!(reason.contains("allows"), "{reason}");
        }
        // A device whose largest buffer holds more than u32::MAX f32s (PoCL on a machine with
        // 128 GiB, a GPU with 80 GiB) refuses the element count first, also typed.
        Err(kiln::Error::Backend(kiln::BackendError::InvalidLaunch {
            backend, reason, ..
        })) if backend == kind && n > u32::MAX as usize => {
            assert!(reason.contains("u32::MAX elements"), "{reason}");
        }
        other => panic!("expected OutOfMemory (largest buffer {max} bytes), got {other:?}"),
    }
    let small = vec![1f32, 2.0, 3.0, 4.0];
    ctx.launch_ir(
        &k,
        &kiln::Grid::linear(1, 4),
        &mut [
            kiln::LaunchArg::read(&small),
            kiln::LaunchArg::read_write(&mut out),
        ],
    )
    .unwrap();
    assert_eq!(
        out,
        vec![3.0, 5.0, 7.0, 9.0],
        "the context keeps working after the error"
    );
}

#[test]
fn nvrtc_compiles_kernels_to_cubins_and_returns_the_log_of_rejected_source() {
    let source = match kiln_cuda::write_cuda(&scale_kernel()) {
        Ok(s) => s,
        Err(e) => panic!("{e}"),
    };
    if let Err(e) = kiln_cuda::nvrtc_available() {
        let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
        assert!(!required.contains("nvrtc"), "NVRTC required but {e}");
        return;
    }
    let cubin = kiln_cuda::compile_cubin("scale", &source.text, "sm_90").unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
    let broken = source
        .text
        .replace("extern \"C\"", "extern \"C\" not_a_type");
    match kiln_cuda::compile_cubin("scale", &broken, "sm_90") {
        Err(kiln::BackendError::Compile {
            backend,
            kernel,
            log,
            source_text,
        }) => {
            assert_eq!(backend, BackendKind::Cuda);
            assert_eq!(kernel, "scale");
            assert!(log.contains("not_a_type"), "the log names the error: {log}");
            assert_eq!(source_text, broken);
        }
        other => panic!("NVRTC accepted broken source: {:?}", other.map(|c| c.len())),
    }
}

/// The NVRTC libraries `KILN_TEST_NVRTC_LIBS` lists (paths separated by `:`); `scripts/test.sh`
/// names CUDA 12's and CUDA 13's, and with `nvrtc` in `KILN_REQUIRE` both majors must be there.
fn nvrtc_libraries() -> Vec<kiln_cuda::Nvrtc> {
    let listed = std::env::var("KILN_TEST_NVRTC_LIBS").unwrap_or_default();
    let libs: Vec<kiln_cuda::Nvrtc> = listed
        .split(':')
        .filter(|p| !p.is_empty())
        .map(|p| kiln_cuda::Nvrtc::open(p).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
    if required.split(',').any(|r| r.trim() == "nvrtc") {
        for major in [12, 13] {
            assert!(
                libs.iter().any(|n| n.version().0 == major),
                "KILN_REQUIRE names nvrtc, but KILN_TEST_NVRTC_LIBS ({listed:?}) has no NVRTC {major}"
            );
        }
    }
    libs
}

#[test]
fn nvrtc_12_and_13_both_compile_kernels_to_cubins_and_ptx() {
    let source = kiln_cuda::write_cuda(&scale_kernel()).unwrap();
    for nvrtc in nvrtc_libraries() {
        let (major, minor) = nvrtc.version();
        let file = nvrtc.path().display().to_string();
        assert!(
            file.ends_with(&format!(".so.{major}")),
            "{file} is NVRTC {major}.{minor}"
        );
        assert!(nvrtc.supported_archs().contains(&90), "{file}");
        let options = &kiln_cuda::NVRTC_OPTIONS;
        let cubin = nvrtc
            .compile(
                "scale",
                &source.text,
                "sm_90",
                options,
                kiln_cuda::Output::Cubin,
            )
            .unwrap();
        assert_eq!(
            &cubin[..4],
            b"\x7fELF",
            "NVRTC {major}: a cubin is an ELF image"
        );
        let ptx = nvrtc
            .compile(
                "scale",
                &source.text,
                "compute_90",
                options,
                kiln_cuda::Output::Ptx,
            )
            .unwrap();
        let ptx = String::from_utf8(ptx).unwrap();
        assert!(
            ptx.contains(".target sm_90") && ptx.contains(".entry scale("),
            "{ptx}"
        );
        let broken = source.text.replace("x[", "x_missing[");
        match nvrtc.compile("scale", &broken, "sm_90", options, kiln_cuda::Output::Cubin) {
            Err(kiln::BackendError::Compile { log, .. }) => {
                assert!(log.contains("x_missing"), "NVRTC {major}'s log: {log}")
            }
            other => panic!(
                "NVRTC {major} accepted {broken}: {:?}",
                other.map(|b| b.len())
            ),
        }
    }
}

#[test]
fn a_device_newer_than_nvrtc_gets_ptx_for_the_newest_architecture_nvrtc_knows() {
    for nvrtc in nvrtc_libraries() {
        let archs = nvrtc.supported_archs().to_vec();
        let newest = *archs.iter().max().unwrap();
        let target = |cc| nvrtc.target_for(cc).unwrap();
        assert_eq!(target(90), ("sm_90".to_string(), kiln_cuda::Output::Cubin));
        assert_eq!(
            target(newest + 1),
            (format!("compute_{newest}"), kiln_cuda::Output::Ptx)
        );
        let oldest = *archs.iter().min().unwrap();
        match nvrtc.target_for(oldest - 1) {
            Err(kiln::BackendError::Unavailable { reason, .. }) => {
                assert!(reason.contains(&format!("sm_{}", oldest - 1)), "{reason}")
            }
            other => panic!("NVRTC compiles for a device older than it knows: {other:?}"),
        }
    }
}

#[test]
fn the_cuda_backend_opens_on_a_gpu_or_names_the_missing_library() {
    match Context::with_backend(BackendKind::Cuda) {
        Ok(ctx) => {
            let d = ctx.device();
            assert_eq!(d.backend, BackendKind::Cuda);
            assert_eq!(d.class, kiln::DeviceClass::Gpu);
            assert!(d.subgroup_size == 32 && d.memory_bytes > 0, "{d:?}");
            let xs: Vec<f32> = (0..10_000).map(|i| i as f32 * 0.5).collect();
            let got = ctx.from(&xs).map(|x| x * 2.0 + 1.0).to_vec().unwrap();
            let want: Vec<f32> = xs.iter().map(|x| x * 2.0 + 1.0).collect();
            assert_eq!(got, want);
        }
        Err(kiln::Error::Backend(kiln::BackendError::Unavailable {
            backend, library, ..
        })) => {
            assert_eq!(backend, BackendKind::Cuda);
            assert!(
                library == kiln_cuda::DRIVER_LIBRARY || library == kiln_cuda::NVRTC_LIBRARY,
                "{library}"
            );
            let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
            assert!(
                !required.split(',').any(|r| r.trim() == "cuda"),
                "KILN_REQUIRE names cuda but {library} is missing"
            );
            let cpu = Context::with_backend(BackendKind::Cpu).unwrap();
            assert_eq!(cpu.from(&[1i32, 2, 3]).sum().unwrap(), 6);
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn contexts_open_from_many_threads_at_once() {
    let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
    for name in required.split(',').map(str::trim) {
        let Some(kind) = BackendKind::parse(name) else {
            continue;
        };
        let barrier = std::sync::Barrier::new(8);
        let opened: Vec<Result<usize, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let ctx = Context::with_backend(kind).map_err(|e| e.to_string())?;
                        ctx.from(&[1u32, 2, 3, 4]).sum().map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().map(|s| s as usize))
                .collect()
        });
        for r in opened {
            assert_eq!(r, Ok(10), "{kind} opened from 8 threads at once");
        }
    }
}

/// Grids of 2^32 groups or more (65536 x 65536, 4096^3) crashed PoCL (SIGILL, then a failed
/// assertion in its scheduler); the OpenCL backend refuses them typed, and one of fewer groups
/// still runs.
#[test]
fn opencl_refuses_grids_of_more_than_u32_max_groups() {
    let Ok(ctx) = Context::with_backend(BackendKind::OpenCl) else {
        assert!(
            !std::env::var("KILN_REQUIRE")
                .unwrap_or_default()
                .contains("opencl"),
            "KILN_REQUIRE names opencl, but it cannot be opened"
        );
        return;
    };
    let k = kiln::ir::Kernel::build("first", |k| {
        use kiln::ir::*;
        let o = k.buffer::<u32>("o", Access::ReadWrite);
        if_then(global_id(Axis::X).eq(0u32), || o.store(0u32, 7u32));
    })
    .unwrap();
    for groups in [[65536, 65536, 1], [4096, 4096, 4096]] {
        let mut out = vec![0u32; 1];
        let grid = kiln::Grid {
            groups,
            group_size: [1, 1, 1],
            dynamic_shared: Vec::new(),
        };
        match ctx.launch_ir(&k, &grid, &mut [kiln::LaunchArg::read_write(&mut out)]) {
            Err(kiln::Error::Backend(kiln::BackendError::InvalidLaunch { reason, .. })) => {
                assert!(reason.contains("groups in all"), "{reason}")
            }
            other => panic!("{groups:?} groups: expected InvalidLaunch, got {other:?}"),
        }
    }
    let mut out = vec![0u32; 1];
    ctx.launch_ir(
        &k,
        &kiln::Grid::linear(3, 2),
        &mut [kiln::LaunchArg::read_write(&mut out)],
    )
    .unwrap();
    assert_eq!(out, [7]);
}

/// PoCL writes its compiler's warnings to stderr: kiln's kernels must compile without any
/// (argmin and argmax once compared integers with themselves as a NaN test, "16 warnings
/// generated."). The test runs a query of each terminal family in a child and reads its
/// stderr.
#[test]
fn opencl_compiles_kilns_kernels_without_warnings() {
    if std::env::var_os("KILN_WARNINGS_CHILD").is_some() {
        let ctx = Context::with_backend(BackendKind::OpenCl).unwrap();
        let ints: Vec<i32> = (0..5000).map(|i| (i * 7919) % 1000 - 500).collect();
        let bytes: Vec<u8> = ints.iter().map(|&i| i as u8).collect();
        let floats: Vec<f32> = ints.iter().map(|&i| i as f32 * 0.5).collect();
        assert!(ctx.from(&ints).argmin().unwrap().is_some());
        assert!(ctx.from(&bytes).argmax().unwrap().is_some());
        assert!(ctx.from(&floats).argmax().unwrap().is_some());
        ctx.from(&ints).filter(|x| x.gt(0)).to_vec().unwrap();
        ctx.from(&floats).sum().unwrap();
        ctx.from(&ints).min().unwrap();
        ctx.from(&ints).scan(0, |a, b| a + b).to_vec().unwrap();
        ctx.from(&ints).sort().to_vec().unwrap();
        ctx.from(&ints).group_by(|x| x % 13).sum(|x| x).unwrap();
        ctx.from(&bytes).histogram(256).unwrap();
        ctx.from(&floats).average().unwrap();
        return;
    }
    if Context::with_backend(BackendKind::OpenCl).is_err() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            common::test_path(
                module_path!(),
                "opencl_compiles_kilns_kernels_without_warnings",
            )
            .as_str(),
            "--nocapture",
        ])
        .env("KILN_WARNINGS_CHILD", "1")
        .env("KILN_CACHE_DIR", "off")
        // PoCL's own cache would skip the compiles (and their warnings).
        .env("POCL_KERNEL_CACHE", "0")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains("warning"),
        "the OpenCL compiler warned:\n{err}"
    );
}

/// Opening every device writes nothing to stderr, also where `XDG_RUNTIME_DIR` is not an
/// absolute path (libwayland then complained twice while wgpu created its Vulkan instance).
#[test]
fn opening_devices_writes_nothing_to_stderr() {
    if std::env::var_os("KILN_QUIET_CHILD").is_some() {
        let _ = Context::new().unwrap();
        assert!(!Context::devices().is_empty());
        for kind in [BackendKind::OpenCl, BackendKind::Cuda, BackendKind::Wgpu] {
            let _ = Context::with_backend(kind);
        }
        return;
    }
    for runtime_dir in ["relative", "/tmp"] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                common::test_path(module_path!(), "opening_devices_writes_nothing_to_stderr")
                    .as_str(),
                "--nocapture",
            ])
            .env("KILN_QUIET_CHILD", "1")
            .env("XDG_RUNTIME_DIR", runtime_dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let ours: Vec<&str> = err
            .lines()
            // The test harness's own lines.
            .filter(|l| {
                !l.trim().is_empty() && !l.starts_with("running") && !l.starts_with("test ")
            })
            .collect();
        assert!(
            ours.is_empty(),
            "XDG_RUNTIME_DIR={runtime_dir}: stderr has {ours:?}"
        );
    }
}
