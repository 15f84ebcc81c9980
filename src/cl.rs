//! The slice of the OpenCL C API that clshim speaks: handle and scalar types, the
//! constants it reads or answers with, the entry-point signatures it forwards (made from
//! `entry_points::table!`), and the names of status codes for records. Written from the
//! OpenCL specification's published values; no OpenCL header or library is needed to
//! build clshim.
#![allow(non_camel_case_types, dead_code)]

use std::ffi::{c_char, c_void};

pub type cl_int = i32;
pub type cl_uint = u32;
pub type cl_ulong = u64;
pub type cl_bitfield = u64;
pub type cl_bool = u32;
pub type cl_device_type = cl_bitfield;
pub type cl_program_info = cl_uint;
pub type cl_program_build_info = cl_uint;
pub type cl_device_info = cl_uint;
pub type cl_platform_info = cl_uint;
pub type cl_build_status = cl_int;

/// Every ICD object is a pointer to a struct whose first member points to a dispatch table.
pub type Handle = *mut c_void;
pub type cl_program = Handle;
pub type cl_context = Handle;
pub type cl_device_id = Handle;
pub type cl_platform_id = Handle;
pub type cl_command_queue = Handle;
pub type cl_kernel = Handle;
pub type cl_event = Handle;

/// `clSetEventCallback`'s callback: the event, its execution status, the user data.
pub type EventNotify =
    unsafe extern "C" fn(event: cl_event, status: cl_int, user_data: *mut c_void);

pub type BuildNotify = Option<unsafe extern "C" fn(program: cl_program, user_data: *mut c_void)>;

// Status codes.
pub const CL_SUCCESS: cl_int = 0;
pub const CL_OUT_OF_HOST_MEMORY: cl_int = -6;
pub const CL_BUILD_PROGRAM_FAILURE: cl_int = -11;
pub const CL_COMPILE_PROGRAM_FAILURE: cl_int = -15;
pub const CL_LINK_PROGRAM_FAILURE: cl_int = -17;
pub const CL_INVALID_VALUE: cl_int = -30;
pub const CL_INVALID_DEVICE: cl_int = -33;
pub const CL_INVALID_CONTEXT: cl_int = -34;
pub const CL_INVALID_COMMAND_QUEUE: cl_int = -36;
pub const CL_INVALID_BINARY: cl_int = -42;
pub const CL_INVALID_BUILD_OPTIONS: cl_int = -43;
pub const CL_INVALID_PROGRAM: cl_int = -44;
pub const CL_INVALID_KERNEL: cl_int = -48;
pub const CL_INVALID_OPERATION: cl_int = -59;
pub const CL_INVALID_COMPILER_OPTIONS: cl_int = -66;
pub const CL_INVALID_LINKER_OPTIONS: cl_int = -67;

// clGetContextInfo parameters.
pub const CL_CONTEXT_DEVICES: cl_uint = 0x1081;

// clGetProgramInfo parameters.
pub const CL_PROGRAM_REFERENCE_COUNT: cl_program_info = 0x1160;
pub const CL_PROGRAM_CONTEXT: cl_program_info = 0x1161;
pub const CL_PROGRAM_NUM_DEVICES: cl_program_info = 0x1162;
pub const CL_PROGRAM_DEVICES: cl_program_info = 0x1163;
pub const CL_PROGRAM_SOURCE: cl_program_info = 0x1164;
pub const CL_PROGRAM_BINARY_SIZES: cl_program_info = 0x1165;
pub const CL_PROGRAM_BINARIES: cl_program_info = 0x1166;
pub const CL_PROGRAM_NUM_KERNELS: cl_program_info = 0x1167;
pub const CL_PROGRAM_KERNEL_NAMES: cl_program_info = 0x1168;

// clGetProgramBuildInfo parameters and build states.
pub const CL_PROGRAM_BUILD_STATUS: cl_program_build_info = 0x1181;
pub const CL_BUILD_SUCCESS: cl_build_status = 0;
pub const CL_BUILD_NONE: cl_build_status = -1;
pub const CL_PROGRAM_BUILD_OPTIONS: cl_program_build_info = 0x1182;
pub const CL_PROGRAM_BUILD_LOG: cl_program_build_info = 0x1183;
pub const CL_PROGRAM_BINARY_TYPE: cl_program_build_info = 0x1184;
pub const CL_PROGRAM_BINARY_TYPE_NONE: cl_uint = 0;
pub const CL_PROGRAM_BINARY_TYPE_EXECUTABLE: cl_uint = 4;
pub const CL_PROGRAM_BINARY_TYPE_LIBRARY: cl_uint = 2;
pub const CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT: cl_uint = 1;
pub const CL_PROGRAM_IL: cl_program_info = 0x1169;

