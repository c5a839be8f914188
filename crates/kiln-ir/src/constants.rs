//! Constants of user code, and turning them into kernel parameters.
//!
//! A query's closures emit IR, and a value a closure captures (`move |x| x * k`) arrives as a
//! literal. To compile such a query once for every `k` instead of once per `k`, kiln's query
//! planner marks where user code runs ([`user_code`]) and builds kernels under one of two
//! taps:
//!
//! * [`record_constants`]: every literal that user code emits in the kernel body becomes a
//!   value parameter named after its [`ConstantSlot`]'s position in the record, and the
//!   literal's value is recorded. The kernel is then the query's shape without its constants.
//! * [`hoist_constants`]: the literals of the chosen slots become those parameters; the rest
//!   stay literals.
//!
//! A slot is the closure's number and the literal's position among the literals one
//! application of the closure emits: a closure emits the same literals, in the same order,
//! each time it is applied to values of the same types, so the slot names the same constant in
//! every kernel of a plan. Literals inside device functions are not slots: a device function
//! captures nothing, and its body is built once per kernel.

use crate::types::ScalarValue;
use std::cell::RefCell;
use std::collections::HashMap;

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
    format!("kiln_const{j}")
}

enum Tap {
    Record(RecordedConstants),
    Hoist(HashMap<ConstantSlot, usize>),
}

struct TapState {
    tap: Tap,
    /// The closure running now and how many literals it has emitted.
    region: Option<(u32, u32)>,
}

thread_local! {
    static TAP: RefCell<Option<TapState>> = const { RefCell::new(None) };
}

/// Runs `f`, the application of user closure number `closure`, so that the literals it emits
/// in the kernel body are slots of that closure. Without a tap (see the module) it only runs
/// `f`.
pub fn user_code<R>(closure: u32, f: impl FnOnce() -> R) -> R {
    let outer = TAP.with(|t| {
        t.borrow_mut()
            .as_mut()
            .map(|s| s.region.replace((closure, 0)))
    });
    let Some(outer) = outer else {
        return f();
    };
    /// Gives the enclosing region back when `f` returns or unwinds.
    struct Restore(Option<(u32, u32)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            TAP.with(|t| {
                if let Some(s) = t.borrow_mut().as_mut() {
                    s.region = self.0;
                }
            });
        }
    }
    let _restore = Restore(outer);
    f()
}

/// Puts the tap that was current before [`with_tap`] back when dropped, also on unwinding,
/// so a panic in user code leaves no tap behind.
struct TapGuard(Option<Option<TapState>>);

impl Drop for TapGuard {
    fn drop(&mut self) {
        if let Some(outer) = self.0.take() {
            TAP.with(|t| *t.borrow_mut() = outer);
        }
    }
}

fn with_tap<R>(tap: Tap, f: impl FnOnce() -> R) -> (R, Tap) {
    let outer = TAP.with(|t| t.borrow_mut().replace(TapState { tap, region: None }));
    let mut guard = TapGuard(Some(outer));
    let r = f();
    let outer = guard.0.take().expect("set above");
    let state = TAP.with(|t| std::mem::replace(&mut *t.borrow_mut(), outer));
    (r, state.expect("set above").tap)
}

/// Runs `f` (which builds kernels) so that every literal user code emits in a kernel body
/// becomes a value parameter, and returns what `f` returned with the constants recorded.
pub fn record_constants<R>(f: impl FnOnce() -> R) -> (R, RecordedConstants) {
    match with_tap(Tap::Record(RecordedConstants::default()), f) {
        (r, Tap::Record(recorded)) => (r, recorded),
        (r, Tap::Hoist(_)) => (r, RecordedConstants::default()),
    }
}

/// Runs `f` (which builds kernels) so that the literals of user code in `hoisted` slots become
/// value parameters named [`constant_param_name`]`(j)`, `j` being the number paired with the
/// slot; other literals stay literals.
pub fn hoist_constants<R>(hoisted: &[(ConstantSlot, usize)], f: impl FnOnce() -> R) -> R {
    with_tap(Tap::Hoist(hoisted.iter().copied().collect()), f).0
}

/// The number of the constant parameter a literal of value `v` that is about to be emitted in
/// a kernel body should read instead, under the current tap; `None` keeps the literal.
pub(crate) fn parameter_for_literal(v: ScalarValue) -> Option<usize> {
    TAP.with(|t| {
        let mut t = t.borrow_mut();
        let state = t.as_mut()?;
        let (closure, index) = state.region.as_mut()?;
        let slot = ConstantSlot {
            closure: *closure,
            index: *index,
        };
        *index += 1;
        match &mut state.tap {
            Tap::Record(rec) => Some(match rec.slots.iter().position(|s| *s == slot) {
                Some(j) => j,
                None => {
                    rec.slots.push(slot);
                    rec.values.push(v);
                    rec.slots.len() - 1
                }
            }),
            Tap::Hoist(map) => map.get(&slot).copied(),
        }
    })
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
        let (k, rec) = record_constants(build);
        let slot = |index| ConstantSlot { closure: 7, index };
        assert_eq!(rec.slots, [slot(0), slot(1)]);
        assert_eq!(rec.values, [ScalarValue::F32(3.0), ScalarValue::F32(2.0)]);
        assert_eq!(params(&k), ["x", "kiln_const0", "kiln_const1"]);
        assert_eq!(literals(&k), [5.0]);
        let in_function = &k.functions[0].body.exprs;
        assert!(in_function.contains(&Expr::Literal(ScalarValue::F32(4.0))));
    }

    #[test]
    fn a_panic_in_user_code_leaves_no_tap_behind() {
        let r = std::panic::catch_unwind(|| {
            record_constants(|| user_code(1, || panic!("user code panics")))
        });
        assert!(r.is_err());
        assert_eq!(params(&build()), ["x"]);
        assert_eq!(literals(&build()), [2.0, 2.0, 3.0, 3.0, 5.0]);
    }

    #[test]
    fn hoisting_makes_only_the_chosen_slots_parameters() {
        let slot = ConstantSlot {
            closure: 7,
            index: 1,
        };
        let k = hoist_constants(&[(slot, 4)], build);
        assert_eq!(params(&k), ["x", "kiln_const4"]);
        assert_eq!(literals(&k), [3.0, 3.0, 5.0]);
        let plain = build();
        assert_eq!(params(&plain), ["x"]);
        assert_eq!(literals(&plain), [2.0, 2.0, 3.0, 3.0, 5.0]);
    }
}
