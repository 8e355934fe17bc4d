//! Content negotiation for responses watchmux builds from its cache.
//!
//! The cache writes JSON only, in two forms: the object as stored, and `PartialObjectMetadata`
//! (metadata only, what client-go metadata informers and kube-rs metadata calls ask for). For every
//! GET, LIST and WATCH, [`negotiate`] reads the `Accept` header and decides: serve from the cache in
//! one of those forms, or pass the request through to kube-apiserver, which then answers it exactly
//! (a 406 included). Passing through is always correct; serving is only allowed when the cache's
//! answer is one kube-apiserver could have given.
//!
//! # What kube-apiserver does with `Accept`
//!
//! Two steps, both replayed here byte for byte (Go compares case-sensitively and trims only spaces):
//!
//! 1. **Route filter** (go-restful `Route.matchesAccept`, in front of every built-in resource): some
//!    comma-separated element, cut at its first `;` and trimmed, must be exactly `*/*` or a media
//!    type the route produces (`application/json`, `application/yaml`,
//!    `application/vnd.kubernetes.protobuf`); q is ignored. Otherwise 406. So `application/*` or
//!    `*` alone is refused, although step 2 would take either.
//! 2. **`NegotiateMediaTypeOptions`** (k8s.io/apiserver `endpoints/handlers/negotiation`) over
//!    `goautoneg.ParseAccept`'s clauses. These are sorted by Go's `sort.Sort` with a comparator
//!    that is no strict order (higher q first, else a concrete type before `*`, else a concrete
//!    subtype before `*`); for up to 12 clauses that is an insertion sort, reproduced here, so
//!    `*/*,application/yaml;q=0.5` gets YAML and `application/yaml;q=0.5,*/*` gets JSON. The first
//!    clause naming JSON, YAML or protobuf (exactly, as `application/*` or as `*/*`, tried in that
//!    order) with acceptable parameters wins; clauses for anything else are skipped. Parameters:
//!    `as`/`g`/`v` must name `Table` (JSON and YAML only) or `PartialObjectMetadata[List]` of
//!    `meta.k8s.io/v1` or `v1beta1`; `stream` must be `watch` (not on YAML); `sv` must be `v1`;
//!    a parameter without a value is dropped; anything else is ignored. A q that does not parse
//!    counts as 0, and q=0 still accepts.
//!
//! Then this module serves kube-apiserver's choice when it is JSON of a form the cache has, and
//! passes everything else through, with one deliberate difference: when kube-apiserver would
//! answer protobuf and the next thing the client accepts is JSON of the same form, the cache
//! answers that JSON (the Content-Type tells the client's decoder; typed clientsets, the kubelet
//! and metadata informers all send `protobuf, json`). When the header cannot be predicted exactly
//! (hex or `_` q values, more than 12 clauses, leading or trailing tabs, CBOR, whose support is a
//! server flag), the request passes through.
//!
//! # Checked against kube-apiserver v1.37.2
//!
//! `POM` is `as=PartialObjectMetadata;g=meta.k8s.io;v=v1`, `POML` the same with
//! `as=PartialObjectMetadataList`; `pb` is `application/vnd.kubernetes.protobuf`.
//!
//! | request | Accept | answer |
//! |---|---|---|
//! | GET, LIST | none, `application/json`, `*/*`, `application/json;stream=watch` | 200 `application/json` |
//! | GET | `application/json;POM` | 200 `application/json`, kind `PartialObjectMetadata` |
//! | LIST | `application/json;POML` | 200 `application/json`, kind `PartialObjectMetadataList` (1) |
//! | WATCH | none, `application/json`, `application/json;stream=watch`, `*/*` | 200 `application/json` (2) |
//! | WATCH | `application/json;POM` | 200 `application/json`, events as in (3) |
//! | GET, LIST | `pb`, `pb;POM`, `pb;POML` | 200 `application/vnd.kubernetes.protobuf` |
//! | WATCH | `pb`, `pb;POM` | 200 `application/vnd.kubernetes.protobuf;stream=watch` |
//! | any | `application/*` or `*` alone; `Application/JSON` | 406 from the route filter |
//! | GET / LIST | `…;POML` / `…;POM` | 406 NotAcceptable |
//! | WATCH | `application/json;POML` | 200 `application/json`, the stream ends at the first event |
//! | WATCH | `application/yaml` first | 406, the Status written in YAML |
//! | any | `…;v=v1beta1` metadata | objects with `apiVersion: meta.k8s.io/v1beta1` (passed through) |
//!
//! 1. Every list item is `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}}`;
//!    an empty list has `"items":null`, where typed lists have `"items":[]`.
//! 2. Without `;stream=watch`: `handlers/watch.go` writes JSON "as-is" and adds the parameter only
//!    to other media types (protobuf).
//! 3. Every event object, BOOKMARK included, becomes
//!    `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}}` (the whole
//!    `metadata`, managedFields too; a bookmark has only `resourceVersion`, plus the
//!    `k8s.io/initial-events-end` annotation at the end of a watch-list); an ERROR event keeps its
//!    `{"kind":"Status","apiVersion":"v1",...}`.

use http::HeaderValue;

/// The media type of every response the cache writes.
const JSON: &str = "application/json";

