//! What each build was made from, per rank, for the questions "why did it build?"
//! (`variants`), "where are the caches?" (`caches`), "what changed since the last
//! run?" (`against`) and "compiling or waiting?" (`cpu_split`): gathered in the report's
//! one pass over the records (`report` hands each record to [`FileFacts::add`]), one small
//! entry per distinct (rank, kernel names, source, options, devices) rather than per
//! record, so memory grows with the programs and ranks, not with the run's length (first
//! launches are kept per file until its end, where overlapping ones are split).

use crate::report::busy::{Busy, RankBusy, Span};
use crate::report::origin::Taken;
use crate::report::rank_key::{key, RankKey, Writers};
use crate::report::traces::{Event, Id, Record};
use crate::schema::{CacheDir, Cpus};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One way a program was made: its kernel names and what it was built from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Variant {
    /// Sorted, distinct.
    pub kernels: Vec<String>,
    /// `fnv1a64:...` of the source (or IL, or binary), if known.
    pub hash: Option<String>,
    /// The kept source's reference (`sources/<ref>.cl`).
    pub kept: Option<String>,
    pub options: Option<String>,
    /// The kept options' reference (`sources/<ref>.opt`).
    pub options_kept: Option<String>,
    /// `name (driver)` of each device, joined.
    pub devices: String,
    /// Made from a binary (the application's, clshim's, or the driver's from the native
    /// store through the program cache), so built without compiling.
    pub served: bool,
    /// Which of the distinct programs its process made under these kernel names it is
    /// (0: the first). Generated code often names every kernel alike (loopy's
    /// `loopy_kernel`); ranks generate their programs in the same order, so the n-th
    /// of one rank is the same program as the n-th of another, differing or not.
    pub nth: usize,
}

#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub builds: usize,
    pub seconds: f64,
    /// Binary-query seconds of the programs built so: with `seconds`, the report's build
    /// time.
    pub query_seconds: f64,
    pub ranks: BTreeSet<RankKey>,
    /// Per rank: the variant's builds, binary queries and first launches, wall and CPU.
    pub busy: BTreeMap<RankKey, Busy>,
    /// Of `builds`, those the program cache served from the native store, and those it did
    /// not serve by why (`schema::miss_phrase`).
    pub store_served: usize,
    pub not_served: BTreeMap<String, usize>,
    /// `builds` by where their compile came from (`origin`), and those of them the store
    /// did not serve (their records say why) by the same.
    pub taken: Taken,
    pub missed: Taken,
}

/// Per entry of a file: its builds the program cache served, those it did not by why, and
/// all of them, and those not served, by where their compile came from.
#[derive(Default)]
struct StoreSide {
    served: usize,
    not_served: BTreeMap<String, usize>,
    taken: Taken,
    missed: Taken,
}

impl Tally {
    fn add_store(&mut self, store: &StoreSide) {
        self.store_served += store.served;
        for (w, n) in &store.not_served {
            *self.not_served.entry(w.clone()).or_default() += n;
        }
        self.taken.add(&store.taken);
        self.missed.add(&store.missed);
    }
}

/// One process's caches, as its `process` record lists them, and which of them its
/// records show in use.
#[derive(Clone, Debug)]
pub struct ProcessCaches {
    pub host: String,
    pub rank: RankKey,
    pub python: bool,
    pub caches: Vec<CacheDir>,
    /// `pocl` when it built on a pocl device, `pyopencl` when it asked for program
    /// binaries or loaded one (a binary cache at work), `cuda` when an NVIDIA device built.
    pub used: BTreeSet<&'static str>,
    /// The CPUs it could use, and the worker threads of its pocl CPU device.
    pub cpus: Option<Cpus>,
    pub pocl_threads: Option<u64>,
}

