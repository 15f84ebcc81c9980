//! The node's warm service (`CLSHIM_WARM_SERVICE`, on by default), started on demand: a
//! process that leaves a request for the driver's binary of a build (`requests`: a clshim
//! binary it handed out under `substitute`, or loaded where the store lacked the driver's
//! binary) makes sure one `clshim warm --service` runs for its store on this node, as
//! sccache's client starts its local server. The service makes the requests at idle
//! priority (`SCHED_IDLE`: only on cores nothing else wants), each in a worker of its own,
//! never in the application: pocl's generic compile holds its process-wide locks for the
//! whole compile. It ends as soon as no process that left a request is alive, so nothing
//! of clshim's outlives the job, and a request being made when it ended is taken over by
//! the next step (its claim's holder is gone).
//!
//! A process that left requests waits at its exit until the service has made them, so that
//! the job ends with the driver's binaries of everything it handed out and every later
//! load is the driver's own: the generic compiles the application asked for are paid once,
//! on the cores the job leaves idle while it runs and on those its processes free as they
//! end, never while the application waits for its binaries. The wait is bounded by what
//! the process compiled itself (three times its own build and first-launch seconds, ten
//! seconds at least) and ends at once when no service runs: a node so busy that the
//! service starves leaves the rest to the next job's service, or `clshim warm`, and the
//! exit line says how many. A process killed (a scheduler's SIGTERM) does not wait, nor
//! does one that exits from its own handler of such a signal.
//!
//! This module owns only the client's side: holding the clients' lock (shared) for the
//! process's life, starting the service when none holds the service lock, and what became
//! of this process's requests at its exit. The service is the `clshim` command beside this library, started with `posix_spawn` (no copy of the
//! application's memory), its standard streams on `/dev/null` (a launcher that forwards
//! the ranks' output must not wait for it), without clshim in its preload list; its first
//! process ends at once, the service going on in a child of its own (no child of the
//! application's), and a thread of this process reaps that first one. The lock names are
//! `clshim_format::store::warm_lock_names`'s.

use crate::lock::Lock;
use std::ffi::{c_char, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, IntoRawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The stores this process holds the clients' lock of, and the temporary folder their
/// locks are in: `TMPDIR` when it became a client (the service's, which it started with
/// this environment), whatever the application sets later.
static CLIENT_OF: Lock<Vec<(PathBuf, PathBuf)>> = Lock::new(Vec::new());

/// A request this process left.
#[derive(Clone)]
struct Left {
    store: PathBuf,
    key: u64,
    /// The process that left it (a forked child inherits the list, not the requests).
    pid: u32,
    /// The entry the store held for its key then, if any: one whose compile read other
    /// files than this build would (a header edited since), which the request is for
    /// making again. Only another file is what the service made.
    found: Option<FileId>,
}

/// Which file an entry is (device, inode, modification time), not what it holds: a
/// warm step writes a new entry under a temporary name and renames it into place.
type FileId = (u64, u64, i64);

fn file_id(m: &std::fs::Metadata) -> FileId {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino(), m.mtime() * 1_000_000_000 + m.mtime_nsec())
}

/// The requests this process left.
static LEFT: Lock<Vec<Left>> = Lock::new(Vec::new());

/// Notes a request this process left.
pub fn left(store: &Path, key: u64) {
    let pid = std::process::id();
    let found = std::fs::metadata(store.join(clshim_format::store::entry_name(key)))
        .ok()
        .map(|m| file_id(&m));
    let mut left = LEFT.lock();
    if !left
        .iter()
        .any(|l| l.store == store && l.key == key && l.pid == pid)
    {
        left.push(Left {
            store: store.to_path_buf(),
            key,
            pid,
            found,
        });
    }
}

/// What became of the requests this process left, at its exit.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AtExit {
    pub left: u64,
    /// Whether a service was asked for (`CLSHIM_WARM_SERVICE`): else the requests wait for
    /// `clshim warm`.
    pub service: bool,
    /// Made by now: the store holds the driver's binary.
    pub made: u64,
    /// Seconds this process waited at its exit for the service.
    pub waited: f64,
    /// Why the wait ended before every request was made, if it did.
    pub cut_short: Option<CutShort>,
}

