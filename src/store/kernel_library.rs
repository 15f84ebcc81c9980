//! pocl's kernel library as this process's pocl links with it: the bitcode linked into
//! every program pocl builds, which pocl's own kernel cache knows only by the SHA-1 libpocl
//! was built with, and which pocl loads once a process. This module owns where the library
//! is (pocl's own answer), its files' statuses as this process first saw them (part of the
//! driver's identity, so a library changed on disk is another key), whether they are still
//! so, and the mark clshim leaves in a program folder of pocl's cache that a compile under
//! a key made: pocl's cache answers with programs whatever library linked them, and only a
//! marked one is known to hold the library its key names.

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
    /// Each bitcode file's name, kind, length, modification time and inode, sorted by
    /// name.
    pub files: Vec<(Vec<u8>, u32, u64, i64, u64)>,
}

/// By pocl library name; and by driver identity, once one names it.
static BY_LIBRARY: Mutex<Option<HashMap<CString, Arc<Seen>>>> = Mutex::new(None);
static BY_DRIVER: Mutex<Option<HashMap<u64, Arc<Seen>>>> = Mutex::new(None);

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
    let seen = Arc::new(Seen {
        files: statuses(&folder),
        folder,
    });
    map.insert(name.to_owned(), seen.clone());
    Some(seen)
}

/// Notes that the driver identity `driver` names `seen`.
pub fn name_driver(driver: u64, seen: Arc<Seen>) {
    let mut map = BY_DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    map.get_or_insert_with(HashMap::new).insert(driver, seen);
}

/// Whether pocl's kernel library of the driver identity `driver` is still as this process
/// first saw it (and named it in the identity): the same files, each of the same kind,
/// length, modification time and inode. pocl loads it once a process, so a compile made
/// after it changed may have linked either. True for a driver that is not pocl.
pub fn unchanged(driver: u64) -> bool {
    let seen = {
        let map = BY_DRIVER.lock().unwrap_or_else(|e| e.into_inner());
        match map.as_ref().and_then(|m| m.get(&driver)) {
            Some(s) => s.clone(),
            None => return true,
        }
    };
    statuses(&seen.folder) == seen.files
}

/// The file clshim leaves in a program folder of pocl's cache (pocl serialises only the
/// program's bitcode and its kernels' folders, so its binaries do not carry it).
pub const MARK: &str = "clshim-driver";

fn mark_text(driver: u64) -> String {
    format!("{driver:016x}\n")
}

/// Marks the program folder `folder` of pocl's cache as compiled under a key of the driver
/// identity `driver` by this process, while its kernel library was as the identity names it.
pub fn mark(folder: &Path, driver: u64) -> std::io::Result<()> {
    std::fs::write(folder.join(MARK), mark_text(driver))
}

/// Marks the program folder `folder` of pocl's cache as compiled by a process that cannot
/// tell which kernel library linked it (one that changed while the process ran).
pub fn mark_unknown(folder: &Path) -> std::io::Result<()> {
    std::fs::write(folder.join(MARK), b"unknown\n")
}

/// Whether the program folder `folder` of pocl's cache bears a mark of any compile.
pub fn bears_mark(folder: &Path) -> bool {
    std::fs::symlink_metadata(folder.join(MARK)).is_ok()
}

/// Whether the program folder `folder` of pocl's cache holds a compile made under a key of
/// the driver identity `driver` (its mark, a regular file, names it).
pub fn marked(folder: &Path, driver: u64) -> bool {
    let at = folder.join(MARK);
    std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_file() && m.len() == 17)
        && std::fs::read(&at).is_ok_and(|b| b == mark_text(driver).as_bytes())
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

/// pocl's kernel library in `folder`: each bitcode file's name, kind, length, modification
/// time and inode, sorted by name (pocl picks a variant by the CPU and falls back to
/// another when it is missing, so every one counts, and one that appears too).
fn statuses(folder: &Path) -> Vec<(Vec<u8>, u32, u64, i64, u64)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut out: Vec<(Vec<u8>, u32, u64, i64, u64)> = entries
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
                m.ino(),
            ))
        })
        .collect();
    out.sort();
    out
}
