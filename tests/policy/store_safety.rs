//! The native store costs the user nothing it should not (issue 24's smaller findings,
//! each of which failed on the code before): the size cap removes only whole store
//! entries, never the user's files in a folder the store was pointed at; claims are read
//! bounded without following links (a FIFO or a link to /dev/zero in a claim's place
//! neither hangs nor exhausts the warm step); requests are left only when asked for
//! (`CLSHIM_WARM`), and private whatever `CLSHIM_TRACE_MODE` says; a binary query costs
//! the same file operations however many requests wait; a native load answers build
//! options and kernel argument names as pocl's own binary load does; one store serves
//! every rank whatever the ranks do to `XDG_CACHE_HOME`, and requests that no warm step
//! will see are named; `clshim run --warm` passes on the signals a job script sends it.
//! And only its owner's (issue 30's findings, each of which failed on the code before
//! too): a request carrying a variable no warm step sets starts nothing; `clshim warm`
//! reads no request, and the library loads no entry and leaves no request, where a file or
//! folder is another user's, or its group or others may write it; a worker starts only in
//! the folder its requests' run used; a store `clshim run --warm` makes is the user's alone
//! whatever the umask.

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn client() -> PathBuf {
    build_c("native_client", &[])
}

/// A `substitute` run of the native client that saves its binary to `file`, leaving a
/// request in `store` (`warm`) or not.
fn save(bin: &Path, d: &Scratch, store: &Path, file: &Path, extra: &[(&str, &str)]) -> Ran {
    let save = format!("--save={}", s(file));
    let kc = d.path("kc");
    let mut env = vec![
        ("CLSHIM_BINARIES", "substitute"),
        ("CLSHIM_NATIVE_STORE", s(store)),
        ("POCL_CACHE_DIR", s(&kc)),
    ];
    env.extend_from_slice(extra);
    let r = shimmed(Driver::Pocl, bin, &[&save], &env);
    r.ok();
    r
}

/// Requests left waiting for `clshim warm`: the node's warm service off.
const SERVICE_OFF: (&str, &str) = ("CLSHIM_WARM_SERVICE", "0");

