//! Command-line parsing for the `clshim` command, by hand (no parser crate). This module
//! owns the grammar of `clshim run [options] -- COMMAND [ARGS…]` and
//! `clshim report [--json] [--wide] [--by-source] [--chrome FILE] [--against OLD] DIR`,
//! `clshim unsubstitute [--remove] [--cross-filesystems] DIR...`,
//! `clshim warm [--store DIR] [--jobs N] [--lib PATH]` and
//! `clshim store [--store DIR] [--json] [--clear]`; the help pages and the
//! names a mistyped option is matched against are `help`'s. The values of the options
//! that set `CLSHIM_*` variables are checked by the grammar `controls` defines, the one
//! the library reads them with; a refused value or an unknown option (with the nearest
//! known one) is a one-line usage error, exit status 2. It turns the arguments into plain
//! structures ([`RunOpts`], [`ReportOpts`], [`UnsubstituteOpts`], [`WarmOpts`],
//! [`StoreOpts`]) and never touches the
//! environment or files.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use crate::controls::{self, Control, Grammar};

/// A command-line problem: printed as one line after `clshim: `, exit status 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

#[derive(Debug)]
pub enum Command {
    Run(RunOpts),
    Warm(WarmOpts),
    Store(StoreOpts),
    Report(ReportOpts),
    Unsubstitute(UnsubstituteOpts),
    /// `--help`: the overview (None) or one command's page.
    Help(Option<&'static str>),
    /// No arguments at all: the overview, as a usage error.
    Overview,
    Version,
    /// Hidden: README's control table, rendered from `controls`.
    ControlsTable,
    /// Hidden: docs/clshim-command.md's run options table, rendered by `help`.
    OptionsTable,
}

/// An unknown option of `command`, with the nearest known one.
fn unknown_option<T>(command: &'static str, given: &str) -> Result<T, UsageError> {
    let names = crate::help::option_names(command);
    let flag = given.split('=').next().unwrap_or(given);
    let hint = match crate::help::did_you_mean(flag, names.iter().map(String::as_str)) {
        Some(near) => format!("did you mean {near}? "),
        None => String::new(),
    };
    usage(format!(
        "{command}: unknown option '{given}' ({hint}try 'clshim {command} --help')"
    ))
}

/// `clshim run`: every `Option` is `None` when the option was not given, so the
/// variable the user may have set is kept.
#[derive(Debug, Default)]
pub struct RunOpts {
    pub binaries: Option<String>,
    pub devices: Option<String>,
    pub trace_dir: Option<PathBuf>,
    pub trace_mode: Option<String>,
    pub log: Option<String>,
    pub summary: Option<bool>,
    pub sources: Option<bool>,
    pub native_store: Option<OsString>,
    pub native_store_max: Option<String>,
    pub lib: Option<PathBuf>,
    pub mode: Mode,
    /// `--warm` or `--no-warm` was given: no longer needed (a job keeps its compiles as it
    /// makes them), said once and otherwise ignored, so job scripts keep working.
    pub warm_given: bool,
    /// `--program-cache` / `--no-program-cache` (`--record-only`: Some(false)). None: on,
    /// unless the environment sets `CLSHIM_PROGRAM_CACHE`.
    pub program_cache: Option<bool>,
    /// `--share-builds` / `--no-share-builds`.
    pub share_builds: Option<bool>,
    /// `--warm-service` / `--no-warm-service`.
    pub warm_service: Option<bool>,
    /// `--substitute-when-busy` / `--no-substitute-when-busy`.
    pub substitute_when_busy: Option<bool>,
    /// The command and its arguments; never empty.
    pub command: Vec<OsString>,
}

/// Which doors `clshim run` opens: the preload variable, the loader's layer list, or both.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Both,
    Preload,
    Layer,
}

impl Mode {
    pub fn preload(self) -> bool {
        matches!(self, Mode::Both | Mode::Preload)
    }

    pub fn layer(self) -> bool {
        matches!(self, Mode::Both | Mode::Layer)
    }
}

