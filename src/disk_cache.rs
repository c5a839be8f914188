//! The on-disk cache of compiled binaries (OpenCL program binaries and CUDA cubins). One file
//! per key (kernel structure, generated source, backend, device, compiler version and
//! options), named by the key's BLAKE3 digest and holding a magic line, the whole key, a
//! BLAKE3 digest of key and payload, and the payload. A file is loaded only when it is a
//! regular file, its key is the key asked for and the digest matches: an entry copied over
//! another's name, a damaged one or one of an older format is deleted and the kernel is
//! compiled again; it is never loaded.
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

const MAGIC: &[u8] = b"kiln-binary-2\n";

/// The file whose modification time says when the directory was last trimmed.
const TRIM_STAMP: &str = "trimmed";

/// How long after a trim a process's first store does not look at the directory again.
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);

/// The size bound of a cache made by [`DiskCache::from_env`] without `KILN_CACHE_MAX_MB`.
///
/// ```
/// use kiln::DiskCache;
/// let dir = std::env::temp_dir().join(format!("kiln-doc-default-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let cache = DiskCache::new(dir.clone());
/// assert_eq!(cache.max_bytes(), kiln::DEFAULT_CACHE_MAX_BYTES);
/// std::fs::create_dir_all(&dir)?;
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1 << 30;

/// What a [`DiskCache`] holds.
///
/// ```
/// use kiln::DiskCache;
/// let dir = std::env::temp_dir().join(format!("kiln-doc-usage-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let cache = DiskCache::new(dir.clone());
/// cache.store(&["kernel a", "cuda"], &[1, 2, 3])?;
/// cache.store(&["kernel b", "cuda"], &[4, 5])?;
/// let usage = cache.usage()?;
/// assert_eq!(usage.entries, 2);
/// assert!(usage.bytes >= 5); // the payloads and each entry's key and checksum
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheUsage {
    /// How many entries (compiled binaries).
    pub entries: usize,
    /// Their bytes together.
    pub bytes: u64,
}

/// A directory of checksummed binaries, kept under a size bound. Contexts use the one
/// [`DiskCache::from_env`] names; `kiln cache` shows and clears it.
///
/// ```
/// use kiln::DiskCache;
/// let dir = std::env::temp_dir().join(format!("kiln-doc-roundtrip-{}", std::process::id()));
/// # let _ = std::fs::remove_dir_all(&dir);
/// let cache = DiskCache::new(dir.clone());
/// let key = ["saxpy", "sm_90", "nvrtc 12.9"];
/// assert_eq!(cache.load(&key), None);
/// cache.store(&key, b"compiled binary")?;
/// assert_eq!(cache.load(&key).as_deref(), Some(&b"compiled binary"[..]));
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    /// Bytes this process stored since it last trimmed; `u64::MAX` before its first store.
    stored: Arc<AtomicU64>,
}

/// The key parts joined as one string: what an entry records and is named after.
fn joined(key_parts: &[&str]) -> String {
    key_parts.join("\u{1f}")
}

/// The BLAKE3 digest that checks an entry: of its key's length, its key and its payload.
fn checksum(key: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&(key.len() as u64).to_le_bytes());
    h.update(key);
    h.update(payload);
    *h.finalize().as_bytes()
}

/// The bytes of the regular file at `path`, read without blocking on what is not one (a FIFO
/// put in the cache directory would otherwise hang the read); `None` for anything else.
fn read_regular(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut options = std::fs::File::options();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let mut file = options.open(path).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut data = Vec::new();
    file.read_to_end(&mut data).ok()?;
    Some(data)
}

impl DiskCache {
    /// A cache in `dir` (created on first store) bounded by [`DEFAULT_CACHE_MAX_BYTES`].
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-new-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// assert!(!dir.exists());
    /// cache.store(&["k"], &[0])?;
    /// assert!(dir.is_dir());
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(dir: PathBuf) -> DiskCache {
        DiskCache::with_limit(dir, DEFAULT_CACHE_MAX_BYTES)
    }

