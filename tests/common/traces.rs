//! Reading what clshim writes: trace records (docs/trace-schema.md), checked
//! for the fields every record carries, and clshim binaries (layout in src/container.rs),
//! parsed independently of the library so the tests check the format itself.

use std::path::Path;

/// Whether `needle` occurs in `hay` (a clshim binary's magic inside a client's cache file).
pub fn contains_bytes(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every trace record in every `*.jsonl` file of `dir`, each line parsed as JSON
/// (a line that does not parse fails the test).
pub fn read_traces(dir: &Path) -> Vec<serde_json::Value> {
    let mut recs = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map(|e| e == "jsonl").unwrap_or(false))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: not JSON ({e}): {line}", f.display(), i + 1));
            recs.push(v);
        }
    }
    recs
}

/// Records of one event kind.
pub fn events<'a>(recs: &'a [serde_json::Value], event: &str) -> Vec<&'a serde_json::Value> {
    recs.iter().filter(|r| r["event"] == event).collect()
}

/// The one record of `event` (fails the test unless there is exactly one).
pub fn one_event<'a>(recs: &'a [serde_json::Value], event: &str) -> &'a serde_json::Value {
    let e = events(recs, event);
    assert_eq!(e.len(), 1, "one {event} record expected: {recs:#?}");
    e[0]
}

/// Whether a record is a whole process's (`process`, `exit`) rather than a call's.
pub fn is_process_record(r: &serde_json::Value) -> bool {
    r["event"] == "process" || r["event"] == "exit"
}

/// FNV-1a 64 of `bytes` as the trace schema writes it: `fnv1a64:<16 hex digits>`.
pub fn fnv1a64(bytes: &[u8]) -> String {
    format!("fnv1a64:{:016x}", fnv1a64_u64(bytes))
}

/// Checks the fields every trace record must have (schema version 1), and that the first
/// record of every file is a `process` record. Returns the records.
pub fn checked_traces(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().map(|e| e == "jsonl").unwrap_or(false))
        .collect();
    files.sort();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("clshim-"),
            "unexpected trace file name {name}"
        );
        let text = std::fs::read_to_string(f).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap_or("{}"))
            .unwrap_or_else(|e| panic!("{name}: first line is not JSON: {e}"));
        assert_eq!(
            first["event"], "process",
            "{name}: first record is not `process`"
        );
    }
    let recs = read_traces(dir);
    for r in &recs {
        assert_eq!(r["schema"], 1, "schema version: {r}");
        assert!(r["event"].is_string(), "event: {r}");
        assert!(r["pid"].is_u64(), "pid: {r}");
        assert!(r["rank"].is_null() || r["rank"].is_u64(), "rank: {r}");
        assert!(r["tid"].is_u64(), "tid: {r}");
        assert!(
            r["ts"].as_f64().map(|t| t > 1.5e9).unwrap_or(false),
            "ts: {r}"
        );
        assert!(
            r["seconds"].as_f64().map(|s| s >= 0.0).unwrap_or(false),
            "seconds: {r}"
        );
        if r["event"] == "exit" {
            // The end of the process: the common fields alone.
            assert!(r.get("call").is_none(), "exit: {r}");
        } else if r["event"] != "process" {
            assert!(r["call"].is_string(), "call: {r}");
            assert!(r["result"].is_i64(), "result: {r}");
            assert!(r["result_name"].is_string(), "result_name: {r}");
            if r["event"] == "first_launch" {
                // One launch runs on one device.
                assert!(
                    r["device"].is_object() || r["device"].is_null(),
                    "device: {r}"
                );
            } else {
                assert!(r["devices"].is_array(), "devices: {r}");
            }
        }
    }
    recs
}

/// Checks the `sizes` of a successful `binary_query` record against what the application
/// received. A forwarded CL_PROGRAM_BINARIES query reports no sizes (docs/trace-schema.md):
/// clshim does not ask the driver for sizes it was not asked for, so `sizes` is null.
pub fn assert_query_sizes(rec: &serde_json::Value, expected: &serde_json::Value) {
    if rec["param"] == "CL_PROGRAM_BINARIES" && rec["action"] == "forward" {
        assert!(
            rec["sizes"].is_null(),
            "a forwarded CL_PROGRAM_BINARIES query reports no sizes: {rec}"
        );
        return;
    }
    assert_eq!(
        &rec["sizes"], expected,
        "sizes the application received: {rec}"
    );
}

