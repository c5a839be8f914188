//! Adapters that stop a work item's loops after a number of iterations (Mesa's llvmpipe, at
//! 65535 in total) never hand back the wrong values that follows: every launch either gives the
//! values a plain Rust loop computes or fails with `Unsupported` naming the kernel, below the
//! limit nothing fails, far above it everything does, and the backend keeps working after.
//! On adapters without a limit every launch must give the right values.

use kiln_backend::{Backend, BackendError, BackendKind, Grid, LaunchArg};
use kiln_ir::*;
use kiln_wgpu::{WgpuBackend, WgpuOptions};

mod common;
use common::open;

/// The default adapter and its loop limit, when it has one.
fn limited() -> Option<(WgpuBackend, u32)> {
    let backend = open(WgpuOptions::default())?;
    let limit = backend.info().max_loop_iterations?;
    Some((backend, limit))
}

/// Asserts that `result` is the loop fault of `one_loop` (case 0); `what` names the call.
fn assert_one_loop_fault(result: Result<(), BackendError>, what: &str) {
    match result {
        Err(BackendError::Unsupported { feature, .. }) => {
            assert!(feature.contains("kernel `one_loop`"), "{feature}")
        }
        other => panic!("{what} gave {other:?}"),
    }
}

/// A kernel whose work items each store one `u32` computed by loops that run between
/// `trips(n).0` and `trips(n).1` iterations, and the value a plain loop computes for `n` in
/// work item `i`.
struct Case {
    kernel: Kernel,
    trips: fn(u64) -> (u64, u64),
    want: fn(u32, u32) -> u32,
}

/// `c` counts with `body`, given `n`; every work item stores `c`.
fn counting(name: &str, body: impl FnOnce(Val<u32>, Var<u32>)) -> Kernel {
    Kernel::build(name, |k| {
        let n = k.value::<u32>("n");
        let out = k.buffer::<u32>("out", Access::Write);
        let c = Var::new("c", 0u32);
        body(n, c);
        let i = global_id(Axis::X);
        if_then(i.lt(out.len()), || out.store(i, c.get()));
    })
    .unwrap()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            kernel: counting("one_loop", |n, c| {
                for_range(0u32, n, |_| c.set(c.get() + 1u32))
            }),
            trips: |n| (n, n + 1),
            want: |n, _| n,
        },
        Case {
            kernel: counting("nested_loops", |n, c| {
                for_range(0u32, n, |_| {
                    for_range(0u32, 100u32, |_| c.set(c.get() + 1u32))
                })
            }),
            trips: |n| (101 * n, 102 * n + 1),
            want: |n, _| 100 * n,
        },
        Case {
            kernel: counting("two_loops", |n, c| {
                for_range(0u32, n, |_| c.set(c.get() + 1u32));
                for_range(0u32, n, |_| c.set(c.get() + 2u32));
            }),
            trips: |n| (2 * n, 2 * n + 2),
            want: |n, _| 3 * n,
        },
        Case {
            // Odd and even work items take different loops, which llvmpipe runs one after
            // the other for the SIMD batch that holds both.
            kernel: counting("diverging_loops", |n, c| {
                let odd = (global_id(Axis::X) % 2u32).eq(1u32);
                let count = || for_range(0u32, n, |_| c.set(c.get() + 1u32));
                if_else(odd, count, count);
            }),
            // A group of one work item runs one of the loops.
            trips: |n| (n, 2 * n + 2),
            want: |n, _| n,
        },
        Case {
            // An `if` without an `else` around a loop, taken every other pass: llvmpipe runs
            // the loop once in the passes that skip it.
            kernel: counting("loop_in_an_if", |n, c| {
                for_range(0u32, n, |r| {
                    if_then((r % 2u32).eq(0u32), || {
                        for_range(0u32, r % 3u32, |_| c.set(c.get() + 1u32))
                    });
                })
            }),
            trips: |n| (n, 3 * n + 4),
            want: |n, _| (0..n).filter(|r| r % 2 == 0).map(|r| r % 3).sum(),
        },
        Case {
            // Work items of a batch take turns running the long passes of one inner loop, so
            // the batch runs more passes than any one of them.
            kernel: counting("taking_turns", |n, c| {
                let me = global_id(Axis::X) % 4u32;
                for_range(0u32, n, |round| {
                    let passes = select((round % 4u32).eq(me), 40u32, 1u32);
                    for_range(0u32, passes, |_| c.set(c.get() + 1u32));
                })
            }),
            trips: |n| (n * 2, n * 42 + 1),
            want: |n, i| (0..n).map(|r| if r % 4 == i % 4 { 40 } else { 1 }).sum(),
        },
        Case {
            // A loop left by `break`, with `continue` skipping every third addition.
            kernel: counting("break_and_continue", |n, c| {
                let k = Var::new("k", 0u32);
                loop_(|| {
                    if_then(k.get().ge(n), break_);
                    k.set(k.get() + 1u32);
                    if_then((k.get() % 3u32).eq(0u32), continue_);
                    c.set(c.get() + 1u32);
                })
            }),
            trips: |n| (n, n + 1),
            want: |n, _| n - n / 3,
        },
        Case {
            // Float `%` is exact on the bits, with loops of its own in WGSL.
            kernel: counting("float_remainder", |n, c| {
                let acc = Var::new("acc", 0.5f32);
                for_range(0u32, n, |_| acc.set((acc.get() + 1000.5f32) % 0.37f32));
                c.set(acc.get().bitcast::<u32>());
            }),
            // Up to some 280 more per `%` of f32.
            trips: |n| (n, 300 * n + 1),
            want: |n, _| {
                let mut acc = 0.5f32;
                for _ in 0..n {
                    acc = (acc + 1000.5) % 0.37;
                }
                acc.to_bits()
            },
        },
    ]
}

