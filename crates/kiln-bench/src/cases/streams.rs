//! Streams: chunks uploaded, computed and downloaded on three streams, so each chunk's copies
//! run beside another chunk's kernel, against the same work done in order on the context.

use super::{Baseline, Case, Measure, Needs};
use crate::data::Bench;
use kiln::lang::{Index1D, ViewMut};
use kiln::prelude::*;

/// Chunks the input is cut into.
const CHUNKS: usize = 8;

/// Enough arithmetic per element that a chunk's kernel takes about as long as its copies.
#[kiln::kernel]
fn polish(i: Index1D, x: ViewMut<f32>) {
    let mut v = x[i];
    for _k in 0u32..24 {
        v = v * 0.999f32 + 0.5f32;
    }
    x[i] = v;
}

/// The input's chunks.
fn chunks(b: &Bench) -> Vec<&[f32]> {
    b.xs.chunks(b.n.div_ceil(CHUNKS)).collect()
}

/// Every chunk uploaded, polished and downloaded in turn by the context's own calls.
fn in_order(b: &Bench, ctx: &Context) -> Result<f64, Error> {
    let parts = chunks(b);
    let mut device: Vec<Buffer<f32>> = parts
        .iter()
        .map(|c| ctx.zeroed(c.len()))
        .collect::<Result<_, _>>()?;
    let mut out: Vec<Vec<f32>> = parts.iter().map(|c| vec![0.0; c.len()]).collect();
    Ok(b.best(|| {
        for ((c, d), o) in parts.iter().zip(&mut device).zip(&mut out) {
            d.write_from(c).unwrap();
            ctx.launch(polish, c.len(), (&*d,)).unwrap();
            d.download_into(o).unwrap();
        }
    }))
}

static IN_ORDER: Baseline = Baseline {
    label: "the same calls in order",
    measure: Measure::Device(in_order),
    bytes_per_element: None,
};

/// The streamed pipeline: uploads on one stream, kernels on a second that waits for each
/// chunk's upload, downloads on a third that waits for each chunk's kernel. Checked once
/// against the in-order result.
fn streamed(b: &Bench, ctx: &Context) -> Result<f64, Error> {
    let parts = chunks(b);
    let device: Vec<Buffer<f32>> = parts
        .iter()
        .map(|c| ctx.zeroed(c.len()))
        .collect::<Result<_, _>>()?;
    let mut inputs: Vec<HostBuffer<f32>> = parts
        .iter()
        .map(|c| ctx.host_buffer_from(c))
        .collect::<Result<_, _>>()?;
    let mut outputs: Vec<HostBuffer<f32>> = parts
        .iter()
        .map(|c| ctx.host_buffer(c.len()))
        .collect::<Result<_, _>>()?;
    let streams = [ctx.stream()?, ctx.stream()?, ctx.stream()?];
    pipeline(&streams, &device, &mut inputs, &mut outputs)?;
    let mut want = Vec::new();
    for c in &parts {
        let d = ctx.upload(c)?;
        ctx.launch(polish, c.len(), (&d,))?;
        want.extend(d.download()?);
    }
    let got: Vec<f32> = outputs.iter().flat_map(|o| o.iter().copied()).collect();
    assert!(
        got == want,
        "streamed chunks against the same calls in order"
    );
    Ok(b.best(|| pipeline(&streams, &device, &mut inputs, &mut outputs).unwrap()))
}

/// One pass of the pipeline over every chunk; the host buffers come back in order.
fn pipeline(
    [up, compute, down]: &[Stream; 3],
    device: &[Buffer<f32>],
    inputs: &mut Vec<HostBuffer<f32>>,
    outputs: &mut Vec<HostBuffer<f32>>,
) -> Result<(), Error> {
    let mut sent = Vec::new();
    let mut received = Vec::new();
    for ((d, i), o) in device.iter().zip(inputs.drain(..)).zip(outputs.drain(..)) {
        sent.push(up.upload(i, d)?);
        compute.wait_for(&up.record())?;
        compute.launch(polish, d.len(), (d,))?;
        down.wait_for(&compute.record())?;
        received.push(down.download(d, o)?);
    }
    for (s, r) in sent.into_iter().zip(received) {
        inputs.push(s.wait()?);
        outputs.push(r.wait()?);
    }
    Ok(())
}

pub(super) static CASES: &[Case] = &[Case {
    name: "n f32 in 8 chunks: upload, kernel, download on 3 streams vs in order",
    needs: Needs::Any,
    kiln: streamed,
    baseline: &IN_ORDER,
    naive: None,
    bytes_per_element: None,
}];
