//! Bounded fuzzing (proptest) of this parser of untrusted input: request classification of API-ish paths with percent escapes,
//! dot and empty segments, unicode. A resource request always has an API version, a
//! non-resource request names no resource, and a subresource comes with a name.
//!
//! Part of the crate's fuzz targets: cases, shared strategies and the long-run
//! switch are in `crate::fuzz`.

use std::fmt::Write as _;

use http::{Method, Uri};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::fuzz::{Words, config, one_of};
use crate::request::RequestInfo;

const SEGMENTS: Words = &[
    &["api", "apis", "v1", "apps", "namespaces", "default", "watch", "proxy", "pods"],
    &["status", "finalize", "log", "exec"],
    &["..", ".", "", "~"],
    &["%2F", "%2f", "%2e%2e", "%2E", "%", "%z", "%zz", "%00", "%E2%82%AC", "%C3", "%252F"],
    &["é", "日本", "a b"],
];
const QUERIES: &[&str] = &[
    "",
    "?",
    "?watch=true",
    "?watch=1",
    "?watch=false",
    "?watch",
    "?watch=%74rue",
    "?a=b&watch=true",
    "?watch=true&watch=false",
];
const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "CONNECT", "TRACE", "FOO"];

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![4 => one_of(SEGMENTS).prop_map(str::to_owned), 1 => "[a-z0-9%.~_-]{0,12}", 1 => any::<String>()]
}

/// Escapes what a URI path cannot hold, keeping `%` as typed so that bad escapes reach the classifier.
fn escape(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%/".contains(&b) {
            out.push(char::from(b));
        } else {
            write!(out, "%{b:02X}").expect("writing to a String");
        }
    }
    out
}

fn uri() -> impl Strategy<Value = Uri> {
    let origin = select(&["", "http://h", "https://h:6443"][..]);
    let lead =
        select(&["/api/v1/", "/apis/apps/v1/", "/api/", "/apis/", "/", "//", "/api//v1/", "/api/v1/namespaces/"][..]);
    (origin, lead, vec(segment(), 0..10), select(QUERIES)).prop_map(|(origin, lead, segments, query)| {
        let path = escape(&format!("{lead}{}", segments.join("/")));
        format!("{origin}{path}{query}").parse().expect("an escaped path is a valid URI")
    })
}

fn classification_holds_together(method: &str, uri: &Uri) -> Result<(), TestCaseError> {
    let method = Method::from_bytes(method.as_bytes()).expect("a method token");
    let info = RequestInfo::classify(&method, uri);
    prop_assert!(info.verb.is_some(), "{} {}: {:?}", method, uri, info);
    if info.is_resource_request {
        // Inner empty segments are kept as the API server keeps them, so
        // `/api//v1/x` has an empty version, as in Go; but a resource
        // request is always under a prefix, and names something.
        let path = crate::request::decode_path(uri.path()).expect("a resource request decodes");
        // Leading slashes are trimmed as the API server's splitPath trims them.
        let trimmed = path.trim_start_matches('/');
        prop_assert!(trimmed.starts_with("api/") || trimmed.starts_with("apis/"), "{} {}: {:?}", method, uri, info);
        prop_assert!(
            !info.resource.is_empty() || info.namespace.is_some() || info.name.is_some() || path.contains("//"),
            "{} {}: {:?}",
            method,
            uri,
            info
        );
    } else {
        let parts = (&info.namespace, info.resource.as_str(), &info.name, &info.subresource);
        prop_assert_eq!(parts, (&None, "", &None, &None), "{} {}", method, uri);
    }
    prop_assert!(info.subresource.is_none() || info.name.is_some(), "{} {}: {:?}", method, uri, info);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_resource_request_is_always_under_an_api_prefix(method in select(METHODS), uri in uri()) {
        classification_holds_together(method, &uri)?;
    }

    #[test]
    fn any_request_target_that_is_a_uri_classifies_consistently(
        method in select(METHODS),
        // Visible ASCII but for `"`, `<`, `>` and the backquote, which `Uri` refuses.
        uri in "/[!#-;=?-_a-~]{0,80}".prop_filter_map("a valid URI", |s| s.parse::<Uri>().ok()),
    ) {
        classification_holds_together(method, &uri)?;
    }
}
