//! The Host check of trusted-local mode, as `kubectl proxy --accept-hosts`
//! does it.
//!
//! In trusted-local mode whoever reaches the listener acts with watchmux's
//! credentials. A web page can make a browser send requests to loopback;
//! with DNS rebinding, its own host name then resolves to 127.0.0.1 and the
//! browser lets the page read the answers. Such requests carry the page's
//! host name in `Host` (`:authority` in HTTP/2), never `localhost`, so
//! requests whose host is not on the accept list get `kubectl proxy`'s 403
//! before anything else is done. Delegated mode authenticates every request
//! and needs no such check; unix-socket clients cannot be a browser.

use std::sync::Arc;

use http::header::{self, HeaderMap};
use http::{Response, StatusCode, Uri};
use regex::RegexSet;

use crate::body::{self, ProxyBody};

/// Host name patterns (regular expressions, matched against the host
/// without its port) that requests may name. Shared: cloning a `RegexSet`
/// builds it a cache pool of its own, and the handler holding this is cloned
/// for every connection and request (about 1.9 KiB per idle connection).
#[derive(Debug, Clone)]
pub struct AcceptHosts(Arc<RegexSet>);

#[derive(Debug, thiserror::Error)]
#[error("--accept-hosts: {0}")]
pub struct AcceptHostsError(#[source] regex::Error);

impl AcceptHosts {
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(patterns: I) -> Result<Self, AcceptHostsError> {
        let patterns: Vec<String> =
            patterns.into_iter().map(|p| p.as_ref().trim().to_owned()).filter(|p| !p.is_empty()).collect();
        RegexSet::new(patterns).map(|set| Self(Arc::new(set))).map_err(AcceptHostsError)
    }

    /// True when the request's host (HTTP/2 `:authority`, else `Host`) is
    /// accepted. A request naming no host is not.
    pub fn accepts(&self, uri: &Uri, headers: &HeaderMap) -> bool {
        let host = match uri.authority() {
            Some(authority) => Some(authority.as_str()),
            None => headers.get(header::HOST).and_then(|h| h.to_str().ok()),
        };
        host.is_some_and(|h| self.0.is_match(without_port(h)))
    }
}

/// `host:port` → `host`, `[::1]:80` → `[::1]`, as Go's SplitHostPort, or the
/// whole value when it has no port.
fn without_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(i) if host.starts_with('[') => match host.find(']') {
            Some(end) if end + 1 == i => &host[..i],
            _ => host,
        },
        Some(i) if !host[..i].contains(':') => &host[..i],
        _ => host,
    }
}

/// `kubectl proxy`'s answer to a host it does not accept.
pub(crate) fn forbidden() -> Response<ProxyBody> {
    super::limits::Limit::Host.count();
    let mut resp = Response::new(body::full("Forbidden"));
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_ACCEPT_HOSTS;

    fn accepts(hosts: &AcceptHosts, host: &str) -> bool {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        hosts.accepts(&"/api".parse().unwrap(), &h)
    }

    #[test]
    fn loopback_names_are_accepted_by_default_with_or_without_a_port() {
        let hosts = AcceptHosts::new(DEFAULT_ACCEPT_HOSTS.split(',')).unwrap();
        for ok in ["localhost", "localhost:6443", "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:6443"] {
            assert!(accepts(&hosts, ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "evil.example:6443",
            "x127.0.0.1",
            "",
            "[::1]x",
            "::1",
        ] {
            assert!(!accepts(&hosts, bad), "{bad}");
        }
        assert!(!hosts.accepts(&"/api".parse().unwrap(), &HeaderMap::new()), "no host at all");
    }

    #[test]
    fn the_http2_authority_is_what_counts() {
        let hosts = AcceptHosts::new(DEFAULT_ACCEPT_HOSTS.split(',')).unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "localhost".parse().unwrap());
        assert!(!hosts.accepts(&"http://evil.example/api".parse().unwrap(), &h));
        assert!(hosts.accepts(&"http://127.0.0.1:6443/api".parse().unwrap(), &HeaderMap::new()));
    }

    #[test]
    fn patterns_are_regular_expressions_and_bad_ones_are_errors() {
        let hosts = AcceptHosts::new([r"^watchmux(\..+)?$"]).unwrap();
        assert!(accepts(&hosts, "watchmux.kube-system.svc:443"));
        assert!(!accepts(&hosts, "localhost"));
        assert!(AcceptHosts::new(["("]).is_err());
    }
}
