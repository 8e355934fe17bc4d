//! One message from its JSON, following the table.
//!
//! The rules are those of gogo-protobuf's generated `MarshalToSizedBuffer`
//! in k8s.io/api and k8s.io/apimachinery (generated.pb.go):
//! - fields in ascending number order;
//! - a non-pointer string, bool, int32 or int64 is always written, its zero
//!   value too (`0A 00` for an empty string at field 1);
//! - a non-pointer embedded message is always written, with length 0 when it
//!   has nothing to say; absent from the JSON it is the zero struct, whose
//!   own non-pointer fields are written in turn;
//! - a pointer is written only when non-nil, that is present and not null in
//!   the JSON (encoding/json decodes null into a nil pointer);
//! - a `[]byte` is written when non-nil: present and not null, `""` included;
//!   absent under `omitempty` it may have been either, so it is refused;
//!   so is a named slice with a message of its own (a "wrapper" such as
//!   APIResource.verbs), except as a map value, which is always written;
//! - a repeated field writes one key per element (proto2: never packed) and
//!   nothing when empty;
//! - a map writes one entry message `{1: key, 2: value}` per key in
//!   `sort.Strings` order; the value is always written, except a nil
//!   `[]byte` (JSON null);
//! - a field inline in JSON (`json:",inline"`, e.g. Volume's VolumeSource)
//!   is still a message field of its own in protobuf, built from the keys
//!   of the enclosing JSON object;
//! - TypeMeta is left out: the envelope carries apiVersion and kind.

use std::fmt;

use serde_json::value::RawValue;

use super::Unplaceable;
use super::json::{self, Entries, JsonKind};
use super::schema::{MsgId, Scalar, Schema, Shape};
use super::special;
use super::wire::{VARINT, begin_len, end_len, put_bytes, put_key, put_varint};

/// Where in the object a value sits, for error messages; rendered only
/// when something fails.
#[derive(Clone, Copy)]
pub(super) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

fn path_text(path: &Path) -> String {
    let s = path.to_string();
    if s.is_empty() { ".".to_owned() } else { s }
}

fn bad_value(path: &Path, expected: &'static str, raw: &RawValue) -> Unplaceable {
    Unplaceable::BadValue { path: path_text(path), expected, found: special::shorten(raw.get()) }
}

impl special::BadSpecial {
    fn at(self, path: &Path) -> Unplaceable {
        Unplaceable::BadValue { path: path_text(path), expected: self.expected, found: self.found }
    }
}

fn not_json(path: &Path, source: serde_json::Error) -> Unplaceable {
    Unplaceable::Json { path: path_text(path), source }
}

/// What each step returns: the bytes go into `out`.
type Done = Result<(), Unplaceable>;

pub(super) struct Encoder<'s> {
    pub schema: &'s Schema,
}

