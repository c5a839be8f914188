//! Statements every C-like target writes alike (assignments to locals and their bounds
//! check, jumps, returns), as whole lines without the indentation.

use crate::{component_name, temp_name, WriteError};
use kiln_ir::{Handle, LocalId, ScalarType, Stmt, Type, TypedBody};

/// The line for `s`, one of the statements every target writes the same way: `LocalSet`,
/// `LocalIndexSet`, `Break`, `Continue` and `Return`. A return of several components
/// returns the function's result struct, which `struct_return(function, components)` spells
/// (`components` joined by `, `). Fails for any other statement, and for an index store into
/// a local that is not an array.
pub fn common_line(
    cx: &TypedBody,
    s: &Stmt,
    struct_return: impl Fn(&str, &str) -> String,
) -> Result<String, WriteError> {
    Ok(match s {
        Stmt::LocalSet { local, value } => local_set(cx, *local, *value),
        Stmt::LocalIndexSet {
            local,
            index,
            value,
        } => local_index_set(cx, *local, *index, *value)?,
        Stmt::Break => "break;".into(),
        Stmt::Continue => "continue;".into(),
        Stmt::Return(None) => "return;".into(),
        Stmt::Return(Some(h)) => {
            let ty = cx.ty(*h)?;
            let n = ty.flatten().len();
            let parts: Vec<String> = (0..n).map(|c| temp_name(*h, c, &ty)).collect();
            match n {
                1 => format!("return {};", parts[0]),
                _ => struct_return(&cx.function_name(), &parts.join(", ")),
            }
        }
        _ => return Err(WriteError("a statement each target writes itself".into())),
    })
}

/// `local = value;`, one assignment per component.
fn local_set(cx: &TypedBody, local: LocalId, value: Handle) -> String {
    let ty = &cx.body.locals[local.0 as usize].ty;
    let n = ty.flatten().len();
    let name = cx.local_name(local.0 as usize);
    (0..n)
        .map(|c| {
            format!(
                "{} = {};",
                component_name(&name, c, n),
                temp_name(value, c, ty)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `local[index] = value;` for each component's array, inside a bounds check unless the
/// index is known to be in bounds (out-of-bounds stores are skipped).
fn local_index_set(
    cx: &TypedBody,
    local: LocalId,
    index: Handle,
    value: Handle,
) -> Result<String, WriteError> {
    let Type::Array(e, n) = &cx.body.locals[local.0 as usize].ty else {
        return Err(WriteError("not an array local".into()));
    };
    let comps = e.flatten().len();
    let name = cx.local_name(local.0 as usize);
    let i = temp_name(index, 0, &Type::Scalar(ScalarType::U32));
    let parts: Vec<String> = (0..comps)
        .map(|c| {
            format!(
                "{}[{i}] = {};",
                component_name(&name, c, comps),
                temp_name(value, c, e)
            )
        })
        .collect();
    Ok(match cx.in_bounds.local_store(local, index, value) {
        true => parts.join(" "),
        false => format!("if ({i} < {n}u) {{ {} }}", parts.join(" ")),
    })
}
