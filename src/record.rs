//! Recording: turns each completed event, a typed [`Record`] of `schema`, into a trace
//! line (JSON Lines, one write per record), its log line, and its share of the
//! per-process tallies behind the exit summary. One lock guards the trace file and the
//! tallies together, held only to append a line.

use crate::config::Config;
use crate::cpu_time::ThreadCpu;
use crate::lock::{ForkOrder, Lock};
use crate::process::Identity;
use crate::schema::{self, Common, Event, Line, Record};
use crate::trace_file::TraceFile;
use crate::wall_union::WallUnion;
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// When an event started, on three clocks: the wall clock for records, the monotonic one
/// for its duration, the calling thread's CPU clock for its CPU time (a record's only: a
/// launch already seen never makes a `Start`).
#[derive(Clone, Copy, Debug)]
pub struct Start {
    wall: SystemTime,
    mono: Instant,
    cpu: ThreadCpu,
}

impl Start {
    pub fn now() -> Start {
        Start {
            wall: SystemTime::now(),
            mono: Instant::now(),
            cpu: ThreadCpu::now(),
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.mono.elapsed()
    }

    /// The calling thread's CPU seconds since the start (see [`ThreadCpu::seconds`]): read
    /// where [`Start::elapsed`] is, so both cover the same interval.
    pub fn cpu_seconds(&self) -> Option<f64> {
        self.cpu.seconds()
    }

    /// Seconds from `earlier` to this start (negative if it came first).
    fn since(&self, earlier: &Start) -> f64 {
        match self.mono.checked_duration_since(earlier.mono) {
            Some(d) => d.as_secs_f64(),
            None => -earlier.mono.duration_since(self.mono).as_secs_f64(),
        }
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
    /// Builds, compiles and links together (`build_seconds` is their time).
    pub builds: u64,
    /// Of `builds`, the compiles and the links: the summary names them apart.
    pub compiles: u64,
    pub links: u64,
    /// Of `builds`, those the program cache served from the native store, and the source
    /// builds it did not serve, by what the exit line says of them (`schema::miss_phrase`).
    pub served: u64,
    pub not_served: BTreeMap<String, u64>,
    pub build_seconds: f64,
    pub queries: u64,
    pub query_seconds: f64,
    /// Seconds of binary queries that were forwarded to a device the filter selects:
    /// the time the binary policy would have saved.
    pub avoidable_query_seconds: f64,
    /// Builds, compiles and links that failed, and the first one's name and status
    /// (its kernels as its source declares them, or its call).
    pub failed: u64,
    pub first_failure: Option<String>,
    pub substituted: u64,
    pub suppressed: u64,
    /// Queries `substitute` left to the driver: the node had no idle core when planned.
    pub busy_node_answered: u64,
    pub loads: u64,
    /// Loads of the driver's own binaries (not clshim binaries), the application's.
    pub driver_loads: u64,
    pub rejected: u64,
    /// Loads of clshim binaries made from the driver's binaries in the native store, and
    /// those made again from their recipes, by why (as `not_served`).
    pub native_loads: u64,
    pub recipe_loads: BTreeMap<String, u64>,
    /// First launches of a kernel on a device and configuration (where pocl compiles the
    /// kernel that runs), and the wall-clock time they covered from enqueue to
    /// completion: launches in flight together overlap, and are counted once.
    pub first_launches: u64,
    pub first_launch_wall: WallUnion,
    /// Under the program cache: whose compile the builds and the first launches used.
    pub build_origins: Origins,
    pub launch_origins: Origins,
    /// The requests for the driver's binaries this process left, and what the node's warm
    /// service made of them by its exit.
    pub service: Option<crate::store::service::AtExit>,
    /// The application's binary cache folder, where clshim knows it (noted at exit).
    pub application_cache: Option<std::path::PathBuf>,
}

/// Whose compile the builds (or first launches) of a process used, under the program cache,
/// from their records' `shared`, `served` and `kept_in_store`.
#[derive(Default, Debug, Clone, PartialEq)]
pub struct Origins {
    /// Compiled here, and of those, kept in the store (the others by why not).
    pub compiled: u64,
    pub kept: u64,
    pub not_kept: BTreeMap<String, u64>,
    pub from_peer: u64,
    /// Served by the store: from a kept compile (pocl's cache hit), or from the driver's
    /// binary (nothing compiled, nothing preprocessed).
    pub from_store: u64,
    pub native: u64,
    /// pocl's own cache had it.
    pub own_cache: u64,
}

impl Origins {
    fn add(
        &mut self,
        shared: Option<&str>,
        native: bool,
        kept: Option<bool>,
        not_kept: Option<&str>,
    ) {
        if native {
            self.native += 1;
            return;
        }
        match shared {
            Some("compiled") | Some("compiled_after_waiting") => {
                self.compiled += 1;
                self.kept += u64::from(kept == Some(true));
                if let Some(why) = not_kept {
                    *self.not_kept.entry(not_kept_words(why)).or_default() += 1;
                }
            }
            Some("from_peer") => self.from_peer += 1,
            Some("from_store") => self.from_store += 1,
            Some("own_cache") => self.own_cache += 1,
            _ => {}
        }
    }

    fn any(&self) -> bool {
        self.compiled + self.from_peer + self.from_store + self.native + self.own_cache > 0
    }

    /// `2 compiled (2 kept in the store), 1 from a peer, 1 from the store`: every kind
    /// there is, none that there is not.
    fn words(&self) -> String {
        let mut parts = Vec::new();
        if self.compiled > 0 {
            parts.push(if self.kept == self.compiled {
                format!("{} compiled and kept in the store", self.compiled)
            } else if self.not_kept.is_empty() {
                // No store (off, or refused): nothing was tried.
                format!("{} compiled", self.compiled)
            } else {
                let not: u64 = self.compiled - self.kept;
                format!(
                    "{} compiled, {not} of them not kept in the store{}",
                    self.compiled,
                    reasons(&self.not_kept)
                )
            });
        }
        if self.from_peer > 0 {
            parts.push(format!("{} from a peer", self.from_peer));
        }
        if self.from_store + self.native > 0 {
            let native = if self.native > 0 {
                format!(" ({} as the driver's binary)", self.native)
            } else {
                String::new()
            };
            parts.push(format!(
                "{} from the store{native}",
                self.from_store + self.native
            ));
        }
        if self.own_cache > 0 {
            parts.push(format!("{} from pocl's own cache", self.own_cache));
        }
        parts.join(", ")
    }
}

/// Why a compile was not kept, in words that hold for every compile of the kind (a path
/// would count each apart).
fn not_kept_words(why: &str) -> String {
    if why.contains("not yours alone") {
        "pocl's cache is not yours alone".into()
    } else if why.contains("nothing to keep") {
        "pocl's cache held nothing new".into()
    } else if why.contains("No space left") || why.contains("Disk quota") {
        "the store's filesystem is full".into()
    } else {
        "the store could not be written".into()
    }
}

impl Tally {
    /// Counts one record, which started `at` seconds into the process's recording.
    pub fn add(&mut self, record: &Record, at: f64, seconds: f64) {
        match record {
            Record::Build(b) => {
                self.builds += 1;
                self.compiles += u64::from(b.event == Event::Compile);
                self.links += u64::from(b.event == Event::Link);
                self.served += u64::from(b.served.is_some());
                self.build_origins.add(
                    b.shared,
                    b.served.is_some(),
                    b.kept_in_store,
                    b.not_kept.as_deref(),
                );
                if let Some(n) = &b.not_served {
                    *self
                        .not_served
                        .entry(schema::miss_phrase(n.kind, &n.why))
                        .or_default() += 1;
                }
                self.build_seconds += seconds;
                if b.result != crate::cl::CL_SUCCESS {
                    self.failed += 1;
                    if self.first_failure.is_none() {
                        let what = if b.source_kernels.is_empty() {
                            b.call.to_string()
                        } else {
                            b.source_kernels.join(",")
                        };
                        self.first_failure = Some(format!("{what}: {}", b.result_name));
                    }
                }
            }
            Record::BinaryQuery(q) => {
                self.queries += 1;
                self.query_seconds += seconds;
                // Forwarded to a device the filter selects: what the policy would save.
                let avoidable = q
                    .actions
                    .iter()
                    .zip(&q.devices)
                    .any(|(a, d)| *a == "forward" && d.as_ref().is_some_and(|d| d.matched));
                if avoidable {
                    self.avoidable_query_seconds += seconds;
                }
                // Only answers the application actually received count.
                if q.result == crate::cl::CL_SUCCESS {
                    let answered = |which: &str| q.actions.iter().filter(|a| **a == which).count();
                    self.substituted += answered("substitute") as u64;
                    self.suppressed += answered("suppress") as u64;
                    self.busy_node_answered += answered("driver-on-busy-node") as u64;
                }
            }
            Record::BinaryLoad(l) => {
                self.loads += 1;
                self.rejected += u64::from(l.action == "reject");
                self.driver_loads +=
                    u64::from(l.action == "forward" && l.result == crate::cl::CL_SUCCESS);
                match (l.made_from, l.native_miss_kind) {
                    (Some("native"), _) => self.native_loads += 1,
                    (Some(_), Some(kind)) => {
                        let why = l.native_miss.as_deref().unwrap_or_default();
                        *self
                            .recipe_loads
                            .entry(schema::miss_phrase(kind, why))
                            .or_default() += 1;
                    }
                    _ => {}
                }
            }
            Record::FirstLaunch(l) => {
                self.launch_origins
                    .add(l.shared, false, l.kept_in_store, l.not_kept.as_deref());
                self.first_launches += 1;
                self.first_launch_wall.add(at, seconds);
            }
        }
    }

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
    /// Held across fork (registered with the fork handlers).
    state: &'static Lock<State>,
    policy: &'static str,
    program_cache: bool,
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
            state: Lock::new_fork_held(
                ForkOrder::Recorder,
                State {
                    identity: Identity::current(),
                    began: Start::now(),
                    file: TraceFile::new(config.trace_dir.clone(), config.trace_mode),
                    tally: Tally::default(),
                },
            ),
            policy: config.binaries.name(),
            program_cache: config.program_cache,
            devices_filter: config.devices.name(),
            mode,
        }
    }

