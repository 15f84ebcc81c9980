//! The hosts a run's ranks ran on, for "why does it get slower with more ranks?": how many
//! ranks each host had against the CPUs they could use (online, affinity masks, cgroup
//! limit), whether bound ranks shared CPUs, how many worker threads pocl started, and the
//! hints that follow where the ranks' compiles waited for something other than a peer's
//! compile (the program cache's sharing, which the hints name apart and never blame on
//! cores, other processes or locks). Each hint's advice was measured
//! (docs/performance.md, "Ranks, cores and waiting"); what was measured not to help is
//! not advised. The facts come from the `process` records (`build_facts` gathers them);
//! `cpu_split` shows this section after the ranks' split.

use crate::report::build_facts::ProcessCaches;
use crate::report::busy::{Busy, RankBusy};
use crate::report::rank_key::RankKey;
use crate::schema::parse_cpu_list;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// A host's builds waited this share of their wall time or more for other than a peer's
/// compile ([`Busy::other_waiting_share`]): worth a hint.
pub const WAITING_HINTED: f64 = 0.25;

/// A host and the ranks that ran on it.
#[derive(Debug, Clone)]
pub struct HostRow {
    pub host: String,
    pub ranks: usize,
    /// CPUs online (the largest any process saw).
    pub online: Option<u32>,
    /// The loosest cgroup CPU limit of its processes, where every one had one.
    pub cgroup_limit: Option<f64>,
    /// CPUs some rank's affinity allows (all of them when none was read).
    pub allowed: Option<usize>,
    /// Ranks whose affinity is narrower than the CPUs online.
    pub bound: usize,
    /// CPUs in the affinity of two or more bound ranks, and how many ranks share them.
    pub shared: Vec<usize>,
    pub sharing_ranks: usize,
    /// pocl's worker threads per process (the most any process had), and in all.
    pub pocl_threads: Option<u64>,
    pub pocl_threads_total: u64,
    /// The builds and binary queries of its ranks, wall and CPU.
    pub build: Busy,
}

impl HostRow {
    /// The CPUs the host's ranks may run on together.
    pub fn usable(&self) -> Option<f64> {
        let mut u = self.online.map(f64::from)?;
        if let Some(a) = self.allowed {
            u = u.min(a as f64);
        }
        if let Some(c) = self.cgroup_limit {
            u = u.min(c);
        }
        Some(u)
    }

    /// More ranks than CPUs to run them on: their compiles take turns.
    pub fn outnumbered(&self) -> bool {
        self.usable().is_some_and(|u| self.ranks as f64 > u + 1e-9)
    }

    /// Ranks bound to overlapping CPUs share those CPUs, however many the host has.
    pub fn shares(&self) -> bool {
        self.sharing_ranks > 1
    }

    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = Vec::new();
        if self.outnumbered() {
            f.push("RANKS > CPUS");
        }
        if self.shares() {
            f.push("SHARED CPUS");
        }
        f
    }

    fn affinity_words(&self) -> String {
        let list = |cpus: &[usize]| {
            let shown: Vec<String> = cpus.iter().take(8).map(usize::to_string).collect();
            let more = cpus.len().saturating_sub(8);
            let mut s = shown.join(",");
            if more > 0 {
                let _ = write!(s, " and {more} more");
            }
            s
        };
        match (self.bound, self.allowed) {
            (_, None) => "unknown".into(),
            (0, _) => "unbound".into(),
            (b, _) if self.shares() => format!(
                "{b} bound; {} share CPU{} {}",
                self.sharing_ranks,
                if self.shared.len() == 1 { "" } else { "s" },
                list(&self.shared)
            ),
            (b, _) if b == self.ranks => "bound, apart".into(),
            (b, _) => format!("{b} of {} bound, apart", self.ranks),
        }
    }
}

