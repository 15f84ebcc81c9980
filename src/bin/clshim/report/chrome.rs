//! `clshim report --chrome FILE`: the timeline in the Chrome trace-event format (JSON
//! object form, `{"traceEvents": [...]}`), which Perfetto and chrome://tracing open.
//! This module owns the layout: one process row per rank (or per process when no rank
//! is known), named "rank 3 @ host" / "pid 123 @ host" and sorted by rank; one thread
//! row per OS thread; one complete (`ph: "X"`) slice per build, compile, link, binary
//! query and binary load, with times in microseconds from the earliest record and the
//! program's kernel names, options, result and policy action in `args`; first launches
//! on rows of their own ("first launches (pid P)"), spread over as many rows as their
//! overlapping intervals need. The document is written as a stream: a second pass
//! over the files (the same bytes the report read) formats each record's event on a
//! few threads, so memory does not grow with the number of records. The file is
//! written beside FILE under a temporary name and renamed over it, so an existing
//! FILE (or a symbolic link there) is replaced, never written through.

use crate::report::rank_key::{rank_labels, RankKey};
use crate::report::traces::{self, Event, Record, Text};
use crate::report::Aggregate;
use serde::{Serialize, Serializer};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Thread ids of first-launch rows: far above any OS thread id (Linux's limit is 2^22),
/// 64 rows per file at most, and within 31 bits for viewers that keep tids as int32.
const LAUNCH_TID_BASE: u64 = 1 << 30;
const LAUNCH_LANES: usize = 64;
/// A worker hands over its formatted events in chunks of about this size.
const CHUNK: usize = 1 << 20;

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self)
    }
}

#[derive(Serialize)]
struct Meta<'a> {
    ph: &'static str,
    name: &'static str,
    pid: usize,
    tid: u64,
    args: MetaArgs<'a>,
}

#[derive(Serialize)]
struct MetaArgs<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sort_index: Option<u64>,
}

#[derive(Serialize)]
struct Slice<'a> {
    ph: &'static str,
    name: &'a str,
    cat: &'static str,
    pid: usize,
    tid: u64,
    ts: f64,
    dur: f64,
    args: Args<'a>,
}

#[derive(Serialize, Default)]
struct Args<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    program: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernels: Option<&'a [Text<'a>]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    work_dim: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    global_size: Option<&'a [u64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    local_size: Option<&'a [u64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    options: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    param: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_hash: Option<&'a str>,
    os_pid: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy: Option<&'a str>,
}

fn push_event(buf: &mut Vec<u8>, ev: &impl Serialize) {
    buf.extend_from_slice(b",\n");
    serde_json::to_writer(&mut *buf, ev).expect("serialising to memory");
}

/// First-launch rows of one file: a launch goes on the first row whose last launch
/// ended before it started, so slices on one row never overlap.
struct Lanes {
    ends: Vec<f64>,
}

impl Lanes {
    fn place(&mut self, start: f64, end: f64) -> usize {
        let lane = match self.ends.iter().position(|&e| e <= start) {
            Some(l) => l,
            None if self.ends.len() < LAUNCH_LANES => {
                self.ends.push(f64::NEG_INFINITY);
                self.ends.len() - 1
            }
            None => LAUNCH_LANES - 1,
        };
        self.ends[lane] = self.ends[lane].max(end);
        lane
    }
}

fn label(r: &Record) -> String {
    if r.event == Event::FirstLaunch {
        return format!("first launch {}", r.kernel.as_deref().unwrap_or("?"));
    }
    let kernels = r.kernels();
    if kernels.is_empty() {
        return r.event.name().to_string();
    }
    let mut k = kernels.iter().map(|k| &**k).collect::<Vec<_>>().join(",");
    if k.chars().count() > 60 {
        k.truncate(k.char_indices().nth(57).map(|(i, _)| i).unwrap_or(k.len()));
        k.push('…');
    }
    format!("{} {k}", r.event.name())
}

