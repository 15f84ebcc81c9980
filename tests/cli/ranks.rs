//! "Why does it get slower with more ranks?" (issue 27): CPU time beside wall time in the
//! records, the host facts of the `process` record, the report's compiling-and-waiting
//! section and hosts, and `--against` between rank counts. Real pocl under `mpiexec -n 1`
//! and `-n 2` (tests/c/rank_build.c, whose kernel text depends on the rank count, as
//! generated kernels do), two ranks bound to one CPU with `taskset`, and trace files
//! written here for what a real run cannot make happen on demand (overlapping first
//! launches, traces of an older clshim, ranks that outnumber their CPUs and waited).

use crate::common::{self, needs, report, s, MPIEXEC};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `clshim run -- mpiexec -n RANKS rank_build` into `dir/traces`, under `taskset -c CPUS`
/// when given; the trace directory.
fn job(dir: &Path, ranks: usize, cpus: Option<&str>) -> PathBuf {
    let prog = common::build_c("rank_build", &[]);
    let traces = dir.join("traces");
    common::shim_path(); // a fresh libclshim.so beside the clshim executable
    let mut c = match cpus {
        Some(list) => {
            let mut c = Command::new("taskset");
            c.args(["-c", list, env!("CARGO_BIN_EXE_clshim")]);
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_clshim")),
    };
    // What the ranks keep stays with the job's traces, not in the store of $HOME.
    c.args(["run", "--no-summary", "--trace-dir"])
        .arg(&traces)
        .arg("--native-store")
        .arg(dir.join("store"))
        .args(["--", "mpiexec", "-n", &ranks.to_string()])
        .arg(&prog)
        .env("POCL_KERNEL_CACHE", "0");
    common::clear_shim_env(&mut c, &[]);
    let o = c.output().expect("spawn clshim run");
    assert!(
        o.status.success() && common::stdout(&o).matches(": ok").count() == ranks,
        "the job failed: {}\n{}",
        common::stdout(&o),
        common::stderr(&o)
    );
    traces
}

fn records(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    for f in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(f.unwrap().path()).unwrap();
        out.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    out
}

pub fn report_json(args: &[&str]) -> Value {
    let o = report(&[&["--json"], args].concat());
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    serde_json::from_slice(&o.stdout).expect("report JSON")
}

/// This test process's CPUs, as the kernel lists them.
fn affinity_here() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string();
    list.split(',')
        .map(|p| match p.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

/// The records of a real run carry CPU time and the host's CPUs: a compile's CPU is the
/// calling thread's and cannot exceed its wall time; a first launch's is pocl's workers'.
fn check_records(traces: &Path, ranks: usize) {
    let recs = records(traces);
    let online = std::thread::available_parallelism().unwrap().get() as u64;
    let processes: Vec<&Value> = recs.iter().filter(|r| r["event"] == "process").collect();
    assert_eq!(processes.len(), ranks);
    for p in processes {
        let cpus = &p["cpus"];
        assert!(cpus["online"].as_u64().unwrap() >= online.min(1), "{p}");
        let listed = cpus["affinity"].as_str().unwrap();
        assert!(!listed.is_empty(), "{p}");
        assert!(cpus["cgroup_limit"].is_null() || cpus["cgroup_limit"].as_f64().unwrap() > 0.0);
    }
    let mut seen = std::collections::BTreeSet::new();
    for r in &recs {
        let event = r["event"].as_str().unwrap();
        if event == "process" || event == "exit" {
            continue;
        }
        seen.insert(event.to_string());
        let (wall, cpu) = (r["seconds"].as_f64().unwrap(), r["cpu_seconds"].as_f64());
        let cpu = cpu.unwrap_or_else(|| panic!("no cpu_seconds: {r}"));
        assert!(cpu >= 0.0, "{r}");
        let device = if event == "first_launch" {
            assert!(r["cpu_clock"].as_f64().is_some_and(|c| c >= 0.0), "{r}");
            r["device"].clone()
        } else {
            // One thread's clock (and the linker it waited for) within its wall time; the
            // two clocks are read microseconds apart.
            assert!(cpu <= wall + 0.005, "CPU {cpu} over wall {wall}: {r}");
            r["devices"][0].clone()
        };
        assert!(device["compute_units"].as_u64().unwrap() >= 1, "{r}");
    }
    let want = ["binary_query", "build", "first_launch"];
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), want);
}

