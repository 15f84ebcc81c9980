//! Whether a CPU this process may run on has been idle lately, for the binary policy: the
//! node's warm service makes a driver's binary without taking a core from the job only
//! where one is (`policy`). Measured as `top` measures it, from the idle time `/proc/stat`
//! counts for each CPU, over the CPUs of the process's affinity alone (other tenants' work
//! on CPUs it may not use does not count, and a process bound to one core has no other),
//! less what its cgroup's CPU limit keeps it from using, between the previous look and
//! now. The first look is taken when the runtime starts under `substitute` ([`start`]), so
//! the first program's window covers its build. Linux only: elsewhere it cannot be told.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Idle time (idle and iowait) and all time, in clock ticks, of each CPU by number.
type Ticks = HashMap<usize, (u64, u64)>;

struct Look {
    at: Instant,
    ticks: Ticks,
    answer: Option<bool>,
}

/// A plain mutex, only ever tried: a look that finds it held (another thread looking, or a
/// child forked while its parent held it) answers "cannot be told" rather than wait.
static LAST: Mutex<Option<Look>> = Mutex::new(None);

/// A window shorter than this (a few clock ticks) says too little: the previous answer
/// stands, and the window grows until the next look.
const SHORTEST: Duration = Duration::from_millis(50);

/// Half a core idle over the window, on average: room for the service's worker.
const ENOUGH: f64 = 0.5;

/// Takes the first look, if none was taken.
pub fn start() {
    let Ok(mut last) = LAST.try_lock() else {
        return;
    };
    if last.is_none() {
        if let Some(ticks) = read() {
            *last = Some(Look {
                at: Instant::now(),
                ticks,
                answer: None,
            });
        }
    }
}

/// Whether at least half a CPU of this process's was idle, on average, since the previous
/// look (None where it cannot be told: no `/proc/stat`, no earlier look, no affinity).
pub fn idle_core() -> Option<bool> {
    let now = read()?;
    let Ok(mut last) = LAST.try_lock() else {
        return None;
    };
    let Some(prev) = last.as_mut() else {
        *last = Some(Look {
            at: Instant::now(),
            ticks: now,
            answer: None,
        });
        return None;
    };
    if prev.at.elapsed() < SHORTEST {
        return prev.answer;
    }
    let cpus = crate::host_cpus::affinity_cpus()?;
    let answer = spare(&prev.ticks, &now, &cpus, limit()).map(|s| s >= ENOUGH);
    if answer.is_some() {
        *prev = Look {
            at: Instant::now(),
            ticks: now,
            answer,
        };
    }
    prev.answer
}

/// The cgroup's CPU limit, read once (it is the job's, fixed for its life).
fn limit() -> Option<f64> {
    static LIMIT: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(crate::host_cpus::cgroup_limit)
}

/// The CPUs' worth of idle time between two looks, over `cpus` (those counted in both),
/// less the CPUs beyond the cgroup's `limit`; None if no CPU of `cpus` has ticked.
fn spare(before: &Ticks, after: &Ticks, cpus: &[usize], limit: Option<f64>) -> Option<f64> {
    let mut idle = 0.0;
    let mut counted = 0usize;
    for c in cpus {
        let (Some(&(i0, t0)), Some(&(i1, t1))) = (before.get(c), after.get(c)) else {
            continue;
        };
        let total = t1.saturating_sub(t0);
        if total == 0 {
            continue;
        }
        idle += i1.saturating_sub(i0).min(total) as f64 / total as f64;
        counted += 1;
    }
    if counted == 0 {
        return None;
    }
    let beyond = limit.map_or(0.0, |l| (counted as f64 - l).max(0.0));
    Some(idle - beyond)
}

#[cfg(target_os = "linux")]
fn read() -> Option<Ticks> {
    Some(parse(&std::fs::read_to_string("/proc/stat").ok()?))
}

#[cfg(not(target_os = "linux"))]
fn read() -> Option<Ticks> {
    None
}

/// Each `cpuN user nice system idle iowait irq softirq steal ...` line of `/proc/stat`:
/// (idle + iowait, the sum of those eight).
// Only Linux has `/proc/stat` to read (its tests run everywhere).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn parse(stat: &str) -> Ticks {
    stat.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let n: usize = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = f.take(8).map(|x| x.parse().unwrap_or(0)).collect();
            (v.len() >= 5).then(|| (n, (v[3] + v[4], v.iter().sum())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "cpu  400 0 100 1000 10 0 0 0 0 0\n\
                          cpu0 200 0 50 500 5 0 0 0 0 0\n\
                          cpu1 200 0 50 500 5 0 0 0 0 0\n\
                          intr 12345\n";
    /// cpu0 busy the whole 100 ticks; cpu1 idle for 90 of its 100 (80 idle, 10 iowait).
    const AFTER: &str = "cpu  490 0 100 1080 20 0 0 0 0 0\n\
                         cpu0 300 0 50 500 5 0 0 0 0 0\n\
                         cpu1 210 0 50 580 15 0 0 0 0 0\n";

    #[test]
    fn idle_time_is_idle_and_iowait_per_cpu() {
        let t = parse(BEFORE);
        assert_eq!(t.len(), 2, "the all-CPUs line and other lines are not CPUs");
        assert_eq!(t[&0], (505, 755));
    }

    #[test]
    fn only_the_affinity_s_cpus_count_less_what_the_cgroup_forbids() {
        let (b, a) = (parse(BEFORE), parse(AFTER));
        let near = |x: Option<f64>, y: f64| (x.unwrap() - y).abs() < 1e-9;
        assert!(near(spare(&b, &a, &[0, 1], None), 0.9));
        assert!(
            near(spare(&b, &a, &[0], None), 0.0),
            "bound to the busy core"
        );
        assert!(near(spare(&b, &a, &[1], None), 0.9));
        assert!(
            near(spare(&b, &a, &[0, 1], Some(1.0)), -0.1),
            "a one-CPU limit"
        );
        assert!(
            near(spare(&b, &a, &[0, 1, 7], None), 0.9),
            "CPU 7 is offline"
        );
        assert_eq!(spare(&b, &b, &[0, 1], None), None, "no tick yet");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_host_s_cpus_are_read() {
        assert!(!read().unwrap().is_empty());
    }
}
