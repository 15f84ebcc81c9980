//! Simulated cluster nodes on this one machine, for tests of what clshim does across hosts
//! (a store filled on one node and used on another, a job ended by its scheduler). This
//! module owns the `Cluster` (a shared home served by an sshd of its own on 127.0.0.1,
//! the paths every host shares) and its `Host`s (a hostname, a private tmpfs as node-local
//! scratch, the home mounted over sshfs through a mount of its own) and their `Job`s (one
//! command in a PID namespace of its own, pid 1 inside, killed whole as a batch scheduler
//! ends a job). Each host's mount of the home has its own page cache, so two hosts share
//! files as NFS clients do, through a server and never through memory; sshfs's and the
//! kernel's caches of names and attributes are off, so a host sees another's change at
//! once (NFS promises it at the next open). Unlike NFS, whose `flock` locks reach the
//! server, sshfs keeps them on each mount: a lock taken on one host holds off no other.
//! Everything lives in the test's scratch folder: keys, sshd's
//! configuration and logs; the machine's own ssh configuration is not read or changed.
//! Dropping a value undoes what it made (jobs killed, file systems unmounted, sshd
//! stopped), also while a test panics. It needs root, `unshare`, FUSE, sshfs and
//! openssh-server: a test checks `needs(&HOSTS)` first. Not re-exported by `common`: tests
//! `use crate::common::hosts::*`.

use super::{build_c, clear_shim_env, clshim, scratch, Scratch};
use std::ffi::OsStr;
use std::fs::File;
use std::marker::PhantomData;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest a host's command may run before `Job::wait` ends it and fails the test: a
/// hung command must not hang the test run.
pub const JOB_LIMIT: Duration = Duration::from_secs(180);

/// sshfs's options. `dir_cache=no` and zero FUSE timeouts: each lookup and `stat` asks the
/// server, so what one host wrote is what another sees at its next open, however soon (NFS
/// guarantees that at open, which FUSE's one-second caches do not, and a test must not
/// depend on timing within a second). The machine's ssh configuration, agent and known
/// hosts are left out; the key is the test's own.
const SSHFS_OPTIONS: &str = "dir_cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0,\
                             BatchMode=yes,IdentitiesOnly=yes,IdentityAgent=none,\
                             StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,\
                             LogLevel=ERROR";

/// Runs inside a host's fresh namespaces: its hostname, its scratch and its mount of the
/// home at the paths every host shares, then the folder holding every host's parts hidden
/// (no host reaches another's scratch or mount, nor the keys), then the command as pid 1.
/// Arguments: name, node tmpfs, scratch path, home mount, home path, hidden folder, cwd.
const WRAPPER: &str = r#"set -e
hostname "$1"
mount --bind "$2" "$3"
mount --bind "$4" "$5"
mount -t tmpfs -o ro,size=4k,mode=0555 hidden "$6"
cd "$7"
shift 7
exec "$@"
"#;

/// The shared home's server and the paths common to every host. Hosts borrow it, so it
/// outlives them; dropped, it stops its sshd. Make it, its hosts and their jobs in the
/// test's own thread: what they start dies with the thread that started it
/// (`die_with_parent`), never outliving a test process killed before its values drop.
pub struct Cluster {
    d: Scratch,
    port: u16,
    sshd: Option<Child>,
    logs: AtomicUsize,
}

