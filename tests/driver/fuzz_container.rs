//! The mutation fuzzer of clshim binaries (tests/c/fuzz_binaries.c) as a timed test: a few
//! thousand mutated binaries through clCreateProgramWithBinary under clshim, on the fake
//! ICD, each answered as the format in cl-headers/clshim.h says (a program made again from
//! its recipe, or CL_INVALID_BINARY), starting from version-1 binaries, from version-2
//! recipes of every kind and from a version-3 recipe with a shared part. `bench/fuzz_binaries.sh` runs the same fuzzer for long.

use crate::common;

use common::*;
use std::path::PathBuf;
use std::process::Command;

/// The fuzzer and the misuse probe share the fingerprint helper and clshim.h: build them
/// so that a change to either header rebuilds them.
pub fn fuzzer() -> PathBuf {
    let root = repo_root();
    let fp = root.join("tests/c/clshim_fingerprint.h");
    let headers = root.join("cl-headers");
    build_c_custom(
        "fuzz_binaries",
        "fuzz_binaries",
        &[
            "-include",
            fp.to_str().unwrap(),
            "-I",
            headers.to_str().unwrap(),
            "-include",
            headers.join("clshim.h").to_str().unwrap(),
            "-lOpenCL",
        ],
    )
}

#[test]
fn mutated_clshim_binaries_are_answered_as_the_format_says() {
    let fake = fake_icd();
    let started = std::time::Instant::now();
    for seed in ["1", "0x9e3779b97f4a7c15"] {
        let mut cmd = Command::new("timeout");
        cmd.args(["120"])
            .arg(fuzzer())
            .args(["5000", seed])
            .env("OCL_ICD_VENDORS", &fake.vendors)
            .env("CLSHIM_LOG", "off")
            .env("CLSHIM_SUMMARY", "0");
        let out = run(cmd, true);
        let text = stdout(&out);
        assert!(
            out.status.success(),
            "seed {seed}: {:?}\n{text}\n{}",
            out.status,
            stderr(&out)
        );
        let last = text.lines().last().unwrap_or("");
        assert!(last.starts_with("fuzz 5000 cases:"), "{text}");
        assert!(last.ends_with(", 0 wrong"), "{text}");
        // Both outcomes are reached: the mutations leave some binaries valid.
        let accepted: u64 = last
            .split(": ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|a| a.parse().ok())
            .unwrap();
        assert!(accepted > 30 && accepted < 4900, "{last}");
        // Every kind of base binary (version 1 and the version-2 recipes) is reached
        // accepted, not only refused.
        let by_base = text
            .lines()
            .find(|l| l.starts_with("accepted by base: "))
            .unwrap_or_default();
        let counts: Vec<u64> = by_base
            .split(", ")
            .filter_map(|p| p.rsplit(' ').next()?.parse().ok())
            .collect();
        assert!(
            counts.len() == 5 && counts.iter().all(|&c| c > 0),
            "{by_base}"
        );
    }
    eprintln!("10,000 cases in {:.1} s", started.elapsed().as_secs_f64());
}
