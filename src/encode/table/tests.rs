use super::printers::printer;
use super::*;

const SECOND: i128 = 1_000_000_000;

/// The row `kind`'s printer makes of `obj`, read only as far as the printer
/// reads (as the cache prints): the same as from the whole object.
fn print(group: &str, kind: &str, obj: &serde_json::Value, now: i128) -> Printed {
    let printer = printer(group, kind).unwrap();
    let pruned = printer.print_json(&serde_json::to_vec(obj).unwrap(), now);
    assert_eq!(pruned, (printer.print)(obj, now), "{kind}: {obj}");
    pruned
}

#[test]
fn ages_read_as_apimachinery_human_duration_writes_them() {
    // Expected values from duration.HumanDuration's own table (apimachinery duration_test.go).
    let cases: &[(i128, &str)] = &[
        (-2 * SECOND, "<invalid>"),
        (-SECOND, "0s"),
        (0, "0s"),
        (SECOND - 1, "0s"),
        (119 * SECOND, "119s"),
        (120 * SECOND, "2m"),
        (121 * SECOND, "2m1s"),
        (599 * SECOND, "9m59s"),
        (600 * SECOND, "10m"),
        (179 * 60 * SECOND, "179m"),
        (3 * 3600 * SECOND, "3h"),
        ((3 * 3600 + 60) * SECOND, "3h1m"),
        (8 * 3600 * SECOND, "8h"),
        (47 * 3600 * SECOND, "47h"),
        (48 * 3600 * SECOND, "2d"),
        ((48 + 1) * 3600 * SECOND, "2d1h"),
        (8 * 24 * 3600 * SECOND, "8d"),
        (2 * 365 * 24 * 3600 * SECOND, "2y"),
        ((2 * 365 + 1) * 24 * 3600 * SECOND, "2y1d"),
        (8 * 365 * 24 * 3600 * SECOND, "8y"),
    ];
    for (nanos, want) in cases {
        assert_eq!(human_duration(*nanos), *want, "{nanos}ns");
    }
}

#[test]
fn generated_columns_are_there_for_the_printed_kinds_and_only_built_in_kinds() {
    for kind in ["ConfigMap", "Secret", "Namespace", "ServiceAccount", "Pod"] {
        let columns: serde_json::Value = serde_json::from_str(columns("", kind).unwrap()).unwrap();
        assert_eq!(columns[0]["name"], "Name", "{kind}");
        assert_eq!(columns[0]["format"], "name", "{kind}");
        assert!(printer("", kind).is_none() || columns.as_array().unwrap().len() == cells_of(kind).len(), "{kind}");
    }
    assert!(columns("apps", "Deployment").is_some());
    assert!(columns("example.com", "Widget").is_none());
}

fn cells_of(kind: &str) -> Vec<Cell> {
    let obj = serde_json::json!({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}});
    print("", kind, &obj, 0).cells
}

#[test]
fn config_map_and_secret_rows_count_their_data_as_the_printers_do() {
    let created = 1_767_225_600i128; // 2026-01-01T00:00:00Z
    let now = (created + 90) * SECOND + 5;
    let cm = serde_json::json!({"metadata": {"name": "cm", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    assert_eq!(print("", "ConfigMap", &cm, now).cells, [Cell::Str("cm".into()), Cell::Int(3), Cell::Str("90s".into())]);
    let secret = serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "dg=="}});
    assert_eq!(
        print("", "Secret", &secret, now).cells,
        [Cell::Str("s".into()), Cell::Str("Opaque".into()), Cell::Int(1), Cell::Str("<unknown>".into())]
    );
}

#[test]
fn a_table_body_splices_columns_and_objects_and_writes_cells_as_go() {
    let meta = ListMeta { rv: 7, continue_token: Some("tok".into()), remaining: Some(2) };
    let rows = vec![
        Row {
            printed: vec![Cell::Str("a<b".into()), Cell::Int(3)].into(),
            object: Some(Bytes::from_static(b"{\"o\":1}")),
        },
        Row { printed: Printed { cells: vec![Cell::Str("c".into())], conditions: Some("[{}]") }, object: None },
    ];
    let body: Vec<u8> = table_body(TableVersion::V1, "[{\"name\":\"Name\"}]", &meta, rows).concat();
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "{\"kind\":\"Table\",\"apiVersion\":\"meta.k8s.io/v1\",\"metadata\":{\"resourceVersion\":\"7\",\
         \"continue\":\"tok\",\"remainingItemCount\":2},\"columnDefinitions\":[{\"name\":\"Name\"}],\"rows\":[\
         {\"cells\":[\"a\\u003cb\",3],\"object\":{\"o\":1}},{\"cells\":[\"c\"],\"conditions\":[{}],\"object\":null}]}\n"
    );
    let empty: Vec<u8> =
        table_body(TableVersion::V1, "[]", &ListMeta { rv: 1, continue_token: None, remaining: None }, vec![]).concat();
    assert!(String::from_utf8(empty).unwrap().ends_with("\"rows\":[]}\n"));
}

