//! Small typed questions clshim asks the implementation about a program, through the same
//! route as the call being intercepted: its devices, kernel names, source, build status and
//! reference count. Each returns None rather than failing the application's call.

use crate::cl::*;
use crate::dispatch::Route;
use std::ffi::c_void;

/// The answer to one `clGet*Info(obj, param, ...)` query: asks for the size, then the
/// value. None if either call fails or the size is beyond reason (a broken driver must
/// not make clshim allocate without bound).
///
/// # Safety
/// `query` must be the implementation's info function for objects like `obj`.
pub unsafe fn info_bytes<H: Copy>(
    query: unsafe extern "C" fn(H, cl_uint, usize, *mut c_void, *mut usize) -> cl_int,
    obj: H,
    param: cl_uint,
) -> Option<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: the implementation's info function for `obj` (this function's contract),
    // asked for the size only, into a local.
    let ret = unsafe { query(obj, param, 0, std::ptr::null_mut(), &mut size) };
    if ret != CL_SUCCESS || size > 1 << 30 {
        return None;
    }
    let mut buf = vec![0u8; size];
    if size > 0 {
        // SAFETY: as above, with a buffer of the size it gave.
        let ret = unsafe {
            query(
                obj,
                param,
                size,
                buf.as_mut_ptr() as *mut c_void,
                std::ptr::null_mut(),
            )
        };
        if ret != CL_SUCCESS {
            return None;
        }
    }
    Some(buf)
}

unsafe fn info(route: Route, program: cl_program, param: cl_program_info) -> Option<Vec<u8>> {
    // SAFETY: `program` is a live program reachable through `route`, as every caller of
    // this private helper holds.
    let f = unsafe { route.get_program_info(program) }?;
    // SAFETY: the program's own clGetProgramInfo.
    unsafe { info_bytes(f, program, param) }
}

/// Handles packed in an info answer.
fn handles(bytes: &[u8]) -> Vec<Handle> {
    let w = std::mem::size_of::<usize>();
    bytes
        .chunks_exact(w)
        .map(|c| usize::from_ne_bytes(c.try_into().unwrap()) as Handle)
        .collect()
}

/// The program's devices, in the order binary queries report them.
///
/// # Safety
/// `program` must be a live program reachable through `route`.
pub unsafe fn devices(route: Route, program: cl_program) -> Option<Vec<cl_device_id>> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    unsafe { Some(handles(&info(route, program, CL_PROGRAM_DEVICES)?)) }
}

/// The devices of `context`.
///
/// # Safety
/// `context` must be a live context reachable through `route`.
pub unsafe fn context_devices(route: Route, context: cl_context) -> Option<Vec<cl_device_id>> {
    // SAFETY: a live context reachable through `route` (this function's contract).
    let f = unsafe { route.get_context_info(context) }?;
    // SAFETY: the context's own clGetContextInfo.
    Some(handles(&unsafe {
        info_bytes(f, context, CL_CONTEXT_DEVICES)
    }?))
}

/// The program's source text (empty for programs not made from source).
///
/// # Safety
/// As for [`devices`].
pub unsafe fn source(route: Route, program: cl_program) -> Option<Vec<u8>> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    let mut bytes = unsafe { info(route, program, CL_PROGRAM_SOURCE) }?;
    // The answer is NUL-terminated; the source is what precedes the terminator.
    if let Some(end) = bytes.iter().position(|&b| b == 0) {
        bytes.truncate(end);
    }
    Some(bytes)
}

/// The IL a program was made from (None or empty when it was not made from IL).
///
/// # Safety
/// As for [`devices`].
pub unsafe fn il(route: Route, program: cl_program) -> Option<Vec<u8>> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    unsafe { info(route, program, CL_PROGRAM_IL) }
}

/// The kernel names of a built program.
///
/// # Safety
/// As for [`devices`].
pub unsafe fn kernel_names(route: Route, program: cl_program) -> Vec<String> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    let Some(bytes) = (unsafe { info(route, program, CL_PROGRAM_KERNEL_NAMES) }) else {
        return Vec::new();
    };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end])
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The program's binary type for `device` (`CL_PROGRAM_BINARY_TYPE_*`).
///
/// # Safety
/// As for [`devices`]; `device` must be one of the program's devices.
pub unsafe fn binary_type(
    route: Route,
    program: cl_program,
    device: cl_device_id,
) -> Option<cl_uint> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    let f = unsafe { route.get_program_build_info(program) }?;
    let mut t: cl_uint = 0;
    // SAFETY: the program's own entry, one of its devices (this function's contract), and a
    // local of the size given.
    let ret = unsafe {
        f(
            program,
            device,
            CL_PROGRAM_BINARY_TYPE,
            std::mem::size_of::<cl_uint>(),
            &mut t as *mut _ as *mut c_void,
            std::ptr::null_mut(),
        )
    };
    (ret == CL_SUCCESS).then_some(t)
}

