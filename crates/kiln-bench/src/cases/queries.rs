//! Queries over host slices against the rayon code a performance engineer writes for them
//! ([`super::tuned`]) and, beside it, the plain iterator chain most Rust code has.

use super::{tuned, Baseline, Case, Measure, Needs};
use crate::data::{per_chunk_sums, wide_histogram, Bench};
use kiln::prelude::*;
use rayon::prelude::*;

/// A baseline labelled "rayon": a plain iterator chain.
const fn rayon(measure: fn(&Bench) -> f64) -> Baseline {
    Baseline {
        label: "rayon",
        measure: Measure::Host(measure),
        bytes_per_element: None,
    }
}

/// A baseline labelled "rayon, tuned": chunks, 16 lanes, the host's widest vectors.
const fn tuned(measure: fn(&Bench) -> f64) -> Baseline {
    Baseline {
        label: "rayon, tuned",
        measure: Measure::Host(measure),
        bytes_per_element: None,
    }
}

/// A case on any device with no bandwidth figure.
const fn case(name: &'static str, kiln: super::KilnSide, baseline: &'static Baseline) -> Case {
    Case {
        name,
        needs: Needs::Any,
        kiln,
        baseline,
        naive: None,
        bytes_per_element: None,
    }
}

/// A case against the tuned `baseline`, with the `naive` iterator chain beside it.
const fn tuned_case(
    name: &'static str,
    kiln: super::KilnSide,
    baseline: &'static Baseline,
    naive: &'static Baseline,
) -> Case {
    Case {
        naive: Some(naive),
        ..case(name, kiln, baseline)
    }
}

/// `case` on devices with `needs`.
const fn needing(needs: Needs, c: Case) -> Case {
    Case { needs, ..c }
}

static MAP: Baseline =
    rayon(|b| b.best(|| b.xs.par_iter().map(|x| x * 2.0 + 1.0).collect::<Vec<f32>>()));
static FUSED: Baseline = rayon(|b| {
    b.best(|| {
        b.xs.par_iter()
            .map(|x| x * 2.0)
            .filter(|x| *x > 1000.0)
            .map(|x| x + 100.0)
            .sum::<f32>()
    })
});
static SUM: Baseline = rayon(|b| b.best(|| b.xs.par_iter().sum::<f32>()));
// `f32::max` skips NaN, as kiln's `max()` does.
static MAX: Baseline = rayon(|b| b.best(|| b.xs.par_iter().copied().reduce(|| f32::NAN, f32::max)));
// The first position of the largest, as `argmax()` gives it.
static ARGMAX: Baseline = rayon(|b| {
    b.best(|| {
        b.xs.par_iter()
            .enumerate()
            .reduce_with(|a, c| if c.1 > a.1 { c } else { a })
            .map(|(i, _)| i)
    })
});
static MAP_F64: Baseline =
    rayon(|b| b.best(|| b.xd.par_iter().map(|x| x * 2.0 + 1.0).collect::<Vec<f64>>()));
static SQUARES_F64: Baseline = rayon(|b| b.best(|| b.xd.par_iter().map(|x| x * x).sum::<f64>()));
static MAX_F64: Baseline =
    rayon(|b| b.best(|| b.xd.par_iter().copied().reduce(|| f64::NAN, f64::max)));
static MAP_I64: Baseline =
    rayon(|b| b.best(|| b.xl.par_iter().map(|x| x * 3 + 1).collect::<Vec<i64>>()));
