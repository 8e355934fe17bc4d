//! The `Accept` header as kube-apiserver's stack reads it: go-restful's
//! route filter and goautoneg's `ParseAccept` with Go's own sort, float
//! parsing and splitting, replayed byte for byte. What the clauses then mean
//! is decided in the parent module.

/// Go's `sort.Sort` is an insertion sort up to this many elements (pdqsort's `maxInsertion`);
/// beyond it the order of equal and inconsistently ordered clauses is not reproduced here.
pub(super) const GO_INSERTION_SORT_MAX: usize = 12;

/// Longest q value parsed; Go's slow path drops digits of far longer ones.
const MAX_Q_LEN: usize = 64;

/// The media types kube-apiserver's resource routes produce, as go-restful compares them (the
/// `...;stream=watch` entries of the list never equal a bare media type, so are left out).
const ROUTE_PRODUCES: [&[u8]; 3] = [b"application/json", b"application/yaml", b"application/vnd.kubernetes.protobuf"];

/// Marks a header whose meaning to kube-apiserver this module does not reproduce.
#[derive(Debug)]
pub(super) struct Unpredictable;

/// One clause of the header as `goautoneg.ParseAccept` keeps it.
#[derive(Debug)]
pub(super) struct Clause<'a> {
    pub(super) media_type: &'a [u8],
    pub(super) subtype: &'a [u8],
    pub(super) q: f32,
    pub(super) params: Params<'a>,
}

/// The parameters negotiation reads; a later duplicate wins, as in Go's map.
#[derive(Debug, Default)]
pub(super) struct Params<'a> {
    pub(super) kind: Option<&'a [u8]>,
    pub(super) group: Option<&'a [u8]>,
    pub(super) version: Option<&'a [u8]>,
    pub(super) stream: Option<&'a [u8]>,
    pub(super) server_version: Option<&'a [u8]>,
}

impl<'a> Params<'a> {
    fn set(&mut self, key: &[u8], value: &'a [u8]) {
        let slot = match key {
            b"as" => &mut self.kind,
            b"g" => &mut self.group,
            b"v" => &mut self.version,
            b"stream" => &mut self.stream,
            b"sv" => &mut self.server_version,
            _ => return,
        };
        *slot = Some(value);
    }
}

/// Go's HTTP/1 server strips spaces and tabs around a header value and its HTTP/2 server does not;
/// surrounding spaces change nothing below, but tabs, or a value of blanks only, answer differently
/// depending on how watchmux reaches kube-apiserver.
pub(super) fn depends_on_transport(header: &[u8]) -> bool {
    header.first() == Some(&b'\t') || header.last() == Some(&b'\t') || header.iter().all(|&b| b == b' ' || b == b'\t')
}

/// go-restful's `Route.matchesAccept` for a resource route; `cbor` when the route produces
/// `application/cbor` too (the server's CBOR gate on).
pub(super) fn passes_route_filter(header: &[u8], cbor: bool) -> bool {
    header.split(|&b| b == b',').any(|element| {
        let (media_range, _) = split_first(element, b';');
        let media_range = trim_spaces(media_range);
        media_range == b"*/*" || ROUTE_PRODUCES.contains(&media_range) || (cbor && media_range == b"application/cbor")
    })
}

/// `goautoneg.ParseAccept` before its sort.
pub(super) fn parse_clauses(header: &[u8]) -> Result<Vec<Clause<'_>>, Unpredictable> {
    let mut clauses = Vec::new();
    let mut remaining = header;
    while !remaining.is_empty() {
        let (part, rest) = split_first(remaining, b',');
        remaining = rest;
        let (media_range, mut params) = split_first(trim_spaces(part), b';');
        let (media_type, after_slash) = split_first(media_range, b'/');
        let media_type = trim_spaces(media_type);
        // "*" and "*/" mean */*; another range without a subtype, or with a second '/' followed by
        // more, is dropped ("application/json/" is kept as application/json).
        let subtype = if after_slash.is_empty() {
            if media_type != b"*" {
                continue;
            }
            &b"*"[..]
        } else {
            let (subtype, extra) = split_first(after_slash, b'/');
            if !extra.is_empty() {
                continue;
            }
            trim_spaces(subtype)
        };
        let mut clause = Clause { media_type, subtype, q: 1.0, params: Params::default() };
        while !params.is_empty() {
            let (param, rest) = split_first(params, b';');
            params = rest;
            // "key", "key=" and "key=a=b" are dropped; "key=a=" keeps "a".
            let (key, after_eq) = split_first(param, b'=');
            if after_eq.is_empty() {
                continue;
            }
            let (value, extra) = split_first(after_eq, b'=');
            if !extra.is_empty() {
                continue;
            }
            match trim_spaces(key) {
                // The q value is not trimmed.
                b"q" => clause.q = parse_quality(value)?,
                key => clause.params.set(key, trim_spaces(value)),
            }
        }
        clauses.push(clause);
    }
    Ok(clauses)
}

