//! Kubelet-shaped load, side by side in one run: M simulated kubelets, each on
//! one HTTP/2 connection of its own (as client-go holds), each listing and
//! then watching from the list's resourceVersion, as a reflector does:
//!
//! - its pods: `/api/v1/pods?fieldSelector=spec.nodeName=<node>`;
//! - its Node: `/api/v1/nodes?fieldSelector=metadata.name=<node>`;
//! - every Service: `/api/v1/services`;
//! - the ConfigMap and the Secret its pod mounts, each by `metadata.name`.
//!
//! The first LIST is with `resourceVersion=0`, as a reflector's is (any
//! cached state will do; a consistent LIST through watchmux would cost a
//! `LIST ?limit=1` upstream to prove the cache fresh).
//!
//! That is five watches per kubelet, straight at kube-apiserver, then through
//! watchmux (`--cache-resources pods,nodes,services,configmaps,secrets`: the
//! default list does not hold secrets, the bench script adds them). Per side:
//! the WATCHes kube-apiserver holds (`apiserver_longrunning_requests`, by
//! resource), the requests it served while the kubelets started
//! (`apiserver_request_total` by verb), its resident memory and Go heap, and
//! its CPU while the kubelets start, and while a writer changes R objects a
//! second (as an annotation `seq`: one change in ten to a Service, which
//! every kubelet watches, the others to one kubelet's ConfigMap or Secret),
//! net of the same writes without kubelets; every change must reach every
//! kubelet that watches it (lost = 0), timed from the write's acknowledgement.
//!
//! Environment: as `fanout` (`WATCHMUX_BENCH_*`, `CLK_TCK`, `BENCH_OUT`), and
//! `KUBELET_M` (100), `KUBELET_RATE` (changes a second, 20),
//! `KUBELET_SECONDS` (writing time, 10), `KUBELET_SIDES` (`direct,watchmux`).
//!
//! `KUBELET_NOISY` > 0 runs the LIST storm of [`storm`] instead of the
//! writes (`KUBELET_EXTRA_PODS`, `KUBELET_CONDITIONS`; watchmux in
//! delegated mode): the kubelets' time to synced beside a noisy client.

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

#[path = "../common/mod.rs"]
mod common;
mod storm;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use futures_util::future::join_all;
use http::StatusCode;
use http_body_util::BodyExt;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use common::api::Api;
use common::client::{Sender, Shape, SideKind, Target};
use common::env::{env, env_list, env_or};
use common::lines::{find_seq, read_lines};
use common::procfs::{Sample, rss_bytes, ticks_ms};
use common::prom;
use common::stats::{SideTable, fmt0, latency_json, mib, p50_p99_max, signed_mib, thousands};

const NS: &str = "watchmux-bench-kubelet";
const SERVICES: usize = 10;
/// Kubelets starting at once.
const START_CONCURRENCY: usize = 64;
const START_DEADLINE: Duration = Duration::from_secs(180);
const IDLE: Duration = Duration::from_secs(5);
pub(crate) const SETTLE: Duration = Duration::from_secs(4);
const DELIVERY_DEADLINE: Duration = Duration::from_secs(20);
const TAIL: Duration = Duration::from_secs(2);
const WATCHES_PER_KUBELET: usize = 5;
const KUBELET_RESOURCES: [&str; 5] = ["pods", "nodes", "services", "configmaps", "secrets"];
/// Tries of one request answered 429, as client-go's default.
const RETRIES_429: usize = 10;

/// How long a 429 says to wait (`Retry-After`, seconds; 1 if absent).
pub(crate) fn retry_after<B>(resp: &http::Response<B>) -> Duration {
    let secs = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()?.parse().ok()).unwrap_or(1);
    Duration::from_secs(secs)
}

pub(crate) fn node(i: usize) -> String {
    format!("bench-node-{i}")
}

/// The five list+watch paths of kubelet `i` (without `watch` / `resourceVersion`).
fn kubelet_paths(i: usize) -> [String; WATCHES_PER_KUBELET] {
    [
        format!("/api/v1/pods?fieldSelector=spec.nodeName%3D{}", node(i)),
        format!("/api/v1/nodes?fieldSelector=metadata.name%3D{}", node(i)),
        "/api/v1/services".to_owned(),
        format!("/api/v1/namespaces/{NS}/configmaps?fieldSelector=metadata.name%3Dkubelet-cm-{i}"),
        format!("/api/v1/namespaces/{NS}/secrets?fieldSelector=metadata.name%3Dkubelet-secret-{i}"),
    ]
}

