//! The schema check against an in-process fake upstream: a drifted document
//! turns protobuf off for the kind before the cache is ready, a fitting one
//! (at a later relist) turns it on again, and a document that cannot be had
//! leaves it as it was.

use std::sync::Arc;

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::*;
use crate::body;
use crate::cache::resource::{CacheSettings, ResourceCache, Scope};
use crate::cache::resource_info::test_info;
use crate::cache::state::object::ObjectShape;
use crate::cache::sync::reflector::{Reflector, ReflectorState};
use crate::encode::protobuf::served_document;
use crate::encode::variant::ContentVariant;
use crate::upstream::{UpstreamOptions, fake_server};

const CONFIGMAPS: &str = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[{"metadata":{"name":"a","namespace":"ns","resourceVersion":"9"},"data":{"k":"v"}}]}"#;

fn config_map() -> MessageType {
    MessageType::for_kind("v1", "ConfigMap").unwrap()
}

/// What the fake upstream answers for `/openapi/v3/api/v1`: a document, or a status.
type Served = Arc<Mutex<Result<Value, StatusCode>>>;

/// A fake kube-apiserver that lists configmaps and serves `openapi`, counting
/// the document's fetches; it has no OpenAPI root (an older server).
async fn fake_upstream(openapi: Served, fetches: Arc<Mutex<u32>>) -> Arc<Upstream> {
    fake_upstream_with_root(openapi, fetches, Arc::new(Mutex::new(None))).await
}

/// The same, with an OpenAPI root naming `/openapi/v3/api/v1` with `hash`
/// when it is set.
async fn fake_upstream_with_root(
    openapi: Served,
    fetches: Arc<Mutex<u32>>,
    hash: Arc<Mutex<Option<String>>>,
) -> Arc<Upstream> {
    let addr = fake_server::serve(move |req: Request<Incoming>| {
        let (openapi, fetches, hash) = (openapi.clone(), fetches.clone(), hash.clone());
        async move {
            let (status, text) = match req.uri().path() {
                "/api/v1/configmaps" => (StatusCode::OK, CONFIGMAPS.to_owned()),
                "/openapi/v3" => match &*hash.lock() {
                    Some(h) => {
                        let url = format!("/openapi/v3/api/v1?hash={h}");
                        (StatusCode::OK, json!({"paths": {"api/v1": {"serverRelativeURL": url}}}).to_string())
                    }
                    None => (StatusCode::NOT_FOUND, "{}".to_owned()),
                },
                // Only the URL the root names is served (kube-apiserver
                // redirects a stale hash; it would serve no hash uncached):
                // a check that fetched another fails here.
                "/openapi/v3/api/v1"
                    if hash.lock().as_ref().is_some_and(|h| req.uri().query() != Some(&format!("hash={h}"))) =>
                {
                    (StatusCode::MOVED_PERMANENTLY, String::new())
                }
                "/openapi/v3/api/v1" => {
                    *fetches.lock() += 1;
                    match &*openapi.lock() {
                        Ok(doc) => (StatusCode::OK, doc.to_string()),
                        Err(status) => (*status, "{}".to_owned()),
                    }
                }
                _ => (StatusCode::NOT_FOUND, "{}".to_owned()),
            };
            Response::builder().status(status).body(body::full(text)).unwrap()
        }
    })
    .await;
    fake_server::upstream(addr, UpstreamOptions::default())
}

/// A configmaps cache behind `upstream` and its reflector, not started.
fn configmaps_cache(upstream: Arc<Upstream>) -> (Arc<ResourceCache>, Reflector) {
    let shape = ObjectShape::new(test_info("", "configmaps", "ConfigMap", true), None);
    let writer = ResourceCache::create(shape, Scope::default(), CacheSettings::default());
    let cache = writer.cache().clone();
    (cache, Reflector::new(writer, upstream, Arc::default()))
}

