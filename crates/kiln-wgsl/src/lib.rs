//! # kiln-wgsl: kiln IR to WGSL, and WGSL to MSL, GLSL, HLSL and SPIR-V
//!
//! [`write_kernel`] writes one WGSL compute shader per kernel. Every IR value becomes one WGSL
//! value per scalar component, as in every kiln writer. What WGSL lacks is written out:
//!
//! * 8- and 16-bit integers live in `i32`/`u32` registers, wrapped back into range after each
//!   operation that can leave it. In memory they, `bool`, and every vector or struct element
//!   are packed into 32-bit words at their exact byte offsets (`array<u32>`); a buffer whose
//!   elements do not fill whole words is written with word atomics, so neighbouring work
//!   items never lose each other's bytes.
//! * Lengths, value parameters and the launch's group count travel in one read-only storage
//!   buffer, `kiln_args` (binding 0); buffers follow at bindings 1, 2, ... in parameter order.
//! * The group size and the sizes of dynamic shared arrays are pipeline-overridable constants
//!   (`kiln_group_x`, ..., `kiln_shared_len_<i>`), set when the pipeline is created.
//! * Grids larger than a dispatch allows along an axis are folded: the shader rebuilds the
//!   logical group id from the linear workgroup index and groups past the end return at once.
//! * Every IR rule (division by zero, shift amounts, saturating float-to-int casts, NaN in
//!   min/max, exact `%` on floats, rounding half away from zero, out-of-bounds memory) is
//!   written explicitly, mostly as helper functions emitted when used.
//!
//! * With [`WgslOptions::loop_budget`], every loop (those of helpers included) counts its
//!   iterations, per subgroup or per work item, and reaching the budget stores the kernel's
//!   tag in a `kiln_fault` buffer ([`Shader::fault_binding`]): for adapters that silently stop
//!   loops after that many iterations.
//!
//! Subgroups have one lane, as on the OpenCL writer, unless [`WgslOptions::subgroups`] is set:
//! then subgroup operations are WGSL's subgroup built-ins (the adapter needs SUBGROUP and
//! SUBGROUP_BARRIER), with kiln's rules kept: operations cover the active lanes, a source lane
//! outside the subgroup or not active gives the caller's own value, and float minimum and
//! maximum follow kiln's NaN and signed-zero rule. `f64` needs the
//! adapter's SHADER_F64 and 64-bit integers SHADER_INT64 ([`Needs`]); 64-bit atomics are not
//! written.
//!
//! [`translate`] parses and validates the WGSL with naga and writes it as MSL, GLSL (compute),
//! HLSL or SPIR-V.

#![deny(missing_docs)]
mod expr;
mod half;
mod keywords;
mod math;
mod native;
mod storage;
mod translate;
mod writer;

use keywords::NAMER;

pub use translate::{translate, TranslateTarget, Translated};

use kiln_ir::*;
use kiln_writer::{
    bound_native, common_line, component_name, component_paths, components, native_struct_types,
    nested_value, rules, temp_name, AtomicCall, DeviceFunction, Helpers, StructCall, SubgroupCall,
    Syntax, Written,
};
use std::collections::HashSet;

/// What the shader needs from the adapter: the [`kiln_ir::Features`] of its types, and
/// what its spelling adds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Uses `f64` (SHADER_F64).
    pub f64: bool,
    /// Uses `i64`/`u64` (SHADER_INT64).
    pub int64: bool,
    /// Uses subgroup built-ins (SUBGROUP and SUBGROUP_BARRIER); only with
    /// [`WgslOptions::subgroups`].
    pub subgroups: bool,
}

/// How [`write_kernel_with`] writes a shader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WgslOptions {
    /// Write subgroup operations with WGSL's subgroup built-ins, for an adapter that has
    /// them; without, subgroups have one lane and the shader runs on any adapter.
    pub subgroups: bool,
    /// Count loop iterations and report reaching a budget; `None` writes no counting.
    pub loop_budget: Option<LoopBudget>,
}

/// How a shader counts loop iterations, for adapters that stop loops after a number of iterations
/// without telling (Mesa's llvmpipe: 65535 per SIMD batch of work items, all its loops together).
/// Every pass through the top of a loop's body counts one (helpers' loops included), and after an
/// `if` whose branches hold loops, each loop of a branch that no work item took (that this work
/// item did not take, when counting per work item) counts one, since llvmpipe runs it once; once
/// the count reaches `limit`, the shader stores the override constant `kiln_fault_tag` into word 0
/// of the `kiln_fault` buffer with `atomicMax`, so that the host can report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoopBudget {
    /// The count that is reported.
    pub limit: u32,
    /// Count per subgroup of this many work items (a pass counts when any of its work items
    /// makes it), for adapters that run a subgroup as one SIMD batch whose loops run until all
    /// its work items are done, so that the work items of a batch that take different loops
    /// add up. The subgroups must be runs of this many consecutive local indices, and the
    /// shader needs subgroup operations (SUBGROUP); it uses no subgroup built-in values, which
    /// WGSL allows only in one-dimensional groups. `None`: each work item counts its own
    /// passes.
    pub subgroup_size: Option<u32>,
}

