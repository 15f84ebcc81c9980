//! A warm step's workers: how one is started (a copy of this command, `--worker-group`, in
//! its group's folder, with exactly its group's variables), what it does (opens the
//! library it was given and calls `clshim_warm_v4`, which forks the tracer that watches
//! its compiles), and how the step watches them all: every worker reports each request as
//! it goes (one line per event on its standard output, written at once, so a worker its
//! driver kills loses no count and names the request it was making), and the step
//! - renews the claim of each request a worker makes, every `RENEW_SECONDS` (the claim is
//!   a lease: a step killed with its job stops renewing, and after a minute any host's
//!   step takes the request over);
//! - kills a worker whose request takes longer than the step's time limit (a build that
//!   blocks on a FIFO header, or a driver that hangs), sets that request aside and names
//!   it, and starts another worker for the rest of the group;
//! - sets aside a request whose driver crashed the worker (pocl 3.1 aborts making the
//!   binary of a kernel named with 256 characters or more), likewise;
//! - prints what the driver itself writes on the worker's standard error as the driver's,
//!   not as clshim's (glibc names an assertion's program: the worker is `clshim`).
//!
//! Several workers may serve one group (one per CPU of the step, as the group's requests
//! allow): they split its requests by their claims.

use clshim_format::store::{self as format, WarmEvent};
use std::collections::HashMap;
use std::ffi::{c_char, CString, OsStr};
use std::io::BufRead;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the step's workers did, counted from the events they report (`WarmEvent`): each
/// request once, by its last event (a request one worker found claimed by a sibling that
/// made it counts as made).
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmStats {
    pub made: u64,
    pub present: u64,
    pub claimed: u64,
    pub foreign: u64,
    pub failed: u64,
    pub stale: u64,
    pub uncacheable: u64,
    pub postponed: u64,
}

impl WarmStats {
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

    /// The counts of the last event of each request, `outcomes` in the order reported.
    pub fn of(outcomes: &HashMap<u64, WarmEvent>) -> WarmStats {
        let mut s = WarmStats::default();
        for e in outcomes.values() {
            s.count(*e);
        }
        s
    }
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

/// A worker: the library's step for one group, in this process (whose directory and
/// environment the command set). Prints each request's events on standard output.
pub fn worker(lib: &Path, store: &Path, group: u64) -> i32 {
    // It ends with the step or service that started it: see `worker_command`.
    // Its priority is its step's, inherited: idle for `clshim warm`, the lowest of its
    // job's for the service.
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

/// The command line of a worker for `group` of `g` (in `folder`, entered by descriptor):
/// this process's environment, without any variable a request carries (and without
/// clshim in `LD_PRELOAD`, whose calls a worker makes itself), then the group's. It stays
/// in the step's process group, so that whatever ends the step's group (a batch scheduler
/// at a job's end) ends it too; the step ends a worker alone by killing the worker's
/// tracer, whose death kills every process it traces (`PTRACE_O_EXITKILL`).
pub fn worker_command(
    me: &Path,
    store: &Path,
    lib: &Path,
    group: u64,
    env: &[(Vec<u8>, Vec<u8>)],
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
    cmd.env_remove(crate::controls::TRACE_DIR.var);
    for (k, v) in env {
        cmd.env(OsStr::from_bytes(k), OsStr::from_bytes(v));
    }
    use std::os::unix::io::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = folder.as_raw_fd();
    // SAFETY: a plain request about this process.
    let starter = unsafe { libc::getpid() };
    // A worker ends with the step or service that started it (a service ends its workers
    // when its job's last process has gone; one killed outright takes them with it). The
    // request is made before the exec, and a starter already gone fails the start: asked
    // later, a worker whose starter died first would run on, adopted, holding its lock.
    // SAFETY: prctl, getppid and fchdir are async-signal-safe, the only calls made between
    // fork and exec; the descriptor is open in the child until its exec (the caller holds
    // it past spawn).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != starter
            {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            match libc::fchdir(fd) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        })
    };
    cmd.stdout(std::process::Stdio::piped());
    cmd.stderr(std::process::Stdio::piped());
    cmd
}

/// Signals a crash raises, as opposed to one a person or the system sends.
const CRASH_SIGNALS: [(i32, &str); 6] = [
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
];

