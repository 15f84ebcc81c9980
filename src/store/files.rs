//! The store's file operations, each safe against what else may sit in a store folder
//! (a link, a FIFO, a file being written by another rank, another user's file):
//! directories are opened without following a link, files are read bounded, without
//! following a link and without blocking on a FIFO, and either is refused unless it is the
//! user's own and no one else may write it (`clshim_format::store::not_users_alone`: an
//! entry is code the application loads, a request says what a warm step starts, so what
//! another user could have written is another user's code); every write goes
//! to a temporary name (created exclusively) and is renamed into place, so a reader sees a
//! whole file or none, with any number of processes on one node or on NFS. A write that
//! fails costs the caller nothing but its own error.
// On macOS the warm step and the program cache are not built: what only they use is idle.
#![cfg_attr(target_os = "macos", allow(dead_code, unused_imports))]

use std::ffi::{c_int, c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Directories of the store: the owner's only, whatever the application's umask.
pub const DIR_MODE: u32 = 0o700;
/// Files of the store: they hold program sources, so the owner's only.
pub const FILE_MODE: u32 = 0o600;

/// An open descriptor, closed when dropped.
pub struct Fd(pub c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: a descriptor this module opened and still owns.
        unsafe { libc::close(self.0) };
    }
}

fn cstr(s: &[u8]) -> std::io::Result<CString> {
    CString::new(s).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

fn last_error<T>() -> std::io::Result<T> {
    Err(std::io::Error::last_os_error())
}

/// Opens a directory (creating it, and its parents, with [`DIR_MODE`] when `create`),
/// not following a symbolic link at its last component, and refuses one that is not the
/// user's own or that its group or others may write to (the error says why and what to
/// do; the caller names the directory).
pub fn open_dir(path: &Path, create: bool) -> std::io::Result<Fd> {
    if create {
        let missing: Vec<&Path> = path
            .ancestors()
            .take_while(|a| !a.as_os_str().is_empty() && a.symlink_metadata().is_err())
            .collect();
        for dir in missing.iter().rev() {
            make_dir_at(libc::AT_FDCWD, &cstr(dir.as_os_str().as_bytes())?)?;
        }
    }
    let c = cstr(path.as_os_str().as_bytes())?;
    open_dir_at(libc::AT_FDCWD, &c)
}

/// [`open_dir`] for the store itself: a store of the user's that others may read (made by
/// hand, or under an earlier clshim, 0755) holds program sources, so it is made the user's
/// alone (0700), through the descriptor opened without following a link.
pub fn open_store(path: &Path, create: bool) -> std::io::Result<Fd> {
    let fd = open_dir(path, create)?;
    // SAFETY: plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor; `st` writable.
    if unsafe { libc::fstat(fd.0, &mut st) } == 0 && st.st_mode as u32 & 0o077 != 0 {
        // SAFETY: an open descriptor of a folder the user owns (checked by open_dir).
        if unsafe { libc::fchmod(fd.0, DIR_MODE as libc::mode_t) } != 0 {
            return last_error();
        }
        log::warn!(
            "native store {}: others could read it (mode {:04o}): made yours alone (0700)",
            path.display(),
            st.st_mode as u32 & 0o7777
        );
    }
    Ok(fd)
}

/// Opens (creating when `create`) the directory `name` below `dir`, with the same checks.
pub fn open_sub(dir: &Fd, name: &str, create: bool) -> std::io::Result<Fd> {
    let c = cstr(name.as_bytes())?;
    if create {
        make_dir_at(dir.0, &c)?;
    }
    open_dir_at(dir.0, &c)
}

/// Why another user could rename or replace something inside the folder `dir` (given by
/// its canonical name, with no link in it), or None: each folder from `/` down to `dir`
/// must be root's or the user's, and one that its group or others may write must be
/// sticky (as `/tmp` is), where only a file's owner may rename it. A folder of the user's
/// below such a chain keeps its name: what is done there by name reaches the folder that
/// was checked.
pub fn ancestors_not_others(dir: &Path) -> Option<String> {
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    let mut at = std::path::PathBuf::new();
    for part in dir.components() {
        at.push(part);
        let m = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) => return Some(format!("{}: {e}", at.display())),
        };
        use std::os::unix::fs::MetadataExt;
        if !m.is_dir() {
            return Some(format!("{}: not a folder", at.display()));
        }
        if m.uid() != 0 && m.uid() != me {
            return Some(format!("{} is owned by uid {}", at.display(), m.uid()));
        }
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Some(format!(
                "{} may be written by others and is not sticky (mode {:04o})",
                at.display(),
                m.mode() & 0o7777
            ));
        }
    }
    None
}

