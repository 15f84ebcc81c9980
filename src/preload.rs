//! Preload mode: the OpenCL entry points that `LD_PRELOAD` puts in front of the loader,
//! one per intercepted row of `entry_points::table!`, exported under the OpenCL names.
//! Each only names its route (the object's own dispatch table) and hands over to
//! `intercept`. Not built on macOS, whose framework objects carry no dispatch table:
//! `macos.rs` makes that platform's interposing functions.

use crate::cl::*;
use crate::dispatch::Route;
use crate::intercept::door_functions;
use std::ffi::{c_char, c_void};

crate::entry_points::table!(intercepted => door_functions { #[no_mangle] route: Route::Object });
