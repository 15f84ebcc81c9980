//! Recipes: what a program was made from, enough to make it again. A program built from
//! source or IL records that text and its build options; a compiled object its text, its
//! compile options and the headers it was given (with their include names); a linked
//! program or library the recipes of its inputs and the link options. This module owns
//! the data, the structural rules every recipe obeys, and the byte encoding of a recipe
//! inside a clshim binary (version 2; `container` wraps it in the checked envelope).
//!
//! Body encoding, all integers little-endian, one node (recursive):
//! `kind u32` (1 executable built by clBuildProgram, 2 compiled object, 3 library,
//! 4 linked executable) · `text kind u32` (0 none, 1 source, 2 IL) · `options length u32` ·
//! `options` · `text length u64` · `text` · `header count u32` · per header
//! (`name length u32` · `name` · `source length u64` · `source`) · `input count u32` ·
//! the input nodes. Decoding checks every length against the bytes left, the nesting
//! depth and node count against fixed limits, and the rules of [`Recipe::check`]; any
//! violation refuses the whole recipe.

use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An executable made by `clBuildProgram` from source or IL.
    Built = 1,
    /// A compiled object made by `clCompileProgram`.
    Compiled = 2,
    /// A library made by `clLinkProgram(-create-library)`.
    Library = 3,
    /// An executable made by `clLinkProgram`.
    Linked = 4,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        Some(match v {
            1 => Kind::Built,
            2 => Kind::Compiled,
            3 => Kind::Library,
            4 => Kind::Linked,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Built => "executable",
            Kind::Compiled => "compiled-object",
            Kind::Library => "library",
            Kind::Linked => "linked-executable",
        }
    }
}

/// The program text a recipe starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Text {
    None,
    Source(Vec<u8>),
    Il(Vec<u8>),
}

impl Text {
    fn code(&self) -> u32 {
        match self {
            Text::None => 0,
            Text::Source(_) => 1,
            Text::Il(_) => 2,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Text::None => &[],
            Text::Source(b) | Text::Il(b) => b,
        }
    }
}

/// An embedded header of a compile: the name the source includes it by, and its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub name: Vec<u8>,
    pub source: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recipe {
    pub kind: Kind,
    /// The options the program was built, compiled or linked with; None only for a
    /// version-1 binary, which recorded none (the application's options are used).
    pub options: Option<Vec<u8>>,
    pub text: Text,
    pub headers: Vec<Header>,
    pub inputs: Vec<Arc<Recipe>>,
}

/// The deepest nesting of linked inputs a recipe may have, and the most parts (nodes and
/// headers together): far beyond real programs, small enough that no input makes
/// decoding costly.
pub const MAX_DEPTH: usize = 8;
pub const MAX_NODES: usize = 4096;
pub const MAX_HEADERS: usize = 4096;

/// Why a recipe body was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Broken {
    Truncated,
    Trailing,
    UnknownKind(u32),
    UnknownText(u32),
    TooDeep,
    TooMany,
    Rule(&'static str),
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broken::Truncated => write!(f, "a recipe part is cut short"),
            Broken::Trailing => write!(f, "bytes after the recipe"),
            Broken::UnknownKind(k) => write!(f, "unknown recipe kind {k}"),
            Broken::UnknownText(k) => write!(f, "unknown recipe text kind {k}"),
            Broken::TooDeep => write!(f, "recipe nested deeper than {MAX_DEPTH}"),
            Broken::TooMany => write!(f, "recipe has too many parts"),
            Broken::Rule(r) => write!(f, "recipe part breaks a rule: {r}"),
        }
    }
}

fn no_nul(b: &[u8]) -> bool {
    !b.contains(&0)
}

impl Recipe {
    /// A recipe for the program built from `text` with `options` by clBuildProgram.
    pub fn built(text: Text, options: Vec<u8>) -> Recipe {
        Recipe {
            kind: Kind::Built,
            options: Some(options),
            text,
            headers: Vec::new(),
            inputs: Vec::new(),
        }
    }

    /// Whether `options` (a link's) ask for a library.
    pub fn is_library_link(options: &[u8]) -> bool {
        options
            .split(|b| b.is_ascii_whitespace())
            .any(|w| w == b"-create-library")
    }

