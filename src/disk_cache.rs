//! The on-disk cache of compiled binaries (OpenCL program binaries today; PTX/cubin when the
//! CUDA backend launches). One file per (kernel structure, generated source, backend, device,
//! compiler version and options), holding a magic line, a checksum of the payload and the payload. A file that
//! fails the check is deleted and the kernel is compiled again; it is never loaded.
//!
//! The directory is kept under a size bound (`KILN_CACHE_MAX_MB`, 1024 by default): a load
//! marks its file used (its modification time), and when a process has stored an eighth of
//! the bound since it last looked, or on its first store when no process looked in the last
//! hour (the file `trimmed` tells), the least recently used files are deleted until the
//! directory holds at most three quarters of it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

const MAGIC: &[u8] = b"kiln-binary-1\n";

/// The file whose modification time says when the directory was last trimmed.
const TRIM_STAMP: &str = "trimmed";

/// How long after a trim a process's first store does not look at the directory again.
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// The size bound of a cache made by [`DiskCache::from_env`] without `KILN_CACHE_MAX_MB`.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1 << 30;

/// A directory of checksummed binaries, kept under a size bound.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes this process stored since it last trimmed; `u64::MAX` before its first store.
    stored: Arc<AtomicU64>,
}

/// Two FNV-1a lanes with different seeds: a 128-bit digest, the same on every machine.
fn digest(bytes: &[u8]) -> u128 {
    let (mut a, mut b) = (0xcbf2_9ce4_8422_2325u64, 0x6c62_272e_07bb_0142u64);
    for &x in bytes {
        a = (a ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3);
        b = (b ^ x as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    ((a as u128) << 64) | b as u128
}

impl DiskCache {
    /// A cache in `dir` (created on first store) bounded by [`DEFAULT_CACHE_MAX_BYTES`].
    pub fn new(dir: PathBuf) -> DiskCache {
        DiskCache::with_limit(dir, DEFAULT_CACHE_MAX_BYTES)
    }

    /// A cache in `dir` whose files take at most about `max_bytes` together (see the module
    /// documentation for when it trims).
    pub fn with_limit(dir: PathBuf, max_bytes: u64) -> DiskCache {
        DiskCache {
            dir,
            max_bytes,
            stored: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }

    /// The size bound in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The cache in `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`,
    /// bounded by `KILN_CACHE_MAX_MB` mebibytes (a positive whole number; otherwise, with a
    /// warning, [`DEFAULT_CACHE_MAX_BYTES`]). `None` when `KILN_CACHE_DIR` is `off` or no
    /// directory can be named.
    pub fn from_env() -> Option<DiskCache> {
        let dir = match std::env::var_os("KILN_CACHE_DIR") {
            Some(d) if d == "off" => return None,
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
                .join("kiln"),
        };
        let max_bytes = match std::env::var("KILN_CACHE_MAX_MB") {
            Err(_) => DEFAULT_CACHE_MAX_BYTES,
            Ok(v) => match v.trim().parse::<u64>() {
                Ok(mb) if mb > 0 => mb.saturating_mul(1 << 20),
                _ => {
                    tracing::warn!(
                        value = %v,
                        "KILN_CACHE_MAX_MB is not a positive whole number; the kernel cache keeps its default bound of 1024 MiB"
                    );
                    DEFAULT_CACHE_MAX_BYTES
                }
            },
        };
        Some(DiskCache::with_limit(dir, max_bytes))
    }

    /// The file for a key made of everything the binary depends on.
    pub fn path(&self, key_parts: &[&str]) -> PathBuf {
        self.dir.join(format!(
            "{:032x}.bin",
            digest(key_parts.join("\u{1f}").as_bytes())
        ))
    }

    /// The payload stored under `key_parts`, if present and intact. A damaged file is deleted.
    pub fn load(&self, key_parts: &[&str]) -> Option<Vec<u8>> {
        let path = self.path(key_parts);
        let data = std::fs::read(&path).ok()?;
        let intact = data.len() >= MAGIC.len() + 16 && data.starts_with(MAGIC) && {
            let (sum, payload) = data[MAGIC.len()..].split_at(16);
            sum == digest(payload).to_le_bytes()
        };
        if intact {
            // Marks the entry used, so that trimming keeps it; a cache on a read-only
            // directory still loads.
            if let Ok(f) = std::fs::File::options().write(true).open(&path) {
                let _ = f.set_modified(SystemTime::now());
            }
            Some(data[MAGIC.len() + 16..].to_vec())
        } else {
            tracing::warn!(path = %path.display(), "damaged kernel cache entry removed");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Removes the entry under `key_parts` (the driver rejected it).
    pub fn remove(&self, key_parts: &[&str]) {
        let _ = std::fs::remove_file(self.path(key_parts));
    }

    /// Stores `payload` under `key_parts`, writing a temporary file and renaming it so readers
    /// never see a partial entry, then trims the directory when due (see the module
    /// documentation; a failed trim is logged). Fails when the entry cannot be written.
    pub fn store(&self, key_parts: &[&str], payload: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(key_parts);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut data = Vec::with_capacity(MAGIC.len() + 16 + payload.len());
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&digest(payload).to_le_bytes());
        data.extend_from_slice(payload);
        std::fs::write(&tmp, &data)?;
        std::fs::rename(&tmp, &path)?;
        let len = data.len() as u64;
        let before = self
            .stored
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                Some(if s == u64::MAX { s } else { s + len })
            })
            .unwrap_or(0);
        let due = if before == u64::MAX {
            std::fs::metadata(self.dir.join(TRIM_STAMP))
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age >= TRIM_INTERVAL)
        } else {
            before + len >= self.max_bytes / 8
        };
        if before == u64::MAX || due {
            self.stored.store(0, Ordering::Relaxed);
        }
        if due {
            // The entry is stored either way; a failed trim only leaves the directory larger.
            if let Err(e) = self.trim() {
                tracing::warn!(dir = %self.dir.display(), error = %e, "could not trim the kernel cache");
            }
        }
        Ok(())
    }

    /// Deletes the least recently used entries (by modification time) until the directory's
    /// entries take at most three quarters of the bound, when they take more than it, and
    /// stamps the time in the file `trimmed`. Temporary files of stores are left alone. Fails
    /// when the directory cannot be read or the stamp written; entries that another process
    /// removed meanwhile are skipped.
    pub fn trim(&self) -> std::io::Result<()> {
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let Ok(e) = e else { continue };
            let path = e.path();
            if !is_entry(&path) {
                continue;
            }
            if let Ok(m) = e.metadata() {
                let used = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                entries.push((used, m.len(), path));
            }
        }
        std::fs::write(self.dir.join(TRIM_STAMP), b"")?;
        let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
        if total <= self.max_bytes {
            return Ok(());
        }
        entries.sort();
        let keep = self.max_bytes / 4 * 3;
        for (_, len, path) in entries {
            if total <= keep {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
        tracing::debug!(dir = %self.dir.display(), bytes = total, "kernel cache trimmed");
        Ok(())
    }
}

/// Whether `path` names a cache entry (`<32 hex digits>.bin`).
fn is_entry(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "bin")
        && path
            .file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}