#[test]
fn include_object_reads_as_the_api_server_reads_it() {
    assert_eq!(IncludeObject::parse(""), Some(IncludeObject::Metadata));
    assert_eq!(IncludeObject::parse("Metadata"), Some(IncludeObject::Metadata));
    assert_eq!(IncludeObject::parse("None"), Some(IncludeObject::None));
    assert_eq!(IncludeObject::parse("Object"), Some(IncludeObject::Object));
    assert_eq!(IncludeObject::parse("object"), None);
}

fn pod_cells(pod: serde_json::Value, now: i128) -> (Vec<String>, Option<&'static str>) {
    let printed = print("", "Pod", &pod, now);
    let cells = printed.cells.into_iter().map(Cell::into_text).collect();
    (cells, printed.conditions)
}

#[test]
fn pod_rows_follow_print_pod() {
    let created = 1_767_225_600i128; // 2026-01-01T00:00:00Z
    let now = (created + 3600) * SECOND;
    let meta = serde_json::json!({"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"});
    // Running, one of two ready, restarts with the latest termination's age.
    let running = serde_json::json!({"metadata": meta, "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}], "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:58:30Z"}}},
            {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:30:00Z"}}}]}});
    let (cells, conditions) = pod_cells(running, now);
    assert_eq!(cells, ["p", "1/2", "CrashLoopBackOff", "3 (90s ago)", "60m", "10.0.0.1", "n1", "<none>", "<none>"]);
    assert_eq!(conditions, None);
    // An init container still waiting: Init:i/n, restarts of init containers only.
    let init = serde_json::json!({"metadata": meta, "spec": {"containers": [{"name": "a"}],
        "initContainers": [{"name": "i0"}, {"name": "i1"}], "readinessGates": [{"conditionType": "x"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "x", "status": "True"}], "initContainerStatuses": [
            {"name": "i0", "state": {"terminated": {"exitCode": 0}}},
            {"name": "i1", "restartCount": 4, "state": {"running": {}}}]}});
    let (cells, _) = pod_cells(init, now);
    assert_eq!(cells[1..4], ["0/1", "Init:1/2", "4"]);
    assert_eq!(cells[8], "1/1");
    // Succeeded: the Completed row condition; deleting a running pod: Terminating.
    let done = serde_json::json!({"metadata": meta, "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
    let (cells, conditions) = pod_cells(done, now);
    assert_eq!(cells[2], "Completed");
    assert!(conditions.unwrap().contains("The pod has completed successfully."));
    let deleting = serde_json::json!({"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:01Z"},
        "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Running"}});
    let (cells, _) = pod_cells(deleting, now);
    assert_eq!(cells[2..5], ["Terminating", "0", "<unknown>"]);
}

/// Objects of every printed kind with every field a printer reads, and some it does not.
fn templates() -> Vec<(&'static str, &'static str, serde_json::Value)> {
    use serde_json::json;
    let meta = json!({"name": "x", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
        "deletionTimestamp": "2026-01-01T01:00:00Z", "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "infra", "app": "a"},
        "annotations": {"a": "b"}, "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]});
    let terminated = json!({"exitCode": 1, "signal": 9, "reason": "Error", "finishedAt": "2026-01-01T00:30:00Z"});
    let status = json!({"name": "c", "ready": true, "started": true, "restartCount": 2, "image": "i",
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}, "waiting": {"reason": "CrashLoopBackOff"}, "terminated": terminated},
        "lastState": {"terminated": terminated, "waiting": {"reason": "w"}}});
    let selector =
        json!({"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]});
    let template = json!({"metadata": {"labels": {"a": "b"}}, "spec": {"nodeSelector": {"n": "1"},
        "containers": [{"name": "c", "image": "i", "env": [{"name": "E", "value": "v"}]}]}});
    let workload_status = json!({"replicas": 3, "readyReplicas": 2, "updatedReplicas": 1, "availableReplicas": 1,
        "desiredNumberScheduled": 4, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 1, "numberAvailable": 1});
    vec![
        (
            "",
            "Pod",
            json!({"metadata": meta, "spec": {"nodeName": "n1", "volumes": [{"name": "v"}],
            "containers": [{"name": "c", "image": "i"}, {"name": "d"}],
            "initContainers": [{"name": "c", "restartPolicy": "Always"}, {"name": "i", "restartPolicy": "Never"}],
            "readinessGates": [{"conditionType": "Ready"}, {"conditionType": "x"}]},
            "status": {"phase": "Running", "reason": "NodeLost", "nominatedNodeName": "n2", "hostIP": "10.0.0.9",
                "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"},
                    {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}, {"type": "x", "status": "True"}],
                "initContainerStatuses": [status, status], "containerStatuses": [status, status]}}),
        ),
        (
            "",
            "Node",
            json!({"metadata": meta, "spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "ExternalIP", "address": "1.2.3.4"}],
                "nodeInfo": {"kubeletVersion": "v1.37.2", "architecture": "arm64", "kernelVersion": "6", "osImage": "o",
                    "containerRuntimeVersion": "r"}, "images": [{"names": ["i"], "sizeBytes": 1}]}}),
        ),
        (
            "",
            "ConfigMap",
            json!({"metadata": meta, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}, "immutable": true}),
        ),
        ("", "Secret", json!({"metadata": meta, "type": "Opaque", "data": {"k": "dg=="}, "stringData": {"s": "t"}})),
        (
            "",
            "Namespace",
            json!({"metadata": meta, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}),
        ),
        (
            "",
            "ServiceAccount",
            json!({"metadata": meta, "secrets": [{"name": "s"}], "automountServiceAccountToken": true}),
        ),
        (
            "",
            "Service",
            json!({"metadata": meta, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.0.0.9"],
            "externalIPs": ["1.1.1.1"], "externalName": "e", "selector": {"a": "b"},
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "2.2.2.2"}, {"hostname": "h"}]}}}),
        ),
        (
            "apps",
            "Deployment",
            json!({"metadata": meta, "spec": {"replicas": 3, "selector": selector, "template": template},
            "status": workload_status}),
        ),
        (
            "apps",
            "ReplicaSet",
            json!({"metadata": meta, "spec": {"replicas": 3, "selector": selector, "template": template},
            "status": workload_status}),
        ),
        (
            "apps",
            "StatefulSet",
            json!({"metadata": meta, "spec": {"replicas": 3, "selector": selector, "template": template},
            "status": workload_status}),
        ),
        (
            "apps",
            "DaemonSet",
            json!({"metadata": meta, "spec": {"selector": selector, "template": template},
            "status": workload_status}),
        ),
        (
            "batch",
            "Job",
            json!({"metadata": meta, "spec": {"completions": 3, "parallelism": 2, "selector": selector,
            "template": template}, "status": {"succeeded": 1, "active": 1, "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:10:00Z",
            "conditions": [{"type": "Complete", "status": "True"}, {"type": "Failed", "status": "False"}]}}),
        ),
    ]
}

