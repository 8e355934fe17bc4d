use super::*;
use crate::cache::delivery::filter::Filter;
use crate::cache::resource::StartAt;
use crate::cache::state::object::tests::{cm, cm_shape};
use crate::encode::watch::EventType;
use std::time::Instant;

fn persistence(dir: &Path, named: &[&str]) -> Persistence {
    let config = PersistConfig {
        dir: Some(dir.to_owned()),
        resources: PersistSelection {
            all_but_secrets: false,
            named: named.iter().map(|n| GroupResource::parse(n)).collect(),
        },
        encryption_key_file: None,
        serve_stale_when_unreachable: false,
    };
    Persistence::new(&config).unwrap().unwrap()
}

/// Caches three configmaps at 13 with the store at `dir`, as a run of
/// watchmux would, and returns the objects' bytes by name.
fn cache_and_stop(p: &Persistence) -> Vec<(String, Bytes)> {
    let mut w = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
    p.attach(&mut w);
    let mut listed = Objects::new();
    for name in ["a", "b"] {
        let o = Arc::new(cm(name, 10, ""));
        listed.insert(o.key.clone(), o);
    }
    w.replace(listed, 10);
    w.event(EventType::Added, cm("c", 12, "\"app\":\"x\""));
    w.bookmark(13);
    w.take_feed().unwrap().finish();
    w.cache().snapshot().objects.iter().map(|(k, o)| (k.name.to_string(), o.json().clone())).collect()
}

fn restored_objects(r: &Restored) -> Vec<(String, Bytes)> {
    r.writer.cache().snapshot().objects.iter().map(|(k, o)| (k.name.to_string(), o.json().clone())).collect()
}

#[tokio::test]
async fn a_restart_serves_what_was_cached_at_its_version_unconfirmed() {
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["configmaps"]);
    let cached = cache_and_stop(&p);
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap();
    assert_eq!(restored.len(), 1);
    let r = &restored[0];
    assert_eq!(r.rv, 13);
    assert_eq!(restored_objects(r), cached, "the same bytes, not re-encoded");
    let cache = r.writer.cache();
    assert!(cache.is_ready(), "served before the upstream answers");
    assert!(cache.is_unconfirmed());
    assert_eq!(cache.shape.info.kind, "ConfigMap", "known without discovery");
    // A watch from the stored version is served; from before it, the
    // history cannot tell what came after: 410, as from the API server.
    assert!(cache.register(Filter::default(), StartAt::After(13)).unwrap().since_version.is_empty());
    assert!(cache.register(Filter::default(), StartAt::After(12)).is_err());
    // The first word from the upstream confirms it.
    r.writer.bookmark(14);
    assert!(!cache.is_unconfirmed());
    let mode = std::fs::metadata(dir.path().join("configmaps.v1.core.redb")).unwrap().permissions();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);
}

#[tokio::test]
async fn a_store_that_fails_its_check_is_moved_aside_and_the_resource_starts_cold() {
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["configmaps"]);
    let path = dir.path().join("configmaps.v1.core.redb");
    std::fs::write(&path, vec![0xa5; 4096]).unwrap();
    assert!(p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty());
    assert!(!path.exists());
    let aside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(aside.len(), 1);
    assert!(aside[0].to_string_lossy().starts_with("configmaps.v1.core.redb.bad-"), "{aside:?}");
    // An object that does not decode under its key: the same.
    cache_and_stop(&p);
    let store = DiskStore::open(&path).unwrap();
    let key = crate::cache::state::object::ObjectKey { namespace: "ns".into(), name: "a".into() };
    let broken = Bytes::from_static(
        br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"not-a","namespace":"ns","resourceVersion":"1"}}"#,
    );
    store.commit(&disk::Batch { rv: 13, changes: vec![(key, Some(broken))], ..disk::Batch::default() }).unwrap();
    drop(store);
    assert!(p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty());
    assert!(!path.exists(), "moved aside");
}

