//! What differs between two texts of one kernel, in words a user can act on: a line diff
//! (common lines at both ends set aside, the middle matched by longest common
//! subsequence, bounded so a huge text costs at most [`MAX_CELLS`] steps), the changed
//! lines paired and compared token by token, and the kind of difference the differing
//! tokens make: only numeric literals (sizes or constants baked into the text), only a
//! token that changes every run (a uuid, a counter, a timestamp), or anything else.
//! What a diff keeps is bounded whatever the texts: the first [`CHANGES_KEPT`] changed
//! lines and [`TOKENS_KEPT`] token pairs, each cut to [`LINE_KEPT`] characters around its
//! first mark, with the counts of all; the kind is decided from every token as it goes.

/// Most cells of the longest-common-subsequence table; a larger middle is shown as one
/// replaced block.
pub const MAX_CELLS: usize = 4_000_000;
/// Changed lines and differing token pairs a diff keeps (the report shows fewer; `--json`
/// says how many more there were).
pub const CHANGES_KEPT: usize = 20;
pub const TOKENS_KEPT: usize = 20;
/// Characters kept of a changed line or a token, around its first mark.
pub const LINE_KEPT: usize = 400;

/// The kind of a text difference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextKind {
    /// Only numbers differ: sizes or constants baked into the text.
    Numeric,
    /// Only tokens that look unique per run: uuids, long hex strings, counters or
    /// timestamps, alone or at the end of a name.
    RunUnique,
    /// Anything else.
    Other,
}

/// One changed place: the old and new lines (1-based line numbers), with the differing
/// tokens marked (`[-old-]`, `{+new+}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub old_line: usize,
    pub new_line: usize,
    pub old: Option<String>,
    pub new: Option<String>,
}

#[derive(Debug)]
pub struct TextDiff {
    pub kind: TextKind,
    /// The first [`CHANGES_KEPT`] changed places, in order (the caller shows a few).
    pub changes: Vec<Change>,
    /// How many changed places there were in all.
    pub changes_total: usize,
    /// The first [`TOKENS_KEPT`] differing token pairs (old, new), for the JSON.
    pub tokens: Vec<(String, String)>,
    /// How many differing token pairs there were in all.
    pub tokens_total: usize,
    /// Whether a run-unique token differs too (besides what `kind` says).
    pub also_run_unique: bool,
}

/// `s` cut to [`LINE_KEPT`] characters, keeping its first mark (`[-`, `{+`) in view.
fn kept(s: String) -> String {
    if s.len() <= LINE_KEPT {
        return s; // bytes >= chars
    }
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= LINE_KEPT {
        return s;
    }
    let mark = s
        .find("[-")
        .or_else(|| s.find("{+"))
        .map(|b| s[..b].chars().count())
        .unwrap_or(0);
    let start = mark
        .saturating_sub(LINE_KEPT / 3)
        .min(chars.len() - LINE_KEPT);
    let mut out = String::new();
    if start > 0 {
        out.push_str("...");
    }
    out.extend(&chars[start..start + LINE_KEPT - 6]);
    out.push_str("...");
    out
}

/// What a diff gathers as it goes: the kept changes and tokens, the counts, and what the
/// tokens seen so far say about the kind.
#[derive(Default)]
struct Gather {
    changes: Vec<Change>,
    changes_total: usize,
    tokens: Vec<(String, String)>,
    tokens_total: usize,
    /// A line added or removed that is not blank.
    other: bool,
    also_run_unique: bool,
    /// Pairs that are not run-unique, and whether all of those are numbers.
    rest: usize,
    rest_numeric: bool,
}

impl Gather {
    fn change(&mut self, c: Change) {
        self.changes_total += 1;
        if self.changes.len() < CHANGES_KEPT {
            self.changes.push(Change {
                old: c.old.map(kept),
                new: c.new.map(kept),
                ..c
            });
        }
    }

    fn tokens(&mut self, pairs: Vec<(String, String)>) {
        for (x, y) in pairs {
            self.tokens_total += 1;
            if run_unique(&x, &y) {
                self.also_run_unique = true;
            } else {
                self.rest_numeric &= is_number(&x) && is_number(&y);
                self.rest += 1;
            }
            if self.tokens.len() < TOKENS_KEPT {
                self.tokens.push((kept(x), kept(y)));
            }
        }
    }
}

fn lines(t: &str) -> Vec<&str> {
    t.split('\n').collect()
}

/// Splits a line into tokens: names (letters, digits, `_`), numbers (with their `.`,
/// exponent and suffix), runs of blanks, and single other characters.
pub fn tokens(line: &str) -> Vec<&str> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let c = b[i];
        if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
            // A number: digits, letters (hex, suffixes, exponents), dots, and a sign
            // right after an exponent.
            i += 1;
            while i < b.len() {
                let d = b[i];
                let exp_sign = (d == b'+' || d == b'-')
                    && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P')
                    && !b[start..i].starts_with(b"0x");
                if d.is_ascii_alphanumeric() || d == b'.' || d == b'_' || exp_sign {
                    i += 1;
                } else {
                    break;
                }
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
        } else if c == b' ' || c == b'\t' {
            while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
                i += 1;
            }
        } else {
            // One character (UTF-8 aware).
            i += line[i..].chars().next().map_or(1, char::len_utf8);
        }
        out.push(&line[start..i]);
    }
    out
}

