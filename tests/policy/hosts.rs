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
            .env("CLSHIM_WARM_SERVICE", "0")
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

/// The store's requests folder as the test sees it, and the claims in it.
fn claims(store: &Path) -> Vec<std::path::PathBuf> {
    store_files(&store.join("requests"), ".claim")
}

/// The processes of `job` whose command line holds `word`.
fn processes_with(job: &Job, word: &str) -> Vec<u32> {
    job.processes()
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(word))
        })
        .collect()
}

/// A claim is a lease held by its step, named by host, boot and PID namespace. node-a's
/// warm step holds one (its worker frozen mid-build, its command renewing the claim): a
/// second step on node-a in another PID namespace and temporary folder (a second container
/// of one host name: before, it judged the claim by a pid it could not see, and took it
/// over) and a step on node-b both leave it. node-a's job is then killed whole, as a scheduler ends a job; once
/// the claim has gone unrenewed for over a minute (its time set back, here), node-b takes
/// the request over and makes it, and node-b's next run is served.
#[test]
fn a_claim_is_a_lease_that_outlives_no_killed_job() {
    if !needs(&HOSTS) {
        return;
    }
    let cluster = Cluster::start("hosts-lease");
    let home = cluster.home();
    let app = home.join("app");
    let header = cluster.outside(&app.join("hdr/val.h"));
    std::fs::create_dir_all(header.parent().unwrap()).unwrap();
    std::fs::write(&header, "#define VAL 3\n").unwrap();
    let store = cluster.outside(&home.join(".cache/clshim/native"));
    let client = build_c("key_client", &[]);
    let pocl_cache = cluster.scratch().join("pocl");
    let pocl = s(&pocl_cache).to_string();
    let run_client = |host: &Host, tag: &str| {
        let traces = home.join(format!("traces/{tag}"));
        let mut c = program_cache_command(&client, Some("both"), &traces);
        c.arg("--options=-I hdr")
            .current_dir(&app)
            .env("CLSHIM_WARM_SERVICE", "0")
            .env("POCL_CACHE_DIR", &pocl_cache);
        assert_eq!(ok(&host.run(&c), tag), "VAL=3\n");
        let records = checked_traces(&cluster.outside(&traces));
        events(&records, "build")[0]["served"].clone()
    };
    let lib = shim_path();
    let warm_args = ["warm", "--lib", s(&lib), "--timeout", "3000"];
    let a = Host::new(&cluster, "node-a");
    run_client(&a, "cold");
    assert_eq!(requests(&store).len(), 1);

    let mut cmd = clshim();
    cmd.args(warm_args).env("POCL_CACHE_DIR", &pocl);
    let mut holder = a.spawn(&cmd);
    wait_until("node-a's claim", Duration::from_secs(60), || {
        !claims(&store).is_empty()
    });
    // The worker (a tracer and the process it traces) frozen mid-build; the command
    // that started it goes on renewing its claim.
    wait_until("node-a's worker", Duration::from_secs(20), || {
        processes_with(&holder, "--worker-group").len() >= 2
    });
    for p in processes_with(&holder, "--worker-group") {
        // SAFETY: a process of the test's own job.
        unsafe { libc::kill(p as i32, libc::SIGSTOP) };
    }
    let claim = claims(&store).pop().unwrap();

    // A second container of node-a: its own PID namespace and temporary folder (the step
    // in the first one holds the host's lock in its own).
    let other_tmp = cluster.scratch().join("other-container");
    ok(&a.run(&sh(&format!("mkdir -p {}", s(&other_tmp)))), "mkdir");
    let err = stderr(&a.clshim(
        &warm_args,
        &[("POCL_CACHE_DIR", &pocl), ("TMPDIR", s(&other_tmp))],
    ));
    assert!(
        err.contains(": 0 made,") && err.contains("1 claimed by another process"),
        "node-a, another PID namespace: {err}"
    );
    let b = Host::new(&cluster, "node-b");
    let err = stderr(&b.clshim(&warm_args, &[("POCL_CACHE_DIR", &pocl)]));
    assert!(
        err.contains(": 0 made,") && err.contains("1 claimed by another process"),
        "node-b, the lease fresh: {err}"
    );
    assert!(entries(&store).is_empty());

    holder.kill();
    drop(holder);
    assert!(claim.exists(), "a killed step leaves its claim");
    set_times_back(&claim, 61);
    let err = stderr(&b.clshim(&warm_args, &[("POCL_CACHE_DIR", &pocl)]));
    assert!(
        err.contains(": 1 made,"),
        "node-b takes the lapsed claim over: {err}"
    );
    assert!(requests(&store).is_empty() && claims(&store).is_empty());
    assert_eq!(run_client(&b, "served"), "store");
}