static SUM_I64: Baseline = rayon(|b| b.best(|| b.xl.par_iter().sum::<i64>()));
static MAX_I64: Baseline = rayon(|b| b.best(|| b.xl.par_iter().copied().max()));
static FILTER: Baseline = rayon(|b| b.best(|| rayon_filter(&b.xs)));
static FILTER_NOISY: Baseline = rayon(|b| b.best(|| rayon_filter(&b.noisy)));
static SCAN: Baseline = rayon(|b| b.best(|| rayon_scan(&b.xs)));
static HISTOGRAM: Baseline = rayon(|b| {
    b.best(|| {
        per_chunk_sums(&b.levels, 1 << 16, 256, |h: &mut [u32], l| {
            h[*l as usize] += 1
        })
    })
});
static WIDE_HISTOGRAM: Baseline = rayon(|b| b.best(|| wide_histogram(&b.samples)));
static SORT: Baseline = Baseline {
    label: "rayon par_sort_unstable",
    measure: Measure::Host(|b| {
        b.best(|| {
            let mut v = b.xs.clone();
            v.par_sort_unstable_by(f32::total_cmp);
            v
        })
    }),
    bytes_per_element: None,
};
/// How many elements the `top_k` case keeps.
const TOP_K: usize = 100;
static TOP_K_SELECT: Baseline = Baseline {
    label: "rayon per-chunk select_nth_unstable + merge",
    measure: Measure::Host(|b| b.best(|| rayon_top_k(&b.xs, TOP_K))),
    bytes_per_element: None,
};
static GROUP_SUM: Baseline = Baseline {
    label: "rayon dense per-key sums",
    measure: Measure::Host(|b| {
        b.best(|| {
            b.levels
                .par_chunks(1 << 16)
                .zip(b.xs.par_chunks(1 << 16))
                .map(|(k, x)| {
                    let mut sums = vec![0f32; 256];
                    k.iter().zip(x).for_each(|(k, x)| sums[*k as usize] += x);
                    sums
                })
                .reduce(
                    || vec![0f32; 256],
                    |mut a, b| {
                        a.iter_mut().zip(b).for_each(|(a, b)| *a += b);
                        a
                    },
                )
        })
    }),
    bytes_per_element: None,
};
/// The keys' span in [`Bench::ids`].
const ID_KEYS: usize = 65_521;

/// Rows per chunk of the dense per-key baselines over `n` rows: one chunk per rayon thread,
/// and at least as many rows as keys (each chunk's slots are cleared and added up once).
fn key_chunk(n: usize) -> usize {
    n.div_ceil(rayon::current_num_threads()).max(ID_KEYS)
}

static GROUP_COUNT_DENSE: Baseline = Baseline {
    label: "rayon dense per-key counts",
    measure: Measure::Host(|b| {
        b.best(|| {
            let counts = per_chunk_sums(&b.ids, key_chunk(b.n), ID_KEYS, |h: &mut [usize], k| {
                h[*k as usize] += 1
            });
            let keys = (0u32..).zip(counts);
            keys.filter(|(_, c)| *c > 0).collect::<Vec<_>>()
        })
    }),
    bytes_per_element: None,
};

static GROUP_SUM_WIDE: Baseline = Baseline {
    label: "rayon dense per-key sums",
    measure: Measure::Host(|b| {
        b.best(|| {
            let chunk = key_chunk(b.n);
            let empty = || (vec![0f32; ID_KEYS], vec![0u32; ID_KEYS]);
            let (sums, counts) = b
                .ids
                .par_chunks(chunk)
                .zip(b.xs.par_chunks(chunk))
                .map(|(k, x)| {
                    let (mut sums, mut counts) = empty();
                    k.iter().zip(x).for_each(|(k, x)| {
                        sums[*k as usize] += x;
                        counts[*k as usize] += 1;
                    });
                    (sums, counts)
                })
                .reduce(empty, |mut a, b| {
                    a.0.iter_mut().zip(b.0).for_each(|(a, b)| *a += b);
                    a.1.iter_mut().zip(b.1).for_each(|(a, b)| *a += b);
                    a
                });
            let keys = (0u32..).zip(sums).zip(counts);
            keys.filter(|(_, c)| *c > 0)
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        })
    }),
    bytes_per_element: None,
};

static GROUP_SUM_SORTED: Baseline = Baseline {
    label: "rayon par_sort_unstable + run sums",
    measure: Measure::Host(|b| {
        b.best(|| {
            let mut v: Vec<(u32, f32)> = b.ids.iter().copied().zip(b.xs.iter().copied()).collect();
            v.par_sort_unstable_by_key(|p| p.0);
            let mut runs: Vec<(u32, f32)> = Vec::new();
            for (id, x) in v {
                match runs.last_mut() {
                    Some((last, sum)) if *last == id => *sum += x,
                    _ => runs.push((id, x)),
                }
            }
            runs
        })
    }),
    bytes_per_element: None,
};

