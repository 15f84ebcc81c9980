//! The report's rows: turns an [`Aggregate`] into a [`Report`], one [`ProgramRow`] per
//! program and one [`RankRow`] per rank, with the per-program statistics across ranks
//! (min / median / max of per-rank sums), the order (slowest first), the rank labels and
//! the ranks far slower than the median. The hints it carries are decided in `hints`;
//! how rows are printed is `render`'s.

use super::aggregate::{share, Aggregate, Slot, Stats};
use super::aggregate::{ProgramKey, SLOW_FACTOR, SLOW_MARGIN_S};
use crate::report::rank_key::{median, rank_labels, RankKey};
use std::collections::BTreeSet;

#[derive(Debug)]
pub struct ProgramRow {
    pub key: ProgramKey,
    /// Ranks with at least one build, compile or link of the program.
    pub ranks: usize,
    pub builds: usize,
    pub compiles: usize,
    pub links: usize,
    pub queries: usize,
    pub launches: usize,
    pub failed: usize,
    /// Per-rank sums of build/compile/link seconds, across the ranks that touched it.
    pub build: Stats,
    /// Per-rank sums of binary-query seconds, across the same ranks.
    pub query: Stats,
    /// Per-rank sums of first-launch seconds, across the same ranks.
    pub launch: Stats,
    pub policies: BTreeSet<String>,
    pub actions: BTreeSet<String>,
    pub options: BTreeSet<String>,
    /// What the row's linked programs were made from (`link of 2 compiled`).
    pub origins: BTreeSet<String>,
    /// Source hashes seen for the row (more than one when rows group by kernel names and
    /// ranks built different sources, as pyopencl < 2024.2.3 does: it makes every cold
    /// build's source unique).
    pub sources: BTreeSet<String>,
    /// Distinct sources the ranks that built the row first built it from: above 1, the
    /// ranks compiled different variants of the same kernels and shared no build.
    pub rank_variants: usize,
    /// Builds and first launches that compiled nothing: taken from a peer, the store or
    /// pocl's own cache, or served.
    pub reused: usize,
    /// Binary queries (and their seconds) forwarded to a selected pocl CPU device under a
    /// policy other than `pass`.
    pub forwarded_queries: usize,
    pub forwarded_seconds: f64,
    /// A failed build's status and first error line, a few.
    pub errors: BTreeSet<String>,
}

impl ProgramRow {
    /// What kind of program the row is, for the forwarded-query hint.
    pub fn kind(&self) -> ProgramKind {
        if !self.origins.is_empty() || self.links > 0 {
            ProgramKind::Linked
        } else if self.builds + self.compiles == 0 {
            ProgramKind::Unseen
        } else {
            ProgramKind::Built
        }
    }
}

/// Kinds of programs whose binary queries clshim may forward under `substitute`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProgramKind {
    /// Linked from compiled objects or libraries.
    Linked,
    /// Made from a binary, or built where clshim did not see it.
    Unseen,
    /// Built from source that clshim saw.
    Built,
}

impl ProgramRow {
    /// Binary-query seconds / (build + binary-query seconds).
    pub fn query_share(&self) -> f64 {
        share(self.query.total, self.build.total)
    }

    pub fn total(&self) -> f64 {
        self.build.total + self.query.total + self.launch.total
    }
}

#[derive(Debug)]
pub struct RankRow {
    pub key: RankKey,
    /// `3`, `host:pid`, or `host:pid#instance` when processes share a host and pid.
    pub label: String,
    pub hosts: BTreeSet<String>,
    pub pids: BTreeSet<u64>,
    pub processes: usize,
    pub builds: usize,
    pub build_seconds: f64,
    pub queries: usize,
    pub query_seconds: f64,
    pub launches: usize,
    pub launch_seconds: f64,
    pub slow: bool,
}

impl RankRow {
    pub fn total(&self) -> f64 {
        self.build_seconds + self.query_seconds + self.launch_seconds
    }
}

impl Aggregate {
    /// The program rows, most time first.
    pub(super) fn program_rows(&self) -> Vec<ProgramRow> {
        let mut programs: Vec<ProgramRow> = self
            .progs
            .iter()
            .map(|(key, a)| {
                let slots: Vec<&Slot> = a.per_rank.values().collect();
                let stat = |f: fn(&Slot) -> f64| Stats::of(slots.iter().map(|s| f(s)).collect());
                let c = &a.counts;
                let firsts: BTreeSet<u64> = slots.iter().filter_map(|s| s.first_source).collect();
                ProgramRow {
                    rank_variants: firsts.len(),
                    reused: c.reused,
                    forwarded_queries: c.forwarded_queries,
                    forwarded_seconds: c.forwarded_seconds,
                    key: key.clone(),
                    ranks: slots.iter().filter(|s| s.built).count(),
                    builds: c.builds,
                    compiles: c.compiles,
                    links: c.links,
                    queries: c.queries,
                    launches: c.launches,
                    failed: c.failed,
                    build: stat(|s| s.build),
                    query: stat(|s| s.query),
                    launch: stat(|s| s.launch),
                    policies: c.policies.clone(),
                    actions: c.actions.clone(),
                    options: c.options.clone(),
                    origins: c.origins.clone(),
                    sources: c.sources.clone(),
                    errors: c.errors.clone(),
                }
            })
            .collect();
        programs.sort_by(|a, b| {
            b.total()
                .total_cmp(&a.total())
                .then_with(|| a.key.cmp(&b.key))
        });
        programs
    }

    /// The rank rows (slow ones marked) and the median of their totals.
    pub(super) fn rank_rows(&self) -> (Vec<RankRow>, f64) {
        let labels = rank_labels(self.ranks.keys());
        let mut ranks: Vec<RankRow> = self
            .ranks
            .iter()
            .zip(labels)
            .map(|((key, r), label)| RankRow {
                key: key.clone(),
                label,
                hosts: r.hosts.clone(),
                pids: r.pids.clone(),
                processes: r.processes.len(),
                builds: r.builds,
                build_seconds: r.build_seconds,
                queries: r.queries,
                query_seconds: r.query_seconds,
                launches: r.launches,
                launch_seconds: r.launch_seconds,
                slow: false,
            })
            .collect();
        let mut totals: Vec<f64> = ranks.iter().map(RankRow::total).collect();
        totals.sort_by(f64::total_cmp);
        let med = median(&totals);
        if ranks.len() > 1 {
            for r in &mut ranks {
                r.slow = r.total() > SLOW_FACTOR * med && r.total() > med + SLOW_MARGIN_S;
            }
        }
        (ranks, med)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_show_instances_only_where_needed() {
        let p = |pid, i: Option<&str>| RankKey::Process {
            host: "h".into(),
            pid,
            instance: i.map(str::to_string),
        };
        let keys = [
            RankKey::Rank(2),
            p(1, Some("00112233aabbccdd")),
            p(1, Some("ffeeddccbbaa9988")),
            p(2, Some("0123456789abcdef")),
            p(3, None),
        ];
        assert_eq!(
            rank_labels(keys.iter()),
            ["2", "h:1#00112233", "h:1#ffeeddcc", "h:2", "h:3"]
        );
    }
}
