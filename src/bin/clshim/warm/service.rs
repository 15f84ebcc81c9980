//! `clshim warm --service`: the node's warm service, which the library starts on demand
//! (its `store::service`) when a process leaves a request for the driver's binary of a
//! build, as sccache's client starts its local server. One runs per user, node and store
//! (the warm step's host lock, taken without waiting: a service that finds it held leaves
//! at once). It makes the requests as they come, at idle priority
//! (`settings::idle_priority`: no application waits for it while it computes; a process
//! that left requests waits for them only at its exit, bounded), in the warm step's
//! workers, and ends as soon as none of its clients lives (each holds the clients' lock,
//! shared, while it lives): what it has not made waits for the next job's service or
//! `clshim warm`, and a request being made then is taken over by it (its claim's holder is
//! gone). So nothing
//! of clshim's outlives the job, and no scheduler has anything of clshim's to end.

use super::settings;
use super::workers::{WarmStats, Workers};
use super::{groups, host_lock, log_summary, round, trust};
use clshim_format::store::{self as format, WarmEvent};
use std::collections::BTreeMap;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the service looks whether its clients have gone (a lock taken and let go):
/// within this of the job's last process, nothing of clshim's is left.
const GONE_TICK: Duration = Duration::from_millis(20);
/// How often it lists the requests (on a network filesystem, a question to its server).
const LIST_TICK: Duration = Duration::from_millis(200);

/// Closes every descriptor but the standard streams: those the application left without
/// close-on-exec (an MPI launcher's connection, a pipe its launcher reads to the end) must
/// not be held open by the service.
fn close_inherited() {
    // SAFETY: close_range only closes this process's descriptors (none of Rust's own are
    // open yet); ENOSYS on kernels before 5.9, then each is closed in turn.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if r != 0 {
        for fd in 3..4096 {
            // SAFETY: as above.
            unsafe { libc::close(fd) };
        }
    }
}

/// Leaves the application that started the service: the service goes on in a child of
/// this process, which ends at once (the library reaps it). A child of the application's
/// would outlive it by design (it ends once its clients are gone, the application among
/// them), so an application that waits for its children until none is left (`while
/// (wait(NULL) > 0)`, a launcher's loop) would wait for good. Where no fork can be made,
/// the service stays its child.
fn detach() {
    // SAFETY: this process has one thread (the command starts none before the service);
    // the parent only ends.
    match unsafe { libc::fork() } {
        0 | -1 => {}
        // SAFETY: ending the parent at once, running nothing of the child's.
        _ => unsafe { libc::_exit(0) },
    }
}

