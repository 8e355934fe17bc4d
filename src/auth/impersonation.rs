//! Impersonation headers, both ways.
//!
//! Outgoing: in delegated mode a request that passes through goes upstream
//! under watchmux's identity with `Impersonate-User`, `-Group`, `-Uid` and
//! `-Extra-*` naming the caller, so the API server applies the caller's own
//! rights. Whatever a client sent in those headers, and its credentials,
//! never reach the upstream.
//!
//! Incoming: a client may itself ask to impersonate someone. watchmux
//! honours that only after the API server's own checks pass as
//! SubjectAccessReviews for the client: the constrained modes of
//! kube-apiserver 1.36+ ([`modes`]) and the original ("legacy") mode last,
//! `impersonate` on the user (or service account), uid, each group and
//! each extra value.

mod modes;
mod tracker;

use std::collections::BTreeMap;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

pub(crate) use modes::{Step, attempts, grants_depend_on_the_mode};
pub(crate) use tracker::{ModeTracker, in_tried_order};

use super::reviews::ResourceAttributes;
use super::user::{ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED, UserInfo};
use crate::encode::status::{Status, StatusReason};

pub(crate) const USER: &str = "impersonate-user";
pub(crate) const GROUP: &str = "impersonate-group";
pub(crate) const UID: &str = "impersonate-uid";
pub(crate) const EXTRA_PREFIX: &str = "impersonate-extra-";

/// What a client asked to become.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The impersonation a client's headers ask for, `None` without any; a 400
/// Status when they name groups, a uid or extras but no user, as the API
/// server answers.
pub(crate) fn requested(headers: &HeaderMap) -> Result<Option<Wanted>, Status> {
    requested_as(headers, crate::encode::minor::constrained_impersonation())
}

/// [`requested`] by the filter of an API server with constrained
/// impersonation (`constrained`) or with the legacy filter alone, whose 400
/// names what was asked for in another form.
fn requested_as(headers: &HeaderMap, constrained: bool) -> Result<Option<Wanted>, Status> {
    let text = |v: &HeaderValue| String::from_utf8_lossy(v.as_bytes()).into_owned();
    let mut wanted = Wanted {
        name: headers.get(USER).map(text).unwrap_or_default(),
        uid: headers.get(UID).map(text).unwrap_or_default(),
        groups: headers.get_all(GROUP).iter().map(text).collect(),
        extra: BTreeMap::new(),
    };
    let mut has_extra = false;
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
            has_extra = true;
            wanted.extra.entry(unescape_extra_key(key)).or_default().push(text(value));
        }
    }
    if wanted.name.is_empty() {
        if !wanted.uid.is_empty() || !wanted.groups.is_empty() || has_extra {
            let message = if constrained {
                format!("requested {} without impersonating a user name", go_syntax(&wanted))
            } else {
                format!("requested {} without impersonating a user", legacy_requests_syntax(&wanted))
            };
            return Err(Status::new(StatusCode::BAD_REQUEST, StatusReason::BadRequest, message));
        }
        return Ok(None);
    }
    Ok(Some(wanted))
}

/// True when the client sent any impersonation header.
pub(crate) fn any_requested(headers: &HeaderMap) -> bool {
    headers.keys().any(|k| is_impersonation_header(k.as_str()))
}

/// True for `Impersonate-User`, `-Group`, `-Uid` and `-Extra-*` (header
/// names arrive lower-cased).
pub(crate) fn is_impersonation_header(name: &str) -> bool {
    name == USER || name == GROUP || name == UID || name.starts_with(EXTRA_PREFIX)
}

/// The modes that apply, as the upstream tries them: [`attempts`] where it
/// has constrained impersonation, else its legacy filter alone
/// ([`legacy_filter_checks`]).
pub(crate) fn upstream_attempts(
    wanted: &Wanted,
    requestor: &UserInfo,
    request: &super::reviews::Attributes,
) -> Vec<modes::Attempt> {
    if crate::encode::minor::constrained_impersonation() {
        return attempts(wanted, requestor, request);
    }
    let steps = legacy_filter_checks(wanted).into_iter().map(|c| Step::Require(c.into())).collect();
    vec![modes::Attempt { mode: "legacy", subject: requestor.clone(), steps, grants: resolve(wanted.clone()) }]
}

