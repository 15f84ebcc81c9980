//! Taking clshim binaries back: `clCreateProgramWithBinary` given the binaries that
//! `substitute` handed out makes the program again from the recipe they carry (a source
//! or IL program for a build recipe, built at the application's `clBuildProgram` with the
//! recorded options; a compiled object, library or linked executable compiled and linked
//! again at once, so that a part that fails is the load's refusal), for every device of
//! the context or not at all, and never a partial program; any other binary is the
//! implementation's. The implementation is always asked first with the application's own
//! arguments, so its argument checks come first and clshim reads no more of the
//! application's arrays than it did. What a clshim binary carries, and how it is checked,
//! is `container`'s.

use crate::app_args::{AppArray, AppBytes};
use crate::cl::*;
use crate::container;
use crate::devices::describe_all;
use crate::dispatch::Route;
use crate::owned_program::OwnedProgram;
use crate::programs::{Loaded, Origin};
use crate::query;
use crate::recipe::{Kind, Recipe};
use crate::record::Start;
use crate::remake::recreate;
use crate::runtime::Runtime;
use crate::schema::{self};
use crate::store::{Miss, MissKind, Store};
use std::sync::Arc;

/// The arguments of a `clCreateProgramWithBinary` call that the implementation accepted
/// or refused for its binaries alone, copied once clshim has checked them as the OpenCL
/// specification requires: at least one device, at most as many as the context has, each
/// of the context and named once, and a non-NULL binary of non-zero length for each.
struct LoadArgs<'a> {
    devices: Vec<cl_device_id>,
    lengths: Vec<usize>,
    binaries: Vec<AppBytes<'a>>,
    context_devices: Vec<cl_device_id>,
}

impl<'a> LoadArgs<'a> {
    /// # Safety
    /// The implementation answered the call with success or `CL_INVALID_BINARY` (so
    /// `context` is a valid context and the arrays hold what the count says, up to the
    /// context's number of devices).
    unsafe fn check(route: Route, call: &BinaryCall) -> Option<LoadArgs<'a>> {
        let n = call.devices.len();
        if n == 0 || call.devices.is_null() || call.lengths.is_null() || call.binaries.is_null() {
            return None;
        }
        // SAFETY: a valid context (this function's contract).
        let context_devices = unsafe { query::context_devices(route, call.context) }?;
        // More devices than the context has cannot all be distinct devices of it; the
        // arrays are not read beyond that.
        if n > context_devices.len() {
            return None;
        }
        // SAFETY: the implementation accepted the call, or refused only its binaries, for
        // `n` devices (this function's contract).
        let (devices, lengths, binaries) = unsafe {
            (
                call.devices.read(),
                call.lengths.read(),
                call.binaries.read(),
            )
        };
        let valid = devices
            .iter()
            .enumerate()
            .all(|(i, d)| context_devices.contains(d) && !devices[..i].contains(d))
            && lengths.iter().all(|&l| l > 0)
            && binaries.iter().all(|b| !b.is_null());
        let binaries = binaries
            .iter()
            .zip(&lengths)
            // SAFETY: binary i of lengths[i] bytes, which the OpenCL API requires to be
            // readable for the call (the implementation read them as well); 'a is the call.
            .map(|(&b, &l)| unsafe { AppBytes::new(b, l) })
            .collect();
        valid.then_some(LoadArgs {
            devices,
            lengths,
            binaries,
            context_devices,
        })
    }

    fn any_clshim(&self) -> bool {
        self.binaries.iter().any(container::app_is_clshim)
    }

    /// The binaries as byte slices, for hashing what a program was made from (called only
    /// once the implementation made a program of them): only lengths a slice can have.
    fn slices(&self) -> Vec<&'a [u8]> {
        self.binaries.iter().filter_map(AppBytes::whole).collect()
    }
}

