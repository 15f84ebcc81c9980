//! The program registry: a stable id for every program handle clshim has seen, and where
//! the program came from (source, IL, a binary, a clshim binary, a link), with the hash and
//! length of what it was made from. Entries are replaced when a handle is reused by a new
//! program and removed when the application releases its last reference, so the registry
//! holds live programs, not history.

use crate::cl::cl_program;
use crate::lock::Lock;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Source,
    Il,
    Binary,
    ClshimBinary,
    Link,
    /// Made through an entry point clshim does not intercept.
    Unknown,
}

impl Origin {
    pub fn name(self) -> &'static str {
        match self {
            Origin::Source => "source",
            Origin::Il => "il",
            Origin::Binary => "binary",
            Origin::ClshimBinary => "clshim-binary",
            Origin::Link => "link",
            Origin::Unknown => "unknown",
        }
    }

    /// Whether the implementation holds the program's source, so a substitute can carry it.
    pub fn has_source(self) -> bool {
        matches!(self, Origin::Source | Origin::ClshimBinary)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramInfo {
    pub id: u64,
    pub origin: Origin,
    pub hash: Option<u64>,
    pub length: Option<usize>,
}

impl ProgramInfo {
    /// What records say of where the program came from.
    pub fn source(&self) -> crate::schema::Source {
        crate::schema::Source {
            origin: self.origin.name(),
            hash: self.hash.map(crate::hash::label),
            length: self.length,
        }
    }
}

#[derive(Default)]
pub struct Registry {
    inner: Lock<Inner>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    map: HashMap<usize, ProgramInfo>,
}

impl Inner {
    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

impl Registry {
    /// Records a newly created program, replacing whatever an earlier program at the same
    /// address left; keeps the id if the program was already seen (a link callback can see
    /// the new program before `clLinkProgram` returns it).
    pub fn created(
        &self,
        program: cl_program,
        origin: Origin,
        hash: Option<u64>,
        length: Option<usize>,
    ) -> ProgramInfo {
        let mut inner = self.inner.lock();
        let id = match inner.map.get(&(program as usize)) {
            Some(old) if old.origin == Origin::Unknown => old.id,
            _ => inner.new_id(),
        };
        let info = ProgramInfo {
            id,
            origin,
            hash,
            length,
        };
        inner.map.insert(program as usize, info);
        info
    }

    /// Records a newly created program with the hash and total length of what it was made
    /// from (source strings, IL, binaries as given, the source a clshim binary carried):
    /// every creation entry point registers its program through here.
    pub fn made_from(&self, program: cl_program, origin: Origin, parts: &[&[u8]]) -> ProgramInfo {
        let mut h = crate::hash::Fnv1a::default();
        for p in parts {
            h.update(p);
        }
        let len = parts.iter().map(|p| p.len()).sum();
        self.created(program, origin, Some(h.finish()), Some(len))
    }

    /// The program's entry, making an `Unknown` one on first sight.
    pub fn lookup(&self, program: cl_program) -> ProgramInfo {
        let mut inner = self.inner.lock();
        if let Some(info) = inner.map.get(&(program as usize)) {
            return *info;
        }
        let info = ProgramInfo {
            id: inner.new_id(),
            origin: Origin::Unknown,
            hash: None,
            length: None,
        };
        inner.map.insert(program as usize, info);
        info
    }

    pub fn released(&self, program: cl_program) {
        self.inner.lock().map.remove(&(program as usize));
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Held across `fork()` by the fork handlers (runtime.rs), released by
    /// `lock::release_after_fork`.
    pub fn lock_for_fork(&'static self) {
        self.inner.hold_for_fork();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_reuse_gets_a_new_id() {
        let r = Registry::default();
        let p = 0x1000 as cl_program;
        let a = r.created(p, Origin::Source, Some(1), Some(10));
        assert_eq!(r.lookup(p), a);
        let b = r.created(p, Origin::Binary, None, None);
        assert_ne!(a.id, b.id);
        r.released(p);
        assert!(r.is_empty());
        let unknown = r.lookup(0x2000 as cl_program);
        assert_eq!(unknown.origin, Origin::Unknown);
        let linked = r.created(0x2000 as cl_program, Origin::Link, None, None);
        assert_eq!(
            linked.id, unknown.id,
            "a program first seen in a callback keeps its id"
        );
    }
}
