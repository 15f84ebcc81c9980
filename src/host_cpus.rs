//! The CPUs a process may run on, for its `process` record: how many the host has online,
//! which of them the process's affinity allows, and the CPU limit of its cgroup. With
//! these `clshim report` can tell ranks that outnumber the cores of their host, or share
//! cores through their affinity, from ranks whose compiles got slower for other reasons.
//! Gathered once, when the trace file is written (never before the first OpenCL call),
//! from `sysconf`, `sched_getaffinity` and the cgroup files under `/sys/fs/cgroup`;
//! macOS has neither affinity masks nor cgroups, so those are absent there.

use crate::schema::Cpus;

/// This process's CPUs, as far as they can be told.
pub fn current() -> Cpus {
    // SAFETY: sysconf has no preconditions; -1 means unknown.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    Cpus {
        online: u32::try_from(online).ok().filter(|&n| n > 0),
        affinity: affinity(),
        cgroup_limit: cgroup_limit(),
    }
}

/// The affinity mask as a CPU list (`0-3,8`), or None where it cannot be read (more CPUs
/// than a `cpu_set_t` holds).
fn affinity() -> Option<String> {
    affinity_cpus().map(|cpus| crate::schema::format_cpu_list(&cpus))
}

/// The CPUs the calling thread's affinity allows, or None where it cannot be read.
#[cfg(target_os = "linux")]
pub fn affinity_cpus() -> Option<Vec<usize>> {
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `set` is valid for its size.
    let ok = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) } == 0;
    if !ok {
        return None;
    }
    let max = 8 * std::mem::size_of_val(&set);
    // SAFETY: every index is below the set's capacity.
    Some(
        (0..max)
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
            .collect(),
    )
}

#[cfg(not(target_os = "linux"))]
pub fn affinity_cpus() -> Option<Vec<usize>> {
    None
}

/// The tightest CPU limit of the process's cgroup and its ancestors, in CPUs (None: none).
#[cfg(target_os = "linux")]
pub fn cgroup_limit() -> Option<f64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    limit_from(
        &read("/proc/self/cgroup")?,
        &read("/proc/self/mountinfo")?,
        |p| std::fs::read_to_string(p).ok(),
    )
}

#[cfg(not(target_os = "linux"))]
pub fn cgroup_limit() -> Option<f64> {
    None
}

/// The tightest CPU limit (in CPUs) on the process's cgroup and its ancestors, given the
/// texts of `/proc/self/cgroup` and `/proc/self/mountinfo` and a reader of cgroup files:
/// cgroup v2's `cpu.max` (`max 100000` or `<quota> <period>`), else v1's
/// `cpu.cfs_quota_us` (-1: none) over `cpu.cfs_period_us`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn limit_from(cgroup: &str, mountinfo: &str, read: impl Fn(&str) -> Option<String>) -> Option<f64> {
    // (version, path in the hierarchy) of the cpu controller's cgroup.
    let mut v2_path = None;
    let mut v1_path = None;
    for line in cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2_path = Some(path);
        } else if controllers.split(',').any(|c| c == "cpu") {
            v1_path = Some(path);
        }
    }
    for line in mountinfo.lines() {
        // id parent dev root mountpoint options [optional...] - fstype source superoptions
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(mount), Some(fstype)) = (left.get(3), left.get(4), right.first())
        else {
            continue;
        };
        let (path, v2) = match *fstype {
            "cgroup2" => (v2_path, true),
            "cgroup"
                if right
                    .get(2)
                    .is_some_and(|o| o.split(',').any(|o| o == "cpu")) =>
            {
                (v1_path, false)
            }
            _ => continue,
        };
        let Some(path) = path else { continue };
        // The cgroup's path is relative to the hierarchy's root; the mount shows `root`.
        let rel = path
            .strip_prefix(root.trim_end_matches('/'))
            .unwrap_or(path);
        let mut dir = format!("{}/{}", mount.trim_end_matches('/'), rel.trim_matches('/'));
        let mut tightest: Option<f64> = None;
        loop {
            let dir_trimmed = dir.trim_end_matches('/');
            let limit = if v2 {
                read(&format!("{dir_trimmed}/cpu.max")).and_then(|t| {
                    let mut w = t.split_whitespace();
                    let quota: f64 = w.next()?.parse().ok()?;
                    let period: f64 = w.next()?.parse().ok()?;
                    (quota > 0.0 && period > 0.0).then_some(quota / period)
                })
            } else {
                let n = |name: &str| -> Option<f64> {
                    read(&format!("{dir_trimmed}/{name}"))?.trim().parse().ok()
                };
                match (n("cpu.cfs_quota_us"), n("cpu.cfs_period_us")) {
                    (Some(q), Some(p)) if q > 0.0 && p > 0.0 => Some(q / p),
                    _ => None,
                }
            };
            if let Some(l) = limit {
                tightest = Some(tightest.map_or(l, |t| t.min(l)));
            }
            if dir_trimmed.len() <= mount.trim_end_matches('/').len() {
                break;
            }
            match dir_trimmed.rfind('/') {
                Some(i) => dir.truncate(i),
                None => break,
            }
        }
        if tightest.is_some() {
            return tightest;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn files(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = list
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |p| map.get(p).cloned()
    }

    #[test]
    fn the_tightest_v2_limit_of_the_cgroup_and_its_parents() {
        let mountinfo = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
        let read = files(&[
            ("/sys/fs/cgroup/job/rank/cpu.max", "max 100000\n"),
            ("/sys/fs/cgroup/job/cpu.max", "400000 100000\n"),
            ("/sys/fs/cgroup/cpu.max", "800000 100000\n"),
        ]);
        assert_eq!(limit_from("0::/job/rank\n", mountinfo, &read), Some(4.0));
        let none = files(&[("/sys/fs/cgroup/job/rank/cpu.max", "max 100000\n")]);
        assert_eq!(limit_from("0::/job/rank\n", mountinfo, &none), None);
    }

    #[test]
    fn a_v1_cpu_hierarchy_mounted_with_its_own_root() {
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
";
        let cgroup = "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n3:cpuset:/\n";
        let read = files(&[
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "150000\n"),
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
        ]);
        assert_eq!(limit_from(cgroup, mountinfo, &read), Some(1.5));
        let unlimited = files(&[
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n"),
            ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"),
        ]);
        assert_eq!(limit_from(cgroup, mountinfo, &unlimited), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_online_cpus_and_an_affinity() {
        let c = current();
        let online = c.online.unwrap();
        assert!(online >= 1);
        assert!(!c.affinity.unwrap().is_empty());
    }
}
