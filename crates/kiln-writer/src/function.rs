//! A device function ready to be written.

use crate::WriteError;
use kiln_ir::{Function, Kernel, KernelInfo, Type, TypedBody};

/// A device function as a writer needs it: its index in the kernel, the function, its typed
/// body and its result type.
pub struct DeviceFunction<'a> {
    /// Its index in [`Kernel::functions`].
    pub index: usize,
    /// The function.
    pub function: &'a Function,
    /// Its body with the type of each expression.
    pub cx: TypedBody<'a>,
    /// What it returns.
    pub result: &'a Type,
}

impl<'a> DeviceFunction<'a> {
    /// Device function `index` of `kernel`, with the facts `info` (the kernel's) holds.
    /// Fails when there is no such function or when it returns nothing (device functions
    /// return a value).
    pub fn of(
        kernel: &'a Kernel,
        index: usize,
        info: &'a KernelInfo,
    ) -> Result<DeviceFunction<'a>, WriteError> {
        let function = kernel
            .functions
            .get(index)
            .ok_or_else(|| WriteError(format!("no device function #{index}")))?;
        let result = function.result.as_ref().ok_or_else(|| {
            WriteError(format!(
                "device function `{}` returns nothing",
                function.name
            ))
        })?;
        Ok(DeviceFunction {
            index,
            function,
            cx: TypedBody::of_function(kernel, index, info)?,
            result,
        })
    }
}
