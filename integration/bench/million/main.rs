//! A million objects (issue 47, item 2): one watchmux Pods cache of
//! `MILLION_PODS` (1,000,000) pods of about `MILLION_OBJECT_BYTES` (1024) of
//! JSON over `MILLION_NODES` (5,000) nodes, listed from the synthetic upstream
//! the ingest bench uses (`../synthetic/`: TLS, HTTP/2, the LIST in pages of
//! the `limit` watchmux asks for, 500).
//!
//! What it measures, with watchmux under `taskset -c $MILLION_CPUS` (core 0)
//! and this process on the other core (the script pins it):
//!
//! - memory: watchmux's VmRSS once the cache is synced and settled, against
//!   the objects' JSON bytes (the goal: at most 1.5 times), and its peak
//!   while listing;
//! - a full LIST (`limit` absent) read as fast as this process reads and
//!   read at `MILLION_SLOW_MIBPS` (100 MiB/s), and the paginated LIST a
//!   client-go reflector sends (`limit=500`, continue tokens): time to the
//!   headers and to the last byte, and watchmux's RSS growth while it is
//!   served (sampled every 10 ms, and its VmHWM reset before each), against
//!   the LIST's size (the goal: at most 2 %);
//! - latency, `MILLION_REQUESTS` (1,000) requests one after the other on one
//!   h2c connection, at the client: a node-scoped LIST
//!   (`fieldSelector=spec.nodeName=node-i`, `resourceVersion=0` and
//!   consistent), a watch start (`watch=1&resourceVersion=<current>` with the
//!   node's selector, until the response headers), and two floors: an empty
//!   namespace's LIST through watchmux (the request path without objects),
//!   and a trivial hyper server in this process (loopback and HTTP/2 alone),
//!   once on this process's core and once on a thread pinned to watchmux's
//!   (a request crossing cores, as each to watchmux does); watchmux's CPU
//!   (every thread's run time) per request of each series, and its idle CPU;
//! - start-up: cold (the full list from the upstream), cold with
//!   `--persist-dir`/`--persist-resources pods` (and until the store's whole
//!   commit), and from the persisted store with the upstream still up: time
//!   to `/readyz`, to every pod cached, and to the first node-scoped LIST
//!   answered with its pods.
//!
//! Environment (integration/scripts/bench-million.sh sets it):
//! `WATCHMUX_BIN`, `WATCHMUX_BENCH_PROXY`, `WATCHMUX_BENCH_ADMIN`,
//! `MILLION_CPUS`, `MILLION_LOGS` (watchmux's logs and the persisted store go
//! there), `BENCH_OUT` (JSON results); `MILLION_MODE=cluster` measures the
//! real API server's side instead ([`cluster`]); `MILLION_PODS`, `MILLION_NODES`,
//! `MILLION_OBJECT_BYTES`, `MILLION_LABELS` (2 a pod; the JSON stays as
//! long), `MILLION_REQUESTS`, `MILLION_SLOW_MIBPS`, `MILLION_PHASES` (what
//! follows the cold start's memory: `latency,lists,persist`; `persist` is
//! the two persisted starts).

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

mod cluster;
#[path = "../common/mod.rs"]
mod common;
mod probes;
mod run;
#[path = "../synthetic/mod.rs"]
mod synthetic;

use std::sync::Arc;

use common::env::{env, env_or};

pub struct Config {
    pub pods: usize,
    pub nodes: usize,
    pub object_bytes: usize,
    pub labels: usize,
    /// What to measure after the cold start's memory: `latency`, `lists`, `persist`.
    pub phases: Vec<String>,
    pub requests: usize,
    pub slow_mibps: f64,
    pub cpus: String,
    pub watchmux_bin: String,
    pub logs: String,
    pub listen: String,
    pub admin: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::lines::self_check();
    synthetic::pods::self_check();
    probes::self_check();
    if env_or("MILLION_MODE", String::new())? == "cluster" {
        let result = cluster::run(env_or("MILLION_REQUESTS", 1000)?).await?;
        return common::env::write_results(&result);
    }
    let cfg = Config {
        pods: env_or("MILLION_PODS", 1_000_000)?,
        nodes: env_or("MILLION_NODES", 5000)?,
        object_bytes: env_or("MILLION_OBJECT_BYTES", 1024)?,
        labels: env_or("MILLION_LABELS", 2)?,
        phases: common::env::env_list("MILLION_PHASES", "latency,lists,persist")?,
        requests: env_or("MILLION_REQUESTS", 1000)?,
        slow_mibps: env_or("MILLION_SLOW_MIBPS", 100.0)?,
        cpus: env_or("MILLION_CPUS", "0".to_owned())?,
        watchmux_bin: env("WATCHMUX_BIN")?,
        logs: env("MILLION_LOGS")?,
        listen: env("WATCHMUX_BENCH_PROXY")?,
        admin: env("WATCHMUX_BENCH_ADMIN")?,
    };
    let result = run::run(Arc::new(cfg)).await?;
    run::markdown(&result);
    common::env::write_results(&run::json(&result))?;
    Ok(())
}
