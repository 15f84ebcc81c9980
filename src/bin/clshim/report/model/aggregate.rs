//! Aggregation for `clshim report`: turns the records of a trace directory into the
//! sums that answer "where does kernel-build time go across my ranks?". This module owns
//! the grouping rules (programs by kernel names, or source hash plus kernel names, across
//! processes; binary queries and first launches joined to the build of the same
//! program in the same process; compiles and libraries joined to the first link that
//! takes them; ranks by the records' `rank`, else by process: host
//! plus `instance`, or host plus pid) and the per-program, per-rank sums. Files are read in
//! parallel, each streamed record by record into small per-program and per-rank
//! accumulators ([`FileAcc`], merged into an [`Aggregate`]), so memory depends on the
//! number of programs, ranks and threads, not on the number of records. The rows and
//! statistics are `rows`', the hints `hints`', rendering `render`'s, the timeline `chrome`'s.
use crate::report::busy::{exclusive, Span};
use crate::report::origin::Origin;
use crate::report::rank_key::{median, RankKey};
use crate::report::traces::{self, Event, Id, Identity, Problem, Record};
use crate::wall_union::WallUnion;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A rank is "far slower" when its total exceeds both of these relative to the median.
pub const SLOW_FACTOR: f64 = 1.5;
pub const SLOW_MARGIN_S: f64 = 0.5;
/// Problems kept per file and in all (the count of skipped lines stays exact).
pub const PROBLEMS_PER_FILE: usize = 100;
pub const PROBLEMS_LISTED: usize = 1000;

/// One process: its `instance` on its host when the records carry one, else its file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProcessId {
    Instance(String, String),
    File(usize, u64),
}

/// A program across processes: source hash (or the hash of a link's input hashes) plus
/// kernel names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProgramKey {
    pub hash: Option<String>,
    pub kernels: Vec<String>,
    /// The row's name where there are no kernel names to show: compiled objects or a
    /// library no recorded link took, a link that made no kernels. None for every
    /// program with kernels, and for programs clshim knows nothing of.
    pub unnamed: Option<&'static str>,
    /// A build that failed: `kernels` are those its source declares (`source_kernels`).
    pub failed: bool,
}

/// Names of kernel-less rows ([`ProgramKey::unnamed`]).
pub const NEVER_LINKED: &str = "(compiled, no link recorded)";
pub const LIBRARY_NEVER_LINKED: &str = "(library, no link recorded)";
pub const LINKED_NO_KERNELS: &str = "(linked, no kernels)";

/// How a linked program's hash starts: `link:` and the hash of its inputs' hashes.
pub const LINK_HASH_PREFIX: &str = "link:";

impl ProgramKey {
    fn unknown() -> ProgramKey {
        ProgramKey {
            hash: None,
            kernels: Vec::new(),
            unnamed: None,
            failed: false,
        }
    }
}

/// min / median / max / total of per-rank sums.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub total: f64,
}

impl Stats {
    pub(super) fn of(mut v: Vec<f64>) -> Stats {
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
}

pub fn share(part: f64, rest: f64) -> f64 {
    if part + rest > 0.0 {
        part / (part + rest)
    } else {
        0.0
    }
}

/// Seconds of one program in one rank.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slot {
    pub(super) build: f64,
    pub(super) query: f64,
    pub(super) launch: f64,
    /// The rank built, compiled or linked the program (not only queried or launched it).
    pub(super) built: bool,
    /// A digest of the first source the rank built it from: ranks whose first sources
    /// differ each compiled their own variant (a fixed size, not a set per rank).
    pub(super) first_source: Option<u64>,
}

impl Slot {
    fn add(&mut self, o: Slot) {
        self.build += o.build;
        self.query += o.query;
        self.launch += o.launch;
        self.built |= o.built;
        self.first_source = self.first_source.or(o.first_source);
    }

    fn saw_source(&mut self, hash: &str) {
        if self.first_source.is_none() {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            hash.hash(&mut h);
            self.first_source = Some(h.finish());
        }
    }
}

/// A compiled object or a library whose build time waits for the link that names it as
/// an input: a compile comes before its link, and only the link knows the kernel names.
#[derive(Debug, Default)]
struct AwaitingLink {
    /// The writer (file-local index) that compiled it.
    writer: usize,
    seconds: f64,
    compiles: usize,
    links: usize,
    failed: usize,
    options: BTreeSet<String>,
}

impl AwaitingLink {
    fn add(&mut self, o: AwaitingLink) {
        self.seconds += o.seconds;
        self.compiles += o.compiles;
        self.links += o.links;
        self.failed += o.failed;
        self.options.extend(o.options);
    }
}

/// What a program id was made by, as a link's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    Compiled,
    Library,
    Binary,
}

/// A program id that may be a link's input: how it was made, its source hash (a
/// library's is the hash of its inputs'), and its build time not yet claimed.
#[derive(Debug)]
struct Object {
    made: Made,
    hash: Option<String>,
    pending: Option<AwaitingLink>,
}

