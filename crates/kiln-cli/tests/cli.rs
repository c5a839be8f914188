//! Runs each `kiln` subcommand as a user would and checks what it says against the library's
//! own answers (`Context::devices`, `kiln::emit`, `DiskCache`).

#[allow(dead_code)]
#[path = "../../../examples/gallery/mod.rs"]
mod gallery;

use assert_cmd::Command;
use kiln::{BackendKind, Context, DiskCache, Target};
use serde_json::Value;

/// The `kiln` binary, with the disk cache in `cache` (a fresh folder per test).
fn kiln(cache: &str) -> Command {
    let mut c = Command::cargo_bin("kiln").expect("the kiln binary");
    let dir = std::env::temp_dir().join(format!("kiln-cli-{cache}-{}", std::process::id()));
    c.env("KILN_CACHE_DIR", dir);
    c
}

/// What a run printed on stdout and stderr, and its exit status. Mesa's Vulkan loader prints
/// a line to stderr when XDG_RUNTIME_DIR is unset (scripts/test.sh sets it); those lines are
/// not kiln's and are left out.
fn run(c: &mut Command) -> (String, String, Option<i32>) {
    let out = c.output().expect("kiln runs");
    let text = |b: Vec<u8>| String::from_utf8(b).expect("UTF-8 output");
    let err: String = text(out.stderr)
        .lines()
        .filter(|l| !l.starts_with("error: XDG_RUNTIME_DIR is invalid or not set"))
        .map(|l| format!("{l}\n"))
        .collect();
    (text(out.stdout), err, out.status.code())
}

/// The backends `KILN_REQUIRE` names (`gl` is wgpu's; other words name tools, not backends).
fn required() -> Vec<BackendKind> {
    let list = std::env::var("KILN_REQUIRE").unwrap_or_default();
    let mut kinds: Vec<BackendKind> = list
        .split(',')
        .filter_map(|w| match w.trim() {
            "gl" => Some(BackendKind::Wgpu),
            w => BackendKind::parse(w),
        })
        .collect();
    kinds.dedup();
    kinds
}

#[test]
fn devices_lists_what_the_library_finds_as_json_and_as_a_table() {
    let (json, err, status) = run(kiln("devices").args(["devices", "--json"]));
    assert_eq!(status, Some(0), "{err}");
    assert!(err.is_empty(), "nothing on stderr: {err}");
    let json: Value = serde_json::from_str(&json).expect("valid JSON");
    let listed = json["devices"].as_array().expect("a device list");
    let devices = Context::devices();
    assert_eq!(listed.len(), devices.len(), "{json:#}");
    for (j, d) in listed.iter().zip(&devices) {
        assert_eq!(j["backend"], d.backend.name());
        assert_eq!(j["index"], d.index);
        assert_eq!(j["name"], d.name.as_str());
        assert_eq!(j["memory_bytes"], d.memory_bytes);
        assert_eq!(j["max_group_size"], d.max_group_size);
        assert_eq!(j["subgroup_size"], d.subgroup_size);
        assert_eq!(j["max_shared_bytes"], d.max_shared_bytes);
        assert_eq!(j["f64"], d.features.f64);
        assert_eq!(j["int64"], d.features.int64);
        assert_eq!(j["atomics64"], d.features.atomics64);
        assert_eq!(j["fast_math"], d.features.fast_math);
        assert_eq!(j["register_limit"], d.features.register_limit);
        assert_eq!(j["unusable"].as_str(), d.unusable.as_deref());
    }
    // Every backend is either listed or said absent, with the reason opening it gives.
    let absent = json["absent"].as_array().expect("an absent list");
    for kind in [
        BackendKind::Cpu,
        BackendKind::Cuda,
        BackendKind::OpenCl,
        BackendKind::Wgpu,
    ] {
        let has = devices.iter().any(|d| d.backend == kind);
        let said = absent.iter().find(|a| a["backend"] == kind.name());
        match (has, said) {
            (true, None) => {}
            (false, Some(a)) => {
                let why = match Context::with_backend(kind) {
                    Err(e) => e.to_string(),
                    Ok(_) => panic!("{kind} opens but lists no device"),
                };
                assert_eq!(a["reason"], why.as_str());
            }
            _ => panic!("{kind}: listed {has}, said absent {said:?}"),
        }
    }
    for kind in required() {
        assert!(
            devices
                .iter()
                .any(|d| d.backend == kind && d.unusable.is_none()),
            "KILN_REQUIRE names {kind}, but kiln lists no device of it: {json:#}"
        );
    }
    let (table, _, status) = run(kiln("devices").arg("devices"));
    assert_eq!(status, Some(0));
    for d in &devices {
        let line = match &d.unusable {
            None => table.lines().find(|l| l.contains(&d.name)),
            Some(_) => table.lines().find(|l| l.contains("does not open")),
        };
        assert!(
            line.is_some_and(|l| l.starts_with(d.backend.name())),
            "{}: {table}",
            d.name
        );
    }
    for a in absent {
        let line = format!(
            "{}: no device: {}",
            a["backend"].as_str().unwrap(),
            a["reason"].as_str().unwrap()
        );
        assert!(table.contains(&line), "{line}\n{table}");
    }
}