fn is_number(t: &str) -> bool {
    t.as_bytes()
        .first()
        .is_some_and(|c| c.is_ascii_digit() || *c == b'.')
}

/// A token that no two runs share: a long hex string or number (a uuid, a pointer, a
/// timestamp), or a name ending in digits or hex (`pyopencl_defeat_cache_<uuid>`,
/// `tmp_17`), when the other token is the same name with another tail.
fn run_unique(a: &str, b: &str) -> bool {
    let long_id = |t: &str| {
        let hex = t.trim_start_matches("0x");
        (hex.len() >= 16 && hex.bytes().all(|c| c.is_ascii_hexdigit()))
            || (t.len() >= 10 && t.bytes().all(|c| c.is_ascii_digit()))
    };
    if long_id(a) && long_id(b) {
        return true;
    }
    // Same stem, different digit/hex tails.
    let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    let stem = &a[..common];
    let stem = stem.trim_end_matches(|c: char| c.is_ascii_hexdigit());
    let (ta, tb) = (&a[stem.len()..], &b[stem.len()..]);
    let tail_ok = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_hexdigit());
    stem.len() >= 2
        && !is_number(a)
        && tail_ok(ta)
        && tail_ok(tb)
        && (ta.bytes().any(|c| c.is_ascii_digit()) || tb.bytes().any(|c| c.is_ascii_digit()))
}

