//! What the native store tests look at: a store's entries and requests, and waiting for a
//! warm step that runs in the background (`clshim run --warm`) to finish.

use std::path::{Path, PathBuf};

/// The files of `dir` whose names end with `suffix`, sorted.
pub fn store_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

pub fn entries(store: &Path) -> Vec<PathBuf> {
    store_files(store, ".bin")
}

pub fn requests(store: &Path) -> Vec<PathBuf> {
    store_files(&store.join("requests"), ".req")
}

/// Waits (at most two minutes) until `store` holds `n` entries and no request: a warm
/// step started in the background has done its work.
pub fn wait_for_entries(store: &Path, n: usize) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while (entries(store).len() < n || !requests(store).is_empty())
        && std::time::Instant::now() < until
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(entries(store).len(), n, "entries after the background step");
    assert!(requests(store).is_empty(), "{:?}", requests(store));
}
