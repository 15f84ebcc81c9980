//! Fault injection: the shim in front of a fake OpenCL driver (tests/fake_icd/fake_icd.c)
//! that fails builds and binary queries, returns partial binaries, runs build callbacks
//! on other threads, answers slowly, and can use cl_khr_icd 2.0 tagged objects. Every
//! result code must reach the application unchanged, the driver must see the same calls,
//! and the trace records (docs/trace-schema.md) must say what happened.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The same client linked straight to the fake driver, with no loader in between.
fn direct_client() -> PathBuf {
    let f = fake_icd();
    let lib = f.lib.to_str().unwrap().to_string();
    let rpath = format!("-Wl,-rpath,{}", f.lib.parent().unwrap().display());
    build_c_custom(
        "fake_client",
        "fake_client_direct",
        &[&lib, &rpath, "-lpthread"],
    )
}

/// Runs the steps on the fake driver (with the shim or without it); the run must succeed.
fn run_fake(bin: &Path, steps: &[&str], env: &[(&str, &str)], shim: bool) -> Ran {
    let r = run_on(Driver::Fake, bin, steps, env, shim);
    r.ok();
    r
}

fn check_fake_devices(r: &Value, n: usize) {
    let devs = r["devices"].as_array().unwrap();
    assert_eq!(devs.len(), n, "{r}");
    for (i, d) in devs.iter().enumerate() {
        assert_eq!(d["name"], format!("fake-device-{i}"), "{r}");
        assert_eq!(d["type"], "CPU", "{r}");
        assert_eq!(d["platform"], "Fake ICD", "{r}");
        assert_eq!(d["vendor"], "FakeVendor", "{r}");
        assert_eq!(d["driver"], "0.1-fake", "{r}");
        assert_eq!(
            d["matched"], false,
            "not pocl: the default filter leaves it: {r}"
        );
    }
}

#[test]
fn successful_build_and_queries_on_two_devices() {
    let steps = [
        "sizes-only",
        "build",
        "sizes",
        "binaries",
        "load",
        "build",
        "kernels",
    ];
    let r = compare_on_fake(&fake_client(), &steps, &[("FAKE_ICD_DEVICES", "2")]);
    let out = r.stdout();
    assert!(out.contains("sizes: CL_SUCCESS [119, 119]"), "{out}");
    assert!(
        out.contains("load: CL_SUCCESS status=[CL_SUCCESS, CL_SUCCESS]"),
        "{out}"
    );
    let recs = &r.records;
    let p = one_event(recs, "process");
    assert_eq!(p["mode"], "preload");
    let builds = events(recs, "build");
    assert_eq!(builds.len(), 2, "{recs:#?}");
    let b = builds[0];
    assert_eq!(b["result"], 0);
    assert_eq!(b["result_name"], "CL_SUCCESS");
    assert!(b["options"].is_null());
    assert_eq!(b["async"], false);
    assert_eq!(b["source"]["origin"], "source");
    let src = fake_source("1");
    assert_eq!(b["source"]["hash"], fnv1a64(src.as_bytes()));
    assert_eq!(b["source"]["length"], src.len());
    assert_eq!(b["kernels"], json!(["fake_a", "fake_b"]));
    check_fake_devices(b, 2);

    let q = events(recs, "binary_query");
    assert_eq!(q.len(), 2, "size-only queries are not recorded: {recs:#?}");
    assert_eq!(q[0]["param"], "CL_PROGRAM_BINARY_SIZES");
    assert_eq!(q[1]["param"], "CL_PROGRAM_BINARIES");
    for r in &q {
        assert_eq!(r["program"], b["program"]);
        assert_eq!(r["result"], 0);
        assert_eq!(r["action"], "forward");
        assert_eq!(r["actions"], json!(["forward", "forward"]));
        assert_query_sizes(r, &json!([119, 119]));
        check_fake_devices(r, 2);
    }
    let l = one_event(recs, "binary_load");
    assert_eq!(l["result"], 0);
    assert_eq!(l["action"], "forward");
    assert_eq!(l["lengths"], json!([119, 119]));
    assert!(!l["program"].is_null());
    assert_eq!(builds[1]["program"], l["program"]);
    assert_eq!(builds[1]["source"]["origin"], "binary");
}

