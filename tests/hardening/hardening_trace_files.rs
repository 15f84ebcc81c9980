//! Hardening of the trace files: trace directories that cannot be written, fill up or
//! vanish, descriptors the application closes and reuses, two processes with one pid,
//! directory names kept byte for byte, no symlink followed and owner-only permissions.
//! The C side is tests/c/hardening.c; the fake driver is tests/fake_icd/fake_icd.c.

use crate::common;

use common::hardening::*;
use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn unwritable_trace_directory_warns_once_and_the_run_goes_on() {
    let out = run_probe(
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
    let out = run_probe(
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
    assert_eq!(
        f[0].1.len(),
        1 + 2 + 4 + 1,
        "header, builds, queries, exit: {:#?}",
        f[0].1
    );
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
             {trace}/clshim-{host}-p$$.jsonl && exec {probe} exit normal 1",
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
/// given. A newline in a CLSHIM_* value reaches stderr escaped, not as a line of its own,
/// from `clshim run` (which refuses the value before the command starts) and from the
/// library (which warns and goes on).
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
    let forged = "bogus\nclshim: forged line";
    let escaped = r#"CLSHIM_BINARIES="bogus\nclshim: forged line""#;
    for (i, way) in ways.iter().enumerate() {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_clshim"));
        way(&mut cmd);
        cmd.arg("--lib")
            .arg(shim_path())
            .arg("--")
            .arg(probe())
            .args(["exit", "normal", "1"])
            .env("OCL_ICD_VENDORS", &fake.vendors);
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
        std::fs::remove_dir_all(&exact).unwrap();
    }
    // clshim run: one line, the value escaped, the command not started.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clshim"));
    cmd.arg("run")
        .arg("--lib")
        .arg(shim_path())
        .arg("--")
        .arg(probe())
        .args(["exit", "normal", "1"])
        .env("CLSHIM_BINARIES", forged);
    let out = run(cmd, false);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(escaped), "{err}");
    // The library, preloaded without clshim run: a warning, the value escaped.
    let mut cmd = shim_command(probe(), &exact);
    cmd.args(["exit", "normal", "1"])
        .env("OCL_ICD_VENDORS", &fake.vendors)
        .env("CLSHIM_BINARIES", forged);
    let out = cmd.output().expect("spawn probe");
    ok(&out, "preloaded");
    let err = stderr(&out);
    assert!(
        !err.lines().any(|l| l.starts_with("clshim: forged")),
        "a value's newline made a line of its own:\n{err}"
    );
    assert!(err.contains(escaped), "{err}");
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
        "ln -s {victim} {trace}/clshim-{host}-p$$.jsonl && exec {probe} exit normal 1",
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
    let out = run_probe(
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
