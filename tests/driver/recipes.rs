//! Recipes on real pocl: every kind of program (an executable built with options, a
//! compiled object with an embedded header, a library, a linked executable) saved as a
//! clshim binary under `substitute` and loaded back in the same process, as binary-caching
//! clients and the OpenCL CTS `test_compiler` (execute_after_serialize_reload_object,
//! program_binary_type) do. Each run prints every CL_PROGRAM_BINARY_TYPE it meets and its
//! kernel's results: they must equal a run without clshim, line for line. Damaged recipes
//! are refused as a whole with CL_INVALID_BINARY and a recorded reason.

use crate::common;

use common::policy::*;
use common::*;
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;

fn client() -> PathBuf {
    build_c("recipes", &[])
}

/// Runs `mode` without clshim and under substitute; both succeed with the same output,
/// and the reloaded program was recreated by clshim from its recipe.
fn round_trip(mode: &str, expect: &[&str]) -> Ran {
    let bin = client();
    let base = plain(Driver::Pocl, &bin, &[mode], &[]);
    base.ok();
    for line in expect {
        base.has_line(line);
    }
    let r = shimmed(Driver::Pocl, &bin, &[mode], &[policy("substitute")]);
    r.ok();
    assert_eq!(
        r.stdout(),
        base.stdout(),
        "{mode}: clshim changed the output"
    );
    let q = r.queries("CL_PROGRAM_BINARIES");
    assert_eq!(q.len(), 1, "{:#?}", r.records);
    assert_eq!(q[0]["action"], "substitute", "{}", q[0]);
    let load = r.one("binary_load");
    assert_eq!(load["action"], "substitute", "{load}");
    assert_eq!(load["result"], 0, "{load}");
    assert!(load["program"].is_u64(), "{load}");
    r
}

/// Built with -DVAL=7, reloaded, built with NULL options: the recorded options are used
/// (VAL stays 7, not the source's default 1), and the build record says so.
#[test]
fn options_round_trip() {
    let r = round_trip(
        "options",
        &[
            "built type=EXECUTABLE",
            "reloaded type=EXECUTABLE",
            "rebuilt type=EXECUTABLE",
            "val: 7 7 7 7 sum=28",
        ],
    );
    let builds = r.events("build");
    assert_eq!(builds.len(), 2, "{:#?}", r.records);
    assert!(builds[0].get("options_replaced").is_none(), "{}", builds[0]);
    assert_eq!(builds[1]["options"], "-DVAL=7", "{}", builds[1]);
    assert_eq!(
        builds[1]["options_replaced"],
        json!({"given": null, "used": "-DVAL=7"}),
        "{}",
        builds[1]
    );
    assert_eq!(builds[1]["source"]["origin"], "clshim-binary");
}

/// A rebuild the driver refuses (a kernel holds the program), given a callback, which
/// pocl calls even then: the program keeps the recipe of the build that made it, so its
/// binary makes it again with -DVAL=7, not the refused call's -DVAL=9.
#[test]
fn a_refused_rebuild_leaves_the_recipe_as_it_was() {
    round_trip(
        "refused",
        &[
            "rebuild while a kernel holds it: CL_INVALID_OPERATION",
            "val: 7 7 7 7 sum=28",
        ],
    );
}

/// A compiled object reloads as a compiled object and links (the CTS's
/// execute_after_serialize_reload_object and program_binary_type).
#[test]
fn compiled_object_round_trip() {
    round_trip(
        "object",
        &[
            "compiled type=COMPILED_OBJECT",
            "reloaded type=COMPILED_OBJECT",
            "linked type=EXECUTABLE",
            "linked: 5 15 25 35 sum=80",
        ],
    );
}

#[test]
fn library_round_trip() {
    round_trip(
        "library",
        &[
            "library type=LIBRARY",
            "reloaded type=LIBRARY",
            "linked type=EXECUTABLE",
            "linked: 5 15 25 35 sum=80",
        ],
    );
}

/// A linked executable is compiled and linked again at load; the application's build of
/// it (which pocl cannot repeat on a linked program) is answered by clshim.
#[test]
fn linked_executable_round_trip() {
    let r = round_trip(
        "linked",
        &[
            "linked type=EXECUTABLE",
            "reloaded type=EXECUTABLE",
            "rebuilt type=EXECUTABLE",
            "linked: 5 15 25 35 sum=80",
        ],
    );
    let load = r.one("binary_load");
    let builds = r.events("build");
    assert_eq!(builds.len(), 1, "{:#?}", r.records);
    assert_eq!(builds[0]["program"], load["program"]);
    assert_eq!(builds[0]["result"], 0);
    assert_eq!(builds[0]["kernels"], json!(["linked"]));
}

