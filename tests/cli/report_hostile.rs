//! `clshim report` on hostile input: what a trace directory may hold besides trace
//! files (a FIFO, a link to /dev/zero, a line of megabytes), a `--chrome` path that is
//! a symbolic link to someone else's file, finite but absurd times, and processes of
//! different pid namespaces that share a pid. Each case must end quickly, skip what it
//! cannot use with a reason, and report the rest.

use crate::common;

use common::s;

use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const T0: f64 = 1_750_000_000.0;

/// Runs `clshim report ARGS`, killing it (and failing) after 60 s: a report that
/// blocks on a FIFO or reads /dev/zero forever must not hang the suite.
fn report(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clshim"))
        .arg("report")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn clshim");
    let start = Instant::now();
    // Drain the pipes on threads so a large output cannot block the child.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut so, &mut v).unwrap();
        v
    });
    let te = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut se, &mut v).unwrap();
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("clshim report {args:?} still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
    }
}

fn process(pid: u64, rank: Option<i64>, instance: Option<&str>, ts: f64) -> Value {
    let mut v = json!({
        "schema": 1, "event": "process", "pid": pid, "rank": rank, "tid": pid, "ts": ts,
        "seconds": 0.0, "host": "node1", "exe": "/usr/bin/app", "argv": ["app"], "ppid": 1,
        "size": null, "rank_source": null, "clshim_version": "0.1.0", "mode": "preload",
        "policy": "pass", "devices_filter": "pocl-cpu",
    });
    if let Some(i) = instance {
        v["instance"] = json!(i);
    }
    v
}

fn build(pid: u64, rank: Option<i64>, instance: Option<&str>, ts: f64, seconds: f64) -> Value {
    let mut v = json!({
        "schema": 1, "event": "build", "pid": pid, "rank": rank, "tid": pid, "ts": ts,
        "seconds": seconds, "program": 1, "call": "clBuildProgram", "result": 0,
        "result_name": "CL_SUCCESS",
        "devices": [{"name": "cpu", "type": "CPU", "platform": "Portable Computing Language",
                     "vendor": "x", "driver": "3.1", "matched": true}],
        "options": null, "async": false,
        "source": {"origin": "source", "hash": "fnv1a64:1f2e3d4c5b6a7980", "length": 10},
        "kernels": ["k"],
    });
    if let Some(i) = instance {
        v["instance"] = json!(i);
    }
    v
}

fn write(dir: &Path, name: &str, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(dir.join(name), text).unwrap();
}

fn good_file(dir: &Path, pid: u64) {
    write(
        dir,
        &format!("clshim-node1-r0-p{pid}.jsonl"),
        &[
            process(pid, Some(0), None, T0).to_string(),
            build(pid, Some(0), None, T0 + 1.0, 0.5).to_string(),
        ],
    );
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).expect("one JSON document")
}

#[test]
fn fifo_and_device_links_are_skipped_not_read() {
    let d = common::scratch("hostile-fifo");
    good_file(&d, 100);
    let fifo = d.join("clshim-evil-r1-p1.jsonl");
    let path = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    // SAFETY: `path` is a NUL-terminated C string that lives across the call.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    let zero = d.join("clshim-evil-r2-p2.jsonl");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    // A link to a regular trace file is an ordinary file to read.
    let elsewhere = common::scratch("hostile-fifo-target");
    good_file(&elsewhere, 300);
    std::os::unix::fs::symlink(
        elsewhere.join("clshim-node1-r0-p300.jsonl"),
        d.join("clshim-node1-r5-p300.jsonl"),
    )
    .unwrap();

    // Neither is opened (the messages say why): a read of either would never end, which
    // `report` turns into a failure after 60 s.
    let o = report(&["--json", s(&d)]);
    assert_eq!(o.status.code(), Some(1), "{}", common::stderr(&o));
    let e = common::stderr(&o);
    assert!(
        e.contains(&format!(
            "clshim report: {}: cannot read: a FIFO (only regular files are read)",
            fifo.display()
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "clshim report: {}: cannot read: a character device (only regular files are read)",
            zero.display()
        )),
        "{e}"
    );
    let v = json_of(&o);
    assert_eq!(v["skipped"], 2);
    assert_eq!(v["files"], 4);
    // The two unreadable files are neither processes nor hosts ("evil" is their name's host).
    assert_eq!(v["processes"], 2, "{v}");
    assert_eq!(v["hosts"], json!(["node1"]));
    assert_eq!(v["records"], 4);
}

