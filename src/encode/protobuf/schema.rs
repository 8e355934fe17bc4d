//! The table of protobuf messages, loaded once from `schema.txt`.
//!
//! `schema.txt` is generated from the Go types of every supported minor by
//! `integration/cmd/protoschema` and merged by
//! `integration/scripts/protobuf-union.py` (its header says how); nothing
//! here is written by hand. Its line format is documented there and in
//! docs/protobuf.md. A `kind` or `field` line that only some minors have
//! ends in `minors=1.35,1.36`: each minor's view ([`Schema::for_minor`])
//! leaves out what that minor lacks, and keeps every message, so a
//! [`MsgId`] means the same message in every view.

use crate::encode::minor;
use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

/// The generated table, compiled into the binary.
const TABLE: &str = include_str!("schema.txt");

/// Index of a message in [`Schema::messages`].
pub(super) type MsgId = usize;

/// A type with a protobuf form written by hand in apimachinery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Special {
    Time,
    MicroTime,
    Duration,
    IntOrString,
    Quantity,
    RawExtension,
    FieldsV1,
    Unknown,
}

/// One element type: what a field holds, or what a repeated field or map
/// holds one of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalar {
    String,
    Bool,
    Int32,
    Int64,
    /// A Go `[]byte`: base64 in JSON.
    Bytes,
    Message(MsgId),
    Special(Special),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Single(Scalar),
    Repeated(Scalar),
    /// String keys, written in sorted order.
    Map(Scalar),
}

#[derive(Debug, PartialEq, Eq)]
pub(super) struct Field {
    pub number: u32,
    /// Empty for an inline field: its members sit in the parent's JSON.
    pub json_name: String,
    pub shape: Shape,
    /// A Go pointer: written only when present (non-null) in the JSON.
    pub ptr: bool,
    pub inline: bool,
    /// `json:",omitempty"`: JSON leaves the field out when it is empty. For
    /// a `[]byte` that hides whether it was nil or empty (see
    /// [`super::Unplaceable::AmbiguousEmptyBytes`]).
    pub omitempty: bool,
}

#[derive(Debug)]
pub(super) struct Message {
    pub name: String,
    /// A named slice carried as `message { repeated items = 1; }` whose JSON
    /// is the bare array.
    pub wrapper: bool,
    /// Embeds TypeMeta: `apiVersion` and `kind` may stand in its JSON and
    /// have no field of their own.
    pub typemeta: bool,
    /// Ascending field numbers: the order Go writes them in.
    pub fields: Vec<Field>,
    /// Every JSON key the message can place, its inline members' included.
    pub keys: HashSet<String>,
}

#[derive(Debug)]
pub(super) struct Schema {
    pub messages: Vec<Message>,
    kinds: HashMap<(String, String), MsgId>,
    #[cfg_attr(not(test), allow(dead_code))]
    by_name: HashMap<String, MsgId>,
}

