//! "Do ranks compile the same programs?": builds and first launches that compiled what
//! another rank also compiled (the same source hash, options and device, and for a launch
//! the same kernel and sizes), with or without clshim's sharing, and what the sharing took
//! from a peer instead (records' `shared`, `peer_wait_seconds`), per program and per rank.
//! Gathered in the report's one pass over the records ([`FileRepeats::add`]), one small
//! entry per (rank, program) and (rank, launch), and summed here into text and JSON.
//!
//! A repeat is a compile on a rank other than the first to compile the program (by the
//! start of its first compile): all but one of the compiles of a program across ranks,
//! which is what one compile per node leaves to do on a single node. A build taken from a
//! peer, from the store's kept compiles or pocl's own cache, or served the driver's binary,
//! compiled nothing and is no repeat (`origin` says which). The same counts per host are
//! `by_host`'s to show.

use crate::report::build_facts::rank_list;
use crate::report::origin::{Origin, Taken};
use crate::report::rank_key::{rank_labels, RankKey, Writers};
use crate::report::render::clip;
use crate::report::traces::{Event, Id, Record};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;

/// What makes two builds the same program: source hash, options, devices.
type Identity = (String, String, String);

/// A first launch's identity: its program's, its kernel and its sizes.
type LaunchIdentity = (Identity, String, Vec<u64>, Option<Vec<u64>>);

/// One rank's builds of one program (or first launches of one kernel at one size).
#[derive(Clone, Debug, Default)]
pub struct RankBuilds {
    /// By where their compile came from, with the waits for a peer or another node.
    pub taken: Taken,
    pub compiled_cpu: f64,
    /// When its first compile began (Unix seconds).
    pub first_compile: Option<f64>,
}

impl RankBuilds {
    pub fn add(&mut self, o: &RankBuilds) {
        self.taken.add(&o.taken);
        self.compiled_cpu += o.compiled_cpu;
        self.first_compile = match (self.first_compile, o.first_compile) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    fn record(&mut self, r: &Record) {
        self.taken.count(r);
        if Origin::of(r).compiled() {
            self.compiled_cpu += r.cpu_seconds.unwrap_or(0.0);
            self.first_compile = Some(self.first_compile.map_or(r.ts, |t| t.min(r.ts)));
        }
    }

    pub fn compiled(&self) -> usize {
        self.taken.compiled
    }
}

/// One file's part.
#[derive(Default)]
pub struct FileRepeats {
    writers: Writers,
    /// (writer, program id) -> its identity, from its build.
    programs: HashMap<(usize, Id), usize>,
    /// Each program's identity, kernel names, and whether its devices are pocl CPU devices
    /// (where clshim's sharing applies).
    identities: Vec<(Identity, Vec<String>, bool)>,
    identity_index: HashMap<Identity, usize>,
    builds: HashMap<(usize, usize), RankBuilds>,
    launches: HashMap<(usize, LaunchIdentity), RankBuilds>,
    build_cpu: f64,
    launch_cpu: f64,
    /// Some record says what sharing did (the program cache shared compiles in the run).
    sharing: bool,
    /// The process record says the program cache was on.
    program_cache: bool,
}

impl FileRepeats {
    fn writer(&mut self, r: &Record) -> usize {
        self.writers.index(r.rank, r.pid, r.instance.as_deref()).0
    }

    pub fn add(&mut self, r: &Record) {
        self.sharing |= r.shared.is_some();
        match r.event {
            Event::Process => self.program_cache |= r.program_cache == Some(true),
            Event::Build | Event::Compile | Event::Link => {
                self.build_cpu += r.cpu_seconds.unwrap_or(0.0);
                if r.event != Event::Link {
                    self.add_build(r);
                }
            }
            Event::FirstLaunch => {
                self.launch_cpu += r.cpu_seconds.unwrap_or(0.0);
                self.add_launch(r);
            }
            _ => {}
        }
    }