/// Call counts and the sets shown in a program row.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) builds: usize,
    pub(super) compiles: usize,
    pub(super) links: usize,
    pub(super) queries: usize,
    pub(super) launches: usize,
    pub(super) failed: usize,
    pub(super) policies: BTreeSet<String>,
    pub(super) actions: BTreeSet<String>,
    pub(super) options: BTreeSet<String>,
    pub(super) sources: BTreeSet<String>,
    /// What linked programs were made from (`link of 2 compiled`).
    pub(super) origins: BTreeSet<String>,
    /// Binary-query seconds forwarded to a selected pocl CPU device under a policy
    /// other than `pass` (kept only for files under such a policy).
    pub(super) forwarded_seconds: f64,
    pub(super) forwarded_queries: usize,
    /// The first error lines of failed builds (a few, [`ERRORS_KEPT`]), with their
    /// status: `CL_BUILD_PROGRAM_FAILURE: <source>:3:5: error: ...`.
    pub(super) errors: BTreeSet<String>,
    /// Builds and first launches that compiled nothing: taken from a peer, the store or
    /// pocl's own cache, or served (`origin`).
    pub(super) reused: usize,
}

/// Distinct error lines a program row keeps.
pub const ERRORS_KEPT: usize = 3;

impl Counts {
    fn add(&mut self, o: Counts) {
        self.builds += o.builds;
        self.compiles += o.compiles;
        self.links += o.links;
        self.queries += o.queries;
        self.launches += o.launches;
        self.failed += o.failed;
        self.policies.extend(o.policies);
        self.actions.extend(o.actions);
        self.options.extend(o.options);
        self.sources.extend(o.sources);
        self.origins.extend(o.origins);
        self.forwarded_seconds += o.forwarded_seconds;
        self.forwarded_queries += o.forwarded_queries;
        self.reused += o.reused;
        for e in o.errors {
            if self.errors.len() < ERRORS_KEPT {
                self.errors.insert(e);
            }
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct ProgAcc {
    pub(super) per_rank: HashMap<RankKey, Slot>,
    pub(super) counts: Counts,
}

/// Sums for one rank.
#[derive(Debug, Default, Clone)]
pub(super) struct RankAcc {
    pub(super) hosts: BTreeSet<String>,
    pub(super) pids: BTreeSet<u64>,
    pub(super) processes: BTreeSet<ProcessId>,
    pub(super) builds: usize,
    pub(super) build_seconds: f64,
    pub(super) queries: usize,
    pub(super) query_seconds: f64,
    pub(super) launches: usize,
    pub(super) launch_seconds: f64,
}

impl RankAcc {
    fn add(&mut self, o: RankAcc) {
        self.hosts.extend(o.hosts);
        self.pids.extend(o.pids);
        self.processes.extend(o.processes);
        self.builds += o.builds;
        self.build_seconds += o.build_seconds;
        self.queries += o.queries;
        self.query_seconds += o.query_seconds;
        self.launches += o.launches;
        self.launch_seconds += o.launch_seconds;
    }
}

/// Directory-wide sums.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub builds: usize,
    pub build_seconds: f64,
    pub queries: usize,
    pub query_seconds: f64,
    pub launches: usize,
    pub launch_seconds: f64,
    /// Binary queries on pocl CPU devices in processes under `pass`.
    pub pocl_cpu_pass_query_seconds: f64,
    /// Binary queries forwarded to pocl CPU devices the filter selects, in processes
    /// under another policy (`substitute`, `suppress`): pocl compiled a second time
    /// although the policy was meant to answer.
    pub pocl_cpu_forwarded_query_seconds: f64,
    pub pocl_cpu_forwarded_queries: usize,
    /// First launches on pocl CPU devices.
    pub pocl_cpu_launch_seconds: f64,
    /// Of those, the launches of a kernel already launched (in the same process, on
    /// the same device) with other sizes: the compiles a generic kernel would avoid.
    pub pocl_cpu_relaunches: usize,
    pub pocl_cpu_relaunch_seconds: f64,
    /// Of those, the seconds of launches whose work-group size pocl chose (`local_size`
    /// null): the shape on which `POCL_WORK_GROUP_SPECIALIZATION=0` was measured to help.
    pub pocl_cpu_relaunch_auto_seconds: f64,
    /// What the first launches on pocl CPU devices that compiled (`origin`) measured of
    /// their compiles: where their records carry CPU time, the seconds pocl's threads were
    /// busy (each launch's share of its thread's launches, the smaller of its wall and CPU:
    /// a launch queued behind other work is busy for little of its wall), and the wall
    /// seconds of those without.
    pub pocl_cpu_launch_busy_seconds: f64,
    pub pocl_cpu_launch_untimed_seconds: f64,
    /// Those launches under the program cache (their records say what it did), and of
    /// them the ones whose compile entered the store, and why the others did not
    /// (`schema::not_kept_phrase`).
    pub pocl_cpu_launches_cached: usize,
    pub pocl_cpu_launches_kept: usize,
    pub pocl_cpu_launches_not_kept: BTreeMap<String, usize>,
    /// Binary queries forwarded to selected pocl CPU devices in Python processes (pyopencl,
    /// whose cache has a switch measured to remove them).
    pub python_forwarded_queries: usize,
    /// Loads of clshim binaries: native or from the recipe.
    pub loads: crate::report::loads::LoadCounts,
    /// `clCreateProgramWithBinary` calls of any binary.
    pub binary_loads: usize,
    /// Processes that ran with the program cache on.
    pub program_cache_processes: usize,
    /// Binary queries of processes that ran with the program cache on and answered no query
    /// with clshim binaries: applications with binary caches of their own, which the
    /// program cache does not serve.
    pub program_cache_queries: usize,
}

impl Totals {
    fn add(&mut self, o: Totals) {
        self.loads.add(o.loads);
        self.binary_loads += o.binary_loads;
        self.program_cache_processes += o.program_cache_processes;
        self.program_cache_queries += o.program_cache_queries;
        self.builds += o.builds;
        self.build_seconds += o.build_seconds;
        self.queries += o.queries;
        self.query_seconds += o.query_seconds;
        self.launches += o.launches;
        self.launch_seconds += o.launch_seconds;
        self.pocl_cpu_pass_query_seconds += o.pocl_cpu_pass_query_seconds;
        self.pocl_cpu_forwarded_query_seconds += o.pocl_cpu_forwarded_query_seconds;
        self.pocl_cpu_forwarded_queries += o.pocl_cpu_forwarded_queries;
        self.pocl_cpu_launch_seconds += o.pocl_cpu_launch_seconds;
        self.pocl_cpu_relaunches += o.pocl_cpu_relaunches;
        self.pocl_cpu_relaunch_seconds += o.pocl_cpu_relaunch_seconds;
        self.pocl_cpu_relaunch_auto_seconds += o.pocl_cpu_relaunch_auto_seconds;
        self.pocl_cpu_launch_busy_seconds += o.pocl_cpu_launch_busy_seconds;
        self.pocl_cpu_launch_untimed_seconds += o.pocl_cpu_launch_untimed_seconds;
        self.pocl_cpu_launches_cached += o.pocl_cpu_launches_cached;
        self.pocl_cpu_launches_kept += o.pocl_cpu_launches_kept;
        for (w, n) in o.pocl_cpu_launches_not_kept {
            *self.pocl_cpu_launches_not_kept.entry(w).or_default() += n;
        }
        self.python_forwarded_queries += o.python_forwarded_queries;
    }
}

/// A file that was read, with what the timeline's second pass needs to find its
/// records' rows again.
#[derive(Debug, Clone)]
pub struct FileInfo {
    pub path: PathBuf,
    pub identity: Identity,
    /// From its `process` record, else from its name, else "?".
    pub host: String,
    pub policy: Option<String>,
    pub records: usize,
}

/// Who wrote a record, within one file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Local {
    rank: Option<i64>,
    pid: u64,
    instance: Option<String>,
}

impl Local {
    fn of(r: &Record) -> Local {
        Local {
            rank: r.rank,
            pid: r.pid,
            instance: r.instance.as_deref().map(str::to_string),
        }
    }

