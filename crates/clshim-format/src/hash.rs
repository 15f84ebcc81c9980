//! One stable 64-bit hash (FNV-1a) for source identity in records and for the checksum and
//! device fingerprint in clshim binaries. Stable across Rust versions and processes, unlike
//! std's hasher, because clshim binaries outlive the process that wrote them.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

#[derive(Clone, Copy)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(OFFSET)
    }
}

impl Fnv1a {
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(PRIME);
        }
        self
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

pub fn fnv1a64(bytes: &[u8]) -> u64 {
    Fnv1a::default().update(bytes).finish()
}

/// The form records use: `fnv1a64:` and 16 hex digits.
pub fn label(h: u64) -> String {
    format!("fnv1a64:{h:016x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(super::fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(super::fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(super::fnv1a64(b"foobar"), 0x85944171f73967e8);
    }
}