/// The chain of the CTS's program_binary_type: an object reloaded, made a library, that
/// library reloaded and linked, the executable reloaded and built: every binary type and
/// the results as without clshim, and every binary a recipe (one load per reload).
#[test]
fn conformance_chain_round_trip() {
    let bin = client();
    let base = plain(Driver::Pocl, &bin, &["chain"], &[]);
    base.ok()
        .has_line("reloaded object type=COMPILED_OBJECT")
        .has_line("reloaded library type=LIBRARY")
        .has_line("reloaded executable type=EXECUTABLE")
        .has_line("linked: 5 15 25 35 sum=80");
    let r = shimmed(Driver::Pocl, &bin, &["chain"], &[policy("substitute")]);
    r.ok();
    assert_eq!(r.stdout(), base.stdout());
    let loads = r.events("binary_load");
    assert_eq!(loads.len(), 3, "{:#?}", r.records);
    for l in loads {
        assert_eq!(l["action"], "substitute", "{l}");
    }
    for q in r.events("binary_query") {
        assert_eq!(q["action"], "substitute", "{q}");
    }
}

/// pocl 3.1 as packaged here reports no IL support: the IL path is skipped quietly, the
/// same with and without clshim (the IL recipe itself is tested on the fake driver, in
/// policy_load.rs).
#[test]
fn il_skipped_quietly_without_driver_support() {
    let bin = client();
    let base = plain(Driver::Pocl, &bin, &["il"], &[]);
    base.ok();
    let r = shimmed(Driver::Pocl, &bin, &["il"], &[policy("substitute")]);
    r.ok();
    assert_eq!(r.stdout(), base.stdout());
    if base.stdout().contains("il: unsupported") {
        assert!(r.events("binary_query").is_empty());
    }
}

/// One node of a version-2 recipe body (the layout cl-headers/clshim.h describes).
fn node(
    kind: u32,
    text: Option<&str>,
    options: &str,
    headers: &[(&str, &str)],
    inputs: &[Vec<u8>],
) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&(if text.is_some() { 1u32 } else { 0 }).to_le_bytes());
    b.extend_from_slice(&(options.len() as u32).to_le_bytes());
    b.extend_from_slice(options.as_bytes());
    let t = text.unwrap_or("");
    b.extend_from_slice(&(t.len() as u64).to_le_bytes());
    b.extend_from_slice(t.as_bytes());
    b.extend_from_slice(&(headers.len() as u32).to_le_bytes());
    for (n, s) in headers {
        b.extend_from_slice(&(n.len() as u32).to_le_bytes());
        b.extend_from_slice(n.as_bytes());
        b.extend_from_slice(&(s.len() as u64).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    b.extend_from_slice(&(inputs.len() as u32).to_le_bytes());
    for i in inputs {
        b.extend_from_slice(i);
    }
    b
}

/// A sealed version-2 clshim binary with `body` for the device with `fingerprint`.
fn sealed(body: &[u8], fingerprint: u64) -> Vec<u8> {
    let mut b = CLSHIM_MAGIC.to_vec();
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&fingerprint.to_le_bytes());
    b.extend_from_slice(&(body.len() as u64).to_le_bytes());
    b.extend_from_slice(body);
    b.extend_from_slice(&[0; 8]);
    reseal_clshim_binary(b)
}

