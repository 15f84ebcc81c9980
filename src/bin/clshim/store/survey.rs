//! What a native store holds, file by file, as `clshim store` lists it and `--clear`
//! removes it. This module owns the rule that says of a file whether it is clshim's: its
//! name must be one clshim gives (a key and a suffix, in the folder of its kind) and its
//! first bytes must be clshim's header for that kind (an entry's whole header declaring
//! exactly the file's length, as the warm step's cap decides what an entry is; a request's
//! magic; a label's first line; an empty source mark; a kept compile's header; a lease's
//! text), and it must be a regular file, looked at without following a link. Anything else
//! (a user's own file in a store pointed at a folder of theirs, a link, a FIFO, a file of a
//! name clshim never gives) is "not clshim's": counted, never read beyond its first bytes,
//! never removed. Files are read bounded and without blocking on a FIFO; a file that is not
//! the user's alone is read no further than its header (to know it is clshim's) and is set
//! apart, as the library and the warm step never take it.

use clshim_format::kept;
use clshim_format::labels::{self, DeviceLabel, DriverLabel};
use clshim_format::store::{self as format, EntryHeader, Request};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The store's folders, as clshim names them ("" is the store itself).
pub const FOLDERS: [&str; 5] = [
    "",
    format::REQUESTS,
    format::SOURCES,
    labels::DRIVERS,
    labels::DEVICES,
];

/// The longest uncacheable entry read for its reason: the reason and the manifest it
/// stands on are small; a larger one is named without its reason.
const MAX_REASON_ENTRY: u64 = 16 << 20;
/// A claim holds a host name, a pid and a time.
const MAX_CLAIM: u64 = 512;
/// A set-aside mark is empty, or says in a line why.
const MAX_MARK: u64 = 4096;
/// How much of warm.log's end is read for its last summary line.
const LOG_TAIL: u64 = 64 << 10;

/// What a file of the store is.
#[derive(Debug)]
pub enum Kind {
    /// A whole entry by its header; `not_kept`: the reason an entry flagged uncacheable
    /// gives (None for a kept build).
    Entry {
        header: EntryHeader,
        not_kept: Option<String>,
    },
    /// A request that decodes, for this device and driver build.
    Request {
        fingerprint: u64,
        driver: u64,
    },
    /// A request-named file with a request's magic that does not decode (the next warm
    /// step removes it): why.
    DamagedRequest(String),
    /// A warm step's claim on a request.
    Claim,
    /// A mark left where a request crashed a warm step's driver: what it says.
    SetAside(String),
    SourceMark,
    /// What a driver build reads for any program.
    DriverFiles,
    DeviceLabel(DeviceLabel),
    DriverLabel(DriverLabel),
    /// A kept compile (`clshim_format::kept`): a build (`build`) or a first launch, for this
    /// device and driver build, by its header.
    Kept {
        build: bool,
        fingerprint: u64,
        driver: u64,
    },
    /// A rank's lease on compiling a kept build or first launch (`clshim_format::kept`): a
    /// rank of `host` compiles it for every node sharing the store (or the job ended before
    /// it could remove it), with its holder's pid.
    Lease {
        host: String,
        pid: u32,
    },
    /// A store writer's temporary file, by its name (the cap's stamp among them).
    Temporary,
    /// `warm.log`, with its last summary line.
    WarmLog(Option<String>),
    /// Not clshim's: left alone.
    Foreign,
}

impl Kind {
    /// Whether the file is clshim's (and `--clear` removes it).
    pub fn clshims(&self) -> bool {
        !matches!(self, Kind::Foreign)
    }
}

/// One file of the store.
#[derive(Debug)]
pub struct File {
    /// The folder ([`FOLDERS`], or `compiles`) and name; `sub`: the key's folder below
    /// `compiles` of a kept compile's file.
    pub folder: &'static str,
    pub sub: Option<String>,
    pub name: String,
    pub len: u64,
    /// Modification time, in seconds since the epoch.
    pub mtime: i64,
    pub kind: Kind,
    /// Why it is not the user's alone (None: it is): clshim never takes such a file.
    pub not_yours: Option<String>,
}

impl File {
    /// The file's path relative to the store.
    pub fn relative(&self) -> PathBuf {
        let mut p = Path::new(self.folder).to_path_buf();
        if let Some(sub) = &self.sub {
            p.push(sub);
        }
        p.join(&self.name)
    }

    /// The key its name holds, for the kinds named by one.
    pub fn key(&self) -> Option<u64> {
        let stem = self.name.split('.').next()?;
        format::key_of_name(stem, "")
    }
}

/// A store, file by file, with the folders that could not be read.
#[derive(Debug, Default)]
pub struct Survey {
    pub files: Vec<File>,
    /// Folders clshim names that are there but could not be listed: (folder, why).
    pub unreadable: Vec<(String, String)>,
    pub devices: BTreeMap<u64, DeviceLabel>,
    pub drivers: BTreeMap<u64, DriverLabel>,
}

