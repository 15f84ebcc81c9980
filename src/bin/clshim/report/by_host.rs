//! "Seen" (issue 38): where a job's builds and first launches got their compiles, per host
//! and per program: compiled there, taken from a peer of the node, from the store's compile
//! another node kept, from the store's compiles this node kept (an earlier job), from pocl's
//! own cache, or served the driver's binary; and the waits for a peer's or another node's
//! compile. `repeats` sums them in the report's one pass; this module shows them where a
//! job's ranks shared compiles across hosts or took any from the store.

use crate::report::render::clip;
use crate::report::repeats::{builds_json, short_hash, RankBuilds, Repeats};
use serde_json::{json, Value};
use std::fmt::Write;

/// Programs listed in the text unless `--wide`.
pub const PROGRAMS_SHOWN: usize = 10;

/// Whether the section has anything to say: some build or first launch compiled nothing
/// (it took a peer's compile, the store's, pocl's cache's, or was served), or ranks on more
/// than one host shared their compiles.
fn worth_saying(r: &Repeats) -> bool {
    let took = r
        .hosts
        .values()
        .any(|h| h.builds.taken.reused() + h.launches.taken.reused() > 0);
    took || (r.sharing && r.hosts.len() > 1)
}

const HEADS: [&str; 8] = [
    "compiled", "peer", "node", "store", "cache", "served", "waits", "waited s",
];

/// The counts of one line: builds, or first launches (never served).
fn cells(b: &RankBuilds, launches: bool) -> String {
    let t = &b.taken;
    let served = if launches {
        "-".to_string()
    } else {
        t.served.to_string()
    };
    format!(
        "{:>8}  {:>4}  {:>4}  {:>5}  {:>5}  {:>6}  {:>5}  {:>8.3}",
        t.compiled,
        t.from_peer,
        t.from_other_node,
        t.from_store - t.from_other_node,
        t.own_cache,
        served,
        t.waits,
        t.waited
    )
}

fn heads() -> String {
    let [a, b, c, d, e, f, g, h] = HEADS;
    format!("{a:>8}  {b:>4}  {c:>4}  {d:>5}  {e:>5}  {f:>6}  {g:>5}  {h:>8}")
}

/// A key's two lines: its builds, and its first launches where it had any.
fn lines(o: &mut String, key: &str, builds: &RankBuilds, launches: &RankBuilds) {
    let _ = writeln!(o, " {key}  {:<8}  {}", "builds", cells(builds, false));
    if launches.taken.total() > 0 {
        let _ = writeln!(o, " {key}  {:<8}  {}", "launches", cells(launches, true));
    }
}

pub fn text(r: &Repeats, wide: bool) -> String {
    let mut o = String::new();
    if !worth_saying(r) {
        return o;
    }
    let _ = writeln!(
        o,
        "\nBuilds per host and per program (where their compiles came from)"
    );
    let _ = writeln!(o, " {:<16}  {:>5}  {:<8}  {}", "host", "ranks", "", heads());
    for (host, h) in &r.hosts {
        let key = format!("{:<16}  {:>5}", clip(host, 16), h.ranks.len());
        lines(&mut o, &key, &h.builds, &h.launches);
    }
    let rows = r.rows();
    let shown = if wide {
        rows.len()
    } else {
        rows.len().min(PROGRAMS_SHOWN)
    };
    let _ = writeln!(
        o,
        " {:<16} {:<12}  {:>5}  {:<8}  {}",
        "kernels",
        "source",
        "ranks",
        "",
        heads()
    );
    for row in rows.iter().take(shown) {
        let key = format!(
            "{:<16} {:<12}  {:>5}",
            clip(&row.program.kernels.join(","), 16),
            short_hash(&row.id.0),
            row.program.per_rank.len()
        );
        lines(&mut o, &key, &row.builds, &row.launches);
    }
    if shown < rows.len() {
        let _ = writeln!(
            o,
            " ... {} more programs (--wide lists them all)",
            rows.len() - shown
        );
    }
    let _ = writeln!(
        o,
        " compiled: the driver compiled; peer: taken from a rank of the same node in this job; \
         cache: pocl's own cache held it;\n node: from the store, kept by a rank of another \
         node; store: from the store, kept on this node (an earlier job)\n or by a node its \
         record does not name; served: the driver's binary from the native store;\n waits, \
         waited: for a peer's or another node's compile."
    );
    o
}

/// Per host: its ranks, and their builds and first launches by where their compiles came
/// from (`from_store` counts every one taken from the store, `from_other_node` those of
/// them another node kept).
pub fn json(r: &Repeats) -> Value {
    json!(r
        .hosts
        .iter()
        .map(|(host, h)| json!({
            "host": host,
            "ranks": h.ranks.len(),
            "builds": builds_json(&h.builds),
            "first_launches": builds_json(&h.launches),
        }))
        .collect::<Vec<_>>())
}