#[test]
fn overlong_line_is_skipped_and_the_rest_read() {
    let d = common::scratch("hostile-long");
    let long = format!("{{\"schema\":1,\"pad\":\"{}\"}}", "x".repeat(3 << 20));
    let p = d.join("clshim-node1-r0-p7.jsonl");
    let len = long.len();
    write(
        &d,
        "clshim-node1-r0-p7.jsonl",
        &[
            process(7, Some(0), None, T0).to_string(),
            long,
            build(7, Some(0), None, T0 + 1.0, 0.5).to_string(),
        ],
    );
    let o = report(&["--json", s(&d)]);
    assert_eq!(o.status.code(), Some(1));
    let e = common::stderr(&o);
    assert!(
        e.contains(&format!(
            "clshim report: {}:2: line of {len} bytes, longer than the 1048576-byte limit",
            p.display()
        )),
        "{e}"
    );
    let v = json_of(&o);
    assert_eq!(v["skipped"], 1);
    assert_eq!(v["records"], 2);
    assert_eq!(v["programs"][0]["builds"], 1);
}

#[test]
fn chrome_output_never_writes_through_a_link() {
    let d = common::scratch("hostile-chrome");
    let traces = d.join("traces");
    std::fs::create_dir(&traces).unwrap();
    good_file(&traces, 100);
    let victim = d.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    let out = d.join("timeline.json");
    std::os::unix::fs::symlink(&victim, &out).unwrap();

    let o = report(&["--chrome", s(&out), s(&traces)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    let meta = std::fs::symlink_metadata(&out).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the link was replaced by the timeline"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(
        v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .count(),
        1
    );
    // An existing regular file is replaced too; no temporary file is left behind.
    let o = report(&["--chrome", s(&out), s(&traces)]);
    assert_eq!(o.status.code(), Some(0));
    let names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["timeline.json", "traces", "victim.txt"]);
    // A directory in the way: an error, nothing left behind.
    let o = report(&["--chrome", s(&traces), s(&traces)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        common::stderr(&o).contains("cannot write"),
        "{}",
        common::stderr(&o)
    );
    assert_eq!(std::fs::read_dir(&traces).unwrap().count(), 1);
}

#[test]
fn absurd_times_are_skipped_with_reasons() {
    let d = common::scratch("hostile-times");
    let mut lines = vec![process(9, Some(0), None, T0).to_string()];
    let bad = [
        (1e308, 0.5, "implausible ts 1e308"),
        (-1e308, 0.5, "implausible ts -1e308"),
        (100.0, 0.5, "implausible ts 1e2"),
        (8e9, 0.5, "implausible ts 8e9"),
        (T0, -1.0, "implausible seconds -1e0"),
        (T0, 1e308, "implausible seconds 1e308"),
        (T0, 8.0 * 86400.0, "implausible seconds 6.912e5"),
    ];
    for (ts, secs, _) in bad {
        lines.push(build(9, Some(0), None, ts, secs).to_string());
    }
    lines.push(build(9, Some(0), None, T0 + 2.0, 0.25).to_string());
    write(&d, "clshim-node1-r0-p9.jsonl", &lines);
    let out = d.join("t.json");
    let o = report(&["--json", "--chrome", s(&out), s(&d)]);
    assert_eq!(o.status.code(), Some(1));
    let e = common::stderr(&o);
    for (i, (_, _, reason)) in bad.iter().enumerate() {
        assert!(
            e.contains(&format!(":{}: {reason}", i + 2)),
            "{reason}: {e}"
        );
    }
    let v = json_of(&o);
    assert_eq!(v["skipped"], bad.len());
    assert_eq!(v["build_seconds"], 0.25);
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(!text.contains("null"), "{text}");
    let t: Value = serde_json::from_str(&text).unwrap();
    let x: Vec<&Value> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .collect();
    assert_eq!(x.len(), 1);
    assert!((x[0]["ts"].as_f64().unwrap() - 2e6).abs() < 1.0, "{}", x[0]);
    // No 309-digit number anywhere in the table.
    let o = report(&[s(&d)]);
    assert!(
        !common::stdout(&o)
            .split(|c: char| !c.is_ascii_digit())
            .any(|w| w.len() > 20),
        "{}",
        common::stdout(&o)
    );
}

#[test]
fn same_pid_in_two_namespaces_is_two_processes() {
    let d = common::scratch("hostile-instances");
    // Two containers on one host, no MPI rank, both pid 1 (renamed file: `.1`).
    for (i, (inst, secs)) in [("00112233aabbccdd", 1.0), ("ffeeddccbbaa9988", 3.0)]
        .iter()
        .enumerate()
    {
        let name = if i == 0 {
            "clshim-node1-r-p1.jsonl".to_string()
        } else {
            "clshim-node1-r-p1.1.jsonl".to_string()
        };
        write(
            &d,
            &name,
            &[
                process(1, None, Some(inst), T0).to_string(),
                build(1, None, Some(inst), T0 + 1.0, *secs).to_string(),
            ],
        );
    }
    let o = report(&["--json", s(&d)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let v = json_of(&o);
    assert_eq!(v["processes"], 2);
    let ranks = v["ranks"].as_array().unwrap();
    let labels: Vec<&str> = ranks.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["node1:1#00112233", "node1:1#ffeeddcc"]);
    let secs: Vec<f64> = ranks
        .iter()
        .map(|r| r["build_seconds"].as_f64().unwrap())
        .collect();
    assert_eq!(secs, [1.0, 3.0]);
    assert_eq!(ranks[0]["instance"], "00112233aabbccdd");
    assert_eq!(v["programs"][0]["ranks"], 2);

    // The timeline has a row for each.
    let out = d.join("t.json.out");
    let o = report(&["--chrome", s(&out), s(&d)]);
    assert_eq!(o.status.code(), Some(0));
    let t: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let rows: Vec<&str> = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(rows, ["pid 1#00112233 @ node1", "pid 1#ffeeddcc @ node1"]);

    // Without `instance` (older traces), the same host and pid stay one row, as
    // before, but the two files are still two processes.
    let d = common::scratch("hostile-no-instances");
    for name in ["clshim-node1-r-p1.jsonl", "clshim-node1-r-p1.1.jsonl"] {
        write(
            &d,
            name,
            &[
                process(1, None, None, T0).to_string(),
                build(1, None, None, T0 + 1.0, 1.0).to_string(),
            ],
        );
    }
    let v = json_of(&report(&["--json", s(&d)]));
    assert_eq!(v["processes"], 2);
    assert_eq!(v["ranks"].as_array().unwrap().len(), 1);
    assert_eq!(v["ranks"][0]["label"], "node1:1");
    assert_eq!(v["ranks"][0]["processes"], 2);
}

/// Whether a character would be obeyed by a terminal: a control character other than a
/// newline, or a bidirectional-text control.
fn obeyed(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A shared trace directory is anyone's to write: a kernel name that sets the terminal's
/// title, a host name that clears the screen, a cache path with a carriage return that
/// draws a fake hint, kept source lines in colour, and a file name holding an escape. The
/// text report and its stderr show each escaped (`\x1b`), and `--json` stays valid JSON
/// with the strings as they were and no raw DEL, C1 or bidirectional control.
#[test]
fn control_bytes_in_records_reach_no_terminal() {
    let d = common::scratch("hostile-controls");
    let kernel = "k\u{1b}]0;pwned\u{7}";
    let host = "n\u{1b}[2J\u{1b}[H1";
    let cache = "/tmp/c\r\nhint: all is well\u{9b}2J\u{202e}";
    std::fs::create_dir_all(d.join("sources")).unwrap();
    for rank in 0..2i64 {
        let text = format!("kernel void k() {{}}\n// \u{1b}[31mrank {rank}\u{7f}\n");
        let reference = format!("{:016x}-{}", 0xabc0 + rank, text.len());
        std::fs::write(d.join(format!("sources/{reference}.cl")), &text).unwrap();
        let mut p = process(100 + rank as u64, Some(rank), None, T0);
        p["host"] = json!(host);
        p["caches"] = json!([{"cache": "pocl", "path": cache, "from": "POCL_CACHE_DIR",
                              "fs": "nfs", "exists": true}]);
        let mut b = build(100 + rank as u64, Some(rank), None, T0 + 1.0, 1.0);
        b["kernels"] = json!([kernel]);
        b["source"]["hash"] = json!(format!("fnv1a64:{:016x}", 0xabc0 + rank));
        b["kept"] = json!({"source": reference, "options": null});
        write(
            &d,
            &format!("clshim-n-r{rank}-p{}.jsonl", 100 + rank),
            &[p.to_string(), b.to_string()],
        );
    }
    // A name the report cannot read, shown on stderr.
    std::fs::create_dir(d.join("clshim-\u{1b}[2J-r0-p9.jsonl")).unwrap();
    let o = report(&[s(&d)]);
    let (out, err) = (common::stdout(&o), common::stderr(&o));
    for (what, text) in [("stdout", &out), ("stderr", &err)] {
        let bad: Vec<char> = text.chars().filter(|&c| obeyed(c)).collect();
        assert!(bad.is_empty(), "{what} holds {bad:?}:\n{text}");
    }
    assert!(out.contains("k\\x1b]0;pwned\\x07"), "{out}");
    assert!(
        out.contains("rank 0\\x7f") || out.contains("\\x1b[31m"),
        "{out}"
    );
    assert!(err.contains("clshim-\\x1b[2J-r0-p9.jsonl"), "{err}");
    let o = report(&["--json", s(&d)]);
    let raw = String::from_utf8(o.stdout.clone()).unwrap();
    let bad: Vec<char> = raw.chars().filter(|&c| obeyed(c) && c != '\n').collect();
    assert!(bad.is_empty(), "JSON holds {bad:?}");
    let v = json_of(&o);
    assert_eq!(
        v["programs"][0]["kernels"],
        json!([kernel]),
        "the name as it was"
    );
}