/// The legacy filter's checks (kube-apiserver before 1.36), in its order:
/// the user (or service account), each group, each extra value, the uid.
fn legacy_filter_checks(wanted: &Wanted) -> Vec<ResourceAttributes> {
    let mut out = checks(wanted);
    if !wanted.uid.is_empty() {
        // `checks` puts the uid second, as the constrained filter's legacy mode does.
        let uid = out.remove(1);
        out.push(uid);
    }
    out
}

/// The `impersonate` checks the API server's legacy mode makes, in its
/// order: the user (or service account), the uid, each group, each extra value.
pub(crate) fn checks(wanted: &Wanted) -> Vec<ResourceAttributes> {
    let check = |group: &str, version: &str, resource: &str, name: &str| ResourceAttributes {
        verb: "impersonate".into(),
        group: group.into(),
        version: version.into(),
        resource: resource.into(),
        name: name.into(),
        ..Default::default()
    };
    let mut out = Vec::new();
    match service_account(&wanted.name) {
        Some((namespace, name)) => {
            let mut sa = check("", "v1", "serviceaccounts", name);
            sa.namespace = namespace.into();
            out.push(sa);
        }
        None => out.push(check("", "v1", "users", &wanted.name)),
    }
    if !wanted.uid.is_empty() {
        out.push(check("authentication.k8s.io", "v1", "uids", &wanted.uid));
    }
    for group in &wanted.groups {
        out.push(check("", "v1", "groups", group));
    }
    for (key, values) in &wanted.extra {
        for value in values {
            let mut extra = check("authentication.k8s.io", "v1", "userextras", value);
            extra.subresource = key.clone();
            out.push(extra);
        }
    }
    out
}

/// The identity a permitted impersonation results in: a service account
/// gets its groups when none were named, everyone gets
/// `system:authenticated` (or the anonymous user `system:unauthenticated`).
pub(crate) fn resolve(wanted: Wanted) -> UserInfo {
    let mut groups = wanted.groups;
    if groups.is_empty()
        && let Some((namespace, _)) = service_account(&wanted.name)
    {
        groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}")];
    }
    if wanted.name == ANONYMOUS {
        if !groups.iter().any(|g| g == UNAUTHENTICATED) {
            groups.push(UNAUTHENTICATED.into());
        }
    } else if !groups.iter().any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED) {
        groups.push(AUTHENTICATED.into());
    }
    UserInfo { name: wanted.name, uid: wanted.uid, groups, extra: wanted.extra }
}

/// `system:serviceaccount:<namespace>:<name>` split into its parts, by the
/// API server's rule: exactly two parts, the namespace a DNS label and the
/// name a DNS subdomain. Anything else is a plain user name to it (checked
/// as `users`, given no service-account groups), and so to watchmux.
pub(crate) fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (namespace, name) = rest.split_once(':')?;
    (is_dns_label(namespace) && is_dns_subdomain(name) && !name.contains(':')).then_some((namespace, name))
}

/// RFC 1123 label, as Kubernetes validates namespace names.
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 subdomain, as apimachinery's `IsDNS1123Subdomain` validates
/// service account and node names: at most 253 bytes in all, dot-separated
/// parts of lower-case alphanumerics and `-`, each starting and ending with
/// an alphanumeric. Unlike a label, a part has **no** 63-byte limit: a
/// 70-character service account or node name is valid to the API server,
/// and so must be here (else it would be impersonated as a plain user).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && has_dns_subdomain_shape(s)
}

/// The subdomain pattern alone, `[a-z0-9]([-a-z0-9]*[a-z0-9])?` parts
/// joined by dots, whatever the length.
pub(crate) fn has_dns_subdomain_shape(s: &str) -> bool {
    let part = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty()
            && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    s.split('.').all(part)
}

