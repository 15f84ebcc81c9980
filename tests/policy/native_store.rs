//! The native store on real pocl (docs/binary-policies.md): a `substitute` run that hands
//! out a clshim binary leaves a request; `clshim warm` turns it into the driver's own
//! binary; the next load of that clshim binary is made from it (the record says so) and
//! the application sees exactly what it sees without clshim. Damaged, foreign or
//! other-driver entries are ignored, recorded and never loaded; several warm processes
//! split the requests; an unwritable or full store costs the application nothing.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn client() -> PathBuf {
    build_c("native_client", &[])
}

/// The environment of a `substitute` run with `store` that leaves requests, and its own
/// pocl kernel cache.
fn env<'a>(store: &'a str, kcache: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CLSHIM_BINARIES", "substitute"),
        ("CLSHIM_NATIVE_STORE", store),
        ("CLSHIM_WARM_SERVICE", "0"),
        ("POCL_CACHE_DIR", kcache),
    ]
}

fn warm(store: &Path) -> Output {
    let out = warm_out(store, &[]);
    assert!(out.status.success(), "clshim warm: {}", stderr(&out));
    out
}

fn load_record(r: &Ran) -> Value {
    r.one("binary_load").clone()
}

/// What the client prints loading the driver's own binary without clshim: what every
/// load under clshim must print too.
fn plain_load(bin: &Path, d: &Scratch, args: &[&str]) -> String {
    let kc = d.path("kc-plain");
    let kc_env = [("POCL_CACHE_DIR", s(&kc))];
    let save = format!("--save={}", s(&d.path("pocl.bin")));
    let load = format!("--load={}", s(&d.path("pocl.bin")));
    plain(
        Driver::Pocl,
        bin,
        &[&[save.as_str()], args].concat(),
        &kc_env,
    )
    .ok();
    let r = plain(
        Driver::Pocl,
        bin,
        &[&[load.as_str()], args].concat(),
        &kc_env,
    );
    r.ok();
    r.stdout()
}

/// A cache file written under `substitute` (a clshim binary) and the store with its
/// request, for the client's program with `args`.
fn substitute_save(bin: &Path, d: &Scratch, store: &Path, args: &[&str]) -> PathBuf {
    let file = d.path(&format!("clshim{}.bin", args.join("")));
    let save = format!("--save={}", s(&file));
    let kc = d.path("kc");
    let r = shimmed(
        Driver::Pocl,
        bin,
        &[&[save.as_str()], args].concat(),
        &env(s(store), s(&kc)),
    );
    r.ok().has_line("saved");
    file
}

fn substitute_load(bin: &Path, d: &Scratch, store: &Path, file: &Path, args: &[&str]) -> Ran {
    let load = format!("--load={}", s(file));
    let kc = d.path("kc");
    let r = shimmed(
        Driver::Pocl,
        bin,
        &[&[load.as_str()], args].concat(),
        &env(s(store), s(&kc)),
    );
    r.ok();
    r
}

/// A substitute run leaves one request and no entry; `clshim warm` makes the entry and
/// removes the request; the next load is made from the native binary, and the client
/// sees what it sees without clshim (create and binary status, binary type and build
/// status before and after the build, the build's result and log, the kernel's output),
/// for a program built from source and for one compiled and linked.
#[test]
fn warm_start_loads_the_native_binary_as_without_clshim() {
    let bin = client();
    for args in [&[][..], &["--compile-link"][..]] {
        let d = scratch("native-warm");
        let store = d.path("store");
        let expected = plain_load(&bin, &d, args);
        let file = substitute_save(&bin, &d, &store, args);
        assert_eq!(requests(&store).len(), 1, "{args:?}: one request");
        assert!(entries(&store).is_empty());

        let before = substitute_load(&bin, &d, &store, &file, args);
        let l = load_record(&before);
        assert_eq!(l["action"], "substitute", "{l}");
        assert_eq!(l["made_from"], "recipe", "{l}");
        assert_eq!(l["native_miss"], "device 0: no entry", "{l}");

        let out = warm(&store);
        assert!(stderr(&out).contains(": 1 made,"), "{}", stderr(&out));
        assert!(requests(&store).is_empty(), "the request is done");
        assert_eq!(entries(&store).len(), 1);
        assert!(store_files(&store.join("requests"), ".claim").is_empty());

        let after = substitute_load(&bin, &d, &store, &file, args);
        let l = load_record(&after);
        assert_eq!(l["action"], "substitute", "{l}");
        assert_eq!(l["made_from"], "native", "{l}");
        assert!(l.get("native_miss").is_none(), "{l}");
        assert_eq!(l["source"]["origin"], "clshim-binary", "{l}");
        assert_eq!(after.stdout(), expected, "{args:?}: as without clshim");
    }
}

/// Rewrites the header checksum of an entry after a field was patched (the store's own
/// layout, clshim_format::store: 96 header bytes, the last 8 the checksum of the 88 before).
fn reseal(e: &mut [u8]) {
    let sum = fnv1a64_u64(&e[..88]);
    e[88..96].copy_from_slice(&sum.to_le_bytes());
}

