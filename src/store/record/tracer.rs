//! The tracer and its handle in the traced process. `watch_this_process` forks: the child
//! goes on as the warm worker, traced (`PTRACE_TRACEME`, then the seccomp filter), and gets
//! a [`Recorder`]; the parent becomes the tracer and never returns: it follows the child,
//! its threads and any process it starts, and ends with the child's own status (re-raising
//! the signal that ended it, so the `clshim warm` command still tells a driver's crash from
//! a clean end). Between the worker's begin and end marks (a `faccessat` on a descriptor no
//! process has), the tracer notes each stopped call with its result; at the end mark it
//! writes the window's record into a memory file both processes share, before the worker
//! goes on. The worker's begin mark may also name pocl's private cache folder and the
//! application's kernel cache: when pocl makes the folder of a program's cache entry, the
//! tracer first copies that entry's files from the application's cache, if it holds them
//! (pocl's own content-addressed compile of exactly this preprocessed text), so the source
//! build is pocl's cache hit, as it was in the application, and the copies count as files
//! the build made. Needs Linux 4.8 or newer (a seccomp stop before the call runs).

use super::filter;
use super::syscalls::{shape, Follow, Shape};
use super::{Access, Base, Meta, Op, Record, Target, REGULAR};
use std::collections::{HashMap, HashSet};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

/// The descriptor of the worker's marks: no process has it, so the call fails harmlessly
/// with EBADF when nothing traces the worker.
const MARK_FD: i32 = -0x434c_5348;
const MARK_BEGIN: u64 = 1;
const MARK_END: u64 = 2;

const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
const AT_EMPTY_PATH: u64 = 0x1000;
const NT_PRSTATUS: libc::c_int = 1;
/// The longest name read from the traced process (the kernel's PATH_MAX).
const MAX_NAME: usize = 4096;

/// The worker's side: marks a build's window and takes its record. Without a tracer (the
/// process could not be watched), every window's record says why.
pub struct Recorder {
    shared: libc::c_int,
    unavailable: Option<String>,
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn mark(code: u64) {
    // SAFETY: faccessat on a descriptor no process has: only the tracer sees it; the name
    // is a NUL-terminated static string.
    unsafe {
        libc::syscall(
            libc::SYS_faccessat,
            MARK_FD as libc::c_long,
            b"clshim-record\0".as_ptr(),
            code as libc::c_long,
        )
    };
}

fn write_all_at(fd: libc::c_int, bytes: &[u8]) -> bool {
    // SAFETY: an open descriptor of this process.
    if unsafe { libc::ftruncate(fd, 0) } != 0 {
        return false;
    }
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: `bytes[done..]` is readable for its length.
        let n = unsafe {
            libc::pwrite(
                fd,
                bytes[done..].as_ptr() as *const libc::c_void,
                bytes.len() - done,
                done as libc::off_t,
            )
        };
        if n <= 0 {
            return false;
        }
        done += n as usize;
    }
    true
}

fn read_whole(fd: libc::c_int) -> Option<Vec<u8>> {
    // SAFETY: plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    let mut buf = vec![0u8; st.st_size as usize];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: `buf[got..]` is writable for its length.
        let n = unsafe {
            libc::pread(
                fd,
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                got as libc::off_t,
            )
        };
        if n <= 0 {
            return None;
        }
        got += n as usize;
    }
    Some(buf)
}

impl Recorder {
    /// Why no compile can be watched in this process, if so.
    pub fn unavailable(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }

    /// Begins a window. `cache` is (the folder pocl compiles in for this worker, the
    /// application's own kernel cache folder, the driver identity a program copied from
    /// there must have been compiled under), for the tracer to copy pocl's compiles of the
    /// application from.
    pub fn begin(&self, cache: Option<(&[u8], &[u8], u64)>) {
        if self.unavailable.is_some() {
            return;
        }
        let mut params = Vec::new();
        let (own, theirs, driver) = cache.unwrap_or((b"", b"", 0));
        for part in [own, theirs, &driver.to_le_bytes()[..]] {
            params.extend_from_slice(&(part.len() as u64).to_le_bytes());
            params.extend_from_slice(part);
        }
        write_all_at(self.shared, &params);
        mark(MARK_BEGIN);
    }

