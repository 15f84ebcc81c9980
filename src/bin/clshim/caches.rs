//! "Where are the caches?": the compiler caches each process would use (from its
//! `process` record) and two flags a large run needs: ranks on one host sharing a cache
//! directory (they wait on each other's locks, and pyopencl's lock times out under many
//! ranks), and caches on a network filesystem (slow to reach from every node, and often
//! cleared between jobs), with what large runs do about it. pyopencl's cache counts only
//! for Python processes, CUDA's only where an NVIDIA device built something.

use crate::build_facts::{rank_list, Facts};
use crate::report::RankKey;
use crate::schema::is_network_fs;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// What large runs do, said once under the flags.
pub const ADVICE: &str = "Large runs give each rank its own POCL_CACHE_DIR and XDG_CACHE_HOME \
     (e.g. .../pocl-$RANK, .../xdg-$RANK) on node-local storage, and keep them between runs (per-rank \
     directories on the shared filesystem survive a job; mirgecom's guide to large systems does both).";

#[derive(Debug)]
pub struct Flag {
    /// `shared` or `network`.
    pub kind: &'static str,
    pub cache: String,
    pub path: String,
    pub fs: Option<String>,
    /// The host, for a shared directory.
    pub host: Option<String>,
    pub ranks: BTreeSet<RankKey>,
}

impl Flag {
    pub fn text(&self) -> String {
        let fs = self.fs.as_deref().unwrap_or("?");
        let whose = match self.cache.as_str() {
            "pocl" => "pocl's kernel cache",
            "pyopencl" => "pyopencl's binary cache",
            "cuda" => "CUDA's cache",
            other => other,
        };
        match self.kind {
            "shared" => format!(
                "{whose} {} ({fs}) is shared by {} on host {}: they wait on each other",
                self.path,
                rank_list(&self.ranks),
                self.host.as_deref().unwrap_or("?")
            ),
            _ => format!(
                "{whose} {} is on {fs}, a network filesystem ({})",
                self.path,
                rank_list(&self.ranks)
            ),
        }
    }
}

/// A directory's filesystem and the ranks that would use it.
type Seen = (Option<String>, BTreeSet<RankKey>);

fn relevant(cache: &str, python: bool, nvidia: bool) -> bool {
    match cache {
        "pyopencl" => python,
        "cuda" => nvidia,
        _ => true,
    }
}

pub fn flags(facts: &Facts) -> Vec<Flag> {
    let mut shared: BTreeMap<(String, String, String), Seen> = BTreeMap::new();
    let mut network: BTreeMap<(String, String), Seen> = BTreeMap::new();
    for p in &facts.processes {
        for c in &p.caches {
            if !relevant(&c.cache, p.python, facts.nvidia) || c.path.ends_with("/uncached") {
                continue;
            }
            let e = shared
                .entry((p.host.clone(), c.cache.clone(), c.path.clone()))
                .or_insert_with(|| (c.fs.clone(), BTreeSet::new()));
            e.1.insert(p.rank.clone());
            if c.fs.as_deref().is_some_and(is_network_fs) {
                let e = network
                    .entry((c.cache.clone(), c.path.clone()))
                    .or_insert_with(|| (c.fs.clone(), BTreeSet::new()));
                e.1.insert(p.rank.clone());
            }
        }
    }
    let mut out = Vec::new();
    for ((host, cache, path), (fs, ranks)) in shared {
        if ranks.len() > 1 {
            out.push(Flag {
                kind: "shared",
                cache,
                path,
                fs,
                host: Some(host),
                ranks,
            });
        }
    }
    for ((cache, path), (fs, ranks)) in network {
        out.push(Flag {
            kind: "network",
            cache,
            path,
            fs,
            host: None,
            ranks,
        });
    }
    out
}

/// Flags shown in the text; the JSON has all.
pub const FLAGS_SHOWN: usize = 6;

pub fn text(flags: &[Flag]) -> String {
    let mut o = String::new();
    if flags.is_empty() {
        return o;
    }
    let _ = writeln!(o, "\nCaches:");
    for f in flags.iter().take(FLAGS_SHOWN) {
        let _ = writeln!(o, "  {}", f.text());
    }
    if flags.len() > FLAGS_SHOWN {
        let _ = writeln!(
            o,
            "  ... {} more (--json lists them)",
            flags.len() - FLAGS_SHOWN
        );
    }
    crate::variants::wrap(&mut o, ADVICE, "  ");
    o
}

pub fn json(facts: &Facts, flags: &[Flag]) -> Value {
    let mut dirs: BTreeMap<(String, String), Seen> = BTreeMap::new();
    for p in &facts.processes {
        for c in &p.caches {
            dirs.entry((c.cache.clone(), c.path.clone()))
                .or_insert_with(|| (c.fs.clone(), BTreeSet::new()))
                .1
                .insert(p.rank.clone());
        }
    }
    json!({
        "directories": dirs.iter().map(|((cache, path), (fs, ranks))| json!({
            "cache": cache, "path": path, "fs": fs,
            "network": fs.as_deref().is_some_and(is_network_fs),
            "ranks": ranks.len(), "rank_list": rank_list(ranks),
        })).collect::<Vec<_>>(),
        "flags": flags.iter().map(|f| json!({
            "kind": f.kind, "cache": f.cache, "path": f.path, "fs": f.fs, "host": f.host,
            "ranks": rank_list(&f.ranks), "text": f.text(),
        })).collect::<Vec<_>>(),
        "advice": (!flags.is_empty()).then_some(ADVICE),
    })
}
