//! The intercepted program entry points, once for both modes: each takes the `Route` its
//! mode forwards through and the application's arguments. Each finds the implementation's
//! entry first, so that whatever goes wrong inside clshim afterwards (no state, a panic, a
//! nested call) the call is still forwarded unchanged, and exactly once.

use crate::binary_load;
use crate::builds::{self, Pending};
use crate::cl::*;
use crate::dispatch::{slot, Route};
use crate::guard::{self, catch};
use crate::policy;
use crate::programs::Origin;
use crate::runtime;
use crate::schema::Event;
use std::ffi::{c_char, c_void};

/// The status a loader gives when the object or its entry is missing.
fn missing(obj: Handle, invalid: cl_int) -> cl_int {
    if obj.is_null() {
        invalid
    } else {
        CL_INVALID_OPERATION
    }
}

/// # Safety
/// The application's arguments to `clBuildProgram`.
pub unsafe fn build_program(
    route: Route,
    program: cl_program,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
) -> cl_int {
    // SAFETY: this function's contract: The application's arguments to `clBuildProgram`.
    unsafe {
        let Some(real) = route.entry::<FnBuildProgram>(program, slot::BUILD_PROGRAM) else {
            return missing(program, CL_INVALID_PROGRAM);
        };
        let Some(_inside) = guard::enter() else {
            return real(
                program,
                num_devices,
                device_list,
                options,
                pfn_notify,
                user_data,
            );
        };
        let rt = runtime::get(route);
        // A program recreated from a clshim binary builds with the options it recorded, as
        // a loaded binary keeps what it was built with.
        let loaded = rt.and_then(|rt| catch(|| rt.programs.loaded(program)).flatten());
        let linked = loaded.as_ref().is_some_and(|l| l.linked);
        let recorded = loaded
            .and_then(|l| l.options)
            .and_then(|o| std::ffi::CString::new(o).ok());
        let used = recorded.as_ref().map_or(options, |c| c.as_ptr());
        let pending = rt.map(|rt| {
            let p = Pending::new(
                rt,
                route,
                Event::Build,
                program,
                num_devices,
                device_list,
                used,
                pfn_notify.is_some(),
            );
            if recorded.is_some() {
                p.with_replaced_options(options)
            } else {
                p
            }
        });
        builds::run(pending, pfn_notify, user_data, |f, d| {
            if linked {
                // Already an executable (linked again at load): done, as the build of a
                // loaded binary is; the callback runs once, now.
                if let Some(f) = f {
                    f(program, d);
                }
                return (CL_SUCCESS, program);
            }
            (real(program, num_devices, device_list, used, f, d), program)
        })
        .0
    }
}

/// # Safety
/// The application's arguments to `clCompileProgram`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn compile_program(
    route: Route,
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
    // SAFETY: this function's contract: The application's arguments to `clCompileProgram`.
    unsafe {
        let Some(real) = route.entry::<FnCompileProgram>(program, slot::COMPILE_PROGRAM) else {
            return missing(program, CL_INVALID_PROGRAM);
        };
        let forward = |f: BuildNotify, d: *mut c_void| {
            real(
                program,
                num_devices,
                device_list,
                options,
                num_input_headers,
                input_headers,
                header_include_names,
                f,
                d,
            )
        };
        let Some(_inside) = guard::enter() else {
            return forward(pfn_notify, user_data);
        };
        let pending = runtime::get(route).map(|rt| {
            Pending::new(
                rt,
                route,
                Event::Compile,
                program,
                num_devices,
                device_list,
                options,
                pfn_notify.is_some(),
            )
            .with_headers(num_input_headers, input_headers, header_include_names)
        });
        builds::run(pending, pfn_notify, user_data, |f, d| {
            (forward(f, d), program)
        })
        .0
    }
}

