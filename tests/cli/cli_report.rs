//! `clshim report` on trace files written here from docs/trace-schema.md (realistic
//! `process`, `build` and `binary_query` records): the table, JSON and Chrome timeline
//! outputs, ranks, bad input and usage errors; and one real run: 4 MPI ranks of
//! tests/c/mpi_build.c under `clshim run`, `mpiexec` and the real shim, then reported.

use crate::common;

use common::{gpu, needs, one_line_err, pocl_cpu, report, s, MPIEXEC};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One process's trace file, written record by record like the library does.
struct Proc {
    host: String,
    rank: Option<i64>,
    pid: u64,
    t: f64,
    policy: String,
    lines: Vec<String>,
    next_program: u64,
}

impl Proc {
    fn new(host: &str, rank: Option<i64>, pid: u64, t0: f64, policy: &str) -> Proc {
        let mut p = Proc {
            host: host.into(),
            rank,
            pid,
            t: t0,
            policy: policy.into(),
            lines: Vec::new(),
            next_program: 1,
        };
        let rec = json!({
            "schema": 1, "event": "process", "pid": pid, "rank": rank, "tid": pid, "ts": t0, "seconds": 0.0,
            "host": host, "exe": "/usr/bin/python3.11", "argv": ["python", "app.py"], "ppid": 1,
            "size": rank.map(|_| 4), "rank_source": rank.map(|_| "PMI_RANK"),
            "clshim_version": "0.1.0", "mode": "preload", "policy": policy, "devices_filter": "pocl-cpu",
        });
        p.lines.push(rec.to_string());
        p
    }

    fn common(&mut self, event: &str, call: &str, seconds: f64, device: &Value) -> Value {
        self.t += 0.001;
        let v = json!({
            "schema": 1, "event": event, "pid": self.pid, "rank": self.rank, "tid": self.pid + 1,
            "ts": self.t, "seconds": seconds, "call": call, "result": 0, "result_name": "CL_SUCCESS",
            "devices": [device],
        });
        self.t += seconds;
        v
    }

    /// A successful clBuildProgram; returns the program id.
    fn build(&mut self, kernels: &[&str], hash: &str, seconds: f64, device: &Value) -> u64 {
        let id = self.next_program;
        self.next_program += 1;
        let mut v = self.common("build", "clBuildProgram", seconds, device);
        let o = v.as_object_mut().unwrap();
        o.insert("program".into(), json!(id));
        o.insert("options".into(), json!("-cl-fast-relaxed-math"));
        o.insert("async".into(), json!(false));
        o.insert(
            "source".into(),
            json!({"origin": "source", "hash": hash, "length": 4711}),
        );
        o.insert("kernels".into(), json!(kernels));
        self.lines.push(v.to_string());
        id
    }

    /// A successful clCompileProgram (no kernel names: a compiled object has none yet);
    /// returns the program id.
    fn compile(&mut self, hash: &str, seconds: f64, device: &Value) -> u64 {
        let id = self.next_program;
        self.next_program += 1;
        let mut v = self.common("compile", "clCompileProgram", seconds, device);
        let o = v.as_object_mut().unwrap();
        o.insert("program".into(), json!(id));
        o.insert("options".into(), json!("-cl-std=CL1.2"));
        o.insert("async".into(), json!(false));
        o.insert(
            "source".into(),
            json!({"origin": "source", "hash": hash, "length": 200}),
        );
        o.insert("kernels".into(), json!([]));
        o.insert("headers".into(), json!(0));
        self.lines.push(v.to_string());
        id
    }

    /// A successful clLinkProgram of `inputs`; returns the new program's id.
    fn link(
        &mut self,
        inputs: &[u64],
        kernels: &[&str],
        options: &str,
        seconds: f64,
        device: &Value,
    ) -> u64 {
        let id = self.next_program;
        self.next_program += 1;
        let mut v = self.common("link", "clLinkProgram", seconds, device);
        let o = v.as_object_mut().unwrap();
        o.insert("program".into(), json!(id));
        o.insert("options".into(), json!(options));
        o.insert("async".into(), json!(false));
        o.insert("kernels".into(), json!(kernels));
        o.insert("inputs".into(), json!(inputs));
        self.lines.push(v.to_string());
        id
    }

    fn query(&mut self, program: u64, param: &str, seconds: f64, device: &Value) {
        let action = match (self.policy.as_str(), device["matched"].as_bool().unwrap()) {
            ("pass", _) | (_, false) => "forward",
            (p, true) => p,
        }
        .to_string();
        self.query_as(program, param, seconds, device, &action);
    }

    /// A binary query answered by `action` whatever the policy.
    fn query_as(&mut self, program: u64, param: &str, seconds: f64, device: &Value, action: &str) {
        let mut v = self.common("binary_query", "clGetProgramInfo", seconds, device);
        let o = v.as_object_mut().unwrap();
        o.insert("program".into(), json!(program));
        o.insert("param".into(), json!(param));
        o.insert("action".into(), json!(action));
        o.insert("actions".into(), json!([action]));
        o.insert("sizes".into(), json!([63261]));
        self.lines.push(v.to_string());
    }

    /// build + SIZES query + BINARIES query, as pyopencl's binary cache does.
    fn cached_build(
        &mut self,
        kernels: &[&str],
        hash: &str,
        build_s: f64,
        query_s: f64,
        dev: &Value,
    ) {
        let id = self.build(kernels, hash, build_s, dev);
        self.query(id, "CL_PROGRAM_BINARY_SIZES", query_s, dev);
        self.query(id, "CL_PROGRAM_BINARIES", 0.001, dev);
    }

    fn file_name(&self) -> String {
        let r = self.rank.map(|r| r.to_string()).unwrap_or_default();
        format!("clshim-{}-r{}-p{}.jsonl", self.host, r, self.pid)
    }

    fn write(&self, dir: &Path) -> PathBuf {
        let p = dir.join(self.file_name());
        let mut text = self.lines.join("\n");
        text.push('\n');
        std::fs::write(&p, text).unwrap();
        p
    }
}

