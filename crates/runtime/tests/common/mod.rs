//! Helpers shared by the runtime's integration tests.
#![allow(dead_code)]

/// SplitMix64: a small seeded generator (chunk sizes, payloads, random operations).
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// A length: mostly small, sometimes large (buffers fill, writes go partial).
    pub fn len(&mut self) -> usize {
        match self.next() % 4 {
            0 => self.range(1, 64),
            1 => self.range(1, 4096),
            2 => self.range(1, 40_000),
            _ => self.range(40_000, 300_000),
        }
    }
}
