//! The request's host: read as Go's HTTP server reads it, and checked in
//! trusted-local mode as `kubectl proxy --accept-hosts` does.
//!
//! Every request first gets Go's own answers to a bad `Host`: two `Host`
//! headers, a missing one on HTTP/1.1, or bytes no host may hold (`@`,
//! spaces) are a `400 Bad Request` before any handler, as kube-apiserver's
//! Go server gives them.
//!
//! In trusted-local mode whoever reaches the listener acts with watchmux's
//! credentials. A web page can make a browser send requests to loopback;
//! with DNS rebinding, its own host name then resolves to 127.0.0.1 and the
//! browser lets the page read the answers. Such requests carry the page's
//! host name in `Host` (`:authority` in HTTP/2), never `localhost`, so
//! requests whose host is not on the accept list get `kubectl proxy`'s 403
//! before anything else is done. Stricter than `kubectl proxy` on purpose:
//! when a request names its host twice (an absolute-form URI or HTTP/2
//! `:authority`, and `Host`), both must be accepted, and a port must be
//! digits (`localhost:80@evil.example` is no loopback name). Delegated mode
//! authenticates every request and needs no such check; unix-socket clients
//! cannot be a browser. The admin listener ([`AdminHosts`]) answers only IP
//! literals and `localhost`, so a rebinding page cannot read `/metrics`.

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

    /// True when every host the request names (the URI's authority, from an
    /// absolute-form request line or HTTP/2 `:authority`, and `Host`) is
    /// accepted. A request naming no host is not.
    pub fn accepts(&self, uri: &Uri, headers: &HeaderMap) -> bool {
        accepts_every_host(uri, headers, |host| self.0.is_match(host))
    }
}

/// The admin listener's host check: an IP literal (never the result of a
/// rebinding; Prometheus and the kubelet's probes address pods by IP) or
/// `localhost`, with or without a port.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AdminHosts;

impl AdminHosts {
    pub(crate) fn accepts(self, uri: &Uri, headers: &HeaderMap) -> bool {
        accepts_every_host(uri, headers, |host| {
            let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
            host.eq_ignore_ascii_case("localhost") || literal.parse::<std::net::IpAddr>().is_ok()
        })
    }
}

/// True when the request names at least one host and `accept` takes each
/// (without its port); a host whose port is not digits is refused.
fn accepts_every_host(uri: &Uri, headers: &HeaderMap, accept: impl Fn(&str) -> bool) -> bool {
    let from_uri = uri.authority().map(|a| a.as_str());
    let from_header = headers.get(header::HOST).map(|h| h.to_str().ok());
    let named: Vec<Option<&str>> = from_uri.map(Some).into_iter().chain(from_header).collect();
    !named.is_empty() && named.into_iter().all(|h| h.and_then(split_port).is_some_and(&accept))
}

/// `host:port` → `host`, `[::1]:80` → `[::1]`, as Go's SplitHostPort, or the
/// whole value when it has no port; `None` when what follows the host's last
/// `:` is not a port (digits, or nothing).
fn split_port(host: &str) -> Option<&str> {
    let port_ok = |port: &str| port.bytes().all(|b| b.is_ascii_digit());
    let bracketed = host.starts_with('[');
    match host.rfind(':') {
        Some(i) if bracketed => match host.find(']') {
            Some(end) if end + 1 == i => port_ok(&host[i + 1..]).then_some(&host[..i]),
            Some(end) if end + 1 == host.len() => Some(host),
            _ => None,
        },
        Some(i) if !host[..i].contains(':') => port_ok(&host[i + 1..]).then_some(&host[..i]),
        _ => Some(host),
    }
}

/// Why Go's HTTP server refuses a request's `Host` before any handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadHost {
    /// More than one `Host` header (`readRequest`: "too many Host headers";
    /// Go answers its generic 400).
    TooMany,
    /// HTTP/1.1 without `Host`.
    Missing,
    /// A byte `httpguts.ValidHostHeader` does not allow.
    Malformed,
}

/// Go's server-side checks of `Host`, for HTTP/1.x requests (HTTP/2 carries
/// `:authority`, which hyper validates as a URI authority).
pub(crate) fn check_host_header(version: http::Version, headers: &HeaderMap) -> Result<(), BadHost> {
    if version >= http::Version::HTTP_2 {
        return Ok(());
    }
    let mut hosts = headers.get_all(header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (Some(_), Some(_)) => Err(BadHost::TooMany),
        (None, _) if version == http::Version::HTTP_11 => Err(BadHost::Missing),
        (Some(host), None) if !host.as_bytes().iter().all(|b| is_valid_host_byte(*b)) => Err(BadHost::Malformed),
        _ => Ok(()),
    }
}

