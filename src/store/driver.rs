//! Which build of the driver compiles a program: its library, found through the device's
//! dispatch table, by its GNU build-id (pocl's version strings do not change when a
//! distribution rebuilds it), together with the build-ids of the LLVM and Clang libraries
//! loaded beside it (pocl compiles with them, and a distribution may update them without
//! rebuilding pocl), the folder it was loaded from (a relocatable pocl reads its files
//! relative to it), and, for pocl, its kernel library as it is on disk (bitcode linked into
//! every program pocl builds, which pocl's own cache knows only by the SHA-1 libpocl was
//! built with). A library without a build-id is named by its path, size, modification
//! time and inode instead. macOS libraries carry no build-id, and the store is not used
//! there.
// On macOS the warm step and the program cache are not built: what only they use is idle.
#![cfg_attr(target_os = "macos", allow(dead_code, unused_imports))]

use crate::cl::cl_device_id;
use crate::hash::Fnv1a;
use std::ffi::{c_int, c_void, CStr};
use std::os::unix::ffi::OsStrExt;

/// The identity of the driver library behind `device`: the file its dispatch table's
/// `clGetDeviceInfo` lives in, by its GNU build-id, else by its path, size, modification
/// time and inode. None where there is no such table or file (macOS).
///
/// # Safety
/// `device` is a live ICD object.
pub unsafe fn driver_identity(device: cl_device_id) -> Option<u64> {
    // SAFETY: a live ICD object (this function's contract).
    library_identity(unsafe { device_code(device) }?)
}

/// An address in the code of the driver library behind `device`: its dispatch table's
/// `clGetDeviceInfo`. None where there is no such table (macOS).
///
/// # Safety
/// `device` is a live ICD object.
unsafe fn device_code(device: cl_device_id) -> Option<*const c_void> {
    // macOS: objects carry no dispatch table.
    if cfg!(target_os = "macos") {
        return None;
    }
    // SAFETY: a live ICD object (this function's contract).
    let table = unsafe { crate::dispatch::object_table(device as crate::cl::Handle) }?;
    // SAFETY: a dispatch table holds the clGetDeviceInfo slot (3).
    let f = unsafe { *table.add(3) };
    (!f.is_null()).then_some(f)
}

/// The driver build behind `device` in words, for the store's label of its identity
/// (`clshim_format::labels`): the library's path and build-id, and each compiler
/// library's, as [`driver_identity`] hashes them.
///
/// # Safety
/// `device` is a live ICD object.
pub unsafe fn describe(device: cl_device_id) -> Option<clshim_format::labels::DriverLabel> {
    // SAFETY: a live ICD object (this function's contract).
    let name = library_name(unsafe { device_code(device) }?)?;
    let hex = |id: Vec<u8>| id.iter().map(|b| format!("{b:02x}")).collect::<String>();
    Some(clshim_format::labels::DriverLabel {
        library: String::from_utf8_lossy(name.to_bytes()).into_owned(),
        build_id: build_id(&name).map(hex),
        compilers: loaded_compilers()
            .into_iter()
            .map(|(file, full)| {
                (
                    String::from_utf8_lossy(&file).into_owned(),
                    build_id(&full).map(hex),
                )
            })
            .collect(),
    })
}

/// The file name of the loaded object holding the code at `addr`.
fn library_name(addr: *const c_void) -> Option<std::ffi::CString> {
    // SAFETY: plain data filled by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address to look it up.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the dynamic linker,
    // alive while the object is loaded (it is: `addr` is in it).
    Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_owned())
}

/// The identity of the loaded object holding the code at `addr`, with the LLVM and Clang
/// libraries loaded in the process (a few walks of the loaded objects: microseconds, beside
/// the driver calls it goes with).
pub fn library_identity(addr: *const c_void) -> Option<u64> {
    let name = library_name(addr)?;
    let mut h = Fnv1a::default();
    h.update(b"driver-3\0");
    h.update(&file_identity(&name)?.to_le_bytes());
    // A relocatable pocl (Debian's among them) finds its headers and kernel library from
    // the folder it was loaded from (`../../share/pocl`), so one build installed, linked or
    // copied in two places may read two sets of files: two drivers, whose entries and
    // lists of files are each checked against their own.
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(name.to_bytes()));
    let folder = path.parent().and_then(|f| std::fs::canonicalize(f).ok());
    h.update(
        folder
            .as_ref()
            .map_or(name.to_bytes(), |f| f.as_os_str().as_bytes()),
    )
    .update(b"\0");
    for (lib, id) in compiler_libraries() {
        h.update(&lib).update(b"\0").update(&id.to_le_bytes());
    }
    // A kept compile is pocl's cache entry, which holds the kernel library linked in and
    // which pocl finds by the library's SHA-1 from when libpocl was built: a library
    // reinstalled under the same libpocl would be served as it was (a review found that).
    // The library as this process first saw it: pocl loads it once a process.
    let library = super::kernel_library::first_seen(&name, library_name);
    if let Some(l) = &library {
        // Not the inode: a package installed on each node keeps its files' times, not
        // their inodes.
        for (file, kind, size, mtime_ns, _) in &l.files {
            h.update(file).update(b"\0");
            for v in [*kind as u64, *size, *mtime_ns as u64] {
                h.update(&v.to_le_bytes());
            }
        }
    }
    let id = h.finish();
    if let Some(l) = library {
        super::kernel_library::name_driver(id, l);
    }
    Some(id)
}