#[test]
fn one_and_two_ranks_split_build_time_into_cpu_and_waiting() {
    if !needs(&[MPIEXEC]) {
        return;
    }
    let d = common::scratch("ranks");
    let one = job(&d.join("one"), 1, None);
    let two = job(&d.join("two"), 2, None);
    check_records(&one, 1);
    check_records(&two, 2);

    let o = report(&[s(&two)]);
    let text = common::stdout(&o);
    println!("{text}");
    assert!(text.contains("Compiling and waiting per rank"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Compiling and waiting"))
        .skip(3)
        .take(2)
        .collect();
    for (i, row) in rows.iter().enumerate() {
        assert!(row.trim_start().starts_with(&format!("{i} ")), "{row}");
    }
    assert!(text.contains("\nHosts ("), "{text}");

    let v = report_json(&[s(&two)]);
    let split = &v["compiling_and_waiting"];
    let ranks = split["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 2, "{split:#}");
    for r in ranks {
        let b = &r["build"];
        let (wall, cpu, waiting) = (
            b["wall_seconds"].as_f64().unwrap(),
            b["cpu_seconds"].as_f64().unwrap(),
            b["waiting_seconds"].as_f64().unwrap(),
        );
        assert!(cpu > 0.0 && wall >= cpu - 0.01, "{r}");
        assert!((waiting - (wall - cpu).max(0.0)).abs() < 1e-9, "{r}");
        assert_eq!(b["untimed_seconds"], 0.0, "{r}");
        assert!(
            r["first_launches"]["cpu_seconds"].as_f64().unwrap() > 0.0,
            "{r}"
        );
    }
    let hosts = split["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 1, "{split:#}");
    let h = &hosts[0];
    assert_eq!(h["ranks"], 2, "{h}");
    assert_eq!(
        h["cpus_online"].as_u64().unwrap() as usize,
        std::thread::available_parallelism().unwrap().get(),
        "{h}"
    );
    assert_eq!(
        h["cpus_allowed"].as_u64().unwrap() as usize,
        affinity_here()
    );
    let threads = h["pocl_worker_threads_per_rank"].as_u64().unwrap();
    assert!(threads >= 1, "{h}");
    assert_eq!(
        h["pocl_worker_threads"].as_u64().unwrap(),
        2 * threads,
        "{h}"
    );
    assert_eq!(h["bound_ranks"], 0, "{h}");

    // The kernel's text differs between the runs (its size depends on the rank count), so
    // only its name matches the program of the 1-rank run to that of the 2-rank run.
    let o = report(&[s(&two), "--against", s(&one)]);
    let text = common::stdout(&o);
    println!("{text}");
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(
        text.contains("compiles per rank, the median rank"),
        "{text}"
    );
    assert!(
        text.contains("CPU NEW") && text.contains(" s: compiles waited"),
        "{text}"
    );
    let flat = crate::cli_report::flat(&text);
    assert!(
        flat.contains("s in the 1 program both runs compiled (each compile got")
            && flat.contains("s in the 0 programs only NEW compiled"),
        "{flat}"
    );
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("scale "))
        .expect("the program's row");
    assert!(row.ends_with("built again"), "{row}");
    let cells: Vec<&str> = row.split_whitespace().collect();
    for c in &cells[4..8] {
        assert!(c.parse::<f64>().is_ok(), "CPU and waiting cells: {row}");
    }
    let v = report_json(&[s(&two), "--against", s(&one)]);
    assert_eq!(v["new_per_rank"]["ranks"], 2, "{v:#}");
    assert_eq!(v["old_per_rank"]["ranks"], 1, "{v:#}");
    assert_eq!(
        v["cpu_change_by_program"]["compiled_in_both"]["programs"],
        1
    );
    let p = &v["programs"][0];
    assert_eq!(p["kernels"], json!(["scale"]), "{p:#}");
    assert_eq!(p["status"], "built again", "{p:#}");
    assert_ne!(p["old_source_hash"], p["new_source_hash"], "{p:#}");
    for side in ["new_per_rank", "old_per_rank"] {
        assert!(p[side]["cpu_seconds"].as_f64().unwrap() > 0.0, "{p:#}");
        assert!(p[side]["waiting_seconds"].as_f64().unwrap() >= 0.0, "{p:#}");
    }
}

#[test]
fn two_ranks_bound_to_one_cpu_are_flagged() {
    if !needs(&[MPIEXEC]) {
        return;
    }
    let d = common::scratch("ranks-bound");
    let traces = job(&d, 2, Some("0"));
    for p in records(&traces).iter().filter(|r| r["event"] == "process") {
        assert_eq!(p["cpus"]["affinity"], "0", "{p}");
    }
    let v = report_json(&[s(&traces)]);
    let h = &v["compiling_and_waiting"]["hosts"][0];
    assert_eq!(h["usable_cpus"], 1.0, "{h}");
    assert_eq!(h["shared_cpus"], json!([0]), "{h}");
    assert_eq!(h["ranks_share_cpus"], true, "{h}");
    assert_eq!(h["ranks_outnumber_cpus"], true, "{h}");
    let text = common::stdout(&report(&[s(&traces)]));
    let row = text
        .lines()
        .skip_while(|l| !l.starts_with("Hosts ("))
        .nth(2)
        .unwrap_or_default();
    assert!(row.contains("2 bound; 2 share CPU 0"), "{text}");
    assert!(row.ends_with("RANKS > CPUS, SHARED CPUS"), "{row}");
}

/// A trace file of one process: its `process` record (with `cpus` when given), then `records`.
pub fn write_file(dir: &Path, rank: i64, cpus: Option<Value>, records: &[Value]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut process = json!({
        "schema": 1, "event": "process", "pid": 100 + rank, "instance": format!("{rank:016x}"),
        "rank": rank, "tid": 100 + rank, "ts": 1.75e9, "seconds": 0.0, "host": "node",
        "policy": "pass",
    });
    if let Some(c) = cpus {
        process["cpus"] = c;
    }
    let mut text = process.to_string() + "\n";
    for r in records {
        let mut r = r.clone();
        for (k, v) in [
            ("schema", json!(1)),
            ("pid", json!(100 + rank)),
            ("instance", json!(format!("{rank:016x}"))),
            ("rank", json!(rank)),
            ("result", json!(0)),
            ("result_name", json!("CL_SUCCESS")),
        ] {
            r[k] = v;
        }
        text.push_str(&r.to_string());
        text.push('\n');
    }
    std::fs::write(
        dir.join(format!("clshim-node-r{rank}-p{}.jsonl", 100 + rank)),
        text,
    )
    .unwrap();
}

pub fn build(program: u64, ts: f64, seconds: f64, cpu: Option<f64>) -> Value {
    let mut b = json!({
        "event": "build", "call": "clBuildProgram", "program": program, "tid": 1, "ts": ts,
        "seconds": seconds, "kernels": [format!("k{program}")],
        "source": {"origin": "source", "hash": format!("fnv1a64:{program:016x}"), "length": 10},
        "devices": [common::pocl_cpu()],
    });
    if let Some(c) = cpu {
        b["cpu_seconds"] = json!(c);
    }
    b
}

pub fn launch(program: u64, ts: f64, seconds: f64, clock: f64, cpu: f64) -> Value {
    json!({
        "event": "first_launch", "call": "clEnqueueNDRangeKernel", "program": program,
        "kernel": format!("k{program}"), "tid": 1, "ts": ts, "seconds": seconds,
        "cpu_seconds": cpu, "cpu_clock": clock, "device": common::pocl_cpu(), "work_dim": 1,
        "global_size": [64], "local_size": [16],
    })
}

/// On an in-order queue the second launch's interval holds the first one's compile: both
/// records count that CPU, the report once, and each program keeps its own share.
#[test]
fn overlapping_first_launches_count_their_cpu_once() {
    let d = common::scratch("ranks-overlap");
    write_file(
        &d,
        0,
        None,
        &[
            build(1, 1.75e9, 1.0, Some(0.9)),
            build(2, 1.75e9 + 1.0, 1.0, Some(0.5)),
            launch(1, 1.75e9 + 2.0, 2.0, 10.0, 2.0),
            launch(2, 1.75e9 + 2.5, 2.5, 10.4, 2.6),
        ],
    );
    let v = report_json(&[s(&d)]);
    let r = &v["compiling_and_waiting"]["ranks"][0];
    assert_eq!(r["build"]["wall_seconds"], 2.0, "{r}");
    assert!(
        (r["build"]["cpu_seconds"].as_f64().unwrap() - 1.4).abs() < 1e-9,
        "{r}"
    );
    assert!(
        (r["build"]["waiting_seconds"].as_f64().unwrap() - 0.6).abs() < 1e-9,
        "{r}"
    );
    let l = &r["first_launches"];
    assert!(
        (l["wall_seconds"].as_f64().unwrap() - 3.0).abs() < 1e-9,
        "{r}"
    );
    assert!(
        (l["cpu_seconds"].as_f64().unwrap() - 3.0).abs() < 1e-9,
        "{r}"
    );
    // Against itself, each program's share: k2 has its own second, not k1's compile.
    let v = report_json(&[s(&d), "--against", s(&d)]);
    let k2 = v["programs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["kernels"] == json!(["k2"]))
        .unwrap();
    let cpu = k2["new_per_rank"]["cpu_seconds"].as_f64().unwrap();
    assert!((cpu - (0.5 + 1.0)).abs() < 1e-9, "{k2:#}");
}

/// Four ranks on a host of two CPUs whose builds waited: flagged, and the hint says what
/// was measured; traces of a clshim before CPU time say so instead of showing zeros.
#[test]
fn ranks_over_cpus_get_the_measured_hint_and_old_traces_a_note() {
    let d = common::scratch("ranks-over");
    let cpus = json!({"online": 2, "affinity": "0-1", "cgroup_limit": null});
    for rank in 0..4 {
        write_file(
            &d,
            rank,
            Some(cpus.clone()),
            &[build(1, 1.75e9, 2.0, Some(1.0))],
        );
    }
    let text = common::stdout(&report(&[s(&d)]));
    println!("{text}");
    assert!(text.contains("RANKS > CPUS"), "{text}");
    let flat = crate::cli_report::flat(&text);
    assert!(
        flat.contains("the ranks' builds waited 50% of their time (4.000 s of 8.000 s): 4 ranks took turns on 2 CPUs"),
        "{flat}"
    );
    assert!(flat.contains("Run at most 2 ranks on this host"), "{flat}");
    let v = report_json(&[s(&d)]);
    assert_eq!(
        v["compiling_and_waiting"]["hosts"][0]["hint"],
        "outnumbered"
    );

    let old = common::scratch("ranks-old");
    write_file(&old, 0, None, &[build(1, 1.75e9, 2.0, None)]);
    let text = common::stdout(&report(&[s(&old)]));
    assert!(text.contains("no CPU time in these traces"), "{text}");
    let v = report_json(&[s(&old)]);
    assert_eq!(
        v["compiling_and_waiting"]["ranks"][0]["build"]["untimed_seconds"],
        2.0
    );
}
