//! The intercepted program entry points, once for both modes: each takes the `Route` its
//! mode forwards through and the application's arguments. Each finds the implementation's
//! entry first, so that whatever goes wrong inside clshim afterwards (no state, a panic, a
//! nested call) the call is still forwarded unchanged, and exactly once. Each door
//! (`preload`, `layer`, `macos`) makes its C functions for them with `door_functions!`.

use crate::app_args::{AppArray, AppBuffer, AppBytes, AppCStr, OutArray, OutParam};
use crate::binary_load;
use crate::builds::{self, BuildCall, Entry};
use crate::cl::*;
use crate::dispatch::{Door, Route};
use crate::guard::{self, catch};
use crate::policy;
use crate::program_cache;
use crate::programs::Origin;
use crate::runtime;
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
pub unsafe fn build_program<D: Door>(
    program: cl_program,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
) -> cl_int {
    let route = D::route();
    let mut program = program;
    let mut fallback = None;
    let mut not_served = None;
    if let Some(h) = program_cache::find(program) {
        if let (Some(_inside), Some(rt)) = (guard::enter(), runtime::get(route)) {
            // SAFETY: the application's arguments, its program the handle.
            let build = unsafe {
                program_cache::serve_build(
                    rt,
                    route,
                    h,
                    num_devices,
                    device_list,
                    options,
                    pfn_notify,
                    user_data,
                )
            };
            match build {
                program_cache::Build::Answered(ret) => return ret,
                program_cache::Build::Driver(f, miss) => (fallback, not_served) = (f, miss),
            }
        }
        program = h.inner();
    }
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.build_program(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    // SAFETY: the application's device list and its count, read only once accepted.
    let devices = unsafe { AppArray::new(device_list, num_devices as usize) };
    let mut call = BuildCall::new(
        Entry::Build(real),
        program,
        std::ptr::null_mut(),
        devices,
        options,
    );
    let Some(_inside) = guard::enter() else {
        // SAFETY: the application's call, unchanged.
        return unsafe { call.forward(pfn_notify, user_data) }.0;
    };
    let rt = runtime::get(route);
    // A program recreated from a clshim binary builds with the options it recorded, as
    // a loaded binary keeps what it was built with.
    let loaded = rt.and_then(|rt| catch(|| rt.programs.loaded(program)).flatten());
    if loaded.as_ref().is_some_and(|l| l.linked) {
        // Already an executable (linked again at load).
        call.entry = Entry::Done;
    }
    let recorded = loaded
        .and_then(|l| l.options)
        .and_then(|o| std::ffi::CString::new(o).ok());
    if let Some(r) = &recorded {
        call.options = r.as_ptr();
        call.given_options = Some(options);
    }
    // With the program cache, ranks of a node share one compile of a program: this build
    // waits for a peer's, or compiles and publishes its own (program_cache::share).
    let began = crate::record::Start::now();
    // A program made again from a clshim binary's recipe builds with its recorded
    // options, as a source build of them: its compile is kept and taken as one.
    let remade = recorded.is_some() && !matches!(call.entry, Entry::Done);
    let mut turn = rt.filter(|_| recorded.is_none() || remade).and_then(|rt| {
        catch(|| {
            // SAFETY: the application's program and the options it builds with (its own, or
            // the recorded ones, which outlive the call), accepted so far as clshim can
            // tell; the device list is read within its count.
            unsafe {
                program_cache::share::before_build(
                    rt,
                    route,
                    program,
                    &call.devices,
                    call.options,
                    remade,
                )
            }
        })
        .flatten()
    });
    if let Some(t) = &mut turn {
        call.shared = Some(t.note());
        call.began = Some(began);
    }
    // SAFETY: the application's call (with the recorded options, which outlive it).
    let ret = unsafe { builds::run(rt, route, call, pfn_notify, user_data, not_served) }.0;
    if let Some(t) = turn {
        catch(|| t.after(ret));
    }
    if let Some(f) = fallback {
        // SAFETY: the application's options, of a call that has not returned.
        catch(|| unsafe { program_cache::after_fallback(route, f, ret, options) });
    }
    ret
}

/// # Safety
/// The application's arguments to `clCompileProgram`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn compile_program<D: Door>(
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
    let route = D::route();
    let program = program_cache::resolve(program);
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.compile_program(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    let n = num_input_headers as usize;
    // Header programs that are handles go down as the driver's programs (a copy of the
    // array, alive for the call).
    // SAFETY: the application's array of `n` headers, as OpenCL requires.
    let taken_back = unsafe { handles_taken_back(input_headers, n) };
    let input_headers = taken_back.as_ref().map_or(input_headers, |v| v.as_ptr());
    // SAFETY: the application's arrays and their counts, read only once accepted.
    let call = unsafe {
        BuildCall {
            headers: AppArray::new(input_headers, n),
            header_names: AppArray::new(header_include_names, n),
            ..BuildCall::new(
                Entry::Compile(real),
                program,
                std::ptr::null_mut(),
                AppArray::new(device_list, num_devices as usize),
                options,
            )
        }
    };
    let Some(_inside) = guard::enter() else {
        // SAFETY: the application's call, unchanged.
        return unsafe { call.forward(pfn_notify, user_data) }.0;
    };
    // SAFETY: the application's call.
    unsafe {
        builds::run(
            runtime::get(route),
            route,
            call,
            pfn_notify,
            user_data,
            None,
        )
    }
    .0
}

/// # Safety
/// The application's arguments to `clLinkProgram`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn link_program<D: Door>(
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
    let route = D::route();
    // SAFETY: the application's `errcode_ret`, which OpenCL requires to be NULL or writable.
    let errcode = unsafe { OutParam::new(errcode_ret) };
    // SAFETY: the application's context, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.link_program(context) }) else {
        errcode.set(missing(context, CL_INVALID_CONTEXT));
        return std::ptr::null_mut();
    };
    // SAFETY: the application's array of input programs, as OpenCL requires.
    let taken_back = unsafe { handles_taken_back(input_programs, num_input_programs as usize) };
    let input_programs = taken_back.as_ref().map_or(input_programs, |v| v.as_ptr());
    let Some(_inside) = guard::enter() else {
        // SAFETY: the application's own call, handed on unchanged.
        return unsafe {
            real(
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
        };
    };
    // The input programs are read only once the implementation has accepted the link:
    // a count beyond the array is its to refuse.
    // SAFETY: the application's arrays and their counts, read only once accepted.
    let call = unsafe {
        BuildCall {
            inputs: AppArray::new(input_programs, num_input_programs as usize),
            ..BuildCall::new(
                Entry::Link(real),
                std::ptr::null_mut(),
                context,
                AppArray::new(device_list, num_devices as usize),
                options,
            )
        }
    };
    // SAFETY: the application's call.
    let (err, program) = unsafe {
        builds::run(
            runtime::get(route),
            route,
            call,
            pfn_notify,
            user_data,
            None,
        )
    };
    errcode.set(err);
    program_cache::forget_reused(program);
    program
}

