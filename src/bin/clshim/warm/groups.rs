//! The requests waiting in a store, grouped by the working directory and environment
//! their runs had (a driver reads its environment once, when it starts: one worker process
//! serves one group; `Request::group`), but for the variables that only place the
//! application's kernel cache (`format::CACHE_PLACING`: ranks with caches of their own
//! share a group, and the worker takes each request's cache from the request), and the
//! folder each group's workers start in. A worker starts only in
//! the very folder its run used (named without a symbolic link, the user's or root's),
//! opened before the worker is started and entered by that descriptor; when that folder is
//! gone (a job's scratch, removed at its end), in an empty private folder instead, where a
//! build that reads nothing relative to its folder is made all the same (its manifest says
//! that the names it probed there were absent) and one that needs files from there fails
//! and is removed.

use super::trust::{me, read_request, Unread};
use clshim_format::store::{self as format, Request};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One group of requests: where and with what variables its worker runs, how many (and
/// their keys), and the first one's file (to name the group by).
pub struct Group {
    pub cwd: PathBuf,
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    pub requests: usize,
    pub keys: Vec<u64>,
    pub first: PathBuf,
}

/// The requests waiting in `store`, by group; damaged ones are removed and counted, those
/// that are not the user's alone are named, left and counted.
pub fn groups(store: &Path, failed: &mut u64) -> BTreeMap<u64, Group> {
    let mut out = BTreeMap::new();
    for key in waiting(store) {
        add(store, key, &mut out, failed);
    }
    out
}

/// The keys of the requests waiting in `store` (by their files' names alone).
pub fn waiting(store: &Path) -> Vec<u64> {
    let Ok(rd) = std::fs::read_dir(store.join(format::REQUESTS)) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| format::key_of_name(e.file_name().to_str()?, ".req"))
        .collect()
}

/// Adds the request of `key` to its group in `out` (read, checked and decoded); a damaged
/// one is removed and counted, one that is not the user's alone named, left and counted.
/// Returns its group.
pub fn add(
    store: &Path,
    key: u64,
    out: &mut BTreeMap<u64, Group>,
    failed: &mut u64,
) -> Option<u64> {
    let path = store.join(format::REQUESTS).join(format::request_name(key));
    let request = match read_request(&path, format::MAX_REQUEST) {
        Ok(b) => Request::decode(&b),
        Err(Unread::Damaged) => Err("not a readable regular file".to_string()),
        Err(Unread::NotYours(why)) => {
            eprintln!("clshim warm: {}: {why}", path.display());
            *failed += 1;
            return None;
        }
    };
    match request {
        Ok(r) => {
            let g = out.entry(r.group()).or_insert_with(|| Group {
                cwd: PathBuf::from(OsString::from_vec(r.cwd.clone())),
                env: r.env.clone(),
                requests: 0,
                keys: Vec::new(),
                first: path.clone(),
            });
            g.requests += 1;
            g.keys.push(r.key);
            Some(r.group())
        }
        Err(why) => {
            eprintln!("clshim warm: {}: {why}; removed", path.display());
            let _ = std::fs::remove_file(&path);
            *failed += 1;
            None
        }
    }
}

/// The folder a worker for `g` starts in: the one its requests' runs used, opened, or why
/// no worker may start there. A run's library names it as `getcwd` gave it: absolute and
/// without a symbolic link, `.` or `..`, so a name that is not its folder's own (a link put
/// in since) or a folder of another user's (made since) is not the folder the run used;
/// root's folders are the system's. What the folder holds, the run read there too.
fn checked_folder(g: &Group) -> Result<std::fs::File, String> {
    if !g.cwd.is_absolute() {
        return Err("not an absolute path: no run names its folder so".into());
    }
    let real = std::fs::canonicalize(&g.cwd).map_err(|e| e.to_string())?;
    if real != g.cwd {
        return Err(format!(
            "names {} through a symbolic link (or `.`, `..`): not the folder the run used",
            real.display()
        ));
    }
    if !real.is_dir() {
        return Err("not a directory".into());
    }
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(&g.cwd)
        .map_err(|e| e.to_string())?;
    let m = dir.metadata().map_err(|e| e.to_string())?;
    if m.uid() != me() && m.uid() != 0 {
        return Err(format!(
            "owned by uid {}, neither yours (uid {}) nor root's: a worker starts only in your \
             folders or the system's",
            m.uid(),
            me()
        ));
    }
    // What was opened is what was checked by name: a link put on the way in between would
    // show here.
    let again = std::fs::canonicalize(&g.cwd).and_then(|p| {
        let n = p.metadata()?;
        Ok((p, n))
    });
    match again {
        Ok((p, n)) if p == g.cwd && (n.dev(), n.ino()) == (m.dev(), m.ino()) => Ok(dir),
        _ => Err("changed while it was checked".into()),
    }
}

/// Where a group's workers start.
pub enum Folder {
    /// The run's own folder, opened.
    Run(std::fs::File),
    /// The run's folder is gone: an empty private folder, opened (removed when dropped).
    Gone(std::fs::File, PathBuf),
}

impl Folder {
    pub fn file(&self) -> &std::fs::File {
        match self {
            Folder::Run(f) | Folder::Gone(f, _) => f,
        }
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        if let Folder::Gone(_, p) = self {
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// The folder a worker for `g` starts in, or why none may start.
pub fn start_folder(g: &Group) -> Result<Folder, String> {
    match g.cwd.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && g.cwd.is_absolute() => {
            let made = empty_folder()?;
            let f = std::fs::File::open(&made).map_err(|e| e.to_string())?;
            Ok(Folder::Gone(f, made))
        }
        _ => checked_folder(g).map(Folder::Run),
    }
}

/// An empty folder of this user's under `$TMPDIR` (else /tmp), 0700.
fn empty_folder() -> Result<PathBuf, String> {
    let mut template = std::env::temp_dir()
        .join("clshim-warm-gone-XXXXXX")
        .into_os_string()
        .into_vec();
    template.push(0);
    // SAFETY: a writable NUL-terminated template.
    let made = unsafe { libc::mkdtemp(template.as_mut_ptr() as *mut libc::c_char) };
    if made.is_null() {
        return Err(format!(
            "no empty folder to make its requests in: {}",
            std::io::Error::last_os_error()
        ));
    }
    template.pop();
    Ok(PathBuf::from(OsString::from_vec(template)))
}