/// This process's effective user, whose store it is.
pub fn me() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::geteuid() }
}

/// Why a folder or file with metadata `m` is not the user's alone (None: it is).
pub fn not_alone(m: &std::fs::Metadata) -> Option<String> {
    format::not_users_alone(m.is_dir(), m.uid(), m.mode(), me())
}

/// Opens the regular file `path` for reading without following a link or blocking on a
/// FIFO put in its place since it was listed.
fn open(path: &Path) -> Option<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    f.metadata().ok()?.is_file().then_some(f)
}

/// Up to `n` bytes from the start of the regular file `path`.
fn head(path: &Path, n: u64) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    open(path)?.take(n).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The whole regular file `path`, if it is at most `max` bytes.
fn whole(path: &Path, max: u64) -> Option<Vec<u8>> {
    let bytes = head(path, max + 1)?;
    (bytes.len() as u64 <= max).then_some(bytes)
}

/// The last [`LOG_TAIL`] bytes of the regular file `path`.
fn tail(path: &Path) -> Option<Vec<u8>> {
    let mut f = open(path)?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL))).ok()?;
    let mut bytes = Vec::new();
    f.take(LOG_TAIL).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// How the lines a warm step writes in its log begin: `clshim warm` run by hand, and the
/// node's warm service (which the library starts unless `CLSHIM_WARM_SERVICE=0`).
const STEP: &str = "clshim warm: ";
const SERVICE: &str = "clshim warm --service: ";

/// The last summary line a warm step wrote in its log (`clshim warm: STORE: N made, ...
/// N evicted`, or the service's `clshim warm --service: STORE: N made, ...`), from the
/// log's end.
fn last_summary(path: &Path) -> Option<String> {
    String::from_utf8_lossy(&tail(path)?)
        .lines()
        .rev()
        .find(|l| {
            l.contains(" made, ")
                && ((l.starts_with(STEP) && l.contains(" evicted")) || l.starts_with(SERVICE))
        })
        .map(str::to_string)
}

/// What the file `name` of `folder` (at `path`, `len` bytes, looked at without following a
/// link and found a regular file) is; `yours`: whether it is the user's alone, else only
/// its header is read.
fn classify(folder: &str, name: &str, path: &Path, len: u64, yours: bool) -> Kind {
    if format::is_temporary_name(name) {
        return Kind::Temporary;
    }
    let key = |suffix| format::key_of_name(name, suffix);
    match folder {
        "" if key(".bin").is_some() => {
            let Some(h) = head(path, format::ENTRY_HEADER as u64)
                .and_then(|b| EntryHeader::parse(&b).ok())
                .filter(|h| h.names_whole_file(name, len))
            else {
                return Kind::Foreign;
            };
            let not_kept = (h.flags & format::UNCACHEABLE != 0).then(|| {
                if !yours {
                    return "(not read: not yours alone)".to_string();
                }
                match whole(path, MAX_REASON_ENTRY).map(|b| {
                    format::open_entry(&b)
                        .map(|(_, p)| String::from_utf8_lossy(p.payload).into_owned())
                }) {
                    Some(Ok(why)) => why,
                    Some(Err(why)) => format!("(damaged: {why})"),
                    None => format!("(not read: {len} bytes)"),
                }
            });
            Kind::Entry {
                header: h,
                not_kept,
            }
        }
        // The driver's own output may come first (a crash's), so a line of clshim's
        // anywhere in either end of the log says it is the warm step's.
        "" if name == "warm.log" => {
            let ends = [head(path, LOG_TAIL), tail(path)];
            let clshims = ends.iter().flatten().any(|b| {
                String::from_utf8_lossy(b)
                    .lines()
                    .any(|l| [STEP, SERVICE, "clshim: "].iter().any(|p| l.starts_with(p)))
            });
            match clshims {
                true => Kind::WarmLog(last_summary(path)),
                false => Kind::Foreign,
            }
        }
        "requests" if key(".req").is_some() => {
            if head(path, 8).as_deref() != Some(&format::REQUEST_MAGIC[..]) {
                return Kind::Foreign;
            }
            if !yours {
                return Kind::DamagedRequest("not read".into());
            }
            match whole(path, format::MAX_REQUEST).map(|b| Request::decode(&b)) {
                Some(Ok(r)) => Kind::Request {
                    fingerprint: r.fingerprint,
                    driver: r.driver,
                },
                Some(Err(why)) => Kind::DamagedRequest(why),
                None => Kind::DamagedRequest("cannot be read whole".into()),
            }
        }
        "requests" if key(".claim").is_some() => match whole(path, MAX_CLAIM) {
            Some(b) if format::Claim::parse(&b).is_some() => Kind::Claim,
            _ => Kind::Foreign,
        },
        "requests" if key(".set-aside").is_some() => match whole(path, MAX_MARK) {
            Some(b) => Kind::SetAside(
                String::from_utf8_lossy(&b)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_string(),
            ),
            None => Kind::Foreign,
        },
        "sources" if key("").is_some() && len == 0 => Kind::SourceMark,
        "drivers" if key(".files").is_some() => match head(path, 8) {
            Some(b)
                if b == labels::DRIVER_FILES_MAGIC
                    || b == labels::DRIVER_FILES_FRONT_END_MAGIC
                    || b == labels::DRIVER_FILES_MAGIC_V1 =>
            {
                Kind::DriverFiles
            }
            _ => Kind::Foreign,
        },
        "drivers" | "devices" => {
            let Some(id) = key(".txt") else {
                return Kind::Foreign;
            };
            let text = whole(path, labels::MAX_LABEL).unwrap_or_default();
            let text = String::from_utf8_lossy(&text);
            let label = if folder == "drivers" {
                DriverLabel::parse(&text, id).map(Kind::DriverLabel)
            } else {
                DeviceLabel::parse(&text, id).map(Kind::DeviceLabel)
            };
            label.unwrap_or(Kind::Foreign)
        }
        _ => Kind::Foreign,
    }
}

