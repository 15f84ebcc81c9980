//! The binary policy (`CLSHIM_BINARIES`): how clshim answers `CL_PROGRAM_BINARY_SIZES` and
//! `CL_PROGRAM_BINARIES` queries, and how it takes clshim binaries back in
//! `clCreateProgramWithBinary`. Decided device by device: only devices the `DeviceFilter`
//! selects, built successfully, are answered by clshim (`suppress`: no binary; `substitute`:
//! a clshim binary carrying the source, for programs that have source); every other device
//! gets the implementation's own answer. When no device needs the implementation, it is
//! not asked at all, and that is what spares pocl its second compile. Whatever is answered,
//! the sizes and the binaries the application receives agree.

use crate::cl::*;
use crate::config::BinaryPolicy;
use crate::container;
use crate::devices::DeviceFacts;
use crate::dispatch::{slot, Route};
use crate::hash::Fnv1a;
use crate::programs::{Origin, ProgramInfo};
use crate::query;
use crate::record::{EventKind, Start};
use crate::runtime::Runtime;
use serde_json::{json, Value};
use std::ffi::{c_char, c_void};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Forward,
    Suppress,
    Substitute,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Forward => "forward",
            Action::Suppress => "suppress",
            Action::Substitute => "substitute",
        }
    }
}

/// How one binary query will be answered.
pub struct Plan {
    program: ProgramInfo,
    facts: Vec<Option<Arc<DeviceFacts>>>,
    actions: Vec<Action>,
    /// The clshim binary for each substituted device (fingerprints differ per device).
    substitutes: Vec<Option<Vec<u8>>>,
}

impl Plan {
    fn n(&self) -> usize {
        self.actions.len()
    }

    fn any_forward(&self) -> bool {
        self.actions.contains(&Action::Forward)
    }

    /// The size clshim reports for device `i` (None when the implementation answers).
    fn own_size(&self, i: usize) -> Option<usize> {
        match self.actions[i] {
            Action::Forward => None,
            Action::Suppress => Some(0),
            Action::Substitute => self.substitutes[i].as_ref().map(Vec::len),
        }
    }
}

/// Decides, device by device, how to answer a binary query on `program`.
///
/// # Safety
/// `program` must be live and reachable through `route`.
pub unsafe fn plan(rt: &'static Runtime, route: Route, program: cl_program) -> Option<Plan> {
    let info = rt.programs.lookup(program);
    let devices = query::devices(route, program)?;
    let facts: Vec<_> = devices.iter().map(|&d| rt.devices.get(route, d)).collect();
    let policy = rt.config.binaries;
    let mut source: Option<Option<Vec<u8>>> = None; // fetched once, only if needed
    let mut actions = Vec::with_capacity(devices.len());
    let mut substitutes = Vec::with_capacity(devices.len());
    for (i, &device) in devices.iter().enumerate() {
        let selected = facts[i]
            .as_ref()
            .map(|f| f.selected_by(rt.config.devices))
            .unwrap_or(false);
        let mut action = Action::Forward;
        let mut substitute = None;
        if selected && policy != BinaryPolicy::Pass && query::built_for(route, program, device) {
            match policy {
                BinaryPolicy::Suppress => action = Action::Suppress,
                BinaryPolicy::Substitute
                    if info.origin.has_source() || info.origin == Origin::Unknown =>
                {
                    let src = source.get_or_insert_with(|| {
                        query::source(route, program).filter(|s| !s.is_empty())
                    });
                    if let (Some(src), Some(f)) = (src.as_ref(), facts[i].as_ref()) {
                        action = Action::Substitute;
                        substitute = Some(container::encode(src, f.fingerprint()));
                    }
                }
                _ => {}
            }
        }
        actions.push(action);
        substitutes.push(substitute);
    }
    Some(Plan {
        program: info,
        facts,
        actions,
        substitutes,
    })
}

