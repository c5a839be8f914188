//! The engines a data user would pick instead of kiln (numpy, Polars, DuckDB), timed on the
//! same inputs in the same run by `peers.py` beside this crate, where `python3` has them.

use crate::data::Bench;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The script, from this crate's source folder (a copied binary without the source tree
/// says that it is missing).
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/peers.py");

/// One engine's best time on one case.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The case, as the table names it.
    pub case: &'static str,
    /// The engine and its version (`numpy 2.4.6`).
    pub engine: String,
    /// Its best time.
    pub ms: f64,
}

/// What a peer's result holds, counted here in plain Rust, so that a row whose engine
/// returned something else is dropped rather than compared.
#[derive(Clone, Copy)]
enum Holds {
    /// One value.
    One,
    /// A value per element.
    Each,
    /// The elements below 500 (the filter cases' predicate).
    Below500,
    /// A value per bin of a 256-bin histogram.
    Bins256,
    /// A value per distinct byte of `levels`.
    Levels,
    /// A value per distinct `ids` value.
    Ids,
}

/// The cases `peers.py` runs, as the table names them, and what each result holds.
const PEER_CASES: &[(&str, Holds)] = &[
    ("map to_vec", Holds::Each),
    ("map-filter-map-sum", Holds::One),
    ("sum", Holds::One),
    ("max", Holds::One),
    ("argmax", Holds::One),
    ("filter to_vec (50%)", Holds::Below500),
    ("scan (running sum) to_vec", Holds::Each),
    ("histogram (256 bins of u8)", Holds::Bins256),
    ("sort to_vec (radix, stable)", Holds::Each),
    ("group_by sum (256 u8 keys, dense)", Holds::Levels),
    ("group_by sum (65521 u32 keys, dense)", Holds::Ids),
    ("group_by count (65521 u32 keys, dense)", Holds::Ids),
    ("distinct to_vec (65521 u32 values)", Holds::Ids),
];

/// The rows a result that `holds` so has on `b`'s inputs; `None` for one value.
fn rows(holds: Holds, b: &Bench) -> Option<usize> {
    match holds {
        Holds::One => None,
        Holds::Each => Some(b.n),
        Holds::Below500 => Some(b.xs.iter().filter(|x| **x < 500.0).count()),
        Holds::Bins256 => Some(256),
        Holds::Levels => Some(b.levels.iter().collect::<HashSet<_>>().len()),
        Holds::Ids => Some(b.ids.iter().collect::<HashSet<_>>().len()),
    }
}

/// True when `peers.py` has a row for the case named `name`.
pub fn has(name: &str) -> bool {
    PEER_CASES.iter().any(|(c, _)| *c == name)
}

/// Times the peers on the cases among `cases` that they have, on `b`'s inputs; tells `note`
/// what it could not run and why (no `python3`, an engine missing, a result of another
/// size). Returns the rows measured.
pub fn measure(b: &Bench, cases: &[&'static str], note: &mut dyn FnMut(String)) -> Vec<Peer> {
    let wanted: Vec<(&'static str, Option<usize>)> = PEER_CASES
        .iter()
        .filter(|(c, _)| cases.contains(c))
        .map(|(c, holds)| (*c, rows(*holds, b)))
        .collect();
    if wanted.is_empty() {
        return Vec::new();
    }
    if !Path::new(SCRIPT).exists() {
        note(format!("no numpy/Polars/DuckDB rows: {SCRIPT} is not here"));
        return Vec::new();
    }
    let folder = std::env::temp_dir().join(format!("kiln-bench-peers-{}", std::process::id()));
    let out = write_inputs(b, &folder).and_then(|()| {
        Command::new("python3")
            .arg(SCRIPT)
            .arg(&folder)
            .arg(b.reps.to_string())
            .args(wanted.iter().map(|(c, _)| *c))
            .output()
            .map_err(|e| format!("python3 did not start: {e}"))
    });
    // The inputs are scratch; failing to remove them leaves a temporary folder behind.
    let _ = std::fs::remove_dir_all(&folder);
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("no message");
            note(format!(
                "no numpy/Polars/DuckDB rows: peers.py failed: {last}"
            ));
            return Vec::new();
        }
        Err(why) => {
            note(format!("no numpy/Polars/DuckDB rows: {why}"));
            return Vec::new();
        }
    };
    parse(&String::from_utf8_lossy(&out.stdout), &wanted, note)
}

