//! clshim installed the ways HPC sites install software, each from the release tarball
//! that `scripts/release --no-wheel` makes of this tree (once per test binary; crates
//! vendored in it). EasyBuild (`.venv/easybuild`) builds it with packaging/easybuild's
//! easyconfig, its checksum stamped in by the release, into a fresh prefix, with the
//! system's cargo in place of a Rust module (`--filter-deps=Rust`), passes the
//! easyconfig's sanity check and writes the Lmod module; a new shell that knows nothing of
//! the build then runs `module load clshim` and the quick start on a small pyopencl job.
//! `scripts/install`, run in the unpacked tarball with an empty cargo home and no
//! network, installs the plain way, and its two module files are loaded and used the same
//! way: the Lua one by Lmod, the Tcl one by Environment Modules. The recipes, the changelog
//! and Cargo.toml name one version.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const LMOD_INIT: &str = "/usr/share/lmod/lmod/init/bash";

/// The release (`scripts/release --no-wheel --allow-dirty`), made once into a scratch
/// folder that every test of this binary shares: the tarball, easybuild/ and spack/. Its
/// source distribution is maturin's, from `.venv/wheelbuild` (so the tests that use it
/// need WHEEL_TOOLS, or the script would make that environment).
fn release() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = scratch("release").keep();
        let t0 = Instant::now();
        let mut cmd = Command::new("bash");
        cmd.arg(repo_root().join("scripts/release"))
            .args(["--no-wheel", "--allow-dirty", "--out"])
            .arg(&dir);
        let out = run(cmd, false);
        ok(&out, "scripts/release");
        println!("scripts/release took {:.1} s", t0.elapsed().as_secs_f64());
        dir
    })
}

fn tarball() -> PathBuf {
    release().join(format!("clshim-{VERSION}.tar.gz"))
}

