//! The JSON-to-protobuf encoder against Go's own serializers.
//!
//! Reads the corpus `integration/cmd/protocorpus` writes (random objects of
//! every built-in kind, each as the API server writes it in JSON and in
//! protobuf, with its watch frame and PartialObjectMetadata), turns every JSON
//! into protobuf with `watchmux::encode::protobuf` and compares bytes: whole
//! bodies, list bodies rebuilt from their items, watch frames and
//! PartialObjectMetadata messages. Prints the kinds and objects covered and
//! every mismatch with the field path where the bytes part.
//!
//! A second test holds the table against the OpenAPI v3 documents of the
//! pinned Kubernetes, as the start-up drift check (`openapi_drift`) would.
//!
//! `make protobuf-check` makes a small corpus (fixed seed) and runs these with
//! `WATCHMUX_PROTOBUF_CORPUS` and `WATCHMUX_OPENAPI_DIR` set; without the
//! variables the tests say so and pass. A longer run by hand:
//!
//! ```sh
//! (cd integration && go run ./cmd/protocorpus -out ../.run/pbc -seed 7 -n 50)
//! WATCHMUX_PROTOBUF_CORPUS=.run/pbc/corpus.jsonl cargo test --test protobuf_corpus -- --nocapture
//! ```
//!
//! `WATCHMUX_PROTOBUF_MINOR` (`35`) chooses the Kubernetes minor whose view
//! of the table is checked, as watchmux chooses it from the upstream's
//! `/version`; `make protobuf-check` runs both tests once a supported minor,
//! with that minor's corpus and OpenAPI documents (docs/versions.md).
//!
//! Objects whose Go protobuf changes on a trip through their own JSON
//! ("lossy") are compared like every other (against the protobuf of the
//! object decoded from the JSON, which is what the API server would send for
//! it); the test also names the field where the trip changed them, since
//! that is a difference no encoder reading JSON can see (docs/protobuf.md).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;
use watchmux::encode::protobuf::{self, MessageType};

#[derive(Deserialize)]
struct Record {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    n: u32,
    json: String,
    protobuf: String,
    /// Absent in records taken from a real API server's responses.
    #[serde(default)]
    watch: Option<String>,
    #[serde(default)]
    lossy: bool,
    #[serde(default)]
    original: Option<String>,
    #[serde(default)]
    partial: Option<String>,
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).expect("base64 in the corpus")
}

