//! Every "kube-apiserver v1.37.2:" comment records an answer checked against a running
//! kube-apiserver v1.37.2 (curl against a ConfigMap and its collection).

use super::*;
use proptest::prelude::*;

use crate::encode::variant::{ContentVariant, Endpoint};
use ContentVariant::{
    Json, PartialObjectMetadataJson as Metadata, PartialObjectMetadataProtobuf as MetadataPb, Protobuf as Pb,
};
use Endpoint::{Get, List, Watch};
use Negotiation::RouteRefuses;
use Negotiation::{Cache, Passthrough};
use PassthroughReason::{Cbor, NotAcceptable, OtherMediaType, Protobuf, Table};

const ENDPOINTS: [Endpoint; 3] = [Get, List, Watch];
const V1_TABLE: Negotiation = Negotiation::Table { v1beta1: false };

/// A protobuf answer, with the JSON of the same form the client accepts next.
fn pb(variant: ContentVariant, or_json: Option<ContentVariant>) -> Negotiation {
    Negotiation::Protobuf { variant, or_json }
}

/// kubelet and client-go typed clientsets from v0.32.
const TYPED: &str = "application/vnd.kubernetes.protobuf,application/json";
/// client-go metadata client, Get and Watch (k8s.io/client-go/metadata).
const METADATA_CLIENT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
                                   application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
/// client-go metadata client, List.
const METADATA_CLIENT_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;\
                                        v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
                                        application/json";
/// client-go dynamic client, and with its CBOR client feature gate on.
const DYNAMIC: &str = "application/json";
const DYNAMIC_CBOR: &str = "application/json;q=0.9,application/cbor;q=1";
/// kubectl get with a human-readable printer (k8s.io/kubectl pkg/cmd/get).
const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,\
                               application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
/// kube-rs metadata calls (kube-core `JSON_METADATA_MIME`, `JSON_METADATA_LIST_MIME`).
const KUBE_RS_METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const KUBE_RS_METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// What the cache does for an upstream with CBOR off, kube-apiserver's default (what every
/// "kube-apiserver v1.37.2:" comment observed).
fn decide(accept: &str, endpoint: Endpoint) -> Negotiation {
    decide_with(accept, endpoint, UpstreamCbor::Off)
}

fn decide_with(accept: &str, endpoint: Endpoint, cbor: UpstreamCbor) -> Negotiation {
    let value = HeaderValue::from_str(accept).expect("test headers are valid");
    negotiate(Some(&value), endpoint, cbor)
}

fn decide_bytes(accept: &[u8], endpoint: Endpoint) -> Negotiation {
    let value = HeaderValue::from_bytes(accept).expect("test headers are valid");
    negotiate(Some(&value), endpoint, UpstreamCbor::Off)
}

#[track_caller]
fn assert_everywhere(accept: &str, expected: Negotiation) {
    for endpoint in ENDPOINTS {
        assert_eq!(decide(accept, endpoint), expected, "Accept: {accept:?} on {endpoint:?}");
    }
}

#[test]
fn missing_or_empty_accept_is_served_as_json() {
    // kube-apiserver v1.37.2: no Accept gets 200 application/json on GET, LIST and WATCH.
    // kube-rs sends no Accept for ordinary calls.
    for endpoint in ENDPOINTS {
        for cbor in [UpstreamCbor::Off, UpstreamCbor::Unknown, UpstreamCbor::On] {
            assert_eq!(negotiate(None, endpoint, cbor), Cache(Json));
            assert_eq!(negotiate(Some(&HeaderValue::from_static("")), endpoint, cbor), Cache(Json));
        }
    }
}

#[test]
fn kubelet_and_typed_clientsets_preferring_protobuf_get_protobuf_or_else_json() {
    // kube-apiserver v1.37.2 answers this in protobuf; JSON is the client's next choice (what a
    // custom resource gets).
    assert_everywhere(TYPED, pb(Pb, Some(Json)));
}

