//! Recipes: what a program was made from, enough to make it again. A program built from
//! source or IL records that text and its build options; a compiled object its text, its
//! compile options and the headers it was given (with their include names); a linked
//! program or library the recipes of its inputs and the link options. This module owns
//! the data, the rules every recipe obeys (the decoder's and the recorder's alike), and
//! the byte encodings of a recipe inside a clshim binary (`container` wraps them in the
//! checked envelope). Recipes are kept as a graph: an input shared by several links is
//! one `Arc`, encoded once, and every walk over a recipe visits each distinct part once.
//!
//! One part (a node), all integers little-endian: `kind u32` (1 executable built by
//! clBuildProgram, 2 compiled object, 3 library, 4 linked executable) · `text kind u32`
//! (0 none, 1 source, 2 IL) · `options length u32` · `options` · `text length u64` ·
//! `text` · `header count u32` · per header (`name length u32` · `name` · `source length
//! u64` · `source`) · `input count u32` · the inputs. Version 2 (still read) nests each
//! input node in place, a tree; version 3 (written) is `part count u32` then the parts in
//! order, each input an `index u32` of an earlier part, the last part the program, and
//! every other part an input of a later one. Decoding checks every length against the
//! bytes left, the depth and the number of parts against fixed limits, and the rules of
//! [`Recipe::check_part`]; any violation refuses the whole recipe.

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

/// The deepest nesting of linked inputs a recipe may have, and the most parts (distinct
/// nodes and headers together): far beyond real programs, small enough that no input
/// makes decoding costly.
pub const MAX_DEPTH: usize = 8;
pub const MAX_PARTS: usize = 4096;
/// The longest encoded recipe (the container's limit on a body).
pub const MAX_BODY: usize = clshim_format::binary::MAX_BODY;
/// The longest header include name. pocl writes each header at
/// `<its cache>/<temporary folder>/<name>` and builds that path in a 1,024-byte buffer
/// (`POCL_FILENAME_LENGTH`); a longer name overflows it (a crash at about 1,000 bytes).
pub const MAX_NAME: usize = 255;
/// The longest build or compile options (pocl copies them into a buffer of their own
/// length plus 512; other drivers take far longer command lines than real programs use).
pub const MAX_OPTIONS: usize = 32 << 10;
/// The longest link options: pocl 3.1 gathers a link's options into a fixed 512-byte
/// buffer (`link_options[512]`, "buffer overflow detected" beyond it).
pub const MAX_LINK_OPTIONS: usize = 511;
/// The most option words starting with `-g` and with `-cl-denorms-are-zero`: pocl
/// rewrites each into a longer string (61 and 32 bytes) inside the 512 bytes it adds to
/// the options' length, and aborts past about 8 and 42 of them.
pub const MAX_DEBUG_WORDS: usize = 4;
pub const MAX_DENORMS_WORDS: usize = 8;

/// Why a recipe was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Broken {
    Truncated,
    Trailing,
    UnknownKind(u32),
    UnknownText(u32),
    TooDeep,
    TooMany,
    TooLarge,
    BadIndex,
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
            Broken::TooMany => write!(f, "recipe has more than {MAX_PARTS} parts"),
            Broken::TooLarge => write!(f, "recipe longer than {MAX_BODY} bytes"),
            Broken::BadIndex => write!(
                f,
                "recipe part names an input that is not an earlier part, or is no part's input"
            ),
            Broken::Rule(r) => write!(f, "recipe part breaks a rule: {r}"),
        }
    }
}

fn no_nul(b: &[u8]) -> bool {
    !b.contains(&0)
}

