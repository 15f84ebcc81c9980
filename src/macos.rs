//! macOS: `DYLD_INSERT_LIBRARIES=libclshim.so` interposition. Apple's OpenCL framework is
//! not an ICD: its objects carry no dispatch table to forward through. So the preload
//! entry points stay unexported here, a `__DATA,__interpose` section tells dyld to bind
//! every other image's calls to the framework's program functions to them, and they
//! forward to the framework's own functions, which dyld leaves bound as they are inside
//! the interposing library. The framework's functions sit in a table of the ICD layout,
//! so the forwarding logic is the one every other mode uses. Compiled only for macOS;
//! checked with `cargo check --target x86_64-apple-darwin`, not run on real hardware.
//! The framework's OpenCL 1.2 has no `clCreateProgramWithIL`, so that one is not
//! interposed. SIP strips `DYLD_*` variables for protected binaries (`/usr/bin/python3`).

use crate::dispatch::{slot, Route};
use crate::preload;
use std::ffi::c_void;

type AnyFn = unsafe extern "C" fn();

// Only addresses are taken: the real signatures live in cl.rs, and Route::entry gives
// each its type at the call.
#[link(name = "OpenCL", kind = "framework")]
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

struct Table([Option<AnyFn>; LEN]);

static FRAMEWORK: Table = {
    let mut t: [Option<AnyFn>; LEN] = [None; LEN];
    t[slot::GET_PLATFORM_INFO] = Some(real_get_platform_info as AnyFn);
    t[slot::GET_DEVICE_INFO] = Some(real_get_device_info as AnyFn);
    t[slot::GET_CONTEXT_INFO] = Some(real_get_context_info as AnyFn);
    t[slot::CREATE_PROGRAM_WITH_SOURCE] = Some(real_create_program_with_source as AnyFn);
    t[slot::CREATE_PROGRAM_WITH_BINARY] = Some(real_create_program_with_binary as AnyFn);
    t[slot::RELEASE_PROGRAM] = Some(real_release_program as AnyFn);
    t[slot::BUILD_PROGRAM] = Some(real_build_program as AnyFn);
    t[slot::GET_PROGRAM_INFO] = Some(real_get_program_info as AnyFn);
    t[slot::GET_PROGRAM_BUILD_INFO] = Some(real_get_program_build_info as AnyFn);
    t[slot::COMPILE_PROGRAM] = Some(real_compile_program as AnyFn);
    t[slot::LINK_PROGRAM] = Some(real_link_program as AnyFn);
    Table(t)
};

/// The route of every preloaded call on macOS.
pub fn route() -> Route {
    Route::Symbols {
        table: FRAMEWORK.0.as_ptr() as *const *const c_void,
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
static INTERPOSE: [Interpose; 7] = interpose![
    preload::clBuildProgram => real_build_program,
    preload::clCompileProgram => real_compile_program,
    preload::clLinkProgram => real_link_program,
    preload::clGetProgramInfo => real_get_program_info,
    preload::clCreateProgramWithBinary => real_create_program_with_binary,
    preload::clCreateProgramWithSource => real_create_program_with_source,
    preload::clReleaseProgram => real_release_program,
];
