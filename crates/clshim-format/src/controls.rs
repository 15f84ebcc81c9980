//! The one definition of every control: its environment variable, its `clshim run`
//! option, the values it accepts, its default and its help text. The library's parser
//! (`config`), the command's options, `clshim run --help` and docs/clshim-command.md's
//! option table (the command's `help` renders both), and README's control table all come
//! from [`ALL`], so what the command accepts is exactly what the library takes
//! without a warning. Checking a value here never fails loudly: it says yes with the
//! parsed value, or no, and the caller decides between a warning (library) and a usage
//! error (command).

/// The shape of the values a control accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grammar {
    /// One word of the list, in any letter case.
    OneOf(&'static [&'static str]),
    /// On or off: `1`/`true`/`yes`/`on`, `0`/`false`/`no`/`off`, in any letter case.
    Switch,
    /// Octal permission bits, digits 0-7 only, from 0 to 0777.
    Mode,
    /// Comma-separated `level`, `target` or `target=level` directives, where a level is
    /// one of [`LOG_LEVELS`] (any case) and a target `clshim` or `clshim::MODULE`.
    LogFilter,
    /// A path, kept byte for byte.
    Path,
    /// A path kept byte for byte, or the word `off` (any letter case).
    PathOrOff,
    /// A size in bytes: digits, optionally followed by `K`, `M`, `G` or `T` (powers of
    /// 1024, any letter case), at most 2^63 - 1 bytes.
    Size,
}

/// Who reads a control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// The library, at the first intercepted call (and `clshim run` sets it).
    Library,
    /// `clshim run` only.
    Command,
}

/// One control. Text fields are written for where they appear: `values`, `default` and
/// `doc` are README's Markdown columns, `help` the plain words of `clshim run --help`.
#[derive(Debug)]
pub struct Control {
    pub var: &'static str,
    /// The `clshim run` option that sets the variable (a switch also has `--no-…`).
    pub option: &'static str,
    /// The option's value placeholder in the help; empty for a switch.
    pub metavar: &'static str,
    pub grammar: Grammar,
    pub reader: Reader,
    /// The default, as the library's warnings name it.
    pub default: &'static str,
    pub values: &'static str,
    pub default_doc: &'static str,
    pub doc: &'static str,
    pub help: &'static str,
}

pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

pub const BINARIES: Control = Control {
    var: "CLSHIM_BINARIES",
    option: "--binaries",
    metavar: "POLICY",
    grammar: Grammar::OneOf(&["pass", "suppress", "substitute"]),
    reader: Reader::Library,
    default: "pass",
    values: "`pass`, `suppress`, `substitute`",
    default_doc: "`pass`",
    doc: "What clshim answers to `CL_PROGRAM_BINARY_SIZES` / `CL_PROGRAM_BINARIES` queries on devices `CLSHIM_DEVICES` selects (see below).",
    help: "pass | suppress | substitute",
};

pub const DEVICES: Control = Control {
    var: "CLSHIM_DEVICES",
    option: "--devices",
    metavar: "SET",
    grammar: Grammar::OneOf(&["pocl-cpu", "pocl", "all"]),
    reader: Reader::Library,
    default: "pocl-cpu",
    values: "`pocl-cpu`, `pocl`, `all`",
    default_doc: "`pocl-cpu`",
    doc: "Devices the binary policy applies to: CPU devices of the platform \"Portable Computing Language\", every pocl device, or every device. All others are always passed through.",
    help: "pocl-cpu | pocl | all",
};

pub const TRACE_DIR: Control = Control {
    var: "CLSHIM_TRACE_DIR",
    option: "--trace-dir",
    metavar: "DIR",
    grammar: Grammar::Path,
    reader: Reader::Library,
    default: "unset",
    values: "a directory",
    default_doc: "unset: no trace files",
    doc: "One JSON Lines trace file per process in this directory (created if missing).",
    help: "a directory (made absolute, created first)",
};