    fn add_build(&mut self, r: &Record) {
        let Some(hash) = r.hash() else { return };
        if r.failed() {
            return;
        }
        let devices: Vec<String> = r
            .devices()
            .map(|d| {
                format!(
                    "{} ({})",
                    d.name.as_deref().unwrap_or("?"),
                    d.driver.as_deref().unwrap_or("?")
                )
            })
            .collect();
        let id: Identity = (
            hash.to_string(),
            r.options.as_deref().unwrap_or("").to_string(),
            devices.join(", "),
        );
        let i = match self.identity_index.get(&id) {
            Some(&i) => i,
            None => {
                let mut kernels: Vec<String> = r.kernels().iter().map(|k| k.to_string()).collect();
                kernels.sort();
                kernels.dedup();
                let pocl = r.devices().any(|d| d.is_pocl_cpu());
                self.identities.push((id.clone(), kernels, pocl));
                self.identity_index.insert(id, self.identities.len() - 1);
                self.identities.len() - 1
            }
        };
        let w = self.writer(r);
        if let Some(p) = r.program.clone() {
            self.programs.insert((w, p), i);
        }
        self.builds.entry((w, i)).or_default().record(r);
    }

    fn add_launch(&mut self, r: &Record) {
        if r.failed() {
            return;
        }
        let w = self.writer(r);
        let Some(&i) = r.program.clone().and_then(|p| self.programs.get(&(w, p))) else {
            return;
        };
        let key = (
            self.identities[i].0.clone(),
            r.kernel.as_deref().unwrap_or("").to_string(),
            r.global_size.clone().unwrap_or_default(),
            r.local_size.clone(),
        );
        self.launches.entry((w, key)).or_default().record(r);
    }
}

/// One program's builds, per rank.
#[derive(Debug, Default)]
pub struct ProgramRepeats {
    pub kernels: Vec<String>,
    pub per_rank: BTreeMap<RankKey, RankBuilds>,
    /// Built for pocl CPU devices, where clshim's sharing applies.
    pub pocl: bool,
}

impl ProgramRepeats {
    /// The rank whose compile came first.
    fn first(&self) -> Option<&RankKey> {
        self.per_rank
            .iter()
            .filter_map(|(k, b)| b.first_compile.map(|t| (k, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(k, _)| k)
    }

    /// (compiles, CPU seconds) on ranks other than the first to compile, per rank.
    fn repeats(&self) -> BTreeMap<&RankKey, (usize, f64)> {
        let first = self.first();
        self.per_rank
            .iter()
            .filter(|(k, b)| Some(*k) != first && b.compiled() > 0)
            .map(|(k, b)| (k, (b.compiled(), b.compiled_cpu)))
            .collect()
    }

    pub fn sum(&self) -> RankBuilds {
        let mut t = RankBuilds::default();
        for b in self.per_rank.values() {
            t.add(b);
        }
        t
    }
}

/// A source hash as the tables show it: enough hex digits to tell programs apart.
pub fn short_hash(hash: &str) -> String {
    hash.trim_start_matches("fnv1a64:")
        .chars()
        .take(12)
        .collect()
}

/// A program's line: its builds and first launches summed over ranks, and its repeats
/// (builds and first launches) and their CPU.
pub struct Row<'a> {
    pub id: &'a Identity,
    pub program: &'a ProgramRepeats,
    pub builds: RankBuilds,
    pub launches: RankBuilds,
    pub repeats: usize,
    pub repeat_cpu: f64,
}

/// A rank's (or a host's) builds in the JSON: by where their compiles came from, and the
/// CPU of those compiled.
pub fn builds_json(b: &RankBuilds) -> Value {
    let mut v = b.taken.json();
    v["compiled_cpu_seconds"] = json!(b.compiled_cpu);
    v
}

/// One host's ranks, and their builds and first launches summed.
#[derive(Debug, Default)]
pub struct HostBuilds {
    pub ranks: BTreeSet<RankKey>,
    pub builds: RankBuilds,
    pub launches: RankBuilds,
}

/// Everything gathered, merged over files.
#[derive(Debug, Default)]
pub struct Repeats {
    pub programs: HashMap<Identity, ProgramRepeats>,
    pub launches: HashMap<LaunchIdentity, BTreeMap<RankKey, RankBuilds>>,
    /// Per host (the report's name for a file's host).
    pub hosts: BTreeMap<String, HostBuilds>,
    pub build_cpu: f64,
    pub launch_cpu: f64,
    pub sharing: bool,
    pub program_cache: bool,
}

/// The figures the text and the JSON share.
#[derive(Debug, Default, PartialEq)]
pub struct Summary {
    /// Programs built (at all) on more than one rank, of all programs.
    pub programs_on_many: usize,
    pub programs: usize,
    pub builds: usize,
    pub repeat_builds: usize,
    pub repeat_build_cpu: f64,
    pub launches: usize,
    pub repeat_launches: usize,
    pub repeat_launch_cpu: f64,
    pub builds_from_peer: usize,
    pub launches_from_peer: usize,
    /// Taken from the store's kept compiles, and of those another node's.
    pub builds_from_store: usize,
    pub builds_from_other_node: usize,
    pub launches_from_store: usize,
    pub launches_from_other_node: usize,
    pub gave_up: usize,
    pub waited: f64,
    /// CPU of the repeated builds of programs for pocl CPU devices.
    pub repeat_build_cpu_pocl: f64,
}

/// The hint names the sharing where repeated compiles on pocl CPU devices took at least
/// this share of build CPU, and [`HINT_MIN_SECONDS`]: on bench/workload.py, sharing took
/// off about what the repeats cost (bench/results/shared-builds.md).
pub const HINT_MIN_SHARE: f64 = 0.10;
pub const HINT_MIN_SECONDS: f64 = 0.5;

impl Repeats {
    /// Folds one file in; `host` is the report's name for the file's host.
    pub fn add_file(&mut self, f: FileRepeats, host: &str) {
        let keys = f.writers.keys(host);
        let mut here = HostBuilds::default();
        for ((w, i), mut b) in f.builds {
            b.taken.resolve(host);
            let (id, kernels, pocl) = &f.identities[i];
            let p = self.programs.entry(id.clone()).or_default();
            if p.kernels.is_empty() {
                p.kernels = kernels.clone();
            }
            p.pocl |= pocl;
            p.per_rank.entry(keys[w].clone()).or_default().add(&b);
            here.ranks.insert(keys[w].clone());
            here.builds.add(&b);
        }
        for ((w, l), mut b) in f.launches {
            b.taken.resolve(host);
            here.ranks.insert(keys[w].clone());
            here.launches.add(&b);
            self.launches
                .entry(l)
                .or_default()
                .entry(keys[w].clone())
                .or_default()
                .add(&b);
        }
        if !here.ranks.is_empty() {
            self.add_host(host, here);
        }
        self.build_cpu += f.build_cpu;
        self.launch_cpu += f.launch_cpu;
        self.sharing |= f.sharing;
        self.program_cache |= f.program_cache;
    }

