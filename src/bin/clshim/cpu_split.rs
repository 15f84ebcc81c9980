//! "Why does it get slower with more ranks?": build time split into compiling (CPU) and
//! waiting, per rank and per program, and the hosts the ranks ran on. This module owns
//! the arithmetic: [`Busy`] (wall and CPU seconds of the records that carry both), the
//! split of overlapping first launches ([`exclusive`]), the per-host view (ranks against
//! cores, affinity overlap, pocl's worker threads) and its text and JSON. The numbers are
//! gathered in `build_facts`' one pass over the records; `against` sets two runs' per-program
//! medians side by side.
//!
//! A build, compile, link or binary query records the calling thread's CPU time, where
//! pocl compiles; a first launch records the CPU of the process's other threads, where
//! pocl compiles and runs the kernel (docs/trace-schema.md, "CPU time"). Wall time less
//! CPU time is waiting: for a core, a lock or the disk.

use crate::build_facts::{rank_name, Facts};
use crate::host_load::{self, HostRow};
use crate::report::{median, rank_labels, RankKey};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Ranks listed in the text unless `--wide`: those that waited most.
pub const RANKS_SHOWN: usize = 16;

/// Wall and CPU seconds of the records that carry both, and the wall seconds of those
/// that do not (traces of an older clshim, a launcher that exited).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Busy {
    pub wall: f64,
    pub cpu: f64,
    pub untimed: f64,
}

impl Busy {
    pub fn record(&mut self, seconds: f64, cpu: Option<f64>) {
        match cpu {
            Some(c) => {
                self.wall += seconds;
                self.cpu += c;
            }
            None => self.untimed += seconds,
        }
    }

    pub fn add(&mut self, o: &Busy) {
        self.wall += o.wall;
        self.cpu += o.cpu;
        self.untimed += o.untimed;
    }

    /// Wall less CPU, where positive: first launches can use more CPU than wall time
    /// (the kernel runs on many threads).
    pub fn waiting(&self) -> f64 {
        (self.wall - self.cpu).max(0.0)
    }

    pub fn waiting_share(&self) -> f64 {
        if self.wall > 0.0 {
            self.waiting() / self.wall
        } else {
            0.0
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "wall_seconds": self.wall,
            "cpu_seconds": self.cpu,
            "waiting_seconds": self.waiting(),
            "untimed_seconds": self.untimed,
        })
    }
}

/// One rank's build records and first launches.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankBusy {
    /// Builds, compiles, links and binary queries.
    pub build: Busy,
    /// First launches, each instant counted once ([`exclusive`]).
    pub launch: Busy,
}

impl RankBusy {
    pub fn add(&mut self, o: &RankBusy) {
        self.build.add(&o.build);
        self.launch.add(&o.launch);
    }

    /// Build and first launches together: what a compile cost the rank.
    pub fn total(&self) -> Busy {
        let mut t = self.build;
        t.add(&self.launch);
        t
    }
}

/// A first launch of one launching thread, on that thread's CPU clock of the others.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub start: f64,
    pub seconds: f64,
    /// The clock at the enqueue (`cpu_clock`) and the CPU seconds since (`cpu_seconds`).
    pub clock: f64,
    pub cpu: f64,
}

/// Each launch's own share of wall and CPU time when launches overlap: every instant of
/// their union goes to the launch in flight that completes first (on an in-order queue,
/// the command running then), and its CPU is the clock's advance over that instant. The
/// shares add up to the union's wall time and to the clock's advance over it, so
/// overlapping launches count nothing twice. Spans must share one clock (one launching
/// thread).
pub fn exclusive(spans: &[Span]) -> Vec<Busy> {
    // Points in time with the clock's reading there: each span's start and end.
    let mut points: Vec<(f64, f64, usize, bool)> = Vec::with_capacity(2 * spans.len());
    for (i, s) in spans.iter().enumerate() {
        points.push((s.start, s.clock, i, true));
        points.push((s.start + s.seconds, s.clock + s.cpu, i, false));
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.3.cmp(&a.3)));
    let mut out = vec![Busy::default(); spans.len()];
    // In flight, by (end, index): the first one completes first.
    let mut active: BTreeSet<(u64, usize)> = BTreeSet::new();
    let end_key = |i: usize| ((spans[i].start + spans[i].seconds).max(0.0).to_bits(), i);
    for k in 0..points.len() {
        let (t, q, i, starts) = points[k];
        if starts {
            active.insert(end_key(i));
        } else {
            active.remove(&end_key(i));
        }
        let (Some(&(_, owner)), Some(&(t_next, q_next, _, _))) =
            (active.iter().next(), points.get(k + 1))
        else {
            continue;
        };
        out[owner].wall += (t_next - t).max(0.0);
        out[owner].cpu += (q_next - q).max(0.0);
    }
    out
}

