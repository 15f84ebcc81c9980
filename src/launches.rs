//! First launches: the first time a kernel runs on a device with a given work-group
//! configuration, where pocl compiles the size-specialised kernel that actually runs (after
//! `clEnqueueNDRangeKernel` has returned, so a build record never shows it). This module
//! owns the whole of it but the tables (`launch_tables`): the launch keys, whose seen-set
//! keeps every later launch to three table probes and a hash (no lock, no allocation, no
//! call to the implementation); the kernel identities that tell a kernel re-created at a
//! reused address from one already launched; the queues' devices, kept until the
//! application releases the queue; and the event callback that times a first launch from
//! its enqueue call to the command's completion, using only what was captured at enqueue
//! time.
//!
//! A launch is keyed by (kernel identity, device, work_dim, global size, local size or
//! none). A kernel's identity is a hash of its program's clshim id and its name, set when
//! clshim sees the kernel made (`clCreateKernel`) and otherwise resolved at its first launch:
//! a kernel object made again from the same program (pyopencl makes a new one at every
//! `prg.name` access) is the same kernel, which pocl does not compile again, while a kernel
//! made at a reused address from another program or under another name is a new one.
//! Creation, not release, is where the identity is refreshed: a creation is certain,
//! whereas telling the last release needs the reference count, which OpenCL calls a hint,
//! and a release clshim missed would leave the old identity in place.

use crate::app_args::{AppArray, AppCStr, OutParam};
use crate::cl::*;
use crate::cpu_time::OthersCpu;
use crate::dispatch::Route;
use crate::guard::{self, catch};
use crate::hash::Fnv1a;
use crate::launch_tables::{
    claim, kernel_identity, kernel_identity_at_home, queue_device, queue_device_at_home, seen,
    seen_at_home, set_kernel_identity, set_queue_device, K0,
};
use crate::program_cache;
use crate::record::Start;
use crate::runtime::{self, Runtime};
use crate::schema::{self};
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

/// Which entry point launched the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    NdRange,
    Task,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Call::NdRange => "clEnqueueNDRangeKernel",
            Call::Task => "clEnqueueTask",
        }
    }
}

/// The global and local size of `clEnqueueTask`.
pub static TASK_SIZE: [usize; 1] = [1];

/// A launch's work-group configuration, copied from the application's arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    work_dim: u32,
    has_local: bool,
    /// `work_dim` sizes, then zeros.
    global: [usize; 3],
    /// `work_dim` sizes when `has_local`, then zeros.
    local: [usize; 3],
}

/// The first `n` (1 to 3) sizes of `array`, then zeros.
///
/// # Safety
/// `array` is non-NULL and holds `n` sizes, in the intercepted call.
#[inline(always)]
unsafe fn sizes3(array: *const usize, n: usize) -> [usize; 3] {
    // SAFETY: the caller's contract; `at` reads unaligned.
    let a = unsafe { AppArray::new(array, n) };
    // Element by element, each read only when the array holds it: a loop of `n` reads
    // becomes a call to memcpy, a third of this path's cost.
    // SAFETY: n >= 1 for the first, and each further read is within `n`.
    unsafe {
        [
            a.at(0),
            if n > 1 { a.at(1) } else { 0 },
            if n > 2 { a.at(2) } else { 0 },
        ]
    }
}

impl Dims {
    /// The configuration of a `clEnqueueNDRangeKernel` call, or None when the arguments are
    /// ones the implementation will refuse (no global size, 0 or more than 3 dimensions):
    /// such a call is forwarded and not recorded. The sizes are read through the
    /// unaligned-safe door: the application's arrays need not be aligned for `usize`.
    ///
    /// # Safety
    /// `global` and `local` must be NULL or hold `work_dim` sizes, as OpenCL requires.
    #[inline(always)]
    pub unsafe fn nd_range(
        work_dim: cl_uint,
        global: *const usize,
        local: *const usize,
    ) -> Option<Dims> {
        if !(1..=3).contains(&work_dim) || global.is_null() {
            return None;
        }
        let n = work_dim as usize;
        let has_local = !local.is_null();
        Some(Dims {
            work_dim,
            has_local,
            // SAFETY: non-NULL, and holds `work_dim` (1 to 3) sizes (this function's
            // contract).
            global: unsafe { sizes3(global, n) },
            local: if has_local {
                // SAFETY: as for `global`.
                unsafe { sizes3(local, n) }
            } else {
                [0; 3]
            },
        })
    }