#[test]
fn failing_build_compile_and_link_pass_through() {
    let steps = ["build", "log", "status", "compile", "link"];
    let r = compare_on_fake(&fake_client(), &steps, &[("FAKE_ICD_BUILD_FAIL", "1")]);
    let out = r.stdout();
    assert!(out.contains("build: CL_BUILD_PROGRAM_FAILURE"), "{out}");
    assert!(out.contains("build failed on purpose"), "{out}");
    assert!(out.contains("compile: CL_COMPILE_PROGRAM_FAILURE"), "{out}");
    let recs = &r.records;
    let b = one_event(recs, "build");
    assert_eq!(b["result"], -11);
    assert_eq!(b["result_name"], "CL_BUILD_PROGRAM_FAILURE");
    assert_eq!(b["kernels"], json!([]));
    let c = one_event(recs, "compile");
    assert_eq!(c["result"], -15);
    assert_eq!(c["result_name"], "CL_COMPILE_PROGRAM_FAILURE");
    assert_eq!(c["headers"], 0);
    let l = one_event(recs, "link");
    assert_eq!(
        l["result"], -59,
        "the fake refuses to link an uncompiled program"
    );
    assert_eq!(l["result_name"], "CL_INVALID_OPERATION");
    assert!(l["program"].is_null());
    // A refused call's arrays are not read: the count could exceed the array.
    assert_eq!(l["inputs"], json!([]));
}

#[test]
fn compile_and_link_recorded() {
    let r = compare_on_fake(&fake_client(), &["compile", "link", "kernels"], &[]);
    let c = one_event(&r.records, "compile");
    assert_eq!(c["result"], 0);
    assert_eq!(c["headers"], 0);
    let l = one_event(&r.records, "link");
    assert_eq!(l["result"], 0);
    assert_eq!(l["inputs"], json!([c["program"]]));
    assert_eq!(l["kernels"], json!(["fake_a", "fake_b"]));
    assert!(!l["program"].is_null());
    assert_ne!(l["program"], c["program"]);
}

#[test]
fn failing_link_passes_through() {
    let r = compare_on_fake(
        &fake_client(),
        &["compile", "link"],
        &[("FAKE_ICD_LINK_FAIL", "1")],
    );
    assert!(
        r.stdout().contains("link: CL_LINK_PROGRAM_FAILURE"),
        "{}",
        r.stdout()
    );
    assert_eq!(one_event(&r.records, "compile")["result"], 0);
    let l = one_event(&r.records, "link");
    assert_eq!(l["result"], -17);
    assert_eq!(l["result_name"], "CL_LINK_PROGRAM_FAILURE");
    assert!(l["program"].is_null(), "no program was made: {l}");
    assert_eq!(l["kernels"], json!([]));
}

#[test]
fn failing_binary_queries_pass_through() {
    for (var, code, name, param) in [
        (
            "FAKE_ICD_FAIL_SIZES",
            -5,
            "CL_OUT_OF_RESOURCES",
            "CL_PROGRAM_BINARY_SIZES",
        ),
        (
            "FAKE_ICD_FAIL_BINARIES",
            -6,
            "CL_OUT_OF_HOST_MEMORY",
            "CL_PROGRAM_BINARIES",
        ),
    ] {
        let code_s = code.to_string();
        let r = compare_on_fake(
            &fake_client(),
            &["build", "sizes", "binaries"],
            &[(var, &code_s)],
        );
        assert!(r.stdout().contains(name), "{}", r.stdout());
        let q: Vec<&Value> = events(&r.records, "binary_query")
            .into_iter()
            .filter(|q| q["param"] == param)
            .collect();
        assert_eq!(q.len(), 1, "{var}: {:#?}", r.records);
        assert_eq!(q[0]["result"], code, "{var}");
        assert_eq!(q[0]["result_name"], name, "{var}");
        assert!(q[0]["sizes"].is_null(), "{var}: the call failed: {}", q[0]);
    }
}

