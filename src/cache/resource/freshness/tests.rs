//! The freshness proof against an in-process fake upstream whose current
//! version (`P`, the probe's answer) is ahead of the cache: the read waits for
//! the catch-up, whose bookmark is what proves the cache fresh, and gives up
//! at its budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::channel::{Channel, Sender};
use hyper::body::Incoming;
use parking_lot::Mutex;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::body;
use crate::cache::resource::{CacheSettings, Scope};
use crate::cache::resource_info::test_info;
use crate::cache::state::object::ObjectShape;
use crate::cache::sync::reflector::Reflector;
use crate::upstream::{UpstreamOptions, fake_server};

const LIST: &str = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[]}"#;

/// The fake upstream's state: its current version, the catch-up watches it
/// was asked for, and the open catch-up streams (to send their bookmark).
#[derive(Default)]
struct FakeApiServer {
    current: AtomicU64,
    probes: AtomicU32,
    catch_ups: AtomicU32,
    streams: Mutex<Vec<Sender<Bytes, std::convert::Infallible>>>,
    /// The reflector's own watches, held open and silent.
    silent: Mutex<Vec<Sender<Bytes, std::convert::Infallible>>>,
    catch_up_opened: tokio::sync::Notify,
    /// When set, each probe is answered only once a permit is added: a
    /// probe in flight for as long as the test wants.
    probe_gate: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    probe_arrived: tokio::sync::Notify,
}

impl FakeApiServer {
    /// Waits until a catch-up watch is open.
    async fn catch_up_open(&self) {
        let opened = self.catch_up_opened.notified();
        if self.streams.lock().is_empty() {
            tokio::time::timeout(Duration::from_secs(5), opened).await.expect("no catch-up watch was started");
        }
    }

    /// Sends the API server's bookmark at its current version on every open
    /// catch-up stream.
    async fn bookmark(&self) {
        let rv = self.current.load(Ordering::SeqCst);
        let line = format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}}}}}}\n"
        );
        let streams: Vec<_> = self.streams.lock().drain(..).collect();
        for mut tx in streams {
            tx.send_data(Bytes::from(line.clone())).await.unwrap();
        }
    }
}

/// A kube-apiserver that lists configmaps at 10, answers a probe with its
/// current version, and holds every watch open without a word until told.
async fn fake_upstream(state: Arc<FakeApiServer>) -> Arc<Upstream> {
    let addr = fake_server::serve(move |req: Request<Incoming>| {
        let state = state.clone();
        async move {
            let query = fake_server::query(&req);
            let has = |k: &str, v: &str| query.iter().any(|(qk, qv)| qk == k && qv == v);
            let cbor = req.headers().get("accept").is_some_and(|a| a == "application/cbor");
            if cbor {
                // The reflector's CBOR probe (`cbor_probe`): no CBOR here, as by default.
                let mut refused = Response::new(body::empty());
                *refused.status_mut() = http::StatusCode::NOT_ACCEPTABLE;
                refused
            } else if has("watch", "true") {
                let (tx, rx) = Channel::<Bytes, std::convert::Infallible>::new(4);
                if has("timeoutSeconds", "3") {
                    state.catch_ups.fetch_add(1, Ordering::SeqCst);
                    state.streams.lock().push(tx);
                    state.catch_up_opened.notify_waiters();
                } else {
                    state.silent.lock().push(tx);
                }
                Response::new(body::boxed(rx))
            } else if has("limit", "1") {
                // The version at the probe's arrival, as the API
                // server's consistent read takes it.
                let rv = state.current.load(Ordering::SeqCst);
                state.probes.fetch_add(1, Ordering::SeqCst);
                state.probe_arrived.notify_waiters();
                let gate = state.probe_gate.lock().clone();
                if let Some(gate) = gate {
                    gate.acquire().await.unwrap().forget();
                }
                let text = LIST.replace("\"10\"", &format!("\"{rv}\""));
                Response::new(body::full(text))
            } else {
                Response::new(body::full(LIST))
            }
        }
    })
    .await;
    fake_server::upstream(addr, UpstreamOptions::default())
}

