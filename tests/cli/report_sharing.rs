//! What `clshim report` says of a job whose ranks share their compiles (issues 37 and 38),
//! from trace files written here in the shape the library writes under the program cache:
//! no note says ranks reuse none of each other's builds where the records say they took
//! them; the waits for a peer's compile are named apart from other waiting, and blame no
//! other process or lock; a first-launch hint only where the launches' CPU shows pocl
//! compiling, and never for launches taken from a cache; per host and per program, the
//! builds compiled, taken from a peer, from another node, from the store, and the waits;
//! builds taken from the store's kept compiles are counted as such, and no line sends the
//! user to a warm step.

use crate::cli_report::flat;
use crate::common::{self, report, s};
use crate::ranks::{build, launch, report_json};
use serde_json::{json, Value};
use std::path::Path;

const T: f64 = 1.75e9;

/// A rank's trace file on `host`, its process under the program cache; `cpus` as the
/// `process` record gives them.
fn rank_file(dir: &Path, host: &str, rank: i64, cpus: Option<Value>, records: &[Value]) {
    std::fs::create_dir_all(dir).unwrap();
    let pid = 100 + rank;
    let mut process = json!({
        "schema": 1, "event": "process", "pid": pid, "instance": format!("{rank:016x}"),
        "rank": rank, "tid": pid, "ts": T, "seconds": 0.0, "host": host,
        "policy": "pass", "program_cache": true,
    });
    if let Some(c) = cpus {
        process["cpus"] = c;
    }
    let mut text = process.to_string() + "\n";
    for r in records {
        let mut r = r.clone();
        for (k, v) in [
            ("schema", json!(1)),
            ("pid", json!(pid)),
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
        dir.join(format!("clshim-{host}-r{rank}-p{pid}.jsonl")),
        text,
    )
    .unwrap();
}

/// `r` as the program cache records it: `shared`, the wait for a peer, the node whose
/// rank kept what it took from the store.
fn shared(mut r: Value, how: &str, waited: Option<f64>, from_host: Option<&str>) -> Value {
    r["shared"] = json!(how);
    if let Some(w) = waited {
        r["peer_wait_seconds"] = json!(w);
    }
    if let Some(h) = from_host {
        r["from_host"] = json!(h);
    }
    r
}

fn text_of(d: &Path) -> String {
    let o = report(&[s(d)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    common::stdout(&o)
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64().is_some_and(|x| (x - want).abs() < 1e-6)
}

/// Issue 37: 16 ranks build 20 programs that all name their kernel `loopy_kernel`, each
/// rank starting at another one (so their first sources differ); rank 0 compiles them and
/// the others take its compiles (from a peer, from the store, served, or pocl's own cache
/// answered). No note may say that each rank compiles its own variant and none reuses
/// another's build. Where every rank compiled, the note stays.
#[test]
fn ranks_that_took_each_others_builds_are_never_said_to_reuse_none() {
    for how in ["from_peer", "from_store", "own_cache", "served", "compiled"] {
        let d = common::scratch(&format!("sharing-variants-{how}"));
        for rank in 0..16i64 {
            let records: Vec<Value> = (0..20i64)
                .map(|i| {
                    let program = ((rank + i) % 20) as u64 + 1;
                    let mut b = build(program, T + 1.0 + 0.2 * i as f64, 0.1, Some(0.1));
                    b["kernels"] = json!(["loopy_kernel"]);
                    match how {
                        _ if rank == 0 => shared(b, "compiled", None, None),
                        "served" => {
                            b["served"] = json!("store");
                            b
                        }
                        "from_store" => shared(b, how, None, Some("node")),
                        "compiled" => shared(b, how, None, None),
                        _ => shared(b, how, Some(0.05), None),
                    }
                })
                .collect();
            rank_file(&d, "node", rank, None, &records);
        }
        let text = text_of(&d);
        let v = report_json(&[s(&d)]);
        if how == "compiled" {
            assert!(
                flat(&text).contains("none reuses another's build"),
                "{text}"
            );
            assert!(v["variants_note"].is_string(), "{:#}", v["variants_note"]);
        } else {
            assert!(!flat(&text).contains("none reuses"), "{how}: {text}");
            assert!(
                !flat(&text).contains("compiles its own variant"),
                "{how}: {text}"
            );
            assert!(
                v["variants_note"].is_null(),
                "{how}: {:#}",
                v["variants_note"]
            );
        }
    }
}

/// Issue 37: two ranks fit their host's 4 CPUs; rank 0 compiles and rank 1 waits for its
/// compile. Wall less CPU is then mostly that wait, which the report names as waiting for a
/// peer's compile, apart from other waiting; no note blames other processes, the disk or a
/// lock for it. Where other waiting remains large, the note gives its share of the time and
/// names the wait for peers apart.
#[test]
fn waiting_for_a_peers_compile_is_named_apart_from_other_waiting() {
    let cpus = json!({"online": 4, "affinity": "0-3", "cgroup_limit": null});
    let d = common::scratch("sharing-peer-wait");
    rank_file(
        &d,
        "node",
        0,
        Some(cpus.clone()),
        &[shared(
            build(1, T + 1.0, 1.0, Some(1.0)),
            "compiled",
            None,
            None,
        )],
    );
    rank_file(
        &d,
        "node",
        1,
        Some(cpus.clone()),
        &[shared(
            build(1, T + 1.0, 1.0, Some(0.02)),
            "from_peer",
            Some(0.95),
            None,
        )],
    );
    let text = text_of(&d);
    let words = flat(&text);
    assert!(!words.contains("other processes ran there"), "{text}");
    assert!(!words.contains("the disk or a lock"), "{text}");
    assert!(
        words.contains("peer wait: for a peer's or another node's compile"),
        "{text}"
    );
    let v = report_json(&[s(&d)]);
    let split = &v["compiling_and_waiting"];
    let r1 = &split["ranks"][1]["build"];
    assert!(close(&r1["peer_wait_seconds"], 0.95), "{r1:#}");
    assert!(close(&r1["other_waiting_seconds"], 0.03), "{r1:#}");
    assert!(close(&r1["waiting_seconds"], 0.98), "{r1:#}");
    assert!(split["hosts"][0]["hint"].is_null(), "{split:#}");

    // Rank 0 also waited a second of its own, and rank 1 waited 1.9 s for it: 1.05 s of
    // other waiting in 4 s.
    let d = common::scratch("sharing-peer-wait-other");
    rank_file(
        &d,
        "node",
        0,
        Some(cpus.clone()),
        &[shared(
            build(1, T + 1.0, 2.0, Some(1.0)),
            "compiled",
            None,
            None,
        )],
    );
    rank_file(
        &d,
        "node",
        1,
        Some(cpus),
        &[shared(
            build(1, T + 1.0, 2.0, Some(0.05)),
            "from_peer",
            Some(1.9),
            None,
        )],
    );
    let text = text_of(&d);
    println!("{text}");
    let words = flat(&text);
    assert!(
        words.contains(
            "note: on node, the ranks' builds waited 26% of their time (1.050 s of 4.000 s) \
             for other than a peer's compile, and 1.900 s for peers' compiles, although its 2 \
             ranks fit its 4 CPUs"
        ),
        "{words}"
    );
    assert!(words.contains("other processes ran there"), "{words}");
    let v = report_json(&[s(&d)]);
    assert_eq!(
        v["compiling_and_waiting"]["hosts"][0]["hint"],
        "unexplained"
    );
}

/// Issue 37: first launches that took most of the job's time but whose CPU shows no
/// compile (queued behind other work), or that took their kernels from the store, a peer
/// or pocl's own cache, get no hint that the run lacked a kernel cache. Launches whose
/// CPU shows pocl compiling still get it, with what their CPU measured.
#[test]
fn the_first_launch_hint_only_where_launches_compiled() {
    let d = common::scratch("sharing-queued");
    let mut records = vec![build(1, T + 1.0, 0.1, Some(0.1))];
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        let mut l = launch(1, T + 2.0 + 4.0 * i as f64, 3.0, 10.0 + i as f64, 0.05);
        l["kernel"] = json!(k);
        records.push(l);
    }
    rank_file(&d, "node", 0, None, &records);
    let text = text_of(&d);
    assert!(!text.contains("hint: first launches"), "{text}");
    assert!(!flat(&text).contains("POCL_CACHE_DIR"), "{text}");
    assert!(report_json(&[s(&d)])["first_launch_hint"].is_null());

    for how in ["from_store", "from_peer", "own_cache"] {
        let d = common::scratch(&format!("sharing-launch-{how}"));
        let mut records = vec![shared(build(1, T + 1.0, 0.1, Some(0.0)), how, None, None)];
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            // The kernel's run keeps pocl's threads busy: CPU, but no compile.
            let mut l = launch(1, T + 2.0 + 4.0 * i as f64, 3.0, 10.0 + 4.0 * i as f64, 3.0);
            l["kernel"] = json!(k);
            records.push(shared(l, how, Some(0.01), Some("node")));
        }
        rank_file(&d, "node", 0, None, &records);
        let text = text_of(&d);
        assert!(!text.contains("hint: first launches"), "{how}: {text}");
        assert!(
            report_json(&[s(&d)])["first_launch_hint"].is_null(),
            "{how}"
        );
    }

    // The same launches with pocl's threads busy all along: the hint, and its measure.
    let d = common::scratch("sharing-compiled-launches");
    let mut records = vec![build(1, T + 1.0, 0.1, Some(0.1))];
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        let mut l = launch(1, T + 2.0 + 4.0 * i as f64, 3.0, 10.0 + 4.0 * i as f64, 2.5);
        l["kernel"] = json!(k);
        records.push(l);
    }
    rank_file(&d, "node", 0, None, &records);
    let text = text_of(&d);
    println!("{text}");
    let words = flat(&text);
    assert!(
        words.contains("hint: first launches on pocl CPU devices took 99%"),
        "{words}"
    );
    assert!(
        words.contains("pocl's threads were busy for 7.500 s of them"),
        "{words}"
    );
    let h = &report_json(&[s(&d)])["first_launch_hint"];
    assert!(close(&h["compile_seconds"], 7.5), "{h:#}");

    // Two threads of one process launch at once, each reading the CPU of both compiles:
    // pocl's threads were busy for no longer than the launches took.
    let d = common::scratch("sharing-two-launchers");
    let mut records = vec![build(1, T + 1.0, 0.1, Some(0.1))];
    for (tid, k) in [(1, "a"), (2, "b")] {
        let mut l = launch(1, T + 2.0, 3.0, 10.0, 6.0);
        l["kernel"] = json!(k);
        l["tid"] = json!(tid);
        records.push(l);
    }
    rank_file(&d, "node", 0, None, &records);
    let words = flat(&text_of(&d));
    assert!(
        words.contains("(3.000 s of 3.100 s), and pocl's threads were busy for 3.000 s of them"),
        "{words}"
    );

    // Under the program cache, what it kept of those compiles for later jobs, as the
    // records say; no advice to set up pocl's cache by hand.
    let d = common::scratch("sharing-compiled-launches-kept");
    let mut records = vec![shared(
        build(1, T + 1.0, 0.1, Some(0.1)),
        "compiled",
        None,
        None,
    )];
    for (i, k) in ["a", "b", "c"].iter().enumerate() {
        let mut l = launch(1, T + 2.0 + 4.0 * i as f64, 3.0, 10.0 + 4.0 * i as f64, 2.5);
        l["kernel"] = json!(k);
        let mut l = shared(l, "compiled", None, None);
        if i < 2 {
            l["kept_in_store"] = json!(true);
        } else {
            l["kept_in_store"] = json!(false);
            l["not_kept"] = json!("the compile used __TIME__");
        }
        records.push(l);
    }
    rank_file(&d, "node", 0, None, &records);
    let words = flat(&text_of(&d));
    assert!(
        words.contains(
            "No cache of this job held these compiles: the program cache keeps them in the \
             store, where later jobs take them; 2 of the 3 launches that compiled under it were \
             kept, 1 not kept (1 they hold the time of the compile)."
        ),
        "{words}"
    );
    assert!(!words.contains("POCL_CACHE_DIR"), "{words}");
    // Records that say nothing of the store promise no later job anything.
    for f in std::fs::read_dir(&d).unwrap() {
        let p = f.unwrap().path();
        let t = std::fs::read_to_string(&p).unwrap();
        let t = t
            .replace(r#","kept_in_store":true"#, "")
            .replace(r#","kept_in_store":false"#, "")
            .replace(r#","not_kept":"the compile used __TIME__""#, "");
        std::fs::write(&p, t).unwrap();
    }
    let words = flat(&text_of(&d));
    assert!(
        words.contains(
            "No cache of this job held these compiles, and their records do not say the store \
             kept any"
        ) && !words.contains("later jobs take them"),
        "{words}"
    );
}

/// Issue 38: a job over two nodes sharing a store. On node a, rank 0 compiles program 1 and
/// rank 1 takes it from its peer; on node b, rank 2 waits for node a's compile and takes it
/// from the store, and rank 3 takes it from rank 2. Program 2 was kept by an earlier job on
/// node b: rank 2 takes it from the store, rank 3 from rank 2, and node a's ranks from the
/// store (kept by node b). The first launches go the same way. Per host and per program: the
/// builds compiled, from a peer, from another node, from the store, and the waits. Nothing
/// taken from the store is a repeat.
#[test]
fn per_host_and_per_program_what_was_compiled_and_what_came_from_another_node() {
    let d = common::scratch("sharing-hosts");
    let b = |p: u64, how: &str, wait: Option<f64>, from: Option<&str>| {
        shared(build(p, T + 1.0, 1.0, Some(0.1)), how, wait, from)
    };
    let l = |p: u64, how: &str, wait: Option<f64>, from: Option<&str>| {
        shared(
            launch(p, T + 5.0 + p as f64, 0.5, 10.0 + p as f64, 0.1),
            how,
            wait,
            from,
        )
    };
    rank_file(
        &d,
        "a",
        0,
        None,
        &[
            b(1, "compiled", None, None),
            b(2, "from_store", None, Some("b")),
            l(1, "compiled", None, None),
            l(2, "from_store", None, Some("b")),
        ],
    );
    rank_file(
        &d,
        "a",
        1,
        None,
        &[
            b(1, "from_peer", Some(0.9), None),
            b(2, "from_store", None, Some("b")),
            l(1, "from_peer", Some(0.4), None),
            l(2, "from_store", None, Some("b")),
        ],
    );
    rank_file(
        &d,
        "b",
        2,
        None,
        &[
            b(1, "from_store", Some(0.8), Some("a")),
            b(2, "from_store", None, Some("b")),
            l(1, "from_store", Some(0.3), Some("a")),
            l(2, "from_store", None, Some("b")),
        ],
    );
    rank_file(
        &d,
        "b",
        3,
        None,
        &[
            b(1, "from_peer", Some(0.85), None),
            b(2, "from_peer", Some(0.1), None),
            l(1, "from_peer", Some(0.35), None),
            l(2, "from_peer", Some(0.05), None),
        ],
    );
    let v = report_json(&[s(&d)]);
    let r = &v["repeats"];
    assert_eq!(r["repeat_builds"], 0, "nothing taken is a repeat: {r:#}");
    assert_eq!(r["repeat_first_launches"], 0, "{r:#}");
    let hosts = r["by_host"].as_array().expect("by_host");
    let host = |name: &str| {
        hosts
            .iter()
            .find(|h| h["host"] == name)
            .unwrap_or_else(|| panic!("{name}: {hosts:#?}"))
    };
    let counts = |x: &Value| {
        [
            "compiled",
            "from_peer",
            "from_other_node",
            "from_store",
            "waits",
        ]
        .map(|k| x[k].as_u64().unwrap_or_else(|| panic!("{k}: {x:#}")))
    };
    // from_store counts every build taken from the store; from_other_node those of them
    // another node kept.
    let a = host("a");
    assert_eq!(a["ranks"], 2, "{a:#}");
    assert_eq!(counts(&a["builds"]), [1, 1, 2, 2, 1], "{a:#}");
    assert_eq!(counts(&a["first_launches"]), [1, 1, 2, 2, 1], "{a:#}");
    assert!(close(&a["builds"]["peer_wait_seconds"], 0.9), "{a:#}");
    let bh = host("b");
    assert_eq!(counts(&bh["builds"]), [0, 2, 1, 2, 3], "{bh:#}");
    assert!(close(&bh["builds"]["peer_wait_seconds"], 1.75), "{bh:#}");
    assert!(
        close(&bh["first_launches"]["peer_wait_seconds"], 0.7),
        "{bh:#}"
    );
    let program = |k: &str| {
        r["by_program"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["kernels"] == json!([k]))
            .unwrap()
            .clone()
    };
    assert_eq!(counts(&program("k1")["builds"]), [1, 2, 1, 1, 3]);
    assert_eq!(counts(&program("k2")["builds"]), [0, 1, 2, 3, 1]);
    assert_eq!(counts(&program("k2")["first_launches"]), [0, 1, 2, 3, 1]);

    // In the text: a table per host and one per program, with the counts in that order.
    let text = text_of(&d);
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("Builds per host"))
        .unwrap_or_else(|| panic!("{text}"));
    let row = |from: usize, first: &str, what: &str| -> Vec<String> {
        lines[from..]
            .iter()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|c| c.len() > 2 && c[0] == first && c.contains(&what))
            .unwrap_or_else(|| panic!("{first} {what}: {text}"))
            .iter()
            .map(|c| c.to_string())
            .collect()
    };
    // host ranks what compiled peer node store cache served waits waited-s
    assert_eq!(
        row(at, "a", "builds")[3..8],
        ["1", "1", "2", "0", "0"],
        "{text}"
    );
    assert_eq!(
        row(at, "b", "builds")[3..8],
        ["0", "2", "1", "1", "0"],
        "{text}"
    );
    assert_eq!(
        row(at, "k2", "launches")[4..9],
        ["0", "1", "2", "1", "0"],
        "{text}"
    );
    assert!(flat(&text).contains("node: from the store, kept by a rank of another node"));
}

/// Builds under the program cache, counted where the report counts builds served and
/// compiled: those the store served the driver's binary for, those that took a compile
/// the store kept (another node's among them), a peer's, pocl's own cache's, and those
/// compiled. No line sends the user to a warm step.
#[test]
fn builds_from_the_stores_kept_compiles_are_counted_as_such() {
    let d = common::scratch("sharing-builds-line");
    let no_entry = json!({"kind": "no_entry", "why": "device 0: no entry"});
    let mut served = build(1, T + 1.0, 0.01, Some(0.01));
    served["served"] = json!("store");
    let mut compiled = shared(build(2, T + 2.0, 1.0, Some(1.0)), "compiled", None, None);
    compiled["not_served"] = no_entry.clone();
    let mut records = vec![served, compiled];
    for (i, (how, from)) in [
        ("from_store", Some("node")),
        ("from_store", Some("other")),
        ("from_store", None),
        ("from_peer", None),
        ("own_cache", None),
    ]
    .into_iter()
    .enumerate()
    {
        let mut b = shared(
            build(3 + i as u64, T + 3.0 + i as f64, 0.2, Some(0.01)),
            how,
            Some(0.1),
            from,
        );
        b["not_served"] = no_entry.clone();
        records.push(b);
    }
    rank_file(&d, "node", 0, None, &records);
    let text = text_of(&d);
    let words = flat(&text);
    assert!(
        words.contains(
            "program cache: 1 of 7 source builds served from the native store: 6 with no \
             driver's binary in the store yet; of those, 3 took the store's kept compiles \
             (1 another node's), 1 a peer's compile, 1 pocl's own cache's, 1 compiled"
        ),
        "{text}"
    );
    for warm in ["--warm", "clshim warm", "warm store", "warm step"] {
        assert!(!words.contains(warm), "{warm}: {text}");
    }
    let b = &report_json(&[s(&d)])["program_cache_builds"];
    assert_eq!(b["served"], 1, "{b:#}");
    assert_eq!(b["compiled"], 1, "{b:#}");
    assert_eq!(b["from_store"], 3, "{b:#}");
    assert_eq!(b["from_other_node"], 1, "{b:#}");
    assert_eq!(b["from_peer"], 1, "{b:#}");
    assert_eq!(b["own_cache"], 1, "{b:#}");
}

/// `--against`: NEW took every build of its program from the store's kept compiles (two
/// ranks, one of them another node's) after OLD compiled it: NEW compiled nothing, and the
/// comparison says so rather than "built again". The ranks' wait for that compile is no
/// longer counted as compiles waiting longer.
#[test]
fn against_an_earlier_run_builds_taken_from_the_store_are_not_built_again() {
    let d = common::scratch("sharing-against");
    let (old, new) = (d.path("old"), d.path("new"));
    for rank in 0..2 {
        rank_file(
            &old,
            "a",
            rank,
            None,
            &[shared(
                build(1, T + 1.0, 2.0, Some(2.0)),
                "compiled",
                None,
                None,
            )],
        );
        rank_file(
            &new,
            "a",
            rank,
            None,
            &[shared(
                build(1, T + 1.0, 1.0, Some(0.1)),
                "from_store",
                Some(0.9),
                Some(if rank == 0 { "a" } else { "b" }),
            )],
        );
    }
    let o = report(&[s(&new), "--against", s(&old)]);
    assert_eq!(o.status.code(), Some(0), "{}", common::stderr(&o));
    let text = common::stdout(&o);
    println!("{text}");
    let words = flat(&text);
    assert!(
        words.contains("programs: 0 built again")
            && words.contains("1 taken from kept compiles in NEW"),
        "{text}"
    );
    assert!(words.contains("compiles waited as long"), "{text}");
    assert!(
        words.contains("+0.00 s in the 0 programs only NEW compiled")
            && words.contains("in the 1 program only OLD compiled"),
        "{text}"
    );
    assert!(words.contains("peer wait NEW 0.90 s, OLD 0.00 s"), "{text}");
    let v = report_json(&[s(&new), "--against", s(&old)]);
    let p = &v["programs"][0];
    assert_eq!(p["status"], "taken from kept compiles", "{p:#}");
    assert_eq!(p["new_taken"]["from_store"], 2, "{p:#}");
    assert_eq!(p["new_taken"]["from_other_node"], 1, "{p:#}");
    let n = &v["new_per_rank"];
    assert!(close(&n["peer_wait_seconds"], 0.9), "{v:#}");
    assert!(close(&n["other_waiting_seconds"], 0.0), "{v:#}");
    assert!(close(&n["waiting_seconds"], 0.9), "{v:#}");
}
