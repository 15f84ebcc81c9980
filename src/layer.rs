//! Layer mode: the same library as an OpenCL loader layer (`OPENCL_LAYERS=libclshim.so`),
//! for applications that take their OpenCL functions from the loader with `dlsym` or run
//! where preloading is stripped, and the primary route on macOS (conda-forge's Khronos
//! loader). The loader hands `clInitLayer` (ocl-icd; the Khronos loader with
//! `OCL_ICD_FORCE_LEGACY_TERMINATION`) or `clInitLayerWithProperties` (current Khronos
//! loaders) its next dispatch table; clshim answers with a complete table of the size asked
//! for, a copy of the next one with its own functions in the program, kernel-creation and
//! kernel-launch slots (ocl-icd 2.3.1
//! does not fill empty slots), and forwards through the next table with the same logic as
//! preload mode. This module also owns the protocol's edges: a property list it does not
//! know is refused (the loader then runs without the layer, after one warning), and
//! `clDeinitLayer` (the Khronos loader calls it at unload, then `dlclose`s the layer) stops
//! forwarding through a table the loader is about to free, while clshim's records, which
//! are written as they happen, and its exit summary stay intact.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::app_args::{AppArray, AppBuffer, OutParam};
use crate::cl::*;
use crate::dispatch::{Door, Route};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// The next table's address and entry count. The first loader to initialise the layer
/// provides it (a loader's entries dispatch through the object, so they serve any
/// loader's objects); `clDeinitLayer` clears it. The count is stored before the address
/// and read after it.
static NEXT_TABLE: AtomicUsize = AtomicUsize::new(0);
static NEXT_LEN: AtomicUsize = AtomicUsize::new(0);

/// The next table's `clEnqueueNDRangeKernel` (0: none, or not initialised, or
/// deinitialised), set with the table: a launch already seen reads this one word, with
/// no bounds check and no announcement (which the slow path makes).
static NEXT_ND_RANGE: AtomicUsize = AtomicUsize::new(0);

/// Which entry point initialised the layer, for the debug line that names it.
static PROTOCOL: AtomicU8 = AtomicU8::new(0);
const BY_INIT_LAYER: u8 = 1;
const BY_INIT_LAYER_WITH_PROPERTIES: u8 = 2;
static ANNOUNCED: AtomicBool = AtomicBool::new(false);

fn route() -> Route {
    let table = NEXT_TABLE.load(Ordering::Acquire);
    let r = if table != 0 {
        Route::Next {
            table: table as *const *const c_void,
            len: NEXT_LEN.load(Ordering::Acquire),
        }
    } else {
        // Not initialised, or already deinitialised: a loader never calls layer entries
        // then, but if one did, the object's own table is still a correct place to go.
        Route::Object
    };
    if !ANNOUNCED.load(Ordering::Relaxed) {
        announce();
    }
    r
}

/// Once clshim's state (and so its logger) exists, which the first recorded call makes,
/// says at debug level which entry point the loader initialised the layer with. It never
/// makes that state itself: a call through the layer keeps its own rules for that.
#[cold]
fn announce() {
    if crate::runtime::existing().is_none() || ANNOUNCED.swap(true, Ordering::Relaxed) {
        return;
    }
    let by = match PROTOCOL.load(Ordering::Relaxed) {
        BY_INIT_LAYER => "clInitLayer",
        BY_INIT_LAYER_WITH_PROPERTIES => "clInitLayerWithProperties",
        _ => "no layer initialisation",
    };
    log::debug!(
        "layer: initialised by the loader through {by}, {} dispatch entries",
        NEXT_LEN.load(Ordering::Relaxed)
    );
}