// clGetDeviceInfo parameters and device types.
pub const CL_DEVICE_TYPE: cl_device_info = 0x1000;
pub const CL_DEVICE_NAME: cl_device_info = 0x102B;
pub const CL_DEVICE_MAX_COMPUTE_UNITS: cl_device_info = 0x1002;
pub const CL_DEVICE_VENDOR: cl_device_info = 0x102C;
pub const CL_DRIVER_VERSION: cl_device_info = 0x102D;
pub const CL_DEVICE_VERSION: cl_device_info = 0x102F;
pub const CL_DEVICE_PLATFORM: cl_device_info = 0x1031;
pub const CL_DEVICE_TYPE_DEFAULT: cl_device_type = 1;
pub const CL_DEVICE_TYPE_CPU: cl_device_type = 2;
pub const CL_DEVICE_TYPE_GPU: cl_device_type = 4;
pub const CL_DEVICE_TYPE_ACCELERATOR: cl_device_type = 8;
pub const CL_DEVICE_TYPE_CUSTOM: cl_device_type = 16;

// clGetPlatformInfo parameters.
pub const CL_PLATFORM_VERSION: cl_platform_info = 0x0901;
pub const CL_PLATFORM_NAME: cl_platform_info = 0x0902;

// clGetCommandQueueInfo, clGetKernelInfo and clGetEventInfo parameters; event states.
pub const CL_QUEUE_DEVICE: cl_uint = 0x1091;
pub const CL_KERNEL_FUNCTION_NAME: cl_uint = 0x1190;
pub const CL_KERNEL_PROGRAM: cl_uint = 0x1194;
pub const CL_KERNEL_ATTRIBUTES: cl_uint = 0x1195;
pub const CL_EVENT_REFERENCE_COUNT: cl_uint = 0x11D2;
pub const CL_COMPLETE: cl_int = 0;

// Loader layers (cl_loader_layers).
pub const CL_LAYER_API_VERSION: cl_uint = 0x4240;
pub const CL_LAYER_NAME: cl_uint = 0x4241;
pub const CL_LAYER_API_VERSION_100: cl_uint = 100;

/// cl_khr_icd 2.0: the value in slot 0 of a tagged object's table.
#[cfg(target_pointer_width = "64")]
pub const CL_ICD2_TAG_KHR: usize = 0x4F50_454E_434C_3331;
#[cfg(target_pointer_width = "32")]
pub const CL_ICD2_TAG_KHR: usize = 0x434C_3331;

