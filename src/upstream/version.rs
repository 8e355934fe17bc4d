//! The upstream's Kubernetes minor, read from each API server's `/version`
//! and followed while they are upgraded: it chooses which minor's generated
//! forms (protobuf schema, Table columns and printers, bookmark objects)
//! watchmux writes and whose impersonation rules delegated auth applies
//! ([`crate::encode::minor`]).
//!
//! **At start** (`App::serve`, with a cache or delegated auth), before any
//! cache lists, every endpoint's `/version` is read at once. An upstream that
//! answers none within [`VERSION_TIMEOUT`] (down at start, a persisted
//! cache serving offline) leaves the pinned minor standing, with a warning,
//! until it does; the schema check at each full list still compares every
//! cached kind with what the upstream serves and passes a drifted kind's
//! protobuf through. The wait is short because it holds start-up back: an
//! offline node-local serves its persisted caches at most that much later.
//!
//! **After start**, with each readiness probe ([`refresh`]), an endpoint's
//! `/version` is read again when it becomes ready (an API server stopped
//! for an upgrade comes back as the new minor) and every
//! [`MINOR_REFRESH`]. The minor served is the **oldest among the ready
//! API servers**. During a rolling upgrade the cluster answers in two
//! minors; the older form is the one every client has been reading, and no
//! field only the newer minor has is written until every API server
//! writes it. Once the last one is upgraded the newer form is served, and
//! an encoding kept from before is used only where its kind is written
//! alike in both (`cache::state::object`). A rollback is followed the same
//! way. What one `/version` cannot tell: an upstream that is a load
//! balancer over API servers of two minors answers each read from one of
//! them; there, the minor follows whichever answers the probe connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Upstream;
use super::endpoints::Endpoint;
use crate::encode::minor::{self, Selection};
use crate::metrics as m;

/// How long start-up waits for `/version` (a few hundred bytes).
pub(crate) const VERSION_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a ready endpoint's `/version` is read again: the bound on how
/// long an upgrade the probe did not see (an API server replaced between
/// two probes) goes unnoticed. Also the wait after an answer that names no
/// minor: asking again sooner would get the same.
pub(crate) const MINOR_REFRESH: Duration = Duration::from_secs(60);

/// How soon a `/version` that got no answer (a refused or dropped
/// connection, a timeout, a status other than 200) is read again: an API
/// server starting, or one behind a load balancer that was not ready.
pub(crate) const MINOR_RETRY: Duration = Duration::from_secs(10);

/// Reads every endpoint's `/version` and selects the oldest minor's forms.
pub(crate) async fn select_upstream_minor(upstream: &Upstream) {
    upstream.follows_minor.store(true, Ordering::Relaxed);
    let endpoints = upstream.builder.endpoints.all();
    let several = endpoints.len() > 1;
    let reads = futures_util::future::join_all(endpoints.iter().map(|e| upstream.read_minor(e, VERSION_TIMEOUT))).await;
    let mut failures = Vec::new();
    for (endpoint, read) in endpoints.iter().zip(reads) {
        match read {
            Ok(read) => endpoint.read_minor(read, MINOR_REFRESH, several),
            Err(why) => {
                endpoint.minor_unread(why.next_read());
                failures.push(format!("{}: {why}", endpoint.uri()));
            }
        }
    }
    if failures.len() == endpoints.len() {
        tracing::warn!(
            error = %failures.join("; "),
            pinned = format!("1.{}", minor::PINNED),
            "the upstream's Kubernetes version is unknown: the pinned minor's forms stand until it answers, each cached kind's protobuf checked against its served schema"
        );
        return;
    }
    follow(&endpoints);
}

/// With a readiness probe: reads the `/version` of each ready endpoint
/// that is due ([`Endpoint::minor_due`]), then serves the oldest minor of
/// the ready ones. A read that got no answer is tried again after
/// [`MINOR_RETRY`], one whose answer named no minor after [`MINOR_REFRESH`].
pub(crate) async fn refresh(upstream: &Upstream, endpoints: &[Arc<Endpoint>]) {
    if !upstream.follows_minor.load(Ordering::Relaxed) {
        return;
    }
    let several = endpoints.len() > 1;
    let due: Vec<&Arc<Endpoint>> = endpoints.iter().filter(|e| e.minor_due()).collect();
    let reads = futures_util::future::join_all(due.iter().map(|e| upstream.read_minor(e, VERSION_TIMEOUT))).await;
    for (endpoint, read) in due.into_iter().zip(reads) {
        match read {
            Ok(read) => endpoint.read_minor(read, MINOR_REFRESH, several),
            Err(why) => {
                tracing::debug!(endpoint = %endpoint.uri(), error = %why, "reading an upstream endpoint's /version");
                endpoint.minor_unread(why.next_read());
            }
        }
    }
    follow(endpoints);
}

/// Serves the oldest minor among the healthy endpoints whose minor is
/// known, if that is not the one served already; none known leaves it.
fn follow(endpoints: &[Arc<Endpoint>]) {
    let Some(oldest) = oldest_serving(endpoints) else { return };
    let before = minor::upstream();
    if before != Some(oldest) {
        select(oldest, before);
    }
}