static GROUP_COUNT: Baseline = Baseline {
    label: "rayon par_sort_unstable + run counts",
    measure: Measure::Host(|b| {
        b.best(|| {
            let mut v = b.ids.clone();
            v.par_sort_unstable();
            let mut runs: Vec<(u32, usize)> = Vec::new();
            for id in v {
                match runs.last_mut() {
                    Some((last, count)) if *last == id => *count += 1,
                    _ => runs.push((id, 1)),
                }
            }
            runs
        })
    }),
    bytes_per_element: None,
};
static DISTINCT_DENSE: Baseline = Baseline {
    label: "rayon dense per-chunk marks",
    measure: Measure::Host(|b| {
        b.best(|| {
            let seen = per_chunk_sums(&b.ids, key_chunk(b.n), ID_KEYS, |h: &mut [u32], k| {
                h[*k as usize] |= 1
            });
            (0u32..)
                .zip(seen)
                .filter(|(_, s)| *s > 0)
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        })
    }),
    bytes_per_element: None,
};

static DISTINCT: Baseline = Baseline {
    label: "rayon par_sort_unstable + dedup",
    measure: Measure::Host(|b| {
        b.best(|| {
            let mut v = b.ids.clone();
            v.par_sort_unstable();
            v.dedup();
            v
        })
    }),
    bytes_per_element: None,
};
pub(super) static MEMCPY: Baseline = Baseline {
    label: "memcpy",
    measure: Measure::Host(|b| {
        let mut dst = vec![0f32; b.n];
        b.best(|| {
            dst.par_chunks_mut(1 << 16)
                .zip(b.xs.par_chunks(1 << 16))
                .for_each(|(d, s)| d.copy_from_slice(s))
        })
    }),
    bytes_per_element: None,
};
static TUNED_FUSED: Baseline = tuned(|b| b.best(|| tuned::fused_f32(&b.xs)));
static TUNED_SUM: Baseline = tuned(|b| b.best(|| tuned::sum_f32(&b.xs)));
static TUNED_MAX: Baseline = tuned(|b| b.best(|| tuned::max_f32(&b.xs)));
static TUNED_ARGMAX: Baseline = tuned(|b| b.best(|| tuned::argmax_f32(&b.xs)));
static TUNED_SQUARES_F64: Baseline = tuned(|b| b.best(|| tuned::squares_f64(&b.xd)));
static TUNED_MAX_F64: Baseline = tuned(|b| b.best(|| tuned::max_f64(&b.xd)));
static TUNED_SUM_I64: Baseline = tuned(|b| b.best(|| tuned::sum_i64(&b.xl)));
static TUNED_MAX_I64: Baseline = tuned(|b| b.best(|| tuned::max_i64(&b.xl)));
static TUNED_FILTER: Baseline = tuned(|b| b.best(|| tuned::filter_below_500(&b.xs)));
static TUNED_FILTER_NOISY: Baseline = tuned(|b| b.best(|| tuned::filter_below_500(&b.noisy)));
static READ: Baseline = Baseline {
    label: "read",
    measure: Measure::Host(|b| {
        b.best(|| {
            b.xs.par_chunks(1 << 16)
                .map(|c| c.iter().fold(0u32, |a, x| a ^ x.to_bits()))
                .reduce(|| 0, |a, b| a ^ b)
        })
    }),
    bytes_per_element: None,
};

/// The filter baseline: the elements below 500, in order.
/// The `k` largest of `xs` in `f32::total_cmp` order, largest first: each chunk selects its
/// `k` largest in place (a copy), then the candidates are selected and sorted.
fn rayon_top_k(xs: &[f32], k: usize) -> Vec<f32> {
    let desc = |a: &f32, b: &f32| b.total_cmp(a);
    let best = |mut v: Vec<f32>| {
        if v.len() > k {
            v.select_nth_unstable_by(k - 1, desc);
            v.truncate(k);
        }
        v
    };
    let candidates: Vec<f32> = xs
        .par_chunks(1 << 16)
        .flat_map_iter(|c| best(c.to_vec()))
        .collect();
    let mut top = best(candidates);
    top.sort_unstable_by(desc);
    top
}

