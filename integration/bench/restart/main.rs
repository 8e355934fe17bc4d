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
//! `RESTART_KIND=upgrade` (`integration/scripts/bench-upgrade.sh`): a rolling
//! upgrade of several API servers, as failover (a load balancer in front of
//! them for the direct side), in steps: `RESTART_CMD` runs once per step
//! with `RESTART_STEP` = 0 (nothing changed yet), 1, ... `UPGRADE_STEPS`
//! (3), each step then followed by a marker write and the wait for every
//! watcher; the last line the command prints, if JSON, goes into the step's
//! results (the script's check of the served form). A writer creates,
//! updates and deletes ConfigMaps throughout (`UPGRADE_WRITES_PER_S`, 4),
//! every watcher's events are recorded, and at the end they are checked
//! against etcd's own watch of the namespace (`UPGRADE_ORACLE`, the file
//! `integration/cmd/etcdwatch` writes): see `upgrade.rs`.
//!
//! `RESTART_KIND=rollout` (`integration/scripts/bench-rollout.sh`): as
//! upgrade (steps, the writer, the check against etcd), for a tier of
//! watchmux replicas behind one address restarted one after another (or
//! kube-apiserver restarted, on the direct side), and with a client-go
//! informer fleet beside the reflector-shaped watchers (`ROLLOUT_INFORMERS`,
//! the `integration/cmd/informers` binary; `ROLLOUT_INFORMERS_K`, 20; its
//! summary to `ROLLOUT_INFORMERS_OUT`): see `informers.rs`. Measured besides
//! the upgrade's figures: the LISTs and WATCHes on configmaps that reached
//! kube-apiserver over the steps (`apiserver_request_total`'s delta, or the
//! new process's count when it was restarted), the informers' relists and
//! 410s after sync, their events against etcd's, and when the last write
//! reached every informer.
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
mod informers;
mod upgrade;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use http::Method;
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
use informers::{Fleet, FleetSummary, FleetTarget};
use upgrade::{EventLog, Oracle, Verdict, WriteCounts};

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
    /// When each watcher became current for `target` (an upgrade's per-step figures).
    current_times: parking_lot::Mutex<Vec<Instant>>,
}

/// A watcher's view: the highest sequence number seen, and when `target` was reached.
struct SeqView {
    shared: Arc<Shared>,
    seq: u64,
    /// When the watcher first had the target of `current_for` (or later).
    current_at: Option<Instant>,
    current_for: u64,
    /// Every event received, for the check against etcd (`RESTART_KIND=upgrade`).
    log: Option<EventLog>,
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
            self.shared.current_times.lock().push(now);
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
        let rv = list["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok());
        if let (Some(log), Some(rv)) = (self.log.as_mut(), rv) {
            log.listed(rv);
        }
        rv
    }