/// The most subgroups of a group whose loop passes [`LoopBudget::subgroup_size`] counts apart;
/// subgroups past it share the last count. Its counts take `4 *` this many bytes of the group's
/// shared memory.
pub const LOOP_COUNT_SUBGROUPS: u32 = 128;

/// The override constant that [`WgslOptions::loop_budget`] stores as the kernel's fault tag.
pub const FAULT_TAG_OVERRIDE: &str = "kiln_fault_tag";

/// Where a kernel parameter travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamSlot {
    /// A storage buffer at `binding`; its element count is word `len_word` of `kiln_args`.
    Buffer {
        /// The binding number in group 0.
        binding: u32,
        /// The index of the length word in `kiln_args`.
        len_word: u32,
    },
    /// A value whose flattened components start at word `first_word` of `kiln_args`: one word
    /// per component of 32 bits or less (sign- or zero-extended; `bool` is 0 or 1), two (low,
    /// high) per 64-bit component.
    Value {
        /// The index of the first word in `kiln_args`.
        first_word: u32,
    },
}

/// A written shader and how to bind it.
#[derive(Clone, Debug)]
pub struct Shader {
    /// The WGSL source text.
    pub text: String,
    /// The entry point's name.
    pub entry: String,
    /// Adapter features it needs.
    pub needs: Needs,
    /// One slot per kernel parameter, in order.
    pub params: Vec<ParamSlot>,
    /// The number of 32-bit words in `kiln_args` (the first three are the logical group count).
    pub args_words: u32,
    /// For each dynamic shared array, in declaration order, the override constant that sizes
    /// it (in elements).
    pub shared_overrides: Vec<String>,
    /// With [`WgslOptions::loop_budget`]: the binding of `kiln_fault`, a read-write storage
    /// buffer of at least one `u32` that stays 0 until a work item reaches the budget.
    pub fault_binding: Option<u32>,
}

/// The override constants holding the group size, x, y and z.
pub const GROUP_SIZE_OVERRIDES: [&str; 3] = ["kiln_group_x", "kiln_group_y", "kiln_group_z"];

pub use kiln_writer::WriteError;

type W<T> = Result<T, WriteError>;

fn err<T>(m: impl Into<String>) -> W<T> {
    Err(WriteError(m.into()))
}

/// How a memory (buffer parameter or shared array) is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Storage {
    /// `array<T>` of the element's own 32- or 64-bit scalar type.
    Typed(ScalarType),
    /// `array<atomic<i32|u32>>`; `f32` elements are kept as their bits in `atomic<u32>`.
    Atomic(ScalarType),
    /// `array<u32>` words holding the elements' bytes; atomic words when writes of
    /// neighbouring elements can share a word.
    Words { atomic: bool },
    /// One workgroup array per component, in register types (`bool` as `u32`).
    Shared,
}

struct MemInfo {
    name: String,
    elem: Type,
    storage: Storage,
    len: String,
}

/// Writes `kernel` as a WGSL compute shader that runs on any adapter (subgroups of one lane).
/// Fails for IR WGSL cannot express (64-bit atomics), with what.
pub fn write_kernel(kernel: &Kernel) -> W<Shader> {
    write_kernel_with(kernel, WgslOptions::default())
}

/// Writes `kernel` as a WGSL compute shader as `options` say. Fails like [`write_kernel`].
pub fn write_kernel_with(kernel: &Kernel, options: WgslOptions) -> W<Shader> {
    let info = validate(kernel).map_err(|e| WriteError(e.to_string()))?;
    write_validated(kernel, &info, options)
}

/// Writes `kernel`, which validated with `info`, as [`write_kernel_with`] does, without
/// validating it again.
pub fn write_validated(kernel: &Kernel, info: &KernelInfo, options: WgslOptions) -> W<Shader> {
    // Renaming keeps every expression's type, so `info` holds for the renamed kernel.
    let k = NAMER.rename(kernel, &kernel.native_names(NativeTarget::Wgsl));
    Writer {
        helpers: Helpers::default(),
        // What the types need; the writer adds what its own spelling needs (subgroup
        // built-ins, 64-bit integers for f64 bit tricks).
        needs: Needs {
            f64: info.features.f64,
            int64: info.features.int64,
            subgroups: false,
        },
        mems: Vec::new(),
        shared_base: 0,
        options,
        counts_trips: std::cell::Cell::new(false),
        native_calls: 0,
    }
    .kernel(&k, info)
}

/// The WGSL register type of a scalar type.
fn rt(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bool => "bool",
        ScalarType::I8 | ScalarType::I16 | ScalarType::I32 => "i32",
        ScalarType::U8 | ScalarType::U16 | ScalarType::U32 => "u32",
        ScalarType::I64 => "i64",
        ScalarType::U64 => "u64",
        ScalarType::F16 | ScalarType::F32 => "f32",
        ScalarType::F64 => "f64",
    }
}