/// A store pointed at a folder of the user's: the cap (here 1 byte: every entry must go)
/// removes the store's whole entries and its own old temporary files, and nothing else:
/// not a `*.bin` of the user's, not a file with a key's name that is no entry, not a
/// temporary-looking file of another naming.
#[test]
fn the_cap_removes_only_whole_store_entries() {
    let bin = client();
    let d = scratch("store-cap");
    let store = d.path("folder");
    save(&bin, &d, &store, &d.path("c.bin"), &[SERVICE_OFF]);
    let out = warm_out(&store, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(entries(&store).len(), 1);
    let keyed_garbage = "0123456789abcdef.bin";
    let ours_old = ".tmp-0123456789abcdef.bin-1-2-3";
    let users = ["photo.bin", keyed_garbage, "notes.txt", ".tmp-draft"];
    for f in users.iter().chain([&ours_old]) {
        std::fs::write(store.join(f), b"the user's bytes").unwrap();
    }
    let old = std::time::SystemTime::now() - Duration::from_secs(7200);
    for f in [".tmp-draft", ours_old] {
        std::fs::File::options()
            .write(true)
            .open(store.join(f))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let out = warm_out(&store, &[("CLSHIM_NATIVE_STORE_MAX", "1")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("1 evicted"), "{}", stderr(&out));
    for f in users {
        assert!(store.join(f).exists(), "{f} was the user's and must stay");
    }
    assert!(
        !store.join(ours_old).exists(),
        "clshim's own old temporary file goes"
    );
    assert_eq!(
        entries(&store).len(),
        2,
        "photo.bin and the garbage stay: {:?}",
        entries(&store)
    );
}

/// A claim that is a FIFO, and one that is a link to /dev/zero: the warm step neither
/// blocks on the first nor reads the second without end; it takes both over (no live
/// warm step holds such a claim) and makes both entries, within a minute.
#[test]
fn claims_are_read_bounded_without_following_links() {
    let bin = client();
    let d = scratch("store-claims");
    let store = d.path("store");
    for seed in ["1", "2"] {
        let file = d.path(&format!("c{seed}.bin"));
        let save = format!("--save={}", s(&file));
        let kc = d.path("kc");
        shimmed(
            Driver::Pocl,
            &bin,
            &[&save, &format!("--seed={seed}")],
            &[
                ("CLSHIM_BINARIES", "substitute"),
                ("CLSHIM_NATIVE_STORE", s(&store)),
                ("POCL_CACHE_DIR", s(&kc)),
                SERVICE_OFF,
            ],
        )
        .ok();
    }
    let reqs = requests(&store);
    assert_eq!(reqs.len(), 2);
    let fifo = std::ffi::CString::new(s(&reqs[0].with_extension("claim"))).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink("/dev/zero", reqs[1].with_extension("claim")).unwrap();
    let lib = shim_path();
    let mut c = clshim();
    c.args(["warm", "--store", s(&store), "--lib", s(&lib)]);
    clear_shim_env(&mut c, &[]);
    let mut child = c.stderr(std::process::Stdio::piped()).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > until {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "the warm step hung or failed"
    );
    assert_eq!(entries(&store).len(), 2);
    assert!(requests(&store).is_empty());
}

/// Requests (left when `substitute` hands out a clshim binary whose driver's binary the
/// store lacks; here kept waiting, the service off) are private (the file 0600, its folder
/// 0700) even when trace files are made readable to others.
#[test]
fn requests_are_private() {
    let bin = client();
    let d = scratch("store-private");
    let store = d.path("store");
    let mode = ("CLSHIM_TRACE_MODE", "0644");
    save(&bin, &d, &store, &d.path("b.bin"), &[mode, SERVICE_OFF]);
    let reqs = requests(&store);
    assert_eq!(reqs.len(), 1);
    let m = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(m(&reqs[0]), 0o600, "the request");
    assert_eq!(m(&store.join("requests")), 0o700, "its folder");
    assert_eq!(m(&store), 0o700, "the store");
}

/// The file operations a `substitute` run makes on the requests folder (traced with
/// strace, paths shown for descriptors) are the same with 1,024 requests waiting as with
/// none: a binary query never lists or reads what waits.
#[test]
fn a_binary_query_costs_the_same_file_operations_however_many_requests_wait() {
    if !needs(&[STRACE]) {
        return;
    }
    let bin = client();
    let d = scratch("store-o1");
    let mut counts = Vec::new();
    for waiting in [0usize, 1024] {
        let store = d.path(&format!("store{waiting}"));
        let req = store.join("requests");
        std::fs::create_dir_all(&req).unwrap();
        std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&req, std::fs::Permissions::from_mode(0o700)).unwrap();
        for i in 0..waiting {
            std::fs::write(req.join(format!("{:016x}.req", i + 1)), b"waiting").unwrap();
        }
        let trace = d.path(&format!("strace{waiting}"));
        let mut cmd = std::process::Command::new("strace");
        cmd.args([
            "-f",
            "-y",
            "-qq",
            "-o",
            s(&trace),
            "-e",
            "trace=%file,%desc",
        ])
        .arg(&bin)
        .arg(format!("--save={}", s(&d.path(&format!("c{waiting}.bin")))));
        cmd.env("CLSHIM_BINARIES", "substitute")
            .env("CLSHIM_NATIVE_STORE", &store)
            .env("CLSHIM_WARM_SERVICE", "0")
            .env("POCL_CACHE_DIR", d.path("kc"));
        let out = run(cmd, true);
        assert!(out.status.success(), "{}", stderr(&out));
        let calls = std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .filter(|l| l.contains(&format!("store{waiting}/requests")))
            .count();
        counts.push((calls, requests(&store).len() - waiting));
    }
    assert_eq!(
        counts[0].0, counts[1].0,
        "operations on requests/: {counts:?}"
    );
    assert!(counts[1].0 < 20, "{counts:?}");
    assert_eq!((counts[0].1, counts[1].1), (1, 1), "the run's own request");
}

/// A load taken from the native store is built with the options the application gives
/// the build, as pocl's own binary load is: the build options it answers, and whether
/// the kernel's argument names are there (`-cl-kernel-arg-info` given at the load, not
/// at the save), are what they are without clshim.
#[test]
fn a_native_load_answers_options_and_argument_names_as_pocls_own_load() {
    let bin = client();
    let d = scratch("store-options");
    let store = d.path("store");
    let file = d.path("c.bin");
    save(&bin, &d, &store, &file, &[SERVICE_OFF]);
    let out = warm_out(&store, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let load_opts = "--load-options=-DSCALE=3 -cl-kernel-arg-info";
    let kc = d.path("kc-plain");
    let pocl_bin = d.path("pocl.bin");
    plain(
        Driver::Pocl,
        &bin,
        &[&format!("--save={}", s(&pocl_bin))],
        &[("POCL_CACHE_DIR", s(&kc))],
    )
    .ok();
    let want = plain(
        Driver::Pocl,
        &bin,
        &[&format!("--load={}", s(&pocl_bin)), load_opts],
        &[("POCL_CACHE_DIR", s(&kc))],
    );
    want.ok().has_line("argument name: CL_SUCCESS [out]");
    let got = shimmed(
        Driver::Pocl,
        &bin,
        &[&format!("--load={}", s(&file)), load_opts],
        &[
            ("CLSHIM_BINARIES", "substitute"),
            ("CLSHIM_NATIVE_STORE", s(&store)),
            ("POCL_CACHE_DIR", s(&d.path("kc"))),
        ],
    );
    got.ok();
    assert_eq!(got.one("binary_load")["made_from"], "native");
    assert_eq!(got.stdout(), want.stdout());
}

/// `clshim run` over `mpiexec -n 2`, each rank setting its own `XDG_CACHE_HOME` (as
/// mirgecom's documentation advises): both ranks' requests go to the one store under
/// `$HOME`, and the node's warm service makes both entries by the end of the next job, whose
/// ranks load them and compute on while a request waits (and would wait for the service at
/// their exit). A rank that names another store gets a service of that store. The service
/// is asked for (`--warm-service`, as by default).
#[test]
fn one_store_serves_every_rank() {
    if !needs(&[MPIEXEC]) {
        return;
    }
    let bin = client();
    let d = scratch("store-ranks");
    let home = d.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let lib = shim_path();
    let job = |what: &str, more: &str| {
        let script = format!(
            "export XDG_CACHE_HOME={}/xdg$PMI_RANK POCL_CACHE_DIR={}/kc$PMI_RANK; \
             exec {} --{what}={}/c$PMI_RANK.bin --seed=$PMI_RANK {more}",
            s(&d.path("")),
            s(&d.path("")),
            s(&bin),
            s(&d.path(""))
        );
        let out = clshim_out(
            &[
                "run",
                "--lib",
                s(&lib),
                "--warm-service",
                "--binaries",
                "substitute",
                "--",
                "mpiexec",
                "-n",
                "2",
                "sh",
                "-c",
                &script,
            ],
            &[("HOME", s(&home))],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        stderr(&out)
    };
    let store = home.join(".cache/clshim/native");
    // The loading ranks compute on while a request waits (the service makes them then).
    let waiting = |store: &std::path::Path| format!("--linger-while={}/requests/*.req", s(store));
    job("save", "");
    let err = job("load", &waiting(&store));
    assert_eq!(entries(&store).len(), 2, "{err}");
    assert!(requests(&store).is_empty());
    let elsewhere = d.path("elsewhere");
    for (what, more) in [("save", String::new()), ("load", waiting(&elsewhere))] {
        let script = format!(
            "CLSHIM_NATIVE_STORE={} exec {} --{what}={} {more}",
            s(&elsewhere),
            s(&bin),
            s(&d.path("x.bin"))
        );
        let out = clshim_out(
            &[
                "run",
                "--lib",
                s(&lib),
                "--warm-service",
                "--binaries",
                "substitute",
                "--",
                "sh",
                "-c",
                &script,
            ],
            &[("HOME", s(&home)), ("POCL_CACHE_DIR", s(&d.path("kcx")))],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    assert_eq!(entries(&elsewhere).len(), 1);
}

/// SIGTERM, SIGHUP and SIGINT sent to `clshim run` alone (a job script's `kill
/// $pid`) reach the command, which ends as it handles them; clshim then exits with the
/// command's status and leaves no orphan behind.
#[test]
fn run_passes_on_signals_sent_to_it() {
    let d = scratch("store-signals");
    let lib = shim_path();
    for (sig, name) in [
        (libc::SIGTERM, "TERM"),
        (libc::SIGHUP, "HUP"),
        (libc::SIGINT, "INT"),
    ] {
        let pidfile = d.path(&format!("child-{name}"));
        let script = format!(
            "echo $$ > {}; trap 'echo got {name}; exit 3' {name}; echo ready; \
             while :; do sleep 0.05; done",
            s(&pidfile)
        );
        let mut c = clshim();
        c.args([
            "run",
            "--lib",
            s(&lib),
            "--native-store",
            s(&d.path("store")),
            "--",
            "sh",
            "-c",
            &script,
        ]);
        clear_shim_env(&mut c, &[]);
        // As a job's shell starts it: a test run under `nohup` (SIGHUP ignored, which
        // passes through exec, and which a shell then cannot trap) must not decide this.
        // SAFETY: signal() with SIG_DFL installs no handler and is async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            c.pre_exec(|| {
                for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let mut child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        // The command's shell, known by its pid and its start time: on a busy machine
        // (pid_max 32768) its pid may be another process's soon after it ends.
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let started = process_start(pid).expect("the command's shell runs");
        // SAFETY: a signal to the clshim process this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let until = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break Some(st);
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(100));
        let alive = process_start(pid) == Some(started);
        if alive {
            // SAFETY: the test's own orphan (the same start time), so that its pipe closes.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let err = child
            .stderr
            .take()
            .map(|mut e| {
                let mut s = String::new();
                use std::io::Read;
                let _ = e.read_to_string(&mut s);
                s
            })
            .unwrap_or_default();
        assert!(
            !alive,
            "{name}: the command was left running (clshim's status {status:?}; stderr: {err})"
        );
        let rest: Vec<String> = lines.map_while(Result::ok).collect();
        assert_eq!(rest, [format!("got {name}")], "{name}");
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(3),
            "{name}: the command's status"
        );
    }
}

/// A live (not yet reaped, not a zombie) process's start time in clock ticks after boot,
/// from `/proc/PID/stat`; None when no such process runs.
fn process_start(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // state is field 3, starttime field 22: here 0 and 19.
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// A library that leaves a mark (`$PLANTED_MARKER`) when it is loaded: what another user
/// would plant.
const PLANTED: &str = r#"#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    const char *p = getenv("PLANTED_MARKER");
    if (p) {
        int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            (void)!write(fd, "ran\n", 4);
            close(fd);
        }
    }
}
"#;

/// A request in the user's own store that carries a variable no warm step sets
/// (`LD_PRELOAD`, naming a library that leaves a mark when loaded; the checksum made
/// good): the warm step starts nothing for it, so the library never runs, and it names
/// the request and the variable and removes it (clshim never writes such a request).
/// Before, the worker was started with every variable of the request, and the planted
/// library ran as the warm step's user.
#[test]
fn a_request_with_a_variable_no_warm_step_sets_runs_nothing() {
    let bin = client();
    let d = scratch("store-planted");
    let store = d.path("store");
    save(&bin, &d, &store, &d.path("c.bin"), &[SERVICE_OFF]);
    let req = requests(&store).pop().expect("a request");
    let planted = build_so("planted_marker", PLANTED);
    let marker = d.path("marker");
    let st = std::process::Command::new("sh")
        .args(["-c", ":"])
        .env("LD_PRELOAD", &planted)
        .env("PLANTED_MARKER", &marker)
        .status()
        .unwrap();
    assert!(st.success() && marker.exists(), "the planted library marks");
    std::fs::remove_file(&marker).unwrap();
    let mut r = RequestFile::read(&req);
    r.env
        .push((b"LD_PRELOAD".to_vec(), s(&planted).as_bytes().to_vec()));
    r.env.sort();
    r.write(&req);
    let out = warm_out(&store, &[("PLANTED_MARKER", s(&marker))]);
    let err = stderr(&out);
    assert!(
        !marker.exists(),
        "the request's LD_PRELOAD ran as the warm step's user: {err}"
    );
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("{}: carries LD_PRELOAD", s(&req))) && err.contains("removed"),
        "{err}"
    );
    assert!(entries(&store).is_empty(), "nothing made from it");
    assert!(requests(&store).is_empty(), "not a request clshim left");
}

/// The library takes nothing from a store that is not the user's alone: an entry owned by
/// another user (uid 65534, as root) or that its group or others may write, a store or
/// sources folder its group may write. A `substitute` load then makes the program from
/// its recipe as without the store, its record naming the entry or folder and what is
/// wrong, and the application sees what it sees without clshim; the program cache
/// compiles the build (no `served`); a requests folder its group may write gets no
/// request. Put back as clshim made them, the same entry serves both again. Before, only
/// a store folder others may write was refused.
#[test]
fn entries_and_folders_not_the_users_alone_are_never_loaded() {
    let bin = client();
    let d = scratch("store-owner-entries");
    let store = d.path("store");
    let file = d.path("c.bin");
    save(&bin, &d, &store, &file, &[SERVICE_OFF]);
    let out = warm_out(&store, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let entry = entries(&store).pop().expect("an entry");
    let kc = d.path("kc-plain");
    let pocl_bin = d.path("pocl.bin");
    let plain_env = [("POCL_CACHE_DIR", s(&kc))];
    plain(
        Driver::Pocl,
        &bin,
        &[&format!("--save={}", s(&pocl_bin))],
        &plain_env,
    )
    .ok();
    let load = |f: &Path, env: &[(&str, &str)]| {
        plain(Driver::Pocl, &bin, &[&format!("--load={}", s(f))], env)
    };
    let expected = load(&pocl_bin, &plain_env);
    expected.ok();
    let kc = d.path("kc");
    let shim_env = [
        ("CLSHIM_NATIVE_STORE", s(&store)),
        ("POCL_CACHE_DIR", s(&kc)),
    ];
    let loaded = || {
        let env = [&shim_env[..], &[("CLSHIM_BINARIES", "substitute")]].concat();
        let r = shimmed(Driver::Pocl, &bin, &[&format!("--load={}", s(&file))], &env);
        r.ok();
        r
    };
    let served = || {
        let env = [&shim_env[..], &[("CLSHIM_PROGRAM_CACHE", "1")]].concat();
        let save = format!("--save={}", s(&d.path("served.bin")));
        let r = shimmed(Driver::Pocl, &bin, &[&save], &env);
        r.ok();
        r.one("build").get("served").is_some()
    };
    assert_eq!(loaded().one("binary_load")["made_from"], "native");
    assert!(served(), "the program cache serves the entry");
    let sources = store.join("sources");
    let cases = [
        (&entry, None, 0o600, "owned by uid 65534"),
        (
            &entry,
            Some(0o620),
            0o600,
            "writable by its group (mode 0620)",
        ),
        (&entry, Some(0o606), 0o600, "writable by others (mode 0606)"),
        (
            &store,
            Some(0o770),
            0o700,
            "writable by its group (mode 0770)",
        ),
        (&store, Some(0o707), 0o700, "writable by others (mode 0707)"),
        (&store, None, 0o700, "owned by uid 65534"),
    ];
    for (spoiled, mode, good, why) in cases {
        match mode {
            Some(m) => chmod(spoiled, m),
            None if !give_to_nobody(spoiled) => continue,
            None => {}
        }
        let r = loaded();
        let l = r.one("binary_load");
        assert_eq!(l["made_from"], "recipe", "{why}: {l}");
        let miss = l["native_miss"].as_str().unwrap_or_default();
        assert!(
            miss.contains(&format!("{}: {why}", s(spoiled))),
            "{why}: {miss:?}"
        );
        assert_eq!(r.stdout(), expected.stdout(), "{why}: as without clshim");
        assert!(!served(), "{why}: served by the program cache");
        // SAFETY: no arguments.
        let me = unsafe { libc::geteuid() };
        std::os::unix::fs::lchown(spoiled, Some(me), None).unwrap();
        chmod(spoiled, good);
    }
    chmod(&sources, 0o770);
    assert!(!served(), "a sources folder its group may write");
    chmod(&sources, 0o700);
    assert!(served());
    assert_eq!(loaded().one("binary_load")["made_from"], "native");
    // A requests folder its group may write gets no request; put back, it gets one.
    let requested = |seed: &str| {
        let save = format!("--save={}", s(&d.path(&format!("s{seed}.bin"))));
        let env = [
            &shim_env[..],
            &[("CLSHIM_BINARIES", "substitute"), SERVICE_OFF],
        ]
        .concat();
        shimmed(
            Driver::Pocl,
            &bin,
            &[&save, &format!("--seed={seed}")],
            &env,
        )
        .ok();
        requests(&store).len()
    };
    chmod(&store.join("requests"), 0o770);
    assert_eq!(
        requested("7"),
        0,
        "a request left in a folder others may write"
    );
    chmod(&store.join("requests"), 0o700);
    assert_eq!(requested("8"), 1);
}

/// `clshim warm` reads only what is the user's alone, as the library does: a request
/// owned by another user (uid 65534, when the tests run as root), or one its group or
/// others may write, is refused with its name, what is wrong and what to do, and left
/// for the user to remove (nothing is made from it); a requests folder or a store that
/// its group may write, or another user's store, stops the step (status 1) before it
/// reads a request. Before, every one of them was made into an entry.
#[test]
fn the_warm_step_refuses_what_is_not_the_users_alone() {
    let bin = client();
    let d = scratch("store-owner-requests");
    // What is spoiled, how (a mode, or given to another user), what the step says is
    // wrong with it and what it says to do.
    let cases = [
        ("request", None, "owned by uid 65534", "remove it"),
        (
            "request",
            Some(0o620),
            "writable by its group (mode 0620)",
            "remove it",
        ),
        (
            "request",
            Some(0o602),
            "writable by others (mode 0602)",
            "remove it",
        ),
        (
            "requests",
            Some(0o770),
            "writable by its group (mode 0770)",
            "chmod 700",
        ),
        (
            "store",
            Some(0o770),
            "writable by its group (mode 0770)",
            "chmod 700",
        ),
        ("store", None, "owned by uid 65534", "CLSHIM_NATIVE_STORE"),
    ];
    for (i, (what, mode, why, todo)) in cases.into_iter().enumerate() {
        let store = d.path(&format!("store{i}"));
        save(
            &bin,
            &d,
            &store,
            &d.path(&format!("c{i}.bin")),
            &[SERVICE_OFF],
        );
        let req = requests(&store).pop().expect("a request");
        let spoiled = match what {
            "request" => req.clone(),
            "requests" => store.join("requests"),
            _ => store.clone(),
        };
        match mode {
            Some(m) => chmod(&spoiled, m),
            None if !give_to_nobody(&spoiled) => continue,
            None => {}
        }
        let case = format!("{what} {why}");
        let out = warm_out(&store, &[]);
        let err = stderr(&out);
        assert!(entries(&store).is_empty(), "{case}: made: {err}");
        assert_eq!(requests(&store), vec![req.clone()], "{case}: left in place");
        assert!(
            err.contains(&format!("{}: {why}", s(&spoiled))) && err.contains(todo),
            "{case}: {err}"
        );
        let status = if what == "request" { 0 } else { 1 };
        assert_eq!(out.status.code(), Some(status), "{case}: {err}");
    }
}

/// A worker starts only in the very folder a run left its request from: a request whose
/// folder is now a symbolic link (to a folder that exists), another user's folder (uid
/// 65534, as root) or a file starts no worker; the step names the folder and why, the
/// requests wait (status 1), and nothing is made (a folder that is gone is another case:
/// served_as_compiled.rs). Before, a worker was started in the
/// folder the link led to, and in the other user's folder, and made the entry.
#[test]
fn a_worker_starts_only_in_the_folder_the_run_used() {
    let bin = client();
    let d = scratch("store-owner-folders");
    let real = d.path("real");
    std::fs::create_dir_all(&real).unwrap();
    let link = d.path("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let theirs = d.path("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    let file = d.path("a-file");
    std::fs::write(&file, b"").unwrap();
    let cases = [
        (&link, "a symbolic link"),
        (&theirs, "owned by uid 65534"),
        (&file, "not a directory"),
    ];
    for (i, (folder, why)) in cases.into_iter().enumerate() {
        if folder == &theirs && !give_to_nobody(&theirs) {
            continue;
        }
        let store = d.path(&format!("store{i}"));
        save(
            &bin,
            &d,
            &store,
            &d.path(&format!("c{i}.bin")),
            &[SERVICE_OFF],
        );
        let req = requests(&store).pop().expect("a request");
        let mut r = RequestFile::read(&req);
        r.cwd = s(folder).as_bytes().to_vec();
        r.write(&req);
        let out = warm_out(&store, &[]);
        let err = stderr(&out);
        assert!(entries(&store).is_empty(), "{why}: made: {err}");
        assert_eq!(
            requests(&store),
            vec![req.clone()],
            "{why}: the request waits"
        );
        assert!(
            err.contains(&format!("{}: no worker starts there", s(folder))) && err.contains(why),
            "{why}: {err}"
        );
        assert_eq!(out.status.code(), Some(1), "{why}: {err}");
    }
}

/// The warm worker compiles only where no other user can swap its folder: in a temporary
/// folder that others may write and that is not sticky, it makes nothing, says why and
/// leaves the request; in a sticky one, as `/tmp` is, it makes the entry. A review found
/// the worker compiling there (another user renamed its folder away and put theirs in its
/// place, and pocl wrote the program's files into it) where the ranks refused to share.
#[test]
fn the_warm_worker_compiles_only_where_no_other_user_can_swap_its_folder() {
    let bin = client();
    let d = scratch("store-worker-tmp");
    let store = d.path("store");
    save(&bin, &d, &store, &d.path("c.bin"), &[SERVICE_OFF]);
    let req = requests(&store).pop().expect("a request");
    let open = d.path("open-tmp");
    std::fs::create_dir_all(&open).unwrap();
    chmod(&open, 0o777);
    let out = warm_out(&store, &[("TMPDIR", s(&open))]);
    let err = stderr(&out);
    assert!(entries(&store).is_empty(), "made: {err}");
    assert_eq!(requests(&store), vec![req], "the request waits");
    assert!(
        err.contains("no private folder for pocl's compiles")
            && err.contains(&format!(
                "{} may be written by others and is not sticky",
                s(&open)
            )),
        "{err}"
    );
    let folders = std::fs::read_dir(&open)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .count();
    assert_eq!(folders, 0, "no folder to compile in made there");

    chmod(&open, 0o1777);
    let out = warm_out(&store, &[("TMPDIR", s(&open))]);
    assert_eq!(entries(&store).len(), 1, "{}", stderr(&out));
}

/// A store a run makes (here under `umask 002`, as many sites set) is the user's alone
/// (0700), and so is every folder made for it; and a store that exists already with a mode
/// others may read (0755: made by hand, or by an older clshim) is made the user's alone,
/// with one warning, since it holds program sources. Before, it stayed 0755.
#[test]
fn a_store_a_run_makes_or_meets_is_the_users_alone() {
    let bin = client();
    let d = scratch("store-umask");
    let store = d.path("new/store");
    let script = format!("umask 002; exec {} --save={}", s(&bin), s(&d.path("c.bin")));
    let mut c = std::process::Command::new("sh");
    c.args(["-c", &script])
        .env("CLSHIM_BINARIES", "substitute")
        .env("CLSHIM_NATIVE_STORE", &store)
        .env("CLSHIM_WARM_SERVICE", "0")
        .env("POCL_CACHE_DIR", d.path("kc"));
    let out = run(c, true);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(m(&store), 0o700, "the store");
    assert_eq!(m(&d.path("new")), 0o700, "the folder made for it");
    assert_eq!(m(&store.join("requests")), 0o700, "its requests");
    let open = d.path("open-store");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = save(&bin, &d, &open, &d.path("o.bin"), &[SERVICE_OFF]);
    assert_eq!(m(&open), 0o700, "an existing store others could read");
    assert!(
        stderr(&r.out).contains("others could read it (mode 0755): made yours alone (0700)"),
        "{}",
        stderr(&r.out)
    );
}