/// A copy of `programs` (the application's array of `n`) with every program cache handle
/// replaced by the driver's program it stands for; None when none is a handle (or no
/// handle exists), so the application's array goes down as it is.
///
/// # Safety
/// `programs` is NULL or holds `n` programs, as OpenCL requires of the call's array.
unsafe fn handles_taken_back(programs: *const cl_program, n: usize) -> Option<Vec<cl_program>> {
    if programs.is_null() || n == 0 || !program_cache::handles::any() {
        return None;
    }
    // SAFETY: `n` programs (this function's contract).
    let all = unsafe { AppArray::new(programs, n).read() };
    all.iter()
        .any(|&p| program_cache::find(p).is_some())
        .then(|| all.iter().map(|&p| program_cache::resolve(p)).collect())
}

/// # Safety
/// The application's arguments to `clGetProgramInfo`.
pub unsafe fn get_program_info<D: Door>(
    program: cl_program,
    param: cl_program_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    let route = D::route();
    let handle = program_cache::find(program);
    let program = handle.map_or(program, |h| h.inner());
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.get_program_info(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    if let Some(h) = handle {
        // SAFETY: the application's query on its handle.
        if let Some(ret) = unsafe { handle_info(route, h, param, size, value, size_ret) } {
            return ret;
        }
    }
    // The hot path: every other query, and size-only binary queries (which compile nothing),
    // go straight through.
    if (param != CL_PROGRAM_BINARY_SIZES && param != CL_PROGRAM_BINARIES) || value.is_null() {
        // SAFETY: the application's own call, handed on unchanged.
        return unsafe { real(program, param, size, value, size_ret) };
    }
    let Some(_inside) = guard::enter() else {
        // SAFETY: the application's own call, handed on unchanged.
        return unsafe { real(program, param, size, value, size_ret) };
    };
    let Some(rt) = runtime::get(route) else {
        // SAFETY: the application's own call, handed on unchanged.
        return unsafe { real(program, param, size, value, size_ret) };
    };
    // SAFETY: the application's `param_value` of `size` bytes and its
    // `param_value_size_ret`, which OpenCL requires to be writable (or NULL).
    let (value, size_ret) = unsafe { (AppBuffer::new(value, size), OutParam::new(size_ret)) };
    // SAFETY: the application's program.
    let query = unsafe { policy::Query::start(rt, route, program, param) };
    if query.forwards_all() {
        // SAFETY: the application's own call, handed on unchanged.
        let ret = unsafe { real(program, param, size, value.as_ptr(), size_ret.as_ptr()) };
        let sizes = (ret == CL_SUCCESS && param == CL_PROGRAM_BINARY_SIZES)
            .then(|| value.first::<usize>(query.devices()))
            .flatten();
        query.finish(ret, None, sizes);
        return ret;
    }
    // CL_PROGRAM_BINARIES: the application's buffer for each device, if `size` holds them.
    let app_binaries = if param == CL_PROGRAM_BINARIES {
        value.first::<*mut u8>(query.devices()).unwrap_or_default()
    } else {
        Vec::new()
    };
    // SAFETY: the application's program and buffers, which OpenCL requires to hold the size
    // the implementation reports for each device.
    match unsafe { query.answer(real, program, size, &app_binaries) } {
        Ok(answer) => {
            if let Some(sizes) = &answer.sizes {
                let bytes: Vec<u8> = sizes.iter().flat_map(|s| s.to_ne_bytes()).collect();
                value.write(&bytes);
            }
            for (i, binary) in &answer.binaries {
                // SAFETY: the application's buffer for device `i`, non-NULL, which OpenCL
                // requires to hold the size clshim reported for it: this binary's length.
                let dst = unsafe { AppBuffer::new(app_binaries[*i] as *mut c_void, binary.len()) };
                dst.write(binary);
            }
            size_ret.set(answer.size_ret);
            query.finish(CL_SUCCESS, Some(answer), None);
            CL_SUCCESS
        }
        Err(ret) => {
            query.finish(ret, None, None);
            ret
        }
    }
}

/// What a handle answers itself (the application's references, and the source its
/// program was created from); None: the driver's program answers.
///
/// # Safety
/// The application's query arguments; the handle's program is live.
unsafe fn handle_info(
    route: Route,
    h: &program_cache::handles::Handle,
    param: cl_program_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> Option<cl_int> {
    match param {
        CL_PROGRAM_REFERENCE_COUNT => {
            // SAFETY: live (this function's contract).
            let n = unsafe { h.reference_count(route) }?;
            let bytes = n.to_ne_bytes();
            if !value.is_null() && size < bytes.len() {
                return Some(CL_INVALID_VALUE);
            }
            // SAFETY: the application's buffer of `size` bytes and its size_ret.
            let (value, size_ret) =
                unsafe { (AppBuffer::new(value, size), OutParam::new(size_ret)) };
            value.write(&bytes);
            size_ret.set(bytes.len());
            Some(CL_SUCCESS)
        }
        CL_PROGRAM_SOURCE => match h.source_answer()? {
            Ok(source) => {
                // SAFETY: the source program, held: its own answer.
                let f = unsafe { route.get_program_info(source) }?;
                // SAFETY: the application's arguments, on the program it created.
                Some(unsafe { f(source, param, size, value, size_ret) })
            }
            // The source program's answer, kept when clshim let go of it.
            // SAFETY: the application's buffer of `size` bytes and its size_ret.
            Err(answer) => Some(unsafe { answer_bytes(&answer, size, value, size_ret) }),
        },
        _ => None,
    }
}

/// `clGetProgramBuildInfo`: forwarded, and for `CL_PROGRAM_BINARY_TYPE` on a program clshim
/// recreated from a clshim binary of an executable (a source program until the
/// application builds it) answered as the implementation answers for a loaded executable.
/// Everything else, and every call before any program was recreated, goes straight through.
///
/// # Safety
/// The application's arguments to `clGetProgramBuildInfo`.
pub unsafe fn get_program_build_info<D: Door>(
    program: cl_program,
    device: cl_device_id,
    param: cl_program_build_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    let route = D::route();
    let handle = program_cache::find(program);
    let program = handle.map_or(program, |h| h.inner());
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.get_program_build_info(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    if param == CL_PROGRAM_BUILD_LOG {
        // A served build answers the log its source build gave.
        if let Some(log) = handle.and_then(|h| catch(|| h.served_log(device)).flatten()) {
            // SAFETY: the application's buffer of `size` bytes and its size_ret.
            return unsafe { answer_bytes(&log, size, value, size_ret) };
        }
    }
    // SAFETY: the application's own call, handed on unchanged.
    let ret = unsafe { real(program, device, param, size, value, size_ret) };
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
    // SAFETY: the application's `param_value` of `size` bytes, which the implementation
    // just wrote the binary type into.
    let value = unsafe { AppBuffer::new(value, size) };
    catch(|| {
        let executable = rt.programs.loaded(program).is_some_and(|l| l.executable);
        if executable && value.get::<cl_uint>(0) == Some(CL_PROGRAM_BINARY_TYPE_NONE) {
            value.set::<cl_uint>(0, CL_PROGRAM_BINARY_TYPE_EXECUTABLE);
        }
    });
    ret
}

/// # Safety
/// The application's arguments to `clCreateProgramWithBinary`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create_program_with_binary<D: Door>(
    context: cl_context,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut cl_int,
    errcode_ret: *mut cl_int,
) -> cl_program {
    let route = D::route();
    // SAFETY: the application's `errcode_ret`, which OpenCL requires to be NULL or writable.
    let errcode = unsafe { OutParam::new(errcode_ret) };
    // SAFETY: the application's context, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.create_program_with_binary(context) }) else {
        errcode.set(missing(context, CL_INVALID_CONTEXT));
        return std::ptr::null_mut();
    };
    let forward = || {
        // SAFETY: the application's own call, handed on unchanged.
        unsafe {
            real(
                context,
                num_devices,
                device_list,
                lengths,
                binaries,
                binary_status,
                errcode_ret,
            )
        }
    };
    let Some(_inside) = guard::enter() else {
        return forward();
    };
    let Some(rt) = runtime::get(route) else {
        return forward();
    };
    let n = num_devices as usize;
    // SAFETY: the application's arrays with their count; `binary_load` reads them only once
    // the implementation accepted the call.
    let call = unsafe {
        binary_load::BinaryCall {
            context,
            devices: AppArray::new(device_list, n),
            lengths: AppArray::new(lengths, n),
            binaries: AppArray::new(binaries, n),
        }
    };
    // SAFETY: the application's arguments; `real` its implementation's entry point.
    let created = unsafe { binary_load::create_with_binary(rt, route, real, &call, binary_status) };
    if let Some(statuses) = &created.statuses {
        // SAFETY: statuses come back only for a call whose `num_devices` devices the
        // implementation accepted (or refused only for their binaries), for which OpenCL
        // requires `binary_status` to be NULL or hold one status per device.
        let out = unsafe { OutArray::new(binary_status, n) };
        for (i, &s) in statuses.iter().enumerate() {
            out.set(i, s);
        }
    }
    errcode.set(created.errcode);
    program_cache::forget_reused(created.program);
    created.program
}

/// The source strings as OpenCL defines them (a length of 0, or no lengths array, means
/// NUL-terminated).
///
/// # Safety
/// The implementation made a program from these strings (so there are as many as the
/// count says, each NUL-terminated or as long as its length), and the call has not returned.
unsafe fn source_parts<'a>(
    strings: AppArray<*const c_char>,
    lengths: AppArray<usize>,
) -> Vec<&'a [u8]> {
    // SAFETY: accepted by the implementation (this function's contract).
    let (strings, lengths) = unsafe { (strings.read(), lengths.read()) };
    let mut parts = Vec::with_capacity(strings.len());
    for (i, &s) in strings.iter().enumerate() {
        if s.is_null() {
            continue;
        }
        let part = match lengths.get(i) {
            // SAFETY: a string of `l` bytes that the implementation accepted, read before
            // the call returns (this function's contract).
            Some(&l) if l != 0 => unsafe { AppBytes::new(s as *const u8, l) }.whole(),
            // SAFETY: a string given without a length is NUL-terminated (OpenCL's rule, which
            // the implementation that accepted it relied on too), read before the call
            // returns (this function's contract).
            _ => unsafe { AppCStr::new(s) }.bytes(),
        };
        // None only for a length no slice can have; the implementation took it all the same.
        parts.extend(part);
    }
    parts
}