/// Whether every client of the service has gone: no process holds the clients' lock.
fn clients_gone(store: &Path) -> bool {
    let (_, clients) = format::warm_lock_names(trust::me(), store);
    let Ok(f) = std::fs::File::open(std::env::temp_dir().join(clients)) else {
        return true;
    };
    // SAFETY: an open descriptor of this process; released when `f` is closed.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Sets aside the requests of each group whose worker may not start in its folder
/// (`groups::start_folder`: another user's, say), and drops the group: no warm step can
/// make them, and the processes that left them wait at their exit for each to be made or
/// gone. `clshim store` shows why (no one reads the service's output), and no run leaves
/// them again for a week.
fn set_aside_unstartable(
    groups: &mut std::collections::BTreeMap<u64, groups::Group>,
    w: &mut Workers,
) {
    groups.retain(|_, g| {
        let Err(why) = groups::start_folder(g) else {
            return true;
        };
        let why = format!("no warm worker may start in {}: {why}", g.cwd.display());
        for key in &g.keys {
            w.set_aside(*key, &why);
        }
        false
    });
}

/// The groups that have requests no worker has claimed or heard of, once for each such
/// request (as many as the workers' free places). Only requests `groups` does not hold yet
/// are read (a request holds its program's text); the groups they make are added to it.
/// A group no worker may start in is left to the next listing, which sets it aside.
fn unclaimed(store: &Path, groups: &mut BTreeMap<u64, groups::Group>, w: &Workers) -> Vec<u64> {
    let requests = store.join(format::REQUESTS);
    let known: std::collections::HashMap<u64, u64> = groups
        .iter()
        .flat_map(|(g, grp)| grp.keys.iter().map(move |k| (*k, *g)))
        .collect();
    // Reported once, by the listing between rounds.
    let mut quiet = 0;
    let mut startable: std::collections::HashMap<u64, bool> = Default::default();
    let mut out = Vec::new();
    for key in groups::waiting(store) {
        if out.len() >= w.room() {
            break;
        }
        if w.outcomes.contains_key(&key) || requests.join(format::claim_name(key)).exists() {
            continue;
        }
        let group = match known.get(&key) {
            Some(g) => Some(*g),
            None => groups::add(store, key, groups, &mut quiet),
        };
        if let Some(g) = group.filter(|g| {
            *startable
                .entry(*g)
                .or_insert_with(|| groups::start_folder(&groups[g]).is_ok())
        }) {
            out.push(g);
        }
    }
    out
}

/// Serves `store` with the library `lib` until its clients are gone. Exit status 0.
pub fn serve(store: &Path, lib: &Path) -> i32 {
    detach();
    close_inherited();
    settings::idle_priority();
    if super::check_store(store).is_err() {
        return 0;
    }
    let Ok(_lock) = host_lock(store, false) else {
        return 0; // another step or service works on this store here
    };
    let Ok(me) = std::env::current_exe() else {
        return 0;
    };
    let started = Instant::now();
    let jobs = settings::default_jobs();
    let timeout = Duration::from_secs(settings::DEFAULT_TIMEOUT);
    let mut w = Workers::new(store, jobs, timeout);
    w.tick = GONE_TICK;
    let (mut refused, mut set_aside) = (0, 0);
    let gone = || clients_gone(store);
    let mut listed: Option<Instant> = None;
    let mut claims_checked = Instant::now();
    while !gone() {
        if listed.is_some_and(|t| t.elapsed() < LIST_TICK) {
            std::thread::sleep(GONE_TICK);
            continue;
        }
        listed = Some(Instant::now());
        // A request left for later (its inputs changed as it compiled: its rank was still
        // launching the program's kernels) is tried again while the job runs; one another
        // step claimed, once its claim is gone (made, or let go) or every RENEW_SECONDS
        // (its holder may have died: a lapsed claim is taken over), not at every listing,
        // where each try starts a worker that loads the driver and writes a claim in the
        // store (every node's, on a store the job's nodes share).
        let recheck = claims_checked.elapsed() >= Duration::from_secs(format::RENEW_SECONDS);
        if recheck {
            claims_checked = Instant::now();
        }
        let requests = store.join(format::REQUESTS);
        w.outcomes.retain(|key, e| match e {
            WarmEvent::Postponed => false,
            WarmEvent::Claimed => !recheck && requests.join(format::claim_name(*key)).exists(),
            _ => true,
        });
        // Requests this service has an outcome of already (for another host, say) are not
        // made again now.
        let fresh = groups::waiting(store)
            .iter()
            .any(|k| !w.outcomes.contains_key(k));
        if !fresh {
            continue;
        }
        let mut groups = groups::groups(store, &mut refused);
        set_aside_unstartable(&mut groups, &mut w);
        let mut listed_in_round = Instant::now();
        // A worker that could not run (no compile can be watched here: a tracer or the
        // system forbids ptrace; no OpenCL loader) fails so at every tick, loading the
        // driver each time, while the processes that left requests wait at their exit for
        // a service that makes nothing: it ends, as `clshim warm` stops, and they stop
        // waiting.
        // While the round runs, requests keep coming (the job goes on): a worker's free
        // place goes to a group with requests no one has claimed yet, so that the job's
        // requests are made on as many cores as it frees, not by the workers of its first
        // request alone.
        let mut more = |groups: &mut BTreeMap<u64, groups::Group>, w: &Workers| {
            if listed_in_round.elapsed() < LIST_TICK {
                return Vec::new();
            }
            listed_in_round = Instant::now();
            unclaimed(store, groups, w)
        };
        if !round(
            store,
            lib,
            &me,
            &mut groups,
            &mut w,
            jobs,
            &mut set_aside,
            &gone,
            &mut more,
        ) {
            log_summary(
                store,
                &format!(
                    "clshim warm --service: {}: ended: a worker could not run here \
                     (`clshim warm` says why)",
                    store.display()
                ),
            );
            break;
        }
    }
    w.end_all();
    let t = WarmStats::of(&w.outcomes);
    if t.made + t.uncacheable + t.failed > 0 {
        log_summary(
            store,
            &format!(
                "clshim warm --service: {}: {} made, {} not kept, {} failed while the job ran; \
                 {:.1} s on up to {jobs} workers at idle priority",
                store.display(),
                t.made,
                t.uncacheable,
                t.failed + refused,
                started.elapsed().as_secs_f64()
            ),
        );
    }
    0
}
