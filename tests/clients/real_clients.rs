//! OpenCL software not written here, under `clshim run --binaries substitute` on pocl's
//! CPU device: four clients that cache program binaries, each in its own way.
//!
//! - hashcat (Debian `hashcat`): `dlopen`s the loader, builds every kernel with
//!   `clCompileProgram` + `clLinkProgram`, and keeps the linked programs' binaries in an
//!   on-disk kernel cache (`$XDG_CACHE_HOME/hashcat/kernels`).
//! - CLBlast (Debian `libclblast-dev`, driven by tests/c/clblast_sgemm.c): links the
//!   loader, builds from source, and keeps the binary in an in-memory cache that a second
//!   context of the same process loads from.
//! - clFFT (Debian `libclfft-dev`, driven by tests/c/clfft_forward.c): links the loader,
//!   builds generated source, and keeps the binary in an on-disk cache (`CLFFT_CACHE_PATH`).
//! - Boost.Compute (Debian `libboost-dev`, header-only, driven by
//!   tests/c/boost_compute_transform.cpp): links the loader, builds generated source, and
//!   with `BOOST_COMPUTE_USE_OFFLINE_CACHE` keeps the binary in `$HOME/.boost_compute`.
//!
//! Each runs twice under clshim, on cold caches then on the same (now warm) caches, with
//! every cache (the client's, pocl's `POCL_CACHE_DIR` and clshim's native store) in a
//! scratch folder. Each run's
//! output and standard error must equal those of a run without clshim, and the records must
//! show exactly what the client did and what clshim did about it. The benchmark of the same
//! clients is bench/real_clients.sh.
use crate::common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `program args` with `env`, under `clshim run --binaries substitute --no-summary`
/// tracing into `trace` when given, with the native store in `trace`'s folder, else
/// without clshim. The test's own CLSHIM_*, LD_PRELOAD and OPENCL_LAYERS never reach the
/// program. Fails the test if it fails.
fn run_client(
    program: &Path,
    args: &[&str],
    env: &[(&str, PathBuf)],
    trace: Option<&Path>,
) -> Output {
    let out = run_policy(program, args, env, trace, "substitute");
    assert!(
        out.status.success(),
        "{} {args:?} (clshim: {}) failed: {:?}\nstdout:\n{}\nstderr:\n{}",
        program.display(),
        trace.is_some(),
        out.status,
        stdout(&out),
        stderr(&out)
    );
    out
}