/// A value some printer compares a field with, or of another type.
fn leaf(pick: u8) -> serde_json::Value {
    use serde_json::json;
    let leaves = [
        json!(null),
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(-1),
        json!(2.5),
        json!(""),
        json!("True"),
        json!("Always"),
        json!("Ready"),
        json!("Running"),
        json!("Completed"),
        json!("Succeeded"),
        json!("Failed"),
        json!("NodeLost"),
        json!("SchedulingGated"),
        json!("Initialized"),
        json!("PodInitializing"),
        json!("LoadBalancer"),
        json!("ExternalName"),
        json!("NodePort"),
        json!("InternalIP"),
        json!("2026-01-01T00:00:00Z"),
        json!("1970-01-01T00:00:00Z"),
        json!({}),
        json!([]),
        json!([{}]),
        json!({"a": "b"}),
        json!(1e300),
        json!(u64::MAX),
    ];
    leaves[usize::from(pick) % leaves.len()].clone()
}

/// `v` changed as the decisions say: members removed, replaced by leaves,
/// objects and arrays kept and changed inside; `None` removes `v`.
fn mutate(v: &serde_json::Value, decisions: &mut std::slice::Iter<'_, u8>) -> Option<serde_json::Value> {
    use serde_json::Value;
    let Some(&d) = decisions.next() else { return Some(v.clone()) };
    match d % 16 {
        0 => return None,
        1 => return Some(leaf((d / 16).wrapping_add(decisions.next().copied().unwrap_or(0)))),
        _ => {}
    }
    Some(match v {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> =
                map.iter().filter_map(|(k, v)| Some((k.clone(), mutate(v, decisions)?))).collect();
            if d % 16 == 2 {
                out.insert("extra".to_owned(), leaf(d / 16));
            }
            Value::Object(out)
        }
        Value::Array(items) => {
            let mut out: Vec<Value> = items.iter().filter_map(|v| mutate(v, decisions)).collect();
            if d % 16 == 3 {
                out.extend(items.first().cloned());
            }
            Value::Array(out)
        }
        other => other.clone(),
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, ..Default::default() })]
    /// Every built-in printer prints the same row from what it reads as from
    /// the whole object, whatever the object holds.
    #[test]
    fn printers_print_the_same_from_what_they_read(
        decisions in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160),
        now_offset in 0i128..(400 * 24 * 3600),
    ) {
        let now = (1_767_225_600 + now_offset) * SECOND;
        for (group, kind, template) in templates() {
            let obj = mutate(&template, &mut decisions.iter()).unwrap_or_default();
            print(group, kind, &obj, now);
        }
    }
}

#[test]
fn cells_are_written_as_go_writes_them() {
    let written = |cell: Cell| {
        let mut out = String::new();
        cell.write_json(&mut out);
        out
    };
    assert_eq!(written(Cell::Str("<none>".into())), r#""\u003cnone\u003e""#);
    assert_eq!(written(Cell::Int(-42)), "-42");
    assert_eq!(written(Cell::Raw("null".into())), "null");
}