/// Truncated, corrupt, wrong-device and mismatched-part recipes, and a recipe whose part
/// no longer compiles: each refused whole with CL_INVALID_BINARY, binary_status set, no
/// program, and a `reject` record naming why. The saved binaries parse with
/// cl-headers/clshim.h as their kind; the damaged ones do not.
#[test]
fn damaged_recipes_refused_whole() {
    let bin = client();
    let check = build_c("header_check", &[]);
    let d = scratch("recipes-bad");
    let mut saved = Vec::new();
    for (mode, kind) in [("object", 2), ("library", 3), ("linked", 4)] {
        let file = d.path(mode);
        let save = format!("--save={}", file.display());
        shimmed(Driver::Pocl, &bin, &[mode, &save], &[policy("substitute")]).ok();
        let bytes = read(&file);
        let parsed = Command::new(&check).arg(&file).output().unwrap();
        let text = stdout(&parsed);
        assert!(
            text.starts_with("clshim binary v3, ") && text.contains(&format!(", kind {kind}, ")),
            "{mode}: {text}"
        );
        saved.push(bytes);
    }
    let object = &saved[0];
    let linked = &saved[2];
    let fp = parse_clshim_binary(linked).fingerprint;
    let len = linked.len();
    let mut flipped = linked.clone();
    flipped[len / 2] ^= 0x04;
    let mut other_device = linked.clone();
    other_device[16..24].copy_from_slice(&(fp ^ 1).to_le_bytes());
    let exe = node(
        1,
        Some("kernel void k(global int *o) { o[0] = 1; }"),
        "",
        &[],
        &[],
    );
    let obj = |src: &str| node(2, Some(src), "", &[("h.h", "#define X 1\n")], &[]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated",
            linked[..len - 9].to_vec(),
            "declared source length",
        ),
        (
            "cut to its header",
            linked[..40].to_vec(),
            "declared source length",
        ),
        ("flipped byte", flipped, "checksum mismatch"),
        (
            "another device",
            reseal_clshim_binary(other_device),
            "another platform",
        ),
        (
            "an executable as a link input",
            sealed(&node(4, None, "", &[], std::slice::from_ref(&exe)), fp),
            "not linkable",
        ),
        (
            "a library kind without -create-library",
            sealed(
                &node(3, None, "", &[], &[obj("int f(void) { return X; }")]),
                fp,
            ),
            "library kind and options disagree",
        ),
        (
            "a link without inputs",
            sealed(&node(4, None, "", &[], &[]), fp),
            "without inputs",
        ),
        (
            "a header without a name",
            sealed(&node(2, Some("int f(void);"), "", &[("", "x")], &[]), fp),
            "breaks a rule",
        ),
        (
            "a second input that no longer compiles",
            sealed(
                &node(
                    4,
                    None,
                    "",
                    &[],
                    &[
                        obj("#include \"h.h\"\nint f(void) { return X; }"),
                        obj("this is not C"),
                    ],
                ),
                fp,
            ),
            "compiling it again failed",
        ),
        (
            "an object recipe in a version-1 binary's place",
            {
                let mut v = object.clone();
                v[8..12].copy_from_slice(&1u32.to_le_bytes());
                reseal_clshim_binary(v)
            },
            "NUL byte",
        ),
    ];
    for (what, bytes, reason) in &cases {
        let file = d.path("bad");
        std::fs::write(&file, bytes).unwrap();
        let r = shimmed(
            Driver::Pocl,
            &bin,
            &["load", &file.to_string_lossy()],
            &[policy("substitute")],
        );
        r.ok()
            .has_line("load: CL_INVALID_BINARY status=CL_INVALID_BINARY program=no");
        let l = r.one("binary_load");
        assert_eq!(l["action"], "reject", "{what}: {l}");
        assert!(l["program"].is_null(), "{what}: {l}");
        let got = l["reason"].as_str().unwrap_or_default();
        assert!(
            got.starts_with("device 0: ") && got.contains(reason),
            "{what}: reason {got:?} should name {reason:?}"
        );
        let parsed = Command::new(&check).arg(&file).output().unwrap();
        if !what.contains("compiles") && !what.contains("another device") {
            assert_eq!(stdout(&parsed), "not a clshim binary\n", "{what}");
        }
    }
}

/// Every file below `dir` whose name starts with `prefix`.
fn files_named(dir: &std::path::Path, prefix: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            found.extend(files_named(&p, prefix));
        } else if e.file_name().to_string_lossy().starts_with(prefix) {
            found.push(p);
        }
    }
    found
}

