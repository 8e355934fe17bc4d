//! Issue 26 item 1 against the real API server: each test-only fault in
//! what the cache applies (a dropped event, a stale replay past the replay
//! guard, a corrupted resourceVersion; `src/cache/fault.rs`, built in with
//! the `fault-injection` feature) is found by the next consistency check
//! once the cache is past the fault's version, and the cache heals with
//! exactly one relist.

use std::collections::BTreeMap;
use std::time::Duration;

use super::env::*;
use super::relist_gap::items;

/// The check period of the test: short, so that a check follows each fault
/// within a second or two.
const PERIOD: &str = "1s";
const RESOURCE: &str = "resource=\"configmaps\"";
/// How long a step may take at most, on 2 busy cores.
const WAIT: Duration = Duration::from_secs(30);

async fn checks(wm: &Watchmux, result: &str) -> f64 {
    let result = format!("result=\"{result}\"");
    watchmux_metric_sum(wm.admin, "watchmux_cache_consistency_checks_total", &[RESOURCE, &result]).await
}

async fn relists(wm: &Watchmux) -> (f64, f64) {
    let inconsistent =
        watchmux_metric_sum(wm.admin, "watchmux_upstream_relists_total", &[RESOURCE, "cause=\"inconsistent\""]).await;
    let lists = watchmux_metric_sum(wm.admin, "watchmux_watch_cache_initializations_total", &[RESOURCE]).await;
    (inconsistent, lists)
}

/// Waits (bounded) until `metric` of `wm` reaches `at_least`.
async fn wait_for(wm: &Watchmux, what: &str, at_least: f64, result: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while checks(wm, result).await < at_least {
        assert!(tokio::time::Instant::now() < deadline, "{what}: no {result} check in {WAIT:?}; log:\n{}", wm.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Names and versions of the namespace's configmaps, from the cache
/// (`resourceVersion=0`) or from the API server.
async fn cached(wm: &Watchmux, ns: &str) -> BTreeMap<String, String> {
    let (code, body) = read(get(wm.addr, &format!("/api/v1/namespaces/{ns}/configmaps?resourceVersion=0")).await).await;
    assert_eq!(code, 200);
    items(&serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn each_injected_fault_is_found_by_the_next_check_and_healed_by_one_relist() {
    let _shared = CLUSTER.read().await;
    let cluster = Cluster::from_env();
    let direct = cluster.direct_client();
    let ns = namespace("verify");
    create_namespace(&direct, &ns).await;
    let (dropped, duplicated, corrupted) =
        (format!("{ns}-dropped"), format!("{ns}-duplicated"), format!("{ns}-corrupted"));
    let faults = format!("drop:configmaps:{dropped},duplicate:configmaps:{duplicated},corrupt:configmaps:{corrupted}");
    let wm = Watchmux::start_with_env(
        &cluster,
        &["--cache-resources", "configmaps", "--cache-warm", "--consistency-check-period", PERIOD],
        &[("WATCHMUX_FAULT_INJECT", &faults)],
    )
    .await;
    super::cache::wait_initialized(wm.admin, "configmaps", 1.0).await;
    // A clean cache passes its checks first: no false alarm.
    wait_for(&wm, "before any fault", 2.0, "ok").await;
    assert_eq!(checks(&wm, "mismatch").await, 0.0, "a false alarm; log:\n{}", wm.log());

    let mut mismatches = 0.0;
    for (fault, name) in [("drop", &dropped), ("duplicate", &duplicated), ("corrupt", &corrupted)] {
        let (relisted, lists) = relists(&wm).await;
        let ok_before = checks(&wm, "ok").await;
        configmap(&direct, "create", &ns, name).await;
        if fault == "duplicate" {
            // The replay of its creation after its deletion brings it back.
            configmap(&direct, "delete", &ns, name).await;
        }
        // A lost event shows once the cache is past its version.
        configmap(&direct, "create", &ns, &format!("{name}-next")).await;
        let faulted = tokio::time::Instant::now();
        mismatches += 1.0;
        wait_for(&wm, fault, mismatches, "mismatch").await;
        let found_in = faulted.elapsed();
        // Checks run one at a time: at most the one already under way when
        // the fault happened may have passed; the next found it.
        let passed_meanwhile = checks(&wm, "ok").await - ok_before;
        assert!(passed_meanwhile <= 1.0, "{fault}: {passed_meanwhile} checks passed over the fault");
        // Healed: two checks pass after the relist, and the relist was one.
        let ok_after = checks(&wm, "ok").await;
        wait_for(&wm, fault, ok_after + 2.0, "ok").await;
        assert_eq!(relists(&wm).await, (relisted + 1.0, lists + 1.0), "{fault}: exactly one relist");
        assert_eq!(checks(&wm, "mismatch").await, mismatches, "{fault}: found once");
        let (_, body) = get_direct(&direct, &format!("/api/v1/namespaces/{ns}/configmaps")).await;
        let upstream = items(&serde_json::from_slice(&body).unwrap());
        assert_eq!(cached(&wm, &ns).await, upstream, "{fault}: the cache is the upstream's again");
        eprintln!("{fault}: found {found_in:?} after the change, healed by one relist");
    }
    assert!(wm.log().contains("differs from the upstream"), "the mismatch is logged");
    assert_eq!(checks(&wm, "error").await, 0.0);
}
