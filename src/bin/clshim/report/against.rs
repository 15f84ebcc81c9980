//! `clshim report NEW --against OLD`: "why was the second run not faster?" on one screen.
//! Programs are matched by their kernel names. For each: built in both runs or in one
//! only; served from a binary in NEW, or taken from compiles made before (the store's kept
//! compiles, a peer's, pocl's own cache's: `origin`); for one built again, whether its text, options,
//! device or driver changed (with the differing lines when both runs kept sources), or
//! nothing did, and then which cache would have served it; the build time gained or lost
//! per program, per rank and in all (build time is what the report calls so: builds,
//! compiles and links, and the binary queries of their programs, where `substitute` gains,
//! with the two parts named in the totals); and, where the traces carry CPU time, how much
//! of each program's compile per rank was CPU and how much waiting in each run (the median
//! over ranks: sources that differ per rank are matched by kernel names), so growth with
//! the rank count splits into "each compile got slower" and "compiles waited" (a wait for
//! a peer's or another node's compile being named apart: no compile waited there).

use crate::report::build_facts::{rank_name, Facts, Variant};
use crate::report::busy::{Busy, RankBusy};
use crate::report::origin::Taken;
use crate::report::rank_key::{median, RankKey};
use crate::report::variants::{
    changes_text, compare, difference_json, program_name, wrap, Difference,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

/// The status of a program whose builds in NEW all took compiles made before.
pub const TAKEN: &str = "taken from kept compiles";

/// Program rows and rank rows shown in the text (the most time gained or lost first).
pub const PROGRAMS_SHOWN: usize = 12;
pub const RANKS_SHOWN: usize = 8;

#[derive(Debug, Default)]
struct Side {
    built: usize,
    served: usize,
    /// Of `served`, the builds the program cache served from the native store; and the
    /// builds it compiled, by why the store did not serve them.
    store_served: usize,
    not_served: BTreeMap<String, usize>,
    /// Its builds by where their compile came from, and those the store did not serve.
    taken: Taken,
    missed: Taken,
    /// Build time: builds and binary queries.
    seconds: f64,
    /// Variants built from source, with their builds.
    variants: BTreeMap<Variant, usize>,
    /// Per rank: builds, binary queries and first launches, wall and CPU.
    busy: BTreeMap<RankKey, Busy>,
}

/// The median over ranks of each rank's CPU and waiting (ranks with CPU time only): its wait
/// for a peer's or another node's compile, and the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PerRank {
    pub ranks: usize,
    pub cpu: f64,
    pub peer_wait: f64,
    /// For anything but a peer's compile: a core, a lock, the disk.
    pub waiting: f64,
    /// Wall less CPU, both waits together (the JSON's `waiting_seconds`, as in
    /// `compiling_and_waiting`).
    pub wall_less_cpu: f64,
    /// The CPU of all those ranks together.
    pub total_cpu: f64,
}

impl PerRank {
    fn of<'a>(busy: impl Iterator<Item = &'a Busy>) -> PerRank {
        let timed: Vec<&Busy> = busy.filter(|b| b.wall > 0.0).collect();
        let med = |f: &dyn Fn(&Busy) -> f64| {
            let mut v: Vec<f64> = timed.iter().map(|b| f(b)).collect();
            v.sort_by(f64::total_cmp);
            median(&v)
        };
        PerRank {
            ranks: timed.len(),
            cpu: med(&|b| b.cpu),
            peer_wait: med(&|b| b.peer_waiting()),
            waiting: med(&|b| b.other_waiting()),
            wall_less_cpu: med(&|b| b.waiting()),
            total_cpu: timed.iter().map(|b| b.cpu).sum(),
        }
    }

    fn json(&self) -> Value {
        json!({
            "ranks": self.ranks,
            "cpu_seconds": self.cpu,
            "waiting_seconds": self.wall_less_cpu,
            "peer_wait_seconds": self.peer_wait,
            "other_waiting_seconds": self.waiting,
            "total_cpu_seconds": self.total_cpu,
        })
    }
}

fn sides(f: &Facts) -> BTreeMap<(Vec<String>, usize), Side> {
    let mut out: BTreeMap<(Vec<String>, usize), Side> = BTreeMap::new();
    for (v, t) in &f.variants {
        let s = out.entry((v.kernels.clone(), v.nth)).or_default();
        s.seconds += t.seconds + t.query_seconds;
        for (k, b) in &t.busy {
            s.busy.entry(k.clone()).or_default().add(b);
        }
        s.store_served += t.store_served;
        for (w, n) in &t.not_served {
            *s.not_served.entry(w.clone()).or_default() += n;
        }
        s.taken.add(&t.taken);
        s.missed.add(&t.missed);
        if v.served {
            s.served += t.builds;
        } else {
            s.built += t.builds;
            *s.variants.entry(v.clone()).or_default() += t.builds;
        }
    }
    out
}

