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
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        const NAME: &[u8] = b"clshim: OpenCL build and binary-query timing\0";
        let (src, len): (*const u8, usize) = match param_name {
            CL_LAYER_API_VERSION => (&CL_LAYER_API_VERSION_100 as *const cl_uint as *const u8, 4),
            CL_LAYER_NAME => (NAME.as_ptr(), NAME.len()),
            _ => return CL_INVALID_VALUE,
        };
        if !param_value.is_null() {
            if param_value_size < len {
                return CL_INVALID_VALUE;
            }
            std::ptr::copy_nonoverlapping(src, param_value as *mut u8, len);
        }
        if !param_value_size_ret.is_null() {
            *param_value_size_ret = len;
        }
        CL_SUCCESS
    }
}

#[no_mangle]
pub unsafe extern "C" fn clInitLayer(
    num_entries: cl_uint,
    target_dispatch: *const *const c_void,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const *const c_void,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        crate::guard::catch(|| {
            init(
                BY_INIT_LAYER,
                num_entries,
                target_dispatch,
                num_entries_ret,
                layer_dispatch_ret,
            )
        })
        .unwrap_or(CL_OUT_OF_HOST_MEMORY)
    }
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
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        if !properties.is_null() && *properties != 0 {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                crate::logger::stderr_line(&format!(
                    "clshim: the OpenCL loader initialised the layer with a property clshim does \
                 not know ({:#x}); refusing, so this process runs without clshim",
                    *properties
                ));
            }
            return CL_INVALID_VALUE;
        }
        crate::guard::catch(|| {
            init(
                BY_INIT_LAYER_WITH_PROPERTIES,
                num_entries,
                target_dispatch,
                num_entries_ret,
                layer_dispatch_ret,
            )
        })
        .unwrap_or(CL_OUT_OF_HOST_MEMORY)
    }
}

unsafe fn init(
    by: u8,
    num_entries: cl_uint,
    target_dispatch: *const *const c_void,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const *const c_void,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
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
            // The loader's table of `n` entries, which a Route::Next entry reads within
            // bounds (no object is needed to find it).
            let entry = next.enqueue_nd_range_kernel(std::ptr::null_mut());
            NEXT_ND_RANGE.store(entry.map_or(0, |f| f as usize), Ordering::Release);
            PROTOCOL.store(by, Ordering::Relaxed);
        }
        let mut table: Vec<*const c_void> = std::slice::from_raw_parts(target_dispatch, n).to_vec();
        for &(i, f) in OWN_SLOTS {
            if i < n {
                table[i] = f;
            }
        }
        // The loader keeps the table until it unloads the layer; clshim never frees it, so a
        // late call through a copy of it still lands in code and data that exist.
        *layer_dispatch_ret = Box::leak(table.into_boxed_slice()).as_ptr();
        *num_entries_ret = num_entries;
        CL_SUCCESS
    }
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
    // SAFETY: dladdr fills `info` for an address inside this library; dli_fname is a
    // NUL-terminated path owned by dyld, used at once.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(clInitLayer as *const c_void, &mut info) != 0 && !info.dli_fname.is_null() {
            libc::dlopen(
                info.dli_fname,
                libc::RTLD_LAZY | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
            );
        }
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
