use super::*;
use crate::cache::resource::{CacheSettings, Scope, Writer};
use crate::cache::state::object::tests::cm_shape;
use crate::cache::state::store::Objects;

fn listed() -> Writer {
    let w = ResourceCache::create(cm_shape(), Scope::default(), CacheSettings::default());
    w.replace(Objects::new(), 10);
    w
}

/// An upstream nobody listens at.
fn nowhere() -> Upstream {
    let cfg = crate::upstream::kubeconfig::UpstreamConfig::for_test("http://127.0.0.1:9");
    Upstream::new(&cfg, crate::upstream::UpstreamOptions::default()).unwrap()
}

#[tokio::test]
async fn a_relisting_cache_is_skipped_and_an_unreachable_upstream_is_an_error() {
    let w = listed();
    w.set_relisting(true);
    assert_eq!(check(w.cache(), &nowhere()).await, Outcome::SkippedRelisting);
    w.set_relisting(false);
    assert_eq!(check(w.cache(), &nowhere()).await, Outcome::Error);
    assert!(!w.cache().check_state().is_unproven(), "an error proves nothing either way");
}

#[tokio::test]
async fn a_check_never_runs_twice_at_once() {
    let w = listed();
    let v = w.cache().check_state();
    let first = v.start_check().expect("the first starts");
    assert_eq!(check(w.cache(), &nowhere()).await, Outcome::SkippedRunning);
    drop(first);
    assert!(v.start_check().is_some(), "free again once the first ended");
}

#[tokio::test(start_paused = true)]
async fn a_mismatch_asks_one_relist_and_the_relist_clears_the_mark() {
    let w = listed();
    let v = w.cache().check_state();
    v.ask_for_relist();
    assert!(v.is_unproven());
    tokio::time::timeout(Duration::from_secs(1), v.relist_requested()).await.expect("the reflector is woken");
    // The reflector relists: the request is answered, the mark stays until
    // the list is installed.
    w.set_relisting(true);
    assert!(v.is_unproven());
    w.replace(Objects::new(), 20);
    w.set_relisting(false);
    assert!(!v.is_unproven());
    // A wake-up left over from a request the relist already answered does
    // not start another.
    v.ask_for_relist();
    w.set_relisting(true);
    w.replace(Objects::new(), 30);
    assert!(tokio::time::timeout(Duration::from_secs(1), v.relist_requested()).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_zero_period_checks_nothing_and_a_closed_cache_ends_the_checks() {
    let w = listed();
    let stop = CancellationToken::new();
    let upstream = Arc::new(nowhere());
    tokio::time::timeout(
        Duration::from_secs(1),
        run(w.cache().clone(), upstream.clone(), Duration::ZERO, stop.clone()),
    )
    .await
    .expect("returns at once");
    w.close();
    tokio::time::timeout(Duration::from_secs(10), run(w.cache().clone(), upstream, Duration::from_secs(1), stop))
        .await
        .expect("ends after its first period");
}
