//! The one table of the OpenCL entry points clshim intercepts or calls: for each, its
//! slot in the cl_khr_icd dispatch table, its C name and signature, the name of its
//! function type, and the name of its typed accessor on `Route` (which is also the name
//! of the `intercept` function behind an intercepted one). Nothing is generated here:
//! `table!` hands the rows of one group to a generator macro of the module that needs
//! them, so `cl` makes the function types, `dispatch` the accessors, each door its C
//! functions (through `intercept::door_functions!`) and `layer` and `macos` their slot
//! lists, imports and interpose tuples from these rows alone. A row's slot is checked
//! against the system's `CL/cl_icd.h` below.
//!
//! A generator receives `[DOOR'S ARGUMENTS]` and then the rows, each
//! `SLOT => fn clName(arg: type, ...) -> type as FnType, accessor;`. Types resolve where
//! the generator expands, so a module that emits the signatures imports `crate::cl::*`
//! and `std::ffi::{c_char, c_void}`.

/// Expands `$generate!` over one group of rows:
/// - `all`: every row;
/// - `intercepted`: the entry points preload and layer mode stand in front of;
/// - `interposed`: those macOS interposition stands in front of (OpenCL.framework has
///   them, and macOS interposition does not cover kernel launches);
/// - `imported_on_macos`: those taken from OpenCL.framework, to forward to.
///
/// `table!(GROUP => generator)` or `table!(GROUP => generator { DOOR'S ARGUMENTS })`.
macro_rules! table {
    ($group:ident => $generate:ident $({ $($with:tt)* })?) => {
        $crate::entry_points::table! { @select $group $generate [$($($with)*)?]
            intercepted_and_interposed {
                26 => fn clCreateProgramWithSource(context: cl_context, count: cl_uint,
                    strings: *const *const c_char, lengths: *const usize,
                    errcode_ret: *mut cl_int) -> cl_program
                    as FnCreateProgramWithSource, create_program_with_source;
                27 => fn clCreateProgramWithBinary(context: cl_context, num_devices: cl_uint,
                    device_list: *const cl_device_id, lengths: *const usize,
                    binaries: *const *const u8, binary_status: *mut cl_int,
                    errcode_ret: *mut cl_int) -> cl_program
                    as FnCreateProgramWithBinary, create_program_with_binary;
                29 => fn clReleaseProgram(program: cl_program) -> cl_int
                    as FnReleaseProgram, release_program;
                30 => fn clBuildProgram(program: cl_program, num_devices: cl_uint,
                    device_list: *const cl_device_id, options: *const c_char,
                    pfn_notify: BuildNotify, user_data: *mut c_void) -> cl_int
                    as FnBuildProgram, build_program;
                32 => fn clGetProgramInfo(program: cl_program, param_name: cl_program_info,
                    param_value_size: usize, param_value: *mut c_void,
                    param_value_size_ret: *mut usize) -> cl_int
                    as FnGetProgramInfo, get_program_info;
                33 => fn clGetProgramBuildInfo(program: cl_program, device: cl_device_id,
                    param_name: cl_program_build_info, param_value_size: usize,
                    param_value: *mut c_void, param_value_size_ret: *mut usize) -> cl_int
                    as FnGetProgramBuildInfo, get_program_build_info;
                98 => fn clCompileProgram(program: cl_program, num_devices: cl_uint,
                    device_list: *const cl_device_id, options: *const c_char,
                    num_input_headers: cl_uint, input_headers: *const cl_program,
                    header_include_names: *const *const c_char, pfn_notify: BuildNotify,
                    user_data: *mut c_void) -> cl_int
                    as FnCompileProgram, compile_program;
                99 => fn clLinkProgram(context: cl_context, num_devices: cl_uint,
                    device_list: *const cl_device_id, options: *const c_char,
                    num_input_programs: cl_uint, input_programs: *const cl_program,
                    pfn_notify: BuildNotify, user_data: *mut c_void,
                    errcode_ret: *mut cl_int) -> cl_program
                    as FnLinkProgram, link_program;
            }
            // Not interposed on macOS: the framework's OpenCL 1.2 has neither
            // clCreateProgramWithIL nor clCloneKernel, and first launches are not recorded
            // there.
            intercepted {
                11 => fn clReleaseCommandQueue(command_queue: cl_command_queue) -> cl_int
                    as FnReleaseCommandQueue, release_command_queue;
                // The program cache's own handles (`program_cache`) must be taken back at
                // every entry point that takes a program, and given back where one is
                // returned (a kernel's program).
                28 => fn clRetainProgram(program: cl_program) -> cl_int
                    as FnRetainProgram, retain_program;
                39 => fn clGetKernelInfo(kernel: cl_kernel, param_name: cl_uint,
                    param_value_size: usize, param_value: *mut c_void,
                    param_value_size_ret: *mut usize) -> cl_int
                    as FnGetKernelInfo, get_kernel_info;
                144 => fn clSetProgramReleaseCallback(program: cl_program,
                    pfn_notify: BuildNotify, user_data: *mut c_void) -> cl_int
                    as FnSetProgramReleaseCallback, set_program_release_callback;
                145 => fn clSetProgramSpecializationConstant(program: cl_program,
                    spec_id: cl_uint, spec_size: usize, spec_value: *const c_void) -> cl_int
                    as FnSetProgramSpecializationConstant, set_program_specialization_constant;
                34 => fn clCreateKernel(program: cl_program, kernel_name: *const c_char,
                    errcode_ret: *mut cl_int) -> cl_kernel
                    as FnCreateKernel, create_kernel;
                35 => fn clCreateKernelsInProgram(program: cl_program, num_kernels: cl_uint,
                    kernels: *mut cl_kernel, num_kernels_ret: *mut cl_uint) -> cl_int
                    as FnCreateKernelsInProgram, create_kernels_in_program;
                59 => fn clEnqueueNDRangeKernel(queue: cl_command_queue, kernel: cl_kernel,
                    work_dim: cl_uint, global_work_offset: *const usize,
                    global_work_size: *const usize, local_work_size: *const usize,
                    num_events_in_wait_list: cl_uint, event_wait_list: *const cl_event,
                    event: *mut cl_event) -> cl_int
                    as FnEnqueueNDRangeKernel, enqueue_nd_range_kernel;
                60 => fn clEnqueueTask(queue: cl_command_queue, kernel: cl_kernel,
                    num_events_in_wait_list: cl_uint, event_wait_list: *const cl_event,
                    event: *mut cl_event) -> cl_int
                    as FnEnqueueTask, enqueue_task;
                137 => fn clCloneKernel(source_kernel: cl_kernel, errcode_ret: *mut cl_int)
                    -> cl_kernel
                    as FnCloneKernel, clone_kernel;
                138 => fn clCreateProgramWithIL(context: cl_context, il: *const c_void,
                    length: usize, errcode_ret: *mut cl_int) -> cl_program
                    as FnCreateProgramWithIL, create_program_with_il;
            }
            // Called by clshim, never intercepted.
            forwarded_and_imported_on_macos {
                1 => fn clGetPlatformInfo(platform: cl_platform_id, param_name: cl_platform_info,
                    param_value_size: usize, param_value: *mut c_void,
                    param_value_size_ret: *mut usize) -> cl_int
                    as FnGetPlatformInfo, get_platform_info;
                3 => fn clGetDeviceInfo(device: cl_device_id, param_name: cl_device_info,
                    param_value_size: usize, param_value: *mut c_void,
                    param_value_size_ret: *mut usize) -> cl_int
                    as FnGetDeviceInfo, get_device_info;
                8 => fn clGetContextInfo(context: cl_context, param_name: cl_uint,
                    param_value_size: usize, param_value: *mut c_void,
                    param_value_size_ret: *mut usize) -> cl_int
                    as FnGetContextInfo, get_context_info;
            }
            // Called by clshim for first launches only, so not needed on macOS.
            forwarded {
                12 => fn clGetCommandQueueInfo(queue: cl_command_queue, param_name: cl_uint,
                    param_value_size: usize, param_value: *mut c_void,
                    param_value_size_ret: *mut usize) -> cl_int
                    as FnGetCommandQueueInfo, get_command_queue_info;
                37 => fn clReleaseKernel(kernel: cl_kernel) -> cl_int
                    as FnReleaseKernel, release_kernel;
                44 => fn clReleaseEvent(event: cl_event) -> cl_int
                    as FnReleaseEvent, release_event;
                81 => fn clSetEventCallback(event: cl_event, command_exec_callback_type: cl_int,
                    pfn_notify: EventNotify, user_data: *mut c_void) -> cl_int
                    as FnSetEventCallback, set_event_callback;
            }
        }
    };
    (@select all $g:ident $with:tt
        intercepted_and_interposed { $($a:tt)* } intercepted { $($b:tt)* }
        forwarded_and_imported_on_macos { $($c:tt)* } forwarded { $($d:tt)* }) => {
        $g! { $with $($a)* $($b)* $($c)* $($d)* }
    };
    (@select intercepted $g:ident $with:tt
        intercepted_and_interposed { $($a:tt)* } intercepted { $($b:tt)* }
        forwarded_and_imported_on_macos $c:tt forwarded $d:tt) => {
        $g! { $with $($a)* $($b)* }
    };
    (@select interposed $g:ident $with:tt
        intercepted_and_interposed { $($a:tt)* } intercepted $b:tt
        forwarded_and_imported_on_macos $c:tt forwarded $d:tt) => {
        $g! { $with $($a)* }
    };
    (@select imported_on_macos $g:ident $with:tt
        intercepted_and_interposed { $($a:tt)* } intercepted $b:tt
        forwarded_and_imported_on_macos { $($c:tt)* } forwarded $d:tt) => {
        $g! { $with $($a)* $($c)* }
    };
}
pub(crate) use table;

