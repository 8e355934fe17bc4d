//! Every early answer of a read, from the plan alone: no cache is built.

use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};

use super::*;
use crate::cache::resource_info::test_info;

const TABLE: &str = "application/json;as=Table;g=meta.k8s.io;v=v1";
const PROTOBUF_OR_JSON: &str = "application/vnd.kubernetes.protobuf,application/json";

fn pod_info() -> ResourceInfo {
    test_info("", "pods", "Pod", true)
}

fn widget_info() -> ResourceInfo {
    test_info("example.com", "widgets", "Widget", true)
}

/// Step 1 for a GET of `uri` with these headers, every resource cached.
fn request_with(method: Method, uri: &str, headers: &[(header::HeaderName, &'static str)]) -> Result<Request, Reason> {
    let uri: Uri = uri.parse().unwrap();
    let headers: HeaderMap = headers.iter().map(|(k, v)| (k.clone(), HeaderValue::from_static(v))).collect();
    let info = RequestInfo::classify(&method, &uri);
    super::request(&method, &uri, &headers, &info, |_| true)
}

fn first_step(uri: &str, accept: Option<&'static str>) -> Result<Request, Reason> {
    let accept: Vec<_> = accept.map(|a| (header::ACCEPT, a)).into_iter().collect();
    request_with(Method::GET, uri, &accept)
}

fn facts<'a>(info: &'a ResourceInfo, scope: &'a Scope, cbor: UpstreamCbor) -> Facts<'a> {
    Facts { info, custom_selectable: None, scope, cbor, protobuf: ProtobufAvailability::Both, table_printer: None }
}

/// Both steps, with the cache's facts as `facts` makes them from `info`
/// (everything in scope, the upstream's CBOR off) and `adjust`.
fn plan_with(
    uri: &str,
    accept: Option<&'static str>,
    info: &ResourceInfo,
    adjust: impl FnOnce(&mut Facts),
) -> ReadPlan {
    let request = first_step(uri, accept).expect("past the first step");
    let classified = RequestInfo::classify(&Method::GET, &uri.parse().unwrap());
    let scope = Scope::default();
    let mut facts = facts(info, &scope, UpstreamCbor::Off);
    adjust(&mut facts);
    super::read(request, &classified, facts)
}

fn plan(uri: &str, accept: Option<&'static str>, info: &ResourceInfo) -> ReadPlan {
    plan_with(uri, accept, info, |_| {})
}

fn passthrough(plan: ReadPlan) -> Reason {
    match plan {
        ReadPlan::Passthrough(reason) => reason,
        ReadPlan::Refuse(status) => panic!("refused: {status:?}"),
        ReadPlan::Serve(read) => panic!("served: {:?}", read.endpoint),
    }
}

fn served(plan: ReadPlan) -> Read {
    match plan {
        ReadPlan::Serve(read) => read,
        ReadPlan::Passthrough(reason) => panic!("passes through: {reason:?}"),
        ReadPlan::Refuse(status) => panic!("refused: {status:?}"),
    }
}

#[test]
fn what_the_request_alone_sends_to_the_api_server() {
    let reason = |r: Result<Request, Reason>| r.err().expect("an early answer");
    let pods = "/api/v1/namespaces/a/pods";
    assert_eq!(reason(request_with(Method::POST, pods, &[])), Reason::NotARead);
    assert_eq!(reason(first_step("/api/v1/namespaces/a/pods/x/status?resourceVersion=0", None)), Reason::NotARead);
    assert_eq!(reason(first_step("/version", None)), Reason::NotARead);
    assert_eq!(reason(request_with(Method::GET, pods, &[(header::USER_AGENT, "curl/8.0")])), Reason::Pretty);
    assert_eq!(reason(first_step(&format!("{pods}?pretty=true"), None)), Reason::Parameters);
    assert_eq!(reason(first_step(&format!("{pods}?resourceVersion=x")[..], None)), Reason::InvalidResourceVersion);
    assert_eq!(reason(first_step("/api/v1/namespaces/a/pods/x", None)), Reason::ConsistentGet);
    let named_watch = "/api/v1/watch/namespaces/a/pods/x?fieldSelector=metadata.name%3Dx";
    assert_eq!(reason(first_step(named_watch, None)), Reason::NameAndFieldSelector);
    // The legacy path validates a watch's options as a LIST's, unless `watch` says otherwise.
    let legacy = "/api/v1/watch/namespaces/a/pods?sendInitialEvents=true";
    assert_eq!(reason(first_step(legacy, None)), Reason::WatchParameters);
    assert!(first_step(&format!("{legacy}&watch=1"), None).is_ok());
    assert_eq!(reason(first_step(&format!("{legacy}&watch=false"), None)), Reason::WatchParameters);
    assert_eq!(
        reason(first_step(pods, Some("application/yaml"))),
        Reason::Negotiated(PassthroughReason::OtherMediaType)
    );
    let uri: Uri = pods.parse().unwrap();
    let info = RequestInfo::classify(&Method::GET, &uri);
    let not_cached = super::request(&Method::GET, &uri, &HeaderMap::new(), &info, |r| r.resource != "pods");
    assert_eq!(reason(not_cached), Reason::NotCached);
}

#[test]
fn a_cbor_probe_gets_the_route_filters_406_once_the_upstreams_cbor_is_known_off() {
    // A node-local watchmux's probe: decided by its CBOR clause, so it waits for the cache.
    let probe = "/api/v1/namespaces/a/pods?limit=1";
    let cbor = Some("application/cbor");
    assert!(first_step(probe, cbor).is_ok());
    let ReadPlan::Refuse(status) = plan(probe, cbor, &pod_info()) else { panic!("not refused") };
    assert_eq!(status.code, StatusCode::NOT_ACCEPTABLE);
    assert!(status.message.ends_with("application/vnd.kubernetes.protobuf;stream=watch"), "{}", status.message);
    // One object's route produces no stream forms.
    let object = "/api/v1/namespaces/a/pods/x?resourceVersion=0";
    let ReadPlan::Refuse(status) = plan(object, cbor, &pod_info()) else { panic!("not refused") };
    assert!(status.message.ends_with("application/vnd.kubernetes.protobuf"), "{}", status.message);
    // While the upstream's CBOR is not known, or it is on, the API server answers.
    let cbor_pass = Reason::Negotiated(PassthroughReason::Cbor);
    for upstream in [UpstreamCbor::Unknown, UpstreamCbor::On] {
        assert_eq!(passthrough(plan_with(probe, cbor, &pod_info(), |f| f.cbor = upstream)), cbor_pass);
    }
    // A custom resource's handler has no route filter: its own answer.
    let widgets_probe = "/apis/example.com/v1/namespaces/a/widgets?limit=1";
    let not_acceptable = Reason::Negotiated(PassthroughReason::NotAcceptable);
    assert_eq!(passthrough(plan(widgets_probe, cbor, &widget_info())), not_acceptable);
    // A header the route refuses whatever the upstream serves: its 406 is
    // written only where the route's list is known (CBOR off), ...
    let text = Some("text/plain");
    assert!(matches!(plan(probe, text, &pod_info()), ReadPlan::Refuse(_)));
    assert_eq!(passthrough(plan_with(probe, text, &pod_info(), |f| f.cbor = UpstreamCbor::On)), not_acceptable);
    // ... and one a wildcard would negotiate an error form for is the API server's at once.
    assert_eq!(first_step(probe, Some("application/*")).err(), Some(not_acceptable));
}

#[test]
fn a_table_is_the_one_content_decision() {
    let list = "/api/v1/namespaces/a/pods";
    let read = served(plan(list, Some(TABLE), &pod_info()));
    assert!(matches!(read.content, Content::Table(_)));
    assert_eq!(read.content.variant(), ContentVariant::Json);
    // A Table a CBOR clause decides on: known once the upstream's CBOR is.
    let request = first_step(list, Some("application/cbor,application/json;as=Table;g=meta.k8s.io;v=v1")).unwrap();
    assert!(request.wants_table(UpstreamCbor::Off) && !request.wants_table(UpstreamCbor::Unknown));
    assert!(!first_step(list, None).unwrap().wants_table(UpstreamCbor::Off));
    // A custom resource's columns are its CRD's: without them, the API server's Table.
    let widgets = "/apis/example.com/v1/namespaces/a/widgets";
    let table_pass = Reason::Negotiated(PassthroughReason::Table);
    assert_eq!(passthrough(plan(widgets, Some(TABLE), &widget_info())), table_pass);
    let no_crd = plan_with(widgets, Some(TABLE), &widget_info(), |f| f.table_printer = Some(Err(Reason::NotReady)));
    assert_eq!(passthrough(no_crd), Reason::NotReady);
    // Whole objects in a watch with bookmarks, and `includeObject` outside a Table.
    let watch = format!("{list}?watch=1&allowWatchBookmarks=true&includeObject=Object");
    assert_eq!(passthrough(plan(&watch, Some(TABLE), &pod_info())), table_pass);
    assert_eq!(passthrough(plan(&format!("{list}?includeObject=None"), None, &pod_info())), Reason::Parameters);
    assert_eq!(
        passthrough(plan(&format!("{list}?includeObject=All"), Some(TABLE), &pod_info())),
        Reason::InvalidParameters
    );
}

#[test]
fn protobuf_the_cache_cannot_write_falls_back_to_the_json_accepted_next() {
    let widgets = "/apis/example.com/v1/namespaces/a/widgets";
    let read = served(plan(widgets, Some(PROTOBUF_OR_JSON), &widget_info()));
    assert_eq!(read.content.variant(), ContentVariant::Json);
    let only_protobuf = plan(widgets, Some("application/vnd.kubernetes.protobuf"), &widget_info());
    assert_eq!(passthrough(only_protobuf), Reason::NoProtobufForm);
    let pods = "/api/v1/namespaces/a/pods";
    assert_eq!(served(plan(pods, Some(PROTOBUF_OR_JSON), &pod_info())).content.variant(), ContentVariant::Protobuf);
    // A drifted schema is a form the API server has and the table lacks:
    // its protobuf, not the JSON the client also accepts.
    let drifted = plan_with(pods, Some(PROTOBUF_OR_JSON), &pod_info(), |f| f.protobuf = ProtobufAvailability::Neither);
    assert_eq!(passthrough(drifted), Reason::NoProtobufForm);
}

#[test]
fn selectors_routes_scopes_and_a_gets_parameters() {
    let pods = "/api/v1/namespaces/a/pods";
    assert_eq!(
        passthrough(plan(&format!("{pods}?labelSelector=a%20b%20c"), None, &pod_info())),
        Reason::InvalidSelector
    );
    assert_eq!(
        passthrough(plan(&format!("{pods}?fieldSelector=spec.x%3Dy"), None, &pod_info())),
        Reason::InvalidSelector
    );
    // Nodes under a namespace: the API server's 404.
    let nodes = test_info("", "nodes", "Node", false);
    assert_eq!(passthrough(plan("/api/v1/namespaces/a/nodes", None, &nodes)), Reason::NoRoute);
    let read = served(plan(&format!("{pods}?labelSelector=app%3Dx"), None, &pod_info()));
    assert_eq!(read.filter.namespace.as_deref(), Some("a"));
    assert!(!read.scoped);
    // A scoped cache answers a LIST within its scope, and a GET anywhere.
    let scope = Scope { labels: LabelSelector::parse("app=x").unwrap(), ..Scope::default() };
    let scoped = |uri: &str| {
        let classified = RequestInfo::classify(&Method::GET, &uri.parse().unwrap());
        super::read(first_step(uri, None).unwrap(), &classified, facts(&pod_info(), &scope, UpstreamCbor::Off))
    };
    assert_eq!(passthrough(scoped(pods)), Reason::OutsideScope);
    assert!(served(scoped(&format!("{pods}?labelSelector=app%3Dx,tier%3Dweb"))).scoped);
    assert!(served(scoped(&format!("{pods}/x?resourceVersion=0"))).scoped);
    // A GET takes none of a LIST's parameters.
    assert_eq!(
        passthrough(plan(&format!("{pods}/x?resourceVersion=0&limit=5"), None, &pod_info())),
        Reason::GetParameters
    );
}

#[test]
fn compression_and_the_early_proof_follow_the_watch_form() {
    let pods = "/api/v1/namespaces/a/pods";
    let watch_list =
        format!("{pods}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan");
    let read = served(plan(&watch_list, None, &pod_info()));
    assert_eq!(
        (read.endpoint, read.compression, read.proof_before_seat),
        (Endpoint::Watch, AnswerKind::WatchList, true)
    );
    let read = served(plan(&format!("{pods}?watch=1&resourceVersion=5"), None, &pod_info()));
    assert_eq!((read.compression, read.proof_before_seat), (AnswerKind::Watch, false));
    let read = served(plan(pods, None, &pod_info()));
    assert_eq!(
        (read.endpoint, read.compression, read.proof_before_seat),
        (Endpoint::List, AnswerKind::Complete, false)
    );
}
