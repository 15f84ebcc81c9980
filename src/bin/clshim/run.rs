//! `clshim run`: finds the interposer library, prepares the environment and replaces
//! this process with the user's command. This module owns the library lookup order
//! (`--lib`, `$CLSHIM_LIB`, beside the executable, `../lib/` from it), the mapping of
//! options to `CLSHIM_*` variables (a variable the user set is kept unless the option is
//! given), the preload variable (`LD_PRELOAD`, or `OPENCL_LAYERS` with `--layer`; on macOS
//! `macos_env.rs` picks them; the library is put first and an existing value kept),
//! creating the trace directory, and the `exec` itself, so that exit status, signals,
//! standard streams and the process tree are the command's own. Every failure before
//! the command starts is a one-line error and a non-zero exit status.

use crate::cli::RunOpts;
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

#[cfg(target_os = "macos")]
const LIB_NAME: &str = "libclshim.dylib";
#[cfg(not(target_os = "macos"))]
const LIB_NAME: &str = "libclshim.so";

// (macOS: macos_env.rs names the variables.)
#[cfg(not(target_os = "macos"))]
const PRELOAD_VAR: &str = "LD_PRELOAD";
#[cfg(not(target_os = "macos"))]
const LAYERS_VAR: &str = "OPENCL_LAYERS";

/// A failure before the command started: the message (printed after `clshim: `) and
/// the exit status.
pub struct RunError {
    pub message: String,
    pub status: i32,
}

fn fail<T>(status: i32, message: String) -> Result<T, RunError> {
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

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(p),
        Err(_) => p.to_path_buf(),
    }
}

/// `lib` first, then the existing list (if any), without repeating `lib`. Both
/// `LD_PRELOAD` and `OPENCL_LAYERS` take `:`-separated lists.
pub fn prepend(lib: &Path, existing: Option<OsString>) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(old) = existing {
        let lib_b = lib.as_os_str().as_encoded_bytes();
        // LD_PRELOAD also accepts spaces as separators; keep entries as the user wrote them.
        let rest: Vec<&[u8]> = old
            .as_encoded_bytes()
            .split(|&b| b == b':')
            .filter(|e| !e.is_empty() && *e != lib_b)
            .collect();
        for e in rest {
            v.push(":");
            // SAFETY: `e` is a slice of an OsStr split at an ASCII byte, which keeps
            // it valid in the encoding of OsStr.
            v.push(unsafe { OsStr::from_encoded_bytes_unchecked(e) });
        }
    }
    v
}

/// The variables to set for the command: (name, value) pairs.
pub fn environment(
    o: &RunOpts,
    lib: &Path,
    trace_dir: Option<&Path>,
) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = Vec::new();
    #[cfg(target_os = "macos")]
    env.extend(crate::macos_env::route_vars(o.layer, lib, |v| {
        std::env::var_os(v)
    }));
    #[cfg(not(target_os = "macos"))]
    {
        let var = if o.layer { LAYERS_VAR } else { PRELOAD_VAR };
        env.push((var, prepend(lib, std::env::var_os(var))));
    }
    if let Some(v) = &o.binaries {
        env.push(("CLSHIM_BINARIES", v.into()));
    }
    if let Some(v) = &o.devices {
        env.push(("CLSHIM_DEVICES", v.into()));
    }
    if let Some(v) = trace_dir {
        env.push(("CLSHIM_TRACE_DIR", v.into()));
    }
    if let Some(v) = &o.trace_mode {
        env.push(("CLSHIM_TRACE_MODE", v.into()));
    }
    if let Some(v) = &o.log {
        env.push(("CLSHIM_LOG", v.into()));
    }
    if let Some(v) = o.summary {
        env.push(("CLSHIM_SUMMARY", if v { "1" } else { "0" }.into()));
    }
    env
}

/// Creates the trace directory (and its parents) and returns its absolute path.
fn prepare_trace_dir(dir: &Path) -> Result<PathBuf, RunError> {
    let abs = absolute(dir);
    if let Err(e) = std::fs::create_dir_all(&abs) {
        return fail(
            1,
            format!(
                "cannot create trace directory '{}': {}",
                dir.display(),
                describe(&e)
            ),
        );
    }
    Ok(abs)
}

/// Runs the command in place of this process. Returns only on failure.
pub fn run(o: RunOpts) -> RunError {
    match try_run(o) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn try_run(o: RunOpts) -> Result<std::convert::Infallible, RunError> {
    let lib = find_library(o.lib.as_deref(), std::env::var_os("CLSHIM_LIB"))?;
    let trace_dir = o.trace_dir.as_deref().map(prepare_trace_dir).transpose()?;
    let env = environment(&o, &lib, trace_dir.as_deref());
    let program = &o.command[0];
    #[cfg(target_os = "macos")]
    crate::macos_env::warn_if_protected(program);
    let mut cmd = std::process::Command::new(program);
    cmd.args(&o.command[1..]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // `exec` returns only if the command could not be started.
    let e = cmd.exec();
    let status = match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => 127,
        _ => 126,
    };
    fail(
        status,
        format!(
            "cannot run '{}': {}",
            program.to_string_lossy(),
            describe(&e)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_keeps_others_and_drops_duplicates() {
        let lib = Path::new("/x/libclshim.so");
        assert_eq!(prepend(lib, None), OsString::from("/x/libclshim.so"));
        assert_eq!(
            prepend(lib, Some("/a.so:/x/libclshim.so::/b.so".into())),
            OsString::from("/x/libclshim.so:/a.so:/b.so")
        );
    }

    #[test]
    fn describe_drops_os_error_suffix() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(describe(&e), "No such file or directory");
    }
}