const H1: &str = "fnv1a64:1f2e3d4c5b6a7980";
const H2: &str = "fnv1a64:0011223344556677";

/// A job whose binary queries cost more than its builds: 4 ranks on one node, each
/// building two programs and querying their binaries on pocl's CPU driver (as pyopencl's
/// binary cache does); rank 3 is far slower.
fn four_rank_job(dir: &Path, policy: &str) {
    for rank in 0..4i64 {
        let slow = if rank == 3 { 3.0 } else { 1.0 };
        let mut p = Proc::new(
            "node07",
            Some(rank),
            4100 + rank as u64,
            1_750_000_000.0 + rank as f64 * 0.01,
            policy,
        );
        let dev = pocl_cpu();
        let q = if policy == "pass" { 1.6 } else { 0.002 };
        p.cached_build(&["axpy", "dot"], H1, 0.7 * slow, q * slow, &dev);
        p.cached_build(&["stencil"], H2, 0.3 * slow, q * slow / 2.0, &dev);
        p.write(dir);
    }
}

#[test]
fn report_table_shows_where_the_time_went_per_program_and_rank() {
    let d = common::scratch("where");
    four_rank_job(&d, "pass");
    let o = report(&[s(&d)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert_eq!(common::stderr(&o), "");
    let out = common::stdout(&o);
    println!("{out}");
    assert!(
        out.contains("4 ranks, 4 processes on 1 host in 1 run; 4 files, 28 records, 0 skipped"),
        "{out}"
    );
    // Programs: kernel names, short hash, 4 ranks, median (min/median/max with --wide).
    let line = out
        .lines()
        .find(|l| l.contains("axpy,dot"))
        .expect("program row");
    assert!(line.contains("1f2e3d4c5b6a"), "{line}");
    let wide = common::stdout(&report(&["--wide", s(&d)]));
    let wide_line = wide
        .lines()
        .find(|l| l.contains("axpy,dot"))
        .expect("program row");
    assert!(
        wide_line.contains("0.700 / 0.700 / 2.100"),
        "build stats: {wide_line}"
    );
    assert!(
        wide_line.contains("1.601 / 1.601 / 4.801"),
        "query stats: {wide_line}"
    );
    assert!(line.contains("pass") && line.contains("forward"), "{line}");
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[2], "4", "ranks column: {line}");
    assert_eq!(cols[4], "0.700", "median build s: {line}");
    assert_eq!(cols[6], "1.601", "median query s: {line}");
    assert!(out.lines().any(|l| l.contains("stencil")));
    // Programs are sorted slowest first.
    assert!(out.find("axpy,dot").unwrap() < out.find("stencil").unwrap());
    // Ranks: 0..3, only rank 3 flagged.
    let ranks: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Ranks"))
        .skip(2)
        .take(4)
        .collect();
    for (i, l) in ranks.iter().enumerate() {
        assert!(l.trim_start().starts_with(&format!("{i} ")), "{l}");
        assert!(l.contains("node07"));
        assert_eq!(l.contains("SLOW"), i == 3, "{l}");
    }
    // The hint names the setting.
    assert!(
        out.contains("hint: binary queries on pocl CPU devices took"),
        "{out}"
    );
    assert!(out.contains("CLSHIM_BINARIES=substitute"));
    // Every rank built the same sources: nothing to say about variants.
    assert!(!out.contains("note:"), "{out}");
}

/// One trace directory used by two runs, 20 minutes apart (here under two policies):
/// the report says it found 2 runs, when each began, and that their figures are added.
#[test]
fn a_reused_trace_directory_is_reported_as_two_runs() {
    let d = common::scratch("two-runs");
    four_rank_job(&d, "pass");
    for rank in 0..4i64 {
        let mut p = Proc::new(
            "node07",
            Some(rank),
            5100 + rank as u64,
            1_750_001_200.0,
            "substitute",
        );
        p.cached_build(&["axpy", "dot"], H1, 0.7, 0.002, &pocl_cpu());
        p.write(&d);
    }
    let out = common::stdout(&report(&[s(&d)]));
    assert!(
        out.contains("4 ranks, 8 processes on 1 host in 2 runs;"),
        "{out}"
    );
    let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(
            "note: 2 runs in this directory, processes that ran at separate times (4 processes \
             at +0 s, 4 processes at +1200 s)"
        ) && words.contains("give each run its own --trace-dir"),
        "{out}"
    );
    let v: Value = serde_json::from_slice(&report(&["--json", s(&d)]).stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 2, "{:#}", v["runs"]);
    // One run: no note.
    let one = common::scratch("one-run");
    four_rank_job(&one, "pass");
    assert!(!common::stdout(&report(&[s(&one)])).contains("runs in this directory"));
}

/// Builds and no binary query (pyopencl 2024.2.3 and newer on pocl keep no binaries):
/// the report says no policy has anything to act on, that the program cache (which these
/// processes ran without) would serve their builds, and what it still measures.
#[test]
fn builds_without_binary_queries_are_said_to_leave_the_policies_nothing() {
    let d = common::scratch("no-queries");
    for rank in 0..2i64 {
        let mut p = Proc::new(
            "n",
            Some(rank),
            700 + rank as u64,
            1_750_000_000.0,
            "substitute",
        );
        p.build(&["k"], H1, 0.5, &pocl_cpu());
        p.write(&d);
    }
    let out = common::stdout(&report(&[s(&d)]));
    let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(
            "note: no binary queries: the applications asked for no program binaries \
             (pyopencl 2024.2.3 and newer keep none on pocl), so --binaries substitute and \
             clshim unsubstitute have nothing to act on here; the program cache (clshim run's \
             default, CLSHIM_PROGRAM_CACHE=1) keeps their compiles in the native store and \
             serves them to later runs' source builds."
        ),
        "{out}"
    );
    // The same run with the program cache on, which served nothing: the store was empty.
    let d = common::scratch("no-queries-cache");
    let mut p = Proc::new("n", Some(0), 710, 1_750_000_000.0, "pass");
    let header = p.lines[0].replace(
        r#""policy":"pass""#,
        r#""policy":"pass","program_cache":true"#,
    );
    assert_ne!(header, p.lines[0]);
    p.lines[0] = header;
    p.build(&["k"], H1, 0.5, &pocl_cpu());
    p.write(&d);
    let out = common::stdout(&report(&[s(&d)]));
    let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
    // Its records say no why (a clshim that did not record it): nothing is promised.
    assert!(
        words.contains(
            "note: no binary queries, and the program cache served none of these builds; these \
             traces do not say why"
        ) && !words.contains("keeps their compiles")
            && !words.contains("clshim warm makes"),
        "{out}"
    );
    let d = common::scratch("with-queries");
    four_rank_job(&d, "pass");
    assert!(!common::stdout(&report(&[s(&d)])).contains("no binary queries"));
}

