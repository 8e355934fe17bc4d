//! What the consistency check (`cache/consistency_check.rs`) shares with the cache's
//! writer and reflector, kept on the cache: whether a check runs, whether
//! the cache is relisting, how many lists it has installed, whether a check
//! found it different (unproven), and the request for a relist.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The default `--consistency-check-period`, the API server's own.
pub(crate) const DEFAULT_PERIOD: Duration = Duration::from_secs(300);

/// The check's state on one cache.
#[derive(Debug, Default)]
pub(crate) struct CheckState {
    /// A check is running.
    running: AtomicBool,
    /// The reflector is relisting a cache that was ready.
    relisting: AtomicBool,
    /// Lists installed so far: a check whose cache was replaced while it
    /// ran compared a state that is gone.
    generation: AtomicU64,
    /// A check found a difference and no relist has completed since.
    unproven: AtomicBool,
    /// A relist is asked for and not started yet.
    relist_wanted: AtomicBool,
    /// The relist asked for is because the upstream's version went below
    /// the cache's (the freshness probe): a new cluster.
    went_back: AtomicBool,
    wake_reflector: Notify,
}

impl CheckState {
    /// The writer: a relist of a ready cache starts; it answers any relist
    /// asked for.
    pub(crate) fn relist_started(&self) {
        self.relisting.store(true, Ordering::Release);
        self.relist_wanted.store(false, Ordering::Release);
    }

    /// The writer installed a complete list: the cache is as the upstream
    /// listed it, whatever a check found before.
    pub(crate) fn listed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.unproven.store(false, Ordering::Release);
        self.relisting.store(false, Ordering::Release);
    }

    /// The writer: a relist ended without a list (it failed, and backs off).
    pub(crate) fn relist_ended(&self) {
        self.relisting.store(false, Ordering::Release);
    }

    /// A check found the cache different from the upstream: consistent reads
    /// pass through until a relist heals it.
    pub(crate) fn is_unproven(&self) -> bool {
        self.unproven.load(Ordering::Acquire)
    }

    /// The reflector: resolves when a check asks for a relist (a wake-up
    /// left over from a relist that already happened is ignored).
    pub(crate) async fn relist_requested(&self) {
        loop {
            self.wake_reflector.notified().await;
            if self.relist_wanted.swap(false, Ordering::AcqRel) {
                return;
            }
        }
    }

    /// The check found a difference: unproven until a relist, which the
    /// reflector is asked for.
    pub(crate) fn ask_for_relist(&self) {
        self.unproven.store(true, Ordering::Release);
        self.relist_wanted.store(true, Ordering::Release);
        self.wake_reflector.notify_one();
    }

    /// The freshness probe found the upstream's version below the cache's:
    /// another cluster. Consistent reads pass through, and the reflector
    /// relists (and finds the new cluster by the list's version).
    pub(crate) fn upstream_went_back(&self) {
        self.went_back.store(true, Ordering::Release);
        self.ask_for_relist();
    }

    /// The reflector: whether the relist asked for was for a version gone back.
    pub(crate) fn take_went_back(&self) -> bool {
        self.went_back.swap(false, Ordering::AcqRel)
    }

    /// Marks a check running for as long as the guard lives; `None` when
    /// one already runs.
    pub(crate) fn start_check(&self) -> Option<CheckRunning<'_>> {
        (!self.running.swap(true, Ordering::AcqRel)).then_some(CheckRunning(&self.running))
    }

    /// How many lists have been installed, or `None` while relisting: a
    /// check compares a state of one generation, and finds afterwards
    /// whether it is still the cache's.
    pub(crate) fn generation(&self) -> Option<u64> {
        let generation = self.generation.load(Ordering::Acquire);
        (!self.relisting.load(Ordering::Acquire)).then_some(generation)
    }
}

/// A running check; ends when dropped.
pub(crate) struct CheckRunning<'a>(&'a AtomicBool);

impl Drop for CheckRunning<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
