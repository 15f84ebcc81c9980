//! The user's choices, read once from `CLSHIM_*` environment variables at the first
//! intercepted call, by the grammar `controls` defines for each. Parsing never fails: a value it does not understand yields one
//! warning naming the variable, the value and the accepted values, and the safe default
//! applies, because a typo must never stop someone's MPI job. Values are echoed into
//! warnings quoted and escaped (`{:?}`), so a newline or control character in one can
//! never forge a log line. `CLSHIM_TRACE_DIR` is a path and is kept byte for byte (no
//! trimming, no UTF-8 conversion): the library writes where `clshim run` created.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::controls::{self, Control, Value};

/// What to do with binary queries (`CL_PROGRAM_BINARY_SIZES` / `CL_PROGRAM_BINARIES` with
/// a value buffer) on devices that `DeviceFilter` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryPolicy {
    /// Forward the query and record it; change nothing.
    Pass,
    /// Answer "no binary" (size 0) for the device, as the specification allows.
    Suppress,
    /// Answer with a clshim binary that carries the program's source.
    Substitute,
}

impl BinaryPolicy {
    /// In the order of `controls::BINARIES`' words.
    const ALL: [BinaryPolicy; 3] = [
        BinaryPolicy::Pass,
        BinaryPolicy::Suppress,
        BinaryPolicy::Substitute,
    ];

    pub fn name(self) -> &'static str {
        word(&controls::BINARIES, self as usize)
    }
}

/// Which devices the binary policy applies to; all others are always passed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceFilter {
    /// CPU devices of the pocl platform: the ones whose binary query compiles again.
    PoclCpu,
    /// Every device of the pocl platform.
    Pocl,
    /// Every device.
    All,
}

impl DeviceFilter {
    /// In the order of `controls::DEVICES`' words.
    const ALL: [DeviceFilter; 3] = [DeviceFilter::PoclCpu, DeviceFilter::Pocl, DeviceFilter::All];

    pub fn name(self) -> &'static str {
        word(&controls::DEVICES, self as usize)
    }
}

