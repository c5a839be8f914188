//! Native code in intrinsics: source snippets per target included in the generated program,
//! intrinsics taking views and structs, the names native code keeps, cache keys that hold
//! the snippets, and the errors a snippet or a binding can give. Each result is checked
//! against plain Rust of the code that runs on that backend: the snippet where the target
//! binds one, the Rust body elsewhere (always on the CPU).

use crate::common::{contexts, ctx, every_backend};
use kiln::ir::{
    native_call, Access, Axis, Kernel, Native, NativeCode, NativeInput, Param, ParamKind, Type,
};
use kiln::lang::{Index1D, View, ViewMut};
use kiln::BackendKind;

/// A 32-bit integer hash (lowbias32). Integer arithmetic is exact on every target, so every
/// backend gives plain Rust's answer bit for bit.
fn mix32_ref(x: u32) -> u32 {
    let x = (x ^ (x >> 16)).wrapping_mul(0x7feb_352d);
    let x = (x ^ (x >> 15)).wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

const MIX32_CUDA: &str = "__device__ unsigned int hash32(unsigned int x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}";
const MIX32_OPENCL: &str = "uint hash32(uint x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}";
const MIX32_WGSL: &str = "fn hash32(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u; x *= 0x7feb352du; x ^= x >> 15u; x *= 0x846ca68bu; x ^= x >> 16u;
    return x;
}";

/// The hash in each target's own code, and in Rust on the CPU.
#[kiln::intrinsic(
    cuda = "hash32",
    cuda_source = MIX32_CUDA,
    opencl = "hash32",
    opencl_source = MIX32_OPENCL,
    wgsl = "hash32",
    wgsl_source = MIX32_WGSL
)]
fn mix32(x: u32) -> u32 {
    let a = (x ^ (x >> 16)) * 0x7feb_352d;
    let b = (a ^ (a >> 15)) * 0x846c_a68b;
    b ^ (b >> 16)
}

/// A parameter named like the binding (`hash32`) must not hide the function from the call.
#[kiln::kernel]
fn hashes(i: Index1D, x: View<u32>, hash32: u32, out: ViewMut<u32>) {
    out[i] = mix32(x[i]) ^ hash32;
}

/// The same with a subgroup operation, so CUDA writes it with lane masks: the maximum of a
/// value every lane holds is that value, whatever the subgroup size.
#[kiln::kernel]
fn hashes_in_subgroups(i: Index1D, x: View<u32>, salt: u32, out: ViewMut<u32>) {
    out[i] = mix32(x[i]) ^ salt.subgroup_max();
}

#[test]
fn snippets_give_plain_rusts_answer_on_every_backend_in_kernels_and_queries() {
    every_backend(|| {
        for n in [1usize, 7, 1000, 4099] {
            let x: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect();
            let mut out = vec![0u32; n];
            ctx().launch(hashes, n, (&x, 0x5555u32, &mut out)).unwrap();
            let want: Vec<u32> = x.iter().map(|&v| mix32_ref(v) ^ 0x5555).collect();
            assert_eq!(out, want, "kernel, n = {n}");
            ctx()
                .launch(hashes_in_subgroups, n, (&x, 0x5555u32, &mut out))
                .unwrap();
            assert_eq!(out, want, "kernel with a subgroup operation, n = {n}");
            let q = ctx()
                .from(&x)
                .map(mix32)
                .filter(|h| h.lt(1u32 << 31))
                .to_vec();
            let want: Vec<u32> = x
                .iter()
                .map(|&v| mix32_ref(v))
                .filter(|h| *h < 1 << 31)
                .collect();
            assert_eq!(q.unwrap(), want, "query, n = {n}");
        }
    });
    let k = hashes().ir().unwrap();
    for (target, source, call) in [
        (kiln::Target::CudaC, MIX32_CUDA, "= hash32(t"),
        (kiln::Target::OpenClC, MIX32_OPENCL, "= hash32(t"),
        (kiln::Target::Wgsl, MIX32_WGSL, "= hash32(t"),
    ] {
        let text = kiln::emit(&k, target).unwrap();
        assert!(
            text.contains(source),
            "{target:?} includes the snippet:\n{text}"
        );
        assert!(text.contains(call), "{target:?} calls it:\n{text}");
        assert!(
            text.contains("hash32_"),
            "{target:?} renames the parameter:\n{text}"
        );
    }
}

