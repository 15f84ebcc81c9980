//! The trace schema (docs/trace-schema.md), defined once: the schema version,
//! the event names, the name of pocl's platform, and a typed structure for every record
//! the library writes. The library serialises these (`record`); the `clshim` command reads
//! the same names and constants back (`traces`), through a borrowed, tolerant view of its
//! own because it reads files anyone may have written, where the writer only ever writes
//! what these structures hold.

use serde::{Deserialize, Serialize};

/// The schema version every record carries.
pub const VERSION: u64 = 1;

/// The `platform` name of pocl's devices.
pub const POCL_PLATFORM: &str = "Portable Computing Language";

/// A record's `event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// The first line of every trace file: who wrote it.
    Process,
    Build,
    Compile,
    Link,
    BinaryQuery,
    BinaryLoad,
    FirstLaunch,
    /// The process reached `exit()`: its end. A process killed, crashed, or gone through
    /// `_exit` or `exec` writes none.
    Exit,
}

impl Event {
    const ALL: [Event; 8] = [
        Event::Process,
        Event::Build,
        Event::Compile,
        Event::Link,
        Event::BinaryQuery,
        Event::BinaryLoad,
        Event::FirstLaunch,
        Event::Exit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Event::Process => "process",
            Event::Build => "build",
            Event::Compile => "compile",
            Event::Link => "link",
            Event::BinaryQuery => "binary_query",
            Event::BinaryLoad => "binary_load",
            Event::FirstLaunch => "first_launch",
            Event::Exit => "exit",
        }
    }

    pub fn parse(s: &str) -> Option<Event> {
        Event::ALL.into_iter().find(|e| e.name() == s)
    }

    /// build, compile and link: the events whose time is "build time".
    pub fn is_build(self) -> bool {
        matches!(self, Event::Build | Event::Compile | Event::Link)
    }
}

/// The fields every record starts with.
#[derive(Debug, Serialize)]
pub struct Common<'a> {
    pub schema: u64,
    pub event: Event,
    pub pid: u32,
    pub instance: &'a str,
    pub rank: Option<u64>,
    /// The OS thread id of the thread the event happened on.
    pub tid: i64,
    /// Wall-clock start, Unix seconds.
    pub ts: f64,
    pub seconds: f64,
}

/// One line of a trace file: the common fields, then the event's own.
#[derive(Debug, Serialize)]
pub struct Line<'a, B: Serialize> {
    #[serde(flatten)]
    pub common: Common<'a>,
    #[serde(flatten)]
    pub body: &'a B,
}

/// The `process` record's own fields.
#[derive(Debug, Serialize)]
pub struct Process<'a> {
    pub clshim_version: &'static str,
    /// `preload` or `layer`: the door the process's first call came through.
    pub mode: &'static str,
    pub policy: &'static str,
    /// Whether the program cache was on (`CLSHIM_PROGRAM_CACHE`; absent in traces of
    /// clshim before it recorded it).
    pub program_cache: bool,
    pub devices_filter: &'static str,
    pub host: &'a str,
    pub exe: &'a str,
    pub argv: &'a [String],
    pub ppid: u32,
    pub size: Option<u64>,
    pub rank_source: Option<&'static str>,
    /// The cache directories in effect for the process and the filesystem each is on
    /// (absent in traces of clshim before it recorded them).
    pub caches: &'a [CacheDir],
    /// Always true: this writer ends the file with an `exit` record when the process
    /// exits (absent in traces of clshim before it did), so a file without one is a
    /// process that did not reach `exit()`.
    pub exit_recorded: bool,
    /// The CPUs the process may run on (absent in traces of clshim before it recorded them).
    pub cpus: &'a Cpus,
}

/// The host's CPUs as a process saw them when its recording began: what `clshim report`
/// sets its ranks against.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Cpus {
    /// CPUs online on the host.
    pub online: Option<u32>,
    /// The CPUs the process's affinity allows, as a list of ranges (`0-3,8`); null where
    /// there are no affinity masks (macOS).
    pub affinity: Option<String>,
    /// The CPU limit of the process's cgroup (quota over period, in CPUs), the tightest of
    /// its cgroup and their parents; null when none is set or there are no cgroups.
    pub cgroup_limit: Option<f64>,
}

/// A cache directory a process would use, as the `process` record describes it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CacheDir {
    /// Whose cache: `pocl`, `pyopencl` or `cuda`.
    pub cache: String,
    /// The directory, as the owner derives it (it need not exist yet).
    pub path: String,
    /// The variable that set it (`POCL_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME`, ...), or
    /// null for a built-in default.
    pub from: Option<String>,
    /// The filesystem the directory (or its nearest existing parent) is on: `nfs`,
    /// `lustre`, `gpfs`, `beegfs`, `tmpfs`, `ext4`, ..., or `0x<magic>` for another; null
    /// when it could not be told.
    pub fs: Option<String>,
    /// Whether the directory existed when the record was written (absent, read as
    /// unknown, in traces of clshim before it recorded it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
}

