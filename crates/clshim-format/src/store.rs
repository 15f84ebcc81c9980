//! The native store's two file formats, as the library (which writes requests and reads
//! entries) and the `clshim warm` command (which groups requests and keeps the store under
//! its cap) both need them: an entry's fixed header, which says of a file whether it is a
//! whole entry made by clshim (the cap removes nothing else), and a request, which holds
//! everything a later process needs to make the same build again: the recipe, the device
//! and driver it was made for, the working directory and the environment the driver
//! compiled in. What goes into an entry's key, and how a load checks it, is the library's
//! (`store::build_key`); this module only moves bytes, and says which variables a request
//! may carry (those a warm step sets: a request with any other is refused whole) and which
//! folders and files of a store either side may trust ([`not_users_alone`]: only the
//! user's own, that no one else may write). All integers are little-endian.
//!
//! Entry: `magic "CLSHIMNB"` · `version u32` (4) · `flags u32` ([`UNCACHEABLE`] or 0) ·
//! `key u64` · `fingerprint u64` · `driver u64` · `key text length u64` · `manifest length
//! u64` · `payload length u64` · `key text checksum u64` · `manifest checksum u64` ·
//! `payload checksum u64` · `header checksum u64` (of the 88 bytes before it) · key text ·
//! manifest (`crate::manifest`: the names the compile looked up, and what it found) ·
//! payload: `build log length u64` · the build log the driver gave the build (per device)
//! · `kernel attributes length u64` · each kernel's name and `CL_KERNEL_ATTRIBUTES` (`name
//! NUL attributes NUL`, in turn) · the driver's binary. An entry flagged [`UNCACHEABLE`]
//! holds, instead of a payload, why the build cannot be kept (its manifest says which
//! files that verdict stands on). The file is named `<key as 16 hex digits>.bin`.
//!
//! Request: `magic "CLSHIMRQ"` · `version u32` (1) · `flags u32` (0) · `key u64` ·
//! `fingerprint u64` · `driver u64` · `recipe length u64` · recipe · `cwd length u64` ·
//! cwd · `variable count u32` · per variable (`name length u32` · name · `value length
//! u32` · value) · `checksum u64` of everything before it. Named `<key>.req`.

use crate::hash::Fnv1a;

pub const ENTRY_MAGIC: &[u8; 8] = b"CLSHIMNB";
pub const ENTRY_VERSION: u32 = 5;
/// The entry header's length: magic, version, flags, nine u64 fields, its checksum.
pub const ENTRY_HEADER: usize = 8 + 4 + 4 + 10 * 8;
/// An entry's flag: the build it stands for cannot be kept (its payload says why), as long
/// as its manifest holds; no process asks for it again until the files change.
pub const UNCACHEABLE: u32 = 1;
/// The largest entry a reader accepts: far beyond a real program's binary, small enough
/// that a damaged length never makes clshim allocate without bound.
pub const MAX_ENTRY: u64 = 1 << 30;

pub const REQUEST_MAGIC: &[u8; 8] = b"CLSHIMRQ";
pub const REQUEST_VERSION: u32 = 1;
/// The largest request: a recipe at its bound (a clshim binary's body) and room for the
/// directory and the variables.
pub const MAX_REQUEST: u64 = crate::binary::MAX_BODY as u64 + (1 << 20);
/// The most variables a request carries.
const MAX_VARIABLES: u32 = 4096;

/// pocl's variables that say where it keeps files or what it logs, and so never what it
/// compiles: left out of build keys (a rank's own `POCL_CACHE_DIR` must not make its builds
/// another key than its neighbour's).
const NOT_KEYED: &[&str] = &[
    "POCL_CACHE_DIR",
    "POCL_KERNEL_CACHE",
    "POCL_DEBUG",
    "POCL_DEBUG_LLVM_PASSES",
    "POCL_LEAVE_KERNEL_COMPILER_TEMP_FILES",
];

/// The variables that only say where the application's pocl keeps its kernel cache (with
/// `HOME`, which places much else besides): they tell a worker where to copy a request's
/// compiles from, not how to compile, so requests that differ in them alone are made in
/// one worker ([`Request::group`]).
pub const CACHE_PLACING: &[&str] = &["POCL_CACHE_DIR", "XDG_CACHE_HOME"];

/// Variables that are not keyed but that a warm step sets from a request, so that it makes
/// the build where the application's pocl keeps its kernel cache (reusing the compiles it
/// holds) and with the same driver (the ICD loaders' variables and the library path).
const REPLAYED: &[&str] = &[
    "POCL_CACHE_DIR",
    "POCL_KERNEL_CACHE",
    "XDG_CACHE_HOME",
    "HOME",
    "OCL_ICD_VENDORS",
    "OCL_ICD_FILENAMES",
    "OPENCL_VENDOR_PATH",
    "LD_LIBRARY_PATH",
];

/// Whether a variable is part of every build key: pocl's (`POCL_*`), but for those that
/// only say where it keeps files or what it logs.
pub fn keyed_variable(name: &[u8]) -> bool {
    name.starts_with(b"POCL_") && !NOT_KEYED.iter().any(|n| n.as_bytes() == name)
}

