//! `kiln cache`: where the disk cache of compiled binaries is, what it holds, and `clear`.

use crate::{say, Failure};
use kiln::DiskCache;

/// Bytes as MiB with one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Prints the cache's folder, entries, bytes and bound; with `clear`, deletes its entries
/// first. Fails when the folder cannot be read or an entry cannot be deleted.
pub(crate) fn run(clear: bool) -> Result<(), Failure> {
    let Some(cache) = DiskCache::from_env() else {
        say("the disk cache is off (KILN_CACHE_DIR=off, or no HOME to put it under)");
        return Ok(());
    };
    let dir = cache.dir().display().to_string();
    if clear {
        let deleted = cache
            .clear()
            .map_err(|e| Failure::new(format!("cannot clear the disk cache {dir}: {e}")))?;
        say(format!("deleted {deleted} entries"));
    }
    let usage = cache
        .usage()
        .map_err(|e| Failure::new(format!("cannot read the disk cache {dir}: {e}")))?;
    say(format!("folder   {dir}"));
    say(format!("entries  {}", usage.entries));
    say(format!(
        "size     {} ({} bytes)",
        mib(usage.bytes),
        usage.bytes
    ));
    say(format!(
        "bound    {} (KILN_CACHE_MAX_MB)",
        mib(cache.max_bytes())
    ));
    Ok(())
}
