//! The lowering's output for small kernels, read from the Cranelift function after
//! Cranelift's optimizations (the form it compiles), not from timings.

use super::*;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{Function, InstructionData, Opcode};
use kiln_ir::{for_range, global_id, if_then, lit, validate, Access, Axis, Var};

/// `kernel` as the CPU backend lowers it, after Cranelift's optimizations.
fn optimized(kernel: &Kernel) -> Function {
    let backend = CpuBackend::new().expect("the host has a CPU backend");
    let mut builder = JITBuilder::with_isa(backend.isa.clone(), default_libcall_names());
    MathImports::register(&mut builder);
    let mut module = JITModule::new(builder);
    let math = MathImports::declare(&mut module).expect("math imports declare");
    let info = validate(kernel).expect("the kernel validates");
    let (mut ctx, _, _) = lower_function(&mut module, &math, kernel, info).expect("it lowers");
    ctx.optimize(backend.isa.as_ref(), &mut ControlPlane::default())
        .expect("Cranelift optimizes it");
    ctx.func
}

/// How many loads from the launch frame (the function's one parameter: group position,
/// buffer pointers and lengths, parameters) sit in blocks other than the entry block.
fn frame_loads_after_entry(f: &Function) -> usize {
    let entry = f
        .layout
        .entry_block()
        .expect("a function has an entry block");
    let frame = f.dfg.block_params(entry)[0];
    f.layout
        .blocks()
        .filter(|&b| b != entry)
        .flat_map(|b| f.layout.block_insts(b))
        .filter(|&i| {
            matches!(f.dfg.insts[i], InstructionData::Load { opcode: Opcode::Load, arg, .. } if arg == frame)
        })
        .count()
}

/// A map's group position, buffer pointers and lengths and its bound are the same for every
/// work item: they are loaded once, before the quad and work-item loops, not once per quad.
#[test]
fn a_straight_line_kernel_reads_its_frame_once_per_group() {
    let k = Kernel::build("map", |k| {
        let x = k.buffer::<f32>("x", Access::Read);
        let y = k.buffer::<f32>("y", Access::Write);
        let n = k.value::<u32>("n");
        let i = global_id(Axis::X);
        let bound = n.min(x.len()).min(y.len());
        if_then(i.lt(bound), || y.store(i, x.load(i) * 2.0f32 + 1.0f32));
    })
    .unwrap();
    let f = optimized(&k);
    assert_eq!(frame_loads_after_entry(&f), 0, "{}", f.display());
}

/// With a loop inside, the values the same for every work item stay at their uses: moved
/// before the loops they would be live across the inner loop and spill there (the ordered
/// scatter of a filter, a loop per work item, got 57% slower at 2^20 that way).
#[test]
fn a_kernel_with_a_loop_inside_reads_its_frame_where_it_uses_it() {
    let k = Kernel::build("chunks", |k| {
        let x = k.buffer::<f32>("x", Access::Read);
        let y = k.buffer::<f32>("y", Access::Write);
        let chunk = k.value::<u32>("chunk");
        let i = global_id(Axis::X);
        let acc = Var::new("acc", lit(0.0f32));
        let start = i * chunk;
        for_range(start, (start + chunk).min(x.len()), |j| {
            acc.set(acc.get() + x.load(j))
        });
        if_then(i.lt(y.len()), || y.store(i, acc.get()));
    })
    .unwrap();
    let f = optimized(&k);
    assert!(frame_loads_after_entry(&f) > 0, "{}", f.display());
}