#[test]
fn doctor_passes_on_every_device_present_and_fails_for_what_is_missing() {
    let devices = Context::devices();
    let usable: Vec<_> = devices.iter().filter(|d| d.unusable.is_none()).collect();
    let present: Vec<&str> = usable.iter().map(|d| d.backend.name()).collect();
    let (out, err, status) = run(kiln("doctor").args(["doctor", "--require", &present.join(",")]));
    assert_eq!(status, Some(0), "{out}{err}");
    for d in &usable {
        let ok = format!(
            "ok    {} {} ({}): a query and a kernel equal Rust on the host",
            d.backend, d.index, d.name
        );
        assert!(out.contains(&ok), "{ok}\n{out}");
    }
    assert!(out.contains("ok    disk cache"), "{out}");
    for kind in required() {
        assert!(
            present.contains(&kind.name()),
            "KILN_REQUIRE names {kind}, which kiln doctor cannot use:\n{out}"
        );
    }
    // A backend without a device fails `--require` with the remedy; a misspelt one is refused.
    for kind in [BackendKind::Cuda, BackendKind::OpenCl, BackendKind::Wgpu] {
        if present.contains(&kind.name()) {
            continue;
        }
        let (out, err, status) = run(kiln("doctor").args(["doctor", "--require", kind.name()]));
        assert_eq!(status, Some(1), "{out}");
        assert!(out.contains(&format!("to use {kind}: install")), "{out}");
        assert_eq!(
            err,
            format!("kiln: required backends without a working device: {kind}\n")
        );
    }
    // `--only` checks those backends alone.
    let (out, _, status) =
        run(kiln("doctor").args(["doctor", "--only", "cpu", "--require", "cpu"]));
    assert_eq!(status, Some(0), "{out}");
    let backends: Vec<&str> = out
        .lines()
        .filter_map(|l| l.get(6..)?.split(' ').next())
        .collect();
    assert_eq!(backends, ["cpu", "disk"], "{out}");
    let (_, err, status) =
        run(kiln("doctor").args(["doctor", "--only", "cpu", "--require", "opencl"]));
    assert_eq!(
        (status, err.as_str()),
        (
            Some(1),
            "kiln: --require names opencl, which --only leaves out\n"
        )
    );
    let (_, err, status) = run(kiln("doctor").args(["doctor", "--require", "cpu,vulcan"]));
    assert_eq!(status, Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("`vulcan`, which is no backend"), "{err}");
    // A cache folder that cannot be made (under a file) fails the check, with what to set.
    let file = std::env::temp_dir().join(format!("kiln-cli-file-{}", std::process::id()));
    std::fs::write(&file, b"a file, not a folder").unwrap();
    let (out, err, status) = run(kiln("doctor")
        .arg("doctor")
        .env("KILN_CACHE_DIR", file.join("cache")));
    assert_eq!(status, Some(1), "{out}");
    assert!(
        out.contains("FAIL  disk cache") && out.contains("set KILN_CACHE_DIR"),
        "{out}"
    );
    assert_eq!(err, "kiln: the disk cache does not work (see above)\n");
    std::fs::remove_file(&file).unwrap();
    let cache = format!("kiln-cli-doctor-{}", std::process::id());
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(cache));
}

