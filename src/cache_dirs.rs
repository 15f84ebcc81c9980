//! The compiler caches a process would use, for its `process` record: pocl's kernel cache,
//! pyopencl's binary cache and NVIDIA's CUDA cache, each derived from the environment as
//! its owner derives it, with the type of filesystem it is on. Large runs lose their
//! build time here: ranks of one node sharing one cache directory wait on each other's
//! locks, and a cache on a network filesystem is slow and may be cleared between runs.
//! Gathered only when the trace file is written (never before the first OpenCL call), by
//! reading variables and one `statfs` per directory; nothing is created.
//!
//! The derivations, read in their owners' sources (December 2026): pocl's
//! `pocl_cache_init_topdir` takes `POCL_CACHE_DIR`, else `$XDG_CACHE_HOME/pocl/kcache`,
//! else `$HOME/.cache/pocl/kcache`, else `/tmp/pocl/kcache` (`uncached` in place of
//! `kcache` with `POCL_KERNEL_CACHE=0`); pyopencl's `cache.py` takes platformdirs'
//! `user_cache_dir("pyopencl")`: `$XDG_CACHE_HOME/pyopencl`, else
//! `~/.cache/pyopencl` (on macOS `~/Library/Caches/pyopencl` unless `XDG_CACHE_HOME` is
//! set), under which it keeps one directory per Python version; NVIDIA's driver takes
//! `CUDA_CACHE_PATH`, else `~/.nv/ComputeCache`.

use crate::schema::CacheDir;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A variable's value when set and not blank.
fn value(get: &impl Fn(&str) -> Option<OsString>, name: &str) -> Option<PathBuf> {
    get(name)
        .filter(|v| !v.as_bytes().iter().all(u8::is_ascii_whitespace))
        .map(PathBuf::from)
}

/// pocl's reading of a boolean option set off.
fn off(get: &impl Fn(&str) -> Option<OsString>, name: &str) -> bool {
    get(name).is_some_and(|v| {
        matches!(
            v.to_string_lossy().trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "no" | "off"
        )
    })
}

/// The cache directories in effect for this process, with their filesystems.
pub fn current() -> Vec<CacheDir> {
    let mut dirs = derive(|n| std::env::var_os(n));
    for d in &mut dirs {
        d.fs = fs_type(Path::new(&d.path));
        d.exists = Some(Path::new(&d.path).is_dir());
    }
    dirs
}

/// The cache directories the variables `get` gives lead to (no filesystem yet).
fn derive(get: impl Fn(&str) -> Option<OsString>) -> Vec<CacheDir> {
    let entry = |cache: &str, path: PathBuf, from: Option<&str>| CacheDir {
        cache: cache.to_string(),
        path: path.to_string_lossy().into_owned(),
        from: from.map(str::to_string),
        fs: None,
        exists: None,
    };
    let home = value(&get, "HOME");
    let xdg = value(&get, "XDG_CACHE_HOME");
    let mut out = Vec::with_capacity(3);

    let leaf = if off(&get, "POCL_KERNEL_CACHE") {
        "pocl/uncached"
    } else {
        "pocl/kcache"
    };
    out.push(if let Some(p) = value(&get, "POCL_CACHE_DIR") {
        entry("pocl", p, Some("POCL_CACHE_DIR"))
    } else if let Some(x) = &xdg {
        entry("pocl", x.join(leaf), Some("XDG_CACHE_HOME"))
    } else if let Some(h) = &home {
        entry("pocl", h.join(".cache").join(leaf), Some("HOME"))
    } else {
        entry("pocl", Path::new("/tmp").join(leaf), None)
    });

    let pyopencl = match (&xdg, &home) {
        (Some(x), _) => Some((x.join("pyopencl"), "XDG_CACHE_HOME")),
        (None, Some(h)) if cfg!(target_os = "macos") => {
            Some((h.join("Library/Caches/pyopencl"), "HOME"))
        }
        (None, Some(h)) => Some((h.join(".cache/pyopencl"), "HOME")),
        (None, None) => None,
    };
    if let Some((p, from)) = pyopencl {
        out.push(entry("pyopencl", p, Some(from)));
    }

    if let Some(p) = value(&get, "CUDA_CACHE_PATH") {
        out.push(entry("cuda", p, Some("CUDA_CACHE_PATH")));
    } else if let Some(h) = &home {
        out.push(entry("cuda", h.join(".nv/ComputeCache"), Some("HOME")));
    }
    out
}

