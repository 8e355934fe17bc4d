//! The real API server's side (`MILLION_MODE=cluster`): the same timed
//! requests as the synthetic run's latency series, one after another on one
//! HTTP/2 connection over TLS, straight at kube-apiserver and through a
//! watchmux caching pods in front of it, on the world bench-scale loaded
//! (`node-00000`...), and both processes' RSS. The script starts the tier
//! and sets the `WATCHMUX_BENCH_*` variables (`common::api`).

use serde_json::json;

use crate::common::api::Api;
use crate::common::env::env_or;
use crate::common::procfs::rss_bytes;
use crate::common::stats::{Table, fmt1, mib, thousands};
use crate::probes::{Until, request_series, timed};

/// Requests sent before each series, not counted.
const WARM_UP: usize = 20;

fn node(i: usize, nodes: usize) -> String {
    format!("fieldSelector=spec.nodeName%3Dnode-{:05}", i * 37 % nodes)
}

fn us(times: &[std::time::Duration], p: f64) -> f64 {
    crate::common::stats::percentile(times, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
}

pub async fn run(requests: usize) -> anyhow::Result<serde_json::Value> {
    let api = Api::from_env()?;
    let nodes: usize = env_or("SCALE_NODES", 5000)?;
    let sides = [
        ("straight at kube-apiserver", "direct", api.api_target.clone()),
        ("through watchmux", "watchmux", api.proxy_target()?),
    ];
    let rv = api.list_rv("/api/v1/pods?limit=1").await?;
    let series = request_series(move |i| node(i, nodes), rv);
    let mut rows = Vec::new();
    for (name, until, path) in &series {
        let mut cells = Vec::new();
        for (_, side, target) in &sides {
            timed(target, WARM_UP, *until, path).await?;
            let t = timed(target, requests, *until, path).await?;
            let times = if *until == Until::Headers { &t.headers } else { &t.last_byte };
            eprintln!(
                "million: cluster, {side}, {name}: p50 {:.1} µs, p99 {:.1} µs, {} not 200",
                us(times, 0.5),
                us(times, 0.99),
                t.not_ok
            );
            cells.push(json!({
                "side": side,
                "until": if *until == Until::Headers { "headers" } else { "last byte" },
                "n": times.len(),
                "headers_p50": us(&t.headers, 0.5),
                "p50": us(times, 0.5),
                "p99": us(times, 0.99),
                "max": us(times, 1.0),
                "not_200": t.not_ok,
                "reconnects": t.reconnects,
            }));
        }
        rows.push(json!({"name": name, "sides": cells}));
    }
    let apiserver_rss = rss_bytes(api.apiserver_pid()?)?;
    let watchmux_rss = rss_bytes(env_or("WATCHMUX_BENCH_PROXY_PID", 0u32)?)?;

    println!(
        "### The real API server, {} nodes: {} requests a row one after another on one HTTP/2 connection over TLS\n",
        thousands(nodes),
        thousands(requests)
    );
    let mut t = Table::new(&["request", "until", sides[0].0, sides[1].0]);
    for row in &rows {
        let cell = |i: usize| {
            let c = &row["sides"][i];
            let f = |k: &str| c[k].as_f64().map_or("–".into(), fmt1);
            format!(
                "{} / {} / {} µs{}",
                f("p50"),
                f("p99"),
                f("max"),
                match c["not_200"].as_u64() {
                    Some(0) | None => String::new(),
                    Some(n) => format!(" ({n} not 200)"),
                }
            )
        };
        t.row(vec![
            row["name"].as_str().unwrap_or("").to_owned(),
            row["sides"][0]["until"].as_str().unwrap_or("").to_owned(),
            cell(0),
            cell(1),
        ]);
    }
    t.row(vec![
        "RSS (kube-apiserver: every resource; watchmux: pods alone)".into(),
        String::new(),
        format!("{} MiB", mib(apiserver_rss as f64)),
        format!("{} MiB", mib(watchmux_rss as f64)),
    ]);
    t.print();
    Ok(json!({
        "nodes": nodes,
        "requests": requests,
        "apiserver_rss_bytes": apiserver_rss,
        "watchmux_pods_rss_bytes": watchmux_rss,
        "series": rows,
    }))
}
