//! Copies between host slices and device memory, against the host copying as many bytes
//! within its own memory on every core (the `memcpy` baseline of the host-slice rows).

use super::queries::MEMCPY;
use super::{Case, Needs};

pub(super) static CASES: &[Case] = &[
    Case {
        name: "upload n f32 to a Buffer vs parallel memcpy",
        needs: Needs::Any,
        kiln: |b, ctx| {
            Ok(b.best(|| {
                let buffer = ctx.upload(&b.xs).unwrap();
                ctx.synchronize().unwrap();
                buffer
            }))
        },
        baseline: &MEMCPY,
        naive: None,
        bytes_per_element: Some(4),
    },
    Case {
        name: "download n f32 from a Buffer vs parallel memcpy",
        needs: Needs::Any,
        kiln: |b, ctx| {
            let buffer = ctx.upload(&b.xs)?;
            assert!(buffer.download()? == b.xs, "download of an upload");
            Ok(b.best(|| buffer.download().unwrap()))
        },
        baseline: &MEMCPY,
        naive: None,
        bytes_per_element: Some(4),
    },
];