/// A clshim binary is untrusted (anyone who can write the application's cache can hand
/// one over): header include names that would leave the driver's folder (pocl writes each
/// header at <its cache>/<temporary folder>/<name>), names and options longer than pocl
/// takes (a 2,000-byte name overflows its path buffer, twelve -g options or fifty
/// -cl-denorms-are-zero abort it, 800 bytes of link options overflow its 512-byte
/// buffer) are refused before the driver sees
/// them, in version 2 and 3 alike, with the reason recorded, and clshim.h's parser refuses
/// them too. pocl's cache and HOME are scratch folders: nothing is written outside them,
/// and no file named in a hostile recipe appears anywhere.
#[test]
fn hostile_names_and_options_never_reach_the_driver() {
    let bin = client();
    let check = build_c("header_check", &[]);
    let d = scratch("recipes-hostile");
    let home = d.path("home");
    let cache = home.join("cache").join("kc");
    std::fs::create_dir_all(&cache).unwrap();
    let (home_s, cache_s) = (s(&home).to_string(), s(&cache).to_string());
    let env = [
        policy("substitute"),
        ("HOME", home_s.as_str()),
        ("POCL_CACHE_DIR", cache_s.as_str()),
    ];
    let saved = d.path("object");
    let save = format!("--save={}", saved.display());
    shimmed(Driver::Pocl, &bin, &["object", &save], &env).ok();
    let fp = parse_clshim_binary(&read(&saved)).fingerprint;
    let obj = |name: &str, options: &str| {
        node(
            2,
            Some("int f(void) { return 1; }"),
            options,
            &[(name, "#define X 1\n")],
            &[],
        )
    };
    let v3 = |part: Vec<u8>| {
        let mut b = 1u32.to_le_bytes().to_vec();
        b.extend(part);
        let mut s = sealed(&b, fp);
        s[8..12].copy_from_slice(&3u32.to_le_bytes());
        reseal_clshim_binary(s)
    };
    let long = |n: usize| {
        (0..n)
            .map(|i| if i % 100 == 99 { '/' } else { 'e' })
            .collect::<String>()
            + "scaped.h"
    };
    let name_rule = "header include name";
    let debug = "-g ".repeat(12);
    let link_options = format!(
        "-create-library -enable-link-options {}",
        "-cl ".repeat(200)
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "a name two folders up",
            sealed(&obj("../../escaped-up.h", ""), fp),
            name_rule,
        ),
        (
            "a name one folder up",
            sealed(&obj("../escaped-cache.h", ""), fp),
            name_rule,
        ),
        (
            "a name up in version 3",
            v3(obj("sub/../../../escaped-v3.h", "")),
            name_rule,
        ),
        (
            "an absolute name",
            sealed(&obj(&format!("{}/escaped-abs.h", s(&home)), ""), fp),
            name_rule,
        ),
        (
            "an empty component",
            sealed(&obj("sub//escaped.h", ""), fp),
            name_rule,
        ),
        (
            "a control character",
            sealed(&obj("escaped\n.h", ""), fp),
            name_rule,
        ),
        (
            "a name of 256 bytes",
            sealed(&obj(&long(248), ""), fp),
            name_rule,
        ),
        (
            "a name of 2,000 bytes (overflows pocl)",
            sealed(&obj(&long(1992), ""), fp),
            name_rule,
        ),
        (
            "twelve -g options (abort pocl)",
            sealed(&obj("h.h", &debug), fp),
            "-g or -cl-denorms-are-zero options",
        ),
        (
            "fifty -cl-denorms-are-zero options (abort pocl)",
            sealed(&obj("h.h", &"-cl-denorms-are-zero ".repeat(50)), fp),
            "-cl-denorms-are-zero options",
        ),
        (
            "800 bytes of link options (overflow pocl)",
            sealed(&node(3, None, &link_options, &[], &[obj("h.h", "")]), fp),
            "options longer",
        ),
    ];
    for (what, bytes, reason) in &cases {
        let file = d.path("bad");
        std::fs::write(&file, bytes).unwrap();
        let r = shimmed(Driver::Pocl, &bin, &["load", s(&file)], &env);
        r.ok()
            .has_line("load: CL_INVALID_BINARY status=CL_INVALID_BINARY program=no");
        let l = r.one("binary_load");
        assert_eq!(l["action"], "reject", "{what}: {l}");
        let got = l["reason"].as_str().unwrap_or_default();
        assert!(
            got.starts_with("device 0: ") && got.contains(reason),
            "{what}: reason {got:?} should name {reason:?}"
        );
        let parsed = Command::new(&check).arg(&file).output().unwrap();
        assert_eq!(stdout(&parsed), "not a clshim binary\n", "{what}");
        assert_eq!(files_named(&d, "escaped"), Vec::<PathBuf>::new(), "{what}");
    }
}

/// Build options and include names are the application's bytes, whatever their encoding:
/// a Latin-1 `-I` folder and a Latin-1 header name come back from a clshim binary exactly,
/// so the reloaded programs build and run as without clshim.
#[test]
fn options_and_names_keep_their_bytes() {
    let bin = client();
    let d = scratch("recipes-bytes");
    let base = plain(Driver::Pocl, &bin, &["bytes", s(&d)], &[]);
    base.ok()
        .has_line("latin-1 -I: 3 3 3 3 sum=12")
        .has_line("latin-1 header: 5 15 25 35 sum=80");
    let r = shimmed(
        Driver::Pocl,
        &bin,
        &["bytes", s(&d)],
        &[policy("substitute")],
    );
    r.ok();
    assert_eq!(r.stdout(), base.stdout());
    let loads = r.events("binary_load");
    assert_eq!(loads.len(), 2, "{:#?}", r.records);
    for l in loads {
        assert_eq!(l["action"], "substitute", "{l}");
    }
}