/// Marks the tokens that differ between two lines; returns the marked lines and the
/// differing token runs.
fn mark(old: &str, new: &str) -> (String, String, Vec<(String, String)>) {
    let (a, b) = (tokens(old), tokens(new));
    let mut pairs = Vec::new();
    let (mut mo, mut mn) = (String::new(), String::new());
    if a.len() == b.len() {
        for (x, y) in a.iter().zip(&b) {
            if x == y {
                mo.push_str(x);
                mn.push_str(y);
            } else {
                mo.push_str(&format!("[-{x}-]"));
                mn.push_str(&format!("{{+{y}+}}"));
                pairs.push((x.to_string(), y.to_string()));
            }
        }
    } else {
        let pre = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        let suf = a[pre..]
            .iter()
            .rev()
            .zip(b[pre..].iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        let (xa, xb) = (
            a[pre..a.len() - suf].concat(),
            b[pre..b.len() - suf].concat(),
        );
        let (pa, sa) = (a[..pre].concat(), a[a.len() - suf..].concat());
        mo = format!("{pa}[-{xa}-]{sa}");
        mn = format!("{pa}{{+{xb}+}}{sa}");
        pairs.push((xa, xb));
    }
    (mo, mn, pairs)
}

/// Longest-common-subsequence matching of `a` and `b`: the matched index pairs.
fn lcs(a: &[&str], b: &[&str]) -> Option<Vec<(usize, usize)>> {
    let (n, m) = (a.len(), b.len());
    if n.saturating_mul(m) > MAX_CELLS {
        return None;
    }
    let w = m + 1;
    let mut t = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i * w + j] = if a[i] == b[j] {
                t[(i + 1) * w + j + 1] + 1
            } else {
                t[(i + 1) * w + j].max(t[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n && j < m {
        if a[i] == b[j] {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if t[(i + 1) * w + j] >= t[i * w + j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    Some(out)
}

/// The difference from `old` to `new`.
pub fn diff(old: &str, new: &str) -> TextDiff {
    let (a, b) = (lines(old), lines(new));
    let pre = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut anchors = lcs(ma, mb).unwrap_or_default();
    anchors.push((ma.len(), mb.len()));
    let mut g = Gather {
        rest_numeric: true,
        ..Gather::default()
    };
    let (mut i, mut j) = (0, 0);
    for (ai, bj) in anchors {
        let (olds, news) = (&ma[i..ai], &mb[j..bj]);
        let paired = olds.len().min(news.len());
        for k in 0..paired {
            let (mo, mn, pairs) = mark(olds[k], news[k]);
            g.tokens(pairs);
            g.change(Change {
                old_line: pre + i + k + 1,
                new_line: pre + j + k + 1,
                old: Some(mo),
                new: Some(mn),
            });
        }
        for (k, l) in olds.iter().enumerate().skip(paired) {
            g.other |= !l.trim().is_empty();
            g.change(Change {
                old_line: pre + i + k + 1,
                new_line: pre + j + paired + 1,
                old: Some(format!("[-{l}-]")),
                new: None,
            });
        }
        for (k, l) in news.iter().enumerate().skip(paired) {
            g.other |= !l.trim().is_empty();
            g.change(Change {
                old_line: pre + i + paired + 1,
                new_line: pre + j + k + 1,
                old: None,
                new: Some(format!("{{+{l}+}}")),
            });
        }
        i = ai + 1;
        j = bj + 1;
    }
    // A run-unique token (pyopencl's defeat-cache line) rides along with whatever else
    // differs: the kind is what remains without it.
    let kind = if g.other || g.tokens_total == 0 {
        TextKind::Other
    } else if g.rest == 0 {
        TextKind::RunUnique
    } else if g.rest_numeric {
        TextKind::Numeric
    } else {
        TextKind::Other
    };
    TextDiff {
        kind,
        changes: g.changes,
        changes_total: g.changes_total,
        tokens: g.tokens,
        tokens_total: g.tokens_total,
        also_run_unique: g.also_run_unique,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_names_and_marks() {
        assert_eq!(
            tokens("x[i] = 1.5e-3f*y_2;"),
            ["x", "[", "i", "]", " ", "=", " ", "1.5e-3f", "*", "y_2", ";"]
        );
        let d = diff(
            "kernel void k(global float *x) {\n  for (int i = 0; i < 512; i++)\n    x[i] *= 2.0f;\n}",
            "kernel void k(global float *x) {\n  for (int i = 0; i < 1024; i++)\n    x[i] *= 2.0f;\n}",
        );
        assert_eq!(d.kind, TextKind::Numeric);
        assert_eq!(d.changes.len(), 1);
        assert_eq!(d.changes[0].old_line, 2);
        assert_eq!(
            d.changes[0].new.as_deref(),
            Some("  for (int i = 0; i < {+1024+}; i++)")
        );
        assert_eq!(
            d.changes[0].old.as_deref(),
            Some("  for (int i = 0; i < [-512-]; i++)")
        );
    }

    #[test]
    fn pyopencl_defeat_cache_is_run_unique() {
        let base = "kernel void k() {}\n\n__constant int pyopencl_defeat_cache_";
        let d = diff(
            &format!("{base}0f1e2d3c4b5a69788796a5b4c3d2e1f0 = 0;"),
            &format!("{base}9a8b7c6d5e4f30211203f4e5d6c7b8a9 = 0;"),
        );
        assert_eq!(d.kind, TextKind::RunUnique, "{d:?}");
        let d = diff("int a_17 = 0;", "int a_18 = 0;");
        assert_eq!(d.kind, TextKind::RunUnique);
        let d = diff("int t = 1796094501;", "int t = 1796094555;");
        assert_eq!(d.kind, TextKind::RunUnique);
        let d = diff(
            "x = 64;\nint pyopencl_defeat_cache_0a1b2c3d4e5f = 0;",
            "x = 128;\nint pyopencl_defeat_cache_9f8e7d6c5b4a = 0;",
        );
        assert_eq!(d.kind, TextKind::Numeric);
        assert!(d.also_run_unique);
    }

    #[test]
    fn other_differences_and_inserted_lines() {
        assert_eq!(diff("a = b + c;", "a = b - c;").kind, TextKind::Other);
        let d = diff("x\ny\nz", "x\ny\nnew line\nz");
        assert_eq!(d.kind, TextKind::Other);
        assert_eq!(d.changes.len(), 1);
        assert_eq!(d.changes[0].new.as_deref(), Some("{+new line+}"));
        assert_eq!(d.changes[0].new_line, 3);
        assert_eq!(diff("same", "same").changes.len(), 0);
    }

    /// Random small texts: never a panic, and every changed line is one of the texts'.
    #[test]
    fn random_texts_diff_without_panicking() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet = [
            "a", "b1", "12", " ", "\n", "x_ff", "0x1f", ".5e-3", ";", "\u{e9}", "\t",
        ];
        for _ in 0..3000 {
            let mut text = || {
                let n = (next() % 24) as usize;
                (0..n)
                    .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                    .collect::<String>()
            };
            let (a, b) = (text(), text());
            let d = diff(&a, &b);
            assert_eq!(d.changes.is_empty(), a == b, "{a:?} {b:?}");
            for c in &d.changes {
                assert!(c.old_line >= 1 && c.new_line >= 1);
            }
        }
    }

    #[test]
    fn huge_texts_are_bounded() {
        let a: String = (0..5000).map(|i| format!("a{i}\n")).collect();
        let b: String = (0..5000).map(|i| format!("b{i}\n")).collect();
        let d = diff(&a, &b);
        assert_eq!((d.changes.len(), d.changes_total), (CHANGES_KEPT, 5000));
        // A line of a megabyte is kept around its first mark.
        let long = |x: &str| format!("{}{x}{}", "a ".repeat(300_000), " b".repeat(300_000));
        let d = diff(&long("1"), &long("2"));
        let c = &d.changes[0];
        let new = c.new.as_deref().unwrap();
        assert!(
            new.chars().count() <= LINE_KEPT && new.contains("{+2+}"),
            "{new}"
        );
        assert_eq!(d.kind, TextKind::Numeric);
    }
}
