//! Loading binaries back under the binary policies: bad clshim binaries (truncated,
//! corrupt, another version, flags or device) rejected on real pocl with the fallback to
//! source working, and programs made from IL or from a driver's own binary forwarded.

use crate::common;

use common::policy::*;
use common::*;
use serde_json::json;

// ---- bad clshim binaries on real pocl

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
            "version 4",
            reseal_clshim_binary(patched(8, &4u32.to_le_bytes())),
            "version 4",
        ),
        // Parts that do not match the header or each other, resealed so that the checksum
        // holds and the recipe's own checks must catch them.
        (
            "options length beyond the body",
            reseal_clshim_binary(patched(44, &0xffffu32.to_le_bytes())),
            "cut short",
        ),
        (
            "text length one short",
            reseal_clshim_binary(patched(48, &((len - 72 - 1) as u64).to_le_bytes())),
            "",
        ),
        (
            "unknown recipe kind",
            reseal_clshim_binary(patched(36, &9u32.to_le_bytes())),
            "unknown recipe kind 9",
        ),
        (
            "a link kind over a source text",
            reseal_clshim_binary(patched(36, &4u32.to_le_bytes())),
            "breaks a rule",
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
    // A version-1 binary (source only, as earlier clshim versions wrote) still loads and
    // builds with the application's options.
    let c = parse_clshim_binary(&good);
    let mut v1 = CLSHIM_MAGIC.to_vec();
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&0u32.to_le_bytes());
    v1.extend_from_slice(&c.fingerprint.to_le_bytes());
    v1.extend_from_slice(&(c.source.len() as u64).to_le_bytes());
    v1.extend_from_slice(&c.source);
    v1.extend_from_slice(&[0; 8]);
    std::fs::write(d.path("v1.0"), reseal_clshim_binary(v1)).unwrap();
    let read_arg = format!("read:{}", d.arg("v1"));
    let r = shimmed(
        Driver::Pocl,
        &bin,
        &[&read_arg, "load", "build", "kernels"],
        &[policy("substitute")],
    );
    r.ok()
        .has_line("load: CL_SUCCESS status=[CL_SUCCESS]")
        .has_line("kernels: CL_SUCCESS fake_a;fake_b");
    assert_eq!(r.one("binary_load")["action"], "substitute");
    assert!(r.one("build").get("options_replaced").is_none());
}

// ---- programs from IL or from a driver binary

/// Under substitute, a program made from IL and built gets a clshim binary carrying its IL
/// and build options (fake ICD, both devices selected); the program itself runs as
/// without the shim.
#[test]
fn fake_il_program_substituted_with_its_il() {
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
    assert_eq!(r.one("build")["source"]["origin"], "il");
    let q = r.events("binary_query");
    assert_eq!(q.len(), 2, "{:#?}", r.records);
    for rec in q {
        assert_eq!(rec["action"], "substitute", "{rec}");
        assert_eq!(rec["actions"], json!(["substitute", "substitute"]), "{rec}");
        assert_eq!(matched(rec), [true, true]);
    }
    // The binaries carry the IL, and load back (next process) as a program made from
    // that IL again, built with the recorded options.
    let d = scratch("policy-il");
    let save = format!("save:{}", d.arg("il"));
    shimmed(
        Driver::Fake,
        &bin,
        &["il", "build", "sizes", "binaries", &save],
        &[TWO, ALL, policy("substitute")],
    )
    .ok();
    let b0 = read(&d.path("il.0"));
    assert!(
        contains_bytes(&b0, b"FAKE-IL-BYTES"),
        "the IL travels in the binary"
    );
    let read_arg = format!("read:{}", d.arg("il"));
    let r = shimmed(
        Driver::Fake,
        &bin,
        &[&read_arg, "load", "build"],
        &[TWO, ALL, policy("substitute")],
    );
    r.ok()
        .has_line("load: CL_SUCCESS status=[CL_SUCCESS, CL_SUCCESS]")
        .has_line("build: CL_SUCCESS");
    assert_eq!(r.one("binary_load")["action"], "substitute");
    assert!(
        r.driver_calls
            .iter()
            .any(|c| c.starts_with("clCreateProgramWithIL")),
        "{:?}",
        r.driver_calls
    );
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
