//! # kiln-c: kiln IR to OpenCL C and CUDA C
//!
//! One [`Writer`] with two dialects. Every IR value becomes one C variable per scalar
//! component (vectors and structs are flattened the same way as everywhere in kiln), so memory
//! layout is exact: struct and vector buffer elements are read and written at their byte
//! offsets. Each IR rule where C differs (wrapping integer arithmetic, division by zero, shift
//! amounts, saturating float-to-int casts, NaN in min/max, out-of-bounds memory) is written out
//! explicitly, mostly as small helper functions emitted only when used. A load or store whose
//! guard already compares its index with the buffer's length ([`InBounds`]) is written without
//! its bounds check, which could not fail there. Names follow the IR's
//! names (which follow the Rust names), and each IR statement is one line of C. Where the IR
//! records the Rust line a statement comes from (kernels written with `#[kiln::kernel]`), a
//! `#line` directive names that file and line.
//!
//! Buffer parameters become a pointer plus a `<name>_len` element count (`uint`), in parameter
//! order. Value parameters are passed as their flattened scalar components
//! (`<name>_0`, `<name>_1`, ...), or under their own name when scalar. A `bool` in memory or as
//! a parameter is one `uchar` (0 or 1); an `f16` there is its 16 bits (a `float` elsewhere). [`Source::slots`] says what each written parameter
//! takes ([`Slot`]); the OpenCL and CUDA runtimes bind their arguments by it, so the
//! convention is stated once, here.

#![deny(missing_docs)]
use kiln_ir::*;
use kiln_writer::{
    bound_native, common_line, component_name, component_paths, components, native_struct_types,
    nested_value, rules, temp_name, AtomicCall, DeviceFunction, Helpers, StructCall, SubgroupCall,
    Syntax, Written,
};

mod convention;
mod dialect;
mod expr;
mod half;
mod keywords;
mod lanes;
mod native;
mod storage;
#[cfg(test)]
mod tests;
mod writer;

pub use convention::{ScalarArg, Slot};
use dialect::{mem_type, CDialect};
use keywords::NAMER;
use storage::mem_info;
pub use storage::{
    cuda_fixed_shared_in_dynamic_region, cuda_uses_dynamic_region, dynamic_shared_bytes,
    CUDA_STATIC_SHARED_LIMIT,
};

/// Which C dialect to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenCL C 1.2 (`__kernel`, `get_global_id`, `barrier`).
    OpenCl,
    /// CUDA C++ for NVRTC (`extern "C" __global__`, `threadIdx`, `__syncthreads`, warp
    /// intrinsics with 32 lanes).
    Cuda,
}

impl Dialect {
    /// How this dialect spells what differs between the two.
    fn syntax(self) -> &'static dyn CDialect {
        match self {
            Dialect::OpenCl => &dialect::OpenClC,
            Dialect::Cuda => &dialect::CudaC,
        }
    }
}

/// What the kernel needs from the device: the [`kiln_ir::Features`] validation found, as
/// this dialect has them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Uses `f64`.
    pub f64: bool,
    /// Uses 64-bit atomics.
    pub atomics64: bool,
    /// Uses subgroup operations (other than reading the subgroup size/lane).
    pub subgroups: bool,
}

/// Generated source and what it needs.
#[derive(Clone, Debug)]
pub struct Source {
    /// The C source text.
    pub text: String,
    /// The entry point's name.
    pub entry: String,
    /// Device requirements.
    pub needs: Needs,
    /// What each of the entry point's parameters takes, in order.
    pub slots: Vec<Slot>,
}

pub use kiln_writer::WriteError;

type W<T> = Result<T, WriteError>;

fn err<T>(m: impl Into<String>) -> W<T> {
    Err(WriteError(m.into()))
}

/// Writes kernels as C source in one dialect.
pub struct Writer {
    d: &'static dyn CDialect,
    /// Helper functions in the order they were first needed, so each comes after the
    /// helpers it calls.
    helpers: Helpers,
    needs: Needs,
    loop_id: usize,
    /// Native calls written so far, to name each one's temporaries apart.
    native_calls: usize,
    /// The Rust line the statements being written come from, and whether the next line of
    /// output is already numbered as that line.
    at: Option<(u32, bool)>,
    /// The lane masks of a CUDA kernel with subgroup operations (see the `lanes` module);
    /// `None` elsewhere.
    lanes: Option<lanes::Lanes>,
}

/// Stands for a `#line` directive that hands the numbering back to the generated source
/// after a body whose lines were numbered as Rust lines; [`Writer::kernel`] fills it in.
const LINE_RESET: &str = "#line kiln_reset";

