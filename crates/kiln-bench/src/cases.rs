//! The table of cases: what kiln runs, what it is compared with, and what a device must have
//! for it. [`run`](crate::run) runs every case on every device in table order; each baseline
//! is measured once (on the host) or once per device.

use crate::data::Bench;
use kiln::prelude::*;

mod copies;
mod gallery;
mod joins;
mod queries;
mod resident;
mod streams;
mod tuned;

/// kiln's side of a case: its best time in milliseconds on a device.
pub type KilnSide = fn(&Bench, &Context) -> Result<f64, Error>;

/// How a baseline is measured.
pub enum Measure {
    /// On the host, once per run.
    Host(fn(&Bench) -> f64),
    /// On each device, once per device (the device's own copy, a naive kernel).
    Device(fn(&Bench, &Context) -> Result<f64, Error>),
}

/// What a case is compared with; cases that share one share its measurement.
pub struct Baseline {
    /// How the table names it.
    pub label: &'static str,
    /// How it is timed.
    pub measure: Measure,
    /// Bytes it moves per element, for the bandwidth line; `None` when that means nothing.
    pub bytes_per_element: Option<usize>,
}

/// What a device must have for a case to run there.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Needs {
    /// Nothing more.
    Any,
    /// f64 arithmetic, and room for buffers of `n` f64.
    F64,
    /// i64 arithmetic, and room for buffers of `n` i64.
    I64,
    /// Being the CPU backend (the gallery's rayon comparisons).
    Cpu,
}

/// One row of the table.
pub struct Case {
    /// The case as the table names it.
    pub name: &'static str,
    /// What the device must have.
    pub needs: Needs,
    /// kiln's side.
    pub kiln: KilnSide,
    /// What it is compared with: the best code a performance engineer would write for it.
    pub baseline: &'static Baseline,
    /// The plain iterator chain most Rust code has, where the baseline is hand-tuned beyond
    /// it: a second column.
    pub naive: Option<&'static Baseline>,
    /// Bytes kiln's side moves per element, for the bandwidth line; `None` when it is not a
    /// bandwidth case.
    pub bytes_per_element: Option<usize>,
}

/// The device's copy bandwidth in GB/s: bytes read and written by its own copy of `n` f32.
pub fn copy_gbs(b: &Bench, ctx: &Context) -> Result<f64, Error> {
    let ms = resident::device_copy(b, ctx, b.n)?;
    Ok((8 * b.n) as f64 / ms / 1e6)
}

/// Every case, in the order the table prints them.
pub fn all() -> Vec<&'static Case> {
    queries::CASES
        .iter()
        .chain(joins::CASES)
        .chain(resident::CASES)
        .chain(copies::CASES)
        .chain(streams::CASES)
        .chain(gallery::CASES)
        .collect()
}
