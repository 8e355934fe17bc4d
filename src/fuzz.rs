//! Bounded fuzzing, with proptest, of the parsers of untrusted input, each
//! with the property that makes its output trustworthy besides not panicking:
//!
//! - [`label_selectors`]: any text, selector-shaped token soup, thousands of nested
//!   parentheses or commas. A parsed selector prints a canonical form that parses back
//!   to it, and every kind of label set is matched alike.
//! - [`field_selectors`]: any text, escapes, operators; field extraction from random
//!   JSON objects for every resource the field tables know and for custom resources.
//!   The canonical form parses back, validation accepts exactly the fields the table
//!   lists, and an object's own field values select it.
//! - [`accept_negotiation`]: any header value, and media ranges with odd parameters
//!   and q values, on every endpoint. The answer is deterministic, GET and WATCH always
//!   agree, and LIST differs from GET only by one of them refusing.
//! - [`accept_encoding`]: any `Accept-Encoding` value, and comma soups of encodings with
//!   odd case, q values and spaces. Whether it asks for gzip is exactly whether a
//!   comma-separated piece is `gzip` once Go's spaces are trimmed: appending `,gzip` to
//!   anything makes it ask, and a value without that piece never does.
//! - [`watch_lines`]: upstream watch event lines (any bytes, truncated events, wrong
//!   types, odd resourceVersions, bookmarks, ERROR events) applied to a resource cache,
//!   then a relist. The cache's version never goes back, a rejected line changes
//!   nothing, an applied one changes its own object only, and what the cache would
//!   serve of an object, restamped or not, is that object in JSON.
//! - [`kubeconfig`]: random kubeconfig structures (wrong types, missing keys, bad
//!   base64, missing files, huge strings) and YAML-ish text. Resolving answers Ok or Err,
//!   and the same for the file merged with itself as `$KUBECONFIG` merges files.
//! - [`request_paths`]: request classification of API-ish paths with percent escapes,
//!   dot and empty segments, unicode. A resource request always has an API version, a
//!   non-resource request names no resource, and a subresource comes with a name.
//!
//! # Bound
//!
//! Each target runs [`DEFAULT_CASES`] cases: the whole module takes about 4 s in a debug
//! build on two idle cores (10 s on two busy ones), most of it the kubeconfig target,
//! which writes files.
//! `WATCHMUX_FUZZ_CASES` replaces that count for every target, for a long run by hand
//! (5,000 cases take about 80 s in a debug build). A release build runs many more cases
//! per second, but only with overflow checks turned back on does it catch what a debug
//! build catches:
//!
//! ```text
//! CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true WATCHMUX_FUZZ_CASES=200000 cargo test --locked --release --lib fuzz
//! ```
//!
//! A failure is shrunk to a small input and saved under `proptest-regressions/`, which
//! every later run tries first.

use proptest::prelude::*;

/// Cases per target when `WATCHMUX_FUZZ_CASES` is not set.
const DEFAULT_CASES: u32 = 256;

fn config() -> ProptestConfig {
    let cases = std::env::var("WATCHMUX_FUZZ_CASES")
        .map(|v| v.parse().expect("WATCHMUX_FUZZ_CASES is a number of cases"))
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// A vocabulary in groups of related words; a word repeated is chosen more often.
type Words = &'static [&'static [&'static str]];

fn one_of(words: Words) -> proptest::sample::Select<&'static str> {
    proptest::sample::select(words.concat())
}

/// Text made of `words`, as a parser's own vocabulary appears in odd orders.
fn token_soup(words: Words, max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(one_of(words), 0..max).prop_map(|t| t.concat())
}

/// When `text` parses, it prints a canonical form that parses back to the same value and
/// prints the same again.
fn prints_back<T, E>(text: &str, parse: impl Fn(&str) -> Result<T, E>) -> Result<(), TestCaseError>
where
    T: std::fmt::Display + std::fmt::Debug + PartialEq,
    E: std::fmt::Debug,
{
    if let Ok(parsed) = parse(text) {
        let canonical = parsed.to_string();
        let again = parse(&canonical);
        prop_assert_eq!(again.as_ref().ok(), Some(&parsed), "{:?} printed as {:?}: {:?}", text, canonical, again);
        prop_assert_eq!(again.map(|a| a.to_string()).ok(), Some(canonical));
    }
    Ok(())
}

/// `unit` repeated up to thousands of times between a head and a tail: deep nesting, long lists.
fn repeated(
    heads: &'static [&'static str],
    units: &'static [&'static str],
    tails: &'static [&'static str],
) -> impl Strategy<Value = String> {
    use proptest::sample::select;
    (select(heads), select(units), 1usize..4096, select(tails))
        .prop_map(|(head, unit, n, tail)| format!("{head}{}{tail}", unit.repeat(n)))
}

mod label_selectors {
    use std::collections::{BTreeMap, HashMap};

    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::{Index, select};
    use serde_json::Value;

    use super::{Words, config, prints_back, repeated, token_soup};
    use crate::selector::LabelSelector;

    const TOKENS: Words = &[
        &["a", "b", "k8s.io/a", "A-b_c.9", "x/y/z", "in", "notin"],
        &["(", ")", ",", "!", "=", "==", "!=", ">", "<"],
        &[" ", "\t", "\n"],
        &["1", "007", "-1", "9223372036854775808"],
        &["é", "日本", "\u{0}", "/", ".", "-", "\u{200b}"],
    ];
    const KEYS: &[&str] = &["a", "in", "notin", "example.com/app", "x.y_z-1"];
    const OPS: &[&str] = &["=", "==", "!=", " in ", " notin ", ">", "<", "", "!"];
    const VALUES: &[&str] = &["", "x", "in", "notin", "0", "07", "-1", "9223372036854775807", "v.1_a-b"];