/// Whitespace as C's `isspace` in the "C" locale (space, \t, \n, \v, \f, \r): what pocl's
/// option parsing and the OpenCL C compilers' command lines separate words with.
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The rule for a header include name: 1 to [`MAX_NAME`] bytes, relative (no leading
/// `/`), made of `/`-separated components none of which is empty or `..`, and no control
/// character (bytes 0-31 and 127). The driver writes the header at that name below a
/// folder of its own: such a name stays inside it.
pub fn name_ok(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.iter().any(|&b| b < 0x20 || b == 0x7f)
        && name
            .split(|&b| b == b'/')
            .all(|c| !c.is_empty() && c != b"..")
}

/// How many words of `o` start with `prefix` (a word starts at the beginning or after
/// whitespace).
fn words_starting(o: &[u8], prefix: &[u8]) -> usize {
    (0..o.len())
        .filter(|&i| (i == 0 || is_c_space(o[i - 1])) && o[i..].starts_with(prefix))
        .count()
}

/// The rule for options: no NUL byte, at most `limit` bytes, at most [`MAX_DEBUG_WORDS`]
/// words starting with `-g` and [`MAX_DENORMS_WORDS`] with `-cl-denorms-are-zero`.
fn options_ok(o: &[u8], limit: usize) -> Result<(), Broken> {
    if !no_nul(o) {
        return Err(Broken::Rule("NUL byte in options"));
    }
    if o.len() > limit {
        return Err(Broken::Rule("options longer than the driver takes"));
    }
    if words_starting(o, b"-g") > MAX_DEBUG_WORDS
        || words_starting(o, b"-cl-denorms-are-zero") > MAX_DENORMS_WORDS
    {
        return Err(Broken::Rule(
            "more -g or -cl-denorms-are-zero options than the driver takes",
        ));
    }
    Ok(())
}

/// What a walk over a recipe's distinct parts found: its depth (a part with no inputs is
/// 0), its parts (nodes and headers, each distinct node counted once) and the length of
/// its version-3 encoding at most.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Size {
    pub depth: usize,
    pub parts: usize,
    pub bytes: usize,
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

    /// Whether `options` (a link's) ask for a library, read as pocl reads them: words
    /// separated by spaces only (a tab or vertical tab is part of a word), a library when
    /// one starts with `-create-library`. A driver that reads them otherwise makes another
    /// kind than this says: clshim then keeps no recipe (see `check_part`).
    pub fn is_library_link(options: &[u8]) -> bool {
        options
            .split(|&b| b == b' ')
            .any(|w| w.starts_with(b"-create-library"))
    }

    /// The rules of this part alone (its inputs were checked when they were made): a built
    /// or compiled program has a non-empty text without NUL bytes (for source) and no
    /// inputs; only a compiled object has headers, each with a name that [`name_ok`] and
    /// a non-empty source free of NUL bytes; a link has no text and at least one input,
    /// each a compiled object or a library, and is a library exactly when its options ask
    /// for one ([`Recipe::is_library_link`]; clshim records the kind the driver made, so a
    /// driver that reads options otherwise gets no recipe, and checks it again at load);
    /// options keep [`options_ok`] (a link's within [`MAX_LINK_OPTIONS`]).
    pub fn check_part(&self) -> Result<(), Broken> {
        if let Some(o) = &self.options {
            let link = matches!(self.kind, Kind::Library | Kind::Linked);
            options_ok(o, if link { MAX_LINK_OPTIONS } else { MAX_OPTIONS })?;
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
                    if !name_ok(&h.name) {
                        return Err(Broken::Rule(
                            "a header include name that is empty, absolute, too long, has an \
                             empty or '..' component or a control character",
                        ));
                    }
                    if h.source.is_empty() || !no_nul(&h.source) {
                        return Err(Broken::Rule("a header without source"));
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
                if self
                    .inputs
                    .iter()
                    .any(|i| !matches!(i.kind, Kind::Compiled | Kind::Library))
                {
                    return Err(Broken::Rule("a link input that is not linkable"));
                }
            }
        }
        Ok(())
    }

    /// Every rule a recipe a clshim binary carries must keep: this part's, and the
    /// decoder's limits on the whole (depth, parts, length). Inputs are taken as checked
    /// (every recipe clshim keeps was), so the cost is one visit per distinct part.
    pub fn check(&self) -> Result<Size, Broken> {
        self.check_part()?;
        self.size()
    }

    /// The recipe's [`Size`], visiting each distinct part once (shared inputs are one
    /// `Arc`); refused as soon as it passes a limit.
    pub fn size(&self) -> Result<Size, Broken> {
        let mut seen = std::collections::HashMap::new();
        let mut total = Size::default();
        let depth = Self::walk(self, &mut seen, &mut total, 0)?;
        total.depth = depth;
        total.bytes += 4;
        Ok(total)
    }

    fn walk(
        r: &Recipe,
        seen: &mut std::collections::HashMap<*const Recipe, usize>,
        total: &mut Size,
        level: usize,
    ) -> Result<usize, Broken> {
        if let Some(&d) = seen.get(&(r as *const Recipe)) {
            return Ok(d);
        }
        if level > MAX_DEPTH {
            return Err(Broken::TooDeep);
        }
        total.parts += 1 + r.headers.len();
        total.bytes += r.own_len();
        if total.parts > MAX_PARTS {
            return Err(Broken::TooMany);
        }
        if total.bytes > MAX_BODY {
            return Err(Broken::TooLarge);
        }
        let mut depth = 0;
        for i in &r.inputs {
            depth = depth.max(1 + Self::walk(i, seen, total, level + 1)?);
        }
        if depth > MAX_DEPTH {
            return Err(Broken::TooDeep);
        }
        seen.insert(r as *const Recipe, depth);
        Ok(depth)
    }

    /// The bytes of this part's version-3 encoding (inputs as indices).
    fn own_len(&self) -> usize {
        12 + self.options.as_ref().map_or(0, Vec::len)
            + 8
            + self.text.bytes().len()
            + 4
            + self
                .headers
                .iter()
                .map(|h| 12 + h.name.len() + h.source.len())
                .sum::<usize>()
            + 4
            + 4 * self.inputs.len()
    }

    /// The bytes this recipe's parts take (each distinct part once): what a memory bound
    /// counts. Recipes over the limits weigh more than any recipe within them.
    pub fn weight(&self) -> usize {
        self.size().map_or(MAX_BODY + 1, |s| s.bytes)
    }

    /// This part's fields up to its inputs (the part layout of the module doc).
    fn encode_fields(&self, out: &mut Vec<u8>) {
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
    }

    /// The version-3 body: each distinct part once (shared `Arc`s, and parts whose
    /// encoding is equal, become one), inputs before the parts that use them, this
    /// recipe last. Deterministic: the same recipe always gives the same bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut enc = Encoder::default();
        let top = enc.part(self);
        let mut out = Vec::with_capacity(4 + enc.parts.len());
        out.extend_from_slice(&(enc.count as u32).to_le_bytes());
        out.extend_from_slice(&enc.parts);
        debug_assert_eq!(top as usize + 1, enc.count);
        out
    }

    /// Decodes a version-3 body: the parts in order, every rule kept, the last one the
    /// recipe.
    pub fn decode(body: &[u8]) -> Result<Recipe, Broken> {
        let mut r = Reader { b: body, at: 0 };
        let count = r.u32()? as usize;
        if count == 0 {
            return Err(Broken::Truncated);
        }
        if count > MAX_PARTS {
            return Err(Broken::TooMany);
        }
        let mut parts: Vec<(Arc<Recipe>, usize)> = Vec::with_capacity(count.min(64));
        let mut used = vec![false; count];
        let mut total = 0usize;
        for _ in 0..count {
            let (mut node, n) = r.fields()?;
            total += 1 + node.headers.len();
            if total > MAX_PARTS {
                return Err(Broken::TooMany);
            }
            let mut depth = 0;
            for _ in 0..n {
                let i = r.u32()? as usize;
                let (input, d) = parts.get(i).ok_or(Broken::BadIndex)?;
                used[i] = true;
                depth = depth.max(d + 1);
                node.inputs.push(Arc::clone(input));
            }
            if depth > MAX_DEPTH {
                return Err(Broken::TooDeep);
            }
            node.check_part()?;
            parts.push((Arc::new(node), depth));
        }
        if r.at != body.len() {
            return Err(Broken::Trailing);
        }
        if used[..count - 1].iter().any(|u| !u) {
            return Err(Broken::BadIndex);
        }
        let (top, _) = parts.pop().ok_or(Broken::Truncated)?;
        drop(parts);
        Ok(Arc::try_unwrap(top).unwrap_or_else(|a| (*a).clone()))
    }

    /// Decodes a version-2 body: exactly one node with its inputs nested in place,
    /// nothing after it, every rule kept.
    pub fn decode_tree(body: &[u8]) -> Result<Recipe, Broken> {
        let mut r = Reader { b: body, at: 0 };
        let mut parts = 0;
        let recipe = r.tree_node(0, &mut parts)?;
        if r.at != body.len() {
            return Err(Broken::Trailing);
        }
        Ok(recipe)
    }
}

