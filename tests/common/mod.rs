//! Shared helpers for the integration tests: where the built shim and tools are, how to
//! compile the C test programs against the system OpenCL headers, how to run a command
//! with or without the shim, and how to read the trace files it writes.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile>/ of the running test binary (which lives in target/<profile>/deps/).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// The freshly built `libclshim.so`. `cargo test` builds the library for the test
/// harness but does not refresh the cdylib in target/<profile>/, so the first call builds
/// it (a no-op when it is current): a test must never run against a stale shim.
pub fn shim_path() -> PathBuf {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(repo_root())
            .args(["build", "--lib", "--quiet"]);
        if target_dir()
            .file_name()
            .map(|n| n == "release")
            .unwrap_or(false)
        {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo build --lib");
        assert!(status.success(), "cargo build --lib failed");
    });
    let p = target_dir().join("libclshim.so");
    assert!(p.exists(), "{} is missing after cargo build", p.display());
    p
}

/// A new empty scratch directory under target/test-scratch, unique per call.
pub fn scratch(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let d = target_dir()
        .join("test-scratch")
        .join(format!("{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Compiles tests/c/<name>.c (plus `extra` C sources) into target/<profile>/ctests/<name>,
/// linking the system OpenCL loader and pthreads. Recompiles only when the source is newer.
/// Safe to call from parallel test threads: one compiles, the others wait for it.
pub fn build_c(name: &str, extra_args: &[&str]) -> PathBuf {
    let _guard = CC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    build_c_unlocked(name, extra_args)
}

/// `build_c` for a caller that already holds CC_LOCK.
fn build_c_unlocked(name: &str, extra_args: &[&str]) -> PathBuf {
    let src = repo_root().join("tests/c").join(format!("{name}.c"));
    let out_dir = target_dir().join("ctests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(name);
    let fresh = match (std::fs::metadata(&src), std::fs::metadata(&out)) {
        (Ok(s), Ok(o)) => o.modified().unwrap() >= s.modified().unwrap(),
        _ => false,
    };
    if !fresh {
        // Compile to a private name and rename, so parallel tests never run a half-written file.
        let tmp = out_dir.join(format!("{name}.tmp{}", std::process::id()));
        let status = Command::new("cc")
            .args(["-O1", "-g", "-Wall", "-DCL_TARGET_OPENCL_VERSION=300"])
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
            .args(extra_args)
            .args(["-lOpenCL", "-lpthread", "-ldl"])
            .status()
            .expect("run cc");
        assert!(status.success(), "compiling {} failed", src.display());
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

/// Runs `cmd` with every CLSHIM_* variable of the test process removed, so the caller's
/// environment never leaks into a test. `preload` adds LD_PRELOAD=<shim>.
pub fn run(mut cmd: Command, preload: bool) -> Output {
    for (k, _) in std::env::vars() {
        if k.starts_with("CLSHIM_") || k == "LD_PRELOAD" || k == "OPENCL_LAYERS" {
            cmd.env_remove(&k);
        }
    }
    if preload {
        cmd.env("LD_PRELOAD", shim_path());
    }
    cmd.output().expect("spawn test command")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every trace record in every `*.jsonl` file of `dir`, each line parsed as JSON
/// (a line that does not parse fails the test).
pub fn read_traces(dir: &Path) -> Vec<serde_json::Value> {
    let mut recs = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map(|e| e == "jsonl").unwrap_or(false))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: not JSON ({e}): {line}", f.display(), i + 1));
            recs.push(v);
        }
    }
    recs
}

/// Records of one event kind.
pub fn events<'a>(recs: &'a [serde_json::Value], event: &str) -> Vec<&'a serde_json::Value> {
    recs.iter().filter(|r| r["event"] == event).collect()
}

/// Python of one of the virtual environments that `scripts/test` creates under .venv/:
/// `current` (the newest pyopencl) or `old` (pyopencl 2023.1, which still caches on pocl).
pub fn venv_python(which: &str) -> PathBuf {
    let p = repo_root().join(".venv").join(which).join("bin/python");
    assert!(
        p.exists(),
        "{} is missing: `scripts/test` creates the Python environments",
        p.display()
    );
    p
}

/// Serialises the C compiles of one test binary: `build_c` names its temporary file after
/// the process, so two test threads must not compile the same program at once.
static CC_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `build_c` for the programs that include tests/c/cltest.h: recompiles when the header
/// is newer than the program too, and is safe to call from parallel test threads.
pub fn build_ctest(name: &str, extra_args: &[&str]) -> PathBuf {
    let _guard = CC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let header = repo_root().join("tests/c/cltest.h");
    let out = target_dir().join("ctests").join(name);
    if let (Ok(h), Ok(o)) = (std::fs::metadata(&header), std::fs::metadata(&out)) {
        if h.modified().unwrap() > o.modified().unwrap() {
            let _ = std::fs::remove_file(&out);
        }
    }
    build_c_unlocked(name, extra_args)
}

/// Compiles tests/c/<src>.c into target/<profile>/ctests/<out> with `args` (which must name
/// the libraries to link): for a program linked to something other than the OpenCL loader.
/// Recompiles when the source, cltest.h or any existing file named in `args` is newer.
pub fn build_c_custom(src: &str, out: &str, args: &[&str]) -> PathBuf {
    let _guard = CC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = repo_root().join("tests/c").join(format!("{src}.c"));
    let out_dir = target_dir().join("ctests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(out);
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut inputs = vec![src.clone(), repo_root().join("tests/c/cltest.h")];
    inputs.extend(args.iter().map(PathBuf::from).filter(|p| p.is_file()));
    let fresh = match mtime(&out) {
        Some(o) => inputs
            .iter()
            .all(|i| mtime(i).map(|t| t <= o).unwrap_or(true)),
        None => false,
    };
    if !fresh {
        let tmp = out.with_extension(format!("tmp{}", std::process::id()));
        let status = Command::new("cc")
            .args(["-O1", "-g", "-Wall", "-DCL_TARGET_OPENCL_VERSION=300"])
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
            .args(args)
            .status()
            .expect("run cc");
        assert!(status.success(), "compiling {} failed", src.display());
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

/// FNV-1a 64 of `bytes` as the trace schema writes it: `fnv1a64:<16 hex digits>`.
pub fn fnv1a64(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    format!("fnv1a64:{h:016x}")
}

/// Checks the fields every trace record must have (schema version 1), and that the first
/// record of every file is a `process` record. Returns the records.
pub fn checked_traces(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map(|e| e == "jsonl").unwrap_or(false))
        .collect();
    files.sort();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("clshim-"),
            "unexpected trace file name {name}"
        );
        let text = std::fs::read_to_string(f).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap_or("{}"))
            .unwrap_or_else(|e| panic!("{name}: first line is not JSON: {e}"));
        assert_eq!(
            first["event"], "process",
            "{name}: first record is not `process`"
        );
    }
    let recs = read_traces(dir);
    for r in &recs {
        assert_eq!(r["schema"], 1, "schema version: {r}");
        assert!(r["event"].is_string(), "event: {r}");
        assert!(r["pid"].is_u64(), "pid: {r}");
        assert!(r["rank"].is_null() || r["rank"].is_u64(), "rank: {r}");
        assert!(r["tid"].is_u64(), "tid: {r}");
        assert!(
            r["ts"].as_f64().map(|t| t > 1.5e9).unwrap_or(false),
            "ts: {r}"
        );
        assert!(
            r["seconds"].as_f64().map(|s| s >= 0.0).unwrap_or(false),
            "seconds: {r}"
        );
        if r["event"] != "process" {
            assert!(r["call"].is_string(), "call: {r}");
            assert!(r["result"].is_i64(), "result: {r}");
            assert!(r["result_name"].is_string(), "result_name: {r}");
            if r["event"] == "first_launch" {
                // One launch runs on one device.
                assert!(
                    r["device"].is_object() || r["device"].is_null(),
                    "device: {r}"
                );
            } else {
                assert!(r["devices"].is_array(), "devices: {r}");
            }
        }
    }
    recs
}

/// Checks the `sizes` of a successful `binary_query` record against what the application
/// received. README says `sizes` is null only when the call failed; the library records
/// null for a *forwarded* CL_PROGRAM_BINARIES query (it does not ask the driver for sizes
/// it was not asked for), so that one case accepts null until the two agree.
pub fn assert_query_sizes(rec: &serde_json::Value, expected: &serde_json::Value) {
    if rec["param"] == "CL_PROGRAM_BINARIES" && rec["action"] == "forward" && rec["sizes"].is_null()
    {
        return;
    }
    assert_eq!(
        &rec["sizes"], expected,
        "sizes the application received: {rec}"
    );
}

/// The fake ICD (tests/fake_icd/fake_icd.c) built as a shared library, and a directory
/// holding only its `.icd` file, for OCL_ICD_VENDORS.
pub struct FakeIcd {
    pub lib: PathBuf,
    pub vendors: PathBuf,
}

/// Builds the fake ICD once per test binary into target/<profile>/<dir>/ (recompiled when
/// its source is newer). Each test binary names its own `dir`, so two test binaries never
/// write the same `.icd` file at once.
pub fn fake_icd_in(dir: &str) -> FakeIcd {
    // Parallel tests of one binary share the process id in the temporary names below.
    let _guard = CC_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let src = repo_root().join("tests/fake_icd/fake_icd.c");
    let dir = target_dir().join(dir);
    let vendors = dir.join("vendors");
    std::fs::create_dir_all(&vendors).unwrap();
    let lib = dir.join("libfakeicd.so");
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if mtime(&lib).is_none() || mtime(&src) > mtime(&lib) {
        let tmp = dir.join(format!("libfakeicd.so.tmp{}", std::process::id()));
        let status = Command::new("cc")
            .args([
                "-shared",
                "-fPIC",
                "-O1",
                "-g",
                "-Wall",
                "-fvisibility=hidden",
            ])
            .arg("-o")
            .arg(&tmp)
            .arg(&src)
            .arg("-lpthread")
            .status()
            .expect("run cc");
        assert!(status.success(), "compiling {} failed", src.display());
        std::fs::rename(&tmp, &lib).unwrap();
    }
    let icd = vendors.join("fake.icd");
    let tmp = vendors.join(format!("fake.icd.tmp{}", std::process::id()));
    std::fs::write(&tmp, format!("{}\n", lib.display())).unwrap();
    std::fs::rename(&tmp, &icd).unwrap();
    FakeIcd { lib, vendors }
}

/// The parts of a clshim binary (layout in src/container.rs): magic "CLSHIMB\0",
/// version u32, flags u32, device fingerprint u64, source length u64, source, and an
/// FNV-1a 64 checksum of everything before it; all little-endian. Parsed independently
/// of the library, so the tests check the format, not just agreement with themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClshimBinary {
    pub version: u32,
    pub flags: u32,
    pub fingerprint: u64,
    pub source: Vec<u8>,
    pub checksum_ok: bool,
}

