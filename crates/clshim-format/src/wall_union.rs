//! Wall-clock time covered by intervals that may overlap: first launches run from their
//! enqueue to their completion, so launches enqueued together (or held back by a user
//! event) overlap, and their own seconds add up to more than the process lived. A
//! [`WallUnion`] takes intervals one at a time, mostly in the order they ended, and says
//! how much new wall-clock time each one adds, so every sum of those additions is the
//! union's length, never more than the time the intervals span. It holds a bounded list
//! of disjoint spans. Shared so that the library's exit summary and the `clshim` command's
//! report count overlapping launches by one rule.

/// Disjoint spans kept; beyond them the oldest is retired.
const SPANS: usize = 64;

/// The union of the intervals added so far.
#[derive(Debug, Clone)]
pub struct WallUnion {
    /// Disjoint, sorted by start.
    spans: Vec<(f64, f64)>,
    /// Time before this counts as covered: the end of the spans retired to keep the list
    /// bounded. An interval reaching back past it (one that began before more than
    /// `SPANS` separate stretches of others ended) adds only what lies after it, so the
    /// union may come out short, never long.
    floor: f64,
    total: f64,
}

impl Default for WallUnion {
    fn default() -> WallUnion {
        WallUnion::new()
    }
}

impl WallUnion {
    pub fn new() -> WallUnion {
        WallUnion {
            spans: Vec::new(),
            floor: f64::NEG_INFINITY,
            total: 0.0,
        }
    }

    /// Adds the interval from `start` lasting `seconds`; returns the seconds of it that
    /// no interval added before covers (0 to `seconds`).
    pub fn add(&mut self, start: f64, seconds: f64) -> f64 {
        let end = start + seconds.max(0.0);
        let start = start.max(self.floor);
        if end.is_nan() || end <= start {
            return 0.0;
        }
        // The spans that touch [start, end]: a contiguous run, as they are sorted.
        let first = self.spans.partition_point(|&(_, e)| e < start);
        let last = first + self.spans[first..].partition_point(|&(s, _)| s <= end);
        let mut covered = 0.0;
        let (mut lo, mut hi) = (start, end);
        for &(s, e) in &self.spans[first..last] {
            covered += e.min(end) - s.max(start);
            lo = lo.min(s);
            hi = hi.max(e);
        }
        self.spans.splice(first..last, [(lo, hi)]);
        if self.spans.len() > SPANS {
            let (_, e) = self.spans.remove(0);
            self.floor = e;
        }
        let added = (end - start - covered).max(0.0);
        self.total += added;
        added
    }

    /// The seconds covered by the intervals added so far.
    pub fn total(&self) -> f64 {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_count_once() {
        let mut u = WallUnion::new();
        assert_eq!(u.add(1.0, 2.0), 2.0);
        assert_eq!(u.add(1.5, 3.0), 1.5, "[1.5, 4.5] adds what [1, 3] left");
        assert_eq!(u.add(2.0, 1.0), 0.0, "inside");
        assert_eq!(u.add(10.0, 1.0), 1.0, "apart");
        assert_eq!(u.add(0.0, 12.0), 7.5, "covers the gaps and both ends");
        assert_eq!(u.total(), 12.0);
        assert_eq!(u.add(5.0, 0.0), 0.0);
        assert_eq!(u.add(f64::NAN, 1.0), 0.0);
    }

    #[test]
    fn many_concurrent_launches_never_exceed_their_span() {
        // 96 launches enqueued within a second, each completing seconds later.
        let mut u = WallUnion::new();
        let own: f64 = (0..96)
            .map(|i| {
                let (s, d) = (i as f64 * 0.01, 3.0 + i as f64 * 0.01);
                u.add(s, d);
                d
            })
            .sum();
        assert!(own > 300.0);
        assert!((u.total() - (0.95 + 3.95)).abs() < 1e-9, "{}", u.total());
    }

    #[test]
    fn the_list_stays_bounded_and_the_union_never_grows_past_the_span() {
        let mut u = WallUnion::new();
        for i in 0..1000 {
            u.add(i as f64, 0.5);
        }
        assert!(u.spans.len() <= SPANS);
        assert_eq!(u.total(), 500.0);
        // One reaching back over all of them adds at most what the retired spans left.
        let added = u.add(-10.0, 2000.0);
        assert!(u.total() <= 2000.0 && added <= 1500.0, "{}", u.total());
    }
}