/// Every kind of bad entry is ignored with its reason recorded, the load falls back to
/// the recipe, and the client's output is what it is without clshim: a truncated entry, a
/// flipped byte in the payload or header, another device's, another driver build's (a
/// driver version change), a foreign file, an empty one, a symbolic link to a good entry,
/// a directory and a FIFO in its place.
#[test]
fn damaged_foreign_and_other_driver_entries_are_ignored() {
    let bin = client();
    let d = scratch("native-damaged");
    let store = d.path("store");
    let expected = plain_load(&bin, &d, &[]);
    let file = substitute_save(&bin, &d, &store, &[]);
    warm(&store);
    let entry = entries(&store).pop().expect("an entry");
    let good = std::fs::read(&entry).unwrap();
    let n = good.len();
    let patched = |at: usize, v: u64| {
        let mut e = good.clone();
        e[at..at + 8].copy_from_slice(&v.to_le_bytes());
        reseal(&mut e);
        e
    };
    let flipped = |at: usize| {
        let mut e = good.clone();
        e[at] ^= 0x20;
        e
    };
    let fp = u64::from_le_bytes(good[24..32].try_into().unwrap());
    let drv = u64::from_le_bytes(good[32..40].try_into().unwrap());
    let cases: Vec<(&str, Option<Vec<u8>>, &str)> = vec![
        (
            "truncated",
            Some(good[..n / 2].to_vec()),
            "differs from the declared",
        ),
        (
            "cut by one",
            Some(good[..n - 1].to_vec()),
            "differs from the declared",
        ),
        (
            "payload byte",
            Some(flipped(n - 100)),
            "payload checksum mismatch",
        ),
        ("header byte", Some(flipped(20)), "header checksum mismatch"),
        (
            "another device",
            Some(patched(24, fp ^ 1)),
            "made for another device",
        ),
        (
            "another driver",
            Some(patched(32, drv ^ 1)),
            "made by another driver build",
        ),
        (
            "foreign",
            Some(b"\x7fELF not a store entry at all".to_vec()),
            "not a native store entry",
        ),
        ("empty", Some(Vec::new()), "not a native store entry"),
        ("symlink", None, "a symbolic link"),
        ("directory", None, "not a regular file"),
        ("fifo", None, "not a regular file"),
    ];
    let elsewhere = d.path("good-entry");
    std::fs::write(&elsewhere, &good).unwrap();
    for (what, bytes, reason) in cases {
        let _ = std::fs::remove_file(&entry);
        let _ = std::fs::remove_dir(&entry);
        match (what, bytes) {
            (_, Some(b)) => std::fs::write(&entry, b).unwrap(),
            ("symlink", None) => std::os::unix::fs::symlink(&elsewhere, &entry).unwrap(),
            ("directory", None) => std::fs::create_dir(&entry).unwrap(),
            _ => {
                let c = std::ffi::CString::new(s(&entry)).unwrap();
                // SAFETY: a valid path.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
            }
        }
        let r = substitute_load(&bin, &d, &store, &file, &[]);
        let l = load_record(&r);
        assert_eq!(l["made_from"], "recipe", "{what}: {l}");
        let miss = l["native_miss"].as_str().unwrap_or_default();
        assert!(miss.contains(reason), "{what}: {miss:?} lacks {reason:?}");
        assert_eq!(r.stdout(), expected, "{what}: as without clshim");
    }
    // And the good entry, put back, is used again.
    let _ = std::fs::remove_file(&entry);
    std::fs::write(&entry, &good).unwrap();
    let r = substitute_load(&bin, &d, &store, &file, &[]);
    assert_eq!(load_record(&r)["made_from"], "native");
}

/// Several `clshim warm` processes at once on one store (as ranks of a job do), and one
/// with `--jobs 3`: the requests are split by their claims (each entry made once), every
/// entry is complete and loads natively, and nothing is left behind (requests, claims,
/// temporary files). A claim left by a process that is gone is taken over; one held by a
/// live process is left alone.
#[test]
fn concurrent_warm_steps_split_the_requests() {
    let bin = client();
    let d = scratch("native-concurrent");
    let store = d.path("store");
    let seeds = ["11", "12", "13", "14"];
    let cache: Vec<(String, PathBuf)> = seeds
        .iter()
        .map(|sd| {
            let a = format!("--seed={sd}");
            let f = substitute_save(&bin, &d, &store, &[&a]);
            (a, f)
        })
        .collect();
    assert_eq!(requests(&store).len(), seeds.len());
    // A live claim (this test's own pid) on one request, a dead one on another.
    let reqs = requests(&store);
    let claim_of = |r: &Path| r.with_extension("claim");
    std::fs::write(claim_of(&reqs[0]), claim_text(std::process::id() as i32)).unwrap();
    std::fs::write(claim_of(&reqs[1]), claim_text(2147483646)).unwrap();

    let lib = shim_path();
    let mut kids: Vec<std::process::Child> = (0..3)
        .map(|i| {
            let mut c = clshim();
            c.args(["warm", "--store", s(&store), "--lib", s(&lib)]);
            if i == 0 {
                c.args(["--jobs", "3"]);
            }
            clear_shim_env(&mut c, &[]);
            c.stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    let mut made = 0;
    for k in kids.drain(..) {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success());
        for line in stderr(&out).lines() {
            if let Some(rest) = line.split(": ").nth(2) {
                made += rest
                    .split(' ')
                    .next()
                    .unwrap()
                    .parse::<usize>()
                    .unwrap_or(0);
            }
        }
    }
    assert_eq!(
        made,
        seeds.len() - 1,
        "each entry made once; the held one left"
    );
    assert_eq!(entries(&store).len(), seeds.len() - 1);
    assert_eq!(
        requests(&store),
        vec![reqs[0].clone()],
        "the live claim's request stays"
    );
    let leftovers: Vec<_> = std::fs::read_dir(store.join("requests"))
        .unwrap()
        .chain(std::fs::read_dir(&store).unwrap())
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The live claim goes; the next step makes the last one.
    std::fs::remove_file(claim_of(&reqs[0])).unwrap();
    warm(&store);
    assert!(requests(&store).is_empty());
    for (a, f) in &cache {
        let r = substitute_load(&bin, &d, &store, f, &[a]);
        assert_eq!(load_record(&r)["made_from"], "native", "{a}");
    }
}

/// More groups than workers (as 16 ranks, each with its own pocl kernel cache, on a node
/// of 2 CPUs): `clshim warm --jobs 1` makes every group's requests, one group after the
/// other, and leaves none (before, each round gave workers to the `jobs` largest groups
/// only, and the rest were neither made nor counted in its line).
#[test]
fn one_worker_makes_the_requests_of_every_group() {
    let bin = client();
    let d = scratch("native-groups");
    let store = d.path("store");
    let groups = 4;
    for i in 0..groups {
        let kc = d.path(&format!("kc-rank{i}"));
        let save = format!("--save={}", s(&d.path(&format!("rank{i}.bin"))));
        let seed = format!("--seed={}", 40 + i);
        shimmed(
            Driver::Pocl,
            &bin,
            &[save.as_str(), seed.as_str()],
            &env(s(&store), s(&kc)),
        )
        .ok()
        .has_line("saved");
    }
    assert_eq!(requests(&store).len(), groups);
    let lib = shim_path();
    let out = clshim_out(
        &[
            "warm",
            "--store",
            s(&store),
            "--lib",
            s(&lib),
            "--jobs",
            "1",
        ],
        &[],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(": {groups} made,")),
        "every group made: {err}"
    );
    assert_eq!(entries(&store).len(), groups, "{err}");
    assert!(requests(&store).is_empty(), "{err}");
}

