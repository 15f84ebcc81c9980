//! The report's count of what the native store served: clshim binaries loaded back
//! (`binary_load` records of action `substitute`), made from the driver's own binary in the
//! store or built again from their recipe, and source builds (`build` records) by what the
//! program cache did for them: served the driver's binary from the native store, took a
//! compile the store kept (an earlier job's, or another node's), a peer's compile or pocl's
//! own cache's, or compiled (`origin`).

use crate::report::origin::Taken;
use crate::report::traces::Record;
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct LoadCounts {
    pub native: usize,
    pub recipe: usize,
    /// Of `recipe`, those whose record says why no native binary was used, by what the
    /// report says of it (`schema::miss_phrase`).
    pub recipe_why: BTreeMap<String, usize>,
    /// `clBuildProgram` calls, by what the program cache did for them.
    pub builds: Taken,
    /// Of `builds`, the source builds of processes under the program cache that the store
    /// did not serve (their records say why), by what they did instead.
    pub missed: Taken,
    /// Those, by why the store did not serve them.
    pub not_served: BTreeMap<String, usize>,
}

/// `: 24 whose entries' compiles read other files (...), 2 not kept: ...` (the largest
/// count first), or nothing for no reason.
pub fn reasons(by_why: &BTreeMap<String, usize>) -> String {
    if by_why.is_empty() {
        return String::new();
    }
    let mut v: Vec<(&String, &usize)> = by_why.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let parts: Vec<String> = v.iter().map(|(w, n)| format!("{n} {w}")).collect();
    format!(": {}", parts.join(", "))
}

impl LoadCounts {
    /// One `binary_load` record's `made_from` (absent on other loads, and from clshim
    /// releases before the native store), and why it was not native (`phrase`, from its
    /// `native_miss_kind` and `native_miss`, absent before clshim recorded the kind).
    pub fn count(&mut self, made_from: Option<&str>, phrase: Option<String>) {
        match made_from {
            Some("native") => self.native += 1,
            Some("recipe") => {
                self.recipe += 1;
                if let Some(p) = phrase {
                    *self.recipe_why.entry(p).or_default() += 1;
                }
            }
            _ => {}
        }
    }

    /// One `build` record of `clBuildProgram` (compiles and links are never served).
    pub fn count_build(&mut self, r: &Record) {
        self.builds.count(r);
        if let Some(n) = &r.not_served {
            self.missed.count(r);
            *self.not_served.entry(n.phrase()).or_default() += 1;
        }
    }

    /// Tells the compiles another node kept from this node's own, `host` being the node
    /// whose records were counted.
    pub fn resolve(&mut self, host: &str) {
        self.builds.resolve(host);
        self.missed.resolve(host);
    }

    pub fn add(&mut self, o: LoadCounts) {
        self.native += o.native;
        self.recipe += o.recipe;
        self.builds.add(&o.builds);
        self.missed.add(&o.missed);
        for (w, n) in o.recipe_why {
            *self.recipe_why.entry(w).or_default() += n;
        }
        for (w, n) in o.not_served {
            *self.not_served.entry(w).or_default() += n;
        }
    }

    /// The text report's line on builds, when the program cache served any, took any from
    /// a peer, the store or pocl's cache, or said why it served none: the builds it did not
    /// serve the driver's binary for are counted by what they did instead, so a compile
    /// taken from the store's kept compiles is never counted as one the driver made.
    pub fn builds_line(&self) -> Option<String> {
        let missed: usize = self.not_served.values().sum();
        let served = self.builds.served;
        if missed > 0 {
            let mut line = format!(
                "program cache: {served} of {} source builds served from the native store{}",
                served + missed,
                reasons(&self.not_served)
            );
            if self.missed.took() > 0 {
                line.push_str("; of those, ");
                line.push_str(&self.missed.unserved_words());
            }
            return Some(line);
        }
        (served + self.builds.took() > 0).then(|| {
            format!(
                "program cache: {served} of {} builds served from the native store, {}",
                self.builds.total(),
                self.builds.unserved_words()
            )
        })
    }