/// # Safety
/// The application's arguments to `clCreateProgramWithSource`.
pub unsafe fn create_program_with_source<D: Door>(
    context: cl_context,
    count: cl_uint,
    strings: *const *const c_char,
    lengths: *const usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    let route = D::route();
    // SAFETY: the application's context, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.create_program_with_source(context) }) else {
        // SAFETY: the application's `errcode_ret`: NULL or writable.
        unsafe { OutParam::new(errcode_ret) }.set(missing(context, CL_INVALID_CONTEXT));
        return std::ptr::null_mut();
    };
    // SAFETY: the application's own call, handed on unchanged.
    let program = unsafe { real(context, count, strings, lengths, errcode_ret) };
    if !strings.is_null() {
        // SAFETY: the application's arrays with their count, read (by `source_parts`) only
        // if the implementation made a program of them.
        let (strings, lengths) = unsafe {
            (
                AppArray::new(strings, count as usize),
                AppArray::new(lengths, count as usize),
            )
        };
        let registered = register_created(route, program, Origin::Source, || {
            // SAFETY: called only for the program the implementation made of them.
            unsafe { source_parts(strings, lengths) }
        });
        if let (Some(rt), Some(info)) = (runtime::existing(), registered) {
            if rt.config.program_cache {
                let wrapped = catch(|| {
                    let source = || {
                        // SAFETY: the strings of the program just made, not yet returned.
                        unsafe { source_parts(strings, lengths) }.concat()
                    };
                    let table = D::program_handle_table();
                    program_cache::maybe_wrap(rt, route, program, context, info.hash, source, table)
                });
                return wrapped.unwrap_or(program);
            }
        }
    }
    program
}

