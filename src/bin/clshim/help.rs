//! Help, made from one list of options per command: each command's own page (`clshim run
//! --help`, `clshim help report`), the overview (`clshim --help`, and `clshim` alone), the
//! option table of docs/clshim-command.md (rendered here and checked by a test, as README's
//! controls table is from `controls`), and the names a mistyped option or command is
//! compared with ("did you mean"). `clshim run`'s options that set a `CLSHIM_*` variable
//! come from `controls`, so an option added there appears in the help and the table alone.
//! Written by hand rather than with an argument-parser crate: the controls table already
//! drives the options and their values (a parser's own definitions would be a second
//! copy), and the wheel stays free of a dependency for four small pages.

use crate::controls::{self, Grammar, Reader};

/// An option of one command.
pub struct Opt {
    /// `--store`; a switch that has a `--no-` form is two options.
    pub name: &'static str,
    /// The value's placeholder, empty for a flag.
    pub metavar: &'static str,
    /// What it does, in plain words (lines after the first are continued).
    pub help: &'static str,
    /// docs/clshim-command.md's columns: what it sets (a variable, or `—`) and its values.
    pub sets: &'static str,
    pub values: &'static str,
}

/// `clshim run`'s options that set no `CLSHIM_*` variable of their own.
pub const RUN_ONLY: [Opt; 4] = [
    Opt {
        name: "--record-only",
        metavar: "",
        help: "only record: no program cache (the same as --no-program-cache)",
        sets: "`CLSHIM_PROGRAM_CACHE=0`",
        values: "without it, `clshim run` sets `CLSHIM_PROGRAM_CACHE=1` unless you set the variable",
    },
    Opt {
        name: "--lib",
        metavar: "PATH",
        help: "the library to interpose (default: $CLSHIM_LIB, else libclshim.so beside clshim or in ../lib/)",
        sets: "—",
        values: "the library to interpose (default: `$CLSHIM_LIB`, else beside the executable)",
    },
    Opt {
        name: "--mode",
        metavar: "MODE",
        help: "how the library gets in front of OpenCL: both (default: preload\nand loader layer; each call is recorded once) | preload\n(LD_PRELOAD only) | layer (OPENCL_LAYERS only)",
        sets: "`LD_PRELOAD`, `OPENCL_LAYERS`",
        values: "`both` (default): preload and loader layer; `preload`: `LD_PRELOAD` only; `layer`: `OPENCL_LAYERS` only",
    },
    Opt {
        name: "--layer",
        metavar: "",
        help: "the same as --mode layer",
        sets: "`OPENCL_LAYERS`",
        values: "the same as `--mode layer` (when both are given, the last one counts)",
    },
];

pub const WARM: [Opt; 4] = [
    Opt {
        name: "--store",
        metavar: "DIR",
        help: "the native store (default: $CLSHIM_NATIVE_STORE, else\n~/.cache/clshim/native)",
        sets: "",
        values: "",
    },
    Opt {
        name: "--jobs",
        metavar: "N",
        help: "N workers at once (default: every CPU this process may use;\neach serves one working directory and environment of the requests)",
        sets: "",
        values: "",
    },
    Opt {
        name: "--timeout",
        metavar: "SECONDS",
        help: "the longest one request may take a worker (default 600): then\nthe worker ends and the request is set aside for a week, named",
        sets: "",
        values: "",
    },
    Opt {
        name: "--lib",
        metavar: "PATH",
        help: "the library, as for clshim run",
        sets: "",
        values: "",
    },
];

pub const STORE: [Opt; 3] = [
    Opt {
        name: "--store",
        metavar: "DIR",
        help: "the native store (default: $CLSHIM_NATIVE_STORE, else\n~/.cache/clshim/native)",
        sets: "",
        values: "",
    },
    Opt {
        name: "--json",
        metavar: "",
        help: "print one JSON document instead of the listing",
        sets: "",
        values: "",
    },
    Opt {
        name: "--clear",
        metavar: "",
        help: "remove the store's kept compiles, entries, requests and its other\nfiles of clshim's (never a file that is not clshim's), and say what went",
        sets: "",
        values: "",
    },
];

