//! Hardening of the processes clshim lives in: concurrency (32 threads, real pocl and the
//! fake driver, every record written once, memory flat), fork without exec, every way
//! out of a process, and a memcheck run. The C side is tests/c/hardening.c; the fake
//! driver is tests/fake_icd/fake_icd.c.

use crate::common;

use common::hardening::*;
use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::os::unix::process::ExitStatusExt;

/// Every build and query issued is recorded exactly once: one `build` per program id,
/// two `binary_query` records (sizes, binaries) per program.
fn assert_complete(recs: &[Value], builds: usize) {
    let b = events(recs, "build");
    let q = events(recs, "binary_query");
    assert_eq!(b.len(), builds, "build records");
    assert_eq!(q.len(), 2 * builds, "binary_query records");
    let ids: HashSet<u64> = b.iter().map(|r| r["program"].as_u64().unwrap()).collect();
    assert_eq!(
        ids.len(),
        builds,
        "one build record per program, none duplicated"
    );
    let tids: HashSet<u64> = b.iter().map(|r| r["tid"].as_u64().unwrap()).collect();
    assert!(tids.len() > 1, "builds came from several threads");
}

#[test]
fn thirty_two_threads_on_the_fake_icd_thousands_of_builds() {
    let fake = fake_icd();
    let dir = scratch("stress-fake");
    let vendors = fake_env(fake);
    let out = run_probe(
        &["stress", "32", "100"],
        &dir,
        &[("OCL_ICD_VENDORS", &vendors), ("CLSHIM_SUMMARY", "0")],
        120,
    );
    ok(&out, "stress on the fake ICD");
    let f = files(&dir);
    assert_eq!(f.len(), 1);
    assert_complete(&f[0].1, 32 * 100 * 2);
    let (first, last) = rss(&out);
    // 3,200 more builds and 6,400 more records between the two samples.
    assert!(
        last - first < 1024,
        "resident memory grew by {} KiB over 3,200 builds",
        last - first
    );
}

#[test]
fn thirty_two_threads_on_pocl() {
    let dir = scratch("stress-pocl");
    let out = run_probe(
        &["stress", "32", "2"],
        &dir,
        &[("CLSHIM_SUMMARY", "0")],
        300,
    );
    ok(&out, "stress on pocl");
    let f = files(&dir);
    assert_eq!(f.len(), 1);
    assert_complete(&f[0].1, 32 * 2 * 2);
    let (first, last) = rss(&out);
    // pocl's own resident memory moves by about 10 MiB between identical phases, with or
    // without clshim; the fake-ICD test holds the precise bound.
    assert!(
        last - first < 32 * 1024,
        "resident memory grew by {} KiB",
        last - first
    );
}

#[test]
fn fork_while_another_thread_builds() {
    let fake = fake_icd();
    let dir = scratch("fork-busy");
    let vendors = fake_env(fake);
    let out = run_probe(
        &["fork", "20"],
        &dir,
        &[("OCL_ICD_VENDORS", &vendors), ("FAKE_ICD_BUILD_MS", "2")],
        120,
    );
    ok(&out, "fork while building");
    assert!(stdout(&out).contains("parent done, 0 children failed"));
    let f = files(&dir);
    assert_eq!(f.len(), 21, "the parent's file and one per child");
    let parent = f
        .iter()
        .find(|(_, r)| r[0]["ppid"] != Value::Null && r.len() > 5)
        .map(|(_, r)| r[0]["pid"].clone());
    let parent = parent.expect("parent file");
    let children: Vec<_> = f.iter().filter(|(_, r)| r[0]["ppid"] == parent).collect();
    assert_eq!(children.len(), 20, "each child wrote its own file");
    let instances: HashSet<&Value> = f.iter().map(|(_, r)| &r[0]["instance"]).collect();
    assert_eq!(
        instances.len(),
        21,
        "a forked child is an instance of its own"
    );
    for (p, recs) in children {
        assert_eq!(recs[0]["event"], "process", "{}", p.display());
        assert_eq!(events(recs, "build").len(), 1, "{}", p.display());
        assert!(
            recs.iter().all(|r| r["pid"] == recs[0]["pid"]),
            "only the child's own records"
        );
    }
}

#[test]
fn fork_on_pocl_child_builds_and_traces() {
    let dir = scratch("fork-pocl");
    let out = run_probe(&["fork-idle"], &dir, &[], 120);
    ok(&out, "fork-idle on pocl");
    assert!(stdout(&out).contains("child 0 built, binary non-empty"));
    let f = files(&dir);
    assert_eq!(f.len(), 2);
    for (_, recs) in &f {
        assert_eq!(events(recs, "build").len(), 1);
        assert_eq!(events(recs, "binary_query").len(), 2);
    }
}

