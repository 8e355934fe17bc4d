//! One run: the upstream, watchmux started three times in front of it (cold;
//! cold with a persisted store; from that store), the measurements of
//! `probes` on the first, and what they came to (Markdown and JSON).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::Config;
use crate::common::client::{Shape, Target};
use crate::common::procfs::{cpu_ns, rss_bytes};
use crate::common::prom;
use crate::common::stats::{Table, fmt1, fmt2, mib, percentile, thousands};
use crate::probes::{
    ListRead, PathOf, Until, count_items, floor_server, get, hwm_bytes, list, request_series, settle, timed,
};
use crate::synthetic::pods::{Pods, RV_BASE, node_name};
use crate::synthetic::upstream::{Replay, serve};
use crate::synthetic::watchmux::{Watchmux, metrics, write_kubeconfig};

/// Bound on a start (a million objects listed or loaded) and on the persisted store's first commit.
const START_DEADLINE: Duration = Duration::from_secs(600);
/// Bound on the RSS settling after the sync.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
/// jemalloc hands freed pages back over about ten seconds (its decay): RSS is read no sooner after the sync.
const SETTLE_AFTER_SYNC: Duration = Duration::from_secs(12);
/// How often the first LIST is tried while watchmux starts from its store.
const FIRST_LIST_POLL: Duration = Duration::from_millis(20);
/// Requests sent before each latency series, not counted (connection and caches warm).
const WARM_UP: usize = 50;
/// How long watchmux's idle CPU is read before the request series.
const IDLE_SAMPLE: Duration = Duration::from_secs(2);

/// One start of watchmux.
pub struct Start {
    pub name: &'static str,
    pub readyz: f64,
    pub synced: f64,
    /// The first node-scoped LIST answered 200 with the node's pods (the from-store start).
    pub first_list: Option<f64>,
    /// The persisted store's whole commit (the cold start with persistence).
    pub committed: Option<f64>,
    pub rss_settled: u64,
    /// VmHWM once synced: the peak of the start.
    pub rss_peak: u64,
    /// Pods the upstream listed to this watchmux.
    pub upstream_items: usize,
    /// `watchmux_persist_load_seconds` (the from-store start).
    pub load_seconds: Option<f64>,
    /// `watchmux_upstream_relists_total` of the Pods cache by cause, at the stop.
    pub relists: Vec<String>,
    pub stop_secs: f64,
}

/// The Pods cache's relists so far, by cause (`cause ×n`).
async fn relists(wm: &Watchmux) -> Vec<String> {
    let text = metrics(wm.admin).await.unwrap_or_default();
    prom::samples(&text, "watchmux_upstream_relists_total")
        .into_iter()
        .filter(|(labels, n)| prom::label(labels, "resource") == Some("pods") && *n > 0.0)
        .map(|(labels, n)| format!("{} ×{n}", prom::label(&labels, "cause").unwrap_or("?")))
        .collect()
}

pub struct Latency {
    pub name: &'static str,
    pub path: String,
    pub until: &'static str,
    pub times: Vec<Duration>,
    pub failed: usize,
    pub reconnects: usize,
    /// watchmux's CPU (every thread, user and kernel) over the series,
    /// per request; none for the floors.
    pub server_cpu_us: Option<f64>,
}

impl Latency {
    fn us(&self, p: f64) -> f64 {
        percentile(&self.times, p).map_or(f64::NAN, |d| d.as_secs_f64() * 1e6)
    }
}

