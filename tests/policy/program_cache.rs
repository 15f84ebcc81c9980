//! The program cache (`CLSHIM_PROGRAM_CACHE=1`) on real pocl: a client's source builds,
//! after one cold run that leaves requests and a warm step, are served from the native
//! store, and the client sees exactly what it sees without clshim (tests/c/program_api.c
//! prints every answer an application can ask of a program: info and build info before
//! and after the build, builds the driver refuses for their arguments or options, ten
//! rebuilds that keep one program alive (the context's references), reference counts, kernels and their program, argument names, rebuilds refused while a
//! kernel holds the program, a kernel outliving its program (its source, and the program
//! taken back from it and built again), the
//! program as a compile header and link input, a failing build), through the preload door,
//! the loader layer and both, every build call leaving a record with its options and status
//! that `clshim report` names; with pocl and Intel's CPU runtime under the Khronos loader
//! (only pocl's program served, Intel's its driver's own); with 8 threads building one
//! source at once; forking while a thread builds; and with entries that are damaged or made
//! by another driver build, which are compiled instead.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn client() -> PathBuf {
    build_c("program_api", &["-lpthread"])
}

struct Setup {
    d: Scratch,
    bin: PathBuf,
    home: PathBuf,
    /// Variables of every run of the client (the loader and drivers it finds).
    env: Vec<(String, String)>,
}

impl Setup {
    fn new(tag: &str) -> Setup {
        let d = scratch(tag);
        let home = d.path("home");
        std::fs::create_dir_all(&home).unwrap();
        Setup {
            bin: client(),
            home,
            d,
            env: Vec::new(),
        }
    }

    fn store(&self) -> PathBuf {
        self.home.join(".cache/clshim/native")
    }

    /// Runs the client with `args`, without clshim (`mode` None) or under `clshim run
    /// --program-cache --mode MODE` with `extra` variables; returns its output and records.
    fn run(
        &self,
        mode: Option<&str>,
        args: &[&str],
        extra: &[(&str, &str)],
    ) -> (String, Vec<Value>) {
        let run = self.run_traced(mode, args, extra);
        (run.out, run.records)
    }

    /// As `run`, with the trace directory.
    fn run_traced(&self, mode: Option<&str>, args: &[&str], extra: &[(&str, &str)]) -> Ran {
        let traces = self.d.path(&format!("traces-{}", next()));
        let mut cmd = program_cache_command(&self.bin, mode, &traces);
        cmd.args(args);
        clear_shim_env(&mut cmd, &[]);
        cmd.env("HOME", &self.home)
            .env("POCL_CACHE_DIR", self.d.path("kc"));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?} {mode:?}: {}", stderr(&out));
        let records = if traces.exists() {
            checked_traces(&traces)
        } else {
            Vec::new()
        };
        Ran {
            out: stdout(&out),
            records,
            traces,
        }
    }

    /// A cold run that leaves requests, then the warm step.
    fn fill(&self, args: &[&str]) {
        self.run(Some("both"), args, &[("CLSHIM_WARM_SERVICE", "0")]);
        let out = clshim_out(
            &["warm", "--lib", s(&shim_path())],
            &[("HOME", s(&self.home))],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!entries(&self.store()).is_empty(), "{}", stderr(&out));
    }
}

/// One run of the client under clshim: its output, records and trace directory.
struct Ran {
    out: String,
    records: Vec<Value>,
    traces: PathBuf,
}