#[derive(Debug, thiserror::Error)]
#[error("the identity cannot be sent as impersonation headers: {0}")]
pub(crate) struct Unrepresentable(String);

/// Replaces whatever identity headers the client sent with impersonation of
/// `user`. The client's `Authorization` goes too (the upstream client sets
/// watchmux's own).
///
/// Only an identity the API server reads back exactly is sent: values go as
/// their bytes (a name that is not ASCII is a Go string all the same), but a
/// value with leading or trailing blanks (HTTP trims them), a control
/// character, or an identity the API server's impersonation would change
/// (`system:anonymous` without `system:unauthenticated`, which it adds) is
/// refused rather than forwarded as someone else.
pub(crate) fn impersonate(headers: &mut HeaderMap, user: &UserInfo) -> Result<(), Unrepresentable> {
    strip(headers);
    let value = |s: &str| {
        let blank_edge = s.starts_with([' ', '\t']) || s.ends_with([' ', '\t']);
        let v = HeaderValue::from_bytes(s.as_bytes()).ok().filter(|_| !blank_edge);
        v.ok_or_else(|| Unrepresentable(format!("{s:?}")))
    };
    headers.insert(USER, value(&user.name)?);
    for group in &user.groups {
        headers.append(GROUP, value(group)?);
    }
    if !user.uid.is_empty() {
        headers.insert(UID, value(&user.uid)?);
    }
    for (key, values) in &user.extra {
        let name = HeaderName::try_from(format!("{EXTRA_PREFIX}{}", escape_extra_key(key)))
            .map_err(|_| Unrepresentable(format!("extra key {key:?}")))?;
        for v in values {
            headers.append(name.clone(), value(v)?);
        }
    }
    let read_back = requested(headers).ok().flatten().map(resolve);
    if !read_back.is_some_and(|back| back.is_same_principal(user) && back.extra == user.extra) {
        strip(headers);
        return Err(Unrepresentable(format!("{:?} would reach the API server as another identity", user.name)));
    }
    Ok(())
}

/// Removes the client's credentials and impersonation headers.
pub(crate) fn strip(headers: &mut HeaderMap) {
    headers.remove(http::header::AUTHORIZATION);
    let names: Vec<HeaderName> = headers.keys().filter(|k| is_impersonation_header(k.as_str())).cloned().collect();
    for name in names {
        headers.remove(name);
    }
}