#[test]
fn metadata_client_get_and_watch_are_served_as_partial_object_metadata() {
    assert_eq!(decide(METADATA_CLIENT, Get), pb(MetadataPb, Some(Metadata)));
    assert_eq!(decide(METADATA_CLIENT, Watch), pb(MetadataPb, Some(Metadata)));
}

#[test]
fn metadata_client_list_is_served_as_partial_object_metadata_list() {
    assert_eq!(decide(METADATA_CLIENT_LIST, List), pb(MetadataPb, Some(Metadata)));
}

#[test]
fn dynamic_client_is_served_as_json() {
    assert_everywhere(DYNAMIC, Cache(Json));
}

#[test]
fn dynamic_client_preferring_cbor_is_served_json_where_the_upstream_has_no_cbor() {
    // kube-apiserver v1.37.2 (CBOR gate off): 200 application/json.
    assert_everywhere(DYNAMIC_CBOR, Cache(Json));
    for endpoint in ENDPOINTS {
        // With the gate on it answers CBOR; before the probe, nobody knows.
        assert_eq!(decide_with(DYNAMIC_CBOR, endpoint, UpstreamCbor::On), Passthrough(Cbor));
        assert_eq!(decide_with(DYNAMIC_CBOR, endpoint, UpstreamCbor::Unknown), Passthrough(Cbor));
    }
}

#[test]
fn cbor_clauses_after_the_winning_clause_change_nothing() {
    for cbor in [UpstreamCbor::Off, UpstreamCbor::Unknown, UpstreamCbor::On] {
        assert_eq!(decide_with("application/json,application/cbor", List, cbor), Cache(Json));
        assert_eq!(decide_with("application/cbor;q=0.5,*/*", Get, cbor), Cache(Json));
    }
    // With the gate on, a custom resource would get CBOR before the JSON after it: no fallback.
    let typed_then_cbor = "application/vnd.kubernetes.protobuf,application/cbor,application/json";
    assert_eq!(decide_with(typed_then_cbor, Get, UpstreamCbor::Off), pb(Pb, Some(Json)));
    assert_eq!(decide_with(typed_then_cbor, Get, UpstreamCbor::On), pb(Pb, None));
}

#[test]
fn cbor_alone_is_refused_only_where_the_upstream_has_no_cbor() {
    // kube-apiserver v1.37.2: the route filter's 406 (see nothing_acceptable_...).
    assert_everywhere("application/cbor", RouteRefuses);
    assert_everywhere("application/cbor, text/plain", RouteRefuses);
    for endpoint in ENDPOINTS {
        assert_eq!(decide_with("application/cbor", endpoint, UpstreamCbor::On), Passthrough(Cbor));
        assert_eq!(decide_with("application/cbor", endpoint, UpstreamCbor::Unknown), Passthrough(Cbor));
        // Only the CBOR element passes the route filter: the route filter's 406 where CBOR is not
        // served; where it is, goautoneg's sort puts the concrete type before the wildcard
        // whatever their q, and CBOR is the answer.
        let wildcard_first = "application/*,application/cbor;q=0.5";
        assert_eq!(decide_with(wildcard_first, endpoint, UpstreamCbor::On), Passthrough(Cbor));
        assert_eq!(decide_with(wildcard_first, endpoint, UpstreamCbor::Off), Passthrough(NotAcceptable));
        assert_eq!(decide_with(wildcard_first, endpoint, UpstreamCbor::Unknown), Passthrough(Cbor));
    }
}

#[test]
fn kubectl_get_asking_for_tables_first_gets_a_v1_table() {
    // kube-apiserver v1.37.2: 200 application/json with kind Table, watch included.
    assert_everywhere(KUBECTL_GET, V1_TABLE);
    assert_everywhere("application/json;as=Table;v=v1beta1;g=meta.k8s.io", Negotiation::Table { v1beta1: true });
}