#[test]
fn zero_size_for_one_device_passes_through() {
    let steps = ["build", "sizes", "binaries", "load"];
    let env = [
        ("FAKE_ICD_DEVICES", "2"),
        ("FAKE_ICD_ZERO_SIZE_DEVICE", "1"),
    ];
    let r = compare_on_fake(&fake_client(), &steps, &env);
    assert!(
        r.stdout().contains("sizes: CL_SUCCESS [119, 0]"),
        "{}",
        r.stdout()
    );
    for q in events(&r.records, "binary_query") {
        assert_query_sizes(q, &json!([119, 0]));
        assert_eq!(q["result"], 0);
        assert_eq!(q["action"], "forward");
    }
    // A zero length is invalid for clCreateProgramWithBinary.
    let l = one_event(&r.records, "binary_load");
    assert_eq!(l["result"], -30);
    assert_eq!(l["result_name"], "CL_INVALID_VALUE");
    assert!(l["program"].is_null());
    // A refused call's arrays are not read: the count could exceed the array.
    assert_eq!(l["lengths"], json!([]));
}

#[test]
fn async_callbacks_in_every_mode() {
    for (mode, thread, when) in [
        ("inline", "same", "during-call"),
        ("thread", "other", "after-return"),
        ("thread-before", "other", "during-call"),
    ] {
        let env = [("FAKE_ICD_ASYNC", mode), ("FAKE_ICD_ASYNC_MS", "300")];
        let r = compare_on_fake(&fake_client(), &["build-async", "status", "kernels"], &env);
        let expect = format!("callback: calls=1 user_data=ok thread={thread} when={when}");
        assert!(r.stdout().contains(&expect), "{mode}: {}", r.stdout());
        let b = one_event(&r.records, "build");
        assert_eq!(b["async"], true, "{mode}");
        assert_eq!(b["result"], 0, "{mode}");
        assert_eq!(b["options"], "-DASYNC", "{mode}");
        if mode == "thread" {
            // The time runs until the callback fired, 300 ms after the call returned.
            let s = b["seconds"].as_f64().unwrap();
            assert!(
                s >= 0.25,
                "{mode}: the build took {s} s, until the callback"
            );
        }
    }
}

#[test]
fn async_failing_build_recorded() {
    let env = [("FAKE_ICD_ASYNC", "thread"), ("FAKE_ICD_BUILD_FAIL", "1")];
    let r = compare_on_fake(&fake_client(), &["build-async", "status"], &env);
    assert!(
        r.stdout().contains("status: CL_SUCCESS -2"),
        "{}",
        r.stdout()
    );
    let b = one_event(&r.records, "build");
    assert_eq!(b["async"], true);
    // The call returned CL_SUCCESS and the build failed later, on the driver's thread. The
    // library records the build's outcome when the callback fired (the trace schema's "the
    // status code returned to the application" would say 0 here; the outcome is more useful).
    assert_eq!(b["result"], -11, "{b}");
    assert_eq!(b["result_name"], "CL_BUILD_PROGRAM_FAILURE");
    assert_eq!(b["kernels"], json!([]));
}

#[test]
fn slow_queries_and_builds_are_timed() {
    let env = [("FAKE_ICD_QUERY_MS", "300"), ("FAKE_ICD_BUILD_MS", "200")];
    let r = compare_on_fake(
        &fake_client(),
        &["build", "sizes-only", "sizes", "binaries"],
        &env,
    );
    // The driver sleeps as long as it is told (at least that long, however loaded the
    // machine), and each record covers its own call only: the queries start after the build
    // ended, the second after the first.
    let b = one_event(&r.records, "build");
    assert!(b["seconds"].as_f64().unwrap() >= 0.18, "{b}");
    let end = |r: &Value| r["ts"].as_f64().unwrap() + r["seconds"].as_f64().unwrap();
    let q = events(&r.records, "binary_query");
    assert_eq!(q.len(), 2);
    let mut previous_end = end(b);
    for q in q {
        let s = q["seconds"].as_f64().unwrap();
        assert!(s >= 0.28, "{q}");
        assert!(
            q["ts"].as_f64().unwrap() >= previous_end,
            "{q} after {previous_end}"
        );
        previous_end = end(q);
    }
}

