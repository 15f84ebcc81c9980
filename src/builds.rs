//! Timing of `clBuildProgram`, `clCompileProgram` and `clLinkProgram`. A synchronous call
//! is timed from entry to return. When the application passes a callback, clshim passes
//! its own in its place; the time then runs until the callback fires, and the
//! application's callback runs exactly once, with its own user data, on whatever thread
//! the implementation chose. The record is written once, by whichever of "call returned"
//! and "callback fired" comes last, with the status the application saw.
//!
//! Two rules keep this safe for applications that do legal but awkward things. The
//! application's arrays (device list, input programs) and option string are read only
//! once the implementation has accepted the call, and never beyond what it accepted, so a
//! count larger than its array is the driver's to answer, never clshim's to crash on.
//! Everything the record needs from the program (devices, build status, kernel names,
//! id) is gathered before the application's callback runs: the callback may release the
//! program or leave the process with `exit()`, so clshim never touches the program after
//! it, and a build whose callback exits is still recorded (at exit, with the status the
//! callback saw).

use crate::cl::*;
use crate::config::BinaryPolicy;
use crate::devices::DeviceFacts;
use crate::dispatch::Route;
use crate::guard::{catch, outside};
use crate::lock::Lock;
use crate::programs::{Origin, ProgramInfo};
use crate::query;
use crate::recipe::{Header, Kind, Recipe, Text};
use crate::record::Start;
use crate::runtime::Runtime;
use crate::schema::{self, Event};
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use std::time::Duration;

/// The application's arguments as raw pointers: not read until the call is accepted.
struct RawArgs {
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    num_inputs: cl_uint,
    inputs: *const cl_program,
    /// Compile: the headers and their include names.
    headers: *const cl_program,
    header_names: *const *const c_char,
    /// Build of a recreated program: the application's own options, replaced by
    /// `options` (the recorded ones).
    given_options: Option<*const c_char>,
}

/// What clshim copied of the application's arguments, once it could.
#[derive(Default)]
struct Copied {
    /// The devices the call named (empty: all of the program's).
    devices: Vec<cl_device_id>,
    options: Option<String>,
    /// Link: the input programs' ids.
    inputs: Vec<u64>,
    /// Under `substitute`: what the program's recipe needs from the call's arguments
    /// (compile: the headers; link: the inputs' recipes); None where a part is missing.
    headers: Option<Vec<Header>>,
    input_recipes: Option<Vec<Arc<Recipe>>>,
    /// The application's options when they were replaced (the outer Option: replaced).
    given: Option<Option<String>>,
}

/// Whether a call that returned `ret` was accepted by the implementation, so that every
/// device and input program it was given is valid and the arrays hold what the counts say.
fn accepted(ret: cl_int) -> bool {
    matches!(
        ret,
        CL_SUCCESS
            | CL_BUILD_PROGRAM_FAILURE
            | CL_COMPILE_PROGRAM_FAILURE
            | CL_LINK_PROGRAM_FAILURE
    )
}

/// Whether the implementation read the option string before answering `ret`.
fn options_read(ret: cl_int) -> bool {
    accepted(ret)
        || matches!(
            ret,
            CL_INVALID_BUILD_OPTIONS | CL_INVALID_COMPILER_OPTIONS | CL_INVALID_LINKER_OPTIONS
        )
}

/// What is known about a build when it starts; completed into a record when it ends.
pub struct Pending {
    rt: &'static Runtime,
    route: Route,
    kind: Event,
    start: Start,
    /// The program built or compiled (NULL for a link until it returns one).
    program: cl_program,
    raw: RawArgs,
    copied: Option<Copied>,
    is_async: bool,
    /// Compile: the number of input headers (a count, never read through).
    headers: Option<cl_uint>,
}

/// What clshim saw of the program when the call ended, gathered while it was alive.
pub struct Seen {
    info: Option<ProgramInfo>,
    facts: Vec<Arc<DeviceFacts>>,
    /// Whether every device built successfully (asked only when the callback fires).
    built: Option<bool>,
    kernels: Vec<String>,
}