    fn add_host(&mut self, host: &str, h: HostBuilds) {
        let mine = self.hosts.entry(host.to_string()).or_default();
        mine.ranks.extend(h.ranks);
        mine.builds.add(&h.builds);
        mine.launches.add(&h.launches);
    }

    pub fn merge(&mut self, o: Repeats) {
        for (host, h) in o.hosts {
            self.add_host(&host, h);
        }
        for (id, p) in o.programs {
            let mine = self.programs.entry(id).or_default();
            if mine.kernels.is_empty() {
                mine.kernels = p.kernels;
            }
            mine.pocl |= p.pocl;
            for (k, b) in p.per_rank {
                mine.per_rank.entry(k).or_default().add(&b);
            }
        }
        for (l, per_rank) in o.launches {
            let mine = self.launches.entry(l).or_default();
            for (k, b) in per_rank {
                mine.entry(k).or_default().add(&b);
            }
        }
        self.build_cpu += o.build_cpu;
        self.launch_cpu += o.launch_cpu;
        self.sharing |= o.sharing;
        self.program_cache |= o.program_cache;
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            programs: self.programs.len(),
            ..Summary::default()
        };
        for p in self.programs.values() {
            s.programs_on_many += usize::from(p.per_rank.len() > 1);
            let t = p.sum().taken;
            s.builds += t.total();
            s.builds_from_peer += t.from_peer;
            s.builds_from_store += t.from_store;
            s.builds_from_other_node += t.from_other_node;
            s.gave_up += t.gave_up;
            s.waited += t.waited;
            for (n, cpu) in p.repeats().values() {
                s.repeat_builds += n;
                s.repeat_build_cpu += cpu;
                if p.pocl {
                    s.repeat_build_cpu_pocl += cpu;
                }
            }
        }
        for per_rank in self.launches.values() {
            let l = ProgramRepeats {
                per_rank: per_rank.clone(),
                ..ProgramRepeats::default()
            };
            let t = l.sum().taken;
            s.launches += t.total();
            s.launches_from_peer += t.from_peer;
            s.launches_from_store += t.from_store;
            s.launches_from_other_node += t.from_other_node;
            s.gave_up += t.gave_up;
            s.waited += t.waited;
            for (n, cpu) in l.repeats().values() {
                s.repeat_launches += n;
                s.repeat_launch_cpu += cpu;
            }
        }
        s
    }

