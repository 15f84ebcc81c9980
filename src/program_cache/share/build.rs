//! The build's half (see the parent module): a build whose key the store keeps a compile
//! of takes it (`store::kept`: the program's folder with every first launch kept for it)
//! into its own pocl kernel cache and builds, which pocl answers as a cache hit. Otherwise
//! the first rank of the node to build the program takes the lock named by the build's
//! key, compiles, publishes what pocl's kernel cache then holds of it (the program's
//! folder: its bitcode and log) to its peers, and keeps it in the store for later jobs; a
//! rank that comes second waits for the publication, copies it into its own pocl kernel
//! cache and builds. Never through pocl's generic compile: nothing is asked of the driver
//! but the build.

use super::{
    build_patience, code_bytes, copy_into_cache, fresh_marker, made_since, make_dirs_below,
    node_folder, publish_whole, remember, shared_of, wait_for, Held, Shared, SharedProgram, Waited,
    BUILDS,
};
use crate::cl::*;
use crate::dispatch::Route;
use crate::query;
use crate::recipe::{Recipe, Text};
use crate::runtime::Runtime;
use crate::store::build_key::{BuildKey, CompileEnv};
use crate::store::files;
use crate::store::kept::{self, KeptStore};
use crate::store::kernel_library;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// A build's turn: what it does before the driver builds, and what it owes after.
pub struct Turn {
    pub shared: Shared,
    /// Held while this rank compiles (published, then dropped, after the build).
    lock: Option<Held>,
    /// clshim's id of the program.
    program: u64,
    /// The node's folder (None: no peers to share with).
    folder: Option<PathBuf>,
    key: BuildKey,
    /// The store the build's compile is kept in (None: none).
    store: Option<KeptStore>,
    /// What a warm step needs to make the driver's binary of the build (a request).
    request: Vec<u8>,
    /// The device's and driver build's labels, left with the kept build (None: this
    /// process left them already).
    labels: Option<crate::store::labels::Labels>,
    pocl_cache: PathBuf,
    started: SystemTime,
    clock: Instant,
    bytes: usize,
    /// The program's folders in pocl's cache (relative to it) that a peer published or the
    /// store kept, and how many of them this build copied (the others it had).
    taken: Vec<PathBuf>,
    copied: usize,
    /// The specialisations of its kernels taken from the store.
    kept_specs: Vec<PathBuf>,
    /// Made once the turn is settled on, for the record and for `after`.
    note: Option<BuildNote>,
    /// Held while this rank compiles for every node sharing the store.
    lease: Option<kept::Lease>,
    /// Whether this rank waits for other ranks' compiles (`CLSHIM_SHARE_BUILDS`): on its
    /// node's folder and on the store's leases. Without, the store still serves what it
    /// kept and keeps what this rank compiles.
    waits: bool,
    /// The node whose rank kept the compile this build took from the store.
    from_host: Option<String>,
    /// Whether the store's kept build of this key was refused (damaged, say): a compile
    /// this build makes replaces it.
    refused: std::cell::Cell<bool>,
}

/// [`before`] for the application's arguments of `clBuildProgram`: a device list of the
/// program's one device, or none (NULL: all of them), read as the OpenCL API requires of
/// the application, and the options it builds with; `remade`: a program clshim made again
/// from a clshim binary's recipe (its source), built with the options the recipe recorded.
///
/// # Safety
/// The application's arguments to `clBuildProgram`, of a call that has not returned.
pub unsafe fn before_build(
    rt: &'static Runtime,
    route: Route,
    program: cl_program,
    devices: &crate::app_args::AppArray<cl_device_id>,
    options: *const std::ffi::c_char,
    remade: bool,
) -> Option<Turn> {
    use crate::programs::Origin;
    if !rt.config.program_cache || program.is_null() {
        return None;
    }
    match rt.programs.lookup(program).origin {
        Origin::Source => {}
        Origin::ClshimBinary if remade => {}
        _ => return None,
    }
    let listed = match (devices.is_null(), devices.len()) {
        (true, 0) => Vec::new(),
        // SAFETY: one device, the count the application gave (this function's contract).
        (false, 1) => unsafe { devices.read() },
        _ => return None,
    };
    // SAFETY: NULL or a NUL-terminated string (this function's contract).
    let opts = unsafe { crate::app_args::AppCStr::new(options) }
        .bytes()
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    // SAFETY: a program of the application's; the device it named, if any.
    unsafe { before(rt, route, program, &listed, &opts) }
}

