//! What pocl compiled, read from its kernel cache (`POCL_CACHE_DIR`): deterministic evidence
//! of a compile where a time would only suggest one. pocl keeps each kernel it compiles for
//! a work-group configuration as `<program hash>/<kernel>/<configuration>/<kernel>.so`; the
//! configuration `0-0-0` is the generic variant a binary query makes it compile, others
//! (`16-1-1-goffs0-smallgrid`) are the size-specialised ones of launches.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// One kernel pocl compiled: its configuration folder's name and when pocl wrote it.
#[derive(Debug, Clone)]
pub struct CompiledKernel {
    pub path: PathBuf,
    pub configuration: String,
    /// The file's modification time, in seconds since the epoch (as trace records' `ts`).
    pub written: f64,
}

impl CompiledKernel {
    /// The generic variant (a binary query's compile), not a launch's specialised one.
    pub fn is_generic(&self) -> bool {
        self.configuration == "0-0-0"
    }
}

/// Every kernel pocl compiled into the kernel cache `cache` (none when it does not exist).
pub fn compiled_kernels(cache: &Path) -> Vec<CompiledKernel> {
    let mut found = Vec::new();
    let mut dirs = vec![cache.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "so") {
                let written = meta
                    .modified()
                    .unwrap_or(SystemTime::UNIX_EPOCH)
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                let configuration = dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                found.push(CompiledKernel {
                    path,
                    configuration,
                    written,
                });
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}
