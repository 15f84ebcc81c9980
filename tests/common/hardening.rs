//! Helpers of the hardening tests (tests/hardening_*.rs): the probe program
//! (tests/c/hardening.c) run with the shim under a time limit, and the trace files it
//! leaves. Not re-exported by `common`: those tests `use common::hardening::*`.

use super::{build_c, clear_shim_env, shim_path, stderr, stdout, FakeIcd};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn probe() -> PathBuf {
    build_c("hardening", &[])
}

/// `program` with the shim preloaded and tracing into `trace`, and nothing of the test's
/// own CLSHIM_*, LD_PRELOAD or OPENCL_LAYERS.
pub fn shim_command(program: impl AsRef<std::ffi::OsStr>, trace: &Path) -> Command {
    let mut cmd = Command::new(program);
    clear_shim_env(&mut cmd, &[]);
    cmd.env("LD_PRELOAD", shim_path())
        .env("CLSHIM_TRACE_DIR", trace);
    cmd
}

/// Runs the probe with the shim preloaded, tracing into `trace`, with `env` set after the
/// test's own CLSHIM_* are removed; killed after `limit` seconds (a deadlock fails the
/// test instead of hanging it).
pub fn run_probe(args: &[&str], trace: &Path, env: &[(&str, &str)], limit: u32) -> Output {
    let mut cmd = shim_command("timeout", trace);
    cmd.arg(limit.to_string()).arg(probe()).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("spawn probe");
    assert_ne!(
        out.status.code(),
        Some(124),
        "{args:?} deadlocked (killed after {limit} s)"
    );
    out
}

pub fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

pub fn fake_env(fake: &FakeIcd) -> String {
    fake.vendors.to_str().unwrap().to_string()
}

/// Every trace file of `dir` with its records (each line must parse).
pub fn files(dir: &Path) -> Vec<(PathBuf, Vec<Value>)> {
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for p in paths {
        let text = std::fs::read_to_string(&p).unwrap();
        let recs = text
            .lines()
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{}: bad line ({e}): {l}", p.display()))
            })
            .collect();
        out.push((p, recs));
    }
    out
}

pub fn rss(out: &Output) -> (i64, i64) {
    let s = stdout(out);
    let line = s
        .lines()
        .find_map(|l| l.strip_prefix("rss "))
        .expect("rss line");
    let v: Vec<i64> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (v[0], v[1])
}