/// Whether a request carries a variable for its warm step: the keyed ones and those that
/// place pocl's kernel cache and find the driver. A warm worker's environment has exactly
/// the request's of these.
pub fn replayed_variable(name: &[u8]) -> bool {
    keyed_variable(name) || REPLAYED.iter().any(|n| n.as_bytes() == name)
}

/// Why a store's folder (`dir`) or file, owned by `uid` with the permission bits `mode`,
/// is not one the user `me` may trust, with what to do about it; None when it is the
/// user's own and no one else may write it. A file another user could have written (a
/// request names the variables and the folder a worker starts with; an entry is code a
/// process loads) is another user's code, so a store shared by several users is refused
/// until it can be made safe.
pub fn not_users_alone(dir: bool, uid: u32, mode: u32, me: u32) -> Option<String> {
    if uid != me {
        let todo = if dir {
            "a native store must be yours alone: use one of your own (CLSHIM_NATIVE_STORE)"
        } else {
            "clshim reads only your own store files: remove it"
        };
        return Some(format!("owned by uid {uid}, not by you (uid {me}): {todo}"));
    }
    let who = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (true, true) => "its group and others",
        (true, false) => "its group",
        (false, true) => "others",
        (false, false) => return None,
    };
    let todo = if dir {
        "a native store must be yours alone: chmod 700 it"
    } else {
        "another user may have written it: remove it"
    };
    Some(format!(
        "writable by {who} (mode {:04o}): {todo}",
        mode & 0o7777
    ))
}

/// Why a request's variable is not one a warm step may set; None when it is.
fn not_replayed(name: &[u8], value: &[u8]) -> Option<String> {
    let shown: String = String::from_utf8_lossy(&name[..name.len().min(64)])
        .escape_debug()
        .collect();
    if name.is_empty() || name.contains(&b'=') || name.contains(&0) || value.contains(&0) {
        return Some(format!("carries a malformed variable ({shown})"));
    }
    (!replayed_variable(name)).then(|| {
        format!(
            "carries {shown}, a variable no warm step sets (only pocl's POCL_* and {}): not \
             a request clshim left",
            REPLAYED.join(", ")
        )
    })
}

/// The folder of requests inside a store.
pub const REQUESTS: &str = "requests";
/// The folder of source marks inside a store: an empty file, named by the hash of a
/// source (16 hex digits), for each source the store holds a build of; the program cache
/// gives a program a handle of clshim's only when its source is marked.
pub const SOURCES: &str = "sources";

/// The name of the mark in [`SOURCES`] of a source whose text hashes (FNV-1a 64) to `hash`.
pub fn source_mark(hash: u64) -> String {
    format!("{hash:016x}")
}

/// The file name of the entry for `key`.
pub fn entry_name(key: u64) -> String {
    format!("{key:016x}.bin")
}

/// The file name of the request for `key`.
pub fn request_name(key: u64) -> String {
    format!("{key:016x}.req")
}

/// The file name of the mark of a build whose request killed a warm worker (its driver
/// crashed making it): no process leaves a request for it again while the mark lasts (a
/// week), so that warm steps do not crash on it every time.
pub fn set_aside_name(key: u64) -> String {
    format!("{key:016x}.set-aside")
}

/// The file name of the claim on the request for `key`: a warm step's lease on making it.
/// The claim's modification time is when its holder last renewed the lease, on the store
/// filesystem's own clock (the server's, on NFS); it holds [`Claim::text`].
pub fn claim_name(key: u64) -> String {
    format!("{key:016x}.claim")
}

/// How long a claim holds without renewal, in seconds: then any warm step, on any host,
/// takes the request over (its holder was killed with its job, or its host is gone).
pub const LEASE_SECONDS: i64 = 60;
/// How often the `clshim warm` command renews the claims of the requests its workers make.
pub const RENEW_SECONDS: u64 = 10;

/// Who holds a claim: the host (its name, boot and PID namespace, so that two containers or
/// namespaces with one host name are told apart) and the process there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub host: String,
    pub pid: i32,
}

impl Claim {
    /// This process's claim.
    pub fn mine() -> Claim {
        Claim {
            host: host_id(),
            pid: std::process::id() as i32,
        }
    }

    pub fn text(&self) -> String {
        format!("clshim-claim 1 {} {}\n", self.host, self.pid)
    }

    /// A claim's text, or None when it is none (the holder of such a file is no warm step,
    /// and its lease is only its age).
    pub fn parse(text: &[u8]) -> Option<Claim> {
        let text = std::str::from_utf8(text).ok()?;
        let mut w = text.trim_end_matches('\n').split(' ');
        let (Some("clshim-claim"), Some("1"), Some(host), Some(pid), None) =
            (w.next(), w.next(), w.next(), w.next(), w.next())
        else {
            return None;
        };
        Some(Claim {
            host: host.to_string(),
            pid: pid.parse().ok()?,
        })
    }
}

