//! The two renderings of a [`Report`]: the text table (with its legend and hints) and
//! the `--json` document. Nothing here aggregates; `report` computes every number. The
//! text fits [`WIDTH`] columns unless `--wide` asks for the full table: kernel names,
//! sources, policies and hosts are shortened with an ellipsis as far as needed, each
//! seconds column shows the median across ranks (one value where one rank ran it), and
//! notes and hints are wrapped; the hints' own texts, which the JSON carries, are not
//! changed, only laid out again.

use crate::report::rank_key::RankKey;
use crate::report::{
    share, ForwardedHint, ForwardedKind, LaunchHint, ProgramKey, ProgramKind, ProgramRow,
    QueryHint, Report, Stats, SLOW_FACTOR, SLOW_MARGIN_S,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The columns the default text fits in: a terminal's width, not a full-screen one's.
pub const WIDTH: usize = 120;

/// Said when builds were made and no binary was asked for: pyopencl 2024.2.3 and newer
/// keep no binary cache on pocl, so the binary policies have nothing to act on.
pub const NO_BINARY_QUERY: &str = "note: no binary queries: the applications asked for no \
     program binaries (pyopencl 2024.2.3 and newer keep none on pocl), so --binaries \
     substitute and clshim unsubstitute have nothing to act on here; the program cache \
     (clshim run's default, CLSHIM_PROGRAM_CACHE=1) keeps their compiles in the native store \
     and serves them to later runs' source builds. This report measures builds and first \
     launches (where pocl compiles the kernels that run).";

/// Said instead when those processes ran with the program cache on, it served none of
/// their builds, and their records say no why (a clshim that did not record it): nothing
/// is promised.
pub const NOTHING_SERVED: &str = "note: no binary queries, and the program cache served none \
     of these builds; these traces do not say why (clshim records it with each build from \
     this version on). This report measures builds and first launches (where pocl compiles \
     the kernels that run).";

/// Said where processes under the program cache asked for binaries, or built sources that
/// differ by a token that changes every run: applications with a binary cache of their
/// own, which the program cache does not serve.
pub fn own_binary_cache(queries: usize, run_unique: bool) -> String {
    let mut why = Vec::new();
    if queries > 0 {
        why.push(format!(
            "they asked for program binaries ({})",
            plural(queries, "binary query", "binary queries")
        ));
    }
    if run_unique {
        why.push(
            "their sources differ by a token that changes every run (see Why it built)".into(),
        );
    }
    format!(
        "note: the program cache serves these applications nothing: {}. They keep a binary \
         cache of their own, which the program cache does not serve, and pyopencl before \
         2024.2.3 makes every cold build's source unique (pyopencl_defeat_cache_<uuid>), so \
         their compiles are kept for no later run. Run them with --binaries substitute \
         instead.",
        why.join(", and ")
    )
}

/// Said for a directory with no trace file: what may have kept every process from
/// recording (LD_PRELOAD.md, "Where each door does not reach").
pub const NO_TRACE_FILES: &str = "note: no trace files: no process recorded anything here. \
     The command may have made no OpenCL call (or failed before its first, or was not \
     found); it may reach OpenCL where neither door does (a loader it dlopens that reads no \
     OPENCL_LAYERS, such as CUDA's libOpenCL.so.1; a statically linked loader; a setuid \
     program; on macOS a protected binary such as /usr/bin/python3); or CLSHIM_TRACE_DIR \
     did not reach its processes (a launcher or batch system that does not pass the \
     environment on). LD_PRELOAD.md says what to do in each case.";

/// What a first launch's seconds cover, said in the table's footnote and the JSON.
pub const LAUNCH_INTERVAL: &str =
    "a first launch's seconds run from the enqueue call until the command completed: \
     the kernel's run, on pocl the compile of its size-specialised work-group function, \
     and on an in-order queue any wait for earlier commands. Launches of one process in \
     flight together are counted once: launch seconds are the wall-clock time they \
     covered, each launch adding only what no earlier one did (its own seconds stay in \
     its record)";

impl QueryHint {
    /// Said under `pass`, where it was measured: pyopencl 2023.1 (docs/performance.md, "The
    /// binary policies"), whose builds took 3.6-4x as long as with its cache off, and 0.95-1.19x
    /// under `substitute`; warm starts at native speed once the driver's binaries are made.
    pub fn text(&self) -> String {
        format!(
            "hint: binary queries on pocl CPU devices took {:.0}% of build time ({:.3} s of {:.3} s): \
             pocl compiles every kernel a second time to answer them.\n      \
             This run lacked CLSHIM_BINARIES=substitute: clshim run --binaries substitute \
             removes that compile from the application, and the node's warm service makes \
             the driver's binaries once, for the next runs' native loads.",
            100.0 * self.share(),
            self.pocl_cpu_query_seconds,
            self.total_seconds
        )
    }
}

impl ProgramKind {
    /// What the programs are (singular, plural).
    fn noun(self) -> (&'static str, &'static str) {
        match self {
            ProgramKind::Linked => ("linked program", "linked programs"),
            ProgramKind::Unseen => (
                "program made from a binary or built where clshim did not see it",
                "programs made from a binary or built where clshim did not see them",
            ),
            ProgramKind::Built => ("program built from source", "programs built from source"),
        }
    }

    /// Why clshim forwarded their binary queries.
    fn why(self) -> &'static str {
        match self {
            ProgramKind::Linked => {
                "clshim had no recipe to rebuild these (an input it did not see made, headers \
                 not made from source, or its recipe memory full), so it forwarded them"
            }
            ProgramKind::Unseen => "clshim keeps the implementation's answer for those",
            ProgramKind::Built => "clshim could not read their source back to carry it",
        }
    }
}