/// Everything gathered, merged over files.
#[derive(Debug, Default)]
pub struct Facts {
    pub variants: HashMap<Variant, Tally>,
    /// Build seconds per rank (builds, compiles and links).
    pub rank_seconds: BTreeMap<RankKey, f64>,
    /// Binary-query seconds per rank.
    pub rank_query_seconds: BTreeMap<RankKey, f64>,
    /// Kernel-name sets whose binary the application asked for (`CL_PROGRAM_BINARIES`):
    /// programs it keeps in a binary cache of its own.
    pub queried: BTreeSet<Vec<String>>,
    pub processes: Vec<ProcessCaches>,
    /// A device of NVIDIA's platform built something (its cache then matters).
    pub nvidia: bool,
    /// Per rank: wall and CPU seconds of builds (with binary queries) and first launches.
    pub rank_busy: BTreeMap<RankKey, RankBusy>,
}

/// The writer of a file's `process` record (rank, pid, instance), whether it runs Python,
/// and its caches.
type Header = (Option<i64>, u64, Option<String>, bool, Vec<CacheDir>);

/// One file's part, with writers (rank or process) by file-local index.
#[derive(Default)]
pub struct FileFacts {
    host: Option<String>,
    header: Option<Header>,
    writers: Writers,
    /// Fingerprint of (writer, variant) -> entry.
    index: HashMap<u64, usize>,
    /// (writer, variant, builds, build seconds, binary-query seconds).
    entries: Vec<(usize, Variant, usize, f64, f64)>,
    seconds: Vec<f64>,
    query_seconds: Vec<f64>,
    by_id: HashMap<(usize, Id), usize>,
    /// (writer, kernel names, served) -> the distinct texts seen under them, in order.
    texts: HashMap<(usize, u64, bool), Vec<u64>>,
    queried: BTreeSet<usize>,
    nvidia: bool,
    /// The caches its records show in use (`ProcessCaches::used`).
    used: BTreeSet<&'static str>,
    /// The `process` record's CPUs, and the most compute units of a pocl CPU device seen.
    cpus: Option<Cpus>,
    pocl_threads: Option<u64>,
    /// Per writer: builds, compiles, links and binary queries.
    writer_busy: Vec<Busy>,
    /// Per entry: its builds, the binary queries and first launches of its programs.
    entry_busy: Vec<Busy>,
    entry_store: Vec<StoreSide>,
    launches: Vec<Launch>,
}

