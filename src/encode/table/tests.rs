use super::printers::printer;
use super::*;

const SECOND: i128 = 1_000_000_000;

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
    printer("", kind).unwrap()(&obj, 0).cells
}

#[test]
fn config_map_and_secret_rows_count_their_data_as_the_printers_do() {
    let created = 1_767_225_600i128; // 2026-01-01T00:00:00Z
    let now = (created + 90) * SECOND + 5;
    let cm = serde_json::json!({"metadata": {"name": "cm", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
    assert_eq!(
        printer("", "ConfigMap").unwrap()(&cm, now).cells,
        [Cell::Str("cm".into()), Cell::Int(3), Cell::Str("90s".into())]
    );
    let secret = serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "dg=="}});
    assert_eq!(
        printer("", "Secret").unwrap()(&secret, now).cells,
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
    let printed = printer("", "Pod").unwrap()(&pod, now);
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
