//! What `clshim store` prints of a surveyed store: the totals (kept compiles, entries and
//! the cap, requests, the other files of clshim's, what is not clshim's), one row per
//! device and driver build (kept compiles, entries, bytes, builds not kept, requests
//! waiting and the oldest's age), the builds not kept with their reasons, the requests set
//! aside, the files that are not the user's alone, damaged requests, and the last warm
//! step's summary line; as text for a person and as one JSON document. Every string that
//! came from a file (a reason, a label, a name) goes out through `terminal`, which escapes
//! what a terminal would obey.

use super::survey::{File, Kind, Survey};
use crate::terminal;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

/// One device and driver build's share of the store.
#[derive(Default)]
struct Group {
    /// Kept builds, and the bytes of its kept compiles (their first launches with them).
    compiles: u64,
    compile_bytes: u64,
    entries: u64,
    bytes: u64,
    not_kept: u64,
    requests: u64,
    oldest: Option<i64>,
}

/// A count and its bytes.
#[derive(Default, Clone, Copy)]
struct Count {
    files: u64,
    bytes: u64,
}

impl Count {
    fn add(&mut self, f: &File) {
        self.files += 1;
        self.bytes += f.len;
    }
}

/// What the store holds, added up.
pub struct Summary<'a> {
    store: &'a Path,
    /// The store folder's owner and mode.
    owner: (u32, u32),
    cap: u64,
    now: i64,
    survey: &'a Survey,
    kept_builds: Count,
    kept_launches: Count,
    kept: Count,
    not_kept: Count,
    requests: Count,
    oldest_request: Option<i64>,
    claims: Count,
    leases: Count,
    set_aside: Count,
    marks: Count,
    driver_files: Count,
    labels: Count,
    temporary: Count,
    warm_log: Option<&'a File>,
    not_yours: Count,
    foreign: Count,
    groups: BTreeMap<(u64, u64), Group>,
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl<'a> Summary<'a> {
    pub fn new(store: &'a Path, owner: (u32, u32), cap: u64, survey: &'a Survey) -> Self {
        let mut s = Summary {
            store,
            owner,
            cap,
            now: now(),
            survey,
            kept_builds: Count::default(),
            kept_launches: Count::default(),
            kept: Count::default(),
            not_kept: Count::default(),
            requests: Count::default(),
            oldest_request: None,
            claims: Count::default(),
            leases: Count::default(),
            set_aside: Count::default(),
            marks: Count::default(),
            driver_files: Count::default(),
            labels: Count::default(),
            temporary: Count::default(),
            warm_log: None,
            not_yours: Count::default(),
            foreign: Count::default(),
            groups: BTreeMap::new(),
        };
        for f in &survey.files {
            if !f.kind.clshims() {
                s.foreign.add(f);
                continue;
            }
            if f.not_yours.is_some() {
                s.not_yours.add(f);
                continue;
            }
            match &f.kind {
                Kind::Kept {
                    build,
                    fingerprint,
                    driver,
                } => {
                    let g = s.groups.entry((*fingerprint, *driver)).or_default();
                    g.compile_bytes += f.len;
                    if *build {
                        g.compiles += 1;
                        s.kept_builds.add(f);
                    } else {
                        s.kept_launches.add(f);
                    }
                }
                Kind::Entry { header, not_kept } => {
                    let g = s
                        .groups
                        .entry((header.fingerprint, header.driver))
                        .or_default();
                    g.entries += 1;
                    g.bytes += f.len;
                    if not_kept.is_some() {
                        g.not_kept += 1;
                        s.not_kept.add(f);
                    } else {
                        s.kept.add(f);
                    }
                }
                Kind::Request {
                    fingerprint,
                    driver,
                } => {
                    let g = s.groups.entry((*fingerprint, *driver)).or_default();
                    g.requests += 1;
                    g.oldest = Some(g.oldest.map_or(f.mtime, |o| o.min(f.mtime)));
                    s.requests.add(f);
                    s.oldest_request = Some(s.oldest_request.map_or(f.mtime, |o| o.min(f.mtime)));
                }
                // Damaged requests are listed on their own and counted among the requests.
                Kind::DamagedRequest(_) => s.requests.add(f),
                Kind::Claim => s.claims.add(f),
                Kind::SetAside(_) => s.set_aside.add(f),
                Kind::SourceMark => s.marks.add(f),
                Kind::DriverFiles => s.driver_files.add(f),
                Kind::DeviceLabel(_) | Kind::DriverLabel(_) => s.labels.add(f),
                Kind::Temporary => s.temporary.add(f),
                Kind::Lease { .. } => s.leases.add(f),
                Kind::WarmLog(_) => s.warm_log = Some(f),
                Kind::Foreign => {}
            }
        }
        s
    }

    /// Every file of clshim's: count and bytes.
    fn total(&self) -> Count {
        let mut t = Count::default();
        for f in self.survey.files.iter().filter(|f| f.kind.clshims()) {
            t.add(f);
        }
        t
    }

    fn compiles(&self) -> Count {
        Count {
            files: self.kept_builds.files + self.kept_launches.files,
            bytes: self.kept_builds.bytes + self.kept_launches.bytes,
        }
    }

    fn entries(&self) -> Count {
        Count {
            files: self.kept.files + self.not_kept.files,
            bytes: self.kept.bytes + self.not_kept.bytes,
        }
    }

    fn device(&self, fingerprint: u64) -> String {
        match self.survey.devices.get(&fingerprint) {
            Some(l) => l.describe(),
            None => format!("device {fingerprint:016x}"),
        }
    }

    fn driver(&self, driver: u64) -> String {
        match self.survey.drivers.get(&driver) {
            Some(l) => l.describe(),
            None => format!("driver build {driver:016x}"),
        }
    }

    /// Rows by device and driver build: most entries first.
    fn rows(&self) -> Vec<(&(u64, u64), &Group)> {
        let mut rows: Vec<_> = self.groups.iter().collect();
        rows.sort_by_key(|(id, g)| (std::cmp::Reverse((g.compiles, g.entries, g.requests)), **id));
        rows
    }

    fn files<'s>(&'s self, pick: impl Fn(&File) -> bool + 's) -> impl Iterator<Item = &'s File> {
        self.survey
            .files
            .iter()
            .filter(move |f| f.kind.clshims() && pick(f))
    }

    fn not_kept_files(&self) -> impl Iterator<Item = (&File, &str)> {
        self.files(|f| f.not_yours.is_none())
            .filter_map(|f| match &f.kind {
                Kind::Entry {
                    not_kept: Some(why),
                    ..
                } => Some((f, why.as_str())),
                _ => None,
            })
    }

    fn set_aside_files(&self) -> impl Iterator<Item = (&File, &str)> {
        self.files(|f| f.not_yours.is_none())
            .filter_map(|f| match &f.kind {
                Kind::SetAside(why) => Some((f, why.as_str())),
                _ => None,
            })
    }

    fn damaged_requests(&self) -> impl Iterator<Item = (&File, &str)> {
        self.files(|f| f.not_yours.is_none())
            .filter_map(|f| match &f.kind {
                Kind::DamagedRequest(why) => Some((f, why.as_str())),
                _ => None,
            })
    }

    fn not_yours_files(&self) -> impl Iterator<Item = (&File, &str)> {
        self.files(|f| f.not_yours.is_some())
            .map(|f| (f, f.not_yours.as_deref().unwrap_or("")))
    }

    fn warm_summary(&self) -> Option<&str> {
        match &self.warm_log?.kind {
            Kind::WarmLog(line) => line.as_deref(),
            _ => None,
        }
    }

    /// The listing for a person.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let t = |s: &str| terminal::text(s).into_owned();
        let _ = writeln!(o, "clshim store: {}", t(&self.store.display().to_string()));
        let _ = writeln!(
            o,
            "  yours alone (owner uid {}, mode {:04o})",
            self.owner.0,
            self.owner.1 & 0o7777
        );
        let e = self.entries();
        let row = |o: &mut String, name: &str, c: Count, what: String| {
            let _ = writeln!(
                o,
                "  {name:<8} {:>6}  {:>10}  {what}",
                c.files,
                size(c.bytes)
            );
        };
        let _ = writeln!(o, "{:>17}  {:>10}", "files", "bytes");
        let k = self.compiles();
        row(
            &mut o,
            "compiles",
            k,
            format!(
                "kept by jobs: {}, {} (pocl's kernel cache speed)",
                plural(self.kept_builds.files, "build", "builds"),
                plural(self.kept_launches.files, "first launch", "first launches")
            ),
        );
        row(
            &mut o,
            "entries",
            e,
            format!(
                "the driver's binaries: {} kept, {} not kept",
                self.kept.files, self.not_kept.files
            ),
        );
        let oldest = match self.oldest_request {
            Some(m) => format!("waiting, the oldest {} old", age(self.now - m)),
            None => "none waiting".to_string(),
        };
        row(&mut o, "requests", self.requests, oldest);
        let warm_log = Count {
            files: u64::from(self.warm_log.is_some()),
            bytes: self.warm_log.map_or(0, |f| f.len),
        };
        let parts = [
            (self.claims, "claim", "claims"),
            (self.leases, "lease", "leases"),
            (self.set_aside, "set-aside mark", "set-aside marks"),
            (self.marks, "source mark", "source marks"),
            (self.driver_files, "driver file list", "driver file lists"),
            (self.labels, "label", "labels"),
            (self.temporary, "temporary file", "temporary files"),
        ];
        let other = parts
            .iter()
            .map(|p| p.0)
            .chain([warm_log])
            .fold(Count::default(), |a, c| Count {
                files: a.files + c.files,
                bytes: a.bytes + c.bytes,
            });
        let mut what: Vec<String> = parts
            .iter()
            .map(|(c, one, many)| plural(c.files, one, many))
            .collect();
        what.push(
            if self.warm_log.is_some() {
                "warm.log"
            } else {
                "no warm.log"
            }
            .into(),
        );
        row(&mut o, "other", other, what.join(", "));
        row(
            &mut o,
            "total",
            self.total(),
            format!(
                "clshim's files ({} not yours alone); {} not clshim's ({}), left alone",
                self.not_yours.files,
                self.foreign.files,
                size(self.foreign.bytes)
            ),
        );
        let _ = writeln!(
            o,
            "  {:<8} {:>6}  {:>10}  CLSHIM_NATIVE_STORE_MAX: compiles and entries fill {}",
            "cap",
            "",
            size(self.cap),
            percent(e.bytes + k.bytes, self.cap)
        );
        if !self.groups.is_empty() {
            let _ = writeln!(o, "\nby device and driver build:");
            let _ = writeln!(
                o,
                "  compiles       bytes  entries       bytes  not kept  requests  oldest  device / driver build"
            );
            for ((fp, driver), g) in self.rows() {
                let oldest = g.oldest.map_or("-".to_string(), |m| age(self.now - m));
                let _ = writeln!(
                    o,
                    "  {:>8}  {:>10}  {:>7}  {:>10}  {:>8}  {:>8}  {:>6}  {}",
                    g.compiles,
                    size(g.compile_bytes),
                    g.entries,
                    size(g.bytes),
                    g.not_kept,
                    g.requests,
                    oldest,
                    t(&self.device(*fp))
                );
                let _ = writeln!(o, "  {:>69}  {}", "", t(&self.driver(*driver)));
            }
        }
        let mut section = |title: &str, lines: Vec<String>| {
            if !lines.is_empty() {
                let _ = writeln!(o, "\n{title}:");
                for l in lines {
                    let _ = writeln!(o, "  {l}");
                }
            }
        };
        section(
            "not kept (the warm step found these builds cannot be kept; no run asks for them \
             while the files they read stay)",
            self.not_kept_files()
                .map(|(f, why)| format!("{}  {}", key_of(f), t(why)))
                .collect(),
        );
        section(
            "set aside (a warm step could not make them: its driver crashed, it timed out, or the \
             kept compile failed or was stale; no run asks for them until \
             the mark is a week old)",
            self.set_aside_files()
                .map(|(f, why)| {
                    let why = if why.is_empty() {
                        "the driver crashed making it"
                    } else {
                        why
                    };
                    format!("{}  {} ago: {}", key_of(f), age(self.now - f.mtime), t(why))
                })
                .collect(),
        );
        section(
            "compiles under way (leases: a rank of the host named compiles it for every node \
             sharing the store; a lease an hour old, or whose holder is gone from its host, is \
             taken over)",
            self.files(|f| f.not_yours.is_none())
                .filter_map(|f| match &f.kind {
                    Kind::Lease { host, pid } => Some(format!(
                        "{}  {}, pid {pid}, {} ago",
                        t(&rel(f)),
                        t(host),
                        age(self.now - f.mtime)
                    )),
                    _ => None,
                })
                .collect(),
        );
        section(
            "damaged requests (the next warm step removes them)",
            self.damaged_requests()
                .map(|(f, why)| format!("{}: {}", t(&rel(f)), t(why)))
                .collect(),
        );
        section(
            "not yours alone (clshim never takes them; clshim store --clear removes them)",
            self.not_yours_files()
                .map(|(f, why)| format!("{}: {}", t(&rel(f)), t(why)))
                .collect(),
        );
        section(
            "folders that cannot be read",
            self.survey
                .unreadable
                .iter()
                .map(|(d, why)| format!("{}: {}", t(d), t(why)))
                .collect(),
        );
        if let Some(f) = self.warm_log {
            let _ = writeln!(
                o,
                "\nlast warm step (warm.log, {} ago):\n  {}",
                age(self.now - f.mtime),
                t(self.warm_summary().unwrap_or("no summary line"))
            );
        }
        o
    }

    /// The same as one JSON document.
    pub fn json(&self) -> Value {
        let e = self.entries();
        let count = |c: Count| json!({"files": c.files, "bytes": c.bytes});
        let hex = |v: u64| format!("{v:016x}");
        let groups: Vec<Value> = self
            .rows()
            .into_iter()
            .map(|((fp, driver), g)| {
                json!({
                    "fingerprint": hex(*fp),
                    "driver": hex(*driver),
                    "device_label": self.survey.devices.get(fp).map(device_json),
                    "driver_label": self.survey.drivers.get(driver).map(driver_json),
                    "device": self.device(*fp),
                    "driver_build": self.driver(*driver),
                    "compiles": g.compiles,
                    "compile_bytes": g.compile_bytes,
                    "entries": g.entries,
                    "bytes": g.bytes,
                    "not_kept": g.not_kept,
                    "requests": g.requests,
                    "oldest_request_seconds": g.oldest.map(|m| self.now - m),
                })
            })
            .collect();
        let entry_ids = |f: &File| match &f.kind {
            Kind::Entry { header, .. } => (hex(header.fingerprint), hex(header.driver)),
            _ => (String::new(), String::new()),
        };
        json!({
            "store": self.store.display().to_string(),
            "exists": true,
            "alone": true,
            "why_not_alone": null,
            "owner_uid": self.owner.0,
            "mode": format!("{:04o}", self.owner.1 & 0o7777),
            "cap": self.cap,
            "compiles": {
                "files": self.compiles().files,
                "bytes": self.compiles().bytes,
                "builds": count(self.kept_builds),
                "first_launches": count(self.kept_launches),
            },
            "entries": {
                "files": e.files,
                "bytes": e.bytes,
                "kept": count(self.kept),
                "not_kept": count(self.not_kept),
            },
            "requests": {
                "files": self.requests.files,
                "bytes": self.requests.bytes,
                "oldest_seconds": self.oldest_request.map(|m| self.now - m),
                "claimed": self.claims.files,
                "set_aside": self.set_aside.files,
            },
            "other": {
                "source_marks": count(self.marks),
                "driver_files": count(self.driver_files),
                "labels": count(self.labels),
                "temporary": count(self.temporary),
                "claims": count(self.claims),
                "leases": count(self.leases),
                "set_aside_marks": count(self.set_aside),
            },
            "total": count(self.total()),
            "not_clshims": count(self.foreign),
            "by_device": groups,
            "not_kept": self.not_kept_files().map(|(f, why)| {
                let (fp, driver) = entry_ids(f);
                json!({"key": key_of(f), "fingerprint": fp, "driver": driver,
                       "bytes": f.len, "why": why})
            }).collect::<Vec<_>>(),
            "set_aside": self.set_aside_files().map(|(f, why)| json!({
                "key": key_of(f),
                "seconds_ago": self.now - f.mtime,
                "why": if why.is_empty() { "the driver crashed making it" } else { why },
            })).collect::<Vec<_>>(),
            "leases": self.files(|f| f.not_yours.is_none()).filter_map(|f| match &f.kind {
                Kind::Lease { host, pid } => Some(json!({
                    "file": rel(f), "host": host, "pid": pid, "seconds_ago": self.now - f.mtime,
                })),
                _ => None,
            }).collect::<Vec<_>>(),
            "damaged_requests": self.damaged_requests()
                .map(|(f, why)| json!({"file": rel(f), "why": why}))
                .collect::<Vec<_>>(),
            "not_yours": self.not_yours_files()
                .map(|(f, why)| json!({"file": rel(f), "why": why}))
                .collect::<Vec<_>>(),
            "unreadable_folders": self.survey.unreadable.iter()
                .map(|(d, why)| json!({"folder": d, "why": why}))
                .collect::<Vec<_>>(),
            "warm_log": self.warm_log.map(|f| json!({
                "bytes": f.len,
                "seconds_ago": self.now - f.mtime,
                "last_summary": self.warm_summary(),
            })),
        })
    }
}

