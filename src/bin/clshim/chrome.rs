//! `clshim report --chrome FILE`: the timeline in the Chrome trace-event format (JSON
//! object form, `{"traceEvents": [...]}`), which Perfetto and chrome://tracing open.
//! This module owns the layout: one process row per rank (or per process when no rank
//! is known), named "rank 3 @ host" / "pid 123 @ host" and sorted by rank; one thread
//! row per OS thread; one complete (`ph: "X"`) slice per build, compile, link, binary
//! query and binary load, with times in microseconds from the earliest record and the
//! program's kernel names, options, result and policy action in `args`.

use crate::report::{processes, rank_key, RankKey};
use crate::traces::{Event, Traces};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// Builds the trace document.
pub fn timeline(t: &Traces) -> Value {
    let procs = processes(t);
    let t0 = t
        .files
        .iter()
        .flat_map(|f| f.records.iter())
        .map(|r| r.ts)
        .fold(f64::INFINITY, f64::min);
    // Rows, in rank order; chrome pids are small integers by position.
    let mut rows: BTreeMap<RankKey, (usize, String)> = BTreeMap::new();
    for f in &t.files {
        for r in &f.records {
            let key = rank_key(r, &procs);
            let host = &procs[r.file].host;
            rows.entry(key.clone()).or_insert_with(|| {
                let name = match &key {
                    RankKey::Rank(n) => format!("rank {n} @ {host}"),
                    RankKey::Process(h, p) => format!("pid {p} @ {h}"),
                };
                (0, name)
            });
        }
    }
    for (i, v) in rows.values_mut().enumerate() {
        v.0 = i + 1;
    }

    let mut events = Vec::with_capacity(t.record_count() + 2 * rows.len());
    for (i, name) in rows.values() {
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": i, "tid": 0, "args": {"name": name}}),
        );
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": i, "tid": 0, "args": {"sort_index": i}}));
    }
    let mut threads: BTreeMap<(usize, u64), u64> = BTreeMap::new();
    for f in &t.files {
        for r in &f.records {
            if r.event == Event::Process {
                continue;
            }
            let pid = rows[&rank_key(r, &procs)].0;
            threads.entry((pid, r.tid)).or_insert(r.pid);
            let label = if r.kernels.is_empty() {
                r.event.name().to_string()
            } else {
                let mut k = r.kernels.join(",");
                if k.len() > 60 {
                    k.truncate(k.char_indices().nth(57).map(|(i, _)| i).unwrap_or(k.len()));
                    k.push('…');
                }
                format!("{} {k}", r.event.name())
            };
            let mut args = Map::new();
            let mut put = |k: &str, v: Value| {
                if !v.is_null() {
                    args.insert(k.to_string(), v);
                }
            };
            put("program", json!(r.program));
            put("kernels", json!(r.kernels));
            put("options", json!(r.options));
            put("call", json!(r.call));
            put("result_name", json!(r.result_name));
            put("param", json!(r.param));
            put("action", json!(r.action));
            put("source_hash", json!(r.hash));
            put("os_pid", json!(r.pid));
            put("policy", json!(procs[r.file].policy));
            events.push(json!({
                "ph": "X",
                "name": label,
                "cat": r.event.name(),
                "pid": pid,
                "tid": r.tid,
                "ts": (r.ts - t0) * 1e6,
                "dur": r.seconds * 1e6,
                "args": args,
            }));
        }
    }
    for ((pid, tid), os_pid) in threads {
        events.push(json!({
            "ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
            "args": {"name": format!("pid {os_pid} tid {tid}")},
        }));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

/// Writes the timeline to `path`.
pub fn write(t: &Traces, path: &Path) -> std::io::Result<()> {
    let doc = timeline(t);
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer(&mut w, &doc)?;
    w.write_all(b"\n")?;
    w.flush()
}
