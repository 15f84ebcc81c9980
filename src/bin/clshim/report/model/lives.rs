//! The processes' lives: when each began recording and when its last record or its `exit`
//! record came, which is all a trace says about time at the scale of a job. From them the
//! report tells two things no sum shows: processes with no end (killed, crashed, or gone
//! through `_exit` or `exec` before exiting), whose figures stop early and can look like a
//! finished, faster process; and how many runs a directory holds, groups of processes
//! that ran at separate times, as a trace directory reused by a second run does (the
//! report then adds both runs together).

use crate::report::rank_key::RankKey;
use crate::report::traces::{Event, Record};

/// One writer's life within one file.
#[derive(Debug, Clone)]
pub struct Life {
    pub rank: Option<i64>,
    pub pid: u64,
    pub instance: Option<String>,
    /// Earliest `ts` of its records (its `process` record's: when recording began).
    pub start: f64,
    /// Latest end (`ts + seconds`) of its records, the `exit` record's included.
    pub end: f64,
    /// An `exit` record was read.
    pub ended: bool,
    /// Its `process` record says the writer records its exit.
    pub exit_recorded: bool,
}

/// The lives of one file's writers (usually one).
#[derive(Debug, Default)]
pub struct FileLives(pub Vec<Life>);

impl FileLives {
    pub fn add(&mut self, r: &Record) {
        let inst = r.instance.as_deref();
        let i = match self
            .0
            .iter()
            .position(|l| l.rank == r.rank && l.pid == r.pid && l.instance.as_deref() == inst)
        {
            Some(i) => i,
            None => {
                self.0.push(Life {
                    rank: r.rank,
                    pid: r.pid,
                    instance: inst.map(str::to_string),
                    start: f64::INFINITY,
                    end: f64::NEG_INFINITY,
                    ended: false,
                    exit_recorded: false,
                });
                self.0.len() - 1
            }
        };
        let l = &mut self.0[i];
        l.start = l.start.min(r.ts);
        l.end = l.end.max(r.ts + r.seconds);
        l.ended |= r.event == Event::Exit;
        l.exit_recorded |= r.event == Event::Process && r.exit_recorded == Some(true);
    }
}

/// A process's life, in the report's terms.
#[derive(Debug, Clone)]
pub struct ProcessLife {
    pub rank: RankKey,
    pub host: String,
    pub pid: u64,
    pub start: f64,
    pub end: f64,
    pub ended: bool,
    pub exit_recorded: bool,
}

impl ProcessLife {
    /// `rank 1 (pid 4242 on vm)`, or `pid 4242 on vm`.
    pub fn name(&self) -> String {
        match &self.rank {
            RankKey::Rank(n) => format!("rank {n} (pid {} on {})", self.pid, self.host),
            RankKey::Process { .. } => format!("pid {} on {}", self.pid, self.host),
        }
    }
}

/// Processes that ran together, overlapping in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub start: f64,
    pub end: f64,
    pub processes: usize,
}

/// The runs `lives` form: a process that starts after every earlier one ended begins a
/// new run.
pub fn runs(lives: &[ProcessLife]) -> Vec<Run> {
    let mut by_start: Vec<&ProcessLife> = lives.iter().filter(|l| l.start.is_finite()).collect();
    by_start.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut out: Vec<Run> = Vec::new();
    for l in by_start {
        match out.last_mut() {
            Some(last) if l.start <= last.end => {
                last.end = last.end.max(l.end);
                last.processes += 1;
            }
            _ => out.push(Run {
                start: l.start,
                end: l.end,
                processes: 1,
            }),
        }
    }
    out
}

/// Processes whose writer records its exit but whose file has no `exit` record.
pub fn unended(lives: &[ProcessLife]) -> Vec<&ProcessLife> {
    let mut v: Vec<&ProcessLife> = lives
        .iter()
        .filter(|l| l.exit_recorded && !l.ended)
        .collect();
    v.sort_by(|a, b| (&a.rank, &a.host, a.pid).cmp(&(&b.rank, &b.host, b.pid)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(start: f64, end: f64) -> ProcessLife {
        ProcessLife {
            rank: RankKey::Rank(0),
            host: "h".into(),
            pid: 1,
            start,
            end,
            ended: true,
            exit_recorded: true,
        }
    }

    #[test]
    fn overlapping_processes_are_one_run() {
        let one = [life(0.0, 10.0), life(1.0, 12.0), life(11.0, 13.0)];
        assert_eq!(runs(&one).len(), 1);
        let two = [
            life(0.0, 10.0),
            life(1.0, 9.0),
            life(20.0, 30.0),
            life(21.0, 29.0),
        ];
        let l = runs(&two);
        assert_eq!(l.len(), 2);
        assert_eq!((l[1].start, l[1].end, l[1].processes), (20.0, 30.0, 2));
        let mut cut = life(0.0, 1.0);
        cut.ended = false;
        assert_eq!(unended(&[cut.clone(), life(0.0, 2.0)]).len(), 1);
        cut.exit_recorded = false;
        assert!(unended(&[cut]).is_empty(), "an older writer says nothing");
    }
}
