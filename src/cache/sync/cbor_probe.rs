//! Whether the upstream serves CBOR for a cached resource, learned with one
//! small request beside each full list, so that clients preferring CBOR
//! (client-go with `ClientsAllowCBOR`: `application/json;q=0.9,application/cbor;q=1`)
//! are served from the cache where the API server would answer them JSON.
//!
//! kube-apiserver serves CBOR only with its `CBORServingAndStorage` feature
//! gate on (alpha, off by default in v1.37), one setting for its built-in
//! resources and custom resources alike; an aggregated API server has its own.
//! Neither discovery nor the OpenAPI documents say which, so the probe asks
//! the resource itself: `GET <collection>?limit=1` with `Accept:
//! application/cbor`, the collection the reflector lists (so the rights it
//! needs are the reflector's). With the gate off, the route filter (or, for
//! a custom resource, the handler's negotiation) answers 406 before any
//! storage is read; with it on, a one-item list in CBOR. Any other answer
//! (an error, a timeout) teaches nothing: the cache keeps what it knew, and
//! until it knows, CBOR clauses pass through (`negotiate::UpstreamCbor`).
//!
//! It runs again at every full list (after a reconnect the upstream may be
//! another server, or the same one restarted with other flags); it costs the
//! API server one rejected request.

use std::time::Duration;

use http::{HeaderValue, StatusCode, header};

use crate::cache::resource_info::ResourceInfo;
use crate::cache::upstream_wire::upstream_get_as;
use crate::negotiate::UpstreamCbor;
use crate::upstream::Upstream;
use crate::upstream::bounded_read;

/// How long the probe may take before it teaches nothing.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the upstream whether it serves `info`'s resource in CBOR; `None`
/// when its answer does not say.
pub(crate) async fn probe(upstream: &Upstream, info: &ResourceInfo) -> Option<UpstreamCbor> {
    let path = format!("{}?limit=1", info.collection_path(None));
    let asked = async {
        let resp = upstream_get_as(upstream, path, "application/cbor", false).await.ok()?;
        let found = classify(resp.status(), resp.headers().get(header::CONTENT_TYPE));
        // Read to the end (a Status or one object's page), so that an
        // HTTP/1.1 connection goes back to the pool.
        bounded_read::read_whole(resp.into_body(), bounded_read::REFUSAL_BYTES).await.ok()?;
        found
    };
    tokio::time::timeout(PROBE_TIMEOUT, asked).await.ok().flatten()
}

/// What an answer to `Accept: application/cbor` says.
fn classify(status: StatusCode, content_type: Option<&HeaderValue>) -> Option<UpstreamCbor> {
    let cbor = content_type.is_some_and(|ct| ct.as_bytes().starts_with(b"application/cbor"));
    match status {
        _ if cbor => Some(UpstreamCbor::On),
        StatusCode::NOT_ACCEPTABLE => Some(UpstreamCbor::Off),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_cbor_answer_or_a_406_teaches_something() {
        let cbor = HeaderValue::from_static("application/cbor");
        let json = HeaderValue::from_static("application/json");
        assert_eq!(classify(StatusCode::OK, Some(&cbor)), Some(UpstreamCbor::On));
        // An error written in CBOR (a 403 for a server that has it) says it has it.
        assert_eq!(classify(StatusCode::FORBIDDEN, Some(&cbor)), Some(UpstreamCbor::On));
        // The route filter's plain-text 406, and the custom resource handler's JSON Status.
        assert_eq!(classify(StatusCode::NOT_ACCEPTABLE, None), Some(UpstreamCbor::Off));
        assert_eq!(classify(StatusCode::NOT_ACCEPTABLE, Some(&json)), Some(UpstreamCbor::Off));
        assert_eq!(classify(StatusCode::FORBIDDEN, Some(&json)), None);
        assert_eq!(classify(StatusCode::OK, Some(&json)), None);
        assert_eq!(classify(StatusCode::SERVICE_UNAVAILABLE, None), None);
    }
}