impl Cluster {
    /// A fresh, empty shared home and its sshd on a free port of 127.0.0.1. Panics with
    /// sshd's log when it does not start.
    pub fn start(tag: &str) -> Cluster {
        unmount_orphans();
        let d = scratch(tag);
        for sub in [
            "home",
            "scratch",
            "outside/export",
            "outside/ssh",
            "outside/mounts",
            "outside/nodes",
            "outside/logs",
        ] {
            std::fs::create_dir_all(d.path(sub)).unwrap();
        }
        let ssh = d.path("outside/ssh");
        for key in ["host_key", "user_key"] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "clshim-test", "-f"])
                .arg(ssh.join(key))
                .output()
                .expect("run ssh-keygen");
            assert!(out.status.success(), "ssh-keygen: {}", super::stderr(&out));
        }
        // `restrict`: the key opens an sftp session and nothing else.
        let public = std::fs::read_to_string(ssh.join("user_key.pub")).unwrap();
        std::fs::write(ssh.join("authorized_keys"), format!("restrict {public}")).unwrap();
        let mut cluster = Cluster {
            d,
            port: 0,
            sshd: None,
            logs: AtomicUsize::new(0),
        };
        // Another process may take the free port before sshd binds it: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            match cluster.start_sshd() {
                Ok(()) => return cluster,
                Err(log) if log.contains("Bind to port") || log.contains("Cannot bind") => {
                    last = log
                }
                Err(log) => panic!("sshd did not start: {log}"),
            }
        }
        panic!("sshd found no free port: {last}");
    }

    fn start_sshd(&mut self) -> Result<(), String> {
        let ssh = self.d.path("outside/ssh");
        self.port = free_port();
        let config = ssh.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "ListenAddress 127.0.0.1\nPort {port}\nHostKey {ssh}/host_key\n\
                 AuthorizedKeysFile {ssh}/authorized_keys\nPidFile none\nUsePAM no\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PermitRootLogin prohibit-password\nStrictModes no\n\
                 ForceCommand internal-sftp\nSubsystem sftp internal-sftp\n\
                 AllowTcpForwarding no\nAllowAgentForwarding no\nX11Forwarding no\n\
                 PermitTTY no\nLogLevel ERROR\n",
                port = self.port,
                ssh = ssh.display()
            ),
        )
        .unwrap();
        let log = File::create(ssh.join("sshd.log")).unwrap();
        // sshd insists on its privilege-separation folder /run/sshd, which only a started
        // service makes: a tmpfs over /run in a mount namespace of its own gives it one
        // without touching the machine's /run.
        let script = format!(
            "mount -t tmpfs -o mode=0755,size=1m sshd-run /run && mkdir -m 0755 /run/sshd \
             && exec /usr/sbin/sshd -D -e -f '{}'",
            config.display()
        );
        let mut c = Command::new("unshare");
        c.args(["--mount", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        die_with_parent(&mut c);
        let mut child = c.spawn().expect("spawn sshd");
        let log = ssh.join("sshd.log");
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "{status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            if ssh_banner(self.port) {
                self.sshd = Some(child);
                return Ok(());
            }
            if Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "no answer on port {} in 20 s: {}",
                    self.port,
                    std::fs::read_to_string(&log).unwrap_or_default()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The shared home, at this path on every host (on the test's side, an empty folder:
    /// look through `outside`).
    pub fn home(&self) -> PathBuf {
        self.d.path("home")
    }

    /// Node-local scratch, at this path on every host, each its own tmpfs.
    pub fn scratch(&self) -> PathBuf {
        self.d.path("scratch")
    }

    /// The file server's copy of the shared home: what every host sees in `home()`.
    pub fn export(&self) -> PathBuf {
        self.d.path("outside/export")
    }

    /// Where the test process sees `inside`, a path as hosts see it: under the home, the
    /// server's copy; any other path as it is (the scratch folder is each host's own:
    /// `Host::outside`).
    pub fn outside(&self, inside: &Path) -> PathBuf {
        match inside.strip_prefix(self.home()) {
            Ok(rel) => self.export().join(rel),
            Err(_) => inside.to_path_buf(),
        }
    }

    /// The port the sshd listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    fn hidden(&self) -> PathBuf {
        self.d.path("outside")
    }

    fn log_files(&self, name: &str) -> (PathBuf, PathBuf) {
        let n = self.logs.fetch_add(1, Ordering::Relaxed);
        let base = self.d.path(&format!("outside/logs/{name}-{n}"));
        (base.with_extension("out"), base.with_extension("err"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut sshd) = self.sshd.take() {
            // SAFETY: the pid is our unreaped child's, so no other process's.
            unsafe { libc::kill(sshd.id() as i32, libc::SIGTERM) };
            if !wait_exit(&mut sshd, Duration::from_secs(5)) {
                let _ = sshd.kill();
                let _ = sshd.wait();
            }
        }
    }
}

/// One simulated node. Its scratch (a tmpfs) and its mount of the home last as long as
/// the value, across its commands, as a node's do across the commands of a job.
pub struct Host<'c> {
    cluster: &'c Cluster,
    name: String,
    /// This host's tmpfs, as the test process sees it.
    node: PathBuf,
    node_mounted: bool,
    /// This host's sshfs mount of the home, as the test process sees it.
    mount: PathBuf,
    sshfs: Option<Child>,
}

