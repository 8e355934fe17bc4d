//! Reading only what a printer reads: a stored object parsed into a
//! `serde_json::Value` that holds the fields its Table row is printed from
//! and nothing else.
//!
//! A Table row used to parse the whole object into a `Value`: a pod's
//! managedFields, annotations, volumes and container specs allocated map by
//! map, about 18 µs of a LIST's CPU a pod, to print nine short cells. Each
//! printer now says which fields it reads ([`Reads`]; a custom resource's,
//! from its columns' paths) and the parse skips the rest without allocating
//! (serde's `IgnoredAny` still checks that it is valid JSON). What is kept
//! is exactly what a full parse would hold at those places, so the printers
//! are unchanged and print the same cells; tests hold every printer to that
//! over generated objects.
//!
//! Pruning only drops the keys of an object that a [`Reads::Fields`] or
//! [`Reads::Named`] does not name, and (for [`Reads::Keys`]) the values of
//! one whose keys alone are counted. A value of another type where an object
//! or an array was expected is kept whole, so a printer looking at a
//! malformed object sees what it would have seen before. What is kept is
//! parsed under serde_json's depth limit, as before; what is skipped is
//! skipped without recursion (so nesting past that limit in a field no
//! printer reads no longer blanks the row).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// What a printer reads of a value.
#[derive(Debug)]
pub(crate) enum Reads {
    /// The whole value.
    All,
    /// Of an object, these keys only (each read as said).
    Fields(&'static [(&'static str, Reads)]),
    /// Of an object, its keys only: each value is `null` (the printer counts them).
    Keys,
    /// Of an array, each element read as said.
    Each(&'static Reads),
    /// Of an object, these keys only: a tree made at run time (a custom
    /// resource's printer columns, [`Reads::add_path`]).
    Named(Vec<(String, Reads)>),
}

impl Reads {
    /// Also reads the value at `path` (object keys; `None` for an array
    /// index, from which the value is read whole), and all of it.
    pub(crate) fn add_path<'p>(&mut self, mut path: impl Iterator<Item = Option<&'p str>>) {
        match self {
            Reads::All => {}
            Reads::Named(fields) => match path.next() {
                None => *self = Reads::All,
                Some(None) => *self = Reads::All,
                Some(Some(key)) => {
                    let at = match fields.iter().position(|(name, _)| name == key) {
                        Some(at) => at,
                        None => {
                            fields.push((key.to_owned(), Reads::Named(Vec::new())));
                            fields.len() - 1
                        }
                    };
                    fields[at].1.add_path(path);
                }
            },
            // The static trees are the built-in printers' own; a run-time tree
            // starts from `Named`.
            Reads::Fields(_) | Reads::Keys | Reads::Each(_) => *self = Reads::All,
        }
    }
}

/// How one member of an object is read.
enum Member<'r> {
    Read(&'r Reads),
    /// Not read: left out of the object.
    Skipped,
    /// Only counted: `null`.
    Null,
    /// Read whole (an object where an array was expected, or under `All`).
    Whole,
}

impl Reads {
    /// How the member `key` of an object read as `self` is read.
    fn member(&self, key: &str) -> Member<'_> {
        let named = match self {
            Reads::Fields(fields) => fields.iter().find(|(name, _)| *name == key).map(|(_, reads)| reads),
            Reads::Named(fields) => fields.iter().find(|(name, _)| name == key).map(|(_, reads)| reads),
            Reads::Keys => return Member::Null,
            Reads::All | Reads::Each(_) => return Member::Whole,
        };
        named.map_or(Member::Skipped, Member::Read)
    }
}

/// `json` parsed keeping what `reads` names; `Value::Null` when it is not
/// JSON (as the full parse's `unwrap_or_default` gave).
pub(crate) fn parse(json: &[u8], reads: &Reads) -> Value {
    if matches!(reads, Reads::All) {
        return serde_json::from_slice(json).unwrap_or_default();
    }
    let mut de = serde_json::Deserializer::from_slice(json);
    match Pruned(reads).deserialize(&mut de).and_then(|v| de.end().map(|()| v)) {
        Ok(value) => value,
        Err(_) => Value::Null,
    }
}

/// A seed that reads one value as its [`Reads`] says.
#[derive(Clone, Copy)]
struct Pruned<'r>(&'r Reads);

impl<'de> DeserializeSeed<'de> for Pruned<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Reads::All => Value::deserialize(deserializer),
            reads => deserializer.deserialize_any(PrunedVisitor(reads)),
        }
    }
}

struct PrunedVisitor<'r>(&'r Reads);

