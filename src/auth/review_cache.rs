//! A bounded cache of review answers with time-to-live, where concurrent
//! askers of the same question share one review.
//!
//! The API server's webhook authenticator and authorizer cache answers the
//! same way: an allowed decision lives longer than a denied one, and the
//! size is bounded. On top of that, a thousand watches of one kubelet that
//! arrive together must cost one review, not a thousand: the first asker
//! runs the review and the others wait for its answer. If the asker is
//! cancelled (its client went away), the next waiter takes over.
//!
//! Clients choose the questions (every selector is part of one), so the
//! cache is bounded in bytes as well as in entries, and its keys are
//! digests of fixed size ([`digest`]): a 60 KB selector costs 32 bytes
//! here, not 60 KB. Expired answers are freed by a sweep at most every
//! [`SWEEP_INTERVAL`], run by whichever lookup finds it due, not only when
//! the cache is full.
//!
//! A failed review (the upstream unreachable) is not cached: the next asker
//! tries again. Entries that are still fresh keep answering meanwhile, so
//! known identities ride out an upstream outage until their entries expire.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::metrics as m;

/// How often expired answers are swept out at most. Short beside the TTLs
/// (10 s to 5 min), so an expired answer outlives its TTL by this at most
/// while requests arrive.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(5);

/// A cache key: the SHA-256 of the question.
pub(crate) type Digest = [u8; 32];

/// The SHA-256 of `parts`, each length-prefixed so that no two different
/// sequences of parts share a digest by concatenation.
pub(crate) fn digest<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Digest {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part);
    }
    ctx.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// Heap bytes a cached answer holds beyond its own size, for the byte bound.
pub(crate) trait Weigh {
    fn heap_bytes(&self) -> usize;
}

impl<T: Weigh> Weigh for Option<T> {
    fn heap_bytes(&self) -> usize {
        self.as_ref().map_or(0, T::heap_bytes)
    }
}

impl<T: Weigh> Weigh for Arc<T> {
    fn heap_bytes(&self) -> usize {
        std::mem::size_of::<T>() + T::heap_bytes(self)
    }
}

/// How much a cache may hold: answered entries and their bytes, fixed
/// costs (key, slot, map entry) included.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub entries: usize,
    pub bytes: usize,
}

/// How an answer was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A fresh cached answer.
    Hit,
    /// This asker ran the review.
    Miss,
    /// Another asker's review, in flight when this one arrived.
    Coalesced,
}

impl Lookup {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Coalesced => "coalesced",
        }
    }
}

struct Answer<V> {
    value: V,
    expires: Instant,
    /// What this entry counts for in [`ReviewCache::bytes`].
    bytes: usize,
}

type Slot<V> = Arc<OnceCell<Answer<V>>>;

/// The cache. `K` is the whole question (who asks what), or its digest; `V`
/// the answer.
pub(crate) struct ReviewCache<K, V> {
    slots: DashMap<K, Slot<V>>,
    bounds: Bounds,
    /// Bytes of the answered entries in `slots`: added when an answer is
    /// stored, taken away when its entry leaves the map.
    bytes: AtomicUsize,
    /// When expired answers were last swept out.
    last_sweep: parking_lot::Mutex<Instant>,
    /// The `cache` label of the size metrics.
    name: &'static str,
}

impl<K, V> ReviewCache<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone + Weigh,
{
    pub(crate) fn new(name: &'static str, bounds: Bounds) -> Self {
        Self {
            slots: DashMap::new(),
            bounds: Bounds { entries: bounds.entries.max(1), bytes: bounds.bytes },
            bytes: AtomicUsize::new(0),
            last_sweep: parking_lot::Mutex::new(Instant::now()),
            name,
        }
    }

