//! `clshim run`: finds the interposer library, prepares the environment and replaces
//! this process with the user's command. This module owns the library lookup order
//! (`--lib`, `$CLSHIM_LIB`, beside the executable, `../lib/` from it; inside the
//! installed Python package only beside the executable, checked to load), the mapping of
//! options to `CLSHIM_*` variables (a variable the user set is kept unless the option is
//! given), the doors the library is opened through (`--mode`: the preload variable,
//! `LD_PRELOAD` or `DYLD_INSERT_LIBRARIES` on macOS, and the loader's `OPENCL_LAYERS`,
//! both by default; the library is put first in each and an existing value kept; never
//! `DYLD_FORCE_FLAT_NAMESPACE`, see `macos_env.rs`; another copy of the library already
//! named there is dropped; a library path a door's list cannot hold is refused), the
//! inherited `CLSHIM_*` values (checked once here, by the grammar the options use, rather
//! than warned about by every rank), the trace directory (created, checked writable,
//! a warning when it already holds traces, and removed again when the command cannot be
//! started), and the `exec` itself, so that exit status, signals
//! (dispositions and mask as clshim was started with, `inherited_signals.rs`), standard
//! streams and the process tree are the command's own. Every failure before
//! the command starts is a one-line error and a non-zero exit status.

mod inherited_signals;
mod macos_env;

use crate::cli::RunOpts;
use crate::controls;
use crate::library::{absolute, cannot_run, describe, fail, find_library, RunError, LIB_NAME};
use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

#[cfg(not(target_os = "macos"))]
const PRELOAD_VAR: &str = "LD_PRELOAD";
#[cfg(target_os = "macos")]
const PRELOAD_VAR: &str = "DYLD_INSERT_LIBRARIES";
const LAYERS_VAR: &str = "OPENCL_LAYERS";

/// The bytes that separate entries: glibc's loader splits `LD_PRELOAD` at spaces and
/// colons (elf/rtld.c), dyld `DYLD_INSERT_LIBRARIES` at colons; ocl-icd and the Khronos
/// loader split `OPENCL_LAYERS` at colons only (neither has an escape).
#[cfg(not(target_os = "macos"))]
const PRELOAD_SEPARATORS: &[u8] = b" :";
#[cfg(target_os = "macos")]
const PRELOAD_SEPARATORS: &[u8] = b":";
const LAYERS_SEPARATORS: &[u8] = b":";

/// The name every copy of the library exports (src/copies.rs): found in a file's first
/// bytes (the dynamic string table), it marks a copy of clshim under any file name.
const LIBRARY_MARKER: &[u8] = b"clshim_claim_recorder_v1";

/// `lib` first, then the existing list (if any, split at `separators`), without `lib`
/// and without any other copy of clshim's library (see [`is_clshim_library`]): two copies
/// in one process are harmless (only one records) but the one to use is `lib`.
pub fn prepend(lib: &Path, existing: Option<OsString>, separators: &[u8]) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(old) = existing {
        let lib_id = file_id(lib);
        let rest: Vec<&[u8]> = old
            .as_encoded_bytes()
            .split(|b| separators.contains(b))
            .filter(|e| !e.is_empty() && !is_clshim_library(e, lib, lib_id))
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

/// A file's device and inode: the same file under another path or a hard link.
fn file_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether an entry of an existing `LD_PRELOAD`/`OPENCL_LAYERS` names clshim's library:
/// the path `lib` itself, the same file by another path (device and inode), a file named
/// like the library (`libclshim.so`, `libclshim-0.3.so`, a bare name the loader
/// searches for), or a file whose first MiB holds the name every copy exports.
fn is_clshim_library(entry: &[u8], lib: &Path, lib_id: Option<(u64, u64)>) -> bool {
    use std::io::Read;
    if entry == lib.as_os_str().as_encoded_bytes() {
        return true;
    }
    let name = entry.rsplit(|&b| b == b'/').next().unwrap_or(entry);
    let stem = LIB_NAME.split('.').next().unwrap_or(LIB_NAME).as_bytes();
    if name.starts_with(stem) && matches!(name.get(stem.len()), Some(b'.' | b'-' | b'_')) {
        return true;
    }
    if !entry.contains(&b'/') {
        return false;
    }
    // SAFETY: `entry` is a slice of an OsStr split at ASCII bytes.
    let path = Path::new(unsafe { OsStr::from_encoded_bytes_unchecked(entry) });
    if lib_id.is_some() && file_id(path) == lib_id {
        return true;
    }
    // Only a regular file is read (a FIFO named there would never end).
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(1 << 20).read_to_end(&mut head))
        .is_ok_and(|_| {
            head.windows(LIBRARY_MARKER.len())
                .any(|w| w == LIBRARY_MARKER)
        })
}