pub struct RunResult {
    pub cfg: Arc<Config>,
    /// watchmux's CPU while nothing is asked of it, in cores.
    pub idle_cpu_share: f64,
    /// RSS as the cache synced, before it settled.
    pub rss_synced: u64,
    pub object_bytes: usize,
    pub json_bytes: usize,
    pub per_node: usize,
    pub rss_settled: u64,
    pub settle_secs: f64,
    pub lists: Vec<(&'static str, String, Option<f64>, ListRead)>,
    pub latencies: Vec<Latency>,
    pub starts: Vec<Start>,
    pub persisted_bytes: Option<u64>,
    pub unknown_paths: Vec<String>,
}

fn node_selector(i: usize, nodes: usize) -> String {
    format!("fieldSelector=spec.nodeName%3D{}", node_name(i % nodes))
}

fn dir_bytes(path: &std::path::Path) -> u64 {
    std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| e.metadata().map_or(0, |m| if m.is_dir() { dir_bytes(&e.path()) } else { m.len() }))
            .sum()
    })
}

pub async fn run(cfg: Arc<Config>) -> anyhow::Result<RunResult> {
    let made = Instant::now();
    let pods = Arc::new(Pods::without_events(cfg.pods, cfg.nodes, cfg.object_bytes, cfg.labels));
    let json_bytes = pods.json_bytes();
    eprintln!(
        "million: {} pods, {} bytes of JSON ({} MiB), made in {:.1} s",
        thousands(cfg.pods),
        thousands(json_bytes),
        mib(json_bytes as f64),
        made.elapsed().as_secs_f64()
    );
    let replay = Replay::new(pods.clone(), 0, Instant::now());
    let upstream = serve(replay.clone()).await?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = write_kubeconfig(dir.path(), upstream)?;
    let target = Target::Proxy { addr: cfg.listen.parse()?, tls: None };
    let spawn = |name: &str, extra: &[String]| {
        Watchmux::spawn(
            &cfg.watchmux_bin,
            &cfg.cpus,
            &kubeconfig,
            &cfg.listen,
            &cfg.admin,
            extra,
            &format!("{}/watchmux-{name}.log", cfg.logs),
        )
    };
    let listed = || replay.listed_items.load(Ordering::Relaxed);
    let mut starts = Vec::new();

    // The cold start, then memory, latency and the LISTs.
    let before = listed();
    let mut wm = spawn("cold", &[])?;
    let ready = wm.wait_ready(cfg.pods, START_DEADLINE).await?;
    let rss_peak = hwm_bytes(wm.pid)?;
    let rss_synced = rss_bytes(wm.pid)?;
    tokio::time::sleep(SETTLE_AFTER_SYNC).await;
    let (rss_settled, settled_in) = settle(wm.pid, SETTLE_LIMIT).await?;
    let settled_in = settled_in + SETTLE_AFTER_SYNC;
    eprintln!(
        "million: cold start: ready in {:.1} s, every pod in {:.1} s; RSS {} MiB ({:.2} x the JSON) after {:.1} s",
        ready.readyz.as_secs_f64(),
        ready.synced.as_secs_f64(),
        mib(rss_settled as f64),
        rss_settled as f64 / json_bytes as f64,
        settled_in.as_secs_f64()
    );
    let cold_items = listed() - before;

    let sender = target.connect(Shape::H2).await?;
    let (status, body) =
        get(&target, &sender, &format!("/api/v1/pods?{}&resourceVersion=0", node_selector(1, cfg.nodes))).await?;
    anyhow::ensure!(status == http::StatusCode::OK, "a node's LIST: {status}");
    let per_node = count_items(&body)?;
    drop(sender);
    let floor_target = Target::Proxy { addr: floor_server(None).await?, tls: None };
    let pinned_floor_target = Target::Proxy { addr: floor_server(Some(&cfg.cpus)).await?, tls: None };
    let nodes = cfg.nodes;
    let mut series: Vec<(&'static str, Option<&Target>, Until, PathOf)> = vec![
        (
            "loopback floor: a trivial hyper server in the bench (the client's core)",
            Some(&floor_target),
            Until::LastByte,
            Box::new(|_| "/".to_owned()),
        ),
        (
            "loopback floor: a trivial hyper server on watchmux's core",
            Some(&pinned_floor_target),
            Until::LastByte,
            Box::new(|_| "/".to_owned()),
        ),
    ];
    let requests = request_series(move |i| node_selector(i, nodes), RV_BASE.to_string());
    series.extend(requests.into_iter().map(|(name, until, path)| (name, None, until, path)));
    let mut latencies = Vec::new();
    let phase = |name: &str| cfg.phases.iter().any(|p| p == name);
    // What watchmux spends with no request at all, counted in every
    // series' CPU a request.
    let idle_from = (cpu_ns(wm.pid)?, Instant::now());
    tokio::time::sleep(IDLE_SAMPLE).await;
    let idle_cpu_share = (cpu_ns(wm.pid)? - idle_from.0) as f64 / idle_from.1.elapsed().as_nanos() as f64;
    eprintln!("million: watchmux idle: {:.2} % of a core", idle_cpu_share * 100.0);
    for (name, floor, until, path) in series.into_iter().filter(|_| phase("latency")) {
        let t = floor.unwrap_or(&target);
        timed(t, WARM_UP, until, &path).await?;
        let cpu_before = cpu_ns(wm.pid)?;
        let timed = timed(t, cfg.requests, until, &path).await?;
        let server_cpu_us = floor
            .is_none()
            .then(|| (cpu_ns(wm.pid).unwrap_or(cpu_before) - cpu_before) as f64 / 1e3 / cfg.requests as f64);
        let mut kinds = vec![("headers", timed.headers)];
        if until == Until::LastByte {
            kinds.push(("last byte", timed.last_byte));
        }
        for (until, times) in kinds {
            let l = Latency {
                name,
                path: path(1),
                until,
                times,
                failed: timed.not_ok,
                reconnects: timed.reconnects,
                server_cpu_us,
            };
            eprintln!(
                "million: {name}, to the {until}: p50 {:.1} µs, p99 {:.1} µs, {} not 200, {} reconnects; watchmux CPU {} µs a request",
                l.us(0.5),
                l.us(0.99),
                l.failed,
                l.reconnects,
                server_cpu_us.map_or("–".into(), |us| format!("{us:.1}")),
            );
            latencies.push(l);
        }
    }

    let mut lists = Vec::new();
    let slow = cfg.slow_mibps * 1024.0 * 1024.0;
    for (name, path, pace) in [
        ("full LIST (limit absent), read as fast as the bench reads", "/api/v1/pods", None),
        ("full LIST (limit absent), read at the slow pace", "/api/v1/pods", Some(slow)),
        ("paginated LIST, limit=500, as a client-go pager", "/api/v1/pods?limit=500", None),
    ]
    .into_iter()
    .filter(|_| phase("lists"))
    {
        let read = list(&target, path, pace, wm.pid, SETTLE_AFTER_SYNC).await?;
        eprintln!(
            "million: {name}: {} MiB in {:.2} s (headers {:.1} ms), RSS +{} MiB ({:.2} %)",
            mib(read.bytes as f64),
            read.last_byte.as_secs_f64(),
            read.headers.as_secs_f64() * 1e3,
            mib(read.growth() as f64),
            read.growth_share() * 100.0
        );
        lists.push((name, path.to_owned(), pace, read));
    }
    let cold_relists = relists(&wm).await;
    let stop = wm.stop().await;
    starts.push(Start {
        name: "cold (the full list from the upstream)",
        readyz: ready.readyz.as_secs_f64(),
        synced: ready.synced.as_secs_f64(),
        first_list: None,
        committed: None,
        rss_settled,
        rss_peak,
        upstream_items: cold_items,
        load_seconds: None,
        relists: cold_relists,
        stop_secs: stop.as_secs_f64(),
    });

    // The persisted store: written on a cold start, then loaded by the next.
    let mut persisted_bytes = None;
    if phase("persist") {
        let store = std::path::PathBuf::from(format!("{}/persist", cfg.logs));
        let _ = std::fs::remove_dir_all(&store);
        let flags =
            ["--persist-dir".to_owned(), store.display().to_string(), "--persist-resources".into(), "pods".into()];
        for (name, tag) in [
            ("cold with --persist-dir (the full list; the store written)", "persist-cold"),
            ("from the persisted store, the upstream up", "persist-warm"),
        ] {
            let before = listed();
            let mut wm = spawn(tag, &flags)?;
            let started = wm.started;
            let first_list = async {
                let path = format!("/api/v1/pods?{}&resourceVersion=0", node_selector(1, cfg.nodes));
                while started.elapsed() < START_DEADLINE {
                    if let Ok(sender) = target.connect(Shape::H2).await
                        && let Ok((http::StatusCode::OK, body)) = get(&target, &sender, &path).await
                        && count_items(&body).ok() == Some(per_node)
                    {
                        return Some(started.elapsed().as_secs_f64());
                    }
                    tokio::time::sleep(FIRST_LIST_POLL).await;
                }
                None
            };
            let (ready, first_list) = tokio::join!(wm.wait_ready(cfg.pods, START_DEADLINE), first_list);
            let ready = ready?;
            let rss_peak = hwm_bytes(wm.pid)?;
            let mut committed = None;
            if tag == "persist-cold" {
                while started.elapsed() < START_DEADLINE {
                    let text = metrics(wm.admin).await?;
                    if prom::sum(&text, "watchmux_persist_commits_total", &[("resource", "pods"), ("kind", "whole")])
                        >= 1.0
                    {
                        committed = Some(started.elapsed().as_secs_f64());
                        break;
                    }
                    tokio::time::sleep(FIRST_LIST_POLL).await;
                }
            }
            let (rss_settled, _) = settle(wm.pid, SETTLE_LIMIT).await?;
            let load_seconds = metrics(wm.admin)
                .await
                .ok()
                .map(|t| prom::sum(&t, "watchmux_persist_load_seconds", &[("resource", "pods")]))
                .filter(|s| *s > 0.0);
            let relists = relists(&wm).await;
            let stop = wm.stop().await;
            persisted_bytes = Some(dir_bytes(&store));
            eprintln!(
                "million: {name}: ready in {:.2} s, every pod in {:.2} s, first LIST {:?} s, store committed {:?} s, RSS {} MiB",
                ready.readyz.as_secs_f64(),
                ready.synced.as_secs_f64(),
                first_list,
                committed,
                mib(rss_settled as f64)
            );
            starts.push(Start {
                name,
                readyz: ready.readyz.as_secs_f64(),
                synced: ready.synced.as_secs_f64(),
                first_list: if tag == "persist-warm" { first_list } else { None },
                committed,
                rss_settled,
                rss_peak,
                upstream_items: listed() - before,
                load_seconds: if tag == "persist-warm" { load_seconds } else { None },
                relists,
                stop_secs: stop.as_secs_f64(),
            });
        }
        let _ = std::fs::remove_dir_all(&store);
    }
    Ok(RunResult {
        rss_synced,
        object_bytes: pods.object_bytes,
        json_bytes,
        per_node,
        rss_settled,
        settle_secs: settled_in.as_secs_f64(),
        lists,
        latencies,
        idle_cpu_share,
        starts,
        persisted_bytes,
        unknown_paths: replay.unknown.lock().iter().map(|(p, n)| format!("{p} ×{n}")).collect(),
        cfg,
    })
}

