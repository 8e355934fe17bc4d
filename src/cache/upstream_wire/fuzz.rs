//! Bounded fuzzing (proptest) of this parser of untrusted input: upstream watch event lines (any bytes, truncated events, wrong
//! types, odd resourceVersions, bookmarks, ERROR events) applied to a resource cache,
//! then a relist. The cache's version never goes back, a rejected line changes
//! nothing, an applied one changes its own object only, and what the cache would
//! serve of an object, restamped or not, is that object in JSON.
//!
//! Part of the crate's fuzz targets: cases, shared strategies and the long-run
//! switch are in `crate::fuzz`.

use std::collections::BTreeMap;

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::Value;

use crate::cache::resource::{CacheSettings, ResourceCache, Scope};
use crate::cache::state::object::tests::cm_shape;
use crate::cache::state::object::{CachedObject, ObjectKey};
use crate::cache::state::store::{Objects, Snapshot};
use crate::cache::upstream_wire::read_line;
use crate::encode::variant::ContentVariant;
use crate::fuzz::{Words, config, one_of};

/// Repeats weigh the choices toward events that apply.
const TYPES: Words = &[
    &["\"ADDED\"", "\"ADDED\"", "\"ADDED\"", "\"MODIFIED\"", "\"MODIFIED\"", "\"DELETED\"", "\"DELETED\""],
    &["\"BOOKMARK\"", "\"ERROR\"", "\"added\"", "\"Bookmark\"", "\"\"", "\"UNKNOWN\"", "5", "null"],
];
const NAMES: &[&str] = &["\"a\"", "\"a\"", "\"b\"", "\"b\"", "\"\"", "\"é\"", "5", "null"];
const NAMESPACES: &[&str] = &["\"ns\"", "\"other\"", "\"\"", "5"];
const ODD_RVS: Words = &[
    &["\"18446744073709551615\"", "\"18446744073709551616\"", "\"0\"", "\"007\"", "\"+5\""],
    &["\"-1\"", "\"abc\"", "\"\"", "\" 5\"", "\"1e3\"", "5", "1e3", "null"],
];
/// Labels and annotations, one named like the field stamping rewrites (see the test
/// below, which found that stamping once took it for the field).
const LABELS: &[&str] =
    &["{}", "null", "5", r#"{"app":"x"}"#, r#"{"app":5}"#, r#"{"":""}"#, r#"{"resourceVersion":"7"}"#];
const ANNOTATIONS: &[&str] = &["{}", r#"{"note":"\"resourceVersion\":\"1\""}"#, r#"{"a":"x\"y","b":null}"#];
const STATUS_CODES: &[&str] = &["410", "\"410\"", "410.0", "-1", "70000", "null", "500", "4100"];
const ODD_OBJECTS: &[&str] = &[
    "5",
    "null",
    "\"x\"",
    "[]",
    "{}",
    r#"{"metadata":5}"#,
    r#"{"metadata":{}}"#,
    r#"{"kind":"ConfigMap","metadata":null}"#,
    r#"{"metadata":{"name":"a","resourceVersion":"40","labels":{"k":5}}}"#,
    r#"{"metadata":{"name":"a","name":"b","resourceVersion":"41"}}"#,
    r#"{ "metadata" : { "name" : "c" , "resourceVersion" : "42" } }"#,
    // A bookmark look-alike: a Secret's `type` is free text.
    r#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","resourceVersion":"43"},"type":"BOOKMARK"}"#,
];
const ODD_LINES: &[&str] = &[
    "",
    " ",
    "\r",
    "\t \r",
    "{}",
    "null",
    "[]",
    r#"{"type":"ADDED"}"#,
    r#"{"object":{}}"#,
    r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"50"}},"type":"DELETED"}"#,
    r#"{"object":{"metadata":{"name":"a","resourceVersion":"51"}},"type":"ADDED"}"#,
];

/// Mostly small increasing-ish versions, so that events apply; sometimes odd ones.
fn rv() -> impl Strategy<Value = String> {
    prop_oneof![4 => (1u64..60).prop_map(|n| format!("\"{n}\"")), 1 => one_of(ODD_RVS).prop_map(str::to_owned)]
}

