//! Backend presence: every backend named in `KILN_REQUIRE` (comma-separated) must open; a
//! missing one fails here with the reason.

use kiln::{BackendKind, Context};

#[test]
fn required_backends_are_present() {
    let required = std::env::var("KILN_REQUIRE").unwrap_or_default();
    for name in required.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let kind = BackendKind::parse(name)
            .unwrap_or_else(|| panic!("KILN_REQUIRE names unknown backend `{name}`"));
        match Context::with_backend(kind) {
            Ok(ctx) => assert_eq!(ctx.device().backend, kind),
            Err(e) => panic!("KILN_REQUIRE names {name}, but it cannot be opened: {e}"),
        }
    }
}

#[test]
fn the_cpu_backend_describes_itself() {
    let ctx = Context::with_backend(BackendKind::Cpu).unwrap();
    let d = ctx.device();
    assert_eq!(d.backend, BackendKind::Cpu);
    assert!(d.compute_units >= 1);
    assert!(d.features.f64 && d.features.atomics64);
    assert_eq!(d.subgroup_size, 1);
}
