//! `clshim warm` and `clshim run --warm`: the step that makes the driver's own binaries the
//! native store was asked for (the library's `store::warm` does the making; see
//! docs/binary-policies.md). This module owns the settings (the store and its size cap,
//! from options and the same `CLSHIM_*` variables the library reads), the idle priority
//! (SCHED_IDLE, nice 19 and the idle I/O class where the system has them, so the step only
//! takes what nothing else wants), the grouping of requests (one worker process per
//! working directory and environment, set to the request's, since a driver reads its
//! environment once: each group's pocl kernel cache is then the one its ranks filled, and
//! pocl loads its kernel library once per worker, not once per program), `--jobs` workers
//! at once, the store's size cap (only files that are whole store entries by their header
//! are ever removed), and `run --warm`, which hands the step to a background process when
//! the command ends so the job is never held. The command links neither the library nor
//! OpenCL: a worker opens the library it finds as `clshim run` does and calls
//! `clshim_warm_v4`. A worker reports each request as it goes: when its driver kills it
//! (pocl 3.1 aborts making the binary of a kernel named with 256 characters or more), the
//! command sets the request it was making aside, says so, and starts another worker for
//! the rest of the group.
//!
//! It trusts what the library trusts (`clshim_format::store::not_users_alone`): a store
//! whose folders are not the user's alone stops the step before a request is read; a
//! request file that is not the user's alone is named, left for the user and never read;
//! a worker gets only the variables a warm step sets: a request carrying any other is
//! refused whole (`Request::decode`), removed unread, and starts nothing; and a worker
//! starts only in the very folder its run used (named without a symbolic link, the user's
//! or root's), opened before the worker is started and entered by that descriptor. `run
//! --warm` makes the store the user's alone whatever the umask, and starts no step on one
//! that is not.

use crate::controls::{self, Value};
use crate::library::{absolute, cannot_run, find_library, RunError};
use clshim_format::store::{self as format, EntryHeader, Request, WarmEvent};
use std::collections::BTreeMap;
use std::ffi::{c_char, CString, OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What the step works on.
#[derive(Debug)]
pub struct Settings {
    /// None: the store is off (or no place for it could be named). Absolute.
    pub store: Option<PathBuf>,
    pub max: u64,
}

impl Settings {
    /// From `--store` (if given) and the variables as `get` finds them.
    pub fn from_lookup(store: Option<PathBuf>, get: &dyn Fn(&str) -> Option<OsString>) -> Settings {
        let store =
            store.or_else(
                || match get(controls::NATIVE_STORE.var).filter(|v| !v.is_empty()) {
                    Some(v) if v.to_string_lossy().trim().eq_ignore_ascii_case("off") => None,
                    Some(v) => Some(PathBuf::from(v)),
                    None => controls::native_store_default(get),
                },
            );
        let max = match get(controls::NATIVE_STORE_MAX.var)
            .and_then(|v| v.to_str().map(str::to_owned))
            .and_then(|v| controls::NATIVE_STORE_MAX.check(&v))
        {
            Some(Value::Size(n)) => n,
            _ => 1 << 30,
        };
        Settings {
            store: store.map(|s| absolute(&s)),
            max,
        }
    }
}

/// What the step's workers did, counted from the events they report (`WarmEvent`).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
struct WarmStats {
    made: u64,
    present: u64,
    claimed: u64,
    foreign: u64,
    failed: u64,
    stale: u64,
    uncacheable: u64,
    postponed: u64,
}

impl WarmStats {
    fn add(&mut self, o: WarmStats) {
        self.made += o.made;
        self.present += o.present;
        self.claimed += o.claimed;
        self.foreign += o.foreign;
        self.failed += o.failed;
        self.stale += o.stale;
        self.uncacheable += o.uncacheable;
        self.postponed += o.postponed;
    }

    fn count(&mut self, e: WarmEvent) {
        match e {
            WarmEvent::Begin => {}
            WarmEvent::Made => self.made += 1,
            WarmEvent::Present => self.present += 1,
            WarmEvent::Claimed => self.claimed += 1,
            WarmEvent::Foreign => self.foreign += 1,
            WarmEvent::Failed => self.failed += 1,
            WarmEvent::Stale => self.stale += 1,
            WarmEvent::Uncacheable => self.uncacheable += 1,
            WarmEvent::Postponed => self.postponed += 1,
        }
    }
}

/// What one worker's standard output says it did: the counts, and the request it had
/// begun and not finished (the one its death, if it died, is laid to).
fn read_events(stdout: &[u8]) -> (WarmStats, Option<u64>) {
    let mut stats = WarmStats::default();
    let mut in_flight = None;
    for line in String::from_utf8_lossy(stdout).lines() {
        let Some((event, key)) = WarmEvent::parse_line(line) else {
            continue;
        };
        stats.count(event);
        in_flight = (event == WarmEvent::Begin).then_some(key);
    }
    (stats, in_flight)
}

type WarmFn = unsafe extern "C" fn(*const c_char, u64, Option<Report>) -> i32;
type Report = unsafe extern "C" fn(u32, u64);

/// A worker's report of one event: a line on its standard output, for the command that
/// started it (written at once: a driver may kill the worker next).
unsafe extern "C" fn report_event(event: u32, key: u64) {
    if let Some(e) = WarmEvent::from_u32(event) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", e.line(key));
        let _ = out.flush();
    }
}

