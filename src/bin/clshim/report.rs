//! Aggregation for `clshim report`: turns the records of a trace directory into the
//! answer to "where does kernel-build time go across my ranks?". This module owns the
//! grouping rules (programs by source hash plus kernel names across processes; binary
//! queries joined to the build of the same program in the same process; ranks by the
//! records' `rank`, else `host:pid`), the statistics (min / median / max across ranks,
//! the share of build time spent in binary queries, ranks far slower than the median),
//! the pocl-CPU hint, and both renderings of the result: the text table and the
//! `--json` document.

use crate::traces::{Event, Record, Traces};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

/// A rank is "far slower" when its total exceeds both of these relative to the median.
pub const SLOW_FACTOR: f64 = 1.5;
pub const SLOW_MARGIN_S: f64 = 0.5;
/// The hint is printed when pocl-CPU binary queries under `pass` exceed this share.
pub const HINT_SHARE: f64 = 0.2;

/// Who a record belongs to: its MPI rank, or its process when no rank is known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RankKey {
    Rank(i64),
    Process(String, u64),
}

impl RankKey {
    pub fn label(&self) -> String {
        match self {
            RankKey::Rank(r) => r.to_string(),
            RankKey::Process(h, p) => format!("{h}:{p}"),
        }
    }
}

/// What the report knows about the process that wrote one file.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    pub host: String,
    pub policy: Option<String>,
}

/// The process of every file: from its `process` record, else from its file name.
pub fn processes(t: &Traces) -> Vec<ProcessInfo> {
    t.files
        .iter()
        .map(|f| {
            let header = f.records.iter().find(|r| r.event == Event::Process);
            ProcessInfo {
                host: header
                    .and_then(|h| h.host.clone())
                    .or_else(|| f.name_host.clone())
                    .unwrap_or_else(|| "?".into()),
                policy: header.and_then(|h| h.policy.clone()),
            }
        })
        .collect()
}

pub fn rank_key(r: &Record, procs: &[ProcessInfo]) -> RankKey {
    match r.rank {
        Some(n) => RankKey::Rank(n),
        None => RankKey::Process(procs[r.file].host.clone(), r.pid),
    }
}

/// A program across processes: source hash (or a link of hashes) plus kernel names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProgramKey {
    pub hash: Option<String>,
    pub kernels: Vec<String>,
}

/// min / median / max / total of per-rank sums.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub total: f64,
}

pub fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

impl Stats {
    fn of(mut v: Vec<f64>) -> Stats {
        if v.is_empty() {
            return Stats::default();
        }
        v.sort_by(f64::total_cmp);
        Stats {
            min: v[0],
            median: median(&v),
            max: v[v.len() - 1],
            total: v.iter().sum(),
        }
    }

    fn json(&self) -> Value {
        json!({"min": self.min, "median": self.median, "max": self.max, "total": self.total})
    }
}

#[derive(Debug)]
pub struct ProgramRow {
    pub key: ProgramKey,
    /// Ranks with at least one build, compile or link of the program.
    pub ranks: usize,
    pub builds: usize,
    pub compiles: usize,
    pub links: usize,
    pub queries: usize,
    pub failed: usize,
    /// Per-rank sums of build/compile/link seconds, across the ranks that touched it.
    pub build: Stats,
    /// Per-rank sums of binary-query seconds, across the same ranks.
    pub query: Stats,
    pub policies: BTreeSet<String>,
    pub actions: BTreeSet<String>,
    pub options: BTreeSet<String>,
    /// Source hashes seen for the row (more than one when rows group by kernel names and
    /// ranks built different sources, as pyopencl < 2024.2.3 does: it makes every cold
    /// build's source unique).
    pub sources: BTreeSet<String>,
}

impl ProgramRow {
    /// The source column: the short hash when the row has one source, else how many.
    fn source_label(&self) -> String {
        match (&self.key.hash, self.sources.len()) {
            (Some(_), _) => short_hash(&self.key.hash),
            (None, 1) => short_hash(&self.sources.iter().next().cloned()),
            (None, 0) => short_hash(&None),
            (None, n) => format!("{n} sources"),
        }
    }