#[tokio::test]
async fn a_store_no_longer_chosen_or_of_another_scope_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("configmaps.v1.core.redb");
    cache_and_stop(&persistence(dir.path(), &["configmaps"]));
    assert!(
        persistence(dir.path(), &["pods"]).restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty()
    );
    assert!(!path.exists(), "no longer persisted: deleted, not left to go stale");
    let p = persistence(dir.path(), &["configmaps"]);
    cache_and_stop(&p);
    let scoped = Scope { query: vec![("labelSelector".into(), "app=x".into())], ..Scope::default() };
    let scopes = HashMap::from([(GroupResource::parse("configmaps"), scoped)]);
    assert!(p.restore_all(&CacheSettings::default(), &scopes).unwrap().is_empty());
    assert!(!path.exists(), "cached under another scope: deleted");
}

/// A pod as a node's kubelet sees it: about 3.6 KiB of JSON.
fn pod_json(i: usize, rv: u64) -> Bytes {
    let v = serde_json::json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": format!("app-{i:05}-7d9f8c6b5-x2k4z"), "namespace": format!("team-{}", i % 40),
            "uid": format!("6f1c2a4e-0b1d-4c3e-9a7f-{i:012}"), "resourceVersion": rv.to_string(),
            "generateName": "app-7d9f8c6b5-", "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": format!("app-{}", i % 300), "pod-template-hash": "7d9f8c6b5", "tier": "backend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T09:59:00Z", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app-7d9f8c6b5",
                "uid": "0a0b0c0d-1111-2222-3333-444455556666", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": format!("node-{}", i % 100), "serviceAccountName": "default", "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
            "containers": ([0, 1].iter().map(|c| serde_json::json!({
                "name": format!("c{c}"), "image": "registry.example/team/app:1.24.3", "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 8080 + c, "protocol": "TCP"}],
                "env": (0..6).map(|e| serde_json::json!({"name": format!("ENV_{e}"), "value": format!("value-{e}-{i}")})).collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 10},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
            })).collect::<Vec<_>>()),
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.244.{}.{}", i / 250, i % 250),
            "startTime": "2026-11-30T10:00:01Z", "qosClass": "Burstable",
            "conditions": (["Initialized", "Ready", "ContainersReady", "PodScheduled"].iter().map(|t| serde_json::json!(
                {"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T10:00:05Z"})).collect::<Vec<_>>()),
            "containerStatuses": ([0, 1].iter().map(|c| serde_json::json!({
                "name": format!("c{c}"), "ready": true, "restartCount": 0, "started": true,
                "image": "registry.example/team/app:1.24.3", "imageID": "registry.example/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                "containerID": format!("containerd://{:064x}", i * 2 + c),
                "state": {"running": {"startedAt": "2026-11-30T10:00:04Z"}}
            })).collect::<Vec<_>>())
        }
    });
    Bytes::from(serde_json::to_vec(&v).unwrap())
}

fn pod_shape() -> ObjectShape {
    ObjectShape::new(crate::cache::resource_info::test_info("", "pods", "Pod", true), None)
}

