//! The macros an include's name can be made of, expanded as the C preprocessor expands
//! them, for the one purpose of naming the file: hashcat names every include
//! `#include M2S(INCLUDE_PATH/inc_vendor.h)`, with `-D INCLUDE_PATH=... -D XM2S(x)=#x
//! -D M2S(x)=XM2S(x)` among its options. The definitions are the options' `-D` and `-U`,
//! in order, and every `#define` and `#undef` of the texts a build reads (conditionals
//! are not evaluated). Expansion follows the standard's rules (object-like and
//! function-like macros, arguments expanded before substitution except next to `#` and
//! `##`, `#` stringification, `##` pasting, rescanning with each token's hide set).
//!
//! Anything this cannot be sure of makes the name unknown, and the build uncacheable: a
//! macro used in the name that has more than one definition, or an `#undef`, anywhere (a
//! conditional could pick either); a variadic macro; a name that does not come out as one
//! string literal; an identifier left in the name that could be a macro this module does
//! not see (pocl and clang predefine some, and pocl includes OpenCL's headers first): one
//! with no lowercase letter, or starting with `_`, `cl_` or `CL_`, or `inline`.

use std::collections::{HashMap, HashSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Ident,
    Number,
    Literal,
    Punct,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Tok {
    text: String,
    kind: Kind,
    /// Whitespace came before it (what stringification keeps, as one space).
    space: bool,
    /// Macros that may not expand here (the names whose expansion produced it).
    hide: Vec<String>,
}

fn tokens(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut space = false;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            space = true;
            i += 1;
            continue;
        }
        let start = i;
        let kind = if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Kind::Ident
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            i += 1;
            while i < b.len() {
                if matches!(b[i], b'e' | b'E' | b'p' | b'P')
                    && matches!(b.get(i + 1), Some(b'+') | Some(b'-'))
                {
                    i += 2;
                } else if b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.' {
                    i += 1;
                } else {
                    break;
                }
            }
            Kind::Number
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < b.len() && b[i] != c {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
            Kind::Literal
        } else {
            i += if b[i..].starts_with(b"##") { 2 } else { 1 };
            Kind::Punct
        };
        out.push(Tok {
            text: text[start..i].to_string(),
            kind,
            space,
            hide: Vec::new(),
        });
        space = false;
    }
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Macro {
    /// None: object-like.
    params: Option<Vec<String>>,
    body: Vec<(String, Kind, bool)>,
}

impl Macro {
    /// `NAME`, `NAME(a,b)` and the replacement text.
    fn parse(head: &str, body: &str) -> Option<(String, Macro)> {
        let (name, params) = match head.find('(') {
            Some(p) => {
                let inner = head[p + 1..].strip_suffix(')')?;
                let params: Vec<String> = inner
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect();
                (head[..p].to_string(), Some(params))
            }
            None => (head.to_string(), None),
        };
        let valid = |s: &str| {
            s.bytes()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
                && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
        };
        if !valid(&name) || params.as_ref().is_some_and(|p| !p.iter().all(|s| valid(s))) {
            return None;
        }
        let body = tokens(body)
            .into_iter()
            .map(|t| (t.text, t.kind, t.space))
            .collect();
        Some((name, Macro { params, body }))
    }
}

/// What a name means: one definition, or several (or an `#undef`) that conditionals
/// could choose between.
#[derive(Clone, Debug)]
enum Meaning {
    One(Macro),
    Doubtful,
}

/// The definitions in effect for one build part.
#[derive(Clone, Debug, Default)]
pub struct Macros {
    defs: HashMap<String, Meaning>,
    /// Names `#define`d or `#undef`ined by a text (the options' definitions may be
    /// replaced there).
    in_texts: HashSet<String>,
}

impl Macros {
    /// The options' `-D NAME`, `-D NAME=VALUE`, `-DNAME(x)=...` and `-U NAME`, in order,
    /// split as pocl splits options (at spaces); an option this cannot read makes every
    /// name doubtful.
    pub fn from_options(options: &[u8]) -> Macros {
        let mut m = Macros::default();
        let text = String::from_utf8_lossy(options);
        let mut words = text.split(' ').filter(|w| !w.is_empty());
        while let Some(w) = words.next() {
            let (flag, rest) = if let Some(r) = w.strip_prefix("-D") {
                ('D', r)
            } else if let Some(r) = w.strip_prefix("-U") {
                ('U', r)
            } else {
                continue;
            };
            let arg = if rest.is_empty() {
                match words.next() {
                    Some(a) => a,
                    None => break,
                }
            } else {
                rest
            };
            if flag == 'U' {
                m.defs.remove(arg);
                continue;
            }
            let (head, body) = arg.split_once('=').unwrap_or((arg, "1"));
            match Macro::parse(head, body) {
                Some((name, mac)) => {
                    m.defs.insert(name, Meaning::One(mac));
                }
                None => {
                    let name: String = head.chars().take_while(|c| *c != '(').collect();
                    m.defs.insert(name, Meaning::Doubtful);
                }
            }
        }
        m
    }

