//! Proving that the cache is fresh enough for a consistent read.
//!
//! A LIST or GET without a resourceVersion, and a watch-list from `""`, must
//! reflect the upstream's state at least as new as the moment of the request.
//! The cache proves it in two cheap steps:
//!
//! 1. **The upstream's current version.** A consistent `LIST ?limit=1` of the
//!    same collection: the API server answers it from its own watch cache
//!    after confirming with etcd, so its resourceVersion `P` is at least the
//!    storage revision at the time of the request. Concurrent requests share
//!    one probe, as long as it started after they arrived; a request that
//!    arrives while a probe is in flight waits for the next one, which
//!    starts when that one ends and serves every request queued for it, so
//!    a storm of reads costs one probe in flight at a time, not one each.
//! 2. **Catching up to it.** If the cache is behind `P`, it may simply have
//!    seen no change for a while (an upstream watch reports progress only
//!    with a bookmark a minute). A short catch-up watch from the cache's
//!    version (`timeoutSeconds=3`, bookmarks on) makes the API server replay
//!    any change the cache has not seen yet and then send a bookmark at its
//!    own current version (about a second later). Replayed events are applied
//!    in order, and the bookmark moves the cache's version forward: together
//!    they prove the cache is current at that version, which is at least `P`.
//!    The catch-up watch does not write the cache itself: a reader only asks
//!    for one ([`Freshness`], on the readers' handle); the cache's one
//!    writer, the reflector (`resource::Writer`), starts it and owns the
//!    queue it fills ([`CatchUpQueue`]), so nothing a reader holds can queue
//!    a write.
//!
//! Step 2 takes the API server a second or two: it sends a watcher's bookmark
//! only at its bookmark time (two seconds before the deadline, on its own
//! one-second tick) and only if its version moved since the watch began. In
//! a busy cluster the cache is nearly always behind `P` (`P` is etcd's
//! revision, moved by every write to any resource). A consistent GET is not
//! served from the cache at all (`serve::CacheService::try_serve`): the API
//! server reads one object from etcd at about the cost of step 1.
//!
//! Step 2 is only waited for by a watch-list (passing one through costs the
//! API server a list and a watch for as long as it lasts). A LIST is served
//! from the cache only when step 1 finds it current ([`Proof::AtOnce`]):
//! otherwise it passes through at once, and the catch-up it asks for runs
//! on, so that the LISTs after it find the cache proven (in a quiet cluster,
//! nearly all of them); while that catch-up runs, and in a busy cluster
//! (`busy.rs`), a LIST passes through without probing. A LIST that waited for the API server's bookmark took a
//! second or two where the API server answers in milliseconds
//! (docs/benchmarks.md, "Consistent LISTs").
//!
//! If the proof does not arrive within the budget the read passes through,
//! and is counted as a fallback. The budget (3 s) bounds the wait for the
//! probe's answer; a watch-list whose probe answered in time also gets the
//! catch-up that covers it, up to one catch-up's length after that answer
//! ([`CATCH_UP_PERIOD`]): in a burst, a probe that answers late in the
//! budget leaves no time for the bookmark otherwise, and passing the
//! watch-list through costs the API server far more than the wait. Even so,
//! an unproven watch-list passes through only within its resource's
//! fallback budget ([`prove_watch_list`], `fallbacks.rs`: a few at once, one
//! a second after that); the rest wait for a second proof, then get the
//! API server's own 504 for a watch cache it cannot prove fresh.
//!
//! **A version the client names** ([`reached`]): resourceVersions are
//! global, so a client may hold one this cache has not reached, from another
//! resource's write, from a bookmark or from a continue token, and the
//! API server answers such a read at once (it asks etcd for progress). The
//! cache waits for it only as long as its own event takes to arrive
//! ([`OWN_EVENT_GRACE`]: the client's write of this resource), then passes
//! the read through: the API server's answer is the exact one, 200 when it
//! has the version, and, for one above its own revision, its own 504 after
//! its own three seconds. The same for every verb and content type.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;

use self::busy::BusyCluster;
use self::fallbacks::FallbackBudget;
use super::ResourceCache;
use crate::cache::upstream_wire::consistent_rv;
use crate::cache::upstream_wire::{Change, Opened, StreamEnd, open_watch, watch_params};
use crate::error::error_chain;
use crate::upstream::Upstream;

/// The catch-up watch's timeout: the API server sends its bookmark two
/// seconds before a watch's deadline, so three seconds is the shortest that
/// still gets one.
const CATCH_UP_TIMEOUT_SECONDS: u64 = 3;

/// Changes a catch-up watch may queue before it must wait for the writer.
const CATCH_UP_QUEUE: usize = 256;

