//! The report's count of clshim binaries loaded back (`binary_load` records of action
//! `substitute`): how many were made from the driver's own binary in the native store,
//! and how many were built again from their recipe (which a `clshim warm` after the job
//! turns into native loads next time).

use serde_json::{json, Value};

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LoadCounts {
    pub native: usize,
    pub recipe: usize,
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

    pub fn add(&mut self, o: LoadCounts) {
        self.native += o.native;
        self.recipe += o.recipe;
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
                recipe: 2
            }
        );
        assert!(c
            .line()
            .unwrap()
            .contains("1 from native binaries, 2 rebuilt"));
        assert_eq!(LoadCounts::default().line(), None);
    }
}
