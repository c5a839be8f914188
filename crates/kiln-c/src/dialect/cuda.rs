//! CUDA C++ for NVRTC: `extern "C" __global__`, `threadIdx`, `__syncthreads`, warp
//! intrinsics with 32 lanes, and one extern shared array for the dynamic shared memory.

use super::{shared_layout, CDialect};
use crate::storage::cuda_fixed_shared_in_dynamic_region;
use kiln_ir::{
    AtomicOp, Axis, Builtin, CompileOptions, Kernel, NativeTarget, ScalarType, SharedDecl,
    SharedLen,
};
use kiln_writer::{AtomicCall, Helpers};
use std::fmt::Write as _;

/// CUDA C++.
pub(crate) struct CudaC;

impl CDialect for CudaC {
    fn type_name(&self, s: ScalarType) -> &'static str {
        match s {
            ScalarType::Bool => "bool",
            ScalarType::I8 => "signed char",
            ScalarType::U8 => "unsigned char",
            ScalarType::I16 => "short",
            ScalarType::U16 => "unsigned short",
            ScalarType::I32 => "int",
            ScalarType::U32 => "unsigned int",
            ScalarType::I64 => "long long",
            ScalarType::U64 => "unsigned long long",
            ScalarType::F16 | ScalarType::F32 => "float",
            ScalarType::F64 => "double",
        }
    }

    fn nonfinite(&self, s: ScalarType, bits: u64) -> String {
        match s {
            ScalarType::F16 | ScalarType::F32 => format!("__uint_as_float({:#x}u)", bits as u32),
            _ => format!("__longlong_as_double({bits:#x}LL)"),
        }
    }

    fn float_bit_casts(&self, s: ScalarType) -> (&'static str, &'static str) {
        match s {
            ScalarType::F16 | ScalarType::F32 => ("__float_as_uint", "__uint_as_float"),
            _ => ("__double_as_longlong", "__longlong_as_double"),
        }
    }

    fn float_int_bitcast(
        &self,
        x: &str,
        from: ScalarType,
        to: ScalarType,
        to_name: &str,
    ) -> String {
        let f = match (from, to) {
            (ScalarType::F32, ScalarType::I32) => "__float_as_int",
            (ScalarType::F32, _) => "__float_as_uint",
            (ScalarType::I32, ScalarType::F32) => "__int_as_float",
            (_, ScalarType::F32) => "__uint_as_float",
            (ScalarType::F64, _) => "__double_as_longlong",
            _ => "__longlong_as_double",
        };
        if from.is_float() {
            format!("(({to_name}){f}({x}))")
        } else if from == ScalarType::U64 {
            format!("{f}((long long){x})")
        } else {
            format!("{f}({x})")
        }
    }

    fn math_name(&self, base: &str, s: ScalarType) -> String {
        match s {
            ScalarType::F16 | ScalarType::F32 => format!("{base}f"),
            _ => base.to_string(),
        }
    }

    fn builtin(&self, b: Builtin) -> String {
        let xyz = |a: Axis| ["x", "y", "z"][a.index()];
        match b {
            Builtin::GlobalId(a) => {
                format!("(blockIdx.{0} * blockDim.{0} + threadIdx.{0})", xyz(a))
            }
            Builtin::LocalId(a) => format!("threadIdx.{}", xyz(a)),
            Builtin::GroupId(a) => format!("blockIdx.{}", xyz(a)),
            Builtin::GroupSize(a) => format!("blockDim.{}", xyz(a)),
            Builtin::NumGroups(a) => format!("gridDim.{}", xyz(a)),
            Builtin::GlobalSize(a) => format!("(gridDim.{0} * blockDim.{0})", xyz(a)),
            Builtin::LocalIndex => {
                "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))".into()
            }
            Builtin::SubgroupSize => "32u".into(),
            Builtin::SubgroupId => {
                "((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) >> 5)"
                    .into()
            }
            Builtin::SubgroupLane => {
                "((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u)"
                    .into()
            }
        }
    }

    fn space(&self, _: bool) -> &'static str {
        ""
    }

    fn helper_prefix(&self) -> &'static str {
        "static __device__ __forceinline__"
    }

    fn function_prefix(&self, noinline: bool) -> &'static str {
        match noinline {
            true => "static __device__ __noinline__ ",
            false => "static __device__ __forceinline__ ",
        }
    }

    fn native_target(&self) -> NativeTarget {
        NativeTarget::Cuda
    }

    /// Launch bounds as `__launch_bounds__`, else a register limit as `__maxnreg__`: CUDA
    /// allows only one of them on a kernel, so with launch bounds the register limit is an
    /// NVRTC option instead (see `kiln_cuda::nvrtc_options`).
    fn kernel_head(&self, name: &str, params: &str, options: &CompileOptions) -> String {
        let bounds = match (options.launch_bounds, options.max_registers) {
            (Some(n), _) => format!("__launch_bounds__({n}) "),
            (None, Some(n)) => format!("__maxnreg__({n}) "),
            (None, None) => String::new(),
        };
        format!("extern \"C\" __global__ void {bounds}{name}({params}) {{")
    }

    fn dynamic_shared_memory(&self, _: &str) -> Option<String> {
        None
    }

    /// PTX conversions: NVRTC ships no `cuda_fp16.h`, and `cvt` is one instruction.
    fn half_helper(&self, from: ScalarType) -> String {
        let p = self.helper_prefix();
        match from {
            ScalarType::U16 => format!("{p} float kiln_h2f(unsigned short h) {{ float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }}"),
            ScalarType::F64 => format!("{p} unsigned short kiln_d2h(double d) {{ unsigned short h; asm(\"cvt.rn.f16.f64 %0, %1;\" : \"=h\"(h) : \"d\"(d)); return h; }}"),
            _ => format!("{p} unsigned short kiln_f2h(float f) {{ unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }}"),
        }
    }

    fn preamble(&self, _: bool, _: bool) -> String {
        String::new()
    }

    fn file_name(&self, name: &str) -> String {
        format!("{name}.cu")
    }

    fn group_barrier(&self) -> &'static str {
        "__syncthreads();"
    }

    fn has_warps(&self) -> bool {
        true
    }

    /// Fixed-size arrays are `__shared__` unless together they pass the static limit; those,
    /// and dynamic arrays, live in the one extern array.
    fn shared_decls(&self, kernel: &Kernel, out: &mut String) {
        let mut first_dynamic = true;
        let fixed_in_region = cuda_fixed_shared_in_dynamic_region(kernel);
        for s in &kernel.shared {
            let (ty, count, bytes) = shared_layout(self, s);
            match s.len {
                SharedLen::Static(n) if !fixed_in_region => {
                    let aligned = match bytes {
                        true => "__align__(16) ",
                        false => "",
                    };
                    let _ = writeln!(
                        out,
                        "  __shared__ {aligned}{ty} {}[{}];",
                        s.name,
                        (n as u64 * count).max(1)
                    );
                    let _ = writeln!(out, "  const unsigned int {}_len = {n}u;", s.name);
                }
                SharedLen::Static(n) => {
                    let _ = writeln!(out, "  const unsigned int {}_len = {n}u;", s.name);
                    dynamic_region_array(&mut first_dynamic, ty, s, out);
                }
                SharedLen::Dynamic => dynamic_region_array(&mut first_dynamic, ty, s, out),
            }
        }
    }

    fn atomic(&self, _: &mut Helpers, name: &str, a: &AtomicCall) -> String {
        let (s, op, v) = (a.ty, a.op, a.value);
        let t = self.type_name(s);
        let p = format!("&{name}[{}]", a.index);
        let ull = "unsigned long long";
        let as_ull = |x: &str| format!("({ull})({x})");
        let p64 = format!("({ull}*){p}");
        let cmp = a.compare.unwrap_or("0");
        match (op, s) {
            (AtomicOp::Add, ScalarType::F32)
            | (AtomicOp::Add, ScalarType::I32 | ScalarType::U32) => {
                format!("atomicAdd({p}, {v})")
            }
            (AtomicOp::Add, _) => format!("(({t})atomicAdd({p64}, {}))", as_ull(v)),
            (AtomicOp::Sub, ScalarType::I32 | ScalarType::U32) => format!("atomicSub({p}, {v})"),
            (AtomicOp::Sub, _) => format!("(({t})atomicAdd({p64}, 0ULL - {}))", as_ull(v)),
            (AtomicOp::Min, ScalarType::I64) => {
                format!("(({t})atomicMin((long long*){p}, (long long)({v})))")
            }
            (AtomicOp::Max, ScalarType::I64) => {
                format!("(({t})atomicMax((long long*){p}, (long long)({v})))")
            }
            (AtomicOp::Min, _) => format!("atomicMin({p}, {v})"),
            (AtomicOp::Max, _) => format!("atomicMax({p}, {v})"),
            (AtomicOp::And | AtomicOp::Or | AtomicOp::Xor, _) => {
                let f = match op {
                    AtomicOp::And => "atomicAnd",
                    AtomicOp::Or => "atomicOr",
                    _ => "atomicXor",
                };
                if s.bits() == 64 {
                    format!("(({t}){f}({p64}, {}))", as_ull(v))
                } else {
                    format!("{f}({p}, {v})")
                }
            }
            (AtomicOp::Exchange, ScalarType::I64 | ScalarType::U64) => {
                format!("(({t})atomicExch({p64}, {}))", as_ull(v))
            }
            (AtomicOp::Exchange, _) => format!("atomicExch({p}, {v})"),
            (AtomicOp::CompareExchange, ScalarType::I64 | ScalarType::U64) => {
                format!("(({t})atomicCAS({p64}, {}, {}))", as_ull(cmp), as_ull(v))
            }
            (AtomicOp::CompareExchange, _) => format!("atomicCAS({p}, {cmp}, {v})"),
        }
    }
}

/// Declares shared array `s` (whose `_len` is in scope) in CUDA's one extern array, at the
/// next 16-byte boundary (the layout `dynamic_shared_bytes` counts); the first call declares
/// the extern array.
fn dynamic_region_array(first: &mut bool, ty: &str, s: &SharedDecl, out: &mut String) {
    if std::mem::take(first) {
        let _ = writeln!(
            out,
            "  extern __shared__ unsigned long long kiln_dynamic_shared[];\n  unsigned long long kiln_shared_at = 0ull;"
        );
    }
    let _ = writeln!(
        out,
        "  {ty}* {} = ({ty}*)((unsigned char*)kiln_dynamic_shared + kiln_shared_at);",
        s.name
    );
    let _ = writeln!(
        out,
        "  kiln_shared_at += ((unsigned long long){}_len * {}ull + 15ull) & ~15ull;",
        s.name,
        s.elem.size()
    );
}
