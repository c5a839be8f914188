//! What kiln costs beyond the work: a cold compile (every cache off) and one cached call of
//! each terminal on 1000 elements.

use crate::data::Bench;
use kiln::prelude::*;
use std::time::Instant;

/// A device's overheads.
pub struct Overheads {
    /// Compiling the fused query's kernels in a new context, in milliseconds.
    pub compile_ms: f64,
    /// One cached call of the fused query, in microseconds.
    pub per_call_us: f64,
}

/// The fused query on `xs`.
fn fused(ctx: &Context, xs: &[f32]) -> f32 {
    ctx.from(xs)
        .map(|x| x * 2.0)
        .filter(|x| x.gt(1000.0))
        .map(|x| x + 100.0)
        .sum()
        .unwrap()
}

/// Measures the overheads on a new context for device `index` of `kind`, and tells `note`
/// them with the cached cost of every terminal, labelled `backend`. Fails when the context
/// cannot be made.
pub fn measure(
    b: &Bench,
    kind: BackendKind,
    index: u32,
    backend: &str,
    note: &mut dyn FnMut(String),
) -> Result<Overheads, Error> {
    let cold = Context::with_device(kind, index)?;
    let small: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let t = Instant::now();
    fused(&cold, &small);
    let first_ms = t.elapsed().as_secs_f64() * 1e3;
    let compile_ms = cold.stats().compile_nanos as f64 / 1e6;
    let calls = if b.quick { 200 } else { 2_000 };
    let t = Instant::now();
    for _ in 0..calls {
        std::hint::black_box(fused(&cold, &small));
    }
    let per_call_us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
    note(format!("{backend}: cold compile of the fused query ({} kernels): {compile_ms:.2} ms (first call {first_ms:.2} ms); cached call on 1000 elements: {per_call_us:.1} us", cold.stats().compilations));

    // What one cached call of each terminal costs when the work itself is small: the plan
    // cache lookup, allocations, launches and copies.
    let keys: Vec<u32> = (0..1000u32).map(|i| (i * 7919) % 16).collect();
    // Two calls first: the first compiles, and with a new captured value the second compiles
    // the plan with that value as a parameter.
    let per_call = |f: &mut dyn FnMut()| {
        f();
        f();
        let t = Instant::now();
        for _ in 0..calls {
            f();
        }
        t.elapsed().as_secs_f64() * 1e6 / calls as f64
    };
    let mut k = 0.0f32;
    let terminals: [(&str, &mut dyn FnMut()); 8] = [
        ("sum", &mut || {
            std::hint::black_box(cold.from(&small).sum().unwrap());
        }),
        ("map to_vec", &mut || {
            std::hint::black_box(cold.from(&small).map(|x| x * 2.0).to_vec().unwrap());
        }),
        ("filter to_vec", &mut || {
            let q = cold.from(&small).filter(|x| x.gt(500.0));
            std::hint::black_box(q.to_vec().unwrap());
        }),
        ("scan", &mut || {
            let q = cold.from(&small).scan(0.0, |a, b| a + b);
            std::hint::black_box(q.to_vec().unwrap());
        }),
        ("sort", &mut || {
            std::hint::black_box(cold.from(&small).sort().to_vec().unwrap());
        }),
        ("histogram", &mut || {
            std::hint::black_box(cold.from(&keys).histogram(16).unwrap());
        }),
        ("group_by sum", &mut || {
            let q = cold.from(&keys).zip(&small).group_by(|(k, _)| k);
            std::hint::black_box(q.sum(|(_, x)| x).unwrap());
        }),
        ("sum of x * k with a new k each call", &mut || {
            k += 1.0;
            let scale = k;
            let q = cold.from(&small).map(move |x| x * scale);
            std::hint::black_box(q.sum().unwrap());
        }),
    ];
    let costs: Vec<String> = terminals
        .into_iter()
        .map(|(name, f)| format!("{name} {:.1}", per_call(f)))
        .collect();
    note(format!(
        "{backend}: cached calls on 1000 elements, us: {}",
        costs.join(", ")
    ));
    Ok(Overheads {
        compile_ms,
        per_call_us,
    })
}
