//! Timing of `clBuildProgram`, `clCompileProgram` and `clLinkProgram`. A synchronous call
//! is timed from entry to return. When the application passes a callback, clshim passes
//! its own in its place; the time then runs until the callback fires, and the
//! application's callback runs exactly once, with its own user data, on whatever thread
//! the implementation chose. The record is written once, by whichever of "call returned"
//! and "callback fired" comes last, with the status the application saw.
//!
//! Two rules keep this safe for applications that do legal but awkward things. The
//! application's arrays (device list, input programs) are read only once the
//! implementation has accepted the call, and never beyond what it accepted, so a count
//! larger than its array is the driver's to answer, never clshim's to crash on. The option
//! string has no count to get wrong: OpenCL requires it to be NULL or NUL-terminated in
//! every call, so it is read whatever the driver answered (a refused call is recorded
//! with its options too), unless the driver refused the program or context itself.
//! Everything the record needs from the program (devices, build status, kernel names,
//! id) is gathered before the application's callback runs: the callback may release the
//! program or leave the process with `exit()`, so clshim never touches the program after
//! it, and a build whose callback exits is still recorded (at exit, with the status the
//! callback saw).

use crate::app_args::{AppArray, AppCStr};
use crate::cl::*;
use crate::config::BinaryPolicy;
use crate::devices::DeviceFacts;
use crate::dispatch::Route;
use crate::guard::{catch, outside};
use crate::lock::{ForkOrder, Lock};
use crate::programs::{Origin, ProgramInfo, RecipeChange};
use crate::query;
use crate::recipe::{Header, Kind, Recipe, Text};
use crate::record::Start;
use crate::runtime::Runtime;
use crate::schema::{self, Event};
use std::ffi::{c_char, c_void};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The implementation's entry point a build call is forwarded to.
#[derive(Clone, Copy)]
pub enum Entry {
    Build(FnBuildProgram),
    Compile(FnCompileProgram),
    Link(FnLinkProgram),
    /// A build of a program clshim recreated already linked (from a clshim binary of a
    /// linked executable): nothing to forward, done at once, as the build of a loaded
    /// binary is; the callback runs once, then.
    Done,
}

/// A build, compile or link call: the one form in which the entry points hand the
/// forwarded call to the code that times it ([`run`]). The application's arrays and strings
/// are not read until the implementation has accepted the call (see [`AwaitingBuildEnd::copy_args`]).
#[derive(Clone)]
pub struct BuildCall {
    pub entry: Entry,
    /// The program built or compiled (NULL for a link).
    pub program: cl_program,
    /// The context linked in (NULL for a build or compile).
    pub context: cl_context,
    pub devices: AppArray<cl_device_id>,
    /// The options passed on (a recreated program's recorded ones, for a build).
    pub options: *const c_char,
    /// A build whose options clshim replaced: the application's own string.
    pub given_options: Option<*const c_char>,
    /// Compile: the input headers and their include names.
    pub headers: AppArray<cl_program>,
    pub header_names: AppArray<*const c_char>,
    /// Link: the input programs.
    pub inputs: AppArray<cl_program>,
    /// A build whose compile ranks of the node share: what it did.
    pub shared: Option<crate::program_cache::share::BuildNote>,
    /// When the application's call began, where clshim did something before the call it
    /// times (waiting for a peer's compile): the record covers the whole call.
    pub began: Option<Start>,
}

impl BuildCall {
    /// The arguments of a call with no headers, inputs or replaced options.
    pub fn new(
        entry: Entry,
        program: cl_program,
        context: cl_context,
        devices: AppArray<cl_device_id>,
        options: *const c_char,
    ) -> BuildCall {
        BuildCall {
            entry,
            program,
            context,
            devices,
            options,
            given_options: None,
            headers: AppArray::empty(),
            header_names: AppArray::empty(),
            inputs: AppArray::empty(),
            shared: None,
            began: None,
        }
    }

    fn kind(&self) -> Event {
        match self.entry {
            Entry::Build(_) | Entry::Done => Event::Build,
            Entry::Compile(_) => Event::Compile,
            Entry::Link(_) => Event::Link,
        }
    }

