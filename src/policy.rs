//! The binary policy (`CLSHIM_BINARIES`): how clshim answers `CL_PROGRAM_BINARY_SIZES` and
//! `CL_PROGRAM_BINARIES` queries (taking its binaries back is `binary_load`'s). Decided device by device: only devices the `DeviceFilter`
//! selects, built successfully, are answered by clshim (`suppress`: no binary; `substitute`:
//! a clshim binary carrying the program's recipe where one was recorded (built, compiled
//! or linked under `substitute`), else its source alone); every other device
//! gets the implementation's own answer. When no device needs the implementation, it is
//! not asked at all, and that is what spares pocl its second compile. Whatever is answered,
//! the sizes and the binaries the application receives agree.

use crate::cl::*;
use crate::config::BinaryPolicy;
use crate::container;
use crate::devices::{describe_all, DeviceFacts};
use crate::dispatch::Route;
use crate::programs::{Origin, ProgramInfo};
use crate::query;
use crate::record::Start;
use crate::runtime::Runtime;
use crate::schema::{self};
use std::ffi::c_void;
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
    // SAFETY: this function's contract: `program` must be live and reachable through
    // `route`.
    unsafe {
        let info = rt.programs.lookup(program);
        let devices = query::devices(route, program)?;
        let facts: Vec<_> = devices.iter().map(|&d| rt.devices.get(route, d)).collect();
        let policy = rt.config.binaries;
        let mut source: Option<Option<Vec<u8>>> = None; // fetched once, only if needed
        let recipe = if policy == BinaryPolicy::Substitute {
            rt.programs.recipe(program)
        } else {
            None
        };
        let mut actions = Vec::with_capacity(devices.len());
        let mut substitutes = Vec::with_capacity(devices.len());
        for (i, &device) in devices.iter().enumerate() {
            let selected = facts[i]
                .as_ref()
                .map(|f| f.selected_by(rt.config.devices))
                .unwrap_or(false);
            let mut action = Action::Forward;
            let mut substitute = None;
            if selected && policy != BinaryPolicy::Pass && query::built_for(route, program, device)
            {
                match policy {
                    BinaryPolicy::Suppress => action = Action::Suppress,
                    BinaryPolicy::Substitute if recipe.is_some() => {
                        if let (Some(r), Some(f)) = (recipe.as_ref(), facts[i].as_ref()) {
                            action = Action::Substitute;
                            substitute = Some(container::encode_recipe(r, f.fingerprint()));
                        }
                    }
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
    // SAFETY: this function's contract: The arguments are the application's; `real` is the
    // implementation's clGetProgramInfo.
    unsafe {
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
    // SAFETY: the caller's (`binary_query`'s) arguments: `value` is NULL or holds `size`
    // bytes, `size_ret` NULL or writable, `program` live.
    unsafe {
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
    let param_name = if param == CL_PROGRAM_BINARY_SIZES {
        "CL_PROGRAM_BINARY_SIZES"
    } else {
        "CL_PROGRAM_BINARIES"
    };
    let record = schema::Record::BinaryQuery(schema::BinaryQuery {
        call: "clGetProgramInfo",
        program: plan.map(|p| p.program.id),
        param: param_name,
        result: ret,
        result_name: status_name(ret),
        action,
        actions: actions.iter().map(|a| a.name()).collect(),
        sizes,
        devices: plan
            .map(|p| describe_all(rt.config.devices, &p.facts))
            .unwrap_or_default(),
    });
    rt.recorder.emit(start, seconds, &record);
}