#[no_mangle]
pub unsafe extern "C" fn clGetLayerInfo(
    param_name: cl_uint,
    param_value_size: usize,
    param_value: *mut c_void,
    param_value_size_ret: *mut usize,
) -> cl_int {
    const NAME: &[u8] = b"clshim: OpenCL build and binary-query timing\0";
    let version = CL_LAYER_API_VERSION_100.to_ne_bytes();
    let answer: &[u8] = match param_name {
        CL_LAYER_API_VERSION => &version,
        CL_LAYER_NAME => NAME,
        _ => return CL_INVALID_VALUE,
    };
    // SAFETY: the loader's `param_value` of `param_value_size` bytes and its
    // `param_value_size_ret`, each NULL or writable as the OpenCL API requires.
    let (value, size_ret) = unsafe {
        (
            AppBuffer::new(param_value, param_value_size),
            OutParam::new(param_value_size_ret),
        )
    };
    if !value.as_ptr().is_null() && !value.write(answer) {
        return CL_INVALID_VALUE; // too small for the answer
    }
    size_ret.set(answer.len());
    CL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn clInitLayer(
    num_entries: cl_uint,
    target_dispatch: *const *const c_void,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const *const c_void,
) -> cl_int {
    crate::guard::catch(|| {
        // SAFETY: the loader's arguments, as the layer protocol defines them (`init`'s
        // contract).
        unsafe {
            init(
                BY_INIT_LAYER,
                num_entries,
                target_dispatch,
                num_entries_ret,
                layer_dispatch_ret,
            )
        }
    })
    .unwrap_or(CL_OUT_OF_HOST_MEMORY)
}

/// The Khronos loader's newer entry. clshim knows no layer property (the list's only
/// defined element is its terminating 0), so a non-empty list is one from a newer
/// protocol than clshim's: it is refused with CL_INVALID_VALUE, which makes the loader
/// skip the layer, and one warning says the application runs without clshim.
#[no_mangle]
pub unsafe extern "C" fn clInitLayerWithProperties(
    num_entries: cl_uint,
    target_dispatch: *const *const c_void,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const *const c_void,
    properties: *const u64,
) -> cl_int {
    if !properties.is_null() {
        // SAFETY: a non-NULL property list ends with a 0, so it holds at least one element,
        // and the loader keeps it for the call.
        let first = unsafe { AppArray::new(properties, 1).at(0) };
        if first != 0 {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                crate::logger::stderr_line(&format!(
                    "clshim: the OpenCL loader initialised the layer with a property clshim does \
                 not know ({first:#x}); refusing, so this process runs without clshim"
                ));
            }
            return CL_INVALID_VALUE;
        }
    }
    crate::guard::catch(|| {
        // SAFETY: the loader's arguments, as the layer protocol defines them (`init`'s
        // contract).
        unsafe {
            init(
                BY_INIT_LAYER_WITH_PROPERTIES,
                num_entries,
                target_dispatch,
                num_entries_ret,
                layer_dispatch_ret,
            )
        }
    })
    .unwrap_or(CL_OUT_OF_HOST_MEMORY)
}

/// Answers the loader's initialisation with clshim's table.
///
/// # Safety
/// The loader's arguments: `target_dispatch` NULL or a table of `num_entries` entries that
/// the loader keeps until it unloads the layer; `num_entries_ret` and `layer_dispatch_ret`
/// NULL or writable.
unsafe fn init(
    by: u8,
    num_entries: cl_uint,
    target_dispatch: *const *const c_void,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const *const c_void,
) -> cl_int {
    crate::store::note_loader_start();
    if target_dispatch.is_null() || num_entries_ret.is_null() || layer_dispatch_ret.is_null() {
        return CL_INVALID_VALUE;
    }
    let n = num_entries as usize;
    #[cfg(target_os = "macos")]
    pin_in_memory();
    // The first loader's table serves every call; a second loader (two in one process)
    // gets the same functions.
    if NEXT_TABLE.load(Ordering::Acquire) == 0 {
        NEXT_LEN.store(n, Ordering::Release);
        NEXT_TABLE.store(target_dispatch as usize, Ordering::Release);
        let next = Route::Next {
            table: target_dispatch,
            len: n,
        };
        // SAFETY: the loader's table of `n` entries, which a Route::Next entry reads within
        // bounds (no object is needed to find it).
        let entry = unsafe { next.enqueue_nd_range_kernel(std::ptr::null_mut()) };
        NEXT_ND_RANGE.store(entry.map_or(0, |f| f as usize), Ordering::Release);
        PROTOCOL.store(by, Ordering::Relaxed);
    }
    // SAFETY: the loader's table of `num_entries` entries, non-NULL (checked above), read
    // during the call (this function's contract).
    let mut table = unsafe { AppArray::new(target_dispatch, n).read() };
    for &(i, f) in OWN_SLOTS {
        if i < n {
            table[i] = f;
        }
    }
    // SAFETY: the loader's out-parameters, non-NULL (checked above) and writable (this
    // function's contract).
    let (num_ret, table_ret) = unsafe {
        (
            OutParam::new(num_entries_ret),
            OutParam::new(layer_dispatch_ret),
        )
    };
    // The loader keeps the table until it unloads the layer; clshim never frees it, so a
    // late call through a copy of it still lands in code and data that exist.
    table_ret.set(Box::leak(table.into_boxed_slice()).as_ptr());
    num_ret.set(num_entries);
    CL_SUCCESS
}

/// macOS has no `-z nodelete`: the first initialisation takes a never-released reference
/// to this library with RTLD_NODELETE, so the loader's `dlclose` after `clDeinitLayer`
/// cannot unmap code the exit handlers and the handed-out table still point at.
#[cfg(target_os = "macos")]
fn pin_in_memory() {
    static PINNED: AtomicBool = AtomicBool::new(false);
    if PINNED.swap(true, Ordering::Relaxed) {
        return;
    }
    // SAFETY: Dl_info is plain C data (pointers and integers), for which all zeroes is a
    // valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: an address inside this library and a writable Dl_info to fill.
    let found = unsafe { libc::dladdr(clInitLayer as *const c_void, &mut info) } != 0;
    if found && !info.dli_fname.is_null() {
        // SAFETY: dli_fname is the NUL-terminated path dladdr just gave, owned by dyld and
        // used at once; NOLOAD only takes a reference to a library already loaded.
        unsafe {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            )
        };
    }
}

