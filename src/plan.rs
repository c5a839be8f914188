//! The plan as a value: what a query terminal runs on a device, made by the planner in the
//! query modules from the query's shape and a [`DeviceProfile`], printed by
//! [`Query::explain`](crate::Query::explain) and run by the executor ([`execute`]).
//!
//! A plan lists its kernels by name, the temporaries it allocates, and its steps: launches
//! (kernel, grid, and one binding per parameter: an input column, a temporary, an output
//! column or a named scalar) and host steps. Every grid is computed here, once, when the
//! plan is made. The compiled kernels come from the plan cache; the executor checks each
//! binding against the compiled kernel's parameters, so a plan and its kernels agree by
//! construction, not by the order arguments happen to be pushed in.

use kiln_backend::Grid;
use kiln_ir::ScalarType;
use std::fmt;
use std::ops::Range;

mod execute;
mod profile;

pub(crate) use execute::{read_value, HostColumn, Run, Source};
pub(crate) use profile::{chunks_of, grouped_groups, CHUNK, ITEM_CHUNK};
pub use profile::{DeviceProfile, PlanShape};

/// A temporary a plan allocates: `len` values of `ty`, on the host or on the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Temp {
    /// What it holds, for [`Plan`]'s printout.
    pub role: &'static str,
    /// The values' type.
    pub ty: ScalarType,
    /// How many values.
    pub len: usize,
    /// Where it lives.
    pub place: Place,
}

/// Where a temporary lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Host memory (zeroed), handed to the kernel as a host buffer: for what a host step
    /// reads or writes.
    Host,
    /// Device memory, never copied to the host unless the plan's result reads it.
    Device,
}

/// What one kernel parameter is bound to in a launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Binding {
    /// The query's input column.
    Input(usize),
    /// A temporary of the plan.
    Temp(usize),
    /// An output column of the terminal.
    Output(usize),
    /// A 32-bit scalar, with the name of the parameter it binds.
    Scalar(&'static str, u32),
}

/// A kernel launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Launch {
    /// The kernel's index in [`Plan::kernels`].
    pub kernel: usize,
    /// Its grid.
    pub grid: Grid,
    /// Its bindings in [`Plan::bindings`]: one per parameter, in order (the kernel's
    /// captured constants excepted).
    pub bindings: Range<usize>,
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Launch a kernel.
    Launch(Launch),
    /// On the host: sum the `u32` counts of temporary `counts` in runs of `per_group`, scan
    /// the sums into the exclusive offsets of temporary `offsets` followed by the total, and
    /// take the total as the plan's row count.
    ScanCounts {
        /// Temporary holding the counts.
        counts: usize,
        /// Counts per group.
        per_group: u32,
        /// Temporary receiving the offsets and the total.
        offsets: usize,
    },
    /// Download the first `len` `u32` counts of device temporary `counts` and take their sum
    /// as the plan's row count.
    SumCounts {
        /// Temporary holding the counts.
        counts: usize,
    },
}

/// How many rows a plan writes to its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rows {
    /// No outputs: the plan's result is its [`Plan::result`] values.
    None,
    /// A known count.
    Known(usize),
    /// The total a [`Step::ScanCounts`] or [`Step::SumCounts`] finds.
    Counted,
    /// No outputs and no result values: the host reads the whole of the [`Plan::result`]
    /// temporaries.
    InTemps,
}

/// What a query terminal runs: its kernels, temporaries and steps, for one device profile
/// and one input length. Printed by [`Query::explain`](crate::Query::explain); its
/// `Display` is the plan's description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The terminal family (`to_vec`, `reduce`).
    pub(crate) terminal: &'static str,
    /// The profile it was made for.
    pub(crate) profile: DeviceProfile,
    /// The plan cache key's name and settings (unused ones zero): with the query, everything
    /// the kernels
    /// depend on.
    pub(crate) key: (&'static str, [u32; 3]),
    /// The kernels' names, by index.
    pub(crate) kernels: Vec<&'static str>,
    /// The temporaries.
    pub(crate) temps: Vec<Temp>,
    /// The launches' bindings, one after another.
    pub(crate) bindings: Vec<Binding>,
    /// The steps, in order.
    pub(crate) steps: Vec<Step>,
    /// How many rows the outputs get.
    pub(crate) rows: Rows,
    /// The temporaries whose first value is the plan's result.
    pub(crate) result: Range<usize>,
}

