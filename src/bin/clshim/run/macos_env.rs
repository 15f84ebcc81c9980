//! The macOS parts of `clshim run`: which variables put the library in front of OpenCL
//! there, and the warning for commands whose `DYLD_*` variables macOS will strip.
//!
//! macOS has two routes (LD_PRELOAD.md). The layer route (`OPENCL_LAYERS`) reaches every
//! application that uses a layer-capable loader, such as conda-forge's Khronos loader with
//! pocl and Apple's wrapper ICD behind it, and System Integrity Protection leaves it alone.
//! The interpose route (`DYLD_INSERT_LIBRARIES`) reaches applications that link
//! `OpenCL.framework` directly (PyPI's pyopencl wheels). `clshim run` sets both by default (a call
//! that arrives through both is recorded once; `--mode` picks one, in `run.rs`). It never sets
//! `DYLD_FORCE_FLAT_NAMESPACE`: clshim's interposition is two-level, and a flat namespace
//! would bind every image's `cl*` to whichever of the framework, the loader or pocl came
//! first. SIP strips `DYLD_*` when a protected binary starts (anything under /usr/bin,
//! /bin, /sbin, /usr/sbin, /usr/libexec, /System), which includes `#!/usr/bin/env`
//! scripts and `/bin/sh`; `clshim run` then warns, since only the layer route is left.
//! The logic is plain functions so the Linux test suite checks it too.
#![cfg_attr(not(target_os = "macos"), allow(dead_code))]

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Directories whose binaries SIP protects (dyld drops `DYLD_*` when one of them runs).
const PROTECTED: &[&str] = &[
    "/usr/bin/",
    "/bin/",
    "/sbin/",
    "/usr/sbin/",
    "/usr/libexec/",
    "/System/",
];

fn is_protected(path: &Path) -> bool {
    let s = path.to_string_lossy();
    PROTECTED.iter().any(|d| s.starts_with(d))
}

/// The command's file: as given when it names a path, else the first match on `path_var`.
fn resolve(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return Some(p.to_path_buf());
    }
    std::env::split_paths(path_var?)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
}

/// The `#!` interpreter of a script, if the file is one.
fn interpreter(file: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let text = String::from_utf8_lossy(line);
    text.split_whitespace().next().map(PathBuf::from)
}

/// The warning for a command whose `DYLD_*` variables macOS will strip, if it is one.
pub fn sip_warning(program: &OsStr, path_var: Option<&OsStr>) -> Option<String> {
    let file = resolve(program, path_var)?;
    let real = file.canonicalize().unwrap_or_else(|_| file.clone());
    let tail = "so only the layer route (OPENCL_LAYERS, through a layer-capable OpenCL \
                loader such as conda-forge's) reaches its OpenCL calls; run an unprotected \
                interpreter or binary directly (e.g. clshim run -- python3 script.py with a \
                Homebrew, conda or venv python)";
    if is_protected(&file) || is_protected(&real) {
        return Some(format!(
            "clshim: warning: {} is protected by System Integrity Protection: macOS strips \
             DYLD_INSERT_LIBRARIES when it starts, {tail}",
            file.display()
        ));
    }
    let interp = interpreter(&real)?;
    if is_protected(&interp) {
        return Some(format!(
            "clshim: warning: {} is a script run by {}, which System Integrity Protection \
             protects: macOS strips DYLD_INSERT_LIBRARIES before the script runs, {tail}",
            file.display(),
            interp.display()
        ));
    }
    None
}

/// Prints the SIP warning for `program`, if any (the hook `clshim run` calls on macOS).
pub fn warn_if_protected(program: &OsStr) {
    if let Some(w) = sip_warning(program, std::env::var_os("PATH").as_deref()) {
        eprintln!("{w}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_for_protected_binaries_and_env_scripts_only() {
        let dir = std::env::temp_dir().join(format!("clshim-macos-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let env_script = dir.join("tool");
        std::fs::write(&env_script, "#!/usr/bin/env python3\nprint(1)\n").unwrap();
        let own_interp = dir.join("tool2");
        std::fs::write(&own_interp, "#!/opt/homebrew/bin/python3\nprint(1)\n").unwrap();
        let binary = dir.join("app");
        std::fs::write(&binary, b"\x7fELF....").unwrap();

        for protected in ["/usr/bin/python3", "/bin/sh", "/System/Library/x"] {
            let w = sip_warning(OsStr::new(protected), None).expect(protected);
            assert!(
                w.contains("System Integrity Protection") && w.contains(protected),
                "{w}"
            );
        }
        let w = sip_warning(env_script.as_os_str(), None).expect("env script");
        assert!(w.contains("/usr/bin/env"), "{w}");
        // Found through PATH too.
        let w = sip_warning(OsStr::new("tool"), Some(dir.as_os_str())).expect("via PATH");
        assert!(w.contains("script"), "{w}");
        assert_eq!(sip_warning(own_interp.as_os_str(), None), None);
        assert_eq!(sip_warning(binary.as_os_str(), None), None);
        assert_eq!(
            sip_warning(OsStr::new("no-such-tool"), Some(dir.as_os_str())),
            None
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
