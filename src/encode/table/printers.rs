//! The cells of a Table row, kind by kind, as the API server's printers
//! (k8s.io/kubernetes `pkg/printers/internalversion/printers.go`) write them
//! from the stored object. Only kinds whose every cell is reproduced here
//! have a printer; the rest pass through.
//!
//! The printers read the internal object, which the stored JSON decodes to
//! with the same values for the fields read here (names, maps' lengths,
//! plain strings).

use serde_json::Value;

use super::fields::{age_of, name};
use super::{Cell, Printed};
use crate::encode::minor;

/// A printer: the object as stored, and now (Unix nanoseconds) for ages.
pub(crate) type Printer = fn(&Value, i128) -> Printed;

/// The printer of a built-in kind, if there is one here, as the upstream's
/// minor ([`minor::served`]) prints it.
pub(crate) fn printer(group: &str, kind: &str) -> Option<Printer> {
    let printer: Printer = match (group, kind) {
        ("", "ConfigMap") => config_map,
        ("", "Secret") => secret,
        ("", "Namespace") => namespace,
        // 1.34 still printed the number of token secrets.
        ("", "ServiceAccount") if minor::served() <= 34 => service_account_with_secrets,
        ("", "ServiceAccount") => service_account,
        ("", "Pod") => super::pod::pod,
        ("apps", "Deployment") => super::apps::deployment,
        ("apps", "ReplicaSet") => super::apps::replica_set,
        ("apps", "StatefulSet") => super::apps::stateful_set,
        ("apps", "DaemonSet") => super::apps::daemon_set,
        ("batch", "Job") => super::batch_and_service::job,
        ("", "Service") => super::batch_and_service::service,
        ("", "Node") => super::node::node,
        _ => return None,
    };
    Some(printer)
}

/// `printConfigMap`: name, `len(Data)+len(BinaryData)`, age.
fn config_map(obj: &Value, now: i128) -> Printed {
    let data = map_len(obj, "data") + map_len(obj, "binaryData");
    vec![name(obj), Cell::Int(data), age_of(obj, now)].into()
}

/// `printSecret`: name, type, `len(Data)`, age.
fn secret(obj: &Value, now: i128) -> Printed {
    vec![name(obj), string_at(obj, &["type"]), Cell::Int(map_len(obj, "data")), age_of(obj, now)].into()
}

/// `printNamespace`: name, `status.phase`, age.
fn namespace(obj: &Value, now: i128) -> Printed {
    vec![name(obj), string_at(obj, &["status", "phase"]), age_of(obj, now)].into()
}

/// `printServiceAccount`: name, age.
fn service_account(obj: &Value, now: i128) -> Printed {
    vec![name(obj), age_of(obj, now)].into()
}

/// `printServiceAccount` up to 1.34: name, `len(Secrets)`, age.
fn service_account_with_secrets(obj: &Value, now: i128) -> Printed {
    let secrets = obj.get("secrets").and_then(Value::as_array).map_or(0, |s| s.len() as i64);
    vec![name(obj), Cell::Int(secrets), age_of(obj, now)].into()
}

/// A string field, `""` when absent (Go's zero value).
fn string_at(obj: &Value, path: &[&str]) -> Cell {
    let value = path.iter().try_fold(obj, |v, key| v.get(key));
    Cell::Str(value.and_then(Value::as_str).unwrap_or_default().to_owned())
}

fn map_len(obj: &Value, key: &str) -> i64 {
    obj.get(key).and_then(Value::as_object).map_or(0, |m| m.len() as i64)
}

/// Now, as the printers' `time.Since` reads it.
pub(crate) fn now_nanos() -> i128 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    since.as_nanos() as i128
}
