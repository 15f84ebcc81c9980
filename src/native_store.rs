//! The store of native binaries (`CLSHIM_NATIVE_STORE`): the driver's own binary of a
//! program that clshim hands out as a clshim binary, made after the job by `clshim warm`
//! (see `warm`), so that loading that clshim binary again takes the driver's binary in
//! 1-3 ms instead of building the recipe again (100+ ms a program through pocl's kernel
//! cache, which preprocesses the source to find its entry). This module owns the files:
//! their names, their format, how they are written and how they are checked.
//!
//! One file per (recipe, device, driver): `<store>/<key>.bin`, the key a 64-bit FNV-1a of
//! the recipe's whole encoding (text, options, headers, inputs), the device fingerprint
//! (platform, platform version, device name, driver version, device version) and the
//! driver library's identity (its GNU build-id, else its size, mtime and inode: pocl's
//! version strings do not change on a distribution rebuild). The file holds a header
//! (magic `CLSHIMNB`, format version, the key, fingerprint and driver identity, the
//! lengths of the recipe and of the payload, the payload's checksum and a checksum of the
//! header and recipe), the recipe's encoding (compared byte for byte at load, so a key
//! collision can never hand out another program's binary) and the payload: the driver's
//! binary. pocl checks nothing but a magic, a version and a device id, and crashes on a
//! truncated binary, so nothing is handed to the driver unless every length and checksum
//! holds. A file that fails a check is ignored and its reason recorded, never loaded.
//!
//! Requests: when `substitute` hands out a clshim binary for which no entry exists, the
//! library writes that clshim binary (it names its device by fingerprint and carries the
//! recipe) to `<store>/requests/<key>.req`, bounded in number and bytes; `clshim warm`
//! turns requests into entries. Every file is written to a temporary name, synced and
//! renamed (atomic on local filesystems and NFS; many ranks may write the same name, any
//! complete file is as good as another), created without following symbolic links, with
//! `CLSHIM_TRACE_MODE`'s permissions, below directories that must be the user's own and
//! not writable by others. Any failure (full disk, read-only store) is logged at debug
//! level and costs the application nothing.

use crate::cl::cl_device_id;
use crate::hash::Fnv1a;
use std::ffi::{c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

pub const MAGIC: &[u8; 8] = b"CLSHIMNB";
pub const VERSION: u32 = 1;
/// magic, version, flags, key, fingerprint, driver, recipe length, payload length,
/// payload checksum, header checksum.
pub const HEADER: usize = 8 + 4 + 4 + 8 * 7;
/// The largest entry read back: far beyond a real program's binary, small enough that a
/// damaged length never makes clshim allocate without bound.
pub const MAX_ENTRY: u64 = 1 << 30;
/// Requests waiting at once (files in `requests/`) and their bytes, at most.
pub const MAX_REQUESTS: usize = 1024;
pub const MAX_REQUEST_BYTES: u64 = 256 << 20;
pub const REQUESTS: &str = "requests";

/// What one entry stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    pub key: u64,
    pub fingerprint: u64,
    pub driver: u64,
}

impl Key {
    pub fn new(recipe: &[u8], fingerprint: u64, driver: u64) -> Key {
        let key = Fnv1a::default()
            .update(b"clshim-native-1\0")
            .update(&fingerprint.to_le_bytes())
            .update(&driver.to_le_bytes())
            .update(recipe)
            .finish();
        Key {
            key,
            fingerprint,
            driver,
        }
    }

    pub fn entry_name(&self) -> String {
        format!("{:016x}.bin", self.key)
    }

    pub fn request_name(&self) -> String {
        format!("{:016x}.req", self.key)
    }
}

