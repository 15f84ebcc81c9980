//! One recording copy per process, whatever number of copies of the library is loaded (a
//! module file's copy in `OPENCL_LAYERS`, a wheel's in `LD_PRELOAD`, both doors at once):
//! each copy has its own statics, thread-locals and trace file, so two copies would each
//! record every call that passes both. Every copy exports [`clshim_claim_recorder_v1`];
//! at its first intercepted call a copy finds the first-loaded copy that exports it (in
//! the dynamic linker's list of loaded objects, which also holds copies a loader opened
//! `RTLD_LOCAL` as layers, where `dlsym(RTLD_DEFAULT)` would not look) and asks it, by an
//! atomic compare-exchange there, which copy records: the first to ask. Every other copy
//! forwards every call unchanged, with no policy and no state, as a nested call is
//! (`guard::enter` asks here). The claim's name and meaning never change, so copies of
//! different clshim versions agree too; when no copy can be found (a static build, an
//! internal failure), this copy records, as it did before copies knew of each other.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// The exported name every copy answers to; never to be reused for another meaning.
const CLAIM_SYMBOL: &[u8] = b"clshim_claim_recorder_v1\0";

/// In the first-loaded copy: the token of the copy that records (0 until one asked).
static RECORDER: AtomicUsize = AtomicUsize::new(0);

/// This copy's verdict, decided at its first intercepted call.
static VERDICT: AtomicU8 = AtomicU8::new(UNDECIDED);
const UNDECIDED: u8 = 0;
const RECORDS: u8 = 1;
const FORWARDS: u8 = 2;

type Claim = extern "C" fn(usize) -> usize;

/// Asked by every copy of the library, of the first-loaded one: `candidate` (a copy's
/// token, the address of one of its statics, unique among loaded objects) becomes the
/// recording copy unless another one already is; returns the recording copy's token.
#[no_mangle]
pub extern "C" fn clshim_claim_recorder_v1(candidate: usize) -> usize {
    match RECORDER.compare_exchange(0, candidate, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => candidate,
        Err(recorder) => recorder,
    }
}

/// Whether this copy records (and applies its policy); false: it forwards every call.
#[inline(always)]
pub fn this_copy_records() -> bool {
    match VERDICT.load(Ordering::Relaxed) {
        RECORDS => true,
        FORWARDS => false,
        _ => decide(),
    }
}

#[cold]
fn decide() -> bool {
    let me = &RECORDER as *const AtomicUsize as usize;
    // `guard` asks this module, so this module keeps its own panics in rather than
    // calling back up into `guard::catch`; a panic here means "no other copy found".
    let found = std::panic::catch_unwind(first_loaded_claim).ok().flatten();
    let recorder = match found {
        Some(claim) => claim(me),
        None => me,
    };
    let records = recorder == me;
    VERDICT.store(if records { RECORDS } else { FORWARDS }, Ordering::Relaxed);
    if !records {
        log::debug!("copies: another copy of clshim records in this process; this one forwards");
    }
    records
}

/// The claim function of the first loaded object that exports one (possibly this copy's).
fn first_loaded_claim() -> Option<Claim> {
    loaded_object_names().iter().find_map(|name| claim_of(name))
}

/// The claim function `name` (a loaded object) exports, if any. Opening with
/// `RTLD_NOLOAD` only finds an object already loaded, by the name it was loaded under;
/// the handle is closed again at once (every copy is linked `-z nodelete` on Linux, and
/// the object stays loaded by whoever loaded it).
fn claim_of(name: &std::ffi::CStr) -> Option<Claim> {
    // SAFETY: `name` is a NUL-terminated path; RTLD_NOLOAD loads nothing and runs no
    // constructor.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a handle dlopen just returned and a NUL-terminated symbol name.
    let sym = unsafe { libc::dlsym(handle, CLAIM_SYMBOL.as_ptr() as *const c_char) };
    // SAFETY: the handle dlopen returned, closed once; it only drops the count taken above.
    unsafe { libc::dlclose(handle) };
    if sym.is_null() {
        return None;
    }
    // SAFETY: every object exporting this name exports it with this signature.
    Some(unsafe { std::mem::transmute::<*mut c_void, Claim>(sym) })
}

/// The names of the loaded objects, in load order (the main program, which has no name
/// to open, left out).
#[cfg(not(target_vendor = "apple"))]
fn loaded_object_names() -> Vec<std::ffi::CString> {
    unsafe extern "C" fn add(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the vector `loaded_object_names` passed, alive for the call.
        let names = unsafe { &mut *(data as *mut Vec<std::ffi::CString>) };
        // SAFETY: the dynamic linker passes a valid `info` for the duration of the call.
        let name = unsafe { (*info).dlpi_name };
        // SAFETY: a non-NULL dlpi_name is a NUL-terminated string owned by the linker.
        if !name.is_null() && unsafe { *name } != 0 {
            // SAFETY: as above; copied at once.
            names.push(unsafe { std::ffi::CStr::from_ptr(name) }.to_owned());
        }
        0
    }
    let mut names: Vec<std::ffi::CString> = Vec::new();
    // SAFETY: `add` only reads what the linker passes and pushes onto `names`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(add), &mut names as *mut _ as *mut c_void) };
    names
}

#[cfg(target_vendor = "apple")]
fn loaded_object_names() -> Vec<std::ffi::CString> {
    // dyld's image list (<mach-o/dyld.h>, libSystem); the main program is image 0.
    extern "C" {
        fn _dyld_image_count() -> u32;
        fn _dyld_get_image_name(image_index: u32) -> *const c_char;
    }
    // SAFETY: takes no argument, reads dyld's count.
    let count = unsafe { _dyld_image_count() };
    (1..count)
        .filter_map(|i| {
            // SAFETY: an index below the count just read (NULL if the image went away).
            let name = unsafe { _dyld_get_image_name(i) };
            // SAFETY: a non-NULL name is a NUL-terminated path owned by dyld.
            (!name.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(name) }.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_claim_wins_and_later_ones_learn_it() {
        // A fresh arbiter (this test's own statics stand for the first-loaded copy).
        let first = clshim_claim_recorder_v1(0x1000);
        assert_eq!(clshim_claim_recorder_v1(0x2000), first);
        assert_eq!(clshim_claim_recorder_v1(first), first);
    }
}
