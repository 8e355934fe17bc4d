//! Bounded fuzzing (proptest) of this parser of untrusted input: random kubeconfig structures (wrong types, missing keys, bad
//! base64, missing files, huge strings) and YAML-ish text. Resolving answers Ok or Err,
//! and the same for the file merged with itself as `$KUBECONFIG` merges files.
//!
//! Part of the crate's fuzz targets: cases, shared strategies and the long-run
//! switch are in `crate::fuzz`.

use std::fmt::Write as _;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Value, json};

use crate::fuzz::{Words, config, repeated, token_soup};
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
const BASE64: &[&str] = &["aGVsbG8=", "aGVsbG8=", "aGVs\n bG8=", "aGVsbG8", "!!!", "=", "aGVsbG8=aGVsbG8=", "  ", "YQ"];
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
    let object =
        fields.prop_map(|fields| Value::Object(fields.into_iter().flatten().map(|(k, v)| (k.to_owned(), v)).collect()));
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
    let flag =
        if typed { flag.boxed() } else { prop_oneof![9 => flag, 1 => Just(Value::from("true")), 1 => odd()].boxed() };
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
    let context = object_of(vec![field("cluster", text(LINKS), needed), field("user", text(LINKS), optional)], typed);
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
