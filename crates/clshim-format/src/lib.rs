//! What clshim's library and its `clshim` command agree on, defined once: `controls`
//! (every environment variable, its `clshim run` option and the values it accepts) and
//! `schema` (the trace records: version, event names, the fields of every record) and `hash`
//! (the stable hash behind source identities, link identities and clshim binaries' checksums).
//! The library parses the controls and writes the records; the command sets the controls,
//! reads the records back and names linked programs with the same hash; both count
//! overlapping first launches by `wall_union`'s rule. A crate of its own, with serde as its only dependency, so the
//! command links it without linking the interposer.

pub mod controls;
pub mod hash;
pub mod schema;
pub mod wall_union;