    /// Requirements put together from keys, operators and values, which mostly parse.
    fn terms() -> impl Strategy<Value = String> {
        let term = (select(KEYS), select(OPS), vec(select(VALUES), 0..3)).prop_map(|(key, op, values)| match op {
            "" => key.to_owned(),
            "!" => format!("!{key}"),
            " in " | " notin " => format!("{key}{op}({})", values.join(",")),
            _ => format!("{key}{op}{}", values.first().unwrap_or(&"")),
        });
        vec(term, 0..6).prop_map(|terms| terms.join(","))
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            token_soup(TOKENS, 48),
            terms(),
            repeated(
                &["k in ", "k notin ", "!", "", "k=", "k in (a),"],
                &["(", ")", ",", "(,", "!", "in (", "notin (", "a,", "a in (x,y),!b,c!=d,e>1,"],
                &["", "a", ")", "a)", "z"],
            ),
            (1usize..100).prop_map(|n| format!("{}={}", "k".repeat(n), "v".repeat(n))),
        ]
    }

    /// Label values an object may carry, including ones no selector could name.
    fn value() -> impl Strategy<Value = String> {
        prop_oneof![select(VALUES).prop_map(str::to_owned), Just("+4".to_owned()), any::<String>()]
    }

    /// Labels around the selector's own keys: `(which requirement, which of its values, or this other value)`.
    type Picks = Vec<(Index, Index, Option<String>)>;

    fn labels(sel: &LabelSelector, picks: &Picks) -> BTreeMap<String, String> {
        let requirements = sel.requirements();
        if requirements.is_empty() {
            return BTreeMap::new();
        }
        picks
            .iter()
            .map(|(which, value_index, other)| {
                let r = which.get(requirements);
                let value = match (other, r.values()) {
                    (Some(other), _) => other.clone(),
                    (None, []) => String::new(),
                    (None, values) => value_index.get(values).clone(),
                };
                (r.key().to_owned(), value)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn a_parsed_selector_prints_a_form_that_parses_back_to_it(text in text()) {
            prints_back(&text, LabelSelector::parse)?;
        }

        #[test]
        fn every_kind_of_label_set_is_matched_alike(
            text in prop_oneof![terms(), text()],
            picks in vec((any::<Index>(), any::<Index>(), proptest::option::of(value())), 0..6),
            hidden in any::<Index>(),
        ) {
            let Ok(sel) = LabelSelector::parse(&text) else { return Ok(()) };
            let labels = labels(&sel, &picks);
            let expected = sel.matches(&labels);
            let hashed: HashMap<String, String> = labels.clone().into_iter().collect();
            prop_assert_eq!(sel.matches(&hashed), expected);
            prop_assert_eq!(LabelSelector::parse(&sel.to_string()).map(|s| s.matches(&labels)), Ok(expected));
            // In JSON a label whose value is not a string counts as absent.
            let mut json: serde_json::Map<String, Value> =
                labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            prop_assert_eq!(sel.matches(&json), expected);
            if !sel.is_empty() {
                let r = hidden.get(sel.requirements());
                json.insert(r.key().to_owned(), Value::from(5));
                let mut without = labels.clone();
                without.remove(r.key());
                prop_assert_eq!(sel.matches(&json), sel.matches(&without), "{} with {} = 5", sel, r.key());
            }
        }
    }
}

mod field_selectors {
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;
    use serde_json::{Number, Value};

    use super::{Words, config, one_of, prints_back, repeated, token_soup};
    use crate::selector::field::{FieldOp, FieldRequirement};
    use crate::selector::selectable::{KINDS, PLAIN, builtin_fields, extract, validate};
    use crate::selector::{FieldSelector, FieldSet, Fields};

    const TOKENS: Words = &[
        &["metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "type", "x"],
        &["=", "==", "!=", "!", ","],
        &["\\", "\\\\", "\\,", "\\=", "\\x"],
        &[" ", "é", "日本", "\u{0}", "\"", ".", "['a']"],
    ];

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            token_soup(TOKENS, 40),
            repeated(&["a=", "a!=", "", "=", "\\"], &["\\", ",", "=", "!=", "\\,", "a=b,", "\\\\"], &["", "x", "\\"]),
        ]
    }

    /// Every resource the field tables know, and one they do not.
    fn resources() -> impl Iterator<Item = (&'static str, &'static str)> {
        let plain = PLAIN.iter().flat_map(|(group, resources)| resources.iter().map(move |r| (*group, *r)));
        KINDS.iter().map(|k| (k.group, k.resource)).chain(plain).chain([("example.com", "widgets")])
    }

    const KEYS: Words = &[
        &["metadata", "name", "namespace", "labels"],
        &["spec", "status", "nodeName", "podIPs", "ip", "type", "source", "component", "pool", "n", "a"],
        &["", "é"],
    ];
    const STRINGS: &[&str] = &["", "x", "n1", "a,b=c\\", "é", "\u{0}", "true", "0"];
    /// Where extraction reads, so that random values land there often.
    const PATHS: &[&[&str]] = &[
        &["metadata", "name"],
        &["metadata", "namespace"],
        &["spec", "nodeName"],
        &["spec", "serviceAccountName"],
        &["spec", "serviceAccount"],
        &["spec", "hostNetwork"],
        &["spec", "unschedulable"],
        &["spec", "pool", "name"],
        &["status", "podIPs"],
        &["status", "podIP"],
        &["status", "replicas"],
        &["status", "succeeded"],
        &["involvedObject", "name"],
        &["regarding", "kind"],
        &["source", "component"],
        &["reportingComponent"],
        &["type"],
        &["spec", "a", "b.c"],
    ];
    /// CRD selectableFields jsonPaths, well-formed or not.
    const CUSTOM_PATHS: &[&str] =
        &["spec.a", ".spec.a", "spec.a['b.c']", "['spec']", "", ".", "a.", "a..b", "a[", "['open", "a['b']c", "é.ü"];

    fn number() -> impl Strategy<Value = Number> {
        prop_oneof![any::<i64>().prop_map(Number::from), any::<u64>().prop_map(Number::from), {
            use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
            // JSON numbers are finite.
            (POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO).prop_map(|f| Number::from_f64(f).expect("finite"))
        },]
    }

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number().prop_map(Value::Number),
            select(STRINGS).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..5).prop_map(Value::Array),
                vec((one_of(KEYS), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
            ]
        })
    }

    /// Sets `value` at `path`, turning whatever is in the way into objects.
    fn put(target: &mut Value, path: &[&str], value: Value) {
        let mut at = target;
        for key in path {
            if !at.is_object() {
                *at = Value::Object(serde_json::Map::new());
            }
            at = at.as_object_mut().expect("just made an object").entry(*key).or_insert(Value::Null);
        }
        *at = value;
    }

    /// Random JSON with random values planted where extraction reads.
    fn object() -> impl Strategy<Value = Value> {
        (json(), vec((select(PATHS), json()), 0..8)).prop_map(|(mut object, planted)| {
            for (path, value) in planted {
                put(&mut object, path, value);
            }
            object
        })
    }

    /// A selector naming every field with its own value, in canonical form, parses back and selects them.
    fn selects_itself(fields: &Fields) -> Result<(), TestCaseError> {
        let sel: FieldSelector = fields
            .iter()
            .map(|(f, v)| FieldRequirement { field: f.to_owned(), op: FieldOp::Eq, value: v.to_owned() })
            .collect();
        let text = sel.to_string();
        prop_assert_eq!(FieldSelector::parse(&text), Ok(sel.clone()), "{:?}", text);
        prop_assert!(sel.matches(fields), "{:?} on {:?}", text, fields);
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn a_parsed_selector_prints_a_form_that_parses_back_to_it(text in text()) {
            prints_back(&text, FieldSelector::parse)?;
        }

        #[test]
        fn validation_accepts_exactly_the_fields_the_table_lists(
            text in prop_oneof![text(), token_soup(&[&["metadata.name=a,", "metadata.namespace!=b,", "type==c,", "x=,"]], 4)],
            namespaced in any::<bool>(),
        ) {
            let Ok(sel) = FieldSelector::parse(&text) else { return Ok(()) };
            for (group, resource) in resources() {
                let listed = builtin_fields(group, resource).unwrap_or_default();
                let named = |f: &str| f == "metadata.name" || listed.contains(&f);
                match validate(group, resource, namespaced, None, &sel) {
                    // Only some kinds reject metadata.namespace, so it may pass or not.
                    Ok(()) => prop_assert!(sel.requirements().iter().all(|r| named(&r.field) || r.field == "metadata.namespace")),
                    Err(message) => {
                        prop_assert!(sel.requirements().iter().any(|r| !named(&r.field)), "{}/{}: {}", group, resource, message);
                    }
                }
            }
            let selectable = ["spec.a".to_owned(), ".status.b".to_owned()];
            let custom = |f: &str| ["metadata.name", "spec.a", "status.b"].contains(&f) || (namespaced && f == "metadata.namespace");
            let accepted = validate("example.com", "widgets", namespaced, Some(&selectable), &sel).is_ok();
            prop_assert_eq!(accepted, sel.requirements().iter().all(|r| custom(&r.field)));
        }

        #[test]
        fn builtin_fields_come_from_the_object_and_select_it(object in object(), namespaced in any::<bool>()) {
            let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            for (group, resource) in resources() {
                let fields = extract(group, resource, namespaced, None, &object);
                let listed = builtin_fields(group, resource).unwrap_or_default();
                for (field, _) in fields.iter() {
                    let nameable = field == "metadata.name" || (namespaced && field == "metadata.namespace") || listed.contains(&field);
                    prop_assert!(nameable, "{}/{} extracts {} that no selector may name", group, resource, field);
                }
                prop_assert_eq!(fields.get("metadata.name"), Some(name));
                selects_itself(&fields)?;
            }
        }

        #[test]
        fn custom_resource_fields_print_what_the_json_path_holds(
            object in object(),
            paths in vec(select(CUSTOM_PATHS), 0..4),
            n in number(),
        ) {
            let mut object = object;
            put(&mut object, &["spec", "n"], Value::Number(n.clone()));
            let selectable: Vec<String> = paths.iter().copied().chain(["spec.n"]).map(str::to_owned).collect();
            let fields = extract("example.com", "widgets", true, Some(&selectable), &object);
            for path in &selectable {
                prop_assert!(fields.get(path.strip_prefix('.').unwrap_or(path)).is_some(), "{}", path);
            }
            let printed = fields.get("spec.n").expect("listed");
            match n.as_i64() {
                Some(i) => prop_assert_eq!(printed, i.to_string()),
                // Go's %v of a float64: the shortest digits that read back as the same number.
                None => prop_assert_eq!(printed.parse::<f64>().ok(), n.as_f64(), "{}", printed),
            }
            selects_itself(&fields)?;
        }
    }
}

