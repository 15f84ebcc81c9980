//! `clshim report`'s model of a trace directory, in three steps: `aggregate` reads the
//! files into per-program and per-rank sums, `rows` turns those into the report's rows
//! and statistics, `hints` decides which hints the figures call for. Everything the
//! renderings (`render`) and the timeline (`chrome`) use is re-exported here, so they
//! name it `report::X` whichever step owns it.

mod aggregate;
mod hints;
mod rows;

pub use aggregate::*;
pub use hints::*;
pub use rows::*;