/// Figures for docs/node-local.md (run in release, not part of the tests):
/// `cargo test --release --lib measure_persist -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement; run by hand in release"]
async fn measure_persist() {
    let n: usize = std::env::var("PODS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["pods"]);
    let mut w = ResourceCache::create(pod_shape(), Scope::default(), CacheSettings::default());
    p.attach(&mut w);
    let mut listed = Objects::new();
    let mut object_bytes = 0;
    for i in 0..n {
        let json = pod_json(i, 1000 + i as u64);
        object_bytes += json.len();
        let o = Arc::new(CachedObject::decode(json, &pod_shape()).unwrap());
        listed.insert(o.key.clone(), o);
    }
    let list_rv = 1000 + n as u64;
    let started = Instant::now();
    w.replace(listed, list_rv);
    w.take_feed().unwrap().finish();
    let whole_commit = started.elapsed();
    let path = dir.path().join("pods.v1.core.redb");
    let after_list = std::fs::metadata(&path).unwrap().len();
    // The same objects committed as JSON, as the first format stored them:
    // where the difference goes.
    {
        let raw_path = dir.path().join("raw.redb");
        let raw = DiskStore::open(&raw_path).unwrap();
        let changes = w.cache().snapshot().objects.iter().map(|(k, o)| (k.clone(), Some(o.json().clone()))).collect();
        raw.commit(&disk::Batch { rv: list_rv, whole: true, changes, ..Default::default() }).unwrap();
        let size = std::fs::metadata(&raw_path).unwrap().len();
        println!("as JSON: file={size} ({:.2}x) {}", size as f64 / object_bytes as f64, raw.stats());
        println!("deflated: file={after_list} {}", DiskStore::open(&path).unwrap().stats());
    }
    // A day of churn in miniature: every pod modified twice, in batches.
    p.attach(&mut w);
    let started = Instant::now();
    for round in 0..2u64 {
        for i in 0..n {
            let rv = list_rv + 1 + round * n as u64 + i as u64;
            w.event(EventType::Modified, CachedObject::decode(pod_json(i, rv), &pod_shape()).unwrap());
        }
    }
    w.take_feed().unwrap().finish();
    let churn = started.elapsed();
    let after_churn = std::fs::metadata(&path).unwrap().len();
    let mut store = DiskStore::open(&path).unwrap();
    println!("after churn: {}", store.stats());
    while store.compact() {}
    drop(store);
    let compacted = std::fs::metadata(&path).unwrap().len();
    let started = Instant::now();
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap();
    let load = started.elapsed();
    assert_eq!(restored[0].writer.cache().snapshot().objects.len(), n);
    // The writer's hot path with and without a feed (no watchers: the
    // apply itself), per event.
    let per_event = |with_feed: bool| {
        let dir = tempfile::tempdir().unwrap();
        let p = persistence(dir.path(), &["pods"]);
        let mut w = ResourceCache::create(pod_shape(), Scope::default(), CacheSettings::default());
        if with_feed {
            p.attach(&mut w);
        }
        w.replace(Objects::new(), 1);
        let events: Vec<_> = (0..20_000u64)
            .map(|i| CachedObject::decode(pod_json(i as usize % 500, 2 + i), &pod_shape()).unwrap())
            .collect();
        let started = Instant::now();
        for e in events {
            w.event(EventType::Modified, e);
        }
        let took = started.elapsed() / 20_000;
        if let Some(feed) = w.take_feed() {
            feed.finish();
        }
        took
    };
    let (without, with) = (per_event(false), per_event(true));
    println!(
        "pods={n} object_bytes={object_bytes} (avg {} B) file_after_list={after_list} ({:.2}x) whole_commit={whole_commit:?} \
         churn_2x{n}_events={churn:?} file_after_churn={after_churn} ({:.2}x) compacted={compacted} ({:.2}x) load={load:?} \
         apply_per_event_without_feed={without:?} with_feed={with:?}",
        object_bytes / n,
        after_list as f64 / object_bytes as f64,
        after_churn as f64 / object_bytes as f64,
        compacted as f64 / object_bytes as f64,
    );
}

/// An upstream that has compacted past every version: watches get 410, the
/// list answers `list` (at 20).
async fn compacted_upstream(list: &'static str) -> Arc<crate::upstream::Upstream> {
    use http::{Request, Response, StatusCode};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| async move {
                let watch = req.uri().query().unwrap_or_default().contains("watch=true");
                let resp = if watch {
                    let gone =
                        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}"#;
                    let mut resp = Response::new(crate::body::full(gone));
                    *resp.status_mut() = StatusCode::GONE;
                    resp
                } else {
                    Response::new(crate::body::full(list))
                };
                Ok::<_, std::convert::Infallible>(resp)
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(io, service));
        }
    });
    let cfg = crate::upstream::kubeconfig::UpstreamConfig::for_test(&format!("http://{addr}"));
    Arc::new(crate::upstream::Upstream::new(&cfg, crate::upstream::UpstreamOptions::default()).unwrap())
}