    /// Per rank: (builds, launches) summed over programs, and the CPU of its repeats.
    fn per_rank(&self) -> BTreeMap<RankKey, (RankBuilds, RankBuilds, f64)> {
        let mut out: BTreeMap<RankKey, (RankBuilds, RankBuilds, f64)> = BTreeMap::new();
        for p in self.programs.values() {
            for (k, b) in &p.per_rank {
                out.entry(k.clone()).or_default().0.add(b);
            }
            for (k, (_, cpu)) in p.repeats() {
                out.entry(k.clone()).or_default().2 += cpu;
            }
        }
        for per_rank in self.launches.values() {
            for (k, b) in per_rank {
                out.entry(k.clone()).or_default().1.add(b);
            }
        }
        out
    }

    /// Programs, most repeated CPU (builds and first launches) first, then most ranks: each
    /// with its builds and its first launches summed over ranks, and its repeats' count
    /// and CPU.
    pub fn rows(&self) -> Vec<Row<'_>> {
        let mut launches: HashMap<&Identity, (RankBuilds, usize, f64)> = HashMap::new();
        for ((id, ..), per_rank) in &self.launches {
            let l = ProgramRepeats {
                per_rank: per_rank.clone(),
                ..ProgramRepeats::default()
            };
            let e = launches.entry(id).or_default();
            e.0.add(&l.sum());
            for (n, cpu) in l.repeats().values() {
                e.1 += n;
                e.2 += cpu;
            }
        }
        let mut rows: Vec<Row> = self
            .programs
            .iter()
            .map(|(id, p)| {
                let (n, cpu) = p
                    .repeats()
                    .values()
                    .fold((0, 0.0), |(n, c), (m, d)| (n + m, c + d));
                let (launched, ln, lcpu) = launches.remove(id).unwrap_or_default();
                Row {
                    id,
                    program: p,
                    builds: p.sum(),
                    launches: launched,
                    repeats: n + ln,
                    repeat_cpu: cpu + lcpu,
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.repeat_cpu
                .total_cmp(&a.repeat_cpu)
                .then(b.program.per_rank.len().cmp(&a.program.per_rank.len()))
                .then(a.id.cmp(b.id))
        });
        rows
    }

    /// The share of build CPU the hint names, when it is due: nothing was shared in the run
    /// (no record says what sharing did), and repeated compiles on pocl CPU devices took
    /// at least [`HINT_MIN_SHARE`] of the build CPU and [`HINT_MIN_SECONDS`].
    fn hint_share(&self, s: &Summary) -> Option<f64> {
        let share = if self.build_cpu > 0.0 {
            s.repeat_build_cpu_pocl / self.build_cpu
        } else {
            0.0
        };
        (!self.sharing && share >= HINT_MIN_SHARE && s.repeat_build_cpu_pocl >= HINT_MIN_SECONDS)
            .then_some(share)
    }

    /// Whether the text has anything to say: a program built on more than one rank, and
    /// either sharing at work or repeats that cost at least [`HINT_MIN_SECONDS`] of CPU
    /// (a warm run's builds, served by pocl's own kernel cache, repeat at next to no cost;
    /// the JSON counts them all the same).
    fn worth_saying(&self, s: &Summary) -> bool {
        s.programs_on_many > 0
            && (self.sharing || s.repeat_build_cpu + s.repeat_launch_cpu >= HINT_MIN_SECONDS)
    }

