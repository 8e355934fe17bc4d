//! Fan-out to many watchers, measured side by side in one run: N watches of
//! the ConfigMaps of one namespace, all from the same resourceVersion, held
//! straight on kube-apiserver and then through watchmux, while a writer makes
//! R changes a second, for a bounded time, to ConfigMaps of about 1 KiB and
//! about 20 KiB (one cell per rate and size).
//!
//! `make bench-fanout` (integration/scripts/bench-fanout.sh) starts the test
//! cluster and, for each configuration (N, connection shape), a fresh release
//! watchmux with `--cache-resources configmaps --cache-warm`, then runs this
//! once per configuration with:
//!
//! - `WATCHMUX_BENCH_KUBECONFIG`: the API server's admin kubeconfig;
//! - `WATCHMUX_BENCH_PROXY`, `WATCHMUX_BENCH_ADMIN`: watchmux's API and admin addresses;
//! - `WATCHMUX_BENCH_PROXY_PID`, `WATCHMUX_BENCH_APISERVER_PIDFILE`: the processes measured;
//! - `FANOUT_N` (watchers), `FANOUT_SHAPE` (`h2`: many watches per HTTP/2
//!   connection; `h1`: one HTTP/1.1 connection per watcher), `CLK_TCK`;
//! - `FANOUT_RATES` (changes a second, `10,100,1000`), `FANOUT_SIZES` (object
//!   bytes, `1024,20480`), `FANOUT_SECONDS` (writing time per cell, 5);
//!   a cell's time is cut so that it delivers at most `FANOUT_MAX_DELIVERIES`
//!   events (500,000) and `FANOUT_MAX_BYTES` (2 GiB) per side, and it is left
//!   out (and said so) when even one second would exceed them;
//! - optional: `FANOUT_SIDES` (`direct,watchmux`), `FANOUT_API_STREAMS`
//!   (watches per HTTP/2 connection to kube-apiserver; default: what it
//!   advertises, at most 250), `FANOUT_PROXY_STREAMS` (to watchmux; default:
//!   what it advertises, 100 as kube-apiserver's since it caps streams per
//!   connection, at most 1000),
//!   `FANOUT_RCVBUF` (a fixed SO_RCVBUF, a diagnostic), `BENCH_OUT` (a JSON file
//!   for the results; the plots read it).
//!
//! For each side, in order: a CPU baseline per cell (the same writes, no
//! watchers, over the same fixed window); resident memory of the server
//! process; N watches opened from the resourceVersion of a fresh LIST; a wait
//! until every one answered 200 and 5 s more; memory again; then each cell's
//! writes, each timestamped as issued and as acknowledged, and every
//! watcher's receipt of every event. Through watchmux, one more watcher
//! straight on the API server is the reference: its receipt of a write is when
//! the API server made the event available, so the receipts after it are
//! watchmux's own delay.
//!
//! Direct means TLS to kube-apiserver with the admin token (ALPN `h2` or
//! `http/1.1` by shape); through watchmux means plain text (h2c by prior
//! knowledge, or HTTP/1.1) to watchmux, which holds its one upstream watch.
//! The writer always goes straight to kube-apiserver on a connection of its own.

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

#[path = "../common/mod.rs"]
mod common;
mod report;
mod side;
mod watcher;
mod writer;

use std::sync::Arc;

use anyhow::Context as _;
use http::Method;

use common::api::Api;
use common::client::{Shape, SideKind};
use common::env::{env, env_list, env_or};
use writer::Objects;

/// ConfigMaps per size class the writes are spread over (patches to one
/// object are serialised by the API server; at 1,000 a second they would
/// queue on it).
const OBJECTS_PER_SIZE: usize = 8;

pub struct Config {
    pub ns: String,
    pub n: usize,
    pub shape: Shape,
    pub sides: Vec<SideKind>,
    pub api_streams: Option<usize>,
    pub proxy_streams: usize,
    pub proxy_pid: u32,
}

/// One cell: a rate and an object size, its writes and their sequence numbers.
pub struct CellPlan {
    pub rate: u32,
    pub size: usize,
    /// The JSON size of one of its objects as the API server returns it.
    pub object_bytes: usize,
    pub writes: usize,
    /// Sequence numbers `seq_base + 1 ..= seq_base + writes`.
    pub seq_base: u64,
    pub objects: Objects,
}

/// A cell left out, and why.
pub struct Skipped {
    pub rate: u32,
    pub size: usize,
    pub why: String,
}

pub struct Bench {
    pub cfg: Config,
    pub api: Arc<Api>,
    pub api_streams: usize,
    pub cells: Vec<CellPlan>,
}

