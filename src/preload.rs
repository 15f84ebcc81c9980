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
}