    /// A cache in `dir` whose files take at most about `max_bytes` together (see the module
    /// documentation for when it trims).
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-limit-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::with_limit(dir.clone(), 64 << 10);
    /// assert_eq!(cache.max_bytes(), 64 << 10);
    /// for i in 0..8 {
    ///     cache.store(&[&format!("kernel {i}")], &vec![0u8; 16 << 10])?;
    /// }
    /// cache.trim()?;
    /// assert!(cache.usage()?.bytes <= 64 << 10);
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_limit(dir: PathBuf, max_bytes: u64) -> DiskCache {
        DiskCache {
            dir,
            max_bytes,
            stored: Arc::new(AtomicU64::new(u64::MAX)),
        }
    }

    /// The size bound in bytes.
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-max-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// assert_eq!(DiskCache::with_limit(dir.clone(), 1 << 20).max_bytes(), 1 << 20);
    /// std::fs::create_dir_all(&dir)?;
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The directory it keeps its files in.
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-dir-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// cache.store(&["k"], &[7])?;
    /// assert!(cache.path(&["k"]).starts_with(cache.dir()));
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many entries it holds and their bytes together: none when the directory does not
    /// exist yet. Fails when the directory exists but cannot be read.
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-usage2-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// assert_eq!(cache.usage()?.entries, 0); // no directory yet
    /// cache.store(&["k"], &[1, 2, 3, 4])?;
    /// assert_eq!(cache.usage()?.entries, 1);
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn usage(&self) -> std::io::Result<CacheUsage> {
        let entries = self.entries()?;
        Ok(CacheUsage {
            entries: entries.len(),
            bytes: entries.iter().map(|(_, len, _)| len).sum(),
        })
    }