/// Extra keys may hold characters a header name cannot (`/` in
/// `authentication.kubernetes.io/credential-id`): they are %-escaped, as
/// client-go does, and the API server unescapes them. Upper-case letters
/// are escaped too: header names are case-insensitive and the API server
/// lower-cases the name before unescaping, so `A` would arrive as `a`, a
/// key other than the one authorized; `%41` arrives as `A`.
fn escape_extra_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        let token_char = b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$&'*+-.^_`|~".contains(&b);
        if token_char {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The API server's reading of an extra key: lower case, %-unescaped (kept
/// as sent when the escaping is malformed).
fn unescape_extra_key(key: &str) -> String {
    let key = key.to_ascii_lowercase();
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => return key,
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or(key)
}

/// kube-apiserver 1.34's answer to impersonation headers it cannot read:
/// `responsewriters.InternalError`, Go's `http.Error` with the request URI
/// quoted and the error, as plain text.
pub(crate) fn internal_error(request_uri: &http::Uri, message: &str) -> http::Response<crate::body::ProxyBody> {
    let uri = request_uri.path_and_query().map_or("/", |pq| pq.as_str());
    let text = format!("Internal Server Error: {}: {message}\n", crate::go_rules::fmt::go_quote(uri));
    let mut resp = http::Response::new(crate::body::full(text));
    *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    let headers = resp.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}

/// What the legacy filter's 400 prints: its `[]ObjectReference` of the
/// groups, extra values and uid asked for, with Go's `%v` (each reference's
/// seven fields, space-separated). Go reads the extras from a map, in no set
/// order; they are written here by key.
fn legacy_requests_syntax(w: &Wanted) -> String {
    let reference = |kind: &str, name: &str, api_version: &str, field_path: &str| {
        format!("{{{kind}  {name}  {api_version}  {field_path}}}")
    };
    let mut refs: Vec<String> = w.groups.iter().map(|g| reference("Group", g, "", "")).collect();
    for (key, values) in &w.extra {
        refs.extend(values.iter().map(|v| reference("UserExtra", v, "authentication.k8s.io/v1", key)));
    }
    if !w.uid.is_empty() {
        refs.push(reference("UID", &w.uid, "authentication.k8s.io/v1", ""));
    }
    format!("[{}]", refs.join(" "))
}

/// The wanted user in the Go syntax the API server's 400 message prints.
fn go_syntax(w: &Wanted) -> String {
    let strings = |v: &[String]| v.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    let groups =
        if w.groups.is_empty() { "[]string(nil)".to_owned() } else { format!("[]string{{{}}}", strings(&w.groups)) };
    let extra = if w.extra.is_empty() {
        "map[string][]string(nil)".to_owned()
    } else {
        let entries: Vec<String> = w.extra.iter().map(|(k, v)| format!("{k:?}:[]string{{{}}}", strings(v))).collect();
        format!("map[string][]string{{{}}}", entries.join(", "))
    };
    format!("&user.DefaultInfo{{Name:{:?}, UID:{:?}, Groups:{groups}, Extra:{extra}}}", w.name, w.uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn no_headers_no_impersonation() {
        assert_eq!(requested(&headers(&[("accept", "application/json")])).unwrap(), None);
        assert!(!any_requested(&headers(&[("authorization", "Bearer x")])));
    }

    #[test]
    fn the_legacy_filter_names_groups_extras_and_uid_as_object_references() {
        let err = requested_as(&headers(&[("impersonate-group", "system:masters")]), false).unwrap_err();
        assert_eq!(err.message, "requested [{Group  system:masters    }] without impersonating a user");
        let wanted = Wanted {
            uid: "u1".into(),
            groups: vec!["g".into()],
            extra: BTreeMap::from([("scopes".into(), vec!["a".into()])]),
            ..Wanted::default()
        };
        assert_eq!(
            legacy_requests_syntax(&wanted),
            "[{Group  g    } {UserExtra  a  authentication.k8s.io/v1  scopes} {UID  u1  authentication.k8s.io/v1  }]"
        );
        let wanted = Wanted { name: "bob".into(), ..wanted };
        let order: Vec<String> = legacy_filter_checks(&wanted).into_iter().map(|c| c.resource).collect();
        assert_eq!(order, ["users", "groups", "userextras", "uids"], "the uid last, as the legacy filter checks it");
    }

    #[tokio::test]
    async fn kube_apiserver_1_34_answers_unreadable_impersonation_with_a_plain_500() {
        let uri: http::Uri = "/api/v1/namespaces/a/configmaps?limit=1".parse().unwrap();
        let resp = internal_error(&uri, "requested [{Group  g    }] without impersonating a user");
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(resp.headers()[http::header::CONTENT_TYPE], "text/plain; charset=utf-8");
        let body = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
        assert_eq!(
            &body[..],
            b"Internal Server Error: \"/api/v1/namespaces/a/configmaps?limit=1\": requested [{Group  g    }] without impersonating a user\n"
        );
    }

    #[test]
    fn groups_without_a_user_are_a_bad_request() {
        let err = requested(&headers(&[("impersonate-group", "system:masters")])).unwrap_err();
        assert_eq!(err.code, StatusCode::BAD_REQUEST);
        assert_eq!(
            err.message,
            r#"requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string{"system:masters"}, Extra:map[string][]string(nil)} without impersonating a user name"#
        );
    }

    #[test]
    fn checks_follow_the_legacy_order() {
        let wanted = requested(&headers(&[
            ("impersonate-user", "system:serviceaccount:ns1:builder"),
            ("impersonate-uid", "u-1"),
            ("impersonate-group", "g1"),
            ("impersonate-extra-scopes", "view"),
            ("impersonate-extra-scopes", "edit"),
        ]))
        .unwrap()
        .unwrap();
        let got: Vec<_> = checks(&wanted)
            .into_iter()
            .map(|c| format!("{}/{}/{}/{}/{}", c.group, c.resource, c.subresource, c.namespace, c.name))
            .collect();
        assert_eq!(
            got,
            [
                "/serviceaccounts//ns1/builder",
                "authentication.k8s.io/uids///u-1",
                "/groups///g1",
                "authentication.k8s.io/userextras/scopes//view",
                "authentication.k8s.io/userextras/scopes//edit",
            ]
        );
    }

    #[test]
    fn malformed_service_account_names_are_plain_users_as_in_the_api_server() {
        for name in [
            "system:serviceaccount:ns:Bad_Name",
            "system:serviceaccount:Bad_NS:x",
            "system:serviceaccount:ns:a:b",
            "system:serviceaccount:-ns:x",
            "system:serviceaccount:ns:x.",
            "system:serviceaccount::x",
        ] {
            let wanted = Wanted { name: name.into(), ..Default::default() };
            let first = &checks(&wanted)[0];
            assert_eq!((first.resource.as_str(), first.name.as_str()), ("users", name), "{name}");
            assert_eq!(resolve(wanted).groups, [AUTHENTICATED], "{name}");
        }
        let ok = Wanted { name: "system:serviceaccount:kube-system:a.b-c".into(), ..Default::default() };
        let first = &checks(&ok)[0];
        assert_eq!(
            (first.resource.as_str(), first.namespace.as_str(), first.name.as_str()),
            ("serviceaccounts", "kube-system", "a.b-c")
        );
    }

    #[test]
    fn resolved_identity_gets_the_api_servers_groups() {
        let sa = resolve(Wanted { name: "system:serviceaccount:ns1:b".into(), ..Default::default() });
        assert_eq!(sa.groups, ["system:serviceaccounts", "system:serviceaccounts:ns1", AUTHENTICATED]);
        let anon = resolve(Wanted { name: ANONYMOUS.into(), ..Default::default() });
        assert_eq!(anon.groups, [UNAUTHENTICATED]);
        let named = resolve(Wanted { name: "bob".into(), groups: vec!["dev".into()], ..Default::default() });
        assert_eq!(named.groups, ["dev", AUTHENTICATED]);
    }

    #[test]
    fn impersonation_replaces_client_identity_headers() {
        let mut h = headers(&[
            ("authorization", "Bearer client-token"),
            ("impersonate-user", "someone-else"),
            ("impersonate-extra-x", "y"),
            ("accept", "application/json"),
        ]);
        let user = UserInfo {
            name: "system:node:n1".into(),
            uid: String::new(),
            groups: vec!["system:nodes".into(), AUTHENTICATED.into()],
            extra: [("authentication.kubernetes.io/credential-id".to_owned(), vec!["X509SHA256=ab".to_owned()])].into(),
        };
        impersonate(&mut h, &user).unwrap();
        assert!(h.get("authorization").is_none());
        assert!(h.get("impersonate-extra-x").is_none());
        assert_eq!(h["impersonate-user"], "system:node:n1");
        let groups: Vec<_> = h.get_all("impersonate-group").iter().collect();
        assert_eq!(groups, ["system:nodes", AUTHENTICATED]);
        assert_eq!(h["impersonate-extra-authentication.kubernetes.io%2Fcredential-id"], "X509SHA256=ab");
        assert_eq!(h["accept"], "application/json");
        // And it reads back as the same identity.
        let back = resolve(requested(&h).unwrap().unwrap());
        assert_eq!(back, user);
    }

    #[test]
    fn values_a_header_cannot_carry_are_refused() {
        let user = UserInfo { name: "bad\nname".into(), ..Default::default() };
        assert!(impersonate(&mut HeaderMap::new(), &user).is_err());
        // HTTP trims blanks at a value's edges: " admin" would arrive as "admin".
        for group in [" admin", "admin\t", " "] {
            let user =
                UserInfo { name: "u".into(), groups: vec![group.into(), AUTHENTICATED.into()], ..Default::default() };
            assert!(impersonate(&mut HeaderMap::new(), &user).is_err(), "{group:?}");
        }
    }

    #[test]
    fn names_that_are_not_ascii_go_as_their_bytes() {
        let user =
            UserInfo { name: "J\u{fc}rgen \u{4e2d}".into(), groups: vec![AUTHENTICATED.into()], ..Default::default() };
        let mut h = HeaderMap::new();
        impersonate(&mut h, &user).unwrap();
        assert_eq!(h["impersonate-user"].as_bytes(), user.name.as_bytes());
    }

    #[test]
    fn an_identity_the_api_server_would_change_is_not_sent() {
        // A certificate `CN=system:anonymous`: authenticated, but the API
        // server's impersonation would add system:unauthenticated to it.
        let cert_anonymous = UserInfo { name: ANONYMOUS.into(), groups: vec!["g".into()], ..Default::default() };
        let mut h = HeaderMap::new();
        assert!(impersonate(&mut h, &cert_anonymous).is_err());
        assert!(h.get(USER).is_none(), "nothing half-written");
        // The real anonymous user reads back as itself.
        impersonate(&mut h, &UserInfo::anonymous()).unwrap();
        // A user without system:authenticated would gain it.
        let bare = UserInfo { name: "bob".into(), ..Default::default() };
        assert!(impersonate(&mut HeaderMap::new(), &bare).is_err());
    }

    #[test]
    fn an_extra_key_is_forwarded_exactly_as_it_was_authorized() {
        // `Impersonate-Extra-%41` is the key `A` to the API server (it
        // lower-cases the header name, then unescapes): forwarded, it must
        // read back as `A`, not as the `a` a plain `A` header name becomes.
        let wanted =
            requested(&headers(&[("impersonate-user", "u"), ("impersonate-extra-%41", "v")])).unwrap().unwrap();
        assert_eq!(wanted.extra.keys().collect::<Vec<_>>(), ["A"]);
        let user = resolve(wanted.clone());
        let mut h = HeaderMap::new();
        impersonate(&mut h, &user).unwrap();
        assert!(h.contains_key("impersonate-extra-%41"), "{h:?}");
        assert_eq!(requested(&h).unwrap().unwrap().extra, wanted.extra);
        // Every byte survives the round trip.
        for key in ["Example.COM/Key", "a%b", "x y", "é/ß", "acme.io/a:b"] {
            let user = UserInfo {
                name: "u".into(),
                groups: vec![AUTHENTICATED.into()],
                extra: [(key.to_owned(), vec!["v".to_owned()])].into(),
                ..Default::default()
            };
            let mut h = HeaderMap::new();
            impersonate(&mut h, &user).unwrap();
            assert_eq!(requested(&h).unwrap().unwrap().extra.keys().collect::<Vec<_>>(), [key], "{h:?}");
        }
    }

    #[test]
    fn service_account_and_node_names_are_subdomains_without_a_label_limit() {
        let long = "a".repeat(70);
        let sa = format!("system:serviceaccount:ns:{long}");
        assert_eq!(service_account(&sa), Some(("ns", long.as_str())));
        let first = &checks(&Wanted { name: sa.clone(), ..Default::default() })[0];
        assert_eq!((first.resource.as_str(), first.name.as_str()), ("serviceaccounts", long.as_str()));
        // The namespace stays a label (63 at most); the name 253 in all.
        assert_eq!(service_account(&format!("system:serviceaccount:{}:x", "n".repeat(64))), None);
        assert!(is_dns_subdomain(&"a".repeat(253)) && !is_dns_subdomain(&"a".repeat(254)));
        let dotted = format!("{}.{}", "b".repeat(100), "c".repeat(100));
        assert!(is_dns_subdomain(&dotted));
        for bad in ["", ".", "a.", ".a", "a..b", "-a", "a-", "a.-b", "A", "a_b", "a:b"] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }

    #[test]
    fn malformed_escapes_are_kept_as_sent() {
        assert_eq!(unescape_extra_key("a%2Fb"), "a/b");
        assert_eq!(unescape_extra_key("A%zz"), "a%zz");
    }
}
