//! The binary policy (`CLSHIM_BINARIES`): how clshim answers `CL_PROGRAM_BINARY_SIZES` and
//! `CL_PROGRAM_BINARIES` queries (taking its binaries back is `binary_load`'s). Decided device by device: only devices the `DeviceFilter`
//! selects, built successfully, are answered by clshim (`suppress`: no binary; `substitute`:
//! a clshim binary carrying the program's recipe where one was recorded (built, compiled
//! or linked under `substitute`), else its source alone, except for a program whose
//! recipe clshim refused to record); every other device
//! gets the implementation's own answer. When no device needs the implementation, it is
//! not asked at all, and that is what spares pocl its second compile. Whatever is answered,
//! the sizes and the binaries the application receives agree: the answer is decided at a
//! program's first query since its build started and kept for its later ones
//! (`binary_answer`).
//!
//! A clshim binary defers pocl's generic compile to the node's warm service, which is worth
//! it only where a core is idle: on a busy node the service makes the same compile on a
//! core the job needs, loading the compiler again in a process of its own, while the job
//! waits for it at its exit. So under `substitute` with the warm service on, a program
//! planned when no CPU of the process has been idle lately (`idle_cpus`) gets the driver's
//! answer on the devices for which it would leave the service a request
//! ([`Action::DriverOnBusyNode`]), unless `CLSHIM_SUBSTITUTE_WHEN_BUSY` says otherwise;
//! decided once per program and build, so that its sizes and its binaries agree.

use crate::binary_answer::{Action, Answering};
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

/// How one binary query will be answered.
pub struct Plan {
    program: ProgramInfo,
    facts: Vec<Option<Arc<DeviceFacts>>>,
    /// The program's answer while its build stands (the same for every query of it).
    answering: Arc<Answering>,
    /// The program's devices: what a request to the native store names.
    devices: Vec<cl_device_id>,
}

impl Plan {
    fn n(&self) -> usize {
        self.answering.actions.len()
    }

    fn actions(&self) -> &[Action] {
        &self.answering.actions
    }

    fn any_forward(&self) -> bool {
        self.actions().iter().any(|a| a.by_driver())
    }

    /// The size clshim reports for device `i` (None when the implementation answers).
    fn own_size(&self, i: usize) -> Option<usize> {
        match self.actions()[i] {
            Action::Forward | Action::DriverOnBusyNode => None,
            Action::Suppress => Some(0),
            Action::Substitute => self.answering.substitutes[i].as_ref().map(Vec::len),
        }
    }
}

/// How a binary query on `program` is answered: as its build's first query was ([`decide`],
/// kept by the program registry), with the facts of its devices for the record.
///
/// # Safety
/// `program` must be live and reachable through `route`.
pub unsafe fn plan(rt: &'static Runtime, route: Route, program: cl_program) -> Option<Plan> {
    let info = rt.programs.lookup(program);
    // SAFETY: `program` is live and reachable through `route` (this function's contract).
    let devices = unsafe { query::devices(route, program) }?;
    // SAFETY: each is a device of the live program, as its implementation listed it.
    let facts: Vec<_> = devices
        .iter()
        .map(|&d| unsafe { rt.devices.get(route, d) })
        .collect();
    let answering = rt.programs.answering(program, || {
        // SAFETY: as for this function.
        unsafe { decide(rt, route, program, &info, &devices, &facts) }
    });
    if answering.actions.len() != devices.len() {
        return None;
    }
    Some(Plan {
        program: info,
        facts,
        answering,
        devices,
    })
}