/// The readers' side of the proof, on the cache: the probe of the
/// upstream's current version that requests share, and whether a catch-up
/// watch is asked for or running. It holds no way to write the cache.
#[derive(Default)]
pub(crate) struct Freshness {
    probe: Mutex<Probes>,
    /// Set from the moment a reader asks for a catch-up until that catch-up
    /// ends: one at a time.
    catching_up: AtomicBool,
    /// Wakes the writer to start the catch-up asked for (a permit is kept
    /// when the writer is not listening: it starts it when it is back).
    wanted: Notify,
    /// Whether LISTs should probe at all (`busy.rs`).
    busy: BusyCluster,
    /// How many unproven watch-lists may pass through (`fallbacks.rs`).
    fallbacks: FallbackBudget,
}

impl std::fmt::Debug for Freshness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Freshness").field("catching_up", &self.catching_up.load(Ordering::Relaxed)).finish()
    }
}

/// A probe's answer: `None` while it runs, then the upstream's version
/// (`None` inside if the probe failed).
type ProbeResult = watch::Receiver<Option<Option<u64>>>;

struct Probe {
    started: Instant,
    result: ProbeResult,
}

/// The probe in flight (or the last one), and the one queued behind it.
#[derive(Default)]
struct Probes {
    current: Option<Probe>,
    /// Shared by the requests that arrived while `current` was in flight;
    /// it starts when `current` ends, after every one of them arrived.
    queued: Option<ProbeResult>,
}

/// The writer's side: the queue catch-up watches fill and only the writer
/// reads. Its sender is never handed to a reader, only to the catch-up
/// tasks this queue starts.
pub(crate) struct CatchUpQueue {
    tx: mpsc::Sender<Change>,
    rx: mpsc::Receiver<Change>,
}

impl CatchUpQueue {
    pub(crate) fn new() -> Self {
        // Bounded: a catch-up that gets ahead of the writer waits for it
        // (up to QUEUE_WAIT, then gives up; see there).
        let (tx, rx) = mpsc::channel(CATCH_UP_QUEUE);
        Self { tx, rx }
    }

    /// The next queued change; starts a catch-up watch whenever a reader
    /// asked for one. Never ends on its own: the queue's sender is kept here.
    pub(crate) async fn next(&mut self, cache: &Arc<ResourceCache>, upstream: &Arc<Upstream>) -> Change {
        loop {
            tokio::select! {
                Some(change) = self.rx.recv() => return change,
                () = cache.freshness().wanted.notified() => self.start(cache, upstream),
            }
        }
    }

    fn start(&self, cache: &Arc<ResourceCache>, upstream: &Arc<Upstream>) {
        let (cache, upstream, queue) = (cache.clone(), upstream.clone(), self.tx.clone());
        tokio::spawn(async move {
            let from = cache.current_rv();
            if let Err(err) = catch_up(&cache, &upstream, &queue, from).await {
                tracing::debug!(resource = %cache.label(), error = %err, "catch-up watch ended early");
            }
            cache.freshness().catching_up.store(false, Ordering::Release);
        });
    }

    #[cfg(test)]
    pub(crate) fn sender(&self) -> mpsc::Sender<Change> {
        self.tx.clone()
    }
}

/// How long a read at a version the cache has not reached waits for it:
/// about what the cache's own event of a write takes to arrive after the
/// API server acknowledged the write (a few milliseconds on loopback), with
/// room. A version that is not this resource's waits this long in vain, and
/// then passes through.
pub(crate) const OWN_EVENT_GRACE: Duration = Duration::from_millis(50);

/// How long a LIST waits after the probe for the cache to reach the
/// probe's version: the API server answered the probe once its own cache
/// held that version, so an event of this resource at it is already on its
/// way to the cache's watch (the client's write just before its LIST).
const PROBE_GRACE: Duration = Duration::from_millis(10);

/// Whether the cache holds `rv` (a version a client named), after waiting
/// at most [`OWN_EVENT_GRACE`]; if not, the read is the API server's.
pub(crate) async fn reached(cache: &ResourceCache, rv: u64) -> bool {
    cache.wait_for_rv(rv, OWN_EVENT_GRACE).await
}

/// What a consistent read waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proof {
    /// Only the probe: the cache is current at its answer, or the read
    /// passes through (and the catch-up it asks for runs on for the next).
    AtOnce,
    /// The probe and, if the cache is behind, the catch-up.
    CatchingUp,
}

/// How long after its probe's answer a read that waits for the catch-up
/// may wait for the bookmark that covers it: one catch-up watch's whole
/// length, and a second for its bookmark to be applied. A read whose probe
/// answered late in its budget (a burst of informers starting at once, each
/// cache proving hundreds of watch-lists with a probe or two) still gets the
/// catch-up that proves it, instead of passing through at the budget's end
/// with the catch-up a second from its bookmark.
pub(crate) const CATCH_UP_PERIOD: Duration = Duration::from_secs(CATCH_UP_TIMEOUT_SECONDS + 1);