/// A full disk: the store on a 64 KiB tmpfs filled up (when this runs as root; else a
/// file-size limit of 1 KiB): the application's run is as without the store (its output,
/// its exit status), no request is written, and `clshim warm` reports, not crashes.
#[test]
fn a_full_or_unwritable_store_costs_the_application_nothing() {
    let bin = client();
    let d = scratch("native-full");
    let store = d.path("store");
    std::fs::create_dir_all(&store).unwrap();
    // SAFETY: no arguments.
    let root = unsafe { libc::geteuid() } == 0;
    let mounted = root
        && std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                "size=64k,mode=0700",
                "tmpfs",
                s(&store),
            ])
            .status()
            .is_ok_and(|st| st.success());
    let expected = {
        let file = d.path("plain.bin");
        let save = format!("--save={}", s(&file));
        let r = plain(Driver::Pocl, &bin, &[&save], &[]);
        r.ok();
        r.stdout()
    };
    let save = format!("--save={}", s(&d.path("c.bin")));
    let kc = d.path("kc");
    let r = if mounted {
        // Fill it.
        let _ = std::fs::write(store.join("filler"), vec![0u8; 64 << 10]);
        shimmed(Driver::Pocl, &bin, &[&save], &env(s(&store), s(&kc)))
    } else {
        let e = env(s(&store), s(&kc));
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "ulimit -f 1; exec \"$0\" \"$1\"", s(&bin), &save]);
        for (k, v) in &e {
            cmd.env(k, v);
        }
        let out = run(cmd, true);
        Ran {
            out,
            records: Vec::new(),
            driver_calls: Vec::new(),
            what: "ulimit -f 1".into(),
        }
    };
    r.ok();
    // The kernel output and the save are the application's; only the binary differs.
    assert_eq!(
        r.stdout().lines().next(),
        expected.lines().next(),
        "the kernel ran as without clshim"
    );
    assert!(r.stdout().contains("saved"));
    assert!(requests(&store).is_empty(), "no request on a full disk");
    if mounted {
        let _ = std::process::Command::new("umount").arg(s(&store)).status();
    }
}

