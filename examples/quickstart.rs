//! kiln's main demo: a handful of queries on the default device (`KILN_BACKEND` picks another).
//!
//! Every answer is printed on its own line starting with `result `; timings go on `time `
//! lines, so the answers of two backends can be compared with
//! `diff <(... | grep ^result) <(... | grep ^result)`. On a device without f64 arithmetic
//! (wgpu on GL), the three answers summed in f64 elsewhere are summed in f32 and printed on
//! `approx ` lines instead.

use kiln::prelude::*;
use std::time::Instant;

fn timed<T>(name: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    let start = Instant::now();
    let r = f()?;
    println!("time {name}: {:.3} ms", start.elapsed().as_secs_f64() * 1e3);
    Ok(r)
}

fn main() -> Result<(), Error> {
    let ctx = Context::new()?;
    let dev = ctx.device();
    println!(
        "device: {} ({}), {} compute units",
        dev.name, dev.backend, dev.compute_units
    );

    // Sums in f64 where the device has it (exact for these inputs), else in f32.
    let wide = dev.features.f64;
    let answer = |name: &str, value: String| {
        if wide {
            println!("result {name} {value}");
        } else {
            println!("approx {name} {value} (summed in f32: the device has no f64)");
        }
    };

    let n = 1 << 22;
    let xs: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 10_007) as f32 * 0.25)
        .collect();
    let ys: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let ids: Vec<i32> = (0..n as i32)
        .map(|i| i.wrapping_mul(2_654_435).rem_euclid(1_000_003) - 500_000)
        .collect();

    let fused = || {
        ctx.from(&xs)
            .map(|x| x * 2.0)
            .filter(|x| x.gt(1000.0))
            .map(|x| x + 100.0)
    };
    let sum = timed("map-filter-map-sum (first call, compiles)", || {
        fused().sum()
    })?;
    let sum_again = timed("map-filter-map-sum (cached)", || fused().sum())?;
    // Backends add in different orders (CPU chunks, GPU groups), so the f32 sum is compared
    // with an f64 loop rather than printed as a result.
    let exact: f64 = xs
        .iter()
        .map(|&x| x * 2.0)
        .filter(|&x| x > 1000.0)
        .map(|x| (x + 100.0) as f64)
        .sum();
    println!("sum map-filter-map-sum {sum} (an f64 loop gives {exact})");
    let close = ((sum as f64 - exact) / exact).abs() < 1e-5;
    println!("result map-filter-map-sum within 1e-5 of an f64 loop: {close}");
    println!("result same-answer-twice {}", sum == sum_again);
    if !close || sum != sum_again {
        eprintln!("the fused query's sum is wrong");
        std::process::exit(1);
    }

    let scaled = timed("map to_vec", || {
        ctx.from(&xs).map(|x| x.mul_add(0.5, 1.0)).to_vec()
    })?;
    println!(
        "result map-to_vec len={} first={} last={}",
        scaled.len(),
        scaled[0],
        scaled[n - 1]
    );

    let big = timed("filter to_vec", || {
        ctx.from(&xs).filter(|x| x.gt(1250.0)).to_vec()
    })?;
    println!(
        "result filter-to_vec len={} first={:?} last={:?}",
        big.len(),
        big.first(),
        big.last()
    );

    let dot = timed("zip dot product", || {
        let products = ctx.from(&xs).zip(&ys).map(|(x, y)| x * y);
        if wide {
            products.map(|p| p.cast::<f64>()).sum()
        } else {
            products.sum().map(f64::from)
        }
    })?;
    answer("zip-dot", dot.to_string());

    let count = timed("count", || ctx.from(&ids).filter(|v| (v % 3).eq(0)).count())?;
    println!("result count-multiples-of-3 {count}");
    let min = timed("min", || ctx.from(&ids).min())?;
    let max = timed("max", || ctx.from(&ids).max())?;
    println!("result min {min:?} max {max:?}");
    let avg = timed("average", || ctx.from(&xs).average())?;
    answer("average", format!("{avg:?}"));
    let arg = timed("argmax", || ctx.from(&ys).argmax())?;
    println!("result argmax {arg:?}");
    let norm = timed("fold (max |x|)", || {
        ctx.from(&ids).map(|v| v.abs()).fold(0, |a, b| a.max(b))
    })?;
    println!("result fold-max-abs {norm}");
    let running = timed("scan (running sum of the kept)", || {
        ctx.from(&ids)
            .filter(|v| v.gt(0))
            .scan(0, |a, b| a + b)
            .to_vec()
    })?;
    println!(
        "result scan len={} last={:?}",
        running.len(),
        running.last()
    );
    let sorted = timed("sort", || ctx.from(&ids).sort().to_vec())?;
    println!(
        "result sort first={:?} median={:?} last={:?}",
        sorted.first(),
        sorted.get(sorted.len() / 2),
        sorted.last()
    );
    let hist = timed("histogram (10 bins of 100 000)", || {
        ctx.from(&ids)
            .map(|v| (v + 500_000) / 100_000)
            .histogram(10)
    })?;
    println!("result histogram {hist:?}");
    let by_decile: Vec<(i32, f64)> = timed("group_by sum (10 keys)", || {
        let groups = || {
            ctx.from(&ids)
                .zip(&ys)
                .group_by(|(v, _)| (v + 500_000) / 100_000)
        };
        if wide {
            groups().sum(|(_, y)| y.cast::<f64>())
        } else {
            let sums = groups().sum(|(_, y)| y)?;
            Ok(sums.into_iter().map(|(k, s)| (k, s as f64)).collect())
        }
    })?;
    answer("group_by-sum", format!("{by_decile:?}"));
    let distinct = timed("distinct (sorted keys)", || {
        ctx.from(&ids).map(|v| v / 1000).distinct().to_vec()
    })?;
    println!(
        "result distinct len={} first={:?} last={:?}",
        distinct.len(),
        distinct.first(),
        distinct.last()
    );
    let any = timed("any", || ctx.from(&xs).any(|x| x.is_nan()))?;
    println!("result any-nan {any}");

    let on_device = timed("upload, two queries on the device, download", || {
        let b = ctx.upload(&xs)?;
        let scaled = ctx.from_buffer(&b).map(|x| x * 0.5 - 100.0).to_buffer()?;
        let positive = ctx.from_buffer(&scaled).filter(|x| x.gt(0.0)).to_buffer()?;
        positive.download()
    })?;
    println!(
        "result device-chain len={} first={:?}",
        on_device.len(),
        on_device.first()
    );

    let mut out = vec![0f32; n];
    let mut total = 0f64;
    timed("map into a reused Vec, 5 times", || {
        for _ in 0..5 {
            let written = ctx.from(&xs).map(|x| x * 0.5).write_to(&mut out)?;
            total += out[..written].iter().map(|&v| v as f64).sum::<f64>();
        }
        Ok(())
    })?;
    println!("result reused-output-total {total}");

    println!("\n{}", fused().explain());
    let stats = ctx.stats();
    println!(
        "stats: {} compilations, {} launches",
        stats.compilations, stats.launches
    );
    Ok(())
}
