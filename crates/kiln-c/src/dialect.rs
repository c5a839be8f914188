//! What differs between OpenCL C and CUDA C, as one trait with an implementation per dialect:
//! the writer asks its dialect and never matches on which one it writes.

use kiln_ir::{Builtin, CompileOptions, Kernel, NativeTarget, ScalarType};
use kiln_writer::{AtomicCall, Helpers};

mod cuda;
mod opencl;

pub(crate) use cuda::CudaC;
pub(crate) use opencl::OpenClC;

/// The spelling of one C dialect.
pub(crate) trait CDialect {
    /// The scalar type's name in registers (`bool` is `bool`; `f16` is held in a `float`).
    fn type_name(&self, s: ScalarType) -> &'static str;
    /// A NaN or infinity of type `s` from its exact bits (folding `0.0/0.0` is not reliable
    /// across compilers).
    fn nonfinite(&self, s: ScalarType, bits: u64) -> String;
    /// The functions that reinterpret a float of type `s` as unsigned bits and back.
    fn float_bit_casts(&self, s: ScalarType) -> (&'static str, &'static str);
    /// `x`'s bits as a `to`, for a cast between a float and an integer type (`to_name` is
    /// [`CDialect::type_name`] of `to`).
    fn float_int_bitcast(&self, x: &str, from: ScalarType, to: ScalarType, to_name: &str)
        -> String;
    /// The C library function `base` for floats of type `s` (CUDA's `f` suffix for `f32`).
    fn math_name(&self, base: &str, s: ScalarType) -> String;
    /// A builtin value, as a `uint` expression.
    fn builtin(&self, b: Builtin) -> String;
    /// The address-space qualifier of a pointer into a buffer, or with `shared` into a shared
    /// array, followed by a space; empty where the dialect has none.
    fn space(&self, shared: bool) -> &'static str;
    /// How helper functions are declared.
    fn helper_prefix(&self) -> &'static str;
    /// How device functions are declared, with or without inlining.
    fn function_prefix(&self, noinline: bool) -> &'static str;
    /// The language whose functions intrinsics bind in this dialect.
    fn native_target(&self) -> NativeTarget;
    /// The kernel's first line, up to its opening brace, with what the dialect says of
    /// `options` there (launch bounds, a register limit).
    fn kernel_head(&self, name: &str, params: &str, options: &CompileOptions) -> String;
    /// The parameter that passes dynamic shared array `name`'s memory, where the dialect
    /// passes it (after the array's length).
    fn dynamic_shared_memory(&self, name: &str) -> Option<String>;
    /// The lines before the helpers: pragmas for what the kernel needs.
    fn preamble(&self, f64: bool, atomics64: bool) -> String;
    /// The file name `#line` gives the generated lines of kernel `name`.
    fn file_name(&self, name: &str) -> String;
    /// The barrier of a work group, over its shared and global memory.
    fn group_barrier(&self) -> &'static str;
    /// Whether subgroups have more than one lane (CUDA's 32-lane warps), so kernels with
    /// subgroup operations track their lane masks (see the `lanes` module); otherwise
    /// subgroups have one lane.
    fn has_warps(&self) -> bool;
    /// The declarations of `kernel`'s shared arrays and their `_len`s.
    fn shared_decls(&self, kernel: &Kernel, out: &mut String);
    /// The definition of the helper that converts to or from binary16 bits, rounding to
    /// nearest, ties to even: `kiln_h2f` (bits to `float`) for `from` = `u16`, `kiln_f2h`
    /// (`float` to bits) for `f32`, `kiln_d2h` (`double` to bits, one rounding) for `f64`.
    fn half_helper(&self, from: ScalarType) -> String;
    /// The atomic operation `a` on element `a.index` of the memory `name` (in bounds), with
    /// any helper it calls added to `helpers`.
    fn atomic(&self, helpers: &mut Helpers, name: &str, a: &AtomicCall) -> String;
}

/// The memory form of a scalar type (`bool` is stored as one unsigned byte, `f16` as its 16
/// bits).
pub(crate) fn mem_type(d: &dyn CDialect, s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bool => d.type_name(ScalarType::U8),
        ScalarType::F16 => d.type_name(ScalarType::U16),
        s => d.type_name(s),
    }
}

/// A shared array's element type in memory, its element count per element, and whether it
/// is bytes read through wider pointers (structs and vectors: 16-byte aligned).
pub(crate) fn shared_layout(
    d: &dyn CDialect,
    s: &kiln_ir::SharedDecl,
) -> (&'static str, u64, bool) {
    match &s.elem {
        kiln_ir::Type::Scalar(sc) => (mem_type(d, *sc), 1, false),
        other => (d.type_name(ScalarType::U8), other.size() as u64, true),
    }
}
