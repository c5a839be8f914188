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
//! a parameter is one `uchar` (0 or 1).

use kiln_ir::*;
use std::fmt::Write as _;

mod lanes;

/// Which C dialect to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenCL C 1.2 (`__kernel`, `get_global_id`, `barrier`).
    OpenCl,
    /// CUDA C++ for NVRTC (`extern "C" __global__`, `threadIdx`, `__syncthreads`, warp
    /// intrinsics with 32 lanes).
    Cuda,
}

/// What the kernel needs from the device, found while writing.
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
}

pub use kiln_ir::WriteError;

type W<T> = Result<T, WriteError>;

fn err<T>(m: impl Into<String>) -> W<T> {
    Err(WriteError(m.into()))
}

/// Writes kernels as C source in one dialect.
pub struct Writer {
    d: Dialect,
    /// Helper functions in the order they were first needed, so each comes after the
    /// helpers it calls.
    helpers: Vec<String>,
    needs: Needs,
    loop_id: usize,
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

/// Writes `kernel` in `dialect`. Fails for IR the writer cannot express (reported with what).
pub fn write_kernel(kernel: &Kernel, dialect: Dialect) -> W<Source> {
    validate(kernel).map_err(|e| WriteError(e.to_string()))?;
    // CUDA kernels with subgroup operations carry lane masks through their control flow,
    // which the writer follows best with the device functions' statements in the body.
    let k = match dialect == Dialect::Cuda && lanes::uses_subgroups(kernel) {
        true => inline_calls(kernel).with_names(safe),
        false => kernel.with_names(safe),
    };
    Writer {
        d: dialect,
        helpers: Vec::new(),
        needs: Needs::default(),
        loop_id: 0,
        at: None,
        lanes: None,
    }
    .kernel(&k)
}

/// The most bytes of fixed-size `__shared__` arrays a CUDA block may declare; ptxas refuses
/// more, although devices since Volta offer more to blocks that opt in at launch.
pub const CUDA_STATIC_SHARED_LIMIT: u64 = 48 * 1024;

/// True when the CUDA writer places `kernel`'s fixed-size shared arrays in the dynamic region
/// as well (each at the next 16-byte boundary, in declaration order, before any dynamic one
/// that follows it): they add up to more than [`CUDA_STATIC_SHARED_LIMIT`].
pub fn cuda_fixed_shared_in_dynamic_region(kernel: &Kernel) -> bool {
    let fixed: u64 = kernel
        .shared
        .iter()
        .filter_map(|s| match s.len {
            SharedLen::Static(n) => Some(n as u64 * s.elem.size() as u64),
            SharedLen::Dynamic => None,
        })
        .sum();
    fixed > CUDA_STATIC_SHARED_LIMIT
}

/// True when the CUDA writer declares `kernel`'s extern shared array: it has a dynamic shared
/// array, or its fixed-size ones are placed there ([`cuda_fixed_shared_in_dynamic_region`]).
pub fn cuda_uses_dynamic_region(kernel: &Kernel) -> bool {
    kernel.shared.iter().any(|s| s.len == SharedLen::Dynamic)
        || cuda_fixed_shared_in_dynamic_region(kernel)
}

/// Bytes of dynamic shared memory a CUDA launch of `kernel` needs when its shared arrays have
/// `lengths` elements (in declaration order): each array in the region starts at a 16-byte
/// boundary of the one extern array the writer declares. The region holds the dynamic arrays,
/// and the fixed-size ones too where [`cuda_fixed_shared_in_dynamic_region`] says so.
pub fn dynamic_shared_bytes(kernel: &Kernel, lengths: &[u32]) -> u64 {
    let fixed_too = cuda_fixed_shared_in_dynamic_region(kernel);
    kernel
        .shared
        .iter()
        .zip(lengths)
        .filter(|(s, _)| fixed_too || s.len == SharedLen::Dynamic)
        .map(|(s, &n)| (n as u64 * s.elem.size() as u64).div_ceil(16) * 16)
        .sum()
}

/// The C name of a scalar type in a dialect (register form; `bool` is `bool`).
pub fn c_type(d: Dialect, s: ScalarType) -> &'static str {
    match (d, s) {
        (_, ScalarType::Bool) => "bool",
        (Dialect::OpenCl, ScalarType::I8) => "char",
        (Dialect::Cuda, ScalarType::I8) => "signed char",
        (Dialect::OpenCl, ScalarType::U8) => "uchar",
        (Dialect::Cuda, ScalarType::U8) => "unsigned char",
        (_, ScalarType::I16) => "short",
        (Dialect::OpenCl, ScalarType::U16) => "ushort",
        (Dialect::Cuda, ScalarType::U16) => "unsigned short",
        (_, ScalarType::I32) => "int",
        (Dialect::OpenCl, ScalarType::U32) => "uint",
        (Dialect::Cuda, ScalarType::U32) => "unsigned int",
        (Dialect::OpenCl, ScalarType::I64) => "long",
        (Dialect::Cuda, ScalarType::I64) => "long long",
        (Dialect::OpenCl, ScalarType::U64) => "ulong",
        (Dialect::Cuda, ScalarType::U64) => "unsigned long long",
        (_, ScalarType::F32) => "float",
        (_, ScalarType::F64) => "double",
    }
}

/// Memory form of a scalar type (`bool` is stored as one unsigned byte).
fn mem_type(d: Dialect, s: ScalarType) -> &'static str {
    if s == ScalarType::Bool {
        c_type(d, ScalarType::U8)
    } else {
        c_type(d, s)
    }
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

/// A NaN or infinity written from its exact bits (folding `0.0/0.0` is not reliable across
/// compilers).
fn nonfinite_lit(d: Dialect, s: ScalarType, bits: u64) -> String {
    match (d, s) {
        (Dialect::OpenCl, ScalarType::F32) => format!("as_float({:#x}u)", bits as u32),
        (Dialect::OpenCl, _) => format!("as_double({bits:#x}UL)"),
        (Dialect::Cuda, ScalarType::F32) => format!("__uint_as_float({:#x}u)", bits as u32),
        (Dialect::Cuda, _) => format!("__longlong_as_double({bits:#x}LL)"),
    }
}

/// A finite float constant.
fn float_lit(v: f64, s: ScalarType) -> String {
    let suffix = if s == ScalarType::F32 { "f" } else { "" };
    if v == 0.0 && v.is_sign_negative() {
        return format!("(-0.0{suffix})");
    }
    format!("{v:e}{suffix}")
        .replace("e", "e+")
        .replace("e+-", "e-")
}