    /// Makes the forwarded call, passing down `notify` and `data` as its callback: the
    /// status and the program built (or the one a link made).
    ///
    /// # Safety
    /// The arguments are the application's; `notify` and `data` are its own or clshim's.
    pub unsafe fn forward(&self, notify: BuildNotify, data: *mut c_void) -> (cl_int, cl_program) {
        let devices = (self.devices.len() as cl_uint, self.devices.as_ptr());
        match self.entry {
            Entry::Build(real) => {
                // SAFETY: the application's call, with the given callback.
                let ret = unsafe {
                    real(
                        self.program,
                        devices.0,
                        devices.1,
                        self.options,
                        notify,
                        data,
                    )
                };
                (ret, self.program)
            }
            Entry::Compile(real) => {
                // SAFETY: the application's call, with the given callback.
                let ret = unsafe {
                    real(
                        self.program,
                        devices.0,
                        devices.1,
                        self.options,
                        self.headers.len() as cl_uint,
                        self.headers.as_ptr(),
                        self.header_names.as_ptr(),
                        notify,
                        data,
                    )
                };
                (ret, self.program)
            }
            Entry::Link(real) => {
                // The status of a link comes back through errcode_ret: clshim's own here, the
                // entry point writes the application's.
                let mut err = CL_SUCCESS;
                // SAFETY: the application's call, with the given callback.
                let program = unsafe {
                    real(
                        self.context,
                        devices.0,
                        devices.1,
                        self.options,
                        self.inputs.len() as cl_uint,
                        self.inputs.as_ptr(),
                        notify,
                        data,
                        &mut err,
                    )
                };
                (err, program)
            }
            Entry::Done => {
                if let Some(f) = notify {
                    // SAFETY: the callback (the application's or clshim's) with its data.
                    unsafe { f(self.program, data) };
                }
                (CL_SUCCESS, self.program)
            }
        }
    }
}

/// What clshim copied of the application's arguments, once it could.
#[derive(Default)]
pub struct Copied {
    /// The devices the call named (empty: all of the program's).
    devices: Vec<cl_device_id>,
    /// The options as the application passed them, byte for byte (what a recipe keeps;
    /// records show them as text).
    pub options: Option<Vec<u8>>,
    /// Link: the input programs' ids.
    inputs: Vec<u64>,
    /// Under `substitute`: what the program's recipe needs from the call's arguments
    /// (compile: the headers; link: the inputs' recipes); None where a part is missing.
    /// Kept sources use the headers too.
    pub headers: Option<Vec<Header>>,
    input_recipes: Option<Vec<Arc<Recipe>>>,
    /// The application's options when they were replaced (the outer Option: replaced).
    given: Option<Option<Vec<u8>>>,
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

/// Whether the option string of a call that returned `ret` is read: unless the call's
/// program or context was refused, where nothing of the call can be trusted.
fn options_readable(ret: cl_int) -> bool {
    !matches!(ret, CL_INVALID_PROGRAM | CL_INVALID_CONTEXT)
}

/// Whether the build log after a call that ended with `ret` (None: seen from the
/// callback) is that call's own: a build that ran, or options the driver refused (pocl
/// says why there). A call refused for anything else leaves an earlier build's log.
fn log_is_its_own(ret: Option<cl_int>) -> bool {
    ret.map_or(true, |r| {
        !refused_before_start(r)
            || matches!(
                r,
                CL_INVALID_BUILD_OPTIONS | CL_INVALID_COMPILER_OPTIONS | CL_INVALID_LINKER_OPTIONS
            )
    })
}

/// What is known about a build when it starts; completed into a record when it ends.
pub struct AwaitingBuildEnd {
    rt: &'static Runtime,
    route: Route,
    kind: Event,
    start: Start,
    /// The program built or compiled (NULL for a link until it returns one).
    program: cl_program,
    call: BuildCall,
    copied: Option<Copied>,
    is_async: bool,
    /// A build of a program-cache handle that the store did not serve: why.
    not_served: Option<crate::store::Miss>,
}

/// What clshim saw of the program when the call ended, gathered while it was alive.
pub struct Seen {
    info: Option<ProgramInfo>,
    facts: Vec<Arc<DeviceFacts>>,
    /// Whether every device built successfully (asked only when the callback fires).
    built: Option<bool>,
    kernels: Vec<String>,
    /// The program's source text, when sources are kept.
    source_text: Option<Vec<u8>>,
    /// A build or compile that failed: the kernels its source declares, and the first
    /// error line of its build log (`failed_build`).
    source_kernels: Vec<String>,
    error: Option<String>,
    /// What a successful build does beyond its record, when it waits for the call's return.
    outcome: Outcome,
    /// A source build the driver made while the program cache was on: why the store did
    /// not serve it.
    not_served: Option<crate::store::Miss>,
}

/// When what a successful build does to its program (its recipe) is done. pocl calls a build's callback before the call returns, also for a call it
/// refuses (a kernel holds the program: CL_INVALID_OPERATION) on a program an earlier
/// build left built: what the callback sees is no success until the call returns one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// The call returned success: now.
    Now,
    /// The callback fired before the call returned: when it returns, if with success.
    AtReturn,
    /// The call returned a failure: never.
    Never,
}

