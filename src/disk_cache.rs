//! The on-disk cache of compiled binaries (OpenCL program binaries today; PTX/cubin when the
//! CUDA backend launches). One file per (kernel structure, generated source, backend, device,
//! compiler version and options), holding a magic line, a checksum of the payload and the payload. A file that
//! fails the check is deleted and the kernel is compiled again; it is never loaded.

use std::path::PathBuf;

const MAGIC: &[u8] = b"kiln-binary-1\n";

/// A directory of checksummed binaries.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
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
    /// A cache in `dir` (created on first store).
    pub fn new(dir: PathBuf) -> DiskCache {
        DiskCache { dir }
    }

    /// The cache in `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`;
    /// `None` when `KILN_CACHE_DIR` is `off` or no directory can be named.
    pub fn from_env() -> Option<DiskCache> {
        let dir = match std::env::var_os("KILN_CACHE_DIR") {
            Some(d) if d == "off" => return None,
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
                .join("kiln"),
        };
        Some(DiskCache { dir })
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
    /// never see a partial entry.
    pub fn store(&self, key_parts: &[&str], payload: &[u8]) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(key_parts);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut data = Vec::with_capacity(MAGIC.len() + 16 + payload.len());
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&digest(payload).to_le_bytes());
        data.extend_from_slice(payload);
        std::fs::write(&tmp, &data)?;
        std::fs::rename(&tmp, &path)
    }
}