/// The register type a scalar type is widened to (8/16-bit integers to 32, `f16` to `f32`).
fn reg(s: ScalarType) -> ScalarType {
    match s {
        ScalarType::F16 => ScalarType::F32,
        ScalarType::I8 | ScalarType::I16 => ScalarType::I32,
        ScalarType::U8 | ScalarType::U16 => ScalarType::U32,
        other => other,
    }
}

/// Brings an 8/16-bit value held in a 32-bit register back into its range (no shifts, so
/// nothing a constant evaluator could call an overflow).
fn wrap(s: ScalarType, x: String) -> String {
    match s {
        ScalarType::I8 => format!("(((({x}) & 255i) ^ 128i) - 128i)"),
        ScalarType::I16 => format!("(((({x}) & 65535i) ^ 32768i) - 32768i)"),
        ScalarType::U8 => format!("(({x}) & 255u)"),
        ScalarType::U16 => format!("(({x}) & 65535u)"),
        _ => x,
    }
}

/// A finite float constant (normal or zero), or its bits when it is not.
fn float_lit(v: f64, s: ScalarType) -> String {
    let s = reg(s);
    let (suffix, normal) = if s == ScalarType::F32 {
        let f = v as f32;
        ("f", f == 0.0 || f.is_normal())
    } else {
        ("lf", v == 0.0 || v.is_normal())
    };
    if !normal {
        return if s == ScalarType::F32 {
            format!("bitcast<f32>({:#x}u)", (v as f32).to_bits())
        } else {
            format!("bitcast<f64>({:#x}lu)", v.to_bits())
        };
    }
    if v == 0.0 && v.is_sign_negative() {
        return format!("(-0.0{suffix})");
    }
    let text = if s == ScalarType::F32 {
        format!("{:e}{suffix}", v as f32)
    } else {
        format!("{v:e}{suffix}")
    };
    if v < 0.0 {
        format!("({text})")
    } else {
        text
    }
}

fn lit(v: ScalarValue) -> String {
    match v {
        ScalarValue::Bool(b) => (if b { "true" } else { "false" }).into(),
        ScalarValue::F16(h) => float_lit(h.to_f64(), ScalarType::F32),
        ScalarValue::F32(f) => float_lit(f as f64, ScalarType::F32),
        ScalarValue::F64(f) => float_lit(f, ScalarType::F64),
        ScalarValue::I64(i) if i == i64::MIN => "(-9223372036854775807li - 1li)".into(),
        ScalarValue::I64(i) if i < 0 => format!("({i}li)"),
        ScalarValue::I64(i) => format!("{i}li"),
        ScalarValue::U64(u) => format!("{u}lu"),
        other => {
            let s = other.ty();
            let bits = other.to_bits();
            if s.is_signed() {
                let shift = 64 - s.bits();
                let v = ((bits << shift) as i64) >> shift;
                if v == i32::MIN as i64 {
                    "i32(-2147483648)".into()
                } else if v < 0 {
                    format!("({v}i)")
                } else {
                    format!("{v}i")
                }
            } else {
                format!("{bits}u")
            }
        }
    }
}

fn zero(s: ScalarType) -> String {
    lit(ScalarValue::zero(reg(s)))
}

fn one(s: ScalarType) -> String {
    lit(ScalarValue::from_bits(
        reg(s),
        match reg(s) {
            ScalarType::F32 => 1f32.to_bits() as u64,
            ScalarType::F64 => 1f64.to_bits(),
            _ => 1,
        },
    ))
}

/// The exponent-field mask and infinity bits of a float type, as WGSL unsigned literals.
fn float_bits(s: ScalarType) -> (&'static str, &'static str, &'static str, &'static str) {
    if reg(s) == ScalarType::F32 {
        ("u32", "0x7fffffffu", "0x7f800000u", "0x80000000u")
    } else {
        (
            "u64",
            "0x7ffffffffffffffflu",
            "0x7ff0000000000000lu",
            "0x8000000000000000lu",
        )
    }
}

struct Writer {
    helpers: Helpers,
    needs: Needs,
    /// Buffer parameters (indexed by parameter) then shared arrays.
    mems: Vec<Option<MemInfo>>,
    shared_base: usize,
    options: WgslOptions,
    /// Whether some loop counts its passes ([`Writer::trip`] was written).
    counts_trips: std::cell::Cell<bool>,
    /// Native calls with a result written so far, to name each one's temporary apart.
    native_calls: usize,
}

impl Writer {
    fn mem(&self, m: Memory) -> W<&MemInfo> {
        let i = match m {
            Memory::Buffer(i) => i as usize,
            Memory::Shared(i) => self.shared_base + i as usize,
        };
        self.mems
            .get(i)
            .and_then(|m| m.as_ref())
            .ok_or_else(|| WriteError(format!("no memory {m:?}")))
    }

    /// What the top of each loop's body runs: counting the iteration, with
    /// [`WgslOptions::loop_budget`]; nothing without.
    fn trip(&self) -> &'static str {
        if self.options.loop_budget.is_some() {
            self.counts_trips.set(true);
            "kiln_trip(); "
        } else {
            ""
        }
    }

    fn helper(&mut self, text: String) {
        self.helpers.add(text);
    }
}

/// The typed body a writer walks.
type Cx<'a> = TypedBody<'a>;
