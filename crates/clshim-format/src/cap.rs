//! The store's size cap, kept by the warm step after its requests and by the library, at
//! most once an hour, when a process keeps a compile (`CAPPED` says when it last was): the
//! least recently used whole entries and kept compiles beyond `CLSHIM_NATIVE_STORE_MAX` go
//! (entries that say a build is not kept among them; a kept compile as a whole, its build
//! with every first launch kept for it), and so do clshim's own temporary files an hour
//! old, set-aside marks a week old, and source marks older than every entry left. Only
//! files that are clshim's by their names and headers are ever removed: nothing else in the
//! folder (the user's own files, if the store was pointed at a folder of theirs).

use crate::kept;
use crate::store::{self as format, EntryHeader};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Removes the least recently used whole entries until the store holds at most `max`
/// bytes of them, and temporary files of clshim's own naming left over an hour ago by
/// writers that died. A file is an entry only if its name is a key and its header, read
/// without following a link, is clshim's and declares exactly its length: nothing else in
/// the folder (the user's own files, if the store was pointed at a folder of theirs) is
/// ever removed.
pub fn enforce_cap(store: &Path, max: u64) -> u64 {
    let mut entries: Vec<(i64, Unit, u64)> = Vec::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    for sub in [store.to_path_buf(), store.join(format::REQUESTS)] {
        let Ok(rd) = std::fs::read_dir(&sub) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = sub.join(name);
            let Ok(m) = path.symlink_metadata() else {
                continue;
            };
            if format::is_temporary_name(name) && m.is_file() && now - m.mtime() > 3600 {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            // A claim whose request is gone and whose lease has run out: its step was
            // ended between the two (an older version removed the request first).
            let orphan_claim = sub != store
                && format::key_of_name(name, ".claim")
                    .is_some_and(|k| !sub.join(format::request_name(k)).exists());
            if orphan_claim && m.is_file() && now - m.mtime() > format::LEASE_SECONDS {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let set_aside = format::key_of_name(name, ".set-aside").is_some();
            if set_aside && m.is_file() && now - m.mtime() > format::SET_ASIDE_SECONDS {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if sub != store || format::key_of_name(name, ".bin").is_none() || !m.is_file() {
                continue;
            }
            let mut head = [0u8; format::ENTRY_HEADER];
            let whole = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .and_then(|mut f| f.read_exact(&mut head))
                .ok()
                .and_then(|()| EntryHeader::parse(&head).ok())
                .is_some_and(|h| h.names_whole_file(name, m.len()));
            if whole {
                entries.push((m.mtime(), Unit::Entry(name.to_string()), m.len()));
            }
        }
    }
    entries.extend(kept_compiles(store, now));
    entries.sort();
    let mut total: u64 = entries.iter().map(|e| e.2).sum();
    let mut evicted = 0;
    let mut kept = entries.into_iter().peekable();
    while let Some((_, unit, size)) = kept.next_if(|_| total > max) {
        let gone = match &unit {
            Unit::Entry(name) => std::fs::remove_file(store.join(name)).is_ok(),
            Unit::Kept(folder, files) => remove_kept(folder, files),
        };
        if gone {
            total -= size;
            evicted += 1;
        }
    }
    // A source's mark is touched whenever one of its builds is served: a mark older than
    // every entry left stands for builds that are gone.
    let oldest = kept
        .filter(|e| matches!(e.1, Unit::Entry(_)))
        .map(|e| e.0)
        .min()
        .unwrap_or(i64::MAX);
    if let Ok(rd) = std::fs::read_dir(store.join(format::SOURCES)) {
        for e in rd.flatten() {
            let path = e.path();
            let name = e.file_name();
            let ours = name
                .to_str()
                .is_some_and(|n| format::key_of_name(n, "").is_some());
            // A mark is an empty file: a file of the user's by such a name is no mark.
            let stale = path
                .symlink_metadata()
                .is_ok_and(|m| m.is_file() && m.len() == 0 && m.mtime() < oldest);
            if ours && stale {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    evicted
}

/// What the cap removes as one: an entry (its file name), or a kept compile (its folder and
/// the files of clshim's in it).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unit {
    Entry(String),
    Kept(std::path::PathBuf, Vec<std::path::PathBuf>),
}

/// Whether `path` begins as a kept compile does (its magic), read without following a link.
fn is_kept(path: &Path) -> bool {
    let mut head = [0u8; 8];
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| &head == kept::KEPT_MAGIC)
}

/// The kept compiles of `store`, each as one unit: when its build was last taken (its
/// file's time; a take touches it), its files and their bytes. clshim's temporary files an
/// hour old are removed on the way.
fn kept_compiles(store: &Path, now: i64) -> Vec<(i64, Unit, u64)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(store.join(kept::COMPILES)) else {
        return out;
    };
    for e in rd.flatten() {
        let folder = e.path();
        let is_key = e
            .file_name()
            .to_str()
            .is_some_and(|n| n.len() == 16 && u64::from_str_radix(n, 16).is_ok());
        let is_dir = folder.symlink_metadata().is_ok_and(|m| m.is_dir());
        if !is_key || !is_dir {
            continue;
        }
        let (mut files, mut bytes, mut when) = (Vec::new(), 0, 0);
        for f in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let name = f.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = f.path();
            let Ok(m) = path.symlink_metadata() else {
                continue;
            };
            if !m.is_file() {
                continue;
            }
            if format::is_temporary_name(name) {
                if now - m.mtime() > 3600 {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if name.ends_with(kept::SUFFIX) && is_kept(&path) {
                bytes += m.len();
                if name == kept::BUILD_FILE {
                    when = m.mtime();
                }
                files.push(path);
            }
        }
        if !files.is_empty() {
            files.sort();
            out.push((when, Unit::Kept(folder, files), bytes));
        }
    }
    out
}

/// Removes a kept compile: its build first (so no process takes its launches without it),
/// then its launches, then its folder if nothing else is left in it.
fn remove_kept(folder: &Path, files: &[std::path::PathBuf]) -> bool {
    let build = folder.join(kept::BUILD_FILE);
    let first = files.iter().find(|f| **f == build);
    let ok = first.map_or(true, |b| std::fs::remove_file(b).is_ok());
    for f in files.iter().filter(|f| Some(*f) != first) {
        let _ = std::fs::remove_file(f);
    }
    let _ = std::fs::remove_dir(folder);
    ok
}

/// The file whose time says when the library last kept the store under its cap, in the
/// store's `compiles/` folder.
pub const CAPPED: &str = ".capped";
