//! The clshim wheel as a user gets it: `pip wheel .` at the repository root (with the
//! tools of `.venv/wheelbuild`, no build isolation, so nothing is downloaded), checked
//! with auditwheel (manylinux_2_28 or older) and readelf (the library links no OpenCL
//! library), installed into a fresh virtual environment with no cargo on PATH, then used:
//! `clshim --version` and `python -m clshim --version` print Cargo.toml's version, the
//! installed `clshim run` finds its bundled library with no option and runs pyopencl's
//! workload through both doors with each build recorded once, and `python -m clshim
//! report` reads the traces. A damaged install (library missing or truncated) fails with
//! exit status 2 before the command starts. The source distribution carries what a
//! machine with cargo needs to build the wheel again.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// `.venv/wheelbuild`'s Python (maturin, ziglang, auditwheel); `scripts/test` makes it.
fn tools_python() -> PathBuf {
    venv_python("wheelbuild")
}

/// The wheel, built once per test binary into target/wheel/dist with its own cargo
/// target directory (target/wheel/cargo), so it never waits on the test build's lock.
fn wheel() -> &'static Path {
    static WHEEL: OnceLock<PathBuf> = OnceLock::new();
    WHEEL.get_or_init(|| {
        let base = repo_root().join("target/wheel");
        let dist = base.join("dist");
        let _ = std::fs::remove_dir_all(&dist);
        std::fs::create_dir_all(&dist).unwrap();
        let t0 = std::time::Instant::now();
        let out = Command::new(tools_python())
            .args(["-m", "pip", "wheel", "--no-deps", "--no-build-isolation"])
            .args(["--no-index", "-q", "-w"])
            .arg(&dist)
            .arg(repo_root())
            .env("CARGO_TARGET_DIR", base.join("cargo"))
            .env_remove("MATURIN_PEP517_ARGS")
            .output()
            .expect("run pip wheel");
        assert!(
            out.status.success(),
            "pip wheel failed:\n{}\n{}",
            stdout(&out),
            stderr(&out)
        );
        let wheels: Vec<PathBuf> = std::fs::read_dir(&dist)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "whl"))
            .collect();
        assert_eq!(wheels.len(), 1, "{wheels:?}");
        let w = wheels.into_iter().next().unwrap();
        println!(
            "built {} ({} bytes) in {:.1} s",
            w.display(),
            std::fs::metadata(&w).unwrap().len(),
            t0.elapsed().as_secs_f64()
        );
        w
    })
}

/// PATH without any directory that holds `cargo`, so the installed package is shown to
/// need no Rust toolchain.
fn path_without_cargo(first: &Path) -> String {
    let mut dirs = vec![first.to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p).filter(|d| !d.join("cargo").exists()));
    }
    std::env::join_paths(dirs).unwrap().into_string().unwrap()
}

/// A command with no CLSHIM_*, LD_PRELOAD, OPENCL_LAYERS or MATURIN_* from the test's
/// environment and `path` as PATH.
fn clean(program: &Path, path: &str) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("CLSHIM_")
            || k.starts_with("MATURIN")
            || k == "LD_PRELOAD"
            || k == "OPENCL_LAYERS"
        {
            c.env_remove(&k);
        }
    }
    c.env("PATH", path);
    c
}

struct Venv {
    dir: PathBuf,
    path: String,
}

impl Venv {
    fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }
    fn cmd(&self, name: &str) -> Command {
        clean(&self.bin(name), &self.path)
    }
}

/// A fresh virtual environment with the wheel installed (and nothing else), made once.
fn installed() -> &'static Venv {
    static VENV: OnceLock<Venv> = OnceLock::new();
    VENV.get_or_init(|| {
        // Shared by every test of this binary: kept, never removed by one of them.
        let dir = scratch("wheel-venv").keep();
        let venv = dir.join("venv");
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let out = Command::new(&python)
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .expect("run python3 -m venv");
        assert!(out.status.success(), "venv: {}", stderr(&out));
        let v = Venv {
            path: path_without_cargo(&venv.join("bin")),
            dir: venv,
        };
        let wheel = wheel();
        let t0 = std::time::Instant::now();
        let out = v
            .cmd("python")
            .args(["-m", "pip", "install", "-q", "--no-index", "--no-deps"])
            .arg(wheel)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pip install: {}\n{}",
            stdout(&out),
            stderr(&out)
        );
        println!("pip install took {:.2} s", t0.elapsed().as_secs_f64());
        v
    })
}