/// This host as claims name it: `<host name>/<boot id>/<PID namespace>`, from `/proc` (a
/// part that cannot be read is `-`). Two processes with one host id see each other's pids.
pub fn host_id() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace) && !s.contains('/'))
    };
    let pidns = std::fs::read_link("/proc/self/ns/pid").ok().and_then(|l| {
        l.to_str().map(|s| {
            s.trim_start_matches("pid:")
                .trim_matches(|c| c == '[' || c == ']')
                .to_string()
        })
    });
    format!(
        "{}/{}/{}",
        read("/proc/sys/kernel/hostname").unwrap_or_else(|| "-".into()),
        read("/proc/sys/kernel/random/boot_id").unwrap_or_else(|| "-".into()),
        pidns.unwrap_or_else(|| "-".into())
    )
}

/// The lock files of the warm work on `store` on this host, in the temporary folder, by
/// the user's id and the store's path: the first (`.lock`) is held by the one warm step or
/// service that runs (a `clshim warm` waits for it, a service that finds it held leaves);
/// the second (`.clients`) is held, shared, by every process that left a request for the
/// node's warm service while it lives: a service whose clients are all gone ends.
pub fn warm_lock_names(uid: u32, store: &std::path::Path) -> (String, String) {
    let h = crate::hash::fnv1a64(store.as_os_str().as_encoded_bytes());
    (
        format!("clshim-warm-{uid}-{h:016x}.lock"),
        format!("clshim-warm-{uid}-{h:016x}.clients"),
    )
}

/// How long a set-aside mark lasts, in seconds.
pub const SET_ASIDE_SECONDS: i64 = 7 * 24 * 3600;

/// What a warm worker reports of each request as it goes, one line each on its standard
/// output, so that a worker its driver kills loses no count and names the request it was
/// making.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WarmEvent {
    /// The worker claimed the request and starts making it.
    Begin = 0,
    Made = 1,
    /// Its entry existed already.
    Present = 2,
    /// Another process holds it.
    Claimed = 3,
    /// For a device or driver build this host does not have; left in place.
    Foreign = 4,
    /// Removed as damaged, or the driver would not make its program.
    Failed = 5,
    /// Removed: its build's key differs in the worker (the environment the worker was
    /// given is not the request's).
    Stale = 6,
    /// Made into an entry that says why the build cannot be kept (it reads the time of the
    /// compile, or changes files, ...): no process asks for it while its files stay.
    Uncacheable = 7,
    /// Left for a later step: a file the compile read changed while, or just before, it
    /// compiled.
    Postponed = 8,
}

impl WarmEvent {
    const ALL: [WarmEvent; 9] = [
        WarmEvent::Begin,
        WarmEvent::Made,
        WarmEvent::Present,
        WarmEvent::Claimed,
        WarmEvent::Foreign,
        WarmEvent::Failed,
        WarmEvent::Stale,
        WarmEvent::Uncacheable,
        WarmEvent::Postponed,
    ];

    pub fn from_u32(v: u32) -> Option<WarmEvent> {
        Self::ALL.get(v as usize).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            WarmEvent::Begin => "begin",
            WarmEvent::Made => "made",
            WarmEvent::Present => "present",
            WarmEvent::Claimed => "claimed",
            WarmEvent::Foreign => "foreign",
            WarmEvent::Failed => "failed",
            WarmEvent::Stale => "stale",
            WarmEvent::Uncacheable => "uncacheable",
            WarmEvent::Postponed => "postponed",
        }
    }

    /// The worker's line for this event on the request `key`.
    pub fn line(self, key: u64) -> String {
        format!("clshim-warm {} {key:016x}", self.name())
    }

    /// The event and key of a worker's line; None for any other line.
    pub fn parse_line(line: &str) -> Option<(WarmEvent, u64)> {
        let mut words = line.strip_prefix("clshim-warm ")?.split(' ');
        let (name, key, None) = (words.next()?, words.next()?, words.next()) else {
            return None;
        };
        let event = Self::ALL.into_iter().find(|e| e.name() == name)?;
        Some((event, key_of_name(key, "")?))
    }
}

/// The key a store file name stands for: 16 lower-case hex digits and `suffix`.
pub fn key_of_name(name: &str, suffix: &str) -> Option<u64> {
    let hex = name.strip_suffix(suffix)?;
    (hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// An entry's fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryHeader {
    pub flags: u32,
    pub key: u64,
    pub fingerprint: u64,
    pub driver: u64,
    pub key_text_len: u64,
    pub manifest_len: u64,
    pub payload_len: u64,
    pub key_text_sum: u64,
    pub manifest_sum: u64,
    pub payload_sum: u64,
}

/// The parts of an entry: what its key is, what its compile found, what it holds.
pub struct EntryParts<'a> {
    pub key: u64,
    pub fingerprint: u64,
    pub driver: u64,
    pub flags: u32,
    pub key_text: &'a [u8],
    pub manifest: &'a [u8],
    pub payload: &'a [u8],
}