    /// Ends the window and takes its record.
    pub fn end(&self) -> Result<Record, String> {
        if let Some(why) = &self.unavailable {
            return Err(why.clone());
        }
        mark(MARK_END);
        let bytes = read_whole(self.shared).ok_or("the tracer's record cannot be read")?;
        Record::decode(&bytes)
    }
}

fn shared_file() -> Result<libc::c_int, String> {
    // SAFETY: a NUL-terminated name and a flag; MFD_CLOEXEC (1), so no program the worker
    // starts inherits it.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_create, b"clshim-record\0".as_ptr(), 1) };
    if fd >= 0 {
        return Ok(fd as libc::c_int);
    }
    // Kernels before 3.17: an unlinked file of this user's in /tmp.
    let mut template = *b"/tmp/clshim-record-XXXXXX\0";
    // SAFETY: a writable NUL-terminated template.
    let fd = unsafe { libc::mkstemp(template.as_mut_ptr() as *mut libc::c_char) };
    if fd < 0 {
        return Err(format!(
            "no file to share records in: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the name mkstemp just made; the descriptor keeps the file.
    unsafe {
        libc::unlink(template.as_ptr() as *const libc::c_char);
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    Ok(fd)
}

/// Forks: the child returns, watched, with its recorder; the parent traces it, removes the
/// folder `scratch` (the child's private files) once it has ended, and ends with its
/// status. When the process cannot be watched, no fork is made (or the child goes on
/// untraced) and the recorder says why. Call it while this process has one thread.
pub fn watch_this_process(scratch: &std::path::Path) -> Recorder {
    let shared = match shared_file() {
        Ok(fd) => fd,
        Err(why) => {
            return Recorder {
                shared: -1,
                unavailable: Some(why),
            }
        }
    };
    let mut sync = [0 as libc::c_int; 2];
    // SAFETY: room for two descriptors.
    if unsafe { libc::pipe2(sync.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Recorder {
            shared,
            unavailable: Some(format!("no pipe: {}", std::io::Error::last_os_error())),
        };
    }
    // SAFETY: a plain request about this process.
    let tracer = unsafe { libc::getpid() };
    // SAFETY: this process has one thread (this function's contract); the child only runs
    // on, the parent traces it.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Recorder {
            shared,
            unavailable: Some(format!("no fork: {}", std::io::Error::last_os_error())),
        };
    }
    if child == 0 {
        // The worker dies with its tracer, whenever that dies: also before the tracer has
        // set its options (PTRACE_O_EXITKILL), when a stopped worker would be left behind.
        // SAFETY: a plain request about this process.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        // A tracer that died before the request above sends no signal, and the worker,
        // adopted, would ask its new parent (init, which never answers) to trace it and
        // stop for good: it ends instead.
        // SAFETY: plain requests about this process.
        if unsafe { libc::getppid() } != tracer {
            // SAFETY: ending this process, as its tracer's death would have.
            unsafe { libc::_exit(1) };
        }
        // SAFETY: closing this process's copy of the pipe's read end.
        unsafe { libc::close(sync[0]) };
        // SAFETY: a plain request about this process.
        let traced = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) } == 0;
        let why = (!traced).then(|| {
            format!(
                "this process cannot be traced ({}): is it under a debugger, or does the \
                 system forbid ptrace?",
                std::io::Error::last_os_error()
            )
        });
        let byte = if traced { b"T" } else { b"N" };
        // SAFETY: the pipe's write end and one byte.
        unsafe {
            libc::write(sync[1], byte.as_ptr() as *const libc::c_void, 1);
            libc::close(sync[1]);
        }
        if let Some(why) = why {
            return Recorder {
                shared,
                unavailable: Some(why),
            };
        }
        // The tracer sets its options at this stop, before the filter exists.
        // SAFETY: raising a signal on this process.
        unsafe { libc::raise(libc::SIGSTOP) };
        let unavailable = filter::install()
            .err()
            .map(|e| format!("the kernel refused the system-call filter ({e})"));
        return Recorder {
            shared,
            unavailable,
        };
    }
    // SAFETY: the parent's copy of the write end.
    unsafe { libc::close(sync[1]) };
    let mut byte = [0u8; 1];
    // SAFETY: one byte into `byte`.
    let n = unsafe { libc::read(sync[0], byte.as_mut_ptr() as *mut libc::c_void, 1) };
    let traced = n == 1 && byte[0] == b'T';
    let status = if traced {
        Tracer::new(child, shared).run()
    } else {
        wait_for(child)
    };
    let _ = std::fs::remove_dir_all(scratch);
    end_like(status)
}

fn wait_for(child: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: waiting for this process's child.
        let r = unsafe { libc::waitpid(child, &mut status, 0) };
        if r == child {
            return status;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 1 << 8;
        }
    }
}

