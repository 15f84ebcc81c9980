//! The native store (`CLSHIM_NATIVE_STORE`): the driver's own binaries of programs, made by
//! `clshim warm` (from the compiles jobs keep, `kept`, and the requests) or by the node's
//! warm service before a job ends (those an application asked for, `service`; on by
//! default), and taken at later loads and builds, so that those take
//! the driver's binary in about a millisecond instead of building again (pocl's kernel cache
//! still preprocesses the source to find its entry: about 20 ms a program). This module
//! owns where the store is and what a lookup answers; its parts own the rest:
//! `build_key` (what decides a build's result before it runs, and so an entry's key),
//! `record` and `manifest` (what the compile itself read, recorded where the warm step
//! builds, checked where a process would build), `driver` (which build of the driver),
//! `files` (safe file operations, on the user's own files only), `requests` (what the library leaves for the warm step),
//! `labels` (the device and driver build of each, in words) and `warm` (the step itself). The file formats are `clshim_format::store`'s and
//! `clshim_format::manifest`'s.
//!
//! One store per user, and only the user's: its folders and files are taken only when the
//! user owns them and no one else may write them (`files`), so a store shared by several
//! users is refused until it can be made safe. `CLSHIM_NATIVE_STORE`, else
//! `$HOME/.cache/clshim/native`. Not `XDG_CACHE_HOME`: MPI job scripts give each rank its
//! own (mirgecom's documentation recommends it), which would give each rank a store of its
//! own that the warm step never finds. `clshim run` also sets `CLSHIM_NATIVE_STORE` to the
//! absolute path it resolved, so every process of a job uses one store whatever the ranks
//! do to their environment.

pub mod build_key;
pub mod driver;
pub mod files;
pub mod kept;
pub mod kernel_library;
pub mod labels;
pub mod manifest;
pub mod record;
pub mod requests;
pub mod service;
#[cfg(target_os = "linux")]
pub mod warm;

use build_key::{BuildKey, CompileEnv};
use clshim_format::manifest::Manifest;
use clshim_format::store::{self as format, entry_name};
use std::path::PathBuf;

/// The store as the library uses it.
#[derive(Clone, Debug)]
pub struct Store {
    pub dir: PathBuf,
    /// pocl's cache folder as the environment named it at the first OpenCL call.
    pocl_cache_at_start: PathBuf,
}

/// What the store holds for one build.
pub enum Lookup {
    /// What the driver answered of the build from source, and its binary, from a verified
    /// entry made for exactly this key, whose compile found what this build would find.
    Found(format::Payload),
    Absent,
    /// An entry of this key whose compile read other files than this build would (a
    /// header edited since, a header that appeared, another working directory's files).
    Differs(String),
    /// This build cannot be kept, as the warm step found (while the files its compile
    /// read stay as they are): why.
    Uncacheable(String),
    /// Ignored: damaged, foreign or unreadable, with why.
    Refused(String),
    /// Where this build's compile would look cannot be known (pocl's cache folder named
    /// anew since clshim's first OpenCL call), with why: nothing is served.
    Unknowable(String),
}

impl Lookup {
    /// Whether a warm step could make what this lookup lacks.
    pub fn wants_request(&self) -> bool {
        matches!(self, Lookup::Absent | Lookup::Differs(_))
    }

    /// The payload found for device `device` of a build, or why there is none.
    pub fn found(self, device: usize) -> Result<format::Payload, Miss> {
        let miss = |kind, why: String| Miss {
            kind,
            device: Some(device),
            why,
        };
        match self {
            Lookup::Found(p) => Ok(p),
            Lookup::Absent => Err(miss(MissKind::NoEntry, String::new())),
            Lookup::Differs(why) => Err(miss(MissKind::FilesDiffer, why)),
            Lookup::Uncacheable(why) => Err(miss(MissKind::NotKept, why)),
            Lookup::Refused(why) => {
                log::warn!("native store: ignored {why}");
                Err(miss(MissKind::Ignored, why))
            }
            Lookup::Unknowable(why) => Err(miss(MissKind::Other, why)),
        }
    }
}

pub use crate::schema::Miss as MissKind;

/// Why the store gave a build or a load nothing of its own: what its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Miss {
    pub kind: MissKind,
    /// The device of the build it concerns, by its place in the program's devices.
    pub device: Option<usize>,
    pub why: String,
}

impl Miss {
    /// A miss of the whole build, for a reason of the kind `kind`.
    pub fn of(kind: MissKind, why: impl Into<String>) -> Miss {
        Miss {
            kind,
            device: None,
            why: why.into(),
        }
    }

