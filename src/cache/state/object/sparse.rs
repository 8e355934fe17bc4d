//! An object's JSON read down to the paths the cache looks at.
//!
//! Decoding an event needs an object's metadata (name, namespace, version,
//! uid, labels) and a handful of selectable fields; the rest of it (for a pod
//! the containers, volumes and conditions, most of its kilobyte) is kept as
//! the bytes it came in. Parsing all of it into a `serde_json::Value` built
//! and dropped a map per JSON object and a string per key and value: a third
//! of the cache's reflector time at the ingest ceiling. [`Paths::read`]
//! reads the same bytes once, checking all of them as JSON, and keeps only
//! the kept paths' values (each whole) and, on the way to them, which keys
//! were there; the rest is skipped without allocating.
//!
//! Every lookup at or below a kept path answers as on the whole tree: a
//! value on the way that is not a JSON object has no keys, as a string or an
//! array has none; a key given twice keeps its last value, as `serde_json`
//! (and Go's decoder) do.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::selector::selectable::Lookup;

/// The paths to keep, as a tree of object keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Paths {
    /// Keep the value here whole.
    whole: bool,
    /// The keys to follow here (a few: a linear search beats hashing).
    children: Vec<(Box<str>, Paths)>,
}

impl Paths {
    /// The tree keeping each of `paths` whole.
    pub(crate) fn of<P: AsRef<[S]>, S: AsRef<str>>(paths: impl IntoIterator<Item = P>) -> Self {
        let mut tree = Self::default();
        for path in paths {
            tree.keep(path.as_ref());
        }
        tree
    }

    fn keep<S: AsRef<str>>(&mut self, path: &[S]) {
        let mut node = self;
        for key in path {
            if node.whole {
                return;
            }
            let key = key.as_ref();
            let at = match node.child(key) {
                Some(at) => at,
                None => {
                    node.children.push((key.into(), Paths::default()));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[at].1;
        }
        node.whole = true;
        node.children.clear();
    }

    fn child(&self, key: &str) -> Option<usize> {
        self.children.iter().position(|(k, _)| &**k == key)
    }

    /// The kept parts of `json`, or the error reading it whole would give
    /// (it is all read and checked).
    pub(crate) fn read(&self, json: &str) -> serde_json::Result<Sparse<'_>> {
        let mut reader = serde_json::Deserializer::from_str(json);
        let root = Pruned(self).deserialize(&mut reader)?;
        reader.end()?;
        // serde_json skips a string without pairing its escaped surrogates,
        // which it refuses when it reads the string: an object with any is
        // read whole for the answer (the API server writes none).
        if escapes_a_surrogate(json) {
            serde_json::from_str::<Value>(json)?;
        }
        Ok(Sparse { paths: self, root })
    }
}

/// Whether `json` holds a `\uD800`-`\uDFFF` escape (or text that looks
/// like one inside a string, `\\ud800`: a false alarm costs a second read).
fn escapes_a_surrogate(json: &str) -> bool {
    let bytes = json.as_bytes();
    memchr::memmem::find_iter(bytes, b"\\u").any(|at| {
        matches!(bytes.get(at + 2), Some(b'd' | b'D'))
            && matches!(bytes.get(at + 3), Some(b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F'))
    })
}

/// The kept parts of one object.
#[derive(Debug)]
pub(crate) struct Sparse<'p> {
    paths: &'p Paths,
    root: Kept,
}

#[derive(Debug)]
enum Kept {
    /// A kept path's value, whole.
    Whole(Value),
    /// A JSON object on the way to kept paths: the kept keys found in it,
    /// by their place in [`Paths::children`].
    Object(Vec<(usize, Kept)>),
    /// Anything else on the way: it has no keys.
    Other,
}

impl Sparse<'_> {
    /// Whether the object read is a JSON object.
    pub(crate) fn is_object(&self) -> bool {
        matches!(self.root, Kept::Object(_) | Kept::Whole(Value::Object(_)))
    }

    /// The value at a kept `path`, moved out: later lookups find nothing
    /// there.
    pub(crate) fn take(&mut self, path: &[&str]) -> Option<Value> {
        let (mut paths, mut kept) = (self.paths, &mut self.root);
        for key in path {
            let Kept::Object(found) = kept else { return None };
            let at = paths.child(key)?;
            kept = &mut found.iter_mut().find(|(i, _)| *i == at)?.1;
            paths = &paths.children[at].1;
        }
        match std::mem::replace(kept, Kept::Other) {
            Kept::Whole(value) => Some(value),
            other => {
                *kept = other;
                None
            }
        }
    }

    /// The kept parts as a `serde_json` tree, on-the-way values other than
    /// objects as `null`.
    #[cfg(test)]
    fn to_value(&self) -> Value {
        fn tree(paths: &Paths, kept: &Kept) -> Value {
            match kept {
                Kept::Whole(value) => value.clone(),
                Kept::Object(found) => Value::Object(
                    found
                        .iter()
                        .map(|(at, kept)| (paths.children[*at].0.to_string(), tree(&paths.children[*at].1, kept)))
                        .collect(),
                ),
                Kept::Other => Value::Null,
            }
        }
        tree(self.paths, &self.root)
    }
}

impl Lookup for Sparse<'_> {
    /// Answers at or below a kept path (what `extract` asks for); above
    /// one, nothing.
    fn at(&self, path: &[&str]) -> Option<&Value> {
        let (mut paths, mut kept) = (self.paths, &self.root);
        for (depth, key) in path.iter().enumerate() {
            match kept {
                Kept::Whole(value) => return value.at(&path[depth..]),
                Kept::Object(found) => {
                    let at = paths.child(key)?;
                    kept = &found.iter().find(|(i, _)| *i == at)?.1;
                    paths = &paths.children[at].1;
                }
                Kept::Other => return None,
            }
        }
        match kept {
            Kept::Whole(value) => Some(value),
            Kept::Object(_) | Kept::Other => None,
        }
    }
}

