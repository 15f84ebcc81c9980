//! The `clshim` command: launch programs under the shim (`clshim run`) and report on the
//! traces they wrote (`clshim report`). This file only dispatches: it parses the
//! arguments (`cli`), then hands over to `run` (which replaces this process with the
//! user's command) or to the report path (`traces` reads, `report` aggregates,
//! `render` prints, `chrome` writes the timeline), and maps outcomes to exit statuses:
//! 0 success, 1 report with skipped input, 2 usage error; `run` failures use 1, or 126
//! / 127 like a shell when the command cannot be executed or found.

mod chrome;
mod cli;
mod inherited_signals;
mod loads;
mod macos_env;
mod render;
mod report;
mod run;
mod traces;
mod warm;

// The controls, the trace schema and the stable hash, shared with the library through their own crate:
// the command never links the library crate, which would bring the interposer along (its
// exported entry points keep it alive), whose getrandom call the manylinux_2_17 wheel's
// glibc does not have.
use clshim_format::{controls, hash, schema};

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    match cli::parse(args) {
        Err(e) => {
            eprintln!("clshim: {e}");
            ExitCode::from(2)
        }
        Ok(cli::Command::Help) => {
            print!("{}", cli::usage_text());
            ExitCode::SUCCESS
        }
        Ok(cli::Command::ControlsTable) => {
            print!("{}", controls::readme_table());
            ExitCode::SUCCESS
        }
        Ok(cli::Command::Version) => {
            println!("clshim {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(cli::Command::Run(o)) => {
            let e = run::run(o);
            eprintln!("clshim: {}", e.message);
            ExitCode::from(e.status as u8)
        }
        Ok(cli::Command::Report(o)) => report_main(o),
        Ok(cli::Command::Warm(o)) => ExitCode::from(warm::warm_main(o).clamp(0, 255) as u8),
    }
}

fn report_main(o: cli::ReportOpts) -> ExitCode {
    let dir = o.dir.display().to_string();
    let paths = match std::fs::metadata(&o.dir) {
        Ok(m) if !m.is_dir() => {
            eprintln!("clshim report: {dir}: not a directory");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("clshim report: {dir}: {}", run::describe(&e));
            return ExitCode::from(2);
        }
        Ok(_) => match traces::list(&o.dir) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("clshim report: {dir}: cannot list: {}", run::describe(&e));
                return ExitCode::from(2);
            }
        },
    };
    let mut agg = report::read(&paths, o.by_source);
    if paths.is_empty() {
        agg.no_files(&o.dir);
    }
    {
        let report::Problems { listed, more } = agg.problems();
        let mut err = std::io::stderr().lock();
        for p in listed {
            let _ = writeln!(err, "clshim report: {p}");
        }
        if more > 0 {
            let _ = writeln!(err, "clshim report: ... {more} more skipped, not listed");
        }
    }
    let rep = agg.report(&dir);
    let text = if o.json {
        let mut s = serde_json::to_string_pretty(&rep.json()).expect("report JSON");
        s.push('\n');
        s
    } else {
        rep.text()
    };
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        return ExitCode::from(2);
    }
    if let Some(path) = &o.chrome {
        match chrome::write(&agg, path) {
            Ok(left_out) => {
                for l in left_out {
                    eprintln!("clshim report: {l}");
                }
            }
            Err(e) => {
                eprintln!(
                    "clshim report: cannot write {}: {}",
                    path.display(),
                    run::describe(&e)
                );
                return ExitCode::from(2);
            }
        }
    }
    if agg.skipped > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
