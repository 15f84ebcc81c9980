//! The report's count of what the native store served: clshim binaries loaded back
//! (`binary_load` records of action `substitute`), made from the driver's own binary in the
//! store or built again from their recipe (which a `clshim warm` after the job turns into
//! native loads next time), and source builds (`build` records) the program cache served
//! from the store against those the driver compiled.

use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadCounts {
    pub native: usize,
    pub recipe: usize,
    /// Of `recipe`, those whose record says why no native binary was used, by what the
    /// report says of it (`schema::miss_phrase`).
    pub recipe_why: BTreeMap<String, usize>,
    /// `clBuildProgram` calls the program cache served from the store.
    pub served: usize,
    /// `clBuildProgram` calls the driver compiled.
    pub compiled: usize,
    /// Of `compiled`, the source builds of processes under the program cache, by why the
    /// store did not serve them.
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

    /// One `build` record of `clBuildProgram` (compiles and links are never served), with
    /// what the report says of its `not_served`.
    pub fn count_build(&mut self, served: Option<&str>, not_served: Option<String>) {
        match served {
            Some(_) => self.served += 1,
            None => self.compiled += 1,
        }
        if let Some(p) = not_served {
            *self.not_served.entry(p).or_default() += 1;
        }
    }

    pub fn add(&mut self, o: LoadCounts) {
        self.native += o.native;
        self.recipe += o.recipe;
        self.served += o.served;
        self.compiled += o.compiled;
        for (w, n) in o.recipe_why {
            *self.recipe_why.entry(w).or_default() += n;
        }
        for (w, n) in o.not_served {
            *self.not_served.entry(w).or_default() += n;
        }
    }

    /// The text report's line on builds, when the program cache served any or said why it
    /// served none.
    pub fn builds_line(&self) -> Option<String> {
        let missed: usize = self.not_served.values().sum();
        if missed > 0 {
            return Some(format!(
                "program cache: {} of {} source builds served from the native store{}",
                self.served,
                self.served + missed,
                reasons(&self.not_served)
            ));
        }
        (self.served > 0).then(|| {
            format!(
                "program cache: {} of {} builds served from the native store, {} compiled",
                self.served,
                self.served + self.compiled,
                self.compiled
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
        json!({
            "served": self.served,
            "compiled": self.compiled,
            "not_served": self.not_served,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        c.count_build(Some("store"), None);
        c.count_build(None, None);
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
        let not_kept = || Some("not kept: they hold the time of the compile".to_string());
        c.count(Some("recipe"), not_kept());
        c.count_build(None, not_kept());
        c.count_build(None, not_kept());
        assert!(c.line().unwrap().ends_with(
            "3 rebuilt from their recipe: 1 not kept: they hold the time of the compile"
        ));
        assert_eq!(
            c.builds_line().unwrap(),
            "program cache: 1 of 3 source builds served from the native store: 2 not kept: \
             they hold the time of the compile"
        );
    }
}
