//! One side of the comparison (straight at kube-apiserver, or through
//! watchmux): CPU baselines of every cell's writes without watchers, N
//! watches opened and left idle (memory), then every cell's writes with the
//! watchers, each delivery timed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use http::StatusCode;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::common::client::{Sender, Shape, SideKind};
use crate::common::lines::End;
use crate::common::procfs::{Sample, rss_bytes};
use crate::common::prom;
use crate::watcher::{Outcome, Shared, WatchSpec, run_watcher};
use crate::writer::{Writes, write_phase};
use crate::{Bench, CellPlan};

/// Quiet time after the last write inside the fixed CPU window.
const WINDOW_TAIL: Duration = Duration::from_secs(2);
/// How long watchers stay idle, all open, before memory is read.
const IDLE: Duration = Duration::from_secs(5);
/// Bound on opening all the watches of one side.
const OPEN_DEADLINE: Duration = Duration::from_secs(120);
/// Bound on waiting for deliveries after the last write of a cell.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(20);
/// Watch requests (and, for HTTP/1.1, connections) being opened at once.
const OPEN_CONCURRENCY: usize = 256;
/// Pause between sides, so that the closing of one side's watches is not
/// measured as the next side's baseline.
const SETTLE: Duration = Duration::from_secs(4);

impl CellPlan {
    /// The fixed length of a CPU window: the writes, then a quiet tail.
    pub fn window(&self) -> Duration {
        Duration::from_secs_f64(self.writes as f64 / self.rate as f64) + WINDOW_TAIL
    }
}

pub struct CellResult {
    pub writes: Writes,
    pub baseline: Sample,
    pub baseline_secs: f64,
    pub phase: Sample,
    pub phase_secs: f64,
    pub received: usize,
    pub expected: usize,
    pub watchers_missing_some: usize,
    /// Write issued → receipt, and write acknowledged → receipt (0 when the event came first).
    pub lat_issue: Vec<Duration>,
    pub lat_ack: Vec<Duration>,
    /// Through watchmux: each receipt minus the direct reference watcher's receipt of the same write.
    pub beyond_reference: Option<Vec<Duration>>,
    /// Through watchmux: Δ watchmux_cache_encodes_total, by variant label set.
    pub encodes: Option<Vec<(String, f64)>>,
    pub wm_deliveries: Option<f64>,
    pub wm_terminated: Option<f64>,
    /// Through watchmux: its own fan-out time over the cell, from
    /// `watchmux_fanout_duration_seconds`, per stage (`queued`, `handed`).
    pub fanout: Vec<FanoutStage>,
}

/// One stage of watchmux's fan-out histogram over one cell.
pub struct FanoutStage {
    pub stage: &'static str,
    /// Events observed in the cell.
    pub events: f64,
    /// p50 and p99, seconds (interpolated inside the histogram's buckets).
    pub p50: f64,
    pub p99: f64,
}

/// The fan-out stages watchmux reports, in order.
const FANOUT_STAGES: [&str; 2] = ["queued", "handed"];

impl CellResult {
    pub fn lost(&self) -> usize {
        self.expected.saturating_sub(self.received)
    }
}

pub struct SideResult {
    pub kind: SideKind,
    pub connections: usize,
    pub per_conn: usize,
    pub opened: usize,
    pub failed: usize,
    pub failure_samples: Vec<String>,
    pub open_secs: f64,
    pub rss_before: u64,
    pub rss_after: u64,
    pub api_rss_before: u64,
    pub api_rss_after: u64,
    pub api_heap_before: f64,
    pub api_heap_after: f64,
    /// kube-apiserver's configmaps WATCHes: before the watchers, with them open.
    pub api_watches: (f64, f64),
    pub duplicates: u64,
    pub ended_early: usize,
    /// Watches the server closed that their watcher resumed.
    pub resumed: u64,
    pub watchers_resumed: usize,
    pub stream_errors: Vec<String>,
    pub error_events: u64,
    pub error_line_sample: Option<String>,
    pub cells: Vec<CellResult>,
}

