//! Constants of user code, and turning them into kernel parameters.
//!
//! A query's closures emit IR, and a value a closure captures (`move |x| x * k`) arrives as a
//! literal. To compile such a query once for every `k` instead of once per `k`, kiln's query
//! planner marks where user code runs ([`user_code`]): each literal user code emits in a
//! kernel body is recorded with its [`ConstantSlot`] in [`Kernel::user_literals`]. Two passes
//! over a built kernel then turn literals into value parameters:
//!
//! * [`record_constants`]: every literal of user code becomes a value parameter named after
//!   its slot's position in the record, and the literal's value is recorded. The kernel is
//!   then the query's shape without its constants.
//! * [`hoist_constants`]: the literals of the chosen slots become those parameters; the rest
//!   stay literals.
//!
//! A slot is the closure's number and the literal's position among the literals one
//! application of the closure emits: a closure emits the same literals, in the same order,
//! each time it is applied to values of the same types, so the slot names the same constant in
//! every kernel of a plan. Literals inside device functions are not slots: a device function
//! captures nothing, and its body is built once per kernel. The builder emits the same IR
//! with or without these passes; only the record of origins depends on [`user_code`].

use crate::ir::{Expr, Kernel, Param, ParamKind};
use crate::types::{ScalarValue, Type};

/// Where a literal of user code sits: the closure that emitted it and the literal's position
/// among those one application of the closure emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConstantSlot {
    /// The number [`user_code`] was given.
    pub closure: u32,
    /// Position among the closure's literals.
    pub index: u32,
}

/// The constants [`record_constants`] found, in the order user code first emitted them; the
/// parameter of `slots[j]` is named [`constant_param_name`]`(j)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordedConstants {
    /// Each constant's slot.
    pub slots: Vec<ConstantSlot>,
    /// Each constant's value.
    pub values: Vec<ScalarValue>,
}

/// The name of the value parameter that holds constant `j` of a record.
pub fn constant_param_name(j: usize) -> String {
    // The first few without `format!`: a cached query names its constants on every call.
    const NAMES: [&str; 8] = [
        "kiln_const0",
        "kiln_const1",
        "kiln_const2",
        "kiln_const3",
        "kiln_const4",
        "kiln_const5",
        "kiln_const6",
        "kiln_const7",
    ];
    match NAMES.get(j) {
        Some(name) => (*name).to_string(),
        None => format!("kiln_const{j}"),
    }
}

/// Runs `f`, the application of user closure number `closure`, so that the literals it emits
/// in the body of the kernel being built are recorded as slots of that closure. Outside a
/// kernel build it only runs `f`.
pub fn user_code<R>(closure: u32, f: impl FnOnce() -> R) -> R {
    /// Gives the enclosing region back when `f` returns or unwinds.
    struct Restore(Option<(u32, u32)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            crate::build::swap_region(self.0);
        }
    }
    match crate::build::swap_region(Some((closure, 0))) {
        Some(outer) => {
            let _restore = Restore(outer);
            f()
        }
        None => f(),
    }
}

/// `kernel` with every literal of user code in its body replaced by a read of a value
/// parameter (one per slot, named [`constant_param_name`] of its position in the record,
/// appended after the kernel's parameters), and the record of the slots and values.
pub fn record_constants(kernel: Kernel) -> (Kernel, RecordedConstants) {
    let mut rec = RecordedConstants::default();
    let k = parameterize(kernel, |slot, v| {
        Some(match rec.slots.iter().position(|s| *s == slot) {
            Some(j) => j,
            None => {
                rec.slots.push(slot);
                rec.values.push(v);
                rec.slots.len() - 1
            }
        })
    });
    (k, rec)
}

/// `kernel` with the literals of user code in `hoisted` slots replaced by reads of value
/// parameters named [`constant_param_name`]`(j)`, `j` being the number paired with the slot
/// (appended after the kernel's parameters); other literals stay literals.
pub fn hoist_constants(kernel: Kernel, hoisted: &[(ConstantSlot, usize)]) -> Kernel {
    parameterize(kernel, |slot, _| {
        hoisted.iter().find(|(s, _)| *s == slot).map(|(_, j)| *j)
    })
}

