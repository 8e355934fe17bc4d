//! LIST from the cache: which state a LIST is answered from (current,
//! proven-fresh, at least N, exactly N, or the snapshot a continue token
//! names), and the list body, paginated as the API server paginates.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tokio::time::Instant;

use super::walk::{ListStream, PageStart, Walk};
use super::{CacheService, Served, set_common_headers};
use crate::body::{self, Chunk, ChunkList};
use crate::cache::content::{Answer, NoProtobufHere, answer_form};
use crate::cache::delivery::filter::Filter;
use crate::cache::read::pagination::{self, KeyScope};
use crate::cache::read::params::{ReadParams, Rv, RvMatch};
use crate::cache::reason::Reason;
use crate::cache::resource::ResourceCache;
use crate::cache::resource::freshness::{Proof, ProofOutcome, reached};
use crate::cache::state::object::{CachedObject, NoProtobuf, ObjectKey};
use crate::cache::state::snapshots::PageEnd;
use crate::cache::state::store::Snapshot;
use crate::encode::list::{ListItems, ListMeta, list_body, list_ends, protobuf_list_body};
use crate::encode::protobuf::{ENVELOPE_TAIL, ListLayout, Unplaceable};
use crate::encode::variant::{ContentVariant, Endpoint};
use crate::metrics as m;

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
    if limit.is_none() {
        if !variant.is_protobuf() {
            return streamed_list_response(cache, snapshot, filter, variant, start);
        }
        return protobuf_list_without_limit(cache, snapshot, filter, variant, start);
    }
    let info = &cache.shape.info;
    let builtin = !cache.list_items_typed();
    let mut items = ListItems::default();
    // Protobuf items: bare messages, framed once their lengths are known.
    let mut messages = Vec::new();
    let meta = page(cache, snapshot, filter, start, limit, key_scope, |obj| {
        let item = obj.list_item(variant, builtin)?;
        if variant.is_protobuf() {
            let [message, _] = item;
            messages.push(message);
        } else {
            items.push(item);
        }
        Ok(())
    })?;
    let chunks = if variant.is_protobuf() {
        protobuf_list_body(variant, &info.kind, &info.api_version(), &meta, messages)
            .map_err(|refused| NoProtobuf { reason: refused.reason() })?
    } else {
        list_body(variant, &info.kind, &info.api_version(), &meta, items.take())
    };
    Ok(list_with_headers(body::boxed_chunks(ChunkList::new(chunks)), variant))
}

/// Item bytes a list without a limit gathers before its headers: a list
/// that fits is sent whole with its exact length, as before; a longer one
/// streams the rest from its snapshot.
const GATHERED_ITEM_BYTES: usize = 1024 * 1024;

/// A JSON LIST without a limit (a page's metadata holds its continue token,
/// so a page is always gathered; a protobuf list's head holds its length:
/// [`streamed_protobuf_list_response`]). Gathered whole when short; streamed
/// from its snapshot otherwise, so that a full LIST of a million objects
/// holds one batch of chunks at a time and sends its first byte at once.
fn streamed_list_response(
    cache: &ResourceCache,
    snapshot: &Snapshot,
    filter: &Filter,
    variant: ContentVariant,
    start: Option<&PageStart>,
) -> Result<Response<body::ProxyBody>, NoProtobuf> {
    let info = &cache.shape.info;
    let walk = Walk::new(snapshot.clone(), filter, info.namespaced, start);
    let mut stream = ListStream::new(walk, variant, !cache.list_items_typed());
    let whole = stream.gather(GATHERED_ITEM_BYTES)?;
    let meta = ListMeta { rv: snapshot.rv, continue_token: None, remaining: None };
    let (head, close) = list_ends(variant, &info.kind, &info.api_version(), &meta, stream.placed_any());
    let body = if whole {
        let mut chunks = stream.into_gathered();
        chunks.push_front(Chunk::from(head));
        chunks.push_back(Chunk::from(close));
        body::boxed_chunks(ChunkList::new(chunks))
    } else {
        metrics::counter!(m::CACHE_LIST_STREAMED, "resource" => cache.label().to_owned()).increment(1);
        body::boxed_chunks(stream.after(head, close))
    };
    Ok(list_with_headers(body, variant))
}

