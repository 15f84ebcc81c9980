//! What a warm step works on and how hard: the store and its size cap (from options and
//! the same `CLSHIM_*` variables the library reads), how many workers run at once (every
//! CPU this process may use, by default), how long one request may take, and the idle
//! priority (SCHED_IDLE, nice 19 and the idle I/O class where the system has them, so the
//! step only takes what nothing else wants).

use crate::controls::{self, Value};
use crate::library::absolute;
use std::ffi::OsString;
use std::path::PathBuf;

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

/// How many workers run at once when `--jobs` is not given: every CPU this process may use
/// (its affinity and cgroup quota), since workers only take what nothing else wants.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// How long one request may take a worker when `--timeout` is not given, in seconds: far
/// beyond a real compile (pocl's slowest measured here take seconds), short enough that a
/// build that blocks (a header that is a FIFO) costs a warm step ten minutes, not forever.
pub const DEFAULT_TIMEOUT: u64 = 600;

/// Lowers this process to idle priority (each part where the system has it): the warm step
/// and the service, which no application waits for while it computes (a process waits for
/// the service only at its exit), run only on cores nothing else wants, and are the first
/// processes the kernel's OOM killer ends (their workers inherit it): on a node whose memory
/// a job fills, a worker loading the driver's compiler must never cost a rank, which is
/// else the one killed, as the largest process.
pub fn idle_priority() {
    #[cfg(target_os = "linux")]
    {
        // Raising one's own score needs no privilege.
        let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
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