/// Writes the distinct parts of a recipe graph in dependency order (see [`Recipe::encode`]).
#[derive(Default)]
struct Encoder {
    parts: Vec<u8>,
    count: usize,
    by_address: std::collections::HashMap<*const Recipe, u32>,
    by_bytes: std::collections::HashMap<Vec<u8>, u32>,
}

impl Encoder {
    fn part(&mut self, r: &Recipe) -> u32 {
        if let Some(&i) = self.by_address.get(&(r as *const Recipe)) {
            return i;
        }
        let inputs: Vec<u32> = r.inputs.iter().map(|i| self.part(i)).collect();
        let mut own = Vec::with_capacity(r.own_len());
        r.encode_fields(&mut own);
        for i in inputs {
            own.extend_from_slice(&i.to_le_bytes());
        }
        let index = match self.by_bytes.get(&own) {
            Some(&i) => i,
            None => {
                let i = self.count as u32;
                self.count += 1;
                self.parts.extend_from_slice(&own);
                self.by_bytes.insert(own, i);
                i
            }
        };
        self.by_address.insert(r as *const Recipe, index);
        index
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
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

    /// A part's fields up to its input count (returned, the inputs not yet read).
    fn fields(&mut self) -> Result<(Recipe, usize), Broken> {
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
        if nh > MAX_PARTS {
            return Err(Broken::TooMany);
        }
        let mut headers = Vec::new();
        for _ in 0..nh {
            let n = self.u32()? as u64;
            let name = self.take(n)?.to_vec();
            let s = self.u64()?;
            let source = self.take(s)?.to_vec();
            headers.push(Header { name, source });
        }
        let ni = self.u32()? as usize;
        if ni > MAX_PARTS {
            return Err(Broken::TooMany);
        }
        Ok((
            Recipe {
                kind,
                options: Some(options),
                text,
                headers,
                inputs: Vec::new(),
            },
            ni,
        ))
    }

    /// A version-2 node and its nested inputs; `parts` counts nodes and headers.
    fn tree_node(&mut self, depth: usize, parts: &mut usize) -> Result<Recipe, Broken> {
        if depth > MAX_DEPTH {
            return Err(Broken::TooDeep);
        }
        let (mut node, ni) = self.fields()?;
        // Headers count as parts too, as cl-headers/clshim.h counts them.
        *parts += 1 + node.headers.len();
        if *parts > MAX_PARTS {
            return Err(Broken::TooMany);
        }
        for _ in 0..ni {
            node.inputs
                .push(Arc::new(self.tree_node(depth + 1, parts)?));
        }
        node.check_part()?;
        Ok(node)
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

    fn link(kind: Kind, inputs: Vec<Arc<Recipe>>) -> Recipe {
        let options = if kind == Kind::Library {
            b"-create-library".to_vec()
        } else {
            Vec::new()
        };
        Recipe {
            kind,
            options: Some(options),
            text: Text::None,
            headers: Vec::new(),
            inputs,
        }
    }

    fn linked() -> Recipe {
        let lib = link(
            Kind::Library,
            vec![Arc::new(object("int f(){return 1;}", ""))],
        );
        link(
            Kind::Linked,
            vec![
                Arc::new(object("kernel void k(){}", "-DX=2")),
                Arc::new(lib),
            ],
        )
    }

    /// The version-2 (nested) encoding of a tree recipe, as clshim wrote it before.
    fn encode_tree(r: &Recipe, out: &mut Vec<u8>) {
        r.encode_fields(out);
        for i in &r.inputs {
            encode_tree(i, out);
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
            assert_eq!(Recipe::decode(&r.encode()), Ok(r.clone()));
            let mut tree = Vec::new();
            encode_tree(&r, &mut tree);
            let old = Recipe::decode_tree(&tree).unwrap();
            assert_eq!(old, r);
            assert_eq!(old.encode(), r.encode(), "one recipe, one encoding");
        }
    }

    #[test]
    fn every_cut_and_flip_is_refused_or_decodes_to_a_valid_recipe() {
        let b = linked().encode();
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

    /// A 16-way shared-library layout: each level's 16 libraries all link the previous
    /// level's 16. As a tree it has 16^depth parts; as a graph 16 per level, each once.
    #[test]
    fn shared_inputs_are_encoded_once() {
        let mut level: Vec<Arc<Recipe>> = (0..16)
            .map(|i| Arc::new(object(&format!("int f{i}(void){{return {i};}}"), "")))
            .collect();
        for d in 0..5 {
            level = (0..16)
                .map(|i| {
                    let mut l = link(Kind::Library, level.clone());
                    l.options = Some(format!("-create-library -DL{d}_{i}").into_bytes());
                    Arc::new(l)
                })
                .collect();
        }
        let top = link(Kind::Linked, level);
        let size = top.check().unwrap();
        assert_eq!((size.depth, size.parts), (6, 16 * 2 + 16 * 5 + 1));
        let body = top.encode();
        assert!(body.len() < 20_000, "{} bytes", body.len());
        assert_eq!(body.len(), size.bytes, "the size walk counts the encoding");
        let back = Recipe::decode(&body).unwrap();
        assert_eq!(back.encode(), body);
        // Shared once decoded, too: every library of the top shares the same inputs.
        assert!(Arc::ptr_eq(
            &back.inputs[0].inputs[3],
            &back.inputs[9].inputs[3]
        ));
    }

    #[test]
    fn the_decoder_limits_hold_when_recording() {
        let mut chain = Arc::new(link(
            Kind::Library,
            vec![Arc::new(object("int f(void);", ""))],
        ));
        for _ in 0..MAX_DEPTH - 2 {
            chain = Arc::new(link(Kind::Library, vec![chain]));
        }
        let ok = link(Kind::Linked, vec![chain.clone()]);
        assert_eq!(ok.check().map(|s| s.depth), Ok(MAX_DEPTH));
        Recipe::decode(&ok.encode()).unwrap();
        let deep = link(
            Kind::Linked,
            vec![Arc::new(link(Kind::Library, vec![chain]))],
        );
        assert_eq!(deep.check(), Err(Broken::TooDeep));
        assert_eq!(Recipe::decode(&deep.encode()), Err(Broken::TooDeep));
        let many: Vec<Arc<Recipe>> = (0..MAX_PARTS / 2)
            .map(|i| Arc::new(object(&format!("int f{i}(void);"), "")))
            .collect();
        let wide = link(Kind::Linked, many);
        assert_eq!(wide.check(), Err(Broken::TooMany));
        assert_eq!(Recipe::decode(&wide.encode()), Err(Broken::TooMany));
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
        for (options, library) in [
            (&b"-cl-fast  -create-library"[..], true),
            (b"-create-library\x0b", true),
            (b"-create-library\t-cl-fast", true),
            (b"-create-libraryX", true),
            (b"\t-create-library", false),
            (b"-x-create-library", false),
            (b"", false),
        ] {
            assert_eq!(Recipe::is_library_link(options), library, "{options:?}");
        }
        let mut nul = object("a\0b", "");
        assert!(nul.check().is_err());
        nul = object("ab", "-D\0");
        assert!(nul.check().is_err());
    }

    #[test]
    fn header_names_stay_below_the_drivers_folder() {
        let named = |n: &[u8]| {
            let mut o = object("int f(void);", "");
            o.headers[0].name = n.to_vec();
            o.check_part()
        };
        for good in [
            &b"h.h"[..],
            b"sub/dir/h.h",
            b"./h.h",
            b"a..b/c..",
            b"\xe9t\xe9.h",
            &[b'a'; MAX_NAME],
        ] {
            assert_eq!(named(good), Ok(()), "{good:?}");
        }
        for bad in [
            &b""[..],
            b"/etc/h.h",
            b"../h.h",
            b"a/../../h.h",
            b"a/..",
            b"..",
            b"a//h.h",
            b"a/",
            b"a\nb",
            b"a\x7f",
            b"a\tb",
            &[b'a'; MAX_NAME + 1],
        ] {
            assert!(named(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn options_stay_within_what_the_driver_takes() {
        let opts = |kind: Kind, o: &[u8]| {
            let mut r = if kind == Kind::Compiled {
                object("int f(void);", "")
            } else {
                link(kind, vec![Arc::new(object("int f(void);", ""))])
            };
            r.options = Some(o.to_vec());
            r.check_part()
        };
        assert_eq!(opts(Kind::Compiled, &vec![b'x'; MAX_OPTIONS]), Ok(()));
        assert!(opts(Kind::Compiled, &vec![b'x'; MAX_OPTIONS + 1]).is_err());
        assert_eq!(opts(Kind::Linked, &vec![b' '; MAX_LINK_OPTIONS]), Ok(()));
        assert!(opts(Kind::Linked, &vec![b' '; MAX_LINK_OPTIONS + 1]).is_err());
        assert_eq!(opts(Kind::Compiled, b"-g -g -g -DA=-g -g"), Ok(()));
        assert!(opts(Kind::Compiled, b"-g -g -g -g\x0b-gline").is_err());
        let denorms = "-cl-denorms-are-zero ".repeat(MAX_DENORMS_WORDS);
        assert_eq!(opts(Kind::Compiled, denorms.as_bytes()), Ok(()));
        assert!(opts(
            Kind::Compiled,
            format!("{denorms}-cl-denorms-are-zero").as_bytes()
        )
        .is_err());
        assert_eq!(opts(Kind::Compiled, b"-I/tmp/\xe9 -DX=\xff"), Ok(()));
    }
}