/// An entry: the header, the recipe, the payload (written by `warm`, not built on macOS).
#[cfg_attr(target_os = "macos", allow(dead_code))]
pub fn encode(k: &Key, recipe: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + recipe.len() + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for v in [
        k.key,
        k.fingerprint,
        k.driver,
        recipe.len() as u64,
        payload.len() as u64,
        crate::hash::fnv1a64(payload),
    ] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let sum = Fnv1a::default().update(&out).update(recipe).finish();
    out.extend_from_slice(&sum.to_le_bytes());
    out.extend_from_slice(recipe);
    out.extend_from_slice(payload);
    out
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The payload of `bytes` if it is a complete, undamaged entry for exactly `k` and
/// `recipe`; else why not.
pub fn verify<'a>(bytes: &'a [u8], k: &Key, recipe: &[u8]) -> Result<&'a [u8], String> {
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err("not a native store entry (no header)".into());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if version != VERSION {
        return Err(format!("store format version {version}"));
    }
    if bytes[12..16] != [0; 4] {
        return Err("unknown flags".into());
    }
    let (recipe_len, payload_len) = (u64_at(bytes, 40), u64_at(bytes, 48));
    let total = (HEADER as u64)
        .checked_add(recipe_len)
        .and_then(|t| t.checked_add(payload_len));
    if total != Some(bytes.len() as u64) {
        return Err(format!(
            "length {} differs from the declared {}",
            bytes.len(),
            total.map_or("overflow".to_string(), |t| t.to_string())
        ));
    }
    let recipe_end = HEADER + recipe_len as usize;
    let sum = Fnv1a::default()
        .update(&bytes[..HEADER - 8])
        .update(&bytes[HEADER..recipe_end])
        .finish();
    if sum != u64_at(bytes, HEADER - 8) {
        return Err("header checksum mismatch".into());
    }
    if u64_at(bytes, 16) != k.key {
        return Err("another key than its name".into());
    }
    if u64_at(bytes, 24) != k.fingerprint {
        return Err("made for another device".into());
    }
    if u64_at(bytes, 32) != k.driver {
        return Err("made by another driver build".into());
    }
    if &bytes[HEADER..recipe_end] != recipe {
        return Err("made from another recipe".into());
    }
    let payload = &bytes[recipe_end..];
    if payload.is_empty() {
        return Err("empty payload".into());
    }
    if crate::hash::fnv1a64(payload) != u64_at(bytes, 56) {
        return Err("payload checksum mismatch".into());
    }
    Ok(payload)
}

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

/// The directory mode for files of `mode`: the owner's rwx, and x beside each r given.
pub fn dir_mode(mode: u32) -> u32 {
    0o700 | (mode & 0o066) | ((mode & 0o044) >> 2)
}

/// Opens a directory (creating it, and its parents, with `dir_mode(mode)` when `create`),
/// not following a symbolic link at its last component, and refuses one that is not the
/// user's own or that others may write to.
pub fn open_dir(path: &Path, create: bool, mode: u32) -> std::io::Result<Fd> {
    if create {
        use std::os::unix::fs::DirBuilderExt;
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true).mode(dir_mode(mode));
        b.create(path)?;
    }
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return last_error();
    }
    let fd = Fd(fd);
    check_dir(&fd)?;
    Ok(fd)
}

/// Opens (creating when `create`) the directory `name` below `dir`, with the same checks.
pub fn open_sub(dir: &Fd, name: &str, create: bool, mode: u32) -> std::io::Result<Fd> {
    let c = cstr(name.as_bytes())?;
    if create {
        // SAFETY: `dir` is open; `c` a valid name.
        let r = unsafe { libc::mkdirat(dir.0, c.as_ptr(), dir_mode(mode) as libc::mode_t) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return last_error();
        }
    }
    // SAFETY: as above.
    let fd = unsafe {
        libc::openat(
            dir.0,
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return last_error();
    }
    let fd = Fd(fd);
    check_dir(&fd)?;
    Ok(fd)
}

fn check_dir(fd: &Fd) -> std::io::Result<()> {
    // SAFETY: plain data filled by fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor.
    if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
        return last_error();
    }
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    if st.st_uid != me || st.st_mode & 0o002 != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the store directory is another user's, or others may write to it",
        ));
    }
    Ok(())
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

/// Removes `name` below `dir` (a file or a link, never what a link names).
pub fn remove(dir: &Fd, name: &str) -> bool {
    let Ok(c) = cstr(name.as_bytes()) else {
        return false;
    };
    // SAFETY: `dir` is open, `c` a valid name.
    unsafe { libc::unlinkat(dir.0, c.as_ptr(), 0) == 0 }
}

