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
//!
//! A self-review naming the same principal (name, uid, groups, extras)
//! but another credential (the `credential-id` extra, a certificate's hash)
//! is for triage: in `client` mode watchmux asks with its own certificate
//! for a caller that is the same principal as itself.
//!
//! Watches are compared by their events, not only their status: the
//! objects an event names through watchmux that the API server's events
//! did not name are looser (a failure); any other difference in the events
//! is for triage. The events are compared as a sorted list of `type
//! namespace/name resourceVersion` (a Table's rows one by one): within one
//! watch, events of different objects at one resourceVersion have no order
//! the wire promises (the initial events of a watch are the list's items,
//! in whatever order the cache holds them), and bookmarks come when the
//! server chooses, so they are left out, all but the one that ends the
//! initial events (`k8s.io/initial-events-end`), which a client waits for.
//!
//! Shared answers (discovery, OpenAPI, `/version`: alike for every caller
//! admitted) are compared whole when both are 2xx: content type, caching
//! and redirect headers (`KEPT_HEADERS`), and the body (as JSON when both
//! are; only the prefix both read when one was cut short).
//!
//! The `offline` target (a node-local watchmux restarted from its
//! persisted caches with the upstream unreachable) may answer only
//! watchmux's own upstream identity: a 2xx to anyone else is looser, since
//! nobody could have reviewed it.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::generate::{Case, SELF_SUBJECT_REVIEW, Who};
use crate::wire::Answer;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Same,
    /// Different, and not more: for triage.
    Differs(String),
    /// watchmux gave more than the API server: a failure.
    Looser(String),
}

pub(crate) fn judge(case: &Case, direct: &Answer, via: &Answer, offline: bool) -> Verdict {
    let ok = |s: u16| (200..300).contains(&s);
    // Refusals that say who may do what, or that the request means nothing
    // to the API server; a connection it would not accept (status 0).
    let refusal = |s: u16| matches!(s, 0 | 400 | 401 | 403 | 404 | 405);
    if direct.timed_out() || via.timed_out() {
        return Verdict::Differs("no answer in time".into());
    }
    if offline && ok(via.status) && !is_own_identity(case) {
        return Verdict::Looser(format!(
            "answered {} while offline to a caller that is not watchmux's own identity (API server {})",
            via.status, direct.status
        ));
    }
    if ok(via.status) && refusal(direct.status) {
        return Verdict::Looser(format!("API server {}, watchmux {}", direct.status, via.status));
    }
    if ok(via.status) && (400..500).contains(&direct.status) {
        return Verdict::Differs(format!("looser validation: API server {}, watchmux {}", direct.status, via.status));
    }
    if ok(via.status) && ok(direct.status) {
        if case.method == "POST" && case.path == SELF_SUBJECT_REVIEW {
            let (d, v) = (user_info(direct, false), user_info(via, false));
            if d != v {
                return Verdict::Looser(format!("another identity: API server {d:?}, watchmux {v:?}"));
            }
            let (d, v) = (user_info(direct, true), user_info(via, true));
            if d != v {
                return Verdict::Differs(format!(
                    "the same principal, another credential: API server {d:?}, watchmux {v:?}"
                ));
            }
        } else if let (Some(d), Some(v)) = (items(direct), items(via)) {
            let more: Vec<&String> = v.difference(&d).collect();
            if !more.is_empty() {
                return Verdict::Looser(format!("items the API server did not list: {more:?}"));
            }
        } else if let (Some(d), Some(v)) = (events(direct), events(via)) {
            let named =
                |events: &[Event]| -> BTreeSet<String> { events.iter().filter_map(|e| e.object.clone()).collect() };
            let more: Vec<String> = named(&v).difference(&named(&d)).cloned().collect();
            if !more.is_empty() {
                return Verdict::Looser(format!("watch events of objects the API server did not send: {more:?}"));
            }
            if d != v {
                let line = |events: &[Event]| events.iter().map(|e| e.line.as_str()).collect::<Vec<_>>().join(", ");
                return Verdict::Differs(format!("watch events: API server [{}], watchmux [{}]", line(&d), line(&v)));
            }
        }
        if is_shared(&case.path)
            && let Some(why) = shared_difference(direct, via)
        {
            return Verdict::Differs(why);
        }
    }
    if direct.status != via.status {
        return Verdict::Differs(format!("API server {}, watchmux {}", direct.status, via.status));
    }
    Verdict::Same
}