/// # Safety
/// The application's arguments to `clLinkProgram`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn link_program(
    route: Route,
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
    // SAFETY: this function's contract: The application's arguments to `clLinkProgram`.
    unsafe {
        let Some(real) = route.entry::<FnLinkProgram>(context, slot::LINK_PROGRAM) else {
            set_errcode(errcode_ret, missing(context, CL_INVALID_CONTEXT));
            return std::ptr::null_mut();
        };
        let Some(_inside) = guard::enter() else {
            return real(
                context,
                num_devices,
                device_list,
                options,
                num_input_programs,
                input_programs,
                pfn_notify,
                user_data,
                errcode_ret,
            );
        };
        // The input programs are read only once the implementation has accepted the link:
        // a count beyond the array is its to refuse.
        let pending = runtime::get(route).map(|rt| {
            Pending::new(
                rt,
                route,
                Event::Link,
                std::ptr::null_mut(),
                num_devices,
                device_list,
                options,
                pfn_notify.is_some(),
            )
            .with_inputs(num_input_programs, input_programs)
        });
        // The status of a link comes back through errcode_ret, which the application may omit.
        let mut err = CL_SUCCESS;
        let (_, program) = builds::run(pending, pfn_notify, user_data, |f, d| {
            let p = real(
                context,
                num_devices,
                device_list,
                options,
                num_input_programs,
                input_programs,
                f,
                d,
                &mut err,
            );
            (err, p)
        });
        set_errcode(errcode_ret, err);
        program
    }
}

/// # Safety
/// The application's arguments to `clGetProgramInfo`.
pub unsafe fn get_program_info(
    route: Route,
    program: cl_program,
    param: cl_program_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    // SAFETY: this function's contract: The application's arguments to `clGetProgramInfo`.
    unsafe {
        let Some(real) = route.entry::<FnGetProgramInfo>(program, slot::GET_PROGRAM_INFO) else {
            return missing(program, CL_INVALID_PROGRAM);
        };
        // The hot path: every other query, and size-only binary queries (which compile nothing),
        // go straight through.
        if (param != CL_PROGRAM_BINARY_SIZES && param != CL_PROGRAM_BINARIES) || value.is_null() {
            return real(program, param, size, value, size_ret);
        }
        let Some(_inside) = guard::enter() else {
            return real(program, param, size, value, size_ret);
        };
        match runtime::get(route) {
            Some(rt) => {
                policy::binary_query(rt, route, real, program, param, size, value, size_ret)
            }
            None => real(program, param, size, value, size_ret),
        }
    }
}

/// `clGetProgramBuildInfo`: forwarded, and for `CL_PROGRAM_BINARY_TYPE` on a program clshim
/// recreated from a clshim binary of an executable (a source program until the
/// application builds it) answered as the implementation answers for a loaded executable.
/// Everything else, and every call before any program was recreated, goes straight through.
///
/// # Safety
/// The application's arguments to `clGetProgramBuildInfo`.
pub unsafe fn get_program_build_info(
    route: Route,
    program: cl_program,
    device: cl_device_id,
    param: cl_program_build_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    // SAFETY: this function's contract: The application's arguments to
    // `clGetProgramBuildInfo`.
    unsafe {
        let Some(real) =
            route.entry::<FnGetProgramBuildInfo>(program, slot::GET_PROGRAM_BUILD_INFO)
        else {
            return missing(program, CL_INVALID_PROGRAM);
        };
        let ret = real(program, device, param, size, value, size_ret);
        if param != CL_PROGRAM_BINARY_TYPE
            || ret != CL_SUCCESS
            || value.is_null()
            || size < std::mem::size_of::<cl_uint>()
            || !crate::programs::any_loaded()
        {
            return ret;
        }
        let Some(_inside) = guard::enter() else {
            return ret;
        };
        let Some(rt) = runtime::existing() else {
            return ret;
        };
        catch(|| {
            let executable = rt.programs.loaded(program).is_some_and(|l| l.executable);
            let v = value as *mut cl_uint;
            if executable && v.read_unaligned() == CL_PROGRAM_BINARY_TYPE_NONE {
                v.write_unaligned(CL_PROGRAM_BINARY_TYPE_EXECUTABLE);
            }
        });
        ret
    }
}

/// # Safety
/// The application's arguments to `clCreateProgramWithBinary`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create_program_with_binary(
    route: Route,
    context: cl_context,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut cl_int,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: this function's contract: The application's arguments to
    // `clCreateProgramWithBinary`.
    unsafe {
        let Some(real) =
            route.entry::<FnCreateProgramWithBinary>(context, slot::CREATE_PROGRAM_WITH_BINARY)
        else {
            set_errcode(errcode_ret, missing(context, CL_INVALID_CONTEXT));
            return std::ptr::null_mut();
        };
        let forward = || {
            real(
                context,
                num_devices,
                device_list,
                lengths,
                binaries,
                binary_status,
                errcode_ret,
            )
        };
        let Some(_inside) = guard::enter() else {
            return forward();
        };
        match runtime::get(route) {
            Some(rt) => binary_load::create_with_binary(
                rt,
                route,
                real,
                context,
                num_devices,
                device_list,
                lengths,
                binaries,
                binary_status,
                errcode_ret,
            ),
            None => forward(),
        }
    }
}

