//! Label selectors (`labelSelector=`), as apimachinery's `labels.Parse` reads them
//! and `labels.Selector.Matches` applies them.

mod parse;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::SelectorError;
use super::packed::PackedStrs;

/// The labels of one object.
pub trait LabelSet {
    fn get(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> LabelSet for HashMap<String, String, S> {
    fn get(&self, key: &str) -> Option<&str> {
        HashMap::get(self, key).map(String::as_str)
    }
}

/// An object's labels as the cache keeps them: owned, sorted by key, and no
/// bigger than they are (a `BTreeMap` of two labels took a node of eleven
/// slots, about half a kilobyte per cached object): keys and values in
/// one allocation, key then value ([`PackedStrs`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Labels(PackedStrs);

impl Labels {
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        let (mut low, mut high) = (0, self.len());
        // A binary search over the keys, at the even places.
        while low < high {
            let mid = low + (high - low) / 2;
            match self.0.get(2 * mid)?.cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return self.0.get(2 * mid + 1),
            }
        }
        None
    }

    /// How many labels there are.
    pub(crate) fn len(&self) -> usize {
        self.0.len() / 2
    }
}

/// A key given twice keeps its last value, as in a JSON object.
impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut labels: Vec<(K, V)> = iter.into_iter().collect();
        // Last first, then a stable sort: of each key's run, the first is the last given.
        labels.reverse();
        labels.sort_by(|(a, _), (b, _)| a.as_ref().cmp(b.as_ref()));
        labels.dedup_by(|(later, _), (first, _)| later.as_ref() == first.as_ref());
        Self(PackedStrs::new(labels.iter().flat_map(|(k, v)| [k.as_ref(), v.as_ref()])))
    }
}

impl LabelSet for Labels {
    fn get(&self, key: &str) -> Option<&str> {
        Labels::get(self, key)
    }
}

/// `metadata.labels` as it comes in JSON; a value that is not a string counts as absent.
impl LabelSet for serde_json::Map<String, serde_json::Value> {
    fn get(&self, key: &str) -> Option<&str> {
        serde_json::Map::get(self, key).and_then(serde_json::Value::as_str)
    }
}

/// The operator of one requirement. `=` and `==` mean the same but are kept
/// apart so that a selector prints back as it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LabelOp {
    /// `key=value`
    Equals,
    /// `key==value`
    DoubleEquals,
    /// `key!=value`: also true when the key is absent.
    NotEquals,
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)`: also true when the key is absent.
    NotIn,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>n`: the label must be present and parse as an `i64` greater than `n`.
    GreaterThan,
    /// `key<n`
    LessThan,
}

/// One comma-separated term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LabelRequirement {
    key: String,
    op: LabelOp,
    /// Sorted and without duplicates; one value for the exact and integer
    /// operators, none for `Exists` and `DoesNotExist`.
    values: Vec<String>,
    /// The value of a `>` or `<` requirement, parsed once.
    bound: i64,
}

impl LabelRequirement {
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn op(&self) -> LabelOp {
        self.op
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    /// `Requirement.Matches` in apimachinery.
    pub fn matches(&self, labels: &(impl LabelSet + ?Sized)) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::In => value.is_some_and(|v| self.has_value(v)),
            LabelOp::NotEquals | LabelOp::NotIn => value.is_none_or(|v| !self.has_value(v)),
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            // Go's strconv.ParseInt(v, 10, 64) and i64::from_str accept the same strings.
            LabelOp::GreaterThan => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|n| n > self.bound),
            LabelOp::LessThan => value.and_then(|v| v.parse::<i64>().ok()).is_some_and(|n| n < self.bound),
        }
    }

    /// True when every label set this requirement matches is also matched by `other`.
    fn implies(&self, other: &LabelRequirement) -> bool {
        use LabelOp::*;
        if self.key != other.key {
            return false;
        }
        let as_int = |v: &String| v.parse::<i64>().ok();
        match (self.op, other.op) {
            (Equals | DoubleEquals | In | Exists | GreaterThan | LessThan, Exists) => true,
            (DoesNotExist, DoesNotExist | NotEquals | NotIn) => true,
            (Equals | DoubleEquals | In, Equals | DoubleEquals | In) => self.values.iter().all(|v| other.has_value(v)),
            (Equals | DoubleEquals | In, NotEquals | NotIn) => !self.values.iter().any(|v| other.has_value(v)),
            (NotEquals | NotIn, NotEquals | NotIn) => other.values.iter().all(|v| self.has_value(v)),
            // A label above n cannot equal a value that is not above n.
            (GreaterThan, NotEquals | NotIn) => other.values.iter().all(|v| as_int(v).is_none_or(|n| n <= self.bound)),
            (LessThan, NotEquals | NotIn) => other.values.iter().all(|v| as_int(v).is_none_or(|n| n >= self.bound)),
            (GreaterThan, GreaterThan) => self.bound >= other.bound,
            (LessThan, LessThan) => self.bound <= other.bound,
            (Equals | DoubleEquals | In, GreaterThan) => {
                self.values.iter().all(|v| as_int(v).is_some_and(|n| n > other.bound))
            }
            (Equals | DoubleEquals | In, LessThan) => {
                self.values.iter().all(|v| as_int(v).is_some_and(|n| n < other.bound))
            }
            _ => false,
        }
    }
}

