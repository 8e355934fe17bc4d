//! The upstream's Kubernetes minor, read from its `/version` once at start
//! (`App::serve`, with a cache or delegated auth), before any cache lists:
//! it chooses which minor's generated forms (protobuf schema, Table columns
//! and printers, bookmark objects) watchmux writes and whose impersonation
//! rules delegated auth applies ([`crate::encode::minor`]).
//!
//! Read once, not per request: one watchmux has one upstream, and an
//! encoding is kept with each cached object, so the choice must stand
//! before the first one is made. An upstream that cannot be read within
//! [`VERSION_TIMEOUT`] (down at start, a persisted cache serving offline)
//! leaves the pinned minor standing, with a warning; the schema check at
//! each full list still compares every cached kind with what the upstream
//! serves and passes a drifted kind's protobuf through. The wait is short
//! because it holds start-up back: an offline node-local serves its
//! persisted caches at most that much later.

use std::time::Duration;

use crate::cache::sync::schema_check::fetch;
use crate::encode::minor::{self, Selection};
use crate::metrics as m;
use crate::upstream::Upstream;

/// How long start-up waits for `/version` (a few hundred bytes).
pub(crate) const VERSION_TIMEOUT: Duration = Duration::from_secs(2);

/// Reads the upstream's `/version` and selects its minor's forms.
pub(crate) async fn select_upstream_minor(upstream: &Upstream) {
    let read = match tokio::time::timeout(VERSION_TIMEOUT, fetch(upstream, "/version")).await {
        Ok(Ok(info)) => {
            minor::parse_version(&info).ok_or_else(|| format!("/version: no Kubernetes 1.x minor in {info}"))
        }
        Ok(Err(why)) => Err(why),
        Err(_) => Err(format!("/version: no answer within {VERSION_TIMEOUT:?}")),
    };
    let upstream_minor = match read {
        Ok(upstream_minor) => upstream_minor,
        Err(why) => {
            tracing::warn!(
                error = %why,
                pinned = format!("1.{}", minor::PINNED),
                "the upstream's Kubernetes version is unknown: the pinned minor's forms stand, each cached kind's protobuf checked against its served schema"
            );
            return;
        }
    };
    let selection = minor::select(upstream_minor);
    let (served, supported) = match selection {
        Selection::Supported(served) => (served, true),
        Selection::Unsupported { nearest, .. } => (nearest, false),
    };
    if supported {
        tracing::info!(upstream = format!("1.{upstream_minor}"), "upstream Kubernetes minor: its own forms are served");
    } else {
        tracing::warn!(
            upstream = format!("1.{upstream_minor}"),
            protobuf_table = format!("1.{served}"),
            supported = ?minor::SUPPORTED,
            "upstream Kubernetes minor is not supported: its Tables pass through, its protobuf is checked against its served schema"
        );
    }
    metrics::gauge!(
        m::UPSTREAM_MINOR,
        "minor" => format!("1.{upstream_minor}"),
        "served" => format!("1.{served}"),
        "supported" => supported.to_string()
    )
    .set(1.0);
}
