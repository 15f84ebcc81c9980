//! What a warm step trusts: only what the library trusts
//! (`clshim_format::store::not_users_alone`). A store whose folders are not the user's
//! alone stops the step before a request is read; a request file that is not the user's
//! alone is named, left for the user and never read.

use clshim_format::store as format;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

pub fn me() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() }
}

/// Why a request file cannot be read.
pub enum Unread {
    /// Not a readable regular file, or too long: not a request, removed.
    Damaged,
    /// Not the user's alone: left for the user, with why and what to do.
    NotYours(String),
}

/// Reads a request file whole, at most `max` bytes, without following a link or blocking
/// on a FIFO, only if it is the user's alone (checked on the open file, which is what is
/// read).
pub fn read_request(path: &Path, max: u64) -> Result<Vec<u8>, Unread> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|_| Unread::Damaged)?;
    let m = f.metadata().map_err(|_| Unread::Damaged)?;
    if !m.is_file() || m.len() > max {
        return Err(Unread::Damaged);
    }
    if let Some(why) = format::not_users_alone(false, m.uid(), m.mode(), me()) {
        return Err(Unread::NotYours(why));
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.take(max)
        .read_to_end(&mut bytes)
        .map_err(|_| Unread::Damaged)?;
    Ok(bytes)
}

/// Whether the store at `store` may be read: each of its folders that exists (the store,
/// its requests and sources) must be a folder, by its own name, that is the user's alone,
/// as the library requires. Err: which is not, why, and what to do.
pub fn check_store(store: &Path) -> Result<(), String> {
    for dir in [
        store.to_path_buf(),
        store.join(format::REQUESTS),
        store.join(format::SOURCES),
    ] {
        let m = match dir.symlink_metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        let why = if m.file_type().is_symlink() {
            Some(
                "a symbolic link: a store is opened only by its own name (name the folder it \
                 leads to)"
                    .to_string(),
            )
        } else if !m.is_dir() {
            Some("not a folder".to_string())
        } else {
            format::not_users_alone(true, m.uid(), m.mode(), me())
        };
        if let Some(why) = why {
            return Err(format!("{}: {why}", dir.display()));
        }
    }
    Ok(())
}
