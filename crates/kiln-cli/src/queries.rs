//! The example queries `kiln emit` prints: the README tour's shapes, each with its kernels'
//! source (for those whose `to_vec` is one fused plan) and its plan.

use kiln::{Context, DeviceProfile, Target};

/// What to print of a query.
pub(crate) enum Show<'p> {
    /// The source of the kernels its `to_vec` runs, in a target.
    Source(Target),
    /// The plan it runs on a device of this profile, with the IR of its kernels.
    Plan(&'p DeviceProfile),
}

/// Prints a query on a context: `None` where the query has no such view (a sort's kernels
/// come with its plan, not alone).
pub(crate) type Printer = fn(&Context, Show) -> Option<kiln::Result<String>>;

/// Inputs of the queries: 10,000 values, enough that every plan has several groups.
fn xs() -> Vec<f32> {
    (0..10_000).map(|i| (i % 1000) as f32).collect()
}

/// Keys below 256.
fn keys() -> Vec<u32> {
    (0..10_000u32)
        .map(|i| i.wrapping_mul(2654435761) % 256)
        .collect()
}

/// The example queries by name, with what each is.
pub(crate) const QUERIES: &[(&str, &str, Printer)] = &[
    (
        "quickstart",
        "map, filter, map; sum or to_vec (README's first example)",
        |ctx, show| {
            let xs = xs();
            let q = ctx
                .from(&xs)
                .map(|x| x * 2.0)
                .filter(|x| x.gt(1000.0))
                .map(|x| x + 100.0);
            Some(match show {
                Show::Source(t) => q.emit(t),
                Show::Plan(p) => Ok(q.explain_on(p)),
            })
        },
    ),
    ("zip", "two columns zipped and multiplied", |ctx, show| {
        let (xs, ys) = (xs(), xs());
        let q = ctx.from(&xs).zip(&ys).map(|(x, y)| x * y + 1.0);
        Some(match show {
            Show::Source(t) => q.emit(t),
            Show::Plan(p) => Ok(q.explain_on(p)),
        })
    }),
    (
        "scan",
        "running sum of f32 (its kernels come with --plan)",
        |ctx, show| {
            let xs = xs();
            let q = ctx.from(&xs).scan(0.0, |a, b| a + b);
            match show {
                Show::Source(_) => None,
                Show::Plan(p) => Some(Ok(q.explain_on(p))),
            }
        },
    ),
    (
        "sort",
        "radix sort of u32 keys (its kernels come with --plan)",
        |ctx, show| {
            let keys = keys();
            let q = ctx.from(&keys).sort();
            match show {
                Show::Source(_) => None,
                Show::Plan(p) => Some(Ok(q.explain_on(p))),
            }
        },
    ),
    (
        "group_by",
        "rows grouped by a u32 key (its kernels come with --plan)",
        |ctx, show| {
            let (keys, xs) = (keys(), xs());
            let q = ctx.from(&keys).zip(&xs).group_by(|(k, _)| k);
            match show {
                Show::Source(_) => None,
                Show::Plan(p) => Some(Ok(q.explain_on(p))),
            }
        },
    ),
    (
        "histogram",
        "256 bins of u32 keys (its kernels come with --plan)",
        |ctx, show| {
            let keys = keys();
            let q = ctx.from(&keys);
            match show {
                Show::Source(_) => None,
                Show::Plan(p) => Some(Ok(q.explain_histogram_on(p, 256))),
            }
        },
    ),
];
