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
//! A failed review (the upstream unreachable) is not cached: the next asker
//! tries again. Entries that are still fresh keep answering meanwhile, so
//! known identities ride out an upstream outage until their entries expire.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use tokio::sync::OnceCell;
use tokio::time::Instant;

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
}

type Slot<V> = Arc<OnceCell<Answer<V>>>;

/// The cache. `K` is the whole question (who asks what); `V` the answer.
pub(crate) struct ReviewCache<K, V> {
    slots: DashMap<K, Slot<V>>,
    capacity: usize,
}

impl<K, V> ReviewCache<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    pub(crate) fn new(capacity: usize) -> Self {
        Self { slots: DashMap::new(), capacity: capacity.max(1) }
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
        let (slot, inserted) = self.slot(key, now);
        if let Some(answer) = slot.get() {
            return Ok((answer.value.clone(), Lookup::Hit));
        }
        if inserted {
            self.evict_if_full(now);
        }
        let mut ran = false;
        let answer = slot
            .get_or_try_init(|| {
                ran = true;
                async move {
                    let value = review().await?;
                    let expires = Instant::now() + ttl(&value);
                    Ok(Answer { value, expires })
                }
            })
            .await?;
        Ok((answer.value.clone(), if ran { Lookup::Miss } else { Lookup::Coalesced }))
    }

    /// The slot for `key`, replacing an expired answer with an empty slot.
    fn slot(&self, key: &K, now: Instant) -> (Slot<V>, bool) {
        if let Some(slot) = self.slots.get(key)
            && slot.get().is_none_or(|a| a.expires > now)
        {
            return (slot.clone(), false);
        }
        match self.slots.entry(key.clone()) {
            Entry::Occupied(mut e) => {
                if e.get().get().is_some_and(|a| a.expires <= now) {
                    e.insert(Arc::new(OnceCell::new()));
                    (e.get().clone(), true)
                } else {
                    (e.get().clone(), false)
                }
            }
            Entry::Vacant(e) => (e.insert(Arc::new(OnceCell::new())).clone(), true),
        }
    }

    /// Keeps the cache within its capacity: expired answers go first, then
    /// answered entries in map order (never a review still in flight, so
    /// its waiters keep sharing it).
    fn evict_if_full(&self, now: Instant) {
        if self.slots.len() <= self.capacity {
            return;
        }
        self.slots.retain(|_, slot| slot.get().is_none_or(|a| a.expires > now));
        let mut excess = self.slots.len().saturating_sub(self.capacity);
        if excess == 0 {
            return;
        }
        // Evict about a tenth more than needed, so a full cache does not
        // scan on every insert.
        excess += self.capacity / 10;
        self.slots.retain(|_, slot| {
            if excess > 0 && slot.initialized() {
                excess -= 1;
                false
            } else {
                true
            }
        });
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
        let cache = ReviewCache::new(16);
        let calls = AtomicUsize::new(0);
        assert_eq!(ask(&cache, 1, true, &calls).await, (true, Lookup::Miss));
        assert_eq!(ask(&cache, 1, false, &calls).await, (true, Lookup::Hit), "the cached answer, not a new review");
        tokio::time::advance(TTL + Duration::from_millis(1)).await;
        assert_eq!(ask(&cache, 1, false, &calls).await, (false, Lookup::Miss), "expired: reviewed again");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_denial_expires_sooner_than_an_allowance() {
        let cache = ReviewCache::new(16);
        let calls = AtomicUsize::new(0);
        ask(&cache, 1, false, &calls).await;
        tokio::time::advance(TTL / 6 + Duration::from_millis(1)).await;
        assert_eq!(ask(&cache, 1, true, &calls).await, (true, Lookup::Miss));
        tokio::time::advance(TTL / 6 + Duration::from_millis(1)).await;
        assert_eq!(ask(&cache, 1, false, &calls).await, (true, Lookup::Hit));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_askers_share_one_review() {
        let cache = Arc::new(ReviewCache::<u32, bool>::new(16));
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
        let cache = ReviewCache::<u32, bool>::new(16);
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
        let cache = Arc::new(ReviewCache::<u32, bool>::new(16));
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
        let cache = ReviewCache::new(100);
        let calls = AtomicUsize::new(0);
        for key in 0..1000 {
            ask(&cache, key, true, &calls).await;
            assert!(cache.len() <= 101, "len {} at key {key}", cache.len());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1000);
    }
}