    /// Binary-query seconds / (build + binary-query seconds).
    pub fn query_share(&self) -> f64 {
        share(self.query.total, self.build.total)
    }
}

fn share(query: f64, build: f64) -> f64 {
    if query + build > 0.0 {
        query / (query + build)
    } else {
        0.0
    }
}

#[derive(Debug)]
pub struct RankRow {
    pub key: RankKey,
    pub hosts: BTreeSet<String>,
    pub pids: BTreeSet<u64>,
    pub builds: usize,
    pub build_seconds: f64,
    pub queries: usize,
    pub query_seconds: f64,
    pub slow: bool,
}

impl RankRow {
    pub fn total(&self) -> f64 {
        self.build_seconds + self.query_seconds
    }
}

#[derive(Debug)]
pub struct Hint {
    pub pocl_cpu_query_seconds: f64,
    pub total_seconds: f64,
}

impl Hint {
    pub fn share(&self) -> f64 {
        if self.total_seconds > 0.0 {
            self.pocl_cpu_query_seconds / self.total_seconds
        } else {
            0.0
        }
    }

    pub fn text(&self) -> String {
        format!(
            "hint: binary queries on pocl CPU devices took {:.0}% of build time ({:.3} s of {:.3} s): \
             pocl compiles every kernel a second time to answer them.\n      \
             CLSHIM_BINARIES=substitute (clshim run --binaries substitute) removes that compile.",
            100.0 * self.share(),
            self.pocl_cpu_query_seconds,
            self.total_seconds
        )
    }
}

#[derive(Debug)]
pub struct Report {
    pub dir: String,
    pub files: usize,
    pub records: usize,
    pub skipped: usize,
    pub problems: Vec<String>,
    pub hosts: BTreeSet<String>,
    pub processes: usize,
    pub programs: Vec<ProgramRow>,
    pub ranks: Vec<RankRow>,
    pub median_rank_seconds: f64,
    pub build_seconds: f64,
    pub query_seconds: f64,
    pub pocl_cpu_pass_query_seconds: f64,
    pub hint: Option<Hint>,
}

#[derive(Default)]
struct ProgAcc {
    per_rank: HashMap<RankKey, (f64, f64, bool)>,
    builds: usize,
    compiles: usize,
    links: usize,
    queries: usize,
    failed: usize,
    policies: BTreeSet<String>,
    actions: BTreeSet<String>,
    options: BTreeSet<String>,
    sources: BTreeSet<String>,
}

fn sorted_kernels(k: &[String]) -> Vec<String> {
    let mut k = k.to_vec();
    k.sort();
    k.dedup();
    k
}

