//! Reading trace directories (docs/trace-schema.md, defined in `schema`,
//! whose names and version this reader uses). This module owns
//! which files count as trace files (`*.jsonl`, and `*.jsonl.N` for renamed
//! duplicates), how they are opened (regular files only, without blocking on a FIFO or
//! reading a device: a trace directory may hold anything), how much is read (a file up
//! to the size it had when opened, a line up to [`MAX_LINE`]), and parsing each line
//! into a borrowed [`Record`] checked for plausible values. Records are handed to a
//! callback one at a time and never kept, so memory does not grow with the input.
//! Everything that cannot be used becomes a [`Problem`] naming file and line.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The schema the library writes, its event names and pocl's platform name: this reader
/// understands that version and no newer one.
pub use crate::schema::{Event, POCL_PLATFORM, VERSION as SCHEMA};
/// Longest line read; a longer one is skipped (a record is a few hundred bytes; a
/// kernel list of thousands of names stays far below this).
pub const MAX_LINE: usize = 1 << 20;
/// Most bytes read of one file: 4 GiB is some ten million records, where an hour of a
/// busy rank writes tens of megabytes; a larger (sparse or endless) file is read this
/// far, and named.
pub const MAX_FILE: u64 = 4 << 30;
/// Plausible `ts`: 2000-01-01 to 2200-01-01 (Unix seconds).
pub const TS_MIN: f64 = 946_684_800.0;
pub const TS_MAX: f64 = 7_258_118_400.0;
/// Plausible `seconds`: at most a week.
pub const SECONDS_MAX: f64 = 7.0 * 86_400.0;

/// Something skipped: `file:line: reason` (`line` 0 when it concerns the whole file).
#[derive(Debug, Clone)]
pub struct Problem {
    pub file: PathBuf,
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.reason)
        } else {
            write!(f, "{}:{}: {}", self.file.display(), self.line, self.reason)
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Device<'a> {
    #[serde(default, borrow)]
    pub name: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub r#type: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub platform: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub driver: Option<Text<'a>>,
    /// Whether `CLSHIM_DEVICES` selected the device (the binary policy acts on it).
    #[serde(default)]
    pub matched: Option<bool>,
    /// pocl's CPU driver starts this many worker threads per process.
    #[serde(default)]
    pub compute_units: Option<u64>,
}

impl Device<'_> {
    /// pocl's CPU driver: the device whose binary queries cost a second compile, and
    /// whose first launches compile a size-specialised kernel.
    pub fn is_pocl_cpu(&self) -> bool {
        self.platform.as_deref() == Some(POCL_PLATFORM) && self.r#type.as_deref() == Some("CPU")
    }
}

#[derive(Debug, Deserialize)]
pub struct Source<'a> {
    #[serde(default, borrow)]
    pub hash: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub origin: Option<Text<'a>>,
}

/// A build record's kept texts (`CLSHIM_TRACE_SOURCES=1`): references into `sources/`.
#[derive(Debug, Deserialize)]
pub struct Kept<'a> {
    #[serde(default, borrow)]
    pub source: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub options: Option<Text<'a>>,
}

