//! What a driver's compile touched on disk, recorded from the compile itself: the warm
//! step's worker runs under a tracer of its own (`tracer`), and every system call that
//! names a file stops it (a seccomp filter, `filter`, picks exactly those: `syscalls`), so
//! the record holds each name the compile opened, probed, read, made or removed, with what
//! the kernel answered, whichever library or thread made the call (clang's preprocessor
//! probing its search path, pocl writing its temporary files, a program it starts). The
//! worker marks where a build begins and ends; the tracer hands it that window's record
//! through a shared memory file, while the worker is stopped at the end mark, and what the
//! record means for an entry's key is `store::manifest`'s to decide. Where the compile
//! cannot be watched (a kernel without seccomp, a process already traced), nothing is
//! recorded and nothing is kept: the worker says why.

// On macOS nothing is recorded (the warm step is Linux only): the types stay, for the
// manifest's checks, which every platform makes.
#![cfg_attr(target_os = "macos", allow(dead_code))]

#[cfg(target_os = "linux")]
mod filter;
#[cfg(target_os = "linux")]
pub mod syscalls;
#[cfg(target_os = "linux")]
mod tracer;

#[cfg(target_os = "linux")]
pub use tracer::{watch_this_process, Recorder};

/// A name as the compile gave it, and what it is relative to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub base: Base,
    pub path: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Base {
    /// An absolute name, or one relative to the working directory (as the name says).
    Plain,
    /// Relative to a directory descriptor, whose path (as `/proc` names it) is this.
    Dir(Vec<u8>),
}

impl Target {
    /// The name as one path: absolute names and names relative to the working directory as
    /// given, names relative to a descriptor joined to its directory.
    pub fn joined(&self) -> Vec<u8> {
        match &self.base {
            Base::Plain => self.path.clone(),
            Base::Dir(d) => {
                let mut p = d.clone();
                p.push(b'/');
                p.extend_from_slice(&self.path);
                p
            }
        }
    }
}

/// What happened to a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Opened, with these flags (`O_*`).
    Open { flags: u64 },
    /// Its status asked for (stat, statx), following a final link or not.
    Stat { follow: bool },
    /// Its existence asked for (access).
    Access,
    /// Its link text read.
    Readlink,
    /// A program started from it.
    Exec,
    /// Changed: made, removed, truncated, its mode or times set (including a rename's or a
    /// link's either side, and a symbolic link made).
    Change,
}

/// What the file named was like, when the call returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// A regular file's kind, as `Meta::kind` gives it (the `S_IF*` bits are u16 on macOS).
#[allow(clippy::unnecessary_cast)]
pub const REGULAR: u32 = libc::S_IFREG as u32;
/// A folder's kind ([`Meta::kind`]).
#[allow(clippy::unnecessary_cast)] // u16 on macOS
pub const FOLDER: u32 = libc::S_IFDIR as u32;

impl Meta {
    #[allow(clippy::unnecessary_cast)] // the field types differ between systems
    pub fn of(st: &libc::stat) -> Meta {
        Meta {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            mode: st.st_mode as u32,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
            ctime_ns: st.st_ctime as i64 * 1_000_000_000 + st.st_ctime_nsec as i64,
        }
    }

    #[allow(clippy::unnecessary_cast)]
    pub fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT as u32
    }
}

/// One call on a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub op: Op,
    pub target: Target,
    /// What the call returned: a descriptor, a length, 0, or minus the error number.
    pub ret: i64,
    /// After a call that succeeded (but a change): what the name (an open: the file opened)
    /// was like.
    pub meta: Option<Meta>,
    /// After a readlink: the link's text.
    pub link: Option<Vec<u8>>,
}

/// One build's window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    pub accesses: Vec<Access>,
    /// Texts the compile wrote and read back as its preprocessed output (pocl's
    /// `*.preproc.cl`), by name: what it made of the sources, macros expanded.
    pub preprocessed: Vec<(Vec<u8>, Vec<u8>)>,
    /// What the tracer could not follow; the build is not kept if there is any.
    pub problems: Vec<String>,
    /// The worker's working directory as `/proc` names it.
    pub cwd: Vec<u8>,
    /// The window's bounds, in nanoseconds of the realtime clock.
    pub start_ns: i64,
    pub end_ns: i64,
}

/// The bytes of a record, as the tracer hands it over.
struct Writer(Vec<u8>);