    pub fn text(&self, wide: bool) -> String {
        let s = self.summary();
        if !self.worth_saying(&s) {
            return String::new();
        }
        let pct = |part: f64, whole: f64| {
            if whole > 0.0 {
                100.0 * part / whole
            } else {
                0.0
            }
        };
        let mut t = String::new();
        let _ = writeln!(
            t,
            "\nRepeats across ranks (the same source, options and device built on more than one rank)"
        );
        let _ = writeln!(
            t,
            " {} of {} programs were built on more than one rank; {} of {} builds compiled a program \
             another rank also compiled: {:.3} s CPU, {:.0}% of build CPU.",
            s.programs_on_many,
            s.programs,
            s.repeat_builds,
            s.builds,
            s.repeat_build_cpu,
            pct(s.repeat_build_cpu, self.build_cpu)
        );
        if s.launches > 0 {
            let _ = writeln!(
                t,
                " First launches: {} of {} compiled a kernel (same program and sizes) another rank \
                 also compiled: {:.3} s CPU, {:.0}% of first launch CPU.",
                s.repeat_launches,
                s.launches,
                s.repeat_launch_cpu,
                pct(s.repeat_launch_cpu, self.launch_cpu)
            );
        }
        if s.builds_from_peer + s.launches_from_peer + s.gave_up > 0 {
            let _ = writeln!(
                t,
                " Shared (clshim's program cache, one compile per node): {} builds and {} first \
                 launches taken from a peer; ranks waited {:.3} s for peers{}{}.",
                s.builds_from_peer,
                s.launches_from_peer,
                s.waited,
                if s.builds_from_store + s.launches_from_store > 0 {
                    " and other nodes"
                } else {
                    ""
                },
                if s.gave_up > 0 {
                    format!(
                        ", and {} compiles began after waiting past what compiling would take",
                        s.gave_up
                    )
                } else {
                    String::new()
                }
            );
        }
        if s.builds_from_store + s.launches_from_store > 0 {
            let _ = writeln!(
                t,
                " Kept (clshim's program cache, one compile per program across jobs and nodes): {} \
                 builds and {} first launches took the store's kept compiles, {} and {} of them \
                 another node's.",
                s.builds_from_store,
                s.launches_from_store,
                s.builds_from_other_node,
                s.launches_from_other_node
            );
        }
        // What each program's builds took from elsewhere, by where, is `by_host`'s table.
        let rows = self.rows();
        let shown = if wide { rows.len() } else { rows.len().min(10) };
        let groups = format!(
            " {:<16} {:<12}  {:>5}  {:<15}  {}",
            "", "", "", "builds", "first launches"
        );
        let _ = writeln!(t, "{groups}");
        let _ = writeln!(
            t,
            " {:<16} {:<12}  {:>5}  {:>8}  {:>5}  {:>8}  {:>5}  {:>8}  {:>12}  compiled on",
            "kernels",
            "source",
            "ranks",
            "compiled",
            "taken",
            "compiled",
            "taken",
            "waited s",
            "repeat CPU s"
        );
        for r in rows.iter().take(shown) {
            let compiled_on: BTreeSet<RankKey> = r
                .program
                .per_rank
                .iter()
                .filter(|(_, b)| b.compiled() > 0)
                .map(|(k, _)| k.clone())
                .collect();
            let (b, l) = (&r.builds.taken, &r.launches.taken);
            let _ = writeln!(
                t,
                " {:<16} {:<12}  {:>5}  {:>8}  {:>5}  {:>8}  {:>5}  {:>8.3}  {:>12.3}  {}",
                clip(&r.program.kernels.join(","), 16),
                short_hash(&r.id.0),
                r.program.per_rank.len(),
                b.compiled,
                b.reused(),
                l.compiled,
                l.reused(),
                b.waited + l.waited,
                r.repeat_cpu,
                if compiled_on.is_empty() {
                    "-".to_string()
                } else {
                    rank_list(&compiled_on)
                }
            );
        }
        if shown < rows.len() {
            let _ = writeln!(
                t,
                " ... {} more programs (--wide lists them all)",
                rows.len() - shown
            );
        }
        let per_rank = self.per_rank();
        let labels = rank_labels(per_rank.keys());
        let _ = writeln!(t, " {:>6}  {:<15}  first launches", "", "builds");
        let _ = writeln!(
            t,
            " {:>6}  {:>8}  {:>5}  {:>8}  {:>5}  {:>8}  {:>12}",
            "rank", "compiled", "taken", "compiled", "taken", "waited s", "repeat CPU s"
        );
        for ((_, (b, l, cpu)), label) in per_rank.iter().zip(&labels) {
            let (b, l) = (&b.taken, &l.taken);
            let _ = writeln!(
                t,
                " {:>6}  {:>8}  {:>5}  {:>8}  {:>5}  {:>8.3}  {:>12.3}",
                label,
                b.compiled,
                b.reused(),
                l.compiled,
                l.reused(),
                b.waited + l.waited,
                cpu,
            );
        }
        let _ = writeln!(
            t,
            " compiled: the driver compiled; taken: compiled nothing (a peer's compile, the store's \
             kept compiles, pocl's own\n cache, or the driver's binary served from the native \
             store: \"Builds per host and per program\" says which);\n waited: for a peer's or \
             another node's compile; repeat CPU: compiles of what another rank compiled first."
        );
        if let Some(share) = self.hint_share(&s) {
            let what = if self.program_cache {
                "the program cache ran with its sharing off\n      (CLSHIM_SHARE_BUILDS=0, \
                 --no-share-builds): with it on, the default, ranks of a node that build the \
                 same program share one compile of it."
            } else {
                "under clshim run's program cache (on by default) ranks of a node\n      that \
                 build the same program share one compile of it (pocl devices, Linux), and later \
                 jobs take the compiles each job keeps in the store."
            };
            let _ = writeln!(
                t,
                "\nhint: {:.0}% of build CPU went to programs another rank also compiled: {what}",
                100.0 * share
            );
        }
        t
    }

