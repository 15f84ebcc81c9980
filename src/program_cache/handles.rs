//! The program handles the program cache hands out. `clCreateProgramWithSource` must
//! return a program before the build's options are known, and a build served from the
//! native store makes another program (one from the driver's binary); so, for a source
//! the store holds a build of, the application gets a handle of clshim's instead of the
//! driver's program, and the handle stands for the driver's program of the moment: the
//! source program until a build is served, then the program made from the binary.
//!
//! A handle starts, as every ICD object does, with a pointer to a dispatch table: clshim's
//! own (the door's: `Door::program_handle_table`), whose program entry points are clshim's, so a call a loader makes on a handle
//! (`clRetainProgram` through a loader no door sees included) comes back to clshim. Every
//! entry point that takes a program takes a handle back ([`resolve`], one relaxed load
//! while no handle exists), and every answer that names a program gives the handle back
//! ([`app_handle`]: a kernel's program, build callbacks). The application's references
//! are counted on the handle; while the application holds any, clshim holds one reference
//! on the source program and one on the program the handle stands for (a program a
//! rebuild replaced is let go of at once: [`Handle::let_go`]), and
//! `CL_PROGRAM_REFERENCE_COUNT` answers as the driver would for the one program (the
//! application's references and those of its kernels). A handle whose program outlives the
//! application's last reference (a kernel still holds it) stays known until a new program
//! takes that program's address, so a kernel's program still answers the handle, and its
//! source as the source program answered it; taken back from the kernel, it builds from a
//! source program clshim makes again ([`Handle::source_program`]).
// On macOS the warm step and the program cache are not built: what only they use is idle.
#![cfg_attr(target_os = "macos", allow(dead_code, unused_imports))]

use crate::cl::*;
use crate::dispatch::Route;
use crate::lock::{ForkOrder, Lock};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

/// One handle. `repr(C)`, the dispatch table first, as loaders read it.
#[repr(C)]
pub struct Handle {
    dispatch: *const *const c_void,
    /// Unique in the process: tells this handle from a later one made at its address.
    id: u64,
    /// The driver's program behind the handle now.
    inner: AtomicPtr<c_void>,
    pub context: cl_context,
    /// The source text (what a build's key starts from).
    pub source: Vec<u8>,
    app_refs: AtomicU32,
    state: Lock<State>,
}

struct State {
    /// The source program: the one the application's `clCreateProgramWithSource` made, or
    /// one clshim made again from the source ([`Handle::source_program`]).
    source: cl_program,
    /// The source program's `CL_PROGRAM_SOURCE` answer, kept when clshim let go of it
    /// while a kernel kept the program the handle stands for.
    source_answer: Option<Vec<u8>>,
    /// The driver programs clshim holds one reference on, for the handle.
    held: Vec<cl_program>,
    /// A served build is running: another build on the handle gets CL_INVALID_OPERATION, as
    /// a driver answers a build during a build.
    building: bool,
    /// What the served program answers as its source build did.
    answers: SourceAnswers,
}

/// What a served program answers as the source build it stands for did, where the driver's
/// program from binaries would answer otherwise.
#[derive(Default)]
pub struct SourceAnswers {
    /// The build log each device's source build gave (the binary build's own is another).
    pub logs: Vec<(cl_device_id, Vec<u8>)>,
    /// Each kernel's `CL_KERNEL_ATTRIBUTES` (pocl's binaries do not carry them).
    pub attributes: Vec<(Vec<u8>, Vec<u8>)>,
}

// SAFETY: the raw handles are opaque values passed back to the driver; the mutable state
// is atomic or behind `state`'s lock.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

impl Handle {
    pub fn inner(&self) -> cl_program {
        self.inner.load(Ordering::Acquire)
    }

    pub fn as_program(&self) -> cl_program {
        self as *const Handle as cl_program
    }

    pub fn id(&self) -> u64 {
        self.id
    }
}

#[derive(Default)]
struct Maps {
    /// Every handle, by its address.
    handles: HashMap<usize, &'static Handle>,
    /// The handle each driver program stands behind.
    by_inner: HashMap<usize, usize>,
}

/// Whether any handle was ever made: until then, taking a program back costs one load.
static ANY: AtomicBool = AtomicBool::new(false);

fn maps() -> &'static Lock<Maps> {
    static MAPS: OnceLock<&'static Lock<Maps>> = OnceLock::new();
    MAPS.get_or_init(|| Lock::new_fork_held(ForkOrder::Handles, Maps::default()))
}