/// One row per host, from the `process` records and the ranks' build time.
pub fn hosts(processes: &[ProcessCaches], busy: &BTreeMap<RankKey, RankBusy>) -> Vec<HostRow> {
    let mut by_host: BTreeMap<&str, Vec<&ProcessCaches>> = BTreeMap::new();
    for p in processes {
        by_host.entry(&p.host).or_default().push(p);
    }
    by_host
        .into_iter()
        .map(|(host, procs)| {
            // One affinity per rank (its first process's).
            let mut ranks: BTreeMap<&RankKey, &ProcessCaches> = BTreeMap::new();
            for p in &procs {
                ranks.entry(&p.rank).or_insert(p);
            }
            let online = procs.iter().filter_map(|p| p.cpus.as_ref()?.online).max();
            let limits: Vec<f64> = procs
                .iter()
                .filter_map(|p| p.cpus.as_ref()?.cgroup_limit)
                .collect();
            let cgroup_limit =
                (limits.len() == procs.len()).then(|| limits.iter().copied().fold(0.0, f64::max));
            let sets: Vec<Option<BTreeSet<usize>>> = ranks
                .values()
                .map(|p| parse_cpu_list(p.cpus.as_ref()?.affinity.as_deref()?))
                .collect();
            let allowed = sets
                .iter()
                .all(Option::is_some)
                .then(|| {
                    sets.iter()
                        .flatten()
                        .flatten()
                        .collect::<BTreeSet<_>>()
                        .len()
                })
                .filter(|&n| n > 0);
            let narrow: Vec<&BTreeSet<usize>> = sets
                .iter()
                .flatten()
                .filter(|s| online.is_some_and(|n| s.len() < n as usize))
                .collect();
            let mut count: BTreeMap<usize, usize> = BTreeMap::new();
            for s in &narrow {
                for &c in *s {
                    *count.entry(c).or_default() += 1;
                }
            }
            let shared: Vec<usize> = count
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(c, _)| *c)
                .collect();
            let sharing_ranks = narrow
                .iter()
                .filter(|s| s.iter().any(|c| shared.contains(c)))
                .count();
            let threads: Vec<u64> = ranks.values().filter_map(|p| p.pocl_threads).collect();
            let mut build = Busy::default();
            for k in ranks.keys() {
                if let Some(b) = busy.get(*k) {
                    build.add(&b.build);
                }
            }
            HostRow {
                host: host.to_string(),
                ranks: ranks.len(),
                online,
                cgroup_limit,
                allowed,
                bound: narrow.len(),
                shared,
                sharing_ranks,
                pocl_threads: threads.iter().copied().max(),
                pocl_threads_total: threads.iter().sum(),
                build,
            }
        })
        .collect()
}

/// What a host's waiting calls for.
#[derive(Debug, Clone, PartialEq)]
pub enum HostHint {
    /// More ranks than usable CPUs.
    Outnumbered,
    /// Bound ranks share CPUs (and may not outnumber the host's).
    Shared,
    /// The ranks fit the CPUs, yet their compiles waited: something else ran there.
    Unexplained,
}

/// Measured on the GPU machine's 16 cores (pocl 5.0, bench/ranks_split.py, the demo
/// workload; docs/performance.md): 32 ranks waited 48% of their build time (7.18 s per
/// rank, 3.72 s of it CPU), 16 ranks 3% (3.81 s, 3.70 s of CPU).
pub const OUTNUMBERED_MEASURED: &str =
    "with 32 ranks on 16 CPUs each rank's builds took 7.18 s, 48% of it waiting; with 16 \
     ranks, 3.81 s and 3% (docs/performance.md)";

impl HostRow {
    /// The hint its ranks' waiting calls for, if they waited [`WAITING_HINTED`] or more for
    /// something other than a peer's compile.
    pub fn hint(&self) -> Option<HostHint> {
        if self.build.other_waiting_share() < WAITING_HINTED {
            return None;
        }
        Some(if self.shares() {
            HostHint::Shared
        } else if self.outnumbered() {
            HostHint::Outnumbered
        } else if self.usable().is_some() {
            HostHint::Unexplained
        } else {
            // No record says how many CPUs the ranks had: nothing to say they fit them.
            return None;
        })
    }

