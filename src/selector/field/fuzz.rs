//! Bounded fuzzing (proptest) of this parser of untrusted input: any text, escapes, operators; field extraction from random
//! JSON objects for every resource the field tables know and for custom resources.
//! The canonical form parses back, validation accepts exactly the fields the table
//! lists, and an object's own field values select it.
//!
//! Part of the crate's fuzz targets: cases, shared strategies and the long-run
//! switch are in `crate::fuzz`.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Number, Value};

use crate::fuzz::{Words, config, one_of, prints_back, repeated, token_soup};
use crate::selector::field::{FieldOp, FieldRequirement};
use crate::selector::selectable::{KINDS, PLAIN, builtin_fields, extract, validate};
use crate::selector::{FieldSelector, FieldSet, Fields};

const TOKENS: Words = &[
    &["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "type", "x"],
    &["=", "==", "!=", "!", ","],
    &["\\", "\\\\", "\\,", "\\=", "\\x"],
    &[" ", "é", "日本", "\u{0}", "\"", ".", "['a']"],
];

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        token_soup(TOKENS, 40),
        repeated(&["a=", "a!=", "", "=", "\\"], &["\\", ",", "=", "!=", "\\,", "a=b,", "\\\\"], &["", "x", "\\"]),
    ]
}

/// Every resource the field tables know, and one they do not.
fn resources() -> impl Iterator<Item = (&'static str, &'static str)> {
    let plain = PLAIN.iter().flat_map(|(group, resources)| resources.iter().map(move |r| (*group, *r)));
    KINDS.iter().map(|k| (k.group, k.resource)).chain(plain).chain([("example.com", "widgets")])
}

const KEYS: Words = &[
    &["metadata", "name", "namespace", "labels"],
    &["spec", "status", "nodeName", "podIPs", "ip", "type", "source", "component", "pool", "n", "a"],
    &["", "é"],
];
const STRINGS: &[&str] = &["", "x", "n1", "a,b=c\\", "é", "\u{0}", "true", "0"];
/// Where extraction reads, so that random values land there often.
const PATHS: &[&[&str]] = &[
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["spec", "nodeName"],
    &["spec", "serviceAccountName"],
    &["spec", "serviceAccount"],
    &["spec", "hostNetwork"],
    &["spec", "unschedulable"],
    &["spec", "pool", "name"],
    &["status", "podIPs"],
    &["status", "podIP"],
    &["status", "replicas"],
    &["status", "succeeded"],
    &["involvedObject", "name"],
    &["regarding", "kind"],
    &["source", "component"],
    &["reportingComponent"],
    &["type"],
    &["spec", "a", "b.c"],
];
/// CRD selectableFields jsonPaths, well-formed or not.
const CUSTOM_PATHS: &[&str] =
    &["spec.a", ".spec.a", "spec.a['b.c']", "['spec']", "", ".", "a.", "a..b", "a[", "['open", "a['b']c", "é.ü"];