fn ok(o: &Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed ({:?}):\n{}\n{}",
        o.status,
        tail(&stdout(o), 80),
        tail(&stderr(o), 80)
    );
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `bash -c script` as a new login would start it, knowing nothing of the test or the
/// build: no startup files, the system's PATH, a HOME of its own, no variable of the
/// test's but the OpenCL loader's vendor folder; `vars` are given to the script.
fn new_shell(home: &Path, script: &str, vars: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.args(["--norc", "--noprofile", "-c", script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("LANG", "C.UTF-8");
    if let Some(v) = std::env::var_os("OCL_ICD_VENDORS") {
        cmd.env("OCL_ICD_VENDORS", v);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().expect("run bash")
}

/// How a shell gets the `module` command of each modules tool.
#[derive(Clone, Copy)]
enum ModulesTool {
    /// Lmod's own bash set-up.
    Lmod,
    /// Environment Modules: the one line its bash set-up defines, with the unpacked
    /// modulecmd.tcl (`$MODULECMD`).
    EnvironmentModules,
}

impl ModulesTool {
    fn init(self) -> String {
        match self {
            ModulesTool::Lmod => format!("source {LMOD_INIT}"),
            ModulesTool::EnvironmentModules => {
                r#"module() { eval "$(tclsh "$MODULECMD" bash "$@")"; }"#.to_string()
            }
        }
    }
}

/// In a new shell: `module use` the module folder, `module load clshim`, then the quick
/// start on tests/python/small_kernel.py (kernel `<name>_0`) with .venv/current's Python,
/// `clshim report`, a `clshim run` without CLSHIM_LIB (the command finds its library
/// itself), and `module unload clshim`. Checks each step against `prefix`, the folder the
/// module points at.
fn load_and_run(tool: ModulesTool, modules: &Path, prefix: &Path, name: &str) {
    let dir = scratch(&format!("module-{name}"));
    let home = dir.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let traces = dir.path("traces");
    let script = format!(
        r#"set -e
{init}
module use "$MODULES"
module load clshim
echo "command=$(command -v clshim)"
echo "CLSHIM_LIB=$CLSHIM_LIB"
clshim --version
clshim run --trace-dir "$TRACES" -- "$PY" "$SCRIPT" --name {name}
clshim report "$TRACES"
env -u CLSHIM_LIB clshim run -- sh -c 'echo "LD_PRELOAD=$LD_PRELOAD"'
module unload clshim
echo "after unload: command=$(command -v clshim || echo none) CLSHIM_LIB=${{CLSHIM_LIB-unset}}"
"#,
        init = tool.init()
    );
    let modulecmd = repo_root().join(".venv/environment-modules/modulecmd.tcl");
    let t0 = Instant::now();
    let out = new_shell(
        &home,
        &script,
        &[
            ("MODULES", modules),
            ("MODULECMD", &modulecmd),
            ("TRACES", &traces),
            ("PY", &venv_python("current")),
            ("SCRIPT", &repo_root().join("tests/python/small_kernel.py")),
            ("POCL_CACHE_DIR", &dir.path("pocl")),
            ("XDG_CACHE_HOME", &dir.path("xdg")),
        ],
    );
    ok(&out, "module load clshim, then the quick start");
    println!(
        "module load and the quick start took {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let text = stdout(&out);
    let lib = prefix.join("lib/libclshim.so");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("command={}", prefix.join("bin/clshim").display()),
        "{text}"
    );
    assert_eq!(lines[1], format!("CLSHIM_LIB={}", lib.display()), "{text}");
    assert_eq!(lines[2], format!("clshim {VERSION}"), "{text}");
    let result = text
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("RESULT line");
    let result: serde_json::Value = serde_json::from_str(result).unwrap();
    assert_eq!(result["ok"], true, "{text}");
    assert!(
        text.contains("clshim report: ") && text.contains(&format!("{name}_0")),
        "the report names no {name}_0:\n{text}"
    );
    let lib_real = lib.canonicalize().unwrap();
    assert!(
        text.lines()
            .any(|l| l == format!("LD_PRELOAD={}", lib_real.display())),
        "clshim run without CLSHIM_LIB did not find {}:\n{text}",
        lib_real.display()
    );
    assert_eq!(
        lines.last().copied(),
        Some("after unload: command=none CLSHIM_LIB=unset"),
        "{text}"
    );

    let recs = checked_traces(&traces);
    assert_eq!(one_event(&recs, "process")["clshim_version"], VERSION);
    let builds = events(&recs, "build");
    assert!(
        builds.iter().any(|b| b["kernels"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| *k == format!("{name}_0")))
            && b["result"] == 0),
        "no build of {name}_0 recorded: {recs:#?}"
    );
}

#[test]
fn easybuild_installs_the_release_and_module_load_runs_it() {
    if !needs(&[WHEEL_TOOLS, EASYBUILD, LMOD, PYOPENCL_CURRENT]) {
        return;
    }
    let dir = scratch("easybuild");
    let sources = dir.path("sources/c/clshim");
    std::fs::create_dir_all(&sources).unwrap();
    std::fs::copy(tarball(), sources.join(format!("clshim-{VERSION}.tar.gz"))).unwrap();
    let easyconfig = release().join(format!("easybuild/clshim-{VERSION}.eb"));
    let install = dir.path("install");

    let mut eb = Command::new("bash");
    eb.args(["--norc", "--noprofile", "-c"])
        .arg(format!(
            r#"set -e
source {LMOD_INIT}
exec eb "$EASYCONFIG" --filter-deps=Rust --trace "$@""#
        ))
        .arg("eb");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eb.arg("--allow-use-as-root-and-accept-consequences");
    }
    // EasyBuild's `eb` runs the `python` first on PATH; cargo and rustc follow from the
    // test's PATH (the system's cargo, for the Rust module filtered out).
    let path = format!(
        "{}:{}",
        repo_root().join(".venv/easybuild/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    eb.env("PATH", path)
        .env("EASYCONFIG", &easyconfig)
        .env("XDG_CONFIG_HOME", dir.path("config"))
        .env("XDG_CONFIG_DIRS", dir.path("config"))
        .env("EASYBUILD_MODULES_TOOL", "Lmod")
        .env("EASYBUILD_MODULE_SYNTAX", "Lua")
        .env("EASYBUILD_PREFIX", dir.path("eb"))
        .env("EASYBUILD_SOURCEPATH", dir.path("sources"))
        .env("EASYBUILD_BUILDPATH", dir.path("build"))
        .env("EASYBUILD_TMPDIR", dir.path("tmp"))
        .env("EASYBUILD_INSTALLPATH", &install)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_HOME");
    let t0 = Instant::now();
    let out = run(eb, false);
    ok(&out, "eb");
    println!(
        "eb built and installed clshim {VERSION} in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    let text = stdout(&out);
    let sha = std::fs::read_to_string(&easyconfig).unwrap();
    assert!(
        sha.contains("checksums = ['") && text.contains("verifying checksums"),
        "the release's checksum was not verified:\n{}",
        tail(&text, 40)
    );
    for check in [
        "clshim --version",
        "clshim run -- sh -c 'grep -q /libclshim.so /proc/$$/maps'",
        "clshim run -- true",
    ] {
        assert!(
            text.contains(&format!("result for command '{check}': OK")),
            "sanity check `{check}` not passed:\n{}",
            tail(&text, 40)
        );
    }
    let prefix = install.join(format!("software/clshim/{VERSION}"));
    assert!(install
        .join(format!("modules/all/clshim/{VERSION}.lua"))
        .is_file());
    load_and_run(
        ModulesTool::Lmod,
        &install.join("modules/all"),
        &prefix,
        "eb_module",
    );
}

/// A plain install from the unpacked release tarball, made once: `scripts/install` with
/// an empty cargo home and cargo offline (so every crate comes from the tarball's
/// vendor/), writing the Lmod module file into lua/ and the Tcl one into tcl/.
struct PlainInstall {
    prefix: PathBuf,
    lua: PathBuf,
    tcl: PathBuf,
}

fn plain_install() -> &'static PlainInstall {
    static INSTALL: OnceLock<PlainInstall> = OnceLock::new();
    INSTALL.get_or_init(|| {
        let dir = scratch("plain-install").keep();
        let out = Command::new("tar")
            .arg("-xzf")
            .arg(tarball())
            .arg("-C")
            .arg(&dir)
            .output()
            .unwrap();
        ok(&out, "tar -xzf");
        let tree = dir.join(format!("clshim-{VERSION}"));
        let p = PlainInstall {
            prefix: dir.join(format!("opt/clshim/{VERSION}")),
            lua: dir.join("modulefiles/lua"),
            tcl: dir.join("modulefiles/tcl"),
        };
        for (modules, syntax) in [(&p.lua, "lua"), (&p.tcl, "tcl")] {
            let mut cmd = Command::new("bash");
            cmd.arg(tree.join("scripts/install"))
                .arg("--prefix")
                .arg(&p.prefix)
                .arg("--module-dir")
                .arg(modules)
                .args(["--module-syntax", syntax])
                .current_dir(&tree)
                .env("CARGO_HOME", dir.join("empty-cargo-home"))
                .env("CARGO_NET_OFFLINE", "true")
                .env_remove("CARGO_TARGET_DIR");
            let t0 = Instant::now();
            let out = run(cmd, false);
            ok(&out, "scripts/install");
            println!(
                "scripts/install --module-syntax {syntax} took {:.1} s",
                t0.elapsed().as_secs_f64()
            );
        }
        // The folder is kept for every test of this binary; the build (200 MB) need not be.
        let _ = std::fs::remove_dir_all(&tree);
        let _ = std::fs::remove_dir_all(dir.join("empty-cargo-home"));
        p
    })
}

#[test]
fn lmod_loads_the_plain_install_module() {
    if !needs(&[WHEEL_TOOLS, LMOD, PYOPENCL_CURRENT]) {
        return;
    }
    let p = plain_install();
    assert!(p.lua.join(format!("clshim/{VERSION}.lua")).is_file());
    load_and_run(ModulesTool::Lmod, &p.lua, &p.prefix, "plain_lua");
}

#[test]
fn environment_modules_load_the_plain_install_tcl_module() {
    let [modulecmd, tclsh] = ENVIRONMENT_MODULES;
    if !needs(&[WHEEL_TOOLS, modulecmd, tclsh, PYOPENCL_CURRENT]) {
        return;
    }
    let p = plain_install();
    assert!(p.tcl.join(format!("clshim/{VERSION}")).is_file());
    load_and_run(
        ModulesTool::EnvironmentModules,
        &p.tcl,
        &p.prefix,
        "plain_tcl",
    );
}

/// Cargo.toml's version is the one the easyconfig's name and `version`, the Spack
/// package's `version(...)` and sdist name, and a CHANGELOG.md heading give: a version
/// bump without its recipes and changelog fails here (and scripts/release refuses it).
#[test]
fn recipes_and_changelog_name_cargo_version() {
    let root = repo_root();
    let eb = std::fs::read_to_string(root.join(format!("packaging/easybuild/clshim-{VERSION}.eb")))
        .expect("an easyconfig for Cargo.toml's version");
    assert!(eb.contains(&format!("\nversion = '{VERSION}'\n")), "{eb}");
    assert!(
        eb.contains("\nchecksums = []\n"),
        "the release fills in `checksums = []`"
    );
    let spack = std::fs::read_to_string(
        root.join("packaging/spack/spack_repo/clshim/packages/clshim/package.py"),
    )
    .unwrap();
    assert!(
        spack.contains(&format!("\n    version(\"{VERSION}\")\n"))
            && spack.contains(&format!(
                "url = \"https://files.pythonhosted.org/packages/source/c/clshim/clshim-{VERSION}.tar.gz\""
            )),
        "{spack}"
    );
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap();
    assert!(
        changelog
            .lines()
            .any(|l| l.starts_with(&format!("## [{VERSION}]"))),
        "CHANGELOG.md has no `## [{VERSION}]` section"
    );
}