/// Reads the regular file `name` below `dir` whole (at most `max` bytes), without following
/// a link, and touches its modification time (least recently used goes first). Ok(None):
/// there is no such file.
pub fn read_file(dir: &Fd, name: &str, max: u64, touch: bool) -> Result<Option<Vec<u8>>, String> {
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
    if st.st_size as u64 > max {
        return Err(format!("{} bytes, over the limit", st.st_size));
    }
    let mut buf = vec![0u8; st.st_size as usize];
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
            buf.truncate(got);
            break;
        }
        got += n as usize;
    }
    if touch {
        // SAFETY: an open descriptor; NULL times mean now.
        unsafe { libc::futimens(fd.0, std::ptr::null()) };
    }
    Ok(Some(buf))
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `bytes` as `name` below `dir`, completely or not at all: to a temporary name
/// (created exclusively, not following links, with `mode`), synced when `sync` (an
/// entry; a request is checked by its own checksum when read, and the application must
/// not wait for a disk), then renamed. When `name` already exists it is kept unless
/// `replace` (a complete file by the same name is as good as this one).
pub fn write_atomic(
    dir: &Fd,
    name: &str,
    bytes: &[u8],
    mode: u32,
    replace: bool,
    sync: bool,
) -> std::io::Result<()> {
    if !replace && exists(dir, name) {
        return Ok(());
    }
    if over_file_size_limit(bytes.len()) {
        return Err(std::io::Error::from_raw_os_error(libc::EFBIG));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let tmp = format!(
        ".tmp-{name}-{}-{nanos}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let ctmp = cstr(tmp.as_bytes())?;
    let cname = cstr(name.as_bytes())?;
    // SAFETY: `dir` is open, `ctmp` a valid name.
    let fd = unsafe {
        libc::openat(
            dir.0,
            ctmp.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return last_error();
    }
    let result = (|| {
        let fd = Fd(fd);
        // The umask may have removed bits the user asked for.
        // SAFETY: an open descriptor.
        unsafe { libc::fchmod(fd.0, mode as libc::mode_t) };
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

/// The names (and sizes and modification times) of the plain files below `dir` whose
/// names end with `suffix` (temporary files start with a dot and are left out).
pub fn list(path: &Path, suffix: &str) -> Vec<(String, u64, i64)> {
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
            Some((name, m.len(), m.mtime()))
        })
        .collect()
}

/// The store as the library uses it: where it is, and the mode of its files.
#[derive(Clone, Debug)]
pub struct Store {
    pub dir: PathBuf,
    pub mode: u32,
}

/// What the store holds for one device of a load.
pub enum Lookup {
    Found(Vec<u8>),
    Absent,
    /// Ignored: damaged, foreign or unreadable, with why.
    Refused(String),
}

impl Store {
    pub fn from_config(c: &crate::config::Config) -> Option<Store> {
        c.native_store.clone().map(|dir| Store {
            dir,
            mode: c.trace_mode,
        })
    }

    /// The verified payload of the entry for `k` made from `recipe`.
    pub fn lookup(&self, k: &Key, recipe: &[u8]) -> Lookup {
        let dir = match open_dir(&self.dir, false, self.mode) {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Lookup::Absent,
            Err(e) => return Lookup::Refused(format!("store directory: {e}")),
        };
        let bytes = match read_file(&dir, &k.entry_name(), MAX_ENTRY, true) {
            Ok(Some(b)) => b,
            Ok(None) => return Lookup::Absent,
            Err(why) => return Lookup::Refused(format!("entry {}: {why}", k.entry_name())),
        };
        match verify(&bytes, k, recipe) {
            Ok(p) => Lookup::Found(p.to_vec()),
            Err(why) => Lookup::Refused(format!("entry {}: {why}", k.entry_name())),
        }
    }

    /// Leaves a request for `k` (whose clshim binary is `clshim_binary`) unless its entry
    /// or a request for it exists, or the requests are at their bounds. Never fails loudly.
    pub fn request(&self, k: &Key, clshim_binary: &[u8]) {
        let result = (|| -> std::io::Result<&'static str> {
            let dir = open_dir(&self.dir, true, self.mode)?;
            if exists(&dir, &k.entry_name()) {
                return Ok("has an entry");
            }
            let req = open_sub(&dir, REQUESTS, true, self.mode)?;
            if exists(&req, &k.request_name()) {
                return Ok("already requested");
            }
            let waiting = list(&self.dir.join(REQUESTS), ".req");
            let bytes: u64 = waiting.iter().map(|w| w.1).sum();
            if waiting.len() >= MAX_REQUESTS
                || bytes + clshim_binary.len() as u64 > MAX_REQUEST_BYTES
            {
                return Ok("too many requests waiting");
            }
            write_atomic(
                &req,
                &k.request_name(),
                clshim_binary,
                self.mode,
                false,
                false,
            )?;
            Ok("requested")
        })();
        match result {
            Ok(what) => log::debug!("native store: {:016x}: {what}", k.key),
            Err(e) => log::debug!("native store: no request for {:016x}: {e}", k.key),
        }
    }
}

/// The identity of the driver library behind `device`: the file its dispatch table's
/// `clGetDeviceInfo` lives in, by its GNU build-id, else by its path, size, modification
/// time and inode. None where there is no such table or file (macOS).
///
/// # Safety
/// `device` is a live ICD object.
pub unsafe fn driver_identity(device: cl_device_id) -> Option<u64> {
    // macOS: objects carry no dispatch table.
    if cfg!(target_os = "macos") {
        return None;
    }
    // SAFETY: a live ICD object (this function's contract).
    let table = unsafe { crate::dispatch::object_table(device as crate::cl::Handle) }?;
    // SAFETY: a dispatch table holds the clGetDeviceInfo slot (3).
    let f = unsafe { *table.add(3) };
    if f.is_null() {
        return None;
    }
    library_identity(f)
}

/// The identity of the loaded object holding the code at `addr`.
pub fn library_identity(addr: *const c_void) -> Option<u64> {
    // SAFETY: plain data filled by dladdr.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the address to look it up.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the dynamic linker,
    // alive while the object is loaded (it is: `addr` is in it).
    let name = unsafe { CStr::from_ptr(info.dli_fname) }.to_owned();
    if let Some(id) = build_id(&name) {
        return Some(Fnv1a::default().update(b"build-id\0").update(&id).finish());
    }
    let m = std::fs::metadata(std::ffi::OsStr::from_bytes(name.to_bytes())).ok()?;
    use std::os::unix::fs::MetadataExt;
    let mut h = Fnv1a::default();
    h.update(b"file\0").update(name.to_bytes()).update(&[0]);
    for v in [m.len(), m.mtime() as u64, m.mtime_nsec() as u64, m.ino()] {
        h.update(&v.to_le_bytes());
    }
    Some(h.finish())
}

/// macOS: Mach-O files carry no GNU build-id (and the store is not used there).
#[cfg(target_os = "macos")]
fn build_id(_name: &CStr) -> Option<Vec<u8>> {
    None
}

/// The GNU build-id note of the loaded object named `name`.
#[cfg(not(target_os = "macos"))]
fn build_id(name: &CStr) -> Option<Vec<u8>> {
    struct Search<'a> {
        name: &'a CStr,
        found: Option<Vec<u8>>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is the Search `build_id` passed, alive for the call.
        let search = unsafe { &mut *(data as *mut Search) };
        // SAFETY: the dynamic linker's description of one loaded object.
        let info = unsafe { &*info };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a NUL-terminated name owned by the dynamic linker.
        if unsafe { CStr::from_ptr(info.dlpi_name) } != search.name {
            return 0;
        }
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: the object's program headers, `dlpi_phnum` of them.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type != libc::PT_NOTE {
                continue;
            }
            let start = (info.dlpi_addr as usize).wrapping_add(ph.p_vaddr as usize);
            // SAFETY: a PT_NOTE segment is mapped (it lies in a loaded segment) for its
            // memory size.
            let notes =
                unsafe { std::slice::from_raw_parts(start as *const u8, ph.p_memsz as usize) };
            search.found = gnu_build_id(notes);
            if search.found.is_some() {
                break;
            }
        }
        1
    }
    let mut search = Search { name, found: None };
    // SAFETY: `each` reads only what the dynamic linker hands it; `search` outlives the
    // call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut search as *mut Search as *mut c_void) };
    search.found
}