pub const TRACE_MODE: Control = Control {
    var: "CLSHIM_TRACE_MODE",
    option: "--trace-mode",
    metavar: "MODE",
    grammar: Grammar::Mode,
    reader: Reader::Library,
    default: "0600",
    values: "octal permission bits from `0` to `0777`, e.g. `0640`",
    default_doc: "`0600`",
    doc: "Permissions of new trace files.",
    help: "octal bits from 0 to 0777, e.g. 0640",
};

pub const SOURCES: Control = Control {
    var: "CLSHIM_TRACE_SOURCES",
    option: "--sources",
    metavar: "",
    grammar: Grammar::Switch,
    reader: Reader::Library,
    default: "0",
    values: "`1`, `0` (also `true`/`false`, `yes`/`no`, `on`/`off`)",
    default_doc: "`0`",
    doc: "With `CLSHIM_TRACE_DIR`: keep each distinct program source, option string and header source once in `DIR/sources/`, so `clshim report` can show what differs between ranks and runs. Sources can be confidential: off by default, files get `CLSHIM_TRACE_MODE`.",
    help: "keep each distinct program source once in DIR/sources",
};

pub const LOG: Control = Control {
    var: "CLSHIM_LOG",
    option: "--log",
    metavar: "FILTER",
    grammar: Grammar::LogFilter,
    reader: Reader::Library,
    default: "warn",
    values: "an env_logger filter: `off`, `error`, `warn`, `info`, `debug`, `trace`, or `clshim::MODULE=LEVEL` directives",
    default_doc: "`warn`",
    doc: "Log lines on stderr; `info` prints one line per build, binary query, binary load and first launch with its time.",
    help: "off | error | warn | info | debug | trace [,clshim::MOD=level]",
};

pub const SUMMARY: Control = Control {
    var: "CLSHIM_SUMMARY",
    option: "--summary",
    metavar: "",
    grammar: Grammar::Switch,
    reader: Reader::Library,
    default: "1",
    values: "`1`, `0` (also `true`/`false`, `yes`/`no`, `on`/`off`)",
    default_doc: "`1`",
    doc:
        "One summary line per process on stderr at exit, only in processes that recorded something.",
    help: "a summary line per process on stderr at exit",
};

pub const NATIVE_STORE: Control = Control {
    var: "CLSHIM_NATIVE_STORE",
    option: "--native-store",
    metavar: "DIR",
    grammar: Grammar::PathOrOff,
    reader: Reader::Library,
    default: "$HOME/.cache/clshim/native",
    values: "a directory, or `off`",
    default_doc: "`$HOME/.cache/clshim/native` (not `XDG_CACHE_HOME`, which job scripts set per rank)",
    doc: "The store: the compiles jobs keep (with `CLSHIM_PROGRAM_CACHE`), and the driver's own binaries that `clshim warm` makes of them and of those applications asked for under `substitute` (the node's warm service, `CLSHIM_WARM_SERVICE`, makes the latter before the job ends), each taken only by a build of exactly its key (see docs/binary-policies.md). Yours alone (0700). `off`: no store.",
    help: "a directory, or off (default $HOME/.cache/clshim/native)",
};

pub const PROGRAM_CACHE: Control = Control {
    var: "CLSHIM_PROGRAM_CACHE",
    option: "--program-cache",
    metavar: "",
    grammar: Grammar::Switch,
    reader: Reader::Library,
    default: "0",
    values: "`1`, `0` (also `true`/`false`, `yes`/`no`, `on`/`off`)",
    default_doc: "`0`; `clshim run` sets `1` unless given `--record-only`",
    doc: "Keep, share and serve what pocl compiles (source builds of one pocl device, and their kernels' first launches, with pocl's kernel cache on): a build whose key (source, options, pocl's variables, device, driver) the store keeps a compile of takes it into its own pocl kernel cache, where pocl finds it only under the hash of its own preprocessed source and headers; otherwise its node's first rank compiles while the others wait (`CLSHIM_SHARE_BUILDS`), and keeps what pocl made in the store as soon as it has it, for later jobs on any node. A build whose exact build (and every file its compile read) has the driver's binary in the store (`clshim warm`) loads that instead. Linux only.",
    help: "keep, share and serve what pocl compiles (clshim run's default)",
};

