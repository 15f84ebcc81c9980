//! The binary policies with several devices (`CLSHIM_DEVICES`), on the fake driver
//! (tests/fake_icd/fake_icd.c): two devices, mixed device types and platforms decided per
//! device, and the exact calls that reach the driver.

use crate::common;

use common::policy::*;
use common::*;
use serde_json::{json, Value};

// ---- several devices on the fake ICD

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
        assert!(
            c.checksum_ok && c.version == 3 && c.options.as_deref() == Some(""),
            "{c:?}"
        );
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
/// program of every device of the context, so it refuses the binary
/// (docs/binary-policies.md: "for only some of the context's devices"): CL_INVALID_BINARY,
/// recorded as `reject` with the reason, and the application goes on with its source
/// program.
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