/// Creates the nodes, pods, ConfigMaps, Secrets and Services (idempotent).
async fn populate(api: &Arc<Api>, m: usize) -> anyhow::Result<()> {
    api.ensure_namespace(NS).await?;
    let permits = Arc::new(Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..m {
        let (api, permits) = (api.clone(), permits.clone());
        tasks.push(tokio::spawn(async move {
            let _p = permits.acquire().await?;
            api.create("/api/v1/nodes", &json!({"apiVersion":"v1","kind":"Node","metadata":{"name":node(i)}})).await?;
            api.create(
                &format!("/api/v1/namespaces/{NS}/configmaps"),
                &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":format!("kubelet-cm-{i}")},
                    "data":{"config":"x".repeat(200)}}),
            )
            .await?;
            api.create(
                &format!("/api/v1/namespaces/{NS}/secrets"),
                &json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":format!("kubelet-secret-{i}")},
                    "stringData":{"token":"y".repeat(64)}}),
            )
            .await?;
            api.create(
                &format!("/api/v1/namespaces/{NS}/pods"),
                &json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":format!("kubelet-pod-{i}")},
                    "spec":{"nodeName":node(i),"containers":[{"name":"c","image":"registry.invalid/pause:1",
                        "volumeMounts":[{"name":"cm","mountPath":"/cm"},{"name":"s","mountPath":"/s"}]}],
                        "volumes":[{"name":"cm","configMap":{"name":format!("kubelet-cm-{i}")}},
                                   {"name":"s","secret":{"secretName":format!("kubelet-secret-{i}")}}]}}),
            )
            .await?;
            anyhow::Ok(())
        }));
    }
    for s in 0..SERVICES {
        api.create(
            &format!("/api/v1/namespaces/{NS}/services"),
            &json!({"apiVersion":"v1","kind":"Service","metadata":{"name":format!("kubelet-svc-{s}")},
                "spec":{"ports":[{"port":80}]}}),
        )
        .await?;
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[derive(Default)]
struct Shared {
    watches_open: AtomicUsize,
    failed: AtomicUsize,
    kubelets_ready: AtomicUsize,
    received: AtomicU64,
    /// 429s the kubelets were answered (and retried).
    refused_429: AtomicUsize,
    /// Each synced kubelet's time from its start (connection) to its five
    /// watches open.
    synced_in: parking_lot::Mutex<Vec<Duration>>,
}

/// What one watch of one kubelet saw: first receipts of sequence numbers.
#[derive(Default)]
struct WatchOutcome {
    seen: Vec<(u64, Instant)>,
    error: Option<String>,
}

/// One kubelet: its connection, five lists, five watches until `stop`. As
/// `as_node` (the storm runs), its requests carry `headers` (the admin token
/// impersonating the node), and a 429 is retried after its `Retry-After`, as
/// client-go does.
async fn kubelet(
    i: usize,
    target: Target,
    headers: Arc<http::HeaderMap>,
    permits: Arc<Semaphore>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> Vec<WatchOutcome> {
    let started = async {
        let _p = permits.acquire().await?;
        let began = Instant::now();
        let conn = target.connect(Shape::H2).await?;
        let send = |path: String| {
            let (conn, target, headers, shared) = (conn.clone(), &target, &headers, &shared);
            async move {
                for _ in 0..RETRIES_429 {
                    let mut req = target.request(Shape::H2, &path);
                    req.headers_mut().extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
                    let resp = conn.send(req).await?;
                    if resp.status() != StatusCode::TOO_MANY_REQUESTS {
                        return Ok(resp);
                    }
                    shared.refused_429.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(retry_after(&resp)).await;
                }
                bail!("{path}: 429 {RETRIES_429} times")
            }
        };
        let mut streams = Vec::new();
        for path in kubelet_paths(i) {
            let sep = if path.contains('?') { '&' } else { '?' };
            // As a reflector's first LIST: resourceVersion=0, any cached state will do.
            let resp = send(format!("{path}{sep}resourceVersion=0")).await?;
            if resp.status() != StatusCode::OK {
                bail!("LIST {path}: {}", resp.status());
            }
            let body = resp.into_body().collect().await?.to_bytes();
            let list: serde_json::Value = serde_json::from_slice(&body)?;
            let rv = list["metadata"]["resourceVersion"].as_str().ok_or_else(|| anyhow!("no RV"))?.to_owned();
            let watch = format!("{path}{sep}watch=1&allowWatchBookmarks=true&resourceVersion={rv}");
            let resp = send(watch.clone()).await?;
            if resp.status() != StatusCode::OK {
                bail!("WATCH {watch}: {}", resp.status());
            }
            shared.watches_open.fetch_add(1, Ordering::Relaxed);
            streams.push(resp.into_body());
        }
        shared.synced_in.lock().push(began.elapsed());
        anyhow::Ok((conn, streams))
    };
    let (_conn, streams): (Sender, _) = match tokio::select! {
        _ = stop.cancelled() => Err(anyhow!("cancelled while starting")),
        r = started => r,
    } {
        Ok(x) => x,
        Err(e) => {
            shared.failed.fetch_add(1, Ordering::Relaxed);
            return vec![WatchOutcome { error: Some(format!("{e:#}")), ..Default::default() }];
        }
    };
    shared.kubelets_ready.fetch_add(1, Ordering::Relaxed);
    join_all(streams.into_iter().map(|body| {
        let (stop, shared) = (stop.clone(), shared.clone());
        async move {
            let mut out = WatchOutcome::default();
            let end = read_lines(body, &stop, |line, now| {
                if let Some(seq) = find_seq(line)
                    && seq > 0
                    && !out.seen.iter().any(|(s, _)| *s == seq)
                {
                    out.seen.push((seq, now));
                    shared.received.fetch_add(1, Ordering::Relaxed);
                }
            })
            .await;
            if end != common::lines::End::Cancelled {
                out.error = Some(format!("{end:?}"));
            }
            out
        }
    }))
    .await
}

/// Change `k` of a hold phase goes to every kubelet when it is a Service
/// change (one in ten), otherwise to one kubelet.
fn is_service_change(k: usize) -> bool {
    k % 10 == 9
}

/// The writes of a hold phase: change `k` is to a Service (one in ten; every
/// kubelet watches them all), or to kubelet `k % m`'s ConfigMap (even k) or
/// Secret (odd k), as annotation `seq` = `seq_base + k + 1`.
async fn churn(api: &Arc<Api>, m: usize, rate: u32, count: usize, seq_base: u64) -> Vec<Option<Instant>> {
    let start = Instant::now();
    let period = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut tasks = Vec::with_capacity(count);
    for k in 0..count {
        tokio::time::sleep_until((start + period * k as u32).into()).await;
        let path = if is_service_change(k) {
            format!("/api/v1/namespaces/{NS}/services/kubelet-svc-{}", (k / 10) % SERVICES)
        } else {
            let kind = if k % 2 == 0 { "configmaps/kubelet-cm" } else { "secrets/kubelet-secret" };
            format!("/api/v1/namespaces/{NS}/{kind}-{}", (k / 2) % m)
        };
        let patch = format!(r#"{{"metadata":{{"annotations":{{"seq":"{}"}}}}}}"#, seq_base + k as u64 + 1);
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            match tokio::time::timeout(Duration::from_secs(10), api.merge_patch(&path, patch)).await {
                Ok(Ok(s)) if s.is_success() => Some(Instant::now()),
                other => {
                    eprintln!("kubelet: write failed: {other:?}");
                    None
                }
            }
        }));
    }
    let mut acked = Vec::with_capacity(count);
    for t in tasks {
        acked.push(t.await.ok().flatten());
    }
    acked
}

