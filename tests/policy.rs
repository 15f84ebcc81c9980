//! The binary policies (`CLSHIM_BINARIES=pass|suppress|substitute`, `CLSHIM_DEVICES`):
//! what applications receive from CL_PROGRAM_BINARY_SIZES / CL_PROGRAM_BINARIES queries,
//! how clshim binaries load back through clCreateProgramWithBinary, how bad clshim binaries
//! are rejected, and what the trace records say. Real pocl CPU (through the system loader)
//! for the single-device cases, the fake ICD (tests/fake_icd/fake_icd.c) for several
//! devices, mixed device types and the exact calls reaching the driver.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;

const POCL_PLATFORM: &str = "Portable Computing Language";
const CUBE: &str = "2 3 10 29 66 127 sum=237";

fn policy(p: &'static str) -> (&'static str, &'static str) {
    ("CLSHIM_BINARIES", p)
}

fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// The fake client's `binaries` line for the given per-device hashes (None: nothing read).
fn binaries_line(step: &str, hashes: &[Option<u64>]) -> String {
    let list: Vec<String> = hashes.iter().map(|h| hex(h.unwrap_or(0))).collect();
    format!("{step}: CL_SUCCESS [{}]", list.join(", "))
}

fn sizes_line(sizes: &[usize]) -> String {
    let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
    format!("sizes: CL_SUCCESS [{}]", list.join(", "))
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn matched(r: &Value) -> Vec<bool> {
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["matched"].as_bool().unwrap())
        .collect()
}

/// Checks a successful binary_query record: its action(s) and the sizes it reports.
fn check_query(r: &Value, action: &str, actions: &[&str], sizes: &[usize]) {
    assert_eq!(r["call"], "clGetProgramInfo", "{r}");
    assert_eq!(r["result"], 0, "{r}");
    assert_eq!(r["action"], action, "{r}");
    assert_eq!(r["actions"], json!(actions), "{r}");
    // README (trace schema): a forwarded CL_PROGRAM_BINARIES query reports no sizes, since
    // clshim does not ask the driver for sizes it was not asked for: the whole field is
    // null when every device was forwarded (`assert_query_sizes`), and a forwarded
    // device's entry is null when others were answered.
    if r["param"] == "CL_PROGRAM_BINARIES" && actions.contains(&"forward") && action != "forward" {
        let got = r["sizes"]
            .as_array()
            .unwrap_or_else(|| panic!("sizes: {r}"));
        assert_eq!(got.len(), sizes.len(), "{r}");
        for (i, (g, want)) in got.iter().zip(sizes).enumerate() {
            let want = if actions[i] == "forward" {
                Value::Null
            } else {
                json!(want)
            };
            assert_eq!(*g, want, "device {i} ({}): {r}", actions[i]);
        }
        return;
    }
    assert_query_sizes(r, &json!(sizes));
}

// ---- 1. the three policies on real pocl ------------------------------------------------------

/// basic.c under every policy: the kernel's results never change; the sizes the program
/// sees and the records follow the policy.
#[test]
fn pocl_basic_under_every_policy() {
    let bin = build_c("basic", &[]);
    let base = plain(Driver::Pocl, &bin, &[], &[]);
    base.ok().has_line("binary_sizes: nonzero");
    let square = base.line("square:");
    assert_eq!(square, "square: 7 8 11 16 23 32 43 56 sum=196");
    let src = basic_source("7");
    let container = src.len() + CLSHIM_OVERHEAD;
    for p in ["pass", "suppress", "substitute"] {
        let r = shimmed(Driver::Pocl, &bin, &[], &[policy(p)]);
        r.ok()
            .has_line(&square)
            .has_line("binary_sizes size-only: 1 device(s)");
        assert_eq!(r.one("process")["policy"], p);
        let build = r.one("build");
        assert_eq!(build["source"]["hash"], fnv1a64(src.as_bytes()));
        let sizes = r.queries("CL_PROGRAM_BINARY_SIZES");
        let bins = r.queries("CL_PROGRAM_BINARIES");
        assert_eq!((sizes.len(), bins.len()), (1, 1), "{:#?}", r.records);
        for q in sizes.iter().chain(&bins) {
            assert_eq!(q["program"], build["program"], "{q}");
            assert_eq!(matched(q), [true], "pocl's CPU device matches: {q}");
        }
        match p {
            "pass" => {
                r.has_line("binary_sizes: nonzero");
                let n = sizes[0]["sizes"][0].as_u64().unwrap() as usize;
                assert!(n > 0 && n != container, "a poclbinary: {}", sizes[0]);
                check_query(sizes[0], "forward", &["forward"], &[n]);
                check_query(bins[0], "forward", &["forward"], &[n]);
            }
            "suppress" => {
                r.has_line("binary_sizes: zero")
                    .has_line("binaries: read zero");
                check_query(sizes[0], "suppress", &["suppress"], &[0]);
                check_query(bins[0], "suppress", &["suppress"], &[0]);
            }
            _ => {
                r.has_line("binary_sizes: nonzero");
                check_query(sizes[0], "substitute", &["substitute"], &[container]);
                check_query(bins[0], "substitute", &["substitute"], &[container]);
            }
        }
    }
}

