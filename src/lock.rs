//! The one lock type of clshim: a `std::sync::Mutex` that ignores poisoning (a panic inside
//! clshim is caught and the call forwarded, so the data stays usable) and that the fork
//! handlers can hold across `fork()`. Not parking_lot's mutex: its unlock may hand the lock
//! straight to a parked waiter, and in a forked child that waiter is a thread that does not
//! exist there, so a child whose parent had a thread waiting at the instant of the fork
//! found the lock held forever (seen as a child hanging in the program registry). A futex
//! mutex's unlock only clears its word and wakes whoever is waiting in this process, which
//! is right in the parent and harmless in the child.
//!
//! A lock that must be held across `fork()` is made with [`Lock::new_fork_held`], which
//! registers it: the fork handlers (`runtime`) take every registered lock, in
//! [`ForkOrder`], with [`hold_all_for_fork`], so no module has to be named there.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::{Duration, Instant};

pub struct Lock<T>(Mutex<T>);

/// The order in which the fork handlers take the locks held across fork, after the
/// registry's own: one fixed order, which code that holds two of them at once keeps too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ForkOrder {
    /// The recorder's state (`record`).
    Recorder,
    /// The program registry (`programs`).
    Programs,
    /// The device cache (`devices`).
    Devices,
    /// Builds whose callback fired before their call returned (`builds`).
    FiredEarly,
    /// The texts kept in the trace directory (`sources`).
    Sources,
    /// The program cache's handles (`program_cache::handles`).
    Handles,
    /// The programs whose compile ranks share (`program_cache::share`).
    SharedPrograms,
}

/// What the fork handlers can hold, whatever the lock guards.
trait HeldAcrossFork: Sync {
    fn hold(&'static self);
}

impl<T: Send + 'static> HeldAcrossFork for Lock<T> {
    fn hold(&'static self) {
        self.hold_for_fork();
    }
}

/// Every lock made by `new_fork_held`, sorted by its order (in the order made, within one).
/// Taken first by the fork handlers, so a registration in another thread cannot leave it
/// held in the child; a registration takes no other lock, and is never made while a
/// fork-held lock is held, so the order registry-then-locks never deadlocks.
static FORK_HELD: Lock<Vec<(ForkOrder, &'static dyn HeldAcrossFork)>> = Lock::new(Vec::new());

thread_local! {
    /// The guards the fork handlers hold, in the order taken, on the forking thread.
    static HELD_ACROSS_FORK: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

impl<T> Lock<T> {
    pub const fn new(value: T) -> Lock<T> {
        Lock(Mutex::new(value))
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lock if it can be had within `patience`; for exit paths, where a thread stuck
    /// holding it must not hang the process's exit.
    pub fn try_lock_for(&self, patience: Duration) -> Option<MutexGuard<'_, T>> {
        let until = Instant::now() + patience;
        loop {
            match self.0.try_lock() {
                Ok(g) => return Some(g),
                Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
                Err(TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(TryLockError::WouldBlock) => return None,
            }
        }
    }
}

impl<T: Default> Default for Lock<T> {
    fn default() -> Lock<T> {
        Lock::new(T::default())
    }
}

impl<T: Send + 'static> Lock<T> {
    /// A lock the fork handlers hold across `fork()`, registered with them in `order`. It
    /// lives as long as the process (a later fork may take it at any time), so it is made
    /// once per owner: the runtime's parts, which live as long as the process anyway, and
    /// statics.
    pub fn new_fork_held(order: ForkOrder, value: T) -> &'static Lock<T> {
        let lock: &'static Lock<T> = Box::leak(Box::new(Lock::new(value)));
        let mut all = FORK_HELD.lock();
        let at = all.partition_point(|(o, _)| *o <= order);
        all.insert(at, (order, lock));
        lock
    }
}

/// The fork handler before `fork()`: takes the registry, then every lock registered with
/// [`Lock::new_fork_held`] in [`ForkOrder`], and keeps them on this (the forking) thread
/// until [`release_after_fork`] releases them, newest first.
pub fn hold_all_for_fork() {
    let all = FORK_HELD.lock();
    let locks: Vec<&'static dyn HeldAcrossFork> = all.iter().map(|&(_, l)| l).collect();
    // If this thread's storage is already gone (a fork from a thread being torn down),
    // nothing is taken at all rather than taken and never released.
    if HELD_ACROSS_FORK
        .try_with(|held| held.borrow_mut().push(Box::new(all)))
        .is_err()
    {
        return;
    }
    for lock in locks {
        lock.hold();
    }
}

impl<T: 'static> Lock<T> {
    /// Takes the lock for the fork handlers and keeps it until `release_after_fork`, on
    /// this (the forking) thread.
    fn hold_for_fork(&'static self) {
        // If this thread's storage is already gone (a fork from a thread being torn down),
        // the lock is not taken at all rather than taken and never released.
        let _ = HELD_ACROSS_FORK.try_with(|held| held.borrow_mut().push(Box::new(self.lock())));
    }
}

