//! What validation finds out about a kernel, handed to every backend so none works it out
//! again: each body's expression types and the accesses its guards prove in bounds
//! ([`KernelInfo`]), and a body with those facts as a writer walks it ([`TypedBody`]).

use crate::bounds::InBounds;
use crate::ir::*;
use crate::types::Type;
use crate::validate::expr_types;

/// What validation found about one body.
#[derive(Clone, Debug)]
pub struct BodyInfo {
    /// The type of each expression, in arena order.
    pub types: Vec<Type>,
    /// The loads and stores whose bounds check cannot fail.
    pub in_bounds: InBounds,
}

impl BodyInfo {
    /// The facts of `body`, whose expressions have `types`.
    pub(crate) fn new(body: &Body, types: Vec<Type>) -> BodyInfo {
        BodyInfo {
            in_bounds: InBounds::of(body, &types),
            types,
        }
    }
}

/// What [`crate::validate`] found about a kernel: its body's facts and each device
/// function's.
#[derive(Clone, Debug)]
pub struct KernelInfo {
    /// The kernel's own body.
    pub body: BodyInfo,
    /// Each device function's body, in [`Kernel::functions`] order.
    pub functions: Vec<BodyInfo>,
}

impl KernelInfo {
    /// The facts of a kernel a pass made from a validated one (such as
    /// [`crate::inline_calls`]), which is valid by construction: its bodies are typed, not
    /// checked again. Fails like [`expr_types`].
    pub fn typed(kernel: &Kernel) -> Result<KernelInfo, String> {
        let functions = kernel
            .functions
            .iter()
            .map(|f| {
                Ok(BodyInfo::new(
                    &f.body,
                    expr_types(kernel, &f.params, &f.body)?,
                ))
            })
            .collect::<Result<_, String>>()?;
        let types = expr_types(kernel, &kernel.params, &kernel.body)?;
        Ok(KernelInfo {
            body: BodyInfo::new(&kernel.body, types),
            functions,
        })
    }
}

/// A kernel's or device function's body with the type of each of its expressions: what a
/// source writer walks.
pub struct TypedBody<'a> {
    /// The kernel the body belongs to.
    pub kernel: &'a Kernel,
    /// The parameters the body's `Param` expressions refer to.
    pub params: &'a [Param],
    /// The body.
    pub body: &'a Body,
    /// The body's loads and stores whose bounds check cannot fail.
    pub in_bounds: &'a InBounds,
    types: &'a [Type],
}

impl<'a> TypedBody<'a> {
    /// The kernel's own body, with the facts `info` (the kernel's) holds.
    pub fn of_kernel(kernel: &'a Kernel, info: &'a KernelInfo) -> TypedBody<'a> {
        TypedBody {
            kernel,
            params: &kernel.params,
            body: &kernel.body,
            in_bounds: &info.body.in_bounds,
            types: &info.body.types,
        }
    }

    /// The body of device function `index` of `kernel`, with the facts `info` (the
    /// kernel's) holds; an error when there is no such function.
    pub fn of_function(
        kernel: &'a Kernel,
        index: usize,
        info: &'a KernelInfo,
    ) -> Result<TypedBody<'a>, String> {
        let (function, facts) = kernel
            .functions
            .get(index)
            .zip(info.functions.get(index))
            .ok_or_else(|| format!("no device function #{index}"))?;
        Ok(TypedBody {
            kernel,
            params: &function.params,
            body: &function.body,
            in_bounds: &facts.in_bounds,
            types: &facts.types,
        })
    }

    /// The type of expression `h`; an error naming it when the body has no such expression.
    pub fn ty(&self, h: Handle) -> Result<Type, String> {
        self.types
            .get(h.index())
            .cloned()
            .ok_or_else(|| format!("no expression %{}", h.0))
    }

    /// Whether this is the kernel's own body (not a device function's).
    pub fn is_kernel(&self) -> bool {
        std::ptr::eq(self.body, &self.kernel.body)
    }

    /// The name of the device function this body belongs to; empty for the kernel's body.
    pub fn function_name(&self) -> String {
        self.kernel
            .functions
            .iter()
            .find(|f| std::ptr::eq(&f.body, self.body))
            .map(|f| f.name.clone())
            .unwrap_or_default()
    }

    /// The name writers give local `i`: its declared name and its index, so locals that share
    /// a name stay apart.
    pub fn local_name(&self, i: usize) -> String {
        format!("{}_{i}", self.body.locals[i].name)
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// What `validate` returns is what typing the body again gives, and the store its guard
    /// bounds is known to be in bounds; `KernelInfo::typed` agrees without the checks.
    #[test]
    fn validation_hands_on_the_types_and_bounds_facts_it_found() {
        let k = Kernel::build("scale", |k| {
            let out = k.buffer::<f32>("out", Access::Write);
            let i = global_id(Axis::X);
            if_then(i.lt(out.len()), || out.store(i, lit(2.0f32)));
        })
        .unwrap();
        let info = validate(&k).unwrap();
        assert_eq!(info.body.types, expr_types(&k, &k.params, &k.body).unwrap());
        assert_eq!(KernelInfo::typed(&k).unwrap().body.types, info.body.types);
        let mut stores = Vec::new();
        k.body.block.walk(&mut |s| {
            if let Stmt::Store {
                memory,
                index,
                value,
            } = s
            {
                stores.push(info.body.in_bounds.store(*memory, *index, *value));
            }
        });
        assert_eq!(stores, [true]);
    }
}
