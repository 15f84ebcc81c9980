//! An entry's manifest: every name the driver's compile looked up when the warm step made
//! the entry, and what the compile found there, so that a later process can check, before
//! it takes the entry, that the same lookups give the same answers now (as ccache's direct
//! mode checks a manifest of the files the compiler said it read). Names are kept as the
//! compile spelled them, relative to what they were relative to: the working directory
//! (`-I.`, a relative `-I`), pocl's cache folder (where pocl writes its copy of the source,
//! so a quoted include is looked for there first), or nothing (absolute). This module only
//! moves bytes; how a manifest is made from a compile and checked is the library's
//! (`store::manifest`). All integers are little-endian.
//!
//! Manifest: `count u32` · per item: `base u8` · `follow u8` · `kind u8` · `path length
//! u32` · path · what the kind holds (see [`Expect`]).

/// What a name is relative to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Base {
    Absolute = 0,
    /// The working directory of the process that builds.
    Cwd = 1,
    /// pocl's cache folder (`POCL_CACHE_DIR`, else its default) of the process that builds.
    PoclCache = 2,
}

/// What the compile found at a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Nothing (ENOENT, ENOTDIR).
    Absent,
    /// Something of this kind (`S_IFMT` bits; 0: anything), looked at but not read.
    Exists { kind: u32 },
    /// A regular file the compile read: its length and SHA-256, and its identity class
    /// (items of one class were one file, two classes two files, as the preprocessor's
    /// `#pragma once` tells files apart).
    File {
        size: u64,
        sha256: [u8; 32],
        class: u32,
    },
    /// A symbolic link with this text.
    Link { target: Vec<u8> },
    /// Something that is not a symbolic link.
    NotLink,
    /// One of the driver's own files (read by every build, whatever its program): checked
    /// by kind, length and modification time, as the driver's build identity vouches for
    /// its content.
    Driver { kind: u32, size: u64, mtime_ns: i64 },
    /// A folder whose names ending in `suffix` are, sorted, those of this SHA-256 (each
    /// name followed by a NUL byte): a file of the driver's that appears where a lookup
    /// would have found none (pocl's kernel library, whose name no compile of the front
    /// end looked up) is another build.
    Listing { suffix: Vec<u8>, sha256: [u8; 32] },
}

/// One name and what was found there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub base: Base,
    /// Whether a final symbolic link was followed.
    pub follow: bool,
    pub path: Vec<u8>,
    pub expect: Expect,
}

/// The lookups of one compile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub items: Vec<Item>,
}

/// The most items a manifest holds: far beyond a real compile's lookups.
pub const MAX_ITEMS: u32 = 1 << 20;