impl ForwardedHint {
    /// `names` gives a program row's name by its index.
    pub fn text(&self, names: impl Fn(usize) -> String) -> String {
        let policies = self.policies.iter().cloned().collect::<Vec<_>>().join("/");
        let mut o = format!(
            "hint: under {policies}, {} on pocl CPU devices that CLSHIM_DEVICES selects were still \
             forwarded: {:.0}% of build time ({:.3} s of {:.3} s),\n      and pocl compiles every \
             kernel a second time to answer them.",
            plural(self.queries, "binary query", "binary queries"),
            100.0 * self.share(),
            self.seconds,
            self.total_seconds
        );
        for ForwardedKind {
            kind,
            seconds: secs,
            rows,
            more,
        } in &self.kinds
        {
            let mut list = rows
                .iter()
                .map(|&i| format!("'{}'", clip(&names(i), 24)))
                .collect::<Vec<_>>()
                .join(", ");
            if *more > 0 {
                let _ = write!(list, " and {more} more");
            }
            let (one, many) = kind.noun();
            let _ = write!(
                o,
                "\n      {} ({list}), {:.3} s: {}.",
                plural(rows.len() + more, one, many),
                secs,
                kind.why()
            );
        }
        // Turning a binary cache off was measured to spare the second compile only for
        // pyopencl (PYOPENCL_NO_CACHE=1; clFFT, for one, still queries with its cache off).
        if self.python {
            o.push_str(
                "\n      These runs lacked PYOPENCL_NO_CACHE=1: with pyopencl's binary cache off \
                 it makes no binary queries (measured on pyopencl 2023.1: builds 0.25-0.28x of \
                 those with its cache on).",
            );
        }
        o
    }
}

/// The setting, checked on pocl 3.1 (`bench/pocl_wg_specialization.py`, figures in
/// docs/performance.md): with it, launches of a kernel at further sizes compiled nothing
/// and its first launch cost what it did without; run times differed by less than the
/// shared machine's noise on that kernel, so the hint asks the user to compare. Named only
/// on jobs of that shape ([`crate::report::RELAUNCH_SHARE`]).
pub const LAUNCH_SETTING: &str = "POCL_WORK_GROUP_SPECIALIZATION=0";

impl LaunchHint {
    /// What the launches' CPU measured, where their records carry it: the compile, not a
    /// wait in the queue, took their time.
    fn busy_words(&self) -> String {
        if self.busy_seconds <= 0.0 {
            return String::new();
        }
        let mut w = format!(
            ", and pocl's threads were busy for {:.3} s of them",
            self.busy_seconds
        );
        if self.untimed_seconds > 0.0 {
            let _ = write!(
                w,
                " ({:.3} s more in launches whose CPU time was not recorded)",
                self.untimed_seconds
            );
        }
        w
    }

