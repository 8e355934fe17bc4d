//! What the crate's fuzz targets share: how many cases a target runs, and the
//! strategies that make untrusted input (token soups of a parser's own
//! vocabulary, deep repetition) and the round-trip property of a parser that
//! prints a canonical form.
//!
//! Bounded fuzzing, with proptest, of the parsers of untrusted input, each
//! with the property that makes its output trustworthy besides not panicking.
//! Each target lives beside what it fuzzes, as a test-only `fuzz` module:
//!
//! - `selector::label::fuzz`: label selectors;
//! - `selector::field::fuzz`: field selectors and field extraction;
//! - `negotiate::fuzz`: `Accept` negotiation;
//! - `compress::fuzz`: `Accept-Encoding`;
//! - `cache::upstream_wire::fuzz`: upstream watch event lines applied to
//!   a resource cache;
//! - `upstream::kubeconfig::fuzz`: kubeconfig resolution;
//! - `request::fuzz`: request classification of API-ish paths.
//!
//! `cargo test --lib fuzz` runs them all.
//!
//! # Bound
//!
//! Each target runs [`DEFAULT_CASES`] cases: all of them take about 4 s in a debug
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
//! A failure is shrunk to a small input and saved under `proptest-regressions/`
//! (by the target's file: `proptest-regressions/request/fuzz.txt`), which every
//! later run tries first.

use proptest::prelude::*;

/// Cases per target when `WATCHMUX_FUZZ_CASES` is not set.
pub(crate) const DEFAULT_CASES: u32 = 256;

pub(crate) fn config() -> ProptestConfig {
    let cases = std::env::var("WATCHMUX_FUZZ_CASES")
        .map(|v| v.parse().expect("WATCHMUX_FUZZ_CASES is a number of cases"))
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig { cases, ..ProptestConfig::default() }
}

/// A vocabulary in groups of related words; a word repeated is chosen more often.
pub(crate) type Words = &'static [&'static [&'static str]];

pub(crate) fn one_of(words: Words) -> proptest::sample::Select<&'static str> {
    proptest::sample::select(words.concat())
}

/// Text made of `words`, as a parser's own vocabulary appears in odd orders.
pub(crate) fn token_soup(words: Words, max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(one_of(words), 0..max).prop_map(|t| t.concat())
}

/// When `text` parses, it prints a canonical form that parses back to the same value and
/// prints the same again.
pub(crate) fn prints_back<T, E>(text: &str, parse: impl Fn(&str) -> Result<T, E>) -> Result<(), TestCaseError>
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
pub(crate) fn repeated(
    heads: &'static [&'static str],
    units: &'static [&'static str],
    tails: &'static [&'static str],
) -> impl Strategy<Value = String> {
    use proptest::sample::select;
    (select(heads), select(units), 1usize..4096, select(tails))
        .prop_map(|(head, unit, n, tail)| format!("{head}{}{tail}", unit.repeat(n)))
}
