//! Layer mode: the same library as an OpenCL loader layer (`OPENCL_LAYERS=libclshim.so`),
//! for applications that take their OpenCL functions from the loader with `dlsym` or run
//! where preloading is stripped. The loader hands `clInitLayer` its next dispatch table;
//! clshim answers with a complete table of the size asked for, a copy of the next one with
//! its own functions in the program, kernel-creation and kernel-launch slots (ocl-icd 2.3.1
//! does not fill empty slots), and forwards through the next table with the same logic as
//! preload mode.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use crate::cl::*;
use crate::dispatch::{slot, Route};
use crate::intercept;
use std::ffi::{c_char, c_void};
use std::sync::OnceLock;

/// The next table: (address, entries). The first loader to initialise the layer provides
/// it; a loader's entries dispatch through the object, so they serve any loader's objects.
static NEXT: OnceLock<(usize, usize)> = OnceLock::new();

fn route() -> Route {
    match NEXT.get() {
        Some(&(table, len)) => Route::Next {
            table: table as *const *const c_void,
            len,
        },
        // Not initialised: a loader never calls layer entries before clInitLayer, but if one
        // did, the object's own table is still a correct place to forward to.
        None => Route::Object,
    }
}

#[no_mangle]
pub unsafe extern "C" fn clGetLayerInfo(
    param_name: cl_uint,
    param_value_size: usize,
    param_value: *mut c_void,
    param_value_size_ret: *mut usize,
) -> cl_int {
    const NAME: &[u8] = b"clshim: OpenCL build and binary-query timing\0";
    let (src, len): (*const u8, usize) = match param_name {
        CL_LAYER_API_VERSION => (&CL_LAYER_API_VERSION_100 as *const cl_uint as *const u8, 4),
        CL_LAYER_NAME => (NAME.as_ptr(), NAME.len()),
        _ => return CL_INVALID_VALUE,
    };
    if !param_value.is_null() {
        if param_value_size < len {
            return CL_INVALID_VALUE;
        }
        std::ptr::copy_nonoverlapping(src, param_value as *mut u8, len);
    }
    if !param_value_size_ret.is_null() {
        *param_value_size_ret = len;
    }
    CL_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn clInitLayer(
    num_entries: cl_uint,
    target_dispatch: *const *const c_void,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const *const c_void,
) -> cl_int {
    if target_dispatch.is_null() || num_entries_ret.is_null() || layer_dispatch_ret.is_null() {
        return CL_INVALID_VALUE;
    }
    let n = num_entries as usize;
    NEXT.get_or_init(|| (target_dispatch as usize, n));
    let mut table: Vec<*const c_void> = std::slice::from_raw_parts(target_dispatch, n).to_vec();
    let ours: [(usize, *const c_void); 8] = [
        (
            slot::CREATE_PROGRAM_WITH_SOURCE,
            layer_clCreateProgramWithSource as *const c_void,
        ),
        (
            slot::CREATE_PROGRAM_WITH_BINARY,
            layer_clCreateProgramWithBinary as *const c_void,
        ),
        (
            slot::RELEASE_PROGRAM,
            layer_clReleaseProgram as *const c_void,
        ),
        (slot::BUILD_PROGRAM, layer_clBuildProgram as *const c_void),
        (
            slot::GET_PROGRAM_INFO,
            layer_clGetProgramInfo as *const c_void,
        ),
        (
            slot::COMPILE_PROGRAM,
            layer_clCompileProgram as *const c_void,
        ),
        (slot::LINK_PROGRAM, layer_clLinkProgram as *const c_void),
        (
            slot::CREATE_PROGRAM_WITH_IL,
            layer_clCreateProgramWithIL as *const c_void,
        ),
    ];
    for (i, f) in ours {
        if i < n {
            table[i] = f;
        }
    }
    for (i, f) in launch_slots() {
        if i < n {
            table[i] = f;
        }
    }
    // The loader keeps the table for the life of the process.
    *layer_dispatch_ret = Box::leak(table.into_boxed_slice()).as_ptr();
    *num_entries_ret = num_entries;
    CL_SUCCESS
}

/// The Khronos loader's newer entry; clshim takes no layer properties.
#[no_mangle]
pub unsafe extern "C" fn clInitLayerWithProperties(
    num_entries: cl_uint,
    target_dispatch: *const *const c_void,
    num_entries_ret: *mut cl_uint,
    layer_dispatch_ret: *mut *const *const c_void,
    _properties: *const u64,
) -> cl_int {
    clInitLayer(
        num_entries,
        target_dispatch,
        num_entries_ret,
        layer_dispatch_ret,
    )
}

/// Nothing to tear down: records are written as they happen and the exit summary is
/// printed by the process's exit handlers.
#[no_mangle]
pub unsafe extern "C" fn clDeinitLayer() -> cl_int {
    CL_SUCCESS
}

unsafe extern "C" fn layer_clBuildProgram(
    program: cl_program,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
) -> cl_int {
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

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn layer_clCompileProgram(
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

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn layer_clLinkProgram(
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

unsafe extern "C" fn layer_clGetProgramInfo(
    program: cl_program,
    param_name: cl_program_info,
    param_value_size: usize,
    param_value: *mut c_void,
    param_value_size_ret: *mut usize,
) -> cl_int {
    intercept::get_program_info(
        route(),
        program,
        param_name,
        param_value_size,
        param_value,
        param_value_size_ret,
    )
}

unsafe extern "C" fn layer_clCreateProgramWithBinary(
    context: cl_context,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut cl_int,
    errcode_ret: *mut cl_int,
) -> cl_program {
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

unsafe extern "C" fn layer_clCreateProgramWithSource(
    context: cl_context,
    count: cl_uint,
    strings: *const *const c_char,
    lengths: *const usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    intercept::create_program_with_source(route(), context, count, strings, lengths, errcode_ret)
}

unsafe extern "C" fn layer_clCreateProgramWithIL(
    context: cl_context,
    il: *const c_void,
    length: usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    intercept::create_program_with_il(route(), context, il, length, errcode_ret)
}

unsafe extern "C" fn layer_clReleaseProgram(program: cl_program) -> cl_int {
    intercept::release_program(route(), program)
}

/// The kernel-launch and kernel-creation slots (first launches).
fn launch_slots() -> [(usize, *const c_void); 5] {
    [
        (
            slot::ENQUEUE_ND_RANGE_KERNEL,
            layer_clEnqueueNDRangeKernel as *const c_void,
        ),
        (slot::ENQUEUE_TASK, layer_clEnqueueTask as *const c_void),
        (slot::CREATE_KERNEL, layer_clCreateKernel as *const c_void),
        (
            slot::CREATE_KERNELS_IN_PROGRAM,
            layer_clCreateKernelsInProgram as *const c_void,
        ),
        (slot::CLONE_KERNEL, layer_clCloneKernel as *const c_void),
    ]
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn layer_clEnqueueNDRangeKernel(
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
    intercept::enqueue_nd_range_kernel(
        route(),
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

unsafe extern "C" fn layer_clEnqueueTask(
    queue: cl_command_queue,
    kernel: cl_kernel,
    num_events_in_wait_list: cl_uint,
    event_wait_list: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    intercept::enqueue_task(
        route(),
        queue,
        kernel,
        num_events_in_wait_list,
        event_wait_list,
        event,
    )
}

unsafe extern "C" fn layer_clCreateKernel(
    program: cl_program,
    kernel_name: *const c_char,
    errcode_ret: *mut cl_int,
) -> cl_kernel {
    intercept::create_kernel(route(), program, kernel_name, errcode_ret)
}

unsafe extern "C" fn layer_clCreateKernelsInProgram(
    program: cl_program,
    num_kernels: cl_uint,
    kernels: *mut cl_kernel,
    num_kernels_ret: *mut cl_uint,
) -> cl_int {
    intercept::create_kernels_in_program(route(), program, num_kernels, kernels, num_kernels_ret)
}

unsafe extern "C" fn layer_clCloneKernel(
    source_kernel: cl_kernel,
    errcode_ret: *mut cl_int,
) -> cl_kernel {
    intercept::clone_kernel(route(), source_kernel, errcode_ret)
}