fn rayon_filter(xs: &[f32]) -> Vec<f32> {
    xs.par_iter().copied().filter(|x| *x < 500.0).collect()
}

/// The running sum in two passes over chunks, as kiln's chunked plan does: the chunks' sums,
/// their running sum on one thread, then each chunk's running values from its carry.
fn rayon_scan(xs: &[f32]) -> Vec<f32> {
    let chunk = 1 << 16;
    let sums: Vec<f32> = xs.par_chunks(chunk).map(|c| c.iter().sum()).collect();
    let mut carry = 0f32;
    let carries: Vec<f32> = sums
        .iter()
        .map(|s| {
            let before = carry;
            carry += s;
            before
        })
        .collect();
    let mut out = vec![0f32; xs.len()];
    out.par_chunks_mut(chunk)
        .zip(xs.par_chunks(chunk))
        .zip(&carries)
        .for_each(|((o, x), c)| {
            let mut acc = *c;
            for (o, x) in o.iter_mut().zip(x) {
                acc += x;
                *o = acc;
            }
        });
    out
}

/// kiln's map of `xs`.
fn map(b: &Bench, ctx: &Context) -> Result<f64, Error> {
    Ok(b.best(|| ctx.from(&b.xs).map(|x| x * 2.0 + 1.0).to_vec().unwrap()))
}

/// kiln's sum of `xs`.
fn sum(b: &Bench, ctx: &Context) -> Result<f64, Error> {
    Ok(b.best(|| ctx.from(&b.xs).sum().unwrap()))
}

/// kiln's filter of `xs` into a new `Vec`.
fn filter(b: &Bench, ctx: &Context, xs: &[f32]) -> f64 {
    b.best(|| ctx.from(xs).filter(|x| x.lt(500.0)).to_vec().unwrap())
}

