//! `printNode`: a Node's status (its last Ready condition, and whether it
//! is cordoned), roles from its labels, kubelet version, and the wide cells.

use serde_json::Value;

use super::fields::Path;

use super::fields::{age_of, name, str_at};
use super::reads::Reads;
use super::{Cell, Printed};
use crate::encode::minor;

/// What `printNode` reads of a node (not its images, volumes or daemon endpoints).
pub(super) const READS: Reads = Reads::Fields(&[
    ("metadata", Reads::Fields(&[("name", Reads::All), ("creationTimestamp", Reads::All), ("labels", Reads::All)])),
    ("spec", Reads::Fields(&[("unschedulable", Reads::All)])),
    ("status", Reads::Fields(&[("conditions", Reads::All), ("addresses", Reads::All), ("nodeInfo", Reads::All)])),
]);

/// `findNodeRoles`: `node-role.kubernetes.io/<role>` keys and a non-empty
/// `kubernetes.io/role` value, sorted and unique, comma-joined; `<none>`.
fn roles(node: &Value) -> String {
    let mut roles: Vec<&str> = node.at("/metadata/labels").and_then(Value::as_object).map_or(Vec::new(), |labels| {
        labels
            .iter()
            .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role),
                Some(_) => None,
                None if k == "kubernetes.io/role" => v.as_str().filter(|v| !v.is_empty()),
                None => None,
            })
            .collect()
    });
    roles.sort_unstable();
    roles.dedup();
    if roles.is_empty() { "<none>".to_owned() } else { roles.join(",") }
}

/// The first address of a type, or `<none>`.
fn address(node: &Value, kind: &str) -> String {
    node.at("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|a| str_at(a, "/type") == kind))
        .map_or_else(|| "<none>".to_owned(), |a| str_at(a, "/address").to_owned())
}

pub(super) fn node(v: &Value, now: i128) -> Printed {
    // The condition map keeps the last Ready condition.
    let ready = v
        .at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().rev().find(|c| str_at(c, "/type") == "Ready"));
    let mut status = vec![match ready {
        Some(c) if str_at(c, "/status") == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if v.at("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let or_unknown = |s: &str| if s.is_empty() { "<unknown>".to_owned() } else { s.to_owned() };
    let mut kernel = or_unknown(str_at(v, "/status/nodeInfo/kernelVersion"));
    let arch = str_at(v, "/status/nodeInfo/architecture");
    // `printNode` appends the architecture since 1.36.
    if !arch.is_empty() && minor::served() >= 36 {
        kernel = format!("{kernel} ({arch})");
    }
    vec![
        name(v),
        Cell::Str(status.join(",")),
        Cell::Str(roles(v)),
        age_of(v, now),
        Cell::Str(str_at(v, "/status/nodeInfo/kubeletVersion").to_owned()),
        Cell::Str(address(v, "InternalIP")),
        Cell::Str(address(v, "ExternalIP")),
        Cell::Str(or_unknown(str_at(v, "/status/nodeInfo/osImage"))),
        Cell::Str(kernel),
        Cell::Str(or_unknown(str_at(v, "/status/nodeInfo/containerRuntimeVersion"))),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn node_rows_follow_print_node() {
        let n = json!({"metadata": {"name": "n", "labels": {"node-role.kubernetes.io/worker": "",
            "node-role.kubernetes.io/": "x", "kubernetes.io/role": "infra", "node-role.kubernetes.io/infra": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Ready", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "InternalIP", "address": "10.0.0.2"}],
                "nodeInfo": {"kubeletVersion": "v1.37.2", "architecture": "arm64"}}});
        let cells = node(&n, 0).cells;
        let text: Vec<String> = cells.into_iter().map(Cell::into_text).collect();
        assert_eq!(text[1..3], ["NotReady,SchedulingDisabled", "infra,worker"]);
        assert_eq!(text[4..], ["v1.37.2", "10.0.0.1", "<none>", "<unknown>", "<unknown> (arm64)", "<unknown>"]);
    }
}
