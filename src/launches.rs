//! First launches: the first time a kernel runs on a device with a given work-group
//! configuration, where pocl compiles the size-specialised kernel that actually runs (after
//! `clEnqueueNDRangeKernel` has returned, so a build record never shows it). This module
//! owns the whole of it: a lock-free seen-set that keeps every later launch to a queue
//! query, two table probes and a hash (no lock, no allocation); the kernel identities that
//! tell a kernel re-created at a reused address from one already launched; and the event
//! callback that times a first launch from its enqueue call to the command's completion,
//! using only what was captured at enqueue time.
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

use crate::app_args::AppArray;
use crate::cl::*;
use crate::dispatch::{slot, Route};
use crate::guard::{self, catch};
use crate::hash::Fnv1a;
use crate::query::info_bytes;
use crate::record::Start;
use crate::runtime::{self, Runtime};
use crate::schema::{self};
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

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
    global: [usize; 3],
    local: Option<[usize; 3]>,
}

impl Dims {
    /// The configuration of a `clEnqueueNDRangeKernel` call, or None when the arguments are
    /// ones the implementation will refuse (no global size, 0 or more than 3 dimensions):
    /// such a call is forwarded and not recorded. The sizes are copied through the
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
        let mut g = [0usize; 3];
        // SAFETY: non-NULL, and holds `work_dim` sizes (this function's contract), of which
        // `n` are copied.
        unsafe { AppArray::new(global, n).copy_to(&mut g[..n]) };
        let l = (!local.is_null()).then(|| {
            let mut l = [0usize; 3];
            // SAFETY: non-NULL, and holds `work_dim` sizes (this function's contract).
            unsafe { AppArray::new(local, n).copy_to(&mut l[..n]) };
            l
        });
        Some(Dims {
            work_dim,
            global: g,
            local: l,
        })
    }

    /// `clEnqueueTask`: one work-item in one work-group of one dimension, as OpenCL defines it.
    pub fn task() -> Dims {
        // SAFETY: TASK_SIZE holds one size.
        unsafe { Dims::nd_range(1, TASK_SIZE.as_ptr(), TASK_SIZE.as_ptr()) }.expect("one dimension")
    }

    fn key(&self, identity: u64, device: usize) -> u64 {
        let n = self.work_dim as usize;
        launch_key(
            identity,
            device,
            &self.global[..n],
            self.local.as_ref().map(|l| &l[..n]),
        )
    }

    /// The global and (if given) local sizes, `work_dim` of each.
    fn sizes(&self) -> (Vec<usize>, Option<Vec<usize>>) {
        let n = self.work_dim as usize;
        (
            self.global[..n].to_vec(),
            self.local.map(|l| l[..n].to_vec()),
        )
    }
}

// ---------------------------------------------------------------------------------------
// Hashing: a folded 64x64->128 multiply, fast enough for the hot path and well mixed.

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xD6E8_FEB8_6659_FD93;

