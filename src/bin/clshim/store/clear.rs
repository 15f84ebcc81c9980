//! `clshim store --clear`: removes what of a store is clshim's, by the survey's rule
//! (`survey`: a name clshim gives, in the folder of its kind, with clshim's header for it),
//! and nothing else: a store pointed at a folder of the user's keeps every file of theirs.
//! Then the store's own folders (`compiles` and its keys' folders, `requests`, `sources`,
//! `drivers`, `devices`) it emptied go too; the store's folder itself stays, as it may be
//! the user's. Files are unlinked by name, which never follows a link; a file a running
//! warm step is writing meanwhile (its temporary file) only costs that step its write.

use super::summary::size;
use super::survey::{File, Kind, Survey, FOLDERS};
use crate::terminal;
use serde_json::{json, Value};
use std::fmt::Write;
use std::path::Path;

/// What `--clear` removed (by kind, in the order listed), what it could not, and what it
/// left alone.
#[derive(Default)]
pub struct Cleared {
    /// (kind, files, bytes), every kind listed, in order.
    pub removed: Vec<(&'static str, u64, u64)>,
    pub folders: Vec<&'static str>,
    /// (file, why).
    pub failed: Vec<(String, String)>,
    /// Files that are not clshim's: left.
    pub left: (u64, u64),
}

const KINDS: [&str; 13] = [
    "kept builds",
    "kept first launches",
    "entries",
    "requests",
    "claims",
    "leases",
    "set-aside marks",
    "source marks",
    "driver file lists",
    "labels",
    "temporary files",
    "warm.log",
    "damaged requests",
];

fn kind_name(k: &Kind) -> &'static str {
    match k {
        Kind::Kept { build: true, .. } => KINDS[0],
        Kind::Kept { build: false, .. } => KINDS[1],
        Kind::Entry { .. } => KINDS[2],
        Kind::Request { .. } => KINDS[3],
        Kind::Claim => KINDS[4],
        Kind::Lease { .. } => KINDS[5],
        Kind::SetAside(_) => KINDS[6],
        Kind::SourceMark => KINDS[7],
        Kind::DriverFiles => KINDS[8],
        Kind::DeviceLabel(_) | Kind::DriverLabel(_) => KINDS[9],
        Kind::Temporary => KINDS[10],
        Kind::WarmLog(_) => KINDS[11],
        Kind::DamagedRequest(_) => KINDS[12],
        Kind::Foreign => "",
    }
}

/// Removes every file of clshim's the survey of `store` found, then the folders of
/// clshim's it emptied.
pub fn clear(store: &Path, survey: &Survey) -> Cleared {
    let mut c = Cleared {
        removed: KINDS.iter().map(|k| (*k, 0, 0)).collect(),
        ..Cleared::default()
    };
    let mut emptied = Vec::new();
    let mut emptied_keys: Vec<&str> = Vec::new();
    for f in &survey.files {
        if !f.kind.clshims() {
            c.left.0 += 1;
            c.left.1 += f.len;
            continue;
        }
        match std::fs::remove_file(store.join(f.relative())) {
            Ok(()) => {
                let name = kind_name(&f.kind);
                if let Some(r) = c.removed.iter_mut().find(|r| r.0 == name) {
                    r.1 += 1;
                    r.2 += f.len;
                }
                if !f.folder.is_empty() && !emptied.contains(&f.folder) {
                    emptied.push(f.folder);
                }
                if let Some(sub) = f.sub.as_deref().filter(|s| !emptied_keys.contains(s)) {
                    emptied_keys.push(sub);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => c.failed.push((rel(f), e.to_string())),
        }
    }
    // Only folders this clear emptied: an empty folder of the same name that it found
    // empty may be the user's own. A kept compile's key folder first, then `compiles`.
    let compiles = store.join(clshim_format::kept::COMPILES);
    for sub in emptied_keys {
        let _ = std::fs::remove_dir(compiles.join(sub));
    }
    let kept_folder = [clshim_format::kept::COMPILES];
    for folder in FOLDERS
        .iter()
        .chain(&kept_folder)
        .filter(|f| emptied.contains(f))
    {
        if std::fs::remove_dir(store.join(folder)).is_ok() {
            c.folders.push(folder);
        }
    }
    c
}

fn rel(f: &File) -> String {
    f.relative().display().to_string()
}

impl Cleared {
    fn total(&self) -> (u64, u64) {
        self.removed
            .iter()
            .fold((0, 0), |(n, b), r| (n + r.1, b + r.2))
    }

    pub fn text(&self, store: &Path) -> String {
        let mut o = String::new();
        let (n, b) = self.total();
        let _ = writeln!(
            o,
            "clshim store: {}: removed {n} files, {}",
            terminal::text(&store.display().to_string()),
            size(b)
        );
        for (kind, files, bytes) in self.removed.iter().filter(|r| r.1 > 0) {
            let _ = writeln!(o, "  {files:>6}  {:>10}  {kind}", size(*bytes));
        }
        if !self.folders.is_empty() {
            let _ = writeln!(o, "  folders removed: {}", self.folders.join(", "));
        }
        if self.left.0 > 0 {
            let _ = writeln!(
                o,
                "  left alone: {} not clshim's ({})",
                self.left.0,
                size(self.left.1)
            );
        }
        o
    }

    pub fn json(&self, store: &Path) -> Value {
        let (n, b) = self.total();
        let removed: serde_json::Map<String, Value> = self
            .removed
            .iter()
            .map(|(k, files, bytes)| (k.to_string(), json!({"files": files, "bytes": bytes})))
            .collect();
        json!({
            "store": store.display().to_string(),
            "removed": removed,
            "total": {"files": n, "bytes": b},
            "folders_removed": self.folders,
            "failed": self.failed.iter()
                .map(|(f, why)| json!({"file": f, "why": why}))
                .collect::<Vec<_>>(),
            "not_clshims": {"files": self.left.0, "bytes": self.left.1},
        })
    }
}