impl<'c> Host<'c> {
    /// A node named `name` (letters, digits and `-`): a fresh tmpfs and its own sshfs
    /// mount of the shared home. A name may come back once its host is dropped (the node's
    /// next job, its scratch wiped). Panics, with sshfs's messages, when the mount fails.
    pub fn new(cluster: &'c Cluster, name: &str) -> Host<'c> {
        assert!(
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "host name {name:?}"
        );
        let node = cluster.d.path(&format!("outside/nodes/{name}"));
        let mount = cluster.d.path(&format!("outside/mounts/{name}"));
        assert!(
            mount_type(&node).is_none(),
            "a second live host named {name}"
        );
        std::fs::create_dir_all(&node).unwrap();
        std::fs::create_dir_all(&mount).unwrap();
        let mut host = Host {
            cluster,
            name: name.to_string(),
            node,
            node_mounted: false,
            mount,
            sshfs: None,
        };
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1g,mode=0755"])
            .arg(format!("node-{name}"))
            .arg(&host.node)
            .output()
            .expect("run mount");
        assert!(out.status.success(), "mount tmpfs: {}", super::stderr(&out));
        host.node_mounted = true;
        host.mount_home();
        host
    }

    fn mount_home(&mut self) {
        let (log, _) = self.cluster.log_files(&format!("sshfs-{}", self.name));
        let log_file = File::create(&log).unwrap();
        let ssh = self.cluster.d.path("outside/ssh");
        // FUSE splits options at commas, unless escaped.
        let key = ssh
            .join("user_key")
            .display()
            .to_string()
            .replace(',', "\\,");
        let options = format!(
            "{SSHFS_OPTIONS},port={},IdentityFile={key}",
            self.cluster.port
        );
        // In the foreground, so that it stays this process's child: waited for at the
        // end, never left behind as a zombie.
        let mut c = Command::new("sshfs");
        c.args(["-f", "-F", "/dev/null", "-o", &options])
            .arg(format!(
                "root@127.0.0.1:{}",
                self.cluster.export().display()
            ))
            .arg(&self.mount)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file);
        die_with_parent(&mut c);
        let mut child = c.spawn().expect("spawn sshfs");
        let until = Instant::now() + Duration::from_secs(20);
        while mount_type(&self.mount).as_deref() != Some("fuse.sshfs") {
            let ended = child.try_wait().ok().flatten();
            if ended.is_some() || Instant::now() > until {
                if ended.is_none() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                panic!(
                    "sshfs did not mount the home for {} ({}): {}",
                    self.name,
                    ended.map(|s| s.to_string()).unwrap_or("20 s".into()),
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.sshfs = Some(child);
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the test process sees `inside`, a path as this host sees it: under the home,
    /// the server's copy; under the scratch folder, this host's tmpfs; else as it is.
    pub fn outside(&self, inside: &Path) -> PathBuf {
        match inside.strip_prefix(self.cluster.scratch()) {
            Ok(rel) => self.node.join(rel),
            Err(_) => self.cluster.outside(inside),
        }
    }

    /// `cmd` (program, arguments, environment, working folder) as it runs on this host:
    /// inside `unshare` with the host's hostname, a PID namespace whose pid 1 is the
    /// command, and the host's mounts. HOME is the shared home and TMPDIR the scratch
    /// unless `cmd` sets them; with no working folder, it starts in the home. The test
    /// process's clshim variables are removed unless `cmd` sets them (`env_clear` on `cmd`
    /// is not seen: name what to remove).
    pub fn command(&self, cmd: &Command) -> Command {
        let c = self.cluster;
        let cwd = cmd
            .get_current_dir()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| c.home());
        let mut w = Command::new("unshare");
        // --kill-child: should unshare itself die, the namespace's pid 1 goes with it.
        w.args(["--uts", "--pid", "--mount", "--fork", "--mount-proc"])
            .args(["--kill-child", "--", "sh", "-c", WRAPPER, "host"])
            .arg(&self.name)
            .arg(&self.node)
            .arg(c.scratch())
            .arg(&self.mount)
            .arg(c.home())
            .arg(c.hidden())
            .arg(cwd)
            .arg(cmd.get_program())
            .args(cmd.get_args())
            .env("HOME", c.home())
            .env("TMPDIR", c.scratch())
            .stdin(Stdio::null());
        let mut keep: Vec<String> = Vec::new();
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => w.env(k, v),
                None => w.env_remove(k),
            };
            keep.push(k.to_string_lossy().into_owned());
        }
        let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
        clear_shim_env(&mut w, &keep);
        w
    }

    /// Starts `cmd` on this host (see `command`) in the background. Its standard output
    /// and error go to files that `Job::wait` reads.
    pub fn spawn(&self, cmd: &Command) -> Job<'_> {
        let (out, err) = self.cluster.log_files(&self.name);
        let mut w = self.command(cmd);
        w.stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap());
        die_with_parent(&mut w);
        let mut child = w.spawn().expect("spawn unshare");
        // The namespace's pid 1 is unshare's one child: found now, while it surely lives,
        // so that `kill` never has to look for it among processes that ended.
        let until = Instant::now() + Duration::from_secs(20);
        let pid1 = loop {
            if let Some(p) = children_of(child.id()).first() {
                break Some(*p);
            }
            if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > until {
                break None;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        let ns = pid1.and_then(|p| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok());
        Job {
            what: format!("{} on {}", cmd.get_program().to_string_lossy(), self.name),
            child,
            pid1,
            ns,
            out,
            err,
            status: None,
            _host: PhantomData,
        }
    }

    /// Runs `cmd` on this host to its end (at most `JOB_LIMIT`).
    pub fn run(&self, cmd: &Command) -> Output {
        self.spawn(cmd).wait()
    }

    /// `clshim ARGS` of this build on this host, with `env`.
    pub fn clshim(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = clshim();
        c.args(args).envs(env.iter().copied());
        self.run(&c)
    }

    /// tests/c/NAME.c (built by `build_c`) on this host, with `args` and `env`.
    pub fn client(&self, name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(build_c(name, &[]));
        c.args(args).envs(env.iter().copied());
        self.run(&c)
    }
}

impl Drop for Host<'_> {
    fn drop(&mut self) {
        if let Some(mut sshfs) = self.sshfs.take() {
            unmount(&self.mount);
            if !wait_exit(&mut sshfs, Duration::from_secs(5)) {
                let _ = sshfs.kill();
                let _ = sshfs.wait();
            }
        }
        if self.node_mounted {
            unmount(&self.node);
        }
    }
}