mod accept_negotiation {
    use http::HeaderValue;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;

    use super::{Words, config, one_of};
    use crate::encode::variant::Endpoint;
    use crate::negotiate::{Negotiation, PassthroughReason, UpstreamCbor, negotiate};

    const ENDPOINTS: [Endpoint; 3] = [Endpoint::Get, Endpoint::List, Endpoint::Watch];
    /// Repeats weigh the choices toward what clients send.
    const TYPES: &[&str] =
        &["application", "application", "application", "*", "text", "Application", "", " application"];
    const SUBTYPES: Words = &[
        &["json", "json", "vnd.kubernetes.protobuf", "vnd.kubernetes.protobuf", "yaml", "*"],
        &["cbor", "JSON", "json/", "json/x", ""],
    ];
    /// Parameter sets clients send together.
    const CONVERSIONS: &[&str] = &[
        "as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
        "as=Table;g=meta.k8s.io;v=v1",
        "as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1",
        "stream=watch",
    ];
    const PARAMS: &[&str] = &["as", "g", "v", "stream", "sv", "Q", "", " as ", "x"];
    const VALUES: Words = &[
        &["Table", "PartialObjectMetadata", "PartialObjectMetadataList", "meta.k8s.io", "v1", "v1beta1", "watch"],
        &["", " v1 ", "a=b", "\"v1\""],
    ];
    const Q_VALUES: Words = &[
        &["0", "1", "1.0000001", "-0", "1e0", "1E-1", "1e400", "-1e400", ".5", "5.", "0.", "00001", "+1"],
        &["NaN", "nan", "inf", "-Inf", "infinity", "+Infinity"],
        // Read as 0 by Go, or not reproduced at all (hex, digit separators).
        &["", "1e", "1e+", "1..0", "0.5 ", " 0.5", "0x1p-1", "0X1", "1_0"],
    ];

