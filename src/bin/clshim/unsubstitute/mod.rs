//! `clshim unsubstitute [--remove] [--cross-filesystems] DIR...`: the way back from
//! `substitute`. It walks each DIR (an application's binary cache), asks `binary_scan` what
//! every regular file holds, lists the files that hold clshim binaries and, only with
//! `--remove`, removes the application cache entries among them (a file that is a clshim
//! binary, or one in a cache entry layout `binary_scan` knows), so that an application
//! with no fallback after `CL_INVALID_BINARY` finds a cache miss instead and builds from
//! source. Other files that hold clshim binaries (an archive or a backup of a cache, a core
//! dump, a log) are listed as `inside` and kept, and so is a file with other hard links,
//! where removing one name would leave the binary under the others. Removal is all it
//! does: it never writes a driver's binary in a file's place. Paths are printed with
//! their control characters escaped (`terminal`).
//!
//! The walk trusts nothing in the tree: every directory is opened relative to its parent's
//! descriptor with `O_NOFOLLOW | O_DIRECTORY` and every file with `O_NOFOLLOW | O_NONBLOCK`,
//! after `fstatat(AT_SYMLINK_NOFOLLOW)` said it is a directory or a regular file, and the
//! descriptor's `fstat` must name the same inode; so a symbolic link is never followed (to a
//! directory or to a file), a FIFO or device is never opened, and a path swapped for a link
//! between the check and the use is caught. Removal is `unlinkat` in the directory's own
//! descriptor after the same inode check. By default the walk stays on each DIR's
//! filesystem, as `find -xdev` does (a mount point inside a cache is someone else's data);
//! `--cross-filesystems` enters them. A DIR that is itself a symbolic link is refused.
//!
//! pyopencl (before 2024.2.3) keeps each cache entry as a folder holding `binary`, `info`
//! and `source.cl`; an entry whose `binary` is missing makes it warn on every load, so an
//! entry whose `binary` is a clshim binary is removed whole (its three files and the folder).

mod binary_scan;

use crate::cli::UnsubstituteOpts;
use crate::terminal;
use binary_scan::Found;
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::ExitCode;

/// Directories nested deeper than this under a DIR are not entered (one descriptor is open
/// per level).
const MAX_DEPTH: usize = 64;
/// The file names of one pyopencl cache entry.
const PYOPENCL_ENTRY: &[&str] = &["binary", "info", "source.cl"];

/// What the walk found and did, for the summary and the exit status.
#[derive(Default)]
struct Tally {
    found: usize,
    removed: usize,
    not_removed: usize,
    skipped: usize,
    /// Files that hold clshim binaries inside other data: listed, kept.
    inside: usize,
}

/// A path as printed: its control characters escaped.
fn shown(p: &Path) -> String {
    terminal::text(&p.display().to_string()).into_owned()
}

struct Walk<'a> {
    opts: &'a UnsubstituteOpts,
    tally: Tally,
    out: io::StdoutLock<'static>,
}

/// Runs the subcommand; exit status 0 when clshim binaries were found (and, with
/// `--remove`, all removed), 1 when none were found, 2 on a DIR that cannot be walked,
/// 3 when some could not be removed.
pub fn main(opts: UnsubstituteOpts) -> ExitCode {
    let mut w = Walk {
        opts: &opts,
        tally: Tally::default(),
        out: io::stdout().lock(),
    };
    let mut bad_dir = false;
    for dir in &opts.dirs {
        match open_root(dir) {
            Ok((fd, dev)) => {
                w.walk_dir(&fd, dir, dev, 0);
            }
            Err(why) => {
                eprintln!("clshim unsubstitute: {}: {why}", shown(dir));
                bad_dir = true;
            }
        }
    }
    let t = &w.tally;
    let _ = w.out.flush();
    if t.found == 0 {
        eprintln!("clshim unsubstitute: no clshim binaries found");
    } else if opts.remove {
        eprintln!(
            "clshim unsubstitute: removed {} of {} files holding clshim binaries",
            t.removed, t.found
        );
    } else {
        eprintln!(
            "clshim unsubstitute: {} files hold clshim binaries; give --remove to remove them",
            t.found
        );
    }
    if t.inside > 0 {
        eprintln!(
            "clshim unsubstitute: {} other files hold clshim binaries inside other data \
             (listed as 'inside'): not application cache entries, kept",
            t.inside
        );
    }
    if t.skipped > 0 {
        eprintln!(
            "clshim unsubstitute: {} entries skipped (listed above)",
            t.skipped
        );
    }
    if bad_dir {
        ExitCode::from(2)
    } else if t.not_removed > 0 {
        ExitCode::from(3)
    } else if t.found == 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Opens a DIR argument without following a link in its last component; returns the
/// descriptor and the filesystem's device number.
fn open_root(dir: &Path) -> Result<(OwnedFd, u64), String> {
    let c = cstring(dir.as_os_str()).ok_or("the name holds a NUL byte")?;
    let st = lstat_at(libc::AT_FDCWD, &c).map_err(|e| crate::library::describe(&e))?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => {}
        libc::S_IFLNK => {
            return Err("a symbolic link, not followed (give the directory it names)".into())
        }
        _ => return Err("not a directory".into()),
    }
    let fd =
        open_at(libc::AT_FDCWD, &c, libc::O_DIRECTORY).map_err(|e| crate::library::describe(&e))?;
    same_inode(&fd, &st).map_err(|e| e.to_string())?;
    Ok((fd, st.st_dev as u64))
}

