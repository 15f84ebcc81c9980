//! Timing of `clBuildProgram`, `clCompileProgram` and `clLinkProgram`. A synchronous call
//! is timed from entry to return. When the application passes a callback, clshim passes
//! its own in its place; the time then runs until the callback fires, and the
//! application's callback runs exactly once, with its own user data, on whatever thread
//! the implementation chose. The record is written once, by whichever of "call returned"
//! and "callback fired" comes last, with the status the application saw.

use crate::cl::*;
use crate::dispatch::Route;
use crate::guard::{catch, outside};
use crate::programs::{Origin, ProgramInfo};
use crate::query;
use crate::record::{EventKind, Start};
use crate::runtime::Runtime;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// What is known about a build when it starts; completed into a record when it ends.
pub struct Pending {
    rt: &'static Runtime,
    route: Route,
    kind: EventKind,
    start: Start,
    /// The program built or compiled (NULL for a link until it returns one).
    program: cl_program,
    /// The devices the call named (empty: all of the program's).
    device_list: Vec<cl_device_id>,
    options: Option<String>,
    is_async: bool,
    /// Compile: the number of input headers. Link: the input programs' ids.
    extra: Value,
}

impl Pending {
    /// # Safety
    /// The pointers are the application's arguments to the intercepted call.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn new(
        rt: &'static Runtime,
        route: Route,
        kind: EventKind,
        program: cl_program,
        num_devices: cl_uint,
        device_list: *const cl_device_id,
        options: *const c_char,
        is_async: bool,
        extra: Value,
    ) -> Pending {
        let device_list = if num_devices > 0 && !device_list.is_null() {
            std::slice::from_raw_parts(device_list, num_devices as usize).to_vec()
        } else {
            Vec::new()
        };
        Pending {
            rt,
            route,
            kind,
            start: Start::now(),
            program,
            device_list,
            options: query::c_str(options),
            is_async,
            extra,
        }
    }

    /// The devices the call named, or the program's own when it named none.
    ///
    /// # Safety
    /// `program` must be NULL or live.
    unsafe fn devices(&self, program: cl_program) -> Vec<cl_device_id> {
        if !self.device_list.is_empty() {
            self.device_list.clone()
        } else if program.is_null() {
            Vec::new()
        } else {
            query::devices(self.route, program).unwrap_or_default()
        }
    }

    /// Writes the record for a call that ended with `result` after `seconds`; `program`
    /// is the program it made (links) or built.
    ///
    /// # Safety
    /// `program` must be NULL or live.
    pub unsafe fn finish(self, result: cl_int, seconds: f64, program: cl_program) {
        let rt = self.rt;
        let route = self.route;
        let program = if program.is_null() {
            self.program
        } else {
            program
        };
        let info: Option<ProgramInfo> = (!program.is_null()).then(|| match self.kind {
            EventKind::Link => rt.programs.created(program, Origin::Link, None, None),
            _ => rt.programs.lookup(program),
        });
        let devices = self.devices(program);
        let filter = rt.config.devices;
        let facts: Vec<_> = devices
            .iter()
            .filter_map(|&d| rt.devices.get(route, d))
            .collect();
        let devices_json: Vec<Value> = facts.iter().map(|f| f.to_json(filter)).collect();
        let kernels =
            if result == CL_SUCCESS && self.kind != EventKind::Compile && !program.is_null() {
                query::kernel_names(route, program)
            } else {
                Vec::new()
            };
        let call = match self.kind {
            EventKind::Build => "clBuildProgram",
            EventKind::Compile => "clCompileProgram",
            _ => "clLinkProgram",
        };
        let mut fields = json!({
            "call": call,
            "program": info.map(|i| i.id),
            "result": result,
            "result_name": status_name(result),
            "options": self.options,
            "async": self.is_async,
            "kernels": kernels,
            "devices": devices_json,
        });
        if self.kind != EventKind::Link {
            fields["source"] = info.map(|i| i.source_json()).unwrap_or(Value::Null);
        }
        if let Value::Object(extra) = self.extra {
            if let Value::Object(f) = &mut fields {
                f.extend(extra);
            }
        }
        let kind = self.kind;
        let device_text = facts
            .first()
            .map(|f| format!(" on {} ({})", f.name, f.platform))
            .unwrap_or_default();
        rt.recorder.emit(
            kind,
            self.start,
            seconds,
            fields,
            |t| {
                t.builds += 1;
                t.build_seconds += seconds;
            },
            || {
                let id = info.map(|i| i.id.to_string()).unwrap_or_else(|| "-".into());
                let names = if kernels.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", kernels.join(", "))
                };
                format!(
                    "{} of program {id}{names} took {seconds:.3} s{device_text} -> {}",
                    kind.name(),
                    status_name(result)
                )
            },
        );
    }
}