#[test]
fn every_exit_path_keeps_every_completed_record() {
    for (mode, ended) in [
        ("normal", true),
        ("thread", true),
        ("_exit", false),
        ("signal", false),
    ] {
        let dir = scratch("exit");
        let out = run_probe(&["exit", mode, "2"], &dir, &[], 120);
        if mode == "signal" {
            assert_eq!(
                out.status.signal(),
                Some(libc_sigterm()),
                "{mode}: dies of the signal"
            );
        } else {
            ok(&out, mode);
        }
        let f = files(&dir);
        assert_eq!(f.len(), 1, "{mode}");
        let recs = &f[0].1;
        // The end of the process is recorded where exit handlers run, and only there.
        assert_eq!(
            recs.len(),
            1 + 2 + 4 + usize::from(ended),
            "{mode}: header, 2 builds, 4 queries (and the exit)"
        );
        assert_eq!(recs[0]["exit_recorded"], true);
        assert_eq!(recs.last().unwrap()["event"] == "exit", ended, "{mode}");
        assert_eq!(
            stderr(&out).contains("clshim: pid"),
            ended,
            "{mode}: summary only on exit paths that run exit handlers:\n{}",
            stderr(&out)
        );
        // The report names a process that did not reach its end.
        let o = report(&["--json", dir.to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let unended = v["processes_without_end"].as_array().unwrap();
        assert_eq!(unended.is_empty(), ended, "{mode}: {unended:?}");
        let text = stdout(&report(&[dir.to_str().unwrap()]));
        assert_eq!(
            text.contains("note: 1 process has no end (killed, crashed, or gone through _exit"),
            !ended,
            "{mode}:\n{text}"
        );
        // The end is no slice of the timeline.
        let timeline = dir.join("timeline.json.out");
        let o = report(&[
            "--chrome",
            timeline.to_str().unwrap(),
            dir.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let t: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&timeline).unwrap()).unwrap();
        let slices = t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X");
        assert_eq!(slices.filter(|e| e["cat"] == "exit").count(), 0, "{mode}");
    }
}

fn libc_sigterm() -> i32 {
    15
}

#[test]
fn memcheck_finds_no_invalid_access_in_clshim() {
    if !needs(&[VALGRIND]) {
        return;
    }
    let fake = fake_icd();
    let client = build_c("fake_client", &["-lpthread"]);
    let dir = scratch("memcheck");
    let mut cmd = shim_command("valgrind", &dir);
    cmd.args([
        "--tool=memcheck",
        "--error-exitcode=99",
        "--leak-check=no",
        "--track-origins=no",
    ])
    .arg(&client)
    .args([
        "build",
        "build-async",
        "compile",
        "link",
        "sizes-only",
        "sizes",
        "binaries",
        "load",
        "kernels",
    ]);
    cmd.env("OCL_ICD_VENDORS", &fake.vendors)
        .env("FAKE_ICD_DEVICES", "2")
        .env("FAKE_ICD_ASYNC", "thread")
        .env("CLSHIM_DEVICES", "all")
        .env("CLSHIM_BINARIES", "substitute");
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert!(
        !err.contains("Invalid read") && !err.contains("Invalid write"),
        "memcheck:\n{err}"
    );
    assert_ne!(
        out.status.code(),
        Some(99),
        "memcheck reported errors:\n{err}"
    );
    assert!(out.status.success(), "{:?}\n{err}", out.status);
    assert!(
        stdout(&out).contains("build: CL_SUCCESS"),
        "{}",
        stdout(&out)
    );
}

/// An application whose standard error is a pipe whose reader has gone (`app 2>&1 >out |
/// head -1`), which writes nothing there itself: clshim's exit line (written from an
/// `atexit` handler, before stdio flushes the application's buffers) raises no SIGPIPE,
/// so the application exits 0 with all its output, as without clshim. It was killed
/// (status 141) and `out` left empty.
#[test]
fn a_reader_gone_from_stderr_costs_the_application_nothing() {
    let d = scratch("stderr-gone");
    let src = d.path("k.cl");
    std::fs::write(
        &src,
        "__kernel void val(__global int *out) { out[0] = VAL; }\n",
    )
    .unwrap();
    let out_file = d.path("out.txt");
    let script = format!(
        "\"$0\" --source={} --options=-DVAL=3 2>&1 >{} | true; echo status=${{PIPESTATUS[0]}}",
        s(&src),
        s(&out_file)
    );
    for (name, shim) in [("plain", false), ("shim", true)] {
        let mut cmd = if shim {
            shim_command("bash", &d.path("traces"))
        } else {
            let mut c = std::process::Command::new("bash");
            clear_shim_env(&mut c, &[]);
            c
        };
        cmd.args(["-c", &script])
            .arg(build_c("key_client", &[]))
            .env("POCL_CACHE_DIR", d.path(&format!("kc-{name}")));
        let out = cmd.output().unwrap();
        assert_eq!(stdout(&out), "status=0\n", "{name}: {}", stderr(&out));
        assert_eq!(
            std::fs::read_to_string(&out_file).unwrap(),
            "VAL=3\n",
            "{name}: the application's output"
        );
        std::fs::remove_file(&out_file).unwrap();
    }
}