/// The extra that names the credential a request came with (a
/// certificate's hash): it tells two credentials of one principal apart,
/// not what the principal may do.
const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// A SelfSubjectReview's user: name, uid, sorted groups, extras (with the
/// credential's id only when `credential` is set).
fn user_info(a: &Answer, credential: bool) -> Option<String> {
    let v: Value = a.json()?;
    let u = &v["status"]["userInfo"];
    let mut groups: Vec<&str> = u["groups"].as_array()?.iter().filter_map(Value::as_str).collect();
    groups.sort();
    let mut extra = u["extra"].clone();
    if !credential && let Some(extra) = extra.as_object_mut() {
        extra.remove(CREDENTIAL_ID);
    }
    Some(format!("name={} uid={} groups={groups:?} extra={extra}", u["username"], u["uid"]))
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

/// Whether the case is sent as watchmux's own upstream identity in the
/// `client` and `offline` targets, as the API server reads a certificate
/// (the user is the last CN, as Go's subject parser keeps it; the groups
/// the Os, and system:authenticated; a UID attribute the uid): that node's
/// name, its group alone, no uid, and no impersonation. A token beside the certificate does not
/// count: the API server reads the certificate first.
pub(crate) fn is_own_identity(case: &Case) -> bool {
    let Who::Cert { subject, .. } = &case.who else { return false };
    if case.headers.iter().any(|(k, _)| k.to_ascii_lowercase().starts_with("impersonate-")) {
        return false;
    }
    let values = |attr: &str| -> Vec<&str> {
        subject.iter().flatten().filter(|a| a.attr == attr).map(|a| a.value.as_str()).collect()
    };
    let own = format!("system:node:{}", crate::fixtures::WATCHMUX_NODE);
    // The API server adds system:authenticated to every authenticated user's groups.
    let mut groups: BTreeSet<&str> = values("O").into_iter().collect();
    groups.insert("system:authenticated");
    values("CN").last() == Some(&own.as_str())
        && groups == BTreeSet::from(["system:nodes", "system:authenticated"])
        && values("UID").is_empty()
}

/// One watch event as compared: its line, and the object it names (not
/// for errors and bookmarks).
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    line: String,
    object: Option<String>,
}

/// A JSON watch stream's events, sorted (see the module's doc); `None` when
/// the body is not a watch stream. A last line cut short by the read bound is left out.
fn events(a: &Answer) -> Option<Vec<Event>> {
    if !a.content_type.starts_with("application/json") {
        return None;
    }
    let text = std::str::from_utf8(&a.body).ok()?;
    let lines: Vec<&str> = text.split('\n').filter(|l| !l.trim().is_empty()).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let v: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) if i + 1 == lines.len() && i > 0 && !text.ends_with('\n') => break,
            Err(_) => return None,
        };
        let (Some(kind), Some(object)) = (v["type"].as_str(), v.get("object").filter(|o| o.is_object())) else {
            return None;
        };
        match kind {
            "BOOKMARK" => {
                if object["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true" {
                    out.push(Event { line: "BOOKMARK initial-events-end".into(), object: None });
                }
            }
            "ERROR" => out.push(Event { line: format!("ERROR {} {}", object["code"], object["reason"]), object: None }),
            _ => {
                let objects: Vec<&Value> = match object["kind"].as_str() {
                    Some("Table") => object["rows"].as_array()?.iter().map(|row| &row["object"]).collect(),
                    _ => vec![object],
                };
                for o in objects {
                    let meta = &o["metadata"];
                    let name =
                        format!("{}/{}", meta["namespace"].as_str().unwrap_or(""), meta["name"].as_str().unwrap_or(""));
                    let line = format!("{kind} {name} {}", meta["resourceVersion"].as_str().unwrap_or(""));
                    out.push(Event { line, object: Some(name) });
                }
            }
        }
    }
    out.sort();
    Some(out)
}

/// An answer watchmux shares among the callers it admits.
pub(crate) fn is_shared(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or("");
    matches!(path, "/api" | "/apis" | "/version" | "/openapi/v2") || path.starts_with("/openapi/v3")
}

