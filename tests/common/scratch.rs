//! The one scratch directory type: a fresh directory per call under
//! target/test-scratch, removed when the test passes and kept (for a look) when it fails.

use super::target_dir;
use std::ffi::OsStr;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A scratch directory; it derefs to its path. Dropped while the thread is not panicking,
/// it removes itself: keep the value alive as long as the directory is used.
#[derive(Debug)]
pub struct Scratch(PathBuf);

/// A new empty scratch directory, unique per call (`tag`, the process id and a counter).
pub fn scratch(tag: &str) -> Scratch {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let d = target_dir()
        .join("test-scratch")
        .join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Scratch(d)
}

impl Scratch {
    /// `name` inside the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// Keeps the directory beyond this value (for one that outlives a test, e.g. one shared
    /// by every test of a binary) and returns its path.
    pub fn keep(self) -> PathBuf {
        let p = self.0.clone();
        std::mem::forget(self);
        p
    }
    /// `path(name)` as a string, for a command-line argument.
    pub fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<OsStr> for Scratch {
    fn as_ref(&self) -> &OsStr {
        self.0.as_os_str()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
