//! Integration tests of the preloaded shim against real OpenCL clients (tests/c/*.c) on
//! pocl's CPU driver through the system ocl-icd loader: the application sees the same
//! results with and without the shim, and the trace records say what happened
//! (docs/trace-schema.md).

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// One run of a C test program, with or without the shim (then with a trace dir).
struct Run {
    out: Output,
    /// The trace directory of a run with the shim (removed unless the test fails).
    traces: Option<Scratch>,
}

impl Run {
    fn stdout(&self) -> String {
        stdout(&self.out)
    }
    fn stderr(&self) -> String {
        stderr(&self.out)
    }
    fn records(&self) -> Vec<Value> {
        checked_traces(self.traces.as_ref().expect("a run with the shim"))
    }
    fn assert_ok(&self, what: &str) {
        assert!(
            self.out.status.success(),
            "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.out.status,
            self.stdout(),
            self.stderr()
        );
    }
}

fn command(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn plain(bin: &Path, args: &[&str]) -> Run {
    Run {
        out: run(command(bin, args, &[]), false),
        traces: None,
    }
}

/// With LD_PRELOAD=libclshim.so and CLSHIM_TRACE_DIR set to a fresh scratch dir.
fn shimmed(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = scratch("traces");
    let mut cmd = command(bin, args, env);
    cmd.env("CLSHIM_TRACE_DIR", &dir);
    Run {
        out: run(cmd, true),
        traces: Some(dir),
    }
}

/// Runs `name` without and with the shim; both must succeed with the same stdout.
fn same_results(bin: &Path, args: &[&str]) -> (Run, Run) {
    let a = plain(bin, args);
    a.assert_ok("plain run");
    let b = shimmed(bin, args, &[]);
    b.assert_ok("run with the shim");
    assert_eq!(
        a.stdout(),
        b.stdout(),
        "the shim changed the program's output"
    );
    (a, b)
}

fn process_record(recs: &[Value]) -> &Value {
    let p = events(recs, "process");
    assert_eq!(p.len(), 1, "one process record expected: {recs:#?}");
    p[0]
}

/// Checks what every program event of a successful pocl run must carry.
fn check_program_event(r: &Value, call: &str) {
    assert_eq!(r["call"], call, "{r}");
    let devs = r["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 1, "one pocl device: {r}");
    let d = &devs[0];
    for k in ["name", "platform", "vendor", "driver"] {
        assert!(
            d[k].as_str().map(|s| !s.is_empty()).unwrap_or(false),
            "device {k}: {r}"
        );
    }
    assert_eq!(d["type"], "CPU", "{r}");
    assert_eq!(
        d["matched"], true,
        "pocl's CPU device matches the default filter: {r}"
    );
}

fn check_source(r: &Value, origin: &str, bytes: &[u8]) {
    assert_eq!(r["source"]["origin"], origin, "{r}");
    assert_eq!(r["source"]["length"], bytes.len(), "{r}");
    assert_eq!(r["source"]["hash"], fnv1a64(bytes), "{r}");
}

#[test]
fn basic_results_and_records() {
    let bin = build_c("basic", &[]);
    let (_, s) = same_results(&bin, &[]);
    assert!(s.stdout().contains("square: 7 8 11 16 23 32 43 56 sum=196"));
    let recs = s.records();
    let p = process_record(&recs);
    assert_eq!(p["mode"], "preload");
    assert_eq!(p["policy"], "pass");
    assert_eq!(p["devices_filter"], "pocl-cpu");
    assert!(p["argv"].as_array().unwrap().len() == 1, "{p}");
    assert!(
        recs.iter().all(|r| r["pid"] == p["pid"]),
        "one pid in one file"
    );

    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 1, "{recs:#?}");
    let b = builds[0];
    check_program_event(b, "clBuildProgram");
    assert_eq!(b["result"], 0);
    assert_eq!(b["result_name"], "CL_SUCCESS");
    assert_eq!(b["options"], "-cl-std=CL1.2");
    assert_eq!(b["async"], false);
    check_source(b, "source", basic_source("7").as_bytes());
    assert_eq!(b["kernels"], serde_json::json!(["square"]));
    // The main thread built it.
    assert_eq!(b["tid"], p["pid"], "{b}");

    // The size-only query is not recorded; the SIZES and BINARIES value queries are.
    let q = events(&recs, "binary_query");
    assert_eq!(q.len(), 2, "{recs:#?}");
    assert_eq!(q[0]["param"], "CL_PROGRAM_BINARY_SIZES");
    assert_eq!(q[1]["param"], "CL_PROGRAM_BINARIES");
    for r in &q {
        check_program_event(r, "clGetProgramInfo");
        assert_eq!(
            r["program"], b["program"],
            "the query names the built program"
        );
        assert_eq!(r["result"], 0);
        assert_eq!(r["action"], "forward");
        assert_eq!(r["actions"], serde_json::json!(["forward"]));
    }
    let sizes = q[0]["sizes"].as_array().expect("SIZES query sizes");
    assert_eq!(sizes.len(), 1);
    assert!(sizes[0].as_u64().unwrap() > 0, "{}", q[0]);
    assert_query_sizes(q[1], &q[0]["sizes"]);
    assert!(events(&recs, "compile").is_empty() && events(&recs, "link").is_empty());
}

#[test]
fn size_only_query_is_not_recorded() {
    let bin = build_c("basic", &[]);
    let s = shimmed(&bin, &["--sizes-only", "--no-run"], &[]);
    s.assert_ok("basic --sizes-only");
    let recs = s.records();
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
    assert!(events(&recs, "binary_query").is_empty(), "{recs:#?}");

    // SIZES with a value buffer alone: one record, naming the parameter.
    let s = shimmed(&bin, &["--no-binaries", "--no-run"], &[]);
    s.assert_ok("basic --no-binaries");
    let recs = s.records();
    let q = events(&recs, "binary_query");
    assert_eq!(q.len(), 1, "{recs:#?}");
    assert_eq!(q[0]["param"], "CL_PROGRAM_BINARY_SIZES");
}

#[test]
fn async_build_recorded_as_async() {
    let bin = build_c("async_build", &[]);
    let (_, s) = same_results(&bin, &[]);
    assert!(s.stdout().contains("callback calls: 1\n"), "{}", s.stdout());
    assert!(s.stdout().contains("callback user_data ok: yes"));
    let recs = s.records();
    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 1, "{recs:#?}");
    let b = builds[0];
    check_program_event(b, "clBuildProgram");
    assert_eq!(b["async"], true);
    assert_eq!(b["result"], 0);
    assert!(b["options"].is_null(), "no options were given: {b}");
    assert_eq!(b["kernels"], serde_json::json!(["triple"]));
}