#[test]
fn kube_rs_metadata_calls_are_served_as_partial_object_metadata() {
    // kube-apiserver v1.37.2: 200 application/json, kind PartialObjectMetadata[List],
    // apiVersion meta.k8s.io/v1.
    assert_eq!(decide(KUBE_RS_METADATA, Get), Cache(Metadata));
    assert_eq!(decide(KUBE_RS_METADATA, Watch), Cache(Metadata));
    assert_eq!(decide(KUBE_RS_METADATA_LIST, List), Cache(Metadata));
}

#[test]
fn metadata_form_of_the_other_endpoint_is_not_acceptable() {
    // kube-apiserver v1.37.2: GET with the list form and LIST with the single form answer 406
    // NotAcceptable; a WATCH with the list form answers 200 application/json and ends at the
    // first event, which it fails to encode.
    assert_eq!(decide(KUBE_RS_METADATA_LIST, Get), Passthrough(NotAcceptable));
    assert_eq!(decide(KUBE_RS_METADATA_LIST, Watch), Passthrough(NotAcceptable));
    assert_eq!(decide(KUBE_RS_METADATA, List), Passthrough(NotAcceptable));
    assert_eq!(decide(METADATA_CLIENT, List), Passthrough(NotAcceptable));
    assert_eq!(decide(METADATA_CLIENT_LIST, Get), Passthrough(NotAcceptable));
}

#[test]
fn protobuf_alone_is_protobuf_with_no_json_to_fall_back_on() {
    // kube-apiserver v1.37.2: application/vnd.kubernetes.protobuf on GET and LIST,
    // application/vnd.kubernetes.protobuf;stream=watch on WATCH.
    assert_everywhere("application/vnd.kubernetes.protobuf", pb(Pb, None));
    assert_eq!(
        decide("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", Get),
        pb(MetadataPb, None)
    );
    assert_eq!(
        decide("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1", Get),
        Passthrough(Protobuf)
    );
}

#[test]
fn protobuf_falls_back_only_on_json_of_the_same_form() {
    let metadata_then_plain = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
                                   application/json";
    assert_eq!(decide(metadata_then_plain, Get), pb(MetadataPb, None));
    let plain_then_metadata = "application/vnd.kubernetes.protobuf,application/json;as=PartialObjectMetadata;\
                                   g=meta.k8s.io;v=v1";
    assert_eq!(decide(plain_then_metadata, Watch), pb(Pb, None));
}

#[test]
fn protobuf_clauses_after_the_chosen_one_are_skipped_on_the_way_to_json() {
    let header = "application/vnd.kubernetes.protobuf,application/vnd.kubernetes.protobuf;\
                      as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
    assert_everywhere(header, pb(Pb, Some(Json)));
}

#[test]
fn protobuf_then_a_wildcard_falls_back_on_json() {
    assert_everywhere("application/vnd.kubernetes.protobuf,*/*", pb(Pb, Some(Json)));
}

#[test]
fn protobuf_then_yaml_then_json_has_no_json_to_fall_back_on() {
    // kube-apiserver v1.37.2: protobuf. The client ranks YAML above JSON.
    let header = "application/vnd.kubernetes.protobuf,application/yaml,application/json";
    assert_everywhere(header, pb(Pb, None));
}

#[test]
fn protobuf_in_the_wrong_metadata_form_is_not_acceptable() {
    let header = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
                      application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    assert_eq!(decide(header, Get), Passthrough(NotAcceptable));
    assert_eq!(decide(header, List), pb(MetadataPb, Some(Metadata)));
}

#[test]
fn higher_q_wins_whatever_the_written_order() {
    // kube-apiserver v1.37.2: application/json.
    assert_everywhere("application/yaml;q=0.5,application/json", Cache(Json));
    // kube-apiserver v1.37.2: application/yaml.
    assert_eq!(decide("application/json;q=0.5,application/yaml", Get), Passthrough(OtherMediaType));
    // kube-apiserver v1.37.2: application/json (q above 1 is taken as written).
    assert_eq!(decide("application/yaml,application/json;q=2", Get), Cache(Json));
    // kube-apiserver v1.37.2: application/json (negative q are ordered too).
    assert_eq!(decide("application/json;q=-1,application/yaml;q=-2", Get), Cache(Json));
}

