//! OpenCL C 1.2: `__kernel`, `get_global_id`, `barrier`, address-space qualifiers, and
//! subgroups of one lane.

use super::{shared_layout, CDialect};
use kiln_ir::{
    AtomicOp, Axis, Builtin, CompileOptions, Kernel, NativeTarget, ScalarType, SharedLen,
};
use kiln_writer::{AtomicCall, Helpers};
use std::fmt::Write as _;

/// OpenCL C.
pub(crate) struct OpenClC;

impl CDialect for OpenClC {
    fn type_name(&self, s: ScalarType) -> &'static str {
        match s {
            ScalarType::Bool => "bool",
            ScalarType::I8 => "char",
            ScalarType::U8 => "uchar",
            ScalarType::I16 => "short",
            ScalarType::U16 => "ushort",
            ScalarType::I32 => "int",
            ScalarType::U32 => "uint",
            ScalarType::I64 => "long",
            ScalarType::U64 => "ulong",
            ScalarType::F16 | ScalarType::F32 => "float",
            ScalarType::F64 => "double",
        }
    }

    fn nonfinite(&self, s: ScalarType, bits: u64) -> String {
        match s {
            ScalarType::F16 | ScalarType::F32 => format!("as_float({:#x}u)", bits as u32),
            _ => format!("as_double({bits:#x}UL)"),
        }
    }

    fn float_bit_casts(&self, s: ScalarType) -> (&'static str, &'static str) {
        match s {
            ScalarType::F16 | ScalarType::F32 => ("as_uint", "as_float"),
            _ => ("as_ulong", "as_double"),
        }
    }

    fn float_int_bitcast(&self, x: &str, _: ScalarType, _: ScalarType, to_name: &str) -> String {
        format!("as_{to_name}({x})")
    }

    fn math_name(&self, base: &str, _: ScalarType) -> String {
        base.to_string()
    }

    fn builtin(&self, b: Builtin) -> String {
        let ax = |a: Axis| a.index();
        match b {
            Builtin::GlobalId(a) => format!("((uint)get_global_id({}))", ax(a)),
            Builtin::LocalId(a) => format!("((uint)get_local_id({}))", ax(a)),
            Builtin::GroupId(a) => format!("((uint)get_group_id({}))", ax(a)),
            Builtin::GroupSize(a) => format!("((uint)get_local_size({}))", ax(a)),
            Builtin::NumGroups(a) => format!("((uint)get_num_groups({}))", ax(a)),
            Builtin::GlobalSize(a) => format!("((uint)get_global_size({}))", ax(a)),
            Builtin::LocalIndex | Builtin::SubgroupId => "((uint)(get_local_id(0) + get_local_size(0) * (get_local_id(1) + get_local_size(1) * get_local_id(2))))".into(),
            Builtin::SubgroupSize => "1u".into(),
            Builtin::SubgroupLane => "0u".into(),
        }
    }

    fn space(&self, shared: bool) -> &'static str {
        match shared {
            true => "__local ",
            false => "__global ",
        }
    }

    fn helper_prefix(&self) -> &'static str {
        "static inline"
    }

    fn function_prefix(&self, noinline: bool) -> &'static str {
        match noinline {
            true => "__attribute__((noinline)) ",
            false => "static inline ",
        }
    }

    fn native_target(&self) -> NativeTarget {
        NativeTarget::OpenCl
    }

    /// OpenCL C can require one exact group size, not bound it: launch bounds are checked
    /// at launch only.
    fn kernel_head(&self, name: &str, params: &str, _: &CompileOptions) -> String {
        format!("__kernel void {name}({params}) {{")
    }

    fn dynamic_shared_memory(&self, name: &str) -> Option<String> {
        Some(format!("__local uchar* {name}_mem"))
    }

    /// `vload_half` and `vstore_half_rte` are core OpenCL C: no `cl_khr_fp16` needed, as
    /// `half` is only a pointer's element type here.
    fn half_helper(&self, from: ScalarType) -> String {
        let p = self.helper_prefix();
        match from {
            ScalarType::U16 => format!("{p} float kiln_h2f(ushort h) {{ return vload_half(0, (const __private half*)&h); }}"),
            ScalarType::F64 => format!("{p} ushort kiln_d2h(double d) {{ ushort h; vstore_half_rte(d, 0, (__private half*)&h); return h; }}"),
            _ => format!("{p} ushort kiln_f2h(float f) {{ ushort h; vstore_half_rte(f, 0, (__private half*)&h); return h; }}"),
        }
    }

    fn preamble(&self, f64: bool, atomics64: bool) -> String {
        let mut out = "#pragma OPENCL FP_CONTRACT OFF\n".to_string();
        if f64 {
            out += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
        }
        if atomics64 {
            out += "#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable\n#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable\n";
        }
        out
    }

    fn file_name(&self, name: &str) -> String {
        format!("{name}.cl")
    }

    fn group_barrier(&self) -> &'static str {
        "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);"
    }

    fn has_warps(&self) -> bool {
        false
    }

    fn shared_decls(&self, kernel: &Kernel, out: &mut String) {
        for s in &kernel.shared {
            let (ty, count, bytes) = shared_layout(self, s);
            match s.len {
                SharedLen::Static(n) => {
                    let aligned = match bytes {
                        true => " __attribute__((aligned(16)))",
                        false => "",
                    };
                    let _ = writeln!(
                        out,
                        "  __local {ty} {}[{}]{aligned};",
                        s.name,
                        (n as u64 * count).max(1)
                    );
                    let _ = writeln!(out, "  const uint {}_len = {n}u;", s.name);
                }
                SharedLen::Dynamic => {
                    let _ = writeln!(
                        out,
                        "  __local {ty}* {} = (__local {ty}*){}_mem;",
                        s.name, s.name
                    );
                }
            }
        }
    }

    fn atomic(&self, helpers: &mut Helpers, name: &str, a: &AtomicCall) -> String {
        let (s, v) = (a.ty, a.value);
        let t = self.type_name(s);
        let space = self
            .space(matches!(a.memory, kiln_ir::Memory::Shared(_)))
            .trim_end();
        let prefix = if s.bits() == 64 { "atom" } else { "atomic" };
        let p = format!("(volatile {space} {t}*)&{name}[{}]", a.index);
        match (a.op, s) {
            (AtomicOp::Add, ScalarType::F32) => {
                let h = format!("kiln_atomic_add_f32_{}", &space[2..]);
                helpers.add(format!("static inline float {h}(volatile {space} float* p, float v) {{ volatile {space} uint* q = (volatile {space} uint*)p; uint old = *q; for (;;) {{ uint seen = atomic_cmpxchg(q, old, as_uint(as_float(old) + v)); if (seen == old) return as_float(old); old = seen; }} }}"));
                format!("{h}({p}, {v})")
            }
            (AtomicOp::Exchange, ScalarType::F32) => format!("atomic_xchg({p}, {v})"),
            (op, _) => {
                let (n, expected) = match op {
                    AtomicOp::Add => ("add", None),
                    AtomicOp::Sub => ("sub", None),
                    AtomicOp::Min => ("min", None),
                    AtomicOp::Max => ("max", None),
                    AtomicOp::And => ("and", None),
                    AtomicOp::Or => ("or", None),
                    AtomicOp::Xor => ("xor", None),
                    AtomicOp::Exchange => ("xchg", None),
                    AtomicOp::CompareExchange => ("cmpxchg", Some(a.compare.unwrap_or("0"))),
                };
                match expected {
                    Some(c) => format!("{prefix}_{n}({p}, {c}, {v})"),
                    None => format!("{prefix}_{n}({p}, {v})"),
                }
            }
        }
    }
}