    pub fn rank(&self) -> Option<u64> {
        self.state.lock().identity.rank
    }

    /// The seconds this process spent compiling: its builds and its first launches.
    pub fn compile_seconds(&self) -> f64 {
        self.state
            .try_lock_for(Duration::from_millis(200))
            .map_or(0.0, |s| {
                s.tally.build_seconds + s.tally.first_launch_wall.total()
            })
    }

    /// What the node's warm service made of this process's requests, for its exit line.
    pub fn note_service(&self, a: crate::store::service::AtExit) {
        if let Some(mut s) = self.state.try_lock_for(Duration::from_millis(200)) {
            s.tally.service = Some(a);
        }
    }

    /// Records one completed event: its trace line, its tally and its log line, all
    /// derived from the record.
    pub fn emit(&self, start: Start, seconds: f64, record: &Record) {
        let mut state = self.state.lock();
        if state.identity.pid != std::process::id() {
            // First record in a forked child: it is a process of its own.
            state.identity = Identity::current();
            state.began = Start::now();
            state.tally = Tally::default();
        }
        let State {
            identity,
            began,
            file,
            tally: counts,
        } = &mut *state;
        let line = Line {
            common: Common {
                schema: schema::VERSION,
                event: record.event(),
                pid: identity.pid,
                instance: &identity.instance,
                rank: identity.rank,
                tid: record.tid().unwrap_or_else(tid),
                ts: start.unix(),
                seconds,
            },
            body: record,
        };
        let text = serde_json::to_string(&line).unwrap_or_default();
        let (policy, filter, mode) = (self.policy, self.devices_filter, self.mode);
        let program_cache = self.program_cache;
        file.append(
            || (identity.file_stem(), identity.instance.clone()),
            || {
                let header = Line {
                    common: Common {
                        schema: schema::VERSION,
                        event: Event::Process,
                        pid: identity.pid,
                        instance: &identity.instance,
                        rank: identity.rank,
                        tid: tid(),
                        ts: began.unix(),
                        seconds: 0.0,
                    },
                    body: &schema::Process {
                        clshim_version: env!("CARGO_PKG_VERSION"),
                        mode,
                        policy,
                        program_cache,
                        devices_filter: filter,
                        host: &identity.host,
                        exe: &identity.exe,
                        argv: &identity.argv,
                        ppid: identity.ppid,
                        size: identity.size,
                        rank_source: identity.rank_source,
                        caches: &crate::cache_dirs::current(),
                        exit_recorded: true,
                        cpus: &crate::host_cpus::current(),
                    },
                };
                serde_json::to_string(&header).unwrap_or_default()
            },
            &text,
        );
        counts.add(record, start.since(began), seconds);
        drop(state);
        log::info!("{}", log_line(record, seconds));
    }