/// A JSON string that borrows from the line unless it holds escapes (serde's own
/// `Cow` always copies inside an `Option` or a `Vec`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text<'a>(pub Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'a>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A program id as written: an integer (what clshim writes) or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Id {
    Int(i64),
    Text(String),
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Int(n) => write!(f, "{n}"),
            Id::Text(s) => f.write_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a program id (integer or string)")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(i64::try_from(v).map_or_else(|_| Id::Text(v.to_string()), Id::Int))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id, E> {
                Ok(Id::Text(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(Id::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// One trace line, with the fields the report uses (others are skipped unparsed into
/// values). Strings borrow from the line where they hold no escapes.
#[derive(Debug, Deserialize)]
pub struct Record<'a> {
    pub schema: u64,
    /// By the names `schema` gives events; an unknown one fails the record (`parse_line`
    /// says which).
    pub event: Event,
    pub pid: u64,
    #[serde(default)]
    pub rank: Option<i64>,
    #[serde(default)]
    pub tid: Option<u64>,
    pub ts: f64,
    pub seconds: f64,
    /// CPU seconds of the calling thread (a first launch: of the other threads).
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
    /// A first launch's CPU clock at its start (`cpu_seconds` counts from there).
    #[serde(default)]
    pub cpu_clock: Option<f64>,
    /// Random per process (16 hex digits): tells apart processes that share a pid.
    #[serde(default, borrow)]
    pub instance: Option<Text<'a>>,
    // process
    #[serde(default, borrow)]
    pub host: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub policy: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub exe: Option<Text<'a>>,
    /// The compiler caches the process would use (a value of another shape is dropped).
    #[serde(default, deserialize_with = "lenient")]
    pub caches: Option<Vec<crate::schema::CacheDir>>,
    /// The process record says the writer ends its file with an `exit` record.
    #[serde(default)]
    pub exit_recorded: Option<bool>,
    /// The process record says the program cache was on.
    #[serde(default)]
    pub program_cache: Option<bool>,
    /// The CPUs the process could use (a value of another shape is dropped).
    #[serde(default, deserialize_with = "lenient")]
    pub cpus: Option<crate::schema::Cpus>,
    #[serde(default, borrow)]
    pub kept: Option<Kept<'a>>,
    // program events
    #[serde(default)]
    pub program: Option<Id>,
    #[serde(default, borrow)]
    pub call: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub result_name: Option<Text<'a>>,
    /// A binary query's entry is null for a device that could not be queried.
    #[serde(default, borrow)]
    pub devices: Option<Vec<Option<Device<'a>>>>,
    #[serde(default, borrow)]
    pub options: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub source: Option<Source<'a>>,
    #[serde(default, borrow)]
    pub kernels: Option<Vec<Text<'a>>>,
    /// A failed build's kernels as its source declares them, and its first error line.
    #[serde(default, borrow)]
    pub source_kernels: Option<Vec<Text<'a>>>,
    #[serde(default, borrow)]
    pub error: Option<Text<'a>>,
    #[serde(default)]
    pub inputs: Option<Vec<Option<Id>>>,
    #[serde(default, borrow)]
    pub param: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub action: Option<Text<'a>>,
    /// A binary query's action per device, in `devices` order.
    #[serde(default, borrow)]
    pub actions: Option<Vec<Text<'a>>>,
    /// A binary load's `native` or `recipe`.
    #[serde(default, borrow)]
    pub made_from: Option<Text<'a>>,
    /// A build the program cache served (`store`).
    #[serde(default, borrow)]
    pub served: Option<Text<'a>>,
    /// A build or first launch under the program cache: whose compile it used (`compiled`,
    /// `from_peer`, `from_store`, `own_cache`, `compiled_after_waiting`; `origin` reads
    /// them), and how long it waited for a peer or another node.
    #[serde(default, borrow)]
    pub shared: Option<Text<'a>>,
    #[serde(default)]
    pub peer_wait_seconds: Option<f64>,
    /// With `from_store`: the node whose rank kept the compile taken.
    #[serde(default, borrow)]
    pub from_host: Option<Text<'a>>,
    /// A compile made under the program cache: whether it entered the store, or why not.
    #[serde(default)]
    pub kept_in_store: Option<bool>,
    #[serde(default, borrow)]
    pub not_kept: Option<Text<'a>>,
    /// A source build the program cache did not serve: why (a value of another shape is
    /// dropped).
    #[serde(default, deserialize_with = "lenient")]
    pub not_served: Option<NotServed>,
    /// A binary load made again from its recipe: why no native binary was used, and of
    /// which kind.
    #[serde(default, borrow)]
    pub native_miss: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub native_miss_kind: Option<Text<'a>>,
    // first_launch
    #[serde(default, borrow)]
    pub kernel: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub device: Option<Device<'a>>,
    // A value of another shape skips the record, as sizes that disagree do (`launch_sizes`).
    #[serde(default)]
    pub work_dim: Option<u64>,
    #[serde(default)]
    pub global_size: Option<Vec<u64>>,
    #[serde(default)]
    pub local_size: Option<Vec<u64>>,
}

/// A build's `not_served`.
#[derive(Debug, Clone, Deserialize)]
pub struct NotServed {
    pub kind: String,
    #[serde(default)]
    pub why: String,
}

impl NotServed {
    /// What the report says of builds that missed so (`schema::miss_phrase`); a kind this
    /// reader does not know is said with its own words.
    pub fn phrase(&self) -> String {
        match crate::schema::Miss::parse(&self.kind) {
            Some(k) => crate::schema::miss_phrase(k, &self.why),
            None => format!("not served: {}", self.why),
        }
    }
}

/// A field read leniently: a value of another shape than `T` reads as absent (the record
/// stays), for fields the report only shows.
fn lenient<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(v).ok())
}

