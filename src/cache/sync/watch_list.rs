//! A cache's full list taken as a watch-list (`--upstream-watch-list`), as
//! client-go's reflector takes it since v1.35: one watch with
//! `sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, whose
//! initial events are the state, ended by the bookmark annotated
//! `k8s.io/initial-events-end` at the version they make up, and which then
//! goes on as the cache's watch from that version.
//!
//! Why a cache would: a paginated consistent LIST is the one read another
//! watchmux cannot serve from its cache unless it proves itself current at
//! once, so a node-local watchmux in front of a tier sends its every list
//! through to kube-apiserver, and a fleet of them restarting sends
//! thousands (docs/benchmarks.md, "5,000 nodes", side (c)). A watch-list is
//! what a tier serves from its cache for a whole storm with one proof; from
//! kube-apiserver itself it is served from its watch cache, streamed, with
//! no page held whole. The version it ends at is as consistent as a LIST's:
//! at least the storage's revision when it was asked.
//!
//! An upstream that does not serve watch-lists says so: 400 or 422 for
//! the parameters (an older server, or the WatchList feature off), or a
//! watch that never marks the end of its initial events (one that ignores
//! the parameters sends no end bookmark, but may send ordinary ones, or
//! end at its timeout). The reflector then lists in pages from then on. A
//! watch that ends before its timeout without the end (the upstream
//! restarting: a tier's rollout, kube-apiserver's graceful shutdown) is a
//! failure, asked again after the backoff: one restart must not turn a
//! fleet of node-locals to paginated LISTs for good.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;

use crate::cache::state::object::ObjectShape;
use crate::cache::state::store::{Objects, ObjectsBuilder};
use crate::cache::upstream_wire::{Line, LineEnd};
use crate::cache::upstream_wire::{ReflectorError, StreamEnd, WatchLines, upstream_get};
use crate::encode::watch::EventType;
use crate::upstream::Upstream;
use crate::upstream::bounded_read;

/// The longest the upstream may send nothing at all before the initial
/// events' end: a tier proving its cache fresh takes a few seconds
/// (`FRESHNESS_BUDGET` and a catch-up), kube-apiserver's watch cache a few
/// more at worst.
const INITIAL_EVENTS_SILENCE: Duration = Duration::from_secs(60);

/// A watch-list's initial events, and the watch going on after them.
pub(crate) struct WatchListed {
    pub objects: Objects,
    /// The version of the end bookmark: the state's.
    pub rv: u64,
    /// The same watch, after its end bookmark.
    pub stream: WatchLines,
}

/// Why a watch-list gave no state.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchListError {
    /// The upstream does not serve watch-lists: list in pages instead.
    #[error("the upstream serves no watch-list")]
    Unsupported(#[source] Unsupported),
    /// It does, but this one failed (back off and ask again): no answer,
    /// or a refusal other than [`Unsupported::Refused`].
    #[error(transparent)]
    Failed(ReflectorError),
    /// The watch ended before its initial events did (the upstream
    /// restarting, or silent for [`INITIAL_EVENTS_SILENCE`]).
    #[error("it ended before its initial events did")]
    Ended(#[source] StreamEnd),
}

/// How an upstream shows that it serves no watch-lists.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unsupported {
    /// 400 or 422 for the parameters.
    #[error("{status}: {body}")]
    Refused { status: StatusCode, body: String },
    /// A server that ignored the parameters: its watch ended at its timeout.
    #[error("the watch ended at its timeout without an initial-events-end bookmark")]
    NoEndBookmark,
    /// A server watching from "now": it will never mark an end.
    #[error("a bookmark at {0} before the end of the initial events")]
    BookmarkBeforeEnd(u64),
}

/// The query of a watch-list that the upstream ends after `timeout_seconds`
/// (a cache's scope goes after it: `ResourceCache::collection_uri`).
pub(crate) fn params(timeout_seconds: u64) -> [(&'static str, String); 5] {
    [
        ("watch", "true".to_owned()),
        ("sendInitialEvents", "true".to_owned()),
        ("resourceVersionMatch", "NotOlderThan".to_owned()),
        ("allowWatchBookmarks", "true".to_owned()),
        ("timeoutSeconds", timeout_seconds.to_string()),
    ]
}

/// Takes a cache's state from the upstream as the watch-list at `uri`
/// (its collection with [`params`] of `timeout_seconds`), of objects of
/// `shape`. Items that cannot be decoded are skipped, as a paginated list
/// skips them; `label` names the cache in that warning.
pub(crate) async fn watch_list(
    upstream: &Upstream,
    uri: String,
    timeout_seconds: u64,
    shape: &ObjectShape,
    label: &str,
) -> Result<WatchListed, WatchListError> {
    let asked = Instant::now();
    let resp = upstream_get(upstream, uri).await.map_err(WatchListError::Failed)?;
    let status = resp.status();
    if !status.is_success() {
        let body = bounded_read::read_prefix(resp.into_body(), bounded_read::REFUSAL_BYTES).await;
        let body = String::from_utf8_lossy(&body).into_owned();
        return Err(match status {
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
                WatchListError::Unsupported(Unsupported::Refused { status, body })
            }
            _ => WatchListError::Failed(ReflectorError::Status { status, body }),
        });
    }
    let mut stream = WatchLines::new(resp);
    let mut objects = ObjectsBuilder::new();
    loop {
        let line = match stream.next_line(Some(INITIAL_EVENTS_SILENCE)).await {
            Ok(line) => line,
            // A server that ignored the parameters ends at its timeout
            // without ever marking the end; one that ends sooner is
            // stopping (a restart), and is asked again.
            Err(StreamEnd::Closed)
                if asked.elapsed() + Duration::from_secs(1) >= Duration::from_secs(timeout_seconds) =>
            {
                return Err(WatchListError::Unsupported(Unsupported::NoEndBookmark));
            }
            Err(end) => return Err(WatchListError::Ended(end)),
        };
        match line {
            Line::Blank => {}
            Line::InitialEventsEnd(rv) => return Ok(WatchListed { objects: objects.finish(), rv, stream }),
            // The API server sends a watch-list no other bookmark before the
            // end of its initial events; a server that does is watching
            // from "now" and will never mark an end.
            Line::Bookmark(rv) => {
                return Err(WatchListError::Unsupported(Unsupported::BookmarkBeforeEnd(rv)));
            }
            Line::Event(kind, object) => match object.decode(shape) {
                Ok(obj) if kind == EventType::Deleted => {
                    objects.remove(&obj.key);
                }
                Ok(obj) => objects.insert(Arc::new(obj)),
                Err(LineEnd::Undecodable(err)) => {
                    tracing::warn!(resource = %label, error = %err, "skipping undecodable item");
                }
                Err(end) => return Err(WatchListError::Ended(StreamEnd::Line(end))),
            },
        }
    }
}

#[cfg(test)]
mod tests;