    /// Ends this process's trace file, if it has one, with an `exit` record: its `ts` is
    /// now (its `seconds` 0, as a `process` record's: the process's life is from one `ts`
    /// to the other, however long). Never makes a file.
    pub fn record_exit(&self) {
        let Some(mut state) = self.state.try_lock_for(Duration::from_millis(200)) else {
            return;
        };
        if state.identity.pid != std::process::id() {
            return;
        }
        let now = Start::now();
        let State { identity, file, .. } = &mut *state;
        let line = Line {
            common: Common {
                schema: schema::VERSION,
                event: Event::Exit,
                pid: identity.pid,
                instance: &identity.instance,
                rank: identity.rank,
                tid: tid(),
                ts: now.unix(),
                seconds: 0.0,
            },
            body: &schema::Exit {},
        };
        file.append_if_open(&serde_json::to_string(&line).unwrap_or_default());
    }

    /// The exit summary line, or None if nothing was recorded (or the lock is stuck in a
    /// thread that is still building while the process exits).
    pub fn summary(&self) -> Option<String> {
        let state = self.state.try_lock_for(Duration::from_millis(200))?;
        if state.identity.pid != std::process::id() || !state.tally.recorded_anything() {
            return None;
        }
        let mut tally = state.tally.clone();
        if tally.substituted > 0 {
            tally.application_cache = crate::cache_dirs::application_cache();
        }
        Some(summary_line(
            &state.identity,
            &tally,
            self.policy,
            self.program_cache,
        ))
    }
}

