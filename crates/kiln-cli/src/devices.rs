//! `kiln devices`: every device kiln finds, and for each backend without one, why.

use crate::{say, Failure};
use kiln::{BackendKind, Context, DeviceInfo};
use serde_json::{json, Value};

/// The backends, in the order kiln lists devices.
pub(crate) const BACKENDS: [BackendKind; 4] = [
    BackendKind::Cpu,
    BackendKind::Cuda,
    BackendKind::OpenCl,
    BackendKind::Wgpu,
];

/// What kiln finds: its devices (those that do not open among them, with the reason), and
/// each backend that has none with the reason (its error on opening).
pub(crate) struct Survey {
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) absent: Vec<(BackendKind, String)>,
}

impl Survey {
    pub(crate) fn take() -> Survey {
        let devices = Context::devices();
        let absent = BACKENDS
            .into_iter()
            .filter(|k| devices.iter().all(|d| d.backend != *k))
            .map(|k| {
                let why = match Context::with_backend(k) {
                    Err(e) => e.to_string(),
                    Ok(_) => "it opens, but lists no device".to_string(),
                };
                (k, why)
            })
            .collect();
        Survey { devices, absent }
    }
}

/// `yes` or `no`.
fn yes(b: bool) -> &'static str {
    match b {
        true => "yes",
        false => "no",
    }
}

/// Bytes in the largest binary unit that leaves a whole number of at least 1, `-` for 0.
fn bytes(n: u64) -> String {
    match n {
        0 => "-".into(),
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// One device as JSON.
fn device_json(d: &DeviceInfo) -> Value {
    json!({
        "backend": d.backend.name(),
        "index": d.index,
        "name": d.name,
        "class": format!("{:?}", d.class).to_lowercase(),
        "memory_bytes": d.memory_bytes,
        "compute_units": d.compute_units,
        "max_group_size": d.max_group_size,
        "subgroup_size": d.subgroup_size,
        "max_shared_bytes": d.max_shared_bytes,
        "max_buffer_bytes": d.max_buffer_bytes,
        "f64": d.features.f64,
        "int64": d.features.int64,
        "atomics64": d.features.atomics64,
        "subgroups": d.features.subgroups,
        "fast_math": d.features.fast_math,
        "register_limit": d.features.register_limit,
        "unusable": d.unusable,
    })
}

/// The survey as JSON: `{"devices": [...], "absent": [{"backend", "reason"}]}`.
pub(crate) fn survey_json(s: &Survey) -> Value {
    json!({
        "devices": s.devices.iter().map(device_json).collect::<Vec<_>>(),
        "absent": s.absent.iter().map(|(k, why)| json!({"backend": k.name(), "reason": why})).collect::<Vec<_>>(),
    })
}

/// The survey as a table, then a line per unusable device and per backend without devices.
fn table(s: &Survey) -> String {
    let head = [
        "backend", "index", "name", "memory", "f64", "i64", "atom64", "subgroup", "group", "shared",
    ];
    let rows: Vec<[String; 10]> = s
        .devices
        .iter()
        .filter(|d| d.unusable.is_none())
        .map(|d| {
            [
                d.backend.name().into(),
                d.index.to_string(),
                d.name.clone(),
                bytes(d.memory_bytes),
                yes(d.features.f64).into(),
                yes(d.features.int64).into(),
                yes(d.features.atomics64).into(),
                d.subgroup_size.to_string(),
                d.max_group_size.to_string(),
                bytes(d.max_shared_bytes),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..head.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([head[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(&head);
    for r in &rows {
        out += &line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
    for d in s.devices.iter().filter(|d| d.unusable.is_some()) {
        let why = d.unusable.as_deref().unwrap_or_default();
        out += &format!(
            "{} device {} ({}) does not open: {why}\n",
            d.backend, d.index, d.name
        );
    }
    for (k, why) in &s.absent {
        out += &format!("{k}: no device: {why}\n");
    }
    out
}

/// Prints the survey, as a table or as JSON.
pub(crate) fn run(json: bool) -> Result<(), Failure> {
    let s = Survey::take();
    match json {
        true => say(format!("{:#}", survey_json(&s))),
        false => say(table(&s).trim_end()),
    }
    Ok(())
}
