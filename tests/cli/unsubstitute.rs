//! `clshim unsubstitute`: the way back from `substitute`, on real pocl. A cache filled
//! under `substitute` holds clshim binaries; without clshim pocl refuses them with
//! `CL_INVALID_BINARY`, and an application with no fallback then fails on every run (the
//! strict C client here, tests/c/strict_cache.c, and hashcat), while pyopencl 2023.1
//! warns and builds from source on every run. The command must list exactly the files
//! holding clshim binaries, remove them only with `--remove`, and after that the
//! application runs without clshim as if its cache were cold. A hostile tree (links out,
//! a FIFO, an unreadable file, a lookalike) must neither be followed nor removed.
use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `program args` under `clshim run --binaries substitute` when `shim`, with the
/// native store `dir/store`, else bare; never with the test process's clshim variables.
fn run_app(cmd: Command, shim: bool, dir: &Path) -> Output {
    run_app_said(cmd, shim, false, dir)
}

/// As [`run_app`], with clshim's exit line when `summary`.
fn run_app_said(mut cmd: Command, shim: bool, summary: bool, dir: &Path) -> Output {
    if std::env::var_os("OCL_ICD_VENDORS").is_none() && Path::new("/etc/OpenCL/vendors").is_dir() {
        cmd.env("OCL_ICD_VENDORS", "/etc/OpenCL/vendors");
    }
    if !shim {
        return run(cmd, false);
    }
    shim_path(); // a fresh libclshim.so beside the clshim executable
    let mut c = clshim();
    let said = if summary { "--summary" } else { "--no-summary" };
    // What clshim run keeps stays with the test's other caches, not in the store of $HOME.
    c.args(["run", "--binaries", "substitute", said, "--native-store"])
        .arg(dir.join("store"))
        .arg("--")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    run(c, false)
}

fn unsubstitute(args: &[&str]) -> Output {
    clshim_out(&[&["unsubstitute"], args].concat(), &[])
}

/// The paths `clshim unsubstitute` printed with `kind` (`is`, `contains`, `lookalike`).
fn listed(o: &Output, kind: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = stdout(o)
        .lines()
        .filter_map(|l| l.strip_prefix(kind))
        .filter(|rest| rest.starts_with(' '))
        .map(|rest| {
            let rest = rest.trim_start();
            PathBuf::from(rest.split("  (").next().unwrap())
        })
        .collect();
    v.sort();
    v
}

/// Every regular file under `dir` (links not followed).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.extend(files_under(&e.path()));
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn holds_magic(p: &Path) -> bool {
    contains_bytes(&std::fs::read(p).unwrap(), CLSHIM_MAGIC)
}

/// A version-1 clshim binary carrying `source`, as src/container.rs writes it.
fn clshim_binary(source: &[u8]) -> Vec<u8> {
    let mut b = CLSHIM_MAGIC.to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&7u64.to_le_bytes());
    b.extend_from_slice(&(source.len() as u64).to_le_bytes());
    b.extend_from_slice(source);
    let sum = fnv1a64_u64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    b
}