/// The upstream no longer has the stored version: the resumed watch's 410
/// is an ordinary relist, whose difference reaches a watcher that started
/// from the stored version as events, and which confirms the cache.
#[tokio::test]
async fn a_410_on_resuming_from_the_stored_version_relists_with_the_gap_rule() {
    use crate::cache::sync::reflector::{Reflector, ReflectorState};
    const LIST: &str = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"20"},"items":[
        {"metadata":{"name":"b","namespace":"ns","resourceVersion":"10"},"data":{"k":"v"}},
        {"metadata":{"name":"d","namespace":"ns","resourceVersion":"18"},"data":{"k":"v"}}]}"#;
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["configmaps"]);
    cache_and_stop(&p); // a, b at 10, c at 12, store at 13
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().pop().unwrap();
    let cache = restored.writer.cache().clone();
    let watcher = cache.register(Filter::default(), StartAt::After(13)).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let reflector = Reflector::new(restored.writer, compacted_upstream(LIST).await, Arc::default());
    tokio::spawn(reflector.run_from(ReflectorState::Watching { rv: restored.rv }, stop.clone()));
    assert!(cache.wait_for_rv(20, std::time::Duration::from_secs(10)).await, "relisted");
    assert!(!cache.is_unconfirmed());
    let waker = std::task::Waker::noop().clone();
    let mut seen = Vec::new();
    while let Ok(crate::cache::delivery::watcher::Next::Event(d)) = watcher.handle.take(&waker) {
        seen.push((d.kind, d.object().key.name.clone()));
    }
    seen.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        seen,
        [(EventType::Deleted, "a".into()), (EventType::Deleted, "c".into()), (EventType::Added, "d".into())],
        "the difference from the stored state, nothing lost"
    );
    let names: Vec<_> = cache.snapshot().objects.keys().map(|k| k.name.clone()).collect();
    assert_eq!(names, ["b", "d"]);
    stop.cancel();
}

fn sealed_persistence(dir: &Path, key: u8) -> anyhow::Result<Option<Persistence>> {
    use base64::Engine;
    let key_file = dir.join(format!("key-{key}"));
    std::fs::write(&key_file, base64::engine::general_purpose::STANDARD.encode([key; 32])).unwrap();
    let config = PersistConfig {
        dir: Some(dir.join("store")),
        resources: PersistSelection { all_but_secrets: false, named: [GroupResource::parse("configmaps")].into() },
        encryption_key_file: Some(key_file),
        serve_stale_when_unreachable: false,
    };
    Persistence::new(&config)
}

#[tokio::test]
async fn encrypted_at_rest_opens_only_with_its_key_and_a_wrong_key_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    let cached = cache_and_stop(&p);
    let file = std::fs::read(dir.path().join("store/configmaps.v1.core.redb")).unwrap();
    assert!(!file.windows(8).any(|w| w == b"\"data\":{"), "an object's JSON is on disk in clear");
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap();
    assert_eq!(restored_objects(&restored[0]), cached, "the same bytes after opening");
    drop(restored);
    let wrong = sealed_persistence(dir.path(), 2).unwrap().unwrap();
    let err = wrong.restore_all(&CacheSettings::default(), &HashMap::new()).err().expect("a start-up error");
    assert!(err.to_string().contains("sealed with another key"), "{err}");
    let no_key = persistence(&dir.path().join("store"), &["configmaps"]);
    let err = no_key.restore_all(&CacheSettings::default(), &HashMap::new()).err().expect("a start-up error");
    assert!(err.to_string().contains("no --persist-encryption-key-file"), "{err}");
    assert!(dir.path().join("store/configmaps.v1.core.redb").exists(), "kept for the operator to decide");
}

#[tokio::test]
async fn a_store_in_clear_is_dropped_once_encryption_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    cache_and_stop(&persistence(&dir.path().join("store"), &["configmaps"]));
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    assert!(p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty());
    assert!(!dir.path().join("store/configmaps.v1.core.redb").exists());
}

/// The store file of `sealed_persistence`'s configmaps.
fn sealed_store(dir: &Path) -> PathBuf {
    dir.join("store/configmaps.v1.core.redb")
}

fn moved_aside(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".bad-"))
        .count()
}

/// The finding: an older, validly sealed copy of an encrypted store put
/// back (here: one whose pod "a" was since deleted) must not be served. The
/// copy is refused (moved aside, counted) and the resource starts cold; the
/// file as the node last wrote it loads.
#[tokio::test]
async fn an_encrypted_store_rolled_back_to_an_older_copy_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    cache_and_stop(&p); // a, b, c at 13
    let older = std::fs::read(sealed_store(dir.path())).unwrap();
    // Since then, upstream: a deleted, and the store follows.
    let mut restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().pop().unwrap();
    restored.writer.event(EventType::Deleted, cm("a", 14, ""));
    restored.writer.take_feed().unwrap().finish();
    drop(restored);
    let latest = std::fs::read(sealed_store(dir.path())).unwrap();
    // The latest loads, without "a".
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    let mut restored =
        p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().pop().expect("the latest loads");
    assert_eq!(restored.rv, 14);
    assert!(restored_objects(&restored).iter().all(|(n, _)| n != "a"));
    restored.writer.take_feed().unwrap().finish();
    drop(restored);
    // The older copy put back: refused, never served.
    std::fs::write(sealed_store(dir.path()), &older).unwrap();
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    assert!(
        p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty(),
        "a rolled-back store was served"
    );
    assert!(!sealed_store(dir.path()).exists());
    assert_eq!(moved_aside(&dir.path().join("store")), 1);
    // The resource starts cold and persists again: its next store, a new
    // file, is the latest and loads.
    cache_and_stop(&p);
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    assert_eq!(p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().len(), 1);
    drop(latest);
}