/// CPU numbers (sorted, distinct) in the form of [`Cpus::affinity`], the kernel's list
/// form: ranges joined by commas (`0-3,8`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", cpus[i], cpus[j])
        } else {
            cpus[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

/// [`Cpus::affinity`] read back; None for anything else (or a range past 65,536 CPUs).
pub fn parse_cpu_list(s: &str) -> Option<std::collections::BTreeSet<usize>> {
    let mut set = std::collections::BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b): (usize, usize) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let n = part.trim().parse().ok()?;
                (n, n)
            }
        };
        if b < a || b - a > 1 << 16 {
            return None;
        }
        set.extend(a..=b);
    }
    Some(set)
}

/// Filesystems shared between nodes over a network (`CacheDir::fs` names), where a cache
/// is slow to reach and ranks of many nodes meet.
pub fn is_network_fs(fs: &str) -> bool {
    matches!(
        fs,
        "nfs" | "lustre" | "gpfs" | "beegfs" | "cifs" | "smb2" | "ceph" | "panfs" | "fuse"
    )
}

/// Where the texts of a build, compile or link were kept (`CLSHIM_TRACE_SOURCES=1`):
/// references `<16 hex digits of fnv1a64>-<length>`, each naming the file
/// `sources/<reference>.<cl|opt|h>` in the trace directory. A reference is given whether
/// or not its file could be stored (the per-process cap, a full disk).
#[derive(Debug, Serialize)]
pub struct Kept {
    /// The program's source text (null for a program made from IL, a binary or a link).
    pub source: Option<String>,
    /// The options string (null when there was none).
    pub options: Option<String>,
    /// Compile only: each embedded header's include name and its source's reference.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<KeptHeader>,
}

#[derive(Debug, Serialize)]
pub struct KeptHeader {
    pub name: String,
    pub source: String,
}

/// A device as records describe it.
#[derive(Clone, Debug, Serialize)]
pub struct Device {
    pub name: String,
    /// `CPU`, `GPU`, `ACCELERATOR`, `CUSTOM` or `DEFAULT`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub platform: String,
    pub vendor: String,
    pub driver: String,
    /// Whether `CLSHIM_DEVICES` selects the device.
    pub matched: bool,
    /// `CL_DEVICE_MAX_COMPUTE_UNITS` (null if the device would not say): on pocl's CPU
    /// driver, the worker threads each process starts for it.
    pub compute_units: Option<u32>,
}

/// Where a program came from and what it was made from.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    pub origin: &'static str,
    /// `fnv1a64:<16 hex digits>`.
    pub hash: Option<String>,
    pub length: Option<usize>,
}

/// A build, compile or link.
#[derive(Debug, Serialize)]
pub struct Build {
    /// build, compile or link.
    #[serde(skip)]
    pub event: Event,
    /// CPU seconds of the calling thread and the children it waited for (null when the
    /// call ended on another thread, or the clock could not be read).
    pub cpu_seconds: Option<f64>,
    pub call: &'static str,
    pub program: Option<u64>,
    pub result: i32,
    pub result_name: &'static str,
    pub options: Option<String>,
    #[serde(rename = "async")]
    pub is_async: bool,
    pub kernels: Vec<String>,
    pub devices: Vec<Device>,
    /// Build and compile only (null when the program is unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Option<Source>>,
    /// Link only: the input programs' ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<u64>>,
    /// Compile only: how many headers were given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<u32>,
    /// Build of a program recreated from a clshim binary, when the application's options
    /// differ from those the binary recorded (which were used).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options_replaced: Option<OptionsReplaced>,
    /// With `CLSHIM_TRACE_SOURCES=1` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
    /// A build or compile that failed: the kernel names its source text declares (the
    /// implementation names none after a failure).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub source_kernels: Vec<String>,
    /// A build or compile that failed: the first error line of its build log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A build the program cache served: `"store"` (made from the driver's binary in the
    /// native store, nothing compiled). Absent for a build the driver compiled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served: Option<&'static str>,
    /// With the program cache, whose compile a source build used: `"compiled"` (this rank
    /// compiled it, and published its compile to its peers), `"from_store"` (it took the
    /// compile an earlier job, or another node, kept in the store: pocl's cache hit),
    /// `"from_peer"` (it took a peer's compile: pocl's cache hit), `"own_cache"` (pocl's
    /// own cache had it), or `"compiled_after_waiting"` (it waited for a peer past its
    /// patience, or took a compile pocl did not find its own in, then compiled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<&'static str>,
    /// How long the build waited for a peer's compile, in seconds (with `shared`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_wait_seconds: Option<f64>,
    /// A build that took a compile from the store (`from_store`): the node whose rank kept
    /// it (another node's, in the same job, where nodes share a store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_host: Option<String>,
    /// A build (or first launch) this rank compiled under the program cache: whether what
    /// pocl made entered the store for later jobs (`true`), or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_in_store: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_kept: Option<String>,
    /// A source build the driver compiled while the program cache was on: why the store
    /// did not serve it. Absent on every other build.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_served: Option<NotServed>,
}

