//! Reading the stored JSON as the printers read the decoded object: a
//! missing field is Go's zero value.

use serde_json::Value;

use super::{Cell, human_duration};

/// A field at a path of object keys, `/a/b`: `Value::pointer` for the
/// printers' paths (keys only, none with `~`) without its per-key unescaping
/// (`replace("~1", "/")`, an allocation each), which was a third of a Table
/// LIST's CPU.
pub(super) trait Path {
    fn at(&self, path: &str) -> Option<&Value>;
}

impl Path for Value {
    fn at(&self, path: &str) -> Option<&Value> {
        debug_assert!(!path.contains('~') && !path.contains(|c: char| c.is_ascii_digit()), "{path}");
        if path.is_empty() {
            return Some(self);
        }
        path.strip_prefix('/')?.split('/').try_fold(self, |v, key| v.as_object()?.get(key))
    }
}

/// A string at a JSON pointer, `""` when absent.
pub(super) fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    v.at(path).and_then(Value::as_str).unwrap_or_default()
}

/// An integer at a JSON pointer, 0 when absent.
pub(super) fn int_at(v: &Value, path: &str) -> i64 {
    v.at(path).and_then(Value::as_i64).unwrap_or_default()
}

/// An array at a JSON pointer, empty when absent.
pub(super) fn array<'a>(v: &'a Value, path: &str) -> &'a [Value] {
    v.at(path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// A metav1.Time at a JSON pointer as Unix nanoseconds; `None` for Go's zero time.
pub(super) fn time_at(v: &Value, path: &str) -> Option<i128> {
    let (secs, nanos) = crate::go_rules::rfc3339::parse(v.at(path)?.as_str()?)?;
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// `metadata.name`, the first cell of every row.
pub(super) fn name(v: &Value) -> Cell {
    Cell::Str(str_at(v, "/metadata/name").to_owned())
}

/// `translateTimestampSince(CreationTimestamp)`: `<unknown>` for a zero time.
pub(super) fn age_of(obj: &Value, now: i128) -> Cell {
    let created =
        obj.at("/metadata/creationTimestamp").and_then(Value::as_str).and_then(crate::go_rules::rfc3339::parse);
    Cell::Str(match created {
        Some((secs, nanos)) => human_duration(now - (i128::from(secs) * 1_000_000_000 + i128::from(nanos))),
        None => "<unknown>".to_owned(),
    })
}