/// Waits until `cache` is at least as new as the upstream was at
/// `arrival`; false if that cannot be shown as `proof` allows: the probe's
/// answer by `arrival + budget`, and for [`Proof::CatchingUp`] the catch-up's
/// bookmark by then or within [`CATCH_UP_PERIOD`] of the probe's answer,
/// whichever is later.
pub(crate) async fn ensure_fresh(
    cache: &Arc<ResourceCache>,
    upstream: &Arc<Upstream>,
    arrival: Instant,
    proof: Proof,
    budget: Duration,
) -> bool {
    prove(cache, upstream, arrival, proof, budget).await.is_ok()
}

/// What a consistent read gets: a LIST's proof gives `Fresh` or
/// `PassThrough`, a watch-list's ([`prove_watch_list`]) any of the three.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProofOutcome {
    /// Served from the cache: proven fresh.
    Fresh,
    /// Passed through, within the resource's [`FallbackBudget`].
    PassThrough,
    /// Neither: kube-apiserver's answer when its own watch cache cannot
    /// reach `required` ([`fallbacks::too_large`]); the cache is at `current`.
    TooLarge { required: u64, current: u64 },
}

/// A consistent watch-list's proof ([`Proof::CatchingUp`] within `budget`);
/// if it fails, a pass-through from the resource's fallback budget, else a
/// second proof (the same budget: 3 s, the API server's own wait for its
/// watch cache), else a pass-through again if the budget has refilled, else
/// the API server's 504 (`fallbacks.rs` says why).
pub(crate) async fn prove_watch_list(
    cache: &Arc<ResourceCache>,
    upstream: &Arc<Upstream>,
    arrival: Instant,
    budget: Duration,
) -> ProofOutcome {
    let Err(first) = prove(cache, upstream, arrival, Proof::CatchingUp, budget).await else {
        return ProofOutcome::Fresh;
    };
    let fallbacks = &cache.freshness().fallbacks;
    if fallbacks.try_take(Instant::now()) {
        return ProofOutcome::PassThrough;
    }
    let Err(second) = prove(cache, upstream, Instant::now(), Proof::CatchingUp, budget).await else {
        return ProofOutcome::Fresh;
    };
    if fallbacks.try_take(Instant::now()) {
        return ProofOutcome::PassThrough;
    }
    let current = cache.current_rv();
    match second.or(first) {
        // Reached meanwhile (a catch-up ending just after the deadline).
        Some(required) if required <= current => ProofOutcome::Fresh,
        Some(required) => ProofOutcome::TooLarge { required, current },
        // No probe answered: the version after the cache's is the least
        // the proof needed.
        None => ProofOutcome::TooLarge { required: current + 1, current },
    }
}

/// [`ensure_fresh`]'s proof; on failure, the upstream's version it was
/// after, if the probe answered in time.
async fn prove(
    cache: &Arc<ResourceCache>,
    upstream: &Arc<Upstream>,
    arrival: Instant,
    proof: Proof,
    budget: Duration,
) -> Result<(), Option<u64>> {
    let freshness = cache.freshness();
    // A catch-up under way: the cache is known to be behind; in a busy
    // cluster, it will be.
    if proof == Proof::AtOnce
        && (freshness.catching_up.load(Ordering::Acquire) || freshness.busy.skip_probe(Instant::now()))
    {
        return Err(None);
    }
    let deadline = arrival + budget;
    let Ok(Some(target)) = tokio::time::timeout_at(deadline, upstream_rv(cache, upstream, arrival)).await else {
        return Err(None);
    };
    if proof == Proof::AtOnce {
        if cache.wait_for_rv(target, PROBE_GRACE).await {
            freshness.busy.probed(true, Instant::now());
            return Ok(());
        }
        // Counted once a probe, by the LIST that starts the catch-up (the
        // LISTs sharing the probe find it started).
        if ask_for_catch_up(cache) {
            freshness.busy.probed(false, Instant::now());
        }
        return Err(Some(target));
    }
    let deadline = deadline.max(Instant::now() + CATCH_UP_PERIOD);
    loop {
        if cache.current_rv() >= target {
            return Ok(());
        }
        ask_for_catch_up(cache);
        let now = Instant::now();
        if now >= deadline {
            return Err(Some(target));
        }
        // A catch-up takes about a second; look again after each.
        let slice = (deadline - now).min(Duration::from_millis(1500));
        if cache.wait_for_rv(target, slice).await {
            return Ok(());
        }
    }
}