/// The same variant, whichever run kept its texts.
fn same(a: &Variant, b: &Variant) -> bool {
    a.hash == b.hash && a.options == b.options && a.devices == b.devices
}

#[derive(Debug)]
pub struct Row {
    pub kernels: Vec<String>,
    /// Which program of these kernel names (see `Variant::nth`).
    pub nth: usize,
    /// `built again`, `served from the native store`, `served from a binary`, `taken from
    /// kept compiles`, `only in NEW`, `only in OLD`.
    pub status: &'static str,
    pub words: String,
    pub difference: Option<Difference>,
    /// The source hashes compared (OLD's most common variant, NEW's changed one).
    pub hashes: Option<(Option<String>, Option<String>)>,
    pub new_seconds: f64,
    pub old_seconds: f64,
    pub new_builds: usize,
    pub new_served: usize,
    /// Of `new_served`, the builds the program cache served; and NEW's compiled builds the
    /// program cache did not serve, by why.
    pub new_store_served: usize,
    pub new_not_served: BTreeMap<String, usize>,
    /// NEW's builds by where their compile came from, and those the store did not serve.
    pub new_taken: Taken,
    pub new_missed: Taken,
    pub old_builds: usize,
    /// Median per-rank CPU and waiting of the program's compiles in each run.
    pub new_split: PerRank,
    pub old_split: PerRank,
}

pub struct Comparison {
    pub rows: Vec<Row>,
    /// Per rank: build time in NEW and OLD.
    pub ranks: Vec<(String, f64, f64)>,
    /// Build time (builds and binary queries), and its binary-query part, of each run.
    pub new_seconds: f64,
    pub old_seconds: f64,
    pub new_query_seconds: f64,
    pub old_query_seconds: f64,
    /// Median per-rank CPU and waiting of all compiles (builds, binary queries and first
    /// launches) in each run.
    pub new_split: PerRank,
    pub old_split: PerRank,
}

/// The change of CPU per rank by program ([`Comparison::cpu_change`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuChange {
    pub both: (usize, f64),
    pub only_new: (usize, f64),
    pub only_old: (usize, f64),
}

impl CpuChange {
    fn json(&self) -> Value {
        let part = |p: (usize, f64)| json!({"programs": p.0, "cpu_seconds": p.1});
        json!({
            "compiled_in_both": part(self.both),
            "only_in_new": part(self.only_new),
            "only_in_old": part(self.only_old),
        })
    }
}

fn plural(n: usize) -> String {
    format!("{n} program{}", if n == 1 { "" } else { "s" })
}

fn run_split(f: &Facts) -> PerRank {
    let totals: Vec<Busy> = f.rank_busy.values().map(RankBusy::total).collect();
    PerRank::of(totals.iter())
}

fn pocl_dirs(f: &Facts) -> BTreeSet<String> {
    f.processes
        .iter()
        .flat_map(|p| p.caches.iter())
        .filter(|c| c.cache == "pocl")
        .map(|c| c.path.clone())
        .collect()
}

/// Which cache would have served a program built again from the same text, options and
/// devices.
fn nothing_changed(kernels: &[String], new: &Facts, old: &Facts) -> String {
    let mut w = String::from("nothing changed (same text, options, device and driver): ");
    if old.queried.contains(kernels) || new.queried.contains(kernels) {
        w.push_str(
            "the application's binary cache would have served it (it asked for the binary), \
             so that cache missed: another cache directory, or one cleared between runs?",
        );
    } else {
        w.push_str("the application keeps no binary of it; ");
    }
    let (pn, po) = (pocl_dirs(new), pocl_dirs(old));
    if !pn.is_empty() && !po.is_empty() && pn != po {
        let show = |s: &BTreeSet<String>| {
            let first = s.iter().next().cloned().unwrap_or_default();
            if s.len() > 1 {
                format!("{first} and {} more", s.len() - 1)
            } else {
                first
            }
        };
        let _ = write!(
            w,
            " pocl's kernel cache would have served it, but its directory differs between the runs \
             (NEW {}, OLD {})",
            show(&pn),
            show(&po)
        );
    } else {
        w.push_str(
            " pocl's kernel cache would have served it (same directory in both runs: cleared, or \
             not pocl?)",
        );
    }
    w
}