#[test]
fn eight_threads_eight_builds() {
    let bin = build_c("threads", &["-lpthread"]);
    let a = plain(&bin, &[]);
    a.assert_ok("plain threads");
    let s = shimmed(&bin, &["--print-tids"], &[]);
    s.assert_ok("threads with the shim");
    let out = s.stdout();
    let (tid_lines, rest): (Vec<&str>, Vec<&str>) =
        out.lines().partition(|l| l.starts_with("tid "));
    assert_eq!(
        rest.join("\n") + "\n",
        a.stdout(),
        "results differ with the shim"
    );
    let mut tids: Vec<u64> = tid_lines
        .iter()
        .map(|l| l.split(' ').nth(2).unwrap().parse().unwrap())
        .collect();
    tids.sort();
    assert_eq!(tids.len(), 8);

    let recs = s.records();
    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 8, "{recs:#?}");
    let mut rec_tids: Vec<u64> = builds.iter().map(|b| b["tid"].as_u64().unwrap()).collect();
    rec_tids.sort();
    assert_eq!(
        rec_tids, tids,
        "each build is recorded on the thread that made it"
    );
    let mut ids: Vec<String> = builds.iter().map(|b| b["program"].to_string()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 8, "distinct program ids: {ids:?}");
    let mut hashes: Vec<String> = builds
        .iter()
        .map(|b| b["source"]["hash"].to_string())
        .collect();
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), 8, "eight different sources");
    for b in builds {
        check_program_event(b, "clBuildProgram");
        assert_eq!(b["result"], 0);
        assert_eq!(b["kernels"], serde_json::json!(["add_const"]));
    }
}