    /// `clEnqueueTask`: one work-item in one work-group of one dimension, as OpenCL defines it.
    #[cfg(test)]
    pub fn task() -> Dims {
        // SAFETY: TASK_SIZE holds one size.
        unsafe { Dims::nd_range(1, TASK_SIZE.as_ptr(), TASK_SIZE.as_ptr()) }.expect("one dimension")
    }

    /// The seen-set key of this configuration of the kernel `identity` on `device`.
    fn key(&self, identity: u64, device: usize) -> u64 {
        launch_key(
            identity,
            device,
            self.work_dim,
            self.has_local,
            |i| self.global[i],
            |i| self.local[i],
        )
    }

    /// The global and (if given) local sizes, `work_dim` of each.
    fn sizes(&self) -> (Vec<usize>, Option<Vec<usize>>) {
        let n = self.work_dim as usize;
        (
            self.global[..n].to_vec(),
            self.has_local.then(|| self.local[..n].to_vec()),
        )
    }
}

/// The seen-set key of a launch of the kernel `identity` on `device` with `work_dim`
/// (1 to 3) global sizes `global(i)` and, when `has_local`, local sizes `local(i)`;
/// never 0 (the empty slot). Each word is mixed in with an xor and a 64-bit multiply by
/// an odd constant (a bijection of the running value, so two launches that differ in one
/// word never share a key, and the key's top bits, which pick its seen-set slot, depend
/// on every word); a one-dimensional launch costs four multiplies with no 128-bit
/// product, so the launch path keeps the whole key in one register and the application's
/// arguments in theirs. The number of dimensions goes in with the identity, and each local
/// size is tagged (`LOCAL_TAG`), so that launches with and without local sizes never
/// make the same sequence of words; a NULL local size adds no word. The sizes are taken as the hash needs them, so the launch
/// path reads them straight from the application's arrays into registers.
#[inline(always)]
fn launch_key(
    identity: u64,
    device: usize,
    work_dim: u32,
    has_local: bool,
    global: impl Fn(usize) -> usize,
    local: impl Fn(usize) -> usize,
) -> u64 {
    let started = key_start(identity, work_dim);
    key_finish(started, device, work_dim, has_local, global, local)
}

/// [`launch_key`]'s first step, of the kernel's identity and the number of dimensions: the
/// launch path takes it as soon as it has the identity, which then needs no register of
/// its own.
#[inline(always)]
fn key_start(identity: u64, work_dim: u32) -> u64 {
    (identity ^ u64::from(work_dim)).wrapping_mul(K0)
}

/// Marks a word of the key as a local size (an immediate operand of one `xor`): with the
/// number of dimensions in the key, a launch with local sizes and one without never
/// make the same sequence of words.
const LOCAL_TAG: u64 = 0x4C0C_A15E;

/// [`launch_key`]'s other steps, from `started` ([`key_start`]'s) on.
#[inline(always)]
fn key_finish(
    started: u64,
    device: usize,
    work_dim: u32,
    has_local: bool,
    global: impl Fn(usize) -> usize,
    local: impl Fn(usize) -> usize,
) -> u64 {
    let mix = |h: u64, word: u64| (h ^ word).wrapping_mul(K0);
    let mut h = mix(started, device as u64);
    for i in 0..3 {
        if i < work_dim as usize {
            h = mix(h, global(i) as u64);
            if has_local {
                h = mix(h, local(i) as u64 ^ LOCAL_TAG);
            }
        }
    }
    // Never 0, the empty slot's.
    h | 1
}

/// Salt that turns a launch key into the key of "a refused first launch was recorded".
const REFUSED_SALT: u64 = 0xA5A5_5EED_0FF1_A7E5;

/// Before the application's `clReleaseCommandQueue` of `queue` is forwarded: its device
/// is asked again at its next launch (if the queue lives on), and a queue made later at
/// the same address is never taken for this one.
pub fn queue_releasing(queue: cl_command_queue) {
    set_queue_device(queue as usize, 0);
}

/// A kernel's identity: its program's clshim id and its name (never 0).
fn identity_of(program_id: Option<u64>, name: Option<&str>, kernel: usize) -> u64 {
    let mut h = Fnv1a::default();
    match (program_id, name) {
        (Some(id), Some(name)) => {
            h.update(&id.to_le_bytes()).update(name.as_bytes());
        }
        // Without a name or program there is nothing but the object itself to go by.
        _ => {
            h.update(b"kernel@").update(&(kernel as u64).to_le_bytes());
        }
    }
    match h.finish() {
        0 => 1,
        x => x,
    }
}