/// Formats the events of file `fi` into chunks handed to `send`.
fn file_events(
    agg: &Aggregate,
    rows: &HashMap<&RankKey, usize>,
    fi: usize,
    send: &mut impl FnMut(Vec<u8>),
) -> Result<(), String> {
    let info = &agg.files[fi];
    if info.records == 0 {
        return Ok(());
    }
    let (file, id) = traces::open_regular(&info.path)?;
    if (id.dev, id.ino) != (info.identity.dev, info.identity.ino) || id.len < info.identity.len {
        return Err("changed while the report read it; its events are left out".into());
    }
    let mut buf = Vec::with_capacity(CHUNK + 4096);
    let mut locals = crate::report::Locals::default();
    // The row of each writer of the file (looked up once, not per record).
    let mut row_of: Vec<Option<usize>> = Vec::new();
    let mut lanes = Lanes { ends: Vec::new() };
    // (row, lane) -> OS pid, for the rows' names.
    let mut launch_rows: BTreeMap<(usize, usize), u64> = BTreeMap::new();
    let res = traces::for_each_record(
        file,
        info.identity.len,
        |_, r| {
            // Whole-process records: the rows and their names, not slices.
            if matches!(r.event, Event::Process | Event::Exit) {
                return;
            }
            let li = locals.index(&r);
            if li == row_of.len() {
                row_of.push(rows.get(&locals.rank_key(li, &info.host)).copied());
            }
            let Some(pid) = row_of[li] else {
                return;
            };
            let name = label(&r);
            let launch = r.event == Event::FirstLaunch;
            let tid = if launch {
                let lane = lanes.place(r.ts, r.ts + r.seconds);
                launch_rows.entry((pid, lane)).or_insert(r.pid);
                LAUNCH_TID_BASE + (fi * LAUNCH_LANES + lane) as u64
            } else {
                r.tid()
            };
            let slice = Slice {
                ph: "X",
                name: &name,
                cat: r.event.name(),
                pid,
                tid,
                ts: (r.ts - agg.t0) * 1e6,
                dur: r.seconds * 1e6,
                args: Args {
                    program: r.program.as_ref().map(|p| p.to_string()),
                    kernels: (!launch).then(|| r.kernels()),
                    kernel: r.kernel.as_deref(),
                    device: r.device.as_ref().and_then(|d| d.name.as_deref()),
                    work_dim: r.work_dim,
                    global_size: r.global_size.as_deref(),
                    local_size: r.local_size.as_deref(),
                    options: r.options.as_deref(),
                    call: r.call.as_deref(),
                    result_name: r.result_name.as_deref(),
                    param: r.param.as_deref(),
                    action: r.action.as_deref(),
                    source_hash: r.hash(),
                    os_pid: r.pid,
                    policy: info.policy.as_deref(),
                },
            };
            push_event(&mut buf, &slice);
            if buf.len() >= CHUNK {
                send(std::mem::replace(
                    &mut buf,
                    Vec::with_capacity(CHUNK + 4096),
                ));
            }
        },
        |_, _| {},
    );
    for ((pid, lane), os_pid) in launch_rows {
        let tid = LAUNCH_TID_BASE + (fi * LAUNCH_LANES + lane) as u64;
        let name = if lane == 0 {
            format!("first launches (pid {os_pid})")
        } else {
            format!("first launches (pid {os_pid}, {})", lane + 1)
        };
        push_event(
            &mut buf,
            &Meta {
                ph: "M",
                name: "thread_name",
                pid,
                tid,
                args: MetaArgs {
                    name: Some(&name),
                    sort_index: None,
                },
            },
        );
        push_event(
            &mut buf,
            &Meta {
                ph: "M",
                name: "thread_sort_index",
                pid,
                tid,
                args: MetaArgs {
                    name: None,
                    sort_index: Some(tid),
                },
            },
        );
    }
    if !buf.is_empty() {
        send(buf);
    }
    res.map_err(|e| format!("read error: {}", crate::library::describe(&e)))
}

/// A file created beside its target under a temporary name (exclusively, never through
/// a symbolic link) and renamed over the target when complete; removed if never
/// committed.
struct Staged {
    tmp: PathBuf,
    target: PathBuf,
    file: Option<File>,
}

