//! pyopencl's own test files (test_wrapper.py, test_enqueue_copy.py and
//! test_arrays_in_structs.py, of the pyopencl release in .venv/current, from its source
//! distribution) give the same outcome, test by test, without clshim and under the
//! program cache: on a cold store (nothing served; the run keeps its compiles), and, once
//! `clshim warm` made the driver's binaries of the compiles kept, served from the store
//! through the preload door, the loader layer, and both.

use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;

const FILES: [&str; 3] = [
    "test_wrapper.py",
    "test_enqueue_copy.py",
    "test_arrays_in_structs.py",
];

/// Each test's outcome (`PASSED`, `FAILED`, `SKIPPED`, `XFAIL`, ...) by its id.
fn outcomes(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| {
            let (what, rest) = l.split_once(' ')?;
            let id = rest.split(" - ").next()?.trim();
            matches!(
                what,
                "PASSED" | "FAILED" | "SKIPPED" | "XFAIL" | "XPASS" | "ERROR"
            )
            .then(|| (id.to_string(), what.to_string()))
        })
        .collect()
}

/// Runs the files with pytest in the test files' folder, without clshim (`mode` None) or
/// under `clshim run --program-cache --mode MODE`; returns the outcomes and the number of
/// builds served from the store.
fn pytest(
    tests: &Path,
    home: &Path,
    kc: &Path,
    mode: Option<&str>,
    extra: &[(&str, &str)],
    traces: &Path,
) -> (BTreeMap<String, String>, usize) {
    let python = venv_python("current");
    let mut cmd = program_cache_command(&python, mode, traces);
    cmd.args(["-m", "pytest", "-rA", "-p", "no:cacheprovider", "-q"])
        .args(FILES)
        .current_dir(tests);
    clear_shim_env(&mut cmd, &[]);
    cmd.env("HOME", home)
        .env("POCL_CACHE_DIR", kc)
        .env("PYOPENCL_TEST", "portable")
        .env("PYOPENCL_NO_CACHE", "0");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = stdout(&out);
    let found = outcomes(&text);
    assert!(
        !found.is_empty(),
        "{mode:?}: no outcomes:\n{text}\n{}",
        stderr(&out)
    );
    let served = if traces.exists() {
        checked_traces(traces)
            .iter()
            .filter(|r| r["event"] == "build" && r["served"] == "store")
            .count()
    } else {
        0
    };
    (found, served)
}

#[test]
fn pyopencls_own_tests_pass_alike_under_the_program_cache() {
    if !needs(&[PYOPENCL_CURRENT, PYOPENCL_TEST_FILES]) {
        return;
    }
    let d = scratch("pyopencl-suite");
    let tests = repo_root().join(".venv/pyopencl-tests");
    let home = d.path("home");
    std::fs::create_dir_all(&home).unwrap();
    // A run keeps only what pocl compiles: the run without clshim gets a kernel cache of its
    // own, or the cold run would find every program there and keep nothing for the warm
    // step to make.
    let (plain, _) = pytest(
        &tests,
        &home,
        &d.path("kc-plain"),
        None,
        &[],
        &d.path("t-plain"),
    );
    assert!(plain.values().any(|o| o == "PASSED"), "{plain:?}");
    let kc = d.path("kc");
    // No service makes entries while the cold run runs: `clshim warm` makes them all.
    let (cold, served) = pytest(
        &tests,
        &home,
        &kc,
        Some("both"),
        &[("CLSHIM_WARM_SERVICE", "0")],
        &d.path("t-cold"),
    );
    assert_eq!(cold, plain, "cold");
    assert_eq!(served, 0);
    let out = clshim_out(&["warm", "--lib", s(&shim_path())], &[("HOME", s(&home))]);
    assert!(
        out.status.success() && stderr(&out).contains("kept compiles without the driver's binary"),
        "{}",
        stderr(&out)
    );
    for mode in ["preload", "layer", "both"] {
        let (warm, served) = pytest(
            &tests,
            &home,
            &kc,
            Some(mode),
            &[],
            &d.path(&format!("t-{mode}")),
        );
        assert_eq!(warm, plain, "{mode}");
        assert!(served >= 10, "{mode}: {served} builds served");
    }
}
