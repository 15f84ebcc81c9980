//! The warm step's worker (`clshim warm`, one process per group of requests): turns the
//! requests in the native store into the driver's own binaries, in a process of its own
//! (the `clshim` command, at idle priority), never in the application's: a binary query
//! on pocl holds its process-wide LLVM and kernel-library locks for the whole generic
//! compile, stalling every build and kernel launch of the process around it. The command
//! groups the requests by working directory and environment and starts one worker per
//! group in that directory with that environment; the worker calls [`clshim_warm_v4`]
//! here, so programs are made again with the very code that loads clshim binaries
//! (`remake::recreate`) and keyed with the same `BuildKey`. The OpenCL loader is
//! opened at run time; nothing links it.
//!
//! The worker watches its own compiles (`store::record`): it forks a tracer first, and
//! pocl compiles in a private cache folder of the worker's, so that every name the compile
//! looks up is either the application's (its headers, its working directory, the places
//! it probed) or pocl's own (files it made during the build). The tracer copies pocl's
//! compile of each program from the application's kernel cache when that holds it, so the
//! source build is the cache hit it was for the application and only the generic compile
//! of the binary query is new. The driver's own files are those a compile of an empty
//! kernel reads (without its link, with pocl's kernel library found beside its headers),
//! learnt once per driver build and kept in the store.
//!
//! It reads only the user's own store (`files`), and requests only of the variables a warm
//! step sets (`Request::decode`). For each request of its group: claim it (an exclusive
//! `<key>.claim` beside it, a lease the `clshim warm` command renews while the request is
//! made, so that warm steps running at once, on one host or several sharing the store,
//! split the work; a claim not renewed for a minute on the store's clock, or whose process
//! is gone from this very host, is taken over), check it, find its device among the
//! loader's platforms and its driver build, compute the build's key here (a request whose
//! key differs, because the worker's environment is not the request's, is stale), build
//! the program in one context per device while the tracer watches, make the manifest of
//! what the compile read (`store::manifest`), ask the driver for `CL_PROGRAM_BINARIES`,
//! write the entry (or, for a build that cannot be kept, an entry that says why), and
//! remove the request. A compile whose inputs changed while it ran is made again once,
//! after a second; failing that it waits for a later step. A request for a device or
//! driver build this host does not have is left for another (for a week).

use super::build_key::{BuildKey, CompileEnv};
use super::files::{self, Fd};
use super::manifest::{self, DriverFiles, Refusal};
use super::record::{self, Recorder};
use crate::cl::*;
use crate::devices::DeviceFacts;
use crate::dispatch::Route;
use crate::owned_program::OwnedProgram;
use crate::recipe::{Kind, Recipe, Text};
use crate::remake::{c_options, recreate};
use clshim_format::store::{self as format, Claim, Request, WarmEvent, REQUESTS};
use std::ffi::{c_char, c_void, CStr};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

type FnGetPlatformIDs = unsafe extern "C" fn(cl_uint, *mut cl_platform_id, *mut cl_uint) -> cl_int;
type FnGetDeviceIDs = unsafe extern "C" fn(
    cl_platform_id,
    cl_device_type,
    cl_uint,
    *mut cl_device_id,
    *mut cl_uint,
) -> cl_int;
type FnCreateContext = unsafe extern "C" fn(
    *const isize,
    cl_uint,
    *const cl_device_id,
    *const c_void,
    *mut c_void,
    *mut cl_int,
) -> cl_context;
type FnReleaseContext = unsafe extern "C" fn(cl_context) -> cl_int;

const DEVICE_TYPE_ALL: cl_device_type = 0xFFFF_FFFF;

/// A request for a device no warm step has had for this long is dropped (its device is
/// gone, or its driver changed: a later run asks again).
const STALE_FOREIGN_SECONDS: i64 = 7 * 24 * 3600;

/// Where a worker reports each request's events (`WarmEvent`) as they happen.
pub type Report = unsafe extern "C" fn(event: u32, key: u64);

/// The loader's entry points the step needs besides those of the objects' tables.
struct Loader {
    get_platforms: FnGetPlatformIDs,
    get_devices: FnGetDeviceIDs,
    create_context: FnCreateContext,
    release_context: FnReleaseContext,
}

fn open_loader() -> Result<Loader, String> {
    let names: [&[u8]; 2] = [b"libOpenCL.so.1\0", b"libOpenCL.so\0"];
    let handle = names
        .iter()
        // SAFETY: NUL-terminated names; the loader stays open for the process.
        .map(|n| unsafe {
            libc::dlopen(
                n.as_ptr() as *const c_char,
                libc::RTLD_NOW | libc::RTLD_LOCAL,
            )
        })
        .find(|h| !h.is_null())
        .ok_or("cannot open libOpenCL.so.1 (an OpenCL ICD loader)")?;
    let sym = |name: &[u8]| {
        // SAFETY: an open handle and a NUL-terminated name.
        let p = unsafe { libc::dlsym(handle, name.as_ptr() as *const c_char) };
        (!p.is_null()).then_some(p).ok_or_else(|| {
            format!(
                "the OpenCL loader has no {}",
                String::from_utf8_lossy(&name[..name.len() - 1])
            )
        })
    };
    // SAFETY: each symbol is the loader's function of that name, of the OpenCL type.
    unsafe {
        Ok(Loader {
            get_platforms: std::mem::transmute::<*mut c_void, FnGetPlatformIDs>(sym(
                b"clGetPlatformIDs\0",
            )?),
            get_devices: std::mem::transmute::<*mut c_void, FnGetDeviceIDs>(sym(
                b"clGetDeviceIDs\0",
            )?),
            create_context: std::mem::transmute::<*mut c_void, FnCreateContext>(sym(
                b"clCreateContext\0",
            )?),
            release_context: std::mem::transmute::<*mut c_void, FnReleaseContext>(sym(
                b"clReleaseContext\0",
            )?),
        })
    }
}

