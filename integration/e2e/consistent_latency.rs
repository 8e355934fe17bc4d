//! How long a consistent LIST takes, straight at the API server and through
//! watchmux, in the same run (docs/benchmarks.md, "Consistent LISTs"): a
//! measurement, not a check, so it is `#[ignore]`d; run it by name with
//! `--ignored --nocapture` (the command is in docs/benchmarks.md;
//! `WATCHMUX_E2E_BIN` picks the watchmux binary). It prints p50 / p99 / max
//! per side, on a quiet cluster (only the API server's own lease renewals
//! move etcd's revision) and on a busy one (a Secret written every 100 ms).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;

use super::cache::wait_initialized;
use super::env::*;

const ROUNDS: usize = 200;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i].as_secs_f64() * 1000.0
}

fn summary(side: &str, scene: &str, mut took: Vec<Duration>) {
    took.sort();
    println!(
        "| {scene} | {side} | {} | {:.1} | {:.1} | {:.1} |",
        took.len(),
        percentile(&took, 0.50),
        percentile(&took, 0.99),
        took.last().unwrap().as_secs_f64() * 1000.0
    );
}

#[tokio::test]
#[ignore = "a measurement: run it by name with --ignored"]
async fn consistent_list_latency() {
    let _exclusive = CLUSTER.write().await;
    let cluster = Cluster::from_env();
    let client = cluster.direct_client();
    let wm = Watchmux::start(&cluster, &["--cache-resources", "configmaps", "--cache-warm"]).await;
    wait_initialized(wm.admin, "configmaps", 1.0).await;
    let ns = namespace("latency");
    create_namespace(&client, &ns).await;
    for i in 0..10 {
        configmap(&client, "create", &ns, &format!("cm-{i}")).await;
    }
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let stream = tokio::net::TcpStream::connect(wm.addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);

    println!("| cluster | side | n | p50 ms | p99 ms | max ms |");
    for scene in ["quiet", "busy"] {
        let writer = (scene == "busy").then(|| {
            let (client, ns) = (client.clone(), ns.clone());
            tokio::spawn(async move {
                loop {
                    let secret = serde_json::json!({"metadata": {"generateName": "s-"}});
                    direct_json(&client, http::Method::POST, &format!("/api/v1/namespaces/{ns}/secrets"), secret).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        });
        let (mut direct, mut through) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let started = Instant::now();
            let (code, _) = get_direct(&client, &path).await;
            direct.push(started.elapsed());
            assert_eq!(code, 200);
            let started = Instant::now();
            let req = Request::get(&path)
                .header("host", wm.addr.to_string())
                .header("user-agent", "e2e-latency")
                .body(Full::<Bytes>::default())
                .unwrap();
            let (code, _) = read(send.send_request(req).await.unwrap()).await;
            through.push(started.elapsed());
            assert_eq!(code, 200);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Some(writer) = writer {
            writer.abort();
        }
        summary("direct", scene, direct);
        summary("watchmux", scene, through);
        let metric = "watchmux_watch_cache_consistent_read_total";
        let served = watchmux_metric_sum(wm.admin, metric, &["result=\"success\""]).await;
        let fallback = watchmux_metric_sum(wm.admin, metric, &["result=\"fallback\""]).await;
        println!("| {scene} | watchmux proven / passed through so far | {served:.0} / {:.0} | | | |", fallback.abs());
    }
}