impl Pending {
    /// The pointers are kept, not read (see [`Pending::copy_args`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rt: &'static Runtime,
        route: Route,
        kind: Event,
        program: cl_program,
        num_devices: cl_uint,
        device_list: *const cl_device_id,
        options: *const c_char,
        is_async: bool,
    ) -> Pending {
        Pending {
            rt,
            route,
            kind,
            start: Start::now(),
            program,
            raw: RawArgs {
                num_devices,
                device_list,
                options,
                num_inputs: 0,
                inputs: std::ptr::null(),
                headers: std::ptr::null(),
                header_names: std::ptr::null(),
                given_options: None,
            },
            copied: None,
            is_async,
            headers: None,
        }
    }

    /// A link's input programs (read only once the link is accepted).
    pub fn with_inputs(mut self, num_inputs: cl_uint, inputs: *const cl_program) -> Pending {
        self.raw.num_inputs = num_inputs;
        self.raw.inputs = inputs;
        self
    }

    /// A compile's input headers and their include names (read only once the compile is
    /// accepted, and only under `substitute`, for the program's recipe).
    pub fn with_headers(
        mut self,
        count: cl_uint,
        headers: *const cl_program,
        names: *const *const c_char,
    ) -> Pending {
        self.headers = Some(count);
        self.raw.headers = headers;
        self.raw.header_names = names;
        self
    }

    /// A build whose options clshim replaced: `given` is the application's string.
    pub fn with_replaced_options(mut self, given: *const c_char) -> Pending {
        self.raw.given_options = Some(given);
        self
    }

    /// The parts of a recipe that only the call's arguments show: a compile's headers
    /// (their include names and, asked of each header program, their source), a link's
    /// input recipes. None when any part cannot be had.
    ///
    /// # Safety
    /// The call was accepted and has not returned (its arrays are valid for their counts).
    unsafe fn recipe_parts(&self, c: &mut Copied) {
        // SAFETY: this function's contract.
        unsafe {
            let raw = &self.raw;
            match self.kind {
                Event::Compile => {
                    let n = self.headers.unwrap_or(0) as usize;
                    let mut out = Vec::with_capacity(n);
                    if n > 0 && (raw.headers.is_null() || raw.header_names.is_null()) {
                        return;
                    }
                    for i in 0..n {
                        let h = *raw.headers.add(i);
                        let name = query::c_str(*raw.header_names.add(i));
                        let source = query::source(self.route, h).filter(|s| !s.is_empty());
                        match (name, source) {
                            (Some(name), Some(source)) if !name.is_empty() => out.push(Header {
                                name: name.into_bytes(),
                                source,
                            }),
                            _ => return,
                        }
                    }
                    c.headers = Some(out);
                }
                Event::Link => {
                    if raw.num_inputs == 0 || raw.inputs.is_null() {
                        return;
                    }
                    let mut out = Vec::new();
                    for &p in std::slice::from_raw_parts(raw.inputs, raw.num_inputs as usize) {
                        match self.rt.programs.recipe(p) {
                            Some(r) if matches!(r.kind, Kind::Compiled | Kind::Library) => {
                                out.push(r)
                            }
                            _ => return,
                        }
                    }
                    c.input_recipes = Some(out);
                }
                _ => {}
            }
        }
    }

    /// Keeps the recipe of `program`, which this call just made successfully (under
    /// `substitute` only: no other policy writes clshim binaries).
    ///
    /// # Safety
    /// `program` is live.
    unsafe fn keep_recipe(&self, program: cl_program, origin: Option<Origin>) {
        // SAFETY: this function's contract.
        unsafe {
            let Some(c) = self.copied.as_ref() else {
                return;
            };
            let options = c.options.clone().unwrap_or_default().into_bytes();
            // Source first; a program made from IL (or recreated from one) has none.
            let il = || {
                query::il(self.route, program)
                    .filter(|t| !t.is_empty())
                    .map(Text::Il)
            };
            let text = || {
                if origin == Some(Origin::Il) {
                    return il();
                }
                query::source(self.route, program)
                    .filter(|t| !t.is_empty())
                    .map(Text::Source)
                    .or_else(il)
            };
            let recipe = match self.kind {
                Event::Build => text().map(|t| Recipe::built(t, options)),
                Event::Compile => match (text(), &c.headers) {
                    (Some(t), Some(h)) => Some(Recipe {
                        kind: Kind::Compiled,
                        options: Some(options),
                        text: t,
                        headers: h.clone(),
                        inputs: Vec::new(),
                    }),
                    _ => None,
                },
                _ => c.input_recipes.as_ref().map(|inputs| Recipe {
                    kind: if Recipe::is_library_link(&options) {
                        Kind::Library
                    } else {
                        Kind::Linked
                    },
                    options: Some(options),
                    text: Text::None,
                    headers: Vec::new(),
                    inputs: inputs.clone(),
                }),
            };
            match recipe.filter(|r| r.check().is_ok()) {
                Some(r) => {
                    self.rt.programs.set_recipe(program, Arc::new(r));
                }
                None => {
                    // A recompiled program keeps no stale recipe from before.
                    if self.kind != Event::Link {
                        self.rt.programs.drop_recipe(program);
                    }
                }
            }
        }
    }

    /// Copies the application's arguments, as far as a call that ended with `ret` shows
    /// them to be valid. Only once; later calls keep the first copy.
    ///
    /// # Safety
    /// The intercepted call must not have returned to the application yet.
    unsafe fn copy_args(&mut self, ret: cl_int) {
        // SAFETY: this function's contract: The intercepted call must not have returned to
        // the application yet.
        unsafe {
            if self.copied.is_some() {
                return;
            }
            let mut c = Copied::default();
            let raw = &self.raw;
            if accepted(ret) {
                if raw.num_devices > 0 && !raw.device_list.is_null() {
                    c.devices =
                        std::slice::from_raw_parts(raw.device_list, raw.num_devices as usize)
                            .to_vec();
                }
                if raw.num_inputs > 0 && !raw.inputs.is_null() {
                    c.inputs = std::slice::from_raw_parts(raw.inputs, raw.num_inputs as usize)
                        .iter()
                        .map(|&p| self.rt.programs.lookup(p).id)
                        .collect();
                }
            }
            if options_read(ret) {
                c.options = query::c_str(raw.options);
                if let Some(given) = raw.given_options {
                    c.given = Some(query::c_str(given));
                }
            }
            if accepted(ret) && self.rt.config.binaries == BinaryPolicy::Substitute {
                self.recipe_parts(&mut c);
            }
            self.copied = Some(c);
        }
    }

    /// Gathers what the record needs from `program` (the program built, or the one a link
    /// made; NULL when there is none). `ret` is the call's status, or None from the
    /// callback, which then also asks for every device's build status.
    ///
    /// # Safety
    /// `program` must be NULL or live, unless `ret` is `CL_INVALID_PROGRAM`.
    unsafe fn observe(&self, program: cl_program, ret: Option<cl_int>) -> Seen {
        // SAFETY: this function's contract: `program` must be NULL or live, unless `ret` is
        // `CL_INVALID_PROGRAM`.
        unsafe {
            let rt = self.rt;
            let route = self.route;
            let program = if program.is_null() {
                self.program
            } else {
                program
            };
            let usable = !program.is_null() && ret != Some(CL_INVALID_PROGRAM);
            let info = usable.then(|| match self.kind {
                Event::Link => rt.programs.created(program, Origin::Link, None, None),
                _ => rt.programs.lookup(program),
            });
            let named = self
                .copied
                .as_ref()
                .map(|c| c.devices.clone())
                .unwrap_or_default();
            let devices = if !named.is_empty() || !usable {
                named
            } else {
                query::devices(route, program).unwrap_or_default()
            };
            let facts: Vec<_> = devices
                .iter()
                .filter_map(|&d| rt.devices.get(route, d))
                .collect();
            let built = (ret.is_none() && usable).then(|| {
                !devices.is_empty() && devices.iter().all(|&d| query::built_for(route, program, d))
            });
            let succeeded = match ret {
                Some(r) => r == CL_SUCCESS,
                None => built == Some(true),
            };
            if succeeded && usable && rt.config.binaries == BinaryPolicy::Substitute {
                self.keep_recipe(program, info.map(|i| i.origin));
            }
            let kernels = if succeeded && self.kind != Event::Compile && usable {
                query::kernel_names(route, program)
            } else {
                Vec::new()
            };
            Seen {
                info,
                facts,
                built,
                kernels,
            }
        }
    }

    /// The status a build that ended in its callback had, from the build status then.
    fn outcome(&self, seen: &Seen) -> cl_int {
        if seen.built == Some(true) {
            CL_SUCCESS
        } else if self.kind == Event::Link {
            CL_LINK_PROGRAM_FAILURE
        } else if self.kind == Event::Compile {
            CL_COMPILE_PROGRAM_FAILURE
        } else {
            CL_BUILD_PROGRAM_FAILURE
        }
    }

    /// Writes the record for a call that ended with `result` after `seconds`, from what
    /// was seen of its program. Touches no OpenCL object.
    pub fn finish(self, result: cl_int, seconds: f64, seen: Seen) {
        let rt = self.rt;
        let filter = rt.config.devices;
        let Seen {
            info,
            facts,
            kernels,
            ..
        } = seen;
        let kernels = if result == CL_SUCCESS {
            kernels
        } else {
            Vec::new()
        };
        let call = match self.kind {
            Event::Build => "clBuildProgram",
            Event::Compile => "clCompileProgram",
            _ => "clLinkProgram",
        };
        let copied = self.copied.unwrap_or_default();
        let link = self.kind == Event::Link;
        let options_replaced = copied
            .given
            .clone()
            .filter(|g| *g != copied.options)
            .map(|given| schema::OptionsReplaced {
                given,
                used: copied.options.clone().unwrap_or_default(),
            });
        let record = schema::Record::Build(schema::Build {
            event: self.kind,
            call,
            program: info.map(|i| i.id),
            result,
            result_name: status_name(result),
            options: copied.options,
            is_async: self.is_async,
            kernels,
            devices: facts.iter().map(|f| f.describe(filter)).collect(),
            source: (!link).then(|| info.map(|i| i.source())),
            inputs: link.then_some(copied.inputs),
            headers: self.headers,
            options_replaced,
        });
        rt.recorder.emit(self.start, seconds, &record);
    }
}