/// The installed package directory: site-packages/clshim.
fn package_dir(v: &Venv) -> PathBuf {
    let out = v
        .cmd("python")
        .args([
            "-c",
            "import clshim, os; print(os.path.dirname(clshim.__file__))",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    PathBuf::from(stdout(&out).trim())
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed ({:?}):\n{}\n{}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

#[test]
fn wheel_is_manylinux_2_28_or_older_and_links_no_opencl() {
    if !needs(&[WHEEL_TOOLS]) {
        return;
    }
    let w = wheel();
    let name = w.file_name().unwrap().to_str().unwrap();
    let out = Command::new(tools_python().with_file_name("auditwheel"))
        .arg("show")
        .arg(w)
        .output()
        .expect("run auditwheel");
    ok(&out, "auditwheel show");
    let text = stdout(&out).replace('\n', " ");
    // "... is consistent with the following platform tag: "manylinux_2_17_x86_64"."
    let tag = text
        .split("platform tag:")
        .nth(1)
        .and_then(|t| t.split('"').nth(1))
        .unwrap_or_else(|| panic!("no platform tag in: {text}"));
    let minor: u32 = tag
        .strip_prefix("manylinux_2_")
        .and_then(|t| t.split('_').next())
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("not a manylinux tag: {tag}"));
    assert!(minor <= 28, "{tag}: newer than manylinux_2_28");
    assert!(name.contains(tag), "{name} is not tagged {tag}");

    let lib = package_dir(installed()).join("libclshim.so");
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .unwrap();
    ok(&out, "readelf -d");
    let dynamic = stdout(&out);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(!needed.is_empty(), "{dynamic}");
    assert!(
        needed.iter().all(|l| !l.contains("OpenCL")),
        "the library links an OpenCL library: {needed:#?}"
    );
}

#[test]
fn installed_command_and_module_print_cargo_version() {
    if !needs(&[WHEEL_TOOLS]) {
        return;
    }
    let v = installed();
    let want = format!("clshim {}\n", env!("CARGO_PKG_VERSION"));
    let out = v.cmd("clshim").arg("--version").output().unwrap();
    ok(&out, "clshim --version");
    assert_eq!(stdout(&out), want);
    let out = v
        .cmd("python")
        .args(["-m", "clshim", "--version"])
        .output()
        .unwrap();
    ok(&out, "python -m clshim --version");
    assert_eq!(stdout(&out), want);
    // No cargo on the PATH the installed package ran with.
    let out = clean(Path::new("sh"), &v.path)
        .args(["-c", "command -v cargo"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "cargo on PATH: {}", stdout(&out));
}

#[test]
fn installed_run_finds_bundled_library_through_both_doors() {
    if !needs(&[WHEEL_TOOLS]) {
        return;
    }
    let v = installed();
    let lib = package_dir(v).join("libclshim.so");
    for launcher in [&["clshim"][..], &["python", "-m", "clshim"]] {
        let out = v
            .cmd(launcher[0])
            .args(&launcher[1..])
            .args([
                "run",
                "--",
                "sh",
                "-c",
                "echo $LD_PRELOAD; echo $OPENCL_LAYERS",
            ])
            .output()
            .unwrap();
        ok(&out, "clshim run");
        assert_eq!(
            stdout(&out),
            format!("{}\n{}\n", lib.display(), lib.display()),
            "{launcher:?}"
        );
    }
}

#[test]
fn installed_run_records_the_pyopencl_workload() {
    if !needs(&[WHEEL_TOOLS, PYOPENCL_CURRENT]) {
        return;
    }
    let v = installed();
    let dir = scratch("wheel-workload");
    let traces = dir.join("traces");
    let script = repo_root().join("tests/python/small_kernel.py");
    let out = v
        .cmd("clshim")
        .args(["run", "--no-summary", "--trace-dir"])
        .arg(&traces)
        .arg("--")
        .arg(venv_python("current"))
        .arg(&script)
        .args(["--name", "clshim_wheel"])
        .env("POCL_CACHE_DIR", dir.join("pocl"))
        .env("XDG_CACHE_HOME", dir.join("xdg"))
        // clshim run's program cache keeps each compile there: not in the store of $HOME.
        .env("CLSHIM_NATIVE_STORE", dir.join("store"))
        .output()
        .unwrap();
    ok(&out, "clshim run (pyopencl workload)");
    let so = stdout(&out);
    let result: Value = serde_json::from_str(
        so.lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .expect("RESULT line"),
    )
    .unwrap();
    assert_eq!(result["ok"], true, "{so}");

    let recs = checked_traces(&traces);
    let procs = events(&recs, "process");
    assert_eq!(procs.len(), 1, "{recs:#?}");
    assert_eq!(procs[0]["clshim_version"], env!("CARGO_PKG_VERSION"));
    let builds: Vec<_> = events(&recs, "build")
        .into_iter()
        .filter(|b| {
            b["kernels"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "clshim_wheel_0"))
        })
        .collect();
    // Preload and layer both active: the one build is recorded once.
    assert_eq!(builds.len(), 1, "{recs:#?}");
    assert_eq!(builds[0]["result"], 0);

    let out = v
        .cmd("python")
        .args(["-m", "clshim", "report"])
        .arg(&traces)
        .output()
        .unwrap();
    ok(&out, "python -m clshim report");
    assert!(stdout(&out).contains("clshim_wheel_0"), "{}", stdout(&out));
}

/// A damaged install: the bundled library missing, then truncated. `clshim run` names
/// the file and the fix, exits 2, and the command never starts. (Installed with
/// `pip install --target`, a layout the damage cannot leak from.)
#[test]
fn damaged_install_fails_before_the_command() {
    if !needs(&[WHEEL_TOOLS]) {
        return;
    }
    let v = installed();
    let dir = scratch("wheel-damaged");
    let target = dir.join("site");
    let out = v
        .cmd("python")
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--target",
        ])
        .arg(&target)
        .arg(wheel())
        .output()
        .unwrap();
    ok(&out, "pip install --target");
    let pkg = target.join("clshim");
    let lib = pkg.join("libclshim.so");
    let marker = dir.join("ran");
    let cmd = format!("touch {}", marker.display());
    let run = || {
        v.cmd("python")
            .args(["-m", "clshim", "run", "--", "sh", "-c", &cmd])
            .env("PYTHONPATH", &target)
            .output()
            .unwrap()
    };
    // Intact, from a --target install too.
    ok(&run(), "clshim run from a --target install");
    assert!(marker.exists());
    std::fs::remove_file(&marker).unwrap();

    let good = std::fs::read(&lib).unwrap();
    std::fs::remove_file(&lib).unwrap();
    let out = run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("{} is missing", lib.display()))
            && err.contains("No such file")
            && err.contains("pip install --force-reinstall clshim"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(!marker.exists(), "the command ran");

    std::fs::write(&lib, &good[..4096]).unwrap();
    let out = run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{} cannot be loaded: truncated: 4096 bytes",
            lib.display()
        )) && err.contains("pip install --force-reinstall clshim"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");

    // Something else in its place.
    std::fs::write(&lib, b"<html>not found</html>").unwrap();
    let out = run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not an ELF shared library"), "{err}");
    assert!(!marker.exists(), "the command ran");

    // The launcher without its executable.
    std::fs::write(&lib, &good).unwrap();
    std::fs::remove_file(pkg.join("clshim")).unwrap();
    let out = run();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("cannot run {}", pkg.join("clshim").display()))
            && err.contains("pip install --force-reinstall clshim"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
}

