//! A read decided once: what the cache does with a GET, LIST or WATCH, from
//! the request's parts and what its resource's cache knows of itself, in pure
//! functions a test calls without a cache. `serve.rs` carries the plan out.
//!
//! Two steps, because authorization stands between them: the API server,
//! too, authorizes before it routes, so nothing is learned about a resource
//! (discovery, starting its cache) for a caller the gate turns away.
//!
//! 1. [`request`], from the request alone: not a read, pretty output, the
//!    parameters (parsed here, once, and handed down), a consistent GET, the
//!    legacy `/watch/` path's refusals, the read's one content negotiation
//!    (whose answer waits for the upstream's CBOR when a CBOR clause decides:
//!    `negotiate::negotiate_read`) and a resource not cached at all.
//! 2. [`read`], with the ready cache's [`Facts`]: the negotiated answer for
//!    this upstream, one [`Content`] (JSON or protobuf, or a Table), or the
//!    route filter's 406 ([`ReadPlan::Refuse`]; a CBOR probe gets it); the
//!    selectors; the route; the scope; a GET's parameters; how the answer is
//!    compressed.
//!
//! What the plan cannot know is the driver's: whether the cache has reached
//! a version, proving it fresh, its snapshots, the seat a LIST or WATCH
//! takes, and the objects themselves (one may have no protobuf form).

use std::sync::Arc;

use http::{HeaderMap, Method, Uri, header};

use super::params::{ReadParams, Rv, RvMatch};
use crate::cache::catalog::resolve::GroupResource;
use crate::cache::content::{Answer, ProtobufAvailability, answer_form, kind_obstacle};
use crate::cache::delivery::filter::Filter;
use crate::cache::reason::Reason;
use crate::cache::resource::Scope;
use crate::cache::resource_info::ResourceInfo;
use crate::cache::table_form::{TableForm, table_form};
use crate::compress::AnswerKind;
use crate::encode::status::Status;
use crate::encode::table::custom::CustomColumns;
use crate::encode::variant::{ContentVariant, Endpoint};
use crate::negotiate::{Negotiated, Negotiation, PassthroughReason, UpstreamCbor, negotiate_read, route_refusal};
use crate::request::{RequestInfo, Verb};
use crate::selector::{FieldSelector, LabelSelector, selectable};

/// What the request alone decides for a read the cache may answer
/// ([`request`]).
pub(crate) struct Request {
    pub endpoint: Endpoint,
    pub params: ReadParams,
    negotiated: Negotiated,
}

impl Request {
    /// Whether this read is a Table from an upstream whose CBOR is `cbor`:
    /// a custom resource's then needs its printer ([`Facts::table_printer`]).
    pub(crate) fn wants_table(&self, cbor: UpstreamCbor) -> bool {
        matches!(self.negotiated.clone().with(cbor), Negotiation::Table { .. })
    }
}

/// What the plan reads of a resource's ready cache.
pub(crate) struct Facts<'a> {
    pub info: &'a ResourceInfo,
    /// A custom resource's selectable fields, from its CRD.
    pub custom_selectable: Option<&'a [String]>,
    pub scope: &'a Scope,
    /// Loaded once for the read: the negotiation and the route filter's 406
    /// must see the same.
    pub cbor: UpstreamCbor,
    pub protobuf: ProtobufAvailability,
    /// A custom resource's Table printer, or why there is none: looked up
    /// (`serve::crd`) only for a Table of a custom resource, `None` otherwise.
    pub table_printer: Option<Result<Arc<CustomColumns>, Reason>>,
}

/// The form a read is answered in: the one content decision.
pub(crate) enum Content {
    /// The object (or its metadata), in JSON or protobuf.
    Answer(Answer),
    /// A `meta.k8s.io` Table, written in JSON.
    Table(TableForm),
}

impl Content {
    /// The form of the answer's bytes.
    pub(crate) fn variant(&self) -> ContentVariant {
        match self {
            Self::Answer(answer) => answer.variant,
            Self::Table(_) => ContentVariant::Json,
        }
    }

    /// The form of the answer's bytes (a Table's, and its errors, are JSON),
    /// with the JSON to fall back on, and the Table's printer, if any.
    pub(crate) fn into_parts(self) -> (Answer, Option<TableForm>) {
        match self {
            Self::Answer(answer) => (answer, None),
            Self::Table(form) => (Answer { variant: ContentVariant::Json, or_json: None }, Some(form)),
        }
    }
}

