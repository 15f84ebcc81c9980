//! Wall and CPU time, summed: what the report's compiling-and-waiting figures are made of
//! ([`Busy`]: the records that carry CPU time and those that do not, and of their wall less
//! CPU what was a wait for a peer's or another node's compile; [`RankBusy`]: one rank's
//! builds and first launches), and how first launches that overlap on one thread are split
//! so nothing counts twice ([`exclusive`]). A leaf: `build_facts` sums into these while it
//! reads the traces, `cpu_split` and `host_load` read them back.

use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Wall and CPU seconds of the records that carry both, the seconds of those records spent
/// waiting for a peer's or another node's compile (`peer_wait_seconds`), and the wall
/// seconds of the records without CPU time (traces of an older clshim, a launcher that
/// exited).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Busy {
    pub wall: f64,
    pub cpu: f64,
    pub peer_wait: f64,
    pub untimed: f64,
}

impl Busy {
    pub fn record(&mut self, seconds: f64, cpu: Option<f64>) {
        self.record_waiting(seconds, cpu, None);
    }

    /// A record that also says how long it waited for a peer or another node.
    pub fn record_waiting(&mut self, seconds: f64, cpu: Option<f64>, peer_wait: Option<f64>) {
        match cpu {
            Some(c) => {
                self.wall += seconds;
                self.cpu += c;
                self.peer_wait += peer_wait
                    .filter(|w| w.is_finite() && *w > 0.0)
                    .map_or(0.0, |w| w.min(seconds));
            }
            None => self.untimed += seconds,
        }
    }

    pub fn add(&mut self, o: &Busy) {
        self.wall += o.wall;
        self.cpu += o.cpu;
        self.peer_wait += o.peer_wait;
        self.untimed += o.untimed;
    }

    /// Of the waiting, the wait for a peer's or another node's compile: the program cache's
    /// sharing at work, which the rank spends instead of compiling.
    pub fn peer_waiting(&self) -> f64 {
        self.peer_wait.min(self.waiting())
    }

    /// Waiting for anything else: a core, a lock, the disk.
    pub fn other_waiting(&self) -> f64 {
        self.waiting() - self.peer_waiting()
    }

    /// The other waiting's share of the wall time. (Of the wall less the peer wait it would
    /// be large where a rank took its peer's compile in a few milliseconds of its own.)
    pub fn other_waiting_share(&self) -> f64 {
        if self.wall > 0.0 {
            self.other_waiting() / self.wall
        } else {
            0.0
        }
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
            "peer_wait_seconds": self.peer_waiting(),
            "other_waiting_seconds": self.other_waiting(),
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
#[derive(Clone, Copy, Debug, Default)]
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
            ..Busy::default()
        };
        assert_eq!(parallel.waiting(), 0.0);
        assert_eq!(parallel.peer_waiting(), 0.0);
    }

    /// A rank that took a peer's compile waited for it: that wait is named apart from the
    /// rest of its waiting.
    #[test]
    fn the_wait_for_a_peer_is_apart_from_other_waiting() {
        let mut b = Busy::default();
        b.record_waiting(2.0, Some(0.5), Some(1.25));
        b.record_waiting(1.0, None, Some(0.5));
        assert_eq!(b.waiting(), 1.5);
        assert_eq!(b.peer_waiting(), 1.25);
        assert_eq!(b.other_waiting(), 0.25);
        assert_eq!(b.other_waiting_share(), 0.25 / 2.0);
        assert_eq!(b.untimed, 1.0);
        // A wait longer than the record is not believed past it.
        let mut odd = Busy::default();
        odd.record_waiting(1.0, Some(0.0), Some(5.0));
        assert_eq!(odd.peer_waiting(), 1.0);
        assert_eq!(odd.other_waiting_share(), 0.0);
    }
}
