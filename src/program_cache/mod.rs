//! The program cache (`CLSHIM_PROGRAM_CACHE=1`, Linux only): source builds on pocl devices
//! served from the native store, for applications that keep no binaries (pyopencl 2024.2.3
//! and later on pocl build every program from source at every start; pocl's kernel cache
//! then still preprocesses each source, about 20 ms a program, where the driver's own
//! binary loads in about one). This module owns when a program gets a handle of clshim's
//! (`handles`: only a source the store holds a build of, on pocl devices only, so a
//! program the store cannot serve is the driver's own, untouched), the served build itself,
//! and each source build's turn at the compiles the ranks of a job share and keep
//! (`share`). What an entry is keyed on, and where
//! it lives, is `store`'s: a build is served only by an entry made for exactly that build.
//!
//! A served `clBuildProgram` makes the program from the driver's binaries of every device
//! of the program (entries of this very key), builds it with the application's options
//! (so its build options, log and kernel argument information are those of a build with
//! them), and makes the handle stand for it; `CL_PROGRAM_SOURCE` still answers the source.
//! Anything short of that (a device list that is not the program's every device, a
//! missing or refused entry, a driver that refuses the binary or its build) builds the
//! source program as without the cache; a build the driver refuses before building
//! anything (its arguments, a kernel holding the program) is the driver's to answer, on
//! the program the handle stands for.

pub mod handles;
mod serve;
pub mod share;

pub use handles::{app_handle, find, forget_reused, resolve, source_of};
pub use serve::{after_fallback, after_source_build, maybe_wrap, serve_build, Build};

/// The folder of the store where the warm step marks the sources it made builds of, and
/// a mark's name. `clCreateProgramWithSource` looks for the mark (one file operation) to
/// decide whether the program gets a handle.
pub use clshim_format::store::{source_mark, SOURCES};