/// Lowers this process to idle priority (each part where the system has it).
fn idle_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain data; priority 0 is what SCHED_IDLE takes.
        let param: libc::sched_param = unsafe { std::mem::zeroed() };
        // SAFETY: this process, a valid policy and parameter.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        // IOPRIO_WHO_PROCESS (1), this process, IOPRIO_CLASS_IDLE (3) << 13.
        // SAFETY: the ioprio_set system call with plain integer arguments.
        unsafe { libc::syscall(libc::SYS_ioprio_set, 1, 0, 3 << 13) };
    }
    // SAFETY: this process; a lower priority is always allowed.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
}

/// This process's effective user, whose store it is.
fn me() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() }
}

/// Why a request file cannot be read.
enum Unread {
    /// Not a readable regular file, or too long: not a request, removed.
    Damaged,
    /// Not the user's alone: left for the user, with why and what to do.
    NotYours(String),
}

/// Reads a request file whole, at most `max` bytes, without following a link or blocking
/// on a FIFO, only if it is the user's alone (checked on the open file, which is what is
/// read).
fn read_request(path: &Path, max: u64) -> Result<Vec<u8>, Unread> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|_| Unread::Damaged)?;
    let m = f.metadata().map_err(|_| Unread::Damaged)?;
    if !m.is_file() || m.len() > max {
        return Err(Unread::Damaged);
    }
    if let Some(why) = format::not_users_alone(false, m.uid(), m.mode(), me()) {
        return Err(Unread::NotYours(why));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.take(max)
        .read_to_end(&mut bytes)
        .map_err(|_| Unread::Damaged)?;
    Ok(bytes)
}

/// Whether the store at `store` may be read: each of its folders that exists (the store,
/// its requests and sources) must be a folder, by its own name, that is the user's alone,
/// as the library requires. Err: which is not, why, and what to do.
pub fn check_store(store: &Path) -> Result<(), String> {
    for dir in [
        store.to_path_buf(),
        store.join(format::REQUESTS),
        store.join(format::SOURCES),
    ] {
        let m = match dir.symlink_metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        let why = if m.file_type().is_symlink() {
            Some(
                "a symbolic link: a store is opened only by its own name (name the folder it \
                 leads to)"
                    .to_string(),
            )
        } else if !m.is_dir() {
            Some("not a folder".to_string())
        } else {
            format::not_users_alone(true, m.uid(), m.mode(), me())
        };
        if let Some(why) = why {
            return Err(format!("{}: {why}", dir.display()));
        }
    }
    Ok(())
}

/// One group of requests: where and with what variables its worker runs, how many, and
/// the first one's file (to name the group by).
struct Group {
    cwd: PathBuf,
    env: Vec<(Vec<u8>, Vec<u8>)>,
    requests: usize,
    first: PathBuf,
}

