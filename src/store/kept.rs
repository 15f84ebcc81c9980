//! The store's kept compiles (`clshim_format::kept`): what pocl's kernel cache gained when a
//! rank of a job compiled a program, or launched one of its kernels for the first time,
//! written into the store by that rank as soon as it has it, and unpacked by later builds
//! of the same key, on any node, into their own pocl kernel cache, where pocl finds it as
//! its own cache hit. This module owns those two moves and the checks on both sides: what
//! enters the store comes only from folders and files of pocl's cache that are the user's
//! alone (a cache that others may write could hold their bitcode); what leaves it is a
//! whole file of this very build's key text, with its checksum holding, and is unpacked
//! below pocl's cache folder only, each program or kernel folder whole under a temporary
//! name and renamed into place, never over one pocl has already.
//!
//! Nothing here decides that a kept compile is right for a build beyond its key (source,
//! options, the environment that changes a compile, device, driver build): pocl does, as it
//! does for its own cache, by looking for a program only under the hash of the text it
//! preprocesses from this process's own source and headers, and for a kernel only under
//! the name of the specialisation this launch needs. A build whose headers differ from the
//! keeper's therefore compiles as without clshim, and the copy is never read.

use super::build_key::BuildKey;
use super::files::{self, Fd};
use clshim_format::kept::{self as format, Kept, KeptFile, KeptKind};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The store kept compiles go to, and the size it is kept under.
#[derive(Clone, Debug)]
pub struct KeptStore {
    pub dir: PathBuf,
    pub max: u64,
}

impl KeptStore {
    pub fn from_config(c: &crate::config::Config) -> Option<KeptStore> {
        c.native_store.clone().map(|dir| KeptStore {
            dir,
            max: c.native_store_max,
        })
    }
}

/// This node's name, as records name it.
fn hostname() -> Vec<u8> {
    let mut h = std::fs::read("/proc/sys/kernel/hostname").unwrap_or_default();
    while h.last().is_some_and(u8::is_ascii_whitespace) {
        h.pop();
    }
    h
}

/// What taking a kept build put in pocl's cache, relative to it.
#[derive(Debug, Default)]
pub struct Taken {
    /// The program folders (`XY/<hash>`) the kept build holds, copied or already there.
    pub programs: Vec<PathBuf>,
    /// The kernels' specialisation folders (`XY/<hash>/<kernel>/<spec>`) written from the
    /// store (not those pocl's cache had).
    pub specs: Vec<PathBuf>,
    /// How many program folders were copied (the others pocl's cache had: a build that
    /// copied none is its own cache's hit, whatever specialisations were written into them).
    pub copied: usize,
    /// The node whose rank kept the build.
    pub host: String,
}

/// What the store holds of a build.
pub enum Take {
    Taken(Taken),
    Absent,
    /// A kept compile that is not taken (damaged, another build's, not the user's alone),
    /// with why.
    Refused(String),
}

fn compiles_dir(store: &Path, create: bool) -> std::io::Result<Fd> {
    let dir = files::open_store(store, create)?;
    files::open_sub(&dir, format::COMPILES, create)
}

/// The folder of `key`'s kept compiles, if it exists (or, with `create`, made).
fn key_dir(store: &Path, key: u64, create: bool) -> std::io::Result<Fd> {
    let c = compiles_dir(store, create)?;
    files::open_sub(&c, &format::key_folder(key), create)
}

/// Whether the store keeps a build of `key` (one look, nothing read).
pub fn has_build(store: &KeptStore, key: u64) -> bool {
    key_dir(&store.dir, key, false).is_ok_and(|d| files::exists(&d, format::BUILD_FILE))
}

/// Reads and checks the kept compile `name` in `dir` for `key`.
/// When `touch`, a kept compile that holds has its time set to now (least recently used
/// goes first): one that does not hold is never made young by being read.
fn read_kept(dir: &Fd, name: &str, key: &BuildKey, touch: bool) -> Result<Option<Kept>, String> {
    let Some(bytes) = files::read_file(dir, name, format::MAX_KEPT, false)? else {
        return Ok(None);
    };
    let kept = Kept::decode(&bytes)?;
    if kept.key != key.key || kept.fingerprint != key.fingerprint || kept.driver != key.driver {
        return Err("kept for another build (its key, device or driver)".into());
    }
    if kept.key_text != key.text {
        return Err("kept for another build (its key text differs)".into());
    }
    if touch {
        files::touch(dir, name);
    }
    Ok(Some(kept))
}

