//! The program cache's three moments: at `clCreateProgramWithSource`, whether the program
//! gets a handle (its source is marked in the store); at `clBuildProgram` on a handle,
//! whether the store serves the build; after a source build the driver compiled, why the
//! store did not serve it (its compile is kept by the build's turn, `share`, from which
//! `clshim warm` makes the entry).
// On macOS the warm step and the program cache are not built: what only they use is idle.
#![cfg_attr(target_os = "macos", allow(dead_code, unused_imports))]

use super::handles::{self, Handle, SourceAnswers};
use crate::app_args::{AppArray, AppCStr};
use crate::cl::*;
use crate::config::BinaryPolicy;
use crate::dispatch::Route;
use crate::guard::{catch, outside};
use crate::owned_program::OwnedProgram;
use crate::query;
use crate::recipe::{Recipe, Text};
use crate::record::Start;
use crate::runtime::Runtime;
use crate::schema;
use crate::store::{files, Miss, MissKind, Store};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

/// The program `clCreateProgramWithSource` hands the application: a handle (with the
/// door's dispatch `table`) when the program cache is on, every device of `program` is one
/// the store can serve, and the store marks this source (`hash` of its text) as one it
/// made builds of; else the driver's `program` itself.
pub fn maybe_wrap(
    rt: &Runtime,
    route: Route,
    program: cl_program,
    context: cl_context,
    hash: Option<u64>,
    source: impl FnOnce() -> Vec<u8>,
    table: Option<*const *const c_void>,
) -> cl_program {
    let Some(table) = table.filter(|_| rt.config.program_cache && !program.is_null()) else {
        return program;
    };
    let (Some(store), Some(hash)) = (Store::from_config(&rt.config), hash) else {
        return program;
    };
    // A handle is no program of the driver's: a function clshim does not intercept (a
    // vendor's extension, such as Intel's clGetDeviceGlobalVariablePointerINTEL) would
    // refuse it. Only a program the store could serve is worth that risk.
    // SAFETY: the program the driver just made, not yet handed to the application.
    if !unsafe { servable(rt, route, program) } {
        return program;
    }
    let marked = files::open_dir(&store.dir, false)
        .and_then(|d| files::open_sub(&d, super::SOURCES, false))
        .is_ok_and(|d| files::exists(&d, &super::source_mark(hash)));
    if !marked {
        return program;
    }
    handles::wrap(program, context, source(), table)
}

/// Whether the store can serve builds of `program`: each of its devices is pocl's, the
/// only driver whose builds the store keys (`store::build_key`); a program whose devices
/// cannot be asked is not.
///
/// # Safety
/// `program` is live and reachable through `route`.
unsafe fn servable(rt: &Runtime, route: Route, program: cl_program) -> bool {
    // SAFETY: live (this function's contract).
    let Some(devices) = (unsafe { query::devices(route, program) }) else {
        return false;
    };
    !devices.is_empty()
        && devices.iter().all(|&d| {
            // SAFETY: a device of the live program.
            unsafe { rt.devices.get(route, d) }
                .is_some_and(|f| f.platform == crate::schema::POCL_PLATFORM)
        })
}

/// A served build's program, with what its record needs.
struct Served {
    program: OwnedProgram,
    /// What its source builds answered.
    answers: SourceAnswers,
    devices: Vec<cl_device_id>,
    kernels: Vec<String>,
    options: Vec<u8>,
}

/// What `clBuildProgram` on a handle comes to.
pub enum Build {
    /// Answered without the driver building anything: served from the store, or refused
    /// while another served build of the handle runs.
    Answered(cl_int),
    /// The driver builds the program the handle stands for now (`Handle::inner`), as
    /// without the cache. With a `Fallback`, that is the source program, in the place of
    /// a served program the handle stood for until this build: [`after_fallback`] settles
    /// it once the driver answered. With a `Miss`: why the store did not serve it, for the
    /// build's record.
    Driver(Option<Fallback>, Option<Miss>),
}

/// The served program a handle stood for before a build of its source program, and the
/// handle (by address and id, as the application may release it during the build).
pub struct Fallback {
    handle: usize,
    id: u64,
    served: cl_program,
}

