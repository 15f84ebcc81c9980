//! What only `clshim warm` does: the driver's binaries of the compiles jobs kept. A kept
//! build (`clshim_format::kept`) is served to later builds of its key at the speed of
//! pocl's kernel cache (pocl still preprocesses each source, about 20 ms a program); the
//! driver's binary loads in about one. Making it costs pocl's generic compile, which a job
//! does not pay where nothing asks for binaries, so it is made when the user asks: each
//! kept build the store has no entry for becomes a request (the kept build carries it),
//! which the warm step then makes like any other. The node's warm service never does this.

use super::trust::{read_request, Unread};
use clshim_format::kept::{self, Kept, KeptKind};
use clshim_format::store as format;
use std::path::Path;

/// Leaves a request for each kept build of `store` that has no entry (or one older than the
/// kept build) and no request (nor a mark that making it failed or crashed a driver).
/// Returns how many.
pub fn kept_builds(store: &Path) -> usize {
    let compiles = store.join(kept::COMPILES);
    let requests = store.join(format::REQUESTS);
    let Ok(rd) = std::fs::read_dir(&compiles) else {
        return 0;
    };
    let mut left = 0;
    for e in rd.flatten() {
        let Some(key) = e
            .file_name()
            .to_str()
            .and_then(|n| u64::from_str_radix(n, 16).ok().filter(|_| n.len() == 16))
        else {
            continue;
        };
        // An entry older than its kept build was made before a job compiled the build anew
        // (the files it reads changed: pocl did not find the kept compile its own).
        let modified = |p: &Path| p.symlink_metadata().and_then(|m| m.modified()).ok();
        let entry = modified(&store.join(format::entry_name(key)));
        let build = modified(&e.path().join(kept::BUILD_FILE));
        let wanted = entry.map_or(true, |t| build.is_some_and(|b| b > t))
            && !requests.join(format::request_name(key)).exists()
            && !requests.join(format::set_aside_name(key)).exists();
        if !wanted {
            continue;
        }
        let bytes = match read_request(&e.path().join(kept::BUILD_FILE), kept::MAX_KEPT) {
            Ok(b) => b,
            Err(Unread::Damaged) => continue,
            Err(Unread::NotYours(why)) => {
                eprintln!("clshim warm: {why}");
                continue;
            }
        };
        let Ok(k) = Kept::decode(&bytes) else {
            continue;
        };
        if k.kind != KeptKind::Build || k.key != key || format::Request::decode(&k.request).is_err()
        {
            continue;
        }
        if std::fs::create_dir_all(&requests).is_ok() && write_new(&requests, key, &k.request) {
            left += 1;
        }
    }
    left
}

/// Writes the request `bytes` for `key` whole (a temporary name, then renamed), private.
fn write_new(dir: &Path, key: u64, bytes: &[u8]) -> bool {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".tmp-promote-{}-{key:016x}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes));
    if written.is_ok() && std::fs::rename(&tmp, dir.join(format::request_name(key))).is_ok() {
        return true;
    }
    let _ = std::fs::remove_file(&tmp);
    false
}