/// The source distribution holds what building the wheel from it needs: the build
/// backend, the Python package, the workspace (both crates) and its lock file.
#[test]
fn sdist_carries_the_backend_and_the_crate() {
    if !needs(&[WHEEL_TOOLS]) {
        return;
    }
    let dir = scratch("wheel-sdist");
    let out = clean(&tools_python(), &std::env::var("PATH").unwrap())
        .args(["-c", "import sys; sys.path.insert(0, 'python/backend'); import clshim_backend; print(clshim_backend.build_sdist(sys.argv[1]))"])
        .arg(&dir)
        .current_dir(repo_root())
        .output()
        .unwrap();
    ok(&out, "build_sdist");
    let name = stdout(&out).lines().last().unwrap_or("").trim().to_string();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(name, format!("clshim-{version}.tar.gz"));
    let out = Command::new("tar")
        .arg("tzf")
        .arg(dir.join(&name))
        .output()
        .unwrap();
    ok(&out, "tar tzf");
    let list = stdout(&out);
    for f in [
        "pyproject.toml",
        "Cargo.toml",
        "Cargo.lock",
        "build.rs",
        "src/lib.rs",
        "src/bin/clshim/main.rs",
        "crates/clshim-format/Cargo.toml",
        "crates/clshim-format/src/lib.rs",
        "python/backend/clshim_backend.py",
        "python/clshim/__init__.py",
        "python/clshim/__main__.py",
    ] {
        let path = format!("clshim-{version}/{f}");
        assert!(list.lines().any(|l| l == path), "{path} missing:\n{list}");
    }
}
