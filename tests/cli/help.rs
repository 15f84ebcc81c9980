//! Help, as a new user meets it: `clshim` alone, `clshim --help`, each command's own page
//! (`clshim run --help`, `clshim help report`), and a mistyped command or option answered
//! with the nearest one.

use crate::common::{clshim_out, one_line_err, stderr, stdout};

const COMMANDS: [&str; 5] = ["run", "report", "warm", "store", "unsubstitute"];

/// Each command's `--help` is its own page, short, and the same as `clshim help COMMAND`;
/// `clshim --help` is an overview of them all.
#[test]
fn every_command_has_a_page_of_its_own() {
    for c in COMMANDS {
        let o = clshim_out(&[c, "--help"], &[]);
        assert_eq!(o.status.code(), Some(0), "{c}");
        let page = stdout(&o);
        assert!(page.starts_with(&format!("usage: clshim {c}")), "{page}");
        assert!(
            page.lines().count() <= 40,
            "{c}: {} lines",
            page.lines().count()
        );
        for other in COMMANDS.iter().filter(|o| **o != c) {
            assert!(
                !page.contains(&format!("usage: clshim {other}")),
                "{c}: {page}"
            );
        }
        assert_eq!(stdout(&clshim_out(&["help", c], &[])), page);
    }
    let run = stdout(&clshim_out(&["run", "--help"], &[]));
    for o in [
        "--binaries POLICY",
        "--record-only",
        "--no-warm-service",
        "--native-store DIR",
        "--native-store-max",
    ] {
        assert!(run.contains(o), "{o}: {run}");
    }
    // `--warm`, accepted and ignored, is not offered.
    assert!(
        !run.contains("--chrome") && !run.contains("--warm "),
        "{run}"
    );
    let overview = stdout(&clshim_out(&["--help"], &[]));
    for c in COMMANDS {
        assert!(
            overview.contains(&format!("  clshim {c} ")),
            "{c}: {overview}"
        );
    }
    assert!(overview.lines().count() <= 30, "{overview}");
}

/// `clshim` (or `python -m clshim`, the same executable) with no arguments shows the
/// overview, not only "no subcommand given", and exits 2 as for any usage error.
#[test]
fn no_arguments_show_the_overview() {
    let o = clshim_out(&[], &[]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    for c in COMMANDS {
        assert!(e.contains(&format!("  clshim {c} ")), "{c}: {e}");
    }
    assert!(e.contains("clshim help COMMAND"), "{e}");
}

/// A mistyped option or command: one line naming the nearest one and the page to read.
#[test]
fn a_slip_gets_a_did_you_mean() {
    for (args, want) in [
        (&["run", "--binary", "pass", "--", "true"][..], "clshim: run: unknown option '--binary' (did you mean --binaries? try 'clshim run --help')"),
        (&["run", "--trace-dri=t", "--", "true"], "clshim: run: unknown option '--trace-dri=t' (did you mean --trace-dir? try 'clshim run --help')"),
        (&["report", "--jsno", "d"], "clshim: report: unknown option '--jsno' (did you mean --json? try 'clshim report --help')"),
        (&["unsubstitute", "--remvoe", "d"], "clshim: unsubstitute: unknown option '--remvoe' (did you mean --remove? try 'clshim unsubstitute --help')"),
        (&["warm", "--job", "2"], "clshim: warm: unknown option '--job' (did you mean --jobs? try 'clshim warm --help')"),
        (&["reprot", "d"], "clshim: unknown subcommand 'reprot' (did you mean 'report'? expected 'run', 'warm', 'store', 'report' or 'unsubstitute'; try 'clshim --help')"),
        (&["store", "--jsno"], "clshim: store: unknown option '--jsno' (did you mean --json? try 'clshim store --help')"),
        (&["run", "--frobnicate", "--", "true"], "clshim: run: unknown option '--frobnicate' (try 'clshim run --help')"),
    ] {
        let o = clshim_out(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_eq!(one_line_err(&o), want);
    }
}
