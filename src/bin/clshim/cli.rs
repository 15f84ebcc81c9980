//! Command-line parsing for the `clshim` command, by hand (no parser crate). This module
//! owns the grammar of `clshim run [options] -- COMMAND [ARGS…]` and
//! `clshim report [--json] [--by-source] [--chrome FILE] DIR`, the validation of every option value
//! (an unknown policy, device set, log filter or permission mode is a one-line usage
//! error, exit status 2), and the help text. It turns the arguments into plain
//! structures ([`RunOpts`], [`ReportOpts`]) and never touches the environment or files.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: clshim run [options] [--] COMMAND [ARGS...]
       clshim report [--json] [--by-source] [--chrome FILE] DIR
       clshim --help | --version

clshim run: run COMMAND with libclshim.so interposed (preloaded with LD_PRELOAD and
named in OPENCL_LAYERS, unless --mode says otherwise), then replace clshim by COMMAND.
Each option sets the CLSHIM_* variable named beside it; a variable you already set is
kept unless you give the option.
  --binaries POLICY   CLSHIM_BINARIES: pass | suppress | substitute
  --devices SET       CLSHIM_DEVICES: pocl-cpu | pocl | all
  --trace-dir DIR     CLSHIM_TRACE_DIR (made absolute and created before COMMAND starts)
  --trace-mode MODE   CLSHIM_TRACE_MODE: octal permission bits, e.g. 0640
  --log FILTER        CLSHIM_LOG: off | error | warn | info | debug | trace [, module=level]
  --summary           CLSHIM_SUMMARY=1 (a summary line per process on stderr at exit)
  --no-summary        CLSHIM_SUMMARY=0
  --lib PATH          the library to interpose (default: $CLSHIM_LIB, else libclshim.so
                      beside the clshim executable, else in ../lib/ from it)
  --mode MODE         how the library gets in front of OpenCL: both (default: preload
                      and loader layer; each call is recorded once) | preload
                      (LD_PRELOAD only) | layer (OPENCL_LAYERS only)
  --layer             the same as --mode layer

