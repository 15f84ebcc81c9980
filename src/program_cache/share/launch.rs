//! The first launch's half of sharing (see the parent module): pocl compiles the kernel
//! that runs (specialised for the work-group configuration, then linked) at a kernel's
//! first launch, into a folder of the kernel below its program's folder in pocl's cache.
//! For a program whose build was shared, the first rank to launch one of its kernels with
//! a configuration takes the lock of (build key, kernel, configuration), launches, and,
//! once the command has completed, publishes the kernel's folder; a rank that comes
//! second waits for that, copies each specialisation it lacks into its own program's
//! folder, and launches, which pocl answers from its cache. Which specialisation a launch
//! needs is pocl's to say, by the folder's name: one copied that this launch does not
//! use is never read, and one it needs but lacks is compiled as without clshim.

use super::{
    copy_into_cache, made_since, make_dirs_below, node_folder, open_lock, shared_of,
    shared_program, wait_for, Shared, SharedProgram, Waited, LAUNCHES,
};
use crate::hash::Fnv1a;
use crate::store::files;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// A first launch's turn: what it did before the launch, and what it owes once the
/// command has completed.
pub struct LaunchTurn {
    pub shared: Shared,
    /// Held while this rank's launch compiles (published, then dropped, at completion).
    lock: Option<std::fs::File>,
    program: Arc<SharedProgram>,
    kernel: String,
    /// The key of (build key, kernel, configuration).
    key: u64,
    clock: Instant,
    /// When the launch was forwarded, and the specialisations taken from a peer.
    since: SystemTime,
    taken: Vec<PathBuf>,
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
    h.update(&program.key.to_le_bytes())
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
    files::open_dir(&node_folder(), true).ok()?;
    let lock = open_lock(
        &program
            .folder
            .join(format!("{:016x}.{key:016x}.lock", program.key)),
    )?;
    let mut turn = LaunchTurn {
        shared: Shared::Compiled,
        lock: None,
        program,
        kernel: kernel.to_string(),
        key,
        clock: Instant::now(),
        since: SystemTime::now(),
        taken: Vec::new(),
    };
    let taken = std::cell::RefCell::new(Vec::new());
    let (waited, seconds) = wait_for(lock, LAUNCHES.patience(turn.program.bytes), || {
        turn.take_published(&mut taken.borrow_mut())
    });
    turn.shared = shared_of(&waited, seconds);
    turn.taken = taken.into_inner();
    if let Waited::Holds(lock) = waited {
        turn.lock = Some(lock);
    }
    turn.clock = Instant::now();
    turn.since = SystemTime::now();
    Some(turn)
}

impl LaunchTurn {
    fn published(&self) -> PathBuf {
        self.program
            .folder
            .join(format!("{:016x}.{:016x}", self.program.key, self.key))
    }

    /// Copies a peer's published kernel folder into this rank's program folders: each
    /// specialisation they lack (`taken` gets the names of those published). False when
    /// nothing is published.
    fn take_published(&self, taken: &mut Vec<PathBuf>) -> bool {
        let from = self.published();
        if !from.is_dir() {
            return false;
        }
        taken.clear();
        for rel in &self.program.programs {
            let mine = self.program.pocl_cache.join(rel);
            if !mine.is_dir() {
                continue;
            }
            let Ok(specs) = std::fs::read_dir(from.join(rel).join(&self.kernel)) else {
                continue;
            };
            for spec in specs.flatten() {
                if !spec.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let to = mine.join(&self.kernel).join(spec.file_name());
                if !to.exists() {
                    copy_into_cache(&spec.path(), &to, self.key);
                }
                taken.push(PathBuf::from(spec.file_name()));
            }
        }
        true
    }

    /// Once the launch's command completed (`ok`: it ran): a launch this rank compiled
    /// holding the lock publishes the kernel's folder of each of the program's folders,
    /// then lets the lock go. Returns what the launch did, as its record says it: one that
    /// took a peer's kernel but for which pocl made a specialisation all the same (the
    /// peer's was not the one this launch needed) compiled after waiting.
    pub fn completed(mut self, ok: bool) -> Shared {
        if let Shared::FromPeer { waited } = self.shared {
            let compiled_anyway = self.program.programs.iter().any(|rel| {
                let dir = self.program.pocl_cache.join(rel).join(&self.kernel);
                made_since(&dir, self.since, 1, &self.taken)
            });
            if compiled_anyway {
                self.shared = Shared::CompiledAfterWaiting { waited };
            }
        }
        let compiled = !matches!(self.shared, Shared::FromPeer { .. });
        if compiled && ok {
            LAUNCHES.add(self.clock.elapsed(), self.program.bytes);
        }
        if self.lock.is_some() && ok {
            self.publish();
        }
        drop(self.lock.take());
        self.shared
    }

    fn publish(&self) {
        let tmp = self.program.folder.join(format!(
            ".tmp-{:016x}.{:016x}-{}",
            self.program.key,
            self.key,
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        if files::make_dir(&tmp).is_err() {
            return;
        }
        let mut any = false;
        for rel in &self.program.programs {
            let from = self.program.pocl_cache.join(rel).join(&self.kernel);
            if !from.is_dir() {
                continue;
            }
            let rel = rel.join(&self.kernel);
            if make_dirs_below(&tmp, &rel) {
                files::copy_tree(&from, &tmp.join(rel));
                any = true;
            }
        }
        if !any || std::fs::rename(&tmp, self.published()).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
        }
    }
}