/// `clBuildProgram` on the handle `h`: answered when the store serves it (or a build runs
/// on the handle already); else the driver builds the program the handle stands for.
///
/// # Safety
/// The arguments are the application's to `clBuildProgram` (`h` its program).
#[allow(clippy::too_many_arguments)]
pub unsafe fn serve_build(
    rt: &'static Runtime,
    route: Route,
    h: &'static Handle,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
    notify: BuildNotify,
    user_data: *mut c_void,
) -> Build {
    if !rt.config.program_cache {
        return Build::Driver(None, None);
    }
    // SAFETY: the application's arguments, its program the handle (this function's
    // contract).
    if unsafe { driver_refuses(route, h, num_devices, device_list, notify, user_data) } {
        return Build::Driver(None, None);
    }
    let start = Start::now();
    if !h.begin_build() {
        // SAFETY: the application's arguments (this function's contract).
        return unsafe { refuse(rt, route, h, start, CL_INVALID_OPERATION, options, notify) };
    }
    // SAFETY: the program the handle stands for is the application's, live.
    let Some(source) = catch(|| unsafe { h.source_program(route) }).flatten() else {
        // Without its source the program cannot be built as the application asks; the
        // program the handle stands for, made from binaries, would build unchanged.
        h.end_build();
        // SAFETY: the application's arguments (this function's contract).
        return unsafe { refuse(rt, route, h, start, CL_OUT_OF_HOST_MEMORY, options, notify) };
    };
    let served = catch(|| {
        // SAFETY: the application's arguments (this function's contract).
        unsafe { try_serve(rt, route, h, source, num_devices, device_list, options) }
    });
    h.end_build();
    let served = match served {
        Some(Ok(s)) => s,
        failed => {
            let miss = match failed {
                Some(Err(miss)) => miss,
                _ => Miss::of(MissKind::Other, "clshim failed serving it"),
            };
            log::debug!("program cache: not served: {}", miss.text());
            let before = h.stand_for(source, SourceAnswers::default());
            let fallback = (before != source).then(|| Fallback {
                handle: h.as_program() as usize,
                id: h.id(),
                served: before,
            });
            return Build::Driver(fallback, Some(miss));
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = start.cpu_seconds();
    let program = served.program.get();
    catch(|| {
        let said = Said {
            result: CL_SUCCESS,
            options: Some(&served.options),
            devices: &served.devices,
            kernels: served.kernels.clone(),
            is_async: notify.is_some(),
        };
        record(rt, route, h, start, (seconds, cpu_seconds), said, program)
    });
    let answers = served.answers;
    let program = served.program.into_raw();
    // The mark of a source whose builds are served stays as fresh as their entries, so
    // the cap keeps it as long as them.
    if let Some(store) = Store::from_config(&rt.config) {
        let mark = super::source_mark(crate::hash::fnv1a64(&h.source));
        if let Ok(d) = files::open_dir(&store.dir, false)
            .and_then(|d| files::open_sub(&d, super::SOURCES, false))
        {
            files::touch(&d, &mark);
        }
    }
    let before = h.stand_for(program, answers);
    // SAFETY: the program the handle stood for, which clshim held.
    unsafe { h.let_go(route, before) };
    if let Some(f) = notify {
        // SAFETY: the application's callback with its own data, once, with the program as
        // the application knows it; pocl calls a build's callback before the build returns
        // too.
        outside(|| unsafe { f(h.as_program(), user_data) });
    }
    Build::Answered(CL_SUCCESS)
}

/// Whether the driver refuses this build before building anything, leaving its program
/// as it was: arguments the OpenCL specification refuses with CL_INVALID_VALUE whatever
/// the program (a device list without its count or a count without its list, user data
/// without a callback), or a kernel holding the program the handle stands for
/// (CL_INVALID_OPERATION). Such a build is the driver's to answer on that very program:
/// its own checks, in their order, its callback on a refusal (pocl calls it), its record.
///
/// # Safety
/// As for [`serve_build`].
unsafe fn driver_refuses(
    route: Route,
    h: &Handle,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    notify: BuildNotify,
    user_data: *mut c_void,
) -> bool {
    if (num_devices == 0) != device_list.is_null() || (notify.is_none() && !user_data.is_null()) {
        return true;
    }
    // clshim holds one reference to the program the handle stands for, and each of its
    // kernels another.
    // SAFETY: the program the handle stands for, which clshim holds while the application
    // holds the handle.
    unsafe { query::reference_count(route, h.inner()) }.is_some_and(|n| n > 1)
}

/// Settles a build of the handle's source program that took the place of the served
/// program `fb` names, once the driver answered it `ret` (called while the application's
/// `clBuildProgram` has not returned, `options` its own): the served program is let go
/// of. Except where options the driver refuses: they fail a built program's build but
/// leave its binary type and kernel metadata as they were (pocl reads the options before
/// it cleans anything), which the source program, never built, does not have; the served
/// program is then refused the same options, and the handle stands for it again, as the
/// application's one program would be.
///
/// # Safety
/// `options` is the application's string of the build, which has not returned.
pub unsafe fn after_fallback(route: Route, fb: Fallback, ret: cl_int, options: *const c_char) {
    let Some(h) = handles::find_live(fb.handle, fb.id) else {
        return;
    };
    let refused = ret == CL_INVALID_BUILD_OPTIONS;
    if !refused || !h.on_source() || !h.holds(fb.served) {
        // SAFETY: a program the handle held, which clshim holds if it still does.
        unsafe { h.let_go(route, fb.served) };
        return;
    }
    // SAFETY: the program's own entry, all its devices, the application's options (valid
    // for the call), no callback (the application's ran with the source program's build).
    let again = unsafe { route.build_program(fb.served) }.map(|build| unsafe {
        build(
            fb.served,
            0,
            std::ptr::null(),
            options,
            None,
            std::ptr::null_mut(),
        )
    });
    if again == Some(CL_INVALID_BUILD_OPTIONS) {
        // Its log is now the refusal's, no longer the served build's.
        h.stand_for(fb.served, SourceAnswers::default());
    } else {
        // SAFETY: as above.
        unsafe { h.let_go(route, fb.served) };
    }
}

/// The served program, or why the store cannot serve this build.
///
/// # Safety
/// As for [`serve_build`].
unsafe fn try_serve(
    rt: &'static Runtime,
    route: Route,
    h: &'static Handle,
    source_program: cl_program,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    options: *const c_char,
) -> Result<Served, Miss> {
    let other = |why: String| Miss::of(MissKind::Other, why);
    let other_list = || other("a device list other than the program's".into());
    // SAFETY: the handle's source program, which clshim holds.
    let devices = unsafe { query::devices(route, source_program) }
        .ok_or_else(|| other("no devices".into()))?;
    if num_devices != 0 || !device_list.is_null() {
        // Only a list of exactly the program's devices is served (a program from binaries
        // belongs to the devices it was made for); it is read no further than that.
        if device_list.is_null() || num_devices as usize != devices.len() {
            return Err(other_list());
        }
        // SAFETY: the application's list of `num_devices` devices, as OpenCL requires.
        let named = unsafe { AppArray::new(device_list, num_devices as usize).read() };
        let all =
            named.iter().all(|d| devices.contains(d)) && devices.iter().all(|d| named.contains(d));
        if !all {
            return Err(other_list());
        }
    }
    // SAFETY: the application's options: NULL or a NUL-terminated string, as OpenCL
    // requires.
    let opts = unsafe { AppCStr::new(options) }
        .bytes()
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    let recipe = Recipe::built(Text::Source(h.source.clone()), opts.clone());
    recipe
        .check()
        .map_err(|b| Miss::of(MissKind::CannotKeep, b.to_string()))?;
    let encoded = recipe.encode();
    let store = Store::from_config(&rt.config)
        .ok_or_else(|| Miss::of(MissKind::CannotKeep, "no native store"))?;
    let mut payloads = Vec::with_capacity(devices.len());
    let mut answers = SourceAnswers::default();
    for (i, &d) in devices.iter().enumerate() {
        // SAFETY: a device of the live program.
        let facts = unsafe { rt.devices.get(route, d) }
            .ok_or_else(|| other("a device not queried".into()))?;
        // SAFETY: as above.
        let key =
            unsafe { crate::store::key_for(&facts, d, &recipe, &encoded) }.map_err(|why| Miss {
                device: Some(i),
                ..Miss::of(MissKind::CannotKeep, why)
            })?;
        let p = store.lookup(&key).found(i)?;
        payloads.push(p.binary);
        answers.logs.push((d, p.log));
        // The same source and options give each device the same attributes.
        if i == 0 {
            answers.attributes = p.attributes;
        }
    }
    // SAFETY: the handle's context, valid while its program lives.
    let create = unsafe { route.create_program_with_binary(h.context) }
        .ok_or_else(|| other("no clCreateProgramWithBinary".into()))?;
    // SAFETY: a valid context, its program's devices, one verified binary each.
    let program =
        unsafe { crate::binary_load::from_native(route, create, h.context, &devices, &payloads) }
            .map_err(other)?;
    crate::program_cache::forget_reused(program.get());
    for &d in &devices {
        // SAFETY: the live program clshim just made, for devices of its context.
        let t = unsafe { query::binary_type(route, program.get(), d) };
        if t != Some(CL_PROGRAM_BINARY_TYPE_EXECUTABLE) {
            return Err(other("the native binary is no executable".into()));
        }
    }
    // SAFETY: the live program clshim just made.
    let build = unsafe { route.build_program(program.get()) }
        .ok_or_else(|| other("no clBuildProgram".into()))?;
    // SAFETY: the program's own entry, all its devices, the application's options (valid
    // for the call), no callback.
    let ret = unsafe {
        build(
            program.get(),
            0,
            std::ptr::null(),
            options,
            None,
            std::ptr::null_mut(),
        )
    };
    if ret != CL_SUCCESS {
        return Err(other(format!(
            "the driver's build of its binary: {}",
            status_name(ret)
        )));
    }
    rt.programs.alias(program.get(), source_program);
    if rt.config.binaries == BinaryPolicy::Substitute {
        rt.programs.set_recipe(program.get(), Arc::new(recipe));
    }
    // SAFETY: the live program, built.
    let kernels = unsafe { query::kernel_names(route, program.get()) };
    Ok(Served {
        program,
        answers,
        devices,
        kernels,
        options: opts,
    })
}

/// What a handle's build record says beyond the handle, its program and its times.
struct Said<'a> {
    result: cl_int,
    options: Option<&'a [u8]>,
    devices: &'a [cl_device_id],
    kernels: Vec<String>,
    /// The application gave a callback.
    is_async: bool,
}

/// Records a build of the handle `h` that clshim answered itself: served (`program` the
/// one made from binaries) or refused (`program` the one the handle stands for).
fn record(
    rt: &'static Runtime,
    route: Route,
    h: &Handle,
    start: Start,
    (seconds, cpu_seconds): (f64, Option<f64>),
    said: Said,
    program: cl_program,
) {
    let info = rt.programs.lookup(program);
    let facts: Vec<_> = said
        .devices
        .iter()
        // SAFETY: the program's devices.
        .filter_map(|&d| unsafe { rt.devices.get(route, d) })
        .collect();
    let kept = rt
        .sources
        .as_ref()
        .map(|k| crate::sources::kept(k, Some(&h.source), said.options, &[]));
    let ok = said.result == CL_SUCCESS;
    let record = schema::Record::Build(schema::Build {
        event: schema::Event::Build,
        call: "clBuildProgram",
        program: Some(info.id),
        result: said.result,
        result_name: status_name(said.result),
        options: said
            .options
            .map(|o| String::from_utf8_lossy(o).into_owned()),
        is_async: said.is_async,
        kernels: said.kernels,
        devices: facts
            .iter()
            .map(|f| f.describe(rt.config.devices))
            .collect(),
        source: Some(Some(info.source())),
        inputs: None,
        headers: None,
        options_replaced: None,
        kept,
        // As for a build the driver refuses: the source names the program.
        source_kernels: if ok {
            Vec::new()
        } else {
            crate::failed_build::kernel_names(&h.source)
        },
        error: None,
        cpu_seconds,
        served: ok.then_some("store"),
        shared: None,
        peer_wait_seconds: None,
        from_host: None,
        kept_in_store: None,
        not_kept: None,
        not_served: None,
    });
    rt.recorder.emit(start, seconds, &record);
}

/// Answers a build of the handle `h` that clshim refuses itself with `result`, and
/// records it as every build call is.
///
/// # Safety
/// As for [`serve_build`].
unsafe fn refuse(
    rt: &'static Runtime,
    route: Route,
    h: &Handle,
    start: Start,
    result: cl_int,
    options: *const c_char,
    notify: BuildNotify,
) -> Build {
    let seconds = start.elapsed().as_secs_f64();
    let cpu_seconds = start.cpu_seconds();
    catch(|| {
        let program = h.inner();
        // SAFETY: the application's options, NULL or NUL-terminated as OpenCL requires.
        let options = unsafe { AppCStr::new(options) }.bytes();
        // SAFETY: the program the handle stands for, which clshim holds.
        let devices = unsafe { query::devices(route, program) }.unwrap_or_default();
        let said = Said {
            result,
            options,
            devices: &devices,
            kernels: Vec::new(),
            is_async: notify.is_some(),
        };
        record(rt, route, h, start, (seconds, cpu_seconds), said, program);
    });
    Build::Answered(result)
}

/// What follows a source build the driver just made of `program` with `options` (the
/// application's, as given) while the program cache is on: why the store did not serve it
/// (`known` when the build was a handle's that the store could not serve; else looked up
/// now, as a handle's build would have been). What the driver compiled is kept in the
/// store by the build's turn (`share`), with what `clshim warm` needs to make the driver's
/// binary of it.
///
/// # Safety
/// `program` is live and built.
pub unsafe fn after_source_build(
    rt: &'static Runtime,
    route: Route,
    program: cl_program,
    options: &[u8],
    known: Option<Miss>,
) -> Option<Miss> {
    let mut miss = known;
    if !rt.config.program_cache {
        return miss;
    }
    // SAFETY: live (this function's contract).
    let Some(source) = (unsafe { query::source(route, program) }).filter(|s| !s.is_empty()) else {
        miss.get_or_insert(Miss::of(MissKind::Other, "no source to key"));
        return miss;
    };
    let recipe = Recipe::built(Text::Source(source), options.to_vec());
    if let Err(b) = recipe.check() {
        miss.get_or_insert(Miss::of(MissKind::CannotKeep, b.to_string()));
        return miss;
    }
    let Some(store) = Store::from_config(&rt.config) else {
        miss.get_or_insert(Miss::of(MissKind::CannotKeep, "no native store"));
        return miss;
    };
    let encoded = recipe.encode();
    // SAFETY: live.
    let devices = unsafe { query::devices(route, program) }.unwrap_or_default();
    let mut keys = Vec::with_capacity(devices.len());
    for (i, &d) in devices.iter().enumerate() {
        // SAFETY: a device of the live program.
        let key = unsafe { rt.devices.get(route, d) }
            .ok_or_else(|| "a device not queried".to_string())
            // SAFETY: as above.
            .and_then(|facts| unsafe { crate::store::wanted(&facts, d, &recipe, &encoded) });
        match key {
            Ok(k) => keys.push((i, k)),
            Err(why) => {
                log::debug!("program cache: no request: {why}");
                miss.get_or_insert(Miss {
                    device: Some(i),
                    ..Miss::of(MissKind::CannotKeep, why)
                });
            }
        }
    }
    if miss.is_none() {
        // Not a handle, so its source was not marked when the program was made: what the
        // store holds of this build says why (an entry not kept is never marked).
        miss = keys
            .iter()
            .find_map(|(i, w)| store.lookup(&w.key).found(*i).err());
        if miss.is_none() && !keys.is_empty() {
            // Entries for every device and no mark: made since the program was, or made
            // again by a warm step that kept the old mark, which its cap then took for one
            // of builds that are gone. Marked again, the next process is served.
            let mark = super::source_mark(crate::hash::fnv1a64(recipe.text.bytes()));
            let marked = files::open_dir(&store.dir, false)
                .and_then(|d| files::open_sub(&d, super::SOURCES, true))
                .and_then(|d| files::write_atomic(&d, &mark, b"", true, false));
            miss = Some(Miss::of(
                MissKind::Other,
                if marked.is_ok() {
                    "the store held no mark of its source: marked again, for the next run"
                } else {
                    "the store holds no mark of its source"
                },
            ));
        }
    }
    miss
}