/// What a successful build does beyond its record: the program's new recipe (only while it
/// is still the program of that id).
#[derive(Default)]
struct Outcome {
    recipe: Option<(cl_program, u64, RecipeChange)>,
}

impl Outcome {
    fn commit(&mut self, rt: &'static Runtime) {
        if let Some((program, id, change)) = self.recipe.take() {
            rt.programs.change_recipe_of(program, id, change);
        }
    }
}

impl AwaitingBuildEnd {
    /// The call's arguments are kept, not read (see [`AwaitingBuildEnd::copy_args`]).
    fn new(
        rt: &'static Runtime,
        route: Route,
        call: BuildCall,
        is_async: bool,
        not_served: Option<crate::store::Miss>,
    ) -> AwaitingBuildEnd {
        let mut call = call;
        AwaitingBuildEnd {
            rt,
            route,
            kind: call.kind(),
            start: call.began.take().unwrap_or_else(Start::now),
            program: call.program,
            call,
            copied: None,
            is_async,
            not_served,
        }
    }

    /// The parts of a recipe that only the call's arguments show: a compile's headers
    /// (their include names and, asked of each header program, their source), a link's
    /// input recipes. None when any part cannot be had.
    ///
    /// # Safety
    /// The call was accepted and has not returned (its arrays are valid for their counts).
    unsafe fn recipe_parts(&self, c: &mut Copied) {
        let call = &self.call;
        match self.kind {
            Event::Compile => {
                let n = call.headers.len();
                if n > 0 && (call.headers.is_null() || call.header_names.is_null()) {
                    return;
                }
                // SAFETY: the call was accepted and has not returned (this function's
                // contract), so both arrays hold `n` entries.
                let (headers, names) = unsafe { (call.headers.read(), call.header_names.read()) };
                let mut out = Vec::with_capacity(n);
                for (&h, &name) in headers.iter().zip(&names) {
                    // SAFETY: an include name of an accepted compile: a NUL-terminated string.
                    let name = unsafe { AppCStr::new(name) }.bytes().map(<[u8]>::to_vec);
                    // SAFETY: a header program of an accepted compile: live.
                    let source = unsafe { query::source(self.route, h) }.filter(|s| !s.is_empty());
                    match (name, source) {
                        (Some(name), Some(source)) if !name.is_empty() => {
                            out.push(Header { name, source })
                        }
                        _ => return,
                    }
                }
                c.headers = Some(out);
            }
            Event::Link => {
                if call.inputs.is_empty() || call.inputs.is_null() {
                    return;
                }
                let mut out = Vec::new();
                // SAFETY: the call was accepted and has not returned (this function's
                // contract), so the array holds its count of programs.
                for p in unsafe { call.inputs.read() } {
                    match self.rt.programs.recipe(p) {
                        Some(r) if matches!(r.kind, Kind::Compiled | Kind::Library) => out.push(r),
                        _ => return,
                    }
                }
                c.input_recipes = Some(out);
            }
            _ => {}
        }
    }

