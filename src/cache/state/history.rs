//! The ring-buffer history of events with the API server's dynamic capacity.
//!
//! A watch that resumes from resourceVersion N is served from here: every buffered event after N,
//! provided the buffer still reaches back to N. The rules are kube-apiserver's watch cache
//! (`watchCacheHistory` in `k8s.io/apiserver/pkg/storage/cacher`): the capacity starts at 100 and
//! moves by powers of two, doubling while a full buffer spans less than the events-history window
//! and halving once its newest quarter has aged out of it, so the buffer holds about one window of
//! history. A watch from an RV the buffer can no longer bridge gets the API server's own error.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// The API server's default events-history window (`DefaultEventFreshDuration`: the one-minute
/// bookmark frequency plus 15 s).
pub(crate) const DEFAULT_WINDOW: Duration = Duration::from_secs(75);

/// The capacity a history starts at and never shrinks below (`defaultLowerBoundCapacity`).
pub(crate) const LOWER_BOUND: usize = 100;

/// The upper bound for windows up to [`DEFAULT_WINDOW`] (`defaultUpperBoundCapacity`).
const DEFAULT_UPPER_BOUND: usize = 100 * 1024;

/// The API server keeps the upper bound within an `int32`: 102400 << 14 is the largest that fits.
const MAX_UPPER_BOUND_EXPONENT: u32 = 14;

/// The most events a history with this window may hold (`capacityUpperBound`): 102400 for windows
/// up to 75 s; beyond that 102400 times window / 75 s rounded up to a power of two, at most 2^14.
pub(crate) fn upper_bound(window: Duration) -> usize {
    // The smallest exponent with 75 s << exponent >= window: the API server's
    // ceil(log2(window / 75 s)), computed exactly in integers instead of floating point.
    let mut exponent = 0;
    while exponent < MAX_UPPER_BOUND_EXPONENT && DEFAULT_WINDOW.as_nanos() << exponent < window.as_nanos() {
        exponent += 1;
    }
    DEFAULT_UPPER_BOUND << exponent
}

/// A watch asked to resume from an RV older than the history can bridge. The API server answers it
/// with 410 `Expired` and exactly this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("too old resource version: {requested} ({oldest})")]
pub(crate) struct TooOld {
    /// The RV the watch asked to start from.
    pub requested: u64,
    /// The oldest RV a watch could still start from, [`History::oldest_bridgeable_rv`]. This is
    /// what the API server prints: one below the oldest event it can still deliver.
    pub oldest: u64,
}

#[derive(Debug)]
struct Entry<E> {
    rv: u64,
    recorded: Instant,
    event: E,
}

/// The recent watch events of one resource, oldest first, with the API server's capacity rules.
#[derive(Debug)]
pub(crate) struct History<E> {
    /// At most `capacity` events, RVs strictly increasing; the allocation follows `capacity`.
    events: VecDeque<Entry<E>>,
    capacity: usize,
    upper_bound: usize,
    window: Duration,
    /// The RV of the state the buffer started from: the LIST, or the relist given to `reset`.
    start_rv: u64,
    /// Whether an event was dropped since `start_rv` (`removedEventSinceRelist`).
    evicted: bool,
    /// Open ranges (after, before) of versions the cache never saw one by
    /// one: a relist jumped from `after` to `before`. A client may hold a
    /// version inside one from the upstream itself, and nobody knows which of
    /// the relist's changes came after it, so a watch from it gets 410.
    unobserved: Vec<(u64, u64)>,
}

impl<E> History<E> {
    /// An empty history that can bridge any RV >= `start_rv` (the RV of the LIST it starts from).
    ///
    /// `window` is the events-history window (`--events-history-window`); it sets the upper bound
    /// (see [`upper_bound`]) and decides when the capacity doubles or halves.
    pub(crate) fn new(window: Duration, start_rv: u64) -> Self {
        History {
            events: VecDeque::with_capacity(LOWER_BOUND),
            capacity: LOWER_BOUND,
            upper_bound: upper_bound(window),
            window,
            start_rv,
            evicted: false,
            unobserved: Vec::new(),
        }
    }

