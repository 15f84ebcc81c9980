//! The build's half of sharing (see the parent module): the first rank to build a program
//! takes the lock named by the build's key, compiles, and publishes what pocl's kernel
//! cache then holds of it (the program's folder: its bitcode and log); a rank that comes
//! second waits for the publication, copies it into its own pocl kernel cache and builds,
//! which pocl answers as a cache hit, never through its generic compile: nothing is asked
//! of the driver but the build.

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
use crate::store::files;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

/// A build's turn: what it does before the driver builds, and what it owes after.
pub struct Turn {
    pub shared: Shared,
    /// Held while this rank compiles (published, then dropped, after the build).
    lock: Option<Held>,
    /// clshim's id of the program.
    program: u64,
    folder: PathBuf,
    key: u64,
    pocl_cache: PathBuf,
    started: SystemTime,
    clock: Instant,
    bytes: usize,
    /// The program's folders in pocl's cache (relative to it) that a peer published, and
    /// how many of them this build copied (the others it had).
    taken: Vec<PathBuf>,
    copied: usize,
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
    let bytes = code_bytes(&source);
    let recipe = Recipe::built(Text::Source(source), options.to_vec());
    let encoded = recipe.encode();
    // SAFETY: a live device, whose facts these are.
    let key = unsafe { crate::store::key_for(&facts, device, &recipe, &encoded) }.ok()?;
    let folder = node_folder()?.to_path_buf();
    // Made again if a cleaner took it; its owner and mode checked again.
    files::open_dir(&folder, true).ok()?;
    let lock = folder.join(format!("{:016x}.lock", key.key));
    let mut turn = Turn {
        shared: Shared::Compiled,
        lock: None,
        program: rt.programs.lookup(program).id,
        folder,
        key: key.key,
        pocl_cache: crate::store::pocl_cache(),
        started: SystemTime::now(),
        clock: Instant::now(),
        bytes,
        taken: Vec::new(),
        copied: 0,
    };
    let taken = std::cell::RefCell::new((Vec::new(), 0));
    let (waited, seconds) = wait_for(&lock, build_patience(bytes), || {
        let mut t = taken.borrow_mut();
        let (folders, copied) = &mut *t;
        turn.take_published(folders, copied)
    })?;
    turn.shared = shared_of(&waited, seconds);
    (turn.taken, turn.copied) = taken.into_inner();
    if let Waited::Holds(lock) = waited {
        turn.lock = Some(lock);
    }
    turn.started = SystemTime::now();
    turn.clock = Instant::now();
    Some(turn)
}

/// What a build's record says of its sharing, settled when the record is written: a
/// build that took a peer's compile but whose pocl compiled all the same (its compile did
/// not match the peer's: another header, say) is said to have compiled after waiting; one
/// that copied nothing and compiled nothing found the program in its own cache.
#[derive(Clone, Debug)]
pub struct BuildNote {
    shared: Shared,
    pocl_cache: PathBuf,
    since: SystemTime,
    taken: Vec<PathBuf>,
    copied: usize,
}

impl BuildNote {
    pub fn shared(&self) -> Shared {
        match self.shared {
            Shared::FromPeer { waited }
                if made_since(&self.pocl_cache, self.since, 2, &self.taken) =>
            {
                Shared::CompiledAfterWaiting { waited }
            }
            Shared::FromPeer { waited } if self.copied == 0 => Shared::OwnCache { waited },
            s => s,
        }
    }
}

impl Turn {
    /// The record's part, for the build's record.
    pub fn note(&self) -> BuildNote {
        BuildNote {
            shared: self.shared,
            pocl_cache: self.pocl_cache.clone(),
            since: self.started,
            taken: self.taken.clone(),
            copied: self.copied,
        }
    }

    fn published(&self) -> PathBuf {
        self.folder.join(format!("{:016x}", self.key))
    }

    /// Copies a peer's published compile into this rank's pocl kernel cache: each program
    /// folder it holds that this cache lacks (`taken` gets the folders, relative to the
    /// cache, and `copied` how many were copied). False when nothing is published, or only
    /// an old mark that a peer had nothing to publish (see [`fresh_marker`]).
    fn take_published(&self, taken: &mut Vec<PathBuf>, copied: &mut usize) -> bool {
        let from = self.published();
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
                    copy_into_cache(&p.path(), &to, self.key);
                    *copied += 1;
                }
                taken.push(rel);
            }
        }
        !taken.is_empty() || fresh_marker(&from)
    }

    /// After the driver's build returned `ret`: a compile this rank made holding the lock
    /// is published (the program folders pocl's cache gained during the build), and the
    /// lock let go; a compile this rank made counts towards its expected compile times.
    pub fn after(mut self, ret: cl_int) {
        // A build that took a peer's compile, but whose pocl compiled all the same, made
        // its own program folder: that is the one its kernels' launches use.
        let compiled = matches!(
            self.note().shared(),
            Shared::Compiled | Shared::CompiledAfterWaiting { .. }
        );
        if compiled && ret == CL_SUCCESS {
            BUILDS.add(self.clock.elapsed(), self.bytes);
        }
        if ret != CL_SUCCESS {
            return;
        }
        let programs = if self.lock.is_some() {
            self.publish()
        } else if compiled {
            // Its own, not the peer's it copied and pocl did not use.
            let taken = std::mem::take(&mut self.taken);
            self.fresh_programs()
                .into_iter()
                .filter(|p| !taken.contains(p))
                .collect()
        } else {
            std::mem::take(&mut self.taken)
        };
        drop(self.lock.take());
        if !programs.is_empty() {
            remember(
                self.program,
                SharedProgram {
                    key: self.key,
                    bytes: self.bytes,
                    folder: self.folder.clone(),
                    pocl_cache: self.pocl_cache.clone(),
                    programs,
                },
            );
        }
    }

    /// The program folders of pocl's cache (relative to it) that the build wrote.
    fn fresh_programs(&self) -> Vec<PathBuf> {
        let since = self.started - Duration::from_secs(1);
        let fresh = |p: &Path| {
            std::fs::symlink_metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since)
        };
        let mut found = Vec::new();
        let Ok(levels) = std::fs::read_dir(&self.pocl_cache) else {
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

    /// Publishes the program folders of pocl's cache made since the build began (none, for
    /// a build pocl's cache answered: then a mark that there is nothing to take), and
    /// returns them (relative to the cache).
    fn publish(&self) -> Vec<PathBuf> {
        let programs = self.fresh_programs();
        let tmp = self
            .folder
            .join(format!(".tmp-{:016x}-{}", self.key, std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        if files::make_dir(&tmp).is_err() {
            return programs;
        }
        let whole = programs.iter().all(|rel| {
            make_dirs_below(&tmp, rel)
                && files::copy_tree(&self.pocl_cache.join(rel), &tmp.join(rel))
        });
        if whole {
            publish_whole(&tmp, &self.published());
        } else {
            // Nothing published: the ranks waiting take the lock in turn and compile.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        programs
    }
}