/// What clshim's callback saw when it fired before the call returned.
struct Fired {
    seconds: f64,
    seen: Seen,
}

struct AsyncState {
    pending: Option<Pending>,
    /// Set when the callback fired before the call returned.
    fired: Option<Fired>,
    /// The call's status, once it returned.
    returned: Option<cl_int>,
    /// Whether the build is in FIRED_EARLY.
    listed: bool,
    /// Whether the callback has been called (it holds the implementation's reference).
    called: bool,
}

/// Everything clshim's callback needs: the application's callback and data, and the
/// record to complete.
pub struct AsyncBuild {
    user_fn: unsafe extern "C" fn(cl_program, *mut c_void),
    user_data: *mut c_void,
    start: Start,
    state: Lock<AsyncState>,
}

// SAFETY: user_data is opaque to clshim and handed back to the application unchanged, on
// whatever thread the implementation calls back on, exactly as without clshim. The raw
// argument pointers in Pending are read only under the state lock, while the call is in
// progress.
unsafe impl Send for AsyncBuild {}
// SAFETY: as above; the mutable state is behind `state`'s lock.
unsafe impl Sync for AsyncBuild {}
// SAFETY: as above: the argument pointers are read only while the call is in progress.
unsafe impl Send for Pending {}
// SAFETY: the handles it holds are opaque values passed back to the implementation.
unsafe impl Send for Seen {}

