//! LIST bodies from the cache: a long JSON list streams the very bytes a
//! gathered one would be, from its own snapshot whatever changes meanwhile;
//! a short one keeps its exact length; and each page of a paginated list
//! counts what remains as a walk of the rest would, once the first page
//! counted it.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf as _, Bytes};
use http_body::Body as _;
use http_body_util::BodyExt;
use serde_json::Value;

use super::*;
use crate::cache::resource::{CacheSettings, Scope, Writer};
use crate::cache::state::object::tests::cm_shape;
use crate::cache::state::store::Objects;
use crate::cache::upstream_wire::Change;
use crate::encode::watch::EventType;
use crate::selector::{FieldSelector, LabelSelector};

/// A ConfigMap in `ns` with `data_bytes` of data, labelled `half=<name's parity>`.
fn cm(ns: &str, i: usize, rv: u64, data_bytes: usize) -> CachedObject {
    let raw = format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm-{i:05}","namespace":"{ns}","resourceVersion":"{rv}","labels":{{"half":"{}"}}}},"data":{{"k":"{}"}}}}"#,
        i % 2,
        "x".repeat(data_bytes)
    );
    CachedObject::decode(Bytes::from(raw), &cm_shape()).unwrap()
}

/// A ready cache at resourceVersion 10000 of `count` ConfigMaps spread over
/// three namespaces.
fn cache_of(count: usize, data_bytes: usize) -> Writer {
    let cache = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
    let objects: Objects = (0..count)
        .map(|i| cm(["ns-a", "ns-b", "ns-c"][i % 3], i, 100 + i as u64, data_bytes))
        .map(|o| (o.key.clone(), Arc::new(o)))
        .collect();
    cache.replace(objects, 10_000);
    cache
}

fn filter(namespace: Option<&str>, labels: &str) -> Filter {
    Filter::new(
        namespace.map(str::to_owned),
        None,
        LabelSelector::parse(labels).unwrap(),
        FieldSelector::parse("").unwrap(),
    )
}

/// The list `filter` selects, gathered item by item as a page would be.
fn gathered(cache: &ResourceCache, snapshot: &Snapshot, filter: &Filter, variant: ContentVariant) -> Vec<u8> {
    let mut items = VecDeque::new();
    let scope = key_scope(cache, filter);
    let meta = page::<NoProtobuf>(cache, snapshot, filter, None, None, scope, |obj| {
        let [a, b] = obj.list_item(variant, !cache.list_items_typed())?;
        let sep = if items.is_empty() { Bytes::new() } else { Bytes::from_static(b",") };
        items.push_back(Chunk::parts(sep, a, b));
        Ok(())
    })
    .unwrap();
    let info = &cache.shape.info;
    let chunks = list_body(variant, &info.kind, &info.api_version(), &meta, items);
    chunks.into_iter().flat_map(|mut c| c.copy_to_bytes(c.remaining())).collect()
}

/// The same in protobuf: each item's bare message, framed as a gathered
/// page frames them.
fn gathered_protobuf(cache: &ResourceCache, snapshot: &Snapshot, filter: &Filter, variant: ContentVariant) -> Vec<u8> {
    let mut messages = Vec::new();
    let scope = key_scope(cache, filter);
    let meta = page::<NoProtobuf>(cache, snapshot, filter, None, None, scope, |obj| {
        let [message, _] = obj.list_item(variant, !cache.list_items_typed())?;
        messages.push(message);
        Ok(())
    })
    .unwrap();
    let info = &cache.shape.info;
    let chunks = protobuf_list_body(variant, &info.kind, &info.api_version(), &meta, messages).unwrap();
    chunks.into_iter().flat_map(|mut c| c.copy_to_bytes(c.remaining())).collect()
}

fn response(cache: &ResourceCache, snapshot: &Snapshot, filter: &Filter, variant: ContentVariant) -> body::ProxyBody {
    let scope = key_scope(cache, filter);
    list_response(cache, snapshot, filter, variant, None, None, scope).unwrap().into_body()
}

/// `answer()`'s result, and whether it counted a streamed list.
fn counting_streams<T>(answer: impl FnOnce() -> T) -> (T, bool) {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let prom = recorder.handle();
    let out = metrics::with_local_recorder(&recorder, answer);
    (out, prom.render().lines().any(|l| l.starts_with("watchmux_cache_list_streamed_total{") && l.ends_with(" 1")))
}

async fn read_all(body: body::ProxyBody) -> Vec<u8> {
    body.collect().await.unwrap().to_bytes().to_vec()
}

fn names(list: &[u8]) -> Vec<String> {
    let list: Value = serde_json::from_slice(list).expect("a list body is JSON");
    list["items"]
        .as_array()
        .map_or(vec![], |items| items.iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_owned()).collect())
}