/// The source strings as OpenCL defines them (a length of 0, or no lengths array, means
/// NUL-terminated).
unsafe fn source_parts<'a>(
    count: cl_uint,
    strings: *const *const c_char,
    lengths: *const usize,
) -> Vec<&'a [u8]> {
    // SAFETY: called only for a program the implementation made from these strings, so
    // there are `count` of them, each NUL-terminated or as long as `lengths` says.
    unsafe {
        let mut parts = Vec::with_capacity(count as usize);
        for i in 0..count as usize {
            let s = *strings.add(i);
            if s.is_null() {
                continue;
            }
            let len = if lengths.is_null() || *lengths.add(i) == 0 {
                std::ffi::CStr::from_ptr(s).to_bytes().len()
            } else {
                *lengths.add(i)
            };
            if len > isize::MAX as usize {
                continue; // no slice can be that long; the implementation took it all the same
            }
            parts.push(std::slice::from_raw_parts(s as *const u8, len));
        }
        parts
    }
}

/// # Safety
/// The application's arguments to `clCreateProgramWithSource`.
pub unsafe fn create_program_with_source(
    route: Route,
    context: cl_context,
    count: cl_uint,
    strings: *const *const c_char,
    lengths: *const usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: this function's contract: The application's arguments to
    // `clCreateProgramWithSource`.
    unsafe {
        let Some(real) =
            route.entry::<FnCreateProgramWithSource>(context, slot::CREATE_PROGRAM_WITH_SOURCE)
        else {
            set_errcode(errcode_ret, missing(context, CL_INVALID_CONTEXT));
            return std::ptr::null_mut();
        };
        let program = real(context, count, strings, lengths, errcode_ret);
        if !strings.is_null() {
            register_created(route, program, Origin::Source, || {
                source_parts(count, strings, lengths)
            });
        }
        program
    }
}

/// Enters a program the implementation just made into the registry, with the hash and
/// length of the parts `made_from` gives (what it was made from). Never disturbs the call: nothing
/// happens for a failed creation, a nested call or an internal failure.
unsafe fn register_created<'a>(
    route: Route,
    program: cl_program,
    origin: Origin,
    made_from: impl FnOnce() -> Vec<&'a [u8]>,
) {
    if program.is_null() {
        return;
    }
    if let Some(_inside) = guard::enter() {
        if let Some(rt) = runtime::get(route) {
            catch(|| {
                rt.programs.made_from(program, origin, &made_from());
            });
        }
    }
}

/// # Safety
/// The application's arguments to `clCreateProgramWithIL`.
pub unsafe fn create_program_with_il(
    route: Route,
    context: cl_context,
    il: *const c_void,
    length: usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: this function's contract: The application's arguments to
    // `clCreateProgramWithIL`.
    unsafe {
        let Some(real) =
            route.entry::<FnCreateProgramWithIL>(context, slot::CREATE_PROGRAM_WITH_IL)
        else {
            set_errcode(errcode_ret, missing(context, CL_INVALID_CONTEXT));
            return std::ptr::null_mut();
        };
        let program = real(context, il, length, errcode_ret);
        if !il.is_null() && length <= isize::MAX as usize {
            register_created(route, program, Origin::Il, || {
                vec![std::slice::from_raw_parts(il as *const u8, length)]
            });
        }
        program
    }
}

/// # Safety
/// The application's argument to `clReleaseProgram`.
pub unsafe fn release_program(route: Route, program: cl_program) -> cl_int {
    // SAFETY: this function's contract: The application's argument to `clReleaseProgram`.
    unsafe {
        let Some(real) = route.entry::<FnReleaseProgram>(program, slot::RELEASE_PROGRAM) else {
            return missing(program, CL_INVALID_PROGRAM);
        };
        // Only a process that has state has entries to forget.
        let Some(rt) = runtime::existing() else {
            return real(program);
        };
        let last =
            catch(|| crate::query::reference_count(route, program) == Some(1)).unwrap_or(false);
        let ret = real(program);
        if ret == CL_SUCCESS && last {
            catch(|| rt.programs.released(program));
        }
        ret
    }
}