    /// The structural rules, for this node and every input: a built or compiled program
    /// has a non-empty text without NUL bytes (for source) and no inputs; only a compiled
    /// object has headers, each with a non-empty name and source free of NUL bytes; a
    /// link has no text and at least one input, each a compiled object or a library;
    /// options hold no NUL byte.
    pub fn check(&self) -> Result<(), Broken> {
        if let Some(o) = &self.options {
            if !no_nul(o) {
                return Err(Broken::Rule("NUL byte in options"));
            }
        }
        match self.kind {
            Kind::Built | Kind::Compiled => {
                match &self.text {
                    Text::None => return Err(Broken::Rule("no text")),
                    Text::Source(s) if s.is_empty() || !no_nul(s) => {
                        return Err(Broken::Rule("empty source or NUL byte in source"))
                    }
                    Text::Il(il) if il.is_empty() => return Err(Broken::Rule("empty IL")),
                    _ => {}
                }
                if !self.inputs.is_empty() {
                    return Err(Broken::Rule("inputs to a compile"));
                }
                if self.kind == Kind::Built && !self.headers.is_empty() {
                    return Err(Broken::Rule("headers in a build"));
                }
                if self.options.is_none() && self.kind != Kind::Built {
                    return Err(Broken::Rule("no options"));
                }
                for h in &self.headers {
                    if h.name.is_empty()
                        || !no_nul(&h.name)
                        || h.source.is_empty()
                        || !no_nul(&h.source)
                    {
                        return Err(Broken::Rule("a header without name or source"));
                    }
                }
            }
            Kind::Library | Kind::Linked => {
                if self.text != Text::None || !self.headers.is_empty() {
                    return Err(Broken::Rule("text in a link"));
                }
                if self.inputs.is_empty() {
                    return Err(Broken::Rule("a link without inputs"));
                }
                if self.options.is_none() {
                    return Err(Broken::Rule("no options"));
                }
                let library = Recipe::is_library_link(self.options.as_deref().unwrap_or(&[]));
                if library != (self.kind == Kind::Library) {
                    return Err(Broken::Rule("library kind and options disagree"));
                }
                for i in &self.inputs {
                    if !matches!(i.kind, Kind::Compiled | Kind::Library) {
                        return Err(Broken::Rule("a link input that is not linkable"));
                    }
                    i.check()?;
                }
            }
        }
        Ok(())
    }

    /// The bytes this recipe's parts take: what a memory bound counts.
    pub fn weight(&self) -> usize {
        self.options.as_ref().map_or(0, Vec::len)
            + self.text.bytes().len()
            + self
                .headers
                .iter()
                .map(|h| h.name.len() + h.source.len())
                .sum::<usize>()
            + self.inputs.iter().map(|i| i.weight()).sum::<usize>()
            + 64
    }