impl Schema {
    /// The table as the upstream's minor has it ([`minor::served`]).
    pub(super) fn get() -> &'static Schema {
        Self::for_minor(minor::served())
    }

    /// The table as `minor` (one of [`minor::SUPPORTED`]) has it, parsed on
    /// first use. A table that does not parse is a build defect (it is
    /// generated and checked in CI), hence the panic.
    pub(super) fn for_minor(minor: u8) -> &'static Schema {
        static VIEWS: minor::PerMinor<Schema> = minor::PerMinor::new();
        VIEWS.get(minor, |minor| {
            Schema::parse(TABLE, minor).unwrap_or_else(|e| panic!("src/encode/protobuf/schema.txt: {e}"))
        })
    }

    /// Whether `ty`'s objects are written alike in minors `a` and `b`:
    /// neither the message nor any message it holds, however deep, has a
    /// field (or a field's shape or flags) the other minor's lacks. Worked
    /// out once per pair of minors, for every message at once.
    pub(super) fn same_form(a: u8, b: u8, ty: MsgId) -> bool {
        if a == b {
            return true;
        }
        static DIFFERS: [[OnceLock<Vec<bool>>; minor::SUPPORTED.len()]; minor::SUPPORTED.len()] =
            [const { [const { OnceLock::new() }; minor::SUPPORTED.len()] }; minor::SUPPORTED.len()];
        let index = |m: u8| minor::SUPPORTED.iter().position(|s| *s == m);
        let (Some(i), Some(j)) = (index(a.min(b)), index(a.max(b))) else { return false };
        let differs = DIFFERS[i][j].get_or_init(|| differing_messages(Self::for_minor(a), Self::for_minor(b)));
        !differs[ty]
    }

    pub(super) fn kind(&self, api_version: &str, kind: &str) -> Option<MsgId> {
        self.kinds.get(&(api_version.to_owned(), kind.to_owned())).copied()
    }

    #[cfg(test)]
    pub(super) fn message_named(&self, name: &str) -> Option<MsgId> {
        self.by_name.get(name).copied()
    }

    /// Every (apiVersion, kind) the table knows.
    pub(super) fn kinds(&self) -> impl Iterator<Item = (&str, &str)> {
        self.kinds.keys().map(|(v, k)| (v.as_str(), k.as_str()))
    }

    fn parse(text: &str, minor: u8) -> Result<Schema, String> {
        let minors = table_minors(text)?;
        if !minors.contains(&minor) {
            return Err(format!("the table has no minor 1.{minor} (it has {minors:?})"));
        }
        // First pass: message names, so fields can refer forward.
        let mut by_name = HashMap::new();
        let mut messages = Vec::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            if words.next() == Some("message") {
                let name = words.next().ok_or("message without a name")?.to_owned();
                let flags: Vec<&str> = words.collect();
                by_name.insert(name.clone(), messages.len());
                messages.push(Message {
                    name,
                    wrapper: flags.contains(&"wrapper"),
                    typemeta: flags.contains(&"typemeta"),
                    fields: Vec::new(),
                    keys: HashSet::new(),
                });
            }
        }
        let mut kinds = HashMap::new();
        let mut current: Option<MsgId> = None;
        for (n, line) in text.lines().enumerate() {
            let err = |what: &str| format!("line {}: {what}: {line}", n + 1);
            let mut words: Vec<&str> = line.split_whitespace().collect();
            if let Some(only) = words.last().and_then(|w| w.strip_prefix("minors=")) {
                if !minor::names_minor(only, minor) {
                    // Another minor's kind or field: this minor's view lacks it.
                    continue;
                }
                words.pop();
            }
            match words.first().copied() {
                None => {}
                Some(w) if w.starts_with('#') => {}
                Some("kind") => {
                    let [_, api_version, kind, ty] = words[..] else { return Err(err("bad kind line")) };
                    let id = *by_name.get(ty).ok_or_else(|| err("unknown type"))?;
                    kinds.insert((api_version.to_owned(), kind.to_owned()), id);
                }
                Some("message") => current = by_name.get(words[1]).copied(),
                Some("field") => {
                    let id = current.ok_or_else(|| err("field outside a message"))?;
                    if words.len() < 4 {
                        return Err(err("short field line"));
                    }
                    let number = words[1].parse().map_err(|_| err("bad field number"))?;
                    let flags = &words[4..];
                    let inline = flags.contains(&"inline");
                    let shape = parse_shape(words[3], &by_name).ok_or_else(|| err("unknown shape"))?;
                    messages[id].fields.push(Field {
                        number,
                        json_name: if inline { String::new() } else { words[2].to_owned() },
                        shape,
                        ptr: flags.contains(&"ptr"),
                        inline,
                        omitempty: flags.contains(&"omitempty"),
                    });
                }
                Some(_) => return Err(err("unknown line")),
            }
        }
        for m in &mut messages {
            m.fields.sort_by_key(|f| f.number);
        }
        for id in 0..messages.len() {
            let keys = placeable_keys(&messages, id, 0)?;
            messages[id].keys = keys;
        }
        Ok(Schema { messages, kinds, by_name })
    }
}

