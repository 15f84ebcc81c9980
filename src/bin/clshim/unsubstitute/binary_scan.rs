//! Finding clshim binaries inside one open file, for `clshim unsubstitute`. This module owns
//! the question "does this file hold a clshim binary, and is that binary the whole file?":
//! it streams the file in fixed-size chunks (memory stays bounded whatever the file's size),
//! looks for the magic `CLSHIMB\0`, and checks each place it occurs the way a reader of the
//! format would before believing it: a version clshim has written, flags 0, a declared
//! body length within clshim's limit that fits in the file, and the FNV-1a checksum over the
//! header and body equal to the trailer. A file that merely contains those eight bytes (the
//! library itself, a document about clshim, random data) is told apart from one holding a
//! real clshim binary. The body's recipe is not decoded: a checksummed envelope with clshim's
//! magic is clshim's own, whatever device or recipe it names. It also tells an application
//! cache entry that wraps one binary in a layout it knows ([`Framing`]) from other data
//! that merely holds clshim binaries (an archive or a backup of a cache, a core dump, a
//! log), which `unsubstitute` lists but never removes.

use crate::hash::Fnv1a;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

pub use clshim_format::binary::MAGIC;
use clshim_format::binary::{VERSION, VERSION_SOURCE};
const HEADER: u64 = clshim_format::binary::HEADER as u64;
const TRAILER: u64 = clshim_format::binary::TRAILER as u64;
/// The versions clshim has written.
const VERSIONS: std::ops::RangeInclusive<u32> = VERSION_SOURCE..=VERSION;
const MAX_BODY: u64 = clshim_format::binary::MAX_BODY as u64;
/// How many places holding the magic are checked in one file: a real cache file holds one
/// binary; a file packed with the magic (each place claiming a long body) must not cost a
/// checksum over most of the file per place.
const MAX_CANDIDATES: usize = 64;
const CHUNK: usize = 64 << 10;

/// What one file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No `CLSHIMB\0` anywhere.
    Nothing,
    /// The whole file is one valid clshim binary.
    Is,
    /// One or more valid clshim binaries, with other bytes around them: a cache entry in
    /// a layout `framing` names, or (None) other data that holds them.
    Contains {
        binaries: usize,
        framing: Option<Framing>,
    },
    /// The magic occurs, but no valid clshim binary starts there; `why` is the first place's
    /// reason.
    MagicOnly { places: usize, why: String },
}

/// A cache entry's layout around the one clshim binary it holds, the whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// At most 56 bytes of the application's own (a magic, a version), then the binary's
    /// length as a little-endian u64, then the binary: Boost.Compute's `kernel` files
    /// (the length alone), and the like.
    LengthPrefixed,
    /// clFFT's cache entry: `CLB\0`, the file's, the header's (40), the binary's and the
    /// signature's sizes as u64, the binary, then the signature.
    ClFft,
}

impl Framing {
    pub fn words(self) -> &'static str {
        match self {
            Framing::LengthPrefixed => "a cache entry: its length, then the binary",
            Framing::ClFft => "clFFT's cache entry: a header, the binary, its signature",
        }
    }
}

/// The bytes before a length-prefixed binary, length included, at most.
const MAX_PREFIX: u64 = 64;
/// clFFT's header: magic (4 bytes and 4 of padding), then four u64 sizes.
const CLFFT_HEADER: u64 = 40;

/// Which layout frames the one valid binary at `start..end` of a file of `size` bytes.
fn framing(file: &File, size: u64, start: u64, end: u64) -> io::Result<Option<Framing>> {
    let mut head = [0u8; CLFFT_HEADER as usize];
    let n = read_full_at(file, &mut head[..(start.min(CLFFT_HEADER)) as usize], 0)?;
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap());
    if start == CLFFT_HEADER
        && n == head.len()
        && &head[..4] == b"CLB\0"
        && u64_at(8) == size
        && u64_at(16) == CLFFT_HEADER
        && u64_at(24) == end - start
        && u64_at(32) == size - end
    {
        return Ok(Some(Framing::ClFft));
    }
    if end == size && (8..=MAX_PREFIX).contains(&start) {
        let mut len = [0u8; 8];
        if read_full_at(file, &mut len, start - 8)? == 8 && u64::from_le_bytes(len) == end - start {
            return Ok(Some(Framing::LengthPrefixed));
        }
    }
    Ok(None)
}