/// Releases, newest first, every lock `hold_for_fork` took on this thread: in the parent
/// after the fork, and in the child, whose only thread is the one that forked.
pub fn release_after_fork() {
    let _ = HELD_ACROSS_FORK.try_with(|held| {
        let mut held = held.borrow_mut();
        while let Some(guard) = held.pop() {
            drop(guard);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    static SHARED: Lock<u64> = Lock::new(0);

    /// A thread hammers the lock (so it is often held, and often waited for, at the instant
    /// of a fork) while this one forks; every child must get the lock at once.
    #[test]
    fn a_child_forked_while_another_thread_waits_gets_the_lock() {
        static STOP: AtomicBool = AtomicBool::new(false);
        let hammer = std::thread::spawn(|| {
            while !STOP.load(Ordering::Relaxed) {
                *SHARED.lock() += 1;
            }
        });
        let waiter = std::thread::spawn(|| {
            while !STOP.load(Ordering::Relaxed) {
                let _g = SHARED.lock();
                std::thread::yield_now();
            }
        });
        for _ in 0..200 {
            SHARED.hold_for_fork();
            // SAFETY: the child only takes the lock and leaves with _exit, touching nothing
            // another thread of the parent could have left half-done.
            let pid = unsafe { libc::fork() };
            release_after_fork();
            if pid == 0 {
                let got = SHARED.try_lock_for(Duration::from_secs(5)).is_some();
                // SAFETY: _exit ends the child without running the parent's exit handlers.
                unsafe { libc::_exit(if got { 0 } else { 1 }) };
            }
            assert!(pid > 0, "fork failed");
            let mut status = 0;
            // SAFETY: waiting for our own child, with a valid status pointer.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            assert_eq!(waited, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "a forked child could not take the lock"
            );
        }
        STOP.store(true, Ordering::Relaxed);
        hammer.join().unwrap();
        waiter.join().unwrap();
    }

    /// Registered locks are held from `hold_all_for_fork` to `release_after_fork`, in
    /// their order whatever the order they were made in, and the registry with them.
    #[test]
    fn fork_held_locks_are_held_in_their_order_until_released() {
        let late = Lock::new_fork_held(ForkOrder::FiredEarly, 1u8);
        let early = Lock::new_fork_held(ForkOrder::Recorder, 2u8);
        hold_all_for_fork();
        let held = std::thread::spawn(move || {
            let busy = |l: &'static Lock<u8>| l.0.try_lock().is_err();
            (busy(late), busy(early), FORK_HELD.0.try_lock().is_err())
        })
        .join()
        .unwrap();
        release_after_fork();
        assert_eq!(held, (true, true, true));
        assert!(late.0.try_lock().is_ok() && early.0.try_lock().is_ok());
        let all = FORK_HELD.lock();
        let orders: Vec<ForkOrder> = all.iter().map(|&(o, _)| o).collect();
        assert!(orders.windows(2).all(|w| w[0] <= w[1]), "{orders:?}");
    }

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        static POISONED: Lock<u32> = Lock::new(7);
        let _ = std::thread::spawn(|| {
            let _g = POISONED.lock();
            panic!("poison it");
        })
        .join();
        assert_eq!(*POISONED.lock(), 7);
        assert!(POISONED.try_lock_for(Duration::from_millis(10)).is_some());
    }
}
