//! What each build was made from, per rank, for the questions "why did it build?"
//! (`variants`), "where are the caches?" (`caches`) and "what changed since the last
//! run?" (`against`): gathered in the report's one pass over the records (`report` hands
//! each record to [`FileFacts::add`]), one small entry per distinct (rank, kernel names,
//! source, options, devices) rather than per record, so memory grows with the programs
//! and ranks, not with the run's length.

use crate::report::RankKey;
use crate::schema::CacheDir;
use crate::traces::{Event, Id, Record};
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
    /// Made from a binary (the application's or clshim's), so built without compiling.
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
}

/// The writer of a file's `process` record (rank, pid, instance), whether it runs Python,
/// and its caches.
type Header = (Option<i64>, u64, Option<String>, bool, Vec<CacheDir>);

/// One file's part, with writers (rank or process) by file-local index.
#[derive(Default)]
pub struct FileFacts {
    host: Option<String>,
    header: Option<Header>,
    writers: Vec<(Option<i64>, u64, Option<String>)>,
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
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h = (*h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    *h = (*h ^ 0xff).wrapping_mul(0x0000_0100_0000_01b3);
}

impl FileFacts {
    fn writer(&mut self, r: &Record) -> usize {
        let inst = r.instance.as_deref();
        if let Some(i) = self
            .writers
            .iter()
            .position(|(rank, pid, i)| *rank == r.rank && *pid == r.pid && i.as_deref() == inst)
        {
            return i;
        }
        self.writers.push((r.rank, r.pid, inst.map(str::to_string)));
        self.seconds.push(0.0);
        self.query_seconds.push(0.0);
        self.writers.len() - 1
    }

    pub fn add(&mut self, r: &Record) {
        match r.event {
            Event::Process if self.header.is_none() => {
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
                let e = r
                    .program
                    .clone()
                    .and_then(|p| self.by_id.get(&(w, p)).copied());
                if let Some(e) = e {
                    self.entries[e].4 += r.seconds;
                }
                if r.param.as_deref() == Some("CL_PROGRAM_BINARIES") && !r.failed() {
                    self.used.insert("pyopencl");
                    if let Some(e) = e {
                        self.queried.insert(e);
                    }
                }
            }
            Event::Build | Event::Compile | Event::Link => self.add_build(r),
            _ => {}
        }
    }

    fn add_build(&mut self, r: &Record) {
        let w = self.writer(r);
        self.seconds[w] += r.seconds;
        for d in r.devices() {
            if d.platform.as_deref() == Some(crate::traces::POCL_PLATFORM) {
                self.used.insert("pocl");
            }
            if d.platform.as_deref().is_some_and(|p| p.contains("NVIDIA")) {
                self.used.insert("cuda");
            }
        }
        if r.failed() || r.kernels().is_empty() {
            return;
        }
        let mut kernels: Vec<&str> = r.kernels().iter().map(|k| &**k).collect();
        kernels.sort_unstable();
        kernels.dedup();
        let kept = r.kept.as_ref();
        let origin = r.source.as_ref().and_then(|s| s.origin.as_deref());
        let served = matches!(origin, Some("binary" | "clshim-binary"));
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
                self.index.insert(h, self.entries.len() - 1);
                self.entries.len() - 1
            }
        };
        self.entries[e].2 += 1;
        self.entries[e].3 += r.seconds;
        if let Some(p) = r.program.clone() {
            self.by_id.insert((w, p), e);
        }
    }
}

impl Facts {
    /// Folds one file in; `host` is the report's name for the file's host.
    pub fn add_file(&mut self, f: FileFacts, host: &str) {
        let key = |rank: Option<i64>, pid: u64, instance: &Option<String>| match rank {
            Some(n) => RankKey::Rank(n),
            None => RankKey::Process {
                host: host.to_string(),
                pid,
                instance: instance.clone(),
            },
        };
        let keys: Vec<RankKey> = f.writers.iter().map(|(r, p, i)| key(*r, *p, i)).collect();
        if let Some((rank, pid, instance, python, caches)) = &f.header {
            self.processes.push(ProcessCaches {
                host: f.host.clone().unwrap_or_else(|| host.to_string()),
                rank: key(*rank, *pid, instance),
                python: *python,
                caches: caches.clone(),
                used: f.used.clone(),
            });
        }
        for (w, s) in f.seconds.iter().enumerate() {
            *self.rank_seconds.entry(keys[w].clone()).or_default() += s;
            *self.rank_query_seconds.entry(keys[w].clone()).or_default() += f.query_seconds[w];
        }
        for &e in &f.queried {
            self.queried.insert(f.entries[e].1.kernels.clone());
        }
        for (w, v, builds, seconds, query_seconds) in f.entries {
            let t = self.variants.entry(v).or_default();
            t.builds += builds;
            t.seconds += seconds;
            t.query_seconds += query_seconds;
            t.ranks.insert(keys[w].clone());
        }
        self.nvidia |= f.nvidia;
    }

    pub fn merge(&mut self, o: Facts) {
        for (v, t) in o.variants {
            let mine = self.variants.entry(v).or_default();
            mine.builds += t.builds;
            mine.seconds += t.seconds;
            mine.query_seconds += t.query_seconds;
            mine.ranks.extend(t.ranks);
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
    let (file, _) = crate::traces::open_regular(&path).ok()?;
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