pub const WARM_SERVICE: Control = Control {
    var: "CLSHIM_WARM_SERVICE",
    option: "--warm-service",
    metavar: "",
    grammar: Grammar::Switch,
    reader: Reader::Library,
    default: "1",
    values: "`1`, `0` (also `true`/`false`, `yes`/`no`, `on`/`off`)",
    default_doc: "`1` on Linux (elsewhere `0`: no service runs there)",
    doc: "Where an application asks for binaries (`substitute` hands out a clshim binary whose driver's binary the store lacks, on a node with a core idle: see `CLSHIM_SUBSTITUTE_WHEN_BUSY`; or a process loads one), start the node's warm service, which makes those driver's binaries in processes of its own at idle priority (`SCHED_IDLE`: only on cores nothing else wants, never in the application) and ends with the job's last process; each process that left requests waits for it at its exit, at most three times its own build and first-launch seconds (10 s at least, 300 s at most), and only about a second when no service runs. So the job ends with the driver's binaries of what it handed out, and later loads take them. A job that asks for no binaries (current pyopencl) starts no service and waits for nothing; a process killed by a signal does not wait. `0`: the requests wait for `clshim warm`, run apart from the job, and no process waits. On by default since 2026-12-06: with it off, warm reruns under `substitute` made every load again from its recipe (pyopencl 2023.1 on 2 ranks, 2 cores: 0 of 8 native, 1.42x the CPU of pocl's own binary loads).",
    help: "the node's warm service makes the binaries an application asks for; its processes wait for it at exit (on by default)",
};

pub const SUBSTITUTE_WHEN_BUSY: Control = Control {
    var: "CLSHIM_SUBSTITUTE_WHEN_BUSY",
    option: "--substitute-when-busy",
    metavar: "",
    grammar: Grammar::Switch,
    reader: Reader::Library,
    default: "0",
    values: "`1`, `0` (also `true`/`false`, `yes`/`no`, `on`/`off`)",
    default_doc: "`0`",
    doc: "Under `substitute` with the warm service on: whether a program's binary query is answered with a clshim binary when the CPUs the process may run on were not idle lately (less than half a CPU's idle time, by `/proc/stat`, over the CPUs of its affinity less what its cgroup's limit forbids, since the previous look). `0`: there the driver answers (pocl's generic compile, in the application, as without clshim), unless the store already holds that build's driver's binary, or no request would be left (no store): the warm service would make the same compile on a core the job needs, in a process of its own that loads the compiler again, and the job would wait for it at its exit. `1`: substitute there too (the cold build is spared its second compile; the job waits for the service at its exit). With the warm service off every query is substituted.",
    help: "under substitute, also where no core is idle (else the driver answers there)",
};

pub const SHARE_BUILDS: Control = Control {
    var: "CLSHIM_SHARE_BUILDS",
    option: "--share-builds",
    metavar: "",
    grammar: Grammar::Switch,
    reader: Reader::Library,
    default: "1",
    values: "`1`, `0` (also `true`/`false`, `yes`/`no`, `on`/`off`)",
    default_doc: "`1`",
    doc: "With `CLSHIM_PROGRAM_CACHE`: ranks of a node that build the same program share one compile of it, and of its kernels at their first launch. The first rank compiles while the others wait (at most 1.5 times as long as they expect their own compile to take, six times for a first launch), then they take its compile into their own pocl kernel cache (pocl checks it is theirs, by the hash of their preprocessed source) and build or launch as a cache hit; ranks of other nodes sharing the store wait the same way on its lease. `0`: no rank waits for another's compile, on its node or another: each compiles what the store does not hold yet (and keeps it there).",
    help: "with --program-cache, ranks of a node share one compile of a program",
};

pub const NATIVE_STORE_MAX: Control = Control {
    var: "CLSHIM_NATIVE_STORE_MAX",
    option: "--native-store-max",
    metavar: "SIZE",
    grammar: Grammar::Size,
    reader: Reader::Library,
    default: "1G",
    values: "bytes, or with a `K`, `M`, `G` or `T` suffix",
    default_doc: "`1G`",
    doc: "The size the store is kept under: the processes that keep compiles (at most once an hour) and `clshim warm` remove the least recently used beyond it.",
    help: "bytes, or with a K, M, G or T suffix (default 1G)",
};