/// Scans `file`, `size` bytes long (from `fstat`: bytes appended later are not read).
pub fn scan(file: &File, size: u64) -> io::Result<Found> {
    let mut valid: Vec<(u64, u64)> = Vec::new(); // (start, end) of each valid binary
    let mut first_rejection: Option<String> = None;
    let mut places = 0usize;
    let mut buf = vec![0u8; CHUNK];
    // The last MAGIC.len() - 1 bytes of the previous chunk, so a magic split across two
    // chunks is still seen.
    let mut carry: Vec<u8> = Vec::with_capacity(MAGIC.len());
    let mut pos: u64 = 0; // file offset of buf[0]
    while pos < size {
        let want = CHUNK.min((size - pos) as usize);
        let n = read_full_at(file, &mut buf[..want], pos)?;
        if n == 0 {
            break; // the file shrank after fstat
        }
        let mut window = std::mem::take(&mut carry);
        let window_start = pos - window.len() as u64;
        window.extend_from_slice(&buf[..n]);
        for i in find_all(&window, MAGIC) {
            let at = window_start + i as u64;
            // A place inside a binary already found is part of its body, not a binary of
            // its own.
            if valid.iter().any(|&(s, e)| at > s && at < e) {
                continue;
            }
            places += 1;
            if places > MAX_CANDIDATES {
                continue;
            }
            match check_at(file, at, size)? {
                Ok(end) => valid.push((at, end)),
                Err(why) => {
                    first_rejection.get_or_insert(why);
                }
            }
        }
        let keep = window.len().min(MAGIC.len() - 1);
        carry = window[window.len() - keep..].to_vec();
        pos += n as u64;
    }
    let invalid = places - valid.len();
    Ok(match valid.as_slice() {
        [] if places == 0 => Found::Nothing,
        [] => Found::MagicOnly {
            places,
            why: first_rejection.unwrap_or_else(|| {
                format!("more than {MAX_CANDIDATES} places hold the magic; not checked")
            }),
        },
        [(0, end)] if *end == size && invalid == 0 => Found::Is,
        [(start, end)] if invalid == 0 => Found::Contains {
            binaries: 1,
            framing: framing(file, size, *start, *end)?,
        },
        _ => Found::Contains {
            binaries: valid.len(),
            framing: None,
        },
    })
}

/// Reads until `buf` is full or the file ends; returns the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn find_all<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    hay.windows(needle.len())
        .enumerate()
        .filter(move |(_, w)| *w == needle)
        .map(|(i, _)| i)
}