/// pyopencl 2023.1's cache filled under `substitute`: without clshim pyopencl warns
/// "compiler caching failed" and builds from source on every run, never mending its
/// cache. The command lists each entry's `binary`, `--remove` takes the entries away
/// (pyopencl would warn about an entry without its binary), and the next run without
/// clshim builds from source silently and stores pocl's own binaries.
#[test]
fn pyopencl_cache_filled_under_substitute() {
    if !needs(&[PYOPENCL_OLD]) {
        return;
    }
    let dir = scratch("unsub-pyopencl");
    let xdg = dir.join("xdg");
    let cache = xdg.join("pyopencl");
    let py = |shim: bool| {
        let mut c = Command::new(venv_python("old"));
        c.arg(repo_root().join("tests/python/small_kernel.py"))
            .args(["--name", "unsub", "--kernels", "2", "--statements", "3"])
            .env("POCL_CACHE_DIR", dir.join("pocl"))
            .env("XDG_CACHE_HOME", &xdg)
            .env_remove("PYOPENCL_NO_CACHE")
            .env_remove("PYOPENCL_CTX")
            .env_remove("PYOPENCL_COMPILER_OUTPUT")
            .env_remove("PYTHONWARNINGS");
        let out = run_app(c, shim, &dir);
        assert!(
            out.status.success() && stdout(&out).contains("\"ok\": true"),
            "small_kernel.py (shim {shim}): {:?}\n{}\n{}",
            out.status,
            stdout(&out),
            stderr(&out)
        );
        out
    };
    let filled = py(true);
    assert_eq!(stderr(&filled), "", "the run under clshim is silent");
    let binaries: Vec<PathBuf> = files_under(&cache)
        .into_iter()
        .filter(|p| p.file_name().unwrap() == "binary")
        .collect();
    assert_eq!(binaries.len(), 2, "one entry per kernel: {binaries:?}");
    for b in &binaries {
        assert_eq!(&std::fs::read(b).unwrap()[..8], CLSHIM_MAGIC, "{b:?}");
    }
    let all_files = files_under(&cache);
    // Without clshim, before the way back: a warning on every run, the cache untouched.
    for _ in 0..2 {
        let out = py(false);
        assert!(
            stderr(&out).contains("PyOpenCL compiler caching failed"),
            "pyopencl warns about the clshim binaries: {}",
            stderr(&out)
        );
    }
    assert_eq!(files_under(&cache), all_files);

    // Listing: exactly the binaries, nothing removed, status 0.
    let o = unsubstitute(&[s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(listed(&o, "is"), binaries, "{}", stdout(&o));
    assert!(listed(&o, "contains").is_empty() && listed(&o, "lookalike").is_empty());
    assert_eq!(files_under(&cache), all_files, "listing removes nothing");

    // Removal: the two entries (binary, info, source.cl and the folder), nothing else.
    let o = unsubstitute(&["--remove", s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(listed(&o, "is"), binaries);
    let entries: Vec<PathBuf> = binaries
        .iter()
        .map(|b| b.parent().unwrap().into())
        .collect();
    let expected: Vec<PathBuf> = all_files
        .iter()
        .filter(|f| !entries.iter().any(|e| f.starts_with(e)))
        .cloned()
        .collect();
    assert_eq!(files_under(&cache), expected);
    for e in &entries {
        assert!(!e.exists(), "entry {e:?} removed whole");
    }
    let o = unsubstitute(&[s(&cache)]);
    assert_eq!(o.status.code(), Some(1), "none left: {}", stdout(&o));

    // Without clshim: no warning, pocl's own binaries in the cache, and they load.
    let out = py(false);
    assert_eq!(stderr(&out), "", "no warning after the way back");
    let after: Vec<PathBuf> = files_under(&cache)
        .into_iter()
        .filter(|p| p.file_name().unwrap() == "binary")
        .collect();
    assert_eq!(after.len(), 2);
    for b in &after {
        assert!(!holds_magic(b), "pocl's own binary: {b:?}");
    }
    let out = py(false);
    assert_eq!(stderr(&out), "");
    assert!(
        stdout(&out).contains("\"cache_hits\": 2"),
        "{}",
        stdout(&out)
    );
}

/// A client with no fallback (tests/c/strict_cache.c): its cache filled under
/// `substitute`, it fails on every run without clshim; after `--remove` it builds from
/// source again and then loads pocl's binaries. One cache file is a raw clshim binary
/// (`is`), the other wraps one in the client's format (`contains`). The run that filled it
/// says the way back in its exit line (issue 31: a CFD code with such a cache died
/// without clshim, and nothing clshim printed said what to do).
#[test]
fn client_without_fallback_recovers() {
    let prog = build_c("strict_cache", &[]);
    let dir = scratch("unsub-strict");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let app_said = |shim: bool, summary: bool| {
        let mut c = Command::new(&prog);
        c.arg(format!("--cache={}", s(&cache)))
            .env("POCL_CACHE_DIR", dir.join("pocl"));
        run_app_said(c, shim, summary, &dir)
    };
    let app = |shim: bool| app_said(shim, false);
    let filled = app_said(true, true);
    assert!(filled.status.success(), "{}", stderr(&filled));
    assert!(
        stderr(&filled).contains(
            "; the application's binary cache now holds clshim binaries, which fail without \
             clshim (CL_INVALID_BINARY): before running without clshim, clshim unsubstitute \
             --remove DIR (the application's binary cache folder: README, Stop using clshim)"
        ),
        "{}",
        stderr(&filled)
    );
    assert_eq!(
        stdout(&filled).matches("built from source").count(),
        2,
        "{}",
        stdout(&filled)
    );
    let (raw, wrapped) = (cache.join("raw.bin"), cache.join("wrapped.cache"));
    assert_eq!(&std::fs::read(&raw).unwrap()[..8], CLSHIM_MAGIC);
    assert!(holds_magic(&wrapped));

    // Without clshim it aborts: pocl refuses the clshim binary.
    for _ in 0..2 {
        let out = app(false);
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        assert!(
            stderr(&out).contains("CL_INVALID_BINARY"),
            "{}",
            stderr(&out)
        );
    }

    let o = unsubstitute(&[s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(listed(&o, "is"), std::slice::from_ref(&raw));
    assert_eq!(listed(&o, "contains"), std::slice::from_ref(&wrapped));
    assert!(raw.exists() && wrapped.exists(), "listing removes nothing");
    let o = unsubstitute(&["--remove", s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!raw.exists() && !wrapped.exists());

    let out = app(false);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).matches("built from source").count(), 2);
    let out = app(false);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).matches("loaded from the cache").count(),
        2,
        "pocl's own binaries now: {}",
        stdout(&out)
    );
    // The kernels computed what they did under clshim.
    let results = |o: &Output| -> Vec<String> {
        stdout(o)
            .lines()
            .filter(|l| l.contains("sum="))
            .map(String::from)
            .collect()
    };
    assert_eq!(results(&out), results(&filled));
    assert_eq!(unsubstitute(&[s(&cache)]).status.code(), Some(1));
}

/// Runs `clshim unsubstitute ARGS` unable to read files it lacks permission for: as root
/// (which reads everything) without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
fn unsubstitute_unprivileged(args: &[&str]) -> Output {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return unsubstitute(args);
    }
    let mut c = Command::new("setpriv");
    c.args([
        "--bounding-set=-dac_override,-dac_read_search",
        "--inh-caps=-all",
        "--",
    ])
    .arg(env!("CARGO_BIN_EXE_clshim"))
    .arg("unsubstitute")
    .args(args);
    run(c, false)
}

/// A hostile cache: a link to a folder outside holding a clshim binary, a link to a
/// clshim binary, a FIFO, an unreadable clshim binary, a lookalike holding the magic with
/// no valid header. Only the two real clshim binaries inside are listed and removed; the
/// links, their targets, the FIFO, the unreadable file and the lookalike stay.
#[test]
fn hostile_tree_is_neither_followed_nor_emptied() {
    let dir = scratch("unsub-hostile");
    let (cache, outside) = (dir.join("cache"), dir.join("outside"));
    std::fs::create_dir_all(cache.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let bin = clshim_binary(b"kernel void k(global int *a) { a[0] = 1; }");
    let victim = outside.join("victim.bin");
    std::fs::write(&victim, &bin).unwrap();
    std::fs::write(cache.join("real.bin"), &bin).unwrap();
    let mut wrapped = b"APPCACHE".to_vec();
    wrapped.extend_from_slice(&(bin.len() as u64).to_le_bytes());
    wrapped.extend_from_slice(&bin);
    std::fs::write(cache.join("sub/wrapped"), &wrapped).unwrap();
    std::os::unix::fs::symlink(&outside, cache.join("link-to-dir")).unwrap();
    std::os::unix::fs::symlink(&victim, cache.join("link-to-file")).unwrap();
    let fifo = cache.join("fifo");
    let c = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: c is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let unreadable = cache.join("unreadable.bin");
    std::fs::write(&unreadable, &bin).unwrap();
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o000)).unwrap();
    let lookalike = cache.join("lookalike");
    let mut fake = b"notes: CLSHIMB\0".to_vec();
    fake.extend_from_slice(&[0xff; 40]);
    std::fs::write(&lookalike, &fake).unwrap();
    // A checksummed envelope cut short: also a lookalike.
    let truncated = cache.join("truncated.bin");
    std::fs::write(&truncated, &bin[..bin.len() - 3]).unwrap();

    let check = |o: &Output| {
        let e = stderr(o);
        assert_eq!(listed(o, "is"), [cache.join("real.bin")], "{}", stdout(o));
        assert_eq!(listed(o, "contains"), [cache.join("sub/wrapped")]);
        assert_eq!(
            listed(o, "lookalike"),
            [lookalike.clone(), truncated.clone()]
        );
        for (p, why) in [
            (cache.join("link-to-dir"), "symbolic link, not followed"),
            (cache.join("link-to-file"), "symbolic link, not followed"),
            (fifo.clone(), "not a regular file, not opened"),
            (unreadable.clone(), "cannot read: Permission denied"),
        ] {
            assert!(
                e.contains(&format!("{}: skipped: ", p.display())) && e.contains(why),
                "{p:?}: {why}\n{e}"
            );
        }
        assert!(!stdout(o).contains("outside"), "{}", stdout(o));
    };
    let o = unsubstitute_unprivileged(&[s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check(&o);
    let o = unsubstitute_unprivileged(&["--remove", s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check(&o);
    assert!(!cache.join("real.bin").exists() && !cache.join("sub/wrapped").exists());
    for p in [
        cache.join("link-to-dir"),
        cache.join("link-to-file"),
        fifo.clone(),
        unreadable.clone(),
        lookalike.clone(),
        truncated.clone(),
    ] {
        assert!(p.symlink_metadata().is_ok(), "{p:?} kept");
    }
    assert_eq!(
        std::fs::read(&victim).unwrap(),
        bin,
        "the link's target untouched"
    );

    // A DIR that is itself a link is refused, and its target left alone.
    let o = unsubstitute(&["--remove", s(&cache.join("link-to-dir"))]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    assert!(victim.exists());
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// Only application cache entries are removed: a file that is a clshim binary, or one in a
/// layout clshim knows (a length then the binary, as Boost.Compute writes; clFFT's header,
/// binary and signature). A tar backup of the cache and a log that hold a clshim binary
/// are listed as `inside` and kept; a cache file with another hard link (outside DIR) is
/// listed with its link count and kept, since removing one name would leave the binary
/// under the other (exit status 3: not everything listed was removed).
#[test]
fn only_cache_entries_are_removed_and_hard_links_are_named() {
    let dir = scratch("unsub-entries");
    let (cache, outside) = (dir.join("cache"), dir.join("outside"));
    std::fs::create_dir_all(cache.join("boost/ab")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let bin = clshim_binary(b"kernel void k(global int *a) { a[0] = 3; }");
    std::fs::write(cache.join("raw.bin"), &bin).unwrap();
    let mut boost = (bin.len() as u64).to_le_bytes().to_vec();
    boost.extend_from_slice(&bin);
    std::fs::write(cache.join("boost/ab/kernel"), &boost).unwrap();
    let sig = b"\x01\0\0\0\x08\0\0\0\0\0\0\0variant1";
    let mut clfft = b"CLB\0\0\0\0\0".to_vec();
    for n in [40 + bin.len() + sig.len(), 40, bin.len(), sig.len()] {
        clfft.extend_from_slice(&(n as u64).to_le_bytes());
    }
    clfft.extend_from_slice(&bin);
    clfft.extend_from_slice(sig);
    std::fs::write(cache.join("clfft.db"), &clfft).unwrap();
    // A backup of the cache, made by tar, and a log that printed a binary.
    std::fs::write(outside.join("entry.bin"), &bin).unwrap();
    let tar = Command::new("tar")
        .arg("cf")
        .arg(cache.join("backup.tar"))
        .arg("-C")
        .arg(&outside)
        .arg("entry.bin")
        .status()
        .unwrap();
    assert!(tar.success());
    let mut log = b"build log\nbinary follows:\n".to_vec();
    log.extend_from_slice(&bin);
    log.extend_from_slice(b"\nend of log\n");
    std::fs::write(cache.join("run.log"), &log).unwrap();
    // One cache file, two names: the other outside DIR.
    std::fs::hard_link(outside.join("entry.bin"), cache.join("linked.bin")).unwrap();

    let o = unsubstitute(&[s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        listed(&o, "is"),
        [cache.join("linked.bin"), cache.join("raw.bin")],
        "{}",
        stdout(&o)
    );
    assert_eq!(
        listed(&o, "contains"),
        [cache.join("boost/ab/kernel"), cache.join("clfft.db")]
    );
    assert_eq!(
        listed(&o, "inside"),
        [cache.join("backup.tar"), cache.join("run.log")]
    );
    assert!(
        stdout(&o).contains("linked.bin  (1 other hard link: removing this name would leave"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("2 other files hold clshim binaries inside other data"));

    let o = unsubstitute(&["--remove", s(&cache)]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("linked.bin: not removed: the file has 1 other hard link"),
        "{}",
        stderr(&o)
    );
    for gone in ["raw.bin", "boost/ab/kernel", "clfft.db"] {
        assert!(!cache.join(gone).exists(), "{gone} removed");
    }
    for kept in ["backup.tar", "run.log", "linked.bin"] {
        assert!(cache.join(kept).exists(), "{kept} kept");
    }
    assert_eq!(std::fs::read(outside.join("entry.bin")).unwrap(), bin);
}

/// A directory on another filesystem under DIR is reported and not entered unless
/// `--cross-filesystems` is given. Uses /dev and the tmpfs mounted on /dev/shm (only
/// listing, never `--remove`); where /dev/shm is not a mount of its own, says so and
/// checks nothing.
#[test]
fn other_filesystems_only_when_asked() {
    use std::os::unix::fs::MetadataExt;
    let (dev, shm) = (Path::new("/dev"), Path::new("/dev/shm"));
    match (dev.symlink_metadata(), shm.symlink_metadata()) {
        (Ok(d), Ok(s)) if s.is_dir() && d.dev() != s.dev() => {}
        _ => {
            eprintln!("/dev/shm is not a filesystem of its own here: nothing to check");
            return;
        }
    }
    let mine = shm.join(format!("clshim-unsubstitute-{}", std::process::id()));
    std::fs::create_dir_all(&mine).unwrap();
    let file = mine.join("cached.bin");
    std::fs::write(
        &file,
        clshim_binary(b"kernel void k(global int *a) { a[0] = 2; }"),
    )
    .unwrap();
    let o = unsubstitute(&["/dev"]);
    let inside = listed(&o, "is").contains(&file);
    let reported = stderr(&o).contains("/dev/shm: skipped: on another filesystem");
    let o = unsubstitute(&["--cross-filesystems", "/dev"]);
    let crossed = listed(&o, "is").contains(&file);
    std::fs::remove_dir_all(&mine).unwrap();
    assert!(!inside && reported, "not entered by default");
    assert!(crossed, "entered with --cross-filesystems: {}", stdout(&o));
}

/// hashcat 6.2.6 has no fallback: with its kernel cache filled under `substitute` it stops
/// with `CL_INVALID_BINARY` on every run without clshim (exit status 255); after
/// `clshim unsubstitute --remove` on its cache it builds from source and cracks the hash.
/// The slowest test here: pocl compiles hashcat's kernels for about 20 s on a cold cache.
#[test]
fn hashcat_stops_until_its_cache_is_cleared() {
    if !needs(&[HASHCAT]) {
        return;
    }
    let hashcat = Path::new(HASHCAT_BIN);
    let dir = scratch("unsub-hashcat");
    let home = dir.join("home");
    let cache = home.join("cache/hashcat");
    let run_hashcat = |shim: bool| {
        let mut c = Command::new(hashcat);
        c.args(HASHCAT_ARGS)
            .envs(hashcat_env(&home, &dir.join("pocl")));
        run_app(c, shim, &dir)
    };
    let cracked = HASHCAT_CRACKED;
    let filled = run_hashcat(true);
    assert_eq!(stdout(&filled), cracked, "{}", stderr(&filled));
    let kernels = files_under(&cache);
    assert_eq!(kernels.len(), 3, "{kernels:?}");

    let refused = run_hashcat(false);
    assert_eq!(refused.status.code(), Some(255), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains("clCreateProgramWithBinary(): CL_INVALID_BINARY"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        files_under(&cache),
        kernels,
        "hashcat leaves its cache as it is"
    );

    let o = unsubstitute(&["--remove", s(&cache)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(listed(&o, "is"), kernels);
    assert!(files_under(&cache).is_empty());

    let mended = run_hashcat(false);
    assert!(mended.status.success(), "{}", stderr(&mended));
    assert_eq!(stdout(&mended), cracked);
    for k in files_under(&cache) {
        assert!(!holds_magic(&k), "pocl's own binary: {k:?}");
    }
}