/// Every file of the store `store` (whose folders were checked to be the user's alone),
/// each folder's in name order.
pub fn survey(store: &Path) -> Survey {
    let mut s = Survey::default();
    for folder in FOLDERS {
        let dir = store.join(folder);
        match dir.symlink_metadata() {
            Ok(m) if m.is_dir() => {}
            _ => continue,
        }
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                s.unreadable.push((folder.to_string(), e.to_string()));
                continue;
            }
        };
        let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for os_name in names {
            let path = dir.join(&os_name);
            let Ok(m) = path.symlink_metadata() else {
                continue;
            };
            // The store's own folders are listed in their turn.
            let listed_apart = FOLDERS
                .iter()
                .chain(&[kept::COMPILES])
                .any(|f| *f == os_name);
            if folder.is_empty() && m.is_dir() && listed_apart {
                continue;
            }
            let name = os_name.to_string_lossy().into_owned();
            let not_yours = if m.is_file() { not_alone(&m) } else { None };
            let kind = match os_name.to_str() {
                Some(n) if m.is_file() => classify(folder, n, &path, m.len(), not_yours.is_none()),
                _ => Kind::Foreign,
            };
            if not_yours.is_none() {
                match &kind {
                    Kind::DeviceLabel(l) => {
                        s.devices
                            .insert(format::key_of_name(&name, ".txt").unwrap_or(0), l.clone());
                    }
                    Kind::DriverLabel(l) => {
                        s.drivers
                            .insert(format::key_of_name(&name, ".txt").unwrap_or(0), l.clone());
                    }
                    _ => {}
                }
            }
            s.files.push(File {
                folder,
                sub: None,
                name,
                // A folder's or a link's own size is not what the store holds.
                len: if m.is_file() { m.len() } else { 0 },
                mtime: m.mtime(),
                kind,
                not_yours,
            });
        }
    }
    survey_kept(store, &mut s);
    s
}

/// What the file `name` of a key's folder below `compiles` is: a kept compile by its header
/// (the kind its name says), a lease by its text, or a temporary file.
fn classify_kept(name: &str, path: &Path) -> Kind {
    if format::is_temporary_name(name) {
        return Kind::Temporary;
    }
    if let Some(what) = name.strip_suffix(".lease") {
        let named = what == "build" || format::key_of_name(what, "").is_some();
        return match whole(path, MAX_CLAIM)
            .as_deref()
            .and_then(kept::parse_lease)
        {
            Some((host, pid)) if named => Kind::Lease { host, pid },
            _ => Kind::Foreign,
        };
    }
    if !name.ends_with(kept::SUFFIX) {
        return Kind::Foreign;
    }
    let Some(h) = head(path, 40).filter(|h| h.len() == 40 && h[..8] == kept::KEPT_MAGIC[..]) else {
        return Kind::Foreign;
    };
    let word = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap_or_default());
    let kind = u32::from_le_bytes(h[12..16].try_into().unwrap_or_default());
    let build = name == kept::BUILD_FILE;
    if kind != if build { 1 } else { 2 } {
        return Kind::Foreign;
    }
    Kind::Kept {
        build,
        fingerprint: word(24),
        driver: word(32),
    }
}

