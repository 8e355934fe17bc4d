//! Who a passed-through request acts as upstream, written into its headers
//! in one place and as the very last step before it leaves.
//!
//! The order matters. Hop-by-hop stripping honours the client's `Connection`
//! header, which may name any header at all; were identity headers added
//! first, `Connection: Impersonate-User` would remove watchmux's own
//! impersonation and the request would reach the API server as watchmux.
//! So [`super::headers::remove_hop_by_hop`] runs first, and [`apply`] then
//! removes every identity header the client sent (credentials,
//! impersonation, front-proxy `X-Remote-*`) and writes the chosen identity.

use http::header::{self, HeaderMap, HeaderName};

pub(crate) use crate::auth::UpstreamIdentity;
use crate::auth::impersonation::{self, Unrepresentable};

/// Headers the API server's front-proxy (request-header) authenticator reads
/// by default. watchmux is no front proxy: a client's own are dropped, so an
/// upstream that trusts watchmux's client certificate as a front proxy never
/// takes a client's word for who it is.
const FRONT_PROXY_PREFIX: &str = "x-remote-";

/// Removes every identity header the client sent and writes `identity`'s.
/// Call after hop-by-hop stripping; the upstream client then sets
/// `Authorization` from [`UpstreamIdentity::credential`].
pub(crate) fn apply(headers: &mut HeaderMap, identity: &UpstreamIdentity) -> Result<(), Unrepresentable> {
    headers.remove(header::AUTHORIZATION);
    remove_front_proxy_headers(headers);
    match identity {
        UpstreamIdentity::Watchmux | UpstreamIdentity::ClientCredentials(_) | UpstreamIdentity::Anonymous => Ok(()),
        UpstreamIdentity::Impersonate(caller) => impersonation::impersonate(headers, caller),
    }
}

fn remove_front_proxy_headers(headers: &mut HeaderMap) {
    let names: Vec<HeaderName> =
        headers.keys().filter(|k| k.as_str().starts_with(FRONT_PROXY_PREFIX)).cloned().collect();
    for name in names {
        headers.remove(name);
    }
}

/// True for the headers that say who a request is from. A client's
/// `Connection` header may not remove them: they are [`apply`]'s to decide.
pub(crate) fn is_identity_header(name: &HeaderName) -> bool {
    let n = name.as_str();
    name == header::AUTHORIZATION || n.starts_with(FRONT_PROXY_PREFIX) || impersonation::is_impersonation_header(n)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::HeaderValue;

    use super::*;
    use crate::auth::Caller;
    use crate::auth::user::UserInfo;
    use crate::passthrough::headers::remove_hop_by_hop;
    use crate::upstream::UpstreamCredential;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn alice() -> Caller {
        Arc::new(UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
            ..Default::default()
        })
    }

    #[test]
    fn a_connection_header_naming_identity_headers_cannot_remove_the_impersonation() {
        let mut h = map(&[
            ("connection", "Impersonate-User, Impersonate-Group, Authorization, X-Custom"),
            ("x-custom", "1"),
            ("accept", "application/json"),
        ]);
        remove_hop_by_hop(&mut h);
        apply(&mut h, &UpstreamIdentity::Impersonate(alice())).unwrap();
        assert_eq!(h["impersonate-user"], "alice");
        assert_eq!(h.get_all("impersonate-group").iter().collect::<Vec<_>>(), ["dev", "system:authenticated"]);
        assert!(h.get("x-custom").is_none(), "other listed headers are still hop-by-hop");
        assert!(h.get("connection").is_none());
    }

    #[test]
    fn client_identity_headers_never_survive_impersonation() {
        let mut h = map(&[
            ("authorization", "Bearer client"),
            ("Impersonate-User", "system:admin"),
            ("IMPERSONATE-GROUP", "system:masters"),
            ("impersonate-uid", "u"),
            ("impersonate-extra-scopes", "all"),
            ("x-remote-user", "system:admin"),
            ("X-Remote-Group", "system:masters"),
            ("x-remote-extra-scopes", "all"),
            ("x-remote-uid", "u"),
        ]);
        apply(&mut h, &UpstreamIdentity::Impersonate(alice())).unwrap();
        let mut left: Vec<_> = h.iter().map(|(k, v)| format!("{k}={}", v.to_str().unwrap())).collect();
        left.sort();
        assert_eq!(left, ["impersonate-group=dev", "impersonate-group=system:authenticated", "impersonate-user=alice"]);
    }

    #[test]
    fn own_identity_keeps_client_impersonation_but_not_front_proxy_headers() {
        let mut h = map(&[("authorization", "Bearer c"), ("impersonate-user", "bob"), ("x-remote-user", "root")]);
        apply(&mut h, &UpstreamIdentity::Watchmux).unwrap();
        assert_eq!(h["impersonate-user"], "bob");
        assert!(h.get("authorization").is_none() && h.get("x-remote-user").is_none());
    }

    #[test]
    fn forwarded_and_anonymous_identities_leave_the_clients_impersonation_to_the_api_server() {
        for identity in
            [UpstreamIdentity::ClientCredentials(HeaderValue::from_static("Bearer t")), UpstreamIdentity::Anonymous]
        {
            let mut h = map(&[("impersonate-user", "bob"), ("authorization", "Bearer t"), ("x-remote-user", "root")]);
            apply(&mut h, &identity).unwrap();
            let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
            assert_eq!(left, ["impersonate-user"], "{identity:?}");
        }
        assert_eq!(
            UpstreamIdentity::ClientCredentials(HeaderValue::from_static("Bearer t")).credential(),
            UpstreamCredential::Header(HeaderValue::from_static("Bearer t"))
        );
        assert_eq!(UpstreamIdentity::Anonymous.credential(), UpstreamCredential::None);
        assert_eq!(UpstreamIdentity::Impersonate(alice()).credential(), UpstreamCredential::Watchmux);
    }

    #[test]
    fn identity_headers_are_recognised_in_any_case() {
        for name in ["Authorization", "IMPERSONATE-USER", "impersonate-extra-a%2fb", "X-Remote-Group", "x-remote-uid"] {
            assert!(is_identity_header(&HeaderName::from_bytes(name.as_bytes()).unwrap()), "{name}");
        }
        assert!(!is_identity_header(&header::ACCEPT));
    }
}
