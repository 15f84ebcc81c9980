//! A fixed-size map from object addresses (a kernel, a queue) to a non-zero 64-bit value
//! (0: not known), read on every kernel launch: open addressing over arrays of atomics in
//! static memory, so it never allocates, and readers never wait. An address keeps its
//! slot and a new value overwrites the old; a full neighbourhood evicts its home slot's
//! entry, which is only ever a value to ask the implementation for again, never a wrong
//! one.
//!
//! A slot's address and value change together, as a unit: each slot has a sequence
//! number, odd while a writer changes the slot (writers take it with a compare-exchange,
//! so one writes at a time) and bumped when it is done. A reader reads the number, the
//! pair, and the number again, and uses the pair only if the number was even and
//! unchanged; a slot being written reads as "not known". Separate stores without this let
//! two racing evictions leave one object's address with another's value.
//!
//! The launch path reads one word and no sequence number: each value is stored sealed
//! with its address (xor the address times an odd constant, the product that also picks
//! the address's home slot), and [`get_at_home`](AddressTable::get_at_home) unseals the
//! home slot's word with the address it looks up. A slot that holds another address (or
//! another address's half-written pair) unseals to noise, a value no launch key was ever
//! made of, so the caller needs no comparison of its own to tell it apart.

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

/// Slots probed from an address's home slot before its neighbourhood counts as full.
pub const PROBES: usize = 64;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_USIZE: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_U64: AtomicU64 = AtomicU64::new(0);