fn us(v: f64) -> String {
    if v.is_nan() { "–".into() } else { fmt1(v) }
}

fn secs(v: Option<f64>) -> String {
    v.map_or("–".into(), fmt2)
}

pub fn markdown(r: &RunResult) {
    let cfg = &r.cfg;
    let count = cfg.pods as f64;
    println!(
        "### A million objects: {} pods of {} B over {} nodes ({} a node), watchmux on cores {}\n",
        thousands(cfg.pods),
        r.object_bytes,
        thousands(cfg.nodes),
        r.per_node,
        cfg.cpus
    );
    let mut t = Table::new(&["memory", "value"]);
    t.row(vec!["the objects' JSON".into(), format!("{} MiB", mib(r.json_bytes as f64))]);
    t.row(vec![
        format!("watchmux RSS, synced and settled ({:.1} s)", r.settle_secs),
        format!(
            "{} MiB, **{:.2} × the JSON** (goal ≤ 1.5); {} bytes an object beyond its JSON",
            mib(r.rss_settled as f64),
            r.rss_settled as f64 / r.json_bytes as f64,
            fmt1((r.rss_settled as f64 - r.json_bytes as f64) / count)
        ),
    ]);
    t.row(vec!["watchmux RSS as the cache synced".into(), format!("{} MiB", mib(r.rss_synced as f64))]);
    if let Some(cold) = r.starts.first() {
        t.row(vec![
            "peak RSS while listing (VmHWM)".into(),
            format!("{} MiB ({:.2} ×)", mib(cold.rss_peak as f64), cold.rss_peak as f64 / r.json_bytes as f64),
        ]);
    }
    t.print();

    let mut t = Table::new(&[
        "LIST",
        "bytes",
        "headers, ms",
        "last byte, s",
        "MiB/s",
        "pages",
        "RSS growth, MiB (goal ≤ 2 % of its size)",
    ]);
    for (name, _, pace, read) in &r.lists {
        t.row(vec![
            match pace {
                Some(p) => format!("{name} ({} MiB/s)", fmt1(p / 1024.0 / 1024.0)),
                None => (*name).to_owned(),
            },
            format!("{} MiB", mib(read.bytes as f64)),
            fmt1(read.headers.as_secs_f64() * 1e3),
            fmt2(read.last_byte.as_secs_f64()),
            fmt1(read.bytes as f64 / 1024.0 / 1024.0 / read.last_byte.as_secs_f64()),
            thousands(read.pages),
            format!("{} ({:.2} %)", mib(read.growth() as f64), read.growth_share() * 100.0),
        ]);
    }
    t.print();

    // The floors, each at its last byte: subtracted from the rows of the series after them.
    let floor = r.latencies.iter().find(|l| l.name.ends_with("on watchmux's core") && l.until == "last byte");
    let empty = r.latencies.iter().find(|l| l.name.starts_with("an empty namespace") && l.until == "last byte");
    let mut t = Table::new(&[
        "request (one h2c connection, one after another)",
        "until",
        "n",
        "p50 / p99 / max, µs",
        "p50 / p99 − loopback floor on watchmux's core, µs",
        "p50 / p99 − empty LIST, µs",
        "watchmux CPU a request, µs",
        "not 200; reconnects",
    ]);
    for l in &r.latencies {
        let minus = |base: Option<&Latency>, own: &str| match base {
            Some(b) if !l.name.starts_with("loopback floor") && !l.name.starts_with(own) => {
                format!("{} / {}", us(l.us(0.5) - b.us(0.5)), us(l.us(0.99) - b.us(0.99)))
            }
            _ => "–".into(),
        };
        t.row(vec![
            l.name.to_owned(),
            l.until.to_owned(),
            thousands(l.times.len()),
            format!("{} / {} / {}", us(l.us(0.5)), us(l.us(0.99)), us(l.us(1.0))),
            minus(floor, "loopback floor"),
            minus(empty, "an empty namespace"),
            l.server_cpu_us.map_or("–".into(), us),
            format!("{}; {}", l.failed, l.reconnects),
        ]);
    }
    t.print();

    let mut t = Table::new(&[
        "start",
        "/readyz, s",
        "every pod cached, s",
        "first node LIST served, s",
        "store committed, s",
        "pods the upstream listed",
        "relists (cause)",
        "RSS settled / peak, MiB",
        "stop, s",
    ]);
    for s in &r.starts {
        t.row(vec![
            s.name.to_owned(),
            fmt2(s.readyz),
            fmt2(s.synced),
            secs(s.first_list),
            secs(s.committed),
            thousands(s.upstream_items),
            if s.relists.is_empty() { "0".into() } else { s.relists.join(", ") },
            format!("{} / {}", mib(s.rss_settled as f64), mib(s.rss_peak as f64)),
            fmt2(s.stop_secs),
        ]);
    }
    t.print();
    if let Some(bytes) = r.persisted_bytes {
        println!(
            "Persisted store: {} MiB on disk ({:.2} × the JSON){}.",
            mib(bytes as f64),
            bytes as f64 / r.json_bytes as f64,
            r.starts
                .iter()
                .find_map(|s| s.load_seconds)
                .map_or(String::new(), |l| format!("; loading it took {} s (watchmux_persist_load_seconds)", fmt2(l)))
        );
    }
    if !r.unknown_paths.is_empty() {
        println!("The upstream answered 404: {}.", r.unknown_paths.join(", "));
    }
    println!();
}