/// `clshim warm`.
#[derive(Debug)]
pub struct WarmOpts {
    pub store: Option<PathBuf>,
    /// Workers at once (None: every CPU this process may use).
    pub jobs: Option<usize>,
    /// The longest one request may take a worker, in seconds (None: the default).
    pub timeout: Option<u64>,
    pub lib: Option<PathBuf>,
    /// `--worker-group HEX` (internal): be the worker of one group of requests, in the
    /// directory and environment the command that started it set.
    pub worker_group: Option<u64>,
    /// `--service` (internal): be the node's warm service the library starts, making
    /// requests as they come until no process that left one is alive.
    pub service: bool,
}

/// `clshim store`: list the native store (`json`: as one JSON document), or `clear` it.
#[derive(Debug, Default)]
pub struct StoreOpts {
    pub store: Option<PathBuf>,
    pub json: bool,
    pub clear: bool,
}

#[derive(Debug, Default)]
pub struct ReportOpts {
    pub json: bool,
    /// The full table, not fitted to a terminal's width.
    pub wide: bool,
    pub by_source: bool,
    pub chrome: Option<PathBuf>,
    /// `--against OLD`: compare DIR with an earlier run's trace directory.
    pub against: Option<PathBuf>,
    pub dir: PathBuf,
}

/// `clshim unsubstitute`: list (and with `remove`, remove) the files under `dirs` that
/// hold clshim binaries.
#[derive(Debug, Default)]
pub struct UnsubstituteOpts {
    pub remove: bool,
    pub cross_filesystems: bool,
    /// Never empty.
    pub dirs: Vec<PathBuf>,
}

pub const MODES: &[&str] = &["both", "preload", "layer"];

/// Parses the arguments after the program name.
pub fn parse(args: Vec<OsString>) -> Result<Command, UsageError> {
    let mut it = args.into_iter();
    let Some(sub) = it.next() else {
        return Ok(Command::Overview);
    };
    match sub.to_str() {
        Some("run") => parse_run(it.collect()),
        Some("warm") => parse_warm(it.collect()),
        Some("store") => parse_store(it.collect()),
        Some("report") => parse_report(it.collect()),
        Some("unsubstitute") => parse_unsubstitute(it.collect()),
        Some("-h" | "--help") => Ok(Command::Help(None)),
        Some("help") => match it.next() {
            None => Ok(Command::Help(None)),
            Some(c) => {
                let c = c.to_string_lossy();
                match crate::help::command_names().find(|n| *n == c) {
                    Some(name) => Ok(Command::Help(Some(name))),
                    None => unknown_command(&c),
                }
            }
        },
        Some("-V" | "--version") => Ok(Command::Version),
        Some("--controls-table") => Ok(Command::ControlsTable),
        Some("--options-table") => Ok(Command::OptionsTable),
        _ => unknown_command(&sub.to_string_lossy()),
    }
}

fn unknown_command<T>(given: &str) -> Result<T, UsageError> {
    let hint = match crate::help::did_you_mean(given, crate::help::command_names()) {
        Some(near) => format!("did you mean '{near}'? "),
        None => String::new(),
    };
    usage(format!(
        "unknown subcommand '{given}' ({hint}expected 'run', 'warm', 'store', 'report' or \
         'unsubstitute'; try 'clshim --help')"
    ))
}

/// Splits `--name=value` into (`--name`, Some(value)); anything else is (arg, None).
fn split_eq(arg: &str) -> (&str, Option<&str>) {
    match arg.split_once('=') {
        Some((n, v)) if n.starts_with("--") => (n, Some(v)),
        _ => (arg, None),
    }
}

/// Takes the value of option `name`: the `=value` part, else the next argument.
fn value(
    name: &str,
    inline: Option<&str>,
    rest: &mut impl Iterator<Item = OsString>,
) -> Result<OsString, UsageError> {
    if let Some(v) = inline {
        return Ok(v.into());
    }
    match rest.next() {
        Some(v) => Ok(v),
        None => usage(format!("option {name} needs a value")),
    }
}

