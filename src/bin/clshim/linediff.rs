//! What differs between two texts of one kernel, in words a user can act on: a line diff
//! (common lines at both ends set aside, the middle matched by longest common
//! subsequence, bounded so a huge text costs at most [`MAX_CELLS`] steps), the changed
//! lines paired and compared token by token, and the kind of difference the differing
//! tokens make: only numeric literals (sizes or constants baked into the text), only a
//! token that changes every run (a uuid, a counter, a timestamp), or anything else.

/// Most cells of the longest-common-subsequence table; a larger middle is shown as one
/// replaced block.
pub const MAX_CELLS: usize = 4_000_000;

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
    /// Every changed place, in order (the caller shows a few).
    pub changes: Vec<Change>,
    /// The differing token pairs (old, new), for the classification and the JSON.
    pub tokens: Vec<(String, String)>,
    /// Whether a run-unique token differs too (besides what `kind` says).
    pub also_run_unique: bool,
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
    let mut changes = Vec::new();
    let mut tokens = Vec::new();
    let mut other = false;
    let (mut i, mut j) = (0, 0);
    for (ai, bj) in anchors {
        let (olds, news) = (&ma[i..ai], &mb[j..bj]);
        let paired = olds.len().min(news.len());
        for k in 0..paired {
            let (mo, mn, pairs) = mark(olds[k], news[k]);
            tokens.extend(pairs);
            changes.push(Change {
                old_line: pre + i + k + 1,
                new_line: pre + j + k + 1,
                old: Some(mo),
                new: Some(mn),
            });
        }
        for (k, l) in olds.iter().enumerate().skip(paired) {
            other |= !l.trim().is_empty();
            changes.push(Change {
                old_line: pre + i + k + 1,
                new_line: pre + j + paired + 1,
                old: Some(format!("[-{l}-]")),
                new: None,
            });
        }
        for (k, l) in news.iter().enumerate().skip(paired) {
            other |= !l.trim().is_empty();
            changes.push(Change {
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
    let also_run_unique = tokens.iter().any(|(x, y)| run_unique(x, y));
    let rest: Vec<&(String, String)> = tokens.iter().filter(|(x, y)| !run_unique(x, y)).collect();
    let kind = if other || tokens.is_empty() {
        TextKind::Other
    } else if rest.is_empty() {
        TextKind::RunUnique
    } else if rest.iter().all(|(x, y)| is_number(x) && is_number(y)) {
        TextKind::Numeric
    } else {
        TextKind::Other
    };
    TextDiff {
        kind,
        changes,
        tokens,
        also_run_unique,
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
        assert_eq!(d.changes.len(), 5000);
    }
}
