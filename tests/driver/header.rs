//! cl-headers/clshim.h, the C header this project publishes for tools that meet clshim
//! binaries: its parser reads a binary the real shim wrote on pocl, and refuses a damaged
//! one and pocl's own.

use crate::common;

use common::*;
use std::process::Command;

#[test]
fn the_c_header_parses_what_the_shim_writes() {
    let dir = scratch("header");
    let roundtrip = build_c("binary_roundtrip", &[]);
    let check = build_c("header_check", &[]);
    let saved = dir.join("clshim.bin");
    let mut cmd = Command::new(&roundtrip);
    cmd.arg(format!("--save={}", saved.display()))
        .arg("--seed=4242");
    cmd.env("CLSHIM_BINARIES", "substitute")
        .env("CLSHIM_SUMMARY", "0");
    let out = run(cmd, true);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(&saved).unwrap();

    let parsed = Command::new(&check).arg(&saved).output().unwrap();
    let text = stdout(&parsed);
    assert!(text.starts_with("clshim binary v3, fingerprint "), "{text}");
    assert!(
        text.contains(", kind 1, options \"\", headers 0, inputs 0,"),
        "{text}"
    );
    assert!(text.contains("4242"), "the source is the program's: {text}");
    assert!(
        text.contains(&format!("source {} bytes", bytes.len() - CLSHIM_OVERHEAD)),
        "{text}"
    );
    // What tests/driver/recipes.rs saves of each kind of program is parsed with its kind, and
    // every damaged copy refused: see recipes.rs for the recipe kinds.

    let mut damaged = bytes.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 1;
    std::fs::write(dir.join("damaged.bin"), &damaged).unwrap();
    let parsed = Command::new(&check)
        .arg(dir.join("damaged.bin"))
        .output()
        .unwrap();
    assert_eq!(stdout(&parsed), "not a clshim binary\n");

    // pocl's own binary, saved without the shim.
    let pocl = dir.join("pocl.bin");
    let mut cmd = Command::new(&roundtrip);
    cmd.arg(format!("--save={}", pocl.display()));
    assert!(run(cmd, false).status.success());
    let parsed = Command::new(&check).arg(&pocl).output().unwrap();
    assert_eq!(stdout(&parsed), "not a clshim binary\n");
}
