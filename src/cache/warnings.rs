//! The API server's `Warning` headers, replayed on the cache's answers.
//!
//! kube-apiserver adds the deprecation warning of a resource and version
//! (`v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1
//! EndpointSlice`, and a custom resource version marked deprecated) to
//! every request its route serves, reads included, before the handler runs:
//! a 404 GET and a watch carry it too (apiserver's `endpoints/installer.go`,
//! `AddWarningsHandler`). They belong to the resource, so the reflector's own
//! list responses carry the same ones a client's read would: the cache
//! records them at each full list ([`Warnings::record`]) and adds them to
//! every answer it serves ([`Warnings::add_to`]), in the API server's order.
//!
//! The other warnings kube-apiserver sends on a read belong to one request,
//! to its credentials: the bearer-token authenticator's (an `Authorization`
//! header with two spaces) and a token webhook's (with the webhook's agent,
//! not `-`). On the reflector's list they describe watchmux's own
//! credentials, not a client's, so they are not replayed
//! ([`belongs_to_the_resource`]). Writes (admission, field validation)
//! always pass through, with every header the API server sends.

use std::sync::Arc;

use http::{HeaderMap, HeaderValue, header};
use parking_lot::RwLock;

/// The warnings of one cached resource's reads.
#[derive(Debug, Default)]
pub(crate) struct Warnings(RwLock<Arc<[HeaderValue]>>);

impl Warnings {
    /// Keeps the resource's warnings from a list response of the
    /// reflector's; returns whether they changed.
    pub(crate) fn record(&self, headers: &HeaderMap) -> bool {
        let now: Arc<[HeaderValue]> =
            headers.get_all(header::WARNING).iter().filter(|v| belongs_to_the_resource(v)).cloned().collect();
        let mut kept = self.0.write();
        if *kept == now {
            return false;
        }
        *kept = now;
        true
    }

    /// Adds them to an answer served from the cache.
    pub(crate) fn add_to(&self, headers: &mut HeaderMap) {
        for value in self.0.read().iter() {
            headers.append(header::WARNING, value.clone());
        }
    }
}

/// The bearer-token authenticator's warning (apiserver's
/// `authentication/request/bearertoken`): about the request's own header.
const BEARER_TOKEN_SPACE: &str = "the provided Authorization header contains extra space before the bearer token";

/// Whether a `Warning` value (`299 <agent> "<text>"`, RFC 7234) is the
/// resource's rather than the request's: the API server's own agent (`-`),
/// and not about the request's credentials.
fn belongs_to_the_resource(value: &HeaderValue) -> bool {
    let Ok(text) = value.to_str() else { return false };
    let mut parts = text.splitn(3, ' ');
    let (Some(_code), Some(agent), Some(quoted)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    agent == "-" && !quoted.contains(BEARER_TOKEN_SPACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDPOINTS: &str = r#"299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice""#;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::WARNING, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_resources_warnings_are_replayed_in_order_and_the_requests_are_not() {
        let w = Warnings::default();
        let crd = r#"299 - "example.com/v1beta1 Widget is deprecated; use example.com/v1 Widget""#;
        let bearer = format!(r#"299 - "{BEARER_TOKEN_SPACE}, and is ignored""#);
        let webhook = r#"299 token-webhook "your token expires soon""#;
        assert!(w.record(&headers(&[ENDPOINTS, &bearer, webhook, crd])));
        let mut answer = HeaderMap::new();
        answer.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        w.add_to(&mut answer);
        let replayed: Vec<_> = answer.get_all(header::WARNING).iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(replayed, [ENDPOINTS, crd]);
    }

    #[test]
    fn a_resource_no_longer_deprecated_loses_its_warning() {
        let w = Warnings::default();
        assert!(w.record(&headers(&[ENDPOINTS])));
        assert!(!w.record(&headers(&[ENDPOINTS])), "unchanged");
        assert!(w.record(&HeaderMap::new()));
        let mut answer = HeaderMap::new();
        w.add_to(&mut answer);
        assert!(answer.get(header::WARNING).is_none());
    }
}
