//! Taking clshim binaries back: `clCreateProgramWithBinary` given the binaries that
//! `substitute` handed out turns them into a program built from the source they carry,
//! for every device of the context or not at all; any other binary is the
//! implementation's. The implementation is always asked first with the application's own
//! arguments, so its argument checks come first and clshim reads no more of the
//! application's arrays than it did. What a clshim binary carries, and how it is checked,
//! is `container`'s.

use crate::cl::*;
use crate::container;
use crate::devices::describe_all;
use crate::dispatch::{slot, Route};
use crate::programs::Origin;
use crate::query;
use crate::record::Start;
use crate::runtime::Runtime;
use crate::schema::{self};
use std::ffi::c_char;

/// The arguments of a `clCreateProgramWithBinary` call that the implementation accepted
/// or refused for its binaries alone, copied once clshim has checked them as the OpenCL
/// specification requires: at least one device, at most as many as the context has, each
/// of the context and named once, and a non-NULL binary of non-zero length for each.
struct LoadArgs {
    devices: Vec<cl_device_id>,
    lengths: Vec<usize>,
    binaries: Vec<*const u8>,
    context_devices: Vec<cl_device_id>,
}

impl LoadArgs {
    /// # Safety
    /// The application's arguments; the implementation must have answered the call with
    /// success or `CL_INVALID_BINARY` (so `context` is a valid context).
    unsafe fn check(
        route: Route,
        context: cl_context,
        num_devices: cl_uint,
        device_list: *const cl_device_id,
        lengths: *const usize,
        binaries: *const *const u8,
    ) -> Option<LoadArgs> {
        // SAFETY: this function's contract: The application's arguments; the implementation
        // must have answered the call with success or `CL_INVALID_BINARY` (so `context` is
        // a valid context).
        unsafe {
            if num_devices == 0 || device_list.is_null() || lengths.is_null() || binaries.is_null()
            {
                return None;
            }
            let context_devices = query::context_devices(route, context)?;
            let n = num_devices as usize;
            // More devices than the context has cannot all be distinct devices of it; the
            // arrays are not read beyond that.
            if n > context_devices.len() {
                return None;
            }
            let devices = std::slice::from_raw_parts(device_list, n).to_vec();
            let lengths = std::slice::from_raw_parts(lengths, n).to_vec();
            let binaries = std::slice::from_raw_parts(binaries, n).to_vec();
            let valid = devices
                .iter()
                .enumerate()
                .all(|(i, d)| context_devices.contains(d) && !devices[..i].contains(d))
                && lengths.iter().all(|&l| l > 0)
                && binaries.iter().all(|b| !b.is_null());
            valid.then_some(LoadArgs {
                devices,
                lengths,
                binaries,
                context_devices,
            })
        }
    }

    fn any_clshim(&self) -> bool {
        // SAFETY: each binary is non-NULL; raw_is_clshim reads at most 8 of its `len`
        // bytes, which the implementation was given to read.
        self.binaries
            .iter()
            .zip(&self.lengths)
            .any(|(&b, &l)| unsafe { container::raw_is_clshim(b, l) })
    }

    /// The binaries as byte slices, for hashing what a program was made from: only after
    /// the implementation accepted them, and only lengths a slice can have.
    unsafe fn slices(&self) -> Vec<&[u8]> {
        // SAFETY: `check` found every binary non-NULL, of non-zero length, and the
        // implementation accepted them (the caller's contract), so each is readable for its
        // length; no slice longer than isize::MAX is made.
        unsafe {
            self.binaries
                .iter()
                .zip(&self.lengths)
                .filter(|(_, &l)| l <= isize::MAX as usize)
                .map(|(&b, &l)| std::slice::from_raw_parts(b, l))
                .collect()
        }
    }
}

/// Why a set of binaries holding clshim binaries cannot become a source program.
fn check_clshim_binaries(
    rt: &'static Runtime,
    route: Route,
    args: &LoadArgs,
) -> (Vec<Result<(), String>>, Option<Vec<u8>>) {
    let mut source: Option<&[u8]> = None;
    let mut verdicts = Vec::with_capacity(args.devices.len());
    for (i, &device) in args.devices.iter().enumerate() {
        let (ptr, len) = (args.binaries[i], args.lengths[i]);
        // SAFETY: checked non-NULL; read no further than its header allows.
        let verdict = if !unsafe { container::raw_is_clshim(ptr, len) } {
            Err("a native binary beside clshim binaries".to_string())
        } else {
            // SAFETY: a device of the context (LoadArgs::check).
            match unsafe { rt.devices.get(route, device) } {
                None => Err("the device could not be queried".to_string()),
                // SAFETY: non-NULL and `len` bytes given to the implementation
                // (LoadArgs::check);
                // decode_raw reads the rest only if the header declares that length.
                Some(f) => match unsafe { container::decode_raw(ptr, len, f.fingerprint()) } {
                    Err(why) => Err(why.to_string()),
                    Ok(src) => match source {
                        Some(s) if s != src => {
                            Err("a different source than for the other devices".to_string())
                        }
                        _ => {
                            source = Some(src);
                            Ok(())
                        }
                    },
                },
            }
        };
        verdicts.push(verdict);
    }
    let all_ok = verdicts.iter().all(Result::is_ok);
    (
        verdicts,
        if all_ok {
            source.map(<[u8]>::to_vec)
        } else {
            None
        },
    )
}