/// Why a process stopped waiting for the service with requests left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CutShort {
    /// It waited as long as its bound allows.
    Bound,
    /// No service ran (none could start, or it ended).
    NoService,
    /// The process exits with a signal that ends jobs blocked (from a handler of one,
    /// say): it did not wait.
    Signal,
}

/// The least a process waits for the service at its exit, and how many times its own
/// compile seconds it waits at most: the service's generic compile of a program costs
/// about what the program's build and first launches cost the process.
const WAIT_AT_LEAST: Duration = Duration::from_secs(10);
const WAIT_TIMES_OWN_COMPILES: f64 = 3.0;
/// The most any process waits, whatever its compile seconds say: they count first launches
/// from enqueue to completion, kernel runs and queueing included, which a long first kernel
/// can make hours where the service starves on a busy node.
const WAIT_AT_MOST: Duration = Duration::from_secs(300);

/// How many requests this process left and how many have an entry by now, after waiting
/// for the service (`service`: whether one was asked for) to make them, at most the
/// bound `compiled` (this process's own compile seconds) gives. None when this process
/// left none.
pub fn at_exit(service: bool, compiled: f64) -> Option<AtExit> {
    let pid = std::process::id();
    // An exit path: the list may be held for good (by the thread a signal handler that
    // calls exit() interrupted, or in a child forked while another thread held it).
    let left: Vec<Left> = LEFT
        .try_lock_for(Duration::from_millis(200))?
        .iter()
        .filter(|l| l.pid == pid)
        .cloned()
        .collect();
    if left.is_empty() {
        return None;
    }
    let clock = Instant::now();
    let bound = WAIT_AT_LEAST.max(Duration::from_secs_f64(
        (compiled * WAIT_TIMES_OWN_COMPILES).clamp(0.0, WAIT_AT_MOST.as_secs_f64()),
    ));
    let mut cut_short = None;
    if service && ending_on_a_signal() {
        cut_short = Some(CutShort::Signal);
    } else if service {
        // A service started a moment ago may not hold its lock yet: it must be seen absent
        // for a while before the wait ends for want of one.
        let mut absent_since: Option<Instant> = None;
        loop {
            if left.iter().all(settled) {
                break;
            }
            if left.iter().any(|l| service_runs(&l.store)) {
                absent_since = None;
            } else if absent_since.get_or_insert_with(Instant::now).elapsed() >= SERVICE_START {
                cut_short = Some(CutShort::NoService);
                break;
            }
            if clock.elapsed() >= bound {
                cut_short = Some(CutShort::Bound);
                break;
            }
            std::thread::sleep(WAIT_TICK);
        }
    }
    let made = left.iter().filter(|l| holds_binary(l)).count() as u64;
    Some(AtExit {
        left: left.len() as u64,
        service,
        made,
        waited: if service {
            clock.elapsed().as_secs_f64()
        } else {
            0.0
        },
        cut_short: cut_short.filter(|_| made < left.len() as u64),
    })
}

/// The signals schedulers and launchers end jobs with (SIGTERM, then SIGKILL seconds
/// later; SIGINT, SIGHUP; the warnings SIGUSR1 and SIGUSR2; SIGXCPU at a CPU limit).
const ENDING: [libc::c_int; 7] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGXCPU,
];

/// Whether this thread exits from a handler of a signal that ends jobs (a handler that
/// calls exit(), as many do to flush what they hold): the signal it handles is blocked
/// while it runs, as is one a thread that waits for signals (`sigwait`) handles. Such a
/// process has seconds before SIGKILL, and its own exit handlers, which run after
/// clshim's, need them: it does not wait for the service.
fn ending_on_a_signal() -> bool {
    // SAFETY: plain data filled by pthread_sigmask, which only reads this thread's mask.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) } != 0 {
        return false;
    }
    // SAFETY: a filled set and valid signal numbers.
    ENDING
        .iter()
        .any(|&sig| unsafe { libc::sigismember(&mask, sig) } == 1)
}

/// How often a process waiting at its exit looks at the store.
const WAIT_TICK: Duration = Duration::from_millis(20);
/// How long a service that was asked for may take to start (to hold its lock).
const SERVICE_START: Duration = Duration::from_secs(1);

