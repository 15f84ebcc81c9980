//! The clshim binary: what `substitute` hands an application in place of pocl's binary,
//! and what `clCreateProgramWithBinary` turns back into a program. It only ever holds
//! program text (source or IL) and how it was built, never code to run, so loading one can
//! lead to nothing but a build from that text.
//!
//! Layout, all integers little-endian:
//! `magic "CLSHIMB\0"` · `version u32` · `flags u32 (0)` · `device fingerprint u64` ·
//! `body length u64` · `body` · `FNV-1a 64 checksum u64` of everything before it.
//! Version 1's body is a program's source alone (rebuilt with whatever options the
//! application passes); versions 2 and 3 carry a [`Recipe`] (the `recipe` module's
//! encodings: 2 nests each link input in place, 3, written since, holds each distinct
//! part once), with the options and, for compiled objects and linked programs, every
//! part needed to make the program again. One checksum and one fingerprint cover every part.
//! The layout is deterministic, so the size a `CL_PROGRAM_BINARY_SIZES` query reports always
//! equals what the following `CL_PROGRAM_BINARIES` query writes.
//!
//! Anyone who can write into an application's binary cache can hand clshim a binary, so
//! every field is checked before it is used: the magic, version, flags, the declared
//! length (within the limit, equal to the bytes present), the checksum, the device, and
//! the source itself (not empty, no NUL byte: `encode` never writes either, and a source
//! build of an empty text reads a dangling pointer in some drivers). An application's
//! binary is read through [`decode_app`], from `app_args`'s view of it,, which reads the header first and the rest only
//! when the length it claims is the one the header declares.

use crate::app_args::AppBytes;
use crate::hash::fnv1a64;
use crate::recipe::{Broken, Kind, Recipe, Text};
use std::fmt;

use clshim_format::binary::{HEADER, TRAILER};
pub use clshim_format::binary::{MAGIC, VERSION, VERSION_SOURCE, VERSION_TREE};
/// The largest source a clshim binary may carry (the envelope's limit on a body).
pub const MAX_SOURCE: usize = clshim_format::binary::MAX_BODY;

/// Why a binary that starts like a clshim binary was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    Truncated { length: usize },
    OtherVersion { version: u32 },
    BadFlags { flags: u32 },
    TooLarge { length: u64 },
    LengthMismatch { declared: u64, actual: usize },
    Checksum,
    OtherDevice,
    EmptySource,
    NulInSource { at: usize },
    Recipe(Broken),
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Truncated { length } => write!(f, "truncated ({length} bytes)"),
            Rejection::OtherVersion { version } => {
                write!(
                    f,
                    "clshim binary format version {version}, this clshim reads {VERSION_SOURCE} \
                     to {VERSION}"
                )
            }
            Rejection::BadFlags { flags } => write!(f, "unknown flags {flags:#x}"),
            Rejection::TooLarge { length } => write!(
                f,
                "declared source length {length} exceeds the limit {MAX_SOURCE}"
            ),
            Rejection::LengthMismatch { declared, actual } => {
                write!(
                    f,
                    "declared source length {declared} does not match the {actual} bytes present"
                )
            }
            Rejection::Checksum => write!(f, "checksum mismatch (corrupt)"),
            Rejection::OtherDevice => {
                write!(f, "made for another platform, device or driver version")
            }
            Rejection::EmptySource => write!(f, "carries an empty source"),
            Rejection::NulInSource { at } => {
                write!(f, "carries a NUL byte in its source (offset {at})")
            }
            Rejection::Recipe(b) => write!(f, "{b}"),
        }
    }
}

/// Whether `bytes` claims to be a clshim binary (decided by the magic alone).
pub fn is_clshim(bytes: &[u8]) -> bool {
    bytes.len() >= MAGIC.len() && &bytes[..MAGIC.len()] == MAGIC
}

/// The size `encode` will produce for a source of `source_len` bytes.
pub fn encoded_len(source_len: usize) -> usize {
    HEADER + source_len + TRAILER
}

/// A version-1 binary: the source alone.
pub fn encode(source: &[u8], fingerprint: u64) -> Vec<u8> {
    envelope(VERSION_SOURCE, source, fingerprint)
}