impl Staged {
    fn create(target: &Path) -> std::io::Result<Staged> {
        let name = target.file_name().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name")
        })?;
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut attempt = 0u32;
        loop {
            let mut tmp_name = OsString::from(".");
            tmp_name.push(name);
            tmp_name.push(format!(".{}.{attempt}.tmp", std::process::id()));
            let tmp = dir.join(tmp_name);
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o666)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
            {
                Ok(file) => {
                    return Ok(Staged {
                        tmp,
                        target: target.to_path_buf(),
                        file: Some(file),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 100 => {
                    attempt += 1
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn commit(mut self) -> std::io::Result<()> {
        drop(self.file.take());
        std::fs::rename(&self.tmp, &self.target)?;
        self.tmp = PathBuf::new();
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Writes the timeline to `path`. Returns the files whose events were left out (they
/// changed or vanished since the report read them), as `FILE: reason`.
pub fn write(agg: &Aggregate, path: &Path) -> std::io::Result<Vec<String>> {
    let staged = Staged::create(path)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, staged.file.as_ref().expect("open"));
    w.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[")?;

    // Rows, in rank order; chrome pids are small integers by position.
    let keys: Vec<&RankKey> = agg.rank_keys().map(|(k, _)| k).collect();
    let hosts: Vec<String> = agg
        .rank_keys()
        .map(|(_, h)| h.iter().next().cloned().unwrap_or_else(|| "?".into()))
        .collect();
    let labels = rank_labels(keys.iter().copied());
    let rows: HashMap<&RankKey, usize> =
        keys.iter().enumerate().map(|(i, k)| (*k, i + 1)).collect();
    let mut head = Vec::new();
    for ((i, k), l) in keys.iter().enumerate().zip(&labels) {
        let host = &hosts[i];
        let name = match k {
            RankKey::Rank(n) => format!("rank {n} @ {host}"),
            RankKey::Process { .. } => {
                // "host:pid[#instance]" -> "pid P[#instance] @ host"
                let who = l.rsplit_once(':').map_or(l.as_str(), |(_, p)| p);
                format!("pid {who} @ {host}")
            }
        };
        let pid = i + 1;
        for (meta, args) in [
            (
                "process_name",
                MetaArgs {
                    name: Some(&name),
                    sort_index: None,
                },
            ),
            (
                "process_sort_index",
                MetaArgs {
                    name: None,
                    sort_index: Some(pid as u64),
                },
            ),
        ] {
            push_event(
                &mut head,
                &Meta {
                    ph: "M",
                    name: meta,
                    pid,
                    tid: 0,
                    args,
                },
            );
        }
    }
    for ((key, tid), os_pid) in &agg.threads {
        let name = format!("pid {os_pid} tid {tid}");
        push_event(
            &mut head,
            &Meta {
                ph: "M",
                name: "thread_name",
                pid: rows[key],
                tid: *tid,
                args: MetaArgs {
                    name: Some(&name),
                    sort_index: None,
                },
            },
        );
    }
    let mut first = true;
    let mut out = |w: &mut std::io::BufWriter<&File>, chunk: &[u8]| -> std::io::Result<()> {
        // Every event is preceded by ",\n"; the array's first one is not.
        let chunk = if first { &chunk[1..] } else { chunk };
        first = false;
        w.write_all(chunk)
    };
    if !head.is_empty() {
        out(&mut w, &head)?;
    }
    drop(head);

    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
        .min(agg.files.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2 * threads);
    let mut left_out = Vec::new();
    let mut write_err = None;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                let (next, rows) = (&next, &rows);
                s.spawn(move || {
                    let mut problems = Vec::new();
                    loop {
                        let fi = next.fetch_add(1, Ordering::Relaxed);
                        if fi >= agg.files.len() {
                            break;
                        }
                        let mut send = |chunk| {
                            // A closed channel: the writer failed; stop quietly.
                            let _ = tx.send(chunk);
                        };
                        if let Err(e) = file_events(agg, rows, fi, &mut send) {
                            problems.push(format!("{}: {e}", agg.files[fi].path.display()));
                        }
                    }
                    problems
                })
            })
            .collect();
        drop(tx);
        for chunk in rx.iter() {
            if write_err.is_none() {
                if let Err(e) = out(&mut w, &chunk) {
                    write_err = Some(e);
                    break;
                }
            }
        }
        drop(rx);
        for h in handles {
            left_out.extend(h.join().expect("timeline thread"));
        }
    });
    if let Some(e) = write_err {
        return Err(e);
    }
    w.write_all(b"\n]}\n")?;
    w.flush()?;
    drop(w);
    left_out.sort();
    staged.commit()?;
    Ok(left_out)
}