#[test]
fn equal_q_keeps_the_written_order() {
    // kube-apiserver v1.37.2: application/json, then application/yaml when swapped.
    assert_eq!(decide("application/json;q=0.5,application/yaml;q=0.5", Get), Cache(Json));
    assert_eq!(decide("application/yaml;q=0.5,application/json;q=0.5", Get), Passthrough(OtherMediaType));
    // kube-apiserver v1.37.2: application/json; 0.30000001 and 0.3 are the same float32.
    assert_eq!(decide("application/json;q=0.3,application/yaml;q=0.30000001", Get), Cache(Json));
    // kube-apiserver v1.37.2: application/yaml; 0.3000001 is a larger float32.
    assert_eq!(decide("application/json;q=0.3,application/yaml;q=0.3000001", Get), Passthrough(OtherMediaType));
}

#[test]
fn q_zero_still_accepts() {
    // kube-apiserver v1.37.2: 200 application/json.
    assert_everywhere("application/json;q=0", Cache(Json));
}

#[test]
fn unparsable_q_counts_as_zero() {
    // kube-apiserver v1.37.2: application/yaml for each.
    for q in ["abc", "1e", "+nan", "-nan", "infin", "0b1", "1.2.3"] {
        let header = format!("application/json;q={q},application/yaml;q=0.001");
        assert_eq!(decide(&header, Get), Passthrough(OtherMediaType), "q={q}");
    }
    // A space after '=' is not trimmed from q, so it does not parse either.
    assert_eq!(decide("application/json;q= 1,application/yaml;q=0.5", Get), Passthrough(OtherMediaType));
}

#[test]
fn q_values_are_read_as_go_parses_them() {
    // kube-apiserver v1.37.2: application/yaml (1e-1 > 0.05; 1e39 overflows to +Inf; NaN
    // never compares greater, so it stays first).
    assert_eq!(decide("application/yaml;q=1e-1,application/json;q=0.05", Get), Passthrough(OtherMediaType));
    assert_eq!(decide("application/json;q=1,application/yaml;q=1e39", Get), Passthrough(OtherMediaType));
    assert_eq!(decide("application/yaml;q=NaN,application/json;q=-inf", Get), Passthrough(OtherMediaType));
    // kube-apiserver v1.37.2: application/json (5e-1 == 0.5; -1e39 == -inf; infinity == inf;
    // a NaN clause written after JSON stays after it).
    assert_eq!(decide("application/json;q=0.5,application/yaml;q=5e-1", Get), Cache(Json));
    assert_eq!(decide("application/json;q=-inf,application/yaml;q=-1e39", Get), Cache(Json));
    assert_eq!(decide("application/json;q=infinity,application/yaml;q=inf", Get), Cache(Json));
    assert_eq!(decide("application/json;q=nan,application/yaml", Get), Cache(Json));
    assert_eq!(decide("application/yaml;q=.5,application/json;q=0.4", Get), Passthrough(OtherMediaType));
    assert_eq!(decide("application/yaml;q=5.,application/json;q=2", Get), Passthrough(OtherMediaType));
    assert_eq!(decide("application/yaml;q=1E-1,application/json;q=+0.05", Get), Passthrough(OtherMediaType));
    // A valueless q is dropped, leaving 1.
    assert_eq!(decide("application/yaml;q=0.5,application/json;q=", Get), Cache(Json));
}

#[test]
fn q_spellings_not_reproduced_pass_through() {
    // kube-apiserver v1.37.2 reads 0x1p-1 as 0.5 and 1_0 as 10.
    assert_eq!(decide("application/json;q=0x1p-1", Get), Passthrough(OtherMediaType));
    assert_eq!(decide("application/json;q=1_0", Get), Passthrough(OtherMediaType));
    let long = format!("application/json;q=0.{}", "1".repeat(100));
    assert_eq!(decide(&long, Get), Passthrough(OtherMediaType));
}