/// The record's log line (`CLSHIM_LOG=info`).
pub fn log_line(record: &Record, seconds: f64) -> String {
    let id = |p: Option<u64>| p.map(|i| i.to_string()).unwrap_or_else(|| "-".into());
    match record {
        Record::Build(b) => {
            let names = if b.kernels.is_empty() {
                String::new()
            } else {
                format!(" [{}]", b.kernels.join(", "))
            };
            let device = b
                .devices
                .first()
                .map(|d| format!(" on {} ({})", d.name, d.platform))
                .unwrap_or_default();
            format!(
                "{} of program {}{names} took {seconds:.3} s{device} -> {}",
                b.event.name(),
                id(b.program),
                b.result_name
            )
        }
        Record::BinaryQuery(q) => {
            let device = q
                .devices
                .first()
                .cloned()
                .flatten()
                .map(|d| format!(" on {} ({} {})", d.name, d.platform, d.kind))
                .unwrap_or_default();
            format!(
                "binary query {} of program {} took {seconds:.3} s{device} [{}] -> {}",
                q.param,
                id(q.program),
                q.action,
                q.result_name
            )
        }
        Record::BinaryLoad(l) => format!(
            "binary load of program {} took {seconds:.3} s [{}] -> {}",
            id(l.program),
            l.action,
            l.result_name
        ),
        Record::FirstLaunch(f) => {
            let sizes = |s: Option<&Vec<usize>>| serde_json::to_string(&s).unwrap_or_default();
            format!(
                "first launch of kernel {} (program {}) global {} local {}{} took {seconds:.3} s -> {}",
                f.kernel.as_deref().unwrap_or("?"),
                id(f.program),
                sizes(Some(&f.global_size)),
                sizes(f.local_size.as_ref()),
                f.device
                    .as_ref()
                    .map(|d| format!(" on {} ({})", d.name, d.platform))
                    .unwrap_or_default(),
                f.result_name
            )
        }
    }
}

