//! Native code: intrinsics, calls of a function of the target language (a built-in, or one
//! the user wrote and the generated program includes) where the target has a binding, with
//! the intrinsic's Rust body run everywhere else.
//!
//! A kernel lists its intrinsics in [`Kernel::natives`]; a [`Stmt::Native`] calls one with
//! [`NativeArg`]s and holds the Rust body as its fallback block. Everything about them is in
//! the kernel, source text included, so the structural hash (the cache key) changes with any
//! change to a binding.

use crate::ir::*;
use crate::types::Type;
use crate::validate::is_identifier;

/// The languages an intrinsic may bind a function of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NativeTarget {
    /// CUDA C++ (NVRTC).
    Cuda,
    /// OpenCL C.
    OpenCl,
    /// WGSL (and the MSL, GLSL, HLSL and SPIR-V naga makes from it).
    Wgsl,
}

impl NativeTarget {
    /// Every target.
    pub const ALL: [NativeTarget; 3] =
        [NativeTarget::Cuda, NativeTarget::OpenCl, NativeTarget::Wgsl];

    /// Its name in `#[kiln::intrinsic(..)]`: `cuda`, `opencl` or `wgsl`.
    pub fn name(self) -> &'static str {
        match self {
            NativeTarget::Cuda => "cuda",
            NativeTarget::OpenCl => "opencl",
            NativeTarget::Wgsl => "wgsl",
        }
    }
}

/// The function an intrinsic calls in one target language.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NativeCode {
    /// The function's name: a built-in's (`tgammaf`), or one `source` defines.
    pub name: String,
    /// Source text the generated program includes before kiln's own functions (once, however
    /// many intrinsics give the same text); `None` for a built-in.
    pub source: Option<String>,
}

/// An intrinsic: a function with a binding in some target languages. Parameters are values
/// (scalars, and structs of scalars and structs) or buffers of scalars (views; not on WGSL,
/// whose functions cannot take storage pointers).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Native {
    /// The Rust function's name, for listings and messages.
    pub name: String,
    /// Its parameters: `Value` or `Buffer` (`Read` for a `View`, `ReadWrite` for a `ViewMut`).
    pub params: Vec<Param>,
    /// What it returns, if anything.
    pub result: Option<Type>,
    /// The CUDA C++ function.
    pub cuda: Option<NativeCode>,
    /// The OpenCL C function.
    pub opencl: Option<NativeCode>,
    /// The WGSL function.
    pub wgsl: Option<NativeCode>,
}

impl Native {
    /// The function `target` calls, where the intrinsic binds one.
    pub fn code(&self, target: NativeTarget) -> Option<&NativeCode> {
        match target {
            NativeTarget::Cuda => self.cuda.as_ref(),
            NativeTarget::OpenCl => self.opencl.as_ref(),
            NativeTarget::Wgsl => self.wgsl.as_ref(),
        }
    }

    /// Each target the intrinsic binds, with its function.
    pub fn bindings(&self) -> impl Iterator<Item = (NativeTarget, &NativeCode)> {
        NativeTarget::ALL
            .into_iter()
            .filter_map(|t| self.code(t).map(|c| (t, c)))
    }
}

/// Index of an intrinsic in [`Kernel::natives`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NativeId(pub u32);

/// An argument of a native call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NativeArg {
    /// A value computed before the call.
    Value(Handle),
    /// A buffer parameter of the kernel, for a buffer parameter of the intrinsic.
    Memory(Memory),
}

/// A call of intrinsic `native`: where the target binds it, the generated source calls that
/// function and assigns its result to `result`; everywhere else `fallback` runs (the Rust
/// body, which assigns `result` itself).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NativeCall {
    /// The intrinsic.
    pub native: NativeId,
    /// One argument per parameter.
    pub args: Vec<NativeArg>,
    /// The local that receives the result, for an intrinsic that returns one.
    pub result: Option<LocalId>,
    /// The Rust body: statements that may not leave the call (no `break`, `continue` or
    /// `return` out of it).
    pub fallback: Block,
}

impl Kernel {
    /// Whether some intrinsic of the kernel has a binding in `target`.
    pub fn calls_native(&self, target: NativeTarget) -> bool {
        self.natives.iter().any(|n| n.code(target).is_some())
    }