pub const REPORT: [Opt; 5] = [
    Opt {
        name: "--json",
        metavar: "",
        help: "print the aggregates as one JSON document instead of a table",
        sets: "",
        values: "",
    },
    Opt {
        name: "--wide",
        metavar: "",
        help: "the full table (min / median / max across ranks, whole names),\nnot fitted to 120 columns",
        sets: "",
        values: "",
    },
    Opt {
        name: "--by-source",
        metavar: "",
        help: "one program row per source hash, not per set of kernel names",
        sets: "",
        values: "",
    },
    Opt {
        name: "--chrome",
        metavar: "FILE",
        help: "also write a Chrome trace-event timeline (Perfetto, chrome://tracing)",
        sets: "",
        values: "",
    },
    Opt {
        name: "--against",
        metavar: "OLD",
        help: "instead, compare DIR with OLD, an earlier run's trace directory:\nper program what changed, which cache missed, time gained or lost",
        sets: "",
        values: "",
    },
];

pub const UNSUBSTITUTE: [Opt; 2] = [
    Opt {
        name: "--remove",
        metavar: "",
        help: "remove the 'is' and 'contains' files (a pyopencl cache entry goes\nwhole)",
        sets: "",
        values: "",
    },
    Opt {
        name: "--cross-filesystems",
        metavar: "",
        help: "also enter directories on other filesystems under DIR",
        sets: "",
        values: "",
    },
];

/// The commands: name, synopsis, what it does (plain words), its own options.
struct Command {
    name: &'static str,
    synopsis: &'static str,
    summary: &'static str,
    about: &'static str,
    options: &'static [Opt],
}

const COMMANDS: [Command; 5] = [
    Command {
        name: "run",
        synopsis: "clshim run [options] [--] COMMAND [ARGS...]",
        summary: "run COMMAND with the interposer: its builds, binary queries and first\nlaunches are recorded (and binary queries answered by the policy)",
        about: "Run COMMAND with libclshim.so interposed (preloaded with LD_PRELOAD and\nnamed in OPENCL_LAYERS, unless --mode says otherwise), then replace clshim\nby COMMAND. Each option sets the CLSHIM_* variable named beside it; a\nvariable you already set is kept unless you give the option, and is\nchecked before COMMAND starts. Options end at -- or at the first argument\nthat is not an option.",
        options: &RUN_ONLY,
    },
    Command {
        name: "report",
        synopsis: "clshim report [--json] [--wide] [--by-source] [--chrome FILE] [--against OLD] DIR",
        summary: "per program and per rank, where build time went in the traces of DIR,\nwhy programs built, and which settings remove what",
        about: "Summarise every trace file (*.jsonl) in DIR: per program and per rank build\nand binary-query seconds, first launches, why programs built on every rank\n(with `clshim run --sources`, the differing lines), cache directories to\nlook at, and hints. Exit status 0 when every record was read, 1 when\nsomething was skipped (reported on stderr as FILE:LINE: reason), 2 on usage\nerrors.",
        options: &REPORT,
    },
    Command {
        name: "warm",
        synopsis: "clshim warm [--store DIR] [--jobs N] [--timeout SECONDS] [--lib PATH]",
        summary: "make the driver's own binaries of the compiles jobs kept, for loads in a\nmillisecond instead of pocl's kernel cache's twenty",
        about: "Make the driver's own binaries (pocl's generic compile, under a tracer that\nrecords what each compile read) of every compile the store keeps without\none, and of the requests waiting, at idle priority, on every CPU this\nprocess may use; then keep the store under $CLSHIM_NATIVE_STORE_MAX, least\nrecently used out, removing nothing but its own files. Optional: jobs keep\ntheir compiles as they make them, and the node's warm service (on by\ndefault) makes the binaries an application asks for (--binaries\nsubstitute) before its job ends. This step makes the rest: the kept\ncompiles' binaries, and what a job left unmade (killed, past its wait,\nor with the service off). Run it apart from the job (after it, or in a\nlater job at low priority). One step at a time per host and store; hosts\nsharing a store split the requests by claims, each a lease renewed while\nit is made.",
        options: &WARM,
    },
    Command {
        name: "store",
        synopsis: "clshim store [--store DIR] [--json] [--clear]",
        summary: "what the store holds (kept compiles, the driver's binaries by device,\nrequests waiting, the cap, the last warm step), or with --clear, empty it",
        about: "Show the native store clshim warm would warm: where it is and whether it is\nyours alone, the compiles jobs kept and its entries (the driver's binaries),\nwith their bytes, by device and driver build, the builds it found cannot be\nkept (and why), the requests waiting (the oldest's age), those set aside,\nits size against $CLSHIM_NATIVE_STORE_MAX, and the last warm step's line in\nwarm.log. --clear removes every file of clshim's in it (kept compiles,\nentries, requests, marks, labels, warm.log), never a file that is not\nclshim's. Exit status 0, 1 when the store is not yours alone or cannot be\nread (or a file could not be removed), 2 on usage errors.",
        options: &STORE,
    },
    Command {
        name: "unsubstitute",
        synopsis: "clshim unsubstitute [--remove] [--cross-filesystems] DIR...",
        summary: "list (and with --remove, remove) the clshim binaries in applications'\ncaches, before running without clshim",
        about: "The way back from --binaries substitute. List every file under each DIR (an\napplication's binary cache) that is a clshim binary ('is'), a cache entry\nthat wraps one in a layout clshim knows ('contains'), or other data holding\none ('inside', never removed); never follows symbolic links, opens only\nregular files, stays on each DIR's filesystem. Exit status 0 when some were\nfound (and, with --remove, all removed), 1 when none were found, 2 when a DIR\ncannot be walked, 3 when some could not be removed (a file with other hard\nlinks is kept).",
        options: &UNSUBSTITUTE,
    },
];

