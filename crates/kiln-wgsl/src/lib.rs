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

mod translate;

pub use translate::{translate, TranslateTarget, Translated};

use kiln_ir::*;
use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;

/// What the shader needs from the adapter, found while writing.
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

pub use kiln_ir::WriteError;

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
    validate(kernel).map_err(|e| WriteError(e.to_string()))?;
    let k = kernel.with_names(safe);
    Writer {
        helpers: BTreeSet::new(),
        needs: Needs::default(),
        mems: Vec::new(),
        shared_base: 0,
        options,
        counts_trips: std::cell::Cell::new(false),
    }
    .kernel(&k)
}

/// The WGSL register type of a scalar type.
fn rt(s: ScalarType) -> &'static str {
    match s {
        ScalarType::Bool => "bool",
        ScalarType::I8 | ScalarType::I16 | ScalarType::I32 => "i32",
        ScalarType::U8 | ScalarType::U16 | ScalarType::U32 => "u32",
        ScalarType::I64 => "i64",
        ScalarType::U64 => "u64",
        ScalarType::F32 => "f32",
        ScalarType::F64 => "f64",
    }
}

/// The register type a scalar type is widened to (8/16-bit integers to 32).
fn reg(s: ScalarType) -> ScalarType {
    match s {
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
    if s == ScalarType::F32 {
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

/// The helper computing `x % y` on floats of type `s` exactly (C's `fmod`), on the bits: both
/// mantissas get their implicit bit (subnormals are normalized first), then a shift-and-subtract
/// long division over the exponent difference leaves the remainder, which is always
/// representable. Integer operations only, so it holds on drivers that flush subnormals or whose
/// `frexp`/`ldexp` are loose (lavapipe gave 0.5 for `2.5 % 2^-126` next to a second `%` in the
/// same kernel with the float-based version this replaces).
/// `trip` is written at its start and at the top of each of its loops' bodies (see
/// [`Writer::trip`]).
fn fmod_helper(s: ScalarType, trip: &str) -> String {
    let (u, abs_mask, inf, sign) = float_bits(s);
    let t = rt(s);
    let (mb, mant, imp, zero) = if s == ScalarType::F32 {
        (23, "0x7fffffu", "0x800000u", "0u")
    } else {
        (52, "0xffffffffffffflu", "0x10000000000000lu", "0lu")
    };
    // Without an `else`. llvmpipe runs each loop of the untaken branch of an `if` in a kernel
    // once, but not these: uncounted, f32 `%` in a loop gave no wrong value before the fault
    // at any trip count (measured).
    let normalize = |f: &str, e: &str| {
        format!(
            "  if ({e} != 0) {{ {f} = {f} | {imp}; }}\n\
             \x20 if ({e} == 0) {{ {e} = 1; loop {{ {trip}if (({f} & {imp}) != {zero}) {{ break; }} {f} = {f} << 1u; {e} = {e} - 1; }} }}\n"
        )
    };
    format!(
        "// x % y exactly (C fmod) on the bits: long division of the mantissas.\n\
         fn kiln_fmod_{t}(x: {t}, y: {t}) -> {t} {{\n\
         \x20 {trip}let mx = bitcast<{u}>(x) & {abs_mask}; let my = bitcast<{u}>(y) & {abs_mask};\n\
         \x20 if (mx >= {inf} || my > {inf} || my == {zero}) {{ return (x - x) / (y - y); }}\n\
         \x20 if (mx < my) {{ return x; }}\n\
         \x20 var ex = i32(mx >> {mb}u); var fx = mx & {mant};\n\
         {}\
         \x20 var ey = i32(my >> {mb}u); var fy = my & {mant};\n\
         {}\
         \x20 var k = ex - ey;\n\
         \x20 loop {{\n\
         \x20   {trip}if (fx >= fy) {{ fx = fx - fy; }}\n\
         \x20   if (k == 0) {{ break; }}\n\
         \x20   fx = fx << 1u; k = k - 1;\n\
         \x20 }}\n\
         \x20 let sign = bitcast<{u}>(x) & {sign};\n\
         \x20 if (fx == {zero}) {{ return bitcast<{t}>(sign); }}\n\
         \x20 var e = ey;\n\
         \x20 loop {{ {trip}if ((fx & {imp}) != {zero}) {{ break; }} fx = fx << 1u; e = e - 1; }}\n\
         \x20 if (e >= 1) {{ return bitcast<{t}>(sign | ({u}(e) << {mb}u) | (fx & {mant})); }}\n\
         \x20 return bitcast<{t}>(sign | (fx >> u32(1 - e)));\n\
         }}",
        normalize("fx", "ex"),
        normalize("fy", "ey"),
    )
}

struct Writer {
    helpers: BTreeSet<String>,
    needs: Needs,
    /// Buffer parameters (indexed by parameter) then shared arrays.
    mems: Vec<Option<MemInfo>>,
    shared_base: usize,
    options: WgslOptions,
    /// Whether some loop counts its passes ([`Writer::trip`] was written).
    counts_trips: std::cell::Cell<bool>,
}

impl Writer {
    fn note(&mut self, s: ScalarType) {
        match s {
            ScalarType::F64 => self.needs.f64 = true,
            ScalarType::I64 | ScalarType::U64 => self.needs.int64 = true,
            _ => {}
        }
    }

    fn note_type(&mut self, t: &Type) {
        for (s, _) in t.flatten() {
            self.note(s);
        }
    }

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

    fn kernel(mut self, k: &Kernel) -> W<Shader> {
        let atomic_mems: HashSet<Memory> = k
            .body
            .exprs
            .iter()
            .filter_map(|e| match e {
                Expr::Atomic { memory, .. } => Some(*memory),
                _ => None,
            })
            .collect();

        let mut decls = String::new();
        let mut prologue = String::new();
        let mut params = Vec::new();
        let mut word = 3u32;
        let mut binding = 1u32;
        for (pi, p) in k.params.iter().enumerate() {
            match &p.kind {
                ParamKind::Buffer { elem, access } => {
                    self.note_type(elem);
                    let atomic = atomic_mems.contains(&Memory::Buffer(pi as u32));
                    let storage = match elem.as_scalar() {
                        Some(s) if atomic && s.bits() == 64 => {
                            return err(format!(
                                "64-bit atomics (buffer `{}` of {s}) in WGSL",
                                p.name
                            ))
                        }
                        Some(s @ (ScalarType::I32 | ScalarType::U32 | ScalarType::F32))
                            if atomic =>
                        {
                            Storage::Atomic(s)
                        }
                        Some(
                            s @ (ScalarType::I32
                            | ScalarType::U32
                            | ScalarType::F32
                            | ScalarType::I64
                            | ScalarType::U64
                            | ScalarType::F64),
                        ) => Storage::Typed(s),
                        _ => {
                            if elem.flatten().iter().any(|(s, _)| s.bits() == 64) {
                                self.needs.int64 = true;
                            }
                            Storage::Words {
                                atomic: *access != Access::Read && !elem.size().is_multiple_of(4),
                            }
                        }
                    };
                    let array = match storage {
                        Storage::Typed(s) => format!("array<{}>", rt(s)),
                        Storage::Atomic(ScalarType::F32) => "array<atomic<u32>>".into(),
                        Storage::Atomic(s) => format!("array<atomic<{}>>", rt(s)),
                        Storage::Words { atomic: true } => "array<atomic<u32>>".into(),
                        _ => "array<u32>".into(),
                    };
                    let mode = if *access == Access::Read {
                        "read"
                    } else {
                        "read_write"
                    };
                    let _ = writeln!(
                        decls,
                        "@group(0) @binding({binding}) var<storage, {mode}> {}: {array};",
                        p.name
                    );
                    let _ = writeln!(prologue, "  let {}_len = kiln_args[{word}];", p.name);
                    params.push(ParamSlot::Buffer {
                        binding,
                        len_word: word,
                    });
                    self.mems.push(Some(MemInfo {
                        name: p.name.clone(),
                        elem: elem.clone(),
                        storage,
                        len: format!("{}_len", p.name),
                    }));
                    binding += 1;
                    word += 1;
                }
                ParamKind::Value(t) => {
                    self.note_type(t);
                    params.push(ParamSlot::Value { first_word: word });
                    let flat = t.flatten();
                    for (c, (s, _)) in flat.iter().enumerate() {
                        let name = if flat.len() == 1 {
                            p.name.clone()
                        } else {
                            format!("{}_{c}", p.name)
                        };
                        let w0 = format!("kiln_args[{word}]");
                        let v = match s {
                            ScalarType::Bool => format!("({w0} != 0u)"),
                            ScalarType::U8 | ScalarType::U16 | ScalarType::U32 => w0,
                            ScalarType::I8 | ScalarType::I16 | ScalarType::I32 => {
                                format!("bitcast<i32>({w0})")
                            }
                            ScalarType::F32 => format!("bitcast<f32>({w0})"),
                            _ => {
                                let bits =
                                    format!("(u64({w0}) | (u64(kiln_args[{}]) << 32u))", word + 1);
                                word += 1;
                                match s {
                                    ScalarType::U64 => bits,
                                    ScalarType::I64 => format!("i64({bits})"),
                                    _ => format!("bitcast<f64>({bits})"),
                                }
                            }
                        };
                        word += 1;
                        let _ = writeln!(prologue, "  let {name}: {} = {v};", rt(*s));
                    }
                    self.mems.push(None);
                }
            }
        }
        self.shared_base = self.mems.len();
        let mut shared_overrides = Vec::new();
        for (si, s) in k.shared.iter().enumerate() {
            self.note_type(&s.elem);
            let atomic = atomic_mems.contains(&Memory::Shared(si as u32));
            let len = match s.len {
                SharedLen::Static(n) => format!("{}u", n.max(1)),
                SharedLen::Dynamic => {
                    let o = format!("kiln_shared_len_{si}");
                    let _ = writeln!(decls, "override {o}: u32 = 1u;");
                    shared_overrides.push(o.clone());
                    o
                }
            };
            let flat = s.elem.flatten();
            for (c, (sc, _)) in flat.iter().enumerate() {
                if atomic && sc.bits() == 64 {
                    return err(format!(
                        "64-bit atomics (shared array `{}` of {sc}) in WGSL",
                        s.name
                    ));
                }
                let t = match (*sc, atomic) {
                    (ScalarType::Bool, _) => "u32".to_string(),
                    (ScalarType::F32, true) => "atomic<u32>".into(),
                    (other, true) => format!("atomic<{}>", rt(other)),
                    (other, false) => rt(other).into(),
                };
                let _ = writeln!(
                    decls,
                    "var<workgroup> {}: array<{t}, {len}>;",
                    component_name(&s.name, c, flat.len())
                );
            }
            self.mems.push(Some(MemInfo {
                name: s.name.clone(),
                elem: s.elem.clone(),
                storage: if atomic {
                    Storage::Atomic(s.elem.as_scalar().unwrap_or(ScalarType::U32))
                } else {
                    Storage::Shared
                },
                len: match s.len {
                    SharedLen::Static(n) => format!("{n}u"),
                    SharedLen::Dynamic => len,
                },
            }));
        }

        let mut functions = String::new();
        for (fi, f) in k.functions.iter().enumerate() {
            self.function(k, fi, f, &mut functions)?;
        }
        let cx = Cx::of_kernel(k)?;
        let mut inner = String::new();
        self.locals(&cx, &mut inner)?;
        self.block(&cx, &k.body.block, &mut inner, 1)?;

        let mut out = format!("// generated by kiln from kernel `{}`\n", k.name);
        for (name, default) in GROUP_SIZE_OVERRIDES.iter().zip([64, 1, 1]) {
            let _ = writeln!(out, "override {name}: u32 = {default}u;");
        }
        out += "@group(0) @binding(0) var<storage, read> kiln_args: array<u32>;\n";
        out += &decls;
        let fault_binding = self.options.loop_budget.map(|budget| {
            let limit = budget.limit;
            let _ = write!(
                out,
                "override {FAULT_TAG_OVERRIDE}: u32 = 1u;\n\
                 @group(0) @binding({binding}) var<storage, read_write> kiln_fault: array<atomic<u32>>;\n"
            );
            if let Some(size) = budget.subgroup_size {
                let last = LOOP_COUNT_SUBGROUPS - 1;
                let _ = write!(
                    out,
                    "var<workgroup> kiln_trips: array<atomic<u32>, {LOOP_COUNT_SUBGROUPS}>;\n\
                     // Counts a loop pass of this subgroup (its first active work item counts); at {limit}, the adapter may stop its loops.\n\
                     fn kiln_trips_add(n: u32) {{ if (subgroupBroadcastFirst(kiln_lindex) == kiln_lindex) {{ if (atomicAdd(&kiln_trips[min(kiln_lindex / {size}u, {last}u)], n) + n >= {limit}u) {{ atomicMax(&kiln_fault[0], {FAULT_TAG_OVERRIDE}); }} }} }}\n\
                     fn kiln_trip() {{ kiln_trips_add(1u); }}\n\
                     // After an if with loops: llvmpipe ran the loops of a branch that no work item took once each.\n\
                     fn kiln_untaken(took: bool, then_loops: u32, else_loops: u32) {{ kiln_trips_add(select(0u, then_loops, !subgroupAny(took)) + select(0u, else_loops, subgroupAll(took))); }}\n"
                );
            } else {
                let _ = write!(
                    out,
                    "var<private> kiln_trips: u32;\n\
                     // Counts loop passes of this work item; at {limit}, the adapter may stop its loops.\n\
                     fn kiln_trips_add(n: u32) {{ kiln_trips = kiln_trips + n; if (kiln_trips >= {limit}u) {{ atomicMax(&kiln_fault[0], {FAULT_TAG_OVERRIDE}); }} }}\n\
                     fn kiln_trip() {{ kiln_trips_add(1u); }}\n\
                     // After an if with loops: llvmpipe runs the loops of a branch that no work item of the batch took once each; count those of the branch this one did not take.\n\
                     fn kiln_untaken(took: bool, then_loops: u32, else_loops: u32) {{ kiln_trips_add(select(then_loops, else_loops, took)); }}\n"
                );
            }
            binding
        });
        out += "var<private> kiln_lid: vec3<u32>;\nvar<private> kiln_gid: vec3<u32>;\nvar<private> kiln_groups: vec3<u32>;\nvar<private> kiln_lindex: u32;\n";
        let subgroup_params = if self.needs.subgroups {
            out += "var<private> kiln_sg_size: u32;\nvar<private> kiln_sg_lane: u32;\nvar<private> kiln_sg_id: u32;\n";
            ", @builtin(subgroup_size) kiln_subgroup_size: u32, @builtin(subgroup_invocation_id) kiln_subgroup_lane: u32, @builtin(subgroup_id) kiln_subgroup_id: u32"
        } else {
            ""
        };
        for h in &self.helpers {
            out += h;
            out.push('\n');
        }
        out += &functions;
        let _ = writeln!(
            out,
            "@compute @workgroup_size({}, {}, {})",
            GROUP_SIZE_OVERRIDES[0], GROUP_SIZE_OVERRIDES[1], GROUP_SIZE_OVERRIDES[2]
        );
        let _ = writeln!(out, "fn {}(@builtin(local_invocation_id) kiln_local_id: vec3<u32>, @builtin(local_invocation_index) kiln_local_index: u32, @builtin(workgroup_id) kiln_workgroup: vec3<u32>, @builtin(num_workgroups) kiln_workgroups: vec3<u32>{subgroup_params}) {{", k.name);
        out += "  kiln_groups = vec3<u32>(kiln_args[0], kiln_args[1], kiln_args[2]);\n";
        out += "  let kiln_linear = kiln_workgroup.x + kiln_workgroups.x * (kiln_workgroup.y + kiln_workgroups.y * kiln_workgroup.z);\n";
        out += "  if (kiln_linear >= kiln_groups.x * kiln_groups.y * kiln_groups.z) { return; }\n";
        out += "  if (kiln_groups.y == 1u && kiln_groups.z == 1u) { kiln_gid = vec3<u32>(kiln_linear, 0u, 0u); } else { kiln_gid = vec3<u32>(kiln_linear % kiln_groups.x, (kiln_linear / kiln_groups.x) % kiln_groups.y, kiln_linear / (kiln_groups.x * kiln_groups.y)); }\n";
        out += "  kiln_lid = kiln_local_id;\n  kiln_lindex = kiln_local_index;\n";
        if self.needs.subgroups {
            out += "  kiln_sg_size = kiln_subgroup_size;\n  kiln_sg_lane = kiln_subgroup_lane;\n  kiln_sg_id = kiln_subgroup_id;\n";
        }
        if let Some(size) = self.options.loop_budget.and_then(|b| b.subgroup_size) {
            if self.counts_trips.get() {
                // Shared memory starts unspecified: each subgroup's first work item zeroes its
                // count before the subgroup's loops (llvmpipe runs a subgroup as one batch, in
                // order). Groups of more subgroups than counts share the last count, so there
                // every count is zeroed before any work item goes on.
                let last = LOOP_COUNT_SUBGROUPS - 1;
                let _ = writeln!(
                    out,
                    "  if (kiln_lindex % {size}u == 0u && kiln_lindex / {size}u <= {last}u) {{ atomicStore(&kiln_trips[kiln_lindex / {size}u], 0u); }}\n  \
                     if ({} * {} * {} > {}u) {{ workgroupBarrier(); }}",
                    GROUP_SIZE_OVERRIDES[0],
                    GROUP_SIZE_OVERRIDES[1],
                    GROUP_SIZE_OVERRIDES[2],
                    LOOP_COUNT_SUBGROUPS * size
                );
            }
        }
        out += &prologue;
        out += &inner;
        out += "}\n";
        Ok(Shader {
            text: out,
            entry: k.name.clone(),
            needs: self.needs,
            params,
            args_words: word,
            shared_overrides,
            fault_binding,
        })
    }

    fn locals(&mut self, cx: &Cx, out: &mut String) -> W<()> {
        for (i, l) in cx.body.locals.iter().enumerate() {
            let name = cx.local_name(i);
            match &l.ty {
                Type::Array(e, n) => {
                    self.note_type(e);
                    let flat = e.flatten();
                    for (c, (s, _)) in flat.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "  var {}: array<{}, {}>;",
                            component_name(&name, c, flat.len()),
                            rt(*s),
                            (*n).max(1)
                        );
                    }
                }
                t => {
                    self.note_type(t);
                    let flat = t.flatten();
                    for (c, (s, _)) in flat.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "  var {}: {} = {};",
                            component_name(&name, c, flat.len()),
                            rt(*s),
                            zero(*s)
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
        self.note_type(result);
        let flat = result.flatten();
        let ret_ty = if flat.len() == 1 {
            rt(flat[0].0).to_string()
        } else {
            let name = format!("kiln_ret_{}", f.name);
            let fields: Vec<String> = flat
                .iter()
                .enumerate()
                .map(|(i, (s, _))| format!("c{i}: {}", rt(*s)))
                .collect();
            let _ = writeln!(out, "struct {name} {{ {} }}", fields.join(", "));
            name
        };
        let mut params = Vec::new();
        for p in &f.params {
            let ParamKind::Value(t) = &p.kind else {
                return err("device functions take values only");
            };
            self.note_type(t);
            let flat = t.flatten();
            for (c, (s, _)) in flat.iter().enumerate() {
                params.push(format!(
                    "{}: {}",
                    component_name(&p.name, c, flat.len()),
                    rt(*s)
                ));
            }
        }
        let inline = if f.noinline { "noinline" } else { "inline" };
        let _ = writeln!(
            out,
            "// device function #{fi} ({inline})\nfn {}({}) -> {ret_ty} {{",
            f.name,
            params.join(", ")
        );
        if let Some(native) = &f.native.wgsl {
            out.push_str(&kiln_ir::intrinsic_body(f, native));
            return Ok(());
        }
        self.locals(&cx, out)?;
        if block_has_loop(&f.body.block) {
            // llvmpipe counts a pass more per call of a function with loops than the loops'
            // own passes (measured with `%` of f32 in a loop).
            let _ = writeln!(out, "  {}", self.trip().trim_end());
        }
        self.block(&cx, &f.body.block, out, 1)?;
        let zeros: Vec<String> = flat.iter().map(|(s, _)| zero(*s)).collect();
        if flat.len() == 1 {
            let _ = writeln!(out, "  return {};", zeros[0]);
        } else {
            let _ = writeln!(out, "  return {ret_ty}({});", zeros.join(", "));
        }
        out.push_str("}\n");
        Ok(())
    }

    fn block(&mut self, cx: &Cx, b: &Block, out: &mut String, depth: usize) -> W<()> {
        for s in &b.0 {
            self.stmt(cx, s, out, depth)?;
        }
        Ok(())
    }

    fn stmt(&mut self, cx: &Cx, s: &Stmt, out: &mut String, depth: usize) -> W<()> {
        let pad = "  ".repeat(depth);
        match s {
            Stmt::Source(at) => {
                let _ = writeln!(out, "{pad}// {at}");
            }
            Stmt::Eval(h) => {
                let ty = cx.ty(*h)?;
                self.note_type(&ty);
                let vals = self.expr(cx, *h)?;
                let flat = ty.flatten();
                let mut line = vals.pre.join(" ");
                if let Some(call) = vals.call_struct {
                    let _ = write!(line, "let t{}_r = {call};", h.0);
                    for (c, (sc, _)) in flat.iter().enumerate() {
                        let _ = write!(
                            line,
                            " let {}: {} = t{}_r.c{c};",
                            temp_name(*h, c, &ty),
                            rt(*sc),
                            h.0
                        );
                    }
                } else {
                    // Literals are held in `var`s: naga folds constant `let`s, and its folder
                    // rejects some casts and divisions that are well defined at run time.
                    let binder = if matches!(cx.body.exprs[h.index()], Expr::Literal(_)) {
                        "var"
                    } else {
                        "let"
                    };
                    for (c, ((sc, _), v)) in flat.iter().zip(&vals.comps).enumerate() {
                        if !line.is_empty() {
                            line.push(' ');
                        }
                        let _ = write!(
                            line,
                            "{binder} {}: {} = {v};",
                            temp_name(*h, c, &ty),
                            rt(*sc)
                        );
                    }
                }
                let _ = writeln!(out, "{pad}{line}");
            }
            Stmt::LocalSet { local, value } => {
                let ty = cx.body.locals[local.0 as usize].ty.clone();
                let n = ty.flatten().len();
                let parts: Vec<String> = (0..n)
                    .map(|c| {
                        format!(
                            "{} = {};",
                            component_name(&cx.local_name(local.0 as usize), c, n),
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
                let i = temp_name(*index, 0, &Type::Scalar(ScalarType::U32));
                let parts: Vec<String> = (0..comps)
                    .map(|c| {
                        format!(
                            "{}[{i}] = {};",
                            component_name(&name, c, comps),
                            temp_name(*value, c, e)
                        )
                    })
                    .collect();
                if cx.in_bounds.local_store(*local, *index, *value) {
                    let _ = writeln!(out, "{pad}{}", parts.join(" "));
                } else {
                    let _ = writeln!(out, "{pad}if ({i} < {n}u) {{ {} }}", parts.join(" "));
                }
            }
            Stmt::Store {
                memory,
                index,
                value,
            } => {
                let i = temp_name(*index, 0, &Type::Scalar(ScalarType::U32));
                let m = self.mem(*memory)?;
                let elem = m.elem.clone();
                let vals: Vec<String> = (0..elem.flatten().len())
                    .map(|c| temp_name(*value, c, &elem))
                    .collect();
                let body = self.store(*memory, &i, &vals)?;
                let m = self.mem(*memory)?;
                if cx.in_bounds.store(*memory, *index, *value) {
                    let _ = writeln!(out, "{pad}{body}");
                } else {
                    let _ = writeln!(out, "{pad}if ({i} < {}) {{ {body} }}", m.len);
                }
            }
            Stmt::If {
                cond,
                accept,
                reject,
            } => {
                let c = temp_name(*cond, 0, &Type::Scalar(ScalarType::Bool));
                let _ = writeln!(out, "{pad}if ({c}) {{");
                self.block(cx, accept, out, depth + 1)?;
                if !reject.0.is_empty() {
                    let _ = writeln!(out, "{pad}}} else {{");
                    self.block(cx, reject, out, depth + 1)?;
                }
                let _ = writeln!(out, "{pad}}}");
                let loops = [count_loops(accept), count_loops(reject)];
                if self.options.loop_budget.is_some() && loops != [0, 0] {
                    let [then_loops, else_loops] = loops;
                    let _ = writeln!(out, "{pad}kiln_untaken({c}, {then_loops}u, {else_loops}u);");
                }
            }
            Stmt::Loop { body, continuing } => {
                let _ = writeln!(out, "{pad}loop {{");
                if self.options.loop_budget.is_some() {
                    let _ = writeln!(out, "{pad}  {}", self.trip().trim_end());
                }
                self.block(cx, body, out, depth + 1)?;
                if !continuing.0.is_empty() {
                    if continuing.0.iter().any(leaves_block) {
                        return err("break, continue or return in a loop's continuing block");
                    }
                    let _ = writeln!(out, "{pad}  continuing {{");
                    self.block(cx, continuing, out, depth + 2)?;
                    let _ = writeln!(out, "{pad}  }}");
                }
                let _ = writeln!(out, "{pad}}}");
            }
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
                    let parts: Vec<String> =
                        (0..flat.len()).map(|c| temp_name(*h, c, &ty)).collect();
                    let _ = writeln!(
                        out,
                        "{pad}return kiln_ret_{}({});",
                        cx.function_name(),
                        parts.join(", ")
                    );
                }
            }
            Stmt::Barrier(BarrierScope::Group) => {
                let _ = writeln!(out, "{pad}storageBarrier(); workgroupBarrier();");
            }
            Stmt::Barrier(BarrierScope::Subgroup) if self.options.subgroups => {
                self.needs.subgroups = true;
                let _ = writeln!(out, "{pad}subgroupBarrier();");
            }
            Stmt::Barrier(BarrierScope::Subgroup) => {
                let _ = writeln!(out, "{pad}// subgroup barrier: subgroups have one lane");
            }
        }
        Ok(())
    }

    /// Statements storing component values `vals` into element `i` of memory `m`.
    fn store(&mut self, m: Memory, i: &str, vals: &[String]) -> W<String> {
        let info = self.mem(m)?;
        let name = info.name.clone();
        let elem = info.elem.clone();
        let storage = info.storage;
        let flat = elem.flatten();
        Ok(match storage {
            Storage::Typed(_) => format!("{name}[{i}] = {};", vals[0]),
            Storage::Atomic(ScalarType::F32) => {
                format!("atomicStore(&{name}[{i}], bitcast<u32>({}));", vals[0])
            }
            Storage::Atomic(_) => format!("atomicStore(&{name}[{i}], {});", vals[0]),
            Storage::Shared => {
                let mut parts = Vec::new();
                for (c, ((s, _), v)) in flat.iter().zip(vals).enumerate() {
                    let v = if *s == ScalarType::Bool {
                        format!("select(0u, 1u, {v})")
                    } else {
                        v.clone()
                    };
                    parts.push(format!(
                        "{}[{i}] = {v};",
                        component_name(&name, c, flat.len())
                    ));
                }
                parts.join(" ")
            }
            Storage::Words { atomic } => {
                let mut parts = vec![format!("let kiln_b = {i} * {}u;", elem.size())];
                for ((s, off), v) in flat.iter().zip(vals) {
                    let bits = match s {
                        ScalarType::Bool => format!("select(0u, 1u, {v})"),
                        ScalarType::U8 | ScalarType::U16 | ScalarType::U32 => v.clone(),
                        _ if s.bits() == 64 => format!("bitcast<u64>({v})"),
                        _ => format!("bitcast<u32>({v})"),
                    };
                    let w = format!("{name}[(kiln_b + {off}u) >> 2u]");
                    match s.size() {
                        4 if atomic => parts.push(format!("atomicStore(&{w}, {bits});")),
                        4 => parts.push(format!("{w} = {bits};")),
                        8 => {
                            let hi = format!("{name}[((kiln_b + {off}u) >> 2u) + 1u]");
                            let lo_v = format!("u32({bits} & 0xfffffffflu)");
                            let hi_v = format!("u32({bits} >> 32u)");
                            if atomic {
                                parts.push(format!(
                                    "atomicStore(&{w}, {lo_v}); atomicStore(&{hi}, {hi_v});"
                                ));
                            } else {
                                parts.push(format!("{w} = {lo_v}; {hi} = {hi_v};"));
                            }
                        }
                        size => {
                            let mask = if size == 1 { "0xffu" } else { "0xffffu" };
                            let sh = format!("(((kiln_b + {off}u) & 3u) * 8u)");
                            let keep = format!("~({mask} << {sh})");
                            let put = format!("(({bits} & {mask}) << {sh})");
                            if atomic {
                                parts.push(format!(
                                    "atomicAnd(&{w}, {keep}); atomicOr(&{w}, {put});"
                                ));
                            } else {
                                parts.push(format!("{w} = ({w} & {keep}) | {put};"));
                            }
                        }
                    }
                }
                // A block of its own: stores to several such memories in one scope each
                // declare their `kiln_b`.
                format!("{{ {} }}", parts.join(" "))
            }
        })
    }

    /// Component values of element `i` of memory `m`, with the lines that must run first.
    /// When `checked`, an `i` out of bounds reads zero; otherwise a guard proved it in bounds.
    fn load(&mut self, m: Memory, i: &str, h: Handle, checked: bool) -> W<Vals> {
        let info = self.mem(m)?;
        let (name, elem, storage, len) = (
            info.name.clone(),
            info.elem.clone(),
            info.storage,
            info.len.clone(),
        );
        let flat = elem.flatten();
        let guard = |s: ScalarType, v: String| match (checked, s) {
            (false, _) => v,
            (true, ScalarType::Bool) => format!("({i} < {len} && {v})"),
            (true, _) => format!("select({}, {v}, {i} < {len})", zero(s)),
        };
        let mut pre = Vec::new();
        let comps = match storage {
            Storage::Typed(s) => vec![guard(s, format!("{name}[{i}]"))],
            Storage::Atomic(ScalarType::F32) => vec![guard(
                ScalarType::F32,
                format!("bitcast<f32>(atomicLoad(&{name}[{i}]))"),
            )],
            Storage::Atomic(s) => vec![guard(s, format!("atomicLoad(&{name}[{i}])"))],
            Storage::Shared => flat
                .iter()
                .enumerate()
                .map(|(c, (s, _))| {
                    let r = format!("{}[{i}]", component_name(&name, c, flat.len()));
                    if *s == ScalarType::Bool {
                        guard(*s, format!("({r} != 0u)"))
                    } else {
                        guard(*s, r)
                    }
                })
                .collect(),
            Storage::Words { atomic } => {
                let b = format!("t{}_b", h.0);
                pre.push(format!("let {b} = {i} * {}u;", elem.size()));
                let word = |at: String| {
                    if atomic {
                        format!("atomicLoad(&{name}[{at}])")
                    } else {
                        format!("{name}[{at}]")
                    }
                };
                flat.iter()
                    .map(|(s, off)| {
                        let w = word(format!("({b} + {off}u) >> 2u"));
                        let v = match s.size() {
                            4 => match s {
                                ScalarType::U32 => w,
                                _ => format!("bitcast<{}>({w})", rt(*s)),
                            },
                            8 => {
                                let hi = word(format!("(({b} + {off}u) >> 2u) + 1u"));
                                let bits = format!("(u64({w}) | (u64({hi}) << 32u))");
                                match s {
                                    ScalarType::U64 => bits,
                                    _ => format!("bitcast<{}>({bits})", rt(*s)),
                                }
                            }
                            size => {
                                let mask = if size == 1 { "0xffu" } else { "0xffffu" };
                                let raw =
                                    format!("(({w} >> ((({b} + {off}u) & 3u) * 8u)) & {mask})");
                                match s {
                                    ScalarType::Bool => format!("({raw} != 0u)"),
                                    ScalarType::I8 | ScalarType::I16 => {
                                        wrap(*s, format!("bitcast<i32>({raw})"))
                                    }
                                    _ => raw,
                                }
                            }
                        };
                        guard(*s, v)
                    })
                    .collect()
            }
        };
        Ok(Vals {
            pre,
            comps,
            call_struct: None,
        })
    }

    fn expr(&mut self, cx: &Cx, h: Handle) -> W<Vals> {
        let e = &cx.body.exprs[h.index()];
        let ty = cx.ty(h)?;
        let u32t = Type::Scalar(ScalarType::U32);
        let n = ty.flatten().len();
        let each = |f: &mut dyn FnMut(usize) -> W<String>| -> W<Vals> {
            Ok(Vals::new((0..n).map(f).collect::<W<Vec<_>>>()?))
        };
        match e {
            Expr::Literal(v) => Ok(Vals::one(lit(ScalarValue::from_bits(
                reg(v.ty()),
                if v.ty().is_signed() {
                    let shift = 64 - v.ty().bits();
                    (((v.to_bits() << shift) as i64) >> shift) as u64
                } else {
                    v.to_bits()
                },
            )))),
            Expr::Param(i) => {
                let p = &cx.params[*i as usize];
                Ok(Vals::new(
                    (0..n).map(|c| component_name(&p.name, c, n)).collect(),
                ))
            }
            Expr::LocalGet(l) => {
                let name = cx.local_name(l.0 as usize);
                Ok(Vals::new(
                    (0..n).map(|c| component_name(&name, c, n)).collect(),
                ))
            }
            Expr::LocalIndex { local, index } => {
                let Type::Array(e, len) = &cx.body.locals[local.0 as usize].ty else {
                    return err("not an array local");
                };
                let name = cx.local_name(local.0 as usize);
                let i = temp_name(*index, 0, &u32t);
                let flat = e.flatten();
                let checked = !cx.in_bounds.load(h);
                Ok(Vals::new(
                    flat.iter()
                        .enumerate()
                        .map(|(c, (s, _))| {
                            let arr = component_name(&name, c, flat.len());
                            if checked {
                                format!(
                                    "select({}, {arr}[min({i}, {}u)], {i} < {len}u)",
                                    zero(*s),
                                    len.saturating_sub(1)
                                )
                            } else {
                                format!("{arr}[{i}]")
                            }
                        })
                        .collect(),
                ))
            }
            Expr::Load { memory, index } => self.load(
                *memory,
                &temp_name(*index, 0, &u32t),
                h,
                !cx.in_bounds.load(h),
            ),
            Expr::Len(m) => Ok(Vals::one(self.mem(*m)?.len.clone())),
            Expr::Binary { op, lhs, rhs } => {
                let lt = cx.ty(*lhs)?;
                let s = lt
                    .component()
                    .ok_or_else(|| WriteError("binary on a non-scalar".into()))?;
                let m = lt.flatten().len();
                let comps = (0..m)
                    .map(|c| {
                        self.binary(*op, s, &temp_name(*lhs, c, &lt), &temp_name(*rhs, c, &lt))
                    })
                    .collect::<W<Vec<_>>>()?;
                Ok(Vals::new(comps))
            }
            Expr::Unary { op, arg } => {
                let s = ty
                    .component()
                    .ok_or_else(|| WriteError("unary on a non-scalar".into()))?;
                each(&mut |c| {
                    let x = temp_name(*arg, c, &ty);
                    Ok(match (op, s) {
                        (UnaryOp::Neg, s) if s.is_float() => format!("(-{x})"),
                        (UnaryOp::Neg, s) if s.is_signed() => wrap(s, format!("(-{x})")),
                        (UnaryOp::Neg, s) => wrap(s, format!("({} - {x})", zero(s))),
                        (UnaryOp::Not, ScalarType::Bool) => format!("(!{x})"),
                        (UnaryOp::Not, s) => wrap(s, format!("(~{x})")),
                    })
                })
            }
            Expr::Select {
                cond,
                accept,
                reject,
            } => {
                let c = temp_name(*cond, 0, &Type::Scalar(ScalarType::Bool));
                each(&mut |i| {
                    Ok(format!(
                        "select({}, {}, {c})",
                        temp_name(*reject, i, &ty),
                        temp_name(*accept, i, &ty)
                    ))
                })
            }
            Expr::Cast { arg, to } => {
                let at = cx.ty(*arg)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("cast of a non-scalar".into()))?;
                self.note(*to);
                let comps = (0..at.flatten().len())
                    .map(|c| self.cast(&temp_name(*arg, c, &at), from, *to))
                    .collect();
                Ok(Vals::new(comps))
            }
            Expr::Bitcast { arg, to } => {
                let at = cx.ty(*arg)?;
                let from = at
                    .component()
                    .ok_or_else(|| WriteError("bitcast of a non-scalar".into()))?;
                let comps = (0..at.flatten().len())
                    .map(|c| bitcast(&temp_name(*arg, c, &at), from, *to))
                    .collect();
                Ok(Vals::new(comps))
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
                Ok(Vals::new(comps))
            }
            Expr::Builtin(
                b @ (Builtin::SubgroupId | Builtin::SubgroupSize | Builtin::SubgroupLane),
            ) if self.options.subgroups => {
                self.needs.subgroups = true;
                Ok(Vals::one(
                    match b {
                        Builtin::SubgroupId => "kiln_sg_id",
                        Builtin::SubgroupSize => "kiln_sg_size",
                        _ => "kiln_sg_lane",
                    }
                    .into(),
                ))
            }
            Expr::Builtin(b) => Ok(Vals::one(builtin(*b))),
            Expr::Compose { parts, .. } => {
                let mut comps = Vec::new();
                for p in parts {
                    let pt = cx.ty(*p)?;
                    for c in 0..pt.flatten().len() {
                        comps.push(temp_name(*p, c, &pt));
                    }
                }
                Ok(Vals::new(comps))
            }
            Expr::Extract { base, index } => {
                let bt = cx.ty(*base)?;
                let range = bt
                    .component_range(*index)
                    .ok_or_else(|| WriteError(format!("{bt} has no component {index}")))?;
                Ok(Vals::new(range.map(|c| temp_name(*base, c, &bt)).collect()))
            }
            Expr::Atomic {
                memory,
                index,
                op,
                value,
                compare,
            } => {
                let s = ty
                    .as_scalar()
                    .ok_or_else(|| WriteError("atomic on a non-scalar".into()))?;
                let i = temp_name(*index, 0, &u32t);
                let v = temp_name(*value, 0, &ty);
                let cmp = compare.map(|c| temp_name(c, 0, &ty));
                self.atomic(*memory, h, s, *op, &i, &v, cmp.as_deref())
            }
            Expr::Subgroup { op, arg, lane } => {
                let s = cx
                    .ty(*arg)?
                    .as_scalar()
                    .ok_or_else(|| WriteError("subgroup op on a non-scalar".into()))?;
                let x = temp_name(*arg, 0, &Type::Scalar(s));
                if self.options.subgroups {
                    let lane = lane.map(|l| temp_name(l, 0, &u32t));
                    return Ok(Vals::one(self.subgroup(*op, s, &x, lane.as_deref())?));
                }
                Ok(Vals::one(match op {
                    SubgroupOp::Ballot => format!("select(0u, 1u, {x})"),
                    SubgroupOp::ExclusiveAdd => zero(s),
                    _ => x,
                }))
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
                let call = format!("{}({})", f.name, flat_args.join(", "));
                if n == 1 {
                    Ok(Vals::one(call))
                } else {
                    Ok(Vals {
                        pre: Vec::new(),
                        comps: Vec::new(),
                        call_struct: Some(call),
                    })
                }
            }
        }
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
        self.helpers.insert(text);
    }

    fn binary(&mut self, op: BinaryOp, s: ScalarType, a: &str, b: &str) -> W<String> {
        if op == BinaryOp::Ne && s.is_float() {
            // Written as not-equal-ordered by naga, which is false for NaN on some drivers.
            return Ok(format!("(!({a} == {b}))"));
        }
        if op.is_compare() {
            return Ok(format!("({a} {} {b})", op.symbol()));
        }
        if s.is_float() {
            return Ok(match op {
                BinaryOp::Rem => {
                    self.helper(fmod_helper(s, self.trip()));
                    format!("kiln_fmod_{}({a}, {b})", rt(s))
                }
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
        let mask = s.bits() - 1;
        Ok(match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul => {
                wrap(s, format!("({a} {} {b})", op.symbol()))
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => format!("({a} {} {b})", op.symbol()),
            BinaryOp::Shl => wrap(s, format!("({a} << (u32({b}) & {mask}u))")),
            BinaryOp::Shr => format!("({a} >> (u32({b}) & {mask}u))"),
            BinaryOp::Div | BinaryOp::Rem => {
                let r = reg(s);
                let t = rt(r);
                let name = format!(
                    "kiln_{}_{t}",
                    if op == BinaryOp::Div { "div" } else { "rem" }
                );
                let min_check = if r.is_signed() {
                    format!(
                        " || (a == {} && b == {})",
                        lit(ScalarValue::from_bits(r, 1u64 << (r.bits() - 1))),
                        lit(ScalarValue::from_bits(r, u64::MAX))
                    )
                } else {
                    String::new()
                };
                // GLSL leaves `%` of negative operands undefined (llvmpipe's GL gave 1 for
                // `1 % -1`), and naga writes WGSL's `%` as GLSL's: a signed remainder is
                // written with the division, which GLSL truncates as WGSL does.
                let (on_bad, good) = match op {
                    BinaryOp::Div => ("a".to_string(), "a / b"),
                    _ if r.is_signed() => (zero(r), "a - b * (a / b)"),
                    _ => (zero(r), "a % b"),
                };
                self.helper(format!(
                    "fn {name}(a: {t}, b: {t}) -> {t} {{ if (b == {}{min_check}) {{ return {on_bad}; }} return {good}; }}",
                    zero(r)
                ));
                wrap(s, format!("{name}({a}, {b})"))
            }
            _ => return err(format!("`{}` on {s}", op.symbol())),
        })
    }

    fn cast(&mut self, x: &str, from: ScalarType, to: ScalarType) -> String {
        if from == to {
            return x.to_string();
        }
        if to == ScalarType::Bool {
            return format!("({x} != {})", zero(from));
        }
        if from == ScalarType::Bool {
            return format!("select({}, {}, {x})", zero(to), one(to));
        }
        if to == ScalarType::F32 && from.is_int() && from.bits() == 32 {
            // Mesa's GL folds a conversion back to an integer that follows `f32(x)` into `x`,
            // which is wrong past 2^24 (`i32(f32(16777217))` gave 16777217). The sum of two
            // exact parts, rounded once, is `f32(x)` and is not folded.
            let t = rt(from);
            let name = format!("kiln_f32_of_{t}");
            self.helper(format!(
                "// f32(x) from two exact parts, rounded once (GL drivers fold i32(f32(x)) into x)\n\
                 fn {name}(x: {t}) -> f32 {{ return f32(x >> 8u) * 256.0f + f32(x & 255{s}); }}",
                s = if from.is_signed() { "i" } else { "u" }
            ));
            return format!("{name}({x})");
        }
        if to.is_float() {
            return format!("{}({x})", rt(to));
        }
        if from.is_int() && from.is_signed() && from.bits() <= 32 && to.bits() == 64 {
            // Sign extension spelled out: lavapipe compares `i64(x)` of a negative i32 `x` as
            // if it were positive (`i64(x) > 0` is true), though it stores the right value.
            let ext =
                format!("(u64(bitcast<u32>({x})) | select(0lu, 0xffffffff00000000lu, ({x}) < 0i))");
            return match to {
                ScalarType::I64 => format!("bitcast<i64>{ext}"),
                _ => ext,
            };
        }
        if from.is_int() && from.bits() <= 32 && to == ScalarType::I64 {
            // Likewise `i64(x)` of a u32: lavapipe found `i64(0u) > 0` true. Through u64 it holds.
            return format!("bitcast<i64>(u64({x}))");
        }
        if from.is_int() {
            return wrap(to, format!("{}({x})", rt(reg(to))));
        }
        let (ft, tt) = (rt(from), rt(reg(to)));
        let name = format!("kiln_cvt_{}_{}", from.name(), to.name());
        let max = lit(ScalarValue::from_bits(
            reg(to),
            if to.is_signed() {
                (1u64 << (to.bits() - 1)) - 1
            } else if to.bits() == 64 {
                u64::MAX
            } else {
                (1u64 << to.bits()) - 1
            },
        ));
        let body = if to.is_signed() {
            let lim = 2f64.powi(to.bits() as i32 - 1);
            let min = lit(ScalarValue::from_bits(
                reg(to),
                (-(lim as i128) as i64) as u64,
            ));
            format!(
                "if (!(v == v)) {{ return {z}; }} if (v >= {hi}) {{ return {max}; }} if (v <= {lo}) {{ return {min}; }} return {tt}(v);",
                z = zero(to),
                hi = float_lit(lim, from),
                lo = float_lit(-lim, from),
            )
        } else {
            format!(
                "if (!(v >= {one})) {{ return {z}; }} if (v >= {hi}) {{ return {max}; }} return {tt}(v);",
                one = one(from),
                z = zero(to),
                hi = float_lit(2f64.powi(to.bits() as i32), from),
            )
        };
        self.helper(format!("fn {name}(v: {ft}) -> {tt} {{ {body} }}"));
        format!("{name}({x})")
    }

    fn math(&mut self, fun: MathFn, s: ScalarType, x: &[String]) -> W<String> {
        if !s.is_float() {
            return Ok(match fun {
                MathFn::Abs if s.is_signed() => wrap(s, format!("abs({})", x[0])),
                MathFn::Abs => x[0].clone(),
                MathFn::Min => format!("min({}, {})", x[0], x[1]),
                MathFn::Max => format!("max({}, {})", x[0], x[1]),
                MathFn::Clamp => format!("min(max({}, {}), {})", x[0], x[1], x[2]),
                MathFn::Sign if s.is_signed() => format!(
                    "select(select({z}, {m}, {v} < {z}), {o}, {v} > {z})",
                    v = x[0],
                    z = zero(s),
                    o = one(s),
                    m = lit(ScalarValue::from_bits(reg(s), u64::MAX))
                ),
                MathFn::Sign => format!("select({}, {}, {} > {})", zero(s), one(s), x[0], zero(s)),
                f => return err(format!("{} on integers", f.name())),
            });
        }
        let t = rt(s);
        let (u, abs_mask, inf, sign_bit) = float_bits(s);
        let z = zero(s);
        let o = one(s);
        if s == ScalarType::F32 {
            if let Some(call) = self.f32_math(fun, x) {
                return Ok(call);
            }
        }
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
            | MathFn::Sqrt
            | MathFn::Floor
            | MathFn::Ceil
            | MathFn::Trunc
            | MathFn::Abs => format!("{}({})", fun.name(), x[0]),
            MathFn::Log10 => format!("(log({}) * {})", x[0], float_lit(std::f64::consts::LOG10_E, s)),
            MathFn::Round => {
                let name = format!("kiln_round_{t}");
                self.helper(format!("// rounds half away from zero\nfn {name}(x: {t}) -> {t} {{ let t = trunc(x); if (abs(x - t) >= {half}) {{ return t + select({m}, {o}, x > {z}); }} return t; }}", half = float_lit(0.5, s), m = float_lit(-1.0, s)));
                format!("{name}({})", x[0])
            }
            MathFn::Atan2 => format!("atan2({}, {})", x[0], x[1]),
            MathFn::Pow => format!("pow({}, {})", x[0], x[1]),
            MathFn::Copysign => format!(
                "select(bitcast<{t}>((bitcast<{u}>({a}) & {abs_mask}) | (bitcast<{u}>({b}) & {sign_bit})), abs({a}), (bitcast<{u}>({b}) & {abs_mask}) > {inf})",
                a = x[0],
                b = x[1]
            ),
            MathFn::Rsqrt => format!("({o} / sqrt({}))", x[0]),
            MathFn::Fract => format!("({0} - trunc({0}))", x[0]),
            MathFn::Min | MathFn::Max | MathFn::Clamp => {
                if s == ScalarType::F64 {
                    self.needs.int64 = true;
                }
                let helper = |max: bool| {
                    let name = format!("kiln_{}_{t}", if max { "max" } else { "min" });
                    let (inner, combine) = if max { ("max", "&") } else { ("min", "|") };
                    (name.clone(), format!("// NaN gives the other operand; of -0 and +0, min gives -0 and max +0\nfn {name}(a: {t}, b: {t}) -> {t} {{ if (!(a == a)) {{ return b; }} if (!(b == b)) {{ return a; }} if (a == b) {{ return bitcast<{t}>(bitcast<{u}>(a) {combine} bitcast<{u}>(b)); }} return {inner}(a, b); }}"))
                };
                let (mn, mn_text) = helper(false);
                let (mx, mx_text) = helper(true);
                match fun {
                    MathFn::Min => {
                        self.helper(mn_text);
                        format!("{mn}({}, {})", x[0], x[1])
                    }
                    MathFn::Max => {
                        self.helper(mx_text);
                        format!("{mx}({}, {})", x[0], x[1])
                    }
                    _ => {
                        self.helper(mn_text);
                        self.helper(mx_text);
                        format!("{mn}({mx}({}, {}), {})", x[0], x[1], x[2])
                    }
                }
            }
            MathFn::Fma => format!("fma({}, {}, {})", x[0], x[1], x[2]),
            MathFn::Sign => format!(
                "select(select({v}, {m}, {v} < {z}), {o}, {v} > {z})",
                v = x[0],
                m = float_lit(-1.0, s)
            ),
            MathFn::IsNan => format!("((bitcast<{u}>({}) & {abs_mask}) > {inf})", x[0]),
            MathFn::IsInf => format!("((bitcast<{u}>({}) & {abs_mask}) == {inf})", x[0]),
        })
    }

    /// A subgroup operation with WGSL's subgroup built-ins, which cover the active lanes.
    /// Every lane-taking operation is a `subgroupShuffle` whose result is the caller's own
    /// value when the asked-for lane is outside the subgroup or not active (a ballot of the
    /// active lanes tells); float minimum and maximum take NaN as the identity and settle
    /// the sign of a zero result with `subgroupAny`, so every backend gives the same answer.
    fn subgroup(
        &mut self,
        op: SubgroupOp,
        s: ScalarType,
        x: &str,
        lane: Option<&str>,
    ) -> W<String> {
        self.needs.subgroups = true;
        let lane = lane.unwrap_or("0u");
        let (me, size) = ("kiln_sg_lane", "kiln_sg_size");
        let source = match op {
            SubgroupOp::Shuffle | SubgroupOp::Broadcast => {
                Some(format!("select({me}, {lane}, {lane} < {size})"))
            }
            SubgroupOp::ShuffleUp => Some(format!("select({me}, {me} - {lane}, {lane} <= {me})")),
            SubgroupOp::ShuffleDown => Some(format!(
                "select({me}, {me} + {lane}, {lane} < {size} - {me})"
            )),
            SubgroupOp::ShuffleXor => Some(format!(
                "select({me}, {me} ^ {lane}, ({me} ^ {lane}) < {size})"
            )),
            _ => None,
        };
        if let Some(source) = source {
            let t = if s == ScalarType::Bool { "u32" } else { rt(s) };
            let h = format!("kiln_shuffle_{t}");
            self.helper(format!("// a source lane that is not active gives the caller's own value\nfn {h}(x: {t}, source: u32) -> {t} {{ let live = subgroupBallot(true); let o = subgroupShuffle(x, source); return select(x, o, ((live[source / 32u] >> (source % 32u)) & 1u) != 0u); }}"));
            return Ok(if s == ScalarType::Bool {
                format!("({h}(select(0u, 1u, {x}), {source}) != 0u)")
            } else {
                format!("{h}({x}, {source})")
            });
        }
        Ok(match op {
            SubgroupOp::Ballot => format!("subgroupBallot({x}).x"),
            SubgroupOp::All => format!("subgroupAll({x})"),
            SubgroupOp::Any => format!("subgroupAny({x})"),
            SubgroupOp::ReduceAdd => wrap(s, format!("subgroupAdd({x})")),
            SubgroupOp::InclusiveAdd => wrap(s, format!("subgroupInclusiveAdd({x})")),
            SubgroupOp::ExclusiveAdd => wrap(s, format!("subgroupExclusiveAdd({x})")),
            SubgroupOp::ReduceMin | SubgroupOp::ReduceMax if s.is_float() => {
                let max = op == SubgroupOp::ReduceMax;
                let name = if max { "max" } else { "min" };
                let (t, u, sign, none) = if s == ScalarType::F64 {
                    self.needs.int64 = true;
                    ("f64", "u64", "0x8000000000000000lu", "0lu")
                } else {
                    ("f32", "u32", "0x80000000u", "0u")
                };
                let (skip, zero, other_zero, nan) = (
                    float_lit(
                        if max {
                            f64::NEG_INFINITY
                        } else {
                            f64::INFINITY
                        },
                        s,
                    ),
                    float_lit(if max { 0.0 } else { -0.0 }, s),
                    float_lit(if max { -0.0 } else { 0.0 }, s),
                    float_lit(f64::NAN, s),
                );
                let wanted_sign = if max { "==" } else { "!=" };
                let h = format!("kiln_subgroup_{name}_{t}");
                self.helper(format!("// over the active lanes: NaN only when all are NaN; of -0 and +0, min gives -0 and max +0\nfn {h}(x: {t}) -> {t} {{ let nan = !(x == x); let y = select(x, {skip}, nan); let m = subgroup{}(y); let zero = subgroupAny(y == {zero} && (bitcast<{u}>(y) & {sign}) {wanted_sign} {none}); let r = select(m, select({other_zero}, {zero}, zero), m == {zero}); return select(r, {nan}, subgroupAll(nan)); }}", if max { "Max" } else { "Min" }));
                format!("{h}({x})")
            }
            SubgroupOp::ReduceMin => format!("subgroupMin({x})"),
            _ => format!("subgroupMax({x})"),
        })
    }

    /// kiln's own f32 versions of functions drivers are allowed to (and some do) compute
    /// with errors of thousands of ulps: the inverse trigonometric functions, and sinh/tanh
    /// near zero. Each stays within a few ulps of the correctly rounded result.
    fn f32_math(&mut self, fun: MathFn, x: &[String]) -> Option<String> {
        let atan = "// atan within about 2 ulps: reduce |x| to at most tan(pi/8), then an odd polynomial.\nfn kiln_atan_f32(x: f32) -> f32 {\n  let a = abs(x);\n  var base = 0.0f;\n  var r = a;\n  if (a > 2.4142137f) { base = 1.5707964f; r = -1.0f / a; } else if (a > 0.41421357f) { base = 0.7853982f; r = (a - 1.0f) / (a + 1.0f); }\n  let z = r * r;\n  let p = (((0.0805374449538f * z - 0.138776856032f) * z + 0.199777106478f) * z - 0.333329491539f) * z * r + r;\n  return bitcast<f32>(bitcast<u32>(base + p) | (bitcast<u32>(x) & 0x80000000u));\n}";
        // Drivers' exp lost up to 62 ulps (lavapipe, at -85): kiln reduces the argument with
        // ln 2 in two parts (k * hi is exact), takes e^r by a degree-7 polynomial on
        // |r| <= ln2 / 2 and applies 2^k in two normal factors, so results near either limit
        // keep their bits; `down` divides the result by 2^down first (cosh and sinh near the
        // overflow threshold, where e^x itself overflows but e^x / 2 does not).
        let exp = "// e^x / 2^down within 2 ulps: x = k ln2 + r, e^r by a polynomial, then 2^(k - down) in two normal factors.\nfn kiln_exp_scaled_f32(x: f32, down: i32) -> f32 {\n  if (x > 89.5f) { return bitcast<f32>(0x7f800000u); }\n  if (x < -104.0f) { return 0.0f; }\n  let k = round(x * 1.4426950f);\n  let r = (x - k * 0.69314575f) - k * 1.4286068e-6f;\n  let p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.041666668f + r * (0.008333334f + r * (0.0013888889f + r * 0.0001984127f))))));\n  let e = i32(k) - down;\n  let e1 = e / 2;\n  let e2 = e - e1;\n  return p * bitcast<f32>(u32(e1 + 127) << 23u) * bitcast<f32>(u32(e2 + 127) << 23u);\n}";
        let sinh = "// sinh: a Taylor polynomial below 1 in magnitude (no cancellation), exponentials above; above 9 e^-|x| is below half an ulp, so e^|x| / 2 alone.\nfn kiln_sinh_f32(x: f32) -> f32 {\n  let a = abs(x);\n  if (a < 1.0f) { let z = x * x; return x + x * z * (0.16666667f + z * (0.008333334f + z * (0.0001984127f + z * 2.7557319e-6f))); }\n  var s = kiln_exp_scaled_f32(a, 1);\n  if (a < 9.0f) { s = s - 0.25f / s; }\n  return select(s, -s, x < 0.0f);\n}";
        Some(match fun {
            MathFn::Atan => {
                self.helper(atan.into());
                format!("kiln_atan_f32({})", x[0])
            }
            MathFn::Asin => {
                self.helper(atan.into());
                self.helper("fn kiln_asin_f32(x: f32) -> f32 { return kiln_atan_f32(x / sqrt((1.0f - x) * (1.0f + x))); }".into());
                format!("kiln_asin_f32({})", x[0])
            }
            MathFn::Acos => {
                self.helper(atan.into());
                self.helper("fn kiln_acos_f32(x: f32) -> f32 { return 2.0f * kiln_atan_f32(sqrt((1.0f - x) / (1.0f + x))); }".into());
                format!("kiln_acos_f32({})", x[0])
            }
            MathFn::Atan2 => {
                self.helper(atan.into());
                self.helper("// atan2 from kiln_atan_f32 of |y|/|x|, with the quadrant and signed zeros of C's atan2.\nfn kiln_atan2_f32(y: f32, x: f32) -> f32 {\n  if (!(x == x) || !(y == y)) { return x + y; }\n  let ax = abs(x);\n  let ay = abs(y);\n  var t = ay / ax;\n  if (ay == 0.0f) { t = 0.0f; } else if (ax == ay) { t = 1.0f; }\n  var a = kiln_atan_f32(t);\n  if ((bitcast<u32>(x) & 0x80000000u) != 0u) { a = 3.1415927f - a; }\n  return bitcast<f32>(bitcast<u32>(a) | (bitcast<u32>(y) & 0x80000000u));\n}".into());
                format!("kiln_atan2_f32({}, {})", x[0], x[1])
            }
            MathFn::Exp => {
                self.helper(exp.into());
                format!("kiln_exp_scaled_f32({}, 0)", x[0])
            }
            MathFn::Sinh => {
                self.helper(exp.into());
                self.helper(sinh.into());
                format!("kiln_sinh_f32({})", x[0])
            }
            MathFn::Cosh => {
                self.helper(exp.into());
                self.helper("// cosh: e^|x| / 2 plus its reciprocal / 4, which is below half an ulp above 9.\nfn kiln_cosh_f32(x: f32) -> f32 { let a = abs(x); let h = kiln_exp_scaled_f32(a, 1); if (a < 9.0f) { return h + 0.25f / h; } return h; }".into());
                format!("kiln_cosh_f32({})", x[0])
            }
            MathFn::Log | MathFn::Log2 | MathFn::Log10 => {
                // Vulkan bounds the driver's log only absolutely near 1 (lavapipe: 2375 ulps
                // at 0.99984) and lets it flush subnormal inputs: kiln splits x into 2^e * m
                // from its bits, m in [sqrt(1/2), sqrt(2)), and takes ln m = 2 atanh(s),
                // s = (m - 1) / (m + 1), by an odd polynomial.
                self.helper("// (e, ln m) for x = 2^e * m, m in [sqrt(1/2), sqrt(2)), read from the bits (subnormals too); x > 0 and finite.\nfn kiln_log_parts_f32(x: f32) -> vec2<f32> {\n  var b = bitcast<u32>(x);\n  var e = i32(b >> 23u) - 127;\n  if (e == -127) { let sh = countLeadingZeros(b) - 8u; b = b << sh; e = -126 - i32(sh); }\n  var m = bitcast<f32>((b & 0x007fffffu) | 0x3f800000u);\n  if (m > 1.4142135f) { m = m * 0.5f; e = e + 1; }\n  let f = m - 1.0f;\n  let s = f / (2.0f + f);\n  let z = s * s;\n  return vec2<f32>(f32(e), 2.0f * s * (1.0f + z * (0.33333334f + z * (0.2f + z * (0.14285715f + z * 0.11111111f)))));\n}".into());
                let (name, combine) = match fun {
                    MathFn::Log => ("ln", "p.x * 0.69314575f + (p.y + p.x * 1.4286068e-6f)"),
                    MathFn::Log2 => ("log2", "p.x + p.y * 1.442695f"),
                    _ => (
                        "log10",
                        "p.x * 0.30102539f + (p.y * 0.4342945f + p.x * 4.6050898e-6f)",
                    ),
                };
                self.helper(format!("// {name} from kiln_log_parts_f32, with IEEE results for 0, negatives, infinity and NaN.\nfn kiln_{name}_f32(x: f32) -> f32 {{\n  let b = bitcast<u32>(x);\n  if ((b & 0x7fffffffu) == 0u) {{ return bitcast<f32>(0xff800000u); }}\n  if (b >= 0x7f800000u) {{ return bitcast<f32>(select(0x7fc00000u, b, b == 0x7f800000u)); }}\n  let p = kiln_log_parts_f32(x);\n  return {combine};\n}}"));
                format!("kiln_{name}_f32({})", x[0])
            }
            MathFn::Tanh => {
                self.helper(exp.into());
                self.helper(sinh.into());
                self.helper("fn kiln_tanh_f32(x: f32) -> f32 { if (abs(x) > 9.0f) { return select(1.0f, -1.0f, x < 0.0f); } let s = kiln_sinh_f32(x); return s / sqrt(1.0f + s * s); }".into());
                format!("kiln_tanh_f32({})", x[0])
            }
            _ => return None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        m: Memory,
        h: Handle,
        s: ScalarType,
        op: AtomicOp,
        i: &str,
        v: &str,
        cmp: Option<&str>,
    ) -> W<Vals> {
        let info = self.mem(m)?;
        let ptr = format!("&{}[{i}]", info.name);
        let len = info.len.clone();
        let r = format!("t{}_a", h.0);
        let trip = self.trip();
        let call = match (op, s) {
            (AtomicOp::Add, ScalarType::F32) => {
                format!("var {r}_old = atomicLoad({ptr}); loop {{ {trip}let kiln_x = atomicCompareExchangeWeak({ptr}, {r}_old, bitcast<u32>(bitcast<f32>({r}_old) + {v})); if (kiln_x.exchanged) {{ break; }} {r}_old = kiln_x.old_value; }} {r} = bitcast<f32>({r}_old);")
            }
            (AtomicOp::Exchange, ScalarType::F32) => {
                format!("{r} = bitcast<f32>(atomicExchange({ptr}, bitcast<u32>({v})));")
            }
            (AtomicOp::CompareExchange, _) => {
                let c = cmp.unwrap_or("0");
                format!("loop {{ {trip}let kiln_x = atomicCompareExchangeWeak({ptr}, {c}, {v}); if (kiln_x.exchanged || kiln_x.old_value != {c}) {{ {r} = kiln_x.old_value; break; }} }}")
            }
            _ => {
                let f = match op {
                    AtomicOp::Add => "atomicAdd",
                    AtomicOp::Sub => "atomicSub",
                    AtomicOp::Min => "atomicMin",
                    AtomicOp::Max => "atomicMax",
                    AtomicOp::And => "atomicAnd",
                    AtomicOp::Or => "atomicOr",
                    AtomicOp::Xor => "atomicXor",
                    _ => "atomicExchange",
                };
                format!("{r} = {f}({ptr}, {v});")
            }
        };
        Ok(Vals {
            pre: vec![format!(
                "var {r}: {} = {}; if ({i} < {len}) {{ {call} }}",
                rt(s),
                zero(s)
            )],
            comps: vec![r],
            call_struct: None,
        })
    }
}

fn bitcast(x: &str, from: ScalarType, to: ScalarType) -> String {
    match (from, to) {
        (f, t) if f == t => x.to_string(),
        (ScalarType::U8 | ScalarType::U16, t) => wrap(t, format!("bitcast<i32>({x})")),
        (ScalarType::I8 | ScalarType::I16, t) => wrap(t, format!("bitcast<u32>({x})")),
        (_, t) => format!("bitcast<{}>({x})", rt(t)),
    }
}

fn builtin(b: Builtin) -> String {
    let xyz = |a: Axis| ["x", "y", "z"][a.index()];
    match b {
        Builtin::GlobalId(a) => format!(
            "(kiln_gid.{0} * {1} + kiln_lid.{0})",
            xyz(a),
            GROUP_SIZE_OVERRIDES[a.index()]
        ),
        Builtin::LocalId(a) => format!("kiln_lid.{}", xyz(a)),
        Builtin::GroupId(a) => format!("kiln_gid.{}", xyz(a)),
        Builtin::GroupSize(a) => GROUP_SIZE_OVERRIDES[a.index()].to_string(),
        Builtin::NumGroups(a) => format!("kiln_groups.{}", xyz(a)),
        Builtin::GlobalSize(a) => format!(
            "(kiln_groups.{} * {})",
            xyz(a),
            GROUP_SIZE_OVERRIDES[a.index()]
        ),
        Builtin::LocalIndex | Builtin::SubgroupId => "kiln_lindex".into(),
        Builtin::SubgroupSize => "1u".into(),
        Builtin::SubgroupLane => "0u".into(),
    }
}

/// The loops in `b`, nested ones included.
fn count_loops(b: &Block) -> u32 {
    b.0.iter()
        .map(|s| match s {
            Stmt::Loop { body, continuing } => 1 + count_loops(body) + count_loops(continuing),
            Stmt::If { accept, reject, .. } => count_loops(accept) + count_loops(reject),
            _ => 0,
        })
        .sum()
}

fn leaves_block(s: &Stmt) -> bool {
    match s {
        Stmt::Break | Stmt::Continue | Stmt::Return(_) => true,
        Stmt::If { accept, reject, .. } => {
            accept.0.iter().any(leaves_block) || reject.0.iter().any(leaves_block)
        }
        _ => false,
    }
}

struct Vals {
    pre: Vec<String>,
    comps: Vec<String>,
    call_struct: Option<String>,
}

impl Vals {
    fn new(comps: Vec<String>) -> Vals {
        Vals {
            pre: Vec::new(),
            comps,
            call_struct: None,
        }
    }

    fn one(s: String) -> Vals {
        Vals::new(vec![s])
    }
}

/// The typed body a writer walks.
type Cx<'a> = TypedBody<'a>;

/// Words WGSL reserves or gives a meaning to (keywords, reserved words, predeclared types and
/// builtin functions kiln's shaders call).
const RESERVED: &[&str] = &[
    "alias",
    "break",
    "case",
    "const",
    "const_assert",
    "continue",
    "continuing",
    "default",
    "diagnostic",
    "discard",
    "else",
    "enable",
    "false",
    "fn",
    "for",
    "if",
    "let",
    "loop",
    "override",
    "requires",
    "return",
    "struct",
    "switch",
    "true",
    "var",
    "while",
    "array",
    "atomic",
    "bool",
    "f16",
    "f32",
    "f64",
    "i32",
    "i64",
    "u32",
    "u64",
    "mat2x2",
    "mat3x3",
    "mat4x4",
    "ptr",
    "sampler",
    "vec2",
    "vec3",
    "vec4",
    "texture_2d",
    "NULL",
    "Self",
    "abstract",
    "active",
    "alignas",
    "alignof",
    "as",
    "asm",
    "asm_fragment",
    "async",
    "attribute",
    "auto",
    "await",
    "become",
    "binding_array",
    "cast",
    "catch",
    "class",
    "co_await",
    "co_return",
    "co_yield",
    "coherent",
    "column_major",
    "common",
    "compile",
    "compile_fragment",
    "concept",
    "const_cast",
    "consteval",
    "constexpr",
    "constinit",
    "crate",
    "debugger",
    "decltype",
    "delete",
    "demote",
    "demote_to_helper",
    "do",
    "dynamic_cast",
    "enum",
    "explicit",
    "export",
    "extends",
    "extern",
    "external",
    "fallthrough",
    "filter",
    "final",
    "finally",
    "friend",
    "from",
    "fxgroup",
    "get",
    "goto",
    "groupshared",
    "highp",
    "impl",
    "implements",
    "import",
    "inline",
    "instanceof",
    "interface",
    "layout",
    "lowp",
    "macro",
    "macro_rules",
    "match",
    "mediump",
    "meta",
    "mod",
    "module",
    "move",
    "mut",
    "mutable",
    "namespace",
    "new",
    "nil",
    "noexcept",
    "noinline",
    "nointerpolation",
    "non_coherent",
    "noncoherent",
    "noperspective",
    "null",
    "nullptr",
    "of",
    "operator",
    "package",
    "packoffset",
    "partition",
    "pass",
    "patch",
    "pixelfragment",
    "precise",
    "precision",
    "premerge",
    "priv",
    "protected",
    "pub",
    "public",
    "readonly",
    "ref",
    "regardless",
    "register",
    "reinterpret_cast",
    "require",
    "resource",
    "restrict",
    "self",
    "set",
    "shared",
    "sizeof",
    "smooth",
    "snorm",
    "static",
    "static_assert",
    "static_cast",
    "std",
    "subroutine",
    "super",
    "target",
    "template",
    "this",
    "thread_local",
    "throw",
    "trait",
    "try",
    "type",
    "typedef",
    "typeid",
    "typename",
    "typeof",
    "union",
    "unless",
    "unorm",
    "unsafe",
    "unsized",
    "use",
    "using",
    "varying",
    "virtual",
    "volatile",
    "wgsl",
    "where",
    "with",
    "writeonly",
    "yield",
    "abs",
    "acos",
    "asin",
    "atan",
    "atan2",
    "bitcast",
    "ceil",
    "cos",
    "cosh",
    "exp",
    "exp2",
    "floor",
    "fma",
    "frexp",
    "ldexp",
    "log",
    "log2",
    "max",
    "min",
    "pow",
    "select",
    "sign",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
];

/// A user-chosen name made safe in WGSL: reserved names, names with a prefix kiln or WGSL
/// reserve, and names shaped like kiln's own get a trailing `_`; so do names already ending
/// in `_`, so the renaming never maps two names to one (`var` becomes `var_`, a parameter
/// named `var_` becomes `var__`).
fn safe(name: &str) -> String {
    let prefixed = ["kiln_", "__", "atomic", "workgroup", "storage", "subgroup"]
        .iter()
        .any(|p| name.starts_with(p));
    let temp_like =
        name.starts_with('t') && name[1..].chars().all(|c| c.is_ascii_digit() || c == '_');
    let companion = name.ends_with("_len") || name.ends_with("_r") || name.ends_with("_b");
    if RESERVED.contains(&name) || prefixed || temp_like || companion || name.ends_with('_') {
        format!("{name}_")
    } else {
        name.to_string()
    }
}