/// A ready configmaps cache at 10 whose reflector runs against the fake.
async fn cache_at_10(state: &Arc<FakeApiServer>) -> (Arc<ResourceCache>, Arc<Upstream>, CancellationToken) {
    state.current.store(10, Ordering::SeqCst);
    let upstream = fake_upstream(state.clone()).await;
    let shape = ObjectShape::new(test_info("", "configmaps", "ConfigMap", true), None);
    let writer = ResourceCache::create(shape, Scope::default(), CacheSettings::default());
    let cache = writer.cache().clone();
    let stop = CancellationToken::new();
    tokio::spawn(Reflector::new(writer, upstream.clone(), Arc::default()).run(stop.clone()));
    assert!(cache.wait_ready(Duration::from_secs(10)).await);
    assert_eq!(cache.current_rv(), 10);
    (cache, upstream, stop)
}

const BUDGET: Duration = Duration::from_secs(3);

#[tokio::test]
async fn a_fresh_cache_is_proven_by_the_probe_alone() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    assert!(ensure_fresh(&cache, &upstream, Instant::now(), Proof::CatchingUp, BUDGET).await);
    assert_eq!(state.catch_ups.load(Ordering::SeqCst), 0, "nothing to catch up");
    stop.cancel();
}

#[tokio::test]
async fn a_cache_behind_waits_for_the_catch_up_s_bookmark() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    state.current.store(20, Ordering::SeqCst);

    let reading = tokio::spawn({
        let (cache, upstream) = (cache.clone(), upstream.clone());
        async move { ensure_fresh(&cache, &upstream, Instant::now(), Proof::CatchingUp, BUDGET).await }
    });
    state.catch_up_open().await;
    assert!(!reading.is_finished(), "the read waits for the proof");
    state.bookmark().await;
    assert!(reading.await.unwrap(), "proven by the bookmark");
    assert_eq!(cache.current_rv(), 20);
    stop.cancel();
}

#[tokio::test]
async fn without_a_bookmark_within_a_catch_up_s_length_the_proof_fails() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    state.current.store(20, Ordering::SeqCst);
    let started = Instant::now();
    assert!(!ensure_fresh(&cache, &upstream, started, Proof::CatchingUp, Duration::from_millis(300)).await);
    // Past the budget: one catch-up's length after the probe's answer.
    let took = started.elapsed();
    assert!(took >= CATCH_UP_PERIOD && took < CATCH_UP_PERIOD + Duration::from_secs(2), "{took:?}");
    assert_eq!(cache.current_rv(), 10, "nothing proven, nothing moved");
    stop.cancel();
}

/// The cache's watch brings it past the probe's answer while the probe is
/// in flight (the API server read its version as the probe arrived): the
/// answer is still the upstream's, not another cluster's, and it proves
/// the cache fresh. Compared after the answer, it read as "another
/// cluster" and sent the reads through and the cache to a relist.
#[tokio::test]
async fn the_cache_passing_the_probe_while_it_is_in_flight_is_not_another_cluster() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *state.probe_gate.lock() = Some(gate.clone());
    let proving = {
        let (cache, upstream) = (cache.clone(), upstream.clone());
        tokio::spawn(async move { ensure_fresh(&cache, &upstream, Instant::now(), Proof::CatchingUp, BUDGET).await })
    };
    state.probes_reach(1).await;
    // The probe read 10; an event at 11 reaches the cache before its answer.
    let event = "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\",\"namespace\":\"d\",\"resourceVersion\":\"11\"}}}\n";
    let senders: Vec<_> = state.silent.lock().drain(..).collect();
    for mut tx in senders {
        tx.send_data(Bytes::from(event)).await.unwrap();
        state.silent.lock().push(tx);
    }
    assert!(cache.wait_for_rv(11, Duration::from_secs(5)).await, "the event never reached the cache");
    gate.add_permits(1);
    assert!(proving.await.unwrap(), "the probe's answer, below the cache's version after it, did not prove it fresh");
    assert_eq!(state.catch_ups.load(Ordering::SeqCst), 0, "nothing to catch up");
    stop.cancel();
}

