//! Hardening, one test binary: the processes clshim lives in (threads, fork, every way
//! out, memcheck) and the trace files it writes (unwritable, full or vanishing
//! directories, reused descriptors, symlinks). The C side is tests/c/hardening.c.

#[path = "../common/mod.rs"]
mod common;

mod hardening_processes;
mod hardening_trace_files;
