//! clshim under the Khronos ICD loader (the `libOpenCL.so.1` of Intel's `intel-opencl-rt`
//! wheel, in `.venv/intel`, which `scripts/test` creates) with two real drivers in one
//! platform list, pocl and Intel's CPU runtime, and the layer protocol's edges:
//! - preload and layer modes record builds, binary queries and binary loads on both
//!   platforms, with results identical to a run without clshim;
//! - the loader initialises the layer through `clInitLayerWithProperties` (and
//!   `clInitLayer` when told to use legacy termination; Debian's ocl-icd 2.3.1 has only
//!   `clInitLayer`), as clshim's debug line records, and calls `clDeinitLayer` at unload;
//!   the exit summary and the trace are complete, also when the client `dlclose`s the
//!   loader;
//! - binary policies: under the default device filter Intel's binaries are byte-identical
//!   to a run without clshim; with `CLSHIM_DEVICES=all` the Intel device gets a clshim
//!   binary, which round-trips (create from binary, build, run, correct results);
//! - bad input: a property list clshim does not know is refused with one warning; after
//!   `clDeinitLayer` and `dlclose` of the layer, and with the loader's table unmapped, a
//!   late call through the layer's table neither crashes nor loses a record;
//! - a call that reaches clshim through the layer and again through its own symbol (as on
//!   macOS through Apple's wrapper ICD and the interposed framework) is recorded once.
//!
//! pyopencl's wheels bundle ocl-icd and load it privately, so they never use this loader;
//! an `.icd` naming the Khronos loader is skipped by that ocl-icd (a loader exports no
//! `clIcdGetPlatformIDsKHR`). Pointed through its own `OCL_ICD_VENDORS` at pocl and
//! Intel's runtime, pyopencl is checked here under preload mode on both platforms.
//!
//! When `.venv/intel` is missing (cargo test run without `scripts/test`), the tests that
//! need it say so on stderr and pass without checking anything (tests/common/needs.rs).

use crate::common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Plain,
    Preload,
    Layer,
}

/// Runs `program` under the Khronos loader (or the system's loader when `lib` is None)
/// with the shim in `mode`, tracing into dir/trace-<tag>; a private pocl kernel cache and
/// native store.
fn launch(
    program: &Path,
    args: &[&str],
    mode: Mode,
    dir: &Path,
    lib: Option<&Path>,
    tag: &str,
    env: &[(&str, &str)],
) -> (Output, PathBuf) {
    let trace = dir.join(format!("trace-{tag}"));
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("CLSHIM_")
            || k.starts_with("OCL_ICD_")
            || k == "LD_PRELOAD"
            || k == "OPENCL_LAYERS"
        {
            cmd.env_remove(&k);
        }
    }
    substitute_when_busy(&mut cmd);
    match lib {
        Some(l) => {
            cmd.env("LD_LIBRARY_PATH", l)
                .env("OCL_ICD_VENDORS", khronos_vendors(dir, l));
        }
        None => {
            cmd.env_remove("LD_LIBRARY_PATH")
                .env("OCL_ICD_VENDORS", "/etc/OpenCL/vendors");
        }
    }
    // `substitute` leaves its requests in the native store, and the warm service it starts
    // makes them there: not in the store of $HOME, where later runs would find them.
    cmd.env("POCL_CACHE_DIR", dir.join("kcache"))
        .env("CLSHIM_NATIVE_STORE", dir.join("store"));
    match mode {
        Mode::Plain => {}
        Mode::Preload => {
            cmd.env("LD_PRELOAD", shim_path());
        }
        Mode::Layer => {
            cmd.env("OPENCL_LAYERS", shim_path());
        }
    }
    if mode != Mode::Plain {
        cmd.env("CLSHIM_TRACE_DIR", &trace);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{} {args:?} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        program.display(),
        out.status,
        stdout(&out),
        stderr(&out)
    );
    (out, trace)
}

fn client() -> PathBuf {
    build_c("two_platforms", &[])
}

fn dlopen_client() -> PathBuf {
    build_c_custom(
        "two_platforms",
        "two_platforms_dlopen",
        &["-DUSE_DLOPEN", "-DCL_TARGET_OPENCL_VERSION=300", "-ldl"],
    )
}

