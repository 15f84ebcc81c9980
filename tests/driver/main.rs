//! The shim in front of OpenCL drivers, one test binary: real pocl through the system
//! loader and the fake driver (tests/fake_icd/fake_icd.c) for fault injection, in preload
//! and layer mode. Each module is one subject and opens by saying what it checks; they
//! share one link step and the harness in tests/common.

#[path = "../common/mod.rs"]
mod common;

mod fake_icd;
mod fuzz_container;
mod header;
mod interposer;
mod launches;
mod layer;
mod misuse;
mod recipes;