/// How a worker ended.
pub enum Ended {
    /// Its group is done.
    Done,
    /// It could not run, or was stopped from outside; the step fails.
    Failed(String),
    /// Its request `key` was set aside (`why`): the group goes again for the rest.
    SetAside { key: u64, why: String },
}

/// What the step's loop hears from its workers' reader threads.
enum Heard {
    Event(usize, WarmEvent, u64),
    Closed(usize),
}

/// One running worker.
struct Running {
    child: std::process::Child,
    group: u64,
    /// The request it makes now, and since when.
    in_flight: Option<(u64, Instant)>,
    /// Its standard output closed (it exited, or is about to).
    closed: bool,
    /// The step ended it for taking too long on `in_flight`.
    timed_out: bool,
}

/// The step's workers, at most `jobs` at once.
pub struct Workers {
    store: PathBuf,
    jobs: usize,
    timeout: Duration,
    running: HashMap<usize, Running>,
    next_id: usize,
    tx: mpsc::Sender<Heard>,
    rx: mpsc::Receiver<Heard>,
    /// The last event of each request, for the step's counts.
    pub outcomes: HashMap<u64, WarmEvent>,
    last_renewal: Instant,
    /// How long a step waits for the workers' reports.
    pub tick: Duration,
}

impl Workers {
    pub fn new(store: &Path, jobs: usize, timeout: Duration) -> Workers {
        let (tx, rx) = mpsc::channel();
        Workers {
            store: store.to_path_buf(),
            jobs: jobs.max(1),
            timeout,
            running: HashMap::new(),
            next_id: 0,
            tx,
            rx,
            outcomes: HashMap::new(),
            last_renewal: Instant::now(),
            tick: Duration::from_secs(1),
        }
    }

    pub fn has_room(&self) -> bool {
        self.running.len() < self.jobs
    }

