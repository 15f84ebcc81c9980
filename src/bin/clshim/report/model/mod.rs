//! `clshim report`'s model of a trace directory, in three steps: `aggregate` reads the
//! files into per-program and per-rank sums, `rows` turns those into the report's rows
//! and statistics, `hints` decides which hints the rows call for; [`Report`] is their
//! sum, made here. Everything the
//! renderings (`render`) and the timeline (`chrome`) use is re-exported here, so they
//! name it `report::X` whichever step owns it.

mod aggregate;
mod hints;
mod lives;
mod rows;

pub use aggregate::*;
pub use hints::*;
pub use lives::Run;
pub use rows::*;

use std::collections::BTreeSet;

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
    pub totals: Totals,
    pub hint: Option<QueryHint>,
    pub forwarded_hint: Option<ForwardedHint>,
    pub launch_hint: Option<LaunchHint>,
    /// Groups of processes that ran at separate times (more than one: runs added together).
    pub runs: Vec<Run>,
    /// Processes that did not reach `exit()`, by name.
    pub unended: Vec<String>,
    /// Some program's sources differ only by a token that changes every run (set by the
    /// caller, which compares the variants).
    pub run_unique_tokens: bool,
}

impl Aggregate {
    /// The report's rows and hints.
    pub fn report(&self, dir: &str) -> Report {
        let programs = self.program_rows();
        let (ranks, median_rank_seconds) = self.rank_rows();
        let totals = self.totals.clone();
        let Hints {
            query: hint,
            forwarded: forwarded_hint,
            launch: launch_hint,
        } = hints(&programs, &totals);
        let Problems { listed, more } = self.problems();
        let mut problems: Vec<String> = listed.iter().map(|p| p.to_string()).collect();
        if more > 0 {
            problems.push(format!("... {more} more skipped, not listed"));
        }
        Report {
            dir: dir.to_string(),
            files: self.listed,
            records: self.records,
            skipped: self.skipped,
            problems,
            hosts: self.hosts.clone(),
            processes: self.processes.len(),
            programs,
            ranks,
            median_rank_seconds,
            totals,
            hint,
            forwarded_hint,
            launch_hint,
            runs: lives::runs(&self.lives),
            unended: lives::unended(&self.lives)
                .iter()
                .map(|l| l.name())
                .collect(),
            run_unique_tokens: false,
        }
    }
}
