//! `clshim warm`: the step that makes the driver's own binaries of builds (the library's
//! `store::warm` does the making, in worker processes; see docs/binary-policies.md), run
//! by hand for the compiles jobs kept (`promote`: what only it does) and, as `--service`,
//! by the library on each node while a job runs, for the binaries an application asks for
//! (`service`). This module runs the step: it checks the store (`trust`), waits for any
//! other step on this host working on the same store (a lock in the temporary folder), lists
//! the requests by group (`groups`), starts workers on every CPU this process may use
//! (`settings`), several for a large group, and watches them (`workers`: events, leases,
//! time limits, crashes), lists again for requests that appeared meanwhile, keeps the
//! store under its cap (`cap`), and prints one summary line (also appended to
//! `STORE/warm.log`). The command links neither the library nor OpenCL: a worker opens the
//! library it finds as `clshim run` does.

mod groups;
mod promote;
mod service;
mod settings;
mod trust;
mod workers;

pub use clshim_format::cap::enforce_cap;
pub use settings::Settings;
pub use trust::check_store;

use crate::library::find_library;
use clshim_format::store as format;
use groups::{start_folder, Folder, Group};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;
use workers::{Ended, WarmStats, Workers};

/// Why a store held nothing to make, in words for the user.
fn nothing_to_make(store: &Path) -> String {
    let entries = std::fs::read_dir(store)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| format::key_of_name(n, ".bin").is_some())
                })
                .count()
        })
        .unwrap_or(0);
    let kept = std::fs::read_dir(store.join(clshim_format::kept::COMPILES))
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().join(clshim_format::kept::BUILD_FILE).exists())
                .count()
        })
        .unwrap_or(0);
    let held = if kept == 0 {
        "no kept compile and no request".to_string()
    } else {
        format!("every kept compile has the driver's binary ({kept} kept, {entries} entries)")
    };
    format!(
        "clshim warm: {}: nothing to make: {held}. Jobs keep their compiles as they make them (the program \
         cache, clshim run's default), and leave a request for each driver's binary an \
         application asks for, which the node's warm service makes while the job runs \
         (or this step, for what it did not make).",
        store.display()
    )
}

/// How many requests one step sets aside (after a crash or the time limit) before it stops.
const MAX_SET_ASIDE: usize = 64;
/// How many times a step lists the requests again for those that appeared while it ran.
const MAX_ROUNDS: usize = 3;

/// Holds this host's lock on warming `store` (released when dropped): one step at a time
/// per store and host; a step that finds it held waits for it when `wait`, else gets
/// Err. Ok(None) when no lock can be had (a lock file that is not the user's): steps then
/// split the requests by their claims alone.
fn host_lock(store: &Path, wait: bool) -> Result<Option<std::fs::File>, ()> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;
    let (name, _) = format::warm_lock_names(trust::me(), store);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(std::env::temp_dir().join(name));
    let Ok(f) = f else { return Ok(None) };
    let Ok(m) = f.metadata() else { return Ok(None) };
    if m.uid() != trust::me() || !m.is_file() {
        return Ok(None);
    }
    // SAFETY: an open descriptor of this process.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if !wait {
            return Err(());
        }
        eprintln!(
            "clshim warm: another warm step on this host works on {}: waiting for it",
            store.display()
        );
        // SAFETY: as above; blocks until the other step ends (or dies: the lock goes with it).
        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    }
    Ok(Some(f))
}

/// The order in which groups get workers, `jobs` at a time: every group once (the largest
/// first), each waiting for a free worker when there are more groups than workers (a node
/// of 2 CPUs warms the requests of 16 ranks, each with its own kernel cache); then, where
/// workers are left over, each further one to the group with the most requests per worker.
fn plan(groups: &BTreeMap<u64, Group>, jobs: usize) -> Vec<u64> {
    let total: usize = groups.values().map(|g| g.requests).sum();
    let workers = jobs.min(total).max(groups.len());
    let mut by_size: Vec<(u64, usize)> = groups.iter().map(|(k, g)| (*k, g.requests)).collect();
    by_size.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut count: HashMap<u64, usize> = by_size.iter().map(|&(k, _)| (k, 1)).collect();
    let mut out: Vec<u64> = by_size.iter().map(|&(k, _)| k).collect();
    while out.len() < workers {
        let Some(&(k, _)) = by_size.iter().max_by(|a, b| {
            let per = |x: &(u64, usize)| x.1 as f64 / (count[&x.0] + 1) as f64;
            per(a).total_cmp(&per(b))
        }) else {
            break;
        };
        *count.get_mut(&k).unwrap() += 1;
        out.push(k);
    }
    out
}

