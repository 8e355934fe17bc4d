//! LIST from the cache: which state a LIST is answered from (current,
//! proven-fresh, at least N, exactly N, or the snapshot a continue token
//! names), and the list body, paginated as the API server paginates.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tokio::time::Instant;

use super::{CacheService, Served, set_common_headers};
use crate::body::{self, Chunk, ChunkList};
use crate::cache::content::{Answer, NoProtobufHere, answer_form};
use crate::cache::delivery::filter::{Filter, NODE_FIELD};
use crate::cache::read::pagination::{self, KeyScope};
use crate::cache::read::params::{ReadParams, Rv, RvMatch};
use crate::cache::reason::Reason;
use crate::cache::resource::ResourceCache;
use crate::cache::resource::freshness::{Proof, ProofOutcome, reached};
use crate::cache::state::object::{CachedObject, NoProtobuf, ObjectKey};
use crate::cache::state::store::Snapshot;
use crate::encode::list::{ListMeta, list_body, protobuf_list_body};
use crate::encode::variant::{ContentVariant, Endpoint};
use crate::metrics as m;

/// Where a page starts in its snapshot.
pub(super) struct PageStart {
    after: ObjectKey,
    exclusive: bool,
}

impl CacheService {
    pub(super) async fn list(
        &self,
        cache: Arc<ResourceCache>,
        filter: Filter,
        p: ReadParams,
        answer: Answer,
        arrival: Instant,
    ) -> Served {
        let (snapshot, start, limit) = match self.list_state(&cache, &filter, &p, arrival).await {
            Ok(state) => state,
            Err(reason) => return Served::Passthrough(reason),
        };
        let key_scope = key_scope(&cache, &filter);
        // A list with an item that has no protobuf form is answered whole in
        // the JSON the client accepts next, or by the API server.
        let response = match list_response(&cache, &snapshot, &filter, answer.variant, start.as_ref(), limit, key_scope)
        {
            Ok(response) => response,
            Err(refused) => match answer_form(answer, Some(NoProtobufHere::Refused(refused))) {
                Ok(json) => list_response(&cache, &snapshot, &filter, json.variant, start.as_ref(), limit, key_scope)
                    .expect("JSON variants always encode"),
                Err(reason) => return Served::Passthrough(reason),
            },
        };
        metrics::counter!(m::CACHE_LIST_TOTAL, "resource" => cache.label().to_owned()).increment(1);
        Served::Response(response)
    }

    /// The state a LIST is answered from: a snapshot, where its page starts,
    /// and its limit; or why the LIST passes through.
    pub(super) async fn list_state(
        &self,
        cache: &Arc<ResourceCache>,
        filter: &Filter,
        p: &ReadParams,
        arrival: Instant,
    ) -> Result<(Snapshot, Option<PageStart>, Option<u64>), Reason> {
        if p.send_initial_events.is_some() {
            return Err(Reason::ListParameters);
        }
        let key_scope = key_scope(cache, filter);
        Ok(if let Some(token) = &p.continue_token {
            // The API server refuses a version next to a continue token.
            if p.rv != Rv::Unset || p.rv_match != RvMatch::Unset {
                return Err(Reason::ListParameters);
            }
            let Some(c) = pagination::decode(token, key_scope) else {
                return Err(Reason::Continue);
            };
            let Some(snapshot) = cache.snapshot_at(c.rv) else {
                return Err(Reason::SnapshotGone);
            };
            (snapshot, Some(PageStart { after: c.after, exclusive: c.exclusive }), p.limit)
        } else {
            match (p.rv, p.rv_match) {
                (Rv::Unset, RvMatch::Unset) => {
                    if self.consistent(cache, arrival, Proof::AtOnce).await != ProofOutcome::Fresh {
                        return Err(Reason::ConsistentRead);
                    }
                    (current(cache, p.limit), None, p.limit)
                }
                // resourceVersionMatch needs a version; Exact cannot be 0:
                // the API server answers these with its own 422.
                (Rv::Unset, _) | (Rv::Any, RvMatch::Exact) => return Err(Reason::ListParameters),
                // Any version: the current state, and, as in the API server,
                // no pages.
                (Rv::Any, _) => (cache.snapshot(), None, None),
                // "Exactly N": explicitly, or N with a limit (the legacy meaning).
                (Rv::At(rv), RvMatch::Exact) | (Rv::At(rv), RvMatch::Unset)
                    if p.rv_match == RvMatch::Exact || p.limit.is_some() =>
                {
                    if !reached(cache, rv).await {
                        return Err(Reason::AheadOfCache);
                    }
                    let Some(snapshot) = cache.snapshot_at(rv) else {
                        return Err(Reason::Exact);
                    };
                    if p.limit.is_some() {
                        cache.keep_snapshot(&snapshot);
                    }
                    (snapshot, None, p.limit)
                }
                // At least N.
                (Rv::At(rv), _) => {
                    if !reached(cache, rv).await {
                        return Err(Reason::AheadOfCache);
                    }
                    (current(cache, p.limit), None, p.limit)
                }
            }
        })
    }
}

