//! [`MemoryPool`]: freed device allocations kept for reuse.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Freed allocations a backend keeps for reuse, each under its exact size in bytes, up to
/// `capacity` bytes in all; when a freed block does not fit, the longest-kept blocks make room
/// for it. A loop of queries that each make a new buffer of the same size then reuses the last
/// one's memory instead of asking the allocator (and the operating system, page by page)
/// again. A reused block holds whatever was last written to it.
pub struct MemoryPool<B> {
    capacity: u64,
    state: Mutex<PoolState<B>>,
}

struct PoolState<B> {
    /// Oldest first: `(bytes, block)`.
    blocks: VecDeque<(usize, B)>,
    bytes: u64,
}

impl<B> MemoryPool<B> {
    /// An empty pool that keeps at most `capacity` bytes of freed blocks.
    pub fn new(capacity: u64) -> MemoryPool<B> {
        MemoryPool {
            capacity,
            state: Mutex::new(PoolState {
                blocks: VecDeque::new(),
                bytes: 0,
            }),
        }
    }

    /// The block most recently kept with exactly `bytes`, taken out of the pool; `None` when
    /// there is none.
    pub fn take(&self, bytes: usize) -> Option<B> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let at = s.blocks.iter().rposition(|(b, _)| *b == bytes)?;
        let (_, block) = s.blocks.remove(at)?;
        s.bytes -= bytes as u64;
        Some(block)
    }

    /// Keeps `block` of `bytes` for a later [`take`](Self::take), dropping the longest-kept
    /// blocks while the pool would hold more than its capacity. A block larger than the whole
    /// capacity is dropped at once.
    pub fn keep(&self, bytes: usize, block: B) {
        if bytes as u64 > self.capacity {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.bytes + bytes as u64 > self.capacity {
            let Some((old, _)) = s.blocks.pop_front() else {
                break;
            };
            s.bytes -= old as u64;
        }
        s.bytes += bytes as u64;
        s.blocks.push_back((bytes, block));
    }

    /// Bytes of freed blocks the pool holds now.
    pub fn kept_bytes(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).bytes
    }
}

/// How many bytes of freed blocks a backend keeps for a device of `memory_bytes`: an eighth of
/// its memory, at most 1 GiB.
pub fn pool_capacity(memory_bytes: u64) -> u64 {
    (memory_bytes / 8).min(1 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_reused_by_exact_size_and_the_oldest_make_room() {
        let pool = MemoryPool::new(100);
        assert!(pool.take(10).is_none());
        pool.keep(10, "a");
        pool.keep(20, "b");
        pool.keep(10, "c");
        assert_eq!(pool.kept_bytes(), 40);
        assert_eq!(pool.take(10), Some("c"), "the most recently kept first");
        assert_eq!(pool.take(10), Some("a"));
        assert_eq!(pool.take(10), None);
        assert_eq!(pool.take(30), None, "no block of another size");
        pool.keep(70, "d");
        assert_eq!(pool.kept_bytes(), 90);
        pool.keep(30, "e");
        assert_eq!(
            pool.kept_bytes(),
            100,
            "b (20) made room for e (30) with d (70)"
        );
        assert_eq!(pool.take(20), None);
        assert_eq!(pool.take(70), Some("d"));
        pool.keep(101, "f");
        assert_eq!(
            pool.kept_bytes(),
            30,
            "larger than the whole pool: not kept"
        );
        assert_eq!(pool.take(101), None);
    }

    #[test]
    fn the_capacity_is_an_eighth_of_memory_up_to_a_gibibyte() {
        assert_eq!(pool_capacity(8 << 20), 1 << 20);
        assert_eq!(pool_capacity(80 << 30), 1 << 30);
    }
}