/// The requests waiting in `store`, by group; damaged ones are removed and counted, those
/// that are not the user's alone are named, left and counted.
fn groups(store: &Path, failed: &mut u64) -> BTreeMap<u64, Group> {
    let dir = store.join(format::REQUESTS);
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if format::key_of_name(name, ".req").is_none() {
            continue;
        }
        let path = dir.join(name);
        let request = match read_request(&path, format::MAX_REQUEST) {
            Ok(b) => Request::decode(&b),
            Err(Unread::Damaged) => Err("not a readable regular file".to_string()),
            Err(Unread::NotYours(why)) => {
                eprintln!("clshim warm: {}: {why}", path.display());
                *failed += 1;
                continue;
            }
        };
        match request {
            Ok(r) => {
                let g = out.entry(r.group()).or_insert_with(|| Group {
                    cwd: PathBuf::from(OsString::from_vec(r.cwd.clone())),
                    env: r.env.clone(),
                    requests: 0,
                    first: path.clone(),
                });
                g.requests += 1;
            }
            Err(why) => {
                eprintln!("clshim warm: {}: {why}; removed", path.display());
                let _ = std::fs::remove_file(&path);
                *failed += 1;
            }
        }
    }
    out
}

/// The folder a worker for `g` starts in: the one its requests' runs used, opened, or why
/// no worker may start there. A run's library names it as `getcwd` gave it: absolute and
/// without a symbolic link, `.` or `..`, so a name that is not its folder's own (a link put
/// in since) or a folder of another user's (made since) is not the folder the run used;
/// root's folders are the system's. What the folder holds, the run read there too.
fn start_folder(g: &Group) -> Result<std::fs::File, String> {
    if !g.cwd.is_absolute() {
        return Err("not an absolute path: no run names its folder so".into());
    }
    let real = std::fs::canonicalize(&g.cwd).map_err(|e| e.to_string())?;
    if real != g.cwd {
        return Err(format!(
            "names {} through a symbolic link (or `.`, `..`): not the folder the run used",
            real.display()
        ));
    }
    if !real.is_dir() {
        return Err("not a directory".into());
    }
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(&g.cwd)
        .map_err(|e| e.to_string())?;
    let m = dir.metadata().map_err(|e| e.to_string())?;
    if m.uid() != me() && m.uid() != 0 {
        return Err(format!(
            "owned by uid {}, neither yours (uid {}) nor root's: a worker starts only in your \
             folders or the system's",
            m.uid(),
            me()
        ));
    }
    // What was opened is what was checked by name: a link put on the way in between would
    // show here.
    let again = std::fs::canonicalize(&g.cwd).and_then(|p| {
        let n = p.metadata()?;
        Ok((p, n))
    });
    match again {
        Ok((p, n)) if p == g.cwd && (n.dev(), n.ino()) == (m.dev(), m.ino()) => Ok(dir),
        _ => Err("changed while it was checked".into()),
    }
}

/// The environment of a worker for `g`: this process's, without any variable a request
/// carries (and without clshim in `LD_PRELOAD`, whose calls a worker makes itself), then
/// the group's; it starts in `folder` (`start_folder`), entered by its descriptor.
fn worker_command(
    me: &Path,
    store: &Path,
    lib: &Path,
    group: u64,
    g: &Group,
    folder: &std::fs::File,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(me);
    cmd.arg("warm")
        .arg("--store")
        .arg(store)
        .arg("--lib")
        .arg(lib)
        .arg("--worker-group")
        .arg(format!("{group:016x}"));
    for (k, _) in std::env::vars_os() {
        if format::replayed_variable(k.as_bytes()) {
            cmd.env_remove(&k);
        }
    }
    if let Some(preload) = std::env::var_os("LD_PRELOAD") {
        let kept: Vec<&[u8]> = preload
            .as_bytes()
            .split(|&b| b == b':' || b == b' ')
            .filter(|p| !p.is_empty())
            .filter(|p| {
                let file = p.rsplit(|&b| b == b'/').next().unwrap_or(p);
                !file.starts_with(b"libclshim")
            })
            .collect();
        cmd.env("LD_PRELOAD", OsStr::from_bytes(&kept.join(&b':')));
    }
    cmd.env_remove("OPENCL_LAYERS");
    cmd.env_remove(controls::TRACE_DIR.var);
    for (k, v) in &g.env {
        cmd.env(OsStr::from_bytes(k), OsStr::from_bytes(v));
    }
    use std::os::unix::io::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = folder.as_raw_fd();
    // SAFETY: fchdir is async-signal-safe, the only call made between fork and exec; the
    // descriptor is open in the child until its exec (the caller holds it past spawn).
    unsafe {
        cmd.pre_exec(move || match libc::fchdir(fd) {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        })
    };
    cmd.stdout(std::process::Stdio::piped());
    cmd
}

