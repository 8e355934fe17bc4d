//! A case's stage: its own namespace with a pool of objects, a fresh
//! watchmux behind a relay, N watchers through watchmux all current, a
//! writer; and the finish every case shares: writes stopped, a last marker,
//! the API server's list, the watchers scored.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Config;
use super::fleet::{Fleet, StateView};
use super::relay::{Balancer, Relay};
use super::score::{Tally, Target, tally, truth};
use super::world::{Setup, Watchmux, direct, metrics};
use super::writer::{Kind, MARKER, Writer};
use crate::common::api::Api;
use crate::common::client::{Shape, Target as Endpoint};
use crate::common::prom;

/// How long the watchers have to open and get current before a fault.
const SETUP_LIMIT: Duration = Duration::from_secs(60);
/// How long the last marker may take after the writes stop.
const SETTLE_LIMIT: Duration = Duration::from_secs(20);

/// What every case gets.
pub struct Ctx {
    pub cfg: Config,
    pub api: Arc<Api>,
    pub setup: Setup,
}

impl Ctx {
    /// The API server's address (the relay forwards to it).
    pub fn apiserver(&self) -> std::net::SocketAddr {
        self.api.api_target.addr()
    }
}

/// What a case reports.
pub struct Outcome {
    pub id: &'static str,
    /// What was done, with its measured spans.
    pub fault: String,
    /// Watcher groups and their scores: the main fleet first.
    pub groups: Vec<(String, Tally)>,
    /// Short findings for the table.
    pub notes: Vec<String>,
    pub details: Value,
    /// Checks of the case's own that failed.
    pub problems: Vec<String>,
    pub secs: f64,
    /// Lines watchmux logged at WARN or ERROR.
    pub warnings: usize,
    pub error: Option<String>,
}

impl Outcome {
    pub fn new(
        id: &'static str,
        fault: String,
        groups: Vec<(String, Tally)>,
        notes: Vec<String>,
        details: Value,
    ) -> Self {
        let warnings = details["watchmux_warnings"].as_u64().unwrap_or(0) as usize;
        Self { id, fault, groups, notes, details, problems: Vec::new(), secs: 0.0, warnings, error: None }
    }

    pub fn failed(id: &'static str, error: String, secs: f64) -> Self {
        Self { secs, error: Some(error), ..Self::new(id, String::new(), Vec::new(), Vec::new(), Value::Null) }
    }

    /// Records a failed check of the case's own unless `ok`.
    pub fn check(mut self, ok: bool, problem: impl FnOnce() -> String) -> Self {
        if !ok {
            self.problems.push(problem());
        }
        self
    }
}

pub struct Stage {
    pub id: &'static str,
    pub writer: Arc<Writer>,
    /// The pool the churn writes among (the marker not included).
    pub names: Vec<String>,
    pub relay: Relay,
    pub wm: Watchmux,
    /// A tier's other replicas (`Plan::replicas`), behind [`Self::balancer`] with `wm`.
    pub replicas: Vec<Watchmux>,
    balancer: Option<Balancer>,
    pub fleet: Fleet,
    /// watchmux, for the watchers.
    pub proxy: Endpoint,
    churn: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
    metrics_before: String,
    counters_before: [u64; 5],
    started: Instant,
}

/// The options of a stage.
pub struct Plan<'a> {
    /// The objects written (default: ConfigMaps in the case's namespace).
    pub kind: Option<Kind>,
    /// watchmux's flags besides its addresses and kubeconfig.
    pub flags: &'a [&'a str],
    /// Variables in watchmux's environment (`WATCHMUX_FAULT_INJECT`).
    pub env: &'a [(&'a str, &'a str)],
    /// The size of the objects written (default: `CHAOS_OBJECT_BYTES`).
    pub object_bytes: Option<usize>,
    /// watchmux processes, a tier's replicas (default 1): past one, the
    /// watchers reach them through a TCP load balancer.
    pub replicas: usize,
    /// Where replica i listens: this port plus 2i, its admin port one more
    /// (default: the setup's addresses, then `CHAOS_PORT` + 100 + 2i), so
    /// that two tiers can run side by side.
    pub ports: Option<u16>,
    /// The watchers (default: the `CHAOS_N`, `CHAOS_PER_CONN` fleet, with
    /// the server's watch timeouts).
    pub watchers: Option<Watchers>,
}

/// A fleet other than the default: `n` watchers, `per_conn` to an HTTP/2
/// connection, each watch with a timeoutSeconds drawn from `watch_timeout`.
#[derive(Clone)]
pub struct Watchers {
    pub n: usize,
    pub per_conn: usize,
    pub watch_timeout: std::ops::Range<u64>,
}

