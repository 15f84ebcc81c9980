//! What a test needs beyond Rust, a C compiler and pocl, and whether this machine has it:
//! the Python environments `scripts/test` makes under .venv/, the real clients (hashcat,
//! CLBlast, clFFT, Boost.Compute), mpich, valgrind, EasyBuild and the two modules tools
//! (Lmod, Environment Modules), and what the simulated hosts of
//! `hosts` need (sshfs, an sshd, root, namespaces, FUSE). A plain `cargo test` on a machine
//! without one of them passes the tests that need it after one line on stderr saying what
//! was missing and that `scripts/test` runs them; `scripts/test`, which installs all of
//! it, sets CLSHIM_TEST_REQUIRE_ALL=1, under which a missing need fails the test instead,
//! so nothing is left out unseen there. What no install can give (root, a kernel or
//! container that allows namespaces and FUSE) skips with its reason even there: failing
//! would only tell a developer who is not root what the line already says.

use super::repo_root;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One thing a test needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// A file at a fixed path, from a Debian package: for programs found outside a
    /// non-root user's PATH (`/usr/sbin/sshd`), which their callers name by path anyway.
    File {
        path: &'static str,
        package: &'static str,
    },
    /// What the machine itself must allow; nothing `scripts/test` can install.
    Machine(Machine),
}

/// What the machine must allow, checked by trying it (once per test binary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    /// Running as uid 0: mounts and namespaces need it (CI runs the tests as root).
    Root,
    /// `unshare --uts --pid --mount --fork --mount-proc` works (a container may refuse it).
    Namespaces,
    /// /dev/fuse opens (a container needs `--device /dev/fuse` and CAP_SYS_ADMIN).
    Fuse,
}

/// `.venv/current`: the newest pyopencl.
pub const PYOPENCL_CURRENT: Need = Need::Venv("current");
/// `.venv/old`: pyopencl 2023.1, which still caches binaries on pocl.
pub const PYOPENCL_OLD: Need = Need::Venv("old");
/// `.venv/wheelbuild`: maturin, ziglang and auditwheel, which build and check the wheel.
pub const WHEEL_TOOLS: Need = Need::Venv("wheelbuild");
/// `.venv/intel`: the Khronos ICD loader and Intel's CPU OpenCL runtime.
pub const INTEL_RUNTIME: Need = Need::Venv("intel");
/// `.venv/easybuild`: EasyBuild, which installs clshim from its release tarball.
pub const EASYBUILD: Need = Need::Venv("easybuild");
/// Lmod's bash set-up (the `module` function), the modules tool EasyBuild runs with.
pub const LMOD: Need = Need::File {
    path: "/usr/share/lmod/lmod/init/bash",
    package: "lmod",
};
/// `.venv/environment-modules`: Environment Modules' modulecmd.tcl, unpacked from its
/// Debian package (which conflicts with lmod's), and the tclsh that runs it.
pub const ENVIRONMENT_MODULES: [Need; 2] = [
    Need::Fetched("environment-modules"),
    Need::Program {
        name: "tclsh",
        package: "tcl",
    },
];
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
/// sshfs, which mounts the simulated hosts' shared home.
pub const SSHFS: Need = Need::Program {
    name: "sshfs",
    package: "sshfs",
};
/// The sshd that serves the shared home over loopback.
pub const SSHD: Need = Need::File {
    path: "/usr/sbin/sshd",
    package: "openssh-server",
};
/// ssh-keygen, for the test's own host and user keys.
pub const SSH_KEYGEN: Need = Need::Program {
    name: "ssh-keygen",
    package: "openssh-client",
};
pub const UNSHARE: Need = Need::Program {
    name: "unshare",
    package: "util-linux",
};
pub const ROOT: Need = Need::Machine(Machine::Root);
pub const NAMESPACES: Need = Need::Machine(Machine::Namespaces);
pub const FUSE: Need = Need::Machine(Machine::Fuse);
/// Everything `hosts::Cluster` and `hosts::Host` need. Root comes first: without it the
/// probes after it are not tried, since they would fail for that reason alone.
pub const HOSTS: [Need; 7] = [ROOT, UNSHARE, SSHFS, SSHD, SSH_KEYGEN, NAMESPACES, FUSE];

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
            Need::File { path, .. } => Path::new(path).is_file(),
            Need::Machine(m) => m.refused().is_none(),
        }
    }

    /// Whether `scripts/test` can install it (so CLSHIM_TEST_REQUIRE_ALL=1 makes its
    /// absence a failure).
    pub fn installable(self) -> bool {
        !matches!(self, Need::Machine(_))
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
            Need::File { path, package } => format!("{path} (Debian package {package})"),
            Need::Machine(m) => m.refused().unwrap_or_default(),
        }
    }
}

impl Machine {
    /// None when the machine allows it, else what was tried and what it answered.
    fn refused(self) -> Option<String> {
        use std::sync::OnceLock;
        static IS_ROOT: OnceLock<Option<String>> = OnceLock::new();
        static UNSHARES: OnceLock<Option<String>> = OnceLock::new();
        static FUSE_OPENS: OnceLock<Option<String>> = OnceLock::new();
        match self {
            Machine::Root => IS_ROOT.get_or_init(|| {
                // SAFETY: geteuid has no preconditions.
                let uid = unsafe { libc::geteuid() };
                (uid != 0).then(|| {
                    format!(
                        "root (this is uid {uid}; the simulated hosts mount file systems and \
                         make namespaces)"
                    )
                })
            }),
            Machine::Namespaces => UNSHARES.get_or_init(|| {
                let args = [
                    "--uts",
                    "--pid",
                    "--mount",
                    "--fork",
                    "--mount-proc",
                    "true",
                ];
                let tried = format!("`unshare {}`", args.join(" "));
                match Command::new("unshare").args(args).output() {
                    Ok(o) if o.status.success() => None,
                    Ok(o) => Some(format!(
                        "namespaces ({tried} failed, {}: {})",
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                    Err(e) => Some(format!("namespaces ({tried} did not start: {e})")),
                }
            }),
            Machine::Fuse => FUSE_OPENS.get_or_init(|| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/fuse")
                    .err()
                    .map(|e| {
                        format!(
                            "FUSE (opening /dev/fuse: {e}; a container needs --device \
                             /dev/fuse and CAP_SYS_ADMIN)"
                        )
                    })
            }),
        }
        .clone()
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
///
/// A need of the machine (`Need::Machine`) that is missing skips the test even under
/// CLSHIM_TEST_REQUIRE_ALL=1, with its reason: no install gives it. Once root is missing,
/// the machine's other needs are not tried.
pub fn needs(needs: &[Need]) -> bool {
    let mut missing: Vec<Need> = Vec::new();
    for n in needs {
        let after_root = matches!(n, Need::Machine(_)) && missing.contains(&ROOT);
        if !after_root && !n.available() {
            missing.push(*n);
        }
    }
    if missing.is_empty() {
        return true;
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let machine = missing.iter().any(|n| !n.installable());
    let missing = missing
        .iter()
        .map(|n| n.describe())
        .collect::<Vec<_>>()
        .join(", ");
    if machine {
        let _ = writeln!(
            std::io::stderr(),
            "skipped {test}: missing {missing}; scripts/test cannot install that: run it as \
             root on a machine that allows it, as CI does"
        );
        return false;
    }
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