/// Takes the value of option `name` as a path, refusing an empty one as an empty `what`
/// ("directory name", "file name", "path").
fn path_value(
    name: &str,
    inline: Option<&str>,
    rest: &mut impl Iterator<Item = OsString>,
    what: &str,
) -> Result<PathBuf, UsageError> {
    let v = value(name, inline, rest)?;
    if v.is_empty() {
        return usage(format!("{name}: empty {what}"));
    }
    Ok(v.into())
}

fn utf8(name: &str, v: OsString) -> Result<String, UsageError> {
    v.into_string().or_else(|v| {
        usage(format!(
            "{name}: value '{}' is not UTF-8",
            v.to_string_lossy()
        ))
    })
}

fn one_of(name: &str, v: String, allowed: &[&str]) -> Result<String, UsageError> {
    if allowed.contains(&v.as_str()) {
        Ok(v)
    } else {
        usage(format!(
            "{name}: unknown value '{v}' (expected one of: {})",
            allowed.join(", ")
        ))
    }
}

/// A control's value, checked by the grammar the library reads it with: what passes
/// here the library takes without a warning. A blank value, which the library reads as
/// unset, is refused: given as an option it can only be a slip.
fn control(name: &str, c: &Control, v: String) -> Result<String, UsageError> {
    if !v.trim().is_empty() && c.check(&v).is_some() {
        return Ok(v);
    }
    match c.grammar {
        Grammar::OneOf(_) => usage(format!(
            "{name}: unknown value '{v}' (expected one of: {})",
            c.accepted()
        )),
        _ => usage(format!(
            "{name}: invalid value '{v}' (expected {})",
            c.accepted()
        )),
    }
}

fn parse_run(args: Vec<OsString>) -> Result<Command, UsageError> {
    let mut o = RunOpts::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let Some(s) = arg.to_str().map(str::to_owned) else {
            // Paths are bytes: `--trace-dir=DIR` and `--lib=PATH` keep a non-UTF-8 DIR as is.
            let bytes = arg.as_encoded_bytes();
            if let Some(v) = bytes.strip_prefix(b"--trace-dir=") {
                // SAFETY: split after an ASCII prefix of an OsStr, which keeps it valid.
                o.trace_dir = Some(unsafe { OsStr::from_encoded_bytes_unchecked(v) }.into());
                continue;
            }
            if let Some(v) = bytes.strip_prefix(b"--lib=") {
                // SAFETY: as above.
                o.lib = Some(unsafe { OsStr::from_encoded_bytes_unchecked(v) }.into());
                continue;
            }
            // Any other non-UTF-8 argument can only be the command.
            o.command.push(arg);
            break;
        };
        if s == "--" {
            break;
        }
        if !s.starts_with('-') || s == "-" {
            o.command.push(arg);
            break;
        }
        let (name, inline) = split_eq(&s);
        match name {
            "--binaries" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.binaries = Some(control(name, &controls::BINARIES, v)?);
            }
            "--devices" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.devices = Some(control(name, &controls::DEVICES, v)?);
            }
            "--trace-dir" => {
                o.trace_dir = Some(path_value(name, inline, &mut it, "directory name")?);
            }
            "--trace-mode" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.trace_mode = Some(control(name, &controls::TRACE_MODE, v)?);
            }
            "--log" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.log = Some(control(name, &controls::LOG, v)?);
            }
            "--lib" => {
                o.lib = Some(path_value(name, inline, &mut it, "path")?);
            }
            "--mode" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.mode = match one_of(name, v, MODES)?.as_str() {
                    "preload" => Mode::Preload,
                    "layer" => Mode::Layer,
                    _ => Mode::Both,
                };
            }
            "--native-store" => {
                let v = value(name, inline, &mut it)?;
                if v.to_string_lossy().trim().is_empty() {
                    return usage("--native-store: empty directory name");
                }
                o.native_store = Some(v);
            }
            "--native-store-max" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.native_store_max = Some(control(name, &controls::NATIVE_STORE_MAX, v)?);
            }
            "--summary"
            | "--no-summary"
            | "--sources"
            | "--no-sources"
            | "--layer"
            | "--warm"
            | "--no-warm"
            | "--program-cache"
            | "--no-program-cache"
            | "--record-only"
            | "--share-builds"
            | "--no-share-builds"
            | "--warm-service"
            | "--no-warm-service"
            | "--substitute-when-busy"
            | "--no-substitute-when-busy"
                if inline.is_some() =>
            {
                return usage(format!("option {name} takes no value"));
            }
            "--summary" => o.summary = Some(true),
            "--no-summary" => o.summary = Some(false),
            "--sources" => o.sources = Some(true),
            "--no-sources" => o.sources = Some(false),
            "--layer" => o.mode = Mode::Layer,
            "--warm" | "--no-warm" => o.warm_given = true,
            "--program-cache" => o.program_cache = Some(true),
            "--no-program-cache" | "--record-only" => o.program_cache = Some(false),
            "--share-builds" => o.share_builds = Some(true),
            "--no-share-builds" => o.share_builds = Some(false),
            "--warm-service" => o.warm_service = Some(true),
            "--no-warm-service" => o.warm_service = Some(false),
            "--substitute-when-busy" => o.substitute_when_busy = Some(true),
            "--no-substitute-when-busy" => o.substitute_when_busy = Some(false),
            "-h" | "--help" => return Ok(Command::Help(Some("run"))),
            _ => return unknown_option("run", &s),
        }
    }
    o.command.extend(it);
    if o.command.is_empty() {
        return usage("run: no command given (usage: clshim run [options] -- COMMAND [ARGS...])");
    }
    Ok(Command::Run(o))
}