impl Default for Plan<'_> {
    fn default() -> Self {
        Self {
            kind: None,
            flags: &["--cache-resources", "configmaps", "--cache-warm"],
            env: &[],
            object_bytes: None,
            replicas: 1,
            ports: None,
            watchers: None,
        }
    }
}

/// A GET through watchmux on a connection of its own, within 10 s: status and body.
pub async fn via(proxy: &Endpoint, path: &str) -> anyhow::Result<(http::StatusCode, Bytes)> {
    via_within(proxy, path, Duration::from_secs(10)).await
}

pub async fn via_within(proxy: &Endpoint, path: &str, limit: Duration) -> anyhow::Result<(http::StatusCode, Bytes)> {
    let conn = proxy.connect(Shape::H1).await?;
    let get = async {
        let resp = conn.send(proxy.request(Shape::H1, path)).await?;
        let status = resp.status();
        anyhow::Ok((status, resp.into_body().collect().await?.to_bytes()))
    };
    tokio::time::timeout(limit, get)
        .await
        .with_context(|| format!("GET {path} through watchmux: no answer in {limit:?}"))?
}

pub fn namespace(id: &str) -> String {
    format!("chaos-{id}-{}", std::process::id())
}

impl Stage {
    pub async fn new(ctx: &Ctx, id: &'static str, plan: Plan<'_>) -> anyhow::Result<Self> {
        let started = Instant::now();
        let ns = namespace(id);
        ctx.api.ensure_namespace(&ns).await?;
        let kind = plan.kind.unwrap_or_else(|| Kind::configmaps(&ns));
        let writer = Writer::new(ctx.api.clone(), kind, plan.object_bytes.unwrap_or(ctx.cfg.object_bytes));
        let names: Vec<String> = (0..ctx.cfg.objects).map(|i| format!("obj-{i:04}")).collect();
        for name in names.iter().chain([&MARKER.to_owned()]) {
            writer.create(name).await.with_context(|| format!("seeding {name}"))?;
        }
        let relay = Relay::start(ctx.apiserver()).await?;
        let kubeconfig = ctx.setup.kubeconfig_via(ctx.apiserver(), relay.addr, id)?;
        let log = ctx.setup.out_dir.join(format!("watchmux-{id}.log"));
        let _ = std::fs::remove_file(&log);
        let addrs_of = |port: u16| -> anyhow::Result<(SocketAddr, SocketAddr)> {
            Ok((format!("127.0.0.1:{port}").parse()?, format!("127.0.0.1:{}", port + 1).parse()?))
        };
        let first = match plan.ports {
            Some(base) => addrs_of(base)?,
            None => (ctx.setup.listen, ctx.setup.admin),
        };
        let wm = Watchmux::start_on(&ctx.setup, first, &kubeconfig, plan.flags, plan.env, log).await?;
        let mut replicas = Vec::new();
        let mut backends = vec![first.0];
        for i in 1..plan.replicas {
            // Fixed ports beside the setup's (CHAOS_PORT + 100 + 2i, admin + 1).
            let base = plan.ports.unwrap_or(ctx.setup.listen.port() + 100);
            let addrs = addrs_of(base + 2 * i as u16)?;
            let log = ctx.setup.out_dir.join(format!("watchmux-{id}-{i}.log"));
            let _ = std::fs::remove_file(&log);
            replicas.push(Watchmux::start_on(&ctx.setup, addrs, &kubeconfig, plan.flags, plan.env, log).await?);
            backends.push(addrs.0);
        }
        let (proxy, balancer) = match ctx.api.proxy_target()? {
            Endpoint::Proxy { tls, .. } if plan.replicas > 1 => {
                let balancer = Balancer::start(backends).await?;
                (Endpoint::Proxy { addr: balancer.addr, tls }, Some(balancer))
            }
            proxy => (proxy, None),
        };
        let collection = &writer.kind.collection;
        let fleet = match plan.watchers {
            None => Fleet::start(&proxy, ctx.cfg.shape, ctx.cfg.per_conn, collection, ctx.cfg.n),
            Some(w) => Fleet::start_with_timeouts(&proxy, ctx.cfg.shape, w.per_conn, collection, w.n, w.watch_timeout),
        };
        let ready = fleet.wait_ready(SETUP_LIMIT).await;
        if ready < fleet.n {
            bail!("only {ready} of {} watchers opened their watch in {SETUP_LIMIT:?}", fleet.n);
        }
        let (rv, _) = writer.marker().await?;
        let current = fleet.wait_current(rv, SETUP_LIMIT).await;
        if current < fleet.n {
            bail!("only {current} of {} watchers current before the fault", fleet.n);
        }
        let metrics_before = metrics(wm.admin).await;
        let counters_before = fleet.counters.snapshot();
        eprintln!("chaos: {id}: {} watchers current at rv {rv} in {:.1}s", fleet.n, started.elapsed().as_secs_f64());
        Ok(Self {
            id,
            writer,
            names,
            relay,
            wm,
            replicas,
            balancer,
            fleet,
            proxy,
            churn: None,
            metrics_before,
            counters_before,
            started,
        })
    }