/// A job script on the shared home: `n` runs of tests/c/key_client.c, each building its
/// own kernel (`k<i>.cl`, VAL = `first` + i), under `clshim run --program-cache --warm`
/// into the default store on the home, pocl's cache on the host's scratch.
struct BatchJob<'c> {
    cluster: &'c Cluster,
    script: String,
}

impl<'c> BatchJob<'c> {
    fn new(cluster: &'c Cluster, n: usize, first: usize) -> BatchJob<'c> {
        let app = cluster.home().join("app");
        std::fs::create_dir_all(cluster.outside(&app)).unwrap();
        let mut script = String::new();
        for i in 0..n {
            std::fs::write(
                cluster.outside(&app.join(format!("k{i}.cl"))),
                format!(
                    "__kernel void val(__global int *out) {{ out[0] = {}; }}\n",
                    first + i
                ),
            )
            .unwrap();
            script.push_str(&format!(
                "{} --source={}; ",
                s(&build_c("key_client", &[])),
                s(&app.join(format!("k{i}.cl")))
            ));
        }
        BatchJob { cluster, script }
    }

    /// The store, as the test sees it.
    fn store(&self) -> std::path::PathBuf {
        self.cluster
            .outside(&self.cluster.home().join(".cache/clshim/native"))
    }

    /// The job, its traces under the home's `traces/<tag>`.
    fn command(&self, tag: &str) -> Command {
        let home = self.cluster.home();
        let mut c = clshim();
        c.args(["run", "--lib", s(&shim_path()), "--program-cache", "--warm"])
            .args(["--trace-dir", s(&home.join(format!("traces/{tag}")))])
            .args(["--", "sh", "-c", &self.script])
            .current_dir(home.join("app"))
            .env("POCL_CACHE_DIR", self.cluster.scratch().join("pocl"));
        c
    }

    /// The builds the job `tag` recorded, and those served from the store.
    fn builds(&self, tag: &str) -> (usize, usize) {
        let home = self.cluster.home();
        let records = checked_traces(&self.cluster.outside(&home.join(format!("traces/{tag}"))));
        let all = events(&records, "build");
        let served = all.iter().filter(|r| r["served"] == "store").count();
        (all.len(), served)
    }
}

/// A batch job that ends while its warm step runs (`clshim run --program-cache --warm`,
/// killed whole, as a scheduler ends a job when its script ends) loses nothing: each entry
/// it made is whole and serves, what it did not make is still asked for, and the next
/// job completes the work (its step takes over the claim the killed one held, once
/// lapsed); the job after that is served every build.
#[test]
fn a_job_killed_at_its_end_loses_nothing() {
    if !needs(&HOSTS) {
        return;
    }
    let cluster = Cluster::start("hosts-batch");
    let n = 4;
    let job = BatchJob::new(&cluster, n, 1);
    let store = job.store();
    let job_command = |tag: &str| job.command(tag);
    let served = |tag: &str| job.builds(tag).1;

    let a = Host::new(&cluster, "node-a");
    let mut first = a.spawn(&job_command("first"));
    // The job's end comes while its warm step works: as soon as it made one entry.
    wait_until("the first entry", Duration::from_secs(120), || {
        !entries(&store).is_empty()
    });
    first.kill();
    drop(first);
    drop(a);
    let made = entries(&store).len();
    assert!(
        made < n,
        "the step was ended before it finished ({made} made)"
    );
    // Each build is made or still asked for (a request whose entry the step had just
    // written when it was killed is both: the next step finds its entry present).
    let stem = |p: &std::path::PathBuf| p.file_stem().unwrap().to_os_string();
    let known: std::collections::BTreeSet<_> = entries(&store)
        .iter()
        .chain(&requests(&store))
        .map(stem)
        .collect();
    assert_eq!(known.len(), n, "each build is made or still asked for");
    for c in claims(&store) {
        set_times_back(&c, 61);
    }

    let b = Host::new(&cluster, "node-b");
    let second = b.spawn(&job_command("second")).wait();
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(served("second"), made, "what the killed job made serves");
    assert_eq!(entries(&store).len(), n, "the next job completed the work");
    assert!(
        requests(&store).is_empty() && claims(&store).is_empty(),
        "left: {:?} {:?}; the second job's stderr: {}",
        requests(&store),
        claims(&store),
        stderr(&second)
    );
    let third = b.spawn(&job_command("third")).wait();
    assert!(third.status.success(), "{}", stderr(&third));
    assert_eq!(served("third"), n, "every build served");
}

/// Two nodes run the same job at the same time, each with its warm step at its end
/// (`clshim run --program-cache --warm`), into the one store on the shared home: each
/// program is made once in the cluster (the steps split the requests by their claims,
/// and neither makes what the other made), and a third node, fresh scratch, is served
/// every build. (Issue 31 found, with steps in the background killed with their jobs,
/// claims that held a third host's builds for an hour: it was served 6 of 8.)
#[test]
fn two_nodes_warming_at_once_make_each_program_once() {
    if !needs(&HOSTS) {
        return;
    }
    let cluster = Cluster::start("hosts-together");
    let n = 4;
    let job = BatchJob::new(&cluster, n, 10);
    let store = job.store();
    let job_command = |tag: &str| job.command(tag);
    let made = |err: &str| -> usize {
        let Some(line) = err.lines().find(|l| l.starts_with("clshim warm: ")) else {
            return 0;
        };
        let before = line.split(" made,").next().unwrap_or("");
        before.rsplit(' ').next().unwrap().parse().unwrap_or(0)
    };
    let builds = |tag: &str| job.builds(tag);

    let a = Host::new(&cluster, "node-a");
    let b = Host::new(&cluster, "node-b");
    let job_a = a.spawn(&job_command("a"));
    let job_b = b.spawn(&job_command("b"));
    let (out_a, out_b) = (job_a.wait(), job_b.wait());
    let (err_a, err_b) = (stderr(&out_a), stderr(&out_b));
    assert!(
        out_a.status.success() && out_b.status.success(),
        "{err_a}\n{err_b}"
    );
    let expected: String = (0..n).map(|i| format!("VAL={}\n", i + 10)).collect();
    assert_eq!(stdout(&out_a), expected);
    assert_eq!(stdout(&out_b), expected);
    let (made_a, made_b) = (made(&err_a), made(&err_b));
    assert_eq!(
        made_a + made_b,
        n,
        "each program made once in the cluster\nnode-a: {err_a}\nnode-b: {err_b}"
    );
    assert_eq!(entries(&store).len(), n);
    assert!(
        requests(&store).is_empty() && claims(&store).is_empty(),
        "left: {:?} {:?}",
        requests(&store),
        claims(&store)
    );
    drop(a);
    drop(b);

    let c = Host::new(&cluster, "node-c");
    let out_c = c.run(&job_command("c"));
    assert!(out_c.status.success(), "{}", stderr(&out_c));
    assert_eq!(stdout(&out_c), expected);
    let (total, served) = builds("c");
    assert_eq!((total, served), (n, n), "node-c served every build");
    eprintln!(
        "two nodes at once: node-a made {made_a}, node-b {made_b}; node-a's builds served \
         {:?}, node-b's {:?}; node-c served {served} of {total}",
        builds("a"),
        builds("b")
    );
}
