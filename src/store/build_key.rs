//! What decides the result of a build, as one key, kept apart from where entries are
//! stored (ccache and sccache keep the two apart the same way). The key holds what is known
//! before the compile runs:
//! - the recipe: source or IL, options, headers given through the API, link inputs;
//! - the device (its fingerprint: platform, device, versions) and the driver build
//!   (`store::driver`: build-ids of the driver and the compiler libraries beside it);
//! - the driver's environment as it is at this build (pocl reads `POCL_EXTRA_BUILD_FLAGS`
//!   at every build): every `POCL_*` variable but those that only say where pocl keeps its
//!   files or what it logs (`POCL_CACHE_DIR` does not change the code).
//!
//! What the compile then reads from disk (included files, the places it looked for one and
//! found none) is not guessed here: the entry carries the manifest the warm step recorded
//! from the compile itself (`store::manifest`), and a process checks it before it takes
//! the entry. The store serves pocl devices only: pocl is the driver whose binary queries
//! cost a compile, and the one whose environment and steps are known here; other drivers'
//! programs are made again from their recipes as before. The key text (all of the above as
//! bytes) is stored in the entry and compared byte for byte at load, so a collision of the
//! key's 64-bit hash can never serve another build.

use crate::devices::DeviceFacts;
use crate::hash::Fnv1a;
use crate::recipe::Recipe;
use clshim_format::store::{keyed_variable, replayed_variable};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

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
    /// and driver identity `driver`, in `env`. Err: why no entry can stand for this build
    /// (a device of another driver than pocl, a recipe without its options).
    pub fn new(
        recipe: &Recipe,
        encoded: &[u8],
        facts: &DeviceFacts,
        driver: u64,
        env: &CompileEnv,
    ) -> Result<BuildKey, String> {
        if facts.platform != crate::schema::POCL_PLATFORM {
            return Err("the store serves pocl devices only".into());
        }
        if !has_options(recipe) {
            return Err("a recipe without its options".into());
        }
        let fingerprint = facts.fingerprint();
        let mut text = Vec::with_capacity(encoded.len() + 256);
        text.extend_from_slice(b"clshim-build-key-2\0");
        text.extend_from_slice(&fingerprint.to_le_bytes());
        text.extend_from_slice(&driver.to_le_bytes());
        put(&mut text, encoded);
        text.extend_from_slice(&(env.keyed.len() as u64).to_le_bytes());
        for (name, value) in &env.keyed {
            put(&mut text, name);
            put(&mut text, value);
        }
        Ok(BuildKey {
            key: Fnv1a::default().update(&text).finish(),
            fingerprint,
            driver,
            text,
        })
    }
}

/// Whether every part of `recipe` carries its options (a version-1 clshim binary builds
/// with whatever options the application passes, which no key could hold).
fn has_options(recipe: &Recipe) -> bool {
    recipe.options.is_some() && recipe.inputs.iter().all(|i| has_options(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::Text;

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
        let r = Recipe::built(
            Text::Source(b"kernel void k() {}".to_vec()),
            b"-DX".to_vec(),
        );
        let enc = r.encode();
        let pocl = facts(crate::schema::POCL_PLATFORM);
        let env = vars(&[]);
        let k = |r: &Recipe, f: &DeviceFacts, d: u64, e: &CompileEnv| {
            BuildKey::new(r, &r.encode(), f, d, e)
        };
        let base = BuildKey::new(&r, &enc, &pocl, 1, &env).unwrap();
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
