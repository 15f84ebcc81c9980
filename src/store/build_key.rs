//! What decides the result of a build, as one key, kept apart from where entries are
//! stored (ccache and sccache keep the two apart the same way). A build is served from the
//! store only by an entry made for exactly this key, and the key holds everything the
//! driver's compile reads:
//! - the recipe: source or IL, options, headers given through the API, link inputs;
//! - the device (its fingerprint: platform, device, versions) and the driver build
//!   (`store::driver`: build-ids of the driver and the compiler libraries beside it);
//! - the driver's environment: every `POCL_*` variable but those that only say where
//!   pocl keeps its files or what it logs (`POCL_EXTRA_BUILD_FLAGS` changes the code;
//!   `POCL_CACHE_DIR` does not);
//! - the files the sources can include, found as the compile finds them from the working
//!   directory (`store::includes`: every probe on the search path, with the content hash
//!   of every file found), so an edited header, a header that appears earlier on the
//!   path, or the same relative `-I` from another directory is another key.
//!
//! The store serves pocl devices only: pocl is the driver whose binary queries cost a
//! compile, and the one whose environment is known here; other drivers' programs are made
//! again from their recipes as before. The key text (all of the above as bytes) is stored
//! in the entry and compared byte for byte at load, so a hash collision can never serve
//! another build.

use super::includes::{Scanner, SearchPath};
use crate::devices::DeviceFacts;
use crate::hash::Fnv1a;
use crate::recipe::{Recipe, Text};
use clshim_format::store::{keyed_variable, replayed_variable};
use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// The environment a driver compiles in, as keys and warm steps need it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileEnv {
    /// The variables that are part of every key, sorted by name.
    pub keyed: Vec<(Vec<u8>, Vec<u8>)>,
    /// What a warm step sets to make a build again (`store::replayed_variable`), sorted by
    /// name.
    pub replay: Vec<(Vec<u8>, Vec<u8>)>,
}

impl CompileEnv {
    /// From `vars` (the process environment).
    pub fn from_vars(vars: impl Iterator<Item = (OsString, OsString)>) -> CompileEnv {
        let mut env = CompileEnv::default();
        for (name, value) in vars {
            let n = name.as_bytes();
            let pair = (n.to_vec(), value.as_bytes().to_vec());
            if keyed_variable(n) {
                env.keyed.push(pair.clone());
            }
            if replayed_variable(n) {
                env.replay.push(pair);
            }
        }
        env.keyed.sort();
        env.replay.sort();
        env
    }

    /// This process's.
    pub fn of_process() -> CompileEnv {
        CompileEnv::from_vars(std::env::vars_os())
    }
}

/// One build's key: its hash (the entry's name), the device and driver it is for, and the
/// whole key text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildKey {
    pub key: u64,
    pub fingerprint: u64,
    pub driver: u64,
    pub text: Vec<u8>,
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

impl BuildKey {
    /// The key of making `recipe` (whose encoding is `encoded`) on a device with `facts`
    /// and driver identity `driver`, in `env` and working directory `cwd`, as the files
    /// on disk stand now. Err: why no entry can stand for this build (a device of another
    /// driver than pocl, a recipe without its options, an include the manifest cannot
    /// follow).
    pub fn new(
        recipe: &Recipe,
        encoded: &[u8],
        facts: &DeviceFacts,
        driver: u64,
        env: &CompileEnv,
        cwd: &Path,
    ) -> Result<BuildKey, String> {
        if facts.platform != crate::schema::POCL_PLATFORM {
            return Err("the store serves pocl devices only".into());
        }
        let fingerprint = facts.fingerprint();
        let mut scanner = Scanner::default();
        let mut seen = HashSet::new();
        manifest_of(recipe, cwd, &mut scanner, &mut seen)?;
        let manifest = scanner.finish();
        let mut text = Vec::with_capacity(encoded.len() + 256);
        text.extend_from_slice(b"clshim-build-key-1\0");
        text.extend_from_slice(&fingerprint.to_le_bytes());
        text.extend_from_slice(&driver.to_le_bytes());
        put(&mut text, encoded);
        text.extend_from_slice(&(env.keyed.len() as u64).to_le_bytes());
        for (name, value) in &env.keyed {
            put(&mut text, name);
            put(&mut text, value);
        }
        manifest.encode_into(&mut text);
        Ok(BuildKey {
            key: Fnv1a::default().update(&text).finish(),
            fingerprint,
            driver,
            text,
        })
    }
}

