//! Content negotiation: what happens to a read, decided from its `Accept`
//! header before anything is encoded. It encodes nothing itself: the cache
//! writes the variant chosen here (see `cache::state::object` and `cache::state::event`),
//! and a request it cannot predict passes through. The Accept parser, a
//! replay of Go's, is in [`accept`]; the tests in `negotiate/tests.rs`.
//!
//! The cache writes the object as stored and `PartialObjectMetadata` (metadata only, what client-go
//! metadata informers and kube-rs metadata calls ask for), in JSON and protobuf, and for some kinds
//! the `meta.k8s.io` Table kubectl asks for (`encode::table`). For every GET, LIST and WATCH,
//! [`negotiate_read`] reads the `Accept` header and decides: serve from the cache in one of those forms,
//! or pass the request through to kube-apiserver, which then answers it exactly (a 406 included). Passing through is always correct; serving is only allowed when the cache's
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
//! Then this module serves kube-apiserver's choice when it is JSON or protobuf of a form the cache
//! has (the object, or `meta.k8s.io/v1` PartialObjectMetadata), hands a JSON Table to the read path
//! ([`Negotiation::Table`], which serves it only for a kind it has a printer for), and passes
//! everything else through. A protobuf answer comes with the JSON the client accepts next, if any
//! ([`Negotiation::Protobuf`]): kube-apiserver itself answers that JSON for a custom resource
//! (its handler has no protobuf serializer outside PartialObjectMetadata, so every protobuf
//! clause is skipped), and the cache answers it for an object its protobuf encoder refuses (see
//! `cache::read::serve`). When the header cannot be predicted exactly (hex or `_` q values, more than 12
//! clauses, leading or trailing tabs), the request passes through.
//!
//! # CBOR
//!
//! kube-apiserver registers its CBOR serializer only when the `CBORServingAndStorage` feature gate
//! (alpha, off by default in v1.37) is on (`NewDefaultAPIGroupInfo`, the control plane's codecs, the
//! custom resource handler; `Config.New` drops it from the allowed media types otherwise). With the
//! gate off, `application/cbor` is a media type like any other the server does not produce: step 1
//! does not count it, and step 2 skips its clause, so `application/json;q=0.9,application/cbor;q=1`
//! gets JSON. Whether the gate is on is learned per cached resource (`cache::sync::cbor_probe`) and
//! handed in as [`UpstreamCbor`]: `Off` negotiates as above, `On` and `Unknown` pass through any
//! request whose answer a CBOR clause decides ([`PassthroughReason::Cbor`]). A read is negotiated
//! before its resource's cache, which knows the gate, is: [`negotiate_read`] reads the header once
//! and, where a CBOR clause decides, keeps the answer for either state of the gate
//! ([`Negotiated`]), picked once the cache is ready (`cache::read::plan`). With the gate on, the
//! API server's CBOR is not byte-deterministic (map order), so the cache does not try to write it.
//!
//! # The route filter's 406
//!
//! A header that step 1 refuses gets go-restful's 406 before any handler runs
//! ([`Negotiation::RouteRefuses`]): a Status whose message names what the route produces,
//! `406: Not Acceptable\n\nAvailable representations: application/json, application/yaml,
//! application/vnd.kubernetes.protobuf`, then on a collection's route (LIST and WATCH share it) and
//! the legacy `/watch/` routes `application/json;stream=watch,
//! application/vnd.kubernetes.protobuf;stream=watch`, and `"details":{}` ([`route_refusal`]),
//! written indented as the API server writes an error it cannot negotiate a form for (where a
//! clause such as `application/*` would negotiate one, the read passes through). The
//! cache answers it for a built-in resource once it knows the upstream's CBOR is off (with the gate
//! on, the routes produce CBOR too, and the list would differ); a custom resource's handler (no
//! go-restful) and an aggregated server answer otherwise, so theirs pass through. A node-local
//! watchmux's CBOR probe (`GET <collection>?limit=1`, `Accept: application/cbor`) is one: a
//! tier answers it without kube-apiserver.
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
//! | any | `application/json;as=Table;g=meta.k8s.io;v=v1` or `v=v1beta1` | a Table ([`Negotiation::Table`]; `encode::table`), watches too (`cache::table_form`) |
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

mod accept;

use http::{HeaderValue, StatusCode};

