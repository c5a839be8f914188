//! Joins of `n` fact rows with a dimension of 65521 rows (each fact row matches one) and a
//! sum over the pairs, against the hash join a Rust engineer writes with rayon: a `HashMap`
//! of the dimension, probed by every fact row in parallel.

use super::{Baseline, Case, Measure, Needs};
use crate::data::Bench;
use kiln::prelude::*;
use rayon::prelude::*;
use std::collections::HashMap;

/// Rows of the dimension: the values `ids` take.
const DIMENSION: u32 = 65_521;

/// The dimension's keys: `0..65521` (dense), or as many distinct keys spread over `u32`
/// (multiplying by an odd constant permutes `u32`).
fn dimension_keys(sparse: bool) -> Vec<u32> {
    (0..DIMENSION)
        .map(|i| {
            if sparse {
                i.wrapping_mul(2_654_435_761)
            } else {
                i
            }
        })
        .collect()
}

/// The value each dimension row carries.
fn payload(keys: &[u32]) -> Vec<u32> {
    keys.iter().map(|k| k ^ 0x9e37_79b9).collect()
}

/// The fact rows' keys: each id's dimension key.
fn fact_keys(b: &Bench, keys: &[u32]) -> Vec<u32> {
    b.ids.iter().map(|i| keys[*i as usize]).collect()
}

/// The rayon hash join: the wrapping sum of the payloads the fact rows match.
fn rayon_join_sum(facts: &[u32], keys: &[u32], values: &[u32]) -> u32 {
    let table: HashMap<u32, u32> = keys.iter().copied().zip(values.iter().copied()).collect();
    facts
        .par_iter()
        .map(|k| table.get(k).copied().unwrap_or(0))
        .reduce(|| 0, u32::wrapping_add)
}

/// The baseline for dense or sparse keys.
fn rayon_side(b: &Bench, sparse: bool) -> f64 {
    let keys = dimension_keys(sparse);
    let values = payload(&keys);
    let facts = fact_keys(b, &keys);
    b.best(|| rayon_join_sum(&facts, &keys, &values))
}

/// kiln's join and sum, checked against the baseline's answer first.
fn kiln_side(b: &Bench, ctx: &Context, sparse: bool) -> Result<f64, Error> {
    let keys = dimension_keys(sparse);
    let values = payload(&keys);
    let facts = fact_keys(b, &keys);
    let run = || {
        let dimension = ctx.from(&keys).zip(&values);
        ctx.from(&facts)
            .join(dimension, |k| k, |(k, _)| k)
            .map(|(_, (_, v))| v)
            .sum()
    };
    assert_eq!(run()?, rayon_join_sum(&facts, &keys, &values), "join sum");
    Ok(b.best(|| run().unwrap()))
}

static DENSE: Baseline = Baseline {
    label: "rayon hash join (HashMap build, parallel probe)",
    measure: Measure::Host(|b| rayon_side(b, false)),
    bytes_per_element: None,
};
static SPARSE: Baseline = Baseline {
    label: "rayon hash join (HashMap build, parallel probe)",
    measure: Measure::Host(|b| rayon_side(b, true)),
    bytes_per_element: None,
};

pub(super) static CASES: &[Case] = &[
    Case {
        name: "join + sum (65521 dense u32 keys, direct table)",
        needs: Needs::Any,
        kiln: |b, ctx| kiln_side(b, ctx, false),
        baseline: &DENSE,
        naive: None,
        bytes_per_element: None,
    },
    Case {
        name: "join + sum (65521 sparse u32 keys, hash table)",
        needs: Needs::Any,
        kiln: |b, ctx| kiln_side(b, ctx, true),
        baseline: &SPARSE,
        naive: None,
        bytes_per_element: None,
    },
];
