//! pyopencl under the shim, on pocl's CPU driver: the application whose binary cache makes pocl
//! compile every kernel twice.
//!
//! Needs the Python environments that `scripts/test` creates: `.venv/current` (newest
//! pyopencl, which no longer caches binaries on pocl) and `.venv/old` (pyopencl 2023.1,
//! which does). Every run gets its own cold `POCL_CACHE_DIR`, `XDG_CACHE_HOME` (pyopencl's
//! binary cache lives under the latter) and native store inside a scratch folder.
use crate::common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What tests/python/small_kernel.py reported, plus its stderr and the trace records.
struct PyRun {
    out: Output,
    result: Value,
    traces: Vec<Value>,
}

impl PyRun {
    fn stderr(&self) -> String {
        stderr(&self.out)
    }
}

/// Runs tests/python/small_kernel.py with the `which` venv under LD_PRELOAD, with the
/// caches under `caches` (the same folder again means warm caches) and its trace in
/// `trace_dir`. `policy` sets CLSHIM_BINARIES (None: the default).
fn run_small_kernel(
    which: &str,
    caches: &Path,
    trace_dir: &Path,
    policy: Option<&str>,
    name: &str,
) -> PyRun {
    let mut cmd = Command::new(venv_python(which));
    cmd.arg(repo_root().join("tests/python/small_kernel.py"))
        .args(["--name", name, "--kernels", "2", "--statements", "3"])
        .env("POCL_CACHE_DIR", caches.join("pocl"))
        .env("XDG_CACHE_HOME", caches.join("xdg"))
        .env_remove("PYOPENCL_NO_CACHE")
        .env_remove("PYOPENCL_CTX")
        .env_remove("PYOPENCL_COMPILER_OUTPUT")
        .env_remove("PYTHONWARNINGS");
    if std::env::var_os("OCL_ICD_VENDORS").is_none() && Path::new("/etc/OpenCL/vendors").is_dir() {
        cmd.env("OCL_ICD_VENDORS", "/etc/OpenCL/vendors");
    }
    // `substitute` leaves its requests in the native store, and the warm service it starts
    // makes them there: not in the store of $HOME, where later runs would load them.
    let mut envs: Vec<(&str, String)> = vec![
        ("CLSHIM_TRACE_DIR", trace_dir.display().to_string()),
        (
            "CLSHIM_NATIVE_STORE",
            caches.join("store").display().to_string(),
        ),
    ];
    if let Some(p) = policy {
        envs.push(("CLSHIM_BINARIES", p.to_string()));
    }
    let out = run_with_env(cmd, &envs);
    let so = stdout(&out);
    let se = stderr(&out);
    assert!(
        out.status.success(),
        "small_kernel.py ({which}, policy {policy:?}) failed: {}\nstdout:\n{so}\nstderr:\n{se}",
        out.status
    );
    let line = so
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line\nstdout:\n{so}\nstderr:\n{se}"));
    let result: Value = serde_json::from_str(line).unwrap();
    assert_eq!(result["ok"], true, "wrong results: {result}\nstderr:\n{se}");
    assert!(
        trace_dir.is_dir(),
        "the shim wrote no trace folder {} (is CLSHIM_TRACE_DIR honoured?)\nstderr:\n{se}",
        trace_dir.display()
    );
    let traces = read_traces(trace_dir);
    PyRun {
        out,
        result,
        traces,
    }
}

