//! Reading the stored JSON as the printers read the decoded object: a
//! missing field is Go's zero value.

use serde_json::Value;

use super::{Cell, human_duration};

/// A string at a JSON pointer, `""` when absent.
pub(super) fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    v.pointer(path).and_then(Value::as_str).unwrap_or_default()
}

/// An integer at a JSON pointer, 0 when absent.
pub(super) fn int_at(v: &Value, path: &str) -> i64 {
    v.pointer(path).and_then(Value::as_i64).unwrap_or_default()
}

/// An array at a JSON pointer, empty when absent.
pub(super) fn array<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    v.pointer(path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A metav1.Time at a JSON pointer as Unix nanoseconds; `None` for Go's zero time.
pub(super) fn time_at(v: &Value, path: &str) -> Option<i128> {
    let (secs, nanos) = crate::go_rules::rfc3339::parse(v.pointer(path)?.as_str()?)?;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// `metadata.name`, the first cell of every row.
pub(super) fn name(v: &Value) -> Cell {
    Cell::Str(str_at(v, "/metadata/name").to_owned())
}

/// `translateTimestampSince(CreationTimestamp)`: `<unknown>` for a zero time.
pub(super) fn age_of(obj: &Value, now: i128) -> Cell {
    let created =
        obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str).and_then(crate::go_rules::rfc3339::parse);
    Cell::Str(match created {
        Some((secs, nanos)) => human_duration(now - (i128::from(secs) * 1_000_000_000 + i128::from(nanos))),
        None => "<unknown>".to_owned(),
    })
}