    /// What to do about compiles no cache held: under the program cache, what it kept of
    /// them for later jobs, as their records say; without it, pocl's own kernel cache.
    fn cache_words(&self) -> String {
        if self.cached == 0 {
            return "This run lacked a pocl kernel cache holding these compiles: pocl's kernel \
                    cache (POCL_CACHE_DIR) spares them when the same sources run again with the \
                    same cache (measured on pocl 3.1: 0.17 s instead of 6.85 s)."
                .into();
        }
        let missed: usize = self.not_kept.values().sum();
        if self.kept + missed == 0 {
            return "No cache of this job held these compiles, and their records do not say \
                    the store kept any (no store: CLSHIM_NATIVE_STORE=off?)."
                .into();
        }
        let mut w = format!(
            "No cache of this job held these compiles: the program cache keeps them in the \
             store, where later jobs take them; {} of the {} launches that compiled under it \
             were kept",
            self.kept, self.cached
        );
        if missed > 0 {
            let mut v: Vec<(&String, &usize)> = self.not_kept.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let why: Vec<String> = v.iter().map(|(w, n)| format!("{n} {w}")).collect();
            let _ = write!(w, ", {missed} not kept ({})", why.join(", "));
        }
        w.push('.');
        w
    }

    pub fn text(&self) -> String {
        let head = format!(
            "hint: first launches on pocl CPU devices took {:.0}% of build time plus first launches \
             ({:.3} s of {:.3} s){}: at a kernel's first launch with new sizes, pocl compiles a \
             work-group function specialised for them.",
            100.0 * self.share(),
            self.pocl_cpu_launch_seconds,
            self.total_seconds,
            self.busy_words()
        );
        if self.specialization_helps {
            return format!(
                "{head}\n      {} of them ({:.3} s, {:.0}%) launched a kernel already launched with other \
                 sizes, pocl choosing the work-group size. This run lacked {LAUNCH_SETTING}, \
                 which makes pocl compile one generic work-group function per kernel and reuse \
                 it for every size:\n      those launches then compile nothing (each kernel's \
                 first launch still does), but the generic function can run slower: compare \
                 your kernels' run times with and without it.",
                self.relaunches,
                self.relaunch_seconds,
                100.0 * self.relaunch_share()
            );
        }
        let mut o = format!("{head}\n      {}", self.cache_words());
        if self.relaunches > 0 {
            o.push_str(&format!(
                " {LAUNCH_SETTING} is not advised here: launches at further sizes took {:.0}% \
                 of these first launches, fewer than where it was measured to help, and on such \
                 jobs its generic work-group functions can cost more than they spare.",
                100.0 * self.relaunch_share()
            ));
        }
        o
    }
}

fn join(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "-".into()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(",")
    }
}

/// `s` cut to `width` characters, the last an ellipsis where it was cut.
pub fn clip(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(width.saturating_sub(1)).collect();
        c.push('…');
        c
    }
}

/// `fnv1a64:0123456789abcdef` -> `0123456789ab` (enough to tell programs apart); a
/// linked program's `link:fnv1a64:0123…` -> `link:0123456789a`.
fn short_hash(h: Option<&str>) -> String {
    match h {
        None => "-".into(),
        Some(h) if h.starts_with(crate::report::LINK_HASH_PREFIX) => {
            let hex = h.rsplit(':').next().unwrap_or(h);
            let hex: String = hex.chars().take(11).collect();
            format!("{}{hex}", crate::report::LINK_HASH_PREFIX)
        }
        Some(h) => h.rsplit(':').next().unwrap_or(h).chars().take(12).collect(),
    }
}

fn secs(s: f64) -> String {
    format!("{s:.3}")
}

fn mmm(s: &Stats) -> String {
    format!("{} / {} / {}", secs(s.min), secs(s.median), secs(s.max))
}

/// A seconds cell: min / median / max in the wide table, else the median alone (which is
/// the one value where one rank ran the program).
fn stats_cell(s: &Stats, wide: bool) -> String {
    if wide {
        mmm(s)
    } else {
        secs(s.median)
    }
}