/// The temporary folder (`$TMPDIR`, else `/tmp`) by its canonical name, where what this
/// user makes keeps its name (no other user can rename or replace it: see
/// [`ancestors_not_others`]), or why it is not such a folder. pocl compiles in what is made
/// there, and a folder another user could swap mid-compile would hand them the compile's
/// files, and what it then keeps.
pub fn private_temp_dir() -> Result<std::path::PathBuf, String> {
    let tmp = std::env::var_os("TMPDIR")
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "/tmp".into());
    let tmp =
        std::fs::canonicalize(&tmp).map_err(|e| format!("{}: {e}", Path::new(&tmp).display()))?;
    match ancestors_not_others(&tmp) {
        Some(why) => Err(why),
        None => Ok(tmp),
    }
}

/// Why what the folder `rel` (relative, plain names) of pocl's kernel cache `cache` holds
/// could be another user's doing, or None: the cache and every folder above it pass
/// [`ancestors_not_others`], and every folder from the cache down to `rel`, `rel` included,
/// is a folder (not a link) of the user's alone. A cache that others may add to (sticky
/// and writable by all, as `/tmp` is) holds their folders beside the user's: a level
/// folder of theirs lets them rename what the user's pocl made below it, and a program
/// folder of theirs makes the user's pocl compile their bitcode into kernels of the
/// user's. What is then read below `rel` by name is what the user's processes wrote.
pub fn below_not_others(cache: &Path, rel: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let mut at = match std::fs::canonicalize(cache) {
        Ok(c) => c,
        Err(e) => return Some(format!("{}: {e}", cache.display())),
    };
    if let Some(why) = ancestors_not_others(&at) {
        return Some(why);
    }
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    for part in rel.components() {
        let std::path::Component::Normal(name) = part else {
            return Some(format!("{}: not a folder of pocl's cache", rel.display()));
        };
        at.push(name);
        let m = match std::fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) => return Some(format!("{}: {e}", at.display())),
        };
        if !m.is_dir() {
            return Some(format!("{}: not a folder", at.display()));
        }
        if m.uid() != me {
            return Some(format!("{} is owned by uid {}", at.display(), m.uid()));
        }
        if m.mode() & 0o022 != 0 {
            return Some(format!(
                "{} may be written by others (mode {:04o})",
                at.display(),
                m.mode() & 0o7777
            ));
        }
    }
    None
}

/// A temporary name for `name` in a store folder, unique to this process and call
/// (`.tmp-<name>-<pid>-<nanos>-<n>`): what a writer killed before its rename leaves, which
/// the cap removes an hour on.
pub fn temporary_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        ".tmp-{name}-{}-{nanos}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Makes the file `name` in `dir`, new (never one that exists, nor through a link),
/// [`FILE_MODE`], open for writing.
pub fn create_new(dir: &Fd, name: &std::ffi::CStr) -> std::io::Result<Fd> {
    // SAFETY: `dir` is open, `name` a valid NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.0,
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            FILE_MODE as libc::c_uint,
        )
    };
    if fd < 0 {
        return last_error();
    }
    Ok(Fd(fd))
}

/// Makes the directory `path` with exactly [`DIR_MODE`] (one that exists is left as it is).
pub fn make_dir(path: &Path) -> std::io::Result<()> {
    make_dir_at(libc::AT_FDCWD, &cstr(path.as_os_str().as_bytes())?)
}

/// How deep a copied folder goes (pocl's program folder: kernel, then specialisation).
const MAX_COPY_DEPTH: usize = 6;