/// What a value is stored xor'ed with: the address times an odd constant (0 for the empty
/// slot's address 0, so an empty slot holds 0).
#[inline(always)]
fn seal(address: usize) -> u64 {
    (address as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// An address -> value map of `N` slots (a power of two).
pub struct AddressTable<const N: usize> {
    keys: [AtomicUsize; N],
    values: [AtomicU64; N],
    seqs: [AtomicU64; N],
}

impl<const N: usize> AddressTable<N> {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        assert!(N.is_power_of_two() && N >= PROBES);
        AddressTable {
            keys: [EMPTY_USIZE; N],
            values: [EMPTY_U64; N],
            seqs: [EMPTY_U64; N],
        }
    }

    /// The slot where the search for `address` starts.
    #[inline(always)]
    pub fn home(address: usize) -> usize {
        // Fibonacci hashing: the top bits of one multiply, which depend on every bit of
        // the address (its low, aligned bits included), in a register of their own.
        (seal(address) >> (64 - N.trailing_zeros())) as usize
    }

    /// Slot `i`'s (address, value), read as one unit, or None while a writer changes it.
    #[inline(always)]
    fn read(&self, i: usize) -> Option<(usize, u64)> {
        let before = self.seqs[i].load(Ordering::Acquire);
        if before & 1 == 1 {
            return None;
        }
        let key = self.keys[i].load(Ordering::Relaxed);
        let value = self.values[i].load(Ordering::Relaxed) ^ seal(key);
        // The pair's loads happen before the second read of the number (a seqlock's reader).
        fence(Ordering::Acquire);
        (self.seqs[i].load(Ordering::Relaxed) == before).then_some((key, value))
    }

    /// Writes slot `i` as one unit: `change` sees the slot's (address, value) and returns
    /// the pair to store, or None to leave it. Returns what `change` returned.
    fn write(
        &self,
        i: usize,
        change: impl FnOnce(usize, u64) -> Option<(usize, u64)>,
    ) -> Option<(usize, u64)> {
        let seq = &self.seqs[i];
        let mut spins = 0u32;
        let taken = loop {
            let s = seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && seq
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                break s + 1;
            }
            // Another writer holds the slot for a few stores: wait for it (writers are
            // creations, releases and first launches, never a launch already seen).
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        };
        // The pair's stores happen after the odd number is visible (a seqlock's writer).
        fence(Ordering::Release);
        let old_key = self.keys[i].load(Ordering::Relaxed);
        let old_value = self.values[i].load(Ordering::Relaxed) ^ seal(old_key);
        let new = change(old_key, old_value);
        if let Some((key, value)) = new {
            self.keys[i].store(key, Ordering::Relaxed);
            #[cfg(test)]
            tests::preempted_here();
            self.values[i].store(value ^ seal(key), Ordering::Relaxed);
        }
        // Unchanged, the slot gets its old number back: a reader that began before sees a
        // pair that is still whole.
        let done = if new.is_some() { taken + 1 } else { taken - 1 };
        seq.store(done, Ordering::Release);
        new
    }

    /// The value of `address` (0 included) when its home slot holds it, else noise (a value
    /// sealed with another address, unsealed with this one): the launch path's lookup, one
    /// load and an xor with the product that picked the slot, no sequence number and no
    /// comparison. An address past its home slot, in a neighbourhood it shares, is looked
    /// up with [`get`](Self::get) on the slow path.
    #[inline(always)]
    pub fn get_at_home(&self, address: usize) -> u64 {
        let sealed = seal(address);
        let i = (sealed >> (64 - N.trailing_zeros())) as usize;
        self.values[i].load(Ordering::Relaxed) ^ sealed
    }

    /// The value of `address`, or 0 when not known.
    pub fn get(&self, address: usize) -> u64 {
        let mut i = Self::home(address);
        for _ in 0..PROBES {
            // A slot being written may be this address's: not known this time.
            let Some((k, value)) = self.read(i) else {
                return 0;
            };
            if k == address {
                return value;
            }
            if k == 0 {
                return 0;
            }
            i = (i + 1) & (N - 1);
        }
        0
    }

    /// Sets the value of `address`. Value 0 ("ask again") only overwrites an existing
    /// entry.
    pub fn set(&self, address: usize, value: u64) {
        if address == 0 {
            return;
        }
        let start = Self::home(address);
        let mut i = start;
        for _ in 0..PROBES {
            // A slot that may be this address's or free is decided again with the slot
            // held, so a slot another writer filled meanwhile is seen.
            let candidate = self.read(i).map_or(true, |(k, _)| k == address || k == 0);
            let mut free = false;
            let wrote = candidate
                && self
                    .write(i, |k, _| {
                        free = k == 0;
                        (k == address || (k == 0 && value != 0)).then_some((address, value))
                    })
                    .is_some();
            if wrote || free {
                // Written; or a free slot (past which the address is not) with nothing to
                // forget.
                return;
            }
            i = (i + 1) & (N - 1);
        }
        if value != 0 {
            // Evict the home slot's entry, replacing address and value together.
            self.write(start, |_, _| Some((address, value)));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    thread_local! {
        /// Set by a test that wants a writer preempted between its two stores.
        static YIELD_MID_WRITE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Between a slot's two stores: where a preempted writer leaves a torn pair unless
    /// readers and other writers respect the slot's sequence number.
    pub(super) fn preempted_here() {
        if YIELD_MID_WRITE.with(|y| y.get()) {
            std::thread::yield_now();
        }
    }

    const SLOTS: usize = 1 << 10;

    fn same_home(table_base: usize, n: usize) -> Vec<usize> {
        let target = AddressTable::<SLOTS>::home(table_base);
        (table_base..)
            .step_by(16)
            .filter(|&a| AddressTable::<SLOTS>::home(a) == target)
            .take(n)
            .collect()
    }

    #[test]
    fn a_full_neighbourhood_evicts_and_every_answer_stays_right() {
        // PROBES + 1 addresses with one home slot: the last evicts the first, which then
        // reads as unknown (asked again), never as another's value.
        static T: AddressTable<SLOTS> = AddressTable::new();
        let addrs = same_home(0xF00D_0000, PROBES + 1);
        for (n, &a) in addrs.iter().enumerate() {
            T.set(a, 1000 + n as u64);
        }
        for (n, &a) in addrs.iter().enumerate() {
            let v = T.get(a);
            assert!(v == 0 || v == 1000 + n as u64, "address {n}: {v}");
        }
        assert_eq!(T.get(addrs[PROBES]), 1000 + PROBES as u64);
        assert_eq!(
            T.get_at_home(addrs[PROBES]),
            1000 + PROBES as u64,
            "at home"
        );
        // Past its home slot: the home slot's value unsealed with another address.
        let noise = T.get_at_home(addrs[1]);
        assert!(noise != 1001 && noise != 0, "past home: {noise}");
        assert_eq!(T.get(addrs[0]), 0, "evicted");
        T.set(addrs[0], 7);
        assert_eq!(T.get(addrs[0]), 7, "set again");
        T.set(addrs[0], 0);
        assert_eq!(T.get(addrs[0]), 0, "forgotten");
        T.set(0x1234_5670, 0);
        assert_eq!(T.get(0x1234_5670), 0, "0 never inserts");
    }

    #[test]
    fn racing_evictions_never_pair_an_address_with_another_ones_value() {
        // A neighbourhood full of other objects, and writers whose objects keep evicting
        // its home slot from one another while a reader looks them up: every answer is 0
        // (ask again) or the address's own value, during the race and after it.
        static T: AddressTable<SLOTS> = AddressTable::new();
        const WRITERS: usize = 6;
        const ROUNDS: usize = 5_000;
        let addrs = same_home(0x7A11_0000_0000, PROBES + 2 * WRITERS);
        let own = |a: usize| (a as u64).rotate_left(17) | 1;
        let (fillers, racers) = addrs.split_at(PROBES);
        for &a in fillers {
            T.set(a, own(a));
        }
        let wrong = AtomicU64::new(0);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let (wrong, done) = (&wrong, &done);
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    for &a in racers {
                        let v = T.get(a);
                        if v != 0 && v != own(a) {
                            wrong.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
            // Each writer is preempted between its stores (on a loaded machine the race
            // is real but rare: 130 wrong answers in 63M lookups).
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let mine = &racers[2 * w..2 * w + 2];
                    s.spawn(move || {
                        YIELD_MID_WRITE.with(|y| y.set(true));
                        for r in 0..ROUNDS {
                            let a = mine[r % 2];
                            T.set(a, own(a));
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().unwrap();
            }
            done.store(true, Ordering::Relaxed);
        });
        let after = addrs
            .iter()
            .filter(|&&a| ![0, own(a)].contains(&T.get(a)))
            .count();
        assert_eq!(
            (wrong.load(Ordering::Relaxed), after),
            (0, 0),
            "wrong answers during and after the race"
        );
    }
}