impl<'de> Visitor<'de> for PrunedVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own visitor: a non-finite float is `null`.
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        Pruned(self.0).deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // Only `Each` prunes an array's elements; an array where an object
        // was expected is kept whole.
        let element = match self.0 {
            Reads::Each(element) => element,
            _ => &Reads::All,
        };
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(value) = seq.next_element_seed(Pruned(element))? {
            out.push(value);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let value = match self.0.member(&key) {
                Member::Read(reads) => map.next_value_seed(Pruned(reads))?,
                Member::Skipped => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                Member::Null => {
                    map.next_value::<IgnoredAny>()?;
                    Value::Null
                }
                Member::Whole => map.next_value::<Value>()?,
            };
            // A repeated key: the last one wins, as in a full parse.
            out.insert(key.into_owned(), value);
        }
        Ok(Value::Object(out))
    }
}

/// An object's key, borrowed from the JSON when it has no escapes (serde's
/// own `Cow<str>` always allocates: a String for every key, kept or not).
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Cow<'de, str>, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v))
    }
}

/// `metadata` as the built-in printers read it: the name, and the times of
/// creation (an age) and deletion (Terminating).
pub(super) const METADATA: Reads =
    Reads::Fields(&[("name", Reads::All), ("creationTimestamp", Reads::All), ("deletionTimestamp", Reads::All)]);

/// What most built-in printers read: the metadata above, spec and status whole.
pub(super) const SPEC_AND_STATUS: Reads =
    Reads::Fields(&[("metadata", METADATA), ("spec", Reads::All), ("status", Reads::All)]);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SOME: Reads = Reads::Fields(&[
        ("a", Reads::All),
        ("list", Reads::Each(&Reads::Fields(&[("x", Reads::All)]))),
        ("counted", Reads::Keys),
        ("nested", Reads::Fields(&[("deep", Reads::All)])),
    ]);

    fn pruned(v: &Value) -> Value {
        parse(&serde_json::to_vec(v).unwrap(), &SOME)
    }

    #[test]
    fn keeps_what_is_named_and_drops_the_rest() {
        let v = json!({"a": {"b": [1, 2.5, null]}, "dropped": {"big": "x"}, "list": [{"x": 1, "y": 2}, 3, [4]],
            "counted": {"k1": {"v": 1}, "k2": "s"}, "nested": {"deep": true, "shallow": false}});
        assert_eq!(
            pruned(&v),
            json!({"a": {"b": [1, 2.5, null]}, "list": [{"x": 1}, 3, [4]], "counted": {"k1": null, "k2": null},
                "nested": {"deep": true}})
        );
    }

    #[test]
    fn another_type_where_a_shape_was_expected_is_kept_whole() {
        // An array where an object was expected, an object where an array was.
        let v = json!({"nested": [{"deep": 1, "other": 2}], "list": {"x": 1, "y": 2}, "counted": [1, {"a": 2}]});
        assert_eq!(pruned(&v), v);
        for scalar in [json!(null), json!("s"), json!(-3), json!(1e300), json!(true)] {
            assert_eq!(pruned(&json!({"nested": scalar, "list": scalar})), json!({"nested": scalar, "list": scalar}));
            assert_eq!(pruned(&scalar), scalar);
        }
    }

    #[test]
    fn escaped_and_repeated_keys_read_as_a_full_parse_reads_them() {
        let raw = br#"{"\u0061": 1, "a": 2, "n\u0065sted": {"deep": "\u00e9"}, "dropped": "\ud83d\ude00"}"#;
        assert_eq!(parse(raw, &SOME), json!({"a": 2, "nested": {"deep": "é"}}));
    }

    #[test]
    fn numbers_read_as_a_full_parse_reads_them() {
        let raw = br#"{"a": [0, -0, 18446744073709551615, -9223372036854775808, 123456789012345678901234, 1.5e-7, 2E3],
            "nested": {"deep": -1.0}}"#;
        let full: Value = serde_json::from_slice(raw).unwrap();
        assert_eq!(parse(raw, &SOME), full);
    }

    #[test]
    fn deep_nesting_is_bounded_where_kept_and_skipped_where_not() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let kept = format!(r#"{{"a": {}}}"#, deep(200));
        assert_eq!(parse(kept.as_bytes(), &SOME), Value::Null, "past serde_json's limit, as a full parse");
        let skipped = format!(r#"{{"dropped": {}, "a": 1}}"#, deep(100_000));
        assert_eq!(parse(skipped.as_bytes(), &SOME), json!({"a": 1}));
    }

    #[test]
    fn what_is_not_json_is_null_as_before() {
        for raw in [&b"{\"a\": 1"[..], b"{\"dropped\": [1,}", b"{} trailing", b"", b"{\"dropped\": \"\\x\"}"] {
            assert_eq!(parse(raw, &SOME), Value::Null, "{}", String::from_utf8_lossy(raw));
            assert_eq!(serde_json::from_slice::<Value>(raw).unwrap_or_default(), Value::Null);
        }
    }
}
