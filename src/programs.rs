//! The program registry: a stable id for every program handle clshim has seen, and where
//! the program came from (source, IL, a binary, a clshim binary, a link), with the hash and
//! length of what it was made from. Entries are replaced when a handle is reused by a new
//! program and removed when the application releases its last reference, so the registry
//! holds live programs, not history. Under `substitute` it also keeps each program's
//! recipe (what it was made from, to write into its clshim binary) and, for programs
//! clshim recreated from a clshim binary, how it must answer for them (`Loaded`), and
//! which programs have a recipe clshim refused to write (their binary queries get the
//! implementation's answer), and how its binary queries are answered while its build
//! stands (`binary_answer`); all go with the entry, and recipes and answers are bounded in
//! total size.

use crate::binary_answer::Answering;
use crate::cl::cl_program;
use crate::lock::{ForkOrder, Lock};
use crate::recipe::Recipe;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The most bytes of recipes kept at once; past it, new programs get no recipe (and their
/// binary queries the implementation's answer or a source-only binary).
pub const MAX_RECIPE_BYTES: usize = 256 << 20;
/// The bound on the clshim binaries kept for programs' later queries: beyond it, a query is
/// planned afresh (the same answer, but for a query from inside a build's callback).
pub const MAX_ANSWERING_BYTES: usize = 256 << 20;

/// What clshim owes the application for a program it recreated from a clshim binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// Build options recorded in the binary: the application's `clBuildProgram` on the
    /// program builds with these, whatever it passes (None: version 1, its own).
    pub options: Option<Vec<u8>>,
    /// The program stands for a loaded executable but is a source program until built:
    /// `CL_PROGRAM_BINARY_TYPE` answers EXECUTABLE where the implementation says NONE.
    pub executable: bool,
    /// The program is an executable clshim linked again: the application's
    /// `clBuildProgram` (which a loaded binary needs) has nothing left to do, and is
    /// answered by clshim (pocl 3.1 crashes at the first launch after building a linked
    /// program).
    pub linked: bool,
}

/// Whether any program was ever recreated as `Loaded`: until then, binary-type queries
/// are forwarded without a lookup.
static ANY_LOADED: AtomicBool = AtomicBool::new(false);

pub fn any_loaded() -> bool {
    ANY_LOADED.load(Ordering::Relaxed)
}

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

pub struct Registry {
    /// Held across fork (registered with the fork handlers).
    inner: &'static Lock<Inner>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            inner: Lock::new_fork_held(ForkOrder::Programs, Inner::default()),
        }
    }
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    map: HashMap<usize, ProgramInfo>,
    /// Each recipe with its weight, counted once when kept.
    recipes: HashMap<usize, (Arc<Recipe>, usize)>,
    recipe_bytes: usize,
    refused: std::collections::HashSet<usize>,
    loaded: HashMap<usize, Loaded>,
    /// How each program's binary queries are answered while its build stands, and the
    /// bytes that holds (bounded: beyond it an answer is planned afresh at each query).
    /// Forgotten when a build starts, not when it ends: a query from the build's callback
    /// comes before the build's end is recorded, and the application's next one after it.
    answering: HashMap<usize, Arc<Answering>>,
    answering_bytes: usize,
}

impl Inner {
    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn drop_recipe(&mut self, key: usize) {
        if let Some((_, w)) = self.recipes.remove(&key) {
            self.recipe_bytes = self.recipe_bytes.saturating_sub(w);
        }
        self.refused.remove(&key);
    }

    fn forget_extras(&mut self, key: usize) {
        self.drop_recipe(key);
        self.loaded.remove(&key);
        self.forget_answering(key);
    }

    fn forget_answering(&mut self, key: usize) {
        if let Some(a) = self.answering.remove(&key) {
            self.answering_bytes = self.answering_bytes.saturating_sub(a.weight());
        }
    }
}

/// What a successful build does to its program's recipe.
pub enum RecipeChange {
    Set(Arc<Recipe>),
    /// It keeps none (its recipe would break the format's rules).
    Refuse,
    /// A stale recipe goes.
    Drop,
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
        inner.forget_extras(program as usize);
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