/// Refuses a library path a door's variable cannot hold: the loaders split those lists
/// at separators with no escape, so `/home/me/My Project/.venv/.../libclshim.so` in
/// `LD_PRELOAD` would be two missing files (a loader error in every process and no
/// preload door), and with a colon no door would open and nothing would be recorded.
fn check_doors(lib: &Path, o: &RunOpts) -> Result<(), RunError> {
    let bytes = lib.as_os_str().as_encoded_bytes();
    let doors = [
        (o.mode.preload(), PRELOAD_VAR, PRELOAD_SEPARATORS),
        (o.mode.layer(), LAYERS_VAR, LAYERS_SEPARATORS),
    ];
    let Some(sep) = bytes
        .iter()
        .copied()
        .find(|b| doors.iter().any(|(on, _, seps)| *on && seps.contains(b)))
    else {
        return Ok(());
    };
    let vars: Vec<&str> = doors
        .iter()
        .filter(|(on, _, seps)| *on && seps.contains(&sep))
        .map(|(_, var, _)| *var)
        .collect();
    let (what, verb) = match (sep, vars.len()) {
        (b' ', 1) => ("a space", "takes"),
        (b' ', _) => ("a space", "take"),
        (_, 1) => ("a colon", "takes"),
        _ => ("a colon", "take"),
    };
    let layer_hint = if sep == b' ' && o.mode.preload() {
        format!(" (or --mode layer: {LAYERS_VAR} takes spaces)")
    } else {
        String::new()
    };
    fail(
        1,
        format!(
            "the library path '{}' holds {what}, which {} {verb} as a separator: the \
             library would not be loaded. Install clshim under a path without spaces or \
             colons, or link the library from such a path and name the link: \
             ln -s '{}' ~/{LIB_NAME}; clshim run --lib ~/{LIB_NAME} ...{layer_hint}",
            lib.display(),
            vars.join(" and "),
            lib.display()
        ),
    )
}

/// The variables to set for the command: (name, value) pairs.
pub fn environment(
    o: &RunOpts,
    lib: &Path,
    trace_dir: Option<&Path>,
) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = Vec::new();
    // Both doors by default: preloading reaches applications linked to a loader (and
    // pyopencl's bundled one), the layer reaches those that dlopen a loader that reads
    // OPENCL_LAYERS. The library records a call once whichever door it came through.
    if o.mode.preload() {
        let old = std::env::var_os(PRELOAD_VAR);
        env.push((PRELOAD_VAR, prepend(lib, old, PRELOAD_SEPARATORS)));
    }
    if o.mode.layer() {
        let old = std::env::var_os(LAYERS_VAR);
        env.push((LAYERS_VAR, prepend(lib, old, LAYERS_SEPARATORS)));
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
    if let Some(v) = o.sources {
        env.push(("CLSHIM_TRACE_SOURCES", if v { "1" } else { "0" }.into()));
    }
    if let Some(v) = &o.native_store {
        env.push(("CLSHIM_NATIVE_STORE", v.clone()));
    }
    if let Some(v) = &o.native_store_max {
        env.push(("CLSHIM_NATIVE_STORE_MAX", v.into()));
    }
    // On unless asked otherwise: here, or by the variable the user set.
    let program_cache = o.program_cache.or_else(|| {
        std::env::var_os(controls::PROGRAM_CACHE.var)
            .is_none()
            .then_some(true)
    });
    if let Some(v) = program_cache {
        env.push((
            controls::PROGRAM_CACHE.var,
            if v { "1" } else { "0" }.into(),
        ));
    }
    if let Some(v) = o.share_builds {
        env.push((controls::SHARE_BUILDS.var, if v { "1" } else { "0" }.into()));
    }
    if let Some(v) = o.warm_service {
        env.push((controls::WARM_SERVICE.var, if v { "1" } else { "0" }.into()));
    }
    if let Some(v) = o.substitute_when_busy {
        env.push((
            controls::SUBSTITUTE_WHEN_BUSY.var,
            if v { "1" } else { "0" }.into(),
        ));
    }
    // One store for every process of the job, whatever ranks do to HOME: the one resolved
    // here, absolute, which the warm step reads too.
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var_os(name))
    };
    if let Some(store) = crate::warm::Settings::from_lookup(None, &lookup).store {
        env.retain(|(k, _)| *k != controls::NATIVE_STORE.var);
        env.push((controls::NATIVE_STORE.var, store.into()));
    }
    env
}