/// Whether any handle was ever made.
#[inline]
pub fn any() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// The handle `program` is, if it is one.
pub fn find(program: cl_program) -> Option<&'static Handle> {
    if !ANY.load(Ordering::Relaxed) || program.is_null() {
        return None;
    }
    maps().lock().handles.get(&(program as usize)).copied()
}

/// The handle made at `address` with `id`, if it is still there (not one made there since).
pub fn find_live(address: usize, id: u64) -> Option<&'static Handle> {
    find(address as cl_program).filter(|h| h.id == id)
}

/// The driver's program for `program`: itself, or the one a handle stands for now.
#[inline]
pub fn resolve(program: cl_program) -> cl_program {
    match find(program) {
        Some(h) => h.inner(),
        None => program,
    }
}

/// What the application knows `program` (a driver's program) as: the handle that stands
/// for it, or itself.
pub fn app_handle(program: cl_program) -> cl_program {
    if !ANY.load(Ordering::Relaxed) || program.is_null() {
        return program;
    }
    match maps().lock().by_inner.get(&(program as usize)) {
        Some(&h) => h as cl_program,
        None => program,
    }
}

/// A handle for the source program `source_program` of `context`, made from `source`,
/// whose dispatch table is `table` (the door's: `Door::program_handle_table`); the
/// application holds one reference to it, clshim one to the source program.
pub fn wrap(
    source_program: cl_program,
    context: cl_context,
    source: Vec<u8>,
    table: *const *const c_void,
) -> cl_program {
    static IDS: AtomicU64 = AtomicU64::new(0);
    let h: &'static Handle = Box::leak(Box::new(Handle {
        dispatch: table,
        id: IDS.fetch_add(1, Ordering::Relaxed),
        inner: AtomicPtr::new(source_program),
        context,
        source,
        app_refs: AtomicU32::new(1),
        state: Lock::new(State {
            source: source_program,
            source_answer: None,
            held: vec![source_program],
            building: false,
            answers: SourceAnswers::default(),
        }),
    }));
    let mut m = maps().lock();
    m.handles.insert(h as *const Handle as usize, h);
    m.by_inner
        .insert(source_program as usize, h as *const Handle as usize);
    ANY.store(true, Ordering::Release);
    h.as_program()
}

impl Handle {
    /// Starts a served build: false when one runs already.
    pub fn begin_build(&self) -> bool {
        let mut st = self.state.lock();
        !std::mem::replace(&mut st.building, true)
    }

    pub fn end_build(&self) {
        self.state.lock().building = false;
    }

    /// Makes the handle stand for `program` (whose one reference clshim now holds), a
    /// served build's with what its source builds answered (`answers`), or the source
    /// program (no answers: its own). Returns the program it stood for until now.
    pub fn stand_for(&self, program: cl_program, answers: SourceAnswers) -> cl_program {
        let mut st = self.state.lock();
        if !st.held.contains(&program) {
            st.held.push(program);
        }
        st.answers = answers;
        let before = self.inner.swap(program, Ordering::AcqRel);
        drop(st);
        maps()
            .lock()
            .by_inner
            .insert(program as usize, self as *const Handle as usize);
        before
    }

    /// Whether clshim holds a reference to `program` for the handle.
    pub fn holds(&self, program: cl_program) -> bool {
        self.state.lock().held.contains(&program)
    }

    /// Lets go of `program`, a served program the handle no longer stands for: clshim's
    /// reference is released now, so that rebuilds do not pile up programs until the
    /// application's last release. Kernels made from it hold references of their own, so
    /// the driver keeps it until the last of them goes, and it still names the handle
    /// (`app_handle`) until its address is taken by another program. Nothing for the
    /// source program (kept for the builds the store does not serve, and its source), the
    /// program the handle stands for, or one clshim no longer holds.
    ///
    /// # Safety
    /// The programs the handle holds are live.
    pub unsafe fn let_go(&self, route: Route, program: cl_program) {
        let mut st = self.state.lock();
        if program == st.source || program == self.inner() {
            return;
        }
        let Some(i) = st.held.iter().position(|&p| p == program) else {
            return;
        };
        st.held.swap_remove(i);
        drop(st);
        // SAFETY: a program clshim held a reference to until now: live.
        let last = unsafe { crate::query::reference_count(route, program) } == Some(1);
        if last {
            if let Some(rt) = crate::runtime::existing() {
                rt.programs.released(program);
            }
            maps().lock().by_inner.remove(&(program as usize));
        }
        // SAFETY: releasing the reference clshim held, through the program's own entry.
        if let Some(f) = unsafe { route.release_program(program) } {
            // SAFETY: as above.
            unsafe { f(program) };
        }
    }

