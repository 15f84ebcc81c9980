//! The `clshim` command: launch programs under the shim and report on their traces.
fn main() {}
