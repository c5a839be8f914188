//! # kiln-writer: the kit kiln's source writers share
//!
//! The C-family writer (`kiln-c`: OpenCL C, CUDA C) and the WGSL writer (`kiln-wgsl`) differ
//! in spelling, not in what they write. What they share lives here, after naga's `back`
//! module:
//!
//! * [`Namer`]: user names made safe in a target language, by one injective rule over each
//!   language's reserved names.
//! * [`Helpers`]: the helper functions a kernel's source needs, each written once.
//! * [`components`] and the [`Syntax`] trait: the walk over an expression's components, with
//!   each language's spelling of the operations.
//! * [`common_line`]: the statements every target writes alike; [`DeviceFunction`]: a device
//!   function with its typed body and result, as writers take it.
//! * [`native_struct_types`], [`nested_value`] and [`component_paths`]: the struct types
//!   native code sees, and a flattened value as one of them and back.
//! * [`rules`]: kiln's semantic rules where targets differ (integer division, shifts,
//!   saturating casts, which operators are plain infix, which library math functions are
//!   good enough), stated once.
//! * [`WriteError`], and the names of flattened components and temporaries.

#![deny(missing_docs)]
mod exprs;
mod function;
mod helpers;
mod names;
mod native;
pub mod rules;
mod stmts;

pub use exprs::{components, AtomicCall, StructCall, SubgroupCall, Syntax, Written};
pub use function::DeviceFunction;
pub use helpers::Helpers;
pub use names::{component_name, temp_name, Namer};
pub use native::{bound_native, component_paths, native_struct_types, nested_value};
pub use stmts::common_line;

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
