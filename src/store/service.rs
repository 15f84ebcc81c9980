//! The node's warm service (`CLSHIM_WARM_SERVICE=1`; off by default), started on demand: a
//! process that leaves a request for the driver's binary of a build (`requests`) makes sure
//! one `clshim warm --service` runs for its store on this node, as sccache's client starts
//! its local server. The service makes the requests at idle priority (`SCHED_IDLE`: only
//! on cores nothing else wants), each in a worker of its own,
//! never in the application: pocl's generic compile holds its process-wide locks for the
//! whole compile. It ends as soon as no process that left a request is alive, so nothing
//! of clshim's outlives the job; what it did not make waits for the next job's service,
//! and a request being made when it ended is taken over (its claim's holder is gone).
//!
//! The service never costs the job time: no process waits for it. Under `substitute` the
//! application asked for the binaries, and a process that hands out clshim binaries goes
//! on at once, as pocl's generic compile is what `substitute` spares it; a process that
//! loads a clshim binary whose driver's binary the store lacks is made again from its
//! recipe (the compile its job kept makes that pocl's cache hit). The service makes what
//! they left while the job runs, on the cores its ranks leave idle; what it did not make
//! by the job's end waits for the next job's service, or `clshim warm`.
//!
//! This module owns only the client's side: holding the clients' lock (shared) for the
//! process's life, starting the service when none holds the service lock, and what became
//! of this process's requests at its exit. The service is the `clshim` command beside this library, started with `posix_spawn` (no copy of the
//! application's memory), its standard streams on `/dev/null` (a launcher that forwards
//! the ranks' output must not wait for it), without clshim in its preload list; a thread
//! of this process reaps it if it ends first. The lock names are
//! `clshim_format::store::warm_lock_names`'s.

use std::ffi::{c_char, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, IntoRawFd};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The stores this process holds the clients' lock of.
static CLIENT_OF: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The requests this process left: their store and key.
static LEFT: Mutex<Vec<(PathBuf, u64)>> = Mutex::new(Vec::new());

/// Notes a request this process left.
pub fn left(store: &Path, key: u64) {
    let mut left = LEFT.lock().unwrap_or_else(|e| e.into_inner());
    if !left.iter().any(|(s, k)| s == store && *k == key) {
        left.push((store.to_path_buf(), key));
    }
}

/// What became of the requests this process left, at its exit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AtExit {
    pub left: u64,
    /// Whether a service was asked for (`CLSHIM_WARM_SERVICE`): else the requests wait for
    /// `clshim warm`.
    pub service: bool,
    /// Made by the service by now (an entry exists).
    pub made: u64,
}

/// How many requests this process left and how many of them the service has made by now
/// (`service`: whether one was asked for). None when this process left none. Nothing
/// waits: the service goes on with the rest while the job's other processes live.
pub fn at_exit(service: bool) -> Option<AtExit> {
    let left = LEFT.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if left.is_empty() {
        return None;
    }
    let made = left
        .iter()
        .filter(|(store, key)| store.join(clshim_format::store::entry_name(*key)).exists())
        .count() as u64;
    Some(AtExit {
        left: left.len() as u64,
        service,
        made,
    })
}

/// Opens (making it if need be) the lock file `name` in the temporary folder: the user's
/// own regular file only.
fn open_lock(name: &str) -> Option<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(std::env::temp_dir().join(name))
        .ok()?;
    let m = f.metadata().ok()?;
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    (m.is_file() && m.uid() == me && m.mode() & 0o022 == 0).then_some(f)
}

/// Makes sure the warm service of `store` runs on this node, this process being one of its
/// clients until it ends. Quiet: a service that cannot start leaves the requests for the
/// next one (or `clshim warm`).
pub fn ensure(store: &Path) {
    if cfg!(not(target_os = "linux")) {
        return; // the warm step is Linux's only
    }
    let mut mine = CLIENT_OF.lock().unwrap_or_else(|e| e.into_inner());
    if mine.iter().any(|s| s == store) {
        return;
    }
    // SAFETY: no arguments.
    let uid = unsafe { libc::geteuid() };
    let (service, clients) = clshim_format::store::warm_lock_names(uid, store);
    let Some(client) = open_lock(&clients) else {
        return;
    };
    // SAFETY: an open descriptor of this process.
    if unsafe { libc::flock(client.as_raw_fd(), libc::LOCK_SH) } != 0 {
        return;
    }
    // Held until this process ends (the descriptor is never closed).
    let _ = client.into_raw_fd();
    mine.push(store.to_path_buf());
    drop(mine);
    let Some(lock) = open_lock(&service) else {
        return;
    };
    // SAFETY: an open descriptor of this process; released when `lock` is closed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return; // a service runs
    }
    drop(lock);
    if let Err(why) = start(store) {
        log::debug!("warm service for {}: not started: {why}", store.display());
    }
}

