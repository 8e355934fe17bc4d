//! Which fields a selector may name for each resource, and the values an
//! object has for them.
//!
//! Two tables in kube-apiserver decide this, and they do not always agree:
//! the field label conversion func registered for the kind (what a selector
//! may name; `AddFieldLabelConversionFunc` in `pkg/apis/*/v1/conversion.go`,
//! `runtime.DefaultMetaV1FieldSelectorConversion` when there is none) and the
//! strategy's `ToSelectableFields` (what an object has). A field the first
//! accepts but the second lacks reads as `""` (pod `status.podIPs`); a field the
//! second has but the first rejects cannot be selected (apps/v1 ReplicaSet
//! `status.replicas`). Everything here was checked against kube-apiserver
//! v1.37.2; the tests say which message and which value came from where.

mod extract;

#[cfg(test)]
pub(crate) use extract::extract;
pub(crate) use extract::{CustomFields, Lookup, extract_with, read_paths};

use super::FieldSelector;
use crate::go_rules::fmt::go_quote;

/// How the kind's conversion func words a rejection.
#[derive(Clone, Copy)]
enum Rejection {
    /// `runtime.DefaultMetaV1FieldSelectorConversion`.
    Default,
    /// `field label not supported: x`, the usual hand-written func.
    NotSupported,
    /// batch/v1 Job: `field label "x" not supported for Job`.
    Job,
    /// resource.k8s.io/v1 ResourceSlice.
    ResourceSlice,
}

/// One built-in resource with its own conversion func.
pub(crate) struct Kind {
    pub(crate) group: &'static str,
    pub(crate) resource: &'static str,
    /// Whether `metadata.namespace` is accepted: not for nodes, namespaces,
    /// the certificates kinds (PodCertificateRequest included, though it is
    /// namespaced) and resource slices.
    namespace_selectable: bool,
    /// Every other name accepted besides `metadata.name`, in the conversion func's order.
    extra: &'static [&'static str],
    rejection: Rejection,
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    // Accepted by the conversion func but never set by PodToSelectableFields: always "".
    "status.podIPs",
    "status.nominatedNodeName",
    // Old clients' name for spec.nodeName; the conversion func renames it.
    "spec.host",
];

const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// events.k8s.io names, mapped by its conversion func onto the core ones
/// (`regarding.*` to `involvedObject.*`, `reportingController` to
/// `reportingComponent`); `source` is not accepted there in v1.37.
const EVENTS_V1_FIELDS: &[&str] = &[
    "reason",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
    "type",
];