    /// What this call, which just made `program` successfully, does to its recipe (under
    /// `substitute` only: no other policy writes clshim binaries); None: nothing.
    ///
    /// # Safety
    /// `program` is live.
    unsafe fn recipe_change(
        &self,
        program: cl_program,
        origin: Option<Origin>,
    ) -> Option<RecipeChange> {
        let c = self.copied.as_ref()?;
        if matches!(self.call.entry, Entry::Done) {
            // A linked executable clshim made again at load: the build did nothing to it,
            // and it keeps the recipe it was made from.
            return None;
        }
        let options = c.options.clone().unwrap_or_default();
        // Source first; a program made from IL (or recreated from one) has none.
        let il = || {
            // SAFETY: the live program (this function's contract).
            unsafe { query::il(self.route, program) }
                .filter(|t| !t.is_empty())
                .map(Text::Il)
        };
        let text = || {
            if origin == Some(Origin::Il) {
                return il();
            }
            // SAFETY: the live program (this function's contract).
            unsafe { query::source(self.route, program) }
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
            // Whether the link made a library is the driver's answer, not clshim's reading
            // of the options (drivers split and match options each their own way).
            // SAFETY: the live program (this function's contract).
            _ => match (c.input_recipes.as_ref(), unsafe { self.link_kind(program) }) {
                (Some(inputs), Some(kind)) => Some(Recipe {
                    kind,
                    options: Some(options),
                    text: Text::None,
                    headers: Vec::new(),
                    inputs: inputs.clone(),
                }),
                _ => None,
            },
        };
        match recipe.map(|r| (r.check(), r)) {
            Some((Ok(_), r)) => Some(RecipeChange::Set(Arc::new(r))),
            Some((Err(why), _)) => {
                log::info!(
                    "no recipe for program {:?}: {why}; its binary is the implementation's",
                    program
                );
                Some(RecipeChange::Refuse)
            }
            None => {
                // A recompiled program keeps no stale recipe from before; but a program
                // clshim made again from a recipe and the application built where the
                // driver shows no text (a library made again) keeps the recipe it was
                // made from: its next binary makes it again as it was loaded, for the
                // application to build again, as it did.
                let made_again = self.kind == Event::Build && origin == Some(Origin::ClshimBinary);
                (self.kind != Event::Link && !made_again).then_some(RecipeChange::Drop)
            }
        }
    }

    /// What the driver made of a link: a library or an executable, the same for every
    /// device of the program (None if it says anything else).
    ///
    /// # Safety
    /// `program` is live.
    unsafe fn link_kind(&self, program: cl_program) -> Option<Kind> {
        // SAFETY: the live program (this function's contract).
        let devices = unsafe { query::devices(self.route, program) }?;
        let mut kind = None;
        for d in devices {
            // SAFETY: the live program and one of its devices.
            let k = match unsafe { query::binary_type(self.route, program, d) }? {
                CL_PROGRAM_BINARY_TYPE_LIBRARY => Kind::Library,
                CL_PROGRAM_BINARY_TYPE_EXECUTABLE => Kind::Linked,
                _ => return None,
            };
            if kind.is_some_and(|seen| seen != k) {
                return None;
            }
            kind = Some(k);
        }
        kind
    }