/// The upstream's current version, from a probe that started no earlier
/// than `arrival`: the one in flight if it did, else the one queued behind
/// it, else a new one.
async fn upstream_rv(cache: &Arc<ResourceCache>, upstream: &Arc<Upstream>, arrival: Instant) -> Option<u64> {
    let mut rx = {
        let mut probes = cache.freshness().probe.lock();
        let (usable, in_flight) = match &probes.current {
            Some(p) => (p.started >= arrival, p.result.borrow().is_none().then(|| p.result.clone())),
            None => (false, None),
        };
        match (usable, in_flight, probes.queued.clone()) {
            (true, ..) => probes.current.as_ref().expect("a usable probe").result.clone(),
            (false, Some(_), Some(queued)) => queued,
            (false, Some(in_flight), None) => {
                let (tx, rx) = watch::channel(None);
                probes.queued = Some(rx.clone());
                let (cache, upstream) = (cache.clone(), upstream.clone());
                tokio::spawn(async move {
                    let mut in_flight = in_flight;
                    let _ = in_flight.wait_for(|r| r.is_some()).await;
                    {
                        // Started now, under the lock the queued readers
                        // joined under: after every one of them arrived.
                        let mut probes = cache.freshness().probe.lock();
                        probes.current = Some(Probe { started: Instant::now(), result: tx.subscribe() });
                        probes.queued = None;
                    }
                    let rv = probe_current_rv(&cache, &upstream).await;
                    let _ = tx.send(Some(rv));
                });
                rx
            }
            (false, None, _) => {
                let (tx, rx) = watch::channel(None);
                probes.current = Some(Probe { started: Instant::now(), result: rx.clone() });
                let (cache, upstream) = (cache.clone(), upstream.clone());
                tokio::spawn(async move {
                    let rv = probe_current_rv(&cache, &upstream).await;
                    let _ = tx.send(Some(rv));
                });
                rx
            }
        }
    };
    let result = rx.wait_for(|r| r.is_some()).await.ok()?;
    (*result).flatten()
}

/// Asks the writer for a catch-up watch, unless one is asked for or
/// running; whether this call asked.
fn ask_for_catch_up(cache: &ResourceCache) -> bool {
    let asked = !cache.freshness().catching_up.swap(true, Ordering::AcqRel);
    if asked {
        cache.freshness().wanted.notify_one();
    }
    asked
}

/// The upstream's current version; `None` too when it is below the
/// version the cache had when the probe was sent, which only another
/// cluster answers (`sync::cluster`): the read passes through, and the
/// reflector is asked to relist. Compared with the cache's version before
/// the probe, not after it: the cache's watch may bring it past the
/// probe's answer while the probe is in flight (the API server reads the
/// version as the request arrives), which is no sign of another cluster.
async fn probe_current_rv(cache: &ResourceCache, upstream: &Upstream) -> Option<u64> {
    let ours = cache.current_rv();
    let rv = consistent_rv(upstream, cache.collection_uri(&[("limit", "1".to_owned())]), cache.sync.gzip_lists).await?;
    if rv < ours {
        tracing::warn!(resource = %cache.label(), cache_rv = ours, upstream_rv = rv, "the upstream's consistent version is below the cache's: another cluster; passing reads through until the cache relists");
        cache.check_state().upstream_went_back();
        return None;
    }
    Some(rv)
}

/// How long the catch-up waits for the writer to take a change (it is
/// relisting or backing off when it does not): then the catch-up ends,
/// which is safe, since it never skips a change and queues a later one.
const QUEUE_WAIT: Duration = Duration::from_secs(2);

/// One short watch from `from`: queues what it replays, and the bookmark
/// that follows, to the writer; ends at that bookmark.
async fn catch_up(
    cache: &ResourceCache,
    upstream: &Upstream,
    queue: &mpsc::Sender<Change>,
    from: u64,
) -> Result<(), String> {
    let uri = cache.collection_uri(&watch_params(from, CATCH_UP_TIMEOUT_SECONDS));
    let mut stream = match open_watch(upstream, uri).await {
        Opened::Streaming(stream) => stream,
        Opened::Expired => return Err("catch-up watch answered 410".into()),
        Opened::Gone => return Err("catch-up watch answered 404".into()),
        Opened::Failed(error) | Opened::TooLarge(error) => {
            return Err(format!("catch-up watch failed: {}", error_chain(&error)));
        }
    };
    loop {
        let change = match stream.next(&cache.shape, None).await {
            Ok(change) => change,
            Err(StreamEnd::Closed) => return Ok(()),
            Err(end) => return Err(error_chain(&end)),
        };
        let is_bookmark = matches!(change, Change::Bookmark(_));
        queue.send_timeout(change, QUEUE_WAIT).await.map_err(|e| e.to_string())?;
        if is_bookmark {
            return Ok(());
        }
    }
}

mod busy;
pub(crate) mod fallbacks;
#[cfg(test)]
mod tests;
