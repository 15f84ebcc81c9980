//! clshim: an OpenCL interposer that times program builds and binary queries per process
//! and MPI rank, and can answer binary queries on pocl's CPU driver without the second
//! compile they cost there. The C entry points (`preload`, `layer`) are thin; the logic
//! lives in `intercept` (one path for both modes, and the one door to the application's
//! memory, through `app_args`), `builds` (timing, callbacks), `policy`
//! (answering binary queries), `binary_load` (taking clshim binaries back, `container`
//! their format, `recipe` what they carry), `launches` (first kernel launches), `record`
//! and `trace_file` (output), `controls` and `config` (the user's choices), `devices`,
//! `programs` and `dispatch` (where calls go). The `clshim` command compiles `controls` and `schema` in as its
//! own modules, so its options and its reader use the library's definitions.

pub mod address_table;
pub mod app_args;
pub mod binary_load;
pub mod builds;
pub mod cl;
pub mod config;
pub mod container;
pub mod controls;
pub mod devices;
pub mod dispatch;
pub mod guard;
pub mod hash;
pub mod intercept;
pub mod launches;
pub mod layer;
pub mod lock;
pub mod logger;
#[cfg(target_os = "macos")]
pub mod macos;
pub mod policy;
pub mod preload;
pub mod process;
pub mod programs;
pub mod query;
pub mod recipe;
pub mod record;
pub mod runtime;
pub mod schema;
pub mod trace_file;
pub mod wall_union;
