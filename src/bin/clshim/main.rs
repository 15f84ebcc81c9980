//! The `clshim` command: launch programs under the shim (`clshim run`), report on the
//! traces they wrote (`clshim report`), make the native store's entries (`clshim warm`),
//! show or clear the store (`clshim store`), and clear clshim binaries out of
//! applications' caches (`clshim unsubstitute`). This file only dispatches: it parses the
//! arguments (`cli`), then hands over to the folder of each command (`run/`, `report/`,
//! `warm/`, `store/`, `unsubstitute/`), with `help`, `library` (finding
//! the interposer) and `terminal` (what reaches a terminal) shared, and maps outcomes to
//! exit statuses: 0 success, 1 report with skipped input, 2 usage error; `run` failures use
//! 1, or 126 / 127 like a shell when the command cannot be executed or found;
//! `unsubstitute`, `warm` and `store` say their own (see their modules).

mod cli;
mod help;
mod library;
mod report;
mod run;
mod store;
mod terminal;
mod unsubstitute;
mod warm;

// The controls, the trace schema, the stable hash and the wall-clock union, shared with the library through their own crate:
// the command never links the library crate, which would bring the interposer along (its
// exported entry points keep it alive), whose getrandom call the manylinux_2_17 wheel's
// glibc does not have.
use clshim_format::{controls, hash, ranks, schema, wall_union};

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
            print!("{}", controls::docs_table());
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
        Ok(cli::Command::Report(o)) => report::main(o),
        Ok(cli::Command::Unsubstitute(o)) => unsubstitute::main(o),
        Ok(cli::Command::Warm(o)) => ExitCode::from(warm::warm_main(o).clamp(0, 255) as u8),
        Ok(cli::Command::Store(o)) => store::main(o),
    }
}
