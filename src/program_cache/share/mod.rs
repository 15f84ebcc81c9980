//! One compile per program per node: ranks of a job that build the same program share the
//! compile of it while the job runs (`CLSHIM_SHARE_BUILDS`, on with the program cache).
//! pocl compiles a program in two steps, and both are shared the same way: the build
//! (`build`: the program's bitcode) and, at a kernel's first launch with a work-group
//! configuration, the size-specialised kernel that runs (`launch`). This module owns what
//! the two have in common: the node's folder of the user's where compiles are published,
//! the locks there (one per compile: its holder compiles, the others wait for what it
//! publishes), how long a rank waits, and which programs of this process were shared.
//!
//! Two builds are the same when their key is (`store::build_key`: source, options, the
//! environment that changes a compile, device, driver), and what a rank takes is checked
//! again by pocl itself: a published folder is copied into the rank's own pocl kernel
//! cache, where pocl finds it only under the hash of this rank's own preprocessed source
//! (and, for a kernel, of its own specialisation), so a rank whose compile would read
//! other files or make another kernel compiles as without clshim. Everything shared is
//! written whole under a temporary name and renamed into place, so nobody reads half of it.
//!
//! A rank never waits for long: a peer that dies mid-compile drops its lock with it (the
//! waiting rank then compiles); a peer that hangs, or one so slow on a busy node that
//! waiting would cost more than compiling, is waited for at most as long as this rank
//! expects the compile to take (from its own compiles, else a rate measured here for
//! pocl), and then the rank compiles on its own. Each record says which it was.

mod build;
mod launch;

pub use build::{before_build, BuildNote};
pub use launch::{before_launch, LaunchTurn};

use crate::lock::{ForkOrder, Lock};
use crate::store::build_key::BuildKey;
use crate::store::files;
use crate::store::kept::KeptStore;
use std::collections::{HashMap, HashSet};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What a build or first launch did with the node's compiles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shared {
    /// It compiled, holding the node's lock on its key, and published its compile.
    Compiled,
    /// It took a peer's compile, after waiting this long for it.
    FromPeer { waited: f64 },
    /// It waited this long for a peer, then compiled on its own.
    CompiledAfterWaiting { waited: f64 },
    /// It waited this long for a peer, whose compile it already had: pocl found the
    /// program (or kernel) in this rank's own cache.
    OwnCache { waited: f64 },
    /// It took the compile an earlier job, or another node, kept in the store, after
    /// waiting this long for a compile under way on another node (0: it was there).
    FromStore { waited: f64 },
}

impl Shared {
    pub fn name(self) -> &'static str {
        match self {
            Shared::Compiled => "compiled",
            Shared::FromPeer { .. } => "from_peer",
            Shared::CompiledAfterWaiting { .. } => "compiled_after_waiting",
            Shared::OwnCache { .. } => "own_cache",
            Shared::FromStore { .. } => "from_store",
        }
    }

    pub fn waited(self) -> Option<f64> {
        match self {
            Shared::Compiled => None,
            Shared::FromStore { waited } => (waited > 0.0).then_some(waited),
            Shared::FromPeer { waited }
            | Shared::CompiledAfterWaiting { waited }
            | Shared::OwnCache { waited } => Some(waited),
        }
    }
}

/// What compiles took, per byte of code ([`code_bytes`]): how long a rank expects the next
/// compile to take, and so how long it waits for a peer's. Its own compiles first; before it
/// has made one, its node's (each rank that compiles leaves its measure in the node's
/// folder); before any rank of the node has, a rate measured here for pocl, which only
/// bounds a first wait. It also keeps its last compiles' times, whose median
/// ([`Patience::Measured`]) sizes a wait behind a holder that is compiling.
struct Rate {
    nanos: AtomicU64,
    bytes: AtomicU64,
    /// The last [`RECENT`] compiles' nanoseconds (lock-free: a fork may come at any time).
    recent: [AtomicU64; RECENT],
    count: AtomicU64,
    /// Seconds per byte before anything of the kind was measured.
    guess: f64,
}

const RECENT: usize = 15;
#[allow(clippy::declare_interior_mutable_const)] // each element of `recent` starts from it
const NONE_YET: AtomicU64 = AtomicU64::new(0);

