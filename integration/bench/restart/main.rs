//! Restart storm, side by side in one run: N watchers (reflector-shaped:
//! list, then watch from the list's resourceVersion, resume from the last
//! resourceVersion seen when a stream breaks, list again on 410 Gone, back
//! off with jitter between attempts) on the ConfigMaps of one namespace,
//! straight at kube-apiserver and then through watchmux. With all of them
//! current, kube-apiserver is restarted (`integration/scripts/cluster-up.sh
//! --restart-apiserver`); as soon as it is ready again a writer changes the
//! marker ConfigMap, and the bench waits until every watcher has seen that
//! change (through its watch or a new LIST).
//!
//! Measured per side: what reached the new kube-apiserver process until then
//! (`apiserver_request_total` for configmaps by verb: the counters start from
//! zero with the process; the bench's own writes are subtracted), the
//! watchers' own view (reconnects, LISTs, 410s, refused attempts), the new
//! process's CPU from its start, and the time from the restart command, and
//! from the marker write's acknowledgement, until each watcher was current.
//!
//! `RESTART_KIND=failover` (`integration/scripts/bench-failover.sh`): the
//! command kills or freezes one of several API servers instead, and nothing
//! is restarted; the direct side's watches then go through a plain TCP load
//! balancer (`WATCHMUX_BENCH_DIRECT_ADDR`), watchmux's to its
//! `--upstream-servers`, and the rows about a new kube-apiserver process are
//! left out.
//!
//! Environment: as `fanout` (`WATCHMUX_BENCH_*`, `BENCH_OUT`), and
//! `RESTART_N` (1000), `RESTART_SHAPE` (`h2`), `RESTART_SIDES`
//! (`direct,watchmux`), `RESTART_DEADLINE_S` (120), `RESTART_CMD` (the
//! restart command, run by `bash -c` from the working directory),
//! `RESTART_KIND` (`restart`).

// A bench is a binary: `pub` here marks what its modules share, not an API to document.
#![allow(unreachable_pub, missing_docs)]

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use common::api::Api;
use common::client::{Shape, SideKind};
use common::env::{env_list, env_or};
use common::lines::find_seq;
use common::procfs::{cpu_ticks, ticks_ms};
use common::prom;
use common::reflector::{Counters, Reflector, Slot, View};
use common::stats::{SideTable, fmt1, latency_json, p50_p99_max, thousands};

const NS: &str = "watchmux-bench-restart";
const MARKER: &str = "restart-marker";
const OPEN_CONCURRENCY: usize = 256;
const OPEN_DEADLINE: Duration = Duration::from_secs(120);
const SETTLE: Duration = Duration::from_secs(4);

/// What every watcher of a side shares besides the reflector counters.
#[derive(Default)]
struct Shared {
    /// Watchers that have seen `target` or later.
    current: AtomicUsize,
    target: AtomicU64,
}

/// A watcher's view: the highest sequence number seen, and when `target` was reached.
struct SeqView {
    shared: Arc<Shared>,
    seq: u64,
    /// When the watcher first had the target of `current_for` (or later).
    current_at: Option<Instant>,
    current_for: u64,
}

