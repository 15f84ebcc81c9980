//! The per-process JSON Lines trace file. It is created at the first record (never before
//! the first intercepted call), exclusively and without following symbolic links, with
//! owner-only permissions unless `CLSHIM_TRACE_MODE` says otherwise; its first line is the
//! `process` record. Every record is appended with one `write`, so a crash loses at most
//! the record in flight. A forked child notices its new pid and starts its own file. Any
//! failure (unwritable or full disk, file removed) gives one warning and turns tracing
//! off for the process; the application never sees it.
//!
//! The descriptor is checked before every write (and before clshim closes it): an
//! application may close descriptors it did not open (daemons, some launchers) and get
//! the same number for a file of its own. The file's device and inode are noted at open;
//! when the descriptor no longer names that file, clshim reopens its file by path (and
//! checks it is the same file), or else stops tracing with one warning. It never writes
//! to, or closes, a descriptor that is not its own.

use crate::logger::{stderr_line, write_fd};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub struct TraceFile {
    dir: Option<PathBuf>,
    mode: u32,
    fd: i32,
    /// Device and inode of the file `fd` was opened on.
    file_id: (u64, u64),
    pid: u32,
    path: Option<PathBuf>,
    disabled: bool,
}

/// What a descriptor currently is, for clshim's file.
#[derive(Debug, PartialEq, Eq)]
enum Held {
    Ours,
    /// Ours, but the file has no name left.
    Removed,
    /// Closed, or another file: not clshim's to use.
    NotOurs,
}

fn file_id(fd: i32) -> Option<((u64, u64), u64)> {
    // SAFETY: st is plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat only writes into `st`; a closed or foreign fd makes it fail, not crash.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    Some(((st.st_dev as u64, st.st_ino as u64), st.st_nlink as u64))
}

fn held(fd: i32, id: (u64, u64)) -> Held {
    match file_id(fd) {
        Some((now, _)) if now != id => Held::NotOurs,
        Some((_, 0)) => Held::Removed,
        Some(_) => Held::Ours,
        None => Held::NotOurs,
    }
}

fn reopen(path: &Path, id: (u64, u64)) -> Option<i32> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: c is a valid NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    if held(fd, id) == Held::Ours {
        Some(fd)
    } else {
        // SAFETY: fd was just opened here.
        unsafe { libc::close(fd) };
        None
    }
}

fn open_exclusive(path: &Path, mode: u32) -> std::io::Result<i32> {
    open_exclusive_at(libc::AT_FDCWD, path, mode)
}

/// Creates `path` (relative to the directory `dir`, or to the working directory with
/// `AT_FDCWD`) by the rules of trace files: exclusively, never through a symbolic link,
/// with exactly `mode` whatever the umask. Kept sources are created by the same rules.
pub fn open_exclusive_at(dir: i32, path: &Path, mode: u32) -> std::io::Result<i32> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: c is a valid NUL-terminated path; `dir` is a directory descriptor or
    // AT_FDCWD (the caller's).
    let fd = unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            libc::O_WRONLY
                | libc::O_CREAT
                | libc::O_EXCL
                | libc::O_NOFOLLOW
                | libc::O_APPEND
                | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The umask may have removed bits the user asked for explicitly.
    // SAFETY: fd was just opened.
    unsafe { libc::fchmod(fd, mode as libc::mode_t) };
    Ok(fd)
}

impl TraceFile {
    pub fn new(dir: Option<PathBuf>, mode: u32) -> TraceFile {
        TraceFile {
            dir,
            mode,
            fd: -1,
            file_id: (0, 0),
            pid: std::process::id(),
            path: None,
            disabled: false,
        }
    }

    fn give_up(&mut self, why: String) {
        stderr_line(&format!(
            "clshim: warning: {why}; no more trace records from pid {}",
            std::process::id()
        ));
        self.close_if_ours();
        self.disabled = true;
    }

    /// Closes the descriptor if it still names clshim's file; forgets it either way.
    fn close_if_ours(&mut self) {
        if self.fd >= 0 && held(self.fd, self.file_id) != Held::NotOurs {
            // SAFETY: the descriptor names the file clshim opened.
            unsafe { libc::close(self.fd) };
        }
        self.fd = -1;
    }

