//! `printPod` (k8s.io/kubernetes `pkg/printers/internalversion/printers.go`):
//! the Pod row kubectl shows, replayed step by step on the stored JSON. Its
//! status cell walks init containers, then containers in reverse, and its
//! restarts cell says when the last one restarted.

use serde_json::Value;

use super::fields::Path;

use super::fields::{age_of, array, int_at, str_at, time_at};
use super::reads::{METADATA, Reads};
use super::{Cell, Printed, human_duration};
use crate::encode::minor;

/// `podSuccessConditions` and `podFailedConditions`, as encoding/json writes them.
const SUCCEEDED: &str =
    r#"[{"type":"Completed","status":"True","reason":"Succeeded","message":"The pod has completed successfully."}]"#;
const FAILED: &str = r#"[{"type":"Completed","status":"True","reason":"Failed","message":"The pod failed."}]"#;

/// What `printPod` reads of a pod.
pub(super) const READS: Reads = Reads::Fields(&[
    ("metadata", METADATA),
    (
        "spec",
        Reads::Fields(&[
            // Counted only.
            ("containers", Reads::Each(&Reads::Fields(&[]))),
            ("initContainers", Reads::Each(&Reads::Fields(&[("name", Reads::All), ("restartPolicy", Reads::All)]))),
            ("nodeName", Reads::All),
            ("readinessGates", Reads::Each(&Reads::Fields(&[("conditionType", Reads::All)]))),
        ]),
    ),
    (
        "status",
        Reads::Fields(&[
            ("phase", Reads::All),
            ("reason", Reads::All),
            ("nominatedNodeName", Reads::All),
            (
                "conditions",
                Reads::Each(&Reads::Fields(&[("type", Reads::All), ("status", Reads::All), ("reason", Reads::All)])),
            ),
            ("initContainerStatuses", Reads::Each(&CONTAINER_STATUS)),
            ("containerStatuses", Reads::Each(&CONTAINER_STATUS)),
            ("podIPs", Reads::Each(&Reads::Fields(&[("ip", Reads::All)]))),
        ]),
    ),
]);

const CONTAINER_STATUS: Reads = Reads::Fields(&[
    ("name", Reads::All),
    ("restartCount", Reads::All),
    ("started", Reads::All),
    ("ready", Reads::All),
    ("state", Reads::All),
    ("lastState", Reads::Fields(&[("terminated", Reads::All)])),
]);

/// `IsRestartableInitContainer`: `restartPolicy: Always`.
fn is_restartable(container: Option<&Value>) -> bool {
    container.is_some_and(|c| str_at(c, "/restartPolicy") == "Always")
}

/// The finish time of a status's last termination, if later than `latest`.
fn later_termination(status: &Value, latest: &mut Option<i128>) {
    if status.at("/lastState/terminated").is_some_and(|t| !t.is_null()) {
        // A termination without finishedAt is Go's zero time, before any other.
        let finished = time_at(status, "/lastState/terminated/finishedAt");
        if finished > *latest {
            *latest = finished;
        }
    }
}

/// A terminated state's reason, else its signal or exit code, as `printPod` words them.
fn termination_reason(terminated: &Value, prefix: &str) -> String {
    let reason = str_at(terminated, "/reason");
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = int_at(terminated, "/signal");
    if signal != 0 {
        format!("{prefix}Signal:{signal}")
    } else {
        format!("{prefix}ExitCode:{}", int_at(terminated, "/exitCode"))
    }
}

fn state<'a>(status: &'a Value, which: &str) -> Option<&'a Value> {
    status.get("state")?.get(which).filter(|v| !v.is_null())
}

fn condition_is(pod: &Value, kind: &str) -> Option<bool> {
    array(pod, "/status/conditions").iter().find(|c| str_at(c, "/type") == kind).map(|c| str_at(c, "/status") == "True")
}