fn size_label(size: usize) -> String {
    if size.is_multiple_of(1024) { format!("{}k", size / 1024) } else { format!("{size}b") }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::lines::self_check();
    let mut cfg = Config {
        ns: env_or("FANOUT_NAMESPACE", "watchmux-bench-fanout".to_owned())?,
        n: env_or("FANOUT_N", 1000)?,
        shape: env_or("FANOUT_SHAPE", Shape::H2)?,
        sides: env_list("FANOUT_SIDES", "direct,watchmux")?,
        api_streams: std::env::var("FANOUT_API_STREAMS").ok().map(|v| v.parse()).transpose()?,
        // Set below from what watchmux advertises, unless given.
        proxy_streams: env_or("FANOUT_PROXY_STREAMS", 0)?,
        proxy_pid: env("WATCHMUX_BENCH_PROXY_PID")?.parse()?,
    };
    let rates: Vec<u32> = env_list("FANOUT_RATES", "10,100,1000")?;
    let sizes: Vec<usize> = env_list("FANOUT_SIZES", "1024,20480")?;
    let seconds: f64 = env_or("FANOUT_SECONDS", 5.0)?;
    let max_deliveries: f64 = env_or("FANOUT_MAX_DELIVERIES", 500_000.0)?;
    let max_bytes: f64 = env_or("FANOUT_MAX_BYTES", 2.0 * 1024.0 * 1024.0 * 1024.0)?;
    let api = Arc::new(Api::from_env()?);

    // What each server lets one HTTP/2 connection carry.
    let (api_adv, proxy_adv) = api.advertised_streams().await?;
    let api_streams = cfg.api_streams.unwrap_or(api_adv.map_or(250, |v| (v as usize).min(250)));
    // Past what watchmux advertises, the streams over it would be refused
    // (it caps them at 100 a connection, as kube-apiserver does).
    if cfg.proxy_streams == 0 {
        cfg.proxy_streams = proxy_adv.map_or(1000, |v| (v as usize).min(1000));
    }
    if cfg.shape == Shape::H2 {
        if api_adv.is_some_and(|v| api_streams > v as usize) {
            eprintln!("fanout: warning: {api_streams} watches per connection exceed kube-apiserver's {api_adv:?}");
        }
        if proxy_adv.is_some_and(|v| cfg.proxy_streams > v as usize) {
            eprintln!("fanout: warning: {} watches per connection exceed watchmux's {proxy_adv:?}", cfg.proxy_streams);
        }
    }

    // The namespace, the objects of each size, and the cells.
    api.ensure_namespace(&cfg.ns).await?;
    let mut cells = Vec::new();
    let mut skipped = Vec::new();
    let mut seq_base = 0u64;
    for &size in &sizes {
        let objects = Objects { ns: cfg.ns.clone(), label: size_label(size), count: OBJECTS_PER_SIZE };
        objects.create(&api, size).await.with_context(|| format!("objects of {size} bytes"))?;
        let (_, body) = api.send(Method::GET, &objects.path(0), None, bytes::Bytes::new()).await?;
        let object_bytes = body.len();
        for &rate in &rates {
            let per_sec = cfg.n as f64 * rate as f64;
            let fit = seconds.min(max_deliveries / per_sec).min(max_bytes / (per_sec * object_bytes as f64));
            if fit < 1.0 {
                skipped.push(Skipped {
                    rate,
                    size,
                    why: format!(
                        "{} deliveries ({:.0} MiB) a second, over the bench's bound of {} deliveries or {:.0} MiB \
                         per cell and side",
                        per_sec,
                        per_sec * object_bytes as f64 / 1048576.0,
                        max_deliveries,
                        max_bytes / 1048576.0
                    ),
                });
                continue;
            }
            let writes = ((rate as f64 * fit).round() as usize).max(1);
            cells.push(CellPlan { rate, size, object_bytes, writes, seq_base, objects: objects.clone() });
            seq_base += writes as u64;
        }
    }
    eprintln!("fanout: N={} {:?}: {} cells, {} left out", cfg.n, cfg.shape, cells.len(), skipped.len());

    let bench = Bench { cfg, api, api_streams, cells };
    let mut results = Vec::new();
    for &kind in &bench.cfg.sides {
        // One retry when the API server was restarted under us.
        let r = match bench.run_side(kind).await {
            Ok(r) => r,
            Err(e) if format!("{e:#}").contains("kube-apiserver") => {
                eprintln!("fanout: {kind:?} side: {e:#}; waiting for the API server and measuring this side again");
                bench.api.wait_apiserver(std::time::Duration::from_secs(60)).await;
                bench.run_side(kind).await.with_context(|| format!("{kind:?} side, second attempt"))?
            }
            Err(e) => return Err(e.context(format!("{kind:?} side"))),
        };
        results.push(r);
    }
    report::markdown(&bench, api_adv, proxy_adv, &results, &skipped);
    common::env::write_results(&report::json(&bench, &results, &skipped))?;
    Ok(())
}