/// A read the cache answers, as decided before the cache's state is read.
pub(crate) struct Read {
    pub endpoint: Endpoint,
    pub params: ReadParams,
    pub filter: Filter,
    pub content: Content,
    /// The cache holds part of the resource only (`--cache-scope`).
    pub scoped: bool,
    pub compression: AnswerKind,
    /// A consistent watch-list: proven fresh before it takes a seat.
    pub proof_before_seat: bool,
}

/// What becomes of a read once its cache is ready.
pub(crate) enum ReadPlan {
    /// The API server's answer, written without reading the cache: the route
    /// filter's 406.
    Refuse(Status),
    Passthrough(Reason),
    Serve(Read),
}

/// Step 1: what the request alone decides (see the module's doc); `cached`
/// says whether a resource is cached at all (`--cache-resources`).
pub(crate) fn request(
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    info: &RequestInfo,
    cached: impl FnOnce(&GroupResource) -> bool,
) -> Result<Request, Reason> {
    let endpoint = match info.verb {
        Some(Verb::Get) => Endpoint::Get,
        Some(Verb::List) => Endpoint::List,
        Some(Verb::Watch) => Endpoint::Watch,
        _ => return Err(Reason::NotARead),
    };
    if *method != Method::GET || !info.is_resource_request || info.subresource.is_some() {
        return Err(Reason::NotARead);
    }
    if wants_pretty_output(headers) {
        return Err(Reason::Pretty);
    }
    let params = ReadParams::parse(uri.query()).map_err(|unsupported| unsupported.0)?;
    // A consistent GET is the API server's to answer: it reads one object
    // from etcd, where the cache would first have to prove itself fresh
    // with a request of about the same cost (and, being behind etcd's
    // revision nearly always in a busy cluster, wait a second or two for
    // its catch-up). Passed on before any review: the API server
    // authorizes it with the caller's identity.
    if endpoint == Endpoint::Get && params.rv == Rv::Unset {
        return Err(Reason::ConsistentGet);
    }
    // A legacy watch path that names the object and also has a field
    // selector: the API server answers 400 unless the selector is exactly
    // that name. Its answer is the exact one.
    if info.legacy_watch_path && info.name.is_some() && !params.field_selector.is_empty() {
        return Err(Reason::NameAndFieldSelector);
    }
    // The legacy `/watch/` path takes its verb from the path, so the API
    // server validates the options as a LIST's unless the query also
    // says `watch`: `sendInitialEvents` or `resourceVersionMatch` there
    // get its 422 (found by the auth fuzzer).
    if info.legacy_watch_path
        && !params.watch
        && (params.send_initial_events.is_some() || params.rv_match != RvMatch::Unset)
    {
        return Err(Reason::WatchParameters);
    }
    // Whether the upstream serves CBOR is known per cache (`cbor_probe`):
    // an answer a CBOR clause decides waits for the cache ([`read`]).
    let negotiated = negotiate_read(headers.get(header::ACCEPT), endpoint);
    if let Negotiated::Decided(Negotiation::Passthrough(reason)) = negotiated {
        return Err(Reason::Negotiated(reason));
    }
    let resource = GroupResource { group: info.api_group.clone(), resource: info.resource.clone() };
    if !cached(&resource) {
        return Err(Reason::NotCached);
    }
    Ok(Request { endpoint, params, negotiated })
}