/// A protobuf LIST without a limit: a walk asks every item for its bare
/// message (made then and kept in the object) and notes its length, which
/// the head holds. A list of a MiB or less is answered from the messages
/// gathered on the way, as a page is; a longer one lets them go, keeps the
/// lengths (8 bytes an item instead of a chunk each) and streams from its
/// snapshot, a second walk only reading the kept messages.
fn protobuf_list_without_limit(
    cache: &ResourceCache,
    snapshot: &Snapshot,
    filter: &Filter,
    variant: ContentVariant,
    start: Option<&PageStart>,
) -> Result<Response<body::ProxyBody>, NoProtobuf> {
    let info = &cache.shape.info;
    let builtin = !cache.list_items_typed();
    let walk = Walk::new(snapshot.clone(), filter, info.namespaced, start);
    let mut lens = Vec::new();
    let mut gathered = Some(Vec::new());
    let mut total = 0;
    for (_, obj) in walk.matching() {
        let [message, _] = obj.list_item(variant, builtin)?;
        total += message.len();
        lens.push(message.len());
        match &mut gathered {
            Some(_) if total > GATHERED_ITEM_BYTES => gathered = None,
            Some(messages) => messages.push(message),
            None => {}
        }
    }
    let meta = ListMeta { rv: snapshot.rv, continue_token: None, remaining: None };
    let refused = |refused: Unplaceable| NoProtobuf { reason: refused.reason() };
    if let Some(messages) = gathered {
        let chunks = protobuf_list_body(variant, &info.kind, &info.api_version(), &meta, messages).map_err(refused)?;
        return Ok(list_with_headers(body::boxed_chunks(ChunkList::new(chunks)), variant));
    }
    let (kind, api_version) = variant.list_type(&info.kind, &info.api_version());
    let layout = ListLayout::new(&api_version, &kind, meta.to_json().as_bytes(), &lens).map_err(refused)?;
    let items_len = lens.iter().map(|&len| layout.item_prefix(len).len() + len).sum();
    let head = Bytes::from(layout.head.clone());
    let stream =
        ListStream::protobuf(walk, variant, builtin, layout, items_len).after(head, Bytes::from_static(ENVELOPE_TAIL));
    metrics::counter!(m::CACHE_LIST_STREAMED, "resource" => cache.label().to_owned()).increment(1);
    Ok(list_with_headers(body::boxed_chunks(stream), variant))
}

fn list_with_headers(body: body::ProxyBody, variant: ContentVariant) -> Response<body::ProxyBody> {
    let mut resp = Response::new(body);
    set_common_headers(resp.headers_mut(), variant.content_type(Endpoint::List));
    resp
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
    let walk = Walk::new(snapshot.clone(), filter, cache.shape.info.namespaced, start);
    let mut matching = walk.matching();
    let limit = limit.unwrap_or(u64::MAX);
    let mut served = 0u64;
    let mut last: Option<&ObjectKey> = None;
    let mut cut = false;
    for (key, obj) in matching.by_ref() {
        if served == limit {
            // A limit cut the list short: this and what follows remain.
            cut = true;
            break;
        }
        item(obj)?;
        served += 1;
        last = Some(key);
    }
    let mut meta = ListMeta { rv: snapshot.rv, continue_token: None, remaining: None };
    if let (true, Some(last)) = (cut, last) {
        meta.continue_token = Some(pagination::encode(snapshot.rv, last, key_scope));
        // The API server counts what remains only when the key range alone
        // decides what is listed.
        if filter.labels.is_empty() && filter.fields.is_empty() {
            let namespace = filter.namespace.as_deref().filter(|_| cache.shape.info.namespaced);
            let end_of = |last: &ObjectKey| PageEnd {
                rv: snapshot.rv,
                namespace: namespace.map(Into::into),
                last: last.clone(),
            };
            // What the page before counted, less this page; else a walk of the rest.
            let carried = start
                .filter(|s| s.exclusive)
                .and_then(|s| cache.remaining_after(&end_of(&s.after)))
                .and_then(|before| before.checked_sub(served))
                .filter(|&remaining| remaining > 0);
            let remaining = carried.unwrap_or_else(|| 1 + matching.count() as u64);
            cache.note_remaining(end_of(last), remaining);
            meta.remaining = Some(remaining);
        }
    }
    Ok(meta)
}

#[cfg(test)]
mod tests;
