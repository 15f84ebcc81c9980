//! The report's count of what the native store served: clshim binaries loaded back
//! (`binary_load` records of action `substitute`), made from the driver's own binary in the
//! store or built again from their recipe (which a `clshim warm` after the job turns into
//! native loads next time), and source builds (`build` records) the program cache served
//! from the store against those the driver compiled.

use serde_json::{json, Value};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoadCounts {
    pub native: usize,
    pub recipe: usize,
    /// `clBuildProgram` calls the program cache served from the store.
    pub served: usize,
    /// `clBuildProgram` calls the driver compiled.
    pub compiled: usize,
}

impl LoadCounts {
    /// One `binary_load` record's `made_from` (absent on other loads, and from clshim
    /// releases before the native store).
    pub fn count(&mut self, made_from: Option<&str>) {
        match made_from {
            Some("native") => self.native += 1,
            Some("recipe") => self.recipe += 1,
            _ => {}
        }
    }

    /// One `build` record of `clBuildProgram` (compiles and links are never served).
    pub fn count_build(&mut self, served: Option<&str>) {
        match served {
            Some(_) => self.served += 1,
            None => self.compiled += 1,
        }
    }

    pub fn add(&mut self, o: LoadCounts) {
        self.native += o.native;
        self.recipe += o.recipe;
        self.served += o.served;
        self.compiled += o.compiled;
    }

    /// The text report's line on builds, when the program cache served any.
    pub fn builds_line(&self) -> Option<String> {
        (self.served > 0).then(|| {
            format!(
                "program cache: {} of {} builds served from the native store, {} compiled",
                self.served,
                self.served + self.compiled,
                self.compiled
            )
        })
    }

    /// The text report's line, when any clshim binary was loaded.
    pub fn line(&self) -> Option<String> {
        if self.native + self.recipe == 0 {
            return None;
        }
        let hint = if self.recipe > 0 {
            " (`clshim warm` makes native binaries for the next run)"
        } else {
            ""
        };
        Some(format!(
            "clshim binaries loaded: {} from native binaries, {} rebuilt from their recipe{hint}",
            self.native, self.recipe
        ))
    }

    pub fn json(&self) -> Value {
        json!({ "native": self.native, "recipe": self.recipe })
    }

    pub fn builds_json(&self) -> Value {
        json!({ "served": self.served, "compiled": self.compiled })
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
            c.count(m);
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
        c.count_build(Some("store"));
        c.count_build(None);
        assert_eq!(
            c.builds_line().unwrap(),
            "program cache: 1 of 2 builds served from the native store, 1 compiled"
        );
        assert!(c
            .line()
            .unwrap()
            .contains("1 from native binaries, 2 rebuilt"));
        assert_eq!(LoadCounts::default().line(), None);
    }
}
