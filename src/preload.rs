//! Preload mode: the OpenCL program entry points that `LD_PRELOAD` puts in front of the
//! loader. Each one only names its route (the object's own dispatch table) and hands over
//! to `intercept`. On Linux they are exported under the OpenCL names, so LD_PRELOAD puts
//! them first; on macOS they stay unexported and `macos.rs` lists them in the
//! `__DATA,__interpose` section that `DYLD_INSERT_LIBRARIES` reads.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::cl::*;
use crate::dispatch::{Door, Route};
use crate::intercept;

/// Where preloaded calls go: each object's own dispatch table (ICD platforms) ...
#[cfg(not(target_os = "macos"))]
#[inline(always)]
fn route() -> Route {
    Route::Object
}

/// ... or, on macOS, the framework's functions.
#[cfg(target_os = "macos")]
#[inline(always)]
fn route() -> Route {
    crate::macos::route()
}
use std::ffi::{c_char, c_void};

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clBuildProgram(
    program: cl_program,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::build_program(
            route(),
            program,
            num_devices,
            device_list,
            options,
            pfn_notify,
            user_data,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clCompileProgram(
    program: cl_program,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    num_input_headers: cl_uint,
    input_headers: *const cl_program,
    header_include_names: *const *const c_char,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::compile_program(
            route(),
            program,
            num_devices,
            device_list,
            options,
            num_input_headers,
            input_headers,
            header_include_names,
            pfn_notify,
            user_data,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clLinkProgram(
    context: cl_context,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    num_input_programs: cl_uint,
    input_programs: *const cl_program,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::link_program(
            route(),
            context,
            num_devices,
            device_list,
            options,
            num_input_programs,
            input_programs,
            pfn_notify,
            user_data,
            errcode_ret,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clGetProgramInfo(
    program: cl_program,
    param_name: cl_program_info,
    param_value_size: usize,
    param_value: *mut c_void,
    param_value_size_ret: *mut usize,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::get_program_info(
            route(),
            program,
            param_name,
            param_value_size,
            param_value,
            param_value_size_ret,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clGetProgramBuildInfo(
    program: cl_program,
    device: cl_device_id,
    param_name: cl_program_build_info,
    param_value_size: usize,
    param_value: *mut c_void,
    param_value_size_ret: *mut usize,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::get_program_build_info(
            route(),
            program,
            device,
            param_name,
            param_value_size,
            param_value,
            param_value_size_ret,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clCreateProgramWithBinary(
    context: cl_context,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut cl_int,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::create_program_with_binary(
            route(),
            context,
            num_devices,
            device_list,
            lengths,
            binaries,
            binary_status,
            errcode_ret,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clCreateProgramWithSource(
    context: cl_context,
    count: cl_uint,
    strings: *const *const c_char,
    lengths: *const usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::create_program_with_source(
            route(),
            context,
            count,
            strings,
            lengths,
            errcode_ret,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clCreateProgramWithIL(
    context: cl_context,
    il: *const c_void,
    length: usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe { intercept::create_program_with_il(route(), context, il, length, errcode_ret) }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clReleaseProgram(program: cl_program) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe { intercept::release_program(route(), program) }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clReleaseCommandQueue(command_queue: cl_command_queue) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe { intercept::release_command_queue(route(), command_queue) }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clEnqueueNDRangeKernel(
    queue: cl_command_queue,
    kernel: cl_kernel,
    work_dim: cl_uint,
    global_work_offset: *const usize,
    global_work_size: *const usize,
    local_work_size: *const usize,
    num_events_in_wait_list: cl_uint,
    event_wait_list: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::enqueue_nd_range_kernel::<Preload>(
            queue,
            kernel,
            work_dim,
            global_work_offset,
            global_work_size,
            local_work_size,
            num_events_in_wait_list,
            event_wait_list,
            event,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clEnqueueTask(
    queue: cl_command_queue,
    kernel: cl_kernel,
    num_events_in_wait_list: cl_uint,
    event_wait_list: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::enqueue_task(
            route(),
            queue,
            kernel,
            num_events_in_wait_list,
            event_wait_list,
            event,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clCreateKernel(
    program: cl_program,
    kernel_name: *const c_char,
    errcode_ret: *mut cl_int,
) -> cl_kernel {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe { intercept::create_kernel(route(), program, kernel_name, errcode_ret) }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clCreateKernelsInProgram(
    program: cl_program,
    num_kernels: cl_uint,
    kernels: *mut cl_kernel,
    num_kernels_ret: *mut cl_uint,
) -> cl_int {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe {
        intercept::create_kernels_in_program(
            route(),
            program,
            num_kernels,
            kernels,
            num_kernels_ret,
        )
    }
}

#[cfg_attr(not(target_os = "macos"), no_mangle)]
pub unsafe extern "C" fn clCloneKernel(
    source_kernel: cl_kernel,
    errcode_ret: *mut cl_int,
) -> cl_kernel {
    // SAFETY: the application's arguments, valid as the OpenCL API requires of it; passed
    // on to `intercept`, which reads no more than the implementation would.
    unsafe { intercept::clone_kernel(route(), source_kernel, errcode_ret) }
}

/// This door, as a type (see [`Door`]).
pub struct Preload;

impl Door for Preload {
    #[inline(always)]
    fn route() -> Route {
        route()
    }
}
