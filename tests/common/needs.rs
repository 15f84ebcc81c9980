//! What a test needs beyond Rust, a C compiler and pocl, and whether this machine has it:
//! the Python environments `scripts/test` makes under .venv/, the real clients (hashcat,
//! CLBlast, clFFT, Boost.Compute), mpich and valgrind. A plain `cargo test` on a machine
//! without one of them passes the tests that need it after one line on stderr saying what
//! was missing and that `scripts/test` runs them; `scripts/test`, which installs all of
//! it, sets CLSHIM_TEST_REQUIRE_ALL=1, under which a missing need fails the test instead,
//! so nothing is left out unseen there.

use super::repo_root;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One thing a test needs.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// The Python environment .venv/<name>, complete (`scripts/lib.sh`'s `ensure_venv`
    /// writes its `clshim-stamp` last).
    Venv(&'static str),
    /// A program on PATH, from a Debian package.
    Program {
        name: &'static str,
        package: &'static str,
    },
    /// A header under /usr/include or /usr/local/include, from a Debian package.
    Header {
        path: &'static str,
        package: &'static str,
    },
    /// A library the C compiler links with `-l<name>`, from a Debian package.
    Library {
        name: &'static str,
        package: &'static str,
    },
    /// Files `scripts/test` fetches into .venv/<name> (its `clshim-stamp` written last).
    Fetched(&'static str),
}

/// `.venv/current`: the newest pyopencl.
pub const PYOPENCL_CURRENT: Need = Need::Venv("current");
/// `.venv/old`: pyopencl 2023.1, which still caches binaries on pocl.
pub const PYOPENCL_OLD: Need = Need::Venv("old");
/// `.venv/wheelbuild`: maturin, ziglang and auditwheel, which build and check the wheel.
pub const WHEEL_TOOLS: Need = Need::Venv("wheelbuild");
/// `.venv/intel`: the Khronos ICD loader and Intel's CPU OpenCL runtime.
pub const INTEL_RUNTIME: Need = Need::Venv("intel");
/// `.venv/pyopencl-tests`: pyopencl's own test files, of the version in `.venv/current`.
pub const PYOPENCL_TEST_FILES: Need = Need::Fetched("pyopencl-tests");
pub const HASHCAT: Need = Need::Program {
    name: "hashcat",
    package: "hashcat",
};
pub const MPIEXEC: Need = Need::Program {
    name: "mpiexec",
    package: "mpich",
};
pub const STRACE: Need = Need::Program {
    name: "strace",
    package: "strace",
};
pub const VALGRIND: Need = Need::Program {
    name: "valgrind",
    package: "valgrind",
};
pub const CLBLAST: Need = Need::Library {
    name: "clblast",
    package: "libclblast-dev",
};
pub const CLFFT: Need = Need::Library {
    name: "clFFT",
    package: "libclfft-dev",
};
/// Boost.Compute (header-only) and the C++ compiler and library its offline cache needs.
pub const BOOST_COMPUTE: [Need; 3] = [
    Need::Header {
        path: "boost/compute.hpp",
        package: "libboost-dev",
    },
    Need::Library {
        name: "boost_filesystem",
        package: "libboost-filesystem-dev",
    },
    Need::Program {
        name: "c++",
        package: "g++",
    },
];

impl Need {
    /// Whether this machine has it.
    pub fn available(self) -> bool {
        match self {
            Need::Venv(name) => {
                let dir = venv_dir(name);
                dir.join("clshim-stamp").is_file() && dir.join("bin/python").exists()
            }
            Need::Program { name, .. } => on_path(name),
            Need::Header { path, .. } => ["/usr/include", "/usr/local/include"]
                .iter()
                .any(|d| Path::new(d).join(path).is_file()),
            Need::Library { name, .. } => compiler_finds_library(name),
            Need::Fetched(name) => venv_dir(name).join("clshim-stamp").is_file(),
        }
    }

    /// What is missing, in words.
    pub fn describe(self) -> String {
        match self {
            Need::Venv(name) => format!("{} (a Python environment)", venv_dir(name).display()),
            Need::Program { name, package } => {
                format!("`{name}` on PATH (Debian package {package})")
            }
            Need::Header { path, package } => format!("<{path}> (Debian package {package})"),
            Need::Library { name, package } => format!("lib{name}.so (Debian package {package})"),
            Need::Fetched(name) => {
                format!("{} (fetched by scripts/test)", venv_dir(name).display())
            }
        }
    }
}

fn venv_dir(name: &str) -> PathBuf {
    repo_root().join(".venv").join(name)
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        .unwrap_or(false)
}

/// `cc -print-file-name=lib<name>.so` answers a full path when the linker's search path
/// holds the library, and the bare name when it does not.
fn compiler_finds_library(name: &str) -> bool {
    let file = format!("lib{name}.so");
    Command::new("cc")
        .arg(format!("-print-file-name={file}"))
        .output()
        .map(|o| Path::new(String::from_utf8_lossy(&o.stdout).trim()).is_absolute())
        .unwrap_or(false)
}

/// Whether `scripts/test` asked that no test be skipped (CLSHIM_TEST_REQUIRE_ALL=1).
pub fn require_all() -> bool {
    std::env::var_os("CLSHIM_TEST_REQUIRE_ALL").is_some_and(|v| v == "1")
}

/// True when every one of `needs` is here. Otherwise the calling test is not run: under
/// CLSHIM_TEST_REQUIRE_ALL=1 this panics (the test fails), else it prints one line to
/// stderr naming the test and what is missing, and returns false (the test returns early
/// and passes). The line goes to the process's stderr directly, past the test harness's
/// capture, so a plain `cargo test` shows it.
pub fn needs(needs: &[Need]) -> bool {
    let missing: Vec<String> = needs
        .iter()
        .filter(|n| !n.available())
        .map(|n| n.describe())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let missing = missing.join(", ");
    assert!(
        !require_all(),
        "{test} needs {missing}: scripts/test installs it (CLSHIM_TEST_REQUIRE_ALL=1 lets no \
         test be skipped)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: missing {missing}; run scripts/test to run it"
    );
    false
}