// ---------------------------------------------------------------------------------------
// The launch path.

/// The device of `queue`, asked of the implementation.
///
/// # Safety
/// `queue` is the application's queue of the call being intercepted.
unsafe fn ask_queue_device(route: Route, queue: cl_command_queue) -> Option<usize> {
    // SAFETY: `queue` is the application's queue of the call being intercepted, asked of
    // the implementation through `route` as the application's own call will.
    unsafe {
        let f: FnGetCommandQueueInfo = route.get_command_queue_info(queue)?;
        let mut dev: cl_device_id = std::ptr::null_mut();
        let ok = f(
            queue,
            CL_QUEUE_DEVICE,
            std::mem::size_of::<cl_device_id>(),
            &mut dev as *mut cl_device_id as *mut c_void,
            std::ptr::null_mut(),
        ) == CL_SUCCESS;
        (ok && !dev.is_null()).then_some(dev as usize)
    }
}

/// Whether a launch of `kernel` on `queue` with `work_dim` of the application's `global`
/// and `local` sizes was seen before, so that the caller forwards it as it is: its sizes
/// read in place (unaligned), two table lookups (the kernel's identity, the queue's
/// device) and a probe of the seen-set, each in its home slot, with no lock, no
/// allocation and no call at all. False sends the call to [`launch`], which tells first launches from
/// the rest (and forwards arguments the implementation will refuse).
///
/// # Safety
/// The application's arguments; `global` and `local` must be NULL or hold `work_dim`
/// sizes.
#[inline(always)]
pub unsafe fn already_seen(
    queue: cl_command_queue,
    kernel: cl_kernel,
    work_dim: cl_uint,
    global: *const usize,
    local: *const usize,
) -> bool {
    // A NULL kernel or queue, and a number of dimensions other than 1 to 3, go into the
    // key as they are (at most 3 sizes are read, as many as `work_dim` says): the slow
    // path never claims such a key, so it is not found.
    if global.is_null() {
        return false;
    }
    // Home slots only, one load each and no comparison: an identity or device that is
    // not there reads as noise, and one that is there but not known as 0; no key made of
    // either is ever claimed (the slow path resolves both first), so such a key is not
    // found, and the call goes to the slow path without a test of its own. This path
    // calls nothing and keeps to the registers the call may clobber.
    let identity = kernel_identity_at_home(kernel as usize);
    let started = key_start(identity, work_dim);
    let device = queue_device_at_home(queue as usize);
    let device = device as usize;
    let n = work_dim as usize;
    // SAFETY: the application's arrays of `work_dim` sizes (this function's contract),
    // `local` read only when non-NULL.
    let (global, local) = unsafe { (AppArray::new(global, n), AppArray::new(local, n)) };
    let key = key_finish(
        started,
        device,
        work_dim,
        !local.is_null(),
        // SAFETY: `key_finish` asks for sizes below `work_dim` only, and for local sizes
        // only when `local` is non-NULL.
        |i| unsafe { global.at(i) },
        // SAFETY: as above.
        |i| unsafe { local.at(i) },
    );
    seen_at_home(key)
}

/// One kernel launch that [`already_seen`] could not tell seen, of `work_dim` dimensions
/// with the application's `global` and `local` sizes: `forward` makes the application's
/// call with the event pointer it is given. The queue's device is asked of the
/// implementation when not known yet (and kept), the kernel's identity resolved when not
/// known, and a first launch recorded. Arguments the implementation will refuse (no
/// kernel, no global size, 0 or more than 3 dimensions) are forwarded and not recorded.
///
/// # Safety
/// The application's arguments; `global` and `local` must be NULL or hold `work_dim`
/// sizes; `forward` must make the application's call.
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
pub unsafe fn launch(
    route: Route,
    call: Call,
    queue: cl_command_queue,
    kernel: cl_kernel,
    work_dim: cl_uint,
    global: *const usize,
    local: *const usize,
    event: *mut cl_event,
    forward: impl FnOnce(*mut cl_event) -> cl_int,
) -> cl_int {
    if kernel.is_null() {
        return forward(event);
    }
    // A copy of the library that does not record asks the driver nothing either.
    if !crate::copies::this_copy_records() {
        return forward(event);
    }
    // SAFETY: `global` and `local` NULL or of `work_dim` sizes (this function's contract).
    let Some(dims) = (unsafe { Dims::nd_range(work_dim, global, local) }) else {
        return forward(event);
    };
    let identity = kernel_identity(kernel as usize);
    let device = match queue_device(queue as usize) as usize {
        0 => {
            // SAFETY: the application's queue, whose dispatch `route` knows how to find.
            let Some(asked) = (unsafe { ask_queue_device(route, queue) }) else {
                return forward(event);
            };
            set_queue_device(queue as usize, asked as u64);
            asked
        }
        known => known,
    };
    if identity != 0 && seen(dims.key(identity, device)) {
        return forward(event);
    }
    // SAFETY: the application's arguments; `forward` makes its call (this function's
    // contract).
    unsafe { first_launch(route, call, kernel, device, identity, dims, event, forward) }
}