/// A binary of the current version carrying `recipe`.
pub fn encode_recipe(recipe: &Recipe, fingerprint: u64) -> Vec<u8> {
    envelope(VERSION, &recipe.encode(), fingerprint)
}

fn envelope(version: u32, body: &[u8], fingerprint: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(body.len()));
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&fingerprint.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    let sum = fnv1a64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Checks the header (`head`, at least `HEADER` bytes) of a clshim binary that claims to
/// be `total` bytes long; returns the declared source length.
fn check_header(head: &[u8], total: usize) -> Result<usize, Rejection> {
    if total < HEADER + TRAILER || head.len() < HEADER || !is_clshim(head) {
        return Err(Rejection::Truncated { length: total });
    }
    let version = u32_at(head, 8);
    if !(VERSION_SOURCE..=VERSION).contains(&version) {
        return Err(Rejection::OtherVersion { version });
    }
    let flags = u32_at(head, 12);
    if flags != 0 {
        return Err(Rejection::BadFlags { flags });
    }
    let declared = u64_at(head, 24);
    if declared > MAX_SOURCE as u64 {
        return Err(Rejection::TooLarge { length: declared });
    }
    let actual = total - HEADER - TRAILER;
    if declared != actual as u64 {
        return Err(Rejection::LengthMismatch { declared, actual });
    }
    Ok(declared as usize)
}

/// The recipe inside a clshim binary made for the device with `fingerprint` (a version-1
/// binary gives a build recipe with no options). Every length is checked against the
/// buffer before it is used.
pub fn decode(bytes: &[u8], fingerprint: u64) -> Result<Recipe, Rejection> {
    check_header(bytes, bytes.len())?;
    let body = &bytes[..bytes.len() - TRAILER];
    if fnv1a64(body) != u64_at(bytes, bytes.len() - TRAILER) {
        return Err(Rejection::Checksum);
    }
    if u64_at(bytes, 16) != fingerprint {
        return Err(Rejection::OtherDevice);
    }
    let inner = &body[HEADER..];
    match u32_at(bytes, 8) {
        VERSION => return Recipe::decode(inner).map_err(Rejection::Recipe),
        VERSION_TREE => return Recipe::decode_tree(inner).map_err(Rejection::Recipe),
        _ => {}
    }
    if inner.is_empty() {
        return Err(Rejection::EmptySource);
    }
    if let Some(at) = inner.iter().position(|&b| b == 0) {
        return Err(Rejection::NulInSource { at });
    }
    Ok(Recipe {
        kind: Kind::Built,
        options: None,
        text: Text::Source(inner.to_vec()),
        headers: Vec::new(),
        inputs: Vec::new(),
    })
}

/// Whether the application's binary claims to be a clshim binary: reads at most the
/// magic's 8 bytes, and nothing when it is shorter.
pub fn app_is_clshim(binary: &AppBytes) -> bool {
    binary.prefix(MAGIC.len()).is_some_and(is_clshim)
}