/// Reads one value, keeping what `0` says.
struct Pruned<'p>(&'p Paths);

impl<'de> DeserializeSeed<'de> for Pruned<'_> {
    type Value = Kept;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Kept, D::Error> {
        if self.0.whole { Value::deserialize(reader).map(Kept::Whole) } else { reader.deserialize_any(self) }
    }
}

impl<'de> Visitor<'de> for Pruned<'_> {
    type Value = Kept;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept, A::Error> {
        let mut found: Vec<(usize, Kept)> = Vec::new();
        while let Some(child) = map.next_key_seed(Child(self.0))? {
            match child {
                Some(at) => {
                    let value = map.next_value_seed(Pruned(&self.0.children[at].1))?;
                    match found.iter_mut().find(|(i, _)| *i == at) {
                        Some(again) => again.1 = value,
                        None => found.push((at, value)),
                    }
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Kept::Object(found))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Kept::Other)
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Kept, E> {
        Ok(Kept::Other)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Kept, E> {
        Ok(Kept::Other)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Kept, E> {
        Ok(Kept::Other)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Kept, E> {
        Ok(Kept::Other)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Kept, E> {
        Ok(Kept::Other)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kept, E> {
        Ok(Kept::Other)
    }
}

/// Reads a key without allocating it: the place of the kept child it
/// names, if any.
struct Child<'p>(&'p Paths);

impl<'de> DeserializeSeed<'de> for Child<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Option<usize>, D::Error> {
        reader.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Child<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.child(key))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::selector::selectable::{self, KINDS};

    fn pod_paths() -> Paths {
        Paths::of([&["metadata", "name"][..], &["metadata", "labels"], &["spec", "nodeName"], &["status", "podIPs"]])
    }

    #[test]
    fn keeps_the_paths_whole_and_the_objects_on_the_way() {
        let json = r#"{"kind":"Pod","metadata":{"name":"a","uid":"u","labels":{"x":"1","y":{"z":[1]}}},
            "spec":{"containers":[{"name":"c"}],"nodeName":"n1","hostNetwork":true},
            "status":{"podIPs":[{"ip":"10.0.0.1"}],"phase":"Running"}}"#;
        assert_eq!(
            pod_paths().read(json).unwrap().to_value(),
            json!({"metadata":{"name":"a","labels":{"x":"1","y":{"z":[1]}}},
                "spec":{"nodeName":"n1"},"status":{"podIPs":[{"ip":"10.0.0.1"}]}})
        );
    }

    #[test]
    fn a_non_object_on_the_way_has_no_keys_and_the_last_of_a_repeated_key_wins() {
        let read = |json: &str| pod_paths().read(json).unwrap().to_value();
        assert_eq!(read(r#"{"spec":"n1","status":[{"podIPs":1}]}"#), json!({"spec":null,"status":null}));
        assert_eq!(read(r#"{"spec":{"nodeName":"a"},"spec":{"nodeName":"b"}}"#), json!({"spec":{"nodeName":"b"}}));
        assert_eq!(read(r#"{"spec":{"nodeName":"a"},"spec":7}"#), json!({"spec":null}));
        assert_eq!(read("[1]"), Value::Null);
        assert_eq!(read(r#""x""#), Value::Null);
    }

    #[test]
    fn lookups_answer_at_kept_paths_and_a_taken_value_is_there_no_more() {
        let json = r#"{"metadata":{"name":"a","labels":{"x":"1"}},"spec":{"nodeName":"n"}}"#;
        let paths = pod_paths();
        let mut sparse = paths.read(json).unwrap();
        assert!(sparse.is_object());
        assert_eq!(sparse.at(&["metadata", "labels", "x"]), Some(&json!("1")));
        assert_eq!(sparse.at(&["spec"]), None, "above a kept path");
        assert_eq!(sparse.at(&["spec", "nodeName", "x"]), None);
        assert_eq!(sparse.at(&["status", "podIPs"]), None, "kept but absent");
        assert_eq!(sparse.take(&["metadata", "name"]), Some(json!("a")));
        assert_eq!(sparse.at(&["metadata", "name"]), None);
        assert_eq!(sparse.take(&["metadata", "name"]), None);
        assert_eq!(sparse.take(&["metadata"]), None, "not a kept path: nothing moves");
        assert_eq!(sparse.at(&["metadata", "labels", "x"]), Some(&json!("1")));
        assert!(!paths.read("[]").unwrap().is_object());
    }

    #[test]
    fn escaped_keys_are_matched_by_what_they_spell() {
        let json = r#"{"sp\u0065c":{"node\u004eame":"n\"1"}}"#;
        assert_eq!(pod_paths().read(json).unwrap().to_value(), json!({"spec":{"nodeName":"n\"1"}}));
    }

    #[test]
    fn what_reading_it_whole_refuses_is_refused_in_the_skipped_parts_too() {
        for bad in [
            r#"{"spec":{"containers":[1,]}}"#,
            r#"{"spec":{"containers":"\x"}}"#,
            r#"{"spec":{"containers":"\ud800"}} "#,
            r#"{"spec":{}} trailing"#,
            r#"{"spec":{"a":1}"#,
            r#"{"spec":{"a":01}}"#,
            "{\"spec\":{\"a\":\"\u{1}\"}}",
        ] {
            let whole = serde_json::from_str::<Value>(bad);
            let sparse = pod_paths().read(bad).is_err();
            assert_eq!(sparse, whole.is_err(), "{bad}");
        }
    }

    /// A JSON value at most `depth` objects deep, whose keys are drawn from
    /// `keys` so that the kept paths are often present, often not, and
    /// sometimes something other than an object on the way.
    fn value(keys: &'static [&'static str], depth: u32) -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z0-9.]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(depth, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                prop::collection::vec((prop::sample::select(keys), inner), 0..6)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    const KEYS: &[&str] = &[
        "metadata",
        "name",
        "namespace",
        "labels",
        "spec",
        "status",
        "nodeName",
        "podIPs",
        "ip",
        "podIP",
        "hostNetwork",
        "restartPolicy",
        "serviceAccount",
        "serviceAccountName",
        "phase",
        "type",
        "involvedObject",
        "regarding",
        "reason",
        "source",
        "component",
        "replicas",
        "succeeded",
        "signerName",
        "pool",
        "driver",
        "unschedulable",
        "a",
        "b.c",
    ];

    proptest! {
        /// For every built-in kind (and a custom resource), the fields
        /// extracted from the sparse tree are those of the whole one.
        #[test]
        fn selectable_fields_read_alike_from_the_sparse_tree(object in value(KEYS, 4)) {
            let text = object.to_string();
            let custom = ["spec.a".to_owned(), "status['b.c']".to_owned()];
            let mut resources: Vec<(&str, &str, Option<&[String]>)> =
                KINDS.iter().map(|k| (k.group, k.resource, None)).collect();
            resources.push(("example.com", "widgets", Some(&custom)));
            for (group, resource, custom) in resources {
                let paths = Paths::of(selectable::read_paths(group, resource, custom));
                let sparse = paths.read(&text).unwrap();
                let whole = selectable::extract(group, resource, true, custom, &object);
                prop_assert_eq!(selectable::extract(group, resource, true, custom, &sparse), whole, "{}/{}", group, resource);
            }
        }
    }
}