/// binary_roundtrip.c (build, read the binary back, load it, build, run) under every
/// policy, in one process: pass and substitute give the same output as no shim; suppress
/// gives a zero-length binary, which pocl refuses to load (an error, never a crash),
/// so an application falls back to its source.
#[test]
fn pocl_binary_roundtrip_under_every_policy() {
    let bin = build_c("binary_roundtrip", &[]);
    let base = plain(Driver::Pocl, &bin, &[], &[]);
    base.ok()
        .has_line(&format!("source: {CUBE}"))
        .has_line(&format!("binary: {CUBE}"));
    let src = cube_source("2");
    let h = fnv1a64(src.as_bytes());
    for p in ["pass", "substitute"] {
        let r = shimmed(Driver::Pocl, &bin, &[], &[policy(p)]);
        r.ok();
        assert_eq!(
            r.stdout(),
            base.stdout(),
            "{p}: the shim changed the output"
        );
        let load = r.one("binary_load");
        let builds = r.events("build");
        assert_eq!(builds.len(), 2, "{:#?}", r.records);
        assert_eq!(builds[0]["source"]["origin"], "source");
        assert_eq!(builds[0]["source"]["hash"], h);
        assert_eq!(builds[1]["program"], load["program"]);
        assert_eq!(builds[1]["kernels"], json!(["cube"]));
        let q = r.queries("CL_PROGRAM_BINARY_SIZES");
        assert_eq!(
            load["lengths"], q[0]["sizes"],
            "the binary read back was loaded"
        );
        if p == "pass" {
            assert_eq!(load["action"], "forward");
            assert_eq!(builds[1]["source"]["origin"], "binary");
        } else {
            assert_eq!(load["action"], "substitute", "{load}");
            assert_eq!(load["lengths"], json!([src.len() + CLSHIM_OVERHEAD]));
            assert_eq!(builds[1]["source"]["origin"], "clshim-binary");
            assert_eq!(builds[1]["source"]["hash"], h, "the same source came back");
            assert_eq!(load["source"]["hash"], h, "{load}");
        }
    }
    let r = shimmed(Driver::Pocl, &bin, &[], &[policy("suppress")]);
    assert_eq!(r.out.status.code(), Some(1), "an error exit, not a crash");
    r.has_line(&format!("source: {CUBE}"))
        .has_line("binary size: zero")
        .has_line("clCreateProgramWithBinary: CL_INVALID_VALUE (-30)");
    let load = r.one("binary_load");
    assert_eq!(load["action"], "forward", "{load}");
    assert_eq!(load["result"], -30, "{load}");
    // A call refused for its arguments is recorded without reading its arrays.
    assert_eq!(load["lengths"], json!([]));
}

/// Programs that query no binaries (compile + link, an asynchronous build) run the same
/// under suppress and substitute.
#[test]
fn pocl_other_programs_unchanged_by_the_policies() {
    for name in ["compile_link", "async_build"] {
        let bin = build_c(name, &[]);
        let base = plain(Driver::Pocl, &bin, &[], &[]);
        base.ok();
        for p in ["suppress", "substitute"] {
            let r = shimmed(Driver::Pocl, &bin, &[], &[policy(p)]);
            r.ok();
            assert_eq!(r.stdout(), base.stdout(), "{name} under {p}");
        }
    }
}