/// A Rust body and snippets that compute different things, so the result tells which ran.
#[kiln::intrinsic(
    cuda = "plus_target",
    cuda_source = "__device__ unsigned int plus_target(unsigned int x) { return x + 100u; }",
    opencl = "plus_target",
    opencl_source = "uint plus_target(uint x) { return x + 200u; }",
    wgsl = "plus_target",
    wgsl_source = "fn plus_target(x: u32) -> u32 { return x + 300u; }"
)]
fn plus(x: u32) -> u32 {
    x + 1
}

#[kiln::kernel]
fn plus_all(i: Index1D, x: View<u32>, out: ViewMut<u32>) {
    out[i] = plus(x[i]);
}

/// What `plus` adds on `backend`: its snippet's constant where the target binds one, the Rust
/// body's 1 on the CPU.
fn plus_added(backend: BackendKind) -> u32 {
    match backend {
        BackendKind::Cpu => 1,
        BackendKind::Cuda => 100,
        BackendKind::OpenCl => 200,
        BackendKind::Wgpu => 300,
    }
}

#[test]
fn the_bound_function_runs_where_the_target_binds_one_and_the_rust_body_elsewhere() {
    every_backend(|| {
        let x: Vec<u32> = (0..257).collect();
        let mut out = vec![0u32; x.len()];
        ctx().launch(plus_all, x.len(), (&x, &mut out)).unwrap();
        let add = plus_added(ctx().device().backend);
        assert_eq!(out, x.iter().map(|v| v + add).collect::<Vec<_>>());
    });
}

/// The sum of `w` elements of `x` from `i` on (0 past the end), wrapping.
#[kiln::intrinsic(
    cuda = "window_sum",
    cuda_source = "__device__ unsigned int window_sum(const unsigned int* x, unsigned int n, unsigned int i, unsigned int w) {
        unsigned int s = 0u;
        for (unsigned int k = 0u; k < w; k++) { if (i + k < n) s += x[i + k]; }
        return s;
    }",
    opencl = "window_sum",
    opencl_source = "uint window_sum(__global const uint* x, uint n, uint i, uint w) {
        uint s = 0u;
        for (uint k = 0u; k < w; k++) { if (i + k < n) s += x[i + k]; }
        return s;
    }"
)]
fn window(x: View<u32>, i: u32, w: u32) -> u32 {
    let mut s = 0u32;
    for k in 0..w {
        s = s.wrapping_add(x[i + k]);
    }
    s
}

/// Adds `v` to `out[i]` when `i` is inside `out`.
#[kiln::intrinsic(
    cuda = "bump",
    cuda_source = "__device__ void bump(unsigned int* out, unsigned int n, unsigned int i, unsigned int v) { if (i < n) out[i] += v; }",
    opencl = "bump",
    opencl_source = "void bump(__global uint* out, uint n, uint i, uint v) { if (i < n) out[i] += v; }"
)]
fn bump_at(out: ViewMut<u32>, i: u32, v: u32) {
    if i < out.len() {
        out[i] = out[i] + v;
    }
}

#[kiln::kernel]
fn windows(i: Index1D, x: View<u32>, w: u32, out: ViewMut<u32>) {
    let s = window(x, i, w);
    bump_at(out, i, s);
}

#[test]
fn intrinsics_take_views_and_write_through_them() {
    every_backend(|| {
        for n in [1usize, 7, 1000, 4099] {
            for w in [0u32, 1, 5] {
                let x: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
                let start: Vec<u32> = (0..n as u32).collect();
                let mut out = start.clone();
                ctx().launch(windows, n, (&x, w, &mut out)).unwrap();
                let want: Vec<u32> = (0..n)
                    .map(|i| {
                        let s = (0..w as usize)
                            .filter_map(|k| x.get(i + k))
                            .fold(0u32, |a, b| a.wrapping_add(*b));
                        start[i].wrapping_add(s)
                    })
                    .collect();
                assert_eq!(out, want, "n = {n}, w = {w}");
            }
        }
    });
    let k = windows().ir().unwrap();
    let opencl = kiln::emit(&k, kiln::Target::OpenClC).unwrap();
    assert!(opencl.contains("window_sum(x, x_len, "), "{opencl}");
    assert!(opencl.contains("bump(out, out_len, "), "{opencl}");
    // WGSL has no binding: the Rust body is written.
    let wgsl = kiln::emit(&k, kiln::Target::Wgsl).unwrap();
    assert!(
        !wgsl.contains("window_sum") && !wgsl.contains("bump("),
        "{wgsl}"
    );
}