/// Under `substitute` (the warm service on, as by default), the node's warm service, which
/// the library starts when it hands out a clshim binary whose driver's binary the store
/// lacks (or loads one), makes it, and the process that left the request waits for it at
/// its exit: when the run returns (with the command's status) the entry is there, no
/// request waits, the exit line says so, and no process of clshim's is left (the service
/// ends with the job's last process). The next run loads the driver's binary and waits for
/// nothing. A process that loads a clshim binary the store lacks leaves a request and waits
/// the same way. A service that cannot start (no `clshim` command beside the library) ends
/// the wait within about a second, and the exit line names `clshim warm`. `--warm`, no
/// longer needed, is said to be ignored.
#[test]
fn the_warm_service_makes_what_a_job_hands_out_and_leaves_nothing_behind() {
    let bin = client();
    let d = scratch("native-service");
    let store = d.path("store");
    let kc = d.path("kc");
    let lib = shim_path();
    let run_with = |lib: &std::path::Path, args: &[&str]| {
        let mut all = vec![
            "run",
            "--lib",
            s(lib),
            "--binaries",
            "substitute",
            "--native-store",
            s(&store),
            "--",
            s(&bin),
        ];
        all.extend_from_slice(args);
        let out = clshim_out(&all, &[("POCL_CACHE_DIR", s(&kc))]);
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let run = |args: &[&str]| run_with(&lib, args);
    let save = format!("--save={}", s(&d.path("c.bin")));
    let out = run(&[&save]);
    assert!(stdout(&out).contains("saved"));
    assert!(
        stderr(&out).contains(
            "the node's warm service made the driver's binaries of its clshim binary for later \
             loads ("
        ) && stderr(&out).contains(" s waited for it at exit)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(entries(&store).len(), 1, "{}", stderr(&out));
    assert!(requests(&store).is_empty());
    let load = format!("--load={}", s(&d.path("c.bin")));
    let out = run(&[&load]);
    assert!(
        stderr(&out).contains("from the driver's binaries in the native store")
            && !stderr(&out).contains("at exit"),
        "the next run loads the driver's binary and waits for nothing: {}",
        stderr(&out)
    );
    // A load that finds no entry leaves a request, and waits for it at its exit.
    for e in entries(&store) {
        std::fs::remove_file(e).unwrap();
    }
    let out = run(&[&load]);
    assert!(
        stderr(&out).contains("made the driver's binaries of its clshim binary for later loads"),
        "{}",
        stderr(&out)
    );
    assert_eq!(entries(&store).len(), 1, "{}", stderr(&out));
    assert!(requests(&store).is_empty());
    // Nothing of clshim's outlives the job (the service notices within a tick).
    let left = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|c| {
                let c = String::from_utf8_lossy(c);
                c.contains("warm") && c.contains(s(&store))
            })
            .count()
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while left() > 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(left(), 0, "a warm service or worker left behind");
    use std::os::unix::fs::PermissionsExt;
    let log = std::fs::metadata(store.join("warm.log")).unwrap();
    assert_eq!(log.permissions().mode() & 0o777, 0o600);
    // A library with no `clshim` command beside it starts no service: the wait ends soon,
    // and the exit line says what makes the binary instead.
    for e in entries(&store) {
        std::fs::remove_file(e).unwrap();
    }
    let alone = d.path("alone");
    std::fs::create_dir_all(&alone).unwrap();
    let alone_lib = alone.join("libclshim.so");
    std::fs::copy(&lib, &alone_lib).unwrap();
    let clock = std::time::Instant::now();
    let out = run_with(&alone_lib, &[&load]);
    assert!(
        stderr(&out).contains(
            "no warm service ran to make the driver's binaries that its clshim binary \
             lacks: `clshim warm` makes them"
        ),
        "{}",
        stderr(&out)
    );
    assert!(
        clock.elapsed() < std::time::Duration::from_secs(8),
        "{:?}",
        clock.elapsed()
    );
    // With the service off, the exit line says what makes the binaries instead.
    let out = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--binaries",
            "substitute",
            "--no-warm-service",
            "--native-store",
            s(&store),
            "--",
            s(&bin),
            &load,
        ],
        &[("POCL_CACHE_DIR", s(&kc))],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("lack (the warm service is off)")
            && !stderr(&out).contains("warm service made"),
        "{}",
        stderr(&out)
    );
    let out = clshim_out(
        &[
            "run",
            "--lib",
            s(&lib),
            "--warm",
            "--native-store",
            s(&store),
            "--",
            "sh",
            "-c",
            "exit 7",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(7));
    assert!(
        stderr(&out).contains("--warm is no longer needed"),
        "{}",
        stderr(&out)
    );
}

/// A request for a device this host does not have (another fingerprint, its checksum
/// intact) stays for a host that has it; a damaged request is removed; neither crashes
/// the step nor makes an entry.
#[test]
fn requests_for_other_devices_stay_and_damaged_ones_go() {
    let bin = client();
    let d = scratch("native-foreign-request");
    let store = d.path("store");
    substitute_save(&bin, &d, &store, &[]);
    let req = requests(&store).pop().unwrap();
    let good = std::fs::read(&req).unwrap();
    std::fs::remove_file(&req).unwrap();
    let mut other = good.clone();
    other[24] ^= 0x01; // the fingerprint
    let n = other.len();
    let sum = fnv1a64_u64(&other[..n - 8]);
    other[n - 8..].copy_from_slice(&sum.to_le_bytes());
    let mut damaged = good.clone();
    damaged[40] ^= 0x01;
    let reqs = store.join("requests");
    std::fs::write(reqs.join("00000000000000aa.req"), &other).unwrap();
    std::fs::write(reqs.join("00000000000000bb.req"), &damaged).unwrap();
    let out = warm(&store);
    let err = stderr(&out);
    assert!(
        err.contains("0 made,")
            && err.contains(
                "1 for devices or driver builds this host does not have, 0 stale, 1 failed"
            ),
        "{err}"
    );
    assert_eq!(requests(&store), vec![reqs.join("00000000000000aa.req")]);
    assert!(entries(&store).is_empty());
}

/// A program loaded from the native store is still a program made from clshim binaries:
/// its own binary query answers with the same clshim binary (substituted, not the
/// driver's), so the application's cache keeps what it had.
#[test]
fn a_native_load_answers_its_binary_query_with_the_same_clshim_binary() {
    let bin = fake_client();
    let d = scratch("native-requery");
    let store = d.path("store");
    let kc = d.path("kc");
    let first = format!("save:{}", s(&d.path("first")));
    let again = format!("save:{}", s(&d.path("again")));
    let read = format!("read:{}", s(&d.path("first")));
    let e = env(s(&store), s(&kc));
    shimmed(
        Driver::Pocl,
        &bin,
        &["build", "sizes", "binaries", &first],
        &e,
    )
    .ok();
    warm(&store);
    let r = shimmed(
        Driver::Pocl,
        &bin,
        &[&read, "load", "build", "sizes", "binaries", &again],
        &e,
    );
    r.ok();
    assert_eq!(load_record(&r)["made_from"], "native");
    assert_eq!(r.queries("CL_PROGRAM_BINARIES")[0]["action"], "substitute");
    assert_eq!(
        std::fs::read(d.path("first.0")).unwrap(),
        std::fs::read(d.path("again.0")).unwrap()
    );
}

/// A warm step that finds nothing to make says so, and where the driver's binaries come
/// from without it.
#[test]
fn a_warm_step_with_nothing_to_make_says_why() {
    let d = scratch("native-nothing");
    let store = d.path("store");
    let out = warm(&store);
    let err = stderr(&out);
    assert!(
        err.contains("nothing to make: no kept compile and no request.")
            && err.contains("warm service"),
        "{err}"
    );
}

/// A request whose build crashes the driver in the warm step costs that request only:
/// pocl 3.1 aborts making the binary of a kernel named with 256 characters or more (the
/// OpenCL CTS's `kernel_name_size` found it, and every later warm step died on the same
/// request). The step names the request, sets it aside, makes the others in a new
/// worker, counts them all, and no later run asks for that build again.
#[test]
fn a_request_that_crashes_the_driver_is_set_aside_and_the_rest_made() {
    let bin = client();
    let d = scratch("native-crash");
    let store = d.path("store");
    let long = ["--name-length=300", "--no-run"];
    for args in [&["--seed=1"][..], &long, &["--seed=2"], &["--seed=3"]] {
        substitute_save(&bin, &d, &store, args);
    }
    assert_eq!(requests(&store).len(), 4);
    let out = warm(&store);
    let err = stderr(&out);
    assert!(
        err.contains(
            "the driver crashed (SIGABRT) making it: set aside, and not asked for again for a week"
        ),
        "pocl 3.1 aborts on a 300-character kernel name; a pocl that no longer does needs \
         another crash for this test: {err}"
    );
    assert!(
        err.contains(": 3 made,") && err.contains(" 1 failed,"),
        "{err}"
    );
    assert_eq!(entries(&store).len(), 3);
    assert!(requests(&store).is_empty(), "{:?}", requests(&store));
    let left = store_files(&store.join("requests"), "");
    assert!(
        left.len() == 1 && s(&left[0]).ends_with(".set-aside"),
        "only the mark is left: {left:?}"
    );
    // The application's run itself never crashed (clshim answered its binary query), and
    // runs again without leaving the request.
    substitute_save(&bin, &d, &store, &long);
    assert!(requests(&store).is_empty());
    let again = warm(&store);
    assert!(!stderr(&again).contains("crashed"), "{}", stderr(&again));
}

/// A substitute run's request, left in `store` and claimed by this test's process (alive,
/// renewed now), so that no warm step makes it while a test watches what waits for it.
fn saved_and_claimed_here(bin: &Path, d: &Scratch, store: &Path) {
    substitute_save(bin, d, store, &[]);
    let req = requests(store).pop().expect("a request");
    let key = req.file_stem().unwrap().to_str().unwrap().to_string();
    std::fs::write(
        store.join("requests").join(format!("{key}.claim")),
        claim_text(std::process::id() as i32),
    )
    .unwrap();
}

/// `clshim run --lib LIB --binaries substitute --native-store STORE -- BIN ARGS` (the warm
/// service on, as by default) with `env`, in `cwd` if given, given `limit` to end: its output and how long it
/// took, or, past the limit, None once every process that names `d`'s folder (the run, the
/// application, a service) is ended.
fn run_within(
    d: &Scratch,
    store: &Path,
    bin: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    cwd: Option<&Path>,
    limit: std::time::Duration,
) -> Option<(Output, std::time::Duration)> {
    run_under(&[], d, store, bin, args, env, cwd, limit)
}

/// [`run_within`], the `clshim` command run by `under` (a program and its arguments: a
/// tracer) when that is not empty.
#[allow(clippy::too_many_arguments)]
fn run_under(
    under: &[&str],
    d: &Scratch,
    store: &Path,
    bin: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    cwd: Option<&Path>,
    limit: std::time::Duration,
) -> Option<(Output, std::time::Duration)> {
    let lib = shim_path();
    let mut c = match under {
        [] => clshim(),
        [program, rest @ ..] => {
            let mut c = std::process::Command::new(program);
            c.args(rest).arg(env!("CARGO_BIN_EXE_clshim"));
            c
        }
    };
    if let Some(cwd) = cwd {
        c.current_dir(cwd);
    }
    c.args(["run", "--lib", s(&lib), "--binaries", "substitute"]);
    c.args(["--native-store", s(store), "--", s(bin)]);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let keep: Vec<&str> = env.iter().map(|(k, _)| *k).collect();
    clear_shim_env(&mut c, &keep);
    c.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let clock = std::time::Instant::now();
    let mut child = c.spawn().expect("spawn clshim");
    while clock.elapsed() < limit {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            return Some((out, clock.elapsed()));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Only this test's own processes: those whose command line names its folder.
    let _ = child.kill();
    let _ = child.wait();
    let mine = s(&d.path("")).to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let named = std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&mine));
        if named && pid != std::process::id() as i32 {
            // SAFETY: a signal to one process this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    None
}

/// A process that waits for its children until none is left (`while (wait(NULL) > 0)`: a
/// launcher's or a shell's loop) ends as it does without clshim, though it left a request
/// and started the node's warm service: the service is no child of the application's
/// (the service ends only once its clients are gone, so a child's would never be reaped,
/// and the loop would wait for good).
#[test]
fn a_process_that_reaps_every_child_is_not_held_by_the_warm_service() {
    let bin = client();
    let d = scratch("native-reap-children");
    let store = d.path("store");
    let kc = d.path("kc");
    let save = format!("--save={}", s(&d.path("c.bin")));
    let ran = run_within(
        &d,
        &store,
        &bin,
        &[&save, "--reap-children"],
        &[("POCL_CACHE_DIR", s(&kc))],
        None,
        std::time::Duration::from_secs(40),
    );
    let Some((out, _)) = ran else {
        panic!("the application waited for the warm service, its child, for good");
    };
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("reaped 1\n"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("made the driver's binaries of its clshim binary"),
        "{}",
        stderr(&out)
    );
}

/// The warm service's lock file in the temporary folder that is not the user's alone (one
/// another user put there first, or one others may write) is no service's: the library
/// starts none beside it, and its process does not wait at its exit for one because
/// someone holds that file locked; it says no warm service ran, within about a second.
#[test]
fn a_lock_file_not_the_users_alone_is_no_warm_service_to_wait_for() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::io::AsRawFd;
    let bin = client();
    let d = scratch("native-foreign-lock");
    let store = d.path("store");
    let tmp = d.path("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700)).unwrap();
    // SAFETY: no arguments.
    let me = unsafe { libc::geteuid() };
    let (service, _) = clshim_format::store::warm_lock_names(me, &store);
    let lock = tmp.join(service);
    let held = std::fs::File::create(&lock).unwrap();
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o666)).unwrap();
    // SAFETY: an open descriptor of this test's; let go when `held` closes.
    let locked = unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(locked, 0);
    let save = format!("--save={}", s(&d.path("c.bin")));
    let kc = d.path("kc");
    let (out, took) = run_within(
        &d,
        &store,
        &bin,
        &[&save],
        &[("POCL_CACHE_DIR", s(&kc)), ("TMPDIR", s(&tmp))],
        None,
        std::time::Duration::from_secs(40),
    )
    .expect("the run ended");
    drop(held);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no warm service ran to make the driver's binaries"),
        "{}",
        stderr(&out)
    );
    assert!(
        took < std::time::Duration::from_secs(8),
        "waited {took:?} for a lock file no service holds: {}",
        stderr(&out)
    );
}