/// Enters a program the implementation just made into the registry, with the hash and
/// length of the parts `made_from` gives (what it was made from), and returns its entry.
/// Never disturbs the call: nothing happens for a failed creation, a nested call or an
/// internal failure.
fn register_created<'a>(
    route: Route,
    program: cl_program,
    origin: Origin,
    made_from: impl FnOnce() -> Vec<&'a [u8]>,
) -> Option<crate::programs::ProgramInfo> {
    if program.is_null() {
        return None;
    }
    program_cache::forget_reused(program);
    let _inside = guard::enter()?;
    let rt = runtime::get(route)?;
    catch(|| rt.programs.made_from(program, origin, &made_from()))
}

/// # Safety
/// The application's arguments to `clCreateProgramWithIL`.
pub unsafe fn create_program_with_il<D: Door>(
    context: cl_context,
    il: *const c_void,
    length: usize,
    errcode_ret: *mut cl_int,
) -> cl_program {
    let route = D::route();
    // SAFETY: the application's context, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.create_program_with_il(context) }) else {
        // SAFETY: the application's `errcode_ret`: NULL or writable.
        unsafe { OutParam::new(errcode_ret) }.set(missing(context, CL_INVALID_CONTEXT));
        return std::ptr::null_mut();
    };
    // SAFETY: the application's own call, handed on unchanged.
    let program = unsafe { real(context, il, length, errcode_ret) };
    if !il.is_null() && length <= isize::MAX as usize {
        let _ = register_created(route, program, Origin::Il, || {
            // SAFETY: called only for a program the implementation made of these `length`
            // bytes (so they are readable), before the call returns.
            unsafe { AppBytes::new(il as *const u8, length) }
                .whole()
                .into_iter()
                .collect()
        });
    }
    program
}