struct SideResult {
    kind: SideKind,
    started: usize,
    failed: usize,
    failure: Option<String>,
    start_secs: f64,
    watches_before: f64,
    watches_open: f64,
    watches_by_resource: Vec<(String, f64)>,
    requests_by_verb: Vec<(String, f64)>,
    api_rss: (u64, u64),
    api_heap: (f64, f64),
    server_rss: (u64, u64),
    baseline: Sample,
    baseline_secs: f64,
    phase: Sample,
    phase_secs: f64,
    writes_ok: usize,
    expected: usize,
    received: usize,
    /// The processes' CPU while the kubelets started and stayed idle 5 s.
    start_cpu: Sample,
    latency: Vec<Duration>,
    stream_errors: usize,
}

impl SideResult {
    fn net_ms(&self, f: fn(&Sample) -> u64) -> f64 {
        ticks_ms(1) * (f(&self.phase) as f64 - f(&self.baseline) as f64 * self.phase_secs / self.baseline_secs)
    }
}

struct Bench {
    api: Arc<Api>,
    m: usize,
    rate: u32,
    writes: usize,
    proxy_pid: u32,
    /// The storm's concurrent LISTs (`KUBELET_NOISY`); 0: the writes bench.
    noisy: usize,
}

/// Kubelets started: their tasks run until `stop`.
struct Started {
    shared: Arc<Shared>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<Vec<WatchOutcome>>>,
    /// Until every kubelet had synced or failed (or the deadline).
    secs: f64,
}