#[test]
fn compile_and_link_recorded() {
    let bin = build_c("compile_link", &[]);
    let (_, s) = same_results(&bin, &[]);
    assert!(s
        .stdout()
        .contains("linked: 5 15 25 35 45 55 65 75 sum=320"));
    let recs = s.records();
    let compiles = events(&recs, "compile");
    assert_eq!(compiles.len(), 2, "{recs:#?}");
    for c in &compiles {
        check_program_event(c, "clCompileProgram");
        assert_eq!(c["result"], 0);
        assert_eq!(c["options"], "-cl-std=CL1.2");
        assert_eq!(c["async"], false);
        assert_eq!(c["source"]["origin"], "source");
    }
    assert_eq!(compiles[0]["headers"], 1);
    assert_eq!(compiles[1]["headers"], 0);
    let links = events(&recs, "link");
    assert_eq!(links.len(), 1, "{recs:#?}");
    let l = links[0];
    check_program_event(l, "clLinkProgram");
    assert_eq!(l["result"], 0);
    assert_eq!(l["async"], false);
    assert_eq!(
        l["inputs"],
        serde_json::json!([compiles[0]["program"], compiles[1]["program"]])
    );
    assert!(!l["program"].is_null());
    assert_ne!(l["program"], compiles[0]["program"]);
    assert_ne!(l["program"], compiles[1]["program"]);
    assert_eq!(l["kernels"], serde_json::json!(["linked"]));
    assert!(events(&recs, "build").is_empty(), "{recs:#?}");
}

/// pocl writes the source to a temporary file whose name appears in the build log.
fn normalise_log(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("tempfile_") {
        out.push_str(&rest[..i + "tempfile_".len()]);
        rest = &rest[i + "tempfile_".len()..];
        let n = rest
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len());
        out.push_str("XXXXXX");
        rest = &rest[n..];
    }
    out.push_str(rest);
    out
}

#[test]
fn failing_build_passes_code_and_log_through() {
    let bin = build_c("build_fail", &[]);
    let a = plain(&bin, &[]);
    a.assert_ok("plain build_fail");
    let s = shimmed(&bin, &[], &[]);
    s.assert_ok("build_fail with the shim");
    assert!(a
        .stdout()
        .contains("clBuildProgram: CL_BUILD_PROGRAM_FAILURE (-11)"));
    assert!(a.stdout().contains("expected expression"), "{}", a.stdout());
    assert_eq!(normalise_log(&a.stdout()), normalise_log(&s.stdout()));
    let recs = s.records();
    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 1, "{recs:#?}");
    let b = builds[0];
    check_program_event(b, "clBuildProgram");
    assert_eq!(b["result"], -11);
    assert_eq!(b["result_name"], "CL_BUILD_PROGRAM_FAILURE");
    assert_eq!(b["kernels"], serde_json::json!([]));
}