pub(crate) const KINDS: &[Kind] = &[
    Kind {
        group: "",
        resource: "pods",
        namespace_selectable: true,
        extra: POD_FIELDS,
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "",
        resource: "nodes",
        namespace_selectable: false,
        extra: &["spec.unschedulable"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "",
        resource: "secrets",
        namespace_selectable: true,
        extra: &["type"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "",
        resource: "events",
        namespace_selectable: true,
        extra: CORE_EVENT_FIELDS,
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "events.k8s.io",
        resource: "events",
        namespace_selectable: true,
        extra: EVENTS_V1_FIELDS,
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "",
        resource: "namespaces",
        namespace_selectable: false,
        extra: &["status.phase"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "",
        resource: "services",
        namespace_selectable: true,
        extra: &["spec.clusterIP", "spec.type"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "",
        resource: "replicationcontrollers",
        namespace_selectable: true,
        extra: &["status.replicas"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "batch",
        resource: "jobs",
        namespace_selectable: true,
        extra: &["status.successful"],
        rejection: Rejection::Job,
    },
    Kind {
        group: "certificates.k8s.io",
        resource: "certificatesigningrequests",
        namespace_selectable: false,
        extra: &["spec.signerName"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "certificates.k8s.io",
        resource: "clustertrustbundles",
        namespace_selectable: false,
        extra: &["spec.signerName"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "certificates.k8s.io",
        resource: "podcertificaterequests",
        namespace_selectable: false,
        extra: &["spec.signerName", "spec.podName", "spec.nodeName"],
        rejection: Rejection::NotSupported,
    },
    Kind {
        group: "resource.k8s.io",
        resource: "resourceslices",
        namespace_selectable: false,
        extra: &["spec.nodeName", "spec.driver", "spec.pool.name"],
        rejection: Rejection::ResourceSlice,
    },
];

/// Built-in resources of kube-apiserver v1.37 (the default-enabled API
/// versions) with no conversion func of their own: only `metadata.name` and
/// `metadata.namespace` (the latter also for cluster-scoped ones, where it is `""`).
#[cfg(test)]
pub(crate) const PLAIN: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "componentstatuses",
            "configmaps",
            "endpoints",
            "limitranges",
            "persistentvolumeclaims",
            "persistentvolumes",
            "podtemplates",
            "resourcequotas",
            "serviceaccounts",
        ],
    ),
    (
        "admissionregistration.k8s.io",
        &[
            "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings",
            "mutatingwebhookconfigurations",
            "validatingadmissionpolicies",
            "validatingadmissionpolicybindings",
            "validatingwebhookconfigurations",
        ],
    ),
    ("apiextensions.k8s.io", &["customresourcedefinitions"]),
    ("apiregistration.k8s.io", &["apiservices"]),
    // apps/v1 ReplicaSet has status.replicas in its field set, but no conversion func lets a selector name it.
    ("apps", &["controllerrevisions", "daemonsets", "deployments", "replicasets", "statefulsets"]),
    ("autoscaling", &["horizontalpodautoscalers"]),
    ("batch", &["cronjobs"]),
    ("coordination.k8s.io", &["leases"]),
    ("discovery.k8s.io", &["endpointslices"]),
    ("flowcontrol.apiserver.k8s.io", &["flowschemas", "prioritylevelconfigurations"]),
    ("networking.k8s.io", &["ingressclasses", "ingresses", "ipaddresses", "networkpolicies", "servicecidrs"]),
    ("node.k8s.io", &["runtimeclasses"]),
    ("policy", &["poddisruptionbudgets"]),
    ("rbac.authorization.k8s.io", &["clusterrolebindings", "clusterroles", "rolebindings", "roles"]),
    ("resource.k8s.io", &["deviceclasses", "devicetaintrules", "resourceclaims", "resourceclaimtemplates"]),
    ("scheduling.k8s.io", &["priorityclasses"]),
    (
        "storage.k8s.io",
        &[
            "csidrivers",
            "csinodes",
            "csistoragecapacities",
            "storageclasses",
            "volumeattachments",
            "volumeattributesclasses",
        ],
    ),
    ("storagemigration.k8s.io", &["storageversionmigrations"]),
];

fn kind(group: &str, resource: &str) -> Option<&'static Kind> {
    KINDS.iter().find(|k| k.group == group && k.resource == resource)
}

#[cfg(test)]
fn is_plain(group: &str, resource: &str) -> bool {
    PLAIN.iter().any(|(g, resources)| *g == group && resources.contains(&resource))
}

/// Extra selectable fields of a built-in resource beyond metadata.name (and
/// metadata.namespace for namespaced kinds); None when the resource is not a
/// built-in one this table knows.
///
/// These are the names a selector may use, aliases included (pod `spec.host`
/// means `spec.nodeName`; pod `status.podIPs` is accepted but always `""`).
/// Exceptions to the namespace rule: PodCertificateRequest is namespaced but
/// rejects `metadata.namespace`, and cluster-scoped kinds without a
/// conversion func of their own accept it (it is `""` there); [`validate`]
/// knows both.
#[cfg(test)]
pub(crate) fn builtin_fields(group: &str, resource: &str) -> Option<&'static [&'static str]> {
    match kind(group, resource) {
        Some(k) => Some(k.extra),
        None if is_plain(group, resource) => Some(&[]),
        None => None,
    }
}

/// Err(message) when the selector names a field the API server would reject
/// for this resource. The message is exactly the API server's (for a 400
/// Status), for the first rejected field in the order the API server checks.
///
/// For resource slices the message names resource.k8s.io/v1, the only
/// version v1.37 serves by default. A resource that is neither a known built-in
/// nor a custom resource is checked as `DefaultMetaV1FieldSelectorConversion` would.
pub(crate) fn validate(
    group: &str,
    resource: &str,
    namespaced: bool,
    custom_selectable: Option<&[String]>,
    selector: &FieldSelector,
) -> Result<(), String> {
    let rules = match custom_selectable {
        Some(selectable) => Rules::Custom { namespaced, selectable },
        None => kind(group, resource).map_or(Rules::Default, Rules::Builtin),
    };
    match selector.requirements().iter().find(|r| !rules.accepts(&r.field)) {
        Some(rejected) => Err(rules.rejection(&rejected.field)),
        None => Ok(()),
    }
}

/// The field label conversion that applies to one resource.
enum Rules<'a> {
    /// The CRD's converter (apiextensions-apiserver `crConverter.ConvertFieldLabel`).
    Custom {
        namespaced: bool,
        selectable: &'a [String],
    },
    Builtin(&'static Kind),
    /// `DefaultMetaV1FieldSelectorConversion`.
    Default,
}

impl Rules<'_> {
    fn accepts(&self, label: &str) -> bool {
        label == "metadata.name"
            || match self {
                Rules::Custom { namespaced, selectable } => {
                    (*namespaced && label == "metadata.namespace")
                        || selectable.iter().any(|s| s.strip_prefix('.').unwrap_or(s) == label)
                }
                Rules::Builtin(k) => {
                    (k.namespace_selectable && label == "metadata.namespace") || k.extra.contains(&label)
                }
                Rules::Default => label == "metadata.namespace",
            }
    }

    /// The conversion func's error text, which the API server sends as the 400 Status message.
    fn rejection(&self, label: &str) -> String {
        let rejection = match self {
            Rules::Custom { .. } => Rejection::NotSupported,
            Rules::Builtin(k) => k.rejection,
            Rules::Default => Rejection::Default,
        };
        match rejection {
            Rejection::Default => {
                format!(
                    r#"{} is not a known field selector: only "metadata.name", "metadata.namespace""#,
                    go_quote(label)
                )
            }
            Rejection::NotSupported => format!("field label not supported: {label}"),
            Rejection::Job => format!("field label {} not supported for Job", go_quote(label)),
            Rejection::ResourceSlice => {
                format!("field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: {label}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap()
    }

    fn reject(group: &str, resource: &str, namespaced: bool, selector: &str) -> String {
        validate(group, resource, namespaced, None, &sel(selector)).expect_err(selector)
    }

    fn accepts(group: &str, resource: &str, namespaced: bool, selector: &str) -> bool {
        validate(group, resource, namespaced, None, &sel(selector)).is_ok()
    }

    #[test]
    fn builtin_fields_lists_the_conversion_funcs_extra_names() {
        assert_eq!(builtin_fields("", "pods"), Some(POD_FIELDS));
        assert_eq!(builtin_fields("", "nodes"), Some(&["spec.unschedulable"][..]));
        assert_eq!(builtin_fields("", "secrets"), Some(&["type"][..]));
        assert_eq!(builtin_fields("", "events").map(<[_]>::len), Some(11));
        assert_eq!(builtin_fields("events.k8s.io", "events").map(<[_]>::len), Some(10));
        assert_eq!(builtin_fields("", "namespaces"), Some(&["status.phase"][..]));
        assert_eq!(builtin_fields("", "services"), Some(&["spec.clusterIP", "spec.type"][..]));
        assert_eq!(builtin_fields("", "replicationcontrollers"), Some(&["status.replicas"][..]));
        assert_eq!(builtin_fields("batch", "jobs"), Some(&["status.successful"][..]));
        assert_eq!(builtin_fields("certificates.k8s.io", "certificatesigningrequests"), Some(&["spec.signerName"][..]));
        assert_eq!(builtin_fields("certificates.k8s.io", "clustertrustbundles"), Some(&["spec.signerName"][..]));
        assert_eq!(
            builtin_fields("certificates.k8s.io", "podcertificaterequests"),
            Some(&["spec.signerName", "spec.podName", "spec.nodeName"][..])
        );
        assert_eq!(
            builtin_fields("resource.k8s.io", "resourceslices"),
            Some(&["spec.nodeName", "spec.driver", "spec.pool.name"][..])
        );
    }
    #[test]
    fn other_builtins_have_only_name_and_namespace() {
        let empty: &[&str] = &[];
        for (group, resource) in [
            ("", "configmaps"),
            ("", "endpoints"),
            ("", "serviceaccounts"),
            ("apps", "replicasets"),
            ("apps", "deployments"),
            ("batch", "cronjobs"),
            ("discovery.k8s.io", "endpointslices"),
            ("node.k8s.io", "runtimeclasses"),
            ("storage.k8s.io", "csidrivers"),
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
        ] {
            assert_eq!(builtin_fields(group, resource), Some(empty), "{group}/{resource}");
        }
    }
    #[test]
    fn unknown_resources_are_not_in_the_table() {
        assert_eq!(builtin_fields("example.com", "widgets"), None);
        assert_eq!(builtin_fields("", "widgets"), None);
        assert_eq!(builtin_fields("apps", "pods"), None);
        assert_eq!(builtin_fields("metrics.k8s.io", "pods"), None);
    }
    #[test]
    fn every_listed_field_is_accepted() {
        // Each was accepted by kube-apiserver v1.37.2 (a list with `<field>=x` answered 200).
        for kind in KINDS {
            for field in kind.extra.iter().chain(&["metadata.name"]) {
                let selector = format!("{field}=x");
                assert!(
                    accepts(kind.group, kind.resource, true, &selector),
                    "{}/{}: {field}",
                    kind.group,
                    kind.resource
                );
            }
        }
        assert!(accepts("", "pods", true, "metadata.namespace=x"));
        assert!(accepts("", "configmaps", true, "metadata.name=a,metadata.namespace=b"));
        assert!(accepts("", "secrets", true, "type=Opaque,metadata.namespace!=x"));
        // Cluster-scoped kinds without a conversion func of their own accept it too (and it is always "").
        assert!(accepts("storage.k8s.io", "csidrivers", false, "metadata.namespace=x"));
        assert!(accepts("rbac.authorization.k8s.io", "clusterroles", false, "metadata.namespace="));
        assert!(accepts("", "pods", true, ""));
    }
    #[test]
    fn kinds_with_a_hand_written_conversion_func_say_field_label_not_supported() {
        // Messages verified against kube-apiserver v1.37.2.
        assert_eq!(reject("", "pods", true, "foo=bar"), "field label not supported: foo");
        assert_eq!(reject("", "pods", true, "=x"), "field label not supported: ");
        assert_eq!(reject("", "pods", true, "a b=c"), "field label not supported: a b");
        assert_eq!(reject("", "pods", true, "a\"b=c"), "field label not supported: a\"b");
        assert_eq!(reject("", "pods", true, r"a\b=c"), r"field label not supported: a\b");
        assert_eq!(reject("", "pods", true, "a\tb=c"), "field label not supported: a\tb");
        for (group, resource) in [
            ("", "nodes"),
            ("", "namespaces"),
            ("", "secrets"),
            ("", "services"),
            ("", "replicationcontrollers"),
            ("", "events"),
            ("events.k8s.io", "events"),
            ("certificates.k8s.io", "certificatesigningrequests"),
            ("certificates.k8s.io", "clustertrustbundles"),
            ("certificates.k8s.io", "podcertificaterequests"),
        ] {
            assert_eq!(reject(group, resource, true, "foo=bar"), "field label not supported: foo", "{resource}");
        }
    }
    #[test]
    fn some_kinds_reject_metadata_namespace() {
        // Verified against kube-apiserver v1.37.2, PodCertificateRequest (namespaced) included.
        let msg = "field label not supported: metadata.namespace";
        assert_eq!(reject("", "nodes", false, "metadata.namespace=x"), msg);
        assert_eq!(reject("", "namespaces", false, "metadata.namespace="), msg);
        assert_eq!(reject("certificates.k8s.io", "podcertificaterequests", true, "metadata.namespace=x"), msg);
        assert_eq!(reject("certificates.k8s.io", "certificatesigningrequests", false, "metadata.namespace=x"), msg);
        assert_eq!(
            reject("resource.k8s.io", "resourceslices", false, "metadata.namespace="),
            "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: metadata.namespace"
        );
    }
    #[test]
    fn default_conversion_quotes_the_field_as_go_does() {
        // Messages verified against kube-apiserver v1.37.2 (configmaps).
        let m = |s| reject("", "configmaps", true, s);
        assert_eq!(m("foo=bar"), r#""foo" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        assert_eq!(m("=x"), r#""" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        assert_eq!(m("a b=c"), r#""a b" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        assert_eq!(m("a\"b=c"), r#""a\"b" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        assert_eq!(m(r"a\b=c"), r#""a\\b" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        assert_eq!(m("é=1"), r#""é" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        assert_eq!(m("a\tb=1"), r#""a\tb" is not a known field selector: only "metadata.name", "metadata.namespace""#);
        // apps/v1 ReplicaSet: status.replicas is in its field set but not selectable.
        assert_eq!(
            reject("apps", "replicasets", true, "status.replicas=1"),
            r#""status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        // Resources the table does not know are treated the same way.
        assert!(reject("example.com", "things", true, "x=1").starts_with(r#""x" is not a known"#));
    }
    #[test]
    fn jobs_and_resource_slices_have_their_own_wording() {
        // Verified against kube-apiserver v1.37.2.
        assert_eq!(reject("batch", "jobs", true, "foo=bar"), r#"field label "foo" not supported for Job"#);
        assert_eq!(reject("batch", "jobs", true, "a\"b=1"), r#"field label "a\"b" not supported for Job"#);
        assert_eq!(
            reject("resource.k8s.io", "resourceslices", false, "foo=bar"),
            "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: foo"
        );
    }
    #[test]
    fn the_first_rejected_field_in_sorted_order_is_named() {
        // kube-apiserver v1.37.2 names "aaa" for both orders.
        assert_eq!(reject("", "pods", true, "zzz=1,aaa=2"), "field label not supported: aaa");
        assert_eq!(reject("", "pods", true, "aaa=1,zzz=2"), "field label not supported: aaa");
        assert_eq!(reject("", "pods", true, "spec.nodeName=n,zzz=1,b.c!=2"), "field label not supported: b.c");
    }
    #[test]
    fn events_k8s_io_accepts_only_its_own_names() {
        assert!(accepts("events.k8s.io", "events", true, "regarding.kind=Pod,reportingController=x,reason=r"));
        for field in ["source", "reportingComponent", "involvedObject.kind", "note", "deprecatedSource.component"] {
            assert_eq!(
                reject("events.k8s.io", "events", true, &format!("{field}=x")),
                format!("field label not supported: {field}")
            );
        }
    }
    #[test]
    fn custom_resources_accept_name_their_selectable_fields_and_namespace_when_namespaced() {
        let selectable = vec!["spec.color".to_owned(), "spec.size".to_owned()];
        let v = |namespaced, s| validate("example.com", "widgets", namespaced, Some(&selectable), &sel(s));
        assert_eq!(v(true, "spec.color=red,spec.size!=3,metadata.name=a,metadata.namespace=b"), Ok(()));
        // Messages verified against kube-apiserver v1.37.2 with a CRD selecting .spec.color & co.
        assert_eq!(v(true, "spec.nested=x"), Err("field label not supported: spec.nested".to_owned()));
        assert_eq!(v(true, ".spec.color=red"), Err("field label not supported: .spec.color".to_owned()));
        assert_eq!(v(true, "zz=1,spec.nope=2"), Err("field label not supported: spec.nope".to_owned()));
        assert_eq!(v(false, "metadata.namespace="), Err("field label not supported: metadata.namespace".to_owned()));
        assert_eq!(
            validate("example.com", "widgets", true, Some(&[]), &sel("spec.color=x")),
            Err("field label not supported: spec.color".to_owned())
        );
        // A jsonPath passed with its leading dot still counts.
        let dotted = vec![".spec.color".to_owned()];
        assert_eq!(validate("example.com", "widgets", true, Some(&dotted), &sel("spec.color=x")), Ok(()));
    }
}