/// The substitute round trip across processes, as a binary cache does it: one process
/// builds from source and saves the binary it is given, the next loads it, builds and
/// runs the kernel. The saved file is a clshim binary carrying exactly the source.
#[test]
fn pocl_substitute_round_trip_across_processes() {
    let bin = build_c("binary_roundtrip", &[]);
    let d = scratch("policy-roundtrip");
    let file = d.path("cube.bin");
    let seed = "31";
    let src = cube_source(seed);
    let h = fnv1a64(src.as_bytes());
    let save = format!("--save={}", file.display());
    let load = format!("--load={}", file.display());
    let seed_arg = format!("--seed={seed}");
    let expect = "31 32 39 58 95 156 sum=411";

    let s = shimmed(
        Driver::Pocl,
        &bin,
        &[&save, &seed_arg],
        &[policy("substitute")],
    );
    s.ok().has_line(&format!("source: {expect}"));
    let bytes = read(&file);
    assert!(bytes.starts_with(CLSHIM_MAGIC), "{:?}", &bytes[..16]);
    let c = parse_clshim_binary(&bytes);
    assert_eq!((c.version, c.flags, c.checksum_ok), (1, 0, true), "{c:?}");
    assert_eq!(
        c.source,
        src.as_bytes(),
        "the clshim binary carries the source"
    );
    let q = s.queries("CL_PROGRAM_BINARY_SIZES");
    assert_eq!(q.len(), 1);
    check_query(q[0], "substitute", &["substitute"], &[bytes.len()]);
    let b = s.queries("CL_PROGRAM_BINARIES");
    check_query(b[0], "substitute", &["substitute"], &[bytes.len()]);
    assert_eq!(s.events("build")[0]["source"]["hash"], h);

    // A new process loads it, under every policy: loading does not depend on the policy.
    for p in ["substitute", "pass"] {
        let r = shimmed(Driver::Pocl, &bin, &[&load], &[policy(p)]);
        r.ok()
            .has_line("clCreateProgramWithBinary: CL_SUCCESS (0)")
            .has_line("binary_status: CL_SUCCESS (0)")
            .has_line("clBuildProgram from binary: CL_SUCCESS (0)")
            .has_line(&format!("binary: {expect}"));
        let l = r.one("binary_load");
        assert_eq!(l["action"], "substitute", "{l}");
        assert_eq!(l["result"], 0, "{l}");
        assert!(l["reason"].is_null(), "{l}");
        assert_eq!(l["lengths"], json!([bytes.len()]));
        assert_eq!(l["source"]["origin"], "clshim-binary", "{l}");
        assert_eq!(l["source"]["hash"], h, "{l}");
        let build = r.one("build");
        assert_eq!(build["program"], l["program"]);
        assert_eq!(build["result"], 0);
        assert_eq!(build["source"]["origin"], "clshim-binary", "{build}");
        assert_eq!(build["source"]["hash"], h, "the original program's source");
        assert_eq!(build["source"]["length"], src.len());
        assert_eq!(build["kernels"], json!(["cube"]));
    }
}

/// Without the shim, pocl 3.1 refuses a clshim binary with CL_INVALID_BINARY (-42) and
/// sets binary_status to it: an error the application handles, not a crash.
#[test]
fn pocl_without_the_shim_rejects_a_clshim_binary() {
    let bin = build_c("binary_roundtrip", &[]);
    let d = scratch("policy-noshim");
    let file = d.path("cube.bin");
    let save = format!("--save={}", file.display());
    shimmed(
        Driver::Pocl,
        &bin,
        &[&save, "--no-run"],
        &[policy("substitute")],
    )
    .ok();
    assert!(read(&file).starts_with(CLSHIM_MAGIC));
    let r = plain(
        Driver::Pocl,
        &bin,
        &[&format!("--load={}", file.display())],
        &[],
    );
    assert_eq!(
        r.out.status.code(),
        Some(1),
        "an error exit, not a crash: {}",
        r.stdout()
    );
    r.has_line("clCreateProgramWithBinary: CL_INVALID_BINARY (-42)")
        .has_line("binary_status: CL_INVALID_BINARY (-42)");
}

// ---- 2. timing --------------------------------------------------------------------------------

/// A substituted query asks pocl for nothing, so it takes next to no time; a forwarded one
/// (pass, cold kernel cache: pocl compiles its generic variant) is timed.
#[test]
fn pocl_query_timing() {
    let bin = build_c("basic", &[]);
    let d = scratch("policy-timing");
    let cache = d.arg("kcache");
    for p in ["pass", "substitute"] {
        let r = shimmed(
            Driver::Pocl,
            &bin,
            &["--seed=1234", "--no-run"],
            &[policy(p), ("POCL_CACHE_DIR", &cache)],
        );
        r.ok();
        let q = r.events("binary_query");
        assert_eq!(q.len(), 2, "{:#?}", r.records);
        for rec in q {
            let s = rec["seconds"].as_f64().unwrap();
            if p == "pass" {
                assert!(s > 0.0, "a forwarded query is timed: {rec}");
            } else {
                assert!(s < 0.05, "a substituted query is nearly free: {rec}");
            }
        }
    }
}

// ---- 3. the query contract --------------------------------------------------------------------