#[inline(always)]
fn fold(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

#[inline(always)]
fn mix(h: u64, v: u64) -> u64 {
    fold(h ^ v, K0)
}

/// The seen-set key of one launch; never 0 (the empty slot). `global` and `local` hold
/// `work_dim` sizes each.
#[inline(always)]
fn launch_key(identity: u64, device: usize, global: &[usize], local: Option<&[usize]>) -> u64 {
    let mut h = mix(K1, identity);
    h = mix(h, device as u64);
    h = mix(h, global.len() as u64 | ((local.is_some() as u64) << 8));
    for &g in global {
        h = mix(h, g as u64);
    }
    if let Some(l) = local {
        for &x in l {
            h = mix(h, x as u64);
        }
    }
    let h = fold(h, K1);
    if h == 0 {
        1
    } else {
        h
    }
}

/// Salt that turns a launch key into the key of "a refused first launch was recorded".
const REFUSED_SALT: u64 = 0xA5A5_5EED_0FF1_A7E5;

// ---------------------------------------------------------------------------------------
// The kernel table: kernel address -> identity (0: not known, resolve at the next launch).
// Open addressing over fixed arrays of atomics in static memory: no allocation ever. An
// address keeps its slot, and creating a kernel at a reused address overwrites the
// identity. A full neighbourhood evicts an entry: identities can always be resolved again
// from the kernel (its program and name), so eviction costs one slow launch, never a
// wrong answer.
//
// A slot's address and identity change together, as a unit: each slot has a sequence
// number, odd while a writer changes the slot (writers take it with a compare-exchange, so
// one writes at a time) and bumped when it is done. A reader reads the number, the pair,
// and the number again, and uses the pair only if the number was even and unchanged; it
// never waits (a slot being written reads as "not known"), so the launch path takes no
// lock. Separate stores without this let two racing evictions leave one kernel's address
// with another's identity, and that kernel's first launches skipped.

const KERNEL_SLOTS: usize = 1 << 14;
const PROBES: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_USIZE: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_U64: AtomicU64 = AtomicU64::new(0);

static KERNEL_KEYS: [AtomicUsize; KERNEL_SLOTS] = [EMPTY_USIZE; KERNEL_SLOTS];
static KERNEL_IDS: [AtomicU64; KERNEL_SLOTS] = [EMPTY_U64; KERNEL_SLOTS];
static KERNEL_SEQS: [AtomicU64; KERNEL_SLOTS] = [EMPTY_U64; KERNEL_SLOTS];

#[inline(always)]
fn home(x: u64, slots: usize) -> usize {
    (fold(x, K0) as usize) & (slots - 1)
}

/// Slot `i`'s (address, identity), read as one unit, or None while a writer changes it.
#[inline(always)]
fn read_kernel_slot(i: usize) -> Option<(usize, u64)> {
    let before = KERNEL_SEQS[i].load(Ordering::Acquire);
    if before & 1 == 1 {
        return None;
    }
    let key = KERNEL_KEYS[i].load(Ordering::Relaxed);
    let id = KERNEL_IDS[i].load(Ordering::Relaxed);
    // The pair's loads happen before the second read of the number (a seqlock's reader).
    std::sync::atomic::fence(Ordering::Acquire);
    (KERNEL_SEQS[i].load(Ordering::Relaxed) == before).then_some((key, id))
}

/// Writes slot `i` as one unit: `change` sees the slot's (address, identity) and returns
/// the pair to store, or None to leave it. Returns what `change` returned.
fn write_kernel_slot(
    i: usize,
    change: impl FnOnce(usize, u64) -> Option<(usize, u64)>,
) -> Option<(usize, u64)> {
    let seq = &KERNEL_SEQS[i];
    let mut spins = 0u32;
    let taken = loop {
        let s = seq.load(Ordering::Relaxed);
        if s & 1 == 0
            && seq
                .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            break s + 1;
        }
        // Another writer holds the slot for a few stores: wait for it (creations only,
        // never the launch path).
        spins += 1;
        if spins % 64 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    };
    // The pair's stores happen after the odd number is visible (a seqlock's writer).
    std::sync::atomic::fence(Ordering::Release);
    let old = (
        KERNEL_KEYS[i].load(Ordering::Relaxed),
        KERNEL_IDS[i].load(Ordering::Relaxed),
    );
    let new = change(old.0, old.1);
    if let Some((key, id)) = new {
        KERNEL_KEYS[i].store(key, Ordering::Relaxed);
        #[cfg(test)]
        tests::preempted_here();
        KERNEL_IDS[i].store(id, Ordering::Relaxed);
    }
    // Unchanged, the slot gets its old number back: a reader that began before sees a
    // pair that is still whole.
    let done = if new.is_some() { taken + 1 } else { taken - 1 };
    seq.store(done, Ordering::Release);
    new
}

/// The identity of the kernel at `kernel`, or 0 when not known.
#[inline(always)]
fn kernel_identity(kernel: usize) -> u64 {
    let mut i = home(kernel as u64, KERNEL_SLOTS);
    for _ in 0..PROBES {
        // A slot being written may be this kernel's: not known this time.
        let Some((k, id)) = read_kernel_slot(i) else {
            return 0;
        };
        if k == kernel {
            return id;
        }
        if k == 0 {
            return 0;
        }
        i = (i + 1) & (KERNEL_SLOTS - 1);
    }
    0
}