/// The `clshim` command beside this library (as the wheel and `cargo build` place them).
fn command_beside_library() -> Option<PathBuf> {
    // SAFETY: plain data filled by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address to look it up.
    if unsafe { libc::dladdr(ensure as *const libc::c_void, &mut info) } == 0
        || info.dli_fname.is_null()
    {
        return None;
    }
    // SAFETY: a NUL-terminated string owned by the dynamic linker.
    let lib = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let lib = Path::new(std::ffi::OsStr::from_bytes(lib.to_bytes()));
    let cmd = lib.parent()?.join("clshim");
    cmd.is_file().then_some(cmd)
}

/// This process's environment for the service: clshim's library taken out of the preload
/// list (the service is clshim itself, and its workers open the library they need).
fn service_env(lib_dir: &Path) -> Vec<CString> {
    std::env::vars_os()
        .filter_map(|(k, v)| {
            let v = if k == "LD_PRELOAD" {
                let kept: Vec<&[u8]> = v
                    .as_bytes()
                    .split(|&b| b == b':' || b == b' ')
                    .filter(|p| {
                        !p.is_empty()
                            && !Path::new(std::ffi::OsStr::from_bytes(p)).starts_with(lib_dir)
                    })
                    .collect();
                kept.join(&b':')
            } else {
                v.as_bytes().to_vec()
            };
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(&v);
            CString::new(kv).ok()
        })
        .collect()
}

/// Starts `clshim warm --service --store STORE --lib LIB`.
fn start(store: &Path) -> Result<(), String> {
    let cmd = command_beside_library().ok_or("no clshim command beside the library")?;
    let lib_dir = cmd.parent().unwrap_or(Path::new("/")).to_path_buf();
    let lib = lib_dir.join(if cfg!(target_os = "macos") {
        "libclshim.dylib"
    } else {
        "libclshim.so"
    });
    let c = |p: &std::ffi::OsStr| CString::new(p.as_bytes()).map_err(|e| e.to_string());
    let argv_owned = [
        c(cmd.as_os_str())?,
        c("warm".as_ref())?,
        c("--service".as_ref())?,
        c("--store".as_ref())?,
        c(store.as_os_str())?,
        c("--lib".as_ref())?,
        c(lib.as_os_str())?,
    ];
    let mut argv: Vec<*mut c_char> = argv_owned
        .iter()
        .map(|a| a.as_ptr() as *mut c_char)
        .collect();
    argv.push(std::ptr::null_mut());
    let env_owned = service_env(&lib_dir);
    let mut envp: Vec<*mut c_char> = env_owned
        .iter()
        .map(|a| a.as_ptr() as *mut c_char)
        .collect();
    envp.push(std::ptr::null_mut());
    let null = CString::new("/dev/null").map_err(|e| e.to_string())?;
    // SAFETY: plain data initialised by the posix_spawn calls below, destroyed after.
    let mut actions: libc::posix_spawn_file_actions_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut attr: libc::posix_spawnattr_t = unsafe { std::mem::zeroed() };
    let mut pid: libc::pid_t = 0;
    // SAFETY: initialised structures; NUL-terminated strings and NULL-terminated arrays
    // that outlive the call; the child's default signal dispositions and an empty mask
    // (a launcher may have blocked or ignored signals the service must obey).
    let ret = unsafe {
        libc::posix_spawn_file_actions_init(&mut actions);
        libc::posix_spawnattr_init(&mut attr);
        for fd in 0..3 {
            let flags = if fd == 0 {
                libc::O_RDONLY
            } else {
                libc::O_WRONLY
            };
            libc::posix_spawn_file_actions_addopen(&mut actions, fd, null.as_ptr(), flags, 0);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::posix_spawnattr_setsigmask(&mut attr, &none);
        libc::posix_spawnattr_setsigdefault(&mut attr, &all);
        libc::posix_spawnattr_setflags(
            &mut attr,
            (libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF) as libc::c_short,
        );
        let r = libc::posix_spawn(
            &mut pid,
            argv_owned[0].as_ptr(),
            &actions,
            &attr,
            argv.as_mut_ptr(),
            envp.as_mut_ptr(),
        );
        libc::posix_spawn_file_actions_destroy(&mut actions);
        libc::posix_spawnattr_destroy(&mut attr);
        r
    };
    if ret != 0 {
        return Err(std::io::Error::from_raw_os_error(ret).to_string());
    }
    // Reaped here if it ends first (a service that found another running leaves at once).
    let _ = std::thread::Builder::new()
        .name("clshim-service-reaper".into())
        .spawn(move || {
            let mut status = 0;
            // SAFETY: this process's own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        });
    Ok(())
}