fn next() -> usize {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn served(records: &[Value]) -> usize {
    records
        .iter()
        .filter(|r| r["event"] == "build" && r["served"] == "store")
        .count()
}

/// Plain, then cold (nothing served: the store is empty), then warm through each door.
fn same_through_every_door(tag: &str, args: &[&str], want_served: usize) {
    same_through_every_door_in(Setup::new(tag), args, want_served, |_, _| {})
}

/// As `same_through_every_door`, in `s`, with `check` of the cold run ("cold") and of each
/// warm one (its door).
fn same_through_every_door_in(
    s: Setup,
    args: &[&str],
    want_served: usize,
    check: impl Fn(&str, &Ran),
) {
    // The cold run first: a program pocl's cache holds from a run without clshim is pocl's
    // alone, which clshim neither keeps nor shares; the run without clshim then finds the
    // cold run's compile, build log and all, in pocl's cache, as a second run would.
    let cold = s.run_traced(Some("both"), args, &[]);
    let (plain, _) = s.run(None, args, &[]);
    assert!(plain.ends_with("ok\n"), "{plain}");
    assert_eq!(cold.out, plain, "a cold run with the cache on");
    assert_eq!(served(&cold.records), 0);
    check("cold", &cold);
    s.fill(args);
    for mode in ["preload", "layer", "both"] {
        let warm = s.run_traced(Some(mode), args, &[]);
        assert_eq!(warm.out, plain, "{mode}: as without clshim");
        assert!(
            served(&warm.records) >= want_served,
            "{mode}: {} builds served",
            served(&warm.records)
        );
        check(mode, &warm);
    }
}

#[test]
fn the_program_api_answers_as_without_clshim() {
    let s = Setup::new("cache-api");
    same_through_every_door_in(s, &["api"], 2, every_build_call_is_recorded);
}

/// Every clBuildProgram the client made (it says how many) left a record, cold and served
/// alike, refused or not: with its options (the client passes options to every one) and
/// its status; a call the driver refused without building says no build log's line (the
/// log is an earlier build's) but names the program by its kernels, and `clshim report`
/// shows the status by name.
fn every_build_call_is_recorded(run: &str, ran: &Ran) {
    let calls: usize = ran
        .out
        .lines()
        .find_map(|l| l.strip_prefix("build calls: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{run}: the client says how many builds it made"));
    let builds: Vec<&Value> = events(&ran.records, "build")
        .into_iter()
        .filter(|r| r["call"] == "clBuildProgram")
        .collect();
    assert_eq!(builds.len(), calls, "{run}: {builds:#?}");
    for b in &builds {
        assert!(b["options"].is_string(), "{run}: {b}");
        let error = b["error"].as_str().unwrap_or_default();
        assert!(!error.contains('\0'), "{run}: {b}");
    }
    let refused = |name: &str, options: &str| -> usize {
        let of: Vec<&&Value> = builds
            .iter()
            .filter(|b| b["result_name"] == name && b["options"] == options)
            .collect();
        for b in &of {
            assert!(b["error"].is_null(), "{run}: an earlier build's log: {b}");
            assert_eq!(
                b["source_kernels"],
                serde_json::json!(["scale", "second"]),
                "{run}: {b}"
            );
        }
        of.len()
    };
    // The argument checks, then user data without a callback while a kernel holds it.
    let invalid_value = builds
        .iter()
        .filter(|b| b["result_name"] == "CL_INVALID_VALUE")
        .count();
    assert_eq!(invalid_value, 4, "{run}: {builds:#?}");
    for b in builds
        .iter()
        .filter(|b| b["result_name"] == "CL_INVALID_VALUE")
    {
        assert!(b["error"].is_null(), "{run}: {b}");
    }
    assert_eq!(refused("CL_INVALID_OPERATION", "-DFACTOR=5"), 2, "{run}");
    // The linked program, whose build log is empty: no line of it stands for an error.
    let linked: Vec<&&Value> = builds
        .iter()
        .filter(|b| b["options"] == "-DFACTOR=6")
        .collect();
    assert_eq!(linked.len(), 1, "{run}: {builds:#?}");
    assert_eq!(linked[0]["result_name"], "CL_INVALID_OPERATION", "{run}");
    assert!(linked[0]["error"].is_null(), "{run}: {}", linked[0]);
    let out = report(&[s(&ran.traces)]);
    assert!(out.status.success(), "{run}: {}", stderr(&out));
    let report = stdout(&out);
    let words = report.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("scale,second (failed build): CL_INVALID_OPERATION")
            && words.contains("scale,second (failed build): CL_INVALID_VALUE"),
        "{run}: {report}"
    );
    assert!(!report.contains("\\x00"), "{run}: {report}");
}

#[test]
fn threads_building_one_source_at_once() {
    same_through_every_door("cache-threads", &["threads", "--threads=8"], 8);
}

#[test]
fn forking_while_a_thread_builds() {
    same_through_every_door("cache-fork", &["fork"], 1);
}

/// Programs of a platform the store cannot serve stay the driver's own: under the Khronos
/// loader, with pocl and Intel's CPU runtime in one platform list, one source is built on
/// each; once pocl's build marked the source, Intel's program made from it still answers
/// Intel's own extension function (clGetDeviceGlobalVariablePointerINTEL, which a
/// clshim handle would make answer CL_INVALID_PROGRAM) and every query as without
/// clshim, while pocl's build is served.
#[test]
fn programs_of_other_platforms_stay_the_drivers_own() {
    let Some(lib) = khronos_loader() else { return };
    let mut s = Setup::new("cache-platforms");
    let vendors = khronos_vendors(&s.d, &lib);
    s.env = vec![
        ("LD_LIBRARY_PATH".into(), s_owned(&lib)),
        ("OCL_ICD_VENDORS".into(), s_owned(&vendors)),
    ];
    same_through_every_door_in(s, &["platforms"], 1, |_, _| {});
}

fn s_owned(p: &Path) -> String {
    s(p).to_string()
}

/// A damaged entry (a payload byte flipped) and a store seen through another driver build
/// (a copy of pocl's library with another build-id, as tests/policy/store_keys.rs makes):
/// nothing is served, the builds compile, and the client sees what it sees without
/// clshim.
#[test]
fn damaged_entries_and_another_driver_are_compiled_instead() {
    let setup = Setup::new("cache-damaged");
    setup.fill(&["api"]);
    let (plain, _) = setup.run(None, &["api"], &[]);
    for e in entries(&setup.store()) {
        let mut b = std::fs::read(&e).unwrap();
        let n = b.len();
        b[n - 50] ^= 0x40;
        std::fs::write(&e, b).unwrap();
    }
    let (got, records) = setup.run(Some("both"), &["api"], &[]);
    assert_eq!(got, plain);
    assert_eq!(served(&records), 0, "no damaged entry is served");
    let vendors = pocl_copy(&setup.d);
    setup.fill(&["api"]);
    let (got, records) = setup.run(Some("both"), &["api"], &[("OCL_ICD_VENDORS", s(&vendors))]);
    assert_eq!(got, plain);
    assert_eq!(served(&records), 0, "another driver build has no entry");
}