/// Why a `/version` read gave no minor.
#[derive(Debug)]
pub(crate) enum Unread {
    /// No answer, or not a 200: asked again after [`MINOR_RETRY`].
    NoAnswer(String),
    /// A 200 that names no Kubernetes 1.x minor: after [`MINOR_REFRESH`].
    NoMinor(String),
}

impl Unread {
    fn next_read(&self) -> Duration {
        match self {
            Self::NoAnswer(_) => MINOR_RETRY,
            Self::NoMinor(_) => MINOR_REFRESH,
        }
    }
}

impl std::fmt::Display for Unread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoAnswer(why) | Self::NoMinor(why) => f.write_str(why),
        }
    }
}

/// The oldest minor among the healthy endpoints whose minor is known.
fn oldest_serving(endpoints: &[Arc<Endpoint>]) -> Option<u8> {
    endpoints.iter().filter_map(|e| e.serving_minor()).min()
}

/// Makes `upstream_minor` the one whose forms are written, said in the log
/// and `watchmux_upstream_minor_info`.
fn select(upstream_minor: u8, before: Option<u8>) {
    let selection = minor::select(upstream_minor);
    let (served, supported) = labels(selection);
    let changed = before.map(|b| format!("1.{b}"));
    if supported {
        tracing::info!(
            upstream = format!("1.{upstream_minor}"),
            before = changed.as_deref(),
            "upstream Kubernetes minor: its own forms are served"
        );
    } else {
        tracing::warn!(
            upstream = format!("1.{upstream_minor}"),
            before = changed.as_deref(),
            protobuf_table = format!("1.{served}"),
            supported = ?minor::SUPPORTED,
            "upstream Kubernetes minor is not supported: its Tables pass through, its protobuf is checked against its served schema"
        );
    }
    if let Some(before) = before {
        let (served, supported) = labels(minor::Selection::of(before));
        info_gauge(before, served, supported).set(0.0);
    }
    info_gauge(upstream_minor, served, supported).set(1.0);
}

/// The minor whose tables are used, and whether the upstream's is supported.
fn labels(selection: Selection) -> (u8, bool) {
    match selection {
        Selection::Supported(served) => (served, true),
        Selection::Unsupported { nearest, .. } => (nearest, false),
    }
}

fn info_gauge(upstream_minor: u8, served: u8, supported: bool) -> metrics::Gauge {
    metrics::gauge!(
        m::UPSTREAM_MINOR,
        "minor" => format!("1.{upstream_minor}"),
        "served" => format!("1.{served}"),
        "supported" => supported.to_string()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::endpoints::Endpoints;

    /// Three API servers mid-upgrade, as each probe and `/version` read
    /// leaves them.
    #[tokio::test(start_paused = true)]
    async fn the_oldest_ready_minor_is_served_and_a_returning_server_is_read_again() {
        let endpoints = Endpoints::new((1..=3).map(|i| format!("https://10.0.0.{i}:6443").parse().unwrap())).all();
        assert_eq!(oldest_serving(&endpoints), None, "nothing read yet");
        for e in endpoints.iter() {
            assert!(!e.minor_due(), "not probed yet: start-up reads it");
            e.read_minor(36, MINOR_REFRESH, false);
            e.probed(true, false);
            assert!(!e.minor_due(), "read at start, ready at the first probe");
        }
        assert_eq!(oldest_serving(&endpoints), Some(36));

        // The first is stopped for its upgrade: its minor no longer counts.
        endpoints[0].probed(false, false);
        assert_eq!(endpoints[0].serving_minor(), None);
        assert!(!endpoints[0].minor_due(), "not ready: nothing to read");
        // It comes back: read again before its old minor is believed.
        endpoints[0].probed(true, false);
        assert!(endpoints[0].minor_due(), "back from a stop: maybe upgraded");
        // Its first read gets no answer: tried again soon, the old minor kept.
        endpoints[0].minor_unread(MINOR_RETRY);
        assert!(!endpoints[0].minor_due());
        assert_eq!(oldest_serving(&endpoints), Some(36));
        tokio::time::advance(MINOR_RETRY).await;
        assert!(endpoints[0].minor_due(), "retried after MINOR_RETRY");
        endpoints[0].read_minor(37, MINOR_REFRESH, false);
        assert_eq!(oldest_serving(&endpoints), Some(36), "two still run 1.36");

        for e in &endpoints[1..] {
            e.probed(false, false);
            e.probed(true, false);
            e.read_minor(37, MINOR_REFRESH, false);
        }
        assert_eq!(oldest_serving(&endpoints), Some(37), "every ready one runs 1.37");

        // Read again every MINOR_REFRESH, even without a stop the probe saw.
        assert!(!endpoints[1].minor_due());
        tokio::time::advance(MINOR_REFRESH).await;
        assert!(endpoints[1].minor_due());
    }
}
