//! Ranks of a node share one compile of a program (`CLSHIM_SHARE_BUILDS`, on with the
//! program cache): processes of tests/c/key_client.c stand for the ranks, each with its own
//! pocl kernel cache (as MPI sites advise), one temporary folder between them (the node's).
//! A second rank takes the first's compile and builds as pocl's cache hit, with the same
//! output and a fraction of the CPU; a peer killed mid-compile is taken over; a peer that
//! hangs is waited for a bounded time; and with the sharing off each rank compiles its own.

use crate::common::*;
use serde_json::Value;
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn client() -> PathBuf {
    build_c("key_client", &[])
}

/// A kernel of `n` statements, whose VAL is 7: long enough that a compile takes a while.
fn kernel(n: usize) -> String {
    let mut s = String::from("__kernel void val(__global int *out) {\n  int x = 7;\n");
    for i in 0..n {
        s.push_str(&format!("  x = (x * {}) % 8191 + {};\n", i % 13 + 2, i % 7));
    }
    s.push_str("  out[0] = 7 + (x & 0);\n}\n");
    s
}

struct Node {
    d: Scratch,
    bin: PathBuf,
    src: PathBuf,
}

impl Node {
    /// A node whose ranks run tests/c/share_client.c instead.
    fn of_share_client(tag: &str) -> Node {
        Node {
            bin: build_c("share_client", &[]),
            ..Node::new(tag, 1)
        }
    }

    fn new(tag: &str, statements: usize) -> Node {
        let d = scratch(tag);
        let src = d.path("k.cl");
        std::fs::write(&src, kernel(statements)).unwrap();
        std::fs::create_dir_all(d.path("tmp")).unwrap();
        Node {
            bin: client(),
            src,
            d,
        }
    }

