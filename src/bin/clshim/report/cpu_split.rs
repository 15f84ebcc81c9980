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
//! CPU time is waiting: under the program cache, first for a peer's (or another node's)
//! compile, as the records say (`peer_wait_seconds`), which is named apart; the rest for a
//! core, a lock or the disk.

use crate::report::build_facts::{rank_name, Facts};
use crate::report::busy::{Busy, RankBusy};
use crate::report::host_load::{self, HostRow};
use crate::report::rank_key::{median, rank_labels, RankKey};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

/// Ranks listed in the text unless `--wide`: those that waited most.
pub const RANKS_SHOWN: usize = 16;

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
            peer_wait: m(&|r| r.busy.build.peer_waiting()),
            untimed: m(&|r| r.busy.build.untimed),
        },
        launch: Busy {
            wall: m(&|r| r.busy.launch.wall),
            cpu: m(&|r| r.busy.launch.cpu),
            peer_wait: m(&|r| r.busy.launch.peer_waiting()),
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

    /// Some rank waited for a peer's or another node's compile.
    fn peers(&self) -> bool {
        self.ranks.iter().any(|r| r.busy.total().peer_wait > 0.0)
    }

    pub fn text(&self, wide: bool) -> String {
        let mut o = String::new();
        if self.ranks.is_empty() {
            return o;
        }
        let peers = self.peers();
        let _ = writeln!(
            o,
            "\nCompiling and waiting per rank (wall seconds = CPU seconds + {})",
            if peers {
                "peer wait: for a peer's compile + waiting: for the rest"
            } else {
                "waiting: for a core, a lock, the disk"
            }
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
        let mut head = if peers {
            format!(
                " median: builds and binary queries {:.3} s = CPU {:.3} s + peer wait {:.3} s + \
                 waiting {:.3} s ({})",
                m.build.wall,
                m.build.cpu,
                m.build.peer_waiting(),
                m.build.other_waiting(),
                pct(m.build.other_waiting_share())
            )
        } else {
            format!(
                " median: builds and binary queries {:.3} s = CPU {:.3} s + waiting {:.3} s ({})",
                m.build.wall,
                m.build.cpu,
                m.build.waiting(),
                pct(m.build.waiting_share())
            )
        };
        if launches {
            let _ = write!(
                head,
                "; first launches {:.3} s, CPU {:.3} s",
                m.launch.wall, m.launch.cpu
            );
            if peers {
                let _ = write!(head, ", peer wait {:.3} s", m.launch.peer_waiting());
            }
        }
        let _ = writeln!(o, "{head}");
        let mut rows: Vec<&RankRow> = self.ranks.iter().collect();
        let hidden = if wide || rows.len() <= RANKS_SHOWN {
            0
        } else {
            rows.sort_by(|a, b| {
                b.busy
                    .total()
                    .other_waiting()
                    .total_cmp(&a.busy.total().other_waiting())
            });
            rows.truncate(RANKS_SHOWN);
            rows.sort_by(|a, b| a.key.cmp(&b.key));
            self.ranks.len() - RANKS_SHOWN
        };
        // With waits for peers: a column of their own, and `waiting` and `wait%` the rest.
        let _ = write!(
            o,
            " {:>10}  {:<16} {:>9} {:>9}",
            "rank", "host", "build s", "CPU s"
        );
        if peers {
            let _ = write!(o, " {:>9}", "peer wait");
        }
        let _ = write!(o, " {:>9} {:>6}", "waiting", "wait%");
        if launches {
            let _ = write!(o, "  {:>9} {:>9}", "launch s", "CPU s");
            if peers {
                let _ = write!(o, " {:>9}", "peer wait");
            }
            let _ = write!(o, " {:>9}", "waiting");
        }
        o.push('\n');
        for r in rows {
            let b = &r.busy.build;
            let _ = write!(
                o,
                " {:>10}  {:<16} {:>9.3} {:>9.3}",
                clip(&r.label, 16),
                clip(&r.host, 16),
                b.wall,
                b.cpu,
            );
            if peers {
                let _ = write!(o, " {:>9.3}", b.peer_waiting());
            }
            let _ = write!(
                o,
                " {:>9.3} {:>6}",
                b.other_waiting(),
                pct(b.other_waiting_share())
            );
            if launches {
                let l = &r.busy.launch;
                let _ = write!(o, "  {:>9.3} {:>9.3}", l.wall, l.cpu);
                if peers {
                    let _ = write!(o, " {:>9.3}", l.peer_waiting());
                }
                let _ = write!(o, " {:>9.3}", l.other_waiting());
            }
            o.push('\n');
        }
        if hidden > 0 {
            let _ = writeln!(
                o,
                "  ... {hidden} more ranks waited less (--wide or --json lists them)"
            );
        }
        if peers {
            let _ = writeln!(
                o,
                " peer wait: for a peer's or another node's compile, which the program cache \
                 shares (its records' peer_wait_seconds);\n waiting: for a core, a lock, the \
                 disk; wait%: waiting's share of the wall time."
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