    /// Records that the cache jumped from `after` to `before` without seeing
    /// the versions in between (a relist). Watches from inside are refused.
    pub(crate) fn mark_unobserved(&mut self, after: u64, before: u64) {
        if before > after.saturating_add(1) {
            self.unobserved.push((after, before));
        }
    }

    /// Appends an event recorded at `at` (tokio::time::Instant, so tests can use paused time),
    /// resizing first as the API server does, then evicting the oldest event if still full.
    ///
    /// `rv` must be greater than [`newest_rv`](Self::newest_rv): `since` relies on the order.
    pub(crate) fn push(&mut self, rv: u64, at: Instant, event: E) {
        debug_assert!(rv > self.newest_rv(), "RV {rv} pushed after RV {}", self.newest_rv());
        self.resize_before_push(at);
        if self.is_full() {
            self.events.pop_front();
            self.evicted = true;
            // A gap wholly below what the buffer bridges is refused anyway.
            let oldest = self.oldest_bridgeable_rv();
            self.unobserved.retain(|(_, before)| *before > oldest);
        }
        self.events.push_back(Entry { rv, recorded: at, event });
    }

    /// Every buffered event with RV > `rv`, oldest first; Err(TooOld) when the buffer cannot bridge
    /// `rv`, that is when `rv` < [`oldest_bridgeable_rv`](Self::oldest_bridgeable_rv).
    ///
    /// An `rv` at or beyond [`newest_rv`](Self::newest_rv) yields nothing; waiting for the cache
    /// to catch up is the caller's business.
    pub(crate) fn since(&self, rv: u64) -> Result<impl ExactSizeIterator<Item = &E> + '_, TooOld> {
        let oldest = self.oldest_bridgeable_rv();
        if rv < oldest {
            return Err(TooOld { requested: rv, oldest });
        }
        if let Some(&(_, before)) = self.unobserved.iter().find(|(after, before)| *after < rv && rv < *before) {
            return Err(TooOld { requested: rv, oldest: before });
        }
        let first = self.events.partition_point(|entry| entry.rv <= rv);
        Ok(self.events.range(first..).map(|entry| &entry.event))
    }

    /// The buffered events after ring position `position`, oldest first, each with its RV;
    /// Err(TooOld) once the events right after it were evicted (or a reset started the buffer
    /// over past it).
    ///
    /// A position is not a version a client brought: it is one the cache itself delivered or
    /// passed over (a watcher reading the ring, see `resource/ring_read.rs`), so a
    /// relist's gap is no reason to refuse it, unlike in [`since`](Self::since): everything
    /// after the position is here, in the order watchers were offered it.
    pub(crate) fn after_position(&self, position: u64) -> Result<impl Iterator<Item = (u64, &E)> + '_, TooOld> {
        let oldest = self.oldest_bridgeable_rv();
        if position < oldest {
            return Err(TooOld { requested: position, oldest });
        }
        let first = self.events.partition_point(|entry| entry.rv <= position);
        Ok(self.events.range(first..).map(|entry| (entry.rv, &entry.event)))
    }

    /// Forget everything and start again from `start_rv` (after a relist); capacity is kept.
    pub(crate) fn reset(&mut self, start_rv: u64) {
        self.events.clear();
        self.start_rv = start_rv;
        self.evicted = false;
        self.unobserved.clear();
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The RV of the newest event, or the start RV when empty.
    pub(crate) fn newest_rv(&self) -> u64 {
        self.events.back().map_or(self.start_rv, |entry| entry.rv)
    }

    /// The oldest RV a watch can start from: the start RV until the first event is dropped, then
    /// one below the oldest buffered event (`oldest - 1` in the API server's `GetIntervalLocked`).
    pub(crate) fn oldest_bridgeable_rv(&self) -> u64 {
        match self.events.front() {
            // Once an event has been dropped the buffer is never empty again until `reset`.
            Some(oldest) if self.evicted => oldest.rv.saturating_sub(1),
            _ => self.start_rv,
        }
    }

    fn is_full(&self) -> bool {
        self.events.len() >= self.capacity
    }

    /// `resizeCacheLocked`: only a full buffer is resized, and one whose oldest event is still
    /// inside the window is never halved, even when it cannot grow any more.
    fn resize_before_push(&mut self, at: Instant) {
        if !self.is_full() {
            return;
        }
        if is_inside_window(at, self.events[0].recorded, self.window) {
            let grown = (self.capacity * 2).min(self.upper_bound);
            if grown > self.capacity {
                self.set_capacity(grown);
            }
            return;
        }
        // The oldest event of the newest quarter: once even it has aged out, so have the three
        // quarters before it, and halving drops only stale events.
        let quarter = &self.events[self.events.len() - self.capacity / 4];
        if is_past_window(at, quarter.recorded, self.window) {
            let halved = (self.capacity / 2).max(LOWER_BOUND);
            if halved < self.capacity {
                self.set_capacity(halved);
            }
        }
    }

    fn set_capacity(&mut self, capacity: usize) {
        let len = self.events.len();
        if capacity < len {
            self.events.drain(..len - capacity);
            // The API server marks this in the eviction that always follows a halving; one call to
            // `push` covers both, so the result is the same.
            self.evicted = true;
        }
        if capacity < self.events.capacity() {
            self.events.shrink_to(capacity);
        } else {
            self.events.reserve_exact(capacity - self.events.len());
        }
        self.capacity = capacity;
    }
}