impl Writer {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn target(&mut self, t: &Target) {
        match &t.base {
            Base::Plain => self.u64(0),
            Base::Dir(d) => {
                self.u64(1);
                self.bytes(d);
            }
        }
        self.bytes(&t.path);
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u64(&mut self) -> Result<u64, String> {
        let s = self
            .b
            .get(self.at..self.at + 8)
            .ok_or("a record cut short")?;
        self.at += 8;
        Ok(u64::from_le_bytes(s.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u64()? as usize;
        let s = self
            .b
            .get(self.at..self.at.saturating_add(n))
            .ok_or("a record cut short")?;
        self.at += n;
        Ok(s.to_vec())
    }
    fn target(&mut self) -> Result<Target, String> {
        let base = match self.u64()? {
            0 => Base::Plain,
            1 => Base::Dir(self.bytes()?),
            b => return Err(format!("base {b}")),
        };
        Ok(Target {
            base,
            path: self.bytes()?,
        })
    }
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        w.bytes(&self.cwd);
        w.u64(self.start_ns as u64);
        w.u64(self.end_ns as u64);
        w.u64(self.problems.len() as u64);
        for p in &self.problems {
            w.bytes(p.as_bytes());
        }
        w.u64(self.preprocessed.len() as u64);
        for (name, text) in &self.preprocessed {
            w.bytes(name);
            w.bytes(text);
        }
        w.u64(self.accesses.len() as u64);
        for a in &self.accesses {
            let (tag, flags) = match a.op {
                Op::Open { flags } => (0, flags),
                Op::Stat { follow } => (1, follow as u64),
                Op::Access => (2, 0),
                Op::Readlink => (3, 0),
                Op::Exec => (4, 0),
                Op::Change => (5, 0),
            };
            w.u64(tag);
            w.u64(flags);
            w.target(&a.target);
            w.u64(a.ret as u64);
            match &a.meta {
                None => w.u64(0),
                Some(m) => {
                    w.u64(1);
                    for v in [
                        m.dev,
                        m.ino,
                        m.mode as u64,
                        m.size,
                        m.mtime_ns as u64,
                        m.ctime_ns as u64,
                    ] {
                        w.u64(v);
                    }
                }
            }
            match &a.link {
                None => w.u64(0),
                Some(l) => {
                    w.u64(1);
                    w.bytes(l);
                }
            }
        }
        w.0
    }

    pub fn decode(b: &[u8]) -> Result<Record, String> {
        let mut r = Reader { b, at: 0 };
        let cwd = r.bytes()?;
        let start_ns = r.u64()? as i64;
        let end_ns = r.u64()? as i64;
        let mut problems = Vec::new();
        for _ in 0..r.u64()? {
            problems.push(String::from_utf8_lossy(&r.bytes()?).into_owned());
        }
        let mut preprocessed = Vec::new();
        for _ in 0..r.u64()? {
            preprocessed.push((r.bytes()?, r.bytes()?));
        }
        let mut accesses = Vec::new();
        for _ in 0..r.u64()? {
            let tag = r.u64()?;
            let flags = r.u64()?;
            let op = match tag {
                0 => Op::Open { flags },
                1 => Op::Stat { follow: flags != 0 },
                2 => Op::Access,
                3 => Op::Readlink,
                4 => Op::Exec,
                5 => Op::Change,
                t => return Err(format!("op {t}")),
            };
            let target = r.target()?;
            let ret = r.u64()? as i64;
            let meta = match r.u64()? {
                0 => None,
                _ => Some(Meta {
                    dev: r.u64()?,
                    ino: r.u64()?,
                    mode: r.u64()? as u32,
                    size: r.u64()?,
                    mtime_ns: r.u64()? as i64,
                    ctime_ns: r.u64()? as i64,
                }),
            };
            let link = match r.u64()? {
                0 => None,
                _ => Some(r.bytes()?),
            };
            accesses.push(Access {
                op,
                target,
                ret,
                meta,
                link,
            });
        }
        if r.at != b.len() {
            return Err("trailing bytes after a record".into());
        }
        Ok(Record {
            accesses,
            preprocessed,
            problems,
            cwd,
            start_ns,
            end_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips() {
        let r = Record {
            accesses: vec![
                Access {
                    op: Op::Open { flags: 0o100 },
                    target: Target {
                        base: Base::Dir(b"/d".to_vec()),
                        path: b"x.h".to_vec(),
                    },
                    ret: 3,
                    meta: Some(Meta {
                        dev: 1,
                        ino: 2,
                        mode: 0o100644,
                        size: 4,
                        mtime_ns: -5,
                        ctime_ns: 6,
                    }),
                    link: None,
                },
                Access {
                    op: Op::Readlink,
                    target: Target {
                        base: Base::Plain,
                        path: b"l".to_vec(),
                    },
                    ret: -2,
                    meta: None,
                    link: Some(b"t".to_vec()),
                },
            ],
            preprocessed: vec![(b"a.preproc.cl".to_vec(), b"text".to_vec())],
            problems: vec!["p".into()],
            cwd: b"/w".to_vec(),
            start_ns: 1,
            end_ns: 2,
        };
        let b = r.encode();
        assert_eq!(Record::decode(&b).unwrap(), r);
        for cut in 0..b.len() {
            assert!(Record::decode(&b[..cut]).is_err(), "{cut}");
        }
    }
}