/// On pocl: a size-only query reports the size of what the value query returns, a buffer
/// one byte too small gets CL_INVALID_VALUE (as pocl itself answers), and the binary
/// the application reads has the size it was told, under every policy.
#[test]
fn pocl_query_contract() {
    let bin = fake_client();
    let d = scratch("policy-contract");
    let steps = |save: &str| {
        vec![
            "build".to_string(),
            "sizes-only".to_string(),
            "sizes-small".to_string(),
            "binaries-small".to_string(),
            "sizes".to_string(),
            "binaries".to_string(),
            format!("save:{}", d.arg(save)),
        ]
    };
    let base_steps = steps("plain");
    let base_args: Vec<&str> = base_steps.iter().map(String::as_str).collect();
    let base = plain(Driver::Pocl, &bin, &base_args, &[]);
    base.ok()
        .has_line("devices: 1")
        .has_line("sizes-only: CL_SUCCESS ret=8")
        .has_line("sizes-small: CL_INVALID_VALUE")
        .has_line("binaries-small: CL_INVALID_VALUE");
    let src = fake_source("1");
    for p in ["pass", "suppress", "substitute"] {
        let st = steps(p);
        let args: Vec<&str> = st.iter().map(String::as_str).collect();
        let r = shimmed(Driver::Pocl, &bin, &args, &[policy(p)]);
        r.ok()
            .has_line("sizes-only: CL_SUCCESS ret=8")
            .has_line("sizes-small: CL_INVALID_VALUE")
            .has_line("binaries-small: CL_INVALID_VALUE");
        let saved = read(&d.path(&format!("{p}.0")));
        r.has_line(&sizes_line(&[saved.len()]));
        let h = (!saved.is_empty()).then(|| fnv1a64_u64(&saved));
        r.has_line(&binaries_line("binaries", &[h]));
        match p {
            "pass" => assert_eq!(saved, read(&d.path("plain.0")), "forwarded byte for byte"),
            "suppress" => assert!(saved.is_empty()),
            _ => assert_eq!(parse_clshim_binary(&saved).source, src.as_bytes()),
        }
        // The too-small queries are recorded as failed, with no sizes.
        let action = if p == "pass" { "forward" } else { p };
        for param in ["CL_PROGRAM_BINARY_SIZES", "CL_PROGRAM_BINARIES"] {
            let q = r.queries(param);
            assert_eq!(q.len(), 2, "{p} {param}: {:#?}", r.records);
            assert_eq!(q[0]["result"], -30, "{}", q[0]);
            assert_eq!(q[0]["result_name"], "CL_INVALID_VALUE", "{}", q[0]);
            assert!(q[0]["sizes"].is_null(), "{}", q[0]);
            check_query(q[1], action, &[action], &[saved.len()]);
        }
    }
}

/// A NULL entry in the CL_PROGRAM_BINARIES array is skipped. On pocl's single device
/// under suppress and substitute (clshim answers alone; pocl 3.1 itself crashes on a NULL
/// entry, so pass is left out here and covered on the fake ICD).
#[test]
fn pocl_null_entry_skipped_when_clshim_answers() {
    let bin = fake_client();
    for p in ["suppress", "substitute"] {
        let r = shimmed(
            Driver::Pocl,
            &bin,
            &["build", "sizes", "binaries-null0"],
            &[policy(p)],
        );
        r.ok().has_line(&binaries_line("binaries-null0", &[None]));
        let q = r.queries("CL_PROGRAM_BINARIES");
        assert_eq!(q[0]["result"], 0, "{}", q[0]);
        assert_eq!(q[0]["action"], p, "{}", q[0]);
    }
}

// ---- 4. several devices on the fake ICD ------------------------------------------------------

const ALL: (&str, &str) = ("CLSHIM_DEVICES", "all");
const TWO: (&str, &str) = ("FAKE_ICD_DEVICES", "2");
const FAKE_BIN: usize = 119; // "FAKEBIN1 <d> 104\n" + the 104 bytes of fake_source("1")

/// Value queries of binaries that reached the fake driver.
fn binary_value_queries(r: &Ran) -> Vec<&String> {
    r.driver_calls
        .iter()
        .filter(|l| l.contains("CL_PROGRAM_BINAR"))
        .collect()
}

/// Both devices selected (`CLSHIM_DEVICES=all`): both get clshim binaries, each made for
/// its device; the driver is never asked for a binary; a NULL entry is skipped; the
/// binaries load back as a program built from the source, whose kernels are there.
#[test]
fn fake_two_devices_both_substituted() {
    let bin = fake_client();
    let d = scratch("policy-two");
    let save = format!("save:{}", d.arg("b"));
    let steps = [
        "build",
        "sizes-only",
        "sizes",
        "binaries-null0",
        "binaries",
        &save,
        "load",
        "build",
        "kernels",
        "sizes",
        "binaries",
    ];
    let r = shimmed(
        Driver::Fake,
        &bin,
        &steps,
        &[TWO, ALL, policy("substitute")],
    );
    r.ok();
    let src = fake_source("1");
    let b0 = read(&d.path("b.0"));
    let b1 = read(&d.path("b.1"));
    let (c0, c1) = (parse_clshim_binary(&b0), parse_clshim_binary(&b1));
    for c in [&c0, &c1] {
        assert_eq!(c.source, src.as_bytes());
        assert!(c.checksum_ok && c.version == 1, "{c:?}");
    }
    assert_ne!(
        c0.fingerprint, c1.fingerprint,
        "devices with different names"
    );
    let n = src.len() + CLSHIM_OVERHEAD;
    let (h0, h1) = (fnv1a64_u64(&b0), fnv1a64_u64(&b1));
    r.has_line("sizes-only: CL_SUCCESS ret=16")
        .has_line(&sizes_line(&[n, n]))
        .has_line(&binaries_line("binaries-null0", &[None, Some(h1)]))
        .has_line(&binaries_line("binaries", &[Some(h0), Some(h1)]))
        .has_line("load: CL_SUCCESS status=[CL_SUCCESS, CL_SUCCESS]")
        .has_line("kernels: CL_SUCCESS fake_a;fake_b");
    assert!(
        binary_value_queries(&r).is_empty(),
        "the driver was asked for binaries: {:?}",
        r.driver_calls
    );
    // The load became a source program. The driver was asked first (its argument checks
    // come before clshim's) and refused the clshim binaries as it would without clshim.
    let loads: Vec<_> = r
        .driver_calls
        .iter()
        .filter(|l| l.contains("WithBinary"))
        .collect();
    assert_eq!(
        loads,
        ["clCreateProgramWithBinary -42"],
        "{:?}",
        r.driver_calls
    );
    for q in r.events("binary_query") {
        check_query(q, "substitute", &["substitute", "substitute"], &[n, n]);
        assert_eq!(matched(q), [true, true]);
    }
    let l = r.one("binary_load");
    assert_eq!(l["action"], "substitute", "{l}");
    assert_eq!(l["lengths"], json!([n, n]));
    let builds = r.events("build");
    assert_eq!(builds.len(), 2);
    assert_eq!(builds[1]["program"], l["program"]);
    assert_eq!(builds[1]["source"]["origin"], "clshim-binary");
    assert_eq!(builds[1]["source"]["hash"], fnv1a64(src.as_bytes()));
    assert_eq!(builds[1]["kernels"], json!(["fake_a", "fake_b"]));
}