    /// Enters `program` (just made by clshim for a program cache handle) as the same
    /// program as `like`: its id and what it was made from, so that records name one
    /// program whichever driver program the handle stands for.
    pub fn alias(&self, program: cl_program, like: cl_program) {
        let mut inner = self.inner.lock();
        let Some(info) = inner.map.get(&(like as usize)).copied() else {
            return;
        };
        inner.forget_extras(program as usize);
        inner.map.insert(program as usize, info);
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
        let mut inner = self.inner.lock();
        inner.map.remove(&(program as usize));
        inner.forget_extras(program as usize);
    }

    /// Makes `change` to the recipe of `program` only if it is still the program whose
    /// entry has `id` (neither released since, nor its address taken by another): for a
    /// build whose success is known only after its callback has seen the program.
    pub fn change_recipe_of(&self, program: cl_program, id: u64, change: RecipeChange) {
        if self.inner.lock().map.get(&(program as usize)).map(|i| i.id) != Some(id) {
            return;
        }
        match change {
            RecipeChange::Set(r) => {
                self.set_recipe(program, r);
            }
            RecipeChange::Refuse => self.refuse_recipe(program),
            RecipeChange::Drop => self.drop_recipe(program),
        }
    }

    /// Keeps `recipe` as the program's (replacing any earlier one), within the bound.
    pub fn set_recipe(&self, program: cl_program, recipe: Arc<Recipe>) -> bool {
        let w = recipe.weight();
        let mut inner = self.inner.lock();
        inner.drop_recipe(program as usize);
        if inner.recipe_bytes + w > MAX_RECIPE_BYTES {
            return false;
        }
        inner.recipe_bytes += w;
        inner.recipes.insert(program as usize, (recipe, w));
        true
    }

    /// Forgets the program's recipe (a recompile that could not record one).
    pub fn drop_recipe(&self, program: cl_program) {
        self.inner.lock().drop_recipe(program as usize);
    }

    /// The program's recipe would break the rules of a clshim binary (the decoder's
    /// limits, a name or options no driver should be handed): it keeps none, and its
    /// binary queries get the implementation's answer, never a binary clshim would refuse.
    pub fn refuse_recipe(&self, program: cl_program) {
        let mut inner = self.inner.lock();
        inner.drop_recipe(program as usize);
        inner.refused.insert(program as usize);
    }

    pub fn recipe_refused(&self, program: cl_program) -> bool {
        self.inner.lock().refused.contains(&(program as usize))
    }

    pub fn recipe(&self, program: cl_program) -> Option<Arc<Recipe>> {
        self.inner
            .lock()
            .recipes
            .get(&(program as usize))
            .map(|(r, _)| r.clone())
    }

    /// A build, compile or link of `program` starts: its binary queries are decided anew.
    pub fn build_started(&self, program: cl_program) {
        self.inner.lock().forget_answering(program as usize);
    }

    /// How `program`'s binary queries are answered: as at its first query since its build
    /// started, or as `decide` says now, kept (within the bound) when it says to keep it.
    /// Decided outside the lock (it asks the implementation, reads /proc and the store); a
    /// query of the same program on another thread at once keeps whichever came first.
    pub fn answering(
        &self,
        program: cl_program,
        decide: impl FnOnce() -> (Answering, bool),
    ) -> Arc<Answering> {
        if let Some(a) = self.inner.lock().answering.get(&(program as usize)) {
            return a.clone();
        }
        let (answer, keep) = decide();
        let answer = Arc::new(answer);
        if !keep {
            return answer;
        }
        let mut inner = self.inner.lock();
        if let Some(a) = inner.answering.get(&(program as usize)) {
            return a.clone();
        }
        let w = answer.weight();
        if inner.answering_bytes + w <= MAX_ANSWERING_BYTES {
            inner.answering_bytes += w;
            inner.answering.insert(program as usize, answer.clone());
        }
        answer
    }

    pub fn set_loaded(&self, program: cl_program, loaded: Loaded) {
        ANY_LOADED.store(true, Ordering::Relaxed);
        self.inner.lock().loaded.insert(program as usize, loaded);
    }