/// A job run in a folder no warm worker may start in (another user's: a group's shared
/// project folder, owned by its head) leaves requests no warm step can make: the service
/// sets them aside at once (`clshim store` says why, and no run asks for them again for a
/// week), so the process that left them does not wait its whole bound at its exit for
/// nothing, and its exit line sends the user to `clshim store`, not to a `clshim warm`
/// that refuses the folder too.
#[test]
fn requests_from_a_folder_no_worker_may_start_in_are_set_aside_not_waited_for() {
    if !needs(&[ROOT]) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let bin = client();
    let d = scratch("native-their-folder");
    let store = d.path("store");
    let theirs = d.path("project");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();
    let c = std::ffi::CString::new(s(&theirs)).unwrap();
    // SAFETY: a NUL-terminated path; another user's folder, as root makes it.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 54321, 54321) }, 0);
    let save = format!("--save={}", s(&d.path("c.bin")));
    let kc = d.path("kc");
    let (out, took) = run_within(
        &d,
        &store,
        &bin,
        &[&save],
        &[("POCL_CACHE_DIR", s(&kc))],
        Some(&theirs),
        std::time::Duration::from_secs(40),
    )
    .expect("the run ended");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        took < std::time::Duration::from_secs(8),
        "waited {took:?} for requests no worker may make: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("`clshim store` says why the others were not kept"),
        "{}",
        stderr(&out)
    );
    assert!(requests(&store).is_empty(), "{:?}", requests(&store));
    let marks = store_files(&store.join("requests"), ".set-aside");
    assert_eq!(marks.len(), 1, "{}", stderr(&out));
    let why = std::fs::read_to_string(&marks[0]).unwrap();
    assert!(
        why.contains("owned by uid 54321") && why.contains(s(&theirs)),
        "{why}"
    );
}

/// Where no compile can be watched (the process runs under a tracer, here `strace -f`;
/// or the system forbids ptrace), no warm worker can make anything: the service ends at
/// its first worker's failure, rather than start a worker that loads the driver every
/// 200 ms for as long as the job lives, and the process that left the request stops
/// waiting within about a second, not at its bound, saying no warm service made it.
#[test]
fn where_no_compile_can_be_watched_the_service_ends_and_no_one_waits() {
    if !needs(&[STRACE]) {
        return;
    }
    let bin = client();
    let d = scratch("native-unwatchable");
    let store = d.path("store");
    let save = format!("--save={}", s(&d.path("c.bin")));
    let kc = d.path("kc");
    let (out, took) = run_under(
        &["strace", "-f", "-o", "/dev/null", "--"],
        &d,
        &store,
        &bin,
        &[&save],
        &[("POCL_CACHE_DIR", s(&kc))],
        None,
        std::time::Duration::from_secs(40),
    )
    .expect("the run ended");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no warm service ran to make the driver's binaries"),
        "{}",
        stderr(&out)
    );
    assert!(
        took < std::time::Duration::from_secs(8),
        "waited {took:?} for a service that cannot make anything: {}",
        stderr(&out)
    );
    assert_eq!(requests(&store).len(), 1, "left for a later step");
}

