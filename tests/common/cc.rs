//! The one C compile helper: every C program, shared object and the fake driver the tests
//! run is compiled by `cc` here, into target/<profile>/, only when an input is newer than
//! the output, and under one lock, so parallel test threads never compile the same file
//! at once nor run a half-written one.

use super::{repo_root, target_dir};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Serialises the compiles of one test binary (see the module comment).
static CC_LOCK: Mutex<()> = Mutex::new(());

/// The headers the C test programs include: a change to one rebuilds them.
fn shared_headers() -> Vec<PathBuf> {
    let c = repo_root().join("tests/c");
    vec![
        c.join("cltest.h"),
        c.join("clshim_fingerprint.h"),
        repo_root().join("cl-headers/clshim.h"),
    ]
}

/// Compiles `src` into `out` with `cc -O1 -g -Wall FLAGS -o OUT SRC LIBS`. Recompiles when
/// `out` is missing or older than `src`, the shared test headers, or any existing file
/// named in `flags` or `libs` (a library linked by path, a header included by path).
pub fn cc(src: &Path, out: &Path, flags: &[&str], libs: &[&str]) -> PathBuf {
    let _guard = CC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut inputs = vec![src.to_path_buf()];
    inputs.extend(shared_headers());
    inputs.extend(
        flags
            .iter()
            .chain(libs)
            .map(PathBuf::from)
            .filter(|p| p.is_file()),
    );
    let fresh = match mtime(out) {
        Some(o) => inputs
            .iter()
            .all(|i| mtime(i).map(|t| t <= o).unwrap_or(true)),
        None => false,
    };
    if !fresh {
        // A private name, then a rename: a reader sees the old file or the whole new one.
        let tmp = out.with_extension(format!("tmp{}", std::process::id()));
        let status = Command::new("cc")
            .args(["-O1", "-g", "-Wall"])
            .args(flags)
            .arg("-o")
            .arg(&tmp)
            .arg(src)
            .args(libs)
            .status()
            .expect("run cc");
        assert!(status.success(), "compiling {} failed", src.display());
        std::fs::rename(&tmp, out).unwrap();
    }
    out.to_path_buf()
}

/// tests/c/<name>.c compiled into target/<profile>/ctests/<name>, linked to the system
/// OpenCL loader, pthreads and libdl, with `extra_args` (more flags or libraries).
pub fn build_c(name: &str, extra_args: &[&str]) -> PathBuf {
    let mut libs = extra_args.to_vec();
    libs.extend(["-lOpenCL", "-lpthread", "-ldl"]);
    build_c_custom(name, name, &libs)
}

/// tests/c/<src>.c compiled into target/<profile>/ctests/<out> with `args`, which must
/// name the libraries to link: for a program linked to something other than the loader.
pub fn build_c_custom(src: &str, out: &str, args: &[&str]) -> PathBuf {
    cc(
        &repo_root().join("tests/c").join(format!("{src}.c")),
        &target_dir().join("ctests").join(out),
        &["-DCL_TARGET_OPENCL_VERSION=300"],
        args,
    )
}

/// A shared object built from `c_source` (written to target/<profile>/ctests/<name>.c).
pub fn build_so(name: &str, c_source: &str) -> PathBuf {
    let dir = target_dir().join("ctests");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    if std::fs::read_to_string(&src).ok().as_deref() != Some(c_source) {
        let tmp = src.with_extension(format!("c.tmp{}", std::process::id()));
        std::fs::write(&tmp, c_source).unwrap();
        std::fs::rename(&tmp, &src).unwrap();
    }
    cc(
        &src,
        &dir.join(format!("lib{name}.so")),
        &["-shared", "-fPIC"],
        &[],
    )
}