    /// Copies the application's arguments, as far as a call that ended with `ret` shows
    /// them to be valid. Only once; later calls keep the first copy.
    ///
    /// # Safety
    /// The intercepted call must not have returned to the application yet.
    unsafe fn copy_args(&mut self, ret: cl_int) {
        if self.copied.is_some() {
            return;
        }
        let mut c = Copied::default();
        let call = &self.call;
        if accepted(ret) {
            // SAFETY: the call was accepted and has not returned (this function's contract),
            // so the device list holds its count.
            c.devices = unsafe { call.devices.read() };
            // SAFETY: as above, for the input programs.
            c.inputs = unsafe { call.inputs.read() }
                .iter()
                .map(|&p| self.rt.programs.lookup(p).id)
                .collect();
        }
        if options_readable(ret) {
            // SAFETY: the application's options, NULL or NUL-terminated as OpenCL requires
            // of every call (its program or context was not refused); the call has not
            // returned.
            c.options = unsafe { AppCStr::new(call.options) }
                .bytes()
                .map(<[u8]>::to_vec);
            if let Some(given) = call.given_options {
                // SAFETY: the application's own options string of the same call.
                c.given = Some(unsafe { AppCStr::new(given) }.bytes().map(<[u8]>::to_vec));
            }
        }
        // Kept sources need a compile's headers too.
        let parts =
            self.rt.config.binaries == BinaryPolicy::Substitute || self.rt.sources.is_some();
        if accepted(ret) && parts {
            // SAFETY: accepted and not returned (this function's contract).
            unsafe { self.recipe_parts(&mut c) };
        }
        self.copied = Some(c);
    }