/// Builds whose callback fired before their call returned, waiting for that return to
/// write their record. If the application's callback ends the process with `exit()`, the
/// exit handler writes them with the status the callback saw.
static FIRED_EARLY: Lock<Vec<(u32, Arc<AsyncBuild>)>> = Lock::new(Vec::new());

fn await_return(ctx: &Arc<AsyncBuild>) {
    static HANDLER: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain extern "C" function with no captured state. Registered
    // after the runtime's own handler, so it runs before the exit summary.
    HANDLER.call_once(|| unsafe {
        libc::atexit(record_fired_at_exit);
    });
    FIRED_EARLY
        .lock()
        .push((std::process::id(), Arc::clone(ctx)));
}

fn returned(ctx: &Arc<AsyncBuild>) {
    FIRED_EARLY.lock().retain(|(_, c)| !Arc::ptr_eq(c, ctx));
}

/// Fork handlers (see runtime.rs): the child must not inherit the list's lock held.
pub fn lock_for_fork() {
    FIRED_EARLY.hold_for_fork();
}

extern "C" fn record_fired_at_exit() {
    catch(|| {
        // A thread stuck holding a lock while the process exits must not hang the exit.
        let Some(mut list) = FIRED_EARLY.try_lock_for(Duration::from_millis(200)) else {
            return;
        };
        let pid = std::process::id();
        let mine: Vec<_> = list
            .drain(..)
            .filter(|(p, _)| *p == pid)
            .map(|(_, c)| c)
            .collect();
        drop(list);
        for ctx in mine {
            let Some(mut st) = ctx.state.try_lock_for(Duration::from_millis(200)) else {
                continue;
            };
            if let (Some(p), Some(f)) = (st.pending.take(), st.fired.take()) {
                drop(st);
                let result = p.outcome(&f.seen);
                p.finish(result, f.seconds, f.seen);
            }
        }
    });
}