/// A store sealed with the same key by another node (another directory,
/// another ledger) copied in: refused. A store whose ledger was removed:
/// refused too, and the new ledger then works.
#[tokio::test]
async fn an_encrypted_store_from_another_directory_or_without_its_ledger_is_refused() {
    let here = tempfile::tempdir().unwrap();
    let there = tempfile::tempdir().unwrap();
    cache_and_stop(&sealed_persistence(there.path(), 1).unwrap().unwrap());
    cache_and_stop(&sealed_persistence(here.path(), 1).unwrap().unwrap());
    std::fs::copy(sealed_store(there.path()), sealed_store(here.path())).unwrap();
    let p = sealed_persistence(here.path(), 1).unwrap().unwrap();
    assert!(
        p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty(),
        "a swapped-in store was served"
    );
    cache_and_stop(&p);
    std::fs::remove_file(here.path().join("store").join(ledger::FILE)).unwrap();
    let p = sealed_persistence(here.path(), 1).unwrap().unwrap();
    assert!(p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty(), "served without its ledger");
    assert!(here.path().join("store").join(ledger::FILE).exists(), "a new ledger is written");
    cache_and_stop(&p);
    let p = sealed_persistence(here.path(), 1).unwrap().unwrap();
    assert_eq!(p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().len(), 1);
}

/// Every metadata entry is under the MAC: the version, the cluster
/// identity, and an entry no version of watchmux writes.
#[tokio::test]
async fn an_encrypted_store_whose_metadata_is_altered_is_refused() {
    for (entry, value) in [("rv", &99u64.to_be_bytes()[..]), ("cluster_identity", b"another"), ("anything", b"x")] {
        let dir = tempfile::tempdir().unwrap();
        let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
        cache_and_stop(&p);
        DiskStore::tamper_meta(&sealed_store(dir.path()), entry, value);
        let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
        assert!(
            p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty(),
            "{entry} altered, served"
        );
        assert_eq!(moved_aside(&dir.path().join("store")), 1, "{entry}");
    }
}

/// The cluster identity the sync side records comes back at a restart,
/// authenticated with the rest.
#[tokio::test]
async fn the_cluster_identity_is_stored_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    cache_and_stop(&p);
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().pop().unwrap();
    assert_eq!(restored.cluster_identity, None);
    let mut writer = restored.writer;
    writer.take_feed().unwrap().finish();
    // The feed as `restore` starts it, kept in hand to be told the identity.
    let path = sealed_store(dir.path());
    let target = Target {
        store: DiskStore::open_with(&path, p.sealer.clone()).unwrap(),
        header: p.header(writer.cache()),
        sealer: p.sealer.clone(),
        ledger: p.ledger(),
        written_rv: restored.rv,
        generation: p.last_generation(&path),
    };
    let feed = Feed::start(writer.cache().clone(), target);
    feed.set_cluster_identity(Some("kube-system-uid-1".into()));
    drop(feed);
    let p = sealed_persistence(dir.path(), 1).unwrap().unwrap();
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().pop().expect("loads");
    assert_eq!(restored.cluster_identity.as_deref(), Some("kube-system-uid-1"));
}

/// A store in clear trusts the disk (stated at start and in the docs): an
/// older copy put back is served. Kept as a test so that the statement
/// stays true, or is changed with it.
#[tokio::test]
async fn a_store_in_clear_trusts_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["configmaps"]);
    cache_and_stop(&p);
    let path = dir.path().join("configmaps.v1.core.redb");
    let older = std::fs::read(&path).unwrap();
    let mut restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().pop().unwrap();
    restored.writer.event(EventType::Deleted, cm("a", 14, ""));
    restored.writer.take_feed().unwrap().finish();
    drop(restored);
    std::fs::write(&path, older).unwrap();
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().pop().unwrap();
    assert_eq!(restored.rv, 13, "the older copy is what the disk holds");
}

