//! Device-resident queries: the input is already in device memory and results stay there;
//! the baseline is the backend's own device-to-device copy of as many bytes.

use super::{Baseline, Case, Measure, Needs};
use crate::data::Bench;
use kiln::prelude::*;

/// The best time of the device copying the first `len` values of `xs` into another buffer.
pub(super) fn device_copy(b: &Bench, ctx: &Context, len: usize) -> Result<f64, Error> {
    let src = ctx.upload(&b.xs[..len])?;
    let mut dst = ctx.upload(&vec![0f32; len])?;
    Ok(b.best(|| {
        dst.copy_from(&src).unwrap();
        ctx.synchronize().unwrap()
    }))
}

static COPY: Baseline = Baseline {
    label: "device copy",
    measure: Measure::Device(|b, ctx| device_copy(b, ctx, b.n)),
    bytes_per_element: Some(8),
};
static COPY_HALF: Baseline = Baseline {
    label: "device copy of n/2",
    measure: Measure::Device(|b, ctx| device_copy(b, ctx, b.n / 2)),
    bytes_per_element: None,
};
static COPY_QUARTER: Baseline = Baseline {
    label: "device copy of n/4",
    measure: Measure::Device(|b, ctx| device_copy(b, ctx, b.n / 4)),
    bytes_per_element: None,
};

/// A device-resident case; `bytes` it moves per element for the bandwidth line.
const fn case(
    name: &'static str,
    kiln: super::KilnSide,
    baseline: &'static Baseline,
    bytes: Option<usize>,
) -> Case {
    Case {
        name,
        needs: Needs::Any,
        kiln,
        baseline,
        naive: None,
        bytes_per_element: bytes,
    }
}

/// `xs` in device memory.
fn input(b: &Bench, ctx: &Context) -> Result<Buffer<f32>, Error> {
    ctx.upload(&b.xs)
}

pub(super) static CASES: &[Case] = &[
    case(
        "map Buffer→Buffer vs device copy",
        |b, ctx| {
            let bx = input(b, ctx)?;
            Ok(b.best(|| {
                let out = ctx.from_buffer(&bx).map(|x| x * 2.0 + 1.0).to_buffer();
                ctx.synchronize().unwrap();
                out.unwrap()
            }))
        },
        &COPY,
        Some(8),
    ),
    case(
        "map write_to_buffer vs device copy",
        |b, ctx| {
            let bx = input(b, ctx)?;
            let mut dst = ctx.upload(&vec![0f32; b.n])?;
            Ok(b.best(|| {
                let q = ctx.from_buffer(&bx).map(|x| x * 2.0 + 1.0);
                q.write_to_buffer(&mut dst).unwrap();
                ctx.synchronize().unwrap()
            }))
        },
        &COPY,
        Some(8),
    ),
    case(
        "scan Buffer→Buffer vs device copy",
        |b, ctx| {
            let bx = input(b, ctx)?;
            Ok(b.best(|| {
                let out = ctx.from_buffer(&bx).scan(0.0, |a, b| a + b).to_buffer();
                ctx.synchronize().unwrap();
                out.unwrap()
            }))
        },
        &COPY,
        Some(8),
    ),
    case(
        "filter Buffer→Buffer (50%) vs device copy",
        |b, ctx| {
            let bx = input(b, ctx)?;
            Ok(b.best(|| {
                let out = ctx.from_buffer(&bx).filter(|x| x.lt(500.0)).to_buffer();
                ctx.synchronize().unwrap();
                out.unwrap()
            }))
        },
        &COPY,
        None,
    ),
    case(
        "map-filter-map-sum Buffer vs device copy of n/2",
        |b, ctx| {
            let bx = input(b, ctx)?;
            Ok(b.best(|| {
                ctx.from_buffer(&bx)
                    .map(|x| x * 2.0)
                    .filter(|x| x.gt(1000.0))
                    .map(|x| x + 100.0)
                    .sum()
                    .unwrap()
            }))
        },
        &COPY_HALF,
        None,
    ),
    case(
        "sort u32 Buffer→Buffer vs device copy",
        |b, ctx| {
            let keys = ctx.upload(&b.keys32)?;
            let sorted = ctx.from_buffer(&keys).sort().to_buffer()?.download()?;
            assert!(sorted == b.sorted_keys32, "sort of u32 keys");
            Ok(b.best(|| {
                let out = ctx.from_buffer(&keys).sort().to_buffer();
                ctx.synchronize().unwrap();
                out.unwrap()
            }))
        },
        &COPY,
        None,
    ),
    case(
        "histogram Buffer (256 bins of u8) vs device copy of n/4",
        |b, ctx| {
            let levels = ctx.upload(&b.levels)?;
            Ok(b.best(|| ctx.from_buffer(&levels).histogram(256).unwrap()))
        },
        &COPY_QUARTER,
        None,
    ),
    case(
        "group_by sum Buffer (256 u8 keys, dense) vs device copy of n/2",
        |b, ctx| {
            let (keys, bx) = (ctx.upload(&b.levels)?, input(b, ctx)?);
            Ok(b.best(|| {
                let groups = ctx.from_buffer(&keys).zip_buffer(&bx).group_by(|(k, _)| k);
                groups.sum(|(_, x)| x).unwrap()
            }))
        },
        &COPY_HALF,
        None,
    ),
    case(
        "group_by count Buffer (256 u8 keys, dense) vs device copy of n/4",
        |b, ctx| {
            let keys = ctx.upload(&b.levels)?;
            Ok(b.best(|| ctx.from_buffer(&keys).group_by(|k| k).count().unwrap()))
        },
        &COPY_QUARTER,
        None,
    ),
    case(
        "group_by sum Buffer (256 u8 keys, u32 ids, dense) vs device copy of n/2",
        |b, ctx| {
            let (keys, ids) = (ctx.upload(&b.levels)?, ctx.upload(&b.ids)?);
            Ok(b.best(|| {
                let groups = ctx.from_buffer(&keys).zip_buffer(&ids).group_by(|(k, _)| k);
                groups.sum(|(_, x)| x).unwrap()
            }))
        },
        &COPY_HALF,
        None,
    ),
    case(
        "sum Buffer vs device copy (same bytes)",
        |b, ctx| {
            let bx = input(b, ctx)?;
            Ok(b.best(|| ctx.from_buffer(&bx).sum().unwrap()))
        },
        &COPY_HALF,
        Some(4),
    ),
];