/// A process that changes TMPDIR after it left its request (a library that sets its own)
/// still sees, at its exit, the warm service it started: the lock it looks at is the one
/// in the temporary folder the service was started with. Here the request is held by a
/// claim of this test's, so the service runs without making it: the process waits its
/// bound and says so, not that no service ran.
#[test]
fn a_process_that_changes_tmpdir_still_sees_its_warm_service() {
    use std::os::unix::fs::PermissionsExt;
    let bin = client();
    let d = scratch("native-tmpdir-moves");
    let store = d.path("store");
    let kc = d.path("kc");
    saved_and_claimed_here(&bin, &d, &store);
    let (first, then) = (d.path("tmp-first"), d.path("tmp-then"));
    for t in [&first, &then] {
        std::fs::create_dir_all(t).unwrap();
        std::fs::set_permissions(t, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let save = format!("--save={}", s(&d.path("c.bin")));
    let moved = format!("--tmpdir-at-exit={}", s(&then));
    let (out, _) = run_within(
        &d,
        &store,
        &bin,
        &[&save, &moved],
        &[("POCL_CACHE_DIR", s(&kc)), ("TMPDIR", s(&first))],
        None,
        std::time::Duration::from_secs(40),
    )
    .expect("the run ended");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("made the driver's binaries of 0 of its 1 clshim binary (")
            && stderr(&out).contains(" s waited for it at exit, its bound)"),
        "{}",
        stderr(&out)
    );
}

/// A job that ends on a scheduler's SIGTERM through its own handler, which calls exit()
/// (as many do, to flush what they hold), does not wait at its exit for the warm service:
/// the scheduler gives it seconds before SIGKILL, and its own exit handlers, which run
/// after clshim's, need them. Its exit line says why it did not wait. (The request is
/// held by a claim of this test's, so the service would not make it.)
#[test]
fn a_job_ending_on_a_handled_sigterm_does_not_wait_for_the_warm_service() {
    let bin = client();
    let d = scratch("native-sigterm");
    let store = d.path("store");
    let kc = d.path("kc");
    saved_and_claimed_here(&bin, &d, &store);
    let save = format!("--save={}", s(&d.path("c.bin")));
    let (out, took) = run_within(
        &d,
        &store,
        &bin,
        &[&save, "--term-self"],
        &[("POCL_CACHE_DIR", s(&kc))],
        None,
        std::time::Duration::from_secs(40),
    )
    .expect("the run ended");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        took < std::time::Duration::from_secs(5),
        "waited {took:?} in exit() from a SIGTERM handler: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(
            "made the driver's binaries of 0 of its 1 clshim binary by the process's exit, \
             with SIGTERM or the like blocked"
        ),
        "{}",
        stderr(&out)
    );
}

/// A build whose entry is there but read other files (a header edited since) leaves a
/// request for the service to make it again: its process waits for the new entry, not
/// for the old one it found, so the exit line's "made" is true and the next load has
/// the new build's entry.
#[test]
fn a_process_waits_for_the_new_entry_of_a_build_whose_files_changed() {
    let bin = build_c("header_client", &[]);
    let d = scratch("native-files-changed");
    let store = d.path("store");
    let kc = d.path("kc");
    let hdr = d.path("hdr");
    std::fs::create_dir_all(&hdr).unwrap();
    std::fs::write(hdr.join("val.h"), "#define VAL 1\n").unwrap();
    let opts = format!("--options=-I {}", s(&hdr));
    let save = |name: &str| {
        let save = format!("--save={}", s(&d.path(name)));
        let (out, _) = run_within(
            &d,
            &store,
            &bin,
            &[&save, &opts],
            &[("POCL_CACHE_DIR", s(&kc))],
            None,
            std::time::Duration::from_secs(40),
        )
        .expect("the run ended");
        assert!(out.status.success(), "{}", stderr(&out));
        out
    };
    let out = save("first.bin");
    assert_eq!(stdout(&out), "VAL=1\n");
    let old = entries(&store);
    assert_eq!(old.len(), 1, "{}", stderr(&out));
    let old = std::fs::read(&old[0]).unwrap();
    std::fs::write(hdr.join("val.h"), "#define VAL 2\n").unwrap();
    let out = save("second.bin");
    assert_eq!(stdout(&out), "VAL=2\n");
    assert!(
        stderr(&out).contains("made the driver's binaries of its clshim binary for later loads"),
        "{}",
        stderr(&out)
    );
    let new = entries(&store);
    assert_eq!(new.len(), 1);
    assert_ne!(
        std::fs::read(&new[0]).unwrap(),
        old,
        "the process said made, and ended, with the old build's entry: {}",
        stderr(&out)
    );
}

/// The warm service, which runs while the job computes, is the first process the kernel's
/// OOM killer ends (oom_score_adj 1000), and so are its workers, which inherit it: on a
/// node whose memory the job fills, a worker loading the driver's compiler must never
/// cost a rank (the largest process, else the one killed). The request is held by a
/// claim of this test's, so the service runs on while its client waits.
#[test]
fn the_warm_service_is_the_first_the_oom_killer_ends() {
    let bin = client();
    let d = scratch("native-oom");
    let store = d.path("store");
    let kc = d.path("kc");
    saved_and_claimed_here(&bin, &d, &store);
    let save = format!("--save={}", s(&d.path("c.bin")));
    let service = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .find(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c);
                    c.contains("--service") && c.contains(s(&store))
                })
            })
            .map(|e| e.path())
    };
    let seen = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            run_within(
                &d,
                &store,
                &bin,
                &[&save],
                &[("POCL_CACHE_DIR", s(&kc))],
                None,
                std::time::Duration::from_secs(40),
            )
        });
        let until = std::time::Instant::now() + std::time::Duration::from_secs(8);
        // The service's process is seen before it has lowered itself (and, forked away,
        // as its first process too): what counts is the value it runs on with.
        let mut seen = None;
        while seen.as_deref().map(str::trim) != Some("1000") && std::time::Instant::now() < until {
            seen = service()
                .and_then(|p| std::fs::read_to_string(p.join("oom_score_adj")).ok())
                .or(seen);
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let (out, _) = run.join().unwrap().expect("the run ended");
        assert!(out.status.success(), "{}", stderr(&out));
        seen
    });
    assert_eq!(
        seen.as_deref().map(str::trim),
        Some("1000"),
        "the service's"
    );
}