/// Why the native store gave a build or a load nothing of its own: the kind a report
/// counts, and the words of the one case.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct NotServed {
    pub kind: Miss,
    pub why: String,
}

/// The kinds of [`NotServed`] (a build's `not_served.kind`, a load's `native_miss_kind`).
/// Each says what would change the answer, so no message promises a warm step that will
/// not make an entry.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Miss {
    /// No entry yet: the build's compile is kept, and `clshim warm` makes the entry from it.
    NoEntry,
    /// An entry whose compile read other files than this build would (a header edited,
    /// another folder's headers): a warm step makes it again for these files.
    FilesDiffer,
    /// The warm step found this build cannot be kept (it holds `__TIME__`, changes files).
    NotKept,
    /// An entry ignored: damaged, foreign, or not the user's alone.
    Ignored,
    /// No entry can stand for this build: its recipe breaks a rule of the format, its
    /// device is not pocl's, no store.
    CannotKeep,
    /// The rest: a device list other than the program's, a driver that refused the binary.
    Other,
}

impl Miss {
    pub const ALL: [Miss; 6] = [
        Miss::NoEntry,
        Miss::FilesDiffer,
        Miss::NotKept,
        Miss::Ignored,
        Miss::CannotKeep,
        Miss::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Miss::NoEntry => "no_entry",
            Miss::FilesDiffer => "files_differ",
            Miss::NotKept => "not_kept",
            Miss::Ignored => "ignored",
            Miss::CannotKeep => "cannot_keep",
            Miss::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Miss> {
        Miss::ALL.into_iter().find(|m| m.name() == s)
    }
}

/// What the exit line and `clshim report` say of builds or loads that missed for `why`
/// (of the kind `kind`), after their count: cases that call for the same step read alike,
/// so they are counted together (`24 whose entries' compiles read other files (another
/// folder's headers?)`). Only a missing entry is one a warm step makes.
pub fn miss_phrase(kind: Miss, why: &str) -> String {
    match kind {
        Miss::NoEntry => "with no driver's binary in the store yet".into(),
        Miss::FilesDiffer => {
            "whose entries' compiles read other files (another folder's headers?)".into()
        }
        Miss::NotKept => format!("not kept: {}", not_kept_phrase(why)),
        Miss::Ignored => "whose entries were ignored as damaged, foreign or not yours alone \
             (clshim's warnings name them)"
            .into(),
        Miss::CannotKeep => format!("that the store cannot keep: {why}"),
        Miss::Other => format!("not served: {why}"),
    }
}

/// Why the warm step keeps no build, in a few words that hold for every build of the kind:
/// the warm step's own words name a path or a time, which would count each build apart.
pub fn not_kept_phrase(why: &str) -> String {
    let has = |s: &str| why.contains(s);
    if has("__TIME__") || has("__DATE__") || has("__TIMESTAMP__") {
        "they hold the time of the compile".into()
    } else if has("__FILE__") {
        "they hold the name of pocl's temporary file (__FILE__)".into()
    } else if has("the compile changed") || has("could not change") {
        "their compiles change files".into()
    } else if has("not a regular file") {
        "their compiles read a FIFO or a device".into()
    } else if has("the system's state") {
        "their compiles read the system's state (/proc, /sys, a device)".into()
    } else if has("met an error") {
        "their compiles met an error other than a missing file".into()
    } else if has("could not be followed") || has("not seen") {
        "the warm step could not follow their compiles".into()
    } else {
        format!("the warm step could not keep them ({why})")
    }
}

/// The options an application gave a build, and those clshim built with instead.
#[derive(Debug, Serialize)]
pub struct OptionsReplaced {
    pub given: Option<String>,
    pub used: String,
}

/// A `CL_PROGRAM_BINARY_SIZES` or `CL_PROGRAM_BINARIES` query with a value buffer.
#[derive(Debug, Serialize)]
pub struct BinaryQuery {
    /// As in [`Build`].
    pub cpu_seconds: Option<f64>,
    pub call: &'static str,
    pub program: Option<u64>,
    pub param: &'static str,
    pub result: i32,
    pub result_name: &'static str,
    /// `forward`, `suppress`, `substitute`, or `mixed` when the devices differ.
    pub action: &'static str,
    /// Per device, in the program's device order.
    pub actions: Vec<&'static str>,
    pub sizes: Option<Vec<Option<usize>>>,
    /// Per device; null where the device could not be queried.
    pub devices: Vec<Option<Device>>,
}

/// A `clCreateProgramWithBinary` call.
#[derive(Debug, Serialize)]
pub struct BinaryLoad {
    pub call: &'static str,
    pub program: Option<u64>,
    pub result: i32,
    pub result_name: &'static str,
    /// `forward`, `substitute` or `reject`.
    pub action: &'static str,
    pub reason: Option<String>,
    pub lengths: Vec<usize>,
    pub source: Option<Source>,
    pub devices: Vec<Option<Device>>,
    /// Only on a load clshim made from clshim binaries (`action` `substitute`): `native`
    /// when the program was made from the driver's own binaries in the native store,
    /// `recipe` when it was made again from the recipe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub made_from: Option<&'static str>,
    /// With `made_from` `recipe`: why no native binary was used (no entry; an entry
    /// ignored as damaged or foreign, and why; the driver refused it; no store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_miss: Option<String>,
    /// With `native_miss`: its kind, as a build's `not_served` counts it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub native_miss_kind: Option<Miss>,
}

/// The first launch of a kernel on a device with one work-group configuration.
#[derive(Debug, Serialize)]
pub struct FirstLaunch {
    /// The thread that launched, not the one the completion callback runs on: the
    /// record's `tid`.
    #[serde(skip)]
    pub tid: i64,
    /// CPU seconds of every thread but the launching one (pocl compiles and runs the
    /// kernel on its worker threads) and of the children reaped, from the enqueue to the
    /// completion; null where that cannot be read (macOS, a launcher that exited).
    pub cpu_seconds: Option<f64>,
    /// The same clock's reading at the enqueue: launches of one thread that overlap share
    /// that clock, so their CPU together is the difference of its readings.
    pub cpu_clock: Option<f64>,
    pub call: &'static str,
    pub kernel: Option<String>,
    pub program: Option<u64>,
    pub device: Option<Device>,
    pub work_dim: u32,
    pub global_size: Vec<usize>,
    pub local_size: Option<Vec<usize>>,
    pub result: i32,
    pub result_name: &'static str,
    /// With the program cache, a launch of a kernel of a program whose build went through
    /// it: as a build's `shared` (`"compiled"`, `"from_store"`, `"from_peer"`,
    /// `"compiled_after_waiting"`, `"own_cache"`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<&'static str>,
    /// How long the launch waited for a peer's compile, in seconds (with `shared`;
    /// included in `seconds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_wait_seconds: Option<f64>,
    /// As a build's: the node whose rank kept the kernel this launch took from the store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_host: Option<String>,
    /// As a build's: whether the kernel this launch compiled entered the store, or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_in_store: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_kept: Option<String>,
}

/// The `exit` record's own fields: none (its `ts` is when the process exited; its
/// `seconds` 0).
#[derive(Debug, Serialize)]
pub struct Exit {}

/// A record the library writes after an intercepted call.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Record {
    Build(Build),
    BinaryQuery(BinaryQuery),
    BinaryLoad(BinaryLoad),
    FirstLaunch(FirstLaunch),
}

