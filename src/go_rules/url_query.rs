//! Query strings read as kube-apiserver reads them: Go's `url.ParseQuery`
//! (through `URL.Query()`; `net/url`, Go 1.26), not the WHATWG form decoding.
//!
//! The differences matter at the trust boundary. A pair that Go drops is
//! invisible to the API server, so watchmux must not act on it either:
//! `?watch=1;` is a LIST to the API server (a pair with a `;` is dropped
//! since Go 1.17) and must not be a watch here; `?labelSelector=%zz` has no
//! selector at all there (a malformed escape drops the pair), and a query of
//! more than 10,000 parameters has none (Go's `urlmaxqueryparams` limit).
//! `Values.Get` takes the first value of a repeated key, even an empty one.

use std::borrow::Cow;

/// Go's default `urlmaxqueryparams`: a query with more parameters (counted
/// as `&` separators plus one) parses to nothing.
const MAX_PARAMS: usize = 10_000;

/// A query string as Go's `url.Values`: the pairs it keeps, in order,
/// borrowed from the query unless an escape had to be decoded (every request
/// is read, selectors of any length included).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct GoQuery<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// A kept key or value decoded to bytes that are not UTF-8. Go keeps
    /// such bytes as they are; here they were replaced (U+FFFD), so a
    /// reader that needs the exact value must not trust it.
    lossy: bool,
}

impl<'a> GoQuery<'a> {
    /// Parses `query` (the raw part after `?`, without it).
    pub(crate) fn parse(query: &'a str) -> Self {
        let mut out = Self::default();
        if query.bytes().filter(|b| *b == b'&').count() + 1 > MAX_PARAMS {
            return out;
        }
        for pair in query.split('&') {
            if pair.contains(';') || pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let (Some((key, lossy_key)), Some((value, lossy_value))) = (unescape(key), unescape(value)) else {
                continue;
            };
            out.lossy |= lossy_key || lossy_value;
            out.pairs.push((key, value));
        }
        out
    }

    /// Parses the query of `uri` (none: no pairs).
    pub(crate) fn of(uri: &'a http::Uri) -> Self {
        uri.query().map(Self::parse).unwrap_or_default()
    }

    /// The first value of `key`, as Go's `Values.Get` (`None` where Go
    /// gives `""` for an absent key, so presence stays visible).
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_ref())
    }

    /// Every kept pair, in the order sent.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    /// True when some kept key or value was not UTF-8 once decoded.
    pub(crate) fn is_lossy(&self) -> bool {
        self.lossy
    }
}

/// Go's `QueryUnescape`: `+` is a space, `%XX` a byte; a `%` without two hex
/// digits is an error (the pair is dropped). Also whether the bytes decoded
/// were not UTF-8 (then replaced, and flagged).
fn unescape(s: &str) -> Option<(Cow<'_, str>, bool)> {
    if !s.contains(['%', '+']) {
        return Some((Cow::Borrowed(s), false));
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hi = (hex[0] as char).to_digit(16)?;
                let lo = (hex[1] as char).to_digit(16)?;
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(match String::from_utf8(out) {
        Ok(s) => (Cow::Owned(s), false),
        Err(e) => (Cow::Owned(String::from_utf8_lossy(e.as_bytes()).into_owned()), true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &str) -> Vec<(String, String)> {
        GoQuery::parse(q).pairs().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }

    #[test]
    fn a_pair_with_a_semicolon_is_dropped_as_go_drops_it() {
        assert_eq!(pairs("watch=1;"), []);
        assert_eq!(pairs("watch=1;&limit=5"), [("limit".to_owned(), "5".to_owned())]);
        assert_eq!(pairs("a=1;b=2"), []);
        // An escaped semicolon is a value like any other.
        assert_eq!(GoQuery::parse("fieldSelector=a%3Bb").get("fieldSelector"), Some("a;b"));
    }

    #[test]
    fn a_malformed_escape_drops_the_pair_not_the_query() {
        let q = GoQuery::parse("labelSelector=%zz&watch=1&fieldSelector=a%4");
        assert_eq!(q.get("labelSelector"), None);
        assert_eq!(q.get("fieldSelector"), None);
        assert_eq!(q.get("watch"), Some("1"));
        assert_eq!(GoQuery::parse("%zz=1").get("%zz"), None);
    }

    #[test]
    fn plus_is_a_space_and_escapes_decode() {
        let q = GoQuery::parse("labelSelector=a+in+(x,%20y)&k%65y=v");
        assert_eq!(q.get("labelSelector"), Some("a in (x, y)"));
        assert_eq!(q.get("key"), Some("v"));
    }

    #[test]
    fn the_first_value_wins_even_when_empty() {
        let q = GoQuery::parse("labelSelector=&labelSelector=a%3Db");
        assert_eq!(q.get("labelSelector"), Some(""));
        assert_eq!(GoQuery::parse("watch&watch=0").get("watch"), Some(""));
        assert_eq!(GoQuery::parse("&&=x&").pairs().collect::<Vec<_>>(), [("", "x")]);
    }

    #[test]
    fn more_than_ten_thousand_parameters_parse_to_nothing() {
        let at_limit = vec!["a=1"; MAX_PARAMS].join("&");
        assert_eq!(GoQuery::parse(&at_limit).pairs().count(), MAX_PARAMS);
        let over = format!("watch=1&{}", vec!["a=1"; MAX_PARAMS].join("&"));
        assert_eq!(GoQuery::parse(&over), GoQuery::default());
        // Go counts separators, not kept pairs: empty ones count too.
        let empties = format!("watch=1{}", "&".repeat(MAX_PARAMS));
        assert_eq!(GoQuery::parse(&empties).get("watch"), None);
    }

    #[test]
    fn bytes_that_are_not_utf8_are_flagged() {
        let q = GoQuery::parse("labelSelector=%ff");
        assert!(q.is_lossy());
        assert!(!GoQuery::parse("labelSelector=%c3%a9").is_lossy());
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(q in "[a-z=&;%+0-9A-F]{0,40}") {
            let parsed = GoQuery::parse(&q);
            for (k, _) in parsed.pairs() {
                proptest::prop_assert!(!k.contains(';') || q.contains("%3B") || q.contains("%3b"));
            }
        }
    }
}
