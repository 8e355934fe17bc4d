//! The cache checks itself against the API server (issue 26, item 1).
//!
//! Every `--consistency-check-period` (jittered up to half as long again, as
//! the API server jitters its own; 0 turns the check off), each cache takes
//! its state at its current version `X` (a [`Snapshot`]: an O(1) clone of
//! the persistent store, so the writer and the fan-out never wait for the
//! check), asks the upstream for `LIST resourceVersion=X&
//! resourceVersionMatch=Exact` ([`exact_list`]), and compares the
//! (namespace, name, resourceVersion) of both ([`digest`]), on the blocking
//! pool.
//!
//! The outcome is counted in `watchmux_cache_consistency_checks_total
//! {resource,result}`:
//! - `ok`: the same.
//! - `mismatch`: the differing keys are logged (names and versions only,
//!   the first [`digest::REPORTED_KEYS`]); the cache is marked *unproven*,
//!   so consistent reads pass through to the upstream until it is healed;
//!   the reflector is asked for one relist (`watchmux_upstream_relists_total
//!   {cause="inconsistent"}`), whose completion clears the mark; and
//!   `/readyz?verbose` names the cache meanwhile.
//! - `skipped_relisting`: the cache was relisting when the check would
//!   start, or was replaced by a relist while the check ran (what it
//!   compared is gone).
//! - `skipped_compacted`: the upstream answered 410: `X` is compacted.
//! - `error`: any other failure to read the upstream's list.
//!
//! The API server (v1.34+, `cacher/consistency`) runs the same check
//! between its watch cache and etcd; there a mismatch only turns
//! list-from-cache off. Here the cache is the only copy watchmux has, so it
//! heals it too.
//!
//! One check at a time per cache: each cache has one checking task, and a
//! check refuses to start while another runs ([`Verification::running`]).

pub(crate) mod digest;
mod exact_list;
mod metadata_pb;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::digest::Comparison;
use self::exact_list::{ExactListError, list_at};
use super::resource::ResourceCache;
use crate::metrics as m;
use crate::upstream::Upstream;

/// The default `--consistency-check-period`, the API server's own.
pub(crate) const DEFAULT_PERIOD: Duration = Duration::from_secs(300);

/// What the check shares with the cache's writer and reflector, kept on the
/// cache.
#[derive(Debug, Default)]
pub(crate) struct Verification {
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
    wake_reflector: Notify,
}

impl Verification {
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

    fn ask_for_relist(&self) {
        self.unproven.store(true, Ordering::Release);
        self.relist_wanted.store(true, Ordering::Release);
        self.wake_reflector.notify_one();
    }
}

/// What one check found: the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Mismatch,
    SkippedRelisting,
    SkippedCompacted,
    /// Another check of the same cache is running (not counted: with one
    /// checking task per cache it only happens when a check is started by
    /// hand, in tests).
    SkippedRunning,
    Error,
}

impl Outcome {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Mismatch => "mismatch",
            Self::SkippedRelisting => "skipped_relisting",
            Self::SkippedCompacted => "skipped_compacted",
            Self::SkippedRunning => "skipped_running",
            Self::Error => "error",
        }
    }
}

/// Checks `cache` every `period` (jittered) until `stop`, or until the
/// cache closes. A zero period checks nothing.
pub(crate) async fn run(cache: Arc<ResourceCache>, upstream: Arc<Upstream>, period: Duration, stop: CancellationToken) {
    if period.is_zero() {
        return;
    }
    loop {
        let wait = period.mul_f64(rand::rng().random_range(1.0..1.5));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if cache.is_closed() {
            return;
        }
        if !cache.is_ready() {
            continue;
        }
        check(&cache, &upstream).await;
    }
}

/// One check of `cache`, counted and acted on.
pub(crate) async fn check(cache: &ResourceCache, upstream: &Upstream) -> Outcome {
    let started = Instant::now();
    let outcome = check_once(cache, upstream).await;
    if outcome != Outcome::SkippedRunning {
        let resource = cache.label().to_owned();
        metrics::counter!(m::CACHE_CONSISTENCY_CHECKS, "resource" => resource.clone(), "result" => outcome.label())
            .increment(1);
        metrics::histogram!(m::CACHE_CONSISTENCY_CHECK_DURATION, "resource" => resource)
            .record(started.elapsed().as_secs_f64());
    }
    outcome
}

/// Marks a check running for as long as it lives.
struct Running<'a>(&'a AtomicBool);

impl<'a> Running<'a> {
    fn start(flag: &'a AtomicBool) -> Option<Self> {
        (!flag.swap(true, Ordering::AcqRel)).then_some(Self(flag))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

async fn check_once(cache: &ResourceCache, upstream: &Upstream) -> Outcome {
    let v = cache.verification();
    let Some(_running) = Running::start(&v.running) else {
        return Outcome::SkippedRunning;
    };
    let replaced_since =
        |generation| v.relisting.load(Ordering::Acquire) || v.generation.load(Ordering::Acquire) != generation;
    let generation = v.generation.load(Ordering::Acquire);
    if replaced_since(generation) {
        return Outcome::SkippedRelisting;
    }
    let snapshot = cache.snapshot();
    let rv = snapshot.rv;
    let theirs = match list_at(upstream, cache, rv).await {
        Ok(entries) => entries,
        Err(ExactListError::Compacted(_)) => {
            tracing::info!(resource = %cache.label(), rv, "consistency check skipped: the upstream has compacted the cache's version");
            return Outcome::SkippedCompacted;
        }
        Err(err) => {
            tracing::warn!(resource = %cache.label(), rv, error = %crate::error::error_chain(&err), "consistency check could not read the upstream");
            return Outcome::Error;
        }
    };
    // Off the runtime's workers: a large cache takes milliseconds to digest.
    let comparison = match tokio::task::spawn_blocking(move || digest::compare(&snapshot.objects, &theirs)).await {
        Ok(c) => c,
        Err(_) => return Outcome::Error,
    };
    if replaced_since(generation) {
        return Outcome::SkippedRelisting;
    }
    match comparison {
        Comparison::Same => {
            tracing::debug!(resource = %cache.label(), rv, "consistency check passed");
            Outcome::Ok
        }
        Comparison::Differ { count, first } => {
            tracing::error!(
                resource = %cache.label(),
                rv,
                differing = count,
                first = ?first.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "the cache differs from the upstream at the same resourceVersion; consistent reads pass through until it is relisted"
            );
            v.ask_for_relist();
            Outcome::Mismatch
        }
    }
}

#[cfg(test)]
mod tests;