/// Removes the least recently used whole entries until the store holds at most `max`
/// bytes of them, and temporary files of clshim's own naming left over an hour ago by
/// writers that died. A file is an entry only if its name is a key and its header, read
/// without following a link, is clshim's and declares exactly its length: nothing else in
/// the folder (the user's own files, if the store was pointed at a folder of theirs) is
/// ever removed.
fn enforce_cap(store: &Path, max: u64) -> u64 {
    let mut entries = Vec::new();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    for sub in [store.to_path_buf(), store.join(format::REQUESTS)] {
        let Ok(rd) = std::fs::read_dir(&sub) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = sub.join(name);
            let Ok(m) = path.symlink_metadata() else {
                continue;
            };
            if format::is_temporary_name(name) && m.is_file() && now - m.mtime() > 3600 {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let set_aside = format::key_of_name(name, ".set-aside").is_some();
            if set_aside && m.is_file() && now - m.mtime() > format::SET_ASIDE_SECONDS {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            if sub != store || format::key_of_name(name, ".bin").is_none() || !m.is_file() {
                continue;
            }
            let mut head = [0u8; format::ENTRY_HEADER];
            let whole = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(&path)
                .and_then(|mut f| f.read_exact(&mut head))
                .ok()
                .and_then(|()| EntryHeader::parse(&head).ok())
                .is_some_and(|h| h.names_whole_file(name, m.len()));
            if whole {
                entries.push((m.mtime(), name.to_string(), m.len()));
            }
        }
    }
    entries.sort();
    let mut total: u64 = entries.iter().map(|e| e.2).sum();
    let mut evicted = 0;
    let mut kept = entries.into_iter().peekable();
    while let Some((_, name, size)) = kept.next_if(|_| total > max) {
        if std::fs::remove_file(store.join(&name)).is_ok() {
            total -= size;
            evicted += 1;
        }
    }
    // A source's mark is touched whenever one of its builds is served: a mark older than
    // every entry left stands for builds that are gone.
    let oldest = kept.peek().map_or(i64::MAX, |e| e.0);
    if let Ok(rd) = std::fs::read_dir(store.join(format::SOURCES)) {
        for e in rd.flatten() {
            let path = e.path();
            let name = e.file_name();
            let ours = name
                .to_str()
                .is_some_and(|n| format::key_of_name(n, "").is_some());
            let stale = path
                .symlink_metadata()
                .is_ok_and(|m| m.is_file() && m.mtime() < oldest);
            if ours && stale {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    evicted
}

/// A worker: the library's step for one group, in this process (whose directory and
/// environment the command set). Prints each request's events on standard output.
fn worker(lib: &Path, store: &Path, group: u64) -> i32 {
    idle_priority();
    // A driver that crashes on a request kills the worker: no core file in the
    // application's directory for it (the command says which request did it).
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a plain value for this process's own limit.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
    let Ok(path) = CString::new(lib.as_os_str().as_bytes()) else {
        eprintln!("clshim warm: the library path holds a NUL byte");
        return 1;
    };
    // SAFETY: a NUL-terminated path; the library does nothing when opened (no
    // constructor) and stays open for the process.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        eprintln!("clshim warm: cannot open {}", lib.display());
        return 1;
    }
    // SAFETY: an open handle and a NUL-terminated name.
    let f = unsafe { libc::dlsym(handle, b"clshim_warm_v4\0".as_ptr() as *const c_char) };
    if f.is_null() {
        eprintln!(
            "clshim warm: {} has no warm step of this version (another clshim library?)",
            lib.display()
        );
        return 1;
    }
    // SAFETY: the library's clshim_warm_v4, of this type (src/store/warm.rs).
    let warm: WarmFn = unsafe { std::mem::transmute::<*mut libc::c_void, WarmFn>(f) };
    let Ok(store_c) = CString::new(store.as_os_str().as_bytes()) else {
        eprintln!("clshim warm: the store path holds a NUL byte");
        return 1;
    };
    // SAFETY: a NUL-terminated path and a report function callable from any thread.
    unsafe { warm(store_c.as_ptr(), group, Some(report_event)) }
}

/// Why a store held nothing to make, in words for the user.
fn nothing_to_make(store: &Path) -> String {
    let entries = std::fs::read_dir(store)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| format::key_of_name(n, ".bin").is_some())
                })
                .count()
        })
        .unwrap_or(0);
    format!(
        "clshim warm: {}: no requests, nothing to make ({entries} entries held). Requests are \
         left by runs with CLSHIM_WARM=1 (clshim run --warm) for builds the store lacks: \
         under --binaries substitute when the application asks for binaries, and with \
         --program-cache for source builds. pyopencl 2024.2.3 and later asks pocl for no \
         binaries: give it --program-cache.",
        store.display()
    )
}