impl EntryHeader {
    /// The header of an entry made of `p`.
    pub fn new(p: &EntryParts) -> Self {
        EntryHeader {
            flags: p.flags,
            key: p.key,
            fingerprint: p.fingerprint,
            driver: p.driver,
            key_text_len: p.key_text.len() as u64,
            manifest_len: p.manifest.len() as u64,
            payload_len: p.payload.len() as u64,
            key_text_sum: crate::hash::fnv1a64(p.key_text),
            manifest_sum: crate::hash::fnv1a64(p.manifest),
            payload_sum: crate::hash::fnv1a64(p.payload),
        }
    }

    pub fn encode(&self) -> [u8; ENTRY_HEADER] {
        let mut out = [0u8; ENTRY_HEADER];
        out[..8].copy_from_slice(ENTRY_MAGIC);
        out[8..12].copy_from_slice(&ENTRY_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.flags.to_le_bytes());
        let fields = [
            self.key,
            self.fingerprint,
            self.driver,
            self.key_text_len,
            self.manifest_len,
            self.payload_len,
            self.key_text_sum,
            self.manifest_sum,
            self.payload_sum,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        let sum = crate::hash::fnv1a64(&out[..ENTRY_HEADER - 8]);
        out[ENTRY_HEADER - 8..].copy_from_slice(&sum.to_le_bytes());
        out
    }

    /// The header at the start of `bytes`, if it is one clshim wrote (magic, version, no
    /// unknown flag, its own checksum); else why not.
    pub fn parse(bytes: &[u8]) -> Result<EntryHeader, String> {
        if bytes.len() < ENTRY_HEADER || &bytes[..8] != ENTRY_MAGIC {
            return Err("not a native store entry (no header)".into());
        }
        let version = u32_at(bytes, 8);
        if version != ENTRY_VERSION {
            return Err(format!("store format version {version}"));
        }
        let flags = u32_at(bytes, 12);
        if flags & !UNCACHEABLE != 0 {
            return Err("unknown flags".into());
        }
        if crate::hash::fnv1a64(&bytes[..ENTRY_HEADER - 8]) != u64_at(bytes, ENTRY_HEADER - 8) {
            return Err("header checksum mismatch".into());
        }
        let f = |i: usize| u64_at(bytes, 16 + 8 * i);
        Ok(EntryHeader {
            flags,
            key: f(0),
            fingerprint: f(1),
            driver: f(2),
            key_text_len: f(3),
            manifest_len: f(4),
            payload_len: f(5),
            key_text_sum: f(6),
            manifest_sum: f(7),
            payload_sum: f(8),
        })
    }

    /// The length of the whole entry this header describes (None: it overflows).
    pub fn total(&self) -> Option<u64> {
        (ENTRY_HEADER as u64)
            .checked_add(self.key_text_len)?
            .checked_add(self.manifest_len)?
            .checked_add(self.payload_len)
    }

    /// Whether a file named `name` of `len` bytes starting with this header is a whole
    /// entry by its header alone: the name is its key's, the length the one it declares.
    /// What the cap checks before it removes a file.
    pub fn names_whole_file(&self, name: &str, len: u64) -> bool {
        key_of_name(name, ".bin") == Some(self.key) && self.total() == Some(len)
    }
}

/// An entry of `p`: its header, then the key text, the manifest and the payload.
pub fn encode_entry(p: &EntryParts) -> Vec<u8> {
    let h = EntryHeader::new(p);
    let mut out =
        Vec::with_capacity(ENTRY_HEADER + p.key_text.len() + p.manifest.len() + p.payload.len());
    out.extend_from_slice(&h.encode());
    out.extend_from_slice(p.key_text);
    out.extend_from_slice(p.manifest);
    out.extend_from_slice(p.payload);
    out
}

/// The parts of a whole, undamaged entry (every checksum holds, the length is exactly the
/// declared one, the payload is not empty); else why not. Whether the entry is the one a
/// load wants is the caller's to check.
pub fn open_entry(bytes: &[u8]) -> Result<(EntryHeader, EntryParts<'_>), String> {
    let h = EntryHeader::parse(bytes)?;
    if h.total() != Some(bytes.len() as u64) {
        return Err(format!(
            "length {} differs from the declared {}",
            bytes.len(),
            h.total().map_or("overflow".to_string(), |t| t.to_string())
        ));
    }
    let text_end = ENTRY_HEADER + h.key_text_len as usize;
    let manifest_end = text_end + h.manifest_len as usize;
    let (text, manifest, payload) = (
        &bytes[ENTRY_HEADER..text_end],
        &bytes[text_end..manifest_end],
        &bytes[manifest_end..],
    );
    if crate::hash::fnv1a64(text) != h.key_text_sum {
        return Err("key text checksum mismatch".into());
    }
    if crate::hash::fnv1a64(manifest) != h.manifest_sum {
        return Err("manifest checksum mismatch".into());
    }
    if payload.is_empty() {
        return Err("empty payload".into());
    }
    if crate::hash::fnv1a64(payload) != h.payload_sum {
        return Err("payload checksum mismatch".into());
    }
    Ok((
        h,
        EntryParts {
            key: h.key,
            fingerprint: h.fingerprint,
            driver: h.driver,
            flags: h.flags,
            key_text: text,
            manifest,
            payload,
        },
    ))
}

/// What an entry holds besides its key: what the driver answers of the build from source
/// (its log, each kernel's attribute string, which pocl's binaries do not carry), and the
/// driver's binary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    pub log: Vec<u8>,
    /// (kernel name, `CL_KERNEL_ATTRIBUTES`), neither holding a NUL.
    pub attributes: Vec<(Vec<u8>, Vec<u8>)>,
    pub binary: Vec<u8>,
}