/// Aggregates every record. Programs are grouped by kernel names (the same kernels built
/// on every rank form one row, whatever per-rank text made their sources differ), or,
/// with `by_source`, by source hash and kernel names.
pub fn aggregate(dir: &str, t: &Traces, by_source: bool) -> Report {
    let procs = processes(t);
    let mut progs: HashMap<ProgramKey, ProgAcc> = HashMap::new();
    let mut ranks: BTreeMap<RankKey, RankRow> = BTreeMap::new();
    let (mut build_s, mut query_s, mut pocl_pass_s) = (0.0, 0.0, 0.0);
    let unknown = ProgramKey {
        hash: None,
        kernels: Vec::new(),
    };

    for f in &t.files {
        // program id -> the key of its latest build in this process (records are in
        // the order the process completed them, so a query follows its build).
        let mut by_id: HashMap<&str, ProgramKey> = HashMap::new();
        for r in &f.records {
            if r.event == Event::Process {
                continue;
            }
            let proc = &procs[r.file];
            let rk = rank_key(r, &procs);
            let row = ranks.entry(rk.clone()).or_insert_with(|| RankRow {
                key: rk.clone(),
                hosts: BTreeSet::new(),
                pids: BTreeSet::new(),
                builds: 0,
                build_seconds: 0.0,
                queries: 0,
                query_seconds: 0.0,
                slow: false,
            });
            row.hosts.insert(proc.host.clone());
            row.pids.insert(r.pid);
            let mut source = None;
            let key = match r.event {
                Event::Build | Event::Compile => {
                    source = r.hash.clone();
                    ProgramKey {
                        hash: r.hash.clone(),
                        kernels: sorted_kernels(&r.kernels),
                    }
                }
                Event::Link => {
                    let inputs: Option<Vec<&str>> = r
                        .inputs
                        .iter()
                        .map(|i| by_id.get(i.as_str()).and_then(|k| k.hash.as_deref()))
                        .collect();
                    let hash = inputs
                        .filter(|v| !v.is_empty())
                        .map(|v| format!("link({})", v.join("+")));
                    source = hash.clone();
                    ProgramKey {
                        hash,
                        kernels: sorted_kernels(&r.kernels),
                    }
                }
                Event::BinaryQuery => r
                    .program
                    .as_deref()
                    .and_then(|p| by_id.get(p))
                    .cloned()
                    .unwrap_or_else(|| unknown.clone()),
                Event::BinaryLoad | Event::Process => {
                    // A program made from a binary: its queries join to "unknown source".
                    if let Some(p) = r.program.as_deref() {
                        by_id.insert(p, unknown.clone());
                    }
                    continue;
                }
            };
            let key = if by_source || !r.event.is_build() {
                key
            } else {
                ProgramKey { hash: None, ..key }
            };
            if r.event.is_build() {
                if let Some(p) = r.program.as_deref() {
                    by_id.insert(p, key.clone());
                }
            }
            let acc = progs.entry(key).or_default();
            if let Some(h) = source {
                acc.sources.insert(h);
            }
            if let Some(p) = &proc.policy {
                acc.policies.insert(p.clone());
            }
            let slot = acc.per_rank.entry(rk).or_insert((0.0, 0.0, false));
            if r.result_name.as_deref().is_some_and(|n| n != "CL_SUCCESS") {
                acc.failed += 1;
            }
            if r.event.is_build() {
                slot.0 += r.seconds;
                slot.2 = true;
                row.builds += 1;
                row.build_seconds += r.seconds;
                build_s += r.seconds;
                match r.event {
                    Event::Build => acc.builds += 1,
                    Event::Compile => acc.compiles += 1,
                    _ => acc.links += 1,
                }
                if let Some(o) = &r.options {
                    if !o.trim().is_empty() {
                        acc.options.insert(o.trim().to_string());
                    }
                }
            } else {
                slot.1 += r.seconds;
                row.queries += 1;
                row.query_seconds += r.seconds;
                query_s += r.seconds;
                acc.queries += 1;
                if let Some(a) = &r.action {
                    acc.actions.insert(a.clone());
                }
                let passed = match proc.policy.as_deref() {
                    Some(p) => p == "pass",
                    None => r.action.as_deref() == Some("forward"),
                };
                if passed && r.devices.iter().any(|d| d.is_pocl_cpu()) {
                    pocl_pass_s += r.seconds;
                }
            }
        }
    }

    let mut programs: Vec<ProgramRow> = progs
        .into_iter()
        .map(|(key, a)| {
            let (b, q): (Vec<f64>, Vec<f64>) = a.per_rank.values().map(|&(b, q, _)| (b, q)).unzip();
            ProgramRow {
                ranks: a.per_rank.values().filter(|v| v.2).count(),
                key,
                builds: a.builds,
                compiles: a.compiles,
                links: a.links,
                queries: a.queries,
                failed: a.failed,
                build: Stats::of(b),
                query: Stats::of(q),
                policies: a.policies,
                actions: a.actions,
                options: a.options,
                sources: a.sources,
            }
        })
        .collect();
    programs.sort_by(|a, b| {
        (b.build.total + b.query.total)
            .total_cmp(&(a.build.total + a.query.total))
            .then_with(|| a.key.cmp(&b.key))
    });

    let mut ranks: Vec<RankRow> = ranks.into_values().collect();
    let mut totals: Vec<f64> = ranks.iter().map(RankRow::total).collect();
    totals.sort_by(f64::total_cmp);
    let med = median(&totals);
    if ranks.len() > 1 {
        for r in &mut ranks {
            r.slow = r.total() > SLOW_FACTOR * med && r.total() > med + SLOW_MARGIN_S;
        }
    }
    let total = build_s + query_s;
    let hint = (total > 0.0 && pocl_pass_s / total > HINT_SHARE).then_some(Hint {
        pocl_cpu_query_seconds: pocl_pass_s,
        total_seconds: total,
    });

    Report {
        dir: dir.to_string(),
        files: t.files.len(),
        records: t.record_count(),
        skipped: t.skipped,
        problems: t.problems.iter().map(|p| p.to_string()).collect(),
        hosts: procs.iter().map(|p| p.host.clone()).collect(),
        processes: procs.len(),
        programs,
        ranks,
        median_rank_seconds: med,
        build_seconds: build_s,
        query_seconds: query_s,
        pocl_cpu_pass_query_seconds: pocl_pass_s,
        hint,
    }
}