pub const LIB: Control = Control {
    var: "CLSHIM_LIB",
    option: "--lib",
    metavar: "PATH",
    grammar: Grammar::Path,
    reader: Reader::Command,
    default: "unset",
    values: "a path",
    default_doc: "unset",
    doc: "Read by `clshim run` only: the library to interpose when `--lib` is not given.",
    help: "",
};

/// Every control, in README's order.
pub const ALL: [&Control; 14] = [
    &BINARIES,
    &DEVICES,
    &TRACE_DIR,
    &TRACE_MODE,
    &SOURCES,
    &LOG,
    &SUMMARY,
    &NATIVE_STORE,
    &NATIVE_STORE_MAX,
    &PROGRAM_CACHE,
    &SHARE_BUILDS,
    &WARM_SERVICE,
    &SUBSTITUTE_WHEN_BUSY,
    &LIB,
];

/// A value a control accepted, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// The index of the word in [`Grammar::OneOf`]'s list.
    Word(usize),
    Switch(bool),
    Mode(u32),
    /// The filter as given (trimmed).
    Filter(String),
    Path,
    /// `off` for [`Grammar::PathOrOff`].
    Off,
    Size(u64),
}

impl Control {
    /// Checks a textual value. Surrounding blanks are ignored; a blank value is unset and
    /// is the caller's to handle before. `None` when the control does not accept it.
    pub fn check(&self, v: &str) -> Option<Value> {
        let v = v.trim();
        match self.grammar {
            Grammar::OneOf(words) => words
                .iter()
                .position(|w| w.eq_ignore_ascii_case(v))
                .map(Value::Word),
            Grammar::Switch => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Some(Value::Switch(true)),
                "0" | "false" | "no" | "off" => Some(Value::Switch(false)),
                _ => None,
            },
            Grammar::Mode => {
                if v.is_empty() || !v.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                    return None;
                }
                // Leading zeros are allowed (`0000640`); the value itself is at most 0777.
                let digits = v.trim_start_matches('0');
                if digits.len() > 3 {
                    return None;
                }
                let m = u32::from_str_radix(digits, 8).unwrap_or(0);
                Some(Value::Mode(m))
            }
            Grammar::LogFilter => valid_log_filter(v).then(|| Value::Filter(v.to_string())),
            Grammar::Path => Some(Value::Path),
            Grammar::PathOrOff if v.eq_ignore_ascii_case("off") => Some(Value::Off),
            Grammar::PathOrOff => Some(Value::Path),
            Grammar::Size => parse_size(v).map(Value::Size),
        }
    }

    /// The accepted values in plain words, for warnings and usage errors.
    pub fn accepted(&self) -> String {
        match self.grammar {
            Grammar::OneOf(words) => words.join(", "),
            Grammar::Switch => "1, 0 (or true/false, yes/no, on/off)".to_string(),
            Grammar::Mode => "octal permission bits from 0 to 0777, e.g. 0640".to_string(),
            Grammar::LogFilter => format!(
                "an env_logger filter of {} and clshim::MODULE=level directives, e.g. info",
                LOG_LEVELS.join(", ")
            ),
            Grammar::Path => "a path".to_string(),
            Grammar::PathOrOff => "a path, or off".to_string(),
            Grammar::Size => "a size in bytes, e.g. 1073741824, 512M or 1G".to_string(),
        }
    }
}