/// # Safety
/// The application's argument to `clReleaseProgram`.
pub unsafe fn release_program<D: Door>(program: cl_program) -> cl_int {
    let route = D::route();
    if let Some(h) = program_cache::find(program) {
        // SAFETY: the handle's programs, which clshim holds.
        return catch(|| unsafe { h.release(route) }).unwrap_or(CL_SUCCESS);
    }
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.release_program(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    // Only a process that has state has entries to forget.
    let Some(rt) = runtime::existing() else {
        // SAFETY: the application's own call, handed on unchanged.
        return unsafe { real(program) };
    };
    // SAFETY: the application's program, asked before it is released.
    let last = catch(|| unsafe { crate::query::reference_count(route, program) } == Some(1))
        .unwrap_or(false);
    // SAFETY: the application's own call, handed on unchanged.
    let ret = unsafe { real(program) };
    if ret == CL_SUCCESS && last {
        catch(|| rt.programs.released(program));
    }
    ret
}

/// `clRetainProgram`: counted on a program cache handle, else forwarded.
///
/// # Safety
/// The application's argument to `clRetainProgram`.
pub unsafe fn retain_program<D: Door>(program: cl_program) -> cl_int {
    let route = D::route();
    if let Some(h) = program_cache::find(program) {
        // SAFETY: the handle's program is live while the application may retain it.
        return catch(|| unsafe { h.retain(route) }).unwrap_or(CL_SUCCESS);
    }
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.retain_program(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    // SAFETY: the application's own call, handed on unchanged.
    unsafe { real(program) }
}

/// `clSetProgramReleaseCallback`: forwarded, on the driver's program a handle stands for.
///
/// # Safety
/// The application's arguments to `clSetProgramReleaseCallback`.
pub unsafe fn set_program_release_callback<D: Door>(
    program: cl_program,
    pfn_notify: BuildNotify,
    user_data: *mut c_void,
) -> cl_int {
    let route = D::route();
    let program = program_cache::resolve(program);
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.set_program_release_callback(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    // SAFETY: the application's call, on the driver's program.
    unsafe { real(program, pfn_notify, user_data) }
}

/// `clSetProgramSpecializationConstant`: forwarded, on the driver's program a handle
/// stands for.
///
/// # Safety
/// The application's arguments to `clSetProgramSpecializationConstant`.
pub unsafe fn set_program_specialization_constant<D: Door>(
    program: cl_program,
    spec_id: cl_uint,
    spec_size: usize,
    spec_value: *const c_void,
) -> cl_int {
    let route = D::route();
    let program = program_cache::resolve(program);
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.set_program_specialization_constant(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    // SAFETY: the application's call, on the driver's program.
    unsafe { real(program, spec_id, spec_size, spec_value) }
}

/// Answers an info query with `bytes` as a driver does: the size always, the bytes when
/// the buffer holds them, CL_INVALID_VALUE when it is too small.
///
/// # Safety
/// `value` is NULL or `size` writable bytes; `size_ret` NULL or writable.
unsafe fn answer_bytes(
    bytes: &[u8],
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    if !value.is_null() && size < bytes.len() {
        return CL_INVALID_VALUE;
    }
    // SAFETY: this function's contract.
    let (value, size_ret) = unsafe { (AppBuffer::new(value, size), OutParam::new(size_ret)) };
    value.write(bytes);
    size_ret.set(bytes.len());
    CL_SUCCESS
}

/// `clGetKernelInfo`: forwarded; `CL_KERNEL_PROGRAM` names the program as the
/// application knows it (a program cache handle, where one stands for it), and a kernel
/// of a served build answers `CL_KERNEL_ATTRIBUTES` as its source build did.
///
/// # Safety
/// The application's arguments to `clGetKernelInfo`.
pub unsafe fn get_kernel_info<D: Door>(
    kernel: cl_kernel,
    param: cl_uint,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    let route = D::route();
    // SAFETY: the application's kernel, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.get_kernel_info(kernel) }) else {
        return missing(kernel, CL_INVALID_KERNEL);
    };
    if param == CL_KERNEL_ATTRIBUTES && program_cache::handles::any() {
        // SAFETY: the application's kernel, asked through its own entry.
        let served = catch(|| unsafe { served_attributes(route, kernel) }).flatten();
        if let Some(attributes) = served {
            let mut text = attributes;
            text.push(0);
            // SAFETY: the application's buffer of `size` bytes and its size_ret.
            return unsafe { answer_bytes(&text, size, value, size_ret) };
        }
    }
    // SAFETY: the application's own call, handed on unchanged.
    let ret = unsafe { real(kernel, param, size, value, size_ret) };
    if ret == CL_SUCCESS && param == CL_KERNEL_PROGRAM && program_cache::handles::any() {
        // SAFETY: the application's buffer, into which the driver just wrote a program.
        let value = unsafe { AppBuffer::new(value, size) };
        catch(|| {
            if let Some(p) = value.get::<cl_program>(0) {
                value.set::<cl_program>(0, program_cache::app_handle(p));
            }
        });
    }
    ret
}

/// The attributes a served build answers for `kernel`, if its program is one.
///
/// # Safety
/// `kernel` is a live kernel reachable through `route`.
unsafe fn served_attributes(route: Route, kernel: cl_kernel) -> Option<Vec<u8>> {
    // SAFETY: this function's contract.
    let (name, program) = unsafe { crate::query::kernel_facts(route, kernel) };
    program_cache::handles::served_attributes(program?, name?.as_bytes())
}

// ---------------------------------------------------------------------------------------
// Kernel launches and kernel creation (first launches: `launches`).

/// # Safety
/// The application's argument to `clReleaseCommandQueue`.
pub unsafe fn release_command_queue<D: Door>(queue: cl_command_queue) -> cl_int {
    let route = D::route();
    // SAFETY: the application's queue, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.release_command_queue(queue) }) else {
        return missing(queue, CL_INVALID_COMMAND_QUEUE);
    };
    // Before the release: once it is the last, a queue made at this address is another.
    crate::launches::queue_releasing(queue);
    // SAFETY: the application's own call, handed on unchanged.
    unsafe { real(queue) }
}

/// # Safety
/// The application's arguments to `clEnqueueNDRangeKernel`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub unsafe fn enqueue_nd_range_kernel<D: Door>(
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
    // One indirect call at the end, its arguments as they came, to the implementation for
    // a launch already seen and to the slow path for anything else (a missing entry
    // included): the call is then a jump, and the check before it touches neither the
    // stack nor the stack-passed arguments. The implementation's entry is taken after the
    // check, so that the check has the registers the call may clobber to itself.
    // SAFETY: the application's arguments (`global` and `local` NULL or of `work_dim`
    // sizes, as OpenCL requires).
    let seen = unsafe { crate::launches::already_seen(queue, kernel, work_dim, global, local) };
    // SAFETY: the application's queue, whose dispatch the door knows how to find.
    let entry = || unsafe { D::nd_range_entry(queue) };
    let target: FnEnqueueNDRangeKernel = match seen.then(entry) {
        Some(Some(real)) => real,
        _ => not_seen_nd_range::<D>,
    };
    // SAFETY: the application's own call, handed on unchanged (to the implementation, or
    // to the slow path, which takes the same arguments in the same convention).
    unsafe {
        target(
            queue, kernel, work_dim, offset, global, local, num_events, wait_list, event,
        )
    }
}

/// A `clEnqueueNDRangeKernel` that `launches::already_seen` could not tell seen.
///
/// # Safety
/// The application's arguments to `clEnqueueNDRangeKernel`.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
unsafe extern "C" fn not_seen_nd_range<D: Door>(
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
    let route = D::route();
    // SAFETY: the application's queue, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.enqueue_nd_range_kernel(queue) }) else {
        return missing(queue, CL_INVALID_COMMAND_QUEUE);
    };
    // SAFETY: the application's arguments (`global` and `local` NULL or of `work_dim`
    // sizes, as OpenCL requires); the closure makes the application's own call, with the
    // event out-parameter `launches` passes down (the application's or clshim's).
    unsafe {
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
pub unsafe fn enqueue_task<D: Door>(
    queue: cl_command_queue,
    kernel: cl_kernel,
    num_events: cl_uint,
    wait_list: *const cl_event,
    event: *mut cl_event,
) -> cl_int {
    let route = D::route();
    // SAFETY: the application's queue, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.enqueue_task(queue) }) else {
        return missing(queue, CL_INVALID_COMMAND_QUEUE);
    };
    let one = crate::launches::TASK_SIZE.as_ptr();
    // SAFETY: the application's kernel and queue, with a task's one-dimensional size of 1.
    if unsafe { crate::launches::already_seen(queue, kernel, 1, one, one) } {
        // SAFETY: the application's own call, handed on unchanged.
        return unsafe { real(queue, kernel, num_events, wait_list, event) };
    }
    // SAFETY: the application's arguments, with a task's one-dimensional size of 1 (a
    // static); the closure makes the application's own call, with the event out-parameter
    // `launches` passes down.
    unsafe {
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
pub unsafe fn create_kernel<D: Door>(
    program: cl_program,
    name: *const c_char,
    errcode_ret: *mut cl_int,
) -> cl_kernel {
    let route = D::route();
    let program = program_cache::resolve(program);
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.create_kernel(program) }) else {
        // SAFETY: the application's `errcode_ret`: NULL or writable.
        unsafe { OutParam::new(errcode_ret) }.set(missing(program, CL_INVALID_PROGRAM));
        return std::ptr::null_mut();
    };
    // SAFETY: the application's own call, handed on unchanged.
    let kernel = unsafe { real(program, name, errcode_ret) };
    // SAFETY: `name` is NULL or a C string, `program` NULL or live (the application's
    // arguments of a call that just returned, not yet to the application).
    unsafe { crate::launches::kernel_created(route, program, name, kernel) };
    kernel
}

/// # Safety
/// The application's arguments to `clCreateKernelsInProgram`.
pub unsafe fn create_kernels_in_program<D: Door>(
    program: cl_program,
    num_kernels: cl_uint,
    kernels: *mut cl_kernel,
    num_kernels_ret: *mut cl_uint,
) -> cl_int {
    let route = D::route();
    let program = program_cache::resolve(program);
    // SAFETY: the application's program, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.create_kernels_in_program(program) }) else {
        return missing(program, CL_INVALID_PROGRAM);
    };
    // SAFETY: the application's own call, handed on unchanged.
    let ret = unsafe { real(program, num_kernels, kernels, num_kernels_ret) };
    if ret == CL_SUCCESS && !kernels.is_null() {
        catch(|| {
            // SAFETY: the application's `num_kernels_ret` (NULL or writable, as OpenCL
            // requires), which the implementation just wrote when given: it succeeded.
            let said = unsafe { OutParam::new(num_kernels_ret).written() };
            // SAFETY: the program is live: the call succeeded on it.
            let n = unsafe { crate::launches::kernels_written(route, program, said, num_kernels) };
            // SAFETY: the implementation wrote `n` (at most `num_kernels`) kernels into the
            // application's array of `num_kernels`.
            let made = unsafe { AppArray::new(kernels as *const cl_kernel, n).read() };
            crate::launches::kernels_created(&made);
        });
    }
    ret
}

