//! Layer mode (`OPENCL_LAYERS=libclshim.so`) against the real ocl-icd loader and pocl:
//! a client that `dlopen`s the loader is seen in layer mode and missed in preload mode (as
//! LD_PRELOAD.md says), the binary policy applies in layer mode too, a plain C program and
//! pyopencl's wheel (with its bundled loader) work under the layer, and with both modes at
//! once every call is recorded exactly once; `clshim run` with no mode option (both doors)
//! records a linked client, a client that `dlopen`s the loader and pyopencl's wheel exactly
//! as the one door that reaches each of them does.

use crate::common;

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
    clear_shim_env(&mut cmd, &[]);
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
    build_c("dlopen_loader", &["-Wl,--as-needed"])
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
}

#[test]
fn plain_c_program_under_the_layer() {
    let dir = scratch("layer-basic");
    let bin = build_c("basic", &[]);
    let plain = launch(&bin, &[], PLAIN, &dir, &[]);
    let out = launch(&bin, &[], LAYER, &dir.join("t"), &[]);
    assert_eq!(stdout(&out), stdout(&plain));
    let recs = traces(&dir.join("t"));
    assert_eq!(events(&recs, "process")[0]["mode"], "layer");
    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 1, "{recs:#?}");
    assert_eq!(builds[0]["kernels"], serde_json::json!(["square"]));
    assert_eq!(events(&recs, "binary_query").len(), 2, "{recs:#?}");
}

#[test]
fn both_modes_at_once_record_each_call_once() {
    let dir = scratch("layer-both");
    // Linked to the loader (calls reach the preloaded symbols) ...
    let basic = build_c("basic", &[]);
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
}

#[test]
fn pyopencl_wheel_under_the_layer() {
    if !needs(&[PYOPENCL_CURRENT]) {
        return;
    }
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
}