/// The rows of the script's output `text` for the `wanted` cases; lines naming a missing
/// engine or a result of the wrong size go to `note`.
fn parse(
    text: &str,
    wanted: &[(&'static str, Option<usize>)],
    note: &mut dyn FnMut(String),
) -> Vec<Peer> {
    let mut peers = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields.as_slice() {
            ["missing", engine, why] => note(format!("no {engine} rows: {why}")),
            ["row", case, engine, ms, rows] => {
                let Some((case, want)) = wanted.iter().find(|(c, _)| c == case) else {
                    continue;
                };
                let (Ok(ms), Ok(rows)) = (ms.parse::<f64>(), rows.parse::<i64>()) else {
                    note(format!("peers.py wrote an unreadable row: {line}"));
                    continue;
                };
                let got = usize::try_from(rows).ok();
                if got != *want {
                    note(format!(
                        "dropped {engine} on {case}: {rows} rows, plain Rust gives {}",
                        want.map_or("one value".into(), |w| w.to_string())
                    ));
                    continue;
                }
                peers.push(Peer {
                    case,
                    engine: engine.to_string(),
                    ms,
                });
            }
            _ => note(format!("peers.py wrote an unreadable line: {line}")),
        }
    }
    peers
}

/// Writes the inputs the script reads into `folder`, as raw little-endian values.
fn write_inputs(b: &Bench, folder: &PathBuf) -> Result<(), String> {
    let write = |name: &str, bytes: Vec<u8>| {
        std::fs::write(folder.join(name), bytes).map_err(|e| format!("writing {name}: {e}"))
    };
    std::fs::create_dir_all(folder).map_err(|e| format!("creating {}: {e}", folder.display()))?;
    write(
        "xs.f32",
        b.xs.iter().flat_map(|x| x.to_le_bytes()).collect(),
    )?;
    write("levels.u8", b.levels.clone())?;
    write(
        "ids.u32",
        b.ids.iter().flat_map(|x| x.to_le_bytes()).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_the_wrong_size_and_missing_engines_are_noted_not_kept() {
        let wanted = [("sum", None), ("map to_vec", Some(4))];
        let text = "missing\tpolars\tNo module named 'polars'\n\
                    row\tsum\tnumpy 2.4.6\t0.5\t-1\n\
                    row\tmap to_vec\tnumpy 2.4.6\t1.5\t4\n\
                    row\tmap to_vec\tduckdb 2.0.1\t2.5\t3\n\
                    row\tsort to_vec (radix, stable)\tnumpy 2.4.6\t9.0\t4\n\
                    nonsense\n";
        let mut notes = Vec::new();
        let peers = parse(text, &wanted, &mut |n| notes.push(n));
        let kept: Vec<(&str, &str, f64)> = peers
            .iter()
            .map(|p| (p.case, p.engine.as_str(), p.ms))
            .collect();
        assert_eq!(
            kept,
            [
                ("sum", "numpy 2.4.6", 0.5),
                ("map to_vec", "numpy 2.4.6", 1.5)
            ]
        );
        assert_eq!(notes.len(), 3, "{notes:?}");
        assert!(notes[0].contains("polars"));
        assert!(notes[1].contains("duckdb") && notes[1].contains("plain Rust gives 4"));
        assert!(notes[2].contains("nonsense"));
    }

    #[test]
    fn every_case_the_script_runs_is_a_case_of_the_table() {
        let names = crate::case_names();
        for (case, _) in PEER_CASES {
            assert!(names.contains(case), "{case} is not in the table");
        }
    }
}
