//! Hardening: clshim inside long jobs must never hurt them. Concurrency (32 threads, real
//! pocl and the fake ICD, every record written once, memory flat), fork without exec,
//! every way out of a process, trace directories that fail, trace-file safety
//! (no symlink following, owner-only permissions), and a memcheck run. The C side is
//! tests/c/hardening.c; the fake driver is tests/fake_icd/fake_icd.c.

mod common;

use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn probe() -> PathBuf {
    build_c("hardening", &[])
}

/// `program` with the shim preloaded and tracing into `trace`, and nothing of the test's
/// own CLSHIM_*, LD_PRELOAD or OPENCL_LAYERS.
fn shim_command(program: impl AsRef<std::ffi::OsStr>, trace: &Path) -> Command {
    let mut cmd = Command::new(program);
    clear_shim_env(&mut cmd, &[]);
    cmd.env("LD_PRELOAD", shim_path())
        .env("CLSHIM_TRACE_DIR", trace);
    cmd
}

/// Runs the probe with the shim preloaded, tracing into `trace`, with `env` set after the
/// test's own CLSHIM_* are removed; killed after `limit` seconds (a deadlock fails the
/// test instead of hanging it).
fn shimmed(args: &[&str], trace: &Path, env: &[(&str, &str)], limit: u32) -> Output {
    let mut cmd = shim_command("timeout", trace);
    cmd.arg(limit.to_string()).arg(probe()).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn probe");
    assert_ne!(
        out.status.code(),
        Some(124),
        "{args:?} deadlocked (killed after {limit} s)"
    );
    out
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

fn fake_env(fake: &FakeIcd) -> String {
    fake.vendors.to_str().unwrap().to_string()
}

/// Every trace file of `dir` with its records (each line must parse).
fn files(dir: &Path) -> Vec<(PathBuf, Vec<Value>)> {
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for p in paths {
        let text = std::fs::read_to_string(&p).unwrap();
        let recs = text
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{}: bad line ({e}): {l}", p.display()))
            })
            .collect();
        out.push((p, recs));
    }
    out
}

