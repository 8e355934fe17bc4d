//! `printJob` and `printService`: a Job's status, completions and duration,
//! a Service's addresses and ports.

use serde_json::Value;

use super::fields::Path;

use super::apps::{containers, format_label_selector, format_labels};
use super::fields::{age_of, int_at, name, str_at, time_at};
use super::{Cell, Printed, human_duration};

/// `hasJobCondition`: the first condition of the type decides.
fn has_condition(job: &Value, kind: &str) -> bool {
    job.at("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| str_at(c, "/type") == kind))
        .is_some_and(|c| str_at(c, "/status") == "True")
}

pub(super) fn job(v: &Value, now: i128) -> Printed {
    let succeeded = int_at(v, "/status/succeeded");
    let completions = match v.at("/spec/completions").and_then(Value::as_i64) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match int_at(v, "/spec/parallelism") {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let duration = match (time_at(v, "/status/startTime"), time_at(v, "/status/completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration(now - start),
        (Some(start), Some(end)) => human_duration(end - start),
    };
    let deleting = v.at("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
    let status = if has_condition(v, "Complete") {
        "Complete"
    } else if has_condition(v, "Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if has_condition(v, "Suspended") {
        "Suspended"
    } else if has_condition(v, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(v, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let [names, images] = containers(v);
    vec![
        name(v),
        Cell::Str(status.to_owned()),
        Cell::Str(completions),
        Cell::Str(duration),
        age_of(v, now),
        names,
        images,
        Cell::Str(format_label_selector(v.at("/spec/selector"))),
    ]
    .into()
}

fn strings(v: &Value, path: &str) -> Vec<String> {
    v.at(path)
        .and_then(Value::as_array)
        .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
}

/// `getServiceExternalIP`, wide (the API server's tables always are).
fn external_ip(svc: &Value) -> String {
    let external = strings(svc, "/spec/externalIPs");
    match str_at(svc, "/spec/type") {
        "ClusterIP" | "NodePort" if !external.is_empty() => external.join(","),
        "ClusterIP" | "NodePort" => "<none>".to_owned(),
        "LoadBalancer" => {
            // `loadBalancerStatusStringer`: each ingress's IP, else its hostname, sorted, unique.
            let mut ingress: Vec<&str> =
                svc.at("/status/loadBalancer/ingress").and_then(Value::as_array).map_or(Vec::new(), |a| {
                    a.iter()
                        .filter_map(|i| match (str_at(i, "/ip"), str_at(i, "/hostname")) {
                            ("", "") => None,
                            ("", host) => Some(host),
                            (ip, _) => Some(ip),
                        })
                        .collect()
                });
            ingress.sort_unstable();
            ingress.dedup();
            let mut all: Vec<String> = ingress.into_iter().map(str::to_owned).collect();
            all.extend(external);
            if all.is_empty() { "<pending>".to_owned() } else { all.join(",") }
        }
        "ExternalName" => str_at(svc, "/spec/externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    }
}

/// `makePortString`: `port[:nodePort]/protocol`, comma-joined.
fn ports(svc: &Value) -> String {
    let ports = svc.at("/spec/ports").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    ports
        .iter()
        .map(|p| {
            let (port, node_port, protocol) = (int_at(p, "/port"), int_at(p, "/nodePort"), str_at(p, "/protocol"));
            if node_port > 0 { format!("{port}:{node_port}/{protocol}") } else { format!("{port}/{protocol}") }
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn service(v: &Value, now: i128) -> Printed {
    let cluster_ip = strings(v, "/spec/clusterIPs").into_iter().next().unwrap_or_else(|| "<none>".to_owned());
    let ports = match ports(v) {
        p if p.is_empty() => "<none>".to_owned(),
        p => p,
    };
    vec![
        name(v),
        Cell::Str(str_at(v, "/spec/type").to_owned()),
        Cell::Str(cluster_ip),
        Cell::Str(external_ip(v)),
        Cell::Str(ports),
        age_of(v, now),
        Cell::Str(format_labels(v.at("/spec/selector"))),
    ]
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_status_completions_and_duration_follow_print_job() {
        let j = json!({"metadata": {"name": "j"}, "spec": {"parallelism": 3, "selector": {"matchLabels": {"a": "b"}}},
            "status": {"succeeded": 1, "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:02:05Z",
                "conditions": [{"type": "Suspended", "status": "True"}, {"type": "Complete", "status": "False"}]}});
        let cells = job(&j, 0).cells;
        assert_eq!(
            cells[1..4],
            [Cell::Str("Suspended".into()), Cell::Str("1/1 of 3".into()), Cell::Str("2m5s".into())]
        );
        assert_eq!(cells[7], Cell::Str("a=b".into()));
    }

    #[test]
    fn service_addresses_and_ports_follow_print_service() {
        let svc = json!({"metadata": {"name": "s"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.0.0.9"],
            "externalIPs": ["1.1.1.1"], "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "b.example"}, {"ip": "2.2.2.2"}, {"ip": "2.2.2.2"}]}}});
        let cells = service(&svc, 0).cells;
        assert_eq!(
            cells[2..5],
            [
                Cell::Str("10.0.0.9".into()),
                Cell::Str("2.2.2.2,b.example,1.1.1.1".into()),
                Cell::Str("80:30080/TCP,53/UDP".into())
            ]
        );
        assert_eq!(cells[6], Cell::Str("<none>".into()));
    }
}
