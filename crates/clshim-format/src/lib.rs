//! What clshim's library and its `clshim` command agree on, defined once: `binary` (the
//! clshim binary's envelope: magic, versions, sizes), `controls` (every environment
//! variable, its `clshim run` option and the values it accepts), `schema` (the trace
//! records: version, event names, the fields of every record), `ranks` (the MPI rank from
//! the launchers' variables), `hash` (the stable hash behind source and link identities
//! and clshim binaries' checksums), `store` (the native store's entry header and requests)
//! with `kept` (a kept compile: what pocl's kernel cache gained
//! when a rank compiled), `manifest` (the names an entry's compile looked up, and what it found there) and
//! `labels` (what the store says of its devices and driver builds, in words),
//! `cap` (the store kept under its size), and `wall_union` (how overlapping first launches
//! are counted). The library parses the
//! controls and writes the
//! records; the command sets the controls and reads the records back. A crate of its own,
//! with serde as its only dependency, so the command links it without linking the
//! interposer.

pub mod binary;
pub mod cap;
pub mod controls;
pub mod hash;
pub mod kept;
pub mod labels;
pub mod manifest;
pub mod ranks;
pub mod schema;
pub mod store;
pub mod wall_union;