/// What the slow path learns about a kernel before forwarding.
struct Kernel {
    key: u64,
    name: Option<String>,
    program: Option<u64>,
}

/// The slow path of [`launch`]: a configuration not seen yet.
///
/// # Safety
/// The application's handles and event pointer of the enqueue being intercepted;
/// `forward` makes the application's call.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn first_launch(
    route: Route,
    call: Call,
    kernel: cl_kernel,
    device: usize,
    identity: u64,
    dims: Dims,
    event: *mut cl_event,
    forward: impl FnOnce(*mut cl_event) -> cl_int,
) -> cl_int {
    let Some(_inside) = guard::enter() else {
        return forward(event);
    };
    let Some(rt) = runtime::get(route) else {
        return forward(event);
    };
    let prepared = catch(|| {
        // SAFETY: the application's kernel of this enqueue.
        let (name, program) = unsafe { crate::query::kernel_facts(route, kernel) };
        let program = program.map(|p| rt.programs.lookup(p).id);
        let identity = if identity != 0 {
            identity
        } else {
            let id = identity_of(program, name.as_deref(), kernel as usize);
            set_kernel_identity(kernel as usize, id);
            id
        };
        let key = dims.key(identity, device);
        (!seen(key)).then_some(Kernel { key, name, program })
    });
    let Some(Some(k)) = prepared else {
        return forward(event);
    };
    // The application's own event if it asked for one, else one of clshim's, released below.
    let mut own: cl_event = std::ptr::null_mut();
    let event_ptr = if event.is_null() {
        &mut own as *mut cl_event
    } else {
        event
    };
    let start = Start::now();
    // A kernel of a program whose build took its turn: its first launch takes the store's
    // kept kernel, waits for a peer's compile of it, or compiles, keeps and publishes its
    // own (program_cache::share).
    let turn = if rt.config.program_cache {
        catch(|| {
            let (global, local) = dims.sizes();
            program_cache::share::before_launch(
                k.program,
                k.name.as_deref(),
                &global,
                local.as_deref(),
            )
        })
        .flatten()
    } else {
        None
    };
    let others = OthersCpu::now();
    let ret = forward(event_ptr);
    let ev = if ret == CL_SUCCESS {
        // SAFETY: the application's event out-parameter (or clshim's local), non-NULL and
        // writable as OpenCL requires, which the implementation wrote on success.
        unsafe { OutParam::new(event_ptr).written() }.unwrap_or(std::ptr::null_mut())
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: the application's handles of the call that just returned, and its event.
    catch(|| unsafe {
        after(
            rt,
            route,
            call,
            k,
            device,
            dims,
            (start, others),
            ret,
            ev,
            turn,
        )
    });
    if !own.is_null() {
        // The callback holds no reference: OpenCL keeps an event until its command completes.
        // SAFETY: the live event the implementation made for clshim.
        if let Some(release) = unsafe { route.release_event(own) } {
            // SAFETY: its own clReleaseEvent, dropping clshim's only reference.
            unsafe { release(own) };
        }
    }
    ret
}

/// A first launch waiting for its command to complete: everything the record needs,
/// captured at enqueue time, so the callback touches nothing the application may free.
struct AwaitingCompletion {
    rt: &'static Runtime,
    start: Start,
    /// pocl compiles on its worker threads: their CPU, not the launcher's.
    others: OthersCpu,
    enqueue_result: cl_int,
    /// The record, but for its result.
    record: schema::FirstLaunch,
    /// A launch whose compile ranks of the node share: what it owes at completion.
    turn: Option<program_cache::share::LaunchTurn>,
}

impl AwaitingCompletion {
    fn finish(self, seconds: f64, status: cl_int) {
        // A command that ended abnormally reports a negative status to CL_COMPLETE callbacks.
        let result = if status < 0 {
            status
        } else {
            self.enqueue_result
        };
        let mut record = self.record;
        if let Some((clock, cpu)) = self.others.interval() {
            record.cpu_clock = Some(clock);
            record.cpu_seconds = Some(cpu);
        }
        record.result = result;
        record.result_name = status_name(result);
        if let Some(t) = self.turn {
            let from_host = t.from_host.clone();
            let (shared, kept) = t.completed(result == CL_SUCCESS);
            record.from_host = from_host.filter(|_| shared.name() == "from_store");
            record.shared = Some(shared.name());
            record.peer_wait_seconds = shared.waited();
            record.kept_in_store = kept.as_ref().map(Result::is_ok);
            record.not_kept = kept.and_then(Result::err);
        }
        self.rt
            .recorder
            .emit(self.start, seconds, &schema::Record::FirstLaunch(record));
    }
}

/// After the forwarded call: claims the launch and arranges its record.
///
/// # Safety
/// `ev` is NULL or the event the forwarded enqueue just returned; the other handles are
/// the application's, of the call that just returned.
#[allow(clippy::too_many_arguments)]
unsafe fn after(
    rt: &'static Runtime,
    route: Route,
    call: Call,
    k: Kernel,
    device: usize,
    dims: Dims,
    (start, others): (Start, OthersCpu),
    ret: cl_int,
    ev: cl_event,
    turn: Option<program_cache::share::LaunchTurn>,
) {
    // A refused launch compiles nothing: it is recorded once per configuration, with the
    // call's own time, and the configuration stays unclaimed for a launch that succeeds.
    let key = if ret == CL_SUCCESS {
        k.key
    } else {
        k.key ^ REFUSED_SALT
    };
    if !claim(key) {
        return; // another thread records this one
    }
    // SAFETY: the device of the application's queue.
    let facts = unsafe { rt.devices.get(route, device as cl_device_id) };
    let (global_size, local_size) = dims.sizes();
    let record = schema::FirstLaunch {
        // The thread that launched, not the one the completion callback runs on.
        tid: crate::record::tid(),
        cpu_seconds: None,
        cpu_clock: None,
        call: call.name(),
        kernel: k.name,
        program: k.program,
        device: facts.as_ref().map(|f| f.describe(rt.config.devices)),
        work_dim: dims.work_dim,
        global_size,
        local_size,
        result: ret,
        result_name: status_name(ret),
        shared: turn.as_ref().map(|t| t.shared.name()),
        peer_wait_seconds: turn.as_ref().and_then(|t| t.shared.waited()),
        from_host: None,
        kept_in_store: None,
        not_kept: None,
    };
    let pending = AwaitingCompletion {
        rt,
        start,
        others,
        enqueue_result: ret,
        record,
        turn,
    };
    if ret != CL_SUCCESS || ev.is_null() {
        let seconds = start.elapsed().as_secs_f64();
        pending.finish(seconds, CL_COMPLETE);
        return;
    }
    // SAFETY: the live event the enqueue just returned.
    let Some(set_callback) = (unsafe { route.set_event_callback(ev) }) else {
        callback_refused(CL_INVALID_OPERATION);
        return;
    };
    let raw = Box::into_raw(Box::new(pending));
    // SAFETY: the event's own entry, with clshim's callback and the box it takes back.
    let r = unsafe { set_callback(ev, CL_COMPLETE, on_complete, raw as *mut c_void) };
    if r != CL_SUCCESS {
        // SAFETY: the box made above, which the refused registration never handed on.
        drop(unsafe { Box::from_raw(raw) });
        callback_refused(r);
    }
}

#[cold]
fn callback_refused(code: cl_int) {
    static ONCE: AtomicBool = AtomicBool::new(false);
    if !ONCE.swap(true, Ordering::Relaxed) {
        log::warn!(
            "clshim: clSetEventCallback failed ({}); first launches are not timed",
            status_name(code)
        );
    }
}

/// clshim's CL_COMPLETE callback. It runs on whatever thread the implementation chooses
/// (pocl: with the event locked, so it must not call OpenCL), possibly after the process
/// began to exit or the kernel and program were released: it reads only its own `AwaitingCompletion`
/// and the process-wide recorder, which lives until the process ends.
unsafe extern "C" fn on_complete(_event: cl_event, status: cl_int, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the `AwaitingCompletion` box clshim registered with this callback; the
    // implementation calls it once, so the box is taken back once.
    let pending = unsafe { Box::from_raw(data as *mut AwaitingCompletion) };
    let seconds = pending.start.elapsed().as_secs_f64();
    catch(move || pending.finish(seconds, status));
}

// ---------------------------------------------------------------------------------------
// Kernel creation: where an address gets its (new) identity.

/// After `clCreateKernel` made `kernel` from `program` under `name`.
///
/// # Safety
/// `name` must be NULL or a C string; `program` NULL or live.
pub unsafe fn kernel_created(
    route: Route,
    program: cl_program,
    name: *const c_char,
    kernel: cl_kernel,
) {
    if kernel.is_null() {
        return;
    }
    // Forget the address's old identity first, so that whatever fails below, the new
    // kernel is resolved afresh at its first launch rather than taken for the old one.
    set_kernel_identity(kernel as usize, 0);
    if program.is_null() || name.is_null() {
        return;
    }
    let Some(_inside) = guard::enter() else {
        return;
    };
    let Some(rt) = runtime::get(route) else {
        return;
    };
    catch(|| {
        let id = rt.programs.lookup(program).id;
        // SAFETY: a C string (this function's contract), read before the call returns.
        let name = unsafe { AppCStr::new(name) }.bytes().unwrap_or_default();
        let name = String::from_utf8_lossy(name);
        set_kernel_identity(
            kernel as usize,
            identity_of(Some(id), Some(&name), kernel as usize),
        );
    });
}

/// After `clCreateKernelsInProgram` made `kernels` (as the entry point read them): their
/// identities are resolved at their first launches.
pub fn kernels_created(kernels: &[cl_kernel]) {
    for &k in kernels {
        set_kernel_identity(k as usize, 0);
    }
}

/// After `clCloneKernel` made `clone` of `source`: the same program and name.
pub fn kernel_cloned(source: cl_kernel, clone: cl_kernel) {
    if !clone.is_null() {
        set_kernel_identity(clone as usize, kernel_identity(source as usize));
    }
}

/// How many kernels `clCreateKernelsInProgram` wrote: what it said, or the program's count.
///
/// # Safety
/// `program` must be live.
pub unsafe fn kernels_written(
    route: Route,
    program: cl_program,
    said: Option<cl_uint>,
    room: cl_uint,
) -> usize {
    if let Some(said) = said {
        return said.min(room) as usize;
    }
    // SAFETY: the live program (this function's contract).
    let Some(f) = (unsafe { route.get_program_info(program) }) else {
        return 0;
    };
    let mut n: usize = 0;
    // SAFETY: the live program, and a local of the size asked for.
    let ret = unsafe {
        f(
            program,
            CL_PROGRAM_NUM_KERNELS,
            std::mem::size_of::<usize>(),
            &mut n as *mut usize as *mut c_void,
            std::ptr::null_mut(),
        )
    };
    if ret == CL_SUCCESS {
        n.min(room as usize)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(identity: u64, device: usize, g: &[usize], l: Option<&[usize]>) -> u64 {
        dims(g, l).key(identity, device)
    }

    fn dims(g: &[usize], l: Option<&[usize]>) -> Dims {
        // SAFETY: `g` and `l` hold `g.len()` sizes each (the tests pass equal lengths).
        unsafe {
            Dims::nd_range(
                g.len() as u32,
                g.as_ptr(),
                l.map(|l| l.as_ptr()).unwrap_or(std::ptr::null()),
            )
            .unwrap()
        }
    }

    #[test]
    fn keys_tell_every_field_apart() {
        let base = key(7, 0x1000, &[64], Some(&[16]));
        let others = [
            key(8, 0x1000, &[64], Some(&[16])),
            key(7, 0x2000, &[64], Some(&[16])),
            key(7, 0x1000, &[128], Some(&[16])),
            key(7, 0x1000, &[64], Some(&[32])),
            key(7, 0x1000, &[64], None),
            key(7, 0x1000, &[64, 1], Some(&[16, 1])),
        ];
        for o in others {
            assert_ne!(o, base);
            assert_ne!(o, 0);
        }
        assert_eq!(base, key(7, 0x1000, &[64], Some(&[16])));
        assert_eq!(Dims::task(), dims(&[1], Some(&[1])));
        // SAFETY: a dimension count of 0 or 4 is refused before any size is read.
        unsafe {
            assert!(Dims::nd_range(0, [1usize].as_ptr(), std::ptr::null()).is_none());
            assert!(Dims::nd_range(4, [1usize; 4].as_ptr(), std::ptr::null()).is_none());
            assert!(Dims::nd_range(1, std::ptr::null(), std::ptr::null()).is_none());
        }
    }

    #[test]
    fn the_launch_path_finds_a_claimed_launch_and_nothing_made_of_a_0_or_a_bad_shape() {
        // The launch path tests neither the kernel, nor the dimension count, nor whether
        // the identity and device are known: each goes into the key, which the slow path
        // never claims for them.
        let (kernel, queue) = (0x5EE0_0040usize, 0x5EE1_0080usize);
        let (identity, device) = (0x1D_E471_7135u64, 0xDE71_CE40usize);
        set_kernel_identity(kernel, identity);
        set_queue_device(queue, device as u64);
        let (g, l) = ([64usize, 8, 2, 1], [16usize, 4, 1, 1]);
        let seen = |k: usize, q: usize, n: u32, local: bool| {
            let l = if local { l.as_ptr() } else { std::ptr::null() };
            // SAFETY: `g` and `l` hold 4 sizes, at least as many as any `n` here.
            unsafe { already_seen(q as cl_command_queue, k as cl_kernel, n, g.as_ptr(), l) }
        };
        assert!(!seen(kernel, queue, 1, true), "not claimed yet");
        assert!(claim(dims(&g[..1], Some(&l[..1])).key(identity, device)));
        assert!(claim(dims(&g[..3], None).key(identity, device)));
        assert!(seen(kernel, queue, 1, true));
        assert!(seen(kernel, queue, 3, false));
        assert!(!seen(kernel, queue, 1, false), "without local sizes");
        assert!(!seen(kernel, queue, 3, true), "with local sizes");
        assert!(!seen(kernel, queue, 2, true), "two dimensions");
        assert!(!seen(kernel, queue, 4, false), "four dimensions");
        assert!(!seen(kernel, queue, 0, true), "no dimension");
        assert!(!seen(0, queue, 1, true), "NULL kernel");
        assert!(!seen(kernel + 64, queue, 1, true), "another kernel");
        assert!(!seen(kernel, queue + 64, 1, true), "another queue");
        queue_releasing(queue as cl_command_queue);
        assert!(!seen(kernel, queue, 1, true), "device not known");
        set_queue_device(queue, device as u64);
        set_kernel_identity(kernel, 0);
        assert!(!seen(kernel, queue, 1, true), "identity not known");
    }

    #[test]
    fn a_released_queue_is_forgotten_so_its_address_is_asked_again() {
        let (queue, device) = (0xC0DE_0000usize, 0xDE71_CE00usize);
        set_queue_device(queue, device as u64);
        assert_eq!(queue_device(queue), device as u64);
        queue_releasing(queue as cl_command_queue);
        assert_eq!(queue_device(queue), 0, "asked again at the next launch");
        assert_eq!(queue_device_at_home(queue), 0, "there, not known");
    }

    #[test]
    fn kernel_identities_are_replaced_at_a_reused_address() {
        let addr = 0xDEAD_0000usize;
        assert_eq!(kernel_identity(addr), 0);
        set_kernel_identity(addr, 0);
        assert_eq!(kernel_identity(addr), 0, "0 never inserts");
        let a = identity_of(Some(1), Some("k"), addr);
        let b = identity_of(Some(2), Some("k"), addr);
        let c = identity_of(Some(1), Some("j"), addr);
        assert!(a != b && a != c && b != c);
        assert_eq!(
            a,
            identity_of(Some(1), Some("k"), addr + 64),
            "same program and name"
        );
        set_kernel_identity(addr, a);
        assert_eq!(kernel_identity(addr), a);
        set_kernel_identity(addr, b);
        assert_eq!(kernel_identity(addr), b);
        kernel_cloned(addr as cl_kernel, (addr + 8) as cl_kernel);
        assert_eq!(kernel_identity(addr + 8), b);
        set_kernel_identity(addr, 0);
        assert_eq!(kernel_identity(addr), 0);
    }
}
