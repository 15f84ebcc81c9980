//! The native store (`CLSHIM_NATIVE_STORE`): the driver's own binaries of programs, made
//! after the job by `clshim warm` and taken at later loads and builds, so that those take
//! the driver's binary in about a millisecond instead of building again (pocl's kernel cache
//! still preprocesses the source to find its entry: about 20 ms a program). This module
//! owns where the store is and what a lookup answers; its parts own the rest:
//! `build_key` (what decides a build's result, and so an entry's key), `includes` (the
//! files a build can read), `driver` (which build of the driver), `files` (safe file
//! operations), `requests` (what the library leaves for the warm step) and `warm` (the
//! step itself). The file formats are `clshim_format::store`'s.
//!
//! One store per user: `CLSHIM_NATIVE_STORE`, else `$HOME/.cache/clshim/native`. Not
//! `XDG_CACHE_HOME`: MPI job scripts give each rank its own (mirgecom's documentation
//! recommends it), which would give each rank a store of its own that the warm step never
//! finds. `clshim run` also sets `CLSHIM_NATIVE_STORE` to the absolute path it resolved, so
//! every process of a job uses one store whatever the ranks do to their environment.

pub mod build_key;
pub mod driver;
pub mod files;
pub mod includes;
mod macros;
pub mod requests;
#[cfg(not(target_os = "macos"))]
pub mod warm;

use build_key::BuildKey;
use clshim_format::store::{self as format, entry_name};
use std::path::PathBuf;

/// The store as the library uses it.
#[derive(Clone, Debug)]
pub struct Store {
    pub dir: PathBuf,
}

/// What the store holds for one build.
pub enum Lookup {
    /// What the driver answered of the build from source, and its binary, from a verified
    /// entry made for exactly this key.
    Found(format::Payload),
    Absent,
    /// Ignored: damaged, foreign or unreadable, with why.
    Refused(String),
}

impl Store {
    pub fn from_config(c: &crate::config::Config) -> Option<Store> {
        c.native_store.clone().map(|dir| Store { dir })
    }

    /// The verified payload of the entry for `key`: the file must be whole and undamaged,
    /// and its key text this key's byte for byte.
    pub fn lookup(&self, key: &BuildKey) -> Lookup {
        let dir = match files::open_dir(&self.dir, false) {
            Ok(d) => d,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Lookup::Absent,
            Err(e) => return Lookup::Refused(format!("store directory: {e}")),
        };
        let name = entry_name(key.key);
        let bytes = match files::read_file(&dir, &name, format::MAX_ENTRY, true) {
            Ok(Some(b)) => b,
            Ok(None) => return Lookup::Absent,
            Err(why) => return Lookup::Refused(format!("entry {name}: {why}")),
        };
        match verify(&bytes, key).and_then(format::Payload::decode) {
            Ok(payload) => Lookup::Found(payload),
            Err(why) => Lookup::Refused(format!("entry {name}: {why}")),
        }
    }
}

/// The key of making `recipe` (encoded as `encoded`) on `device` in this process, as the
/// files on disk stand now; Err: why no entry can stand for it.
///
/// # Safety
/// `device` is a live device, whose facts are `facts`.
pub unsafe fn key_for(
    rt: &crate::runtime::Runtime,
    facts: &crate::devices::DeviceFacts,
    device: crate::cl::cl_device_id,
    recipe: &crate::recipe::Recipe,
    encoded: &[u8],
) -> Result<BuildKey, String> {
    // SAFETY: a live device (this function's contract).
    let driver = unsafe { driver::driver_identity(device) }.ok_or("no driver library identity")?;
    let cwd = std::env::current_dir().map_err(|e| format!("the working directory: {e}"))?;
    BuildKey::new(recipe, encoded, facts, driver, &rt.compile_env, &cwd)
}

/// Leaves a request for each build in `keys` the store lacks, when `CLSHIM_WARM` asks
/// for requests.
pub fn request(rt: &crate::runtime::Runtime, keys: &[BuildKey], encoded: &[u8]) {
    let Some(store) = Store::from_config(&rt.config).filter(|_| rt.config.warm_requests) else {
        return;
    };
    let Ok(cwd) = std::env::current_dir() else {
        return;
    };
    for key in keys {
        requests::leave(
            &store,
            key,
            encoded,
            &rt.compile_env,
            &cwd,
            rt.config.warm_store.as_deref(),
        );
    }
}

/// The payload of `bytes` if it is a whole, undamaged entry made for exactly `key`.
pub fn verify<'a>(bytes: &'a [u8], key: &BuildKey) -> Result<&'a [u8], String> {
    let (h, text, payload) = format::open_entry(bytes)?;
    if h.key != key.key {
        return Err("another key than its name".into());
    }
    if h.fingerprint != key.fingerprint {
        return Err("made for another device".into());
    }
    if h.driver != key.driver {
        return Err("made by another driver build".into());
    }
    if text != key.text {
        return Err("made for another build (its key text differs)".into());
    }
    Ok(payload)
}

/// An entry for `key` holding `payload`.
#[cfg_attr(target_os = "macos", allow(dead_code))]
pub fn encode(key: &BuildKey, payload: &format::Payload) -> Vec<u8> {
    format::encode_entry(
        key.key,
        key.fingerprint,
        key.driver,
        &key.text,
        &payload.encode(),
    )
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
        let e = encode(&k, &payload);
        assert_eq!(
            format::Payload::decode(verify(&e, &k).unwrap()).unwrap(),
            payload
        );
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