    /// The client as rank `rank`, under the program cache (sharing as `share` says), with
    /// no store: what these tests show is between peers alone (tests/policy/hosts.rs and
    /// store_safety.rs show what the store keeps).
    fn rank(&self, rank: usize, share: bool) -> Command {
        let traces = self.d.path(&format!("traces-{rank}"));
        let mut cmd = program_cache_command(&self.bin, Some("both"), &traces);
        cmd.arg(format!("--source={}", s(&self.src)));
        clear_shim_env(&mut cmd, &[]);
        cmd.env("HOME", self.d.path("home"))
            .env("TMPDIR", self.d.path("tmp"))
            .env("POCL_CACHE_DIR", self.d.path(&format!("kc-{rank}")))
            .env("CLSHIM_SHARE_BUILDS", if share { "1" } else { "0" })
            .env("CLSHIM_NATIVE_STORE", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// Rank `rank`'s one record of `event`.
    fn one(&self, rank: usize, event: &str) -> Value {
        let records = checked_traces(&self.d.path(&format!("traces-{rank}")));
        let found: Vec<&Value> = records.iter().filter(|r| r["event"] == event).collect();
        assert_eq!(found.len(), 1, "{records:?}");
        found[0].clone()
    }

    /// Rank `rank`'s one build record.
    fn build(&self, rank: usize) -> Value {
        self.one(rank, "build")
    }

    /// Rank `rank`'s one first launch record.
    fn launch(&self, rank: usize) -> Value {
        self.one(rank, "first_launch")
    }

    /// The node's folder of shared compiles.
    fn shared(&self) -> PathBuf {
        // SAFETY: no arguments.
        let uid = unsafe { libc::geteuid() };
        self.d.path(&format!("tmp/clshim-{uid}-shared-builds"))
    }

    /// Waits until a rank holds a lock of the node's folder (it compiles).
    fn wait_for_a_holder(&self) {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let held = store_files(&self.shared(), ".lock").iter().any(|l| {
                let f = std::fs::File::open(l).unwrap();
                // SAFETY: an open descriptor of this process; a lock not waited for.
                let free =
                    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
                !free
            });
            if held {
                return;
            }
            assert!(Instant::now() < until, "no rank took the node's lock");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn finish(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

fn cpu(build: &Value) -> f64 {
    build["cpu_seconds"].as_f64().unwrap_or(0.0)
}

/// The next job, on a fresh node (its own temporary folder and pocl caches) and the store
/// the first job kept its compiles in: both ranks take the build and its first launch from
/// the store, and their records say so, the rank that met its peer's launch too (its
/// kernel came with the build from the store; it was once recorded as pocl's own cache's).
#[test]
fn the_next_jobs_ranks_take_every_build_and_first_launch_from_the_store() {
    let n = Node::new("share-next", 200);
    let store = n.d.path("store");
    let job = |ranks: [usize; 2], tmp: &str| {
        std::fs::create_dir_all(n.d.path(tmp)).unwrap();
        let children: Vec<Child> = ranks
            .iter()
            .map(|&r| {
                n.rank(r, true)
                    .env("CLSHIM_NATIVE_STORE", &store)
                    .env("TMPDIR", n.d.path(tmp))
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            assert_eq!(finish(c), "VAL=7\n");
        }
    };
    job([0, 1], "tmp");
    job([2, 3], "tmp-next");
    for r in [2, 3] {
        assert_eq!(
            n.build(r)["shared"],
            "from_store",
            "rank {r}: {}",
            n.build(r)
        );
        assert_eq!(
            n.launch(r)["shared"],
            "from_store",
            "rank {r}: {}",
            n.launch(r)
        );
    }
}

/// A node whose pocl cache holds the program and the kernel of its one launch already (a
/// run without clshim), and a store that kept the build with that launch and another (a
/// job that launched the kernel with two sizes): the next rank's build and first launch are
/// pocl's own cache's, and their records say so. Only the other size's kernel, which that
/// cache lacked, is written from the store; the build and launch were recorded as the
/// store's (the build because something was written, the launch because a kernel of its
/// name came from the store, though pocl used the one it had made itself).
#[test]
fn a_build_and_launch_that_used_pocls_own_cache_are_not_the_stores() {
    let n = Node::of_share_client("share-own-kernel");
    let store = n.d.path("store");
    let out = n
        .rank(0, true)
        .arg("--sizes=2")
        .env("CLSHIM_NATIVE_STORE", &store)
        .output()
        .unwrap();
    assert_eq!(enqueue_and_out(&stdout(&out)).1, 6, "{}", stderr(&out));
    let mut plain = Command::new(&n.bin);
    plain.arg("--sizes=1");
    clear_shim_env(&mut plain, &[]);
    let plain = plain
        .env("HOME", n.d.path("home"))
        .env("POCL_CACHE_DIR", n.d.path("kc-1"))
        .output()
        .unwrap();
    assert_eq!(enqueue_and_out(&stdout(&plain)).1, 3, "{}", stderr(&plain));
    std::fs::create_dir_all(n.d.path("tmp-next")).unwrap();
    let out = n
        .rank(1, true)
        .arg("--sizes=1")
        .env("CLSHIM_NATIVE_STORE", &store)
        .env("TMPDIR", n.d.path("tmp-next"))
        .output()
        .unwrap();
    assert_eq!(enqueue_and_out(&stdout(&out)).1, 3, "{}", stderr(&out));
    assert_eq!(n.build(1)["shared"], "own_cache", "{}", n.build(1));
    assert_eq!(n.launch(1)["shared"], "own_cache", "{}", n.launch(1));
}

/// A lease on a build in the store whose holder, by this host's name, is an hour old while
/// a process of its pid lives (the pid was reused after its holder was killed, or its holder
/// hangs): the lease is taken over, as another host's of that age is, and the build compiles
/// at once. It was waited for at every build of its key while that process lived.
#[test]
fn an_hour_old_lease_of_this_host_is_taken_over_whoever_has_its_pid() {
    let n = Node::new("share-old-lease", 200);
    let store = n.d.path("store");
    let rank = |r: usize, tmp: &str| {
        std::fs::create_dir_all(n.d.path(tmp)).unwrap();
        let child = n
            .rank(r, true)
            .env("CLSHIM_NATIVE_STORE", &store)
            .env("TMPDIR", n.d.path(tmp))
            .spawn()
            .unwrap();
        assert_eq!(finish(child), "VAL=7\n");
    };
    rank(0, "tmp");
    let keys: Vec<PathBuf> = std::fs::read_dir(store.join("compiles"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    for kc in store_files(&keys[0], ".kc") {
        std::fs::remove_file(kc).unwrap();
    }
    let lease = keys[0].join("build.lease");
    std::fs::write(
        &lease,
        clshim_format::kept::lease_text(&clshim_format::store::host_id(), std::process::id()),
    )
    .unwrap();
    set_times_back(&lease, 2 * 3600);
    rank(1, "tmp-next");
    let b = n.build(1);
    assert_eq!(b["shared"], "compiled", "{b}");
    assert!(b.get("peer_wait_seconds").is_none(), "{b}");
}

/// A FIFO in place of a build's lease in the store (the store's files are read without
/// blocking on one, as a file the user left there by mistake): the build is never held by
/// it. Reading the lease once blocked in open() for a writer that never came, and the
/// build with it.
#[test]
fn a_fifo_in_place_of_a_lease_holds_no_build() {
    let n = Node::new("share-fifo-lease", 200);
    let store = n.d.path("store");
    let rank = |r: usize, tmp: &str| {
        std::fs::create_dir_all(n.d.path(tmp)).unwrap();
        let mut child = n
            .rank(r, true)
            .env("CLSHIM_NATIVE_STORE", &store)
            .env("TMPDIR", n.d.path(tmp))
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                panic!("rank {r} still builds after a minute");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(finish(child), "VAL=7\n");
    };
    rank(0, "tmp");
    let keys: Vec<PathBuf> = std::fs::read_dir(store.join("compiles"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    for kc in store_files(&keys[0], ".kc") {
        std::fs::remove_file(kc).unwrap();
    }
    let lease = keys[0].join("build.lease");
    let c = std::ffi::CString::new(s(&lease)).unwrap();
    // SAFETY: a valid name and mode.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    set_times_back(&lease, 60);
    rank(1, "tmp-next");
    let b = n.build(1);
    assert_eq!(b["shared"], "compiled", "{b}");
}

/// Two programs built one after the other in one pocl cache, their kernels of one name
/// (a job's processes, as tests/policy/hosts.rs runs them): the next job, in a fresh pocl
/// cache, takes both builds and both first launches from the store, whatever else the
/// second's kept build carries (the first's program folder, made within its second).
#[test]
fn programs_of_one_pocl_cache_each_take_their_first_launch_from_the_store() {
    let n = Node::new("share-two-programs", 200);
    let store = n.d.path("store");
    let other = n.d.path("k2.cl");
    std::fs::write(&other, kernel(201)).unwrap();
    let job = |cache: &str, tmp: &str, traces: [&str; 2]| {
        std::fs::create_dir_all(n.d.path(tmp)).unwrap();
        for (src, t) in [&n.src, &other].into_iter().zip(traces) {
            let mut cmd = program_cache_command(&n.bin, Some("both"), &n.d.path(t));
            cmd.arg(format!("--source={}", s(src)));
            clear_shim_env(&mut cmd, &[]);
            let out = cmd
                .env("HOME", n.d.path("home"))
                .env("TMPDIR", n.d.path(tmp))
                .env("POCL_CACHE_DIR", n.d.path(cache))
                .env("CLSHIM_NATIVE_STORE", &store)
                .output()
                .unwrap();
            assert_eq!(stdout(&out), "VAL=7\n", "{}", stderr(&out));
        }
    };
    job("kc-a", "tmp-a", ["traces-0", "traces-1"]);
    job("kc-b", "tmp-b", ["traces-2", "traces-3"]);
    for r in [2, 3] {
        assert_eq!(n.build(r)["shared"], "from_store", "{}", n.build(r));
        assert_eq!(n.launch(r)["shared"], "from_store", "{}", n.launch(r));
    }
}

/// Two ranks build one program, the second while the first compiles: the first compiles
/// ("compiled"), the second takes its compile ("from_peer") into its own pocl cache and
/// builds as pocl's cache hit, in a fraction of the first's CPU; both print what a run
/// without clshim prints. A third rank, later, takes the published compile without
/// waiting. With the sharing off, each compiles its own.
#[test]
fn ranks_of_a_node_compile_a_program_once() {
    let n = Node::new("share-once", 400);
    let mut plain = Command::new(&n.bin);
    plain
        .arg(format!("--source={}", s(&n.src)))
        .env("POCL_CACHE_DIR", n.d.path("kc-plain"));
    clear_shim_env(&mut plain, &[]);
    let want = stdout(&plain.output().unwrap());
    assert_eq!(want, "VAL=7\n");

    let first = n.rank(0, true).spawn().unwrap();
    n.wait_for_a_holder();
    let second = n.rank(1, true).spawn().unwrap();
    assert_eq!(finish(first), want);
    assert_eq!(finish(second), want);
    let (a, b) = (n.build(0), n.build(1));
    assert_eq!(a["shared"], "compiled", "{a}");
    assert_eq!(b["shared"], "from_peer", "{b}");
    assert!(b["peer_wait_seconds"].as_f64().unwrap() > 0.0, "{b}");
    assert!(
        cpu(&b) < cpu(&a) / 3.0,
        "a peer's compile costs a cache hit: {} s against {} s",
        cpu(&b),
        cpu(&a)
    );
    // The kernel's first launch, where pocl compiles the kernel that runs, is shared
    // the same way (published once the command completed): whichever rank launched first
    // compiled, and the other took its kernel, for next to no CPU.
    let (la, lb) = (n.launch(0), n.launch(1));
    let (made, took) = if la["shared"] == "compiled" {
        (la, lb)
    } else {
        (lb, la)
    };
    assert_eq!(made["shared"], "compiled", "{made}");
    assert_eq!(took["shared"], "from_peer", "{took}");
    assert!(
        cpu(&took) < cpu(&made) / 3.0,
        "a peer's kernel costs a cache hit: {} s against {} s",
        cpu(&took),
        cpu(&made)
    );
    assert_eq!(finish(n.rank(2, true).spawn().unwrap()), want);
    assert_eq!(n.build(2)["shared"], "from_peer");
    assert_eq!(n.launch(2)["shared"], "from_peer");

    let off = Node::new("share-off", 400);
    for rank in 0..2 {
        assert_eq!(finish(off.rank(rank, false).spawn().unwrap()), want);
        assert!(off.build(rank)["shared"].is_null());
        assert!(off.launch(rank)["shared"].is_null());
    }
}

/// A peer killed mid-compile drops its lock with it: the rank waiting for it compiles
/// ("compiled_after_waiting"), and prints what a run without clshim prints.
#[test]
fn a_peer_killed_mid_compile_is_taken_over() {
    let n = Node::new("share-killed", 1500);
    let mut first = n.rank(0, true).spawn().unwrap();
    n.wait_for_a_holder();
    let second = n.rank(1, true).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    first.kill().unwrap();
    let _ = first.wait();
    assert_eq!(finish(second), "VAL=7\n");
    let b = n.build(1);
    assert_eq!(b["shared"], "compiled_after_waiting", "{b}");
    assert!(b["peer_wait_seconds"].as_f64().unwrap() >= 0.2, "{b}");
}

/// A peer that hangs mid-compile (stopped) is waited for at most what the waiting rank
/// expects the compile to take (at least half a second), then the rank compiles on its own.
#[test]
fn a_hung_peer_is_waited_for_a_bounded_time() {
    let n = Node::new("share-hung", 1500);
    let mut first = n.rank(0, true).spawn().unwrap();
    n.wait_for_a_holder();
    // SAFETY: the test's own child.
    unsafe { libc::kill(first.id() as i32, libc::SIGSTOP) };
    let started = Instant::now();
    let second = n.rank(1, true).spawn().unwrap();
    assert_eq!(finish(second), "VAL=7\n");
    let took = started.elapsed();
    let b = n.build(1);
    assert_eq!(b["shared"], "compiled_after_waiting", "{b}");
    let waited = b["peer_wait_seconds"].as_f64().unwrap();
    assert!(
        (0.5..30.0).contains(&waited),
        "waited {waited} s for a stopped peer (the whole run {took:?})"
    );
    first.kill().unwrap();
    let _ = first.wait();
}

/// A rank's first build, nothing measured yet on its node, waits for a peer that is still
/// compiling past what it guesses a compile takes, and takes the peer's compile: at 16
/// ranks the seed's kind of workload once had 10 ranks give up on their first program
/// after the guess's half second and compile it again. The peer here compiles slowly (its
/// CPU shared with busy loops), as on a busy node, until the waiting rank has waited a
/// second; then at full speed, so that how fast this machine compiles decides neither
/// whether the waiter waited long enough nor whether its ten times the guess run out.
#[test]
fn a_first_build_waits_for_a_peer_still_compiling_past_the_guess() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    let n = Node::new("share-first-slow", 40);
    // A CPU this test may use (a CI job's may not include CPU 0).
    // SAFETY: a zeroed set filled by the call, for this process.
    let cpu = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        (0..libc::CPU_SETSIZE as usize)
            .find(|&c| libc::CPU_ISSET(c, &set))
            .unwrap_or(0)
    };
    let on_cpu = move || {
        // SAFETY: plain calls on this (child) process before it execs.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    };
    /// Busy loops, ended however the test ends.
    struct Hogs(Vec<Child>);
    impl Drop for Hogs {
        fn drop(&mut self) {
            for h in &mut self.0 {
                let _ = h.kill();
                let _ = h.wait();
            }
        }
    }
    let hogs = Hogs(
        (0..3)
            .map(|_| {
                let mut hog = Command::new("sh");
                hog.args(["-c", "while :; do :; done"]);
                // SAFETY: only async-signal-safe calls between fork and exec.
                unsafe {
                    hog.pre_exec(move || {
                        on_cpu();
                        Ok(())
                    });
                }
                hog.spawn().unwrap()
            })
            .collect(),
    );
    let mut slow = n.rank(0, true);
    // SAFETY: as above.
    unsafe {
        slow.pre_exec(move || {
            on_cpu();
            Ok(())
        });
    }
    let first = slow.spawn().unwrap();
    n.wait_for_a_holder();
    let mut second = n.rank(1, true).spawn().unwrap();
    // The second rank waits once it has the node's lock open: a second more, then the
    // first compiles alone on its CPU.
    let lock = std::fs::metadata(&store_files(&n.shared(), ".lock")[0]).unwrap();
    let fds = PathBuf::from(format!("/proc/{}/fd", second.id()));
    let until = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_dir(&fds).is_ok_and(|fds| {
        fds.flatten().any(|fd| {
            std::fs::metadata(fd.path())
                .is_ok_and(|m| m.dev() == lock.dev() && m.ino() == lock.ino())
        })
    }) && second.try_wait().unwrap().is_none()
    {
        assert!(Instant::now() < until, "the second rank never waited");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_secs(1));
    drop(hogs);
    let out = finish(second);
    assert_eq!(out, "VAL=7\n");
    assert_eq!(finish(first), "VAL=7\n");
    let (a, b) = (n.build(0), n.build(1));
    assert_eq!(a["shared"], "compiled", "{a}");
    assert_eq!(b["shared"], "from_peer", "{b} (the peer's: {a})");
    let waited = b["peer_wait_seconds"].as_f64().unwrap();
    assert!(waited > 0.5, "waited {waited} s: {b} (the peer's: {a})");
}

/// Two ranks build the same source with the same options, but each reads its own
/// `val.h` (their working folders differ): the same key, so the second waits for the
/// first's compile and copies it, but pocl, which finds a program by the hash of the text
/// it preprocesses, does not take it and compiles the second rank's own. Each rank prints
/// its own header's value, as without clshim, and the second rank's records say that it
/// compiled after waiting, not that it took the peer's compile.
#[test]
fn a_peer_compile_that_read_another_header_is_not_taken() {
    let n = Node::new("share-header", 1500);
    let src = format!(
        "#include \"val.h\"\n{}",
        kernel(1500).replace("out[0] = 7 +", "out[0] = VAL +")
    );
    std::fs::write(&n.src, src).unwrap();
    let cwd = |rank: usize, val: u32| {
        let d = n.d.path(&format!("cwd-{rank}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("val.h"), format!("#define VAL {val}\n")).unwrap();
        d
    };
    let first = n.rank(0, true).current_dir(cwd(0, 1)).spawn().unwrap();
    n.wait_for_a_holder();
    let second = n.rank(1, true).current_dir(cwd(1, 2)).spawn().unwrap();
    assert_eq!(finish(first), "VAL=1\n");
    assert_eq!(finish(second), "VAL=2\n");
    let (a, b) = (n.build(0), n.build(1));
    assert_eq!(a["shared"], "compiled", "{a}");
    assert_eq!(b["shared"], "compiled_after_waiting", "{b}");
    let lb = n.launch(1);
    assert_ne!(lb["shared"], "from_peer", "{lb}");
}

/// Sharing is never done where another user could swap what is shared: in a temporary
/// folder that others may write and that is not sticky (another user could rename the
/// shared-builds folder away and put a compile of theirs in its place), or when the
/// shared-builds folder is not the user's alone. The rank then compiles its own, says
/// once on stderr why ranks do not share there, and its records say nothing of sharing.
#[test]
fn sharing_is_refused_where_another_user_could_swap_it() {
    use std::os::unix::fs::PermissionsExt;
    let n = Node::new("share-unsafe-tmp", 50);
    let open = n.d.path("tmp");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = n.rank(0, true).output().unwrap();
    assert_eq!(stdout(&out), "VAL=7\n");
    let err = stderr(&out);
    assert!(
        err.contains("ranks do not share compiles here") && err.contains("is not sticky"),
        "{err}"
    );
    assert!(n.build(0)["shared"].is_null());
    assert!(!n.shared().exists(), "nothing made there");

    // Sticky, as /tmp is: shared.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = n.rank(1, true).output().unwrap();
    assert_eq!(stdout(&out), "VAL=7\n");
    assert_eq!(n.build(1)["shared"], "compiled", "{}", stderr(&out));

    // A shared-builds folder another user made first (root runs the tests: it can give
    // the folder away; as another user the test cannot).
    // SAFETY: no arguments.
    if unsafe { libc::geteuid() } == 0 {
        let m = Node::new("share-foreign-folder", 50);
        std::fs::create_dir_all(m.shared()).unwrap();
        let c = std::ffi::CString::new(m.shared().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path; 65534 is nobody.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        let out = m.rank(0, true).output().unwrap();
        assert_eq!(stdout(&out), "VAL=7\n");
        let err = stderr(&out);
        assert!(err.contains("ranks do not share compiles here"), "{err}");
        assert!(m.build(0)["shared"].is_null());
    }
}

/// With the sharing off (`CLSHIM_SHARE_BUILDS=0`) and a store, a rank keeps what it
/// compiles and makes nothing in the node's temporary folder, nor warns of one it could not
/// share in: it shares with no one there. Its compile's measure once made the node's
/// folder (and tidied it), and a temporary folder others may write drew the warning.
#[test]
fn with_the_sharing_off_the_nodes_folder_is_left_alone() {
    use std::os::unix::fs::PermissionsExt;
    let n = Node::new("share-off-node-folder", 50);
    let store = n.d.path("store");
    let out = n
        .rank(0, false)
        .env("CLSHIM_NATIVE_STORE", &store)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "VAL=7\n", "{}", stderr(&out));
    assert_eq!(n.build(0)["shared"], "compiled", "{}", n.build(0));
    assert_eq!(n.build(0)["kept_in_store"], true, "{}", n.build(0));
    assert!(!n.shared().exists(), "the node's folder made");
    let open = n.d.path("tmp");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = n
        .rank(1, false)
        .env("CLSHIM_NATIVE_STORE", n.d.path("store-2"))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "VAL=7\n");
    assert!(
        !stderr(&out).contains("ranks do not share compiles here"),
        "{}",
        stderr(&out)
    );
}

/// The seconds a share_client's enqueue calls took, and its output value.
fn enqueue_and_out(stdout: &str) -> (f64, i64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("enqueue="))
        .unwrap_or_else(|| panic!("{stdout}"));
    let mut parts = line.split_whitespace();
    let e = parts.next().unwrap()["enqueue=".len()..].parse().unwrap();
    let o = parts.next().unwrap()["out=".len()..].parse().unwrap();
    (e, o)
}

/// Files under `dir` whose names end with `.so` (pocl's linked kernels).
fn shared_objects(dir: &std::path::Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            n += shared_objects(&p);
        } else if p.extension().is_some_and(|x| x == "so") {
            n += 1;
        }
    }
    n
}

/// A rank whose launch waits behind a user event (its inputs come from another rank after
/// the enqueue) holds the launch's lock until its command completes; a peer launching the
/// same kernel waits for it at most what it expects the kernel's compile to take (from
/// the program's code, not its 200 KB of comments), then compiles its own, and says so.
/// Its enqueue once waited 48 s for the gated peer.
#[test]
fn a_gated_launch_holds_its_peers_no_longer_than_a_compile() {
    gated_launch("share-gate", &["--pad=200000"]);
}

/// The same with 40 KB of declarations inside `#if 0` (which the compile never sees): the
/// peer's enqueue once waited 56 s, the disabled text counted as code.
#[test]
fn a_gated_launch_sizes_its_wait_without_disabled_code() {
    gated_launch("share-gate-if0", &["--pad=40000", "--pad-disabled"]);
}

fn gated_launch(tag: &str, pad: &[&str]) {
    let n = Node::of_share_client(tag);
    let gate = n.d.path("gate-open");
    let mut first = n
        .rank(0, true)
        .arg(format!("--gate={}", s(&gate)))
        .args(pad)
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(first.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "enqueued");
    let second = n.rank(1, true).args(pad).output().unwrap();
    let (enqueue, out) = enqueue_and_out(&stdout(&second));
    assert_eq!(out, 3, "{}", stderr(&second));
    assert!(
        enqueue < 3.0,
        "the peer's enqueue waited {enqueue} s for a launch held by a gate"
    );
    let l = n.launch(1);
    assert_eq!(l["shared"], "compiled_after_waiting", "{l}");
    std::fs::write(&gate, "").unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(first.wait().unwrap().success());
    assert!(rest.iter().any(|l| l.ends_with("out=3")), "{rest:?}");
}

/// The next job, its ranks taking the build with its kernel from the store: a rank whose
/// launch waits behind a user event holds the launch's lock until its command completes, so
/// its peer gives up waiting for it; the peer made nothing (pocl found the kernel the store
/// put in its cache) and its record says the store's, not that it compiled.
#[test]
fn a_peer_that_gave_up_waiting_but_made_nothing_did_not_compile() {
    let n = Node::of_share_client("share-gate-kept");
    let store = n.d.path("store");
    std::fs::create_dir_all(n.d.path("tmp-first")).unwrap();
    let out = n
        .rank(0, true)
        .env("CLSHIM_NATIVE_STORE", &store)
        .env("TMPDIR", n.d.path("tmp-first"))
        .output()
        .unwrap();
    assert_eq!(enqueue_and_out(&stdout(&out)).1, 3, "{}", stderr(&out));
    let gate = n.d.path("gate-open");
    let mut first = n
        .rank(1, true)
        .arg(format!("--gate={}", s(&gate)))
        .env("CLSHIM_NATIVE_STORE", &store)
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut lines = std::io::BufReader::new(first.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "enqueued");
    let second = n
        .rank(2, true)
        .env("CLSHIM_NATIVE_STORE", &store)
        .output()
        .unwrap();
    std::fs::write(&gate, "").unwrap();
    assert_eq!(
        enqueue_and_out(&stdout(&second)).1,
        3,
        "{}",
        stderr(&second)
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(first.wait().unwrap().success());
    assert!(rest.iter().any(|l| l.ends_with("out=3")), "{rest:?}");
    for r in [1, 2] {
        assert_eq!(n.build(r)["shared"], "from_store", "{}", n.build(r));
    }
    let l = n.launch(2);
    assert_eq!(l["shared"], "from_store", "{l}");
    assert!(l["peer_wait_seconds"].as_f64().unwrap() > 0.0, "{l}");
    assert_eq!(n.launch(1)["shared"], "from_store", "{}", n.launch(1));
}

/// One process that builds the same source as two programs and launches the second while
/// the first's launch waits behind a user event does not wait for its own lock: two locks
/// of one file exclude each other even in one process. It once waited 9.7 s.
#[test]
fn a_process_never_waits_for_its_own_lock() {
    let n = Node::of_share_client("share-self");
    let out = n
        .rank(0, true)
        .args(["--self", "--pad=200000"])
        .output()
        .unwrap();
    let (enqueue, value) = enqueue_and_out(&stdout(&out));
    assert_eq!(value, 6, "{}", stderr(&out));
    assert!(enqueue < 1.0, "the two enqueues took {enqueue} s");
}

/// A kernel launched with many sizes publishes each specialisation pocl made once: no
/// more linked kernels in the node's folder than in the rank's own pocl cache (each
/// launch once published every specialisation so far: 4,891 files for 100 sizes).
#[test]
fn many_sizes_publish_each_specialisation_once() {
    let n = Node::of_share_client("share-sizes");
    let out = n.rank(0, true).arg("--sizes=24").output().unwrap();
    assert_eq!(enqueue_and_out(&stdout(&out)).1, 3 * 24, "{}", stderr(&out));
    let own = shared_objects(&n.d.path("kc-0"));
    let published = shared_objects(&n.shared());
    assert!(own > 0);
    assert!(
        published <= own,
        "{published} linked kernels published for {own} in the rank's own cache"
    );
}

/// Ranks whose own pocl caches already hold the program (kept between jobs) do not queue
/// for the lock one after another: the first, answered by its cache, leaves a mark that
/// there is nothing to take, and the next goes on with its own cache at once, their records
/// saying so (`own_cache`), not that they compiled.
#[test]
fn ranks_with_warm_caches_do_not_queue() {
    let n = Node::new("share-warm-caches", 400);
    for rank in 0..2 {
        assert_eq!(finish(n.rank(rank, false).spawn().unwrap()), "VAL=7\n");
    }
    for rank in 0..2 {
        let _ = std::fs::remove_dir_all(n.d.path(&format!("traces-{rank}")));
        assert_eq!(finish(n.rank(rank, true).spawn().unwrap()), "VAL=7\n");
    }
    let (a, b) = (n.build(0), n.build(1));
    // Neither compiled: each build was its own cache's hit (before, the first was said to
    // have compiled).
    assert_eq!(a["shared"], "own_cache", "{a}");
    assert_eq!(b["shared"], "own_cache", "{b}");
    assert!(b["peer_wait_seconds"].as_f64().unwrap() < 0.5, "{b}");
}

/// The node's folder on a disk that fills up while a rank publishes its compile (a
/// temporary folder on a small tmpfs, pocl's caches elsewhere): a compile that could not
/// be copied whole is not published, so a later rank compiles its own and prints what a
/// run without clshim prints (before, the part copied was published, and the later rank's
/// pocl read a truncated `program.bc`: `CL_BUILD_PROGRAM_FAILURE`).
#[test]
fn a_compile_not_copied_whole_is_never_taken() {
    if !needs(&[ROOT]) {
        return;
    }
    let n = Node::new("share-full", 400);
    let tmp = n.d.path("tmp");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", s(&tmp)])
        .status()
        .is_ok_and(|st| st.success());
    assert!(mounted, "mount a tmpfs on {}", s(&tmp));
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(tmp.clone());
    // 16 KiB left: room for the node's folder and its locks, not for the 33 KB bitcode.
    std::fs::write(tmp.join("filler"), vec![0u8; 48 << 10]).unwrap();

    assert_eq!(finish(n.rank(0, true).spawn().unwrap()), "VAL=7\n");
    assert_eq!(n.build(0)["shared"], "compiled", "{}", n.build(0));
    let out = n.rank(1, true).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "VAL=7\n", "{}", stderr(&out));
    let b = n.build(1);
    assert_ne!(b["shared"], "from_peer", "{b}");
}

/// Where the temporary folder outlives jobs (`/tmp` on a workstation), the node's folder
/// does not only grow: a rank removes what has not changed for a week (published
/// compiles, marks and locks; a publisher's leftovers after an hour), at most once a day,
/// and keeps the rest; its own build is shared as before.
#[test]
fn the_node_folder_keeps_a_week_of_compiles() {
    let n = Node::new("share-sweep", 20);
    assert_eq!(finish(n.rank(0, true).spawn().unwrap()), "VAL=7\n");
    let folder = n.shared();
    let published: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !s(p).contains("/."))
        .collect();
    // The build's compile and its kernels' specialisations.
    assert_eq!(published.len(), 2, "{published:?}");
    let week = 7 * 24 * 3600;
    let old_dir = folder.join("00000000000000aa");
    std::fs::create_dir_all(old_dir.join("AB/CDEF")).unwrap();
    std::fs::write(old_dir.join("AB/CDEF/program.bc"), b"old").unwrap();
    set_times_back(&old_dir, week + 3600);
    let old_lock = folder.join("00000000000000aa.lock");
    std::fs::write(&old_lock, b"").unwrap();
    set_times_back(&old_lock, week + 3600);
    let leftover = folder.join(".tmp-00000000000000bb-1");
    std::fs::create_dir_all(&leftover).unwrap();
    set_times_back(&leftover, 7200);
    let recent = folder.join("00000000000000cc");
    std::fs::create_dir_all(&recent).unwrap();
    set_times_back(&recent, week - 3600);
    // The stamp of the last tidying, a day old: this rank tidies.
    set_times_back(&folder.join(".swept"), 24 * 3600 + 60);

    assert_eq!(finish(n.rank(1, true).spawn().unwrap()), "VAL=7\n");
    assert_eq!(n.build(1)["shared"], "from_peer", "{}", n.build(1));
    assert!(!old_dir.exists() && !old_lock.exists() && !leftover.exists());
    assert!(recent.exists() && published.iter().all(|p| p.exists()));
    let stray: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");

    // Tidied less than a day ago: an old compile stays until the next day's tidying.
    std::fs::create_dir_all(&old_dir).unwrap();
    set_times_back(&old_dir, week + 3600);
    assert_eq!(finish(n.rank(2, true).spawn().unwrap()), "VAL=7\n");
    assert!(old_dir.exists());
}

/// A week-old build's published kernels go with their launches' marks, however young
/// (one kernel launched again and again keeps its mark fresh): the next rank to launch
/// compiles and publishes again, and the one after takes it from the peer. Once, the
/// kernels went and the marks stayed, and every later rank took nothing and compiled.
#[test]
fn published_kernels_go_with_their_marks() {
    let n = Node::new("share-sweep-marks", 20);
    assert_eq!(finish(n.rank(0, true).spawn().unwrap()), "VAL=7\n");
    let folder = n.shared();
    let kernels: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| s(p).ends_with(".kernels"))
        .collect();
    assert_eq!(kernels.len(), 1, "{kernels:?}");
    set_times_back(&kernels[0], 7 * 24 * 3600 + 3600);
    set_times_back(&folder.join(".swept"), 24 * 3600 + 60);

    assert_eq!(finish(n.rank(1, true).spawn().unwrap()), "VAL=7\n");
    assert_eq!(n.launch(1)["shared"], "compiled", "{}", n.launch(1));
    assert!(kernels[0].exists(), "published again");
    assert_eq!(finish(n.rank(2, true).spawn().unwrap()), "VAL=7\n");
    assert_eq!(n.launch(2)["shared"], "from_peer", "{}", n.launch(2));
}
