//! "Why did it build on every rank?": for each program whose kernel names were built from
//! more than one variant (source, options, device or driver), the variants with how many
//! ranks and builds each, and what differs between the most common variant and each other
//! one, in words a user can act on (only numeric literals, only a token that changes
//! every run, only the options, only the device or driver, or the text), with the
//! differing lines and tokens when the sources were kept (`--sources`).

use crate::report::build_facts::{rank_list, read_kept, Facts, Tally, Variant};
use crate::report::linediff::{self, Change, TextKind};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write;
use std::path::Path;

/// Programs shown in the text, variants per program, changed lines per variant.
pub const PROGRAMS_SHOWN: usize = 6;
pub const VARIANTS_SHOWN: usize = 3;
pub const CHANGES_SHOWN: usize = 3;
/// Widest line of the text: the report's.
use crate::report::render::WIDTH;

/// What makes one variant differ from another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Numeric,
    RunUnique,
    Options,
    Device,
    Text,
    /// The texts differ but were not kept.
    NotKept,
}

impl Kind {
    /// A few words, for counting the kinds of many variants.
    pub fn words(self) -> &'static str {
        match self {
            Kind::Numeric => "numeric literals",
            Kind::RunUnique => "a run-unique token",
            Kind::Options => "options",
            Kind::Device => "device or driver",
            Kind::Text => "text",
            Kind::NotKept => "sources not kept",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Numeric => "numeric_literals",
            Kind::RunUnique => "run_unique_token",
            Kind::Options => "options",
            Kind::Device => "device_or_driver",
            Kind::Text => "text",
            Kind::NotKept => "sources_not_kept",
        }
    }
}

#[derive(Debug)]
pub struct Difference {
    pub kind: Kind,
    pub words: String,
    /// The first changed lines (`linediff` keeps a bounded number) and how many in all.
    pub changes: Vec<Change>,
    pub changes_total: usize,
    pub tokens: Vec<(String, String)>,
    pub tokens_total: usize,
}

/// One variant of a program: what it was built from, where and how often.
#[derive(Debug)]
pub struct Shown {
    pub variant: Variant,
    pub tally: Tally,
    /// Against the most common variant (None for that one).
    pub difference: Option<Difference>,
}

#[derive(Debug)]
pub struct Program {
    pub kernels: Vec<String>,
    /// Which program of these kernel names (see `Variant::nth`).
    pub nth: usize,
    pub variants: Vec<Shown>,
}

