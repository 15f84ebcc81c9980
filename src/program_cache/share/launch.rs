//! The first launch's half (see the parent module): pocl compiles the kernel that runs
//! (specialised for the work-group configuration, then linked) at a kernel's first launch,
//! into a folder of the kernel below its program's folder in pocl's cache. What a launch
//! makes there is kept in the store beside its program's kept build, once the command has
//! completed, so that a later job takes it with the build (`store::kept`) and its launch is
//! pocl's cache hit. For a program whose build was shared, the first rank to launch one of its kernels with
//! a configuration takes the lock of (build key, kernel, configuration), launches, and,
//! once the command has completed, publishes each specialisation pocl made (each once, in
//! the build's `kernels` folder, as pocl's cache names it) and marks the configuration
//! done; a rank that comes second waits for that mark (at most what it expects the
//! kernel's compile to take: the lock is held until the command completes, which may be
//! long after the compile), copies each published specialisation it lacks into its own
//! program's folder, and launches, which pocl answers from its cache. Which specialisation
//! a launch needs is pocl's to say, by the folder's name: one copied that this launch does
//! not use is never read, and one it needs but lacks is compiled as without clshim.

use super::{
    copy_into_cache, launch_patience, make_dirs_below, node_folder, publish_whole, shared_of,
    shared_program, wait_for, Held, Patience, Shared, SharedProgram, Waited,
};
use crate::hash::Fnv1a;
use crate::store::{files, kept};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A first launch's turn: what it did before the launch, and what it owes once the
/// command has completed.
pub struct LaunchTurn {
    pub shared: Shared,
    /// Held while this rank's launch compiles (published, then dropped, at completion).
    lock: Option<Held>,
    program: Arc<SharedProgram>,
    kernel: String,
    /// The key of (build key, kernel, configuration).
    key: u64,
    clock: Instant,
    /// When the launch was forwarded; the specialisations a peer published, and how many
    /// of them this rank copied (the others it had).
    since: SystemTime,
    taken: Vec<PathBuf>,
    copied: usize,
    /// Held while this rank's launch compiles for every node sharing the store.
    lease: Option<kept::Lease>,
    /// The node whose rank kept the kernel this launch took from the store.
    pub from_host: Option<String>,
}

