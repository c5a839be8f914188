//! What every source writer (C-family, WGSL) shares: its error type, the renaming of user
//! names into names safe in the target language, and the names of flattened components.

use crate::{Function, Handle, Kernel, Type};

/// Why a kernel could not be written in a target language (or translated to another).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteError(pub String);

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WriteError {}

impl From<String> for WriteError {
    fn from(message: String) -> WriteError {
        WriteError(message)
    }
}

impl Kernel {
    /// A copy of the kernel with every user-chosen name (kernel, parameters, shared arrays,
    /// locals, device functions and their parameters and locals) passed through `safe`.
    pub fn with_names(&self, safe: impl Fn(&str) -> String) -> Kernel {
        let mut k = self.clone();
        k.name = safe(&k.name);
        for p in &mut k.params {
            p.name = safe(&p.name);
        }
        for sh in &mut k.shared {
            sh.name = safe(&sh.name);
        }
        for l in &mut k.body.locals {
            l.name = safe(&l.name);
        }
        for f in &mut k.functions {
            f.name = safe(&f.name);
            for p in &mut f.params {
                p.name = safe(&p.name);
            }
            for l in &mut f.body.locals {
                l.name = safe(&l.name);
            }
        }
        k
    }
}

/// The name of component `c` of a value named `base` that flattens into `components`
/// scalars: `base` itself when there is one, `base_c` otherwise.
pub fn component_name(base: &str, c: usize, components: usize) -> String {
    if components == 1 {
        base.to_string()
    } else {
        format!("{base}_{c}")
    }
}

/// The name of component `c` of the temporary holding expression `h` of type `ty` (`t12`,
/// `t12_0`, ...).
pub fn temp_name(h: Handle, c: usize, ty: &Type) -> String {
    component_name(&format!("t{}", h.0), c, ty.flatten().len())
}

/// The body of an intrinsic `f` bound to the backend function `native`: a statement that
/// returns `native` applied to the parameters (scalars, as the validator checks), and the
/// function's closing brace.
pub fn intrinsic_body(f: &Function, native: &str) -> String {
    let args: Vec<String> = f
        .params
        .iter()
        .map(|p| component_name(&p.name, 0, 1))
        .collect();
    format!("  return {native}({});\n}}\n", args.join(", "))
}