/// Ends this process as the child ended (its exit status, or its signal).
fn end_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: the default action, then the same signal on this process.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    };
    // SAFETY: ending the process; nothing of the tracer needs flushing.
    unsafe { libc::_exit(code) }
}

/// A call stopped at its start, waiting for its result.
struct Pending {
    op: Op,
    target: Target,
    /// A name the tracer itself can use for the same file: `/proc/<tid>/cwd/...` or
    /// `/proc/<tid>/fd/<n>/...` for relative names.
    usable: Vec<u8>,
    /// readlink's buffer in the traced process.
    buf: u64,
    follow: bool,
}

struct Window {
    record: Record,
    /// pocl's private cache folder and the application's, for copying compiles, and the
    /// driver identity a program copied must have been compiled under.
    seed: Option<(Vec<u8>, Vec<u8>, u64)>,
}

struct Tracer {
    child: libc::pid_t,
    shared: libc::c_int,
    known: HashSet<libc::pid_t>,
    pending: HashMap<libc::pid_t, Pending>,
    window: Option<Window>,
}

/// The six arguments and the number of a stopped call.
struct Call {
    nr: i64,
    args: [u64; 6],
}

fn regs(tid: libc::pid_t) -> Option<libc::user_regs_struct> {
    // SAFETY: plain data the kernel fills.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: &mut r as *mut _ as *mut libc::c_void,
        iov_len: std::mem::size_of::<libc::user_regs_struct>(),
    };
    // SAFETY: a stopped tracee of this process and an iovec over `r`.
    let ok = unsafe {
        libc::ptrace(
            libc::PTRACE_GETREGSET,
            tid,
            NT_PRSTATUS as libc::c_ulong,
            &mut iov as *mut libc::iovec,
        )
    } == 0;
    ok.then_some(r)
}

#[cfg(target_arch = "x86_64")]
fn call_of(r: &libc::user_regs_struct) -> Call {
    Call {
        nr: r.orig_rax as i64,
        args: [r.rdi, r.rsi, r.rdx, r.r10, r.r8, r.r9],
    }
}

#[cfg(target_arch = "x86_64")]
fn return_of(r: &libc::user_regs_struct) -> i64 {
    r.rax as i64
}

#[cfg(target_arch = "aarch64")]
fn call_of(r: &libc::user_regs_struct) -> Call {
    Call {
        nr: r.regs[8] as i64,
        args: [
            r.regs[0], r.regs[1], r.regs[2], r.regs[3], r.regs[4], r.regs[5],
        ],
    }
}

#[cfg(target_arch = "aarch64")]
fn return_of(r: &libc::user_regs_struct) -> i64 {
    r.regs[0] as i64
}

/// Bytes of the traced process's memory at `addr`: up to `len`, stopping early at an
/// unreadable page.
fn peek(tid: libc::pid_t, addr: u64, len: usize) -> Vec<u8> {
    let path = format!("/proc/{tid}/mem\0");
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(len.min(4096));
    let mut at = addr;
    while out.len() < len {
        // Page by page, so a name that ends just before an unmapped page is read whole.
        let page_left = 4096 - (at % 4096) as usize;
        let want = page_left.min(len - out.len());
        let mut buf = vec![0u8; want];
        // SAFETY: `buf` is writable for `want` bytes.
        let n = unsafe {
            libc::pread(
                fd,
                buf.as_mut_ptr() as *mut libc::c_void,
                want,
                at as libc::off_t,
            )
        };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
        at += n as u64;
        if n as usize != want {
            break;
        }
    }
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    out
}

