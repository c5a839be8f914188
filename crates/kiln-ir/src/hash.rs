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

/// Two independent FNV-1a-style lanes over the bytes `Hash` feeds; lengths and enum tags are
/// fed as fixed-width little-endian integers, so the digest depends only on the kernel's
/// structure: the same in every process and on every machine for one kiln version.
struct StableHasher {
    a: u64,
    b: u64,
}

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.a = (self.a ^ byte as u64).wrapping_mul(0x0000_0100_0000_01b3);
            self.b = (self.b ^ byte as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29);
        }
    }
    fn write_usize(&mut self, i: usize) {
        self.write(&(i as u64).to_le_bytes());
    }
    fn write_isize(&mut self, i: isize) {
        self.write(&(i as i64).to_le_bytes());
    }
    fn write_u16(&mut self, i: u16) {
        self.write(&i.to_le_bytes());
    }
    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }
    fn write_u64(&mut self, i: u64) {
        self.write(&i.to_le_bytes());
    }
    fn finish(&self) -> u64 {
        self.a ^ self.b
    }
}

/// The structural hash of a kernel: equal kernels (same structure, names and constants) hash
/// equal; any change to a statement, type, constant or name changes it.
pub fn kernel_hash(k: &Kernel) -> KernelHash {
    let mut h = StableHasher {
        a: 0xcbf2_9ce4_8422_2325,
        b: 0x6c62_272e_07bb_0142,
    };
    env!("CARGO_PKG_VERSION").hash(&mut h);
    k.hash(&mut h);
    KernelHash(((h.a as u128) << 64) | h.b as u128)
}
