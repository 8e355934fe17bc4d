//! The cache checks itself against the API server.
//!
//! Every `--consistency-check-period` (jittered up to half as long again, as
//! the API server jitters its own; 0 turns the check off), each cache takes
//! its state at its current version `X` (a [`Snapshot`](crate::cache::state::store::Snapshot): an O(1) clone of
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
//! - `mismatch` too when the upstream cannot list at `X` and its current
//!   version is below `X`: another cluster (`sync::cluster`); the
//!   reflector's relist then starts the cache over.
//! - `error`: any other failure to read the upstream's list.
//!
//! The API server (v1.34+, `cacher/consistency`) runs the same check
//! between its watch cache and etcd; there a mismatch only turns
//! list-from-cache off. Here the cache is the only copy watchmux has, so it
//! heals it too.
//!
//! One check at a time per cache: each cache has one checking task, and a
//! check refuses to start while another runs. What a check shares with the
//! cache's writer and reflector (the flags above) lives on the cache
//! (`resource/check_state.rs`).

pub(crate) mod digest;
mod exact_list;
mod metadata_pb;

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::digest::Comparison;
use self::exact_list::{ExactListError, list_at};
use super::resource::ResourceCache;
use super::upstream_wire::consistent_rv;
use crate::metrics as m;
use crate::upstream::Upstream;

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

async fn check_once(cache: &ResourceCache, upstream: &Upstream) -> Outcome {
    let v = cache.check_state();
    let Some(_running) = v.start_check() else {
        return Outcome::SkippedRunning;
    };
    let Some(generation) = v.generation() else {
        return Outcome::SkippedRelisting;
    };
    let snapshot = cache.snapshot();
    let rv = snapshot.rv;
    let theirs = match list_at(upstream, cache, rv).await {
        Ok(entries) => entries,
        Err(ExactListError::Compacted(_)) => {
            tracing::info!(resource = %cache.label(), rv, "consistency check skipped: the upstream has compacted the cache's version");
            return Outcome::SkippedCompacted;
        }
        Err(err) => {
            // A version the upstream has not reached (its 504) may be another
            // cluster's: if its current version is below the cache's, the
            // cache holds another cluster's state, which is a mismatch.
            let uri = cache.collection_uri(&[("limit", "1".to_owned())]);
            let current = consistent_rv(upstream, uri, cache.sync.gzip_lists).await;
            if let Some(theirs) = current.filter(|theirs| *theirs < rv) {
                tracing::error!(resource = %cache.label(), rv, upstream_rv = theirs, "the upstream's version is below the cache's: another cluster; consistent reads pass through until it is relisted");
                v.upstream_went_back();
                return Outcome::Mismatch;
            }
            tracing::warn!(resource = %cache.label(), rv, error = %crate::error::error_chain(&err), "consistency check could not read the upstream");
            return Outcome::Error;
        }
    };
    // Off the runtime's workers: a large cache takes milliseconds to digest.
    let comparison = match tokio::task::spawn_blocking(move || digest::compare(&snapshot.objects, &theirs)).await {
        Ok(c) => c,
        Err(_) => return Outcome::Error,
    };
    if v.generation() != Some(generation) {
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