    /// The answer to `key`: cached while fresh, else from `review`, shared
    /// with every concurrent asker. `ttl` says how long an answer stays
    /// fresh (a zero TTL answers this round of askers and no later one).
    pub(crate) async fn get_or_review<E, Fut>(
        &self,
        key: &K,
        ttl: impl FnOnce(&V) -> Duration,
        review: impl FnOnce() -> Fut,
    ) -> Result<(V, Lookup), E>
    where
        Fut: Future<Output = Result<V, E>>,
    {
        let now = Instant::now();
        self.sweep_if_due(now);
        let slot = self.slot(key, now);
        if let Some(answer) = slot.get() {
            return Ok((answer.value.clone(), Lookup::Hit));
        }
        let mut ran = false;
        let answer = slot
            .get_or_try_init(|| {
                ran = true;
                async move {
                    let value = review().await?;
                    let expires = Instant::now() + ttl(&value);
                    let bytes = Self::entry_bytes(&value);
                    // Counted before the answer is visible, so that an
                    // eviction, which only takes answered entries, never
                    // subtracts what was not yet added.
                    self.bytes.fetch_add(bytes, Ordering::Relaxed);
                    Ok(Answer { value, expires, bytes })
                }
            })
            .await?;
        if ran {
            self.evict_if_over(Instant::now());
            self.record_size();
        }
        Ok((answer.value.clone(), if ran { Lookup::Miss } else { Lookup::Coalesced }))
    }

    /// What one answered entry costs: the key, the slot and its allocation,
    /// a map entry's pointer, and the answer's own heap.
    fn entry_bytes(value: &V) -> usize {
        std::mem::size_of::<K>()
            + std::mem::size_of::<Slot<V>>()
            + 2 * std::mem::size_of::<usize>() // the Arc's counts
            + std::mem::size_of::<OnceCell<Answer<V>>>()
            + value.heap_bytes()
    }

    /// The slot for `key`, replacing an expired answer with an empty slot.
    fn slot(&self, key: &K, now: Instant) -> Slot<V> {
        if let Some(slot) = self.slots.get(key)
            && slot.get().is_none_or(|a| a.expires > now)
        {
            return slot.clone();
        }
        match self.slots.entry(key.clone()) {
            Entry::Occupied(mut e) => {
                if let Some(expired) = e.get().get().filter(|a| a.expires <= now) {
                    self.bytes.fetch_sub(expired.bytes, Ordering::Relaxed);
                    e.insert(Arc::new(OnceCell::new()));
                }
                e.get().clone()
            }
            Entry::Vacant(e) => e.insert(Arc::new(OnceCell::new())).clone(),
        }
    }

    /// Frees expired answers, at most once per [`SWEEP_INTERVAL`]; a lookup
    /// that finds another sweeping goes on without waiting.
    fn sweep_if_due(&self, now: Instant) {
        let Some(mut last) = self.last_sweep.try_lock() else { return };
        if now.duration_since(*last) < SWEEP_INTERVAL {
            return;
        }
        *last = now;
        drop(last);
        self.remove_answered(|answer| answer.expires <= now, usize::MAX);
        self.record_size();
    }

    /// Keeps the cache within its bounds: expired answers go first, then
    /// answered entries in map order (never a review still in flight, so
    /// its waiters keep sharing it), down to nine tenths of each bound so
    /// that a full cache does not scan on every insert.
    fn evict_if_over(&self, now: Instant) {
        if !self.is_over(1, 1) {
            return;
        }
        self.remove_answered(|answer| answer.expires <= now, usize::MAX);
        while self.is_over(9, 10) {
            let excess_entries = self.slots.len().saturating_sub(self.bounds.entries / 10 * 9);
            // At least one entry per pass, about enough for the bytes.
            let mean = self.bytes.load(Ordering::Relaxed) / self.slots.len().max(1);
            let excess_bytes = self.bytes.load(Ordering::Relaxed).saturating_sub(self.bounds.bytes / 10 * 9);
            let excess = excess_entries.max(excess_bytes / mean.max(1)).max(1);
            if self.remove_answered(|_| true, excess) == 0 {
                return; // only reviews in flight are left
            }
        }
    }