#[test]
fn emit_prints_what_the_library_writes_for_each_gallery_kernel() {
    let (list, _, status) = run(kiln("emit").args(["emit", "--list"]));
    assert_eq!(status, Some(0));
    let kernels: Vec<&str> = list
        .lines()
        .find_map(|l| l.strip_prefix("kernels: "))
        .expect("a kernel list")
        .split(", ")
        .collect();
    assert_eq!(kernels.len(), 14, "{list}");
    let ir = |name: &str| match name {
        "saxpy" => gallery::saxpy().ir(),
        "matmul_tiled" => gallery::matmul_tiled().ir(),
        "map_op_smooth" => gallery::map_op::<gallery::Smooth>().ir(),
        "scale_i64" => gallery::scale::<i64>().ir(),
        other => panic!("{other}"),
    };
    for name in ["saxpy", "matmul_tiled", "map_op_smooth", "scale_i64"] {
        assert!(kernels.contains(&name), "{list}");
        let kernel = ir(name).expect("the gallery kernel's IR");
        for (flag, target) in [
            ("ir", Target::Ir),
            ("cuda", Target::CudaC),
            ("opencl", Target::OpenClC),
            ("wgsl", Target::Wgsl),
            ("msl", Target::Msl),
            ("spirv", Target::SpirV),
        ] {
            let (out, err, status) = run(kiln("emit").args(["emit", name, "--target", flag]));
            assert_eq!(status, Some(0), "{name} {flag}: {err}");
            // The source lines name the gallery's file as each crate reached it.
            let want = kiln::emit(&kernel, target)
                .expect("the library writes it")
                .replace("kiln-cli/tests/../", "kiln-cli/src/../");
            assert_eq!(out.trim_end(), want.trim_end(), "{name} as {flag}");
        }
    }
    // Every listed kernel is written as OpenCL C.
    for name in &kernels {
        let (_, err, status) = run(kiln("emit").args(["emit", name, "--target", "opencl"]));
        assert_eq!(status, Some(0), "{name}: {err}");
    }
    for args in [
        ["emit", "nope", "--target", "ir"],
        ["emit", "saxpy", "--target", "metal"],
    ] {
        let (out, err, status) = run(kiln("emit").args(args));
        assert_eq!(status, Some(1), "{args:?}: {out}");
        assert!(
            err.starts_with("kiln: no ") && err.lines().count() == 1,
            "{err}"
        );
    }
}