    fn matches(&self, r: &Record) -> bool {
        self.rank == r.rank
            && self.pid == r.pid
            && self.instance.as_deref() == r.instance.as_deref()
    }

    pub fn rank_key(&self, host: &str) -> RankKey {
        match self.rank {
            Some(n) => RankKey::Rank(n),
            None => RankKey::Process {
                host: host.to_string(),
                pid: self.pid,
                instance: self.instance.clone(),
            },
        }
    }

    fn process(&self, host: &str, file: usize) -> ProcessId {
        match &self.instance {
            Some(i) => ProcessId::Instance(host.to_string(), i.clone()),
            None => ProcessId::File(file, self.pid),
        }
    }
}

/// Maps records to the writers of one file: usually one, so the last one is cached.
#[derive(Debug, Default)]
pub struct Locals {
    list: Vec<Local>,
    last: usize,
}

impl Locals {
    pub fn index(&mut self, r: &Record) -> usize {
        if self.list.get(self.last).is_some_and(|l| l.matches(r)) {
            return self.last;
        }
        self.last = match self.list.iter().position(|l| l.matches(r)) {
            Some(i) => i,
            None => {
                self.list.push(Local::of(r));
                self.list.len() - 1
            }
        };
        self.last
    }

    pub fn rank_key(&self, i: usize, host: &str) -> RankKey {
        self.list[i].rank_key(host)
    }
}

/// One file's contribution, keyed by file-local indices until the file's host and
/// policy are known (its `process` record is normally first, but need not be).
#[derive(Default)]
struct FileAcc {
    by_source: bool,
    header_host: Option<String>,
    header: Option<Local>,
    policy: Option<String>,
    program_cache: bool,
    /// The process runs Python (its `exe`).
    python: bool,
    records: usize,
    t0: f64,
    locals: Locals,
    keys: Vec<ProgramKey>,
    key_index: HashMap<ProgramKey, usize>,
    /// Program id -> its latest build's key (records are in the order the process
    /// completed them, so a query or a launch follows its build).
    by_id: HashMap<Id, usize>,
    /// Kernel name -> the key of the latest build that has it: first launches whose
    /// program clshim did not see.
    by_kernel: HashMap<String, usize>,
    /// Compiled objects, libraries and programs from binaries, by id: what a link's
    /// inputs were. One entry per such program (like `by_id`), never per record; an
    /// entry's pending sums go to the first link that names it.
    objects: HashMap<Id, Object>,
    slots: HashMap<(usize, usize), Slot>,
    counts: Vec<Counts>,
    ranks: Vec<RankAcc>,
    threads: BTreeSet<(usize, u64)>,
    /// Every first launch on a pocl CPU device: a second one of the same kernel on the
    /// same device by the same writer was launched with other sizes.
    launched: BTreeSet<Launched>,
    /// Per writer (a process), the wall-clock time its first launches covered, all and
    /// on pocl CPU devices: launches in flight together count once. Each launch adds to
    /// the sums only the time no earlier one covered.
    launch_walls: Vec<(WallUnion, WallUnion)>,
    /// First launches on pocl CPU devices with CPU time, kept to the file's end, where
    /// those of one thread that overlap are split (`busy::exclusive`).
    pocl_launches: Vec<PoclLaunch>,
    totals: Totals,
    /// pocl-CPU binary-query seconds, all and those forwarded: which count depends on
    /// the file's policy.
    pocl_query_all: f64,
    pocl_query_forward: f64,
    facts: crate::report::build_facts::FileFacts,
    repeats: crate::report::repeats::FileRepeats,
    lives: super::lives::FileLives,
}

/// A first launch on a pocl CPU device with CPU time: its thread, its span on that thread's
/// clock, and whether it compiled (one that took its kernel from elsewhere still holds
/// its share of the thread's time).
struct PoclLaunch {
    writer: usize,
    tid: u64,
    span: Span,
    compiled: bool,
}

/// Adds a build's options (trimmed; empty ones are not shown).
fn add_options(set: &mut BTreeSet<String>, o: Option<&str>) {
    if let Some(o) = o.map(str::trim).filter(|o| !o.is_empty()) {
        if !set.contains(o) {
            set.insert(o.to_string());
        }
    }
}

fn sorted_kernels(k: &[traces::Text]) -> Vec<String> {
    let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
    k.sort();
    k.dedup();
    k
}

impl FileAcc {
    fn new(by_source: bool) -> FileAcc {
        FileAcc {
            by_source,
            t0: f64::INFINITY,
            ..FileAcc::default()
        }
    }

