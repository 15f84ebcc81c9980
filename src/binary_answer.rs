//! How clshim answers one program's binary queries, device by device, for as long as its
//! build stands: decided by `policy` at the first query since the build started and kept by
//! the program registry, so that every later query of the build (its sizes, then its
//! binaries, whenever each is asked: from the build's callback, after the build returned,
//! from another thread) gets the same answer, and an application's buffer, sized by one
//! query, always holds what clshim writes at the next.

use crate::recipe::Recipe;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Forward,
    Suppress,
    Substitute,
    /// The driver answers a query `substitute` would have answered: the process's CPUs
    /// were busy when the program's first query was planned (`policy`).
    DriverOnBusyNode,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Forward => "forward",
            Action::Suppress => "suppress",
            Action::Substitute => "substitute",
            Action::DriverOnBusyNode => "driver-on-busy-node",
        }
    }

    /// The implementation answers this device's query.
    pub fn by_driver(self) -> bool {
        matches!(self, Action::Forward | Action::DriverOnBusyNode)
    }
}

/// The answer of every device of one program.
pub struct Answering {
    pub actions: Vec<Action>,
    /// The clshim binary of each substituted device (fingerprints differ per device).
    pub substitutes: Vec<Option<Vec<u8>>>,
    /// The recipe the clshim binaries carry (None for source-only ones): what a request
    /// to the native store names.
    pub recipe: Option<Arc<Recipe>>,
}

impl Answering {
    /// The bytes it holds beyond its recipe (which the registry counts apart).
    pub fn weight(&self) -> usize {
        self.substitutes
            .iter()
            .flatten()
            .map(Vec::len)
            .sum::<usize>()
            + 64 * self.actions.len()
    }
}