/// One protobuf field as read off the wire.
#[derive(PartialEq)]
enum Value<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Other(&'a [u8]),
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// A message's fields, or None when the bytes are not one.
fn fields(mut b: &[u8]) -> Option<Vec<(u32, Value<'_>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (key, n) = varint(b)?;
        b = &b[n..];
        let number = u32::try_from(key >> 3).ok()?;
        match key & 7 {
            0 => {
                let (v, n) = varint(b)?;
                b = &b[n..];
                out.push((number, Value::Varint(v)));
            }
            2 => {
                let (len, n) = varint(b)?;
                let len = usize::try_from(len).ok()?;
                let body = b.get(n..n + len)?;
                b = &b[n + len..];
                out.push((number, Value::Len(body)));
            }
            1 => {
                let body = b.get(..8)?;
                b = &b[8..];
                out.push((number, Value::Other(body)));
            }
            5 => {
                let body = b.get(..4)?;
                b = &b[4..];
                out.push((number, Value::Other(body)));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The field numbers down to where two messages first differ, and whether
/// the difference is a field the first writes with length 0 and the second
/// leaves out.
fn first_difference(want: &[u8], got: &[u8]) -> (Vec<u32>, bool) {
    let (Some(w), Some(g)) = (fields(want), fields(got)) else { return (Vec::new(), false) };
    for i in 0..w.len().max(g.len()) {
        match (w.get(i), g.get(i)) {
            (Some((wn, wv)), Some((gn, gv))) if wn == gn && wv == gv => continue,
            (Some((wn, Value::Len(wb))), Some((gn, Value::Len(gb)))) if wn == gn => {
                let (rest, empty_dropped) = first_difference(wb, gb);
                let mut path = vec![*wn];
                path.extend(rest);
                return (path, empty_dropped);
            }
            (Some((wn, wv)), g) => {
                let empty_dropped = *wv == Value::Len(b"") && g.is_none_or(|(gn, _)| gn > wn);
                return (vec![g.map_or(*wn, |(gn, _)| (*wn).min(*gn))], empty_dropped);
            }
            (None, Some((n, _))) => return (vec![*n], false),
            (None, None) => break,
        }
    }
    (Vec::new(), false)
}

/// Where a whole body (magic + Unknown) differs, as JSON keys.
const GO_AND_WATCHMUX: (&str, &str) = ("Go", "watchmux");

/// `names` says what each side is, for the one difference that has a name.
fn where_bodies_differ(ty: Option<MessageType>, want: &[u8], got: &[u8], names: (&str, &str)) -> String {
    let (Some(w), Some(g)) = (want.strip_prefix(b"k8s\0"), got.strip_prefix(b"k8s\0")) else {
        return "the magic prefix".into();
    };
    let (path, empty_dropped) = first_difference(w, g);
    let note = if empty_dropped {
        format!(" (written with length 0 by {}, left out by {})", names.0, names.1)
    } else {
        String::new()
    };
    match (path.first(), ty) {
        (Some(2), Some(ty)) => format!("field {}{note}", protobuf::describe_field_path(ty, &path[1..])),
        _ => format!("envelope fields {path:?}{note}"),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The minor these tests check the table's view of: `WATCHMUX_PROTOBUF_MINOR`,
/// else the pinned one. Each test selects it before it encodes anything.
fn select_minor() -> u8 {
    let minor = std::env::var("WATCHMUX_PROTOBUF_MINOR")
        .map_or(watchmux::encode::minor::PINNED, |m| m.parse().expect("WATCHMUX_PROTOBUF_MINOR is a number: 35"));
    assert!(watchmux::encode::minor::SUPPORTED.contains(&minor), "1.{minor} is not a supported minor");
    watchmux::encode::minor::select(minor);
    minor
}

#[test]
fn every_json_of_the_corpus_encodes_to_go_s_protobuf() {
    let minor = select_minor();
    println!("protobuf corpus: the table as 1.{minor} has it");
    let Ok(path) = std::env::var("WATCHMUX_PROTOBUF_CORPUS") else {
        println!("protobuf corpus: skipped, WATCHMUX_PROTOBUF_CORPUS is unset (make protobuf-check sets it)");
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut per_kind: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut mismatches = Vec::new();
    let (mut objects, mut lists, mut frames, mut partials) = (0, 0, 0, 0);
    let mut lossy = Vec::new();
    let mut excluded: BTreeMap<String, u32> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let r: Record = serde_json::from_str(line).expect("a corpus record");
        let what = format!("{} {} #{}", r.api_version, r.kind, r.n);
        // What the encoder refuses on purpose, saying why: core/v1 List
        // (Go writes its items in a form the table does not describe), and
        // an omitempty []byte left out of the JSON (nil or empty: Go writes
        // them differently, the JSON cannot say which).
        let encoded = protobuf::encode_object(r.json.as_bytes());
        if let Err(
            e @ (protobuf::Unplaceable::RawExtensionItems { .. } | protobuf::Unplaceable::AmbiguousEmptyBytes { .. }),
        ) = &encoded
        {
            // One line per field, whatever the list indices.
            let path = match e {
                protobuf::Unplaceable::AmbiguousEmptyBytes { path } => path
                    .split('[')
                    .map(|p| p.trim_start_matches(|c: char| c.is_ascii_digit()))
                    .collect::<Vec<_>>()
                    .join("["),
                _ => String::new(),
            };
            let reason = format!("{} {} {path}: refused by the encoder ({})", r.api_version, r.kind, e.reason());
            *excluded.entry(reason).or_default() += 1;
            continue;
        }
        *per_kind.entry((r.api_version.clone(), r.kind.clone())).or_default() += 1;
        objects += 1;
        let ty = MessageType::for_kind(&r.api_version, &r.kind);
        let want = b64(&r.protobuf);

        match encoded {
            Ok(got) if got == want => {}
            Ok(got) => mismatches
                .push(format!("{what}: bytes differ at {}", where_bodies_differ(ty, &want, &got, GO_AND_WATCHMUX))),
            Err(e) => mismatches.push(format!("{what}: not encoded: {e}")),
        }

        // The watch frame around Go's own object bytes.
        if let Some(watch) = &r.watch {
            frames += 1;
            if protobuf::watch_frame("ADDED", &want) != b64(watch) {
                mismatches.push(format!("{what}: watch frame differs"));
            }
        }

        // Lists again, from their parts, as the cache will build them.
        if let Some(item_kind) = r.kind.strip_suffix("List")
            && let Some(item_ty) = MessageType::for_kind(&r.api_version, item_kind)
        {
            // The parts as the JSON has them, byte for byte (as the cache
            // holds each item).
            let parts: ListParts = serde_json::from_str(&r.json).expect("list JSON");
            let meta = parts.metadata.map_or("{}", |m| m.get());
            let bare: Result<Vec<Vec<u8>>, _> = parts
                .items
                .unwrap_or_default()
                .iter()
                .map(|i| protobuf::encode_message(item_ty, i.get().as_bytes()))
                .collect();
            lists += 1;
            match bare.and_then(|b| protobuf::encode_list(&r.api_version, &r.kind, meta.as_bytes(), &b)) {
                Ok(got) if got == want => {}
                Ok(got) => mismatches.push(format!(
                    "{what}: list from parts differs at {}",
                    where_bodies_differ(ty, &want, &got, GO_AND_WATCHMUX)
                )),
                // Not a ListMeta + items list (APIGroupList): nothing to rebuild.
                Err(protobuf::Unplaceable::NotAList { .. }) => lists -= 1,
                Err(e) => mismatches.push(format!("{what}: list from parts not encoded: {e}")),
            }
        }

        if let Some(partial) = &r.partial {
            partials += 1;
            let parts: ListParts = serde_json::from_str(&r.json).expect("object JSON");
            let meta = parts.metadata.map_or("{}", |m| m.get());
            match protobuf::encode_partial_object_metadata(meta.as_bytes()) {
                Ok(got) if got == b64(partial) => {}
                Ok(got) => mismatches.push(format!(
                    "{what}: PartialObjectMetadata differs at fields {:?} (want {}, got {})",
                    first_difference(&b64(partial), &got).0,
                    hex(&b64(partial)).get(..64).unwrap_or(""),
                    hex(&got).get(..64).unwrap_or("")
                )),
                Err(e) => mismatches.push(format!("{what}: PartialObjectMetadata not encoded: {e}")),
            }
        }

        if r.lossy {
            let original = b64(r.original.as_deref().unwrap_or_default());
            // First: Go's protobuf of the object; second: of the object
            // decoded from its JSON.
            lossy.push(format!(
                "{what}: {}",
                where_bodies_differ(ty, &original, &want, ("Go before JSON", "Go after JSON"))
            ));
        }
    }

    println!(
        "protobuf corpus: {} kinds, {objects} objects, {lists} lists rebuilt from items, {frames} watch frames, \
         {partials} PartialObjectMetadata; {} mismatches",
        per_kind.len(),
        mismatches.len()
    );
    // Kinds and objects by group-version, one line (every kind and its
    // count with WATCHMUX_PROTOBUF_CORPUS_VERBOSE set).
    let mut by_group: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for ((v, _), n) in &per_kind {
        let e = by_group.entry(v).or_default();
        e.0 += 1;
        e.1 += n;
    }
    let groups: Vec<String> = by_group.iter().map(|(v, (k, o))| format!("{v} {k}/{o}")).collect();
    println!("protobuf corpus: kinds/objects by group-version: {}", groups.join(", "));
    if std::env::var_os("WATCHMUX_PROTOBUF_CORPUS_VERBOSE").is_some() {
        for ((v, k), n) in &per_kind {
            println!("protobuf corpus: covered {v} {k}: {n}");
        }
    }
    for (why, n) in &excluded {
        println!("protobuf corpus: excluded {n} objects: {why}");
    }
    for l in &lossy {
        println!(
            "protobuf corpus: lossy through JSON (Go's protobuf of the object and of the object decoded from its \
             own JSON differ, which no encoder reading JSON can see; compared against the latter; \
             docs/protobuf.md): {l}"
        );
    }
    for m in &mismatches {
        println!("protobuf corpus: MISMATCH {m}");
    }
    assert!(mismatches.is_empty(), "{} mismatches (listed above)", mismatches.len());
}

/// `metadata` and `items` of an object exactly as its JSON has them.
#[derive(Deserialize)]
struct ListParts<'a> {
    #[serde(borrow)]
    metadata: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    items: Option<Vec<&'a serde_json::value::RawValue>>,
}

/// The table against the OpenAPI v3 documents of the pinned Kubernetes
/// (k8s.io/kubernetes' api/openapi-spec/v3, what kube-apiserver of that
/// version serves at /openapi/v3): no drift for any kind they describe, so
/// the start-up check (`openapi_drift`) stays quiet against the server the
/// table was made for. `make protobuf-check` sets WATCHMUX_OPENAPI_DIR.
#[test]
fn the_table_fits_the_openapi_of_its_own_kubernetes_version() {
    let minor = select_minor();
    println!("protobuf openapi: the table as 1.{minor} has it");
    let Ok(dir) = std::env::var("WATCHMUX_OPENAPI_DIR") else {
        println!("protobuf openapi: skipped, WATCHMUX_OPENAPI_DIR is unset (make protobuf-check sets it)");
        return;
    };
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    let kinds = protobuf::known_kinds();
    let (mut documents, mut checked, mut absent) = (0, 0, Vec::new());
    let mut drift = Vec::new();
    for path in entries {
        let file = path.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        // api__v1_openapi.json, apis__apps__v1_openapi.json
        let Some(stem) = file.strip_suffix("_openapi.json") else { continue };
        let parts: Vec<&str> = stem.split("__").collect();
        let api_version = match parts[..] {
            ["api", v] => v.to_owned(),
            ["apis", g, v] => format!("{g}/{v}"),
            _ => continue,
        };
        documents += 1;
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("OpenAPI document")).expect("OpenAPI JSON");
        for (v, k) in kinds.iter().filter(|(v, _)| *v == api_version) {
            let ty = MessageType::for_kind(v, k).expect("a known kind");
            match protobuf::openapi_drift(ty, &doc) {
                Ok(d) => {
                    checked += 1;
                    drift.extend(d.into_iter().map(|d| format!("{v} {k}: {d}")));
                }
                Err(_) => absent.push(format!("{v} {k}")),
            }
        }
    }
    println!(
        "protobuf openapi: {documents} group-version documents, {checked} kinds checked, {} drift; \
         {} kinds of those group-versions not described (option types and the like)",
        drift.len(),
        absent.len()
    );
    for d in &drift {
        println!("protobuf openapi: DRIFT {d}");
    }
    assert!(documents > 0, "no OpenAPI documents in {dir}");
    assert!(drift.is_empty(), "{} drift entries (listed above)", drift.len());
}
