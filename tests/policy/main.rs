//! The binary policies (`CLSHIM_BINARIES`, `CLSHIM_DEVICES`), one test binary: on real
//! pocl, on the fake driver's several devices, and binaries loaded back; the program cache
//! and its native store, on one host and across simulated hosts. Each module opens
//! by saying what it checks; they share one link step and the harness in tests/common.

#[path = "../common/mod.rs"]
mod common;

mod busy_node;
mod hosts;
mod native_store;
mod nodes_bench;
mod policy_devices;
mod policy_load;
mod policy_pocl;
mod program_cache;
mod served_as_compiled;
mod shared_builds;
mod store_keys;
mod store_safety;
