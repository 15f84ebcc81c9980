//! `clshim run --warm`: the command, then the warm step, both as children of this process,
//! which passes on to the one running the signals another process sends it.

use super::settings::Settings;
use super::trust::check_store;
use crate::library::{cannot_run, RunError};
use std::ffi::OsStr;
use std::path::Path;

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

/// Starts `clshim warm` on `store`, in the foreground (its output on this process's
/// standard error, its summary line also in `store/warm.log`), and returns it; Err: why
/// not. The store (and each folder made for it) is made the user's alone, as the library
/// makes it, whatever the umask: the library would refuse one that its group may write.
fn start_warm(lib: &Path, store: &Path) -> Result<std::process::Child, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    if let Err(e) = crate::store::folders::make_private(store) {
        return Err(format!("{}: {e}", store.display()));
    }
    check_store(store)?;
    let mut cmd = std::process::Command::new(me);
    cmd.arg("warm")
        .arg("--store")
        .arg(store)
        .arg("--lib")
        .arg(lib)
        .stdin(std::process::Stdio::null());
    cmd.spawn().map_err(|e| format!("cannot start it: {e}"))
}

/// `clshim run --warm`: runs `cmd` as a child, waits for it (passing on SIGTERM, SIGHUP,
/// SIGINT and SIGQUIT that another process sends to clshim), then runs the warm step in
/// the foreground, inside the job's own time (a batch scheduler ends every process of a
/// job when its script ends: a step left in the background would be killed with it), on
/// every CPU this process may use at idle priority, passing those signals on to it in turn,
/// and exits with the command's status (128 + the signal when a signal ended it, as a shell
/// reports it), whatever the step did. A step killed with its job loses nothing made: each
/// entry is written whole, and the next step takes up the requests left (a request being
/// made when the step was killed within a minute, when its claim's lease runs out).
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
        match start_warm(lib, store) {
            Ok(mut step) => {
                CHILD.store(step.id() as i32, std::sync::atomic::Ordering::Relaxed);
                let _ = step.wait();
            }
            Err(why) => eprintln!("clshim: could not start the warm step: {why}"),
        }
    }
    std::process::exit(code)
}