/// How many requests one step sets aside (each after a worker's crash) before it stops.
const MAX_SET_ASIDE: usize = 64;

/// Signals a crash raises, as opposed to one a person or the system sends.
const CRASH_SIGNALS: [(i32, &str); 6] = [
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
];

enum Finished {
    Done,
    /// The worker could not run, or was stopped from outside; the step fails.
    Failed,
    /// The driver crashed the worker on a request, which is set aside: the group goes
    /// again for the rest.
    SetAside,
}

/// Waits for a worker and counts what it reports. When its driver crashed it while it
/// made a request, that request is set aside: removed with its claim, and marked so that
/// no process leaves it again for a week (`format::set_aside_name`), since every warm step
/// would crash on it again.
fn finish(child: std::process::Child, store: &Path, g: &Group, total: &mut WarmStats) -> Finished {
    use std::os::unix::process::ExitStatusExt;
    let out = match child.wait_with_output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("clshim warm: lost a worker: {e}");
            return Finished::Failed;
        }
    };
    let (stats, in_flight) = read_events(&out.stdout);
    total.add(stats);
    if out.status.success() {
        return Finished::Done;
    }
    let crash = out
        .status
        .signal()
        .and_then(|sig| CRASH_SIGNALS.iter().find(|(s, _)| *s == sig));
    match (crash, in_flight) {
        (Some((_, name)), Some(key)) => {
            let dir = store.join(format::REQUESTS);
            let _ = std::fs::remove_file(dir.join(format::request_name(key)));
            let _ = std::fs::remove_file(dir.join(format!("{key:016x}.claim")));
            let marked = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(dir.join(format::set_aside_name(key)));
            eprintln!(
                "clshim warm: the driver crashed ({name}) making request {key:016x} (from {}): \
                 set aside{}; the rest of its group goes on",
                g.cwd.display(),
                if marked.is_ok() {
                    ", and not asked for again for a week"
                } else {
                    ""
                }
            );
            total.failed += 1;
            Finished::SetAside
        }
        _ => {
            let how = match out.status.signal() {
                Some(sig) => format!("killed by signal {sig}"),
                None => format!("exit status {}", out.status.code().unwrap_or(-1)),
            };
            eprintln!(
                "clshim warm: the worker for {} requests in {} ended ({how})",
                g.requests,
                g.cwd.display()
            );
            Finished::Failed
        }
    }
}