    /// The words of a load's `native_miss` (`device 0: no entry`).
    pub fn text(&self) -> String {
        match self.device {
            Some(i) => format!("device {i}: {}", self.words()),
            None => self.words(),
        }
    }

    /// Why, without the device: the same for every device of a build alike.
    fn words(&self) -> String {
        match self.kind {
            MissKind::NoEntry => "no entry".to_string(),
            MissKind::FilesDiffer => {
                format!("its entry's compile read other files ({})", self.why)
            }
            MissKind::NotKept => format!("not kept: {}", self.why),
            MissKind::Ignored => format!("ignored {}", self.why),
            MissKind::CannotKeep | MissKind::Other => self.why.clone(),
        }
    }

    /// What a build record says of it.
    pub fn record(&self) -> crate::schema::NotServed {
        crate::schema::NotServed {
            kind: self.kind,
            why: self.words(),
        }
    }
}

/// Whether pocl keeps a kernel cache: `POCL_KERNEL_CACHE` unset, or set to something that
/// begins with `1` (pocl reads no other value as true). Where it does not, nothing put in
/// its cache folder is ever read, and nothing is kept from it.
pub fn pocl_kernel_cache_on() -> bool {
    std::env::var_os("POCL_KERNEL_CACHE").map_or(true, |v| v.as_encoded_bytes().starts_with(b"1"))
}

/// pocl's cache folder as the environment names it now: where a rank's compiles are put
/// for pocl to find (sharing), where no certainty is needed (a copy pocl does not look at
/// only costs a compile).
pub fn pocl_cache() -> PathBuf {
    manifest::pocl_cache_dir(&|n| std::env::var_os(n))
}

/// pocl's cache folder as the environment named it at clshim's first call (`config`'s).
fn pocl_cache_at_start(config: &crate::config::Config) -> PathBuf {
    manifest::pocl_cache_dir(&|n| {
        config
            .pocl_cache_env
            .iter()
            .find(|(k, _)| *k == n)
            .and_then(|(_, v)| v.clone())
    })
}

/// pocl's cache folder where this process's pocl surely compiles: the one the environment
/// names now, if it named the same at clshim's first call (`config`'s) and when the loader
/// started clshim's layer. An application that names another folder after OpenCL began
/// leaves pocl in the one it started with, which clshim cannot tell for certain: None, and
/// nothing is kept from or put in either. Under `LD_PRELOAD` alone no layer starts before
/// pocl, and clshim's first call is a program's, after pocl started: the folder named when
/// the process started (`/proc/self/environ`) must then be the same too (an application
/// that names its rank's folder in its own code keeps and shares nothing there; under the
/// loader's layer, `clshim run`'s default, it does).
pub fn pocl_cache_certain(config: &crate::config::Config) -> Option<PathBuf> {
    let now = pocl_cache();
    let earlier = AT_LOADER.get().or_else(pocl_cache_at_exec);
    (pocl_cache_at_start(config) == now && earlier.map_or(true, |e| *e == now)).then_some(now)
}

/// pocl's cache folder as the environment named it when the OpenCL loader started
/// clshim's layer: at the application's first platform call, before pocl starts (at its
/// first device or context call), so one more folder pocl may be using.
static AT_LOADER: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Notes pocl's cache folder as the environment names it now: called when a loader
/// starts clshim's layer.
pub fn note_loader_start() {
    let _ = AT_LOADER.set(pocl_cache());
}

/// pocl's cache folder as the environment named it when the process started
/// (`/proc/self/environ`, which `setenv` does not change); None where it cannot be read.
fn pocl_cache_at_exec() -> Option<&'static PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    static AT_EXEC: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    AT_EXEC
        .get_or_init(|| {
            let block = std::fs::read("/proc/self/environ").ok()?;
            let vars: Vec<(&[u8], &[u8])> = block
                .split(|&b| b == 0)
                .filter_map(|kv| {
                    let eq = kv.iter().position(|&b| b == b'=')?;
                    Some((&kv[..eq], &kv[eq + 1..]))
                })
                .collect();
            Some(manifest::pocl_cache_dir(&|n| {
                vars.iter()
                    .find(|(k, _)| *k == n.as_bytes())
                    .map(|(_, v)| std::ffi::OsStr::from_bytes(v).to_os_string())
            }))
        })
        .as_ref()
}

