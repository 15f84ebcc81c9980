//! One compile per program per node: ranks of a job that build the same program share the
//! compile of it, while the job runs (`CLSHIM_SHARE_BUILDS`, on with the program cache).
//! The first rank to build a program takes a lock named by the build's key (source,
//! options, environment, device, driver: `store::build_key`) in a folder of the user's in
//! the node's temporary folder, compiles, and publishes what pocl's kernel cache then holds
//! of it (the program's folder there: its bitcode and log) under that key, written whole
//! and renamed into place. A rank that comes second waits for the publication, copies it
//! into its own pocl kernel cache and builds: pocl preprocesses its source and finds the
//! program in its cache by the hash of the preprocessed text, so the compile is taken only
//! when this rank's own compile would read exactly what the first one's read (otherwise
//! pocl compiles, as without clshim), and never through pocl's generic compile: nothing is
//! asked of the driver but the build.
//!
//! A rank never waits for long: a peer that dies mid-compile drops its lock with it (the
//! waiting rank then compiles); a peer that hangs, or a node so busy that the peer is
//! slow, is waited for at most twice the time this rank expects the compile to take (its
//! own compiles' seconds per source byte, else a rate measured here for pocl), and then
//! the rank compiles on its own. Each build's record says which it was.

use crate::cl::*;
use crate::dispatch::Route;
use crate::query;
use crate::recipe::{Recipe, Text};
use crate::runtime::Runtime;
use crate::store::files;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// What a build did with the node's compiles.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shared {
    /// It compiled, holding the node's lock on its key, and published its compile.
    Compiled,
    /// It took a peer's compile, after waiting this long for it.
    FromPeer { waited: f64 },
    /// It waited this long for a peer, then compiled on its own.
    CompiledAfterWaiting { waited: f64 },
}

impl Shared {
    pub fn name(self) -> &'static str {
        match self {
            Shared::Compiled => "compiled",
            Shared::FromPeer { .. } => "from_peer",
            Shared::CompiledAfterWaiting { .. } => "compiled_after_waiting",
        }
    }

    pub fn waited(self) -> Option<f64> {
        match self {
            Shared::Compiled => None,
            Shared::FromPeer { waited } | Shared::CompiledAfterWaiting { waited } => Some(waited),
        }
    }
}

/// A build's turn: what it does before the driver builds, and what it owes after.
pub struct Turn {
    pub shared: Shared,
    /// Held while this rank compiles (published, then dropped, after the build).
    lock: Option<std::fs::File>,
    folder: PathBuf,
    key: u64,
    pocl_cache: PathBuf,
    started: SystemTime,
    clock: Instant,
    bytes: usize,
}

/// The seconds and source bytes of the compiles this process made itself.
static OWN_SECONDS_NS: AtomicU64 = AtomicU64::new(0);
static OWN_BYTES: AtomicU64 = AtomicU64::new(0);

/// pocl 3.1 on one core of this project's machine: a program of 100 statements (about
/// 4 KB of source) builds in about 0.15 s, of 1,000 statements in 0.73 s. An estimate
/// when this process has compiled nothing yet: it only bounds a wait.
const SECONDS_PER_BYTE: f64 = 1.0 / 4096.0;

/// How long a rank may wait for a peer's compile of `bytes` of source: twice what it
/// expects the compile to take, and at least a second.
fn patience(bytes: usize) -> Duration {
    let ns = OWN_SECONDS_NS.load(Ordering::Relaxed);
    let own_bytes = OWN_BYTES.load(Ordering::Relaxed);
    let per_byte = if own_bytes > 0 && ns > 0 {
        ns as f64 / 1e9 / own_bytes as f64
    } else {
        SECONDS_PER_BYTE
    };
    Duration::from_secs_f64((2.0 * per_byte * bytes as f64).max(1.0))
}

/// The node's folder of shared compiles: the user's own, in the temporary folder.
fn node_folder() -> PathBuf {
    // SAFETY: no arguments.
    let uid = unsafe { libc::geteuid() };
    std::env::temp_dir().join(format!("clshim-{uid}-shared-builds"))
}