#[test]
fn loops_past_the_adapters_limit_fail_instead_of_giving_wrong_values() {
    // Without subgroup operations each work item counts its own passes.
    for subgroups in [true, false] {
        let options = WgpuOptions {
            subgroups,
            ..WgpuOptions::default()
        };
        let Some(backend) = open(options) else {
            return;
        };
        check_every_case(&backend);
    }
}

fn check_every_case(backend: &WgpuBackend) {
    let limit = backend.info().max_loop_iterations;
    let name = &backend.info().name;
    assert_eq!(
        limit.is_some(),
        name.contains("llvmpipe"),
        "{name} has a loop limit exactly when it is llvmpipe"
    );
    for case in cases() {
        let compiled = backend.compile(&case.kernel).unwrap();
        for (group, n) in [1u32, 3, 64].into_iter().flat_map(|g| {
            [
                0u32, 1, 100, 1000, 20_000, 32_000, 65_000, 65_533, 65_534, 65_535, 65_536, 65_537,
                70_000, 140_000, 300_000,
            ]
            .map(|n| (g, n))
        }) {
            let mut out = vec![0u32; group as usize];
            let result = compiled.launch(
                &Grid::linear(1, group),
                &mut [
                    LaunchArg::Value(n.to_le_bytes().to_vec()),
                    LaunchArg::read_write(&mut out),
                ],
            );
            let at = format!(
                "`{}` with n = {n} in a group of {group} on {name}",
                case.kernel.name
            );
            let (least, most) = (case.trips)(n as u64);
            let failed = result.is_err();
            match (result, limit) {
                (Ok(()), _) => {
                    let want: Vec<u32> = (0..group).map(|i| (case.want)(n, i)).collect();
                    assert_eq!(out, want, "{at}")
                }
                (Err(BackendError::Unsupported { backend, feature }), Some(limit)) => {
                    assert_eq!(backend, BackendKind::Wgpu);
                    assert!(
                        feature.contains(&format!("kernel `{}`", case.kernel.name))
                            && feature.contains(&format!("{limit} loop iterations")),
                        "{at}: {feature}"
                    );
                    assert!(
                        most >= limit as u64 / 2,
                        "{at}: failed at {most} trips or fewer"
                    );
                }
                (Err(e), _) => panic!("{at}: {e}"),
            }
            if limit.is_some_and(|limit| least > 2 * limit as u64) {
                assert!(failed, "{at}: {least} trips or more did not fail");
            }
        }
    }
}

#[test]
fn a_launch_with_empty_host_outputs_reports_its_own_loop_fault() {
    let Some((backend, limit)) = limited() else {
        return;
    };
    let compiled = backend.compile(&cases()[0].kernel).unwrap();
    let launch = |n: u32, out: &mut [u32]| {
        compiled.launch(
            &Grid::linear(1, 4),
            &mut [
                LaunchArg::Value(n.to_le_bytes().to_vec()),
                LaunchArg::read_write(out),
            ],
        )
    };
    assert_one_loop_fault(
        launch(2 * limit, &mut []),
        "a launch past the limit with no output",
    );
    let mut out = vec![0u32; 4];
    launch(7, &mut out).expect("the next launch does not see the old fault");
    assert_eq!(out, vec![7; 4]);
}

#[test]
fn a_loop_fault_of_a_launch_on_device_memory_is_reported_by_synchronize_once() {
    let Some((backend, limit)) = limited() else {
        return;
    };
    let case = &cases()[0];
    let compiled = backend.compile(&case.kernel).unwrap();
    let out = backend.alloc(16).unwrap();
    let n = 2 * limit;
    compiled
        .launch(
            &Grid::linear(1, 4),
            &mut [
                LaunchArg::Value(n.to_le_bytes().to_vec()),
                LaunchArg::Device(&*out),
            ],
        )
        .expect("a launch on device memory does not wait for the device");
    assert_one_loop_fault(backend.synchronize(), "synchronize after the fault");
    backend.synchronize().expect("the fault is reported once");
    let mut out_host = vec![0u32; 4];
    compiled
        .launch(
            &Grid::linear(1, 4),
            &mut [
                LaunchArg::Value(7u32.to_le_bytes().to_vec()),
                LaunchArg::read_write(&mut out_host),
            ],
        )
        .unwrap();
    assert_eq!(out_host, vec![7; 4], "the backend keeps working");
}