/// A NUL-terminated string of the traced process, or None if it is unreadable or longer
/// than a name can be.
fn peek_name(tid: libc::pid_t, addr: u64) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() <= MAX_NAME {
        let chunk = peek(tid, at, 256);
        if chunk.is_empty() {
            return None;
        }
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Some(out);
        }
        at += chunk.len() as u64;
        out.extend_from_slice(&chunk);
    }
    None
}

fn readlink(path: &[u8]) -> Option<Vec<u8>> {
    std::fs::read_link(std::ffi::OsStr::from_bytes(path))
        .ok()
        .map(|p| p.into_os_string().as_bytes().to_vec())
}

fn stat_of(path: &[u8], follow: bool) -> Option<Meta> {
    let c = CString::new(path).ok()?;
    // SAFETY: plain data filled by stat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid name and a writable buffer.
    let r = unsafe {
        if follow {
            libc::stat(c.as_ptr(), &mut st)
        } else {
            libc::lstat(c.as_ptr(), &mut st)
        }
    };
    (r == 0).then(|| Meta::of(&st))
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut p = a.to_vec();
    p.push(b'/');
    p.extend_from_slice(b);
    p
}

impl Tracer {
    fn new(child: libc::pid_t, shared: libc::c_int) -> Tracer {
        Tracer {
            child,
            shared,
            known: HashSet::from([child]),
            pending: HashMap::new(),
            window: None,
        }
    }

    fn resume(&self, tid: libc::pid_t, sig: libc::c_int) {
        let req = if self.pending.contains_key(&tid) {
            libc::PTRACE_SYSCALL
        } else {
            libc::PTRACE_CONT
        };
        // SAFETY: a stopped tracee; a signal number or 0. ESRCH (it was killed) is fine.
        unsafe { libc::ptrace(req, tid, 0, sig as libc::c_ulong) };
    }

