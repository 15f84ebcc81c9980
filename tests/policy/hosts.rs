//! Several cluster nodes simulated on this machine (tests/common/hosts.rs): first that the
//! simulation is what it claims (own hostnames and PID namespaces, one home seen through
//! a network file system, scratch private to each node, a job killed whole), then the
//! native store as a cluster uses it: filled by `clshim warm` on one node, in the home
//! every node mounts, and serving a build on another node whose scratch, and so pocl's
//! kernel cache, starts empty. Each test needs root, FUSE, sshfs and openssh-server, and
//! skips with one line without them.

use crate::common::hosts::*;
use crate::common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn sh(script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    c
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout: {}\nstderr: {}",
        out.status,
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// Two hosts: each its own hostname and pid 1, the home shared through each host's own
/// sshfs mount, the scratch of one never seen by the other (nor by its own next job),
/// `flock` kept on each host, and a background job killed whole, its `sleep` children
/// included, even one in a session of its own.
#[test]
fn hosts_share_the_home_and_nothing_else() {
    if !needs(&HOSTS) {
        return;
    }
    let t0 = Instant::now();
    let cluster = Cluster::start("hosts-smoke");
    let a = Host::new(&cluster, "node-a");
    let b = Host::new(&cluster, "node-b");
    let up = t0.elapsed();

    let who = "printf '%s %s %s\\n' \"$(hostname)\" $$ $(ls /proc | grep -c '^[0-9]')";
    for host in [&a, &b] {
        let out = ok(&host.run(&sh(who)), "who");
        let f: Vec<&str> = out.split_whitespace().collect();
        assert_eq!(&f[..2], [host.name(), "1"], "{out}");
        // The shell, its command substitution and `ls`: the machine's others are not seen.
        let seen: usize = f[2].parse().unwrap();
        assert!(seen <= 4, "processes seen on {}: {out}", host.name());
    }

    // The home: a network file system on each host, one server's files.
    let home = cluster.home();
    let mounted = format!(
        "grep -c ' {} [^ ]* - fuse.sshfs ' /proc/self/mountinfo",
        s(&home)
    );
    assert_eq!(ok(&a.run(&sh(&mounted)), "a's mount"), "1\n");
    ok(&a.run(&sh("echo from-a > \"$HOME/shared\"")), "a writes");
    assert_eq!(
        ok(&b.run(&sh("cat \"$HOME/shared\"")), "b reads"),
        "from-a\n"
    );
    assert_eq!(
        std::fs::read_to_string(cluster.outside(&home.join("shared"))).unwrap(),
        "from-a\n"
    );
    // Written on b after a read it: a's next read sees the new text, however soon.
    ok(&b.run(&sh("echo from-b > \"$HOME/shared\"")), "b writes");
    assert_eq!(
        ok(&a.run(&sh("cat \"$HOME/shared\"")), "a reads"),
        "from-b\n"
    );

    // The scratch: a's stays a's, across a's commands, and b cannot reach it by any path.
    let only_a = cluster.scratch().join("only-a");
    ok(&a.run(&sh("echo a > \"$TMPDIR/only-a\"")), "a's scratch");
    assert_eq!(ok(&a.run(&sh("cat \"$TMPDIR/only-a\"")), "again"), "a\n");
    assert!(a.outside(&only_a).is_file());
    assert!(!b.outside(&only_a).exists());
    let look = format!(
        "test -e {} && echo seen; test -e {} && echo seen; echo done",
        s(&only_a),
        s(&a.outside(&only_a))
    );
    assert_eq!(ok(&b.run(&sh(&look)), "b looks"), "done\n");
    // sshfs's limit, unlike NFS: a lock held on a holds off nothing on b.
    let lock = home.join("lock");
    let held = cluster.scratch().join("held");
    let holder = format!(
        "exec flock {} sh -c 'touch \"$TMPDIR/held\"; exec sleep 1000'",
        s(&lock)
    );
    let holder = a.spawn(&sh(&holder));
    wait_until("a's lock", Duration::from_secs(20), || {
        a.outside(&held).exists()
    });
    let try_lock = format!("flock -n {} echo taken || echo refused", s(&lock));
    assert_eq!(ok(&b.run(&sh(&try_lock)), "b locks"), "taken\n");
    assert_eq!(ok(&a.run(&sh(&try_lock)), "a locks"), "refused\n");
    drop(holder);
    let checks = t0.elapsed() - up;

    // A job that leaves children behind, one of them in a session of its own, which a
    // process-group kill would miss.
    let mut job = a.spawn(&sh("sleep 1000 & setsid sleep 1001 & wait"));
    let comm = |p: &u32| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
    let sleeps = |procs: &[u32]| procs.iter().filter(|p| comm(p) == "sleep\n").count();
    // Each sleep is `sh` or `setsid` until it has run its exec.
    wait_until("the job's two sleeps", Duration::from_secs(20), || {
        sleeps(&job.processes()) == 2
    });
    let procs = job.processes();
    assert_eq!(procs.len(), 3, "the shell and its sleeps: {procs:?}");
    assert!(procs.contains(&job.pid1().unwrap()));
    let t_kill = Instant::now();
    job.kill();
    let kill = t_kill.elapsed();
    for p in &procs {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "{p} survived");
    }
    assert!(job.processes().is_empty());
    drop(job);
    // The node's next job: the same name, its scratch wiped, the home as it was.
    drop(a);
    let a = Host::new(&cluster, "node-a");
    let again = format!("test -e {} || cat \"$HOME/shared\"", s(&only_a));
    assert_eq!(ok(&a.run(&sh(&again)), "node-a again"), "from-b\n");
    drop((a, b));
    eprintln!(
        "timing: cluster and 2 hosts up {up:?}, checks {checks:?}, kill {kill:?}, total {:?}",
        t0.elapsed()
    );
}