fn rss(out: &Output) -> (i64, i64) {
    let s = stdout(out);
    let line = s
        .lines()
        .find_map(|l| l.strip_prefix("rss "))
        .expect("rss line");
    let v: Vec<i64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (v[0], v[1])
}

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
    let out = shimmed(
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
    let out = shimmed(
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
    let out = shimmed(
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
    let out = shimmed(&["fork-idle"], &dir, &[], 120);
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
    for (mode, summary) in [
        ("normal", true),
        ("thread", true),
        ("_exit", false),
        ("signal", false),
    ] {
        let dir = scratch("exit");
        let out = shimmed(&["exit", mode, "2"], &dir, &[], 120);
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
        assert_eq!(recs.len(), 1 + 2 + 4, "{mode}: header, 2 builds, 4 queries");
        assert_eq!(
            stderr(&out).contains("clshim: pid"),
            summary,
            "{mode}: summary only on exit paths that run exit handlers:\n{}",
            stderr(&out)
        );
    }
}

fn libc_sigterm() -> i32 {
    15
}

#[test]
fn unwritable_trace_directory_warns_once_and_the_run_goes_on() {
    let out = shimmed(
        &["exit", "normal", "2"],
        Path::new("/proc/clshim-no-such-dir/traces"),
        &[],
        120,
    );
    ok(&out, "unwritable trace dir");
    let err = stderr(&out);
    assert_eq!(
        err.matches("clshim: warning").count(),
        1,
        "one warning:\n{err}"
    );
    assert!(
        err.contains("/proc/clshim-no-such-dir/traces"),
        "names the directory:\n{err}"
    );
    assert!(
        err.contains("clshim: pid") && err.contains("2 builds"),
        "summary still printed:\n{err}"
    );
}

#[test]
fn full_trace_file_system_warns_once_and_the_run_goes_on() {
    // A file-size limit stands in for a full disk: the trace file's writes fail (EFBIG)
    // after the first kilobyte. The fake ICD writes no files of its own, unlike pocl.
    let fake = fake_icd();
    let dir = scratch("full");
    let script = format!(
        "ulimit -f 2; trap '' XFSZ; exec {} exit normal 40",
        probe().display()
    );
    let mut cmd = shim_command("sh", &dir);
    cmd.args(["-c", &script])
        .env("OCL_ICD_VENDORS", &fake.vendors);
    let out = cmd.output().unwrap();
    ok(&out, "run with a full trace file system");
    let err = stderr(&out);
    assert_eq!(
        err.matches("clshim: warning").count(),
        1,
        "one warning:\n{err}"
    );
    assert!(err.contains("cannot write trace file"), "{err}");
    assert!(err.contains("40 builds"), "summary still printed:\n{err}");
    let size = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum::<u64>();
    assert!(size <= 2048, "the limit held: {size} bytes");
}

#[test]
fn trace_directory_removed_mid_run_warns_once() {
    let dir = scratch("vanish");
    let trace = dir.join("t");
    let flag = dir.join("go");
    let mut cmd = shim_command(probe(), &trace);
    cmd.args(["gap", flag.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    // Wait for the first records, then remove the whole directory and let it go on.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !(trace.is_dir() && std::fs::read_dir(&trace).unwrap().count() > 0) {
        assert!(
            std::time::Instant::now() < deadline,
            "no trace file appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    std::fs::remove_dir_all(&trace).unwrap();
    std::fs::write(&flag, "").unwrap();
    let out = child.wait_with_output().unwrap();
    ok(&out, "gap");
    assert!(stdout(&out).contains("gap done"));
    let err = stderr(&out);
    assert_eq!(
        err.matches("clshim: warning").count(),
        1,
        "one warning:\n{err}"
    );
    assert!(err.contains("was removed"), "{err}");
    assert!(err.contains("2 builds"), "summary still printed:\n{err}");
}

#[test]
fn descriptor_closed_and_reused_by_the_application_gets_no_record() {
    // The fake ICD holds no descriptors of its own, so the probe may close them all.
    let fake = fake_icd();
    let dir = scratch("reuse-fd");
    let trace = dir.join("t");
    let own = dir.join("own.txt");
    let out = shimmed(
        &["reuse-fd", own.to_str().unwrap()],
        &trace,
        &[("OCL_ICD_VENDORS", &fake_env(fake))],
        120,
    );
    ok(&out, "reuse-fd");
    assert!(
        stdout(&out).contains("own file on descriptor 3"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&own).unwrap(),
        "app line 1\napp line 2\n",
        "the application's file holds only its own lines"
    );
    // clshim reopened its own file and kept recording, silently.
    let f = files(&trace);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].1.len(), 1 + 2 + 4, "{:#?}", f[0].1);
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

/// Two processes with the same pid on one host, writing into one directory: with pid
/// namespaces (as in containers) both are pid 1. Each writes its own file, and every
/// record carries its process's instance, so the report can tell them apart.
#[test]
fn same_pid_in_two_pid_namespaces_gets_two_files_and_two_instances() {
    let fake = fake_icd();
    let dir = scratch("pidns");
    let probe = probe();
    let ns = |trace: &Path| {
        let mut cmd = shim_command("unshare", trace);
        cmd.args(["--user", "--map-root-user", "--pid", "--fork"])
            .arg(&probe)
            .args(["exit", "normal", "1"])
            .env("OCL_ICD_VENDORS", &fake.vendors)
            .env("CLSHIM_SUMMARY", "0");
        cmd
    };
    let works = ns(&dir.join("probe"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let trace = dir.join("t");
    if works {
        let a = ns(&trace).spawn().unwrap();
        let b = ns(&trace).spawn().unwrap();
        ok(&a.wait_with_output().unwrap(), "first namespace");
        ok(&b.wait_with_output().unwrap(), "second namespace");
    } else {
        // No user namespaces here: an earlier process with the probe's pid stands in,
        // by leaving its file under the name the probe will want.
        eprintln!("unshare refused: simulating the second process with a planted file");
        std::fs::create_dir_all(&trace).unwrap();
        let script = format!(
            "printf '{{\"event\":\"process\",\"instance\":\"0000000000000000\"}}\\n' > \
             {trace}/clshim-{host}-r--p$$.jsonl && exec {probe} exit normal 1",
            trace = trace.display(),
            host = hostname(),
            probe = probe.display()
        );
        let mut cmd = shim_command("sh", &trace);
        cmd.args(["-c", &script])
            .env("OCL_ICD_VENDORS", &fake.vendors);
        ok(&cmd.output().unwrap(), "probe beside a planted file");
    }
    let f = files(&trace);
    assert_eq!(f.len(), 2, "{f:#?}");
    let instances: HashSet<String> = f
        .iter()
        .map(|(p, recs)| {
            let i = recs[0]["instance"].as_str().unwrap().to_string();
            assert!(
                recs.iter().all(|r| r["instance"] == recs[0]["instance"]),
                "{}: one instance per file",
                p.display()
            );
            i
        })
        .collect();
    assert_eq!(instances.len(), 2, "{f:#?}");
    if works {
        assert!(
            f.iter().all(|(_, r)| r[0]["pid"] == 1),
            "both were pid 1: {f:#?}"
        );
    }
}

/// Trace directory names are bytes: one with a non-UTF-8 byte and a trailing space is
/// the directory clshim run creates and the library writes into, whichever way it is
/// given. A newline in a CLSHIM_* value reaches stderr escaped, not as a line of its own.
#[test]
fn trace_directory_names_are_kept_byte_for_byte() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let fake = fake_icd();
    let dir = scratch("dir-bytes");
    let name = OsStr::from_bytes(b"traces \xff ");
    let exact = dir.join(name);
    let ways: [&dyn Fn(&mut Command); 3] = [
        &|c: &mut Command| {
            c.arg("run").arg("--trace-dir").arg(&exact);
        },
        &|c: &mut Command| {
            let mut a = std::ffi::OsString::from("--trace-dir=");
            a.push(&exact);
            c.arg("run").arg(a);
        },
        &|c: &mut Command| {
            c.arg("run").env("CLSHIM_TRACE_DIR", &exact);
        },
    ];
    for (i, way) in ways.iter().enumerate() {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_clshim"));
        way(&mut cmd);
        cmd.arg("--lib")
            .arg(shim_path())
            .arg("--")
            .arg(probe())
            .args(["exit", "normal", "1"])
            .env("OCL_ICD_VENDORS", &fake.vendors)
            .env("CLSHIM_BINARIES", "bogus\nclshim: forged line");
        let out = run(cmd, false);
        ok(&out, &format!("way {i}"));
        let entries: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            entries,
            [name.to_owned()],
            "way {i}: one directory, the one named"
        );
        assert_eq!(files(&exact).len(), 1, "way {i}: the trace file is in it");
        let err = stderr(&out);
        assert!(
            !err.lines().any(|l| l.starts_with("clshim: forged")),
            "way {i}: a value's newline made a line of its own:\n{err}"
        );
        assert!(
            err.contains(r#"CLSHIM_BINARIES="bogus\nclshim: forged line""#),
            "{err}"
        );
        std::fs::remove_dir_all(&exact).unwrap();
    }
}

fn hostname() -> String {
    let o = Command::new("hostname").output().unwrap();
    let h = String::from_utf8_lossy(&o.stdout).trim().to_string();
    h.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[test]
fn trace_files_follow_no_symlink_and_are_owner_only() {
    let dir = scratch("symlink");
    let trace = dir.join("t");
    std::fs::create_dir_all(&trace).unwrap();
    let victim = dir.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    // The shell plants a link under the exact name the probe's trace file will have (the
    // pid survives exec), then becomes the probe.
    let script = format!(
        "ln -s {victim} {trace}/clshim-{host}-r--p$$.jsonl && exec {probe} exit normal 1",
        victim = victim.display(),
        trace = trace.display(),
        host = hostname(),
        probe = probe().display()
    );
    let mut cmd = shim_command("sh", &trace);
    cmd.args(["-c", &script]);
    let out = cmd.output().unwrap();
    ok(&out, "probe behind a planted symlink");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious\n",
        "the link's target is untouched"
    );
    let written: Vec<PathBuf> = std::fs::read_dir(&trace)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            !std::fs::symlink_metadata(p)
                .unwrap()
                .file_type()
                .is_symlink()
        })
        .collect();
    assert_eq!(written.len(), 1, "{written:?}");
    let text = std::fs::read_to_string(&written[0]).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let instance = header["instance"].as_str().unwrap();
    assert!(
        written[0]
            .to_str()
            .unwrap()
            .ends_with(&format!(".{instance}.jsonl")),
        "took the name made unique by the process's instance: {written:?}"
    );
    let mode = std::fs::metadata(&written[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "owner-only by default");

    // CLSHIM_TRACE_MODE widens it on request.
    let wide = dir.join("wide");
    let out = shimmed(
        &["exit", "normal", "1"],
        &wide,
        &[("CLSHIM_TRACE_MODE", "0640")],
        120,
    );
    ok(&out, "CLSHIM_TRACE_MODE=0640");
    let f = files(&wide);
    assert_eq!(
        std::fs::metadata(&f[0].0).unwrap().permissions().mode() & 0o777,
        0o640
    );
}

#[test]
fn memcheck_finds_no_invalid_access_in_clshim() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        panic!("valgrind is missing: scripts/test installs it");
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
