//! The oracle: an answer through watchmux compared with the API server's
//! answer to the same bytes from the same identity.
//!
//! Looser (a failure): watchmux answers 2xx where the API server refused
//! (401, 403, 404, 400, 405, or a connection it would not accept); or both
//! answer 2xx and watchmux's says
//! more: a SelfSubjectReview naming another identity (the API server's own
//! account of who the request was from), a list with an item the direct
//! list lacks. Any other difference, stricter ones included, is recorded for
//! triage and does not fail the run: also a 2xx where the API server's
//! answer was another 4xx (406, 410, 422: what it refuses to encode or
//! validate, not who may read it).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::generate::{Case, SELF_SUBJECT_REVIEW};
use crate::wire::Answer;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Same,
    /// Different, and not more: for triage.
    Differs(String),
    /// watchmux gave more than the API server: a failure.
    Looser(String),
}

pub(crate) fn judge(case: &Case, direct: &Answer, via: &Answer) -> Verdict {
    let ok = |s: u16| (200..300).contains(&s);
    // Refusals that say who may do what, or that the request means nothing
    // to the API server; a connection it would not accept (status 0).
    let refusal = |s: u16| matches!(s, 0 | 400 | 401 | 403 | 404 | 405);
    if direct.timed_out() || via.timed_out() {
        return Verdict::Differs("no answer in time".into());
    }
    if ok(via.status) && refusal(direct.status) {
        return Verdict::Looser(format!("API server {}, watchmux {}", direct.status, via.status));
    }
    if ok(via.status) && (400..500).contains(&direct.status) {
        return Verdict::Differs(format!("looser validation: API server {}, watchmux {}", direct.status, via.status));
    }
    if ok(via.status) && ok(direct.status) {
        if case.method == "POST" && case.path == SELF_SUBJECT_REVIEW {
            let (d, v) = (user_info(direct), user_info(via));
            if d != v {
                return Verdict::Looser(format!("another identity: API server {d:?}, watchmux {v:?}"));
            }
        } else if let (Some(d), Some(v)) = (items(direct), items(via)) {
            let more: Vec<&String> = v.difference(&d).collect();
            if !more.is_empty() {
                return Verdict::Looser(format!("items the API server did not list: {more:?}"));
            }
        }
    }
    if direct.status != via.status {
        return Verdict::Differs(format!("API server {}, watchmux {}", direct.status, via.status));
    }
    Verdict::Same
}

/// A SelfSubjectReview's user: name, uid, sorted groups, extras.
fn user_info(a: &Answer) -> Option<String> {
    let v: Value = a.json()?;
    let u = &v["status"]["userInfo"];
    let mut groups: Vec<&str> = u["groups"].as_array()?.iter().filter_map(Value::as_str).collect();
    groups.sort();
    Some(format!("name={} uid={} groups={groups:?} extra={}", u["username"], u["uid"], u["extra"]))
}

/// A JSON list's items, or a Table's rows (each row's object is its
/// PartialObjectMetadata by default), as `namespace/name` (not for watches).
fn items(a: &Answer) -> Option<BTreeSet<String>> {
    if !a.content_type.starts_with("application/json") {
        return None;
    }
    let v: Value = a.json()?;
    let objects: Vec<&Value> = match v["kind"].as_str()? {
        "Table" => v["rows"].as_array()?.iter().map(|row| &row["object"]).collect(),
        kind if kind.ends_with("List") => v["items"].as_array()?.iter().collect(),
        _ => return None,
    };
    Some(
        objects
            .iter()
            .map(|i| format!("{}/{}", i["metadata"]["namespace"].as_str().unwrap_or(""), i["metadata"]["name"]))
            .collect(),
    )
}