impl Plan {
    /// A plan with no kernels, temporaries or steps yet.
    pub(crate) fn new(
        terminal: &'static str,
        profile: DeviceProfile,
        key: (&'static str, [u32; 3]),
        rows: Rows,
    ) -> Plan {
        Plan {
            terminal,
            profile,
            key,
            // Room for the largest plans of the terminals, so that making a plan allocates
            // each list once: it runs on every call.
            kernels: Vec::with_capacity(2),
            temps: Vec::with_capacity(4),
            bindings: Vec::with_capacity(16),
            steps: Vec::with_capacity(3),
            rows,
            result: 0..0,
        }
    }

    /// Adds a kernel; returns its index.
    pub(crate) fn kernel(&mut self, name: &'static str) -> usize {
        self.kernels.push(name);
        self.kernels.len() - 1
    }

    /// Adds one temporary of `len` values per type of `types`; returns their numbers.
    pub(crate) fn temps(
        &mut self,
        role: &'static str,
        types: &[ScalarType],
        len: usize,
        place: Place,
    ) -> Range<usize> {
        let first = self.temps.len();
        self.temps.extend(types.iter().map(|&ty| Temp {
            role,
            ty,
            len,
            place,
        }));
        first..self.temps.len()
    }

    /// Adds a launch of kernel `kernel` on `grid` with `bindings`.
    pub(crate) fn launch(
        &mut self,
        kernel: usize,
        grid: Grid,
        bindings: impl IntoIterator<Item = Binding>,
    ) {
        let first = self.bindings.len();
        self.bindings.extend(bindings);
        self.steps.push(Step::Launch(Launch {
            kernel,
            grid,
            bindings: first..self.bindings.len(),
        }));
    }

    /// Appends the steps of `sub` as steps of this plan: its kernels join this plan's (a
    /// kernel of the same name is the same kernel), its temporaries become new ones, and its
    /// input `i` is bound to `inputs[i]` and its output `j` to `outputs[j]`. A plan made to
    /// run on its own thus runs inside another, on the outer plan's memory.
    pub(crate) fn inline(&mut self, sub: &Plan, inputs: &[Binding], outputs: &[Binding]) {
        let kernels: Vec<usize> = sub
            .kernels
            .iter()
            .map(|name| match self.kernels.iter().position(|k| k == name) {
                Some(k) => k,
                None => self.kernel(name),
            })
            .collect();
        let first_temp = self.temps.len();
        self.temps.extend(sub.temps.iter().cloned());
        let rebind = |b: &Binding| match b {
            Binding::Input(i) => inputs[*i].clone(),
            Binding::Output(j) => outputs[*j].clone(),
            Binding::Temp(t) => Binding::Temp(first_temp + t),
            Binding::Scalar(..) => b.clone(),
        };
        for step in &sub.steps {
            match step {
                Step::Launch(l) => {
                    let bindings: Vec<Binding> = sub.bindings_of(l).iter().map(rebind).collect();
                    self.launch(kernels[l.kernel], l.grid.clone(), bindings)
                }
                Step::ScanCounts {
                    counts,
                    per_group,
                    offsets,
                } => self.steps.push(Step::ScanCounts {
                    counts: first_temp + counts,
                    per_group: *per_group,
                    offsets: first_temp + offsets,
                }),
                Step::SumCounts { counts } => self.steps.push(Step::SumCounts {
                    counts: first_temp + counts,
                }),
            }
        }
    }

    /// The bindings of launch `l`.
    pub(crate) fn bindings_of(&self, l: &Launch) -> &[Binding] {
        &self.bindings[l.bindings.clone()]
    }

    /// True if `step` writes the plan's outputs.
    pub(crate) fn writes_outputs(&self, step: &Step) -> bool {
        match step {
            Step::Launch(l) => self
                .bindings_of(l)
                .iter()
                .any(|b| matches!(b, Binding::Output(_))),
            Step::ScanCounts { .. } | Step::SumCounts { .. } => false,
        }
    }
}

/// Bindings of the temporaries `temps`.
pub(crate) fn temp_bindings(temps: Range<usize>) -> impl Iterator<Item = Binding> + Clone {
    temps.map(Binding::Temp)
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Binding::Input(c) => write!(f, "in{c}"),
            Binding::Temp(t) => write!(f, "t{t}"),
            Binding::Output(c) => write!(f, "out{c}"),
            Binding::Scalar(name, v) => write!(f, "{name}={v}"),
        }
    }
}

fn grid_text(g: &Grid) -> String {
    format!("{} group(s) x {}", g.groups[0], g.group_size[0])
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = match self.profile.shape {
            PlanShape::Grouped => "grouped",
            _ => "chunked",
        };
        writeln!(f, "{} plan ({shape})", self.terminal)?;
        for (t, temp) in self.temps.iter().enumerate() {
            let place = match temp.place {
                Place::Host => "host",
                Place::Device => "device",
            };
            writeln!(
                f,
                "  t{t}: {}[{}] on the {place} ({})",
                temp.ty.name(),
                temp.len,
                temp.role
            )?;
        }
        for (s, step) in self.steps.iter().enumerate() {
            match step {
                Step::Launch(l) => {
                    let args: Vec<String> =
                        self.bindings_of(l).iter().map(|b| b.to_string()).collect();
                    let when = match (self.writes_outputs(step), self.rows) {
                        (true, Rows::Counted) => " (when rows > 0)",
                        _ => "",
                    };
                    writeln!(
                        f,
                        "  {}. launch {} on {}: {}{when}",
                        s + 1,
                        self.kernels[l.kernel],
                        grid_text(&l.grid),
                        args.join(", ")
                    )?
                }
                Step::ScanCounts {
                    counts,
                    per_group,
                    offsets,
                } => writeln!(
                    f,
                    "  {}. host: sum t{counts} in runs of {per_group}, exclusive scan into t{offsets}; rows = total",
                    s + 1
                )?,
                Step::SumCounts { counts } => writeln!(
                    f,
                    "  {}. host: download t{counts} and sum it; rows = sum",
                    s + 1
                )?,
            }
        }
        match self.rows {
            Rows::None => {
                let from: Vec<String> = self.result.clone().map(|t| format!("t{t}[0]")).collect();
                writeln!(f, "  result: {}", from.join(", "))
            }
            Rows::Known(n) => writeln!(f, "  result: {n} row(s) in the outputs"),
            Rows::Counted => writeln!(f, "  result: the counted rows in the outputs"),
            Rows::InTemps => {
                let from: Vec<String> = self.result.clone().map(|t| format!("t{t}")).collect();
                writeln!(f, "  result: {}, read whole on the host", from.join(", "))
            }
        }
    }
}
