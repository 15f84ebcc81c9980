//! What an entry stands on besides its recipe: the names the driver's compile looked up
//! and what it found (`clshim_format::manifest`), made from the record of that compile
//! (`store::record`) in the warm step, and checked again, name by name, by every process
//! before it takes the entry. This is ccache's direct mode with the compiler's own account
//! of what it read, kept whole: every file read (by its SHA-256), every name probed and
//! found absent (a header that appears later earlier on the search path is another
//! build), every folder and link looked at, and which names were one file (`#pragma
//! once`). The driver's own files (what a compile of an empty kernel reads: pocl's and
//! clang's headers; and pocl's kernel library, found beside them) are checked by kind,
//! length and modification time, and the kernel library's names as a whole.
//!
//! A compile that cannot stand for later builds is refused, with why: one that changed
//! files outside pocl's cache folder, read from `/proc`, `/sys` or a device, met an error
//! other than "no such file", made a call the tracer could not follow, or whose
//! preprocessed text holds the time of the compile (`__TIME__`, `__DATE__`,
//! `__TIMESTAMP__`) or the name of pocl's temporary copy of the source (`__FILE__`). One
//! whose input files changed while it compiled, or within a second before (a change the
//! files' times could not tell apart), is only put off: the warm step makes it again.

// On macOS no compile is recorded (the warm step is Linux only): only the checks run.
#![cfg_attr(target_os = "macos", allow(dead_code))]

use super::record::{Access, Meta, Op, Record, REGULAR};
use clshim_format::manifest::{Base, Expect, Item, Manifest};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Why a compile does not stand for later builds.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not with these files: no entry serves it (a negative entry says why, standing on
    /// the manifest when the compile's lookups could be recorded).
    Uncacheable(String, Option<Manifest>),
    /// Not now: an input changed while, or just before, it compiled.
    Retry(String),
}

fn uncacheable(why: String) -> Refusal {
    Refusal::Uncacheable(why, None)
}

/// A file's modification seen less than this before a compile began may hide a later one
/// the file's times cannot tell apart (filesystems keep them to a clock tick, NFS to its
/// server's): such a compile is made again later.
const TOO_NEW_NS: i64 = 1_000_000_000;

/// What the driver reads for any program: each absolute name a compile of an empty kernel
/// looked up, and what it found there (None: nothing). Kept in the store per driver build
/// (`as_manifest`), so a warm step compiles the empty kernel once per driver, not once per
/// worker.
#[derive(Clone, Debug, Default)]
pub struct DriverFiles {
    found: HashMap<Vec<u8>, Option<Meta>>,
    /// Where a list of the front end's names pocl's kernel library (`add_kernel_library`):
    /// the folder that holds it, and the SHA-256 of its bitcode files' names.
    library: Option<(Vec<u8>, [u8; 32])>,
}

/// How the files of pocl's kernel library end.
const KERNEL_LIBRARY_SUFFIX: &[u8] = b".bc";

impl DriverFiles {
    /// From the record of a compile of an empty kernel in `own_cache`.
    pub fn from_record(r: &Record, own_cache: &[u8]) -> DriverFiles {
        let mut found = HashMap::new();
        for a in &r.accesses {
            let path = a.target.joined();
            if a.op == Op::Change || writes(&a.op) || !path.starts_with(b"/") {
                continue;
            }
            if under(&path, own_cache) || beside_the_point(&path, &a.op) {
                continue;
            }
            if a.ret >= 0 {
                if let Some(m) = a.meta {
                    found.entry(path).or_insert(Some(m));
                }
            } else if matches!(-a.ret as i32, libc::ENOENT | libc::ENOTDIR) {
                found.entry(path).or_insert(None);
            }
        }
        DriverFiles {
            found,
            library: None,
        }
    }

    /// Adds `other`'s files, where this list has none of the name (not the names of its
    /// kernel library: a list is added to only where the front end's found none).
    pub fn add(&mut self, other: &DriverFiles) {
        for (path, m) in &other.found {
            self.found.entry(path.clone()).or_insert(*m);
        }
    }

    /// Adds pocl's kernel library, which a compile without its link never reads: every
    /// bitcode file of the folder whose `include/_kernel.h` the compile read (pocl 3 to 7
    /// look in one private data folder for both: its headers under `include/`, the library
    /// as `kernel-<target>-<variant>.bc`), each by its status, and the names of them all,
    /// so that a variant that appears where none was (pocl falls back to another) is
    /// another build too. Nothing is added where the compile read no such header (a pocl
    /// run from its build tree, a header cache) or the folder holds no bitcode: the
    /// library is then learnt from a link.
    pub fn add_kernel_library(&mut self) {
        let mut data = self
            .found
            .iter()
            .filter_map(|(path, m)| m.and_then(|_| path.strip_suffix(b"/include/_kernel.h")));
        let (Some(data), None) = (data.next(), data.next()) else {
            return;
        };
        let data = data.to_vec();
        let Ok((sha256, names)) = names_ending(&data, KERNEL_LIBRARY_SUFFIX) else {
            return;
        };
        let files: Option<Vec<_>> = names
            .iter()
            .map(|name| {
                let path = [&data, b"/".as_slice(), name].concat();
                let m = status(&path, true).ok().filter(|m| m.kind() == REGULAR)?;
                Some((path, m))
            })
            .collect();
        let Some(files) = files.filter(|f| !f.is_empty()) else {
            return;
        };
        self.found
            .extend(files.into_iter().map(|(path, m)| (path, Some(m))));
        self.library = Some((data, sha256));
    }