/// Go's `sort.Sort` is an insertion sort up to this many elements (pdqsort's `maxInsertion`);
/// beyond it the order of equal and inconsistently ordered clauses is not reproduced here.
const GO_INSERTION_SORT_MAX: usize = 12;

/// Longest q value parsed; Go's slow path drops digits of far longer ones.
const MAX_Q_LEN: usize = 64;

/// The media types kube-apiserver's resource routes produce, as go-restful compares them (the
/// `...;stream=watch` entries of the list never equal a bare media type, so are left out).
const ROUTE_PRODUCES: [&[u8]; 3] = [b"application/json", b"application/yaml", b"application/vnd.kubernetes.protobuf"];

/// A representation the cache can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentVariant {
    /// The object as stored, with the resource's own `kind` and `apiVersion`.
    Json,
    /// `meta.k8s.io/v1` `PartialObjectMetadata` (GET and every WATCH event object, bookmarks too)
    /// or `PartialObjectMetadataList` (LIST).
    PartialObjectMetadataJson,
}

impl ContentVariant {
    /// The Content-Type header of a response in this variant for this endpoint, exactly as
    /// kube-apiserver sends it. It never echoes the request's parameters: the handlers write the
    /// serializer's bare media type, and a JSON watch keeps it without `;stream=watch`
    /// (k8s.io/apiserver `handlers/watch.go`, `serveWatchHandler`).
    pub fn content_type(self, endpoint: Endpoint) -> &'static str {
        match (self, endpoint) {
            (Self::Json, Endpoint::Get | Endpoint::List | Endpoint::Watch) => JSON,
            (Self::PartialObjectMetadataJson, Endpoint::Get | Endpoint::List | Endpoint::Watch) => JSON,
        }
    }
}

/// The kind of read a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// One named object.
    Get,
    /// A collection.
    List,
    /// `?watch=true`, a watch-list, or the legacy `/watch/` paths.
    Watch,
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Negotiation {
    /// Answer from the cache in this variant.
    Cache(ContentVariant),
    /// Forward to kube-apiserver.
    Passthrough(PassthroughReason),
}

/// Why a request goes to kube-apiserver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassthroughReason {
    /// kube-apiserver would answer a `meta.k8s.io` Table (kubectl get).
    Table,
    /// kube-apiserver would answer protobuf, and the client accepts no JSON of the same form
    /// before anything else.
    Protobuf,
    /// kube-apiserver would answer YAML, CBOR or `meta.k8s.io/v1beta1` metadata, or its answer
    /// cannot be predicted from the header alone.
    OtherMediaType,
    /// kube-apiserver refuses with 406 (a metadata list asked on a watch: a 200 stream that ends at
    /// its first event).
    NotAcceptable,
}

impl PassthroughReason {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::Protobuf => "protobuf",
            Self::OtherMediaType => "other_media_type",
            Self::NotAcceptable => "not_acceptable",
        }
    }
}

/// Decides how to answer a read with this `Accept` header (the first one, as Go's
/// `Header.Get` reads it).
pub fn negotiate(accept: Option<&HeaderValue>, endpoint: Endpoint) -> Negotiation {
    use Negotiation::Passthrough;
    use PassthroughReason::{NotAcceptable, OtherMediaType};

    let header = accept.map_or(&b""[..], HeaderValue::as_bytes);
    if header.is_empty() {
        // NegotiateMediaTypeOptions gives an empty header the first serializer; go-restful reads
        // it as */*.
        return Negotiation::Cache(ContentVariant::Json);
    }
    if depends_on_transport(header) {
        return Passthrough(OtherMediaType);
    }
    if !passes_route_filter(header) {
        return Passthrough(NotAcceptable);
    }
    let Ok(mut clauses) = parse_clauses(header) else {
        return Passthrough(OtherMediaType);
    };
    if clauses.len() > GO_INSERTION_SORT_MAX {
        return Passthrough(OtherMediaType);
    }
    sort_like_go(&mut clauses);
    let mut verdicts = clauses.iter().map(verdict).filter(|v| *v != Verdict::Skip);
    match verdicts.next() {
        None => Passthrough(NotAcceptable),
        Some(Verdict::Skip | Verdict::Unknown) => Passthrough(OtherMediaType),
        Some(Verdict::Serve(serializer, conversion)) => decide(serializer, conversion, endpoint, verdicts),
    }
}

/// The answer once kube-apiserver's choice is known; `later` are the clauses after it that
/// kube-apiserver would accept, in its order.
fn decide(
    serializer: Serializer,
    conversion: Conversion,
    endpoint: Endpoint,
    later: impl Iterator<Item = Verdict>,
) -> Negotiation {
    use Negotiation::{Cache, Passthrough};
    use PassthroughReason::{NotAcceptable, OtherMediaType, Protobuf, Table};

    let variant = match conversion {
        Conversion::Table => return Passthrough(Table),
        // The handlers answer 406 for a list form on a single object and the reverse; a watch
        // fails to encode its first event instead.
        Conversion::Metadata { list, .. } if list != (endpoint == Endpoint::List) => {
            return Passthrough(NotAcceptable);
        }
        Conversion::None => Some(ContentVariant::Json),
        Conversion::Metadata { version: MetaVersion::V1, .. } => Some(ContentVariant::PartialObjectMetadataJson),
        // The cache writes meta.k8s.io/v1 only.
        Conversion::Metadata { version: MetaVersion::V1beta1, .. } => None,
    };
    match (serializer, variant) {
        (Serializer::Json, Some(variant)) => Cache(variant),
        (Serializer::Json | Serializer::Yaml, _) => Passthrough(OtherMediaType),
        (Serializer::Protobuf, None) => Passthrough(Protobuf),
        (Serializer::Protobuf, Some(variant)) => {
            for next in later {
                match next {
                    Verdict::Serve(Serializer::Protobuf, _) => {}
                    Verdict::Serve(Serializer::Json, same) if same == conversion => return Cache(variant),
                    _ => break,
                }
            }
            Passthrough(Protobuf)
        }
    }
}