/// `run_client` with `--binaries POLICY`, whatever the program's exit status.
fn run_policy(
    program: &Path,
    args: &[&str],
    env: &[(&str, PathBuf)],
    trace: Option<&Path>,
    policy: &str,
) -> Output {
    let mut cmd = match trace {
        Some(t) => {
            shim_path(); // a fresh target/<profile>/libclshim.so beside the clshim executable
            let mut c = Command::new(env!("CARGO_BIN_EXE_clshim"));
            // The store of $HOME would hold what earlier runs kept, which the cold run would
            // take instead of compiling (and so without the compiler's warnings).
            let store = t.parent().unwrap().join("store");
            c.args(["run", "--binaries", policy, "--no-summary", "--trace-dir"])
                .arg(t)
                .arg("--native-store")
                .arg(store)
                .arg("--")
                .arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    if std::env::var_os("OCL_ICD_VENDORS").is_none() && Path::new("/etc/OpenCL/vendors").is_dir() {
        cmd.env("OCL_ICD_VENDORS", "/etc/OpenCL/vendors");
    }
    run(cmd, false) // removes CLSHIM_*, LD_PRELOAD, OPENCL_LAYERS
}

/// Asserts that a run under clshim printed exactly what the run without clshim printed,
/// on both streams: same results, and no warning from clshim or from the client.
fn assert_same_output(label: &str, with: &Output, without: &Output) {
    assert_eq!(
        stdout(with),
        stdout(without),
        "{label}: stdout differs from the run without clshim"
    );
    assert_eq!(
        stderr(with),
        stderr(without),
        "{label}: stderr differs from the run without clshim"
    );
    assert!(
        !stderr(with).contains("clshim"),
        "{label}: clshim wrote to stderr: {}",
        stderr(with)
    );
}

/// One line per record (the process record and first launches aside), in file order:
/// event, call, query parameter, policy action, source origin, result. A single-threaded
/// client's records come in the order its calls completed, so a whole run compares as one
/// list; a first launch is written when its command completes, so its place in the file
/// depends on the driver's timing (`records` checks each of them).
fn brief(recs: &[Value]) -> Vec<String> {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_string();
    recs.iter()
        .filter(|r| !is_process_record(r) && r["event"] != "first_launch")
        .map(|r| {
            format!(
                "{} {} {} {} {} {}",
                s(&r["event"]),
                s(&r["call"]),
                s(&r["param"]),
                s(&r["action"]),
                s(&r["source"]["origin"]),
                s(&r["result_name"])
            )
        })
        .collect()
}

/// The records of one run, with the checks every record of these runs must pass: one
/// process, policy substitute, the door the first call came through, and every device one
/// `CLSHIM_DEVICES=pocl-cpu` selects (the tests run on pocl's CPU device).
fn records(trace: &Path, door: &str) -> Vec<Value> {
    let recs = checked_traces(trace);
    let procs = events(&recs, "process");
    assert_eq!(procs.len(), 1, "one process recorded: {recs:#?}");
    assert_eq!(procs[0]["policy"], "substitute");
    assert_eq!(
        procs[0]["mode"], door,
        "the door the first call came through"
    );
    for r in events(&recs, "first_launch") {
        let d = &r["device"];
        assert!(
            d["matched"] == true && d["type"] == "CPU" && r["result_name"] == "CL_SUCCESS",
            "a kernel's first launch on the selected pocl CPU device: {r}"
        );
    }
    for r in recs
        .iter()
        .filter(|r| !is_process_record(r) && r["event"] != "first_launch")
    {
        let devs = r["devices"].as_array().unwrap();
        assert!(
            !devs.is_empty()
                && devs
                    .iter()
                    .all(|d| d["matched"] == true && d["type"] == "CPU"),
            "a pocl CPU device, selected: {r}"
        );
    }
    recs
}

/// The one file a client's binary cache holds under `dir` is a clshim binary.
fn assert_one_cached_clshim_binary(dir: &Path, what: &str) {
    let cached = files_under(dir);
    assert_eq!(cached.len(), 1, "{what}: {cached:?}");
    assert!(
        contains_bytes(&std::fs::read(&cached[0]).unwrap(), b"CLSHIMB\0"),
        "{} holds a clshim binary",
        cached[0].display()
    );
}

/// A warm run's first load carries the cold run's source (`cold_build`), and the program it
/// made is the one built, with the cold build's kernels.
fn assert_warm_build_of_cold_source(warm: &[Value], cold_build: &Value) {
    let load = events(warm, "binary_load")[0];
    assert_eq!(
        load["source"]["hash"], cold_build["source"]["hash"],
        "the cold run's source"
    );
    let wbuild = events(warm, "build")[0];
    assert_eq!(wbuild["program"], load["program"]);
    assert_eq!(wbuild["kernels"], cold_build["kernels"]);
}

fn line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// hashcat cracks the MD5 of "123" by brute force over three digits (`-a 3 '?d?d?d'`) on
/// pocl's CPU device. It `dlopen`s libOpenCL.so.1, so only the loader-layer door of
/// `clshim run`'s default sees it; it compiles and links three programs (its shared
/// kernels, the MD5 kernels, the mask generator) and writes each linked program's binary
/// to its kernel cache, which the warm run loads with `clCreateProgramWithBinary`.
///
/// Under `substitute` each linked program's binary queries are answered with its recipe
/// (its compiled input's source and options, the link options), so pocl never compiles a
/// kernel a second time; hashcat's cache holds those clshim binaries, and the warm run's
/// loads make each program again (compile and link, served by pocl's kernel cache), after
/// which hashcat's `clBuildProgram` on it is answered by clshim.
///
/// The slowest test here: pocl compiles hashcat's kernels for about 20 s on a cold cache.
#[test]
fn hashcat_compile_link_dlopen_disk_cache() {
    if !needs(&[HASHCAT]) {
        return;
    }
    let dir = scratch("hashcat");
    let hashcat = Path::new(HASHCAT_BIN);
    let args = HASHCAT_ARGS;
    let env_for = |home: &Path| hashcat_env(home, &dir.join("pocl"));
    let shim_env = env_for(&dir.join("home-shim"));
    let (t_cold, t_warm) = (dir.join("trace-cold"), dir.join("trace-warm"));
    let cold = run_client(hashcat, &args, &shim_env, Some(&t_cold));
    let warm = run_client(hashcat, &args, &shim_env, Some(&t_warm));
    // Runs without clshim, cold then warm on hashcat's cache. They share pocl's kernel
    // cache with the runs above (a second cold pocl compile would double the test's time);
    // that changes how long pocl takes, not what hashcat prints, which is nothing on stderr.
    let plain_env = env_for(&dir.join("home-plain"));
    let plain_cold = run_client(hashcat, &args, &plain_env, None);
    let plain_warm = run_client(hashcat, &args, &plain_env, None);
    assert_eq!(stdout(&plain_cold), HASHCAT_CRACKED, "hashcat cracked it");
    assert_eq!(
        stderr(&plain_cold),
        "",
        "hashcat --quiet prints nothing on stderr"
    );
    assert_same_output("cold", &cold, &plain_cold);
    assert_same_output("warm", &warm, &plain_warm);

    // Cold: three compile + link + SIZES + BINARIES rounds, every query substituted.
    let recs = records(&t_cold, "layer");
    let round = [
        "compile clCompileProgram - - source CL_SUCCESS",
        "link clLinkProgram - - - CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARY_SIZES substitute - CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARIES substitute - CL_SUCCESS",
    ];
    let expected: Vec<String> = round.iter().cycle().take(12).map(|s| line(s)).collect();
    assert_eq!(brief(&recs), expected, "cold run: {recs:#?}");
    // The report names the three linked programs by their kernels, their compiles in
    // their rows; nothing is an unknown program.
    let o = report(&["--json", s(&t_cold)]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("report JSON");
    let progs = v["programs"].as_array().unwrap();
    assert_eq!(progs.len(), 3, "{progs:#?}");
    for p in progs {
        assert!(!p["kernels"].as_array().unwrap().is_empty(), "{p}");
        assert_eq!(
            (p["compiles"].as_u64(), p["links"].as_u64()),
            (Some(1), Some(1)),
            "{p}"
        );
        assert_eq!(
            p["linked_from"],
            serde_json::json!(["link of 1 compiled"]),
            "{p}"
        );
    }
    let compiles = events(&recs, "compile");
    let links = events(&recs, "link");
    let queries = events(&recs, "binary_query");
    for (i, (c, l)) in compiles.iter().zip(&links).enumerate() {
        assert_eq!(
            l["inputs"],
            serde_json::json!([c["program"]]),
            "link {i} takes compile {i}"
        );
        assert!(
            !l["kernels"].as_array().unwrap().is_empty(),
            "link {i} has kernels: {l}"
        );
        assert_eq!(
            queries[2 * i]["program"],
            l["program"],
            "queries of the linked program"
        );
        assert_eq!(queries[2 * i + 1]["program"], l["program"]);
        let size = &queries[2 * i]["sizes"][0];
        assert!(
            size.as_u64().unwrap_or(0) > 0,
            "a clshim binary's size: {}",
            queries[2 * i]
        );
    }
    // hashcat's cache holds clshim binaries (recipes of linked programs), one file per
    // linked program.
    let cached = files_under(&dir.join("home-shim/cache/hashcat/kernels"));
    assert_eq!(cached.len(), 3, "hashcat's kernel cache: {cached:?}");
    for f in &cached {
        let b = std::fs::read(f).unwrap();
        let c = parse_clshim_binary(&b);
        assert_eq!((c.version, c.kind), (3, 4), "a linked recipe: {f:?}");
    }

    // Warm: each program made again from its recipe and "built" (answered by clshim).
    let recs = records(&t_warm, "layer");
    let round = [
        "binary_load clCreateProgramWithBinary - substitute clshim-binary CL_SUCCESS",
        "build clBuildProgram - - clshim-binary CL_SUCCESS",
    ];
    let expected: Vec<String> = round.iter().cycle().take(6).map(|s| line(s)).collect();
    assert_eq!(brief(&recs), expected, "warm run: {recs:#?}");
}

/// CLBlast's SGEMM (64 x 64) in two contexts of one process, through tests/c/clblast_sgemm.c.
/// The first context builds CLBlast's GEMM program from source and CLBlast stores its
/// binary in memory (SIZES, then BINARIES); the second context misses CLBlast's
/// per-context program cache and makes the program from that binary. Under `substitute`
/// the binary is a clshim binary, so pocl never compiles the generic kernel, and the
/// second context's program is rebuilt from the same source. CLBlast keeps no binary on
/// disk, so the warm run repeats the cold run's calls and only pocl's kernel cache is warm.
#[test]
fn clblast_in_memory_binary_cache() {
    if !needs(&[CLBLAST]) {
        return;
    }
    let prog = build_c_custom("clblast_sgemm", "clblast_sgemm", &["-lclblast", "-lOpenCL"]);
    let dir = scratch("clblast");
    let env_for = |name: &str| vec![("POCL_CACHE_DIR", dir.join(name))];
    // Without clshim: cold then warm on pocl's kernel cache.
    let plain_cold = run_client(&prog, &[], &env_for("pocl-plain"), None);
    let plain_warm = run_client(&prog, &[], &env_for("pocl-plain"), None);
    let (t_cold, t_warm) = (dir.join("trace-cold"), dir.join("trace-warm"));
    let cold = run_client(&prog, &[], &env_for("pocl-shim"), Some(&t_cold));
    let warm = run_client(&prog, &[], &env_for("pocl-shim"), Some(&t_warm));
    let text = stdout(&plain_cold);
    let results: Vec<&str> = text
        .lines()
        .map(|l| l.split_once(": ").unwrap().1)
        .collect();
    assert_eq!(results.len(), 2, "two contexts: {text}");
    assert_eq!(
        results[0], results[1],
        "both contexts compute the same C: {text}"
    );
    assert_same_output("cold", &cold, &plain_cold);
    assert_same_output("warm", &warm, &plain_warm);

    let expected: Vec<String> = [
        "build clBuildProgram - - source CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARY_SIZES substitute - CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARIES substitute - CL_SUCCESS",
        "binary_load clCreateProgramWithBinary - substitute clshim-binary CL_SUCCESS",
        "build clBuildProgram - - clshim-binary CL_SUCCESS",
    ]
    .iter()
    .map(|s| line(s))
    .collect();
    let mut hashes = Vec::new();
    for (label, trace) in [("cold", &t_cold), ("warm", &t_warm)] {
        let recs = records(trace, "preload");
        assert_eq!(brief(&recs), expected, "{label} run: {recs:#?}");
        let builds = events(&recs, "build");
        let queries = events(&recs, "binary_query");
        let load = events(&recs, "binary_load")[0];
        assert!(
            builds[0]["kernels"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "Xgemm"),
            "CLBlast's GEMM program: {}",
            builds[0]
        );
        assert_eq!(queries[0]["program"], builds[0]["program"]);
        assert_eq!(queries[1]["program"], builds[0]["program"]);
        assert_eq!(
            queries[0]["sizes"], queries[1]["sizes"],
            "the sizes and the binaries agree"
        );
        assert_eq!(
            load["program"], builds[1]["program"],
            "the loaded program is built"
        );
        assert_eq!(
            load["source"]["hash"], builds[0]["source"]["hash"],
            "the same source again"
        );
        assert_eq!(builds[1]["kernels"], builds[0]["kernels"]);
        assert_eq!(builds[1]["options"], builds[0]["options"]);
        hashes.push(builds[0]["source"]["hash"].clone());
    }
    assert_eq!(
        hashes[0], hashes[1],
        "cold and warm runs build the same source"
    );
}

/// `suppress` breaks CLBlast, which `substitute` exists to avoid: CLBlast stores the empty
/// binary that `suppress` answers in its in-memory cache, and in the second context its
/// `clCreateProgramWithBinary` of that empty binary fails with `CL_INVALID_VALUE` (the
/// driver's answer: clshim asks it first). CLBlast does not fall back to source: the SGEMM
/// call fails with that error. The first context's result is still right.
#[test]
fn clblast_under_suppress_fails_in_second_context() {
    if !needs(&[CLBLAST]) {
        return;
    }
    let prog = build_c_custom("clblast_sgemm", "clblast_sgemm", &["-lclblast", "-lOpenCL"]);
    let dir = scratch("clblast-suppress");
    let env = vec![("POCL_CACHE_DIR", dir.join("pocl"))];
    let plain = run_client(&prog, &[], &env, None);
    let trace = dir.join("trace");
    let out = run_policy(&prog, &[], &env, Some(&trace), "suppress");
    assert_eq!(
        out.status.code(),
        Some(1),
        "the driver exits 1 when CLBlast fails: {out:?}"
    );
    let first = stdout(&plain).lines().next().unwrap().to_string();
    assert_eq!(stdout(&out), format!("{first}\nFAILED CLBlastSgemm -30\n"));
    assert_eq!(
        stderr(&out),
        "CLBlast: OpenCL error: clCreateProgramWithBinary: -30\nCLBlastSgemm failed: -30\n"
    );
    let recs = checked_traces(&trace);
    let expected: Vec<String> = [
        "build clBuildProgram - - source CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARY_SIZES suppress - CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARIES suppress - CL_SUCCESS",
        "binary_load clCreateProgramWithBinary - forward - CL_INVALID_VALUE",
    ]
    .iter()
    .map(|s| line(s))
    .collect();
    assert_eq!(brief(&recs), expected, "{recs:#?}");
    assert_eq!(
        events(&recs, "binary_query")[0]["sizes"],
        serde_json::json!([0])
    );
}

/// clFFT's forward FFT of 16 points through tests/c/clfft_forward.c, with its binary cache
/// on (`CLFFT_CACHE_PATH`). The cold run builds clFFT's generated source and writes the
/// program's binary to the cache: under `substitute` a clshim binary, so pocl never
/// compiles the generic kernel. The warm run loads it (clshim rebuilds the program from
/// the source it carries, which pocl's kernel cache serves), and clFFT then queries the
/// loaded program's binary again, which `substitute` answers the same way.
#[test]
fn clfft_disk_binary_cache() {
    if !needs(&[CLFFT]) {
        return;
    }
    let prog = build_c_custom("clfft_forward", "clfft_forward", &["-lclFFT", "-lOpenCL"]);
    let dir = scratch("clfft");
    let env_for = |name: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(d.join("clfft")).unwrap(); // clFFT caches only into a folder that exists
        vec![
            ("POCL_CACHE_DIR", d.join("pocl")),
            ("CLFFT_CACHE_PATH", d.join("clfft")),
        ]
    };
    let plain_cold = run_client(&prog, &[], &env_for("plain"), None);
    let plain_warm = run_client(&prog, &[], &env_for("plain"), None);
    let (t_cold, t_warm) = (dir.join("trace-cold"), dir.join("trace-warm"));
    let cold = run_client(&prog, &[], &env_for("shim"), Some(&t_cold));
    let warm = run_client(&prog, &[], &env_for("shim"), Some(&t_warm));
    assert!(
        stdout(&plain_cold).starts_with("fft n=16: (30.0000,15.0000)"),
        "the DC term: {}",
        stdout(&plain_cold)
    );
    assert_same_output("cold", &cold, &plain_cold);
    assert_same_output("warm", &warm, &plain_warm);
    assert_eq!(
        stdout(&plain_warm),
        stdout(&plain_cold),
        "the cached binary computes the same"
    );

    let recs = records(&t_cold, "preload");
    let expected: Vec<String> = [
        "build clBuildProgram - - source CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARY_SIZES substitute - CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARIES substitute - CL_SUCCESS",
    ]
    .iter()
    .map(|s| line(s))
    .collect();
    assert_eq!(brief(&recs), expected, "cold run: {recs:#?}");
    let build = events(&recs, "build")[0].clone();
    assert_eq!(
        build["kernels"],
        serde_json::json!(["fft_fwd", "fft_back"]),
        "{build}"
    );

    // clFFT's cache (one file, in a folder per device) holds the clshim binary.
    assert_one_cached_clshim_binary(&dir.join("shim/clfft"), "clFFT's cache");

    let recs = records(&t_warm, "preload");
    let expected: Vec<String> = [
        "binary_load clCreateProgramWithBinary - substitute clshim-binary CL_SUCCESS",
        "build clBuildProgram - - clshim-binary CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARY_SIZES substitute - CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARIES substitute - CL_SUCCESS",
    ]
    .iter()
    .map(|s| line(s))
    .collect();
    assert_eq!(brief(&recs), expected, "warm run: {recs:#?}");
    assert_warm_build_of_cold_source(&recs, &build);
}

/// Compiles tests/c/boost_compute_transform.cpp (C++, header-only Boost.Compute plus
/// boost_filesystem for its offline cache) into target/<profile>/ctests/ when it is stale.
fn build_boost_compute_client() -> PathBuf {
    let src = repo_root().join("tests/c/boost_compute_transform.cpp");
    let dir = target_dir().join("ctests");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("boost_compute_transform");
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if mtime(&out).is_none() || mtime(&src) > mtime(&out) {
        let tmp = dir.join(format!("boost_compute_transform.tmp{}", std::process::id()));
        let status = Command::new("c++")
            .args([
                "-O1",
                "-Wall",
                "-DBOOST_BIND_GLOBAL_PLACEHOLDERS",
                "-DCL_TARGET_OPENCL_VERSION=120",
                "-o",
            ])
            .arg(&tmp)
            .arg(&src)
            .args(["-lOpenCL", "-lboost_filesystem"])
            .status()
            .expect("run c++");
        assert!(status.success(), "compiling {} failed", src.display());
        std::fs::rename(&tmp, &out).unwrap();
    }
    out
}

/// Boost.Compute's `transform` of 1024 integers through tests/c/boost_compute_transform.cpp,
/// with Boost.Compute's offline cache on. The cold run builds the generated kernel from
/// source, then Boost.Compute reads the program's binary (SIZES, BINARIES) and writes it to
/// `$HOME/.boost_compute`: under `substitute` a clshim binary, so pocl never compiles the
/// generic kernel. The warm run loads it and builds it; clshim rebuilds the program from the
/// source it carries, which pocl's kernel cache serves.
#[test]
fn boost_compute_offline_cache() {
    if !needs(&BOOST_COMPUTE) {
        return;
    }
    let prog = build_boost_compute_client();
    let dir = scratch("boost-compute");
    let env_for = |name: &str| {
        let d = dir.join(name);
        vec![("HOME", d.join("home")), ("POCL_CACHE_DIR", d.join("pocl"))]
    };
    let plain_cold = run_client(&prog, &[], &env_for("plain"), None);
    let plain_warm = run_client(&prog, &[], &env_for("plain"), None);
    let (t_cold, t_warm) = (dir.join("trace-cold"), dir.join("trace-warm"));
    let cold = run_client(&prog, &[], &env_for("shim"), Some(&t_cold));
    let warm = run_client(&prog, &[], &env_for("shim"), Some(&t_warm));
    assert_eq!(
        stdout(&plain_cold),
        "transform n=1024 y[0]=1 y[96]=289 y[1023]=160 sum=144997\n",
        "y = 3x + 1 for x = i % 97"
    );
    assert_same_output("cold", &cold, &plain_cold);
    assert_same_output("warm", &warm, &plain_warm);
    assert_eq!(stdout(&plain_warm), stdout(&plain_cold));

    let recs = records(&t_cold, "preload");
    let expected: Vec<String> = [
        "build clBuildProgram - - source CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARY_SIZES substitute - CL_SUCCESS",
        "binary_query clGetProgramInfo CL_PROGRAM_BINARIES substitute - CL_SUCCESS",
    ]
    .iter()
    .map(|s| line(s))
    .collect();
    assert_eq!(brief(&recs), expected, "cold run: {recs:#?}");
    let build = events(&recs, "build")[0].clone();
    assert!(!build["kernels"].as_array().unwrap().is_empty(), "{build}");

    // The offline cache: one `kernel` file (a length, then the binary) per program.
    assert_one_cached_clshim_binary(
        &dir.join("shim/home/.boost_compute"),
        "Boost.Compute's offline cache",
    );

    let recs = records(&t_warm, "preload");
    let expected: Vec<String> = [
        "binary_load clCreateProgramWithBinary - substitute clshim-binary CL_SUCCESS",
        "build clBuildProgram - - clshim-binary CL_SUCCESS",
    ]
    .iter()
    .map(|s| line(s))
    .collect();
    assert_eq!(brief(&recs), expected, "warm run: {recs:#?}");
    assert_warm_build_of_cold_source(&recs, &build);
}