impl Proc {
    /// The program cache on in this process's `process` record.
    fn program_cache(mut self) -> Proc {
        let header = self.lines[0].replacen(r#""policy":"#, r#""program_cache":true,"policy":"#, 1);
        assert_ne!(header, self.lines[0]);
        self.lines[0] = header;
        self
    }

    /// Adds `fields` to the last record written.
    fn amend(&mut self, fields: Value) {
        let mut v: Value = serde_json::from_str(self.lines.last().unwrap()).unwrap();
        for (k, f) in fields.as_object().unwrap() {
            v[k] = f.clone();
        }
        *self.lines.last_mut().unwrap() = v.to_string();
    }

    /// A clCreateProgramWithBinary of a clshim binary made from `made_from`, with
    /// `native_miss_kind` and `native_miss` when given.
    fn load(&mut self, made_from: &str, miss: Option<(&str, &str)>, device: &Value) {
        let mut v = self.common("binary_load", "clCreateProgramWithBinary", 0.01, device);
        let o = v.as_object_mut().unwrap();
        o.insert("program".into(), json!(self.next_program));
        self.next_program += 1;
        o.insert("action".into(), json!("substitute"));
        o.insert("lengths".into(), json!([300]));
        o.insert("made_from".into(), json!(made_from));
        if let Some((kind, why)) = miss {
            o.insert("native_miss_kind".into(), json!(kind));
            o.insert("native_miss".into(), json!(why));
        }
        self.lines.push(v.to_string());
    }
}

/// Builds the program cache did not serve and clshim binaries made again from their recipes
/// are counted by why, in the words of the exit line, the largest count first: a build
/// without an entry is one with no driver's binary in the store yet, and nothing promises
/// that a warm step makes what it would never keep (issue 31: the report said "`clshim
/// warm` makes native binaries for the next run" of loads whose builds the warm step would
/// never keep, and nothing of why builds were not served).
#[test]
fn builds_and_loads_not_served_are_counted_by_why() {
    let d = common::scratch("not-served-why");
    let dev = pocl_cpu();
    let mut p = Proc::new("n", Some(0), 720, 1_750_000_000.0, "substitute").program_cache();
    p.build(&["a"], H1, 0.01, &dev);
    p.amend(json!({"served": "store"}));
    for (kind, why) in [
        ("files_differ", "its entry's compile read other files (./val.h has another content now)"),
        ("files_differ", "its entry's compile read other files (hdr/val.h exists now)"),
        ("not_kept", "not kept: its preprocessed text holds the time of the compile (__TIME__): each build's differs"),
        ("no_entry", "no entry"),
    ] {
        p.build(&["b"], H2, 0.5, &dev);
        p.amend(json!({"not_served": {"kind": kind, "why": why}}));
    }
    p.load("native", None, &dev);
    p.load(
        "recipe",
        Some(("not_kept", "device 0: not kept: its preprocessed text holds the date of the compile (__DATE__): each build's differs")),
        &dev,
    );
    p.write(&d);
    let out = flat(&common::stdout(&report(&[s(&d)])));
    assert!(
        out.contains(
            "program cache: 1 of 5 source builds served from the native store: 2 whose entries' \
             compiles read other files (another folder's headers?), 1 not kept: they hold the \
             time of the compile, 1 with no driver's binary in the store yet"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "clshim binaries loaded: 1 from native binaries, 1 rebuilt from their recipe: 1 not \
             kept: they hold the time of the compile"
        ),
        "{out}"
    );
    assert!(!out.contains("makes native binaries"), "{out}");
    let v: Value = serde_json::from_slice(&report(&["--json", s(&d)]).stdout).unwrap();
    assert_eq!(
        v["program_cache_builds"]["not_served"]["not kept: they hold the time of the compile"], 1,
        "{v:#}"
    );
    assert_eq!(
        v["clshim_binary_loads"]["recipe_why"]["not kept: they hold the time of the compile"],
        1
    );
}

/// An application under the program cache that asks for binaries (pyopencl before
/// 2024.2.3) keeps a binary cache of its own, which the program cache does not serve: the
/// report says so, and to run it under `substitute`; so it does where the sources of a run
/// differ by a token that changes every run. Before, nothing said the program cache did
/// nothing for it.
#[test]
fn an_application_with_its_own_binary_cache_is_sent_to_substitute() {
    let d = common::scratch("cache-queries");
    let dev = pocl_cpu();
    let mut p = Proc::new("n", Some(0), 730, 1_750_000_000.0, "pass").program_cache();
    p.cached_build(&["k"], H1, 0.5, 1.0, &dev);
    p.write(&d);
    let out = flat(&common::stdout(&report(&[s(&d)])));
    assert!(
        out.contains(
            "note: the program cache serves these applications nothing: they asked for program \
             binaries (2 binary queries). They keep a binary cache of their own"
        ) && out.contains("Run them with --binaries substitute instead."),
        "{out}"
    );
    // Two ranks whose kept sources differ only by pyopencl's run-unique constant, and no
    // binary query in sight: the same note, for the token.
    let d = common::scratch("cache-tokens");
    std::fs::create_dir_all(d.join("sources")).unwrap();
    for rank in 0..2i64 {
        let text = format!(
            "__kernel void k(__global float *a) {{ a[0] = 1.0f; }}\n__constant int \
             pyopencl_defeat_cache_{:032x} = 0;\n",
            0x309b_1ab5_34b4_4eba_baa2_2eb2_fc58_f987u128 + rank as u128
        );
        let reference = format!("{:016x}-{}", 0xabc0 + rank, text.len());
        std::fs::write(d.join(format!("sources/{reference}.cl")), &text).unwrap();
        let mut p =
            Proc::new("n", Some(rank), 740 + rank as u64, 1_750_000_000.0, "pass").program_cache();
        p.build(
            &["k"],
            &format!("fnv1a64:{:016x}", 0xabc0 + rank),
            0.5,
            &dev,
        );
        p.amend(json!({"kept": {"source": reference, "options": null}}));
        p.write(&d);
    }
    let out = flat(&common::stdout(&report(&[s(&d)])));
    assert!(
        out.contains(
            "note: the program cache serves these applications nothing: their sources differ \
             by a token that changes every run (see Why it built)."
        ),
        "{out}"
    );
    // Under substitute, or without the program cache, nothing of the kind is said.
    for (policy, cache) in [("substitute", true), ("pass", false)] {
        let d = common::scratch("cache-queries-not");
        let mut p = Proc::new("n", Some(0), 731, 1_750_000_000.0, policy);
        if cache {
            p = p.program_cache();
        }
        p.cached_build(&["k"], H1, 0.5, 1.0, &dev);
        p.write(&d);
        let out = common::stdout(&report(&[s(&d)]));
        assert!(!out.contains("serves these applications nothing"), "{out}");
    }
}

/// "Build time" is one thing: `--against` counts a run's build time as the report does,
/// builds and binary queries (where `substitute` gains), and names the two parts, so a
/// second run under `substitute` shows what the policy saved.
#[test]
fn against_counts_build_time_as_the_report_does() {
    let (old, new) = (
        common::scratch("against-old"),
        common::scratch("against-new"),
    );
    four_rank_job(&old, "pass");
    four_rank_job(&new, "substitute");
    let total = |d: &Path| {
        let v: Value = serde_json::from_slice(&report(&["--json", s(d)]).stdout).unwrap();
        v["build_seconds"].as_f64().unwrap() + v["binary_query_seconds"].as_f64().unwrap()
    };
    let o = report(&["--json", s(&new), "--against", s(&old)]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let near = |a: &Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-6;
    assert!(near(&v["old_build_time_seconds"], total(&old)), "{v:#}");
    assert!(near(&v["new_build_time_seconds"], total(&new)), "{v:#}");
    let text = common::stdout(&report(&[s(&new), "--against", s(&old)]));
    let gained = total(&old) - total(&new);
    assert!(
        text.contains(&format!(
            "build time: NEW {:.2} s (builds 6.00, binary queries 0.03), OLD {:.2} s (builds \
             6.00, binary queries 14.41): {gained:.2} s gained",
            total(&new),
            total(&old)
        )),
        "{text}"
    );
}

/// A directory with no trace file (a command that made no OpenCL call, or that no door
/// reached): the report says what may have happened, not only "no trace files".
#[test]
fn an_empty_trace_directory_says_what_may_have_happened() {
    let d = common::scratch("empty-traces");
    let o = report(&[s(&d)]);
    assert_eq!(o.status.code(), Some(1));
    let words = common::stdout(&o)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    for part in [
        "note: no trace files: no process recorded anything here.",
        "may have made no OpenCL call",
        "CUDA's libOpenCL.so.1",
        "CLSHIM_TRACE_DIR did not reach its processes",
        "LD_PRELOAD.md",
    ] {
        assert!(words.contains(part), "{part}: {words}");
    }
}

#[test]
fn report_no_hint_when_substituted_or_not_pocl() {
    let d = common::scratch("subst");
    four_rank_job(&d, "substitute");
    let out = common::stdout(&report(&[s(&d)]));
    assert!(!out.contains("hint:"), "{out}");
    assert!(out.contains("substitute"));

    // Slow binary queries on a GPU are not pocl's second compile.
    let d = common::scratch("gpu");
    let mut p = Proc::new("gpu01", Some(0), 77, 1_750_000_000.0, "pass");
    p.cached_build(&["k"], H1, 0.5, 2.0, &gpu());
    p.write(&d);
    let out = common::stdout(&report(&[s(&d)]));
    assert!(!out.contains("hint:"), "{out}");
}

#[test]
fn report_json_has_the_same_aggregates() {
    let d = common::scratch("json");
    four_rank_job(&d, "pass");
    let o = report(&["--json", s(&d)]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["records"], 28);
    assert_eq!(v["skipped"], 0);
    let progs = v["programs"].as_array().unwrap();
    assert_eq!(progs.len(), 2);
    assert_eq!(progs[0]["kernels"], json!(["axpy", "dot"]));
    assert_eq!(progs[0]["source_hash"], H1);
    assert_eq!(progs[0]["ranks"], 4);
    assert_eq!(progs[0]["binary_queries"], 8);
    assert!((progs[0]["build_seconds"]["median"].as_f64().unwrap() - 0.7).abs() < 1e-9);
    assert!((progs[0]["build_seconds"]["max"].as_f64().unwrap() - 2.1).abs() < 1e-9);
    assert_eq!(progs[0]["policies"], json!(["pass"]));
    assert_eq!(progs[0]["actions"], json!(["forward"]));
    let ranks = v["ranks"].as_array().unwrap();
    let nums: Vec<i64> = ranks.iter().map(|r| r["rank"].as_i64().unwrap()).collect();
    assert_eq!(nums, [0, 1, 2, 3]);
    let slow: Vec<bool> = ranks.iter().map(|r| r["slow"].as_bool().unwrap()).collect();
    assert_eq!(slow, [false, false, false, true]);
    assert_eq!(v["hint"]["setting"], "CLSHIM_BINARIES=substitute");
}

#[test]
fn report_ranks_fall_back_to_host_and_pid() {
    let d = common::scratch("norank");
    for pid in [500u64, 501] {
        let mut p = Proc::new("laptop", None, pid, 1_750_000_000.0, "pass");
        p.cached_build(&["k"], H1, 0.2, 0.1, &pocl_cpu());
        p.write(&d);
    }
    let o = report(&["--json", s(&d)]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let labels: Vec<&str> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["laptop:500", "laptop:501"]);
    assert!(v["ranks"][0]["rank"].is_null());
    assert_eq!(v["programs"][0]["ranks"], 2);
}

#[test]
fn report_chrome_timeline_has_one_row_per_rank() {
    let d = common::scratch("chrome");
    four_rank_job(&d, "pass");
    let out = d.join("timeline.json");
    let o = report(&["--chrome", s(&out), s(&d)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = evs
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "rank 0 @ node07",
            "rank 1 @ node07",
            "rank 2 @ node07",
            "rank 3 @ node07"
        ]
    );
    let slices: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(slices.len(), 24); // 4 ranks x 2 programs x (build + 2 queries)
    let min_ts = slices
        .iter()
        .map(|e| e["ts"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert!(
        (0.0..2000.0).contains(&min_ts),
        "ts relative to the earliest record: {min_ts}"
    );
    let b = slices.iter().find(|e| e["cat"] == "build").unwrap();
    assert!((b["dur"].as_f64().unwrap() - 700_000.0).abs() < 1.0, "{b}");
    assert_eq!(b["args"]["options"], "-cl-fast-relaxed-math");
    assert_eq!(b["args"]["result_name"], "CL_SUCCESS");
    assert!(b["args"]["kernels"].is_array());
    let q = slices.iter().find(|e| e["cat"] == "binary_query").unwrap();
    assert_eq!(q["args"]["action"], "forward");
    assert!(q["args"]["program"].is_string());
}

#[test]
fn report_empty_directory_is_reported_and_counted() {
    let d = common::scratch("empty");
    let o = report(&[s(&d)]);
    assert_eq!(o.status.code(), Some(1));
    let e = common::stderr(&o);
    assert!(
        e.contains(&format!("clshim report: {}: no trace files", d.display())),
        "{e}"
    );
    assert!(common::stdout(&o).contains("0 ranks"));
}

#[test]
fn report_skips_bad_lines_and_files_but_reports_the_rest() {
    let d = common::scratch("bad");
    four_rank_job(&d, "pass");
    // Truncated last line (process killed mid-write): rank 9.
    let mut p = Proc::new("node08", Some(9), 900, 1_750_000_001.0, "pass");
    p.cached_build(&["axpy", "dot"], H1, 0.7, 1.6, &pocl_cpu());
    let trunc = p.write(&d);
    let mut text = std::fs::read_to_string(&trunc).unwrap();
    text.push_str(r#"{"schema":1,"event":"build","pid":900,"ra"#);
    std::fs::write(&trunc, text).unwrap();
    // A record from a newer schema, then a garbage line, in rank 8's file.
    let mut p = Proc::new("node08", Some(8), 800, 1_750_000_001.0, "pass");
    p.lines
        .push(r#"{"schema":2,"event":"build","pid":800,"rank":8,"when":"later"}"#.into());
    p.lines.push("this is not json".into());
    p.cached_build(&["stencil"], H2, 0.3, 0.8, &pocl_cpu());
    let newer = p.write(&d);
    // An unreadable "file" (a directory with a trace name).
    let unreadable = d.join("clshim-node08-r7-p700.jsonl");
    std::fs::create_dir(&unreadable).unwrap();

    let o = report(&["--json", s(&d)]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "exit status says something was skipped"
    );
    let e = common::stderr(&o);
    println!("{e}");
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 4, "{e}");
    assert!(
        e.contains(&format!(
            "clshim report: {}:5: truncated last line",
            trunc.display()
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "clshim report: {}:2: record of schema version 2",
            newer.display()
        )),
        "{e}"
    );
    assert!(
        e.contains(&format!("clshim report: {}:3: not JSON", newer.display())),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "clshim report: {}: cannot read: a directory (only regular files are read)",
            unreadable.display()
        )),
        "{e}"
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["skipped"], 4);
    assert_eq!(v["problems"].as_array().unwrap().len(), 4);
    let nums: Vec<i64> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_i64().unwrap())
        .collect();
    assert_eq!(
        nums,
        [0, 1, 2, 3, 8, 9],
        "everything readable is still covered"
    );
    assert_eq!(v["programs"][0]["ranks"], 5);

    // The table still prints, and says what was skipped.
    let o = report(&[s(&d)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(common::stdout(&o).contains("4 input problems skipped"));
}

#[test]
fn report_usage_errors_exit_2() {
    let o = report(&["/nonexistent/traces"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        one_line_err(&o),
        "clshim report: /nonexistent/traces: No such file or directory"
    );
    let o = report(&[]);
    assert_eq!(o.status.code(), Some(2));
    let o = report(&["--bogus", "x"]);
    assert_eq!(o.status.code(), Some(2));
    let d = common::scratch("cw");
    four_rank_job(&d, "pass");
    let o = report(&["--chrome", "/proc/x/y.json", s(&d)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(common::stderr(&o).contains("cannot write /proc/x/y.json"));
}

// ------------------------------------------------------------ real MPI + shim

#[test]
fn real_mpi_four_ranks_under_clshim_run() {
    if !needs(&[MPIEXEC]) {
        return;
    }
    let prog = common::build_c("mpi_build", &[]);
    let d = common::scratch("mpi");
    let traces = d.join("traces");
    common::shim_path(); // a fresh target/<profile>/libclshim.so beside the clshim executable
    let mut c = Command::new("mpiexec");
    c.args([
        "-n",
        "4",
        env!("CARGO_BIN_EXE_clshim"),
        "run",
        "--trace-dir",
    ])
    .arg(&traces)
    // What the ranks keep stays with the job's traces, not in the store of $HOME.
    .arg("--native-store")
    .arg(d.join("store"))
    .args(["--no-summary", "--"])
    .arg(&prog)
    .env("POCL_KERNEL_CACHE", "0");
    let o = common::run(c, false);
    assert!(
        o.status.success(),
        "mpiexec failed: {}\n{}",
        common::stdout(&o),
        common::stderr(&o)
    );
    assert_eq!(common::stdout(&o).matches("binary of").count(), 4);

    let timeline = d.join("timeline.json");
    let o = report(&["--chrome", s(&timeline), s(&traces)]);
    let out = common::stdout(&o);
    println!("{out}");
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    assert!(out.contains("4 ranks, 4 processes"), "{out}");
    let ranks: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Ranks"))
        .skip(2)
        .take(4)
        .collect();
    for (i, l) in ranks.iter().enumerate() {
        assert!(
            l.trim_start().starts_with(&format!("{i} ")),
            "rank {i}: {l}"
        );
    }
    let row = out
        .lines()
        .find(|l| l.contains("add,scale"))
        .expect("program row");
    assert_eq!(
        row.split_whitespace().nth(2),
        Some("4"),
        "built by 4 ranks: {row}"
    );

    let v: Value =
        serde_json::from_slice(&std::fs::read(&timeline).unwrap()).expect("timeline JSON");
    let rows: Vec<&str> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for (i, r) in rows.iter().enumerate() {
        assert!(r.starts_with(&format!("rank {i} @ ")), "{r}");
    }
}

/// pyopencl < 2024.2.3 makes every cold build's source unique (a uuid constant), so the
/// same kernels have a different source hash on every rank: by default they still form
/// one row across ranks; `--by-source` splits them.
#[test]
fn report_groups_per_rank_unique_sources_by_kernel_names() {
    let d = common::scratch("unique-sources");
    for rank in 0..3i64 {
        let mut p = Proc::new(
            "node07",
            Some(rank),
            5100 + rank as u64,
            1_750_000_000.0,
            "pass",
        );
        let hash = format!("fnv1a64:00000000000000{rank:02}");
        p.cached_build(&["rhs"], &hash, 1.0 + rank as f64, 2.0, &pocl_cpu());
        p.write(&d);
    }
    let out = common::stdout(&report(&[s(&d)]));
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("rhs "))
        .collect();
    assert_eq!(rows.len(), 1, "{out}");
    let cols: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(
        &cols[1..4],
        &["3", "sources", "3"],
        "3 sources, 3 ranks: {}",
        rows[0]
    );
    assert_eq!(cols[5], "2.000", "median build s: {}", rows[0]);
    let wide = common::stdout(&report(&["--wide", s(&d)]));
    let wide_row = wide
        .lines()
        .find(|l| l.trim_start().starts_with("rhs "))
        .unwrap();
    assert!(wide_row.contains("1.000 / 2.000 / 3.000"), "{wide_row}");
    // Said in words: each rank compiles its own variant, and why (laid out as written
    // with --wide, wrapped at 120 columns without).
    for text in [&wide, &flat(&out)] {
        assert!(
            text.contains("note: rhs (3 sources on 3 ranks): the same kernel names were built from different sources on different ranks,"),
            "{text}"
        );
        assert!(
            text.contains("so each rank compiles its own variant"),
            "{text}"
        );
        assert!(
            text.contains("Constants or shapes baked into the kernel text"),
            "{text}"
        );
    }
    let json: Value = serde_json::from_str(&common::stdout(&report(&["--json", s(&d)]))).unwrap();
    let prog = &json["programs"][0];
    assert_eq!(prog["ranks"], 3);
    assert_eq!(prog["sources"].as_array().unwrap().len(), 3);
    assert_eq!(prog["sources_differ_across_ranks"], true);
    assert!(json["variants_note"]
        .as_str()
        .unwrap()
        .starts_with("note: rhs"));
    let split = common::stdout(&report(&["--by-source", s(&d)]));
    let rows = split
        .lines()
        .filter(|l| l.trim_start().starts_with("rhs "))
        .count();
    assert_eq!(rows, 3, "{split}");
}

const H3: &str = "fnv1a64:aaaabbbbccccdddd";

/// Two ranks that build with clCompileProgram + clLinkProgram: `a` and `b` compiled,
/// `b` made a library, `linked` from `a` and the library, `other` from `a` again (a
/// shared input), and one compile that no link takes.
fn compile_link_job(dir: &Path, policy: &str, query_s: f64) {
    for rank in 0..2i64 {
        let mut p = Proc::new(
            "node07",
            Some(rank),
            6100 + rank as u64,
            1_750_000_000.0,
            policy,
        );
        let dev = pocl_cpu();
        let a = p.compile(H1, 1.0, &dev);
        let b = p.compile(H2, 0.5, &dev);
        let lib = p.link(&[b], &[], "-create-library", 0.1, &dev);
        let x = p.link(&[a, lib], &["linked"], "", 0.2, &dev);
        // Forwarded under every policy, as clshim does for programs it cannot rebuild.
        p.query_as(x, "CL_PROGRAM_BINARY_SIZES", query_s, &dev, "forward");
        p.query_as(x, "CL_PROGRAM_BINARIES", 0.001, &dev, "forward");
        p.link(&[a], &["other"], "", 0.3, &dev);
        p.compile(H3, 0.4, &dev);
        p.write(dir);
    }
}

/// Compile time goes to the program the compiled object was linked into (through a
/// library too); an input shared by two links counts once, in the first; a compile no
/// link took has a row of its own, named; nothing is "(unknown program)".
#[test]
fn report_names_linked_programs_and_counts_their_compiles_once() {
    let d = common::scratch("linked");
    compile_link_job(&d, "pass", 2.0);
    let o = report(&[s(&d)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out = common::stdout(&o);
    println!("{out}");
    assert!(!out.contains("(unknown program)"), "{out}");
    let row = |name: &str| -> String {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}:\n{out}"))
            .to_string()
    };
    let linked = row("linked ");
    let wide = common::stdout(&report(&["--wide", s(&d)]));
    assert!(
        wide.lines().any(|l| l.trim_start().starts_with("linked ")
            && l.contains("link of 1 compiled + 1 library")),
        "{wide}"
    );
    // Fitted to 120 columns, the source is shortened.
    assert!(linked.contains("link of 1 compiled +…"), "{linked}");
    // Per rank 2 compiles + 2 links (the library's and its own), 1.0 + 0.5 + 0.1 + 0.2 s.
    let cols: Vec<&str> = linked
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(cols[2..4], ["2", "8"], "ranks, builds of both: {linked}");
    // Both ranks took the same time: one value, the same with --wide as min / med / max.
    assert_eq!(cols[4], "1.800", "{linked}");
    let wide_row = |name: &str| -> String {
        wide.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}:\n{wide}"))
            .to_string()
    };
    assert!(
        wide_row("linked ").contains("1.800 / 1.800 / 1.800"),
        "{wide}"
    );
    let other = row("other ");
    assert!(other.contains("link of 1 compiled"), "{other}");
    assert!(
        other.contains(" 0.300 "),
        "shared input counted once: {other}"
    );
    assert!(
        wide_row("other ").contains("0.300 / 0.300 / 0.300"),
        "{wide}"
    );
    let never = row("(compiled, no link recorded)");
    assert!(never.contains(" 0.400 "), "{never}");
    assert!(
        wide_row("(compiled, no link recorded)").contains("0.400 / 0.400 / 0.400"),
        "{wide}"
    );
    // Every second is in exactly one row: 2 ranks x 2.5 s of build time.
    assert!(out.contains("builds 5.000 s"), "{out}");

    let v: Value = serde_json::from_str(&common::stdout(&report(&["--json", s(&d)]))).unwrap();
    let progs = v["programs"].as_array().unwrap();
    let p = progs
        .iter()
        .find(|p| p["kernels"] == json!(["linked"]))
        .unwrap();
    assert_eq!(p["compiles"], 4, "{p}");
    assert_eq!(p["links"], 4, "{p}");
    assert_eq!(p["linked_from"], json!(["link of 1 compiled + 1 library"]));
    assert_eq!(p["binary_queries"], 4);
    assert_eq!(p["options"], json!(["-cl-std=CL1.2", "-create-library"]));
    let never = progs
        .iter()
        .find(|p| p["name"] == "(compiled, no link recorded)")
        .unwrap();
    assert_eq!(never["compiles"], 2);
    assert_eq!(never["links"], 0);
    let sum: f64 = progs
        .iter()
        .map(|p| p["build_seconds"]["total"].as_f64().unwrap())
        .sum();
    assert!((sum - 5.0).abs() < 1e-9, "{sum}");
    // With --by-source the linked row still names what it was linked from (in full with
    // --wide).
    let split = common::stdout(&report(&["--by-source", "--wide", s(&d)]));
    assert!(
        split.lines().any(|l| l.trim_start().starts_with("linked ")
            && l.contains("link of 1 compiled + 1 library")),
        "{split}"
    );
    assert!(!split.contains("(unknown program)"), "{split}");
}

/// Under `substitute`, binary queries still forwarded to the pocl CPU device the policy
/// selects (here: of a linked program) are named, with the kind of program and why.
#[test]
fn report_hint_names_queries_forwarded_under_substitute() {
    let d = common::scratch("forwarded");
    compile_link_job(&d, "substitute", 2.0);
    let out = common::stdout(&report(&[s(&d)]));
    println!("{out}");
    let wide = common::stdout(&report(&["--wide", s(&d)]));
    // As written with --wide, wrapped at 120 columns without.
    for text in [&wide, &flat(&out)] {
        assert!(
            !text.contains("hint: binary queries on pocl CPU devices took"),
            "{text}"
        );
        assert!(
            text.contains("hint: under substitute, 4 binary queries on pocl CPU devices that CLSHIM_DEVICES selects were still forwarded: 44% of build time (4.002 s of 9.002 s),"),
            "{text}"
        );
        assert!(
            text.contains("1 linked program ('linked'), 4.002 s: clshim had no recipe to rebuild these (an input it did not see made, headers not made from source, or its recipe memory full), so it forwarded them."),
            "{text}"
        );
        // Advice measured for pyopencl only (PYOPENCL_NO_CACHE=1), and for no way of
        // building: these processes ran Python, so its switch is named, nothing else.
        assert!(
            text.contains("These runs lacked PYOPENCL_NO_CACHE=1")
                && !text.contains("build such programs from one source"),
            "{text}"
        );
    }
    let v: Value = serde_json::from_str(&common::stdout(&report(&["--json", s(&d)]))).unwrap();
    let h = &v["forwarded_hint"];
    assert_eq!(h["binary_queries"], 4, "{h}");
    assert_eq!(h["kinds"][0]["kind"], "linked");
    assert_eq!(h["kinds"][0]["programs"], json!(["linked"]));
    assert!(v["hint"].is_null());

    // Under pass forwarding is what was asked for: the pass hint, not this one.
    let d = common::scratch("forwarded-pass");
    compile_link_job(&d, "pass", 2.0);
    let out = common::stdout(&report(&[s(&d)]));
    assert!(
        out.contains("hint: binary queries on pocl CPU devices took"),
        "{out}"
    );
    assert!(!out.contains("hint: under"), "{out}");
    // A few forwarded milliseconds are not worth a hint.
    let d = common::scratch("forwarded-small");
    compile_link_job(&d, "substitute", 0.01);
    let out = common::stdout(&report(&[s(&d)]));
    assert!(!out.contains("hint:"), "{out}");
}

/// A binary query whose device could not be queried (null in `devices`) is read, not
/// skipped.
#[test]
fn report_reads_binary_queries_with_an_unknown_device() {
    let d = common::scratch("null-device");
    let mut p = Proc::new("node07", Some(0), 42, 1_750_000_000.0, "pass");
    let id = p.build(&["k"], H1, 0.5, &pocl_cpu());
    p.query(id, "CL_PROGRAM_BINARY_SIZES", 1.0, &pocl_cpu());
    let last = p.lines.pop().unwrap();
    let mut v: Value = serde_json::from_str(&last).unwrap();
    v["devices"] = json!([pocl_cpu(), null]);
    v["actions"] = json!(["forward", "forward"]);
    p.lines.push(v.to_string());
    p.write(&d);
    let o = report(&[s(&d)]);
    assert_eq!(common::stderr(&o), "");
    let out = common::stdout(&o);
    assert!(out.contains("3 records, 0 skipped"), "{out}");
    assert!(
        out.contains("hint: binary queries on pocl CPU devices took 67%"),
        "{out}"
    );
}

/// The widest report these tests make: 4 ranks on one node, each building two programs
/// of long kernel names from a source of its own (pyopencl < 2024.2.3 makes every cold
/// build's source unique), querying their binaries on pocl's CPU driver and launching
/// every kernel once: every column, the variants note, the first-launch footnote and
/// both hints. Rank r takes r + 1 times as long.
fn wide_job(dir: &Path) {
    let programs: [&[&str]; 2] = [
        &[
            "advance_particles_with_reflecting_boundaries_and_drag",
            "deposit_charge_on_staggered_grid",
        ],
        &["solve_poisson_equation_red_black_gauss_seidel_sweep"],
    ];
    for rank in 0..4i64 {
        let f = (rank + 1) as f64;
        let mut p = Proc::new(
            "compute-node-0042.cluster.example.org",
            Some(rank),
            7100 + rank as u64,
            1_750_000_000.0,
            "pass",
        );
        let dev = pocl_cpu();
        for (i, kernels) in programs.iter().enumerate() {
            let hash = format!("fnv1a64:{i:08}{rank:08}");
            let id = p.build(kernels, &hash, 0.5 * f, &dev);
            p.query(id, "CL_PROGRAM_BINARY_SIZES", 1.0 * f, &dev);
            p.query(id, "CL_PROGRAM_BINARIES", 0.001, &dev);
            for k in kernels.iter() {
                let mut v = p.common("first_launch", "clEnqueueNDRangeKernel", 3.0 * f, &dev);
                let o = v.as_object_mut().unwrap();
                o.remove("devices");
                o.insert("device".into(), dev.clone());
                o.insert("program".into(), json!(id));
                o.insert("kernel".into(), json!(k));
                o.insert("work_dim".into(), json!(1));
                o.insert("global_size".into(), json!([1 << 20]));
                o.insert("local_size".into(), Value::Null);
                p.lines.push(v.to_string());
            }
        }
        p.write(dir);
    }
}

/// The text with every run of whitespace made one space: what a wrapped line says.
pub fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The words of the text from its first line starting with `from` on (the prose: the
/// note, the footnote and the hints), whatever the line breaks.
fn words_from(text: &str, from: &str) -> Vec<String> {
    let at = text.find(&format!("\n{from}")).expect(from);
    text[at..].split_whitespace().map(str::to_string).collect()
}

#[test]
fn report_fits_120_columns_unless_wide() {
    let d = common::scratch("fits");
    wide_job(&d);
    let o = report(&[s(&d)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let out = common::stdout(&o);
    println!("{out}");
    for l in out.lines() {
        assert!(l.chars().count() <= 120, "{} chars: {l}", l.chars().count());
    }
    // Everything is there: both programs (names shortened), 4 ranks, both hints, the
    // note and the footnote.
    assert!(out.contains("4 ranks, 4 processes on 1 host"), "{out}");
    let row = |out: &str, k: &str| -> String {
        out.lines()
            .find(|l| l.trim_start().starts_with(k))
            .unwrap_or_else(|| panic!("no row for {k}: {out}"))
            .to_string()
    };
    let first = row(&out, "advance_particles");
    assert!(first.contains('…'), "shortened: {first}");
    assert!(
        first.contains("pass") && first.contains("forward"),
        "{first}"
    );
    // Seconds are medians across the 4 ranks (rank r: (r + 1) x 0.5 s, 1.001 s, 2 x 3 s).
    let cols: Vec<&str> = first.split_whitespace().collect();
    assert!(
        cols.windows(3).any(|w| w == ["4", "4", "1.250"]),
        "4 ranks, 4 builds, median build 1.250 s: {first}"
    );
    assert!(first.contains(" 2.501 "), "median query s: {first}");
    assert!(first.contains(" 15.000 "), "median first-launch s: {first}");
    assert!(!first.contains(" / "), "no min / med / max: {first}");
    row(&out, "solve_poisson");
    assert!(out.contains("note: "), "{out}");
    assert!(out.contains("\nlaunches: "), "{out}");
    assert!(
        out.contains("hint: binary queries on pocl CPU devices took"),
        "{out}"
    );
    assert!(
        out.contains("hint: first launches on pocl CPU devices"),
        "{out}"
    );

    let o = report(&["--wide", s(&d)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let wide = common::stdout(&o);
    println!("{wide}");
    assert!(wide.lines().any(|l| l.chars().count() > 120), "{wide}");
    // The full table: kernel names as far as the wide table shows them (40 chars), and
    // min / median / max across ranks.
    let first = row(&wide, "advance_particles_with_reflecting_bound…");
    assert!(first.contains("0.500 / 1.250 / 2.000"), "{first}");
    assert!(first.contains("1.001 / 2.501 / 4.001"), "{first}");
    assert!(first.contains("6.000 / 15.000 / 24.000"), "{first}");
    assert!(wide.contains("build s (min / med / max)"), "{wide}");
    // Fitting only wraps the prose: the same words, in the same order.
    assert_eq!(words_from(&out, "note: "), words_from(&wide, "note: "));
}
