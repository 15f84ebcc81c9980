//! Making a program again from its recipe (`recipe`): the source or IL program of a build
//! recipe, not yet built; a compiled object compiled again with its headers; a library or
//! linked executable from its inputs, each made once. Shared by the loads of clshim
//! binaries (`binary_load`) and the warm step's worker (`store::warm`), which both hold a
//! recipe and a context and need the implementation's program of it.

use crate::cl::*;
use crate::dispatch::Route;
use crate::owned_program::OwnedProgram;
use crate::query;
use crate::recipe::{Kind, Recipe, Text};
use std::ffi::{c_char, c_void, CString};
use std::sync::Arc;

/// A NUL-terminated copy of options (the recipe's rules exclude NUL bytes).
pub(crate) fn c_options(options: &Option<Vec<u8>>) -> CString {
    CString::new(options.clone().unwrap_or_default()).unwrap_or_default()
}

/// Makes a program from a recipe's text (source or IL), not yet built.
///
/// # Safety
/// `context` is a valid context (the implementation accepted it).
unsafe fn from_text(
    route: Route,
    context: cl_context,
    text: &Text,
) -> Result<OwnedProgram, String> {
    let mut err = CL_INVALID_OPERATION;
    let program = match text {
        Text::Source(src) => {
            // SAFETY: a valid context (this function's contract).
            let create: FnCreateProgramWithSource =
                unsafe { route.create_program_with_source(context) }
                    .ok_or("no clCreateProgramWithSource")?;
            let ptr = src.as_ptr() as *const c_char;
            let len = src.len();
            // SAFETY: one string of `len` bytes, clshim's own, alive for the call.
            unsafe { create(context, 1, &ptr, &len, &mut err) }
        }
        Text::Il(il) => {
            // SAFETY: a valid context (this function's contract).
            let create: FnCreateProgramWithIL = unsafe { route.create_program_with_il(context) }
                .ok_or("the implementation has no clCreateProgramWithIL")?;
            // SAFETY: clshim's own IL bytes, alive for the call.
            unsafe { create(context, il.as_ptr() as *const c_void, il.len(), &mut err) }
        }
        Text::None => return Err("no text".into()),
    };
    if program.is_null() {
        return Err(format!("making the program failed ({})", status_name(err)));
    }
    // SAFETY: the live program the implementation just made for clshim, never handed out.
    Ok(unsafe { OwnedProgram::new(route, program) })
}

/// Makes the program a recipe describes again, for `devices` of `context`: a build
/// recipe becomes a program from its text (built later, by the application's
/// `clBuildProgram`, with the recorded options); a compiled object is compiled again with
/// its headers and options; a link compiles and links its inputs again, each distinct
/// input once however many links share it, and is refused unless the implementation
/// makes of it what the recipe says (a library or an executable). Every program made on
/// the way that is not the result is released (each is an [`OwnedProgram`]); on failure
/// nothing is left.
///
/// # Safety
/// `context` is a valid context and `devices` distinct devices of it (the implementation
/// accepted them).
pub(crate) unsafe fn recreate(
    route: Route,
    context: cl_context,
    devices: &[cl_device_id],
    recipe: &Recipe,
) -> Result<OwnedProgram, String> {
    // The inputs made on the way, released when this returns.
    let mut made = std::collections::HashMap::new();
    // SAFETY: this function's contract.
    unsafe { recreate_part(route, context, devices, recipe, &mut made) }
}