/// `4 builds`, or with compiles and links each kind named: `3 compiles + 3 links`,
/// `1 build + 2 compiles + 1 link` (a compile and a link are two calls for one program).
fn build_counts(t: &Tally) -> String {
    let plain = t.builds - t.compiles - t.links;
    let one = |n: u64, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    if t.compiles + t.links == 0 {
        return one(plain, "build");
    }
    [(plain, "build"), (t.compiles, "compile"), (t.links, "link")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, w)| one(n, w))
        .collect::<Vec<_>>()
        .join(" + ")
}

pub fn summary_line(id: &Identity, t: &Tally, policy: &str, program_cache: bool) -> String {
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
    let failed = match (&t.first_failure, t.failed) {
        (Some(first), 1) => format!(" (1 failed: {first})"),
        (Some(first), n) => format!(" ({n} failed, the first {first})"),
        _ => String::new(),
    };
    let origins = |o: &Origins, sep: &str| {
        if o.any() {
            format!("{sep}{}", o.words())
        } else {
            String::new()
        }
    };
    let built = if t.build_origins.any() {
        format!(" ({})", t.build_origins.words())
    } else {
        String::new()
    };
    let mut s = format!(
        "clshim: {who}: {} {:.2} s{built}{failed}, {} binary queries {:.2} s ({share:.0}% of \
         {total:.2} s)",
        build_counts(t),
        t.build_seconds,
        t.queries,
        t.query_seconds
    );
    // First launches are where pocl compiles the kernel that runs: beside the build time,
    // not part of its share.
    if t.first_launches > 0 {
        s.push_str(&format!(
            ", {} first launches {:.2} s wall clock (overlapping ones counted once{})",
            t.first_launches,
            t.first_launch_wall.total(),
            origins(&t.launch_origins, "; ")
        ));
    }
    if program_cache {
        s.push_str("; program cache on");
    }
    // The binary policy, where it had something to act on or was asked for.
    if !program_cache || policy != "pass" || t.queries + t.loads > 0 {
        s.push_str(&format!("; policy {policy}"));
    }
    if t.substituted + t.suppressed > 0 {
        s.push_str(&format!(
            ", {} substituted, {} suppressed",
            t.substituted, t.suppressed
        ));
    }
    if t.busy_node_answered > 0 {
        s.push_str(&format!(
            ", {} answered by the driver (no core was idle for the warm service; \
             CLSHIM_SUBSTITUTE_WHEN_BUSY=1 substitutes there too)",
            t.busy_node_answered
        ));
    }
    if t.loads > 0 {
        s.push_str(&format!(
            ", {} binary loads ({} rejected)",
            t.loads, t.rejected
        ));
        let remade: u64 = t.recipe_loads.values().sum();
        if t.native_loads + remade > 0 {
            s.push_str(&format!(
                ": {} from the driver's binaries in the native store, {} made again from \
                 {}{}",
                t.native_loads,
                remade,
                if remade == 1 {
                    "its recipe"
                } else {
                    "their recipes"
                },
                reasons(&t.recipe_loads)
            ));
            if t.driver_loads > 0 {
                s.push_str(&format!(", {} the driver's own", t.driver_loads));
            }
        } else if t.driver_loads > 0 {
            s.push_str(&format!(": {} the driver's own binaries", t.driver_loads));
        }
    }
    // Builds whose driver's binary the store holds but could not use here (not those that
    // have none: those are said above, compiled or taken).
    let mut unused = t.not_served.clone();
    unused.remove(&schema::miss_phrase(schema::Miss::NoEntry, ""));
    let n: u64 = unused.values().sum();
    if n > 0 {
        s.push_str(&format!(
            "; {n} of {} builds could not use the driver's binary in the store{}",
            t.served + t.not_served.values().sum::<u64>(),
            reasons(&unused)
        ));
    }
    let binary_cache = program_cache && t.queries > 0 && t.served == 0 && policy != "substitute";
    if binary_cache {
        // Its own binary cache, not source builds, decides its warm starts.
        s.push_str(&format!("; {}", asks_for_binaries(t.queries)));
    } else if t.queries == 0 && t.loads == 0 && t.builds > 0 && !program_cache {
        // Nothing for any policy to act on: say so, and what was still measured.
        s.push_str(NO_BINARY_QUERY);
    } else if t.avoidable_query_seconds > 0.2 * total && t.avoidable_query_seconds > 0.05 {
        s.push_str("; CLSHIM_BINARIES=substitute avoids pocl's second compile");
    }
    if let Some(a) = t.service.filter(|a| !a.service && a.made < a.left) {
        // Those that gained an entry meanwhile (a `clshim warm` beside it) are not owed.
        s.push_str(&format!(
            "; `clshim warm` makes the driver's binaries that {} of its clshim binaries \
             lack (the warm service is off)",
            a.left - a.made
        ));
    } else if let Some(a) = t.service.filter(|a| a.service) {
        s.push_str(&service_words(&a));
    }
    if t.substituted > 0 {
        // An application that keeps what it was handed fails without clshim, some with no
        // fallback (hashcat; tests/c/strict_cache.c).
        s.push_str(&going_back(t.application_cache.as_deref()));
    }
    s
}