    fn intern(&mut self, key: ProgramKey) -> usize {
        if let Some(&i) = self.key_index.get(&key) {
            return i;
        }
        self.keys.push(key.clone());
        self.counts.push(Counts::default());
        self.key_index.insert(key, self.keys.len() - 1);
        self.keys.len() - 1
    }

    fn add(&mut self, r: Record) {
        self.facts.add(&r);
        self.repeats.add(&r);
        self.lives.add(&r);
        self.records += 1;
        self.t0 = self.t0.min(r.ts);
        if r.event == Event::Exit {
            return;
        }
        if r.event == Event::Process {
            if self.header.is_none() {
                self.header = Some(Local::of(&r));
                self.header_host = r.host.as_deref().map(str::to_string);
                self.policy = r.policy.as_deref().map(str::to_string);
                self.program_cache = r.program_cache == Some(true);
                self.python = r.exe.as_deref().is_some_and(|e| e.contains("python"));
            }
            return;
        }
        let li = self.locals.index(&r);
        if li == self.ranks.len() {
            self.ranks.push(RankAcc::default());
            self.launch_walls.push(Default::default());
        }
        self.threads.insert((li, r.tid()));
        let mut source = None;
        let mut origin = None;
        let mut claimed = None;
        let ki = match r.event {
            Event::Compile if r.program.is_some() => {
                // Its kernels are known once a link takes it: wait for that link.
                self.add_build_time(li, &r);
                let obj = self.object(r.program.clone().unwrap(), Made::Compiled);
                obj.hash = r.hash().map(str::to_string);
                let p = obj.pending.get_or_insert_with(|| AwaitingLink {
                    writer: li,
                    ..AwaitingLink::default()
                });
                p.seconds += r.seconds;
                p.compiles += 1;
                p.failed += usize::from(r.failed());
                add_options(&mut p.options, r.options.as_deref());
                return;
            }
            Event::Build | Event::Compile => {
                source = r.hash().map(str::to_string);
                let hash = if self.by_source { source.clone() } else { None };
                // A failed build has no kernels of its own: named by its source's.
                let failed = r.failed();
                let kernels = if failed {
                    sorted_kernels(r.source_kernels.as_deref().unwrap_or(&[]))
                } else {
                    sorted_kernels(r.kernels())
                };
                self.intern(ProgramKey {
                    hash,
                    kernels,
                    unnamed: None,
                    failed,
                })
            }
            Event::Link => {
                let (hash, what, pending) = self.claim_inputs(&r, li);
                // As pocl reads link options (and clshim's recipes): words split at spaces
                // only, a library when one starts with -create-library.
                let library = r
                    .options
                    .as_deref()
                    .is_some_and(|o| o.split(' ').any(|w| w.starts_with("-create-library")));
                if let (true, false, Some(id)) = (library, r.failed(), r.program.clone()) {
                    // A library waits, with its inputs' time, for the link that takes it.
                    self.add_build_time(li, &r);
                    let mut p = pending;
                    p.seconds += r.seconds;
                    p.links += 1;
                    add_options(&mut p.options, r.options.as_deref());
                    let obj = self.object(id, Made::Library);
                    obj.hash = hash;
                    match &mut obj.pending {
                        Some(q) => q.add(p),
                        None => obj.pending = Some(p),
                    }
                    return;
                }
                source = hash.clone();
                origin = Some(what);
                claimed = Some(pending);
                let kernels = sorted_kernels(r.kernels());
                let unnamed = kernels.is_empty().then_some(LINKED_NO_KERNELS);
                let hash = if self.by_source { hash } else { None };
                self.intern(ProgramKey {
                    hash,
                    kernels,
                    unnamed,
                    failed: false,
                })
            }
            Event::BinaryQuery => match r.program.as_ref().and_then(|p| self.by_id.get(p)) {
                Some(&k) => k,
                None => self.intern(ProgramKey::unknown()),
            },
            Event::FirstLaunch => self.launch_key(&r),
            Event::BinaryLoad | Event::Process | Event::Exit => {
                self.totals.binary_loads += 1;
                let why = r
                    .native_miss_kind
                    .as_deref()
                    .and_then(crate::schema::Miss::parse)
                    .map(|k| crate::schema::miss_phrase(k, r.native_miss.as_deref().unwrap_or("")));
                self.totals
                    .loads
                    .count(r.made_from.as_ref().map(|m| &*m.0), why);
                // A program made from a binary: its queries join to "unknown program".
                if let Some(p) = r.program.clone() {
                    let k = self.intern(ProgramKey::unknown());
                    self.by_id.insert(p.clone(), k);
                    self.object(p, Made::Binary).hash = r.hash().map(str::to_string);
                }
                return;
            }
        };
        if r.event.is_build() {
            if r.call.as_deref() == Some("clBuildProgram") {
                self.totals.loads.count_build(&r);
            }
            if let Some(p) = r.program.clone() {
                self.by_id.insert(p, ki);
            }
            for k in r.kernels() {
                if self.by_kernel.get(&**k) != Some(&ki) {
                    self.by_kernel.insert(k.to_string(), ki);
                }
            }
        }
        let counts = &mut self.counts[ki];
        if let Some(h) = source {
            self.slots.entry((ki, li)).or_default().saw_source(&h);
            counts.sources.insert(h);
        }
        if let Some(o) = origin {
            counts.origins.insert(o);
        }
        if let Some(p) = claimed.filter(|p| p.compiles + p.links > 0) {
            counts.compiles += p.compiles;
            counts.links += p.links;
            counts.failed += p.failed;
            counts.options.extend(p.options);
            let slot = self.slots.entry((ki, p.writer)).or_default();
            slot.build += p.seconds;
            slot.built = true;
        }
        let counts = &mut self.counts[ki];
        let origin = Origin::of(&r);
        counts.reused += usize::from(!origin.compiled());
        if r.failed() {
            counts.failed += 1;
            if r.event.is_build() && counts.errors.len() < ERRORS_KEPT {
                let status = r.result_name.as_deref().unwrap_or("failed");
                counts.errors.insert(match r.error.as_deref() {
                    Some(e) => format!("{status}: {e}"),
                    None => status.to_string(),
                });
            }
        }
        let slot = self.slots.entry((ki, li)).or_default();
        let row = &mut self.ranks[li];
        let t = &mut self.totals;
        match r.event {
            Event::Build | Event::Compile | Event::Link => {
                slot.build += r.seconds;
                slot.built = true;
                row.builds += 1;
                row.build_seconds += r.seconds;
                t.builds += 1;
                t.build_seconds += r.seconds;
                match r.event {
                    Event::Build => counts.builds += 1,
                    Event::Compile => counts.compiles += 1,
                    _ => counts.links += 1,
                }
                add_options(&mut counts.options, r.options.as_deref());
            }
            Event::BinaryQuery => {
                slot.query += r.seconds;
                row.queries += 1;
                row.query_seconds += r.seconds;
                t.queries += 1;
                t.query_seconds += r.seconds;
                counts.queries += 1;
                if let Some(a) = r.action.as_deref() {
                    if !counts.actions.contains(a) {
                        counts.actions.insert(a.to_string());
                    }
                }
                if r.any_pocl_cpu() {
                    self.pocl_query_all += r.seconds;
                    if r.action.as_deref() == Some("forward") {
                        self.pocl_query_forward += r.seconds;
                    }
                }
                if r.forwarded_on_selected_pocl_cpu() {
                    counts.forwarded_seconds += r.seconds;
                    counts.forwarded_queries += 1;
                    t.pocl_cpu_forwarded_query_seconds += r.seconds;
                    t.pocl_cpu_forwarded_queries += 1;
                }
            }
            _ => {
                let (wall, pocl_wall) = &mut self.launch_walls[li];
                let added = wall.add(r.ts, r.seconds);
                slot.launch += added;
                row.launches += 1;
                row.launch_seconds += added;
                t.launches += 1;
                t.launch_seconds += added;
                counts.launches += 1;
                if r.any_pocl_cpu() {
                    let added = pocl_wall.add(r.ts, r.seconds);
                    t.pocl_cpu_launch_seconds += added;
                    let compiled = origin.compiled();
                    match (r.cpu_clock, r.cpu_seconds) {
                        (Some(clock), Some(cpu)) => self.pocl_launches.push(PoclLaunch {
                            writer: li,
                            tid: r.tid(),
                            span: Span {
                                start: r.ts,
                                seconds: r.seconds,
                                clock,
                                cpu,
                            },
                            compiled,
                        }),
                        _ if compiled => t.pocl_cpu_launch_untimed_seconds += added,
                        _ => {}
                    }
                    if compiled && r.shared.is_some() {
                        t.pocl_cpu_launches_cached += 1;
                        match (r.kept_in_store, r.not_kept.as_deref()) {
                            (Some(true), _) => t.pocl_cpu_launches_kept += 1,
                            (_, Some(why)) => {
                                *t.pocl_cpu_launches_not_kept
                                    .entry(crate::schema::not_kept_phrase(why))
                                    .or_default() += 1
                            }
                            _ => {}
                        }
                    }
                    let key = Launched {
                        writer: li,
                        kernel: r.kernel.as_deref().unwrap_or("").to_string(),
                        device: r
                            .device
                            .as_ref()
                            .and_then(|d| d.name.as_deref())
                            .unwrap_or("")
                            .to_string(),
                    };
                    // A kernel taken from a cache compiled nothing at its further sizes.
                    if !self.launched.insert(key) && compiled {
                        t.pocl_cpu_relaunches += 1;
                        t.pocl_cpu_relaunch_seconds += added;
                        if r.local_size.is_none() {
                            t.pocl_cpu_relaunch_auto_seconds += added;
                        }
                    }
                }
            }
        }
    }