#[test]
fn concrete_types_jump_ahead_of_wildcards_as_gos_sort_moves_them() {
    // kube-apiserver v1.37.2: application/yaml, although */* has the higher q.
    assert_eq!(decide("*/*,application/yaml;q=0.5", Get), Passthrough(OtherMediaType));
    // kube-apiserver v1.37.2: application/json.
    assert_eq!(decide("application/yaml;q=0.5,*/*", Get), Cache(Json));
    // kube-apiserver v1.37.2: application/yaml.
    assert_eq!(decide("application/*;q=0.9,application/yaml;q=0.1", Get), Passthrough(OtherMediaType));
}

#[test]
fn only_star_slash_star_passes_the_route_filter_on_its_own() {
    // kube-apiserver v1.37.2: */* gets 200 application/json; application/* and * alone get 406
    // from go-restful ("406: Not Acceptable\n\nAvailable representations: ...").
    assert_everywhere("*/*", Cache(Json));
    assert_everywhere("*/*;q=0.5", Cache(Json));
    // The error itself is negotiated from them (as JSON): the API server answers.
    assert_everywhere("application/*", Passthrough(NotAcceptable));
    assert_everywhere("*", Passthrough(NotAcceptable));
    // kube-apiserver v1.37.2: application/json once another element passes the filter.
    assert_everywhere("application/*,application/json", Cache(Json));
    assert_everywhere("application/json;q=0.5,application/*", Cache(Json));
    assert_everywhere("*,application/json;q=0.1", Cache(Json));
}

#[test]
fn wildcards_take_json_with_its_parameters() {
    // kube-apiserver v1.37.2: 200 application/json, kind PartialObjectMetadataList.
    let list = "*/*;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    assert_eq!(decide(list, List), Cache(Metadata));
    assert_eq!(decide("*/*;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", Watch), Cache(Metadata));
    assert_eq!(decide("*/*;as=Table;g=meta.k8s.io;v=v1", Get), V1_TABLE);
    // kube-apiserver v1.37.2: 200 application/json on a watch.
    assert_eq!(decide("*/*;stream=watch", Watch), Cache(Json));
}

#[test]
fn media_types_and_parameter_names_compare_case_sensitively() {
    // kube-apiserver v1.37.2: 406 for each.
    assert_everywhere("Application/JSON", RouteRefuses);
    assert_everywhere("application/JSON", RouteRefuses);
    assert_everywhere("application/json;AS=Table;g=meta.k8s.io;v=v1", Passthrough(NotAcceptable));
}

#[test]
fn stream_watch_is_accepted_on_every_endpoint() {
    // kube-apiserver v1.37.2: 200 application/json on GET, LIST and WATCH alike.
    assert_everywhere("application/json;stream=watch", Cache(Json));
    let metadata_watch = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;stream=watch";
    assert_eq!(decide(metadata_watch, Watch), Cache(Metadata));
}

#[test]
fn stream_other_than_watch_and_stream_on_yaml_are_refused() {
    // kube-apiserver v1.37.2: 406 for each.
    assert_everywhere("application/json;stream=foo", Passthrough(NotAcceptable));
    assert_everywhere("application/yaml;stream=watch", Passthrough(NotAcceptable));
    assert_everywhere("application/yaml;stream=watch,application/json;q=0.1", Cache(Json));
}

#[test]
fn server_version_v1_is_accepted_and_others_refused() {
    // kube-apiserver v1.37.2: sv=v1 gets 200 application/json, sv=v2 406.
    assert_everywhere("application/json;sv=v1", Cache(Json));
    assert_everywhere("application/json;sv=v2", Passthrough(NotAcceptable));
}