    /// Adds the `#define` and `#undef` directives of a cleaned text (comments removed,
    /// continuations joined).
    pub fn add_text(&mut self, clean: &[u8]) {
        for line in clean.split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            let l = line.trim_start();
            let Some(rest) = l.strip_prefix('#') else {
                continue;
            };
            let rest = rest.trim_start();
            let (directive, rest) = rest.split_at(
                rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len()),
            );
            match directive {
                "define" => {
                    let rest = rest.trim_start();
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    let name = rest[..end].to_string();
                    // A function-like macro's `(` follows its name directly.
                    let (head, body) = if rest[end..].starts_with('(') {
                        match rest[end..].find(')') {
                            Some(close) => (&rest[..end + close + 1], &rest[end + close + 1..]),
                            None => (rest, ""),
                        }
                    } else {
                        (&rest[..end], &rest[end..])
                    };
                    let parsed = Macro::parse(head, body.trim());
                    self.define_from_text(name, parsed.map(|p| p.1));
                }
                "undef" => {
                    let name = rest.trim().to_string();
                    self.in_texts.insert(name.clone());
                    self.defs.insert(name, Meaning::Doubtful);
                }
                _ => {}
            }
        }
    }

    fn define_from_text(&mut self, name: String, mac: Option<Macro>) {
        let first_in_texts = self.in_texts.insert(name.clone());
        let meaning = match (self.defs.get(&name), mac) {
            (_, None) => Meaning::Doubtful,
            (None, Some(m)) => Meaning::One(m),
            (Some(Meaning::One(old)), Some(m)) if *old == m && !first_in_texts => Meaning::One(m),
            // Defined by the options and again by a text, or twice differently.
            (Some(_), Some(_)) => Meaning::Doubtful,
        };
        self.defs.insert(name, meaning);
    }

    /// The file name an include's operand (`M2S(INCLUDE_PATH/x.h)`) names: Err when it is
    /// not certain.
    pub fn include_name(&self, operand: &[u8]) -> Result<Vec<u8>, String> {
        let text = String::from_utf8_lossy(operand);
        let mut budget = 100_000usize;
        let out = self.expand(tokens(&text), &mut budget)?;
        match out.as_slice() {
            [t] if t.kind == Kind::Literal && t.text.starts_with('"') && t.text.len() >= 2 => {
                let inner = &t.text[1..t.text.len() - 1];
                if inner.contains('\\') || inner.contains('"') {
                    return Err("an include named by a macro, with escapes".into());
                }
                Ok(inner.as_bytes().to_vec())
            }
            _ => Err(format!(
                "an include named by a macro that does not name a file ({})",
                text.trim()
            )),
        }
    }

    fn lookup(&self, name: &str) -> Result<Option<&Macro>, String> {
        match self.defs.get(name) {
            None => Ok(None),
            Some(Meaning::One(m)) => Ok(Some(m)),
            Some(Meaning::Doubtful) => Err(format!(
                "an include named by the macro {name}, defined more than one way"
            )),
        }
    }

    /// Expands `input` completely (the standard's rescanning: a macro's replacement is put
    /// back before the rest of the input and scanned again).
    fn expand(&self, mut input: Vec<Tok>, budget: &mut usize) -> Result<Vec<Tok>, String> {
        input.reverse(); // a stack: the next token last
        let mut out = Vec::new();
        while let Some(t) = input.pop() {
            *budget = budget
                .checked_sub(1)
                .ok_or("an include name's macros expand too far")?;
            let mac = if t.kind == Kind::Ident && !t.hide.contains(&t.text) {
                self.lookup(&t.text)?
            } else {
                None
            };
            let Some(mac) = mac else {
                if t.kind == Kind::Ident && could_be_unseen_macro(&t.text) {
                    return Err(format!(
                        "an include name holding {}, which may be a macro of the compiler's",
                        t.text
                    ));
                }
                out.push(t);
                continue;
            };
            let replacement = match &mac.params {
                None => {
                    let mut hide = t.hide.clone();
                    hide.push(t.text.clone());
                    self.substitute(mac, &[], &hide, budget)?
                }
                Some(params) => {
                    // A function-like macro's name not followed by `(` is not an invocation.
                    if input.last().map(|n| n.text.as_str()) != Some("(") {
                        out.push(t);
                        continue;
                    }
                    input.pop();
                    let (args, close) = collect_args(&mut input)?;
                    let args = if params.is_empty() && args.len() == 1 && args[0].is_empty() {
                        Vec::new()
                    } else {
                        args
                    };
                    if args.len() != params.len() {
                        return Err(format!("{} given {} arguments", t.text, args.len()));
                    }
                    let mut hide: Vec<String> = t
                        .hide
                        .iter()
                        .filter(|h| close.hide.contains(h))
                        .cloned()
                        .collect();
                    hide.push(t.text.clone());
                    self.substitute(mac, &args, &hide, budget)?
                }
            };
            let mut replacement = replacement;
            if let Some(first) = replacement.first_mut() {
                first.space = t.space;
            }
            input.extend(replacement.into_iter().rev());
        }
        Ok(out)
    }

    /// A macro's replacement for these arguments, with `#` and `##` applied, each token
    /// hidden from `hide`.
    fn substitute(
        &self,
        mac: &Macro,
        args: &[Vec<Tok>],
        hide: &[String],
        budget: &mut usize,
    ) -> Result<Vec<Tok>, String> {
        let params = mac.params.as_deref().unwrap_or(&[]);
        let param = |text: &str| params.iter().position(|p| p == text);
        let body = &mac.body;
        let mut out: Vec<Tok> = Vec::new();
        let mut paste_next = false;
        let mut i = 0;
        while i < body.len() {
            let (text, kind, space) = &body[i];
            if params.iter().any(|p| p == "...") || text == "__VA_ARGS__" {
                return Err("an include named by a variadic macro".into());
            }
            if text == "##" {
                paste_next = true;
                i += 1;
                continue;
            }
            let next_is_paste = body.get(i + 1).is_some_and(|n| n.0 == "##");
            let mut piece: Vec<Tok> = if text == "#" && mac.params.is_some() {
                let p = body
                    .get(i + 1)
                    .and_then(|n| param(&n.0))
                    .ok_or("# not followed by a parameter")?;
                i += 1;
                vec![Tok {
                    text: stringify(&args[p]),
                    kind: Kind::Literal,
                    space: *space,
                    hide: Vec::new(),
                }]
            } else if let Some(p) = param(text) {
                if paste_next || next_is_paste {
                    args[p].clone()
                } else {
                    self.expand(args[p].clone(), budget)?
                }
            } else {
                vec![Tok {
                    text: text.clone(),
                    kind: *kind,
                    space: *space,
                    hide: Vec::new(),
                }]
            };
            if let Some(first) = piece.first_mut() {
                first.space = *space;
            }
            if paste_next {
                paste_next = false;
                let left = out.pop().map(|t| t.text).unwrap_or_default();
                let right = if piece.is_empty() {
                    String::new()
                } else {
                    piece.remove(0).text
                };
                let joined = tokens(&(left + &right));
                if joined.len() > 1 {
                    return Err("## makes more than one token".into());
                }
                out.extend(joined);
            }
            out.extend(piece);
            i += 1;
        }
        for t in &mut out {
            for h in hide {
                if !t.hide.contains(h) {
                    t.hide.push(h.clone());
                }
            }
        }
        Ok(out)
    }
}

