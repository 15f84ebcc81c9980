//! What reaches a person's terminal. The report prints strings that came from files anyone
//! may have written (kernel names, host names, cache paths and options in trace records;
//! lines of kept sources; file names in a shared directory), and a control character among
//! them would be obeyed by the terminal: an escape sequence can set its title, clear the
//! screen or move the cursor to draw a line the report never wrote. This module owns the
//! rule for every line the command prints from such input: C0 controls (newline excepted),
//! DEL, C1 controls and the bidirectional-text controls are shown escaped (`\x1b`,
//! `\u{9b}`), in the text and in `--json`, which stays valid JSON (serde_json already
//! writes C0 controls as `\u00XX`; the others get the same form here).

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not reach a terminal as it is. Newline is the report's own.
fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with every character a terminal would obey shown escaped: `\x1b`, `\r`, `\t` for
/// ASCII controls, `\u{9b}` for the others.
pub fn text(s: &str) -> Cow<'_, str> {
    escape(s, |out, c| {
        let _ = match c {
            '\t' => out.write_str("\\t"),
            '\r' => out.write_str("\\r"),
            c if (c as u32) < 0x80 => write!(out, "\\x{:02x}", c as u32),
            c => write!(out, "\\u{{{:x}}}", c as u32),
        };
    })
}

/// A JSON document with the characters serde_json leaves as they are (DEL, C1 controls,
/// bidirectional-text controls) written as `\uXXXX`. They can only occur inside strings,
/// where the escape means the same character, so the document says what it said.
pub fn json(s: &str) -> Cow<'_, str> {
    escape(s, |out, c| {
        let _ = write!(out, "\\u{:04x}", c as u32);
    })
}

fn escape(s: &str, mut put: impl FnMut(&mut String, char)) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_char(c) {
            put(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_newlines_kept() {
        assert_eq!(text("plain\nline"), "plain\nline");
        assert!(matches!(text("plain"), Cow::Borrowed(_)));
        assert_eq!(
            text("k\u{1b}]0;pwned\u{7}\r\tx\u{7f}\u{9b}2J\u{202e}"),
            "k\\x1b]0;pwned\\x07\\r\\tx\\x7f\\u{9b}2J\\u{202e}"
        );
        let doc = serde_json::to_string(&serde_json::json!({"k": "a\u{1b}b\u{9b}c\u{7f}\u{2066}"}))
            .unwrap();
        let safe = json(&doc);
        assert!(!safe.chars().any(unsafe_char), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["k"], "a\u{1b}b\u{9b}c\u{7f}\u{2066}");
    }
}