    /// Deletes every entry (the directory and any other files in it stay) and returns how
    /// many it deleted. Fails when the directory exists but cannot be read, or an entry
    /// cannot be deleted (one another process deleted meanwhile is not a failure).
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-clear-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// cache.store(&["a"], &[1])?;
    /// cache.store(&["b"], &[2])?;
    /// assert_eq!(cache.clear()?, 2);
    /// assert_eq!(cache.load(&["a"]), None);
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clear(&self) -> std::io::Result<usize> {
        let mut deleted = 0;
        for (_, _, path) in self.entries()? {
            match std::fs::remove_file(&path) {
                Ok(()) => deleted += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    /// Each entry's last use, length and path; none when the directory does not exist.
    fn entries(&self) -> std::io::Result<Vec<(SystemTime, u64, PathBuf)>> {
        let listing = match std::fs::read_dir(&self.dir) {
            Ok(listing) => listing,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut entries = Vec::new();
        for e in listing {
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
        Ok(entries)
    }

    /// The cache in `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`,
    /// bounded by `KILN_CACHE_MAX_MB` mebibytes (a positive whole number; otherwise, with a
    /// warning, [`DEFAULT_CACHE_MAX_BYTES`]). `None` when `KILN_CACHE_DIR` is `off` or no
    /// directory can be named.
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-env-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// std::env::set_var("KILN_CACHE_DIR", &dir);
    /// std::env::set_var("KILN_CACHE_MAX_MB", "16");
    /// let cache = DiskCache::from_env().expect("a directory is named");
    /// assert_eq!((cache.dir(), cache.max_bytes()), (dir.as_path(), 16 << 20));
    /// std::env::set_var("KILN_CACHE_DIR", "off");
    /// assert!(DiskCache::from_env().is_none());
    /// std::fs::create_dir_all(&dir)?;
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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

    /// The file for a key made of everything the binary depends on: the first 128 bits of
    /// the key's BLAKE3 digest, in hex.
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-path-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// let (a, b) = (cache.path(&["kernel", "cuda"]), cache.path(&["kernel", "opencl"]));
    /// assert_ne!(a, b);
    /// assert_eq!(a, cache.path(&["kernel", "cuda"]));
    /// std::fs::create_dir_all(&dir)?;
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn path(&self, key_parts: &[&str]) -> PathBuf {
        let digest = blake3::hash(joined(key_parts).as_bytes());
        let hex: String = digest.as_bytes()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.dir.join(format!("{hex}.bin"))
    }

    /// The payload stored under `key_parts`, if its file is a regular file recording exactly
    /// this key and its digest matches. Any other file under that name (damaged, of another
    /// key, of an older format) is deleted; something that is not a regular file is left
    /// alone and not read.
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-load-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// cache.store(&["k"], b"binary")?;
    /// assert_eq!(cache.load(&["k"]), Some(b"binary".to_vec()));
    /// std::fs::write(cache.path(&["k"]), b"damaged")?;
    /// assert_eq!(cache.load(&["k"]), None); // and the damaged file is gone
    /// assert!(!cache.path(&["k"]).exists());
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(&self, key_parts: &[&str]) -> Option<Vec<u8>> {
        let path = self.path(key_parts);
        let data = read_regular(&path)?;
        let key = joined(key_parts);
        match payload_of(&data, key.as_bytes()) {
            Some(payload) => {
                // Marks the entry used, so that trimming keeps it; a cache on a read-only
                // directory still loads.
                if let Ok(f) = std::fs::File::options().write(true).open(&path) {
                    let _ = f.set_modified(SystemTime::now());
                }
                Some(payload.to_vec())
            }
            None => {
                tracing::warn!(path = %path.display(), "kernel cache entry of another key, or damaged, removed");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Removes the entry under `key_parts` (the driver rejected it).
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-remove-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// cache.store(&["k"], &[1])?;
    /// cache.remove(&["k"]);
    /// assert_eq!(cache.load(&["k"]), None);
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remove(&self, key_parts: &[&str]) {
        let _ = std::fs::remove_file(self.path(key_parts));
    }

    /// Stores `payload` under `key_parts`, writing a temporary file and renaming it so readers
    /// never see a partial entry, then trims the directory when due (see the module
    /// documentation; a failed trim is logged). Fails when the entry cannot be written.
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-store-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::new(dir.clone());
    /// cache.store(&["k"], &[1])?;
    /// cache.store(&["k"], &[2])?; // replaces it
    /// assert_eq!(cache.load(&["k"]), Some(vec![2]));
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn store(&self, key_parts: &[&str], payload: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(key_parts);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let key = joined(key_parts);
        let mut data = Vec::with_capacity(MAGIC.len() + 8 + key.len() + 32 + payload.len());
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&(key.len() as u64).to_le_bytes());
        data.extend_from_slice(key.as_bytes());
        data.extend_from_slice(&checksum(key.as_bytes(), payload));
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
    ///
    /// ```
    /// use kiln::DiskCache;
    /// let dir = std::env::temp_dir().join(format!("kiln-doc-trim-{}", std::process::id()));
    /// # let _ = std::fs::remove_dir_all(&dir);
    /// let cache = DiskCache::with_limit(dir.clone(), 40 << 10);
    /// for i in 0..10 {
    ///     cache.store(&[&format!("k{i}")], &vec![1u8; 8 << 10])?;
    /// }
    /// // 80 KiB were stored into a 40 KiB bound: the stores trimmed when due, and a trim
    /// // brings what is left under the bound.
    /// cache.trim()?;
    /// let usage = cache.usage()?;
    /// assert!(usage.bytes <= 40 << 10 && usage.entries < 10, "{usage:?}");
    /// std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn trim(&self) -> std::io::Result<()> {
        let mut entries = self.entries()?;
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

/// The payload of entry `data` when it is of the current format, records `key` and its
/// checksum matches.
fn payload_of<'d>(data: &'d [u8], key: &[u8]) -> Option<&'d [u8]> {
    let rest = data.strip_prefix(MAGIC)?;
    let (len, rest) = rest.split_at_checked(8)?;
    let len = u64::from_le_bytes(len.try_into().ok()?);
    let (stored_key, rest) = rest.split_at_checked(usize::try_from(len).ok()?)?;
    let (sum, payload) = rest.split_at_checked(32)?;
    (stored_key == key && sum == checksum(key, payload)).then_some(payload)
}

/// Whether `path` names a cache entry (`<32 hex digits>.bin`).
fn is_entry(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "bin")
        && path
            .file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}