    /// Build time in the writer's rank row and the totals, whichever row it ends in.
    fn add_build_time(&mut self, li: usize, r: &Record) {
        let row = &mut self.ranks[li];
        row.builds += 1;
        row.build_seconds += r.seconds;
        self.totals.builds += 1;
        self.totals.build_seconds += r.seconds;
    }

    fn object(&mut self, id: Id, made: Made) -> &mut Object {
        let o = self.objects.entry(id).or_insert(Object {
            made,
            hash: None,
            pending: None,
        });
        o.made = made;
        o
    }

    /// A link's inputs: the hash of their hashes (None unless every input has one),
    /// what they were (`link of 2 compiled`), and the build time they were waiting
    /// with. An input shared by several links is claimed by the first of them: its
    /// compile is counted once, in the first program it was linked into.
    fn claim_inputs(&mut self, r: &Record, li: usize) -> (Option<String>, String, AwaitingLink) {
        let mut hashes = Vec::new();
        let mut all_hashed = true;
        let (mut compiled, mut libraries, mut binaries, mut unrecorded) = (0, 0, 0, 0);
        let mut pending = AwaitingLink {
            writer: li,
            ..AwaitingLink::default()
        };
        for id in r.inputs.iter().flatten() {
            let obj = id.as_ref().and_then(|i| self.objects.get_mut(i));
            let hash = match obj {
                Some(o) => {
                    match o.made {
                        Made::Compiled => compiled += 1,
                        Made::Library => libraries += 1,
                        Made::Binary => binaries += 1,
                    }
                    if let Some(p) = o.pending.take() {
                        pending.add(p);
                    }
                    o.hash.clone()
                }
                None => {
                    unrecorded += 1;
                    // A program built from source, as a link input (drivers refuse it).
                    id.as_ref()
                        .and_then(|i| self.by_id.get(i))
                        .and_then(|&k| self.keys[k].hash.clone())
                }
            };
            match hash {
                Some(h) => hashes.push(h),
                None => all_hashed = false,
            }
        }
        // A fixed-size hash of the inputs' hashes, in order: a library taken twice by the
        // next one would double a textual identity at every level.
        let hash = (all_hashed && !hashes.is_empty()).then(|| {
            let mut h = crate::hash::Fnv1a::default();
            for (i, part) in hashes.iter().enumerate() {
                if i > 0 {
                    h.update(b"+");
                }
                h.update(part.as_bytes());
            }
            format!("{LINK_HASH_PREFIX}{}", crate::hash::label(h.finish()))
        });
        let parts: Vec<String> = [
            (compiled, "compiled"),
            (libraries, "library"),
            (binaries, "from binary"),
            (unrecorded, "unrecorded"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| {
            if w == "library" && n > 1 {
                format!("{n} libraries")
            } else {
                format!("{n} {w}")
            }
        })
        .collect();
        let what = if parts.is_empty() {
            "link of no recorded input".to_string()
        } else {
            format!("link of {}", parts.join(" + "))
        };
        (hash, what, pending)
    }

    /// At the end of a file: the busy seconds of its compiling first launches on pocl CPU
    /// devices, each launch's share of its thread's launches where they overlap (on an
    /// in-order queue a launch's interval holds the compiles of those before it).
    fn finish_launches(&mut self) {
        let mut by_thread: BTreeMap<(usize, u64), Vec<&PoclLaunch>> = BTreeMap::new();
        for l in &self.pocl_launches {
            by_thread.entry((l.writer, l.tid)).or_default().push(l);
        }
        for group in by_thread.into_values() {
            let spans: Vec<Span> = group.iter().map(|l| l.span).collect();
            for (l, share) in group.iter().zip(exclusive(&spans)) {
                if l.compiled {
                    self.totals.pocl_cpu_launch_busy_seconds += share.wall.min(share.cpu);
                }
            }
        }
        self.pocl_launches.clear();
    }

    /// At the end of a file: compiled objects and libraries no recorded link took get
    /// rows of their own, so their time is shown and named.
    fn finish(&mut self) {
        self.finish_launches();
        let mut left: Vec<(Option<String>, Made, AwaitingLink)> = self
            .objects
            .values_mut()
            .filter_map(|o| o.pending.take().map(|p| (o.hash.clone(), o.made, p)))
            .collect();
        left.sort_by(|a, b| a.0.cmp(&b.0));
        for (hash, made, p) in left {
            let unnamed = if made == Made::Library {
                LIBRARY_NEVER_LINKED
            } else {
                NEVER_LINKED
            };
            let ki = self.intern(ProgramKey {
                hash: if self.by_source { hash.clone() } else { None },
                kernels: Vec::new(),
                unnamed: Some(unnamed),
                failed: false,
            });
            let c = &mut self.counts[ki];
            c.compiles += p.compiles;
            c.links += p.links;
            c.failed += p.failed;
            c.options.extend(p.options);
            let slot = self.slots.entry((ki, p.writer)).or_default();
            slot.build += p.seconds;
            slot.built = true;
            if let Some(h) = hash {
                slot.saw_source(&h);
                c.sources.insert(h);
            }
        }
    }

    /// A first launch belongs to its program's latest build; when clshim did not see
    /// that build (no `program`, or a program made from a binary), to the latest build
    /// with a kernel of that name; else to a row named by the kernel alone.
    fn launch_key(&mut self, r: &Record) -> usize {
        let unknown = ProgramKey::unknown();
        if let Some(&k) = r.program.as_ref().and_then(|p| self.by_id.get(p)) {
            if self.keys[k] != unknown {
                return k;
            }
        }
        match r.kernel.as_deref() {
            Some(name) => match self.by_kernel.get(name) {
                Some(&k) => k,
                None => self.intern(ProgramKey {
                    hash: None,
                    kernels: vec![name.to_string()],
                    unnamed: None,
                    failed: false,
                }),
            },
            None => self.intern(unknown),
        }
    }
}

/// Everything the report and the timeline need, merged over files.
#[derive(Debug, Default)]
pub struct Aggregate {
    pub files: Vec<FileInfo>,
    /// Files listed, including those that could not be read.
    pub listed: usize,
    pub(super) progs: HashMap<ProgramKey, ProgAcc>,
    pub(super) ranks: BTreeMap<RankKey, RankAcc>,
    pub processes: BTreeSet<ProcessId>,
    pub hosts: BTreeSet<String>,
    pub totals: Totals,
    pub records: usize,
    /// Earliest `ts` of any record.
    pub t0: f64,
    /// (rank, OS thread id) -> OS pid, for the timeline's thread rows.
    pub threads: BTreeMap<(RankKey, u64), u64>,
    pub skipped: usize,
    problems: Vec<FileProblem>,
    /// What builds were made from, for why they built (`variants`, `caches`, `against`).
    pub facts: crate::report::build_facts::Facts,
    /// What ranks compiled that another also compiled, and what they took from a peer.
    pub repeats: crate::report::repeats::Repeats,
    /// Every process's life (`lives`).
    pub lives: Vec<super::lives::ProcessLife>,
}

/// A first launch on a pocl CPU device, as told apart by the report.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Launched {
    /// The writer (process instance) that launched.
    writer: usize,
    kernel: String,
    /// The device's name.
    device: String,
}

/// A problem with the index of its file in the directory's sorted list.
#[derive(Debug)]
struct FileProblem {
    file: usize,
    problem: Problem,
}

/// The problems to list and how many more were skipped without being listed.
pub struct Problems<'a> {
    pub listed: Vec<&'a Problem>,
    pub more: usize,
}

