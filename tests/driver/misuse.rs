//! API misuse and awkward callbacks, compared with and without clshim. The probe is
//! tests/c/misuse.c: one line per case with what the application received (return value,
//! errcode, binary_status, program made or not). Under every policy and in both modes the
//! lines must be those of a run without clshim: clshim may only answer differently where
//! the implementation would have accepted the arguments. Build callbacks that release the
//! program, rebuild it or leave the process with exit() must neither crash clshim nor
//! lose the record, on real pocl (which calls back before clBuildProgram returns) and on
//! the fake ICD's callback threads.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// pocl with two CPU devices: what the misuse cases around several devices need.
const TWO_POCL: (&str, &str) = ("POCL_DEVICES", "pthread pthread");

fn probe() -> PathBuf {
    // Named in the arguments so that a change to the helper header rebuilds the probe.
    let fp = repo_root().join("tests/c/clshim_fingerprint.h");
    build_c_custom(
        "misuse",
        "misuse",
        &["-include", fp.to_str().unwrap(), "-lOpenCL"],
    )
}

/// Runs the probe with `args` and `env`: without clshim (`shim` None), or with it in
/// "preload" or "layer" mode, tracing into `trace`.
fn go(args: &[&str], env: &[(&str, &str)], shim: Option<&str>, trace: &Path) -> Output {
    let mut cmd = Command::new("timeout");
    cmd.arg("120").arg(probe()).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    match shim {
        None => run(cmd, false),
        Some(mode) => {
            cmd.env("CLSHIM_TRACE_DIR", trace)
                .env("CLSHIM_SUMMARY", "0");
            if mode == "layer" {
                cmd.env("OPENCL_LAYERS", shim_path());
                run(cmd, false)
            } else {
                run(cmd, true)
            }
        }
    }
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
    assert!(
        !stderr(out).contains("internal error"),
        "{what}: clshim failed inside:\n{}",
        stderr(out)
    );
}

