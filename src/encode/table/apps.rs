//! The apps/v1 printers (`printDeployment`, `printReplicaSet`,
//! `printStatefulSet`, `printDaemonSet`), with the label selector and label
//! set formatting they use (apimachinery `labels`, `metav1.FormatLabelSelector`).

use serde_json::Value;

use super::fields::Path;

use super::fields::{age_of, int_at, name};
use super::{Cell, Printed};

/// `layoutContainerCells`: the pod template's container names and images, comma-joined.
pub(super) fn containers(v: &Value) -> [Cell; 2] {
    let containers = v.at("/spec/template/spec/containers").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    let field = |key: &str| {
        containers.iter().map(|c| c.get(key).and_then(Value::as_str).unwrap_or_default()).collect::<Vec<_>>().join(",")
    };
    [Cell::Str(field("name")), Cell::Str(field("image"))]
}

/// `labels.Set.String`: `key=value` pairs sorted as strings, comma-joined.
fn label_set(map: Option<&Value>) -> String {
    let mut pairs: Vec<String> = map
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect())
        .unwrap_or_default();
    pairs.sort();
    pairs.join(",")
}

/// `labels.FormatLabels`: the set, or `<none>`.
pub(super) fn format_labels(map: Option<&Value>) -> String {
    let set = label_set(map);
    if set.is_empty() { "<none>".to_owned() } else { set }
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: each requirement as
/// `labels.Requirement.String` writes it, sorted by key (match labels before
/// expressions of the same key, as Go's insertion sort leaves them); `Err`
/// for an operator it refuses. A missing selector selects nothing and an empty
/// one everything: both print as "".
fn selector_string(selector: Option<&Value>) -> Result<String, ()> {
    let Some(selector) = selector.filter(|s| !s.is_null()) else { return Ok(String::new()) };
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        let mut labels: Vec<_> = labels.iter().collect();
        labels.sort_by(|a, b| a.0.cmp(b.0));
        for (k, v) in labels {
            requirements.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for expr in selector.get("matchExpressions").and_then(Value::as_array).map_or(&[][..], Vec::as_slice) {
        let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
        let mut values: Vec<&str> = expr
            .get("values")
            .and_then(Value::as_array)
            .map_or(Vec::new(), |v| v.iter().filter_map(Value::as_str).collect());
        values.sort_unstable();
        let text = match expr.get("operator").and_then(Value::as_str).unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return Err(()),
        };
        requirements.push((key.to_owned(), text));
    }
    // Stable, as Go's insertion sort is for the few requirements a selector has.
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(requirements.into_iter().map(|(_, text)| text).collect::<Vec<_>>().join(","))
}

/// `metav1.FormatLabelSelector`: the selector, `<none>` when empty, `<error>` when refused.
pub(super) fn format_label_selector(selector: Option<&Value>) -> String {
    match selector_string(selector) {
        Ok(s) if s.is_empty() => "<none>".to_owned(),
        Ok(s) => s,
        Err(()) => "<error>".to_owned(),
    }
}

pub(super) fn deployment(v: &Value, now: i128) -> Printed {
    let ready = format!("{}/{}", int_at(v, "/status/readyReplicas"), int_at(v, "/spec/replicas"));
    let selector = selector_string(v.at("/spec/selector")).unwrap_or_else(|()| "<invalid>".to_owned());
    let [names, images] = containers(v);
    vec![
        name(v),
        Cell::Str(ready),
        Cell::Int(int_at(v, "/status/updatedReplicas")),
        Cell::Int(int_at(v, "/status/availableReplicas")),
        age_of(v, now),
        names,
        images,
        Cell::Str(selector),
    ]
    .into()
}

pub(super) fn replica_set(v: &Value, now: i128) -> Printed {
    let [names, images] = containers(v);
    vec![
        name(v),
        Cell::Int(int_at(v, "/spec/replicas")),
        Cell::Int(int_at(v, "/status/replicas")),
        Cell::Int(int_at(v, "/status/readyReplicas")),
        age_of(v, now),
        names,
        images,
        Cell::Str(format_label_selector(v.at("/spec/selector"))),
    ]
    .into()
}

pub(super) fn stateful_set(v: &Value, now: i128) -> Printed {
    let ready = format!("{}/{}", int_at(v, "/status/readyReplicas"), int_at(v, "/spec/replicas"));
    let [names, images] = containers(v);
    vec![name(v), Cell::Str(ready), age_of(v, now), names, images].into()
}

pub(super) fn daemon_set(v: &Value, now: i128) -> Printed {
    let [names, images] = containers(v);
    vec![
        name(v),
        Cell::Int(int_at(v, "/status/desiredNumberScheduled")),
        Cell::Int(int_at(v, "/status/currentNumberScheduled")),
        Cell::Int(int_at(v, "/status/numberReady")),
        Cell::Int(int_at(v, "/status/updatedNumberScheduled")),
        Cell::Int(int_at(v, "/status/numberAvailable")),
        Cell::Str(format_labels(v.at("/spec/template/spec/nodeSelector"))),
        age_of(v, now),
        names,
        images,
        Cell::Str(format_label_selector(v.at("/spec/selector"))),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_print_as_labels_requirement_strings_sorted_by_key() {
        let sel = json!({"matchLabels": {"b": "2", "a-b": "1"}, "matchExpressions": [
            {"key": "a", "operator": "In", "values": ["y", "x"]},
            {"key": "b", "operator": "Exists"},
            {"key": "c", "operator": "DoesNotExist"},
            {"key": "a-b", "operator": "NotIn", "values": ["z"]}]});
        assert_eq!(selector_string(Some(&sel)).unwrap(), "a in (x,y),a-b=1,a-b notin (z),b=2,b,!c");
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(
            format_label_selector(Some(&json!({"matchExpressions": [{"key": "k", "operator": "Near"}]}))),
            "<error>"
        );
    }

    #[test]
    fn label_sets_sort_as_strings_not_by_key() {
        // "a-b=1" < "a=1": '-' sorts before '='.
        assert_eq!(format_labels(Some(&json!({"a": "1", "a-b": "1"}))), "a-b=1,a=1");
        assert_eq!(format_labels(None), "<none>");
    }
}