    /// Whether the list names pocl's kernel library, beside the front end's files.
    pub fn holds_kernel_library(&self) -> bool {
        self.library.is_some()
    }

    /// The driver's files as a manifest of absolute names (each checked by its status), to
    /// keep in the store and check before another worker trusts it.
    pub fn as_manifest(&self) -> Manifest {
        Manifest {
            items: self.items_but(&Default::default()),
        }
    }

    /// The driver's files but those named in `read` (absolute, followed), as items
    /// checked by their status, sorted by name.
    fn items_but(&self, read: &std::collections::HashSet<&[u8]>) -> Vec<Item> {
        let mut items: Vec<Item> = self
            .found
            .iter()
            .filter(|(path, _)| !read.contains(path.as_slice()))
            .map(|(path, m)| Item {
                base: Base::Absolute,
                follow: true,
                path: path.clone(),
                expect: match m {
                    Some(m) => Expect::Driver {
                        kind: m.kind(),
                        size: m.size,
                        mtime_ns: m.mtime_ns,
                    },
                    None => Expect::Absent,
                },
            })
            .collect();
        if let Some((folder, sha256)) = &self.library {
            items.push(Item {
                base: Base::Absolute,
                follow: true,
                path: folder.clone(),
                expect: Expect::Listing {
                    suffix: KERNEL_LIBRARY_SUFFIX.to_vec(),
                    sha256: *sha256,
                },
            });
        }
        items.sort_by(|a, b| a.path.cmp(&b.path));
        items
    }

    /// From a manifest `as_manifest` made; None if it is not one.
    pub fn from_manifest(m: &Manifest) -> Option<DriverFiles> {
        let mut found = HashMap::new();
        let mut library = None;
        for it in &m.items {
            if it.base != Base::Absolute || !it.follow {
                return None;
            }
            let v = match &it.expect {
                Expect::Listing { suffix, sha256 } if suffix == KERNEL_LIBRARY_SUFFIX => {
                    library = Some((it.path.clone(), *sha256));
                    continue;
                }
                Expect::Driver {
                    kind,
                    size,
                    mtime_ns,
                } => Some(Meta {
                    mode: *kind,
                    size: *size,
                    mtime_ns: *mtime_ns,
                    ..Meta::default()
                }),
                Expect::Absent => None,
                _ => return None,
            };
            found.insert(it.path.clone(), v);
        }
        Some(DriverFiles { found, library })
    }
}

fn writes(op: &Op) -> bool {
    match op {
        Op::Change => true,
        Op::Open { flags } => {
            let f = *flags as i32;
            f & libc::O_ACCMODE != libc::O_RDONLY || f & (libc::O_CREAT | libc::O_TRUNC) != 0
        }
        _ => false,
    }
}

/// Whether `path` is `dir` or inside it (by name).
fn under(path: &[u8], dir: &[u8]) -> bool {
    !dir.is_empty() && path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/')
}

/// Accesses that say nothing of the build's input: the null device, and of the process's
/// own `/proc` entries only those that name no file's content: how LLVM learns an open
/// file's real name (the link text of `fd/N`, the `fd` folder itself) and what a runtime
/// asks of its process (its CPUs, memory, limits, executable's name). Anything else there
/// (`cwd/...`, `root/...`, an `fd/N` opened) reads some file under a name that is not its
/// own, which no manifest could check: such a compile is refused as the system's state.
fn beside_the_point(path: &[u8], op: &Op) -> bool {
    if path == b"/dev/null" {
        return true;
    }
    let Some(rest) = path.strip_prefix(b"/proc/") else {
        return false;
    };
    let mut parts = rest.splitn(2, |&b| b == b'/');
    let who = parts.next().unwrap_or_default();
    let own = who == b"self"
        || who == b"thread-self"
        || (!who.is_empty() && who.iter().all(u8::is_ascii_digit));
    let Some(entry) = parts.next().filter(|_| own) else {
        return false;
    };
    let about_the_process = [
        &b"cpuset"[..],
        b"cgroup",
        b"status",
        b"stat",
        b"statm",
        b"maps",
        b"limits",
        b"auxv",
        b"mounts",
        b"mountinfo",
    ];
    match entry.strip_prefix(b"fd/") {
        Some(n) => !n.is_empty() && n.iter().all(u8::is_ascii_digit) && *op == Op::Readlink,
        None => {
            entry == b"fd"
                || (entry == b"exe" && *op == Op::Readlink)
                || about_the_process.contains(&entry)
        }
    }
}