impl Manifest {
    /// Whether a name of the compile's is relative to pocl's cache folder.
    pub fn names_in_pocl_cache(&self) -> bool {
        self.items.iter().any(|it| it.base == Base::PoclCache)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.items.len() as u32).to_le_bytes());
        for it in &self.items {
            let kind: u8 = match it.expect {
                Expect::Absent => 0,
                Expect::Exists { .. } => 1,
                Expect::File { .. } => 2,
                Expect::Link { .. } => 3,
                Expect::NotLink => 4,
                Expect::Driver { .. } => 5,
                Expect::Listing { .. } => 6,
            };
            out.extend_from_slice(&[it.base as u8, it.follow as u8, kind]);
            out.extend_from_slice(&(it.path.len() as u32).to_le_bytes());
            out.extend_from_slice(&it.path);
            match &it.expect {
                Expect::Absent | Expect::NotLink => {}
                Expect::Exists { kind } => out.extend_from_slice(&kind.to_le_bytes()),
                Expect::File {
                    size,
                    sha256,
                    class,
                } => {
                    out.extend_from_slice(&size.to_le_bytes());
                    out.extend_from_slice(sha256);
                    out.extend_from_slice(&class.to_le_bytes());
                }
                Expect::Link { target } => {
                    out.extend_from_slice(&(target.len() as u32).to_le_bytes());
                    out.extend_from_slice(target);
                }
                Expect::Driver {
                    kind,
                    size,
                    mtime_ns,
                } => {
                    out.extend_from_slice(&kind.to_le_bytes());
                    out.extend_from_slice(&size.to_le_bytes());
                    out.extend_from_slice(&mtime_ns.to_le_bytes());
                }
                Expect::Listing { suffix, sha256 } => {
                    out.extend_from_slice(&(suffix.len() as u32).to_le_bytes());
                    out.extend_from_slice(suffix);
                    out.extend_from_slice(sha256);
                }
            }
        }
        out
    }

    /// A whole manifest, or why not: every length is checked against what is left.
    pub fn decode(b: &[u8]) -> Result<Manifest, String> {
        let mut r = Cursor { b, at: 0 };
        let n = r.u32()?;
        if n > MAX_ITEMS {
            return Err(format!("{n} manifest items"));
        }
        let mut items = Vec::with_capacity(n.min(4096) as usize);
        for _ in 0..n {
            let head = r.take(3)?;
            let (base, follow, kind) = (head[0], head[1], head[2]);
            let base = match base {
                0 => Base::Absolute,
                1 => Base::Cwd,
                2 => Base::PoclCache,
                b => return Err(format!("manifest base {b}")),
            };
            if follow > 1 {
                return Err("manifest follow flag".into());
            }
            let len = r.u32()?;
            let path = r.take(len as usize)?.to_vec();
            let expect = match kind {
                0 => Expect::Absent,
                1 => Expect::Exists { kind: r.u32()? },
                2 => Expect::File {
                    size: r.u64()?,
                    sha256: r.take(32)?.try_into().expect("32 bytes"),
                    class: r.u32()?,
                },
                3 => {
                    let len = r.u32()?;
                    Expect::Link {
                        target: r.take(len as usize)?.to_vec(),
                    }
                }
                4 => Expect::NotLink,
                5 => Expect::Driver {
                    kind: r.u32()?,
                    size: r.u64()?,
                    mtime_ns: r.u64()? as i64,
                },
                6 => {
                    let len = r.u32()?;
                    Expect::Listing {
                        suffix: r.take(len as usize)?.to_vec(),
                        sha256: r.take(32)?.try_into().expect("32 bytes"),
                    }
                }
                k => return Err(format!("manifest item kind {k}")),
            };
            items.push(Item {
                base,
                follow: follow == 1,
                path,
                expect,
            });
        }
        if r.at != b.len() {
            return Err("trailing bytes after the manifest".into());
        }
        Ok(Manifest { items })
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let left = self.b.len() - self.at;
        if n > left {
            return Err(format!("a manifest length of {n} with {left} bytes left"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_round_trips_and_refuses_damage() {
        let m = Manifest {
            items: vec![
                Item {
                    base: Base::Cwd,
                    follow: true,
                    path: b"./val.h".to_vec(),
                    expect: Expect::Absent,
                },
                Item {
                    base: Base::Absolute,
                    follow: true,
                    path: b"/inc/val.h".to_vec(),
                    expect: Expect::File {
                        size: 14,
                        sha256: [7; 32],
                        class: 0,
                    },
                },
                Item {
                    base: Base::PoclCache,
                    follow: false,
                    path: b"l".to_vec(),
                    expect: Expect::Link {
                        target: b"t".to_vec(),
                    },
                },
                Item {
                    base: Base::Absolute,
                    follow: true,
                    path: b"/usr/share/pocl/include/_kernel.h".to_vec(),
                    expect: Expect::Driver {
                        kind: 0o100000,
                        size: 6248,
                        mtime_ns: -1,
                    },
                },
                Item {
                    base: Base::Cwd,
                    follow: true,
                    path: b"include".to_vec(),
                    expect: Expect::Exists { kind: 0o040000 },
                },
                Item {
                    base: Base::Cwd,
                    follow: false,
                    path: b"x".to_vec(),
                    expect: Expect::NotLink,
                },
                Item {
                    base: Base::Absolute,
                    follow: true,
                    path: b"/usr/share/pocl".to_vec(),
                    expect: Expect::Listing {
                        suffix: b".bc".to_vec(),
                        sha256: [9; 32],
                    },
                },
            ],
        };
        let b = m.encode();
        assert_eq!(Manifest::decode(&b).unwrap(), m);
        for cut in 0..b.len() {
            assert!(Manifest::decode(&b[..cut]).is_err(), "{cut}");
        }
        let mut trailing = b.clone();
        trailing.push(0);
        assert!(Manifest::decode(&trailing).is_err());
    }
}
