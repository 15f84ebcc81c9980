//! Recording: turns each completed event into a trace record (JSON Lines, schema version 1
//! in the README), a log line, and the per-process tallies behind the exit summary. One
//! lock guards the trace file and the tallies together, held only to append a line.

use crate::config::Config;
use crate::process::Identity;
use crate::trace_file::TraceFile;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const SCHEMA: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Build,
    Compile,
    Link,
    BinaryQuery,
    BinaryLoad,
    FirstLaunch,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Build => "build",
            EventKind::Compile => "compile",
            EventKind::Link => "link",
            EventKind::BinaryQuery => "binary_query",
            EventKind::BinaryLoad => "binary_load",
            EventKind::FirstLaunch => "first_launch",
        }
    }
}

/// When an event started, on both clocks: the wall clock for records, the monotonic one
/// for its duration.
#[derive(Clone, Copy, Debug)]
pub struct Start {
    wall: SystemTime,
    mono: Instant,
}

impl Start {
    pub fn now() -> Start {
        Start {
            wall: SystemTime::now(),
            mono: Instant::now(),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.mono.elapsed()
    }

    fn unix(&self) -> f64 {
        self.wall
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    }
}

/// Per-process tallies for the exit summary.
#[derive(Default, Debug, Clone)]
pub struct Tally {
    pub builds: u64,
    pub build_seconds: f64,
    pub queries: u64,
    pub query_seconds: f64,
    /// Seconds of binary queries that were forwarded to a device the filter selects:
    /// the time the binary policy would have saved.
    pub avoidable_query_seconds: f64,
    pub substituted: u64,
    pub suppressed: u64,
    pub loads: u64,
    pub rejected: u64,
    /// First launches of a kernel on a device and configuration (where pocl compiles the
    /// kernel that runs), and their seconds from enqueue to completion.
    pub first_launches: u64,
    pub first_launch_seconds: f64,
}

impl Tally {
    pub fn recorded_anything(&self) -> bool {
        self.builds + self.queries + self.loads + self.first_launches > 0
    }
}

struct State {
    identity: Identity,
    /// When this process's recording began (its first intercepted call).
    began: Start,
    file: TraceFile,
    tally: Tally,
}

pub struct Recorder {
    state: Mutex<State>,
    policy: &'static str,
    devices_filter: &'static str,
    mode: &'static str,
}

/// The OS thread id (what `top -H` and debuggers show).
#[cfg(target_os = "linux")]
pub fn tid() -> i64 {
    // SAFETY: gettid has no failure mode.
    unsafe { libc::syscall(libc::SYS_gettid) as i64 }
}

#[cfg(target_os = "macos")]
pub fn tid() -> i64 {
    let mut id: u64 = 0;
    // SAFETY: NULL asks for the calling thread; id is a valid out-pointer.
    unsafe { libc::pthread_threadid_np(0, &mut id) };
    id as i64
}

impl Recorder {
    pub fn new(config: &Config, mode: &'static str) -> Recorder {
        Recorder {
            state: Mutex::new(State {
                identity: Identity::current(),
                began: Start::now(),
                file: TraceFile::new(config.trace_dir.clone(), config.trace_mode),
                tally: Tally::default(),
            }),
            policy: config.binaries.name(),
            devices_filter: config.devices.name(),
            mode,
        }
    }

    pub fn rank(&self) -> Option<u64> {
        self.state.lock().identity.rank
    }

    /// Records one completed event. `fields` is a JSON object of the event's own fields;
    /// `tally` updates the summary counts; `line` is the human-readable log text.
    pub fn emit(
        &self,
        kind: EventKind,
        start: Start,
        seconds: f64,
        fields: Value,
        tally: impl FnOnce(&mut Tally),
        line: impl FnOnce() -> String,
    ) {
        let mut state = self.state.lock();
        if state.identity.pid != std::process::id() {
            // First record in a forked child: it is a process of its own.
            state.identity = Identity::current();
            state.began = Start::now();
            state.tally = Tally::default();
        }
        let mut rec = Map::new();
        rec.insert("schema".into(), json!(SCHEMA));
        rec.insert("event".into(), json!(kind.name()));
        rec.insert("pid".into(), json!(state.identity.pid));
        rec.insert("instance".into(), json!(state.identity.instance));
        rec.insert("rank".into(), json!(state.identity.rank));
        rec.insert("tid".into(), json!(tid()));
        rec.insert("ts".into(), json!(start.unix()));
        rec.insert("seconds".into(), json!(seconds));
        if let Value::Object(extra) = fields {
            rec.extend(extra);
        }
        let text = Value::Object(rec).to_string();
        let State {
            identity,
            began,
            file,
            tally: counts,
        } = &mut *state;
        let (policy, filter, mode) = (self.policy, self.devices_filter, self.mode);
        file.append(
            || (identity.file_stem(), identity.instance.clone()),
            || {
                let mut header = json!({
                    "schema": SCHEMA,
                    "event": "process",
                    "pid": identity.pid,
                    "instance": identity.instance,
                    "rank": identity.rank,
                    "tid": tid(),
                    "ts": began.unix(),
                    "seconds": 0.0,
                    "clshim_version": env!("CARGO_PKG_VERSION"),
                    "mode": mode,
                    "policy": policy,
                    "devices_filter": filter,
                });
                if let (Value::Object(h), Value::Object(id)) = (&mut header, identity.to_json()) {
                    h.extend(id);
                }
                header.to_string()
            },
            &text,
        );
        tally(counts);
        drop(state);
        log::info!("{}", line());
    }