/// Whether the request is done with: it has gone, and an entry for its key exists
/// (another than the one it was left beside) or no claim is on it (a step found it
/// stale, or made nothing of it). Not before the request has gone: the worker removes it
/// just after writing the entry, and a process that ended at the entry ended its job's
/// service, which ends its workers, sometimes between the two, leaving a request whose
/// entry is made for no later process to start a service for.
fn settled(l: &Left) -> bool {
    use clshim_format::store as f;
    let requests = l.store.join(f::REQUESTS);
    !requests.join(f::request_name(l.key)).exists()
        && (std::fs::metadata(l.store.join(f::entry_name(l.key)))
            .is_ok_and(|m| Some(file_id(&m)) != l.found)
            || !requests.join(f::claim_name(l.key)).exists())
}

/// Whether the store's entry for the request's key holds the driver's binary (not an
/// entry that says why the build cannot be kept), and is not the one the request was
/// left beside: its header, read alone.
fn holds_binary(l: &Left) -> bool {
    use clshim_format::store as f;
    use std::io::Read;
    let mut header = [0u8; f::ENTRY_HEADER];
    std::fs::File::open(l.store.join(f::entry_name(l.key)))
        .and_then(|mut file| {
            if Some(file_id(&file.metadata()?)) == l.found {
                return Err(std::io::ErrorKind::AlreadyExists.into());
            }
            file.read_exact(&mut header)
        })
        .ok()
        .and_then(|()| f::EntryHeader::parse(&header).ok())
        .is_some_and(|h| h.flags & f::UNCACHEABLE == 0)
}

/// Whether a warm step or service holds this host's lock on `store`. Only a lock file
/// [`open_lock`] takes counts: one that is not the user's alone is no service's (`ensure`
/// starts none beside it), and anyone who can open it can hold it locked.
fn service_runs(store: &Path) -> bool {
    // SAFETY: no arguments.
    let uid = unsafe { libc::geteuid() };
    let (service, _) = clshim_format::store::warm_lock_names(uid, store);
    // An exit path: see `at_exit` on the lists' locks.
    let tmp = CLIENT_OF
        .try_lock_for(Duration::from_millis(200))
        .and_then(|c| c.iter().find(|(s, _)| s == store).map(|(_, t)| t.clone()))
        .unwrap_or_else(std::env::temp_dir);
    let Some(f) = open_lock(&tmp, &service, false) else {
        return false;
    };
    // SAFETY: an open descriptor of this process; a lock taken here is let go when `f`
    // closes.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) != 0 }
}

/// Opens (making it if need be, with `create`) the lock file `name` in the temporary
/// folder `tmp`: the user's own regular file only, that no one else may write.
fn open_lock(tmp: &Path, name: &str, create: bool) -> Option<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(tmp.join(name))
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
    let mut mine = CLIENT_OF.lock();
    if mine.iter().any(|(s, _)| s == store) {
        return;
    }
    // SAFETY: no arguments.
    let uid = unsafe { libc::geteuid() };
    let (service, clients) = clshim_format::store::warm_lock_names(uid, store);
    let tmp = std::env::temp_dir();
    let Some(client) = open_lock(&tmp, &clients, true) else {
        return;
    };
    // SAFETY: an open descriptor of this process.
    if unsafe { libc::flock(client.as_raw_fd(), libc::LOCK_SH) } != 0 {
        return;
    }
    // Held until this process ends (the descriptor is never closed).
    let _ = client.into_raw_fd();
    mine.push((store.to_path_buf(), tmp.clone()));
    drop(mine);
    let Some(lock) = open_lock(&tmp, &service, true) else {
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
    // Reaped here: it ends at once, the service going on in a child of its own (no child
    // of this process's, which an application's `wait` for every child would wait for).
    let _ = std::thread::Builder::new()
        .name("clshim-service-reaper".into())
        .spawn(move || {
            let mut status = 0;
            // SAFETY: this process's own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit wait never waits for the list of requests: a thread that a signal handler
    /// calling exit() interrupted while it noted a request holds it, as does a thread of
    /// the parent that noted one at the instant of a fork (in the child, for good).
    #[test]
    fn the_exit_wait_does_not_hang_on_the_list_of_requests_held() {
        left(Path::new("/nonexistent/clshim-store"), 1);
        let held = LEFT.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(at_exit(false, 0.0).is_some());
        });
        let answered = rx.recv_timeout(Duration::from_secs(5));
        drop(held);
        assert!(answered.is_ok(), "at_exit waited for the list's lock");
    }
}