/// Why a set of binaries holding clshim binaries cannot be made into a program: each must
/// be a clshim binary for its device, all carrying the same recipe.
fn check_clshim_binaries(
    rt: &'static Runtime,
    route: Route,
    args: &LoadArgs,
) -> (Vec<Result<(), String>>, Option<Recipe>) {
    // Compared by their encoding: one pass over each recipe's distinct parts.
    let mut recipe: Option<(Recipe, Vec<u8>)> = None;
    let mut verdicts = Vec::with_capacity(args.devices.len());
    for (i, &device) in args.devices.iter().enumerate() {
        let binary = &args.binaries[i];
        let verdict = if !container::app_is_clshim(binary) {
            Err("a native binary beside clshim binaries".to_string())
        } else {
            // SAFETY: a device of the context (LoadArgs::check).
            match unsafe { rt.devices.get(route, device) } {
                None => Err("the device could not be queried".to_string()),
                Some(f) => match container::decode_app(binary, f.fingerprint()) {
                    Err(why) => Err(why.to_string()),
                    Ok(r) => {
                        let body = r.encode();
                        match &recipe {
                            Some((_, s)) if *s != body => {
                                Err("a different recipe than for the other devices".to_string())
                            }
                            _ => {
                                recipe = Some((r, body));
                                Ok(())
                            }
                        }
                    }
                },
            }
        };
        verdicts.push(verdict);
    }
    let all_ok = verdicts.iter().all(Result::is_ok);
    (verdicts, recipe.filter(|_| all_ok).map(|(r, _)| r))
}

/// The application's arguments to `clCreateProgramWithBinary` (its arrays not yet read).
pub struct BinaryCall {
    pub context: cl_context,
    pub devices: AppArray<cl_device_id>,
    pub lengths: AppArray<usize>,
    pub binaries: AppArray<*const u8>,
}

/// What `clCreateProgramWithBinary` answers, for the entry point to return and write.
pub struct Created {
    pub program: cl_program,
    /// For `errcode_ret`.
    pub errcode: cl_int,
    /// For `binary_status`, one per device named (None: as the implementation wrote it).
    pub statuses: Option<Vec<cl_int>>,
}