/// A store cut short, at several lengths: moved aside, the resource starts
/// cold, nothing panics; the next start finds no bad store.
#[tokio::test]
async fn a_truncated_store_is_moved_aside_and_the_resource_starts_cold() {
    for cut in [Cut::Tenth, Cut::Bytes(4096), Cut::Bytes(100), Cut::Half] {
        let dir = tempfile::tempdir().unwrap();
        let p = persistence(dir.path(), &["pods"]);
        let mut w = ResourceCache::create(pod_shape(), Scope::default(), CacheSettings::default());
        p.attach(&mut w);
        let mut listed = Objects::new();
        for i in 0..1_000 {
            let o = Arc::new(CachedObject::decode(pod_json(i, 1000 + i as u64), &pod_shape()).unwrap());
            listed.insert(o.key.clone(), o);
        }
        w.replace(listed, 2000);
        w.take_feed().unwrap().finish();
        let path = dir.path().join("pods.v1.core.redb");
        let full = std::fs::read(&path).unwrap();
        let len = match cut {
            Cut::Tenth => full.len() / 10,
            Cut::Half => full.len() / 2,
            Cut::Bytes(n) => n,
        };
        std::fs::write(&path, &full[..len]).unwrap();
        let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap();
        assert!(restored.is_empty(), "{cut:?}: a cut store was served");
        assert!(!path.exists(), "{cut:?}: left in place, to fail again at every start");
        assert_eq!(moved_aside(dir.path()), 1, "{cut:?}");
        assert!(p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap().is_empty());
        assert_eq!(moved_aside(dir.path()), 1, "{cut:?}: nothing more to move aside");
    }
}

#[derive(Debug, Clone, Copy)]
enum Cut {
    Tenth,
    Half,
    Bytes(usize),
}

/// A store that does not open when a cache attaches (damaged since the
/// start): moved aside, and the cache persists into a new one.
#[tokio::test]
async fn a_cache_attaching_to_a_damaged_store_moves_it_aside_and_persists() {
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["configmaps"]);
    std::fs::write(dir.path().join("configmaps.v1.core.redb"), vec![0xa5; 4096]).unwrap();
    let cached = cache_and_stop(&p);
    assert_eq!(moved_aside(dir.path()), 1);
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap();
    assert_eq!(restored_objects(&restored[0]), cached);
}

/// A persist directory that cannot be made (here: under a file; a
/// read-only file system is the chaos case's): no persistence, not a failed
/// start.
#[test]
fn a_directory_that_cannot_be_made_means_memory_only_not_a_failed_start() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("file"), b"").unwrap();
    let config = PersistConfig {
        dir: Some(dir.path().join("file/persist")),
        resources: PersistSelection { all_but_secrets: true, named: HashSet::new() },
        encryption_key_file: None,
        serve_stale_when_unreachable: false,
    };
    assert!(Persistence::new(&config).unwrap().is_none());
}

/// A store the file system refuses when its cache attaches (here: a
/// directory where the file goes; a full or read-only disk in life): the
/// cache is memory-only meanwhile, and its store is written once the
/// obstacle is gone, without a restart.
#[tokio::test]
async fn a_store_the_file_system_refuses_at_attach_is_written_once_it_can_be() {
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["configmaps"]);
    let path = dir.path().join("configmaps.v1.core.redb");
    std::fs::create_dir(&path).unwrap();
    let mut w = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
    p.attach(&mut w);
    let mut listed = Objects::new();
    let o = Arc::new(cm("a", 10, ""));
    listed.insert(o.key.clone(), o);
    w.replace(listed, 10);
    std::fs::remove_dir(&path).unwrap();
    w.event(EventType::Added, cm("b", 11, ""));
    // Retried on its own (every 50 ms in tests) until the file opens.
    let until = Instant::now() + std::time::Duration::from_secs(10);
    while !path.is_file() && Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    w.take_feed().expect("a feed, though the store did not open").finish();
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new()).unwrap();
    assert_eq!(restored.len(), 1, "never written");
    assert_eq!(restored[0].rv, 11);
    assert_eq!(restored_objects(&restored[0]).len(), 2);
}