/// Marks a header whose meaning to kube-apiserver this module does not reproduce.
#[derive(Debug)]
struct Unpredictable;

/// The serializers kube-apiserver offers for built-in resources, in `SupportedMediaTypes` order.
/// CBOR (alpha, off by default) would come last; see [`Verdict::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Serializer {
    Json,
    Yaml,
    Protobuf,
}

impl Serializer {
    const ALL: [Self; 3] = [Self::Json, Self::Yaml, Self::Protobuf];

    fn subtype(self) -> &'static [u8] {
        match self {
            Self::Json => b"json",
            Self::Yaml => b"yaml",
            Self::Protobuf => b"vnd.kubernetes.protobuf",
        }
    }

    /// Whether it has a stream serializer, which `stream=watch` needs.
    fn streams(self) -> bool {
        !matches!(self, Self::Yaml)
    }
}

/// The `as`/`g`/`v` transformation of a clause kube-apiserver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conversion {
    None,
    Table,
    Metadata { list: bool, version: MetaVersion },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MetaVersion {
    V1,
    V1beta1,
}

/// What kube-apiserver does with one clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing it serves matches; it tries the next clause.
    Skip,
    /// It answers with this serializer and transformation.
    Serve(Serializer, Conversion),
    /// `application/cbor`: served only where the CBOR feature gate is on.
    Unknown,
}

/// One clause of the header as `goautoneg.ParseAccept` keeps it.
#[derive(Debug)]
struct Clause<'a> {
    media_type: &'a [u8],
    subtype: &'a [u8],
    q: f32,
    params: Params<'a>,
}

/// The parameters negotiation reads; a later duplicate wins, as in Go's map.
#[derive(Debug, Default)]
struct Params<'a> {
    kind: Option<&'a [u8]>,
    group: Option<&'a [u8]>,
    version: Option<&'a [u8]>,
    stream: Option<&'a [u8]>,
    server_version: Option<&'a [u8]>,
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
fn depends_on_transport(header: &[u8]) -> bool {
    header.first() == Some(&b'\t') || header.last() == Some(&b'\t') || header.iter().all(|&b| b == b' ' || b == b'\t')
}

/// go-restful's `Route.matchesAccept` for a resource route.
fn passes_route_filter(header: &[u8]) -> bool {
    header.split(|&b| b == b',').any(|element| {
        let (media_range, _) = split_first(element, b';');
        let media_range = trim_spaces(media_range);
        media_range == b"*/*" || ROUTE_PRODUCES.contains(&media_range)
    })
}