/// Adds what every part of `recipe` can include (each distinct part once).
fn manifest_of(
    recipe: &Recipe,
    cwd: &Path,
    scanner: &mut Scanner,
    seen: &mut HashSet<*const Recipe>,
) -> Result<(), String> {
    let options = recipe
        .options
        .as_deref()
        .ok_or("a recipe without its options")?;
    let search = SearchPath::of(options, cwd)?;
    if let Text::Source(src) = &recipe.text {
        scanner.scan_text(src, &search)?;
    }
    for h in &recipe.headers {
        scanner.scan_text(&h.source, &search)?;
    }
    for input in &recipe.inputs {
        if seen.insert(Arc::as_ptr(input)) {
            manifest_of(input, cwd, scanner, seen)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(platform: &str) -> DeviceFacts {
        DeviceFacts {
            name: "cpu".into(),
            device_type: crate::cl::CL_DEVICE_TYPE_CPU,
            vendor: "v".into(),
            driver: "3.1".into(),
            version: "OpenCL 3.0".into(),
            platform: platform.into(),
            platform_version: "OpenCL 3.0 pocl 3.1".into(),
            compute_units: None,
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> CompileEnv {
        CompileEnv::from_vars(
            pairs
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        )
    }

    #[test]
    fn the_environment_that_compiles_is_keyed_and_the_rest_is_not() {
        let e = vars(&[
            ("POCL_EXTRA_BUILD_FLAGS", "-DVAL=7"),
            ("POCL_CACHE_DIR", "/rank0"),
            ("HOME", "/home/u"),
            ("PMI_RANK", "0"),
        ]);
        assert_eq!(
            e.keyed,
            [(b"POCL_EXTRA_BUILD_FLAGS".to_vec(), b"-DVAL=7".to_vec())]
        );
        let names: Vec<&[u8]> = e.replay.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(
            names,
            [&b"HOME"[..], b"POCL_CACHE_DIR", b"POCL_EXTRA_BUILD_FLAGS"]
        );
    }

    #[test]
    fn every_part_of_the_key_changes_it() {
        let dir = std::env::temp_dir();
        let r = Recipe::built(
            Text::Source(b"kernel void k() {}".to_vec()),
            b"-DX".to_vec(),
        );
        let enc = r.encode();
        let pocl = facts(crate::schema::POCL_PLATFORM);
        let env = vars(&[]);
        let k = |r: &Recipe, f: &DeviceFacts, d: u64, e: &CompileEnv| {
            BuildKey::new(r, &r.encode(), f, d, e, &dir)
        };
        let base = BuildKey::new(&r, &enc, &pocl, 1, &env, &dir).unwrap();
        assert_eq!(base, k(&r, &pocl, 1, &env).unwrap());
        let other = Recipe::built(
            Text::Source(b"kernel void k() {}".to_vec()),
            b"-DY".to_vec(),
        );
        assert_ne!(base.key, k(&other, &pocl, 1, &env).unwrap().key);
        assert_ne!(base.key, k(&r, &pocl, 2, &env).unwrap().key);
        let flags = vars(&[("POCL_EXTRA_BUILD_FLAGS", "-DVAL=7")]);
        assert_ne!(base.key, k(&r, &pocl, 1, &flags).unwrap().key);
        let cache = vars(&[("POCL_CACHE_DIR", "/elsewhere")]);
        assert_eq!(base.key, k(&r, &pocl, 1, &cache).unwrap().key);
        let mut gpu = pocl.clone();
        gpu.name = "gpu".into();
        assert_ne!(base.key, k(&r, &gpu, 1, &env).unwrap().key);
        assert!(k(&r, &facts("Intel(R) OpenCL"), 1, &env).is_err());
        let v1 = Recipe {
            options: None,
            ..r.clone()
        };
        assert!(k(&v1, &pocl, 1, &env).is_err());
    }
}
