//! `clshim report`: reads a trace directory (`traces`), sums it (`model`: per program,
//! per rank, the hints), prints it (`render`, or the timeline: `chrome`), and says why
//! programs were built (`build_facts`, `variants` with `linediff`, `caches`, and `against`
//! for a second run) and where ranks spent build time (`cpu_split`, `host_load`, with
//! `busy` and `rank_key`), what ranks compiled that another also compiled (`repeats`), and
//! where builds got their compiles per host and per program (`by_host`, with `origin`,
//! which reads what the program cache did); `loads` counts native loads and served builds. Everything the
//! model defines is re-exported here, so its users name it `report::X`.

pub mod against;
pub mod build_facts;
pub mod busy;
pub mod by_host;
pub mod caches;
pub mod chrome;
pub mod cpu_split;
pub mod host_load;
pub mod linediff;
pub mod loads;
mod model;
pub mod origin;
pub mod rank_key;
pub mod render;
pub mod repeats;
pub mod traces;
pub mod variants;

pub use model::*;

use crate::{cli, library, terminal};
use std::io::Write;
use std::process::ExitCode;

/// Reads a trace directory, listing on stderr what was skipped; a usage error (exit
/// status 2) when it is not a readable directory.
fn load(dir_path: &std::path::Path, by_source: bool) -> Result<Aggregate, ExitCode> {
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
    let mut agg = read(&paths, by_source);
    if paths.is_empty() {
        agg.no_files(dir_path);
    }
    {
        let Problems { listed, more } = agg.problems();
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

/// `clshim report`.
pub fn main(o: cli::ReportOpts) -> ExitCode {
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
    let mut rep = agg.report(&dir);
    let programs = variants::programs(&agg.facts, &o.dir);
    rep.run_unique_tokens = variants::run_unique(&programs);
    let flags = caches::flags(&agg.facts);
    let split = cpu_split::split(&agg.facts);
    let text = if o.json {
        let mut v = rep.json();
        v["compiling_and_waiting"] = split.json();
        v["variants"] = variants::json(&programs);
        v["caches"] = caches::json(&agg.facts, &flags);
        v["repeats"] = agg.repeats.json();
        v["repeats"]["by_host"] = by_host::json(&agg.repeats);
        let mut s = serde_json::to_string_pretty(&v).expect("report JSON");
        s.push('\n');
        s
    } else {
        let kept = variants::kept_any(&agg.facts);
        let why = variants::text(&programs, kept) + &caches::text(&flags);
        rep.text(o.wide)
            + &render::fit(
                &(split.text(o.wide)
                    + &agg.repeats.text(o.wide)
                    + &by_host::text(&agg.repeats, o.wide)
                    + &why),
                o.wide,
            )
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