impl Aggregate {
    fn new() -> Aggregate {
        Aggregate {
            t0: f64::INFINITY,
            ..Aggregate::default()
        }
    }

    fn problem(&mut self, file: usize, p: Problem) {
        self.skipped += 1;
        self.problems.push(FileProblem { file, problem: p });
    }

    /// Folds one file in. `file` is its index in the directory's sorted list.
    fn add_file(&mut self, file: usize, path: &Path, mut acc: FileAcc, identity: Identity) {
        acc.finish();
        let host = acc
            .header_host
            .clone()
            .or_else(|| {
                path.file_name()
                    .and_then(|n| traces::host_from_name(&n.to_string_lossy()))
            })
            .unwrap_or_else(|| "?".into());
        self.facts.add_file(std::mem::take(&mut acc.facts), &host);
        self.repeats
            .add_file(std::mem::take(&mut acc.repeats), &host);
        for l in std::mem::take(&mut acc.lives.0) {
            let local = Local {
                rank: l.rank,
                pid: l.pid,
                instance: l.instance,
            };
            self.lives.push(super::lives::ProcessLife {
                rank: local.rank_key(&host),
                host: host.clone(),
                pid: l.pid,
                start: l.start,
                end: l.end,
                ended: l.ended,
                exit_recorded: l.exit_recorded,
            });
        }
        self.records += acc.records;
        if acc.records > 0 {
            self.hosts.insert(host.clone());
            self.t0 = self.t0.min(acc.t0);
        }
        let mut totals = acc.totals;
        totals.loads.resolve(&host);
        totals.program_cache_processes = usize::from(acc.program_cache);
        if acc.program_cache && acc.policy.as_deref() != Some("substitute") {
            totals.program_cache_queries = totals.queries;
        }
        totals.pocl_cpu_pass_query_seconds = match acc.policy.as_deref() {
            Some("pass") => acc.pocl_query_all,
            Some(_) => 0.0,
            None => acc.pocl_query_forward,
        };
        // Under `pass` (or an unknown policy) forwarding is what was asked for.
        let acting = !matches!(acc.policy.as_deref(), Some("pass") | None);
        if !acting {
            totals.pocl_cpu_forwarded_query_seconds = 0.0;
            totals.pocl_cpu_forwarded_queries = 0;
        }
        if acc.python {
            totals.python_forwarded_queries = totals.pocl_cpu_forwarded_queries;
        }
        self.totals.add(totals);
        let keys: Vec<RankKey> = (0..acc.locals.list.len())
            .map(|i| acc.locals.rank_key(i, &host))
            .collect();
        if let (Some(h), true) = (&acc.header, acc.locals.list.is_empty()) {
            // Only a process record: still a process.
            self.processes.insert(h.process(&host, file));
        }
        for (i, mut row) in acc.ranks.into_iter().enumerate() {
            let local = &acc.locals.list[i];
            let process = local.process(&host, file);
            self.processes.insert(process.clone());
            row.hosts.insert(host.clone());
            row.pids.insert(local.pid);
            row.processes.insert(process);
            self.ranks.entry(keys[i].clone()).or_default().add(row);
        }
        for (li, tid) in acc.threads {
            self.threads
                .entry((keys[li].clone(), tid))
                .or_insert(acc.locals.list[li].pid);
        }
        let mut counts = acc.counts;
        let mut touched = vec![false; acc.keys.len()];
        for ((ki, li), slot) in acc.slots {
            touched[ki] = true;
            self.progs
                .entry(acc.keys[ki].clone())
                .or_default()
                .per_rank
                .entry(keys[li].clone())
                .or_default()
                .add(slot);
        }
        for (ki, key) in acc.keys.into_iter().enumerate() {
            if !touched[ki] {
                continue; // interned for a binary load only
            }
            let mut c = std::mem::take(&mut counts[ki]);
            if !acting {
                c.forwarded_seconds = 0.0;
                c.forwarded_queries = 0;
            }
            if let Some(p) = &acc.policy {
                c.policies.insert(p.clone());
            }
            self.progs.entry(key).or_default().counts.add(c);
        }
        self.files.push(FileInfo {
            path: path.to_path_buf(),
            identity,
            host,
            policy: acc.policy,
            records: acc.records,
        });
    }