/// [`decode`] of the application's binary: reads the header first, and the whole binary
/// only when its length is the one the header declares (so never more than `MAX_SOURCE`
/// and the header and trailer, whatever length the application claims).
pub fn decode_app(binary: &AppBytes, fingerprint: u64) -> Result<Recipe, Rejection> {
    let len = binary.len();
    let Some(header) = binary.prefix(HEADER).filter(|_| len >= HEADER + TRAILER) else {
        return Err(Rejection::Truncated { length: len });
    };
    check_header(header, len)?;
    // check_header found `len` to be the length the header declares, bounded by
    // MAX_SOURCE, so `whole` is that many bytes.
    let whole = binary.whole().ok_or(Rejection::Truncated { length: len })?;
    decode(whole, fingerprint)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &[u8] = b"__kernel void k(__global int *a) { a[0] = 1; }";

    fn src_of(r: Result<Recipe, Rejection>) -> Result<Vec<u8>, Rejection> {
        r.map(|r| {
            assert_eq!((r.kind, r.options), (Kind::Built, None));
            r.text.bytes().to_vec()
        })
    }

    #[test]
    fn round_trip() {
        let b = encode(SRC, 7);
        assert_eq!(b.len(), encoded_len(SRC.len()));
        assert!(is_clshim(&b));
        assert_eq!(src_of(decode(&b, 7)), Ok(SRC.to_vec()));
        assert_eq!(encode(SRC, 7), b, "encoding must be deterministic");
        assert_eq!(
            decode(&encode(b"", 1), 1).err(),
            Some(Rejection::EmptySource)
        );
        assert_eq!(
            decode(&encode(b"a\0b", 1), 1).err(),
            Some(Rejection::NulInSource { at: 1 })
        );
        let r = Recipe::built(Text::Source(SRC.to_vec()), b"-DVAL=7".to_vec());
        let b2 = encode_recipe(&r, 7);
        assert_eq!(u32_at(&b2, 8), VERSION);
        assert_eq!(decode(&b2, 7), Ok(r.clone()));
        assert_eq!(decode(&b2, 8), Err(Rejection::OtherDevice));
        for i in HEADER..b2.len() {
            let mut flip = b2.clone();
            flip[i] ^= 0x10;
            assert!(
                decode(&flip, 7).is_err(),
                "flipped byte {i} of a recipe accepted"
            );
        }
    }

    #[test]
    fn every_bad_input_is_rejected_with_its_reason() {
        let good = encode(SRC, 7);
        assert_eq!(decode(&good, 8).err(), Some(Rejection::OtherDevice));
        for cut in [0, 5, 8, 20, HEADER + TRAILER - 1] {
            assert!(
                matches!(decode(&good[..cut], 7), Err(Rejection::Truncated { .. })),
                "cut {cut}"
            );
        }
        assert!(matches!(
            decode(&good[..good.len() - 1], 7),
            Err(Rejection::LengthMismatch { .. })
        ));
        for v in [0, 4] {
            let mut other = good.clone();
            other[8] = v;
            assert_eq!(
                decode(&other, 7).err(),
                Some(Rejection::OtherVersion { version: v as u32 })
            );
        }
        let mut flags = good.clone();
        flags[12] = 1;
        assert_eq!(
            decode(&flags, 7).err(),
            Some(Rejection::BadFlags { flags: 1 })
        );
        let mut huge = good.clone();
        huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(decode(&huge, 7), Err(Rejection::TooLarge { .. })));
        for i in HEADER..good.len() {
            let mut flip = good.clone();
            flip[i] ^= 0x40;
            assert!(decode(&flip, 7).is_err(), "flipped byte {i} accepted");
        }
        let mut extra = good.clone();
        extra.push(0);
        assert!(decode(&extra, 7).is_err());
        assert!(!is_clshim(b"POCLBINARY"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        // A small deterministic generator: decode must return, never panic, on any input.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for n in 0..20_000usize {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 96) as usize;
            let mut buf: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8).collect();
            if n % 2 == 0 && len >= 8 {
                buf[..8].copy_from_slice(MAGIC);
            }
            let _ = decode(&buf, x);
        }
    }

    #[test]
    fn app_binaries_are_read_no_further_than_their_header_allows() {
        let good = encode(SRC, 7);
        // SAFETY: every pointer below is a live buffer of at least the length given, or
        // NULL, or claims a length that only the header check may look at.
        let app = |ptr: *const u8, len: usize| unsafe { AppBytes::new(ptr, len) };
        assert!(app_is_clshim(&app(good.as_ptr(), good.len())));
        assert!(!app_is_clshim(&app(good.as_ptr(), 7)));
        assert!(!app_is_clshim(&app(std::ptr::null(), 100)));
        assert_eq!(
            src_of(decode_app(&app(good.as_ptr(), good.len()), 7)),
            Ok(SRC.to_vec())
        );
        // A length far beyond the buffer: only the header is read, and it declares
        // another length.
        for claim in [usize::MAX, isize::MAX as usize + 1, good.len() + 1] {
            assert!(
                matches!(
                    decode_app(&app(good.as_ptr(), claim), 7),
                    Err(Rejection::LengthMismatch { .. })
                ),
                "{claim}"
            );
        }
        assert!(matches!(
            decode_app(&app(good.as_ptr(), 12), 7),
            Err(Rejection::Truncated { .. })
        ));
    }
}
