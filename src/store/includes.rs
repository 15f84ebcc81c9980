//! What a build reads from disk besides its recipe: the manifest of every file its
//! `#include` directives can reach, the way ccache's direct mode keeps every file the
//! preprocessor read with its content hash and checks them all at lookup. Nothing here
//! preprocesses: the manifest over-approximates what clang reads, so that any change
//! that could change the build changes the manifest, and a change that could not may
//! still change it (a miss, never a wrong answer).
//!
//! The search path is pocl's (`pocl_llvm_build.cc` hands clang `-I.` before the
//! application's options): the working directory, then every `-I` of the options in
//! order, relative ones against the working directory; a quoted name is also looked for
//! beside the file that includes it. For every name of every `#include`,
//! `#include_next`, `#import` and `__has_include` (conditionals are not evaluated: a
//! directive in a branch that is never taken counts too), every directory of the path is
//! probed, not only up to the first hit, so that a file appearing in a directory searched
//! earlier, or one `#include_next` would reach, changes the manifest; every file found is
//! hashed whole and scanned in turn. A probe records absent, a regular file (length and
//! FNV-1a 64 of its bytes) or something else. A directive whose name comes from macros
//! (hashcat's `#include M2S(INCLUDE_PATH/x.h)`) is named by expanding them with every
//! definition the options and the part's texts hold (`macros`), once all are seen. A
//! name those macros cannot settle, options that quote or escape (pocl splits them its
//! own way), or more files than a bound make the build uncacheable: it is never served
//! from a store.

use super::macros::Macros;
use crate::hash::Fnv1a;
use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The most files one manifest may probe and scan before the build counts as uncacheable.
const MAX_PROBES: usize = 4096;
/// The largest included file read; a bigger one makes the build uncacheable.
const MAX_FILE: u64 = 64 << 20;

/// What one probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    Absent,
    /// A regular file: its length and the hash of its bytes.
    File {
        len: u64,
        hash: u64,
    },
    /// A directory, a device, or a path that could not be read: a compile that reaches it
    /// fails or skips it, and so must a later one.
    Other,
}

/// Every path probed, in the order probed, with what was found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Manifest {
    pub probes: Vec<(PathBuf, Found)>,
}

impl Manifest {
    /// The manifest as bytes, for a key: each probe's path, kind, length and hash.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.probes.len() as u64).to_le_bytes());
        for (path, found) in &self.probes {
            let p = path.as_os_str().as_bytes();
            out.extend_from_slice(&(p.len() as u64).to_le_bytes());
            out.extend_from_slice(p);
            let (tag, len, hash) = match found {
                Found::Absent => (0u8, 0, 0),
                Found::File { len, hash } => (1, *len, *hash),
                Found::Other => (2, 0, 0),
            };
            out.push(tag);
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&hash.to_le_bytes());
        }
    }
}

/// The include search of one build part: its options' `-I` directories after the
/// working directory, and the macros its options define (an include may be named by one).
pub struct SearchPath {
    dirs: Vec<PathBuf>,
    macros: Macros,
}

impl SearchPath {
    /// The directories pocl's compile of `options` searches, in `cwd`; Err when the
    /// options quote or escape, which pocl rewrites before clang sees them.
    pub fn of(options: &[u8], cwd: &Path) -> Result<SearchPath, String> {
        if options.iter().any(|b| matches!(b, b'"' | b'\'' | b'\\')) {
            return Err("build options with quotes or backslashes".into());
        }
        let mut dirs = vec![cwd.to_path_buf()];
        // pocl splits options on single spaces; a `-I` with no directory attached takes
        // the next token.
        let mut tokens = options.split(|&b| b == b' ').filter(|t| !t.is_empty());
        while let Some(t) = tokens.next() {
            if let Some(dir) = t.strip_prefix(b"-I") {
                let dir = if dir.is_empty() {
                    match tokens.next() {
                        Some(d) => d,
                        None => break,
                    }
                } else {
                    dir
                };
                dirs.push(cwd.join(std::ffi::OsStr::from_bytes(dir)));
            }
        }
        Ok(SearchPath {
            dirs,
            macros: Macros::from_options(options),
        })
    }
}

