//! The native store as its user sees it (issue 31): every folder clshim makes for it is
//! the user's alone (0700) whatever the umask, the store `clshim run --warm` makes only to
//! hold warm.log included.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn native_client() -> PathBuf {
    build_c("native_client", &[])
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `script` under `sh -c`, with none of the test process's clshim variables.
fn sh(script: &str) -> std::process::Output {
    let mut c = std::process::Command::new("sh");
    c.args(["-c", script]);
    run(c, false)
}

/// Waits (a minute at most) for the warm step `clshim run --warm` started in the
/// background to write its summary line in `store/warm.log`.
fn wait_for_warm_log(store: &Path) -> String {
    let until = Instant::now() + Duration::from_secs(60);
    let log = store.join("warm.log");
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(" evicted") {
            return text;
        }
        assert!(Instant::now() < until, "no warm step: {text:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A store made only to hold warm.log (`clshim run --warm` of a command that leaves no
/// request) is 0700 with each folder made for it, and so is a store the library makes
/// for a request with its folders, whatever the umask: a umask can take the owner's bits
/// from the mode a folder is made with, and under `umask 0277` both were made 0500 (a
/// store its owner cannot write) before they were set to 0700 after being made.
#[test]
fn every_folder_made_for_the_store_is_0700_whatever_the_umask() {
    let d = scratch("store-umask");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_clshim"));
    let lib = shim_path();
    for umask in ["022", "002", "0277"] {
        let store = d.path(&format!("u{umask}/new/store"));
        let out = sh(&format!(
            "umask {umask}; exec {} run --lib {} --warm --native-store {} -- true",
            s(&exe),
            s(&lib),
            s(&store)
        ));
        assert!(out.status.success(), "{umask}: {}", stderr(&out));
        let log = wait_for_warm_log(&store);
        assert!(!log.contains("writable"), "{umask}: {log}");
        for dir in [&store, &d.path(&format!("u{umask}/new"))] {
            assert_eq!(
                format!("{:04o}", mode(dir)),
                "0700",
                "umask {umask}: {}",
                dir.display()
            );
        }
        assert_eq!(mode(&d.path(&format!("u{umask}"))) & 0o700, 0o700);
    }
    // The library's: a `substitute` run that leaves a request makes the store, its
    // parents and `requests/`.
    let bin = native_client();
    let store = d.path("lib/new/store");
    let out = sh(&format!(
        "umask 0277; CLSHIM_BINARIES=substitute CLSHIM_WARM=1 CLSHIM_NATIVE_STORE={} \
         POCL_CACHE_DIR={} LD_PRELOAD={} exec {} --save={}",
        s(&store),
        s(&d.path("kc")),
        s(&lib),
        s(&bin),
        s(&d.path("c.bin"))
    ));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(requests(&store).len(), 1, "{}", stderr(&out));
    for dir in [d.path("lib/new"), store.clone(), store.join("requests")] {
        assert_eq!(format!("{:04o}", mode(&dir)), "0700", "{}", dir.display());
    }
}
