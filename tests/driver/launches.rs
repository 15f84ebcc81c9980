//! First launches (`first_launch` records) on real pocl through the real ocl-icd loader, in
//! preload mode, layer mode and both, and under pyopencl's wheel: the record's shape; its
//! time against the compile it contains; what the application sees of its events and
//! references (identical to a run without the shim); one record among racing threads; a
//! kernel re-created at a reused address; kernels clshim never saw made; callbacks that come
//! after the kernel was released or while the process exits; refused launches; and the
//! dispatch slots against the system's ICD header. Every C kernel is one statement.

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
    Both,
}

fn launch_bin() -> PathBuf {
    build_c("launch", &[])
}

/// One run of tests/c/launch.c with `args`, a fresh kernel cache, and the shim in `mode`
/// tracing into `dir/trace`. Fails the test when the program fails.
fn run_launch(dir: &Path, args: &[&str], mode: Mode, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(launch_bin());
    cmd.args(args)
        .env("POCL_CACHE_DIR", dir.join(format!("pocl-{}", args[0])));
    clear_shim_env(&mut cmd, &[]);
    if matches!(mode, Mode::Preload | Mode::Both) {
        cmd.env("LD_PRELOAD", shim_path());
    }
    if matches!(mode, Mode::Layer | Mode::Both) {
        cmd.env("OPENCL_LAYERS", shim_path());
    }
    if mode != Mode::Plain {
        cmd.env("CLSHIM_TRACE_DIR", dir.join("trace"));
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn launch");
    assert!(
        out.status.success() && stdout(&out).lines().any(|l| l == "ok"),
        "launch {args:?} failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

/// The first_launch records of `dir/trace`, each checked against the schema.
fn first_launches(dir: &Path) -> Vec<Value> {
    let recs = checked_traces(&dir.join("trace"));
    let launches: Vec<Value> = events(&recs, "first_launch").into_iter().cloned().collect();
    for r in &launches {
        check_shape(r);
    }
    launches
}

/// Exactly the fields of the schema: the common ones and the event's own.
fn check_shape(r: &Value) {
    let own = [
        "call",
        "kernel",
        "program",
        "device",
        "work_dim",
        "global_size",
        "local_size",
        "result",
        "result_name",
        "cpu_seconds",
        "cpu_clock",
    ];
    let common = ["schema", "event", "pid", "rank", "tid", "ts", "seconds"];
    let obj = r.as_object().unwrap();
    for k in own.iter().chain(common.iter()) {
        assert!(obj.contains_key(*k), "{k} missing: {r}");
    }
    for k in obj.keys() {
        assert!(
            own.contains(&k.as_str()) || common.contains(&k.as_str()) || k == "instance",
            "unexpected field {k}: {r}"
        );
    }
    if r["call"] == "clEnqueueTask" {
        // docs/trace-schema.md: one work-item, `[1]` and `[1]`.
        assert_eq!(r["work_dim"], 1, "{r}");
        assert_eq!(r["global_size"], serde_json::json!([1]), "{r}");
        assert_eq!(r["local_size"], serde_json::json!([1]), "{r}");
    } else {
        assert_eq!(r["call"], "clEnqueueNDRangeKernel", "{r}");
    }
    let n = r["work_dim"].as_u64().unwrap() as usize;
    assert_eq!(r["global_size"].as_array().unwrap().len(), n, "{r}");
    assert!(
        r["local_size"].is_null() || r["local_size"].as_array().unwrap().len() == n,
        "{r}"
    );
    // The other threads' CPU (pocl's workers compile there), read on Linux from the
    // launching thread's clock while it lives: the test programs keep it alive.
    for k in ["cpu_seconds", "cpu_clock"] {
        assert!(r[k].as_f64().is_some_and(|c| c >= 0.0), "{k}: {r}");
    }
    let d = &r["device"];
    for k in [
        "name",
        "type",
        "platform",
        "vendor",
        "driver",
        "matched",
        "compute_units",
    ] {
        assert!(!d[k].is_null(), "device.{k}: {r}");
    }
    assert_eq!(d["platform"], "Portable Computing Language", "{r}");
}

fn global(r: &Value) -> Vec<u64> {
    r["global_size"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// The record's interval, [ts, ts + seconds], in seconds since the epoch.
fn interval(r: &Value) -> (f64, f64) {
    let ts = r["ts"].as_f64().unwrap();
    (ts, ts + r["seconds"].as_f64().unwrap())
}

/// The launch that `r` records contains a compile: pocl wrote a kernel it compiled into its
/// kernel cache `cache` inside the record's interval. (A file's time comes from the
/// kernel's coarse clock, which lags the precise one by at most a tick: it may seem earlier
/// than it was, never later, and a compile takes many ticks after the enqueue.)
fn assert_contains_a_compile(r: &Value, cache: &Path) {
    let (start, end) = interval(r);
    let compiled = compiled_kernels(cache);
    assert!(
        compiled
            .iter()
            .any(|k| start <= k.written && k.written <= end),
        "no kernel compiled inside [{start}, {end}] of {r}: {compiled:#?}"
    );
}

fn one_with_global<'a>(recs: &'a [Value], g: &[u64]) -> &'a Value {
    let found: Vec<&Value> = recs.iter().filter(|r| global(r) == g).collect();
    assert_eq!(found.len(), 1, "one record with global {g:?}: {recs:#?}");
    found[0]
}

#[test]
fn first_launch_time_is_the_compile_it_contains() {
    // The application launches one kernel at global 64 (pocl compiles it for local size 16),
    // at global 128 with the same local size (a new configuration for clshim, none for
    // pocl), then at 64 again, each timed from its enqueue to clFinish. pocl's kernel cache
    // says what it compiled and when it wrote it: exactly one kernel, specialised, written
    // inside the first record's interval and before the second record's starts. So the first
    // record contains the compile and the second contains none. (How close the first
    // record's time comes to the compile is bench/first_launch_accuracy.sh's to measure.)
    let dir = scratch("fl-accuracy");
    let out = run_launch(&dir, &["accuracy"], Mode::Preload, &[]);
    let line = stdout(&out);
    let nums: Vec<f64> = line
        .lines()
        .find(|l| l.starts_with("first "))
        .unwrap()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let app_first = nums[0];
    let recs = first_launches(&dir);
    assert_eq!(
        recs.len(),
        2,
        "the repeated configuration is not recorded: {recs:#?}"
    );
    let first = one_with_global(&recs, &[64]);
    let second = one_with_global(&recs, &[128]);
    let (second_start, _) = interval(second);
    assert!(
        first["seconds"].as_f64().unwrap() <= app_first,
        "the record lies inside the application's own interval: {first} vs {app_first}"
    );
    let cache = dir.join("pocl-accuracy");
    let compiled = compiled_kernels(&cache);
    assert_eq!(
        compiled.len(),
        1,
        "one compile, for local size 16: {compiled:#?}"
    );
    let kernel = &compiled[0];
    assert!(!kernel.is_generic(), "{kernel:?}");
    assert_contains_a_compile(first, &cache);
    assert!(
        kernel.written <= second_start,
        "nothing compiled during the second launch's record ({second_start}): {kernel:?}"
    );
}

#[test]
fn application_events_and_references_are_unchanged() {
    let dir = scratch("fl-events");
    let plain = run_launch(&dir, &["events"], Mode::Plain, &[]);
    let shim = run_launch(&dir, &["events"], Mode::Preload, &[]);
    // Its own event (reference counts, status, type, queue, its callback with that event),
    // the queue's and context's reference counts once settled (an event clshim leaked would
    // hold one), and the results.
    assert_eq!(stdout(&shim), stdout(&plain));
    let recs = first_launches(&dir);
    assert_eq!(recs.len(), 2, "{recs:#?}");
    for r in &recs {
        assert_eq!(r["result"], 0, "{r}");
        assert_eq!(r["result_name"], "CL_SUCCESS");
        assert_eq!(r["kernel"], "ev");
        assert_eq!(r["work_dim"], 1);
        assert_eq!(r["local_size"], serde_json::json!([16]));
        assert!(r["seconds"].as_f64().unwrap() > 0.0);
        // The launching thread (the main one), not pocl's thread that completed it.
        assert_eq!(r["tid"], r["pid"], "{r}");
    }
    let builds = events(&checked_traces(&dir.join("trace")), "build")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(builds.len(), 1);
    // The application's event (global 64) and clshim's own (global 32).
    let with_event = one_with_global(&recs, &[64]);
    let without = one_with_global(&recs, &[32]);
    assert_eq!(with_event["program"], builds[0]["program"]);
    assert_eq!(without["program"], builds[0]["program"]);
    assert!(
        stderr(&shim).contains(", 2 first launches "),
        "summary line: {}",
        stderr(&shim)
    );
}

#[test]
fn layer_mode_and_both_modes_record_each_first_launch_once() {
    let dir = scratch("fl-layer");
    let plain = run_launch(&dir, &["events"], Mode::Plain, &[]);
    let layer = run_launch(&dir.join("layer"), &["events"], Mode::Layer, &[]);
    assert_eq!(stdout(&layer), stdout(&plain));
    let recs = first_launches(&dir.join("layer"));
    assert_eq!(recs.len(), 2, "{recs:#?}");
    let all = checked_traces(&dir.join("layer/trace"));
    assert_eq!(events(&all, "process")[0]["mode"], "layer");
    let both = run_launch(&dir.join("both"), &["events"], Mode::Both, &[]);
    assert_eq!(stdout(&both), stdout(&plain));
    assert_eq!(first_launches(&dir.join("both")).len(), 2);
}

#[test]
fn threads_racing_one_first_launch_record_it_once() {
    let dir = scratch("fl-threads");
    run_launch(&dir, &["threads", "8"], Mode::Preload, &[]);
    let recs = first_launches(&dir);
    assert_eq!(recs.len(), 1, "{recs:#?}");
    assert_eq!(recs[0]["kernel"], "race");
}

#[test]
fn kernel_recreated_at_the_same_address_is_a_new_kernel() {
    let dir = scratch("fl-recreate");
    // glibc's calloc (pocl's allocator for kernels) never takes a block from the per-thread
    // cache that free fills, so with that cache on a freed kernel's address comes back
    // only by luck (5 to 26 rounds here, more than 60 on a loaded machine); with it off,
    // the freed block is reused within a few rounds every time.
    let out = run_launch(
        &dir,
        &["recreate"],
        Mode::Preload,
        &[("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")],
    );
    let text = stdout(&out);
    let round: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("same address in round "))
        .unwrap_or_else(|| {
            panic!("no round put program B's kernel at A's kernel's address:\n{text}")
        })
        .parse()
        .unwrap();
    // out[i] = i + 101 + 2 * round: program B's kernel ran.
    assert!(
        text.contains(&format!("out[3] = {}", 3 + 101 + 2 * round)),
        "{text}"
    );
    let mut recs = first_launches(&dir);
    recs.sort_by(|a, b| a["ts"].as_f64().partial_cmp(&b["ts"].as_f64()).unwrap());
    // Every round's A, then B's kernel at A's address (same name, same configuration) as a
    // new first launch; B's kernel made again is the same kernel, not another.
    assert_eq!(recs.len() as u64, round + 2, "{recs:#?}");
    let b = recs.last().unwrap();
    let a = &recs[recs.len() - 2];
    assert_ne!(a["program"], b["program"], "{recs:#?}");
    for r in &recs {
        assert_eq!(r["kernel"], "same");
        assert_contains_a_compile(r, &dir.join("pocl-recreate"));
    }
}

#[test]
fn enqueue_task_is_recorded_as_one_work_item() {
    let dir = scratch("fl-task");
    let plain = run_launch(&dir, &["task"], Mode::Plain, &[]);
    let shim = run_launch(&dir, &["task"], Mode::Preload, &[]);
    assert_eq!(stdout(&shim), stdout(&plain));
    let recs = first_launches(&dir);
    // The task, then clEnqueueNDRangeKernel of the same one work-item: one configuration.
    assert_eq!(recs.len(), 1, "{recs:#?}");
    let r = &recs[0];
    assert_eq!(r["call"], "clEnqueueTask");
    assert_eq!(r["work_dim"], 1);
    assert_eq!(r["global_size"], serde_json::json!([1]));
    assert_eq!(r["local_size"], serde_json::json!([1]));
}

#[test]
fn misaligned_size_arrays_are_read_safely_by_a_debug_build() {
    // The application's offset, global and local arrays one byte off a size_t boundary
    // (OpenCL does not require them aligned): the debug build that cargo test makes checks
    // every alignment precondition, so reading them as slices aborted the process.
    let dir = scratch("fl-misaligned");
    let plain = run_launch(&dir, &["misaligned"], Mode::Plain, &[]);
    assert!(
        stdout(&plain).contains("misaligned: "),
        "{}",
        stdout(&plain)
    );
    for mode in [Mode::Preload, Mode::Layer] {
        let _ = std::fs::remove_dir_all(dir.join("trace"));
        let shim = run_launch(&dir, &["misaligned"], mode, &[]);
        assert_eq!(stdout(&shim), stdout(&plain));
        assert!(
            !stderr(&shim).contains("internal error"),
            "{}",
            stderr(&shim)
        );
        let recs = first_launches(&dir);
        let mut sizes: Vec<String> = recs
            .iter()
            .map(|r| format!("{} {}", r["global_size"], r["local_size"]))
            .collect();
        sizes.sort();
        // Six configurations, each recorded once with the sizes the application passed.
        let mut want = [
            "[48,2] [16,1]",
            "[48,2] null",
            "[48] [16]",
            "[32,4] [8,2]",
            "[32,4] null",
            "[32] [8]",
        ];
        want.sort();
        assert_eq!(sizes, want);
    }
}

#[test]
fn exit_summary_counts_overlapping_first_launches_once() {
    // Six first launches held back by one user event are in flight together: their own
    // seconds (each record's) overlap, and the exit summary gives the wall-clock time they
    // covered, which is their union, not their sum.
    let dir = scratch("fl-gated");
    let out = run_launch(&dir, &["gated"], Mode::Preload, &[]);
    let recs = first_launches(&dir);
    assert_eq!(recs.len(), 6, "{recs:#?}");
    let span = |r: &Value| {
        let ts = r["ts"].as_f64().unwrap();
        (ts, ts + r["seconds"].as_f64().unwrap())
    };
    let mut spans: Vec<(f64, f64)> = recs.iter().map(span).collect();
    spans.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    // All in flight at once: the latest start comes before the earliest end.
    let latest_start = spans.iter().map(|s| s.0).fold(f64::MIN, f64::max);
    let earliest_end = spans.iter().map(|s| s.1).fold(f64::MAX, f64::min);
    assert!(latest_start < earliest_end, "{spans:?}");
    let own: f64 = spans.iter().map(|s| s.1 - s.0).sum();
    let union = spans.iter().map(|s| s.1).fold(f64::MIN, f64::max) - spans[0].0;
    let line = exit_line(&out);
    let said: f64 = line
        .split(", 6 first launches ")
        .nth(1)
        .and_then(|t| {
            let unit = " s wall clock (overlapping ones counted once)";
            t.find(unit).map(|i| &t[..i])
        })
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();
    assert!(
        (said - union).abs() < 0.02,
        "{said} vs union {union}: {line}"
    );
    assert!(said < own - 0.1, "{said} vs own seconds {own}: {line}");
}

#[test]
fn kernel_of_a_program_clshim_never_saw() {
    // Program and kernel made through functions taken from the loader with dlsym (which
    // preload mode does not see); the launch goes through the ordinary symbol.
    let dir = scratch("fl-unseen");
    run_launch(&dir, &["unseen"], Mode::Preload, &[]);
    let all = checked_traces(&dir.join("trace"));
    assert!(events(&all, "build").is_empty(), "{all:#?}");
    let recs = first_launches(&dir);
    assert_eq!(recs.len(), 1, "{recs:#?}");
    assert_eq!(recs[0]["kernel"], "hidden");
    assert!(
        recs[0]["program"].is_u64(),
        "looked up when first met: {}",
        recs[0]
    );
}

#[test]
fn kernels_made_in_program_and_cloned_are_identified_at_first_launch() {
    let dir = scratch("fl-inprogram");
    run_launch(&dir, &["inprogram"], Mode::Preload, &[]);
    let recs = first_launches(&dir);
    // left and right at global 64; the clone of left at 64 is left again; at 128 it is new.
    let mut seen: Vec<(String, Vec<u64>)> = recs
        .iter()
        .map(|r| (r["kernel"].as_str().unwrap().to_string(), global(r)))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("left".to_string(), vec![64]),
            ("left".to_string(), vec![128]),
            ("right".to_string(), vec![64]),
        ],
        "{recs:#?}"
    );
}