impl Record<'_> {
    pub fn tid(&self) -> u64 {
        self.tid.unwrap_or(self.pid)
    }

    pub fn hash(&self) -> Option<&str> {
        self.source.as_ref().and_then(|s| s.hash.as_deref())
    }

    pub fn kernels(&self) -> &[Text<'_>] {
        self.kernels.as_deref().unwrap_or(&[])
    }

    /// The devices that could be queried.
    pub fn devices(&self) -> impl Iterator<Item = &Device<'_>> {
        self.devices.iter().flatten().flatten()
    }

    /// A binary query forwarded to a pocl CPU device that `CLSHIM_DEVICES` selects: pocl
    /// compiled a second time although the policy could have answered.
    pub fn forwarded_on_selected_pocl_cpu(&self) -> bool {
        let devices = self.devices.as_deref().unwrap_or(&[]);
        let actions = self.actions.as_deref().unwrap_or(&[]);
        devices.iter().enumerate().any(|(i, d)| {
            let action = actions.get(i).map(|a| &**a).or(self.action.as_deref());
            d.as_ref()
                .is_some_and(|d| d.is_pocl_cpu() && d.matched == Some(true))
                && action == Some("forward")
        })
    }

    /// Every device the record concerns (`devices`, or a first launch's `device`).
    pub fn any_pocl_cpu(&self) -> bool {
        self.devices().any(Device::is_pocl_cpu)
            || self.device.as_ref().is_some_and(Device::is_pocl_cpu)
    }

    pub fn failed(&self) -> bool {
        self.result_name
            .as_deref()
            .is_some_and(|n| n != "CL_SUCCESS")
    }
}

/// The version and the event only, to say why a record does not fit: a newer schema, or
/// an event this reader does not know.
#[derive(Deserialize)]
struct Head {
    schema: Option<serde_json::Value>,
    event: Option<serde_json::Value>,
}

/// `clshim-<host>-r<rank>-p<pid>.jsonl` or `clshim-<host>-p<pid>.jsonl` (without a rank;
/// `-r-` before clshim named such files so), possibly followed by `.N`: the host part.
pub fn host_from_name(name: &str) -> Option<String> {
    let stem = name.strip_prefix("clshim-")?;
    let stem = &stem[..stem.find(".jsonl")?];
    let (rest, _pid) = stem.rsplit_once("-p")?;
    let host = match rest.rsplit_once("-r") {
        Some((host, rank)) if rank == "-" || rank.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => rest,
    };
    (!host.is_empty()).then(|| host.to_string())
}

fn is_trace_name(name: &str) -> bool {
    if let Some(i) = name.rfind(".jsonl") {
        let tail = &name[i + ".jsonl".len()..];
        tail.is_empty()
            || (tail.len() > 1
                && tail.starts_with('.')
                && tail[1..].bytes().all(|b| b.is_ascii_digit()))
    } else {
        false
    }
}

/// Lists the trace files of `dir`, sorted by name. An error here (no such directory,
/// not a directory) is the caller's usage error.
pub fn list(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if is_trace_name(&name.to_string_lossy()) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// What a file was when the report first read it: the second pass of `--chrome`
/// reads the same file and the same bytes, or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
}

fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

/// Opens a trace file for reading if it is a regular file (following a symbolic link,
/// but never opening what it points to unless that is a regular file). `O_NONBLOCK`
/// keeps a FIFO that appears between the check and the open from blocking; the
/// descriptor's own `fstat` decides. `len` bounds what will be read.
pub fn open_regular(path: &Path) -> Result<(File, Identity), String> {
    let describe = |e: &std::io::Error| format!("cannot read: {}", crate::library::describe(e));
    let meta = std::fs::metadata(path).map_err(|e| describe(&e))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "cannot read: {} (only regular files are read)",
            kind_of(meta.file_type())
        ));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| describe(&e))?;
    let meta = file.metadata().map_err(|e| describe(&e))?;
    if !meta.file_type().is_file() {
        return Err(format!(
            "cannot read: {} (only regular files are read)",
            kind_of(meta.file_type())
        ));
    }
    Ok((
        file,
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
        },
    ))
}