/// The native store in the shared home: node-a runs tests/c/key_client.c under `clshim
/// run --program-cache` with requests on (its header on the home, pocl's cache on a's
/// scratch), then `clshim warm` there; the job ends and a's scratch goes with it. node-b,
/// fresh scratch, same home, runs the client and its build is served from the store, with
/// the same output.
#[test]
fn a_store_filled_on_one_host_serves_another() {
    if !needs(&HOSTS) {
        return;
    }
    let t0 = Instant::now();
    let cluster = Cluster::start("hosts-store");
    let home = cluster.home();
    let app = home.join("app");
    let header = cluster.outside(&app.join("hdr/val.h"));
    std::fs::create_dir_all(header.parent().unwrap()).unwrap();
    std::fs::write(&header, "#define VAL 5\n").unwrap();
    // The default store, under HOME: on the shared home, as a user's would be.
    let store = cluster.outside(&home.join(".cache/clshim/native"));
    let client = build_c("key_client", &[]);
    let pocl_cache = cluster.scratch().join("pocl");
    let run_client = |host: &Host, traces: &Path| {
        let mut c = program_cache_command(&client, Some("both"), traces);
        c.arg("--options=-I hdr")
            .current_dir(&app)
            .env("CLSHIM_WARM", "1")
            .env("POCL_CACHE_DIR", &pocl_cache);
        let out = host.run(&c);
        assert_eq!(ok(&out, host.name()), "VAL=5\n");
        let records = checked_traces(&cluster.outside(traces));
        let builds: Vec<_> = events(&records, "build").into_iter().cloned().collect();
        assert_eq!(builds.len(), 1, "{records:?}");
        let process = one_event(&records, "process").clone();
        (builds[0].clone(), process)
    };

    let a = Host::new(&cluster, "node-a");
    let t_a = Instant::now();
    let (build, process) = run_client(&a, &home.join("traces/a"));
    let cold = t_a.elapsed();
    assert!(build["served"].is_null(), "{build}");
    assert_eq!(process["host"], "node-a", "{process}");
    assert!(
        !requests(&store).is_empty(),
        "a request in the shared store"
    );

    let t_w = Instant::now();
    let pocl = s(&pocl_cache);
    let out = a.clshim(
        &["warm", "--lib", s(&shim_path())],
        &[("POCL_CACHE_DIR", pocl)],
    );
    let log = stderr(&out);
    ok(&out, "clshim warm on node-a");
    let warm = t_w.elapsed();
    assert_eq!(entries(&store).len(), 1, "{log}");
    assert!(requests(&store).is_empty(), "{log}");
    assert!(
        a.outside(&pocl_cache).is_dir(),
        "pocl's cache on a's scratch"
    );
    drop(a);

    let b = Host::new(&cluster, "node-b");
    let t_b = Instant::now();
    let (build, process) = run_client(&b, &home.join("traces/b"));
    let served = t_b.elapsed();
    assert_eq!(build["served"], "store", "{build}\nwarm: {log}");
    assert_eq!(process["host"], "node-b", "{process}");
    // pocl's cache, as node-b's process saw it, was on node-b's own tmpfs.
    let pocl_fs = process["caches"].as_array().unwrap().iter();
    let pocl_fs: Vec<_> = pocl_fs
        .filter(|c| c["cache"] == "pocl")
        .map(|c| &c["fs"])
        .collect();
    assert_eq!(pocl_fs, ["tmpfs"], "{process}");
    drop(b);
    eprintln!(
        "timing: node-a cold {cold:?}, warm {warm:?}, node-b served {served:?}, total {:?}",
        t0.elapsed()
    );
}