/// Both devices suppressed: sizes 0, nothing written, the driver never asked.
#[test]
fn fake_two_devices_both_suppressed() {
    let bin = fake_client();
    let steps = ["build", "sizes", "binaries", "load"];
    let r = shimmed(Driver::Fake, &bin, &steps, &[TWO, ALL, policy("suppress")]);
    r.ok()
        .has_line(&sizes_line(&[0, 0]))
        .has_line(&binaries_line("binaries", &[None, None]));
    assert!(binary_value_queries(&r).is_empty(), "{:?}", r.driver_calls);
    for q in r.events("binary_query") {
        check_query(q, "suppress", &["suppress", "suppress"], &[0, 0]);
    }
}

/// No device selected (the default `pocl-cpu` filter; the fake platform is not pocl), or
/// the `pass` policy: the application sees exactly what the driver answers, byte for
/// byte, and the driver receives exactly the calls it receives without the shim.
#[test]
fn fake_unselected_devices_forwarded_byte_for_byte() {
    let bin = fake_client();
    let steps = [
        "build",
        "sizes-only",
        "sizes-small",
        "sizes",
        "binaries-null0",
        "binaries",
        "load",
        "load-swap",
        "build",
        "sizes",
        "binaries",
    ];
    let base = plain(Driver::Fake, &bin, &steps, &[TWO]);
    base.ok()
        .has_line(&sizes_line(&[FAKE_BIN, FAKE_BIN]))
        .has_line("load-swap: CL_SUCCESS status=[CL_SUCCESS, CL_SUCCESS]");
    let cases: [&[(&str, &str)]; 4] = [
        &[TWO, policy("suppress")],
        &[TWO, policy("substitute")],
        &[TWO, ("CLSHIM_DEVICES", "pocl"), policy("substitute")],
        &[TWO, ALL, policy("pass")],
    ];
    for env in cases {
        let r = shimmed(Driver::Fake, &bin, &steps, env);
        r.ok();
        assert_eq!(
            r.stdout(),
            base.stdout(),
            "{env:?}: the app saw a difference"
        );
        assert_eq!(
            r.driver_calls, base.driver_calls,
            "{env:?}: the driver saw a difference"
        );
        let all = env.contains(&ALL);
        for q in r.events("binary_query") {
            if q["result"] == 0 {
                check_query(q, "forward", &["forward", "forward"], &[FAKE_BIN, FAKE_BIN]);
            }
            assert_eq!(matched(q), [all, all], "{env:?}: {q}");
        }
        for l in r.events("binary_load") {
            assert_eq!(l["action"], "forward", "{l}");
        }
    }
}

const AS_POCL: (&str, &str) = ("FAKE_ICD_PLATFORM_NAME", POCL_PLATFORM);
const GPU1: (&str, &str) = ("FAKE_ICD_GPU_DEVICE", "1");

