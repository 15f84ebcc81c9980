//! The per-process JSON Lines trace file. It is created at the first record (never before
//! the first intercepted call), exclusively and without following symbolic links, with
//! owner-only permissions unless `CLSHIM_TRACE_MODE` says otherwise; its first line is the
//! `process` record. Every record is appended with one `write`, so a crash loses at most
//! the record in flight. A forked child notices its new pid and starts its own file. Any
//! failure (unwritable or full disk, file removed) gives one warning and turns tracing
//! off for the process; the application never sees it.

use crate::logger::{stderr_line, write_fd};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub struct TraceFile {
    dir: Option<PathBuf>,
    mode: u32,
    fd: i32,
    pid: u32,
    path: Option<PathBuf>,
    disabled: bool,
}

fn open_exclusive(path: &Path, mode: u32) -> std::io::Result<i32> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: c is a valid NUL-terminated path.
    let fd = unsafe {
        libc::open(
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
            pid: std::process::id(),
            path: None,
            disabled: false,
        }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    fn give_up(&mut self, why: String) {
        stderr_line(&format!(
            "clshim: warning: {why}; no more trace records from pid {}",
            std::process::id()
        ));
        if self.fd >= 0 {
            // SAFETY: fd is ours.
            unsafe { libc::close(self.fd) };
        }
        self.fd = -1;
        self.disabled = true;
    }

    fn open(&mut self, stem: &str) -> Option<()> {
        let dir = self.dir.clone()?;
        if let Err(e) = std::fs::create_dir_all(&dir) {
            self.give_up(format!(
                "cannot create trace directory {}: {e}",
                dir.display()
            ));
            return None;
        }
        for n in 0..1000 {
            let name = if n == 0 {
                format!("{stem}.jsonl")
            } else {
                format!("{stem}.{n}.jsonl")
            };
            let path = dir.join(name);
            match open_exclusive(&path, self.mode) {
                Ok(fd) => {
                    self.fd = fd;
                    self.path = Some(path);
                    return Some(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    self.give_up(format!("cannot create trace file {}: {e}", path.display()));
                    return None;
                }
            }
        }
        self.give_up(format!(
            "no free trace file name for {stem} in {}",
            dir.display()
        ));
        None
    }

    /// Appends `line` (one JSON object, no newline), creating the file first with `stem`
    /// as its name and `header()` as its first line.
    pub fn append(
        &mut self,
        stem: impl FnOnce() -> String,
        header: impl FnOnce() -> String,
        line: &str,
    ) {
        let pid = std::process::id();
        if pid != self.pid {
            // A forked child: the inherited descriptor is the parent's file.
            if self.fd >= 0 {
                // SAFETY: closes the child's copy of the descriptor only.
                unsafe { libc::close(self.fd) };
            }
            *self = TraceFile::new(self.dir.take(), self.mode);
        }
        if self.disabled || self.dir.is_none() {
            return;
        }
        if self.fd < 0 {
            if self.open(&stem()).is_none() {
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
        } else if self.removed() {
            let why = format!("trace file {} was removed", self.path_text());
            self.give_up(why);
            return;
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

    fn path_text(&self) -> String {
        self.path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }

    fn removed(&self) -> bool {
        // SAFETY: st is plain data filled by fstat on our descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        unsafe { libc::fstat(self.fd, &mut st) == 0 && st.st_nlink == 0 }
    }
}

impl Drop for TraceFile {
    fn drop(&mut self) {
        if self.fd >= 0 && self.pid == std::process::id() {
            // SAFETY: fd is ours.
            unsafe { libc::close(self.fd) };
        }
    }
}
