//! One run: the upstream, watchmux started in front of it, the watchers,
//! the phases, and what they came to (Markdown and JSON).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Config;
use crate::common::client::{Shape, Target};
use crate::common::procfs::{ThreadShare, cpu_ticks, self_cpu_ticks, thread_cpu, thread_shares};
use crate::common::prom;
use crate::common::stats::{Table, fmt1, thousands};
use crate::synthetic::pods::Pods;
use crate::synthetic::upstream::{Phase, Replay, serve};
use crate::synthetic::watchmux::{Watchmux, metrics, pods_metric, signal, write_kubeconfig};
use crate::watchers::{Histogram, Receipts, Watcher};

/// The warm-up phase's rate: slow enough for any configuration.
const WARM_UP_RATE: f64 = 10_000.0;
/// How often a phase's progress is read from watchmux's metrics and the watchers.
const POLL: Duration = Duration::from_millis(50);
/// A phase is given up when neither watchmux nor the watchers progressed for this long.
const STALL: Duration = Duration::from_secs(10);
/// Bound on watchmux becoming ready (its cache listed) and on the watches opening.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// What one phase came to.
pub struct PhaseResult {
    pub name: String,
    /// Events a second asked for; `None`: as fast as the connection takes them.
    pub rate: Option<u32>,
    pub events: u64,
    /// From the first event written to the last receipt (or to the stall).
    pub secs: f64,
    pub upstream_rate: Option<f64>,
    pub applied_rate: Option<f64>,
    pub received_rate: Option<f64>,
    pub deliveries_rate: f64,
    pub metric_deliveries_rate: f64,
    pub received_selected: u64,
    pub expected_selected: u64,
    pub received_unselected: u64,
    pub expected_unselected: u64,
    pub lag_selected: [Option<f64>; 3],
    pub lag_unselected: [Option<f64>; 3],
    pub watchmux_cores: f64,
    pub watchmux_cpu_secs: f64,
    /// This process's (the upstream and every watcher) over the same time.
    pub bench_cores: f64,
    /// The time watchmux's threads were runnable but waited for a CPU, over the phase's.
    pub watchmux_waited: f64,
    /// Each of watchmux's threads over the phase, busiest first, with its
    /// time waiting for a CPU (tokio moves tasks between its workers, so a
    /// serial task shows in a profile, not as one busy thread).
    pub watchmux_threads: Vec<ThreadShare>,
    pub slow_watchers: f64,
    pub terminated: f64,
    pub complete: bool,
}

impl PhaseResult {
    /// Events applied per second of watchmux's CPU: what one core would
    /// apply if watchmux had it whole (the machine is shared).
    pub fn applied_per_cpu_second(&self) -> Option<f64> {
        (self.complete && self.watchmux_cpu_secs > 0.0).then(|| self.events as f64 / self.watchmux_cpu_secs)
    }
}