/// Runs `program args` under `clshim run --binaries substitute` with `mode_args` (none:
/// the default, both doors), tracing into `trace`; the test's own CLSHIM_*, LD_PRELOAD
/// and OPENCL_LAYERS are removed first. The library is the one beside the executable.
fn clshim_run(
    mode_args: &[&str],
    program: &Path,
    args: &[&str],
    trace: &Path,
    env: &[(&str, PathBuf)],
) -> Output {
    shim_path(); // a fresh target/<profile>/libclshim.so beside the clshim executable
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clshim"));
    cmd.arg("run")
        .args(mode_args)
        .args(["--binaries", "substitute", "--no-summary", "--trace-dir"])
        .arg(trace)
        .arg("--")
        .arg(program)
        .args(args);
    clear_shim_env(&mut cmd, &[]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn clshim run");
    assert!(
        out.status.success(),
        "clshim run {mode_args:?} {} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        program.display(),
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

/// What a run recorded, one line per record (process records aside), sorted: the event,
/// call, parameter, action and result, so two runs of the same program compare equal when
/// each call was recorded and acted on the same number of times.
fn signature(recs: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = recs
        .iter()
        .filter(|r| !is_process_record(r))
        .map(|r| {
            format!(
                "{} {} {} {} {}",
                r["event"], r["call"], r["param"], r["action"], r["result"]
            )
        })
        .collect();
    v.sort();
    v
}

/// `clshim run` with no mode option opens both doors; for each kind of client the records
/// equal those of the one door that reaches it (a call recorded and acted on once), and
/// the binary policy applies.
fn both_doors_equal_one(
    tag: &str,
    one_door: &str,
    program: &Path,
    args: &[&str],
    env: &dyn Fn(&Path) -> Vec<(&'static str, PathBuf)>,
) -> Vec<Value> {
    let dir = scratch(tag);
    let one = dir.join("one");
    clshim_run(
        &["--mode", one_door],
        program,
        args,
        &one.join("t"),
        &env(&one),
    );
    let both = dir.join("both");
    clshim_run(&[], program, args, &both.join("t"), &env(&both));
    let one_recs = traces(&one.join("t"));
    let both_recs = traces(&both.join("t"));
    assert!(
        !events(&one_recs, "build").is_empty(),
        "--mode {one_door} reaches {tag}: {one_recs:#?}"
    );
    assert_eq!(
        signature(&both_recs),
        signature(&one_recs),
        "both doors vs --mode {one_door}"
    );
    assert_eq!(events(&both_recs, "process")[0]["mode"], one_door);
    let queries = events(&both_recs, "binary_query");
    assert!(!queries.is_empty(), "{both_recs:#?}");
    assert!(
        queries.iter().all(|q| q["action"] == "substitute"),
        "{both_recs:#?}"
    );
    both_recs
}

#[test]
fn clshim_run_default_records_a_linked_client_once() {
    let bin = build_c("basic", &[]);
    let recs = both_doors_equal_one("run-both-linked", "preload", &bin, &[], &|_| vec![]);
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
    assert_eq!(events(&recs, "binary_query").len(), 2, "{recs:#?}");
}

#[test]
fn clshim_run_default_records_a_dlopen_client_once() {
    let bin = dlopen_client();
    let recs = both_doors_equal_one("run-both-dlopen", "layer", &bin, &[], &|_| vec![]);
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
    assert_eq!(events(&recs, "binary_query").len(), 2, "{recs:#?}");
}

/// pyopencl 2023.1's wheel (bundled loader, binary cache on pocl): its calls reach the
/// preloaded symbols while the bundled loader also runs the layer.
#[test]
fn clshim_run_default_records_pyopencl_wheel_once() {
    if !needs(&[PYOPENCL_OLD]) {
        return;
    }
    let py = venv_python("old");
    let script = repo_root().join("tests/python/small_kernel.py");
    let caches = |d: &Path| {
        vec![
            ("POCL_CACHE_DIR", d.join("pocl")),
            ("XDG_CACHE_HOME", d.join("xdg")),
        ]
    };
    let recs = both_doors_equal_one(
        "run-both-pyopencl",
        "preload",
        &py,
        &[script.to_str().unwrap(), "--name", "clshim_both"],
        &caches,
    );
    let builds: Vec<_> = events(&recs, "build")
        .into_iter()
        .filter(|b| {
            b["kernels"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "clshim_both_0"))
        })
        .collect();
    assert_eq!(builds.len(), 1, "{recs:#?}");
}

/// Two distinct copies of the library (two files, as a module file's copy and a wheel's
/// would be) in one process, under both doors, under the layer door twice and under the
/// preload door twice, in either order: one copy records, so each process writes one
/// trace file and one summary, with each build and query recorded once and the policy
/// applied once.
#[test]
fn two_copies_of_the_library_record_each_call_once() {
    let dir = scratch("two-copies");
    let (a, b) = (dir.join("a/libclshim.so"), dir.join("b/libclshim.so"));
    for c in [&a, &b] {
        std::fs::create_dir_all(c.parent().unwrap()).unwrap();
        std::fs::copy(shim_path(), c).unwrap();
    }
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let ab = format!("{a}:{b}");
    let ba = format!("{b}:{a}");
    let basic = build_c("basic", &[]);
    let client = dlopen_client();
    let cases: [(&Path, &str, &str); 7] = [
        (&basic, a, b),
        (&basic, "", &ab),
        (&basic, &ab, ""),
        (&client, a, b),
        (&client, a, &ab),
        (&client, "", &ab),
        (&client, &ba, &ba),
    ];
    for (i, (program, preload, layers)) in cases.into_iter().enumerate() {
        let trace = dir.join(format!("t{i}"));
        let mut env = vec![
            ("CLSHIM_BINARIES", "substitute"),
            ("CLSHIM_SUMMARY", "1"),
            ("CLSHIM_TRACE_DIR", trace.to_str().unwrap()),
        ];
        if !preload.is_empty() {
            env.push(("LD_PRELOAD", preload));
        }
        if !layers.is_empty() {
            env.push(("OPENCL_LAYERS", layers));
        }
        let out = launch(program, &[], PLAIN, &trace, &env);
        let case = format!(
            "{} LD_PRELOAD={preload} OPENCL_LAYERS={layers}",
            program.display()
        );
        let files = std::fs::read_dir(&trace).map(|d| d.count()).unwrap_or(0);
        assert_eq!(files, 1, "{case}: one trace file");
        let summaries = stderr(&out)
            .lines()
            .filter(|l| l.starts_with("clshim: pid "))
            .count();
        assert_eq!(summaries, 1, "{case}:\n{}", stderr(&out));
        let recs = traces(&trace);
        assert_eq!(events(&recs, "build").len(), 1, "{case}: {recs:#?}");
        let queries = events(&recs, "binary_query");
        assert_eq!(queries.len(), 2, "{case}: {recs:#?}");
        assert!(
            queries.iter().all(|q| q["action"] == "substitute"),
            "{case}: {recs:#?}"
        );
    }
}

/// A library in a folder with a space works through the layer door on real pocl (the
/// loaders split `OPENCL_LAYERS` at colons only).
#[test]
fn clshim_run_layer_from_a_path_with_a_space_records() {
    let dir = scratch("space-layer");
    let lib = dir.join("My Project/libclshim.so");
    std::fs::create_dir_all(lib.parent().unwrap()).unwrap();
    std::fs::copy(shim_path(), &lib).unwrap();
    let trace = dir.join("t");
    let client = dlopen_client();
    let mut c = Command::new(env!("CARGO_BIN_EXE_clshim"));
    c.args(["run", "--mode", "layer", "--lib"])
        .arg(&lib)
        .arg("--trace-dir")
        .arg(&trace)
        .arg("--")
        .arg(&client);
    clear_shim_env(&mut c, &[]);
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let recs = traces(&trace);
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
}