    /// The text report's line, when any clshim binary was loaded: why those made again
    /// were not native, as their records say (traces of a clshim that said no kind promise
    /// nothing).
    pub fn line(&self) -> Option<String> {
        if self.native + self.recipe == 0 {
            return None;
        }
        Some(format!(
            "clshim binaries loaded: {} from native binaries, {} rebuilt from their recipe{}",
            self.native,
            self.recipe,
            reasons(&self.recipe_why)
        ))
    }

    pub fn json(&self) -> Value {
        json!({ "native": self.native, "recipe": self.recipe, "recipe_why": self.recipe_why })
    }

    pub fn builds_json(&self) -> Value {
        let mut v = self.builds.json();
        v["not_served"] = json!(self.not_served);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::traces::parse_line;

    /// A `clBuildProgram` record with `fields` (JSON members, each with a leading comma).
    fn build(fields: &str) -> String {
        format!(
            r#"{{"schema":1,"event":"build","pid":1,"ts":1.75e9,"seconds":1.0,"call":"clBuildProgram"{fields}}}"#
        )
    }

    fn count(c: &mut LoadCounts, fields: &str) {
        let line = build(fields);
        c.count_build(&parse_line(line.as_bytes(), true).unwrap().unwrap());
    }

    #[test]
    fn counts_only_loads_of_clshim_binaries() {
        let mut c = LoadCounts::default();
        for m in [
            Some("native"),
            Some("recipe"),
            Some("recipe"),
            None,
            Some("x"),
        ] {
            c.count(m, None);
        }
        assert_eq!(
            c,
            LoadCounts {
                native: 1,
                recipe: 2,
                ..LoadCounts::default()
            }
        );
        assert_eq!(c.builds_line(), None);
        count(&mut c, r#","served":"store""#);
        count(&mut c, "");
        assert_eq!(
            c.builds_line().unwrap(),
            "program cache: 1 of 2 builds served from the native store, 1 compiled"
        );
        // Traces that say no why promise nothing.
        assert_eq!(
            c.line().unwrap(),
            "clshim binaries loaded: 1 from native binaries, 2 rebuilt from their recipe"
        );
        assert_eq!(LoadCounts::default().line(), None);
        let not_kept = r#","not_served":{"kind":"not_kept","why":"__TIME__"}"#;
        c.count(
            Some("recipe"),
            Some("not kept: they hold the time of the compile".to_string()),
        );
        count(&mut c, not_kept);
        count(&mut c, not_kept);
        assert!(c.line().unwrap().ends_with(
            "3 rebuilt from their recipe: 1 not kept: they hold the time of the compile"
        ));
        assert_eq!(
            c.builds_line().unwrap(),
            "program cache: 1 of 3 source builds served from the native store: 2 not kept: \
             they hold the time of the compile"
        );
    }

    /// A build that took a compile compiled nothing: counted by where it took it from, and
    /// one from the store by whose node kept it.
    #[test]
    fn builds_that_took_a_compile_are_not_counted_compiled() {
        let mut c = LoadCounts::default();
        count(&mut c, r#","shared":"from_store","from_host":"a""#);
        count(&mut c, r#","shared":"from_store","from_host":"b""#);
        count(&mut c, r#","shared":"from_peer","peer_wait_seconds":0.5"#);
        c.resolve("a");
        assert_eq!(
            c.builds_line().unwrap(),
            "program cache: 0 of 3 builds served from the native store, 2 took the store's \
             kept compiles (1 another node's), 1 a peer's compile"
        );
        let v = c.builds_json();
        assert_eq!(v["compiled"], 0);
        assert_eq!(v["from_store"], 2);
        assert_eq!(v["from_other_node"], 1);
        assert_eq!(v["waits"], 1);
        // Without anything served or taken: no line (the build line says nothing new).
        let mut plain = LoadCounts::default();
        count(&mut plain, r#","shared":"compiled""#);
        assert_eq!(plain.builds_line(), None);
    }
}
