//! The structural hash: a 128-bit digest of a kernel's structure, the key of kernel caches.

use crate::ir::Kernel;
use std::hash::{Hash, Hasher};

/// A 128-bit structural hash, printed as 32 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelHash(pub u128);

impl std::fmt::Display for KernelHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Two independent multiply-rotate hashes over the words `Hash` feeds: integers, lengths and
/// enum tags as one little-endian 64-bit word each, byte strings eight bytes at a time
/// followed by their length. Each hash deals its words round-robin to [`LANES`] lanes, so
/// that their multiplications do not wait on each other (a kernel is hashed on every cached
/// query call). The digest depends only on the kernel's structure: the same in every process
/// and on every machine for one kiln version.
struct StableHasher {
    a: [u64; LANES],
    b: [u64; LANES],
    /// Words mixed so far.
    words: usize,
}

/// Lanes of each of [`StableHasher`]'s two hashes.
const LANES: usize = 4;

impl StableHasher {
    fn new() -> StableHasher {
        let lanes = |seed: u64| std::array::from_fn(|i| seed ^ (i as u64).wrapping_mul(0x9e37));
        StableHasher {
            a: lanes(0xcbf2_9ce4_8422_2325),
            b: lanes(0x6c62_272e_07bb_0142),
            words: 0,
        }
    }

    fn mix(&mut self, w: u64) {
        let lane = self.words % LANES;
        self.words += 1;
        self.a[lane] = (self.a[lane] ^ w)
            .wrapping_mul(0x0000_0100_0000_01b3)
            .rotate_left(31);
        self.b[lane] = (self.b[lane] ^ w)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }

    /// One hash's value: its lanes folded in order, each step spreading every input bit over
    /// every output bit, then the word count.
    fn digest(lanes: &[u64; LANES], words: usize) -> u64 {
        let folded = lanes
            .iter()
            .fold(0u64, |h, &l| Self::avalanche(h.rotate_left(17) ^ l));
        Self::avalanche(folded ^ words as u64)
    }

    /// `x` with every input bit spread over every output bit.
    fn avalanche(mut x: u64) -> u64 {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.mix(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(b));
        }
        self.mix(bytes.len() as u64);
    }
    fn write_u8(&mut self, i: u8) {
        self.mix(i as u64);
    }
    fn write_u16(&mut self, i: u16) {
        self.mix(i as u64);
    }
    fn write_u32(&mut self, i: u32) {
        self.mix(i as u64);
    }
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    fn write_isize(&mut self, i: isize) {
        self.mix(i as i64 as u64);
    }
    fn finish(&self) -> u64 {
        Self::digest(&self.a, self.words) ^ Self::digest(&self.b, self.words)
    }
}

/// The structural hash of a kernel: equal kernels (same structure, names and constants) hash
/// equal; any change to a statement, type, constant or name changes it.
pub fn kernel_hash(k: &Kernel) -> KernelHash {
    let mut h = StableHasher::new();
    env!("CARGO_PKG_VERSION").hash(&mut h);
    k.hash(&mut h);
    let (a, b) = (
        StableHasher::digest(&h.a, h.words),
        StableHasher::digest(&h.b, h.words),
    );
    KernelHash(((a as u128) << 64) | b as u128)
}
