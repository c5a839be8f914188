//! Calls of intrinsics ([`Stmt::Native`]): what `#[kiln::intrinsic]` functions build.

use super::*;

/// An argument of [`native_call`]: a value, or a view (a buffer parameter of the kernel).
#[derive(Clone, Debug)]
pub enum NativeInput {
    /// A value.
    Value(AnyVal),
    /// A buffer parameter.
    View(Memory),
}

impl<T: IrType> From<Val<T>> for NativeInput {
    fn from(v: Val<T>) -> NativeInput {
        NativeInput::Value(v.erase())
    }
}

/// A Rust type an intrinsic's parameter may have, as the intrinsic's IR parameter: every
/// value type here (`f32`, a `#[derive(kiln::Value)]` struct); kiln adds its views.
pub trait NativeParamType {
    /// The parameter's kind.
    fn native_param() -> ParamKind;
}

impl<T: IrType> NativeParamType for T {
    fn native_param() -> ParamKind {
        ParamKind::Value(T::ir_type())
    }
}

/// Calls intrinsic `native` with `args` (one per parameter) in the kernel being built and
/// returns its result: the target's function where it binds one, and elsewhere the value of
/// `fallback`, whose statements are built into the call as its Rust body. A mismatch of
/// arguments and parameters is reported by the validator.
pub fn native_call<R: IrType>(
    native: Native,
    args: &[NativeInput],
    fallback: impl FnOnce() -> Val<R>,
) -> Val<R> {
    let (local, owner) = new_local(&format!("{}_result", native.name), R::ir_type());
    let result = Var::<R> {
        local,
        owner,
        _t: PhantomData,
    };
    push_native(native, args, Some(local), || result.set(fallback()));
    result.get()
}

/// [`native_call`] for an intrinsic that returns nothing: `fallback` builds its Rust body.
pub fn native_effect(native: Native, args: &[NativeInput], fallback: impl FnOnce()) {
    push_native(native, args, None, fallback);
}

fn push_native(
    native: Native,
    args: &[NativeInput],
    result: Option<LocalId>,
    fallback: impl FnOnce(),
) {
    let fallback = nested(fallback);
    let Some(id) = with_kernel(|k| {
        let i = match k.natives.iter().position(|n| *n == native) {
            Some(i) => i,
            None => {
                k.natives.push(native);
                k.natives.len() - 1
            }
        };
        NativeId(i as u32)
    }) else {
        return;
    };
    let mut deps = Vec::new();
    let args = args
        .iter()
        .map(|a| match a {
            NativeInput::Value(v) => {
                deps.push(v.raw);
                NativeArg::Value(v.raw.h)
            }
            NativeInput::View(m) => NativeArg::Memory(*m),
        })
        .collect();
    push_stmt(
        Stmt::Native(NativeCall {
            native: id,
            args,
            result,
            fallback,
        }),
        &deps,
    );
}
