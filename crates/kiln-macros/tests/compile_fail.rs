//! The compiler's own output for kernels outside kiln's Rust subset: each file under `ui/`
//! must fail to compile with the message (and the span) in its `.stderr` file.

#[test]
fn constructs_outside_the_subset_fail_with_their_message_at_the_construct() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