/// Whether the program was built successfully for `device`.
///
/// # Safety
/// As for [`devices`]; `device` must be one of the program's devices.
pub unsafe fn built_for(route: Route, program: cl_program, device: cl_device_id) -> bool {
    // SAFETY: a live program reachable through `route` (this function's contract).
    let Some(f) = (unsafe { route.get_program_build_info(program) }) else {
        return false;
    };
    let mut status: cl_build_status = CL_BUILD_NONE;
    // SAFETY: the program's own entry, one of its devices (this function's contract), and a
    // local of the size given.
    let ret = unsafe {
        f(
            program,
            device,
            CL_PROGRAM_BUILD_STATUS,
            std::mem::size_of::<cl_build_status>(),
            &mut status as *mut _ as *mut c_void,
            std::ptr::null_mut(),
        )
    };
    ret == CL_SUCCESS && status == CL_BUILD_SUCCESS
}

/// The program's build log for `device`.
///
/// # Safety
/// As for [`devices`]; `device` must be one of the program's devices.
pub unsafe fn build_log(
    route: Route,
    program: cl_program,
    device: cl_device_id,
) -> Option<Vec<u8>> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    let f = unsafe { route.get_program_build_info(program) }?;
    let per_device = |program, param, size, value, size_ret| {
        // SAFETY: the program's own entry and one of its devices (this function's
        // contract), with the buffer `info_bytes` gives.
        unsafe { f(program, device, param, size, value, size_ret) }
    };
    let mut size = 0usize;
    if per_device(
        program,
        CL_PROGRAM_BUILD_LOG,
        0,
        std::ptr::null_mut(),
        &mut size,
    ) != CL_SUCCESS
        || size > 1 << 24
    {
        return None;
    }
    let mut buf = vec![0u8; size];
    let ret = per_device(
        program,
        CL_PROGRAM_BUILD_LOG,
        size,
        buf.as_mut_ptr() as *mut c_void,
        std::ptr::null_mut(),
    );
    (ret == CL_SUCCESS).then_some(buf)
}

/// The program's reference count (the specification calls it a hint, which is all
/// clshim needs to tell a last release).
///
/// # Safety
/// As for [`devices`].
pub unsafe fn reference_count(route: Route, program: cl_program) -> Option<cl_uint> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    let bytes = unsafe { info(route, program, CL_PROGRAM_REFERENCE_COUNT) }?;
    Some(cl_uint::from_ne_bytes(bytes.get(..4)?.try_into().ok()?))
}

/// The kernel's name and program, asked of the implementation.
///
/// # Safety
/// `kernel` must be a live kernel reachable through `route`.
pub unsafe fn kernel_facts(
    route: Route,
    kernel: cl_kernel,
) -> (Option<String>, Option<cl_program>) {
    // SAFETY: a live kernel reachable through `route` (this function's contract).
    let Some(f) = (unsafe { route.get_kernel_info(kernel) }) else {
        return (None, None);
    };
    // SAFETY: the kernel's own clGetKernelInfo.
    let name = unsafe { info_bytes(f, kernel, CL_KERNEL_FUNCTION_NAME) }.map(|b| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    });
    // SAFETY: as above (a handle's bytes, not text: they may hold a zero).
    let program = unsafe { info_bytes(f, kernel, CL_KERNEL_PROGRAM) }.and_then(|b| {
        let w = std::mem::size_of::<usize>();
        let p = usize::from_ne_bytes(b.get(..w)?.try_into().ok()?);
        (p != 0).then_some(p as cl_program)
    });
    (name, program)
}

#[cfg(not(target_os = "macos"))]
/// A kernel's answer to `param` as text: what precedes its NUL.
///
/// # Safety
/// `kernel` must be a live kernel reachable through `route`.
pub unsafe fn kernel_text(route: Route, kernel: cl_kernel, param: cl_uint) -> Option<Vec<u8>> {
    // SAFETY: a live kernel reachable through `route` (this function's contract).
    let f = unsafe { route.get_kernel_info(kernel) }?;
    // SAFETY: the kernel's own clGetKernelInfo.
    let mut bytes = unsafe { info_bytes(f, kernel, param) }?;
    if let Some(end) = bytes.iter().position(|&b| b == 0) {
        bytes.truncate(end);
    }
    Some(bytes)
}

#[cfg(not(target_os = "macos"))]
/// Each kernel of a built program with its `CL_KERNEL_ATTRIBUTES`, for those the driver
/// answers.
///
/// # Safety
/// As for [`devices`]; the program is built.
pub unsafe fn kernel_attributes(route: Route, program: cl_program) -> Vec<(Vec<u8>, Vec<u8>)> {
    // SAFETY: a live program reachable through `route` (this function's contract).
    let (Some(create), names) = (unsafe { route.create_kernel(program) }, unsafe {
        kernel_names(route, program)
    }) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let Ok(c_name) = std::ffi::CString::new(name) else {
            continue;
        };
        let mut err = CL_SUCCESS;
        // SAFETY: the built program's own entry, a NUL-terminated name and a local status.
        let kernel = unsafe { create(program, c_name.as_ptr(), &mut err) };
        if kernel.is_null() {
            continue;
        }
        // SAFETY: the live kernel just made.
        if let Some(attrs) = unsafe { kernel_text(route, kernel, CL_KERNEL_ATTRIBUTES) } {
            out.push((c_name.into_bytes(), attrs));
        }
        // SAFETY: releasing the kernel made above, through its own entry.
        if let Some(release) = unsafe { route.release_kernel(kernel) } {
            // SAFETY: as above.
            unsafe { release(kernel) };
        }
    }
    out
}