/// Sets the identity of the kernel at `kernel`. Identity 0 ("ask again") only overwrites
/// an existing entry.
fn set_kernel_identity(kernel: usize, identity: u64) {
    if kernel == 0 {
        return;
    }
    let start = home(kernel as u64, KERNEL_SLOTS);
    let mut i = start;
    for _ in 0..PROBES {
        // A slot that may be this address's or free is decided again with the slot held,
        // so a slot another writer filled meanwhile is seen.
        let candidate = read_kernel_slot(i).is_none_or(|(k, _)| k == kernel || k == 0);
        let mut free = false;
        let wrote = candidate
            && write_kernel_slot(i, |k, _| {
                free = k == 0;
                (k == kernel || (k == 0 && identity != 0)).then_some((kernel, identity))
            })
            .is_some();
        if wrote || free {
            // Written; or a free slot (past which the address is not) with nothing to forget.
            return;
        }
        i = (i + 1) & (KERNEL_SLOTS - 1);
    }
    if identity != 0 {
        // Evict the home slot's entry, replacing address and identity together.
        write_kernel_slot(start, |_, _| Some((kernel, identity)));
    }
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
// The seen-set: launch keys already recorded. Same scheme as the kernel table; a full
// neighbourhood counts as seen, so the hot path stays bounded and nothing more is recorded.

const SEEN_SLOTS: usize = 1 << 16;

static SEEN: [AtomicU64; SEEN_SLOTS] = [EMPTY_U64; SEEN_SLOTS];
static SATURATED: AtomicBool = AtomicBool::new(false);

#[inline(always)]
fn seen(key: u64) -> bool {
    let mut i = home(key, SEEN_SLOTS);
    for _ in 0..PROBES {
        let v = SEEN[i].load(Ordering::Acquire);
        if v == key {
            return true;
        }
        if v == 0 {
            return false;
        }
        i = (i + 1) & (SEEN_SLOTS - 1);
    }
    saturated();
    true
}

#[cold]
fn saturated() {
    if !SATURATED.swap(true, Ordering::Relaxed) {
        log::warn!("clshim: the first-launch table is full; later first launches are not recorded");
    }
}

/// Claims `key`: true for exactly one caller, however many threads race for it.
fn claim(key: u64) -> bool {
    let mut i = home(key, SEEN_SLOTS);
    for _ in 0..PROBES {
        match SEEN[i].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(v) if v == key => return false,
            Err(_) => {}
        }
        i = (i + 1) & (SEEN_SLOTS - 1);
    }
    saturated();
    false
}

// ---------------------------------------------------------------------------------------
// The launch path.