#[test]
fn unknown_and_valueless_parameters_are_ignored() {
    // kube-apiserver v1.37.2: "foo=bar" and "as=" change nothing.
    assert_everywhere("application/json;foo=bar;pretty=1;x;a=b=c;as=", Cache(Json));
    let header = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;foo=bar";
    assert_eq!(decide(header, Get), Cache(Metadata));
    // "key=a=" keeps "a".
    assert_eq!(decide("application/json;as=Table=;g=meta.k8s.io;v=v1", Get), V1_TABLE);
}

#[test]
fn the_last_duplicate_parameter_wins() {
    // kube-apiserver v1.37.2: a Table.
    let header = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;as=Table";
    assert_eq!(decide(header, Get), V1_TABLE);
}

#[test]
fn parameter_values_are_trimmed_but_not_unquoted() {
    // kube-apiserver v1.37.2: PartialObjectMetadata, then 406.
    let padded = "application/json; as= PartialObjectMetadata ;g=meta.k8s.io;v=v1";
    assert_eq!(decide(padded, Get), Cache(Metadata));
    let quoted = "application/json;as=\"PartialObjectMetadata\";g=meta.k8s.io;v=v1";
    assert_eq!(decide(quoted, Get), Passthrough(NotAcceptable));
}

#[test]
fn incomplete_or_unknown_conversions_are_refused() {
    // kube-apiserver v1.37.2: 406 for the first two.
    assert_everywhere("application/json;as=PartialObjectMetadata", Passthrough(NotAcceptable));
    assert_everywhere("application/json;as=PartialObjectMetadata;g=meta.k8s.io", Passthrough(NotAcceptable));
    assert_everywhere("application/json;g=meta.k8s.io;v=v1", Passthrough(NotAcceptable));
    assert_everywhere("application/json;as=Foo;g=meta.k8s.io;v=v1", Passthrough(NotAcceptable));
    assert_everywhere("application/json;as=Table;g=meta.k8s.io;v=v2", Passthrough(NotAcceptable));
    assert_everywhere("application/json;as=Foo;g=meta.k8s.io;v=v1,application/json;q=0.5", Cache(Json));
}

#[test]
fn meta_v1beta1_metadata_passes_through() {
    // kube-apiserver v1.37.2: 200 application/json with apiVersion meta.k8s.io/v1beta1, for
    // GET, LIST and every WATCH event (bookmarks too); the cache writes v1 only.
    let single = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
    assert_eq!(decide(single, Get), Passthrough(OtherMediaType));
    assert_eq!(decide(single, Watch), Passthrough(OtherMediaType));
    let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1";
    assert_eq!(decide(list, List), Passthrough(OtherMediaType));
    let protobuf = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1,\
                        application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
    assert_eq!(decide(protobuf, Get), Passthrough(Protobuf));
}

#[test]
fn tables_come_only_in_json_or_yaml() {
    // kube-apiserver v1.37.2: a protobuf Table is refused (406), a YAML one served.
    assert_everywhere("application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1", Passthrough(NotAcceptable));
    let protobuf_table_then_json = "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json";
    assert_everywhere(protobuf_table_then_json, Cache(Json));
    assert_everywhere("application/yaml;as=Table;g=meta.k8s.io;v=v1", Passthrough(Table));
    // kube-apiserver v1.37.2: Table above metadata by q loses; metadata is served.
    let header = "application/json;as=Table;g=meta.k8s.io;v=v1;q=0.9,\
                      application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    assert_eq!(decide(header, Get), Cache(Metadata));
}

#[test]
fn yaml_first_passes_through() {
    // kube-apiserver v1.37.2: 200 application/yaml on GET and LIST; on a WATCH 406 with the
    // Status written in YAML, also when JSON follows.
    assert_everywhere("application/yaml", Passthrough(OtherMediaType));
    assert_everywhere("application/yaml,application/json", Passthrough(OtherMediaType));
}

#[test]
fn media_types_the_api_server_cannot_write_are_skipped() {
    // kube-apiserver v1.37.2: 200 application/json.
    assert_everywhere("text/html,application/json", Cache(Json));
    assert_everywhere("text/*,*/json,application/json;q=0.1", Cache(Json));
}