/// The binary cache of the application this process is, where clshim can tell which
/// application it is: pyopencl's (its extension module is mapped), hashcat's (the program's
/// name), clFFT's (`CLFFT_CACHE_PATH` set), for the exit line's way back from
/// `substitute`. None for any other application.
pub fn application_cache() -> Option<PathBuf> {
    let get = |n: &str| std::env::var_os(n);
    let maps = std::fs::read("/proc/self/maps").unwrap_or_default();
    let mapped = |name: &[u8]| maps.windows(name.len()).any(|w| w == name);
    if mapped(b"/pyopencl/_cl") {
        return derive(get)
            .into_iter()
            .find(|d| d.cache == "pyopencl")
            .map(|d| PathBuf::from(d.path));
    }
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    if exe
        .file_name()
        .is_some_and(|n| n.as_bytes().starts_with(b"hashcat"))
    {
        let base = value(&get, "XDG_CACHE_HOME")
            .or_else(|| value(&get, "HOME").map(|h| h.join(".cache")))?;
        return Some(base.join("hashcat/kernels"));
    }
    value(&get, "CLFFT_CACHE_PATH")
}

/// The filesystem `path` is on, or its nearest existing parent (a cache directory is
/// made at its first use).
fn fs_type(path: &Path) -> Option<String> {
    path.ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .find_map(statfs_name)
}

#[cfg(target_os = "linux")]
fn statfs_name(path: &Path) -> Option<String> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: st is plain data that statfs fills.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path and st a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between architectures
    Some(magic_name(st.f_type as u64 & 0xffff_ffff))
}

#[cfg(not(target_os = "linux"))]
fn statfs_name(path: &Path) -> Option<String> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: st is plain data that statfs fills.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path and st a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let name: Vec<u8> = st
        .f_fstypename
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Some(String::from_utf8_lossy(&name).into_owned())
}

/// Linux's `f_type` magic numbers (linux/magic.h and the filesystems' own headers) for the
/// filesystems HPC caches land on (macOS's statfs names its filesystem itself).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub fn magic_name(magic: u64) -> String {
    let name = match magic {
        0x6969 => "nfs",
        0x0bd0_0bd0 => "lustre",
        0x4750_4653 => "gpfs",
        0x1983_0326 => "beegfs",
        0xff53_4d42 => "cifs",
        0xfe53_4d42 => "smb2",
        0x00c3_6400 => "ceph",
        0xaad7_aaea => "panfs",
        0x6573_5546 => "fuse",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x2fc1_2fc1 => "zfs",
        0x794c_7630 => "overlay",
        0x7371_7368 => "squashfs",
        _ => return format!("0x{magic:x}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_filesystems_are_named() {
        assert_eq!(magic_name(0x6969), "nfs");
        assert_eq!(magic_name(0x0bd00bd0), "lustre");
        assert_eq!(magic_name(0x1234), "0x1234");
    }

    fn derived(pairs: &[(&str, &str)]) -> Vec<(String, String, Option<String>)> {
        derive(|n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| OsString::from(v))
        })
        .into_iter()
        .map(|d| (d.cache, d.path, d.from))
        .collect()
    }

    #[test]
    fn directories_are_derived_as_their_owners_derive_them() {
        let own = |c: &str, p: &str, f: Option<&str>| (c.into(), p.into(), f.map(Into::into));
        assert_eq!(
            derived(&[("HOME", "/h")]),
            [
                own("pocl", "/h/.cache/pocl/kcache", Some("HOME")),
                own("pyopencl", "/h/.cache/pyopencl", Some("HOME")),
                own("cuda", "/h/.nv/ComputeCache", Some("HOME")),
            ]
        );
        assert_eq!(
            derived(&[
                ("HOME", "/h"),
                ("XDG_CACHE_HOME", "/x"),
                ("POCL_KERNEL_CACHE", "0"),
                ("CUDA_CACHE_PATH", "/c"),
            ]),
            [
                own("pocl", "/x/pocl/uncached", Some("XDG_CACHE_HOME")),
                own("pyopencl", "/x/pyopencl", Some("XDG_CACHE_HOME")),
                own("cuda", "/c", Some("CUDA_CACHE_PATH")),
            ]
        );
        assert_eq!(
            derived(&[("POCL_CACHE_DIR", "/p"), ("XDG_CACHE_HOME", " ")]),
            [own("pocl", "/p", Some("POCL_CACHE_DIR"))]
        );
        assert_eq!(derived(&[]), [own("pocl", "/tmp/pocl/kcache", None)]);
    }

    #[test]
    fn this_machine_has_a_pocl_cache_on_a_named_filesystem() {
        let dirs = current();
        let pocl = dirs.iter().find(|d| d.cache == "pocl").unwrap();
        assert!(pocl.fs.is_some(), "{pocl:?}");
    }
}