/// `goautoneg.ParseAccept` before its sort.
fn parse_clauses(header: &[u8]) -> Result<Vec<Clause<'_>>, Unpredictable> {
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
fn parse_quality(raw: &[u8]) -> Result<f32, Unpredictable> {
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
fn sort_like_go(clauses: &mut [Clause<'_>]) {
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

/// The inner loop of `NegotiateMediaTypeOptions` for one clause.
fn verdict(clause: &Clause<'_>) -> Verdict {
    if clause.media_type == b"application" && clause.subtype == b"cbor" {
        return Verdict::Unknown;
    }
    Serializer::ALL
        .into_iter()
        .filter(|serializer| match (clause.media_type, clause.subtype) {
            (b"*", b"*") | (b"application", b"*") => true,
            (b"application", subtype) => subtype == serializer.subtype(),
            _ => false,
        })
        .find_map(|serializer| {
            accepted_conversion(&clause.params, serializer).map(|conversion| Verdict::Serve(serializer, conversion))
        })
        .unwrap_or(Verdict::Skip)
}

/// `acceptMediaTypeOptions` with the resource scope's `AllowsMediaTypeTransform`,
/// `AllowsStreamSchema` and `AllowsServerVersion`; `None` when the clause is refused.
fn accepted_conversion(params: &Params<'_>, serializer: Serializer) -> Option<Conversion> {
    if params.stream.is_some_and(|s| !s.is_empty() && (!serializer.streams() || s != b"watch")) {
        return None;
    }
    // The scope's MetaGroupVersion is meta.k8s.io/v1 for every group.
    if params.server_version.is_some_and(|sv| !sv.is_empty() && sv != b"v1") {
        return None;
    }
    if params.kind.is_none() && params.group.is_none() && params.version.is_none() {
        return Some(Conversion::None);
    }
    let version = match (params.group.unwrap_or_default(), params.version.unwrap_or_default()) {
        (b"meta.k8s.io", b"v1") => MetaVersion::V1,
        (b"meta.k8s.io", b"v1beta1") => MetaVersion::V1beta1,
        _ => return None,
    };
    match params.kind.unwrap_or_default() {
        b"Table" => (serializer != Serializer::Protobuf).then_some(Conversion::Table),
        b"PartialObjectMetadata" => Some(Conversion::Metadata { list: false, version }),
        b"PartialObjectMetadataList" => Some(Conversion::Metadata { list: true, version }),
        _ => None,
    }
}

/// Go's `nextSplitElement`: the text before the first `sep` and the text after it, or all of `s`
/// and nothing.
fn split_first(s: &[u8], sep: u8) -> (&[u8], &[u8]) {
    match s.iter().position(|&b| b == sep) {
        Some(at) => (&s[..at], &s[at + 1..]),
        None => (s, &[]),
    }
}

/// `strings.TrimFunc(s, func(r rune) bool { return r == ' ' })`.
fn trim_spaces(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    let end = s.iter().rposition(|&b| b != b' ').map_or(start, |at| at + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests {
    //! Every "kube-apiserver v1.37.2:" comment records an answer checked against a running
    //! kube-apiserver v1.37.2 (curl against a ConfigMap and its collection).

    use super::*;
    use proptest::prelude::*;

    use ContentVariant::{Json, PartialObjectMetadataJson as Metadata};
    use Endpoint::{Get, List, Watch};
    use Negotiation::{Cache, Passthrough};
    use PassthroughReason::{NotAcceptable, OtherMediaType, Protobuf, Table};

    const ENDPOINTS: [Endpoint; 3] = [Get, List, Watch];

    /// kubelet and client-go typed clientsets from v0.32.
    const TYPED: &str = "application/vnd.kubernetes.protobuf,application/json";
    /// client-go metadata client, Get and Watch (k8s.io/client-go/metadata).
    const METADATA_CLIENT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
                                   application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
    /// client-go metadata client, List.
    const METADATA_CLIENT_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;\
                                        v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
                                        application/json";
    /// client-go dynamic client, and with its CBOR client feature gate on.
    const DYNAMIC: &str = "application/json";
    const DYNAMIC_CBOR: &str = "application/json;q=0.9,application/cbor;q=1";
    /// kubectl get with a human-readable printer (k8s.io/kubectl pkg/cmd/get).
    const KUBECTL_GET: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,\
                               application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    /// kube-rs metadata calls (kube-core `JSON_METADATA_MIME`, `JSON_METADATA_LIST_MIME`).
    const KUBE_RS_METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const KUBE_RS_METADATA_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

    fn decide(accept: &str, endpoint: Endpoint) -> Negotiation {
        let value = HeaderValue::from_str(accept).expect("test headers are valid");
        negotiate(Some(&value), endpoint)
    }

    fn decide_bytes(accept: &[u8], endpoint: Endpoint) -> Negotiation {
        let value = HeaderValue::from_bytes(accept).expect("test headers are valid");
        negotiate(Some(&value), endpoint)
    }

    #[track_caller]
    fn assert_everywhere(accept: &str, expected: Negotiation) {
        for endpoint in ENDPOINTS {
            assert_eq!(decide(accept, endpoint), expected, "Accept: {accept:?} on {endpoint:?}");
        }
    }

    #[test]
    fn missing_or_empty_accept_is_served_as_json() {
        // kube-apiserver v1.37.2: no Accept gets 200 application/json on GET, LIST and WATCH.
        // kube-rs sends no Accept for ordinary calls.
        for endpoint in ENDPOINTS {
            assert_eq!(negotiate(None, endpoint), Cache(Json));
            assert_eq!(negotiate(Some(&HeaderValue::from_static("")), endpoint), Cache(Json));
        }
    }

    #[test]
    fn kubelet_and_typed_clientsets_preferring_protobuf_get_json_from_the_cache() {
        // kube-apiserver v1.37.2 answers this in protobuf; JSON is the client's next choice.
        assert_everywhere(TYPED, Cache(Json));
    }

    #[test]
    fn metadata_client_get_and_watch_are_served_as_partial_object_metadata() {
        assert_eq!(decide(METADATA_CLIENT, Get), Cache(Metadata));
        assert_eq!(decide(METADATA_CLIENT, Watch), Cache(Metadata));
    }

    #[test]
    fn metadata_client_list_is_served_as_partial_object_metadata_list() {
        assert_eq!(decide(METADATA_CLIENT_LIST, List), Cache(Metadata));
    }

    #[test]
    fn dynamic_client_is_served_as_json() {
        assert_everywhere(DYNAMIC, Cache(Json));
    }

    #[test]
    fn dynamic_client_preferring_cbor_passes_through() {
        // kube-apiserver v1.37.2 (CBOR gate off) answers JSON, one with the gate on answers CBOR.
        assert_everywhere(DYNAMIC_CBOR, Passthrough(OtherMediaType));
    }

    #[test]
    fn kubectl_get_asking_for_tables_first_passes_through() {
        // kube-apiserver v1.37.2: 200 application/json with kind Table, watch included.
        assert_everywhere(KUBECTL_GET, Passthrough(Table));
    }

    #[test]
    fn kube_rs_metadata_calls_are_served_as_partial_object_metadata() {
        // kube-apiserver v1.37.2: 200 application/json, kind PartialObjectMetadata[List],
        // apiVersion meta.k8s.io/v1.
        assert_eq!(decide(KUBE_RS_METADATA, Get), Cache(Metadata));
        assert_eq!(decide(KUBE_RS_METADATA, Watch), Cache(Metadata));
        assert_eq!(decide(KUBE_RS_METADATA_LIST, List), Cache(Metadata));
    }

    #[test]
    fn metadata_form_of_the_other_endpoint_is_not_acceptable() {
        // kube-apiserver v1.37.2: GET with the list form and LIST with the single form answer 406
        // NotAcceptable; a WATCH with the list form answers 200 application/json and ends at the
        // first event, which it fails to encode.
        assert_eq!(decide(KUBE_RS_METADATA_LIST, Get), Passthrough(NotAcceptable));
        assert_eq!(decide(KUBE_RS_METADATA_LIST, Watch), Passthrough(NotAcceptable));
        assert_eq!(decide(KUBE_RS_METADATA, List), Passthrough(NotAcceptable));
        assert_eq!(decide(METADATA_CLIENT, List), Passthrough(NotAcceptable));
        assert_eq!(decide(METADATA_CLIENT_LIST, Get), Passthrough(NotAcceptable));
    }

    #[test]
    fn protobuf_alone_passes_through() {
        // kube-apiserver v1.37.2: application/vnd.kubernetes.protobuf on GET and LIST,
        // application/vnd.kubernetes.protobuf;stream=watch on WATCH.
        assert_everywhere("application/vnd.kubernetes.protobuf", Passthrough(Protobuf));
        assert_eq!(
            decide("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", Get),
            Passthrough(Protobuf)
        );
    }

    #[test]
    fn protobuf_is_replaced_only_by_json_of_the_same_form() {
        let metadata_then_plain = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
                                   application/json";
        assert_eq!(decide(metadata_then_plain, Get), Passthrough(Protobuf));
        let plain_then_metadata = "application/vnd.kubernetes.protobuf,application/json;as=PartialObjectMetadata;\
                                   g=meta.k8s.io;v=v1";
        assert_eq!(decide(plain_then_metadata, Watch), Passthrough(Protobuf));
    }

    #[test]
    fn protobuf_clauses_after_the_chosen_one_are_skipped_on_the_way_to_json() {
        let header = "application/vnd.kubernetes.protobuf,application/vnd.kubernetes.protobuf;\
                      as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";
        assert_everywhere(header, Cache(Json));
    }

    #[test]
    fn protobuf_then_a_wildcard_is_served_as_json() {
        assert_everywhere("application/vnd.kubernetes.protobuf,*/*", Cache(Json));
    }

    #[test]
    fn protobuf_then_yaml_then_json_passes_through() {
        // kube-apiserver v1.37.2: protobuf. The client ranks YAML above JSON.
        let header = "application/vnd.kubernetes.protobuf,application/yaml,application/json";
        assert_everywhere(header, Passthrough(Protobuf));
    }

    #[test]
    fn protobuf_in_the_wrong_metadata_form_is_not_acceptable() {
        let header = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
                      application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(decide(header, Get), Passthrough(NotAcceptable));
        assert_eq!(decide(header, List), Cache(Metadata));
    }

    #[test]
    fn higher_q_wins_whatever_the_written_order() {
        // kube-apiserver v1.37.2: application/json.
        assert_everywhere("application/yaml;q=0.5,application/json", Cache(Json));
        // kube-apiserver v1.37.2: application/yaml.
        assert_eq!(decide("application/json;q=0.5,application/yaml", Get), Passthrough(OtherMediaType));
        // kube-apiserver v1.37.2: application/json (q above 1 is taken as written).
        assert_eq!(decide("application/yaml,application/json;q=2", Get), Cache(Json));
        // kube-apiserver v1.37.2: application/json (negative q are ordered too).
        assert_eq!(decide("application/json;q=-1,application/yaml;q=-2", Get), Cache(Json));
    }

    #[test]
    fn equal_q_keeps_the_written_order() {
        // kube-apiserver v1.37.2: application/json, then application/yaml when swapped.
        assert_eq!(decide("application/json;q=0.5,application/yaml;q=0.5", Get), Cache(Json));
        assert_eq!(decide("application/yaml;q=0.5,application/json;q=0.5", Get), Passthrough(OtherMediaType));
        // kube-apiserver v1.37.2: application/json; 0.30000001 and 0.3 are the same float32.
        assert_eq!(decide("application/json;q=0.3,application/yaml;q=0.30000001", Get), Cache(Json));
        // kube-apiserver v1.37.2: application/yaml; 0.3000001 is a larger float32.
        assert_eq!(decide("application/json;q=0.3,application/yaml;q=0.3000001", Get), Passthrough(OtherMediaType));
    }

    #[test]
    fn q_zero_still_accepts() {
        // kube-apiserver v1.37.2: 200 application/json.
        assert_everywhere("application/json;q=0", Cache(Json));
    }

    #[test]
    fn unparsable_q_counts_as_zero() {
        // kube-apiserver v1.37.2: application/yaml for each.
        for q in ["abc", "1e", "+nan", "-nan", "infin", "0b1", "1.2.3"] {
            let header = format!("application/json;q={q},application/yaml;q=0.001");
            assert_eq!(decide(&header, Get), Passthrough(OtherMediaType), "q={q}");
        }
        // A space after '=' is not trimmed from q, so it does not parse either.
        assert_eq!(decide("application/json;q= 1,application/yaml;q=0.5", Get), Passthrough(OtherMediaType));
    }

    #[test]
    fn q_values_are_read_as_go_parses_them() {
        // kube-apiserver v1.37.2: application/yaml (1e-1 > 0.05; 1e39 overflows to +Inf; NaN
        // never compares greater, so it stays first).
        assert_eq!(decide("application/yaml;q=1e-1,application/json;q=0.05", Get), Passthrough(OtherMediaType));
        assert_eq!(decide("application/json;q=1,application/yaml;q=1e39", Get), Passthrough(OtherMediaType));
        assert_eq!(decide("application/yaml;q=NaN,application/json;q=-inf", Get), Passthrough(OtherMediaType));
        // kube-apiserver v1.37.2: application/json (5e-1 == 0.5; -1e39 == -inf; infinity == inf;
        // a NaN clause written after JSON stays after it).
        assert_eq!(decide("application/json;q=0.5,application/yaml;q=5e-1", Get), Cache(Json));
        assert_eq!(decide("application/json;q=-inf,application/yaml;q=-1e39", Get), Cache(Json));
        assert_eq!(decide("application/json;q=infinity,application/yaml;q=inf", Get), Cache(Json));
        assert_eq!(decide("application/json;q=nan,application/yaml", Get), Cache(Json));
        assert_eq!(decide("application/yaml;q=.5,application/json;q=0.4", Get), Passthrough(OtherMediaType));
        assert_eq!(decide("application/yaml;q=5.,application/json;q=2", Get), Passthrough(OtherMediaType));
        assert_eq!(decide("application/yaml;q=1E-1,application/json;q=+0.05", Get), Passthrough(OtherMediaType));
        // A valueless q is dropped, leaving 1.
        assert_eq!(decide("application/yaml;q=0.5,application/json;q=", Get), Cache(Json));
    }

    #[test]
    fn q_spellings_not_reproduced_pass_through() {
        // kube-apiserver v1.37.2 reads 0x1p-1 as 0.5 and 1_0 as 10.
        assert_eq!(decide("application/json;q=0x1p-1", Get), Passthrough(OtherMediaType));
        assert_eq!(decide("application/json;q=1_0", Get), Passthrough(OtherMediaType));
        let long = format!("application/json;q=0.{}", "1".repeat(100));
        assert_eq!(decide(&long, Get), Passthrough(OtherMediaType));
    }

    #[test]
    fn concrete_types_jump_ahead_of_wildcards_as_gos_sort_moves_them() {
        // kube-apiserver v1.37.2: application/yaml, although */* has the higher q.
        assert_eq!(decide("*/*,application/yaml;q=0.5", Get), Passthrough(OtherMediaType));
        // kube-apiserver v1.37.2: application/json.
        assert_eq!(decide("application/yaml;q=0.5,*/*", Get), Cache(Json));
        // kube-apiserver v1.37.2: application/yaml.
        assert_eq!(decide("application/*;q=0.9,application/yaml;q=0.1", Get), Passthrough(OtherMediaType));
    }

    #[test]
    fn only_star_slash_star_passes_the_route_filter_on_its_own() {
        // kube-apiserver v1.37.2: */* gets 200 application/json; application/* and * alone get 406
        // from go-restful ("406: Not Acceptable\n\nAvailable representations: ...").
        assert_everywhere("*/*", Cache(Json));
        assert_everywhere("*/*;q=0.5", Cache(Json));
        assert_everywhere("application/*", Passthrough(NotAcceptable));
        assert_everywhere("*", Passthrough(NotAcceptable));
        // kube-apiserver v1.37.2: application/json once another element passes the filter.
        assert_everywhere("application/*,application/json", Cache(Json));
        assert_everywhere("application/json;q=0.5,application/*", Cache(Json));
        assert_everywhere("*,application/json;q=0.1", Cache(Json));
    }

    #[test]
    fn wildcards_take_json_with_its_parameters() {
        // kube-apiserver v1.37.2: 200 application/json, kind PartialObjectMetadataList.
        let list = "*/*;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
        assert_eq!(decide(list, List), Cache(Metadata));
        assert_eq!(decide("*/*;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", Watch), Cache(Metadata));
        assert_eq!(decide("*/*;as=Table;g=meta.k8s.io;v=v1", Get), Passthrough(Table));
        // kube-apiserver v1.37.2: 200 application/json on a watch.
        assert_eq!(decide("*/*;stream=watch", Watch), Cache(Json));
    }

    #[test]
    fn media_types_and_parameter_names_compare_case_sensitively() {
        // kube-apiserver v1.37.2: 406 for each.
        assert_everywhere("Application/JSON", Passthrough(NotAcceptable));
        assert_everywhere("application/JSON", Passthrough(NotAcceptable));
        assert_everywhere("application/json;AS=Table;g=meta.k8s.io;v=v1", Passthrough(NotAcceptable));
    }

    #[test]
    fn stream_watch_is_accepted_on_every_endpoint() {
        // kube-apiserver v1.37.2: 200 application/json on GET, LIST and WATCH alike.
        assert_everywhere("application/json;stream=watch", Cache(Json));
        let metadata_watch = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;stream=watch";
        assert_eq!(decide(metadata_watch, Watch), Cache(Metadata));
    }

    #[test]
    fn stream_other_than_watch_and_stream_on_yaml_are_refused() {
        // kube-apiserver v1.37.2: 406 for each.
        assert_everywhere("application/json;stream=foo", Passthrough(NotAcceptable));
        assert_everywhere("application/yaml;stream=watch", Passthrough(NotAcceptable));
        assert_everywhere("application/yaml;stream=watch,application/json;q=0.1", Cache(Json));
    }

    #[test]
    fn server_version_v1_is_accepted_and_others_refused() {
        // kube-apiserver v1.37.2: sv=v1 gets 200 application/json, sv=v2 406.
        assert_everywhere("application/json;sv=v1", Cache(Json));
        assert_everywhere("application/json;sv=v2", Passthrough(NotAcceptable));
    }

    #[test]
    fn unknown_and_valueless_parameters_are_ignored() {
        // kube-apiserver v1.37.2: "foo=bar" and "as=" change nothing.
        assert_everywhere("application/json;foo=bar;pretty=1;x;a=b=c;as=", Cache(Json));
        let header = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;foo=bar";
        assert_eq!(decide(header, Get), Cache(Metadata));
        // "key=a=" keeps "a".
        assert_eq!(decide("application/json;as=Table=;g=meta.k8s.io;v=v1", Get), Passthrough(Table));
    }

    #[test]
    fn the_last_duplicate_parameter_wins() {
        // kube-apiserver v1.37.2: a Table.
        let header = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1;as=Table";
        assert_eq!(decide(header, Get), Passthrough(Table));
    }

    #[test]
    fn parameter_values_are_trimmed_but_not_unquoted() {
        // kube-apiserver v1.37.2: PartialObjectMetadata, then 406.
        let padded = "application/json; as= PartialObjectMetadata ;g=meta.k8s.io;v=v1";
        assert_eq!(decide(padded, Get), Cache(Metadata));
        let quoted = "application/json;as=\"PartialObjectMetadata\";g=meta.k8s.io;v=v1";
        assert_eq!(decide(quoted, Get), Passthrough(NotAcceptable));
    }

    #[test]
    fn incomplete_or_unknown_conversions_are_refused() {
        // kube-apiserver v1.37.2: 406 for the first two.
        assert_everywhere("application/json;as=PartialObjectMetadata", Passthrough(NotAcceptable));
        assert_everywhere("application/json;as=PartialObjectMetadata;g=meta.k8s.io", Passthrough(NotAcceptable));
        assert_everywhere("application/json;g=meta.k8s.io;v=v1", Passthrough(NotAcceptable));
        assert_everywhere("application/json;as=Foo;g=meta.k8s.io;v=v1", Passthrough(NotAcceptable));
        assert_everywhere("application/json;as=Table;g=meta.k8s.io;v=v2", Passthrough(NotAcceptable));
        assert_everywhere("application/json;as=Foo;g=meta.k8s.io;v=v1,application/json;q=0.5", Cache(Json));
    }

    #[test]
    fn meta_v1beta1_metadata_passes_through() {
        // kube-apiserver v1.37.2: 200 application/json with apiVersion meta.k8s.io/v1beta1, for
        // GET, LIST and every WATCH event (bookmarks too); the cache writes v1 only.
        let single = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
        assert_eq!(decide(single, Get), Passthrough(OtherMediaType));
        assert_eq!(decide(single, Watch), Passthrough(OtherMediaType));
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1";
        assert_eq!(decide(list, List), Passthrough(OtherMediaType));
        let protobuf = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1,\
                        application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
        assert_eq!(decide(protobuf, Get), Passthrough(Protobuf));
    }

    #[test]
    fn tables_come_only_in_json_or_yaml() {
        // kube-apiserver v1.37.2: a protobuf Table is refused (406), a YAML one served.
        assert_everywhere(
            "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1",
            Passthrough(NotAcceptable),
        );
        let protobuf_table_then_json =
            "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1,application/json";
        assert_everywhere(protobuf_table_then_json, Cache(Json));
        assert_everywhere("application/yaml;as=Table;g=meta.k8s.io;v=v1", Passthrough(Table));
        // kube-apiserver v1.37.2: Table above metadata by q loses; metadata is served.
        let header = "application/json;as=Table;g=meta.k8s.io;v=v1;q=0.9,\
                      application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(decide(header, Get), Cache(Metadata));
    }

    #[test]
    fn yaml_first_passes_through() {
        // kube-apiserver v1.37.2: 200 application/yaml on GET and LIST; on a WATCH 406 with the
        // Status written in YAML, also when JSON follows.
        assert_everywhere("application/yaml", Passthrough(OtherMediaType));
        assert_everywhere("application/yaml,application/json", Passthrough(OtherMediaType));
    }

    #[test]
    fn media_types_the_api_server_cannot_write_are_skipped() {
        // kube-apiserver v1.37.2: 200 application/json.
        assert_everywhere("text/html,application/json", Cache(Json));
        assert_everywhere("text/*,*/json,application/json;q=0.1", Cache(Json));
    }

    #[test]
    fn nothing_acceptable_passes_through_as_not_acceptable() {
        // kube-apiserver v1.37.2: 406 for each.
        assert_everywhere("text/html", Passthrough(NotAcceptable));
        assert_everywhere("application/cbor", Passthrough(NotAcceptable));
        assert_everywhere("text/plain,application/*", Passthrough(NotAcceptable));
    }

    #[test]
    fn garbage_headers_pass_through_without_panicking() {
        // kube-apiserver v1.37.2: "," and "application/json/" get 406.
        for garbage in [",", ";", "/", "=", ";;;", ",,,", "a/b/c", "application/", "application/json/", "q=1", "*/"] {
            assert_everywhere(garbage, Passthrough(NotAcceptable));
        }
        // kube-apiserver v1.37.2: application/json ("application/json/" reads as application/json
        // once the route filter has let the header in).
        assert_everywhere("application/json/,application/yaml", Cache(Json));
        assert_eq!(decide_bytes(b"application/json;foo=\xff\xfe", Get), Cache(Json));
        assert_eq!(decide_bytes(b"application/json;as=\xff\xfe", Get), Passthrough(NotAcceptable));
        assert_eq!(decide_bytes(b"\xc3\xa9/\xff", Get), Passthrough(NotAcceptable));
        let huge = "application/json;".repeat(10_000);
        assert_eq!(decide(&huge, Get), Cache(Json));
    }

    #[test]
    fn surrounding_spaces_are_ignored() {
        assert_everywhere("  application/json ;  q=0.5 , application/yaml;q=0.1  ", Cache(Json));
    }

    #[test]
    fn tabs_around_the_value_or_a_blank_value_pass_through() {
        // Go's HTTP/1 server strips them and its HTTP/2 server does not.
        for header in [" ", "\t", "\tapplication/json", "application/json\t"] {
            assert_everywhere(header, Passthrough(OtherMediaType));
        }
    }

    #[test]
    fn more_than_twelve_clauses_pass_through() {
        let twelve = ["text/html"; 11].join(",") + ",application/json";
        assert_everywhere(&twelve, Cache(Json));
        let thirteen = ["text/html"; 12].join(",") + ",application/json";
        assert_everywhere(&thirteen, Passthrough(OtherMediaType));
        // Dropped ranges do not count.
        let with_empties = [","; 20].concat() + "application/json";
        assert_everywhere(&with_empties, Cache(Json));
    }

    #[test]
    fn content_type_is_bare_application_json_for_every_variant_and_endpoint() {
        // kube-apiserver v1.37.2, Content-Type of the 200s:
        //   GET/LIST, Accept none | application/json | */* | application/json;stream=watch:
        //     "application/json"
        //   GET/LIST, application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1: "application/json"
        //   WATCH, Accept none | application/json | application/json;stream=watch | */* | */*;stream=watch:
        //     "application/json" (no ";stream=watch")
        //   WATCH, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1: "application/json"
        //   (protobuf, passed through: "application/vnd.kubernetes.protobuf" on GET/LIST,
        //   "application/vnd.kubernetes.protobuf;stream=watch" on WATCH)
        for endpoint in ENDPOINTS {
            assert_eq!(Json.content_type(endpoint), "application/json");
            assert_eq!(Metadata.content_type(endpoint), "application/json");
        }
    }

    #[test]
    fn passthrough_reasons_have_snake_case_labels() {
        assert_eq!(Table.as_str(), "table");
        assert_eq!(Protobuf.as_str(), "protobuf");
        assert_eq!(OtherMediaType.as_str(), "other_media_type");
        assert_eq!(NotAcceptable.as_str(), "not_acceptable");
    }

    /// Bytes an `http::HeaderValue` may hold.
    fn header_byte() -> impl Strategy<Value = u8> {
        prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff]
    }

    /// Headers built from the pieces negotiation looks at.
    fn header_like() -> impl Strategy<Value = String> {
        let token = prop::sample::select(vec![
            "application",
            "/",
            "*",
            "json",
            "yaml",
            "vnd.kubernetes.protobuf",
            "cbor",
            "text",
            ",",
            ", ",
            ";",
            "; ",
            "=",
            "q",
            "as",
            "g",
            "v",
            "sv",
            "stream",
            "watch",
            "PartialObjectMetadata",
            "PartialObjectMetadataList",
            "Table",
            "meta.k8s.io",
            "v1",
            "v1beta1",
            "0.5",
            "0",
            "1e3",
            "nan",
            "-inf",
            "0x1p-1",
            "1_0",
            " ",
            "\t",
        ]);
        prop::collection::vec(token, 0..40).prop_map(|tokens| tokens.concat())
    }

    proptest! {
        #[test]
        fn negotiate_never_panics_on_any_header_value(bytes in prop::collection::vec(header_byte(), 0..300)) {
            let value = HeaderValue::from_bytes(&bytes).expect("strategy yields valid header bytes");
            for endpoint in ENDPOINTS {
                let _ = negotiate(Some(&value), endpoint);
            }
        }

        #[test]
        fn the_cache_answers_only_forms_the_client_named(header in header_like()) {
            let value = HeaderValue::from_str(&header).expect("strategy yields valid header text");
            for endpoint in ENDPOINTS {
                match negotiate(Some(&value), endpoint) {
                    Cache(Json) => prop_assert!(header.is_empty() || header.contains("json") || header.contains('*')),
                    Cache(Metadata) if endpoint == List => prop_assert!(header.contains("PartialObjectMetadataList")),
                    Cache(Metadata) => prop_assert!(header.contains("PartialObjectMetadata")),
                    Passthrough(_) => {}
                }
            }
        }
    }
}
