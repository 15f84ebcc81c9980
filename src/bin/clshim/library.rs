//! What `clshim run` and `clshim warm` both need before they start anything: finding the
//! clshim library (`--lib`, `$CLSHIM_LIB`, beside the executable, `../lib/` from it, or
//! the wheel's package folder) and checking it is whole and loadable, paths made absolute,
//! and how a failure to start is reported (`RunError`, `cannot_run`, and an I/O error in
//! a shell's words, `describe`, which the report's readers use too).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

#[cfg(target_os = "macos")]
pub const LIB_NAME: &str = "libclshim.dylib";
#[cfg(not(target_os = "macos"))]
pub const LIB_NAME: &str = "libclshim.so";

/// A failure before the command started: the message (printed after `clshim: `) and
/// the exit status.
pub struct RunError {
    pub message: String,
    pub status: i32,
}

pub fn fail<T>(status: i32, message: String) -> Result<T, RunError> {
    Err(RunError { message, status })
}

/// An I/O error as a shell would print it: "No such file or directory", without Rust's
/// "(os error 2)" suffix.
pub fn describe(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => {
            // SAFETY: strerror returns a pointer to a NUL-terminated static or
            // thread-local string; it is copied at once.
            let s = unsafe { std::ffi::CStr::from_ptr(libc::strerror(code)) };
            s.to_string_lossy().into_owned()
        }
        None => e.to_string(),
    }
}

/// Where the library is, by the documented lookup order; the path is made absolute,
/// since the command may change directory before loading it.
pub fn find_library(opt: Option<&Path>, env: Option<OsString>) -> Result<PathBuf, RunError> {
    let given = opt.map(|p| (p.to_path_buf(), "--lib")).or_else(|| {
        env.filter(|v| !v.is_empty())
            .map(|v| (PathBuf::from(v), "CLSHIM_LIB"))
    });
    if let Some((p, origin)) = given {
        return match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => Ok(absolute(&p)),
            Ok(_) => fail(
                1,
                format!("{origin} names '{}', which is not a file", p.display()),
            ),
            Err(e) => fail(
                1,
                format!("cannot use {origin} '{}': {}", p.display(), describe(&e)),
            ),
        };
    }
    // current_exe is /proc/self/exe on Linux: the real file, whatever link or Python
    // launcher started it.
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| RunError {
            message: format!(
                "cannot find {LIB_NAME}: cannot locate the clshim executable: {}",
                describe(&e)
            ),
            status: 1,
        })?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    if dir.join("__init__.py").is_file() {
        return bundled_library(dir);
    }
    let candidates = [dir.join(LIB_NAME), dir.join("../lib").join(LIB_NAME)];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    fail(
        1,
        format!(
            "cannot find {LIB_NAME}: not in {} nor {} (give --lib PATH or set CLSHIM_LIB)",
            dir.display(),
            dir.join("../lib").display()
        ),
    )
}

/// The library of an installed `clshim` Python package (the wheel), which keeps the
/// executable and the library side by side in its package directory. A missing or
/// unloadable library there is a damaged install, not a lookup to continue: say which
/// file and how to reinstall, exit status 2.
fn bundled_library(dir: &Path) -> Result<PathBuf, RunError> {
    let lib = dir.join(LIB_NAME);
    let damaged = |what: String| RunError {
        message: format!(
            "the clshim Python package in {} is damaged: {what}; reinstall it: \
             python -m pip install --force-reinstall clshim (or the wheel you installed)",
            dir.display()
        ),
        status: 2,
    };
    match std::fs::metadata(&lib) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Err(damaged(format!("{} is not a file", lib.display()))),
        Err(e) => {
            return Err(damaged(format!(
                "{} is missing ({})",
                lib.display(),
                describe(&e)
            )))
        }
    }
    whole_elf(&lib)
        .and_then(|()| loadable(&lib))
        .map_err(|why| damaged(format!("{} cannot be loaded: {why}", lib.display())))?;
    Ok(lib)
}

/// Checks that `lib` is a whole 64-bit little-endian ELF file: a file cut short (an
/// interrupted copy or download) would make the dynamic linker crash on the pages it
/// maps past the end, so it is refused here by its own headers. Elsewhere (macOS,
/// other ELF kinds) `loadable` alone decides.
fn whole_elf(lib: &Path) -> Result<(), String> {
    use std::io::{Read, Seek, SeekFrom};
    if !cfg!(all(
        target_os = "linux",
        target_pointer_width = "64",
        target_endian = "little"
    )) {
        return Ok(());
    }
    let io = |e: std::io::Error| describe(&e);
    let mut f = std::fs::File::open(lib).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut h = [0u8; 64];
    if len < 64 || f.read_exact(&mut h).is_err() || &h[..4] != b"\x7fELF" {
        return Err(format!("not an ELF shared library ({len} bytes)"));
    }
    if h[4] != 2 || h[5] != 1 {
        return Err("not a 64-bit little-endian ELF file".into());
    }
    let u16_at = |b: &[u8], at: usize| u64::from(u16::from_le_bytes([b[at], b[at + 1]]));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (phoff, shoff) = (u64_at(&h, 32), u64_at(&h, 40));
    let (phsize, phnum) = (u16_at(&h, 54), u16_at(&h, 56));
    let (shsize, shnum) = (u16_at(&h, 58), u16_at(&h, 60));
    let mut need = (phoff + phsize * phnum).max(shoff + shsize * shnum);
    if phsize >= 56 && phoff + phsize * phnum <= len {
        let mut ph = vec![0u8; (phsize * phnum) as usize];
        f.seek(SeekFrom::Start(phoff)).map_err(io)?;
        f.read_exact(&mut ph).map_err(io)?;
        for p in ph.chunks_exact(phsize as usize) {
            // PT_LOAD: the bytes at p_offset .. p_offset + p_filesz are mapped.
            if u32::from_le_bytes(p[..4].try_into().unwrap()) == 1 {
                need = need.max(u64_at(p, 8).saturating_add(u64_at(p, 32)));
            }
        }
    }
    if len < need {
        return Err(format!("truncated: {len} bytes of at least {need}"));
    }
    Ok(())
}

/// Loads `lib` privately and unloads it, to catch a truncated or foreign file before the
/// command starts (where every process would fail to preload it). Safe for clshim's own
/// library: it does nothing when loaded (no constructor, no thread, no file).
fn loadable(lib: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(lib.as_os_str().as_bytes())
        .map_err(|_| "the path holds a NUL byte".to_string())?;
    // SAFETY: `path` is a valid C string; the handle is only closed, and dlerror's
    // message is copied at once on this thread.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            let e = libc::dlerror();
            return Err(if e.is_null() {
                "dlopen failed".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            });
        }
        libc::dlclose(h);
    }
    Ok(())
}

pub fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(p),
        Err(_) => p.to_path_buf(),
    }
}

/// How a command that could not be started is reported: 127 when it was not found, else
/// 126, as a shell does.
pub fn cannot_run(program: &OsStr, e: &std::io::Error) -> RunError {
    let status = match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => 127,
        _ => 126,
    };
    RunError {
        status,
        message: format!(
            "cannot run '{}': {}",
            program.to_string_lossy(),
            describe(e)
        ),
    }
}
