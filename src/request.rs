//! The request classifier: what a URL and method mean to the Kubernetes API.
//!
//! kube-apiserver derives a `RequestInfo` (verb, group, version, namespace,
//! resource, name, subresource) from every request before authorizing it.
//! watchmux does the same, by the same rules, so that metrics, shutdown
//! handling, the cache and authorization agree with the API server on what a
//! request is. Parsing never fails: anything that is not a resource request
//! is a non-resource request, and the API server answers it.
//!
//! The path is read as Go's `net/url` leaves it in `URL.Path`: percent-decoded
//! before it is split, so `/api/v%31/namespaces/sec%2Da/pods` is the list of
//! pods in `sec-a` and `%2F` separates segments. A path Go would refuse (a
//! malformed escape) or that does not decode to UTF-8 is left a non-resource
//! request: it passes through and the API server gives its own answer.

use http::{Method, Uri};

pub(crate) use crate::go_rules::url_query::GoQuery;

/// The verb of a request, as kube-apiserver's authorizer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// A non-resource request or a method the API has no verb for; the
    /// lowercase method is used as the verb, as the API server does.
    Other(&'static str),
}

impl Verb {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Other(v) => v,
        }
    }
}

/// What kube-apiserver would make of a request line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RequestInfo {
    /// False for paths outside `/api` and `/apis` resources (discovery,
    /// `/healthz`, `/version`, `/openapi`...).
    pub is_resource_request: bool,
    pub verb: Option<Verb>,
    /// `""` for the core group.
    pub api_group: String,
    pub api_version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// Reached by the legacy `/api/v1/watch/...` prefix. The API server names
    /// the verb from the path then, so a `metadata.name` field selector does
    /// not name the object for authorization as it does on `?watch=1`.
    pub legacy_watch_path: bool,
    /// True when a `/namespaces/<ns>/` prefix scopes the resource after it
    /// (`/api/v1/namespaces/a/pods`). False on the Namespace object's own
    /// path, `/api/v1/namespaces/a[/status|/finalize]`, where the API server
    /// takes the name as the namespace too, but nothing is scoped by it.
    pub namespace_scoped_path: bool,
}

/// Subresources of a namespace, which stay on the `namespaces` resource
/// instead of opening a nested resource path.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// Subresources whose responses are long-lived streams or tunnels.
const STREAMING_SUBRESOURCES: &[&str] = &["attach", "exec", "log", "portforward", "proxy"];

impl RequestInfo {
    /// Classifies a request by method and URI, by the rules of the API
    /// server's request-info factory.
    pub(crate) fn classify(method: &Method, uri: &Uri) -> Self {
        let mut info = RequestInfo::default();
        let Some(path) = decode_path(uri.path()) else {
            info.verb = Some(Verb::Other(method_verb(method)));
            return info;
        };
        // As the API server's splitPath: outer slashes trimmed, inner empty
        // segments kept (`/api/v1//pods` has an empty resource, and 404s).
        let trimmed = path.trim_matches('/');
        let parts: Vec<&str> = if trimmed.is_empty() { Vec::new() } else { trimmed.split('/').collect() };

        let rest = match parts.as_slice() {
            ["api", version, rest @ ..] => {
                info.api_version = (*version).to_owned();
                rest
            }
            ["apis", group, version, rest @ ..] => {
                info.api_group = (*group).to_owned();
                info.api_version = (*version).to_owned();
                rest
            }
            _ => {
                info.verb = Some(Verb::Other(method_verb(method)));
                return info;
            }
        };
        if rest.is_empty() {
            // `/api/v1`, `/apis/apps/v1`: discovery of a group version.
            info.verb = Some(Verb::Other(method_verb(method)));
            return info;
        }
        info.is_resource_request = true;

        let mut rest = rest;
        // The legacy special verbs: `/api/v1/watch/...` and `/api/v1/proxy/...`.
        let mut special_verb = None;
        if rest.len() >= 2 && (rest[0] == "watch" || rest[0] == "proxy") {
            special_verb = Some(if rest[0] == "watch" { Verb::Watch } else { Verb::Other("proxy") });
            info.legacy_watch_path = rest[0] == "watch";
            rest = &rest[1..];
        }

        if rest.first() == Some(&"namespaces")
            && let Some(ns) = rest.get(1)
        {
            info.namespace = Some((*ns).to_owned());
            if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
                rest = &rest[2..];
                info.namespace_scoped_path = true;
            }
        }
        match rest {
            [] => {}
            [resource] => info.resource = (*resource).to_owned(),
            [resource, name] => {
                info.resource = (*resource).to_owned();
                info.name = Some((*name).to_owned());
            }
            [resource, name, sub, ..] => {
                info.resource = (*resource).to_owned();
                info.name = Some((*name).to_owned());
                info.subresource = Some((*sub).to_owned());
            }
        }
        // As in the API server, `/api/v1/namespaces/foo` keeps `foo` as both the
        // namespace and the name: RBAC rules in `foo` apply to it.
        info.verb =
            Some(special_verb.unwrap_or_else(|| resource_verb(method, info.name.is_some(), query_flag(uri, "watch"))));
        info
    }

    /// Whether the API server has a route for this resource request, given
    /// the resource's scope (from discovery). A namespaced resource is named
    /// only under its namespace (and listed under one or across all); a
    /// cluster-scoped resource is served only at its cluster path, never
    /// under `/namespaces/<ns>/`. The one path whose namespace scopes nothing
    /// is the Namespace object's own, `/api/v1/namespaces/<name>`: the
    /// cluster path of `namespaces` ([`Self::namespace_scoped_path`] is false
    /// there). Anything else is the API server's 404 (after its
    /// authorization, which sees the namespace in the path).
    pub(crate) fn is_routed(&self, namespaced: bool) -> bool {
        if namespaced { self.name.is_none() || self.namespace_scoped_path } else { !self.namespace_scoped_path }
    }

    /// True when the response is a watch stream that ends cleanly at shutdown.
    pub(crate) fn is_watch(&self) -> bool {
        self.verb == Some(Verb::Watch)
    }

    fn is_proxy(&self) -> bool {
        self.verb == Some(Verb::Other("proxy"))
    }

    /// True for streams and tunnels that run as long as the client wants:
    /// watches, logs, exec, attach, port-forward and proxy.
    pub(crate) fn is_long_running(&self) -> bool {
        self.is_watch()
            || self.is_proxy()
            || self.subresource.as_deref().is_some_and(|s| STREAMING_SUBRESOURCES.contains(&s))
    }

    /// The verb as a metric label.
    pub(crate) fn verb_label(&self) -> &'static str {
        self.verb.map_or("unknown", Verb::as_str)
    }
}

