//! # kiln-ir: the one intermediate representation of kiln
//!
//! Every kiln frontend (queries, `#[kiln::kernel]`) builds a [`Kernel`] through the typed
//! builder ([`Kernel::build`], [`Val`]); every backend reads it. A kernel has buffer and value
//! parameters, shared arrays, device functions and a body of structured statements over an
//! expression arena. [`validate`] checks it, [`print_kernel`] lists it as text and
//! [`kernel_hash`] gives the structural hash that keys the kernel caches.
//!
//! ```
//! use kiln_ir::*;
//! let k = Kernel::build("scale", |k| {
//!     let x = k.buffer::<f32>("x", Access::Read);
//!     let y = k.buffer::<f32>("y", Access::Write);
//!     let i = global_id(Axis::X);
//!     if_then(i.lt(x.len()), || y.store(i, x.load(i) * 2.0 + 1.0));
//! })
//! .unwrap();
//! assert!(print_kernel(&k).contains("store y"));
//! ```
//!
//! ## Semantics: one rule where targets differ
//!
//! The CPU backend implements these rules and is the reference; every other backend must give
//! the same results.
//!
//! * **Integer arithmetic** wraps (two's complement) on overflow: `+ - *`, negation and
//!   `abs(MIN) = MIN`.
//! * **Integer division by zero**: `x / 0 = x` and `x % 0 = 0`. **Signed `MIN / -1 = MIN`** and
//!   `MIN % -1 = 0`. Division truncates toward zero; `%` has the sign of the dividend.
//! * **Float `%`** is C's `fmod`: exact, with the sign of the dividend; `x % 0`, `inf % y` and
//!   NaN operands give NaN, and `x % inf = x` for finite `x`.
//! * **Shifts** use the shift amount modulo the bit width: `x << 33` on `u32` is `x << 1`.
//!   `>>` is arithmetic on signed types and logical on unsigned ones.
//! * **Float to integer casts** saturate: values above the target's maximum give the maximum,
//!   below the minimum give the minimum, and NaN gives 0 (Rust's `as`). Integer to integer casts
//!   truncate or extend (sign-extend from signed sources). Casts to `bool` are `x != 0`; `bool`
//!   casts to 1 or 0. Float to float casts round to nearest.
//! * **min / max with NaN**: when exactly one operand is NaN the other is returned (IEEE
//!   `minNum`/`maxNum`, Rust's `f32::min`); both NaN gives NaN. `clamp(x, lo, hi)` is
//!   `min(max(x, lo), hi)`, so `clamp(NaN, lo, hi) = lo`. Of `-0.0` and `+0.0`, min gives
//!   `-0.0` and max `+0.0`, in either order.
//! * **Out-of-bounds memory**: a load or a local-array read outside the buffer, shared array or
//!   array gives zero; a store outside is skipped; an atomic outside does nothing and gives zero.
//! * **round** rounds half away from zero; **fract(x)** is `x - trunc(x)`; **sign** returns -1,
//!   0 or 1 and returns zeros (either sign) and NaN unchanged.
//! * **Comparisons** with NaN are false, except `!=`, which is true.
//! * **NaN sign and payload**: an operation that makes a NaN may give any NaN (x86 and GPUs
//!   differ in its sign bit). `copysign(x, s)` with a NaN `s` is `|x|`, so no operation but a
//!   bitcast exposes the difference.
//! * **Locals** are zero at function entry.
//! * **Barriers** must be reached by all work items of a group or by none, and the control flow
//!   around a barrier must be the same for the whole group (as on every GPU). Barriers are
//!   allowed in the kernel body, not in device functions.
//! * **Subgroups**: an operation covers the subgroup's *active* lanes: those that exist (the
//!   last subgroup of a group whose size is not a multiple of the subgroup size has fewer),
//!   have not returned, and reached it together (the same side of every enclosing `if`).
//!   Reductions, `all`, `any` and `ballot` combine the active lanes; scans add the active
//!   lanes below the caller. A shuffle whose source lane is outside the subgroup or not
//!   active gives the caller's own value; `ballot` covers lanes 0..32. Float minimum and
//!   maximum follow the NaN and signed-zero rule above. The CPU backend has subgroups of
//!   one lane.
//! * **Atomics** are relaxed read-modify-writes on 32/64-bit integers (`f32` for add and
//!   exchange) and return the previous value.

#![deny(missing_docs)]
mod bounds;
mod build;
pub mod constants;
mod hash;
mod info;
mod inline;
mod ir;
mod native;
mod options;
mod print;
mod types;
mod validate;
mod visit;

pub use bounds::InBounds;
pub use build::*;
/// IEEE binary16, the `f16` scalar type of kernels and queries (the `half` crate's type).
pub use half::f16;
pub use hash::{kernel_hash, KernelHash};
pub use info::{BodyInfo, Features, KernelInfo, TypedBody};
pub use inline::inline_calls;
pub use ir::*;
pub use native::{
    native_fallbacks, native_structs, Native, NativeArg, NativeCall, NativeCode, NativeId,
    NativeTarget,
};
pub use options::CompileOptions;
pub use print::print_kernel;
pub use types::*;
pub use validate::{expr_types, is_identifier, operands, validate, IrError};
pub use visit::walk_stmts;