pub fn json(r: &RunResult) -> serde_json::Value {
    let cfg = &r.cfg;
    json!({
        "pods": cfg.pods,
        "nodes": cfg.nodes,
        "pods_per_node": r.per_node,
        "object_bytes": r.object_bytes,
        "json_bytes": r.json_bytes,
        "cpus": cfg.cpus,
        "requests": cfg.requests,
        "rss_synced_bytes": r.rss_synced,
        "rss_settled_bytes": r.rss_settled,
        "rss_over_json": r.rss_settled as f64 / r.json_bytes as f64,
        "bytes_per_object_beyond_json": (r.rss_settled as f64 - r.json_bytes as f64) / cfg.pods as f64,
        "settle_secs": r.settle_secs,
        "lists": r.lists.iter().map(|(name, path, pace, l)| json!({
            "name": name,
            "path": path,
            "pace_bytes_per_sec": pace,
            "bytes": l.bytes,
            "pages": l.pages,
            "headers_ms": l.headers.as_secs_f64() * 1e3,
            "first_byte_ms": l.first_byte.as_secs_f64() * 1e3,
            "last_byte_s": l.last_byte.as_secs_f64(),
            "rss_before_bytes": l.rss_before,
            "rss_sampled_peak_bytes": l.rss_sampled_peak,
            "rss_hwm_bytes": l.rss_hwm,
            "rss_growth_bytes": l.growth(),
            "rss_growth_share": l.growth_share(),
        })).collect::<Vec<_>>(),
        "watchmux_idle_cpu_share": r.idle_cpu_share,
        "latency_us": r.latencies.iter().map(|l| json!({
            "name": l.name,
            "path": l.path,
            "until": l.until,
            "n": l.times.len(),
            "server_cpu_us_per_request": l.server_cpu_us,
            "p50": l.us(0.5),
            "p90": l.us(0.9),
            "p99": l.us(0.99),
            "max": l.us(1.0),
            "not_200": l.failed,
            "reconnects": l.reconnects,
        })).collect::<Vec<_>>(),
        "starts": r.starts.iter().map(|s| json!({
            "name": s.name,
            "readyz_s": s.readyz,
            "synced_s": s.synced,
            "first_node_list_s": s.first_list,
            "store_committed_s": s.committed,
            "upstream_items": s.upstream_items,
            "rss_settled_bytes": s.rss_settled,
            "rss_peak_bytes": s.rss_peak,
            "persist_load_seconds": s.load_seconds,
            "relists": s.relists,
            "stop_s": s.stop_secs,
        })).collect::<Vec<_>>(),
        "persisted_bytes": r.persisted_bytes,
        "unknown_paths": r.unknown_paths,
    })
}