#[test]
fn launches_already_seen_allocate_nothing() {
    // tests/c/launch_hotpath.c counts this thread's allocations while launches already
    // seen run into a dispatch entry that returns at once: only clshim's path remains.
    let bin = build_c("launch_hotpath", &[]);
    for mode in [Mode::Preload, Mode::Layer] {
        let dir = scratch("fl-hotpath");
        let mut cmd = Command::new(&bin);
        cmd.arg("20000").env("POCL_CACHE_DIR", dir.join("pocl"));
        clear_shim_env(&mut cmd, &[]);
        let var = if mode == Mode::Preload {
            "LD_PRELOAD"
        } else {
            "OPENCL_LAYERS"
        };
        cmd.env(var, shim_path())
            .env("CLSHIM_TRACE_DIR", dir.join("trace"));
        let out = cmd.output().expect("spawn launch_hotpath");
        let text = stdout(&out);
        assert!(
            out.status.success() && text.contains("\nok"),
            "{var}: {:?}\n{text}\n{}",
            out.status,
            stderr(&out)
        );
        let first: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("allocations in the first launch: "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(first > 0, "the counter sees allocations: {text}");
        assert!(
            text.contains("allocations in 20000 launches already seen: 0"),
            "{var}: {text}"
        );
        assert_eq!(first_launches(&dir).len(), 1, "{var}");
    }
}

#[test]
fn callbacks_after_release_and_during_exit_use_only_captured_data() {
    let dir = scratch("fl-late");
    // Kernel, program and buffer released while pocl still compiles the launch.
    run_launch(&dir.join("released"), &["released"], Mode::Preload, &[]);
    let recs = first_launches(&dir.join("released"));
    assert_eq!(recs.len(), 1, "{recs:#?}");
    assert_eq!(recs[0]["kernel"], "gone");
    assert!(recs[0]["program"].is_u64());
    assert_contains_a_compile(&recs[0], &dir.join("released/pocl-released"));
    // A launch that completes in an exit handler that runs after clshim's own.
    let out = run_launch(&dir.join("exit"), &["exit"], Mode::Preload, &[]);
    assert!(
        stdout(&out).contains("exit handler: launch completed"),
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains(", 1 first launches "),
        "the summary (printed before the late launch): {}",
        stderr(&out)
    );
    let recs = first_launches(&dir.join("exit"));
    assert_eq!(recs.len(), 2, "the late record is written too: {recs:#?}");
    one_with_global(&recs, &[128]);
}

#[test]
fn refused_first_launch_is_recorded_once_and_the_real_one_after_it() {
    let dir = scratch("fl-refused");
    let plain = run_launch(&dir, &["refused"], Mode::Plain, &[]);
    let shim = run_launch(&dir, &["refused"], Mode::Preload, &[]);
    assert_eq!(stdout(&shim), stdout(&plain));
    assert!(stdout(&shim).contains("refused: CL_INVALID_KERNEL_ARGS, CL_INVALID_KERNEL_ARGS"));
    let recs = first_launches(&dir);
    assert_eq!(recs.len(), 2, "{recs:#?}");
    let refused: Vec<_> = recs.iter().filter(|r| r["result"] != 0).collect();
    assert_eq!(refused.len(), 1, "{recs:#?}");
    assert_eq!(refused[0]["result"], -52);
    assert_eq!(refused[0]["result_name"], "CL_INVALID_KERNEL_ARGS");
    let launched: Vec<_> = recs.iter().filter(|r| r["result"] == 0).collect();
    assert_eq!(launched.len(), 1, "{recs:#?}");
    assert_contains_a_compile(launched[0], &dir.join("pocl-refused"));
}

#[test]
fn pyopencl_workload_shows_first_launches() {
    if !needs(&[PYOPENCL_CURRENT]) {
        return;
    }
    let dir = scratch("fl-pyopencl");
    let mut cmd = Command::new(venv_python("current"));
    clear_shim_env(&mut cmd, &[]);
    cmd.arg(repo_root().join("tests/python/small_kernel.py"))
        .args(["--name", "fl", "--kernels", "2", "--statements", "2"])
        .env("POCL_CACHE_DIR", dir.join("pocl"))
        .env("XDG_CACHE_HOME", dir.join("xdg"))
        .env("CLSHIM_TRACE_DIR", dir.join("trace"))
        .env("LD_PRELOAD", shim_path())
        .env_remove("PYOPENCL_CTX");
    if std::env::var_os("OCL_ICD_VENDORS").is_none() && Path::new("/etc/OpenCL/vendors").is_dir() {
        cmd.env("OCL_ICD_VENDORS", "/etc/OpenCL/vendors");
    }
    let out = cmd.output().expect("spawn python");
    assert!(
        out.status.success() && stdout(&out).contains("\"ok\": true"),
        "small_kernel.py failed: {:?}\n{}\n{}",
        out.status,
        stdout(&out),
        stderr(&out)
    );
    let all = checked_traces(&dir.join("trace"));
    let recs = first_launches(&dir);
    assert_eq!(recs.len(), 2, "{recs:#?}");
    for (k, r) in recs.iter().enumerate() {
        let name = format!("fl_{k}");
        let build = events(&all, "build")
            .into_iter()
            .find(|b| b["kernels"] == serde_json::json!([name]))
            .unwrap_or_else(|| panic!("no build of {name}: {all:#?}"));
        assert_eq!(r["kernel"], name.as_str(), "{r}");
        assert_eq!(r["program"], build["program"], "{r}");
        assert_eq!(r["global_size"], serde_json::json!([1000]));
        assert!(
            r["local_size"].is_null(),
            "pyopencl passes no local size: {r}"
        );
        assert_eq!(r["result"], 0);
        assert_contains_a_compile(r, &dir.join("pocl"));
    }
    assert!(
        stderr(&out).contains(", 2 first launches "),
        "{}",
        stderr(&out)
    );
}