/// Options as a set of words, for saying which were added and which removed.
fn option_change(a: Option<&str>, b: Option<&str>) -> String {
    let words = |o: Option<&str>| -> BTreeSet<String> {
        o.unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let (wa, wb) = (words(a), words(b));
    let gone: Vec<&String> = wa.difference(&wb).collect();
    let new: Vec<&String> = wb.difference(&wa).collect();
    let mut parts = Vec::new();
    if !gone.is_empty() {
        parts.push(format!(
            "[-{}-]",
            gone.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    if !new.is_empty() {
        parts.push(format!(
            "{{+{}+}}",
            new.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
        ));
    }
    if parts.is_empty() {
        // Same words, another order or spacing.
        format!("{:?} vs {:?}", a.unwrap_or(""), b.unwrap_or(""))
    } else {
        parts.join(" ")
    }
}

/// A variant's kept source text, if it was kept in `dir`.
fn text_of(v: &Variant, dir: &Path) -> Option<String> {
    v.kept.as_deref().and_then(|r| read_kept(dir, r, "cl"))
}

/// What differs from `base` (in `base_dir`) to `other` (in `other_dir`).
pub fn compare(base: &Variant, base_dir: &Path, other: &Variant, other_dir: &Path) -> Difference {
    let texts = || (text_of(base, base_dir), text_of(other, other_dir));
    compare_texts(base, other, texts)
}

/// As [`compare`], with the kept texts read only when the sources differ.
fn compare_texts(
    base: &Variant,
    other: &Variant,
    texts: impl FnOnce() -> (Option<String>, Option<String>),
) -> Difference {
    let options_differ = base.options != other.options;
    let devices_differ = base.devices != other.devices;
    let same_text = base.hash.is_some() && base.hash == other.hash;
    let mut d = Difference {
        kind: Kind::Text,
        words: String::new(),
        changes: Vec::new(),
        changes_total: 0,
        tokens: Vec::new(),
        tokens_total: 0,
    };
    if same_text {
        if options_differ {
            d.kind = Kind::Options;
            d.words = format!(
                "only the build options differ ({}): make them equal to build once",
                option_change(base.options.as_deref(), other.options.as_deref())
            );
        } else if devices_differ {
            d.kind = Kind::Device;
            d.words = format!(
                "only the device or driver version differs ({} vs {}): each needs its own build",
                base.devices, other.devices
            );
        } else {
            d.words = "the same text, options and devices".into();
        }
        return d;
    }
    let (Some(a), Some(b)) = texts() else {
        d.kind = Kind::NotKept;
        d.words =
            "the source texts differ (run with --sources, CLSHIM_TRACE_SOURCES=1, to see how)"
                .into();
        return d;
    };
    let t = linediff::diff(&a, &b);
    d.kind = match t.kind {
        TextKind::Numeric => Kind::Numeric,
        TextKind::RunUnique => Kind::RunUnique,
        TextKind::Other => Kind::Text,
    };
    d.words = match d.kind {
        Kind::Numeric => "only numeric literals differ: sizes or constants baked into the text; pass them as \
             kernel arguments, or make them equal, to build once"
            .into(),
        Kind::RunUnique => "only a token that changes every run differs (a uuid, counter or timestamp): a cache \
             defeated on purpose (pyopencl before 2024.2.3 does it on each build its own cache misses: \
             upgrade it)"
            .into(),
        _ => format!(
            "the text differs ({} changed {})",
            t.changes_total,
            if t.changes_total == 1 { "line" } else { "lines" }
        ),
    };
    if t.also_run_unique && d.kind != Kind::RunUnique {
        d.words.push_str(
            "; a token that changes every run differs too (a cache defeated on purpose: pyopencl \
             before 2024.2.3)",
        );
    }
    if options_differ {
        d.words.push_str(&format!(
            "; the options differ too ({})",
            option_change(base.options.as_deref(), other.options.as_deref())
        ));
    }
    if devices_differ {
        d.words.push_str("; and the devices");
    }
    d.changes = t.changes;
    d.changes_total = t.changes_total;
    d.tokens = t.tokens;
    d.tokens_total = t.tokens_total;
    d
}

/// Whether some program's variants differ only by a token that changes every run (a cache
/// defeated on purpose, as pyopencl before 2024.2.3 does at every cold build).
pub fn run_unique(programs: &[Program]) -> bool {
    programs.iter().any(|p| {
        p.variants.iter().any(|v| {
            v.difference
                .as_ref()
                .is_some_and(|d| d.kind == Kind::RunUnique)
        })
    })
}

/// The programs built from more than one variant, most builds first.
pub fn programs(facts: &Facts, dir: &Path) -> Vec<Program> {
    // Variants that differ only in their kept references are one; any file's references
    // will do (they name the same text).
    let mut groups: BTreeMap<(Vec<String>, usize), BTreeMap<Variant, Tally>> = BTreeMap::new();
    let mut refs: HashMap<Variant, (Option<String>, Option<String>)> = HashMap::new();
    for (v, t) in &facts.variants {
        if v.served {
            continue;
        }
        let key = Variant {
            kept: None,
            options_kept: None,
            ..v.clone()
        };
        if v.kept.is_some() || v.options_kept.is_some() {
            refs.entry(key.clone())
                .or_insert_with(|| (v.kept.clone(), v.options_kept.clone()));
        }
        let e = groups
            .entry((v.kernels.clone(), v.nth))
            .or_default()
            .entry(key)
            .or_default();
        e.builds += t.builds;
        e.seconds += t.seconds;
        e.query_seconds += t.query_seconds;
        e.ranks.extend(t.ranks.iter().cloned());
    }
    let mut out = Vec::new();
    for ((kernels, nth), g) in groups {
        if g.len() < 2 {
            continue;
        }
        let mut vs: Vec<(Variant, Tally)> = g.into_iter().collect();
        vs.sort_by(|a, b| {
            (b.1.ranks.len(), b.1.builds)
                .cmp(&(a.1.ranks.len(), a.1.builds))
                .then_with(|| a.0.cmp(&b.0))
        });
        for (v, _) in vs.iter_mut() {
            if let Some((k, o)) = refs.get(v) {
                v.kept = k.clone();
                v.options_kept = o.clone();
            }
        }
        let base = vs[0].0.clone();
        // The base text is read once for the whole group.
        let mut base_text: Option<Option<String>> = None;
        let variants = vs
            .into_iter()
            .enumerate()
            .map(|(i, (variant, tally))| Shown {
                difference: (i > 0).then(|| {
                    compare_texts(&base, &variant, || {
                        let b = base_text.get_or_insert_with(|| text_of(&base, dir)).clone();
                        (b, text_of(&variant, dir))
                    })
                }),
                variant,
                tally,
            })
            .collect();
        out.push(Program {
            kernels,
            nth,
            variants,
        });
    }
    out.sort_by(|a, b| {
        let n = |p: &Program| p.variants.iter().map(|v| v.tally.builds).sum::<usize>();
        n(b).cmp(&n(a))
            .then_with(|| (&a.kernels, a.nth).cmp(&(&b.kernels, b.nth)))
    });
    out
}

/// Kernel names, with `#n` for the n-th distinct program of those names in a process.
pub fn program_name(kernels: &[String], nth: usize, width: usize) -> String {
    let names = kernels.join(",");
    if nth == 0 {
        fit(&names, width)
    } else {
        let tail = format!(" #{}", nth + 1);
        fit(&names, width.saturating_sub(tail.len()).max(8)) + &tail
    }
}

fn short(h: Option<&str>) -> String {
    h.map(|h| {
        let h = h.strip_prefix("fnv1a64:").unwrap_or(h);
        h.chars().take(8).collect()
    })
    .unwrap_or_else(|| "-".into())
}

/// A line cut to fit `width`, keeping its first marked token in view.
pub fn fit(line: &str, width: usize) -> String {
    let chars: Vec<char> = line.trim_end().chars().collect();
    if chars.len() <= width {
        return chars.iter().collect();
    }
    let mark = line
        .find("[-")
        .or_else(|| line.find("{+"))
        .map(|b| line[..b].chars().count())
        .unwrap_or(0);
    let start = mark.saturating_sub(width / 3).min(chars.len() - width + 3);
    let mut s: String = if start > 0 {
        "...".into()
    } else {
        String::new()
    };
    let room = width - s.len() - 3;
    s.extend(chars[start..].iter().take(room));
    s.push_str("...");
    s
}

/// The changed lines of a difference, a few, indented; `total` is how many there were.
pub fn changes_text(o: &mut String, changes: &[Change], total: usize, indent: &str) {
    for c in changes.iter().take(CHANGES_SHOWN) {
        let w = WIDTH.saturating_sub(indent.len() + 12);
        if let Some(old) = &c.old {
            let _ = writeln!(o, "{indent}line {:>4} - {}", c.old_line, fit(old, w));
        }
        if let Some(new) = &c.new {
            let _ = writeln!(o, "{indent}line {:>4} + {}", c.new_line, fit(new, w));
        }
    }
    let shown = changes.len().min(CHANGES_SHOWN);
    if total > shown {
        let _ = writeln!(o, "{indent}... {} more changed lines", total - shown);
    }
}

/// Appends `text` to `o` as lines of words within `WIDTH` columns, each starting with
/// `indent`.
pub fn wrap(o: &mut String, text: &str, indent: &str) {
    let mut line = String::from(indent);
    for w in text.split(' ') {
        if line.len() + w.len() + 1 > WIDTH && line.len() > indent.len() {
            let _ = writeln!(o, "{}", line.trim_end());
            line = String::from(indent);
        }
        line.push_str(w);
        line.push(' ');
    }
    if line.len() > indent.len() {
        let _ = writeln!(o, "{}", line.trim_end());
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

pub fn text(programs: &[Program], kept_any: bool) -> String {
    let mut o = String::new();
    if programs.is_empty() {
        return o;
    }
    let _ = writeln!(
        o,
        "\nWhy it built: {} built from more than one variant (A is the most common; each other one \
         against A)",
        plural(programs.len(), "program was", "programs were")
    );
    for p in programs.iter().take(PROGRAMS_SHOWN) {
        let name = program_name(&p.kernels, p.nth, 60);
        let _ = writeln!(
            o,
            "  {name}: {}",
            plural(p.variants.len(), "variant", "variants")
        );
        for (i, v) in p.variants.iter().take(VARIANTS_SHOWN).enumerate() {
            let letter = (b'A' + (i as u8).min(25)) as char;
            let _ = writeln!(
                o,
                "    {letter}  {} ({}), {}, {:.2} s; source {}",
                plural(v.tally.ranks.len(), "rank", "ranks"),
                rank_list(&v.tally.ranks),
                plural(v.tally.builds, "build", "builds"),
                v.tally.seconds,
                short(v.variant.hash.as_deref()),
            );
            if let Some(d) = &v.difference {
                wrap(&mut o, &d.words, "       ");
                changes_text(&mut o, &d.changes, d.changes_total, "       ");
            }
        }
        if p.variants.len() > VARIANTS_SHOWN {
            let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
            for v in &p.variants[1..] {
                if let Some(d) = &v.difference {
                    *kinds.entry(d.kind.words()).or_default() += 1;
                }
            }
            let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} ({n})")).collect();
            let _ = writeln!(
                o,
                "    ... {} more variants (--json lists them); all {} others differ from A by: {}",
                p.variants.len() - VARIANTS_SHOWN,
                p.variants.len() - 1,
                kinds.join(", ")
            );
        }
    }
    if programs.len() > PROGRAMS_SHOWN {
        let _ = writeln!(
            o,
            "  ... {} more programs (--json lists them)",
            programs.len() - PROGRAMS_SHOWN
        );
    }
    if !kept_any {
        let _ = writeln!(
            o,
            "  Sources were not kept: run with `clshim run --sources` (CLSHIM_TRACE_SOURCES=1) to see what differs."
        );
    }
    o
}

pub fn difference_json(d: &Difference) -> Value {
    json!({
        "kind": d.kind.name(),
        "words": d.words,
        "changes": d.changes.iter().map(|c| json!({
            "old_line": c.old_line, "new_line": c.new_line, "old": c.old, "new": c.new,
        })).collect::<Vec<_>>(),
        "changes_left_out": d.changes_total - d.changes.len(),
        "tokens": d.tokens.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
        "tokens_left_out": d.tokens_total - d.tokens.len(),
    })
}

pub fn json(programs: &[Program]) -> Value {
    Value::Array(
        programs
            .iter()
            .map(|p| {
                json!({
                    "kernels": p.kernels,
                    "nth": p.nth,
                    "variants": p.variants.iter().map(|v| json!({
                        "source_hash": v.variant.hash,
                        "source_kept": v.variant.kept,
                        "options": v.variant.options,
                        "options_kept": v.variant.options_kept,
                        "devices": v.variant.devices,
                        "ranks": v.tally.ranks.len(),
                        "rank_list": rank_list(&v.tally.ranks),
                        "builds": v.tally.builds,
                        "build_seconds": v.tally.seconds,
                        "difference": v.difference.as_ref().map(difference_json),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

/// Whether any build record of the run referenced a kept source.
pub fn kept_any(facts: &Facts) -> bool {
    facts.variants.keys().any(|v| v.kept.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(hash: &str, options: &str, devices: &str) -> Variant {
        Variant {
            kernels: vec!["k".into()],
            hash: Some(hash.into()),
            kept: None,
            options: Some(options.into()),
            options_kept: None,
            devices: devices.into(),
            served: false,
            nth: 0,
        }
    }

    #[test]
    fn options_devices_and_unkept_texts() {
        let none = || -> (Option<String>, Option<String>) { panic!("no text needed") };
        let a = variant("h1", "-DN=1 -O2", "cpu (3.1)");
        let d = compare_texts(&a, &variant("h1", "-O2 -DN=2", "cpu (3.1)"), none);
        assert_eq!(d.kind, Kind::Options);
        assert!(d.words.contains("[--DN=1-] {+-DN=2+}"), "{}", d.words);
        let d = compare_texts(&a, &variant("h1", "-DN=1 -O2", "cpu (4.0)"), none);
        assert_eq!(d.kind, Kind::Device);
        assert!(d.words.contains("cpu (3.1) vs cpu (4.0)"), "{}", d.words);
        let d = compare_texts(&a, &variant("h2", "-DN=1 -O2", "cpu (3.1)"), || {
            (None, None)
        });
        assert_eq!(d.kind, Kind::NotKept);
        let d = compare_texts(&a, &variant("h2", "-DN=1", "cpu (3.1)"), || {
            (Some("int n = 4;".into()), Some("int n = 8;".into()))
        });
        assert_eq!(d.kind, Kind::Numeric);
        assert!(
            d.words.contains("the options differ too ([--O2-])"),
            "{}",
            d.words
        );
    }

    #[test]
    fn long_lines_are_cut_around_their_first_mark() {
        let line = format!("{}[-1-]{}", "a".repeat(200), "b".repeat(200));
        let cut = fit(&line, 60);
        assert_eq!(cut.chars().count(), 60);
        assert!(cut.contains("[-1-]") && cut.starts_with("...") && cut.ends_with("..."));
        assert_eq!(fit("short", 60), "short");
    }
}