/// Whether `name` can stand as a folder's name as it is (pocl names a kernel's folder
/// after the kernel; OpenCL C names are identifiers).
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Before the first launch of `kernel` of the program clshim knows as `program`, with
/// `work_dim` global sizes `global` and local sizes `local` (None: the driver's choice):
/// whose compile this launch uses. None: no sharing for it (the program's build was not
/// shared, or the kernel's name is not a plain identifier).
pub fn before_launch(
    program: Option<u64>,
    kernel: Option<&str>,
    global: &[usize],
    local: Option<&[usize]>,
) -> Option<LaunchTurn> {
    let program = shared_program(program?)?;
    let kernel = kernel.filter(|k| plain_name(k))?;
    let mut h = Fnv1a::default();
    h.update(&program.key.key.to_le_bytes())
        .update(kernel.as_bytes());
    h.update(&(global.len() as u64).to_le_bytes());
    for g in global {
        h.update(&(*g as u64).to_le_bytes());
    }
    if let Some(l) = local {
        h.update(b"local");
        for x in l {
            h.update(&(*x as u64).to_le_bytes());
        }
    }
    let key = h.finish();
    let mut turn = LaunchTurn {
        shared: Shared::Compiled,
        lock: None,
        program,
        kernel: kernel.to_string(),
        key,
        clock: Instant::now(),
        since: SystemTime::now(),
        taken: Vec::new(),
        copied: 0,
        lease: None,
        from_host: None,
    };
    // Kept by a rank of another node since this rank took the build: taken now.
    if let Some(host) = turn.kept_launch() {
        turn.shared = Shared::FromStore { waited: 0.0 };
        turn.from_host = Some(host);
        return Some(turn.begun());
    }
    let patience = launch_patience(turn.program.bytes);
    let clock = Instant::now();
    // The node's folder, made again if a cleaner took it, its owner and mode checked again.
    // A kernel the store kept with its program's build meets its peers here too: which
    // specialisation this launch needs is pocl's to say, and the kept one may not be it.
    let node = turn
        .program
        .folder
        .as_ref()
        .filter(|_| node_folder().is_some_and(|f| files::open_dir(f, true).is_ok()))
        .cloned();
    if let Some(folder) = node {
        let lock = folder.join(format!("{:016x}.{key:016x}.lock", turn.program.key.key));
        let taken = std::cell::RefCell::new((Vec::new(), 0));
        let kept = std::cell::RefCell::new(None);
        // Kept in the store (by another node, or taken from it by the peer this rank
        // waits for, which then publishes nothing), or published by a peer.
        let waited = wait_for(
            &lock,
            Patience::Measured {
                by_size: patience,
                typical: std::time::Duration::ZERO,
            },
            || {
                *kept.borrow_mut() = turn.kept_launch();
                kept.borrow().is_some() || {
                    let mut t = taken.borrow_mut();
                    let (names, copied) = &mut *t;
                    turn.take_published(names, copied)
                }
            },
        );
        let Some((waited, seconds)) = waited else {
            // This process launches it already (another thread): no peer to wait for.
            log::debug!("launch {key:016x}: launched by this process already");
            return Some(turn.begun());
        };
        if let Some(host) = kept.into_inner() {
            turn.shared = Shared::FromStore { waited: seconds };
            turn.from_host = Some(host);
            return Some(turn.begun());
        }
        turn.shared = shared_of(&waited, seconds);
        (turn.taken, turn.copied) = taken.into_inner();
        match waited {
            Waited::Holds(lock) => turn.lock = Some(lock),
            _ => {
                log::debug!(
                    "launch {key:016x}: {} after {seconds:.3} s",
                    turn.shared.name()
                );
                return Some(turn.begun());
            }
        }
    }
    // This rank launches first on its node: unless a rank of another node sharing the
    // store compiles this kernel now, whose kept kernel it waits for.
    let Some(store) = turn.program.store.clone().filter(|_| turn.program.waits) else {
        return Some(turn.begun());
    };
    match kept::lease(&store, turn.program.key.key, &format!("{key:016x}")) {
        // Kept by another node between this rank's first look and its lease.
        Some(kept::Leased::Mine(_))
            if turn.kept_launch().is_some_and(|h| {
                turn.from_host = Some(h);
                true
            }) =>
        {
            turn.shared = Shared::FromStore {
                waited: clock.elapsed().as_secs_f64(),
            };
            drop(turn.lock.take());
        }
        Some(kept::Leased::Mine(l)) => {
            log::debug!("launch {key:016x}: leased, compiles for every node");
            turn.lease = Some(l)
        }
        Some(kept::Leased::Theirs(host)) => {
            log::debug!("launch {key:016x}: {host} compiles it: waiting");
            while clock.elapsed() < patience {
                if let Some(host) = turn.kept_launch() {
                    turn.shared = Shared::FromStore {
                        waited: clock.elapsed().as_secs_f64(),
                    };
                    turn.from_host = Some(host);
                    drop(turn.lock.take());
                    return Some(turn.begun());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            log::debug!("launch {key:016x}: not kept in time: compiles");
            turn.shared = Shared::CompiledAfterWaiting {
                waited: clock.elapsed().as_secs_f64(),
            };
        }
        None => log::debug!("launch {key:016x}: no lease can be had: compiles"),
    }
    Some(turn.begun())
}

impl LaunchTurn {
    /// The turn, with when the launch itself is forwarded (after any wait).
    fn begun(mut self) -> LaunchTurn {
        self.clock = Instant::now();
        self.since = SystemTime::now();
        self
    }

    /// Takes this launch's kept kernel from the store, if a rank kept it (with the host
    /// that did).
    fn kept_launch(&self) -> Option<String> {
        let p = &self.program;
        kept::take_launch(p.store.as_ref()?, &p.key, self.key, &p.pocl_cache)
    }

    /// The node's folder, where this launch meets its peers' (None: it has none).
    fn node(&self) -> Option<&PathBuf> {
        self.program.folder.as_ref()
    }

    /// The mark that a launch with this configuration completed on some rank, and its
    /// specialisations were published (an empty file).
    fn done(&self) -> Option<PathBuf> {
        let name = format!("{:016x}.{:016x}.done", self.program.key.key, self.key);
        Some(self.node()?.join(name))
    }

    /// Where the build's kernels' specialisations are published, each once, as pocl's
    /// cache holds them: `<program folder>/<kernel>/<specialisation>`.
    fn kernels(&self) -> Option<PathBuf> {
        Some(self.node()?.join(self.kernels_name()))
    }

    fn kernels_name(&self) -> PathBuf {
        PathBuf::from(format!("{:016x}.kernels", self.program.key.key))
    }

    /// Once a launch of this configuration is done: copies each published specialisation
    /// of the kernel that this rank's program folders lack (`taken` gets the names of
    /// those published, `copied` how many were copied). False while none is done. Which
    /// one this launch needs is pocl's to find, by name.
    fn take_published(&self, taken: &mut Vec<PathBuf>, copied: &mut usize) -> bool {
        let (Some(done), Some(kernels)) = (self.done(), self.kernels()) else {
            return false;
        };
        if !done.exists() {
            return false;
        }
        taken.clear();
        *copied = 0;
        for rel in &self.program.programs {
            let mine = self.program.pocl_cache.join(rel);
            if !mine.is_dir() {
                continue;
            }
            let from = kernels.join(rel).join(&self.kernel);
            let Ok(specs) = std::fs::read_dir(&from) else {
                continue;
            };
            for spec in specs.flatten() {
                let name = spec.file_name();
                if name.as_encoded_bytes().starts_with(b".")
                    || !spec.file_type().is_ok_and(|t| t.is_dir())
                {
                    continue;
                }
                let to = mine.join(&self.kernel).join(&name);
                if !to.exists() {
                    copy_into_cache(&spec.path(), &to, self.key);
                    *copied += 1;
                }
                taken.push(PathBuf::from(name));
            }
        }
        true
    }

    /// The specialisations of the kernel (relative to the program's folders: `XY/<hash>/
    /// <kernel>/<spec>`) that pocl made since the launch was forwarded.
    fn made_here(&self) -> Vec<PathBuf> {
        let mut made = Vec::new();
        for rel in &self.program.programs {
            let dir = self.program.pocl_cache.join(rel).join(&self.kernel);
            let Ok(specs) = std::fs::read_dir(&dir) else {
                continue;
            };
            for spec in specs.flatten() {
                let name = spec.file_name();
                let fresh = spec
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t >= self.since);
                if fresh
                    && spec.file_type().is_ok_and(|t| t.is_dir())
                    && !name.as_encoded_bytes().starts_with(b".")
                    && !self.taken.iter().any(|t| t.as_os_str() == name)
                {
                    made.push(rel.join(&self.kernel).join(name));
                }
            }
        }
        made
    }

    /// Whether the kernel this launch found in pocl's cache came from the store: a
    /// specialisation of it was written from the store with its program's build, and the
    /// program folders it was written into hold no other (which one a launch uses is
    /// pocl's to say: beside one pocl made itself, the launch may have used that).
    fn kept_here(&self) -> bool {
        let of_kernel = |s: &&PathBuf| {
            s.parent()
                .and_then(Path::file_name)
                .is_some_and(|k| k == self.kernel.as_str())
        };
        let kept: Vec<&PathBuf> = self.program.kept_specs.iter().filter(of_kernel).collect();
        !kept.is_empty()
            && self.program.programs.iter().all(|rel| {
                if !kept.iter().any(|k| k.starts_with(rel)) {
                    // Not the program's folder the store's kernel went into (another
                    // program's, kept with the build): pocl's hash decides which it uses.
                    return true;
                }
                let dir = rel.join(&self.kernel);
                std::fs::read_dir(self.program.pocl_cache.join(&dir))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter(|e| !e.file_name().as_encoded_bytes().starts_with(b"."))
                    .all(|e| kept.contains(&&dir.join(e.file_name())))
            })
    }

    /// Once the launch's command completed (`ok`: it ran): what pocl made for it is kept in
    /// the store, and, when this rank held the node's lock, published to its peers (none,
    /// when pocl's cache had them: then a mark that there is nothing to take), then the
    /// lock is let go. Returns what the launch did, as its record says it: one that took a
    /// peer's kernel but for which pocl made a specialisation all the same (the peer's was
    /// not the one this launch needed) compiled after waiting; one that copied nothing and
    /// made nothing found the kernel in its own cache, which the store put there when its
    /// program's build was taken from it. With whether what it made was kept, or why not.
    pub fn completed(mut self, ok: bool) -> (Shared, Option<Result<(), String>>) {
        let made = self.made_here();
        match self.shared {
            Shared::FromPeer { waited } if !made.is_empty() => {
                self.shared = Shared::CompiledAfterWaiting { waited };
            }
            // Nothing copied from the peer: the kernel was there, taken from the store with
            // its program's build, or pocl's own.
            Shared::FromPeer { waited } if self.copied == 0 && self.kept_here() => {
                self.shared = Shared::FromStore { waited };
            }
            Shared::FromPeer { waited } if self.copied == 0 => {
                self.shared = Shared::OwnCache { waited };
            }
            // It gave up waiting for a peer (or another node) and made nothing: the kernel
            // was there, as above.
            Shared::CompiledAfterWaiting { waited } if made.is_empty() && self.kept_here() => {
                self.shared = Shared::FromStore { waited };
            }
            Shared::CompiledAfterWaiting { waited } if made.is_empty() => {
                self.shared = Shared::OwnCache { waited };
            }
            Shared::FromStore { waited } if !made.is_empty() => {
                self.shared = Shared::CompiledAfterWaiting { waited };
                self.from_host = None;
            }
            Shared::Compiled if made.is_empty() && self.kept_here() => {
                self.shared = Shared::FromStore { waited: 0.0 };
            }
            // pocl's cache had the kernel before this launch: nothing compiled or taken.
            Shared::Compiled if made.is_empty() => {
                self.shared = Shared::OwnCache { waited: 0.0 };
            }
            _ => {}
        }
        let p = &self.program;
        let kept = p
            .store
            .as_ref()
            .filter(|_| ok && !made.is_empty())
            .map(|store| {
                let took = self.clock.elapsed();
                kept::keep_launch(store, &p.key, self.key, &p.pocl_cache, &made, took)
            });
        if self.lock.is_some() && ok {
            self.publish(&made);
        }
        drop(self.lock.take());
        (self.shared, kept)
    }

    /// Publishes `made` (what pocl made for this launch) to the node's peers, each
    /// specialisation once, made whole under a temporary name and renamed into place (one
    /// another launch published already is left), then marks the launch done.
    fn publish(&self, made: &[PathBuf]) {
        let (Some(node), Some(kernels), Some(done)) = (self.node(), self.kernels(), self.done())
        else {
            return;
        };
        for rel in made {
            let to = kernels.join(rel);
            // Only what no one else can have made or moved in this rank's pocl cache.
            if to.exists() || files::below_not_others(&self.program.pocl_cache, rel).is_some() {
                continue;
            }
            let Some(parent) = rel.parent() else { continue };
            if !make_dirs_below(node, &self.kernels_name().join(parent)) {
                continue;
            }
            let tmp =
                kernels
                    .join(parent)
                    .join(format!(".tmp-{}-{:016x}", std::process::id(), self.key));
            let _ = std::fs::remove_dir_all(&tmp);
            if files::make_dir(&tmp).is_ok() {
                if files::copy_tree(&self.program.pocl_cache.join(rel), &tmp) {
                    publish_whole(&tmp, &to);
                } else {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
            }
        }
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(done);
    }
}