/// Before the driver builds `program` (created from source) with `options` (the
/// application's): whose compile this build uses: the store's kept compile of its key, a
/// peer's on this node, or its own (kept, and published to its peers). None: nothing of
/// the kind for it (the program cache is off, more than one device, not pocl, pocl's
/// kernel cache off, no store and no node folder of the user's alone).
///
/// # Safety
/// `program` is a live program; `options` NULL or a NUL-terminated string (the
/// application's arguments, accepted by the driver for this call).
pub unsafe fn before(
    rt: &'static Runtime,
    route: Route,
    program: cl_program,
    devices: &[cl_device_id],
    options: &[u8],
) -> Option<Turn> {
    if !rt.config.program_cache || !crate::store::pocl_kernel_cache_on() {
        return None;
    }
    let Some(pocl_cache) = crate::store::pocl_cache_certain(&rt.config) else {
        log::debug!("pocl's cache folder changed since OpenCL began: no compile kept or taken");
        return None;
    };
    let devices = if devices.is_empty() {
        // SAFETY: a live program (this function's contract).
        unsafe { query::devices(route, program) }?
    } else {
        devices.to_vec()
    };
    // SAFETY: a live program (this function's contract).
    let own = unsafe { query::devices(route, program) }?;
    let [device] = devices[..] else {
        return None;
    };
    if own != [device] {
        return None;
    }
    // SAFETY: a device of the live program.
    let facts = unsafe { rt.devices.get(route, device) }?;
    // SAFETY: a live program.
    let source = unsafe { query::source(route, program) }.filter(|s| !s.is_empty())?;
    let bytes = code_bytes(&source);
    let recipe = Recipe::built(Text::Source(source), options.to_vec());
    let encoded = recipe.encode();
    // SAFETY: a live device, whose facts these are.
    let crate::store::Wanted { key, labels } =
        unsafe { crate::store::wanted(&facts, device, &recipe, &encoded) }.ok()?;
    let store = KeptStore::from_config(&rt.config);
    // Looked for only with the sharing on (looking makes it, or warns once that it cannot).
    let folder = (rt.config.share_builds)
        .then(node_folder)
        .flatten()
        // Made again if a cleaner took it; its owner and mode checked again.
        .filter(|f| files::open_dir(f, true).is_ok())
        .map(Path::to_path_buf);
    if store.is_none() && folder.is_none() {
        return None;
    }
    let request = std::env::current_dir()
        .map(|cwd| {
            clshim_format::store::Request {
                key: key.key,
                fingerprint: key.fingerprint,
                driver: key.driver,
                recipe: encoded,
                cwd: cwd.as_os_str().as_bytes().to_vec(),
                env: CompileEnv::of_process().replay,
            }
            .encode()
        })
        .unwrap_or_default();
    let mut turn = Turn {
        shared: Shared::Compiled,
        lock: None,
        program: rt.programs.lookup(program).id,
        folder,
        key,
        store,
        request,
        labels,
        pocl_cache,
        started: SystemTime::now(),
        clock: Instant::now(),
        bytes,
        taken: Vec::new(),
        copied: 0,
        kept_specs: Vec::new(),
        note: None,
        lease: None,
        waits: rt.config.share_builds,
        from_host: None,
        refused: std::cell::Cell::new(false),
    };
    if let Some(t) = turn.kept() {
        turn.use_kept(t, 0.0);
        return Some(turn);
    }
    // With the sharing off nothing waits, and the node's folder is left alone.
    let patience = build_patience(bytes, turn.waits);
    let clock = Instant::now();
    if let Some(folder) = turn.folder.clone() {
        let lock = folder.join(format!("{:016x}.lock", turn.key.key));
        let taken = std::cell::RefCell::new((Vec::new(), 0));
        let kept = std::cell::RefCell::new(None);
        // A peer of this node publishes, or a rank of another node keeps it first.
        let waited = wait_for(&lock, patience, || {
            let mut t = taken.borrow_mut();
            let (folders, copied) = &mut *t;
            turn.take_published(folders, copied) || {
                *kept.borrow_mut() = turn.kept();
                kept.borrow().is_some()
            }
        });
        let Some((waited, seconds)) = waited else {
            // This process holds that lock itself (another thread, another program of the
            // same build): no peer to wait for; what it compiles is kept all the same.
            turn.folder = None;
            return Some(turn.begun());
        };
        if let Some(t) = kept.into_inner() {
            turn.use_kept(t, seconds);
            return Some(turn);
        }
        turn.shared = shared_of(&waited, seconds);
        (turn.taken, turn.copied) = taken.into_inner();
        match waited {
            Waited::Holds(lock) => turn.lock = Some(lock),
            // Taken from a peer, or compiling after waiting: no other node is waited for.
            _ => return Some(turn.begun()),
        }
    }
    // This rank compiles for its node: unless a rank of another node sharing the store
    // compiles it now, whose kept compile it waits for (within the same patience).
    let Some(store) = turn.store.clone().filter(|_| turn.waits) else {
        return Some(turn.begun());
    };
    match kept::lease(&store, turn.key.key, "build") {
        Some(kept::Leased::Mine(l)) => match turn.kept() {
            // Kept by another node between this rank's first look and its lease.
            Some(t) => turn.use_kept(t, clock.elapsed().as_secs_f64()),
            None => turn.lease = Some(l),
        },
        Some(kept::Leased::Theirs(host)) => {
            while !patience.exceeded(clock.elapsed(), None) {
                if let Some(t) = turn.kept() {
                    turn.use_kept(t, clock.elapsed().as_secs_f64());
                    return Some(turn);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            log::debug!(
                "build {:016x}: {host} compiles it, not in time",
                turn.key.key
            );
            turn.shared = Shared::CompiledAfterWaiting {
                waited: clock.elapsed().as_secs_f64(),
            };
        }
        None => {}
    }
    Some(turn.begun())
}

/// What a build did with compiles, settled once, when the driver's build has returned
/// (when its record is written, or after, whichever comes first): a build that took a
/// peer's compile but whose pocl compiled all the same (its compile did not match the
/// peer's: another header, say) compiled after waiting; one that copied nothing and
/// compiled nothing found the program in its own cache; one that compiled keeps its
/// compile in the store (replacing a kept one pocl did not find its own in: the files it
/// reads changed since), so that the record says whether it did.
#[derive(Clone, Debug)]
pub struct BuildNote(Arc<Settle>);

#[derive(Debug)]
struct Settle {
    shared: Shared,
    pocl_cache: PathBuf,
    since: SystemTime,
    taken: Vec<PathBuf>,
    copied: usize,
    key: BuildKey,
    store: Option<KeptStore>,
    request: Vec<u8>,
    labels: Option<crate::store::labels::Labels>,
    from_host: Option<String>,
    /// The store's kept build was refused: a compile replaces it.
    refused: bool,
    outcome: OnceLock<Outcome>,
}

/// A build's settled part.
#[derive(Debug)]
pub struct Outcome {
    pub shared: Shared,
    /// Whether it compiled (its own program folders are `programs`).
    compiled: bool,
    /// The program folders (relative to pocl's cache) its kernels' launches use: those it
    /// made, or those it took.
    programs: Vec<PathBuf>,
    /// For a build that compiled, with a store: whether its compile was kept, or why not.
    pub kept: Option<Result<(), String>>,
    /// For one taken from the store: the node whose rank kept it.
    pub from_host: Option<String>,
    /// Whether `programs` hold the kernel library this build's key names (a compile under
    /// the key marked them: `kernel_library`), so that they, and the kernels compiled from
    /// them at first launches, may be kept and shared.
    shares: bool,
}

impl BuildNote {
    /// The build's outcome, the driver having answered `ret`.
    pub fn settle(&self, ret: cl_int) -> &Outcome {
        self.0.outcome.get_or_init(|| self.0.settle(ret))
    }
}

impl Settle {
    fn settle(&self, ret: cl_int) -> Outcome {
        // pocl marks a hit on a program folder by the time of its `last_accessed`: a build
        // that used what it took compiled nothing, whatever other folders appeared in the
        // cache meanwhile (another rank compiling other programs in a cache they share).
        let used_taken = || {
            self.taken.iter().any(|t| {
                std::fs::symlink_metadata(self.pocl_cache.join(t).join("last_accessed"))
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| m >= self.since)
            })
        };
        let made_own = || !used_taken() && made_since(&self.pocl_cache, self.since, 2, &self.taken);
        let shared = match self.shared {
            Shared::FromPeer { waited } if made_own() => Shared::CompiledAfterWaiting { waited },
            Shared::FromPeer { waited } if self.copied == 0 => Shared::OwnCache { waited },
            // The kept compile was not what pocl looked for (a header it reads changed):
            // this build compiled its own.
            Shared::FromStore { waited } if made_own() && waited > 0.0 => {
                Shared::CompiledAfterWaiting { waited }
            }
            Shared::FromStore { .. } if made_own() => Shared::Compiled,
            Shared::FromStore { waited } if self.copied == 0 => Shared::OwnCache { waited },
            s => s,
        };
        let compiled = matches!(
            shared,
            Shared::Compiled | Shared::CompiledAfterWaiting { .. }
        );
        if ret != CL_SUCCESS {
            return Outcome {
                shared,
                compiled,
                programs: Vec::new(),
                kept: None,
                from_host: None,
                shares: false,
            };
        }
        if !compiled {
            // A peer's compile the store lacks (published by a job before this store was
            // there, or one whose keeping failed) is kept from this rank's copy of it.
            let lacks = |store: &&KeptStore| {
                matches!(shared, Shared::FromPeer { .. }) && !kept::has_build(store, self.key.key)
            };
            // What it took holds the library this key names where a compile under the key
            // marked it; a folder pocl's cache had already (nothing copied) may be pocl's
            // alone, and then neither it nor the first launches compiled from it are kept.
            let driver = self.key.driver;
            let shares = self
                .taken
                .iter()
                .all(|p| kernel_library::marked(&self.pocl_cache.join(p), driver));
            if let Some(store) = self.store.as_ref().filter(lacks).filter(|_| shares) {
                let request = self.request.clone();
                let pocl = &self.pocl_cache;
                let request = (request, Duration::ZERO);
                let _ = kept::keep_build(store, &self.key, request, pocl, &self.taken, false);
            }
            let from_host = matches!(shared, Shared::FromStore { .. })
                .then(|| self.from_host.clone())
                .flatten();
            return Outcome {
                shared,
                compiled,
                programs: self.taken.clone(),
                kept: None,
                from_host,
                shares,
            };
        }
        // Its own, not what it copied and pocl did not use, nor what another process's
        // compile marked already (in a pocl cache processes share).
        let programs: Vec<PathBuf> = fresh_programs(&self.pocl_cache, self.since)
            .into_iter()
            .filter(|p| !self.taken.contains(p))
            .filter(|p| !kernel_library::bears_mark(&self.pocl_cache.join(p)))
            .collect();
        if programs.is_empty() {
            // pocl's own cache answered (a cache kept from an earlier job): nothing was
            // compiled. What it answered from (the folder whose `last_accessed` pocl touched
            // at the hit) is kept if the store lacks it, and shared, where a compile under
            // this key's driver made it (its mark): pocl's cache finds programs by the
            // kernel library libpocl was built with, whichever library linked them.
            let hit = touched_programs(&self.pocl_cache, self.since);
            let driver = self.key.driver;
            let shares = hit
                .iter()
                .all(|p| kernel_library::marked(&self.pocl_cache.join(p), driver));
            if let Some(store) = self
                .store
                .as_ref()
                .filter(|s| shares && !hit.is_empty() && !kept::has_build(s, self.key.key))
            {
                let request = (self.request.clone(), Duration::ZERO);
                let pocl = &self.pocl_cache;
                let _ = kept::keep_build(store, &self.key, request, pocl, &hit, false);
            }
            return Outcome {
                shared: Shared::OwnCache {
                    waited: shared.waited().unwrap_or(0.0),
                },
                compiled: false,
                programs: hit,
                kept: None,
                from_host: None,
                shares,
            };
        }
        let driver = self.key.driver;
        if !kernel_library::unchanged(driver) {
            // pocl's kernel library changed since this process named it in the key, and
            // pocl loads it once a process: which one this compile linked cannot be told,
            // so it is neither kept nor shared (nor are its first launches), and its folder
            // says so to any other process of a cache they share.
            for p in &programs {
                let _ = kernel_library::mark_unknown(&self.pocl_cache.join(p));
            }
            return Outcome {
                shared,
                compiled,
                programs,
                kept: None,
                from_host: None,
                shares: false,
            };
        }
        // A build makes one program folder (one device): where more appeared meanwhile (other
        // processes compiling in a cache they share), which is this one's cannot be told, and
        // none is marked; they are kept and shared as before, but no later answer of pocl's
        // cache from them is kept, and no warm worker copies them.
        if programs.len() == 1 {
            let _ = kernel_library::mark(&self.pocl_cache.join(&programs[0]), driver);
        }
        let kept = self.store.as_ref().map(|store| {
            let replace = self.refused || matches!(self.shared, Shared::FromStore { .. });
            let request = self.request.clone();
            // The build's own time (it began at `since`, after any wait).
            let took = self.since.elapsed().unwrap_or_default();
            let kept = kept::keep_build(
                store,
                &self.key,
                (request, took),
                &self.pocl_cache,
                &programs,
                replace,
            );
            if let (Ok(()), Some(l)) = (&kept, &self.labels) {
                if let Ok(d) = crate::store::files::open_store(&store.dir, false) {
                    crate::store::labels::leave(&d, l);
                }
            }
            kept
        });
        Outcome {
            shared,
            compiled,
            programs,
            kept,
            from_host: None,
            shares: true,
        }
    }
}

/// The program folders of pocl's cache `pocl_cache` (relative to it) whose `last_accessed`
/// pocl touched since `started`: those a build answered from pocl's own cache used.
fn touched_programs(pocl_cache: &Path, started: SystemTime) -> Vec<PathBuf> {
    let since = started - Duration::from_secs(1);
    let mut found = Vec::new();
    let Ok(levels) = std::fs::read_dir(pocl_cache) else {
        return found;
    };
    for level in levels.flatten() {
        let name = level.file_name();
        if name.as_bytes().starts_with(b".") || !level.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for p in std::fs::read_dir(level.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let touched = std::fs::symlink_metadata(p.path().join("last_accessed"))
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since);
            if touched && p.path().join("program.bc").is_file() {
                found.push(Path::new(&name).join(p.file_name()));
            }
        }
    }
    found
}

