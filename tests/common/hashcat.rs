//! hashcat, a real client the tests run (tests/clients/real_clients.rs, tests/cli/unsubstitute.rs):
//! one small job and the folders it may write, defined once.

use std::path::{Path, PathBuf};

pub const HASHCAT_BIN: &str = "/usr/bin/hashcat";

/// md5("123") by brute force over three digits. `-O`: hashcat's optimised kernels; `-D 1`:
/// CPU devices; `--force`: hashcat otherwise refuses pocl; the rest keeps hashcat from
/// writing outside its folders.
pub const HASHCAT_ARGS: [&str; 13] = [
    "-m",
    "0",
    "-a",
    "3",
    "--force",
    "-O",
    "-D",
    "1",
    "--quiet",
    "--potfile-disable",
    "--logfile-disable",
    "202cb962ac59075b964b07152d234b70",
    "?d?d?d",
];

/// What the job prints when it cracked the hash.
pub const HASHCAT_CRACKED: &str = "202cb962ac59075b964b07152d234b70:123\n";

/// hashcat keeps its kernel cache and session files under the XDG folders (HOME for those
/// it does not take from XDG variables): all of them under `home`, pocl's kernel cache in
/// `pocl_cache`.
pub fn hashcat_env(home: &Path, pocl_cache: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("HOME", home.to_path_buf()),
        ("XDG_CACHE_HOME", home.join("cache")),
        ("XDG_DATA_HOME", home.join("data")),
        ("XDG_CONFIG_HOME", home.join("config")),
        ("POCL_CACHE_DIR", pocl_cache.to_path_buf()),
    ]
}