    /// Gathers what the record needs from `program` (the program built, or the one a link
    /// made; NULL when there is none). `ret` is the call's status, or None from the
    /// callback, which then also asks for every device's build status.
    ///
    /// # Safety
    /// `program` must be NULL or live, unless `ret` is `CL_INVALID_PROGRAM`.
    unsafe fn observe(&self, program: cl_program, ret: Option<cl_int>, commit: Commit) -> Seen {
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
            // SAFETY: usable: NULL excluded, and live unless refused as invalid (this
            // function's contract).
            unsafe { query::devices(route, program) }.unwrap_or_default()
        };
        let facts: Vec<_> = devices
            .iter()
            // SAFETY: devices the implementation accepted for the call, or listed for the
            // program.
            .filter_map(|&d| unsafe { rt.devices.get(route, d) })
            .collect();
        let built = (ret.is_none() && usable).then(|| {
            // SAFETY: the usable program and its devices.
            !devices.is_empty()
                && devices
                    .iter()
                    .all(|&d| unsafe { query::built_for(route, program, d) })
        });
        let succeeded = match ret {
            Some(r) => r == CL_SUCCESS,
            None => built == Some(true),
        };
        let mut outcome = Outcome::default();
        let mut not_served = None;
        if succeeded && usable && commit != Commit::Never {
            if rt.config.binaries == BinaryPolicy::Substitute {
                // SAFETY: usable, so live.
                outcome.recipe = unsafe { self.recipe_change(program, info.map(|i| i.origin)) }
                    .zip(info.map(|i| i.id))
                    .map(|(change, id)| (program, id, change));
            }
            let from_source = info.is_some_and(|i| i.origin == Origin::Source);
            if self.kind == Event::Build && from_source {
                let options = self.copied.as_ref().and_then(|c| c.options.clone());
                // SAFETY: usable, so live, and built.
                let after = unsafe {
                    crate::program_cache::after_source_build(
                        rt,
                        route,
                        program,
                        &options.unwrap_or_default(),
                        self.not_served.clone(),
                    )
                };
                not_served = after;
            }
            if commit == Commit::Now {
                outcome.commit(rt);
            }
        }
        let kernels = if succeeded && self.kind != Event::Compile && usable {
            // SAFETY: usable, so live.
            unsafe { query::kernel_names(route, program) }
        } else {
            Vec::new()
        };
        let keeps_source = rt.sources.is_some()
            && usable
            && self.kind != Event::Link
            && info.is_some_and(|i| !matches!(i.origin, Origin::Il | Origin::Binary));
        // A program the program cache made from binaries has no text of its own: its
        // handle's source is what the application built.
        let text_of = || {
            // SAFETY: usable, so live.
            unsafe { query::source(route, program) }
                .filter(|t| !t.is_empty())
                .or_else(|| crate::program_cache::source_of(program))
        };
        let source_text = keeps_source.then(text_of).flatten();
        let (mut source_kernels, mut error) = (Vec::new(), None);
        if !succeeded && usable && self.kind != Event::Link {
            // The implementation names no kernels after a failure: the source does.
            if let Some(text) = source_text.clone().or_else(text_of) {
                source_kernels = crate::failed_build::kernel_names(&text);
            }
            if source_kernels.is_empty() && !log_is_its_own(ret) {
                // Refused, so as built as before (a linked program has no text): its own
                // kernels name it, if it has any.
                // SAFETY: usable, so live.
                source_kernels = unsafe { query::kernel_names(route, program) };
            }
            error = devices
                .first()
                .filter(|_| log_is_its_own(ret))
                .and_then(|&d| {
                    // SAFETY: usable, so live; one of its devices.
                    unsafe { query::build_log(route, program, d) }
                })
                .and_then(|mut log| {
                    // The log comes NUL-terminated: its text ends there.
                    if let Some(end) = log.iter().position(|&b| b == 0) {
                        log.truncate(end);
                    }
                    crate::failed_build::first_error(&log)
                });
        }
        Seen {
            info,
            facts,
            built,
            kernels,
            source_text,
            source_kernels,
            error,
            outcome,
            not_served,
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

    /// Writes the record for a call that ended with `result` after `seconds` (and
    /// `cpu_seconds` of the calling thread), from what was seen of its program. Touches no
    /// OpenCL object.
    pub fn finish(self, result: cl_int, seconds: f64, cpu_seconds: Option<f64>, seen: Seen) {
        let rt = self.rt;
        let filter = rt.config.devices;
        let Seen {
            info,
            facts,
            kernels,
            source_text,
            source_kernels,
            error,
            not_served,
            ..
        } = seen;
        let (kernels, source_kernels, error) = if result == CL_SUCCESS {
            (kernels, Vec::new(), None)
        } else if source_kernels.is_empty() {
            // A call refused with a callback (pocl calls it then too) saw the program as
            // an earlier build left it: built, with its kernels, and that build's log.
            (
                Vec::new(),
                kernels,
                error.filter(|_| log_is_its_own(Some(result))),
            )
        } else {
            (Vec::new(), source_kernels, error)
        };
        let call = match self.kind {
            Event::Build => "clBuildProgram",
            Event::Compile => "clCompileProgram",
            _ => "clLinkProgram",
        };
        let copied = self.copied.unwrap_or_default();
        let link = self.kind == Event::Link;
        // Records show options as text: bytes that are not UTF-8 appear as U+FFFD there,
        // while recipes keep them exactly.
        let text = |b: &Vec<u8>| String::from_utf8_lossy(b).into_owned();
        let options_replaced = copied
            .given
            .clone()
            .filter(|g| *g != copied.options)
            .map(|given| schema::OptionsReplaced {
                given: given.as_ref().map(text),
                used: copied.options.as_ref().map(text).unwrap_or_default(),
            });
        let kept = rt.sources.as_ref().map(|k| {
            crate::sources::kept(
                k,
                source_text.as_deref(),
                copied.options.as_deref(),
                copied.headers.as_deref().unwrap_or_default(),
            )
        });
        let outcome = self.call.shared.as_ref().map(|n| n.settle(result));
        let shared = outcome.map(|o| o.shared);
        let kept_in_store = outcome.and_then(|o| o.kept.as_ref());
        let record = schema::Record::Build(schema::Build {
            event: self.kind,
            cpu_seconds,
            call,
            program: info.map(|i| i.id),
            result,
            result_name: status_name(result),
            options: copied.options.as_ref().map(text),
            is_async: self.is_async,
            kernels,
            devices: facts.iter().map(|f| f.describe(filter)).collect(),
            source: (!link).then(|| info.map(|i| i.source())),
            inputs: link.then_some(copied.inputs),
            headers: (self.kind == Event::Compile).then_some(self.call.headers.len() as cl_uint),
            options_replaced,
            kept,
            source_kernels,
            error,
            served: None,
            shared: shared.map(|s| s.name()),
            peer_wait_seconds: shared.and_then(|s| s.waited()),
            from_host: outcome.and_then(|o| o.from_host.clone()),
            kept_in_store: kept_in_store.map(Result::is_ok),
            not_kept: kept_in_store.and_then(|k| k.clone().err()),
            not_served: not_served
                .filter(|_| result == CL_SUCCESS)
                .map(|m| m.record()),
        });
        rt.recorder.emit(self.start, seconds, &record);
    }
}

/// What clshim's callback saw when it fired before the call returned.
struct Fired {
    seconds: f64,
    cpu_seconds: Option<f64>,
    seen: Seen,
}

struct AsyncState {
    pending: Option<AwaitingBuildEnd>,
    /// Set when the callback fired before the call returned.
    fired: Option<Fired>,
    /// The call's status, once it returned.
    returned: Option<cl_int>,
    /// Whether the build is in `fired_early()`.
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
// argument pointers in AwaitingBuildEnd are read only under the state lock, while the call is in
// progress.
unsafe impl Send for AsyncBuild {}
// SAFETY: as above; the mutable state is behind `state`'s lock.
unsafe impl Sync for AsyncBuild {}
// SAFETY: as above: the argument pointers are read only while the call is in progress.
unsafe impl Send for AwaitingBuildEnd {}
// SAFETY: the handles it holds are opaque values passed back to the implementation.
unsafe impl Send for Seen {}

/// Builds whose callback fired before their call returned, waiting for that return to
/// write their record. If the application's callback ends the process with `exit()`, the
/// exit handler writes them with the status the callback saw. Each with the pid that
/// listed it.
type FiredEarly = Lock<Vec<(u32, Arc<AsyncBuild>)>>;

/// The list, held across fork (registered with the fork handlers at first use, which holds
/// no lock).
fn fired_early() -> &'static FiredEarly {
    static FIRED_EARLY: OnceLock<&'static FiredEarly> = OnceLock::new();
    FIRED_EARLY.get_or_init(|| Lock::new_fork_held(ForkOrder::FiredEarly, Vec::new()))
}

fn await_return(ctx: &Arc<AsyncBuild>) {
    static HANDLER: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a plain extern "C" function with no captured state. Registered
    // after the runtime's own handler, so it runs before the exit summary.
    HANDLER.call_once(|| unsafe {
        libc::atexit(record_fired_at_exit);
    });
    fired_early()
        .lock()
        .push((std::process::id(), Arc::clone(ctx)));
}

fn returned(ctx: &Arc<AsyncBuild>) {
    fired_early().lock().retain(|(_, c)| !Arc::ptr_eq(c, ctx));
}

extern "C" fn record_fired_at_exit() {
    catch(|| {
        // A thread stuck holding a lock while the process exits must not hang the exit.
        let Some(mut list) = fired_early().try_lock_for(Duration::from_millis(200)) else {
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
                p.finish(result, f.seconds, f.cpu_seconds, f.seen);
            }
        }
    });
}