    /// How many more workers may run now.
    pub fn room(&self) -> usize {
        self.jobs.saturating_sub(self.running.len())
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Starts `cmd` as a worker of `group`.
    pub fn start(&mut self, mut cmd: std::process::Command, group: u64) -> std::io::Result<()> {
        let mut child = cmd.spawn()?;
        let id = self.next_id;
        self.next_id += 1;
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out)
                .split(b'\n')
                .map_while(Result::ok)
            {
                if let Some((e, key)) = WarmEvent::parse_line(&String::from_utf8_lossy(&line)) {
                    let _ = tx.send(Heard::Event(id, e, key));
                }
            }
            let _ = tx.send(Heard::Closed(id));
        });
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(err)
                .split(b'\n')
                .map_while(Result::ok)
            {
                let line = String::from_utf8_lossy(&line);
                if line.starts_with("clshim warm: ") || line.starts_with("clshim: ") {
                    eprintln!("{line}");
                } else if !line.trim().is_empty() {
                    // The driver's own words (pocl's warnings, an assertion glibc names
                    // as the worker's program, `clshim`).
                    eprintln!("clshim warm: the driver said: {line}");
                }
            }
        });
        self.running.insert(
            id,
            Running {
                child,
                group,
                in_flight: None,
                closed: false,
                timed_out: false,
            },
        );
        Ok(())
    }

    /// Ends every worker now (the service's clients are gone): a request being made is
    /// left with its claim, which the next warm step takes over (its holder is gone).
    pub fn end_all(&mut self) {
        let ended = !self.running.is_empty();
        for (_, mut r) in self.running.drain() {
            // The worker's tracer: its death takes the worker and its driver's programs.
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
        if ended {
            remove_orphaned_folders();
        }
    }

    /// Waits (at most a tick) for what the workers report, renews the claims of the
    /// requests they make, ends a worker past the time limit, and returns the workers that
    /// ended, with their group and how.
    pub fn step(&mut self) -> Vec<(u64, Ended)> {
        if let Ok(h) = self.rx.recv_timeout(self.tick) {
            self.hear(h);
            while let Ok(h) = self.rx.try_recv() {
                self.hear(h);
            }
        }
        if self.last_renewal.elapsed() >= Duration::from_secs(format::RENEW_SECONDS) {
            self.renew();
            self.last_renewal = Instant::now();
        }
        for r in self.running.values_mut() {
            let late = r
                .in_flight
                .is_some_and(|(_, since)| since.elapsed() > self.timeout);
            if late && !r.timed_out {
                r.timed_out = true;
                // The worker's tracer: its death takes the worker and any program its
                // driver started with it.
                let _ = r.child.kill();
            }
        }
        let mut ended = Vec::new();
        let ids: Vec<usize> = self.running.keys().copied().collect();
        for id in ids {
            let r = self.running.get_mut(&id).expect("listed");
            let Ok(Some(status)) = r.child.try_wait() else {
                continue;
            };
            // What it wrote before it ended is heard before it is judged.
            if !r.closed {
                while let Ok(h) = self.rx.recv_timeout(Duration::from_millis(200)) {
                    let last = matches!(h, Heard::Closed(i) if i == id);
                    self.hear(h);
                    if last {
                        break;
                    }
                }
            }
            let r = self.running.remove(&id).expect("listed");
            ended.push((r.group, self.judge(&r, status)));
        }
        ended
    }

    fn hear(&mut self, h: Heard) {
        match h {
            Heard::Event(id, e, key) => {
                if let Some(r) = self.running.get_mut(&id) {
                    r.in_flight = (e == WarmEvent::Begin).then(|| (key, Instant::now()));
                }
                if e != WarmEvent::Begin {
                    // What a worker that came second saw (a sibling's claim, the entry the
                    // sibling made) is no outcome of a request that has one already.
                    let second = matches!(e, WarmEvent::Claimed | WarmEvent::Present);
                    if !(second && self.outcomes.contains_key(&key)) {
                        self.outcomes.insert(key, e);
                    }
                }
            }
            Heard::Closed(id) => {
                if let Some(r) = self.running.get_mut(&id) {
                    r.closed = true;
                }
            }
        }
    }

    /// Renews the lease of every request a worker makes now (its claim's time, on the
    /// store's clock).
    fn renew(&self) {
        let dir = self.store.join(format::REQUESTS);
        for r in self.running.values() {
            if let Some((key, _)) = r.in_flight {
                let Ok(c) = CString::new(dir.join(format::claim_name(key)).as_os_str().as_bytes())
                else {
                    continue;
                };
                // SAFETY: a valid name; NULL times mean now (the filesystem's clock);
                // a link is not followed.
                unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        std::ptr::null(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
            }
        }
    }

    fn judge(&mut self, r: &Running, status: std::process::ExitStatus) -> Ended {
        use std::os::unix::process::ExitStatusExt;
        if status.success() {
            return Ended::Done;
        }
        let crash = status
            .signal()
            .and_then(|sig| CRASH_SIGNALS.iter().find(|(s, _)| *s == sig));
        match (r.timed_out, crash, r.in_flight) {
            (true, _, Some((key, _))) => Ended::SetAside {
                key,
                why: format!(
                    "making it took longer than the limit of {} s (--timeout)",
                    self.timeout.as_secs()
                ),
            },
            (false, Some((_, name)), Some((key, _))) => Ended::SetAside {
                key,
                why: format!("the driver crashed ({name}) making it"),
            },
            _ => Ended::Failed(match status.signal() {
                Some(sig) => format!("killed by signal {sig}"),
                None => format!("exit status {}", status.code().unwrap_or(-1)),
            }),
        }
    }

    /// Sets the request `key` aside: removed with its claim, and marked so that no process
    /// leaves it again for a week (`format::set_aside_name`), since every warm step would
    /// meet it again. The mark holds why.
    pub fn set_aside(&mut self, key: u64, why: &str) -> bool {
        let dir = self.store.join(format::REQUESTS);
        let _ = std::fs::remove_file(dir.join(format::request_name(key)));
        let _ = std::fs::remove_file(dir.join(format::claim_name(key)));
        self.outcomes.insert(key, WarmEvent::Failed);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(format::set_aside_name(key)))
            .and_then(|mut f| {
                use std::io::Write;
                writeln!(f, "{why}")
            })
            .is_ok()
    }
}

/// Removes the private compile folders (`$TMPDIR/clshim-warm-<pid>-XXXXXX`, the library's
/// `store::warm`) of workers that are gone: the user's own folders whose pid is no
/// process's, which an ended worker had no time to remove.
fn remove_orphaned_folders() {
    use std::os::unix::fs::MetadataExt;
    let tmp = std::env::temp_dir();
    let Ok(entries) = std::fs::read_dir(&tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("clshim-warm-"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let mine = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == super::trust::me());
        if mine && clshim_format::store::process_gone(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
