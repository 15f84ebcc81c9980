//! A kept compile: what pocl's kernel cache gained when a rank compiled a program (the
//! program's folder: its bitcode and build log) or launched one of its kernels for the first
//! time (the kernel specialised for that launch's work-group sizes), as pocl wrote it, kept
//! in the store under the build's key so that later jobs, on any node, take it instead of
//! compiling. The library writes and unpacks them; the `clshim` command lists, caps and
//! clears them; both need the format, which is this module's. It moves bytes only: whether
//! a build may take a kept compile is the build key's question (the library's
//! `store::build_key`), and pocl answers the rest itself, by finding a program only under
//! the hash of the text it preprocesses from the taker's own source and headers.
//!
//! A kept compile lives in the store's `compiles/<key as 16 hex digits>/` folder: the
//! build as `build.kc`, each first launch as `<launch key>.kc`. A file is `magic
//! "CLSHIMKC"` · `version u32` (1) · `kind u32` (1 build, 2 launch) · `key u64` ·
//! `fingerprint u64` · `driver u64` · `compile ns u64` (how long the keeper's compile took)
//! · `key text length u64` · key text · `host length
//! u64` · host (the name of the node that kept it) · `request length u64` · request (a build's: `store::Request`, what a warm step needs to make the driver's
//! binary of it; empty for a launch) · `file count u32` · per file (`path length u32` ·
//! path, relative to pocl's cache folder, `/` between plain names · `executable u32`, 0
//! or 1 · `data length u64` · data) · `checksum u64` of everything before it. All integers
//! are little-endian. A file is read whole, and nothing of it is used unless every length
//! fits and the checksum holds.

use crate::hash::Fnv1a;

pub const KEPT_MAGIC: &[u8; 8] = b"CLSHIMKC";
pub const KEPT_VERSION: u32 = 1;
/// The folder of kept compiles inside a store.
pub const COMPILES: &str = "compiles";
/// A kept build's file name in its key's folder.
pub const BUILD_FILE: &str = "build.kc";
/// The ending of every kept compile's file name.
pub const SUFFIX: &str = ".kc";
/// The largest kept compile a reader accepts.
pub const MAX_KEPT: u64 = 1 << 30;
/// The most files one holds (pocl writes a handful per program and per specialisation).
const MAX_FILES: u32 = 4096;
/// The longest relative path, and the most folders in it.
const MAX_PATH: u32 = 1024;
const MAX_DEPTH: usize = 8;

/// What a kept compile holds: a program's build, or one first launch of its kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeptKind {
    Build = 1,
    Launch = 2,
}

/// One file of pocl's cache, by its path below pocl's cache folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptFile {
    pub path: Vec<u8>,
    pub executable: bool,
    pub data: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub kind: KeptKind,
    pub key: u64,
    pub fingerprint: u64,
    pub driver: u64,
    /// How long the keeper's compile took, in nanoseconds (0: not measured).
    pub compile_ns: u64,
    pub key_text: Vec<u8>,
    /// The name of the node whose rank kept it.
    pub host: Vec<u8>,
    pub request: Vec<u8>,
    pub files: Vec<KeptFile>,
}

/// The folder of the kept compiles of `key`, below `compiles/`.
pub fn key_folder(key: u64) -> String {
    format!("{key:016x}")
}

/// The lease on compiling a key's build (`build`) or one of its first launches (the launch
/// key as 16 hex digits), in the key's folder: `<what>.lease`, holding [`lease_text`].
pub fn lease_file(what: &str) -> String {
    format!("{what}.lease")
}

/// What a lease holds: who compiles (the host as `store::host_id` names it, and its pid).
pub fn lease_text(host: &str, pid: u32) -> String {
    format!("clshim-lease 1 {host} {pid}\n")
}

/// A lease's holder, or None when the text is no lease.
pub fn parse_lease(text: &[u8]) -> Option<(String, u32)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut w = text.trim_end_matches('\n').split(' ');
    let (Some("clshim-lease"), Some("1"), Some(host), Some(pid), None) =
        (w.next(), w.next(), w.next(), w.next(), w.next())
    else {
        return None;
    };
    Some((host.to_string(), pid.parse().ok()?))
}

/// A lease this old is its holder's no more, whoever holds it (a node gone with its job).
pub const LEASE_STALE_SECONDS: i64 = 3600;

/// A first launch's file name, for the launch key `launch`.
pub fn launch_file(launch: u64) -> String {
    format!("{launch:016x}{SUFFIX}")
}

/// Whether `path` is a path a kept compile may hold: relative, at most [`MAX_DEPTH`]
/// plain names (none empty, `.` or `..`, none with a NUL), so that unpacking it below
/// pocl's cache folder never reaches out of it.
pub fn plain_path(path: &[u8]) -> bool {
    !path.is_empty()
        && path.len() <= MAX_PATH as usize
        && path.split(|&b| b == b'/').count() <= MAX_DEPTH
        && path
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.contains(&0))
}

