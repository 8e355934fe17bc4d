//! Field selectors (`fieldSelector=`), as apimachinery's `fields.ParseSelector`
//! reads them and `fields.Selector.Matches` applies them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::SelectorError;
use super::packed::PackedStrs;

/// The selectable field values of one object.
pub trait FieldSet {
    fn get(&self, field: &str) -> Option<&str>;
}

/// The selectable field values of one object, small and owned: the values
/// in one allocation ([`PackedStrs`]), in the order of the names, which
/// are shared: one sorted list for every object with the same set (every
/// pod has the same eleven), interned for the life of the process.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Fields {
    names: &'static FieldNames,
    values: PackedStrs,
}

/// Field names sorted by [`by_name`], the same list for every object with
/// the same names ([`FieldNames::interned`]).
#[derive(Debug, PartialEq, Eq)]
struct FieldNames(Vec<&'static str>);

static NO_NAMES: FieldNames = FieldNames(Vec::new());

impl FieldNames {
    /// The list of `names` (sorted, no duplicates) that lives as long as the
    /// process, the same one for every call with the same names. The sets
    /// are few (one or two a resource), and one thread decodes one
    /// resource's objects at a time: the last set this thread asked for is
    /// almost always the one asked for again.
    fn interned(names: impl ExactSizeIterator<Item = &'static str> + Clone) -> &'static FieldNames {
        type Sets = parking_lot::RwLock<HashMap<Box<[&'static str]>, &'static FieldNames>>;
        static SETS: std::sync::OnceLock<Sets> = std::sync::OnceLock::new();
        thread_local! {
            static LAST: std::cell::Cell<&'static FieldNames> = const { std::cell::Cell::new(&NO_NAMES) };
        }
        if names.len() == 0 {
            return &NO_NAMES;
        }
        let last = LAST.get();
        if last.0.iter().copied().eq(names.clone()) {
            return last;
        }
        let names: Vec<&'static str> = names.collect();
        let names = names.as_slice();
        let sets = SETS.get_or_init(Default::default);
        let known = sets.read().get(names).copied();
        let interned = known.unwrap_or_else(|| {
            *sets.write().entry(names.into()).or_insert_with(|| Box::leak(Box::new(FieldNames(names.to_vec()))))
        });
        LAST.set(interned);
        interned
    }
}

impl Default for Fields {
    fn default() -> Self {
        Self { names: &NO_NAMES, values: PackedStrs::default() }
    }
}

impl Fields {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Sets `field` to `value`, replacing an earlier value: the fields are
    /// packed again. Building a set goes through [`FieldsBuilder`].
    #[cfg(test)]
    pub(crate) fn insert(&mut self, field: &'static str, value: impl Into<String>) {
        let mut builder = FieldsBuilder::with_capacity(self.len() + 1);
        for (f, v) in self.iter() {
            builder.insert(f, v);
        }
        builder.insert(field, value);
        *self = builder.build();
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> {
        self.names.0.iter().copied().zip(self.values.iter())
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.names.0.len()
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FieldSet for Fields {
    fn get(&self, field: &str) -> Option<&str> {
        let i = self.names.0.binary_search_by(|f| by_name(f, field)).ok()?;
        self.values.get(i)
    }
}

/// A [`Fields`] in the making: the values one by one, then packed once.
#[derive(Debug, Default)]
pub(crate) struct FieldsBuilder(Vec<(&'static str, String)>);

impl FieldsBuilder {
    /// Room for `fields` fields.
    pub(crate) fn with_capacity(fields: usize) -> Self {
        Self(Vec::with_capacity(fields))
    }

    /// Sets `field` to `value`, replacing an earlier value. A name that is
    /// not a constant comes from [`intern`].
    pub(crate) fn insert(&mut self, field: &'static str, value: impl Into<String>) {
        let value = value.into();
        match self.0.binary_search_by(|(f, _)| by_name(f, field)) {
            Ok(i) => self.0[i].1 = value,
            Err(i) => self.0.insert(i, (field, value)),
        }
    }

    pub(crate) fn build(self) -> Fields {
        let names = FieldNames::interned(self.0.iter().map(|(f, _)| *f));
        Fields { names, values: PackedStrs::new(self.0.iter().map(|(_, v)| v)) }
    }
}

/// The order [`Fields`] keeps: most names of one kind differ in length
/// (`spec.nodeName`, `status.phase`), so most comparisons of a lookup are
/// one integer compare rather than a string compare past a shared `spec.`.
fn by_name(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

impl<F: AsRef<str>, V: Into<String>> FromIterator<(F, V)> for Fields {
    fn from_iter<I: IntoIterator<Item = (F, V)>>(iter: I) -> Self {
        let mut fields = FieldsBuilder::default();
        for (f, v) in iter {
            fields.insert(intern(f.as_ref()), v);
        }
        fields.build()
    }
}

/// `name` as a string that lives as long as the process, the same one for
/// every call with the same text. For field names that are not constants
/// (a custom resource's selectable fields): the set grows with the distinct
/// names the CRDs ever declared, not with objects.
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: std::sync::OnceLock<parking_lot::RwLock<std::collections::HashSet<&'static str>>> =
        std::sync::OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    if let Some(known) = names.read().get(name) {
        return known;
    }
    let mut names = names.write();
    match names.get(name) {
        Some(known) => known,
        None => {
            let leaked: &'static str = Box::leak(name.into());
            names.insert(leaked);
            leaked
        }
    }
}

impl FieldSet for BTreeMap<String, String> {
    fn get(&self, field: &str) -> Option<&str> {
        BTreeMap::get(self, field).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> FieldSet for HashMap<String, String, S> {
    fn get(&self, field: &str) -> Option<&str> {
        HashMap::get(self, field).map(String::as_str)
    }
}

/// `=` and `==` are both `Eq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOp {
    Eq,
    NotEq,
}

/// One comma-separated term: `field=value` or `field!=value`, the value unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FieldRequirement {
    pub field: String,
    pub op: FieldOp,
    pub value: String,
}

impl FieldRequirement {
    /// `hasTerm` / `notHasTerm` `Matches`: an absent field reads as `""`, like
    /// a `fields.Set` lookup does.
    pub fn matches(&self, fields: &(impl FieldSet + ?Sized)) -> bool {
        let actual = fields.get(&self.field).unwrap_or("");
        match self.op {
            FieldOp::Eq => actual == self.value,
            FieldOp::NotEq => actual != self.value,
        }
    }

    fn implies(&self, other: &FieldRequirement) -> bool {
        self.field == other.field
            && match (self.op, other.op) {
                (FieldOp::Eq, FieldOp::Eq) | (FieldOp::NotEq, FieldOp::NotEq) => self.value == other.value,
                (FieldOp::Eq, FieldOp::NotEq) => self.value != other.value,
                (FieldOp::NotEq, FieldOp::Eq) => false,
            }
    }
}

/// `hasTerm.String` / `notHasTerm.String`: the value escaped so that it parses back.
impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Eq => "=",
            FieldOp::NotEq => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// `fields.EscapeValue`: backslash before `\`, `,` and `=`.
fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `fields.UnescapeValue`.
fn unescape_value(raw: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(raw.len());
    let mut in_slash = false;
    for c in raw.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::FieldEscape { sequence: format!("\\{c}") });
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => return Err(SelectorError::FieldUnescaped { character: c }),
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError::FieldEscape { sequence: "\\".to_owned() });
    }
    Ok(out)
}

/// `splitTerms`: split on commas not escaped by a backslash (anywhere in the term, the field included).
fn split_terms(selector: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// `splitTerm`: the field is everything before the first operator; at one
/// position `!=` wins over `==`, which wins over `=`.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (text, op) in [("!=", FieldOp::NotEq), ("==", FieldOp::Eq), ("=", FieldOp::Eq)] {
            if let Some(value) = rest.strip_prefix(text) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

/// A parsed `fieldSelector`: the AND of its requirements.
///
/// Requirements are kept in the order of their canonical text. That is the
/// order in which kube-apiserver checks the fields a selector names (it sorts
/// the raw terms, and the two orders only differ between terms on the same
/// field), so the first field [`super::selectable::validate`] rejects is the one the API server names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// `fields.ParseSelector`: `=`, `==`, `!=`, comma is AND, backslash escapes
    /// `\`, `,` and `=` in values. Empty terms are skipped, and so is a term
    /// with neither field nor value (`=` alone selects everything, as in the API server).
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut terms = split_terms(s);
        // Sorted first so that the error for the first bad term is the API server's.
        terms.sort_unstable();
        let mut requirements = Vec::new();
        for term in terms {
            if term.is_empty() {
                continue;
            }
            let (field, op, raw_value) = split_term(term)
                .ok_or_else(|| SelectorError::FieldTerm { selector: s.to_owned(), term: term.to_owned() })?;
            let value = unescape_value(raw_value)?;
            requirements.push(FieldRequirement { field: field.to_owned(), op, value });
        }
        Ok(requirements.into_iter().collect())
    }

    /// The selector that matches every object.
    pub fn everything() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether an object with these field values is selected; a field absent from the set compares as `""`.
    pub fn matches(&self, fields: &(impl FieldSet + ?Sized)) -> bool {
        self.requirements.iter().all(|r| r.matches(fields))
    }

    /// The value of an Eq requirement on `field`, if any (for index lookups:
    /// metadata.name, metadata.namespace, spec.nodeName). Like `RequiresExactMatch`,
    /// the first one when there are several.
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.requirements.iter().find(|r| r.op == FieldOp::Eq && r.field == field).map(|r| r.value.as_str())
    }

    /// True when every object matching self also matches `scope` (conservative:
    /// may say false when it is true). Each requirement of `scope` must follow
    /// from a single requirement of self; aliases such as `spec.host` are not
    /// resolved.
    pub fn implies(&self, scope: &FieldSelector) -> bool {
        scope.requirements.iter().all(|r| self.requirements.iter().any(|s| s.implies(r)))
    }
}

/// Requirements in canonical order; a term with neither field nor value is
/// dropped, as `Transform` drops it in apimachinery.
impl FromIterator<FieldRequirement> for FieldSelector {
    fn from_iter<I: IntoIterator<Item = FieldRequirement>>(iter: I) -> Self {
        let mut requirements: Vec<_> =
            iter.into_iter().filter(|r| !(r.field.is_empty() && r.value.is_empty())).collect();
        requirements.sort_by_cached_key(FieldRequirement::to_string);
        Self { requirements }
    }
}

/// `fields.Selector.String`, which parses back to an equal selector.
impl fmt::Display for FieldSelector {
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

    fn sel(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn req(field: &str, op: FieldOp, value: &str) -> FieldRequirement {
        FieldRequirement { field: field.into(), op, value: value.into() }
    }

    fn set(pairs: &[(&str, &str)]) -> Fields {
        pairs.iter().copied().collect()
    }

    #[test]
    fn interned_names_are_one_string_per_text() {
        let a = intern(&String::from("spec.custom"));
        let b = intern(&["spec.", "custom"].concat());
        assert_eq!(a, "spec.custom");
        assert!(std::ptr::eq(a, b), "the second call returns the first string");
        assert!(!std::ptr::eq(a, intern("spec.other")));
    }

    #[test]
    fn equals_double_equals_and_not_equals_parse() {
        assert_eq!(sel("a=b").requirements(), [req("a", FieldOp::Eq, "b")]);
        assert_eq!(sel("a==b").requirements(), [req("a", FieldOp::Eq, "b")]);
        assert_eq!(sel("a!=b").requirements(), [req("a", FieldOp::NotEq, "b")]);
        assert_eq!(sel("a=").requirements(), [req("a", FieldOp::Eq, "")]);
        assert_eq!(sel("a!=").requirements(), [req("a", FieldOp::NotEq, "")]);
    }

    #[test]
    fn the_field_ends_at_the_first_operator() {
        assert_eq!(sel("a!b=c").requirements(), [req("a!b", FieldOp::Eq, "c")]);
        assert_eq!(sel("a!!=c").requirements(), [req("a!", FieldOp::NotEq, "c")]);
        assert_eq!(sel(" a = b ").requirements(), [req(" a ", FieldOp::Eq, " b ")]);
        // A backslash in the field stays in the field.
        assert_eq!(sel(r"a\,b=c").requirements(), [req(r"a\,b", FieldOp::Eq, "c")]);
        assert_eq!(sel(r"a\=b").requirements(), [req(r"a\", FieldOp::Eq, "b")]);
    }

    #[test]
    fn backslash_escapes_backslash_comma_and_equals_in_values() {
        assert_eq!(sel(r"a=x\,y").requirements(), [req("a", FieldOp::Eq, "x,y")]);
        assert_eq!(sel(r"a=x\=y").requirements(), [req("a", FieldOp::Eq, "x=y")]);
        assert_eq!(sel(r"a=x\\y").requirements(), [req("a", FieldOp::Eq, r"x\y")]);
        assert_eq!(sel(r"a=\\\,\=").requirements(), [req("a", FieldOp::Eq, r"\,=")]);
        assert_eq!(sel(r"a!=x\,y,b=z").requirements(), [req("a", FieldOp::NotEq, "x,y"), req("b", FieldOp::Eq, "z")]);
    }

    #[test]
    fn bad_escapes_and_bare_specials_are_the_api_servers_errors() {
        // Messages verified against kube-apiserver v1.37.2.
        let msg = |s: &str| FieldSelector::parse(s).unwrap_err().to_string();
        assert_eq!(msg(r"metadata.name=a\x"), r"invalid field selector: invalid escape sequence: \x");
        assert_eq!(msg(r"metadata.name=a\"), r"invalid field selector: invalid escape sequence: \");
        assert_eq!(msg("metadata.name===x"), "invalid field selector: unescaped character in value: 61");
        assert_eq!(msg("a=b=c"), "invalid field selector: unescaped character in value: 61");
        assert_eq!(msg("foo"), "invalid selector: 'foo'; can't understand 'foo'");
        assert_eq!(msg("metadata.name=a,foo"), "invalid selector: 'metadata.name=a,foo'; can't understand 'foo'");
        assert_eq!(msg("a!b"), "invalid selector: 'a!b'; can't understand 'a!b'");
    }

    #[test]
    fn empty_terms_and_bare_operators_select_everything() {
        // kube-apiserver v1.37.2 lists every object for each of these.
        for s in ["", ",", ",,", "=", "==", "!=", ",=,"] {
            assert!(sel(s).is_empty(), "{s:?}");
        }
        assert_eq!(sel(",,metadata.name=x,").requirements(), [req("metadata.name", FieldOp::Eq, "x")]);
        // A value without a field is a requirement (on the field "").
        assert_eq!(sel("=x").requirements(), [req("", FieldOp::Eq, "x")]);
    }

    #[test]
    fn requirements_follow_the_api_servers_sorted_order() {
        let fields: Vec<_> = sel("zzz=1,aaa=2,a.b=3,a=4").requirements().iter().map(|r| r.field.clone()).collect();
        assert_eq!(fields, ["a.b", "a", "aaa", "zzz"]);
        assert_eq!(sel("b=1,a==2").to_string(), "a=2,b=1");
    }

    #[test]
    fn absent_field_compares_as_empty() {
        assert!(sel("a=").matches(&set(&[])));
        assert!(!sel("a=x").matches(&set(&[])));
        assert!(sel("a!=x").matches(&set(&[])));
        assert!(!sel("a!=").matches(&set(&[])));
        assert!(sel("a=").matches(&set(&[("a", "")])));
    }

    #[test]
    fn matches_is_and_of_exact_comparisons() {
        let f = set(&[("a", "1"), ("b", "x,y")]);
        assert!(sel("a=1").matches(&f));
        assert!(sel(r"a=1,b=x\,y").matches(&f));
        assert!(!sel("a=1,b=x").matches(&f));
        assert!(sel("a!=2,b!=x").matches(&f));
        assert!(!sel("a=1,a=2").matches(&f));
        assert!(FieldSelector::everything().matches(&f));
    }

    #[test]
    fn exact_finds_the_first_eq_requirement() {
        let s = sel("spec.nodeName=n1,metadata.name!=x");
        assert_eq!(s.exact("spec.nodeName"), Some("n1"));
        assert_eq!(s.exact("metadata.name"), None);
        assert_eq!(sel("a=1,a=2").exact("a"), Some("1"));
        assert_eq!(sel("a=").exact("a"), Some(""));
    }

    #[test]
    fn display_escapes_values_and_parses_back() {
        let s = sel(r"b!=x\,y\\,a==z\=");
        assert_eq!(s.to_string(), r"a=z\=,b!=x\,y\\");
        assert_eq!(sel(&s.to_string()), s);
        assert_eq!(sel("").to_string(), "");
    }

    #[test]
    fn implies_holds_for_narrower_selectors() {
        assert!(sel("a=1").implies(&sel("")));
        assert!(sel("a=1,b=2").implies(&sel("a=1")));
        assert!(sel("a=1").implies(&sel("a!=2")));
        assert!(sel("a!=1,b=2").implies(&sel("a!=1")));
        assert!(!sel("").implies(&sel("a=1")));
        assert!(!sel("a!=2").implies(&sel("a=1")));
        assert!(!sel("a=1").implies(&sel("a!=1")));
        assert!(!sel("a=1").implies(&sel("b=1")));
        assert!(!sel("a!=1").implies(&sel("a!=2")));
    }

    #[test]
    fn fields_keep_one_sorted_value_per_field() {
        let mut f = Fields::new();
        f.insert("b", "1");
        f.insert("a", "2");
        f.insert("b", "3");
        assert_eq!(f.iter().collect::<Vec<_>>(), [("a", "2"), ("b", "3")]);
        assert_eq!(f.get("b"), Some("3"));
        assert_eq!(f.get("c"), None);
        assert_eq!(f.len(), 2);
        assert_eq!(f, set(&[("b", "3"), ("a", "2")]));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    const FIELDS: &[&str] = &["metadata.name", "spec.nodeName", "a", "a.b", "x!y"];
    const VALUES: &[&str] = &["", "n1", "a,b", "x=y", r"back\slash", "é", " "];

    fn requirement() -> impl Strategy<Value = FieldRequirement> {
        (
            proptest::sample::select(FIELDS),
            prop_oneof![Just(FieldOp::Eq), Just(FieldOp::NotEq)],
            proptest::sample::select(VALUES),
        )
            .prop_map(|(f, op, v)| FieldRequirement { field: f.into(), op, value: v.into() })
    }

    fn fields() -> impl Strategy<Value = Fields> {
        proptest::collection::vec((proptest::sample::select(FIELDS), proptest::sample::select(VALUES)), 0..4)
            .prop_map(|pairs| pairs.into_iter().collect())
    }

    /// Writes requirements as a client might: `==` or `=` for Eq, escaped values.
    fn render(reqs: &[FieldRequirement], double: &[bool]) -> String {
        reqs.iter()
            .zip(double.iter().chain(std::iter::repeat(&false)))
            .map(|(r, &double)| {
                let op = match (r.op, double) {
                    (FieldOp::Eq, false) => "=",
                    (FieldOp::Eq, true) => "==",
                    (FieldOp::NotEq, _) => "!=",
                };
                format!("{}{op}{}", r.field, escape_value(&r.value))
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    proptest! {
        /// Packed, every field reads back as the last value given for it
        /// (empty and non-ASCII ones too), in name order, and no other does.
        #[test]
        fn fields_read_back_as_given(
            pairs in proptest::collection::vec(("[a-zé.]{0,6}", ".{0,12}"), 0..24),
            absent in "[a-zé.]{0,7}",
        ) {
            let fields: Fields = pairs.iter().map(|(f, v)| (f.as_str(), v.as_str())).collect();
            let expected: BTreeMap<&str, &str> = pairs.iter().map(|(f, v)| (f.as_str(), v.as_str())).collect();
            prop_assert_eq!(fields.len(), expected.len());
            for (f, v) in &expected {
                prop_assert_eq!(fields.get(f), Some(*v), "{}", f);
            }
            if !expected.contains_key(absent.as_str()) {
                prop_assert_eq!(fields.get(&absent), None);
            }
            let mut in_order: Vec<(&str, &str)> = expected.into_iter().collect();
            in_order.sort_by(|(a, _), (b, _)| by_name(a, b));
            prop_assert_eq!(fields.iter().collect::<Vec<_>>(), in_order);
            let again: Fields = fields.iter().collect();
            prop_assert_eq!(again, fields);
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in any::<String>()) {
            let _ = FieldSelector::parse(&s);
        }

        #[test]
        fn parse_never_panics_on_selector_like_text(s in r"[a.!=,\\é ]{0,30}") {
            if let Ok(sel) = FieldSelector::parse(&s) {
                prop_assert_eq!(FieldSelector::parse(&sel.to_string()), Ok(sel));
            }
        }

        #[test]
        fn matches_agrees_with_the_plain_meaning(
            reqs in proptest::collection::vec(requirement(), 0..5),
            double in proptest::collection::vec(any::<bool>(), 0..5),
            fields in fields(),
        ) {
            let text = render(&reqs, &double);
            let sel = FieldSelector::parse(&text).unwrap();
            let expected = reqs.iter().all(|r| {
                let actual = fields.iter().find(|(f, _)| *f == r.field).map_or("", |(_, v)| v);
                (actual == r.value) == (r.op == FieldOp::Eq)
            });
            prop_assert_eq!(sel.matches(&fields), expected, "{} on {:?}", text, fields);
        }

        #[test]
        fn canonical_form_parses_back_to_the_same_selector(
            reqs in proptest::collection::vec(requirement(), 0..5),
            double in proptest::collection::vec(any::<bool>(), 0..5),
        ) {
            let sel = FieldSelector::parse(&render(&reqs, &double)).unwrap();
            prop_assert_eq!(FieldSelector::parse(&sel.to_string()), Ok(sel));
        }

        #[test]
        fn implies_is_sound(
            narrow in proptest::collection::vec(requirement(), 0..4),
            wide in proptest::collection::vec(requirement(), 0..3),
            fields in fields(),
        ) {
            let narrow: FieldSelector = narrow.into_iter().collect();
            let wide: FieldSelector = wide.into_iter().collect();
            if narrow.implies(&wide) && narrow.matches(&fields) {
                prop_assert!(wide.matches(&fields), "{} => {} but not on {:?}", narrow, wide, fields);
            }
        }
    }
}

#[cfg(test)]
mod fuzz;