/// Validates `kernel` and writes it in `dialect`. Fails for invalid IR and for IR the writer
/// cannot express (reported with what).
pub fn write_kernel(kernel: &Kernel, dialect: Dialect) -> W<Source> {
    let info = validate(kernel).map_err(|e| WriteError(e.to_string()))?;
    write_validated(kernel, &info, dialect)
}

/// Writes `kernel`, which validated with `info`, in `dialect`. Fails for IR the writer cannot
/// express (reported with what).
pub fn write_validated(kernel: &Kernel, info: &KernelInfo, dialect: Dialect) -> W<Source> {
    // CUDA kernels with subgroup operations carry lane masks through their control flow,
    // which the writer follows best with the device functions' statements in the body.
    let d = dialect.syntax();
    let tracked = d.has_warps() && lanes::uses_subgroups(kernel);
    // Renaming keeps every expression's type, so `info` holds for the renamed kernel; the
    // inlined one is typed anew.
    let inlined;
    let taken = kernel.native_names(d.native_target());
    let (k, info) = match tracked {
        true => {
            let k = inline_calls(kernel);
            inlined = KernelInfo::typed(&k)?;
            (NAMER.rename(&k, &taken), &inlined)
        }
        false => (NAMER.rename(kernel, &taken), info),
    };
    Writer {
        d,
        helpers: Helpers::default(),
        needs: Needs {
            f64: info.features.f64,
            atomics64: info.features.atomics64,
            subgroups: d.has_warps() && info.features.subgroups,
        },
        loop_id: 0,
        native_calls: 0,
        at: None,
        lanes: None,
    }
    .kernel(&k, info, tracked)
}

fn unsigned_of(s: ScalarType) -> ScalarType {
    match s {
        ScalarType::I8 => ScalarType::U8,
        ScalarType::I16 => ScalarType::U16,
        ScalarType::I32 => ScalarType::U32,
        ScalarType::I64 => ScalarType::U64,
        other => other,
    }
}

/// The unsigned type arithmetic on `s` is done in: at least 32 bits, so narrow operands
/// never overflow a promoted `int`.
fn wide_unsigned(s: ScalarType) -> ScalarType {
    if s.bits() == 64 {
        ScalarType::U64
    } else {
        ScalarType::U32
    }
}

/// A finite float constant.
fn float_lit(v: f64, s: ScalarType) -> String {
    let suffix = if s == ScalarType::F64 { "" } else { "f" };
    if v == 0.0 && v.is_sign_negative() {
        return format!("(-0.0{suffix})");
    }
    format!("{v:e}{suffix}")
        .replace("e", "e+")
        .replace("e+-", "e-")
}

impl Writer {
    fn t(&self, s: ScalarType) -> &'static str {
        self.d.type_name(s)
    }

    fn lit(&self, v: ScalarValue) -> String {
        let t = self.t(v.ty());
        match v {
            ScalarValue::Bool(b) => (if b { "true" } else { "false" }).into(),
            ScalarValue::F16(h) => self.lit(ScalarValue::F32(h.to_f32())),
            ScalarValue::F32(f) if !f.is_finite() => {
                self.d.nonfinite(ScalarType::F32, f.to_bits() as u64)
            }
            ScalarValue::F64(f) if !f.is_finite() => self.d.nonfinite(ScalarType::F64, f.to_bits()),
            ScalarValue::F32(f) => float_lit(f as f64, ScalarType::F32),
            ScalarValue::F64(f) => float_lit(f, ScalarType::F64),
            ScalarValue::I64(i) if i == i64::MIN => format!("(({t})(-9223372036854775807LL - 1))"),
            ScalarValue::I64(i) => format!("(({t}){i}LL)"),
            ScalarValue::U64(u) => format!("(({t}){u}ULL)"),
            ScalarValue::I32(i) if i == i32::MIN => "((int)(-2147483647 - 1))".into(),
            ScalarValue::U32(u) => format!("{u}u"),
            other => format!(
                "(({t}){})",
                other.to_bits() as i64
                    - if other.ty().is_signed()
                        && (other.to_bits() >> (other.ty().bits() - 1)) & 1 == 1
                    {
                        1i64 << other.ty().bits()
                    } else {
                        0
                    }
            ),
        }
    }

    fn helper(&mut self, text: String) {
        self.helpers.add(text);
    }
}

/// The typed body a writer walks.
type Cx<'a> = TypedBody<'a>;