#[test]
fn nothing_a_route_produces_gets_the_route_filters_406() {
    // kube-apiserver v1.37.2: go-restful's 406 for each.
    assert_everywhere("text/html", RouteRefuses);
    assert_everywhere("application/cbor", RouteRefuses);
    assert_everywhere("text/plain,application/*", Passthrough(NotAcceptable));
}

#[test]
fn garbage_headers_pass_through_without_panicking() {
    // kube-apiserver v1.37.2: "," and "application/json/" get 406.
    for garbage in [",", ";", "/", "=", ";;;", ",,,", "a/b/c", "application/", "q=1"] {
        assert_everywhere(garbage, RouteRefuses);
    }
    // Read as application/json and */* by the error's own negotiation: its form is not the raw
    // one, and the API server answers.
    for garbage in ["application/json/", "*/"] {
        assert_everywhere(garbage, Passthrough(NotAcceptable));
    }
    // kube-apiserver v1.37.2: application/json ("application/json/" reads as application/json
    // once the route filter has let the header in).
    assert_everywhere("application/json/,application/yaml", Cache(Json));
    assert_eq!(decide_bytes(b"application/json;foo=\xff\xfe", Get), Cache(Json));
    assert_eq!(decide_bytes(b"application/json;as=\xff\xfe", Get), Passthrough(NotAcceptable));
    assert_eq!(decide_bytes(b"\xc3\xa9/\xff", Get), RouteRefuses);
    let huge = "application/json;".repeat(10_000);
    assert_eq!(decide(&huge, Get), Cache(Json));
}

#[test]
fn surrounding_spaces_are_ignored() {
    assert_everywhere("  application/json ;  q=0.5 , application/yaml;q=0.1  ", Cache(Json));
}

#[test]
fn tabs_around_the_value_or_a_blank_value_pass_through() {
    // Go's HTTP/1 server strips them and its HTTP/2 server does not.
    for header in [" ", "\t", "\tapplication/json", "application/json\t"] {
        assert_everywhere(header, Passthrough(OtherMediaType));
    }
}

#[test]
fn more_than_twelve_clauses_pass_through() {
    let twelve = ["text/html"; 11].join(",") + ",application/json";
    assert_everywhere(&twelve, Cache(Json));
    let thirteen = ["text/html"; 12].join(",") + ",application/json";
    assert_everywhere(&thirteen, Passthrough(OtherMediaType));
    // Dropped ranges do not count.
    let with_empties = [","; 20].concat() + "application/json";
    assert_everywhere(&with_empties, Cache(Json));
}

#[test]
fn content_type_is_bare_application_json_for_every_variant_and_endpoint() {
    // kube-apiserver v1.37.2, Content-Type of the 200s:
    //   GET/LIST, Accept none | application/json | */* | application/json;stream=watch:
    //     "application/json"
    //   GET/LIST, application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1: "application/json"
    //   WATCH, Accept none | application/json | application/json;stream=watch | */* | */*;stream=watch:
    //     "application/json" (no ";stream=watch")
    //   WATCH, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1: "application/json"
    //   (protobuf, passed through: "application/vnd.kubernetes.protobuf" on GET/LIST,
    //   "application/vnd.kubernetes.protobuf;stream=watch" on WATCH)
    for endpoint in ENDPOINTS {
        assert_eq!(Json.content_type(endpoint), "application/json");
        assert_eq!(Metadata.content_type(endpoint), "application/json");
    }
}

#[test]
fn passthrough_reasons_have_snake_case_labels() {
    assert_eq!(Table.as_str(), "table");
    assert_eq!(Protobuf.as_str(), "protobuf");
    assert_eq!(OtherMediaType.as_str(), "other_media_type");
    assert_eq!(NotAcceptable.as_str(), "not_acceptable");
}

/// Bytes an `http::HeaderValue` may hold.
fn header_byte() -> impl Strategy<Value = u8> {
    prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff]
}