/// [`before`] for the application's arguments of `clBuildProgram`: a device list of the
/// program's one device, or none (NULL: all of them), read as the OpenCL API requires of
/// the application, and its options.
///
/// # Safety
/// The application's arguments to `clBuildProgram`, of a call that has not returned.
pub unsafe fn before_build(
    rt: &'static Runtime,
    route: Route,
    program: cl_program,
    devices: &crate::app_args::AppArray<cl_device_id>,
    options: *const std::ffi::c_char,
) -> Option<Turn> {
    if !rt.config.program_cache || !rt.config.share_builds || program.is_null() {
        return None;
    }
    if rt.programs.lookup(program).origin != crate::programs::Origin::Source {
        return None;
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
/// application's): whose compile this build uses. None: no sharing for it (the program
/// cache or sharing is off, more than one device, not pocl, pocl's kernel cache off, the
/// node's folder is not the user's alone).
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
    if !rt.config.program_cache || !rt.config.share_builds {
        return None;
    }
    let off = std::env::var_os("POCL_KERNEL_CACHE").is_some_and(|v| {
        matches!(
            v.to_string_lossy().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    });
    if off {
        return None;
    }
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
    let bytes = source.len();
    let recipe = Recipe::built(Text::Source(source), options.to_vec());
    let encoded = recipe.encode();
    // SAFETY: a live device, whose facts these are.
    let key = unsafe { crate::store::key_for(&facts, device, &recipe, &encoded) }.ok()?;
    let folder = node_folder();
    files::open_dir(&folder, true).ok()?;
    let pocl_cache = crate::store::pocl_cache();
    let clock = Instant::now();
    let mut turn = Turn {
        shared: Shared::Compiled,
        lock: None,
        folder,
        key: key.key,
        pocl_cache,
        started: SystemTime::now(),
        clock,
        bytes,
    };
    let lock = open_lock(&turn.folder.join(format!("{:016x}.lock", key.key)))?;
    let limit = patience(bytes);
    loop {
        if turn.take_published() {
            turn.shared = Shared::FromPeer {
                waited: clock.elapsed().as_secs_f64(),
            };
            return Some(turn);
        }
        // SAFETY: an open descriptor of this process.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // Published while this rank took the lock: the holder has let go.
            if turn.take_published() {
                turn.shared = Shared::FromPeer {
                    waited: clock.elapsed().as_secs_f64(),
                };
                return Some(turn);
            }
            let waited = clock.elapsed().as_secs_f64();
            turn.shared = if waited > 0.01 {
                Shared::CompiledAfterWaiting { waited }
            } else {
                Shared::Compiled
            };
            turn.lock = Some(lock);
            turn.started = SystemTime::now();
            turn.clock = Instant::now();
            return Some(turn);
        }
        if clock.elapsed() > limit {
            turn.shared = Shared::CompiledAfterWaiting {
                waited: clock.elapsed().as_secs_f64(),
            };
            turn.started = SystemTime::now();
            turn.clock = Instant::now();
            return Some(turn);
        }
        std::thread::sleep(Duration::from_millis(10));
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

impl Turn {
    fn published(&self) -> PathBuf {
        self.folder.join(format!("{:016x}", self.key))
    }

    /// Copies a peer's published compile into this rank's pocl kernel cache: each program
    /// folder it holds that this cache lacks, written under a temporary name and renamed
    /// into place, so pocl never reads one half made. False when nothing is published.
    fn take_published(&self) -> bool {
        let from = self.published();
        let Ok(levels) = std::fs::read_dir(&from) else {
            return false;
        };
        for level in levels.flatten() {
            let Ok(programs) = std::fs::read_dir(level.path()) else {
                continue;
            };
            for p in programs.flatten() {
                let to = self.pocl_cache.join(level.file_name()).join(p.file_name());
                if to.join("program.bc").exists() {
                    continue;
                }
                let tmp = self.pocl_cache.join(format!(
                    ".clshim-shared-{}-{:016x}",
                    std::process::id(),
                    self.key
                ));
                let _ = std::fs::remove_dir_all(&tmp);
                if files::make_dir(&tmp).is_err() {
                    continue;
                }
                files::copy_tree(&p.path(), &tmp);
                let _ = files::make_dir(&self.pocl_cache.join(level.file_name()));
                if std::fs::rename(&tmp, &to).is_err() {
                    let _ = std::fs::remove_dir_all(&tmp);
                }
            }
        }
        true
    }

    /// After the driver's build returned `ret`: a compile this rank made holding the lock
    /// is published (the program folders pocl's cache gained during the build), and the
    /// lock let go; a compile this rank made counts towards its expected compile times.
    pub fn after(mut self, ret: cl_int) {
        let compiled = matches!(
            self.shared,
            Shared::Compiled | Shared::CompiledAfterWaiting { .. }
        );
        if compiled && ret == CL_SUCCESS {
            OWN_SECONDS_NS.fetch_add(self.clock.elapsed().as_nanos() as u64, Ordering::Relaxed);
            OWN_BYTES.fetch_add(self.bytes as u64, Ordering::Relaxed);
        }
        if self.lock.is_some() && ret == CL_SUCCESS {
            self.publish();
        }
        drop(self.lock.take());
    }

    /// Publishes the program folders of pocl's cache made since the build began.
    fn publish(&self) {
        let since = self.started - Duration::from_secs(1);
        let fresh = |p: &Path| {
            std::fs::symlink_metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since)
        };
        let tmp = self
            .folder
            .join(format!(".tmp-{:016x}-{}", self.key, std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        if files::make_dir(&tmp).is_err() {
            return;
        }
        let mut any = false;
        let Ok(levels) = std::fs::read_dir(&self.pocl_cache) else {
            return;
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
                if !bc.is_file() || !fresh(&bc) {
                    continue;
                }
                let to = tmp.join(&name).join(p.file_name());
                if files::make_dir(&tmp.join(&name)).is_ok() && files::make_dir(&to).is_ok() {
                    files::copy_tree(&p.path(), &to);
                    any = true;
                }
            }
        }
        if !any || std::fs::rename(&tmp, self.published()).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
}