/// The table's ConfigMap document with a field a newer server would serve.
fn newer_server() -> Value {
    let mut doc = served_document(config_map());
    doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]["properties"]["shinyNewField"] =
        json!({"type": "string"});
    doc
}

#[test]
fn the_table_s_own_document_fits_and_a_newer_one_drifts_in_the_kind_or_in_metadata() {
    assert_eq!(compare(config_map(), &served_document(config_map())), Outcome::Fits);
    match compare(config_map(), &newer_server()) {
        Outcome::Drift { differences, in_metadata } => {
            assert_eq!(
                differences.iter().map(ToString::to_string).collect::<Vec<_>>(),
                ["io.k8s.api.core.v1.ConfigMap.shinyNewField: served, not in the table (core/v1.ConfigMap)"]
            );
            assert!(!in_metadata, "ConfigMap's own field leaves PartialObjectMetadata alone");
        }
        other => panic!("{other:?}"),
    }
    let mut doc = served_document(config_map());
    doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["shinyNewMeta"] =
        json!({"type": "string"});
    assert!(matches!(compare(config_map(), &doc), Outcome::Drift { in_metadata: true, .. }));
    // A document without the kind cannot say: no verdict, not a drift.
    assert!(matches!(compare(config_map(), &json!({"components": {"schemas": {}}})), Outcome::Unavailable(_)));
}

#[test]
fn documents_are_found_where_kube_apiserver_serves_them() {
    assert_eq!(document_path(&test_info("", "pods", "Pod", true)), "/openapi/v3/api/v1");
    assert_eq!(document_path(&test_info("apps", "deployments", "Deployment", true)), "/openapi/v3/apis/apps/v1");
}

#[tokio::test]
async fn a_drifted_kind_has_protobuf_off_before_the_cache_is_ready_and_on_again_when_it_fits() {
    let openapi: Served = Arc::new(Mutex::new(Ok(newer_server())));
    let fetches = Arc::new(Mutex::new(0));
    let (cache, mut reflector) = configmaps_cache(fake_upstream(openapi.clone(), fetches.clone()).await);
    assert!(cache.protobuf_availability().allows(ContentVariant::Protobuf));

    let next = reflector.step(ReflectorState::Listing).await;
    assert_eq!(next, ReflectorState::Watching { rv: 10 });
    assert!(cache.is_ready());
    assert!(
        !cache.protobuf_availability().allows(ContentVariant::Protobuf),
        "a newer server's ConfigMap gets no protobuf"
    );
    assert!(
        cache.protobuf_availability().allows(ContentVariant::PartialObjectMetadataProtobuf),
        "ObjectMeta did not drift"
    );
    assert!(cache.protobuf_availability().allows(ContentVariant::Json));
    assert_eq!(*fetches.lock(), 1);

    // A relist (the server was rolled back, say) checks again.
    *openapi.lock() = Ok(served_document(config_map()));
    reflector.step(ReflectorState::Listing).await;
    assert!(cache.protobuf_availability().allows(ContentVariant::Protobuf));
    assert_eq!(*fetches.lock(), 2);
}

#[tokio::test]
async fn a_document_that_cannot_be_had_neither_blocks_the_cache_nor_changes_protobuf() {
    let openapi: Served = Arc::new(Mutex::new(Err(StatusCode::FORBIDDEN)));
    let fetches = Arc::new(Mutex::new(0));
    let (cache, mut reflector) = configmaps_cache(fake_upstream(openapi.clone(), fetches.clone()).await);
    assert_eq!(reflector.step(ReflectorState::Listing).await, ReflectorState::Watching { rv: 10 });
    assert!(cache.is_ready());
    assert!(cache.protobuf_availability().allows(ContentVariant::Protobuf), "kept on: the table's version is assumed");
    assert_eq!(*fetches.lock(), 1);

    // Off after a drift, a failed fetch at the next relist keeps it off.
    *openapi.lock() = Ok(newer_server());
    reflector.step(ReflectorState::Listing).await;
    assert!(!cache.protobuf_availability().allows(ContentVariant::Protobuf));
    *openapi.lock() = Err(StatusCode::SERVICE_UNAVAILABLE);
    reflector.step(ReflectorState::Listing).await;
    assert!(!cache.protobuf_availability().allows(ContentVariant::Protobuf));
    assert_eq!(*fetches.lock(), 3);
}