    fn q_value() -> impl Strategy<Value = String> {
        prop_oneof![
            one_of(Q_VALUES).prop_map(str::to_owned),
            any::<f32>().prop_map(|q| q.to_string()),
            any::<f64>().prop_map(|q| format!("{q:e}")),
            "[0-9.eE+-]{1,12}",
            // Past the 64 bytes the q parser reads.
            "[0-9.]{60,70}",
        ]
    }

    fn media_range() -> impl Strategy<Value = String> {
        let param = prop_oneof![
            (select(PARAMS), one_of(VALUES)).prop_map(|(k, v)| format!("{k}={v}")),
            q_value().prop_map(|q| format!("q={q}")),
            select(CONVERSIONS).prop_map(str::to_owned),
            select(&["as", "q", "=", "q==1", "v=v1="][..]).prop_map(str::to_owned),
        ];
        (select(TYPES), one_of(SUBTYPES), vec(param, 0..5), select(&[";", "; ", " ;"][..])).prop_map(
            |(media_type, subtype, params, sep)| {
                let mut range =
                    if subtype.is_empty() { media_type.to_owned() } else { format!("{media_type}/{subtype}") };
                for param in params {
                    range.push_str(sep);
                    range.push_str(&param);
                }
                range
            },
        )
    }

    /// Mostly a few media ranges, sometimes up to 16, past the 12 that Go sorts by insertion.
    fn accept() -> impl Strategy<Value = String> {
        let around = &["", "", "", " ", "\t"][..];
        let ranges = prop_oneof![3 => vec(media_range(), 0..4), 1 => vec(media_range(), 0..16)];
        (ranges, select(&[",", ", ", " ,"][..]), select(around), select(around))
            .prop_map(|(ranges, sep, lead, trail)| format!("{lead}{}{trail}", ranges.join(sep)))
    }

    fn answers_agree(value: &HeaderValue) -> Result<(), TestCaseError> {
        let answers = ENDPOINTS.map(|e| negotiate(Some(value), e, UpstreamCbor::Off));
        prop_assert_eq!(
            &ENDPOINTS.map(|e| negotiate(Some(value), e, UpstreamCbor::Off)),
            &answers,
            "{:?} twice",
            value
        );
        let [get, list, watch] = answers;
        // Only the list flag of a metadata conversion depends on the endpoint, and a mismatch is a 406.
        prop_assert_eq!(&get, &watch, "{:?}", value);
        let refused = Negotiation::Passthrough(PassthroughReason::NotAcceptable);
        prop_assert!(get == list || get == refused || list == refused, "{:?}: GET {:?}, LIST {:?}", value, get, list);
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_header_value_gets_one_answer_agreeing_across_endpoints(
            bytes in vec(prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff], 0..300),
        ) {
            answers_agree(&HeaderValue::from_bytes(&bytes).expect("only bytes a header value may hold"))?;
        }

        #[test]
        fn media_ranges_with_odd_parameters_get_one_answer_agreeing_across_endpoints(accept in accept()) {
            answers_agree(&HeaderValue::from_str(&accept).expect("visible ASCII, spaces and tabs"))?;
        }
    }
}

mod accept_encoding {
    use http::{HeaderMap, HeaderValue, header};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;

    use super::config;
    use crate::compress::accepts_gzip;

    fn asks(value: &[u8]) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_bytes(value).expect("header bytes"));
        accepts_gzip(&headers)
    }

    /// Go's reading, written out differently: the pieces between commas, each
    /// with its Unicode spaces cut from both ends (invalid UTF-8 is never a space).
    fn go_reads_gzip(value: &[u8]) -> bool {
        value.split(|&b| b == b',').any(|piece| {
            let text = String::from_utf8_lossy(piece);
            let spaces = |c: char| c.is_whitespace();
            text.trim_start_matches(spaces).trim_end_matches(spaces) == "gzip"
        })
    }

    fn soup() -> impl Strategy<Value = String> {
        let token = select(
            &["gzip", "GZIP", "Gzip", "gzip;q=0", "gzip;q=1", "x-gzip", "*", "identity", "br", "deflate", "zstd", ""][..],
        );
        let space = select(&["", " ", "\t", "\u{a0}", "\u{85}", "\u{2003}"][..]);
        vec((space.clone(), token, space), 0..12)
            .prop_map(|parts| parts.into_iter().map(|(a, t, b)| format!("{a}{t}{b}")).collect::<Vec<_>>().join(","))
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_value_asks_for_gzip_exactly_as_go_reads_it(
            bytes in vec(prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff], 0..300),
        ) {
            prop_assert_eq!(asks(&bytes), go_reads_gzip(&bytes), "{:?}", String::from_utf8_lossy(&bytes));
            let mut with_gzip = bytes.clone();
            with_gzip.extend_from_slice(b",gzip");
            prop_assert!(asks(&with_gzip));
        }

        #[test]
        fn encoding_soups_ask_for_gzip_exactly_as_go_reads_them(value in soup()) {
            prop_assert_eq!(asks(value.as_bytes()), go_reads_gzip(value.as_bytes()), "{:?}", value);
        }
    }
}