#[cfg(test)]
mod tests {
    use std::process::Command;

    macro_rules! names_and_slots {
        ($with:tt $($slot:literal => fn $name:ident $args:tt -> $ret:ty
            as $ty:ident, $acc:ident;)*) => {
            [$((stringify!($name), $slot)),*]
        };
    }

    fn rows() -> Vec<(&'static str, usize)> {
        table!(all => names_and_slots).to_vec()
    }

    #[test]
    fn every_entry_point_has_a_slot_of_its_own() {
        let mut slots: Vec<usize> = rows().iter().map(|r| r.1).collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), rows().len(), "{:?}", rows());
    }

    /// Compiles a program that prints each row's slot as the system's `CL/cl_icd.h` lays
    /// the dispatch table out (needs a C compiler and the OpenCL headers, as the C tests
    /// under tests/ do).
    #[test]
    fn slots_match_the_system_icd_header() {
        let mut c = String::from(
            "#define CL_TARGET_OPENCL_VERSION 300\n#include <CL/cl_icd.h>\n\
             #include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
        );
        for (name, _) in rows() {
            let offset = format!("offsetof(cl_icd_dispatch, {name}) / sizeof(void *)");
            c += &format!("    printf(\"{name} %zu\\n\", {offset});\n");
        }
        c += "    return 0;\n}\n";
        let dir = std::env::temp_dir().join(format!("clshim-icd-slots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, bin) = (dir.join("slots.c"), dir.join("slots"));
        std::fs::write(&src, c).unwrap();
        let built = Command::new("cc")
            .arg("-o")
            .arg(&bin)
            .arg(&src)
            .output()
            .expect("run cc");
        let out = built.status.success().then(|| Command::new(&bin).output());
        std::fs::remove_dir_all(&dir).ok();
        assert!(
            built.status.success(),
            "compiling against CL/cl_icd.h failed:\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let out = out.unwrap().expect("run the slot printer");
        assert!(out.status.success());
        let header = String::from_utf8(out.stdout).unwrap();
        for (name, slot) in rows() {
            let line = format!("{name} {slot}");
            assert!(
                header.lines().any(|l| l == line),
                "{name}: the table says slot {slot}; the header says:\n{header}"
            );
        }
    }
}
