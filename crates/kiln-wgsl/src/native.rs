//! Native code in WGSL: the struct types and source texts of the intrinsics bound in WGSL,
//! and their calls.
//!
//! A value argument arrives as its WGSL register type (8- and 16-bit integers as `i32`/`u32`,
//! `f16` as an `f32` holding the value), a struct as a WGSL struct of the Rust name whose
//! fields carry the Rust field names (made safe like every user name). A result narrower than
//! its register is brought back into its type's range (`u8` masked, `f16` rounded). WGSL
//! functions cannot take views; the validator refuses a WGSL binding of an intrinsic that
//! does.

use crate::*;
use std::fmt::Write as _;

impl Writer {
    /// What the module defines for native code before kiln's own functions: each struct type
    /// the bound intrinsics take or return, then each distinct source text.
    pub(crate) fn native_prelude(&self, k: &Kernel) -> String {
        let mut out = String::new();
        for st in native_struct_types(k, NativeTarget::Wgsl) {
            let fields: Vec<String> = st
                .fields
                .iter()
                .map(|f| format!("{}: {}", NAMER.safe(&f.name), value_type(&f.ty)))
                .collect();
            let _ = writeln!(out, "struct {} {{ {} }}", st.name, fields.join(", "));
        }
        for source in k.native_sources(NativeTarget::Wgsl) {
            let _ = writeln!(out, "// native code\n{}", source.trim_end());
        }
        out
    }

    /// A native call: the bound function, with its result assigned to the result local; the
    /// Rust body where the intrinsic has no WGSL binding.
    pub(crate) fn native_call(
        &mut self,
        cx: &Cx,
        call: &NativeCall,
        out: &mut String,
        depth: usize,
    ) -> W<()> {
        let (native, code) = bound_native(cx.kernel, call, NativeTarget::Wgsl)?;
        let Some(code) = code else {
            return self.block(cx, &call.fallback, out, depth);
        };
        let pad = "  ".repeat(depth);
        let mut args = Vec::new();
        for arg in &call.args {
            let NativeArg::Value(h) = arg else {
                return err(format!(
                    "intrinsic `{}` passes a view to WGSL, whose functions take no storage pointers",
                    native.name
                ));
            };
            let ty = cx.ty(*h)?;
            let n = ty.flatten().len();
            let mut comps = (0..n).map(|c| temp_name(*h, c, &ty));
            args.push(nested_value(&ty, &mut comps, &|st, fields| {
                format!("{}({})", st.name, fields.join(", "))
            }));
        }
        let text = format!("{}({})", code.name, args.join(", "));
        let (Some(local), Some(ty)) = (call.result, &native.result) else {
            let _ = writeln!(out, "{pad}{text};");
            return Ok(());
        };
        self.native_calls += 1;
        let result = format!("kiln_native{}_result", self.native_calls);
        let name = cx.local_name(local.0 as usize);
        let paths = component_paths(ty, &|f| NAMER.safe(f));
        let mut line = format!("let {result} = {text};");
        for (c, (path, s)) in paths.iter().enumerate() {
            let v = self.cast(&format!("{result}{path}"), reg(*s), *s);
            let _ = write!(line, " {} = {v};", component_name(&name, c, paths.len()));
        }
        let _ = writeln!(out, "{pad}{line}");
        Ok(())
    }
}

/// The WGSL type of a value native code takes or returns: a scalar's register type or a
/// struct's name.
fn value_type(ty: &Type) -> String {
    match ty {
        Type::Struct(st) => st.name.clone(),
        other => rt(other.as_scalar().unwrap_or(ScalarType::U32)).to_string(),
    }
}