/// `kernel` with each user literal for which `choose` gives a number `j` read from the value
/// parameter [`constant_param_name`]`(j)` (declared on first use); the literals replaced
/// leave [`Kernel::user_literals`].
fn parameterize(
    mut k: Kernel,
    mut choose: impl FnMut(ConstantSlot, ScalarValue) -> Option<usize>,
) -> Kernel {
    for (h, slot) in std::mem::take(&mut k.user_literals) {
        let Some(Expr::Literal(v)) = k.body.exprs.get(h.index()).cloned() else {
            continue;
        };
        let Some(j) = choose(slot, v) else {
            k.user_literals.push((h, slot));
            continue;
        };
        let name = constant_param_name(j);
        let i = match k.params.iter().position(|p| p.name == name) {
            Some(i) => i,
            None => {
                k.params.push(Param {
                    name,
                    kind: ParamKind::Value(Type::Scalar(v.ty())),
                });
                k.params.len() - 1
            }
        };
        k.body.exprs[h.index()] = Expr::Param(i as u32);
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;

    /// A kernel whose user closure (number 7) scales by 3 and adds 2, applied twice, with a 5
    /// outside it and a device function holding a 4 called from inside it.
    fn build() -> Kernel {
        Kernel::build("scaled", |k| {
            let x = k.buffer::<f32>("x", Access::ReadWrite);
            let i = global_id(Axis::X);
            let v = x.load(i) + 5.0;
            let plus_four = device_fn(
                "plus_four",
                &[("a", Type::Scalar(ScalarType::F32))],
                true,
                |a| a[0].typed::<f32>() + 4.0,
            );
            let closure = |v: Val<f32>| user_code(7, || plus_four.call(&[(v * 3.0).erase()]) + 2.0);
            x.store(i, closure(closure(v)));
        })
        .unwrap()
    }

    fn params(k: &Kernel) -> Vec<&str> {
        k.params.iter().map(|p| p.name.as_str()).collect()
    }

    fn literals(k: &Kernel) -> Vec<f32> {
        let mut out: Vec<f32> = k
            .body
            .exprs
            .iter()
            .filter_map(|e| match e {
                Expr::Literal(ScalarValue::F32(v)) => Some(*v),
                _ => None,
            })
            .collect();
        out.sort_by(f32::total_cmp);
        out
    }

    #[test]
    fn recording_makes_each_literal_of_user_code_in_the_body_a_parameter() {
        let (k, rec) = record_constants(build());
        let slot = |index| ConstantSlot { closure: 7, index };
        assert_eq!(rec.slots, [slot(0), slot(1)]);
        assert_eq!(rec.values, [ScalarValue::F32(3.0), ScalarValue::F32(2.0)]);
        assert_eq!(params(&k), ["x", "kiln_const0", "kiln_const1"]);
        assert_eq!(literals(&k), [5.0]);
        let in_function = &k.functions[0].body.exprs;
        assert!(in_function.contains(&Expr::Literal(ScalarValue::F32(4.0))));
    }

    #[test]
    fn user_code_outside_a_kernel_build_only_runs() {
        assert_eq!(user_code(1, || 5), 5);
        let r = std::panic::catch_unwind(|| user_code(1, || panic!("user code panics")));
        assert!(r.is_err());
        let k = build();
        assert_eq!(params(&k), ["x"]);
        assert_eq!(literals(&k), [2.0, 2.0, 3.0, 3.0, 5.0]);
        // Two applications of the closure: its two literals, twice, in order.
        let slots: Vec<u32> = k.user_literals.iter().map(|(_, s)| s.index).collect();
        assert_eq!(slots, [0, 1, 0, 1]);
    }

    #[test]
    fn hoisting_makes_only_the_chosen_slots_parameters() {
        let slot = ConstantSlot {
            closure: 7,
            index: 1,
        };
        let plain = build();
        let k = hoist_constants(plain.clone(), &[(slot, 4)]);
        assert_eq!(params(&k), ["x", "kiln_const4"]);
        assert_eq!(literals(&k), [3.0, 3.0, 5.0]);
        assert_eq!(
            k.user_literals.len(),
            2,
            "the slots left as literals stay recorded"
        );
        assert_eq!(params(&plain), ["x"]);
        assert_eq!(literals(&plain), [2.0, 2.0, 3.0, 3.0, 5.0]);
    }
}
