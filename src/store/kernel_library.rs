//! pocl's kernel library as this process's pocl links with it: the bitcode linked into
//! every program pocl builds, which pocl's own kernel cache knows only by the SHA-1 libpocl
//! was built with, and which pocl loads once a process. This module owns where the library
//! is (pocl's own answer), its files' statuses as this process first saw them (part of the
//! driver's identity, so a library changed on disk is another key), and whether it has
//! changed since a given moment (so that nothing compiled with a library other than the
//! one a key names is kept under it: a compile of a process that saw the library change,
//! or one pocl's cache made before it did).

// On macOS the warm step and the program cache are not built: what only they use is idle.
#![cfg_attr(target_os = "macos", allow(dead_code, unused_imports))]

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The kernel library of one pocl library, as first seen by this process.
#[derive(Debug)]
pub struct Seen {
    folder: PathBuf,
    /// Each bitcode file's name, kind, length and modification time, sorted by name.
    pub files: Vec<(Vec<u8>, u32, u64, i64)>,
    /// When the statuses were taken (ns since the epoch).
    at_ns: i64,
}

/// By pocl library name; and by driver identity, once one names it.
static BY_LIBRARY: Mutex<Option<HashMap<CString, Arc<Seen>>>> = Mutex::new(None);
static BY_DRIVER: Mutex<Option<HashMap<u64, Arc<Seen>>>> = Mutex::new(None);

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The kernel library of the loaded driver library `name` as this process first saw it;
/// None for a driver that is not pocl (or a pocl that does not say where its library is).
/// `library_name` names the loaded object holding an address.
pub fn first_seen(
    name: &CStr,
    library_name: fn(*const c_void) -> Option<CString>,
) -> Option<Arc<Seen>> {
    let mut map = BY_LIBRARY.lock().unwrap_or_else(|e| e.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(seen) = map.get(name) {
        return Some(seen.clone());
    }
    let folder = private_datadir(name, library_name)?;
    let at_ns = now_ns();
    let seen = Arc::new(Seen {
        files: statuses(&folder),
        folder,
        at_ns,
    });
    map.insert(name.to_owned(), seen.clone());
    Some(seen)
}

/// Notes that the driver identity `driver` names `seen`.
pub fn name_driver(driver: u64, seen: Arc<Seen>) {
    let mut map = BY_DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    map.get_or_insert_with(HashMap::new).insert(driver, seen);
}

/// Whether what pocl built for a key of the driver identity `driver` was linked with the
/// kernel library that identity names: no bitcode file of it, nor its folder, has changed
/// (by its status change time, which no one but the clock sets) since this process first
/// saw it, nor, with `made_ns`, since a program pocl's cache holds was written then. True
/// for a driver that is not pocl. A file's change time on this node is compared with this
/// node's clock only.
pub fn unchanged(driver: u64, made_ns: Option<i64>) -> bool {
    let seen = {
        let map = BY_DRIVER.lock().unwrap_or_else(|e| e.into_inner());
        match map.as_ref().and_then(|m| m.get(&driver)) {
            Some(s) => s.clone(),
            None => return true,
        }
    };
    let limit = made_ns.map_or(seen.at_ns, |m| m.min(seen.at_ns));
    changed_at(&seen.folder).is_some_and(|at| at <= limit)
}

/// The latest status change of the kernel library in `folder`: its folder (a file added,
/// removed or renamed) and every bitcode file. None where the folder cannot be read.
fn changed_at(folder: &Path) -> Option<i64> {
    let ns = |m: &std::fs::Metadata| m.ctime().saturating_mul(1_000_000_000) + m.ctime_nsec();
    let mut latest = ns(&std::fs::metadata(folder).ok()?);
    for e in std::fs::read_dir(folder).ok()?.flatten() {
        if e.file_name().as_bytes().ends_with(b".bc") {
            // A file that vanished between the listing and its status: changed now.
            let at = std::fs::metadata(e.path()).map_or(i64::MAX, |m| ns(&m));
            latest = latest.max(at);
        }
    }
    Some(latest)
}

/// The latest status change of the kernel library of the driver identity `driver`, as
/// this process's pocl would read it now; None for a driver that is not pocl, or one this
/// process has not named.
pub fn changed_at_of(driver: u64) -> Option<i64> {
    let map = BY_DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    let folder = map.as_ref()?.get(&driver)?.folder.clone();
    drop(map);
    changed_at(&folder)
}

/// The folder pocl reads its headers and kernel library from, as the pocl library `name`
/// itself answers (its `pocl_get_private_datadir`, exported from pocl 3.1 to 7 at least,
/// `int (char *)` filling a buffer of `POCL_MAX_PATHNAME_LENGTH`, 4096). None for another
/// driver, or a pocl that does not export it.
#[cfg(target_os = "linux")]
fn private_datadir(
    name: &CStr,
    library_name: fn(*const c_void) -> Option<CString>,
) -> Option<PathBuf> {
    // SAFETY: RTLD_NOLOAD only finds an object already loaded (the driver is: its code is
    // behind the device), and the handle is closed at once; the driver's own reference
    // keeps it loaded.
    let f = unsafe {
        let handle = libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return None;
        }
        let symbol = b"pocl_get_private_datadir\0";
        let f = libc::dlsym(handle, symbol.as_ptr() as *const std::ffi::c_char);
        libc::dlclose(handle);
        f
    };
    // The driver's own function, not one a library it loaded exports.
    if f.is_null() || library_name(f)?.as_c_str() != name {
        return None;
    }
    let mut buf = vec![0u8; 4 * 4096];
    // SAFETY: pocl's `int pocl_get_private_datadir(char *)`, which writes a NUL-terminated
    // path of at most POCL_MAX_PATHNAME_LENGTH bytes; the buffer is four times that.
    let got = unsafe {
        let get: unsafe extern "C" fn(*mut std::ffi::c_char) -> c_int = std::mem::transmute(f);
        get(buf.as_mut_ptr() as *mut std::ffi::c_char)
    };
    let len = buf.iter().position(|&b| b == 0)?;
    (got == 0 && len > 0).then(|| std::ffi::OsStr::from_bytes(&buf[..len]).into())
}

#[cfg(not(target_os = "linux"))]
fn private_datadir(
    _name: &CStr,
    _library_name: fn(*const c_void) -> Option<CString>,
) -> Option<PathBuf> {
    None
}

/// The `S_IF*` bits of a mode (u16 on macOS).
#[allow(clippy::unnecessary_cast)]
const FILE_KIND: u32 = libc::S_IFMT as u32;

/// pocl's kernel library in `folder`: each bitcode file's name, kind, length and
/// modification time, sorted by name (pocl picks a variant by the CPU and falls back to
/// another when it is missing, so every one counts, and one that appears too).
fn statuses(folder: &Path) -> Vec<(Vec<u8>, u32, u64, i64)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut out: Vec<(Vec<u8>, u32, u64, i64)> = entries
        .flatten()
        .filter(|e| e.file_name().as_bytes().ends_with(b".bc"))
        .filter_map(|e| {
            let m = std::fs::metadata(e.path()).ok()?;
            let mtime_ns = m.mtime().saturating_mul(1_000_000_000) + m.mtime_nsec();
            Some((
                e.file_name().as_bytes().to_vec(),
                m.mode() & FILE_KIND,
                m.len(),
                mtime_ns,
            ))
        })
        .collect();
    out.sort();
    out
}