    /// The exit summary line, or None if nothing was recorded (or the lock is stuck in a
    /// thread that is still building while the process exits).
    pub fn summary(&self) -> Option<String> {
        let state = self.state.try_lock_for(Duration::from_millis(200))?;
        if state.identity.pid != std::process::id() || !state.tally.recorded_anything() {
            return None;
        }
        Some(summary_line(&state.identity, &state.tally, self.policy))
    }

    pub fn lock_for_fork(&self) {
        std::mem::forget(self.state.lock());
    }

    /// # Safety
    /// Only after `lock_for_fork`, in the forking thread (parent) or the only thread (child).
    pub unsafe fn unlock_after_fork(&self) {
        // SAFETY: this function's contract: Only after `lock_for_fork`, in the forking
        // thread (parent) or the only thread (child).
        unsafe {
            self.state.force_unlock();
        }
    }
}

pub fn summary_line(id: &Identity, t: &Tally, policy: &str) -> String {
    let who = match id.rank {
        Some(r) => format!("rank {r} pid {}", id.pid),
        None => format!("pid {}", id.pid),
    };
    let total = t.build_seconds + t.query_seconds;
    let share = if total > 0.0 {
        100.0 * t.query_seconds / total
    } else {
        0.0
    };
    let mut s = format!(
        "clshim: {who}: {} builds {:.2} s, {} binary queries {:.2} s ({share:.0}% of {total:.2} s)",
        t.builds, t.build_seconds, t.queries, t.query_seconds
    );
    // First launches are where pocl compiles the kernel that runs: beside the build time,
    // not part of its share.
    if t.first_launches > 0 {
        s.push_str(&format!(
            ", {} first launches {:.2} s",
            t.first_launches, t.first_launch_seconds
        ));
    }
    s.push_str(&format!("; policy {policy}"));
    if t.substituted + t.suppressed > 0 {
        s.push_str(&format!(
            ", {} substituted, {} suppressed",
            t.substituted, t.suppressed
        ));
    }
    if t.loads > 0 {
        s.push_str(&format!(
            ", {} binary loads ({} rejected)",
            t.loads, t.rejected
        ));
    }
    if t.avoidable_query_seconds > 0.2 * total && t.avoidable_query_seconds > 0.05 {
        s.push_str("; CLSHIM_BINARIES=substitute avoids pocl's second compile");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_the_fix_when_queries_dominate() {
        let id = Identity {
            pid: 9,
            ppid: 1,
            host: "h".into(),
            exe: String::new(),
            argv: vec![],
            rank: Some(2),
            size: Some(4),
            rank_source: Some("PMI_RANK"),
            instance: "0123456789abcdef".into(),
        };
        let t = Tally {
            builds: 4,
            build_seconds: 1.0,
            queries: 4,
            query_seconds: 3.0,
            avoidable_query_seconds: 3.0,
            ..Tally::default()
        };
        let s = summary_line(&id, &t, "pass");
        assert!(
            s.starts_with(
                "clshim: rank 2 pid 9: 4 builds 1.00 s, 4 binary queries 3.00 s (75% of 4.00 s)"
            ),
            "{s}"
        );
        assert!(s.contains("CLSHIM_BINARIES=substitute"));
        let quiet = Tally {
            avoidable_query_seconds: 0.0,
            ..t
        };
        assert!(!summary_line(&id, &quiet, "substitute").contains("CLSHIM_BINARIES"));
        assert!(!s.contains("first launches"), "{s}");
        let launched = Tally {
            first_launches: 3,
            first_launch_seconds: 2.5,
            ..quiet
        };
        let s = summary_line(&id, &launched, "pass");
        assert!(
            s.contains("(75% of 4.00 s), 3 first launches 2.50 s; policy pass"),
            "{s}"
        );
        let only_launches = Tally {
            first_launches: 1,
            ..Tally::default()
        };
        assert!(only_launches.recorded_anything());
    }
}