/// `clCreateProgramWithBinary`: clshim binaries become a program built from their source;
/// anything else is the implementation's. The implementation is always asked first, with
/// the application's own arguments, so its argument checks come first: clshim's answer
/// differs from the implementation's only for a call with valid arguments holding clshim
/// binaries (which the implementation refuses with `CL_INVALID_BINARY`, or, if it took
/// them, whose program clshim releases). Recorded either way.
///
/// # Safety
/// `call` and `binary_status` are the application's arguments; `real` is the
/// implementation's entry point.
pub unsafe fn create_with_binary(
    rt: &'static Runtime,
    route: Route,
    real: FnCreateProgramWithBinary,
    call: &BinaryCall,
    binary_status: *mut cl_int,
) -> Created {
    let start = Start::now();
    let mut err = CL_SUCCESS;
    // SAFETY: the application's own call, handed on unchanged (but for clshim's own
    // errcode_ret, to see the status).
    let driver_program = unsafe {
        real(
            call.context,
            call.devices.len() as cl_uint,
            call.devices.as_ptr(),
            call.lengths.as_ptr(),
            call.binaries.as_ptr(),
            binary_status,
            &mut err,
        )
    };
    // Only a call whose arguments the implementation accepted can be read; a refusal for
    // another reason than the binaries is the application's answer as it stands.
    let args = if driver_program.is_null() && err != CL_INVALID_BINARY {
        None
    } else {
        // SAFETY: the implementation made a program or refused only the binaries.
        crate::guard::catch(|| unsafe { LoadArgs::check(route, call) }).flatten()
    };
    let clshim = args.as_ref().map(LoadArgs::any_clshim).unwrap_or(false);
    let forward = |args: Option<&LoadArgs>| {
        let seconds = start.elapsed().as_secs_f64();
        crate::guard::catch(|| {
            let (devices, lengths, slices) = match args {
                Some(a) if !driver_program.is_null() => {
                    // The implementation made a program of these binaries.
                    (&a.devices[..], a.lengths.clone(), a.slices())
                }
                Some(a) => (&a.devices[..], a.lengths.clone(), Vec::new()),
                None => (&[][..], Vec::new(), Vec::new()),
            };
            record_load(
                rt,
                route,
                devices,
                start,
                seconds,
                err,
                "forward",
                None,
                lengths,
                Some((driver_program, Origin::Binary, &slices)),
                None,
            );
        });
        Created {
            program: driver_program,
            errcode: err,
            statuses: None,
        }
    };
    let args = match args {
        Some(a) if clshim => a,
        other => return forward(other.as_ref()),
    };
    let (mut verdicts, mut recipe) = check_clshim_binaries(rt, route, &args);
    if recipe.is_some() && args.devices.len() != args.context_devices.len() {
        // A program made from source belongs to every device of the context, a program made
        // from binaries only to the devices they were given for: refuse a subset rather
        // than hand the application a program with devices it did not ask for.
        let why = format!(
            "given for {} of the context's {} devices; clshim can only make a program for \
             all of them",
            args.devices.len(),
            args.context_devices.len()
        );
        verdicts.iter_mut().for_each(|v| *v = Err(why.clone()));
        recipe = None;
    }
    let lengths_json = args.lengths.clone();
    // The implementation's program, if it took the clshim binaries as its own, gives way
    // to clshim's answer.
    if !driver_program.is_null() {
        // SAFETY: a live program the implementation just made, that the application never
        // saw: clshim holds its only reference. Released here.
        drop(unsafe { OwnedProgram::new(route, driver_program) });
    }
    // The driver's own binaries from the native store where it holds them for every
    // device; else the recipe is made again now, so that a refusal (a part the
    // implementation no longer compiles) is the load's CL_INVALID_BINARY, never a partial
    // program.
    let mut native_miss = None;
    let made = recipe.map(|r| {
        // SAFETY: a valid context and distinct devices of it (LoadArgs::check); `real` is
        // the implementation's entry.
        let native = crate::guard::catch(|| unsafe {
            load_native(rt, route, real, call.context, &args.devices, &r)
        })
        .unwrap_or_else(|| Err(Miss::of(MissKind::Other, "clshim failed reading the store")));
        match native {
            Ok(p) => (r, Ok(p)),
            Err(why) => {
                native_miss = Some(why);
                // SAFETY: a valid context and distinct devices of it (LoadArgs::check).
                let made = unsafe { recreate(route, call.context, &args.devices, &r) };
                (r, made)
            }
        }
    });
    let made = match made {
        Some((r, Err(why))) => {
            verdicts
                .iter_mut()
                .for_each(|v| *v = Err(format!("{} recipe: {why}", r.kind.name())));
            None
        }
        Some((r, Ok(p))) => Some((r, p)),
        None => None,
    };
    let Some((recipe, program)) = made else {
        let reason = verdicts
            .iter()
            .enumerate()
            .find_map(|(i, v)| v.as_ref().err().map(|e| format!("device {i}: {e}")));
        // Where the implementation refused the binaries too, binary_status stays as it
        // wrote it: the application gets exactly the implementation's answer.
        let statuses = (!driver_program.is_null()).then(|| {
            verdicts
                .iter()
                .map(|v| {
                    if v.is_ok() {
                        CL_SUCCESS
                    } else {
                        CL_INVALID_BINARY
                    }
                })
                .collect()
        });
        let seconds = start.elapsed().as_secs_f64();
        crate::guard::catch(|| {
            if let Some(r) = &reason {
                log::warn!(
                    "rejected a clshim binary ({r}); the application will build from source"
                );
            }
            record_load(
                rt,
                route,
                &args.devices,
                start,
                seconds,
                CL_INVALID_BINARY,
                "reject",
                reason,
                lengths_json,
                None,
                None,
            );
        });
        return Created {
            program: std::ptr::null_mut(),
            errcode: CL_INVALID_BINARY,
            statuses,
        };
    };
    let seconds = start.elapsed().as_secs_f64();
    crate::guard::catch(|| {
        record_load(
            rt,
            route,
            &args.devices,
            start,
            seconds,
            CL_SUCCESS,
            "substitute",
            None,
            lengths_json,
            Some((program.get(), Origin::ClshimBinary, &[&made_from(&recipe)])),
            Some(native_miss.clone()),
        );
        remember(rt, program.get(), recipe, native_miss.is_none());
    });
    Created {
        program: program.into_raw(),
        errcode: CL_SUCCESS,
        statuses: Some(vec![CL_SUCCESS; args.devices.len()]),
    }
}