/// Every program made again from a recipe answers its next binary query with a clshim
/// binary again: an executable reloaded and built, a linked executable reloaded and built
/// (the build clshim answers itself), what is linked from a reloaded object, and a
/// library reloaded and built (pocl 3.1 then has no kernels in it, so none is run).
#[test]
fn programs_made_again_keep_their_recipe() {
    let bin = client();
    let base = plain(Driver::Pocl, &bin, &["again"], &[]);
    base.ok()
        .has_line("relinked again type=EXECUTABLE")
        .has_line("linked again: 5 15 25 35 sum=80");
    let r = shimmed(Driver::Pocl, &bin, &["again"], &[policy("substitute")]);
    r.ok();
    assert_eq!(r.stdout(), base.stdout());
    let queries = r.queries("CL_PROGRAM_BINARIES");
    assert_eq!(queries.len(), 7, "{:#?}", r.records);
    for q in queries {
        assert_eq!(q["action"], "substitute", "{q}");
    }
    let loads = r.events("binary_load");
    assert_eq!(loads.len(), 6, "{:#?}", r.records);
    for l in loads {
        assert_eq!(l["action"], "substitute", "{l}");
    }
}

/// A library chain deeper than a clshim binary may nest: clshim writes no binary it would
/// refuse itself, so the query gets pocl's own binary, which reloads as without clshim.
#[test]
fn a_recipe_beyond_the_limits_gets_the_drivers_binary() {
    let bin = client();
    let base = plain(Driver::Pocl, &bin, &["deep", "8"], &[]);
    base.ok().has_line("deep: 5 15 25 35 sum=80");
    let r = shimmed(Driver::Pocl, &bin, &["deep", "8"], &[policy("substitute")]);
    r.ok();
    assert_eq!(r.stdout(), base.stdout());
    let q = r.queries("CL_PROGRAM_BINARIES");
    assert_eq!(q.len(), 1, "{:#?}", r.records);
    assert_eq!(q[0]["action"], "forward", "{}", q[0]);
    assert_eq!(r.one("binary_load")["action"], "forward");
}

/// Inputs shared by several links are written once: 4 objects, then 6 levels of 4
/// libraries each linking the 4 before, then an executable of the last 4. As a tree that
/// is 4^7 objects (refused on reload); as parts, 29 parts of a few kilobytes, and it
/// reloads. On the fake driver (the layout needs 25 links).
#[test]
fn shared_inputs_are_written_once() {
    let bin = client();
    let r = shimmed(
        Driver::Fake,
        &bin,
        &["shared", "4", "6"],
        &[ALL, policy("substitute")],
    );
    r.ok().has_line("shared: reloaded");
    let size: usize = r
        .line("shared: binary ")
        .trim_start_matches("shared: binary ")
        .trim_end_matches(" bytes")
        .parse()
        .unwrap();
    assert!(size < 8_000, "{size} bytes");
    assert_eq!(r.one("binary_load")["action"], "substitute");
}

/// pocl reads link options split at spaces only, so "-create-library" followed by a
/// vertical tab makes a library: the recipe says so too (kind 3), and the reloaded
/// program is a library that links as without clshim.
#[test]
fn a_library_is_what_the_driver_made() {
    let bin = client();
    let check = build_c("header_check", &[]);
    let d = scratch("recipes-vtab");
    let base = plain(Driver::Pocl, &bin, &["vtab"], &[]);
    base.ok()
        .has_line("library type=LIBRARY")
        .has_line("reloaded type=LIBRARY");
    let file = d.path("lib");
    let save = format!("--save={}", file.display());
    let r = shimmed(
        Driver::Pocl,
        &bin,
        &["vtab", &save],
        &[policy("substitute")],
    );
    r.ok();
    assert_eq!(r.stdout(), base.stdout());
    assert_eq!(r.one("binary_load")["action"], "substitute");
    let parsed = stdout(&Command::new(&check).arg(&file).output().unwrap());
    assert!(parsed.contains(", kind 3, "), "{parsed}");
}
