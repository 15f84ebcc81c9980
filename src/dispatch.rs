//! Where a forwarded call goes. In preload mode every call is forwarded through the ICD
//! dispatch table of the object it is made on (the table the object's first pointer names,
//! or, for cl_khr_icd 2.0 tagged objects, the table behind its second pointer); this works
//! whichever loader instance made the object, including the private one inside pyopencl's
//! wheels, where `dlsym(RTLD_NEXT)` finds nothing. In layer mode calls go to the next
//! table the loader handed to `clInitLayer`. On macOS, whose OpenCL objects have no
//! dispatch table, calls go to the framework's functions, gathered into a table of the
//! same shape. A `Route` names which applies, so the interception logic is the same for
//! every mode. Which slot holds which entry point, and with which type, comes from
//! `entry_points::table!`: a typed accessor per entry point (`route.get_program_info(obj)`)
//! is the only way to take one.

use crate::cl::*;
use std::ffi::c_void;

/// Where a door (preload, layer, macOS) finds its [`Route`], as a type: an entry point
/// generic over it passes nothing for it, so its slow path can take exactly the
/// application's arguments (and be reached with a jump).
pub trait Door {
    fn route() -> Route;

    /// The dispatch table of the program cache's handles when they are made through this
    /// door (`program_cache::handles`): the preload door's program entry points, which take
    /// a handle back and forward through the object's own table. None where handles are
    /// not made (macOS).
    fn program_handle_table() -> Option<*const *const c_void> {
        None
    }

    /// The implementation's `clEnqueueNDRangeKernel` for a launch already seen on `queue`:
    /// the route's entry, unless the door keeps it at hand (the layer does, so that the
    /// launch path reads one word and calls nothing).
    ///
    /// # Safety
    /// `queue` must be NULL or a live ICD object, with a table and (tagged) dispatch data
    /// that are not NULL: the queue of a launch the launch path found already seen, whose
    /// table gave its device.
    #[inline(always)]
    unsafe fn nd_range_entry(queue: cl_command_queue) -> Option<FnEnqueueNDRangeKernel> {
        // SAFETY: NULL or a live ICD object (this function's contract).
        unsafe { Self::route().enqueue_nd_range_kernel(queue) }
    }
}

/// How to reach the implementation below clshim for one call.
#[derive(Clone, Copy, Debug)]
pub enum Route {
    /// Preload mode: through the dispatch table of the object the call is made on.
    Object,
    /// Preload mode, on an object known to be a live ICD object with a table (a queue
    /// the launch path found among launches already seen, whose table gave its device):
    /// the table is read without checking it for NULL. Preload mode's only (not on macOS).
    #[cfg_attr(target_os = "macos", allow(dead_code))]
    LiveObject,
    /// Layer mode: through the loader's next table (`len` entries).
    Next {
        table: *const *const c_void,
        len: usize,
    },
    /// macOS interposition: the system framework's own functions, laid out in a table of
    /// the same shape, since its objects carry no ICD dispatch table. Made only on macOS.
    #[cfg_attr(not(target_os = "macos"), allow(dead_code))]
    Symbols {
        table: *const *const c_void,
        len: usize,
    },
}

/// The dispatch table of an ICD object, following cl_khr_icd 2.0's indirection when the
/// object's table is tagged. None for a NULL object or a NULL table.
///
/// # Safety
/// `obj` must be NULL or point to a live ICD object.
pub unsafe fn object_table(obj: Handle) -> Option<*const *const c_void> {
    if obj.is_null() {
        return None;
    }
    let words = obj as *const *const *const c_void;
    // SAFETY: a live ICD object starts with its dispatch table pointer (this function's
    // contract).
    let table = unsafe { *words };
    if table.is_null() {
        return None;
    }
    // SAFETY: a non-NULL dispatch table has at least its first entry (or the cl_khr_icd 2.0
    // tag in its place).
    if unsafe { *table } as usize == CL_ICD2_TAG_KHR {
        // Tagged: the loader-managed table sits at the start of the object's dispatch data.
        // SAFETY: a tagged object has its dispatch data pointer in its second word.
        let data = unsafe { *words.add(1) };
        return (!data.is_null()).then_some(data);
    }
    Some(table)
}

/// [`object_table`] of an object known to be a live ICD object whose table, and whose
/// dispatch data when tagged, are not NULL.
///
/// # Safety
/// `obj` must be such an object.
#[inline(always)]
unsafe fn live_object_table(obj: Handle) -> *const *const c_void {
    let words = obj as *const *const *const c_void;
    // SAFETY: a live ICD object starts with its (non-NULL) dispatch table pointer.
    let table = unsafe { *words };
    // SAFETY: the table has at least its first entry (or the cl_khr_icd 2.0 tag in its place).
    if unsafe { *table } as usize == CL_ICD2_TAG_KHR {
        // SAFETY: a tagged object has its (non-NULL) dispatch data pointer in its second word.
        return unsafe { *words.add(1) };
    }
    table
}