/// How the binary queries of `program` (whose registry entry is `info`, its devices
/// `devices` with their `facts`) are answered while its build stands, and whether that is
/// settled: not while a device the policy applies to is not built yet (a query during an
/// asynchronous build, which the implementation refuses).
///
/// # Safety
/// `program` must be live and reachable through `route`.
unsafe fn decide(
    rt: &'static Runtime,
    route: Route,
    program: cl_program,
    info: &ProgramInfo,
    devices: &[cl_device_id],
    facts: &[Option<Arc<DeviceFacts>>],
) -> (Answering, bool) {
    let policy = rt.config.binaries;
    let mut source: Option<Option<Vec<u8>>> = None; // fetched once, only if needed
    let recipe = if policy == BinaryPolicy::Substitute {
        rt.programs.recipe(program)
    } else {
        None
    };
    // A program whose recipe clshim refused to write gets the implementation's answer.
    let refused = recipe.is_none()
        && policy == BinaryPolicy::Substitute
        && rt.programs.recipe_refused(program);
    let mut settled = true;
    let mut actions = Vec::with_capacity(devices.len());
    let mut substitutes = Vec::with_capacity(devices.len());
    for (i, &device) in devices.iter().enumerate() {
        let selected = facts[i]
            .as_ref()
            .map(|f| f.selected_by(rt.config.devices))
            .unwrap_or(false);
        let mut action = Action::Forward;
        let mut substitute = None;
        let applies = selected && policy != BinaryPolicy::Pass && !refused;
        // SAFETY: the live program and one of its devices.
        let built = applies && unsafe { query::built_for(route, program, device) };
        settled &= built || !applies;
        if built {
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
                        // SAFETY: the live program, asked of its implementation.
                        unsafe { query::source(route, program) }.filter(|s| !s.is_empty())
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
    if actions.contains(&Action::Substitute)
        && rt.config.warm_service
        && !rt.config.substitute_when_busy
    {
        let by_driver = busy_node_answers(rt, devices, facts, &actions, recipe.as_deref());
        for (i, driver) in by_driver.into_iter().enumerate() {
            if driver {
                actions[i] = Action::DriverOnBusyNode;
                substitutes[i] = None;
            }
        }
    }
    let answering = Answering {
        actions,
        substitutes,
        recipe,
    };
    (answering, settled)
}

/// Which of the devices `substitute` would answer get the driver's answer instead: none
/// where a CPU of this process has been idle (or that cannot be told); else each for which
/// the clshim binary would leave a request for the warm service (a store, a recipe with
/// its options, a key), unless the store already holds the driver's binary of this very
/// build (then the clshim binary costs nothing later: its loads take that binary). A
/// device that would leave no request is substituted as on an idle node: no service would
/// make anything for it.
fn busy_node_answers(
    rt: &'static Runtime,
    devices: &[cl_device_id],
    facts: &[Option<Arc<DeviceFacts>>],
    actions: &[Action],
    recipe: Option<&crate::recipe::Recipe>,
) -> Vec<bool> {
    let none = vec![false; actions.len()];
    let (Some(store), Some(recipe)) = (
        crate::store::Store::from_config(&rt.config),
        recipe.filter(|r| r.options.is_some()),
    ) else {
        return none;
    };
    if crate::idle_cpus::idle_core() != Some(false) {
        return none;
    }
    let encoded = recipe.encode();
    (0..actions.len())
        .map(|i| {
            let Some(f) = facts[i]
                .as_ref()
                .filter(|_| actions[i] == Action::Substitute)
            else {
                return false;
            };
            // SAFETY: a device of the live program, as its implementation listed it.
            match unsafe { crate::store::key_for(f, devices[i], recipe, &encoded) } {
                Ok(key) => !matches!(store.lookup(&key), crate::store::Lookup::Found(_)),
                Err(_) => false,
            }
        })
        .collect()
}

/// A binary query being answered: its plan, and when it started. The entry point (the
/// only code that touches the application's memory) forwards it whole when clshim answers
/// no device ([`Query::forwards_all`]), else asks [`Query::answer`] what to write, then
/// records it ([`Query::finish`]).
pub struct Query {
    rt: &'static Runtime,
    param: cl_program_info,
    start: Start,
    plan: Option<Plan>,
}

/// What clshim writes for a query it answers: the entry point writes it.
pub struct Answer {
    /// `CL_PROGRAM_BINARY_SIZES`: every device's size, in the application's buffer.
    pub sizes: Option<Vec<usize>>,
    /// `CL_PROGRAM_BINARIES`: (device index, binary) for each device clshim answers, copied
    /// into the application's buffer for that device.
    pub binaries: Vec<(usize, Vec<u8>)>,
    /// `param_value_size_ret`.
    pub size_ret: usize,
    /// The sizes the record shows (None: the implementation's binary, not asked for size).
    recorded: Vec<Option<usize>>,
}

impl Query {
    /// Plans the answer to a binary query on `program` (NULL `param_value` never gets here).
    ///
    /// # Safety
    /// `program` is the application's argument, reachable through `route`.
    pub unsafe fn start(
        rt: &'static Runtime,
        route: Route,
        program: cl_program,
        param: cl_program_info,
    ) -> Query {
        let start = Start::now();
        // SAFETY: `program` is the application's (this function's contract); a program the
        // implementation does not know fails its queries, which make no plan.
        let plan = crate::guard::catch(|| unsafe { plan(rt, route, program) }).flatten();
        Query {
            rt,
            param,
            start,
            plan,
        }
    }

    /// Whether the implementation answers every device (or clshim could not plan).
    pub fn forwards_all(&self) -> bool {
        self.plan
            .as_ref()
            .map(|p| p.actions().iter().all(|a| a.by_driver()))
            .unwrap_or(true)
    }

    /// The program's number of devices (0 when not planned): the entries of the answer.
    pub fn devices(&self) -> usize {
        self.plan.as_ref().map(Plan::n).unwrap_or(0)
    }

    /// clshim's answer for a `param_value` of `size` bytes, asking the implementation only
    /// for the devices it answers; `app_binaries` is, for `CL_PROGRAM_BINARIES`, the
    /// application's buffer for each device (read by the entry point once `size` holds
    /// them; empty otherwise). The implementation writes its own binaries into those
    /// buffers; everything else comes back as the [`Answer`]. Err: the status to return.
    ///
    /// # Safety
    /// `program` is live; `real` is the implementation's clGetProgramInfo; each non-NULL
    /// entry of `app_binaries` holds the size the implementation reports for its device.
    pub unsafe fn answer(
        &self,
        real: FnGetProgramInfo,
        program: cl_program,
        size: usize,
        app_binaries: &[*mut u8],
    ) -> Result<Answer, cl_int> {
        let plan = self.plan.as_ref().ok_or(CL_INVALID_VALUE)?;
        let n = plan.n();
        let bytes = n * std::mem::size_of::<usize>();
        if size < bytes {
            return Err(CL_INVALID_VALUE);
        }
        let mut recorded: Vec<Option<usize>> = (0..n).map(|i| plan.own_size(i)).collect();
        let driver_sizes = |need: bool| -> Result<Vec<usize>, cl_int> {
            let mut all = vec![0usize; n];
            if need {
                // SAFETY: `program` is live (this function's contract) and `all` holds the
                // `bytes` asked for.
                let ret = unsafe {
                    real(
                        program,
                        CL_PROGRAM_BINARY_SIZES,
                        bytes,
                        all.as_mut_ptr() as *mut c_void,
                        std::ptr::null_mut(),
                    )
                };
                if ret != CL_SUCCESS {
                    return Err(ret);
                }
            }
            Ok(all)
        };
        if self.param == CL_PROGRAM_BINARY_SIZES {
            let mut all = driver_sizes(plan.any_forward())?;
            for i in 0..n {
                match recorded[i] {
                    Some(s) => all[i] = s,
                    None => recorded[i] = Some(all[i]),
                }
            }
            return Ok(Answer {
                sizes: Some(all),
                binaries: Vec::new(),
                size_ret: bytes,
                recorded,
            });
        }
        if app_binaries.len() != n {
            return Err(CL_INVALID_VALUE);
        }
        let forwarded = |i: usize| plan.actions()[i].by_driver();
        if (0..n).any(|i| forwarded(i) && !app_binaries[i].is_null()) {
            // The devices clshim answers get a scratch buffer of the driver's own size, not a
            // NULL entry: pocl 3.1 does not skip NULL entries of CL_PROGRAM_BINARIES, it
            // crashes on them. The scratch copies are discarded.
            let sizes = driver_sizes(true)?;
            let mut scratch: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    if forwarded(i) {
                        Vec::new()
                    } else {
                        vec![0u8; sizes[i].max(1)]
                    }
                })
                .collect();
            let mut mine: Vec<*mut u8> = (0..n)
                .map(|i| {
                    if forwarded(i) {
                        app_binaries[i]
                    } else {
                        scratch[i].as_mut_ptr()
                    }
                })
                .collect();
            // SAFETY: `program` is live; each entry is the application's buffer for its
            // device (which holds that device's size: this function's contract) or a scratch
            // buffer of the driver's own size; `mine` holds the `bytes` asked for.
            let ret = unsafe {
                real(
                    program,
                    CL_PROGRAM_BINARIES,
                    bytes,
                    mine.as_mut_ptr() as *mut c_void,
                    std::ptr::null_mut(),
                )
            };
            if ret != CL_SUCCESS {
                return Err(ret);
            }
        }
        let binaries: Vec<(usize, Vec<u8>)> = plan
            .answering
            .substitutes
            .iter()
            .enumerate()
            .filter(|&(i, _)| !app_binaries[i].is_null())
            .filter_map(|(i, b)| b.clone().map(|b| (i, b)))
            .collect();
        crate::guard::catch(|| request_native(self.rt, plan, &binaries));
        Ok(Answer {
            sizes: None,
            binaries,
            size_ret: bytes,
            recorded,
        })
    }

    /// Records the query, which ended with `ret`: `answer` is clshim's, or None when the
    /// implementation answered alone, and `driver_sizes` then what it wrote for
    /// `CL_PROGRAM_BINARY_SIZES`.
    pub fn finish(self, ret: cl_int, answer: Option<Answer>, driver_sizes: Option<Vec<usize>>) {
        let seconds = self.start.elapsed().as_secs_f64();
        let cpu_seconds = self.start.cpu_seconds();
        let sizes = match answer {
            Some(a) => Some(a.recorded),
            None => driver_sizes.map(|v| v.into_iter().map(Some).collect()),
        };
        crate::guard::catch(|| {
            record_query(
                self.rt,
                self.plan.as_ref(),
                self.param,
                self.start,
                (seconds, cpu_seconds),
                ret,
                sizes,
            )
        });
    }
}