    /// Random changes among the pool at `rate` per second until stopped.
    pub fn start_churn(&mut self, rate: f64) {
        let stop = CancellationToken::new();
        let task = self.writer.churn(self.names.clone(), rate, stop.clone());
        self.churn = Some((stop, task));
    }

    pub async fn stop_churn(&mut self) {
        if let Some((stop, task)) = self.churn.take() {
            stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        }
    }

    /// Writes the marker and waits until every watcher has it, at most `deadline`.
    pub async fn marker_and_wait(&self, from: Instant, deadline: Duration) -> anyhow::Result<Target> {
        let (rv, _) = self.writer.marker().await?;
        let current = self.fleet.wait_current(rv, deadline.saturating_sub(from.elapsed())).await;
        eprintln!(
            "chaos: {}: {current} of {} watchers current {:.1}s after the fault's end",
            self.id,
            self.fleet.n,
            from.elapsed().as_secs_f64()
        );
        Ok(Target { rv, from })
    }

    /// watchmux's metric `name` now, minus at the start of the fault.
    pub async fn metric_delta(&self, name: &str) -> f64 {
        let now = metrics(self.wm.admin).await;
        prom::sum(&now, name, &[]) - prom::sum(&self.metrics_before, name, &[])
    }

    /// Stops the writes, writes a last marker, compares every watcher (of
    /// the main fleet and of `extra` fleets) with the API server's list,
    /// then stops watchmux and empties the namespace.
    pub async fn finish(
        mut self,
        ctx: &Ctx,
        window: (Instant, Instant),
        targets: &[Target],
        extra: Vec<(String, Fleet)>,
        mut notes: Vec<String>,
    ) -> anyhow::Result<(Vec<(String, Tally)>, Vec<String>, Value)> {
        self.stop_churn().await;
        let (last, _) = self.writer.marker().await?;
        let settled = self.fleet.wait_current(last, SETTLE_LIMIT).await;
        for (_, f) in &extra {
            f.wait_current(last, SETTLE_LIMIT).await;
        }
        let truth = truth(&ctx.api, &self.writer.kind.collection).await?;
        let restarts = self.metric_delta("watchmux_upstream_watch_restarts_total").await;
        let relists = self.metric_delta("watchmux_upstream_relists_total").await;
        let c = self.fleet.counters.snapshot();
        let d: Vec<u64> = c.iter().zip(self.counters_before).map(|(a, b)| a - b).collect();
        let writes = self.writer.log();
        let deadline = ctx.cfg.deadline;
        let mut groups = Vec::new();
        let views: Vec<StateView> = self.fleet.finish().await;
        groups.push(("watchers".to_owned(), tally(&views, &truth, &writes, window, targets, deadline)));
        for (name, f) in extra {
            let gone = f.counters.gone.load(std::sync::atomic::Ordering::Relaxed);
            let views = f.finish().await;
            notes.push(format!("{name}: {gone} × 410"));
            groups.push((name, tally(&views, &truth, &writes, window, targets, deadline)));
        }
        notes.push(format!(
            "watchmux: {restarts} upstream watch restarts, {relists} relists; watchers: {} streams broken, {} × 410, {} lists, {} refused",
            d[2], d[3], d[1], d[4]
        ));
        let details = json!({
            "writes": writes.len(),
            "failed_writes": self.writer.failed.load(std::sync::atomic::Ordering::Relaxed),
            "truth_objects": truth.objects.len(),
            "settled_after_writes_stopped": settled,
            "watchmux_upstream_watch_restarts": restarts,
            "watchmux_upstream_relists": relists,
            "watchers": {"watch_requests": d[0], "lists": d[1], "streams_broken": d[2], "gone_410": d[3], "refused": d[4]},
            "relay": {"connections": self.relay.accepted(), "frozen": self.relay.frozen()},
            "stage_secs": self.started.elapsed().as_secs_f64(),
            "watchmux_warnings": self.wm.warnings(),
        });
        self.wm.stop().await;
        for replica in self.replicas.drain(..) {
            replica.stop().await;
        }
        drop(self.balancer.take());
        // Empty the namespace (no controller here would): keeps etcd small.
        let _ = direct(&ctx.api, Method::DELETE, &self.writer.kind.collection).await;
        Ok((groups, notes, details))
    }
}