/// Takes the kept build of `key` and every first launch kept with it into pocl's cache
/// folder `pocl_cache`: each program or specialisation folder that pocl's cache lacks is
/// written whole and renamed into place. A first launch's file that does not hold is left
/// out (its kernel compiles at its launch, as without clshim); the build's must hold.
pub fn take(store: &KeptStore, key: &BuildKey, pocl_cache: &Path) -> Take {
    let store = store.dir.as_path();
    let dir = match key_dir(store, key.key, false) {
        Ok(d) => d,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Take::Absent,
        Err(e) => return Take::Refused(format!("{}: {e}", store.display())),
    };
    let build = match read_kept(&dir, format::BUILD_FILE, key, true) {
        Ok(Some(k)) if k.kind == KeptKind::Build => k,
        Ok(Some(_)) => return Take::Refused("a build's file holds a launch".into()),
        Ok(None) => return Take::Absent,
        Err(why) => return Take::Refused(why),
    };
    let host = String::from_utf8_lossy(&build.host).into_owned();
    let mut all: Vec<KeptFile> = build.files;
    let here = store
        .join(format::COMPILES)
        .join(format::key_folder(key.key));
    for (name, _, _, _) in files::list(&here, format::SUFFIX) {
        if name == format::BUILD_FILE {
            continue;
        }
        match read_kept(&dir, &name, key, false) {
            Ok(Some(k)) if k.kind == KeptKind::Launch => all.extend(k.files),
            Ok(_) => {}
            Err(why) => log::debug!("kept compile {}: {why}", here.join(&name).display()),
        }
    }
    let mut taken = Taken {
        host,
        ..Taken::default()
    };
    unpack(pocl_cache, &all, &mut taken);
    if taken.programs.is_empty() {
        return Take::Refused("a kept build without a program folder".into());
    }
    Take::Taken(taken)
}

/// Takes the kept first launch `launch` of `key` (another node's, kept since this rank took
/// the build) into pocl's cache: the specialisation folders it lacks. Some: taken (with the
/// keeper's host), None: not kept (or not whole).
pub fn take_launch(
    store: &KeptStore,
    key: &BuildKey,
    launch: u64,
    pocl_cache: &Path,
) -> Option<String> {
    let dir = key_dir(&store.dir, key.key, false).ok()?;
    let k = read_kept(&dir, &format::launch_file(launch), key, false).ok()??;
    if k.kind != KeptKind::Launch {
        return None;
    }
    let mut taken = Taken::default();
    unpack(pocl_cache, &k.files, &mut taken);
    (!taken.specs.is_empty()).then(|| String::from_utf8_lossy(&k.host).into_owned())
}