    /// `clRetainProgram` on the handle.
    ///
    /// # Safety
    /// The handle's program is live (the application holds a reference, or a kernel does).
    pub unsafe fn retain(&self, route: Route) -> cl_int {
        let was = self.app_refs.fetch_add(1, Ordering::AcqRel);
        if was == 0 {
            // Taken back from a kernel after the application's last release: clshim holds
            // the program again for the handle.
            let p = self.inner();
            // SAFETY: a kernel holds the program, so it is live (this function's contract).
            if let Some(f) = unsafe { route.retain_program(p) } {
                // SAFETY: the live program's own entry.
                unsafe { f(p) };
            }
            self.state.lock().held.push(p);
        }
        CL_SUCCESS
    }

    /// `clReleaseProgram` on the handle: at the application's last reference, clshim lets
    /// go of every program it held for the handle; the handle is forgotten with its
    /// program, or, while a kernel still holds that program, when the program's address
    /// is taken by a new one ([`forget_reused`]).
    ///
    /// # Safety
    /// The programs the handle holds are live.
    pub unsafe fn release(&'static self, route: Route) -> cl_int {
        let dropped = self
            .app_refs
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        match dropped {
            Err(_) => return CL_INVALID_PROGRAM,
            Ok(n) if n > 1 => return CL_SUCCESS,
            Ok(_) => {}
        }
        let (held, source) = {
            let mut st = self.state.lock();
            (std::mem::take(&mut st.held), st.source)
        };
        let current = self.inner();
        // SAFETY: a program clshim holds a reference to (or, not held, one a kernel holds
        // while the application may still ask its kernel's program): live.
        let current_lives = unsafe { crate::query::reference_count(route, current) }
            .is_some_and(|n| n > held.contains(&current) as cl_uint);
        if current_lives && current != source && held.contains(&source) {
            // A kernel keeps the program, and the application may ask it for its source
            // (`CL_KERNEL_PROGRAM`): the source program's answer outlives it.
            // SAFETY: the source program, which clshim holds.
            let answer = unsafe { route.get_program_info(source) }.and_then(|f| {
                // SAFETY: the source program's own entry.
                unsafe { crate::query::info_bytes(f, source, CL_PROGRAM_SOURCE) }
            });
            self.state.lock().source_answer = answer;
        }
        let mut current_dies = false;
        for p in held {
            // SAFETY: a program clshim holds a reference to: live.
            let last = unsafe { crate::query::reference_count(route, p) } == Some(1);
            if last {
                if let Some(rt) = crate::runtime::existing() {
                    rt.programs.released(p);
                }
                if p == current {
                    current_dies = true;
                } else {
                    maps().lock().by_inner.remove(&(p as usize));
                }
            }
            // SAFETY: releasing the reference clshim holds, through the program's own entry.
            if let Some(f) = unsafe { route.release_program(p) } {
                // SAFETY: as above.
                unsafe { f(p) };
            }
        }
        if current_dies {
            self.forget();
        }
        CL_SUCCESS
    }

    /// `CL_PROGRAM_REFERENCE_COUNT` as the driver would answer it for one program: the
    /// application's references and those the driver's own objects hold (kernels).
    ///
    /// # Safety
    /// The handle's program is live.
    pub unsafe fn reference_count(&self, route: Route) -> Option<cl_uint> {
        let p = self.inner();
        // SAFETY: live (this function's contract).
        let driver = unsafe { crate::query::reference_count(route, p) }?;
        let ours = self.state.lock().held.contains(&p) as cl_uint;
        Some(driver.saturating_sub(ours) + self.app_refs.load(Ordering::Acquire))
    }

    /// The build log of `device` a served build answers (None: the driver's program
    /// answers its own).
    pub fn served_log(&self, device: cl_device_id) -> Option<Vec<u8>> {
        let st = self.state.lock();
        st.answers
            .logs
            .iter()
            .find(|(d, _)| *d == device)
            .map(|(_, l)| l.clone())
    }