fn device_json(l: &clshim_format::labels::DeviceLabel) -> Value {
    json!({
        "name": l.name,
        "type": l.kind,
        "platform": l.platform,
        "platform_version": l.platform_version,
        "device_version": l.device_version,
        "driver_version": l.driver_version,
    })
}

fn driver_json(l: &clshim_format::labels::DriverLabel) -> Value {
    json!({
        "library": l.library,
        "build_id": l.build_id,
        "compilers": l.compilers.iter()
            .map(|(name, id)| json!({"library": name, "build_id": id}))
            .collect::<Vec<_>>(),
    })
}

/// The key a file's name holds, as 16 hex digits (its name, for one without a key).
fn key_of(f: &File) -> String {
    f.key()
        .map_or_else(|| f.name.clone(), |k| format!("{k:016x}"))
}

/// A file's path relative to the store.
fn rel(f: &File) -> String {
    f.relative().display().to_string()
}

/// Bytes in binary units: `512 B`, `61.2 KiB`, `1.0 GiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `n` and the noun: `1 label`, `2 labels`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `part` of `whole` in percent, one decimal.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "all of it".into();
    }
    format!("{:.1}%", part as f64 * 100.0 / whole as f64)
}

/// An age in the largest unit that fits: `12 s`, `3 min`, `5 h`, `2 d`.
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        7200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_read_plainly() {
        assert_eq!(size(0), "0 B");
        assert_eq!(size(1023), "1023 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(1 << 30), "1.0 GiB");
        assert_eq!(age(5), "5 s");
        assert_eq!(age(600), "10 min");
        assert_eq!(age(3 * 3600), "3 h");
        assert_eq!(age(3 * 86400), "3 d");
        assert_eq!(age(-4), "0 s");
        assert_eq!(percent(1, 0), "all of it");
        assert_eq!(percent(1, 1000), "0.1%");
    }
}