/// A lease on compiling one thing of a key (its build, or a first launch), held in the
/// store while a rank of some node compiles it, so that ranks of other nodes sharing the
/// store wait for the compile under way instead of making it again. Created exclusively
/// (`O_EXCL`, which NFS v3 and later, Lustre, GPFS and sftp give atomically); removed by
/// its holder once what it compiled is kept (or it failed), and when dropped. A lease whose
/// holder is gone from this very host, or older than `LEASE_STALE_SECONDS` on any host
/// (this one's included: a pid is reused), is taken over; a rank never waits on another node's lease longer than it expects its own
/// compile to take.
pub struct Lease {
    dir: PathBuf,
    name: String,
    text: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Only while it is still this holder's (a lease taken over is the new holder's).
        let path = self.dir.join(&self.name);
        if read_lease(&self.dir, &self.name).is_some_and(|t| t == self.text.as_bytes()) {
            let _ = std::fs::remove_file(path);
            // The key's folder, if the lease was all it held (a compile that was not kept).
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

/// What [`lease`] found.
pub enum Leased {
    /// This process holds it: it compiles.
    Mine(Lease),
    /// A rank of `host` (as `store::host_id` names it) compiles it.
    Theirs(String),
}

/// Takes the lease on `what` (`build`, or a launch key as 16 hex digits) of `key`. None when
/// no lease can be had (a store that cannot be written): the rank compiles.
pub fn lease(store: &KeptStore, key: u64, what: &str) -> Option<Leased> {
    use std::io::Write;
    key_dir(&store.dir, key, true).ok()?;
    let dir = store
        .dir
        .join(format::COMPILES)
        .join(format::key_folder(key));
    let name = format::lease_file(what);
    let me = clshim_format::store::host_id();
    let text = format::lease_text(&me, std::process::id());
    for _ in 0..2 {
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(files::FILE_MODE)
            .open(dir.join(&name));
        match made {
            Ok(mut f) => {
                if f.write_all(text.as_bytes()).is_err() {
                    let _ = std::fs::remove_file(dir.join(&name));
                    return None;
                }
                return Some(Leased::Mine(Lease { dir, name, text }));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            // sshfs answers an exclusive create of a name another host has just made, which
            // its own cache has not seen, with EPERM (the SFTP server's generic failure):
            // the lease is there all the same (seen once in the simulated cluster's tests,
            // where that node's ranks then compiled without waiting).
            Err(_) if dir.join(&name).symlink_metadata().is_ok() => {}
            Err(e) => {
                no_leases(store, &e);
                return None;
            }
        }
        let path = dir.join(&name);
        let holder = read_lease(&dir, &name).and_then(|t| format::parse_lease(&t));
        // On the store's clock (the file server's), as every host sharing it sees it.
        let age = || {
            path.symlink_metadata().map_or(0, |m| {
                use std::os::unix::fs::MetadataExt;
                let now = files::open_dir(&dir, false)
                    .ok()
                    .and_then(|d| files::store_now(&d))
                    .unwrap_or_else(|| {
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs() as i64)
                    });
                now - m.mtime()
            })
        };
        // A holder of this host is gone when its process is; one whose pid a process
        // still has an hour on (the pid reused after its holder was killed, or a holder
        // that hangs) is no more its holder than another host's of that age.
        let stale = match &holder {
            Some((host, pid)) if *host == me => {
                clshim_format::store::process_gone(*pid as i32)
                    || age() > format::LEASE_STALE_SECONDS
            }
            Some(_) => age() > format::LEASE_STALE_SECONDS,
            // Being written (a holder between its create and its write), or not a lease.
            None => age() > 10,
        };
        if !stale {
            return Some(Leased::Theirs(holder.map_or_else(String::new, |h| h.0)));
        }
        let _ = std::fs::remove_file(&path);
    }
    None
}

/// The text of the lease `name` in the key's folder `dir`: a regular file of the user's
/// alone, read without following a link or blocking on a FIFO, and short (None otherwise).
fn read_lease(dir: &Path, name: &str) -> Option<Vec<u8>> {
    let d = files::open_dir(dir, false).ok()?;
    files::read_file(&d, name, 4096, false).ok()?
}

/// Says once a process that the store holds no lease (a filesystem without exclusive
/// creation, a store that cannot be written): its ranks then compile what another node may
/// be compiling, as without sharing, never waiting on a lease they could not see.
fn no_leases(store: &KeptStore, e: &std::io::Error) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        log::warn!(
            "store {}: no lease can be made there ({e}): this node's ranks compile without \
             waiting for other nodes' compiles",
            store.dir.display()
        );
    }
}

/// The first `n` components of a kept path, if it has more than `n`.
fn prefix(path: &[u8], n: usize) -> Option<PathBuf> {
    let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    (parts.len() > n).then(|| {
        parts[..n]
            .iter()
            .map(|p| std::ffi::OsStr::from_bytes(p))
            .collect()
    })
}

/// Writes the folders of `kept` that pocl's cache lacks: a program folder (its first two
/// names) whole with every specialisation kept for it; in a program folder pocl has, each
/// specialisation folder (four names) it lacks.
fn unpack(pocl_cache: &Path, kept: &[KeptFile], taken: &mut Taken) {
    use std::collections::BTreeMap;
    let mut programs: BTreeMap<PathBuf, Vec<&KeptFile>> = BTreeMap::new();
    for f in kept {
        if let Some(p) = prefix(&f.path, 2) {
            programs.entry(p).or_default().push(f);
        }
    }
    for (program, files) in programs {
        let mut specs: BTreeMap<PathBuf, Vec<&KeptFile>> = BTreeMap::new();
        for f in &files {
            if let Some(s) = prefix(&f.path, 4) {
                specs.entry(s).or_default().push(f);
            }
        }
        let at = pocl_cache.join(&program);
        // A rank sharing this pocl cache may put the same folder there first (its rename
        // wins, this one's fails): the program is there all the same, as below.
        if !at.join("program.bc").exists() && write_folder(&at, 2, &files) {
            taken.copied += 1;
            taken.specs.extend(specs.into_keys());
        } else if !at.join("program.bc").exists() {
            continue;
        } else {
            // Only the specialisations written now are the store's: pocl made the others.
            for (spec, files) in specs {
                let to = pocl_cache.join(&spec);
                if !to.exists() && write_folder(&to, 4, &files) {
                    taken.specs.push(spec);
                }
            }
        }
        taken.programs.push(program);
    }
}

