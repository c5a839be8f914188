//! The on-disk kernel cache: a second process loads compiled binaries instead of compiling,
//! and a damaged entry is detected and compiled again. Runs on the OpenCL backend (the backend
//! with binaries here); skipped when OpenCL is absent and not required.

use kiln::{BackendKind, Context, DiskCache};
use std::path::PathBuf;

const CHILD: &str = "KILN_DISK_CACHE_CHILD";

fn query(ctx: &Context) -> Vec<f32> {
    let xs: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
    ctx.from(&xs)
        .map(|x| x * 3.0 + 0.25)
        .filter(|x| x.gt(100.0))
        .to_vec()
        .unwrap()
}

/// Runs this test binary as a child that runs `query` once on OpenCL with the cache in `dir`,
/// and returns the child's (compilations, disk hits).
fn child_run(dir: &PathBuf) -> (u64, u64) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_second_process_loads_binaries_and_damaged_entries_are_recompiled",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("KILN_CACHE_DIR", dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("STATS "))
        .unwrap_or_else(|| panic!("no stats in {text}"));
    let nums: Vec<u64> = line.split(' ').map(|v| v.parse().unwrap()).collect();
    (nums[0], nums[1])
}

#[test]
fn a_second_process_loads_binaries_and_damaged_entries_are_recompiled() {
    if std::env::var_os(CHILD).is_some() {
        let ctx = Context::with_backend(BackendKind::OpenCl).unwrap();
        let got = query(&ctx);
        let want: Vec<f32> = (0..1000)
            .map(|i| i as f32 * 0.5 * 3.0 + 0.25)
            .filter(|x| *x > 100.0)
            .collect();
        assert_eq!(got, want);
        let s = ctx.stats();
        println!("STATS {} {}", s.compilations, s.disk_hits);
        return;
    }
    if Context::with_backend(BackendKind::OpenCl).is_err() {
        assert!(
            !std::env::var("KILN_REQUIRE")
                .unwrap_or_default()
                .contains("opencl"),
            "OpenCL is required"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("kiln-disk-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        child_run(&dir),
        (2, 0),
        "first process compiles count and scatter"
    );
    let entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(child_run(&dir), (0, 2), "second process calls no compiler");
    let mut bytes = std::fs::read(&entries[0]).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&entries[0], &bytes).unwrap();
    assert_eq!(
        child_run(&dir),
        (1, 1),
        "the damaged entry is compiled again, the other loads"
    );
    assert_eq!(child_run(&dir), (0, 2), "and stored again intact");
    std::fs::write(&entries[1], b"kiln-binary-1\ntruncated").unwrap();
    assert_eq!(
        child_run(&dir),
        (1, 1),
        "a truncated entry is compiled again"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn disk_cache_checksums_reject_any_change() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-cache-unit-{}", std::process::id()));
    let c = DiskCache::new(dir.clone());
    let key = ["k", "opencl", "dev", "v1"];
    assert_eq!(c.load(&key), None);
    c.store(&key, b"payload bytes").unwrap();
    assert_eq!(c.load(&key).as_deref(), Some(&b"payload bytes"[..]));
    assert_eq!(
        c.load(&["k", "opencl", "dev", "v2"]),
        None,
        "another compiler version is another entry"
    );
    let path = c.path(&key);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 1;
    std::fs::write(&path, bytes).unwrap();
    assert_eq!(c.load(&key), None);
    assert!(!path.exists(), "a damaged entry is deleted");
    let _ = std::fs::remove_dir_all(&dir);
}