impl Bench {
    /// Starts the M kubelets against `target` (kubelet `i`'s requests with
    /// `headers(i)`), at most `START_CONCURRENCY` at once; returns once each
    /// has synced or failed, or at `START_DEADLINE`.
    async fn start_kubelets(
        &self,
        target: &Target,
        headers: impl Fn(usize) -> anyhow::Result<http::HeaderMap>,
    ) -> anyhow::Result<Started> {
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        let permits = Arc::new(Semaphore::new(START_CONCURRENCY));
        let start = Instant::now();
        let mut tasks = Vec::with_capacity(self.m);
        for i in 0..self.m {
            let headers = Arc::new(headers(i)?);
            let (target, permits, shared, stop) = (target.clone(), permits.clone(), shared.clone(), stop.clone());
            tasks.push(tokio::spawn(kubelet(i, target, headers, permits, shared, stop)));
        }
        while shared.kubelets_ready.load(Ordering::Relaxed) + shared.failed.load(Ordering::Relaxed) < self.m
            && start.elapsed() < START_DEADLINE
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Started { shared, stop, tasks, secs: start.elapsed().as_secs_f64() })
    }

    async fn run_side(&self, kind: SideKind, seq_base: u64) -> anyhow::Result<SideResult> {
        let api = &self.api;
        let api_pid = api.apiserver_pid()?;
        let (target, server_pid) = match kind {
            SideKind::Direct => (api.api_target.clone(), api_pid),
            SideKind::Watchmux => (api.proxy_target()?, self.proxy_pid),
        };
        tokio::time::sleep(SETTLE).await;
        let window = Duration::from_secs_f64(self.writes as f64 / self.rate as f64) + TAIL;

        // Baseline: the same writes, no kubelets.
        let b0 = Sample::take(server_pid, api_pid)?;
        let t0 = Instant::now();
        churn(api, self.m, self.rate, self.writes, 1_000_000_000).await;
        tokio::time::sleep_until((t0 + window).into()).await;
        let baseline = b0.delta(&Sample::take(server_pid, api_pid)?);
        let baseline_secs = t0.elapsed().as_secs_f64();

        let metrics0 = api.apiserver_metrics().await?;
        let watches_before = prom::sum(&metrics0, "apiserver_longrunning_requests", &[("verb", "WATCH")]);
        let requests0 = prom::by_label(&metrics0, "apiserver_request_total", "verb", &[]);
        let heap0 = prom::sum(&metrics0, "go_memstats_heap_inuse_bytes", &[]);
        let (api_rss0, server_rss0) = (rss_bytes(api_pid)?, rss_bytes(server_pid)?);
        let s0 = Sample::take(server_pid, api_pid)?;

        // The kubelets start.
        let start = self.start_kubelets(&target, |_| Ok(http::HeaderMap::new())).await?;
        let (shared, tasks, start_secs) = (start.shared.clone(), start.tasks, start.secs);
        let (stop, _stop_on_drop) = (start.stop.clone(), start.stop.drop_guard());
        let started = shared.kubelets_ready.load(Ordering::Relaxed);
        eprintln!("kubelet: {kind:?} M={}: {started} kubelets started in {start_secs:.1}s", self.m);
        tokio::time::sleep(IDLE).await;
        let metrics1 = api.apiserver_metrics().await?;
        let watches_open = prom::sum(&metrics1, "apiserver_longrunning_requests", &[("verb", "WATCH")]);
        let watches_by_resource =
            prom::by_label(&metrics1, "apiserver_longrunning_requests", "resource", &[("verb", "WATCH")]);
        let requests_by_verb =
            prom::delta(&requests0, &prom::by_label(&metrics1, "apiserver_request_total", "verb", &[]));
        let heap1 = prom::sum(&metrics1, "go_memstats_heap_inuse_bytes", &[]);
        let (api_rss1, server_rss1) = (rss_bytes(api_pid)?, rss_bytes(server_pid)?);
        let start_cpu = s0.delta(&Sample::take(server_pid, api_pid)?);

        // The writes, with the kubelets.
        let p0 = Sample::take(server_pid, api_pid)?;
        let t0 = Instant::now();
        let acked = churn(api, self.m, self.rate, self.writes, seq_base).await;
        let writes_ok = acked.iter().flatten().count();
        let expected: usize = (0..acked.len())
            .filter(|&k| acked[k].is_some())
            .map(|k| if is_service_change(k) { started } else { 1 })
            .sum();
        let deadline = Instant::now() + DELIVERY_DEADLINE;
        while (shared.received.load(Ordering::Relaxed) as usize) < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep_until((t0 + window).into()).await;
        let phase = p0.delta(&Sample::take(server_pid, api_pid)?);
        let phase_secs = t0.elapsed().as_secs_f64();
        if api.apiserver_pid()? != api_pid {
            bail!("kube-apiserver was restarted during the measurement");
        }

        stop.cancel();
        let mut latency = Vec::new();
        let (mut received, mut stream_errors, mut failure) = (0, 0, None);
        for t in tasks {
            for o in t.await? {
                if let Some(e) = o.error {
                    stream_errors += 1;
                    failure.get_or_insert(e);
                }
                for (seq, at) in o.seen {
                    let Some(k) = seq.checked_sub(seq_base + 1).map(|k| k as usize) else { continue };
                    if let Some(Some(ack)) = acked.get(k) {
                        received += 1;
                        latency.push(at.saturating_duration_since(*ack));
                    }
                }
            }
        }
        latency.sort();
        Ok(SideResult {
            kind,
            started,
            failed: self.m - started,
            failure,
            start_secs,
            watches_before,
            watches_open,
            watches_by_resource,
            requests_by_verb,
            api_rss: (api_rss0, api_rss1),
            api_heap: (heap0, heap1),
            server_rss: (server_rss0, server_rss1),
            baseline,
            baseline_secs,
            phase,
            phase_secs,
            writes_ok,
            expected,
            received,
            start_cpu,
            latency,
            stream_errors,
        })
    }
}

