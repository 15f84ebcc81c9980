//! macOS: interposition of `OpenCL.framework` for applications that link it directly
//! (PyPI's pyopencl wheels, Xcode projects). The primary macOS route is layer mode
//! (`layer.rs`): conda-forge's Khronos loader loads `OPENCL_LAYERS`, which System
//! Integrity Protection does not strip, and pocl and Apple's wrapper ICD sit behind it.
//! This module is the second route, through `DYLD_INSERT_LIBRARIES`: a `__DATA,__interpose`
//! section tells dyld to bind every other image's calls to the framework's program
//! functions to clshim's own (unexported) functions, one per interposed row of
//! `entry_points::table!`, which forward to the framework's own functions (dyld leaves
//! the interposing image's own binds alone); the same rows make the weak imports and the
//! tuples.
//! Apple's objects carry no ICD dispatch table, so those functions are laid out in a
//! table of the ICD shape and the forwarding logic is the one every other mode uses.
//!
//! The framework is *weakly* linked (`-weak_framework OpenCL`, set in build.rs): an
//! interpose tuple must name the replacee's address when dyld loads the image, so it has
//! to be an import, and a weak import lets the library load in any process even where
//! the framework is missing: dyld then binds the address to NULL, skips interpose
//! tuples whose replacee is NULL, and the forwarding table's NULL entries make a call
//! fail with the usual "no implementation" error instead of crashing. (A `dlopen`/`dlsym`
//! lookup cannot serve the interpose tuples, which dyld reads before any code runs; and
//! a flat-namespace `dynamic_lookup` could bind them to another library's `cl*`, such as
//! the Khronos loader's.) The framework's OpenCL 1.2 has no `clCreateProgramWithIL`, so
//! that one is not interposed. A call that reaches clshim through both routes (loader ->
//! layer -> Apple's wrapper ICD -> interposed framework call) is recorded once: the
//! inner arrival finds its thread already inside clshim and forwards unrecorded.
//! `scripts/check-macos` links this for both Mac architectures and checks the exports,
//! the interpose tuples and the load commands; it has not been run on a Mac.

use crate::dispatch::Route;
use std::ffi::c_void;
use std::sync::OnceLock;

/// The framework's functions, as weak imports (no #[link] attribute: build.rs links the
/// framework weakly) under their own names. Only addresses are taken: `Route`'s accessors
/// give each its signature at the call.
mod framework {
    macro_rules! imports {
        ($with:tt $($slot:literal => fn $name:ident $args:tt -> $ret:ty
            as $ty:ident, $acc:ident;)*) => {
            extern "C" {
                $(pub fn $name();)*
            }

            /// Each import's slot and its address as bound by dyld.
            pub fn addresses() -> impl Iterator<Item = (usize, usize)> {
                [$(($slot, super::bound($name))),*].into_iter()
            }

            /// One more than the highest slot imported: the length of the table.
            pub const LEN: usize = {
                let mut len = 0;
                $(if $slot + 1 > len { len = $slot + 1; })*
                len
            };
        };
    }
    crate::entry_points::table!(imported_on_macos => imports);
}

/// clshim's interposing functions: not exported, dyld reaches them through the
/// interpose tuples below.
mod interposers {
    use super::InterposeDoor;
    use crate::cl::*;
    use crate::intercept::door_functions;
    use std::ffi::{c_char, c_void};

    crate::entry_points::table!(interposed => door_functions { door: InterposeDoor });
}

/// This door, as a type (see [`Door`]): interposed calls go to the framework's functions.
pub struct InterposeDoor;

impl crate::dispatch::Door for InterposeDoor {
    #[inline(always)]
    fn route() -> Route {
        route()
    }
}

/// An import's address as bound by dyld. Read through a volatile load: the compiler
/// assumes a function's address is never NULL, and a weak import's can be, so a plain
/// read could let it fold away the NULL check in `Route`'s accessors.
fn bound(f: unsafe extern "C" fn()) -> usize {
    let a = f as usize;
    // SAFETY: reads a local.
    unsafe { std::ptr::read_volatile(&a) }
}

/// The framework's functions as addresses in their slots (NULL where the weak import
/// found nothing, and in every slot not imported).
struct Table([usize; framework::LEN]);

static TABLE: OnceLock<Table> = OnceLock::new();

fn forwarding_table() -> &'static Table {
    TABLE.get_or_init(|| {
        let mut t = [0usize; framework::LEN];
        for (slot, address) in framework::addresses() {
            t[slot] = address;
        }
        Table(t)
    })
}

/// The route of every interposed call on macOS.
fn route() -> Route {
    Route::Symbols {
        table: forwarding_table().0.as_ptr() as *const *const c_void,
        len: framework::LEN,
    }
}

/// One dyld interpose tuple: calls to `original` in other images go to `replacement`.
#[repr(C)]
struct Interpose {
    replacement: *const c_void,
    original: *const c_void,
}

// SAFETY: plain addresses, read only by dyld.
unsafe impl Sync for Interpose {}

/// Generates `INTERPOSE`, one tuple per interposed entry point.
macro_rules! interpose_tuples {
    ($with:tt $($slot:literal => fn $name:ident $args:tt -> $ret:ty
        as $ty:ident, $acc:ident;)*) => {
        #[used]
        #[link_section = "__DATA,__interpose"]
        static INTERPOSE: [Interpose; [$(stringify!($name)),*].len()] = [$(Interpose {
            replacement: interposers::$name as *const c_void,
            original: framework::$name as *const c_void,
        }),*];
    };
}
crate::entry_points::table!(interposed => interpose_tuples);