/// What a recreated program is recorded as made from: the text of a build or compile
/// recipe (so that its hash matches the program the binary was taken from), the whole
/// recipe's encoding for a link.
fn made_from(recipe: &Recipe) -> Vec<u8> {
    match recipe.kind {
        Kind::Built | Kind::Compiled => recipe.text.bytes().to_vec(),
        Kind::Library | Kind::Linked => recipe.encode(),
    }
}

/// The program made from the driver's own binaries in the native store, for every device
/// of the load, of the kind the recipe says; else why not (the caller makes the recipe
/// again). Only a build whose key can be computed has entries (`store::build_key`: a pocl
/// device, a recipe with its options, includes the manifest can follow).
///
/// # Safety
/// `context` is a valid context and `devices` distinct devices of it; `real` is the
/// implementation's `clCreateProgramWithBinary`.
unsafe fn load_native(
    rt: &'static Runtime,
    route: Route,
    real: FnCreateProgramWithBinary,
    context: cl_context,
    devices: &[cl_device_id],
    recipe: &Recipe,
) -> Result<OwnedProgram, Miss> {
    let store = Store::from_config(&rt.config)
        .ok_or_else(|| Miss::of(MissKind::CannotKeep, "no native store"))?;
    let encoded = recipe.encode();
    let mut payloads = Vec::with_capacity(devices.len());
    for (i, &d) in devices.iter().enumerate() {
        // SAFETY: a device of the context (this function's contract).
        let facts = unsafe { rt.devices.get(route, d) }
            .ok_or_else(|| Miss::of(MissKind::Other, "a device not queried"))?;
        // SAFETY: as above.
        let key =
            unsafe { crate::store::key_for(&facts, d, recipe, &encoded) }.map_err(|why| Miss {
                device: Some(i),
                ..Miss::of(MissKind::CannotKeep, why)
            })?;
        let found = store.lookup(&key).found(i);
        if matches!(&found, Err(m) if m.kind == MissKind::NoEntry) {
            // Its driver's binary is missing, or being made: a request is left if none
            // waits, for the node's warm service (which this process waits for at its
            // exit) or `clshim warm`.
            // SAFETY: as above.
            if let Ok(w) = unsafe { crate::store::wanted(&facts, d, recipe, &encoded) } {
                crate::store::request(&rt.config, &[w], &encoded);
            }
        }
        payloads.push(found?.binary);
    }
    let other = |why: String| Miss::of(MissKind::Other, why);
    // SAFETY: this function's contract; one verified binary per device.
    let program =
        unsafe { from_native(route, real, context, devices, &payloads) }.map_err(other)?;
    let want = match recipe.kind {
        Kind::Built | Kind::Linked => CL_PROGRAM_BINARY_TYPE_EXECUTABLE,
        Kind::Compiled => CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT,
        Kind::Library => CL_PROGRAM_BINARY_TYPE_LIBRARY,
    };
    let other_kind = devices.iter().any(|&d| {
        // SAFETY: the live program clshim just made, for devices of its context.
        let got = unsafe { query::binary_type(route, program.get(), d) };
        got != Some(want)
    });
    if other_kind {
        return Err(other(
            "the native binary is of another kind than the recipe".into(),
        ));
    }
    Ok(program)
}