/// clshim's build callback: gathers what the record needs from the (still live) program,
/// writes the record if the call has already returned (else leaves it for the return),
/// then runs the application's callback.
unsafe extern "C" fn on_build_done(program: cl_program, data: *mut c_void) {
    // SAFETY: `data` is the reference to the `AsyncBuild` that `run` handed the
    // implementation with this callback (Arc::into_raw), which calls back once.
    let ctx = unsafe { Arc::from_raw(data as *const AsyncBuild) };
    catch(|| {
        let seconds = ctx.start.elapsed().as_secs_f64();
        let cpu_seconds = ctx.start.cpu_seconds();
        let pending = {
            let mut st = ctx.state.lock();
            st.called = true;
            if st.returned.is_none() {
                // The implementation accepted the call (it is calling back), and the call
                // has not returned, so the application's arrays are still valid.
                if let Some(p) = st.pending.as_mut() {
                    // SAFETY: as just said: accepted, and not returned.
                    unsafe { p.copy_args(CL_SUCCESS) };
                }
            }
            st.pending.take()
        };
        let Some(p) = pending else {
            return;
        };
        let commit = match ctx.state.lock().returned {
            None => Commit::AtReturn,
            Some(CL_SUCCESS) => Commit::Now,
            Some(_) => Commit::Never,
        };
        // SAFETY: the program is live while the callback runs.
        let seen = unsafe { p.observe(program, None, commit) };
        let mut st = ctx.state.lock();
        if st.returned.is_some() {
            // The call returned CL_SUCCESS and the build went on: its outcome is the
            // build status now.
            drop(st);
            let result = p.outcome(&seen);
            p.finish(result, seconds, cpu_seconds, seen);
        } else {
            st.pending = Some(p);
            st.fired = Some(Fired {
                seconds,
                cpu_seconds,
                seen,
            });
            st.listed = true;
            drop(st);
            await_return(&ctx);
        }
    });
    // The program as the application knows it (a program cache handle, where one stands
    // for it).
    let program = crate::program_cache::app_handle(program);
    // SAFETY: the application's callback with its own data, called once, as it would be
    // without clshim.
    outside(|| unsafe { (ctx.user_fn)(program, ctx.user_data) });
}

