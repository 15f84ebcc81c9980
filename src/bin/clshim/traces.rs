//! Reading trace directories (README "Trace schema (version 1)"). This module owns
//! which files count as trace files (`*.jsonl`, and `*.jsonl.N` for renamed
//! duplicates), parsing each line into a typed [`Record`] tagged with the process it
//! came from, and the bookkeeping of everything that could not be used: an empty
//! directory, an unreadable file, a line that is not JSON (a truncated last line is
//! named as such), a record of a newer schema version or an unknown event. Each such
//! problem is kept as a [`Problem`] with file and line and the record is skipped; the
//! rest of the directory is still read. Files are read in parallel on a few threads.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The schema version this reader understands.
pub const SCHEMA: u64 = 1;
/// The `platform` name of pocl's devices.
pub const POCL_PLATFORM: &str = "Portable Computing Language";

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Process,
    Build,
    Compile,
    Link,
    BinaryQuery,
    BinaryLoad,
}

impl Event {
    fn parse(s: &str) -> Option<Event> {
        Some(match s {
            "process" => Event::Process,
            "build" => Event::Build,
            "compile" => Event::Compile,
            "link" => Event::Link,
            "binary_query" => Event::BinaryQuery,
            "binary_load" => Event::BinaryLoad,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Event::Process => "process",
            Event::Build => "build",
            Event::Compile => "compile",
            Event::Link => "link",
            Event::BinaryQuery => "binary_query",
            Event::BinaryLoad => "binary_load",
        }
    }

    /// build, compile and link: the events whose time is "build time".
    pub fn is_build(self) -> bool {
        matches!(self, Event::Build | Event::Compile | Event::Link)
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Device {
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub platform: Option<String>,
}

impl Device {
    /// pocl's CPU driver: the device whose binary queries cost a second compile.
    pub fn is_pocl_cpu(&self) -> bool {
        self.platform.as_deref() == Some(POCL_PLATFORM) && self.kind.as_deref() == Some("CPU")
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct Source {
    #[serde(default)]
    pub hash: Option<String>,
}

/// One trace line, with the fields the report uses (others are ignored). Program ids
/// are kept as their JSON text so that an integer or a string both work.
#[derive(Debug, Deserialize)]
struct RawRecord {
    schema: u64,
    event: String,
    pid: u64,
    #[serde(default)]
    rank: Option<i64>,
    #[serde(default)]
    tid: Option<u64>,
    ts: f64,
    seconds: f64,
    // process
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    policy: Option<String>,
    // program events
    #[serde(default)]
    program: Option<serde_json::Value>,
    #[serde(default)]
    call: Option<String>,
    #[serde(default)]
    result_name: Option<String>,
    #[serde(default)]
    devices: Option<Vec<Device>>,
    #[serde(default)]
    options: Option<String>,
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    kernels: Option<Vec<String>>,
    #[serde(default)]
    inputs: Option<Vec<serde_json::Value>>,
    #[serde(default)]
    param: Option<String>,
    #[serde(default)]
    action: Option<String>,
}

/// The first field only, to recognise a newer schema whose other fields no longer fit.
#[derive(Deserialize)]
struct SchemaOnly {
    schema: Option<serde_json::Value>,
}

/// A usable record: the schema fields plus the index of the file it came from.
#[derive(Debug, Clone)]
pub struct Record {
    pub file: usize,
    pub event: Event,
    pub pid: u64,
    pub rank: Option<i64>,
    pub tid: u64,
    pub ts: f64,
    pub seconds: f64,
    pub host: Option<String>,
    pub policy: Option<String>,
    pub program: Option<String>,
    pub call: Option<String>,
    pub result_name: Option<String>,
    pub devices: Vec<Device>,
    pub options: Option<String>,
    pub hash: Option<String>,
    pub kernels: Vec<String>,
    pub inputs: Vec<String>,
    pub param: Option<String>,
    pub action: Option<String>,
}

fn id_text(v: serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s),
        other => Some(other.to_string()),
    }
}

/// One trace file as read: the host and rank its name announces (used when
/// its `process` record is missing), and its records.
#[derive(Debug)]
pub struct TraceFile {
    pub name_host: Option<String>,
    pub records: Vec<Record>,
}

/// Everything read from a directory.
#[derive(Debug, Default)]
pub struct Traces {
    pub files: Vec<TraceFile>,
    pub problems: Vec<Problem>,
    /// Lines that were skipped (whole unreadable files count as one).
    pub skipped: usize,
}

impl Traces {
    pub fn record_count(&self) -> usize {
        self.files.iter().map(|f| f.records.len()).sum()
    }
}

/// `clshim-<host>-r<rank>-p<pid>.jsonl` (possibly followed by `.N`): the host part.
fn host_from_name(name: &str) -> Option<String> {
    let stem = name.strip_prefix("clshim-")?;
    let stem = &stem[..stem.find(".jsonl")?];
    let (rest, _pid) = stem.rsplit_once("-p")?;
    let (host, _rank) = rest.rsplit_once("-r")?;
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

/// Parses one file's bytes. `index` is the file's position in the final list.
fn parse_file(index: usize, path: &Path, bytes: &[u8], problems: &mut Vec<Problem>) -> Vec<Record> {
    let mut out = Vec::new();
    let ends_with_newline = bytes.last() == Some(&b'\n');
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if ends_with_newline {
        lines.pop();
    }
    let last = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        let lineno = i + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let mut skip = |reason: String| {
            problems.push(Problem {
                file: path.to_path_buf(),
                line: lineno,
                reason,
            });
        };
        let raw: RawRecord = match serde_json::from_slice(line) {
            Ok(r) => r,
            Err(e) => {
                let newer = serde_json::from_slice::<SchemaOnly>(line)
                    .ok()
                    .and_then(|s| s.schema)
                    .and_then(|s| s.as_u64())
                    .filter(|&s| s > SCHEMA);
                if let Some(s) = newer {
                    skip(format!(
                        "record of schema version {s}, newer than this clshim reads ({SCHEMA})"
                    ));
                } else if e.is_eof() && lineno == last && !ends_with_newline {
                    skip("truncated last line (the process was still writing, or died)".into());
                } else if e.is_syntax() || e.is_eof() {
                    skip(format!("not JSON: {e}"));
                } else {
                    skip(format!("not a schema {SCHEMA} record: {e}"));
                }
                continue;
            }
        };
        if raw.schema > SCHEMA {
            skip(format!(
                "record of schema version {}, newer than this clshim reads ({SCHEMA})",
                raw.schema
            ));
            continue;
        }
        let Some(event) = Event::parse(&raw.event) else {
            skip(format!("unknown event '{}'", raw.event));
            continue;
        };
        if !(raw.seconds.is_finite() && raw.ts.is_finite()) || raw.seconds < 0.0 {
            skip("invalid ts or seconds".into());
            continue;
        }
        out.push(Record {
            file: index,
            event,
            pid: raw.pid,
            rank: raw.rank,
            tid: raw.tid.unwrap_or(raw.pid),
            ts: raw.ts,
            seconds: raw.seconds,
            host: raw.host,
            policy: raw.policy,
            program: raw.program.and_then(id_text),
            call: raw.call,
            result_name: raw.result_name,
            devices: raw.devices.unwrap_or_default(),
            options: raw.options,
            hash: raw.source.and_then(|s| s.hash),
            kernels: raw.kernels.unwrap_or_default(),
            inputs: raw
                .inputs
                .unwrap_or_default()
                .into_iter()
                .filter_map(id_text)
                .collect(),
            param: raw.param,
            action: raw.action,
        });
    }
    out
}

fn read_one(index: usize, path: &Path) -> (TraceFile, Vec<Problem>, usize) {
    let mut problems = Vec::new();
    let name_host = path
        .file_name()
        .and_then(|n| host_from_name(&n.to_string_lossy()));
    let records = match std::fs::read(path) {
        Ok(bytes) => parse_file(index, path, &bytes, &mut problems),
        Err(e) => {
            problems.push(Problem {
                file: path.to_path_buf(),
                line: 0,
                reason: format!("cannot read: {}", crate::run::describe(&e)),
            });
            Vec::new()
        }
    };
    let skipped = problems.len();
    (TraceFile { name_host, records }, problems, skipped)
}

/// Reads every trace file of `dir`. Only a directory that cannot be listed is an error;
/// everything else becomes a [`Problem`].
pub fn read_dir(dir: &Path) -> std::io::Result<Traces> {
    let paths = list(dir)?;
    let mut t = Traces::default();
    if paths.is_empty() {
        t.problems.push(Problem {
            file: dir.to_path_buf(),
            line: 0,
            reason: "no trace files (*.jsonl) in this directory".into(),
        });
        t.skipped += 1;
        return Ok(t);
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let threads = threads.min(paths.len().div_ceil(16)).max(1);
    let chunk = paths.len().div_ceil(threads);
    let results: Vec<(TraceFile, Vec<Problem>, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .chunks(chunk)
            .enumerate()
            .map(|(c, part)| {
                s.spawn(move || {
                    part.iter()
                        .enumerate()
                        .map(|(i, p)| read_one(c * chunk + i, p))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("reader thread"))
            .collect()
    });
    for (file, problems, skipped) in results {
        t.files.push(file);
        t.problems.extend(problems);
        t.skipped += skipped;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(is_trace_name("a.jsonl") && is_trace_name("a.jsonl.3"));
        assert!(
            !is_trace_name("a.json") && !is_trace_name("a.jsonl.x") && !is_trace_name("a.jsonl.")
        );
    }

    #[test]
    fn problems_are_counted_and_named() {
        let p = Path::new("f.jsonl");
        let good =
            r#"{"schema":1,"event":"build","pid":1,"rank":0,"tid":1,"ts":1.0,"seconds":0.5}"#;
        let text = format!(
            "{good}\nnot json\n{{\"schema\":2,\"event\":\"build\"}}\n{{\"schema\":1,\"event\":\"x\",\"pid\":1,\"ts\":1,\"seconds\":0}}\n{good}\n{{\"schema\":1,\"ev"
        );
        let mut probs = Vec::new();
        let recs = parse_file(0, p, text.as_bytes(), &mut probs);
        assert_eq!(recs.len(), 2);
        let reasons: Vec<_> = probs.iter().map(|p| (p.line, p.reason.clone())).collect();
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(reasons[0].0 == 2 && reasons[0].1.starts_with("not JSON"));
        assert!(reasons[1].0 == 3 && reasons[1].1.contains("schema version 2"));
        assert!(reasons[2].0 == 4 && reasons[2].1.contains("unknown event"));
        assert!(reasons[3].0 == 6 && reasons[3].1.starts_with("truncated last line"));
    }
}