/// A first launch, kept until the file's end: launches of one thread that overlap are
/// split there ([`crate::report::cpu_split::exclusive`]).
struct Launch {
    writer: usize,
    tid: u64,
    entry: Option<usize>,
    seconds: f64,
    span: Option<Span>,
    /// Its wait for a peer's or another node's compile (`peer_wait_seconds`).
    peer_wait: Option<f64>,
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h = (*h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    *h = (*h ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
}

impl FileFacts {
    fn writer(&mut self, r: &Record) -> usize {
        let (w, new) = self.writers.index(r.rank, r.pid, r.instance.as_deref());
        if new {
            self.seconds.push(0.0);
            self.query_seconds.push(0.0);
            self.writer_busy.push(Busy::default());
        }
        w
    }

    /// The entry of the program a query or a launch concerns, if this file built it.
    fn entry_of(&self, w: usize, r: &Record) -> Option<usize> {
        self.by_id.get(&(w, r.program.clone()?)).copied()
    }

    pub fn add(&mut self, r: &Record) {
        let pocl_threads = r
            .devices()
            .chain(r.device.as_ref())
            .filter(|d| d.is_pocl_cpu())
            .filter_map(|d| d.compute_units)
            .max();
        self.pocl_threads = self.pocl_threads.max(pocl_threads);
        match r.event {
            Event::Process if self.header.is_none() => {
                self.cpus = r.cpus.clone();
                self.host = r.host.as_deref().map(str::to_string);
                let python = r.exe.as_deref().is_some_and(|e| e.contains("python"));
                self.header = Some((
                    r.rank,
                    r.pid,
                    r.instance.as_deref().map(str::to_string),
                    python,
                    r.caches.clone().unwrap_or_default(),
                ));
            }
            Event::BinaryLoad => {
                self.used.insert("pyopencl");
            }
            Event::BinaryQuery => {
                let w = self.writer(r);
                self.query_seconds[w] += r.seconds;
                self.writer_busy[w].record(r.seconds, r.cpu_seconds);
                let entry = self.entry_of(w, r);
                if let Some(e) = entry {
                    self.entries[e].4 += r.seconds;
                    self.entry_busy[e].record(r.seconds, r.cpu_seconds);
                }
                if r.param.as_deref() == Some("CL_PROGRAM_BINARIES") && !r.failed() {
                    self.used.insert("pyopencl");
                    self.queried.extend(entry);
                }
            }
            Event::FirstLaunch => {
                let w = self.writer(r);
                let span = match (r.cpu_clock, r.cpu_seconds) {
                    (Some(clock), Some(cpu)) => Some(Span {
                        start: r.ts,
                        seconds: r.seconds,
                        clock,
                        cpu,
                    }),
                    _ => None,
                };
                self.launches.push(Launch {
                    writer: w,
                    tid: r.tid(),
                    entry: self.entry_of(w, r),
                    seconds: r.seconds,
                    span,
                    peer_wait: r.peer_wait_seconds,
                });
            }
            Event::Build | Event::Compile | Event::Link => self.add_build(r),
            _ => {}
        }
    }

    fn add_build(&mut self, r: &Record) {
        let w = self.writer(r);
        self.seconds[w] += r.seconds;
        for d in r.devices() {
            if d.platform.as_deref() == Some(crate::report::traces::POCL_PLATFORM) {
                self.used.insert("pocl");
            }
            if d.platform.as_deref().is_some_and(|p| p.contains("NVIDIA")) {
                self.used.insert("cuda");
            }
        }
        self.writer_busy[w].record_waiting(r.seconds, r.cpu_seconds, r.peer_wait_seconds);
        if r.failed() || r.kernels().is_empty() {
            return;
        }
        let mut kernels: Vec<&str> = r.kernels().iter().map(|k| &**k).collect();
        kernels.sort_unstable();
        kernels.dedup();
        let kept = r.kept.as_ref();
        let origin = r.source.as_ref().and_then(|s| s.origin.as_deref());
        let served = matches!(origin, Some("binary" | "clshim-binary")) || r.served.is_some();
        let mut names = 0xcbf2_9ce4_8422_2325u64;
        for k in &kernels {
            fnv(&mut names, k.as_bytes());
        }
        let mut text = 0xcbf2_9ce4_8422_2325u64;
        fnv(&mut text, r.hash().unwrap_or("").as_bytes());
        fnv(
            &mut text,
            r.options.as_deref().unwrap_or("\u{0}").as_bytes(),
        );
        let seen = self.texts.entry((w, names, served)).or_default();
        let nth = seen.iter().position(|&t| t == text).unwrap_or_else(|| {
            seen.push(text);
            seen.len() - 1
        });
        let mut h = names;
        fnv(&mut h, &w.to_le_bytes());
        fnv(&mut h, &nth.to_le_bytes());
        let parts = [
            r.hash(),
            kept.and_then(|k| k.source.as_deref()),
            r.options.as_deref(),
            kept.and_then(|k| k.options.as_deref()),
        ];
        for p in parts {
            fnv(&mut h, p.unwrap_or("\u{0}").as_bytes());
        }
        for d in r.devices() {
            fnv(&mut h, d.name.as_deref().unwrap_or("").as_bytes());
            fnv(&mut h, d.driver.as_deref().unwrap_or("").as_bytes());
        }
        fnv(&mut h, &[u8::from(served)]);
        let e = match self.index.get(&h) {
            Some(&e) => e,
            None => {
                let devices: Vec<String> = r
                    .devices()
                    .map(|d| {
                        self.nvidia |= d.platform.as_deref().is_some_and(|p| p.contains("NVIDIA"));
                        format!(
                            "{} ({})",
                            d.name.as_deref().unwrap_or("?"),
                            d.driver.as_deref().unwrap_or("?")
                        )
                    })
                    .collect();
                let own = |s: Option<&str>| s.map(str::to_string);
                let v = Variant {
                    kernels: kernels.iter().map(|k| k.to_string()).collect(),
                    hash: own(parts[0]),
                    kept: own(parts[1]),
                    options: own(parts[2]),
                    options_kept: own(parts[3]),
                    devices: devices.join(", "),
                    served,
                    nth,
                };
                self.entries.push((w, v, 0, 0.0, 0.0));
                self.entry_busy.push(Busy::default());
                self.entry_store.push(StoreSide::default());
                self.index.insert(h, self.entries.len() - 1);
                self.entries.len() - 1
            }
        };
        self.entries[e].2 += 1;
        self.entries[e].3 += r.seconds;
        let store = &mut self.entry_store[e];
        store.served += usize::from(r.served.is_some());
        store.taken.count(r);
        if let Some(n) = &r.not_served {
            *store.not_served.entry(n.phrase()).or_default() += 1;
            store.missed.count(r);
        }
        self.entry_busy[e].record_waiting(r.seconds, r.cpu_seconds, r.peer_wait_seconds);
        if let Some(p) = r.program.clone() {
            self.by_id.insert((w, p), e);
        }
    }
}

impl Facts {
    /// Folds one file in; `host` is the report's name for the file's host.
    pub fn add_file(&mut self, mut f: FileFacts, host: &str) {
        let keys = f.writers.keys(host);
        if let Some((rank, pid, instance, python, caches)) = &f.header {
            self.processes.push(ProcessCaches {
                host: f.host.clone().unwrap_or_else(|| host.to_string()),
                rank: key(*rank, *pid, instance.clone(), host),
                python: *python,
                caches: caches.clone(),
                used: f.used.clone(),
                cpus: f.cpus.clone(),
                pocl_threads: f.pocl_threads,
            });
        }
        for (w, s) in f.seconds.iter().enumerate() {
            *self.rank_seconds.entry(keys[w].clone()).or_default() += s;
            *self.rank_query_seconds.entry(keys[w].clone()).or_default() += f.query_seconds[w];
        }
        let mut busy = vec![RankBusy::default(); keys.len()];
        for (w, b) in f.writer_busy.iter().enumerate() {
            busy[w].build.add(b);
        }
        for (w, e, share) in launch_shares(std::mem::take(&mut f.launches)) {
            busy[w].launch.add(&share);
            if let Some(e) = e {
                f.entry_busy[e].add(&share);
            }
        }
        for (w, b) in busy.iter().enumerate() {
            self.rank_busy.entry(keys[w].clone()).or_default().add(b);
        }
        for &e in &f.queried {
            self.queried.insert(f.entries[e].1.kernels.clone());
        }
        for (((w, v, builds, seconds, query_seconds), b), mut store) in f
            .entries
            .into_iter()
            .zip(&f.entry_busy)
            .zip(std::mem::take(&mut f.entry_store))
        {
            store.taken.resolve(host);
            store.missed.resolve(host);
            let t = self.variants.entry(v).or_default();
            t.add_store(&store);
            t.builds += builds;
            t.seconds += seconds;
            t.query_seconds += query_seconds;
            t.ranks.insert(keys[w].clone());
            t.busy.entry(keys[w].clone()).or_default().add(b);
        }
        self.nvidia |= f.nvidia;
    }

    pub fn merge(&mut self, o: Facts) {
        for (v, t) in o.variants {
            let mine = self.variants.entry(v).or_default();
            mine.store_served += t.store_served;
            for (w, n) in &t.not_served {
                *mine.not_served.entry(w.clone()).or_default() += n;
            }
            mine.taken.add(&t.taken);
            mine.missed.add(&t.missed);
            mine.builds += t.builds;
            mine.seconds += t.seconds;
            mine.query_seconds += t.query_seconds;
            mine.ranks.extend(t.ranks);
            for (k, b) in t.busy {
                mine.busy.entry(k).or_default().add(&b);
            }
        }
        for (k, b) in o.rank_busy {
            self.rank_busy.entry(k).or_default().add(&b);
        }
        for (k, s) in o.rank_seconds {
            *self.rank_seconds.entry(k).or_default() += s;
        }
        for (k, s) in o.rank_query_seconds {
            *self.rank_query_seconds.entry(k).or_default() += s;
        }
        self.queried.extend(o.queried);
        self.processes.extend(o.processes);
        self.nvidia |= o.nvidia;
    }
}

/// Each first launch's share (writer, entry, wall and CPU): launches of one thread that
/// carry CPU time are split where they overlap; those without count their wall time as
/// untimed. A launch's wait for a peer goes with its share, in proportion: the split gives
/// instants to launches, and the record says only how long the wait was, not when.
fn launch_shares(launches: Vec<Launch>) -> Vec<(usize, Option<usize>, Busy)> {
    let mut by_thread: BTreeMap<(usize, u64), Vec<Launch>> = BTreeMap::new();
    for l in launches {
        by_thread.entry((l.writer, l.tid)).or_default().push(l);
    }
    let mut out = Vec::new();
    for group in by_thread.into_values() {
        let (timed, untimed): (Vec<Launch>, Vec<Launch>) =
            group.into_iter().partition(|l| l.span.is_some());
        for l in untimed {
            let mut b = Busy::default();
            b.record(l.seconds, None);
            out.push((l.writer, l.entry, b));
        }
        let spans: Vec<Span> = timed.iter().filter_map(|l| l.span).collect();
        for (l, mut share) in timed.iter().zip(crate::report::busy::exclusive(&spans)) {
            if let Some(w) = l.peer_wait.filter(|w| w.is_finite() && *w > 0.0) {
                let part = if l.seconds > 0.0 {
                    (share.wall / l.seconds).min(1.0)
                } else {
                    0.0
                };
                share.peer_wait = w.min(l.seconds) * part;
            }
            out.push((l.writer, l.entry, share));
        }
    }
    out
}

/// A rank's name in the report's words.
pub fn rank_name(k: &RankKey) -> String {
    match k {
        RankKey::Rank(n) => format!("rank {n}"),
        RankKey::Process { host, pid, .. } => format!("pid {pid} on {host}"),
    }
}

/// Ranks as a short list: `ranks 0-3, 7`, or `rank 2`, or processes by name.
pub fn rank_list(ranks: &BTreeSet<RankKey>) -> String {
    let mut nums = Vec::new();
    let mut others = Vec::new();
    for r in ranks {
        match r {
            RankKey::Rank(n) => nums.push(*n),
            o => others.push(rank_name(o)),
        }
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < nums.len() {
        let mut j = i;
        while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", nums[i], nums[j])
        } else {
            nums[i].to_string()
        });
        i = j + 1;
    }
    let mut out = match nums.len() {
        0 => String::new(),
        1 => format!("rank {}", parts.join(", ")),
        _ => format!("ranks {}", parts.join(", ")),
    };
    for o in others.iter().take(3) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(o);
    }
    if others.len() > 3 {
        out.push_str(&format!(" and {} more processes", others.len() - 3));
    }
    out
}

/// Reads a kept text of the trace directory `dir` (regular files only, at most 16 MiB),
/// or None when it was not kept.
pub fn read_kept(dir: &std::path::Path, reference: &str, ext: &str) -> Option<String> {
    use std::io::Read;
    if !reference
        .bytes()
        .all(|b| b.is_ascii_hexdigit() || b.is_ascii_digit() || b == b'-')
    {
        return None; // not a reference: never a path to follow
    }
    let path = dir.join("sources").join(format!("{reference}.{ext}"));
    if std::fs::symlink_metadata(&path)
        .ok()?
        .file_type()
        .is_symlink()
    {
        return None;
    }
    let (file, _) = crate::report::traces::open_regular(&path).ok()?;
    let mut bytes = Vec::new();
    file.take(16 << 20).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_are_short() {
        let s: BTreeSet<RankKey> = [0, 1, 2, 3, 7].into_iter().map(RankKey::Rank).collect();
        assert_eq!(rank_list(&s), "ranks 0-3, 7");
        let one: BTreeSet<RankKey> = [RankKey::Rank(2)].into_iter().collect();
        assert_eq!(rank_list(&one), "rank 2");
    }
}
