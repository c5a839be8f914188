//! Unit tests of the C writers.

use super::*;

#[test]
fn dynamic_shared_arrays_are_counted_at_16_byte_boundaries() {
    let k = Kernel::build("tiles", |k| {
        let _ = k.shared::<u8>("bytes", SharedLen::Dynamic);
        let _ = k.shared::<u32>("fixed", SharedLen::Static(100));
        let _ = k.shared::<f64>("halves", SharedLen::Dynamic);
    })
    .unwrap();
    // 61 bytes take 64; 61 doubles (488 bytes) take 496; the static array is not counted.
    assert_eq!(dynamic_shared_bytes(&k, &[61, 100, 61]), 64 + 496);
    assert_eq!(dynamic_shared_bytes(&k, &[0, 100, 2]), 16);
}

#[test]
fn fixed_shared_arrays_past_48_kib_go_to_the_dynamic_region_on_cuda() {
    let k = Kernel::build("big", |k| {
        let _ = k.shared::<u8>("odd", SharedLen::Static(3));
        let _ = k.shared::<f32>("tile", SharedLen::Static(25_600));
    })
    .unwrap();
    assert!(cuda_fixed_shared_in_dynamic_region(&k) && cuda_uses_dynamic_region(&k));
    // 3 bytes take 16; 100 KiB of f32 follow at the next boundary.
    assert_eq!(dynamic_shared_bytes(&k, &[3, 25_600]), 16 + 102_400);
    let cuda = write_kernel(&k, Dialect::Cuda).unwrap().text;
    assert!(cuda.contains("extern __shared__"), "{cuda}");
    assert!(!cuda.contains("__shared__ float"), "{cuda}");
    assert!(
        cuda.contains("const unsigned int tile_len = 25600u;"),
        "{cuda}"
    );
    // OpenCL keeps them fixed-size: its devices have no such split.
    let cl = write_kernel(&k, Dialect::OpenCl).unwrap().text;
    assert!(cl.contains("__local float tile[25600];"), "{cl}");
    let small = Kernel::build("small", |k| {
        let _ = k.shared::<f32>("tile", SharedLen::Static(1024));
    })
    .unwrap();
    assert!(!cuda_uses_dynamic_region(&small));
    assert_eq!(dynamic_shared_bytes(&small, &[1024]), 0);
}

#[test]
fn shared_arrays_of_structs_and_vectors_are_16_byte_aligned() {
    let k = Kernel::build("aligned", |k| {
        let _ = k.shared::<u8>("odd", SharedLen::Static(3));
        let _ = k.shared_dyn("v", Type::Vector(ScalarType::F32, 4), SharedLen::Static(8));
    })
    .unwrap();
    let cuda = write_kernel(&k, Dialect::Cuda).unwrap().text;
    assert!(
        cuda.contains("__shared__ __align__(16) unsigned char v[128];"),
        "{cuda}"
    );
    let cl = write_kernel(&k, Dialect::OpenCl).unwrap().text;
    assert!(
        cl.contains("__local uchar v[128] __attribute__((aligned(16)));"),
        "{cl}"
    );
}

/// A subgroup sum under an `if` in a loop that `continue`s and `break`s: the CUDA source
/// carries explicit lane masks (never `__activemask()`), balloted where paths split, and
/// the jumps become flags. The CUDA compile of every kernel the conformance suite writes
/// checks that such source compiles; only a GPU runs it.
#[test]
fn cuda_subgroup_operations_take_the_mask_of_their_path() {
    let k = Kernel::build("masked", |k| {
        let out = k.buffer::<u32>("out", Access::ReadWrite);
        let i = global_id(Axis::X);
        if_then(i.ge(100u32), return_);
        for_range(0u32, 8u32, |j| {
            if_then((i + j).eq(5u32), continue_);
            if_then(j.eq(6u32), break_);
            if_then((i & 1u32).eq(0u32), || {
                out.atomic_add(i, (i + j).subgroup_add());
            });
        });
        subgroup_barrier();
        out.store(i, out.load(i) + i.gt(3u32).ballot());
    })
    .unwrap();
    let cuda = write_kernel(&k, Dialect::Cuda).unwrap().text;
    assert!(!cuda.contains("__activemask"), "{cuda}");
    // At entry, the warp's lanes that exist in the block.
    assert!(cuda.contains("unsigned int kiln_lanes0;"), "{cuda}");
    // The loop balloted at the end of each iteration; the jumps set its flag.
    assert!(cuda.contains("= __ballot_sync(kiln_iter"), "{cuda}");
    assert!(cuda.contains(" = 1;") && cuda.contains(" = 2;"), "{cuda}");
    assert!(!cuda.contains("continue;"), "{cuda}");
    // The sum runs with the lanes of its `if`; the barrier and ballot with the kernel's.
    assert!(cuda.contains("kiln_subgroup_add_u32(kiln_then"), "{cuda}");
    assert!(
        cuda.contains("__syncwarp(__ballot_sync(kiln_lanes0, 1));"),
        "{cuda}"
    );
    assert!(cuda.contains("__ballot_sync(kiln_lanes0, "), "{cuda}");
    // Device functions are inlined, `noinline` ones too; one with an array local stays a
    // call that takes the caller's mask, and may not return early.
    let with_functions = |early: bool| {
        Kernel::build("calls", |k| {
            let out = k.buffer::<u32>("out", Access::ReadWrite);
            let u32t = Type::Scalar(ScalarType::U32);
            let twice = device_fn::<u32>("twice", &[("x", u32t.clone())], true, |a| {
                a[0].typed::<u32>().subgroup_add() * 2u32
            });
            let table = device_fn::<u32>("table", &[("x", u32t)], false, |a| {
                let x = a[0].typed::<u32>();
                let t = LocalArray::<u32>::new("t", 4);
                t.set(x & 3u32, x);
                if early {
                    if_then(x.eq(0u32), || return_value(x));
                }
                t.get(x & 3u32).shuffle_xor(1u32)
            });
            let i = global_id(Axis::X);
            out.store(i, twice.call(&[i.erase()]) + table.call(&[i.erase()]));
        })
        .unwrap()
    };
    let cuda = write_kernel(&with_functions(false), Dialect::Cuda)
        .unwrap()
        .text;
    let body = &cuda[cuda.find("extern \"C\"").unwrap()..];
    assert!(
        !body.contains("twice(") && body.contains("kiln_subgroup_add_u32(kiln_lanes0, "),
        "{cuda}"
    );
    assert!(
        cuda.contains("table(unsigned int kiln_lanes_in, "),
        "{cuda}"
    );
    assert!(body.contains("table(kiln_lanes0, "), "{cuda}");
    let refused = write_kernel(&with_functions(true), Dialect::Cuda).unwrap_err();
    assert!(
        refused.0.contains("`table`") && refused.0.contains("returns before"),
        "{refused}"
    );
    assert!(write_kernel(&with_functions(true), Dialect::OpenCl).is_ok());
    // A kernel without subgroup operations is written as before.
    let plain = Kernel::build("plain", |k| {
        let out = k.buffer::<u32>("out", Access::ReadWrite);
        for_range(0u32, 8u32, |j| {
            if_then(j.eq(6u32), break_);
            out.store(j, j);
        });
    })
    .unwrap();
    let cuda = write_kernel(&plain, Dialect::Cuda).unwrap().text;
    assert!(
        cuda.contains("break;") && !cuda.contains("kiln_lanes"),
        "{cuda}"
    );
}