/// One device selected, one not (the fake platform named like pocl's, device 0 a CPU,
/// device 1 a GPU; default `pocl-cpu` filter): decided device by device. Device 0 gets
/// clshim's answer, device 1 the driver's own binary, byte for byte.
#[test]
fn fake_mixed_devices_decided_per_device() {
    let bin = fake_client();
    let d = scratch("policy-mixed");
    let steps = |name: &str| {
        [
            "build".to_string(),
            "sizes".to_string(),
            "binaries-null0".to_string(),
            "binaries".to_string(),
            format!("save:{}", d.arg(name)),
        ]
    };
    let env = [TWO, AS_POCL, GPU1];
    let st = steps("plain");
    let args: Vec<&str> = st.iter().map(String::as_str).collect();
    let base = plain(Driver::Fake, &bin, &args, &env);
    base.ok();
    let native1 = read(&d.path("plain.1"));
    assert_eq!(native1.len(), FAKE_BIN);
    let n = fake_source("1").len() + CLSHIM_OVERHEAD;
    for p in ["substitute", "suppress"] {
        let st = steps(p);
        let args: Vec<&str> = st.iter().map(String::as_str).collect();
        let mut e = env.to_vec();
        e.push(policy(p));
        let r = shimmed(Driver::Fake, &bin, &args, &e);
        r.ok();
        let b0 = read(&d.path(&format!("{p}.0")));
        let b1 = read(&d.path(&format!("{p}.1")));
        assert_eq!(b1, native1, "{p}: device 1 gets the driver's own binary");
        let size0 = if p == "suppress" {
            assert!(b0.is_empty());
            0
        } else {
            assert_eq!(parse_clshim_binary(&b0).source, fake_source("1").as_bytes());
            n
        };
        let h0 = (!b0.is_empty()).then(|| fnv1a64_u64(&b0));
        let h1 = Some(fnv1a64_u64(&native1));
        r.has_line(&sizes_line(&[size0, FAKE_BIN]))
            .has_line(&binaries_line("binaries-null0", &[None, h1]))
            .has_line(&binaries_line("binaries", &[h0, h1]));
        for q in r.events("binary_query") {
            check_query(q, "mixed", &[p, "forward"], &[size0, FAKE_BIN]);
            assert_eq!(matched(q), [true, false], "{q}");
            let types: Vec<&Value> = q["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| &d["type"])
                .collect();
            assert_eq!(types, [&json!("CPU"), &json!("GPU")]);
        }
        // The driver was asked, for device 1's sake, at each value query.
        let asked = |param: &str| {
            binary_value_queries(&r)
                .iter()
                .filter(|l| l.contains(param))
                .count()
        };
        assert!(asked("BINARY_SIZES") >= 1, "{:?}", r.driver_calls);
        assert_eq!(asked("CL_PROGRAM_BINARIES)"), 2, "{:?}", r.driver_calls);
    }
}

/// On a mixed program the application passes a buffer for every device, so the driver must
/// never see a NULL entry that clshim put there: pocl 3.1 does not skip NULL entries of
/// CL_PROGRAM_BINARIES, it crashes on them (measured: SIGSEGV with POCL_DEVICES="pthread
/// pthread" and a NULL first entry). The fake driver emulates such a driver with an error.
#[test]
fn fake_mixed_binaries_query_never_hands_the_driver_a_null_entry() {
    let bin = fake_client();
    let steps = ["build", "sizes", "binaries"];
    let env = [TWO, AS_POCL, GPU1, ("FAKE_ICD_NULL_BINARY_FAILS", "1")];
    let base = plain(
        Driver::Fake,
        &bin,
        &["build", "sizes", "binaries-null0"],
        &env,
    );
    base.ok();
    base.line("binaries-null0: CL_INVALID_VALUE ["); // the emulation works
    let mut e = env.to_vec();
    e.push(policy("substitute"));
    let r = shimmed(Driver::Fake, &bin, &steps, &e);
    r.ok();
    let n = fake_source("1").len() + CLSHIM_OVERHEAD;
    r.has_line(&sizes_line(&[n, FAKE_BIN]));
    let q = r.queries("CL_PROGRAM_BINARIES");
    assert_eq!(q[0]["action"], "mixed", "{}", q[0]);
    assert_eq!(q[0]["result"], 0, "the driver got a NULL entry: {}", q[0]);
    assert!(
        r.stdout().contains("binaries: CL_SUCCESS ["),
        "{}",
        r.stdout()
    );
}

/// A mixed set of binaries (a clshim binary for device 0, the driver's for device 1) is
/// what `substitute` hands out on a mixed program. Loading it back: clshim rejects it,
/// naming the native binary; the application falls back to its source. (This pins the
/// current behaviour; see the report: a program could instead be made from the source.)
#[test]
fn fake_mixed_binaries_load_back() {
    let bin = fake_client();
    let steps = ["build", "sizes", "binaries", "load", "build", "kernels"];
    let r = shimmed(
        Driver::Fake,
        &bin,
        &steps,
        &[TWO, AS_POCL, GPU1, policy("substitute")],
    );
    // binary_status is the driver's own: it refused the clshim binary and took the native.
    r.ok()
        .has_line("load: CL_INVALID_BINARY status=[CL_INVALID_BINARY, CL_SUCCESS]")
        .has_line("kernels: CL_SUCCESS fake_a;fake_b");
    let l = r.one("binary_load");
    assert_eq!(l["action"], "reject", "{l}");
    assert_eq!(l["result"], -42, "{l}");
    assert!(l["program"].is_null(), "{l}");
    let reason = l["reason"].as_str().unwrap();
    assert!(
        reason.contains("device 1") && reason.contains("native"),
        "{l}"
    );
}

/// A clshim binary made for one device is refused for another (fingerprint): the two
/// fake devices have different names, and the binaries are loaded in swapped order.
#[test]
fn fake_binary_for_another_device_rejected() {
    let bin = fake_client();
    let steps = [
        "build",
        "sizes",
        "binaries",
        "load-swap",
        "build",
        "kernels",
        "load",
        "kernels",
    ];
    let r = shimmed(
        Driver::Fake,
        &bin,
        &steps,
        &[TWO, ALL, policy("substitute")],
    );
    r.ok()
        .has_line("load-swap: CL_INVALID_BINARY status=[CL_INVALID_BINARY, CL_INVALID_BINARY]")
        .has_line("load: CL_SUCCESS status=[CL_SUCCESS, CL_SUCCESS]");
    let loads = r.events("binary_load");
    assert_eq!(loads.len(), 2, "{:#?}", r.records);
    let l = loads[0];
    assert_eq!(l["action"], "reject", "{l}");
    assert_eq!(l["result"], -42);
    assert!(l["program"].is_null());
    let reason = l["reason"].as_str().unwrap();
    assert!(
        reason.contains("device 0") && reason.contains("another platform, device or driver"),
        "{l}"
    );
    assert_eq!(loads[1]["action"], "substitute");
}

/// A clshim binary loaded for one device of a two-device context must not give a program
/// of both devices (OpenCL: a program made from binaries is associated with the devices
/// in device_list; a driver's binary gives a one-device program). clshim can only make a
/// program of every device of the context, so it refuses the binary (README: "for only
/// some of the context's devices"): CL_INVALID_BINARY, recorded as `reject` with the
/// reason, and the application goes on with its source program.
#[test]
fn fake_load_for_one_device_of_two() {
    let bin = fake_client();
    let steps = [
        "build",
        "sizes",
        "binaries",
        "load-last",
        "num-devices",
        "build",
        "kernels",
    ];
    let base = plain(Driver::Fake, &bin, &steps, &[TWO]);
    base.ok()
        .has_line("load-last: CL_SUCCESS status=[CL_SUCCESS]")
        .has_line("num-devices: CL_SUCCESS 1");
    let r = shimmed(
        Driver::Fake,
        &bin,
        &steps,
        &[TWO, ALL, policy("substitute")],
    );
    r.ok().has_line("kernels: CL_SUCCESS fake_a;fake_b");
    let l = r.one("binary_load");
    assert_eq!(l["lengths"].as_array().unwrap().len(), 1, "{l}");
    assert_eq!(l["action"], "reject", "{l}");
    r.has_line("load-last: CL_INVALID_BINARY status=[CL_INVALID_BINARY]");
    assert_eq!(l["result"], -42, "{l}");
    assert_eq!(l["result_name"], "CL_INVALID_BINARY", "{l}");
    assert_eq!(
        l["reason"],
        "device 0: given for 1 of the context's 2 devices; clshim can only make a program \
         for all of them",
        "{l}"
    );
}

// ---- 5. bad clshim binaries on real pocl -----------------------------------------------------

/// Truncated, corrupt, other-version, other-flags and other-device clshim binaries: each is
/// refused with CL_INVALID_BINARY and binary_status CL_INVALID_BINARY, recorded as a
/// `reject` with its reason, and the application's fallback (build from source) works.
#[test]
fn pocl_bad_clshim_binaries_rejected() {
    let bin = fake_client();
    let d = scratch("policy-bad");
    let good_file = format!("save:{}", d.arg("good"));
    shimmed(
        Driver::Pocl,
        &bin,
        &["build", "sizes", "binaries", &good_file],
        &[policy("substitute")],
    )
    .ok();
    let good = read(&d.path("good.0"));
    assert!(parse_clshim_binary(&good).checksum_ok);
    let len = good.len();
    let patched = |at: usize, bytes: &[u8]| {
        let mut b = good.clone();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };
    let mut flipped = good.clone();
    flipped[32 + 10] ^= 0x01; // one byte of the source
    let mut flipped_sum = good.clone();
    flipped_sum[len - 3] ^= 0x80; // one byte of the checksum
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated to 12",
            good[..12].to_vec(),
            "truncated (12 bytes)",
        ),
        (
            "truncated to 39",
            good[..39].to_vec(),
            "truncated (39 bytes)",
        ),
        (
            "truncated by 1",
            good[..len - 1].to_vec(),
            "declared source length",
        ),
        (
            "checksum cut off",
            good[..len - 8].to_vec(),
            "declared source length",
        ),
        ("flipped source byte", flipped, "checksum mismatch"),
        ("flipped checksum byte", flipped_sum, "checksum mismatch"),
        (
            "version 2",
            reseal_clshim_binary(patched(8, &2u32.to_le_bytes())),
            "version 2",
        ),
        (
            "flags 1",
            reseal_clshim_binary(patched(12, &1u32.to_le_bytes())),
            "unknown flags",
        ),
        (
            "other fingerprint",
            reseal_clshim_binary(patched(16, &0x0123_4567_89ab_cdefu64.to_le_bytes())),
            "another platform, device or driver",
        ),
        (
            "huge declared length",
            reseal_clshim_binary(patched(24, &u64::MAX.to_le_bytes())),
            "exceeds the limit",
        ),
    ];
    for (i, (what, bytes, reason)) in cases.iter().enumerate() {
        std::fs::write(d.path(&format!("bad{i}.0")), bytes).unwrap();
        let read_arg = format!("read:{}", d.arg(&format!("bad{i}")));
        let r = shimmed(
            Driver::Pocl,
            &bin,
            &[&read_arg, "load", "build", "kernels"],
            &[policy("substitute")],
        );
        r.ok()
            .has_line("load: CL_INVALID_BINARY status=[CL_INVALID_BINARY]")
            .has_line("build: CL_SUCCESS")
            .has_line("kernels: CL_SUCCESS fake_a;fake_b");
        let l = r.one("binary_load");
        assert_eq!(l["action"], "reject", "{what}: {l}");
        assert_eq!(l["result"], -42, "{what}: {l}");
        assert_eq!(l["result_name"], "CL_INVALID_BINARY", "{what}: {l}");
        assert!(l["program"].is_null(), "{what}: {l}");
        assert_eq!(l["lengths"], json!([bytes.len()]), "{what}: {l}");
        let got = l["reason"].as_str().unwrap_or_default();
        assert!(
            got.starts_with("device 0: ") && got.contains(reason),
            "{what}: reason {got:?} should name {reason:?}"
        );
        // The fallback build is of the source program, recorded as such.
        assert_eq!(r.one("build")["source"]["origin"], "source", "{what}");
    }
    // The untouched binary still loads (the cases above fail for their damage alone).
    std::fs::write(d.path("again.0"), &good).unwrap();
    let read_arg = format!("read:{}", d.arg("again"));
    shimmed(
        Driver::Pocl,
        &bin,
        &[&read_arg, "load", "build", "kernels"],
        &[policy("substitute")],
    )
    .ok()
    .has_line("load: CL_SUCCESS status=[CL_SUCCESS]")
    .has_line("kernels: CL_SUCCESS fake_a;fake_b");
}