fn parse_warm(args: Vec<OsString>) -> Result<Command, UsageError> {
    let mut o = WarmOpts {
        store: None,
        jobs: None,
        timeout: None,
        lib: None,
        worker_group: None,
        service: false,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy().into_owned();
        let (name, inline) = split_eq(&s);
        match name {
            "--store" => {
                o.store = Some(path_value(name, inline, &mut it, "directory name")?);
            }
            "--lib" => {
                o.lib = Some(path_value(name, inline, &mut it, "path")?);
            }
            "--jobs" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.jobs = match v.parse::<usize>() {
                    Ok(n) if (1..=256).contains(&n) => Some(n),
                    _ => return usage(format!("--jobs: '{v}' is not a number from 1 to 256")),
                };
            }
            "--timeout" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.timeout = match v.parse::<u64>() {
                    Ok(n) if (1..=86_400).contains(&n) => Some(n),
                    _ => {
                        return usage(format!(
                            "--timeout: '{v}' is not a number of seconds from 1 to 86400"
                        ))
                    }
                };
            }
            "--worker-group" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.worker_group = match u64::from_str_radix(&v, 16) {
                    Ok(g) => Some(g),
                    Err(_) => return usage(format!("--worker-group: '{v}' is not hexadecimal")),
                };
            }
            "--service" if inline.is_none() => o.service = true,
            "-h" | "--help" => return Ok(Command::Help(Some("warm"))),
            _ if s.starts_with('-') => return unknown_option("warm", &s),
            _ => {
                return usage(format!(
                    "warm: unexpected argument '{s}' (try 'clshim warm --help')"
                ))
            }
        }
    }
    Ok(Command::Warm(o))
}

fn parse_store(args: Vec<OsString>) -> Result<Command, UsageError> {
    let mut o = StoreOpts::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy().into_owned();
        let (name, inline) = split_eq(&s);
        match name {
            "--store" => {
                o.store = Some(path_value(name, inline, &mut it, "directory name")?);
            }
            "--json" | "--clear" if inline.is_some() => {
                return usage(format!("option {name} takes no value"));
            }
            "--json" => o.json = true,
            "--clear" => o.clear = true,
            "-h" | "--help" => return Ok(Command::Help(Some("store"))),
            _ if s.starts_with('-') => return unknown_option("store", &s),
            _ => {
                return usage(format!(
                    "store: unexpected argument '{s}' (the store is --store DIR; try 'clshim \
                     store --help')"
                ))
            }
        }
    }
    Ok(Command::Store(o))
}

