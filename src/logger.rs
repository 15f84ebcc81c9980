//! clshim's log output: `log` records filtered by `CLSHIM_LOG` (env_logger's filter syntax,
//! env_logger doing the filtering) and written to stderr with one `write` per line. It takes
//! no lock, so a fork while another thread logs can never leave the child stuck on a
//! logger lock, and lines from concurrent threads never interleave mid-line.

use log::{Log, Metadata, Record};

struct ShimLogger {
    filter: env_logger::Logger,
    rank: Option<u64>,
}

/// Writes all of `bytes` to `fd`, retrying on EINTR; false on any other failure. A write
/// to a pipe whose reader is gone raises no SIGPIPE: clshim's lines (its exit line comes
/// from an `atexit` handler, before stdio flushes the application's buffers) must not kill
/// an application that writes nothing there itself (`app 2>&1 >out | head -1` lost `out`).
pub fn write_fd(fd: i32, bytes: &[u8]) -> bool {
    // SAFETY: plain signal-set calls on sets owned here; only this thread's mask changes,
    // and is put back as it was.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old) != 0 {
            return write_all(fd, bytes).is_ok();
        }
        libc::sigpending(&mut pending);
        let was_pending = libc::sigismember(&pending, libc::SIGPIPE) == 1;
        let written = write_all(fd, bytes);
        // Only after EPIPE, when this write raised a SIGPIPE of this thread's, which no
        // other thread can take: sigwait then returns at once. (After another error a
        // SIGPIPE pending now was sent to the process, and is the application's.)
        if written == Err(libc::EPIPE) && !was_pending {
            libc::sigpending(&mut pending);
            if libc::sigismember(&pending, libc::SIGPIPE) == 1 {
                let mut sig = 0;
                libc::sigwait(&pipe, &mut sig);
            }
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        written.is_ok()
    }
}

/// Writes all of `bytes`, retrying on EINTR; Err: the error that stopped it.
fn write_all(fd: i32, mut bytes: &[u8]) -> Result<(), i32> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr() as *const libc::c_void, bytes.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(0);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// A line straight to stderr, for warnings that must show whatever `CLSHIM_LOG` says.
pub fn stderr_line(text: &str) {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    write_fd(2, line.as_bytes());
}

impl Log for ShimLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record<'_>) {
        if !self.filter.matches(record) {
            return;
        }
        let rank = self.rank.map(|r| format!("rank {r} ")).unwrap_or_default();
        stderr_line(&format!(
            "[clshim {} {rank}pid {}] {}",
            record.level(),
            std::process::id(),
            record.args()
        ));
    }

    fn flush(&self) {}
}

/// Installs the logger with `filter` (already validated by the configuration).
pub fn install(filter: &str, rank: Option<u64>) {
    let filter = env_logger::Builder::new().parse_filters(filter).build();
    let level = filter.filter();
    if log::set_boxed_logger(Box::new(ShimLogger { filter, rank })).is_ok() {
        log::set_max_level(level);
    }
}