/// `CLSHIM_NATIVE_STORE`'s default place, read through `get` (the environment):
/// `$HOME/.cache/clshim/native` (an absolute `HOME` only); None when it is not set. Not
/// `XDG_CACHE_HOME`: MPI job scripts set it per rank, and one store per user is what lets
/// one warm step find every rank's requests.
pub fn native_store_default(
    get: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Option<std::path::PathBuf> {
    get("HOME")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .map(|h| h.join(".cache/clshim/native"))
}

/// A size: digits, then at most one of `K`, `M`, `G`, `T` (any case), powers of 1024.
fn parse_size(v: &str) -> Option<u64> {
    let (digits, shift) = match v.as_bytes().last()?.to_ascii_uppercase() {
        b'K' => (&v[..v.len() - 1], 10),
        b'M' => (&v[..v.len() - 1], 20),
        b'G' => (&v[..v.len() - 1], 30),
        b'T' => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let bytes = n.checked_mul(1u64 << shift)?;
    (bytes <= i64::MAX as u64).then_some(bytes)
}

/// An env_logger filter that only names clshim's own modules: a target must be `clshim`
/// or `clshim::…`, because nothing else logs through this logger, and a bare word such as
/// `loud` is a mistyped level rather than a module filter. Empty directives are skipped.
fn valid_log_filter(s: &str) -> bool {
    let is_level = |l: &str| LOG_LEVELS.iter().any(|x| x.eq_ignore_ascii_case(l));
    let is_target = |t: &str| {
        (t == "clshim" || t.starts_with("clshim::"))
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut directives = s.split(',').map(str::trim).filter(|d| !d.is_empty());
    directives.clone().next().is_some()
        && directives.all(|d| match d.split_once('=') {
            Some((target, level)) => is_target(target.trim()) && is_level(level.trim()),
            None => is_level(d) || is_target(d),
        })
}

/// docs/controls.md's table of every control, rendered from [`ALL`].
pub fn docs_table() -> String {
    let mut out =
        String::from("| variable | values | default | what it does |\n|---|---|---|---|\n");
    for c in ALL {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            c.var, c.values, c.default_doc, c.doc
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_switches_and_modes() {
        assert_eq!(BINARIES.check(" Substitute "), Some(Value::Word(2)));
        assert_eq!(BINARIES.check("keep"), None);
        assert_eq!(SUMMARY.check("OFF"), Some(Value::Switch(false)));
        assert_eq!(TRACE_MODE.check("0640"), Some(Value::Mode(0o640)));
        assert_eq!(TRACE_MODE.check("0000777"), Some(Value::Mode(0o777)));
        assert_eq!(TRACE_MODE.check("0"), Some(Value::Mode(0)));
        for bad in ["0o640", "4755", "7777", "1777", "+640", "0999", "rw", "-1"] {
            assert_eq!(TRACE_MODE.check(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes_and_store_paths() {
        assert_eq!(NATIVE_STORE_MAX.check("1G"), Some(Value::Size(1 << 30)));
        assert_eq!(NATIVE_STORE_MAX.check("512m"), Some(Value::Size(512 << 20)));
        assert_eq!(NATIVE_STORE_MAX.check("4096"), Some(Value::Size(4096)));
        for bad in ["", "G", "1.5G", "-1", "1GB", "99999999999T", "1 G"] {
            assert_eq!(NATIVE_STORE_MAX.check(bad), None, "{bad}");
        }
        assert_eq!(NATIVE_STORE.check("OFF"), Some(Value::Off));
        assert_eq!(NATIVE_STORE.check("/x"), Some(Value::Path));
    }

    #[test]
    fn log_filters_name_only_clshim() {
        for good in [
            "info",
            "clshim",
            "clshim=debug",
            "warn,clshim::policy=DEBUG",
            "off,",
        ] {
            assert!(LOG.check(good).is_some(), "{good}");
        }
        for bad in [
            "mymod=debug",
            "loud",
            "clshimx",
            "a b=info",
            ",",
            "clshim=loud",
        ] {
            assert_eq!(LOG.check(bad), None, "{bad}");
        }
    }

    /// README's table is the one rendered here, between its markers.
    #[test]
    fn docs_table_is_rendered_from_the_definition() {
        let readme = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/controls.md"
        ))
        .unwrap();
        let begin = "<!-- controls table: rendered from crates/clshim-format/src/controls.rs -->\n";
        let end = "<!-- end of controls table -->";
        let start = readme
            .find(begin)
            .expect("docs/controls.md has the begin marker")
            + begin.len();
        let stop = start
            + readme[start..]
                .find(end)
                .expect("docs/controls.md has the end marker");
        assert_eq!(
            readme[start..stop],
            docs_table(),
            "docs/controls.md's table differs from crates/clshim-format/src/controls.rs: paste `clshim --controls-table`"
        );
    }
}