    fn merge(&mut self, o: Aggregate) {
        self.files.extend(o.files);
        for (k, p) in o.progs {
            let mine = self.progs.entry(k).or_default();
            for (rk, s) in p.per_rank {
                mine.per_rank.entry(rk).or_default().add(s);
            }
            mine.counts.add(p.counts);
        }
        for (k, r) in o.ranks {
            self.ranks.entry(k).or_default().add(r);
        }
        self.processes.extend(o.processes);
        self.hosts.extend(o.hosts);
        self.totals.add(o.totals);
        self.records += o.records;
        self.t0 = self.t0.min(o.t0);
        for (k, v) in o.threads {
            self.threads.entry(k).or_insert(v);
        }
        self.skipped += o.skipped;
        self.problems.extend(o.problems);
        self.facts.merge(o.facts);
        self.repeats.merge(o.repeats);
        self.lives.extend(o.lives);
    }

    /// An empty directory is a problem of its own.
    pub fn no_files(&mut self, dir: &Path) {
        self.problem(
            0,
            Problem {
                file: dir.to_path_buf(),
                line: 0,
                reason: "no trace files (*.jsonl) in this directory".into(),
            },
        );
    }

    /// The problems to list (in file and line order, at most [`PROBLEMS_LISTED`]) and
    /// how many more were skipped without being listed.
    pub fn problems(&self) -> Problems<'_> {
        let listed: Vec<&Problem> = self
            .problems
            .iter()
            .map(|p| &p.problem)
            .take(PROBLEMS_LISTED)
            .collect();
        let more = self.skipped - listed.len();
        Problems { listed, more }
    }

    /// The timeline's rows: every rank key with a record, in rank order, with the
    /// hosts it ran on.
    pub fn rank_keys(&self) -> impl Iterator<Item = (&RankKey, &BTreeSet<String>)> {
        self.ranks.iter().map(|(k, r)| (k, &r.hosts))
    }
}

