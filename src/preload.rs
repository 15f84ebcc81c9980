//! Preload mode: the OpenCL program entry points that `LD_PRELOAD` puts in front of the
//! loader. Each one only names its route (the object's own dispatch table) and hands over
//! to `intercept`. On macOS the same functions are registered in a `__DATA,__interpose`
//! section for `DYLD_INSERT_LIBRARIES` (compiled only there, and untested on real hardware).
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::cl::*;
use crate::dispatch::Route;
use crate::intercept;
use std::ffi::{c_char, c_void};

#[no_mangle]
pub unsafe extern "C" fn clBuildProgram(
    program: cl_program,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
) -> cl_int {
    intercept::build_program(
        Route::Object,
        program,
        num_devices,
        device_list,
        options,
        pfn_notify,
        user_data,
    )
}

#[no_mangle]
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
    intercept::compile_program(
        Route::Object,
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

#[no_mangle]
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
    intercept::link_program(
        Route::Object,
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

#[no_mangle]
pub unsafe extern "C" fn clGetProgramInfo(
    program: cl_program,
    param_name: cl_program_info,
    param_value_size: usize,
    param_value: *mut c_void,
    param_value_size_ret: *mut usize,
) -> cl_int {
    intercept::get_program_info(
        Route::Object,
        program,
        param_name,
        param_value_size,
        param_value,
        param_value_size_ret,
    )
}

#[no_mangle]
pub unsafe extern "C" fn clCreateProgramWithBinary(
    context: cl_context,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut cl_int,
    errcode_ret: *mut cl_int,
) -> cl_program {
    intercept::create_program_with_binary(
        Route::Object,
        context,
        num_devices,
        device_list,
        lengths,
        binaries,
        binary_status,
        errcode_ret,
    )
}

#[no_mangle]
pub unsafe extern "C" fn clCreateProgramWithSource(
    context: cl_context,
    count: cl_uint,
    strings: *const *const c_char,
    lengths: *const usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    intercept::create_program_with_source(
        Route::Object,
        context,
        count,
        strings,
        lengths,
        errcode_ret,
    )
}

#[no_mangle]
pub unsafe extern "C" fn clCreateProgramWithIL(
    context: cl_context,
    il: *const c_void,
    length: usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    intercept::create_program_with_il(Route::Object, context, il, length, errcode_ret)
}

#[no_mangle]
pub unsafe extern "C" fn clReleaseProgram(program: cl_program) -> cl_int {
    intercept::release_program(Route::Object, program)
}