pub struct RunResult {
    pub cfg: Arc<Config>,
    pub object_bytes: usize,
    pub connections: usize,
    pub opened: u64,
    pub failed: u64,
    pub upstream_watches: usize,
    pub upstream_versions: String,
    pub upstream_lists: usize,
    pub unknown_paths: Vec<String>,
    pub totals: Vec<(&'static str, u64)>,
    pub phases: Vec<PhaseResult>,
}

/// The phases: the warm-up, then one per rate.
fn plan(cfg: &Config) -> Vec<(String, Option<u32>, u64)> {
    let mut phases = vec![("warm-up".to_owned(), Some(WARM_UP_RATE as u32), cfg.nodes as u64)];
    for &rate in &cfg.rates {
        let (name, rate, events) = if rate == 0 {
            ("open".to_owned(), None, cfg.max_events)
        } else {
            (format!("{rate}/s"), Some(rate), ((rate as f64 * cfg.seconds) as u64).min(cfg.max_events))
        };
        phases.push((name, rate, events.max(1)));
    }
    phases
}

pub async fn run(cfg: Arc<Config>) -> anyhow::Result<RunResult> {
    let epoch = Instant::now();
    let pods = Arc::new(Pods::new(cfg.pods, cfg.nodes, cfg.object_bytes));
    let plan = plan(&cfg);
    let mut bounds = Vec::new();
    let mut next = 1;
    for (_, _, events) in &plan {
        bounds.push((next, next + events - 1));
        next += events;
    }
    let replay = Replay::new(pods.clone(), next - 1, epoch);
    let upstream = serve(replay.clone()).await?;

    // watchmux, on its cores, in front of the upstream.
    let dir = tempfile::tempdir()?;
    let kubeconfig = write_kubeconfig(dir.path(), upstream)?;
    let mut watchmux =
        Watchmux::spawn(&cfg.watchmux_bin, &cfg.cpus, &kubeconfig, &cfg.listen, &cfg.admin, &[], &cfg.watchmux_log)?;
    watchmux.wait_ready(cfg.pods, START_DEADLINE).await?;
    let (pid, admin, listen) = (watchmux.pid, watchmux.admin, watchmux.listen);
    eprintln!("ingest: watchmux (pid {pid}, cores {}) ready with {} pods", cfg.cpus, cfg.pods);

    // The watchers, all attached before any event.
    let receipts = Receipts::new(bounds.clone(), epoch);
    let stop = CancellationToken::new();
    let target = Target::Proxy { addr: listen, tls: None };
    let watchers = cfg.nodes + cfg.unselected;
    let connections = watchers.div_ceil(cfg.streams_per_connection);
    let mut conns = Vec::new();
    for _ in 0..connections {
        conns.push(target.connect(Shape::H2).await?);
    }
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::channel(watchers);
    let mut tasks = Vec::new();
    for i in 0..watchers {
        let w = Watcher {
            node: (i < cfg.nodes).then_some(i),
            conn: conns[i / cfg.streams_per_connection].clone(),
            target: target.clone(),
            replay: replay.clone(),
            pods: pods.clone(),
            receipts: receipts.clone(),
            stop: stop.clone(),
        };
        tasks.push(tokio::spawn(w.run(opened_tx.clone())));
    }
    drop(opened_tx);
    let mut answered = 0;
    while answered < watchers {
        match tokio::time::timeout_at((Instant::now() + START_DEADLINE).into(), opened_rx.recv()).await {
            Ok(Some(_)) => answered += 1,
            Ok(None) => break,
            Err(_) => bail!("{answered} of {watchers} watches answered in {START_DEADLINE:?}"),
        }
    }
    let totals = &receipts.totals;
    eprintln!(
        "ingest: {} watches open ({} failed) over {connections} connections",
        totals.opened.load(Ordering::Relaxed),
        totals.failed.load(Ordering::Relaxed)
    );

    let mut phases = Vec::new();
    for (i, (name, rate, events)) in plan.iter().enumerate() {
        let (first, last) = bounds[i];
        let perf = match (&cfg.perf, i + 1 == plan.len()) {
            (Some(path), true) => {
                let mut args: Vec<String> = cfg.perf_args.split_whitespace().map(str::to_owned).collect();
                args.extend(["-p".into(), pid.to_string(), "-o".into(), path.clone()]);
                let perf = tokio::process::Command::new("perf")
                    .arg("record")
                    .args(&args)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .context("starting perf record")?;
                // perf attaches to every thread before it counts anything.
                tokio::time::sleep(Duration::from_millis(500)).await;
                Some(perf)
            }
            _ => None,
        };
        let result = phase(&cfg, &replay, &receipts, admin, pid, i, name, *rate, *events, first, last).await?;
        if let Some(mut perf) = perf {
            signal(perf.id().unwrap_or(0), "-INT");
            let _ = tokio::time::timeout(Duration::from_secs(60), perf.wait()).await;
        }
        eprintln!(
            "ingest: {name}: {} events, applied {}/s, delivered {}/s{}",
            thousands(*events as usize),
            result.applied_rate.map_or("–".into(), |r| thousands(r as usize)),
            result.received_rate.map_or("–".into(), |r| thousands(r as usize)),
            if result.complete { "" } else { " (incomplete)" }
        );
        phases.push(result);
    }

    stop.cancel();
    for t in tasks {
        let _ = t.await;
    }
    watchmux.stop().await;

    let totals = &receipts.totals;
    Ok(RunResult {
        object_bytes: pods.object_bytes,
        connections,
        opened: totals.opened.load(Ordering::Relaxed),
        failed: totals.failed.load(Ordering::Relaxed),
        upstream_watches: replay.watches.load(Ordering::Relaxed),
        upstream_versions: format!("{:?}", replay.versions.lock()),
        upstream_lists: replay.lists.load(Ordering::Relaxed),
        unknown_paths: replay.unknown.lock().iter().map(|(p, n)| format!("{p} ×{n}")).collect(),
        totals: vec![
            ("streams ended by watchmux", totals.ended.load(Ordering::Relaxed)),
            ("stream errors", totals.errors.load(Ordering::Relaxed)),
            ("ERROR events", totals.error_events.load(Ordering::Relaxed)),
            ("events for another node", totals.misrouted.load(Ordering::Relaxed)),
            ("events out of order or again", totals.out_of_order.load(Ordering::Relaxed)),
            ("bookmarks received", totals.bookmarks.load(Ordering::Relaxed)),
        ],
        phases,
        cfg,
    })
}

fn lag(h: &Histogram) -> [Option<f64>; 3] {
    [h.quantile_ms(0.5), h.quantile_ms(0.99), h.quantile_ms(1.0)]
}

/// Runs phase `i` and waits until it is applied and delivered (or stalls).
#[allow(clippy::too_many_arguments)]
async fn phase(
    cfg: &Config,
    replay: &Arc<Replay>,
    receipts: &Receipts,
    admin: SocketAddr,
    pid: u32,
    i: usize,
    name: &str,
    rate: Option<u32>,
    events: u64,
    first: u64,
    last: u64,
) -> anyhow::Result<PhaseResult> {
    let r = &receipts.per_phase[i];
    let expected_selected = events;
    let expected_unselected = events * cfg.unselected as u64;
    let before = metrics(admin).await?;
    let applied_before = pods_metric(&before, "watchmux_watch_cache_events_received_total");
    let ticks_before = cpu_ticks(pid)?;
    let bench_ticks_before = self_cpu_ticks();
    let threads_before = thread_cpu(pid);
    let start = Instant::now();
    replay.start(Phase { first, last, rate: rate.map(f64::from), start });

    let (mut applied_at, mut last_progress, mut progress) = (None, Instant::now(), (0.0, 0));
    let mut after;
    let complete = loop {
        tokio::time::sleep(POLL).await;
        after = metrics(admin).await?;
        let applied = pods_metric(&after, "watchmux_watch_cache_events_received_total") - applied_before;
        if applied_at.is_none() && applied >= events as f64 {
            applied_at = Some(Instant::now());
        }
        let received = r.received_selected.load(Ordering::Relaxed) + r.received_unselected.load(Ordering::Relaxed);
        if applied_at.is_some() && received >= expected_selected + expected_unselected {
            break true;
        }
        if (applied, received) != progress {
            (progress, last_progress) = ((applied, received), Instant::now());
        } else if last_progress.elapsed() > STALL {
            break false;
        }
    };
    let cpu_secs = (cpu_ticks(pid)? - ticks_before) as f64 / cfg.clk_tck;
    let bench_cpu_secs = (self_cpu_ticks() - bench_ticks_before) as f64 / cfg.clk_tck;
    let wall = start.elapsed().as_secs_f64();
    let watchmux_threads = thread_shares(&threads_before, &thread_cpu(pid), wall, cfg.clk_tck);

    let per_sec = |n: f64, until: Option<Instant>| {
        let secs = until?.saturating_duration_since(start).as_secs_f64();
        (secs > 0.0).then(|| n / secs)
    };
    let at = |nanos: &std::sync::atomic::AtomicU64| match nanos.load(Ordering::Relaxed) {
        0 => None,
        nanos => Some(receipts.epoch + Duration::from_nanos(nanos)),
    };
    let kubelets_last = at(&r.last_receipt_selected);
    let last_receipt = kubelets_last.max(at(&r.last_receipt_unselected));
    let (received_selected, received_unselected) =
        (r.received_selected.load(Ordering::Relaxed), r.received_unselected.load(Ordering::Relaxed));
    let d = |name: &str| pods_metric(&after, name) - pods_metric(&before, name);
    let span = last_receipt.map_or(wall, |t| t.saturating_duration_since(start).as_secs_f64());
    let upstream_rate = match (replay.written_at(first), replay.written_at(last)) {
        (Some(a), Some(b)) if b > a => Some((last - first) as f64 / (b - a).as_secs_f64()),
        _ => None,
    };
    Ok(PhaseResult {
        name: name.to_owned(),
        rate,
        events,
        secs: span,
        upstream_rate,
        applied_rate: per_sec(events as f64, applied_at),
        received_rate: per_sec(received_selected as f64, kubelets_last),
        deliveries_rate: (received_selected + received_unselected) as f64 / span,
        metric_deliveries_rate: d("watchmux_watch_cache_deliveries_total") / span,
        received_selected,
        expected_selected,
        received_unselected,
        expected_unselected,
        lag_selected: lag(&r.selected),
        lag_unselected: lag(&r.unselected),
        watchmux_cores: cpu_secs / wall,
        watchmux_cpu_secs: cpu_secs,
        bench_cores: bench_cpu_secs / wall,
        watchmux_waited: watchmux_threads.iter().map(|t| t.waited_share).sum(),
        watchmux_threads,
        slow_watchers: prom::sum(&after, "watchmux_slow_watchers_total", &[("resource", "pods")])
            - prom::sum(&before, "watchmux_slow_watchers_total", &[("resource", "pods")]),
        terminated: d("watchmux_terminated_watchers_total"),
        complete,
    })
}

fn rate(r: Option<f64>) -> String {
    r.map_or("–".into(), |r| thousands(r.round() as usize))
}

fn ms3(l: &[Option<f64>; 3]) -> String {
    let f = |v: Option<f64>| v.map_or("–".into(), |v| if v < 10.0 { format!("{v:.2}") } else { fmt1(v) });
    format!("{} / {} / {}", f(l[0]), f(l[1]), f(l[2]))
}

pub fn markdown(r: &RunResult) {
    let cfg = &r.cfg;
    println!(
        "### Ingest: watchmux on cores {} ({} pods of {} B over {} nodes; {} kubelet watchers + {} unselected, {} watches open, {} failed, over {} h2c connections)\n",
        cfg.cpus,
        thousands(cfg.pods),
        r.object_bytes,
        thousands(cfg.nodes),
        thousands(cfg.nodes),
        cfg.unselected,
        r.opened,
        r.failed,
        r.connections
    );
    let mut t = Table::new(&[
        "phase",
        "events",
        "upstream wrote /s",
        "watchmux applied /s",
        "kubelets received /s",
        "deliveries /s (watchers; watchmux)",
        "lag kubelets p50 / p99 / max ms",
        "lag unselected p50 / p99 / max ms",
        "CPU watchmux; bench (cores)",
        "watchmux waited for a CPU",
        "applied per watchmux CPU-second",
        "received (kubelets; unselected)",
    ]);
    for p in &r.phases {
        t.row(vec![
            p.name.clone(),
            thousands(p.events as usize),
            rate(p.upstream_rate),
            rate(p.applied_rate),
            rate(p.received_rate),
            format!("{}; {}", rate(Some(p.deliveries_rate)), rate(Some(p.metric_deliveries_rate))),
            ms3(&p.lag_selected),
            ms3(&p.lag_unselected),
            format!("{:.2}; {:.2}", p.watchmux_cores, p.bench_cores),
            format!("{:.0} %", p.watchmux_waited * 100.0),
            rate(p.applied_per_cpu_second()),
            format!(
                "{}{}; {}{}",
                p.received_selected,
                if p.received_selected == p.expected_selected { "" } else { " (short)" },
                p.received_unselected,
                if p.received_unselected == p.expected_unselected { "" } else { " (short)" },
            ),
        ]);
    }
    t.print();
    println!(
        "Upstream: {} pod WATCH(es) {}, {} LIST(s){}. Watchers: {}. Slow watchers moved to the ring: {}; watchers terminated: {}.",
        r.upstream_watches,
        r.upstream_versions,
        r.upstream_lists,
        if r.unknown_paths.is_empty() {
            String::new()
        } else {
            format!("; answered 404: {}", r.unknown_paths.join(", "))
        },
        r.totals.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "),
        r.phases.iter().map(|p| p.slow_watchers).sum::<f64>(),
        r.phases.iter().map(|p| p.terminated).sum::<f64>(),
    );
    println!();
}

pub fn json(r: &RunResult) -> serde_json::Value {
    let cfg = &r.cfg;
    let lag = |l: &[Option<f64>; 3]| json!({"p50": l[0], "p99": l[1], "max": l[2]});
    json!({
        "cpus": cfg.cpus,
        "pods": cfg.pods,
        "nodes": cfg.nodes,
        "object_bytes": r.object_bytes,
        "kubelet_watchers": cfg.nodes,
        "unselected_watchers": cfg.unselected,
        "opened": r.opened,
        "failed": r.failed,
        "connections": r.connections,
        "upstream_watches": r.upstream_watches,
        "upstream_versions": r.upstream_versions,
        "unknown_paths": r.unknown_paths,
        "totals": r.totals.iter().map(|(k, v)| json!({"what": k, "count": v})).collect::<Vec<_>>(),
        "phases": r.phases.iter().map(|p| json!({
            "name": p.name,
            "rate": p.rate,
            "events": p.events,
            "secs": p.secs,
            "upstream_rate": p.upstream_rate,
            "applied_rate": p.applied_rate,
            "kubelets_received_rate": p.received_rate,
            "deliveries_rate": p.deliveries_rate,
            "watchmux_deliveries_rate": p.metric_deliveries_rate,
            "received_kubelets": p.received_selected,
            "expected_kubelets": p.expected_selected,
            "received_unselected": p.received_unselected,
            "expected_unselected": p.expected_unselected,
            "lag_kubelets_ms": lag(&p.lag_selected),
            "lag_unselected_ms": lag(&p.lag_unselected),
            "watchmux_cores": p.watchmux_cores,
            "watchmux_cpu_secs": p.watchmux_cpu_secs,
            "bench_cores": p.bench_cores,
            "watchmux_waited": p.watchmux_waited,
            "watchmux_threads": p.watchmux_threads.iter().map(|t| json!({
                "tid": t.tid, "name": t.name, "core_share": t.core_share, "waited_share": t.waited_share,
            })).collect::<Vec<_>>(),
            "applied_per_watchmux_cpu_second": p.applied_per_cpu_second(),
            "slow_watchers": p.slow_watchers,
            "terminated": p.terminated,
            "complete": p.complete,
        })).collect::<Vec<_>>(),
    })
}
