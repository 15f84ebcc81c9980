//! The one runner of a client program on an OpenCL driver: real pocl through the system
//! loader, or the fake driver (tests/fake_icd/fake_icd.c) alone, for fault injection.
//! A run collects the program's output, the trace records (with the shim) and, on the
//! fake driver, the calls that reached the driver (FAKE_ICD_LOG). Also where the Khronos
//! loader and Intel's CPU runtime (`.venv/intel`) are, for the tests that put a second
//! platform beside pocl.

use super::{build_c, cc, checked_traces, events, run, scratch, stderr, stdout};
use super::{needs, repo_root, target_dir, test_binary_name, INTEL_RUNTIME};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The fake driver built as a shared library, and a directory holding only its `.icd`
/// file, for OCL_ICD_VENDORS.
pub struct FakeIcd {
    pub lib: PathBuf,
    pub vendors: PathBuf,
}

/// The fake driver of this test binary, built once into target/<profile>/fake-icd/<test
/// binary>/: each test binary writes its own `.icd` file, so two never write one at once.
pub fn fake_icd() -> &'static FakeIcd {
    static FAKE: OnceLock<FakeIcd> = OnceLock::new();
    FAKE.get_or_init(|| {
        let dir = target_dir().join("fake-icd").join(test_binary_name());
        let vendors = dir.join("vendors");
        std::fs::create_dir_all(&vendors).unwrap();
        let lib = cc(
            &repo_root().join("tests/fake_icd/fake_icd.c"),
            &dir.join("libfakeicd.so"),
            &["-shared", "-fPIC", "-fvisibility=hidden"],
            &["-lpthread"],
        );
        let icd = vendors.join("fake.icd");
        let tmp = vendors.join(format!("fake.icd.tmp{}", std::process::id()));
        std::fs::write(&tmp, format!("{}\n", lib.display())).unwrap();
        std::fs::rename(&tmp, &icd).unwrap();
        FakeIcd { lib, vendors }
    })
}

/// The step-driven client (tests/c/fake_client.c), linked to the system loader: it runs
/// no kernels, so it drives pocl as well as the fake driver.
pub fn fake_client() -> PathBuf {
    build_c("fake_client", &["-lpthread"])
}

/// The pocl kernel cache of the running test (named by its thread, which the test harness
/// names after the test), kept under target/ between runs of the suite.
pub fn test_pocl_cache() -> PathBuf {
    let name: String = std::thread::current()
        .name()
        .unwrap_or("main")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    super::target_dir()
        .join("test-pocl-cache")
        .join(format!("{}-{name}", super::test_binary_name()))
}

/// Where a program runs: real pocl through the system loader, or the fake driver alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Driver {
    Pocl,
    Fake,
}

/// One finished run: its output, the trace records (with the shim) and, on the fake
/// driver, the value queries and other program calls that reached the driver (size-only
/// binary queries left out).
pub struct Ran {
    pub out: Output,
    pub records: Vec<Value>,
    pub driver_calls: Vec<String>,
    pub what: String,
}

impl Ran {
    pub fn stdout(&self) -> String {
        stdout(&self.out)
    }
    /// The run must have succeeded.
    pub fn ok(&self) -> &Self {
        assert!(
            self.out.status.success(),
            "{} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.out.status,
            self.stdout(),
            stderr(&self.out)
        );
        self
    }
    /// The output must hold `line` as one whole line.
    pub fn has_line(&self, line: &str) -> &Self {
        let out = self.stdout();
        assert!(
            out.lines().any(|l| l == line),
            "{}: no line {line:?} in:\n{out}\nstderr:\n{}",
            self.what,
            stderr(&self.out)
        );
        self
    }
    /// The line starting with `prefix`.
    pub fn line(&self, prefix: &str) -> String {
        let out = self.stdout();
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("{}: no line {prefix:?} in:\n{out}", self.what))
            .to_string()
    }
    pub fn events(&self, event: &str) -> Vec<&Value> {
        events(&self.records, event)
    }
    /// The one record of `event`.
    pub fn one(&self, event: &str) -> &Value {
        let e = self.events(event);
        assert_eq!(
            e.len(),
            1,
            "{}: one {event} expected: {:#?}",
            self.what,
            self.records
        );
        e[0]
    }
    /// The binary_query records of one parameter.
    pub fn queries(&self, param: &str) -> Vec<&Value> {
        self.events("binary_query")
            .into_iter()
            .filter(|r| r["param"] == param)
            .collect()
    }
}