/// `Requirement.String` in apimachinery, which `labels.Parse` reads back to the same requirement.
impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            LabelOp::Exists => return f.write_str(&self.key),
            LabelOp::DoesNotExist => return write!(f, "!{}", self.key),
            LabelOp::Equals => "=",
            LabelOp::DoubleEquals => "==",
            LabelOp::NotEquals => "!=",
            LabelOp::GreaterThan => ">",
            LabelOp::LessThan => "<",
            LabelOp::In => " in ",
            LabelOp::NotIn => " notin ",
        };
        let values = self.values.join(",");
        match self.op {
            LabelOp::In | LabelOp::NotIn => write!(f, "{}{op}({values})", self.key),
            _ => write!(f, "{}{op}{values}", self.key),
        }
    }
}

/// A parsed `labelSelector`: the AND of its requirements, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Parses a selector the way the API server does (`labels.Parse`, with
    /// apimachinery's key and value validation); whatever it rejects is rejected here.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut requirements = parse::parse(s)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(Self { requirements })
    }

    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }

    /// Whether an object with these labels is selected, exactly as the API server decides.
    pub fn matches(&self, labels: &(impl LabelSet + ?Sized)) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// The single value `key` must have, when a requirement pins it (`key=v`,
    /// `key==v` or `key in (v)`).
    pub fn exact(&self, key: &str) -> Option<&str> {
        self.requirements.iter().find_map(|r| match r.op {
            LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::In if r.key == key && r.values.len() == 1 => {
                Some(r.values[0].as_str())
            }
            _ => None,
        })
    }

    /// True when every object matching self also matches `scope` (conservative:
    /// may say false when it is true). Each requirement of `scope` must follow
    /// from a single requirement of self.
    pub fn implies(&self, scope: &LabelSelector) -> bool {
        scope.requirements.iter().all(|r| self.requirements.iter().any(|s| s.implies(r)))
    }
}

