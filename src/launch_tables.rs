//! The launch path's tables, all in static memory and read without a lock or an
//! allocation: the kernel table (kernel address -> identity) and the queue table (queue
//! address -> device), both [`AddressTable`]s, and the seen-set of launch keys already
//! recorded (a key's home slot is its top bits). Each lookup
//! the launch path makes has an `_at_home` form that probes only the home slot and calls
//! nothing; the slow path probes further, claims keys and sets entries. What a key or an
//! identity is, and when entries are set or forgotten, is `launches`'.

use crate::address_table::{AddressTable, PROBES};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

// ---------------------------------------------------------------------------------------
// Hashing: multiplies by an odd constant (the golden ratio's), one 64-bit `imul` each, so
// the launch path keeps every value it needs in registers the call may clobber.

pub(crate) const K0: u64 = 0x9E37_79B9_7F4A_7C15;

// ---------------------------------------------------------------------------------------
// The kernel table: kernel address -> identity (0: not known, resolve at the next launch).
// Creating a kernel at a reused address overwrites the identity; an evicted entry is
// resolved again from the kernel (its program and name), so eviction costs one slow
// launch, never a wrong answer.
//
// The queue table: queue address -> its device (0: not known, ask the implementation).
// Asking costs pocl more than the rest of clshim's launch path together, and a queue's
// device never changes; what can change is the queue at an address, once the
// application has released it. So every clReleaseCommandQueue clshim sees forgets the
// entry before the release is forwarded (a release that is not the last costs one more
// question at the next launch): after the last release no launch can refill it, and a
// queue made later at the same address is asked about afresh.

const KERNEL_SLOTS: usize = 1 << 14;
const QUEUE_SLOTS: usize = 1 << 12;

/// The three tables in one static: the launch path reaches all of them from one base
/// address (one `lea`, one register), each at a constant offset.
struct Tables {
    kernels: AddressTable<KERNEL_SLOTS>,
    queues: AddressTable<QUEUE_SLOTS>,
    seen: [AtomicU64; SEEN_SLOTS],
}

static TABLES: Tables = Tables {
    kernels: AddressTable::new(),
    queues: AddressTable::new(),
    seen: [EMPTY_U64; SEEN_SLOTS],
};
static KERNELS: &AddressTable<KERNEL_SLOTS> = &TABLES.kernels;
static QUEUES: &AddressTable<QUEUE_SLOTS> = &TABLES.queues;
static SEEN: &[AtomicU64; SEEN_SLOTS] = &TABLES.seen;

/// The identity of the kernel at `kernel`, or 0 when not known.
#[inline(always)]
pub(crate) fn kernel_identity(kernel: usize) -> u64 {
    KERNELS.get(kernel)
}

/// The identity of the kernel at `kernel` (0: not known) when it lies in its home slot,
/// else noise that no launch key was made of: the launch path's lookup, one load.
#[inline(always)]
pub(crate) fn kernel_identity_at_home(kernel: usize) -> u64 {
    KERNELS.get_at_home(kernel)
}

/// Sets the identity of the kernel at `kernel`. Identity 0 ("ask again") only overwrites
/// an existing entry.
pub(crate) fn set_kernel_identity(kernel: usize, identity: u64) {
    KERNELS.set(kernel, identity);
}

/// The device of the queue at `queue`, or 0 when not known.
#[inline(always)]
pub(crate) fn queue_device(queue: usize) -> u64 {
    QUEUES.get(queue)
}

/// The device of the queue at `queue` (0: not known) when it lies in its home slot, else
/// noise that no launch key was made of: the launch path's lookup, one load.
#[inline(always)]
pub(crate) fn queue_device_at_home(queue: usize) -> u64 {
    QUEUES.get_at_home(queue)
}

/// Sets the device of the queue at `queue`; 0 forgets it (asked again at its next launch).
pub(crate) fn set_queue_device(queue: usize, device: u64) {
    QUEUES.set(queue, device);
}

// ---------------------------------------------------------------------------------------
// The seen-set: launch keys already recorded. Same scheme as the kernel table; a full
// neighbourhood counts as seen, so the hot path stays bounded and nothing more is recorded.

const SEEN_SLOTS: usize = 1 << 16;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_U64: AtomicU64 = AtomicU64::new(0);

static SATURATED: AtomicBool = AtomicBool::new(false);

/// A key's home slot: its top bits (a launch key's top bits already depend on every word
/// it was made of), a shift on the launch path.
#[inline(always)]
fn home(x: u64, slots: usize) -> usize {
    (x >> (64 - slots.trailing_zeros())) as usize
}

/// Whether `key` was claimed.
pub(crate) fn seen(key: u64) -> bool {
    let mut i = home(key, SEEN_SLOTS);
    for _ in 0..PROBES {
        let v = SEEN[i].load(Ordering::Acquire);
        if v == key {
            return true;
        }
        if v == 0 {
            return false;
        }
        i = (i + 1) & (SEEN_SLOTS - 1);
    }
    saturated();
    true
}

/// Whether `key` was claimed and lies in its home slot: the launch path's check, which
/// calls nothing (a key past its home slot is found by [`seen`] on the slow path).
#[inline(always)]
pub(crate) fn seen_at_home(key: u64) -> bool {
    SEEN[home(key, SEEN_SLOTS)].load(Ordering::Acquire) == key
}

#[cold]
fn saturated() {
    if !SATURATED.swap(true, Ordering::Relaxed) {
        log::warn!("clshim: the first-launch table is full; later first launches are not recorded");
    }
}

/// Claims `key`: true for exactly one caller, however many threads race for it.
pub(crate) fn claim(key: u64) -> bool {
    let mut i = home(key, SEEN_SLOTS);
    for _ in 0..PROBES {
        match SEEN[i].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return true,
            Err(v) if v == key => return false,
            Err(_) => {}
        }
        i = (i + 1) & (SEEN_SLOTS - 1);
    }
    saturated();
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys as the launch path makes them: well mixed, never 0.
    fn key(i: u64) -> u64 {
        let h = (i ^ 0xD6E8_FEB8_6659_FD93).wrapping_mul(K0);
        (h ^ (h >> 29)).wrapping_mul(K0).max(1)
    }

    #[test]
    fn one_claim_wins_among_racing_threads() {
        for round in 0..50u64 {
            let key = key(0xABC0 + round);
            let winners: usize = std::thread::scope(|s| {
                let hs: Vec<_> = (0..8)
                    .map(|_| s.spawn(move || claim(key) as usize))
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(winners, 1, "round {round}");
            assert!(seen(key));
        }
    }

    #[test]
    fn colliding_keys_probe_past_each_other() {
        // Keys with the same home slot: each is found, and unclaimed ones are not.
        let target = home(key(1), SEEN_SLOTS);
        let mut same: Vec<u64> = (0u64..)
            .map(|i| key(1_000_000 + i))
            .filter(|&k| home(k, SEEN_SLOTS) == target)
            .take(4)
            .collect();
        let last = same.pop().unwrap();
        for &k in &same {
            assert!(claim(k));
        }
        for &k in &same {
            assert!(seen(k));
        }
        assert!(!seen(last));
    }
}
