//! Kept sources (`CLSHIM_TRACE_SOURCES=1`): each distinct program source, option string
//! and embedded header source is stored once in `<trace dir>/sources/`, named by its
//! content (`<16 hex digits of fnv1a64>-<length>.<cl|opt|h>`), so that `clshim report`
//! can show what differs between the variants of a kernel and between runs. IL and
//! binaries are never stored (records keep their hash and length).
//!
//! Many ranks on many nodes write into one directory at once, without locks: a text is
//! written whole to a temporary name of this process, then hard-linked to its final name
//! (renamed where the filesystem has no hard links); a final name that exists already is
//! done, so readers only ever see complete files. The same rules as the trace files hold:
//! the `sources` directory and the files are never reached through a symbolic link (the
//! directory is opened with `O_NOFOLLOW`, names are created exclusively and resolved
//! relative to it), files get `CLSHIM_TRACE_MODE` (`trace_file::open_exclusive_at`). A
//! process stores at most [`MAX_KEPT_TEXTS`] texts and [`MAX_KEPT_BYTES`] bytes; past
//! that, or at the first failure (read-only or full disk, a symbolic link in place of the
//! directory), it warns once and stores nothing more, and the application never notices.
//!
//! The names use the stable 64-bit hash the records already identify sources by, with the
//! length: two distinct texts of one length colliding among the few thousand texts of a
//! job has a chance below 1e-12, and a collision would only mislabel a diagnostic (the
//! first text keeps the name), never change what the application computes.

use crate::hash::fnv1a64;
use crate::lock::{ForkOrder, Lock};
use crate::logger::{stderr_line, write_fd};
use crate::schema;
use std::collections::HashSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Most bytes one process stores (texts found stored already cost nothing).
pub const MAX_KEPT_BYTES: usize = 256 << 20;
/// Most texts one process stores or finds stored.
pub const MAX_KEPT_TEXTS: usize = 100_000;
/// The subdirectory of the trace directory.
pub const DIR: &str = "sources";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Source,
    Options,
    Header,
}

impl Kind {
    pub fn extension(self) -> &'static str {
        match self {
            Kind::Source => "cl",
            Kind::Options => "opt",
            Kind::Header => "h",
        }
    }
}

/// The reference records carry: `<16 hex digits>-<length>`.
pub fn reference(text: &[u8]) -> String {
    format!("{:016x}-{}", fnv1a64(text), text.len())
}

struct State {
    /// (kind, reference) of every text this process stored or found stored.
    known: HashSet<(Kind, String)>,
    bytes: usize,
    /// After the cap or a failure: nothing more is stored.
    stopped: bool,
    /// Numbers this process's temporary names.
    next_tmp: u64,
}

pub struct Keeper {
    trace_dir: PathBuf,
    mode: u32,
    /// Random per keeper: temporary names never meet another process's.
    instance: String,
    /// Held across `fork()` (`ForkOrder::Sources`).
    state: &'static Lock<State>,
}

/// A descriptor closed when dropped.
struct Fd(i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: a descriptor this module opened and nobody else holds.
        unsafe { libc::close(self.0) };
    }
}