/// For each message, whether its form differs between two views of the
/// table: its own fields or flags, or those of a message it holds. Every
/// view keeps every message, so ids match; message graphs have cycles
/// (JSONSchemaProps holds itself), hence the propagation to a fixed point.
fn differing_messages(a: &Schema, b: &Schema) -> Vec<bool> {
    let mut differs: Vec<bool> = a
        .messages
        .iter()
        .zip(&b.messages)
        .map(|(x, y)| x.wrapper != y.wrapper || x.typemeta != y.typemeta || x.fields != y.fields)
        .collect();
    let held = |field: &Field| match field.shape {
        Shape::Single(Scalar::Message(id)) | Shape::Repeated(Scalar::Message(id)) | Shape::Map(Scalar::Message(id)) => {
            Some(id)
        }
        _ => None,
    };
    loop {
        let mut changed = false;
        for (id, message) in a.messages.iter().enumerate() {
            if !differs[id] && message.fields.iter().filter_map(held).any(|h| differs[h]) {
                differs[id] = true;
                changed = true;
            }
        }
        if !changed {
            return differs;
        }
    }
}

/// The minors the table covers (its `# Minors: 1.34 1.35 ...` line).
fn table_minors(text: &str) -> Result<Vec<u8>, String> {
    let line = text.lines().find_map(|l| l.strip_prefix("# Minors: ")).ok_or("no '# Minors:' line")?;
    line.split_whitespace().map(|m| parse_minor(m).ok_or_else(|| format!("bad minor {m:?}"))).collect()
}

fn parse_minor(text: &str) -> Option<u8> {
    text.strip_prefix("1.")?.parse().ok()
}

fn parse_shape(text: &str, by_name: &HashMap<String, MsgId>) -> Option<Shape> {
    if let Some(inner) = text.strip_prefix("[]") {
        return Some(Shape::Repeated(parse_scalar(inner, by_name)?));
    }
    if let Some(inner) = text.strip_prefix("map:") {
        return Some(Shape::Map(parse_scalar(inner, by_name)?));
    }
    Some(Shape::Single(parse_scalar(text, by_name)?))
}

fn parse_scalar(text: &str, by_name: &HashMap<String, MsgId>) -> Option<Scalar> {
    Some(match text {
        "string" => Scalar::String,
        "bool" => Scalar::Bool,
        "int32" => Scalar::Int32,
        "int64" => Scalar::Int64,
        "bytes" => Scalar::Bytes,
        _ => {
            if let Some(name) = text.strip_prefix("msg:") {
                Scalar::Message(*by_name.get(name)?)
            } else {
                Scalar::Special(match text.strip_prefix("special:")? {
                    "Time" => Special::Time,
                    "MicroTime" => Special::MicroTime,
                    "Duration" => Special::Duration,
                    "IntOrString" => Special::IntOrString,
                    "Quantity" => Special::Quantity,
                    "RawExtension" => Special::RawExtension,
                    "FieldsV1" => Special::FieldsV1,
                    "Unknown" => Special::Unknown,
                    _ => return None,
                })
            }
        }
    })
}

