//! The executor: runs a [`Plan`] with its compiled kernels on the context's device.

use super::{Binding, Launch, Place, Plan, Rows, Step};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::plan_cache::{CompiledPlan, ParamSlot};
use kiln_backend::{DeviceMemory, LaunchArg};
use kiln_ir::{Access, ScalarType, ScalarValue};
use std::sync::Arc;

/// Where an input column of a plan lives.
#[derive(Clone)]
pub(crate) enum Source<'a> {
    /// A host slice's bytes.
    Host(&'a [u8]),
    /// Device memory of the context's backend.
    Device(&'a dyn DeviceMemory),
    /// Device memory of the context's backend that the query holds (rows it ran into device
    /// columns before a stage that numbers them).
    Owned(Arc<dyn DeviceMemory>),
    /// Host bytes the query holds (a column of a host slice of multi-column rows).
    Copied(Arc<HostColumn>),
}

/// One column of a host slice of multi-column rows, split out of it; kept in words so that
/// values of every type lie aligned.
pub(crate) struct HostColumn {
    words: Vec<u64>,
    len: usize,
}

impl HostColumn {
    /// Zeroed room for `len` bytes, or `HostOutOfMemory`.
    pub(crate) fn zeroed(len: usize) -> Result<HostColumn> {
        let words = crate::error::zeroed_host_vec(len.div_ceil(8), "a column of the rows")?;
        Ok(HostColumn { words, len })
    }

    /// The bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes fit in the words (`zeroed`), and u64s may be read as bytes.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }

    /// The bytes, to write.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; every byte pattern is a valid u64.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
}

/// A temporary's memory.
enum TempMemory {
    /// Zeroed host words (as many as hold the temporary's bytes).
    Host(Vec<u64>),
    /// Device memory.
    Device(Arc<dyn DeviceMemory>),
}

/// Temporaries a launch binds from a list on the stack (plans with more allocate it).
const INLINE_TEMPS: usize = 8;

/// A plan being run: [`Run::start`] runs the steps that need no outputs, then the caller,
/// knowing [`Run::rows`], provides them to [`Run::finish`].
pub(crate) struct Run<'c> {
    ctx: &'c Context,
    plan: Plan,
    kernels: CompiledPlan,
    temps: Vec<TempMemory>,
    /// The first step not run yet.
    next: usize,
    /// The rows the outputs get (known once `start` returns).
    rows: usize,
}

/// A kiln bug: a plan that disagrees with its kernels.
fn mismatch(plan: &Plan, what: String) -> Error {
    Error::Internal {
        what: format!("the {} plan {what}", plan.terminal),
    }
}

impl<'c> Run<'c> {
    /// Allocates the plan's temporaries and runs its steps up to the first that binds an
    /// output (every step, for a plan without outputs), reading `inputs` (one per input
    /// column). Returns the first allocation, launch or binding error.
    pub(crate) fn start(
        ctx: &'c Context,
        plan: Plan,
        kernels: CompiledPlan,
        inputs: &[Source<'_>],
    ) -> Result<Run<'c>> {
        let temps = plan
            .temps
            .iter()
            .map(|t| {
                let bytes = t.len * t.ty.size() as usize;
                Ok(match t.place {
                    Place::Host => TempMemory::Host(crate::error::zeroed_host_vec(
                        bytes.div_ceil(8).max(1),
                        t.role,
                    )?),
                    Place::Device => TempMemory::Device(ctx.backend().alloc(bytes)?),
                })
            })
            .collect::<Result<_>>()?;
        let rows = match plan.rows {
            Rows::Known(n) => n,
            Rows::None | Rows::Counted | Rows::InTemps => 0,
        };
        let mut run = Run {
            ctx,
            plan,
            kernels,
            temps,
            next: 0,
            rows,
        };
        while run.next < run.plan.steps.len() && !run.plan.writes_outputs(&run.plan.steps[run.next])
        {
            run.step(run.next, inputs, &mut [])?;
            run.next += 1;
        }
        Ok(run)
    }

