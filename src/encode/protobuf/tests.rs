//! The encoder against bytes Go wrote.
//!
//! Every expected hex string below was made by Go's own serializers from the
//! JSON beside it: the lines of the JSON (one object a line; `WATCH <json>`
//! for a watch frame, `Duration <json>` for a bare metav1.Duration) piped
//! through `cd integration && go run ./cmd/protocorpus -golden`, which decodes
//! each with k8s.io/apimachinery's JSON serializer and prints the hex of the
//! protobuf serializer's body (k8s.io/api v0.37.2). The fuzz corpus
//! (integration/protobuf_corpus.rs) covers every kind; these pin the special
//! types and the empty-against-absent rules one by one.

use proptest::prelude::*;
use serde_json::value::RawValue;

use super::schema::Special;
use super::*;

/// (name, what it shows, the JSON, Go's protobuf body in hex)
const OBJECTS: &[(&str, &str, &str, &str)] = &[
    (
        "config_map_with_times_labels_managed_fields_and_binary_data",
        "Time, sorted labels, FieldsV1 bytes as the JSON has them (escapes kept), a []byte map",
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"ns","uid":"u-1","resourceVersion":"42","creationTimestamp":"2024-05-06T07:08:09Z","labels":{"b":"2","a":"1"},"managedFields":[{"manager":"kubectl","operation":"Apply","apiVersion":"v1","time":"2024-05-06T07:08:09Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:k\u003c":{}}}}]},"data":{"k<":"v","e":""},"binaryData":{"bin":"AAEC"}}"#,
        "6b3873000a0f0a0276311209436f6e6669674d617012a3010a84010a02636d12001a026e7322002a03752d31320234323800420808d983e2b10610005a060a01611201315a060a01621201328a01500a076b75626563746c12054170706c791a027631220808d983e2b106100032084669656c647356313a240a227b22663a64617461223a7b222e223a7b7d2c22663a6b5c7530303363223a7b7d7d7d420012050a0165120012070a026b3c1201761a0a0a0362696e12030001021a002200",
    ),
    (
        "absent_fields_are_go_zero_values",
        "absent non-pointer fields: empty strings, zero ints, empty Time, empty embedded messages",
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"bare"}}"#,
        "6b3873000a0f0a0276311209436f6e6669674d617012160a140a046261726512001a0022002a003200380042001a002200",
    ),
    (
        "pointers_present_as_zero_are_written",
        "pointer Time, int64 and bool present with zero values",
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"gone","deletionTimestamp":"2024-05-06T07:08:10Z","deletionGracePeriodSeconds":0},"immutable":false}"#,
        "6b3873000a0f0a0276311209436f6e6669674d617012240a200a04676f6e6512001a0022002a003200380042004a0808da83e2b1061000500020001a002200",
    ),
    (
        "secret_data_empty_is_written_null_is_not",
        "map[string][]byte: \"\" written with length 0, null left out",
        r#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s"},"data":{"a":"aGVsbG8=","empty":"","nil":null},"type":"Opaque"}"#,
        "6b3873000a0c0a027631120653656372657412390a110a017312001a0022002a00320038004200120a0a0161120568656c6c6f12090a05656d707479120012050a036e696c1a064f70617175651a002200",
    ),
    (
        "micro_time_keeps_microseconds",
        "MicroTime seconds and nanos, before 1970 too",
        r#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l"},"spec":{"holderIdentity":"node-1","leaseDurationSeconds":40,"acquireTime":"2024-05-06T07:08:09.123456Z","renewTime":"1969-12-31T23:59:59.000001Z"}}"#,
        "6b3873000a1f0a16636f6f7264696e6174696f6e2e6b38732e696f2f763112054c65617365123c0a110a016c12001a0022002a0032003800420012270a066e6f64652d3110281a0b08d983e2b106108094ef3a220e08ffffffffffffffffff0110e8071a002200",
    ),
    (
        "int_or_string_int_string_and_negative",
        "IntOrString as int, string and negative int",
        r#"{"kind":"Service","apiVersion":"v1","metadata":{"name":"svc"},"spec":{"ports":[{"name":"a","port":80,"targetPort":8080},{"name":"b","port":443,"targetPort":"https"},{"port":1,"targetPort":-3}],"clusterIP":"10.0.0.1","type":"ClusterIP"}}"#,
        "6b3873000a0d0a0276311207536572766963651284010a130a0373766312001a0022002a0032003800420012690a120a0161120018502207080010903f1a0028000a170a0162120018bb03220b080110001a05687474707328000a190a0012001801220f080010fdffffffffffffffff011a0028001a0831302e302e302e312209436c757374657249503a00420052005a00600068001a020a001a002200",
    ),
    (
        "quantities_and_int_or_string_in_a_deployment",
        "Quantity text as the JSON has it (Go's JSON and protobuf both write q.String()), maxUnavailable 0 and maxSurge \"25%\"",
        r#"{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d"},"spec":{"replicas":3,"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}},"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"500m","memory":"1Gi"},"requests":{"cpu":"1500m"}}}]}},"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":0,"maxSurge":"25%"}}},"status":{}}"#,
        "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412e5010a110a016412001a0022002a0032003800420012c1010803120a0a080a036170701201781a86010a1a0a0012001a0022002a003200380042005a080a036170701201781268124a0a01631201692a0042300a0d0a0363707512060a043530306d0a0f0a066d656d6f727912050a03314769120e0a0363707512070a05313530306d6a007200800100880100900100a201001a00320042004a0052005800600068008201008a01009a0100c2010022240a0d526f6c6c696e6755706461746512130a06080010001a001209080110001a03323525280038001a0c0800100018002000280038001a002200",
    ),
    (
        "pod_with_inline_volume_source_probe_and_negatives",
        "inline VolumeSource, inline ProbeHandler, negative int32 and int64 (ten-byte varints), repeated int64",
        r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"spec":{"volumes":[{"name":"v","configMap":{"name":"cm","defaultMode":420}},{"name":"e","emptyDir":{"sizeLimit":"1Mi"}}],"containers":[{"name":"c","image":"busybox","ports":[{"containerPort":80,"protocol":"TCP"}],"livenessProbe":{"httpGet":{"path":"/","port":"http"},"periodSeconds":10}}],"priority":-5,"securityContext":{"supplementalGroups":[1,-2]},"hostNetwork":true},"status":{"phase":"Running","podIPs":[{"ip":"10.1.1.1"}]}}"#,
        "6b3873000a090a0276311203506f6412ee010a110a017012001a0022002a0032003800420012b0010a110a0176120c9a01090a040a02636d18a4030a100a0165120b12090a0012050a03314d6912520a0163120762757379626f782a00320d0a001000185022035443502a00420052210a1512130a012f120a080110001a04687474701a00220010001800200a280030006a007200800100880100900100a201001a00320042004a005200580160006800720d200120feffffffffffffffff018201008a01009a0100c20100c801fbffffffffffffffff011a260a0752756e6e696e671a0022002a0032004a005a00620a0a0831302e312e312e3172008801001a002200",
    ),
    (
        "raw_extension_is_the_json_text",
        "RawExtension raw: the JSON text as it stands, escapes and floats included",
        r#"{"kind":"ControllerRevision","apiVersion":"apps/v1","metadata":{"name":"cr"},"data":{"spec":{"a":1.5,"b":"\u003cx\u003e \u0026"}},"revision":2}"#,
        "6b3873000a1d0a07617070732f76311212436f6e74726f6c6c65725265766973696f6e12470a120a02637212001a0022002a00320038004200122f0a2d7b2273706563223a7b2261223a312e352c2262223a225c7530303363785c7530303365205c7530303236227d7d18021a002200",
    ),
    (
        "raw_extension_null_is_empty",
        "RawExtension null: an empty message",
        r#"{"kind":"ControllerRevision","apiVersion":"apps/v1","metadata":{"name":"cr0"},"data":null,"revision":0}"#,
        "6b3873000a1d0a07617070732f76311212436f6e74726f6c6c65725265766973696f6e12190a130a0363723012001a0022002a00320038004200120018001a002200",
    ),
    (
        "wrapper_map_values_and_empty_bytes",
        "map[string]ExtraValue (wrapper messages, null and [] alike); empty []byte present: request, and the omitempty certificate, written with length 0",
        r#"{"kind":"CertificateSigningRequest","apiVersion":"certificates.k8s.io/v1","metadata":{"name":"csr"},"spec":{"request":"","signerName":"x/y","extra":{"k":["a","b"],"e":[],"n":null},"usages":["digital signature"]},"status":{"certificate":""}}"#,
        "6b3873000a330a166365727469666963617465732e6b38732e696f2f7631121943657274696669636174655369676e696e675265717565737412540a130a0363737212001a0022002a0032003800420012390a0012001a002a116469676974616c207369676e617475726532050a01651200320b0a016b12060a01610a016232050a016e12003a03782f791a0212001a002200",
    ),
    (
        "status",
        "a v1 Status, the error body",
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old","reason":"Expired","code":410}"#,
        "6b3873000a0c0a027631120653746174757312260a060a0012001a0012074661696c7572651a07746f6f206f6c64220745787069726564309a031a002200",
    ),
    (
        "config_map_list",
        "a list: ListMeta with remainingItemCount 0, items without kind",
        r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7","remainingItemCount":0},"items":[{"metadata":{"name":"a","resourceVersion":"5"},"data":{"x":"y"}},{"metadata":{"name":"b","resourceVersion":"6"}}]}"#,
        "6b3873000a130a027631120d436f6e6669674d61704c697374123f0a090a001201371a002000121c0a120a016112001a0022002a003201353800420012060a017812017912140a120a016212001a0022002a00320136380042001a002200",
    ),
    (
        "partial_object_metadata",
        "PartialObjectMetadata",
        r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}"#,
        "6b3873000a270a0e6d6574612e6b38732e696f2f763112155061727469616c4f626a6563744d6574616461746112390a370a017012001a026e7322002a003201393800420062210a196b38732e696f2f696e697469616c2d6576656e74732d656e641204747275651a002200",
    ),
    (
        "pod_initial_events_end_bookmark",
        "a bookmark: an empty Pod whose spec and status are written as Go's zero structs",
        r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12345","annotations":{"k8s.io/initial-events-end":"true"}}}"#,
        "6b3873000a090a0276311203506f64126d0a380a0012001a0022002a00320531323334353800420062210a196b38732e696f2f696e697469616c2d6576656e74732d656e64120474727565121c1a00320042004a0052005800600068008201008a01009a0100c201001a130a001a0022002a0032004a005a0072008801001a002200",
    ),
];