/// `clCreateProgramWithBinary`: clshim binaries become a program built from their source;
/// anything else is the implementation's. The implementation is always asked first, with
/// the application's own arguments, so its argument checks come first: clshim's answer
/// differs from the implementation's only for a call with valid arguments holding clshim
/// binaries (which the implementation refuses with `CL_INVALID_BINARY`, or, if it took
/// them, whose program clshim releases). Recorded either way.
///
/// # Safety
/// The arguments are the application's; `real` is the implementation's entry point.
#[allow(clippy::too_many_arguments)]
pub unsafe fn create_with_binary(
    rt: &'static Runtime,
    route: Route,
    real: FnCreateProgramWithBinary,
    context: cl_context,
    num_devices: cl_uint,
    device_list: *const cl_device_id,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut cl_int,
    errcode_ret: *mut cl_int,
) -> cl_program {
    // SAFETY: this function's contract: The arguments are the application's; `real` is the
    // implementation's entry point.
    unsafe {
        let start = Start::now();
        let mut err = CL_SUCCESS;
        let driver_program = real(
            context,
            num_devices,
            device_list,
            lengths,
            binaries,
            binary_status,
            &mut err,
        );
        // Only a call whose arguments the implementation accepted can be read; a refusal for
        // another reason than the binaries is the application's answer as it stands.
        let args = if driver_program.is_null() && err != CL_INVALID_BINARY {
            None
        } else {
            crate::guard::catch(|| {
                LoadArgs::check(route, context, num_devices, device_list, lengths, binaries)
            })
            .flatten()
        };
        let clshim = args.as_ref().map(LoadArgs::any_clshim).unwrap_or(false);
        let forward = |args: Option<&LoadArgs>| {
            set_errcode(errcode_ret, err);
            let seconds = start.elapsed().as_secs_f64();
            crate::guard::catch(|| {
                let (devices, lengths, slices) = match args {
                    Some(a) if !driver_program.is_null() => {
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
                );
            });
            driver_program
        };
        let args = match args {
            Some(a) if clshim => a,
            other => return forward(other.as_ref()),
        };
        let (mut verdicts, mut source) = check_clshim_binaries(rt, route, &args);
        if source.is_some() && args.devices.len() != args.context_devices.len() {
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
            source = None;
        }
        let lengths_json = args.lengths.clone();
        // The implementation's program, if it took the clshim binaries as its own, gives way
        // to clshim's answer.
        if !driver_program.is_null() {
            if let Some(release) =
                route.entry::<FnReleaseProgram>(driver_program, slot::RELEASE_PROGRAM)
            {
                release(driver_program);
            }
        }
        let Some(source) = source else {
            let reason = verdicts
                .iter()
                .enumerate()
                .find_map(|(i, v)| v.as_ref().err().map(|e| format!("device {i}: {e}")));
            // Where the implementation refused the binaries too, binary_status stays as it
            // wrote it: the application gets exactly the implementation's answer.
            if !driver_program.is_null() {
                let statuses: Vec<cl_int> = verdicts
                    .iter()
                    .map(|v| {
                        if v.is_ok() {
                            CL_SUCCESS
                        } else {
                            CL_INVALID_BINARY
                        }
                    })
                    .collect();
                write_statuses(binary_status, &statuses);
            }
            set_errcode(errcode_ret, CL_INVALID_BINARY);
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
                );
            });
            return std::ptr::null_mut();
        };
        let mut err = CL_INVALID_OPERATION;
        let mut program = std::ptr::null_mut();
        if let Some(create) =
            route.entry::<FnCreateProgramWithSource>(context, slot::CREATE_PROGRAM_WITH_SOURCE)
        {
            // The source is never empty (container::decode), so the length is never 0, which
            // would mean "NUL-terminated" to the implementation.
            let text = source.as_ptr() as *const c_char;
            let len = source.len();
            program = create(context, 1, &text, &len, &mut err);
        }
        let status = if program.is_null() { err } else { CL_SUCCESS };
        write_statuses(binary_status, &vec![status; args.devices.len()]);
        set_errcode(errcode_ret, err);
        let seconds = start.elapsed().as_secs_f64();
        crate::guard::catch(|| {
            record_load(
                rt,
                route,
                &args.devices,
                start,
                seconds,
                err,
                "substitute",
                None,
                lengths_json,
                Some((program, Origin::ClshimBinary, &[&source[..]])),
            );
        });
        program
    }
}

/// Writes one status per device into the application's `binary_status`, if it gave one.
///
/// # Safety
/// `binary_status` is NULL or the application's array of one status per device it named
/// (`statuses` has as many: the devices `LoadArgs::check` found).
unsafe fn write_statuses(binary_status: *mut cl_int, statuses: &[cl_int]) {
    if binary_status.is_null() {
        return;
    }
    for (i, &s) in statuses.iter().enumerate() {
        // SAFETY: this function's contract; an element-by-element unaligned write, as the
        // array is the application's.
        unsafe { binary_status.add(i).write_unaligned(s) };
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
    });
    rt.recorder.emit(start, seconds, &record);
}
