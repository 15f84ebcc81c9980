//! The report's hints: when the trace shows a cost clshim or a setting can remove
//! (binary queries pocl answers by compiling again, queries still forwarded under a
//! policy meant to answer them, first launches that compile size-specialised kernels),
//! this module decides from the totals and rows whether to say so, with the figures the
//! hint's text quotes. The thresholds live here; the texts are `render`'s.

use super::aggregate::Totals;
use super::rows::{ProgramKind, ProgramRow};
use std::collections::{BTreeMap, BTreeSet};

/// The binary-query hint is printed when pocl-CPU binary queries under `pass` exceed
/// this share of build time.
pub const HINT_SHARE: f64 = 0.2;
/// The forwarded-query hint is printed when binary queries forwarded to pocl CPU devices
/// the filter selects, in processes under another policy than `pass`, exceed this share
/// of build time.
pub const FORWARDED_HINT_SHARE: f64 = 0.05;
/// Programs the forwarded-query hint names, per kind.
pub const FORWARDED_HINT_PROGRAMS: usize = 3;
/// The first-launch hint is printed when what first launches on pocl CPU devices measured of
/// their compiles exceeds this share of build, binary-query and first-launch time together:
/// their wall time where their records carry no CPU time, else the seconds pocl's threads
/// were busy (`Totals::pocl_cpu_launch_busy_seconds`). A launch that waited in the queue
/// behind other work, or took its kernel from a cache, compiled nothing, and a hint that
/// the run lacked a kernel cache would be wrong there.
pub const LAUNCH_HINT_SHARE: f64 = 0.5;
/// `POCL_WORK_GROUP_SPECIALIZATION=0` is advised only where launches of kernels already
/// launched at other sizes, with pocl choosing the work-group size, took at least this
/// share of the first launches' time: where it was measured to help
/// (`bench/pocl_wg_specialization.py`, docs/performance.md: 62-71% there, each later size
/// compiling about as long as the first). On a job of fewer such launches it made a cold
/// start slower (issue 31: 1.43x on a pyopencl 2026 job), its generic work-group functions
/// costing more than the compiles they spare.
pub const RELAUNCH_SHARE: f64 = 0.5;

/// `part` as a fraction of `whole` (0 when there is no whole).
fn fraction(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        part / whole
    } else {
        0.0
    }
}

/// The binary-query hint: pocl compiles a second time to answer them.
#[derive(Debug)]
pub struct QueryHint {
    pub pocl_cpu_query_seconds: f64,
    /// Build plus binary-query seconds.
    pub total_seconds: f64,
}

impl QueryHint {
    pub fn share(&self) -> f64 {
        fraction(self.pocl_cpu_query_seconds, self.total_seconds)
    }
}

/// The forwarded-query hint: under a policy meant to answer binary queries, some on
/// selected pocl CPU devices were still forwarded (pocl compiled a second time).
#[derive(Debug)]
pub struct ForwardedHint {
    /// Every forwarded query was a Python process's (pyopencl, whose binary cache
    /// `PYOPENCL_NO_CACHE=1` turns off, measured to spare the second compile).
    pub python: bool,
    /// The policies of the processes concerned.
    pub policies: BTreeSet<String>,
    pub queries: usize,
    pub seconds: f64,
    /// Build plus binary-query seconds.
    pub total_seconds: f64,
    /// Per kind, slowest first.
    pub kinds: Vec<ForwardedKind>,
}

/// One kind of program whose binary queries were still forwarded.
#[derive(Debug)]
pub struct ForwardedKind {
    pub kind: ProgramKind,
    pub seconds: f64,
    /// Its slowest programs (at most [`FORWARDED_HINT_PROGRAMS`]), as indices of program rows.
    pub rows: Vec<usize>,
    /// How many more programs of the kind there are.
    pub more: usize,
}

impl ForwardedHint {
    pub fn share(&self) -> f64 {
        fraction(self.seconds, self.total_seconds)
    }
}

/// The first-launch hint: pocl compiles a size-specialised kernel at first launch.
#[derive(Debug)]
pub struct LaunchHint {
    pub pocl_cpu_launch_seconds: f64,
    /// Of the launches that compiled: the seconds pocl's threads were busy, where their
    /// records carry CPU time, and the wall seconds of those without.
    pub busy_seconds: f64,
    pub untimed_seconds: f64,
    /// Those launches under the program cache, those of them kept in the store, and why
    /// the others were not, by phrase.
    pub cached: usize,
    pub kept: usize,
    pub not_kept: BTreeMap<String, usize>,
    /// First launches of kernels already launched with other sizes.
    pub relaunches: usize,
    pub relaunch_seconds: f64,
    /// Build, binary-query and first-launch seconds.
    pub total_seconds: f64,
    /// The job has the shape where `POCL_WORK_GROUP_SPECIALIZATION=0` was measured to help
    /// ([`RELAUNCH_SHARE`]).
    pub specialization_helps: bool,
}

