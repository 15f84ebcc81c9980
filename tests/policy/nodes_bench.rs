//! What nodes that share a store gain and pay (issue 38), measured on the simulated
//! cluster of tests/common/hosts.rs: an ignored test, since it is a benchmark
//! (bench/nodes.sh runs it in release and prints its table). 1, 2 and 4 hosts each run the
//! same 2-rank job of distinct programs at the same moment, once with a store of each
//! node's own (on its scratch: the nodes meet nowhere, as before issue 38) and once with
//! the one store in the shared home (the default); the two take turns at going first,
//! each on a fresh cluster (home, scratch, pocl caches and store). It prints, per case,
//! the job's wall (until its last node ended), the compiles in the cluster per program,
//! the CPU of every build and first launch, and what a node paid to wait for another's
//! compile against what that compile took where it ran.

use crate::common::hosts::*;
use crate::common::*;
use crate::hosts::BatchJob;
use std::time::Instant;

/// One job on `nodes` hosts at once.
struct Ran {
    wall: f64,
    compiled: usize,
    cpu: f64,
    /// Builds taken from another node's compile, the seconds each waited for it, and the
    /// seconds that compile took on its node.
    taken: usize,
    waited: f64,
    their_compile: f64,
}

fn one_job(nodes: usize, shared: bool, programs: usize, lines: usize, run: usize) -> Ran {
    let tag = format!("bench-{nodes}-{}-{run}", if shared { "s" } else { "o" });
    let cluster = Cluster::start(&tag);
    let job = BatchJob::of_size(&cluster, programs, 2, 100 * run + 10, lines);
    let hosts: Vec<Host> = (0..nodes)
        .map(|i| Host::new(&cluster, &format!("node-{i}")))
        .collect();
    let t0 = Instant::now();
    let jobs: Vec<Job> = hosts
        .iter()
        .map(|h| {
            let mut c = job.command(h.name());
            if !shared {
                c.env("CLSHIM_NATIVE_STORE", cluster.scratch().join("store"));
            }
            h.spawn(&c)
        })
        .collect();
    for (h, j) in hosts.iter().zip(jobs) {
        let out = j.wait();
        assert!(out.status.success(), "{}: {}", h.name(), stderr(&out));
    }
    let wall = t0.elapsed().as_secs_f64();
    let mut r = Ran {
        wall,
        compiled: 0,
        cpu: 0.0,
        taken: 0,
        waited: 0.0,
        their_compile: 0.0,
    };
    let mut compile_of = std::collections::HashMap::new();
    let mut takes = Vec::new();
    for h in &hosts {
        let records = job.records(h.name());
        for e in ["build", "first_launch"] {
            for rec in events(&records, e) {
                r.cpu += rec["cpu_seconds"].as_f64().unwrap_or(0.0);
                let how = rec["shared"].as_str().unwrap_or("");
                if how.starts_with("compiled") {
                    r.compiled += 1;
                    if e == "build" {
                        let src = rec["source"]["hash"].to_string();
                        compile_of.insert(src, rec["seconds"].as_f64().unwrap_or(0.0));
                    }
                } else if e == "build"
                    && how == "from_store"
                    && rec["from_host"].as_str().is_some_and(|o| o != h.name())
                {
                    takes.push((
                        rec["source"]["hash"].to_string(),
                        rec["peer_wait_seconds"].as_f64().unwrap_or(0.0),
                    ));
                }
            }
        }
    }
    for (src, waited) in takes {
        r.taken += 1;
        r.waited += waited;
        r.their_compile += compile_of.get(&src).copied().unwrap_or(0.0);
    }
    r
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn number(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "a benchmark: bench/nodes.sh runs it"]
fn nodes_sharing_a_store() {
    if !needs(&HOSTS) {
        return;
    }
    let repeat = number("CLSHIM_BENCH_REPEAT", 3);
    let programs = number("CLSHIM_BENCH_PROGRAMS", 6);
    let lines = number("CLSHIM_BENCH_LINES", 600);
    println!(
        "nodes sharing a store: {programs} programs of {lines} lines, 2 ranks a node, \
         {repeat} runs each (medians; own = a store on each node's scratch)"
    );
    println!(
        "| nodes | wall own | wall shared | shared/own | compiles a program own | shared | \
         build+launch CPU shared/own | taken from another node | their wait / their compile |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut run = 0;
    for nodes in [1usize, 2, 4] {
        let mut own = Vec::new();
        let mut shared = Vec::new();
        for i in 0..repeat {
            for first_shared in [i % 2 == 1, i % 2 == 0] {
                run += 1;
                let r = one_job(nodes, first_shared, programs, lines, run);
                if first_shared {
                    shared.push(r)
                } else {
                    own.push(r)
                }
            }
        }
        let wall = |v: &[Ran]| median(v.iter().map(|r| r.wall).collect());
        let cpu = |v: &[Ran]| median(v.iter().map(|r| r.cpu).collect());
        let per = |v: &[Ran]| {
            median(v.iter().map(|r| r.compiled as f64).collect()) / programs as f64 / 2.0
        };
        let taken: usize = shared.iter().map(|r| r.taken).sum();
        let waited: f64 = shared.iter().map(|r| r.waited).sum();
        let theirs: f64 = shared.iter().map(|r| r.their_compile).sum();
        println!(
            "| {nodes} | {:.2} s | {:.2} s | {:.2}x | {:.2} | {:.2} | {:.2}x | {:.1} a job | {} |",
            wall(&own),
            wall(&shared),
            wall(&shared) / wall(&own),
            per(&own),
            per(&shared),
            cpu(&shared) / cpu(&own),
            taken as f64 / repeat as f64,
            if taken == 0 {
                "-".to_string()
            } else {
                format!(
                    "{:.2} s / {:.2} s",
                    waited / taken as f64,
                    theirs / taken as f64
                )
            }
        );
    }
}