/// Names whose content is the system's state, not a file's.
fn system(path: &[u8]) -> bool {
    ["/proc/", "/sys/", "/dev/"]
        .iter()
        .any(|p| path.starts_with(p.as_bytes()))
}

/// What a compile found at one name.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Absent,
    /// Something of this kind (0: unknown), with its status when the tracer could take it.
    Exists(u32, Option<Meta>),
    File(Meta),
    Link(Vec<u8>),
    NotLink,
}

fn errno_name(e: i64) -> String {
    std::io::Error::from_raw_os_error(-e as i32).to_string()
}

fn seen(a: &Access) -> Result<Seen, String> {
    if a.ret < 0 {
        let e = -a.ret as i32;
        return match (e, &a.op) {
            (libc::ENOENT | libc::ENOTDIR, _) => Ok(Seen::Absent),
            (libc::EINVAL, Op::Readlink) => Ok(Seen::NotLink),
            _ => Err(errno_name(a.ret)),
        };
    }
    Ok(match &a.op {
        Op::Readlink => Seen::Link(a.link.clone().unwrap_or_default()),
        Op::Open { .. } | Op::Exec => match a.meta {
            Some(m) if m.kind() == REGULAR => Seen::File(m),
            Some(m) => Seen::Exists(m.kind(), Some(m)),
            None => return Err("no status of a file it opened".into()),
        },
        Op::Stat { .. } | Op::Access => Seen::Exists(a.meta.map_or(0, |m| m.kind()), a.meta),
        Op::Change => unreachable!("changes are not lookups"),
    })
}

/// Whether two looks at one name agree (a later look may see more: a read after a stat).
fn merge(old: &mut Seen, new: Seen) -> bool {
    match (&*old, new) {
        (Seen::Exists(k, _), Seen::File(m)) if *k == 0 || *k == m.kind() => {
            *old = Seen::File(m);
            true
        }
        (Seen::File(m), Seen::Exists(k, _)) => k == 0 || k == m.kind(),
        (Seen::File(a), Seen::File(b)) => a.dev == b.dev && a.ino == b.ino,
        (Seen::Exists(a, _), Seen::Exists(b, _)) => *a == b || b == 0 || *a == 0,
        (a, b) => *a == b,
    }
}