/// The device of `queue`, asked of the implementation (a few nanoseconds in pocl).
#[inline(always)]
unsafe fn queue_device(route: Route, queue: cl_command_queue) -> Option<usize> {
    // SAFETY: `queue` is the application's queue of the call being intercepted, asked of
    // the implementation through `route` as the application's own call will.
    unsafe {
        let f: FnGetCommandQueueInfo = route.entry(queue, slot::GET_COMMAND_QUEUE_INFO)?;
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

/// One kernel launch of `work_dim` dimensions with the application's `global` and `local`
/// sizes: `forward` makes the application's call with the event pointer it is given. A
/// launch already seen goes straight through (its sizes copied to the stack, unaligned, allocating nothing);
/// a first one is recorded. Arguments the implementation will refuse (no kernel, no global
/// size, 0 or more than 3 dimensions) are forwarded and not recorded.
///
/// # Safety
/// The application's arguments; `global` and `local` must be NULL or hold `work_dim`
/// sizes; `forward` must make the application's call.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
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
    if kernel.is_null() || global.is_null() || !(1..=3).contains(&work_dim) {
        return forward(event);
    }
    // SAFETY: the application's queue, whose dispatch `route` knows how to find.
    let Some(device) = (unsafe { queue_device(route, queue) }) else {
        return forward(event);
    };
    // SAFETY: `global` and `local` NULL or of `work_dim` sizes (this function's contract).
    let Some(dims) = (unsafe { Dims::nd_range(work_dim, global, local) }) else {
        return forward(event);
    };
    let identity = kernel_identity(kernel as usize);
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

/// The kernel's name and program, asked of the implementation.
///
/// # Safety
/// `kernel` is the application's kernel of the call being intercepted.
unsafe fn kernel_facts(route: Route, kernel: cl_kernel) -> (Option<String>, Option<cl_program>) {
    // SAFETY: the application's kernel (this function's contract).
    let Some(f) = (unsafe { route.entry::<FnGetKernelInfo>(kernel, slot::GET_KERNEL_INFO) }) else {
        return (None, None);
    };
    // SAFETY: the kernel's own clGetKernelInfo.
    let name = unsafe { info_bytes(f, kernel, CL_KERNEL_FUNCTION_NAME) }.map(|b| {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    });
    // SAFETY: as above.
    let program = unsafe { info_bytes(f, kernel, CL_KERNEL_PROGRAM) }.and_then(|b| {
        let w = std::mem::size_of::<usize>();
        let p = usize::from_ne_bytes(b.get(..w)?.try_into().ok()?);
        (p != 0).then_some(p as cl_program)
    });
    (name, program)
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
        let (name, program) = unsafe { kernel_facts(route, kernel) };
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
    let ret = forward(event_ptr);
    let ev = if ret == CL_SUCCESS {
        // SAFETY: the application's event out-parameter (or clshim's local), which the
        // implementation wrote on success.
        unsafe { event_ptr.read_unaligned() }
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: the application's handles of the call that just returned, and its event.
    catch(|| unsafe { after(rt, route, call, k, device, dims, start, ret, ev) });
    if !own.is_null() {
        // The callback holds no reference: OpenCL keeps an event until its command completes.
        // SAFETY: the live event the implementation made for clshim.
        if let Some(release) = unsafe { route.entry::<FnReleaseEvent>(own, slot::RELEASE_EVENT) } {
            // SAFETY: its own clReleaseEvent, dropping clshim's only reference.
            unsafe { release(own) };
        }
    }
    ret
}

/// A first launch waiting for its command to complete: everything the record needs,
/// captured at enqueue time, so the callback touches nothing the application may free.
struct Pending {
    rt: &'static Runtime,
    start: Start,
    enqueue_result: cl_int,
    /// The record, but for its result.
    record: schema::FirstLaunch,
}

impl Pending {
    fn finish(self, seconds: f64, status: cl_int) {
        // A command that ended abnormally reports a negative status to CL_COMPLETE callbacks.
        let result = if status < 0 {
            status
        } else {
            self.enqueue_result
        };
        let mut record = self.record;
        record.result = result;
        record.result_name = status_name(result);
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
    start: Start,
    ret: cl_int,
    ev: cl_event,
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
        call: call.name(),
        kernel: k.name,
        program: k.program,
        device: facts.as_ref().map(|f| f.describe(rt.config.devices)),
        work_dim: dims.work_dim,
        global_size,
        local_size,
        result: ret,
        result_name: status_name(ret),
    };
    let pending = Pending {
        rt,
        start,
        enqueue_result: ret,
        record,
    };
    if ret != CL_SUCCESS || ev.is_null() {
        let seconds = start.elapsed().as_secs_f64();
        pending.finish(seconds, CL_COMPLETE);
        return;
    }
    // SAFETY: the live event the enqueue just returned.
    let Some(set_callback) =
        (unsafe { route.entry::<FnSetEventCallback>(ev, slot::SET_EVENT_CALLBACK) })
    else {
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
/// began to exit or the kernel and program were released: it reads only its own `Pending`
/// and the process-wide recorder, which lives until the process ends.
unsafe extern "C" fn on_complete(_event: cl_event, status: cl_int, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the `Pending` box clshim registered with this callback; the
    // implementation calls it once, so the box is taken back once.
    let pending = unsafe { Box::from_raw(data as *mut Pending) };
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
        // SAFETY: non-NULL, so a C string (this function's contract).
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy();
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
    let Some(f) = (unsafe { route.entry::<FnGetProgramInfo>(program, slot::GET_PROGRAM_INFO) })
    else {
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

    thread_local! {
        /// Set by a test that wants a writer preempted between its two stores.
        static YIELD_MID_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Between a kernel slot's two stores: where a preempted writer leaves a torn pair
    /// unless readers and other writers respect the slot's sequence number.
    pub(super) fn preempted_here() {
        if YIELD_MID_WRITE.with(|y| y.get()) {
            std::thread::yield_now();
        }
    }

    fn key(identity: u64, device: usize, g: &[usize], l: Option<&[usize]>) -> u64 {
        let k = launch_key(identity, device, g, l);
        assert_eq!(k, dims(g, l).key(identity, device));
        k
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
    fn one_claim_wins_among_racing_threads() {
        for round in 0..50u64 {
            let key = Dims::task().key(0xABC0 + round, 0x77);
            let winners: usize = std::thread::scope(|s| {
                let hs: Vec<_> = (0..8)
                    .map(|_| s.spawn(move || claim(key) as usize))
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(winners, 1, "round {round}");
            assert!(seen(key));
        }
    }

    #[test]
    fn colliding_keys_probe_past_each_other() {
        // Keys with the same home slot: each is found, and unclaimed ones are not.
        let target = home(Dims::task().key(1, 1), SEEN_SLOTS);
        let mut same: Vec<u64> = (0u64..)
            .map(|i| Dims::task().key(1_000_000 + i, 3))
            .filter(|&k| home(k, SEEN_SLOTS) == target)
            .take(4)
            .collect();
        let last = same.pop().unwrap();
        for &k in &same {
            assert!(claim(k));
        }
        for &k in &same {
            assert!(seen(k));
        }
        assert!(!seen(last));
    }

    #[test]
    fn a_full_neighbourhood_evicts_and_every_answer_stays_right() {
        // PROBES + 1 addresses with one home slot: the last evicts the first, which then
        // reads as unknown (resolved again at its next launch), never as another's identity.
        let target = home(0xF00D_0000u64, KERNEL_SLOTS);
        let addrs: Vec<usize> = (0xF00D_0000usize..)
            .step_by(8)
            .filter(|&a| home(a as u64, KERNEL_SLOTS) == target)
            .take(PROBES + 1)
            .collect();
        for (n, &a) in addrs.iter().enumerate() {
            set_kernel_identity(a, 1000 + n as u64);
        }
        for (n, &a) in addrs.iter().enumerate() {
            let id = kernel_identity(a);
            assert!(id == 0 || id == 1000 + n as u64, "address {n}: {id}");
        }
        assert_eq!(kernel_identity(addrs[PROBES]), 1000 + PROBES as u64);
        assert_eq!(kernel_identity(addrs[0]), 0, "evicted");
        set_kernel_identity(addrs[0], 7);
        assert_eq!(kernel_identity(addrs[0]), 7, "resolved again");
    }

    #[test]
    fn racing_evictions_never_pair_an_address_with_another_kernels_identity() {
        // A neighbourhood full of other kernels, and writers whose kernels keep evicting its
        // home slot from one another while readers look them up: every answer is 0 (ask
        // again) or the address's own identity, during the race and after it. The home slot
        // is chosen away from the other tests'.
        let far = |h: usize, t: usize| h.abs_diff(t) > 4 * PROBES;
        let others = [
            home(0xF00D_0000, KERNEL_SLOTS),
            home(0xDEAD_0000, KERNEL_SLOTS),
        ];
        let target = (0x7A11_0000_0000u64..)
            .step_by(4096)
            .map(|a| home(a, KERNEL_SLOTS))
            .find(|&h| others.iter().all(|&t| far(h, t)) && far(h, 0) && far(h, KERNEL_SLOTS))
            .unwrap();
        const WRITERS: usize = 6;
        let addrs: Vec<usize> = (0x7A11_0000_0000usize..)
            .step_by(16)
            .filter(|&a| home(a as u64, KERNEL_SLOTS) == target)
            .take(PROBES + 2 * WRITERS)
            .collect();
        let own = |a: usize| (a as u64).rotate_left(17) | 1;
        let (fillers, racers) = addrs.split_at(PROBES);
        for &a in fillers {
            set_kernel_identity(a, own(a));
        }
        let wrong = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        const ROUNDS: usize = 5_000;
        std::thread::scope(|s| {
            let (wrong, done) = (&wrong, &done);
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    for &a in racers {
                        let id = kernel_identity(a);
                        if id != 0 && id != own(a) {
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
            // Each writer is preempted between its stores (on a loaded machine the race is
            // real but rare: 130 wrong answers in 63M lookups).
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let mine = &racers[2 * w..2 * w + 2];
                    s.spawn(move || {
                        YIELD_MID_WRITE.with(|y| y.set(true));
                        for r in 0..ROUNDS {
                            let a = mine[r % 2];
                            set_kernel_identity(a, own(a));
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, Ordering::Relaxed);
        });
        let after = addrs
            .iter()
            .filter(|&&a| ![0, own(a)].contains(&kernel_identity(a)))
            .count();
        assert_eq!(
            (wrong.load(Ordering::Relaxed), after),
            (0, 0),
            "wrong answers during and after the race"
        );
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