impl Payload {
    pub fn encode(&self) -> Vec<u8> {
        let attrs: Vec<u8> = self
            .attributes
            .iter()
            .flat_map(|(n, a)| n.iter().chain(&[0]).chain(a).chain(&[0]).copied())
            .collect();
        let mut out = Vec::with_capacity(16 + self.log.len() + attrs.len() + self.binary.len());
        for part in [&self.log, &attrs] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&self.binary);
        out
    }

    /// A payload, or why its bytes cannot be one (or hold no binary).
    pub fn decode(bytes: &[u8]) -> Result<Payload, String> {
        let mut r = Reader { b: bytes, at: 0 };
        let log = r.bytes_u64()?;
        let attrs = r.bytes_u64()?;
        let binary = bytes[r.at..].to_vec();
        if binary.is_empty() {
            return Err("a payload without a binary".into());
        }
        let fields: Vec<&[u8]> = attrs.split(|&b| b == 0).collect();
        // `name NUL attributes NUL` pairs: an even number of fields and one empty one last.
        if fields.last() != Some(&&[][..]) || fields.len() % 2 != 1 {
            return Err("kernel attributes cut short".into());
        }
        let attributes = fields[..fields.len() - 1]
            .chunks(2)
            .map(|p| (p[0].to_vec(), p[1].to_vec()))
            .collect();
        Ok(Payload {
            log,
            attributes,
            binary,
        })
    }
}

/// What a later process needs to make a build again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub key: u64,
    pub fingerprint: u64,
    pub driver: u64,
    /// The recipe's encoding (the library's `recipe` format).
    pub recipe: Vec<u8>,
    /// The working directory the build ran in (relative include paths resolve against it).
    pub cwd: Vec<u8>,
    /// The variables to set, and only these of their kind, where the build is made again
    /// (name, value), sorted by name: only those [`replayed_variable`] names.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.recipe.len() + self.cwd.len());
        out.extend_from_slice(REQUEST_MAGIC);
        out.extend_from_slice(&REQUEST_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for v in [self.key, self.fingerprint, self.driver] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for part in [&self.recipe, &self.cwd] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (name, value) in &self.env {
            for part in [name, value] {
                out.extend_from_slice(&(part.len() as u32).to_le_bytes());
                out.extend_from_slice(part);
            }
        }
        let sum = crate::hash::fnv1a64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// A whole request, or why not: every length is checked against the bytes left
    /// before anything is taken, and the checksum covers it all.
    pub fn decode(bytes: &[u8]) -> Result<Request, String> {
        if bytes.len() < 8 + 4 + 4 + 24 + 8 || &bytes[..8] != REQUEST_MAGIC {
            return Err("not a clshim request".into());
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        if crate::hash::fnv1a64(body) != u64_at(sum, 0) {
            return Err("checksum mismatch".into());
        }
        let version = u32_at(body, 8);
        if version != REQUEST_VERSION {
            return Err(format!("request format version {version}"));
        }
        if u32_at(body, 12) != 0 {
            return Err("unknown flags".into());
        }
        let mut r = Reader { b: body, at: 16 };
        let (key, fingerprint, driver) = (r.u64()?, r.u64()?, r.u64()?);
        let recipe = r.bytes_u64()?;
        let cwd = r.bytes_u64()?;
        let n = r.u32()?;
        if n > MAX_VARIABLES {
            return Err(format!("{n} variables"));
        }
        let mut env = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let (name, value) = (r.bytes_u32()?, r.bytes_u32()?);
            // A worker starts with the request's variables: one of any other name (say
            // LD_PRELOAD) would run what the request names before anything is checked.
            if let Some(why) = not_replayed(&name, &value) {
                return Err(why);
            }
            env.push((name, value));
        }
        if r.at != body.len() {
            return Err("trailing bytes".into());
        }
        Ok(Request {
            key,
            fingerprint,
            driver,
            recipe,
            cwd,
            env,
        })
    }

    /// Requests that can be made in one process: the same directory and variables (a
    /// driver reads its environment once, when it starts), but for those that only place
    /// the application's kernel cache ([`CACHE_PLACING`]): a worker compiles in a cache
    /// folder of its own, and takes each request's application cache from the request. So
    /// ranks that each keep their own cache, as MPI sites advise, share one worker, which
    /// loads the driver's compiler once for all of them.
    pub fn group(&self) -> u64 {
        let mut h = Fnv1a::default();
        h.update(b"clshim-request-group-2\0");
        h.update(&(self.cwd.len() as u64).to_le_bytes())
            .update(&self.cwd);
        for (name, value) in &self.env {
            if CACHE_PLACING
                .iter()
                .any(|n| n.as_bytes() == name.as_slice())
            {
                continue;
            }
            h.update(&(name.len() as u64).to_le_bytes()).update(name);
            h.update(&(value.len() as u64).to_le_bytes()).update(value);
        }
        h.finish()
    }
}