/// The manifest of the compile `r` made in the private cache folder `own_cache`, with
/// `driver` the driver's own files; or why it cannot stand for later builds.
pub fn from_record(
    r: &Record,
    own_cache: &[u8],
    driver: &DriverFiles,
) -> Result<Manifest, Refusal> {
    if let Some(p) = r.problems.first() {
        return Err(uncacheable(format!(
            "the compile could not be followed: {p}"
        )));
    }
    let mut made: Vec<Vec<u8>> = Vec::new();
    let mut looks: BTreeMap<(Base, bool, Vec<u8>), Seen> = BTreeMap::new();
    for a in &r.accesses {
        let joined = a.target.joined();
        if beside_the_point(&joined, &a.op) {
            continue;
        }
        let absolute = joined.first() == Some(&b'/');
        let mine = under(&joined, own_cache) || made.iter().any(|m| under(&joined, m));
        if writes(&a.op) {
            if a.ret >= 0 {
                if !mine {
                    return Err(uncacheable(format!(
                        "the compile changed {} (a build served from the store would not)",
                        String::from_utf8_lossy(&joined)
                    )));
                }
                made.push(joined);
            } else if a.ret != -(libc::EEXIST as i64) && !mine {
                return Err(uncacheable(format!(
                    "the compile could not change {} ({})",
                    String::from_utf8_lossy(&joined),
                    errno_name(a.ret)
                )));
            }
            continue;
        }
        if made.iter().any(|m| under(&joined, m)) {
            continue;
        }
        if absolute && system(&joined) {
            let through_proc = ["/proc/self/", "/proc/thread-self/"]
                .iter()
                .any(|p| joined.starts_with(p.as_bytes()))
                || joined.strip_prefix(b"/proc/").is_some_and(|r| {
                    r.iter()
                        .position(|&b| b == b'/')
                        .is_some_and(|i| i > 0 && r[..i].iter().all(u8::is_ascii_digit))
                });
            return Err(uncacheable(if through_proc {
                format!(
                    "the compile read {}, a file named through the process's /proc entries, \
                     which no entry could check",
                    String::from_utf8_lossy(&joined)
                )
            } else {
                format!(
                    "the compile read {}, whose content is the system's state",
                    String::from_utf8_lossy(&joined)
                )
            }));
        }
        let (base, path) = if !absolute {
            (Base::Cwd, joined)
        } else if under(&joined, own_cache) {
            let rel = joined[own_cache.len()..].strip_prefix(b"/").unwrap_or(b"");
            (Base::PoclCache, rel.to_vec())
        } else {
            (Base::Absolute, joined)
        };
        let follow = match a.op {
            Op::Stat { follow } => follow,
            Op::Readlink => false,
            _ => true,
        };
        let s = seen(a).map_err(|e| {
            uncacheable(format!(
                "the compile met an error at {}: {e}",
                String::from_utf8_lossy(&path)
            ))
        })?;
        // A FIFO, a socket or a device it opened delivers what it delivers at each read:
        // its status says nothing of what the next compile would read there.
        if let (Op::Open { .. }, Seen::Exists(kind, _)) = (&a.op, &s) {
            if *kind != super::record::FOLDER {
                return Err(uncacheable(format!(
                    "the compile read {}, which is not a regular file (a FIFO or a device): \
                     what it delivers can differ at every read",
                    String::from_utf8_lossy(&path)
                )));
            }
        }
        match looks.entry((base, follow, path)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(s);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => {
                if !merge(o.get_mut(), s) {
                    return Err(Refusal::Retry(format!(
                        "{} changed while it compiled",
                        String::from_utf8_lossy(&o.key().2)
                    )));
                }
            }
        }
    }
    let mut items = Vec::with_capacity(looks.len());
    let mut classes: HashMap<(u64, u64), u32> = HashMap::new();
    for ((base, follow, path), s) in looks {
        // One of the driver's own files, as the empty kernel's compile found it: checked by
        // its status alone.
        let of_driver = (base == Base::Absolute && follow)
            .then(|| driver.found.get(&path).copied().flatten())
            .flatten();
        let status = match &s {
            Seen::File(m) => Some(*m),
            Seen::Exists(_, m) => *m,
            _ => None,
        };
        let expect = match (s, of_driver) {
            (Seen::Absent, _) => Expect::Absent,
            (_, Some(d)) if status.is_some_and(|m| same_status(&m, &d)) => Expect::Driver {
                kind: d.kind(),
                size: d.size,
                mtime_ns: d.mtime_ns,
            },
            (Seen::File(m), _) => {
                let sha256 = hash_unchanged(&usable(base, &path, own_cache), &m, r.start_ns)?;
                let next = classes.len() as u32;
                let class = *classes.entry((m.dev, m.ino)).or_insert(next);
                Expect::File {
                    size: m.size,
                    sha256,
                    class,
                }
            }
            (Seen::Exists(kind, _), _) => Expect::Exists { kind },
            (Seen::Link(target), _) => Expect::Link { target },
            (Seen::NotLink, _) => Expect::NotLink,
        };
        items.push(Item {
            base,
            follow,
            path,
            expect,
        });
    }
    // Every one of the driver's own files, also those this compile did not read: a worker
    // loads pocl's kernel library once, at its first link, so no later entry's compile
    // reads it, yet each program is linked with it.
    let read: std::collections::HashSet<&[u8]> = items
        .iter()
        .filter(|it| it.base == Base::Absolute && it.follow)
        .map(|it| it.path.as_slice())
        .collect();
    let rest = driver.items_but(&read);
    items.extend(rest);
    let manifest = Manifest { items };
    match preprocessed_stands(r, own_cache, &made) {
        Ok(()) => Ok(manifest),
        Err(why) => Err(Refusal::Uncacheable(why, Some(manifest))),
    }
}

/// Whether a file has the kind, length and modification time of the driver's file.
fn same_status(seen: &Meta, d: &Meta) -> bool {
    seen.kind() == d.kind() && seen.size == d.size && seen.mtime_ns == d.mtime_ns
}

/// A name the worker itself can use for an item.
fn usable(base: Base, path: &[u8], own_cache: &[u8]) -> Vec<u8> {
    match base {
        Base::Absolute | Base::Cwd => path.to_vec(),
        Base::PoclCache => {
            let mut p = own_cache.to_vec();
            p.push(b'/');
            p.extend_from_slice(path);
            p
        }
    }
}

/// The SHA-256 of the file the compile read as `at_open`, if it is that file still and
/// was not changed within a second before the compile began.
fn hash_unchanged(path: &[u8], at_open: &Meta, start_ns: i64) -> Result<[u8; 32], Refusal> {
    let name = String::from_utf8_lossy(path).into_owned();
    let changed = || Refusal::Retry(format!("{name} changed while it compiled"));
    let newest = at_open.mtime_ns.max(at_open.ctime_ns);
    if newest > start_ns - TOO_NEW_NS {
        return Err(Refusal::Retry(format!(
            "{name} changed within a second before the compile"
        )));
    }
    let (sha, before, after) = hash_file(path, None).map_err(|_| changed())?;
    let same = |m: &Meta| {
        m.dev == at_open.dev
            && m.ino == at_open.ino
            && m.size == at_open.size
            && m.mtime_ns == at_open.mtime_ns
            && m.ctime_ns == at_open.ctime_ns
    };
    if !same(&before) || !same(&after) {
        return Err(changed());
    }
    Ok(sha)
}