/// A request another step holds the claim of (a node's service sharing the store with
/// others', each of whose ranks asked for the same build) is tried again once the claim
/// is gone or every few seconds, not at every listing: each try starts a worker that
/// loads the driver and writes, links and removes a claim in the store (a network
/// filesystem's server, for every node of the job). Here the claim is this test's.
#[test]
fn the_warm_service_does_not_retry_a_claimed_request_at_every_listing() {
    let bin = client();
    let d = scratch("native-claimed-elsewhere");
    let store = d.path("store");
    let kc = d.path("kc");
    saved_and_claimed_here(&bin, &d, &store);
    let save = format!("--save={}", s(&d.path("c.bin")));
    let workers = || -> std::collections::HashSet<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c);
                    c.contains("--worker-group") && c.contains(s(&store))
                })
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let started = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            run_within(
                &d,
                &store,
                &bin,
                &[&save],
                &[("POCL_CACHE_DIR", s(&kc))],
                None,
                std::time::Duration::from_secs(40),
            )
        });
        let mut seen = std::collections::HashSet::new();
        while !run.is_finished() {
            seen.extend(workers());
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (out, _) = run.join().unwrap().expect("the run ended");
        assert!(out.status.success(), "{}", stderr(&out));
        seen.len()
    });
    assert!(
        (1..=3).contains(&started),
        "{started} workers started in the 10 s the claim was held"
    );
}

/// The driver's own files are learnt from a compile of an empty kernel without its link
/// (`CLSHIMD3`: pocl's headers), and pocl's kernel library, which only a link reads, is
/// added from the folder beside those headers: every bitcode file there, by its status.
/// Where pocl finds a request's program in the application's kernel cache (the tracer
/// seeds it from there), nothing links; where that cache is gone, the build links. Either
/// way the entry loads native.
#[test]
fn the_drivers_files_are_its_front_ends_and_its_kernel_library() {
    let bin = client();
    for cache_gone in [false, true] {
        let d = scratch("native-driver-depth");
        let store = d.path("store");
        let file = substitute_save(&bin, &d, &store, &["--seed=41"]);
        if cache_gone {
            std::fs::remove_dir_all(d.path("kc")).unwrap();
        }
        warm(&store);
        let lists = store_files(&store.join("drivers"), ".files");
        assert_eq!(lists.len(), 1, "one driver build's files");
        let list = std::fs::read(&lists[0]).unwrap();
        assert_eq!(
            &list[..8],
            b"CLSHIMD3",
            "cache gone: {cache_gone}: {}",
            String::from_utf8_lossy(&list[..8])
        );
        let text = String::from_utf8_lossy(&list);
        assert!(
            text.contains("/include/_kernel.h") && text.contains(".bc"),
            "the headers and the kernel library: {text}"
        );
        let r = substitute_load(&bin, &d, &store, &file, &["--seed=41"]);
        assert_eq!(
            load_record(&r)["made_from"],
            "native",
            "cache gone: {cache_gone}"
        );
    }
}

/// The system's libpocl linked into a folder of `d`'s a group may write (`pocl/a/b`, which
/// this returns), with pocl's data copied beside it (`pocl/share/pocl`), where pocl, built
/// relocatable, looks for it when loaded from there.
fn pocl_linked_into(d: &Scratch) -> PathBuf {
    let icd = std::fs::read_to_string("/etc/OpenCL/vendors/pocl.icd").unwrap();
    let name = icd.trim();
    let libdir = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
    ]
    .iter()
    .map(Path::new)
    .find(|dir| dir.join(name).is_file())
    .expect("the system's libpocl");
    let data = libdir.join("../../share/pocl");
    assert!(
        data.is_dir(),
        "{}: pocl's data beside its library",
        data.display()
    );
    let copy = d.path("pocl");
    let lib = copy.join("a/b");
    std::fs::create_dir_all(&lib).unwrap();
    std::os::unix::fs::symlink(libdir.join(name), lib.join(name)).unwrap();
    std::os::unix::fs::symlink(libdir.join("pocl"), lib.join("pocl")).unwrap();
    std::fs::create_dir_all(copy.join("share")).unwrap();
    let cp = std::process::Command::new("cp")
        .args(["-a", s(&data), s(&copy.join("share/pocl"))])
        .status()
        .unwrap();
    assert!(cp.success());
    let chmod = std::process::Command::new("chmod")
        .args(["-R", "g+w", s(&copy)])
        .status()
        .unwrap();
    assert!(chmod.success());
    lib
}

/// One build of pocl loaded from two folders (the system's, and its libpocl linked into a
/// folder of the user's with pocl's data copied beside it) reads two sets of headers and
/// kernel libraries: an entry the system's made is not served to the other, whose headers
/// differ, but built again as without clshim (a review found one driver of the two, by
/// their one build-id, and the copy's headers never checked).
#[test]
fn one_driver_build_loaded_from_another_folder_is_another_driver() {
    let bin = client();
    let d = scratch("native-driver-elsewhere");
    let lib = pocl_linked_into(&d);
    let header = d.path("pocl/share/pocl/include/_kernel.h");
    let mut text = std::fs::read(&header).unwrap();
    text.extend_from_slice(b"\n#define CLSHIM_ANOTHER_FOLDER 1\n");
    std::fs::write(&header, text).unwrap();

    let store = d.path("store");
    let kc = d.path("kc");
    let saved = d.path("clshim.bin");
    let save = format!("--save={}", s(&saved));
    let load = format!("--load={}", s(&saved));
    let e = env(s(&store), s(&kc));
    shimmed(Driver::Pocl, &bin, &[save.as_str(), "--seed=52"], &e)
        .ok()
        .has_line("saved");
    warm(&store);
    let r = shimmed(Driver::Pocl, &bin, &[load.as_str(), "--seed=52"], &e);
    r.ok();
    assert_eq!(load_record(&r)["made_from"], "native", "the system's own");

    let mut elsewhere = e.clone();
    elsewhere.push(("LD_LIBRARY_PATH", s(&lib)));
    let r = shimmed(
        Driver::Pocl,
        &bin,
        &[load.as_str(), "--seed=52"],
        &elsewhere,
    );
    r.ok();
    let l = load_record(&r);
    assert_ne!(l["made_from"], "native", "{l}");
}

