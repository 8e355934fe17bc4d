//! Bounded fuzzing (proptest) of this parser of untrusted input: any text, selector-shaped token soup, thousands of nested
//! parentheses or commas. A parsed selector prints a canonical form that parses back
//! to it, and every kind of label set is matched alike.
//!
//! Part of the crate's fuzz targets: cases, shared strategies and the long-run
//! switch are in `crate::fuzz`.

use std::collections::{BTreeMap, HashMap};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::Value;

use crate::fuzz::{Words, config, prints_back, repeated, token_soup};
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