/// A regular file's SHA-256 and its status before and after reading it (not following a
/// final link when `nofollow`, never blocking on a FIFO).
fn hash_file(path: &[u8], nofollow: Option<bool>) -> Result<([u8; 32], Meta, Meta), String> {
    let c = CString::new(path).map_err(|_| "a NUL byte in a name".to_string())?;
    let mut flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC;
    if nofollow == Some(true) {
        flags |= libc::O_NOFOLLOW;
    }
    // SAFETY: a valid name.
    let fd = unsafe { libc::open(c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let fd = super::files::Fd(fd);
    let status = || -> Result<Meta, String> {
        // SAFETY: plain data filled by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        Ok(Meta::of(&st))
    };
    let before = status()?;
    if before.kind() != REGULAR {
        return Err("not a regular file".into());
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fd.0, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(std::io::Error::last_os_error().to_string());
        }
        if n == 0 {
            break;
        }
        h.update(&buf[..n as usize]);
    }
    let after = status()?;
    Ok((h.finalize().into(), before, after))
}

/// Refuses a compile whose preprocessed text holds the time it ran or the name of pocl's
/// temporary copy of the source: a build at another time or in another process would
/// differ, so none can stand for it. A compile from source whose preprocessed text was
/// not seen is refused too (a driver whose steps the tracer does not know).
fn preprocessed_stands(r: &Record, own_cache: &[u8], made: &[Vec<u8>]) -> Result<(), String> {
    let compiled_source = r.accesses.iter().any(|a| {
        matches!(a.op, Op::Open { .. }) && a.target.joined().ends_with(b".cl") && writes(&a.op)
    });
    if compiled_source && r.preprocessed.is_empty() {
        return Err(
            "the compile's preprocessed text was not seen (a driver clshim does not know)".into(),
        );
    }
    let mut names: Vec<&[u8]> = vec![own_cache];
    for m in made {
        let base = m.rsplit(|&b| b == b'/').next().unwrap_or(m);
        if base.len() >= 8 {
            names.push(base);
        }
    }
    for (_, text) in &r.preprocessed {
        if let Some(n) = names.iter().find(|n| !n.is_empty() && find(text, n)) {
            return Err(format!(
                "its preprocessed text names pocl's temporary file {} (__FILE__): each \
                 build's differs",
                String::from_utf8_lossy(n)
            ));
        }
        if let Some(what) = time_of_compile(text, r.start_ns, r.end_ns) {
            return Err(format!(
                "its preprocessed text holds {what}: each build's differs"
            ));
        }
    }
    Ok(())
}

/// Whether `needle` occurs in `hay` (Horspool's search: a preprocessed text is a megabyte
/// of pocl's headers, searched for several names).
fn find(hay: &[u8], needle: &[u8]) -> bool {
    let m = needle.len();
    if m == 0 || m > hay.len() {
        return m == 0;
    }
    let mut skip = [m; 256];
    for (i, &b) in needle[..m - 1].iter().enumerate() {
        skip[b as usize] = m - 1 - i;
    }
    let mut at = 0;
    while at + m <= hay.len() {
        let last = hay[at + m - 1];
        if last == needle[m - 1] && hay[at..at + m - 1] == needle[..m - 1] {
            return true;
        }
        at += skip[last as usize];
    }
    false
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Local (year, month 0-11, day, seconds of the day) of a realtime second.
fn local(secs: i64) -> (i32, i32, i32, i64) {
    // SAFETY: plain data filled by localtime_r.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let t = secs as libc::time_t;
    // SAFETY: valid pointers to a time and a result.
    unsafe { libc::localtime_r(&t, &mut tm) };
    (
        tm.tm_year + 1900,
        tm.tm_mon,
        tm.tm_mday,
        (tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec) as i64,
    )
}

fn digits(b: &[u8]) -> Option<i64> {
    let mut v = 0i64;
    for &c in b {
        if c == b' ' && v == 0 {
            continue;
        }
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as i64;
    }
    Some(v)
}

/// What in `text` is the time of a compile between `start_ns` and `end_ns`: a string
/// literal shaped as `__TIME__` ("hh:mm:ss") within those seconds, as `__DATE__` ("Mmm dd
/// yyyy") of those days, or as `__TIMESTAMP__` ("Www Mmm dd hh:mm:ss yyyy", any: it holds a
/// file's modification time, which no key holds).
fn time_of_compile(text: &[u8], start_ns: i64, end_ns: i64) -> Option<&'static str> {
    let (lo, hi) = (start_ns / 1_000_000_000 - 2, end_ns / 1_000_000_000 + 2);
    let days: Vec<(i32, i32, i32)> = [lo, hi]
        .iter()
        .map(|&s| {
            let (y, m, d, _) = local(s);
            (y, m, d)
        })
        .collect();
    // The window's seconds of the day (all of them past a day).
    let seconds: std::collections::HashSet<i64> =
        (lo..=hi).take(86_401).map(|s| local(s).3).collect();
    let in_window = |secs_of_day: i64| seconds.contains(&secs_of_day);
    let mut at = 0;
    while let Some(q) = text[at..].iter().position(|&b| b == b'"') {
        let s = &text[at + q + 1..];
        at += q + 1;
        if s.len() >= 9 && s[8] == b'"' && s[2] == b':' && s[5] == b':' {
            if let (Some(h), Some(m), Some(sec)) =
                (digits(&s[0..2]), digits(&s[3..5]), digits(&s[6..8]))
            {
                if in_window(h * 3600 + m * 60 + sec) {
                    return Some("the time of the compile (__TIME__)");
                }
            }
        }
        if s.len() >= 12 && s[11] == b'"' && s[3] == b' ' && s[6] == b' ' {
            let month = MONTHS.iter().position(|m| &s[0..3] == *m);
            if let (Some(mon), Some(day), Some(year)) = (month, digits(&s[4..6]), digits(&s[7..11]))
            {
                if days.contains(&(year as i32, mon as i32, day as i32)) {
                    return Some("the date of the compile (__DATE__)");
                }
            }
        }
        if s.len() >= 25
            && s[24] == b'"'
            && s[3] == b' '
            && s[7] == b' '
            && s[10] == b' '
            && s[13] == b':'
        {
            return Some("a file's modification time (__TIMESTAMP__)");
        }
        if s.starts_with(b"??? ??? ?? ??:??:?? ????\"") {
            return Some("__TIMESTAMP__");
        }
    }
    None
}

/// Checks `m` where a process builds now: relative names against its working directory,
/// pocl-cache names against `pocl_cache`. Err: the first name where the compile would find
/// something else now.
pub fn check(m: &Manifest, pocl_cache: &Path) -> Result<(), String> {
    let mut classes: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut files: HashMap<(u64, u64), u32> = HashMap::new();
    for it in &m.items {
        let path = match it.base {
            Base::PoclCache => usable(Base::PoclCache, &it.path, pocl_cache.as_os_str().as_bytes()),
            _ => it.path.clone(),
        };
        let name = || String::from_utf8_lossy(&path).into_owned();
        let differs = |what: &str| Err(format!("{} {what}", name()));
        match &it.expect {
            // Absent as the compile found it: no such name (ENOENT, or ENOTDIR on the
            // way). Any other answer (EACCES, ELOOP, ...) makes clang fail where it went
            // on before: that is another build.
            Expect::Absent => match status(&path, it.follow) {
                Ok(_) => return differs("exists now"),
                Err(e) if e == libc::ENOENT || e == libc::ENOTDIR => {}
                Err(e) => {
                    let why = std::io::Error::from_raw_os_error(e);
                    return differs(&format!("cannot be looked up now ({why})"));
                }
            },
            Expect::Exists { kind } => match status(&path, it.follow) {
                Ok(st) if *kind == 0 || st.kind() == *kind => {}
                Ok(_) => return differs("is of another kind now"),
                Err(_) => return differs("is gone"),
            },
            Expect::Driver {
                kind,
                size,
                mtime_ns,
            } => match status(&path, it.follow) {
                // A folder of the driver's by its kind alone: its times are those of its
                // install on each host (a package keeps its files' times, not its
                // folders'), and what the compile found in it is an item of its own.
                Ok(st) if st.kind() == *kind && *kind == super::record::FOLDER => {}
                Ok(st) if st.kind() == *kind && st.size == *size && st.mtime_ns == *mtime_ns => {}
                _ => return differs("(a file of the driver's) changed"),
            },
            Expect::Listing { suffix, sha256 } => match names_ending(&path, suffix) {
                Ok((now, _)) if now == *sha256 => {}
                _ => return differs("holds other files of the driver's now"),
            },
            Expect::Link { target } => match std::fs::read_link(std::ffi::OsStr::from_bytes(&path))
            {
                Ok(t) if t.as_os_str().as_bytes() == target.as_slice() => {}
                _ => return differs("links elsewhere now"),
            },
            Expect::NotLink => {
                let e = std::fs::read_link(std::ffi::OsStr::from_bytes(&path)).err();
                if e.and_then(|e| e.raw_os_error()) != Some(libc::EINVAL) {
                    return differs("is a link, or gone, now");
                }
            }
            Expect::File {
                size,
                sha256,
                class,
            } => {
                let (sha, st, _) = match hash_file(&path, Some(!it.follow)) {
                    Ok(h) => h,
                    Err(e) => return differs(&format!("cannot be read ({e})")),
                };
                if st.size != *size || &sha != sha256 {
                    return differs("has another content now");
                }
                let id = (st.dev, st.ino);
                let same_class = classes.entry(*class).or_insert(id);
                let same_file = files.entry(id).or_insert(*class);
                if *same_class != id || *same_file != *class {
                    return differs("is another file now, or the same file as another name");
                }
            }
        }
    }
    Ok(())
}

/// Checks, of `m`'s names in pocl's cache folder, that those the compile found absent are
/// absent in `pocl_cache` too. Err: the first that is not.
pub fn absent_in_pocl_cache(m: &Manifest, pocl_cache: &Path) -> Result<(), String> {
    let folder = pocl_cache.as_os_str().as_bytes();
    for it in m.items.iter().filter(|it| it.base == Base::PoclCache) {
        if it.expect != Expect::Absent {
            continue;
        }
        let path = usable(Base::PoclCache, &it.path, folder);
        match status(&path, it.follow) {
            Err(e) if e == libc::ENOENT || e == libc::ENOTDIR => {}
            _ => {
                return Err(format!(
                    "{} exists, or cannot be looked up",
                    String::from_utf8_lossy(&path)
                ))
            }
        }
    }
    Ok(())
}

/// The names in folder `dir` that end in `suffix`, sorted, and their SHA-256 (each name
/// followed by a NUL byte). Err where the folder cannot be read.
fn names_ending(dir: &[u8], suffix: &[u8]) -> Result<([u8; 32], Vec<Vec<u8>>), i32> {
    let entries = std::fs::read_dir(std::ffi::OsStr::from_bytes(dir))
        .map_err(|e| e.raw_os_error().unwrap_or(0))?;
    let mut names = Vec::new();
    for e in entries {
        let name = e.map_err(|e| e.raw_os_error().unwrap_or(0))?.file_name();
        if name.as_bytes().ends_with(suffix) {
            names.push(name.as_bytes().to_vec());
        }
    }
    names.sort();
    let mut h = Sha256::new();
    for name in &names {
        h.update(name);
        h.update([0]);
    }
    Ok((h.finalize().into(), names))
}

fn status(path: &[u8], follow: bool) -> Result<Meta, i32> {
    let c = CString::new(path).map_err(|_| libc::EINVAL)?;
    // SAFETY: plain data filled by stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid name and a writable buffer.
    let r = unsafe {
        if follow {
            libc::stat(c.as_ptr(), &mut st)
        } else {
            libc::lstat(c.as_ptr(), &mut st)
        }
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(Meta::of(&st))
}

/// pocl's cache folder for the environment `get` reads (pocl 3 to 7 take it from
/// `POCL_CACHE_DIR`, else `$XDG_CACHE_HOME/pocl/kcache`, else `$HOME/.cache/pocl/kcache`,
/// else `/tmp/pocl/kcache`; `uncached` instead of `kcache` when `POCL_KERNEL_CACHE` is set
/// to anything that does not begin with `1`).
pub fn pocl_cache_dir(get: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(d) = get("POCL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    // pocl takes a boolean that is set as true only when it begins with "1": "", "true"
    // and "2" all turn its kernel cache off.
    let off = get("POCL_KERNEL_CACHE").is_some_and(|v| !v.as_encoded_bytes().starts_with(b"1"));
    let tail = if off { "pocl/uncached" } else { "pocl/kcache" };
    if let Some(x) = get("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(x).join(tail);
    }
    if let Some(h) = get("HOME") {
        // pocl writes "%s/.cache/%s": an empty HOME names `/.cache`, not a relative folder.
        let mut home = h;
        home.push("/.cache");
        return PathBuf::from(home).join(tail);
    }
    PathBuf::from("/tmp").join(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch folder of this test binary's, made anew.
    fn folder(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("clshim-manifest-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("include")).unwrap();
        d
    }

    /// The front end's files of a compile that read `data/include/_kernel.h`.
    fn front_end(data: &Path) -> DriverFiles {
        let header = data.join("include/_kernel.h");
        std::fs::write(&header, b"/* pocl */\n").unwrap();
        let mut found = HashMap::new();
        found.insert(
            header.as_os_str().as_bytes().to_vec(),
            status(header.as_os_str().as_bytes(), true).ok(),
        );
        DriverFiles {
            found,
            library: None,
        }
    }

    #[test]
    fn the_kernel_library_beside_the_headers_is_the_drivers_and_so_are_its_names() {
        let data = folder("library");
        let mut none = front_end(&data);
        none.add_kernel_library();
        assert!(
            !none.holds_kernel_library(),
            "no bitcode beside the headers"
        );

        std::fs::write(data.join("kernel-x-avx2.bc"), b"bitcode").unwrap();
        std::fs::write(data.join("kernel-x-sse2.bc"), b"bitcode").unwrap();
        let mut files = front_end(&data);
        files.add_kernel_library();
        assert!(files.holds_kernel_library());
        let m = files.as_manifest();
        assert_eq!(m.items.len(), 4, "{m:?}");
        let kept = DriverFiles::from_manifest(&Manifest::decode(&m.encode()).unwrap()).unwrap();
        assert!(kept.holds_kernel_library());
        assert_eq!(kept.as_manifest(), m);
        check(&m, &data).unwrap();

        // A variant that appears where pocl found none (it falls back to another).
        std::fs::write(data.join("kernel-x-avx512.bc"), b"bitcode").unwrap();
        let why = check(&m, &data).unwrap_err();
        assert!(why.contains("holds other files"), "{why}");
        std::fs::remove_file(data.join("kernel-x-avx512.bc")).unwrap();
        check(&m, &data).unwrap();
        // One of them rewritten.
        std::fs::write(data.join("kernel-x-sse2.bc"), b"bitcode, another").unwrap();
        let why = check(&m, &data).unwrap_err();
        assert!(why.contains("kernel-x-sse2.bc"), "{why}");
        let _ = std::fs::remove_dir_all(&data);
    }

    #[test]
    fn the_time_of_a_compile_is_found_in_its_text() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let (y, mon, d, sod) = local(now);
        let time = format!(
            "x = \"{:02}:{:02}:{:02}\";",
            sod / 3600,
            sod / 60 % 60,
            sod % 60
        );
        let ns = now * 1_000_000_000;
        assert!(time_of_compile(time.as_bytes(), ns, ns).is_some());
        let date = format!(
            "\"{} {:2} {}\"",
            String::from_utf8_lossy(MONTHS[mon as usize]),
            d,
            y
        );
        assert!(time_of_compile(date.as_bytes(), ns, ns).is_some(), "{date}");
        assert!(time_of_compile(b"\"Tue Dec  1 22:46:13 2026\"", ns, ns).is_some());
        assert!(time_of_compile(b"\"??? ??? ?? ??:??:?? ????\"", ns, ns).is_some());
        let other = (sod + 3 * 3600) % 86400;
        let elsewhere = format!(
            "\"{:02}:{:02}:{:02}\"",
            other / 3600,
            other / 60 % 60,
            other % 60
        );
        assert!(time_of_compile(elsewhere.as_bytes(), ns, ns).is_none());
        assert!(time_of_compile(b"\"12:3:45\" \"Dex  1 2026\"", ns, ns).is_none());
    }

    #[test]
    fn find_finds_what_a_slow_search_finds() {
        let hay = b"abcabcabd tempfile_ID9e98.cl xx /tmp/clshim-warm-Ab3dE9";
        for needle in [
            &b"tempfile_ID9e98"[..],
            b"/tmp/clshim-warm-Ab3dE9",
            b"abd",
            b"abcabd",
            b"a",
            b"tempfile_ID9e99",
            b"zz",
        ] {
            let slow = hay.windows(needle.len()).any(|w| w == needle);
            assert_eq!(find(hay, needle), slow, "{needle:?}");
        }
        assert!(!find(b"ab", b"abc"));
    }

    #[test]
    fn pocl_cache_folder_follows_pocls_rule() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |n: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        assert_eq!(
            pocl_cache_dir(&env(&[("POCL_CACHE_DIR", "/r0"), ("HOME", "/h")])),
            Path::new("/r0")
        );
        assert_eq!(
            pocl_cache_dir(&env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            Path::new("/x/pocl/kcache")
        );
        assert_eq!(
            pocl_cache_dir(&env(&[("HOME", "/h"), ("POCL_KERNEL_CACHE", "0")])),
            Path::new("/h/.cache/pocl/uncached")
        );
        assert_eq!(pocl_cache_dir(&env(&[])), Path::new("/tmp/pocl/kcache"));
        // pocl writes `$HOME/.cache/...` as text: an empty HOME is the root's `.cache`, not
        // one in the working directory.
        assert_eq!(
            pocl_cache_dir(&env(&[("HOME", "")])),
            Path::new("/.cache/pocl/kcache")
        );
        // pocl's booleans: true only when the value begins with "1".
        for (value, tail) in [
            ("", "uncached"),
            ("true", "uncached"),
            ("2", "uncached"),
            ("1", "kcache"),
            ("1yes", "kcache"),
        ] {
            let get = |n: &str| match n {
                "HOME" => Some(std::ffi::OsString::from("/h")),
                "POCL_KERNEL_CACHE" => Some(std::ffi::OsString::from(value)),
                _ => None,
            };
            assert_eq!(
                pocl_cache_dir(&get),
                Path::new("/h/.cache/pocl").join(tail),
                "POCL_KERNEL_CACHE={value:?}"
            );
        }
    }
}