/// Like common::run(cmd, true) (inherited CLSHIM_*, LD_PRELOAD and OPENCL_LAYERS are
/// removed, the shim is preloaded), but sets `envs` after that clean-up.
fn run_with_env(mut cmd: Command, envs: &[(&str, String)]) -> Output {
    clear_shim_env(&mut cmd, &[]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.env("LD_PRELOAD", shim_path());
    cmd.output().expect("spawn test command")
}

/// (scratch root, caches, trace folder of run 1, of run 2). The root goes when the test
/// passes, so only a failed test's folder stays for a look.
fn dirs(tag: &str) -> (Scratch, PathBuf, PathBuf, PathBuf) {
    let root = scratch(tag);
    let caches = root.join("caches");
    let (trace1, trace2) = (root.join("trace1"), root.join("trace2"));
    (root, caches, trace1, trace2)
}

fn ok_builds(recs: &[Value]) -> Vec<&Value> {
    events(recs, "build")
        .into_iter()
        .filter(|r| r["result"] == 0)
        .collect()
}

fn brief(recs: &[Value]) -> String {
    recs.iter()
        .filter(|r| !is_process_record(r))
        .map(|r| {
            format!(
                "{} {} action={} result={} sizes={} lengths={}",
                r["event"], r["param"], r["action"], r["result_name"], r["sizes"], r["lengths"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// (i) The newest pyopencl under LD_PRELOAD: correct results, and its builds are in the
/// trace (it no longer asks pocl for binaries, so there is no binary query to record).
#[test]
fn current_pyopencl_builds_are_traced() {
    if !needs(&[PYOPENCL_CURRENT]) {
        return;
    }
    let (_root, caches, trace, _) = dirs("py-current");
    let r = run_small_kernel("current", &caches, &trace, None, "clshim_cur");

    let procs = events(&r.traces, "process");
    assert_eq!(
        procs.len(),
        1,
        "one process record expected:\n{:#?}",
        r.traces
    );
    assert_eq!(procs[0]["mode"], "preload");
    assert_eq!(procs[0]["policy"], "pass");

    let builds = ok_builds(&r.traces);
    for name in ["clshim_cur_0", "clshim_cur_1"] {
        assert!(
            builds.iter().any(|b| b["kernels"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == name))),
            "no successful build record names kernel {name}:\n{}",
            brief(&r.traces)
        );
    }
    for b in &builds {
        assert_eq!(b["call"], "clBuildProgram");
        assert_eq!(b["source"]["origin"], "source");
    }
    assert!(
        events(&r.traces, "binary_query").is_empty(),
        "pyopencl >= 2024.2.3 should not query binaries on pocl:\n{}",
        brief(&r.traces)
    );
}

/// (ii) pyopencl 2023.1 with CLSHIM_BINARIES=substitute: run 1 (cold) gets clshim
/// binaries instead of pocl's, which pyopencl stores in its cache; run 2 (warm, same
/// cache folders) loads them, and the shim turns them back into a source build.
#[test]
fn old_pyopencl_substitute_round_trips_through_its_cache() {
    if !needs(&[PYOPENCL_OLD]) {
        return;
    }
    let (_root, caches, trace1, trace2) = dirs("py-substitute");

    let r1 = run_small_kernel("old", &caches, &trace1, Some("substitute"), "clshim_sub");
    let err1 = r1.stderr();
    assert_eq!(
        r1.result["cache_misses"], 2,
        "run 1 should miss pyopencl's cache: {}",
        r1.result
    );
    let queries = events(&r1.traces, "binary_query");
    assert!(
        !queries.is_empty(),
        "run 1: no binary_query record:\n{}",
        brief(&r1.traces)
    );
    for q in &queries {
        assert_eq!(
            q["action"],
            "substitute",
            "run 1 query not substituted:\n{}",
            brief(&r1.traces)
        );
        assert_eq!(q["result"], 0);
    }
    assert!(
        queries.iter().any(|q| q["param"] == "CL_PROGRAM_BINARIES"),
        "run 1: no CL_PROGRAM_BINARIES query:\n{}",
        brief(&r1.traces)
    );
    // pyopencl stored the (non-empty) clshim binaries.
    let bins = r1.result["cache_binaries"].as_array().unwrap();
    assert_eq!(bins.len(), 2, "{}", r1.result);
    assert!(
        bins.iter().all(|s| s.as_u64().unwrap() > 0),
        "empty binary cached: {}",
        r1.result
    );

    let r2 = run_small_kernel("old", &caches, &trace2, Some("substitute"), "clshim_sub");
    let err2 = r2.stderr();
    assert_eq!(
        r2.result["cache_hits"], 2,
        "run 2 should hit pyopencl's cache: {}",
        r2.result
    );
    let loads = events(&r2.traces, "binary_load");
    assert!(
        !loads.is_empty(),
        "run 2: no binary_load record:\n{}",
        brief(&r2.traces)
    );
    for l in &loads {
        assert_eq!(
            l["action"],
            "substitute",
            "run 2 load not substituted:\n{}",
            brief(&r2.traces)
        );
        assert_eq!(l["result"], 0, "run 2 load failed:\n{}", brief(&r2.traces));
        assert!(l["program"].is_number(), "{l}");
    }
    assert!(
        !ok_builds(&r2.traces).is_empty(),
        "run 2: no successful build:\n{}",
        brief(&r2.traces)
    );
    assert!(
        events(&r2.traces, "binary_query").is_empty(),
        "run 2 built from pyopencl's cache and should not query binaries:\n{}",
        brief(&r2.traces)
    );

    for (run, err) in [(1, &err1), (2, &err2)] {
        for bad in ["caching failed", "Warning", "invalid info file"] {
            assert!(
                !err.contains(bad),
                "run {run}: pyopencl complained ({bad:?}):\n{err}"
            );
        }
    }
}

/// (iii) pyopencl 2023.1 with CLSHIM_BINARIES=suppress: the binary query answers "no
/// binary", so pyopencl caches an empty binary. Run 2 then fails to create a program
/// from it (CL_INVALID_VALUE), warns "PyOpenCL compiler caching failed with an
/// exception" and builds from source: correct, but noisy on every warm run. This is the
/// documented cost of `suppress` (README, "The binary policies"), and why `substitute` exists.
#[test]
fn old_pyopencl_suppress_warns_and_rebuilds_on_warm_run() {
    if !needs(&[PYOPENCL_OLD]) {
        return;
    }
    let (_root, caches, trace1, trace2) = dirs("py-suppress");

    let r1 = run_small_kernel("old", &caches, &trace1, Some("suppress"), "clshim_sup");
    let queries = events(&r1.traces, "binary_query");
    assert!(
        !queries.is_empty(),
        "run 1: no binary_query record:\n{}",
        brief(&r1.traces)
    );
    for q in &queries {
        assert_eq!(q["action"], "suppress", "{}", brief(&r1.traces));
        if q["param"] == "CL_PROGRAM_BINARY_SIZES" {
            assert!(
                q["sizes"].as_array().unwrap().iter().all(|s| s == 0),
                "suppressed sizes should be 0: {q}"
            );
        }
    }
    assert!(
        !r1.stderr().contains("caching failed"),
        "run 1:\n{}",
        r1.stderr()
    );
    let bins = r1.result["cache_binaries"].as_array().unwrap();
    assert!(
        !bins.is_empty() && bins.iter().all(|s| s == 0),
        "pyopencl should have cached empty binaries: {}",
        r1.result
    );

    let r2 = run_small_kernel("old", &caches, &trace2, Some("suppress"), "clshim_sup");
    let err2 = r2.stderr();
    assert!(
        err2.contains("PyOpenCL compiler caching failed with an exception"),
        "run 2 should warn that caching failed:\n{err2}"
    );
    assert_eq!(r2.result["cache_hits"], 2, "{}", r2.result);
    // The failed load, then the source build pyopencl falls back to.
    let loads = events(&r2.traces, "binary_load");
    assert!(
        !loads.is_empty(),
        "run 2: no binary_load record:\n{}",
        brief(&r2.traces)
    );
    assert!(
        loads.iter().all(|l| l["result"] != 0),
        "empty binaries should not load:\n{}",
        brief(&r2.traces)
    );
    assert!(
        ok_builds(&r2.traces).len() >= 2,
        "run 2: no rebuild from source:\n{}",
        brief(&r2.traces)
    );
}