impl SeqView {
    fn saw(&mut self, seq: u64, now: Instant) {
        if seq > self.seq {
            self.seq = seq;
        }
        let target = self.shared.target.load(Ordering::SeqCst);
        if target > 0 && self.seq >= target && self.current_for != target {
            self.current_at = Some(now);
            self.current_for = target;
            self.shared.current.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Its current time, if it was current for the last target.
    fn current_time(&self) -> Option<Instant> {
        self.current_at.filter(|_| self.current_for == self.shared.target.load(Ordering::SeqCst))
    }
}

impl View for SeqView {
    /// The marker's `seq` in a LIST counts as seen.
    fn listed(&mut self, body: &[u8], now: Instant) -> Option<u64> {
        let list: serde_json::Value = serde_json::from_slice(body).ok()?;
        for item in list["items"].as_array().into_iter().flatten() {
            if let Some(seq) = item["data"]["seq"].as_str().and_then(|s| s.parse().ok()) {
                self.saw(seq, now);
            }
        }
        list["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok())
    }

    fn event(&mut self, line: &[u8], now: Instant) {
        if let Some(seq) = find_seq(line) {
            self.saw(seq, now);
        }
    }
}

struct SideResult {
    kind: SideKind,
    connections: usize,
    ready: usize,
    open_secs: f64,
    restart_secs: f64,
    marker_delay_secs: f64,
    current: usize,
    /// Per watcher, from the restart command / from the marker's acknowledgement.
    from_restart: Vec<Duration>,
    from_marker: Vec<Duration>,
    /// None in a failover: no new process to count at.
    requests_by_verb: Option<Vec<(String, f64)>>,
    all_requests: Option<f64>,
    watch_requests: u64,
    list_requests: u64,
    reconnects: u64,
    gone: u64,
    refused: u64,
    api_cpu_ms: Option<f64>,
    wm_restarts: Option<(f64, f64)>,
}

struct Bench {
    api: Arc<Api>,
    n: usize,
    shape: Shape,
    per_conn: usize,
    deadline: Duration,
    restart_cmd: String,
    /// `RESTART_KIND=failover`: one of several API servers killed or frozen.
    failover: bool,
}

impl Bench {
    async fn write_marker(&self, seq: u64) -> anyhow::Result<Instant> {
        let path = format!("/api/v1/namespaces/{NS}/configmaps/{MARKER}");
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            match self.api.merge_patch(&path, format!(r#"{{"data":{{"seq":"{seq}"}}}}"#)).await {
                Ok(s) if s.is_success() => return Ok(Instant::now()),
                other if Instant::now() > until => bail!("marker write: {other:?}"),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Sets the target every watcher is to reach (before the write that makes it).
    fn set_target(shared: &Shared, seq: u64) {
        shared.current.store(0, Ordering::SeqCst);
        shared.target.store(seq, Ordering::SeqCst);
    }

    async fn wait_current(&self, shared: &Shared, want: usize, limit: Duration) {
        let until = Instant::now() + limit;
        while shared.current.load(Ordering::SeqCst) < want && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn run_side(&self, kind: SideKind, seq_base: u64) -> anyhow::Result<SideResult> {
        let target = match kind {
            SideKind::Direct => self.api.api_target.clone(),
            SideKind::Watchmux => self.api.proxy_target()?,
        };
        tokio::time::sleep(SETTLE).await;
        let per_conn = if self.shape == Shape::H1 { 1 } else { self.per_conn };
        let connections = self.n.div_ceil(per_conn);
        let slots: Vec<Arc<Slot>> = (0..connections).map(|_| Slot::new(target.clone(), self.shape)).collect();
        let shared = Arc::new(Shared::default());
        let counters = Arc::new(Counters::default());
        let stop = CancellationToken::new();
        let _stop_on_drop = stop.clone().drop_guard();
        let open = Instant::now();
        let tasks: Vec<_> = (0..self.n)
            .map(|i| {
                let w = Reflector {
                    watch_timeout: None,
                    slot: slots[i / per_conn].clone(),
                    counters: counters.clone(),
                    stop: stop.clone(),
                    list_path: format!("/api/v1/namespaces/{NS}/configmaps"),
                    view: SeqView { shared: shared.clone(), seq: 0, current_at: None, current_for: 0 },
                    resume_from: None,
                    pace: None,
                };
                // The first list+watch is paced, OPEN_CONCURRENCY every 100 ms; reconnects are the storm.
                let pace = Duration::from_millis((i / OPEN_CONCURRENCY) as u64 * 100);
                tokio::spawn(async move {
                    tokio::time::sleep(pace).await;
                    w.run().await.current_time()
                })
            })
            .collect();
        while counters.ready.load(Ordering::Relaxed) < self.n && open.elapsed() < OPEN_DEADLINE {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let open_secs = open.elapsed().as_secs_f64();
        let ready = counters.ready.load(Ordering::Relaxed);
        eprintln!("restart: {kind:?} N={}: {ready} watchers ready in {open_secs:.1}s", self.n);

        // All current before the restart.
        Self::set_target(&shared, seq_base + 1);
        self.write_marker(seq_base + 1).await?;
        self.wait_current(&shared, self.n, Duration::from_secs(30)).await;
        let before = shared.current.load(Ordering::SeqCst);
        if before < self.n {
            eprintln!("restart: {kind:?}: only {before} of {} watchers current before the restart", self.n);
        }
        let wm0 = match kind {
            SideKind::Watchmux => Some(self.api.watchmux_metrics().await?),
            SideKind::Direct => None,
        };
        let c0 = counters.snapshot();

        // The restart, then the marker.
        let t_restart = Instant::now();
        let cmd = self.restart_cmd.clone();
        let status = tokio::task::spawn_blocking(move || {
            std::process::Command::new("bash").arg("-c").arg(cmd).stdout(std::process::Stdio::null()).status()
        })
        .await?
        .context("restart command")?;
        if !status.success() {
            bail!("restart command failed: {status}");
        }
        let restart_secs = t_restart.elapsed().as_secs_f64();
        let new_pid = if self.failover { None } else { Some(self.api.apiserver_pid()?) };
        Self::set_target(&shared, seq_base + 2);
        let marker_ack = self.write_marker(seq_base + 2).await?;
        self.wait_current(&shared, self.n, self.deadline).await;
        let current = shared.current.load(Ordering::SeqCst);
        let c1 = counters.snapshot();
        let api_cpu_ms = new_pid.map(|pid| ticks_ms(cpu_ticks(pid).unwrap_or(0)));
        let metrics = if self.failover { None } else { Some(self.api.apiserver_metrics().await?) };
        let wm_restarts = match (&wm0, kind) {
            (Some(b), SideKind::Watchmux) => {
                let a = self.api.watchmux_metrics().await?;
                let d = |n: &str| prom::sum(&a, n, &[]) - prom::sum(b, n, &[]);
                Some((d("watchmux_upstream_watch_restarts_total"), d("watchmux_upstream_relists_total")))
            }
            _ => None,
        };
        eprintln!("restart: {kind:?}: {current} of {} current after the restart", self.n);

        stop.cancel();
        let mut from_restart = Vec::new();
        let mut from_marker = Vec::new();
        for t in tasks {
            if let Some(at) = t.await? {
                from_restart.push(at.saturating_duration_since(t_restart));
                from_marker.push(at.saturating_duration_since(marker_ack));
            }
        }
        from_restart.sort();
        from_marker.sort();
        // The bench's own configmap requests on the new process: the marker PATCH (and its retries' GETs: none).
        let requests_by_verb = metrics.as_deref().map(|metrics| {
            let mut by_verb = prom::by_label(metrics, "apiserver_request_total", "verb", &[("resource", "configmaps")]);
            if let Some(p) = by_verb.iter_mut().find(|(v, _)| v == "PATCH") {
                p.1 -= 1.0;
            }
            by_verb.retain(|(_, v)| *v != 0.0);
            by_verb
        });
        let all_requests = metrics.as_deref().map(|metrics| prom::sum(metrics, "apiserver_request_total", &[]));
        Ok(SideResult {
            kind,
            connections,
            ready,
            open_secs,
            restart_secs,
            marker_delay_secs: marker_ack.duration_since(t_restart).as_secs_f64(),
            current,
            from_restart,
            from_marker,
            requests_by_verb,
            all_requests,
            watch_requests: c1[0] - c0[0],
            list_requests: c1[1] - c0[1],
            reconnects: c1[2] - c0[2],
            gone: c1[3] - c0[3],
            refused: c1[4] - c0[4],
            api_cpu_ms,
            wm_restarts,
        })
    }
}

fn report(b: &Bench, sides: &[SideResult]) {
    println!();
    println!(
        "### {}: {} watchers, {}",
        if b.failover { "One of three API servers gone" } else { "Restart storm" },
        thousands(b.n),
        match b.shape {
            Shape::H2 => "HTTP/2, many watches per connection",
            Shape::H1 => "HTTP/1.1, one connection per watcher",
        }
    );
    println!();
    let mut t = SideTable::new(sides, |s| s.kind.title());
    t.row("connections; watchers ready before the restart (time to open, s)", |s| {
        format!("{}; {} ({:.1})", thousands(s.connections), thousands(s.ready), s.open_secs)
    });
    let command = if b.failover { "kill (or freeze) command" } else { "restart command until ready" };
    t.row(&format!("{command}, s; marker write acknowledged at, s"), |s| {
        format!("{:.1}; {:.1}", s.restart_secs, s.marker_delay_secs)
    });
    t.row("**watchers current again / all**", |s| format!("**{} / {}**", thousands(s.current), thousands(b.n)));
    t.row(&format!("**time until every watcher is current, from the {command}, s**"), |s| {
        match s.from_restart.last() {
            Some(d) if s.current == b.n => format!("**{}**", fmt1(d.as_secs_f64())),
            Some(d) => format!("not all within the deadline (last of those current: {})", fmt1(d.as_secs_f64())),
            None => "–".into(),
        }
    });
    t.row("from the marker write's ack: p50 / p99 / max, ms", |s| p50_p99_max(&s.from_marker));
    if !b.failover {
        t.row(
            "**configmaps requests reaching the new kube-apiserver, by verb** (bench's marker write excluded)",
            |s| {
                let by_verb = s.requests_by_verb.iter().flatten().map(|(v, n)| format!("{v} {n}"));
                format!("**{}**", by_verb.collect::<Vec<_>>().join(", "))
            },
        );
        t.row("all requests the new kube-apiserver served (any resource, its own included)", |s| {
            s.all_requests.map_or("–".into(), |n| format!("{n}"))
        });
    }
    t.row("the watchers' view: WATCH requests / LISTs / streams broken / 410 Gone / refused attempts", |s| {
        format!("{} / {} / {} / {} / {}", s.watch_requests, s.list_requests, s.reconnects, s.gone, s.refused)
    });
    if !b.failover {
        t.row("new kube-apiserver's CPU from its start until all current, ms", |s| {
            s.api_cpu_ms.map_or("–".into(), |ms| format!("{ms:.0}"))
        });
    }
    t.row("watchmux upstream watch restarts / relists", |s| {
        s.wm_restarts.map_or("–".into(), |(r, l)| format!("{r} / {l}"))
    });
    t.print();
}

fn json(b: &Bench, sides: &[SideResult]) -> serde_json::Value {
    json!({
        "scenario": if b.failover { "failover" } else { "restart" },
        "n": b.n,
        "shape": b.shape.name(),
        "sides": sides.iter().map(|s| json!({
            "side": s.kind.name(),
            "connections": s.connections,
            "ready": s.ready,
            "restart_secs": s.restart_secs,
            "marker_delay_secs": s.marker_delay_secs,
            "current": s.current,
            "all_current_from_restart_s": s.from_restart.last().map(|d| d.as_secs_f64()),
            "from_restart_ms": latency_json(&s.from_restart),
            "from_marker_ms": latency_json(&s.from_marker),
            "apiserver_configmap_requests_by_verb": s.requests_by_verb.as_ref().map(|r| r.iter().map(|(v, n)| json!([v, n])).collect::<Vec<_>>()),
            "apiserver_all_requests": s.all_requests,
            "watch_requests": s.watch_requests,
            "list_requests": s.list_requests,
            "streams_broken": s.reconnects,
            "gone": s.gone,
            "refused": s.refused,
            "apiserver_cpu_ms": s.api_cpu_ms,
            "watchmux_upstream_restarts_relists": s.wm_restarts.map(|(r, l)| [r, l]),
        })).collect::<Vec<_>>(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::lines::self_check();
    let api = Arc::new(Api::from_env()?);
    let (api_adv, _) = api.advertised_streams().await?;
    let bench = Bench {
        n: env_or("RESTART_N", 1000)?,
        shape: env_or("RESTART_SHAPE", Shape::H2)?,
        per_conn: api_adv.map_or(100, |v| (v as usize).min(250)),
        deadline: Duration::from_secs(env_or("RESTART_DEADLINE_S", 120)?),
        restart_cmd: env_or("RESTART_CMD", "bash integration/scripts/cluster-up.sh --restart-apiserver".to_owned())?,
        failover: env_or("RESTART_KIND", "restart".to_owned())? == "failover",
        api,
    };
    bench.api.ensure_namespace(NS).await?;
    bench
        .api
        .create(
            &format!("/api/v1/namespaces/{NS}/configmaps"),
            &json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":MARKER},"data":{"pad":"x".repeat(700),"seq":"0"}}),
        )
        .await?;
    let sides: Vec<SideKind> = env_list("RESTART_SIDES", "direct,watchmux")?;
    let mut results = Vec::new();
    for (i, &kind) in sides.iter().enumerate() {
        let seq_base = 1_000_000 + (std::process::id() as u64 % 1000) * 1000 + i as u64 * 10;
        let r = bench.run_side(kind, seq_base).await.with_context(|| format!("{kind:?} side"))?;
        results.push(r);
        // The API server settles (and watchmux re-syncs) before the next side.
        bench.api.wait_apiserver(Duration::from_secs(60)).await;
    }
    report(&bench, &results);
    common::env::write_results(&json(&bench, &results))?;
    Ok(())
}