impl SideResult {
    pub fn rss_per_watcher_kib(&self) -> Option<f64> {
        (self.opened > 0).then(|| (self.rss_after as f64 - self.rss_before as f64) / self.opened as f64 / 1024.0)
    }
}

fn all_watchers_path(ns: &str) -> Arc<str> {
    format!("/api/v1/namespaces/{ns}/configmaps?watch=1").into()
}

impl Bench {
    pub async fn run_side(&self, kind: SideKind) -> anyhow::Result<SideResult> {
        let cfg = &self.cfg;
        let api = &self.api;
        let api_pid = api.apiserver_pid()?;
        let (target, server_pid, per_conn) = match kind {
            SideKind::Direct => (api.api_target.clone(), api_pid, self.api_streams),
            SideKind::Watchmux => (api.proxy_target()?, cfg.proxy_pid, cfg.proxy_streams),
        };
        let per_conn = if cfg.shape == Shape::H1 { 1 } else { per_conn };
        let connections = cfg.n.div_ceil(per_conn);
        tokio::time::sleep(SETTLE).await;

        // CPU baselines: each cell's writes, no watchers, over its fixed window.
        let mut baselines = Vec::new();
        for cell in &self.cells {
            let b0 = Sample::take(server_pid, api_pid)?;
            let t0 = Instant::now();
            let _ = write_phase(api, &cell.objects, cell.rate, cell.writes, 1_000_000_000).await;
            tokio::time::sleep_until((t0 + cell.window()).into()).await;
            let b1 = Sample::take(server_pid, api_pid)?;
            baselines.push((b0.delta(&b1), t0.elapsed().as_secs_f64()));
        }

        // Before the watchers.
        let api_metrics = api.apiserver_metrics().await?;
        let cm_watch = [("resource", "configmaps"), ("verb", "WATCH")];
        let api_watches_before = prom::sum(&api_metrics, "apiserver_longrunning_requests", &cm_watch);
        let api_heap_before = prom::sum(&api_metrics, "go_memstats_heap_inuse_bytes", &[]);
        let rss_before = rss_bytes(server_pid)?;
        let api_rss_before = rss_bytes(api_pid)?;

        // The common starting point, and the watchers.
        let rv = api.list_rv(&format!("/api/v1/namespaces/{}/configmaps", cfg.ns)).await?;
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        // On an early return too, every watcher of this side stops.
        let _stop_on_drop = stop.clone().drop_guard();
        let max_seq = self.cells.last().map_or(0, |c| c.seq_base + c.writes as u64);
        let spec = WatchSpec {
            target: target.clone(),
            shape: cfg.shape,
            base_path: all_watchers_path(&cfg.ns),
            rv: rv.into(),
            permits: Arc::new(Semaphore::new(OPEN_CONCURRENCY)),
            shared: shared.clone(),
            stop: stop.clone(),
            max_seq,
        };
        let open_start = Instant::now();
        let mut conns: Vec<Sender> = Vec::new();
        if cfg.shape == Shape::H2 {
            for _ in 0..connections {
                conns.push(target.connect(Shape::H2).await.context("HTTP/2 connection")?);
            }
        }
        let mut tasks = Vec::with_capacity(cfg.n);
        for i in 0..cfg.n {
            let conn = conns.get(i / per_conn).cloned();
            tasks.push(tokio::spawn(run_watcher(spec.clone(), conn)));
        }
        drop(conns); // the watchers hold their connections
        let open_deadline = open_start + OPEN_DEADLINE;
        while shared.opened.load(Ordering::Relaxed) + shared.failed.load(Ordering::Relaxed) < cfg.n
            && Instant::now() < open_deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let open_secs = open_start.elapsed().as_secs_f64();
        let opened = shared.opened.load(Ordering::Relaxed);
        eprintln!(
            "fanout: {kind:?} N={} {:?}: {opened} watches open, {} failed, in {open_secs:.1}s",
            cfg.n,
            cfg.shape,
            shared.failed.load(Ordering::Relaxed)
        );

        // Idle, then memory.
        tokio::time::sleep(IDLE).await;
        let rss_after = rss_bytes(server_pid)?;
        let api_rss_after = rss_bytes(api_pid).context("kube-apiserver gone (restarted?)")?;
        let api_metrics = api.apiserver_metrics().await?;
        let api_watches_open = prom::sum(&api_metrics, "apiserver_longrunning_requests", &cm_watch);
        let api_heap_after = prom::sum(&api_metrics, "go_memstats_heap_inuse_bytes", &[]);

        // Through watchmux, a reference: one more watcher straight on the API
        // server (its own HTTP/2 connection, same resourceVersion), opened
        // after the counts above. When an event reaches it is when the API
        // server made it available, so the difference is watchmux's own delay.
        let reference = if kind == SideKind::Watchmux {
            let r_shared = Arc::new(Shared::default());
            let conn = api.api_target.connect(Shape::H2).await.context("reference connection")?;
            let r_spec = WatchSpec {
                target: api.api_target.clone(),
                shape: Shape::H2,
                permits: Arc::new(Semaphore::new(1)),
                shared: r_shared.clone(),
                ..spec.clone()
            };
            let task = tokio::spawn(run_watcher(r_spec, Some(conn)));
            let until = Instant::now() + Duration::from_secs(10);
            while r_shared.opened.load(Ordering::Relaxed) + r_shared.failed.load(Ordering::Relaxed) == 0
                && Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Some(task)
        } else {
            None
        };

        // The cells, with the watchers.
        let mut phases = Vec::new();
        for (cell, &(baseline, baseline_secs)) in self.cells.iter().zip(&baselines) {
            let wm_before = if kind == SideKind::Watchmux { Some(api.watchmux_metrics().await?) } else { None };
            shared.set_cell(cell.seq_base, cell.seq_base + cell.writes as u64);
            let w0 = Sample::take(server_pid, api_pid)?;
            let p0 = Instant::now();
            let writes = write_phase(api, &cell.objects, cell.rate, cell.writes, cell.seq_base).await;
            let expected = (opened * writes.ok()) as u64;
            let deadline = Instant::now() + DELIVERY_DEADLINE;
            while shared.cell_received.load(Ordering::Relaxed) < expected && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep_until((p0 + cell.window()).into()).await;
            let w1 = Sample::take(server_pid, api_pid)?;
            let phase_secs = p0.elapsed().as_secs_f64();
            let wm_after = if kind == SideKind::Watchmux { Some(api.watchmux_metrics().await?) } else { None };
            eprintln!(
                "fanout: {kind:?} N={} R={} size={}: {} writes ({} failed) in {:.1}s, {}/{} deliveries",
                cfg.n,
                cell.rate,
                cell.size,
                writes.issued.len(),
                writes.errors,
                writes.secs,
                shared.cell_received.load(Ordering::Relaxed),
                expected
            );
            phases.push((writes, w0.delta(&w1), phase_secs, baseline, baseline_secs, wm_before, wm_after));
        }
        if api.apiserver_pid()? != api_pid {
            bail!("kube-apiserver was restarted during the measurement");
        }

        // Close everything and collect.
        stop.cancel();
        let reference = match reference {
            Some(task) => Some(task.await?),
            None => None,
        };
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(tasks.len());
        for t in tasks {
            outcomes.push(t.await?);
        }

        let mut failure_samples = Vec::new();
        let mut stream_errors = Vec::new();
        let (mut duplicates, mut error_events, mut ended_early) = (0u64, 0u64, 0);
        let (mut resumed, mut watchers_resumed) = (0u64, 0usize);
        let mut error_line_sample = None;
        for o in &outcomes {
            if o.status != Some(StatusCode::OK) {
                if failure_samples.len() < 3 {
                    failure_samples.push(format!(
                        "status {:?}: {}",
                        o.status.map(|s| s.as_u16()),
                        o.open_error.as_deref().unwrap_or("")
                    ));
                }
                continue;
            }
            duplicates += o.duplicates as u64;
            resumed += o.resumed as u64;
            watchers_resumed += usize::from(o.resumed > 0);
            error_events += o.error_events as u64;
            match &o.end {
                Some(End::Ended) => ended_early += 1,
                Some(End::Error(e)) if stream_errors.len() < 3 => stream_errors.push(e.clone()),
                _ => {}
            }
            if error_line_sample.is_none() {
                error_line_sample = o.first_error_line.clone();
            }
        }

        let mut cells = Vec::new();
        for (cell, (writes, phase, phase_secs, baseline, baseline_secs, wm_before, wm_after)) in
            self.cells.iter().zip(phases)
        {
            let in_cell = |seq: u32| {
                let k = (seq as u64).checked_sub(cell.seq_base + 1)? as usize;
                (k < writes.issued.len()).then_some(k)
            };
            let (mut lat_issue, mut lat_ack) = (Vec::new(), Vec::new());
            let (mut received, mut missing_some) = (0usize, 0usize);
            for o in outcomes.iter().filter(|o| o.status == Some(StatusCode::OK)) {
                let mut mine = 0;
                for &(seq, at) in &o.first_seen {
                    let Some(k) = in_cell(seq) else { continue };
                    let Some(acked) = writes.acked[k] else { continue };
                    mine += 1;
                    lat_issue.push(at.saturating_duration_since(writes.issued[k]));
                    lat_ack.push(at.saturating_duration_since(acked));
                }
                received += mine;
                if mine < writes.ok() {
                    missing_some += 1;
                }
            }
            lat_issue.sort();
            lat_ack.sort();
            let beyond_reference = reference.as_ref().filter(|r| r.status == Some(StatusCode::OK)).map(|r| {
                let mut at: Vec<Option<Instant>> = vec![None; writes.issued.len()];
                for &(seq, t) in &r.first_seen {
                    if let Some(k) = in_cell(seq) {
                        at[k] = Some(t);
                    }
                }
                let mut v: Vec<Duration> = outcomes
                    .iter()
                    .flat_map(|o| o.first_seen.iter())
                    .filter_map(|&(seq, t)| Some(t.saturating_duration_since(at[in_cell(seq)?]?)))
                    .collect();
                v.sort();
                v
            });
            let (encodes, wm_deliveries, wm_terminated) = match (&wm_before, &wm_after) {
                (Some(b), Some(a)) => {
                    let enc = prom::delta(
                        &prom::samples(b, "watchmux_cache_encodes_total"),
                        &prom::samples(a, "watchmux_cache_encodes_total"),
                    );
                    let cm = [("resource", "configmaps")];
                    let d = |name: &str| prom::sum(a, name, &cm) - prom::sum(b, name, &cm);
                    (
                        Some(enc),
                        Some(d("watchmux_watch_cache_deliveries_total")),
                        Some(d("watchmux_terminated_watchers_total")),
                    )
                }
                _ => (None, None, None),
            };
            let fanout = match (&wm_before, &wm_after) {
                (Some(b), Some(a)) => FANOUT_STAGES
                    .iter()
                    .filter_map(|&stage| {
                        let labels = [("stage", stage)];
                        let (events, q) = prom::histogram_delta_quantiles(
                            b,
                            a,
                            "watchmux_fanout_duration_seconds",
                            &labels,
                            &[0.5, 0.99],
                        )?;
                        Some(FanoutStage { stage, events, p50: q[0], p99: q[1] })
                    })
                    .collect(),
                _ => Vec::new(),
            };
            cells.push(CellResult {
                expected: opened * writes.ok(),
                writes,
                baseline,
                baseline_secs,
                phase,
                phase_secs,
                received,
                watchers_missing_some: missing_some,
                lat_issue,
                lat_ack,
                beyond_reference,
                encodes,
                wm_deliveries,
                wm_terminated,
                fanout,
            });
        }

        Ok(SideResult {
            kind,
            connections,
            per_conn,
            opened,
            failed: cfg.n - opened,
            failure_samples,
            open_secs,
            rss_before,
            rss_after,
            api_rss_before,
            api_rss_after,
            api_heap_before,
            api_heap_after,
            api_watches: (api_watches_before, api_watches_open),
            duplicates,
            ended_early,
            resumed,
            watchers_resumed,
            stream_errors,
            error_events,
            error_line_sample,
            cells,
        })
    }
}