// ---- 6. programs from IL or from a driver binary ---------------------------------------------

/// Under substitute, a program made from IL has no source to carry: its queries go to the
/// driver (fake ICD, both devices selected), exactly as without the shim.
#[test]
fn fake_il_program_forwarded_under_substitute() {
    let bin = fake_client();
    let steps = ["il", "build", "sizes", "binaries"];
    let base = plain(Driver::Fake, &bin, &steps, &[TWO]);
    base.ok();
    let r = shimmed(
        Driver::Fake,
        &bin,
        &steps,
        &[TWO, ALL, policy("substitute")],
    );
    r.ok();
    assert_eq!(r.stdout(), base.stdout());
    assert_eq!(r.driver_calls, base.driver_calls);
    assert_eq!(r.one("build")["source"]["origin"], "il");
    let q = r.events("binary_query");
    assert_eq!(q.len(), 2, "{:#?}", r.records);
    for rec in q {
        assert_eq!(rec["action"], "forward", "{rec}");
        assert_eq!(rec["actions"], json!(["forward", "forward"]), "{rec}");
        assert_eq!(matched(rec), [true, true]);
    }
}

/// Under substitute, a program made from a driver binary (pocl's own, saved by a run
/// without the shim) is answered by pocl: the same binary comes back, byte for byte.
#[test]
fn pocl_binary_program_forwarded_under_substitute() {
    let bin = fake_client();
    let d = scratch("policy-native");
    let save = format!("save:{}", d.arg("native"));
    plain(
        Driver::Pocl,
        &bin,
        &["build", "sizes", "binaries", &save],
        &[],
    )
    .ok();
    let native = read(&d.path("native.0"));
    assert!(!native.is_empty() && !native.starts_with(CLSHIM_MAGIC));
    let read_arg = format!("read:{}", d.arg("native"));
    let again = format!("save:{}", d.arg("again"));
    let r = shimmed(
        Driver::Pocl,
        &bin,
        &[&read_arg, "load", "build", "sizes", "binaries", &again],
        &[policy("substitute")],
    );
    r.ok()
        .has_line("load: CL_SUCCESS status=[CL_SUCCESS]")
        .has_line(&sizes_line(&[native.len()]));
    assert_eq!(read(&d.path("again.0")), native, "forwarded byte for byte");
    let l = r.one("binary_load");
    assert_eq!(l["action"], "forward", "{l}");
    assert_eq!(l["source"]["origin"], "binary", "{l}");
    for q in r.events("binary_query") {
        check_query(q, "forward", &["forward"], &[native.len()]);
        assert_eq!(matched(q), [true], "{q}");
    }
}