    pub fn loaded(&self, program: cl_program) -> Option<Loaded> {
        self.inner.lock().loaded.get(&(program as usize)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary_answer::Action;
    use crate::recipe::Text;

    fn answer(n: usize) -> Answering {
        Answering {
            actions: vec![Action::Substitute],
            substitutes: vec![Some(vec![0u8; n])],
            recipe: None,
        }
    }

    /// A program's sizes and binaries are answered alike: the first query's answer holds
    /// until the program's next build starts, or it is released; one not to keep is not.
    #[test]
    fn an_answer_holds_for_the_program_until_its_next_build() {
        let r = Registry::default();
        let p = 0x2000 as cl_program;
        r.created(p, Origin::Source, None, None);
        let len = |a: Arc<Answering>| a.substitutes[0].as_ref().unwrap().len();
        assert_eq!(len(r.answering(p, || (answer(3), false))), 3);
        assert_eq!(len(r.answering(p, || (answer(4), true))), 4, "not kept");
        assert_eq!(len(r.answering(p, || unreachable!("kept"))), 4);
        let recipe = Arc::new(Recipe::built(Text::Source(b"k".to_vec()), Vec::new()));
        assert!(r.set_recipe(p, recipe));
        assert_eq!(
            len(r.answering(p, || unreachable!("kept"))),
            4,
            "a build's end (after its callback's query) keeps it"
        );
        r.build_started(p);
        assert_eq!(len(r.answering(p, || (answer(5), true))), 5, "built again");
        r.released(p);
        assert_eq!(len(r.answering(p, || (answer(6), true))), 6, "released");
        let big = r.answering(0x3000 as cl_program, || (answer(MAX_ANSWERING_BYTES), true));
        assert_eq!(len(big), MAX_ANSWERING_BYTES);
        assert_eq!(
            len(r.answering(0x3000 as cl_program, || (answer(1), true))),
            1,
            "beyond the bound: planned afresh"
        );
    }

    #[test]
    fn recipes_go_with_their_program() {
        use crate::recipe::Text;
        let r = Registry::default();
        let p = 0x1000 as cl_program;
        r.created(p, Origin::Source, None, None);
        let recipe = Arc::new(Recipe::built(Text::Source(b"k".to_vec()), Vec::new()));
        assert!(r.set_recipe(p, recipe.clone()));
        r.set_loaded(
            p,
            Loaded {
                options: None,
                executable: true,
                linked: false,
            },
        );
        assert_eq!(r.recipe(p), Some(recipe.clone()));
        assert!(r.loaded(p).is_some() && any_loaded());
        r.created(p, Origin::Source, None, None);
        assert!(
            r.recipe(p).is_none() && r.loaded(p).is_none(),
            "a reused handle"
        );
        let huge = Arc::new(Recipe::built(
            Text::Source(vec![b'a'; MAX_RECIPE_BYTES]),
            Vec::new(),
        ));
        assert!(!r.set_recipe(p, huge), "beyond the bound");
        r.refuse_recipe(p);
        assert!(r.recipe_refused(p) && r.recipe(p).is_none());
        assert!(r.set_recipe(p, recipe.clone()) && !r.recipe_refused(p));
        r.released(p);
        assert_eq!(r.inner.lock().recipe_bytes, 0);
    }

    #[test]
    fn ids_are_stable_and_reuse_gets_a_new_id() {
        let r = Registry::default();
        let p = 0x1000 as cl_program;
        let a = r.created(p, Origin::Source, Some(1), Some(10));
        assert_eq!(r.lookup(p), a);
        let b = r.created(p, Origin::Binary, None, None);
        assert_ne!(a.id, b.id);
        r.released(p);
        assert!(r.inner.lock().map.is_empty());
        let unknown = r.lookup(0x2000 as cl_program);
        assert_eq!(unknown.origin, Origin::Unknown);
        let linked = r.created(0x2000 as cl_program, Origin::Link, None, None);
        assert_eq!(
            linked.id, unknown.id,
            "a program first seen in a callback keeps its id"
        );
    }
}
