//! The two rules that keep clshim from hurting its host: no panic ever crosses the C
//! boundary (`catch` turns one into `None`, and the caller then forwards the call
//! unchanged), and calls the implementation makes back into an intercepted entry point
//! on the same thread are forwarded without being recorded a second time (`enter`), as
//! are all calls reaching a copy of the library that is not the process's recording one.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, returning None if it panicked.
pub fn catch<R>(f: impl FnOnce() -> R) -> Option<R> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}

/// Marks this thread as inside an intercepted call until dropped.
pub struct Inside(());

impl Drop for Inside {
    fn drop(&mut self) {
        let _ = INSIDE.try_with(|c| c.set(false));
    }
}

/// Enters an intercepted call, or None if this thread is already inside one (or is
/// being torn down), or another copy of the library records in this process
/// (`copies`), in which case the caller forwards without recording.
pub fn enter() -> Option<Inside> {
    if !crate::copies::this_copy_records() {
        return None;
    }
    match INSIDE.try_with(|c| c.replace(true)) {
        Ok(false) => Some(Inside(())),
        _ => None,
    }
}

/// Runs application code (a build callback) as if outside clshim, so the OpenCL calls it
/// makes are recorded like any others, then restores the thread's state.
pub fn outside<R>(f: impl FnOnce() -> R) -> R {
    let was = INSIDE.try_with(|c| c.replace(false)).unwrap_or(false);
    let r = f();
    let _ = INSIDE.try_with(|c| c.set(was));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_entry_is_refused_until_the_outer_one_ends() {
        let outer = enter().expect("first entry");
        assert!(enter().is_none());
        outside(|| {
            let inner = enter();
            assert!(inner.is_some(), "a callback's calls are entered afresh");
        });
        assert!(enter().is_none(), "state restored after the callback");
        drop(outer);
        assert!(enter().is_some());
    }

    #[test]
    fn panics_become_none() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        assert_eq!(catch(|| -> i32 { panic!("boom") }), None);
        std::panic::set_hook(prev);
        assert_eq!(catch(|| 3), Some(3));
    }
}