/// One device of this host: its handle, facts and driver identity, and the one context
/// the worker makes on it (at its first request).
struct Device {
    id: cl_device_id,
    facts: DeviceFacts,
    driver: u64,
    context: Option<cl_context>,
}

/// # Safety
/// `l` holds the loader's functions.
unsafe fn devices(l: &Loader) -> Vec<Device> {
    let mut n: cl_uint = 0;
    // SAFETY: a count query.
    if unsafe { (l.get_platforms)(0, std::ptr::null_mut(), &mut n) } != CL_SUCCESS || n == 0 {
        return Vec::new();
    }
    let mut platforms = vec![std::ptr::null_mut(); n as usize];
    // SAFETY: room for `n` platforms.
    if unsafe { (l.get_platforms)(n, platforms.as_mut_ptr(), std::ptr::null_mut()) } != CL_SUCCESS {
        return Vec::new();
    }
    let mut out = Vec::new();
    for p in platforms {
        let mut m: cl_uint = 0;
        // SAFETY: a platform the loader listed; a count query.
        if unsafe { (l.get_devices)(p, DEVICE_TYPE_ALL, 0, std::ptr::null_mut(), &mut m) }
            != CL_SUCCESS
            || m == 0
        {
            continue;
        }
        let mut ids = vec![std::ptr::null_mut(); m as usize];
        // SAFETY: room for `m` devices.
        if unsafe {
            (l.get_devices)(
                p,
                DEVICE_TYPE_ALL,
                m,
                ids.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        } != CL_SUCCESS
        {
            continue;
        }
        for id in ids {
            // SAFETY: a live device the loader listed.
            let facts = unsafe { crate::devices::query(Route::Object, id) };
            // SAFETY: as above.
            let driver = unsafe { super::driver::driver_identity(id) };
            if let (Some(facts), Some(driver)) = (facts, driver) {
                out.push(Device {
                    id,
                    facts,
                    driver,
                    context: None,
                });
            }
        }
    }
    out
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The longest claim read back: a host id and a pid fit with room to spare.
const MAX_CLAIM: u64 = 512;

/// Takes the claim on the request `key` in `dir` (the requests folder): true when this
/// process holds it now. A claim another holds is taken over once its lease ran out (not
/// renewed for `format::LEASE_SECONDS` on the store's clock: its holder was killed with its
/// job, or its host is gone), or at once when its holder is a process of this very host
/// (name, boot and PID namespace) that is gone, or when it is no claim at all. A claim
/// appears whole: written under a temporary name, then linked to its own (which fails when
/// it exists, on NFS too), so no reader ever sees one half written.
fn claim(dir: &Fd, key: u64, me: &Claim) -> bool {
    let name = format::claim_name(key);
    // A temporary name the cap removes an hour on, should this process die before it does.
    let tmp = files::temporary_name(&name);
    let (Ok(c_name), Ok(c_tmp)) = (
        std::ffi::CString::new(name.as_str()),
        std::ffi::CString::new(tmp.as_str()),
    ) else {
        return false;
    };
    files::remove(dir, &tmp);
    let Ok(fd) = files::create_new(dir, &c_tmp) else {
        return false;
    };
    let text = me.text();
    {
        // Closed at the end of this block, before the link: on NFS, another host reads a
        // file whole only once its writer closed it.
        let fd = fd;
        // SAFETY: `text` is readable for its length.
        let n = unsafe { libc::write(fd.0, text.as_ptr() as *const c_void, text.len()) };
        if n != text.len() as isize {
            files::remove(dir, &tmp);
            return false;
        }
    }
    let mut held = false;
    for _ in 0..2 {
        // SAFETY: an open directory and two valid names; no link is followed.
        if unsafe { libc::linkat(dir.0, c_tmp.as_ptr(), dir.0, c_name.as_ptr(), 0) } == 0 {
            held = true;
            break;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST)
            || !lapsed(dir, &name, me)
            || !files::remove(dir, &name)
        {
            break;
        }
    }
    files::remove(dir, &tmp);
    held
}

/// Whether the claim `name` may be taken over (see [`claim`]). Read bounded and without
/// following a link: anything that is not a claim (a FIFO, a link to /dev/zero, a claim of
/// an older clshim) holds nothing.
fn lapsed(dir: &Fd, name: &str, me: &Claim) -> bool {
    let Some(renewed) = files::modified(dir, name) else {
        return true;
    };
    let now = files::store_now(dir).unwrap_or_else(now);
    if now - renewed > format::LEASE_SECONDS {
        return true;
    }
    let holder = match files::read_file(dir, name, MAX_CLAIM, false) {
        Ok(Some(b)) => match Claim::parse(&b) {
            Some(c) => c,
            None => return true,
        },
        _ => return true,
    };
    holder.host == me.host && format::process_gone(holder.pid)
}

/// Makes and builds `recipe` for `device` in `ctx`: the program, or why not.
///
/// # Safety
/// `ctx` is a valid context of `device`.
unsafe fn make(
    ctx: cl_context,
    device: cl_device_id,
    recipe: &Recipe,
) -> Result<OwnedProgram, String> {
    let route = Route::Object;
    // SAFETY: a valid context and its device (this function's contract).
    let owned = unsafe { recreate(route, ctx, &[device], recipe) }?;
    if recipe.kind == Kind::Built {
        let options = c_options(&recipe.options);
        // SAFETY: the live program just made.
        let build = unsafe { route.build_program(owned.get()) }.ok_or("no clBuildProgram")?;
        // SAFETY: the program's own entry, its device, clshim's options, no callback.
        let ret = unsafe {
            build(
                owned.get(),
                1,
                &device,
                options.as_ptr(),
                None,
                std::ptr::null_mut(),
            )
        };
        if ret != CL_SUCCESS {
            return Err(format!("the build failed ({})", status_name(ret)));
        }
    }
    Ok(owned)
}

/// The driver's build log and binary of `program` (built from `recipe`) for `device`.
///
/// # Safety
/// `program` is live and built for `device`.
unsafe fn payload_of(
    program: cl_program,
    device: cl_device_id,
    recipe: &Recipe,
) -> Result<format::Payload, String> {
    let route = Route::Object;
    // SAFETY: the live program.
    let info = unsafe { route.get_program_info(program) }.ok_or("no clGetProgramInfo")?;
    let mut size = 0usize;
    // SAFETY: one device: one size.
    let ret = unsafe {
        info(
            program,
            CL_PROGRAM_BINARY_SIZES,
            std::mem::size_of::<usize>(),
            &mut size as *mut usize as *mut c_void,
            std::ptr::null_mut(),
        )
    };
    if ret != CL_SUCCESS || size == 0 {
        return Err(format!("no binary size ({})", status_name(ret)));
    }
    let mut bytes = vec![0u8; size];
    let mut ptr = bytes.as_mut_ptr();
    // SAFETY: one buffer of the size the driver gave.
    let ret = unsafe {
        info(
            program,
            CL_PROGRAM_BINARIES,
            std::mem::size_of::<*mut u8>(),
            &mut ptr as *mut *mut u8 as *mut c_void,
            std::ptr::null_mut(),
        )
    };
    if ret != CL_SUCCESS {
        return Err(format!("no binary ({})", status_name(ret)));
    }
    // The log the source build gave (pocl's kernel cache keeps it with the build), for a
    // program cache's served build to answer as that build.
    // SAFETY: the live program and its device.
    let log = unsafe { crate::query::build_log(route, program, device) }.unwrap_or_default();
    let attributes = if recipe.kind == Kind::Built {
        // SAFETY: the live program, built.
        unsafe { crate::query::kernel_attributes(route, program) }
    } else {
        Vec::new()
    };
    Ok(format::Payload {
        log,
        attributes,
        binary: bytes,
    })
}

/// Where the worker's compiles happen: pocl's private cache folder (the worker's
/// `POCL_CACHE_DIR`), the application's kernel cache the requests' group names, and what
/// the driver reads for any program.
struct Workspace {
    own: PathBuf,
    theirs: PathBuf,
    recorder: Recorder,
    /// What each driver build reads for any program, once learnt whole (or why it cannot
    /// be).
    driver: std::collections::HashMap<u64, Result<DriverFiles, String>>,
    /// Whether a compile of this process has run: the driver's files are learnt by a
    /// process's first compiles (what a first compile alone reads, were there any such
    /// files, would be missed later).
    compiled: bool,
}

impl Workspace {
    /// Empties the private cache folder (pocl's files of the last build), keeping it.
    fn clear(&self) {
        if let Ok(rd) = std::fs::read_dir(&self.own) {
            for e in rd.flatten() {
                let p = e.path();
                let _ = match e.file_type() {
                    Ok(t) if t.is_dir() => std::fs::remove_dir_all(&p),
                    _ => std::fs::remove_file(&p),
                };
            }
        }
    }

    /// Builds `recipe` while the tracer watches: the program, and the record of its compile.
    ///
    /// # Safety
    /// `ctx` is a valid context of `device`.
    unsafe fn watched(
        &mut self,
        ctx: cl_context,
        device: cl_device_id,
        recipe: &Recipe,
    ) -> (Result<OwnedProgram, String>, Result<record::Record, String>) {
        self.clear();
        let own = self.own.as_os_str().as_bytes();
        let theirs = self.theirs.as_os_str().as_bytes();
        // SAFETY: a live device (this function's contract).
        let driver = unsafe { super::driver::driver_identity(device) }.unwrap_or(0);
        self.recorder.begin(Some((own, theirs, driver)));
        // SAFETY: this function's contract.
        let program = unsafe { make(ctx, device, recipe) };
        let rec = self.recorder.end();
        self.compiled = true;
        (program, rec)
    }

    /// What the driver of `device` (build identity `driver`) reads for any program: kept
    /// in the store's `drivers/` once a watched compile of an empty kernel learnt it, and
    /// trusted while every one of those files has its status still. None when another
    /// worker is learning it and `wait` is false: ask again (with `wait`) when nothing else
    /// is left to do before the manifest.
    ///
    /// Learnt by one worker of the store at a time (an exclusive lock on the store's
    /// `drivers/` folder), each of the others reading what it kept, and only by a
    /// process's first compile (pocl loads its kernel library once a process, and what a
    /// first compile alone reads, were there any such files, would be missed later).
    ///
    /// # Safety
    /// `ctx` is a valid context of `device`.
    unsafe fn driver_files(
        &mut self,
        store: &Fd,
        driver: u64,
        ctx: cl_context,
        device: cl_device_id,
        wait: bool,
    ) -> Option<Result<DriverFiles, String>> {
        if let Some(known) = self.driver.get(&driver) {
            return Some(known.clone());
        }
        let name = format!("{driver:016x}.files");
        let folder = files::open_sub(store, DRIVERS, true).ok();
        let kept = |folder: &Option<Fd>| {
            folder
                .as_ref()
                .and_then(|d| {
                    files::read_file(d, &name, MAX_DRIVER_FILES, false)
                        .ok()
                        .flatten()
                })
                .and_then(|b| decode_driver_files(&b))
                .filter(|(m, _)| manifest::check(m, &self.theirs).is_ok())
                .map(|(_, files)| files)
        };
        let mut found = kept(&folder);
        if found.is_none() {
            // Where the folder cannot be locked (a filesystem without flock), each worker
            // learns for itself, as any would without the lock.
            match folder.as_ref().map(|d| files::lock_exclusive(d, wait)) {
                Some(Ok(false)) => return None,
                Some(Ok(true)) => found = kept(&folder),
                _ => {}
            }
        }
        let known = match found {
            Some(files) => Ok(files),
            // Another worker held the lock and left no list: a fresh worker learns it.
            None if self.compiled => Err(
                "files are learnt by a worker's first compile, and this one has compiled".into(),
            ),
            // SAFETY: this function's contract.
            None => unsafe { self.learn_driver_files(&folder, &name, ctx, device) },
        };
        // The folder's descriptor, and the lock with it, goes now: the file is in place.
        drop(folder);
        self.driver.insert(driver, known.clone());
        Some(known)
    }

    /// Learns what the driver reads for any program and keeps it in `folder` as `name`.
    /// First the front end's files, from a compile of an empty kernel without its link:
    /// the link's part, loading pocl's kernel library, is most of an empty kernel's build
    /// (0.5 of 0.8 CPU-s with pocl 3.1 here, 0.57 CPU-s in all with pocl 5 on 16 cores).
    /// The kernel library is then added by status from the folder those headers came from
    /// (`DriverFiles::add_kernel_library`). Where they lead to none (a pocl run from its
    /// build tree, a header cache), an empty kernel is built as well, before any link of
    /// this process, so that its list holds what a link reads.
    ///
    /// # Safety
    /// `ctx` is a valid context of `device`.
    unsafe fn learn_driver_files(
        &mut self,
        folder: &Option<Fd>,
        name: &str,
        ctx: cl_context,
        device: cl_device_id,
    ) -> Result<DriverFiles, String> {
        // SAFETY: this function's contract.
        let mut front = unsafe { self.watched_empty_kernel(ctx, device, Kind::Compiled) }?;
        front.add_kernel_library();
        let files = if front.holds_kernel_library() {
            front
        } else {
            // SAFETY: this function's contract.
            let mut whole = unsafe { self.watched_empty_kernel(ctx, device, Kind::Built) }?;
            // What the process's first compile read once is the driver's as much as what
            // this one read.
            whole.add(&front);
            whole
        };
        if let Some(dir) = folder {
            let bytes = encode_driver_files(&files);
            let _ = files::write_atomic(dir, name, &bytes, true, false);
        }
        Ok(files)
    }

    /// What a compile of an empty kernel (`kind`: without its link, or built) read, while
    /// the tracer watched, in an environment that adds nothing of the user's.
    ///
    /// # Safety
    /// `ctx` is a valid context of `device`.
    unsafe fn watched_empty_kernel(
        &mut self,
        ctx: cl_context,
        device: cl_device_id,
        kind: Kind,
    ) -> Result<DriverFiles, String> {
        let text = Text::Source(b"kernel void clshim_driver_files(void) {}\n".to_vec());
        let mut empty = Recipe::built(text, Vec::new());
        empty.kind = kind;
        // pocl reads its extra build flags at every build, and a header they force-include
        // (`-include cfg.h`) would otherwise become a driver's file, checked by its status
        // only in every later entry (a same-length edit with its time kept was served).
        let extra = std::env::var_os("POCL_EXTRA_BUILD_FLAGS");
        std::env::remove_var("POCL_EXTRA_BUILD_FLAGS");
        // SAFETY: this function's contract.
        let (program, rec) = unsafe { self.watched(ctx, device, &empty) };
        if let Some(v) = extra {
            std::env::set_var("POCL_EXTRA_BUILD_FLAGS", v);
        }
        match (program, rec) {
            (Ok(_), Ok(r)) if r.problems.is_empty() => Ok(DriverFiles::from_record(
                &r,
                self.own.as_os_str().as_bytes(),
            )),
            (Ok(_), Ok(r)) => Err(format!(
                "its compiles cannot be watched: {}",
                r.problems.join("; ")
            )),
            (Err(why), _) => Err(format!("an empty kernel does not build here: {why}")),
            (_, Err(why)) => Err(format!("its compiles cannot be watched: {why}")),
        }
    }
}

use clshim_format::labels::{DRIVERS, DRIVER_FILES_FRONT_END_MAGIC, DRIVER_FILES_MAGIC};
/// Far beyond a driver's few dozen files.
const MAX_DRIVER_FILES: u64 = 1 << 24;

/// The list `d` as kept in the store: a whole build's (`CLSHIMD2`), or the front end's with
/// pocl's kernel library found beside its headers (`CLSHIMD3`), as the list says.
fn encode_driver_files(d: &DriverFiles) -> Vec<u8> {
    let m = d.as_manifest().encode();
    let mut out = if d.holds_kernel_library() {
        DRIVER_FILES_FRONT_END_MAGIC.to_vec()
    } else {
        DRIVER_FILES_MAGIC.to_vec()
    };
    out.extend_from_slice(&crate::hash::fnv1a64(&m).to_le_bytes());
    out.extend_from_slice(&m);
    out
}

/// A list `encode_driver_files` wrote, with its manifest; None where it is damaged, or
/// is a list of the front end's that names no kernel library (as those kept before
/// 2026-12-06's fifth session may be): such a list is learnt again.
fn decode_driver_files(b: &[u8]) -> Option<(clshim_format::manifest::Manifest, DriverFiles)> {
    let (whole_build, rest) = match b.strip_prefix(DRIVER_FILES_MAGIC) {
        Some(rest) => (true, rest),
        None => (false, b.strip_prefix(DRIVER_FILES_FRONT_END_MAGIC)?),
    };
    if rest.len() < 8 {
        return None;
    }
    let (sum, m) = rest.split_at(8);
    if u64::from_le_bytes(sum.try_into().ok()?) != crate::hash::fnv1a64(m) {
        return None;
    }
    let m = clshim_format::manifest::Manifest::decode(m).ok()?;
    let d = DriverFiles::from_manifest(&m)?;
    (whole_build || d.holds_kernel_library()).then_some((m, d))
}

fn warm(
    store_path: PathBuf,
    group: u64,
    ws: &mut Workspace,
    report: &dyn Fn(WarmEvent, u64),
) -> Result<(), String> {
    let dir =
        files::open_dir(&store_path, true).map_err(|e| format!("{}: {e}", store_path.display()))?;
    let req_path = store_path.join(REQUESTS);
    if files::list(&req_path, ".req").is_empty() {
        return Ok(());
    }
    let req = files::open_sub(&dir, REQUESTS, true)
        .map_err(|e| format!("{}: {e}", req_path.display()))?;
    let loader = open_loader()?;
    // SAFETY: the loader's functions.
    let mut devices = unsafe { devices(&loader) };
    let me = Claim::mine();
    let env = CompileEnv::of_process();
    // The group's requests, listed again once those listed are done, until a listing finds
    // none this worker has not tried: the service starts a worker as the job's first
    // request appears, and the job's others come while it runs.
    let mut tried = std::collections::HashSet::new();
    loop {
        let todo = listed(&req, &req_path, group, &tried, report);
        if todo.is_empty() {
            break;
        }
        tried.extend(todo.iter().map(|(name, _, _)| name.clone()));
        if let Some(why) = ws.recorder.unavailable() {
            for (_, _, request) in &todo {
                report(WarmEvent::Postponed, request.key);
            }
            return Err(format!(
                "{} requests wait: no compile can be watched here ({why})",
                todo.len()
            ));
        }
        // SAFETY: the loader's functions and devices it listed.
        unsafe {
            make_each(
                todo,
                &store_path,
                &loader,
                &mut devices,
                &dir,
                &req,
                &env,
                &me,
                ws,
                report,
            )
        };
    }
    ws.clear();
    for d in &devices {
        if let Some(ctx) = d.context {
            // SAFETY: the context the worker made, released once.
            unsafe { (loader.release_context)(ctx) };
        }
    }
    Ok(())
}

/// The requests of `group` in the store's `requests/` folder (`req`, named `req_path`) that
/// are not in `tried`, oldest first; damaged ones are removed and reported.
fn listed(
    req: &Fd,
    req_path: &std::path::Path,
    group: u64,
    tried: &std::collections::HashSet<String>,
    report: &dyn Fn(WarmEvent, u64),
) -> Vec<(String, i64, Request)> {
    let mut requests = files::list(req_path, ".req");
    // Oldest first, as the processes that wait for them left them: the ranks of a job then
    // see their last requests made together, not one rank's long after the other's (its
    // launcher may spin while one of its ranks has ended: MPICH's Hydra 4.0 polls the
    // ended rank's connection without a pause).
    requests.sort_by(|a, b| (a.3, &a.0).cmp(&(b.3, &b.0)));
    let mut todo = Vec::new();
    for (name, _, mtime, _) in requests {
        if tried.contains(&name) {
            continue;
        }
        let request = match files::read_file(req, &name, format::MAX_REQUEST, false) {
            Ok(Some(b)) => Request::decode(&b),
            Ok(None) => continue, // another process finished it
            // Not a regular file of the user's alone: the command, which read every request
            // before it started this worker, reports it; nothing of it is used or removed.
            Err(_) => continue,
        };
        match request {
            Ok(r) if r.group() == group => todo.push((name, mtime, r)),
            Ok(_) => {}
            Err(why) => {
                // Damaged or not a request: removed, unless another process is writing
                // it (a request is renamed into place whole, so that never shows here).
                eprintln!("clshim warm: {name}: {why}; removed");
                files::remove(req, &name);
                report(
                    WarmEvent::Failed,
                    format::key_of_name(&name, ".req").unwrap_or(0),
                );
            }
        }
    }
    todo
}

/// Claims and makes each request of `todo`, reporting what became of it.
///
/// # Safety
/// `loader` holds the loader's functions; `devices` are live devices it listed.
#[allow(clippy::too_many_arguments)]
unsafe fn make_each(
    todo: Vec<(String, i64, Request)>,
    store_path: &std::path::Path,
    loader: &Loader,
    devices: &mut [Device],
    dir: &Fd,
    req: &Fd,
    env: &CompileEnv,
    me: &Claim,
    ws: &mut Workspace,
    report: &dyn Fn(WarmEvent, u64),
) {
    for (name, mtime, request) in todo {
        // Each request's own: its group shares all but the variables that place it.
        ws.theirs = application_cache(&request);
        let claim_name = format::claim_name(request.key);
        if !claim(req, request.key, me) {
            report(WarmEvent::Claimed, request.key);
            continue;
        }
        if !files::exists(req, &name) {
            // Another worker made it since this one listed the requests.
            files::remove(req, &claim_name);
            continue;
        }
        // Before the driver sees it: should the driver kill this process, the command
        // knows which request did.
        report(WarmEvent::Begin, request.key);
        // SAFETY: the loader's functions and devices it listed.
        let outcome = unsafe { one(loader, devices, dir, &request, env, ws) };
        let keep = match &outcome {
            Outcome::Foreign => now() - mtime <= STALE_FOREIGN_SECONDS,
            Outcome::Postponed(_) => true,
            _ => false,
        };
        // A kept compile that cannot be made here (its folder gone, its environment not the
        // worker's) would become a request again at every `clshim warm`: set aside, with
        // why, for as long as a crash's (its builds are still served from the kept compile).
        if let Outcome::Failed(why) | Outcome::Stale(why) = &outcome {
            let kept = store_path
                .join(clshim_format::kept::COMPILES)
                .join(clshim_format::kept::key_folder(request.key))
                .join(clshim_format::kept::BUILD_FILE);
            if kept.exists() {
                let mark = format::set_aside_name(request.key);
                let _ = files::write_atomic(req, &mark, format!("{why}\n").as_bytes(), true, false);
            }
        }
        let event = match outcome {
            Outcome::Made => WarmEvent::Made,
            Outcome::Present => WarmEvent::Present,
            Outcome::Foreign => WarmEvent::Foreign,
            Outcome::Stale(why) => {
                eprintln!("clshim warm: {name}: stale ({why}); removed");
                WarmEvent::Stale
            }
            Outcome::Uncacheable(why) => {
                eprintln!("clshim warm: {name}: not kept: {why}");
                WarmEvent::Uncacheable
            }
            Outcome::Postponed(why) => {
                eprintln!("clshim warm: {name}: left for a later step: {why}");
                WarmEvent::Postponed
            }
            Outcome::Failed(why) => {
                eprintln!("clshim warm: {name}: {why}");
                WarmEvent::Failed
            }
        };
        // The claim first: a step ended between the two then leaves a request whose entry
        // the next step finds present, not a claim of nothing.
        files::remove(req, &claim_name);
        if !keep {
            files::remove(req, &name);
        }
        report(event, request.key);
    }
}

/// Where the application that left `request` keeps pocl's kernel cache: from the request's
/// own cache-placing variables (`format::CACHE_PLACING`: absent when it had none), the
/// others being the group's, as this process has them.
fn application_cache(request: &Request) -> PathBuf {
    let get = |n: &str| {
        if format::CACHE_PLACING.contains(&n) {
            request
                .env
                .iter()
                .find(|(k, _)| k.as_slice() == n.as_bytes())
                .map(|(_, v)| std::ffi::OsString::from_vec(v.clone()))
        } else {
            std::env::var_os(n)
        }
    };
    manifest::pocl_cache_dir(&get)
}

enum Outcome {
    Made,
    Present,
    Foreign,
    Stale(String),
    Uncacheable(String),
    Postponed(String),
    Failed(String),
}

/// One request, claimed.
///
/// # Safety
/// `l` holds the loader's functions; `devices` are live devices it listed.
unsafe fn one(
    l: &Loader,
    devices: &mut [Device],
    dir: &Fd,
    request: &Request,
    env: &CompileEnv,
    ws: &mut Workspace,
) -> Outcome {
    let Some(device) = devices
        .iter_mut()
        .find(|d| d.facts.fingerprint() == request.fingerprint && d.driver == request.driver)
    else {
        return Outcome::Foreign;
    };
    // SAFETY: a live device the loader listed (this function's contract).
    unsafe { super::labels::leave_of(dir, &device.facts, device.id, device.driver) };
    let recipe = match Recipe::decode(&request.recipe) {
        Ok(r) if r.options.is_some() => r,
        Ok(_) => return Outcome::Failed("a recipe without its options".into()),
        Err(why) => return Outcome::Failed(format!("damaged recipe: {why:?}")),
    };
    let key = match BuildKey::new(&recipe, &request.recipe, &device.facts, device.driver, env) {
        Ok(k) if k.key == request.key => k,
        Ok(_) => {
            return Outcome::Stale(
                "its build's key differs here: the worker's environment is not the request's"
                    .into(),
            )
        }
        Err(why) => return Outcome::Stale(why),
    };
    if let Ok(Some(existing)) =
        files::read_file(dir, &format::entry_name(key.key), format::MAX_ENTRY, false)
    {
        let holds = super::verify(&existing, &key)
            .is_ok_and(|(_, m, _)| manifest::check(&m, &ws.theirs).is_ok());
        if holds {
            // Its source's mark may have gone with older entries: made again.
            mark_source(dir, &recipe);
            return Outcome::Present;
        }
    }
    let ctx = match device.context {
        Some(c) => c,
        None => {
            let mut err = CL_SUCCESS;
            // SAFETY: one live device, no properties and no callback.
            let ctx = unsafe {
                (l.create_context)(
                    std::ptr::null(),
                    1,
                    &device.id,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    &mut err,
                )
            };
            if ctx.is_null() {
                return Outcome::Failed(format!("no context ({})", status_name(err)));
            }
            device.context = Some(ctx);
            ctx
        }
    };
    // Before the build: where the list must be learnt, its compile is the process's first.
    // SAFETY: a valid context of the live device.
    let mut driver = unsafe { ws.driver_files(dir, device.driver, ctx, device.id, false) };
    // A compile whose inputs changed under it is made once more, once they are a second
    // old; then it waits for a later step.
    for attempt in 0..2 {
        // SAFETY: a valid context of the live device.
        let (program, rec) = unsafe { ws.watched(ctx, device.id, &recipe) };
        let program = match program {
            Ok(p) => p,
            Err(why) => return Outcome::Failed(format!("{} recipe: {why}", recipe.kind.name())),
        };
        let rec = match rec {
            Ok(r) => r,
            Err(why) => return Outcome::Postponed(format!("its compile cannot be watched: {why}")),
        };
        // pocl loads its kernel library once a process: one changed since this worker named
        // it in its devices' keys may or may not be what this compile linked.
        if !super::kernel_library::unchanged(device.driver) {
            return Outcome::Postponed(
                "pocl's kernel library changed since this worker started".into(),
            );
        }
        // While another worker learns the driver's files, this one makes the driver's
        // binary, which needs none of them, and then waits for what it kept.
        // SAFETY: the live program, built for the device.
        let early = driver
            .is_none()
            .then(|| unsafe { payload_of(program.get(), device.id, &recipe) });
        let known = match driver.take() {
            Some(d) => d,
            // SAFETY: a valid context of the live device.
            None => unsafe { ws.driver_files(dir, device.driver, ctx, device.id, true) }
                .unwrap_or_else(|| Err("files could not be learnt".into())),
        };
        driver = Some(known.clone());
        let known = match known {
            Ok(d) => d,
            Err(why) => return Outcome::Postponed(format!("the driver {why}")),
        };
        let verdict = manifest::from_record(&rec, ws.own.as_os_str().as_bytes(), &known);
        let (manifest, content) = match verdict {
            Ok(m) => {
                let payload = early.unwrap_or_else(|| {
                    // SAFETY: the live program, built for the device.
                    unsafe { payload_of(program.get(), device.id, &recipe) }
                });
                match payload {
                    Ok(p) => (m, Ok(p)),
                    Err(why) => {
                        return Outcome::Failed(format!("{} recipe: {why}", recipe.kind.name()))
                    }
                }
            }
            Err(Refusal::Uncacheable(why, m)) => (m.unwrap_or_default(), Err(why)),
            Err(Refusal::Retry(why)) if attempt == 0 => {
                drop(program);
                std::thread::sleep(std::time::Duration::from_millis(1100));
                let _ = why;
                continue;
            }
            Err(Refusal::Retry(why)) => return Outcome::Postponed(why),
        };
        drop(program);
        let entry = super::encode(&key, &manifest, content.as_ref().map_err(|w| w.as_str()));
        let name = format::entry_name(key.key);
        // The source's mark first: a step killed between the two (a job's end) then leaves
        // a mark without its entry, whose programs build as without the cache, rather than
        // an entry no program would be given a handle to use.
        if content.is_ok() {
            mark_source(dir, &recipe);
        }
        return match files::write_atomic(dir, &name, &entry, true, true) {
            Ok(()) if content.is_ok() => {
                // Newer than its entry again: the cap takes a mark older than every entry
                // for one of builds that are gone.
                mark_source(dir, &recipe);
                Outcome::Made
            }
            Ok(()) => Outcome::Uncacheable(content.err().unwrap_or_default()),
            Err(e) => Outcome::Failed(format!("cannot write {name}: {e}")),
        };
    }
    unreachable!("the loop returns")
}

/// Marks the source of a build recipe as one the store holds a build of (an empty file
/// named by its hash in `sources/`), for the program cache to give its programs handles;
/// a mark already there is made new (its time: the cap keeps marks no older than an entry).
fn mark_source(dir: &Fd, recipe: &Recipe) {
    if let (Kind::Built, Text::Source(src)) = (recipe.kind, &recipe.text) {
        let name = format::source_mark(crate::hash::fnv1a64(src));
        let marked = files::open_sub(dir, format::SOURCES, true).and_then(|d| {
            if files::exists(&d, &name) {
                files::touch(&d, &name);
                Ok(())
            } else {
                files::write_atomic(&d, &name, b"", false, false)
            }
        });
        if let Err(e) = marked {
            eprintln!("clshim warm: cannot mark a source in the store: {e}");
        }
    }
}

/// A private folder for pocl to compile in: `$TMPDIR` (else `/tmp`)
/// `/clshim-warm-<pid>-XXXXXX`, the user's only, by its real name (pocl and the tracer must
/// spell it alike), in a temporary folder where no other user can swap it
/// (`files::private_temp_dir`): none, and the worker makes nothing. The pid lets the warm
/// service remove the folder of a worker it ended.
fn private_cache() -> Result<PathBuf, String> {
    let tmp = files::private_temp_dir()
        .map_err(|why| format!("no private folder for pocl's compiles: {why}"))?;
    let mut template = tmp
        .join(format!("clshim-warm-{}-XXXXXX", std::process::id()))
        .into_os_string()
        .into_vec();
    template.push(0);
    // SAFETY: a writable NUL-terminated template.
    let made = unsafe { libc::mkdtemp(template.as_mut_ptr() as *mut c_char) };
    if made.is_null() {
        return Err(format!(
            "no private folder for pocl's compiles: {}",
            std::io::Error::last_os_error()
        ));
    }
    template.pop();
    Ok(PathBuf::from(std::ffi::OsString::from_vec(template)))
}

/// A worker of the warm step, for the `clshim` command: `store` (a NUL-terminated path)
/// is the native store; the worker makes the requests of `group` (`Request::group`), in
/// this process's working directory and environment, which the command set to theirs,
/// and calls `report` (may be NULL) with each request's events (`WarmEvent` as u32, and
/// the request's key) as they happen. Call it while the process has one thread: it forks
/// the tracer that watches its compiles. Returns 0, or 1 when the worker could not run
/// (the reason on stderr). Never unwinds.
///
/// # Safety
/// `store` is a NUL-terminated string; `report` is NULL or callable from this thread.
#[no_mangle]
pub unsafe extern "C" fn clshim_warm_v4(
    store: *const c_char,
    group: u64,
    report: Option<Report>,
) -> i32 {
    if store.is_null() {
        return 1;
    }
    // SAFETY: a NUL-terminated string (this function's contract).
    let bytes = unsafe { CStr::from_ptr(store) }.to_bytes();
    let path = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes));
    let tell = |event: WarmEvent, key: u64| {
        if let Some(f) = report {
            // SAFETY: callable (this function's contract).
            unsafe { f(event as u32, key) };
        }
    };
    let result = crate::guard::catch(|| {
        let theirs = manifest::pocl_cache_dir(&|n| std::env::var_os(n));
        let own = private_cache()?;
        // Before the driver is loaded: pocl reads it once.
        std::env::set_var("POCL_CACHE_DIR", &own);
        let recorder = record::watch_this_process(&own);
        let mut ws = Workspace {
            own,
            theirs,
            recorder,
            driver: Default::default(),
            compiled: false,
        };
        warm(path, group, &mut ws, &tell)
    })
    .unwrap_or_else(|| Err("internal error".into()));
    match result {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("clshim warm: {why}");
            1
        }
    }
}