/// Where this process's pocl compiles, for the names of a manifest relative to pocl's
/// cache folder (pocl compiles its copy of the source there, so a quoted include is
/// looked for there first). pocl reads the folder from the environment once, when it
/// starts, which is before any program is made, so before clshim's first call (an
/// application that names it in its own code before it starts OpenCL, as
/// `bench/workload.py` and MPI codes do per rank, is seen as pocl sees it). An
/// application that names another folder later leaves pocl in the first: `at_start`,
/// the folder at clshim's first call, stands for pocl's, and a lookup whose environment
/// names another now is Err, with why.
fn pocl_cache_for_lookup(at_start: &std::path::Path) -> Result<PathBuf, String> {
    let now = pocl_cache();
    if at_start == now {
        Ok(now)
    } else {
        Err(format!(
            "pocl's cache folder was {} at the first OpenCL call and the environment names \
             {} now: pocl reads it once, when it starts, so where this build would look for \
             a quoted include first is not certain",
            at_start.display(),
            now.display()
        ))
    }
}

impl Store {
    pub fn from_config(c: &crate::config::Config) -> Option<Store> {
        c.native_store.clone().map(|dir| Store {
            dir,
            pocl_cache_at_start: pocl_cache_at_start(c),
        })
    }

    /// What the store holds for `key`, built in this process: the entry must be whole and
    /// undamaged, its key text this key's byte for byte, and its manifest must hold here.
    pub fn lookup(&self, key: &BuildKey) -> Lookup {
        let dir = match files::open_dir(&self.dir, false) {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Lookup::Absent,
            Err(e) => {
                return Lookup::Refused(format!("store directory {}: {e}", self.dir.display()))
            }
        };
        let name = entry_name(key.key);
        let path = self.dir.join(&name);
        let bytes = match files::read_file(&dir, &name, format::MAX_ENTRY, true) {
            Ok(Some(b)) => b,
            Ok(None) => return Lookup::Absent,
            Err(why) => return Lookup::Refused(format!("entry {}: {why}", path.display())),
        };
        let (flags, manifest, payload) = match verify(&bytes, key) {
            Ok(parts) => parts,
            Err(why) => return Lookup::Refused(format!("entry {}: {why}", path.display())),
        };
        let pocl_cache = match pocl_cache_for_lookup(&self.pocl_cache_at_start) {
            Ok(p) => p,
            Err(why) if manifest.names_in_pocl_cache() => return Lookup::Unknowable(why),
            // No name of the manifest is in pocl's cache folder: which it is does not matter.
            Err(_) => pocl_cache(),
        };
        if let Err(why) = manifest::check(&manifest, &pocl_cache) {
            return Lookup::Differs(why);
        }
        // pocl may have started before the application named the folder of clshim's
        // first call: in the folders named when the process and the loader started, the
        // names the compile found absent must be absent too (a header there would be
        // read first).
        let earlier = [
            (pocl_cache_at_exec(), "as the process started"),
            (AT_LOADER.get(), "as the OpenCL loader started"),
        ];
        for (folder, when) in earlier {
            let Some(folder) = folder.filter(|f| **f != pocl_cache) else {
                continue;
            };
            if let Err(why) = manifest::absent_in_pocl_cache(&manifest, folder) {
                return Lookup::Differs(format!(
                    "{why} (in pocl's cache folder {when}, which pocl may use)"
                ));
            }
        }
        if flags & format::UNCACHEABLE != 0 {
            return Lookup::Uncacheable(String::from_utf8_lossy(payload).into_owned());
        }
        match format::Payload::decode(payload) {
            Ok(p) => Lookup::Found(p),
            Err(why) => Lookup::Refused(format!("entry {}: {why}", path.display())),
        }
    }
}

/// The key of making `recipe` (encoded as `encoded`) on `device` in this process, with the
/// environment as it is now; Err: why no entry can stand for it.
///
/// # Safety
/// `device` is a live device, whose facts are `facts`.
pub unsafe fn key_for(
    facts: &crate::devices::DeviceFacts,
    device: crate::cl::cl_device_id,
    recipe: &crate::recipe::Recipe,
    encoded: &[u8],
) -> Result<BuildKey, String> {
    // SAFETY: a live device (this function's contract).
    let driver = unsafe { driver::driver_identity(device) }.ok_or("no driver library identity")?;
    BuildKey::new(recipe, encoded, facts, driver, &CompileEnv::of_process())
}

/// A build a process would leave a request for: its key, and the labels of its device and
/// driver build (None when this process left them already).
pub struct Wanted {
    pub key: BuildKey,
    pub labels: Option<labels::Labels>,
}