impl Route {
    /// The entry in `slot` that serves a call made on `obj`, or None when there is none
    /// (NULL object, or an implementation that leaves the slot empty). Private: only the
    /// accessors below, made from the table's rows, pair a slot with its type.
    ///
    /// # Safety
    /// `obj` must be NULL or a live ICD object; `F` must be the slot's function type.
    unsafe fn entry<F: Copy>(self, obj: Handle, slot: usize) -> Option<F> {
        debug_assert_eq!(
            std::mem::size_of::<F>(),
            std::mem::size_of::<*const c_void>()
        );
        let f = match self {
            Route::Object => {
                // SAFETY: NULL or a live ICD object (this function's contract).
                let table = unsafe { object_table(obj) }?;
                // SAFETY: an ICD dispatch table holds every slot of the ICD's table layout.
                unsafe { *table.add(slot) }
            }
            Route::LiveObject => {
                if obj.is_null() {
                    return None;
                }
                // SAFETY: a live ICD object with a table (this variant's promise, the
                // caller's to keep); slots as above.
                unsafe { *live_object_table(obj).add(slot) }
            }
            Route::Next { table, len } | Route::Symbols { table, len } => {
                if slot >= len {
                    return None;
                }
                // SAFETY: the table clshim was given (layer) or filled (symbols) holds `len`
                // entries, and slot < len.
                unsafe { *table.add(slot) }
            }
        };
        if f.is_null() {
            None
        } else {
            // SAFETY: a non-NULL entry of `slot`, whose function type `F` is (this
            // function's contract), of the same size as a pointer.
            Some(unsafe { std::mem::transmute_copy::<*const c_void, F>(&f) })
        }
    }

    pub fn mode_name(self) -> &'static str {
        match self {
            Route::Object | Route::LiveObject => "preload",
            Route::Next { .. } => "layer",
            Route::Symbols { .. } => "interpose",
        }
    }
}

/// Generates one typed accessor on `Route` per row of `entry_points::table!`.
macro_rules! accessors {
    ($with:tt $($slot:literal => fn $name:ident $args:tt -> $ret:ty
        as $ty:ident, $acc:ident;)*) => {
        impl Route {$(
            #[doc = concat!("The implementation's `", stringify!($name), "` for a call on `obj`.")]
            ///
            /// None for a NULL object, or an implementation that leaves the slot empty.
            ///
            /// # Safety
            /// `obj` must be NULL or a live ICD object.
            #[inline]
            // The warm step (not built for macOS) is the one user of a few.
            #[cfg_attr(target_os = "macos", allow(dead_code))]
            pub unsafe fn $acc(self, obj: Handle) -> Option<$ty> {
                // SAFETY: `obj` is NULL or a live ICD object (this function's contract); the
                // table's row that names this accessor pairs this slot with this type.
                unsafe { self.entry(obj, $slot) }
            }
        )*}
    };
}
crate::entry_points::table!(all => accessors);

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn marker() {}

    #[test]
    fn plain_and_tagged_objects_resolve_to_their_tables() {
        let real: [*const c_void; 4] = [
            std::ptr::null(),
            marker as *const c_void,
            std::ptr::null(),
            std::ptr::null(),
        ];
        // A plain object: its first word points at the table.
        let plain: [*const c_void; 1] = [real.as_ptr() as *const c_void];
        // A cl_khr_icd 2.0 object: first word points at a tagged table, second at the real one.
        let tagged_table: [*const c_void; 4] = [
            CL_ICD2_TAG_KHR as *const c_void,
            std::ptr::null(),
            std::ptr::null(),
            std::ptr::null(),
        ];
        let tagged: [*const c_void; 2] = [
            tagged_table.as_ptr() as *const c_void,
            real.as_ptr() as *const c_void,
        ];
        // SAFETY: both objects point to a first word that is a table of the tested shape.
        unsafe {
            for obj in [plain.as_ptr() as Handle, tagged.as_ptr() as Handle] {
                assert_eq!(object_table(obj), Some(real.as_ptr()));
                let f: Option<unsafe extern "C" fn()> = Route::Object.entry(obj, 1);
                assert_eq!(f.map(|f| f as usize), Some(marker as *const () as usize));
                let empty: Option<unsafe extern "C" fn()> = Route::Object.entry(obj, 2);
                assert!(empty.is_none());
            }
            assert!(object_table(std::ptr::null_mut()).is_none());
            let next = Route::Next {
                table: real.as_ptr(),
                len: 4,
            };
            let f: Option<unsafe extern "C" fn()> = next.entry(std::ptr::null_mut(), 1);
            assert!(f.is_some());
            let beyond: Option<unsafe extern "C" fn()> = next.entry(std::ptr::null_mut(), 9);
            assert!(beyond.is_none());
        }
    }
}