/// Copies the regular files and folders below `from` into the existing folder `to`,
/// never following or copying a link; each file whole, as it is when read (pocl writes its
/// kernel cache's files under a temporary name and renames them into place), and only the
/// user's alone (a compile another user could have written is theirs, not pocl's).
/// Returns whether everything was copied: false after any error (a full disk, a file gone
/// meanwhile) or anything not copied (a link, a folder too deep, a file or folder others
/// may write), and then `to` holds part of it, which a caller must not put where pocl
/// reads (a truncated `program.bc` fails a build that would succeed without clshim).
pub fn copy_tree(from: &Path, to: &Path) -> bool {
    fn alone(p: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: no arguments.
        let me = unsafe { libc::geteuid() };
        p.symlink_metadata().is_ok_and(|m| {
            clshim_format::store::not_users_alone(m.is_dir(), m.uid(), m.mode(), me).is_none()
        })
    }
    fn walk(from: &Path, to: &Path, depth: usize) -> bool {
        if !alone(from) {
            return false;
        }
        let Ok(entries) = std::fs::read_dir(from) else {
            return false;
        };
        let mut whole = true;
        for e in entries {
            let Ok(e) = e else { return false };
            let Ok(t) = e.file_type() else { return false };
            if !alone(&e.path()) {
                return false;
            }
            let dest = to.join(e.file_name());
            whole &= if t.is_dir() && depth < MAX_COPY_DEPTH {
                make_dir(&dest).is_ok() && walk(&e.path(), &dest, depth + 1)
            } else if t.is_file() {
                std::fs::File::open(e.path())
                    .and_then(|mut inp| {
                        use std::os::unix::fs::OpenOptionsExt;
                        let mut out = std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .mode(FILE_MODE)
                            .custom_flags(libc::O_NOFOLLOW)
                            .open(&dest)?;
                        std::io::copy(&mut inp, &mut out)
                    })
                    .is_ok()
            } else {
                false
            };
            if !whole {
                return false;
            }
        }
        whole
    }
    walk(from, to, 0)
}

/// Makes the directory `name` relative to `at` with exactly [`DIR_MODE`] (one that exists
/// is left as it is). The umask can take the owner's bits from the mode `mkdir` is given
/// (under `umask 0277` a folder made 0700 is 0500, a store its owner cannot write), so
/// the folder made is set to the mode after, through a descriptor opened without
/// following a link, so that nothing put in its place is changed instead.
fn make_dir_at(at: c_int, name: &std::ffi::CStr) -> std::io::Result<()> {
    // SAFETY: `at` is open (or AT_FDCWD); `name` a valid NUL-terminated name.
    if unsafe { libc::mkdirat(at, name.as_ptr(), DIR_MODE as libc::mode_t) } != 0 {
        return match std::io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EEXIST) => Ok(()),
            // sshfs answers a mkdir of a name another host has just made, which its own
            // cache has not seen, with EPERM (the SFTP server's generic failure): the
            // folder is there all the same (its owner and mode are checked on opening).
            _ if folder_at(at, name) => Ok(()),
            e => Err(e),
        };
    }
    let fd = open_dir_nofollow(at, name)?;
    // SAFETY: an open descriptor.
    if unsafe { libc::fchmod(fd.0, DIR_MODE as libc::mode_t) } != 0 {
        return last_error();
    }
    Ok(())
}

/// Whether `name` relative to `at` is a folder (not followed if a link).
fn folder_at(at: c_int, name: &std::ffi::CStr) -> bool {
    // SAFETY: plain data filled by fstatat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `at` is open (or AT_FDCWD); `name` a valid name; `st` writable.
    let found = unsafe { libc::fstatat(at, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    found == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Opens the directory `name` relative to `at` (a directory or `AT_FDCWD`), not following
/// a link at its last component, and checks it is the user's alone.
fn open_dir_at(at: libc::c_int, name: &std::ffi::CStr) -> std::io::Result<Fd> {
    let fd = open_dir_nofollow(at, name)?;
    check_dir(&fd)?;
    Ok(fd)
}

/// Opens the directory `name` relative to `at` (a directory or `AT_FDCWD`), not following
/// a link at its last component.
fn open_dir_nofollow(at: libc::c_int, name: &std::ffi::CStr) -> std::io::Result<Fd> {
    // SAFETY: `at` is open (or AT_FDCWD); `name` a valid NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            at,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return last_error();
    }
    Ok(Fd(fd))
}

fn check_dir(fd: &Fd) -> std::io::Result<()> {
    // SAFETY: plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor.
    if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
        return last_error();
    }
    match not_users_alone(true, &st) {
        Some(why) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            why,
        )),
        None => Ok(()),
    }
}

/// Why what `st` describes is not the user's alone (None: it is).
fn not_users_alone(dir: bool, st: &libc::stat) -> Option<String> {
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    #[allow(clippy::unnecessary_cast)] // u16 on macOS
    let mode = st.st_mode as u32;
    clshim_format::store::not_users_alone(dir, st.st_uid, mode, me)
}

