//! Native code in C: the struct types and source texts of the intrinsics the dialect binds,
//! and their calls.
//!
//! A value argument arrives as the dialect's register type (`bool` as `bool`, `f16` as a
//! `float` holding the value), a struct as a `typedef struct` of the Rust name whose fields
//! carry the Rust field names (made safe like every user name), and a view as a pointer to
//! its elements in memory (`bool` as `uchar`, `f16` as its 16 bits; `const` for a `View`)
//! followed by its `uint` element count. An `f16` result is rounded to binary16.

use crate::*;

use std::fmt::Write as _;

impl Writer {
    /// What the program defines for native code before kiln's own functions: each struct
    /// type the bound intrinsics take or return, then each distinct source text.
    pub(crate) fn native_prelude(&self, k: &Kernel) -> String {
        let target = self.d.native_target();
        let mut out = String::new();
        for st in native_struct_types(k, target) {
            let fields: Vec<String> = st
                .fields
                .iter()
                .map(|f| format!("{} {};", self.value_type(&f.ty), NAMER.safe(&f.name)))
                .collect();
            let _ = writeln!(
                out,
                "typedef struct {{ {} }} {};",
                fields.join(" "),
                st.name
            );
        }
        for source in k.native_sources(target) {
            let _ = writeln!(out, "// native code\n{}", source.trim_end());
        }
        out
    }

    /// The C type of a value native code takes or returns: a scalar's register type or a
    /// struct's name.
    fn value_type(&self, ty: &Type) -> String {
        match ty {
            Type::Struct(st) => st.name.clone(),
            other => self
                .t(other.as_scalar().unwrap_or(ScalarType::U32))
                .to_string(),
        }
    }

    /// A native call: the bound function, with its result assigned to the result local; the
    /// Rust body where the dialect has no binding.
    pub(crate) fn native_call(
        &mut self,
        cx: &Cx,
        call: &NativeCall,
        out: &mut String,
        depth: usize,
    ) -> W<()> {
        let (native, code) = bound_native(cx.kernel, call, self.d.native_target())?;
        let Some(code) = code else {
            return self.block(cx, &call.fallback, out, depth);
        };
        let pad = "  ".repeat(depth);
        self.native_calls += 1;
        let id = self.native_calls;
        let mut args = Vec::new();
        for (i, arg) in call.args.iter().enumerate() {
            match arg {
                NativeArg::Value(h) => {
                    let ty = cx.ty(*h)?;
                    let n = ty.flatten().len();
                    let mut comps = (0..n).map(|c| temp_name(*h, c, &ty));
                    let value = nested_value(&ty, &mut comps, &|_, fields| {
                        format!("{{ {} }}", fields.join(", "))
                    });
                    if let Type::Struct(st) = &ty {
                        let name = format!("kiln_native{id}_arg{i}");
                        let _ = writeln!(out, "{pad}const {} {name} = {value};", st.name);
                        args.push(name);
                    } else {
                        args.push(value);
                    }
                }
                NativeArg::Memory(m) => {
                    let (name, _) = mem_info(cx.kernel, *m)?;
                    args.push(format!("{name}, {name}_len"));
                }
            }
        }
        let text = format!("{}({})", code.name, args.join(", "));
        let (Some(local), Some(ty)) = (call.result, &native.result) else {
            let _ = writeln!(out, "{pad}{text};");
            return Ok(());
        };
        let name = cx.local_name(local.0 as usize);
        let paths = component_paths(ty, &|f| NAMER.safe(f));
        let result = match ty {
            Type::Struct(st) => {
                let r = format!("kiln_native{id}_result");
                let _ = writeln!(out, "{pad}const {} {r} = {text};", st.name);
                r
            }
            _ => text,
        };
        let mut sets = Vec::new();
        for (c, (path, s)) in paths.iter().enumerate() {
            let v = format!("{result}{path}");
            let v = match s {
                ScalarType::F16 => self.round_half(&v),
                _ => v,
            };
            sets.push(format!("{} = {v};", component_name(&name, c, paths.len())));
        }
        let _ = writeln!(out, "{pad}{}", sets.join(" "));
        Ok(())
    }
}
