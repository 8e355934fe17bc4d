//! The values of an object's selectable fields, as the strategies'
//! `ToSelectableFields` (and, for custom resources, the CRD's selectableFields) produce them.

use serde_json::Value;

use super::super::field::intern;
use super::super::{Fields, FieldsBuilder};
use crate::go_rules::fmt::go_float;

/// An object read as JSON, looked up by a path of keys: a `serde_json`
/// tree, or the cache's sparse reading of one (which holds the paths
/// [`read_paths`] names).
pub(crate) trait Lookup {
    /// The value at `path`, if every key on the way is there.
    fn at(&self, path: &[&str]) -> Option<&Value>;
}

impl Lookup for Value {
    fn at(&self, path: &[&str]) -> Option<&Value> {
        path.iter().try_fold(self, |v, key| v.get(key))
    }
}

/// The field set of one object (JSON as served by the API server), for a
/// built-in resource or for a custom resource with `selectable` = the CRD's
/// selectableFields jsonPaths without leading dot.
///
/// A resource that is neither (`custom_selectable` is None and the table does
/// not know it) gets `metadata.name` and, when namespaced, `metadata.namespace`.
/// The cache decodes with [`extract_with`], its CRD's fields prepared once.
#[cfg(test)]
pub(crate) fn extract(
    group: &str,
    resource: &str,
    namespaced: bool,
    custom_selectable: Option<&[String]>,
    object: &(impl Lookup + ?Sized),
) -> Fields {
    extract_with(group, resource, namespaced, custom_selectable.map(CustomFields::new).as_ref(), object)
}

/// A custom resource's selectable fields as [`extract_with`] reads them:
/// each name interned and its jsonPath split once for the CRD, not again for
/// every event (interning takes a lock shared by every cache's reflector).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CustomFields(Vec<(&'static str, Option<Vec<String>>)>);

impl CustomFields {
    /// The CRD's selectableFields jsonPaths, leading dot or not.
    pub(crate) fn new(selectable: &[String]) -> Self {
        Self(
            selectable
                .iter()
                .map(|name| {
                    let name = name.strip_prefix('.').unwrap_or(name);
                    (intern(name), json_path(name))
                })
                .collect(),
        )
    }
}

/// [`extract`], a custom resource's fields prepared once ([`CustomFields`]).
pub(crate) fn extract_with(
    group: &str,
    resource: &str,
    namespaced: bool,
    custom: Option<&CustomFields>,
    object: &(impl Lookup + ?Sized),
) -> Fields {
    let extra = custom.map_or_else(|| builtin_paths(group, resource).len(), |custom| custom.0.len());
    let mut fields = FieldsBuilder::with_capacity(2 + extra);
    fields.insert("metadata.name", text(object, &["metadata", "name"]));
    if namespaced {
        fields.insert("metadata.namespace", text(object, &["metadata", "namespace"]));
    }
    match custom {
        Some(custom) => {
            for (name, path) in &custom.0 {
                fields.insert(name, custom_value(object, path.as_deref()));
            }
        }
        None => builtin_values(group, resource, object, &mut fields),
    }
    fields.build()
}

/// The object paths [`extract`] reads for this resource, each read whole: a
/// decoder may leave the rest of the object unread. Dotted for built-in
/// resources (none of their keys holds a dot); a custom resource's
/// jsonPaths split as [`custom_value`] splits them.
pub(crate) fn read_paths(group: &str, resource: &str, custom_selectable: Option<&[String]>) -> Vec<Vec<String>> {
    let mut paths =
        vec![vec!["metadata".to_owned(), "name".to_owned()], vec!["metadata".to_owned(), "namespace".to_owned()]];
    match custom_selectable {
        Some(selectable) => {
            paths.extend(selectable.iter().filter_map(|name| json_path(name.strip_prefix('.').unwrap_or(name))));
        }
        None => {
            paths.extend(builtin_paths(group, resource).iter().map(|path| path.split('.').map(str::to_owned).collect()))
        }
    }
    paths
}

