//! macOS: interposition of `OpenCL.framework` for applications that link it directly
//! (PyPI's pyopencl wheels, Xcode projects). The primary macOS route is layer mode
//! (`layer.rs`): conda-forge's Khronos loader loads `OPENCL_LAYERS`, which System
//! Integrity Protection does not strip, and pocl and Apple's wrapper ICD sit behind it.
//! This module is the second route, through `DYLD_INSERT_LIBRARIES`: a `__DATA,__interpose`
//! section tells dyld to bind every other image's calls to the framework's program
//! functions to clshim's (unexported) preload entry points, which forward to the
//! framework's own functions (dyld leaves the interposing image's own binds alone).
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

use crate::dispatch::{slot, Route};
use crate::preload;
use std::ffi::c_void;
use std::sync::OnceLock;

type AnyFn = unsafe extern "C" fn();

// Only addresses are taken: the real signatures live in cl.rs, and Route::entry gives
// each its type at the call. No #[link] attribute: build.rs links the framework weakly.
extern "C" {
    #[link_name = "clGetPlatformInfo"]
    fn real_get_platform_info();
    #[link_name = "clGetDeviceInfo"]
    fn real_get_device_info();
    #[link_name = "clGetContextInfo"]
    fn real_get_context_info();
    #[link_name = "clCreateProgramWithSource"]
    fn real_create_program_with_source();
    #[link_name = "clCreateProgramWithBinary"]
    fn real_create_program_with_binary();
    #[link_name = "clReleaseProgram"]
    fn real_release_program();
    #[link_name = "clBuildProgram"]
    fn real_build_program();
    #[link_name = "clGetProgramInfo"]
    fn real_get_program_info();
    #[link_name = "clGetProgramBuildInfo"]
    fn real_get_program_build_info();
    #[link_name = "clCompileProgram"]
    fn real_compile_program();
    #[link_name = "clLinkProgram"]
    fn real_link_program();
}

const LEN: usize = slot::CREATE_PROGRAM_WITH_IL;

/// The framework's functions as addresses (NULL where the weak import found nothing).
struct Table([usize; LEN]);

/// An import's address as bound by dyld. Read through a volatile load: the compiler
/// assumes a function's address is never NULL, and a weak import's can be, so a plain
/// read could let it fold away the NULL check in `Route::entry`.
fn bound(f: AnyFn) -> usize {
    let a = f as usize;
    // SAFETY: reads a local.
    unsafe { std::ptr::read_volatile(&a) }
}

static FRAMEWORK: OnceLock<Table> = OnceLock::new();

fn framework() -> &'static Table {
    FRAMEWORK.get_or_init(|| {
        let mut t = [0usize; LEN];
        t[slot::GET_PLATFORM_INFO] = bound(real_get_platform_info);
        t[slot::GET_DEVICE_INFO] = bound(real_get_device_info);
        t[slot::GET_CONTEXT_INFO] = bound(real_get_context_info);
        t[slot::CREATE_PROGRAM_WITH_SOURCE] = bound(real_create_program_with_source);
        t[slot::CREATE_PROGRAM_WITH_BINARY] = bound(real_create_program_with_binary);
        t[slot::RELEASE_PROGRAM] = bound(real_release_program);
        t[slot::BUILD_PROGRAM] = bound(real_build_program);
        t[slot::GET_PROGRAM_INFO] = bound(real_get_program_info);
        t[slot::GET_PROGRAM_BUILD_INFO] = bound(real_get_program_build_info);
        t[slot::COMPILE_PROGRAM] = bound(real_compile_program);
        t[slot::LINK_PROGRAM] = bound(real_link_program);
        Table(t)
    })
}

/// The route of every interposed call on macOS.
pub fn route() -> Route {
    Route::Symbols {
        table: framework().0.as_ptr() as *const *const c_void,
        len: LEN,
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

macro_rules! interpose {
    ($($ours:path => $real:ident),* $(,)?) => {
        [$(Interpose { replacement: $ours as *const c_void, original: $real as *const c_void }),*]
    };
}

#[used]
#[link_section = "__DATA,__interpose"]
static INTERPOSE: [Interpose; 8] = interpose![
    preload::clBuildProgram => real_build_program,
    preload::clCompileProgram => real_compile_program,
    preload::clLinkProgram => real_link_program,
    preload::clGetProgramInfo => real_get_program_info,
    preload::clGetProgramBuildInfo => real_get_program_build_info,
    preload::clCreateProgramWithBinary => real_create_program_with_binary,
    preload::clCreateProgramWithSource => real_create_program_with_source,
    preload::clReleaseProgram => real_release_program,
];
