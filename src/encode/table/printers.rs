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
use super::reads::{self, METADATA, Reads, SPEC_AND_STATUS};
use super::{Cell, Printed};
use crate::encode::minor;

/// A printer: the cells of the object as stored, printed at now (Unix
/// nanoseconds, for ages), and what of the object it reads.
pub(crate) struct Printer {
    pub print: fn(&Value, i128) -> Printed,
    /// The fields `print` reads: the object is parsed keeping only these.
    pub reads: &'static Reads,
}

impl Printer {
    /// The row of a stored object's JSON, parsing only what is printed.
    pub(crate) fn print_json(&self, json: &[u8], now: i128) -> Printed {
        (self.print)(&reads::parse(json, self.reads), now)
    }
}

/// The printer of a built-in kind, if there is one here, as the upstream's
/// minor ([`minor::served`]) prints it.
pub(crate) fn printer(group: &str, kind: &str) -> Option<&'static Printer> {
    const fn p(print: fn(&Value, i128) -> Printed, reads: &'static Reads) -> Printer {
        Printer { print, reads }
    }
    static CONFIG_MAP_PRINTER: Printer = p(config_map, &CONFIG_MAP);
    static SECRET_PRINTER: Printer = p(secret, &SECRET);
    static NAMESPACE_PRINTER: Printer = p(namespace, &NAMESPACE);
    static SERVICE_ACCOUNT_WITH_SECRETS: Printer = p(service_account_with_secrets, &SERVICE_ACCOUNT);
    static SERVICE_ACCOUNT_PRINTER: Printer = p(service_account, &SERVICE_ACCOUNT);
    static POD: Printer = p(super::pod::pod, &super::pod::READS);
    static DEPLOYMENT: Printer = p(super::apps::deployment, &SPEC_AND_STATUS);
    static REPLICA_SET: Printer = p(super::apps::replica_set, &SPEC_AND_STATUS);
    static STATEFUL_SET: Printer = p(super::apps::stateful_set, &SPEC_AND_STATUS);
    static DAEMON_SET: Printer = p(super::apps::daemon_set, &SPEC_AND_STATUS);
    static JOB: Printer = p(super::batch_and_service::job, &SPEC_AND_STATUS);
    static SERVICE: Printer = p(super::batch_and_service::service, &SPEC_AND_STATUS);
    static NODE: Printer = p(super::node::node, &super::node::READS);
    Some(match (group, kind) {
        ("", "ConfigMap") => &CONFIG_MAP_PRINTER,
        ("", "Secret") => &SECRET_PRINTER,
        ("", "Namespace") => &NAMESPACE_PRINTER,
        // 1.34 still printed the number of token secrets.
        ("", "ServiceAccount") if minor::served() <= 34 => &SERVICE_ACCOUNT_WITH_SECRETS,
        ("", "ServiceAccount") => &SERVICE_ACCOUNT_PRINTER,
        ("", "Pod") => &POD,
        ("apps", "Deployment") => &DEPLOYMENT,
        ("apps", "ReplicaSet") => &REPLICA_SET,
        ("apps", "StatefulSet") => &STATEFUL_SET,
        ("apps", "DaemonSet") => &DAEMON_SET,
        ("batch", "Job") => &JOB,
        ("", "Service") => &SERVICE,
        ("", "Node") => &NODE,
        _ => return None,
    })
}

const CONFIG_MAP: Reads = Reads::Fields(&[("metadata", METADATA), ("data", Reads::Keys), ("binaryData", Reads::Keys)]);
const SECRET: Reads = Reads::Fields(&[("metadata", METADATA), ("type", Reads::All), ("data", Reads::Keys)]);
const NAMESPACE: Reads = Reads::Fields(&[("metadata", METADATA), ("status", Reads::All)]);
const SERVICE_ACCOUNT: Reads = Reads::Fields(&[("metadata", METADATA), ("secrets", Reads::All)]);

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