/// What [`builtin_values`] reads, by resource. A path missing here reads as
/// absent after a sparse decode; `read_paths_cover_every_lookup` checks the
/// two agree.
fn builtin_paths(group: &str, resource: &str) -> &'static [&'static str] {
    match (group, resource) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.serviceAccount",
            "spec.hostNetwork",
            "status.phase",
            "status.podIPs",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "secrets") => &["type"],
        ("", "events") => &["involvedObject", "reportingComponent", "source.component", "reason", "type"],
        ("events.k8s.io", "events") => &["regarding", "reason", "reportingController", "type"],
        ("", "namespaces") => &["status.phase"],
        ("", "services") => &["spec.clusterIP", "spec.type"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("batch", "jobs") => &["status.succeeded"],
        ("certificates.k8s.io", "certificatesigningrequests" | "clustertrustbundles") => &["spec.signerName"],
        ("certificates.k8s.io", "podcertificaterequests") => &["spec.signerName", "spec.podName", "spec.nodeName"],
        ("resource.k8s.io", "resourceslices") => &["spec.nodeName", "spec.driver", "spec.pool.name"],
        _ => &[],
    }
}

/// The parts of an event's object reference that are selectable, in the
/// order the field tables list them under `involvedObject` (core/v1) and
/// `regarding` (events.k8s.io), whose names [`builtin_values`] takes from there.
const REFERENCE_PARTS: [&str; 7] = ["kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"];

fn involved_object_fields() -> &'static [&'static str] {
    &super::CORE_EVENT_FIELDS[..REFERENCE_PARTS.len()]
}

fn regarding_fields() -> &'static [&'static str] {
    &super::EVENTS_V1_FIELDS[1..=REFERENCE_PARTS.len()]
}

/// The values `ToSelectableFields` gives, read from the object's v1 JSON.
fn builtin_values(group: &str, resource: &str, o: &(impl Lookup + ?Sized), fields: &mut FieldsBuilder) {
    let mut put = |name: &'static str, value: String| fields.insert(name, value);
    match (group, resource) {
        ("", "pods") => {
            let node = text(o, &["spec", "nodeName"]);
            put("spec.host", node.clone());
            put("spec.nodeName", node);
            put("spec.restartPolicy", text(o, &["spec", "restartPolicy"]));
            put("spec.schedulerName", text(o, &["spec", "schedulerName"]));
            // v1 still carries the deprecated serviceAccount, which conversion falls back to.
            let sa = non_empty(text(o, &["spec", "serviceAccountName"]))
                .unwrap_or_else(|| text(o, &["spec", "serviceAccount"]));
            put("spec.serviceAccountName", sa);
            put("spec.hostNetwork", boolean(o, &["spec", "hostNetwork"]));
            put("status.phase", text(o, &["status", "phase"]));
            // The internal pod has only podIPs; v1's podIP is its first entry.
            let ip = lookup(o, &["status", "podIPs"])
                .and_then(|ips| ips.get(0))
                .and_then(|ip| ip.get("ip"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| text(o, &["status", "podIP"]));
            put("status.podIP", ip);
            put("status.nominatedNodeName", text(o, &["status", "nominatedNodeName"]));
        }
        ("", "nodes") => put("spec.unschedulable", boolean(o, &["spec", "unschedulable"])),
        ("", "secrets") => put("type", text(o, &["type"])),
        ("", "events") => {
            for (part, name) in REFERENCE_PARTS.iter().zip(involved_object_fields()) {
                put(name, text(o, &["involvedObject", part]));
            }
            let reporting = text(o, &["reportingComponent"]);
            let source = non_empty(text(o, &["source", "component"])).unwrap_or_else(|| reporting.clone());
            put("reason", text(o, &["reason"]));
            put("reportingComponent", reporting);
            put("source", source);
            put("type", text(o, &["type"]));
        }
        ("events.k8s.io", "events") => {
            for (part, name) in REFERENCE_PARTS.iter().zip(regarding_fields()) {
                put(name, text(o, &["regarding", part]));
            }
            put("reason", text(o, &["reason"]));
            put("reportingController", text(o, &["reportingController"]));
            put("type", text(o, &["type"]));
        }
        ("", "namespaces") => put("status.phase", text(o, &["status", "phase"])),
        ("", "services") => {
            put("spec.clusterIP", text(o, &["spec", "clusterIP"]));
            put("spec.type", text(o, &["spec", "type"]));
        }
        ("", "replicationcontrollers") => put("status.replicas", integer(o, &["status", "replicas"])),
        ("batch", "jobs") => put("status.successful", integer(o, &["status", "succeeded"])),
        ("certificates.k8s.io", "certificatesigningrequests" | "clustertrustbundles") => {
            put("spec.signerName", text(o, &["spec", "signerName"]));
        }
        ("certificates.k8s.io", "podcertificaterequests") => {
            put("spec.signerName", text(o, &["spec", "signerName"]));
            put("spec.podName", text(o, &["spec", "podName"]));
            put("spec.nodeName", text(o, &["spec", "nodeName"]));
        }
        ("resource.k8s.io", "resourceslices") => {
            put("spec.nodeName", text(o, &["spec", "nodeName"]));
            put("spec.driver", text(o, &["spec", "driver"]));
            put("spec.pool.name", text(o, &["spec", "pool", "name"]));
        }
        _ => {}
    }
}

fn lookup<'a>(o: &'a (impl Lookup + ?Sized), path: &[&str]) -> Option<&'a Value> {
    #[cfg(test)]
    tests::LOOKED_UP.with(|seen| seen.borrow_mut().as_mut().map(|seen| seen.push(path.join("."))));
    o.at(path)
}