/// Step 2: the read's plan, with its cache's [`Facts`] (see the module's doc).
pub(crate) fn read(request: Request, info: &RequestInfo, facts: Facts<'_>) -> ReadPlan {
    let Request { endpoint, params, negotiated } = request;
    let resource = facts.info;
    let content = match negotiated.with(facts.cbor) {
        Negotiation::Cache(variant) => Content::Answer(Answer { variant, or_json: None }),
        Negotiation::Protobuf { variant, or_json } => Content::Answer(Answer { variant, or_json }),
        Negotiation::Table { v1beta1 } => {
            // A custom resource's columns are its CRD's (`cache::read::serve::crd`).
            let custom = match facts.table_printer {
                _ if resource.is_builtin_group() => None,
                Some(Ok(printer)) => Some(printer),
                Some(Err(reason)) => return ReadPlan::Passthrough(reason),
                // Not looked up: no printer known.
                None => return ReadPlan::Passthrough(Reason::Negotiated(PassthroughReason::Table)),
            };
            let include = params.include_object.as_deref();
            match table_form(resource, custom, endpoint, v1beta1, include, params.allow_bookmarks) {
                Ok(form) => Content::Table(form),
                Err(reason) => return ReadPlan::Passthrough(reason),
            }
        }
        // The route filter's 406, exactly, where the route's media
        // types are known: a built-in resource whose server has CBOR off.
        Negotiation::RouteRefuses => {
            let known = resource.is_builtin_group() && facts.cbor == UpstreamCbor::Off;
            if !known || !info.is_routed(resource.namespaced) {
                return ReadPlan::Passthrough(Reason::Negotiated(PassthroughReason::NotAcceptable));
            }
            let object_route = info.name.is_some() && !info.legacy_watch_path;
            return ReadPlan::Refuse(route_refusal(object_route));
        }
        Negotiation::Passthrough(reason) => return ReadPlan::Passthrough(Reason::Negotiated(reason)),
    };
    // Outside a Table, `includeObject` is the API server's to read.
    if matches!(content, Content::Answer(_)) && params.include_object.is_some() {
        return ReadPlan::Passthrough(Reason::Parameters);
    }
    let (Ok(labels), Ok(fields)) =
        (LabelSelector::parse(&params.label_selector), FieldSelector::parse(&params.field_selector))
    else {
        return ReadPlan::Passthrough(Reason::InvalidSelector);
    };
    // A kind with no protobuf here at all (not in the table, or its
    // schema drifted): see `content`.
    let content = match content {
        Content::Answer(answer) => match answer_form(answer, kind_obstacle(resource, facts.protobuf, answer.variant)) {
            Ok(answer) => Content::Answer(answer),
            Err(reason) => return ReadPlan::Passthrough(reason),
        },
        table => table,
    };
    let (group, plural) = (&resource.group, &resource.resource);
    if selectable::validate(group, plural, resource.namespaced, facts.custom_selectable, &fields).is_err() {
        return ReadPlan::Passthrough(Reason::InvalidSelector);
    }
    // Paths the API server has no route for (a cluster-scoped resource
    // under a namespace, a namespaced object named without one) get its
    // own 404.
    if !info.is_routed(resource.namespaced) {
        return ReadPlan::Passthrough(Reason::NoRoute);
    }
    let namespace = if resource.namespaced { info.namespace.clone() } else { None };
    let filter = Filter::new(namespace, info.name.clone(), labels, fields);
    let scoped = !facts.scope.is_everything();
    let in_scope = filter.labels.implies(&facts.scope.labels) && filter.fields.implies(&facts.scope.fields);
    // A GET outside the scope may still find its object in the cache.
    if scoped && !in_scope && endpoint != Endpoint::Get {
        return ReadPlan::Passthrough(Reason::OutsideScope);
    }
    // A GET takes none of a LIST's parameters.
    if endpoint == Endpoint::Get
        && (params.rv_match != RvMatch::Unset || params.limit.is_some() || params.continue_token.is_some())
    {
        return ReadPlan::Passthrough(Reason::GetParameters);
    }
    let compression = match endpoint {
        // The API server's `isListWatchRequest`.
        Endpoint::Watch if params.send_initial_events == Some(true) && params.allow_bookmarks => AnswerKind::WatchList,
        Endpoint::Watch => AnswerKind::Watch,
        Endpoint::Get | Endpoint::List => AnswerKind::Complete,
    };
    // A consistent watch-list's proof waits on the upstream, not on this
    // process: it comes before the read takes a seat, so that a burst of
    // them (a fleet of informers restarting) does not hold every seat
    // while waiting, and queue the rest past their budget into passing
    // through (bench-scale's storm at 500 kubelets did).
    let proof_before_seat = endpoint == Endpoint::Watch
        && params.send_initial_events == Some(true)
        && params.rv_match == RvMatch::NotOlderThan
        && params.rv == Rv::Unset;
    ReadPlan::Serve(Read { endpoint, params, filter, content, scoped, compression, proof_before_seat })
}

/// The API server pretty-prints JSON for clients that look like a person
/// (curl, Wget, a browser); those few requests pass through so that they get
/// exactly that.
fn wants_pretty_output(headers: &HeaderMap) -> bool {
    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    ["curl", "Wget", "Mozilla"].iter().any(|p| ua.starts_with(p))
        || headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("pretty"))
}

#[cfg(test)]
mod tests;