/// The first `\n` in `s`, eight bytes at a time (a byte-wise search was a fifth of
/// the report's time on large directories).
fn find_newline(s: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    const NL: u64 = LO * b'\n' as u64;
    let mut chunks = s.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let x = u64::from_le_bytes(c.try_into().expect("8 bytes")) ^ NL;
        // A zero byte in x (a newline in c) sets its high bit here.
        if (x.wrapping_sub(LO) & !x & HI) != 0 {
            return c.iter().position(|&b| b == b'\n').map(|i| base + i);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| base + i)
}

/// Reads lines of at most `max` bytes. A longer line is consumed without being kept.
pub struct Lines<R> {
    reader: R,
    buf: Vec<u8>,
    max: usize,
    /// 1-based number of the line last returned.
    pub lineno: usize,
}

/// One line: its bytes (without the newline), whether a newline ended it (false for a
/// last line cut off), or how long it was when it exceeded the limit.
pub enum Line<'a> {
    Text { bytes: &'a [u8], complete: bool },
    TooLong(usize),
}

impl<R: BufRead> Lines<R> {
    pub fn new(reader: R, max: usize) -> Lines<R> {
        Lines {
            reader,
            buf: Vec::new(),
            max,
            lineno: 0,
        }
    }

    pub fn next_line(&mut self) -> std::io::Result<Option<(usize, Line<'_>)>> {
        self.buf.clear();
        let mut total = 0usize;
        let complete = loop {
            let avail = match self.reader.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                if total == 0 {
                    return Ok(None);
                }
                break false;
            }
            let (take, used, done) = match find_newline(avail) {
                Some(i) => (i, i + 1, true),
                None => (avail.len(), avail.len(), false),
            };
            total += take;
            if total <= self.max {
                self.buf.extend_from_slice(&avail[..take]);
            }
            self.reader.consume(used);
            if done {
                break true;
            }
        };
        self.lineno += 1;
        if total > self.max {
            return Ok(Some((self.lineno, Line::TooLong(total))));
        }
        let bytes = self.buf.strip_suffix(b"\r").unwrap_or(&self.buf);
        Ok(Some((self.lineno, Line::Text { bytes, complete })))
    }
}

/// Parses and checks one line. `Ok(None)`: a blank line. `Err`: why it is skipped.
pub fn parse_line(line: &[u8], complete: bool) -> Result<Option<Record<'_>>, String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    // One UTF-8 check of the whole line lets serde_json skip checking every string.
    let parsed = match std::str::from_utf8(line) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(line),
    };
    let mut r: Record = match parsed {
        Ok(r) => r,
        Err(e) => {
            let head = serde_json::from_slice::<Head>(line).ok();
            let newer = head
                .as_ref()
                .and_then(|h| h.schema.as_ref()?.as_u64())
                .filter(|&s| s > SCHEMA);
            let unknown_event = head
                .as_ref()
                .and_then(|h| h.event.as_ref()?.as_str())
                .filter(|name| Event::parse(name).is_none());
            return Err(if let Some(s) = newer {
                format!("record of schema version {s}, newer than this clshim reads ({SCHEMA})")
            } else if let Some(name) = unknown_event {
                format!("unknown event '{name}'")
            } else if e.is_eof() && !complete {
                "truncated last line (the process was still writing, or died)".into()
            } else if e.is_syntax() || e.is_eof() {
                format!("not JSON: {e}")
            } else {
                format!("not a schema {SCHEMA} record: {e}")
            });
        }
    };
    if r.schema > SCHEMA {
        return Err(format!(
            "record of schema version {}, newer than this clshim reads ({SCHEMA})",
            r.schema
        ));
    }
    if !(TS_MIN..=TS_MAX).contains(&r.ts) {
        return Err(format!(
            "implausible ts {:e} (expected Unix seconds between 2000 and 2200)",
            r.ts
        ));
    }
    if !(0.0..=SECONDS_MAX).contains(&r.seconds) {
        return Err(format!(
            "implausible seconds {:e} (expected 0 to {SECONDS_MAX}, a week)",
            r.seconds
        ));
    }
    if r.event == Event::FirstLaunch {
        launch_sizes(&r)?;
    }
    // CPU time is an addition the report does without: an implausible one is dropped, not
    // the record. A first launch's may exceed its wall time (many threads), a week of
    // 4,096 threads at most.
    let plausible = |c: &f64| (0.0..=SECONDS_MAX * 4096.0).contains(c);
    r.cpu_seconds = r.cpu_seconds.filter(plausible);
    r.cpu_clock = r.cpu_clock.filter(plausible);
    Ok(Some(r))
}