fn parse_report(args: Vec<OsString>) -> Result<Command, UsageError> {
    let mut o = ReportOpts::default();
    let mut dir: Option<PathBuf> = None;
    let mut it = args.into_iter();
    let mut only_positional = false;
    while let Some(arg) = it.next() {
        let s = arg.to_string_lossy().into_owned();
        if !only_positional && s == "--" {
            only_positional = true;
            continue;
        }
        if !only_positional && s.starts_with('-') && s != "-" {
            let (name, inline) = split_eq(&s);
            match name {
                "--json" if inline.is_none() => o.json = true,
                "--wide" if inline.is_none() => o.wide = true,
                "--by-source" if inline.is_none() => o.by_source = true,
                "--chrome" => {
                    o.chrome = Some(path_value(name, inline, &mut it, "file name")?);
                }
                "--against" => {
                    o.against = Some(path_value(name, inline, &mut it, "directory name")?);
                }
                "-h" | "--help" => return Ok(Command::Help(Some("report"))),
                _ => return unknown_option("report", &s),
            }
            continue;
        }
        if dir.is_some() {
            return usage(format!("report: unexpected argument '{s}' (one DIR only)"));
        }
        dir = Some(arg.into());
    }
    if o.against.is_some() && o.chrome.is_some() {
        return usage("report: --against compares two runs and draws no timeline (drop --chrome)");
    }
    match dir {
        Some(d) => o.dir = d,
        None => return usage(
            "report: no trace directory given (usage: clshim report [--json] [--wide] [--by-source] [--chrome FILE] [--against OLD] DIR)",
        ),
    }
    Ok(Command::Report(o))
}