/// What a round asks for further workers while it runs (see [`round`]).
pub(crate) type More<'a> = dyn FnMut(&mut BTreeMap<u64, Group>, &Workers) -> Vec<u64> + 'a;

/// One round: workers for every group of `groups` until each is done. Returns whether the
/// step may go on (false: a worker failed to start or ended badly). While a worker's place
/// is free and none is planned, `more` may add groups (new ones in `groups`) and name
/// those that get a further worker: the service's requests keep coming while it runs.
#[allow(clippy::too_many_arguments)]
pub(crate) fn round(
    store: &Path,
    lib: &Path,
    me: &Path,
    groups: &mut BTreeMap<u64, Group>,
    w: &mut Workers,
    jobs: usize,
    set_aside: &mut usize,
    stop: &dyn Fn() -> bool,
    more: &mut More,
) -> bool {
    let mut ok = true;
    let mut folders: HashMap<u64, Folder> = HashMap::new();
    let mut queue = plan(groups, jobs);
    queue.reverse();
    loop {
        if w.has_room() && queue.is_empty() {
            queue = more(groups, w);
            queue.reverse();
        }
        while w.has_room() {
            let Some(group) = queue.pop() else { break };
            let g = &groups[&group];
            let folder = match folders.entry(group) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => match start_folder(g) {
                    Ok(f) => {
                        if let Folder::Gone(_, _) = f {
                            eprintln!(
                                "clshim warm: {}: the folder its runs used, {}, is gone: its {} \
                                 requests are made in an empty folder (one that reads files \
                                 from there fails, and is removed)",
                                g.first.display(),
                                g.cwd.display(),
                                g.requests
                            );
                        }
                        v.insert(f)
                    }
                    Err(why) => {
                        eprintln!(
                            "clshim warm: {}: no worker starts there: {why}. {} requests of \
                             runs there wait ({} and the like): remove them if that folder is \
                             not the runs' any more",
                            g.cwd.display(),
                            g.requests,
                            g.first.display()
                        );
                        ok = false;
                        queue.retain(|q| *q != group);
                        continue;
                    }
                },
            };
            let cmd = workers::worker_command(me, store, lib, group, &g.env, folder.file());
            if let Err(e) = w.start(cmd, group) {
                eprintln!(
                    "clshim warm: {} requests in {}: cannot start a worker there: {e}",
                    g.requests,
                    g.cwd.display()
                );
                ok = false;
            }
        }
        if w.is_empty() {
            break;
        }
        if stop() {
            w.end_all();
            break;
        }
        for (group, ended) in w.step() {
            match ended {
                Ended::Done => {}
                Ended::Failed(how) => {
                    let g = &groups[&group];
                    eprintln!(
                        "clshim warm: a worker for the {} requests in {} ended ({how})",
                        g.requests,
                        g.cwd.display()
                    );
                    ok = false;
                }
                Ended::SetAside { key, why } => {
                    let g = &groups[&group];
                    let marked = w.set_aside(key, &why);
                    eprintln!(
                        "clshim warm: request {key:016x} (from {}): {why}: set aside{}; the \
                         rest of its group goes on",
                        g.cwd.display(),
                        if marked {
                            ", and not asked for again for a week"
                        } else {
                            ""
                        }
                    );
                    // Each new worker has one request fewer to stop on, so this ends; the
                    // bound only caps the time a driver that fails on everything can take.
                    *set_aside += 1;
                    if *set_aside <= MAX_SET_ASIDE {
                        queue.push(group);
                    } else {
                        eprintln!(
                            "clshim warm: {MAX_SET_ASIDE} requests were set aside: the rest of \
                             {} waits for the next warm step",
                            g.cwd.display()
                        );
                        ok = false;
                    }
                }
            }
        }
    }
    ok
}