/// Go's `strconv.ParseFloat(q, 32)` with its error ignored, as goautoneg calls it: a syntax error
/// reads as 0, an overflow as ±Inf. `Err` for spellings not reproduced here (hex floats, `_`
/// digit separators, very long values).
pub(super) fn parse_quality(raw: &[u8]) -> Result<f32, Unpredictable> {
    let (negative, unsigned) = match raw.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, raw),
    };
    let hex = unsigned.len() >= 2 && unsigned[0] == b'0' && unsigned[1].eq_ignore_ascii_case(&b'x');
    if hex || raw.contains(&b'_') || raw.len() > MAX_Q_LEN {
        return Err(Unpredictable);
    }
    // strconv's `special`: inf and infinity take a sign, nan does not.
    if unsigned.eq_ignore_ascii_case(b"inf") || unsigned.eq_ignore_ascii_case(b"infinity") {
        return Ok(if negative { f32::NEG_INFINITY } else { f32::INFINITY });
    }
    if raw.eq_ignore_ascii_case(b"nan") {
        return Ok(f32::NAN);
    }
    if !is_decimal(unsigned) {
        return Ok(0.0);
    }
    // Go and Rust both round a decimal correctly to the nearest float32.
    Ok(std::str::from_utf8(raw).ok().and_then(|s| s.parse().ok()).unwrap_or(0.0))
}

/// Digits with at most one '.', at least one digit, then an optional exponent: the unsigned
/// decimal spelling Go's `readFloat` and Rust's `f32::from_str` both take.
fn is_decimal(s: &[u8]) -> bool {
    let (mantissa, exponent) = match s.iter().position(|b| b.eq_ignore_ascii_case(&b'e')) {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    };
    let digits = mantissa.iter().filter(|b| b.is_ascii_digit()).count();
    let dots = mantissa.iter().filter(|&&b| b == b'.').count();
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(b"+").or_else(|| e.strip_prefix(b"-")).unwrap_or(e);
        !e.is_empty() && e.iter().all(u8::is_ascii_digit)
    });
    digits > 0 && dots <= 1 && digits + dots == mantissa.len() && exponent_ok
}

/// `sort.Sort` over goautoneg's `acceptSlice`, for the lengths Go sorts by insertion.
pub(super) fn sort_like_go(clauses: &mut [Clause<'_>]) {
    for i in 1..clauses.len() {
        let mut j = i;
        while j > 0 && go_less(&clauses[j], &clauses[j - 1]) {
            clauses.swap(j, j - 1);
            j -= 1;
        }
    }
}

/// goautoneg's `acceptSlice.Less`.
fn go_less(a: &Clause<'_>, b: &Clause<'_>) -> bool {
    a.q > b.q || (a.media_type != b"*" && b.media_type == b"*") || (a.subtype != b"*" && b.subtype == b"*")
}

/// Go's `nextSplitElement`: the text before the first `sep` and the text after it, or all of `s`
/// and nothing.
pub(super) fn split_first(s: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match s.iter().position(|&b| b == sep) {
        Some(at) => (&s[..at], &s[at + 1..]),
        None => (s, &[]),
    }
}

/// `strings.TrimFunc(s, func(r rune) bool { return r == ' ' })`.
pub(super) fn trim_spaces(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    let end = s.iter().rposition(|&b| b != b' ').map_or(start, |at| at + 1);
    &s[start..end]
}