/// A pocl not installed as the system's packages are (here the system's libpocl linked
/// into folders a group may write, its data copied beside them, where pocl looks for it)
/// has the system's build-id, while its kernel library is whatever those folders hold: an
/// entry whose kernel library changed since it was made is not loaded, but built again as
/// without clshim.
#[test]
fn a_driver_outside_the_systems_packages_has_its_kernel_library_checked() {
    let bin = client();
    let d = scratch("native-driver-copy");
    let lib = pocl_linked_into(&d);
    let copy = d.path("pocl");
    let store = d.path("store");
    let kc = d.path("kc");
    let saved = d.path("clshim.bin");
    let save = format!("--save={}", s(&saved));
    let load = format!("--load={}", s(&saved));
    let mut e = env(s(&store), s(&kc));
    e.push(("LD_LIBRARY_PATH", s(&lib)));
    shimmed(Driver::Pocl, &bin, &[save.as_str(), "--seed=51"], &e)
        .ok()
        .has_line("saved");
    warm(&store);
    let lists = store_files(&store.join("drivers"), ".files");
    assert_eq!(lists.len(), 1, "one driver build's files");
    let r = shimmed(Driver::Pocl, &bin, &[load.as_str(), "--seed=51"], &e);
    r.ok();
    assert_eq!(load_record(&r)["made_from"], "native");

    // Another kernel library under the same libpocl: here only its time, which pocl
    // without clshim does not look at either, so the build still works.
    for f in std::fs::read_dir(copy.join("share/pocl"))
        .unwrap()
        .flatten()
    {
        if f.file_name().to_string_lossy().ends_with(".bc") {
            let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1 << 30);
            std::fs::File::options()
                .write(true)
                .open(f.path())
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
    }
    let r = shimmed(Driver::Pocl, &bin, &[load.as_str(), "--seed=51"], &e);
    r.ok();
    let l = load_record(&r);
    assert_eq!(l["made_from"], "recipe", "{l}");
    // The driver's identity names its kernel library as it is on disk (pocl answers where
    // it is), so this is another key; the entry's list of the driver's files, which names
    // the library too, would refuse it where pocl does not say.
    assert_eq!(l["native_miss_kind"], "no_entry", "{l}");
}

/// An application's pocl cache holding a build from before pocl's kernel library was
/// replaced under the same libpocl (pocl's cache answers with it: it knows the library by
/// the SHA-1 libpocl was built with): the warm worker does not copy that program into the
/// entry but compiles, so a load on a fresh node gets what pocl alone builds now. A review
/// found the old library's program served.
#[test]
fn a_native_entry_is_not_made_from_a_pocl_cache_older_than_its_kernel_library() {
    let bin = client();
    let d = scratch("native-older-cache");
    let lib = pocl_linked_into(&d);
    let share = d.path("pocl/share/pocl");
    let store = d.path("store");
    let saved = d.path("clshim.bin");
    let (kc_a, kc_fresh) = (d.path("kc-a"), d.path("kc-fresh"));
    let node = |kc: &'static str| {
        let mut e = env(s(&store), kc);
        e.push(("LD_LIBRARY_PATH", s(&lib)));
        e
    };
    let leak = |p: &Path| -> &'static str { Box::leak(s(p).to_string().into_boxed_str()) };
    let (a, fresh) = (node(leak(&kc_a)), node(leak(&kc_fresh)));
    let plain_save = format!("--save={}", s(&d.path("pocl-old.bin")));
    plain(Driver::Pocl, &bin, &[plain_save.as_str()], &a).ok();
    replace_kernel_library(&share);
    let save = format!("--save={}", s(&saved));
    shimmed(Driver::Pocl, &bin, &[save.as_str()], &a)
        .ok()
        .has_line("saved");
    warm(&store);
    let load = format!("--load={}", s(&saved));
    let r = shimmed(Driver::Pocl, &bin, &[load.as_str()], &fresh);
    r.ok();
    assert_eq!(load_record(&r)["made_from"], "native");
    // pocl's bitcode names the file it compiled, in the cache folder of the compile: the
    // application's (`kc-a`) for a copy of its old build, the worker's own for a new one.
    let served = program_in(&kc_fresh);
    let old = [s(&kc_a).as_bytes(), b"/"].concat();
    assert!(
        !served.windows(old.len()).any(|w| w == old.as_slice()),
        "the program served was compiled with the old kernel library, in {}",
        s(&kc_a)
    );
}

/// The bytes of the one program pocl's cache folder `kc` holds.
fn program_in(kc: &Path) -> Vec<u8> {
    let found: Vec<PathBuf> = std::fs::read_dir(kc)
        .unwrap()
        .flatten()
        .filter(|l| l.path().is_dir())
        .flat_map(|l| std::fs::read_dir(l.path()).unwrap().flatten())
        .map(|p| p.path().join("program.bc"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(found.len(), 1, "one program in {}", kc.display());
    std::fs::read(&found[0]).unwrap()
}

/// The driver's own files are learnt by one worker of a store at a time (a lock on the
/// store's `drivers/` folder), and the others read what it kept rather than each compiling
/// an empty kernel from scratch (about 0.7 CPU-s each with pocl 3.1: at 16 ranks every
/// worker of the service paid it). While another process holds the lock, a worker makes no
/// entry; once it is let go, it takes the kept list as it is, makes the entry from it, and
/// the load is native.
#[test]
fn the_drivers_files_are_learnt_once_and_read_by_every_other_worker() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let bin = client();
    let d = scratch("native-driver-once");
    // A store whose step learnt the driver's files, to take its list from.
    let first = d.path("store-first");
    substitute_save(&bin, &d, &first, &["--seed=31"]);
    warm(&first);
    let learnt: Vec<PathBuf> = store_files(&first.join("drivers"), ".files");
    assert_eq!(learnt.len(), 1, "one driver build's files");

    let store = d.path("store");
    let file = substitute_save(&bin, &d, &store, &["--seed=32"]);
    let drivers = store.join("drivers");
    std::fs::create_dir_all(&drivers).unwrap();
    std::fs::set_permissions(
        &drivers,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let held = std::fs::File::open(&drivers).unwrap();
    // SAFETY: an open descriptor of the test's own.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let lib = shim_path();
    let mut c = clshim();
    c.args(["warm", "--store", s(&store), "--lib", s(&lib)]);
    clear_shim_env(&mut c, &[]);
    let mut step = c
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Time for the worker to start, build and make the driver's binary; it then waits.
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(
        step.try_wait().unwrap().is_none(),
        "the step waits for the driver's files another process is learning"
    );
    assert!(
        entries(&store).is_empty(),
        "no entry without the driver's files"
    );
    let kept = drivers.join(learnt[0].file_name().unwrap());
    std::fs::copy(&learnt[0], &kept).unwrap();
    let inode = std::fs::metadata(&kept).unwrap().ino();
    drop(held);
    let out = step.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains(": 1 made,"), "{}", stderr(&out));
    assert_eq!(
        std::fs::metadata(&kept).unwrap().ino(),
        inode,
        "the list kept by the other is read, not learnt again"
    );
    let r = substitute_load(&bin, &d, &store, &file, &["--seed=32"]);
    assert_eq!(load_record(&r)["made_from"], "native");
}