/// A cursor over a request's bytes, each read checked against what is left.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], String> {
        let left = (self.b.len() - self.at) as u64;
        if n > left {
            return Err(format!("a length of {n} with {left} bytes left"));
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64_at(self.take(8)?, 0))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32_at(self.take(4)?, 0))
    }
    fn bytes_u64(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u64()?;
        Ok(self.take(n)?.to_vec())
    }
    fn bytes_u32(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as u64;
        Ok(self.take(n)?.to_vec())
    }
}

/// Whether `name` is one of the temporary names a store writer gives a file before it
/// renames it into place (`.tmp-<store name>-<pid>-<nanoseconds>-<counter>`, the store
/// name an entry's, a request's, a source mark's, or a file of `drivers/` or `devices/`),
/// and so may be removed once its writer is surely gone.
pub fn is_temporary_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(".tmp-") else {
        return false;
    };
    let mut parts = rest.splitn(2, '-');
    let (Some(store_name), Some(numbers)) = (parts.next(), parts.next()) else {
        return false;
    };
    let numbered = numbers.split('-').count() == 3
        && numbers
            .split('-')
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    numbered
        && [".bin", ".req", ".claim", "", ".files", ".txt"]
            .iter()
            .any(|suffix| key_of_name(store_name, suffix).is_some())
}

/// The state letter of a `/proc/<pid>/stat` text (`R`, `S`, `T`, `Z`, ...): it follows the
/// command's closing parenthesis, and the command may hold any byte.
pub fn stat_state(stat: &[u8]) -> Option<u8> {
    let i = stat.iter().rposition(|&b| b == b')')?;
    stat.get(i + 2).copied()
}