/// The canonical form (`labels.Selector.String`), which parses back to an equal selector.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    #[test]
    fn labels_are_found_by_key_and_a_repeated_key_keeps_its_last_value() {
        let labels: Labels = [("b", "1"), ("a", "2"), ("c", "3"), ("a", "4"), ("b", "5")].into_iter().collect();
        assert_eq!(labels.get("a"), Some("4"));
        assert_eq!(labels.get("b"), Some("5"));
        assert_eq!(labels.get("c"), Some("3"));
        assert_eq!(labels.get("d"), None);
        assert_eq!(labels.len(), 3);
        assert_eq!(Labels::default().get("a"), None);
    }

    fn selects(s: &str, pairs: &[(&str, &str)]) -> bool {
        sel(s).matches(&labels(pairs))
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(sel("").is_empty());
        assert!(sel("  \t").is_empty());
        assert_eq!(sel(""), LabelSelector::everything());
        assert!(selects("", &[]));
        assert!(selects("", &[("a", "b")]));
    }

    #[test]
    fn equals_and_double_equals_need_the_key_with_that_value() {
        for s in ["env=prod", "env==prod", "env in (prod)", "env in (prod,dev)"] {
            assert!(selects(s, &[("env", "prod")]), "{s}");
            assert!(!selects(s, &[("env", "test")]), "{s}");
            assert!(!selects(s, &[]), "{s}");
        }
    }

    #[test]
    fn empty_value_matches_an_empty_label_but_not_an_absent_one() {
        for s in ["env=", "env==", "env in ()", "env in (,)", "env in (,,)", "env in (x,,)"] {
            assert!(selects(s, &[("env", "")]), "{s}");
            assert!(!selects(s, &[]), "{s}");
        }
        assert!(!selects("env=", &[("env", "x")]));
    }

    #[test]
    fn not_equals_and_notin_match_when_the_key_is_absent() {
        for s in ["env!=prod", "env notin (prod)", "env notin (prod,dev)"] {
            assert!(selects(s, &[]), "{s}");
            assert!(selects(s, &[("env", "test")]), "{s}");
            assert!(!selects(s, &[("env", "prod")]), "{s}");
        }
    }

    #[test]
    fn exists_and_does_not_exist_look_only_at_the_key() {
        assert!(selects("env", &[("env", "")]));
        assert!(!selects("env", &[("other", "x")]));
        assert!(selects("!env", &[("other", "x")]));
        assert!(!selects("!env", &[("env", "")]));
        assert!(selects("! env", &[]));
    }

    #[test]
    fn greater_and_less_than_compare_integers_and_need_the_key() {
        assert!(selects("n>4", &[("n", "5")]));
        assert!(!selects("n>5", &[("n", "5")]));
        assert!(selects("n<6", &[("n", "5")]));
        assert!(!selects("n<5", &[("n", "5")]));
        // Leading zeros and signs are fine in the object's value (strconv.ParseInt).
        assert!(selects("n>6", &[("n", "007")]));
        assert!(selects("n<0", &[("n", "-3")]));
        assert!(selects("n>0", &[("n", "+3")]));
        assert!(!selects("n>0", &[("n", "x")]));
        assert!(!selects("n>0", &[("n", "")]));
        assert!(!selects("n>0", &[("n", "99999999999999999999")]));
        assert!(!selects("n<9", &[]));
        assert!(selects("n>01", &[("n", "2")]));
    }

    #[test]
    fn comma_is_and() {
        assert!(selects("a=1,b=2", &[("a", "1"), ("b", "2")]));
        assert!(!selects("a=1,b=2", &[("a", "1")]));
        assert!(!selects("a=1,a=2", &[("a", "1")]));
        assert!(!selects("env=prod,!env", &[("env", "prod")]));
    }

    #[test]
    fn requirements_are_sorted_by_key() {
        let s = sel("z=1,a=2,m");
        let keys: Vec<_> = s.requirements().iter().map(LabelRequirement::key).collect();
        assert_eq!(keys, ["a", "m", "z"]);
    }

    #[test]
    fn values_are_sorted_and_deduplicated() {
        assert_eq!(sel("a in (c,b,c,a)").requirements()[0].values(), ["a", "b", "c"]);
        assert_eq!(sel("a in (x,,)").requirements()[0].values(), ["", "x"]);
    }

    #[test]
    fn display_is_the_canonical_form() {
        assert_eq!(
            sel("z in (b, a), !y , x notin (),w==v,v!=,u>007,t<1, s").to_string(),
            "s,t<1,u>007,v!=,w==v,x notin (),!y,z in (a,b)"
        );
        assert_eq!(sel("a in (,b)").to_string(), "a in (,b)");
        assert_eq!(sel("").to_string(), "");
    }

    #[test]
    fn display_parses_back_to_the_same_selector() {
        for s in [
            "a=b",
            "a==b",
            "a!=b",
            "a in (x,,y)",
            "a notin (in,notin)",
            "a",
            "!a",
            "a>1",
            "a<2",
            "in=notin",
            "example.com/a=b,c in ()",
        ] {
            let first = sel(s);
            assert_eq!(sel(&first.to_string()), first, "{s}");
        }
    }

    #[test]
    fn exact_finds_a_pinned_value() {
        assert_eq!(sel("a=1").exact("a"), Some("1"));
        assert_eq!(sel("a==1").exact("a"), Some("1"));
        assert_eq!(sel("a in (1)").exact("a"), Some("1"));
        assert_eq!(sel("a in (1,2)").exact("a"), None);
        assert_eq!(sel("a!=1").exact("a"), None);
        assert_eq!(sel("a,a=2").exact("a"), Some("2"));
        assert_eq!(sel("b=1").exact("a"), None);
    }

    #[test]
    fn json_labels_can_be_matched_directly() {
        let v = serde_json::json!({"app": "web", "n": 3});
        let map = v.as_object().unwrap();
        assert!(sel("app=web").matches(map));
        // A non-string value is not a label.
        assert!(sel("!n").matches(map));
    }

    #[test]
    fn implies_holds_for_narrower_selectors() {
        let yes = [
            ("a=1", ""),
            ("a=1", "a"),
            ("a=1,b=2", "b=2"),
            ("a=1", "a in (1,2)"),
            ("a in (1,2)", "a in (2,1,3)"),
            ("a=1", "a!=2"),
            ("a in (1,2)", "a notin (3)"),
            ("a notin (1,2)", "a!=1"),
            ("!a", "a!=1"),
            ("!a", "a notin (1)"),
            ("a>5", "a>3"),
            ("a<3", "a<5"),
            ("a>5", "a"),
            ("a>5", "a!=4"),
            ("a>5", "a!=x"),
            ("a<5", "a notin (7,9)"),
            ("a in (6,7)", "a>5"),
            ("a in (1,2)", "a<3"),
            ("a==1", "a=1"),
        ];
        for (narrow, wide) in yes {
            assert!(sel(narrow).implies(&sel(wide)), "{narrow} => {wide}");
        }
        let no = [
            ("", "a"),
            ("a", "a=1"),
            ("a in (1,2)", "a=1"),
            ("a!=1", "a!=2"),
            ("a!=1", "a"),
            ("a>3", "a>5"),
            ("a>5", "a!=6"),
            ("a in (6,x)", "a>5"),
            ("b=1", "a=1"),
            ("a=1", "!a"),
            ("a notin (1)", "!a"),
        ];
        for (narrow, wide) in no {
            assert!(!sel(narrow).implies(&sel(wide)), "{narrow} =/=> {wide}");
        }
    }
    #[test]
    fn implies_is_sound_for_every_pair_of_single_requirements() {
        let values = ["", "1", "2", "5", "05", "x"];
        let mut texts = vec!["a".to_owned(), "!a".to_owned()];
        for v in values {
            for op in ["=", "==", "!="] {
                texts.push(format!("a{op}{v}"));
            }
            if v.parse::<i64>().is_ok() {
                texts.push(format!("a>{v}"));
                texts.push(format!("a<{v}"));
            }
            for w in values {
                texts.push(format!("a in ({v},{w})"));
                texts.push(format!("a notin ({v},{w})"));
            }
        }
        let selectors: Vec<_> = texts.iter().map(|t| sel(t)).collect();
        let mut universe = vec![labels(&[])];
        universe.extend(values.iter().chain(&["-3", "7", "+2"]).map(|v| labels(&[("a", v)])));
        let mut held = 0;
        for narrow in &selectors {
            for wide in &selectors {
                if narrow.implies(wide) {
                    held += 1;
                    for l in &universe {
                        assert!(!narrow.matches(l) || wide.matches(l), "{narrow} => {wide} fails on {l:?}");
                    }
                }
            }
        }
        assert!(held > selectors.len() * 3, "only {held} implications found");
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    /// A requirement as plain data, with the obvious meaning, to check the parser and matcher against.
    #[derive(Debug, Clone)]
    enum Spec {
        Eq(&'static str, &'static str, &'static str),
        NotEq(&'static str, &'static str),
        In(&'static str, Vec<&'static str>),
        NotIn(&'static str, Vec<&'static str>),
        Exists(&'static str),
        Absent(&'static str),
        Gt(&'static str, i64),
        Lt(&'static str, i64),
    }

    const KEYS: &[&str] = &["a", "b", "in", "example.com/c"];
    const VALUES: &[&str] = &["", "x", "y", "in", "notin", "1", "07", "3", "x.y_z-1"];
    /// What objects may carry besides: values a selector could not name (a `LabelSet` is not validated).
    const ODD_VALUES: &[&str] = &["-3", "+4", "9223372036854775808", " "];

    fn key() -> impl Strategy<Value = &'static str> {
        proptest::sample::select(KEYS)
    }

    fn value() -> impl Strategy<Value = &'static str> {
        proptest::sample::select(VALUES)
    }

    fn spec() -> impl Strategy<Value = Spec> {
        prop_oneof![
            (key(), value(), proptest::sample::select(&["=", "=="][..])).prop_map(|(k, v, op)| Spec::Eq(k, op, v)),
            (key(), value()).prop_map(|(k, v)| Spec::NotEq(k, v)),
            (key(), proptest::collection::vec(value(), 1..4)).prop_map(|(k, v)| Spec::In(k, v)),
            (key(), proptest::collection::vec(value(), 1..4)).prop_map(|(k, v)| Spec::NotIn(k, v)),
            key().prop_map(Spec::Exists),
            key().prop_map(Spec::Absent),
            (key(), 0i64..10).prop_map(|(k, n)| Spec::Gt(k, n)),
            (key(), 0i64..10).prop_map(|(k, n)| Spec::Lt(k, n)),
        ]
    }

    fn render(spec: &Spec) -> String {
        match spec {
            Spec::Eq(k, op, v) => format!("{k}{op}{v}"),
            Spec::NotEq(k, v) => format!("{k} != {v}"),
            Spec::In(k, vs) => format!("{k} in ({})", vs.join(",")),
            Spec::NotIn(k, vs) => format!("{k}\tnotin({})", vs.join(" , ")),
            Spec::Exists(k) => k.to_string(),
            Spec::Absent(k) => format!("!{k}"),
            Spec::Gt(k, n) => format!("{k}>{n}"),
            Spec::Lt(k, n) => format!("{k} < {n}"),
        }
    }

    /// The meaning of a requirement, written out plainly.
    fn holds(spec: &Spec, labels: &BTreeMap<String, String>) -> bool {
        let get = |k: &str| labels.get(k).map(String::as_str);
        let int = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
        match spec {
            Spec::Eq(k, _, v) => get(k) == Some(*v),
            Spec::NotEq(k, v) => get(k) != Some(*v),
            Spec::In(k, vs) => get(k).is_some_and(|l| vs.contains(&l)),
            Spec::NotIn(k, vs) => !get(k).is_some_and(|l| vs.contains(&l)),
            Spec::Exists(k) => get(k).is_some(),
            Spec::Absent(k) => get(k).is_none(),
            Spec::Gt(k, n) => int(k).is_some_and(|l| l > *n),
            Spec::Lt(k, n) => int(k).is_some_and(|l| l < *n),
        }
    }

    fn label_set() -> impl Strategy<Value = BTreeMap<String, String>> {
        let value = prop_oneof![3 => value(), 1 => proptest::sample::select(ODD_VALUES)];
        proptest::collection::btree_map(key().prop_map(str::to_owned), value.prop_map(str::to_owned), 0..4)
    }

    fn selector() -> impl Strategy<Value = LabelSelector> {
        proptest::collection::vec(spec(), 0..4).prop_map(|specs| {
            let text = specs.iter().map(render).collect::<Vec<_>>().join(",");
            LabelSelector::parse(&text).unwrap()
        })
    }

    proptest! {
        /// Packed, every label reads back as the last value given for its
        /// key (empty and non-ASCII ones too), and no other key is found.
        #[test]
        fn labels_read_back_as_given(
            pairs in proptest::collection::vec(("[a-cé/.]{0,5}", ".{0,12}"), 0..24),
            absent in "[a-cé/.]{0,6}",
        ) {
            let labels: Labels = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let expected: BTreeMap<&str, &str> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            prop_assert_eq!(labels.len(), expected.len());
            for (k, v) in &expected {
                prop_assert_eq!(labels.get(k), Some(*v), "{}", k);
            }
            if !expected.contains_key(absent.as_str()) {
                prop_assert_eq!(labels.get(&absent), None);
            }
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = LabelSelector::parse(&s);
        }

        #[test]
        fn parse_never_panics_on_selector_like_text(s in "[a-z0-9 !=(),<>/._\t-]{0,40}|(in|notin|[a(),!=<> ]){0,12}") {
            if let Ok(sel) = LabelSelector::parse(&s) {
                prop_assert_eq!(LabelSelector::parse(&sel.to_string()), Ok(sel));
            }
        }

        #[test]
        fn matches_agrees_with_the_plain_meaning(
            specs in proptest::collection::vec(spec(), 0..5),
            labels in label_set(),
        ) {
            let text = specs.iter().map(render).collect::<Vec<_>>().join(",");
            let sel = LabelSelector::parse(&text).unwrap();
            let expected = specs.iter().all(|s| holds(s, &labels));
            prop_assert_eq!(sel.matches(&labels), expected, "{} on {:?}", text, labels);
        }

        #[test]
        fn canonical_form_parses_back_to_the_same_selector(sel in selector()) {
            prop_assert_eq!(LabelSelector::parse(&sel.to_string()), Ok(sel));
        }

        #[test]
        fn implies_is_sound(narrow in selector(), wide in selector(), labels in label_set()) {
            if narrow.implies(&wide) && narrow.matches(&labels) {
                prop_assert!(wide.matches(&labels), "{} => {} but not on {:?}", narrow, wide, labels);
            }
        }

        #[test]
        fn a_selector_implies_itself_and_everything(sel in selector()) {
            prop_assert!(sel.implies(&sel));
            prop_assert!(sel.implies(&LabelSelector::everything()));
        }
    }
}

#[cfg(test)]
mod fuzz;
