//! The warm step (`clshim warm`): turns the requests `substitute` left in the native store
//! into the driver's own binaries, in a process of its own (the `clshim` command, at idle
//! priority), never in the application's: a binary query on pocl holds its process-wide
//! LLVM and kernel-library locks for the whole generic compile, stalling every build and
//! kernel launch of the process around it. The command finds this library as `clshim run`
//! does, opens it and calls [`clshim_warm_v1`], so the programs are made again with the
//! very code that loads clshim binaries (`binary_load::recreate`, `container`, `recipe`)
//! and keyed with the same `native_store::Key`. The OpenCL loader is opened here at run
//! time (`libOpenCL.so.1`); nothing links it.
//!
//! For each request: claim it (an exclusive `<key>.claim` file beside it, so that ranks
//! of one job running the step at once split the work; a claim whose process is gone from
//! this host, or older than an hour, is taken over), read and check the clshim binary it
//! holds, find the device with its fingerprint among the loader's platforms, make the
//! program from the recipe (built with the recipe's options for a built program), ask the
//! driver for `CL_PROGRAM_BINARIES`, write the entry, and remove the request. A request
//! for a device this host does not have is left for another (for a week); a damaged one
//! is removed.
//! Then the store is brought under its size cap, least recently used entries first.

use crate::binary_load::{c_options, recreate};
use crate::cl::*;
use crate::container;
use crate::dispatch::Route;
use crate::native_store::{self as store, Fd, Key};
use crate::recipe::{Kind, Recipe};
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};

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

/// A claim older than this is taken over whatever its process.
const STALE_CLAIM_SECONDS: i64 = 3600;
/// A request for a device no warm step has had for this long is dropped (its device is
/// gone, or its driver changed: a later run asks again).
const STALE_FOREIGN_SECONDS: i64 = 7 * 24 * 3600;

/// What one warm step did, for the command's summary line.
#[repr(C)]
#[derive(Default, Debug)]
pub struct WarmStats {
    /// Entries written.
    pub made: u64,
    /// Requests whose entry existed already.
    pub present: u64,
    /// Requests another process holds.
    pub claimed: u64,
    /// Requests for a device this host does not have, left in place.
    pub foreign: u64,
    /// Requests removed as damaged, or whose program the driver would not make.
    pub failed: u64,
    /// Entries removed to keep the store under its size cap.
    pub evicted: u64,
}

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

/// One device of this host: its handle, fingerprint and driver identity.
struct Device {
    id: cl_device_id,
    fingerprint: u64,
    driver: u64,
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
            let driver = unsafe { store::driver_identity(id) };
            if let (Some(f), Some(driver)) = (facts, driver) {
                out.push(Device {
                    id,
                    fingerprint: f.fingerprint(),
                    driver,
                });
            }
        }
    }
    out
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length.
    if unsafe { libc::gethostname(buf.as_mut_ptr() as *mut c_char, buf.len() - 1) } != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Takes the claim `name` in `dir`: Ok(true) when this process holds it now.