fn c_name(name: &str) -> Result<CString, String> {
    CString::new(name).map_err(|_| format!("bad name {name:?}"))
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

impl Keeper {
    pub fn new(trace_dir: &Path, mode: u32) -> Keeper {
        Keeper {
            trace_dir: trace_dir.to_path_buf(),
            mode,
            instance: crate::process::new_instance(),
            state: Lock::new_fork_held(
                ForkOrder::Sources,
                State {
                    known: HashSet::new(),
                    bytes: 0,
                    stopped: false,
                    next_tmp: 0,
                },
            ),
        }
    }

    /// Keeps `text` (once per process and directory) and returns its reference, whether
    /// or not it could be stored.
    pub fn keep(&self, kind: Kind, text: &[u8]) -> String {
        let r = reference(text);
        let mut st = self.state.lock();
        if st.stopped || st.known.contains(&(kind, r.clone())) {
            return r;
        }
        if st.known.len() >= MAX_KEPT_TEXTS || st.bytes + text.len() > MAX_KEPT_BYTES {
            st.stopped = true;
            drop(st);
            self.warn(format!(
                "kept {MAX_KEPT_TEXTS} texts or {} MiB of sources already (the per-process cap)",
                MAX_KEPT_BYTES >> 20
            ));
            return r;
        }
        st.known.insert((kind, r.clone()));
        st.bytes += text.len();
        st.next_tmp += 1;
        let tmp = format!(
            ".tmp.{}.{}.{}",
            std::process::id(),
            self.instance,
            st.next_tmp
        );
        drop(st);
        let name = format!("{r}.{}", kind.extension());
        if let Err(why) = self.store(&name, &tmp, text) {
            let first = !std::mem::replace(&mut self.state.lock().stopped, true);
            if first {
                self.warn(why);
            }
        }
        r
    }

    fn warn(&self, why: String) {
        stderr_line(&format!(
            "clshim: warning: {why}; no more sources kept from pid {}",
            std::process::id()
        ));
    }

    /// Opens (making it first if needed) the `sources` directory, never through a link.
    fn open_dir(&self) -> Result<Fd, String> {
        let dir = self.trace_dir.join(DIR);
        let _ = std::fs::create_dir_all(&self.trace_dir);
        let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| "bad path".to_string())?;
        // Searchable by whom the files are readable by.
        let read = self.mode & 0o044;
        let dir_mode = 0o700 | read | (read >> 2);
        // SAFETY: c is a valid NUL-terminated path.
        let made = unsafe { libc::mkdir(c.as_ptr(), dir_mode as libc::mode_t) } == 0;
        if !made && last_error().kind() != std::io::ErrorKind::AlreadyExists {
            return Err(format!("cannot create {dir:?}: {}", last_error()));
        }
        // SAFETY: as above.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(format!("cannot open {dir:?}: {}", last_error()));
        }
        if made {
            // The umask may have removed bits the user asked for explicitly.
            // SAFETY: fd was just opened on the directory made here.
            unsafe { libc::fchmod(fd, dir_mode as libc::mode_t) };
        }
        Ok(Fd(fd))
    }

    /// Stores `text` as `name` in the sources directory through the temporary `tmp`.
    fn store(&self, name: &str, tmp: &str, text: &[u8]) -> Result<(), String> {
        let dir = self.open_dir()?;
        let (c_final, c_tmp) = (c_name(name)?, c_name(tmp)?);
        // SAFETY: st is plain data that fstatat fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a directory descriptor, a valid name, a valid out-pointer.
        if unsafe { libc::fstatat(dir.0, c_final.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) }
            == 0
        {
            return Ok(()); // stored already (by this or another process)
        }
        let fd = crate::trace_file::open_exclusive_at(dir.0, Path::new(tmp), self.mode)
            .map_err(|e| format!("cannot create {:?}: {e}", self.trace_dir.join(DIR)))?;
        let written = write_fd(fd, text);
        let err = last_error();
        // SAFETY: fd was just opened here.
        let closed = unsafe { libc::close(fd) } == 0;
        let unlink_tmp = || {
            // SAFETY: a directory descriptor and a valid name of this process's own file.
            unsafe { libc::unlinkat(dir.0, c_tmp.as_ptr(), 0) };
        };
        if !written || !closed {
            unlink_tmp();
            return Err(format!(
                "cannot write into {:?}: {}",
                self.trace_dir.join(DIR),
                if written { last_error() } else { err }
            ));
        }
        // SAFETY: a directory descriptor and valid names; linkat follows no link (flags 0).
        let linked = unsafe { libc::linkat(dir.0, c_tmp.as_ptr(), dir.0, c_final.as_ptr(), 0) };
        if linked == 0 || last_error().kind() == std::io::ErrorKind::AlreadyExists {
            unlink_tmp();
            return Ok(());
        }
        // No hard links on this filesystem: a rename replaces a file that appeared
        // meanwhile, which holds the same text.
        // SAFETY: a directory descriptor and valid names.
        if unsafe { libc::renameat(dir.0, c_tmp.as_ptr(), dir.0, c_final.as_ptr()) } == 0 {
            return Ok(());
        }
        let e = last_error();
        unlink_tmp();
        Err(format!(
            "cannot name {name:?} in {:?}: {e}",
            self.trace_dir.join(DIR)
        ))
    }
}

/// What a build record says of its kept texts: the source (when the program has one),
/// the options and a compile's headers, each kept.
pub fn kept(
    k: &Keeper,
    source: Option<&[u8]>,
    options: Option<&[u8]>,
    headers: &[crate::recipe::Header],
) -> schema::Kept {
    schema::Kept {
        source: source.map(|t| k.keep(Kind::Source, t)),
        options: options.map(|o| k.keep(Kind::Options, o)),
        headers: headers
            .iter()
            .map(|h| schema::KeptHeader {
                name: String::from_utf8_lossy(&h.name).into_owned(),
                source: k.keep(Kind::Header, &h.source),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("clshim-sources-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn each_text_is_stored_once_by_its_content() {
        let d = scratch("once");
        let k = Keeper::new(&d, 0o640);
        let a = k.keep(Kind::Source, b"kernel void a() {}");
        assert_eq!(a, k.keep(Kind::Source, b"kernel void a() {}"));
        let o = k.keep(Kind::Options, b"-DN=4");
        let again = Keeper::new(&d, 0o640);
        assert_eq!(a, again.keep(Kind::Source, b"kernel void a() {}"));
        let mut names: Vec<String> = std::fs::read_dir(d.join(DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, vec![format!("{a}.cl"), format!("{o}.opt")]);
        let file = d.join(DIR).join(format!("{a}.cl"));
        assert_eq!(std::fs::read(&file).unwrap(), b"kernel void a() {}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_link_in_place_of_the_directory_stops_keeping() {
        let d = scratch("link");
        let elsewhere = scratch("elsewhere");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, d.join(DIR)).unwrap();
        let k = Keeper::new(&d, 0o600);
        k.keep(Kind::Source, b"x");
        k.keep(Kind::Source, b"y");
        assert!(k.state.lock().stopped);
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&elsewhere);
    }
}