    pub fn json(&self) -> Value {
        let s = self.summary();
        let rank_json = builds_json;
        let programs: Vec<Value> = self
            .rows()
            .into_iter()
            .map(|r| {
                let labels = rank_labels(r.program.per_rank.keys());
                json!({
                    "kernels": r.program.kernels,
                    "source_hash": r.id.0,
                    "options": r.id.1,
                    "devices": r.id.2,
                    "ranks": r.program.per_rank.len(),
                    "repeats": r.repeats,
                    "repeat_cpu_seconds": r.repeat_cpu,
                    "builds": rank_json(&r.builds),
                    "first_launches": rank_json(&r.launches),
                    "per_rank": r.program.per_rank.values().zip(labels).map(|(b, l)| {
                        let mut v = rank_json(b);
                        v["rank"] = json!(l);
                        v
                    }).collect::<Vec<_>>(),
                })
            })
            .collect();
        let per_rank = self.per_rank();
        let labels = rank_labels(per_rank.keys());
        let ranks: Vec<Value> = per_rank
            .values()
            .zip(labels)
            .map(|((b, l, cpu), label)| {
                json!({
                    "rank": label,
                    "builds": rank_json(b),
                    "first_launches": rank_json(l),
                    "repeat_cpu_seconds": cpu,
                })
            })
            .collect();
        json!({
            "programs_on_more_than_one_rank": s.programs_on_many,
            "programs": s.programs,
            "builds": s.builds,
            "repeat_builds": s.repeat_builds,
            "repeat_build_cpu_seconds": s.repeat_build_cpu,
            "build_cpu_seconds": self.build_cpu,
            "first_launches": s.launches,
            "repeat_first_launches": s.repeat_launches,
            "repeat_first_launch_cpu_seconds": s.repeat_launch_cpu,
            "first_launch_cpu_seconds": self.launch_cpu,
            "builds_from_peer": s.builds_from_peer,
            "first_launches_from_peer": s.launches_from_peer,
            "builds_from_store": s.builds_from_store,
            "builds_from_other_node": s.builds_from_other_node,
            "first_launches_from_store": s.launches_from_store,
            "first_launches_from_other_node": s.launches_from_other_node,
            "compiled_after_waiting": s.gave_up,
            "peer_wait_seconds": s.waited,
            "by_program": programs,
            "by_rank": ranks,
        })
    }
}