mod watch_lines {
    use std::collections::BTreeMap;

    use bytes::Bytes;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::{Index, select};
    use serde_json::Value;

    use super::{Words, config, one_of};
    use crate::cache::resource::{CacheSettings, ResourceCache, Scope};
    use crate::cache::state::object::tests::cm_shape;
    use crate::cache::state::object::{CachedObject, ObjectKey};
    use crate::cache::state::store::{Objects, Snapshot};
    use crate::cache::sync::upstream_watch::read_line;
    use crate::encode::variant::ContentVariant;

    /// Repeats weigh the choices toward events that apply.
    const TYPES: Words = &[
        &["\"ADDED\"", "\"ADDED\"", "\"ADDED\"", "\"MODIFIED\"", "\"MODIFIED\"", "\"DELETED\"", "\"DELETED\""],
        &["\"BOOKMARK\"", "\"ERROR\"", "\"added\"", "\"Bookmark\"", "\"\"", "\"UNKNOWN\"", "5", "null"],
    ];
    const NAMES: &[&str] = &["\"a\"", "\"a\"", "\"b\"", "\"b\"", "\"\"", "\"é\"", "5", "null"];
    const NAMESPACES: &[&str] = &["\"ns\"", "\"other\"", "\"\"", "5"];
    const ODD_RVS: Words = &[
        &["\"18446744073709551615\"", "\"18446744073709551616\"", "\"0\"", "\"007\"", "\"+5\""],
        &["\"-1\"", "\"abc\"", "\"\"", "\" 5\"", "\"1e3\"", "5", "1e3", "null"],
    ];
    /// Labels and annotations, one named like the field stamping rewrites (see the test
    /// below, which found that stamping once took it for the field).
    const LABELS: &[&str] =
        &["{}", "null", "5", r#"{"app":"x"}"#, r#"{"app":5}"#, r#"{"":""}"#, r#"{"resourceVersion":"7"}"#];
    const ANNOTATIONS: &[&str] = &["{}", r#"{"note":"\"resourceVersion\":\"1\""}"#, r#"{"a":"x\"y","b":null}"#];
    const STATUS_CODES: &[&str] = &["410", "\"410\"", "410.0", "-1", "70000", "null", "500", "4100"];
    const ODD_OBJECTS: &[&str] = &[
        "5",
        "null",
        "\"x\"",
        "[]",
        "{}",
        r#"{"metadata":5}"#,
        r#"{"metadata":{}}"#,
        r#"{"kind":"ConfigMap","metadata":null}"#,
        r#"{"metadata":{"name":"a","resourceVersion":"40","labels":{"k":5}}}"#,
        r#"{"metadata":{"name":"a","name":"b","resourceVersion":"41"}}"#,
        r#"{ "metadata" : { "name" : "c" , "resourceVersion" : "42" } }"#,
        // A bookmark look-alike: a Secret's `type` is free text.
        r#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"s","resourceVersion":"43"},"type":"BOOKMARK"}"#,
    ];
    const ODD_LINES: &[&str] = &[
        "",
        " ",
        "\r",
        "\t \r",
        "{}",
        "null",
        "[]",
        r#"{"type":"ADDED"}"#,
        r#"{"object":{}}"#,
        r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"50"}},"type":"DELETED"}"#,
        r#"{"object":{"metadata":{"name":"a","resourceVersion":"51"}},"type":"ADDED"}"#,
    ];

    /// Mostly small increasing-ish versions, so that events apply; sometimes odd ones.
    fn rv() -> impl Strategy<Value = String> {
        prop_oneof![4 => (1u64..60).prop_map(|n| format!("\"{n}\"")), 1 => one_of(ODD_RVS).prop_map(str::to_owned)]
    }

    fn object() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => (select(NAMES), select(NAMESPACES), rv(), select(LABELS)).prop_map(|(name, ns, rv, labels)| format!(
                r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":{name},"namespace":{ns},"resourceVersion":{rv},"labels":{labels}}},"data":{{"k":"v"}}}}"#
            )),
            // As items of typed lists come: no type meta, other key order.
            1 => (select(NAMES), rv()).prop_map(|(name, rv)| format!(r#"{{"metadata":{{"resourceVersion":{rv},"name":{name}}}}}"#)),
            1 => rv().prop_map(|rv| format!(r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"resourceVersion":{rv}}}}}"#)),
            // As custom resources come: Go's encoding/json sorts the keys of unstructured objects.
            1 => (select(ANNOTATIONS), select(LABELS), select(NAMES), rv()).prop_map(|(annotations, labels, name, rv)| format!(
                r#"{{"apiVersion":"v1","data":{{"k":"v"}},"kind":"ConfigMap","metadata":{{"annotations":{annotations},"labels":{labels},"name":{name},"namespace":"ns","resourceVersion":{rv}}}}}"#
            )),
            1 => select(STATUS_CODES).prop_map(|code| format!(
                r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":{code}}}"#
            )),
            1 => select(ODD_OBJECTS).prop_map(str::to_owned),
        ]
    }

    fn line() -> impl Strategy<Value = Bytes> {
        let event = || {
            (one_of(TYPES), object(), select(&["", "\r", " "][..]))
                .prop_map(|(kind, object, end)| format!(r#"{{"type":{kind},"object":{object}}}{end}"#).into())
        };
        prop_oneof![
            6 => event(),
            2 => (event(), any::<Index>()).prop_map(|(e, cut): (Bytes, _)| e.slice(..cut.index(e.len() + 1))),
            1 => vec(any::<u8>(), 0..200).prop_map(Bytes::from),
            1 => select(ODD_LINES).prop_map(|l| Bytes::from_static(l.as_bytes())),
        ]
    }

    fn versions(snapshot: &Snapshot) -> BTreeMap<ObjectKey, u64> {
        snapshot.objects.iter().map(|(k, o)| (k.clone(), o.rv)).collect()
    }

    /// What an applied line must have done: an event newer than the cache changes its
    /// own object only, a bookmark or an older event changes no object.
    fn expected_after(line: &[u8], rv: u64, before: &Snapshot) -> BTreeMap<ObjectKey, u64> {
        let mut expected = versions(before);
        let event: Value = serde_json::from_slice(line).expect("an applied line is JSON");
        let kind = event["type"].as_str().expect("an applied line has a type");
        if kind == "BOOKMARK" || rv <= before.rv {
            return expected;
        }
        let meta = &event["object"]["metadata"];
        let key = ObjectKey {
            namespace: meta["namespace"].as_str().unwrap_or_default().to_owned(),
            name: meta["name"].as_str().expect("an applied object has a name").to_owned(),
        };
        if kind == "DELETED" {
            expected.remove(&key);
        } else {
            expected.insert(key, rv);
        }
        expected
    }

    /// What the cache serves of an object is JSON, whatever the upstream sent. Stamped with
    /// another version (a DELETED after a relist, or to a watcher the object no longer
    /// matches) it is still the same object; the version is the new one when the upstream
    /// writes as the API server does (compact), which object.rs tests.
    fn served_forms_hold_up(object: &CachedObject) -> Result<(), TestCaseError> {
        let rv = object.rv.wrapping_add(1);
        let stamped = CachedObject::decode(object.with_resource_version(rv).json().clone(), &cm_shape());
        prop_assert!(
            stamped
                .as_ref()
                .is_ok_and(|s| s.key == object.key && s.labels == object.labels && [rv, object.rv].contains(&s.rv)),
            "{:?} stamped with {} is {:?}",
            object.json(),
            rv,
            stamped.map(|s| s.json().clone())
        );
        let [head, rest] = object.list_item(ContentVariant::Json, true).expect("JSON");
        // Protobuf may refuse an object, never panic on one.
        let _ = object.list_item(ContentVariant::Protobuf, true);
        let _ = object.encoded(ContentVariant::PartialObjectMetadataProtobuf);
        let encodings = [
            object.encoded(ContentVariant::Json).expect("JSON").to_vec(),
            object.encoded(ContentVariant::PartialObjectMetadataJson).expect("JSON").to_vec(),
            [head, rest].concat(),
        ];
        for bytes in encodings {
            prop_assert!(serde_json::from_slice::<Value>(&bytes).is_ok(), "{}", String::from_utf8_lossy(&bytes));
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn lines_never_move_the_cache_back_and_change_only_what_they_apply(lines in vec(line(), 1..16)) {
            let cache = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
            cache.replace(Objects::new(), 10);
            for line in lines {
                let before = cache.cache().snapshot();
                let result = read_line(&cache.cache().shape, &line).map(|change| change.map(|change| cache.apply(change)));
                let after = cache.cache().snapshot();
                prop_assert_eq!(after.rv, cache.cache().current_rv());
                match result {
                    Err(_) | Ok(None) => {
                        prop_assert_eq!(after.rv, before.rv, "rejected {:?}", line);
                        prop_assert_eq!(versions(&after), versions(&before), "rejected {:?}", line);
                    }
                    Ok(Some(rv)) => {
                        prop_assert_eq!(after.rv, before.rv.max(rv), "applied {:?}", line);
                        prop_assert_eq!(versions(&after), expected_after(&line, rv, &before), "applied {:?}", line);
                    }
                }
                for object in after.objects.values() {
                    served_forms_hold_up(object)?;
                }
            }
            // Then the upstream expires the watch and a relist at the same version finds nothing:
            // the cache empties and stays at that version, u64::MAX included.
            let rv = cache.cache().current_rv();
            cache.replace(Objects::new(), rv);
            prop_assert!(cache.cache().snapshot().objects.is_empty());
            prop_assert_eq!(cache.cache().current_rv(), rv);
        }
    }

    /// Found by the target above: custom resources come with sorted keys, so a label or
    /// annotation named `resourceVersion` stands before the field that stamping rewrites.
    #[test]
    fn stamping_a_custom_resource_rewrites_its_version_not_a_label_or_an_annotation() {
        for metadata in [
            r#"{"labels":{"resourceVersion":"7"},"name":"a","resourceVersion":"11"}"#,
            r#"{"annotations":{"resourceVersion":"x\"y"},"name":"a","resourceVersion":"11"}"#,
        ] {
            let raw = format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{metadata}}}"#);
            let object = CachedObject::decode(Bytes::from(raw), &cm_shape()).expect("a valid object");
            let stamped = CachedObject::decode(object.with_resource_version(12).json().clone(), &cm_shape());
            assert_eq!(stamped.map(|o| (o.rv, o.labels)).ok(), Some((12, object.labels.clone())), "{metadata}");
        }
    }
}