/// A command running on a host. It borrows the host, so it ends before the host's mounts
/// do; dropped while running, it is killed.
pub struct Job<'h> {
    what: String,
    child: Child,
    pid1: Option<u32>,
    ns: Option<PathBuf>,
    out: PathBuf,
    err: PathBuf,
    status: Option<ExitStatus>,
    _host: PhantomData<&'h ()>,
}

impl Job<'_> {
    /// The namespace's pid 1 as the test process sees it (None when it ended before the
    /// job was started).
    pub fn pid1(&self) -> Option<u32> {
        self.pid1
    }

    /// Every process of the job's PID namespace, as the test process numbers them
    /// (children that left the job's process group or session included): what a
    /// scheduler's end of the job must leave none of.
    pub fn processes(&self) -> Vec<u32> {
        let Some(ns) = &self.ns else {
            return Vec::new();
        };
        all_pids()
            .into_iter()
            .filter(|p| {
                std::fs::read_link(format!("/proc/{p}/ns/pid"))
                    .ok()
                    .as_ref()
                    == Some(ns)
            })
            .collect()
    }

    /// Ends the job as a batch scheduler does: SIGKILL to the namespace's pid 1, upon which
    /// the kernel kills every other process in it; returns once all are gone (unshare,
    /// which waits for pid 1, has ended). Nothing is said of the status: util-linux 2.38's
    /// unshare answers a pid 1 killed by SIGKILL with exit status 1.
    pub fn kill(&mut self) {
        if self.status.is_some() {
            return;
        }
        if let Some(p) = self.pid1 {
            // Still unshare's child: it cannot have been reaped and its pid reused.
            if parent_of(p) == Some(self.child.id()) {
                // SAFETY: signals a process checked above to be the job's pid 1.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
        }
        if !wait_exit(&mut self.child, Duration::from_secs(20)) {
            let _ = self.child.kill();
        }
        self.status = Some(self.child.wait().expect("wait for unshare"));
    }

    /// Waits for the job's end (at most `JOB_LIMIT`, after which it is killed and the test
    /// fails) and returns its status and output.
    pub fn wait(mut self) -> Output {
        if self.status.is_none() {
            if !wait_exit(&mut self.child, JOB_LIMIT) {
                self.kill();
                panic!(
                    "{} ran past {JOB_LIMIT:?}; its stderr: {}",
                    self.what,
                    String::from_utf8_lossy(&std::fs::read(&self.err).unwrap_or_default())
                );
            }
            self.status = self.child.try_wait().ok().flatten();
        }
        Output {
            status: self.status.expect("the job's status"),
            stdout: std::fs::read(&self.out).unwrap_or_default(),
            stderr: std::fs::read(&self.err).unwrap_or_default(),
        }
    }
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill();
        }
    }
}

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < until, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A port of 127.0.0.1 that nothing listened on a moment ago.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