pub fn compare_runs(new: &Facts, new_dir: &Path, old: &Facts, old_dir: &Path) -> Comparison {
    let (sn, so) = (sides(new), sides(old));
    let names: BTreeSet<&(Vec<String>, usize)> = sn.keys().chain(so.keys()).collect();
    let empty = Side::default();
    let mut rows = Vec::new();
    for k in names {
        let (n, o) = (sn.get(k).unwrap_or(&empty), so.get(k).unwrap_or(&empty));
        let in_new = n.built + n.served > 0;
        let in_old = o.built + o.served > 0;
        let mut difference = None;
        let mut hashes = None;
        let (status, mut words) = if !in_old {
            ("only in NEW", "not in OLD: a new program".to_string())
        } else if !in_new {
            ("only in OLD", "not made in NEW".to_string())
        } else if n.built == 0 && n.store_served == n.served {
            (
                "served from the native store",
                "the program cache served it in NEW from the driver's binary in the native \
                 store: nothing compiled"
                    .to_string(),
            )
        } else if n.built == 0 {
            (
                "served from a binary",
                "made from a binary in NEW: nothing compiled".to_string(),
            )
        } else if n.taken.took() == n.built {
            (
                TAKEN,
                format!(
                    "in NEW its builds took compiles made before, through the program cache: {}; \
                     nothing compiled",
                    n.taken.unserved_words()
                ),
            )
        } else {
            let changed = n
                .variants
                .keys()
                .find(|v| !o.variants.keys().any(|w| same(v, w)));
            match (changed, o.variants.iter().max_by_key(|(_, b)| **b)) {
                (Some(nv), Some((ov, _))) => {
                    let d = compare(ov, old_dir, nv, new_dir);
                    hashes = Some((ov.hash.clone(), nv.hash.clone()));
                    let w = d.words.clone();
                    difference = Some(d);
                    ("built again", format!("changed since OLD: {w}"))
                }
                (Some(_), None) => (
                    "built again",
                    "OLD made it from a binary only; NEW compiled it".to_string(),
                ),
                (None, _) => ("built again", nothing_changed(&k.0, new, old)),
            }
        };
        if status == "built again" && !n.not_served.is_empty() {
            // Why the program cache compiled it, before what changed since OLD.
            words = format!(
                "the program cache did not serve it{}; {words}",
                crate::report::loads::reasons(&n.not_served)
            );
        }
        rows.push(Row {
            kernels: k.0.clone(),
            nth: k.1,
            status,
            words,
            difference,
            hashes,
            new_seconds: n.seconds,
            old_seconds: o.seconds,
            new_builds: n.built,
            new_served: n.served,
            new_store_served: n.store_served,
            new_not_served: n.not_served.clone(),
            new_taken: n.taken.clone(),
            new_missed: n.missed.clone(),
            old_builds: o.built + o.served,
            new_split: PerRank::of(n.busy.values()),
            old_split: PerRank::of(o.busy.values()),
        });
    }
    // The programs that explain the most time first.
    rows.sort_by(|a, b| {
        let d = |r: &Row| (r.new_seconds - r.old_seconds).abs();
        d(b).total_cmp(&d(a))
            .then_with(|| (&a.kernels, a.nth).cmp(&(&b.kernels, b.nth)))
    });
    let mut ranks: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (k, s) in new.rank_seconds.iter().chain(&new.rank_query_seconds) {
        ranks.entry(rank_name(k)).or_default().0 += s;
    }
    for (k, s) in old.rank_seconds.iter().chain(&old.rank_query_seconds) {
        ranks.entry(rank_name(k)).or_default().1 += s;
    }
    let mut ranks: Vec<(String, f64, f64)> =
        ranks.into_iter().map(|(k, (n, o))| (k, n, o)).collect();
    ranks.sort_by(|a, b| (b.1 - b.2).abs().total_cmp(&(a.1 - a.2).abs()));
    let queries = |f: &Facts| f.rank_query_seconds.values().sum::<f64>();
    Comparison {
        rows,
        new_seconds: new.rank_seconds.values().sum::<f64>() + queries(new),
        old_seconds: old.rank_seconds.values().sum::<f64>() + queries(old),
        new_query_seconds: queries(new),
        old_query_seconds: queries(old),
        ranks,
        new_split: run_split(new),
        old_split: run_split(old),
    }
}

fn gained(new: f64, old: f64) -> String {
    let d = old - new;
    if d >= 0.0 {
        format!("{d:.2} s gained")
    } else {
        format!("{:.2} s lost", -d)
    }
}