/// Whether the process `pid` of this host (and PID namespace) has ended: none by that pid,
/// or a zombie (dead, not yet reaped: a killed warm worker whose parent ended too waits for
/// init to reap it, and holds nothing meanwhile). Every thread of it must have ended: a
/// process whose main thread ended (`pthread_exit`) shows a zombie leader while its other
/// threads run on.
pub fn process_gone(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only asks whether the process exists.
    if unsafe { libc::kill(pid, 0) } != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let ended = |stat: &std::path::Path| {
        std::fs::read(stat).is_ok_and(|stat| matches!(stat_state(&stat), Some(b'Z' | b'X')))
    };
    let proc = std::path::PathBuf::from(format!("/proc/{pid}"));
    ended(&proc.join("stat"))
        && std::fs::read_dir(proc.join("task")).map_or(true, |tasks| {
            tasks.flatten().all(|t| {
                // A task that ended between the listing and the read is gone too.
                let stat = t.path().join("stat");
                ended(&stat) || !stat.exists()
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live process holds its claims and leases; an ended one, reaped or a zombie, not.
    #[test]
    fn a_zombie_is_a_process_gone() {
        assert!(!process_gone(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !process_gone(pid) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(process_gone(pid), "an ended child not yet reaped");
        child.wait().unwrap();
        assert!(process_gone(pid));
    }

    /// A process whose main thread has ended while another runs on (the leader is a zombie
    /// until the whole group ends, as after `pthread_exit` in `main`) is alive: it holds its
    /// leases and claims.
    #[test]
    fn a_process_whose_main_thread_ended_is_not_gone() {
        // SAFETY: the child only starts a thread and ends its main thread; the parent waits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            std::thread::spawn(|| {
                std::thread::sleep(std::time::Duration::from_secs(3));
                // SAFETY: ending the child, whose main thread ended already.
                unsafe { libc::_exit(0) };
            });
            // SAFETY: ending the child's forking thread alone (the exit system call, not
            // exit_group); the other goes on.
            unsafe { libc::syscall(libc::SYS_exit, 0) };
            unreachable!();
        }
        let leader_ended = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.starts_with(" Z")))
        };
        let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !leader_ended() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let ended = leader_ended();
        let gone = process_gone(pid);
        let mut status = 0;
        // SAFETY: this process's own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(ended, "the child's main thread did not end");
        assert!(
            !gone,
            "a process whose other thread runs on was taken as gone"
        );
        assert!(process_gone(pid));
    }

    #[test]
    fn an_entry_opens_only_whole() {
        let parts = EntryParts {
            key: 7,
            fingerprint: 8,
            driver: 9,
            flags: 0,
            key_text: b"key text",
            manifest: b"manifest",
            payload: b"payload",
        };
        let e = encode_entry(&parts);
        let (h, p) = open_entry(&e).unwrap();
        assert_eq!((h.key, h.fingerprint, h.driver, h.flags), (7, 8, 9, 0));
        assert_eq!(
            (p.key_text, p.manifest, p.payload),
            (&b"key text"[..], &b"manifest"[..], &b"payload"[..])
        );
        assert!(h.names_whole_file(&entry_name(7), e.len() as u64));
        assert!(!h.names_whole_file(&entry_name(8), e.len() as u64));
        assert!(!h.names_whole_file(&entry_name(7), e.len() as u64 + 1));
        for cut in [0, 10, ENTRY_HEADER, e.len() - 1] {
            assert!(open_entry(&e[..cut]).is_err(), "{cut}");
        }
        for at in 0..e.len() {
            let mut d = e.clone();
            d[at] ^= 0x10;
            assert!(open_entry(&d).is_err(), "flip at {at}");
        }
        let empty = EntryParts {
            payload: b"",
            ..parts
        };
        assert!(open_entry(&encode_entry(&empty)).is_err());
        let negative = EntryParts {
            flags: UNCACHEABLE,
            payload: b"why",
            ..parts
        };
        let (h, _) = open_entry(&encode_entry(&negative)).unwrap();
        assert_eq!(h.flags, UNCACHEABLE);
        let mut unknown = encode_entry(&parts);
        unknown[12] = 2;
        assert!(EntryHeader::parse(&unknown).is_err());
    }

    #[test]
    fn a_payload_holds_a_log_attributes_and_a_binary() {
        let p = Payload {
            log: b"warning: w".to_vec(),
            attributes: vec![
                (
                    b"k".to_vec(),
                    b"__attribute__((vec_type_hint(uint4)))".to_vec(),
                ),
                (b"plain".to_vec(), Vec::new()),
            ],
            binary: b"ELF".to_vec(),
        };
        assert_eq!(Payload::decode(&p.encode()).unwrap(), p);
        let none = Payload {
            binary: b"x".to_vec(),
            ..Payload::default()
        };
        assert_eq!(Payload::decode(&none.encode()).unwrap(), none);
        assert!(
            Payload::decode(&Payload::default().encode()).is_err(),
            "no binary"
        );
        let bytes = p.encode();
        for cut in 0..17 {
            assert!(Payload::decode(&bytes[..cut]).is_err(), "{cut}");
        }
        // Attributes without their last NUL, or a name without its attributes.
        for attrs in [&b"k\0a"[..], b"k\0"] {
            let mut odd = 0u64.to_le_bytes().to_vec();
            odd.extend_from_slice(&(attrs.len() as u64).to_le_bytes());
            odd.extend_from_slice(attrs);
            odd.extend_from_slice(b"x");
            assert!(Payload::decode(&odd).is_err(), "{attrs:?}");
        }
    }

    #[test]
    fn warm_events_round_trip_as_lines() {
        for v in 0..9 {
            let e = WarmEvent::from_u32(v).unwrap();
            assert_eq!(e as u32, v);
            assert_eq!(
                WarmEvent::parse_line(&e.line(0x0123_4567_89ab_cdef)),
                Some((e, 0x0123_4567_89ab_cdef))
            );
        }
        assert_eq!(WarmEvent::from_u32(9), None);
        for bad in [
            "clshim-warm made 0123",
            "clshim-warm made 0123456789abcdef extra",
            "clshim-warm sung 0123456789abcdef",
            "warm made 0123456789abcdef",
        ] {
            assert_eq!(WarmEvent::parse_line(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_request_round_trips_and_refuses_damage() {
        let r = Request {
            key: 1,
            fingerprint: 2,
            driver: 3,
            recipe: b"recipe".to_vec(),
            cwd: b"/work".to_vec(),
            env: vec![(b"POCL_A".to_vec(), b"1".to_vec())],
        };
        let bytes = r.encode();
        assert_eq!(Request::decode(&bytes).unwrap(), r);
        for cut in 0..bytes.len() {
            assert!(Request::decode(&bytes[..cut]).is_err(), "{cut}");
        }
        for at in 0..bytes.len() {
            let mut d = bytes.clone();
            d[at] ^= 0x01;
            assert!(Request::decode(&d).is_err(), "flip at {at}");
        }
        let other = Request {
            cwd: b"/elsewhere".to_vec(),
            ..r.clone()
        };
        assert_ne!(r.group(), other.group());
        assert_eq!(
            r.group(),
            Request {
                key: 5,
                ..r.clone()
            }
            .group()
        );
    }

    #[test]
    fn requests_that_differ_only_where_their_kernel_cache_is_share_a_group() {
        let with = |env: &[(&str, &str)]| Request {
            key: 1,
            fingerprint: 2,
            driver: 3,
            recipe: b"recipe".to_vec(),
            cwd: b"/work".to_vec(),
            env: env
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        };
        let rank0 = with(&[("HOME", "/h"), ("POCL_CACHE_DIR", "/c/pocl_rank0")]);
        let rank1 = with(&[("HOME", "/h"), ("POCL_CACHE_DIR", "/c/pocl_rank1")]);
        let xdg = with(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/c/xdg_rank2")]);
        let none = with(&[("HOME", "/h")]);
        assert_eq!(rank0.group(), rank1.group());
        assert_eq!(rank0.group(), xdg.group());
        assert_eq!(rank0.group(), none.group());
        // What changes a compile, or finds the driver, still parts them.
        for other in [
            with(&[("HOME", "/h"), ("POCL_EXTRA_BUILD_FLAGS", "-DX=1")]),
            with(&[("HOME", "/h"), ("OCL_ICD_VENDORS", "/v")]),
            with(&[("HOME", "/h"), ("POCL_KERNEL_CACHE", "0")]),
            with(&[("HOME", "/other")]),
        ] {
            assert_ne!(rank0.group(), other.group(), "{:?}", other.env);
        }
    }

    #[test]
    fn a_request_carries_only_variables_a_warm_step_sets() {
        let with = |name: &[u8], value: &[u8]| {
            Request::decode(
                &Request {
                    key: 1,
                    fingerprint: 2,
                    driver: 3,
                    recipe: b"recipe".to_vec(),
                    cwd: b"/work".to_vec(),
                    env: vec![
                        (b"HOME".to_vec(), b"/home/u".to_vec()),
                        (name.to_vec(), value.to_vec()),
                    ],
                }
                .encode(),
            )
        };
        for ok in [
            &b"POCL_EXTRA_BUILD_FLAGS"[..],
            b"POCL_CACHE_DIR",
            b"LD_LIBRARY_PATH",
        ] {
            assert!(with(ok, b"x").is_ok(), "{ok:?}");
        }
        let why = with(b"LD_PRELOAD", b"/tmp/evil.so").unwrap_err();
        assert!(
            why.starts_with("carries LD_PRELOAD, a variable no warm step sets"),
            "{why}"
        );
        for bad in [
            &b"PATH"[..],
            b"LD_AUDIT",
            b"POCL",
            b"",
            b"POCL_X=LD_PRELOAD",
            b"POCL_\0",
        ] {
            assert!(with(bad, b"x").is_err(), "{bad:?}");
        }
        assert!(with(b"POCL_DEVICES", b"cpu\0").is_err(), "a NUL in a value");
    }

    #[test]
    fn only_the_users_own_that_no_one_else_may_write_is_trusted() {
        assert_eq!(not_users_alone(true, 1000, 0o40700, 1000), None);
        assert_eq!(not_users_alone(false, 1000, 0o100644, 1000), None);
        let why = |dir, uid, mode| not_users_alone(dir, uid, mode, 1000).unwrap();
        assert!(why(true, 0, 0o700).starts_with("owned by uid 0, not by you (uid 1000)"));
        assert!(why(false, 65534, 0o600).ends_with("remove it"));
        assert_eq!(
            why(true, 1000, 0o40770),
            "writable by its group (mode 0770): a native store must be yours alone: chmod \
             700 it"
        );
        assert!(why(false, 1000, 0o602).starts_with("writable by others (mode 0602)"));
        assert!(why(true, 1000, 0o1777).starts_with("writable by its group and others"));
    }

    #[test]
    fn a_claim_names_its_host_and_process() {
        let c = Claim::mine();
        assert_eq!(c.host.split('/').count(), 3, "{}", c.host);
        assert_eq!(Claim::parse(c.text().as_bytes()), Some(c.clone()));
        for bad in [
            &b""[..],
            b"host 12 345\n",
            b"clshim-claim 2 h 1\n",
            b"clshim-claim 1 h x\n",
            b"clshim-claim 1 h 1 extra\n",
        ] {
            assert_eq!(Claim::parse(bad), None, "{bad:?}");
        }
        assert_eq!(claim_name(255), "00000000000000ff.claim");
    }

    #[test]
    fn names() {
        assert_eq!(key_of_name("00000000000000ff.bin", ".bin"), Some(255));
        for bad in [
            "ff.bin",
            "00000000000000FF.bin",
            "00000000000000ff.req",
            "x.bin",
        ] {
            assert_eq!(key_of_name(bad, ".bin"), None, "{bad}");
        }
        assert!(is_temporary_name(".tmp-00000000000000ff.bin-12-345-0"));
        assert!(is_temporary_name(".tmp-00000000000000ff.req-12-345-0"));
        assert!(is_temporary_name(".tmp-00000000000000ff.claim-12-345-0"));
        assert!(is_temporary_name(".tmp-00000000000000ff.files-12-345-0"));
        assert!(is_temporary_name(".tmp-00000000000000ff.txt-12-345-0"));
        for bad in [
            ".tmp-photo.bin-12-345-0",
            ".tmp-00000000000000ff.bin-12-345",
            ".tmp-00000000000000ff.bin-a-345-0",
            "tmp-00000000000000ff.bin-12-345-0",
        ] {
            assert!(!is_temporary_name(bad), "{bad}");
        }
    }
}