/// `at - recorded < window`, also when `at` is earlier than `recorded` (a negative `time.Duration`
/// in the API server).
fn is_inside_window(at: Instant, recorded: Instant, window: Duration) -> bool {
    recorded.checked_add(window).is_none_or(|end| at < end)
}

/// `at - recorded > window`, also when `at` is earlier than `recorded`.
fn is_past_window(at: Instant, recorded: Instant, window: Duration) -> bool {
    recorded.checked_add(window).is_some_and(|end| at > end)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const SEC: Duration = Duration::from_secs(1);
    const NANO: Duration = Duration::from_nanos(1);

    /// Pushes `n` events after the newest, each carrying its own RV, all recorded at `at`.
    fn push_burst(history: &mut History<u64>, n: u64, at: Instant) {
        let newest = history.newest_rv();
        for rv in newest + 1..=newest + n {
            history.push(rv, at, rv);
        }
    }

    fn rvs_since(history: &History<u64>, rv: u64) -> Vec<u64> {
        history.since(rv).expect("bridgeable").copied().collect()
    }

    /// A full history of capacity 200 holding RVs 1..=200: 1..=`stale` at `t0`, the rest 50 s later.
    fn full_200(t0: Instant, stale: u64) -> History<u64> {
        let mut history = History::new(DEFAULT_WINDOW, 0);
        push_burst(&mut history, stale, t0);
        push_burst(&mut history, 200 - stale, t0 + 50 * SEC);
        assert_eq!((history.capacity(), history.len()), (200, 200));
        history
    }

    #[test]
    fn upper_bound_is_102400_for_windows_up_to_75s() {
        for window in [Duration::ZERO, SEC, 60 * SEC, DEFAULT_WINDOW] {
            assert_eq!(upper_bound(window), 102_400, "{window:?}");
        }
    }

    #[test]
    fn upper_bound_doubles_for_a_150s_window() {
        assert_eq!(upper_bound(150 * SEC), 204_800);
        assert_eq!(upper_bound(76 * SEC), 204_800);
    }

    #[test]
    fn upper_bound_rounds_the_window_ratio_up_to_a_power_of_two() {
        assert_eq!(upper_bound(200 * SEC), 409_600);
        assert_eq!(upper_bound(150 * SEC + NANO), 409_600);
        assert_eq!(upper_bound(300 * SEC), 409_600);
    }

    #[test]
    fn upper_bound_is_capped_to_fit_an_int32() {
        assert_eq!(upper_bound(DEFAULT_WINDOW * (1 << 14)), 102_400 << 14);
        assert_eq!(upper_bound(DEFAULT_WINDOW * (1 << 14) + NANO), 102_400 << 14);
        assert_eq!(upper_bound(Duration::MAX), 102_400 << 14);
        assert!((102_400_i64 << 14) <= i64::from(i32::MAX));
    }

    #[test]
    fn new_history_is_empty_at_the_lower_bound() {
        let history: History<u64> = History::new(DEFAULT_WINDOW, 7);
        assert_eq!((history.capacity(), history.len(), history.is_empty()), (100, 0, true));
        assert_eq!((history.newest_rv(), history.oldest_bridgeable_rv()), (7, 7));
    }

    #[tokio::test(start_paused = true)]
    async fn full_buffer_doubles_when_its_oldest_event_is_inside_the_window() {
        let mut history = History::new(DEFAULT_WINDOW, 0);
        push_burst(&mut history, 100, Instant::now());
        assert_eq!((history.capacity(), history.len()), (100, 100));

        tokio::time::advance(75 * SEC - NANO).await;
        push_burst(&mut history, 1, Instant::now());
        assert_eq!((history.capacity(), history.len()), (200, 101));
        assert_eq!(history.oldest_bridgeable_rv(), 0, "nothing was evicted");
    }

    #[test]
    fn full_buffer_does_not_grow_when_its_oldest_event_is_exactly_one_window_old() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 0);
        push_burst(&mut history, 100, t0);
        push_burst(&mut history, 1, t0 + DEFAULT_WINDOW);
        assert_eq!((history.capacity(), history.len()), (100, 100));
        assert_eq!(history.oldest_bridgeable_rv(), 1, "RV 1 was evicted");
    }

    #[tokio::test(start_paused = true)]
    async fn burst_inside_the_window_doubles_up_to_the_upper_bound() {
        let mut history = History::new(DEFAULT_WINDOW, 0);
        let mut capacities = vec![history.capacity()];
        for rv in 1..=110_000 {
            history.push(rv, Instant::now(), rv);
            if history.capacity() != *capacities.last().unwrap() {
                capacities.push(history.capacity());
            }
        }
        let expected: Vec<usize> = (0..=10).map(|doublings| 100 << doublings).collect();
        assert_eq!(capacities, expected);
        assert_eq!(history.len(), 102_400);
        assert_eq!(history.oldest_bridgeable_rv(), 110_000 - 102_400);
    }

    #[test]
    fn burst_with_a_150s_window_doubles_up_to_204800() {
        let mut history = History::new(150 * SEC, 0);
        push_burst(&mut history, 210_000, Instant::now());
        assert_eq!((history.capacity(), history.len()), (204_800, 204_800));
    }

    #[test]
    fn full_buffer_of_stale_events_halves_and_drops_the_oldest_half() {
        let t0 = Instant::now();
        let mut history = full_200(t0, 200);
        push_burst(&mut history, 1, t0 + 76 * SEC);
        assert_eq!((history.capacity(), history.len()), (100, 100));
        // 1..=100 went with the halving, 101 to make room for 201.
        assert_eq!(history.oldest_bridgeable_rv(), 101);
        assert_eq!(rvs_since(&history, 101), (102..=201).collect::<Vec<_>>());
    }

    #[test]
    fn halving_needs_the_quarter_event_strictly_older_than_the_window() {
        let t0 = Instant::now();
        let mut history = full_200(t0, 200);
        push_burst(&mut history, 1, t0 + DEFAULT_WINDOW);
        assert_eq!(history.capacity(), 200);
        push_burst(&mut history, 1, t0 + DEFAULT_WINDOW + NANO);
        assert_eq!(history.capacity(), 100);
    }

    #[test]
    fn halving_looks_at_the_oldest_event_of_the_newest_quarter() {
        let t0 = Instant::now();
        // Index 200 - 200/4 = 150, RV 151, is 30 s old: the buffer keeps its size.
        let mut history = full_200(t0, 150);
        push_burst(&mut history, 1, t0 + 80 * SEC);
        assert_eq!(history.capacity(), 200);
        // RV 151 is 80 s old, though RVs 152..=200 are still fresh: the buffer halves.
        let mut history = full_200(t0, 151);
        push_burst(&mut history, 1, t0 + 80 * SEC);
        assert_eq!(history.capacity(), 100);
    }

    #[test]
    fn stale_buffer_halves_once_per_push_and_never_below_the_lower_bound() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 0);
        push_burst(&mut history, 400, t0);
        assert_eq!(history.capacity(), 400);
        let capacities: Vec<usize> = (1..=4)
            .map(|i| {
                push_burst(&mut history, 1, t0 + 1000 * i * SEC);
                history.capacity()
            })
            .collect();
        assert_eq!(capacities, [200, 100, 100, 100]);
        assert_eq!(history.len(), 100);
    }

    #[test]
    fn empty_history_bridges_its_start_rv_and_nothing_older() {
        let history: History<u64> = History::new(DEFAULT_WINDOW, 10);
        assert_eq!(history.since(10).unwrap().len(), 0);
        assert_eq!(history.since(u64::MAX).unwrap().len(), 0);
        let err = history.since(9).err().unwrap();
        assert_eq!(err, TooOld { requested: 9, oldest: 10 });
        assert_eq!(err.to_string(), "too old resource version: 9 (10)");
    }

    #[test]
    fn a_ring_position_is_read_across_a_relist_gap_until_its_next_event_is_evicted() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 10);
        push_burst(&mut history, 5, t0);
        history.mark_unobserved(12, 20);
        // A client's version inside the gap is refused; the cache's own position is not.
        assert!(history.since(13).is_err());
        let after: Vec<u64> = history.after_position(13).unwrap().map(|(rv, _)| rv).collect();
        assert_eq!(after, [14, 15]);
        // 100 more events evict RVs 11..=15: positions up to 14 lost their next event.
        push_burst(&mut history, 100, t0 + 80 * SEC);
        assert_eq!(history.oldest_bridgeable_rv(), 15);
        assert_eq!(history.after_position(14).err(), Some(TooOld { requested: 14, oldest: 15 }));
        assert_eq!(history.after_position(15).unwrap().next().map(|(rv, _)| rv), Some(16));
    }

    #[test]
    fn before_any_eviction_the_start_rv_stays_bridgeable() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 10);
        history.push(20, t0, 20);
        history.push(30, t0, 30);
        assert_eq!(history.oldest_bridgeable_rv(), 10);
        assert_eq!(rvs_since(&history, 10), [20, 30]);
        assert_eq!(rvs_since(&history, 15), [20, 30]);
        assert_eq!(rvs_since(&history, 20), [30]);
        assert!(history.since(9).is_err());
    }

    #[test]
    fn after_eviction_one_below_the_oldest_buffered_rv_is_bridgeable_and_two_below_is_too_old() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 1000);
        // One a second: when the 101st arrives the oldest is 100 s old, so RV 1001 is evicted.
        for (i, rv) in (1001..=1101).enumerate() {
            history.push(rv, t0 + i as u32 * SEC, rv);
        }
        assert_eq!((history.capacity(), history.len()), (100, 100));
        assert_eq!(history.oldest_bridgeable_rv(), 1001);
        assert_eq!(rvs_since(&history, 1001), (1002..=1101).collect::<Vec<_>>());
        let err = history.since(1000).err().unwrap();
        assert_eq!(err.to_string(), "too old resource version: 1000 (1001)");
    }

    #[test]
    fn after_eviction_with_rv_gaps_the_evicted_rv_itself_is_too_old() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 0);
        for i in 0..=100 {
            history.push(10 * (i + 1), t0 + i as u32 * SEC, 10 * (i + 1));
        }
        // RV 10 was evicted; the oldest buffered is 20, so the floor is 19, not 10.
        assert_eq!(history.oldest_bridgeable_rv(), 19);
        assert_eq!(history.since(19).unwrap().len(), 100);
        assert_eq!(history.since(18).err(), Some(TooOld { requested: 18, oldest: 19 }));
        assert_eq!(history.since(10).err(), Some(TooOld { requested: 10, oldest: 19 }));
    }

    #[test]
    fn since_the_newest_rv_or_later_yields_nothing() {
        let mut history = History::new(DEFAULT_WINDOW, 0);
        push_burst(&mut history, 50, Instant::now());
        assert_eq!(history.newest_rv(), 50);
        assert_eq!(history.since(50).unwrap().len(), 0);
        assert_eq!(history.since(51).unwrap().len(), 0);
        assert_eq!(rvs_since(&history, 47), [48, 49, 50]);
    }

    #[test]
    fn reset_forgets_events_keeps_capacity_and_bridges_from_the_new_start() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 0);
        push_burst(&mut history, 150, t0);
        push_burst(&mut history, 100, t0 + 100 * SEC);
        assert_eq!((history.capacity(), history.oldest_bridgeable_rv()), (200, 50));

        history.reset(5000);
        assert_eq!((history.capacity(), history.len(), history.is_empty()), (200, 0, true));
        assert_eq!((history.newest_rv(), history.oldest_bridgeable_rv()), (5000, 5000));
        assert_eq!(history.since(5000).unwrap().len(), 0);
        assert_eq!(history.since(4999).err(), Some(TooOld { requested: 4999, oldest: 5000 }));

        history.push(5007, t0 + 101 * SEC, 5007);
        assert_eq!(rvs_since(&history, 5000), [5007]);
    }

    #[test]
    fn halving_releases_memory() {
        let t0 = Instant::now();
        let mut history = History::new(DEFAULT_WINDOW, 0);
        push_burst(&mut history, 1600, t0);
        assert!(history.events.capacity() >= 1600);
        for i in 1..=4 {
            push_burst(&mut history, 1, t0 + 1000 * i * SEC);
        }
        assert_eq!(history.capacity(), 100);
        assert!(history.events.capacity() < 200, "allocation {}", history.events.capacity());
    }

    /// The API server's index arithmetic over an unbounded log: the ring must behave the same.
    struct Model {
        window: Duration,
        upper: usize,
        capacity: usize,
        log: Vec<(u64, Instant)>,
        start: usize,
        start_rv: u64,
        removed: bool,
    }

    impl Model {
        fn push(&mut self, rv: u64, at: Instant) {
            let end = self.log.len();
            let full = end - self.start == self.capacity;
            if full && at - self.log[self.start].1 < self.window {
                self.capacity = (self.capacity * 2).min(self.upper);
            } else if full && at - self.log[end - self.capacity / 4].1 > self.window {
                let halved = (self.capacity / 2).max(LOWER_BOUND);
                if halved < self.capacity {
                    self.start = end - halved;
                    self.capacity = halved;
                }
            }
            if self.log.len() - self.start == self.capacity {
                self.start += 1;
                self.removed = true;
            }
            self.log.push((rv, at));
        }

        fn buffered(&self) -> &[(u64, Instant)] {
            &self.log[self.start..]
        }

        fn floor(&self) -> u64 {
            if self.removed { self.buffered()[0].0 - 1 } else { self.start_rv }
        }
    }

    /// A run of `count` pushes `gap` apart with RVs `step` apart, or a reset to `step` past the newest.
    #[derive(Debug, Clone)]
    enum Op {
        Pushes { count: usize, gap: Duration, step: u64 },
        Reset { step: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        // Bursts that fill the window, trickles that let it age out, and pauses in between.
        let gap = prop_oneof![
            Just(Duration::ZERO),
            (0u64..100).prop_map(Duration::from_millis),
            (500u64..5_000).prop_map(Duration::from_millis),
            (60_000u64..200_000).prop_map(Duration::from_millis),
        ];
        prop_oneof![
            20 => (1usize..400, gap, 1u64..4).prop_map(|(count, gap, step)| Op::Pushes { count, gap, step }),
            1 => (0u64..4).prop_map(|step| Op::Reset { step }),
        ]
    }

    fn window() -> impl Strategy<Value = Duration> {
        prop_oneof![Just(DEFAULT_WINDOW), Just(150 * SEC), Just(5 * SEC)]
    }

    /// The invariants and bounds of `history` against the model; with `since`, its answers too.
    fn check(history: &History<u64>, model: &Model, since: bool) -> Result<(), TestCaseError> {
        let capacity = history.capacity();
        prop_assert_eq!(capacity, model.capacity);
        prop_assert!((LOWER_BOUND..=model.upper).contains(&capacity));
        prop_assert!(capacity.is_multiple_of(100) && (capacity / 100).is_power_of_two());
        prop_assert!(history.len() <= capacity);
        prop_assert_eq!(history.len(), model.buffered().len());
        prop_assert_eq!(history.is_empty(), model.buffered().is_empty());

        let floor = model.floor();
        prop_assert_eq!(history.oldest_bridgeable_rv(), floor);
        let newest = model.buffered().last().map_or(model.start_rv, |&(rv, _)| rv);
        prop_assert_eq!(history.newest_rv(), newest);
        if !since {
            return Ok(());
        }

        let middle = model.buffered().get(history.len() / 2).map_or(floor, |&(rv, _)| rv);
        for probe in [floor.saturating_sub(1), floor, floor + 1, middle.saturating_sub(1), middle, newest, newest + 1] {
            let expected = model.buffered().iter().map(|&(rv, _)| rv).filter(|&rv| rv > probe);
            match history.since(probe) {
                Ok(events) => {
                    prop_assert!(probe >= floor);
                    prop_assert_eq!(events.len(), expected.clone().count());
                    prop_assert!(events.copied().eq(expected), "since({}) differs", probe);
                }
                Err(err) => {
                    prop_assert!(probe < floor);
                    prop_assert_eq!(err, TooOld { requested: probe, oldest: floor });
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn ring_follows_the_api_server_rules(
            window in window(),
            start_rv in 0u64..1000,
            ops in prop::collection::vec(op(), 0..12),
        ) {
            let mut now = Instant::now();
            let mut history = History::new(window, start_rv);
            let upper = upper_bound(window);
            let mut model = Model {
                window, upper, capacity: LOWER_BOUND, log: Vec::new(), start: 0, start_rv, removed: false,
            };
            for op in ops {
                let count = match op {
                    Op::Pushes { count, .. } => count,
                    Op::Reset { .. } => 1,
                };
                for _ in 0..count {
                    match op {
                        Op::Pushes { gap, step, .. } => {
                            now += gap;
                            let rv = history.newest_rv() + step;
                            history.push(rv, now, rv);
                            model.push(rv, now);
                        }
                        Op::Reset { step } => {
                            let rv = history.newest_rv() + step;
                            history.reset(rv);
                            model.log.clear();
                            model.start = 0;
                            model.start_rv = rv;
                            model.removed = false;
                        }
                    }
                    check(&history, &model, false)?;
                }
                check(&history, &model, true)?;
            }
        }

        #[test]
        fn upper_bound_is_the_smallest_power_of_two_multiple_covering_the_window(millis in 0u64..400_000_000) {
            let window = Duration::from_millis(millis);
            let bound = upper_bound(window);
            prop_assert!(bound.is_multiple_of(102_400));
            let ratio = u32::try_from(bound / 102_400).unwrap();
            prop_assert!(ratio.is_power_of_two());
            prop_assert!(ratio <= 1 << 14);
            if ratio < 1 << 14 {
                prop_assert!(DEFAULT_WINDOW * ratio >= window);
            }
            if ratio > 1 {
                prop_assert!(DEFAULT_WINDOW * (ratio / 2) < window);
            }
        }
    }
}