/// Largest work-group (work-items in one group) a plausible accepted launch has: devices
/// report at most a few thousand (CL_DEVICE_MAX_WORK_GROUP_SIZE).
const WORK_GROUP_MAX: u64 = 1 << 32;

/// A first launch's sizes as clshim writes them: `work_dim` of 1 to 3, that many global
/// sizes, and no local size or that many. A launch the implementation accepted has a
/// global work-item count that fits 64 bits and work-groups of 1 to [`WORK_GROUP_MAX`]
/// work-items (a refused launch keeps whatever sizes the application passed).
fn launch_sizes(r: &Record<'_>) -> Result<(), String> {
    let dim = match r.work_dim {
        Some(d @ 1..=3) => d as usize,
        Some(d) => {
            return Err(format!(
                "implausible first_launch work_dim {d} (expected 1 to 3)"
            ))
        }
        None => return Err("first_launch without work_dim".into()),
    };
    let global = r.global_size.as_deref().unwrap_or(&[]);
    if global.len() != dim {
        return Err(format!(
            "first_launch global_size of {} sizes for work_dim {dim}",
            global.len()
        ));
    }
    if let Some(local) = r.local_size.as_deref().filter(|l| l.len() != dim) {
        return Err(format!(
            "first_launch local_size of {} sizes for work_dim {dim}",
            local.len()
        ));
    }
    if r.result_name.as_deref().is_some_and(|n| n != "CL_SUCCESS") {
        return Ok(());
    }
    if global
        .iter()
        .try_fold(1u64, |p, &g| p.checked_mul(g))
        .is_none()
    {
        return Err(format!(
            "implausible first_launch global_size {global:?} (more work-items than 64 bits count)"
        ));
    }
    if let Some(local) = r.local_size.as_deref() {
        let group = local.iter().try_fold(1u64, |p, &l| p.checked_mul(l));
        if !group.is_some_and(|g| (1..=WORK_GROUP_MAX).contains(&g)) {
            return Err(format!(
                "implausible first_launch local_size {local:?} (expected work-groups of 1 to \
                 {WORK_GROUP_MAX} work-items)"
            ));
        }
    }
    Ok(())
}

