//! clshim: an OpenCL interposer that times program builds and binary queries per process
//! and MPI rank, and can answer binary queries on pocl's CPU driver without the second
//! compile they cost there. The C entry points (`preload`, `layer`, `macos`) are thin and
//! made from `entry_points`' table, as are their types and accessors; the logic
//! lives in `intercept` (one path for both modes, and the one door to the application's
//! memory, through `app_args`), `builds` (timing, callbacks), `policy`
//! (answering binary queries), `binary_load` (taking clshim binaries back, `container`
//! their format, `recipe` what they carry), `launches` (first kernel launches; `launch_tables` and
//! `address_table` its lock-free tables), `record`
//! and `trace_file` (output, with `sources` keeping program texts, `cache_dirs` naming
//! the compiler caches, `cpu_time` and `host_cpus` what a record cost in CPU and what
//! CPUs the process had), `controls` and `config` (the user's choices), `devices`,
//! `programs` and `dispatch` (where calls go), `copies` (one recording copy of the library
//! per process). `controls`, `schema` and `hash` come from the
//! `clshim-format` crate, which the `clshim` command uses too, so its options and its
//! reader use the library's definitions. Every module is private to the crate, so the
//! compiler names what nothing uses, except `config`, which the command's unit test reads
//! to hold its options to what the library's parser takes.

mod address_table;
mod app_args;
mod binary_answer;
mod binary_load;
mod builds;
mod cache_dirs;
mod cl;
pub mod config;
mod container;
mod copies;
mod cpu_time;
mod devices;
mod dispatch;
mod entry_points;
mod failed_build;
mod guard;
mod host_cpus;
mod idle_cpus;
mod intercept;
mod launch_tables;
mod launches;
mod layer;
mod lock;
mod logger;
#[cfg(target_os = "macos")]
mod macos;
mod owned_program;
mod policy;
#[cfg(not(target_os = "macos"))]
mod preload;
mod process;
mod program_cache;
mod programs;
mod query;
mod recipe;
mod record;
mod remake;
mod runtime;
mod sources;
mod store;
mod trace_file;

use clshim_format::{controls, hash, schema, wall_union};