/// A program the driver makes of its own binaries, one per device; else why not.
///
/// # Safety
/// `context` is a valid context and `devices` distinct devices of it; `real` is the
/// implementation's `clCreateProgramWithBinary`.
pub(crate) unsafe fn from_native(
    route: Route,
    real: FnCreateProgramWithBinary,
    context: cl_context,
    devices: &[cl_device_id],
    payloads: &[Vec<u8>],
) -> Result<OwnedProgram, String> {
    let lengths: Vec<usize> = payloads.iter().map(Vec::len).collect();
    let ptrs: Vec<*const u8> = payloads.iter().map(|p| p.as_ptr()).collect();
    let mut statuses = vec![CL_SUCCESS; devices.len()];
    let mut err = CL_INVALID_OPERATION;
    // SAFETY: the implementation's entry, a valid context and devices of it, and
    // clshim's own arrays (one verified binary per device), alive for the call.
    let program = unsafe {
        real(
            context,
            devices.len() as cl_uint,
            devices.as_ptr(),
            lengths.as_ptr(),
            ptrs.as_ptr(),
            statuses.as_mut_ptr(),
            &mut err,
        )
    };
    // SAFETY: when not NULL, a program clshim just made and holds the only reference to.
    let owned = (!program.is_null()).then(|| unsafe { OwnedProgram::new(route, program) });
    match owned {
        Some(p) if err == CL_SUCCESS => Ok(p),
        _ => Err(format!(
            "the driver refused the native binary ({})",
            status_name(err)
        )),
    }
}

/// What the registry keeps of a recreated program: its recipe (so that its own binary
/// query can carry it again) and, for a build recipe made again, the options its build
/// must use and that it stands for an executable. A linked executable made again is built
/// already (its build is answered by clshim). A program loaded from the driver's `native`
/// binary is one, as pocl's own binary load makes: the application's build goes to the
/// driver with the application's own options (so build options and kernel argument info
/// answer as for that load).
fn remember(rt: &'static Runtime, program: cl_program, recipe: Recipe, native: bool) {
    if !native && matches!(recipe.kind, Kind::Built | Kind::Linked) {
        rt.programs.set_loaded(
            program,
            Loaded {
                options: recipe
                    .options
                    .clone()
                    .filter(|_| recipe.kind == Kind::Built),
                executable: recipe.kind == Kind::Built,
                linked: recipe.kind == Kind::Linked,
            },
        );
    }
    if recipe.options.is_some() {
        rt.programs.set_recipe(program, Arc::new(recipe));
    }
}

#[allow(clippy::too_many_arguments)]
fn record_load(
    rt: &'static Runtime,
    route: Route,
    devices: &[cl_device_id],
    start: Start,
    seconds: f64,
    ret: cl_int,
    action: &'static str,
    reason: Option<String>,
    lengths: Vec<usize>,
    made: Option<(cl_program, Origin, &[&[u8]])>,
    native_miss: Option<Option<Miss>>,
) {
    // The program the call made (if any) enters the registry with the hash and length of
    // what it was made from: the binaries as given, or the source a clshim binary carried.
    let info = made
        .filter(|(program, _, _)| !program.is_null())
        .map(|(program, origin, parts)| rt.programs.made_from(program, origin, parts));
    // SAFETY: the application's device handles, valid for the call being recorded.
    let facts: Vec<_> = devices
        .iter()
        .map(|&d| unsafe { rt.devices.get(route, d) })
        .collect();
    let record = schema::Record::BinaryLoad(schema::BinaryLoad {
        call: "clCreateProgramWithBinary",
        program: info.map(|i| i.id),
        result: ret,
        result_name: status_name(ret),
        action,
        reason,
        lengths,
        source: info.map(|i| i.source()),
        devices: describe_all(rt.config.devices, &facts),
        made_from: native_miss
            .as_ref()
            .map(|m| if m.is_none() { "native" } else { "recipe" }),
        native_miss_kind: native_miss
            .as_ref()
            .and_then(|m| m.as_ref().map(|m| m.kind)),
        native_miss: native_miss.flatten().map(|m| m.text()),
    });
    rt.recorder.emit(start, seconds, &record);
}