/// One part of [`recreate`]: `made` holds the inputs made so far (by address of their
/// recipe), which the caller releases by dropping it.
///
/// # Safety
/// As for [`recreate`].
unsafe fn recreate_part(
    route: Route,
    context: cl_context,
    devices: &[cl_device_id],
    recipe: &Recipe,
    made: &mut std::collections::HashMap<*const Recipe, OwnedProgram>,
) -> Result<OwnedProgram, String> {
    let n = devices.len() as cl_uint;
    let options = c_options(&recipe.options);
    match recipe.kind {
        // SAFETY: a valid context (this function's contract).
        Kind::Built => unsafe { from_text(route, context, &recipe.text) },
        Kind::Compiled => {
            // SAFETY: a valid context (this function's contract).
            let program = unsafe { from_text(route, context, &recipe.text) }?;
            let mut headers = Vec::new();
            for h in &recipe.headers {
                // SAFETY: a valid context (this function's contract).
                match unsafe { from_text(route, context, &Text::Source(h.source.clone())) } {
                    Ok(p) => headers.push(p),
                    Err(e) => return Err(format!("header: {e}")),
                }
            }
            let header_handles: Vec<cl_program> = headers.iter().map(OwnedProgram::get).collect();
            let names: Vec<CString> = recipe
                .headers
                .iter()
                .map(|h| CString::new(h.name.clone()).unwrap_or_default())
                .collect();
            let name_ptrs: Vec<*const c_char> = names.iter().map(|c| c.as_ptr()).collect();
            let (header_list, name_list) = if headers.is_empty() {
                (std::ptr::null(), std::ptr::null())
            } else {
                (header_handles.as_ptr(), name_ptrs.as_ptr())
            };
            // SAFETY: the live program clshim just made.
            let ret = match unsafe { route.compile_program(program.get()) } {
                // SAFETY: the program's own entry; the devices of its context (this
                // function's contract); clshim's own options, headers and names, alive for
                // the call, with no callback.
                Some(compile) => unsafe {
                    compile(
                        program.get(),
                        n,
                        devices.as_ptr(),
                        options.as_ptr(),
                        headers.len() as cl_uint,
                        header_list,
                        name_list,
                        None,
                        std::ptr::null_mut(),
                    )
                },
                None => CL_INVALID_OPERATION,
            };
            // The header programs are no longer needed.
            drop(headers);
            if ret != CL_SUCCESS {
                return Err(format!("compiling it again failed ({})", status_name(ret)));
            }
            Ok(program)
        }
        Kind::Library | Kind::Linked => {
            let mut inputs = Vec::with_capacity(recipe.inputs.len());
            for i in &recipe.inputs {
                let key = Arc::as_ptr(i);
                let p = match made.get(&key) {
                    Some(p) => p.get(),
                    None => {
                        // SAFETY: the same context and devices (this function's contract).
                        let p = unsafe { recreate_part(route, context, devices, i, made) }?;
                        made.entry(key).or_insert(p).get()
                    }
                };
                inputs.push(p);
            }
            let mut err = CL_INVALID_OPERATION;
            // SAFETY: a valid context (this function's contract).
            let program = match unsafe { route.link_program(context) } {
                // SAFETY: the context's own entry, its devices, clshim's own options and
                // inputs (live programs it just made), with no callback.
                Some(link) => unsafe {
                    link(
                        context,
                        n,
                        devices.as_ptr(),
                        options.as_ptr(),
                        inputs.len() as cl_uint,
                        inputs.as_ptr(),
                        None,
                        std::ptr::null_mut(),
                        &mut err,
                    )
                },
                None => std::ptr::null_mut(),
            };
            // SAFETY: when not NULL, the live program the implementation just linked for
            // clshim, never handed out.
            let linked = (!program.is_null()).then(|| unsafe { OwnedProgram::new(route, program) });
            let program = match linked {
                Some(p) if err == CL_SUCCESS => p,
                _ => return Err(format!("linking it again failed ({})", status_name(err))),
            };
            let want = if recipe.kind == Kind::Library {
                CL_PROGRAM_BINARY_TYPE_LIBRARY
            } else {
                CL_PROGRAM_BINARY_TYPE_EXECUTABLE
            };
            // SAFETY: the live program clshim just linked, for devices of its context.
            let got: Vec<_> = devices
                .iter()
                .map(|&d| unsafe { query::binary_type(route, program.get(), d) })
                .collect();
            if got.iter().any(|t| *t != Some(want)) {
                return Err(format!(
                    "the implementation made no {} of the link's options",
                    recipe.kind.name()
                ));
            }
            Ok(program)
        }
    }
}