// ---------------------------------------------------------------------------------------
// Kernel launches and kernel creation (first launches: `launches`).

/// # Safety
/// The application's arguments to `clEnqueueNDRangeKernel`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn enqueue_nd_range_kernel(
    route: Route,
    queue: cl_command_queue,
    kernel: cl_kernel,
    work_dim: cl_uint,
    offset: *const usize,
    global: *const usize,
    local: *const usize,
    num_events: cl_uint,
    wait_list: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    // SAFETY: this function's contract: The application's arguments to
    // `clEnqueueNDRangeKernel`.
    unsafe {
        let Some(real) =
            route.entry::<FnEnqueueNDRangeKernel>(queue, slot::ENQUEUE_ND_RANGE_KERNEL)
        else {
            return missing(queue, CL_INVALID_COMMAND_QUEUE);
        };
        crate::launches::launch(
            route,
            crate::launches::Call::NdRange,
            queue,
            kernel,
            work_dim,
            global,
            local,
            event,
            move |ev| {
                real(
                    queue, kernel, work_dim, offset, global, local, num_events, wait_list, ev,
                )
            },
        )
    }
}

/// # Safety
/// The application's arguments to `clEnqueueTask`.
#[inline(always)]
pub unsafe fn enqueue_task(
    route: Route,
    queue: cl_command_queue,
    kernel: cl_kernel,
    num_events: cl_uint,
    wait_list: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    // SAFETY: this function's contract: The application's arguments to `clEnqueueTask`.
    unsafe {
        let Some(real) = route.entry::<FnEnqueueTask>(queue, slot::ENQUEUE_TASK) else {
            return missing(queue, CL_INVALID_COMMAND_QUEUE);
        };
        crate::launches::launch(
            route,
            crate::launches::Call::Task,
            queue,
            kernel,
            1,
            crate::launches::TASK_SIZE.as_ptr(),
            crate::launches::TASK_SIZE.as_ptr(),
            event,
            move |ev| real(queue, kernel, num_events, wait_list, ev),
        )
    }
}

/// # Safety
/// The application's arguments to `clCreateKernel`.
pub unsafe fn create_kernel(
    route: Route,
    program: cl_program,
    name: *const c_char,
    errcode_ret: *mut cl_int,
) -> cl_kernel {
    // SAFETY: this function's contract: The application's arguments to `clCreateKernel`.
    unsafe {
        let Some(real) = route.entry::<FnCreateKernel>(program, slot::CREATE_KERNEL) else {
            set_errcode(errcode_ret, missing(program, CL_INVALID_PROGRAM));
            return std::ptr::null_mut();
        };
        let kernel = real(program, name, errcode_ret);
        crate::launches::kernel_created(route, program, name, kernel);
        kernel
    }
}

/// # Safety
/// The application's arguments to `clCreateKernelsInProgram`.
pub unsafe fn create_kernels_in_program(
    route: Route,
    program: cl_program,
    num_kernels: cl_uint,
    kernels: *mut cl_kernel,
    num_kernels_ret: *mut cl_uint,
) -> cl_int {
    // SAFETY: this function's contract: The application's arguments to
    // `clCreateKernelsInProgram`.
    unsafe {
        let Some(real) =
            route.entry::<FnCreateKernelsInProgram>(program, slot::CREATE_KERNELS_IN_PROGRAM)
        else {
            return missing(program, CL_INVALID_PROGRAM);
        };
        let ret = real(program, num_kernels, kernels, num_kernels_ret);
        if ret == CL_SUCCESS && !kernels.is_null() {
            catch(|| {
                let n =
                    crate::launches::kernels_written(route, program, num_kernels_ret, num_kernels);
                crate::launches::kernels_created(kernels, n);
            });
        }
        ret
    }
}

/// # Safety
/// The application's arguments to `clCloneKernel`.
pub unsafe fn clone_kernel(route: Route, source: cl_kernel, errcode_ret: *mut cl_int) -> cl_kernel {
    // SAFETY: this function's contract: The application's arguments to `clCloneKernel`.
    unsafe {
        let Some(real) = route.entry::<FnCloneKernel>(source, slot::CLONE_KERNEL) else {
            set_errcode(errcode_ret, missing(source, CL_INVALID_KERNEL));
            return std::ptr::null_mut();
        };
        let clone = real(source, errcode_ret);
        crate::launches::kernel_cloned(source, clone);
        clone
    }
}