/// Forwards `call` and records it (with no runtime: only forwards it). With no
/// application callback the call is timed to its return; with one, clshim's callback
/// takes its place (see the module comment).
///
/// # Safety
/// `call`, `user_fn` and `user_data` are the application's arguments.
pub unsafe fn run(
    rt: Option<&'static Runtime>,
    route: Route,
    call: BuildCall,
    user_fn: BuildNotify,
    user_data: *mut c_void,
    not_served: Option<crate::store::Miss>,
) -> (cl_int, cl_program) {
    let Some(rt) = rt else {
        // SAFETY: the application's call and callback, unchanged.
        return unsafe { call.forward(user_fn, user_data) };
    };
    if !call.program.is_null() {
        rt.programs.build_started(call.program);
    }
    // The record's copy (a shared build's note is not Copy); the call itself is forwarded.
    let mut pending = AwaitingBuildEnd::new(rt, route, call.clone(), user_fn.is_some(), not_served);
    let Some(user_fn) = user_fn else {
        // SAFETY: the application's call, unchanged (no callback).
        let (ret, program) = unsafe { call.forward(None, user_data) };
        let seconds = pending.start.elapsed().as_secs_f64();
        let cpu_seconds = pending.start.cpu_seconds();
        catch(|| {
            // SAFETY: the call has not returned to the application yet.
            unsafe { pending.copy_args(ret) };
            // SAFETY: the call just returned `ret` for this program, which the application
            // has not seen back yet, so it is NULL, live, or refused as invalid.
            let seen = unsafe { pending.observe(program, Some(ret), Commit::Now) };
            pending.finish(ret, seconds, cpu_seconds, seen)
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
    // SAFETY: the application's call, with clshim's callback, whose data (`raw`) holds one
    // reference to `ctx` for the callback to take back.
    let (ret, program) = unsafe { call.forward(Some(on_build_done), raw as *mut c_void) };
    catch(|| {
        let mut st = ctx.state.lock();
        st.returned = Some(ret);
        let never_fires = !st.called && refused_before_start(ret);
        let listed = std::mem::take(&mut st.listed);
        let finish = if let Some(f) = st.fired.take() {
            // The callback saw the program; it may have been released since.
            st.pending
                .take()
                .map(|p| (p, f.seconds, f.cpu_seconds, f.seen))
        } else if let Some(p) = st.pending.as_mut() {
            // SAFETY: the call has not returned to the application yet.
            unsafe { p.copy_args(ret) };
            if ret != CL_SUCCESS {
                // The call failed and the callback has not run, so the application has
                // not released the program: look at it now, under the lock that makes a
                // late callback wait.
                // SAFETY: the call just returned `ret`; the program is NULL, live (the
                // callback has not run, so the application has not released it), or refused.
                let seen = unsafe { p.observe(program, Some(ret), Commit::Now) };
                st.pending.take().map(|p| {
                    let seconds = start.elapsed().as_secs_f64();
                    (p, seconds, start.cpu_seconds(), seen)
                })
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
            // SAFETY: `raw` came from Arc::into_raw above, and the implementation, which
            // refused the call, will never hand it back.
            drop(unsafe { Arc::from_raw(raw) });
        }
        if let Some((p, seconds, cpu_seconds, mut seen)) = finish {
            if ret == CL_SUCCESS {
                seen.outcome.commit(rt);
            }
            p.finish(ret, seconds, cpu_seconds, seen);
        }
    });
    (ret, program)
}
