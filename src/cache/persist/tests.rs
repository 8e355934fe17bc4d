use super::*;
use crate::cache::delivery::filter::Filter;
use crate::cache::resource::StartAt;
use crate::cache::state::object::tests::{cm, cm_shape};
use crate::encode::watch::EventType;

fn persistence(dir: &Path, named: &[&str]) -> Persistence {
    let config = PersistConfig {
        dir: Some(dir.to_owned()),
        resources: PersistSelection {
            all_but_secrets: false,
            named: named.iter().map(|n| GroupResource::parse(n)).collect(),
        },
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
    w.cache().snapshot().objects.iter().map(|(k, o)| (k.name.clone(), o.json().clone())).collect()
}

fn restored_objects(r: &Restored) -> Vec<(String, Bytes)> {
    r.writer.cache().snapshot().objects.iter().map(|(k, o)| (k.name.clone(), o.json().clone())).collect()
}

#[tokio::test]
async fn a_restart_serves_what_was_cached_at_its_version_unconfirmed() {
    let dir = tempfile::tempdir().unwrap();
    let p = persistence(dir.path(), &["configmaps"]);
    let cached = cache_and_stop(&p);
    let restored = p.restore_all(&CacheSettings::default(), &HashMap::new());
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
    assert!(cache.register(Filter::default(), StartAt::After(13)).unwrap().backlog.is_empty());
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
    assert!(p.restore_all(&CacheSettings::default(), &HashMap::new()).is_empty());
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
    assert!(p.restore_all(&CacheSettings::default(), &HashMap::new()).is_empty());
    assert!(!path.exists(), "moved aside");
}

#[tokio::test]
async fn a_store_no_longer_chosen_or_of_another_scope_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("configmaps.v1.core.redb");
    cache_and_stop(&persistence(dir.path(), &["configmaps"]));
    assert!(persistence(dir.path(), &["pods"]).restore_all(&CacheSettings::default(), &HashMap::new()).is_empty());
    assert!(!path.exists(), "no longer persisted: deleted, not left to go stale");
    let p = persistence(dir.path(), &["configmaps"]);
    cache_and_stop(&p);
    let scoped = Scope { query: vec![("labelSelector".into(), "app=x".into())], ..Scope::default() };
    let scopes = HashMap::from([(GroupResource::parse("configmaps"), scoped)]);
    assert!(p.restore_all(&CacheSettings::default(), &scopes).is_empty());
    assert!(!path.exists(), "cached under another scope: deleted");
}