/// [`key_for`], with the labels a request for the build leaves.
///
/// # Safety
/// As for [`key_for`].
pub unsafe fn wanted(
    facts: &crate::devices::DeviceFacts,
    device: crate::cl::cl_device_id,
    recipe: &crate::recipe::Recipe,
    encoded: &[u8],
) -> Result<Wanted, String> {
    // SAFETY: this function's contract.
    let key = unsafe { key_for(facts, device, recipe, encoded) }?;
    // SAFETY: as above.
    let labels = unsafe { labels::of(facts, device, key.fingerprint, key.driver) };
    Ok(Wanted { key, labels })
}

/// Leaves a request for each build in `wanted` the store lacks, and makes sure the node's
/// warm service runs to make them (`service`; unless `CLSHIM_WARM_SERVICE=0`), which this
/// process then waits for at its exit: for clshim binaries this process hands out, or
/// loads.
pub fn request(config: &crate::config::Config, wanted: &[Wanted], encoded: &[u8]) {
    let Some(store) = Store::from_config(config) else {
        return;
    };
    let Ok(cwd) = std::env::current_dir() else {
        return;
    };
    let env = CompileEnv::of_process();
    let mut left = false;
    for w in wanted {
        if requests::leave(&store, &w.key, w.labels.as_ref(), encoded, &env, &cwd) {
            service::left(&store.dir, w.key.key);
            left = true;
        }
    }
    if left && config.warm_service {
        service::ensure(&store.dir);
    }
}

/// The flags, manifest and payload of `bytes` if it is a whole, undamaged entry made for
/// exactly `key`.
pub fn verify<'a>(bytes: &'a [u8], key: &BuildKey) -> Result<(u32, Manifest, &'a [u8]), String> {
    let (h, parts) = format::open_entry(bytes)?;
    if h.key != key.key {
        return Err("another key than its name".into());
    }
    if h.fingerprint != key.fingerprint {
        return Err("made for another device".into());
    }
    if h.driver != key.driver {
        return Err("made by another driver build".into());
    }
    if parts.key_text != key.text {
        return Err("made for another build (its key text differs)".into());
    }
    let manifest = Manifest::decode(parts.manifest)?;
    Ok((h.flags, manifest, parts.payload))
}

/// An entry for `key`: what its compile found (`manifest`), and the payload, or (flagged
/// `UNCACHEABLE`) why the build cannot be kept.
#[cfg_attr(target_os = "macos", allow(dead_code))]
pub fn encode(
    key: &BuildKey,
    manifest: &Manifest,
    content: Result<&format::Payload, &str>,
) -> Vec<u8> {
    let (flags, payload) = match content {
        Ok(p) => (0, p.encode()),
        Err(why) => (format::UNCACHEABLE, why.as_bytes().to_vec()),
    };
    format::encode_entry(&format::EntryParts {
        key: key.key,
        fingerprint: key.fingerprint,
        driver: key.driver,
        flags,
        key_text: &key.text,
        manifest: &manifest.encode(),
        payload: &payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &[u8]) -> BuildKey {
        BuildKey {
            key: crate::hash::fnv1a64(text),
            fingerprint: 7,
            driver: 9,
            text: text.to_vec(),
        }
    }

    #[test]
    fn an_entry_verifies_only_for_its_own_key() {
        let k = key(b"key text");
        let payload = format::Payload {
            binary: b"binary".to_vec(),
            ..Default::default()
        };
        let e = encode(&k, &Manifest::default(), Ok(&payload));
        let (flags, manifest, bytes) = verify(&e, &k).unwrap();
        assert_eq!((flags, manifest), (0, Manifest::default()));
        assert_eq!(format::Payload::decode(bytes).unwrap(), payload);
        let why = encode(&k, &Manifest::default(), Err("uses __TIME__"));
        let (flags, _, bytes) = verify(&why, &k).unwrap();
        assert_eq!((flags, bytes), (format::UNCACHEABLE, &b"uses __TIME__"[..]));
        assert!(verify(
            &e,
            &BuildKey {
                driver: 8,
                ..k.clone()
            }
        )
        .is_err());
        assert!(verify(
            &e,
            &BuildKey {
                fingerprint: 8,
                ..k.clone()
            }
        )
        .is_err());
        let collision = BuildKey {
            text: b"other text".to_vec(),
            ..k.clone()
        };
        assert!(verify(&e, &collision).is_err());
    }
}
