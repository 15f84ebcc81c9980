//! `clshim warm` and `clshim run --warm`: the step that makes the driver's own binaries
//! `substitute` asked for (the library's `warm` module does the work; see
//! docs/binary-policies.md). This module owns the settings (the store, its size cap and
//! the files' mode, from options and the same `CLSHIM_*` variables the library reads),
//! the idle priority (SCHED_IDLE, nice 19 and the idle I/O class where the system has
//! them, so the step only takes what nothing else wants), `--jobs` (more processes, never
//! threads: pocl compiles one program at a time per process, under its LLVM lock), and
//! the call into the library: the command links neither the library nor OpenCL, so it
//! opens the library it finds as `clshim run` does and calls `clshim_warm_v1`.

use crate::controls::{self, Value};
use crate::run::{cannot_run, find_library, RunError};
use std::ffi::{c_char, CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What the step works on.
#[derive(Debug)]
pub struct Settings {
    /// None: the store is off (or no place for it could be named).
    pub store: Option<PathBuf>,
    pub max: u64,
    pub mode: u32,
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
        let checked = |c: &controls::Control| {
            get(c.var)
                .and_then(|v| v.to_str().map(str::to_owned))
                .and_then(|v| c.check(&v))
        };
        let max = match checked(&controls::NATIVE_STORE_MAX) {
            Some(Value::Size(n)) => n,
            _ => 1 << 30,
        };
        let mode = match checked(&controls::TRACE_MODE) {
            Some(Value::Mode(m)) => m,
            _ => 0o600,
        };
        Settings { store, max, mode }
    }
}

/// The library's summary of one step (`WarmStats` in src/warm.rs, the same layout).
#[repr(C)]
#[derive(Default, Debug)]
struct WarmStats {
    made: u64,
    present: u64,
    claimed: u64,
    foreign: u64,
    failed: u64,
    evicted: u64,
}

type WarmFn = unsafe extern "C" fn(*const c_char, u64, u32, *mut WarmStats) -> i32;

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

/// One warm step in this process. Returns the exit status: 0 done (a request that failed
/// is reported, not fatal), 1 the step could not run.
fn step(lib: &Path, s: &Settings) -> i32 {
    let Some(store) = &s.store else {
        eprintln!("clshim warm: the native store is off (CLSHIM_NATIVE_STORE=off); nothing to do");
        return 0;
    };
    idle_priority();
    // The step calls the driver itself: a layer the user's environment names would see
    // and record its calls.
    std::env::remove_var("OPENCL_LAYERS");
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
    let f = unsafe { libc::dlsym(handle, b"clshim_warm_v1\0".as_ptr() as *const c_char) };
    if f.is_null() {
        eprintln!(
            "clshim warm: {} has no warm step (an older clshim library?)",
            lib.display()
        );
        return 1;
    }
    // SAFETY: the library's clshim_warm_v1, of this type (src/warm.rs).
    let warm: WarmFn = unsafe { std::mem::transmute::<*mut libc::c_void, WarmFn>(f) };
    let Ok(store_c) = CString::new(store.as_os_str().as_bytes()) else {
        eprintln!("clshim warm: the store path holds a NUL byte");
        return 1;
    };
    let mut stats = WarmStats::default();
    // SAFETY: a NUL-terminated path and a writable summary.
    let ret = unsafe { warm(store_c.as_ptr(), s.max, s.mode, &mut stats) };
    eprintln!(
        "clshim warm: {}: {} made, {} present, {} claimed by another process, {} for other devices, {} failed, {} evicted",
        store.display(),
        stats.made,
        stats.present,
        stats.claimed,
        stats.foreign,
        stats.failed,
        stats.evicted
    );
    ret
}

/// `clshim warm`: `jobs` processes (this one and `jobs - 1` copies of the command) split
/// the requests by their claims. Returns the exit status.
pub fn warm_main(o: crate::cli::WarmOpts) -> i32 {
    let lib = match find_library(o.lib.as_deref(), std::env::var_os("CLSHIM_LIB")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("clshim: {}", e.message);
            return e.status;
        }
    };
    let s = Settings::from_lookup(o.store, &|n| std::env::var_os(n));
    let mut helpers = Vec::new();
    if let (Some(store), Ok(me)) = (&s.store, std::env::current_exe()) {
        for _ in 1..o.jobs {
            let child = std::process::Command::new(&me)
                .arg("warm")
                .arg("--store")
                .arg(store)
                .arg("--lib")
                .arg(&lib)
                .spawn();
            if let Ok(c) = child {
                helpers.push(c);
            }
        }
    }
    let mut status = step(&lib, &s);
    for mut h in helpers {
        if !h.wait().is_ok_and(|st| st.success()) {
            status = status.max(1);
        }
    }
    status
}

/// `clshim run --warm`: runs `cmd` as a child, waits for it, runs the warm step, then
/// exits with the child's status (128 + the signal when a signal ended it, as a shell
/// reports it). clshim ignores SIGINT and SIGQUIT while the child runs, as a shell does
/// for a foreground job, so a ^C reaches the child (the same process group) and the warm
/// step still runs after it.
pub fn run_then_warm(
    mut cmd: std::process::Command,
    program: &OsStr,
    lib: &Path,
    settings: Settings,
) -> Result<std::convert::Infallible, RunError> {
    let mut child = cmd.spawn().map_err(|e| cannot_run(program, &e))?;
    // SAFETY: replacing this process's dispositions; the child already has its own
    // (restored at its exec by `inherited_signals`).
    let old = unsafe {
        (
            libc::signal(libc::SIGINT, libc::SIG_IGN),
            libc::signal(libc::SIGQUIT, libc::SIG_IGN),
        )
    };
    let status = child.wait();
    // SAFETY: putting back what was there.
    unsafe {
        libc::signal(libc::SIGINT, old.0);
        libc::signal(libc::SIGQUIT, old.1);
    }
    let code = match status {
        Ok(st) => {
            use std::os::unix::process::ExitStatusExt;
            st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
        }
        Err(_) => 1,
    };
    step(lib, &settings);
    std::process::exit(code)
}