clshim report: summarise every trace file (*.jsonl) in DIR: per program and per rank
build and binary-query seconds. Exit status 0 when every record was read, 1 when
something was skipped (reported on stderr as FILE:LINE: reason), 2 on usage errors.
  --json              print the aggregates as one JSON document instead of a table
  --by-source         one program row per source hash, not per set of kernel names
  --chrome FILE       also write a Chrome trace-event timeline (Perfetto, chrome://tracing)
";

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
    Report(ReportOpts),
    Help,
    Version,
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
    pub lib: Option<PathBuf>,
    pub mode: Mode,
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

#[derive(Debug, Default)]
pub struct ReportOpts {
    pub json: bool,
    pub by_source: bool,
    pub chrome: Option<PathBuf>,
    pub dir: PathBuf,
}

pub const BINARIES: &[&str] = &["pass", "suppress", "substitute"];
pub const DEVICES: &[&str] = &["pocl-cpu", "pocl", "all"];
pub const MODES: &[&str] = &["both", "preload", "layer"];
const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// Parses the arguments after the program name.
pub fn parse(args: Vec<OsString>) -> Result<Command, UsageError> {
    let mut it = args.into_iter();
    let Some(sub) = it.next() else {
        return usage("no subcommand given (try 'clshim --help')");
    };
    match sub.to_str() {
        Some("run") => parse_run(it.collect()),
        Some("report") => parse_report(it.collect()),
        Some("-h" | "--help" | "help") => Ok(Command::Help),
        Some("-V" | "--version") => Ok(Command::Version),
        _ => usage(format!(
            "unknown subcommand '{}' (expected 'run' or 'report')",
            sub.to_string_lossy()
        )),
    }
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

/// Accepts what the README documents for CLSHIM_LOG: a level, or comma-separated
/// directives `level` / `module=level` (module paths of letters, digits, `_` and `::`).
fn log_filter(v: String) -> Result<String, UsageError> {
    let bad = |why: &str| usage(format!("--log: invalid filter '{v}': {why}"));
    if v.is_empty() {
        return bad("empty");
    }
    for d in v.split(',') {
        let (module, level) = match d.split_once('=') {
            Some((m, l)) => (Some(m), l),
            None => (None, d),
        };
        if let Some(m) = module {
            if m.is_empty()
                || !m
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            {
                return bad(&format!("'{m}' is not a module path"));
            }
        }
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return bad(&format!(
                "'{level}' is not a level (expected one of: {})",
                LEVELS.join(", ")
            ));
        }
    }
    Ok(v)
}

/// Octal permission bits such as `0640` or `640`, at most 0o7777.
fn trace_mode(v: String) -> Result<String, UsageError> {
    let digits = v.strip_prefix("0o").unwrap_or(&v);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if !digits.is_empty() && m <= 0o7777 => Ok(v),
        _ => usage(format!(
            "--trace-mode: invalid mode '{v}' (expected octal permission bits, e.g. 0640)"
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
                o.binaries = Some(one_of(name, v, BINARIES)?);
            }
            "--devices" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.devices = Some(one_of(name, v, DEVICES)?);
            }
            "--trace-dir" => {
                let v = value(name, inline, &mut it)?;
                if v.is_empty() {
                    return usage("--trace-dir: empty directory name");
                }
                o.trace_dir = Some(v.into());
            }
            "--trace-mode" => {
                o.trace_mode = Some(trace_mode(utf8(name, value(name, inline, &mut it)?)?)?)
            }
            "--log" => o.log = Some(log_filter(utf8(name, value(name, inline, &mut it)?)?)?),
            "--lib" => {
                let v = value(name, inline, &mut it)?;
                if v.is_empty() {
                    return usage("--lib: empty path");
                }
                o.lib = Some(v.into());
            }
            "--mode" => {
                let v = utf8(name, value(name, inline, &mut it)?)?;
                o.mode = match one_of(name, v, MODES)?.as_str() {
                    "preload" => Mode::Preload,
                    "layer" => Mode::Layer,
                    _ => Mode::Both,
                };
            }
            "--summary" | "--no-summary" | "--layer" if inline.is_some() => {
                return usage(format!("option {name} takes no value"));
            }
            "--summary" => o.summary = Some(true),
            "--no-summary" => o.summary = Some(false),
            "--layer" => o.mode = Mode::Layer,
            "-h" | "--help" => return Ok(Command::Help),
            _ => return usage(format!("run: unknown option '{s}' (try 'clshim --help')")),
        }
    }
    o.command.extend(it);
    if o.command.is_empty() {
        return usage("run: no command given (usage: clshim run [options] -- COMMAND [ARGS...])");
    }
    Ok(Command::Run(o))
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
                "--by-source" if inline.is_none() => o.by_source = true,
                "--chrome" => {
                    let v = value(name, inline, &mut it)?;
                    if v.is_empty() {
                        return usage("--chrome: empty file name");
                    }
                    o.chrome = Some(v.into());
                }
                "-h" | "--help" => return Ok(Command::Help),
                _ => {
                    return usage(format!(
                        "report: unknown option '{s}' (try 'clshim --help')"
                    ))
                }
            }
            continue;
        }
        if dir.is_some() {
            return usage(format!("report: unexpected argument '{s}' (one DIR only)"));
        }
        dir = Some(arg.into());
    }
    match dir {
        Some(d) => o.dir = d,
        None => return usage(
            "report: no trace directory given (usage: clshim report [--json] [--by-source] [--chrome FILE] DIR)",
        ),
    }
    Ok(Command::Report(o))
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
        assert_eq!(o.chrome, Some(PathBuf::from("t.json")));
        assert_eq!(o.dir, PathBuf::from("d"));
    }
}
