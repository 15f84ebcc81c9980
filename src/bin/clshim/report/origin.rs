//! Where a build or a first launch got what it runs, as its record says under the program
//! cache (`shared`, `served`, `peer_wait_seconds`, `from_host`): compiled here, taken from
//! a peer of the node, from the compiles the store kept (this node's, or another node's),
//! from pocl's own cache, or served the driver's binary from the native store; and
//! [`Taken`], those counted. The one place that reads these fields, so every part of the
//! report (the builds line, repeats, hosts, notes and hints) counts them alike.

use crate::report::traces::Record;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// What a build or first launch did for its compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The driver compiled it (also every record without `shared` or `served`: a process
    /// without the program cache, or a clshim before it).
    Compiled,
    /// It waited for a peer or another node past its patience, then compiled.
    CompiledAfterWaiting,
    /// It took a compile a rank of its node made in this job.
    FromPeer,
    /// It took a compile the store kept (an earlier job's, or another node's).
    FromStore,
    /// pocl's own cache held it.
    OwnCache,
    /// The program cache made it from the driver's binary in the native store.
    Served,
}

impl Origin {
    pub fn of(r: &Record) -> Origin {
        match r.shared.as_deref() {
            Some("from_peer") => Origin::FromPeer,
            Some("from_store") => Origin::FromStore,
            Some("own_cache") => Origin::OwnCache,
            Some("compiled_after_waiting") => Origin::CompiledAfterWaiting,
            _ if r.served.is_some() => Origin::Served,
            _ => Origin::Compiled,
        }
    }

    /// The driver compiled.
    pub fn compiled(self) -> bool {
        matches!(self, Origin::Compiled | Origin::CompiledAfterWaiting)
    }
}

/// Builds (or first launches) counted by [`Origin`], with their waits for a peer's or
/// another node's compile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Taken {
    pub compiled: usize,
    /// Of `compiled`, those that compiled after waiting.
    pub gave_up: usize,
    pub from_peer: usize,
    pub from_store: usize,
    /// Of `from_store`, those another node kept (`from_host` other than the record's host).
    pub from_other_node: usize,
    pub own_cache: usize,
    pub served: usize,
    /// Records that waited for a peer or another node, and how long in all.
    pub waits: usize,
    pub waited: f64,
    /// `from_host` of the records taken from the store, until their own host is known
    /// ([`Taken::resolve`]): a file's `process` record, which names it, need not come first.
    unresolved: BTreeMap<String, usize>,
}

impl Taken {
    pub fn count(&mut self, r: &Record) {
        let origin = Origin::of(r);
        match origin {
            Origin::Compiled => self.compiled += 1,
            Origin::CompiledAfterWaiting => {
                self.compiled += 1;
                self.gave_up += 1;
            }
            Origin::FromPeer => self.from_peer += 1,
            Origin::FromStore => {
                self.from_store += 1;
                if let Some(h) = r.from_host.as_deref() {
                    *self.unresolved.entry(h.to_string()).or_default() += 1;
                }
            }
            Origin::OwnCache => self.own_cache += 1,
            Origin::Served => self.served += 1,
        }
        if let Some(w) = r.peer_wait_seconds.filter(|w| w.is_finite() && *w > 0.0) {
            self.waits += 1;
            self.waited += w;
        }
    }

    /// Counts as another node's what a node other than `host` (the records' own) kept.
    pub fn resolve(&mut self, host: &str) {
        for (h, n) in std::mem::take(&mut self.unresolved) {
            if h != host {
                self.from_other_node += n;
            }
        }
    }

    pub fn add(&mut self, o: &Taken) {
        self.compiled += o.compiled;
        self.gave_up += o.gave_up;
        self.from_peer += o.from_peer;
        self.from_store += o.from_store;
        self.from_other_node += o.from_other_node;
        self.own_cache += o.own_cache;
        self.served += o.served;
        self.waits += o.waits;
        self.waited += o.waited;
        for (h, n) in &o.unresolved {
            *self.unresolved.entry(h.clone()).or_default() += n;
        }
    }

    /// Those that took a compile made elsewhere: a peer's, the store's or pocl's cache's.
    pub fn took(&self) -> usize {
        self.from_peer + self.from_store + self.own_cache
    }

    /// Those that compiled nothing: taken from a peer, the store or pocl's cache, or served.
    pub fn reused(&self) -> usize {
        self.took() + self.served
    }

    pub fn total(&self) -> usize {
        self.compiled + self.reused()
    }

    /// `3 took the store's kept compiles (1 another node's), 1 a peer's compile, 1 pocl's
    /// own cache's, 2 compiled`: the builds that were not served, by what they did instead.
    pub fn unserved_words(&self) -> String {
        let store = match self.from_other_node {
            0 => "the store's kept compiles".to_string(),
            n => format!("the store's kept compiles ({n} another node's)"),
        };
        let mut parts: Vec<String> = [
            (self.from_store, store),
            (self.from_peer, "a peer's compile".to_string()),
            (self.own_cache, "pocl's own cache's".to_string()),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .enumerate()
        .map(|(i, (n, w))| {
            if i == 0 {
                format!("{n} took {w}")
            } else {
                format!("{n} {w}")
            }
        })
        .collect();
        if self.compiled > 0 || parts.is_empty() {
            parts.push(format!("{} compiled", self.compiled));
        }
        parts.join(", ")
    }

    pub fn json(&self) -> Value {
        json!({
            "compiled": self.compiled,
            "compiled_after_waiting": self.gave_up,
            "from_peer": self.from_peer,
            "from_store": self.from_store,
            "from_other_node": self.from_other_node,
            "own_cache": self.own_cache,
            "served": self.served,
            "waits": self.waits,
            "peer_wait_seconds": self.waited,
        })
    }
}