    /// Creates the file `stem.jsonl`, or, if another process has that name (the same pid
    /// in another pid namespace, or an earlier run), `stem.<instance>.jsonl`, which no
    /// other process can have, and only then numbered variants of it.
    fn open(&mut self, stem: &str, instance: &str) -> Option<()> {
        let dir = self.dir.clone()?;
        if let Err(e) = std::fs::create_dir_all(&dir) {
            self.give_up(format!("cannot create trace directory {dir:?}: {e}"));
            return None;
        }
        for n in 0..1000 {
            let name = match n {
                0 => format!("{stem}.jsonl"),
                1 => format!("{stem}.{instance}.jsonl"),
                _ => format!("{stem}.{instance}.{}.jsonl", n - 1),
            };
            let path = dir.join(name);
            match open_exclusive(&path, self.mode) {
                Ok(fd) => {
                    let Some((id, _)) = file_id(fd) else {
                        // SAFETY: fd was just opened here.
                        unsafe { libc::close(fd) };
                        self.give_up(format!("cannot inspect trace file {path:?}"));
                        return None;
                    };
                    self.fd = fd;
                    self.file_id = id;
                    self.path = Some(path);
                    return Some(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    self.give_up(format!("cannot create trace file {path:?}: {e}"));
                    return None;
                }
            }
        }
        self.give_up(format!("no free trace file name for {stem} in {dir:?}"));
        None
    }

    /// Appends `line` (one JSON object, no newline), creating the file first with the
    /// name `name()` gives (a stem, and the process's instance for when the stem is taken)
    /// and `header()` as its first line.
    pub fn append(
        &mut self,
        name: impl FnOnce() -> (String, String),
        header: impl FnOnce() -> String,
        line: &str,
    ) {
        let pid = std::process::id();
        if pid != self.pid {
            // A forked child: the inherited descriptor is the parent's file (closing the
            // child's copy only), unless the child has reused its number already.
            self.close_if_ours();
            *self = TraceFile::new(self.dir.take(), self.mode);
        }
        if self.disabled || self.dir.is_none() {
            return;
        }
        if self.fd < 0 {
            let (stem, instance) = name();
            if self.open(&stem, &instance).is_none() {
                return;
            }
            let mut h = header();
            h.push('\n');
            if !write_fd(self.fd, h.as_bytes()) {
                let why = format!(
                    "cannot write trace file {}: {}",
                    self.path_text(),
                    std::io::Error::last_os_error()
                );
                self.give_up(why);
                return;
            }
        } else {
            match held(self.fd, self.file_id) {
                Held::Ours => {}
                Held::Removed => {
                    let why = format!("trace file {} was removed", self.path_text());
                    self.give_up(why);
                    return;
                }
                Held::NotOurs => {
                    // The application closed clshim's descriptor (and may have reused the
                    // number): leave that descriptor alone and reopen the file by name.
                    let old = self.fd;
                    self.fd = -1;
                    match self.path.clone().and_then(|p| reopen(&p, self.file_id)) {
                        Some(fd) => self.fd = fd,
                        None => {
                            let why = format!(
                                "trace file descriptor {old} was closed by the application \
                                 and {} cannot be reopened",
                                self.path_text()
                            );
                            self.give_up(why);
                            return;
                        }
                    }
                }
            }
        }
        let mut l = String::with_capacity(line.len() + 1);
        l.push_str(line);
        l.push('\n');
        if !write_fd(self.fd, l.as_bytes()) {
            let why = format!(
                "cannot write trace file {}: {}",
                self.path_text(),
                std::io::Error::last_os_error()
            );
            self.give_up(why);
        }
    }

    /// Appends `line` to the file if this process has one already (it is made at the
    /// first record, never here): the `exit` record of a process that recorded something.
    pub fn append_if_open(&mut self, line: &str) {
        if self.pid == std::process::id() && self.fd >= 0 && !self.disabled {
            self.append(|| (String::new(), String::new()), String::new, line);
        }
    }

    /// The path, quoted and escaped: a directory name may hold newlines or other bytes
    /// that must not reach the log as they are.
    fn path_text(&self) -> String {
        self.path
            .as_ref()
            .map(|p| format!("{p:?}"))
            .unwrap_or_default()
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if self.pid == std::process::id() {
            self.close_if_ours();
        }
    }
}