impl Writer {
    fn t(&self, s: ScalarType) -> &'static str {
        c_type(self.d, s)
    }

    fn lit(&self, v: ScalarValue) -> String {
        let t = self.t(v.ty());
        match v {
            ScalarValue::Bool(b) => (if b { "true" } else { "false" }).into(),
            ScalarValue::F32(f) if !f.is_finite() => {
                nonfinite_lit(self.d, ScalarType::F32, f.to_bits() as u64)
            }
            ScalarValue::F64(f) if !f.is_finite() => {
                nonfinite_lit(self.d, ScalarType::F64, f.to_bits())
            }
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
        if !self.helpers.contains(&text) {
            self.helpers.push(text);
        }
    }

    fn fn_prefix(&self) -> &'static str {
        match self.d {
            Dialect::OpenCl => "static inline",
            Dialect::Cuda => "static __device__ __forceinline__",
        }
    }

    fn global(&self) -> &'static str {
        match self.d {
            Dialect::OpenCl => "__global ",
            Dialect::Cuda => "",
        }
    }

    fn note_type(&mut self, s: ScalarType) {
        if s == ScalarType::F64 {
            self.needs.f64 = true;
        }
    }

    fn kernel(mut self, k: &Kernel) -> W<Source> {
        let tracked = self.d == Dialect::Cuda && lanes::uses_subgroups(k);
        let with_mask = match tracked {
            true => lanes::functions_using_subgroups(k),
            false => Vec::new(),
        };
        let mut body = String::new();
        for (fi, f) in k.functions.iter().enumerate() {
            self.lanes = (with_mask.get(fi) == Some(&true))
                .then(|| lanes::Lanes::new("kiln_lanes_in", with_mask.clone()));
            self.function(k, fi, f, &mut body)?;
        }
        self.lanes = tracked.then(|| lanes::Lanes::new("kiln_lanes0", with_mask));
        let mut params = Vec::new();
        for p in &k.params {
            match &p.kind {
                ParamKind::Buffer { elem, access } => {
                    let ty = match elem {
                        Type::Scalar(s) => mem_type(self.d, *s).to_string(),
                        _ => self.t(ScalarType::U8).to_string(),
                    };
                    for (s, _) in elem.flatten() {
                        self.note_type(s);
                    }
                    let c = if *access == Access::Read {
                        "const "
                    } else {
                        ""
                    };
                    params.push(format!("{}{c}{ty}* {}", self.global(), p.name));
                    params.push(format!("{} {}_len", self.t(ScalarType::U32), p.name));
                }
                ParamKind::Value(t) => {
                    let flat = t.flatten();
                    for (i, (s, _)) in flat.iter().enumerate() {
                        self.note_type(*s);
                        let name = if flat.len() == 1 {
                            p.name.clone()
                        } else {
                            format!("{}_{i}", p.name)
                        };
                        params.push(format!("{} {name}", mem_type(self.d, *s)));
                    }
                }
            }
        }
        for s in &k.shared {
            if s.len == SharedLen::Dynamic {
                params.push(format!("{} {}_len", self.t(ScalarType::U32), s.name));
                if self.d == Dialect::OpenCl {
                    params.push(format!("__local uchar* {}_mem", s.name));
                }
            }
        }
        let mut text = String::new();
        let cx = Cx::of_kernel(k)?;
        let mut inner = String::new();
        self.locals(&cx, &mut inner)?;
        self.shared_decls(k, &mut inner)?;
        if tracked {
            // The lanes of this thread's warp that exist in the block.
            let _ = writeln!(
                inner,
                "  unsigned int kiln_lanes0; {{ unsigned int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); unsigned int n = blockDim.x * blockDim.y * blockDim.z - (t & ~31u); kiln_lanes0 = n >= 32u ? 0xffffffffu : (1u << n) - 1u; }}"
            );
        }
        self.block(&cx, &k.body.block, &mut inner, 1)?;
        self.end_lines(&mut inner);
        match self.d {
            Dialect::OpenCl => {
                let _ = writeln!(text, "__kernel void {}({}) {{", k.name, params.join(", "));
            }
            Dialect::Cuda => {
                let _ = writeln!(
                    text,
                    "extern \"C\" __global__ void {}({}) {{",
                    k.name,
                    params.join(", ")
                );
            }
        }
        text += &inner;
        text += "}\n";
        let mut out = String::new();
        out += &format!("// generated by kiln from kernel `{}`\n", k.name);
        if self.d == Dialect::OpenCl {
            out += "#pragma OPENCL FP_CONTRACT OFF\n";
            if self.needs.f64 {
                out += "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n";
            }
            if self.needs.atomics64 {
                out += "#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable\n#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable\n";
            }
        }
        for h in &self.helpers {
            out += h;
            out.push('\n');
        }
        out += &body;
        out += &text;
        if out.contains(LINE_RESET) {
            let file = match self.d {
                Dialect::OpenCl => format!("{}.cl", k.name),
                Dialect::Cuda => format!("{}.cu", k.name),
            };
            out = out
                .lines()
                .enumerate()
                .map(|(i, l)| match l.trim_start() == LINE_RESET {
                    true => format!("#line {} \"{file}\"\n", i + 2),
                    false => format!("{l}\n"),
                })
                .collect();
        }
        Ok(Source {
            text: out,
            entry: k.name.clone(),
            needs: self.needs,
        })
    }

    fn shared_decls(&mut self, k: &Kernel, out: &mut String) -> W<()> {
        let mut first_dynamic = true;
        let fixed_in_region = self.d == Dialect::Cuda && cuda_fixed_shared_in_dynamic_region(k);
        for s in &k.shared {
            for (sc, _) in s.elem.flatten() {
                self.note_type(sc);
            }
            // Structs and vectors are bytes here, read through wider pointers: 16-byte aligned.
            let (ty, count, align) = match &s.elem {
                Type::Scalar(sc) => (mem_type(self.d, *sc).to_string(), 1, ""),
                other => (self.t(ScalarType::U8).to_string(), other.size(), "16"),
            };
            match (s.len, self.d) {
                (SharedLen::Static(n), Dialect::OpenCl) => {
                    let aligned = match align {
                        "" => String::new(),
                        a => format!(" __attribute__((aligned({a})))"),
                    };
                    let _ = writeln!(
                        out,
                        "  __local {ty} {}[{}]{aligned};",
                        s.name,
                        (n as u64 * count as u64).max(1)
                    );
                    let _ = writeln!(out, "  const uint {}_len = {n}u;", s.name);
                }
                (SharedLen::Static(n), Dialect::Cuda) if !fixed_in_region => {
                    let aligned = match align {
                        "" => String::new(),
                        a => format!("__align__({a}) "),
                    };
                    let _ = writeln!(
                        out,
                        "  __shared__ {aligned}{ty} {}[{}];",
                        s.name,
                        (n as u64 * count as u64).max(1)
                    );
                    let _ = writeln!(out, "  const unsigned int {}_len = {n}u;", s.name);
                }
                (SharedLen::Static(n), Dialect::Cuda) => {
                    let _ = writeln!(out, "  const unsigned int {}_len = {n}u;", s.name);
                    self.dynamic_region_array(&mut first_dynamic, &ty, s, out);
                }
                (SharedLen::Dynamic, Dialect::OpenCl) => {
                    let _ = writeln!(
                        out,
                        "  __local {ty}* {} = (__local {ty}*){}_mem;",
                        s.name, s.name
                    );
                }
                (SharedLen::Dynamic, Dialect::Cuda) => {
                    self.dynamic_region_array(&mut first_dynamic, &ty, s, out);
                }
            }
        }
        Ok(())
    }

    /// Declares shared array `s` (whose `_len` is in scope) in CUDA's one extern array, at
    /// the next 16-byte boundary (the layout `dynamic_shared_bytes` counts); the first call
    /// declares the extern array.
    fn dynamic_region_array(
        &self,
        first: &mut bool,
        ty: &str,
        s: &kiln_ir::SharedDecl,
        out: &mut String,
    ) {
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

    fn locals(&mut self, cx: &Cx, out: &mut String) -> W<()> {
        for (i, l) in cx.body.locals.iter().enumerate() {
            match &l.ty {
                Type::Array(e, n) => {
                    for (s, _) in e.flatten() {
                        self.note_type(s);
                    }
                    let comps = e.flatten().len();
                    for (c, (s, _)) in e.flatten().into_iter().enumerate() {
                        let name = if comps == 1 {
                            cx.local_name(i)
                        } else {
                            format!("{}_{c}", cx.local_name(i))
                        };
                        let _ = writeln!(out, "  {} {name}[{}] = {{0}};", self.t(s), (*n).max(1));
                    }
                }
                t => {
                    for (c, (s, _)) in t.flatten().into_iter().enumerate() {
                        self.note_type(s);
                        let _ = writeln!(
                            out,
                            "  {} {} = {};",
                            self.t(s),
                            component_name(&cx.local_name(i), c, t.flatten().len()),
                            self.lit(ScalarValue::zero(s))
                        );
                    }
                }
            }
        }
        Ok(())
    }

    fn function(&mut self, k: &Kernel, fi: usize, f: &Function, out: &mut String) -> W<()> {
        let cx = Cx::of_function(k, f)?;
        let result = f
            .result
            .as_ref()
            .ok_or_else(|| WriteError(format!("device function `{}` returns nothing", f.name)))?;
        let flat = result.flatten();
        let ret_ty = if flat.len() == 1 {
            self.t(flat[0].0).to_string()
        } else {
            let name = format!("kiln_ret_{}", f.name);
            let fields: Vec<String> = flat
                .iter()
                .enumerate()
                .map(|(i, (s, _))| format!("{} c{i};", self.t(*s)))
                .collect();
            let _ = writeln!(out, "typedef struct {{ {} }} {name};", fields.join(" "));
            name
        };
        let mut params = Vec::new();
        if self.lanes.is_some() {
            if lanes::returns_early(&f.body) {
                return err(format!(
                    "device function `{}` uses subgroup operations, keeps array locals (so it \
                     is not inlined) and returns before its last statement: CUDA lane masks \
                     cannot follow that; return once, at the end",
                    f.name
                ));
            }
            params.push("unsigned int kiln_lanes_in".to_string());
        }
        for p in &f.params {
            let ParamKind::Value(t) = &p.kind else {
                return err("device functions take values only");
            };
            for (c, (s, _)) in t.flatten().into_iter().enumerate() {
                params.push(format!(
                    "{} {}",
                    self.t(s),
                    component_name(&p.name, c, t.flatten().len())
                ));
            }
        }
        let attr = match (self.d, f.noinline) {
            (Dialect::OpenCl, true) => "__attribute__((noinline)) ",
            (Dialect::OpenCl, false) => "static inline ",
            (Dialect::Cuda, true) => "static __device__ __noinline__ ",
            (Dialect::Cuda, false) => "static __device__ __forceinline__ ",
        };
        let _ = writeln!(
            out,
            "// device function #{fi}\n{attr}{ret_ty} {}({}) {{",
            f.name,
            params.join(", ")
        );
        let native = match self.d {
            Dialect::Cuda => &f.native.cuda,
            Dialect::OpenCl => &f.native.opencl,
        };
        if let Some(native) = native {
            out.push_str(&kiln_ir::intrinsic_body(f, native));
            return Ok(());
        }
        self.locals(&cx, out)?;
        self.block(&cx, &f.body.block, out, 1)?;
        self.end_lines(out);
        let zeros: Vec<String> = flat
            .iter()
            .map(|(s, _)| self.lit(ScalarValue::zero(*s)))
            .collect();
        if flat.len() == 1 {
            let _ = writeln!(out, "  return {};", zeros[0]);
        } else {
            let _ = writeln!(
                out,
                "  {ret_ty} r = {{ {} }};\n  return r;",
                zeros.join(", ")
            );
        }
        out.push_str("}\n");
        Ok(())
    }

    /// After a body with `#line` directives, hands the numbering back to the generated source.
    fn end_lines(&mut self, out: &mut String) {
        if self.at.take().is_some() {
            let _ = writeln!(out, "{LINE_RESET}");
        }
    }

    fn block(&mut self, cx: &Cx, b: &Block, out: &mut String, depth: usize) -> W<()> {
        if self.lanes.is_some() {
            return self.tracked_block(cx, &b.0, out, depth);
        }
        for s in &b.0 {
            self.stmt(cx, s, out, depth)?;
        }
        Ok(())
    }

    fn stmt(&mut self, cx: &Cx, s: &Stmt, out: &mut String, depth: usize) -> W<()> {
        let pad = "  ".repeat(depth);
        // Every line written for a statement from a Rust line is numbered as that line.
        if !matches!(s, Stmt::Source(_)) {
            if let Some((line, fresh)) = &mut self.at {
                if !*fresh {
                    let _ = writeln!(out, "{pad}#line {line}");
                }
                *fresh = false;
            }
        }
        match s {
            Stmt::Source(at) => {
                // A line directive: compiler messages, and with NVRTC's line information
                // debuggers and profilers, point at the Rust line.
                let file = at.file.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "{pad}#line {} \"{file}\"", at.line);
                self.at = Some((at.line, true));
            }
            Stmt::Eval(h) => {
                let ty = cx.ty(*h)?;
                let vals = self.expr(cx, *h)?;
                let flat = ty.flatten();
                if let Some(struct_call) = vals.call_struct {
                    let _ = writeln!(
                        out,
                        "{pad}const kiln_ret_{} t{}_r = {struct_call};",
                        vals.fn_name, h.0
                    );
                    for (c, (sc, _)) in flat.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "{pad}const {} {} = t{}_r.c{c};",
                            self.t(*sc),
                            temp_name(*h, c, &ty),
                            h.0
                        );
                    }
                    return Ok(());
                }
                let decls: Vec<String> = flat
                    .iter()
                    .zip(&vals.comps)
                    .enumerate()
                    .map(|(c, ((sc, _), v))| {
                        format!("const {} {} = {v};", self.t(*sc), temp_name(*h, c, &ty))
                    })
                    .collect();
                let _ = writeln!(out, "{pad}{}", decls.join(" "));
            }
            Stmt::LocalSet { local, value } => {
                let ty = cx.body.locals[local.0 as usize].ty.clone();
                let parts: Vec<String> = (0..ty.flatten().len())
                    .map(|c| {
                        format!(
                            "{} = {};",
                            component_name(&cx.local_name(local.0 as usize), c, ty.flatten().len()),
                            temp_name(*value, c, &ty)
                        )
                    })
                    .collect();
                let _ = writeln!(out, "{pad}{}", parts.join(" "));
            }
            Stmt::LocalIndexSet {
                local,
                index,
                value,
            } => {
                let Type::Array(e, n) = &cx.body.locals[local.0 as usize].ty else {
                    return err("not an array local");
                };
                let comps = e.flatten().len();
                let name = cx.local_name(local.0 as usize);
                let parts: Vec<String> = (0..comps)
                    .map(|c| {
                        let arr = if comps == 1 {
                            name.clone()
                        } else {
                            format!("{name}_{c}")
                        };
                        format!(
                            "{arr}[{}] = {};",
                            temp_name(*index, 0, &Type::Scalar(ScalarType::U32)),
                            temp_name(*value, c, e)
                        )
                    })
                    .collect();
                if cx.in_bounds.local_store(*local, *index, *value) {
                    let _ = writeln!(out, "{pad}{}", parts.join(" "));
                } else {
                    let _ = writeln!(
                        out,
                        "{pad}if ({} < {n}u) {{ {} }}",
                        temp_name(*index, 0, &Type::Scalar(ScalarType::U32)),
                        parts.join(" ")
                    );
                }
            }
            Stmt::Store {
                memory,
                index,
                value,
            } => {
                let (name, elem) = mem_info(cx.kernel, *memory)?;
                let i = temp_name(*index, 0, &Type::Scalar(ScalarType::U32));
                let mut parts = Vec::new();
                for (c, (sc, off)) in elem.flatten().into_iter().enumerate() {
                    let v = temp_name(*value, c, &elem);
                    let v = if sc == ScalarType::Bool {
                        format!("({})({v} ? 1 : 0)", mem_type(self.d, sc))
                    } else {
                        v
                    };
                    parts.push(format!(
                        "{} = {v};",
                        self.elem_ref(&name, &elem, sc, off, &i, *memory)
                    ));
                }
                if cx.in_bounds.store(*memory, *index, *value) {
                    let _ = writeln!(out, "{pad}{}", parts.join(" "));
                } else {
                    let _ = writeln!(out, "{pad}if ({i} < {name}_len) {{ {} }}", parts.join(" "));
                }
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } if self.lanes.is_some() => self.tracked_if(cx, *cond, accept, reject, out, depth)?,
            Stmt::Loop { body, continuing } if self.lanes.is_some() => {
                self.tracked_loop(cx, body, continuing, out, depth)?
            }
            Stmt::Break | Stmt::Continue if self.lanes.is_some() => {
                let flag = self.jump_flag()?;
                let value = if matches!(s, Stmt::Break) { 2 } else { 1 };
                let _ = writeln!(out, "{pad}{flag} = {value};");
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } => {
                let _ = writeln!(
                    out,
                    "{pad}if ({}) {{",
                    temp_name(*cond, 0, &Type::Scalar(ScalarType::Bool))
                );
                self.block(cx, accept, out, depth + 1)?;
                if !reject.0.is_empty() {
                    let _ = writeln!(out, "{pad}}} else {{");
                    self.block(cx, reject, out, depth + 1)?;
                }
                let _ = writeln!(out, "{pad}}}");
            }
            Stmt::Loop { body, continuing } => self.plain_loop(cx, body, continuing, out, depth)?,
            Stmt::Break => {
                let _ = writeln!(out, "{pad}break;");
            }
            Stmt::Continue => {
                let _ = writeln!(out, "{pad}continue;");
            }
            Stmt::Return(None) => {
                let _ = writeln!(out, "{pad}return;");
            }
            Stmt::Return(Some(h)) => {
                let ty = cx.ty(*h)?;
                let flat = ty.flatten();
                if flat.len() == 1 {
                    let _ = writeln!(out, "{pad}return {};", temp_name(*h, 0, &ty));
                } else {
                    let fname = cx.function_name();
                    let parts: Vec<String> =
                        (0..flat.len()).map(|c| temp_name(*h, c, &ty)).collect();
                    let _ = writeln!(
                        out,
                        "{pad}{{ kiln_ret_{fname} r = {{ {} }}; return r; }}",
                        parts.join(", ")
                    );
                }
            }
            Stmt::Barrier(BarrierScope::Group) => {
                let b = match self.d {
                    Dialect::OpenCl => "barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
                    Dialect::Cuda => "__syncthreads();",
                };
                let _ = writeln!(out, "{pad}{b}");
            }
            Stmt::Barrier(BarrierScope::Subgroup) => {
                if let Some(l) = &self.lanes {
                    let _ = writeln!(out, "{pad}__syncwarp(__ballot_sync({}, 1));", l.current);
                }
            }
        }
        Ok(())
    }

    /// A loop as C writes it: `continuing` at the top of every iteration but the first.
    fn plain_loop(
        &mut self,
        cx: &Cx,
        body: &Block,
        continuing: &Block,
        out: &mut String,
        depth: usize,
    ) -> W<()> {
        let pad = "  ".repeat(depth);
        self.loop_id += 1;
        let flag = format!("kiln_loop{}", self.loop_id);
        if continuing.0.is_empty() {
            let _ = writeln!(out, "{pad}for (;;) {{");
        } else {
            let _ = writeln!(out, "{pad}for (bool {flag} = true;; {flag} = false) {{");
            let _ = writeln!(out, "{pad}  if (!{flag}) {{");
            self.block(cx, continuing, out, depth + 2)?;
            let _ = writeln!(out, "{pad}  }}");
        }
        self.block(cx, body, out, depth + 1)?;
        let _ = writeln!(out, "{pad}}}");
        Ok(())
    }

    /// An lvalue/rvalue for component `off` of element `i` of a memory.
    fn elem_ref(
        &self,
        name: &str,
        elem: &Type,
        sc: ScalarType,
        off: u32,
        i: &str,
        memory: Memory,
    ) -> String {
        let mt = mem_type(self.d, sc);
        if matches!(elem, Type::Scalar(_)) {
            return format!("{name}[{i}]");
        }
        let space = match (self.d, memory) {
            (Dialect::OpenCl, Memory::Buffer(_)) => "__global ",
            (Dialect::OpenCl, Memory::Shared(_)) => "__local ",
            _ => "",
        };
        let byte = self.t(ScalarType::U8);
        format!(
            "*(({space}{mt}*)(({space}{byte}*){name} + (size_t){i} * {}u + {off}u))",
            elem.size()
        )
    }

    fn expr(&mut self, cx: &Cx, h: Handle) -> W<Vals> {
        let e = &cx.body.exprs[h.index()];
        let ty = cx.ty(h)?;
        let one = |s: String| {
            Ok(Vals {
                comps: vec![s],
                call_struct: None,
                fn_name: String::new(),
            })
        };
        let u32t = Type::Scalar(ScalarType::U32);
        let arg = |x: Handle, c: usize| -> W<String> { Ok(temp_name(x, c, &cx.ty(x)?)) };
        match e {
            Expr::Literal(v) => one(self.lit(*v)),
            Expr::Param(i) => {
                let p = &cx.params[*i as usize];
                let flat = ty.flatten();
                let comps = flat
                    .iter()
                    .enumerate()
                    .map(|(c, (s, _))| {
                        let name = if !cx.is_kernel() {
                            component_name(&p.name, c, ty.flatten().len())
                        } else if flat.len() == 1 {
                            p.name.clone()
                        } else {
                            format!("{}_{c}", p.name)
                        };
                        if *s == ScalarType::Bool && cx.is_kernel() {
                            format!("({name} != 0)")
                        } else {
                            name
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::LocalGet(l) => {
                let name = cx.local_name(l.0 as usize);
                Ok(Vals {
                    comps: (0..ty.flatten().len())
                        .map(|c| component_name(&name, c, ty.flatten().len()))
                        .collect(),
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::LocalIndex { local, index } => {
                let Type::Array(e, n) = &cx.body.locals[local.0 as usize].ty else {
                    return err("not an array local");
                };
                let name = cx.local_name(local.0 as usize);
                let comps = e.flatten().len();
                let i = temp_name(*index, 0, &u32t);
                let checked = !cx.in_bounds.load(h);
                let vals = e
                    .flatten()
                    .iter()
                    .enumerate()
                    .map(|(c, (s, _))| {
                        let arr = if comps == 1 {
                            name.clone()
                        } else {
                            format!("{name}_{c}")
                        };
                        if checked {
                            format!(
                                "(({i} < {n}u) ? {arr}[{i}] : {})",
                                self.lit(ScalarValue::zero(*s))
                            )
                        } else {
                            format!("{arr}[{i}]")
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps: vals,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Load { memory, index } => {
                let (name, elem) = mem_info(cx.kernel, *memory)?;
                let i = temp_name(*index, 0, &u32t);
                let checked = !cx.in_bounds.load(h);
                let vals = elem
                    .flatten()
                    .into_iter()
                    .map(|(s, off)| {
                        let r = self.elem_ref(&name, &elem, s, off, &i, *memory);
                        let r = if s == ScalarType::Bool {
                            format!("({r} != 0)")
                        } else {
                            r
                        };
                        if checked {
                            format!(
                                "(({i} < {name}_len) ? {r} : {})",
                                self.lit(ScalarValue::zero(s))
                            )
                        } else {
                            r
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps: vals,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Len(m) => one(format!("{}_len", mem_info(cx.kernel, *m)?.0)),
            Expr::Binary { op, lhs, rhs } => {
                let lt = cx.ty(*lhs)?;
                let s = lt
                    .component()
                    .ok_or_else(|| WriteError("binary on a non-scalar".into()))?;
                let comps = (0..lt.flatten().len())
                    .map(|c| {
                        self.binary(*op, s, &temp_name(*lhs, c, &lt), &temp_name(*rhs, c, &lt))
                    })
                    .collect::<W<Vec<_>>>()?;
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Unary { op, arg: a } => {
                let s = ty
                    .component()
                    .ok_or_else(|| WriteError("unary on a non-scalar".into()))?;
                let comps = (0..ty.flatten().len())
                    .map(|c| {
                        let x = temp_name(*a, c, &ty);
                        match (op, s) {
                            (UnaryOp::Neg, s) if s.is_float() => format!("(-{x})"),
                            // Narrow signed negation sign-extends by shifts: NVRTC 13 for
                            // sm_90 on an H100 widened `(short)(0u - (unsigned)x)` of -32768
                            // to +32768 (it emits neg.s16, whose widening ptxas gets wrong).
                            (UnaryOp::Neg, s) if s.is_signed() && s.bits() < 32 => format!(
                                "(({})(((int)((0u - (unsigned int){x}) << {w})) >> {w}))",
                                self.t(s),
                                w = 32 - s.bits()
                            ),
                            (UnaryOp::Neg, s) => format!(
                                "(({})((({})0) - ({}){x}))",
                                self.t(s),
                                self.t(wide_unsigned(s)),
                                self.t(wide_unsigned(s))
                            ),
                            (UnaryOp::Not, ScalarType::Bool) => format!("(!{x})"),
                            (UnaryOp::Not, s) => format!("(({})(~{x}))", self.t(s)),
                        }
                    })
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let c = arg(*cond, 0)?;
                let comps = (0..ty.flatten().len())
                    .map(|i| {
                        format!(
                            "({c} ? {} : {})",
                            temp_name(*accept, i, &ty),
                            temp_name(*reject, i, &ty)
                        )
                    })
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Cast { arg: a, to } => {
                let at = cx.ty(*a)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("cast of a non-scalar".into()))?;
                self.note_type(*to);
                let comps = (0..at.flatten().len())
                    .map(|c| self.cast(&temp_name(*a, c, &at), from, *to))
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Bitcast { arg: a, to } => {
                let at = cx.ty(*a)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("bitcast of a non-scalar".into()))?;
                let comps = (0..at.flatten().len())
                    .map(|c| self.bitcast(&temp_name(*a, c, &at), from, *to))
                    .collect();
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Math { fun, args } => {
                let at = cx.ty(args[0])?;
                let s = at
                    .component()
                    .ok_or_else(|| WriteError("math on a non-scalar".into()))?;
                let comps = (0..at.flatten().len())
                    .map(|c| {
                        let xs: Vec<String> = args.iter().map(|a| temp_name(*a, c, &at)).collect();
                        self.math(*fun, s, &xs)
                    })
                    .collect::<W<Vec<_>>>()?;
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Builtin(b) => one(self.builtin(*b)),
            Expr::Compose { parts, .. } => {
                let mut comps = Vec::new();
                for p in parts {
                    let pt = cx.ty(*p)?;
                    for c in 0..pt.flatten().len() {
                        comps.push(temp_name(*p, c, &pt));
                    }
                }
                Ok(Vals {
                    comps,
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Extract { base, index } => {
                let bt = cx.ty(*base)?;
                let range = bt
                    .component_range(*index)
                    .ok_or_else(|| WriteError(format!("{bt} has no component {index}")))?;
                Ok(Vals {
                    comps: range.map(|c| temp_name(*base, c, &bt)).collect(),
                    call_struct: None,
                    fn_name: String::new(),
                })
            }
            Expr::Atomic {
                memory,
                index,
                op,
                value,
                compare,
            } => {
                let (name, elem) = mem_info(cx.kernel, *memory)?;
                let s = elem
                    .as_scalar()
                    .ok_or_else(|| WriteError("atomic on a non-scalar".into()))?;
                let i = temp_name(*index, 0, &u32t);
                let v = arg(*value, 0)?;
                let cmp = compare.map(|c| temp_name(c, 0, &Type::Scalar(s)));
                let a = self.atomic(&name, *memory, s, *op, &i, &v, cmp.as_deref())?;
                one(format!(
                    "(({i} < {name}_len) ? {a} : {})",
                    self.lit(ScalarValue::zero(s))
                ))
            }
            Expr::Subgroup { op, arg: a, lane } => {
                let s = cx
                    .ty(*a)?
                    .as_scalar()
                    .ok_or_else(|| WriteError("subgroup op on a non-scalar".into()))?;
                let x = arg(*a, 0)?;
                let l = lane.map(|l| temp_name(l, 0, &u32t));
                one(self.subgroup(*op, s, &x, l.as_deref())?)
            }
            Expr::Call { function, args } => {
                let f = &cx.kernel.functions[function.0 as usize];
                let mut flat_args = Vec::new();
                for a in args {
                    let at = cx.ty(*a)?;
                    for c in 0..at.flatten().len() {
                        flat_args.push(temp_name(*a, c, &at));
                    }
                }
                if let Some(l) = &self.lanes {
                    if l.functions.get(function.0 as usize) == Some(&true) {
                        flat_args.insert(0, l.current.clone());
                    }
                }
                let call = format!("{}({})", f.name, flat_args.join(", "));
                if ty.flatten().len() == 1 {
                    one(call)
                } else {
                    Ok(Vals {
                        comps: Vec::new(),
                        call_struct: Some(call),
                        fn_name: f.name.clone(),
                    })
                }
            }
        }
    }

    fn binary(&mut self, op: BinaryOp, s: ScalarType, a: &str, b: &str) -> W<String> {
        if op.is_compare() {
            return Ok(format!("({a} {} {b})", op.symbol()));
        }
        if s.is_float() {
            return Ok(match op {
                BinaryOp::Rem => format!("{}({a}, {b})", self.fname("fmod", s)),
                BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div => {
                    format!("({a} {} {b})", op.symbol())
                }
                _ => return err(format!("`{}` on floats", op.symbol())),
            });
        }
        if s == ScalarType::Bool {
            return Ok(match op {
                BinaryOp::And => format!("({a} && {b})"),
                BinaryOp::Or => format!("({a} || {b})"),
                BinaryOp::Xor => format!("({a} != {b})"),
                _ => return err(format!("`{}` on bool", op.symbol())),
            });
        }
        let t = self.t(s);
        let w = self.t(wide_unsigned(s));
        Ok(match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                format!("(({t})(({w}){a} {} ({w}){b}))", op.symbol())
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                format!("(({t})({a} {} {b}))", op.symbol())
            }
            BinaryOp::Shl => format!(
                "(({t})(({}){a} << (({w}){b} & {}u)))",
                self.t(unsigned_of(s)),
                s.bits() - 1
            ),
            BinaryOp::Shr => format!("(({t})({a} >> (({w}){b} & {}u)))", s.bits() - 1),
            BinaryOp::Div | BinaryOp::Rem => {
                let name = format!(
                    "kiln_{}_{}",
                    if op == BinaryOp::Div { "div" } else { "rem" },
                    s.name()
                );
                let min_check = if s.is_signed() {
                    format!(
                        " || (a == {} && b == ({t})-1)",
                        self.lit(ScalarValue::from_bits(s, 1u64 << (s.bits() - 1)))
                    )
                } else {
                    String::new()
                };
                let body = if op == BinaryOp::Div {
                    format!("(b == ({t})0{min_check}) ? a : ({t})(a / b)")
                } else {
                    format!("(b == ({t})0{min_check}) ? ({t})0 : ({t})(a % b)")
                };
                self.helper(format!(
                    "{} {t} {name}({t} a, {t} b) {{ return {body}; }}",
                    self.fn_prefix()
                ));
                format!("{name}({a}, {b})")
            }
            _ => return err(format!("`{}` on {s}", op.symbol())),
        })
    }

    fn cast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        let tt = self.t(to);
        if from == to {
            return x.to_string();
        }
        if to == ScalarType::Bool {
            return format!("({x} != 0)");
        }
        if from == ScalarType::Bool {
            return format!("(({tt})({x} ? 1 : 0))");
        }
        if !(from.is_float() && to.is_int()) {
            return format!("(({tt}){x})");
        }
        let ft = self.t(from);
        let name = format!("kiln_cvt_{}_{}", from.name(), to.name());
        let (lo, hi) = if to.is_signed() {
            (
                -(2f64.powi(to.bits() as i32 - 1)),
                2f64.powi(to.bits() as i32 - 1),
            )
        } else {
            (-1.0, 2f64.powi(to.bits() as i32))
        };
        let max = self.lit(ScalarValue::from_bits(
            to,
            if to.is_signed() {
                (1u64 << (to.bits() - 1)) - 1
            } else {
                u64::MAX
            },
        ));
        let min = self.lit(ScalarValue::from_bits(
            to,
            if to.is_signed() {
                1u64 << (to.bits() - 1)
            } else {
                0
            },
        ));
        let lo_test = format!("v <= {}", float_lit(lo, from));
        self.helper(format!(
            "{} {tt} {name}({ft} v) {{ return (v != v) ? ({tt})0 : (v >= {}) ? {max} : ({lo_test}) ? {min} : ({tt})v; }}",
            self.fn_prefix(),
            float_lit(hi, from)
        ));
        format!("{name}({x})")
    }

    fn bitcast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        let tt = self.t(to);
        if from.is_float() == to.is_float() {
            return format!("(({tt}){x})");
        }
        match self.d {
            Dialect::OpenCl => format!("as_{}({x})", tt.replace("unsigned ", "u")),
            Dialect::Cuda => {
                let f = match (from, to) {
                    (ScalarType::F32, ScalarType::I32) => "__float_as_int",
                    (ScalarType::F32, _) => "__float_as_uint",
                    (ScalarType::I32, ScalarType::F32) => "__int_as_float",
                    (_, ScalarType::F32) => "__uint_as_float",
                    (ScalarType::F64, _) => "__double_as_longlong",
                    _ => "__longlong_as_double",
                };
                if from.is_float() {
                    format!("(({tt}){f}({x}))")
                } else if from == ScalarType::U64 {
                    format!("{f}((long long){x})")
                } else {
                    format!("{f}({x})")
                }
            }
        }
    }

    fn fname(&self, base: &str, s: ScalarType) -> String {
        if self.d == Dialect::Cuda && s == ScalarType::F32 {
            format!("{base}f")
        } else {
            base.to_string()
        }
    }

    fn math(&mut self, fun: MathFn, s: ScalarType, x: &[String]) -> W<String> {
        if !s.is_float() {
            let t = self.t(s);
            let w = self.t(wide_unsigned(s));
            return Ok(match fun {
                MathFn::Abs if s.is_signed() => format!(
                    "(({t})(({}) < 0 ? ({w})0 - ({w}){} : ({w}){}))",
                    x[0], x[0], x[0]
                ),
                MathFn::Abs => x[0].clone(),
                MathFn::Min => format!("(({1} < {0}) ? {1} : {0})", x[0], x[1]),
                MathFn::Max => format!("(({1} > {0}) ? {1} : {0})", x[0], x[1]),
                MathFn::Clamp => {
                    let name = format!("kiln_clamp_{}", s.name());
                    self.helper(format!("{} {t} {name}({t} x, {t} lo, {t} hi) {{ {t} m = (lo > x) ? lo : x; return (hi < m) ? hi : m; }}", self.fn_prefix()));
                    format!("{name}({}, {}, {})", x[0], x[1], x[2])
                }
                MathFn::Sign if s.is_signed() => {
                    format!("(({t})(({0}) > 0 ? 1 : (({0}) < 0 ? -1 : 0)))", x[0])
                }
                MathFn::Sign => format!("(({t})(({0}) > 0 ? 1 : 0))", x[0]),
                f => return err(format!("{} on integers", f.name())),
            });
        }
        let f = |name: &str| self.fname(name, s);
        let one = if s == ScalarType::F32 { "1.0f" } else { "1.0" };
        Ok(match fun {
            MathFn::Sin
            | MathFn::Cos
            | MathFn::Tan
            | MathFn::Asin
            | MathFn::Acos
            | MathFn::Atan
            | MathFn::Sinh
            | MathFn::Cosh
            | MathFn::Tanh
            | MathFn::Exp
            | MathFn::Exp2
            | MathFn::Log
            | MathFn::Log2
            | MathFn::Log10
            | MathFn::Sqrt => format!("{}({})", f(fun.name()), x[0]),
            // NaN passes through explicitly: PoCL drops stores of floor/ceil/trunc/round of a
            // constant NaN, and the guard costs one compare elsewhere.
            MathFn::Floor | MathFn::Ceil | MathFn::Round | MathFn::Trunc => {
                format!("(({0}) != ({0}) ? ({0}) : {1}({0}))", x[0], f(fun.name()))
            }
            MathFn::Abs => format!("{}({})", f("fabs"), x[0]),
            MathFn::Atan2 => format!("{}({}, {})", f("atan2"), x[0], x[1]),
            MathFn::Pow => format!("{}({}, {})", f("pow"), x[0], x[1]),
            MathFn::Copysign => format!(
                "(({1}) != ({1}) ? {2}({0}) : {3}({0}, {1}))",
                x[0],
                x[1],
                f("fabs"),
                f("copysign")
            ),
            MathFn::Rsqrt => format!("({one} / {}({}))", f("sqrt"), x[0]),
            MathFn::Fract => format!(
                "(({0}) != ({0}) ? ({0}) : ({0} - {1}({0})))",
                x[0],
                f("trunc")
            ),
            MathFn::Min => format!("{}({}, {})", self.min_max(false, s), x[0], x[1]),
            MathFn::Max => format!("{}({}, {})", self.min_max(true, s), x[0], x[1]),
            MathFn::Clamp => {
                let (mn, mx) = (self.min_max(false, s), self.min_max(true, s));
                format!("{mn}({mx}({}, {}), {})", x[0], x[1], x[2])
            }
            MathFn::Fma => format!("{}({}, {}, {})", f("fma"), x[0], x[1], x[2]),
            MathFn::Sign => format!("(({0}) > 0 ? {1} : (({0}) < 0 ? -{1} : ({0})))", x[0], one),
            MathFn::IsNan => format!("({0} != {0})", x[0]),
            MathFn::IsInf => format!(
                "({}({}) == {})",
                f("fabs"),
                x[0],
                self.lit(if s == ScalarType::F32 {
                    ScalarValue::F32(f32::INFINITY)
                } else {
                    ScalarValue::F64(f64::INFINITY)
                })
            ),
        })
    }

    /// The helper computing float min (or max): NaN gives the other operand, and of -0 and +0
    /// min gives -0 and max +0 (equal operands combine their bits: OR keeps a sign, AND
    /// clears it).
    fn min_max(&mut self, max: bool, s: ScalarType) -> String {
        let t = self.t(s);
        let name = format!("kiln_{}_{}", if max { "max" } else { "min" }, s.name());
        let combine = if max { "&" } else { "|" };
        let libm = self.fname(if max { "fmax" } else { "fmin" }, s);
        let (to_bits, from_bits) = match (self.d, s) {
            (Dialect::OpenCl, ScalarType::F32) => ("as_uint", "as_float"),
            (Dialect::OpenCl, _) => ("as_ulong", "as_double"),
            (Dialect::Cuda, ScalarType::F32) => ("__float_as_uint", "__uint_as_float"),
            (Dialect::Cuda, _) => ("__double_as_longlong", "__longlong_as_double"),
        };
        self.helper(format!(
            "{} {t} {name}({t} a, {t} b) {{ return (a == b) ? {from_bits}({to_bits}(a) {combine} {to_bits}(b)) : {libm}(a, b); }}",
            self.fn_prefix()
        ));
        name
    }

    fn builtin(&self, b: Builtin) -> String {
        let ax = |a: Axis| a.index();
        let xyz = |a: Axis| ["x", "y", "z"][a.index()];
        match self.d {
            Dialect::OpenCl => match b {
                Builtin::GlobalId(a) => format!("((uint)get_global_id({}))", ax(a)),
                Builtin::LocalId(a) => format!("((uint)get_local_id({}))", ax(a)),
                Builtin::GroupId(a) => format!("((uint)get_group_id({}))", ax(a)),
                Builtin::GroupSize(a) => format!("((uint)get_local_size({}))", ax(a)),
                Builtin::NumGroups(a) => format!("((uint)get_num_groups({}))", ax(a)),
                Builtin::GlobalSize(a) => format!("((uint)get_global_size({}))", ax(a)),
                Builtin::LocalIndex | Builtin::SubgroupId => "((uint)(get_local_id(0) + get_local_size(0) * (get_local_id(1) + get_local_size(1) * get_local_id(2))))".into(),
                Builtin::SubgroupSize => "1u".into(),
                Builtin::SubgroupLane => "0u".into(),
            },
            Dialect::Cuda => match b {
                Builtin::GlobalId(a) => format!("(blockIdx.{0} * blockDim.{0} + threadIdx.{0})", xyz(a)),
                Builtin::LocalId(a) => format!("threadIdx.{}", xyz(a)),
                Builtin::GroupId(a) => format!("blockIdx.{}", xyz(a)),
                Builtin::GroupSize(a) => format!("blockDim.{}", xyz(a)),
                Builtin::NumGroups(a) => format!("gridDim.{}", xyz(a)),
                Builtin::GlobalSize(a) => format!("(gridDim.{0} * blockDim.{0})", xyz(a)),
                Builtin::LocalIndex => "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))".into(),
                Builtin::SubgroupSize => "32u".into(),
                Builtin::SubgroupId => "((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) >> 5)".into(),
                Builtin::SubgroupLane => "((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u)".into(),
            },
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        name: &str,
        memory: Memory,
        s: ScalarType,
        op: AtomicOp,
        i: &str,
        v: &str,
        cmp: Option<&str>,
    ) -> W<String> {
        if s.bits() == 64 {
            self.needs.atomics64 = true;
        }
        let t = self.t(s);
        match self.d {
            Dialect::OpenCl => {
                let space = if matches!(memory, Memory::Shared(_)) {
                    "__local"
                } else {
                    "__global"
                };
                let prefix = if s.bits() == 64 { "atom" } else { "atomic" };
                let p = format!("(volatile {space} {t}*)&{name}[{i}]");
                Ok(match (op, s) {
                    (AtomicOp::Add, ScalarType::F32) => {
                        let h = format!("kiln_atomic_add_f32_{}", &space[2..]);
                        self.helper(format!("static inline float {h}(volatile {space} float* p, float v) {{ volatile {space} uint* q = (volatile {space} uint*)p; uint old = *q; for (;;) {{ uint seen = atomic_cmpxchg(q, old, as_uint(as_float(old) + v)); if (seen == old) return as_float(old); old = seen; }} }}"));
                        format!("{h}({p}, {v})")
                    }
                    (AtomicOp::Exchange, ScalarType::F32) => format!("atomic_xchg({p}, {v})"),
                    (AtomicOp::CompareExchange, _) => {
                        format!("{prefix}_cmpxchg({p}, {}, {v})", cmp.unwrap_or("0"))
                    }
                    _ => {
                        let n = match op {
                            AtomicOp::Add => "add",
                            AtomicOp::Sub => "sub",
                            AtomicOp::Min => "min",
                            AtomicOp::Max => "max",
                            AtomicOp::And => "and",
                            AtomicOp::Or => "or",
                            AtomicOp::Xor => "xor",
                            AtomicOp::Exchange => "xchg",
                            AtomicOp::CompareExchange => unreachable!(),
                        };
                        format!("{prefix}_{n}({p}, {v})")
                    }
                })
            }
            Dialect::Cuda => {
                let p = format!("&{name}[{i}]");
                let ull = "unsigned long long";
                let as_ull = |x: &str| format!("({ull})({x})");
                let p64 = format!("({ull}*){p}");
                Ok(match (op, s) {
                    (AtomicOp::Add, ScalarType::F32)
                    | (AtomicOp::Add, ScalarType::I32 | ScalarType::U32) => {
                        format!("atomicAdd({p}, {v})")
                    }
                    (AtomicOp::Add, _) => format!("(({t})atomicAdd({p64}, {}))", as_ull(v)),
                    (AtomicOp::Sub, ScalarType::I32 | ScalarType::U32) => {
                        format!("atomicSub({p}, {v})")
                    }
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
                    (AtomicOp::CompareExchange, ScalarType::I64 | ScalarType::U64) => format!(
                        "(({t})atomicCAS({p64}, {}, {}))",
                        as_ull(cmp.unwrap_or("0")),
                        as_ull(v)
                    ),
                    (AtomicOp::CompareExchange, _) => {
                        format!("atomicCAS({p}, {}, {v})", cmp.unwrap_or("0"))
                    }
                })
            }
        }
    }

    fn subgroup(
        &mut self,
        op: SubgroupOp,
        s: ScalarType,
        x: &str,
        lane: Option<&str>,
    ) -> W<String> {
        if self.d == Dialect::OpenCl {
            return Ok(match op {
                SubgroupOp::Ballot => format!("((uint)({x} ? 1 : 0))"),
                SubgroupOp::ExclusiveAdd => self.lit(ScalarValue::zero(s)),
                _ => x.to_string(),
            });
        }
        self.needs.subgroups = true;
        let mask = match &self.lanes {
            Some(l) => l.current.clone(),
            None => return err("a CUDA subgroup operation outside lane tracking"),
        };
        let t = self.t(s);
        let lane = lane.unwrap_or("0u");
        Ok(match op {
            SubgroupOp::Shuffle | SubgroupOp::Broadcast => {
                self.shuffle("", "l < 32u", "l", s, x, lane)
            }
            SubgroupOp::ShuffleUp => self.shuffle("up_", "l <= me", "me - l", s, x, lane),
            SubgroupOp::ShuffleDown => self.shuffle("down_", "l < 32u - me", "me + l", s, x, lane),
            SubgroupOp::ShuffleXor => self.shuffle("xor_", "(me ^ l) < 32u", "me ^ l", s, x, lane),
            SubgroupOp::Ballot => format!("__ballot_sync({mask}, {x})"),
            SubgroupOp::All => format!("(__all_sync({mask}, {x}) != 0)"),
            SubgroupOp::Any => format!("(__any_sync({mask}, {x}) != 0)"),
            SubgroupOp::ReduceAdd | SubgroupOp::ReduceMin | SubgroupOp::ReduceMax => {
                // Integer sums wrap; float minimum and maximum follow kiln's NaN and
                // signed-zero rule.
                let (name, combine) = match op {
                    SubgroupOp::ReduceAdd => ("add", self.binary(BinaryOp::Add, s, "v", "o")?),
                    SubgroupOp::ReduceMin if s.is_float() => {
                        ("min", format!("{}(v, o)", self.min_max(false, s)))
                    }
                    SubgroupOp::ReduceMax if s.is_float() => {
                        ("max", format!("{}(v, o)", self.min_max(true, s)))
                    }
                    SubgroupOp::ReduceMin => ("min", "(o < v ? o : v)".to_string()),
                    _ => ("max", "(o > v ? o : v)".to_string()),
                };
                let h = format!("kiln_subgroup_{name}_{}", s.name());
                self.helper(format!("// over the active lanes: a butterfly when all 32 are active, else a tree over their ranks\nstatic __device__ __forceinline__ {t} {h}(unsigned int lanes, {t} v) {{ {ACTIVE_LANES} if (m == 0xffffffffu) {{ for (int d = 16; d > 0; d >>= 1) {{ {t} o = __shfl_xor_sync(m, v, d); v = {combine}; }} return v; }} for (unsigned int d = 1u; d < count; d <<= 1) {{ bool has = rank + d < count; {t} o = __shfl_sync(m, v, has ? __fns(m, 0u, (int)(rank + d + 1u)) : me); if (has) v = {combine}; }} return __shfl_sync(m, v, __ffs(m) - 1); }}"));
                format!("{h}({mask}, {x})")
            }
            SubgroupOp::InclusiveAdd | SubgroupOp::ExclusiveAdd => {
                let add = self.binary(BinaryOp::Add, s, "v", "o")?;
                let inclusive = op == SubgroupOp::InclusiveAdd;
                let h = format!(
                    "kiln_subgroup_{}_{}",
                    if inclusive { "inclusive" } else { "exclusive" },
                    s.name()
                );
                let last = if inclusive {
                    "return v;".to_string()
                } else {
                    format!("{t} o = __shfl_sync(m, v, rank > 0u ? __fns(m, 0u, (int)rank) : me); return rank > 0u ? o : ({t})0;")
                };
                self.helper(format!("// over the active lanes below the caller (and the caller's own when inclusive)\nstatic __device__ __forceinline__ {t} {h}(unsigned int lanes, {t} v) {{ {ACTIVE_LANES} for (unsigned int d = 1u; d < count; d <<= 1) {{ bool has = rank >= d; {t} o = __shfl_sync(m, v, has ? __fns(m, 0u, (int)(rank - d + 1u)) : me); if (has) v = {add}; }} {last} }}"));
                format!("{h}({mask}, {x})")
            }
        })
    }

    /// A call of the CUDA shuffle helper `kind` on `s`, written on first use: the source lane
    /// is `source` when `valid` holds (both in terms of the caller's lane `me` and the
    /// operand `l`), and a source lane that is outside the warp or not active keeps the
    /// caller's own value. The caller's path mask is passed along.
    fn shuffle(
        &mut self,
        kind: &str,
        valid: &str,
        source: &str,
        s: ScalarType,
        x: &str,
        lane: &str,
    ) -> String {
        let t = self.t(s);
        let mask = self
            .lanes
            .as_ref()
            .map_or("", |l| l.current.as_str())
            .to_string();
        let h = format!("kiln_shuffle_{kind}{}", s.name());
        self.helper(format!("static __device__ __forceinline__ {t} {h}(unsigned int lanes, {t} x, unsigned int l) {{ {ACTIVE_LANES} bool ok = {valid}; unsigned int src = ok ? {source} : me; {t} o = ({t})__shfl_sync(m, x, (int)src); return ok && ((m >> src) & 1u) ? o : x; }}"));
        format!("{h}({mask}, {x}, {lane})")
    }
}

/// The start of every CUDA subgroup helper: the active lanes `m` (those of the caller's path,
/// `lanes`, that have not returned), their `count`, the caller's lane `me` and its `rank`
/// among them.
const ACTIVE_LANES: &str = "unsigned int m = __ballot_sync(lanes, 1); unsigned int me = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u; unsigned int count = __popc(m); unsigned int rank = __popc(m & ((1u << me) - 1u)); (void)count; (void)rank;";

struct Vals {
    comps: Vec<String>,
    call_struct: Option<String>,
    fn_name: String,
}

/// The typed body a writer walks.
type Cx<'a> = TypedBody<'a>;

/// Names a C dialect or the writer itself gives a meaning to: keywords, types, qualifiers,
/// and builtin functions of OpenCL C and CUDA.
const RESERVED: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "half",
    "uchar",
    "ushort",
    "uint",
    "ulong",
    "size_t",
    "ptrdiff_t",
    "intptr_t",
    "uintptr_t",
    "event_t",
    "image2d_t",
    "image3d_t",
    "sampler_t",
    "kernel",
    "global",
    "local",
    "constant",
    "private",
    "read_only",
    "write_only",
    "read_write",
    "class",
    "template",
    "typename",
    "namespace",
    "using",
    "new",
    "delete",
    "this",
    "operator",
    "private",
    "public",
    "protected",
    "virtual",
    "friend",
    "throw",
    "try",
    "catch",
    "asm",
    "mutable",
    "explicit",
    "export",
    "dim3",
    "warpSize",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "main",
    "abs",
    "acos",
    "acosh",
    "all",
    "any",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "barrier",
    "bitselect",
    "cbrt",
    "ceil",
    "clamp",
    "clz",
    "copysign",
    "cos",
    "cosh",
    "cross",
    "ctz",
    "degrees",
    "distance",
    "dot",
    "erf",
    "erfc",
    "exp",
    "exp10",
    "exp2",
    "expm1",
    "fabs",
    "fdim",
    "floor",
    "fma",
    "fmax",
    "fmin",
    "fmod",
    "fract",
    "frexp",
    "hadd",
    "hypot",
    "ilogb",
    "isequal",
    "isfinite",
    "isgreater",
    "isinf",
    "isless",
    "isnan",
    "isnormal",
    "ldexp",
    "length",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "logb",
    "mad",
    "mad24",
    "max",
    "min",
    "mix",
    "modf",
    "mul24",
    "nan",
    "native_exp",
    "nextafter",
    "normalize",
    "popcount",
    "pow",
    "pown",
    "powr",
    "radians",
    "remainder",
    "rhadd",
    "rint",
    "rootn",
    "rotate",
    "round",
    "rsqrt",
    "select",
    "shuffle",
    "shuffle2",
    "sign",
    "signbit",
    "sin",
    "sincos",
    "sinh",
    "smoothstep",
    "sqrt",
    "step",
    "tan",
    "tanh",
    "tgamma",
    "trunc",
    "upsample",
    "printf",
    "prefetch",
    "sub_sat",
    "add_sat",
    "mem_fence",
    "read_mem_fence",
    "write_mem_fence",
    "vload",
    "vstore",
];

/// A user-chosen name made safe in C: names the dialects or the writer reserve, and names
/// starting with a prefix they reserve, get a trailing `_`.
///
/// Names already ending in `_` get one more, so the renaming never maps two names to one
/// (`int` becomes `int_`, and a parameter named `int_` becomes `int__`). Names in capitals
/// (the macros OpenCL C and CUDA define: `NAN`, `INFINITY`, `M_PI`, `FLT_MAX`) and vector
/// type names (`float4`, `uchar16`) are escaped too.
fn safe(name: &str) -> String {
    let prefixed = [
        "kiln_", "get_", "atomic", "atom_", "as_", "convert_", "native_", "half_", "vload",
        "vstore", "async_", "__",
    ]
    .iter()
    .any(|p| name.starts_with(p));
    let temp_like =
        name.starts_with('t') && name[1..].chars().all(|c| c.is_ascii_digit() || c == '_');
    let companion = name.ends_with("_len") || name.ends_with("_mem") || name.ends_with("_r");
    let macro_like = name
        .chars()
        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
    let vector_type = [
        "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "float", "double",
        "half", "bool",
    ]
    .iter()
    .any(|t| {
        name.strip_prefix(t)
            .is_some_and(|n| ["2", "3", "4", "8", "16"].contains(&n))
    });
    let escaped = RESERVED.contains(&name)
        || prefixed
        || temp_like
        || companion
        || macro_like
        || vector_type
        || name.ends_with('_');
    if escaped {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

fn mem_info(k: &Kernel, m: Memory) -> W<(String, Type)> {
    match m {
        Memory::Buffer(i) => match k.params.get(i as usize) {
            Some(Param {
                name,
                kind: ParamKind::Buffer { elem, .. },
            }) => Ok((name.clone(), elem.clone())),
            _ => err(format!("parameter {i} is not a buffer")),
        },
        Memory::Shared(i) => k
            .shared
            .get(i as usize)
            .map(|s| (s.name.clone(), s.elem.clone()))
            .ok_or_else(|| WriteError(format!("no shared array {i}"))),
    }
}

#[cfg(test)]
mod tests {
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
}