#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Span {
    lo: i32,
    hi: i32,
}

/// A struct with a nested struct and fields named like keywords: `float` (C's), `var`
/// (WGSL's) and `loop_` (ending in `_`, which every writer escapes).
#[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
#[repr(C)]
struct Sample {
    span: Span,
    float: kiln::f16,
    var: bool,
    loop_: u8,
}

/// `s` widened by `by` on both sides.
#[kiln::intrinsic(
    cuda = "widen_span",
    cuda_source = "__device__ Span widen_span(Span s, int by) { Span r = { s.lo - by, s.hi + by }; return r; }",
    opencl = "widen_span",
    opencl_source = "Span widen_span(Span s, int by) { Span r = { s.lo - by, s.hi + by }; return r; }",
    wgsl = "widen_span",
    wgsl_source = "fn widen_span(s: Span, by: i32) -> Span { return Span(s.lo - by, s.hi + by); }"
)]
fn widen(s: Span, by: i32) -> Span {
    Span {
        lo: s.lo - by,
        hi: s.hi + by,
    }
}

/// The sample's value scaled by its span's width when `var` is set, else its `loop_` count.
#[kiln::intrinsic(
    cuda = "weigh",
    cuda_source = "__device__ float weigh(Sample s, float k) { return s.var ? s.float_ * (float)(s.span.hi - s.span.lo) * k : (float)s.loop__; }",
    opencl = "weigh",
    opencl_source = "float weigh(Sample s, float k) { return s.var ? s.float_ * (float)(s.span.hi - s.span.lo) * k : (float)s.loop__; }",
    wgsl = "weigh",
    wgsl_source = "fn weigh(s: Sample, k: f32) -> f32 { if (s.var_) { return s.float * f32(s.span.hi - s.span.lo) * k; } return f32(s.loop__); }"
)]
fn weigh_sample(s: Sample, k: f32) -> kiln::f16 {
    let w = if s.var {
        s.float.cast::<f32>() * (s.span.hi - s.span.lo).cast::<f32>() * k
    } else {
        s.loop_.cast::<f32>()
    };
    w.cast::<kiln::f16>()
}

#[kiln::kernel]
fn weigh_all(i: Index1D, x: View<Sample>, by: i32, spans: ViewMut<Span>, out: ViewMut<kiln::f16>) {
    let s = x[i];
    spans[i] = widen(s.span, by);
    out[i] = weigh_sample(
        Sample {
            span: spans[i],
            ..s
        },
        0.5,
    );
}

#[test]
fn structs_reach_native_code_as_structs_of_their_rust_names() {
    let samples: Vec<Sample> = (0..1001i32)
        .map(|i| Sample {
            span: Span {
                lo: i % 37 - 18,
                hi: i % 37 + i % 5,
            },
            float: kiln::f16::from_f32((i % 61) as f32 * 0.37 - 9.0),
            var: i % 3 != 0,
            loop_: (i % 256) as u8,
        })
        .collect();
    every_backend(|| {
        let mut spans = vec![Span { lo: 0, hi: 0 }; samples.len()];
        let mut out = vec![kiln::f16::ZERO; samples.len()];
        ctx()
            .launch(
                weigh_all,
                samples.len(),
                (&samples, 3i32, &mut spans, &mut out),
            )
            .unwrap();
        for (i, s) in samples.iter().enumerate() {
            let span = Span {
                lo: s.span.lo - 3,
                hi: s.span.hi + 3,
            };
            // In f32 (an f16 operand is widened exactly), rounded once to f16.
            let w = match s.var {
                true => s.float.to_f32() * (span.hi - span.lo) as f32 * 0.5,
                false => s.loop_ as f32,
            };
            assert_eq!(spans[i], span, "span {i}");
            assert_eq!(
                out[i].to_bits(),
                kiln::f16::from_f32(w).to_bits(),
                "weight {i}: {s:?}"
            );
        }
    });
    let k = weigh_all().ir().unwrap();
    let c = kiln::emit(&k, kiln::Target::OpenClC).unwrap();
    assert!(
        c.contains("typedef struct { int lo; int hi; } Span;"),
        "{c}"
    );
    assert!(
        c.contains("typedef struct { Span span; float float_; bool var; uchar loop__; } Sample;"),
        "{c}"
    );
    let wgsl = kiln::emit(&k, kiln::Target::Wgsl).unwrap();
    assert!(
        wgsl.contains("struct Sample { span: Span, float: f32, var_: bool, loop__: u32 }"),
        "{wgsl}"
    );
}

