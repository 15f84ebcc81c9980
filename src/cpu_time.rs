//! CPU time beside wall time, for records only (never on the launch hot path): what a
//! build, compile, link or binary query cost the thread that made it, and what a first
//! launch cost the threads that served it. The difference between a record's wall time
//! and its CPU time is time spent waiting: for a core, for a lock, for the disk.
//!
//! pocl compiles a program, and answers a binary query, on the calling thread; the linker
//! it runs for a kernel's shared object is a child process, which the thread waits for.
//! So a call's CPU is the calling thread's clock plus the CPU of the children reaped
//! meanwhile (`RUSAGE_CHILDREN` is process-wide: a child another thread reaps in that
//! interval counts too). A first launch's compile runs on one of pocl's worker threads
//! while the launching thread goes on (or waits, or polls MPI), so its CPU is the
//! process's clock less the launching thread's, plus reaped children: the work of every
//! other thread. That quantity is one clock per launching thread, so `clshim report` can
//! tell what overlapping launches cost together ([`OthersCpu`] gives its reading at the
//! start). Each reading is a system call or two: `bench/thread_clock_cost.sh` measures it.

/// Seconds of CPU on the clock `id`, or None where the clock cannot be read (a thread
/// that has exited).
fn clock(id: libc::clockid_t) -> Option<f64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid out-pointer; an unknown clock is an error, not a fault.
    let ok = unsafe { libc::clock_gettime(id, &mut t) } == 0;
    ok.then_some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
}

/// CPU seconds (user and system) of the children this process has waited for.
fn reaped_children() -> f64 {
    // SAFETY: an all-zero rusage is a valid value for getrusage to overwrite.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid out-pointer; RUSAGE_CHILDREN exists on Linux and macOS.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(r.ru_utime) + secs(r.ru_stime)
}

/// The calling thread's CPU clock (and reaped children's) at a call's start.
#[derive(Clone, Copy, Debug)]
pub struct ThreadCpu {
    thread: libc::pthread_t,
    /// None where the clock could not be read.
    at: Option<f64>,
}

impl ThreadCpu {
    pub fn now() -> ThreadCpu {
        ThreadCpu {
            // SAFETY: pthread_self has no failure mode.
            thread: unsafe { libc::pthread_self() },
            at: clock(libc::CLOCK_THREAD_CPUTIME_ID).map(|t| t + reaped_children()),
        }
    }

    /// CPU seconds since the mark, read on the thread that made it; None on another thread
    /// (an asynchronous build whose callback fired elsewhere), whose clock says nothing of
    /// the call.
    pub fn seconds(&self) -> Option<f64> {
        // SAFETY: pthread_self has no failure mode; pthread_equal compares two ids.
        if unsafe { libc::pthread_equal(self.thread, libc::pthread_self()) } == 0 {
            return None;
        }
        let end = clock(libc::CLOCK_THREAD_CPUTIME_ID)? + reaped_children();
        Some((end - self.at?).max(0.0))
    }
}

/// The CPU of every thread but the launching one (and of reaped children), read at a
/// first launch's enqueue; [`OthersCpu::interval`] reads it again from any thread.
#[derive(Clone, Copy, Debug)]
pub struct OthersCpu {
    /// The launching thread's CPU clock, which any thread of the process can read.
    #[cfg(target_os = "linux")]
    launcher: libc::clockid_t,
    at: Option<f64>,
}

impl OthersCpu {
    /// Marks the calling (launching) thread's start.
    #[cfg(target_os = "linux")]
    pub fn now() -> OthersCpu {
        let mut launcher: libc::clockid_t = 0;
        // SAFETY: the calling thread's own id and a valid out-pointer.
        let ok = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut launcher) } == 0;
        let mark = OthersCpu { launcher, at: None };
        OthersCpu {
            at: ok.then(|| mark.read()).flatten(),
            ..mark
        }
    }

    /// macOS has no clock of another thread: first launches there get no CPU time.
    #[cfg(not(target_os = "linux"))]
    pub fn now() -> OthersCpu {
        OthersCpu { at: None }
    }

    /// Process CPU less the launcher's, plus reaped children: None once the launcher has
    /// exited (Linux answers its clock with an error then).
    #[cfg(target_os = "linux")]
    fn read(&self) -> Option<f64> {
        let process = clock(libc::CLOCK_PROCESS_CPUTIME_ID)?;
        let launcher = clock(self.launcher)?;
        Some(process - launcher + reaped_children())
    }

    /// The reading at the mark and the CPU seconds since, from any thread.
    pub fn interval(&self) -> Option<(f64, f64)> {
        let at = self.at?;
        #[cfg(target_os = "linux")]
        let end = self.read()?;
        #[cfg(not(target_os = "linux"))]
        let end = at;
        Some((at, (end - at).max(0.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns `seconds` of this thread's CPU (not of wall time: the machine may be busy).
    fn burn(seconds: f64) {
        let start = clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap();
        while clock(libc::CLOCK_THREAD_CPUTIME_ID).unwrap() - start < seconds {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn a_busy_thread_counts_its_own_cpu_and_a_sleeping_one_none() {
        let mark = ThreadCpu::now();
        burn(0.03);
        let busy = mark.seconds().expect("thread clock");
        assert!((0.03..1.0).contains(&busy), "{busy}");
        let mark = ThreadCpu::now();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(mark.seconds().unwrap() < 0.02);
        // Read on another thread: nothing to say about the call.
        let elsewhere = std::thread::spawn(move || mark.seconds()).join().unwrap();
        assert_eq!(elsewhere, None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn others_count_other_threads() {
        // Other tests run on other threads of this process meanwhile: only lower bounds hold.
        let mark = OthersCpu::now();
        std::thread::spawn(|| burn(0.03)).join().unwrap();
        let (at, worked) = mark.interval().unwrap();
        assert!(at >= 0.0 && worked >= 0.03, "{worked}");
        // Read from another thread, as a completion callback does.
        let (_, there) = std::thread::spawn(move || mark.interval())
            .join()
            .unwrap()
            .unwrap();
        assert!(there >= worked);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_launcher_that_exited_gives_no_reading() {
        let mark = std::thread::spawn(OthersCpu::now).join().unwrap();
        assert_eq!(mark.interval(), None);
    }
}