/// The program folders of pocl's cache `pocl_cache` (relative to it) that a build which
/// began at `started` wrote.
fn fresh_programs(pocl_cache: &Path, started: SystemTime) -> Vec<PathBuf> {
    let since = started - Duration::from_secs(1);
    let fresh = |p: &Path| {
        std::fs::symlink_metadata(p)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t >= since)
    };
    let mut found = Vec::new();
    let Ok(levels) = std::fs::read_dir(pocl_cache) else {
        return found;
    };
    for level in levels.flatten() {
        let is_dir = level.file_type().is_ok_and(|t| t.is_dir());
        let name = level.file_name();
        if !is_dir || name.as_bytes().starts_with(b".") || !fresh(&level.path()) {
            continue;
        }
        let Ok(programs) = std::fs::read_dir(level.path()) else {
            continue;
        };
        for p in programs.flatten() {
            let bc = p.path().join("program.bc");
            if bc.is_file() && fresh(&bc) {
                found.push(Path::new(&name).join(p.file_name()));
            }
        }
    }
    found
}

impl Turn {
    /// The build's note, for its record (made when the turn is settled on: once the
    /// driver builds, nothing of the turn changes).
    pub fn note(&mut self) -> BuildNote {
        self.note
            .get_or_insert_with(|| {
                BuildNote(Arc::new(Settle {
                    shared: self.shared,
                    pocl_cache: self.pocl_cache.clone(),
                    since: self.started,
                    taken: self.taken.clone(),
                    copied: self.copied,
                    key: self.key.clone(),
                    store: self.store.clone(),
                    request: std::mem::take(&mut self.request),
                    labels: self.labels.take(),
                    from_host: self.from_host.clone(),
                    refused: self.refused.get(),
                    outcome: OnceLock::new(),
                }))
            })
            .clone()
    }