fn object() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (select(NAMES), select(NAMESPACES), rv(), select(LABELS)).prop_map(|(name, ns, rv, labels)| format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":{name},"namespace":{ns},"resourceVersion":{rv},"labels":{labels}}},"data":{{"k":"v"}}}}"#
        )),
        // As items of typed lists come: no type meta, other key order.
        1 => (select(NAMES), rv()).prop_map(|(name, rv)| format!(r#"{{"metadata":{{"resourceVersion":{rv},"name":{name}}}}}"#)),
        1 => rv().prop_map(|rv| format!(r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":{rv}}}}}"#)),
        // As custom resources come: Go's encoding/json sorts the keys of unstructured objects.
        1 => (select(ANNOTATIONS), select(LABELS), select(NAMES), rv()).prop_map(|(annotations, labels, name, rv)| format!(
            r#"{{"apiVersion":"v1","data":{{"k":"v"}},"kind":"ConfigMap","metadata":{{"annotations":{annotations},"labels":{labels},"name":{name},"namespace":"ns","resourceVersion":{rv}}}}}"#
        )),
        1 => select(STATUS_CODES).prop_map(|code| format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":{code}}}"#
        )),
        1 => select(ODD_OBJECTS).prop_map(str::to_owned),
    ]
}

fn line() -> impl Strategy<Value = Bytes> {
    let event = || {
        (one_of(TYPES), object(), select(&["", "\r", " "][..]))
            .prop_map(|(kind, object, end)| format!(r#"{{"type":{kind},"object":{object}}}{end}"#).into())
    };
    prop_oneof![
        6 => event(),
        2 => (event(), any::<Index>()).prop_map(|(e, cut): (Bytes, _)| e.slice(..cut.index(e.len() + 1))),
        1 => vec(any::<u8>(), 0..200).prop_map(Bytes::from),
        1 => select(ODD_LINES).prop_map(|l| Bytes::from_static(l.as_bytes())),
    ]
}

fn versions(snapshot: &Snapshot) -> BTreeMap<ObjectKey, u64> {
    snapshot.objects.iter().map(|(k, o)| (k.clone(), o.rv)).collect()
}

/// What an applied line must have done: an event newer than the cache changes its
/// own object only, a bookmark or an older event changes no object.
fn expected_after(line: &[u8], rv: u64, before: &Snapshot) -> BTreeMap<ObjectKey, u64> {
    let mut expected = versions(before);
    let event: Value = serde_json::from_slice(line).expect("an applied line is JSON");
    let kind = event["type"].as_str().expect("an applied line has a type");
    if kind == "BOOKMARK" || rv <= before.rv {
        return expected;
    }
    let meta = &event["object"]["metadata"];
    let key = ObjectKey::new(
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().expect("an applied object has a name"),
    );
    if kind == "DELETED" {
        expected.remove(&key);
    } else {
        expected.insert(key, rv);
    }
    expected
}

/// What the cache serves of an object is JSON, whatever the upstream sent. Stamped with
/// another version (a DELETED after a relist, or to a watcher the object no longer
/// matches) it is still the same object; the version is the new one when the upstream
/// writes as the API server does (compact), which object.rs tests.
fn served_forms_hold_up(object: &CachedObject) -> Result<(), TestCaseError> {
    let rv = object.rv.wrapping_add(1);
    let stamped = CachedObject::decode(object.with_resource_version(rv).json().clone(), &cm_shape());
    prop_assert!(
        stamped
            .as_ref()
            .is_ok_and(|s| s.key == object.key && s.labels == object.labels && [rv, object.rv].contains(&s.rv)),
        "{:?} stamped with {} is {:?}",
        object.json(),
        rv,
        stamped.map(|s| s.json().clone())
    );
    let [head, rest] = object.list_item(ContentVariant::Json, true).expect("JSON");
    // Protobuf may refuse an object, never panic on one.
    let _ = object.list_item(ContentVariant::Protobuf, true);
    let _ = object.encoded(ContentVariant::PartialObjectMetadataProtobuf);
    let encodings = [
        object.encoded(ContentVariant::Json).expect("JSON").to_vec(),
        object.encoded(ContentVariant::PartialObjectMetadataJson).expect("JSON").to_vec(),
        [head, rest].concat(),
    ];
    for bytes in encodings {
        prop_assert!(serde_json::from_slice::<Value>(&bytes).is_ok(), "{}", String::from_utf8_lossy(&bytes));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn lines_never_move_the_cache_back_and_change_only_what_they_apply(lines in vec(line(), 1..16)) {
        let cache = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
        cache.replace(Objects::new(), 10);
        for line in lines {
            let before = cache.cache().snapshot();
            let result = read_line(&cache.cache().shape, &line).map(|change| change.map(|change| cache.apply(change)));
            let after = cache.cache().snapshot();
            prop_assert_eq!(after.rv, cache.cache().current_rv());
            match result {
                Err(_) | Ok(None) => {
                    prop_assert_eq!(after.rv, before.rv, "rejected {:?}", line);
                    prop_assert_eq!(versions(&after), versions(&before), "rejected {:?}", line);
                }
                Ok(Some(rv)) => {
                    prop_assert_eq!(after.rv, before.rv.max(rv), "applied {:?}", line);
                    prop_assert_eq!(versions(&after), expected_after(&line, rv, &before), "applied {:?}", line);
                }
            }
            for object in after.objects.values() {
                served_forms_hold_up(object)?;
            }
        }
        // Then the upstream expires the watch and a relist at the same version finds nothing:
        // the cache empties and stays at that version, u64::MAX included.
        let rv = cache.cache().current_rv();
        cache.replace(Objects::new(), rv);
        prop_assert!(cache.cache().snapshot().objects.is_empty());
        prop_assert_eq!(cache.cache().current_rv(), rv);
    }
}

/// Found by the target above: custom resources come with sorted keys, so a label or
/// annotation named `resourceVersion` stands before the field that stamping rewrites.
#[test]
fn stamping_a_custom_resource_rewrites_its_version_not_a_label_or_an_annotation() {
    for metadata in [
        r#"{"labels":{"resourceVersion":"7"},"name":"a","resourceVersion":"11"}"#,
        r#"{"annotations":{"resourceVersion":"x\"y"},"name":"a","resourceVersion":"11"}"#,
    ] {
        let raw = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{metadata}}}"#);
        let object = CachedObject::decode(Bytes::from(raw), &cm_shape()).expect("a valid object");
        let stamped = CachedObject::decode(object.with_resource_version(12).json().clone(), &cm_shape());
        assert_eq!(stamped.map(|o| (o.rv, o.labels)).ok(), Some((12, object.labels.clone())), "{metadata}");
    }
}