impl Walk<'_> {
    fn skip(&mut self, path: &Path, why: &str) {
        self.tally.skipped += 1;
        eprintln!("clshim unsubstitute: {}: skipped: {why}", shown(path));
    }

    /// Walks the directory `fd` (at `path`, on device `dev`). Returns whether it is a
    /// pyopencl entry whose binary was found (and, with `--remove`, whose files are gone).
    fn walk_dir(&mut self, fd: &OwnedFd, path: &Path, dev: u64, depth: usize) -> bool {
        let names = match list(fd) {
            Ok(n) => n,
            Err(e) => {
                self.skip(
                    path,
                    &format!("cannot list: {}", crate::library::describe(&e)),
                );
                return false;
            }
        };
        let entry = names.iter().any(|n| n.as_bytes() == b"binary")
            && names
                .iter()
                .all(|n| PYOPENCL_ENTRY.iter().any(|e| n.as_bytes() == e.as_bytes()));
        if entry && depth > 0 {
            if let Some(done) = self.pyopencl_entry(fd, path, &names) {
                return done;
            }
        }
        for name in names {
            let child = path.join(OsStr::from_bytes(name.as_bytes()));
            let st = match lstat_at(fd.as_raw_fd(), &name) {
                Ok(st) => st,
                Err(e) => {
                    self.skip(&child, &crate::library::describe(&e));
                    continue;
                }
            };
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => {
                    if st.st_dev as u64 != dev && !self.opts.cross_filesystems {
                        self.skip(
                            &child,
                            "on another filesystem (give --cross-filesystems to enter it)",
                        );
                        continue;
                    }
                    if depth + 1 >= MAX_DEPTH {
                        self.skip(&child, &format!("nested deeper than {MAX_DEPTH} levels"));
                        continue;
                    }
                    let sub = match open_at(fd.as_raw_fd(), &name, libc::O_DIRECTORY)
                        .and_then(|sub| same_inode(&sub, &st).map(|_| sub))
                    {
                        Ok(sub) => sub,
                        Err(e) => {
                            self.skip(
                                &child,
                                &format!("cannot open: {}", crate::library::describe(&e)),
                            );
                            continue;
                        }
                    };
                    let sub_dev = st.st_dev as u64;
                    if self.walk_dir(&sub, &child, sub_dev, depth + 1) && self.opts.remove {
                        // The entry's files are gone: the folder goes too (it fails, and
                        // stays, if something new appeared in it meanwhile).
                        // SAFETY: fd is an open directory and name a NUL-terminated string.
                        let rc = unsafe {
                            libc::unlinkat(fd.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR)
                        };
                        if rc != 0 {
                            let e = io::Error::last_os_error();
                            eprintln!(
                                "clshim unsubstitute: {}: folder kept: {}",
                                shown(&child),
                                crate::library::describe(&e)
                            );
                        }
                    }
                }
                libc::S_IFREG => {
                    if let Some(found) = self.scan(fd, &name, &st, &child) {
                        self.report_file(fd, &name, &st, &child, &found);
                    }
                }
                libc::S_IFLNK => self.skip(&child, "a symbolic link, not followed"),
                _ => self.skip(&child, "not a regular file, not opened"),
            }
        }
        false
    }

    /// Scans one regular file; None when it could not be read (reported).
    fn scan(&mut self, dir: &OwnedFd, name: &CStr, st: &libc::stat, path: &Path) -> Option<Found> {
        let fd = match open_at(dir.as_raw_fd(), name, 0)
            .and_then(|fd| same_inode(&fd, st).map(|_| fd))
        {
            Ok(fd) => fd,
            Err(e) => {
                self.skip(
                    path,
                    &format!("cannot read: {}", crate::library::describe(&e)),
                );
                return None;
            }
        };
        let file = File::from(fd);
        match binary_scan::scan(&file, st.st_size as u64) {
            Ok(f) => Some(f),
            Err(e) => {
                self.skip(
                    path,
                    &format!("cannot read: {}", crate::library::describe(&e)),
                );
                None
            }
        }
    }

    /// Prints what a file holds, and removes it when asked and it is an application cache
    /// entry holding a clshim binary with no other name.
    fn report_file(
        &mut self,
        dir: &OwnedFd,
        name: &CStr,
        st: &libc::stat,
        path: &Path,
        found: &Found,
    ) {
        let (what, layout) = match found {
            Found::Nothing => return,
            Found::MagicOnly { places, why } => {
                let _ = writeln!(
                    self.out,
                    "lookalike {}  (the bytes CLSHIMB\\0 at {places} place(s), but no valid clshim binary: {why}; kept)",
                    shown(path)
                );
                return;
            }
            Found::Is => ("is", String::new()),
            Found::Contains {
                framing: Some(f), ..
            } => ("contains", format!("  ({})", f.words())),
            Found::Contains {
                binaries,
                framing: None,
            } => {
                self.tally.inside += 1;
                let _ = writeln!(
                    self.out,
                    "inside    {}  ({binaries} clshim {} inside other data, in no cache entry \
                     layout clshim knows: an archive, a backup, a dump or a log?; kept)",
                    shown(path),
                    if *binaries == 1 { "binary" } else { "binaries" }
                );
                return;
            }
        };
        self.tally.found += 1;
        if !self.sole_name(st, what, path, &layout) {
            return;
        }
        let _ = writeln!(self.out, "{what:<9} {}{layout}", shown(path));
        if self.opts.remove {
            self.remove(dir, name, st, path);
        }
    }

    /// Whether the file has no other hard link; if it has, lists it as kept (removing one
    /// name would leave its binary under the others) and counts it as not removed.
    fn sole_name(&mut self, st: &libc::stat, what: &str, path: &Path, layout: &str) -> bool {
        #[allow(clippy::useless_conversion)] // st_nlink is u16 on macOS
        let others = u64::from(st.st_nlink).saturating_sub(1);
        if others == 0 {
            return true;
        }
        let _ = writeln!(
            self.out,
            "{what:<9} {}{layout}  ({others} other hard {}: removing this name would leave \
             the binary under {}; kept)",
            shown(path),
            if others == 1 { "link" } else { "links" },
            if others == 1 { "it" } else { "them" },
        );
        if self.opts.remove {
            self.tally.not_removed += 1;
            eprintln!(
                "clshim unsubstitute: {}: not removed: the file has {others} other hard \
                 {}; remove every name together (find DIR -samefile {})",
                shown(path),
                if others == 1 { "link" } else { "links" },
                shown(path)
            );
        }
        false
    }

    /// Removes `name` from `dir` if it is still the file that was scanned.
    fn remove(&mut self, dir: &OwnedFd, name: &CStr, st: &libc::stat, path: &Path) -> bool {
        let result = lstat_at(dir.as_raw_fd(), name).and_then(|now| {
            if now.st_ino != st.st_ino || now.st_dev != st.st_dev {
                return Err(io::Error::other("replaced since it was read"));
            }
            // SAFETY: dir is an open directory and name a NUL-terminated string; unlinkat
            // removes the entry itself, never what a link names.
            if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                self.tally.removed += 1;
                true
            }
            Err(e) => {
                self.tally.not_removed += 1;
                eprintln!(
                    "clshim unsubstitute: {}: not removed: {}",
                    shown(path),
                    crate::library::describe(&e)
                );
                false
            }
        }
    }

    /// A folder holding only pyopencl's entry files: when its `binary` is a clshim binary,
    /// lists the entry (and with `--remove` removes its files) and returns Some(removed
    /// all); None when it is not such an entry (the caller walks it as any folder).
    fn pyopencl_entry(&mut self, fd: &OwnedFd, path: &Path, names: &[CString]) -> Option<bool> {
        let mut files = Vec::new();
        for name in names {
            let st = lstat_at(fd.as_raw_fd(), name).ok()?;
            if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return None;
            }
            files.push((name, st));
        }
        let (bname, bst) = files.iter().find(|(n, _)| n.as_bytes() == b"binary")?;
        let bpath = path.join("binary");
        match self.scan(fd, bname, bst, &bpath) {
            Some(Found::Is) => {}
            // Unreadable (reported once): the entry's other files are pyopencl's own.
            None => return Some(false),
            Some(_) => return None,
        }
        self.tally.found += 1;
        let layout = format!(
            "  (a pyopencl cache entry: the folder {} goes whole)",
            shown(path)
        );
        if !self.sole_name(bst, "is", &bpath, &layout) {
            return Some(false);
        }
        let _ = writeln!(self.out, "is        {}{layout}", shown(&bpath));
        if !self.opts.remove {
            return Some(false);
        }
        // The binary first: once it is gone the entry can no longer hand a clshim binary
        // to anyone, whatever happens to the other two. The entry counts as one removal.
        let before = self.tally.removed;
        if !self.remove(fd, bname, bst, &bpath) {
            return Some(false);
        }
        let mut all = true;
        for (name, st) in files.iter().filter(|(n, _)| n.as_bytes() != b"binary") {
            let p = path.join(OsStr::from_bytes(name.as_bytes()));
            all &= self.remove(fd, name, st, &p);
        }
        self.tally.removed = before + 1;
        Some(all)
    }
}