/// A failed build is named by the kernels its source declares and its first error: in
/// its record, in the exit summary (`1 build ... (1 failed: broken: ...)`, not a third
/// unnamed build) and in the report (`broken (failed build)` with the error line, not
/// `(unknown program)`).
#[test]
fn a_failed_build_is_named_with_its_error() {
    let bin = build_c("build_fail", &[]);
    let s = shimmed(&bin, &[], &[("CLSHIM_SUMMARY", "1")]);
    s.assert_ok("build_fail with the shim");
    let recs = s.records();
    let b = one_event(&recs, "build");
    assert_eq!(b["source_kernels"], serde_json::json!(["broken"]), "{b}");
    let error = b["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("error") && error.contains("expected expression"),
        "{b}"
    );
    assert!(
        s.stderr().contains(" 1 build 0.")
            && s.stderr()
                .contains(" (1 failed: broken: CL_BUILD_PROGRAM_FAILURE), "),
        "{}",
        s.stderr()
    );
    let dir = s.traces.as_ref().unwrap();
    let out = stdout(&report(&[dir.to_str().unwrap()]));
    assert!(out.contains(" broken (failed build) "), "{out}");
    let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(" broken (failed build): CL_BUILD_PROGRAM_FAILURE: error")
            && words.contains("expected expression"),
        "{out}"
    );
    assert!(!out.contains("(unknown program)"), "{out}");
}

/// Where no binary query came (as with pyopencl 2024.2.3 and newer on pocl), the exit
/// summary says that no policy had anything to act on and what clshim still measured,
/// whatever the policy; and the trace file of a process with no MPI rank is named
/// `clshim-<host>-p<pid>.jsonl`, without an empty rank part.
#[test]
fn no_binary_query_is_said_and_files_without_rank_have_none() {
    let bin = build_c("build_fail", &[]);
    for policy in ["pass", "substitute"] {
        let s = shimmed(
            &bin,
            &[],
            &[("CLSHIM_SUMMARY", "1"), ("CLSHIM_BINARIES", policy)],
        );
        s.assert_ok("build_fail with the shim");
        assert!(
            s.stderr().contains(&format!(
                "; policy {policy}: no binary query, so no binary policy had anything to act on"
            )) && s
                .stderr()
                .contains("clshim measured builds and first launches only"),
            "{}",
            s.stderr()
        );
        let dir = s.traces.as_ref().unwrap();
        let names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let pid = s.records()[0]["pid"].as_u64().unwrap();
        assert_eq!(names.len(), 1);
        assert!(
            names[0].starts_with("clshim-") && names[0].ends_with(&format!("-p{pid}.jsonl")),
            "{names:?}"
        );
        assert!(!names[0].contains("-r-"), "no empty rank part: {names:?}");
    }
}

#[test]
fn binary_roundtrip_recorded() {
    let bin = build_c("binary_roundtrip", &[]);
    let (_, s) = same_results(&bin, &[]);
    assert!(s.stdout().contains("source: 2 3 10 29 66 127 sum=237"));
    assert!(s.stdout().contains("binary: 2 3 10 29 66 127 sum=237"));
    let recs = s.records();
    let loads = events(&recs, "binary_load");
    assert_eq!(loads.len(), 1, "{recs:#?}");
    let l = loads[0];
    check_program_event(l, "clCreateProgramWithBinary");
    assert_eq!(l["result"], 0);
    assert_eq!(l["action"], "forward");
    assert!(l["reason"].is_null());
    assert!(!l["program"].is_null());
    let q = events(&recs, "binary_query");
    assert_eq!(q.len(), 2, "{recs:#?}");
    assert_eq!(
        l["lengths"], q[0]["sizes"],
        "the binary read back is the one loaded"
    );
    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 2, "{recs:#?}");
    assert_eq!(builds[0]["source"]["origin"], "source");
    assert_eq!(builds[1]["source"]["origin"], "binary");
    assert_eq!(builds[1]["program"], l["program"]);
    assert_eq!(builds[1]["source"]["length"], l["lengths"][0]);
    assert_ne!(builds[0]["program"], builds[1]["program"]);
}