pub(super) static CASES: &[Case] = &[
    case("map to_vec", map, &MAP),
    tuned_case(
        "map-filter-map-sum",
        |b, ctx| {
            Ok(b.best(|| {
                ctx.from(&b.xs)
                    .map(|x| x * 2.0)
                    .filter(|x| x.gt(1000.0))
                    .map(|x| x + 100.0)
                    .sum()
                    .unwrap()
            }))
        },
        &TUNED_FUSED,
        &FUSED,
    ),
    tuned_case("sum", sum, &TUNED_SUM, &SUM),
    tuned_case(
        "max",
        |b, ctx| Ok(b.best(|| ctx.from(&b.xs).max().unwrap())),
        &TUNED_MAX,
        &MAX,
    ),
    tuned_case(
        "argmax",
        |b, ctx| Ok(b.best(|| ctx.from(&b.xs).argmax().unwrap())),
        &TUNED_ARGMAX,
        &ARGMAX,
    ),
    needing(
        Needs::F64,
        case(
            "map to_vec (f64)",
            |b, ctx| Ok(b.best(|| ctx.from(&b.xd).map(|x| x * 2.0 + 1.0).to_vec().unwrap())),
            &MAP_F64,
        ),
    ),
    needing(
        Needs::F64,
        tuned_case(
            "sum of squares (f64)",
            |b, ctx| Ok(b.best(|| ctx.from(&b.xd).map(|x| x * x).sum().unwrap())),
            &TUNED_SQUARES_F64,
            &SQUARES_F64,
        ),
    ),
    needing(
        Needs::F64,
        tuned_case(
            "max (f64)",
            |b, ctx| Ok(b.best(|| ctx.from(&b.xd).max().unwrap())),
            &TUNED_MAX_F64,
            &MAX_F64,
        ),
    ),
    needing(
        Needs::I64,
        case(
            "map to_vec (i64)",
            |b, ctx| Ok(b.best(|| ctx.from(&b.xl).map(|x| x * 3 + 1).to_vec().unwrap())),
            &MAP_I64,
        ),
    ),
    needing(
        Needs::I64,
        tuned_case(
            "sum (i64)",
            |b, ctx| Ok(b.best(|| ctx.from(&b.xl).sum().unwrap())),
            &TUNED_SUM_I64,
            &SUM_I64,
        ),
    ),
    needing(
        Needs::I64,
        tuned_case(
            "max (i64)",
            |b, ctx| Ok(b.best(|| ctx.from(&b.xl).max().unwrap())),
            &TUNED_MAX_I64,
            &MAX_I64,
        ),
    ),
    tuned_case(
        "filter to_vec (50%)",
        |b, ctx| Ok(filter(b, ctx, &b.xs)),
        &TUNED_FILTER,
        &FILTER,
    ),
    tuned_case(
        "filter to_vec (50%, kept at random)",
        |b, ctx| Ok(filter(b, ctx, &b.noisy)),
        &TUNED_FILTER_NOISY,
        &FILTER_NOISY,
    ),
    case(
        "scan (running sum) to_vec",
        |b, ctx| Ok(b.best(|| ctx.from(&b.xs).scan(0.0, |a, b| a + b).to_vec().unwrap())),
        &SCAN,
    ),
    case(
        "histogram (256 bins of u8)",
        |b, ctx| Ok(b.best(|| ctx.from(&b.levels).histogram(256).unwrap())),
        &HISTOGRAM,
    ),
    case(
        "histogram (65536 bins of u16)",
        |b, ctx| {
            let counts = ctx.from(&b.samples).histogram(1 << 16)?;
            assert!(counts == b.samples_histogram, "histogram of 65536 bins");
            Ok(b.best(|| ctx.from(&b.samples).histogram(1 << 16).unwrap()))
        },
        &WIDE_HISTOGRAM,
    ),
    case(
        "sort to_vec (radix, stable)",
        |b, ctx| Ok(b.best(|| ctx.from(&b.xs).sort().to_vec().unwrap())),
        &SORT,
    ),
    case(
        "top_k 100 (f32, radix select)",
        |b, ctx| {
            let got = ctx.from(&b.xs).top_k(TOP_K)?;
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&got) == bits(&rayon_top_k(&b.xs, TOP_K)), "top_k");
            Ok(b.best(|| ctx.from(&b.xs).top_k(TOP_K).unwrap()))
        },
        &TOP_K_SELECT,
    ),
    case(
        "group_by sum (256 u8 keys, dense)",
        |b, ctx| {
            Ok(b.best(|| {
                let groups = ctx.from(&b.levels).zip(&b.xs).group_by(|(k, _)| k);
                groups.sum(|(_, x)| x).unwrap()
            }))
        },
        &GROUP_SUM,
    ),
    tuned_case(
        "group_by count (65521 u32 keys, dense)",
        |b, ctx| Ok(b.best(|| ctx.from(&b.ids).group_by(|k| k).count().unwrap())),
        &GROUP_COUNT_DENSE,
        &GROUP_COUNT,
    ),
    tuned_case(
        "group_by sum (65521 u32 keys, dense)",
        |b, ctx| {
            Ok(b.best(|| {
                let groups = ctx.from(&b.ids).zip(&b.xs).group_by(|(k, _)| k);
                groups.sum(|(_, x)| x).unwrap()
            }))
        },
        &GROUP_SUM_WIDE,
        &GROUP_SUM_SORTED,
    ),
    tuned_case(
        "distinct to_vec (65521 u32 values)",
        |b, ctx| Ok(b.best(|| ctx.from(&b.ids).distinct().to_vec().unwrap())),
        &DISTINCT_DENSE,
        &DISTINCT,
    ),
    case("map to_vec vs parallel memcpy", map, &MEMCPY),
    case(
        "map write_to vs parallel memcpy",
        |b, ctx| {
            let mut reused = vec![0f32; b.n];
            Ok(b.best(|| {
                ctx.from(&b.xs)
                    .map(|x| x * 2.0 + 1.0)
                    .write_to(&mut reused)
                    .unwrap()
            }))
        },
        &MEMCPY,
    ),
    case("sum vs parallel read", sum, &READ),
];