impl Record {
    pub fn event(&self) -> Event {
        match self {
            Record::Build(b) => b.event,
            Record::BinaryQuery(_) => Event::BinaryQuery,
            Record::BinaryLoad(_) => Event::BinaryLoad,
            Record::FirstLaunch(_) => Event::FirstLaunch,
        }
    }

    /// The thread the event happened on, where it is not the one that writes the record.
    pub fn tid(&self) -> Option<i64> {
        match self {
            Record::FirstLaunch(l) => Some(l.tid),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::IntoDeserializer;

    #[test]
    fn cpu_lists_are_ranges_and_read_back() {
        let cpus = [0, 1, 2, 3, 8, 10, 11];
        assert_eq!(format_cpu_list(&cpus), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[5]), "5");
        assert_eq!(format_cpu_list(&[]), "");
        let back: Vec<usize> = parse_cpu_list("0-3,8,10-11").unwrap().into_iter().collect();
        assert_eq!(back, cpus);
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_cpu_list("x").is_none());
    }

    /// `Event::name` and the name serde writes and reads are one naming.
    #[test]
    fn every_event_reads_back_by_its_name() {
        for e in Event::ALL {
            let name: serde::de::value::StrDeserializer<serde::de::value::Error> =
                e.name().into_deserializer();
            assert_eq!(Event::deserialize(name).ok(), Some(e), "{}", e.name());
        }
    }
}