/// # Safety
/// The application's arguments to `clCloneKernel`.
pub unsafe fn clone_kernel<D: Door>(source: cl_kernel, errcode_ret: *mut cl_int) -> cl_kernel {
    let route = D::route();
    // SAFETY: the application's kernel, whose dispatch `route` knows how to find.
    let Some(real) = (unsafe { route.clone_kernel(source) }) else {
        // SAFETY: the application's `errcode_ret`: NULL or writable.
        unsafe { OutParam::new(errcode_ret) }.set(missing(source, CL_INVALID_KERNEL));
        return std::ptr::null_mut();
    };
    // SAFETY: the application's own call, handed on unchanged.
    let clone = unsafe { real(source, errcode_ret) };
    crate::launches::kernel_cloned(source, clone);
    clone
}

/// Makes a door's C functions from rows of `entry_points::table!`: each takes the
/// application's arguments and hands them, with the door's route, to the function of this
/// module that bears the row's accessor name. The door's arguments are the functions'
/// attributes and the door, the type whose `Door::route` names where its calls go:
/// `door_functions { #[no_mangle] door: Preload }`. Each `intercept` entry takes its route
/// from the door type rather than as an argument, so that a function can hand the
/// application's arguments on exactly as they came (a launch's slow path is then a jump).
macro_rules! door_functions {
    ($with:tt $($slot:literal => fn $name:ident $args:tt -> $ret:ty
        as $ty:ident, $acc:ident;)*) => {
        $($crate::intercept::door_functions!(@one $with $name $args $ret, $acc);)*
    };
    (@one [$(#[$attr:meta])* door: $door:ty]
        $name:ident ($($arg:ident: $argty:ty),* $(,)?) $ret:ty, $acc:ident) => {
        $(#[$attr])*
        #[allow(non_snake_case, clippy::too_many_arguments, clippy::missing_safety_doc)]
        pub unsafe extern "C" fn $name($($arg: $argty),*) -> $ret {
            // SAFETY: the application's arguments, valid as the OpenCL API requires of it;
            // passed on to `intercept`, which reads no more than the implementation would.
            unsafe { $crate::intercept::$acc::<$door>($($arg),*) }
        }
    };
}
pub(crate) use door_functions;
