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
use std::cell::{Cell, RefCell};
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

/// The user closure running and how many literals it has emitted so far.
type Region = Option<(u32, u32)>;

thread_local! {
    static TAP: RefCell<Option<Tap>> = const { RefCell::new(None) };
    /// The user closure running under a tap and how many literals it has emitted (`None`
    /// outside user code or without a tap). Apart from `TAP` so that the check for it, made
    /// for every literal, is one load.
    static REGION: Cell<Region> = const { Cell::new(None) };
}

/// Runs `f`, the application of user closure number `closure`, so that the literals it emits
/// in the kernel body are slots of that closure. Without a tap (see the module) it only runs
/// `f`.
pub fn user_code<R>(closure: u32, f: impl FnOnce() -> R) -> R {
    if TAP.with(|t| t.borrow().is_none()) {
        return f();
    }
    /// Gives the enclosing region back when `f` returns or unwinds.
    struct Restore(Region);
    impl Drop for Restore {
        fn drop(&mut self) {
            REGION.set(self.0);
        }
    }
    let _restore = Restore(REGION.replace(Some((closure, 0))));
    f()
}

/// Puts the tap and region that were current before [`with_tap`] back when dropped, also on
/// unwinding, so a panic in user code leaves no tap behind.
struct TapGuard(Option<(Option<Tap>, Region)>);

impl Drop for TapGuard {
    fn drop(&mut self) {
        if let Some((tap, region)) = self.0.take() {
            TAP.with(|t| *t.borrow_mut() = tap);
            REGION.set(region);
        }
    }
}

fn with_tap<R>(tap: Tap, f: impl FnOnce() -> R) -> (R, Tap) {
    let outer_tap = TAP.with(|t| t.borrow_mut().replace(tap));
    let mut guard = TapGuard(Some((outer_tap, REGION.take())));
    let r = f();
    let (outer_tap, outer_region) = guard.0.take().expect("set above");
    let tap = TAP.with(|t| std::mem::replace(&mut *t.borrow_mut(), outer_tap));
    REGION.set(outer_region);
    (r, tap.expect("set above"))
}

/// Runs `f` (which builds kernels) so that every literal user code emits in a kernel body
/// becomes a value parameter, and returns what `f` returned with the constants recorded.
pub fn record_constants<R>(f: impl FnOnce() -> R) -> (R, RecordedConstants) {
    match with_tap(Tap::Record(RecordedConstants::default()), f) {
        (r, Tap::Record(recorded)) => (r, recorded),
        (_, Tap::Hoist(_)) => unreachable!("with_tap gives back the tap it was given"),
    }
}

/// Runs `f` (which builds kernels) so that the literals of user code in `hoisted` slots become
/// value parameters named [`constant_param_name`]`(j)`, `j` being the number paired with the
/// slot; other literals stay literals.
pub fn hoist_constants<R>(hoisted: &[(ConstantSlot, usize)], f: impl FnOnce() -> R) -> R {
    with_tap(Tap::Hoist(hoisted.iter().copied().collect()), f).0
}

/// True while user code runs under a tap: only then may a literal become a parameter.
pub(crate) fn in_user_code() -> bool {
    REGION.get().is_some()
}

/// The number of the constant parameter a literal of value `v` that is about to be emitted in
/// a kernel body should read instead, under the current tap; `None` keeps the literal. Counts
/// the literal as the next of the running closure's.
pub(crate) fn parameter_for_literal(v: ScalarValue) -> Option<usize> {
    let (closure, index) = REGION.get()?;
    REGION.set(Some((closure, index + 1)));
    let slot = ConstantSlot { closure, index };
    TAP.with(|t| match t.borrow_mut().as_mut()? {
        Tap::Record(rec) => Some(match rec.slots.iter().position(|s| *s == slot) {
            Some(j) => j,
            None => {
                rec.slots.push(slot);
                rec.values.push(v);
                rec.slots.len() - 1
            }
        }),
        Tap::Hoist(map) => map.get(&slot).copied(),
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