/// The descriptor of the `NT_GNU_BUILD_ID` note among `notes`, each length checked.
#[cfg(not(target_os = "macos"))]
fn gnu_build_id(notes: &[u8]) -> Option<Vec<u8>> {
    let align = |n: usize| (n + 3) & !3;
    let mut at = 0;
    while at + 12 <= notes.len() {
        let word = |i: usize| u32::from_ne_bytes(notes[at + i..at + i + 4].try_into().unwrap());
        let (namesz, descsz, kind) = (word(0) as usize, word(4) as usize, word(8));
        let name_at = at + 12;
        let desc_at = name_at.checked_add(align(namesz))?;
        let end = desc_at.checked_add(align(descsz))?;
        if desc_at + descsz > notes.len() {
            return None;
        }
        if kind == 3 && namesz == 4 && &notes[name_at..name_at + 4] == b"GNU\0" {
            return Some(notes[desc_at..desc_at + descsz].to_vec());
        }
        at = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_verifies_only_whole_and_for_its_own_key() {
        let k = Key::new(b"recipe", 7, 9);
        let e = encode(&k, b"recipe", b"payload bytes");
        assert_eq!(verify(&e, &k, b"recipe").unwrap(), b"payload bytes");
        for cut in [0, 10, HEADER, e.len() - 1] {
            assert!(verify(&e[..cut], &k, b"recipe").is_err(), "{cut}");
        }
        for at in 0..e.len() {
            let mut d = e.clone();
            d[at] ^= 0x10;
            assert!(verify(&d, &k, b"recipe").is_err(), "flip at {at}");
        }
        assert!(verify(&e, &Key { driver: 8, ..k }, b"recipe").is_err());
        assert!(verify(
            &e,
            &Key {
                fingerprint: 8,
                ..k
            },
            b"recipe"
        )
        .is_err());
        assert!(verify(&e, &k, b"recipf").is_err());
    }

    #[test]
    fn this_library_has_an_identity() {
        let here = an_entry_verifies_only_whole_and_for_its_own_key as *const c_void;
        assert!(library_identity(here).is_some());
        assert_eq!(library_identity(here), library_identity(here));
    }
}