#[test]
fn corrupted_binary_rejected_the_same_way() {
    let bin = build_c("binary_roundtrip", &[]);
    for corrupt in ["--corrupt=flip", "--corrupt=empty"] {
        let (_, s) = same_results(&bin, &[corrupt, "--no-run"]);
        let expect = if corrupt.ends_with("flip") { -42 } else { -30 };
        let recs = s.records();
        let loads = events(&recs, "binary_load");
        assert_eq!(loads.len(), 1, "{corrupt}: {recs:#?}");
        assert_eq!(loads[0]["result"], expect, "{corrupt}");
        assert!(loads[0]["program"].is_null(), "{corrupt}");
        assert_eq!(loads[0]["action"], "forward", "{corrupt}");
    }
}

#[test]
fn binary_saved_by_one_process_loads_in_another() {
    let bin = build_c("binary_roundtrip", &[]);
    let dir = scratch("bincache");
    let file = dir.join("cube.bin");
    let save = format!("--save={}", file.display());
    let load = format!("--load={}", file.display());
    let s = shimmed(&bin, &[&save, "--no-run"], &[]);
    s.assert_ok("save");
    let a = plain(&bin, &[&load]);
    a.assert_ok("plain load");
    let b = shimmed(&bin, &[&load], &[]);
    b.assert_ok("load with the shim");
    assert_eq!(a.stdout(), b.stdout());
    assert!(b.stdout().contains("binary: 2 3 10 29 66 127 sum=237"));
}

#[test]
fn dlopen_client_same_results_under_preload() {
    let bin = build_c("dlopen_loader", &["-Wl,--as-needed"]);
    let (a, _) = same_results(&bin, &[]);
    assert!(a.stdout().contains("twice: 9 11 13 15 17 19 21 23"));
}

#[test]
fn layer_mode_sees_dlopen_client() {
    let bin = build_c("dlopen_loader", &["-Wl,--as-needed"]);
    let a = plain(&bin, &[]);
    a.assert_ok("plain dlopen_loader");
    let dir = scratch("layer");
    // `run` strips OPENCL_LAYERS and CLSHIM_* inherited from the test's own environment;
    // `env` sets them for the child only.
    let mut cmd = Command::new("env");
    cmd.arg(format!("OPENCL_LAYERS={}", shim_path().display()))
        .arg(format!("CLSHIM_TRACE_DIR={}", dir.display()))
        .arg(&bin);
    let out = run(cmd, false);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), a.stdout());
    let recs = checked_traces(&dir);
    assert_eq!(process_record(&recs)["mode"], "layer");
    let builds = events(&recs, "build");
    assert_eq!(builds.len(), 1, "{recs:#?}");
    check_program_event(builds[0], "clBuildProgram");
    assert_eq!(events(&recs, "binary_query").len(), 2, "{recs:#?}");
}

#[test]
fn non_opencl_process_untouched() {
    let dir = scratch("quiet");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo hi"]).env("CLSHIM_TRACE_DIR", &dir);
    let out = run(cmd, true);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "hi\n");
    assert_eq!(stderr(&out), "", "nothing on stderr");
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "no file written: {left:?}");
}

#[test]
fn bad_policy_value_warns_once() {
    let bin = build_c("basic", &[]);
    let a = plain(&bin, &[]);
    a.assert_ok("plain basic");
    let s = shimmed(&bin, &[], &[("CLSHIM_BINARIES", "bogus")]);
    s.assert_ok("basic with CLSHIM_BINARIES=bogus");
    assert_eq!(a.stdout(), s.stdout());
    let err = s.stderr();
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("bogus")).collect();
    assert_eq!(warnings.len(), 1, "exactly one warning expected:\n{err}");
    let w = warnings[0];
    for word in ["CLSHIM_BINARIES", "pass", "suppress", "substitute"] {
        assert!(w.contains(word), "the warning should name {word}: {w}");
    }
    assert_eq!(
        err.matches("CLSHIM_BINARIES").count(),
        1,
        "one mention of the variable:\n{err}"
    );
    // The default applies.
    assert_eq!(process_record(&s.records())["policy"], "pass");
}