/// The current state; kept for later pages when the list is paginated.
fn current(cache: &ResourceCache, limit: Option<u64>) -> Snapshot {
    if limit.is_some() { cache.snapshot_for_pages() } else { cache.snapshot() }
}

pub(super) fn key_scope<'a>(cache: &ResourceCache, filter: &'a Filter) -> KeyScope<'a> {
    match (&filter.namespace, cache.shape.info.namespaced) {
        (Some(ns), true) => KeyScope::Name { namespace: ns },
        (None, true) => KeyScope::NamespaceAndName,
        (_, false) => KeyScope::Name { namespace: "" },
    }
}

/// A LIST body: the items spliced from each object's shared bytes, never
/// re-encoded; with a continue token and, without selectors, the count of
/// what remains, when a limit cut the list short.
fn list_response(
    cache: &ResourceCache,
    snapshot: &Snapshot,
    filter: &Filter,
    variant: ContentVariant,
    start: Option<&PageStart>,
    limit: Option<u64>,
    key_scope: KeyScope<'_>,
) -> Result<Response<body::ProxyBody>, NoProtobuf> {
    let info = &cache.shape.info;
    let builtin = !cache.list_items_typed();
    let mut items = VecDeque::new();
    // Protobuf items: bare messages, framed once their lengths are known.
    let mut messages = Vec::new();
    let meta = page(cache, snapshot, filter, start, limit, key_scope, |obj| {
        let [a, b] = obj.list_item(variant, builtin)?;
        if variant.is_protobuf() {
            messages.push(a);
        } else {
            let sep = if items.is_empty() { Bytes::new() } else { Bytes::from_static(b",") };
            items.push_back(Chunk::parts(sep, a, b));
        }
        Ok(())
    })?;
    let chunks = if variant.is_protobuf() {
        protobuf_list_body(variant, &info.kind, &info.api_version(), &meta, messages)
            .map_err(|refused| NoProtobuf { reason: refused.reason() })?
    } else {
        list_body(variant, &info.kind, &info.api_version(), &meta, items)
    };
    let mut resp = Response::new(body::boxed_chunks(ChunkList::new(chunks)));
    set_common_headers(resp.headers_mut(), variant.content_type(Endpoint::List));
    Ok(resp)
}

/// Walks one page of the objects `filter` matches in `snapshot`, handing
/// each to `item`, and returns the page's list metadata: with a continue
/// token and, without selectors, the count of what remains, when a limit
/// cut the list short.
pub(super) fn page<E>(
    cache: &ResourceCache,
    snapshot: &Snapshot,
    filter: &Filter,
    start: Option<&PageStart>,
    limit: Option<u64>,
    key_scope: KeyScope<'_>,
    mut item: impl FnMut(&CachedObject) -> Result<(), E>,
) -> Result<ListMeta, E> {
    let info = &cache.shape.info;
    let namespace = filter.namespace.as_deref().filter(|_| info.namespaced);
    let lower = match &start {
        Some(s) if s.exclusive => Bound::Excluded(&s.after),
        Some(s) => Bound::Included(&s.after),
        None => Bound::Unbounded,
    };
    let mut matching =
        snapshot.candidates(filter.fields.exact(NODE_FIELD), namespace, lower).filter(|(_, obj)| filter.matches(obj));

    let mut last: Option<&ObjectKey> = None;
    let mut cut = None;
    for (count, (key, obj)) in (0u64..).zip(matching.by_ref()) {
        if count == limit.unwrap_or(u64::MAX) {
            // A limit cut the list short: this and what follows remain.
            cut = Some(1 + matching.count() as u64);
            break;
        }
        item(obj)?;
        last = Some(key);
    }
    let mut meta = ListMeta { rv: snapshot.rv, continue_token: None, remaining: None };
    if let (Some(remaining), Some(last)) = (cut, last) {
        meta.continue_token = Some(pagination::encode(snapshot.rv, last, key_scope));
        // The API server counts what remains only when the key range alone
        // decides what is listed.
        if filter.labels.is_empty() && filter.fields.is_empty() {
            meta.remaining = Some(remaining);
        }
    }
    Ok(meta)
}