/// clshim's build callback: gathers what the record needs from the (still live) program,
/// writes the record if the call has already returned (else leaves it for the return),
/// then runs the application's callback.
unsafe extern "C" fn on_build_done(program: cl_program, data: *mut c_void) {
    // SAFETY: `data` is the `Pending` box clshim handed the implementation with this
    // callback, which gives it back once; `program` is live while the callback runs.
    unsafe {
        let ctx = Arc::from_raw(data as *const AsyncBuild);
        catch(|| {
            let seconds = ctx.start.elapsed().as_secs_f64();
            let pending = {
                let mut st = ctx.state.lock();
                st.called = true;
                if st.returned.is_none() {
                    // The implementation accepted the call (it is calling back), and the call
                    // has not returned, so the application's arrays are still valid.
                    if let Some(p) = st.pending.as_mut() {
                        p.copy_args(CL_SUCCESS);
                    }
                }
                st.pending.take()
            };
            let Some(p) = pending else {
                return;
            };
            let seen = p.observe(program, None);
            let mut st = ctx.state.lock();
            if st.returned.is_some() {
                // The call returned CL_SUCCESS and the build went on: its outcome is the
                // build status now.
                drop(st);
                let result = p.outcome(&seen);
                p.finish(result, seconds, seen);
            } else {
                st.pending = Some(p);
                st.fired = Some(Fired { seconds, seen });
                st.listed = true;
                drop(st);
                await_return(&ctx);
            }
        });
        outside(|| (ctx.user_fn)(program, ctx.user_data));
    }
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
    // SAFETY: this function's contract: `call` must perform the forwarded call with the
    // arguments it is given.
    unsafe {
        let Some(mut pending) = pending else {
            return call(user_fn, user_data);
        };
        let Some(user_fn) = user_fn else {
            let (ret, program) = call(None, user_data);
            let seconds = pending.start.elapsed().as_secs_f64();
            catch(|| {
                pending.copy_args(ret);
                let seen = pending.observe(program, Some(ret));
                pending.finish(ret, seconds, seen)
            });
            return (ret, program);
        };
        let start = pending.start;
        let ctx = Arc::new(AsyncBuild {
            user_fn,
            user_data,
            start,
            state: Lock::new(AsyncState {
                pending: Some(pending),
                fired: None,
                returned: None,
                listed: false,
                called: false,
            }),
        });
        let raw = Arc::into_raw(ctx.clone());
        let (ret, program) = call(Some(on_build_done), raw as *mut c_void);
        catch(|| {
            let mut st = ctx.state.lock();
            st.returned = Some(ret);
            let never_fires = !st.called && refused_before_start(ret);
            let listed = std::mem::take(&mut st.listed);
            let finish = if let Some(f) = st.fired.take() {
                // The callback saw the program; it may have been released since.
                st.pending.take().map(|p| (p, f.seconds, f.seen))
            } else if let Some(p) = st.pending.as_mut() {
                p.copy_args(ret);
                if ret != CL_SUCCESS {
                    // The call failed and the callback has not run, so the application has
                    // not released the program: look at it now, under the lock that makes a
                    // late callback wait.
                    let seen = p.observe(program, Some(ret));
                    st.pending
                        .take()
                        .map(|p| (p, start.elapsed().as_secs_f64(), seen))
                } else {
                    None // still building: the callback completes the record
                }
            } else {
                None
            };
            drop(st);
            if listed {
                returned(&ctx);
            }
            if never_fires {
                // The call was refused outright, so the callback's reference is ours to drop.
                // After other failures it stays with the implementation, which may still call.
                drop(Arc::from_raw(raw));
            }
            if let Some((p, seconds, seen)) = finish {
                p.finish(ret, seconds, seen);
            }
        });
        (ret, program)
    }
}