fn cstring(s: &OsStr) -> Option<CString> {
    CString::new(s.as_bytes()).ok()
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
fn lstat_at(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: name is NUL-terminated and st points to writable memory of a stat's size.
    let rc = unsafe {
        libc::fstatat(
            dir,
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled st.
    Ok(unsafe { st.assume_init() })
}

/// `openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY | extra)`:
/// never follows a link in the last component, never blocks on a FIFO swapped in.
fn open_at(dir: RawFd, name: &CStr, extra: libc::c_int) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY
        | libc::O_NOFOLLOW
        | libc::O_NONBLOCK
        | libc::O_CLOEXEC
        | libc::O_NOCTTY
        | extra;
    // SAFETY: name is NUL-terminated; openat reads nothing else.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor just opened and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Fails unless `fd` is the inode `st` described (nothing was swapped in between).
fn same_inode(fd: &OwnedFd, st: &libc::stat) -> io::Result<()> {
    let mut now = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fd is open and now points to writable memory of a stat's size.
    if unsafe { libc::fstat(fd.as_raw_fd(), now.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it filled now.
    let now = unsafe { now.assume_init() };
    if now.st_ino != st.st_ino || now.st_dev != st.st_dev || now.st_mode != st.st_mode {
        return Err(io::Error::other("replaced while being opened"));
    }
    Ok(())
}

/// The names in directory `fd` (without `.` and `..`), sorted for a stable listing.
fn list(fd: &OwnedFd) -> io::Result<Vec<CString>> {
    // fdopendir takes the descriptor over: give it a duplicate.
    // SAFETY: fd is an open descriptor.
    let dup = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: dup is an open directory descriptor that the DIR stream now owns.
    let d = unsafe { libc::fdopendir(dup) };
    if d.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so dup is still ours to close.
        unsafe { libc::close(dup) };
        return Err(e);
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: d is an open DIR stream; errno is cleared to tell the end from an error.
        unsafe { *errno() = 0 };
        // SAFETY: d is an open DIR stream.
        let ent = unsafe { libc::readdir(d) };
        if ent.is_null() {
            // SAFETY: reading the thread's errno.
            let code = unsafe { *errno() };
            // SAFETY: d is open and closed once here.
            unsafe { libc::closedir(d) };
            if code != 0 {
                return Err(io::Error::from_raw_os_error(code));
            }
            break;
        }
        // SAFETY: readdir returned an entry whose d_name is NUL-terminated, valid until the
        // next readdir; it is copied at once.
        let name = unsafe { CStr::from_ptr((*ent).d_name.as_ptr()) };
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            names.push(name.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

#[cfg(target_os = "linux")]
fn errno() -> *mut libc::c_int {
    // SAFETY: __errno_location returns the calling thread's errno.
    unsafe { libc::__errno_location() }
}

#[cfg(target_os = "macos")]
fn errno() -> *mut libc::c_int {
    // SAFETY: __error returns the calling thread's errno.
    unsafe { libc::__error() }
}