/// `clshim warm`. Returns the exit status: 0 done (a request that failed is reported, not
/// fatal), 1 the step could not run.
pub fn warm_main(o: crate::cli::WarmOpts) -> i32 {
    let lib = match find_library(o.lib.as_deref(), std::env::var_os("CLSHIM_LIB")) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("clshim: {}", e.message);
            return e.status;
        }
    };
    let s = Settings::from_lookup(o.store, &|n| std::env::var_os(n));
    let Some(store) = &s.store else {
        eprintln!("clshim warm: the native store is off (CLSHIM_NATIVE_STORE=off); nothing to do");
        return 0;
    };
    if let Some(group) = o.worker_group {
        return workers::worker(&lib, store, group);
    }
    if o.service {
        return service::serve(store, &lib);
    }
    settings::idle_priority();
    if let Err(why) = check_store(store) {
        eprintln!("clshim warm: {why}; no request is read");
        return 1;
    }
    let me = match std::env::current_exe() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("clshim warm: cannot find this executable: {e}");
            return 1;
        }
    };
    let _lock = host_lock(store, true);
    let promoted = promote::kept_builds(store);
    if promoted > 0 {
        eprintln!(
            "clshim warm: {}: {promoted} kept compiles without the driver's binary: making them",
            store.display()
        );
    }
    let started = std::time::Instant::now();
    let jobs = o.jobs.unwrap_or_else(settings::default_jobs);
    let timeout = Duration::from_secs(o.timeout.unwrap_or(settings::DEFAULT_TIMEOUT));
    let mut w = Workers::new(store, jobs, timeout);
    let mut refused = 0;
    let mut set_aside = 0;
    let mut status = 0;
    let mut listed = 0;
    for _ in 0..MAX_ROUNDS {
        let mut groups = groups::groups(store, &mut refused);
        // Only requests no earlier round heard of: those left (claimed elsewhere, for
        // another host, waiting for a later step) are not made again now.
        let fresh: usize = groups.values().map(|g| g.requests).sum();
        if fresh == 0 || (listed > 0 && fresh <= w.outcomes.len()) {
            break;
        }
        listed += fresh;
        if !round(
            store,
            &lib,
            &me,
            &mut groups,
            &mut w,
            jobs,
            &mut set_aside,
            &|| false,
            &mut |_, _| Vec::new(),
        ) {
            status = 1;
            break;
        }
    }
    let evicted = enforce_cap(store, s.max);
    if listed == 0 && refused == 0 {
        eprintln!("{}", nothing_to_make(store));
    }
    let t = WarmStats::of(&w.outcomes);
    let line = format!(
        "clshim warm: {}: {} made, {} present, {} not kept (the reasons above), {} left for a \
         later step, {} claimed by another process, {} for devices or driver builds this host \
         does not have, {} stale, {} failed, {} evicted; {:.1} s on up to {jobs} workers",
        store.display(),
        t.made,
        t.present,
        t.uncacheable,
        t.postponed,
        t.claimed,
        t.foreign,
        t.stale,
        t.failed + refused,
        evicted,
        started.elapsed().as_secs_f64()
    );
    eprintln!("{line}");
    log_summary(store, &line);
    if t.foreign > 0 {
        eprintln!(
            "clshim warm: the {} requests for other devices or driver builds wait (for a week) \
             for a warm step on a host that has them",
            t.foreign
        );
    }
    status
}

/// Appends the step's summary line to `STORE/warm.log` (for `clshim store`, which says how
/// long ago by the file's time, and for a step whose output went nowhere).
pub(crate) fn log_summary(store: &Path, line: &str) {
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(store.join("warm.log"))
        .and_then(|mut f| {
            use std::io::Write;
            writeln!(f, "{line}")
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(requests: usize) -> Group {
        Group {
            cwd: "/w".into(),
            env: Vec::new(),
            requests,
            keys: Vec::new(),
            first: "/w/r".into(),
        }
    }

    #[test]
    fn workers_go_where_the_requests_are() {
        let groups: BTreeMap<u64, Group> = [(1, group(10)), (2, group(2)), (3, group(1))]
            .into_iter()
            .collect();
        let mut p = plan(&groups, 6);
        p.sort();
        assert_eq!(p, [1, 1, 1, 1, 2, 3], "one each, the rest to the largest");
        assert_eq!(
            plan(&groups, 2),
            [1, 2, 3],
            "every group, the largest first, more groups than workers"
        );
        assert_eq!(
            plan(&groups, 1),
            [1, 2, 3],
            "one worker still makes every group"
        );
        assert_eq!(plan(&groups, 64).len(), 13, "no more workers than requests");
    }
}