    /// What answers `CL_PROGRAM_SOURCE` for a handle that stands for a program made from
    /// binaries: the source program clshim holds, or the answer it gave before clshim let
    /// go of it; None when the handle stands for the source program (its own answer).
    pub fn source_answer(&self) -> Option<Result<cl_program, Vec<u8>>> {
        let st = self.state.lock();
        if self.inner() == st.source {
            return None;
        }
        if st.held.contains(&st.source) {
            return Some(Ok(st.source));
        }
        st.source_answer.clone().map(Err)
    }

    /// The source program, which the builds the store does not serve build; made again
    /// from the source when clshim let go of it (the application released the handle
    /// while a kernel held its program, then took the program back from the kernel).
    /// None when the driver refuses to make it.
    ///
    /// # Safety
    /// The program the handle stands for is live (and so its context).
    pub unsafe fn source_program(&'static self, route: Route) -> Option<cl_program> {
        {
            let st = self.state.lock();
            if st.held.contains(&st.source) {
                return Some(st.source);
            }
        }
        if self.source.is_empty() {
            return None;
        }
        // SAFETY: the handle's context, which its live program holds.
        let create = unsafe { route.create_program_with_source(self.context) }?;
        let text = self.source.as_ptr() as *const std::ffi::c_char;
        let length = self.source.len();
        let mut err = CL_SUCCESS;
        // SAFETY: the context's own entry; one string of `length` bytes, given with its
        // length (it holds no terminator).
        let program = unsafe { create(self.context, 1, &text, &length, &mut err) };
        if program.is_null() || err != CL_SUCCESS {
            return None;
        }
        forget_reused(program);
        if let Some(rt) = crate::runtime::existing() {
            // The program the handle stands for carries the source program's entry.
            rt.programs.alias(program, self.inner());
        }
        {
            let mut st = self.state.lock();
            st.source = program;
            st.held.push(program);
        }
        maps()
            .lock()
            .by_inner
            .insert(program as usize, self as *const Handle as usize);
        Some(program)
    }

    /// Whether the handle stands for its source program.
    pub fn on_source(&self) -> bool {
        self.inner() == self.state.lock().source
    }

    /// Removes the handle from every map and frees it.
    fn forget(&'static self) {
        let me = self as *const Handle as usize;
        let mut m = maps().lock();
        m.handles.remove(&me);
        m.by_inner.retain(|_, h| *h != me);
        drop(m);
        // SAFETY: made by Box::leak in `wrap`, removed from every map above, so no one can
        // find it again; the application released its last reference to it.
        drop(unsafe { Box::from_raw(self as *const Handle as *mut Handle) });
    }
}

/// The source text of the handle `program` (a driver's) stands behind, for a program the
/// program cache made from binaries, which has none of its own.
pub fn source_of(program: cl_program) -> Option<Vec<u8>> {
    if !ANY.load(Ordering::Relaxed) || program.is_null() {
        return None;
    }
    let m = maps().lock();
    let h = *m.handles.get(m.by_inner.get(&(program as usize))?)?;
    drop(m);
    Some(h.source.clone())
}

/// The `CL_KERNEL_ATTRIBUTES` of kernel `name` that a served build's program `program` (a
/// driver's) answers; None: the driver's program answers its own.
pub fn served_attributes(program: cl_program, name: &[u8]) -> Option<Vec<u8>> {
    if !ANY.load(Ordering::Relaxed) || program.is_null() {
        return None;
    }
    let m = maps().lock();
    let h = *m.handles.get(m.by_inner.get(&(program as usize))?)?;
    drop(m);
    if h.inner() != program {
        return None;
    }
    let st = h.state.lock();
    st.answers
        .attributes
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| a.clone())
}

/// A new program was made at `program`'s address: any program a handle stood for there
/// is gone, and a handle the application let go of that stood for it is forgotten.
pub fn forget_reused(program: cl_program) {
    if !ANY.load(Ordering::Relaxed) || program.is_null() {
        return;
    }
    let mut m = maps().lock();
    let Some(h) = m.by_inner.remove(&(program as usize)) else {
        return;
    };
    let handle = m.handles.get(&h).copied();
    drop(m);
    if let Some(handle) = handle {
        if handle.app_refs.load(Ordering::Acquire) == 0 && handle.inner() == program {
            handle.forget();
        }
    }
}