    fn published(&self) -> Option<PathBuf> {
        let folder = self.folder.as_ref()?;
        Some(folder.join(format!("{:016x}", self.key.key)))
    }

    /// Takes the store's kept compile of this build, if there is one, into this rank's
    /// pocl kernel cache (the build goes on as a cache hit).
    fn kept(&self) -> Option<kept::Taken> {
        let store = self.store.as_ref()?;
        match kept::take(store, &self.key, &self.pocl_cache) {
            kept::Take::Taken(t) => Some(t),
            kept::Take::Absent => None,
            kept::Take::Refused(why) => {
                self.refused.set(true);
                log::debug!("kept compile {:016x} not taken: {why}", self.key.key);
                None
            }
        }
    }

    /// This build uses the kept compile `t`, taken after waiting `waited` seconds.
    fn use_kept(&mut self, t: kept::Taken, waited: f64) {
        self.shared = Shared::FromStore { waited };
        self.taken = t.programs;
        self.copied = t.copied;
        self.kept_specs = t.specs;
        self.from_host = Some(t.host);
        drop(self.lock.take());
        self.started = SystemTime::now();
        self.clock = Instant::now();
    }

    /// The turn, with when the build itself begins (after any wait).
    fn begun(mut self) -> Turn {
        self.started = SystemTime::now();
        self.clock = Instant::now();
        self
    }