/// Generates the entry-point signatures of `entry_points::table!`, as the dispatch table
/// holds them.
macro_rules! signatures {
    ($with:tt $($slot:literal => fn $name:ident($($arg:ident: $argty:ty),* $(,)?) -> $ret:ty
        as $ty:ident, $acc:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`, slot ", stringify!($slot), " of the table.")]
        pub type $ty = unsafe extern "C" fn($($argty),*) -> $ret;
    )*};
}
crate::entry_points::table!(all => signatures);

/// The name of a status code, for records and log lines ("CL_UNKNOWN_ERROR" when unknown).
pub fn status_name(code: cl_int) -> &'static str {
    match code {
        0 => "CL_SUCCESS",
        -1 => "CL_DEVICE_NOT_FOUND",
        -2 => "CL_DEVICE_NOT_AVAILABLE",
        -3 => "CL_COMPILER_NOT_AVAILABLE",
        -4 => "CL_MEM_OBJECT_ALLOCATION_FAILURE",
        -5 => "CL_OUT_OF_RESOURCES",
        -6 => "CL_OUT_OF_HOST_MEMORY",
        -7 => "CL_PROFILING_INFO_NOT_AVAILABLE",
        -8 => "CL_MEM_COPY_OVERLAP",
        -9 => "CL_IMAGE_FORMAT_MISMATCH",
        -10 => "CL_IMAGE_FORMAT_NOT_SUPPORTED",
        -11 => "CL_BUILD_PROGRAM_FAILURE",
        -12 => "CL_MAP_FAILURE",
        -13 => "CL_MISALIGNED_SUB_BUFFER_OFFSET",
        -14 => "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
        -15 => "CL_COMPILE_PROGRAM_FAILURE",
        -16 => "CL_LINKER_NOT_AVAILABLE",
        -17 => "CL_LINK_PROGRAM_FAILURE",
        -18 => "CL_DEVICE_PARTITION_FAILED",
        -19 => "CL_KERNEL_ARG_INFO_NOT_AVAILABLE",
        -30 => "CL_INVALID_VALUE",
        -31 => "CL_INVALID_DEVICE_TYPE",
        -32 => "CL_INVALID_PLATFORM",
        -33 => "CL_INVALID_DEVICE",
        -34 => "CL_INVALID_CONTEXT",
        -35 => "CL_INVALID_QUEUE_PROPERTIES",
        -36 => "CL_INVALID_COMMAND_QUEUE",
        -37 => "CL_INVALID_HOST_PTR",
        -38 => "CL_INVALID_MEM_OBJECT",
        -39 => "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR",
        -40 => "CL_INVALID_IMAGE_SIZE",
        -41 => "CL_INVALID_SAMPLER",
        -42 => "CL_INVALID_BINARY",
        -43 => "CL_INVALID_BUILD_OPTIONS",
        -44 => "CL_INVALID_PROGRAM",
        -45 => "CL_INVALID_PROGRAM_EXECUTABLE",
        -46 => "CL_INVALID_KERNEL_NAME",
        -47 => "CL_INVALID_KERNEL_DEFINITION",
        -48 => "CL_INVALID_KERNEL",
        -49 => "CL_INVALID_ARG_INDEX",
        -50 => "CL_INVALID_ARG_VALUE",
        -51 => "CL_INVALID_ARG_SIZE",
        -52 => "CL_INVALID_KERNEL_ARGS",
        -53 => "CL_INVALID_WORK_DIMENSION",
        -54 => "CL_INVALID_WORK_GROUP_SIZE",
        -55 => "CL_INVALID_WORK_ITEM_SIZE",
        -56 => "CL_INVALID_GLOBAL_OFFSET",
        -57 => "CL_INVALID_EVENT_WAIT_LIST",
        -58 => "CL_INVALID_EVENT",
        -59 => "CL_INVALID_OPERATION",
        -60 => "CL_INVALID_GL_OBJECT",
        -61 => "CL_INVALID_BUFFER_SIZE",
        -62 => "CL_INVALID_MIP_LEVEL",
        -63 => "CL_INVALID_GLOBAL_WORK_SIZE",
        -64 => "CL_INVALID_PROPERTY",
        -65 => "CL_INVALID_IMAGE_DESCRIPTOR",
        -66 => "CL_INVALID_COMPILER_OPTIONS",
        -67 => "CL_INVALID_LINKER_OPTIONS",
        -68 => "CL_INVALID_DEVICE_PARTITION_COUNT",
        -69 => "CL_INVALID_PIPE_SIZE",
        -70 => "CL_INVALID_DEVICE_QUEUE",
        -71 => "CL_INVALID_SPEC_ID",
        -72 => "CL_MAX_SIZE_RESTRICTION_EXCEEDED",
        -1001 => "CL_PLATFORM_NOT_FOUND_KHR",
        _ => "CL_UNKNOWN_ERROR",
    }
}

/// Whether a status says the call was refused before any work began (the CL_INVALID_*
/// range), so an asynchronous callback will never run.
pub fn refused_before_start(code: cl_int) -> bool {
    (-72..=-30).contains(&code)
}

pub fn device_type_name(t: cl_device_type) -> &'static str {
    if t & CL_DEVICE_TYPE_GPU != 0 {
        "GPU"
    } else if t & CL_DEVICE_TYPE_CPU != 0 {
        "CPU"
    } else if t & CL_DEVICE_TYPE_ACCELERATOR != 0 {
        "ACCELERATOR"
    } else if t & CL_DEVICE_TYPE_CUSTOM != 0 {
        "CUSTOM"
    } else {
        "DEFAULT"
    }
}