impl LaunchHint {
    /// The relaunches' share of the first launches on pocl CPU devices.
    pub fn relaunch_share(&self) -> f64 {
        fraction(self.relaunch_seconds, self.pocl_cpu_launch_seconds)
    }
}

impl LaunchHint {
    pub fn share(&self) -> f64 {
        fraction(self.pocl_cpu_launch_seconds, self.total_seconds)
    }

    /// What the launches measured of their compiles.
    pub fn compile_seconds(&self) -> f64 {
        self.busy_seconds + self.untimed_seconds
    }
}

/// The hints a report carries, each present when its threshold is passed.
pub(super) struct Hints {
    pub query: Option<QueryHint>,
    pub forwarded: Option<ForwardedHint>,
    pub launch: Option<LaunchHint>,
}

/// The hints for these rows (sorted, as the report shows them) and totals.
pub(super) fn hints(programs: &[ProgramRow], t: &Totals) -> Hints {
    let build_query = t.build_seconds + t.query_seconds;
    let hint = (build_query > 0.0 && t.pocl_cpu_pass_query_seconds / build_query > HINT_SHARE)
        .then_some(QueryHint {
            pocl_cpu_query_seconds: t.pocl_cpu_pass_query_seconds,
            total_seconds: build_query,
        });
    let forwarded_hint = (build_query > 0.0
        && t.pocl_cpu_forwarded_query_seconds / build_query > FORWARDED_HINT_SHARE)
        .then(|| forwarded_hint(programs, t, build_query));
    let all = build_query + t.launch_seconds;
    // Launching threads of one process each read the CPU of all its other threads: where
    // they launch at once, their shares can add up past the time their launches covered.
    let busy = t
        .pocl_cpu_launch_busy_seconds
        .min(t.pocl_cpu_launch_seconds);
    let untimed = t
        .pocl_cpu_launch_untimed_seconds
        .min(t.pocl_cpu_launch_seconds - busy);
    let compiling = busy + untimed;
    let launch_hint = (all > 0.0 && compiling / all > LAUNCH_HINT_SHARE).then(|| LaunchHint {
        pocl_cpu_launch_seconds: t.pocl_cpu_launch_seconds,
        busy_seconds: busy,
        untimed_seconds: untimed,
        cached: t.pocl_cpu_launches_cached,
        kept: t.pocl_cpu_launches_kept,
        not_kept: t.pocl_cpu_launches_not_kept.clone(),
        relaunches: t.pocl_cpu_relaunches,
        relaunch_seconds: t.pocl_cpu_relaunch_seconds,
        total_seconds: all,
        specialization_helps: t.pocl_cpu_launch_seconds > 0.0
            && t.pocl_cpu_relaunch_auto_seconds / t.pocl_cpu_launch_seconds >= RELAUNCH_SHARE,
    });
    Hints {
        query: hint,
        forwarded: forwarded_hint,
        launch: launch_hint,
    }
}

/// The forwarded queries by kind of program, slowest kind first; programs are named by
/// their index in `programs`.
fn forwarded_hint(programs: &[ProgramRow], t: &Totals, total_seconds: f64) -> ForwardedHint {
    let mut by_kind: BTreeMap<ProgramKind, (f64, Vec<usize>)> = BTreeMap::new();
    let mut policies = BTreeSet::new();
    for (i, p) in programs.iter().enumerate() {
        if p.forwarded_queries > 0 {
            let e = by_kind.entry(p.kind()).or_default();
            e.0 += p.forwarded_seconds;
            e.1.push(i);
            policies.extend(p.policies.iter().filter(|p| *p != "pass").cloned());
        }
    }
    let mut kinds: Vec<ForwardedKind> = by_kind
        .into_iter()
        .map(|(k, (secs, mut rows))| {
            rows.sort_by(|&a, &b| {
                programs[b]
                    .forwarded_seconds
                    .total_cmp(&programs[a].forwarded_seconds)
            });
            let more = rows.len().saturating_sub(FORWARDED_HINT_PROGRAMS);
            rows.truncate(FORWARDED_HINT_PROGRAMS);
            ForwardedKind {
                kind: k,
                seconds: secs,
                rows,
                more,
            }
        })
        .collect();
    kinds.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
    ForwardedHint {
        python: t.python_forwarded_queries == t.pocl_cpu_forwarded_queries,
        policies,
        queries: t.pocl_cpu_forwarded_queries,
        seconds: t.pocl_cpu_forwarded_query_seconds,
        total_seconds,
        kinds,
    }
}