fn claim(dir: &Fd, path: &Path, name: &str, host: &str) -> bool {
    let text = format!("{host} {} {}\n", std::process::id(), now());
    for _ in 0..2 {
        let Ok(c) = std::ffi::CString::new(name) else {
            return false;
        };
        // SAFETY: an open directory and a valid name.
        let fd = unsafe {
            libc::openat(
                dir.0,
                c.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd >= 0 {
            let fd = Fd(fd);
            // SAFETY: `text` is readable for its length.
            unsafe { libc::write(fd.0, text.as_ptr() as *const c_void, text.len()) };
            return true;
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return false;
        }
        if !stale(&path.join(name), host) || !store::remove(dir, name) {
            return false;
        }
    }
    false
}

/// Whether a claim file's process is gone from this host, or the claim is over an hour old.
fn stale(path: &Path, host: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = path.symlink_metadata() else {
        return true;
    };
    if now() - m.mtime() > STALE_CLAIM_SECONDS {
        return true;
    }
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut words = text.split_whitespace();
    let (Some(h), Some(pid)) = (
        words.next(),
        words.next().and_then(|p| p.parse::<i32>().ok()),
    ) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    h == host
        && pid > 0
        && unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The driver's binary of `recipe` for `device`, made in a context of its own.
///
/// # Safety
/// `l` holds the loader's functions; `device` is a live device.
unsafe fn native_binary(
    l: &Loader,
    device: cl_device_id,
    recipe: &Recipe,
) -> Result<Vec<u8>, String> {
    let mut err = CL_SUCCESS;
    // SAFETY: one live device, no properties and no callback.
    let ctx = unsafe {
        (l.create_context)(
            std::ptr::null(),
            1,
            &device,
            std::ptr::null(),
            std::ptr::null_mut(),
            &mut err,
        )
    };
    if ctx.is_null() {
        return Err(format!("no context ({})", status_name(err)));
    }
    // SAFETY: a valid context and its one device.
    let result = unsafe { binary_in(ctx, device, recipe) };
    // SAFETY: the context made above.
    unsafe { (l.release_context)(ctx) };
    result
}

/// # Safety
/// `ctx` is a valid context of `device`.
unsafe fn binary_in(
    ctx: cl_context,
    device: cl_device_id,
    recipe: &Recipe,
) -> Result<Vec<u8>, String> {
    let route = Route::Object;
    // SAFETY: a valid context and its device (this function's contract).
    let owned = unsafe { recreate(route, ctx, &[device], recipe) }?;
    let program = owned.get();
    let result = (|| {
        if recipe.kind == Kind::Built {
            let options = c_options(&recipe.options);
            // SAFETY: the live program just made.
            let build = unsafe { route.build_program(program) }.ok_or("no clBuildProgram")?;
            // SAFETY: the program's own entry, its device, clshim's options, no callback.
            let ret = unsafe {
                build(
                    program,
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
        Ok(bytes)
    })();
    drop(owned);
    result
}

/// Removes the least recently used entries (oldest modification time: a load touches
/// its entry) until the store holds at most `max` bytes of them, and temporary files
/// left over an hour ago by writers that died.
fn enforce_cap(dir: &Fd, path: &Path, max: u64) -> u64 {
    let mut entries = store::list(path, ".bin");
    entries.sort_by_key(|e| (e.2, e.0.clone()));
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    let mut evicted = 0;
    for (name, size, _) in entries {
        if total <= max {
            break;
        }
        if store::remove(dir, &name) {
            total -= size;
            evicted += 1;
        }
    }
    for sub in [path.to_path_buf(), path.join(store::REQUESTS)] {
        let Ok(rd) = std::fs::read_dir(&sub) else {
            continue;
        };
        for e in rd.flatten() {
            use std::os::unix::fs::MetadataExt;
            let old = e
                .path()
                .symlink_metadata()
                .is_ok_and(|m| now() - m.mtime() > STALE_CLAIM_SECONDS);
            if old && e.file_name().to_string_lossy().starts_with(".tmp-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    evicted
}

fn warm(store_path: PathBuf, max: u64, mode: u32, stats: &mut WarmStats) -> Result<(), String> {
    let dir = store::open_dir(&store_path, true, mode)
        .map_err(|e| format!("{}: {e}", store_path.display()))?;
    let req_path = store_path.join(store::REQUESTS);
    let mut requests = store::list(&req_path, ".req");
    requests.sort();
    if !requests.is_empty() {
        let req = store::open_sub(&dir, store::REQUESTS, true, mode)
            .map_err(|e| format!("{}: {e}", req_path.display()))?;
        let loader = open_loader()?;
        // SAFETY: the loader's functions.
        let devices = unsafe { devices(&loader) };
        let host = host_name();
        for (name, _, mtime) in requests {
            let claim_name = format!("{}.claim", name.trim_end_matches(".req"));
            if !claim(&req, &req_path, &claim_name, &host) {
                stats.claimed += 1;
                continue;
            }
            // SAFETY: the loader's functions and devices it listed.
            let outcome = unsafe { one(&loader, &devices, &dir, &req, &name, mode) };
            let keep =
                matches!(outcome, Outcome::Foreign) && now() - mtime <= STALE_FOREIGN_SECONDS;
            match outcome {
                Outcome::Made => stats.made += 1,
                Outcome::Present => stats.present += 1,
                Outcome::Foreign => stats.foreign += 1,
                Outcome::Failed(why) => {
                    eprintln!("clshim warm: {name}: {why}");
                    stats.failed += 1;
                }
            }
            if !keep {
                store::remove(&req, &name);
            }
            store::remove(&req, &claim_name);
        }
    }
    stats.evicted = enforce_cap(&dir, &store_path, max);
    Ok(())
}

enum Outcome {
    Made,
    Present,
    Foreign,
    Failed(String),
}

/// One request, claimed.
///
/// # Safety
/// `l` holds the loader's functions; `devices` are live devices it listed.
unsafe fn one(
    l: &Loader,
    devices: &[Device],
    dir: &Fd,
    req: &Fd,
    name: &str,
    mode: u32,
) -> Outcome {
    let bytes = match store::read_file(req, name, container::MAX_SOURCE as u64 + 64, false) {
        Ok(Some(b)) => b,
        Ok(None) => return Outcome::Present, // another process finished it
        Err(why) => return Outcome::Failed(format!("unreadable request: {why}")),
    };
    if bytes.len() < 24 || !container::is_clshim(&bytes) {
        return Outcome::Failed("not a clshim binary".into());
    }
    let fingerprint = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let recipe = match container::decode(&bytes, fingerprint) {
        Ok(r) if r.options.is_some() => r,
        Ok(_) => return Outcome::Failed("a clshim binary without its options".into()),
        Err(why) => return Outcome::Failed(format!("damaged request: {why}")),
    };
    let Some(device) = devices.iter().find(|d| d.fingerprint == fingerprint) else {
        return Outcome::Foreign;
    };
    let encoded = recipe.encode();
    let key = Key::new(&encoded, fingerprint, device.driver);
    if let Ok(Some(existing)) = store::read_file(dir, &key.entry_name(), store::MAX_ENTRY, false) {
        if store::verify(&existing, &key, &encoded).is_ok() {
            return Outcome::Present;
        }
    }
    // SAFETY: the loader's functions and a live device (this function's contract).
    let payload = match unsafe { native_binary(l, device.id, &recipe) } {
        Ok(p) => p,
        Err(why) => return Outcome::Failed(format!("{} recipe: {why}", recipe.kind.name())),
    };
    let entry = store::encode(&key, &encoded, &payload);
    match store::write_atomic(dir, &key.entry_name(), &entry, mode, true, true) {
        Ok(()) => Outcome::Made,
        Err(e) => Outcome::Failed(format!("cannot write {}: {e}", key.entry_name())),
    }
}

/// The warm step, for the `clshim` command: `store` (a NUL-terminated path) is the native
/// store, `max_bytes` its size cap, `mode` the permissions of new files; `stats` (may be
/// NULL) receives what was done. Returns 0, or 1 when the step could not run (the reason
/// on stderr). Never unwinds.
///
/// # Safety
/// `store` is a NUL-terminated string; `stats` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn clshim_warm_v1(
    store: *const c_char,
    max_bytes: u64,
    mode: u32,
    stats: *mut WarmStats,
) -> i32 {
    if store.is_null() {
        return 1;
    }
    // SAFETY: a NUL-terminated string (this function's contract).
    let bytes = unsafe { CStr::from_ptr(store) }.to_bytes();
    let path = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes));
    let mut s = WarmStats::default();
    let result = crate::guard::catch(|| warm(path, max_bytes, mode & 0o777, &mut s))
        .unwrap_or_else(|| Err("internal error".into()));
    if !stats.is_null() {
        // SAFETY: writable (this function's contract).
        unsafe { stats.write(s) };
    }
    match result {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("clshim warm: {why}");
            1
        }
    }
}
