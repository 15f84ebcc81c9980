//! Layer mode (`OPENCL_LAYERS=libclshim.so`) against the real ocl-icd loader and pocl:
//! a client that `dlopen`s the loader is seen in layer mode and missed in preload mode (as
//! LD_PRELOAD.md says), the binary policy applies in layer mode too, a plain C program and
//! pyopencl's wheel (with its bundled loader) work under the layer, and with both modes at
//! once every call is recorded exactly once.

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[derive(Clone, Copy)]
struct Modes {
    preload: bool,
    layer: bool,
}

const PLAIN: Modes = Modes {
    preload: false,
    layer: false,
};
const PRELOAD: Modes = Modes {
    preload: true,
    layer: false,
};
const LAYER: Modes = Modes {
    preload: false,
    layer: true,
};
const BOTH: Modes = Modes {
    preload: true,
    layer: true,
};

/// Runs `program args` with the shim in `modes`, tracing into `trace` (when any mode is
/// on) with the extra `env`; every CLSHIM_*, LD_PRELOAD and OPENCL_LAYERS of the test's own
/// environment is removed first.
fn launch(
    program: &Path,
    args: &[&str],
    modes: Modes,
    trace: &Path,
    env: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("CLSHIM_") || k == "LD_PRELOAD" || k == "OPENCL_LAYERS" {
            cmd.env_remove(&k);
        }
    }
    if modes.preload {
        cmd.env("LD_PRELOAD", shim_path());
    }
    if modes.layer {
        cmd.env("OPENCL_LAYERS", shim_path());
    }
    if modes.preload || modes.layer {
        cmd.env("CLSHIM_TRACE_DIR", trace);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{} {args:?} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        program.display(),
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

fn traces(dir: &Path) -> Vec<Value> {
    if dir.is_dir() {
        checked_traces(dir)
    } else {
        Vec::new()
    }
}

fn dlopen_client() -> PathBuf {
    build_ctest("dlopen_loader", &["-Wl,--as-needed"])
}

#[test]
fn preload_mode_misses_a_client_that_dlsyms_the_loader() {
    let dir = scratch("layer-miss");
    let bin = dlopen_client();
    let plain = launch(&bin, &[], PLAIN, &dir, &[]);
    let pre = launch(
        &bin,
        &[],
        PRELOAD,
        &dir.join("t"),
        &[("CLSHIM_BINARIES", "substitute")],
    );
    assert_eq!(stdout(&pre), stdout(&plain));
    let recs = traces(&dir.join("t"));
    assert!(
        events(&recs, "build").is_empty() && events(&recs, "binary_query").is_empty(),
        "preload mode cannot see calls taken with dlsym(handle): {recs:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn layer_mode_applies_the_policy_to_a_dlopen_client() {
    let dir = scratch("layer-policy");
    let bin = dlopen_client();
    let plain = launch(&bin, &[], PLAIN, &dir, &[]);
    let out = launch(
        &bin,
        &[],
        LAYER,
        &dir.join("t"),
        &[("CLSHIM_BINARIES", "substitute")],
    );
    // The client prints the binary size it got; only that line may differ.
    let keep = |s: String| {
        s.lines()
            .filter(|l| !l.contains("binary"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(keep(stdout(&out)), keep(stdout(&plain)));
    let recs = traces(&dir.join("t"));
    assert_eq!(events(&recs, "process")[0]["mode"], "layer");
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
    let queries = events(&recs, "binary_query");
    assert_eq!(queries.len(), 2, "{recs:#?}");
    for q in queries {
        assert_eq!(q["action"], "substitute", "{q}");
        assert_eq!(q["result"], 0);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plain_c_program_under_the_layer() {
    let dir = scratch("layer-basic");
    let bin = build_ctest("basic", &[]);
    let plain = launch(&bin, &[], PLAIN, &dir, &[]);
    let out = launch(&bin, &[], LAYER, &dir.join("t"), &[]);
    assert_eq!(stdout(&out), stdout(&plain));
    let recs = traces(&dir.join("t"));
    assert_eq!(events(&recs, "process")[0]["mode"], "layer");
    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 1, "{recs:#?}");
    assert_eq!(builds[0]["kernels"], serde_json::json!(["square"]));
    assert_eq!(events(&recs, "binary_query").len(), 2, "{recs:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn both_modes_at_once_record_each_call_once() {
    let dir = scratch("layer-both");
    // Linked to the loader (calls reach the preloaded symbols) ...
    let basic = build_ctest("basic", &[]);
    launch(
        &basic,
        &[],
        BOTH,
        &dir.join("linked"),
        &[("CLSHIM_BINARIES", "substitute")],
    );
    let recs = traces(&dir.join("linked"));
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
    assert_eq!(events(&recs, "binary_query").len(), 2, "{recs:#?}");
    assert_eq!(events(&recs, "process")[0]["mode"], "preload");
    // ... and dlopen-ing it (calls reach the layer).
    let client = dlopen_client();
    launch(
        &client,
        &[],
        BOTH,
        &dir.join("dlopen"),
        &[("CLSHIM_BINARIES", "substitute")],
    );
    let recs = traces(&dir.join("dlopen"));
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
    let queries = events(&recs, "binary_query");
    assert_eq!(queries.len(), 2, "{recs:#?}");
    assert!(
        queries.iter().all(|q| q["action"] == "substitute"),
        "{recs:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pyopencl_wheel_under_the_layer() {
    let dir = scratch("layer-pyopencl");
    let py = venv_python("current");
    let script = repo_root().join("tests/python/small_kernel.py");
    let script = script.to_str().unwrap();
    let caches = dir.join("caches");
    let cache_env = [
        ("POCL_CACHE_DIR", caches.join("pocl")),
        ("XDG_CACHE_HOME", caches.join("xdg")),
    ];
    let env: Vec<(&str, &str)> = cache_env
        .iter()
        .map(|(k, v)| (*k, v.to_str().unwrap()))
        .collect();
    let out = launch(
        &py,
        &[script, "--name", "clshim_layer"],
        LAYER,
        &dir.join("t"),
        &env,
    );
    let so = stdout(&out);
    let result: Value = serde_json::from_str(
        so.lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .expect("RESULT line"),
    )
    .unwrap();
    assert_eq!(result["ok"], true, "{so}");
    let recs = traces(&dir.join("t"));
    assert_eq!(events(&recs, "process")[0]["mode"], "layer");
    let builds = events(&recs, "build");
    assert!(
        builds.iter().any(|b| b["result"] == 0
            && b["kernels"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "clshim_layer_0"))),
        "the wheel's bundled loader ran the layer: {recs:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
