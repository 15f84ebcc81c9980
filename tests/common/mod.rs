//! The shared harness of the integration tests: where the built shim and tools are, how to
//! run a command with or without the shim (and with none of the caller's clshim settings),
//! and, in the submodules, the one C compile helper (`cc`), the one scratch directory type
//! (`scratch`), the one runner of a client on pocl or on the fake driver (`driver`), the
//! kernel sources several tests build (`kernels`), the readers of trace records and
//! clshim binaries (`traces`) and of what pocl compiled (`kcache`), simulated cluster nodes
//! with a shared home (`hosts`), and what a test needs beyond Rust, a C compiler and pocl
//! (`needs`). Every test binary includes all of it and
//! uses a part, so unused items are expected (`dead_code` is allowed for that reason only).
#![allow(dead_code)]

pub mod cc;
pub mod command;
pub mod driver;
pub mod hardening;
pub mod hashcat;
pub mod hosts;
pub mod kcache;
pub mod kernels;
pub mod needs;
pub mod policy;
pub mod scratch;
pub mod store;
pub mod traces;

// A test binary that uses nothing of a submodule would warn about its re-export.
#[allow(unused_imports)]
pub use {
    cc::*, command::*, driver::*, hashcat::*, kcache::*, kernels::*, needs::*, scratch::*,
    store::*, traces::*,
};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile>/ of the running test binary (which lives in target/<profile>/deps/).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// The running test binary's name without cargo's hash (`driver` for
/// target/debug/deps/driver-0123abcd): names what one test binary builds for itself.
pub fn test_binary_name() -> String {
    let exe = std::env::current_exe().expect("current_exe");
    let stem = exe.file_stem().unwrap().to_string_lossy().into_owned();
    match stem.rsplit_once('-') {
        Some((name, _hash)) => name.to_string(),
        None => stem,
    }
}

/// The freshly built `libclshim.so`. `cargo test` builds the library for the test
/// harness but does not refresh the cdylib in target/<profile>/, so the first call builds
/// it (a no-op when it is current): a test must never run against a stale shim.
pub fn shim_path() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(repo_root())
            .args(["build", "--lib", "--quiet"]);
        if target_dir()
            .file_name()
            .map(|n| n == "release")
            .unwrap_or(false)
        {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build --lib");
        assert!(status.success(), "cargo build --lib failed");
    });
    let p = target_dir().join("libclshim.so");
    assert!(p.exists(), "{} is missing after cargo build", p.display());
    p
}

/// Whether the test process's variable `k` would change how clshim or the loader's layer
/// list behaves in a child: CLSHIM_*, LD_PRELOAD and OPENCL_LAYERS.
pub fn is_shim_variable(k: &str) -> bool {
    k.starts_with("CLSHIM_") || k == "LD_PRELOAD" || k == "OPENCL_LAYERS"
}

/// Removes from `cmd` every variable of the test process for which `is_shim_variable`
/// holds and that `keep` does not name, so the caller's environment never leaks into a
/// test.
pub fn clear_shim_env(cmd: &mut Command, keep: &[&str]) {
    for (k, _) in std::env::vars() {
        if is_shim_variable(&k) && !keep.contains(&k.as_str()) {
            cmd.env_remove(&k);
        }
    }
    substitute_when_busy(cmd);
    // A temporary folder of this command's own, unless the test names one: ranks publish
    // their compiles in the node's folder there, and what an earlier run or another test
    // left there would be taken as a peer's (a test that passes only on another's
    // compile). A test whose commands meet as one job's ranks names one.
    if !cmd.get_envs().any(|(k, _)| k == "TMPDIR") {
        cmd.env("TMPDIR", command_tmp());
    }
}

/// Sets `CLSHIM_SUBSTITUTE_WHEN_BUSY=1` unless `cmd` sets it already. Under `substitute`
/// clshim lets the driver answer a binary query when no core is idle at that instant;
/// on this suite's 2-core machines that would depend on which other tests run at that
/// moment, so tests get clshim binaries wherever they ask for `substitute`, except those
/// that set the variable themselves (tests/policy/busy_node.rs).
pub fn substitute_when_busy(cmd: &mut Command) {
    // `get_envs` also lists the variables removed from the command (with no value).
    if !cmd
        .get_envs()
        .any(|(k, v)| k == "CLSHIM_SUBSTITUTE_WHEN_BUSY" && v.is_some())
    {
        cmd.env("CLSHIM_SUBSTITUTE_WHEN_BUSY", "1");
    }
}

/// A fresh temporary folder below [`run_tmp`], the user's alone.
pub fn command_tmp() -> PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = run_tmp().join(format!("cmd-{n}"));
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    d
}

/// This test process's temporary folder (made once, the user's alone).
pub fn run_tmp() -> &'static std::path::Path {
    static TMP: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    TMP.get_or_init(|| {
        use std::os::unix::fs::DirBuilderExt;
        let d = target_dir()
            .join("test-scratch")
            .join(format!("tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&d)
            .unwrap();
        d
    })
}

/// Runs `cmd` with the test process's clshim variables removed (`clear_shim_env`).
/// `preload` adds LD_PRELOAD=<shim>.
pub fn run(mut cmd: Command, preload: bool) -> Output {
    clear_shim_env(&mut cmd, &[]);
    if preload {
        cmd.env("LD_PRELOAD", shim_path());
    }
    cmd.output().expect("spawn test command")
}

/// The exit line clshim printed for the command's one process (`clshim: pid ...`).
pub fn exit_line(o: &Output) -> String {
    let e = stderr(o);
    e.lines()
        .find(|l| l.starts_with("clshim: pid"))
        .unwrap_or_else(|| panic!("no exit line in:\n{e}"))
        .to_string()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Sets a file's times `seconds` back, as if nothing had touched it since (a lease that
/// lapsed, a compile a week old): a test does not wait for them.
pub fn set_times_back(path: &Path, seconds: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let t = libc::timespec {
        tv_sec: (now - seconds) as libc::time_t,
        tv_nsec: 0,
    };
    let c = std::ffi::CString::new(s(path)).unwrap();
    // SAFETY: a valid name and two valid times.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
    assert_eq!(r, 0, "{}", path.display());
}

/// A path as a command-line argument (the test paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Python of one of the virtual environments that `scripts/test` creates under .venv/:
/// `current` (the newest pyopencl) or `old` (pyopencl 2023.1, which still caches on pocl).
pub fn venv_python(which: &str) -> PathBuf {
    let p = repo_root().join(".venv").join(which).join("bin/python");
    assert!(
        p.exists(),
        "{} is missing: `scripts/test` creates the Python environments",
        p.display()
    );
    p
}