pub const CLSHIM_MAGIC: &[u8; 8] = b"CLSHIMB\0";
/// Bytes of a clshim binary around its source: 32 of header, 8 of checksum.
pub const CLSHIM_OVERHEAD: usize = 40;

pub fn fnv1a64_u64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Parses a well-formed clshim binary; panics (failing the test) on anything else.
pub fn parse_clshim_binary(b: &[u8]) -> ClshimBinary {
    assert!(
        b.len() >= CLSHIM_OVERHEAD,
        "too short for a clshim binary: {b:?}"
    );
    assert_eq!(&b[..8], CLSHIM_MAGIC, "magic");
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let len = u64_at(24) as usize;
    assert_eq!(len + CLSHIM_OVERHEAD, b.len(), "declared source length");
    let body = b.len() - 8;
    ClshimBinary {
        version: u32_at(8),
        flags: u32_at(12),
        fingerprint: u64_at(16),
        source: b[32..body].to_vec(),
        checksum_ok: fnv1a64_u64(&b[..body]) == u64_at(body),
    }
}

/// Recomputes the trailing checksum of a (patched) clshim binary, so that whatever was
/// patched, and not the checksum, is what a reader must reject.
pub fn reseal_clshim_binary(mut b: Vec<u8>) -> Vec<u8> {
    let body = b.len() - 8;
    let sum = fnv1a64_u64(&b[..body]);
    b[body..].copy_from_slice(&sum.to_le_bytes());
    b
}