#[test]
fn emit_prints_an_example_querys_kernels_and_plans() {
    let (list, _, _) = run(kiln("emit").args(["emit", "--list"]));
    let queries: Vec<&str> = list
        .lines()
        .find_map(|l| l.strip_prefix("queries: "))
        .expect("a query list")
        .split(", ")
        .collect();
    assert!(queries.len() >= 6, "{list}");
    // The README's first query, as the library writes it for the CPU device and for a
    // grouped (GPU) plan.
    let ctx = Context::with_backend(BackendKind::Cpu).expect("the CPU backend");
    let xs: Vec<f32> = (0..10_000).map(|i| (i % 1000) as f32).collect();
    let q = ctx
        .from(&xs)
        .map(|x| x * 2.0)
        .filter(|x| x.gt(1000.0))
        .map(|x| x + 100.0);
    for grouped in [false, true] {
        ctx.set_plan_shape(match grouped {
            true => kiln::PlanShape::Grouped,
            false => kiln::PlanShape::Auto,
        });
        for (flag, target) in [("opencl", Target::OpenClC), ("wgsl", Target::Wgsl)] {
            let mut args = vec!["emit", "quickstart", "--target", flag];
            args.extend(grouped.then_some("--grouped"));
            let (out, err, status) = run(kiln("emit").args(&args));
            assert_eq!(status, Some(0), "{args:?}: {err}");
            assert_eq!(
                out.trim_end(),
                q.emit(target).unwrap().trim_end(),
                "{args:?}"
            );
        }
        let mut args = vec!["emit", "quickstart", "--plan"];
        args.extend(grouped.then_some("--grouped"));
        let (out, _, status) = run(kiln("emit").args(&args));
        assert_eq!(status, Some(0));
        assert!(
            out.contains(q.explain_on(&ctx.profile()).trim_end()),
            "{args:?}: {out}"
        );
    }
    for query in &queries {
        let (out, err, status) = run(kiln("emit").args(["emit", query, "--plan", "--grouped"]));
        assert_eq!(status, Some(0), "{query}: {err}");
        assert!(
            out.contains("plan (grouped)") && out.contains("launch "),
            "{query}: {out}"
        );
    }
    for (args, says) in [
        (
            vec!["emit", "sort", "--target", "wgsl"],
            "printed with its plan (--plan)",
        ),
        (vec!["emit", "saxpy", "--plan"], "only queries have plans"),
        (
            vec!["emit", "quickstart", "--backend", "tpu"],
            "--backend takes cpu",
        ),
        (
            vec!["emit", "quickstart", "--target", "ptx"],
            "PTX is written for gallery kernels",
        ),
    ] {
        let (out, err, status) = run(kiln("emit").args(&args));
        assert_eq!(status, Some(1), "{args:?}: {out}");
        assert!(
            err.contains(says) && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

/// PTX from NVRTC where it is found: required when `KILN_REQUIRE` names `nvrtc`.
#[cfg(feature = "cuda")]
#[test]
fn emit_writes_a_kernels_ptx_through_nvrtc() {
    let kernel = gallery::saxpy().ir().unwrap();
    let nvrtc_required = std::env::var("KILN_REQUIRE").is_ok_and(|r| r.contains("nvrtc"));
    for arch in ["sm_90", "sm_80"] {
        let (out, err, status) =
            run(kiln("ptx").args(["emit", "saxpy", "--target", "ptx", "--arch", arch]));
        match kiln_cuda::compile_ptx(&kernel, arch) {
            Ok(compiled) => {
                assert_eq!(status, Some(0), "{err}");
                assert!(out.contains(&format!(".target {arch}")), "{out}");
                assert!(out.contains(".entry saxpy"), "{out}");
                // The source lines name the gallery's file as each crate reached it.
                let want = compiled
                    .ptx
                    .replace("kiln-cli/tests/../", "kiln-cli/src/../");
                assert_eq!(out.trim_end(), want.trim_end());
            }
            Err(e) => {
                assert!(
                    !nvrtc_required,
                    "KILN_REQUIRE names nvrtc, which does not load: {e}"
                );
                assert_eq!(status, Some(1));
                assert_eq!(err, format!("kiln: saxpy: {e}\n"));
            }
        }
    }
}

#[test]
fn cache_shows_its_folder_and_clear_empties_it() {
    let dir = std::env::temp_dir().join(format!("kiln-cli-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = DiskCache::new(dir.clone());
    cache.store(&["one"], b"a binary").unwrap();
    cache.store(&["two"], &[1; 4096]).unwrap();
    let bytes = cache.usage().unwrap().bytes;
    let (out, _, status) = run(kiln("cache").arg("cache").env("KILN_CACHE_DIR", &dir));
    assert_eq!(status, Some(0));
    assert!(
        out.contains(&format!("folder   {}", dir.display())),
        "{out}"
    );
    assert!(out.contains("entries  2"), "{out}");
    assert!(out.contains(&format!("({bytes} bytes)")), "{out}");
    let (out, _, status) = run(kiln("cache")
        .args(["cache", "clear"])
        .env("KILN_CACHE_DIR", &dir));
    assert_eq!(status, Some(0));
    assert!(
        out.contains("deleted 2 entries") && out.contains("entries  0"),
        "{out}"
    );
    assert_eq!(cache.load(&["one"]), None);
    let (out, _, status) = run(kiln("cache").arg("cache").env("KILN_CACHE_DIR", "off"));
    assert_eq!(status, Some(0));
    assert!(out.starts_with("the disk cache is off"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_command_line_clap_rejects_exits_2_without_a_panic() {
    for args in [vec!["devices", "--jsn"], vec!["bogus"], vec![]] {
        let (_, err, status) = run(kiln("clap").args(&args));
        assert_eq!(status, Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// A fresh file in the temporary folder.
fn temp_file(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("kiln-cli-{name}-{}", std::process::id()))
}

/// The SVG at `path`, parsed: each element with the class `class`, as its attributes.
fn svg_elements(path: &std::path::Path, class: &str) -> Vec<Vec<(String, String)>> {
    let text = std::fs::read_to_string(path).expect("the SVG was written");
    let doc = roxmltree::Document::parse(&text).expect("well-formed SVG");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.attribute("class") == Some(class))
        .map(|n| {
            n.attributes()
                .map(|a| (a.name().to_string(), a.value().to_string()))
                .collect()
        })
        .collect()
}

/// The attribute `name` of an element from [`svg_elements`].
fn attr<'e>(element: &'e [(String, String)], name: &str) -> &'e str {
    element
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {element:?}"))
}

/// Runs `kiln bench` with `args`, writing JSON and SVG to fresh files named after `name`:
/// what it printed, its status, the JSON's items and the SVG's path.
fn bench(name: &str, args: &[&str]) -> (String, Option<i32>, Vec<Value>, std::path::PathBuf) {
    let (json, svg) = (
        temp_file(&format!("{name}.json")),
        temp_file(&format!("{name}.svg")),
    );
    let (out, err, status) = run(kiln(name)
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--svg")
        .arg(&svg));
    assert!(err.is_empty(), "no progress bar off a terminal: {err}");
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{out}: {e}"));
    let items: Value = serde_json::from_str(&text).expect("valid JSON");
    std::fs::remove_file(&json).unwrap();
    (
        out,
        status,
        items.as_array().expect("an array").clone(),
        svg,
    )
}

#[test]
fn bench_writes_a_table_json_and_a_bar_per_case_and_device() {
    let args = ["sum", "--quick", "--log2", "12", "--backend", "cpu"];
    let (out, status, items, svg) = bench("bench", &args);
    assert_eq!(status, Some(0), "{out}");
    let want: Vec<&str> = kiln_bench::case_names()
        .into_iter()
        .filter(|c| c.contains("sum"))
        .collect();
    assert!(want.len() > 5, "{want:?}");
    // numpy's, Polars' and DuckDB's rows come last (see the peers test below).
    let rows: Vec<&Value> = items.iter().filter(|i| i.get("peer").is_none()).collect();
    let cases: Vec<&str> = rows.iter().map(|i| i["case"].as_str().unwrap()).collect();
    assert_eq!(cases, want, "each selected case once, in table order");
    let bars = svg_elements(&svg, "bar");
    assert_eq!(bars.len(), rows.len());
    for (item, bar) in rows.iter().zip(&bars) {
        assert_eq!(item["backend"], "cpu");
        assert_eq!(item["n"], 4096);
        let (kiln, base, ratio) = (
            item["kiln_ms"].as_f64().unwrap(),
            item["baseline_ms"].as_f64().unwrap(),
            item["ratio"].as_f64().unwrap(),
        );
        assert!(kiln > 0.0 && base > 0.0, "{item}");
        // The times are rounded to 1 ns in the JSON.
        assert!((ratio - base / kiln).abs() <= 0.01 * ratio + 1e-4, "{item}");
        let row = format!("| {} | cpu | 4096 |", item["case"].as_str().unwrap());
        assert!(out.contains(&row), "{row}\n{out}");
        assert_eq!(attr(bar, "data-case"), item["case"].as_str().unwrap());
        assert_eq!(attr(bar, "data-backend"), "cpu");
        let drawn: f64 = attr(bar, "data-ratio").parse().unwrap();
        assert!(
            (drawn - ratio).abs() <= 1e-3 * ratio.max(1.0),
            "{drawn} {item}"
        );
        assert!(attr(bar, "width").parse::<f64>().unwrap() >= 1.0);
    }
    std::fs::remove_file(&svg).unwrap();
}

/// True when `python3` imports `module`.
fn python_has(module: &str) -> bool {
    std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn bench_times_numpy_polars_and_duckdb_where_python_has_them() {
    let args = ["sum", "--quick", "--log2", "12", "--backend", "cpu"];
    let (out, status, items, svg) = bench("peers", &args);
    std::fs::remove_file(&svg).unwrap();
    assert_eq!(status, Some(0), "{out}");
    let kiln_ms = |case: &str| {
        items
            .iter()
            .find(|i| i.get("peer").is_none() && i["case"] == case)
            .and_then(|i| i["kiln_ms"].as_f64())
            .unwrap_or_else(|| panic!("no kiln row of {case}"))
    };
    for engine in ["numpy", "polars", "duckdb"] {
        let rows: Vec<&Value> = items
            .iter()
            .filter(|i| i["peer"] == true)
            .filter(|i| i["baseline"].as_str().unwrap().starts_with(engine))
            .collect();
        if !(python_has("numpy") && python_has(engine)) {
            assert!(rows.is_empty(), "{rows:?}");
            assert!(out.contains(&format!("no {engine} rows")), "{out}");
            continue;
        }
        // Every engine has these two; the others are in table order among the selected.
        let position = |case: &str| kiln_bench::case_names().iter().position(|c| *c == case);
        let cases: Vec<&str> = rows.iter().map(|i| i["case"].as_str().unwrap()).collect();
        assert!(
            cases.contains(&"sum") && cases.contains(&"map-filter-map-sum"),
            "{out}"
        );
        assert!(cases.iter().all(|c| c.contains("sum")), "{cases:?}");
        assert!(cases.is_sorted_by_key(|c| position(c)), "{cases:?}");
        for item in rows {
            let (case, ms) = (
                item["case"].as_str().unwrap(),
                item["baseline_ms"].as_f64().unwrap(),
            );
            assert_eq!(item["backend"], "cpu");
            assert_eq!(item["kiln_ms"].as_f64().unwrap(), kiln_ms(case));
            assert!(ms > 0.0, "{item}");
            let ratio = item["ratio"].as_f64().unwrap();
            assert!(
                (ratio - ms / kiln_ms(case)).abs() <= 0.01 * ratio + 1e-4,
                "{item}"
            );
            let engine = item["baseline"].as_str().unwrap();
            let line = format!("| {case} | cpu | 4096 | ");
            assert!(
                out.lines()
                    .any(|l| l.starts_with(&line) && l.contains(engine)),
                "{line} {engine}\n{out}"
            );
        }
    }
    let (out, status, items, svg) = bench("no-peers", &[&args[..], &["--no-peers"]].concat());
    std::fs::remove_file(&svg).unwrap();
    assert_eq!(status, Some(0), "{out}");
    assert!(items.iter().all(|i| i.get("peer").is_none()), "{items:?}");
    assert!(!out.contains("numpy"), "{out}");
}

#[test]
fn a_bench_sweep_charts_throughput_per_size_beside_the_copy_bandwidth() {
    let args = [
        "(same bytes)",
        "--quick",
        "--sweep",
        "10..12",
        "--backend",
        "cpu",
    ];
    let (out, status, items, svg) = bench("sweep", &args);
    assert_eq!(status, Some(0), "{out}");
    let sizes: Vec<u64> = items.iter().map(|i| i["n"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [1024, 2048, 4096]);
    let series = svg_elements(&svg, "series");
    assert_eq!(series.len(), 1, "{series:?}");
    assert_eq!(
        attr(&series[0], "data-case"),
        "sum Buffer vs device copy (same bytes)"
    );
    let copy = svg_elements(&svg, "bandwidth");
    assert_eq!(copy.len(), 1, "{copy:?}");
    assert_eq!(attr(&copy[0], "data-backend"), "cpu");
    for line in series.iter().chain(&copy) {
        let points = attr(line, "points").split(' ').count();
        assert_eq!(points, 3, "a point per size: {line:?}");
    }
    std::fs::remove_file(&svg).unwrap();
}

#[test]
fn bench_refuses_what_it_cannot_run_in_one_line() {
    for (args, says) in [
        (
            vec!["bench", "no such case", "--log2", "10"],
            "no case's name holds",
        ),
        (
            vec!["bench", "sum", "--log2", "10", "--backend", "tpu"],
            "no device labelled \"tpu\"",
        ),
        (
            vec!["bench", "sum", "--sweep", "12..10"],
            "--sweep takes two powers of two",
        ),
        (
            vec!["bench", "sum", "--log2", "31"],
            "log2 takes a whole number from 1 to 30",
        ),
        (
            vec!["bench", "sum", "--log2", "10", "--sweep", "10..11"],
            "not both",
        ),
    ] {
        let (out, err, status) = run(kiln("bench-errors").args(&args));
        assert_eq!(status, Some(1), "{args:?}: {out}");
        assert!(
            err.starts_with("kiln: ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}