    /// The distinct source texts of the intrinsics bound in `target`, in the order of
    /// [`Kernel::natives`].
    pub fn native_sources(&self, target: NativeTarget) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for n in &self.natives {
            if let Some(s) = n.code(target).and_then(|c| c.source.as_deref()) {
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out
    }

    /// The names generated source keeps for `target`'s native code: the functions it binds
    /// and the struct types its intrinsics take or return. User names equal to one are
    /// renamed by the writers.
    pub fn native_names(&self, target: NativeTarget) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for n in self.natives.iter().filter(|n| n.code(target).is_some()) {
            if let Some(c) = n.code(target) {
                out.push(&c.name);
            }
            for st in native_structs(n) {
                out.push(&st.name);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// `kernel` with each native call replaced by its Rust body (the statements of its fallback,
/// in its place), in the body and in every device function: what a target without bindings
/// (the CPU) compiles. Handles and locals are unchanged, so the kernel's
/// [`KernelInfo`](crate::KernelInfo) holds for it.
pub fn native_fallbacks(kernel: &Kernel) -> Kernel {
    fn splice(b: &Block) -> Block {
        let mut out = Vec::with_capacity(b.0.len());
        for s in &b.0 {
            match s {
                Stmt::Native(call) => out.extend(splice(&call.fallback).0),
                other => out.push(other.map_nested(&mut splice)),
            }
        }
        Block(out)
    }
    let mut k = kernel.clone();
    k.body.block = splice(&kernel.body.block);
    for (f, original) in k.functions.iter_mut().zip(&kernel.functions) {
        f.body.block = splice(&original.body.block);
    }
    k
}

/// The struct types `native`'s parameters and result contain, each after the structs its
/// fields contain, without repeats.
pub fn native_structs(native: &Native) -> Vec<&crate::types::StructType> {
    fn visit<'t>(t: &'t Type, out: &mut Vec<&'t crate::types::StructType>) {
        if let Type::Struct(st) = t {
            for f in &st.fields {
                visit(&f.ty, out);
            }
            if !out.iter().any(|s| **s == **st) {
                out.push(st);
            }
        }
    }
    let mut out = Vec::new();
    for p in &native.params {
        if let ParamKind::Value(t) = &p.kind {
            visit(t, &mut out);
        }
    }
    if let Some(t) = &native.result {
        visit(t, &mut out);
    }
    out
}

/// Why intrinsic `native` of `kernel` is not well formed, if it is not.
pub(crate) fn check_native(kernel: &Kernel, native: &Native) -> Result<(), String> {
    if !is_identifier(&native.name) {
        return Err(format!(
            "intrinsic name `{}` is not an identifier",
            native.name
        ));
    }
    if native.bindings().next().is_none() {
        return Err("an intrinsic binds a function in at least one target".into());
    }
    for (i, p) in native.params.iter().enumerate() {
        if !is_identifier(&p.name) || native.params[..i].iter().any(|q| q.name == p.name) {
            return Err(format!(
                "parameter `{}` is not a distinct identifier",
                p.name
            ));
        }
        match &p.kind {
            ParamKind::Value(t) => {
                native_value(t).map_err(|m| format!("parameter `{}`: {m}", p.name))?
            }
            ParamKind::Buffer { elem, access } => {
                if elem.as_scalar().is_none() {
                    return Err(format!(
                        "parameter `{}`: native code takes views of scalars, not of {elem}",
                        p.name
                    ));
                }
                if *access == Access::Write {
                    return Err(format!(
                        "parameter `{}`: a view for native code is read or read-write",
                        p.name
                    ));
                }
                if native.wgsl.is_some() {
                    return Err(format!(
                        "parameter `{}`: WGSL functions cannot take views (storage pointers as \
                         arguments need WGSL's unrestricted_pointer_parameters, which naga does \
                         not implement); leave out the wgsl binding and wgpu runs the Rust body",
                        p.name
                    ));
                }
            }
        }
    }
    if let Some(t) = &native.result {
        native_value(t).map_err(|m| format!("result: {m}"))?;
    }
    for (target, code) in native.bindings() {
        let target = target.name();
        if let Some(why) = reserved_shape(&code.name) {
            return Err(format!(
                "the {target} binding `{}` {why}",
                code.name.escape_debug()
            ));
        }
        if kernel.functions.iter().any(|g| g.name == code.name) {
            return Err(format!(
                "the {target} binding `{}` is also the name of a device function; name the Rust \
                 function differently",
                code.name
            ));
        }
    }
    // Native code names a struct type by its Rust name: two types of one name would be one,
    // and writers keep user names ending in `_` for their renaming.
    let mine = native_structs(native);
    if let Some(st) = mine.iter().find(|st| st.name.ends_with('_')) {
        return Err(format!(
            "struct `{}` reaches native code, where type names may not end in `_`",
            st.name
        ));
    }
    for other in &kernel.natives {
        for st in native_structs(other) {
            if let Some(m) = mine.iter().find(|m| m.name == st.name && ***m != *st) {
                return Err(format!(
                    "two struct types named `{}` reach native code; rename one",
                    m.name
                ));
            }
        }
    }
    Ok(())
}

/// Why `name` cannot name a native function, if it cannot: not an identifier, or shaped like
/// a name kiln's writers make (`kiln_..`, `t12`, `x_len`, `x_3`, `x_`), with which it could
/// collide.
fn reserved_shape(name: &str) -> Option<&'static str> {
    let last = name.rsplit('_').next().unwrap_or("");
    let temp_like = name.starts_with('t')
        && name[1..].starts_with(|c: char| c.is_ascii_digit())
        && name[1..].chars().all(|c| c.is_ascii_digit() || c == '_');
    if !is_identifier(name) {
        Some("is not an identifier")
    } else if name.starts_with("kiln_") || temp_like {
        Some("has the shape of a name kiln generates (`kiln_..`, `t12`); name it otherwise")
    } else if name.ends_with('_')
        || (name.contains('_') && (last == "len" || last.chars().all(|c| c.is_ascii_digit())))
    {
        Some("ends like a name kiln generates (`_`, `_len`, `_3`); name it otherwise")
    } else {
        None
    }
}

/// Why `t` cannot be passed to or returned from native code, if it cannot: scalars and
/// structs of them (nested structs too) can.
fn native_value(t: &Type) -> Result<(), String> {
    match t {
        Type::Scalar(_) => Ok(()),
        Type::Struct(st) => st.fields.iter().try_for_each(|f| native_value(&f.ty)),
        other => Err(format!(
            "native code takes scalars and structs, not {other}; pass its components"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_shaped_like_generated_ones_cannot_be_bindings() {
        for bad in [
            "kiln_f", "t12", "t3_0", "x_", "x_len", "x_3", "1x", "a-b", "",
        ] {
            assert!(reserved_shape(bad).is_some(), "{bad}");
        }
        for good in [
            "tgammaf", "t", "tan2", "hypot", "my_clamp", "x3", "lenient", "v_2d",
        ] {
            assert_eq!(reserved_shape(good), None, "{good}");
        }
    }
}