/// `clshim warm`. Returns the exit status: 0 done (a request that failed is reported, not
/// fatal), 1 the step could not run.
pub fn warm_main(o: crate::cli::WarmOpts) -> i32 {
    let lib = match find_library(o.lib.as_deref(), std::env::var_os("CLSHIM_LIB")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("clshim: {}", e.message);
            return e.status;
        }
    };
    let s = Settings::from_lookup(o.store, &|n| std::env::var_os(n));
    let Some(store) = &s.store else {
        eprintln!("clshim warm: the native store is off (CLSHIM_NATIVE_STORE=off); nothing to do");
        return 0;
    };
    if let Some(group) = o.worker_group {
        return worker(&lib, store, group);
    }
    if let Err(why) = check_store(store) {
        eprintln!("clshim warm: {why}");
        return 1;
    }
    idle_priority();
    let mut total = WarmStats::default();
    let groups = groups(store, &mut total.failed);
    let waiting: usize = groups.values().map(|g| g.requests).sum();
    let me = match std::env::current_exe() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("clshim warm: cannot find this executable: {e}");
            return 1;
        }
    };
    let mut status = 0;
    let mut queue: Vec<(u64, Group)> = groups.into_iter().collect();
    let mut running: Vec<(std::process::Child, u64, Group)> = Vec::new();
    let mut set_aside = 0;
    while !queue.is_empty() || !running.is_empty() {
        while running.len() < o.jobs {
            let Some((group, g)) = queue.pop() else { break };
            let folder = match start_folder(&g) {
                Ok(f) => f,
                Err(why) => {
                    eprintln!(
                        "clshim warm: {}: no worker starts there: {why}. {} requests of runs \
                         there wait ({} and the like): remove them if that folder is not the \
                         runs' any more",
                        g.cwd.display(),
                        g.requests,
                        g.first.display()
                    );
                    status = 1;
                    continue;
                }
            };
            match worker_command(&me, store, &lib, group, &g, &folder).spawn() {
                Ok(c) => running.push((c, group, g)),
                Err(e) => {
                    eprintln!(
                        "clshim warm: {} requests in {}: cannot start a worker there: {e}",
                        g.requests,
                        g.cwd.display()
                    );
                    status = 1;
                }
            }
        }
        if running.is_empty() {
            break;
        }
        let (child, group, g) = running.remove(0);
        match finish(child, store, &g, &mut total) {
            Finished::Done => {}
            Finished::Failed => status = 1,
            // Each new worker has one request fewer to crash on, so this ends; the bound
            // only caps the time a driver that crashes on everything can take.
            Finished::SetAside if set_aside < MAX_SET_ASIDE => {
                set_aside += 1;
                queue.push((group, g));
            }
            Finished::SetAside => {
                eprintln!(
                    "clshim warm: {MAX_SET_ASIDE} requests crashed their workers: the rest of \
                     {} waits for the next warm step",
                    g.cwd.display()
                );
                status = 1;
            }
        }
    }
    let evicted = enforce_cap(store, s.max);
    if waiting == 0 && total.failed == 0 {
        eprintln!("{}", nothing_to_make(store));
    }
    eprintln!(
        "clshim warm: {}: {} made, {} present, {} not kept (the reasons above), {} left for a \
         later step, {} claimed by another process, {} for devices or driver builds this host \
         does not have, {} stale, {} failed, {} evicted",
        store.display(),
        total.made,
        total.present,
        total.uncacheable,
        total.postponed,
        total.claimed,
        total.foreign,
        total.stale,
        total.failed,
        evicted
    );
    if total.foreign > 0 {
        eprintln!(
            "clshim warm: the {} requests for other devices or driver builds wait (for a week) \
             for a warm step on a host that has them",
            total.foreign
        );
    }
    status
}

/// The child `run --warm` waits for, for the signal handler to pass signals on to.
static CHILD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Passes a signal on to the child when another process sent it to clshim alone (`kill
/// PID`: SI_USER or SI_QUEUE). A signal from the terminal (^C, a hangup: SI_KERNEL)
/// already reached the child, which is in clshim's process group, and is not sent twice.
extern "C" fn pass_on(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel's description of the signal, valid in its handler.
    let code = unsafe { info.as_ref() }.map_or(libc::SI_USER, |i| i.si_code);
    let child = CHILD.load(std::sync::atomic::Ordering::Relaxed);
    if child > 0 && (code == libc::SI_USER || code == libc::SI_QUEUE) {
        // SAFETY: kill is async-signal-safe; the child is clshim's own.
        unsafe { libc::kill(child, sig) };
    }
}