/// The trace directory `clshim run` prepared: its absolute path, and the directories it
/// created for it (deepest first), which it removes again if the command cannot start.
struct TraceDir {
    path: PathBuf,
    created: Vec<PathBuf>,
}

impl TraceDir {
    /// Removes the directories this run created, while they are empty.
    fn remove_created(&self) {
        for d in &self.created {
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
}

/// Creates the trace directory (and its parents), checks that files can be made in it,
/// and warns when it already holds trace files.
fn prepare_trace_dir(dir: &Path) -> Result<TraceDir, RunError> {
    let abs = absolute(dir);
    let created: Vec<PathBuf> = abs
        .ancestors()
        .take_while(|a| std::fs::symlink_metadata(a).is_err())
        .map(Path::to_path_buf)
        .collect();
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
    let t = TraceDir { path: abs, created };
    if let Err(e) = check_writable(&t.path) {
        t.remove_created();
        return fail(
            1,
            format!(
                "cannot write in trace directory '{}': {}",
                dir.display(),
                describe(&e)
            ),
        );
    }
    warn_if_reused(dir, &t.path);
    Ok(t)
}

/// Makes and removes a file in `dir`, as every rank's library would make its trace file:
/// a directory that exists but cannot be written (permissions, a read-only filesystem)
/// is found before the job, not after it.
fn check_writable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(format!(".clshim-write-check.{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// Warns once when `dir` already holds trace files: `clshim report` would add this run's
/// processes to an earlier run's. Only the first rank of an MPI job warns (the others
/// may find the files their siblings have just begun).
fn warn_if_reused(shown: &Path, dir: &Path) {
    let (rank, _, _) = crate::ranks::detect_rank(|n| std::env::var(n).ok());
    if rank.is_some_and(|r| r != 0) {
        return;
    }
    let n = crate::report::traces::list(dir)
        .map(|l| l.len())
        .unwrap_or(0);
    if n > 0 {
        eprintln!(
            "clshim: warning: trace directory '{}' already holds {n} trace {} (an earlier \
             run's?): clshim report adds their runs together; give each run a new --trace-dir",
            crate::terminal::text(&shown.display().to_string()),
            if n == 1 { "file" } else { "files" }
        );
    }
}

/// An inherited `CLSHIM_TRACE_DIR` that exists gets the checks of `--trace-dir`'s (the
/// library makes one that does not exist, as it always did).
fn check_inherited_trace_dir() -> Result<(), RunError> {
    let Some(dir) = std::env::var_os(crate::controls::TRACE_DIR.var).filter(|d| !d.is_empty())
    else {
        return Ok(());
    };
    let dir = PathBuf::from(dir);
    if !dir.is_dir() {
        return Ok(());
    }
    if let Err(e) = check_writable(&dir) {
        return fail(
            1,
            format!(
                "cannot write in trace directory '{}' (CLSHIM_TRACE_DIR): {}",
                crate::terminal::text(&dir.display().to_string()),
                describe(&e)
            ),
        );
    }
    warn_if_reused(&dir, &dir);
    Ok(())
}

/// Checks the `CLSHIM_*` values the command inherits, those its options do not replace,
/// by the grammar the library reads them with: a value the library would warn about in
/// every rank is one usage error here (status 2). A blank value is unset for both.
fn check_inherited(set_by_options: &[&str]) -> Result<(), RunError> {
    use crate::controls::{Grammar, Reader, ALL};
    for c in ALL.iter().filter(|c| c.reader == Reader::Library) {
        if set_by_options.contains(&c.var) {
            continue;
        }
        let Some(v) = std::env::var_os(c.var) else {
            continue;
        };
        let text = v.to_string_lossy();
        if text.trim().is_empty() || matches!(c.grammar, Grammar::Path | Grammar::PathOrOff) {
            continue;
        }
        if c.check(&text).is_none() {
            let what = match c.grammar {
                Grammar::OneOf(_) => "unknown value",
                _ => "invalid value",
            };
            return fail(
                2,
                format!(
                    "{}={:?} (from the environment): {what} (expected {}{}); fix or unset it, \
                     or give {}",
                    c.var,
                    text,
                    if matches!(c.grammar, Grammar::OneOf(_)) {
                        "one of: "
                    } else {
                        ""
                    },
                    c.accepted(),
                    c.option
                ),
            );
        }
    }
    Ok(())
}

/// Runs the command in place of this process. Returns only on failure.
pub fn run(o: RunOpts) -> RunError {
    match try_run(o) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn try_run(o: RunOpts) -> Result<std::convert::Infallible, RunError> {
    if o.warm_given {
        eprintln!(
            "clshim run: --warm is no longer needed (each job keeps what it compiles as it \
             runs, and the node's warm service makes the driver's binaries an application asks \
             for): ignored"
        );
    }
    let lib = find_library(o.lib.as_deref(), std::env::var_os("CLSHIM_LIB"))?;
    check_doors(&lib, &o)?;
    let trace_dir = o.trace_dir.as_deref().map(prepare_trace_dir).transpose()?;
    if trace_dir.is_none() {
        check_inherited_trace_dir()?;
    }
    let env = environment(&o, &lib, trace_dir.as_ref().map(|t| t.path.as_path()));
    let by_options: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
    if let Err(e) = check_inherited(&by_options) {
        if let Some(t) = &trace_dir {
            t.remove_created();
        }
        return Err(e);
    }
    let program = &o.command[0];
    #[cfg(target_os = "macos")]
    macos_env::warn_if_protected(program);
    let mut cmd = std::process::Command::new(program);
    cmd.args(&o.command[1..]);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    inherited_signals::restore_on_exec(&mut cmd);
    // A command that cannot start leaves behind no trace directory made for it.
    let not_started = |e: RunError| {
        if let Some(t) = &trace_dir {
            t.remove_created();
        }
        e
    };
    // `exec` returns only if the command could not be started.
    let e = cmd.exec();
    Err(not_started(cannot_run(program, &e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepend_keeps_others_and_drops_duplicates() {
        let lib = Path::new("/x/libclshim.so");
        assert_eq!(prepend(lib, None, b":"), OsString::from("/x/libclshim.so"));
        assert_eq!(
            prepend(lib, Some("/a.so:/x/libclshim.so::/b.so".into()), b":"),
            OsString::from("/x/libclshim.so:/a.so:/b.so")
        );
        // Another copy by its name, bare or versioned; LD_PRELOAD's spaces split too.
        assert_eq!(
            prepend(
                lib,
                Some("/opt/m/libclshim.so /a.so:libclshim.so:/y/libclshim-0.3.so".into()),
                b" :"
            ),
            OsString::from("/x/libclshim.so:/a.so")
        );
        // A look-alike name is another library.
        assert_eq!(
            prepend(lib, Some("/a/libclshimmer.so".into()), b":"),
            OsString::from("/x/libclshim.so:/a/libclshimmer.so")
        );
    }

    #[test]
    fn describe_drops_os_error_suffix() {
        let e = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(describe(&e), "No such file or directory");
    }
}