    fn event(&mut self, line: &[u8], now: Instant) {
        if let Some(log) = self.log.as_mut() {
            log.event(line);
        }
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
    /// `RESTART_KIND=upgrade`: each step's figures, the writer's writes
    /// (done, failed), and the check of the events against etcd's.
    steps: Vec<StepResult>,
    writes: Option<(u64, u64)>,
    verdict: Option<Verdict>,
    /// `RESTART_KIND=rollout`: configmaps LISTs and WATCHes that reached
    /// kube-apiserver over the steps, and the informer fleet's figures.
    apiserver_lists_watches: Option<(f64, f64)>,
    fleet: Option<FleetResult>,
}

/// The informer fleet's figures for a side.
struct FleetResult {
    summary: FleetSummary,
    verdict: Verdict,
    /// Per informer, from the last marker write's acknowledgement until it had it.
    from_marker: Vec<Duration>,
}

impl SideResult {
    fn step(&self, step: usize) -> Option<&StepResult> {
        self.steps.iter().find(|r| r.step == step)
    }
}

/// One step of an upgrade: its command, then a marker write every watcher is to see.
struct StepResult {
    step: usize,
    cmd_secs: f64,
    current: usize,
    /// Per watcher current again, from the step's start / from the marker's acknowledgement.
    from_step: Vec<Duration>,
    from_marker: Vec<Duration>,
    /// The watchers' counters over the step: streams broken, LISTs, 410s, refused attempts.
    broken_lists_gone_refused: [u64; 4],
    /// The last line the command printed, if JSON (the served-form check).
    check: serde_json::Value,
}

/// `RESTART_KIND=rollout`'s informer fleet.
struct RolloutPlan {
    /// The `integration/cmd/informers` binary (none: no fleet).
    informers_bin: Option<String>,
    informers: usize,
    out: String,
}

/// `RESTART_KIND=upgrade`'s (and rollout's) settings.
struct UpgradePlan {
    steps: usize,
    writes_per_sec: f64,
    oracle: String,
}

struct Bench {
    api: Arc<Api>,
    n: usize,
    shape: Shape,
    per_conn: usize,
    deadline: Duration,
    restart_cmd: String,
    /// `RESTART_KIND=failover` or `upgrade`: one of several API servers
    /// killed, frozen or replaced; no single new process to count at.
    failover: bool,
    upgrade: Option<UpgradePlan>,
    rollout: Option<RolloutPlan>,
}

impl Bench {
    /// The marker write: when it was acknowledged, and its resourceVersion.
    async fn write_marker(&self, seq: u64) -> anyhow::Result<(Instant, u64)> {
        let path = format!("/api/v1/namespaces/{NS}/configmaps/{MARKER}");
        let patch = format!(r#"{{"data":{{"seq":"{seq}"}}}}"#);
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let sent =
                self.api.send(Method::PATCH, &path, Some("application/merge-patch+json"), patch.clone().into()).await;
            if let Ok((s, body)) = &sent
                && s.is_success()
            {
                let at = Instant::now();
                let object: serde_json::Value = serde_json::from_slice(body)?;
                let rv = object["metadata"]["resourceVersion"].as_str().and_then(|s| s.parse().ok());
                return Ok((at, rv.context("the marker without a resourceVersion")?));
            }
            if Instant::now() > until {
                bail!("marker write: {sent:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs `RESTART_CMD` (with `RESTART_STEP` in an upgrade); the last line it printed, if JSON.
    async fn run_cmd(&self, step: Option<usize>) -> anyhow::Result<serde_json::Value> {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg("-c").arg(&self.restart_cmd).stderr(std::process::Stdio::inherit());
        if let Some(step) = step {
            cmd.env("RESTART_STEP", step.to_string());
        }
        let out = tokio::task::spawn_blocking(move || cmd.output()).await?.context("restart command")?;
        if !out.status.success() {
            bail!("restart command failed: {}", out.status);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        Ok(serde_json::from_str(last).unwrap_or(serde_json::Value::Null))
    }

    /// An upgrade's steps, under the churn writer, each followed by a marker
    /// every watcher is to see; the writer is stopped after the last.
    async fn run_steps(
        &self,
        plan: &UpgradePlan,
        shared: &Shared,
        counters: &Counters,
        seq_base: u64,
    ) -> anyhow::Result<(Vec<StepResult>, (u64, u64))> {
        let writer_stop = CancellationToken::new();
        let writes = Arc::new(WriteCounts::default());
        let writer = tokio::spawn(upgrade::churn(
            self.api.clone(),
            NS,
            plan.writes_per_sec,
            writer_stop.clone(),
            writes.clone(),
        ));
        let mut steps = Vec::new();
        for step in 0..=plan.steps {
            let c0 = counters.snapshot();
            let t_step = Instant::now();
            let check = self.run_cmd(Some(step)).await?;
            let cmd_secs = t_step.elapsed().as_secs_f64();
            Self::set_target(shared, seq_base + 2 + step as u64);
            let (ack, _) = self.write_marker(seq_base + 2 + step as u64).await?;
            self.wait_current(shared, self.n, self.deadline).await;
            let c1 = counters.snapshot();
            let times = std::mem::take(&mut *shared.current_times.lock());
            let since = |from: Instant| {
                let mut d: Vec<Duration> = times.iter().map(|t| t.saturating_duration_since(from)).collect();
                d.sort();
                d
            };
            let r = StepResult {
                step,
                cmd_secs,
                current: shared.current.load(Ordering::SeqCst),
                from_step: since(t_step),
                from_marker: since(ack),
                broken_lists_gone_refused: [c1[2] - c0[2], c1[1] - c0[1], c1[3] - c0[3], c1[4] - c0[4]],
                check,
            };
            eprintln!(
                "restart: step {step}: command {cmd_secs:.1}s, {} of {} current, check {}",
                r.current, self.n, r.check
            );
            steps.push(r);
        }
        writer_stop.cancel();
        writer.await?;
        Ok((steps, (writes.ok.load(Ordering::Relaxed), writes.failed.load(Ordering::Relaxed))))
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
                    view: SeqView {
                        shared: shared.clone(),
                        seq: 0,
                        current_at: None,
                        current_for: 0,
                        log: self.upgrade.as_ref().map(|_| EventLog::default()),
                    },
                    resume_from: None,
                    pace: None,
                };
                // The first list+watch is paced, OPEN_CONCURRENCY every 100 ms; reconnects are the storm.
                let pace = Duration::from_millis((i / OPEN_CONCURRENCY) as u64 * 100);
                tokio::spawn(async move {
                    tokio::time::sleep(pace).await;
                    let view = w.run().await;
                    (view.current_time(), view.log)
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
        shared.current_times.lock().clear();
        self.wait_current(&shared, self.n, Duration::from_secs(30)).await;
        let before = shared.current.load(Ordering::SeqCst);
        if before < self.n {
            eprintln!("restart: {kind:?}: only {before} of {} watchers current before the restart", self.n);
        }
        // The informers start with every reflector current, and are synced before the first step.
        let fleet = match self.rollout.as_ref().and_then(|r| r.informers_bin.as_ref().map(|bin| (r, bin))) {
            Some((plan, bin)) => {
                let target = match kind {
                    SideKind::Watchmux => FleetTarget::Proxy(self.api.proxy.context("WATCHMUX_BENCH_PROXY")?),
                    SideKind::Direct => FleetTarget::Kubeconfig(common::env::env("WATCHMUX_BENCH_KUBECONFIG")?),
                };
                let out = format!("{}-{}.json", plan.out.trim_end_matches(".json"), kind.name());
                let fleet = Fleet::start(bin, plan.informers, NS, target, out.into()).await?;
                eprintln!("restart: {kind:?}: {} informers synced", fleet.informers);
                Some(fleet)
            }
            None => None,
        };
        // A rolling restart of watchmux replicas leaves no one process's counters to compare.
        let wm0 = match kind {
            SideKind::Watchmux if self.rollout.is_none() => Some(self.api.watchmux_metrics().await?),
            _ => None,
        };
        let api0 = match self.rollout {
            Some(_) => Some((self.api.apiserver_pid()?, self.api.apiserver_metrics().await?)),
            None => None,
        };
        let c0 = counters.snapshot();

        // The restart (or an upgrade's steps), then the marker.
        let t_restart = Instant::now();
        let (steps, writes) = match &self.upgrade {
            Some(plan) => {
                let (steps, writes) = self.run_steps(plan, &shared, &counters, seq_base).await?;
                (steps, Some(writes))
            }
            None => {
                self.run_cmd(None).await?;
                (Vec::new(), None)
            }
        };
        let restart_secs = t_restart.elapsed().as_secs_f64();
        let new_pid = if self.failover { None } else { Some(self.api.apiserver_pid()?) };
        let final_seq = seq_base + 2 + self.upgrade.as_ref().map_or(0, |p| p.steps as u64 + 1);
        Self::set_target(&shared, final_seq);
        let (marker_ack, marker_rv) = self.write_marker(final_seq).await?;
        let marker_wall = SystemTime::now() - marker_ack.elapsed();
        self.wait_current(&shared, self.n, self.deadline).await;
        let current = shared.current.load(Ordering::SeqCst);
        if let Some(fleet) = &fleet
            && !fleet.wait_rv(marker_rv, self.deadline.saturating_sub(marker_ack.elapsed())).await
        {
            eprintln!("restart: {kind:?}: not every informer had the last write within the deadline");
        }
        // configmaps LISTs and WATCHes at kube-apiserver over the steps: a
        // restarted process counts from zero.
        let apiserver_lists_watches = match api0 {
            Some((pid0, m0)) => {
                let m1 = self.api.apiserver_metrics().await?;
                let m0 = if self.api.apiserver_pid()? == pid0 { m0 } else { String::new() };
                let verb = |text: &str, verb: &str| {
                    prom::sum(text, "apiserver_request_total", &[("resource", "configmaps"), ("verb", verb)])
                };
                Some((verb(&m1, "LIST") - verb(&m0, "LIST"), verb(&m1, "WATCH") - verb(&m0, "WATCH")))
            }
            None => None,
        };
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
        let mut logs = Vec::new();
        for t in tasks {
            let (at, log) = t.await?;
            if let Some(at) = at {
                from_restart.push(at.saturating_duration_since(t_restart));
                from_marker.push(at.saturating_duration_since(marker_ack));
            }
            logs.extend(log);
        }
        // The writer stopped before the last marker: every event up to it is owed.
        let oracle = match &self.upgrade {
            Some(plan) => Some(Oracle::read_until(&plan.oracle, marker_rv).await?),
            None => None,
        };
        let verdict = oracle.as_ref().map(|oracle| Verdict::check(oracle, &logs, marker_rv));
        let fleet = match (fleet, &oracle) {
            (Some(fleet), Some(oracle)) => {
                let summary = fleet.finish().await?;
                let verdict = Verdict::check(oracle, &summary.logs(), marker_rv);
                let from_marker = summary.reached(marker_rv, marker_wall);
                Some(FleetResult { summary, verdict, from_marker })
            }
            _ => None,
        };
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
            steps,
            writes,
            verdict,
            apiserver_lists_watches,
            fleet,
        })
    }
}

fn report(b: &Bench, sides: &[SideResult]) {
    println!();
    println!(
        "### {}: {} watchers, {}",
        match (&b.upgrade, b.failover) {
            (Some(_), _) if b.rollout.is_some() =>
                "A tier rollout, one replica at a time (kube-apiserver restarted on the direct side)",
            (Some(_), _) => "A control-plane upgrade, one API server at a time",
            (None, true) => "One of three API servers gone",
            (None, false) => "Restart storm",
        },
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
    let command = match (&b.upgrade, b.failover) {
        (Some(_), _) if b.rollout.is_some() => "rollout's start (all its steps, then the last write)",
        (Some(_), _) => "upgrade's start (all its steps, then the last write)",
        (None, true) => "kill (or freeze) command",
        (None, false) => "restart command until ready",
    };
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
    if let Some(plan) = &b.upgrade {
        for step in 0..=plan.steps {
            t.row(&format!("step {step}: command s; current / all; every watcher current from the step's start, s (from the marker: p50 / p99 / max, ms)"), |s| {
                s.step(step).map_or("–".into(), |r| {
                    let all = r.from_step.last().filter(|_| r.current == b.n).map_or("not all".into(), |d| fmt1(d.as_secs_f64()));
                    format!("{:.1}; {} / {}; {all} ({})", r.cmd_secs, thousands(r.current), thousands(b.n), p50_p99_max(&r.from_marker))
                })
            });
            if b.rollout.is_some() {
                t.row(&format!("step {step}: streams broken / LISTs / 410 Gone / refused"), |s| {
                    s.step(step).map_or("–".into(), |r| {
                        let [broken, lists, gone, refused] = r.broken_lists_gone_refused;
                        format!("{broken} / {lists} / {gone} / {refused}")
                    })
                });
                continue;
            }
            t.row(
                &format!("step {step}: streams broken / LISTs / 410 Gone / refused; served minor; form check"),
                |s| {
                    s.step(step).map_or("–".into(), |r| {
                        let [broken, lists, gone, refused] = r.broken_lists_gone_refused;
                        let text = |k: &str| r.check[k].as_str().map_or_else(|| r.check[k].to_string(), str::to_owned);
                        format!("{broken} / {lists} / {gone} / {refused}; {}; {}", text("served_minor"), text("form"))
                    })
                },
            );
        }
        let writes_to = if b.rollout.is_some() { "straight at kube-apiserver" } else { "through the load balancer" };
        t.row(&format!("writes done / failed (creates, updates, deletes {writes_to})"), |s| {
            s.writes.map_or("–".into(), |(ok, failed)| format!("{ok} / {failed}"))
        });
        t.row("**events vs etcd's watch: owed / lost (of those in a relist) / out of order / duplicated / wrong / unknown**", |s| {
            s.verdict.as_ref().map_or("–".into(), verdict_cell)
        });
    }
    if b.rollout.is_some() {
        t.row("**configmaps LISTs / WATCHes that reached kube-apiserver over the steps**", |s| {
            s.apiserver_lists_watches.map_or("–".into(), |(l, w)| format!("**{l} / {w}**"))
        });
        t.row("**informers after sync: LISTs / watch-lists / WATCH requests / 410s** (tombstone deletes)", |s| {
            s.fleet.as_ref().map_or("–".into(), |f| {
                let [lists, watch_lists, watches, gone, tombstones] = f.summary.totals();
                format!("**{lists} / {watch_lists} / {watches} / {gone}** ({tombstones})")
            })
        });
        t.row("**informers' events vs etcd's: owed / lost / out of order / duplicated / wrong / unknown**", |s| {
            // An informer's relist is not located in resourceVersions (its
            // handler sees the relist's state, not the list's version): no "in a relist" figure.
            s.fleet.as_ref().map_or("–".into(), |f| {
                let v = &f.verdict;
                format!(
                    "**{} / {} / {} / {} / {} / {}**",
                    v.owed, v.lost, v.out_of_order, v.duplicated, v.wrong, v.unknown
                )
            })
        });
        t.row("informers that had the last write / all; from its ack: p50 / p99 / max, ms", |s| {
            s.fleet.as_ref().map_or("–".into(), |f| {
                format!("{} / {}; {}", f.from_marker.len(), f.summary.informers.len(), p50_p99_max(&f.from_marker))
            })
        });
    }
    t.print();
}

/// owed / lost (of those in a relist) / out of order / duplicated / wrong / unknown, in bold.
fn verdict_cell(v: &Verdict) -> String {
    format!(
        "**{} / {} ({}) / {} / {} / {} / {}**",
        v.owed, v.lost, v.lost_in_relist, v.out_of_order, v.duplicated, v.wrong, v.unknown
    )
}

fn json(b: &Bench, sides: &[SideResult]) -> serde_json::Value {
    json!({
        "scenario": match (&b.upgrade, b.failover) {
            (Some(_), _) if b.rollout.is_some() => "rollout",
            (Some(_), _) => "upgrade",
            (None, true) => "failover",
            (None, false) => "restart",
        },
        // bench-rollout.sh's side (backfill, no-backfill, apiserver), when set.
        "variant": std::env::var("ROLLOUT_SIDE").ok(),
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
            "steps": s.steps.iter().map(|r| json!({
                "step": r.step,
                "cmd_secs": r.cmd_secs,
                "current": r.current,
                "all_current_from_step_s": r.from_step.last().filter(|_| r.current == b.n).map(|d| d.as_secs_f64()),
                "from_step_ms": latency_json(&r.from_step),
                "from_marker_ms": latency_json(&r.from_marker),
                "streams_broken": r.broken_lists_gone_refused[0],
                "list_requests": r.broken_lists_gone_refused[1],
                "gone": r.broken_lists_gone_refused[2],
                "refused": r.broken_lists_gone_refused[3],
                "check": r.check,
            })).collect::<Vec<_>>(),
            "writes_ok_failed": s.writes.map(|(ok, failed)| [ok, failed]),
            "events_vs_etcd": s.verdict.as_ref().map(Verdict::json),
            "apiserver_configmap_lists_watches": s.apiserver_lists_watches.map(|(l, w)| [l, w]),
            "informers": s.fleet.as_ref().map(|f| {
                let mut j = f.summary.json();
                j["events_vs_etcd"] = f.verdict.json();
                j["had_last_write"] = f.from_marker.len().into();
                j["from_marker_ms"] = latency_json(&f.from_marker);
                j
            }),
        })).collect::<Vec<_>>(),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::lines::self_check();
    upgrade::self_check();
    informers::self_check();
    let api = Arc::new(Api::from_env()?);
    let (api_adv, _) = api.advertised_streams().await?;
    let kind: String = env_or("RESTART_KIND", "restart".to_owned())?;
    let upgrade = match kind.as_str() {
        "upgrade" | "rollout" => Some(UpgradePlan {
            steps: env_or("UPGRADE_STEPS", 3)?,
            writes_per_sec: env_or("UPGRADE_WRITES_PER_S", 4.0)?,
            oracle: common::env::env("UPGRADE_ORACLE")?,
        }),
        "restart" | "failover" => None,
        other => bail!("RESTART_KIND is restart, failover, upgrade or rollout, not {other}"),
    };
    let rollout = match kind.as_str() {
        "rollout" => Some(RolloutPlan {
            informers_bin: std::env::var("ROLLOUT_INFORMERS").ok().filter(|b| !b.is_empty()),
            informers: env_or("ROLLOUT_INFORMERS_K", 20)?,
            out: env_or("ROLLOUT_INFORMERS_OUT", "informers.json".to_owned())?,
        }),
        _ => None,
    };
    let bench = Bench {
        n: env_or("RESTART_N", 1000)?,
        shape: env_or("RESTART_SHAPE", Shape::H2)?,
        per_conn: api_adv.map_or(100, |v| (v as usize).min(250)),
        deadline: Duration::from_secs(env_or("RESTART_DEADLINE_S", 120)?),
        restart_cmd: env_or("RESTART_CMD", "bash integration/scripts/cluster-up.sh --restart-apiserver".to_owned())?,
        failover: matches!(kind.as_str(), "failover" | "upgrade" | "rollout"),
        upgrade,
        rollout,
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
        // Room for an upgrade's markers (one per step and the last) between sides.
        let seq_base = 1_000_000 + (std::process::id() as u64 % 1000) * 1000 + i as u64 * 100;
        let r = bench.run_side(kind, seq_base).await.with_context(|| format!("{kind:?} side"))?;
        results.push(r);
        // The API server settles (and watchmux re-syncs) before the next side.
        bench.api.wait_apiserver(Duration::from_secs(60)).await;
    }
    report(&bench, &results);
    common::env::write_results(&json(&bench, &results))?;
    Ok(())
}