/// Reads one file into `agg`, or names why it cannot be read.
fn read_file(agg: &mut Aggregate, index: usize, path: &Path, by_source: bool) {
    let problem = |reason: String, line: usize| Problem {
        file: path.to_path_buf(),
        line,
        reason,
    };
    let (file, mut identity) = match traces::open_regular(path) {
        Ok(f) => f,
        Err(reason) => return agg.problem(index, problem(reason, 0)),
    };
    let mut acc = FileAcc::new(by_source);
    let mut probs = Vec::new();
    let mut skipped = 0usize;
    if identity.len > traces::MAX_FILE {
        skipped += 1;
        probs.push(problem(
            format!(
                "{} bytes: only the first {} are read",
                identity.len,
                traces::MAX_FILE
            ),
            0,
        ));
        identity.len = traces::MAX_FILE;
    }
    let res = traces::for_each_record(
        file,
        identity.len,
        |_, r| acc.add(r),
        |line, reason| {
            skipped += 1;
            if probs.len() < PROBLEMS_PER_FILE {
                probs.push(problem(reason, line));
            }
        },
    );
    if let Err(e) = res {
        skipped += 1;
        probs.push(problem(
            format!("read error: {}", crate::library::describe(&e)),
            0,
        ));
    }
    agg.skipped += skipped;
    agg.problems
        .extend(probs.into_iter().map(|problem| FileProblem {
            file: index,
            problem,
        }));
    agg.add_file(index, path, acc, identity);
}

/// Reads every file of `paths` on a few threads, each file streamed on its own.
pub fn read(paths: &[PathBuf], by_source: bool) -> Aggregate {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(paths.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let parts: Vec<Aggregate> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut agg = Aggregate::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(p) = paths.get(i) else { break };
                        read_file(&mut agg, i, p, by_source);
                    }
                    agg
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reader thread"))
            .collect()
    });
    let mut agg = Aggregate::new();
    for p in parts {
        agg.merge(p);
    }
    agg.listed = paths.len();
    agg.files.sort_by(|a, b| a.path.cmp(&b.path));
    agg.problems.sort_by_key(|p| (p.file, p.problem.line));
    agg
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
