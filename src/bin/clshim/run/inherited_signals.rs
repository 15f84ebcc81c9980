//! The signal state `clshim run` was started with, handed back to the user's command so it
//! gets exactly the signals it would get without clshim. Rust's runtime ignores SIGPIPE
//! before `main`, and `std::process::Command` resets SIGPIPE to the default before `exec`;
//! a command started with SIGPIPE ignored on purpose (by its parent, a job system) would
//! lose that. So SIGPIPE's disposition is read in a constructor, before Rust's runtime
//! changes it, and put back just before `exec`; the signal mask is read when `run` starts
//! (nothing has changed it by then) and set again there too, whatever a std version resets. Other dispositions
//! (nohup's ignored SIGHUP) pass through `exec` untouched. What Python changed under the
//! `python -m clshim` entry point is undone by its launcher (python/clshim/__init__.py).

use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};

static SIGPIPE_IGNORED_AT_START: AtomicBool = AtomicBool::new(false);

/// Runs before `main` (and so before Rust's runtime ignores SIGPIPE).
#[used]
#[cfg_attr(target_os = "linux", link_section = ".init_array")]
#[cfg_attr(target_os = "macos", link_section = "__DATA,__mod_init_func")]
static READ_SIGPIPE_AT_START: extern "C" fn() = read_sigpipe_at_start;

extern "C" fn read_sigpipe_at_start() {
    // SAFETY: all-zero bytes are a valid sigaction (plain integers and pointers).
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a NULL new action only reads the current one into `old`, which is writable.
    let read = unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) } == 0;
    SIGPIPE_IGNORED_AT_START.store(read && old.sa_sigaction == libc::SIG_IGN, Ordering::Relaxed);
}

/// Makes `cmd`'s `exec` restore the signal mask this thread has now and SIGPIPE's
/// disposition at start.
pub fn restore_on_exec(cmd: &mut std::process::Command) {
    // SAFETY: all-zero bytes are a valid sigset_t (a plain bit array).
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a NULL new set only reads this thread's mask into `mask`, which is writable.
    let read = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut mask) };
    let mask = (read == 0).then_some(mask);
    let pipe_ignored = SIGPIPE_IGNORED_AT_START.load(Ordering::Relaxed);
    let restore = move || {
        if let Some(m) = &mask {
            // SAFETY: `m` is a mask read from this process; the old one is not asked for.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, m, std::ptr::null_mut()) };
        }
        if pipe_ignored {
            // SAFETY: setting a standard signal to SIG_IGN, which installs no handler.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        }
        Ok(())
    };
    // SAFETY: `restore` runs after std reset the signal state, just before execvp, and
    // calls only async-signal-safe functions on values it owns.
    unsafe { cmd.pre_exec(restore) };
}