/// `httpguts.validHostByte`: what a `Host` value may hold (no `@`, no
/// spaces, no `/`).
fn is_valid_host_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!$%&()*+,-.:;=[]_~'".contains(&b)
}

/// Go's answer to a bad `Host`: plain text, and the connection closed.
pub(crate) fn bad_request(why: BadHost) -> Response<ProxyBody> {
    let text = match why {
        BadHost::TooMany => "400 Bad Request",
        BadHost::Missing => "400 Bad Request: missing required Host header",
        BadHost::Malformed => "400 Bad Request: malformed Host header",
    };
    let mut resp = Response::new(body::full(text));
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    resp
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
    fn every_host_a_request_names_must_be_accepted() {
        let hosts = AcceptHosts::new(DEFAULT_ACCEPT_HOSTS.split(',')).unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "evil.example".parse().unwrap());
        // An absolute-form URI naming localhost does not launder the Host.
        assert!(!hosts.accepts(&"http://localhost/api".parse().unwrap(), &h));
        h.insert(header::HOST, "localhost:6443".parse().unwrap());
        assert!(hosts.accepts(&"http://127.0.0.1:6443/api".parse().unwrap(), &h));
        // What follows the last colon must be a port.
        for bad in ["localhost:80@evil.example", "localhost:x", "127.0.0.1:80:81", "[::1]:8x", "[::1]z"] {
            assert!(!accepts(&hosts, bad), "{bad}");
        }
        assert!(accepts(&hosts, "localhost:"), "an empty port, as Go's SplitHostPort allows");
    }

    #[test]
    fn the_admin_listener_answers_ip_literals_and_localhost_only() {
        let admin = |host: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, host.parse().unwrap());
            AdminHosts.accepts(&"/metrics".parse().unwrap(), &h)
        };
        for ok in ["127.0.0.1:9444", "10.1.2.3:9444", "[::1]:9444", "[fd00::1]", "localhost", "LOCALHOST:9444"] {
            assert!(admin(ok), "{ok}");
        }
        for bad in ["evil.example:9444", "127.0.0.1.nip.io:9444", "localhost.evil.example", "10.1.2.3:9444@evil"] {
            assert!(!admin(bad), "{bad}");
        }
        assert!(!AdminHosts.accepts(&"/metrics".parse().unwrap(), &HeaderMap::new()));
    }

    #[test]
    fn host_headers_get_gos_own_400s() {
        use http::Version;
        let with = |hosts: &[&str]| {
            let mut h = HeaderMap::new();
            for v in hosts {
                h.append(header::HOST, header::HeaderValue::from_bytes(v.as_bytes()).unwrap());
            }
            h
        };
        assert_eq!(check_host_header(Version::HTTP_11, &with(&["a", "b"])), Err(BadHost::TooMany));
        assert_eq!(check_host_header(Version::HTTP_11, &with(&["a", "a"])), Err(BadHost::TooMany));
        assert_eq!(check_host_header(Version::HTTP_11, &with(&[])), Err(BadHost::Missing));
        assert_eq!(check_host_header(Version::HTTP_10, &with(&[])), Ok(()));
        for bad in ["localhost:80@evil.example", "a b", "a/b", "a\\b", "h\u{e9}"] {
            assert_eq!(check_host_header(Version::HTTP_11, &with(&[bad])), Err(BadHost::Malformed), "{bad}");
        }
        for ok in ["localhost:6443", "[::1]:80", "a_b.example", "[fe80::1%25eth0]"] {
            assert_eq!(check_host_header(Version::HTTP_11, &with(&[ok])), Ok(()), "{ok}");
        }
        assert_eq!(check_host_header(Version::HTTP_2, &with(&["a", "b"])), Ok(()));
        let resp = bad_request(BadHost::Malformed);
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        assert_eq!(resp.headers()[header::CONNECTION], "close");
    }

    #[test]
    fn patterns_are_regular_expressions_and_bad_ones_are_errors() {
        let hosts = AcceptHosts::new([r"^watchmux(\..+)?$"]).unwrap();
        assert!(accepts(&hosts, "watchmux.kube-system.svc:443"));
        assert!(!accepts(&hosts, "localhost"));
        assert!(AcceptHosts::new(["("]).is_err());
    }
}
