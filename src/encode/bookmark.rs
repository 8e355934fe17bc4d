//! The object of a BOOKMARK event as kube-apiserver writes it.
//!
//! The watch cache makes a bookmark's object with its storage's `NewFunc`
//! (the kind's zero internal object), sets only its resourceVersion (and the
//! `k8s.io/initial-events-end` annotation at the end of a watch-list's
//! initial events), and the watch encodes it like any event: converted to
//! the watched version, then serialized. So a Pod's bookmark carries
//! `"spec":{"containers":null},"status":{}`, a Deployment's a `"replicas":0`
//! the conversion sets, a DaemonSet's an annotation its conversion adds.
//!
//! `zero_objects.txt` holds those objects for every built-in kind and
//! version, generated from every supported minor's Kubernetes modules
//! (integration/cmd/zerojson, merged and checked for drift by
//! integration/scripts/generated-tables.sh; a line of some minors only is
//! marked, and the upstream's minor's are used, [`minor`]): per kind the plain form and the
//! initial-events-end form, with `RV` where the version goes. A custom
//! resource's storage makes an unstructured object holding only its type, so
//! its bookmark has nothing besides apiVersion, kind and metadata, written
//! from a map: keys sorted (any kind missing from the table is written that
//! way; an aggregated API's typed kind would differ). A PartialObjectMetadata
//! bookmark is the typed ObjectMeta whatever the kind.

use std::collections::HashMap;

use super::minor;

/// Where each generated object holds the bookmark's version.
const VERSION_PLACEHOLDER: &str = r#""resourceVersion":"RV""#;

/// The generated bookmark objects by (apiVersion, kind): plain, and ending
/// a watch-list's initial events.
/// Each supported minor has its own (`zero_objects.txt` marks the lines of
/// some minors only); the upstream's minor's are used.
type ZeroObjects = HashMap<(&'static str, &'static str), [&'static str; 2]>;
static ZERO_OBJECTS: minor::PerMinor<ZeroObjects> = minor::PerMinor::new();

fn zero_objects_of(minor: u8) -> ZeroObjects {
    minor::lines_of(include_str!("zero_objects.txt"), minor)
        .filter_map(|line| {
            let mut fields = line.splitn(4, ' ');
            let (api_version, kind) = (fields.next()?, fields.next()?);
            Some(((api_version, kind), [fields.next()?, fields.next()?]))
        })
        .collect()
}

/// A bookmark's metadata as Go writes an `ObjectMeta`: the version, then
/// the initial-events-end annotation when `initial_end`.
pub(crate) fn bookmark_metadata(rv: u64, initial_end: bool) -> String {
    let annotations = if initial_end { r#","annotations":{"k8s.io/initial-events-end":"true"}"# } else { "" };
    format!(r#"{{"resourceVersion":"{rv}"{annotations}}}"#)
}

/// The JSON object of a bookmark of `kind` in `api_version` at `rv`, the
/// initial-events-end annotation set when `initial_end`: the generated
/// object of a built-in kind; else an unstructured object's, which Go
/// writes from a map, every key sorted.
pub(crate) fn bookmark_object(kind: &str, api_version: &str, rv: u64, initial_end: bool) -> String {
    let version = format!(r#""resourceVersion":"{rv}""#);
    if let Some(forms) = ZERO_OBJECTS.served(zero_objects_of).get(&(api_version, kind)) {
        return forms[usize::from(initial_end)].replacen(VERSION_PLACEHOLDER, &version, 1);
    }
    let annotations = if initial_end { r#""annotations":{"k8s.io/initial-events-end":"true"},"# } else { "" };
    format!(
        r#"{{"apiVersion":{},"kind":{},"metadata":{{{annotations}{version}}}}}"#,
        serde_json::to_string(api_version).expect("string"),
        serde_json::to_string(kind).expect("string"),
    )
}

/// A bookmark of a typed kind with nothing but its type and metadata (a
/// PartialObjectMetadata), as Go writes it.
pub(crate) fn typed_bookmark_object(kind: &str, api_version: &str, rv: u64, initial_end: bool) -> String {
    format!(
        r#"{{"kind":{},"apiVersion":{},"metadata":{}}}"#,
        serde_json::to_string(kind).expect("string"),
        serde_json::to_string(api_version).expect("string"),
        bookmark_metadata(rv, initial_end),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_kinds_carry_their_zero_fields_around_the_version() {
        assert_eq!(
            bookmark_object("Pod", "v1", 1541, false),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"1541"},"spec":{"containers":null},"status":{}}"#
        );
        assert_eq!(
            bookmark_object("Service", "v1", 7, true),
            r#"{"kind":"Service","apiVersion":"v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{},"status":{"loadBalancer":{}}}"#
        );
        // The conversion's own annotation, merged in Go's (sorted) map order.
        assert_eq!(
            bookmark_object("DaemonSet", "apps/v1", 3, true),
            r#"{"kind":"DaemonSet","apiVersion":"apps/v1","metadata":{"resourceVersion":"3","annotations":{"deprecated.daemonset.template.generation":"0","k8s.io/initial-events-end":"true"}},"spec":{"selector":null,"template":{"metadata":{},"spec":{"containers":null}},"updateStrategy":{}},"status":{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}}"#
        );
        assert_eq!(
            bookmark_object("ConfigMap", "v1", 9, false),
            r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9"}}"#
        );
    }

    #[test]
    fn every_generated_object_has_one_version_and_both_forms_differ_only_by_the_annotation() {
        for minor in minor::SUPPORTED {
            let objects = ZERO_OBJECTS.get(minor, zero_objects_of);
            assert!(objects.len() > 100, "1.{minor}: {}", objects.len());
            every_object_has_one_version_and_both_forms(objects);
        }
    }

    fn every_object_has_one_version_and_both_forms(objects: &ZeroObjects) {
        for ((api_version, kind), [plain, end]) in objects {
            let head = format!(r#"{{"kind":"{kind}","apiVersion":"{api_version}","metadata":{{"#);
            assert!(plain.starts_with(&head) && end.starts_with(&head), "{kind}");
            assert_eq!(plain.matches(VERSION_PLACEHOLDER).count(), 1, "{kind}");
            let object: serde_json::Value = serde_json::from_str(end).unwrap();
            assert_eq!(object["metadata"]["annotations"]["k8s.io/initial-events-end"], "true", "{kind}");
        }
    }

    #[test]
    fn custom_resources_are_unstructured_and_partial_object_metadata_typed() {
        assert_eq!(
            bookmark_object("Widget", "example.com/v1", 5, true),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"annotations":{"k8s.io/initial-events-end":"true"},"resourceVersion":"5"}}"#
        );
        assert_eq!(
            bookmark_object("Widget", "example.com/v1", 5, false),
            r#"{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"resourceVersion":"5"}}"#
        );
        assert_eq!(
            typed_bookmark_object("PartialObjectMetadata", "meta.k8s.io/v1", 5, true),
            r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"5","annotations":{"k8s.io/initial-events-end":"true"}}}"#
        );
    }
}