/// How two 2xx shared answers differ, if they do.
fn shared_difference(direct: &Answer, via: &Answer) -> Option<String> {
    if direct.content_type != via.content_type {
        return Some(format!(
            "shared answer's content type: API server {:?}, watchmux {:?}",
            direct.content_type, via.content_type
        ));
    }
    if direct.headers != via.headers {
        return Some(format!("shared answer's headers: API server {:?}, watchmux {:?}", direct.headers, via.headers));
    }
    let same = if direct.complete && via.complete {
        match (serde_json::from_slice::<Value>(&direct.body), serde_json::from_slice::<Value>(&via.body)) {
            (Ok(d), Ok(v)) => d == v,
            _ => direct.body == via.body,
        }
    } else {
        let n = direct.body.len().min(via.body.len());
        direct.body[..n] == via.body[..n]
    };
    (!same).then(|| {
        format!(
            "shared answer's body ({} bytes{}, watchmux {} bytes{})",
            direct.body.len(),
            if direct.complete { "" } else { ", cut short" },
            via.body.len(),
            if via.complete { "" } else { ", cut short" }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::own_subject;
    use crate::x509::Attr;

    fn case(who: Who, path: &str) -> Case {
        Case { who, method: "GET".into(), path: path.into(), headers: Vec::new(), body: String::new() }
    }

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            content_type: "application/json".into(),
            body: body.as_bytes().to_vec(),
            complete: true,
            ..Answer::default()
        }
    }

    fn event(kind: &str, ns: &str, name: &str, rv: &str) -> String {
        format!(
            r#"{{"type":"{kind}","object":{{"kind":"Pod","metadata":{{"namespace":"{ns}","name":"{name}","resourceVersion":"{rv}"}}}}}}"#
        )
    }

    const BOOKMARK: &str = r#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}"#;
    const END: &str = r#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;

    fn stream(lines: &[String]) -> Answer {
        let mut body = lines.join("\n");
        body.push('\n');
        Answer { complete: false, ..answer(200, &body) }
    }

    #[test]
    fn offline_answers_only_watchmuxs_own_identity() {
        let own = case(Who::Cert { subject: own_subject(), token: None }, "/api/v1/pods");
        let list = answer(200, r#"{"kind":"PodList","items":[]}"#);
        assert_eq!(judge(&own, &list, &list, true), Verdict::Same);
        // Read as the API server reads it: the string type does not matter, the token beside it neither.
        let mut printable = own_subject();
        printable[1][0].string = crate::x509::StringType::Printable;
        let same_principal = case(Who::Cert { subject: printable, token: Some("fz-a/reader".into()) }, "/api/v1/pods");
        assert_eq!(judge(&same_principal, &list, &list, true), Verdict::Same);
        // Go keeps the last CN of a subject: another name before the node's is the node.
        let last_cn = [vec![vec![Attr::utf8("CN", "fz-user")]], own_subject()].concat();
        assert_eq!(judge(&case(Who::Cert { subject: last_cn, token: None }, "/"), &list, &list, true), Verdict::Same);
        // system:authenticated as an O: every authenticated user has it anyway.
        let authenticated = [own_subject(), vec![vec![Attr::utf8("O", "system:authenticated")]]].concat();
        assert_eq!(
            judge(&case(Who::Cert { subject: authenticated, token: None }, "/"), &list, &list, true),
            Verdict::Same
        );

        let mut others = vec![
            case(Who::Anonymous, "/api/v1/pods"),
            case(Who::Token { account: "admin".into() }, "/api/v1/pods"),
            // The node's name without its group, or with another group, or a uid: other principals.
            case(Who::Cert { subject: vec![own_subject()[1].clone()], token: None }, "/api/v1/pods"),
            case(
                Who::Cert { subject: [own_subject(), vec![vec![Attr::utf8("O", "tenants")]]].concat(), token: None },
                "/",
            ),
            case(Who::Cert { subject: [own_subject(), vec![vec![Attr::utf8("UID", "u")]]].concat(), token: None }, "/"),
            // The node's name before another: that other name is the user.
            case(
                Who::Cert { subject: [own_subject(), vec![vec![Attr::utf8("CN", "fz-user")]]].concat(), token: None },
                "/",
            ),
        ];
        let mut impersonating = own.clone();
        impersonating.headers.push(("Impersonate-User".into(), "system:node:fz-n1".into()));
        others.push(impersonating);
        for other in &others {
            assert!(matches!(judge(other, &list, &list, true), Verdict::Looser(_)), "{other:?}");
            assert_eq!(judge(other, &list, &list, false), Verdict::Same, "only the offline target: {other:?}");
        }
        assert!(matches!(judge(&others[0], &list, &answer(503, "{}"), true), Verdict::Differs(_)));
    }

    #[test]
    fn watches_are_judged_by_their_events_in_any_order_without_bookmarks() {
        let anyone = case(Who::Anonymous, "/api/v1/pods?watch=1");
        let a = event("ADDED", "fz-a", "p1", "5");
        let b = event("ADDED", "fz-b", "p2", "6");
        let direct = stream(&[a.clone(), b.clone(), END.into()]);
        // Another order, a bookmark more, a last line cut short by the read bound.
        let mut reordered = stream(&[b.clone(), BOOKMARK.into(), a.clone(), END.into()]);
        reordered.body.extend_from_slice(br#"{"type":"ADDED","obj"#);
        assert_eq!(judge(&anyone, &direct, &reordered, false), Verdict::Same);

        let more = stream(&[a.clone(), b.clone(), event("ADDED", "fz-x", "secret", "7"), END.into()]);
        assert!(
            matches!(judge(&anyone, &direct, &more, false), Verdict::Looser(why) if why.contains("fz-x/secret")),
            "an object the API server did not send"
        );
        let older = stream(&[a.clone(), event("ADDED", "fz-b", "p2", "4"), END.into()]);
        assert!(matches!(judge(&anyone, &direct, &older, false), Verdict::Differs(_)), "another resourceVersion");
        let no_end = stream(&[a.clone(), b.clone()]);
        assert!(matches!(judge(&anyone, &direct, &no_end, false), Verdict::Differs(_)), "no initial-events-end");
        let fewer = stream(&[a.clone(), END.into()]);
        assert!(matches!(judge(&anyone, &direct, &fewer, false), Verdict::Differs(_)), "an event missing");
        // A Table's rows are the objects.
        let table = r#"{"type":"ADDED","object":{"kind":"Table","rows":[{"object":{"metadata":{"namespace":"fz-x","name":"t","resourceVersion":"1"}}}]}}"#.to_owned();
        assert!(
            matches!(judge(&anyone, &direct, &stream(&[table]), false), Verdict::Looser(why) if why.contains("fz-x/t"))
        );
    }

    #[test]
    fn a_self_review_of_another_principal_is_looser_of_another_credential_only_differs() {
        let review = Case { method: "POST".into(), ..case(Who::Anonymous, SELF_SUBJECT_REVIEW) };
        let user = |name: &str, groups: &str, credential: &str| {
            answer(
                201,
                &format!(
                    r#"{{"kind":"SelfSubjectReview","status":{{"userInfo":{{"username":"{name}","groups":[{groups}],"extra":{{"{CREDENTIAL_ID}":["{credential}"]}}}}}}}}"#
                ),
            )
        };
        let direct = user("system:node:fz-n1", r#""system:nodes","system:authenticated""#, "X509SHA256=a");
        let reordered = user("system:node:fz-n1", r#""system:authenticated","system:nodes""#, "X509SHA256=a");
        assert_eq!(judge(&review, &direct, &reordered, false), Verdict::Same);
        let other_credential = user("system:node:fz-n1", r#""system:nodes","system:authenticated""#, "X509SHA256=b");
        assert!(
            matches!(judge(&review, &direct, &other_credential, false), Verdict::Differs(why) if why.contains("another credential"))
        );
        let more_groups =
            user("system:node:fz-n1", r#""system:nodes","system:masters","system:authenticated""#, "X509SHA256=a");
        assert!(matches!(judge(&review, &direct, &more_groups, false), Verdict::Looser(_)));
        let other_name = user("system:node:fz-n2", r#""system:nodes","system:authenticated""#, "X509SHA256=a");
        assert!(matches!(judge(&review, &direct, &other_name, false), Verdict::Looser(_)));
    }

    #[test]
    fn shared_answers_are_compared_whole() {
        let discovery = case(Who::Anonymous, "/apis");
        let direct = Answer {
            headers: vec![("etag".into(), "\"A\"".into())],
            ..answer(200, r#"{"kind":"APIGroupDiscoveryList","items":[1,2]}"#)
        };
        let same_json =
            Answer { body: br#"{"items":[1,2],"kind":"APIGroupDiscoveryList"}"#.to_vec(), ..direct.clone() };
        assert_eq!(judge(&discovery, &direct, &same_json, false), Verdict::Same);
        let other_etag = Answer { headers: vec![("etag".into(), "\"B\"".into())], ..direct.clone() };
        assert!(
            matches!(judge(&discovery, &direct, &other_etag, false), Verdict::Differs(why) if why.contains("headers"))
        );
        let other_type =
            Answer { content_type: "application/json;g=apidiscovery.k8s.io;v=v2".into(), ..direct.clone() };
        assert!(matches!(judge(&discovery, &direct, &other_type, false), Verdict::Differs(_)));
        let other_body = Answer { body: br#"{"kind":"APIGroupDiscoveryList","items":[1]}"#.to_vec(), ..direct.clone() };
        assert!(matches!(judge(&discovery, &direct, &other_body, false), Verdict::Differs(_)));
        // A document cut short by the read bound: the prefix both read.
        let openapi = case(Who::Anonymous, "/openapi/v3/api/v1?hash=X");
        let whole = answer(200, r#"{"openapi":"3.0.0","paths":{}}"#);
        let cut = Answer { body: whole.body[..12].to_vec(), complete: false, ..whole.clone() };
        assert_eq!(judge(&openapi, &whole, &cut, false), Verdict::Same);
        let cut_other = Answer { body: br#"{"openapi":"3.1"#.to_vec(), complete: false, ..whole.clone() };
        assert!(matches!(judge(&openapi, &whole, &cut_other, false), Verdict::Differs(_)));
        // Not a shared answer: bodies may differ (a list's resourceVersion).
        let list = case(Who::Anonymous, "/api/v1/pods");
        assert_eq!(judge(&list, &direct, &other_body, false), Verdict::Same);
    }
}