/// A burst of watch-lists: a probe that answers late in the budget (queued
/// behind another) still lets its reads wait for the catch-up's bookmark,
/// which comes after the budget's end; a probe that does not answer in the
/// budget does not.
#[tokio::test]
async fn a_probe_answered_late_in_the_budget_still_gets_its_catch_up() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *state.probe_gate.lock() = Some(gate.clone());
    state.current.store(20, Ordering::SeqCst);
    let budget = Duration::from_millis(800);
    let read = |arrival: Instant, budget: Duration| {
        let (cache, upstream) = (cache.clone(), upstream.clone());
        tokio::spawn(async move { ensure_fresh(&cache, &upstream, arrival, Proof::CatchingUp, budget).await })
    };
    let arrival = Instant::now();
    let proving = read(arrival, budget);
    state.probes_reach(1).await;
    tokio::time::sleep_until(arrival + budget - Duration::from_millis(200)).await;
    gate.add_permits(1);
    state.catch_up_open().await;
    tokio::time::sleep_until(arrival + budget + Duration::from_millis(500)).await;
    assert!(!proving.is_finished(), "still waiting for the catch-up past the budget");
    state.bookmark().await;
    assert!(proving.await.unwrap(), "proven by the bookmark after the budget");
    // A probe that never answers in the budget: no proof, at the budget.
    state.current.store(30, Ordering::SeqCst);
    let arrival = Instant::now();
    assert!(!read(arrival, budget).await.unwrap());
    assert!(arrival.elapsed() < budget + Duration::from_millis(500), "{:?}", arrival.elapsed());
    gate.add_permits(1);
    stop.cancel();
}

#[tokio::test]
async fn a_list_passes_through_at_once_when_behind_and_the_catch_up_it_asked_for_proves_the_next() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    state.current.store(20, Ordering::SeqCst);
    let started = Instant::now();
    assert!(!ensure_fresh(&cache, &upstream, Instant::now(), Proof::AtOnce, BUDGET).await, "behind the probe");
    assert!(started.elapsed() < Duration::from_secs(1), "no wait for the catch-up: {:?}", started.elapsed());
    state.catch_up_open().await;
    // While the catch-up runs, the cache is known to be behind: no probe.
    assert!(!ensure_fresh(&cache, &upstream, Instant::now(), Proof::AtOnce, BUDGET).await);
    state.bookmark().await;
    assert!(cache.wait_for_rv(20, BUDGET).await, "the catch-up ran on without a reader waiting");
    caught_up(&cache).await;
    assert!(ensure_fresh(&cache, &upstream, Instant::now(), Proof::AtOnce, BUDGET).await, "proven at once now");
    assert_eq!(state.catch_ups.load(Ordering::SeqCst), 1);
    stop.cancel();
}

#[tokio::test]
async fn a_version_the_cache_has_not_reached_is_waited_for_only_briefly() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, _upstream, stop) = cache_at_10(&state).await;
    assert!(reached(&cache, 10).await);
    let started = Instant::now();
    assert!(!reached(&cache, 11).await, "another resource's version: the API server's to answer");
    assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
    stop.cancel();
}

/// Waits (bounded) until the catch-up task has ended (just after its
/// bookmark is applied).
async fn caught_up(cache: &ResourceCache) {
    for _ in 0..200 {
        if !cache.freshness().catching_up.load(Ordering::Acquire) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the catch-up never ended");
}

#[tokio::test]
async fn lists_stop_probing_when_the_cache_is_behind_again_after_each_catch_up() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    for busy_rv in [20, 30] {
        state.current.store(busy_rv, Ordering::SeqCst);
        assert!(!ensure_fresh(&cache, &upstream, Instant::now(), Proof::AtOnce, BUDGET).await);
        state.catch_up_open().await;
        state.bookmark().await;
        assert!(cache.wait_for_rv(busy_rv, BUDGET).await);
        caught_up(&cache).await;
    }
    assert_eq!(state.probes.load(Ordering::SeqCst), 2);
    // Current now, but the cluster is busy: no probe, the LIST passes through.
    assert!(!ensure_fresh(&cache, &upstream, Instant::now(), Proof::AtOnce, BUDGET).await);
    assert_eq!(state.probes.load(Ordering::SeqCst), 2, "no third probe");
    // A watch-list still proves itself.
    assert!(ensure_fresh(&cache, &upstream, Instant::now(), Proof::CatchingUp, BUDGET).await);
    stop.cancel();
}