/// Starts `clshim warm` on `store` in the background, detached (a session of its own, at
/// idle priority, writing to `store/warm.log`), and returns its pid; Err: why not. The
/// store (and each folder made for it) is made the user's alone, as the library makes
/// it, whatever the umask: the library would refuse one that its group may write.
fn warm_in_background(lib: &Path, store: &Path) -> Result<u32, String> {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    if let Err(e) = crate::store::folders::make_private(store) {
        return Err(format!("{}: {e}", store.display()));
    }
    check_store(store)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(store.join("warm.log"))
        .ok();
    let mut cmd = std::process::Command::new(me);
    cmd.arg("warm")
        .arg("--store")
        .arg(store)
        .arg("--lib")
        .arg(lib);
    cmd.stdin(std::process::Stdio::null());
    match log
        .as_ref()
        .and_then(|f| Some((f.try_clone().ok()?, f.try_clone().ok()?)))
    {
        Some((out, err)) => {
            cmd.stdout(out).stderr(err);
        }
        None => {
            cmd.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
        }
    }
    // SAFETY: setsid is async-signal-safe, the only call made between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    };
    // The step's process outlives this one (it is reparented when clshim exits); its
    // status is the log's to tell.
    cmd.spawn()
        .map(|c| c.id())
        .map_err(|e| format!("cannot start it: {e}"))
}

/// `clshim run --warm`: runs `cmd` as a child, waits for it (passing on SIGTERM, SIGHUP,
/// SIGINT and SIGQUIT that another process sends to clshim), starts the warm step in the
/// background, then exits with the child's status (128 + the signal when a signal ended
/// it, as a shell reports it) without waiting for the step.
pub fn run_then_warm(
    mut cmd: std::process::Command,
    program: &OsStr,
    lib: &Path,
    settings: Settings,
) -> Result<std::convert::Infallible, RunError> {
    let signals = [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT];
    // The signals are held back from before the child starts until clshim's handlers are
    // in place, so one that arrives in between is passed on, not lost (or fatal to
    // clshim). The child starts with an empty signal mask (std's spawn resets it).
    // SAFETY: plain data for the signal set calls.
    let mut held: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `held` is a valid set; only this thread's mask changes.
    unsafe {
        libc::sigemptyset(&mut held);
        for sig in signals {
            libc::sigaddset(&mut held, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &held, std::ptr::null_mut());
    }
    let spawned = cmd.spawn();
    if let Ok(c) = &spawned {
        CHILD.store(c.id() as i32, std::sync::atomic::Ordering::Relaxed);
        for sig in signals {
            // SAFETY: plain data for sigaction.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = pass_on as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            // SAFETY: installing a handler that only calls kill (async-signal-safe); the
            // child already has its own dispositions (restored at its exec by
            // `inherited_signals`).
            unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) };
        }
    }
    // SAFETY: unblocking what was blocked above; a pending signal is handled now.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &held, std::ptr::null_mut()) };
    let mut child = spawned.map_err(|e| cannot_run(program, &e))?;
    let status = child.wait();
    let code = match status {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
        }
        Err(_) => 1,
    };
    if let Some(store) = &settings.store {
        match warm_in_background(lib, store) {
            Ok(pid) => eprintln!(
                "clshim: the warm step goes on in the background at idle priority (pid {pid}; \
                 log {})",
                store.join("warm.log").display()
            ),
            Err(why) => eprintln!("clshim: could not start the warm step: {why}"),
        }
    }
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_count_and_name_the_request_in_flight() {
        let line = |e: WarmEvent, k| e.line(k) + "\n";
        let out = [
            line(WarmEvent::Claimed, 1),
            line(WarmEvent::Begin, 2),
            line(WarmEvent::Made, 2),
            "pocl: some text of the driver's\n".to_string(),
            line(WarmEvent::Begin, 3),
            line(WarmEvent::Failed, 3),
            line(WarmEvent::Begin, 4),
        ]
        .concat();
        let (stats, in_flight) = read_events(out.as_bytes());
        assert_eq!(
            stats,
            WarmStats {
                made: 1,
                claimed: 1,
                failed: 1,
                ..WarmStats::default()
            }
        );
        assert_eq!(in_flight, Some(4));
        let (_, done) = read_events(line(WarmEvent::Begin, 5).replace("\n", "").as_bytes());
        assert_eq!(
            done,
            Some(5),
            "a last line cut short of its newline still counts"
        );
        let (_, none) = read_events(b"");
        assert_eq!(none, None);
    }
}