mod kubeconfig {
    use std::fmt::Write as _;

    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;
    use serde_json::{Value, json};

    use super::{Words, config, repeated, token_soup};
    use crate::upstream::kubeconfig::{Env, KubeconfigError, UpstreamConfig, resolve_with};

    const NAMES: &[&str] = &["a", "b", ""];
    /// Names of entries and the names linking them, mostly the same so that contexts resolve.
    const LINKS: &[&str] = &["a", "a", "a", "a", "a", "b", ""];
    const SERVERS: &[&str] = &[
        "https://127.0.0.1:6443",
        "https://127.0.0.1:6443",
        "http://[::1]:8080/prefix",
        "",
        "not a url",
        "https://[::1",
        "https://h:99999",
        "//x",
        "https://é.example",
        "\u{0}",
    ];
    /// Relative to the kubeconfig's directory, which holds `ca.pem` and a directory `dir`.
    const PATHS: &[&str] =
        &["ca.pem", "ca.pem", "missing.pem", "", ".", "dir", "../missing", "/nonexistent/ca.pem", "a\u{0}b"];
    const BASE64: &[&str] =
        &["aGVsbG8=", "aGVsbG8=", "aGVs\n bG8=", "aGVsbG8", "!!!", "=", "aGVsbG8=aGVsbG8=", "  ", "YQ"];
    const YAML: Words = &[
        &["clusters:", "users:", "contexts:", "current-context: a", "- name: a", "  cluster:", "  user:"],
        &["    server: https://x", "  context: {cluster: a, user: a}"],
        &["&x ", "*x", "!!binary ", "[", "]", "{", "}", ":", "- ", "? ", "|", ">", "'", "\"", "#", "~"],
        &["---", "...", "%YAML 1.2", "\n", "  ", "\t", "\u{feff}", "é"],
    ];