use crate::encode::status::{Status, StatusReason};
use crate::encode::variant::{ContentVariant, Endpoint};

use accept::{
    Clause, GO_INSERTION_SORT_MAX, Params, depends_on_transport, parse_clauses, passes_route_filter, sort_like_go,
};

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Negotiation {
    /// Answer from the cache in this (JSON) variant.
    Cache(ContentVariant),
    /// kube-apiserver answers a built-in resource in this protobuf variant; `or_json` is the JSON
    /// variant of the first clause after it that is not protobuf, when that clause asks for the
    /// same form (what a custom resource gets, except in PartialObjectMetadata).
    Protobuf {
        /// `Protobuf` or `PartialObjectMetadataProtobuf`.
        variant: ContentVariant,
        /// The JSON of the same form the client accepts next.
        or_json: Option<ContentVariant>,
    },
    /// kube-apiserver answers a `meta.k8s.io` Table in JSON (kubectl get); `v1beta1` when that
    /// is the version asked for. The cache serves it where it has the kind's printer.
    Table {
        /// `meta.k8s.io/v1beta1` rather than `v1`.
        v1beta1: bool,
    },
    /// kube-apiserver's route filter refuses the header (step 1): its 406,
    /// [`route_refusal`], where the route's media types are known.
    RouteRefuses,
    /// Forward to kube-apiserver.
    Passthrough(PassthroughReason),
}

/// Why a request goes to kube-apiserver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PassthroughReason {
    /// kube-apiserver would answer a `meta.k8s.io` Table (kubectl get) the cache does not write:
    /// in YAML, of a kind without a printer here (`encode::table::printers`), or a watch with
    /// bookmarks and whole objects (`cache::table_form`).
    Table,
    /// kube-apiserver would answer protobuf that the cache cannot write (`meta.k8s.io/v1beta1`
    /// metadata; a custom resource, or an object the encoder refuses, with no JSON of the same
    /// form accepted next).
    Protobuf,
    /// kube-apiserver would answer YAML or `meta.k8s.io/v1beta1` metadata, or its answer cannot be
    /// predicted from the header alone.
    OtherMediaType,
    /// A CBOR clause decides the answer and the upstream serves CBOR, or whether it does is not
    /// known yet (see [`UpstreamCbor`]).
    Cbor,
    /// kube-apiserver refuses with 406 (a metadata list asked on a watch: a 200 stream that ends at
    /// its first event).
    NotAcceptable,
}

impl PassthroughReason {
    /// The metric label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Table => "table",
            Self::Protobuf => "protobuf",
            Self::OtherMediaType => "other_media_type",
            Self::Cbor => "cbor",
            Self::NotAcceptable => "not_acceptable",
        }
    }
}

/// Whether the upstream serves CBOR for the resource read (its `CBORServingAndStorage` gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamCbor {
    /// Not learned yet, or the probe failed: a CBOR clause makes the answer unpredictable.
    Unknown,
    /// The gate is off: CBOR is a media type the server does not produce.
    Off,
    /// The server answers CBOR.
    On,
}

/// Decides how to answer a read with this `Accept` header (the first one, as Go's
/// `Header.Get` reads it), from an upstream whose CBOR is `cbor`: kube-apiserver's choice,
/// which the tests hold against its answers. A read is negotiated by [`negotiate_read`], once,
/// before its upstream's CBOR is known.
#[cfg(test)]
pub(crate) fn negotiate(accept: Option<&HeaderValue>, endpoint: Endpoint, cbor: UpstreamCbor) -> Negotiation {
    read_accept(header_bytes(accept)).finish(endpoint, cbor)
}

/// A read's one negotiation, made before the upstream's CBOR is known
/// ([`negotiate_read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Negotiated {
    /// No CBOR clause decides: the answer, whatever the upstream serves.
    Decided(Negotiation),
    /// A CBOR clause decides: the answer for each thing the upstream may be
    /// found to do ([`PassthroughReason::Cbor`] while it is not known).
    ByCbor {
        /// With the upstream's CBOR off.
        off: Negotiation,
        /// With it on.
        on: Negotiation,
    },
}