/// What the node's warm service made of the requests a process left, and how long the
/// process waited for it at its exit.
fn service_words(a: &crate::store::service::AtExit) -> String {
    let noun = if a.left == 1 { "binary" } else { "binaries" };
    let of = match (a.made >= a.left, a.left) {
        (true, 1) => "its clshim binary".to_string(),
        (true, n) => format!("its {n} clshim binaries"),
        (false, n) => format!("{} of its {n} clshim {noun}", a.made),
    };
    let waited = format!("{:.2} s waited for it at exit", a.waited);
    use crate::store::service::CutShort;
    match a.cut_short {
        _ if a.made >= a.left => format!(
            "; the node's warm service made the driver's binaries of {of} for later loads \
             ({waited})"
        ),
        Some(CutShort::Bound) => format!(
            "; the node's warm service made the driver's binaries of {of} ({waited}, its \
             bound): the warm service of a later job, or `clshim warm`, makes the rest"
        ),
        Some(CutShort::Signal) => format!(
            "; the node's warm service made the driver's binaries of {of} by the process's \
             exit, with SIGTERM or the like blocked (in a handler of one, say), when it does \
             not wait: the warm service of a later job, or `clshim warm`, makes the rest"
        ),
        Some(CutShort::NoService) => format!(
            "; no warm service ran to make the driver's binaries that {}: `clshim warm` \
             makes them",
            match (a.left - a.made, a.left) {
                (1, 1) => "its clshim binary lacks".to_string(),
                (1, n) => format!("1 of its {n} clshim binaries lacks"),
                (k, n) => format!("{k} of its {n} clshim binaries lack"),
            }
        ),
        None => format!(
            "; the node's warm service made the driver's binaries of {of} ({waited}); \
             `clshim store` says why the others were not kept"
        ),
    }
}

