//! The `clshim` command, one test binary: `clshim run`, `clshim report` (on trace files
//! written here, hostile input, and real runs reported) `clshim unsubstitute`, `clshim
//! store` (a native store real runs filled, listed and cleared), and why programs built (variants, kept sources,
//! `--against`), compiling against waiting across rank counts (`ranks`), and what the report
//! says of ranks that share their compiles (`report_sharing`). Each module opens by saying what
//! it checks; they share one link step and the harness in tests/common.

#[path = "../common/mod.rs"]
mod common;

mod cli_report;
mod cli_run;
mod help;
mod ranks;
mod repeats;
mod report_first_launch;
mod report_hostile;
mod report_linked;
mod report_sharing;
mod store;
mod unsubstitute;
mod why;