/// Reads one file record by record: `f` gets each usable record with its line number,
/// `problem` each skipped line. At most `limit` bytes are read (the size the file had
/// when opened): a file still growing, or replaced, is read as it was.
pub fn for_each_record(
    file: File,
    limit: u64,
    mut f: impl FnMut(usize, Record<'_>),
    mut problem: impl FnMut(usize, String),
) -> std::io::Result<()> {
    let mut lines = Lines::new(
        BufReader::with_capacity(1 << 18, file.take(limit)),
        MAX_LINE,
    );
    loop {
        let (lineno, line) = match lines.next_line()? {
            None => return Ok(()),
            Some(l) => l,
        };
        match line {
            Line::TooLong(n) => {
                problem(
                    lineno,
                    format!("line of {n} bytes, longer than the {MAX_LINE}-byte limit"),
                );
            }
            Line::Text { bytes, complete } => match parse_line(bytes, complete) {
                Ok(Some(r)) => f(lineno, r),
                Ok(None) => {}
                Err(reason) => problem(lineno, reason),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newline_search() {
        let mut v = vec![b'a'; 40];
        assert_eq!(find_newline(&v), None);
        for i in 0..40 {
            v[i] = b'\n';
            assert_eq!(find_newline(&v), Some(i));
            assert_eq!(find_newline(&v[..i]), None);
            v[i] = 0x8a; // a byte with the high bit set is not a newline
            assert_eq!(find_newline(&v), None);
            v[i] = b'a';
        }
    }

    #[test]
    fn names() {
        assert_eq!(
            host_from_name("clshim-node-1-r3-p42.jsonl").as_deref(),
            Some("node-1")
        );
        assert_eq!(
            host_from_name("clshim-h-r-p42.jsonl.2").as_deref(),
            Some("h")
        );
        assert_eq!(
            host_from_name("clshim-node-1-p42.jsonl").as_deref(),
            Some("node-1")
        );
        assert!(is_trace_name("a.jsonl") && is_trace_name("a.jsonl.3"));
        assert!(
            !is_trace_name("a.json") && !is_trace_name("a.jsonl.x") && !is_trace_name("a.jsonl.")
        );
    }

    fn read(text: &str) -> (usize, Vec<(usize, String)>) {
        let mut lines = Lines::new(text.as_bytes(), 200);
        let (mut n, mut probs) = (0, Vec::new());
        while let Some((no, l)) = lines.next_line().unwrap() {
            match l {
                Line::TooLong(len) => probs.push((no, format!("too long {len}"))),
                Line::Text { bytes, complete } => match parse_line(bytes, complete) {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => {}
                    Err(e) => probs.push((no, e)),
                },
            }
        }
        (n, probs)
    }

    #[test]
    fn problems_are_counted_and_named() {
        let good =
            r#"{"schema":1,"event":"build","pid":1,"rank":0,"tid":1,"ts":1.75e9,"seconds":0.5}"#;
        let long = format!("{{\"x\":\"{}\"}}", "a".repeat(300));
        let text = format!(
            "{good}\nnot json\n{{\"schema\":2,\"event\":\"build\"}}\n{{\"schema\":1,\"event\":\"x\",\"pid\":1,\"ts\":1.75e9,\"seconds\":0}}\n{good}\n\n{long}\n{}\n{{\"schema\":1,\"ev",
            good.replace("1.75e9", "1e308")
        );
        let (n, reasons) = read(&text);
        assert_eq!(n, 2);
        assert_eq!(reasons.len(), 6, "{reasons:?}");
        assert!(reasons[0].0 == 2 && reasons[0].1.starts_with("not JSON"));
        assert!(reasons[1].0 == 3 && reasons[1].1.contains("schema version 2"));
        assert!(reasons[2].0 == 4 && reasons[2].1.contains("unknown event"));
        assert_eq!(reasons[3], (7, "too long 308".to_string()));
        assert!(reasons[4].0 == 8 && reasons[4].1.starts_with("implausible ts 1e308"));
        assert!(reasons[5].0 == 9 && reasons[5].1.starts_with("truncated last line"));
    }

    #[test]
    fn implausible_values_are_refused() {
        let rec = |ts: &str, s: &str| {
            format!(r#"{{"schema":1,"event":"build","pid":1,"ts":{ts},"seconds":{s}}}"#)
        };
        for (ts, s, ok) in [
            ("1.75e9", "0.5", true),
            ("1.75e9", "-1e308", false),
            ("-1e308", "0", false),
            ("1.75e9", "-0.5", false),
            ("100", "0", false),
            ("9e9", "0", false),
            ("1.75e9", "700000", false),
            ("1.75e9", "86400", true),
        ] {
            let line = rec(ts, s);
            assert_eq!(parse_line(line.as_bytes(), true).is_ok(), ok, "{ts} {s}");
        }
    }

    #[test]
    fn first_launch_sizes_that_disagree_or_are_absurd_are_refused() {
        let rec = |fields: &str| {
            format!(
                r#"{{"schema":1,"event":"first_launch","pid":1,"ts":1.75e9,"seconds":0.1,{fields}}}"#
            )
        };
        for (fields, why) in [
            (r#""work_dim":1,"global_size":[64],"local_size":[16]"#, None),
            (
                r#""work_dim":3,"global_size":[8,4,2],"local_size":null"#,
                None,
            ),
            (r#""work_dim":2,"global_size":[8,4]"#, None),
            // A refused launch keeps the application's sizes, however odd.
            (
                r#""work_dim":1,"global_size":[18446744073709551615],"local_size":[0],"result_name":"CL_INVALID_WORK_GROUP_SIZE""#,
                None,
            ),
            (
                r#""work_dim":2,"global_size":[64],"local_size":[16]"#,
                Some("global_size of 1 sizes for work_dim 2"),
            ),
            (
                r#""work_dim":1,"global_size":[64],"local_size":[16,1]"#,
                Some("local_size of 2 sizes"),
            ),
            (
                r#""work_dim":4,"global_size":[1,1,1,1]"#,
                Some("work_dim 4"),
            ),
            (r#""work_dim":0,"global_size":[]"#, Some("work_dim 0")),
            (r#""global_size":[64]"#, Some("without work_dim")),
            (r#""work_dim":1"#, Some("global_size of 0 sizes")),
            (
                r#""work_dim":1,"global_size":[1.5]"#,
                Some("not a schema 1 record"),
            ),
            (
                r#""work_dim":1,"global_size":[-64]"#,
                Some("not a schema 1 record"),
            ),
            (
                r#""work_dim":"1","global_size":[64]"#,
                Some("not a schema 1 record"),
            ),
            (
                r#""work_dim":3,"global_size":[4294967296,4294967296,2],"result_name":"CL_SUCCESS""#,
                Some("more work-items than 64 bits count"),
            ),
            (
                r#""work_dim":1,"global_size":[64],"local_size":[0]"#,
                Some("implausible first_launch local_size [0]"),
            ),
            (
                r#""work_dim":2,"global_size":[64,64],"local_size":[131072,65536]"#,
                Some("implausible first_launch local_size"),
            ),
        ] {
            let line = rec(fields);
            match (parse_line(line.as_bytes(), true), why) {
                (Ok(Some(_)), None) => {}
                (Err(e), Some(w)) => assert!(e.contains(w), "{fields}: {e}"),
                (got, _) => panic!("{fields}: {:?}", got.map(|r| r.map(|r| r.global_size))),
            }
        }
    }

    #[test]
    fn program_ids_and_escaped_strings() {
        let line = r#"{"schema":1,"event":"first_launch","pid":1,"ts":1.75e9,"seconds":0.1,"program":"7","kernel":"k\u0031","device":{"type":"CPU","platform":"Portable Computing Language"},"inputs":[1,null,"x"],"global_size":[15,2],"work_dim":2}"#;
        let r = parse_line(line.as_bytes(), true).unwrap().unwrap();
        assert_eq!(r.event, Event::FirstLaunch);
        assert_eq!(r.program, Some(Id::Text("7".into())));
        assert_eq!(r.kernel.as_deref(), Some("k1"));
        assert!(r.any_pocl_cpu());
        assert_eq!(r.inputs.unwrap().len(), 3);
        assert_eq!((r.work_dim, r.global_size), (Some(2), Some(vec![15, 2])));
    }
    /// The names a deserialised struct reads: serde hands them to `deserialize_struct`.
    fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        struct Probe<'a>(&'a mut &'static [&'static str]);
        impl<'de> Deserializer<'de> for Probe<'_> {
            type Error = de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not a struct"))
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Self::Error> {
                *self.0 = fields;
                Err(de::Error::custom("names only"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
                enum identifier ignored_any
            }
        }
        let mut names: &'static [&'static str] = &[];
        let _ = T::deserialize(Probe(&mut names));
        names
    }

    /// Every field this reader reads is one the library writes, by the name `schema`
    /// gives it: one record of each event, every optional part present, written as the
    /// library writes it, holds all the names the reader's structs ask for.
    #[test]
    fn the_reader_reads_the_names_the_schema_writes() {
        use crate::schema::{self, Common, Line};
        use std::collections::BTreeSet;
        let device = schema::Device {
            name: "d".into(),
            kind: "CPU",
            platform: POCL_PLATFORM.into(),
            vendor: "v".into(),
            driver: "1".into(),
            matched: true,
            compute_units: Some(16),
        };
        let source = schema::Source {
            origin: "source",
            hash: Some("fnv1a64:0".into()),
            length: Some(1),
        };
        let build = |event, source, inputs, headers| {
            schema::Record::Build(schema::Build {
                event,
                cpu_seconds: Some(0.25),
                call: "c",
                program: Some(1),
                result: 0,
                result_name: "CL_SUCCESS",
                options: Some("-O".into()),
                is_async: false,
                kernels: vec!["k".into()],
                devices: vec![device.clone()],
                source,
                inputs,
                headers,
                options_replaced: Some(schema::OptionsReplaced {
                    given: None,
                    used: "-O".into(),
                }),
                kept: Some(schema::Kept {
                    source: Some("0000000000000000-1".into()),
                    options: None,
                    headers: vec![schema::KeptHeader {
                        name: "h.h".into(),
                        source: "0000000000000001-2".into(),
                    }],
                }),
                source_kernels: vec!["k".into()],
                error: Some("error: e".into()),
                served: Some("store"),
                shared: None,
                peer_wait_seconds: None,
                from_host: Some("h".into()),
                kept_in_store: Some(false),
                not_kept: Some("x".into()),
                not_served: Some(schema::NotServed {
                    kind: schema::Miss::FilesDiffer,
                    why: "x".into(),
                }),
            })
        };
        let records = [
            build(Event::Build, Some(Some(source.clone())), None, None),
            build(Event::Compile, Some(None), None, Some(0)),
            build(Event::Link, None, Some(vec![1]), None),
            schema::Record::BinaryQuery(schema::BinaryQuery {
                cpu_seconds: Some(0.25),
                call: "c",
                program: Some(1),
                param: "p",
                result: 0,
                result_name: "CL_SUCCESS",
                action: "forward",
                actions: vec!["forward"],
                sizes: Some(vec![Some(1)]),
                devices: vec![Some(device.clone())],
            }),
            schema::Record::BinaryLoad(schema::BinaryLoad {
                call: "c",
                program: Some(1),
                result: 0,
                result_name: "CL_SUCCESS",
                action: "forward",
                reason: None,
                lengths: vec![1],
                source: Some(source.clone()),
                devices: vec![Some(device.clone())],
                made_from: Some("recipe"),
                native_miss: Some("device 0: no entry".into()),
                native_miss_kind: Some(schema::Miss::NoEntry),
            }),
            schema::Record::FirstLaunch(schema::FirstLaunch {
                tid: 1,
                cpu_seconds: Some(0.25),
                cpu_clock: Some(3.0),
                call: "c",
                kernel: Some("k".into()),
                program: Some(1),
                device: Some(device.clone()),
                work_dim: 1,
                global_size: vec![1],
                local_size: Some(vec![1]),
                result: 0,
                result_name: "CL_SUCCESS",
                shared: Some("from_peer"),
                peer_wait_seconds: Some(0.25),
                from_host: Some("h".into()),
                kept_in_store: Some(true),
                not_kept: Some("x".into()),
            }),
        ];
        let common = |event| Common {
            schema: SCHEMA,
            event,
            pid: 1,
            instance: "0123456789abcdef",
            rank: Some(0),
            tid: 1,
            ts: 1.75e9,
            seconds: 0.5,
        };
        let process = schema::Process {
            clshim_version: "0",
            mode: "preload",
            policy: "pass",
            program_cache: true,
            devices_filter: "pocl-cpu",
            host: "h",
            exe: "e",
            argv: &[],
            ppid: 1,
            size: Some(1),
            rank_source: None,
            caches: &[schema::CacheDir {
                cache: "pocl".into(),
                path: "/p".into(),
                from: None,
                fs: Some("nfs".into()),
                exists: Some(true),
            }],
            exit_recorded: true,
            cpus: &schema::Cpus {
                online: Some(16),
                affinity: Some("0-15".into()),
                cgroup_limit: Some(4.0),
            },
        };
        let mut lines = vec![serde_json::to_string(&Line {
            common: common(Event::Process),
            body: &process,
        })
        .unwrap()];
        for r in &records {
            lines.push(
                serde_json::to_string(&Line {
                    common: common(r.event()),
                    body: r,
                })
                .unwrap(),
            );
        }
        lines.push(
            serde_json::to_string(&Line {
                common: common(Event::Exit),
                body: &schema::Exit {},
            })
            .unwrap(),
        );
        // The names of every object the records hold, at any depth.
        fn collect(v: &serde_json::Value, names: &mut BTreeSet<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, v) in m {
                        names.insert(k.clone());
                        collect(v, names);
                    }
                }
                serde_json::Value::Array(a) => a.iter().for_each(|v| collect(v, names)),
                _ => {}
            }
        }
        let mut written = BTreeSet::new();
        for line in &lines {
            assert!(
                parse_line(line.as_bytes(), true).unwrap().is_some(),
                "{line}"
            );
            collect(&serde_json::from_str(line).unwrap(), &mut written);
        }
        for (shape, read) in [
            ("Record", field_names::<Record>()),
            ("Device", field_names::<Device>()),
            ("Source", field_names::<Source>()),
        ] {
            assert!(!read.is_empty(), "{shape}");
            for name in read {
                assert!(
                    written.contains(*name),
                    "the reader's {shape} reads `{name}`, which the schema never writes"
                );
            }
        }
    }
}