    pub fn hint_text(&self) -> Option<String> {
        let hint = self.hint()?;
        let b = &self.build;
        let mut waited = format!(
            "on {}, the ranks' builds waited {:.0}% of their time ({:.3} s of {:.3} s)",
            self.host,
            100.0 * b.other_waiting_share(),
            b.other_waiting(),
            b.wall
        );
        if b.peer_waiting() > 0.0 {
            let _ = write!(
                waited,
                " for other than a peer's compile, and {:.3} s for peers' compiles",
                b.peer_waiting()
            );
        }
        let usable = self.usable().map_or("?".into(), |u| format!("{u:.0}"));
        Some(match hint {
            HostHint::Outnumbered => format!(
                "hint: {waited}: {} ranks took turns on {usable} CPUs, so each compile waited for a \
                 core.\n      Run at most {usable} ranks on this host while they build (spread the job \
                 over more nodes): {OUTNUMBERED_MEASURED}.",
                self.ranks
            ),
            HostHint::Shared => format!(
                "hint: {waited}: {} ranks are bound to overlapping CPUs ({}), so they take turns \
                 there while other CPUs may idle.\n      Give each rank CPUs of its own (Open MPI: \
                 --bind-to core --map-by core; MPICH: -bind-to core), or leave the ranks unbound.",
                self.sharing_ranks,
                self.affinity_words()
            ),
            HostHint::Unexplained => format!(
                "note: {waited}, although its {} fit its {usable} CPUs: other processes ran \
                 there (another job, the ranks' own threads:\n      pocl's {}worker threads, MPI \
                 polling), or the compiles waited for the disk or a lock.",
                if self.ranks == 1 {
                    "rank".to_string()
                } else {
                    format!("{} ranks", self.ranks)
                },
                // Counted only where the records name pocl's devices' compute units.
                match self.pocl_threads {
                    Some(_) => format!("{} ", self.pocl_threads_total),
                    None => String::new(),
                }
            ),
        })
    }
}

/// The hosts' table, their flags and their hints.
pub fn text(hosts: &[HostRow]) -> String {
    let mut o = String::new();
    if hosts.is_empty() {
        return o;
    }
    let _ = writeln!(
        o,
        "\nHosts ('RANKS > CPUS': more ranks than the CPUs they may run on; 'SHARED CPUS': ranks bound to overlapping CPUs)"
    );
    let _ = writeln!(
        o,
        " {:<16} {:>5} {:>6} {:>6} {:>6}  {:<24} {:<22} flags",
        "host", "ranks", "online", "cgroup", "usable", "affinity", "pocl worker threads"
    );
    for h in hosts {
        let usable = h.usable().map_or("-".to_string(), |u| format!("{u:.0}"));
        let threads = match h.pocl_threads {
            Some(t) => format!("{t} per rank, {} on {usable}", h.pocl_threads_total),
            None => "-".into(),
        };
        let _ = writeln!(
            o,
            " {:<16} {:>5} {:>6} {:>6} {:>6}  {:<24} {:<22} {}",
            clip(&h.host, 16),
            h.ranks,
            h.online.map_or("-".into(), |n| n.to_string()),
            h.cgroup_limit.map_or("-".into(), |c| format!("{c:.2}")),
            usable,
            clip(&h.affinity_words(), 24),
            clip(&threads, 22),
            h.flags().join(", ")
        );
    }
    for t in hosts.iter().filter_map(HostRow::hint_text) {
        let _ = writeln!(o, "\n{t}");
    }
    o
}