/// The slots follow the written parameter list one to one: a pointer and a length per
/// buffer, a component per value scalar, and per dynamic shared array its length (and on
/// OpenCL its memory).
#[test]
fn slots_follow_the_signature_in_order() {
    let k = Kernel::build("slots", |k| {
        let _ = k.buffer::<f32>("out", Access::Write);
        let _ = k.value::<u8>("a");
        let _ = k.value::<f64>("b");
        let _ = k.shared::<u32>("fixed", SharedLen::Static(4));
        let _ = k.shared::<u32>("tile", SharedLen::Dynamic);
    })
    .unwrap();
    let common = [
        Slot::Pointer { param: 0 },
        Slot::Length { param: 0 },
        Slot::Component {
            param: 1,
            offset: 0,
            size: 1,
        },
        Slot::Component {
            param: 2,
            offset: 0,
            size: 8,
        },
        Slot::SharedLength { shared: 1 },
    ];
    let opencl = [&common[..], &[Slot::SharedMemory { shared: 1 }]].concat();
    for (d, want) in [(Dialect::OpenCl, opencl), (Dialect::Cuda, common.to_vec())] {
        let src = write_kernel(&k, d).unwrap();
        assert_eq!(src.slots, want, "{d:?}");
        let head = src.text.lines().find(|l| l.contains(" slots(")).unwrap();
        let list = &head[head.find('(').unwrap() + 1..head.rfind(')').unwrap()];
        assert_eq!(list.split(", ").count(), want.len(), "{head}");
    }
}

#[test]
fn scalar_arguments_take_their_components_little_endian() {
    let value = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
    assert_eq!(ScalarArg::component(&value, 0, 1), Some(ScalarArg::B1(1)));
    assert_eq!(
        ScalarArg::component(&value, 1, 2),
        Some(ScalarArg::B2(0x0302))
    );
    assert_eq!(
        ScalarArg::component(&value, 4, 4),
        Some(ScalarArg::B4(0x0807_0605))
    );
    assert_eq!(
        ScalarArg::component(&value, 1, 8),
        Some(ScalarArg::B8(0x0908_0706_0504_0302))
    );
    assert_eq!(ScalarArg::component(&value, 6, 4), None);
    assert_eq!(ScalarArg::component(&value, 0, 3), None);
}

/// A kernel whose only f64 values are literals and arithmetic on them (stored as f32) still
/// enables OpenCL's fp64 extension and tells the runtime it needs f64.
#[test]
fn f64_from_literals_alone_enables_fp64() {
    let k = Kernel::build("halves", |k| {
        let out = k.buffer::<f32>("out", Access::Write);
        let i = global_id(Axis::X);
        let half = (lit(1.0f64) / lit(2.0f64)).cast::<f32>();
        if_then(i.lt(out.len()), || out.store(i, half));
    })
    .unwrap();
    let src = write_kernel(&k, Dialect::OpenCl).unwrap();
    assert!(src.needs.f64 && !src.needs.atomics64, "{:?}", src.needs);
    assert!(src.text.contains("cl_khr_fp64 : enable"), "{}", src.text);
}