/// Whether `e` is this module's refusal of a directory that is not the user's alone (as
/// opposed to the system's error).
pub fn refused(e: &std::io::Error) -> bool {
    e.raw_os_error().is_none() && e.kind() == std::io::ErrorKind::PermissionDenied
}

/// Takes an exclusive `flock` on the folder `dir` (held until its descriptor closes):
/// Ok(true) when taken, Ok(false) when another holds it and `wait` is false. Err where the
/// filesystem has no such locks.
pub fn lock_exclusive(dir: &Fd, wait: bool) -> std::io::Result<bool> {
    let how = if wait {
        libc::LOCK_EX
    } else {
        libc::LOCK_EX | libc::LOCK_NB
    };
    loop {
        // SAFETY: an open descriptor.
        if unsafe { libc::flock(dir.0, how) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if !wait => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Whether `name` exists below `dir` (as anything: a link is not followed).
pub fn exists(dir: &Fd, name: &str) -> bool {
    let Ok(c) = cstr(name.as_bytes()) else {
        return false;
    };
    // SAFETY: plain data filled by fstatat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is open, `c` a valid name, `st` writable.
    unsafe { libc::fstatat(dir.0, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0 }
}

/// The modification time (seconds) of `name` below `dir`, a link not followed.
pub fn modified(dir: &Fd, name: &str) -> Option<i64> {
    let c = cstr(name.as_bytes()).ok()?;
    // SAFETY: plain data filled by fstatat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is open, `c` a valid name, `st` writable.
    let r = unsafe { libc::fstatat(dir.0, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    (r == 0).then_some(st.st_mtime)
}

/// Sets the modification time of `name` below `dir` to now (a link is not followed).
pub fn touch(dir: &Fd, name: &str) {
    let Ok(c) = cstr(name.as_bytes()) else {
        return;
    };
    // SAFETY: `dir` is open, `c` a valid name; NULL times mean now.
    unsafe {
        libc::utimensat(
            dir.0,
            c.as_ptr(),
            std::ptr::null(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
}

/// Removes `name` below `dir` (a file or a link, never what a link names).
pub fn remove(dir: &Fd, name: &str) -> bool {
    let Ok(c) = cstr(name.as_bytes()) else {
        return false;
    };
    // SAFETY: `dir` is open, `c` a valid name.
    unsafe { libc::unlinkat(dir.0, c.as_ptr(), 0) == 0 }
}

/// Opens the regular file `name` below `dir` for reading, without following a link and
/// without blocking on a FIFO planted there, and only if it is the user's alone; with its
/// length. Ok(None): no such file.
fn open_regular(dir: &Fd, name: &str) -> Result<Option<(Fd, u64)>, String> {
    let c = cstr(name.as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: `dir` is open, `c` a valid name. O_NONBLOCK: a FIFO planted there must not
    // block the open.
    let fd = unsafe {
        libc::openat(
            dir.0,
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            Some(libc::ELOOP) => Err("a symbolic link".into()),
            _ => Err(format!("cannot open: {e}")),
        };
    }
    let fd = Fd(fd);
    // SAFETY: plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor.
    if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
        return Err("cannot stat".into());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file".into());
    }
    // Checked on the open file, which is what is read, whatever the name leads to later.
    if let Some(why) = not_users_alone(false, &st) {
        return Err(why);
    }
    Ok(Some((fd, st.st_size as u64)))
}

/// Up to `len` bytes from the start of an open file (fewer if it is shorter).
fn read_at_most(fd: &Fd, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: `buf[got..]` is writable for its length.
        let n = unsafe {
            libc::pread(
                fd.0,
                buf[got..].as_mut_ptr() as *mut c_void,
                buf.len() - got,
                got as libc::off_t,
            )
        };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            break;
        }
        got += n as usize;
    }
    buf.truncate(got);
    buf
}

/// Reads the regular file `name` below `dir` whole (at most `max` bytes, else an error),
/// without following a link; when `touch`, sets its modification time to now (least
/// recently used goes first). Ok(None): there is no such file.
pub fn read_file(dir: &Fd, name: &str, max: u64, touch: bool) -> Result<Option<Vec<u8>>, String> {
    let Some((fd, size)) = open_regular(dir, name)? else {
        return Ok(None);
    };
    if size > max {
        return Err(format!("{size} bytes, over the limit"));
    }
    let buf = read_at_most(&fd, size as usize);
    if touch {
        // SAFETY: an open descriptor; NULL times mean now.
        unsafe { libc::futimens(fd.0, std::ptr::null()) };
    }
    Ok(Some(buf))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` as `name` below `dir`, completely or not at all: to a temporary name
/// (created exclusively, not following links, with [`FILE_MODE`]), synced when `sync` (an
/// entry; a request is checked by its own checksum when read, and the application must
/// not wait for a disk), then renamed. When `name` already exists it is kept unless
/// `replace` (a complete file by the same name is as good as this one).
pub fn write_atomic(
    dir: &Fd,
    name: &str,
    bytes: &[u8],
    replace: bool,
    sync: bool,
) -> std::io::Result<()> {
    if !replace && exists(dir, name) {
        return Ok(());
    }
    if over_file_size_limit(bytes.len()) {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    }
    let tmp = temporary_name(name);
    let ctmp = cstr(tmp.as_bytes())?;
    let cname = cstr(name.as_bytes())?;
    let fd = create_new(dir, &ctmp)?;
    let result = (|| {
        write_all(&fd, bytes)?;
        // SAFETY: an open descriptor.
        if sync && unsafe { libc::fsync(fd.0) } != 0 {
            return last_error();
        }
        drop(fd);
        // SAFETY: `dir` is open; both names valid.
        if unsafe { libc::renameat(dir.0, ctmp.as_ptr(), dir.0, cname.as_ptr()) } != 0 {
            return last_error();
        }
        Ok(())
    })();
    if result.is_err() {
        remove(dir, &tmp);
    }
    result
}

/// Writes `bytes` as the new file `name` below `dir` (never one that exists, nor through a
/// link), with exactly `mode`: a file of a folder no one reads until it is renamed into
/// place whole (a kept compile unpacked into pocl's cache).
pub fn write_new(dir: &Fd, name: &std::ffi::OsStr, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    if over_file_size_limit(bytes.len()) {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    }
    let fd = create_new(dir, &cstr(name.as_bytes())?)?;
    write_all(&fd, bytes)?;
    // SAFETY: an open descriptor.
    if unsafe { libc::fchmod(fd.0, mode as libc::mode_t) } != 0 {
        return last_error();
    }
    Ok(())
}

/// Writes all of `bytes` to `fd`, going on after a signal interrupts a write.
fn write_all(fd: &Fd, bytes: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: `bytes[done..]` is readable for its length.
        let n = unsafe {
            libc::write(
                fd.0,
                bytes[done..].as_ptr() as *const c_void,
                bytes.len() - done,
            )
        };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n <= 0 {
            return last_error();
        }
        done += n as usize;
    }
    Ok(())
}

/// Whether a file of `len` bytes would pass the process's file-size limit (`ulimit -f`):
/// writing past it raises SIGXFSZ, which ends a process that does not handle it, and the
/// application must never pay for a store write.
fn over_file_size_limit(len: usize) -> bool {
    // SAFETY: plain data filled by getrlimit.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is writable.
    if unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut r) } != 0 {
        return true;
    }
    r.rlim_cur != libc::RLIM_INFINITY && len as u64 >= r.rlim_cur as u64
}

/// The names (and sizes and modification times, in seconds and in nanoseconds) of the
/// plain files below `dir` whose names end with `suffix` (temporary files start with a
/// dot and are left out).
pub fn list(path: &Path, suffix: &str) -> Vec<(String, u64, i64, i64)> {
    let Ok(rd) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if name.starts_with('.') || !name.ends_with(suffix) {
                return None;
            }
            let m = e.path().symlink_metadata().ok()?;
            use std::os::unix::fs::MetadataExt;
            Some((
                name,
                m.len(),
                m.mtime(),
                m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ))
        })
        .collect()
}

/// Now, on the clock of the filesystem of `dir` (the server's, on NFS): the modification
/// time of a file made there (and removed at once). Claims' and leases' times are that
/// clock's, so hosts whose own clocks drift still agree on their age.
pub fn store_now(dir: &Fd) -> Option<i64> {
    let name = std::ffi::CString::new(temporary_name("clock")).ok()?;
    let fd = create_new(dir, &name).ok()?;
    // SAFETY: plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor; the directory and the name made above.
    let ok = unsafe {
        let ok = libc::fstat(fd.0, &mut st) == 0;
        libc::unlinkat(dir.0, name.as_ptr(), 0);
        ok
    };
    ok.then_some(st.st_mtime)
}