impl Comparison {
    pub fn text(&self, new_dir: &str, old_dir: &str) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "clshim report {new_dir} --against {old_dir}");
        let part = |all: f64, queries: f64| {
            format!(
                "{all:.2} s (builds {:.2}, binary queries {queries:.2})",
                all - queries
            )
        };
        let _ = writeln!(
            o,
            "build time: NEW {}, OLD {}: {}",
            part(self.new_seconds, self.new_query_seconds),
            part(self.old_seconds, self.old_query_seconds),
            gained(self.new_seconds, self.old_seconds)
        );
        let count = |s: &str| self.rows.iter().filter(|r| r.status == s).count();
        let taken = match count(TAKEN) {
            0 => String::new(),
            n => format!(", {n} {TAKEN} in NEW"),
        };
        let _ = writeln!(
            o,
            "programs: {} built again, {} served from the native store in NEW, {} served from a \
             binary in NEW, {} only in NEW, {} only in OLD{taken}",
            count("built again"),
            count("served from the native store"),
            count("served from a binary"),
            count("only in NEW"),
            count("only in OLD")
        );
        let served: usize = self.rows.iter().map(|r| r.new_store_served).sum();
        let mut missed = BTreeMap::new();
        for r in &self.rows {
            for (w, n) in &r.new_not_served {
                *missed.entry(w.clone()).or_default() += n;
            }
        }
        let missed_n: usize = missed.values().sum();
        if served + missed_n > 0 {
            let mut line = format!(
                "program cache in NEW: {served} of {} source builds served from the native store{}",
                served + missed_n,
                crate::report::loads::reasons(&missed)
            );
            let mut instead = Taken::default();
            for r in &self.rows {
                instead.add(&r.new_missed);
            }
            if instead.took() > 0 {
                line.push_str("; of those, ");
                line.push_str(&instead.unserved_words());
            }
            wrap(&mut o, &line, "");
        }
        let timed = self.new_split.ranks + self.old_split.ranks > 0;
        if timed {
            self.split_text(&mut o);
        }
        let _ = write!(
            o,
            "\n  {:<32} {:>8} {:>8} {:>9}",
            "program", "NEW s", "OLD s", "NEW-OLD"
        );
        if timed {
            let _ = write!(
                o,
                "  {:>7} {:>7} {:>8} {:>8}",
                "CPU NEW", "CPU OLD", "wait NEW", "wait OLD"
            );
        }
        let _ = writeln!(o, "  why");
        for r in self.rows.iter().take(PROGRAMS_SHOWN) {
            let _ = write!(
                o,
                "  {:<32} {:>8.2} {:>8.2} {:>+9.2}",
                program_name(&r.kernels, r.nth, 32),
                r.new_seconds,
                r.old_seconds,
                r.new_seconds - r.old_seconds,
            );
            if timed {
                let cell = |p: &PerRank, v: f64| {
                    if p.ranks > 0 {
                        format!("{v:.2}")
                    } else {
                        "-".into()
                    }
                };
                let _ = write!(
                    o,
                    "  {:>7} {:>7} {:>8} {:>8}",
                    cell(&r.new_split, r.new_split.cpu),
                    cell(&r.old_split, r.old_split.cpu),
                    cell(&r.new_split, r.new_split.waiting),
                    cell(&r.old_split, r.old_split.waiting),
                );
            }
            let _ = writeln!(o, "  {}", r.status);
            if matches!(
                r.status,
                "built again" | "served from the native store" | TAKEN
            ) {
                wrap(&mut o, &r.words, "       ");
                if let Some(d) = &r.difference {
                    changes_text(&mut o, &d.changes, d.changes_total, "       ");
                }
            }
        }
        if self.rows.len() > PROGRAMS_SHOWN {
            let _ = writeln!(
                o,
                "  ... {} more programs (--json lists them)",
                self.rows.len() - PROGRAMS_SHOWN
            );
        }
        let _ = writeln!(o, "\nranks (most time gained or lost first):");
        for (name, n, old) in self.ranks.iter().take(RANKS_SHOWN) {
            let _ = writeln!(
                o,
                "  {name}: NEW {n:.2} s, OLD {old:.2} s: {}",
                gained(*n, *old)
            );
        }
        if self.ranks.len() > RANKS_SHOWN {
            let _ = writeln!(o, "  ... {} more ranks", self.ranks.len() - RANKS_SHOWN);
        }
        o
    }

    /// The runs' median per-rank CPU and waiting, and what the difference is made of.
    fn split_text(&self, o: &mut String) {
        let (n, p) = (&self.new_split, &self.old_split);
        let dw = n.waiting - p.waiting;
        let _ = write!(
            o,
            "compiles per rank, the median rank (builds, binary queries and first launches):\n  \
             CPU NEW {:.2} s, OLD {:.2} s ({:+.2} s); waiting NEW {:.2} s, OLD {:.2} s ({dw:+.2} s: compiles {})",
            n.cpu,
            p.cpu,
            n.cpu - p.cpu,
            n.waiting,
            p.waiting,
            // As shown, to the hundredth.
            if dw.abs() < 0.005 {
                "waited as long"
            } else if dw > 0.0 {
                "waited longer"
            } else {
                "waited less"
            }
        );
        if n.peer_wait + p.peer_wait > 0.0 {
            let _ = write!(
                o,
                "; peer wait NEW {:.2} s, OLD {:.2} s (for a peer's or another node's compile, \
                 set apart from the waiting)",
                n.peer_wait, p.peer_wait
            );
        }
        o.push('\n');
        let c = self.cpu_change();
        let line = format!(
            "by program, the mean rank's CPU NEW-OLD {:+.2} s: {:+.2} s in the {} both runs compiled \
             (each compile got {}), {:+.2} s in the {} only NEW compiled (more compiles per rank), {:+.2} s \
             in the {} only OLD compiled",
            c.both.1 + c.only_new.1 + c.only_old.1,
            c.both.1,
            plural(c.both.0),
            if c.both.1 >= 0.0 { "slower" } else { "faster" },
            c.only_new.1,
            plural(c.only_new.0),
            c.only_old.1,
            plural(c.only_old.0),
        );
        wrap(o, &line, "  ");
    }

    /// How the mean rank's CPU changed, by program: (programs, their CPU per rank of the
    /// run in NEW less that in OLD) for those compiled in both runs, and for those compiled
    /// in one run only (a program whose builds NEW took from compiles made before counts as
    /// compiled in OLD only). Means over every rank of each run add up, so the three parts
    /// make the whole change (medians would not).
    pub fn cpu_change(&self) -> CpuChange {
        let per_rank = |p: &PerRank, run: &PerRank| p.total_cpu / run.ranks.max(1) as f64;
        let mut c = CpuChange::default();
        for r in &self.rows {
            let (n, o) = (&r.new_split, &r.old_split);
            let (new, old) = (per_rank(n, &self.new_split), per_rank(o, &self.old_split));
            let (part, delta) = match (n.ranks > 0, o.ranks > 0) {
                // NEW's CPU there took a compile made before: no compile got faster.
                (true, true) if r.status == TAKEN => (&mut c.only_old, new - old),
                (true, true) => (&mut c.both, new - old),
                (true, false) => (&mut c.only_new, new),
                (false, true) => (&mut c.only_old, -old),
                (false, false) => continue,
            };
            part.0 += 1;
            part.1 += delta;
        }
        c
    }

    pub fn json(&self, new_dir: &str, old_dir: &str) -> Value {
        json!({
            "clshim_report_against": 1,
            "new": new_dir,
            "old": old_dir,
            "build_time": "builds, compiles and links, and the binary queries of their programs",
            "new_build_time_seconds": self.new_seconds,
            "old_build_time_seconds": self.old_seconds,
            "new_binary_query_seconds": self.new_query_seconds,
            "old_binary_query_seconds": self.old_query_seconds,
            "new_per_rank": self.new_split.json(),
            "old_per_rank": self.old_split.json(),
            "cpu_change_by_program": self.cpu_change().json(),
            "programs": self.rows.iter().map(|r| json!({
                "kernels": r.kernels,
                "nth": r.nth,
                "status": r.status,
                "words": r.words,
                "difference": r.difference.as_ref().map(difference_json),
                "old_source_hash": r.hashes.as_ref().map(|h| h.0.clone()),
                "new_source_hash": r.hashes.as_ref().map(|h| h.1.clone()),
                "new_build_time_seconds": r.new_seconds,
                "old_build_time_seconds": r.old_seconds,
                "new_builds": r.new_builds,
                "new_served_from_binary": r.new_served,
                "new_served_from_store": r.new_store_served,
                "new_not_served": r.new_not_served,
                "new_taken": r.new_taken.json(),
                "old_builds": r.old_builds,
                "new_per_rank": r.new_split.json(),
                "old_per_rank": r.old_split.json(),
            })).collect::<Vec<_>>(),
            "ranks": self.ranks.iter().map(|(k, n, o)| json!({
                "rank": k, "new_build_time_seconds": n, "old_build_time_seconds": o,
            })).collect::<Vec<_>>(),
        })
    }
}