fn report(b: &Bench, sides: &[SideResult]) {
    println!();
    println!(
        "### {} kubelets, {} watches each, one HTTP/2 connection each; {} changes/s for {} s",
        thousands(b.m),
        WATCHES_PER_KUBELET,
        b.rate,
        b.writes as f64 / b.rate as f64
    );
    println!();
    let mut t = SideTable::new(sides, |s| s.kind.title());
    t.row("kubelets started / failed; time to start all, s", |s| {
        format!("{} / {}; {:.1}", thousands(s.started), s.failed, s.start_secs)
    });
    t.row("**kube-apiserver WATCHes held: before → kubelets running**", |s| {
        format!("**{} → {}**", s.watches_before, s.watches_open)
    });
    t.row("… of which pods, nodes, services, configmaps, secrets", |s| {
        s.watches_by_resource
            .iter()
            .filter(|(r, _)| KUBELET_RESOURCES.contains(&r.as_str()))
            .map(|(r, v)| format!("{r} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    t.row("kube-apiserver requests while the kubelets started, by verb", |s| {
        s.requests_by_verb.iter().map(|(r, v)| format!("{r} {v}")).collect::<Vec<_>>().join(", ")
    });
    t.row("**kube-apiserver RSS before → running, MiB**", |s| {
        format!(
            "**{} → {}** ({})",
            mib(s.api_rss.0 as f64),
            mib(s.api_rss.1 as f64),
            signed_mib(s.api_rss.1 as f64 - s.api_rss.0 as f64)
        )
    });
    t.row("kube-apiserver Go heap in use change, MiB", |s| signed_mib(s.api_heap.1 - s.api_heap.0));
    t.row("watchmux RSS before → running, MiB", |s| match s.kind {
        SideKind::Direct => "–".into(),
        SideKind::Watchmux => format!("{} → {}", mib(s.server_rss.0 as f64), mib(s.server_rss.1 as f64)),
    });
    t.row("kube-apiserver / watchmux CPU while the kubelets started (LIST, WATCH) and 5 s idle, ms", |s| {
        match s.kind {
            SideKind::Direct => format!("{} / –", fmt0(ticks_ms(s.start_cpu.apiserver))),
            SideKind::Watchmux => {
                format!("{} / {}", fmt0(ticks_ms(s.start_cpu.apiserver)), fmt0(ticks_ms(s.start_cpu.server)))
            }
        }
    });
    t.row("**kube-apiserver CPU over the writes, net of baseline, ms**", |s| {
        format!("**{}**", fmt0(s.net_ms(|x| x.apiserver)))
    });
    t.row("watchmux CPU over the writes, net of baseline, ms", |s| match s.kind {
        SideKind::Direct => "–".into(),
        SideKind::Watchmux => fmt0(s.net_ms(|x| x.server)),
    });
    t.row("changes acknowledged; deliveries expected / received / **lost**", |s| {
        format!("{}; {} / {} / **{}**", s.writes_ok, s.expected, s.received, s.expected.saturating_sub(s.received))
    });
    t.row("latency ack → receipt p50 / p99 / max, ms", |s| p50_p99_max(&s.latency));
    t.row("streams that ended or failed before the end", |s| s.stream_errors.to_string());
    t.print();
    for s in sides {
        if let Some(f) = &s.failure {
            println!("- {}: first failure: {f}", s.kind.title());
        }
    }
}

fn json(b: &Bench, sides: &[SideResult]) -> serde_json::Value {
    json!({
        "scenario": "kubelet",
        "m": b.m,
        "rate": b.rate,
        "writes": b.writes,
        "sides": sides.iter().map(|s| json!({
            "side": s.kind.name(),
            "started": s.started,
            "failed": s.failed,
            "start_secs": s.start_secs,
            "apiserver_watches_before": s.watches_before,
            "apiserver_watches_open": s.watches_open,
            "apiserver_watches_by_resource": s.watches_by_resource.iter().map(|(r, v)| json!([r, v])).collect::<Vec<_>>(),
            "apiserver_requests_by_verb": s.requests_by_verb.iter().map(|(r, v)| json!([r, v])).collect::<Vec<_>>(),
            "apiserver_rss": [s.api_rss.0, s.api_rss.1],
            "apiserver_heap": [s.api_heap.0, s.api_heap.1],
            "server_rss": [s.server_rss.0, s.server_rss.1],
            "apiserver_cpu_net_ms": s.net_ms(|x| x.apiserver),
            "server_cpu_net_ms": s.net_ms(|x| x.server),
            "writes_ok": s.writes_ok,
            "expected": s.expected,
            "received": s.received,
            "lost": s.expected.saturating_sub(s.received),
            "apiserver_cpu_start_ms": ticks_ms(s.start_cpu.apiserver),
            "server_cpu_start_ms": ticks_ms(s.start_cpu.server),
            "latency_ack_ms": latency_json(&s.latency),
            "stream_errors": s.stream_errors,
        })).collect::<Vec<_>>(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::lines::self_check();
    let m: usize = env_or("KUBELET_M", 100)?;
    let rate: u32 = env_or("KUBELET_RATE", 20)?;
    let seconds: f64 = env_or("KUBELET_SECONDS", 10.0)?;
    let sides: Vec<SideKind> = env_list("KUBELET_SIDES", "direct,watchmux")?;
    let api = Arc::new(Api::from_env()?);
    let t = Instant::now();
    populate(&api, m).await.context("creating the kubelets' objects")?;
    eprintln!("kubelet: {m} nodes, pods, configmaps, secrets in {:.1}s", t.elapsed().as_secs_f64());
    let noisy: usize = env_or("KUBELET_NOISY", 0)?;
    if noisy > 0 {
        let extra: usize = env_or("KUBELET_EXTRA_PODS", 10_000)?;
        storm::prepare(&api, extra).await.context("the storm's pods and RBAC")?;
    }
    let bench = Bench {
        api,
        m,
        rate,
        writes: ((rate as f64 * seconds).round() as usize).max(1),
        proxy_pid: env("WATCHMUX_BENCH_PROXY_PID")?.parse()?,
        noisy,
    };
    if noisy > 0 {
        let conditions: Vec<String> = env_list("KUBELET_CONDITIONS", "quiet,noisy")?;
        let mut results = Vec::new();
        for &kind in &sides {
            for c in &conditions {
                let noisy_on = match c.as_str() {
                    "quiet" => false,
                    "noisy" => true,
                    other => bail!("KUBELET_CONDITIONS: {other:?}: quiet or noisy"),
                };
                results.push(bench.run_storm(kind, noisy_on).await.with_context(|| format!("{kind:?} {c}"))?);
            }
        }
        storm::report(&bench, &results);
        common::env::write_results(&storm::json(&bench, &results))?;
        return Ok(());
    }
    let mut results = Vec::new();
    for (i, &kind) in sides.iter().enumerate() {
        let seq_base = 10_000 + i as u64 * 100_000;
        results.push(bench.run_side(kind, seq_base).await.with_context(|| format!("{kind:?} side"))?);
    }
    report(&bench, &results);
    common::env::write_results(&json(&bench, &results))?;
    Ok(())
}