/// One `#include`-like directive's name.
#[derive(Debug, PartialEq, Eq)]
enum Name<'a> {
    /// `"name"`: looked for beside the includer first.
    Quoted(&'a [u8]),
    /// `<name>`.
    Angled(&'a [u8]),
    /// Neither: an operand made of macros (`M2S(INCLUDE_PATH/inc_x.h)`), named once every
    /// definition the build can see is known (`macros`).
    Macro(&'a [u8]),
}

/// The text with line continuations joined and comments replaced by a space (string and
/// character literals kept as they are), as the preprocessor sees it before directives.
fn without_comments(text: &[u8]) -> Vec<u8> {
    let mut joined = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] == b'\\' {
            let rest = &text[i + 1..];
            let skip = if rest.starts_with(b"\r\n") {
                Some(3)
            } else if rest.starts_with(b"\n") {
                Some(2)
            } else {
                None
            };
            if let Some(n) = skip {
                i += n;
                continue;
            }
        }
        joined.push(text[i]);
        i += 1;
    }
    let t = joined;
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        match t[i] {
            b'/' if t.get(i + 1) == Some(&b'/') => {
                while i < t.len() && t[i] != b'\n' {
                    i += 1;
                }
                out.push(b' ');
            }
            b'/' if t.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < t.len() && !(t[i] == b'*' && t.get(i + 1) == Some(&b'/')) {
                    // A comment spanning lines keeps its line breaks, so that what
                    // follows it still starts a line.
                    if t[i] == b'\n' {
                        out.push(b'\n');
                    }
                    i += 1;
                }
                i += 2;
                out.push(b' ');
            }
            q @ (b'"' | b'\'') => {
                out.push(q);
                i += 1;
                while i < t.len() && t[i] != q && t[i] != b'\n' {
                    if t[i] == b'\\' && i + 1 < t.len() {
                        out.push(t[i]);
                        i += 1;
                    }
                    out.push(t[i]);
                    i += 1;
                }
                if i < t.len() && t[i] == q {
                    out.push(q);
                    i += 1;
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn skip_blanks(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\x0b' | b'\x0c' | b'\r'))
        .unwrap_or(s.len());
    &s[n..]
}

/// The name at the start of `s` (blanks skipped): `"…"` or `<…>`; Err for anything else
/// (a macro, which only the preprocessor could expand).
fn name_at(s: &[u8]) -> Result<Name<'_>, String> {
    let s = skip_blanks(s);
    let (close, quoted) = match s.first() {
        Some(b'"') => (b'"', true),
        Some(b'<') => (b'>', false),
        Some(_) => return Ok(Name::Macro(s)),
        None => return Err("an include without a name".into()),
    };
    let end = s[1..]
        .iter()
        .position(|&b| b == close || b == b'\n')
        .filter(|&e| s[1 + e] == close)
        .ok_or("an unterminated include name")?;
    let name = &s[1..1 + end];
    Ok(if quoted {
        Name::Quoted(name)
    } else {
        Name::Angled(name)
    })
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every name a cleaned text's directives and `__has_include` tests can read.
fn names_in(clean: &[u8]) -> Result<Vec<Name<'_>>, String> {
    let mut out = Vec::new();
    for line in clean.split(|&b| b == b'\n') {
        let l = skip_blanks(line);
        if let Some(rest) = l.strip_prefix(b"#") {
            let rest = skip_blanks(rest);
            let word_len = rest
                .iter()
                .position(|&b| !is_ident(b))
                .unwrap_or(rest.len());
            let word = &rest[..word_len];
            if matches!(word, b"include" | b"include_next" | b"import") {
                out.push(name_at(&rest[word_len..])?);
            }
        }
        // `__has_include(…)` and `__has_include_next(…)`, wherever they stand.
        let mut at = 0;
        while let Some(pos) = find(&line[at..], b"__has_include") {
            let start = at + pos;
            let mut after = start + b"__has_include".len();
            if line[after..].starts_with(b"_next") {
                after += b"_next".len();
            }
            let before_ok = start == 0 || !is_ident(line[start - 1]);
            let after_ok = after >= line.len() || !is_ident(line[after]);
            at = after;
            if !(before_ok && after_ok) {
                continue;
            }
            let rest = skip_blanks(&line[after..]);
            match rest.strip_prefix(b"(") {
                Some(inner) => match name_at(inner)? {
                    Name::Macro(_) => return Err("a __has_include named by a macro".into()),
                    name => out.push(name),
                },
                // `defined(__has_include)` and the like: a test for the feature itself.
                None => continue,
            }
        }
    }
    Ok(out)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Builds one manifest, part by part.
#[derive(Default)]
pub struct Scanner {
    manifest: Manifest,
}

/// What one part's scan has seen: the files scanned (each once; another part, with
/// other options, scans them again), the macros defined so far, and the includes named
/// by macros, waiting for every definition to be seen.
struct Part<'s> {
    search: &'s SearchPath,
    scanned: HashSet<PathBuf>,
    macros: Macros,
    waiting: Vec<(Vec<u8>, Option<PathBuf>)>,
}

impl Scanner {
    /// Adds what `text` (a program source or header given through the API, with no
    /// directory of its own) can read through `search`. Includes named by macros are
    /// resolved once the part's texts are all seen, and again at the end: a name that
    /// changes with definitions seen later is uncertain, and so is the build.
    pub fn scan_text(&mut self, text: &[u8], search: &SearchPath) -> Result<(), String> {
        let mut part = Part {
            search,
            scanned: HashSet::new(),
            macros: search.macros.clone(),
            waiting: Vec::new(),
        };
        self.scan(&mut part, text, None)?;
        let mut resolved: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        while let Some((operand, dir)) = part.waiting.pop() {
            let name = part.macros.include_name(&operand)?;
            self.include(&mut part, &name, dir.as_deref())?;
            resolved.push((operand, name));
        }
        for (operand, name) in resolved {
            if part.macros.include_name(&operand)? != name {
                return Err("an include named by a macro that a later header defines again".into());
            }
        }
        Ok(())
    }

    pub fn finish(self) -> Manifest {
        self.manifest
    }

    fn scan(&mut self, part: &mut Part, text: &[u8], dir: Option<&Path>) -> Result<(), String> {
        let clean = without_comments(text);
        part.macros.add_text(&clean);
        for name in names_in(&clean)? {
            match name {
                Name::Quoted(n) => self.include(part, n, dir)?,
                Name::Angled(n) => self.include(part, n, None)?,
                Name::Macro(operand) => {
                    let operand = operand
                        .iter()
                        .take_while(|&&b| b != b'\n')
                        .copied()
                        .collect();
                    part.waiting.push((operand, dir.map(Path::to_path_buf)));
                }
            }
        }
        Ok(())
    }

    /// Probes `name` in every directory it may be found in: beside the includer
    /// (`beside`, for a quoted name), then the search path.
    fn include(
        &mut self,
        part: &mut Part,
        name: &[u8],
        beside: Option<&Path>,
    ) -> Result<(), String> {
        if name.is_empty() || name.contains(&0) {
            return Err("an empty include name".into());
        }
        let name = Path::new(std::ffi::OsStr::from_bytes(name));
        let candidates: Vec<PathBuf> = if name.is_absolute() {
            vec![name.to_path_buf()]
        } else {
            beside
                .into_iter()
                .chain(part.search.dirs.iter().map(PathBuf::as_path))
                .map(|d| d.join(name))
                .collect()
        };
        for path in candidates {
            self.probe(part, path)?;
        }
        Ok(())
    }

    fn probe(&mut self, part: &mut Part, path: PathBuf) -> Result<(), String> {
        if self.manifest.probes.len() >= MAX_PROBES {
            return Err(format!("more than {MAX_PROBES} include probes"));
        }
        let mut text = None;
        let found = match std::fs::metadata(&path) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
                Found::Absent
            }
            Err(_) => Found::Other,
            Ok(m) if !m.is_file() => Found::Other,
            Ok(m) if m.len() > MAX_FILE => {
                return Err(format!("an included file over {MAX_FILE} bytes"))
            }
            Ok(_) => {
                let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let found = Found::File {
                    len: bytes.len() as u64,
                    hash: Fnv1a::default().update(&bytes).finish(),
                };
                text = Some(bytes);
                found
            }
        };
        self.manifest.probes.push((path.clone(), found));
        if let Some(bytes) = text {
            if part.scanned.insert(path.clone()) {
                let dir = path.parent().map(Path::to_path_buf);
                self.scan(part, &bytes, dir.as_deref())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("clshim-includes-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn manifest(src: &str, options: &str, cwd: &Path) -> Result<Manifest, String> {
        let mut s = Scanner::default();
        s.scan_text(src.as_bytes(), &SearchPath::of(options.as_bytes(), cwd)?)?;
        Ok(s.finish())
    }

    #[test]
    fn directives_are_found_in_every_form() {
        let clean = without_comments(
            b"#include \"a.h\"\n  #  include <b.h>\n#include_next \"c.h\"\n#import <d.h>\n\
              # /* x */ include \"e.h\"\n#inc\\\nlude \"f.h\"\n// #include \"no.h\"\n\
              /* #include \"no2.h\" */\n#if __has_include(<g.h>) && defined(__has_include)\n\
              char *s = \"#include \\\"no3.h\\\"\";\n#define INCLUDE(x) x\n",
        );
        let got: Vec<String> = names_in(&clean)
            .unwrap()
            .iter()
            .map(|n| match n {
                Name::Quoted(b) => format!("\"{}\"", String::from_utf8_lossy(b)),
                Name::Angled(b) => format!("<{}>", String::from_utf8_lossy(b)),
                Name::Macro(b) => format!("macro {}", String::from_utf8_lossy(b)),
            })
            .collect();
        assert_eq!(
            got,
            ["\"a.h\"", "<b.h>", "\"c.h\"", "<d.h>", "\"e.h\"", "\"f.h\"", "<g.h>"]
        );
        assert_eq!(
            names_in(&without_comments(b"#include HEADER\n")).unwrap(),
            [Name::Macro(b"HEADER")]
        );
        assert!(names_in(&without_comments(b"#if __has_include(HEADER)\n")).is_err());
        assert!(names_in(&without_comments(b"#include \"open\n")).is_err());
    }

    #[test]
    fn a_change_anywhere_on_the_path_changes_the_manifest() {
        let d = scratch("path");
        let (a, b) = (d.join("a"), d.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(b.join("val.h"), "#define VAL 1\n#include \"sub.h\"\n").unwrap();
        std::fs::write(b.join("sub.h"), "\n").unwrap();
        let src = "#include \"val.h\"\n";
        let opts = format!("-I {} -I{}", a.display(), b.display());
        let m1 = manifest(src, &opts, &d).unwrap();
        assert_eq!(m1, manifest(src, &opts, &d).unwrap(), "stable");
        // Edited header, then edited nested header.
        std::fs::write(b.join("val.h"), "#define VAL 2\n#include \"sub.h\"\n").unwrap();
        let m2 = manifest(src, &opts, &d).unwrap();
        assert_ne!(m1, m2);
        std::fs::write(b.join("sub.h"), "#define X\n").unwrap();
        let m3 = manifest(src, &opts, &d).unwrap();
        assert_ne!(m2, m3);
        // A file appearing in a directory searched earlier, and in the working directory.
        std::fs::write(a.join("val.h"), "#define VAL 3\n").unwrap();
        let m4 = manifest(src, &opts, &d).unwrap();
        assert_ne!(m3, m4);
        std::fs::write(d.join("val.h"), "#define VAL 4\n").unwrap();
        assert_ne!(m4, manifest(src, &opts, &d).unwrap());
        // Relative directories resolve against the working directory.
        let rel = manifest(src, "-I b", &d).unwrap();
        let other = scratch("path-other");
        assert_ne!(rel, manifest(src, "-I b", &other).unwrap());
        // A source that includes nothing reads nothing.
        assert!(manifest("kernel void k() {}\n", &opts, &d)
            .unwrap()
            .probes
            .is_empty());
        assert!(manifest(src, "-I \"x y\"", &d).is_err());
        let _ = std::fs::remove_dir_all(&d);
        let _ = std::fs::remove_dir_all(&other);
    }

    #[test]
    fn includes_named_by_macros_are_followed_as_hashcat_names_them() {
        let d = scratch("macros");
        let inc = d.join("OpenCL");
        std::fs::create_dir_all(&inc).unwrap();
        std::fs::write(
            inc.join("inc_vendor.h"),
            "#include M2S(INCLUDE_PATH/inc_types.h)\n",
        )
        .unwrap();
        std::fs::write(inc.join("inc_types.h"), "typedef int u32x;\n").unwrap();
        let opts = format!(
            "-D KERNEL_STATIC -D INCLUDE_PATH={} -D XM2S(x)=#x -D M2S(x)=XM2S(x) -w",
            inc.display()
        );
        let src = "#include M2S(INCLUDE_PATH/inc_vendor.h)\n";
        let m1 = manifest(src, &opts, &d).unwrap();
        let found: Vec<&PathBuf> = m1
            .probes
            .iter()
            .filter(|(_, f)| matches!(f, Found::File { .. }))
            .map(|(p, _)| p)
            .collect();
        assert_eq!(found, [&inc.join("inc_vendor.h"), &inc.join("inc_types.h")]);
        std::fs::write(inc.join("inc_types.h"), "typedef uint u32x;\n").unwrap();
        assert_ne!(
            m1,
            manifest(src, &opts, &d).unwrap(),
            "a nested header edited"
        );
        // A macro the build cannot be sure of leaves it uncacheable.
        assert!(manifest("#include UNKNOWN\n", "", &d).is_err());
        let twice = "#ifdef A\n#define H \"a.h\"\n#else\n#define H \"b.h\"\n#endif\n#include H\n";
        assert!(manifest(twice, "", &d).is_err());
        let later = "#define H \"a.h\"\n#include H\n#include \"redefine.h\"\n";
        std::fs::write(d.join("redefine.h"), "#undef H\n").unwrap();
        assert!(
            manifest(later, "", &d).is_err(),
            "redefined by a header it includes"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn include_cycles_end() {
        let d = scratch("cycle");
        std::fs::write(d.join("a.h"), "#include \"b.h\"\n").unwrap();
        std::fs::write(d.join("b.h"), "#include \"a.h\"\n").unwrap();
        let m = manifest("#include \"a.h\"\n", "", &d).unwrap();
        assert!(m.probes.len() < 10, "{m:?}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