#[tokio::test]
async fn a_long_json_list_streams_the_bytes_a_gathered_one_would_be() {
    // 1,500 items of about 1.6 KiB: past what is gathered before the
    // headers, and several batches.
    let writer = cache_of(1500, 1500);
    let cache = writer.cache();
    let snapshot = cache.snapshot();
    for (filter, variant, expected_items) in [
        (filter(None, ""), ContentVariant::Json, 1500),
        (filter(None, "half=1"), ContentVariant::Json, 750),
        (filter(Some("ns-b"), ""), ContentVariant::Json, 500),
        (filter(None, ""), ContentVariant::PartialObjectMetadataJson, 1500),
    ] {
        let (body, counted) = counting_streams(|| response(cache, &snapshot, &filter, variant));
        let streamed = body.size_hint().exact().is_none();
        assert_eq!(counted, streamed, "{filter:?} {variant:?}: counted as streamed exactly when streamed");
        if streamed {
            assert!(body.size_hint().lower() > 1024 * 1024, "a streamed list says it is long: it is compressed");
        }
        let bytes = read_all(body).await;
        assert_eq!(bytes, gathered(cache, &snapshot, &filter, variant), "{filter:?} {variant:?}");
        assert_eq!(names(&bytes).len(), expected_items);
        // Metadata items are a few hundred bytes: 1,500 of them fit in a
        // MiB, as do one namespace's 500 whole ConfigMaps.
        let long = variant == ContentVariant::Json && expected_items >= 750;
        assert_eq!(streamed, long, "{filter:?} {variant:?}: streamed only past a MiB of items");
    }
}

#[tokio::test]
async fn a_long_protobuf_list_streams_the_bytes_a_gathered_one_would_be_with_its_exact_length() {
    let writer = cache_of(1500, 1500);
    let cache = writer.cache();
    let snapshot = cache.snapshot();
    for (filter, variant, streamed) in [
        (filter(None, ""), ContentVariant::Protobuf, true),
        (filter(None, "half=1"), ContentVariant::Protobuf, true),
        (filter(Some("ns-b"), ""), ContentVariant::Protobuf, false),
        (filter(None, ""), ContentVariant::PartialObjectMetadataProtobuf, false),
    ] {
        let (body, counted) = counting_streams(|| response(cache, &snapshot, &filter, variant));
        assert_eq!(counted, streamed, "{filter:?} {variant:?}: streamed only past a MiB of items");
        let length = body.size_hint().exact();
        let bytes = read_all(body).await;
        assert_eq!(length, Some(bytes.len() as u64), "{filter:?} {variant:?}: a protobuf list knows its length");
        assert!(
            bytes == gathered_protobuf(cache, &snapshot, &filter, variant),
            "{filter:?} {variant:?}: {} bytes",
            bytes.len()
        );
    }
}

#[tokio::test]
async fn a_streamed_list_is_compressed_as_the_api_server_compresses_a_long_list() {
    use crate::compress::{AnswerKind, ResponseCompression};
    let writer = cache_of(1500, 1500);
    let cache = writer.cache();
    let snapshot = cache.snapshot();
    let everything = filter(None, "");
    let scope = key_scope(cache, &everything);
    let resp = list_response(cache, &snapshot, &everything, ContentVariant::Json, None, None, scope).unwrap();
    let mut asking = http::HeaderMap::new();
    asking.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("gzip"));
    let resp = ResponseCompression::default().apply(&asking, AnswerKind::Complete, resp);
    assert_eq!(resp.headers()[http::header::CONTENT_ENCODING], "gzip");
    let compressed = read_all(resp.into_body()).await;
    let plain = crate::upstream::bounded_read::gunzip(&compressed, 64 << 20).unwrap();
    assert_eq!(plain.to_vec(), gathered(cache, &snapshot, &everything, ContentVariant::Json));
}

#[tokio::test]
async fn a_short_list_keeps_its_exact_length_and_an_empty_one_its_empty_items() {
    let writer = cache_of(30, 10);
    let cache = writer.cache();
    let snapshot = cache.snapshot();
    for (filter, variant) in [
        (filter(None, ""), ContentVariant::Json),
        (filter(None, "half=7"), ContentVariant::Json),
        (filter(None, "half=7"), ContentVariant::PartialObjectMetadataJson),
    ] {
        let body = response(cache, &snapshot, &filter, variant);
        let length = body.size_hint().exact();
        let bytes = read_all(body).await;
        assert_eq!(length, Some(bytes.len() as u64), "HTTP/1.1 sends a Content-Length");
        assert_eq!(bytes, gathered(cache, &snapshot, &filter, variant));
    }
    let empty = read_all(response(cache, &snapshot, &filter(None, "half=7"), ContentVariant::Json)).await;
    assert!(empty.ends_with(
        br#""items":[]}
"#
    ));
    let empty =
        read_all(response(cache, &snapshot, &filter(None, "half=7"), ContentVariant::PartialObjectMetadataJson)).await;
    assert!(empty.ends_with(
        br#""items":null}
"#
    ));
}

