//! Preload mode: the OpenCL entry points that `LD_PRELOAD` puts in front of the loader,
//! one per intercepted row of `entry_points::table!`, exported under the OpenCL names.
//! Each only names its route (the object's own dispatch table) and hands over to
//! `intercept`. Not built on macOS, whose framework objects carry no dispatch table:
//! `macos.rs` makes that platform's interposing functions.

use crate::cl::*;
use crate::dispatch::{Door, Route};
use crate::intercept::door_functions;
use std::ffi::{c_char, c_void};

crate::entry_points::table!(intercepted => door_functions { #[no_mangle] door: Preload });

/// This door, as a type (see [`Door`]): every preloaded call goes through the dispatch
/// table of the object it is made on.
pub struct Preload;

impl Door for Preload {
    #[inline(always)]
    fn route() -> Route {
        Route::Object
    }

    /// A launch already seen is on a queue whose dispatch table gave its device: a live
    /// object with a table, read without the checks a call on an unknown object needs.
    #[inline(always)]
    unsafe fn nd_range_entry(queue: cl_command_queue) -> Option<FnEnqueueNDRangeKernel> {
        // SAFETY: a queue of a launch already seen (this function's contract, `Door`'s).
        unsafe { Route::LiveObject.enqueue_nd_range_kernel(queue) }
    }

    fn program_handle_table() -> Option<*const *const c_void> {
        Some(program_handle_table())
    }
}

/// The slots of the program cache handles' dispatch table: every program entry point of
/// the ICD table (`clSetProgramSpecializationConstant` is the last, at 145).
const HANDLE_TABLE_LEN: usize = 150;

/// The dispatch table of the program cache's handles, in every door: this door's program
/// entry points (a call that reaches one through a handle is taken back and forwarded
/// through the driver's own table); every other slot is empty, since loaders call through
/// a program only its program entry points.
pub fn program_handle_table() -> *const *const c_void {
    struct Table([*const c_void; HANDLE_TABLE_LEN]);
    // SAFETY: a table of function addresses, written once and never changed.
    unsafe impl Sync for Table {}
    // SAFETY: as above.
    unsafe impl Send for Table {}
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [std::ptr::null::<c_void>(); HANDLE_TABLE_LEN];
        t[28] = clRetainProgram as *const c_void;
        t[29] = clReleaseProgram as *const c_void;
        t[30] = clBuildProgram as *const c_void;
        t[32] = clGetProgramInfo as *const c_void;
        t[33] = clGetProgramBuildInfo as *const c_void;
        t[34] = clCreateKernel as *const c_void;
        t[35] = clCreateKernelsInProgram as *const c_void;
        t[98] = clCompileProgram as *const c_void;
        t[144] = clSetProgramReleaseCallback as *const c_void;
        t[145] = clSetProgramSpecializationConstant as *const c_void;
        Table(t)
    });
    t.0.as_ptr()
}