fn parse_unsubstitute(args: Vec<OsString>) -> Result<Command, UsageError> {
    let mut o = UnsubstituteOpts::default();
    let mut only_positional = false;
    for arg in args {
        let s = arg.to_string_lossy();
        if !only_positional && s == "--" {
            only_positional = true;
            continue;
        }
        if !only_positional && s.starts_with('-') && s != "-" {
            match &*s {
                "--remove" => o.remove = true,
                "--cross-filesystems" => o.cross_filesystems = true,
                "-h" | "--help" => return Ok(Command::Help(Some("unsubstitute"))),
                _ => return unknown_option("unsubstitute", &s),
            }
            continue;
        }
        if arg.is_empty() {
            return usage("unsubstitute: empty directory name");
        }
        o.dirs.push(arg.into());
    }
    if o.dirs.is_empty() {
        return usage(
            "unsubstitute: no directory given (usage: clshim unsubstitute [--remove] [--cross-filesystems] DIR...)",
        );
    }
    Ok(Command::Unsubstitute(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn run_options_and_command() {
        let Command::Run(o) = parse(args(&[
            "run",
            "--binaries=substitute",
            "--devices",
            "all",
            "--no-summary",
            "--",
            "ls",
            "-l",
        ]))
        .unwrap() else {
            panic!()
        };
        assert_eq!(o.binaries.as_deref(), Some("substitute"));
        assert_eq!(o.devices.as_deref(), Some("all"));
        assert_eq!(o.summary, Some(false));
        assert_eq!(o.command, args(&["ls", "-l"]));
    }

    #[test]
    fn command_without_double_dash_keeps_its_options() {
        let Command::Run(o) = parse(args(&["run", "--layer", "mpiexec", "-n", "4"])).unwrap()
        else {
            panic!()
        };
        assert_eq!(o.mode, Mode::Layer);
        assert_eq!(o.command, args(&["mpiexec", "-n", "4"]));
    }

    #[test]
    fn mode_defaults_to_both_and_last_option_wins() {
        let mode = |a: &[&str]| match parse(args(a)).unwrap() {
            Command::Run(o) => o.mode,
            _ => panic!(),
        };
        assert_eq!(mode(&["run", "x"]), Mode::Both);
        assert_eq!(mode(&["run", "--mode", "preload", "x"]), Mode::Preload);
        assert_eq!(mode(&["run", "--mode=layer", "x"]), Mode::Layer);
        assert_eq!(mode(&["run", "--layer", "--mode", "both", "x"]), Mode::Both);
        assert!(parse(args(&["run", "--mode", "dlsym", "x"])).is_err());
        assert!(parse(args(&["run", "--mode"])).is_err());
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for bad in [
            &["run", "--binaries", "keep", "--", "x"][..],
            &["run", "--devices=gpu", "--", "x"],
            &["run", "--log", "wran", "--", "x"],
            &["run", "--log", "a b=info", "--", "x"],
            &["run", "--trace-mode", "0999", "--", "x"],
            &["run", "--binaries"],
            &["run", "--"],
            &["run", "--frob", "--", "x"],
            &["report"],
            &["report", "a", "b"],
            &["report", "--chrome"],
            &["unsubstitute"],
            &["unsubstitute", "--remove"],
            &["unsubstitute", "--frob", "d"],
            &["unsubstitute", "--remove=yes", "d"],
            &["unsubstitute", ""],
            &["store", "dir"],
            &["store", "--json=1"],
            &["store", "--store"],
            &["store", "--store="],
            &["store", "--purge"],
            &["frob"],
        ] {
            assert!(parse(args(bad)).is_err(), "{bad:?} parsed");
        }
        assert!(parse(args(&["run", "--log", "clshim=debug,warn", "x"])).is_ok());
        assert!(parse(args(&["run", "--trace-mode", "0640", "x"])).is_ok());
    }

    #[test]
    fn report_options() {
        let Command::Report(o) =
            parse(args(&["report", "--chrome=t.json", "--json", "d"])).unwrap()
        else {
            panic!()
        };
        assert!(o.json);
        assert!(!o.wide);
        assert_eq!(o.chrome, Some(PathBuf::from("t.json")));
        assert_eq!(o.dir, PathBuf::from("d"));
        let Command::Report(o) = parse(args(&["report", "--wide", "d"])).unwrap() else {
            panic!()
        };
        assert!(o.wide && !o.json);
        assert!(parse(args(&["report", "--wide=1", "d"])).is_err());
    }

    #[test]
    fn store_options() {
        let Command::Store(o) = parse(args(&["store", "--store=s", "--clear", "--json"])).unwrap()
        else {
            panic!()
        };
        assert!(o.clear && o.json);
        assert_eq!(o.store, Some(PathBuf::from("s")));
        let Command::Store(o) = parse(args(&["store"])).unwrap() else {
            panic!()
        };
        assert!(!o.clear && !o.json && o.store.is_none());
    }

    #[test]
    fn unsubstitute_options() {
        let Command::Unsubstitute(o) =
            parse(args(&["unsubstitute", "a", "--remove", "--", "--b"])).unwrap()
        else {
            panic!()
        };
        assert!(o.remove && !o.cross_filesystems);
        assert_eq!(o.dirs, [PathBuf::from("a"), PathBuf::from("--b")]);
        let Command::Unsubstitute(o) =
            parse(args(&["unsubstitute", "--cross-filesystems", "d"])).unwrap()
        else {
            panic!()
        };
        assert!(!o.remove && o.cross_filesystems);
    }

    /// Every value `clshim run` accepts for a control the library takes without a warning,
    /// and every value the library takes the command accepts, over a generated sample of
    /// valid and invalid values per control. A blank value is the one exception: the
    /// library reads it as unset, the command refuses it as a slip.
    #[test]
    fn command_and_library_accept_the_same_values() {
        use clshim::config::Config;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let pieces = [
            "pass",
            "Suppress",
            "SUBSTITUTE",
            "keep",
            "pocl-cpu",
            "pocl",
            "All",
            "gpu",
            "0",
            "1",
            "on",
            "Off",
            "yes",
            "maybe",
            "0640",
            "640",
            "0o640",
            "4755",
            "7777",
            "1777",
            "0777",
            "0000644",
            "+640",
            "08",
            "info",
            "WARN",
            "trace",
            "loud",
            "clshim",
            "clshim=debug",
            "clshim::policy=info",
            "mymod=debug",
            "clshimx",
            "a b=info",
            "clshim=",
            "=info",
            "off,",
            ",",
            " ",
            "\t",
            "\u{e9}",
        ];
        let mut samples: Vec<String> = pieces.iter().map(|p| p.to_string()).collect();
        for _ in 0..3000 {
            let n = 1 + (next() % 3) as usize;
            let sep = [",", "", " ", "="][(next() % 4) as usize];
            let parts: Vec<&str> = (0..n)
                .map(|_| pieces[(next() % pieces.len() as u64) as usize])
                .collect();
            samples.push(parts.join(sep));
        }
        for m in (0..=0o7777).step_by(7) {
            samples.push(format!("{m:o}"));
            samples.push(format!("0{m:o}"));
        }
        let mut accepted = 0;
        // Paths are taken as they are; a switch is set by its two flags, checked below.
        for c in controls::ALL.iter().filter(|c| {
            c.reader == controls::Reader::Library
                && !matches!(c.grammar, Grammar::Path | Grammar::Switch)
        }) {
            for v in samples.iter().filter(|v| !v.trim().is_empty()) {
                let command =
                    parse(vec!["run".into(), c.option.into(), v.into(), "x".into()]).is_ok();
                let (_, warnings) =
                    Config::from_lookup(|n| (n == c.var).then(|| OsString::from(v)));
                assert_eq!(
                    command,
                    warnings.is_empty(),
                    "{} {v:?}: command {command}, library warnings {warnings:?}",
                    c.option
                );
                accepted += usize::from(command);
            }
            // A blank value: unset for the library, a usage error for the command.
            let (_, warnings) = Config::from_lookup(|n| (n == c.var).then(|| " ".into()));
            assert!(warnings.is_empty());
            assert!(parse(args(&["run", c.option, " ", "x"])).is_err());
        }
        assert!(
            accepted > 500,
            "the sample holds valid values too: {accepted}"
        );
        // The switch's flags give the values the library reads as on and off.
        for (flag, on) in [("--summary", true), ("--no-summary", false)] {
            let Command::Run(o) = parse(args(&["run", flag, "x"])).unwrap() else {
                panic!()
            };
            assert_eq!(o.summary, Some(on));
            let (cfg, w) = Config::from_lookup(|n| {
                (n == "CLSHIM_SUMMARY").then(|| if on { "1" } else { "0" }.into())
            });
            assert!(w.is_empty());
            assert_eq!(cfg.summary, on);
        }
    }

    /// Every option the help pages list is one the parser takes (so the pages, the docs'
    /// table and "did you mean" name no option that does not exist).
    #[test]
    fn every_option_the_help_lists_parses() {
        let value = |o: &str| match o {
            "--binaries" => "pass",
            "--devices" => "all",
            "--trace-mode" => "0640",
            "--log" => "info",
            "--mode" => "both",
            "--native-store-max" => "1G",
            "--jobs" => "2",
            _ => "x",
        };
        for command in ["run", "warm", "store", "report", "unsubstitute"] {
            for o in crate::help::option_names(command) {
                let known = [format!("{o}={}", value(&o)), o.clone()]
                    .into_iter()
                    .any(|arg| {
                        let mut a = vec![command.to_string(), arg];
                        if command != "warm" && command != "store" {
                            a.push("d".into());
                        }
                        let r = parse(a.iter().map(OsString::from).collect());
                        !matches!(r, Err(UsageError(m)) if m.contains("unknown option"))
                    });
                assert!(known, "clshim {command} {o}");
            }
        }
    }

    #[test]
    fn values_the_command_once_disagreed_on() {
        for (a, ok) in [
            (&["run", "--trace-mode", "0o640", "x"][..], false),
            (&["run", "--trace-mode", "4755", "x"], false),
            (&["run", "--trace-mode", "7777", "x"], false),
            (&["run", "--trace-mode", "1777", "x"], false),
            (&["run", "--log", "mymod=debug", "x"], false),
            (&["run", "--log", "clshim", "x"], true),
            (&["run", "--binaries", "Substitute", "x"], true),
        ] {
            assert_eq!(parse(args(a)).is_ok(), ok, "{a:?}");
        }
    }
}
