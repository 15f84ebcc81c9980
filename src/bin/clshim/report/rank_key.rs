//! Who a record belongs to, as the report names it: a rank, or a process where no rank is
//! known ([`RankKey`]), its label in tables ([`rank_labels`]), and the median taken over
//! ranks. A leaf that every part of the report names ranks through, so none of them has
//! to reach into another for it.

use std::collections::HashMap;

/// Who a record belongs to: its MPI rank, or its process when no rank is known.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RankKey {
    Rank(i64),
    Process {
        host: String,
        pid: u64,
        /// The record's `instance`: processes of different pid namespaces share pids.
        instance: Option<String>,
    },
}

/// The median of sorted values (0 for none).
pub fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Labels of rank rows; `host:pid` gets the instance's first 8 digits only where two
/// processes share it.
pub fn rank_labels<'a>(keys: impl Iterator<Item = &'a RankKey> + Clone) -> Vec<String> {
    let mut seen: HashMap<(&str, u64), usize> = HashMap::new();
    for k in keys.clone() {
        if let RankKey::Process { host, pid, .. } = k {
            *seen.entry((host, *pid)).or_default() += 1;
        }
    }
    keys.map(|k| match k {
        RankKey::Rank(r) => r.to_string(),
        RankKey::Process {
            host,
            pid,
            instance,
        } => match instance {
            Some(i) if seen[&(host.as_str(), *pid)] > 1 => {
                format!("{host}:{pid}#{}", i.chars().take(8).collect::<String>())
            }
            _ => format!("{host}:{pid}"),
        },
    })
    .collect()
}

/// The writers of one trace file's records (a rank, or a process where no rank is known),
/// by file-local index in the order met: a file normally has one, a forked child's records
/// make another.
#[derive(Debug, Default)]
pub struct Writers(Vec<(Option<i64>, u64, Option<String>)>);

impl Writers {
    /// The index of the writer (`rank`, `pid`, `instance`), added if new; and whether it
    /// was new.
    pub fn index(&mut self, rank: Option<i64>, pid: u64, instance: Option<&str>) -> (usize, bool) {
        if let Some(i) = self
            .0
            .iter()
            .position(|(r, p, i)| *r == rank && *p == pid && i.as_deref() == instance)
        {
            return (i, false);
        }
        self.0.push((rank, pid, instance.map(str::to_string)));
        (self.0.len() - 1, true)
    }

    /// Each writer's key, by index, for a file of `host`.
    pub fn keys(&self, host: &str) -> Vec<RankKey> {
        self.0
            .iter()
            .map(|(rank, pid, instance)| key(*rank, *pid, instance.clone(), host))
            .collect()
    }
}

/// A record's key: its rank, else its process on `host`.
pub fn key(rank: Option<i64>, pid: u64, instance: Option<String>, host: &str) -> RankKey {
    match rank {
        Some(n) => RankKey::Rank(n),
        None => RankKey::Process {
            host: host.to_string(),
            pid,
            instance,
        },
    }
}
