//! What an operator is told (issue 15 item 4), against the real API server:
//! `--cache-resources` names resolved as kubectl resolves them, a typo
//! refused at start-up with the name in the message, a group not served yet
//! waited for with a warning and a metric.

use std::time::Duration;

use crate::env::*;

/// Waits (bounded) for the process to exit on its own; its status and log.
fn exit_of(wm: &mut Watchmux) -> (std::process::ExitStatus, String) {
    for _ in 0..300 {
        if let Some(status) = wm.try_wait() {
            return (status, wm.log());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("watchmux kept running; log:\n{}", wm.log());
}

#[tokio::test]
async fn a_cache_resources_typo_stops_watchmux_at_start_naming_it() {
    let cluster = Cluster::from_env();
    let mut wm = Watchmux::spawn_with_kubeconfig(&cluster.kubeconfig, &["--cache-resources", "podz,deployments"]);
    let (status, log) = exit_of(&mut wm);
    assert!(!status.success(), "{log}");
    assert!(log.contains("--cache-resources podz: the server has no resource of that name"), "{log}");
    assert!(!log.contains("deployments:"), "only the typo is named: {log}");
    assert_eq!(log.matches("ERROR").count(), 1, "the fatal error is written once: {log}");
    assert!(!log.contains('\u{1b}'), "no terminal colours in a log file: {log}");
}

#[tokio::test]
async fn kubectl_style_names_are_cached_and_an_unserved_group_is_waited_for() {
    let cluster = Cluster::from_env();
    let wm =
        Watchmux::start(&cluster, &["--cache-resources", "deploy,cm,leases.coordination.k8s.io,widgets.example.com"])
            .await;
    let log = wm.log();
    assert!(log.contains("widgets.example.com"), "the pending name is warned about: {log}");
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_resources_unresolved", &[]).await, 1.0);
    let direct = cluster.direct_client();
    // At any version: a consistent LIST is the cache's only when it is
    // current at the API server's revision (other tests write meanwhile).
    for path in [
        "/apis/apps/v1/deployments?resourceVersion=0",
        "/api/v1/configmaps?resourceVersion=0",
        "/apis/coordination.k8s.io/v1/leases?resourceVersion=0",
    ] {
        let (code, _) = read(get(wm.addr, path).await).await;
        assert_eq!(code, 200, "{path}");
        let (direct_code, _) = get_direct(&direct, path).await;
        assert_eq!(direct_code, 200, "{path}");
    }
    // The short names reached the right caches: every list came from one.
    for resource in ["deployments", "configmaps", "leases"] {
        let served = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &[resource]).await;
        assert!(served >= 1.0, "{resource} was not listed from the cache; log:\n{}", wm.log());
    }
    // What was not named still passes through.
    let before = watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &["secrets"]).await;
    let (code, _) = read(get(wm.addr, "/api/v1/secrets").await).await;
    assert_eq!(code, 200);
    assert_eq!(watchmux_metric_sum(wm.admin, "watchmux_cache_list_total", &["secrets"]).await, before);
}