/// A kernel calling an intrinsic built through the IR API with `source` as its OpenCL, CUDA
/// and WGSL code (each adding `add` to its argument) and a Rust body adding 1.
fn adding_kernel(add: u32) -> Kernel {
    let code = |source: String| {
        Some(NativeCode {
            name: "add_const".into(),
            source: Some(source),
        })
    };
    Kernel::build("adds", |k| {
        let out = k.buffer::<u32>("out", Access::ReadWrite);
        let i = kiln::ir::global_id(Axis::X);
        let native = Native {
            name: "adder".into(),
            params: vec![Param {
                name: "x".into(),
                kind: ParamKind::Value(Type::Scalar(kiln::ir::ScalarType::U32)),
            }],
            result: Some(Type::Scalar(kiln::ir::ScalarType::U32)),
            cuda: code(format!(
                "__device__ unsigned int add_const(unsigned int x) {{ return x + {add}u; }}"
            )),
            opencl: code(format!("uint add_const(uint x) {{ return x + {add}u; }}")),
            wgsl: code(format!(
                "fn add_const(x: u32) -> u32 {{ return x + {add}u; }}"
            )),
        };
        let v = native_call(native, &[NativeInput::from(i)], || i + 1u32);
        kiln::ir::if_then(i.lt(out.len()), || out.store(i, v));
    })
    .unwrap()
}

#[test]
fn a_snippet_is_part_of_the_cache_key() {
    let (a, b) = (adding_kernel(10), adding_kernel(20));
    assert_ne!(kiln::ir::kernel_hash(&a), kiln::ir::kernel_hash(&b));
    assert_eq!(
        kiln::ir::kernel_hash(&a),
        kiln::ir::kernel_hash(&adding_kernel(10))
    );
    for ctx in contexts() {
        let backend = ctx.device().backend;
        for (k, add) in [(&a, 10u32), (&b, 20), (&a, 10)] {
            let mut out = vec![0u32; 300];
            let grid = kiln::Grid::linear(5, 64);
            ctx.launch_ir(k, &grid, &mut [kiln::LaunchArg::read_write(&mut out)])
                .unwrap();
            let want = match backend {
                BackendKind::Cpu => 1,
                _ => add,
            };
            assert!(
                out.iter().enumerate().all(|(i, v)| *v == i as u32 + want),
                "{backend}: a kernel whose snippet adds {add} gave {:?}",
                &out[..4]
            );
        }
        // Two kernels, each compiled (or loaded from the disk cache) once.
        let stats = ctx.stats();
        assert_eq!(stats.compilations + stats.disk_hits, 2, "{backend}");
    }
}

/// A snippet that does not compile.
#[kiln::intrinsic(
    cuda = "broken",
    cuda_source = "__device__ unsigned int broken(unsigned int x) { return x +; }",
    opencl = "broken",
    opencl_source = "uint broken(uint x) { return x +; }",
    wgsl = "broken",
    wgsl_source = "fn broken(x: u32) -> u32 { return x +; }"
)]
fn broken_snippet(x: u32) -> u32 {
    x
}

#[kiln::kernel]
fn calls_broken(i: Index1D, x: View<u32>, out: ViewMut<u32>) {
    out[i] = broken_snippet(x[i]);
}