    /// Appends the body encoding (the module doc's layout).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.kind as u32).to_le_bytes());
        out.extend_from_slice(&self.text.code().to_le_bytes());
        let opts = self.options.as_deref().unwrap_or(&[]);
        out.extend_from_slice(&(opts.len() as u32).to_le_bytes());
        out.extend_from_slice(opts);
        let text = self.text.bytes();
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text);
        out.extend_from_slice(&(self.headers.len() as u32).to_le_bytes());
        for h in &self.headers {
            out.extend_from_slice(&(h.name.len() as u32).to_le_bytes());
            out.extend_from_slice(&h.name);
            out.extend_from_slice(&(h.source.len() as u64).to_le_bytes());
            out.extend_from_slice(&h.source);
        }
        out.extend_from_slice(&(self.inputs.len() as u32).to_le_bytes());
        for i in &self.inputs {
            i.encode_into(out);
        }
    }

    /// Decodes a whole body: exactly one node, nothing after it, every rule kept.
    pub fn decode(body: &[u8]) -> Result<Recipe, Broken> {
        let mut r = Reader {
            b: body,
            at: 0,
            nodes: 0,
        };
        let recipe = r.node(0)?;
        if r.at != body.len() {
            return Err(Broken::Trailing);
        }
        recipe.check()?;
        Ok(recipe)
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    nodes: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], Broken> {
        let left = (self.b.len() - self.at) as u64;
        if n > left {
            return Err(Broken::Truncated);
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, Broken> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn u64(&mut self) -> Result<u64, Broken> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn node(&mut self, depth: usize) -> Result<Recipe, Broken> {
        if depth > MAX_DEPTH {
            return Err(Broken::TooDeep);
        }
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(Broken::TooMany);
        }
        let k = self.u32()?;
        let kind = Kind::from_u32(k).ok_or(Broken::UnknownKind(k))?;
        let t = self.u32()?;
        let olen = self.u32()? as u64;
        let options = self.take(olen)?.to_vec();
        let tlen = self.u64()?;
        let bytes = self.take(tlen)?.to_vec();
        let text = match t {
            0 if bytes.is_empty() => Text::None,
            0 => return Err(Broken::Rule("text bytes without a text kind")),
            1 => Text::Source(bytes),
            2 => Text::Il(bytes),
            _ => return Err(Broken::UnknownText(t)),
        };
        let nh = self.u32()? as usize;
        if nh > MAX_HEADERS {
            return Err(Broken::TooMany);
        }
        let mut headers = Vec::new();
        for _ in 0..nh {
            // Headers count as parts too, as cl-headers/clshim.h counts them.
            self.nodes += 1;
            if self.nodes > MAX_NODES {
                return Err(Broken::TooMany);
            }
            let n = self.u32()? as u64;
            let name = self.take(n)?.to_vec();
            let s = self.u64()?;
            let source = self.take(s)?.to_vec();
            headers.push(Header { name, source });
        }
        let ni = self.u32()? as usize;
        if ni > MAX_NODES {
            return Err(Broken::TooMany);
        }
        let mut inputs = Vec::new();
        for _ in 0..ni {
            inputs.push(Arc::new(self.node(depth + 1)?));
        }
        Ok(Recipe {
            kind,
            options: Some(options),
            text,
            headers,
            inputs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn object(src: &str, opts: &str) -> Recipe {
        Recipe {
            kind: Kind::Compiled,
            options: Some(opts.as_bytes().to_vec()),
            text: Text::Source(src.as_bytes().to_vec()),
            headers: vec![Header {
                name: b"h.h".to_vec(),
                source: b"#define X 1".to_vec(),
            }],
            inputs: Vec::new(),
        }
    }

    fn linked() -> Recipe {
        let lib = Recipe {
            kind: Kind::Library,
            options: Some(b"-create-library".to_vec()),
            text: Text::None,
            headers: Vec::new(),
            inputs: vec![Arc::new(object("int f(){return 1;}", ""))],
        };
        Recipe {
            kind: Kind::Linked,
            options: Some(Vec::new()),
            text: Text::None,
            headers: Vec::new(),
            inputs: vec![
                Arc::new(object("kernel void k(){}", "-DX=2")),
                Arc::new(lib),
            ],
        }
    }

    #[test]
    fn recipes_round_trip() {
        for r in [
            Recipe::built(
                Text::Source(b"kernel void k(){}".to_vec()),
                b"-DVAL=7".to_vec(),
            ),
            Recipe::built(Text::Il(vec![3, 2, 0x23, 7, 0]), Vec::new()),
            object("kernel void k(){}", "-DX=1"),
            linked(),
        ] {
            r.check().unwrap();
            let mut b = Vec::new();
            r.encode_into(&mut b);
            assert_eq!(Recipe::decode(&b), Ok(r));
        }
    }

    #[test]
    fn every_cut_and_flip_is_refused_or_decodes_to_a_valid_recipe() {
        let mut b = Vec::new();
        linked().encode_into(&mut b);
        for cut in 0..b.len() {
            assert!(Recipe::decode(&b[..cut]).is_err(), "cut {cut}");
        }
        let mut extra = b.clone();
        extra.push(0);
        assert_eq!(Recipe::decode(&extra), Err(Broken::Trailing));
        for i in 0..b.len() {
            for bit in [0x01u8, 0x80] {
                let mut f = b.clone();
                f[i] ^= bit;
                if let Ok(r) = Recipe::decode(&f) {
                    r.check().unwrap();
                }
            }
        }
    }

    #[test]
    fn structural_rules_hold() {
        let mut bad = linked();
        bad.inputs.push(Arc::new(Recipe::built(
            Text::Source(b"x".to_vec()),
            Vec::new(),
        )));
        assert!(bad.check().is_err(), "an executable is not a link input");
        let mut lib = linked();
        lib.kind = Kind::Library;
        assert!(lib.check().is_err(), "library kind without -create-library");
        let mut nul = object("a\0b", "");
        assert!(nul.check().is_err());
        nul = object("ab", "-D\0");
        assert!(nul.check().is_err());
        assert!(Recipe::is_library_link(b"-cl-fast  -create-library"));
        assert!(!Recipe::is_library_link(b"-create-library-x"));
    }
}
