//! Offline mode (`--serve-stale-when-upstream-unreachable`): while the
//! upstream cannot be reached, consistent LISTs and watch-lists are answered
//! from what the cache holds instead of failing.
//!
//! Such an answer is *unproven*: it is a state the upstream had (every
//! object at its own version, the whole at the cache's version), but
//! nothing shows it is the upstream's state now, which a consistent read
//! normally promises. A node whose control plane is away is better served
//! by the last state it knew than by nothing (the kubelet can restart the
//! pods it ran); the operator chooses it, and sees it: a log line per
//! resource when it starts, `watchmux_cache_serving_unproven{resource}`,
//! and `/readyz?verbose`.
//!
//! "Cannot be reached" is the readiness probe's finding (unreachable or
//! unresponsive, `UpstreamHealth::is_down`), or, for a cache loaded from
//! disk that the upstream has never answered, a freshness proof that just
//! failed. A cache the consistency check found different from the upstream
//! is never served this way: it is known wrong, not just unproven.

use std::sync::atomic::Ordering;

use super::registry::Registry;
use super::resource::ResourceCache;
use crate::metrics as m;
use crate::upstream::Upstream;

/// Whether a consistent read that could not be proven fresh may be answered
/// from `cache` anyway; records it when so.
pub(crate) fn serve_unproven(enabled: bool, cache: &ResourceCache, upstream: &Upstream) -> bool {
    if !enabled || !cache.is_ready() || cache.check_state().is_unproven() {
        return false;
    }
    if !(upstream.health().is_down() || cache.is_unconfirmed()) {
        return false;
    }
    if !cache.serving_stale().swap(true, Ordering::AcqRel) {
        tracing::warn!(
            resource = %cache.label(),
            rv = cache.current_rv(),
            health = upstream.health().as_str(),
            "the upstream cannot be reached: answering consistent reads from the cache's unproven state"
        );
    }
    metrics::gauge!(m::CACHE_SERVING_UNPROVEN, "resource" => cache.label().to_owned()).set(1.0);
    true
}

/// A consistent read on `cache` was proven fresh: offline mode, if it was
/// on, is over for it.
pub(crate) fn proven(cache: &ResourceCache) {
    if cache.serving_stale().swap(false, Ordering::AcqRel) {
        tracing::info!(resource = %cache.label(), "the upstream is back: consistent reads are proven again");
        metrics::gauge!(m::CACHE_SERVING_UNPROVEN, "resource" => cache.label().to_owned()).set(0.0);
    }
}

/// Brings `watchmux_cache_serving_unproven` up to date at a scrape, and
/// ends offline mode for the caches whose upstream is back. Returns the
/// caches serving unproven state, for `/readyz?verbose`.
pub(crate) fn publish(registry: &Registry) -> Vec<String> {
    let down = registry.upstream().health().is_down();
    let mut serving = Vec::new();
    for cache in registry.caches() {
        let mut stale = cache.serving_stale().load(Ordering::Acquire);
        if stale && !down {
            cache.serving_stale().store(false, Ordering::Release);
            tracing::info!(resource = %cache.label(), "the upstream is back: consistent reads need their proof again");
            stale = false;
        }
        let unproven = stale || cache.is_unconfirmed();
        if unproven {
            serving.push(cache.label().to_owned());
        }
        metrics::gauge!(m::CACHE_SERVING_UNPROVEN, "resource" => cache.label().to_owned()).set(if unproven {
            1.0
        } else {
            0.0
        });
    }
    serving.sort();
    serving
}