    fn is_over(&self, num: usize, den: usize) -> bool {
        self.slots.len() > self.bounds.entries / den * num
            || self.bytes.load(Ordering::Relaxed) > self.bounds.bytes / den * num
    }

    /// Removes up to `limit` answered entries that `doomed` picks, and
    /// their bytes; returns how many went.
    fn remove_answered(&self, doomed: impl Fn(&Answer<V>) -> bool, limit: usize) -> usize {
        let mut removed = 0;
        self.slots.retain(|_, slot| match slot.get() {
            Some(answer) if removed < limit && doomed(answer) => {
                removed += 1;
                self.bytes.fetch_sub(answer.bytes, Ordering::Relaxed);
                false
            }
            _ => true,
        });
        removed
    }

    fn record_size(&self) {
        metrics::gauge!(m::AUTH_CACHE_ENTRIES, "cache" => self.name).set(self.slots.len() as f64);
        metrics::gauge!(m::AUTH_CACHE_BYTES, "cache" => self.name).set(self.bytes() as f64);
    }

    /// Bytes the answered entries hold, as bounded.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    impl Weigh for bool {
        fn heap_bytes(&self) -> usize {
            0
        }
    }

    impl Weigh for String {
        fn heap_bytes(&self) -> usize {
            self.capacity()
        }
    }

    fn bounds(entries: usize) -> Bounds {
        Bounds { entries, bytes: usize::MAX }
    }

    async fn ask(cache: &ReviewCache<u32, bool>, key: u32, answer: bool, calls: &AtomicUsize) -> (bool, Lookup) {
        cache
            .get_or_review::<(), _>(
                &key,
                |allowed| if *allowed { TTL } else { TTL / 6 },
                || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Ok(answer)
                },
            )
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn answers_are_cached_until_their_ttl() {
        let cache = ReviewCache::new("test", bounds(16));
        let calls = AtomicUsize::new(0);
        assert_eq!(ask(&cache, 1, true, &calls).await, (true, Lookup::Miss));
        assert_eq!(ask(&cache, 1, false, &calls).await, (true, Lookup::Hit), "the cached answer, not a new review");
        tokio::time::advance(TTL + Duration::from_millis(1)).await;
        assert_eq!(ask(&cache, 1, false, &calls).await, (false, Lookup::Miss), "expired: reviewed again");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_denial_expires_sooner_than_an_allowance() {
        let cache = ReviewCache::new("test", bounds(16));
        let calls = AtomicUsize::new(0);
        ask(&cache, 1, false, &calls).await;
        tokio::time::advance(TTL / 6 + Duration::from_millis(1)).await;
        assert_eq!(ask(&cache, 1, true, &calls).await, (true, Lookup::Miss));
        tokio::time::advance(TTL / 6 + Duration::from_millis(1)).await;
        assert_eq!(ask(&cache, 1, false, &calls).await, (true, Lookup::Hit));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_askers_share_one_review() {
        let cache = Arc::new(ReviewCache::<u32, bool>::new("test", bounds(16)));
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let (cache, calls, gate) = (cache.clone(), calls.clone(), gate.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_review::<(), _>(
                        &7,
                        |_| TTL,
                        || async {
                            calls.fetch_add(1, Ordering::SeqCst);
                            gate.notified().await;
                            Ok(true)
                        },
                    )
                    .await
                    .unwrap()
            }));
        }
        // Let every task reach the slot, then finish the one review.
        tokio::task::yield_now().await;
        while calls.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        gate.notify_one();
        let mut lookups = Vec::new();
        for t in tasks {
            let (allowed, lookup) = t.await.unwrap();
            assert!(allowed);
            lookups.push(lookup);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1, "one review for 100 concurrent askers");
        assert_eq!(lookups.iter().filter(|l| **l == Lookup::Miss).count(), 1);
        assert_eq!(lookups.iter().filter(|l| **l == Lookup::Coalesced).count(), 99);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_review_is_not_cached_but_fresh_answers_keep_serving() {
        let cache = ReviewCache::<u32, bool>::new("test", bounds(16));
        let calls = AtomicUsize::new(0);
        ask(&cache, 1, true, &calls).await;
        let failed = cache.get_or_review(&2, |_| TTL, || async { Err::<bool, _>("upstream down") }).await;
        assert_eq!(failed.unwrap_err(), "upstream down");
        // The known identity still answers from the cache during the outage.
        let known = cache.get_or_review(&1, |_| TTL, || async { Err::<bool, _>("upstream down") }).await;
        assert_eq!(known.unwrap(), (true, Lookup::Hit));
        // And the failed question is asked again once the upstream is back.
        assert_eq!(ask(&cache, 2, true, &calls).await, (true, Lookup::Miss));
        // Until the known entry expires: then it fails closed like a new one.
        tokio::time::advance(TTL + Duration::from_millis(1)).await;
        let expired = cache.get_or_review(&1, |_| TTL, || async { Err::<bool, _>("upstream down") }).await;
        assert!(expired.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_asker_hands_the_review_to_the_next() {
        let cache = Arc::new(ReviewCache::<u32, bool>::new("test", bounds(16)));
        let first = {
            let cache = cache.clone();
            tokio::spawn(async move {
                cache.get_or_review::<(), _>(&1, |_| TTL, std::future::pending::<Result<bool, ()>>).await
            })
        };
        tokio::task::yield_now().await;
        first.abort();
        let _ = first.await;
        let calls = AtomicUsize::new(0);
        assert_eq!(ask(&cache, 1, true, &calls).await, (true, Lookup::Miss));
    }

    #[tokio::test(start_paused = true)]
    async fn size_stays_bounded() {
        let cache = ReviewCache::new("test", bounds(100));
        let calls = AtomicUsize::new(0);
        for key in 0..1000 {
            ask(&cache, key, true, &calls).await;
            assert!(cache.len() <= 100, "len {} at key {key}", cache.len());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1000);
    }

    #[tokio::test(start_paused = true)]
    async fn large_answers_are_bounded_in_bytes_not_only_in_entries() {
        const BOUND: usize = 64 * 1024;
        let cache = ReviewCache::<u32, String>::new("test", Bounds { entries: 10_000, bytes: BOUND });
        for key in 0..1000 {
            let answer = "x".repeat(4096);
            let (got, lookup) = cache.get_or_review(&key, |_| TTL, || async { Ok::<_, ()>(answer) }).await.unwrap();
            assert_eq!((got.len(), lookup), (4096, Lookup::Miss));
            assert!(cache.bytes() <= BOUND, "{} bytes at key {key}", cache.bytes());
        }
        assert!((10..=16).contains(&cache.len()), "about 64 KiB of 4 KiB answers: {}", cache.len());
    }

    #[tokio::test(start_paused = true)]
    async fn expired_answers_are_freed_without_the_cache_filling_up() {
        let cache = ReviewCache::new("test", bounds(10_000));
        let calls = AtomicUsize::new(0);
        for key in 0..100 {
            ask(&cache, key, true, &calls).await;
        }
        let full = cache.bytes();
        assert_eq!(cache.len(), 100);
        tokio::time::advance(TTL + SWEEP_INTERVAL).await;
        ask(&cache, 1000, true, &calls).await;
        assert_eq!(cache.len(), 1, "only the new answer is left");
        assert_eq!(cache.bytes() * 100, full, "and the bytes of the others are given back");
    }

    #[test]
    fn digests_keep_parts_apart() {
        assert_ne!(digest([b"ab".as_slice(), b"c"]), digest([b"a".as_slice(), b"bc"]));
        assert_eq!(digest([b"ab".as_slice(), b"c"]), digest([b"ab".as_slice(), b"c"]));
    }
}