/// A string field; absent, null or not a string is `""` (Go's zero value).
fn text(o: &(impl Lookup + ?Sized), path: &[&str]) -> String {
    lookup(o, path).and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// A bool field as `strconv.FormatBool` writes it; absent is `false`.
fn boolean(o: &(impl Lookup + ?Sized), path: &[&str]) -> String {
    lookup(o, path).and_then(Value::as_bool).unwrap_or(false).to_string()
}

/// An integer field in decimal; absent is `0`.
fn integer(o: &(impl Lookup + ?Sized), path: &[&str]) -> String {
    lookup(o, path).and_then(Value::as_i64).unwrap_or(0).to_string()
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A custom resource's selectable field: the jsonPath's value as
/// `fmt.Sprint` prints it, `""` when absent or null. CRD validation limits the
/// paths to dotted field names of string, boolean or integer fields;
/// `['key']` segments are read too.
fn custom_value(object: &(impl Lookup + ?Sized), path: Option<&[String]>) -> String {
    let Some(path) = path else {
        return String::new();
    };
    let keys: Vec<&str> = path.iter().map(String::as_str).collect();
    let Some(value) = lookup(object, &keys) else {
        return String::new();
    };
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            // The API server decodes any other number as a float64.
            None => go_float(n.as_f64().unwrap_or(0.0)),
        },
        // Not a scalar: CRD validation does not allow such a path.
        Value::Array(_) | Value::Object(_) => String::new(),
    }
}