struct AsyncState {
    pending: Option<Pending>,
    /// Set when the callback fired before the call returned.
    fired_after: Option<f64>,
    returned: bool,
}

/// Everything clshim's callback needs: the application's callback and data, and the
/// record to complete.
pub struct AsyncBuild {
    user_fn: unsafe extern "C" fn(cl_program, *mut c_void),
    user_data: *mut c_void,
    start: Start,
    state: Mutex<AsyncState>,
}

// SAFETY: user_data is opaque to clshim and handed back to the application unchanged, on
// whatever thread the implementation calls back on, exactly as without clshim.
unsafe impl Send for AsyncBuild {}
unsafe impl Sync for AsyncBuild {}
unsafe impl Send for Pending {}

/// clshim's build callback: notes the time, completes the record if the call has already
/// returned, then runs the application's callback.
unsafe extern "C" fn on_build_done(program: cl_program, data: *mut c_void) {
    let ctx = Arc::from_raw(data as *const AsyncBuild);
    catch(|| {
        let seconds = ctx.start.elapsed().as_secs_f64();
        let mut st = ctx.state.lock();
        if st.returned {
            let pending = st.pending.take();
            drop(st);
            if let Some(p) = pending {
                // The call returned CL_SUCCESS and the build went on: its outcome is the
                // build status now.
                let route = p.route;
                let devices = p.devices(program);
                let ok = !devices.is_empty()
                    && devices.iter().all(|&d| query::built_for(route, program, d));
                let result = if ok {
                    CL_SUCCESS
                } else if p.kind == EventKind::Link {
                    -17 // CL_LINK_PROGRAM_FAILURE
                } else if p.kind == EventKind::Compile {
                    -15 // CL_COMPILE_PROGRAM_FAILURE
                } else {
                    CL_BUILD_PROGRAM_FAILURE
                };
                p.finish(result, seconds, program);
            }
        } else {
            st.fired_after = Some(seconds);
        }
    });
    outside(|| (ctx.user_fn)(program, ctx.user_data));
}

/// Runs `call` (the forwarded build, given the callback and data to pass down) and
/// records it. With no application callback the call is timed to its return.
///
/// # Safety
/// `call` must perform the forwarded call with the arguments it is given.
pub unsafe fn run(
    pending: Option<Pending>,
    user_fn: BuildNotify,
    user_data: *mut c_void,
    call: impl FnOnce(BuildNotify, *mut c_void) -> (cl_int, cl_program),
) -> (cl_int, cl_program) {
    let Some(pending) = pending else {
        return call(user_fn, user_data);
    };
    let Some(user_fn) = user_fn else {
        let (ret, program) = call(None, user_data);
        let seconds = pending.start.elapsed().as_secs_f64();
        catch(|| pending.finish(ret, seconds, program));
        return (ret, program);
    };
    let start = pending.start;
    let ctx = Arc::new(AsyncBuild {
        user_fn,
        user_data,
        start,
        state: Mutex::new(AsyncState {
            pending: Some(pending),
            fired_after: None,
            returned: false,
        }),
    });
    let raw = Arc::into_raw(ctx.clone());
    let (ret, program) = call(Some(on_build_done), raw as *mut c_void);
    catch(|| {
        let mut st = ctx.state.lock();
        st.returned = true;
        let finish = match st.fired_after {
            Some(seconds) => st.pending.take().map(|p| (p, seconds)),
            None if ret != CL_SUCCESS => st
                .pending
                .take()
                .map(|p| (p, start.elapsed().as_secs_f64())),
            None => None, // still building: the callback completes the record
        };
        let never_fires = st.fired_after.is_none() && refused_before_start(ret);
        drop(st);
        if never_fires {
            // The call was refused outright, so the callback's reference is ours to drop.
            // After other failures it stays with the implementation, which may still call.
            drop(Arc::from_raw(raw));
        }
        if let Some((p, seconds)) = finish {
            p.finish(ret, seconds, program);
        }
    });
    (ret, program)
}
