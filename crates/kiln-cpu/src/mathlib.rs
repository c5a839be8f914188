//! Math functions the JIT code calls: thin `extern "C"` wrappers over Rust's `f32`/`f64`
//! methods, registered as JIT symbols and declared as imports of the module.

use cranelift_codegen::ir::{types, AbiParam, Signature};
use cranelift_codegen::isa::CallConv;
use cranelift_jit::JITBuilder;
use cranelift_jit::JITModule;
use cranelift_module::{FuncId, Linkage, Module};
use kiln_ir::MathFn;
use std::collections::HashMap;

macro_rules! unary {
    ($($name:ident, $t:ty, $e:expr;)*) => {$(
        extern "C" fn $name(x: $t) -> $t { let f: fn($t) -> $t = $e; f(x) }
    )*};
}
macro_rules! binary {
    ($($name:ident, $t:ty, $e:expr;)*) => {$(
        extern "C" fn $name(x: $t, y: $t) -> $t { let f: fn($t, $t) -> $t = $e; f(x, y) }
    )*};
}

unary! {
    kiln_sin_f32, f32, f32::sin; kiln_sin_f64, f64, f64::sin;
    kiln_cos_f32, f32, f32::cos; kiln_cos_f64, f64, f64::cos;
    kiln_tan_f32, f32, f32::tan; kiln_tan_f64, f64, f64::tan;
    kiln_asin_f32, f32, f32::asin; kiln_asin_f64, f64, f64::asin;
    kiln_acos_f32, f32, f32::acos; kiln_acos_f64, f64, f64::acos;
    kiln_atan_f32, f32, f32::atan; kiln_atan_f64, f64, f64::atan;
    kiln_sinh_f32, f32, f32::sinh; kiln_sinh_f64, f64, f64::sinh;
    kiln_cosh_f32, f32, f32::cosh; kiln_cosh_f64, f64, f64::cosh;
    kiln_tanh_f32, f32, f32::tanh; kiln_tanh_f64, f64, f64::tanh;
    kiln_exp_f32, f32, f32::exp; kiln_exp_f64, f64, f64::exp;
    kiln_exp2_f32, f32, f32::exp2; kiln_exp2_f64, f64, f64::exp2;
    kiln_log_f32, f32, f32::ln; kiln_log_f64, f64, f64::ln;
    kiln_log2_f32, f32, f32::log2; kiln_log2_f64, f64, f64::log2;
    kiln_log10_f32, f32, f32::log10; kiln_log10_f64, f64, f64::log10;
    kiln_round_f32, f32, f32::round; kiln_round_f64, f64, f64::round;
}
binary! {
    kiln_atan2_f32, f32, f32::atan2; kiln_atan2_f64, f64, f64::atan2;
    kiln_pow_f32, f32, f32::powf; kiln_pow_f64, f64, f64::powf;
    kiln_fmod_f32, f32, |a, b| a % b; kiln_fmod_f64, f64, |a, b| a % b;
}

/// Zeroes `len` bytes at `ptr` (array locals at the start of each work item).
///
/// # Safety
/// Called only by JIT code on stack slots of at least `len` bytes.
unsafe extern "C" fn kiln_memzero(ptr: *mut u8, len: u64) {
    std::ptr::write_bytes(ptr, 0, len as usize);
}

enum Sig {
    Unary(types::Type),
    Binary(types::Type),
    PtrLen,
}