fn per_byte(nanos: u64, bytes: u64) -> Option<f64> {
    (nanos > 0 && bytes > 0).then(|| nanos as f64 / 1e9 / bytes as f64)
}

/// The file of the node's folder where ranks leave what their compiles took: `nanos bytes`.
const NODE_RATE: &str = "rate";

impl Rate {
    const fn new(guess: f64) -> Rate {
        Rate {
            nanos: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            recent: [NONE_YET; RECENT],
            count: AtomicU64::new(0),
            guess,
        }
    }

    /// Counts a compile this process made, and leaves its measure for its node's ranks
    /// when it shares with them (`node`).
    fn add(&self, took: Duration, bytes: usize, node: bool) {
        let nanos = self
            .nanos
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed)
            + took.as_nanos() as u64;
        let total = self.bytes.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        let i = self.count.fetch_add(1, Ordering::Relaxed) as usize % RECENT;
        self.recent[i].store(took.as_nanos().max(1) as u64, Ordering::Relaxed);
        if let Some(folder) = node.then(node_folder).flatten() {
            if let Ok(d) = files::open_dir(folder, false) {
                let text = format!("{nanos} {total}\n");
                let _ = files::write_atomic(&d, NODE_RATE, text.as_bytes(), true, false);
            }
        }
    }

    /// The seconds per byte this process's own compiles took.
    fn own(&self) -> Option<f64> {
        per_byte(
            self.nanos.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// The median seconds of this process's last compiles, if it made any.
    fn own_median(&self) -> Option<f64> {
        let mut v: Vec<u64> = self
            .recent
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .filter(|&n| n > 0)
            .collect();
        v.sort_unstable();
        v.get(v.len() / 2).map(|&n| n as f64 / 1e9)
    }

    /// The seconds per byte measured, this process's own or (when it shares with its
    /// node's ranks, `node`) its node's.
    fn measured(&self, node: bool) -> Option<f64> {
        self.own().or_else(|| {
            let d = files::open_dir(node.then(node_folder).flatten()?, false).ok()?;
            let text = files::read_file(&d, NODE_RATE, 64, false).ok()??;
            let text = String::from_utf8(text).ok()?;
            let mut w = text.split_whitespace().map(|v| v.parse::<u64>().ok());
            per_byte(w.next()??, w.next()??)
        })
    }

    /// The seconds a compile of `bytes` of code is expected to take, and whether that was
    /// measured (else guessed).
    fn expected(&self, bytes: usize, node: bool) -> (f64, bool) {
        match self.measured(node) {
            Some(per_byte) => (per_byte * bytes as f64, true),
            None => (self.guess * bytes as f64, false),
        }
    }
}

/// How long a rank may wait for a peer's compile that it expects to take `seconds` itself:
/// within 1.5 times that (a peer on a busy node compiles a little slower), and, while
/// nothing was measured, at least half a second (the guess does not know this machine).
fn patience((seconds, measured): (f64, bool)) -> Duration {
    let bound = 1.5 * seconds;
    Duration::from_secs_f64(if measured { bound } else { bound.max(0.5) })
}

/// pocl 3.1 on one core of this project's machine builds a program of 100 statements
/// (about 4 KB of code) in about 0.15 s and one of 1,000 in 0.73 s: the estimate for a
/// process that has built nothing yet, which only bounds a wait.
static BUILDS: Rate = Rate::new(1.0 / 4096.0);

/// A kernel's first launch compiles the kernel that runs (its work-group function, then
/// linked): 0.6-0.9 s against the build's 0.15-0.2 s for 300 statements on pocl 3.1 here.
/// A launch waits for a peer's at most this many times what the program's build is
/// expected to take. Not timed from launches themselves: from the enqueue to the command's
/// end a launch also waits for the queue and runs the kernel, which no compile bounds.
const LAUNCH_FACTOR: f64 = 6.0;

/// A launch's wait is sized from this process's own builds only: a peer's build of the same
/// program may have spent its time on what a launch never reads again (200 KB of comments
/// parsed once), which its node's measure per byte of code would count six times over.
fn launch_patience(bytes: usize) -> Duration {
    let per = BUILDS.own().unwrap_or(BUILDS.guess);
    Duration::from_secs_f64((LAUNCH_FACTOR * per * bytes as f64).max(0.5))
}

fn build_patience(bytes: usize, node: bool) -> Patience {
    match BUILDS.expected(bytes, node) {
        (seconds, true) => Patience::Measured {
            by_size: patience((seconds, true)),
            typical: patience((BUILDS.own_median().unwrap_or(0.0), true)),
        },
        guessed => Patience::Unmeasured {
            guess: patience(guessed),
            bytes,
            node,
        },
    }
}

/// How long a rank may wait for a peer's compile.
#[derive(Clone, Copy, Debug)]
pub(super) enum Patience {
    /// Within 1.5 times what its measured compiles say this one takes by its size; behind a
    /// holder of this host that is compiling, within 1.5 times its own compiles' median if
    /// that is longer (a small program's compile has a part no byte count sees: the seed's
    /// kind of workload at 16 ranks had 16 of its 26 early give-ups on small programs whose
    /// peer took 0.4-1.0 s where the rate per byte gave 0.1-0.5 s), so a stopped or gone
    /// holder of a small program is not waited for as long as a typical compile. A launch's
    /// `typical` is zero: its bound is as first sized.
    Measured {
        by_size: Duration,
        typical: Duration,
    },
    /// Nothing measured yet, by the rank or its node: the guess, which knows neither this
    /// machine's compiler nor its start in the process (the seed's kind of workload at 16
    /// ranks: every rank's first compile took 0.6-5 s where the guess gave 0.5 s, and 10
    /// ranks gave up and compiled it again). Behind a holder of this host that is compiling
    /// (neither stopped nor gone), the rank waits on past the guess until a compile of its
    /// node is measured, and that bound then applies from the wait's start; at most ten
    /// times the guess. Behind one stopped, gone or of another host, the guess applies.
    Unmeasured {
        guess: Duration,
        bytes: usize,
        node: bool,
    },
}

impl Patience {
    /// Whether a wait of `waited` has gone on too long, `holder` being the lock its
    /// holder wrote its name into (none: a lease of another node, whose holder is not seen).
    fn exceeded(&self, waited: Duration, holder: Option<&std::fs::File>) -> bool {
        match *self {
            Patience::Measured { by_size, typical } => {
                waited > by_size && (waited > typical || !holder.is_some_and(holder_compiling))
            }
            Patience::Unmeasured { guess, bytes, node } => {
                if waited <= guess {
                    return false;
                }
                if let (seconds, true) = BUILDS.expected(bytes, node) {
                    return waited > patience((seconds, true));
                }
                waited > guess * 10 || !holder.is_some_and(holder_compiling)
            }
        }
    }
}

/// The text a rank writes into a lock it takes: who compiles.
fn holder_text() -> String {
    format!("clshim-holder 1 {} {}\n", this_host(), std::process::id())
}

fn this_host() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(clshim_format::store::host_id)
}