/// `: 24 whose entries' compiles read other files (...), 2 not kept: ...` (the largest
/// count first), or nothing for no reason.
fn reasons(by_why: &BTreeMap<String, u64>) -> String {
    if by_why.is_empty() {
        return String::new();
    }
    let mut v: Vec<(&String, &u64)> = by_why.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = v.iter().map(|(w, n)| format!("{n} {w}")).collect();
    format!(": {}", parts.join(", "))
}

/// Said of a process under the program cache that asked for binaries (`queries` binary
/// queries): an application with a binary cache of its own, which the program cache does
/// not serve; pyopencl before 2024.2.3 also puts a constant of its own in every cold
/// build's source, so the store fills with entries no later run uses.
pub fn asks_for_binaries(queries: u64) -> String {
    format!(
        "it asked for program binaries ({queries} binary {}), so it keeps a binary cache of \
         its own, which the program cache does not serve (pyopencl before 2024.2.3 also makes \
         every cold build's source unique, so its compiles are kept for no later run): run it \
         with --binaries substitute instead",
        if queries == 1 { "query" } else { "queries" }
    )
}

/// `s` as one word of a shell command line: single-quoted where it holds anything else than
/// what a path usually does.
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The way back from `substitute`, said by every process that handed out clshim binaries,
/// naming the application's cache folder where clshim knows it (`cache_dirs`).
pub fn going_back(cache: Option<&std::path::Path>) -> String {
    let folder = match cache {
        Some(c) => shell_word(&c.display().to_string()),
        None => "DIR (the application's binary cache folder: README, Stop using clshim)".into(),
    };
    format!(
        "; the application's binary cache now holds clshim binaries, which fail without \
         clshim (CL_INVALID_BINARY): before running without clshim, clshim unsubstitute \
         --remove {folder}"
    )
}