/// Answers a binary query (`param_value` non-NULL) on `program` and records it.
///
/// # Safety
/// The arguments are the application's; `real` is the implementation's clGetProgramInfo.
#[allow(clippy::too_many_arguments)]
pub unsafe fn binary_query(
    rt: &'static Runtime,
    route: Route,
    real: FnGetProgramInfo,
    program: cl_program,
    param: cl_program_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> cl_int {
    let start = Start::now();
    let plan = crate::guard::catch(|| plan(rt, route, program)).flatten();
    let forward_all = plan
        .as_ref()
        .map(|p| !p.actions.iter().any(|a| *a != Action::Forward))
        .unwrap_or(true);
    let (ret, sizes) = if forward_all {
        let ret = real(program, param, size, value, size_ret);
        let n = plan.as_ref().map(Plan::n).unwrap_or(0);
        let sizes = (ret == CL_SUCCESS
            && param == CL_PROGRAM_BINARY_SIZES
            && size >= n * std::mem::size_of::<usize>())
        .then(|| {
            // The application's buffer need not be aligned for usize.
            (0..n)
                .map(|i| Some((value as *const usize).add(i).read_unaligned()))
                .collect::<Vec<_>>()
        });
        (ret, sizes)
    } else {
        answer(
            plan.as_ref().unwrap(),
            real,
            program,
            param,
            size,
            value,
            size_ret,
        )
    };
    let seconds = start.elapsed().as_secs_f64();
    crate::guard::catch(|| record_query(rt, plan.as_ref(), param, start, seconds, ret, sizes));
    ret
}

/// Writes clshim's answer, asking the implementation only for the devices it answers.
unsafe fn answer(
    plan: &Plan,
    real: FnGetProgramInfo,
    program: cl_program,
    param: cl_program_info,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> (cl_int, Option<Vec<Option<usize>>>) {
    let n = plan.n();
    let bytes = n * std::mem::size_of::<usize>();
    if size < bytes {
        return (CL_INVALID_VALUE, None);
    }
    let mut sizes: Vec<Option<usize>> = (0..n).map(|i| plan.own_size(i)).collect();
    if param == CL_PROGRAM_BINARY_SIZES {
        let mut all = vec![0usize; n];
        if plan.any_forward() {
            let ret = real(
                program,
                param,
                bytes,
                all.as_mut_ptr() as *mut c_void,
                std::ptr::null_mut(),
            );
            if ret != CL_SUCCESS {
                return (ret, None);
            }
        }
        for i in 0..n {
            match sizes[i] {
                Some(s) => all[i] = s,
                None => sizes[i] = Some(all[i]),
            }
        }
        // Byte copies: the application's buffer need not be aligned for usize.
        std::ptr::copy_nonoverlapping(all.as_ptr() as *const u8, value as *mut u8, bytes);
    } else {
        let app: Vec<*mut u8> = (0..n)
            .map(|i| (value as *const *mut u8).add(i).read_unaligned())
            .collect();
        if (0..n).any(|i| plan.actions[i] == Action::Forward && !app[i].is_null()) {
            // The devices clshim answers get a scratch buffer of the driver's own size, not a
            // NULL entry: pocl 3.1 does not skip NULL entries of CL_PROGRAM_BINARIES, it
            // crashes on them. The scratch copies are discarded.
            let mut driver_sizes = vec![0usize; n];
            let ret = real(
                program,
                CL_PROGRAM_BINARY_SIZES,
                bytes,
                driver_sizes.as_mut_ptr() as *mut c_void,
                std::ptr::null_mut(),
            );
            if ret != CL_SUCCESS {
                return (ret, None);
            }
            let mut scratch: Vec<Vec<u8>> = Vec::new();
            let mut mine: Vec<*mut u8> = (0..n)
                .map(|i| {
                    if plan.actions[i] == Action::Forward {
                        app[i]
                    } else {
                        scratch.push(vec![0u8; driver_sizes[i].max(1)]);
                        scratch.last_mut().unwrap().as_mut_ptr()
                    }
                })
                .collect();
            let ret = real(
                program,
                param,
                bytes,
                mine.as_mut_ptr() as *mut c_void,
                std::ptr::null_mut(),
            );
            if ret != CL_SUCCESS {
                return (ret, None);
            }
        }
        for (bin, &dst) in plan.substitutes.iter().zip(&app) {
            if let (Some(bin), false) = (bin, dst.is_null()) {
                std::ptr::copy_nonoverlapping(bin.as_ptr(), dst, bin.len());
            }
        }
    }
    if !size_ret.is_null() {
        *size_ret = bytes;
    }
    (CL_SUCCESS, Some(sizes))
}

fn devices_json(rt: &Runtime, facts: &[Option<Arc<DeviceFacts>>]) -> Vec<Value> {
    facts
        .iter()
        .map(|f| {
            f.as_ref()
                .map(|f| f.to_json(rt.config.devices))
                .unwrap_or(Value::Null)
        })
        .collect()
}

fn record_query(
    rt: &'static Runtime,
    plan: Option<&Plan>,
    param: cl_program_info,
    start: Start,
    seconds: f64,
    ret: cl_int,
    sizes: Option<Vec<Option<usize>>>,
) {
    let actions: Vec<Action> = plan.map(|p| p.actions.clone()).unwrap_or_default();
    let action = match actions.first() {
        None => "forward",
        Some(a) if actions.iter().all(|b| b == a) => a.name(),
        Some(_) => "mixed",
    };
    let selected: Vec<bool> = plan
        .map(|p| {
            p.facts
                .iter()
                .map(|f| {
                    f.as_ref()
                        .map(|f| f.selected_by(rt.config.devices))
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default();
    // Time spent forwarding to devices the policy could have answered: what it would save.
    let avoidable = actions
        .iter()
        .zip(&selected)
        .any(|(a, s)| *a == Action::Forward && *s);
    let param_name = if param == CL_PROGRAM_BINARY_SIZES {
        "CL_PROGRAM_BINARY_SIZES"
    } else {
        "CL_PROGRAM_BINARIES"
    };
    let fields = json!({
        "call": "clGetProgramInfo",
        "program": plan.map(|p| p.program.id),
        "param": param_name,
        "result": ret,
        "result_name": status_name(ret),
        "action": action,
        "actions": actions.iter().map(|a| a.name()).collect::<Vec<_>>(),
        "sizes": sizes,
        "devices": plan.map(|p| devices_json(rt, &p.facts)).unwrap_or_default(),
    });
    // Only answers the application actually received count as substituted or suppressed.
    let answered = |which: Action| {
        if ret == CL_SUCCESS {
            actions.iter().filter(|a| **a == which).count() as u64
        } else {
            0
        }
    };
    let substituted = answered(Action::Substitute);
    let suppressed = answered(Action::Suppress);
    let device = plan
        .and_then(|p| p.facts.first().cloned().flatten())
        .map(|f| {
            format!(
                " on {} ({} {})",
                f.name,
                f.platform,
                crate::cl::device_type_name(f.device_type)
            )
        })
        .unwrap_or_default();
    let id = plan
        .map(|p| p.program.id.to_string())
        .unwrap_or_else(|| "-".into());
    rt.recorder.emit(
        EventKind::BinaryQuery,
        start,
        seconds,
        fields,
        |t| {
            t.queries += 1;
            t.query_seconds += seconds;
            if avoidable {
                t.avoidable_query_seconds += seconds;
            }
            t.substituted += substituted;
            t.suppressed += suppressed;
        },
        || format!("binary query {param_name} of program {id} took {seconds:.3} s{device} [{action}] -> {}", status_name(ret)),
    );
}

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
        if num_devices == 0 || device_list.is_null() || lengths.is_null() || binaries.is_null() {
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
        self.binaries
            .iter()
            .zip(&self.lengths)
            .filter(|(_, &l)| l <= isize::MAX as usize)
            .map(|(&b, &l)| std::slice::from_raw_parts(b, l))
            .collect()
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
        if !driver_program.is_null() && !binary_status.is_null() {
            for (i, v) in verdicts.iter().enumerate() {
                *binary_status.add(i) = if v.is_ok() {
                    CL_SUCCESS
                } else {
                    CL_INVALID_BINARY
                };
            }
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
    if !binary_status.is_null() {
        for i in 0..args.devices.len() {
            *binary_status.add(i) = if program.is_null() { err } else { CL_SUCCESS };
        }
    }
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
        .map(|(program, origin, parts)| {
            let mut h = Fnv1a::default();
            parts.iter().for_each(|p| {
                h.update(p);
            });
            let len = parts.iter().map(|p| p.len()).sum();
            rt.programs
                .created(program, origin, Some(h.finish()), Some(len))
        });
    // SAFETY: the application's device handles, valid for the call being recorded.
    let facts: Vec<_> = devices
        .iter()
        .map(|&d| unsafe { rt.devices.get(route, d) })
        .collect();
    let fields = json!({
        "call": "clCreateProgramWithBinary",
        "program": info.map(|i| i.id),
        "result": ret,
        "result_name": status_name(ret),
        "action": action,
        "reason": reason,
        "lengths": lengths,
        "source": info.map(|i| i.source_json()),
        "devices": devices_json(rt, &facts),
    });
    let rejected = action == "reject";
    rt.recorder.emit(
        EventKind::BinaryLoad,
        start,
        seconds,
        fields,
        |t| {
            t.loads += 1;
            t.rejected += rejected as u64;
        },
        || {
            let id = info.map(|i| i.id.to_string()).unwrap_or_else(|| "-".into());
            format!(
                "binary load of program {id} took {seconds:.3} s [{action}] -> {}",
                status_name(ret)
            )
        },
    );
}