#[test]
fn a_snippet_the_compiler_rejects_is_its_compile_error_with_the_source() {
    let x = vec![1u32, 2, 3];
    for ctx in contexts() {
        let backend = ctx.device().backend;
        let mut out = vec![0u32; 3];
        let result = ctx.launch(calls_broken, x.len(), (&x, &mut out));
        if backend == BackendKind::Cpu {
            result.unwrap();
            assert_eq!(out, x);
            continue;
        }
        match result {
            Err(kiln::Error::Backend(kiln::BackendError::Compile {
                backend: b,
                log,
                source_text,
                ..
            })) => {
                assert_eq!(b, backend);
                assert!(!log.is_empty(), "{backend}: the compiler's log");
                assert!(
                    source_text.contains("return x +;"),
                    "{backend}: {source_text}"
                );
            }
            other => panic!("{backend}: expected a compile error, got {other:?}"),
        }
    }
    if kiln_cuda::nvrtc_available().is_ok() {
        let source = kiln::emit(&calls_broken().ir().unwrap(), kiln::Target::CudaC).unwrap();
        let compiled = kiln_cuda::compile_cubin("calls_broken", &source, "sm_90");
        assert!(
            matches!(compiled, Err(kiln::BackendError::Compile { .. })),
            "NVRTC accepted a broken snippet"
        );
    }
}

/// The message of the error building a kernel that calls `native` with one `u32` (or, with
/// `view`, the kernel's buffer) gives.
fn native_error(native: Native, view: bool) -> String {
    Kernel::build("bad", |k| {
        let out = k.buffer::<u32>("out", Access::ReadWrite);
        let i = kiln::ir::global_id(Axis::X);
        let arg = match view {
            true => NativeInput::View(out.memory()),
            false => NativeInput::from(i),
        };
        let v = native_call(native, &[arg], || i);
        out.store(i, v);
    })
    .map(|_| ())
    .unwrap_err()
    .to_string()
}

#[test]
fn bindings_that_could_not_work_are_typed_errors() {
    let u32_ty = Type::Scalar(kiln::ir::ScalarType::U32);
    let native = |param: ParamKind, name: &str, wgsl: bool| {
        let code = Some(NativeCode {
            name: name.into(),
            source: None,
        });
        Native {
            name: "f".into(),
            params: vec![Param {
                name: "x".into(),
                kind: param,
            }],
            result: Some(u32_ty.clone()),
            cuda: code.clone(),
            opencl: None,
            wgsl: code.filter(|_| wgsl),
        }
    };
    let value = ParamKind::Value(u32_ty.clone());
    let view = ParamKind::Buffer {
        elem: u32_ty.clone(),
        access: Access::Read,
    };
    for (n, view_arg, want) in [
        (
            native(value.clone(), "kiln_f", false),
            false,
            "has the shape of a name kiln generates",
        ),
        (
            native(value.clone(), "t12", false),
            false,
            "has the shape of a name kiln generates",
        ),
        (
            native(value.clone(), "f_len", false),
            false,
            "ends like a name kiln generates",
        ),
        (
            native(value.clone(), "f_", false),
            false,
            "ends like a name kiln generates",
        ),
        (
            native(view.clone(), "f", true),
            true,
            "WGSL functions cannot take views",
        ),
        (
            native(view.clone(), "f", false),
            false,
            "a value for a view",
        ),
        (
            native(value.clone(), "f", false),
            true,
            "a view for a value",
        ),
        (
            native(
                ParamKind::Value(Type::Vector(kiln::ir::ScalarType::F32, 2)),
                "f",
                false,
            ),
            false,
            "native code takes scalars and structs",
        ),
    ] {
        let msg = native_error(n, view_arg);
        assert!(msg.contains(want), "{msg}\n  want: {want}");
    }
}

#[test]
fn the_listing_shows_each_binding_and_its_source() {
    let listing = kiln::ir::print_kernel(&plus_all().ir().unwrap());
    assert!(
        listing.contains("intrinsic #0 plus(x: u32) -> u32"),
        "{listing}"
    );
    assert!(
        listing.contains("  opencl = plus_target\n  | uint plus_target(uint x)"),
        "{listing}"
    );
    assert!(listing.contains("= native plus("), "{listing}");
}