/// Asks the native store for the driver's binary of each clshim binary handed out that
/// carries a recipe with its options (a source-only binary builds with the application's
/// options, which no entry could be keyed on): one small request per program and device,
/// made by `clshim warm` or the node's warm service (a process of its own), never here.
fn request_native(rt: &'static Runtime, plan: &Plan, binaries: &[(usize, Vec<u8>)]) {
    if rt.config.native_store.is_none() {
        return;
    }
    let Some(recipe) = plan
        .answering
        .recipe
        .as_ref()
        .filter(|r| r.options.is_some())
    else {
        return;
    };
    let encoded = recipe.encode();
    let wanted: Vec<_> = binaries
        .iter()
        .filter_map(|(i, _)| {
            let facts = plan.facts[*i].as_ref()?;
            // SAFETY: a device of the live program, as its implementation listed it.
            unsafe { crate::store::wanted(facts, plan.devices[*i], recipe, &encoded) }
                .map_err(|why| log::debug!("native store: no request: {why}"))
                .ok()
        })
        .collect();
    crate::store::request(&rt.config, &wanted, &encoded);
}

fn record_query(
    rt: &'static Runtime,
    plan: Option<&Plan>,
    param: cl_program_info,
    start: Start,
    (seconds, cpu_seconds): (f64, Option<f64>),
    ret: cl_int,
    sizes: Option<Vec<Option<usize>>>,
) {
    let actions: Vec<Action> = plan.map(|p| p.actions().to_vec()).unwrap_or_default();
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
        cpu_seconds,
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