    /// Follows the child until it ends; returns its wait status.
    fn run(mut self) -> libc::c_int {
        let mut status = 0;
        // SAFETY: waiting for this process's child (stopped at its SIGSTOP).
        unsafe { libc::waitpid(self.child, &mut status, libc::__WALL) };
        if !libc::WIFSTOPPED(status) {
            return status;
        }
        let options = libc::PTRACE_O_TRACESECCOMP
            | libc::PTRACE_O_TRACESYSGOOD
            | libc::PTRACE_O_TRACECLONE
            | libc::PTRACE_O_TRACEFORK
            | libc::PTRACE_O_TRACEVFORK
            | libc::PTRACE_O_TRACEEXEC
            | libc::PTRACE_O_EXITKILL;
        // SAFETY: the stopped child; plain option bits.
        unsafe {
            libc::ptrace(
                libc::PTRACE_SETOPTIONS,
                self.child,
                0,
                options as libc::c_ulong,
            );
            libc::ptrace(libc::PTRACE_CONT, self.child, 0, 0);
        }
        loop {
            // SAFETY: waiting for any tracee.
            let tid = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
            if tid < 0 {
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => continue,
                    _ => return 1 << 8,
                }
            }
            if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                self.known.remove(&tid);
                self.pending.remove(&tid);
                if tid == self.child {
                    return status;
                }
                continue;
            }
            if !libc::WIFSTOPPED(status) {
                continue;
            }
            let sig = libc::WSTOPSIG(status);
            let event = (status >> 16) & 0xff;
            if sig == libc::SIGTRAP | 0x80 {
                self.at_exit(tid);
            } else if sig == libc::SIGTRAP && event == libc::PTRACE_EVENT_SECCOMP {
                self.at_seccomp(tid);
            } else if sig == libc::SIGTRAP && event != 0 {
                // A clone, fork, vfork or exec: the new tracee reports its own SIGSTOP.
                self.resume(tid, 0);
            } else if sig == libc::SIGSTOP && self.known.insert(tid) {
                self.resume(tid, 0);
            } else {
                // A signal for the tracee: delivered, but for job-control stops, which a
                // warm worker has no use for (and which would stop it for good).
                let deliver = match sig {
                    libc::SIGSTOP | libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU => 0,
                    s => s,
                };
                self.resume(tid, deliver);
            }
        }
    }

    fn problem(&mut self, what: String) {
        if let Some(w) = &mut self.window {
            if !w.record.problems.contains(&what) {
                w.record.problems.push(what);
            }
        }
    }

    fn at_seccomp(&mut self, tid: libc::pid_t) {
        let mut kind: libc::c_ulong = 0;
        // SAFETY: a stopped tracee; the message lands in `kind`.
        unsafe { libc::ptrace(libc::PTRACE_GETEVENTMSG, tid, 0, &mut kind) };
        if kind as u64 == filter::FOREIGN {
            self.problem(
                "the compile made a system call through another architecture's entry".into(),
            );
            return self.resume(tid, 0);
        }
        let Some(r) = regs(tid) else {
            self.problem("a stopped call's registers could not be read".into());
            return self.resume(tid, 0);
        };
        let call = call_of(&r);
        if call.nr == libc::SYS_faccessat && call.args[0] as i32 == MARK_FD {
            match call.args[2] {
                MARK_BEGIN => self.begin(tid),
                MARK_END => self.end(),
                _ => {}
            }
            return self.resume(tid, 0);
        }
        if self.window.is_some() {
            self.note(tid, &call);
        }
        self.resume(tid, 0);
    }

    fn begin(&mut self, tid: libc::pid_t) {
        let params = read_whole(self.shared).unwrap_or_default();
        let mut parts = Vec::new();
        let mut at = 0;
        while at + 8 <= params.len() {
            let n = u64::from_le_bytes(params[at..at + 8].try_into().expect("8 bytes")) as usize;
            at += 8;
            let end = (at + n).min(params.len());
            parts.push(params[at..end].to_vec());
            at = end;
        }
        let seed = match parts.as_slice() {
            [own, theirs, driver] if !own.is_empty() && !theirs.is_empty() => {
                let driver = <[u8; 8]>::try_from(driver.as_slice()).map_or(0, u64::from_le_bytes);
                Some((own.clone(), theirs.clone(), driver))
            }
            _ => None,
        };
        let cwd = readlink(format!("/proc/{tid}/cwd").as_bytes()).unwrap_or_default();
        self.window = Some(Window {
            record: Record {
                cwd,
                start_ns: now_ns(),
                ..Record::default()
            },
            seed,
        });
    }

    fn end(&mut self) {
        let Some(mut w) = self.window.take() else {
            return;
        };
        w.record.end_ns = now_ns();
        if !self.pending.is_empty() {
            w.record
                .problems
                .push("a call was still running when the build ended".into());
        }
        write_all_at(self.shared, &w.record.encode());
    }

    /// The target of a name argument, and a name the tracer can use for it.
    fn target(
        &mut self,
        tid: libc::pid_t,
        call: &Call,
        dir: Option<usize>,
        path: usize,
    ) -> Option<(Target, Vec<u8>)> {
        let Some(name) = peek_name(tid, call.args[path]) else {
            self.problem(format!(
                "the name of a call ({}) could not be read",
                call.nr
            ));
            return None;
        };
        let dirfd = dir.map(|i| call.args[i] as i32).unwrap_or(libc::AT_FDCWD);
        if name.first() == Some(&b'/') {
            return Some((
                Target {
                    base: Base::Plain,
                    path: name.clone(),
                },
                name,
            ));
        }
        if dirfd == libc::AT_FDCWD {
            let usable = join(format!("/proc/{tid}/cwd").as_bytes(), &name);
            return Some((
                Target {
                    base: Base::Plain,
                    path: name,
                },
                usable,
            ));
        }
        let fd_path = format!("/proc/{tid}/fd/{dirfd}");
        let Some(dir_text) = readlink(fd_path.as_bytes()) else {
            self.problem("a name relative to a descriptor whose folder is unknown".into());
            return None;
        };
        Some((
            Target {
                base: Base::Dir(dir_text),
                path: name.clone(),
            },
            join(fd_path.as_bytes(), &name),
        ))
    }

    fn push(&mut self, a: Access) {
        if let Some(w) = &mut self.window {
            w.record.accesses.push(a);
        }
    }

    fn change(&mut self, tid: libc::pid_t, call: &Call, dir: Option<usize>, path: usize) {
        if let Some((target, _)) = self.target(tid, call, dir, path) {
            self.pending.insert(
                tid,
                Pending {
                    op: Op::Change,
                    target,
                    usable: Vec::new(),
                    buf: 0,
                    follow: false,
                },
            );
        }
    }

    fn note(&mut self, tid: libc::pid_t, call: &Call) {
        let Some(s) = shape(call.nr) else {
            return;
        };
        let (op, dir, path, buf, follow) = match s {
            Shape::Ignore => return,
            Shape::Unsupported => {
                return self.problem(format!(
                    "the compile made a system call the watch does not follow ({})",
                    call.nr
                ))
            }
            Shape::Chdir => {
                return self.problem("the compile changed its working directory".into())
            }
            Shape::Open {
                dir,
                path,
                flags,
                how,
            } => {
                let flags = match (flags, how) {
                    (Some(i), _) => call.args[i],
                    (None, Some(i)) => {
                        let how = peek(tid, call.args[i], 24);
                        if how.len() < 24 || how[16..24].iter().any(|&b| b != 0) {
                            self.problem("an openat2 with resolve flags".into());
                        }
                        u64::from_le_bytes(how.get(..8).unwrap_or(&[0; 8]).try_into().expect("8"))
                    }
                    (None, None) => (libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC) as u64,
                };
                (Op::Open { flags }, dir, path, 0, true)
            }
            Shape::Stat { dir, path, follow } => {
                let flags = match follow {
                    Follow::UnlessFlag(i) => call.args[i],
                    _ => 0,
                };
                if flags & AT_EMPTY_PATH != 0
                    && peek_name(tid, call.args[path]).is_some_and(|n| n.is_empty())
                {
                    // fstat of an open descriptor: no name.
                    return;
                }
                let follow = match follow {
                    Follow::Always => true,
                    Follow::Never => false,
                    Follow::UnlessFlag(_) => flags & AT_SYMLINK_NOFOLLOW == 0,
                };
                (Op::Stat { follow }, dir, path, 0, follow)
            }
            Shape::Access { dir, path } => {
                if call.nr == libc::SYS_faccessat2 && call.args[3] & AT_SYMLINK_NOFOLLOW != 0 {
                    self.problem("an access check that does not follow links".into());
                }
                (Op::Access, dir, path, 0, true)
            }
            Shape::Readlink { dir, path, buf } => (Op::Readlink, dir, path, call.args[buf], false),
            Shape::Exec { dir, path } => (Op::Exec, dir, path, 0, true),
            Shape::Change { dir, path } => {
                self.seed(tid, call, dir, path);
                return self.change(tid, call, dir, path);
            }
            Shape::Symlink { dir, path } => return self.change(tid, call, dir, path),
            Shape::Two {
                from_dir,
                from,
                to_dir,
                to,
            } => {
                // Both names change; the first is noted now (its result is the call's).
                if let Some((target, _)) = self.target(tid, call, from_dir, from) {
                    self.push(Access {
                        op: Op::Change,
                        target,
                        ret: 0,
                        meta: None,
                        link: None,
                    });
                }
                return self.change(tid, call, to_dir, to);
            }
        };
        if let Some((target, usable)) = self.target(tid, call, dir, path) {
            self.pending.insert(
                tid,
                Pending {
                    op,
                    target,
                    usable,
                    buf,
                    follow,
                },
            );
        }
    }

    /// At pocl's mkdir of a program's cache folder in its private cache: copies the files
    /// the application's cache holds for that folder, if it holds its compiled program.
    fn seed(&mut self, tid: libc::pid_t, call: &Call, dir: Option<usize>, path: usize) {
        let is_mkdir = call.nr == libc::SYS_mkdirat || {
            #[cfg(target_arch = "x86_64")]
            {
                call.nr == libc::SYS_mkdir
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                false
            }
        };
        let Some((own, theirs, driver)) = self.window.as_ref().and_then(|w| w.seed.clone()) else {
            return;
        };
        if !is_mkdir {
            return;
        }
        let Some((target, _)) = self.target(tid, call, dir, path) else {
            return;
        };
        let full = target.joined();
        let Some(rel) = full
            .strip_prefix(own.as_slice())
            .and_then(|r| r.strip_prefix(b"/"))
            .filter(|r| {
                !r.is_empty() && !r.split(|&b| b == b'/').any(|c| c == b".." || c.is_empty())
            })
        else {
            return;
        };
        // Only from an application's cache that no one else can have written to, or
        // replaced on the way from `/` down to the program's folder (its files are checked
        // as they are copied).
        let theirs_path = std::path::Path::new(std::ffi::OsStr::from_bytes(&theirs));
        let rel_path = std::path::Path::new(std::ffi::OsStr::from_bytes(rel));
        if crate::store::files::below_not_others(theirs_path, rel_path).is_some() {
            return;
        }
        let from = join(&theirs, rel);
        // pocl's cache knows its kernel library only by the SHA-1 libpocl was built with:
        // only a program a compile under this driver identity marked holds the library
        // the key names (`kernel_library::mark`); for any other, pocl compiles.
        let has_program =
            stat_of(&join(&from, b"program.bc"), false).is_some_and(|m| m.kind() == REGULAR);
        let from_path = std::path::Path::new(std::ffi::OsStr::from_bytes(&from));
        if !has_program || !crate::store::kernel_library::marked(from_path, driver) {
            return;
        }
        // The folder and its parents inside the private cache, then what the application's
        // cache holds below it: the program's bitcode and log, and the kernels its first
        // launches compiled (which the binary then carries, so a program served from it
        // launches without compiling them again).
        let mut made = own.clone();
        for part in rel.split(|&b| b == b'/') {
            made = join(&made, part);
            if std::fs::create_dir(std::ffi::OsStr::from_bytes(&made)).is_ok() {
                self.push(made_by_tracer(&made));
            }
        }
        let into = std::path::Path::new(std::ffi::OsStr::from_bytes(&full));
        if !crate::store::files::copy_tree(
            std::path::Path::new(std::ffi::OsStr::from_bytes(&from)),
            into,
        ) {
            // Part of a program (a truncated bitcode file) would fail pocl's build: an
            // empty folder instead, in which pocl compiles.
            let _ = std::fs::remove_dir_all(into);
            let _ = std::fs::create_dir(into);
        }
    }

    fn at_exit(&mut self, tid: libc::pid_t) {
        let Some(p) = self.pending.remove(&tid) else {
            return self.resume(tid, 0);
        };
        let ret = regs(tid)
            .map(|r| return_of(&r))
            .unwrap_or(-(libc::EIO as i64));
        let mut meta = None;
        let mut link = None;
        if ret >= 0 {
            match p.op {
                Op::Open { flags } => {
                    let fd_path = format!("/proc/{tid}/fd/{ret}");
                    meta = stat_of(fd_path.as_bytes(), true);
                    let read_only = flags & libc::O_ACCMODE as u64 == libc::O_RDONLY as u64;
                    if read_only && p.target.path.ends_with(b".preproc.cl") {
                        if let Ok(text) =
                            std::fs::read(std::ffi::OsStr::from_bytes(fd_path.as_bytes()))
                        {
                            if let Some(w) = &mut self.window {
                                w.record.preprocessed.push((p.target.joined(), text));
                            }
                        }
                    }
                }
                Op::Stat { .. } | Op::Access | Op::Exec => meta = stat_of(&p.usable, p.follow),
                Op::Readlink => link = Some(peek(tid, p.buf, ret as usize)),
                Op::Change => {}
            }
        }
        self.push(Access {
            op: p.op,
            target: p.target,
            ret,
            meta,
            link,
        });
        self.resume(tid, 0);
    }
}

fn made_by_tracer(path: &[u8]) -> Access {
    Access {
        op: Op::Change,
        target: Target {
            base: Base::Plain,
            path: path.to_vec(),
        },
        ret: 0,
        meta: None,
        link: None,
    }
}