impl Negotiated {
    /// The answer from an upstream whose CBOR is `cbor`.
    pub(crate) fn with(self, cbor: UpstreamCbor) -> Negotiation {
        match (self, cbor) {
            (Self::Decided(decided), _) => decided,
            (Self::ByCbor { off, .. }, UpstreamCbor::Off) => off,
            (Self::ByCbor { on, .. }, UpstreamCbor::On) => on,
            (Self::ByCbor { .. }, UpstreamCbor::Unknown) => Negotiation::Passthrough(PassthroughReason::Cbor),
        }
    }
}

/// Negotiates a read once, before its resource's cache (and so what the
/// upstream does with CBOR) is known: the header is read and Go's order of
/// its clauses found once, and where a CBOR clause decides, the answer is
/// kept for both states of the upstream's CBOR ([`Negotiated::with`]). Every
/// answer no CBOR clause decides is kube-apiserver's with the CBOR unknown.
pub(crate) fn negotiate_read(accept: Option<&HeaderValue>, endpoint: Endpoint) -> Negotiated {
    let read = read_accept(header_bytes(accept));
    match read.finish(endpoint, UpstreamCbor::Unknown) {
        Negotiation::Passthrough(PassthroughReason::Cbor) => Negotiated::ByCbor {
            off: read.finish(endpoint, UpstreamCbor::Off),
            on: read.finish(endpoint, UpstreamCbor::On),
        },
        decided => Negotiated::Decided(decided),
    }
}

fn header_bytes(accept: Option<&HeaderValue>) -> &[u8] {
    accept.map_or(&b""[..], HeaderValue::as_bytes)
}

/// An `Accept` header read as far as it can be without the upstream's CBOR.
enum ReadAccept<'h> {
    /// Its answer, whatever the upstream serves.
    Decided(Negotiation),
    /// Its clauses in Go's order (`None`: an order that cannot be predicted).
    Sorted {
        /// When only a CBOR element gets it past the route filter (step 1):
        /// the answer where the route produces no CBOR.
        refused_without_cbor: Option<Negotiation>,
        clauses: Option<Vec<Clause<'h>>>,
    },
}

fn read_accept(header: &[u8]) -> ReadAccept<'_> {
    use Negotiation::Passthrough;
    use PassthroughReason::OtherMediaType;

    if header.is_empty() {
        // NegotiateMediaTypeOptions gives an empty header the first serializer; go-restful reads
        // it as */*.
        return ReadAccept::Decided(Negotiation::Cache(ContentVariant::Json));
    }
    if depends_on_transport(header) {
        return ReadAccept::Decided(Passthrough(OtherMediaType));
    }
    let parsed = parse_clauses(header);
    let refused_without_cbor = (!passes_route_filter(header, false)).then(|| route_refused(parsed.as_deref().ok()));
    // Only a CBOR element can let it pass, which it does where the route produces CBOR.
    if let Some(refused) = &refused_without_cbor
        && !passes_route_filter(header, true)
    {
        return ReadAccept::Decided(refused.clone());
    }
    let clauses = parsed.ok().filter(|clauses| clauses.len() <= GO_INSERTION_SORT_MAX).map(|mut clauses| {
        sort_like_go(&mut clauses);
        clauses
    });
    ReadAccept::Sorted { refused_without_cbor, clauses }
}

impl ReadAccept<'_> {
    /// The answer from an upstream whose CBOR is `cbor`.
    fn finish(&self, endpoint: Endpoint, cbor: UpstreamCbor) -> Negotiation {
        use Negotiation::Passthrough;
        use PassthroughReason::{Cbor, NotAcceptable, OtherMediaType};

        let (refused_without_cbor, clauses) = match self {
            Self::Decided(decided) => return decided.clone(),
            Self::Sorted { refused_without_cbor, clauses } => (refused_without_cbor, clauses),
        };
        if let Some(refused) = refused_without_cbor {
            match cbor {
                UpstreamCbor::Off => return refused.clone(),
                UpstreamCbor::Unknown => return Passthrough(Cbor),
                UpstreamCbor::On => {}
            }
        }
        let Some(clauses) = clauses else {
            return Passthrough(OtherMediaType);
        };
        let mut verdicts = clauses.iter().map(|clause| verdict(clause, cbor)).filter(|v| *v != Verdict::Skip);
        match verdicts.next() {
            None => Passthrough(NotAcceptable),
            Some(Verdict::Cbor) => Passthrough(Cbor),
            Some(Verdict::Skip) => Passthrough(OtherMediaType),
            Some(Verdict::Serve(serializer, conversion)) => decide(serializer, conversion, endpoint, verdicts),
        }
    }
}