impl Kept {
    pub fn encode(&self) -> Vec<u8> {
        let data: usize = self
            .files
            .iter()
            .map(|f| f.path.len() + f.data.len() + 16)
            .sum();
        let mut out = Vec::with_capacity(80 + self.key_text.len() + self.request.len() + data);
        out.extend_from_slice(KEPT_MAGIC);
        out.extend_from_slice(&KEPT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.kind as u32).to_le_bytes());
        for v in [self.key, self.fingerprint, self.driver, self.compile_ns] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for part in [&self.key_text, &self.host, &self.request] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&(self.files.len() as u32).to_le_bytes());
        for f in &self.files {
            out.extend_from_slice(&(f.path.len() as u32).to_le_bytes());
            out.extend_from_slice(&f.path);
            out.extend_from_slice(&u32::from(f.executable).to_le_bytes());
            out.extend_from_slice(&(f.data.len() as u64).to_le_bytes());
            out.extend_from_slice(&f.data);
        }
        let sum = Fnv1a::default().update(&out).finish();
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// A whole kept compile, or why not: the checksum first, then every length against the
    /// bytes left before anything is taken, and every path plain.
    pub fn decode(bytes: &[u8]) -> Result<Kept, String> {
        if bytes.len() < 8 + 8 || &bytes[..8] != KEPT_MAGIC {
            return Err("not a kept compile".into());
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        if Fnv1a::default().update(body).finish().to_le_bytes() != sum {
            return Err("damaged (its checksum does not hold)".into());
        }
        let mut r = Reader { b: body, at: 8 };
        let version = r.u32()?;
        if version != KEPT_VERSION {
            return Err(format!("of version {version}, not {KEPT_VERSION}"));
        }
        let kind = match r.u32()? {
            1 => KeptKind::Build,
            2 => KeptKind::Launch,
            k => return Err(format!("of an unknown kind ({k})")),
        };
        let (key, fingerprint, driver) = (r.u64()?, r.u64()?, r.u64()?);
        let compile_ns = r.u64()?;
        let n = r.u64()?;
        let key_text = r.bytes(n)?.to_vec();
        let n = r.u64()?;
        let host = r.bytes(n)?.to_vec();
        let n = r.u64()?;
        let request = r.bytes(n)?.to_vec();
        let count = r.u32()?;
        if count > MAX_FILES {
            return Err(format!("{count} files, more than {MAX_FILES}"));
        }
        let mut files = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let n = r.u32()?;
            if n > MAX_PATH {
                return Err("a path too long".into());
            }
            let path = r.bytes(u64::from(n))?.to_vec();
            if !plain_path(&path) {
                return Err(format!(
                    "a path that is not plain ({})",
                    String::from_utf8_lossy(&path)
                ));
            }
            let executable = match r.u32()? {
                0 => false,
                1 => true,
                _ => return Err("a file's mode is damaged".into()),
            };
            let n = r.u64()?;
            let data = r.bytes(n)?.to_vec();
            files.push(KeptFile {
                path,
                executable,
                data,
            });
        }
        if r.at != body.len() {
            return Err("bytes beyond its last file".into());
        }
        Ok(Kept {
            kind,
            key,
            fingerprint,
            driver,
            compile_ns,
            key_text,
            host,
            request,
            files,
        })
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: u64) -> Result<&'a [u8], String> {
        let left = (self.b.len() - self.at) as u64;
        if n > left {
            return Err("truncated (a length beyond its end)".into());
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().unwrap()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Kept {
        Kept {
            kind: KeptKind::Build,
            key: 1,
            fingerprint: 2,
            driver: 3,
            compile_ns: 4,
            key_text: b"key text".to_vec(),
            host: b"node-a".to_vec(),
            request: b"request".to_vec(),
            files: vec![
                KeptFile {
                    path: b"AB/cdef/program.bc".to_vec(),
                    executable: false,
                    data: vec![7; 100],
                },
                KeptFile {
                    path: b"AB/cdef/k/0-0-0/k.so".to_vec(),
                    executable: true,
                    data: vec![],
                },
            ],
        }
    }

    #[test]
    fn a_kept_compile_round_trips_and_no_damage_passes() {
        let k = sample();
        let bytes = k.encode();
        assert_eq!(Kept::decode(&bytes).unwrap(), k);
        for cut in 0..bytes.len() {
            assert!(Kept::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(Kept::decode(&b).is_err(), "flipped byte {i}");
        }
    }

    #[test]
    fn paths_out_of_pocl_cache_are_refused() {
        for bad in [
            &b""[..],
            b"/etc/passwd",
            b"../x",
            b"a/../../x",
            b"a//b",
            b"a/./b",
            b"a/b/",
            b"a\0b",
            b"1/2/3/4/5/6/7/8/9",
        ] {
            assert!(!plain_path(bad), "{}", String::from_utf8_lossy(bad));
            let mut k = sample();
            k.files[0].path = bad.to_vec();
            assert!(Kept::decode(&k.encode()).is_err());
        }
        assert!(plain_path(b"AB/cdef/k/.so-lock"));
    }
}