#[test]
fn program_from_il_recorded() {
    let r = compare_on_fake(&fake_client(), &["il", "build"], &[]);
    let b = one_event(&r.records, "build");
    assert_eq!(b["result"], 0);
    assert_eq!(b["source"]["origin"], "il");
    let il = b"FAKE-IL-BYTES\0";
    assert_eq!(b["source"]["length"], il.len());
    assert_eq!(b["source"]["hash"], fnv1a64(il));
}

#[test]
fn icd2_tagged_objects_without_a_loader() {
    // ocl-icd 2.3.1 does not know cl_khr_icd 2.0, so the client is linked to the driver.
    let bin = direct_client();
    let steps = [
        "build", "sizes", "binaries", "load", "build", "compile", "link", "kernels",
    ];
    let env = [("FAKE_ICD_ICD2", "1"), ("FAKE_ICD_DEVICES", "2")];
    let r = compare_on_fake(&bin, &steps, &env);
    assert!(
        r.stdout().contains("sizes: CL_SUCCESS [119, 119]"),
        "{}",
        r.stdout()
    );
    assert!(r.stdout().contains("kernels: CL_SUCCESS fake_a;fake_b"));
    let recs = &r.records;
    assert_eq!(events(recs, "build").len(), 2, "{recs:#?}");
    assert_eq!(events(recs, "binary_query").len(), 2, "{recs:#?}");
    assert_eq!(one_event(recs, "binary_load")["result"], 0);
    assert_eq!(one_event(recs, "compile")["result"], 0);
    assert_eq!(one_event(recs, "link")["result"], 0);
    for rec in recs.iter().filter(|r| !is_process_record(r)) {
        check_fake_devices(rec, 2);
    }

    // Failures pass through tagged objects too.
    let env = [("FAKE_ICD_ICD2", "1"), ("FAKE_ICD_BUILD_FAIL", "1")];
    let r = compare_on_fake(&bin, &["build"], &env);
    assert_eq!(one_event(&r.records, "build")["result"], -11);
    let env = [("FAKE_ICD_ICD2", "1"), ("FAKE_ICD_FAIL_SIZES", "-5")];
    let r = compare_on_fake(&bin, &["build", "sizes"], &env);
    assert_eq!(one_event(&r.records, "binary_query")["result"], -5);
}

#[test]
fn fake_driver_works_without_the_shim() {
    // Guards the test fixture itself: through ocl-icd, and linked directly in ICD2 mode.
    let r = run_fake(
        &fake_client(),
        &["build", "sizes", "binaries", "load"],
        &[],
        false,
    );
    assert!(
        r.stdout().contains("load: CL_SUCCESS status=[CL_SUCCESS]"),
        "{}",
        r.stdout()
    );
    assert_eq!(
        r.driver_calls,
        [
            "clCreateProgramWithSource 0",
            "clBuildProgram 0",
            "clGetProgramInfo(CL_PROGRAM_BINARY_SIZES) 0",
            "clGetProgramInfo(CL_PROGRAM_BINARIES) 0",
            "clCreateProgramWithBinary 0"
        ]
    );
    let env = [("FAKE_ICD_ICD2", "1")];
    let r = run_fake(&direct_client(), &["build", "kernels"], &env, false);
    assert!(
        r.stdout().contains("kernels: CL_SUCCESS fake_a;fake_b"),
        "{}",
        r.stdout()
    );
}