/// Checks the clshim binary that the magic at `at` starts: `Ok(Ok(end))` with the offset
/// just past its trailer when it is valid, `Ok(Err(reason))` when it is not.
fn check_at(file: &File, at: u64, size: u64) -> io::Result<Result<u64, String>> {
    let mut head = [0u8; HEADER as usize];
    if size - at < HEADER + TRAILER || read_full_at(file, &mut head, at)? < head.len() {
        return Ok(Err("too short for a clshim binary's header".into()));
    }
    let version = u32::from_le_bytes(head[8..12].try_into().unwrap());
    let flags = u32::from_le_bytes(head[12..16].try_into().unwrap());
    let body = u64::from_le_bytes(head[24..32].try_into().unwrap());
    if !VERSIONS.contains(&version) {
        return Ok(Err(format!("unknown format version {version}")));
    }
    if flags != 0 {
        return Ok(Err(format!("unknown flags {flags:#x}")));
    }
    if body > MAX_BODY {
        return Ok(Err(format!("declared length {body} beyond clshim's limit")));
    }
    let end = at + HEADER + body + TRAILER;
    if end > size {
        return Ok(Err(format!(
            "declared length {body} runs past the end of the file"
        )));
    }
    let mut sum = Fnv1a::default();
    sum.update(&head);
    let mut buf = vec![0u8; CHUNK];
    let mut off = at + HEADER;
    let body_end = off + body;
    while off < body_end {
        let want = CHUNK.min((body_end - off) as usize);
        let n = read_full_at(file, &mut buf[..want], off)?;
        if n < want {
            return Ok(Err("the file ended inside the binary".into()));
        }
        sum.update(&buf[..n]);
        off += n as u64;
    }
    let mut trailer = [0u8; TRAILER as usize];
    if read_full_at(file, &mut trailer, body_end)? < trailer.len() {
        return Ok(Err("the file ended inside the binary".into()));
    }
    if u64::from_le_bytes(trailer) != sum.finish() {
        return Ok(Err("checksum mismatch".into()));
    }
    Ok(Ok(end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A clshim binary as src/container.rs writes it (version 1: the source alone).
    fn binary(source: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0x1234u64.to_le_bytes());
        out.extend_from_slice(&(source.len() as u64).to_le_bytes());
        out.extend_from_slice(source);
        let sum = crate::hash::fnv1a64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    fn framed(f: Framing) -> Found {
        Found::Contains {
            binaries: 1,
            framing: Some(f),
        }
    }

    fn other(binaries: usize) -> Found {
        Found::Contains {
            binaries,
            framing: None,
        }
    }

    fn scan_bytes(bytes: &[u8]) -> Found {
        let mut f = tempfile();
        f.write_all(bytes).unwrap();
        scan(&f, bytes.len() as u64).unwrap()
    }

    fn tempfile() -> File {
        let dir = std::env::temp_dir();
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = dir.join(format!("clshim-scan-{}-{n}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        std::fs::remove_file(&p).unwrap();
        f
    }

    #[test]
    fn whole_file_wrapped_and_lookalikes() {
        let b = binary(b"kernel void k(global int *a) { a[0] = 1; }");
        assert_eq!(scan_bytes(&b), Found::Is);
        assert_eq!(scan_bytes(b"plain text"), Found::Nothing);
        // Wrapped: a length prefix, as Boost.Compute writes its offline cache; after an
        // application's magic too.
        let mut w = (b.len() as u64).to_le_bytes().to_vec();
        w.extend_from_slice(&b);
        assert_eq!(scan_bytes(&w), framed(Framing::LengthPrefixed));
        let mut m = b"STRICT01".to_vec();
        m.extend_from_slice(&w);
        assert_eq!(scan_bytes(&m), framed(Framing::LengthPrefixed));
        // clFFT's header, the binary, a signature.
        let sig = b"\x01\0\0\0sig";
        let mut c = b"CLB\0\0\0\0\0".to_vec();
        for n in [40 + b.len() + sig.len(), 40, b.len(), sig.len()] {
            c.extend_from_slice(&(n as u64).to_le_bytes());
        }
        c.extend_from_slice(&b);
        c.extend_from_slice(sig);
        assert_eq!(scan_bytes(&c), framed(Framing::ClFft));
        // Other data around a binary: bytes after it, a length that is not its own, a
        // header too long for a prefix (an archive's).
        let mut t = b.clone();
        t.push(b'\n');
        assert_eq!(scan_bytes(&t), other(1));
        let mut l = ((b.len() + 1) as u64).to_le_bytes().to_vec();
        l.extend_from_slice(&b);
        assert_eq!(scan_bytes(&l), other(1));
        let mut tar = vec![0u8; 504];
        tar.extend_from_slice(&(b.len() as u64).to_le_bytes());
        tar.extend_from_slice(&b);
        assert_eq!(scan_bytes(&tar), other(1));
        // The magic alone, a broken checksum, a length past the end.
        assert!(matches!(
            scan_bytes(b"xxCLSHIMB\0yy"),
            Found::MagicOnly { places: 1, .. }
        ));
        let mut c = b.clone();
        let last = c.len() - 1;
        c[last] ^= 1;
        assert!(
            matches!(scan_bytes(&c), Found::MagicOnly { ref why, .. } if why.contains("checksum"))
        );
        let mut l = b.clone();
        l[24] = 0xff;
        assert!(matches!(scan_bytes(&l), Found::MagicOnly { .. }));
        // A valid binary beside a lookalike is wrapped, not whole.
        let mut both = b.clone();
        both.extend_from_slice(b"CLSHIMB\0");
        assert_eq!(scan_bytes(&both), other(1));
    }

    #[test]
    fn magic_across_chunks_and_large_bodies() {
        let src = vec![b'a'; 3 * CHUNK + 5];
        let b = binary(&src);
        assert_eq!(scan_bytes(&b), Found::Is);
        for pad in [CHUNK - 3, CHUNK - 8, CHUNK - 1, CHUNK] {
            let mut w = vec![0u8; pad];
            w.extend_from_slice(&b);
            assert_eq!(scan_bytes(&w), other(1), "pad {pad}");
        }
    }

    #[test]
    fn a_file_packed_with_the_magic_is_bounded() {
        let mut w = Vec::new();
        for _ in 0..1000 {
            w.extend_from_slice(MAGIC);
            w.extend_from_slice(&1u32.to_le_bytes());
            w.extend_from_slice(&[0u8; 4 + 8]);
            w.extend_from_slice(&(1u64 << 20).to_le_bytes());
        }
        assert!(matches!(
            scan_bytes(&w),
            Found::MagicOnly { places: 1000, .. }
        ));
    }
}