    /// How many rows the outputs get.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Runs the remaining steps, writing the outputs (`outputs`: one per output column, room
    /// for [`Self::rows`] rows; a step that writes them is skipped when there are none, as the
    /// plan's printout says), and
    /// returns the plan's result values (none when the host reads them whole from the
    /// temporaries). Returns the first launch, download or binding error.
    pub(crate) fn finish(
        &mut self,
        inputs: &[Source<'_>],
        outputs: Vec<LaunchArg<'_>>,
    ) -> Result<Vec<ScalarValue>> {
        let mut outputs: Vec<Option<LaunchArg>> = outputs.into_iter().map(Some).collect();
        while self.next < self.plan.steps.len() {
            let s = self.next;
            self.next += 1;
            if self.rows == 0 && self.plan.writes_outputs(&self.plan.steps[s]) {
                continue;
            }
            self.step(s, inputs, &mut outputs)?;
        }
        let plan = &self.plan;
        if plan.rows == Rows::InTemps {
            return Ok(Vec::new());
        }
        plan.result
            .clone()
            .map(|t| {
                let ty = plan.temps[t].ty;
                match &self.temps[t] {
                    TempMemory::Host(words) => Ok(read_value(words, 0, ty)),
                    TempMemory::Device(m) => {
                        let mut w = [0u64];
                        self.ctx
                            .backend()
                            .download(&**m, &mut bytes_mut(&mut w)[..ty.size() as usize])?;
                        Ok(read_value(&w, 0, ty))
                    }
                }
            })
            .collect()
    }

    /// Runs step `s`.
    /// The whole of temporary `t`, as words (its values' bytes, then zeros). Fails as a
    /// download does.
    pub(crate) fn temp_words(&self, t: usize) -> Result<Vec<u64>> {
        let temp = &self.plan.temps[t];
        let bytes = temp.len * temp.ty.size() as usize;
        let mut words = crate::error::zeroed_host_vec(bytes.div_ceil(8).max(1), temp.role)?;
        match &self.temps[t] {
            TempMemory::Host(w) => words.copy_from_slice(w),
            TempMemory::Device(m) => self
                .ctx
                .backend()
                .download(&**m, &mut bytes_mut(&mut words)[..bytes])?,
        }
        Ok(words)
    }

    fn step(
        &mut self,
        s: usize,
        inputs: &[Source<'_>],
        outputs: &mut [Option<LaunchArg<'_>>],
    ) -> Result<()> {
        let plan = &self.plan;
        match &plan.steps[s] {
            Step::Launch(l) => {
                // Each temporary is taken when bound, so a launch binds it once; a launch
                // that binds none skips making the list.
                let binds_temps = plan
                    .bindings_of(l)
                    .iter()
                    .any(|b| matches!(b, Binding::Temp(_)));
                let (mut inline, mut spilled): ([Option<&mut TempMemory>; INLINE_TEMPS], Vec<_>) =
                    Default::default();
                let temps: &mut [Option<&mut TempMemory>] = match binds_temps {
                    false => &mut [],
                    true if self.temps.len() <= INLINE_TEMPS => {
                        let count = self.temps.len();
                        for (slot, t) in inline.iter_mut().zip(self.temps.iter_mut()) {
                            *slot = Some(t);
                        }
                        &mut inline[..count]
                    }
                    true => {
                        spilled.extend(self.temps.iter_mut().map(Some));
                        &mut spilled
                    }
                };
                launch(self.ctx, plan, &self.kernels, l, temps, inputs, outputs)
            }
            Step::SumCounts { counts } => {
                let n = plan.temps[*counts].len;
                let words = self.temp_words(*counts)?;
                self.rows = u32s(&words, n).iter().map(|c| *c as usize).sum();
                Ok(())
            }
            Step::ScanCounts {
                counts,
                per_group,
                offsets,
            } => {
                let n = plan.temps[*counts].len;
                let sums: Vec<u32> = match &self.temps[*counts] {
                    TempMemory::Host(w) => u32s(w, n)
                        .chunks(*per_group as usize)
                        .map(|c| c.iter().sum())
                        .collect(),
                    TempMemory::Device(_) => {
                        return Err(mismatch(plan, "scans counts on the device".into()))
                    }
                };
                if plan.temps[*offsets].len <= sums.len() {
                    return Err(mismatch(plan, "scans into too short a temporary".into()));
                }
                let TempMemory::Host(out) = &mut self.temps[*offsets] else {
                    return Err(mismatch(plan, "scans into the device".into()));
                };
                let out = u32s_mut(out, sums.len() + 1);
                let mut total = 0u32;
                for (o, s) in out.iter_mut().zip(&sums) {
                    *o = total;
                    total += s;
                }
                out[sums.len()] = total;
                self.rows = total as usize;
                Ok(())
            }
        }
    }
}

/// Launches `l` of `plan`, binding each parameter of its compiled kernel: the call's
/// constants in their places, the rest from the launch's bindings, checked against the
/// parameters' kinds and names. `temps` are the plan's temporaries, each taken when bound.
fn launch(
    ctx: &Context,
    plan: &Plan,
    kernels: &CompiledPlan,
    l: &Launch,
    temps: &mut [Option<&mut TempMemory>],
    inputs: &[Source<'_>],
    outputs: &mut [Option<LaunchArg<'_>>],
) -> Result<()> {
    let ready = kernels.kernel(l.kernel);
    let name = &ready.kernel.name;
    let mut bindings = plan.bindings_of(l).iter();
    let mut args = Vec::with_capacity(ready.kernel.params.len());
    for param in &ready.kernel.params {
        let bound = match param {
            ParamSlot::Constant(j) => {
                args.push(ready.constant(*j));
                continue;
            }
            _ => bindings.next(),
        };
        let arg = match (param, bound) {
            (ParamSlot::Value(p), Some(Binding::Scalar(s, v))) if p == s => {
                LaunchArg::Value(v.to_le_bytes().to_vec())
            }
            (ParamSlot::Buffer(..), Some(Binding::Input(c))) => match inputs.get(*c) {
                Some(Source::Host(b)) => LaunchArg::Read(b),
                Some(Source::Device(m)) => LaunchArg::Device(*m),
                Some(Source::Owned(m)) => LaunchArg::Device(&**m),
                Some(Source::Copied(c)) => LaunchArg::Read(c.bytes()),
                None => return Err(mismatch(plan, format!("reads no input {c}"))),
            },
            (ParamSlot::Buffer(_, access), Some(Binding::Temp(t))) => {
                let len = plan.temps[*t].len * plan.temps[*t].ty.size() as usize;
                match temps.get_mut(*t).and_then(Option::take) {
                    Some(TempMemory::Device(m)) => LaunchArg::Device(&**m),
                    Some(TempMemory::Host(w)) => match access {
                        Access::Read => LaunchArg::Read(&bytes(w)[..len]),
                        _ => LaunchArg::ReadWrite(&mut bytes_mut(w)[..len]),
                    },
                    None => return Err(mismatch(plan, format!("binds t{t} twice in {name}"))),
                }
            }
            (ParamSlot::Buffer(..), Some(Binding::Output(c))) => {
                match outputs.get_mut(*c).and_then(Option::take) {
                    Some(out) => out,
                    None => return Err(mismatch(plan, format!("has no output {c} for {name}"))),
                }
            }
            (param, bound) => {
                return Err(mismatch(
                    plan,
                    format!("binds {bound:?} to parameter {param:?} of {name}"),
                ))
            }
        };
        args.push(arg);
    }
    if let Some(extra) = bindings.next() {
        return Err(mismatch(
            plan,
            format!("binds {extra:?} past {name}'s parameters"),
        ));
    }
    ctx.launch_compiled(name, &*ready.kernel.compiled, &l.grid, &mut args)
}

/// Value `i` of type `ty` in word storage holding values of `ty` one after another.
pub(crate) fn read_value(words: &[u64], i: usize, ty: ScalarType) -> ScalarValue {
    let bits = match ty.size() {
        4 => u32s(words, i + 1)[i] as u64,
        8 => words[i],
        size => {
            let (b, size) = (bytes(words), size as usize);
            let mut v = [0u8; 8];
            v[..size].copy_from_slice(&b[i * size..(i + 1) * size]);
            u64::from_le_bytes(v)
        }
    };
    ScalarValue::from_bits(ty, bits)
}

fn bytes(w: &[u64]) -> &[u8] {
    // SAFETY: u64 storage viewed as bytes.
    unsafe { std::slice::from_raw_parts(w.as_ptr() as *const u8, w.len() * 8) }
}

fn bytes_mut(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 storage viewed as bytes.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr() as *mut u8, w.len() * 8) }
}

fn u32s(w: &[u64], n: usize) -> &[u32] {
    // SAFETY: u64 storage viewed as u32s (alignment 8 >= 4), `n` within it.
    unsafe { &std::slice::from_raw_parts(w.as_ptr() as *const u32, w.len() * 2)[..n] }
}

fn u32s_mut(w: &mut [u64], n: usize) -> &mut [u32] {
    // SAFETY: u64 storage viewed as u32s (alignment 8 >= 4), `n` within it.
    unsafe { &mut std::slice::from_raw_parts_mut(w.as_mut_ptr() as *mut u32, w.len() * 2)[..n] }
}