/// True when Go's `url.ParseRequestURI` refuses the path: a `%` not
/// followed by two hex digits. Go's HTTP server answers such a request
/// line itself, with a plain `400 Bad Request`, before any handler.
pub(crate) fn has_malformed_escape(raw: &str) -> bool {
    let b = raw.as_bytes();
    b.iter().enumerate().any(|(i, c)| {
        *c == b'%'
            && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit) && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// The path as Go's `url.Parse` puts it in `URL.Path`: every `%XX` decoded.
/// `None` where Go refuses the URL (a `%` without two hex digits) or the
/// result is not UTF-8.
pub(crate) fn decode_path(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !raw.contains('%') {
        return Some(std::borrow::Cow::Borrowed(raw));
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hi = (hex[0] as char).to_digit(16)?;
            let lo = (hex[1] as char).to_digit(16)?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok().map(std::borrow::Cow::Owned)
}

fn method_verb(method: &Method) -> &'static str {
    match *method {
        Method::GET => "get",
        Method::HEAD => "head",
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::OPTIONS => "options",
        _ => "other",
    }
}

fn resource_verb(method: &Method, named: bool, watch: bool) -> Verb {
    match *method {
        // As in the API server, `watch` only turns a collection GET into a
        // watch; a named GET with `watch=1` is still a GET.
        Method::GET | Method::HEAD if named => Verb::Get,
        Method::GET | Method::HEAD if watch => Verb::Watch,
        Method::GET | Method::HEAD => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => Verb::Other(method_verb(method)),
    }
}

/// Reads a boolean query parameter the way kube-apiserver does: absent, `0`
/// and `false` (any case) are false; anything else, an empty value too, is
/// true. The query is read as Go reads it ([`GoQuery`]): `?watch=1;` has no
/// `watch` at all.
pub(crate) fn query_flag(uri: &Uri, key: &str) -> bool {
    GoQuery::of(uri).get(key).is_some_and(query_bool)
}

/// The API server's boolean parameter value: false only for `0` and `false`
/// (any case); anything else, an empty value too, is true.
pub(crate) fn query_bool(value: &str) -> bool {
    !(value == "0" || value.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: Method, uri: &str) -> RequestInfo {
        RequestInfo::classify(&method, &uri.parse().unwrap())
    }

    #[test]
    fn namespaced_list_get_and_watch() {
        let list = info(Method::GET, "/api/v1/namespaces/ns1/pods");
        assert_eq!(list.verb, Some(Verb::List));
        assert_eq!(list.namespace.as_deref(), Some("ns1"));
        assert_eq!(list.resource, "pods");
        assert!(list.name.is_none());

        let get = info(Method::GET, "/api/v1/namespaces/ns1/pods/p1");
        assert_eq!(get.verb, Some(Verb::Get));
        assert_eq!(get.name.as_deref(), Some("p1"));

        let watch = info(Method::GET, "/api/v1/namespaces/ns1/pods?watch=1&resourceVersion=5");
        assert_eq!(watch.verb, Some(Verb::Watch));
        assert!(watch.is_watch() && watch.is_long_running());
    }

    #[test]
    fn a_named_get_with_watch_is_still_a_get() {
        // Checked against kube-apiserver v1.37.2: it answers the object.
        assert_eq!(info(Method::GET, "/api/v1/namespaces/a/configmaps/b?watch=1").verb, Some(Verb::Get));
    }

    #[test]
    fn watch_flag_false_forms_are_not_watches() {
        for q in ["watch=0", "watch=false", "watch=FALSE"] {
            assert_eq!(info(Method::GET, &format!("/api/v1/pods?{q}")).verb, Some(Verb::List), "{q}");
        }
        for q in ["watch", "watch=", "watch=true", "watch=yes"] {
            assert_eq!(info(Method::GET, &format!("/api/v1/pods?{q}")).verb, Some(Verb::Watch), "{q}");
        }
    }

    #[test]
    fn legacy_watch_paths_are_watches() {
        let w = info(Method::GET, "/api/v1/watch/namespaces/ns1/configmaps/cm1");
        assert_eq!(w.verb, Some(Verb::Watch));
        assert_eq!(w.namespace.as_deref(), Some("ns1"));
        assert_eq!(w.resource, "configmaps");
        assert_eq!(w.name.as_deref(), Some("cm1"));
        assert!(w.legacy_watch_path);
        assert!(!info(Method::GET, "/api/v1/namespaces/ns1/configmaps?watch=1").legacy_watch_path);
    }

    #[test]
    fn paths_are_percent_decoded_before_they_are_split_as_go_does() {
        let i = info(Method::GET, "/api/v%31/namespaces/sec%2Da/pods");
        assert_eq!(
            (i.api_version.as_str(), i.namespace.as_deref(), i.resource.as_str()),
            ("v1", Some("sec-a"), "pods")
        );
        let g = info(Method::GET, "/apis/%61pps/v1/deployments");
        assert_eq!((g.api_group.as_str(), g.resource.as_str(), g.verb), ("apps", "deployments", Some(Verb::List)));
        // An escaped slash separates segments, as in Go's URL.Path.
        let s = info(Method::GET, "/api/v1/namespaces/a%2Fb/configmaps");
        assert_eq!(
            (s.namespace.as_deref(), s.resource.as_str(), s.name.as_deref()),
            (Some("a"), "b", Some("configmaps"))
        );
        // Upper- and lower-case hex alike.
        assert_eq!(info(Method::GET, "/api/v1/namespaces/%4a%4B/pods").namespace.as_deref(), Some("JK"));
    }

    #[test]
    fn inner_empty_segments_are_kept_as_the_api_server_keeps_them() {
        let i = info(Method::GET, "/api/v1/namespaces/a//configmaps");
        assert_eq!(
            (i.namespace.as_deref(), i.resource.as_str(), i.name.as_deref()),
            (Some("a"), "", Some("configmaps"))
        );
        let i = info(Method::GET, "/api/v1//pods");
        assert_eq!((i.resource.as_str(), i.name.as_deref()), ("", Some("pods")));
        // And dot segments are not cleaned: `..` is a resource like any other.
        let i = info(Method::GET, "/api/v1/namespaces/a/../b/pods");
        assert_eq!((i.namespace.as_deref(), i.resource.as_str(), i.name.as_deref()), (Some("a"), "..", Some("b")));
        assert_eq!(i.subresource.as_deref(), Some("pods"));
    }

    #[test]
    fn paths_go_would_refuse_are_not_resource_requests() {
        for p in ["/api/v1/namespaces/a%zz/pods", "/api/v1/pods%", "/api/v1/pods%4", "/api/v1/namespaces/%ff/pods"] {
            let i = RequestInfo::classify(&Method::GET, &p.parse().unwrap());
            assert!(!i.is_resource_request, "{p}");
        }
        assert_eq!(decode_path("/a%2fb%20c").as_deref(), Some("/a/b c"));
        assert_eq!(decode_path("/plain").as_deref(), Some("/plain"));
        for bad in ["/a%zz", "/a%", "/a%4", "/%g0"] {
            assert!(has_malformed_escape(bad), "{bad}");
        }
        for good in ["/a%2F", "/plain", "/%ff", "/%4a%4B"] {
            assert!(!has_malformed_escape(good), "{good}");
        }
    }

    #[test]
    fn group_resources_and_subresources() {
        let s = info(Method::PUT, "/apis/apps/v1/namespaces/ns1/deployments/d1/scale");
        assert_eq!(s.api_group, "apps");
        assert_eq!(s.api_version, "v1");
        assert_eq!(s.verb, Some(Verb::Update));
        assert_eq!(s.subresource.as_deref(), Some("scale"));

        let exec = info(Method::POST, "/api/v1/namespaces/ns1/pods/p1/exec?command=ls");
        assert!(exec.is_long_running());
        assert!(!exec.is_watch());
    }

    #[test]
    fn routes_follow_the_resources_scope_not_its_name() {
        let routed = |path: &str, namespaced: bool| info(Method::GET, path).is_routed(namespaced);
        // Cluster-scoped resources: only their cluster paths, whatever the
        // namespace in the path is called (the name equal to it included).
        for path in [
            "/api/v1/namespaces/x/nodes/x",
            "/api/v1/namespaces/x/nodes/y",
            "/api/v1/namespaces/x/nodes",
            "/api/v1/watch/namespaces/x/nodes/x",
            "/api/v1/watch/namespaces/x/persistentvolumes",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/admin/clusterroles/admin",
            "/api/v1/namespaces/x/namespaces/x",
            "/api/v1/namespaces/x/namespaces",
        ] {
            assert!(!routed(path, false), "{path}");
        }
        for path in ["/api/v1/nodes/x", "/api/v1/nodes", "/api/v1/watch/nodes/x", "/api/v1/namespaces/x"] {
            assert!(routed(path, false), "{path}");
        }
        // The Namespace object's own path, on the watch prefix too.
        assert!(routed("/api/v1/watch/namespaces/x", false));
        // Namespaced resources: named only under a namespace.
        for path in ["/api/v1/namespaces/a/pods/p", "/api/v1/namespaces/a/pods", "/api/v1/pods"] {
            assert!(routed(path, true), "{path}");
        }
        for path in ["/api/v1/pods/p", "/api/v1/watch/pods/p", "/apis/example.com/v1/namespaces/a"] {
            assert!(!routed(path, true), "{path}");
        }
    }

    #[test]
    fn a_pair_go_drops_is_no_watch() {
        // Go drops a pair holding `;`: the API server sees a LIST.
        assert_eq!(info(Method::GET, "/api/v1/pods?watch=1;").verb, Some(Verb::List));
        assert_eq!(info(Method::GET, "/api/v1/pods?watch=1;&watch=1").verb, Some(Verb::Watch));
        assert_eq!(info(Method::GET, "/api/v1/pods?watch=%zz").verb, Some(Verb::List));
        assert_eq!(info(Method::GET, "/api/v1/pods?watch=+").verb, Some(Verb::Watch));
    }

    #[test]
    fn namespaces_themselves() {
        let ns = info(Method::GET, "/api/v1/namespaces/ns1");
        assert_eq!(ns.resource, "namespaces");
        assert_eq!(ns.name.as_deref(), Some("ns1"));
        assert_eq!(ns.namespace.as_deref(), Some("ns1"));
        assert_eq!(ns.verb, Some(Verb::Get));

        let fin = info(Method::PUT, "/api/v1/namespaces/ns1/finalize");
        assert_eq!(fin.resource, "namespaces");
        assert_eq!(fin.subresource.as_deref(), Some("finalize"));

        let all = info(Method::GET, "/api/v1/namespaces");
        assert_eq!(all.verb, Some(Verb::List));
        assert_eq!(all.resource, "namespaces");
    }

    #[test]
    fn deletes_by_name_and_collection() {
        assert_eq!(info(Method::DELETE, "/api/v1/namespaces/a/configmaps/b").verb, Some(Verb::Delete));
        assert_eq!(info(Method::DELETE, "/api/v1/namespaces/a/configmaps").verb, Some(Verb::DeleteCollection));
    }

    #[test]
    fn non_resource_paths() {
        for p in ["/healthz", "/version", "/api", "/apis", "/apis/apps", "/api/v1", "/openapi/v2", "/"] {
            let i = info(Method::GET, p);
            assert!(!i.is_resource_request, "{p}");
            assert_eq!(i.verb_label(), "get");
        }
    }

    proptest::proptest! {
        #[test]
        fn classify_never_panics(path in "(/[a-z0-9%.~_-]{0,8}){0,9}", q in "[a-z=&%0-9]{0,20}") {
            let uri: Uri = match format!("{path}?{q}").parse() { Ok(u) => u, Err(_) => return Ok(()) };
            let _ = RequestInfo::classify(&Method::GET, &uri);
        }
    }
}

#[cfg(test)]
mod fuzz;