fn table() -> Vec<(&'static str, *const u8, Sig)> {
    macro_rules! row {
        ($name:ident, $sig:expr) => {
            (stringify!($name), $name as *const u8, $sig)
        };
    }
    use Sig::*;
    let (f, d) = (types::F32, types::F64);
    vec![
        row!(kiln_sin_f32, Unary(f)),
        row!(kiln_sin_f64, Unary(d)),
        row!(kiln_cos_f32, Unary(f)),
        row!(kiln_cos_f64, Unary(d)),
        row!(kiln_tan_f32, Unary(f)),
        row!(kiln_tan_f64, Unary(d)),
        row!(kiln_asin_f32, Unary(f)),
        row!(kiln_asin_f64, Unary(d)),
        row!(kiln_acos_f32, Unary(f)),
        row!(kiln_acos_f64, Unary(d)),
        row!(kiln_atan_f32, Unary(f)),
        row!(kiln_atan_f64, Unary(d)),
        row!(kiln_sinh_f32, Unary(f)),
        row!(kiln_sinh_f64, Unary(d)),
        row!(kiln_cosh_f32, Unary(f)),
        row!(kiln_cosh_f64, Unary(d)),
        row!(kiln_tanh_f32, Unary(f)),
        row!(kiln_tanh_f64, Unary(d)),
        row!(kiln_exp_f32, Unary(f)),
        row!(kiln_exp_f64, Unary(d)),
        row!(kiln_exp2_f32, Unary(f)),
        row!(kiln_exp2_f64, Unary(d)),
        row!(kiln_log_f32, Unary(f)),
        row!(kiln_log_f64, Unary(d)),
        row!(kiln_log2_f32, Unary(f)),
        row!(kiln_log2_f64, Unary(d)),
        row!(kiln_log10_f32, Unary(f)),
        row!(kiln_log10_f64, Unary(d)),
        row!(kiln_round_f32, Unary(f)),
        row!(kiln_round_f64, Unary(d)),
        row!(kiln_atan2_f32, Binary(f)),
        row!(kiln_atan2_f64, Binary(d)),
        row!(kiln_pow_f32, Binary(f)),
        row!(kiln_pow_f64, Binary(d)),
        row!(kiln_fmod_f32, Binary(f)),
        row!(kiln_fmod_f64, Binary(d)),
        row!(kiln_memzero, PtrLen),
    ]
}

/// The imported helper functions of a JIT module, by symbol name.
pub struct MathImports {
    ids: HashMap<&'static str, FuncId>,
}

impl MathImports {
    /// Registers every helper's address with the JIT builder.
    pub fn register(builder: &mut JITBuilder) {
        for (name, ptr, _) in table() {
            builder.symbol(name, ptr);
        }
    }

    /// Declares every helper as an import of `module`.
    pub fn declare(module: &mut JITModule) -> Result<MathImports, String> {
        let call_conv: CallConv = module.isa().default_call_conv();
        let mut ids = HashMap::new();
        for (name, _, sig) in table() {
            let mut s = Signature::new(call_conv);
            match sig {
                Sig::Unary(t) => {
                    s.params.push(AbiParam::new(t));
                    s.returns.push(AbiParam::new(t));
                }
                Sig::Binary(t) => {
                    s.params.extend([AbiParam::new(t), AbiParam::new(t)]);
                    s.returns.push(AbiParam::new(t));
                }
                Sig::PtrLen => s
                    .params
                    .extend([AbiParam::new(types::I64), AbiParam::new(types::I64)]),
            }
            let id = module
                .declare_function(name, Linkage::Import, &s)
                .map_err(|e| e.to_string())?;
            ids.insert(name, id);
        }
        Ok(MathImports { ids })
    }

    /// The import named `name`; every name used by the lowering is in the table.
    pub fn get(&self, name: &'static str) -> FuncId {
        self.ids[name]
    }
}

/// The helper implementing a libm-style math function, if it needs one.
pub fn import_name(f: MathFn, f64_: bool) -> Option<&'static str> {
    let pair = match f {
        MathFn::Sin => ("kiln_sin_f32", "kiln_sin_f64"),
        MathFn::Cos => ("kiln_cos_f32", "kiln_cos_f64"),
        MathFn::Tan => ("kiln_tan_f32", "kiln_tan_f64"),
        MathFn::Asin => ("kiln_asin_f32", "kiln_asin_f64"),
        MathFn::Acos => ("kiln_acos_f32", "kiln_acos_f64"),
        MathFn::Atan => ("kiln_atan_f32", "kiln_atan_f64"),
        MathFn::Atan2 => ("kiln_atan2_f32", "kiln_atan2_f64"),
        MathFn::Sinh => ("kiln_sinh_f32", "kiln_sinh_f64"),
        MathFn::Cosh => ("kiln_cosh_f32", "kiln_cosh_f64"),
        MathFn::Tanh => ("kiln_tanh_f32", "kiln_tanh_f64"),
        MathFn::Exp => ("kiln_exp_f32", "kiln_exp_f64"),
        MathFn::Exp2 => ("kiln_exp2_f32", "kiln_exp2_f64"),
        MathFn::Log => ("kiln_log_f32", "kiln_log_f64"),
        MathFn::Log2 => ("kiln_log2_f32", "kiln_log2_f64"),
        MathFn::Log10 => ("kiln_log10_f32", "kiln_log10_f64"),
        MathFn::Pow => ("kiln_pow_f32", "kiln_pow_f64"),
        MathFn::Round => ("kiln_round_f32", "kiln_round_f64"),
        _ => return None,
    };
    Some(if f64_ { pair.1 } else { pair.0 })
}