/// One loaded object's identity: its build-id, else its path, size, times and inode.
fn file_identity(name: &CStr) -> Option<u64> {
    if let Some(id) = build_id(name) {
        return Some(Fnv1a::default().update(b"build-id\0").update(&id).finish());
    }
    let m = std::fs::metadata(std::ffi::OsStr::from_bytes(name.to_bytes())).ok()?;
    use std::os::unix::fs::MetadataExt;
    let mut h = Fnv1a::default();
    h.update(b"file\0").update(name.to_bytes()).update(&[0]);
    for v in [m.len(), m.mtime() as u64, m.mtime_nsec() as u64, m.ino()] {
        h.update(&v.to_le_bytes());
    }
    Some(h.finish())
}

/// Whether a loaded object is one of the compiler libraries a driver such as pocl compiles
/// with (by its file name: `libLLVM-15.so.1`, `libLLVM.so.18.1`, `libclang-cpp.so.15`).
fn is_compiler_library(file_name: &[u8]) -> bool {
    file_name.starts_with(b"libLLVM-")
        || file_name.starts_with(b"libLLVM.so")
        || file_name.starts_with(b"libclang-cpp.so")
}

/// The loaded compiler libraries, by file name, with their identities, sorted.
fn compiler_libraries() -> Vec<(Vec<u8>, u64)> {
    let mut out: Vec<(Vec<u8>, u64)> = loaded_compilers()
        .into_iter()
        .filter_map(|(file, full)| Some((file, file_identity(&full)?)))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The loaded compiler libraries: each one's file name and full name, sorted.
#[cfg(not(target_os = "macos"))]
fn loaded_compilers() -> Vec<(Vec<u8>, std::ffi::CString)> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the list `loaded_compilers` passed, alive for the call.
        let found = unsafe { &mut *(data as *mut Vec<std::ffi::CString>) };
        // SAFETY: the dynamic linker's description of one loaded object.
        let info = unsafe { &*info };
        if !info.dlpi_name.is_null() {
            // SAFETY: a NUL-terminated name owned by the dynamic linker.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            let file = name.to_bytes().rsplit(|&b| b == b'/').next().unwrap_or(&[]);
            if is_compiler_library(file) {
                found.push(name.to_owned());
            }
        }
        0
    }
    let mut found: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: `each` reads only what the dynamic linker hands it; `found` outlives the call.
    unsafe {
        libc::dl_iterate_phdr(
            Some(each),
            &mut found as *mut Vec<std::ffi::CString> as *mut c_void,
        )
    };
    let mut out: Vec<(Vec<u8>, std::ffi::CString)> = found
        .into_iter()
        .filter_map(|n| Some((n.to_bytes().rsplit(|&b| b == b'/').next()?.to_vec(), n)))
        .collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(target_os = "macos")]
fn loaded_compilers() -> Vec<(Vec<u8>, std::ffi::CString)> {
    Vec::new()
}

/// macOS: Mach-O files carry no GNU build-id (and the store is not used there).
#[cfg(target_os = "macos")]
fn build_id(_name: &CStr) -> Option<Vec<u8>> {
    None
}

/// The GNU build-id note of the loaded object named `name`.
#[cfg(not(target_os = "macos"))]
fn build_id(name: &CStr) -> Option<Vec<u8>> {
    struct Search<'a> {
        name: &'a CStr,
        found: Option<Vec<u8>>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Search `build_id` passed, alive for the call.
        let search = unsafe { &mut *(data as *mut Search) };
        // SAFETY: the dynamic linker's description of one loaded object.
        let info = unsafe { &*info };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a NUL-terminated name owned by the dynamic linker.
        if unsafe { CStr::from_ptr(info.dlpi_name) } != search.name {
            return 0;
        }
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: the object's program headers, `dlpi_phnum` of them.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_NOTE {
                continue;
            }
            let start = (info.dlpi_addr as usize).wrapping_add(ph.p_vaddr as usize);
            // SAFETY: a PT_NOTE segment is mapped (it lies in a loaded segment) for its
            // memory size.
            let notes =
                unsafe { std::slice::from_raw_parts(start as *const u8, ph.p_memsz as usize) };
            search.found = gnu_build_id(notes);
            if search.found.is_some() {
                break;
            }
        }
        1
    }
    let mut search = Search { name, found: None };
    // SAFETY: `each` reads only what the dynamic linker hands it; `search` outlives the
    // call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut search as *mut Search as *mut c_void) };
    search.found
}

/// The descriptor of the `NT_GNU_BUILD_ID` note among `notes`, each length checked.
#[cfg(not(target_os = "macos"))]
fn gnu_build_id(notes: &[u8]) -> Option<Vec<u8>> {
    let align = |n: usize| (n + 3) & !3;
    let mut at = 0;
    while at + 12 <= notes.len() {
        let word = |i: usize| u32::from_ne_bytes(notes[at + i..at + i + 4].try_into().unwrap());
        let (namesz, descsz, kind) = (word(0) as usize, word(4) as usize, word(8));
        let name_at = at + 12;
        let desc_at = name_at.checked_add(align(namesz))?;
        let end = desc_at.checked_add(align(descsz))?;
        if desc_at + descsz > notes.len() {
            return None;
        }
        if kind == 3 && namesz == 4 && &notes[name_at..name_at + 4] == b"GNU\0" {
            return Some(notes[desc_at..desc_at + descsz].to_vec());
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_library_has_an_identity() {
        let here = this_library_has_an_identity as *const c_void;
        assert!(library_identity(here).is_some());
        assert_eq!(library_identity(here), library_identity(here));
    }

    #[test]
    fn compiler_libraries_by_name() {
        for yes in ["libLLVM-15.so.1", "libLLVM.so.18.1", "libclang-cpp.so.15"] {
            assert!(is_compiler_library(yes.as_bytes()), "{yes}");
        }
        for no in [
            "libllvmlite.so",
            "libclang.so.15",
            "libLLVMSupport.a",
            "libpocl.so.2",
        ] {
            assert!(!is_compiler_library(no.as_bytes()), "{no}");
        }
    }
}