/// The command names, for "did you mean".
pub fn command_names() -> impl Iterator<Item = &'static str> {
    COMMANDS.iter().map(|c| c.name)
}

/// One option's lines of a page: `  --store DIR         the native store ...`; a name
/// wider than its column gets a line of its own.
fn option_lines(out: &mut String, name: &str, help: &str) {
    let mut left = name;
    if name.len() > 18 {
        out.push_str(&format!("  {name}\n"));
        left = "";
    }
    for line in help.split('\n') {
        out.push_str(&format!("  {left:<18}  {line}\n"));
        left = "";
    }
}

/// `clshim run`'s options from the controls the library reads: `--binaries POLICY` with
/// its variable and values; a switch as its two flags.
fn control_lines(out: &mut String) {
    for c in controls::ALL.iter().filter(|c| c.reader == Reader::Library) {
        if c.grammar == Grammar::Switch {
            option_lines(out, c.option, &format!("{}=1 ({})", c.var, c.help));
            option_lines(
                out,
                &c.option.replacen("--", "--no-", 1),
                &format!("{}=0", c.var),
            );
        } else {
            option_lines(
                out,
                &format!("{} {}", c.option, c.metavar),
                &format!("{}: {}", c.var, c.help),
            );
        }
    }
}

/// Every option `clshim run` takes, by name (both flags of a switch).
pub fn run_option_names() -> Vec<String> {
    let mut names = Vec::new();
    for c in controls::ALL.iter().filter(|c| c.reader == Reader::Library) {
        names.push(c.option.to_string());
        if c.grammar == Grammar::Switch {
            names.push(c.option.replacen("--", "--no-", 1));
        }
    }
    names.extend(RUN_ONLY.iter().map(|o| o.name.to_string()));
    names
}

/// The option names of `command`, for "did you mean".
pub fn option_names(command: &str) -> Vec<String> {
    let mut names = match command {
        "run" => run_option_names(),
        _ => COMMANDS
            .iter()
            .find(|c| c.name == command)
            .map(|c| c.options.iter().map(|o| o.name.to_string()).collect())
            .unwrap_or_default(),
    };
    names.push("--help".into());
    names
}