/// Headers built from the pieces negotiation looks at.
fn header_like() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "application",
        "/",
        "*",
        "json",
        "yaml",
        "vnd.kubernetes.protobuf",
        "cbor",
        "text",
        ",",
        ", ",
        ";",
        "; ",
        "=",
        "q",
        "as",
        "g",
        "v",
        "sv",
        "stream",
        "watch",
        "PartialObjectMetadata",
        "PartialObjectMetadataList",
        "Table",
        "meta.k8s.io",
        "v1",
        "v1beta1",
        "0.5",
        "0",
        "1e3",
        "nan",
        "-inf",
        "0x1p-1",
        "1_0",
        " ",
        "\t",
    ]);
    prop::collection::vec(token, 0..40).prop_map(|tokens| tokens.concat())
}

proptest! {
    #[test]
    fn negotiate_never_panics_on_any_header_value(bytes in prop::collection::vec(header_byte(), 0..300)) {
        let value = HeaderValue::from_bytes(&bytes).expect("strategy yields valid header bytes");
        for endpoint in ENDPOINTS {
            for cbor in [UpstreamCbor::Off, UpstreamCbor::Unknown, UpstreamCbor::On] {
                let _ = negotiate(Some(&value), endpoint, cbor);
            }
        }
    }

    #[test]
    fn the_cache_answers_only_forms_the_client_named(header in header_like()) {
        let value = HeaderValue::from_str(&header).expect("strategy yields valid header text");
        for endpoint in ENDPOINTS {
            match negotiate(Some(&value), endpoint, UpstreamCbor::Off) {
                Cache(Json) => prop_assert!(header.is_empty() || header.contains("json") || header.contains('*')),
                Cache(Metadata) if endpoint == List => prop_assert!(header.contains("PartialObjectMetadataList")),
                Cache(Metadata) => prop_assert!(header.contains("PartialObjectMetadata")),
                Cache(_) => prop_assert!(false, "protobuf is never a Cache answer"),
                Negotiation::Protobuf { variant, or_json } => {
                    prop_assert!(header.contains("protobuf") || header.contains('*'));
                    if variant == MetadataPb {
                        prop_assert!(header.contains("PartialObjectMetadata"));
                    }
                    prop_assert!(or_json.is_none_or(|json| json == variant.as_json()));
                }
                Negotiation::Table { .. } => prop_assert!(header.contains("Table")),
                // Only where no element names what a route produces.
                Negotiation::RouteRefuses => prop_assert!(
                    !header.split(',').any(|element| {
                        let media = element.split(';').next().unwrap_or_default().trim_matches(' ');
                        ["*/*", "application/json", "application/yaml", "application/vnd.kubernetes.protobuf"].contains(&media)
                    }),
                    "{:?}",
                    header
                ),
                Passthrough(_) => {}
            }
        }
    }

    /// Not knowing whether the upstream serves CBOR never serves what either answer would not:
    /// the cache answers as for one of them, or passes the read through.
    #[test]
    fn an_unknown_cbor_gate_answers_as_a_known_one_or_passes_through(header in header_like()) {
        let value = HeaderValue::from_str(&header).expect("strategy yields valid header text");
        for endpoint in ENDPOINTS {
            let unknown = negotiate(Some(&value), endpoint, UpstreamCbor::Unknown);
            if unknown == Passthrough(Cbor) {
                continue;
            }
            prop_assert_eq!(&unknown, &negotiate(Some(&value), endpoint, UpstreamCbor::On), "{:?}", header);
            let off = negotiate(Some(&value), endpoint, UpstreamCbor::Off);
            match (&unknown, &off) {
                // A CBOR clause between protobuf and JSON only takes the fallback away.
                (Negotiation::Protobuf { variant, or_json: None }, Negotiation::Protobuf { variant: v, .. }) => {
                    prop_assert_eq!(variant, v, "{:?}", header);
                }
                _ => prop_assert_eq!(&unknown, &off, "{:?}", header),
            }
        }
    }
}