/// Runs `bin ARGS` on `driver` with `env`, with the shim (LD_PRELOAD, traces into a
/// scratch directory) or without it.
pub fn run_on(driver: Driver, bin: &Path, args: &[&str], env: &[(&str, &str)], shim: bool) -> Ran {
    let dir = scratch("driver-run");
    let traces = dir.path("traces");
    let log = dir.path("driver.log");
    let mut cmd = Command::new(bin);
    cmd.args(args).env_remove("CLTEST_PLATFORM");
    if driver == Driver::Fake {
        cmd.env("OCL_ICD_VENDORS", &fake_icd().vendors)
            .env("FAKE_ICD_LOG", &log);
    } else {
        cmd.env_remove("OCL_ICD_VENDORS");
    }
    // The native store in the run's scratch folder, not the user's cache, unless the test
    // names one.
    cmd.env("CLSHIM_NATIVE_STORE", dir.path("native-store"));
    // pocl's kernel cache of this test's own, unless it names one: the tests of a binary
    // run at once, and pocl's cache shared between processes races (pocl issues 430 and
    // 1480; a run without clshim once aborted in pocl_binary.c reading another test's
    // half-written entry). The runs of one test share it, as runs on one machine do.
    cmd.env("POCL_CACHE_DIR", test_pocl_cache());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if shim {
        cmd.env("CLSHIM_TRACE_DIR", &traces);
    }
    let out = run(cmd, shim);
    let records = if shim && traces.exists() {
        checked_traces(&traces)
    } else {
        Vec::new()
    };
    let driver_calls = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.contains(", NULL)"))
        .map(str::to_string)
        .collect();
    // Everything is read: the directory goes (the records appear in any failure message).
    let _ = std::fs::remove_dir_all(&*dir);
    Ran {
        out,
        records,
        driver_calls,
        what: format!(
            "{} {args:?} {env:?} ({driver:?}, shim: {shim})",
            bin.file_name().unwrap().to_string_lossy()
        ),
    }
}

/// `run_on` without the shim.
pub fn plain(driver: Driver, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    run_on(driver, bin, args, env, false)
}

/// `run_on` with the shim.
pub fn shimmed(driver: Driver, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    run_on(driver, bin, args, env, true)
}

/// Runs the steps on the fake driver without and with the shim: both succeed with the
/// same output, the same calls reach the driver, and the shim wrote records. Returns the
/// run with the shim.
pub fn compare_on_fake(bin: &Path, steps: &[&str], env: &[(&str, &str)]) -> Ran {
    let a = plain(Driver::Fake, bin, steps, env);
    a.ok();
    let b = shimmed(Driver::Fake, bin, steps, env);
    b.ok();
    assert_eq!(
        a.stdout(),
        b.stdout(),
        "{steps:?} {env:?}: the shim changed what the app saw"
    );
    assert_eq!(
        a.driver_calls, b.driver_calls,
        "{steps:?} {env:?}: the shim changed what reached the driver"
    );
    assert!(!b.records.is_empty(), "{steps:?} {env:?}: no trace records");
    b
}

/// The folder of the Khronos ICD loader and Intel's CPU runtime (`.venv/intel`, which
/// `scripts/test` makes), for LD_LIBRARY_PATH; None (after `needs` said why) when missing.
pub fn khronos_loader() -> Option<PathBuf> {
    needs(&[INTEL_RUNTIME]).then(|| repo_root().join(".venv/intel/lib"))
}

/// A vendors folder in `dir`, for OCL_ICD_VENDORS, naming pocl (the system's pocl.icd)
/// and Intel's CPU runtime of `lib` (`khronos_loader`): two platforms in one list.
pub fn khronos_vendors(dir: &Path, lib: &Path) -> PathBuf {
    let v = dir.join("vendors");
    std::fs::create_dir_all(&v).unwrap();
    let pocl = std::fs::read_to_string("/etc/OpenCL/vendors/pocl.icd")
        .expect("pocl.icd (Debian's pocl-opencl-icd)");
    std::fs::write(v.join("pocl.icd"), pocl.trim()).unwrap();
    std::fs::write(
        v.join("intel-cpu.icd"),
        lib.join("libintelocl.so").to_string_lossy().as_bytes(),
    )
    .unwrap();
    v
}