fn number() -> impl Strategy<Value = Number> {
    prop_oneof![any::<i64>().prop_map(Number::from), any::<u64>().prop_map(Number::from), {
        use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
        // JSON numbers are finite.
        (POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO).prop_map(|f| Number::from_f64(f).expect("finite"))
    },]
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::Number),
        select(STRINGS).prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            vec((one_of(KEYS), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

/// Sets `value` at `path`, turning whatever is in the way into objects.
fn put(target: &mut Value, path: &[&str], value: Value) {
    let mut at = target;
    for key in path {
        if !at.is_object() {
            *at = Value::Object(serde_json::Map::new());
        }
        at = at.as_object_mut().expect("just made an object").entry(*key).or_insert(Value::Null);
    }
    *at = value;
}

/// Random JSON with random values planted where extraction reads.
fn object() -> impl Strategy<Value = Value> {
    (json(), vec((select(PATHS), json()), 0..8)).prop_map(|(mut object, planted)| {
        for (path, value) in planted {
            put(&mut object, path, value);
        }
        object
    })
}

/// A selector naming every field with its own value, in canonical form, parses back and selects them.
fn selects_itself(fields: &Fields) -> Result<(), TestCaseError> {
    let sel: FieldSelector = fields
        .iter()
        .map(|(f, v)| FieldRequirement { field: f.to_owned(), op: FieldOp::Eq, value: v.to_owned() })
        .collect();
    let text = sel.to_string();
    prop_assert_eq!(FieldSelector::parse(&text), Ok(sel.clone()), "{:?}", text);
    prop_assert!(sel.matches(fields), "{:?} on {:?}", text, fields);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_parsed_selector_prints_a_form_that_parses_back_to_it(text in text()) {
        prints_back(&text, FieldSelector::parse)?;
    }

    #[test]
    fn validation_accepts_exactly_the_fields_the_table_lists(
        text in prop_oneof![text(), token_soup(&[&["metadata.name=a,", "metadata.namespace!=b,", "type==c,", "x=,"]], 4)],
        namespaced in any::<bool>(),
    ) {
        let Ok(sel) = FieldSelector::parse(&text) else { return Ok(()) };
        for (group, resource) in resources() {
            let listed = builtin_fields(group, resource).unwrap_or_default();
            let named = |f: &str| f == "metadata.name" || listed.contains(&f);
            match validate(group, resource, namespaced, None, &sel) {
                // Only some kinds reject metadata.namespace, so it may pass or not.
                Ok(()) => prop_assert!(sel.requirements().iter().all(|r| named(&r.field) || r.field == "metadata.namespace")),
                Err(message) => {
                    prop_assert!(sel.requirements().iter().any(|r| !named(&r.field)), "{}/{}: {}", group, resource, message);
                }
            }
        }
        let selectable = ["spec.a".to_owned(), ".status.b".to_owned()];
        let custom = |f: &str| ["metadata.name", "spec.a", "status.b"].contains(&f) || (namespaced && f == "metadata.namespace");
        let accepted = validate("example.com", "widgets", namespaced, Some(&selectable), &sel).is_ok();
        prop_assert_eq!(accepted, sel.requirements().iter().all(|r| custom(&r.field)));
    }

    #[test]
    fn builtin_fields_come_from_the_object_and_select_it(object in object(), namespaced in any::<bool>()) {
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        for (group, resource) in resources() {
            let fields = extract(group, resource, namespaced, None, &object);
            let listed = builtin_fields(group, resource).unwrap_or_default();
            for (field, _) in fields.iter() {
                let nameable = field == "metadata.name" || (namespaced && field == "metadata.namespace") || listed.contains(&field);
                prop_assert!(nameable, "{}/{} extracts {} that no selector may name", group, resource, field);
            }
            prop_assert_eq!(fields.get("metadata.name"), Some(name));
            selects_itself(&fields)?;
        }
    }

    #[test]
    fn custom_resource_fields_print_what_the_json_path_holds(
        object in object(),
        paths in vec(select(CUSTOM_PATHS), 0..4),
        n in number(),
    ) {
        let mut object = object;
        put(&mut object, &["spec", "n"], Value::Number(n.clone()));
        let selectable: Vec<String> = paths.iter().copied().chain(["spec.n"]).map(str::to_owned).collect();
        let fields = extract("example.com", "widgets", true, Some(&selectable), &object);
        for path in &selectable {
            prop_assert!(fields.get(path.strip_prefix('.').unwrap_or(path)).is_some(), "{}", path);
        }
        let printed = fields.get("spec.n").expect("listed");
        match n.as_i64() {
            Some(i) => prop_assert_eq!(printed, i.to_string()),
            // Go's %v of a float64: the shortest digits that read back as the same number.
            None => prop_assert_eq!(printed.parse::<f64>().ok(), n.as_f64(), "{}", printed),
        }
        selects_itself(&fields)?;
    }
}