pub fn json(hosts: &[HostRow]) -> Value {
    json!(hosts
        .iter()
        .map(|h| json!({
            "host": h.host,
            "ranks": h.ranks,
            "cpus_online": h.online,
            "cgroup_cpu_limit": h.cgroup_limit,
            "cpus_allowed": h.allowed,
            "usable_cpus": h.usable(),
            "bound_ranks": h.bound,
            "shared_cpus": h.shared,
            "ranks_sharing_cpus": h.sharing_ranks,
            "pocl_worker_threads_per_rank": h.pocl_threads,
            "pocl_worker_threads": h.pocl_threads_total,
            "ranks_outnumber_cpus": h.outnumbered(),
            "ranks_share_cpus": h.shares(),
            "build": h.build.json(),
            "other_waiting_share": h.build.other_waiting_share(),
            "hint": h.hint().map(|k| format!("{k:?}").to_lowercase()),
            "hint_text": h.hint_text(),
        }))
        .collect::<Vec<_>>())
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Cpus;

    fn process(rank: i64, affinity: &str, threads: u64) -> ProcessCaches {
        ProcessCaches {
            host: "node".into(),
            rank: RankKey::Rank(rank),
            python: false,
            caches: vec![],
            used: Default::default(),
            cpus: Some(Cpus {
                online: Some(4),
                affinity: Some(affinity.into()),
                cgroup_limit: None,
            }),
            pocl_threads: Some(threads),
        }
    }

    #[test]
    fn hosts_flag_ranks_over_cpus_and_shared_cpus() {
        let unbound: Vec<_> = (0..4).map(|r| process(r, "0-3", 4)).collect();
        let h = &hosts(&unbound, &BTreeMap::new())[0];
        assert_eq!((h.ranks, h.usable(), h.bound), (4, Some(4.0), 0));
        assert!(!h.outnumbered() && !h.shares());
        assert_eq!(h.pocl_threads_total, 16);
        assert_eq!(h.affinity_words(), "unbound");
        let five: Vec<_> = (0..5).map(|r| process(r, "0-3", 4)).collect();
        assert!(hosts(&five, &BTreeMap::new())[0].outnumbered());
        // Two ranks bound to CPU 0: they share it, and take turns on one CPU.
        let pinned = vec![process(0, "0", 4), process(1, "0", 4)];
        let h = &hosts(&pinned, &BTreeMap::new())[0];
        assert!(h.shares() && h.outnumbered(), "{h:?}");
        assert_eq!(h.affinity_words(), "2 bound; 2 share CPU 0");
        assert_eq!(h.flags(), vec!["RANKS > CPUS", "SHARED CPUS"]);
        let apart = vec![process(0, "0-1", 4), process(1, "2-3", 4)];
        let h = &hosts(&apart, &BTreeMap::new())[0];
        assert!(!h.shares() && !h.outnumbered());
        assert_eq!(h.affinity_words(), "bound, apart");
    }

    #[test]
    fn hints_follow_the_waiting_and_its_cause() {
        let waited = |rows: Vec<ProcessCaches>, share: f64| {
            let busy: BTreeMap<RankKey, RankBusy> = rows
                .iter()
                .map(|p| {
                    let mut b = RankBusy::default();
                    b.build.record(1.0, Some(1.0 - share));
                    (p.rank.clone(), b)
                })
                .collect();
            hosts(&rows, &busy).remove(0)
        };
        let five: Vec<_> = (0..5).map(|r| process(r, "0-3", 4)).collect();
        assert_eq!(waited(five.clone(), 0.1).hint(), None);
        let h = waited(five, 0.5);
        assert_eq!(h.hint(), Some(HostHint::Outnumbered));
        let t = h.hint_text().unwrap();
        assert!(t.contains("5 ranks took turns on 4 CPUs"), "{t}");
        assert!(t.contains("Run at most 4 ranks"), "{t}");
        let pinned = vec![process(0, "0", 4), process(1, "0", 4)];
        let h = waited(pinned, 0.5);
        assert_eq!(h.hint(), Some(HostHint::Shared));
        assert!(h.hint_text().unwrap().contains("--bind-to core"));
        let fit: Vec<_> = (0..2).map(|r| process(r, "0-3", 4)).collect();
        let h = waited(fit, 0.5);
        assert_eq!(h.hint(), Some(HostHint::Unexplained));
        assert!(h
            .hint_text()
            .unwrap()
            .contains("although its 2 ranks fit its 4 CPUs"));
        assert!(h.hint_text().unwrap().contains("pocl's 8 worker threads"));
        let mut unnamed = h.clone();
        unnamed.pocl_threads = None;
        unnamed.pocl_threads_total = 0;
        let t = unnamed.hint_text().unwrap();
        assert!(
            t.contains("pocl's worker threads") && !t.contains(" 0 worker"),
            "{t}"
        );
        // Waiting for a peer's compile is no core, process or lock to blame.
        let mut peer = RankBusy::default();
        peer.build.record_waiting(1.0, Some(0.05), Some(0.85));
        let fit: Vec<_> = (0..2).map(|r| process(r, "0-3", 4)).collect();
        let busy: BTreeMap<RankKey, RankBusy> = [(RankKey::Rank(0), peer)].into_iter().collect();
        let h = hosts(&fit, &busy).remove(0);
        assert_eq!(h.hint(), None, "{h:?}");
        // Without the CPUs in the records, nothing says the ranks fit them.
        let mut unknown = process(0, "0-3", 4);
        unknown.cpus = None;
        assert_eq!(waited(vec![unknown], 0.5).hint(), None);
        let alone = waited(vec![process(0, "0-3", 4)], 0.5);
        assert!(alone
            .hint_text()
            .unwrap()
            .contains("although its rank fit its 4 CPUs"));
    }
}
