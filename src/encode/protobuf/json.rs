//! Reading the upstream JSON lazily, one level at a time, keeping the exact
//! bytes of every value.
//!
//! The encoder needs the text of some values as it stands (a RawExtension's
//! `raw` and a FieldsV1's bytes are the JSON itself), so the object is never
//! turned into a `serde_json::Value`: each level is split into borrowed
//! [`RawValue`]s and only the values the schema asks about are decoded.

use std::borrow::Cow;
use std::fmt;

use serde::Deserializer;
use serde::de::{self, MapAccess, Visitor};
use serde_json::value::RawValue;

/// What a JSON value is, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JsonKind {
    Object,
    Array,
    String,
    Number,
    Bool,
    Null,
}

impl JsonKind {
    pub(super) fn of(raw: &RawValue) -> Self {
        match raw.get().as_bytes().first() {
            Some(b'{') => Self::Object,
            Some(b'[') => Self::Array,
            Some(b'"') => Self::String,
            Some(b't' | b'f') => Self::Bool,
            Some(b'n') => Self::Null,
            _ => Self::Number,
        }
    }
}

/// The members of one JSON object, in their order, values unparsed.
pub(super) type Entries<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

pub(super) fn entries(raw: &RawValue) -> Result<Entries<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_map(EntriesVisitor)
}

pub(super) fn elements(raw: &RawValue) -> Result<Vec<&RawValue>, serde_json::Error> {
    serde_json::from_str(raw.get())
}

/// A JSON string's value, borrowed when it has no escapes.
pub(super) fn string(raw: &RawValue) -> Result<Cow<'_, str>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_str(StrVisitor)
}

/// An integer as Go's encoding/json writes one (decimal, no fraction or
/// exponent); anything else is not an integer Go would have decoded into an
/// int field.
pub(super) fn integer(raw: &RawValue) -> Option<i64> {
    let text = raw.get();
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

pub(super) fn boolean(raw: &RawValue) -> Option<bool> {
    match raw.get() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Entries<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value: &'de RawValue = map.next_value()?;
            out.push((key, value));
        }
        Ok(out)
    }
}

struct KeySeed;

impl<'de> de::DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_str(StrVisitor)
    }
}

struct StrVisitor;

impl<'de> Visitor<'de> for StrVisitor {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> &RawValue {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn entries_keep_order_raw_text_and_unescape_keys() {
        let v = raw(r#"{"b":{"x": 1},"a\u0026":[1,2]}"#);
        let e = entries(v).unwrap();
        assert_eq!(e[0].0, "b");
        assert_eq!(e[0].1.get(), r#"{"x": 1}"#);
        assert_eq!(e[1].0, "a&");
        assert_eq!(e[1].1.get(), "[1,2]");
    }

    #[test]
    fn integers_are_only_what_go_writes_for_int_fields() {
        assert_eq!(integer(raw("-12")), Some(-12));
        assert_eq!(integer(raw("1.0")), None);
        assert_eq!(integer(raw("1e3")), None);
        assert_eq!(integer(raw("99999999999999999999")), None);
    }
}
