//! What validation finds out about a kernel, handed to every backend so none works it out
//! again: each body's expression types and the accesses its guards prove in bounds
//! ([`KernelInfo`]), and a body with those facts as a writer walks it ([`TypedBody`]).

use crate::bounds::InBounds;
use crate::ir::*;
use crate::types::{ScalarType, Type};
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

/// What a kernel uses that not every device has, whatever language it is written in. A
/// writer may need more for its own spelling (WGSL's f64 minimum goes through 64-bit
/// integers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// `f16` values anywhere: parameters, shared or private memory, expressions.
    pub f16: bool,
    /// `f64` values anywhere: parameters, shared or private memory, expressions.
    pub f64: bool,
    /// `i64` or `u64` values anywhere.
    pub int64: bool,
    /// Atomic operations on 64-bit values.
    pub atomics64: bool,
    /// Subgroup operations or subgroup barriers (reading a subgroup's id, size or lane is not
    /// one: every device has those, one lane wide where it has no subgroups).
    pub subgroups: bool,
}

impl Features {
    /// What `kernel` uses, from its declarations and the types of its bodies' expressions
    /// (`bodies`: the kernel's body and each device function's, with their facts).
    fn of<'a>(kernel: &Kernel, bodies: impl Iterator<Item = (&'a Body, &'a BodyInfo)>) -> Features {
        let mut f = Features::default();
        let mut note = |t: &Type| {
            for (s, _) in t.flatten() {
                f.f16 |= s == ScalarType::F16;
                f.f64 |= s == ScalarType::F64;
                f.int64 |= matches!(s, ScalarType::I64 | ScalarType::U64);
            }
        };
        for p in &kernel.params {
            match &p.kind {
                ParamKind::Buffer { elem, .. } | ParamKind::Value(elem) => note(elem),
            }
        }
        kernel.shared.iter().for_each(|s| note(&s.elem));
        let (mut atomics64, mut subgroups) = (false, false);
        for (body, info) in bodies {
            body.locals.iter().for_each(|l| note(&l.ty));
            info.types.iter().for_each(&mut note);
            for (e, t) in body.exprs.iter().zip(&info.types) {
                match e {
                    Expr::Atomic { .. } => {
                        atomics64 |= t.flatten().iter().any(|(s, _)| s.bits() == 64)
                    }
                    Expr::Subgroup { .. } => subgroups = true,
                    _ => {}
                }
            }
            subgroups |= body
                .block
                .any(&|s| matches!(s, Stmt::Barrier(BarrierScope::Subgroup)));
        }
        Features {
            atomics64,
            subgroups,
            ..f
        }
    }
}

/// What [`crate::validate`] found about a kernel: its body's facts, each device function's,
/// and the features it uses.
#[derive(Clone, Debug)]
pub struct KernelInfo {
    /// The kernel's own body.
    pub body: BodyInfo,
    /// Each device function's body, in [`Kernel::functions`] order.
    pub functions: Vec<BodyInfo>,
    /// What the kernel uses that not every device has.
    pub features: Features,
}

impl KernelInfo {
    /// The facts of `kernel` from those of its body and of each device function.
    pub(crate) fn new(kernel: &Kernel, body: BodyInfo, functions: Vec<BodyInfo>) -> KernelInfo {
        let bodies = std::iter::once((&kernel.body, &body))
            .chain(kernel.functions.iter().map(|f| &f.body).zip(&functions));
        let features = Features::of(kernel, bodies);
        KernelInfo {
            body,
            functions,
            features,
        }
    }

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
        let body = BodyInfo::new(&kernel.body, types);
        Ok(KernelInfo::new(kernel, body, functions))
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
        assert_eq!(info.features, Features::default());
    }

    /// Features come from every type a kernel holds, however it got there: an f64 made of
    /// literals, an i64 local, a 64-bit atomic, a subgroup operation in a device function.
    #[test]
    fn features_are_found_wherever_the_kernel_uses_them() {
        let features = |body: &dyn Fn(&KernelScope)| {
            validate(&Kernel::build("k", body).unwrap())
                .unwrap()
                .features
        };
        let f = features(&|k| {
            let out = k.buffer::<f32>("out", Access::Write);
            out.store(0u32, (lit(1.0f64) / lit(3.0f64)).cast::<f32>());
        });
        assert_eq!(
            f,
            Features {
                f64: true,
                ..Features::default()
            }
        );
        let f = features(&|k| {
            let out = k.buffer::<u32>("out", Access::Write);
            let wide = Var::<i64>::new("wide", lit(7i64));
            out.store(0u32, wide.get().cast::<u32>());
        });
        assert_eq!(
            f,
            Features {
                int64: true,
                ..Features::default()
            }
        );
        let f = features(&|k| {
            let counts = k.buffer::<u64>("counts", Access::ReadWrite);
            counts.atomic_add(0u32, lit(1u64));
        });
        assert_eq!(
            f,
            Features {
                int64: true,
                atomics64: true,
                ..Features::default()
            }
        );
        let f = features(&|k| {
            let out = k.buffer::<u32>("out", Access::Write);
            let lanes = device_fn::<u32>("lanes", &[], true, |_| lit(1u32).subgroup_add());
            out.store(0u32, lanes.call(&[]));
        });
        assert_eq!(
            f,
            Features {
                subgroups: true,
                ..Features::default()
            }
        );
    }
}