impl Encoder<'_> {
    /// The body of message `id` from its JSON value.
    pub(super) fn message(&self, id: MsgId, raw: &RawValue, path: &Path, out: &mut Vec<u8>) -> Done {
        let m = &self.schema.messages[id];
        if m.wrapper {
            // `message ExtraValue { repeated string items = 1; }`, JSON a bare array.
            let field = &m.fields[0];
            let Shape::Repeated(scalar) = field.shape else { unreachable!("wrapper fields are repeated") };
            return self.repeated(field.number, scalar, raw, path, out);
        }
        if JsonKind::of(raw) != JsonKind::Object {
            return Err(bad_value(path, "an object", raw));
        }
        let entries = json::entries(raw).map_err(|e| not_json(path, e))?;
        self.entries(id, &entries, path, out)
    }

    /// The body of message `id` from an object's members.
    pub(super) fn entries(&self, id: MsgId, entries: &Entries, path: &Path, out: &mut Vec<u8>) -> Done {
        let m = &self.schema.messages[id];
        if let Some((key, _)) = entries.iter().find(|(k, _)| !m.keys.contains(k.as_ref())) {
            return Err(Unplaceable::UnknownKey {
                path: path_text(path),
                key: key.to_string(),
                message: m.name.clone(),
            });
        }
        self.fields(id, entries, path, out)
    }

    fn fields(&self, id: MsgId, entries: &Entries, path: &Path, out: &mut Vec<u8>) -> Done {
        for f in &self.schema.messages[id].fields {
            if f.inline {
                let Shape::Single(Scalar::Message(sub)) = f.shape else { unreachable!("checked when the table loads") };
                let start = begin_len(out, f.number);
                self.fields(sub, entries, path, out)?;
                end_len(out, start);
                continue;
            }
            // encoding/json lets the last of repeated keys win.
            let value = entries.iter().rev().find(|(k, _)| *k == f.json_name).map(|(_, v)| *v);
            let present = value.filter(|v| JsonKind::of(v) != JsonKind::Null);
            let path = Path::Key(path, &f.json_name);
            if value.is_none() && f.omitempty && f.shape == Shape::Single(Scalar::Bytes) {
                // Absent: nil (Go writes nothing) or empty (Go writes the
                // field with length 0); the JSON cannot say which.
                return Err(Unplaceable::AmbiguousEmptyBytes { path: path_text(&path) });
            }
            match (f.shape, present) {
                (Shape::Single(scalar), Some(v)) => self.single(f.number, scalar, v, &path, out)?,
                (Shape::Single(_), None) if f.ptr => {}
                // A wrapper is a Go slice: a nil one is not written
                // (`if m.Verbs != nil`), as a pointer.
                (Shape::Single(Scalar::Message(id)), None) if self.schema.messages[id].wrapper => {}
                (Shape::Single(scalar), None) => self.zero(f.number, scalar, &path, out)?,
                (Shape::Repeated(scalar), Some(v)) => self.repeated(f.number, scalar, v, &path, out)?,
                (Shape::Map(scalar), Some(v)) => self.map(f.number, scalar, v, &path, out)?,
                (Shape::Repeated(_) | Shape::Map(_), None) => {}
            }
        }
        Ok(())
    }

    /// A present, non-null value with its key.
    fn single(&self, number: u32, scalar: Scalar, v: &RawValue, path: &Path, out: &mut Vec<u8>) -> Done {
        match scalar {
            Scalar::String => {
                let s = match JsonKind::of(v) {
                    JsonKind::String => json::string(v).map_err(|e| not_json(path, e))?,
                    _ => return Err(bad_value(path, "a string", v)),
                };
                put_bytes(out, number, s.as_bytes());
            }
            Scalar::Bool => {
                let b = json::boolean(v).ok_or_else(|| bad_value(path, "a boolean", v))?;
                put_key(out, number, VARINT);
                put_varint(out, u64::from(b));
            }
            Scalar::Int32 => {
                let i = json::integer(v)
                    .and_then(|i| i32::try_from(i).ok())
                    .ok_or_else(|| bad_value(path, "an int32", v))?;
                put_key(out, number, VARINT);
                put_varint(out, i64::from(i) as u64);
            }
            Scalar::Int64 => {
                let i = json::integer(v).ok_or_else(|| bad_value(path, "an int64", v))?;
                put_key(out, number, VARINT);
                put_varint(out, i as u64);
            }
            Scalar::Bytes => {
                let bytes = special::base64_bytes(v).map_err(|b| b.at(path))?;
                put_bytes(out, number, &bytes);
            }
            Scalar::Message(id) => {
                let start = begin_len(out, number);
                self.message(id, v, path, out)?;
                end_len(out, start);
            }
            Scalar::Special(sp) => {
                let start = begin_len(out, number);
                special::encode(sp, v, out).map_err(|b| b.at(path))?;
                end_len(out, start);
            }
        }
        Ok(())
    }

    /// What Go writes for the zero value of a non-pointer field.
    fn zero(&self, number: u32, scalar: Scalar, path: &Path, out: &mut Vec<u8>) -> Done {
        match scalar {
            Scalar::String => put_bytes(out, number, b""),
            Scalar::Bool | Scalar::Int32 | Scalar::Int64 => {
                put_key(out, number, VARINT);
                put_varint(out, 0);
            }
            // A nil []byte is not written.
            Scalar::Bytes => {}
            Scalar::Message(id) => {
                let start = begin_len(out, number);
                if !self.schema.messages[id].wrapper {
                    self.fields(id, &Vec::new(), path, out)?;
                }
                end_len(out, start);
            }
            Scalar::Special(sp) => {
                let start = begin_len(out, number);
                special::zero(sp, out).map_err(|b| b.at(path))?;
                end_len(out, start);
            }
        }
        Ok(())
    }

    /// An element of a repeated field or a map value: null is the zero value
    /// (as encoding/json decodes it), a nil []byte again being left out.
    fn element(&self, number: u32, scalar: Scalar, v: &RawValue, path: &Path, out: &mut Vec<u8>) -> Done {
        if JsonKind::of(v) == JsonKind::Null {
            self.zero(number, scalar, path, out)
        } else {
            self.single(number, scalar, v, path, out)
        }
    }

    fn repeated(&self, number: u32, scalar: Scalar, v: &RawValue, path: &Path, out: &mut Vec<u8>) -> Done {
        if JsonKind::of(v) != JsonKind::Array {
            return Err(bad_value(path, "an array", v));
        }
        let elements = json::elements(v).map_err(|e| not_json(path, e))?;
        for (i, e) in elements.into_iter().enumerate() {
            self.element(number, scalar, e, &Path::Index(path, i), out)?;
        }
        Ok(())
    }

    fn map(&self, number: u32, scalar: Scalar, v: &RawValue, path: &Path, out: &mut Vec<u8>) -> Done {
        if JsonKind::of(v) != JsonKind::Object {
            return Err(bad_value(path, "an object", v));
        }
        let mut entries = json::entries(v).map_err(|e| not_json(path, e))?;
        // sort.Strings: byte order, which is str's order. A repeated key
        // keeps its last value, as a Go map would.
        entries.reverse();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.dedup_by(|later, earlier| later.0 == earlier.0);
        for (key, value) in &entries {
            let start = begin_len(out, number);
            put_bytes(out, 1, key.as_bytes());
            self.element(2, scalar, value, &Path::Key(path, key), out)?;
            end_len(out, start);
        }
        Ok(())
    }
}