impl FakeApiServer {
    /// Waits (bounded) until `n` probes have reached the fake.
    async fn probes_reach(&self, n: u32) {
        for _ in 0..500 {
            let arrived = self.probe_arrived.notified();
            if self.probes.load(Ordering::SeqCst) >= n {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(10), arrived).await;
        }
        panic!("{} probes, not {n}", self.probes.load(Ordering::SeqCst));
    }
}

#[tokio::test]
async fn reads_arriving_while_a_probe_runs_share_the_next_one_and_never_an_earlier_one() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *state.probe_gate.lock() = Some(gate.clone());
    let read = |arrival: Instant| {
        let (cache, upstream) = (cache.clone(), upstream.clone());
        tokio::spawn(async move { ensure_fresh(&cache, &upstream, arrival, Proof::AtOnce, BUDGET).await })
    };
    let first = read(Instant::now());
    state.probes_reach(1).await;
    // Twenty reads arrive while that probe is in flight: it started before
    // them, so none may use it; they share one probe queued behind it.
    let queued: Vec<_> = (0..20).map(|_| read(Instant::now())).collect();
    tokio::task::yield_now().await;
    assert_eq!(state.probes.load(Ordering::SeqCst), 1, "nothing starts while a probe is in flight");
    gate.add_permits(1);
    assert!(first.await.unwrap());
    state.probes_reach(2).await;
    // The upstream moves after the queued probe started; a read arriving
    // now must not take that probe's older answer.
    state.current.store(20, Ordering::SeqCst);
    let late = read(Instant::now());
    gate.add_permits(1);
    for r in queued {
        assert!(r.await.unwrap(), "proven by the probe queued for them (version 10)");
    }
    state.probes_reach(3).await;
    gate.add_permits(1);
    assert!(!late.await.unwrap(), "its own probe says 20: the cache at 10 is behind");
    assert_eq!(
        state.probes.load(Ordering::SeqCst),
        3,
        "one probe for the first read, one for the twenty, one for the late"
    );
    stop.cancel();
}

/// Watch-lists whose proof fails (here: the probe never answers) pass
/// through only within the resource's fallback budget; the rest try a second
/// proof and then get the API server's 504, naming the version after the
/// cache's (no probe answered) and the cache's own.
#[tokio::test]
async fn unproven_watch_lists_pass_through_only_within_the_fallback_budget() {
    let state = Arc::new(FakeApiServer::default());
    let (cache, upstream, stop) = cache_at_10(&state).await;
    *state.probe_gate.lock() = Some(Arc::new(tokio::sync::Semaphore::new(0)));
    let budget = Duration::from_millis(200);
    let started = Instant::now();
    let reads: Vec<_> = (0..7)
        .map(|_| {
            let (cache, upstream) = (cache.clone(), upstream.clone());
            tokio::spawn(async move { prove_watch_list(&cache, &upstream, Instant::now(), budget).await })
        })
        .collect();
    let mut outcomes = Vec::new();
    for read in reads {
        outcomes.push(read.await.unwrap());
    }
    let took = started.elapsed();
    let passed = outcomes.iter().filter(|o| **o == ProofOutcome::PassThrough).count();
    let refused = outcomes.iter().filter(|o| **o == ProofOutcome::TooLarge { required: 11, current: 10 }).count();
    assert_eq!(passed + refused, 7, "{outcomes:?}");
    // The burst, and what refilled while the second proofs ran (one a second).
    let refilled = (took.as_secs_f64() * fallbacks::PER_SECOND) as usize;
    assert!(
        passed >= fallbacks::BURST as usize && passed <= fallbacks::BURST as usize + refilled,
        "{outcomes:?} in {took:?}"
    );
    assert!(refused >= 1, "{outcomes:?}");
    assert!(took >= budget * 2, "a second proof was tried: {took:?}");
    stop.cancel();
}
