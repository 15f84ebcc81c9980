//! Requests: what the library leaves in the store for a clshim binary it hands out
//! (`substitute`) or loads whose driver's binary the store lacks, so that the node's warm
//! service (`store::service`, on by default; the process waits for it at its exit), or
//! `clshim warm` for what the service did not make, makes its entry in a process of its
//! own, at idle priority. A request holds what that process needs to make the same
//! build again: the
//! recipe, the device and driver, the working directory and the environment (with the
//! application's pocl kernel cache, so the warm step reuses the compiles it holds). It
//! holds program sources, so it is private (0600) whatever `CLSHIM_TRACE_MODE` says.
//!
//! Leaving one costs a constant number of file operations however many wait: whether the
//! entry (and, when there is one, whether its manifest holds) or the request exists, and
//! one atomic write. It is never synced (the application
//! must not wait for a disk; a torn request fails its checksum in the warm step). Each
//! process leaves at most [`MAX_PER_PROCESS`] requests and [`MAX_BYTES_PER_PROCESS`]
//! bytes of them; the warm step removes the requests it takes up. A store or requests
//! folder that is not the user's alone gets none, and the process says so once: its
//! requests would be refused by the warm step, or read by someone else's. Beside the
//! first request it leaves for a device, a process leaves the labels of that device and
//! its driver build (`labels`), so that `clshim store` names them before a warm step ran.

use super::build_key::{BuildKey, CompileEnv};
use super::files;
use super::Store;
use clshim_format::store::{entry_name, request_name, set_aside_name, Request, REQUESTS};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub const MAX_PER_PROCESS: u64 = 4096;
pub const MAX_BYTES_PER_PROCESS: u64 = 256 << 20;

static LEFT: AtomicU64 = AtomicU64::new(0);
static LEFT_BYTES: AtomicU64 = AtomicU64::new(0);
static WARNED_REFUSED: AtomicBool = AtomicBool::new(false);
static WARNED_FULL: AtomicBool = AtomicBool::new(false);

/// Leaves a request to make the build `key` of `encoded` (a recipe's encoding), with the
/// `labels` of its device and driver build, unless its entry or a request for it exists,
/// or this process is at its bounds. Never fails loudly. True when a request waits for the
/// build (left now, or earlier).
pub fn leave(
    store: &Store,
    key: &BuildKey,
    labels: Option<&super::labels::Labels>,
    encoded: &[u8],
    env: &CompileEnv,
    cwd: &Path,
) -> bool {
    let request = Request {
        key: key.key,
        fingerprint: key.fingerprint,
        driver: key.driver,
        recipe: encoded.to_vec(),
        cwd: cwd.as_os_str().as_bytes().to_vec(),
        env: env.replay.clone(),
    };
    let result = (|| -> std::io::Result<&'static str> {
        let refused = |e: std::io::Error, path: &Path| {
            if files::refused(&e) && !WARNED_REFUSED.swap(true, Ordering::Relaxed) {
                log::warn!("native store: no request left: {}: {e}", path.display());
            }
            e
        };
        let dir = files::open_store(&store.dir, true).map_err(|e| refused(e, &store.dir))?;
        // An entry whose compile read other files than this build would is made again.
        if files::exists(&dir, &entry_name(key.key)) && !store.lookup(key).wants_request() {
            return Ok("has an entry");
        }
        let req = files::open_sub(&dir, REQUESTS, true)
            .map_err(|e| refused(e, &store.dir.join(REQUESTS)))?;
        let name = request_name(key.key);
        if files::exists(&req, &name) {
            return Ok("already requested");
        }
        if files::exists(&req, &set_aside_name(key.key)) {
            return Ok("set aside: a warm step could not make it (see `clshim store`)");
        }
        let bytes = request.encode();
        let n = bytes.len() as u64;
        if LEFT.load(Ordering::Relaxed) >= MAX_PER_PROCESS
            || LEFT_BYTES.load(Ordering::Relaxed) + n > MAX_BYTES_PER_PROCESS
        {
            return Ok("this process left as many requests as it may");
        }
        files::write_atomic(&req, &name, &bytes, false, false)?;
        if let Some(l) = labels {
            super::labels::leave(&dir, l);
        }
        LEFT.fetch_add(1, Ordering::Relaxed);
        LEFT_BYTES.fetch_add(n, Ordering::Relaxed);
        Ok("requested")
    })();
    match result {
        Ok(what) => {
            log::debug!("native store: {:016x}: {what}", key.key);
            what == "requested" || what == "already requested"
        }
        Err(e) => {
            // A full store is said once: a request that cannot be written is a driver's
            // binary no warm step will make.
            let full =
                e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT);
            if full && !WARNED_FULL.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "native store {}: its filesystem is full ({e}): no request left, so the \
                     driver's binaries it lacks are not made; free room there, or name \
                     another store (CLSHIM_NATIVE_STORE), or a smaller cap \
                     (CLSHIM_NATIVE_STORE_MAX)",
                    store.dir.display()
                );
            }
            log::debug!("native store: no request for {:016x}: {e}", key.key);
            false
        }
    }
}