/// The route filter's 406, where its form is known ([`Negotiation::RouteRefuses`]): the API
/// server negotiates the error's own serializer from the same header, and writes it raw (indented
/// JSON) when no clause names one, even by a wildcard. A header with such a clause
/// (`application/*`) gets the error in that serializer's form, which is not modelled here: it
/// passes through.
/// `clauses`: the header's, `None` when they do not parse.
fn route_refused(clauses: Option<&[Clause<'_>]>) -> Negotiation {
    match clauses {
        Some(clauses) if !clauses.iter().any(names_a_serializer) => Negotiation::RouteRefuses,
        _ => Negotiation::Passthrough(PassthroughReason::NotAcceptable),
    }
}

/// Whether `NegotiateMediaTypeOptions` would try this clause on a serializer with CBOR off:
/// the exact type, `application/*`, or `*/*`.
fn names_a_serializer(clause: &Clause) -> bool {
    match (clause.media_type, clause.subtype) {
        (b"*", b"*") => true,
        (b"application", subtype) => matches!(subtype, b"*" | b"json" | b"yaml" | b"vnd.kubernetes.protobuf"),
        _ => false,
    }
}

/// The media types every route of a built-in resource produces with CBOR off.
const ROUTE_MEDIA_TYPES: &str = "application/json, application/yaml, application/vnd.kubernetes.protobuf";

/// The stream forms a collection's route (LIST and WATCH) and the legacy
/// `/watch/` routes produce besides.
const ROUTE_STREAM_MEDIA_TYPES: &str =
    "application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch";

/// kube-apiserver's answer when its route filter refuses the `Accept` header
/// of a read of a built-in resource whose server has CBOR off
/// ([`Negotiation::RouteRefuses`]); `object_route`: the path names one
/// object outside the legacy `/watch/` prefix, whose route produces no
/// stream forms.
pub(crate) fn route_refusal(object_route: bool) -> Status {
    let available = if object_route {
        ROUTE_MEDIA_TYPES.to_owned()
    } else {
        format!("{ROUTE_MEDIA_TYPES}, {ROUTE_STREAM_MEDIA_TYPES}")
    };
    let mut status = Status::new(
        StatusCode::NOT_ACCEPTABLE,
        StatusReason::NotAcceptable,
        format!("406: Not Acceptable\n\nAvailable representations: {available}"),
    );
    status.details = Some(serde_json::Map::new());
    status
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
        Conversion::Table { version } if serializer == Serializer::Json => {
            return Negotiation::Table { v1beta1: version == MetaVersion::V1beta1 };
        }
        Conversion::Table { .. } => return Passthrough(Table),
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
        (Serializer::Protobuf, Some(json)) => {
            let variant = match json {
                ContentVariant::PartialObjectMetadataJson => ContentVariant::PartialObjectMetadataProtobuf,
                _ => ContentVariant::Protobuf,
            };
            let mut or_json = None;
            for next in later {
                match next {
                    Verdict::Serve(Serializer::Protobuf, _) => {}
                    Verdict::Serve(Serializer::Json, same) if same == conversion => {
                        or_json = Some(json);
                        break;
                    }
                    _ => break,
                }
            }
            Negotiation::Protobuf { variant, or_json }
        }
    }
}

/// The serializers kube-apiserver offers for built-in resources, in `SupportedMediaTypes` order.
/// CBOR (alpha, off by default) would come last; see [`Verdict::Cbor`].
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
    Table { version: MetaVersion },
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
    /// `application/cbor` where the upstream serves CBOR or may: left to it.
    Cbor,
}

/// The inner loop of `NegotiateMediaTypeOptions` for one clause. With CBOR off, Go's loop finds
/// no serializer for a CBOR clause and skips it, as for any other type.
fn verdict(clause: &Clause<'_>, cbor: UpstreamCbor) -> Verdict {
    if clause.media_type == b"application" && clause.subtype == b"cbor" && cbor != UpstreamCbor::Off {
        return Verdict::Cbor;
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
        b"Table" => (serializer != Serializer::Protobuf).then_some(Conversion::Table { version }),
        b"PartialObjectMetadata" => Some(Conversion::Metadata { list: false, version }),
        b"PartialObjectMetadataList" => Some(Conversion::Metadata { list: true, version }),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fuzz;