/// The summary's words for a process that asked for no binary (pyopencl 2024.2.3 and newer
/// on pocl keep no binary cache): the policies, `clshim warm` and `clshim unsubstitute`
/// have nothing to act on.
pub const NO_BINARY_QUERY: &str = ": no binary query, so no binary policy had anything to act \
     on (the application keeps no binaries: the program cache, CLSHIM_PROGRAM_CACHE=1 and \
     clshim run's default, keeps its compiles and serves them to later runs); clshim \
     measured builds and first launches only";

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
        let s = summary_line(&id, &t, "pass", false);
        assert!(
            s.starts_with(
                "clshim: rank 2 pid 9: 4 builds 1.00 s, 4 binary queries 3.00 s (75% of 4.00 s)"
            ),
            "{s}"
        );
        assert!(s.contains("CLSHIM_BINARIES=substitute"));
        let quiet = Tally {
            avoidable_query_seconds: 0.0,
            ..t.clone()
        };
        assert!(!summary_line(&id, &quiet, "substitute", false).contains("CLSHIM_BINARIES"));
        assert!(!s.contains("first launches"), "{s}");
        // Three launches in flight together, 5.5 s of their own: 2.5 s of wall clock.
        let mut wall = WallUnion::new();
        for (at, seconds) in [(0.0, 2.0), (0.5, 2.0), (1.0, 1.5)] {
            wall.add(at, seconds);
        }
        let launched = Tally {
            first_launches: 3,
            first_launch_wall: wall,
            ..quiet
        };
        // No binary query: what is said depends on whether the program cache was on.
        let sourced = Tally {
            builds: 4,
            build_seconds: 1.0,
            ..Tally::default()
        };
        assert!(summary_line(&id, &sourced, "pass", false).ends_with(NO_BINARY_QUERY));
        // Under the program cache: the builds served, and why the others were not, each
        // reason counted once however many builds it concerns.
        let mut missed = Tally {
            served: 1,
            ..sourced.clone()
        };
        for (kind, why) in [
            (schema::Miss::FilesDiffer, "device 0: its entry's compile read other files (x)"),
            (schema::Miss::FilesDiffer, "its entry's compile read other files (y)"),
            (schema::Miss::NotKept, "its preprocessed text holds the time of the compile (__TIME__): each build's differs"),
        ] {
            *missed
                .not_served
                .entry(schema::miss_phrase(kind, why))
                .or_default() += 1;
        }
        let s = summary_line(&id, &missed, "pass", true);
        assert!(
            s.ends_with(
                "; program cache on; 3 of 4 builds could not use the driver's binary in the \
                 store: 2 whose entries' compiles read other files (another folder's \
                 headers?), 1 not kept: they hold the time of the compile"
            ),
            "{s}"
        );
        assert!(!s.contains("policy pass"), "{s}");
        // Whose compile the builds and first launches used, every kind there is.
        let origins = Tally {
            build_origins: Origins {
                compiled: 2,
                kept: 2,
                from_peer: 1,
                from_store: 3,
                native: 1,
                ..Origins::default()
            },
            launch_origins: Origins {
                compiled: 1,
                kept: 0,
                not_kept: [("the store's filesystem is full".to_string(), 1)].into(),
                ..Origins::default()
            },
            first_launches: 1,
            ..sourced.clone()
        };
        let s = summary_line(&id, &origins, "pass", true);
        assert!(
            s.contains(
                "4 builds 1.00 s (2 compiled and kept in the store, 1 from a peer, 4 from the \
                 store (1 as the driver's binary))"
            ),
            "{s}"
        );
        assert!(
            s.contains(
                "(overlapping ones counted once; 1 compiled, 1 of them not kept in the store: 1 \
                 the store's filesystem is full)"
            ),
            "{s}"
        );
        // Binary queries under the program cache: an application with its own binary cache.
        let queried = Tally {
            queries: 2,
            served: 0,
            ..missed.clone()
        };
        assert!(summary_line(&id, &queried, "pass", true).ends_with(&asks_for_binaries(2)));
        assert!(!summary_line(&id, &queried, "substitute", true).contains("asked for"));
        // Clshim binaries handed out: the way back is said.
        let handed = Tally {
            substituted: 2,
            ..t.clone()
        };
        assert!(summary_line(&id, &handed, "substitute", false).ends_with(&going_back(None)));
        let known = Tally {
            application_cache: Some("/h/.cache/pyopencl".into()),
            ..handed.clone()
        };
        assert!(summary_line(&id, &known, "substitute", false)
            .ends_with("clshim unsubstitute --remove /h/.cache/pyopencl"));
        assert!(!summary_line(&id, &t, "pass", false).contains("unsubstitute"));
        let s = summary_line(&id, &launched, "pass", false);
        assert!(
            s.contains(
                "(75% of 4.00 s), 3 first launches 2.50 s wall clock (overlapping ones counted \
                 once); policy pass"
            ),
            "{s}"
        );
        let linked = Tally {
            builds: 6,
            compiles: 3,
            links: 3,
            build_seconds: 1.0,
            queries: 4,
            ..Tally::default()
        };
        assert!(
            summary_line(&id, &linked, "substitute", false)
                .starts_with("clshim: rank 2 pid 9: 3 compiles + 3 links 1.00 s, 4 binary"),
            "{}",
            summary_line(&id, &linked, "substitute", false)
        );
        let mixed = Tally {
            builds: 4,
            compiles: 2,
            links: 1,
            build_seconds: 1.0,
            ..Tally::default()
        };
        assert!(summary_line(&id, &mixed, "pass", false)
            .contains(": 1 build + 2 compiles + 1 link 1.00 s,"));
        let only_launches = Tally {
            first_launches: 1,
            ..Tally::default()
        };
        assert!(only_launches.recorded_anything());
    }
}
