//! The ingest ceiling (issue 47, item 1): how many upstream events a second
//! one watchmux Pods cache applies and fans out, on one core and on two, and
//! the lag from the upstream writing an event's bytes to a watcher receiving
//! it.
//!
//! The upstream is synthetic and in this process (`../synthetic/`: TLS, HTTP/2 by
//! ALPN): a LIST of `INGEST_PODS` pods (10,000) over `INGEST_NODES` nodes
//! (1,000), each about `INGEST_OBJECT_BYTES` (1024) of JSON, then a WATCH
//! replaying MODIFIED events with increasing resourceVersions, spread over
//! the nodes, plus bookmarks. This process starts watchmux itself (so that
//! it can point it at the upstream's port), under `taskset -c $INGEST_CPUS`,
//! with `--cache-resources pods --cache-warm`, and attaches, before any
//! event, one kubelet-shaped watcher per node (`fieldSelector=spec.nodeName=`)
//! and `INGEST_UNSELECTED` (100) watchers of every pod, over h2c with
//! `INGEST_STREAMS_PER_CONNECTION` streams a connection (100, what watchmux
//! advertises; fewer spreads the unselected watchers, which come last, over
//! more connections, each served by its own task: `make bench-cores`).
//!
//! Then the phases, each after the previous one was delivered: a warm-up of
//! one event per node (every watcher must get its share: all attached), then
//! one per rate in `INGEST_RATES` (`20000,50000,100000,0`; 0: as fast as the
//! connection takes them), each of `INGEST_SECONDS` (3) of events, at most
//! `INGEST_MAX_EVENTS` (300,000). Per phase: the rate the upstream wrote at,
//! the rate watchmux applied at (its `watchmux_watch_cache_events_received_total`,
//! polled), the rate the watchers received at, deliveries a second
//! (`watchmux_watch_cache_deliveries_total` and the watchers' counts), the lag
//! p50/p99 for each kind of watcher, and watchmux's CPU.
//!
//! Environment (integration/scripts/bench-ingest.sh sets it):
//! `WATCHMUX_BIN`, `WATCHMUX_BENCH_PROXY` and `WATCHMUX_BENCH_ADMIN` (where
//! watchmux listens), `INGEST_CPUS` (its cores), `INGEST_WATCHMUX_LOG`,
//! `CLK_TCK`, `BENCH_OUT` (JSON results); `INGEST_PERF` (a perf.data path:
//! `perf record $INGEST_PERF_ARGS` on watchmux during the last phase).

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

#[path = "../common/mod.rs"]
mod common;
mod run;
#[path = "../synthetic/mod.rs"]
mod synthetic;
mod watchers;

use std::sync::Arc;

use common::env::{env, env_list, env_or};

pub struct Config {
    pub pods: usize,
    pub nodes: usize,
    pub object_bytes: usize,
    pub unselected: usize,
    pub streams_per_connection: usize,
    /// Events a second of each measured phase; 0: open throttle.
    pub rates: Vec<u32>,
    pub seconds: f64,
    pub max_events: u64,
    pub cpus: String,
    pub watchmux_bin: String,
    pub watchmux_log: String,
    pub listen: String,
    pub admin: String,
    pub clk_tck: f64,
    pub perf: Option<String>,
    pub perf_args: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::lines::self_check();
    synthetic::pods::self_check();
    watchers::self_check();
    let cfg = Config {
        pods: env_or("INGEST_PODS", 10_000)?,
        nodes: env_or("INGEST_NODES", 1000)?,
        object_bytes: env_or("INGEST_OBJECT_BYTES", 1024)?,
        unselected: env_or("INGEST_UNSELECTED", 100)?,
        streams_per_connection: env_or("INGEST_STREAMS_PER_CONNECTION", 100usize)?.clamp(1, 100),
        rates: env_list("INGEST_RATES", "20000,50000,100000,0")?,
        seconds: env_or("INGEST_SECONDS", 3.0)?,
        max_events: env_or("INGEST_MAX_EVENTS", 300_000)?,
        cpus: env_or("INGEST_CPUS", "0".to_owned())?,
        watchmux_bin: env("WATCHMUX_BIN")?,
        watchmux_log: env_or("INGEST_WATCHMUX_LOG", "/dev/null".to_owned())?,
        listen: env("WATCHMUX_BENCH_PROXY")?,
        admin: env("WATCHMUX_BENCH_ADMIN")?,
        clk_tck: env_or("CLK_TCK", 100.0)?,
        perf: std::env::var("INGEST_PERF").ok().filter(|p| !p.is_empty()),
        perf_args: env_or("INGEST_PERF_ARGS", "-F 499 -g".to_owned())?,
    };
    let result = run::run(Arc::new(cfg)).await?;
    run::markdown(&result);
    common::env::write_results(&run::json(&result))?;
    Ok(())
}