/// The ADDED watch frame of {"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"w","resourceVersion":"3"}}
const WATCH_JSON: &str = r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"w","resourceVersion":"3"}}"#;
const WATCH_FRAME: &str = "0000003a0a05414444454412310a2f6b3873000a0f0a0276311209436f6e6669674d617012140a120a017712001a0022002a00320133380042001a002200";

/// metav1.Duration messages: (JSON, Go's bytes in hex)
const DURATIONS: &[(&str, &str)] =
    &[(r#""0s""#, "0800"), (r#""1h2m3.5s""#, "0880a6948faf6c"), (r#""-1.5µs""#, "08a4f4ffffffffffffff01")];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn objects_encode_to_the_bytes_go_writes() {
    for (name, what, json, want) in OBJECTS {
        let got = encode_object(json.as_bytes()).unwrap_or_else(|e| panic!("{name} ({what}): {e}"));
        assert_eq!(hex(&got), *want, "{name}: {what}");
    }
}

#[test]
fn a_list_from_its_parts_is_the_list_go_writes() {
    let (_, _, _, want) = OBJECTS.iter().find(|o| o.0 == "config_map_list").unwrap();
    let cm = MessageType::for_kind("v1", "ConfigMap").unwrap();
    let items: Vec<Vec<u8>> = [
        r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"},"data":{"x":"y"}}"#,
        r#"{"metadata":{"name":"b","resourceVersion":"6"}}"#,
    ]
    .iter()
    .map(|j| encode_message(cm, j.as_bytes()).unwrap())
    .collect();
    let got = encode_list("v1", "ConfigMapList", br#"{"resourceVersion":"7","remainingItemCount":0}"#, &items).unwrap();
    assert_eq!(hex(&got), *want);
}

#[test]
fn a_list_spliced_around_shared_items_is_the_list_go_writes() {
    let (_, _, _, want) = OBJECTS.iter().find(|o| o.0 == "config_map_list").unwrap();
    let (a, a_msg) = encode_object_with_message(
        br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"},"data":{"x":"y"}}"#,
    )
    .unwrap();
    let (b, b_msg) = encode_object_with_message(
        br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b","resourceVersion":"6"}}"#,
    )
    .unwrap();
    let items = [&a[a_msg], &b[b_msg]];
    let lens: Vec<usize> = items.iter().map(|i| i.len()).collect();
    let layout =
        ListLayout::new("v1", "ConfigMapList", br#"{"resourceVersion":"7","remainingItemCount":0}"#, &lens).unwrap();
    let mut got = layout.head.clone();
    for item in items {
        got.extend_from_slice(&layout.item_prefix(item.len()));
        got.extend_from_slice(item);
    }
    got.extend_from_slice(ENVELOPE_TAIL);
    assert_eq!(hex(&got), *want);
}

#[test]
fn list_layouts_equal_encode_list_for_long_and_empty_lists() {
    let cm = MessageType::for_kind("v1", "ConfigMap").unwrap();
    let big = format!(r#"{{"metadata":{{"name":"big"}},"data":{{"k":"{}"}}}}"#, "x".repeat(300));
    for count in [0usize, 1, 3, 200] {
        let items: Vec<Vec<u8>> = (0..count).map(|_| encode_message(cm, big.as_bytes()).unwrap()).collect();
        let meta = br#"{"resourceVersion":"99","continue":"tok"}"#;
        let want = encode_list("v1", "ConfigMapList", meta, &items).unwrap();
        let layout =
            ListLayout::new("v1", "ConfigMapList", meta, &items.iter().map(Vec::len).collect::<Vec<_>>()).unwrap();
        let mut got = layout.head.clone();
        for item in &items {
            got.extend_from_slice(&layout.item_prefix(item.len()));
            got.extend_from_slice(item);
        }
        got.extend_from_slice(ENVELOPE_TAIL);
        assert_eq!(got, want, "{count} items");
    }
}

#[test]
fn the_message_inside_an_envelope_is_encode_message_s() {
    for (name, _, json, _) in OBJECTS {
        let (body, range) = encode_object_with_message(json.as_bytes()).unwrap();
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        let ty = MessageType::for_kind(value["apiVersion"].as_str().unwrap(), value["kind"].as_str().unwrap()).unwrap();
        let Ok(message) = encode_message(ty, json.as_bytes()) else { continue };
        assert_eq!(body[range].to_vec(), message, "{name}");
    }
    assert_eq!(envelope_message(b"{}"), None);
}

#[test]
fn a_frame_head_and_the_object_are_watch_frame() {
    let object = encode_object(WATCH_JSON.as_bytes()).unwrap();
    let mut got = watch_frame_head("ADDED", object.len());
    got.extend_from_slice(&object);
    assert_eq!(hex(&got), WATCH_FRAME);
    let big = vec![7u8; 70_000];
    let mut got = watch_frame_head("MODIFIED", big.len());
    got.extend_from_slice(&big);
    assert_eq!(got, watch_frame("MODIFIED", &big));
}

#[test]
fn partial_object_metadata_from_the_metadata_alone() {
    let (_, _, _, want) = OBJECTS.iter().find(|o| o.0 == "partial_object_metadata").unwrap();
    let bare = encode_partial_object_metadata(
        br#"{"name":"p","namespace":"ns","resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}"#,
    )
    .unwrap();
    assert_eq!(hex(&envelope("meta.k8s.io/v1", "PartialObjectMetadata", &bare)), *want);
}

#[test]
fn watch_frame_is_length_then_bare_watch_event() {
    let object = encode_object(WATCH_JSON.as_bytes()).unwrap();
    assert_eq!(hex(&watch_frame("ADDED", &object)), WATCH_FRAME);
}

#[test]
fn a_bookmark_s_watch_frame_is_go_s() {
    let json = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12345"}}"#;
    assert_eq!(
        hex(&watch_frame("ADDED", &encode_object(json).unwrap())),
        "0000006a0a05414444454412610a5f6b3873000a090a0276311203506f64124a0a150a0012001a0022002a003205313233343538004200121c1a00320042004a0052005800600068008201008a01009a0100c201001a130a001a0022002a0032004a005a0072008801001a002200"
    );
}

#[test]
fn durations_are_go_nanoseconds() {
    for (json, want) in DURATIONS {
        let raw: &RawValue = serde_json::from_str(json).unwrap();
        let mut got = Vec::new();
        assert!(special::encode(Special::Duration, raw, &mut got).is_ok(), "{json}");
        assert_eq!(hex(&got), *want, "{json}");
    }
}

#[test]
fn the_envelope_writes_all_four_fields() {
    // kube-api-wire.md: 0A L [0A L "v1" 12 L "Pod"] 12 L <Pod bytes> 1A 00 22 00
    assert_eq!(hex(&envelope("v1", "Pod", &[0xaa])), "6b3873000a090a0276311203506f641201aa1a002200");
}

fn unplaceable(json: &str) -> Unplaceable {
    encode_object(json.as_bytes()).expect_err(json)
}

#[test]
fn an_unknown_key_is_refused_with_its_place() {
    let e = unplaceable(
        r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","newField":1}]}}"#,
    );
    assert!(
        matches!(&e, Unplaceable::UnknownKey { path, key, message } if path == ".spec.containers[0]" && key == "newField" && message == "core/v1.Container"),
        "{e}"
    );
    assert_eq!(e.reason(), "unknown_field");
}

#[test]
fn an_omitempty_byte_slice_left_out_is_refused_as_ambiguous() {
    // Pending: Go may hold nil (writes nothing) or "" (writes 0x12 0x00).
    let e = unplaceable(r#"{"kind":"CertificateSigningRequest","apiVersion":"certificates.k8s.io/v1","status":{}}"#);
    assert!(matches!(&e, Unplaceable::AmbiguousEmptyBytes { path } if path == ".status.certificate"), "{e}");
    assert_eq!(e.reason(), "ambiguous_empty_bytes");
    // null is nil for certain.
    let csr = r#"{"kind":"CertificateSigningRequest","apiVersion":"certificates.k8s.io/v1","spec":{"request":""},"status":{"certificate":null}}"#;
    assert!(encode_object(csr.as_bytes()).is_ok());
}

/// A CertificateSigningRequest awaiting its certificate (`"status":{}` in the
/// API server's JSON) has two protobuf forms in kube-apiserver v1.37.2, seen
/// on a real one (integration/e2e/protobuf.rs): certificate nil (created, never
/// written) ends the body with `1a 00` then the envelope's `1a 00 22 00`; a
/// status written with `"certificate": ""` (validation allows it: an empty
/// certificate equals a nil one for `bytes.Equal`) keeps an empty slice, `1a 02
/// 12 00`. The encoder writes each when the JSON says which, and refuses the
/// absent field, which says neither.
#[test]
fn a_csr_awaiting_its_certificate_has_two_go_forms_and_json_tells_neither() {
    let csr = |status: &str| {
        format!(
            r#"{{"kind":"CertificateSigningRequest","apiVersion":"certificates.k8s.io/v1","metadata":{{"name":"c"}},"spec":{{"request":"","signerName":"example.com/x","usages":["client auth"]}},"status":{status}}}"#
        )
    };
    let nil = encode_object(csr(r#"{"certificate":null}"#).as_bytes()).unwrap();
    assert!(nil.ends_with(&[0x1a, 0x00, 0x1a, 0x00, 0x22, 0x00]), "{nil:02x?}");
    let empty = encode_object(csr(r#"{"certificate":""}"#).as_bytes()).unwrap();
    assert!(empty.ends_with(&[0x1a, 0x02, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00]), "{empty:02x?}");
    assert_eq!(empty.len(), nil.len() + 2);
    let e = encode_object(csr("{}").as_bytes()).unwrap_err();
    assert!(matches!(&e, Unplaceable::AmbiguousEmptyBytes { path } if path == ".status.certificate"), "{e}");
    // Issued: the certificate's bytes, like any present []byte.
    let issued = encode_object(csr(r#"{"certificate":"AAE="}"#).as_bytes()).unwrap();
    assert!(issued.ends_with(&[0x1a, 0x04, 0x12, 0x02, 0x00, 0x01, 0x1a, 0x00, 0x22, 0x00]), "{issued:02x?}");
}

/// The cache keeps an envelope for an object version's life: it must hold
/// no spare capacity (a Vec that grew would keep up to twice its bytes; a
/// one-byte-short estimate made the memo of a 1.8 KiB pod cost 3.6 KiB).
#[test]
fn an_envelope_is_allocated_at_its_exact_size() {
    let long = "x".repeat(200);
    for (api_version, kind) in [("v1", "Pod"), ("meta.k8s.io/v1", "PartialObjectMetadata"), (long.as_str(), "K")] {
        for len in [0, 1, 127, 128, 1_800, 16_383, 16_384, 2_100_000] {
            let body = envelope(api_version, kind, &vec![7; len]);
            assert_eq!(body.capacity(), body.len(), "{api_version} {kind}, a message of {len} bytes");
            assert_eq!(envelope_message(&body).map(|r| r.len()), Some(len));
        }
    }
}

#[test]
fn values_of_the_wrong_form_are_refused() {
    for (json, path) in [
        (r#"{"kind":"Pod","apiVersion":"v1","spec":{"priority":1.5}}"#, ".spec.priority"),
        (r#"{"kind":"Pod","apiVersion":"v1","spec":{"priority":4294967296}}"#, ".spec.priority"),
        (r#"{"kind":"Pod","apiVersion":"v1","spec":{"hostNetwork":"yes"}}"#, ".spec.hostNetwork"),
        (
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"creationTimestamp":"yesterday"}}"#,
            ".metadata.creationTimestamp",
        ),
        (r#"{"kind":"Pod","apiVersion":"v1","spec":{"overhead":{"cpu":1}}}"#, ".spec.overhead.cpu"),
        (r#"{"kind":"Secret","apiVersion":"v1","data":{"a":"not base64!"}}"#, ".data.a"),
        (r#"{"kind":"Pod","apiVersion":"v1","spec":{"containers":{}}}"#, ".spec.containers"),
    ] {
        let e = unplaceable(json);
        assert!(matches!(&e, Unplaceable::BadValue { path: p, .. } if p == path), "{json}: {e}");
    }
}

#[test]
fn kinds_without_a_protobuf_form_are_refused() {
    assert!(matches!(
        unplaceable(r#"{"kind":"Widget","apiVersion":"example.com/v1","spec":{}}"#),
        Unplaceable::UnknownKind { .. }
    ));
    assert!(matches!(unplaceable(r#"{"metadata":{}}"#), Unplaceable::NoTypeMeta));
    assert!(matches!(unplaceable("{"), Unplaceable::Json { .. }));
    assert!(matches!(
        encode_list("v1", "APIGroupList", b"{}", Vec::<Vec<u8>>::new()),
        Err(Unplaceable::NotAList { .. })
    ));
    // core/v1 List: Go writes its items as runtime.Unknown (streaming lists).
    assert!(matches!(
        unplaceable(r#"{"kind":"List","apiVersion":"v1","metadata":{},"items":[]}"#),
        Unplaceable::RawExtensionItems { .. }
    ));
}

#[test]
fn field_paths_are_named_with_json_keys() {
    let pod = MessageType::for_kind("v1", "Pod").unwrap();
    // spec(2).containers(2).ports(6).containerPort(3)
    assert_eq!(describe_field_path(pod, &[2, 2, 6, 3]), "spec.containers.ports.containerPort");
    assert_eq!(describe_field_path(pod, &[1, 11, 2]), "metadata.labels.{value}");
}

#[test]
fn every_kind_of_the_table_encodes_its_empty_object() {
    // The zero object of every kind: what Go writes for `{}` follows the
    // same rules, so this only proves the table is complete and loops
    // nowhere (inline members, wrappers, specials).
    for (api_version, kind) in known_kinds() {
        let ty = MessageType::for_kind(api_version, kind).unwrap();
        match encode_message(ty, b"{}") {
            Ok(_) | Err(Unplaceable::AmbiguousEmptyBytes { .. } | Unplaceable::RawExtensionItems { .. }) => {}
            Err(e) => panic!("{api_version} {kind}: {e}"),
        }
    }
}

proptest! {
    /// Go decodes JSON into structs and maps, so the order of members in
    /// the upstream JSON never shows in the protobuf: maps come out sorted,
    /// fields by number.
    #[test]
    fn member_order_does_not_change_the_bytes(
        data in proptest::collection::btree_map("[a-z<&]{0,6}", "\\PC{0,8}", 0..6),
        labels in proptest::collection::btree_map("[a-z./]{1,6}", "[a-z0-9]{0,4}", 0..4),
    ) {
        let object = |reverse: bool| {
            let mut d: Vec<_> = data.iter().collect();
            let mut l: Vec<_> = labels.iter().collect();
            if reverse {
                d.reverse();
                l.reverse();
            }
            let mut meta = serde_json::Map::new();
            let labels: serde_json::Map<_, _> = l.into_iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
            meta.insert("labels".into(), labels.into());
            meta.insert("name".into(), "n".into());
            let data: serde_json::Map<_, _> = d.into_iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
            let mut top = serde_json::Map::new();
            if reverse {
                top.insert("data".into(), data.into());
                top.insert("metadata".into(), meta.into());
                top.insert("apiVersion".into(), "v1".into());
                top.insert("kind".into(), "ConfigMap".into());
            } else {
                top.insert("kind".into(), "ConfigMap".into());
                top.insert("apiVersion".into(), "v1".into());
                top.insert("metadata".into(), meta.into());
                top.insert("data".into(), data.into());
            }
            serde_json::to_vec(&top).unwrap()
        };
        let forward = encode_object(&object(false)).unwrap();
        prop_assert_eq!(encode_object(&object(true)).unwrap(), forward);
    }
}