/// Whether an SSH server answers on `port`.
fn ssh_banner(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 8];
    s.read_exact(&mut buf).is_ok() && &buf == b"SSH-2.0-"
}

/// Whether `child` ended within `limit` (then it is reaped).
fn wait_exit(child: &mut Child, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) if Instant::now() > until => return false,
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// The process gets SIGKILL when the thread that started it ends, so that nothing a test
/// started (sshd, sshfs, a host's namespace) outlives a test process that was killed
/// before its values were dropped.
fn die_with_parent(c: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        c.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// Unmounts `path`, lazily when it is busy, saying so on stderr when neither works (Drop
/// must not panic).
fn unmount(path: &Path) {
    let ok = |args: &[&OsStr]| {
        Command::new("umount")
            .args(args)
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if !ok(&[path.as_os_str()]) && !ok(&[OsStr::new("-l"), path.as_os_str()]) {
        eprintln!("note: could not unmount {}", path.display());
    }
}

/// Unmounts what test processes that no longer run left mounted in their scratch folders
/// (`TAG-PID-N` under target/<profile>/test-scratch): one killed before its values were
/// dropped leaves its hosts' tmpfs and dead sshfs mounts, which would otherwise stay until
/// the machine restarts. A live process's mounts are left alone.
fn unmount_orphans() {
    let root = super::target_dir().join("test-scratch");
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    for line in info.lines() {
        let Some(point) = line.split(' ').nth(4).map(unescape_mountinfo) else {
            continue;
        };
        let Ok(rel) = Path::new(&point).strip_prefix(&root) else {
            continue;
        };
        let Some(folder) = rel.iter().next().and_then(OsStr::to_str) else {
            continue;
        };
        let pid = folder
            .rsplit('-')
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            unmount(Path::new(&point));
        }
    }
}

/// The type of the file system mounted at `path` in this process's mount namespace.
fn mount_type(path: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = path.to_str()?;
    info.lines().rev().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let dash = fields.iter().position(|f| *f == "-")?;
        (unescape_mountinfo(fields.get(4)?) == want)
            .then(|| fields.get(dash + 1).map(|t| t.to_string()))?
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The parent of `pid`, from /proc/PID/stat (its fields after the command name's `)`).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The processes whose parent is `pid` (this kernel may lack /proc/PID/task/TID/children).
fn children_of(pid: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|p| parent_of(*p) == Some(pid))
        .collect()
}
