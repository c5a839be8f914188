//! The on-disk kernel cache: a second process loads compiled binaries instead of compiling,
//! and a damaged entry is detected and compiled again. Runs on the OpenCL backend (the backend
//! with binaries here); skipped when OpenCL is absent and not required.

use crate::common;
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
            common::test_path(
                module_path!(),
                "a_second_process_loads_binaries_and_damaged_entries_are_recompiled",
            )
            .as_str(),
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
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
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

#[test]
fn usage_counts_the_entries_and_clear_deletes_only_them() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-cache-clear-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = DiskCache::new(dir.clone());
    assert_eq!(c.dir(), dir.as_path());
    let none = kiln::CacheUsage {
        entries: 0,
        bytes: 0,
    };
    assert_eq!(c.usage().unwrap(), none, "no directory yet");
    assert_eq!(c.clear().unwrap(), 0);
    c.store(&["a"], b"first").unwrap();
    c.store(&["b"], &[7; 1000]).unwrap();
    std::fs::write(dir.join("notes.txt"), b"not an entry").unwrap();
    let files: u64 = [c.path(&["a"]), c.path(&["b"])]
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(files > 1005, "{files}");
    let usage = c.usage().unwrap();
    assert_eq!((usage.entries, usage.bytes), (2, files));
    assert_eq!(c.clear().unwrap(), 2);
    assert_eq!(c.usage().unwrap(), none);
    assert_eq!(c.load(&["a"]), None);
    assert!(dir.join("notes.txt").exists(), "other files stay");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An entry copied over another entry's file name records the other key, so it is refused
/// (and deleted) rather than loaded: the query for `x * 3` must not run the binary of `x * 5`.
/// Something that is not a regular file under an entry's name (a FIFO) is neither read, which
/// would block, nor deleted.
#[test]
fn entries_load_only_under_their_own_key_and_only_from_regular_files() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-cache-keys-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = DiskCache::new(dir.clone());
    let (three, five) = (["x * 3", "opencl", "dev"], ["x * 5", "opencl", "dev"]);
    c.store(&three, b"binary of x * 3").unwrap();
    c.store(&five, b"binary of x * 5").unwrap();
    std::fs::copy(c.path(&five), c.path(&three)).unwrap();
    assert_eq!(c.load(&three), None, "another key's entry is not loaded");
    assert!(!c.path(&three).exists(), "and it is deleted");
    assert_eq!(c.load(&five).as_deref(), Some(&b"binary of x * 5"[..]));
    #[cfg(unix)]
    {
        let fifo = c.path(&three);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert_eq!(c.load(&three), None, "a FIFO is not read");
            assert!(fifo.exists(), "nor deleted");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The entries (`.bin` files) of `dir` and their total size.
fn entry_bytes(dir: &PathBuf) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == "bin"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn the_cache_keeps_to_its_bound_dropping_the_least_recently_used() {
    let dir = std::env::temp_dir().join(format!("kiln-disk-cache-bound-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bound = 8000;
    let c = DiskCache::with_limit(dir.clone(), bound);
    assert_eq!(c.max_bytes(), bound);
    let key = |i: usize| [format!("kernel {i}"), "opencl".into(), "dev".into()];
    let store = |i: usize| {
        let k = key(i);
        let k: Vec<&str> = k.iter().map(String::as_str).collect();
        c.store(&k, &vec![i as u8; 1000]).unwrap();
        // Distinct modification times, whatever the file system's resolution.
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let load = |i: usize| {
        let k = key(i);
        let k: Vec<&str> = k.iter().map(String::as_str).collect();
        c.load(&k)
    };
    for i in 0..7 {
        store(i);
    }
    let each = entry_bytes(&dir) / 7;
    assert!(each > 1000, "an entry holds its payload and a header");
    assert!(
        7 * each <= bound,
        "seven entries fit: nothing is dropped yet"
    );
    for i in 0..7 {
        assert_eq!(load(i), Some(vec![i as u8; 1000]), "entry {i} is kept");
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    // Entry 0 was used last of the old ones.
    assert!(load(0).is_some());
    std::thread::sleep(std::time::Duration::from_millis(20));
    for i in 7..10 {
        store(i);
    }
    let total = entry_bytes(&dir);
    assert!(
        total <= bound,
        "{total} bytes kept under a bound of {bound}"
    );
    assert!(
        total >= bound / 2,
        "trimming stops near three quarters: {total}"
    );
    assert_eq!(load(0), Some(vec![0; 1000]), "the entry used last is kept");
    assert_eq!(load(9), Some(vec![9; 1000]), "the newest entry is kept");
    assert_eq!(load(1), None, "the least recently used entry is dropped");
    assert!(dir.join("trimmed").exists(), "the trim time is stamped");
    let _ = std::fs::remove_dir_all(&dir);
}

const BOUND_CHILD: &str = "KILN_DISK_CACHE_BOUND_CHILD";

#[test]
fn the_bound_comes_from_kiln_cache_max_mb() {
    if std::env::var_os(BOUND_CHILD).is_some() {
        let c = DiskCache::from_env().expect("a cache directory");
        println!("BOUND {}", c.max_bytes());
        return;
    }
    let bound = |value: Option<&str>| -> u64 {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            common::test_path(module_path!(), "the_bound_comes_from_kiln_cache_max_mb").as_str(),
            "--nocapture",
        ])
        .env(BOUND_CHILD, "1")
        .env(
            "KILN_CACHE_DIR",
            std::env::temp_dir().join("kiln-bound-unused"),
        );
        match value {
            Some(v) => cmd.env("KILN_CACHE_MAX_MB", v),
            None => cmd.env_remove("KILN_CACHE_MAX_MB"),
        };
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed: {text}");
        text.lines()
            .find_map(|l| l.strip_prefix("BOUND "))
            .unwrap_or_else(|| panic!("no bound in {text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(bound(None), 1 << 30, "1 GiB unless told");
    assert_eq!(bound(Some("3")), 3 << 20);
    assert_eq!(bound(Some(" 64 ")), 64 << 20);
    for bad in ["0", "-5", "lots", ""] {
        assert_eq!(bound(Some(bad)), 1 << 30, "{bad:?} keeps the default");
    }
}
