//! "Where are the caches?": the compiler caches each process would use (from its
//! `process` record) and two flags a large run needs: ranks on one host sharing a cache
//! directory (they wait on each other's locks, and pyopencl's lock times out under many
//! ranks), and caches on a network filesystem (slow to reach from every node, and often
//! cleared between jobs), with advice scaled to the case and its trade-off. A cache is
//! flagged only where it exists or the records show it in use (pocl's where a pocl device
//! built, pyopencl's where binaries were asked for or loaded in a Python process, CUDA's
//! where an NVIDIA device built): current pyopencl on pocl never makes its cache.

use crate::report::build_facts::{rank_list, Facts};
use crate::report::rank_key::RankKey;
use crate::schema::is_network_fs;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Ranks of one host sharing a cache from which per-rank caches pay off: pyopencl's lock
/// times out, and writers queue, with many ranks at once.
pub const MANY_RANKS: usize = 8;

/// What to do about the flags, said once under them, scaled to the case: a network
/// filesystem, many ranks sharing a directory on one host, or a few.
pub fn advice(flags: &[Flag]) -> Option<&'static str> {
    if flags.is_empty() {
        return None;
    }
    let network = flags.iter().any(|f| f.kind == "network");
    let most_shared = flags
        .iter()
        .filter(|f| f.kind == "shared")
        .map(|f| f.ranks.len())
        .max()
        .unwrap_or(0);
    Some(if network || most_shared >= MANY_RANKS {
        ADVICE_LARGE
    } else {
        ADVICE_FEW
    })
}

/// Many ranks per host, or a network filesystem.
pub const ADVICE_LARGE: &str = "Large runs give each rank its own POCL_CACHE_DIR and \
     XDG_CACHE_HOME (e.g. .../pocl-$RANK, .../xdg-$RANK) on node-local storage, and keep them \
     between runs (per-rank directories on the shared filesystem survive a job; mirgecom's \
     guide to large systems does both). The trade-off: each rank then compiles every program \
     itself, unless `clshim run --program-cache` has ranks of a node share one compile of it.";

/// A few ranks sharing a directory on local storage.
pub const ADVICE_FEW: &str = "With a few ranks per host a shared cache costs little: ranks \
     wait on each other only while one writes, and reuse each other's builds of the same \
     sources (compile once). Per-rank directories (POCL_CACHE_DIR, XDG_CACHE_HOME) pay off \
     with many ranks per host, where pyopencl's lock times out; then each rank compiles \
     every program itself.";

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
                "{whose} {} ({fs}) is shared by {} on host {}: they reuse each other's builds \
                 and wait while one writes",
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

/// Whether a process's cache is worth a flag: its application's, and existing or used.
fn relevant(
    p: &crate::report::build_facts::ProcessCaches,
    c: &crate::schema::CacheDir,
    nvidia: bool,
) -> bool {
    let whose = match c.cache.as_str() {
        "pyopencl" => p.python,
        "cuda" => nvidia,
        _ => true,
    };
    whose && (c.exists == Some(true) || p.used.contains(c.cache.as_str()))
}

pub fn flags(facts: &Facts) -> Vec<Flag> {
    let mut shared: BTreeMap<(String, String, String), Seen> = BTreeMap::new();
    let mut network: BTreeMap<(String, String), Seen> = BTreeMap::new();
    for p in &facts.processes {
        for c in &p.caches {
            if !relevant(p, c, facts.nvidia) || c.path.ends_with("/uncached") {
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
    if let Some(a) = advice(flags) {
        crate::report::variants::wrap(&mut o, a, "  ");
    }
    o
}

pub fn json(facts: &Facts, flags: &[Flag]) -> Value {
    let mut dirs: BTreeMap<(String, String), Seen> = BTreeMap::new();
    for p in &facts.processes {
        for c in p.caches.iter().filter(|c| relevant(p, c, facts.nvidia)) {
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
        "advice": advice(flags),
    })
}
