//! The `clshim` command: launch programs under the shim (`clshim run`), report on the
//! traces they wrote (`clshim report`), and clear clshim binaries out of applications'
//! caches (`clshim unsubstitute`). This file only dispatches: it parses the
//! arguments (`cli`), then hands over to `run` (which replaces this process with the
//! user's command) or to the report path (`traces` reads, `report` aggregates,
//! `render` prints, `chrome` writes the timeline) or to `unsubstitute` (which walks the
//! directories and asks `binary_scan` about each file), and maps outcomes to exit statuses:
//! 0 success, 1 report with skipped input, 2 usage error; `run` failures use 1, or 126
//! / 127 like a shell when the command cannot be executed or found; `unsubstitute` says
//! its own (see its module).

mod against;
mod binary_scan;
mod build_facts;
mod busy;
mod caches;
mod chrome;
mod cli;
mod cpu_split;
mod help;
mod host_load;
mod inherited_signals;
mod library;
mod linediff;
mod loads;
mod macos_env;
mod rank_key;
mod render;
mod report;
mod run;
mod terminal;
mod traces;
mod unsubstitute;
mod variants;
mod warm;

// The controls, the trace schema, the stable hash and the wall-clock union, shared with the library through their own crate:
// the command never links the library crate, which would bring the interposer along (its
// exported entry points keep it alive), whose getrandom call the manylinux_2_17 wheel's
// glibc does not have.
use clshim_format::{controls, hash, ranks, schema, wall_union};

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    match cli::parse(args) {
        Err(e) => {
            eprintln!("clshim: {e}");
            ExitCode::from(2)
        }
        Ok(cli::Command::Help(page)) => {
            print!(
                "{}",
                page.and_then(help::page).unwrap_or_else(help::overview)
            );
            ExitCode::SUCCESS
        }
        Ok(cli::Command::Overview) => {
            eprint!("{}", help::overview());
            ExitCode::from(2)
        }
        Ok(cli::Command::OptionsTable) => {
            print!("{}", help::options_table());
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
        Ok(cli::Command::Unsubstitute(o)) => unsubstitute::main(o),
        Ok(cli::Command::Warm(o)) => ExitCode::from(warm::warm_main(o).clamp(0, 255) as u8),
    }
}

/// Reads a trace directory, listing on stderr what was skipped; a usage error (exit
/// status 2) when it is not a readable directory.
fn load(dir_path: &std::path::Path, by_source: bool) -> Result<report::Aggregate, ExitCode> {
    let dir = dir_path.display().to_string();
    let paths = match std::fs::metadata(dir_path) {
        Ok(m) if !m.is_dir() => {
            eprintln!("clshim report: {}: not a directory", terminal::text(&dir));
            return Err(ExitCode::from(2));
        }
        Err(e) => {
            eprintln!(
                "clshim report: {}: {}",
                terminal::text(&dir),
                library::describe(&e)
            );
            return Err(ExitCode::from(2));
        }
        Ok(_) => match traces::list(dir_path) {
            Ok(p) => p,
            Err(e) => {
                eprintln!(
                    "clshim report: {}: cannot list: {}",
                    terminal::text(&dir),
                    library::describe(&e)
                );
                return Err(ExitCode::from(2));
            }
        },
    };
    let mut agg = report::read(&paths, by_source);
    if paths.is_empty() {
        agg.no_files(dir_path);
    }
    {
        let report::Problems { listed, more } = agg.problems();
        let mut err = std::io::stderr().lock();
        for p in listed {
            let _ = writeln!(err, "clshim report: {}", terminal::text(&p.to_string()));
        }
        if more > 0 {
            let _ = writeln!(err, "clshim report: ... {more} more skipped, not listed");
        }
    }
    Ok(agg)
}

fn report_main(o: cli::ReportOpts) -> ExitCode {
    let dir = o.dir.display().to_string();
    let agg = match load(&o.dir, o.by_source) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if let Some(old_dir) = &o.against {
        let old = match load(old_dir, o.by_source) {
            Ok(a) => a,
            Err(code) => return code,
        };
        let cmp = against::compare_runs(&agg.facts, &o.dir, &old.facts, old_dir);
        let old_name = old_dir.display().to_string();
        let text = if o.json {
            let mut s =
                serde_json::to_string_pretty(&cmp.json(&dir, &old_name)).expect("report JSON");
            s.push('\n');
            s
        } else {
            cmp.text(&dir, &old_name)
        };
        if !print(&text, o.json) {
            return ExitCode::from(2);
        }
        return if agg.skipped + old.skipped > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    let rep = agg.report(&dir);
    let programs = variants::programs(&agg.facts, &o.dir);
    let flags = caches::flags(&agg.facts);
    let split = cpu_split::split(&agg.facts);
    let text = if o.json {
        let mut v = rep.json();
        v["compiling_and_waiting"] = split.json();
        v["variants"] = variants::json(&programs);
        v["caches"] = caches::json(&agg.facts, &flags);
        let mut s = serde_json::to_string_pretty(&v).expect("report JSON");
        s.push('\n');
        s
    } else {
        let kept = variants::kept_any(&agg.facts);
        let why = variants::text(&programs, kept) + &caches::text(&flags);
        rep.text(o.wide) + &render::fit(&(split.text(o.wide) + &why), o.wide)
    };
    if !print(&text, o.json) {
        return ExitCode::from(2);
    }
    if let Some(path) = &o.chrome {
        match chrome::write(&agg, path) {
            Ok(left_out) => {
                for l in left_out {
                    eprintln!("clshim report: {}", terminal::text(&l));
                }
            }
            Err(e) => {
                eprintln!(
                    "clshim report: cannot write {}: {}",
                    path.display(),
                    library::describe(&e)
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

/// Writes the report (a JSON document when `json`) to standard output with its control
/// characters escaped (`terminal`); false when it cannot (a closed pipe, a full disk).
fn print(text: &str, json: bool) -> bool {
    let safe = if json {
        terminal::json(text)
    } else {
        terminal::text(text)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(safe.as_bytes())
        .and_then(|_| out.flush())
        .is_ok()
}