    /// A value of the wrong type, or a huge one.
    fn odd() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            Just(json!(5)),
            Just(json!(true)),
            Just(json!([])),
            Just(json!({})),
            Just(json!([{"name": "a"}])),
            (1usize..20_000).prop_map(|n| Value::String("x".repeat(n))),
        ]
    }

    /// A value from `options`, or, unless `typed`, now and then one of the wrong type.
    fn string_from(options: &'static [&'static str], typed: bool) -> BoxedStrategy<Value> {
        let right = select(options).prop_map(Value::from);
        if typed { right.boxed() } else { prop_oneof![9 => right, 1 => odd()].boxed() }
    }

    type Field = BoxedStrategy<Option<(&'static str, Value)>>;

    /// A field that is there with this probability.
    fn field(key: &'static str, value: BoxedStrategy<Value>, presence: f64) -> Field {
        proptest::option::weighted(presence, value.prop_map(move |v| (key, v))).boxed()
    }

    /// An object with some of these fields, or, unless `typed`, now and then no object at all.
    fn object_of(fields: Vec<Field>, typed: bool) -> BoxedStrategy<Value> {
        let object = fields
            .prop_map(|fields| Value::Object(fields.into_iter().flatten().map(|(k, v)| (k.to_owned(), v)).collect()));
        if typed { object.boxed() } else { prop_oneof![9 => object, 1 => odd()].boxed() }
    }

    /// A list of `{name, cluster|user|context}` entries (which of the three keys is not checked).
    fn named_list(entry: BoxedStrategy<Value>, typed: bool) -> BoxedStrategy<Value> {
        let named = (string_from(LINKS, typed), select(&["cluster", "user", "context"][..]), entry)
            .prop_map(|(name, key, value)| json!({"name": name, key: value}));
        let list = vec(named, usize::from(typed)..4).prop_map(Value::Array);
        if typed { list.boxed() } else { prop_oneof![9 => list, 1 => odd()].boxed() }
    }

    /// A kubeconfig as a structure: odd values of the right types (bad base64, missing
    /// files, names that link nowhere), and, unless `typed`, some of the wrong types.
    fn structured(typed: bool) -> BoxedStrategy<Value> {
        let text = |options| string_from(options, typed);
        // Typed documents mostly have what serde and the links between entries need, to get
        // past them to the values; the others are wrong in more places.
        let (needed, optional) = if typed { (0.97, 0.6) } else { (0.8, 0.8) };
        let flag = any::<bool>().prop_map(Value::Bool);
        let flag = if typed {
            flag.boxed()
        } else {
            prop_oneof![9 => flag, 1 => Just(Value::from("true")), 1 => odd()].boxed()
        };
        let cluster = object_of(
            vec![
                field("server", text(SERVERS), needed),
                field("certificate-authority", text(PATHS), optional),
                field("certificate-authority-data", text(BASE64), optional),
                field("insecure-skip-tls-verify", flag, optional),
                field("tls-server-name", text(NAMES), optional),
            ],
            typed,
        );
        let user = object_of(
            vec![
                field("client-certificate", text(PATHS), optional),
                field("client-certificate-data", text(BASE64), optional),
                field("client-key", text(PATHS), optional),
                field("client-key-data", text(BASE64), optional),
                field("token", text(NAMES), optional),
                field("tokenFile", text(PATHS), optional),
                field("username", text(NAMES), optional),
                field("password", text(NAMES), optional),
            ],
            typed,
        );
        let context =
            object_of(vec![field("cluster", text(LINKS), needed), field("user", text(LINKS), optional)], typed);
        object_of(
            vec![
                field("current-context", text(LINKS), needed),
                field("clusters", named_list(cluster, typed), needed),
                field("users", named_list(user, typed), needed),
                field("contexts", named_list(context, typed), needed),
            ],
            typed,
        )
    }

    fn document() -> impl Strategy<Value = String> {
        let yaml = |doc: Value| serde_yaml_ng::to_string(&doc).expect("JSON values are YAML");
        prop_oneof![
            4 => structured(true).prop_map(yaml),
            3 => structured(false).prop_map(yaml),
            1 => any::<String>(),
            2 => token_soup(YAML, 40),
            1 => repeated(&["clusters: ", "a: ", ""], &["[", "{a: ", "- ", "&a [*a, "], &["", "]", "x"]),
            // Aliases that would expand to 9^n entries.
            1 => (1usize..9).prop_map(|n| {
                let mut doc = "l0: &l0 [x, x, x, x, x, x, x, x, x]\n".to_owned();
                for i in 1..=n {
                    let p = i - 1;
                    writeln!(doc, "l{i}: &l{i} [*l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}]")
                        .expect("writing to a String");
                }
                doc + &format!("clusters: *l{n}\n")
            }),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn any_kubeconfig_resolves_to_an_answer_and_merged_with_itself_to_the_same_one(
            text in document(),
            context in proptest::option::weighted(0.3, select(LINKS)),
        ) {
            let dir = tempfile::tempdir().expect("temp dir");
            std::fs::write(dir.path().join("ca.pem"), "PEM").expect("ca.pem");
            std::fs::create_dir(dir.path().join("dir")).expect("dir");
            let path = dir.path().join("config");
            std::fs::write(&path, &text).expect("kubeconfig");
            let alone = resolve_with(Some(&path), context, &Env::default());
            // As $KUBECONFIG lists files: the missing one is skipped, and the second copy
            // defines nothing the first has not.
            let list = std::env::join_paths([&path, &dir.path().join("missing"), &path]).expect("paths join");
            let env = Env { kubeconfig: Some(list.into_string().expect("UTF-8 temp path")), ..Env::default() };
            let merged = resolve_with(None, context, &env);
            let answer = |r: Result<UpstreamConfig, KubeconfigError>| {
                r.map(|cfg| UpstreamConfig { source: String::new(), ..cfg }).map_err(|e| e.to_string())
            };
            if let (Ok(cfg), Some(context)) = (&alone, context) {
                let suffix = format!(", context {context}");
                prop_assert!(cfg.source.ends_with(&suffix), "{} for --context {}", cfg.source, context);
            }
            prop_assert_eq!(answer(merged), answer(alone));
        }
    }
}

mod request_paths {
    use std::fmt::Write as _;

    use http::{Method, Uri};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;

    use super::{Words, config, one_of};
    use crate::request::RequestInfo;

    const SEGMENTS: Words = &[
        &["api", "apis", "v1", "apps", "namespaces", "default", "watch", "proxy", "pods"],
        &["status", "finalize", "log", "exec"],
        &["..", ".", "", "~"],
        &["%2F", "%2f", "%2e%2e", "%2E", "%", "%z", "%zz", "%00", "%E2%82%AC", "%C3", "%252F"],
        &["é", "日本", "a b"],
    ];
    const QUERIES: &[&str] = &[
        "",
        "?",
        "?watch=true",
        "?watch=1",
        "?watch=false",
        "?watch",
        "?watch=%74rue",
        "?a=b&watch=true",
        "?watch=true&watch=false",
    ];
    const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "CONNECT", "TRACE", "FOO"];

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![4 => one_of(SEGMENTS).prop_map(str::to_owned), 1 => "[a-z0-9%.~_-]{0,12}", 1 => any::<String>()]
    }

    /// Escapes what a URI path cannot hold, keeping `%` as typed so that bad escapes reach the classifier.
    fn escape(path: &str) -> String {
        let mut out = String::with_capacity(path.len());
        for b in path.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@%/".contains(&b) {
                out.push(char::from(b));
            } else {
                write!(out, "%{b:02X}").expect("writing to a String");
            }
        }
        out
    }

    fn uri() -> impl Strategy<Value = Uri> {
        let origin = select(&["", "http://h", "https://h:6443"][..]);
        let lead = select(
            &["/api/v1/", "/apis/apps/v1/", "/api/", "/apis/", "/", "//", "/api//v1/", "/api/v1/namespaces/"][..],
        );
        (origin, lead, vec(segment(), 0..10), select(QUERIES)).prop_map(|(origin, lead, segments, query)| {
            let path = escape(&format!("{lead}{}", segments.join("/")));
            format!("{origin}{path}{query}").parse().expect("an escaped path is a valid URI")
        })
    }

    fn classification_holds_together(method: &str, uri: &Uri) -> Result<(), TestCaseError> {
        let method = Method::from_bytes(method.as_bytes()).expect("a method token");
        let info = RequestInfo::classify(&method, uri);
        prop_assert!(info.verb.is_some(), "{} {}: {:?}", method, uri, info);
        if info.is_resource_request {
            // Inner empty segments are kept as the API server keeps them, so
            // `/api//v1/x` has an empty version, as in Go; but a resource
            // request is always under a prefix, and names something.
            let path = crate::request::decode_path(uri.path()).expect("a resource request decodes");
            // Leading slashes are trimmed as the API server's splitPath trims them.
            let trimmed = path.trim_start_matches('/');
            prop_assert!(trimmed.starts_with("api/") || trimmed.starts_with("apis/"), "{} {}: {:?}", method, uri, info);
            prop_assert!(
                !info.resource.is_empty() || info.namespace.is_some() || info.name.is_some() || path.contains("//"),
                "{} {}: {:?}",
                method,
                uri,
                info
            );
        } else {
            let parts = (&info.namespace, info.resource.as_str(), &info.name, &info.subresource);
            prop_assert_eq!(parts, (&None, "", &None, &None), "{} {}", method, uri);
        }
        prop_assert!(info.subresource.is_none() || info.name.is_some(), "{} {}: {:?}", method, uri, info);
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn a_resource_request_is_always_under_an_api_prefix(method in select(METHODS), uri in uri()) {
            classification_holds_together(method, &uri)?;
        }

        #[test]
        fn any_request_target_that_is_a_uri_classifies_consistently(
            method in select(METHODS),
            // Visible ASCII but for `"`, `<`, `>` and the backquote, which `Uri` refuses.
            uri in "/[!#-;=?-_a-~]{0,80}".prop_filter_map("a valid URI", |s| s.parse::<Uri>().ok()),
        ) {
            classification_holds_together(method, &uri)?;
        }
    }
}
