//! The metadata a Table row carries is the *internal* object's
//! (`asTable` reads it after the storage decoded the object to the internal
//! version), and two conversions from apps/v1 move an annotation into a spec
//! field there: a DaemonSet's `deprecated.daemonset.template.generation`
//! (always present) and a Deployment's non-empty
//! `deprecated.deployment.rollback.to` (k8s.io/kubernetes
//! `pkg/apis/apps/v1/conversion.go`). So their PartialObjectMetadata rows lack
//! it, and an annotation map left empty is not written at all. The row is
//! the object's shared PartialObjectMetadata bytes with that one entry cut
//! out; every other byte stays.

use bytes::Bytes;

/// The annotation the internal version of a kind does not carry, and
/// whether only a non-empty value is moved.
pub(crate) fn internal_only_annotation(group: &str, kind: &str) -> Option<(&'static str, bool)> {
    match (group, kind) {
        ("apps", "DaemonSet") => Some(("deprecated.daemonset.template.generation", false)),
        ("apps", "Deployment") => Some(("deprecated.deployment.rollback.to", true)),
        _ => None,
    }
}

/// `metadata` (PartialObjectMetadata JSON as Go writes it) without the
/// annotation `key` (when `nonempty_only`, only a non-empty value); the same
/// bytes when it has none.
pub(crate) fn without_annotation(metadata: &Bytes, key: &str, nonempty_only: bool) -> Bytes {
    cut(metadata, key, nonempty_only).map_or_else(|| metadata.clone(), Bytes::from)
}

fn cut(json: &[u8], key: &str, nonempty_only: bool) -> Option<Vec<u8>> {
    // Nothing before `annotations` in ObjectMeta can hold this text (names,
    // uids and label keys and values have no quotes or braces).
    const FIELD: &[u8] = b",\"annotations\":{";
    let field = json.windows(FIELD.len()).position(|w| w == FIELD)?;
    let mut at = field + FIELD.len();
    // (start, end) of each `"k":"v"` entry, and the index of the one to cut.
    let mut entries = Vec::new();
    let mut found = None;
    loop {
        let key_end = string_end(json, at)?;
        let value_start = key_end + 1;
        (json.get(key_end) == Some(&b':')).then_some(())?;
        let value_end = string_end(json, value_start)?;
        let entry_key = &json[at + 1..key_end - 1];
        let value = &json[value_start + 1..value_end - 1];
        if entry_key == key.as_bytes() && (!nonempty_only || !value.is_empty()) {
            found = Some(entries.len());
        }
        entries.push((at, value_end));
        match json.get(value_end)? {
            b',' => at = value_end + 1,
            b'}' => break,
            _ => return None,
        }
    }
    let found = found?;
    let (start, end) = entries[found];
    let mut out = Vec::with_capacity(json.len());
    if entries.len() == 1 {
        // The map is empty without it: omitempty drops the field.
        out.extend_from_slice(&json[..field]);
        out.extend_from_slice(&json[end + 1..]);
    } else if found == 0 {
        out.extend_from_slice(&json[..start]);
        out.extend_from_slice(&json[end + 1..]);
    } else {
        out.extend_from_slice(&json[..start - 1]);
        out.extend_from_slice(&json[end..]);
    }
    Some(out)
}

/// The index just past the JSON string starting at `at` (its closing quote
/// included), honouring backslash escapes.
fn string_end(json: &[u8], at: usize) -> Option<usize> {
    (json.get(at) == Some(&b'"')).then_some(())?;
    let mut i = at + 1;
    while i < json.len() {
        match json[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "deprecated.daemonset.template.generation";

    fn strip(json: &str) -> String {
        String::from_utf8(without_annotation(&Bytes::from(json.to_owned()), KEY, false).to_vec()).unwrap()
    }

    #[test]
    fn the_entry_is_cut_wherever_it_stands_and_an_emptied_map_disappears() {
        let head = r#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"w","labels":{"a":"b"}"#;
        let only = format!(r#"{head},"annotations":{{"{KEY}":"1"}},"managedFields":[]}}}}"#);
        assert_eq!(strip(&only), format!(r#"{head},"managedFields":[]}}}}"#));
        let first = format!(r#"{head},"annotations":{{"{KEY}":"1","z":"x\",\"{KEY}\":\"2"}}}}}}"#);
        assert_eq!(strip(&first), format!(r#"{head},"annotations":{{"z":"x\",\"{KEY}\":\"2"}}}}}}"#));
        let last = format!(r#"{head},"annotations":{{"a":"{{}}","{KEY}":"7"}}}}}}"#);
        assert_eq!(strip(&last), format!(r#"{head},"annotations":{{"a":"{{}}"}}}}}}"#));
        let none = format!(r#"{head},"annotations":{{"a":"b"}}}}}}"#);
        assert_eq!(strip(&none), none);
        assert_eq!(strip(head), head);
    }

    #[test]
    fn a_rollback_annotation_moves_only_when_it_has_a_value() {
        let key = "deprecated.deployment.rollback.to";
        let empty = Bytes::from(format!(r#"{{"metadata":{{"name":"d","annotations":{{"{key}":""}}}}}}"#));
        assert_eq!(without_annotation(&empty, key, true), empty);
        let set = Bytes::from(format!(r#"{{"metadata":{{"name":"d","annotations":{{"{key}":"3"}}}}}}"#));
        assert_eq!(&without_annotation(&set, key, true)[..], br#"{"metadata":{"name":"d"}}"#);
    }
}
