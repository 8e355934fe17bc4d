//! Header rules for a reverse proxy (RFC 9110 §7.6.1): hop-by-hop headers
//! describe one connection and must not be forwarded; everything else is.

use std::net::IpAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

/// Headers that are hop-by-hop whether or not `Connection` names them.
const HOP_BY_HOP: &[HeaderName] = &[
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Non-standard hop-by-hop headers still seen in the wild.
const LEGACY_HOP_BY_HOP: &[&str] = &["keep-alive", "proxy-connection"];

/// Removes hop-by-hop headers, including every header `Connection` lists,
/// except identity headers: who a request is from is decided by
/// [`super::identity::apply`], never by a client's `Connection` header.
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .filter(|name| !super::identity::is_identity_header(name))
        .collect();
    for name in listed.iter().chain(HOP_BY_HOP) {
        headers.remove(name);
    }
    for name in LEGACY_HOP_BY_HOP {
        headers.remove(*name);
    }
}

/// True for an HTTP/1.1 request asking to switch protocols (SPDY/3.1 for
/// exec, attach and port-forward; WebSocket for their newer forms).
pub(crate) fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE) && connection_has_token(headers, "upgrade")
}

fn connection_has_token(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// Removes hop-by-hop headers but keeps the upgrade handshake itself.
pub(crate) fn remove_hop_by_hop_keep_upgrade(headers: &mut HeaderMap) {
    let upgrade = headers.get(header::UPGRADE).cloned();
    remove_hop_by_hop(headers);
    if let Some(upgrade) = upgrade {
        headers.insert(header::UPGRADE, upgrade);
        headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    }
}

/// Appends the client's address to `X-Forwarded-For`, which kube-apiserver
/// records as the request's source IPs in audit logs.
pub(crate) fn append_forwarded_for(headers: &mut HeaderMap, client: IpAddr) {
    static XFF: HeaderName = HeaderName::from_static("x-forwarded-for");
    let value = match headers.get(&XFF).and_then(|v| v.to_str().ok()) {
        Some(prior) if !prior.trim().is_empty() => format!("{prior}, {client}"),
        _ => client.to_string(),
    };
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.insert(&XFF, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn hop_by_hop_and_connection_listed_headers_are_removed() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Custom, Impersonate-User, authorization"),
            ("authorization", "Bearer t"),
            ("keep-alive", "timeout=5"),
            ("x-custom", "1"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("accept", "application/json"),
            ("impersonate-user", "bob"),
        ]);
        remove_hop_by_hop(&mut h);
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            left,
            vec!["accept", "authorization", "impersonate-user"],
            "identity headers are not Connection's to remove"
        );
    }

    #[test]
    fn upgrade_detection_and_preservation() {
        let mut h = map(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
        ]);
        assert!(is_upgrade_request(&h));
        remove_hop_by_hop_keep_upgrade(&mut h);
        assert_eq!(h[header::UPGRADE], "SPDY/3.1");
        assert_eq!(h[header::CONNECTION], "Upgrade");
        assert_eq!(h["x-stream-protocol-version"], "v4.channel.k8s.io");
        assert!(!is_upgrade_request(&map(&[("upgrade", "websocket")])), "Upgrade without Connection: upgrade");
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = map(&[("x-forwarded-for", "10.0.0.1")]);
        append_forwarded_for(&mut h, "127.0.0.1".parse().unwrap());
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        let mut h = HeaderMap::new();
        append_forwarded_for(&mut h, "::1".parse().unwrap());
        assert_eq!(h["x-forwarded-for"], "::1");
    }
}