/// The overview: every command with what it does, and how to get a command's page.
pub fn overview() -> String {
    let mut out = String::from(
        "clshim: see where OpenCL program-build time goes, per process and rank, and spare\n\
         pocl's CPU driver the second compile that binary caches cause.\n\nusage:\n",
    );
    for c in &COMMANDS {
        out.push_str(&format!("  {}\n", c.synopsis));
        for line in c.summary.split('\n') {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out.push_str(
        "  clshim help [COMMAND] | --help | --version\n\n\
         Start with: clshim run --trace-dir traces -- python app.py; clshim report traces\n\
         'clshim help COMMAND' (or 'clshim COMMAND --help') shows a command's options.\n",
    );
    out
}

/// `command`'s own page, or None for a command that does not exist.
pub fn page(command: &str) -> Option<String> {
    let c = COMMANDS.iter().find(|c| c.name == command)?;
    let mut out = format!("usage: {}\n\n{}\n\noptions:\n", c.synopsis, c.about);
    if c.name == "run" {
        control_lines(&mut out);
    }
    for o in c.options {
        let name = if o.metavar.is_empty() {
            o.name.to_string()
        } else {
            format!("{} {}", o.name, o.metavar)
        };
        option_lines(&mut out, &name, o.help);
    }
    option_lines(&mut out, "-h, --help", "this page");
    Some(out)
}

/// docs/clshim-command.md's table of `clshim run`'s options, in Markdown.
pub fn options_table() -> String {
    let mut out = String::from("| option | sets | values |\n|---|---|---|\n");
    for c in controls::ALL.iter().filter(|c| c.reader == Reader::Library) {
        let (option, values) = if c.grammar == Grammar::Switch {
            (
                format!("`{}` / `{}`", c.option, c.option.replacen("--", "--no-", 1)),
                "`1` / `0`".to_string(),
            )
        } else {
            (
                format!("`{} {}`", c.option, c.metavar),
                c.values.to_string(),
            )
        };
        out.push_str(&format!("| {option} | `{}` | {values} |\n", c.var));
    }
    for o in &RUN_ONLY {
        let option = if o.metavar.is_empty() {
            format!("`{}`", o.name)
        } else {
            format!("`{} {}`", o.name, o.metavar)
        };
        out.push_str(&format!("| {option} | {} | {} |\n", o.sets, o.values));
    }
    out
}

/// The known word nearest to `given` when it is near enough to be a slip (leading dashes
/// aside): at most a third of its length (and at least two) edits away, or half of it
/// when both begin with the same four characters (`--binary`, `--binaries`), or a word
/// it begins (`unsub`).
pub fn did_you_mean<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let bare = |w: &str| w.trim_start_matches('-').to_string();
    let g = bare(given);
    let len = g.chars().count();
    if len < 2 {
        return None;
    }
    known
        .into_iter()
        .filter_map(|k| {
            let kb = bare(k);
            let d = if len >= 3 && kb.starts_with(&g) {
                1
            } else {
                distance(&g, &kb)
            };
            let common = g
                .chars()
                .zip(kb.chars())
                .take_while(|(a, b)| a == b)
                .count();
            let limit = if common >= 4 {
                len / 2
            } else {
                (len / 3).max(2)
            };
            (d <= limit.max(1)).then_some((d, k))
        })
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// Edit distance (insertions, deletions, substitutions, and swaps of neighbours).
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        d[i * w] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(w) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[(i - 1) * w + j] + 1)
                .min(d[i * w + j - 1] + 1)
                .min(d[(i - 1) * w + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[(i - 2) * w + j - 2] + 1);
            }
            d[i * w + j] = v;
        }
    }
    d[a.len() * w + b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slips_find_their_word_and_strangers_none() {
        let run = run_option_names();
        let names = || run.iter().map(String::as_str);
        assert_eq!(did_you_mean("--binary", names()), Some("--binaries"));
        assert_eq!(did_you_mean("--trace-dri", names()), Some("--trace-dir"));
        assert_eq!(
            did_you_mean("--nativestore", names()),
            Some("--native-store")
        );
        assert_eq!(did_you_mean("--frobnicate", names()), None);
        assert_eq!(did_you_mean("--summry", names()), Some("--summary"));
        assert_eq!(did_you_mean("--x", names()), None);
        assert_eq!(did_you_mean("reprot", command_names()), Some("report"));
        assert_eq!(did_you_mean("unsub", command_names()), Some("unsubstitute"));
        assert_eq!(did_you_mean("x", command_names()), None);
    }

    /// Each page is one command's: short, its options, no other command's.
    #[test]
    fn pages_are_a_command_each() {
        for c in &COMMANDS {
            let p = page(c.name).unwrap();
            assert!(p.starts_with(&format!("usage: clshim {}", c.name)), "{p}");
            assert!(
                p.lines().count() < 40,
                "{}: {} lines",
                c.name,
                p.lines().count()
            );
            for o in c.options {
                assert!(p.contains(o.name), "{}: {}", c.name, o.name);
            }
        }
        let run = page("run").unwrap();
        assert!(run.contains("--native-store DIR") && run.contains("--record-only"));
        // `--warm` is accepted and ignored: not offered (`--warm-service` is another option).
        assert!(run.contains("--no-warm-service") && !run.contains("--warm "));
        assert!(!run.contains("--chrome") && !run.contains("--cross-filesystems"));
        assert!(page("frob").is_none());
        assert!(overview().lines().count() < 30);
    }

    /// docs/clshim-command.md's option table is the one rendered here, between its markers.
    #[test]
    fn docs_option_table_is_rendered_from_the_definitions() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/clshim-command.md"
        ))
        .unwrap();
        let begin = "<!-- run options table: rendered from src/bin/clshim/help.rs -->\n";
        let end = "<!-- end of run options table -->";
        let start = docs.find(begin).expect("the begin marker") + begin.len();
        let stop = start + docs[start..].find(end).expect("the end marker");
        assert_eq!(
            docs[start..stop],
            options_table(),
            "docs/clshim-command.md's option table differs from src/bin/clshim/help.rs: paste `clshim --options-table`"
        );
    }
}