#[test]
fn misuse_matrix_answers_as_without_clshim() {
    let dir = scratch("misuse-matrix");
    let plain = go(&["matrix"], &[TWO_POCL], None, &dir);
    ok(&plain, "without clshim");
    let want = stdout(&plain);
    assert!(want.contains("matrix done"), "{want}");
    // The cases the review found, pinned to pocl's own answers.
    for line in [
        "load null-entry: err=CL_INVALID_VALUE program=null status=[untouched,untouched]",
        "load duplicate-device: err=CL_INVALID_DEVICE program=null status=[untouched,untouched]",
        "load null-device: err=CL_INVALID_DEVICE program=null status=[untouched,untouched]",
        "load more-devices-than-context: err=CL_INVALID_DEVICE",
        "load empty-source: err=CL_INVALID_BINARY",
        "load length-size-max: err=CL_INVALID_BINARY",
        "link huge-input-count: err=CL_INVALID_OPERATION program=null",
    ] {
        assert!(
            want.contains(line),
            "pocl answers differently now: {line}\n{want}"
        );
    }
    for (mode, policy) in [
        ("preload", "pass"),
        ("preload", "suppress"),
        ("preload", "substitute"),
        ("layer", "pass"),
        ("layer", "suppress"),
        ("layer", "substitute"),
    ] {
        let trace = dir.join(format!("{mode}-{policy}"));
        let out = go(
            &["matrix"],
            &[
                TWO_POCL,
                ("CLSHIM_BINARIES", policy),
                ("CLSHIM_DEVICES", "all"),
            ],
            Some(mode),
            &trace,
        );
        let what = format!("{mode} {policy}");
        ok(&out, &what);
        let got = stdout(&out);
        for (w, g) in want.lines().zip(got.lines()) {
            assert_eq!(g, w, "{what}: the application's answer changed");
        }
        assert_eq!(got.lines().count(), want.lines().count(), "{what}:\n{got}");
        // Every load was recorded; those refused for their arguments as forwarded, with the
        // implementation's status.
        let recs = checked_traces(&trace);
        let loads = events(&recs, "binary_load");
        assert_eq!(loads.len(), 14, "{what}: {loads:#?}");
        let forwarded: Vec<_> = loads.iter().filter(|r| r["action"] == "forward").collect();
        assert_eq!(forwarded.len(), 10, "{what}: {loads:#?}");
        for r in &forwarded {
            assert_ne!(r["result"], 0, "{what}: {r}");
        }
        let rejected: Vec<_> = loads.iter().filter(|r| r["action"] == "reject").collect();
        let reasons: Vec<&str> = rejected
            .iter()
            .map(|r| r["reason"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(rejected.len(), 4, "{what}: {loads:#?}");
        assert!(
            reasons
                .iter()
                .filter(|r| r.contains("empty source"))
                .count()
                == 2,
            "{what}: {reasons:?}"
        );
        let links = events(&recs, "link");
        assert!(
            links
                .iter()
                .any(|r| r["result_name"] == "CL_INVALID_OPERATION"
                    && r["inputs"] == Value::Array(vec![])),
            "{what}: the refused link is recorded without reading its inputs: {links:#?}"
        );
    }
}

/// The record of the one build-like call of `kind` in `trace`.
fn one_record(trace: &Path, kind: &str) -> Value {
    let recs = checked_traces(trace);
    let e = events(&recs, kind);
    assert_eq!(e.len(), 1, "{kind}: {recs:#?}");
    e[0].clone()
}

#[test]
fn callbacks_that_release_rebuild_or_exit_on_pocl() {
    let dir = scratch("misuse-callbacks");
    for mode in [
        "release",
        "compile-release",
        "link-release",
        "rebuild",
        "exit",
    ] {
        let plain = go(&["callback", mode], &[TWO_POCL], None, &dir);
        ok(&plain, mode);
        let trace = dir.join(mode);
        let out = go(&["callback", mode], &[TWO_POCL], Some("preload"), &trace);
        ok(&out, mode);
        assert_eq!(stdout(&out), stdout(&plain), "{mode}");
        let (kind, kernels) = match mode {
            "compile-release" => ("compile", vec![]),
            "link-release" => ("link", vec!["k"]),
            _ => ("build", vec!["k"]),
        };
        let recs = checked_traces(&trace);
        // (The rebuild inside the callback is a synchronous build of its own.)
        let r = *events(&recs, kind)
            .iter()
            .find(|r| r["async"] == true)
            .unwrap_or_else(|| panic!("{mode}: no asynchronous {kind}: {recs:#?}"));
        assert_eq!(r["result_name"], "CL_SUCCESS", "{mode}: {r}");
        assert_eq!(r["kernels"], serde_json::json!(kernels), "{mode}: {r}");
        assert_eq!(
            r["devices"].as_array().map(Vec::len),
            Some(2),
            "{mode}: {r}"
        );
        assert!(r["program"].is_u64(), "{mode}: {r}");
        let expected = if mode == "rebuild" { 2 } else { 1 };
        assert_eq!(events(&recs, kind).len(), expected, "{mode}: {recs:#?}");
    }
    // The build whose callback calls exit() is recorded once, with the callback's status.
    let r = one_record(&dir.join("exit"), "build");
    assert_eq!(r["result"], 0, "{r}");
}

/// The fake ICD calls back on another thread: before the call returns ("thread-before",
/// the program freed by the callback's release while clshim still waits for the return)
/// and after it ("thread", no delay: the callback races clshim's own bookkeeping).
#[test]
fn callbacks_releasing_on_driver_threads_fake_icd() {
    let fake = fake_icd();
    let vendors = fake.vendors.to_str().unwrap().to_string();
    let dir = scratch("misuse-threads");
    for async_mode in ["thread-before", "thread"] {
        let env = [
            ("OCL_ICD_VENDORS", vendors.as_str()),
            ("FAKE_ICD_DEVICES", "2"),
            ("FAKE_ICD_ASYNC", async_mode),
            ("FAKE_ICD_ASYNC_MS", "0"),
        ];
        let trace = dir.join(async_mode);
        let out = go(&["release-loop", "200"], &env, Some("preload"), &trace);
        ok(&out, async_mode);
        let recs = checked_traces(&trace);
        let builds = events(&recs, "build");
        assert_eq!(builds.len(), 200, "{async_mode}: every build recorded once");
        assert!(
            builds
                .iter()
                .all(|r| r["result"] == 0 && r["kernels"][0] == "k"),
            "{async_mode}: {builds:#?}"
        );
    }
}

/// The same callbacks under memcheck: a use of the released program would show as an
/// invalid read even where it does not crash. The fake ICD frees a program at its last
/// release, and "thread-before" runs the callback on its own thread while the call waits.
#[test]
fn memcheck_callbacks_releasing_the_program() {
    if !needs(&[VALGRIND]) {
        return;
    }
    let fake = fake_icd();
    let dir = scratch("misuse-memcheck");
    for mode in ["release", "compile-release", "link-release"] {
        let mut cmd = Command::new("valgrind");
        cmd.args(["--tool=memcheck", "--error-exitcode=99", "--leak-check=no"])
            .arg(probe())
            .args(["callback", mode])
            .env("OCL_ICD_VENDORS", &fake.vendors)
            .env("FAKE_ICD_DEVICES", "2")
            .env("FAKE_ICD_ASYNC", "thread-before")
            .env("CLSHIM_TRACE_DIR", dir.join(mode))
            .env("CLSHIM_SUMMARY", "0");
        let out = run(cmd, true);
        let err = stderr(&out);
        assert!(
            !err.contains("Invalid read") && !err.contains("Invalid write"),
            "{mode}: memcheck:\n{err}"
        );
        ok(&out, mode);
        assert_eq!(
            checked_traces(&dir.join(mode))
                .iter()
                .filter(|r| !is_process_record(r))
                .count(),
            if mode == "link-release" { 2 } else { 1 }
        );
    }
}
