//! What the writers share for native code: the struct types it sees, and how a value's
//! flattened components become one value of those types and back.

use crate::WriteError;
use kiln_ir::{Kernel, Native, NativeCall, NativeCode, NativeTarget, ScalarType, StructType, Type};

/// The intrinsic `call` calls, with its function in `target` (`None` where `target` does not
/// bind it and the writer writes the Rust body instead). Fails for a call of an intrinsic
/// `kernel` does not have.
pub fn bound_native<'k>(
    kernel: &'k Kernel,
    call: &NativeCall,
    target: NativeTarget,
) -> Result<(&'k Native, Option<&'k NativeCode>), WriteError> {
    let native = kernel
        .natives
        .get(call.native.0 as usize)
        .ok_or_else(|| WriteError(format!("no intrinsic {}", call.native.0)))?;
    Ok((native, native.code(target)))
}

/// The struct types that the intrinsics `kernel` binds in `target` take or return, each
/// after the struct types its fields contain, without repeats: the order a program defines
/// them in.
pub fn native_struct_types(kernel: &Kernel, target: NativeTarget) -> Vec<&StructType> {
    let mut out: Vec<&StructType> = Vec::new();
    for n in kernel.natives.iter().filter(|n| n.code(target).is_some()) {
        for st in kiln_ir::native_structs(n) {
            if !out.contains(&st) {
                out.push(st);
            }
        }
    }
    out
}

/// The components of a value of type `ty`, in flattened order, as one value: a scalar is its
/// component, a struct `build(its type, its fields' values)` (nested structs built first).
/// `components` yields at least as many components as `ty` has.
pub fn nested_value(
    ty: &Type,
    components: &mut impl Iterator<Item = String>,
    build: &impl Fn(&StructType, Vec<String>) -> String,
) -> String {
    match ty {
        Type::Struct(st) => {
            let fields = st
                .fields
                .iter()
                .map(|f| nested_value(&f.ty, components, build))
                .collect();
            build(st, fields)
        }
        _ => components.next().unwrap_or_default(),
    }
}

/// Where each flattened component of a value of type `ty` lies in it, in flattened order: the
/// field path from the value (`.price`, `.inner.x`; empty for a scalar) with the component's
/// type. `field` spells a field's name in the target language.
pub fn component_paths(ty: &Type, field: &impl Fn(&str) -> String) -> Vec<(String, ScalarType)> {
    let mut out = Vec::new();
    paths_into(ty, String::new(), field, &mut out);
    out
}

fn paths_into(
    ty: &Type,
    at: String,
    field: &impl Fn(&str) -> String,
    out: &mut Vec<(String, ScalarType)>,
) {
    match ty {
        Type::Struct(st) => {
            for f in &st.fields {
                paths_into(&f.ty, format!("{at}.{}", field(&f.name)), field, out);
            }
        }
        other => {
            for (s, _) in other.flatten() {
                out.push((at.clone(), s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::Field;
    use std::sync::Arc;

    fn nested() -> Type {
        let inner = Type::Struct(Arc::new(StructType {
            name: "Inner".into(),
            fields: vec![
                Field {
                    name: "a".into(),
                    ty: Type::Scalar(ScalarType::U8),
                },
                Field {
                    name: "float".into(),
                    ty: Type::Scalar(ScalarType::F32),
                },
            ],
        }));
        Type::Struct(Arc::new(StructType {
            name: "Outer".into(),
            fields: vec![
                Field {
                    name: "x".into(),
                    ty: Type::Scalar(ScalarType::I64),
                },
                Field {
                    name: "inner".into(),
                    ty: inner,
                },
            ],
        }))
    }

    /// Paths and nesting follow `Type::flatten`'s order, so component `c` of a flattened
    /// value is the `c`-th path and the `c`-th leaf of the nested value.
    #[test]
    fn paths_and_nested_values_follow_the_flattened_order() {
        let ty = nested();
        let paths = component_paths(&ty, &|f| format!("{f}_"));
        let want = [
            (".x_", ScalarType::I64),
            (".inner_.a_", ScalarType::U8),
            (".inner_.float_", ScalarType::F32),
        ];
        assert_eq!(paths.len(), ty.flatten().len());
        for ((p, s), (wp, ws)) in paths.iter().zip(want) {
            assert_eq!((p.as_str(), *s), (wp, ws));
        }
        let mut comps = ["c0", "c1", "c2"].into_iter().map(String::from);
        let v = nested_value(&ty, &mut comps, &|st, f| {
            format!("{}({})", st.name, f.join(", "))
        });
        assert_eq!(v, "Outer(c0, Inner(c1, c2))");
        assert_eq!(
            component_paths(&Type::Scalar(ScalarType::F32), &|f| f.into()).len(),
            1
        );
    }
}
