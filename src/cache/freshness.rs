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
//!    one probe, as long as it started after they arrived.
//! 2. **Catching up to it.** If the cache is behind `P`, it may simply have
//!    seen no change for a while (an upstream watch reports progress only
//!    with a bookmark a minute). A short catch-up watch from the cache's
//!    version (`timeoutSeconds=3`, bookmarks on) makes the API server replay
//!    any change the cache has not seen yet and then send a bookmark at its
//!    own current version (about a second later). Replayed events are applied
//!    in order, and the bookmark moves the cache's version forward: together
//!    they prove the cache is current at that version, which is at least `P`.
//!    The catch-up watch does not write the cache itself: it queues what it
//!    reads to the cache's one writer, the reflector (`resource::Writer`).
//!
//! Step 2 takes the API server a second or two: it sends a watcher's bookmark
//! only at its bookmark time (two seconds before the deadline, on its own
//! one-second tick) and only if its version moved since the watch began. In
//! a busy cluster the cache is nearly always behind `P` (`P` is etcd's
//! revision, moved by every write to any resource). That wait is worth it for
//! a collection (a LIST or a watch-list passed through costs the API server
//! all of it), not for one object: a consistent GET is not served from the
//! cache at all (`serve::CacheService::try_serve`).
//!
//! If the proof does not arrive within the budget the read passes through,
//! and is counted as a fallback.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http_body_util::BodyExt;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::time::Instant;

use super::resource::{Change, Probe, ResourceCache};
use super::upstream_watch::{LineEnd, LineSplitter, collection_uri, read_line, upstream_get};
use crate::error::error_chain;
use crate::upstream::Upstream;

/// The catch-up watch's timeout: the API server sends its bookmark two
/// seconds before a watch's deadline, so three seconds is the shortest that
/// still gets one.
const CATCH_UP_TIMEOUT_SECONDS: u64 = 3;

#[derive(Deserialize)]
struct ListMetaOnly {
    metadata: RvMeta,
}

#[derive(Deserialize)]
struct RvMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

impl ResourceCache {
    /// Waits until the cache is at least as new as the upstream was at
    /// `arrival`; false if that cannot be shown by `arrival + budget`.
    pub(crate) async fn ensure_fresh(
        self: &Arc<Self>,
        upstream: &Arc<Upstream>,
        arrival: Instant,
        budget: Duration,
    ) -> bool {
        let deadline = arrival + budget;
        let Ok(Some(target)) = tokio::time::timeout_at(deadline, self.upstream_rv(upstream, arrival)).await else {
            return false;
        };
        loop {
            if self.current_rv() >= target {
                return true;
            }
            self.start_catch_up(upstream);
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            // A catch-up takes about a second; look again after each.
            let slice = (deadline - now).min(Duration::from_millis(1500));
            if self.wait_for_rv(target, slice).await {
                return true;
            }
        }
    }

    /// The upstream's current version, from a probe that started no earlier
    /// than `arrival` (shared with other requests when one is in flight).
    async fn upstream_rv(self: &Arc<Self>, upstream: &Arc<Upstream>, arrival: Instant) -> Option<u64> {
        let mut rx = {
            let mut probe = self.freshness().probe.lock();
            match &*probe {
                Some(p) if p.started >= arrival => p.result.clone(),
                _ => {
                    let (tx, rx) = watch::channel(None);
                    *probe = Some(Probe { started: Instant::now(), result: rx.clone() });
                    let (cache, upstream) = (self.clone(), upstream.clone());
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

    fn start_catch_up(self: &Arc<Self>, upstream: &Arc<Upstream>) {
        if self.freshness().catching_up.swap(true, Ordering::AcqRel) {
            return;
        }
        let (cache, upstream) = (self.clone(), upstream.clone());
        tokio::spawn(async move {
            let from = cache.current_rv();
            if let Err(err) = catch_up(&cache, &upstream, from).await {
                tracing::debug!(resource = %cache.label(), error = %err, "catch-up watch ended early");
            }
            cache.freshness().catching_up.store(false, Ordering::Release);
        });
    }
}

async fn probe_current_rv(cache: &ResourceCache, upstream: &Upstream) -> Option<u64> {
    let resp = upstream_get(upstream, collection_uri(cache, &[("limit", "1".to_owned())])).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let bytes = resp.into_body().collect().await.ok()?.to_bytes();
    let meta: ListMetaOnly = serde_json::from_slice(&bytes).ok()?;
    meta.metadata.resource_version.parse().ok()
}

/// How long the catch-up waits for the writer to take a change (it is
/// relisting or backing off when it does not): then the catch-up ends,
/// which is safe, since it never skips a change and queues a later one.
const QUEUE_WAIT: Duration = Duration::from_secs(2);

/// One short watch from `from`: queues what it replays, and the bookmark
/// that follows, to the writer; ends at that bookmark.
async fn catch_up(cache: &ResourceCache, upstream: &Upstream, from: u64) -> Result<(), String> {
    let params = [
        ("watch", "true".to_owned()),
        ("allowWatchBookmarks", "true".to_owned()),
        ("resourceVersion", from.to_string()),
        ("timeoutSeconds", CATCH_UP_TIMEOUT_SECONDS.to_string()),
    ];
    let resp = upstream_get(upstream, collection_uri(cache, &params)).await.map_err(|e| error_chain(&e))?;
    if !resp.status().is_success() {
        return Err(format!("catch-up watch answered {}", resp.status()));
    }
    let mut body = resp.into_body();
    let mut lines = LineSplitter::default();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else { continue };
        lines.push(&data);
        while let Some(line) = lines.next_line() {
            let change = match read_line(cache, &line) {
                Ok(Some(change)) => change,
                Ok(None) => continue,
                Err(LineEnd::Expired) => return Err("expired".into()),
                Err(LineEnd::Failed(e)) => return Err(e),
            };
            let is_bookmark = matches!(change, Change::Bookmark(_));
            cache.freshness().catch_up.send_timeout(change, QUEUE_WAIT).await.map_err(|e| e.to_string())?;
            if is_bookmark {
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