#[tokio::test]
async fn custom_resources_are_not_checked() {
    let upstream = fake_upstream(Arc::new(Mutex::new(Err(StatusCode::NOT_FOUND))), Arc::new(Mutex::new(0))).await;
    let checker = SchemaChecker::default();
    let info = test_info("example.com", "widgets", "Widget", true);
    assert_eq!(checker.check(&upstream, &info).await, Outcome::NotInTable);
}

#[tokio::test]
async fn caches_of_one_group_version_listing_together_share_one_fetch_and_a_later_list_fetches_again() {
    let mut doc = served_document(config_map());
    let pods = served_document(MessageType::for_kind("v1", "Pod").unwrap());
    for (name, schema) in pods["components"]["schemas"].as_object().unwrap() {
        doc["components"]["schemas"][name] = schema.clone();
    }
    let fetches = Arc::new(Mutex::new(0));
    let upstream = fake_upstream(Arc::new(Mutex::new(Ok(doc))), fetches.clone()).await;
    let checker = SchemaChecker::default();
    let (pod, cm) = (test_info("", "pods", "Pod", true), test_info("", "configmaps", "ConfigMap", true));
    let (a, b) = tokio::join!(checker.check(&upstream, &pod), checker.check(&upstream, &cm));
    assert_eq!((a, b), (Outcome::Fits, Outcome::Fits));
    assert_eq!(*fetches.lock(), 1, "one fetch for both");
    // Nobody holds the document any more: the next check reads it afresh.
    assert_eq!(checker.check(&upstream, &cm).await, Outcome::Fits);
    assert_eq!(*fetches.lock(), 2);
}

#[tokio::test]
async fn the_document_is_fetched_again_only_when_the_root_names_another_version_of_it() {
    let openapi: Served = Arc::new(Mutex::new(Ok(served_document(config_map()))));
    let fetches = Arc::new(Mutex::new(0));
    let hash = Arc::new(Mutex::new(Some("AAAA".to_owned())));
    let upstream = fake_upstream_with_root(openapi.clone(), fetches.clone(), hash.clone()).await;
    let checker = SchemaChecker::default();
    let cm = test_info("", "configmaps", "ConfigMap", true);

    assert_eq!(checker.check(&upstream, &cm).await, Outcome::Fits);
    assert_eq!(checker.check(&upstream, &cm).await, Outcome::Fits);
    assert_eq!(*fetches.lock(), 1, "same hash: the verdict is kept, the document not read again");

    // The server was upgraded: another hash, another document, another verdict.
    *openapi.lock() = Ok(newer_server());
    *hash.lock() = Some("BBBB".to_owned());
    assert!(matches!(checker.check(&upstream, &cm).await, Outcome::Drift { .. }));
    assert_eq!(*fetches.lock(), 2);
    assert!(matches!(checker.check(&upstream, &cm).await, Outcome::Drift { .. }), "the drift is kept too");
    assert_eq!(*fetches.lock(), 2);

    // A document that could not be had is not remembered: asked again next time.
    *hash.lock() = Some("CCCC".to_owned());
    *openapi.lock() = Err(StatusCode::SERVICE_UNAVAILABLE);
    assert!(matches!(checker.check(&upstream, &cm).await, Outcome::Unavailable(_)));
    *openapi.lock() = Ok(served_document(config_map()));
    assert_eq!(checker.check(&upstream, &cm).await, Outcome::Fits);
    assert_eq!(*fetches.lock(), 4);

    // Without a root (an older server), every check reads the document.
    *hash.lock() = None;
    assert_eq!(checker.check(&upstream, &cm).await, Outcome::Fits);
    assert_eq!(*fetches.lock(), 5);
}