/// An identifier left in an include's name that a macro this module cannot see may be:
/// pocl and clang predefine macros and pocl includes OpenCL C's headers before the
/// source, whose macros are upper-case, start with `_`, `cl_` or `CL_`, or are `inline`.
fn could_be_unseen_macro(name: &str) -> bool {
    !name.bytes().any(|b| b.is_ascii_lowercase())
        || name.starts_with('_')
        || name.starts_with("cl_")
        || name.starts_with("CL_")
        || name == "inline"
}

/// The arguments of an invocation whose `(` was taken: split at top-level commas, up to
/// the matching `)`, which is returned too.
fn collect_args(input: &mut Vec<Tok>) -> Result<(Vec<Vec<Tok>>, Tok), String> {
    let mut args = vec![Vec::new()];
    let mut depth = 0;
    while let Some(t) = input.pop() {
        match t.text.as_str() {
            ")" if depth == 0 => return Ok((args, t)),
            "," if depth == 0 => {
                args.push(Vec::new());
                continue;
            }
            "(" => depth += 1,
            ")" => depth -= 1,
            _ => {}
        }
        args.last_mut().expect("one argument at least").push(t);
    }
    Err("an unterminated macro invocation".into())
}

/// `#` applied to an argument: its spelling, one space where whitespace separated
/// tokens, `"` and `\` escaped inside literals.
fn stringify(arg: &[Tok]) -> String {
    let mut s = String::from("\"");
    for (i, t) in arg.iter().enumerate() {
        if i > 0 && t.space {
            s.push(' ');
        }
        if t.kind == Kind::Literal {
            for c in t.text.chars() {
                if c == '"' || c == '\\' {
                    s.push('\\');
                }
                s.push(c);
            }
        } else {
            s.push_str(&t.text);
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASHCAT: &str = "-D KERNEL_STATIC -D INCLUDE_PATH=/usr/share/hashcat/OpenCL \
        -D XM2S(x)=#x -D M2S(x)=XM2S(x) -D VECT_SIZE=16 -w";

    #[test]
    fn hashcats_includes_name_their_files() {
        let m = Macros::from_options(HASHCAT.as_bytes());
        for (operand, want) in [
            (
                "M2S(INCLUDE_PATH/inc_vendor.h)",
                "/usr/share/hashcat/OpenCL/inc_vendor.h",
            ),
            (
                "M2S(INCLUDE_PATH/inc_cipher_aes-gcm.h)",
                "/usr/share/hashcat/OpenCL/inc_cipher_aes-gcm.h",
            ),
            ("XM2S(INCLUDE_PATH/x.h)", "INCLUDE_PATH/x.h"),
        ] {
            assert_eq!(
                m.include_name(operand.as_bytes()).unwrap(),
                want.as_bytes(),
                "{operand}"
            );
        }
    }

    #[test]
    fn the_standards_examples_hold() {
        // C11 6.10.3.5, the examples' #define/## and # rules, on names.
        let mut m = Macros::default();
        m.add_text(
            b"#define str(s) # s\n#define xstr(s) str(s)\n#define INCFILE(n) vers ## n\n\
              #define glue(a, b) a ## b\n#define HDR \"plain.h\"\n#define SELF SELF\n",
        );
        let name = |o: &str| m.include_name(o.as_bytes());
        assert_eq!(name("xstr(INCFILE(2).h)").unwrap(), b"vers2.h");
        assert_eq!(name("HDR").unwrap(), b"plain.h");
        assert_eq!(name("str(a  b)").unwrap(), b"a b");
        assert_eq!(name("xstr(glue(ma, in).h)").unwrap(), b"main.h");
        assert!(name("xstr(SELF)").is_err(), "an upper-case identifier left");
        assert!(name("xstr(dir/file.h)").is_ok());
    }

    #[test]
    fn doubt_makes_no_name() {
        let mut m = Macros::from_options(b"-D P=/a -D Q=/b");
        m.add_text(b"#ifdef X\n#define H \"x.h\"\n#else\n#define H \"y.h\"\n#endif\n#undef Q\n");
        assert!(m.include_name(b"H").is_err(), "two definitions");
        let xs = Macros::from_options(b"-D xs(x)=#x -D xx(x)=xs(x)");
        assert!(xs.include_name(b"xx(P/f.h)").is_err(), "P is upper-case");
        assert!(xs.include_name(b"xx(__FILE__)").is_err());
        assert!(xs.include_name(b"xx(cl_khr_fp64/f.h)").is_err());
        assert!(xs.include_name(b"UNDEFINED").is_err());
        assert!(xs.include_name(b"xx(dir/f.h").is_err(), "unterminated");
        let v = Macros::from_options(b"-D v(...)=#__VA_ARGS__");
        assert!(v.include_name(b"v(a)").is_err());
        // The options' definition replaced by a text is doubtful, one repeated is not.
        let mut both = Macros::from_options(b"-D H=\"o.h\"");
        both.add_text(b"#define H \"t.h\"\n");
        assert!(both.include_name(b"H").is_err());
        let mut twice = Macros::default();
        twice.add_text(b"#define H \"t.h\"\n#define H \"t.h\"\n");
        assert_eq!(twice.include_name(b"H").unwrap(), b"t.h");
        let mut undone = Macros::from_options(b"-D H=\"o.h\" -U H");
        undone.add_text(b"");
        assert!(undone.include_name(b"H").is_err());
    }
}