#[tokio::test]
async fn a_streamed_list_is_its_snapshot_whatever_changes_meanwhile() {
    let writer = cache_of(1500, 1000);
    let cache = writer.cache();
    let snapshot = cache.snapshot();
    let before = gathered(cache, &snapshot, &filter(None, ""), ContentVariant::Json);
    let mut body = response(cache, &snapshot, &filter(None, ""), ContentVariant::Json);
    let mut read = Vec::new();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    read.extend_from_slice(&first.clone().copy_to_bytes(first.remaining()));
    // Every object changes and half go, while the body is still being read.
    for i in 0..1500 {
        let obj = cm(["ns-a", "ns-b", "ns-c"][i % 3], i, 20_000 + i as u64, 3);
        let kind = if i % 2 == 0 { EventType::Deleted } else { EventType::Modified };
        writer.apply(Change::Event(kind, obj, std::time::Instant::now()));
    }
    assert_eq!(cache.snapshot().objects.len(), 750, "the cache moved on");
    read.extend(read_all(body).await);
    assert_eq!(read, before, "the list is the snapshot it started from");
}

/// Pages through `filter`'s list `limit` at a time, checking each page's
/// count of what remains against the truth; returns the names listed.
fn page_through(cache: &ResourceCache, filter: &Filter, limit: u64) -> Vec<String> {
    let snapshot = cache.snapshot_for_pages();
    let scope = key_scope(cache, filter);
    let total = snapshot.objects.values().filter(|o| filter.matches(o)).count() as u64;
    let mut listed = Vec::new();
    let mut start = None;
    loop {
        let meta = page::<()>(cache, &snapshot, filter, start.as_ref(), Some(limit), scope, |obj| {
            listed.push(obj.key.name.to_string());
            Ok(())
        })
        .unwrap();
        let Some(token) = meta.continue_token else {
            assert_eq!(meta.remaining, None, "the last page counts nothing");
            return listed;
        };
        assert_eq!(meta.remaining, Some(total - listed.len() as u64), "after {} items", listed.len());
        let c = pagination::decode(&token, scope).unwrap();
        start = Some(PageStart { after: c.after, exclusive: c.exclusive });
    }
}

#[tokio::test]
async fn every_page_counts_what_remains_the_first_walking_the_rest_the_others_carrying_it() {
    let writer = cache_of(100, 3);
    let cache = writer.cache();
    let all: Vec<String> = cache.snapshot().objects.keys().map(|k| k.name.to_string()).collect();
    assert_eq!(page_through(cache, &filter(None, ""), 7), all);
    // The same keys end pages of one namespace's list: that list's counts
    // are its own, not the cluster-wide list's.
    let in_b: Vec<String> =
        cache.snapshot().objects.keys().filter(|k| k.namespace == "ns-b").map(|k| k.name.to_string()).collect();
    assert_eq!(page_through(cache, &filter(Some("ns-b"), ""), 7), in_b);
    assert_eq!(page_through(cache, &filter(None, ""), 13), all);
    // Labels: no count (the API server's rule), and pages still complete.
    let snapshot = cache.snapshot_for_pages();
    let labelled = filter(None, "half=1");
    let scope = key_scope(cache, &labelled);
    let meta = page::<()>(cache, &snapshot, &labelled, None, Some(5), scope, |_| Ok(())).unwrap();
    assert!(meta.continue_token.is_some() && meta.remaining.is_none());
}

#[tokio::test]
async fn a_carried_count_is_used_only_for_the_page_it_follows() {
    let writer = cache_of(40, 3);
    let cache = writer.cache();
    let snapshot = cache.snapshot_for_pages();
    let everything = filter(None, "");
    let scope = key_scope(cache, &everything);
    let first = page::<()>(cache, &snapshot, &everything, None, Some(10), scope, |_| Ok(())).unwrap();
    assert_eq!(first.remaining, Some(30));
    let c = pagination::decode(&first.continue_token.unwrap(), scope).unwrap();
    // An inclusive start (a token the cache did not write) includes its key:
    // one more remains than after it, so the carried count cannot serve.
    let inclusive = PageStart { after: c.after.clone(), exclusive: false };
    let meta = page::<()>(cache, &snapshot, &everything, Some(&inclusive), Some(10), scope, |_| Ok(())).unwrap();
    assert_eq!(meta.remaining, Some(21));
    let exclusive = PageStart { after: c.after, exclusive: true };
    let meta = page::<()>(cache, &snapshot, &everything, Some(&exclusive), Some(10), scope, |_| Ok(())).unwrap();
    assert_eq!(meta.remaining, Some(20));
}