/// The JSON keys a message places, following inline members.
fn placeable_keys(messages: &[Message], id: MsgId, depth: usize) -> Result<HashSet<String>, String> {
    if depth > 8 {
        return Err(format!("inline members of {} nest too deep", messages[id].name));
    }
    let m = &messages[id];
    let mut keys = HashSet::new();
    if m.typemeta {
        keys.insert("apiVersion".to_owned());
        keys.insert("kind".to_owned());
    }
    for f in &m.fields {
        if f.inline {
            let Shape::Single(Scalar::Message(sub)) = f.shape else {
                return Err(format!("{}: inline field {} is not a message", m.name, f.number));
            };
            for k in placeable_keys(messages, sub, depth + 1)? {
                if !keys.insert(k.clone()) {
                    return Err(format!("{}: JSON key {k} placed twice", m.name));
                }
            }
        } else if !keys.insert(f.json_name.clone()) {
            return Err(format!("{}: JSON key {} placed twice", m.name, f.json_name));
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_table_parses_and_knows_the_core_kinds() {
        let s = Schema::get();
        let pod = s.kind("v1", "Pod").expect("Pod");
        assert!(s.messages[pod].typemeta);
        assert_eq!(
            s.messages[pod].fields.iter().map(|f| f.json_name.as_str()).collect::<Vec<_>>(),
            ["metadata", "spec", "status"]
        );
        assert!(s.kind("meta.k8s.io/v1", "PartialObjectMetadata").is_some());
        assert!(s.kind("v1", "Status").is_some());
        let volume = s.message_named("core/v1.Volume").unwrap();
        assert!(s.messages[volume].keys.contains("configMap"), "inline VolumeSource keys are placeable");
    }

    #[test]
    fn each_minor_s_view_has_its_own_fields_and_kinds_and_the_same_messages() {
        let text = "# Minors: 1.34 1.35\n\
            kind v1 Thing core/v1.Thing\n\
            kind v1 NewThing core/v1.Thing minors=1.35\n\
            message core/v1.Thing typemeta\n\
            \x20 field 1 a string\n\
            \x20 field 2 gone string minors=1.34\n\
            message core/v1.Other\n";
        let old = Schema::parse(text, 34).unwrap();
        let new = Schema::parse(text, 35).unwrap();
        let thing = old.kind("v1", "Thing").unwrap();
        assert_eq!(new.kind("v1", "Thing"), Some(thing), "a message is the same MsgId in every view");
        assert_eq!((old.kind("v1", "NewThing"), new.kind("v1", "NewThing")), (None, Some(thing)));
        let names = |s: &Schema| s.messages[thing].fields.iter().map(|f| f.json_name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&old), ["a", "gone"]);
        assert_eq!(names(&new), ["a"]);
        assert_eq!(old.messages.len(), new.messages.len());
        assert!(Schema::parse(text, 36).is_err(), "a minor the table does not cover");
    }

    #[test]
    fn a_message_differs_between_minors_when_it_or_anything_it_holds_does() {
        let text = "# Minors: 1.34 1.35\n\
            message core/v1.Holder\n\
            \x20 field 1 thing msg:core/v1.Thing\n\
            message core/v1.Thing\n\
            \x20 field 1 a string\n\
            \x20 field 2 gone string minors=1.34\n\
            message core/v1.Loop\n\
            \x20 field 1 next msg:core/v1.Loop\n\
            \x20 field 2 holder []msg:core/v1.Holder\n\
            message core/v1.Alone\n\
            \x20 field 1 self msg:core/v1.Alone\n";
        let (old, new) = (Schema::parse(text, 34).unwrap(), Schema::parse(text, 35).unwrap());
        let differs = differing_messages(&old, &new);
        let id = |name: &str| old.message_named(name).unwrap();
        assert!(differs[id("core/v1.Thing")], "a field one minor lacks");
        assert!(differs[id("core/v1.Holder")], "holds a message that differs");
        assert!(differs[id("core/v1.Loop")], "through a cycle and a repeated field");
        assert!(!differs[id("core/v1.Alone")], "a cycle of its own, alike in both");
    }

    #[test]
    fn the_committed_table_tells_kinds_alike_across_minors_from_kinds_that_changed() {
        let s = Schema::for_minor(minor::PINNED);
        let config_map = s.kind("v1", "ConfigMap").unwrap();
        for a in minor::SUPPORTED {
            assert!(Schema::same_form(a, a, config_map));
            assert!(Schema::same_form(a, minor::PINNED, config_map), "ConfigMap has not changed since 1.{a}");
        }
        let pod = s.kind("v1", "Pod").unwrap();
        assert!(!Schema::same_form(34, minor::PINNED, pod), "PodSpec gained fields after 1.34");
        assert!(!Schema::same_form(34, 99, pod), "an unsupported minor is never alike");
    }

    #[test]
    fn every_supported_minor_has_a_view_of_the_committed_table() {
        for minor in minor::SUPPORTED {
            let s = Schema::for_minor(minor);
            assert!(s.kind("v1", "Pod").is_some(), "1.{minor}");
            assert_eq!(s.messages.len(), Schema::for_minor(minor::PINNED).messages.len());
        }
    }
}
