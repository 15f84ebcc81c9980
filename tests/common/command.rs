//! Running the `clshim` command itself, and the device descriptions that hand-made trace
//! records carry (a pocl CPU device clshim's default filter matches, a GPU it leaves).

use super::{clear_shim_env, shim_path, stderr};
use serde_json::{json, Value};
use std::process::{Command, Output};

/// The `clshim` executable of this build, with a fresh target/<profile>/libclshim.so beside
/// it (`shim_path`), where `clshim run` finds it: `cargo test` on a fresh clone builds the
/// executable but not that library.
pub fn clshim() -> Command {
    shim_path();
    Command::new(env!("CARGO_BIN_EXE_clshim"))
}

/// Runs `clshim ARGS` with `env`, and with none of the test process's clshim variables
/// except those `env` sets.
pub fn clshim_out(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = clshim();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let keep: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
    clear_shim_env(&mut c, &keep);
    c.output().expect("spawn clshim")
}

/// Runs `clshim report ARGS`.
pub fn report(args: &[&str]) -> Output {
    clshim_out(&[&["report"], args].concat(), &[])
}

/// The single stderr line of a failed clshim, checked to be one line.
pub fn one_line_err(o: &Output) -> String {
    let e = stderr(o);
    assert_eq!(e.lines().count(), 1, "expected one stderr line, got: {e:?}");
    e.trim_end().to_string()
}

pub const POCL: &str = "Portable Computing Language";

/// pocl's CPU device as a trace record describes it.
pub fn pocl_cpu() -> Value {
    json!({"name": "cpu-haswell-AMD EPYC 7B13", "type": "CPU", "platform": POCL,
           "vendor": "AuthenticAMD", "driver": "3.1", "matched": true})
}

/// A GPU that the default device filter leaves alone.
pub fn gpu() -> Value {
    json!({"name": "NVIDIA H200", "type": "GPU", "platform": "NVIDIA CUDA",
           "vendor": "NVIDIA Corporation", "driver": "560.35", "matched": false})
}
