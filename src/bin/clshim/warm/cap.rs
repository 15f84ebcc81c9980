//! The store's size cap: after its requests, a warm step removes the least recently used
//! whole entries beyond `CLSHIM_NATIVE_STORE_MAX` (those that say a build is not kept
//! among them), its own temporary files an hour old, set-aside marks a week old, and source
//! marks older than every entry left.
//! Only files that are clshim's by their names and headers are ever removed: nothing else
//! in the folder (the user's own files, if the store was pointed at a folder of theirs).

use clshim_format::store::{self as format, EntryHeader};
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
    let mut entries = Vec::new();
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
                entries.push((m.mtime(), name.to_string(), m.len()));
            }
        }
    }
    entries.sort();
    let mut total: u64 = entries.iter().map(|e| e.2).sum();
    let mut evicted = 0;
    let mut kept = entries.into_iter().peekable();
    while let Some((_, name, size)) = kept.next_if(|_| total > max) {
        if std::fs::remove_file(store.join(&name)).is_ok() {
            total -= size;
            evicted += 1;
        }
    }
    // A source's mark is touched whenever one of its builds is served: a mark older than
    // every entry left stands for builds that are gone.
    let oldest = kept.peek().map_or(i64::MAX, |e| e.0);
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