/// The parts of a clshim binary (layout in src/container.rs): magic "CLSHIMB\0",
/// version u32, flags u32, device fingerprint u64, source length u64, source, and an
/// FNV-1a 64 checksum of everything before it; all little-endian. Parsed independently
/// of the library, so the tests check the format, not just agreement with themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClshimBinary {
    pub version: u32,
    pub flags: u32,
    pub fingerprint: u64,
    /// The program text (version 2: the top recipe node's, empty for links).
    pub source: Vec<u8>,
    /// Version 2: the top recipe node's kind (1 executable, 2 compiled object, 3 library,
    /// 4 linked executable) and options; version 1: 1 and None.
    pub kind: u32,
    pub options: Option<String>,
    pub checksum_ok: bool,
}

pub const CLSHIM_MAGIC: &[u8; 8] = b"CLSHIMB\0";
/// Bytes of a version-1 clshim binary around its source: 32 of header, 8 of checksum.
pub const CLSHIM_V1_OVERHEAD: usize = 40;
/// Bytes of a clshim binary (version 3) of a program built from source with no options
/// around its source: the envelope, the part count, and the recipe part's kind, text
/// kind, options length, text length, header count and input count.
pub const CLSHIM_OVERHEAD: usize = CLSHIM_V1_OVERHEAD + 4 + 4 + 4 + 4 + 8 + 4 + 4;

pub fn fnv1a64_u64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Parses a well-formed clshim binary; panics (failing the test) on anything else.
pub fn parse_clshim_binary(b: &[u8]) -> ClshimBinary {
    assert!(
        b.len() >= CLSHIM_V1_OVERHEAD,
        "too short for a clshim binary: {b:?}"
    );
    assert_eq!(&b[..8], CLSHIM_MAGIC, "magic");
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let len = u64_at(24) as usize;
    assert_eq!(len + CLSHIM_V1_OVERHEAD, b.len(), "declared body length");
    let body = b.len() - 8;
    let version = u32_at(8);
    // The fields of the recipe part at `at`: kind, options, text, and where its input
    // count ends.
    let part = |at: usize| {
        let olen = u32_at(at + 8) as usize;
        let options = String::from_utf8_lossy(&b[at + 12..at + 12 + olen]).into_owned();
        let tlen = u64_at(at + 12 + olen) as usize;
        let text = at + 20 + olen;
        let mut end = text + tlen;
        for _ in 0..u32_at(end) {
            end += 4 + u32_at(end + 4) as usize;
            end += 8 + u64_at(end + 4) as usize;
        }
        let inputs = u32_at(end + 4) as usize;
        let end = end + 8;
        (
            u32_at(at),
            options,
            b[text..text + tlen].to_vec(),
            end,
            inputs,
        )
    };
    let (kind, options, source) = if version == 2 {
        let (kind, options, text, _, _) = part(32);
        (kind, Some(options), text)
    } else if version == 3 {
        // The program is the last part; each input is an index of 4 bytes.
        let mut at = 36;
        let mut last = None;
        for _ in 0..u32_at(32) {
            let (kind, options, text, end, inputs) = part(at);
            at = end + 4 * inputs;
            last = Some((kind, Some(options), text));
        }
        last.expect("a version-3 recipe has a part")
    } else {
        (1, None, b[32..body].to_vec())
    };
    ClshimBinary {
        version,
        flags: u32_at(12),
        fingerprint: u64_at(16),
        source,
        kind,
        options,
        checksum_ok: fnv1a64_u64(&b[..body]) == u64_at(body),
    }
}

/// Recomputes the trailing checksum of a (patched) clshim binary, so that whatever was
/// patched, and not the checksum, is what a reader must reject.
pub fn reseal_clshim_binary(mut b: Vec<u8>) -> Vec<u8> {
    let body = b.len() - 8;
    let sum = fnv1a64_u64(&b[..body]);
    b[body..].copy_from_slice(&sum.to_le_bytes());
    b
}