/// Records of `event` whose (single) device is on the platform whose name contains `platform`.
fn on<'a>(recs: &'a [Value], event: &str, platform: &str) -> Vec<&'a Value> {
    events(recs, event)
        .into_iter()
        .filter(|r| {
            r["devices"]
                .as_array()
                .map(|d| {
                    d.iter()
                        .any(|d| d["platform"].as_str().unwrap_or("").contains(platform))
                })
                .unwrap_or(false)
        })
        .collect()
}

const POCL: &str = "Portable Computing Language";
const INTEL: &str = "Intel";

/// Both platforms were listed and every step of the client succeeded on each.
fn assert_both_ran(out: &Output, lib: &Path) {
    let s = stdout(out);
    let loader = s.lines().find(|l| l.starts_with("loader: ")).unwrap_or("");
    assert!(
        loader.ends_with("/.venv/intel/lib/libOpenCL.so.1")
            || loader.contains(&*lib.to_string_lossy()),
        "the client did not load the Khronos loader: {loader}\n{s}"
    );
    for label in ["pocl", "intel"] {
        for step in ["source: ok", "from binary: ok"] {
            assert!(
                s.contains(&format!("{label} {step}")),
                "{label} {step} missing:\n{s}"
            );
        }
    }
}

/// The records of one run of the client with the default policy: a build from source and
/// a build of the loaded binary, a forwarded binary query pair and a forwarded binary load
/// on each platform.
fn assert_complete_trace(recs: &[Value], mode: &str) {
    let procs = events(recs, "process");
    assert_eq!(procs.len(), 1, "{recs:#?}");
    assert_eq!(procs[0]["mode"], mode);
    for p in [POCL, INTEL] {
        let builds = on(recs, "build", p);
        assert_eq!(builds.len(), 2, "{p}: {builds:#?}");
        assert!(builds.iter().all(|b| b["result"] == 0), "{builds:#?}");
        let origins: Vec<&str> = builds
            .iter()
            .map(|b| b["source"]["origin"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(origins, ["source", "binary"], "{p}");
        assert_eq!(on(recs, "binary_query", p).len(), 2, "{p}: {recs:#?}");
        assert_eq!(on(recs, "binary_load", p).len(), 1, "{p}: {recs:#?}");
    }
}

fn summary_line(err: &str) -> Option<(usize, &str)> {
    err.lines()
        .enumerate()
        .find(|(_, l)| l.starts_with("clshim: pid ") && l.contains(" builds "))
}

#[test]
fn preload_mode_records_pocl_and_intel_under_the_khronos_loader() {
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-preload");
    let bin = client();
    let (plain, _) = launch(&bin, &[], Mode::Plain, &dir, Some(&lib), "plain", &[]);
    assert_both_ran(&plain, &lib);
    let (out, trace) = launch(&bin, &[], Mode::Preload, &dir, Some(&lib), "pre", &[]);
    assert_eq!(stdout(&out), stdout(&plain));
    let recs = checked_traces(&trace);
    assert_complete_trace(&recs, "preload");
    let err = stderr(&out);
    let (_, line) = summary_line(&err).expect("exit summary");
    assert!(line.contains("4 builds"), "{line}");
}

#[test]
fn layer_mode_is_initialised_with_properties_and_deinitialised_after_the_summary() {
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-layer");
    let bin = client();
    let (plain, _) = launch(&bin, &[], Mode::Plain, &dir, Some(&lib), "plain", &[]);
    let (out, trace) = launch(
        &bin,
        &[],
        Mode::Layer,
        &dir,
        Some(&lib),
        "layer",
        &[("CLSHIM_LOG", "clshim::layer=debug")],
    );
    assert_eq!(stdout(&out), stdout(&plain));
    assert_both_ran(&out, &lib);
    let err = stderr(&out);
    let init = err
        .lines()
        .position(|l| {
            l.contains("layer: initialised by the loader through clInitLayerWithProperties,")
        })
        .unwrap_or_else(|| panic!("no clInitLayerWithProperties line:\n{err}"));
    let (summary, line) = summary_line(&err).unwrap_or_else(|| panic!("no summary:\n{err}"));
    let deinit = err
        .lines()
        .position(|l| l.contains("layer: clDeinitLayer"))
        .unwrap_or_else(|| panic!("the loader did not call clDeinitLayer:\n{err}"));
    // The loader calls clDeinitLayer from its destructor, after clshim's exit handler.
    assert!(init < summary && summary < deinit, "{err}");
    assert!(
        line.contains("4 builds") && line.contains("4 binary queries"),
        "{line}"
    );
    assert_complete_trace(&checked_traces(&trace), "layer");
}

#[test]
fn legacy_termination_makes_the_khronos_loader_use_clinitlayer() {
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-legacy");
    let (out, trace) = launch(
        &client(),
        &[],
        Mode::Layer,
        &dir,
        Some(&lib),
        "legacy",
        &[
            ("CLSHIM_LOG", "clshim::layer=debug"),
            ("OCL_ICD_FORCE_LEGACY_TERMINATION", "1"),
        ],
    );
    let err = stderr(&out);
    assert!(
        err.contains("layer: initialised by the loader through clInitLayer,"),
        "{err}"
    );
    // Legacy termination: no clDeinitLayer; the exit handler still writes the summary.
    assert!(!err.contains("clDeinitLayer"), "{err}");
    assert!(summary_line(&err).is_some(), "{err}");
    assert_complete_trace(&checked_traces(&trace), "layer");
}

#[test]
fn ocl_icd_2_3_1_initialises_the_layer_with_clinitlayer() {
    // Debian's loader, no venv needed.
    let dir = scratch("khronos-oclicd");
    let (out, trace) = launch(
        &client(),
        &[],
        Mode::Layer,
        &dir,
        None,
        "oclicd",
        &[("CLSHIM_LOG", "clshim::layer=debug")],
    );
    let s = stdout(&out);
    assert!(s.contains("loader: /usr/lib/"), "{s}");
    let err = stderr(&out);
    assert!(
        err.contains("layer: initialised by the loader through clInitLayer,"),
        "{err}"
    );
    assert!(
        !err.contains("clDeinitLayer"),
        "ocl-icd has no clDeinitLayer: {err}"
    );
    let recs = checked_traces(&trace);
    assert_eq!(events(&recs, "process")[0]["mode"], "layer");
    assert_eq!(on(&recs, "build", POCL).len(), 2, "{recs:#?}");
}

#[test]
fn a_client_that_dlcloses_the_khronos_loader_keeps_its_records_and_summary() {
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-dlclose");
    let (out, trace) = launch(
        &dlopen_client(),
        &["--dlclose"],
        Mode::Layer,
        &dir,
        Some(&lib),
        "dlclose",
        &[("CLSHIM_LOG", "clshim::layer=debug")],
    );
    assert_both_ran(&out, &lib);
    assert!(stdout(&out).contains("closed\nok"), "{}", stdout(&out));
    let err = stderr(&out);
    // Intel's build of the loader is marked NODELETE, so dlclose leaves it loaded and it
    // deinitialises the layer at exit; either way nothing may be lost.
    assert!(err.contains("layer: clDeinitLayer"), "{err}");
    let (_, line) = summary_line(&err).unwrap_or_else(|| panic!("no summary:\n{err}"));
    assert!(line.contains("4 builds"), "{line}");
    assert_complete_trace(&checked_traces(&trace), "layer");
}

fn read(p: PathBuf) -> Vec<u8> {
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn default_filter_leaves_intel_binaries_byte_identical() {
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-untouched");
    let bin = client();
    let plain_dir = dir.join("plain-bins");
    std::fs::create_dir_all(&plain_dir).unwrap();
    let save = format!("--save={}", plain_dir.display());
    launch(&bin, &[&save], Mode::Plain, &dir, Some(&lib), "plain", &[]);
    let plain_intel = read(plain_dir.join("intel.bin"));
    assert!(
        plain_intel.starts_with(b"\x7fELF"),
        "Intel CPU binaries are ELF"
    );
    for mode in [Mode::Preload, Mode::Layer] {
        let tag = if mode == Mode::Preload {
            "pre"
        } else {
            "layer"
        };
        let bins = dir.join(format!("{tag}-bins"));
        std::fs::create_dir_all(&bins).unwrap();
        let save = format!("--save={}", bins.display());
        let (_, trace) = launch(
            &bin,
            &[&save],
            mode,
            &dir,
            Some(&lib),
            tag,
            &[("CLSHIM_BINARIES", "substitute")],
        );
        assert_eq!(
            read(bins.join("intel.bin")),
            plain_intel,
            "{tag}: Intel's binary changed"
        );
        assert!(
            read(bins.join("pocl.bin")).starts_with(CLSHIM_MAGIC),
            "{tag}: pocl substituted"
        );
        let recs = checked_traces(&trace);
        assert_eq!(on(&recs, "binary_query", INTEL).len(), 2, "{recs:#?}");
        assert_eq!(on(&recs, "binary_query", POCL).len(), 2, "{recs:#?}");
        for q in on(&recs, "binary_query", INTEL) {
            assert_eq!(q["action"], "forward", "{q}");
            assert_eq!(q["devices"][0]["matched"], false, "{q}");
        }
        for q in on(&recs, "binary_query", POCL) {
            assert_eq!(q["action"], "substitute", "{q}");
        }
    }
}

#[test]
fn devices_all_substitutes_intel_and_the_binary_round_trips() {
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-all");
    let bins = dir.join("bins");
    std::fs::create_dir_all(&bins).unwrap();
    let save = format!("--save={}", bins.display());
    let (out, trace) = launch(
        &client(),
        &[&save, "--seed=11"],
        Mode::Preload,
        &dir,
        Some(&lib),
        "all",
        &[("CLSHIM_BINARIES", "substitute"), ("CLSHIM_DEVICES", "all")],
    );
    // The client checked the results of the program made from the returned binary.
    assert!(
        stdout(&out).contains("intel from binary: ok (11..60)"),
        "{}",
        stdout(&out)
    );
    let intel = read(bins.join("intel.bin"));
    let parsed = parse_clshim_binary(&intel);
    assert!(String::from_utf8_lossy(&parsed.source).contains("i * i + 11"));
    let recs = checked_traces(&trace);
    let q = on(&recs, "binary_query", INTEL);
    assert_eq!(q.len(), 2);
    assert!(q.iter().all(|q| q["action"] == "substitute"), "{q:#?}");
    let loads = on(&recs, "binary_load", INTEL);
    assert_eq!(loads.len(), 1);
    assert_eq!(loads[0]["action"], "substitute", "{}", loads[0]);
    let builds = on(&recs, "build", INTEL);
    assert_eq!(
        builds[1]["source"]["origin"], "clshim-binary",
        "{}",
        builds[1]
    );
    assert_eq!(builds[1]["result"], 0);
}

fn probe(arg: &str, trace: &Path) -> Output {
    probe_with(arg, trace, false)
}

fn probe_with(arg: &str, trace: &Path, preload: bool) -> Output {
    let mut cmd = Command::new(build_c("layer_probe", &[]));
    cmd.arg(shim_path())
        .arg(arg)
        .env("OCL_ICD_VENDORS", "/etc/OpenCL/vendors")
        .env("CLSHIM_TRACE_DIR", trace)
        .env("CLSHIM_LOG", "clshim::layer=debug")
        .env("POCL_CACHE_DIR", trace.with_extension("kcache"));
    let out = run(cmd, preload);
    assert!(
        out.status.success(),
        "layer_probe {arg}: {:?}\n{}\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

#[test]
fn an_unknown_layer_property_is_refused_once_and_clshim_stays_out() {
    let dir = scratch("khronos-props");
    let trace = dir.join("trace");
    let out = probe("--props=unknown", &trace);
    let s = stdout(&out);
    assert!(
        s.contains("init: -30\ninit: -30\n"),
        "CL_INVALID_VALUE both times:\n{s}"
    );
    assert!(s.contains("unknown info: -30"), "{s}");
    assert!(s.contains("version: 0 100"), "{s}");
    let err = stderr(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("clshim:")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("0x4242") && warnings[0].contains("runs without clshim"),
        "{err}"
    );
    assert!(!trace.exists(), "a refused layer must write nothing");
}

#[test]
fn after_deinit_and_dlclose_a_late_call_skips_the_freed_table_and_nothing_is_lost() {
    let dir = scratch("khronos-deinit");
    let trace = dir.join("trace");
    let out = probe("--deinit", &trace);
    let s = stdout(&out);
    for l in [
        "init: 0",
        "entries: 150",
        "build: 0",
        "sizes: 0",
        "deinit: 0",
        "late build: 0",
        "ok",
    ] {
        assert!(s.contains(l), "{l} missing:\n{s}");
    }
    let err = stderr(&out);
    let deinit = err
        .find("layer: clDeinitLayer")
        .unwrap_or_else(|| panic!("{err}"));
    let summary = err
        .find("clshim: pid ")
        .unwrap_or_else(|| panic!("no summary: {err}"));
    assert!(deinit < summary, "{err}");
    assert!(err[summary..].contains("2 builds"), "{err}");
    let recs = checked_traces(&trace);
    assert_eq!(events(&recs, "build").len(), 2, "{recs:#?}");
    assert_eq!(events(&recs, "build")[1]["result"], 0);
}

#[test]
fn pyopencl_wheel_with_its_own_loader_sees_pocl_and_intel_under_preload() {
    if !needs(&[PYOPENCL_CURRENT]) {
        return;
    }
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-pyopencl");
    let script = r#"
import numpy as np, pyopencl as cl
for p in cl.get_platforms():
    ctx = cl.Context([p.get_devices()[0]])
    prg = cl.Program(ctx, "__kernel void k(__global int *o) { o[get_global_id(0)] = 7; }").build()
    q = cl.CommandQueue(ctx)
    buf = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 16)
    prg.k(q, (4,), None, buf)
    out = np.empty(4, np.int32)
    cl.enqueue_copy(q, out, buf)
    print(p.name, out.tolist())
"#;
    let (out, trace) = launch(
        &venv_python("current"),
        &["-c", script],
        Mode::Preload,
        &dir,
        Some(&lib),
        "py",
        &[("XDG_CACHE_HOME", &dir.join("xdg").to_string_lossy())],
    );
    let s = stdout(&out);
    assert!(
        s.contains("Portable Computing Language [7, 7, 7, 7]"),
        "{s}"
    );
    assert!(s.contains("Intel(R) OpenCL [7, 7, 7, 7]"), "{s}");
    let recs = checked_traces(&trace);
    assert_eq!(on(&recs, "build", POCL).len(), 1, "{recs:#?}");
    assert_eq!(on(&recs, "build", INTEL).len(), 1, "{recs:#?}");
}

#[test]
fn a_call_that_reaches_clshim_through_the_layer_and_again_by_symbol_is_recorded_once() {
    // The Linux analogue of macOS's double route (conda's loader -> clshim's layer ->
    // Apple's wrapper ICD -> interposed framework call -> clshim again).
    let dir = scratch("khronos-chain");
    let trace = dir.join("trace");
    let out = probe_with("--chain", &trace, true);
    let s = stdout(&out);
    let next = s
        .lines()
        .find(|l| l.starts_with("next build: "))
        .unwrap_or("");
    assert!(
        next.ends_with("libclshim.so"),
        "the next table must lead back into clshim: {s}"
    );
    assert!(s.contains("build: 0\n"), "{s}");
    let recs = checked_traces(&trace);
    assert_eq!(events(&recs, "build").len(), 1, "{recs:#?}");
    assert_eq!(events(&recs, "process")[0]["mode"], "layer");
    let err = stderr(&out);
    assert!(err.contains(" 1 build "), "{err}");
}

/// Two distinct copies of the library under the Khronos loader, as two layers and with
/// one also preloaded: one copy records (one trace file, one summary, each of the
/// client's 4 builds and 4 binary queries once), the other forwards.
#[test]
fn two_copies_of_the_library_record_each_call_once_under_the_khronos_loader() {
    let Some(lib) = khronos_loader() else { return };
    let dir = scratch("khronos-two-copies");
    let (a, b) = (dir.join("a/libclshim.so"), dir.join("b/libclshim.so"));
    for c in [&a, &b] {
        std::fs::create_dir_all(c.parent().unwrap()).unwrap();
        std::fs::copy(shim_path(), c).unwrap();
    }
    let layers = format!("{}:{}", a.display(), b.display());
    let bin = client();
    for (tag, preload) in [("layers", None), ("both", Some(&a))] {
        let trace = dir.join(format!("trace-{tag}"));
        let mut env = vec![
            ("OPENCL_LAYERS", layers.as_str()),
            ("CLSHIM_TRACE_DIR", trace.to_str().unwrap()),
            ("CLSHIM_SUMMARY", "1"),
        ];
        if let Some(p) = preload {
            env.push(("LD_PRELOAD", p.to_str().unwrap()));
        }
        let (out, _) = launch(&bin, &[], Mode::Plain, &dir, Some(&lib), tag, &env);
        assert_both_ran(&out, &lib);
        let err = stderr(&out);
        let summaries = err
            .lines()
            .filter(|l| l.starts_with("clshim: pid "))
            .count();
        assert_eq!(summaries, 1, "{tag}:\n{err}");
        assert_eq!(std::fs::read_dir(&trace).unwrap().count(), 1, "{tag}");
        let recs = checked_traces(&trace);
        assert_eq!(events(&recs, "build").len(), 4, "{tag}: {recs:#?}");
        assert_eq!(events(&recs, "binary_query").len(), 4, "{tag}: {recs:#?}");
    }
}