/// Splits `spec.a['b.c']` into `["spec", "a", "b.c"]`; None for anything else.
fn json_path(name: &str) -> Option<Vec<String>> {
    let mut keys = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix("['") {
            let end = quoted.find("']")?;
            keys.push(quoted[..end].to_owned());
            rest = &quoted[end + 2..];
        } else {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            keys.push(rest[..end].to_owned());
            rest = &rest[end..];
        }
        if let Some(after_dot) = rest.strip_prefix('.') {
            if after_dot.is_empty() {
                return None;
            }
            rest = after_dot;
        }
    }
    (!keys.is_empty()).then_some(keys)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::cell::RefCell;

    use super::super::super::{FieldSelector, FieldSet};
    use super::super::{KINDS, validate};
    use super::*;

    thread_local! {
        /// Every path [`lookup`] was asked for on this thread, dotted, while
        /// a test records them (`Some`).
        pub(super) static LOOKED_UP: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
    }

    #[test]
    fn reference_field_names_are_the_prefix_and_the_part() {
        for ((part, involved), regarding) in
            REFERENCE_PARTS.iter().zip(involved_object_fields()).zip(regarding_fields())
        {
            assert_eq!(*involved, format!("involvedObject.{part}"));
            assert_eq!(*regarding, format!("regarding.{part}"));
        }
    }

    /// A decoder that keeps only [`read_paths`] gives `extract` the same
    /// answers only if every path `extract` looks up lies under one of them.
    #[test]
    fn read_paths_cover_every_lookup() {
        let custom = ["spec.a".to_owned(), ".status['b.c']".to_owned()];
        let mut resources: Vec<(&str, &str, Option<&[String]>)> =
            KINDS.iter().map(|k| (k.group, k.resource, None)).collect();
        resources.push(("example.com", "widgets", Some(&custom)));
        resources.push(("", "configmaps", None));
        for (group, resource, custom) in resources {
            LOOKED_UP.with(|seen| *seen.borrow_mut() = Some(Vec::new()));
            // Absent everywhere: every lookup goes its whole way down.
            extract(group, resource, true, custom, &json!({}));
            let kept: Vec<String> = read_paths(group, resource, custom).iter().map(|p| p.join(".")).collect();
            let looked_up = LOOKED_UP.with(|seen| seen.take()).unwrap_or_default();
            assert!(!looked_up.is_empty() || custom.is_some(), "{group}/{resource}: lookups recorded");
            for path in looked_up {
                assert!(
                    kept.iter().any(|k| path == *k || path.starts_with(&format!("{k}."))),
                    "{group}/{resource}: {path} is read but not kept"
                );
            }
        }
    }

    fn sel(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap()
    }

    /// Objects as kube-apiserver v1.37.2 served them (trimmed), and which ones it
    /// listed for each selector: extract + matches must list the same.
    fn check(
        group: &str,
        resource: &str,
        namespaced: bool,
        custom: Option<&[String]>,
        objects: &[Value],
        cases: &[(&str, &[&str])],
    ) {
        let extracted: Vec<(String, Fields)> = objects
            .iter()
            .map(|o| {
                (o["metadata"]["name"].as_str().unwrap().to_owned(), extract(group, resource, namespaced, custom, o))
            })
            .collect();
        for (selector, expected) in cases {
            let s = sel(selector);
            assert_eq!(validate(group, resource, namespaced, custom, &s), Ok(()), "{selector}");
            let got: Vec<&str> = extracted.iter().filter(|(_, f)| s.matches(f)).map(|(n, _)| n.as_str()).collect();
            assert_eq!(got, *expected, "{group}/{resource} {selector}");
        }
    }
    #[test]
    fn pod_fields_select_as_the_api_server_does() {
        let pods = [
            json!({"metadata":{"name":"p1","namespace":"selector-probe"},
                "spec":{"restartPolicy":"Always","schedulerName":"default-scheduler"},
                "status":{"phase":"Pending","nominatedNodeName":"node-y","qosClass":"BestEffort"}}),
            json!({"metadata":{"name":"p2","namespace":"selector-probe"},
                "spec":{"restartPolicy":"Never","serviceAccountName":"default","serviceAccount":"default",
                    "nodeName":"node-x","hostNetwork":true,"schedulerName":"default-scheduler"},
                "status":{"phase":"Running","podIP":"10.0.0.5","podIPs":[{"ip":"10.0.0.5"},{"ip":"fd00::5"}]}}),
        ];
        check(
            "",
            "pods",
            true,
            None,
            &pods,
            &[
                ("spec.nodeName=node-x", &["p2"]),
                ("spec.host=node-x", &["p2"]),
                ("spec.nodeName=", &["p1"]),
                ("spec.host=", &["p1"]),
                ("spec.host=node-x,spec.nodeName!=node-x", &[]),
                ("spec.hostNetwork=true", &["p2"]),
                ("spec.hostNetwork=false", &["p1"]),
                ("spec.restartPolicy=Never", &["p2"]),
                ("spec.restartPolicy=Always", &["p1"]),
                ("spec.schedulerName=default-scheduler", &["p1", "p2"]),
                ("spec.serviceAccountName=default", &["p2"]),
                ("spec.serviceAccountName=", &["p1"]),
                ("status.phase=Running", &["p2"]),
                ("status.podIP=10.0.0.5", &["p2"]),
                ("status.podIP=fd00::5", &[]),
                // Accepted, never set: every pod has status.podIPs "".
                ("status.podIPs=10.0.0.5", &[]),
                (r"status.podIPs=10.0.0.5\,fd00::5", &[]),
                ("status.podIPs=", &["p1", "p2"]),
                ("status.podIPs!=x", &["p1", "p2"]),
                ("status.nominatedNodeName=node-y", &["p1"]),
                ("metadata.namespace=selector-probe", &["p1", "p2"]),
                ("metadata.name=p1", &["p1"]),
                ("metadata.name!=p1", &["p2"]),
            ],
        );
        let f = extract("", "pods", true, None, &pods[1]);
        assert_eq!(f.get("status.podIPs"), None);
        assert_eq!(f.get("spec.hostNetwork"), Some("true"));
    }
    #[test]
    fn every_selectable_builtin_field_gets_a_value() {
        // The conversion funcs and ToSelectableFields agree except for pod status.podIPs.
        let empty = json!({"metadata": {"name": "x", "namespace": "ns"}});
        for (group, resource) in [
            ("", "pods"),
            ("", "nodes"),
            ("", "secrets"),
            ("", "events"),
            ("events.k8s.io", "events"),
            ("", "namespaces"),
            ("", "services"),
            ("", "replicationcontrollers"),
            ("batch", "jobs"),
            ("certificates.k8s.io", "certificatesigningrequests"),
            ("certificates.k8s.io", "clustertrustbundles"),
            ("certificates.k8s.io", "podcertificaterequests"),
            ("resource.k8s.io", "resourceslices"),
        ] {
            let fields = extract(group, resource, true, None, &empty);
            let extra = super::super::builtin_fields(group, resource).unwrap();
            for field in extra.iter().filter(|f| **f != "status.podIPs") {
                assert!(fields.get(field).is_some(), "{group}/{resource}: {field}");
            }
            assert_eq!(fields.len(), 2 + extra.len() - usize::from(resource == "pods"), "{group}/{resource}");
        }
    }

    #[test]
    fn pod_ip_and_service_account_fall_back_to_the_older_v1_fields() {
        let pod = json!({"metadata":{"name":"p"},"spec":{"serviceAccount":"old"},"status":{"podIP":"10.1.1.1"}});
        let f = extract("", "pods", true, None, &pod);
        assert_eq!(f.get("spec.serviceAccountName"), Some("old"));
        assert_eq!(f.get("status.podIP"), Some("10.1.1.1"));
        assert_eq!(f.get("metadata.namespace"), Some(""));
    }
    #[test]
    fn node_secret_service_rc_and_namespace_fields() {
        let nodes = [
            json!({"metadata":{"name":"selprobe-n1"},"spec":{"unschedulable":true}}),
            json!({"metadata":{"name":"selprobe-n2"},"spec":{}}),
        ];
        check(
            "",
            "nodes",
            false,
            None,
            &nodes,
            &[("spec.unschedulable=true", &["selprobe-n1"]), ("spec.unschedulable=false", &["selprobe-n2"])],
        );
        assert_eq!(extract("", "nodes", false, None, &nodes[0]).get("metadata.namespace"), None);
        let secrets = [
            json!({"metadata":{"name":"s1","namespace":"selector-probe"},"type":"kubernetes.io/tls"}),
            json!({"metadata":{"name":"s2","namespace":"selector-probe"},"type":"Opaque"}),
        ];
        check(
            "",
            "secrets",
            true,
            None,
            &secrets,
            &[("type=kubernetes.io/tls", &["s1"]), ("type=Opaque", &["s2"]), ("type=", &[])],
        );
        let services = [
            json!({"metadata":{"name":"svc1","namespace":"ns"},"spec":{"clusterIP":"10.0.0.198","type":"ClusterIP"}}),
            json!({"metadata":{"name":"svc2","namespace":"ns"},"spec":{"type":"ExternalName","externalName":"x.com"}}),
            json!({"metadata":{"name":"svc3","namespace":"ns"},"spec":{"clusterIP":"None","type":"ClusterIP"}}),
        ];
        check(
            "",
            "services",
            true,
            None,
            &services,
            &[
                ("spec.type=ClusterIP", &["svc1", "svc3"]),
                ("spec.type=ExternalName", &["svc2"]),
                ("spec.clusterIP=None", &["svc3"]),
                ("spec.clusterIP=", &["svc2"]),
            ],
        );
        let rcs = [json!({"metadata":{"name":"rc1","namespace":"ns"},"spec":{"replicas":3},"status":{"replicas":2}})];
        check(
            "",
            "replicationcontrollers",
            true,
            None,
            &rcs,
            &[("status.replicas=2", &["rc1"]), ("status.replicas=3", &[]), ("status.replicas=0", &[])],
        );
        let namespaces = [
            json!({"metadata":{"name":"selector-probe"},"status":{"phase":"Active"}}),
            json!({"metadata":{"name":"e2e-crud"},"status":{"phase":"Terminating"}}),
        ];
        check(
            "",
            "namespaces",
            false,
            None,
            &namespaces,
            &[("status.phase=Active", &["selector-probe"]), ("status.phase=Terminating", &["e2e-crud"])],
        );
    }
    #[test]
    fn event_fields_in_both_groups() {
        let core = [
            json!({"metadata":{"name":"ev1","namespace":"ns"},"involvedObject":{"kind":"Pod","namespace":"ns",
                "name":"p1","uid":"u-1","apiVersion":"v1","resourceVersion":"42","fieldPath":"spec.containers{c}"},
                "reason":"Started","source":{"component":"kubelet","host":"h"},"type":"Normal",
                "reportingComponent":"","reportingInstance":""}),
            json!({"metadata":{"name":"ev2","namespace":"ns"},"involvedObject":{"kind":"Pod","namespace":"ns",
                "name":"p2"},"reason":"Failed","source":{},"type":"Warning","action":"Act",
                "reportingComponent":"my-ctrl","reportingInstance":"my-ctrl-1"}),
        ];
        check(
            "",
            "events",
            true,
            None,
            &core,
            &[
                ("source=kubelet", &["ev1"]),
                // No source component: source is the reporting controller.
                ("source=my-ctrl", &["ev2"]),
                ("reportingComponent=my-ctrl", &["ev2"]),
                ("reportingComponent=", &["ev1"]),
                ("involvedObject.uid=u-1", &["ev1"]),
                ("involvedObject.resourceVersion=42", &["ev1"]),
                ("involvedObject.fieldPath=spec.containers{c}", &["ev1"]),
                ("type=Warning", &["ev2"]),
                ("reason=Started", &["ev1"]),
                ("involvedObject.kind=Node", &[]),
            ],
        );
        let v1 = [
            json!({"metadata":{"name":"ev1","namespace":"ns"},"reason":"Started","regarding":{"kind":"Pod",
                "namespace":"ns","name":"p1","uid":"u-1","apiVersion":"v1","resourceVersion":"42",
                "fieldPath":"spec.containers{c}"},"type":"Normal","deprecatedSource":{"component":"kubelet"}}),
            json!({"metadata":{"name":"ev2","namespace":"ns"},"reportingController":"my-ctrl","reason":"Failed",
                "regarding":{"kind":"Pod","namespace":"ns","name":"p2"},"type":"Warning","deprecatedSource":{}}),
        ];
        check(
            "events.k8s.io",
            "events",
            true,
            None,
            &v1,
            &[
                ("reportingController=my-ctrl", &["ev2"]),
                ("reportingController=", &["ev1"]),
                ("regarding.kind=Pod", &["ev1", "ev2"]),
                ("regarding.name=p1", &["ev1"]),
                ("regarding.uid=u-1", &["ev1"]),
                ("regarding.fieldPath=spec.containers{c}", &["ev1"]),
                ("type=Normal", &["ev1"]),
            ],
        );
    }
    #[test]
    fn job_certificate_and_resource_slice_fields() {
        let jobs = [
            json!({"metadata":{"name":"j1","namespace":"ns"},"spec":{"parallelism":1},"status":{}}),
            json!({"metadata":{"name":"j2","namespace":"ns"},"status":{"succeeded":2}}),
        ];
        check(
            "batch",
            "jobs",
            true,
            None,
            &jobs,
            &[("status.successful=0", &["j1"]), ("status.successful=", &[]), ("status.successful=2", &["j2"])],
        );
        let csrs = [json!({"metadata":{"name":"selprobe-csr"},"spec":{"signerName":"example.com/sel"}})];
        check(
            "certificates.k8s.io",
            "certificatesigningrequests",
            false,
            None,
            &csrs,
            &[("spec.signerName=example.com/sel", &["selprobe-csr"])],
        );
        let bundles = [
            json!({"metadata":{"name":"example.com:sel:b1"},"spec":{"signerName":"example.com/sel"}}),
            json!({"metadata":{"name":"selprobe-nosigner"},"spec":{}}),
        ];
        check(
            "certificates.k8s.io",
            "clustertrustbundles",
            false,
            None,
            &bundles,
            &[
                ("spec.signerName=example.com/sel", &["example.com:sel:b1"]),
                ("spec.signerName=", &["selprobe-nosigner"]),
            ],
        );
        let pcrs = [json!({"metadata":{"name":"r","namespace":"ns"},
            "spec":{"signerName":"example.com/s","podName":"p","nodeName":"n","serviceAccountName":"sa"}})];
        check(
            "certificates.k8s.io",
            "podcertificaterequests",
            true,
            None,
            &pcrs,
            &[("spec.signerName=example.com/s,spec.podName=p,spec.nodeName=n", &["r"])],
        );
        let slices = [
            json!({"metadata":{"name":"selprobe-rs1"},"spec":{"driver":"drv.example.com",
                "pool":{"name":"pool-a","generation":1,"resourceSliceCount":1},"nodeName":"node-x"}}),
            json!({"metadata":{"name":"selprobe-rs2"},"spec":{"driver":"drv.example.com",
                "pool":{"name":"pool-b","generation":1,"resourceSliceCount":1},"allNodes":true}}),
        ];
        check(
            "resource.k8s.io",
            "resourceslices",
            false,
            None,
            &slices,
            &[
                ("spec.nodeName=node-x", &["selprobe-rs1"]),
                ("spec.nodeName=", &["selprobe-rs2"]),
                ("spec.driver=drv.example.com", &["selprobe-rs1", "selprobe-rs2"]),
                ("spec.pool.name=pool-b", &["selprobe-rs2"]),
            ],
        );
    }
    #[test]
    fn plain_builtins_have_name_and_namespace_only() {
        let cm = json!({"metadata":{"name":"c","namespace":"ns"},"data":{"a":"b"}});
        let f = extract("", "configmaps", true, None, &cm);
        assert_eq!(f.iter().collect::<Vec<_>>(), [("metadata.name", "c"), ("metadata.namespace", "ns")]);
        let rs = json!({"metadata":{"name":"r","namespace":"ns"},"status":{"replicas":2}});
        assert_eq!(extract("apps", "replicasets", true, None, &rs).len(), 2);
        for (group, resource) in [("discovery.k8s.io", "endpointslices"), ("", "endpoints")] {
            assert!(sel("metadata.name=c,metadata.namespace=ns").matches(&extract(group, resource, true, None, &cm)));
        }
        for (group, resource) in [("node.k8s.io", "runtimeclasses"), ("storage.k8s.io", "csidrivers")] {
            let f = extract(group, resource, false, None, &json!({"metadata":{"name":"x"}}));
            assert!(sel("metadata.name=x,metadata.namespace=").matches(&f));
            assert!(!sel("metadata.namespace=x").matches(&f));
        }
    }
    #[test]
    fn custom_resource_fields_print_as_go_does() {
        let selectable: Vec<String> =
            ["spec.color", "spec.enabled", "spec.size", "spec.nested.deep"].map(String::from).to_vec();
        let crs = [
            json!({"metadata":{"name":"a","namespace":"ns"},
                "spec":{"color":"red","enabled":true,"nested":{"deep":"x"},"size":3}}),
            json!({"metadata":{"name":"b","namespace":"ns"},"spec":{"enabled":false,"size":-7}}),
            json!({"metadata":{"name":"c","namespace":"ns"},"spec":{}}),
        ];
        // Results of kube-apiserver v1.37.2 for a CRD with these selectableFields.
        check(
            "selprobe.example.com",
            "selwnamespaceds",
            true,
            Some(&selectable),
            &crs,
            &[
                ("spec.color=red", &["a"]),
                ("spec.color=", &["b", "c"]),
                ("spec.enabled=true", &["a"]),
                ("spec.enabled=false", &["b"]),
                ("spec.enabled=", &["c"]),
                ("spec.size=3", &["a"]),
                ("spec.size=-7", &["b"]),
                ("spec.size=", &["c"]),
                ("spec.nested.deep=x", &["a"]),
                ("metadata.namespace=ns", &["a", "b", "c"]),
            ],
        );
        let cluster = [json!({"metadata":{"name":"ca"},"spec":{"color":"blue","size":12345678901_i64}})];
        check(
            "selprobe.example.com",
            "selwclusters",
            false,
            Some(&selectable),
            &cluster,
            &[("spec.size=12345678901", &["ca"]), ("spec.color=blue", &["ca"]), ("metadata.name=ca", &["ca"])],
        );
    }
    #[test]
    fn custom_resource_paths_and_odd_values() {
        let selectable: Vec<String> =
            ["spec.a['b.c']", "spec.n", "spec.f", "spec.big", "spec.obj", "status.x"].map(String::from).to_vec();
        let o = json!({"metadata":{"name":"x"},"spec":{"a":{"b.c":"dotted"},"n":null,"f":2.5,
            "big":18446744073709551615_u64,"obj":{"k":"v"}},"status":"oops"});
        let f = extract("example.com", "things", false, Some(&selectable), &o);
        assert_eq!(f.get("spec.a['b.c']"), Some("dotted"));
        assert_eq!(f.get("spec.n"), Some(""));
        assert_eq!(f.get("spec.f"), Some("2.5"));
        assert_eq!(f.get("spec.big"), Some("1.8446744073709552e+19"));
        assert_eq!(f.get("spec.obj"), Some(""));
        assert_eq!(f.get("status.x"), Some(""));
        assert_eq!(f.get("metadata.namespace"), None);
    }
    #[test]
    fn json_path_reads_dots_and_quoted_keys() {
        assert_eq!(json_path("spec.a"), Some(vec!["spec".into(), "a".into()]));
        assert_eq!(json_path("spec['a.b'].c"), Some(vec!["spec".into(), "a.b".into(), "c".into()]));
        assert_eq!(json_path("['x']"), Some(vec!["x".into()]));
        assert_eq!(json_path(""), None);
        assert_eq!(json_path("spec."), None);
        assert_eq!(json_path("spec..a"), None);
        assert_eq!(json_path("spec['a"), None);
        assert_eq!(json_path("spec[0]"), None);
    }
}