/// Word `i` of a one-of control.
fn word(c: &Control, i: usize) -> &'static str {
    match c.grammar {
        controls::Grammar::OneOf(words) => words[i],
        _ => unreachable!("{} is a one-of control", c.var),
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub binaries: BinaryPolicy,
    pub devices: DeviceFilter,
    pub trace_dir: Option<PathBuf>,
    pub trace_mode: u32,
    pub log_filter: String,
    pub summary: bool,
    /// `CLSHIM_TRACE_SOURCES`: keep program texts beside the trace files.
    pub trace_sources: bool,
    /// The store of native binaries (`CLSHIM_NATIVE_STORE`): None when `off` or when no
    /// default location can be named (no `HOME`).
    pub native_store: Option<PathBuf>,
    pub native_store_max: u64,
    /// `CLSHIM_PROGRAM_CACHE`: keep, share and serve what pocl compiles (never on macOS,
    /// whose objects carry no dispatch table for clshim's own program handles to mimic).
    pub program_cache: bool,
    /// With the program cache: ranks of a node share one compile of a program.
    pub share_builds: bool,
    /// `CLSHIM_WARM_SERVICE`: start the node's warm service for the requests left, and
    /// wait for it at exit (on by default on Linux).
    pub warm_service: bool,
    /// `CLSHIM_SUBSTITUTE_WHEN_BUSY`: under `substitute` with the warm service, substitute
    /// also when no CPU of the process is idle (else the driver answers there).
    pub substitute_when_busy: bool,
    /// The variables that name pocl's cache folder, as they were at the first OpenCL
    /// call clshim saw: pocl reads them once, when it starts, which is before any program
    /// is made (`store::Store::pocl_cache_for_lookup`).
    pub pocl_cache_env: Vec<(&'static str, Option<OsString>)>,
}

/// The variables pocl's cache folder is named by.
pub const POCL_CACHE_VARIABLES: [&str; 4] = [
    "POCL_CACHE_DIR",
    "POCL_KERNEL_CACHE",
    "XDG_CACHE_HOME",
    "HOME",
];

/// `CLSHIM_NATIVE_STORE_MAX`'s default: 1 GiB.
pub const NATIVE_STORE_MAX_DEFAULT: u64 = 1 << 30;

impl Default for Config {
    fn default() -> Self {
        Config {
            binaries: BinaryPolicy::Pass,
            devices: DeviceFilter::PoclCpu,
            trace_dir: None,
            trace_mode: 0o600,
            log_filter: "warn".to_string(),
            summary: true,
            trace_sources: false,
            native_store: None,
            native_store_max: NATIVE_STORE_MAX_DEFAULT,
            program_cache: false,
            share_builds: true,
            warm_service: cfg!(target_os = "linux"),
            substitute_when_busy: false,
            pocl_cache_env: POCL_CACHE_VARIABLES.iter().map(|&n| (n, None)).collect(),
        }
    }
}

impl Config {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> (Config, Vec<String>) {
        Self::from_lookup(|name| std::env::var_os(name))
    }

    /// Reads the configuration through `get`; returns it with one warning per rejected value.
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> (Config, Vec<String>) {
        let mut cfg = Config::default();
        let mut warnings = Vec::new();
        cfg.pocl_cache_env = POCL_CACHE_VARIABLES.iter().map(|&n| (n, get(n))).collect();
        // An empty value means "unset", as shells make it easy to leave one behind. The
        // words are trimmed; a value that is not UTF-8 can be none of them, so it is kept
        // (lossily) only to be rejected.
        let value = |name: &str| {
            get(name)
                .map(|v| v.to_string_lossy().trim().to_string())
                .filter(|v| !v.is_empty())
        };
        // Each control's value checked by its one grammar; a refused one warns and keeps
        // the default.
        let mut take = |c: &Control| {
            let v = value(c.var)?;
            let parsed = c.check(&v);
            if parsed.is_none() {
                warnings.push(format!(
                    "clshim: warning: {}={v:?} is not one of {}; using {}",
                    c.var,
                    c.accepted(),
                    c.default
                ));
            }
            parsed
        };
        if let Some(Value::Word(i)) = take(&controls::BINARIES) {
            cfg.binaries = BinaryPolicy::ALL[i];
        }
        if let Some(Value::Word(i)) = take(&controls::DEVICES) {
            cfg.devices = DeviceFilter::ALL[i];
        }
        if let Some(Value::Mode(m)) = take(&controls::TRACE_MODE) {
            cfg.trace_mode = m;
        }
        if let Some(Value::Filter(f)) = take(&controls::LOG) {
            cfg.log_filter = f;
        }
        if let Some(Value::Switch(on)) = take(&controls::SUMMARY) {
            cfg.summary = on;
        }
        if let Some(Value::Switch(on)) = take(&controls::SOURCES) {
            cfg.trace_sources = on;
        }
        if let Some(Value::Size(n)) = take(&controls::NATIVE_STORE_MAX) {
            cfg.native_store_max = n;
        }
        if let Some(Value::Switch(on)) = take(&controls::PROGRAM_CACHE) {
            cfg.program_cache = on && cfg!(not(target_os = "macos"));
        }
        if let Some(Value::Switch(on)) = take(&controls::SHARE_BUILDS) {
            cfg.share_builds = on;
        }
        if let Some(Value::Switch(on)) = take(&controls::WARM_SERVICE) {
            cfg.warm_service = on;
        }
        if let Some(Value::Switch(on)) = take(&controls::SUBSTITUTE_WHEN_BUSY) {
            cfg.substitute_when_busy = on;
        }
        if let Some(v) = get(controls::TRACE_DIR.var).filter(|v| !v.is_empty()) {
            cfg.trace_dir = Some(PathBuf::from(v));
        }
        let store = get(controls::NATIVE_STORE.var).filter(|v| !v.is_empty());
        cfg.native_store = match store {
            Some(v)
                if v.to_str()
                    .is_some_and(|s| s.trim().eq_ignore_ascii_case("off")) =>
            {
                None
            }
            Some(v) => Some(PathBuf::from(v)),
            None => controls::native_store_default(&get),
        };
        (cfg, warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> (Config, Vec<String>) {
        let pairs: Vec<(String, OsString)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::from_lookup(|n| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let (cfg, w) = parse(&[]);
        assert_eq!(cfg, Config::default());
        assert!(w.is_empty());
    }

    #[test]
    fn accepted_values_are_taken() {
        let (cfg, w) = parse(&[
            ("CLSHIM_BINARIES", "Substitute"),
            ("CLSHIM_DEVICES", "all"),
            ("CLSHIM_TRACE_DIR", "/tmp/t"),
            ("CLSHIM_TRACE_MODE", "0640"),
            ("CLSHIM_LOG", "info,clshim::policy=debug"),
            ("CLSHIM_SUMMARY", "0"),
        ]);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(cfg.binaries, BinaryPolicy::Substitute);
        assert_eq!(cfg.devices, DeviceFilter::All);
        assert_eq!(cfg.trace_dir, Some(PathBuf::from("/tmp/t")));
        assert_eq!(cfg.trace_mode, 0o640);
        assert_eq!(cfg.log_filter, "info,clshim::policy=debug");
        assert!(!cfg.summary);
    }

    #[test]
    fn each_bad_value_warns_once_with_the_accepted_values_and_keeps_the_default() {
        let (cfg, w) = parse(&[
            ("CLSHIM_BINARIES", "bogus"),
            ("CLSHIM_DEVICES", "gpu"),
            ("CLSHIM_TRACE_MODE", "rw"),
            ("CLSHIM_LOG", "loud"),
            ("CLSHIM_SUMMARY", "maybe"),
        ]);
        assert_eq!(cfg, Config::default());
        assert_eq!(w.len(), 5, "{w:?}");
        assert!(
            w[0].contains("CLSHIM_BINARIES=\"bogus\"")
                && w[0].contains("pass, suppress, substitute")
        );
        assert!(w[1].contains("CLSHIM_DEVICES=\"gpu\"") && w[1].contains("pocl-cpu, pocl, all"));
        assert!(w[2].contains("CLSHIM_TRACE_MODE=\"rw\""));
        assert!(w[3].contains("CLSHIM_LOG=\"loud\""));
        assert!(w[4].contains("CLSHIM_SUMMARY=\"maybe\""));
    }

    #[test]
    fn arbitrary_values_never_panic_and_always_yield_a_valid_config() {
        // A deterministic generator over printable and odd bytes, long and short values.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet: Vec<char> = "passupresbtiltfocl-=,:0123456789 \t\u{e9}\u{0}/*xyzPASS"
            .chars()
            .collect();
        let names = [
            "CLSHIM_BINARIES",
            "CLSHIM_DEVICES",
            "CLSHIM_TRACE_MODE",
            "CLSHIM_LOG",
            "CLSHIM_SUMMARY",
        ];
        for _ in 0..20_000 {
            let values: Vec<String> = names
                .iter()
                .map(|_| {
                    let len = (next() % 12) as usize;
                    (0..len)
                        .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                        .collect()
                })
                .collect();
            let (cfg, warnings) = Config::from_lookup(|n| {
                names
                    .iter()
                    .position(|m| *m == n)
                    .map(|i| OsString::from(&values[i]))
            });
            assert!(warnings.len() <= names.len());
            assert!(cfg.trace_mode <= 0o777);
            assert!(
                controls::LOG.check(&cfg.log_filter).is_some(),
                "{:?}",
                cfg.log_filter
            );
        }
    }

    #[test]
    fn trace_dir_is_kept_byte_for_byte() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        for raw in [
            &b"/tmp/t "[..],
            b" /tmp/t",
            b"/tmp/\xff\xfe",
            b"/tmp/a\nb",
            b" ",
        ] {
            let v = OsStr::from_bytes(raw).to_owned();
            let (cfg, w) = Config::from_lookup(|n| (n == "CLSHIM_TRACE_DIR").then(|| v.clone()));
            assert!(w.is_empty(), "{w:?}");
            assert_eq!(
                cfg.trace_dir.as_deref().map(|p| p.as_os_str().as_bytes()),
                Some(raw),
            );
        }
    }

    #[test]
    fn values_are_quoted_in_warnings() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let (_, w) = parse(&[("CLSHIM_BINARIES", "bogus\nclshim: forged line")]);
        assert_eq!(w.len(), 1);
        assert!(!w[0].contains('\n'), "{w:?}");
        assert!(w[0].contains(r#""bogus\nclshim: forged line""#), "{w:?}");
        let odd = OsStr::from_bytes(b"\xff\x1b[2J").to_owned();
        let (_, w) = Config::from_lookup(|n| (n == "CLSHIM_DEVICES").then(|| odd.clone()));
        assert_eq!(w.len(), 1);
        assert!(!w[0].contains('\x1b'), "{w:?}");
    }

    #[test]
    fn empty_values_mean_unset() {
        let (cfg, w) = parse(&[("CLSHIM_BINARIES", " "), ("CLSHIM_TRACE_DIR", "")]);
        assert_eq!(cfg, Config::default());
        assert!(w.is_empty());
    }
}