/// Writes `data` at the start of `mem` through the backend's own API, queued on the context's
/// own stream or queue (as a native library given both would), and returns once it is queued.
///
/// # Safety
/// `mem` and `device` come from one context, and `mem` holds at least `data`'s bytes.
unsafe fn native_write(mem: &kiln::NativeMemory, device: &kiln::NativeDevice, data: &[u32]) {
    use kiln::{NativeDevice, NativeMemory};
    let bytes = std::mem::size_of_val(data);
    match (mem, device) {
        (NativeMemory::Host { ptr, .. }, NativeDevice::Host) => unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr() as *const u8, *ptr, bytes)
        },
        (NativeMemory::OpenCl { mem, offset, .. }, NativeDevice::OpenCl { queue, .. }) => {
            let queued = unsafe {
                opencl3::command_queue::enqueue_write_buffer(
                    *queue,
                    *mem,
                    opencl3::types::CL_BLOCKING,
                    *offset,
                    bytes,
                    data.as_ptr() as *const std::ffi::c_void,
                    0,
                    std::ptr::null(),
                )
            };
            let event = queued.expect("clEnqueueWriteBuffer");
            unsafe { opencl3::event::release_event(event) }.expect("clReleaseEvent");
        }
        (NativeMemory::Cuda { ptr, .. }, NativeDevice::Cuda { context, stream }) => unsafe {
            use cudarc::driver::{result, sys};
            result::ctx::set_current(*context as sys::CUcontext).expect("cuCtxSetCurrent");
            result::memcpy_htod_async(*ptr, data, *stream as sys::CUstream).expect("cuMemcpyHtoD");
            result::stream::synchronize(*stream as sys::CUstream).expect("cuStreamSynchronize");
        },
        (NativeMemory::Wgpu { buffer, offset, .. }, NativeDevice::Wgpu { queue, .. }) => {
            let buffer = buffer
                .downcast_ref::<kiln::wgpu::Buffer>()
                .expect("a wgpu::Buffer");
            let queue = queue
                .downcast_ref::<kiln::wgpu::Queue>()
                .expect("a wgpu::Queue");
            let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            queue.write_buffer(buffer, *offset, &bytes);
        }
        (mem, device) => panic!("memory {mem:?} and device {device:?} of different backends"),
    }
}

#[kiln::kernel]
fn triple(i: Index1D, x: ViewMut<u32>) {
    x[i] = x[i] * 3;
}

/// The slice's bytes as the handle gives them.
fn native_bytes(mem: &kiln::NativeMemory) -> u64 {
    match mem {
        kiln::NativeMemory::Host { bytes, .. }
        | kiln::NativeMemory::Cuda { bytes, .. }
        | kiln::NativeMemory::OpenCl { bytes, .. } => *bytes as u64,
        kiln::NativeMemory::Wgpu { bytes, .. } => *bytes,
        other => panic!("no handle expected: {other:?}"),
    }
}

#[test]
fn native_handles_are_kilns_memory_in_place_in_queue_order() {
    every_backend(|| {
        let c = ctx();
        // SAFETY (this and the handles below): they come from `c` and `b`; the writes stay
        // inside the slices' bytes and are queued on the context's own queue (or made on the
        // host between kiln's calls, which have finished on the CPU backend).
        let device = unsafe { c.native_device() };
        // A slice on every binding alignment, one off them, and the whole buffer.
        for range in [512..700usize, 3..10, 0..1000] {
            let b = c.upload(&(0..1000u32).collect::<Vec<_>>()).unwrap();
            let slice = b.slice(range.clone()).unwrap();
            let mem = unsafe { slice.native() }.unwrap();
            assert_eq!(native_bytes(&mem), range.len() as u64 * 4, "{range:?}");
            // A launch queued before the native write, and one after it on the slice.
            c.launch(triple, 1000, (&b,)).unwrap();
            let written: Vec<u32> = (0..range.len() as u32).map(|i| 7_000_000 + i).collect();
            unsafe { native_write(&mem, &device, &written) };
            c.launch(triple, slice.len(), (&slice,)).unwrap();
            let want: Vec<u32> = (0..1000usize)
                .map(|i| match range.contains(&i) {
                    true => 3 * written[i - range.start],
                    false => 3 * i as u32,
                })
                .collect();
            assert_eq!(b.download().unwrap(), want, "{range:?}");
            let sum = c.from_buffer(&slice).sum().unwrap();
            assert_eq!(sum, want[range.clone()].iter().sum::<u32>(), "{range:?}");
            if range.len() == 1000 {
                let whole = unsafe { b.native() }.unwrap();
                assert_eq!(native_bytes(&whole), 4000);
            }
        }
    });
}