#[derive(Debug, Clone)]
pub struct RankRow {
    pub key: RankKey,
    /// As the report's Ranks table names it.
    pub label: String,
    pub host: String,
    pub busy: RankBusy,
}

/// The per-rank medians of each part.
#[derive(Debug, Clone, Copy, Default)]
pub struct Medians {
    pub build: Busy,
    pub launch: Busy,
}

fn medians(rows: &[RankRow]) -> Medians {
    let m = |f: &dyn Fn(&RankRow) -> f64| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        median(&v)
    };
    Medians {
        build: Busy {
            wall: m(&|r| r.busy.build.wall),
            cpu: m(&|r| r.busy.build.cpu),
            untimed: m(&|r| r.busy.build.untimed),
        },
        launch: Busy {
            wall: m(&|r| r.busy.launch.wall),
            cpu: m(&|r| r.busy.launch.cpu),
            untimed: m(&|r| r.busy.launch.untimed),
        },
    }
}

/// The section: ranks, their medians and the hosts.
#[derive(Debug)]
pub struct Split {
    pub ranks: Vec<RankRow>,
    pub medians: Medians,
    pub hosts: Vec<HostRow>,
}

pub fn split(f: &Facts) -> Split {
    let host_of: BTreeMap<&RankKey, &str> = f
        .processes
        .iter()
        .map(|p| (&p.rank, p.host.as_str()))
        .collect();
    let labels = rank_labels(f.rank_busy.keys());
    let ranks: Vec<RankRow> = f
        .rank_busy
        .iter()
        .zip(labels)
        .map(|((k, b), label)| RankRow {
            key: k.clone(),
            label,
            host: host_of.get(k).copied().unwrap_or("?").to_string(),
            busy: *b,
        })
        .collect();
    Split {
        medians: medians(&ranks),
        hosts: host_load::hosts(&f.processes, &f.rank_busy),
        ranks,
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", 100.0 * x)
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(['…']).collect()
    }
}

impl Split {
    fn timed(&self) -> bool {
        self.ranks
            .iter()
            .any(|r| r.busy.build.wall + r.busy.launch.wall > 0.0)
    }