/// Makes the folder `to` (which must not exist) holding `files`, whose paths begin with
/// `depth` names that stand for `to`: written under a temporary name beside it and renamed
/// into place, so pocl never reads half of it. False when it is not there whole.
fn write_folder(to: &Path, depth: usize, files: &[&KeptFile]) -> bool {
    let Some(parent) = to.parent() else {
        return false;
    };
    let mut at = PathBuf::new();
    for c in parent.components() {
        at.push(c);
        if files::make_dir(&at).is_err() {
            return false;
        }
    }
    let tmp = parent.join(files::temporary_name("clshim-kept"));
    let whole = files::make_dir(&tmp).is_ok()
        && files.iter().all(|f| {
            let rel: Vec<&[u8]> = f.path.split(|&b| b == b'/').skip(depth).collect();
            let Some((name, folders)) = rel.split_last() else {
                return false;
            };
            let mut dir = tmp.clone();
            for d in folders {
                dir.push(std::ffi::OsStr::from_bytes(d));
                if files::make_dir(&dir).is_err() {
                    return false;
                }
            }
            let mode = if f.executable {
                0o700
            } else {
                files::FILE_MODE
            };
            files::open_dir(&dir, false).is_ok_and(|d| {
                files::write_new(&d, std::ffi::OsStr::from_bytes(name), &f.data, mode).is_ok()
            })
        });
    if whole && std::fs::rename(&tmp, to).is_ok() {
        return true;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    false
}

/// Reads the folder `rel` of pocl's cache `base` as kept files (paths relative to
/// `base`): regular files and folders only, each the user's alone.
fn read_tree(base: &Path, rel: &Path, out: &mut Vec<KeptFile>) -> Result<(), String> {
    let path = base.join(rel);
    let dir = files::open_dir(&path, false).map_err(|e| format!("{}: {e}", path.display()))?;
    let entries = std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    for e in entries {
        let e = e.map_err(|e| format!("{}: {e}", path.display()))?;
        let name = e.file_name();
        let Some(name_str) = name.to_str() else {
            return Err(format!(
                "{}: a name clshim does not keep",
                e.path().display()
            ));
        };
        let t = e.file_type().map_err(|e| e.to_string())?;
        let child = rel.join(&name);
        if t.is_dir() {
            read_tree(base, &child, out)?;
        } else if t.is_file() {
            use std::os::unix::fs::MetadataExt;
            let data = files::read_file(&dir, name_str, format::MAX_KEPT, false)
                .map_err(|why| format!("{}: {why}", e.path().display()))?
                .ok_or_else(|| format!("{}: gone", e.path().display()))?;
            let executable = e.metadata().is_ok_and(|m| m.mode() & 0o100 != 0);
            out.push(KeptFile {
                path: child.as_os_str().as_bytes().to_vec(),
                executable,
                data,
            });
        } else {
            return Err(format!("{}: not a file or folder", e.path().display()));
        }
    }
    Ok(())
}

/// Keeps what pocl's cache `pocl_cache` holds of `folders` (relative to it: program folders
/// for a build, specialisation folders for a launch) in `kept` (which says what it is, for
/// which key), as the file `name` of its key's folder. A build kept already is replaced
/// only when `replace` (this process compiled anew where the kept one was not what pocl
/// looked for: the files it reads changed). Err: why nothing was kept.
fn keep(
    store: &KeptStore,
    mut kept: Kept,
    name: &str,
    pocl_cache: &Path,
    folders: &[PathBuf],
    replace: bool,
) -> Result<(), String> {
    if folders.is_empty() {
        return Err("nothing to keep".into());
    }
    for f in folders {
        if !format::plain_path(f.as_os_str().as_bytes()) {
            return Err(format!("{}: not a folder of pocl's cache", f.display()));
        }
        if let Some(why) = files::below_not_others(pocl_cache, f) {
            return Err(format!("pocl's cache is not yours alone: {why}"));
        }
        read_tree(pocl_cache, f, &mut kept.files)?;
    }
    let dir =
        key_dir(&store.dir, kept.key, true).map_err(|e| format!("{}: {e}", store.dir.display()))?;
    files::write_atomic(&dir, name, &kept.encode(), replace, false)
        .map_err(|e| format!("{}: {e}", store.dir.display()))?;
    cap_hourly(store);
    Ok(())
}

/// Keeps the store under its cap (`clshim_format::cap`), at most once an hour across every
/// process that keeps compiles in it (the time of `compiles/.capped` says when it last was).
fn cap_hourly(store: &KeptStore) {
    let Ok(dir) = compiles_dir(&store.dir, false) else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let last = files::modified(&dir, clshim_format::cap::CAPPED);
    if last.is_some_and(|t| now - t < 3600) {
        return;
    }
    if last.is_none() {
        let _ = files::write_atomic(&dir, clshim_format::cap::CAPPED, b"", false, false);
    }
    files::touch(&dir, clshim_format::cap::CAPPED);
    let evicted = clshim_format::cap::enforce_cap(&store.dir, store.max);
    if evicted > 0 {
        log::debug!(
            "store {}: {evicted} least recently used out, under its cap",
            store.dir.display()
        );
    }
}

fn kept_of(key: &BuildKey, kind: KeptKind, request: Vec<u8>, compile: std::time::Duration) -> Kept {
    Kept {
        kind,
        key: key.key,
        fingerprint: key.fingerprint,
        driver: key.driver,
        compile_ns: compile.as_nanos().min(u64::MAX as u128) as u64,
        key_text: key.text.clone(),
        host: hostname(),
        request,
        files: Vec::new(),
    }
}

/// Keeps a build: the program folders `programs` of pocl's cache, with `request` (what a
/// warm step needs to make the driver's binary of it) and how long its compile took.
pub fn keep_build(
    store: &KeptStore,
    key: &BuildKey,
    (request, compile): (Vec<u8>, std::time::Duration),
    pocl_cache: &Path,
    programs: &[PathBuf],
    replace: bool,
) -> Result<(), String> {
    let kept = kept_of(key, KeptKind::Build, request, compile);
    keep(
        store,
        kept,
        format::BUILD_FILE,
        pocl_cache,
        programs,
        replace,
    )
}

/// Keeps a first launch (the launch key `launch`): the specialisation folders `specs`.
pub fn keep_launch(
    store: &KeptStore,
    key: &BuildKey,
    launch: u64,
    pocl_cache: &Path,
    specs: &[PathBuf],
    compile: std::time::Duration,
) -> Result<(), String> {
    let kept = kept_of(key, KeptKind::Launch, Vec::new(), compile);
    keep(
        store,
        kept,
        &format::launch_file(launch),
        pocl_cache,
        specs,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("clshim-kept-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        files::make_dir(&d).unwrap();
        d
    }

    /// Ranks of a node that share one pocl cache (pocl's default folder) take the same kept
    /// build at once: each is handed the program folder, whichever of them put it there
    /// (the one that lost the rename once found nothing taken, and its build was recorded
    /// as compiled and replaced the kept build with pocl's cache hit).
    #[test]
    fn ranks_taking_one_kept_build_at_once_into_one_cache_all_take_it() {
        let d = scratch("race");
        let store = KeptStore {
            dir: d.join("store"),
            max: 1 << 30,
        };
        let key = BuildKey {
            key: 0x1234,
            fingerprint: 5,
            driver: 6,
            text: b"key text".to_vec(),
        };
        let made = d.join("made");
        let program = Path::new("AB").join("cdefgh");
        std::fs::create_dir_all(made.join(&program).join("k/1-1-1")).unwrap();
        std::fs::write(made.join(&program).join("program.bc"), vec![7u8; 4 << 20]).unwrap();
        std::fs::write(made.join(&program).join("k/1-1-1/k.so"), vec![9u8; 1 << 20]).unwrap();
        keep_build(
            &store,
            &key,
            (Vec::new(), std::time::Duration::ZERO),
            &made,
            std::slice::from_ref(&program),
            false,
        )
        .unwrap();
        for round in 0..8 {
            let cache = d.join(format!("cache-{round}"));
            files::make_dir(&cache).unwrap();
            let barrier = std::sync::Barrier::new(6);
            let taken: Vec<Take> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..6)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            take(&store, &key, &cache)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut copied = 0;
            for t in taken {
                match t {
                    Take::Taken(t) => {
                        assert_eq!(t.programs, vec![program.clone()], "round {round}");
                        copied += t.copied;
                    }
                    Take::Absent => panic!("round {round}: absent"),
                    Take::Refused(why) => panic!("round {round}: refused: {why}"),
                }
            }
            assert_eq!(copied, 1, "round {round}: one of them copied it");
            assert_eq!(
                std::fs::read(cache.join(&program).join("program.bc"))
                    .unwrap()
                    .len(),
                4 << 20
            );
        }
        let _ = std::fs::remove_dir_all(&d);
    }
}