/// The kept compiles of the store: each key's folder below `compiles`, file by file (the
/// cap's stamp in `compiles` itself among them).
fn survey_kept(store: &Path, s: &mut Survey) {
    let dir = store.join(kept::COMPILES);
    if !dir.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        return;
    }
    let rd = match std::fs::read_dir(&dir) {
        Ok(rd) => rd,
        Err(e) => {
            s.unreadable
                .push((kept::COMPILES.to_string(), e.to_string()));
            return;
        }
    };
    let mut subs: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
    subs.sort();
    for sub in subs {
        let path = dir.join(&sub);
        let Ok(m) = path.symlink_metadata() else {
            continue;
        };
        let sub_name = sub.to_string_lossy().into_owned();
        let is_key = sub_name.len() == 16 && u64::from_str_radix(&sub_name, 16).is_ok();
        if m.is_file() && sub_name == clshim_format::cap::CAPPED && m.len() == 0 {
            s.files.push(File {
                folder: kept::COMPILES,
                sub: None,
                name: sub_name,
                len: 0,
                mtime: m.mtime(),
                kind: Kind::Temporary,
                not_yours: not_alone(&m),
            });
            continue;
        }
        if !m.is_dir() || !is_key {
            s.files.push(File {
                folder: kept::COMPILES,
                sub: None,
                name: sub_name,
                len: if m.is_file() { m.len() } else { 0 },
                mtime: m.mtime(),
                kind: Kind::Foreign,
                not_yours: None,
            });
            continue;
        }
        if let Some(why) = not_alone(&m) {
            s.unreadable
                .push((format!("{}/{sub_name}", kept::COMPILES), why));
            continue;
        }
        let mut names: Vec<_> = std::fs::read_dir(&path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for os_name in names {
            let file = path.join(&os_name);
            let Ok(fm) = file.symlink_metadata() else {
                continue;
            };
            let not_yours = if fm.is_file() { not_alone(&fm) } else { None };
            let kind = match os_name.to_str() {
                Some(n) if fm.is_file() => classify_kept(n, &file),
                _ => Kind::Foreign,
            };
            s.files.push(File {
                folder: kept::COMPILES,
                sub: Some(sub_name.clone()),
                name: os_name.to_string_lossy().into_owned(),
                len: if fm.is_file() { fm.len() } else { 0 },
                mtime: fm.mtime(),
                kind,
                not_yours,
            });
        }
    }
}

/// Why the store at `store` may not be read: each of its folders that exists must be a
/// folder, by its own name, that is the user's alone. The store, `requests` and `sources`
/// are checked as `clshim warm` checks them; `drivers` and `devices` the same way here.
pub fn check(store: &Path) -> Result<(), String> {
    crate::warm::check_store(store)?;
    for folder in [labels::DRIVERS, labels::DEVICES] {
        let dir = store.join(folder);
        let m = match dir.symlink_metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        let why = if m.file_type().is_symlink() {
            Some("a symbolic link: a store's folders are opened only by their own names".into())
        } else if !m.is_dir() {
            Some("not a folder".to_string())
        } else {
            not_alone(&m)
        };
        if let Some(why) = why {
            return Err(format!("{}: {why}", dir.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `classify` says of a `warm.log` holding `text`, written to a file of this test's
    /// own (the classification reads the file by its path).
    fn warm_log(text: &str) -> Kind {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!("clshim-warm-log-{}-{n}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        let kind = classify("", "warm.log", &p, text.len() as u64, true);
        std::fs::remove_file(&p).unwrap();
        kind
    }

    fn summary(k: Kind) -> Option<String> {
        match k {
            Kind::WarmLog(line) => line,
            other => panic!("not a warm.log: {other:?}"),
        }
    }

    #[test]
    fn a_log_only_the_service_wrote_is_clshims_and_its_line_the_last() {
        let service = "clshim warm --service: /s: 1 made, 0 not kept, 0 failed while the job \
                       ran; 0.8 s on up to 2 workers at idle priority";
        assert_eq!(
            summary(warm_log(&format!("{service}\n"))).as_deref(),
            Some(service)
        );
        let step = "clshim warm: /s: 2 made, 0 present, 0 not kept (the reasons above), 0 \
                    left for a later step, 0 claimed by another process, 0 for devices or \
                    driver builds this host does not have, 0 stale, 0 failed, 0 evicted; 1.0 s \
                    on up to 2 workers";
        let both = format!("{step}\n{service}\nthe driver's own output\n");
        assert_eq!(summary(warm_log(&both)).as_deref(), Some(service));
        let both = format!("{service}\n{step}\n");
        assert_eq!(summary(warm_log(&both)).as_deref(), Some(step));
        // A step's note is no summary; a file without a line of clshim's is the user's.
        let note = "clshim warm: /s: nothing to make: every kept compile has the driver's binary";
        assert_eq!(summary(warm_log(&format!("{note}\n"))), None);
        assert!(matches!(warm_log("my own notes\n"), Kind::Foreign));
    }
}