/// The Khronos loader calls this when it unloads (its destructor, at exit or when the
/// application `dlclose`s it), then frees its layer tables and `dlclose`s this library.
/// Records are already written as they happen and the exit summary comes from clshim's
/// own exit handler, so nothing is flushed here; clshim only stops forwarding through the
/// next table, which the loader may free (on Linux the library stays mapped by
/// `-z nodelete`, on macOS by `pin_in_memory`).
#[no_mangle]
pub unsafe extern "C" fn clDeinitLayer() -> cl_int {
    if !ANNOUNCED.load(Ordering::Relaxed) {
        announce();
    }
    NEXT_ND_RANGE.store(0, Ordering::Release);
    NEXT_TABLE.store(0, Ordering::Release);
    log::debug!("layer: clDeinitLayer: the loader is unloading the layer");
    CL_SUCCESS
}

/// The layer's functions for the intercepted entry points: not exported, the loader
/// reaches them through the table `init` hands it.
mod own {
    use super::Layer;
    use crate::cl::*;
    use crate::intercept::door_functions;
    use std::ffi::{c_char, c_void};

    crate::entry_points::table!(intercepted => door_functions { door: Layer });
}

/// This door, as a type (see [`Door`]): layer calls go to the loader's next table.
pub struct Layer;

impl Door for Layer {
    #[inline(always)]
    fn route() -> Route {
        route()
    }

    /// The preload door's table: a call a loader makes through a handle goes straight to
    /// the object's own dispatch, below every layer, as the loader's own dispatch does.
    #[cfg(not(target_os = "macos"))]
    fn program_handle_table() -> Option<*const *const c_void> {
        Some(crate::preload::program_handle_table())
    }

    #[inline(always)]
    unsafe fn nd_range_entry(_queue: cl_command_queue) -> Option<FnEnqueueNDRangeKernel> {
        match NEXT_ND_RANGE.load(Ordering::Acquire) {
            0 => None,
            // SAFETY: a non-NULL entry of the next table's clEnqueueNDRangeKernel slot,
            // stored by `init` from the slot's typed accessor.
            f => Some(unsafe { std::mem::transmute::<usize, FnEnqueueNDRangeKernel>(f) }),
        }
    }
}

/// Generates `OWN_SLOTS`: each intercepted entry point's slot and the layer's function for it.
macro_rules! own_slots {
    ($with:tt $($slot:literal => fn $name:ident $args:tt -> $ret:ty
        as $ty:ident, $acc:ident;)*) => {
        const OWN_SLOTS: &[(usize, *const c_void)] = &[$(($slot, own::$name as *const c_void)),*];
    };
}
crate::entry_points::table!(intercepted => own_slots);

#[cfg(test)]
mod tests {
    use super::*;

    /// The loader's memory need not be aligned for what clshim writes into it: every
    /// answer is written (and the property list read) through `app_args`, unaligned.
    #[test]
    fn the_loaders_memory_is_read_and_written_at_any_alignment() {
        let mut raw = [0u8; 64];
        let base = raw.as_mut_ptr();
        // SAFETY: every pointer below lies inside `raw`, one byte off alignment.
        unsafe {
            let value = base.add(1) as *mut c_void;
            let size_ret = base.add(9) as *mut usize;
            assert_eq!(
                clGetLayerInfo(CL_LAYER_API_VERSION, 4, value, size_ret),
                CL_SUCCESS
            );
            assert_eq!(size_ret.read_unaligned(), 4);
            assert_eq!(
                (value as *const cl_uint).read_unaligned(),
                CL_LAYER_API_VERSION_100
            );
            assert_eq!(
                clGetLayerInfo(CL_LAYER_NAME, 2, value, size_ret),
                CL_INVALID_VALUE
            );
            // The layer keeps the first table it is given: one that lives on.
            let table: &'static [*const c_void] = Box::leak(vec![std::ptr::null(); 4].into());
            let num_ret = base.add(17) as *mut cl_uint;
            let table_ret = base.add(25) as *mut *const *const c_void;
            let properties = base.add(41) as *mut u64;
            properties.write_unaligned(0x4242);
            assert_eq!(
                clInitLayerWithProperties(4, table.as_ptr(), num_ret, table_ret, properties),
                CL_INVALID_VALUE
            );
            properties.write_unaligned(0);
            assert_eq!(
                clInitLayerWithProperties(4, table.as_ptr(), num_ret, table_ret, properties),
                CL_SUCCESS
            );
            assert_eq!(num_ret.read_unaligned(), 4);
            assert!(!table_ret.read_unaligned().is_null());
        }
    }
}