fn stats_json(s: &Stats) -> Value {
    json!({"min": s.min, "median": s.median, "max": s.max, "total": s.total})
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// One column: header, right-aligned or not, and how narrow an ellipsis may make it
/// when the table must fit a width (None: never shortened).
struct Column {
    header: &'static str,
    right: bool,
    shortest: Option<usize>,
}

const fn col(header: &'static str, right: bool) -> Column {
    Column {
        header,
        right,
        shortest: None,
    }
}

/// A column whose cells may be shortened with an ellipsis, down to `shortest` chars.
const fn clipped(header: &'static str, shortest: usize) -> Column {
    Column {
        header,
        right: false,
        shortest: Some(shortest),
    }
}

/// Column widths: each column's widest cell, then, while the line is wider than `fit`,
/// the column that may still lose the most chars (above its shortest) loses one: names
/// keep more of their length than the columns allowed to be narrow.
fn widths(cols: &[Column], rows: &[Vec<String>], fit: Option<usize>) -> Vec<usize> {
    let mut w: Vec<usize> = cols.iter().map(|c| c.header.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let Some(fit) = fit else { return w };
    // A leading space, two between columns.
    let line = |w: &[usize]| 1 + w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
    while line(&w) > fit {
        let shrink = (0..cols.len())
            .filter_map(|i| Some((i, w[i].checked_sub(cols[i].shortest?)?)))
            .filter(|&(_, slack)| slack > 0)
            .max_by_key(|&(i, slack)| (slack, std::cmp::Reverse(i)))
            .map(|(i, _)| i);
        match shrink {
            Some(i) => w[i] -= 1,
            None => break,
        }
    }
    w
}

fn table(out: &mut String, cols: &[Column], rows: &[Vec<String>], fit: Option<usize>) {
    let w = widths(cols, rows, fit);
    let line = |out: &mut String, cells: Vec<&str>| {
        let mut s = String::from(" ");
        for (i, c) in cells.iter().enumerate() {
            let c = &clip(c, w[i]);
            let pad = w[i] - c.chars().count();
            let last = i + 1 == cells.len();
            if cols[i].right {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if !last {
                    s.push_str(&" ".repeat(pad));
                }
            }
            if !last {
                s.push_str("  ");
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(out, cols.iter().map(|c| c.header).collect());
    for r in rows {
        line(out, r.iter().map(String::as_str).collect());
    }
}

/// Fits text laid out by another module (the "why it built" and cache sections) in
/// [`WIDTH`] unless `wide`: each line wrapped on its own, none joined.
pub fn fit(text: &str, wide: bool) -> String {
    if wide {
        return text.to_string();
    }
    text.split('\n')
        .map(|l| wrap(l, WIDTH))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lays prose (a note, a hint, a footnote) out for the text: unchanged in the wide
/// report; else lines broken by hand inside a sentence (a continuation line after one
/// that ends neither in `.` nor `:`) are joined again, and every line is wrapped at
/// [`WIDTH`].
fn prose(text: &str, wide: bool) -> String {
    if wide {
        return text.to_string();
    }
    let mut lines: Vec<String> = Vec::new();
    for l in text.split('\n') {
        match lines.last_mut() {
            Some(prev)
                if l.starts_with(' ') && !l.trim().is_empty() && !prev.ends_with(['.', ':']) =>
            {
                prev.push(' ');
                prev.push_str(l.trim_start());
            }
            _ => lines.push(l.to_string()),
        }
    }
    lines
        .iter()
        .map(|l| wrap(l, WIDTH))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One line wrapped at `width` chars, at spaces (a word wider than a line is cut). The
/// continuation lines are indented like the line, or under the text after a short
/// label (`hint: `, `note: `, `launches: `).
fn wrap(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let body = line.trim_start();
    let lead = line.len() - body.len();
    let indent = match line.find(": ") {
        _ if lead > 0 => lead,
        Some(i) if i <= 10 && !line[..i].contains(' ') => i + 2,
        _ => 4,
    };
    let mut out = String::new();
    let mut cur = line[..lead].to_string();
    let mut n = lead;
    let mut empty = true;
    for word in body.split(' ').filter(|w| !w.is_empty()) {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            if !empty && n + 1 + word.len() > width {
                out.push_str(&cur);
                out.push('\n');
                cur = " ".repeat(indent);
                n = indent;
                empty = true;
            }
            let room = width.saturating_sub(n + usize::from(!empty)).max(1);
            if word.len() <= room {
                if !empty {
                    cur.push(' ');
                    n += 1;
                }
                cur.extend(&word);
                n += word.len();
                empty = false;
                break;
            }
            // Wider than a whole line: cut it.
            cur.extend(&word[..room]);
            n += room;
            empty = false;
            word.drain(..room);
        }
    }
    out.push_str(&cur);
    out
}

/// The source column: a linked program says what it was linked from (with the number
/// of distinct sources where ranks linked different ones); a built one its source hash.
fn source_cell(p: &ProgramRow) -> String {
    let hash = match (&p.key.hash, p.sources.len()) {
        (Some(h), _) => short_hash(Some(h)),
        (None, 1) => short_hash(p.sources.iter().next().map(String::as_str)),
        (None, 0) => short_hash(None),
        (None, n) => format!("{n} sources"),
    };
    if p.origins.is_empty() {
        return hash;
    }
    let what = p.origins.iter().cloned().collect::<Vec<_>>().join("; ");
    match (&p.key.hash, p.sources.len()) {
        (Some(_), _) => format!("{what} {hash}"),
        (None, n) if n > 1 => format!("{what}, {hash}"),
        _ => what,
    }
}

impl Report {
    /// Programs whose ranks built the same kernel names from different sources, and none of
    /// whose builds or first launches took what another made (a peer's compile, the store's,
    /// pocl's cache's, a served binary): where one did, ranks did reuse each other's builds,
    /// and the note would say they did not.
    fn variant_rows(&self) -> impl Iterator<Item = &ProgramRow> {
        self.programs
            .iter()
            .filter(|p| p.rank_variants > 1 && p.reused == 0)
    }

    /// Said when ranks built the same kernels from different sources and none took
    /// another's build: nothing was shared between them, and the usual cause is in the
    /// application's kernel text.
    pub fn variants_note(&self) -> Option<String> {
        let rows: Vec<&ProgramRow> = self.variant_rows().collect();
        let first = rows.first()?;
        let more = match rows.len() {
            1 => String::new(),
            n => format!(" and {}", plural(n - 1, "more program", "more programs")),
        };
        Some(format!(
            "note: {} ({} sources on {} ranks){more}: the same kernel names were built from \
             different sources on different ranks,\n      so each rank compiles its own variant \
             and none reuses another's build (pocl's kernel cache and binary caches match the \
             exact text).\n      Constants or shapes baked into the kernel text make the \
             sources differ: pass them as kernel arguments, or make them\n      equal on every \
             rank, to compile once. (pyopencl before 2024.2.3 makes every cold build's source \
             unique: upgrade it,\n      or set PYOPENCL_NO_CACHE=1.) --by-source shows one row \
             per source.",
            clip(&self.program_name(&first.key), 40),
            first.sources.len().max(first.rank_variants),
            first.ranks,
        ))
    }

    fn program_name(&self, key: &ProgramKey) -> String {
        if key.failed {
            return if key.kernels.is_empty() {
                "(failed build)".into()
            } else {
                format!("{} (failed build)", key.kernels.join(","))
            };
        }
        if let Some(name) = key.unnamed {
            name.into()
        } else if key.kernels.is_empty() {
            if key.hash.is_none() {
                "(unknown program)".into()
            } else {
                "(no kernels)".into()
            }
        } else {
            key.kernels.join(",")
        }
    }

    /// What the figures below mean, or do not, said before them: runs added together,
    /// processes with no end, no binary query for any policy to act on.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.files == 0 {
            notes.push(NO_TRACE_FILES.to_string());
        }
        if let [first, rest @ ..] = self.runs.as_slice() {
            if !rest.is_empty() {
                let when: Vec<String> = self
                    .runs
                    .iter()
                    .map(|l| {
                        format!(
                            "{} at +{:.0} s",
                            plural(l.processes, "process", "processes"),
                            l.start - first.start
                        )
                    })
                    .collect();
                notes.push(format!(
                    "note: {} runs in this directory, processes that ran at separate times \
                     ({}): a trace directory reused by another run, or one job's processes one \
                     after another. Their figures are added together below; give each run its \
                     own --trace-dir.",
                    self.runs.len(),
                    when.join(", ")
                ));
            }
        }
        if !self.unended.is_empty() {
            const NAMED: usize = 5;
            let mut names = self.unended[..self.unended.len().min(NAMED)].join(", ");
            if self.unended.len() > NAMED {
                let _ = write!(names, " and {} more", self.unended.len() - NAMED);
            }
            notes.push(format!(
                "note: {} no end (killed, crashed, or gone through _exit or exec before \
                 exiting): {names}. Its figures stop at its last record, so it can look like a \
                 finished, faster process.",
                plural(self.unended.len(), "process has", "processes have"),
            ));
        }
        let t = &self.totals;
        if self.no_binary_query() {
            // Under the program cache, the line on its builds says why each was not served,
            // and what the builds it did not serve took instead.
            if t.program_cache_processes == 0 {
                notes.push(NO_BINARY_QUERY.to_string());
            } else if t.loads.not_served.is_empty() && t.loads.builds.took() == 0 {
                notes.push(NOTHING_SERVED.to_string());
            }
        }
        if t.program_cache_processes > 0 && (t.program_cache_queries > 0 || self.run_unique_tokens)
        {
            notes.push(own_binary_cache(
                t.program_cache_queries,
                self.run_unique_tokens,
            ));
        }
        notes
    }

    /// Builds were made and no binary asked for or loaded: no policy had anything to do.
    fn no_binary_query(&self) -> bool {
        let t = &self.totals;
        t.builds > 0 && t.queries == 0 && t.binary_loads == 0 && t.loads.builds.served == 0
    }

    /// The text report: fitted to [`WIDTH`] columns, or the full table when `wide`.
    pub fn text(&self, wide: bool) -> String {
        let t = &self.totals;
        let launches = t.launches > 0;
        let fit = (!wide).then_some(WIDTH);
        let mut o = String::new();
        let head = format!(
            "{}, {} on {} in {}; {}, {}, {} skipped",
            plural(self.ranks.len(), "rank", "ranks"),
            plural(self.processes, "process", "processes"),
            plural(self.hosts.len(), "host", "hosts"),
            plural(self.runs.len(), "run", "runs"),
            plural(self.files, "file", "files"),
            plural(self.records, "record", "records"),
            self.skipped,
        );
        let line = format!("clshim report: {}: {head}", self.dir);
        if wide || line.chars().count() <= WIDTH {
            let _ = writeln!(o, "{line}");
        } else {
            // A long directory: the counts on a line of their own.
            let _ = writeln!(
                o,
                "{}",
                prose(&format!("clshim report: {}:", self.dir), wide)
            );
            let _ = writeln!(o, "{}", prose(&format!("    {head}"), wide));
        }
        let _ = writeln!(
            o,
            "build time {} s: builds {} s, binary queries {} s ({:.0}%)",
            secs(t.build_seconds + t.query_seconds),
            secs(t.build_seconds),
            secs(t.query_seconds),
            100.0 * share(t.query_seconds, t.build_seconds)
        );
        if launches {
            let _ = writeln!(
                o,
                "first launches {} s wall clock: {} ({:.0}% of build time plus first launches)",
                secs(t.launch_seconds),
                plural(t.launches, "first launch", "first launches"),
                100.0 * share(t.launch_seconds, t.build_seconds + t.query_seconds)
            );
        }
        if let Some(line) = t.loads.builds_line() {
            let _ = writeln!(o, "{line}");
        }
        if let Some(line) = t.loads.line() {
            let _ = writeln!(o, "{line}");
        }
        for n in self.notes() {
            o.push('\n');
            o.push_str(&prose(&n, wide));
            o.push('\n');
        }
        o.push('\n');
        if self.programs.is_empty() {
            o.push_str("No program builds, binary queries or first launches recorded.\n");
        } else {
            o.push_str(if wide {
                "Programs (slowest first; seconds are per-rank sums, min / median / max across ranks)\n"
            } else {
                "Programs (slowest first; seconds are per-rank sums, the median across ranks; --wide shows min / median / max)\n"
            });
            let rows: Vec<Vec<String>> = self
                .programs
                .iter()
                .map(|p| {
                    let mut row = vec![
                        clip(&self.program_name(&p.key), 40),
                        clip(&source_cell(p), 48),
                        p.ranks.to_string(),
                        (p.builds + p.compiles + p.links).to_string(),
                        stats_cell(&p.build, wide),
                        p.queries.to_string(),
                        stats_cell(&p.query, wide),
                        format!("{:.0}%", 100.0 * p.query_share()),
                    ];
                    if launches {
                        row.push(p.launches.to_string());
                        row.push(stats_cell(&p.launch, wide));
                    }
                    row.push(join(&p.policies));
                    row.push(join(&p.actions));
                    row
                })
                .collect();
            let (build_s, query_s, query_share, launch_s) = if wide {
                (
                    "build s (min / med / max)",
                    "query s (min / med / max)",
                    "query share",
                    "first launch s (min / med / max)",
                )
            } else {
                ("build s", "query s", "query %", "launch s")
            };
            let mut cols = vec![
                clipped("kernels", 16),
                clipped("source", 9),
                col("ranks", true),
                col("builds", true),
                col(build_s, true),
                col("queries", true),
                col(query_s, true),
                col(query_share, true),
            ];
            if launches {
                cols.push(col("launches", true));
                cols.push(col(launch_s, true));
            }
            cols.push(clipped("policy", 6));
            cols.push(clipped("action", 7));
            table(&mut o, &cols, &rows, fit);
            let failed: usize = self.programs.iter().map(|p| p.failed).sum();
            if failed > 0 {
                let _ = writeln!(
                    o,
                    " ({} returned an error)",
                    plural(failed, "call", "calls")
                );
            }
            for p in self.programs.iter().filter(|p| !p.errors.is_empty()) {
                for e in &p.errors {
                    let line = format!(" {}: {e}", clip(&self.program_name(&p.key), 40));
                    let _ = writeln!(o, "{}", if wide { line } else { wrap(&line, WIDTH) });
                }
            }
        }
        if !self.ranks.is_empty() {
            let _ = writeln!(
                o,
                "\nRanks (median total {} s; 'SLOW' = over {SLOW_FACTOR}x the median and {SLOW_MARGIN_S} s more)",
                secs(self.median_rank_seconds)
            );
            let rows: Vec<Vec<String>> = self
                .ranks
                .iter()
                .map(|r| {
                    let mut row = vec![
                        r.label.clone(),
                        join(&r.hosts),
                        r.processes.to_string(),
                        r.builds.to_string(),
                        secs(r.build_seconds),
                        r.queries.to_string(),
                        secs(r.query_seconds),
                    ];
                    if launches {
                        row.push(r.launches.to_string());
                        row.push(secs(r.launch_seconds));
                    }
                    row.push(secs(r.total()));
                    row.push(if r.slow {
                        format!(
                            "SLOW ({:.1}x median)",
                            r.total() / self.median_rank_seconds.max(1e-9)
                        )
                    } else {
                        String::new()
                    });
                    row
                })
                .collect();
            let mut cols = vec![
                col("rank", true),
                clipped("host", 8),
                col("processes", true),
                col("builds", true),
                col("build s", true),
                col("queries", true),
                col("query s", true),
            ];
            if launches {
                cols.push(col("launches", true));
                cols.push(col("launch s", true));
            }
            cols.push(col("total s", true));
            cols.push(col("", false));
            table(&mut o, &cols, &rows, fit);
        }
        if let Some(n) = self.variants_note() {
            o.push('\n');
            o.push_str(&prose(&n, wide));
            o.push('\n');
        }
        if launches {
            let n = format!(
                "launches: the first launch of each kernel per device and work-group sizes;\n          {LAUNCH_INTERVAL}."
            );
            let _ = writeln!(o, "\n{}", prose(&n, wide));
        }
        let name = |i: usize| clip(&self.program_name(&self.programs[i].key), 40);
        for h in [
            self.hint.as_ref().map(QueryHint::text),
            self.forwarded_hint.as_ref().map(|h| h.text(name)),
            self.launch_hint.as_ref().map(LaunchHint::text),
        ]
        .into_iter()
        .flatten()
        {
            o.push('\n');
            o.push_str(&prose(&h, wide));
            o.push('\n');
        }
        if self.skipped > 0 {
            let _ = writeln!(
                o,
                "\n{} skipped (listed on stderr)",
                plural(self.skipped, "input problem", "input problems")
            );
        }
        o
    }

    pub fn json(&self) -> Value {
        let t = &self.totals;
        let programs: Vec<Value> = self
            .programs
            .iter()
            .map(|p| {
                json!({
                    "kernels": p.key.kernels,
                    "name": self.program_name(&p.key),
                    "linked_from": p.origins,
                    "sources_differ_across_ranks": p.rank_variants > 1,
                    "source_hash": p.key.hash.clone().or_else(|| (p.sources.len() == 1).then(|| p.sources.iter().next().unwrap().clone())),
                    "sources": p.sources,
                    "ranks": p.ranks,
                    "builds": p.builds,
                    "compiles": p.compiles,
                    "links": p.links,
                    "binary_queries": p.queries,
                    "first_launches": p.launches,
                    "failed_calls": p.failed,
                    "build_seconds": stats_json(&p.build),
                    "binary_query_seconds": stats_json(&p.query),
                    "first_launch_seconds": stats_json(&p.launch),
                    "binary_query_share": p.query_share(),
                    "first_launch_share": share(p.launch.total, p.build.total + p.query.total),
                    "policies": p.policies,
                    "actions": p.actions,
                    "options": p.options,
                    "failed_build": p.key.failed,
                    "errors": p.errors,
                })
            })
            .collect();
        let ranks: Vec<Value> = self
            .ranks
            .iter()
            .map(|r| {
                let (rank, instance) = match &r.key {
                    RankKey::Rank(n) => (json!(n), None),
                    RankKey::Process { instance, .. } => (Value::Null, instance.clone()),
                };
                json!({
                    "rank": rank,
                    "label": r.label,
                    "instance": instance,
                    "hosts": r.hosts,
                    "pids": r.pids,
                    "processes": r.processes,
                    "builds": r.builds,
                    "build_seconds": r.build_seconds,
                    "binary_queries": r.queries,
                    "binary_query_seconds": r.query_seconds,
                    "first_launches": r.launches,
                    "first_launch_seconds": r.launch_seconds,
                    "total_seconds": r.total(),
                    "slow": r.slow,
                })
            })
            .collect();
        json!({
            "clshim_report": 1,
            "dir": self.dir,
            "files": self.files,
            "processes": self.processes,
            "runs": self.runs.iter().map(|l| json!({
                "start": l.start, "end": l.end, "processes": l.processes,
            })).collect::<Vec<_>>(),
            "processes_without_end": self.unended,
            "notes": self.notes(),
            "hosts": self.hosts,
            "records": self.records,
            "skipped": self.skipped,
            "problems": self.problems,
            "build_seconds": t.build_seconds,
            "binary_query_seconds": t.query_seconds,
            "binary_query_share": share(t.query_seconds, t.build_seconds),
            "clshim_binary_loads": t.loads.json(),
            "program_cache_builds": t.loads.builds_json(),
            "first_launches": t.launches,
            "first_launch_seconds": t.launch_seconds,
            "first_launch_share": share(t.launch_seconds, t.build_seconds + t.query_seconds),
            "first_launch_interval": LAUNCH_INTERVAL,
            "pocl_cpu_pass_binary_query_seconds": t.pocl_cpu_pass_query_seconds,
            "pocl_cpu_first_launch_seconds": t.pocl_cpu_launch_seconds,
            "median_rank_seconds": self.median_rank_seconds,
            "programs": programs,
            "ranks": ranks,
            "variants_note": self.variants_note(),
            "hint": self.hint.as_ref().map(|h| json!({
                "binary_query_share": h.share(),
                "setting": "CLSHIM_BINARIES=substitute",
                "text": h.text(),
            })),
            "forwarded_hint": self.forwarded_hint.as_ref().map(|h| json!({
                "binary_query_share": h.share(),
                "binary_queries": h.queries,
                "binary_query_seconds": h.seconds,
                "kinds": h.kinds.iter().map(|k| json!({
                    "kind": format!("{:?}", k.kind).to_lowercase(),
                    "seconds": k.seconds,
                    "programs": k.rows.iter().map(|&i| self.program_name(&self.programs[i].key)).collect::<Vec<_>>(),
                    "more_programs": k.more,
                })).collect::<Vec<_>>(),
                "text": h.text(|i| self.program_name(&self.programs[i].key)),
            })),
            "first_launch_hint": self.launch_hint.as_ref().map(|h| json!({
                "first_launch_share": h.share(),
                "compile_seconds": h.compile_seconds(),
                "busy_seconds": h.busy_seconds,
                "untimed_seconds": h.untimed_seconds,
                "relaunches": h.relaunches,
                "relaunch_seconds": h.relaunch_seconds,
                "setting": h.specialization_helps.then_some(LAUNCH_SETTING),
                "text": h.text(),
            })),
        })
    }
}