    pub fn text(&self, wide: bool) -> String {
        let mut o = String::new();
        if self.ranks.is_empty() {
            return o;
        }
        let _ = writeln!(
            o,
            "\nCompiling and waiting per rank (wall seconds = CPU seconds + waiting: for a core, a lock, the disk)"
        );
        if !self.timed() {
            let _ = writeln!(
                o,
                "  no CPU time in these traces (written by a clshim before it recorded cpu_seconds)"
            );
            return o + &host_load::text(&self.hosts);
        }
        let m = &self.medians;
        let launches = self.ranks.iter().any(|r| r.busy.launch.wall > 0.0);
        let mut head = format!(
            " median: builds and binary queries {:.3} s = CPU {:.3} s + waiting {:.3} s ({})",
            m.build.wall,
            m.build.cpu,
            m.build.waiting(),
            pct(m.build.waiting_share())
        );
        if launches {
            let _ = write!(
                head,
                "; first launches {:.3} s, CPU {:.3} s",
                m.launch.wall, m.launch.cpu
            );
        }
        let _ = writeln!(o, "{head}");
        let mut rows: Vec<&RankRow> = self.ranks.iter().collect();
        let hidden = if wide || rows.len() <= RANKS_SHOWN {
            0
        } else {
            rows.sort_by(|a, b| {
                b.busy
                    .total()
                    .waiting()
                    .total_cmp(&a.busy.total().waiting())
            });
            rows.truncate(RANKS_SHOWN);
            rows.sort_by(|a, b| a.key.cmp(&b.key));
            self.ranks.len() - RANKS_SHOWN
        };
        let _ = write!(
            o,
            " {:>10}  {:<16} {:>9} {:>9} {:>9} {:>6}",
            "rank", "host", "build s", "CPU s", "waiting", "wait%"
        );
        if launches {
            let _ = write!(o, "  {:>9} {:>9} {:>9}", "launch s", "CPU s", "waiting");
        }
        o.push('\n');
        for r in rows {
            let b = &r.busy.build;
            let _ = write!(
                o,
                " {:>10}  {:<16} {:>9.3} {:>9.3} {:>9.3} {:>6}",
                clip(&r.label, 16),
                clip(&r.host, 16),
                b.wall,
                b.cpu,
                b.waiting(),
                pct(b.waiting_share())
            );
            if launches {
                let l = &r.busy.launch;
                let _ = write!(o, "  {:>9.3} {:>9.3} {:>9.3}", l.wall, l.cpu, l.waiting());
            }
            o.push('\n');
        }
        if hidden > 0 {
            let _ = writeln!(
                o,
                "  ... {hidden} more ranks waited less (--wide or --json lists them)"
            );
        }
        if launches {
            let _ = writeln!(
                o,
                " launches: CPU of pocl's threads, where it compiles and also runs the kernel, so it \
                 can exceed the wall time;\n           overlapping launches counted once."
            );
        }
        let untimed: f64 = self.ranks.iter().map(|r| r.busy.total().untimed).sum();
        if untimed > 0.0 {
            let _ = writeln!(
                o,
                " ({untimed:.3} s of records had no CPU time and are left out of these columns)"
            );
        }
        o + &host_load::text(&self.hosts)
    }

    pub fn json(&self) -> Value {
        json!({
            "median_per_rank": {
                "build": self.medians.build.json(),
                "first_launches": self.medians.launch.json(),
            },
            "ranks": self.ranks.iter().map(|r| json!({
                "rank": match &r.key { RankKey::Rank(n) => json!(n), _ => Value::Null },
                "label": r.label,
                "name": rank_name(&r.key),
                "host": r.host,
                "build": r.busy.build.json(),
                "first_launches": r.busy.launch.json(),
            })).collect::<Vec<_>>(),
            "hosts": host_load::json(&self.hosts),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: f64, seconds: f64, clock: f64, cpu: f64) -> Span {
        Span {
            start,
            seconds,
            clock,
            cpu,
        }
    }

    #[test]
    fn overlapping_launches_count_each_instant_once() {
        // An in-order queue: A compiles 0-2 s (2 s of CPU); B, enqueued at 0.5 s, waits for A,
        // then compiles 2-3 s (1 s of CPU). B's own interval holds A's compile.
        let spans = [span(0.0, 2.0, 10.0, 2.0), span(0.5, 2.5, 10.4, 2.6)];
        let shares = exclusive(&spans);
        assert!((shares[0].wall - 2.0).abs() < 1e-9, "{shares:?}");
        assert!((shares[0].cpu - 2.0).abs() < 1e-9, "{shares:?}");
        assert!((shares[1].wall - 1.0).abs() < 1e-9, "{shares:?}");
        assert!((shares[1].cpu - 1.0).abs() < 1e-9, "{shares:?}");
        // Apart: each keeps its own; a gap between them belongs to neither.
        let apart = exclusive(&[span(0.0, 1.0, 0.0, 0.5), span(5.0, 1.0, 3.0, 0.75)]);
        assert_eq!(apart[0].wall, 1.0);
        assert_eq!(apart[0].cpu, 0.5);
        assert_eq!(apart[1].wall, 1.0);
        assert_eq!(apart[1].cpu, 0.75);
        assert!(exclusive(&[]).is_empty());
    }

    #[test]
    fn waiting_is_wall_less_cpu_where_positive() {
        let mut b = Busy::default();
        b.record(2.0, Some(1.5));
        b.record(1.0, None);
        assert_eq!(b.waiting(), 0.5);
        assert_eq!(b.untimed, 1.0);
        assert_eq!(b.waiting_share(), 0.25);
        let parallel = Busy {
            wall: 1.0,
            cpu: 4.0,
            untimed: 0.0,
        };
        assert_eq!(parallel.waiting(), 0.0);
    }
}