    /// Copies a peer's published compile into this rank's pocl kernel cache: each program
    /// folder it holds that this cache lacks (`taken` gets the folders, relative to the
    /// cache, and `copied` how many were copied). False when nothing is published, or only
    /// an old mark that a peer had nothing to publish (see [`fresh_marker`]).
    fn take_published(&self, taken: &mut Vec<PathBuf>, copied: &mut usize) -> bool {
        let Some(from) = self.published() else {
            return false;
        };
        let Ok(levels) = std::fs::read_dir(&from) else {
            return false;
        };
        taken.clear();
        *copied = 0;
        for level in levels.flatten() {
            let Ok(programs) = std::fs::read_dir(level.path()) else {
                continue;
            };
            for p in programs.flatten() {
                let rel = Path::new(&level.file_name()).join(p.file_name());
                let to = self.pocl_cache.join(&rel);
                if !to.join("program.bc").exists() {
                    copy_into_cache(&p.path(), &to, self.key.key);
                    *copied += 1;
                }
                taken.push(rel);
            }
        }
        !taken.is_empty() || fresh_marker(&from)
    }

    /// After the driver's build returned `ret`: the build is settled (a compile this rank
    /// made is kept in the store), published to its peers when this rank held the node's
    /// lock, and the lock let go; a compile this rank made counts towards its expected
    /// compile times.
    pub fn after(mut self, ret: cl_int) {
        let note = self.note();
        let outcome = note.settle(ret);
        if outcome.compiled && ret == CL_SUCCESS {
            BUILDS.add(self.clock.elapsed(), self.bytes, self.waits);
        }
        if ret != CL_SUCCESS {
            return;
        }
        // Programs that may hold another kernel library than the key names are neither
        // published nor kept, nor are the kernels their first launches compile.
        let shares = outcome.shares;
        if self.lock.is_some() {
            self.publish(if shares { &outcome.programs } else { &[] });
        }
        drop(self.lock.take());
        if !outcome.programs.is_empty() {
            remember(
                self.program,
                SharedProgram {
                    key: self.key.clone(),
                    bytes: self.bytes,
                    folder: self.folder.clone().filter(|_| shares),
                    store: self.store.clone().filter(|_| shares),
                    waits: self.waits,
                    pocl_cache: self.pocl_cache.clone(),
                    programs: outcome.programs.clone(),
                    kept_specs: std::mem::take(&mut self.kept_specs),
                },
            );
        }
    }

    /// Publishes `programs` (the program folders of pocl's cache this build made; none, for
    /// a build pocl's cache answered: then a mark that there is nothing to take) to the
    /// node's peers.
    fn publish(&self, programs: &[PathBuf]) {
        let (Some(folder), Some(to)) = (&self.folder, self.published()) else {
            return;
        };
        let tmp = folder.join(format!(".tmp-{:016x}-{}", self.key.key, std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        if files::make_dir(&tmp).is_err() {
            return;
        }
        // Only what no one else can have made or moved in this rank's pocl cache.
        let whole = programs.iter().all(|rel| {
            files::below_not_others(&self.pocl_cache, rel).is_none()
                && make_dirs_below(&tmp, rel)
                && files::copy_tree(&self.pocl_cache.join(rel), &tmp.join(rel))
        });
        if whole {
            publish_whole(&tmp, &to);
        } else {
            // Nothing published: the ranks waiting take the lock in turn and compile.
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
}