/// Whether the rank that holds `lock` (as its text names it) is of this host and
/// compiling: neither gone nor stopped (a stopped compile makes no progress however long
/// it is waited for).
fn holder_compiling(lock: &std::fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 512];
    let Ok(n) = lock.read_at(&mut buf, 0) else {
        return false;
    };
    let Ok(text) = std::str::from_utf8(&buf[..n]) else {
        return false;
    };
    let mut w = text.trim_end_matches('\n').split(' ');
    let (Some("clshim-holder"), Some("1"), Some(host), Some(pid), None) =
        (w.next(), w.next(), w.next(), w.next(), w.next())
    else {
        return false;
    };
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    if host != this_host() || pid as u32 == std::process::id() {
        return false;
    }
    let stopped = std::fs::read(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        clshim_format::store::stat_state(&stat).map_or(true, |s| s == b'T' || s == b't')
    });
    !stopped && !clshim_format::store::process_gone(pid)
}

/// How much of `src` is code, for the estimates of a compile's time: its bytes outside
/// comments, blanks and `#if 0` blocks (a program of a few lines under 200 KB of comments
/// or of disabled code compiles as fast as those few lines). A rough lexer (string
/// literals are taken as code, a comment marker inside one ends it early; other
/// conditionals are not evaluated), which only sizes a wait.
fn code_bytes(src: &[u8]) -> usize {
    let src = &without_if_zero(src);
    let (mut n, mut i) = (0, 0);
    while i < src.len() {
        match (src[i], src.get(i + 1)) {
            (b'/', Some(b'/')) => {
                while i < src.len() && src[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i + 1 < src.len() && !(src[i] == b'*' && src[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            (b, _) => {
                n += usize::from(!b.is_ascii_whitespace());
                i += 1;
            }
        }
    }
    n
}

/// `src` without the lines of its `#if 0` (or `#if false`) blocks, up to their `#else`,
/// `#elif` or `#endif` (conditionals nested in them counted).
fn without_if_zero(src: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    // (`<[u8]>::trim_ascii` is newer than this crate's oldest Rust.)
    fn trim(s: &[u8]) -> &[u8] {
        let start = s
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(s.len());
        let end = s
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(start, |e| e + 1);
        &s[start..end.max(start)]
    }
    fn directive(line: &[u8]) -> Option<&[u8]> {
        Some(trim(trim(line).strip_prefix(b"#")?))
    }
    fn word<'a>(d: &'a [u8], w: &[u8]) -> Option<&'a [u8]> {
        let rest = d.strip_prefix(w)?;
        (rest.is_empty() || rest[0].is_ascii_whitespace()).then(|| trim(rest))
    }
    if !src.windows(2).any(|w| w == b"#i") {
        return std::borrow::Cow::Borrowed(src);
    }
    let mut out = Vec::with_capacity(src.len());
    let mut depth = 0usize;
    for line in src.split_inclusive(|&b| b == b'\n') {
        let d = directive(line);
        if depth == 0 {
            if d.and_then(|d| word(d, b"if"))
                .is_some_and(|c| c == b"0" || c == b"false")
            {
                depth = 1;
            } else {
                out.extend_from_slice(line);
            }
            continue;
        }
        let Some(d) = d else { continue };
        if word(d, b"if").is_some() || word(d, b"ifdef").is_some() || word(d, b"ifndef").is_some() {
            depth += 1;
        } else if word(d, b"endif").is_some() {
            depth -= 1;
        } else if depth == 1 && (word(d, b"else").is_some() || word(d, b"elif").is_some()) {
            depth = 0;
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The locks this process holds, by file: a second program of the same build, or a
/// second launch of the same kernel, in this process does not wait for its own first (a
/// lock file opened twice is two locks that exclude each other, even in one process).
static HELD: OnceLock<&'static Lock<HashSet<PathBuf>>> = OnceLock::new();

fn held() -> &'static Lock<HashSet<PathBuf>> {
    HELD.get_or_init(|| Lock::new_fork_held(ForkOrder::SharedPrograms, HashSet::new()))
}

/// A lock this process holds, given back (and forgotten) when dropped.
struct Held {
    file: std::fs::File,
    path: PathBuf,
}

impl Drop for Held {
    fn drop(&mut self) {
        held().lock().remove(&self.path);
        // Let go explicitly: a child forked without exec shares the lock's open file, and
        // would otherwise hold it (and its peers waiting) until it ends.
        // SAFETY: an open descriptor of this process.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The node's folder of shared compiles: the user's own, in the temporary folder, by its
/// canonical name; None when sharing cannot be safe there (said once, on stderr): a
/// temporary folder that another user could rename things in (a folder others may write
/// that is not sticky, on its way from `/`), or a shared-builds folder that is not the
/// user's alone. Everything below is then done by name, in a folder no one else can
/// replace.
fn node_folder() -> Option<&'static Path> {
    static FOLDER: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOLDER
        .get_or_init(|| {
            let found = files::private_temp_dir().and_then(|tmp| {
                // SAFETY: no arguments.
                let uid = unsafe { libc::geteuid() };
                let folder = tmp.join(format!("clshim-{uid}-shared-builds"));
                files::open_dir(&folder, true)
                    .map(|_| {
                        remove_stale_temporaries(&folder);
                        folder.clone()
                    })
                    .map_err(|e| {
                        // The node's folder is named by the user's id, which others can
                        // see: another user may have made it first. What acts on it is
                        // the temporary folder, not the store.
                        let why = e.to_string();
                        let why = why.split(": a native store").next().unwrap_or(&why);
                        format!(
                            "{}: {why}: give the job's ranks a temporary folder of your own \
                                 (TMPDIR, the same for every rank of the node)",
                            folder.display()
                        )
                    })
            });
            match found {
                Ok(f) => Some(f),
                Err(why) => {
                    log::warn!("clshim: ranks do not share compiles here: {why}");
                    None
                }
            }
        })
        .as_deref()
}

/// How long a published compile (or a lock or mark) stays in the node's folder unchanged
/// before it is removed: where the temporary folder outlives jobs (`/tmp` on a
/// workstation, a node kept between jobs), the folder would otherwise only grow.
const KEEP_SECONDS: u64 = 7 * 24 * 3600;

/// Tidies the node's folder, once per process: what publishers killed mid-copy left (their
/// temporary folders, an hour old), and, at most once a day per folder (a stamp file's
/// time says when), whatever has not changed for [`KEEP_SECONDS`]. A published folder is
/// first renamed out of the way, so nobody takes part of it; a rank copying it then finds
/// its copy incomplete and compiles, as one that found nothing.
fn remove_stale_temporaries(folder: &Path) {
    use std::os::unix::fs::MetadataExt;
    let age = |m: &std::fs::Metadata| {
        m.modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .map_or(0, |a| a.as_secs())
    };
    let stamp = folder.join(".swept");
    let sweep = std::fs::symlink_metadata(&stamp).map_or(true, |m| age(&m) > 24 * 3600);
    if sweep {
        // Made or its time set to now (a fresh file whose times are now).
        let _ = std::fs::remove_file(&stamp);
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&stamp);
    }
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    let entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
    // The builds whose published kernels go: their launches' marks go with them, however
    // young (a mark says its launch's kernels are there to take).
    let mut kernels_gone: Vec<Vec<u8>> = Vec::new();
    for e in &entries {
        let Ok(m) = e.metadata() else { continue };
        let name = e.file_name();
        let name = name.as_encoded_bytes();
        if name.starts_with(b".tmp-") {
            if age(&m) > 3600 {
                let _ = std::fs::remove_dir_all(e.path());
            }
        } else if sweep && !name.starts_with(b".") && age(&m) > KEEP_SECONDS {
            if m.is_dir() {
                let away = folder.join(format!(".tmp-swept-{}-{:x}", std::process::id(), m.ino()));
                if std::fs::rename(e.path(), &away).is_ok() {
                    let _ = std::fs::remove_dir_all(&away);
                    if let Some(key) = name.strip_suffix(b".kernels") {
                        kernels_gone.push([key, b"."].concat());
                    }
                }
            } else {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    for e in &entries {
        let name = e.file_name();
        let name = name.as_encoded_bytes();
        if name.ends_with(b".done") && kernels_gone.iter().any(|k| name.starts_with(k)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A lock file of the user's alone, opened (made if need be).
fn open_lock(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(files::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let m = f.metadata().ok()?;
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    (m.is_file() && m.uid() == me && m.mode() & 0o022 == 0).then_some(f)
}

/// How a wait for a peer's compile ended.
enum Waited {
    /// The peer's compile was published and taken.
    Taken,
    /// This rank holds the lock: it compiles.
    Holds(Held),
    /// The peer took longer than `limit`: this rank compiles without the lock.
    GaveUp,
}

/// Waits for the compile the lock file `path` stands for: `take` copies it once published
/// (false: nothing published yet); the rank that gets the lock compiles. Polls every 10 ms,
/// for at most `limit`. Returns with the seconds waited; None when this process holds
/// that lock itself (another thread, or another program of the same build), or the lock
/// file is not the user's alone: no sharing then.
fn wait_for(path: &Path, limit: Patience, take: impl Fn() -> bool) -> Option<(Waited, f64)> {
    if held().lock().contains(path) {
        return None;
    }
    let lock = open_lock(path)?;
    let clock = Instant::now();
    loop {
        if take() {
            return Some((Waited::Taken, clock.elapsed().as_secs_f64()));
        }
        // SAFETY: an open descriptor of this process.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // Published while this rank took the lock: the holder has let go.
            if take() {
                return Some((Waited::Taken, clock.elapsed().as_secs_f64()));
            }
            let mut mine = held().lock();
            if !mine.insert(path.to_path_buf()) {
                // Another thread of this process took it meanwhile (its own descriptor).
                return None;
            }
            drop(mine);
            {
                use std::os::unix::fs::FileExt;
                let _ = lock.set_len(0);
                let _ = lock.write_at(holder_text().as_bytes(), 0);
            }
            let held = Held {
                file: lock,
                path: path.to_path_buf(),
            };
            return Some((Waited::Holds(held), clock.elapsed().as_secs_f64()));
        }
        if limit.exceeded(clock.elapsed(), Some(&lock)) {
            return Some((Waited::GaveUp, clock.elapsed().as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `dir` holds a folder made at or after `since`, other than those named in
/// `taken` (relative to `dir`, two levels down at most as `depth` says): a compile of
/// pocl's own, where a build or launch that took a peer's compile should have made none
/// (it then did not match what pocl looked for, and pocl compiled).
fn made_since(dir: &Path, since: std::time::SystemTime, depth: usize, taken: &[PathBuf]) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let Ok(m) = e.metadata() else { return false };
        if !m.is_dir() || e.file_name().as_encoded_bytes().starts_with(b".") {
            return false;
        }
        if depth > 1 {
            // A level folder of pocl's cache: its programs, relative to `dir`.
            let inner: Vec<PathBuf> = taken
                .iter()
                .filter_map(|t| t.strip_prefix(e.file_name()).ok().map(Path::to_path_buf))
                .collect();
            return m.modified().is_ok_and(|t| t >= since)
                && made_since(&e.path(), since, depth - 1, &inner);
        }
        m.modified().is_ok_and(|t| t >= since)
            && !taken.iter().any(|t| t == Path::new(&e.file_name()))
    })
}

/// What a wait came to, as a record names it: a lock got at once is a plain compile.
fn shared_of(w: &Waited, waited: f64) -> Shared {
    match w {
        Waited::Taken => Shared::FromPeer { waited },
        Waited::Holds(_) if waited <= 0.01 => Shared::Compiled,
        _ => Shared::CompiledAfterWaiting { waited },
    }
}

/// A program of this process whose build was shared (made here or taken from a peer):
/// where its compile is, so that its kernels' first launches are shared too.
struct SharedProgram {
    /// The build's key.
    key: BuildKey,
    /// Its source's length, which bounds the wait for a kernel of it.
    bytes: usize,
    /// The node's folder, where peers publish (None: this rank shares with no peer).
    folder: Option<PathBuf>,
    /// The store its first launches are kept in (None: none).
    store: Option<KeptStore>,
    /// Whether its launches wait for other nodes' compiles (the store's leases).
    waits: bool,
    pocl_cache: PathBuf,
    /// Its folders in pocl's cache, relative to it (`XY/<hash>`).
    programs: Vec<PathBuf>,
    /// The specialisations of its kernels taken from the store with it (`XY/<hash>/
    /// <kernel>/<spec>`), for launch records.
    kept_specs: Vec<PathBuf>,
}

type Programs = HashMap<u64, Arc<SharedProgram>>;

/// The shared programs of this process, by clshim's program id (never reused); made at
/// the first shared build.
static PROGRAMS: OnceLock<&'static Lock<Programs>> = OnceLock::new();

fn remember(id: u64, program: SharedProgram) {
    PROGRAMS
        .get_or_init(|| Lock::new_fork_held(ForkOrder::SharedPrograms, HashMap::new()))
        .lock()
        .insert(id, Arc::new(program));
}

fn shared_program(id: u64) -> Option<Arc<SharedProgram>> {
    PROGRAMS.get()?.lock().get(&id).cloned()
}

/// Copies the folder `from` into pocl's cache as `to` (which must not exist yet), whole:
/// made under a temporary name beside it and renamed into place, so pocl never reads
/// half of it, and only when copied whole (else pocl compiles, as without clshim). A folder
/// that appeared meanwhile is left as it is.
fn copy_into_cache(from: &Path, to: &Path, tag: u64) {
    let Some(parent) = to.parent() else { return };
    if files::make_dir(parent).is_err() {
        return;
    }
    let tmp = parent.join(format!(".clshim-shared-{}-{tag:016x}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    if files::make_dir(&tmp).is_err() {
        return;
    }
    if !files::copy_tree(from, &tmp) || std::fs::rename(&tmp, to).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
}

/// Makes the folders of `rel` (relative) below the existing folder `base`, each in turn.
fn make_dirs_below(base: &Path, rel: &Path) -> bool {
    let mut at = base.to_path_buf();
    rel.components().all(|c| {
        at.push(c);
        files::make_dir(&at).is_ok()
    })
}

/// How long a mark that a peer had nothing to publish holds (an empty published folder):
/// ranks of one job reach a program within this of each other; a mark left by an earlier
/// job is not taken for this one's, whose first rank then compiles and publishes.
const MARK_SECONDS: u64 = 60;

/// Whether the published folder `dir` is a fresh mark that there is nothing to take: the
/// peer's build or launch was answered from its own cache, so each rank goes on with its
/// own (and the waiting ranks do not queue for the lock one by one).
fn fresh_marker(dir: &Path) -> bool {
    let empty = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
    empty
        && std::fs::symlink_metadata(dir)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|a| a.as_secs() < MARK_SECONDS))
}

/// Puts the folder `tmp`, made whole, in place as `to`: renamed, so no one reads half of
/// it. An earlier mark (an empty folder) is replaced; a publication already there (a peer
/// that gave up waiting published the same compile) is kept, and `tmp` removed.
fn publish_whole(tmp: &Path, to: &Path) {
    if std::fs::rename(tmp, to).is_err() {
        let _ = std::fs::remove_dir_all(tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_outside_comments_and_disabled_blocks_is_counted() {
        let code = b"__kernel void k(global int *o) { o[0] = 1; }\n";
        let n = code_bytes(code);
        let mut padded = b"// a comment\n/* and\n another */\n#if 0\n".to_vec();
        for _ in 0..1000 {
            padded.extend_from_slice(b"int x = 1; \n");
        }
        padded.extend_from_slice(b"#ifdef X\nint y;\n#endif\n#else\n#define Z 1\n#endif\n");
        padded.extend_from_slice(code);
        assert_eq!(code_bytes(&padded), n + "#defineZ1#endif".len());
        let mut kept = b"#if 1\nint x = 1;\n#endif\n".to_vec();
        kept.extend_from_slice(code);
        assert_eq!(code_bytes(&kept), n + "#if1intx=1;#endif".len());
    }

    /// A small program's compile is not its bytes' share of a large one's: the seed's kind
    /// of workload at 16 ranks gave up on peers' 0.4-1.0 s compiles after 0.1-0.5 s. Its
    /// own compiles' median sizes the wait behind a holder that is compiling, not behind
    /// one stopped (or gone), which is waited for what the program's size gives.
    #[test]
    fn a_small_program_is_waited_for_the_median_compile_while_its_holder_compiles() {
        let r = Rate::new(1.0 / 4096.0);
        r.add(Duration::from_millis(3000), 40_000, false); // a large one, compiler start and all
        for _ in 0..4 {
            r.add(Duration::from_millis(600), 800, false);
        }
        let (by_size, measured) = r.expected(300, false);
        assert!(measured && by_size < 0.05, "{by_size}");
        assert!((0.59..0.61).contains(&r.own_median().unwrap()));
        let wait = Patience::Measured {
            by_size: patience((by_size, true)),
            typical: patience((r.own_median().unwrap(), true)),
        };
        let mut holder = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let lock = std::env::temp_dir().join(format!("clshim-holder-test-{}", std::process::id()));
        std::fs::write(
            &lock,
            format!("clshim-holder 1 {} {}\n", this_host(), holder.id()),
        )
        .unwrap();
        let f = std::fs::File::open(&lock).unwrap();
        let half = Duration::from_millis(500);
        assert!(!wait.exceeded(half, Some(&f)), "behind a holder compiling");
        assert!(wait.exceeded(half, None), "behind a lease of another node");
        // SAFETY: the test's own child.
        unsafe { libc::kill(holder.id() as i32, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(100));
        assert!(wait.exceeded(half, Some(&f)), "behind a stopped holder");
        assert!(wait.exceeded(Duration::from_millis(1000), None));
        let _ = holder.kill();
        let _ = holder.wait();
        let _ = std::fs::remove_file(&lock);
        // Only the last compiles count.
        for _ in 0..RECENT {
            r.add(Duration::from_millis(100), 800, false);
        }
        assert!((0.09..0.11).contains(&r.own_median().unwrap()));
    }
}