pub(super) fn pod(pod: &Value, now: i128) -> Printed {
    let spec_containers = array(pod, "/spec/containers");
    let init_specs = array(pod, "/spec/initContainers");
    let init_spec = |name: &str| init_specs.iter().find(|c| str_at(c, "/name") == name);
    let total = spec_containers.len() + init_specs.iter().filter(|c| is_restartable(Some(c))).count();
    let mut ready = 0usize;
    let mut restarts = 0i64;
    let mut restartable_init_restarts = 0i64;
    let mut last_restart: Option<i128> = None;
    let mut last_restartable_init_restart: Option<i128> = None;

    let phase = str_at(pod, "/status/phase");
    let mut reason = match str_at(pod, "/status/reason") {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    for condition in array(pod, "/status/conditions") {
        if str_at(condition, "/type") == "PodScheduled" && str_at(condition, "/reason") == "SchedulingGated" {
            reason = "SchedulingGated".to_owned();
        }
    }
    let conditions = match phase {
        "Succeeded" => Some(SUCCEEDED),
        "Failed" => Some(FAILED),
        _ => None,
    };

    let init_statuses = array(pod, "/status/initContainerStatuses");
    let mut initializing = false;
    for (i, status) in init_statuses.iter().enumerate() {
        restarts += int_at(status, "/restartCount");
        later_termination(status, &mut last_restart);
        let restartable = is_restartable(init_spec(str_at(status, "/name")));
        if restartable {
            restartable_init_restarts += int_at(status, "/restartCount");
            later_termination(status, &mut last_restartable_init_restart);
        }
        let terminated = state(status, "terminated");
        let waiting_reason = state(status, "waiting").map(|w| str_at(w, "/reason")).unwrap_or_default();
        if terminated.is_some_and(|t| int_at(t, "/exitCode") == 0) {
            continue;
        } else if restartable && status.get("started").and_then(Value::as_bool) == Some(true) {
            if status.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        } else if let Some(terminated) = terminated {
            reason = termination_reason(terminated, "Init:");
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_is(pod, "Initialized") == Some(true) {
        restarts = restartable_init_restarts;
        last_restart = last_restartable_init_restart;
        let mut has_running = false;
        let mut error_reason = String::new();
        for status in array(pod, "/status/containerStatuses").iter().rev() {
            restarts += int_at(status, "/restartCount");
            later_termination(status, &mut last_restart);
            let waiting_reason = state(status, "waiting").map(|w| str_at(w, "/reason")).unwrap_or_default();
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if let Some(terminated) = state(status, "terminated") {
                reason = termination_reason(terminated, "");
                if int_at(terminated, "/exitCode") != 0 {
                    error_reason.clone_from(&reason);
                }
            } else if status.get("ready").and_then(Value::as_bool) == Some(true) && state(status, "running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        let pod_ready = || {
            array(pod, "/status/conditions")
                .iter()
                .any(|c| str_at(c, "/type") == "Ready" && str_at(c, "/status") == "True")
        };
        if reason == "Completed" && minor::served() <= 34 {
            // 1.34's printPod: a failed container's reason does not outlast
            // a later one's `Completed`.
            if has_running {
                reason = if pod_ready() { "Running" } else { "NotReady" }.to_owned();
            }
        } else if reason == "Completed" {
            let pod_ready = pod_ready();
            if has_running && pod_ready {
                reason = "Running".to_owned();
            } else if !error_reason.is_empty() {
                reason = error_reason;
            } else if has_running {
                reason = "NotReady".to_owned();
            }
        }
    }

    let deleting = pod.at("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
    if deleting && str_at(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".to_owned();
    } else if deleting && phase != "Failed" && phase != "Succeeded" {
        reason = "Terminating".to_owned();
    }

    let restarts_cell = match last_restart {
        // Go's zero time has no age; a termination at the Unix epoch still has one.
        Some(at) if restarts != 0 => format!("{restarts} ({} ago)", human_duration(now - at)),
        _ => restarts.to_string(),
    };

    let pod_ip = array(pod, "/status/podIPs").first().map(|ip| str_at(ip, "/ip")).unwrap_or_default();
    let or_none = |s: &str| if s.is_empty() { "<none>".to_owned() } else { s.to_owned() };
    let gates = array(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let true_conditions =
            gates.iter().filter(|g| condition_is(pod, str_at(g, "/conditionType")) == Some(true)).count();
        format!("{true_conditions}/{}", gates.len())
    };
    let cells = vec![
        Cell::Str(str_at(pod, "/metadata/name").to_owned()),
        Cell::Str(format!("{ready}/{total}")),
        Cell::Str(reason),
        Cell::Str(restarts_cell),
        age_of(pod, now),
        Cell::Str(or_none(pod_ip)),
        Cell::Str(or_none(str_at(pod, "/spec/nodeName"))),
        Cell::Str(or_none(str_at(pod, "/status/nominatedNodeName"))),
        Cell::Str(readiness_gates),
    ];
    Printed { cells, conditions }
}
