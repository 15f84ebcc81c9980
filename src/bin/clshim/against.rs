//! `clshim report NEW --against OLD`: "why was the second run not faster?" on one screen.
//! Programs are matched by their kernel names. For each: built in both runs or in one
//! only; served from a binary in NEW; for one built again, whether its text, options,
//! device or driver changed (with the differing lines when both runs kept sources), or
//! nothing did, and then which cache would have served it; the build time gained or lost
//! per program, per rank and in all. Build time is what the report calls so: builds,
//! compiles and links, and the binary queries of their programs (where `substitute` gains),
//! with the two parts named in the totals.

use crate::build_facts::{rank_name, Facts, Variant};
use crate::variants::{changes_text, compare, difference_json, program_name, wrap, Difference};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::Path;

/// Program rows and rank rows shown in the text (the most time gained or lost first).
pub const PROGRAMS_SHOWN: usize = 12;
pub const RANKS_SHOWN: usize = 8;

#[derive(Debug, Default)]
struct Side {
    built: usize,
    served: usize,
    /// Build time: builds and binary queries.
    seconds: f64,
    /// Variants built from source, with their builds.
    variants: BTreeMap<Variant, usize>,
}

fn sides(f: &Facts) -> BTreeMap<(Vec<String>, usize), Side> {
    let mut out: BTreeMap<(Vec<String>, usize), Side> = BTreeMap::new();
    for (v, t) in &f.variants {
        let s = out.entry((v.kernels.clone(), v.nth)).or_default();
        s.seconds += t.seconds + t.query_seconds;
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
    /// `built again`, `served from a binary`, `only in NEW`, `only in OLD`.
    pub status: &'static str,
    pub words: String,
    pub difference: Option<Difference>,
    /// The source hashes compared (OLD's most common variant, NEW's changed one).
    pub hashes: Option<(Option<String>, Option<String>)>,
    pub new_seconds: f64,
    pub old_seconds: f64,
    pub new_builds: usize,
    pub new_served: usize,
    pub old_builds: usize,
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
        let (status, words) = if !in_old {
            ("only in NEW", "not in OLD: a new program".to_string())
        } else if !in_new {
            ("only in OLD", "not made in NEW".to_string())
        } else if n.built == 0 {
            (
                "served from a binary",
                "made from a binary in NEW: nothing compiled".to_string(),
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
            old_builds: o.built + o.served,
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
        let _ = writeln!(
            o,
            "programs: {} built again, {} served from a binary in NEW, {} only in NEW, {} only in OLD",
            count("built again"),
            count("served from a binary"),
            count("only in NEW"),
            count("only in OLD")
        );
        let _ = writeln!(
            o,
            "\n  {:<32} {:>8} {:>8} {:>9}  why",
            "program", "NEW s", "OLD s", "NEW-OLD"
        );
        for r in self.rows.iter().take(PROGRAMS_SHOWN) {
            let _ = writeln!(
                o,
                "  {:<32} {:>8.2} {:>8.2} {:>+9.2}  {}",
                program_name(&r.kernels, r.nth, 32),
                r.new_seconds,
                r.old_seconds,
                r.new_seconds - r.old_seconds,
                r.status
            );
            if r.status == "built again" {
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
                "old_builds": r.old_builds,
            })).collect::<Vec<_>>(),
            "ranks": self.ranks.iter().map(|(k, n, o)| json!({
                "rank": k, "new_build_time_seconds": n, "old_build_time_seconds": o,
            })).collect::<Vec<_>>(),
        })
    }
}
