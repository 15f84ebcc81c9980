//! Helpers of the binary policy tests (tests/policy/): the policy variable, the fake
//! client's output lines, and the check of a `binary_query` record. Not re-exported by
//! `common`: the policy tests `use common::policy::*`.

use super::assert_query_sizes;
use serde_json::{json, Value};
use std::path::Path;

pub const POCL_PLATFORM: &str = "Portable Computing Language";
/// Every device, not only pocl's CPU devices, is answered by the policy.
pub const ALL: (&str, &str) = ("CLSHIM_DEVICES", "all");
/// The fake driver offers two devices.
pub const TWO: (&str, &str) = ("FAKE_ICD_DEVICES", "2");
pub const CUBE: &str = "2 3 10 29 66 127 sum=237";

pub fn policy(p: &'static str) -> (&'static str, &'static str) {
    ("CLSHIM_BINARIES", p)
}

pub fn hex(h: u64) -> String {
    format!("{h:016x}")
}

/// The fake client's `binaries` line for the given per-device hashes (None: nothing read).
pub fn binaries_line(step: &str, hashes: &[Option<u64>]) -> String {
    let list: Vec<String> = hashes.iter().map(|h| hex(h.unwrap_or(0))).collect();
    format!("{step}: CL_SUCCESS [{}]", list.join(", "))
}

pub fn sizes_line(sizes: &[usize]) -> String {
    let list: Vec<String> = sizes.iter().map(usize::to_string).collect();
    format!("sizes: CL_SUCCESS [{}]", list.join(", "))
}

pub fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

pub fn matched(r: &Value) -> Vec<bool> {
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["matched"].as_bool().unwrap())
        .collect()
}

/// Checks a successful binary_query record: its action(s) and the sizes it reports.
pub fn check_query(r: &Value, action: &str, actions: &[&str], sizes: &[usize]) {
    assert_eq!(r["call"], "clGetProgramInfo", "{r}");
    assert_eq!(r["result"], 0, "{r}");
    assert_eq!(r["action"], action, "{r}");
    assert_eq!(r["actions"], json!(actions), "{r}");
    // docs/trace-schema.md: a forwarded CL_PROGRAM_BINARIES query reports no sizes, since
    // clshim does not ask the driver for sizes it was not asked for: the whole field is
    // null when every device was forwarded (`assert_query_sizes`), and a forwarded
    // device's entry is null when others were answered.
    if r["param"] == "CL_PROGRAM_BINARIES" && actions.contains(&"forward") && action != "forward" {
        let got = r["sizes"]
            .as_array()
            .unwrap_or_else(|| panic!("sizes: {r}"));
        assert_eq!(got.len(), sizes.len(), "{r}");
        for (i, (g, want)) in got.iter().zip(sizes).enumerate() {
            let want = if actions[i] == "forward" {
                Value::Null
            } else {
                json!(want)
            };
            assert_eq!(*g, want, "device {i} ({}): {r}", actions[i]);
        }
        return;
    }
    assert_query_sizes(r, &json!(sizes));
}
