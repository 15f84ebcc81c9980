//! `clshim report` on a real compile+link client: tests/c/compile_link.c (two
//! `clCompileProgram`s, one with an embedded header, then `clLinkProgram` and a kernel
//! run) under `clshim run` on pocl, its trace then reported. The report must name the
//! linked program by its kernel, put both compiles in its row, say what it was linked
//! from, and show nothing as "(unknown program)"; the exit summary names compiles and
//! links apart.

use crate::common;

use common::{report, s};
use serde_json::{json, Value};
use std::process::Command;

#[test]
fn real_compile_link_client_is_reported_under_its_kernel_name() {
    let prog = common::build_c("compile_link", &[]);
    let d = common::scratch("real-link");
    let traces = d.join("traces");
    common::shim_path(); // a fresh target/<profile>/libclshim.so beside the clshim executable
    let mut c = Command::new(env!("CARGO_BIN_EXE_clshim"));
    // What the run keeps stays with its traces, not in the store of $HOME, where a compile
    // an earlier run kept would be taken instead of compiled.
    c.args(["run", "--trace-dir"])
        .arg(&traces)
        .arg("--native-store")
        .arg(d.join("store"))
        .arg("--")
        .arg(&prog);
    let o = common::run(c, false);
    let err = common::stderr(&o);
    assert!(o.status.success(), "{}\n{err}", common::stdout(&o));
    assert!(
        common::stdout(&o).contains("linked: 5 15 25 35 45 55 65 75 sum=320"),
        "{}",
        common::stdout(&o)
    );
    let summary = err
        .lines()
        .find(|l| l.starts_with("clshim: pid "))
        .unwrap_or_else(|| panic!("no summary line: {err}"));
    assert!(summary.contains(": 2 compiles + 1 link "), "{summary}");

    let o = report(&[s(&traces)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out = common::stdout(&o);
    println!("{out}");
    assert!(!out.contains("(unknown program)"), "{out}");
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("linked "))
        .unwrap_or_else(|| panic!("no row for kernel 'linked':\n{out}"));
    assert!(row.contains("link of 2 compiled"), "{row}");
    let cols: Vec<&str> = row.split_whitespace().collect();
    // kernels, source (4 words), ranks, builds: 2 compiles + 1 link in one row.
    assert_eq!(cols[5..7], ["1", "3"], "{row}");

    let v: Value =
        serde_json::from_str(&common::stdout(&report(&["--json", s(&traces)]))).expect("JSON");
    let progs = v["programs"].as_array().unwrap();
    assert_eq!(progs.len(), 1, "every record in one row: {progs:#?}");
    let p = &progs[0];
    assert_eq!(p["kernels"], json!(["linked"]));
    assert_eq!(
        (p["compiles"].as_u64(), p["links"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(p["linked_from"], json!(["link of 2 compiled"]));
    assert_eq!(p["options"], json!(["-cl-std=CL1.2"]));
    let build = p["build_seconds"]["total"].as_f64().unwrap();
    let all = v["build_seconds"].as_f64().unwrap();
    assert!(
        (build - all).abs() < 1e-9,
        "the row holds all build time: {build} of {all}"
    );
}

/// A library that takes the previous library twice, 40 levels deep: a linked program's
/// identity is a fixed-size hash of its inputs' identities, never their text, so the
/// report's memory stays bounded by the trace's size whatever the shape of the link
/// graph. The report runs under a 1 GiB address-space limit (the identity as nested text
/// would need 2^40 copies of a source hash) and the linked row's hash is short.
#[test]
fn doubling_library_chain_is_reported_in_bounded_memory() {
    const DEPTH: u64 = 40;
    let d = common::scratch("link-chain");
    let rec = |id: u64, event: &str, call: &str, extra: Value| {
        let mut v = json!({
            "schema": 1, "event": event, "pid": 7, "rank": null, "tid": 7, "ts": 1.8e9 + id as f64,
            "seconds": 0.001, "call": call, "result": 0, "result_name": "CL_SUCCESS",
            "program": id, "async": false,
            "devices": [common::pocl_cpu()],
        });
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v.to_string()
    };
    let mut lines = vec![json!({
        "schema": 1, "event": "process", "pid": 7, "rank": null, "tid": 7, "ts": 1.8e9, "seconds": 0.0,
        "host": "h", "exe": "/bin/app", "argv": ["app"], "ppid": 1, "clshim_version": "0.1.0",
        "mode": "preload", "policy": "pass", "devices_filter": "pocl-cpu",
    })
    .to_string()];
    lines.push(rec(
        1,
        "compile",
        "clCompileProgram",
        json!({"options": "", "kernels": [], "headers": 0,
               "source": {"origin": "source", "hash": "fnv1a64:00000000000000aa", "length": 9}}),
    ));
    for id in 2..=DEPTH {
        lines.push(rec(
            id,
            "link",
            "clLinkProgram",
            json!({"options": "-create-library", "kernels": [], "inputs": [id - 1, id - 1]}),
        ));
    }
    lines.push(rec(
        DEPTH + 1,
        "link",
        "clLinkProgram",
        json!({"options": "", "kernels": ["k"], "inputs": [DEPTH, DEPTH]}),
    ));
    let trace = d.join("app.7.jsonl");
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();

    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" report --json \"$1\"")
        .arg(env!("CARGO_BIN_EXE_clshim"))
        .arg(&d)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let v: Value = serde_json::from_str(&common::stdout(&o)).expect("JSON");
    let progs = v["programs"].as_array().unwrap();
    let linked = progs
        .iter()
        .find(|p| p["kernels"] == json!(["k"]))
        .unwrap_or_else(|| panic!("no row for kernel 'k': {progs:#?}"));
    let hash = linked["source_hash"]
        .as_str()
        .expect("a linked program's hash");
    assert!(
        hash.len() <= 40,
        "fixed-size identity, got {} bytes",
        hash.len()
    );
    assert_eq!(
        (linked["compiles"].as_u64(), linked["links"].as_u64()),
        (Some(1), Some(DEPTH))
    );
}