fn join(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "-".into()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(",")
    }
}

fn clip(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(width.saturating_sub(1)).collect();
        c.push('…');
        c
    }
}

/// `fnv1a64:0123456789abcdef` -> `0123456789ab` (enough to tell programs apart).
fn short_hash(h: &Option<String>) -> String {
    match h {
        None => "-".into(),
        Some(h) => {
            let hex = h.rsplit(':').next().unwrap_or(h);
            if h.starts_with("link(") {
                clip(h, 16)
            } else {
                hex.chars().take(12).collect()
            }
        }
    }
}

fn program_name(k: &ProgramKey) -> String {
    if k.kernels.is_empty() {
        if k.hash.is_none() {
            "(unknown program)".into()
        } else {
            "(no kernels)".into()
        }
    } else {
        k.kernels.join(",")
    }
}

fn secs(s: f64) -> String {
    format!("{s:.3}")
}

fn mmm(s: &Stats) -> String {
    format!("{} / {} / {}", secs(s.min), secs(s.median), secs(s.max))
}

/// Left-aligns the columns marked `false` in `right`, right-aligns the others.
fn table(out: &mut String, header: &[&str], right: &[bool], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |out: &mut String, cells: Vec<&str>| {
        let mut s = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            if right[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if i + 1 < cells.len() {
                s.push_str("  ");
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(out, header.to_vec());
    for r in rows {
        line(out, r.iter().map(String::as_str).collect());
    }
}

impl Report {
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "clshim report: {}: {} rank{}, {} process{} on {} host{}; {} file{}, {} record{}, {} skipped",
            self.dir,
            self.ranks.len(),
            if self.ranks.len() == 1 { "" } else { "s" },
            self.processes,
            if self.processes == 1 { "" } else { "es" },
            self.hosts.len(),
            if self.hosts.len() == 1 { "" } else { "s" },
            self.files,
            if self.files == 1 { "" } else { "s" },
            self.records,
            if self.records == 1 { "" } else { "s" },
            self.skipped,
        );
        let _ = writeln!(
            o,
            "build time {} s: builds {} s, binary queries {} s ({:.0}%)",
            secs(self.build_seconds + self.query_seconds),
            secs(self.build_seconds),
            secs(self.query_seconds),
            100.0 * share(self.query_seconds, self.build_seconds)
        );
        o.push('\n');
        if self.programs.is_empty() {
            o.push_str("No program builds or binary queries recorded.\n");
        } else {
            o.push_str("Programs (slowest first; seconds are per-rank sums, min / median / max across ranks)\n");
            let rows: Vec<Vec<String>> = self
                .programs
                .iter()
                .map(|p| {
                    vec![
                        clip(&program_name(&p.key), 40),
                        p.source_label(),
                        p.ranks.to_string(),
                        (p.builds + p.compiles + p.links).to_string(),
                        mmm(&p.build),
                        p.queries.to_string(),
                        mmm(&p.query),
                        format!("{:.0}%", 100.0 * p.query_share()),
                        join(&p.policies),
                        join(&p.actions),
                    ]
                })
                .collect();
            table(
                &mut o,
                &[
                    "kernels",
                    "source",
                    "ranks",
                    "builds",
                    "build s (min / med / max)",
                    "queries",
                    "query s (min / med / max)",
                    "query share",
                    "policy",
                    "action",
                ],
                &[
                    false, false, true, true, true, true, true, true, false, false,
                ],
                &rows,
            );
            if self.programs.iter().any(|p| p.failed > 0) {
                let failed: usize = self.programs.iter().map(|p| p.failed).sum();
                let _ = writeln!(
                    o,
                    " ({failed} call{} returned an error)",
                    if failed == 1 { "" } else { "s" }
                );
            }
        }
        if !self.ranks.is_empty() {
            let _ = writeln!(
                o,
                "\nRanks (median total {} s; 'SLOW' = over {SLOW_FACTOR}x the median and {SLOW_MARGIN_S} s more)",
                secs(self.median_rank_seconds)
            );
            let rows: Vec<Vec<String>> = self
                .ranks
                .iter()
                .map(|r| {
                    vec![
                        r.key.label(),
                        join(&r.hosts),
                        r.pids.len().to_string(),
                        r.builds.to_string(),
                        secs(r.build_seconds),
                        r.queries.to_string(),
                        secs(r.query_seconds),
                        secs(r.total()),
                        if r.slow {
                            format!(
                                "SLOW ({:.1}x median)",
                                r.total() / self.median_rank_seconds.max(1e-9)
                            )
                        } else {
                            String::new()
                        },
                    ]
                })
                .collect();
            table(
                &mut o,
                &[
                    "rank",
                    "host",
                    "processes",
                    "builds",
                    "build s",
                    "queries",
                    "query s",
                    "total s",
                    "",
                ],
                &[true, false, true, true, true, true, true, true, false],
                &rows,
            );
        }
        if let Some(h) = &self.hint {
            o.push('\n');
            o.push_str(&h.text());
            o.push('\n');
        }
        if self.skipped > 0 {
            let _ = writeln!(
                o,
                "\n{} input problem{} skipped (listed on stderr)",
                self.skipped,
                if self.skipped == 1 { "" } else { "s" }
            );
        }
        o
    }

    pub fn json(&self) -> Value {
        let programs: Vec<Value> = self
            .programs
            .iter()
            .map(|p| {
                json!({
                    "kernels": p.key.kernels,
                    "source_hash": p.key.hash.clone().or_else(|| (p.sources.len() == 1).then(|| p.sources.iter().next().unwrap().clone())),
                    "sources": p.sources,
                    "ranks": p.ranks,
                    "builds": p.builds,
                    "compiles": p.compiles,
                    "links": p.links,
                    "binary_queries": p.queries,
                    "failed_calls": p.failed,
                    "build_seconds": p.build.json(),
                    "binary_query_seconds": p.query.json(),
                    "binary_query_share": p.query_share(),
                    "policies": p.policies,
                    "actions": p.actions,
                    "options": p.options,
                })
            })
            .collect();
        let ranks: Vec<Value> = self
            .ranks
            .iter()
            .map(|r| {
                let (rank, label) = match &r.key {
                    RankKey::Rank(n) => (json!(n), r.key.label()),
                    RankKey::Process(..) => (Value::Null, r.key.label()),
                };
                json!({
                    "rank": rank,
                    "label": label,
                    "hosts": r.hosts,
                    "pids": r.pids,
                    "builds": r.builds,
                    "build_seconds": r.build_seconds,
                    "binary_queries": r.queries,
                    "binary_query_seconds": r.query_seconds,
                    "total_seconds": r.total(),
                    "slow": r.slow,
                })
            })
            .collect();
        json!({
            "clshim_report": 1,
            "dir": self.dir,
            "files": self.files,
            "processes": self.processes,
            "hosts": self.hosts,
            "records": self.records,
            "skipped": self.skipped,
            "problems": self.problems,
            "build_seconds": self.build_seconds,
            "binary_query_seconds": self.query_seconds,
            "binary_query_share": share(self.query_seconds, self.build_seconds),
            "pocl_cpu_pass_binary_query_seconds": self.pocl_cpu_pass_query_seconds,
            "median_rank_seconds": self.median_rank_seconds,
            "programs": programs,
            "ranks": ranks,
            "hint": self.hint.as_ref().map(|h| json!({
                "binary_query_share": h.share(),
                "setting": "CLSHIM_BINARIES=substitute",
                "text": h.text(),
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[1.0, 2.0, 10.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 10.0]), 3.0);
    }
}
